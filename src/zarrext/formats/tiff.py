"""Every chunk a TIFF file: a ``pad`` codec that prepends a TIFF header.

A 2-D chunk encoded by ``bytes`` (and optionally a compressor) is the single strip
of a one-image TIFF once a header and image file directory (IFD) are put in front
of it. The header's size depends only on the data type, so ``pad``'s ``nbytes`` is
fixed; its contents depend on the strip's byte count, which a compressor makes
per-chunk, so compressed arrays use a padding function (:func:`dynamic_header`).

A 3-D chunk ``(z, rows, columns)``, uncompressed, is a multi-page TIFF (a
z-stack, what microscopy tools read): ``bytes`` lays its planes out one after
the other, so the header holds ``z`` IFDs whose strips are those planes. Its
size depends on ``z`` too, still fixed per array. A compressed chunk is one
stream that no page's strip can point into, so compressed chunks are one page.

Codec order ``[bytes, <compressor>, pad(start)]`` puts the header outside the
compressed stream, which is what a TIFF reader expects: header, IFD, then the
strip, compressed as the IFD's Compression tag says.

``pad`` writes its static ``padding`` literally (spec 004): a header in
``zarr.json`` is right for the chunks it was made for, uncompressed, and for no
others. A header computed per chunk is a padding function, given explicitly
(:func:`dynamic_header`, :func:`template_function`; :func:`create_kwargs` and
:func:`pad_codec` give their ``pad`` codec one): ``zarrext.open_array(path,
padding=tiff.dynamic_header(...))``, or ``PadCodec.with_padding``. A writer given
no function (plain ``zarr``, ``ds.to_zarr`` into an existing array, any other
implementation) writes the header as ``zarr.json`` holds it. Where that header
does not describe the chunks (image size, bits per sample, a strip byte count
under compression), this module's check (:func:`literal_header_mismatch`) makes
zarrext say so once per opened array, with the fields and the fix
(:class:`TiffHeaderWarning`), and ``zarrext inspect`` notes it.
"""

from __future__ import annotations

import functools
import math
import struct
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.codecs.numcodecs import Zlib

from zarrext.codecs.chunk_context import ChunkIndex, describe_chunk
from zarrext.codecs.pad import (
    PadCodec,
    PaddedChunks,
    PaddingFunction,
    PaddingMismatch,
    PaddingWarning,
    register_literal_check,
)

if TYPE_CHECKING:
    from numpy.typing import DTypeLike
    from zarr.abc.codec import BytesBytesCodec

__all__ = [
    "COMPRESSION_TAGS",
    "TiffHeaderError",
    "TiffHeaderWarning",
    "create_kwargs",
    "dynamic_header",
    "header",
    "header_nbytes",
    "literal_header_mismatch",
    "pad_codec",
    "template_function",
]

Endian = Literal["little", "big"]
Compression = Literal["zstd", "deflate"]

# TIFF Compression tag values: 8 is Adobe Deflate (a zlib stream), 50000 is the
# registered Zstandard value that libtiff and imagecodecs use.
COMPRESSION_TAGS: dict[str | None, int] = {None: 1, "deflate": 8, "zstd": 50000}

# SampleFormat: 1 unsigned integer (the default, so it is left out and the spec's
# 110-byte uint16 header comes out byte for byte), 2 signed integer, 3 IEEE float.
_SAMPLE_FORMATS = {"u": 1, "i": 2, "f": 3}

_SHORT, _LONG = 3, 4
_TIFF_HEADER_NBYTES = 8
# Where StripByteCounts' value sits: the 8th IFD entry (after 8-byte header and
# 2-byte entry count), 8 bytes into the entry.
_STRIP_BYTE_COUNTS_VALUE = _TIFF_HEADER_NBYTES + 2 + 12 * 7 + 8


class TiffHeaderError(ValueError):
    """A chunk shape, data type or chunk TIFF cannot describe."""


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
        return _TIFF_HEADER_NBYTES + self.pages * self.ifd_nbytes

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
    if dt.kind not in _SAMPLE_FORMATS:
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
        sample_format=_SAMPLE_FORMATS[dt.kind],
    )


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
            return struct.pack(f"{bo}HHII", tag, _LONG, 1, value)
        return struct.pack(f"{bo}HHIHH", tag, _SHORT, 1, value, 0)

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
        next_ifd = 0 if last else _TIFF_HEADER_NBYTES + (page + 1) * layout.ifd_nbytes
        return (
            struct.pack(f"{bo}H", len(entries)) + b"".join(entries)
            + struct.pack(f"{bo}I", next_ifd)
        )

    magic = b"II" if endian == "little" else b"MM"
    out = magic + struct.pack(f"{bo}HI", 42, _TIFF_HEADER_NBYTES)
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


