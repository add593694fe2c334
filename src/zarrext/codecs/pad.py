"""``pad``: add (encode) or remove (decode) a fixed number of bytes at one end of a chunk.

Configuration ``{"location": "start"|"end", "nbytes": N, "padding": <base64>}``.
The padding is ``N`` literal bytes (zeros when ``padding`` is absent), written
byte for byte in front of (or after) every chunk, as spec 004 says: the same
``zarr.json`` gives the same stored bytes from every writer. Decoding drops ``N``
bytes from the configured end without looking at them, which is what lets a
``pad`` skip a foreign per-chunk header such as N5's.

A writer may instead give a function that computes each chunk's padding from the
encoded chunk (a TIFF header holding the compressed size, say: the spec's
"Handling Dynamic Padding"). That function is a runtime setting, given explicitly
(``PadCodec(padding=function)``, :meth:`PadCodec.with_padding`,
``zarrext.open_array(..., padding=function)``): ``zarr.json`` keeps ``nbytes``
(and any static ``padding``) only, and the function takes no part in codec equality.

A format may register a *check* (:func:`register_literal_check`): static padding
it recognises (a TIFF header, see :mod:`zarrext.formats.tiff`) that does not
describe the chunks it is written with is still written as it is, with one
warning per opened array (:class:`PaddingWarning`) naming the fields that
disagree and the fix.
"""

from __future__ import annotations

import base64
import binascii
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

from zarrext.codecs._alignment import aligned
from zarrext.codecs.chunk_context import ChunkIndex, current_chunk_index, describe_chunk

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = [
    "LiteralCheck",
    "PadCodec",
    "PadCodecError",
    "PaddedChunks",
    "PaddingFunction",
    "PaddingMismatch",
    "PaddingWarning",
    "SaidOnce",
    "literal_mismatch",
    "register_literal_check",
]

Location = Literal["start", "end"]
LOCATIONS: tuple[Location, ...] = ("start", "end")

PaddingFunction = Callable[[bytes, ChunkIndex | None, tuple[int, ...]], bytes]
"""``padding(encoded_chunk, chunk_index, chunk_shape) -> exactly nbytes bytes``.

``chunk_index`` is ``None`` when the array was not opened through zarrext (see
:func:`zarrext.codecs.chunk_context.current_chunk_index`); ``chunk_shape`` is the shape of the
chunk as the codec pipeline sees it.
"""


class PadCodecError(ValueError):
    """A pad configuration, or a chunk, the pad codec cannot accept."""


class PaddingWarning(UserWarning):
    """Static padding, written literally, that does not describe the chunks it goes with."""


@dataclass(frozen=True)
class PaddedChunks:
    """What is known of the chunks a static padding is written with.

    Attributes
    ----------
    shape : tuple of int
        Chunk shape as the pad codec's chain sees it (after array->array codecs).
    dtype : numpy.dtype
        Data type there.
    location : {"start", "end"}
        Where the padding goes.
    nbytes : int or None
        Size of what the pad codec receives: one chunk's encoded size when checked
        while encoding; the size every chunk has when checked from the metadata;
        ``None`` when it varies from chunk to chunk (a compressor before ``pad``).
    endian : str or None
        The ``bytes`` codec's byte order; ``None`` when unknown (while encoding).
    compressors : tuple of str or None
        Names of the codecs between the serializer and ``pad`` that make chunk
        sizes vary (``()``: none); ``None`` when unknown (while encoding).
    """

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    location: Location
    nbytes: int | None
    endian: str | None = None
    compressors: tuple[str, ...] | None = None


@dataclass(frozen=True)
class PaddingMismatch:
    """How a static padding disagrees with its chunks, as a format's check sees it.

    Attributes
    ----------
    kind : str
        What the padding is, e.g. ``"TIFF header"``.
    fields : tuple of str
        Each field that disagrees, with its value and the chunks' (one phrase each).
    fix : str
        What to do instead (a sentence).
    category : type of Warning
        The warning to give (a :class:`PaddingWarning`).
    """

    kind: str
    fields: tuple[str, ...]
    fix: str
    category: type[PaddingWarning] = PaddingWarning

    def describe(self) -> str:
        """The mismatch and its fix, in two sentences."""
        return (
            f"the {self.kind} in pad's padding does not describe the chunks it is written "
            f"with ({'; '.join(self.fields)}). pad writes its padding literally, so every "
            f"chunk gets this {self.kind} as it is; {self.fix}"
        )

    def message(self, where: str) -> str:
        """The warning about ``where`` (e.g. ``"array a.zarr"``)."""
        return f"{where}: {self.describe()}"


LiteralCheck = Callable[[bytes, PaddedChunks], PaddingMismatch | None]
"""``check(static_padding, chunks) -> mismatch or None`` (fits, or padding it does not know)."""

_CHECKS: list[LiteralCheck] = []


def register_literal_check(check: LiteralCheck) -> None:
    """Let ``check`` tell when static padding it recognises does not fit the chunks."""
    if check not in _CHECKS:
        _CHECKS.append(check)


