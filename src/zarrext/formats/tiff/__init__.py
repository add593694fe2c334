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

The modules: :mod:`~zarrext.formats.tiff.headers` (building headers),
:mod:`~zarrext.formats.tiff.templates` (a stored header as a padding function),
:mod:`~zarrext.formats.tiff.literal_check` (a static header against its chunks;
importing this package registers the check with ``pad``) and
:mod:`~zarrext.formats.tiff.arrays` (the codec and ``create_array`` arguments).
Every public name is importable from this package.
"""

from __future__ import annotations

from zarrext.formats.tiff.arrays import create_kwargs, pad_codec
from zarrext.formats.tiff.headers import (
    COMPRESSION_TAGS,
    TiffHeaderError,
    TiffHeaderWarning,
    dynamic_header,
    header,
    header_nbytes,
)
from zarrext.formats.tiff.literal_check import literal_header_mismatch
from zarrext.formats.tiff.templates import template_function

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
