"""A TIFF header stored as ``pad``'s static padding, turned into a padding function
that writes each chunk's own header from it (:func:`template_function`)."""

from __future__ import annotations

import functools
import math
import struct
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrext.codecs.chunk_context import ChunkIndex, describe_chunk
from zarrext.codecs.pad import PaddingFunction
from zarrext.formats.tiff.headers import (
    LONG,
    SHORT,
    TIFF_HEADER_NBYTES,
    Endian,
    TiffHeaderError,
    TiffHeaderWarning,
    header,
    read_ifds,
)

__all__ = ["template_function"]


def _template_tags(padding: bytes) -> dict[int, tuple[int, int, int]] | None:
    """``{tag: (type, count, offset of the value)}`` of a one-strip TIFF header whose
    strip starts right after it (what :func:`header` writes), else ``None``."""
    found = read_ifds(padding)
    if found is None or len(found.ifds) != 1:
        return None
    ifd = found.ifds[0]
    if ifd.offset != TIFF_HEADER_NBYTES or ifd.end != len(padding) or ifd.next:
        return None
    bo = found.byte_order
    tags = {e.tag: (e.kind, e.count, e.field) for e in ifd.entries}
    offsets, counts = tags.get(273), tags.get(279)
    if offsets is None or counts is None or offsets[:2] != (LONG, 1) or counts[:2] != (LONG, 1):
        return None
    if struct.unpack_from(f"{bo}I", padding, offsets[2])[0] != len(padding):
        return None
    for tag in (256, 257, 278, 258):  # width, length, rows per strip, bits: one number
        if tag not in tags or tags[tag][:2] not in ((SHORT, 1), (LONG, 1)):
            return None
    return tags


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
        return int(struct.unpack_from(f"{bo}{'H' if kind == SHORT else 'I'}", template, where)[0])

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
                    struct.pack_into(f"{bo}HHII", out, entry_at, tag, LONG, 1, number)
                else:
                    struct.pack_into(f"{bo}HHIHH", out, entry_at, tag, SHORT, 1, number, 0)
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
    found = read_ifds(padding)
    if found is None or len(found.ifds) < 2:
        return None
    endian: Endian = "little" if found.byte_order == "<" else "big"
    values = {
        e.tag: struct.unpack_from(f"{found.byte_order}{'H' if e.kind == SHORT else 'I'}",
                                  padding, e.field)[0]
        for e in found.ifds[0].entries
    }
    kinds = {1: "u", 2: "i", 3: "f"}
    if values.get(258, 0) % 8 or values.get(339, 1) not in kinds:
        return None
    try:
        dtype = np.dtype(f"{kinds[values.get(339, 1)]}{values[258] // 8}")
        shape = (len(found.ifds), int(values[257]), int(values[256]))
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