def literal_mismatch(padding: bytes, chunks: PaddedChunks) -> PaddingMismatch | None:
    """The first registered check's verdict on ``padding`` written with ``chunks``."""
    for check in _CHECKS:
        mismatch = check(padding, chunks)
        if mismatch is not None:
            return mismatch
    return None


class SaidOnce:
    """Whether the writers of one opened array were told that its padding does not fit.

    Shared by a codec's copies (``replace``, zarrext's pipeline forms), so that one
    opened array warns once however many chunks, threads or copies write; a codec
    read from ``zarr.json`` gets a fresh one.
    """

    def __init__(self) -> None:
        self.said = False

    def first(self) -> bool:
        """True the first time only (codec threads encode chunks concurrently)."""
        if self.said:
            return False
        with _SAID_LOCK:
            first = not self.said
            self.said = True
        return first

    def __repr__(self) -> str:
        return f"SaidOnce(said={self.said})"


# One lock for all SaidOnce objects: a lock of their own would not pickle (Dask).
_SAID_LOCK = threading.Lock()


def parse_location(data: object) -> Location:
    """Validate ``location``: ``"start"`` or ``"end"``."""
    if data not in LOCATIONS:
        raise PadCodecError(f"pad: location must be 'start' or 'end', got {data!r}")
    return data


def parse_nbytes(data: object) -> int:
    """Validate ``nbytes``: a non-negative integer."""
    if isinstance(data, bool) or not isinstance(data, int | np.integer):
        raise PadCodecError(f"pad: nbytes must be an integer, got {data!r}")
    if data < 0:
        raise PadCodecError(f"pad: nbytes must be >= 0, got {data}")
    return int(data)


def parse_padding(data: object, nbytes: int) -> bytes | None:
    """Validate static ``padding``: base64 text or bytes whose length is ``nbytes``."""
    if data is None:
        return None
    if isinstance(data, str):
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as e:
            raise PadCodecError(f"pad: padding is not valid base64: {e}") from e
    elif isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
    else:
        raise PadCodecError(
            f"pad: padding must be base64 text, bytes or a function, got {type(data).__name__}"
        )
    if len(raw) != nbytes:
        raise PadCodecError(
            f"pad: padding decodes to {len(raw)} bytes but nbytes is {nbytes}; "
            "the two must be equal"
        )
    return raw


def _each(
    step: Callable[[Buffer, ArraySpec], Buffer],
    chunks_and_specs: Iterable[tuple[Buffer | None, ArraySpec]],
) -> list[Buffer | None]:
    """``step`` on every chunk of a batch, in order; a missing chunk stays None."""
    return [None if chunk is None else step(chunk, spec) for chunk, spec in chunks_and_specs]


