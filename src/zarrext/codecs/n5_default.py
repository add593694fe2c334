"""``n5_default``: N5 "default mode" blocks (array -> bytes), padded or truncated.

Configuration ``{"codecs": [transpose(full), bytes(big), <optional bytes->bytes>]}``.
An encoded chunk is an N5 block::

    mode (u16 BE, 0) | ndim (u16 BE) | ndim block sizes (u32 BE) | payload

where the payload is the nested chain's encoding of a block of the header's shape.
N5 lists dimensions in the same order as a ``zarr.json`` that keeps N5's dimension
order, and N5 data is column-major, hence the full transpose before ``bytes``.

Decoding uses the header's shape, not the chunk's: the Java N5 library writes
truncated edge blocks, tensorstore writes full ones, and either (or a mixture)
reads correctly. The decoded block is then cropped or filled with the fill value
to the chunk's shape. Encoding writes full blocks.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from zarr.abc.codec import (
    ArrayArrayCodec,
    ArrayBytesCodec,
    BytesBytesCodec,
)
from zarr.codecs.bytes import BytesCodec
from zarr.codecs.transpose import TransposeCodec
from zarr.core.array_spec import ArraySpec
from zarr.core.codec_pipeline import codecs_from_list_unchecked
from zarr.core.common import JSON, parse_named_configuration
from zarr.core.metadata.v3 import parse_codecs

from zarrext._nesting import NestingError, nested
from zarrext._zarr_compat import codec_supports_sync
from zarrext.codecs._alignment import aligned
from zarrext.codecs.chunk_context import current_chunk_index, describe_chunk

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar, ZDType
    from zarr.core.metadata.v3 import ChunkGridMetadata

__all__ = [
    "N5_DATA_TYPES",
    "N5DefaultCodec",
    "N5DefaultCodecError",
    "N5Header",
    "encode_header",
    "header_nbytes",
    "parse_header",
]

DEFAULT_MODE = 0
MODE_NAMES = {0: "default", 1: "varlength", 2: "object"}
# The value types N5 defines; the codec encodes nothing else.
N5_DATA_TYPES = frozenset(
    ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64"]
)
MAX_NDIM = 0xFFFF
MAX_BLOCK_SIZE = 0xFFFFFFFF


class N5DefaultCodecError(ValueError):
    """An N5 block or an n5_default configuration that cannot be used."""


@dataclass(frozen=True)
class N5Header:
    """A parsed N5 default-mode block header."""

    shape: tuple[int, ...]
    nbytes: int


def header_nbytes(ndim: int) -> int:
    """Size of a default-mode header for ``ndim`` dimensions."""
    return 4 + 4 * ndim


def encode_header(shape: Iterable[int]) -> bytes:
    """The default-mode header of a block of ``shape`` (N5 dimension order)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) > MAX_NDIM:
        raise N5DefaultCodecError(f"n5_default: {len(shape)} dimensions exceed N5's {MAX_NDIM}")
    if any(not 0 <= s <= MAX_BLOCK_SIZE for s in shape):
        raise N5DefaultCodecError(f"n5_default: block shape {shape} does not fit N5's uint32")
    return struct.pack(f">HH{len(shape)}I", DEFAULT_MODE, len(shape), *shape)


def parse_header(data: bytes, ndim: int, where: str) -> N5Header:
    """Parse and check the header at the start of an N5 block.

    Parameters
    ----------
    data : bytes
        The block, or at least its first ``4 + 4 * ndim`` bytes.
    ndim : int
        Number of dimensions the array has.
    where : str
        The block's name, for error messages.
    """
    raw = bytes(data)
    if len(raw) < 4:
        raise N5DefaultCodecError(
            f"n5_default, {where}: {len(raw)} bytes is too short for an N5 block header"
        )
    mode, block_ndim = struct.unpack_from(">HH", raw)
    if mode != DEFAULT_MODE:
        name = MODE_NAMES.get(mode, "unknown")
        raise N5DefaultCodecError(
            f"n5_default, {where}: block mode is {mode} ({name}); only default mode (0) "
            "blocks can be read"
        )
    if block_ndim != ndim:
        raise N5DefaultCodecError(
            f"n5_default, {where}: block header has {block_ndim} dimensions, the array has {ndim}"
        )
    n = header_nbytes(ndim)
    if len(raw) < n:
        raise N5DefaultCodecError(
            f"n5_default, {where}: {len(raw)} bytes is shorter than the {n}-byte header of "
            f"a {ndim}-dimensional block"
        )
    shape = struct.unpack_from(f">{ndim}I", raw, 4)
    return N5Header(shape=tuple(shape), nbytes=n)


