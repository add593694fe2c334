"""TIFF headers for chunks: the header and IFDs :func:`header` builds for a chunk
stored after them (a one-page image, or a z-stack of pages), their size, the
padding function that writes each chunk's own (:func:`dynamic_header`), and the
one reader of a stored header's IFDs (:func:`read_ifds`)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from zarrext.codecs.chunk_context import ChunkIndex, describe_chunk
from zarrext.codecs.pad import PaddingFunction, PaddingWarning

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "COMPRESSION_TAGS",
    "LONG",
    "SAMPLE_FORMATS",
    "SHORT",
    "TIFF_HEADER_NBYTES",
    "Compression",
    "Endian",
    "Ifd",
    "IfdEntry",
    "TiffIfds",
    "TiffHeaderError",
    "TiffHeaderWarning",
    "dynamic_header",
    "header",
    "header_nbytes",
    "read_ifds",
]

Endian = Literal["little", "big"]
Compression = Literal["zstd", "deflate"]

# TIFF Compression tag values: 8 is Adobe Deflate (a zlib stream), 50000 is the
# registered Zstandard value that libtiff and imagecodecs use.
COMPRESSION_TAGS: dict[str | None, int] = {None: 1, "deflate": 8, "zstd": 50000}

# SampleFormat: 1 unsigned integer (the default, so it is left out and the spec's
# 110-byte uint16 header comes out byte for byte), 2 signed integer, 3 IEEE float.
SAMPLE_FORMATS = {"u": 1, "i": 2, "f": 3}

# The IFD field types of the numbers a header holds.
SHORT, LONG = 3, 4
TIFF_HEADER_NBYTES = 8
# Where StripByteCounts' value sits: the 8th IFD entry (after 8-byte header and
# 2-byte entry count), 8 bytes into the entry.
_STRIP_BYTE_COUNTS_VALUE = TIFF_HEADER_NBYTES + 2 + 12 * 7 + 8


class TiffHeaderError(ValueError):
    """A chunk shape, data type or chunk TIFF cannot describe."""


class TiffHeaderWarning(PaddingWarning):
    """Chunks written with a TIFF header (literal, or from a padding function) that
    does not describe them."""


@dataclass(frozen=True)
class _Layout:
    pages: int
    width: int
    height: int
    bits: int
    sample_format: int

    @property
    def ifd_nbytes(self) -> int:
        # Entry count, 12 bytes per entry (SampleFormat only when not unsigned), next IFD.
        return 2 + 12 * (8 if self.sample_format == 1 else 9) + 4

    @property
    def nbytes(self) -> int:
        """The TIFF header, then one IFD per page."""
        return TIFF_HEADER_NBYTES + self.pages * self.ifd_nbytes

    @property
    def page_nbytes(self) -> int:
        return self.width * self.height * self.bits // 8


def _layout(chunk_shape: Sequence[int], dtype: DTypeLike) -> _Layout:
    shape = tuple(int(s) for s in chunk_shape)
    if len(shape) < 2:
        raise TiffHeaderError(
            f"tiff: chunks must be 2-D (rows, columns) or 3-D (pages, rows, columns), "
            f"got shape {shape}"
        )
    if any(s != 1 for s in shape[:-3]):
        raise TiffHeaderError(
            f"tiff: chunks of shape {shape} are no stack of 2-D pages: a TIFF holds "
            "(pages, rows, columns), so chunks must be 1 along every dimension before those"
        )
    if any(s < 1 or s > 0xFFFFFFFF for s in shape):
        raise TiffHeaderError(f"tiff: chunk shape {shape} does not fit TIFF's 32-bit sizes")
    dt = np.dtype(dtype)
    if dt.kind not in SAMPLE_FORMATS:
        raise TiffHeaderError(
            f"tiff: data type {dt} is not an integer or float type TIFF can store"
        )
    if dt.kind == "f" and dt.itemsize not in (2, 4, 8):
        raise TiffHeaderError(f"tiff: float data type {dt} has no TIFF sample format")
    return _Layout(
        pages=shape[-3] if len(shape) > 2 else 1,
        width=shape[-1],
        height=shape[-2],
        bits=8 * dt.itemsize,
        sample_format=SAMPLE_FORMATS[dt.kind],
    )


@dataclass(frozen=True)
class IfdEntry:
    """One entry of an image file directory (IFD)."""

    tag: int
    kind: int
    """Its field type (SHORT, LONG, ...)."""
    count: int
    field: int
    """Where its 4-byte value field starts: the values themselves when they fit in
    it, else the offset of the values."""


@dataclass(frozen=True)
class Ifd:
    """An image file directory: where it starts, its entries, and the offset of the
    next one (0: it is the last)."""

    offset: int
    entries: tuple[IfdEntry, ...]
    next: int

    @property
    def end(self) -> int:
        """Where it ends: its entry count, its entries and the next IFD's offset."""
        return self.offset + 2 + 12 * len(self.entries) + 4


