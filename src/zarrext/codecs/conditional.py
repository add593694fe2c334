"""``conditional``: apply nested bytes->bytes codecs per chunk, as a header records.

Encoded chunk: ``header || payload``. The header is ``header_bits / 8`` bytes; bit
``i`` (little-endian bit order: byte 0 bit 0 is codec 0) says whether nested codec
``i`` was applied. Decoding reads the header and undoes the marked codecs in
reverse order. Reserved bits are zero; a chunk that sets one cannot be decoded.

The spec was first published under the name ``optional``; metadata that names it so
(with a ``codecs`` key) is read, and written back, under that name.

Which codecs a writer applies is a runtime decision (:mod:`zarrext.codecs.decisions`),
never stored in ``zarr.json`` and not part of codec equality.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Union, cast

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON

from zarrext._nesting import NestingError, nested
from zarrext._zarr_compat import codec_supports_sync, resolve_codec
from zarrext.codecs._alignment import aligned
from zarrext.codecs.chunk_context import current_chunk_index, describe_chunk
from zarrext.codecs.decisions import (
    NEVER_APPLY,
    NO_DECISION,
    ChunkEncoding,
    CodecInfo,
    Decision,
    DecisionLike,
    check_mask,
    format_mask,
    lowest_bit_beyond,
    resolve_decision,
)

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["ConditionalCodec", "ConditionalCodecError"]

NAMES = ("conditional", "optional")
# Header sizes beyond this are refused: a header is written for every chunk, and a
# hostile ``header_bits`` must not turn into a huge allocation per chunk.
MAX_HEADER_BITS = 1 << 16


ChunkBytes = Union["Buffer", np.ndarray, bytes]
"""A chunk's bytes on their way through the nested codecs: a zarr ``Buffer``, or for a
decision with ``opaque_bytes`` a one-dimensional ``uint8`` array or ``bytes``."""


class ConditionalCodecError(ValueError):
    """A chunk or a configuration the conditional codec cannot accept."""


def byte_array(value: ChunkBytes) -> np.ndarray:
    """``value``'s bytes as a one-dimensional ``uint8`` array, without a copy."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, bytes):
        return np.frombuffer(value, np.uint8)
    return value.as_numpy_array()


def parse_nested_codecs(data: object) -> tuple[BytesBytesCodec, ...]:
    """Parse the ``codecs`` list; every entry must be a bytes->bytes codec."""
    if isinstance(data, str | bytes | Mapping) or not isinstance(data, Iterable):
        raise ConditionalCodecError(
            f"conditional: 'codecs' must be a list of codecs, got {type(data).__name__}"
        )
    parsed: list[BytesBytesCodec] = []
    for i, item in enumerate(data):
        name = item.get("name") if isinstance(item, Mapping) else type(item).__name__
        codec: object = item
        if isinstance(item, Mapping):
            if not isinstance(name, str):
                raise ConditionalCodecError(
                    f"conditional: nested codec {i} needs a string 'name', got {name!r}"
                )
            # Parse first, check the kind second: a TypeError raised while parsing a
            # bytes->bytes codec's own configuration must not be reported as a wrong kind.
            try:
                with nested("conditional"):
                    codec = resolve_codec(dict(item))
            except NestingError:
                raise
            except (TypeError, KeyError, AttributeError) as e:
                raise ConditionalCodecError(
                    f"conditional: nested codec {i} ({name!r}) has an invalid "
                    f"configuration: {e}"
                ) from e
        if not isinstance(codec, BytesBytesCodec):
            raise ConditionalCodecError(
                f"conditional: nested codec {i} ({name!r}) is not a bytes->bytes codec; "
                "only bytes->bytes codecs (compressors, checksums, byte filters) can be "
                "applied conditionally"
            )
        parsed.append(codec)
    return tuple(parsed)


