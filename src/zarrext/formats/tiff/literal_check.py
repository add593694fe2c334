"""What a static TIFF header in ``pad``'s padding describes, against the chunks it is
written in front of: :func:`literal_header_mismatch`, registered with ``pad`` so that
zarrext says once per opened array which fields do not fit, and the fix."""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from zarrext.codecs.pad import PaddedChunks, PaddingMismatch, register_literal_check
from zarrext.formats.tiff.headers import (
    SAMPLE_FORMATS,
    IfdEntry,
    TiffHeaderError,
    TiffHeaderWarning,
    header_nbytes,
    read_ifds,
)
from zarrext.formats.tiff.templates import template_function

__all__ = ["literal_header_mismatch"]


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
    found = read_ifds(padding)
    if found is None or not found.ifds:
        return None
    pages = tuple(
        {e.tag: values for e in ifd.entries
         if (values := _entry_values(padding, found.byte_order, e)) is not None}
        for ifd in found.ifds
    )
    return _LiteralHeader(found.byte_order, pages)


def _entry_values(padding: bytes, bo: str, entry: IfdEntry) -> tuple[int, ...] | None:
    """An entry's values, if of a type read here and lying inside ``padding``."""
    code = _VALUE_FORMATS.get(entry.kind)
    if code is None or entry.count == 0:
        return None
    size = entry.count * struct.calcsize(code)
    where = entry.field
    if size > 4:  # values elsewhere, at an offset
        (where,) = struct.unpack_from(f"{bo}I", padding, entry.field)
    if where + size > len(padding):
        return None
    return struct.unpack_from(f"{bo}{entry.count}{code}", padding, where)


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
    if SAMPLE_FORMATS.get(dt.kind) != sample_format:
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
    if axes is None or dt.kind not in SAMPLE_FORMATS:
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