@dataclass(frozen=True)
class TiffIfds:
    """The IFDs a classic TIFF header holds whole, in the order their chain links them."""

    byte_order: Literal["<", ">"]
    ifds: tuple[Ifd, ...]


def read_ifds(padding: bytes) -> TiffIfds | None:
    """The IFDs of a classic TIFF file that starts with ``padding``: the chain from the
    header's first offset, each IFD once, up to the first that does not lie whole
    within ``padding`` (what it holds is unknown); ``None`` when ``padding`` does not
    start as a classic TIFF file (``II`` or ``MM``, then 42)."""
    if len(padding) < TIFF_HEADER_NBYTES or padding[:2] not in (b"II", b"MM"):
        return None
    bo: Literal["<", ">"] = "<" if padding[:2] == b"II" else ">"
    magic, at = struct.unpack_from(f"{bo}HI", padding, 2)
    if magic != 42:
        return None
    ifds: list[Ifd] = []
    seen: set[int] = set()
    while at and at not in seen and at + 2 <= len(padding):
        seen.add(at)
        (n,) = struct.unpack_from(f"{bo}H", padding, at)
        if at + 2 + 12 * n + 4 > len(padding):
            break
        entries = []
        for entry in range(at + 2, at + 2 + 12 * n, 12):
            tag, kind, count = struct.unpack_from(f"{bo}HHI", padding, entry)
            entries.append(IfdEntry(tag, kind, count, entry + 8))
        (following,) = struct.unpack_from(f"{bo}I", padding, at + 2 + 12 * n)
        ifds.append(Ifd(at, tuple(entries), following))
        at = following
    return TiffIfds(bo, tuple(ifds))


def header_nbytes(dtype: DTypeLike, chunk_shape: Sequence[int] | None = None) -> int:
    """Size of the header :func:`header` builds for ``dtype`` and ``chunk_shape``.

    110 or 122 bytes for a one-page (2-D) chunk, the default; a chunk of ``z``
    pages (``(z, rows, columns)``) has ``8 + z * 102`` (or ``z * 114``) bytes.
    """
    return _layout((1, 1) if chunk_shape is None else chunk_shape, dtype).nbytes