def _template_tags(padding: bytes) -> dict[int, tuple[int, int, int]] | None:
    """``{tag: (type, count, offset of the value)}`` of a one-strip TIFF header whose
    strip starts right after it (what :func:`header` writes), else ``None``."""
    if len(padding) < _TIFF_HEADER_NBYTES + 2 + 4 or padding[:2] not in (b"II", b"MM"):
        return None
    bo = "<" if padding[:2] == b"II" else ">"
    magic, ifd = struct.unpack_from(f"{bo}HI", padding, 2)
    if magic != 42 or ifd != _TIFF_HEADER_NBYTES:
        return None
    (n,) = struct.unpack_from(f"{bo}H", padding, ifd)
    if len(padding) != ifd + 2 + 12 * n + 4:
        return None
    if struct.unpack_from(f"{bo}I", padding, len(padding) - 4)[0]:  # a next IFD
        return None
    tags: dict[int, tuple[int, int, int]] = {}
    for i in range(n):
        at = ifd + 2 + 12 * i
        tag, kind, count = struct.unpack_from(f"{bo}HHI", padding, at)
        tags[tag] = (kind, count, at + 8)
    offsets, counts = tags.get(273), tags.get(279)
    if offsets is None or counts is None or offsets[:2] != (_LONG, 1) or counts[:2] != (_LONG, 1):
        return None
    if struct.unpack_from(f"{bo}I", padding, offsets[2])[0] != len(padding):
        return None
    for tag in (256, 257, 278, 258):  # width, length, rows per strip, bits: one number
        if tag not in tags or tags[tag][:2] not in ((_SHORT, 1), (_LONG, 1)):
            return None
    return tags


class TiffHeaderWarning(PaddingWarning):
    """Chunks written with a TIFF header (literal, or from a padding function) that
    does not describe them."""


def template_function(padding: bytes) -> PaddingFunction | None:
    """A padding function that fills in the TIFF header ``padding`` for each chunk.

    Pass it explicitly, ``zarrext.open_array(path, padding=template_function(header))``
    or ``PadCodec.with_padding``: ``pad`` writes static padding literally, and only
    a padding function computes a header per chunk.

    ``padding`` must be a one-strip TIFF header whose strip starts right after it,
    as :func:`header` writes; the function returns it with the strip byte count set
    to the encoded chunk's size, and with the chunk's own width and height when the
    array's chunks are not the header's (``ds.to_zarr`` with these codecs but other
    chunks). A chunk the header cannot describe (not 2-D; uncompressed bytes of
    another size than the header's samples) is written, with a
    :class:`TiffHeaderWarning` saying it is no TIFF. A multi-page header
    (:func:`header` of a 3-D chunk) is recognised too (:func:`_stack_template`).
    Anything else: ``None``.
    """
    tags = _template_tags(padding)
    if tags is None:
        return _stack_template_function(padding)
    bo = "<" if padding[:2] == b"II" else ">"
    template = bytes(padding)
    at = tags[279][2]

    def value(tag: int) -> int:
        kind, _, where = tags[tag]
        return int(struct.unpack_from(f"{bo}{'H' if kind == _SHORT else 'I'}", template, where)[0])

    height, width, bits = value(257), value(256), value(258)
    compressed = 259 in tags and value(259) != 1
    warned: set[str] = set()

    def warn(text: str) -> None:
        if text not in warned:  # once per array, not once per chunk
            warned.add(text)
            warnings.warn(text, TiffHeaderWarning, stacklevel=2)

    def shaped(shape: tuple[int, ...]) -> bytearray:
        out = bytearray(template)
        dims = shape[-2:] if len(shape) > 2 and all(s == 1 for s in shape[:-2]) else shape
        if len(dims) != 2:
            warn(
                f"tiff: chunks of shape {shape} are not 2-D images: they are written, but "
                "are no TIFF files; create the array with zarrext.formats.tiff.create_kwargs "
                "for its chunks"
            )
            return out
        rows, cols = (int(d) for d in dims)
        if (rows, cols) != (height, width):
            # Same 12-byte entries, so the header keeps its size; LONG when SHORT is too small.
            for tag, number in ((256, cols), (257, rows), (278, rows)):
                entry_at = tags[tag][2] - 8
                if number > 0xFFFF:
                    struct.pack_into(f"{bo}HHII", out, entry_at, tag, _LONG, 1, number)
                else:
                    struct.pack_into(f"{bo}HHIHH", out, entry_at, tag, _SHORT, 1, number, 0)
        return out

    def padding_function(encoded: bytes, index: ChunkIndex | None, shape: tuple[int, ...]) -> bytes:
        if len(encoded) > 0xFFFFFFFF:
            raise TiffHeaderError(
                f"tiff: strip of {len(encoded)} bytes does not fit a classic (32-bit) TIFF "
                f"({describe_chunk(index)})"
            )
        out = shaped(tuple(shape))
        if not compressed and len(shape) >= 2:
            expected = int(np.prod(shape)) * bits // 8
            if len(encoded) != expected:
                warn(
                    f"tiff: a chunk of shape {tuple(shape)} encodes to {len(encoded)} bytes, "
                    f"but the TIFF header in zarr.json describes {bits}-bit samples "
                    f"({expected} bytes): the chunks are written, but are no TIFF files; "
                    "create the array with zarrext.formats.tiff.create_kwargs for its data type"
                )
        struct.pack_into(f"{bo}I", out, at, len(encoded))
        return bytes(out)

    return padding_function