def parse_nested(data: object) -> tuple[TransposeCodec, BytesCodec, BytesBytesCodec | None]:
    """Parse ``codecs``: a full transpose, ``bytes`` (big endian), at most one bytes->bytes."""
    if isinstance(data, str | bytes | Mapping) or not isinstance(data, Iterable):
        raise N5DefaultCodecError(
            f"n5_default: 'codecs' must be a list of codecs, got {type(data).__name__}"
        )
    try:
        with nested("n5_default"):
            codecs = parse_codecs(data)
        array_array, array_bytes, bytes_bytes = codecs_from_list_unchecked(codecs)
    except NestingError:
        raise
    except (TypeError, ValueError, AttributeError) as e:
        raise N5DefaultCodecError(f"n5_default: invalid nested codec chain: {e}") from e
    if len(array_array) != 1 or not isinstance(array_array[0], TransposeCodec):
        raise N5DefaultCodecError(
            "n5_default: the first nested codec must be a transpose (and the only "
            f"array->array codec), got {[c.to_dict() for c in array_array]}"
        )
    transpose = array_array[0]
    ndim = len(transpose.order)
    if tuple(transpose.order) != tuple(range(ndim - 1, -1, -1)):
        raise N5DefaultCodecError(
            f"n5_default: transpose order must be the full reversal {list(range(ndim - 1, -1, -1))}"
            f" (N5 blocks are column-major), got {list(transpose.order)}"
        )
    if not isinstance(array_bytes, BytesCodec):
        raise N5DefaultCodecError(
            f"n5_default: the second nested codec must be 'bytes', got {array_bytes.to_dict()}"
        )
    if array_bytes.endian not in ("big", None):
        raise N5DefaultCodecError(
            f"n5_default: N5 data is big-endian; bytes endian must be 'big', got "
            f"{array_bytes.endian!r}"
        )
    if len(bytes_bytes) > 1:
        raise N5DefaultCodecError(
            f"n5_default: at most one bytes->bytes codec is allowed, got {len(bytes_bytes)}"
        )
    return transpose, array_bytes, (bytes_bytes[0] if bytes_bytes else None)