def header(
    chunk_shape: Sequence[int],
    dtype: DTypeLike,
    *,
    endian: Endian = "little",
    compression: Compression | None = None,
    strip_byte_count: int | None = None,
) -> bytes:
    """The TIFF header and IFDs for one chunk stored after it, one strip per page.

    A 2-D chunk is one page. A 3-D chunk ``(z, rows, columns)`` is ``z`` pages
    (a z-stack, as microscopy tools read it): all IFDs come first, then the
    chunk's bytes, in which page ``k`` is the ``k``-th plane (C order).

    Parameters
    ----------
    chunk_shape : (rows, columns) or (pages, rows, columns)
        The chunk's shape; leading dimensions of size 1 may come before.
    dtype : data type
        An integer or float type (8 to 64 bits).
    endian : {"little", "big"}
        Byte order of the file; must match the ``bytes`` codec's.
    compression : {None, "zstd", "deflate"}
        How the strip is compressed (the TIFF Compression tag). One page only:
        zarr compresses a chunk as one stream, TIFF compresses each page alone.
    strip_byte_count : int, optional
        Size of each page's strip. Defaults to the uncompressed size; required
        with a compression.

    Returns
    -------
    bytes
        ``header_nbytes(dtype, chunk_shape)`` bytes: the 8-byte TIFF header, then
        one IFD per page, whose strips follow the last IFD back to back.
    """
    layout = _layout(chunk_shape, dtype)
    if compression not in COMPRESSION_TAGS:
        raise TiffHeaderError(
            f"tiff: compression must be None, 'zstd' or 'deflate', got {compression!r}"
        )
    if compression is not None and layout.pages > 1:
        raise TiffHeaderError(
            f"tiff: compressed chunks of shape {tuple(chunk_shape)} cannot be multi-page TIFFs: "
            "zarr compresses a chunk as one stream, TIFF each page alone; use "
            "compression=None, or chunks of 1 page"
        )
    if strip_byte_count is None:
        if compression is not None:
            raise TiffHeaderError("tiff: a compressed strip needs its strip_byte_count")
        strip_byte_count = layout.page_nbytes
    if not 0 <= strip_byte_count <= 0xFFFFFFFF:
        raise TiffHeaderError(
            f"tiff: strip of {strip_byte_count} bytes does not fit a classic (32-bit) TIFF"
        )
    last_strip = layout.nbytes + (layout.pages - 1) * strip_byte_count
    if last_strip > 0xFFFFFFFF:
        raise TiffHeaderError(
            f"tiff: chunks of shape {tuple(chunk_shape)} put their last page at byte "
            f"{last_strip}, past what a classic (32-bit) TIFF can address; use fewer pages"
        )
    if endian not in ("little", "big"):
        raise TiffHeaderError(f"tiff: endian must be 'little' or 'big', got {endian!r}")
    bo = "<" if endian == "little" else ">"

    def entry(tag: int, value: int, *, long: bool = False) -> bytes:
        # A SHORT sits in the first two bytes of the 4-byte value field, which only
        # matters (and is only right this way) for big-endian files.
        if long or value > 0xFFFF:
            return struct.pack(f"{bo}HHII", tag, LONG, 1, value)
        return struct.pack(f"{bo}HHIHH", tag, SHORT, 1, value, 0)

    def ifd(page: int) -> bytes:
        entries = [
            entry(256, layout.width),  # ImageWidth
            entry(257, layout.height),  # ImageLength
            entry(258, layout.bits),  # BitsPerSample
            entry(259, COMPRESSION_TAGS[compression]),  # Compression
            entry(262, 1),  # PhotometricInterpretation: BlackIsZero
            entry(273, layout.nbytes + page * strip_byte_count, long=True),  # StripOffsets
            entry(278, layout.height),  # RowsPerStrip
            entry(279, strip_byte_count, long=True),  # StripByteCounts
        ]
        if layout.sample_format != 1:
            entries.append(entry(339, layout.sample_format))  # SampleFormat
        last = page == layout.pages - 1
        next_ifd = 0 if last else TIFF_HEADER_NBYTES + (page + 1) * layout.ifd_nbytes
        return (
            struct.pack(f"{bo}H", len(entries)) + b"".join(entries)
            + struct.pack(f"{bo}I", next_ifd)
        )

    magic = b"II" if endian == "little" else b"MM"
    out = magic + struct.pack(f"{bo}HI", 42, TIFF_HEADER_NBYTES)
    out += b"".join(ifd(page) for page in range(layout.pages))
    assert len(out) == layout.nbytes
    return out


def dynamic_header(
    dtype: DTypeLike,
    *,
    endian: Endian = "little",
    compression: Compression | None = None,
) -> PaddingFunction:
    """A ``pad`` padding function writing each chunk's header from its encoded size.

    The returned function takes ``(encoded_chunk, chunk_index, chunk_shape)`` and
    returns :func:`header` for that chunk shape with the strip byte count set to
    ``len(encoded_chunk)``. Its size is fixed, so it serves one-page chunks only;
    a multi-page (3-D) chunk needs :func:`pad_codec` with its ``chunk_shape``.
    """
    header(  # fail now, not at the first write, on a type or compression TIFF lacks
        (1, 1), dtype, endian=endian, compression=compression, strip_byte_count=0
    )
    count_format = "<I" if endian == "little" else ">I"

    @functools.lru_cache(maxsize=16)
    def template(shape: tuple[int, ...]) -> bytes:
        out = header(shape, dtype, endian=endian, compression=compression, strip_byte_count=0)
        if len(out) != header_nbytes(dtype):
            raise TiffHeaderError(
                f"tiff: chunks of shape {shape} are {_layout(shape, dtype).pages} pages, but a "
                "header function without a chunk shape writes one; build the codec with "
                "pad_codec(..., chunk_shape=...)"
            )
        return out

    def padding(encoded: bytes, index: ChunkIndex | None, shape: tuple[int, ...]) -> bytes:
        # Only the strip byte count differs between chunks of one shape: patch it in.
        try:
            out = bytearray(template(tuple(shape)))
        except TiffHeaderError as e:
            raise TiffHeaderError(f"{e} ({describe_chunk(index)})") from e
        if len(encoded) > 0xFFFFFFFF:
            raise TiffHeaderError(
                f"tiff: strip of {len(encoded)} bytes does not fit a classic (32-bit) TIFF "
                f"({describe_chunk(index)})"
            )
        struct.pack_into(count_format, out, _STRIP_BYTE_COUNTS_VALUE, len(encoded))
        return bytes(out)

    return padding
