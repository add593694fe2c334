"""``pad``: add (encode) or remove (decode) a fixed number of bytes at one end of a chunk.

Configuration ``{"location": "start"|"end", "nbytes": N, "padding": <base64>}``.
The padding is ``N`` literal bytes (zeros when ``padding`` is absent). Decoding
drops ``N`` bytes from the configured end without looking at them, which is what
lets a ``pad`` skip a foreign per-chunk header such as N5's.

A writer may instead give a function that computes each chunk's padding from the
encoded chunk (a TIFF header holding the compressed size, say). That function is
a runtime setting: ``zarr.json`` keeps ``nbytes`` only, and the function takes no
part in codec equality.

A format may also register a *template*: static ``padding`` it recognises (a TIFF
header, see :mod:`zarrext.formats.tiff`) and fills in per chunk from the encoded
chunk alone. Such a codec, however the array was opened (plain ``zarr``, xarray),
writes each chunk's filled-in padding; readers drop the padding as always.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

from zarrext._context import ChunkIndex, current_chunk_index, describe_chunk
from zarrext.codecs._alignment import aligned

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["PadCodec", "PadCodecError", "PaddingFunction", "PaddingTemplate", "register_template"]

Location = Literal["start", "end"]
LOCATIONS: tuple[Location, ...] = ("start", "end")

PaddingFunction = Callable[[bytes, ChunkIndex | None, tuple[int, ...]], bytes]
PaddingTemplate = Callable[[bytes], PaddingFunction | None]
"""``template(static_padding) -> padding function or None`` (not a template it knows)."""
"""``padding(encoded_chunk, chunk_index, chunk_shape) -> exactly nbytes bytes``.

``chunk_index`` is ``None`` when the array was not opened through zarrext (see
:func:`zarrext._context.current_chunk_index`); ``chunk_shape`` is the shape of the
chunk as the codec pipeline sees it.
"""


class PadCodecError(ValueError):
    """A pad configuration, or a chunk, the pad codec cannot accept."""


_TEMPLATES: list[PaddingTemplate] = []


def register_template(template: PaddingTemplate) -> None:
    """Let ``template`` turn static padding it recognises into a padding function."""
    if template not in _TEMPLATES:
        _TEMPLATES.append(template)


def _template_function(padding: bytes) -> PaddingFunction | None:
    for template in _TEMPLATES:
        function = template(padding)
        if function is not None:
            return function
    return None


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
        get the function's. Default: the function of a registered template that
        recognises the static ``padding`` (:func:`register_template`), if any.
    """

    is_fixed_size = True

    location: Location
    nbytes: int
    padding: bytes | None = None
    padding_func: PaddingFunction | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        *,
        location: Location,
        nbytes: int,
        padding: str | bytes | PaddingFunction | None = None,
        padding_func: PaddingFunction | None = None,
    ) -> None:
        if callable(padding):
            if padding_func is not None:
                raise PadCodecError("pad: pass one padding function, not two")
            padding, padding_func = None, padding
        if padding_func is not None and not callable(padding_func):
            raise PadCodecError(f"pad: padding_func must be callable, got {padding_func!r}")
        nbytes_parsed = parse_nbytes(nbytes)
        static = parse_padding(padding, nbytes_parsed)
        if padding_func is None and static is not None:
            padding_func = _template_function(static)
        object.__setattr__(self, "location", parse_location(location))
        object.__setattr__(self, "nbytes", nbytes_parsed)
        object.__setattr__(self, "padding", static)
        object.__setattr__(self, "padding_func", padding_func)

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
        """The padding of one chunk: the function's answer, checked, or the static bytes."""
        if self.padding_func is None:
            return self.padding if self.padding is not None else bytes(self.nbytes)
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

    def _encode_buffer(self, nbytes: int) -> np.ndarray:
        """Memory for one encoded chunk: new here; the pipeline's form reuses memory."""
        return np.empty(nbytes, np.uint8)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        pad = np.frombuffer(self.padding_for(chunk_bytes, chunk_spec), dtype=np.uint8)
        data = chunk_bytes.as_numpy_array()
        parts = (pad, data) if self.location == "start" else (data, pad)
        out = self._encode_buffer(pad.size + data.size)
        np.concatenate(parts, out=out)
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
