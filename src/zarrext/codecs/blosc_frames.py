"""Blosc frames checked against the chunk that holds them before c-blosc reads them.

A blosc 1 frame (zarr's ``blosc`` codec, format 2's numcodecs ``Blosc``) begins with a
16-byte header whose bytes 12..16 give the frame's own size. c-blosc trusts it: a
chunk object cut short (an interrupted upload, a truncated file) is decoded past its
end into other values, with no error, by numcodecs (0.17) and imagecodecs alike, and
so by zarr-python. :func:`check_blosc_frame` refuses a chunk whose header gives
another size than the chunk holds, and :func:`checked_codec` gives a chain whose
blosc codecs check every chunk they decode (zarrext's pipelines use it):

- zarr's :class:`~zarr.codecs.BloscCodec` as :class:`CheckedBloscCodec`,
- zarr's ``numcodecs.blosc`` wrapper as :class:`CheckedNumcodecsBlosc`,
- a format 2 array's codec (zarr's ``V2Codec``) with numcodecs' ``Blosc`` as its
  compressor with :class:`CheckedBlosc` instead,

each nested in ``sharding_indexed``, ``conditional`` and ``optional`` too. Each
encodes, serializes and compares as the codec it checks.

A chunk with bytes after its frame is refused too: numcodecs writes the frame and
nothing else, so such an object is not what a writer stored (c-blosc would read the
frame and ignore the rest).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np
from numcodecs import Blosc
from numcodecs.compat import ensure_contiguous_ndarray
from zarr.codecs import BloscCodec
from zarr.codecs.numcodecs import Blosc as NumcodecsBlosc

from zarrext._zarr_compat import V2Codec
from zarrext.codecs.walk import map_nested

if TYPE_CHECKING:
    from collections.abc import Iterable

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = [
    "BLOSC_HEADER_NBYTES",
    "BloscFrameError",
    "CheckedBlosc",
    "CheckedBloscCodec",
    "CheckedNumcodecsBlosc",
    "check_blosc_frame",
    "checked_codec",
    "checked_codecs",
]

BLOSC_HEADER_NBYTES = 16
"""A blosc 1 frame's header: bytes 4..8 give the decoded size, 12..16 the frame's
own size, header included (little-endian)."""


class BloscFrameError(ValueError):
    """A chunk is not one whole blosc frame (cut short, or followed by other bytes)."""


def check_blosc_frame(frame: np.ndarray, decoded_nbytes: int | None = None) -> int:
    """Refuse ``frame`` (a chunk's bytes, as a NumPy array) unless its header gives
    its own size, and ``decoded_nbytes`` as the decoded size when that is given; the
    decoded size the header gives.

    Raises
    ------
    BloscFrameError
        The chunk is shorter than a header, or its header gives another frame size
        (or decoded size) than the chunk holds.
    """
    held = frame.nbytes
    if held < BLOSC_HEADER_NBYTES:
        raise BloscFrameError(f"{held} bytes is shorter than a frame's header")
    header = frame.reshape(-1).view(np.uint8)[:BLOSC_HEADER_NBYTES].tobytes()
    size = int.from_bytes(header[12:16], "little")
    if size != held:
        raise BloscFrameError(
            f"the frame's header gives {size} bytes, the chunk holds {held} "
            f"({'cut short' if size > held else 'other bytes after the frame'})"
        )
    decoded = int.from_bytes(header[4:8], "little")
    if decoded_nbytes is not None and decoded != decoded_nbytes:
        raise BloscFrameError(
            f"the frame's header gives {decoded} decoded bytes, the chunk has {decoded_nbytes}"
        )
    return decoded


class CheckedBlosc(Blosc):
    """numcodecs' ``Blosc`` that checks each frame it decodes (:func:`check_blosc_frame`)."""

    def decode(self, buf: Any, out: Any = None) -> Any:
        check_blosc_frame(ensure_contiguous_ndarray(buf))
        return super().decode(buf, out)


class _ComparesAsChecked:
    """Equality and hash of the codec class it checks (``checks``): a checked codec
    is the same codec in metadata."""

    checks: ClassVar[type]

    @classmethod
    def of(cls, codec: object) -> Self:
        """``codec`` (of the class checked, or a form of it) as this class, with every
        attribute as it is (zarr's blosc codec also records which settings it may
        still tune to the data type)."""
        return _as(cls, codec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self.checks):
            return NotImplemented
        return _fields_of(self, self.checks) == _fields_of(other, self.checks)

    def __hash__(self) -> int:
        return hash(_fields_of(self, self.checks))


def _fields_of(codec: object, cls: type) -> tuple[Any, ...]:
    """The fields ``cls``'s dataclass equality compares (hashable when the codec's are)."""
    return tuple(getattr(codec, f.name) for f in fields(cls) if f.compare)


class CheckedBloscCodec(_ComparesAsChecked, BloscCodec):
    """zarr's ``blosc`` codec that checks each frame it decodes."""

    checks = BloscCodec

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        check_blosc_frame(chunk_bytes.as_numpy_array())
        return super()._decode_sync(chunk_bytes, chunk_spec)


class CheckedNumcodecsBlosc(_ComparesAsChecked, NumcodecsBlosc):
    """zarr's ``numcodecs.blosc`` codec that checks each frame it decodes."""

    checks = NumcodecsBlosc

    def _decode_sync(self, chunk_data: Buffer, chunk_spec: ArraySpec) -> Buffer:
        check_blosc_frame(chunk_data.as_numpy_array())
        return super()._decode_sync(chunk_data, chunk_spec)


def checked_codecs(codecs: Iterable[Any]) -> tuple[Any, ...]:
    """``codecs`` with their blosc codecs checking each frame (:func:`checked_codec`)."""
    return tuple(checked_codec(c) for c in codecs)


def checked_codec(codec: Any) -> Any:
    """``codec`` as the checked form of its blosc codec, the codecs nested in it too;
    ``codec`` itself when nothing in it changes (its caches stay)."""
    if type(codec) is BloscCodec:
        return CheckedBloscCodec.of(codec)
    if type(codec) is NumcodecsBlosc:
        return CheckedNumcodecsBlosc.of(codec)
    if isinstance(codec, V2Codec):
        if type(codec.compressor) is not Blosc:
            return codec
        return replace(codec, compressor=_as(CheckedBlosc, codec.compressor))
    return map_nested(codec, checked_codec)


def _as[C](cls: type[C], codec: object) -> C:
    """``codec`` as an object of its subclass ``cls``, every attribute as it is."""
    new = object.__new__(cls)
    vars(new).update(vars(codec))
    return new