@dataclass(frozen=True)
class PadCodec(BytesBytesCodec):
    """Fixed-size padding at the start or end of every chunk.

    Parameters
    ----------
    location : {"start", "end"}
        Where the padding goes.
    nbytes : int
        Number of padding bytes.
    padding : str, bytes or callable, optional
        Base64 text or bytes of length ``nbytes`` (written to ``zarr.json``), or a
        :data:`PaddingFunction` computing each chunk's padding when writing (never
        written to ``zarr.json``). Default: ``nbytes`` zero bytes.
    padding_func : callable, optional
        The same as a callable ``padding``; the field the function is kept in. With
        static ``padding`` too, ``zarr.json`` records the static bytes and chunks
        get the function's. Default: none, every chunk gets the static bytes.
    mismatch_said : SaidOnce, optional
        Whether this codec's writers were told that its static padding does not
        describe their chunks (see :func:`register_literal_check`); copies share it.
        Default: not yet.
    """

    is_fixed_size = True

    location: Location
    nbytes: int
    padding: bytes | None = None
    padding_func: PaddingFunction | None = field(default=None, compare=False, repr=False)
    mismatch_said: SaidOnce = field(default_factory=SaidOnce, compare=False, repr=False)

    def __init__(
        self,
        *,
        location: Location,
        nbytes: int,
        padding: str | bytes | PaddingFunction | None = None,
        padding_func: PaddingFunction | None = None,
        mismatch_said: SaidOnce | None = None,
    ) -> None:
        if callable(padding):
            if padding_func is not None:
                raise PadCodecError("pad: pass one padding function, not two")
            padding, padding_func = None, padding
        if padding_func is not None and not callable(padding_func):
            raise PadCodecError(f"pad: padding_func must be callable, got {padding_func!r}")
        nbytes_parsed = parse_nbytes(nbytes)
        static = parse_padding(padding, nbytes_parsed)
        object.__setattr__(self, "location", parse_location(location))
        object.__setattr__(self, "nbytes", nbytes_parsed)
        object.__setattr__(self, "padding", static)
        object.__setattr__(self, "padding_func", padding_func)
        object.__setattr__(
            self, "mismatch_said", SaidOnce() if mismatch_said is None else mismatch_said
        )

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, "pad")
        unknown = set(configuration) - {"location", "nbytes", "padding"}
        if unknown:
            raise PadCodecError(f"pad: unknown configuration keys {sorted(unknown)}")
        for key in ("location", "nbytes"):
            if key not in configuration:
                raise PadCodecError(f"pad: configuration needs {key!r}, got {configuration}")
        padding = configuration.get("padding")
        if padding is not None and not isinstance(padding, str):
            raise PadCodecError(f"pad: padding must be a base64 string, got {padding!r}")
        return cls(
            location=configuration["location"],  # type: ignore[arg-type]
            nbytes=configuration["nbytes"],  # type: ignore[arg-type]
            padding=padding,
        )

    def to_dict(self) -> dict[str, JSON]:
        configuration: dict[str, JSON] = {"location": self.location, "nbytes": self.nbytes}
        if self.padding is not None:
            configuration["padding"] = base64.b64encode(self.padding).decode("ascii")
        return {"name": "pad", "configuration": configuration}

    def with_padding(self, padding: PaddingFunction | None) -> Self:
        """This codec with another padding function (same metadata, equal codec).

        ``None`` goes back to the stored ``padding`` (or zeros), as a fresh codec does.
        """
        return replace(self, padding_func=padding)

    # -- encode ---------------------------------------------------------------

    def padding_for(self, encoded: Buffer, chunk_spec: ArraySpec) -> bytes:
        """The padding of one chunk: the function's answer, checked, or the static bytes.

        Static bytes are written as they are; when a registered check finds that
        they do not describe the chunk (a TIFF header made for other chunks), the
        first such chunk gives a warning (:class:`PaddingWarning`).
        """
        if self.padding_func is None:
            if self.padding is None:
                return bytes(self.nbytes)
            if not self.mismatch_said.said:
                self._check_literal(len(encoded), chunk_spec)
            return self.padding
        index = current_chunk_index()
        result = self.padding_func(encoded.to_bytes(), index, tuple(chunk_spec.shape))
        if not isinstance(result, bytes | bytearray | memoryview):
            raise PadCodecError(
                f"pad codec, {describe_chunk(index)}: the padding function returned "
                f"{type(result).__name__}, expected {self.nbytes} bytes"
            )
        if len(result) != self.nbytes:
            raise PadCodecError(
                f"pad codec, {describe_chunk(index)}: the padding function returned "
                f"{len(result)} bytes, but nbytes is {self.nbytes}"
            )
        return bytes(result)

    def _check_literal(self, encoded_nbytes: int, chunk_spec: ArraySpec) -> None:
        """Warn, once, when the static padding does not describe this chunk."""
        assert self.padding is not None
        try:
            dtype = np.dtype(chunk_spec.dtype.to_native_dtype())
        except (TypeError, AttributeError):  # a data type without a numpy form
            return
        chunks = PaddedChunks(
            shape=tuple(chunk_spec.shape), dtype=dtype, location=self.location,
            nbytes=encoded_nbytes,
        )
        mismatch = literal_mismatch(self.padding, chunks)
        if mismatch is not None and self.mismatch_said.first():
            index = current_chunk_index()
            where = "pad codec" if index is None else f"pad codec, {describe_chunk(index)}"
            warnings.warn(mismatch.message(where), mismatch.category, stacklevel=3)

    def _encode_buffer(self, nbytes: int) -> np.ndarray:
        """Memory for one encoded chunk: new here; the pipeline's form reuses memory."""
        return np.empty(nbytes, np.uint8)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        pad = np.frombuffer(self.padding_for(chunk_bytes, chunk_spec), dtype=np.uint8)
        data = chunk_bytes.as_numpy_array()
        out = self._encode_buffer(pad.size + data.size)
        # Two assignments, not np.concatenate: half its time for the chunk's copy.
        first, second = (pad, data) if self.location == "start" else (data, pad)
        out[: first.size] = first
        out[first.size :] = second
        return chunk_spec.prototype.buffer.from_array_like(out)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._encode_sync(chunk_bytes, chunk_spec)

    # -- decode ---------------------------------------------------------------

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        n = len(chunk_bytes)
        if n < self.nbytes:
            raise PadCodecError(
                f"pad codec, {describe_chunk(current_chunk_index())}: chunk is {n} bytes, "
                f"shorter than the {self.nbytes} bytes of padding at its {self.location}"
            )
        if self.location == "start":
            return aligned(chunk_bytes[self.nbytes :])
        return chunk_bytes[: n - self.nbytes]

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    # zarr-python's batched pipeline calls these with a batch of chunks, and its
    # default runs every chunk in an asyncio task of its own: more work than the
    # slice (decode) or the padding (encode) itself. In place, one pass.

    async def decode(
        self, chunks_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]
    ) -> Iterable[Buffer | None]:
        return _each(self._decode_sync, chunks_and_specs)

    async def encode(
        self, chunks_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]
    ) -> Iterable[Buffer | None]:
        return _each(self._encode_sync, chunks_and_specs)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length + self.nbytes