def parse_header_bits(data: object, n_codecs: int) -> int:
    """Validate ``header_bits``: a multiple of 8, at least the number of codecs."""
    if data is None:
        return -(-n_codecs // 8) * 8
    if isinstance(data, bool) or not isinstance(data, int):
        raise ConditionalCodecError(
            f"conditional: header_bits must be an integer, got {data!r}"
        )
    if data % 8:
        raise ConditionalCodecError(
            f"conditional: header_bits must be a multiple of 8, got {data}"
        )
    if data < n_codecs:
        raise ConditionalCodecError(
            f"conditional: header_bits ({data}) must be >= the number of nested codecs "
            f"({n_codecs})"
        )
    if data > MAX_HEADER_BITS:
        raise ConditionalCodecError(
            f"conditional: header_bits ({data}) exceeds the supported maximum "
            f"{MAX_HEADER_BITS}"
        )
    return data


@dataclass(frozen=True)
class ConditionalCodec(BytesBytesCodec):
    """Apply nested bytes->bytes codecs per chunk, recorded in a bitmask header.

    Parameters
    ----------
    codecs : list of codecs or codec dicts
        The nested bytes->bytes codecs, applied in order when enabled.
    header_bits : int, optional
        Header size in bits: a multiple of 8, at least ``len(codecs)``. Defaults to
        the smallest such value.
    decision : Decision, str, int or callable, optional
        How a writer picks each chunk's mask: a built-in's name
        (``"compress_if_smaller"``, ``"always_apply"``, ``"never_apply"``,
        ``"smallest"``, ``"spec_literal"``), a function in one of the spec's
        signatures, a fixed mask, or a :class:`~zarrext.codecs.decisions.Decision`. It
        goes with the codec object wherever it is given (``zarr.create_array``,
        xarray's ``encoding``). Default: none, and chunks are stored raw (mask 0);
        zarrext's writers (``zarrext.open_array``/``create_array``, xarray's
        ``to_zarr``) then take the decision the array's attributes record, or say
        once that they store chunks raw
        (:class:`~zarrext.codecs.decisions.NoDecisionWarning`).
    trial_encode : bool, optional
        For a decision function: trial-encode each codec before asking it.
        Defaults to what the function's signature asks for.
    configuration : dict, optional
        The spec's form: ``{"codecs": [...], "header_bits": ...}`` instead of the
        two first parameters.
    decision_function : callable, optional
        The spec's name for ``decision``.
    name : str
        ``"conditional"`` (default) or ``"optional"``, the name written to
        ``zarr.json``.
    """

    is_fixed_size = False

    codecs: tuple[BytesBytesCodec, ...]
    header_bits: int
    name: str = "conditional"
    decision: Decision = field(default=NO_DECISION, compare=False, repr=False)

    def __init__(
        self,
        codecs: Iterable[BytesBytesCodec | Mapping[str, Any]] | None = None,
        header_bits: int | None = None,
        decision: DecisionLike = None,
        trial_encode: bool | None = None,
        *,
        configuration: Mapping[str, Any] | None = None,
        decision_function: DecisionLike = None,
        name: str = "conditional",
    ) -> None:
        if configuration is not None:
            if codecs is not None or header_bits is not None:
                raise ConditionalCodecError(
                    "conditional: pass either configuration= or codecs=/header_bits=, not both"
                )
            unknown = set(configuration) - {"codecs", "header_bits"}
            if unknown:
                raise ConditionalCodecError(
                    f"conditional: unknown configuration keys {sorted(unknown)}"
                )
            if "codecs" not in configuration:
                raise ConditionalCodecError("conditional: configuration needs 'codecs'")
            codecs = configuration["codecs"]
            header_bits = configuration.get("header_bits")
        if codecs is None:
            raise ConditionalCodecError("conditional: 'codecs' is required")
        if decision is not None and decision_function is not None:
            raise ConditionalCodecError(
                "conditional: pass either decision= or decision_function=, not both"
            )
        if name not in NAMES:
            raise ConditionalCodecError(f"conditional: name must be one of {NAMES}, got {name!r}")
        codecs_parsed = parse_nested_codecs(codecs)
        decision_resolved = resolve_decision(
            decision if decision is not None else decision_function, trial_encode
        )
        decision_resolved.check(len(codecs_parsed))
        object.__setattr__(self, "codecs", codecs_parsed)
        object.__setattr__(self, "header_bits", parse_header_bits(header_bits, len(codecs_parsed)))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "decision", decision_resolved)

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        name = data.get("name")
        if name not in NAMES:
            raise ConditionalCodecError(f"conditional: expected name in {NAMES}, got {name!r}")
        configuration = data.get("configuration")
        if not isinstance(configuration, Mapping):
            raise ConditionalCodecError(
                f"{name}: configuration must be an object with 'codecs', got {configuration!r}"
            )
        return cls(configuration=configuration, name=str(name))

    def to_dict(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "configuration": {
                "codecs": [c.to_dict() for c in self.codecs],
                "header_bits": self.header_bits,
            },
        }

    def with_decision(self, decision: DecisionLike, trial_encode: bool | None = None) -> Self:
        """This codec with another runtime decision (same metadata, equal codec)."""
        resolved = resolve_decision(decision, trial_encode)
        resolved.check(len(self.codecs))
        return replace(self, decision=resolved)

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        evolved = tuple(c.evolve_from_array_spec(array_spec) for c in self.codecs)
        return self if evolved == self.codecs else replace(self, codecs=evolved)

    @property
    def header_nbytes(self) -> int:
        """Size of the per-chunk header in bytes."""
        return self.header_bits // 8

    @property
    def _sync_capable(self) -> bool:
        return all(self._encodes_sync)

    # Per codec object, not per chunk: zarr's sync check is an isinstance against a
    # runtime protocol, the costliest Python step of a chunk's encode.
    @functools.cached_property
    def _encodes_sync(self) -> tuple[bool, ...]:
        return tuple(codec_supports_sync(c) for c in self.codecs)

    @functools.cached_property
    def _byte_encoders(self) -> tuple[Callable[[np.ndarray], ChunkBytes] | None, ...]:
        """Each nested codec's encoder of raw bytes (its ``encode_bytes``: a
        one-dimensional ``uint8`` array in, an array or ``bytes`` out), or None."""
        return tuple(getattr(c, "encode_bytes", None) for c in self.codecs)

    @functools.cached_property
    def _codec_infos(self) -> tuple[CodecInfo, ...]:
        return tuple(CodecInfo(i, c) for i, c in enumerate(self.codecs))

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError

    def max_encoded_size(
        self,
        input_byte_length: int,
        nested_bound: Callable[[BytesBytesCodec, int], int | None] | None = None,
    ) -> int | None:
        """Upper bound of an encoded chunk's size, or None when there is none.

        A writer may apply any subset of the nested codecs, in order. When every
        nested codec's output is bounded by a non-decreasing bound of at least its
        input (``nested_bound(codec, n)``; compressors' worst cases are), applying
        all of them is the worst case: ``header + bound_k(... bound_1(input))``.
        This holds for any decision, so the slot size does not change with the
        decision a writer runs. Else, ``input + header`` when the decision never
        lets the payload grow (e.g. ``compress_if_smaller``), else None.

        Parameters
        ----------
        input_byte_length : int
            Size of the chunk before encoding.
        nested_bound : callable, optional
            ``(codec, n) -> bound or None`` for a nested codec (zarrext's
            :func:`zarrext.sharding.bounds.encoded_size_bound`); without it only
            fixed-size nested codecs are bounded.
        """
        size: int | None = input_byte_length
        for codec in self.codecs:
            if size is None:
                break
            if codec.is_fixed_size:
                # bytes->bytes compute_encoded_size does not look at the spec
                size = int(codec.compute_encoded_size(size, None))  # type: ignore[arg-type]
            else:
                size = None if nested_bound is None else nested_bound(codec, size)
        if size is not None:
            return max(size, input_byte_length) + self.header_nbytes
        if self.decision.guarantees_no_inflation:
            return input_byte_length + self.header_nbytes
        return None

    # -- header ---------------------------------------------------------------

    def read_mask(self, chunk_bytes: Buffer) -> int:
        """The mask stored in an encoded chunk's header, validated."""
        n = self.header_nbytes
        if len(chunk_bytes) < n:
            raise ConditionalCodecError(
                f"{self.name} codec, {describe_chunk(current_chunk_index())}: "
                f"{len(chunk_bytes)} bytes is shorter than the {n}-byte header"
            )
        # Through numpy: a Buffer slice per chunk costs more than the rest of this.
        mask = int.from_bytes(chunk_bytes.as_numpy_array()[:n].tobytes(), "little")
        bit = lowest_bit_beyond(mask, len(self.codecs))
        if bit is not None:
            raise ConditionalCodecError(
                f"{self.name} codec, {describe_chunk(current_chunk_index())}: header sets bit "
                f"{bit}, but only "
                f"{len(self.codecs)} nested codecs are configured (bits 0-{len(self.codecs) - 1}); "
                "the chunk was written with codecs this metadata does not list"
            )
        return mask

    def _encode_buffer(self, nbytes: int) -> np.ndarray:
        """Memory for one encoded chunk: new here; the pipeline's form reuses memory."""
        return np.empty(nbytes, np.uint8)

    def _with_header(self, mask: int, payload: ChunkBytes, chunk_spec: ArraySpec) -> Buffer:
        n = self.header_nbytes
        values = byte_array(payload)
        out = self._encode_buffer(n + values.size)
        # Two assignments, not np.concatenate: half its time for the payload's copy.
        if n == 1:
            out[0] = mask
        else:
            out[:n] = np.frombuffer(mask.to_bytes(n, "little"), np.uint8)
        out[n:] = values
        return chunk_spec.prototype.buffer.from_array_like(out)

    # -- decode ---------------------------------------------------------------

    def _payload_error(self, i: int, mask: int, error: Exception) -> ConditionalCodecError:
        # Nested decoders fail with RuntimeError, OSError, ...; name the codec and chunk.
        return ConditionalCodecError(
            f"{self.name} codec, {describe_chunk(current_chunk_index())}: nested codec {i} "
            f"({self.codecs[i].to_dict()['name']!r}) failed to decode the payload "
            f"(header mask {format_mask(mask, len(self.codecs))}): {type(error).__name__}: {error}"
        )

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        mask = self.read_mask(chunk_bytes)
        data = chunk_bytes[self.header_nbytes :]
        for i in reversed(range(len(self.codecs))):
            if mask >> i & 1:
                try:
                    data = self.codecs[i]._decode_sync(data, chunk_spec)  # type: ignore[attr-defined]
                except Exception as e:
                    raise self._payload_error(i, mask, e) from e
        return aligned(data)  # no nested codec applied: a view behind the header

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        mask = self.read_mask(chunk_bytes)
        data = chunk_bytes[self.header_nbytes :]
        for i in reversed(range(len(self.codecs))):
            if mask >> i & 1:
                try:
                    data = await self.codecs[i]._decode_single(data, chunk_spec)
                except Exception as e:
                    raise self._payload_error(i, mask, e) from e
        return aligned(data)  # no nested codec applied: a view behind the header

    # -- encode ---------------------------------------------------------------

    def _encode_step(
        self,
        i: int,
        buffer: Buffer,
        chunk_spec: ArraySpec,
        loop: asyncio.AbstractEventLoop | None,
    ) -> Buffer:
        """Nested codec ``i``'s encoding of ``buffer``, through zarr's codec API."""
        codec = self.codecs[i]
        if self._encodes_sync[i]:
            out = codec._encode_sync(buffer, chunk_spec)  # type: ignore[attr-defined]
        elif loop is not None:
            out = asyncio.run_coroutine_threadsafe(
                codec._encode_single(buffer, chunk_spec), loop
            ).result()
        else:
            raise ConditionalCodecError(
                f"{self.name}: nested codec {i} has no synchronous encoder"
            )
        if out is None:
            raise ConditionalCodecError(f"{self.name}: nested codec {i} returned no bytes")
        return cast("Buffer", out)

    def _encode_chunk(
        self,
        chunk_bytes: Buffer,
        chunk_spec: ArraySpec,
        loop: asyncio.AbstractEventLoop | None,
    ) -> Buffer:
        data: ChunkBytes
        step: Callable[[int, Any], Any]
        if self.decision.opaque_bytes:
            # The decision only measures and hands back: raw bytes, no Buffer per step.
            byte_encoders = self._byte_encoders

            def encode_bytes(i: int, value: ChunkBytes) -> ChunkBytes:
                values = byte_array(value)
                encoder = byte_encoders[i]
                if encoder is not None:
                    return encoder(values)
                buffer = chunk_spec.prototype.buffer.from_array_like(values)
                return self._encode_step(i, buffer, chunk_spec, loop).as_numpy_array()

            data, step = chunk_bytes.as_numpy_array(), encode_bytes
        else:

            def encode_buffer(i: int, buffer: Buffer) -> Buffer:
                return self._encode_step(i, buffer, chunk_spec, loop)

            data, step = chunk_bytes, encode_buffer
        index = current_chunk_index()
        # ChunkEncoding is typed for Buffers, its public form: an opaque_bytes decision
        # only measures what it holds
        chunk = ChunkEncoding(
            index, self._codec_infos, cast("Buffer", data),
            cast("Callable[[int, Buffer], Buffer]", step),
        )
        mask, payload = self.decision.choose(chunk)
        mask = check_mask(
            mask, len(self.codecs), lambda: f"{self.name} codec, {describe_chunk(index)}"
        )
        return self._with_header(mask, payload, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._encode_chunk(chunk_bytes, chunk_spec, None)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        if self.decision is NEVER_APPLY or self.decision is NO_DECISION:
            return self._with_header(0, chunk_bytes, chunk_spec)
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(self._encode_chunk, chunk_bytes, chunk_spec, loop)