@dataclass(frozen=True)
class _StackTemplate:
    """What a multi-page header template describes: ``header(shape, dtype, endian=...)``."""

    shape: tuple[int, int, int]
    dtype: np.dtype[Any]
    endian: Endian


def _stack_template(padding: bytes) -> _StackTemplate | None:
    """The chunk a multi-page, uncompressed header template describes, if it is exactly
    what :func:`header` writes for some 3-D chunk; else ``None``.

    Only :func:`header`'s own bytes are recognised: a multi-page header from
    elsewhere may hold tags that a header rebuilt for other chunks would drop.
    """
    if len(padding) < _TIFF_HEADER_NBYTES or padding[:2] not in (b"II", b"MM"):
        return None
    endian: Endian = "little" if padding[:2] == b"II" else "big"
    bo = "<" if endian == "little" else ">"
    try:
        magic, at = struct.unpack_from(f"{bo}HI", padding, 2)
        (n,) = struct.unpack_from(f"{bo}H", padding, at)
        values = {}
        for i in range(n):
            tag, kind, _ = struct.unpack_from(f"{bo}HHI", padding, at + 2 + 12 * i)
            code = "H" if kind == _SHORT else "I"
            values[tag] = struct.unpack_from(f"{bo}{code}", padding, at + 2 + 12 * i + 8)[0]
        pages = 0
        while at:  # follow the IFD chain; each IFD is further on, so this ends
            pages += 1
            (n,) = struct.unpack_from(f"{bo}H", padding, at)
            (following,) = struct.unpack_from(f"{bo}I", padding, at + 2 + 12 * n)
            at = following if following > at else 0
    except struct.error:
        return None
    kinds = {1: "u", 2: "i", 3: "f"}
    if magic != 42 or pages < 2 or values.get(258, 0) % 8 or values.get(339, 1) not in kinds:
        return None
    try:
        dtype = np.dtype(f"{kinds[values.get(339, 1)]}{values[258] // 8}")
        shape = (pages, int(values[257]), int(values[256]))
        rebuilt = header(shape, dtype, endian=endian)
    except (KeyError, TypeError, TiffHeaderError):
        return None
    return _StackTemplate(shape, dtype, endian) if rebuilt == padding else None