@dataclass(frozen=True)
class N5DefaultCodec(ArrayBytesCodec):
    """N5 default-mode blocks: header, then transpose + big-endian bytes (+ compressor).

    Parameters
    ----------
    codecs : list of codecs or codec dicts, optional
        ``[transpose(order=[N-1..0]), bytes(endian="big"), optional compressor]``.
        Default (for a given ``ndim``): no compressor.
    ndim : int, optional
        Build the default chain for this many dimensions instead of passing ``codecs``.
    compressor : bytes->bytes codec or dict, optional
        With ``ndim``: the compressor to add.
    """

    transpose: TransposeCodec
    bytes_codec: BytesCodec
    compressor: BytesBytesCodec | None

    def __init__(
        self,
        codecs: Iterable[Any] | None = None,
        *,
        ndim: int | None = None,
        compressor: BytesBytesCodec | dict[str, JSON] | None = None,
        transpose: TransposeCodec | None = None,
        bytes_codec: BytesCodec | None = None,
    ) -> None:
        if transpose is not None or bytes_codec is not None:
            # dataclasses.replace passes the fields back by name.
            if transpose is None or bytes_codec is None or codecs is not None:
                raise N5DefaultCodecError(
                    "n5_default: pass transpose= and bytes_codec= together, without codecs="
                )
            codecs = [transpose, bytes_codec, *([compressor] if compressor is not None else [])]
        elif codecs is None:
            if ndim is None:
                raise N5DefaultCodecError("n5_default: pass codecs= or ndim=")
            codecs = [
                TransposeCodec(order=range(ndim - 1, -1, -1)),
                BytesCodec(endian="big"),
                *([compressor] if compressor is not None else []),
            ]
        elif ndim is not None or compressor is not None:
            raise N5DefaultCodecError("n5_default: pass either codecs= or ndim=/compressor=")
        t, b, c = parse_nested(codecs)
        object.__setattr__(self, "transpose", t)
        object.__setattr__(self, "bytes_codec", b)
        object.__setattr__(self, "compressor", c)

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, "n5_default")
        if set(configuration) != {"codecs"}:
            raise N5DefaultCodecError(
                "n5_default: configuration must be exactly {'codecs': [...]}, "
                f"got {configuration}"
            )
        return cls(configuration["codecs"])  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        return {
            "name": "n5_default",
            "configuration": {"codecs": [c.to_dict() for c in self.codecs]},
        }

    @property
    def codecs(self) -> tuple[ArrayArrayCodec | ArrayBytesCodec | BytesBytesCodec, ...]:
        """The nested chain, in order."""
        tail = (self.compressor,) if self.compressor is not None else ()
        return (self.transpose, self.bytes_codec, *tail)

    @property
    def ndim(self) -> int:
        return len(self.transpose.order)

    @property
    def is_fixed_size(self) -> bool:  # type: ignore[override]
        return self.compressor is None or self.compressor.is_fixed_size

    @property
    def _sync_capable(self) -> bool:
        return all(codec_supports_sync(c) for c in self.codecs)

    def _inner_specs(self, chunk_spec: ArraySpec) -> tuple[ArraySpec, ArraySpec]:
        """Specs of the nested chain: (transpose input, bytes input)."""
        return chunk_spec, self.transpose.resolve_metadata(chunk_spec)

    def _check_ndim(self, ndim: int) -> None:
        if ndim != self.ndim:
            raise N5DefaultCodecError(
                f"n5_default: transpose order has {self.ndim} entries, the array has "
                f"{ndim} dimensions"
            )

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        self._check_ndim(array_spec.ndim)
        outer, inner = self._inner_specs(array_spec)
        transpose = self.transpose.evolve_from_array_spec(outer)
        bytes_codec = self.bytes_codec.evolve_from_array_spec(inner)
        compressor = (
            self.compressor.evolve_from_array_spec(inner) if self.compressor is not None else None
        )
        if (transpose, bytes_codec, compressor) == (
            self.transpose,
            self.bytes_codec,
            self.compressor,
        ):
            return self
        return replace(self, transpose=transpose, bytes_codec=bytes_codec, compressor=compressor)

    def validate(
        self,
        *,
        shape: tuple[int, ...],
        dtype: ZDType[TBaseDType, TBaseScalar],
        chunk_grid: ChunkGridMetadata,
    ) -> None:
        self._check_ndim(len(shape))
        if len(shape) > MAX_NDIM:
            raise N5DefaultCodecError(f"n5_default: N5 allows at most {MAX_NDIM} dimensions")
        name = str(dtype.to_json(zarr_format=3))
        if name not in N5_DATA_TYPES:
            raise N5DefaultCodecError(
                f"n5_default: data type {name!r} has no N5 equivalent; N5 has "
                f"{sorted(N5_DATA_TYPES)}"
            )
        chunk_shape = getattr(chunk_grid, "chunk_shape", None)
        if chunk_shape is not None and any(s > MAX_BLOCK_SIZE for s in chunk_shape):
            raise N5DefaultCodecError(
                f"n5_default: chunk shape {tuple(chunk_shape)} does not fit N5's uint32 sizes"
            )

    # -- decode ---------------------------------------------------------------

    def _split(self, chunk_bytes: Buffer) -> tuple[N5Header, Buffer, str]:
        where = f"block of {describe_chunk(current_chunk_index())}"
        head = chunk_bytes[: header_nbytes(self.ndim)].to_bytes()
        header = parse_header(head, self.ndim, where)
        return header, chunk_bytes[header.nbytes :], where

    def _finish(
        self, header: N5Header, payload: Buffer, chunk_spec: ArraySpec, where: str
    ) -> NDBuffer:
        itemsize = chunk_spec.dtype.to_native_dtype().itemsize
        expected = math.prod(header.shape) * itemsize
        if len(payload) != expected:
            raise N5DefaultCodecError(
                f"n5_default, {where}: header says block shape {header.shape} "
                f"({expected} bytes of {chunk_spec.dtype.to_json(zarr_format=3)}), but the "
                f"{'decompressed ' if self.compressor is not None else ''}data is "
                f"{len(payload)} bytes"
            )
        block_spec = replace(chunk_spec, shape=header.shape)
        _, inner = self._inner_specs(block_spec)
        block = self.transpose._decode_sync(
            self.bytes_codec._decode_sync(aligned(payload), inner), block_spec
        )
        if header.shape == tuple(chunk_spec.shape):
            return block
        # A truncated (or oversized) edge block: fill the rest of the chunk.
        out = chunk_spec.prototype.nd_buffer.create(
            shape=chunk_spec.shape,
            dtype=chunk_spec.dtype.to_native_dtype(),
            fill_value=chunk_spec.fill_value,
        )
        common = tuple(
            slice(0, min(a, b)) for a, b in zip(header.shape, chunk_spec.shape, strict=True)
        )
        out[common] = block[common]
        return out

    def _payload_spec(self, chunk_spec: ArraySpec, header: N5Header) -> ArraySpec:
        return self._inner_specs(replace(chunk_spec, shape=header.shape))[1]

    def _compressor_error(self, e: Exception, payload: Buffer, where: str) -> N5DefaultCodecError:
        name = type(self.compressor).__name__
        return N5DefaultCodecError(
            f"n5_default, {where}: the {name} compressor cannot decode the "
            f"{len(payload)}-byte payload ({type(e).__name__}: {e})"
        )

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        header, payload, where = self._split(chunk_bytes)
        if self.compressor is not None:
            try:
                payload = self.compressor._decode_sync(  # type: ignore[attr-defined]
                    payload, self._payload_spec(chunk_spec, header)
                )
            except Exception as e:  # any compressor error is this block's error
                raise self._compressor_error(e, payload, where) from e
        return self._finish(header, payload, chunk_spec, where)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        header, payload, where = self._split(chunk_bytes)
        if self.compressor is not None:
            try:
                payload = await self.compressor._decode_single(
                    payload, self._payload_spec(chunk_spec, header)
                )
            except Exception as e:  # any compressor error is this block's error
                raise self._compressor_error(e, payload, where) from e
        return self._finish(header, payload, chunk_spec, where)

    # -- encode ---------------------------------------------------------------

    def _raw(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> tuple[Buffer, ArraySpec]:
        outer, inner = self._inner_specs(chunk_spec)
        transposed = self.transpose._encode_sync(chunk_array, outer)
        raw = self.bytes_codec._encode_sync(transposed, inner)  # type: ignore[arg-type]
        assert raw is not None  # bytes never drops a chunk
        return raw, inner

    def _with_header(self, payload: Buffer, chunk_spec: ArraySpec) -> Buffer:
        header = chunk_spec.prototype.buffer.from_bytes(encode_header(chunk_spec.shape))
        return header + payload

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        payload, inner = self._raw(chunk_array, chunk_spec)
        if self.compressor is not None:
            payload = self.compressor._encode_sync(payload, inner)  # type: ignore[attr-defined]
            if payload is None:
                return None
        return self._with_header(payload, chunk_spec)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        payload, inner = self._raw(chunk_array, chunk_spec)
        if self.compressor is not None:
            encoded = await self.compressor._encode_single(payload, inner)
            if encoded is None:
                return None
            payload = encoded
        return self._with_header(payload, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        size = input_byte_length
        if self.compressor is not None:
            size = self.compressor.compute_encoded_size(size, chunk_spec)
        return header_nbytes(self.ndim) + size