def _stack_template_function(padding: bytes) -> PaddingFunction | None:
    """The padding function of a multi-page header template (see :func:`template_function`).

    Uncompressed pages have a fixed size, so a chunk of the template's shape gets the
    template itself; a chunk with as many pages but other rows and columns gets its
    own header (of the same size). Other chunks are written under the template with
    a :class:`TiffHeaderWarning`: a header of another page count has another size.
    """
    stack = _stack_template(padding)
    if stack is None:
        return None
    template = bytes(padding)
    warned: set[str] = set()

    def warn(text: str) -> None:
        if text not in warned:  # once per array, not once per chunk
            warned.add(text)
            warnings.warn(text, TiffHeaderWarning, stacklevel=2)

    @functools.lru_cache(maxsize=16)
    def for_shape(shape: tuple[int, ...]) -> bytes | None:
        if len(shape) < 3 or any(s != 1 for s in shape[:-3]) or shape[-3] != stack.shape[0]:
            return None
        if shape[-3:] == stack.shape:
            return template
        return header(shape[-3:], stack.dtype, endian=stack.endian)

    def padding_function(encoded: bytes, index: ChunkIndex | None, shape: tuple[int, ...]) -> bytes:
        out = for_shape(tuple(shape))
        if out is None:
            warn(
                f"tiff: chunks of shape {tuple(shape)} are not stacks of {stack.shape[0]} "
                "pages, as the TIFF header in zarr.json: they are written, but are no TIFF "
                "files; create the array with zarrext.formats.tiff.create_kwargs for its chunks"
            )
            return template
        expected = math.prod(shape) * stack.dtype.itemsize
        if len(encoded) != expected:
            warn(
                f"tiff: a chunk of shape {tuple(shape)} encodes to {len(encoded)} bytes, but "
                f"the TIFF header in zarr.json describes {stack.dtype} samples ({expected} "
                "bytes): the chunks are written, but are no TIFF files; create the array "
                "with zarrext.formats.tiff.create_kwargs for its data type"
            )
        return out

    return padding_function


# -- literal headers: what a static header describes, against the chunks ------------

# TIFF field types whose values this check reads: BYTE, SHORT, LONG.
_VALUE_FORMATS = {1: "B", 3: "H", 4: "I"}
_COMPRESSION_NAMES = {1: "none", 8: "deflate", 32946: "deflate", 50000: "zstd", 34926: "zstd"}
# Which TIFF Compression values name the stream a zarr compressor writes.
_COMPRESSOR_TAGS = {"zstd": {50000, 34926}, "numcodecs.zlib": {8, 32946}}
_COMPRESSION_ARGUMENTS = {"zstd": "zstd", "numcodecs.zlib": "deflate"}
_SAMPLE_FORMAT_NAMES = {1: "unsigned integer", 2: "signed integer", 3: "float"}


@dataclass(frozen=True)
class _LiteralHeader:
    """The image file directories (IFDs) a static padding holds, one per page."""

    byte_order: Literal["<", ">"]
    pages: tuple[dict[int, tuple[int, ...]], ...]


@functools.lru_cache(maxsize=64)
def _read_literal_header(padding: bytes) -> _LiteralHeader | None:
    """The IFDs of a classic TIFF file that starts with ``padding`` (the values that
    lie inside it), or ``None`` when ``padding`` does not start as a TIFF file."""
    if len(padding) < _TIFF_HEADER_NBYTES or padding[:2] not in (b"II", b"MM"):
        return None
    bo: Literal["<", ">"] = "<" if padding[:2] == b"II" else ">"
    magic, at = struct.unpack_from(f"{bo}HI", padding, 2)
    if magic != 42:
        return None
    pages: list[dict[int, tuple[int, ...]]] = []
    seen: set[int] = set()
    while at and at not in seen and at + 2 <= len(padding):
        seen.add(at)
        (n,) = struct.unpack_from(f"{bo}H", padding, at)
        if at + 2 + 12 * n + 4 > len(padding):
            break  # an IFD cut off by the padding's end: what it holds is unknown
        tags: dict[int, tuple[int, ...]] = {}
        for i in range(n):
            entry = at + 2 + 12 * i
            tag, kind, count = struct.unpack_from(f"{bo}HHI", padding, entry)
            code = _VALUE_FORMATS.get(kind)
            if code is None or count == 0:
                continue
            where = entry + 8
            if count * struct.calcsize(code) > 4:  # values elsewhere, at an offset
                (where,) = struct.unpack_from(f"{bo}I", padding, entry + 8)
            if where + count * struct.calcsize(code) <= len(padding):
                tags[tag] = struct.unpack_from(f"{bo}{count}{code}", padding, where)
        pages.append(tags)
        (at,) = struct.unpack_from(f"{bo}I", padding, at + 2 + 12 * n)
    return _LiteralHeader(bo, tuple(pages)) if pages else None


def _listed(values: Sequence[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    shown = ", ".join(map(str, values[:4]))
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _image_axes(shape: tuple[int, ...], samples: int) -> tuple[int, int, int] | None:
    """(pages, rows, columns) of chunks of ``shape``; None if they are no image or stack."""
    dims = shape[:-1] if samples > 1 else shape
    if len(dims) < 2 or any(d != 1 for d in dims[:-3]):
        return None
    return (dims[-3] if len(dims) > 2 else 1), dims[-2], dims[-1]


def _page_disagreements(
    page: dict[int, tuple[int, ...]], axes: tuple[int, int, int], chunks: PaddedChunks
) -> dict[str, str]:
    """Field name -> phrase, for one IFD against chunks of ``axes``."""
    out: dict[str, str] = {}
    _, rows, columns = axes
    dt = chunks.dtype

    def value(tag: int, default: int) -> int:
        return page.get(tag, (default,))[0]

    if value(256, 0) != columns:
        out["ImageWidth"] = f"ImageWidth {value(256, 0)}, but chunks have {columns} columns"
    if value(257, 0) != rows:
        out["ImageLength"] = f"ImageLength {value(257, 0)}, but chunks have {rows} rows"
    rows_per_strip = value(278, 0xFFFFFFFF)
    strips = len(page.get(273, ()))
    if rows_per_strip and strips and -(-rows // rows_per_strip) != strips:
        out["RowsPerStrip"] = (
            f"RowsPerStrip {rows_per_strip}, which makes {-(-rows // rows_per_strip)} strips "
            f"of chunks of {rows} rows, but the header has {strips}"
        )
    bits = page.get(258, (1,))
    if any(b != 8 * dt.itemsize for b in bits):
        out["BitsPerSample"] = (
            f"BitsPerSample {_listed(bits)}, but chunks hold {8 * dt.itemsize}-bit {dt} samples"
        )
    sample_format = value(339, 1)
    if _SAMPLE_FORMATS.get(dt.kind) != sample_format:
        out["SampleFormat"] = (
            f"SampleFormat {sample_format} "
            f"({_SAMPLE_FORMAT_NAMES.get(sample_format, 'unknown')}), but chunks hold {dt}"
        )
    return out


def _compression_disagreement(
    header: _LiteralHeader, chunks: PaddedChunks
) -> str | None:
    if chunks.compressors is None:  # while encoding: unknown
        return None
    tag = header.pages[0].get(259, (1,))[0]
    name = f"{tag} ({_COMPRESSION_NAMES.get(tag, 'unknown')})"
    if not chunks.compressors:
        return None if tag == 1 else f"Compression {name}, but chunks are not compressed"
    by = " and ".join(chunks.compressors)
    accepted = set.intersection(*(_COMPRESSOR_TAGS.get(c, set()) for c in chunks.compressors))
    if tag in accepted:
        return None
    return f"Compression {name}, but chunks are compressed by {by}"


def _strip_disagreements(
    header: _LiteralHeader, padding_nbytes: int, chunks: PaddedChunks
) -> dict[str, str]:
    offsets = [o for page in header.pages for o in page.get(273, ())]
    counts = [c for page in header.pages for c in page.get(279, ())]
    out: dict[str, str] = {}
    if offsets and offsets[0] != padding_nbytes:
        out["StripOffsets"] = (
            f"StripOffsets {_listed(offsets)}, but the chunk's data starts at byte "
            f"{padding_nbytes}, right after the padding"
        )
    if chunks.nbytes is None:
        out["StripByteCounts"] = (
            f"StripByteCounts {_listed(counts)}, but compressed chunks differ in size "
            "and a literal header holds one size for all"
        )
    elif sum(counts) != chunks.nbytes:
        encodes = (
            "the chunk written encodes to" if chunks.compressors is None else "chunks encode to"
        )
        out["StripByteCounts"] = (
            f"StripByteCounts {_listed(counts)}, but {encodes} {chunks.nbytes} bytes"
        )
    return out


def _disagreements(
    header: _LiteralHeader, padding_nbytes: int, chunks: PaddedChunks
) -> dict[str, str]:
    """Field name -> phrase (value, and what the chunks have), in the header's order."""
    samples = header.pages[0].get(277, (1,))[0]
    axes = _image_axes(chunks.shape, samples)
    if axes is None:
        return {"shape": f"chunks of shape {chunks.shape} are no (rows, columns) image or "
                         "(pages, rows, columns) stack"}
    out: dict[str, str] = {}
    if samples > 1 and chunks.shape[-1] != samples:
        out["SamplesPerPixel"] = (
            f"SamplesPerPixel {samples}, but the chunks' last axis has {chunks.shape[-1]}"
        )
    if len(header.pages) != axes[0]:
        ifds = "1 IFD (page)" if len(header.pages) == 1 else f"{len(header.pages)} IFDs (pages)"
        out["IFDs"] = f"{ifds}, but chunks hold {axes[0]} planes"
    for page in header.pages:
        for name, phrase in _page_disagreements(page, axes, chunks).items():
            out.setdefault(name, phrase)  # each field once, as its first page has it
    compression = _compression_disagreement(header, chunks)
    if compression is not None:
        out["Compression"] = compression
    if chunks.endian is not None and chunks.dtype.itemsize > 1:
        written = "<" if chunks.endian == "little" else ">"
        if written != header.byte_order:
            order = "II (little-endian)" if header.byte_order == "<" else "MM (big-endian)"
            out["byte order"] = (
                f"byte order {order}, but the bytes codec writes {chunks.endian}-endian"
            )
    out.update(_strip_disagreements(header, padding_nbytes, chunks))
    return out


def _fix(
    header: _LiteralHeader, padding: bytes, chunks: PaddedChunks, fields: Iterable[str]
) -> str:
    """What to do instead of writing this header literally, in a sentence."""
    dt = chunks.dtype
    axes = _image_axes(chunks.shape, header.pages[0].get(277, (1,))[0])
    if axes is None or dt.kind not in _SAMPLE_FORMATS:
        return (f"chunks of shape {chunks.shape} and data type {dt} cannot be TIFF images: "
                "store no TIFF header, or chunk the array as (rows, columns) images")
    compressors = chunks.compressors or ()
    unknown = [c for c in compressors if c not in _COMPRESSION_ARGUMENTS]
    if unknown:
        return (f"TIFF has no Compression value for {' and '.join(unknown)}: compress with "
                "zstd or numcodecs.zlib and pass padding=zarrext.formats.tiff.dynamic_header("
                f"{str(dt)!r}, compression='zstd' or 'deflate') to zarrext.open_array or "
                "zarrext.create_array")
    if compressors and axes[0] > 1:
        return ("a compressed chunk of several pages cannot be a TIFF file: chunk the array "
                "as (1, rows, columns), or store it uncompressed")
    endian = chunks.endian or ("little" if header.byte_order == "<" else "big")
    arguments = [repr(str(dt))]
    if endian == "big":
        arguments.append("endian='big'")
    tag = header.pages[0].get(259, (1,))[0]
    compressed = bool(compressors) or (
        chunks.compressors is None and chunks.nbytes != math.prod(chunks.shape) * dt.itemsize
    )
    if compressors:
        arguments.append(f"compression={_COMPRESSION_ARGUMENTS[compressors[-1]]!r}")
    elif compressed and _COMPRESSION_NAMES.get(tag) in ("zstd", "deflate"):
        arguments.append(f"compression={_COMPRESSION_NAMES[tag]!r}")
    elif compressed:  # while encoding: which compressor is unknown
        arguments.append("compression='zstd' or 'deflate' as the chunks are compressed "
                         "(TIFF has none for gzip or blosc)")
    shape = axes[1:] if axes[0] == 1 else axes
    try:
        made = header_nbytes(dt, axes)
    except TiffHeaderError as e:  # e.g. a float type TIFF has no sample format for
        return f"no TIFF header describes these chunks ({e}): store none"
    template_fits = (
        not {"BitsPerSample", "SampleFormat", "byte order", "Compression"} & set(fields)
        and (tag != 1) == compressed and template_function(padding) is not None
    )
    if axes[0] == 1 and made == len(padding):
        function = f"zarrext.formats.tiff.dynamic_header({', '.join(arguments)})"
    elif axes[0] == 1 and template_fits:
        function = "zarrext.formats.tiff.template_function(<the padding in zarr.json>)"
    else:  # a header of another size: pad's nbytes changes, so the array's metadata
        nbytes = f"pad's nbytes {made}"
        if compressed:
            return (f"the chunks need a header of {made} bytes: create the array with "
                    f"{nbytes} and pass padding=zarrext.formats.tiff.dynamic_header("
                    f"{', '.join(arguments)}) (zarrext.formats.tiff.create_kwargs does both)")
        return (f"store a header made for these chunks as pad's padding, with {nbytes}: "
                f"zarrext.formats.tiff.header({shape}, {', '.join(arguments)}) "
                "(zarrext.formats.tiff.create_kwargs does both)")
    fix = (f"to write each chunk's own header, pass padding={function} to zarrext.open_array "
           "or zarrext.create_array (or PadCodec.with_padding)")
    if not compressed:
        fix += (", or store a header made for these chunks as pad's padding "
                f"(zarrext.formats.tiff.header({shape}, {', '.join(arguments)}))")
    return fix


def literal_header_mismatch(padding: bytes, chunks: PaddedChunks) -> PaddingMismatch | None:
    """How a static TIFF header in ``pad``'s padding disagrees with its chunks, if it does.

    ``padding`` that does not start as a classic TIFF file, or that goes at the
    chunk's end, is not judged (``None``). Otherwise each field that does not fit
    the chunks is named: image size and page count against the chunk shape,
    BitsPerSample and SampleFormat against the data type, Compression against the
    codecs before ``pad``, the byte order against the ``bytes`` codec's, and the
    strips (StripOffsets, StripByteCounts) against where the data starts and its
    size, which a literal header cannot follow under compression.
    """
    header = _read_literal_header(bytes(padding))
    if header is None or chunks.location != "start":
        return None
    fields = _disagreements(header, len(padding), chunks)
    if not fields:
        return None
    fix = _fix(header, padding, chunks, fields)
    return PaddingMismatch("TIFF header", tuple(fields.values()), fix, TiffHeaderWarning)


register_literal_check(literal_header_mismatch)


def pad_codec(
    dtype: DTypeLike,
    *,
    chunk_shape: Sequence[int] | None = None,
    endian: Endian = "little",
    compression: Compression | None = None,
) -> PadCodec:
    """The ``pad`` codec that makes each chunk a TIFF file.

    With a known ``chunk_shape``: ``zarr.json`` records the header for that shape
    as static ``padding`` (strip byte count 0 when compressed: no one size fits
    every chunk), and the codec carries :func:`template_function` of it, which
    writes each chunk's own header (its strip byte count, and its size when the
    chunks are not ``chunk_shape``). Without: a header function only
    (:func:`dynamic_header`; ``zarr.json`` keeps ``nbytes``).

    The function is a runtime setting of this codec object: an array opened later
    writes ``zarr.json``'s header literally unless given the function again
    (``zarrext.open_array(path, padding=dynamic_header(dtype, compression=...))``);
    zarrext warns when that header does not fit the chunks.
    """
    if chunk_shape is not None:
        static = header(
            chunk_shape, dtype, endian=endian, compression=compression,
            strip_byte_count=None if compression is None else 0,
        )
        return PadCodec(
            location="start", nbytes=len(static), padding=static,
            padding_func=template_function(static),
        )
    return PadCodec(
        location="start",
        nbytes=header_nbytes(dtype),
        padding=dynamic_header(dtype, endian=endian, compression=compression),
    )


def _compressor(compression: Compression, level: int | None) -> BytesBytesCodec:
    if compression == "zstd":
        return ZstdCodec(level=0 if level is None else level)
    # TIFF's deflate strips are zlib streams (RFC 1950), not gzip ones.
    return Zlib(level=6 if level is None else level)


def create_kwargs(
    chunk_shape: Sequence[int],
    dtype: DTypeLike,
    *,
    endian: Endian = "little",
    compression: Compression | None = None,
    level: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``zarr.create_array``/``zarrext.create_array``: TIFF chunks.

    ``chunk_shape`` ``(rows, columns)`` gives one-page TIFFs; ``(z, rows, columns)``
    gives ``z``-page TIFFs (uncompressed only; see :func:`header`). Returns
    ``chunks``, ``dtype``, ``serializer`` and ``compressors`` (compressor, then the
    TIFF ``pad`` of :func:`pad_codec`, which carries the header function); add
    ``store`` and ``shape``. Writes through the array these create write a TIFF
    header per chunk; reopened, give the function again (:func:`pad_codec`).
    """
    compressors: list[Any] = []
    if compression is not None:
        if compression not in ("zstd", "deflate"):
            raise TiffHeaderError(
                f"tiff: compression must be None, 'zstd' or 'deflate', got {compression!r}"
            )
        compressors.append(_compressor(compression, level))
    compressors.append(
        pad_codec(dtype, chunk_shape=chunk_shape, endian=endian, compression=compression)
    )
    return {
        "chunks": tuple(chunk_shape),
        "dtype": np.dtype(dtype),
        "serializer": BytesCodec(endian=endian),
        "compressors": compressors,
    }
