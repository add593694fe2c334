"""Codecs that zarrext registers with zarr-python (entry-point group ``zarr.codecs``).

Every codec class (and the error each raises on bad input) is importable from
here. They load on first use (PEP 562): zarr resolving one codec through its
entry point (``zarrext.codecs.shuffle``) runs this package's ``__init__`` first,
which must not import the other codecs (``conditional`` pulls in the decisions,
``optional`` the data type).

Besides the codecs, what they are given and decide with: the conditional codec's
decisions (:mod:`~zarrext.codecs.decisions`), the chunk a codec works on
(:mod:`~zarrext.codecs.chunk_context`), an array's codec chain
(:mod:`~zarrext.codecs.chain`) and the spec of its chunks
(:mod:`~zarrext.codecs.specs`); for zarr's ``scale_offset`` + ``cast_value``, the
values they store (:mod:`~zarrext.codecs.quantized_writes`) and their round trip
(:mod:`~zarrext.codecs.filter_roundtrip`); for ``pad``, literal padding that does not
describe its chunks (:mod:`~zarrext.codecs.literal_padding`); and zarr's own blosc
codecs in the forms zarrext's pipelines use, which check each frame against its
chunk (:mod:`~zarrext.codecs.blosc_frames`).

Layer: the bottom, above :mod:`zarrext.dtypes` alone; may import it and the base
modules (:mod:`zarrext.errors`, :mod:`zarrext._zarr_compat`, :mod:`zarrext._nesting`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module of this package that defines it.
_LAZY: dict[str, str] = {
    "ConditionalCodec": "conditional",
    "ConditionalCodecError": "conditional",
    "N5DefaultCodec": "n5_default",
    "N5DefaultCodecError": "n5_default",
    "OptionalCodec": "optional",
    "OptionalCodecError": "optional",
    "PackBitsCodec": "packbits",
    "PackBitsCodecError": "packbits",
    "PadCodec": "pad",
    "PadCodecError": "pad",
    "ShuffleCodec": "shuffle",
}

if TYPE_CHECKING:
    from zarrext.codecs.conditional import ConditionalCodec, ConditionalCodecError
    from zarrext.codecs.n5_default import N5DefaultCodec, N5DefaultCodecError
    from zarrext.codecs.optional import OptionalCodec, OptionalCodecError
    from zarrext.codecs.packbits import PackBitsCodec, PackBitsCodecError
    from zarrext.codecs.pad import PadCodec, PadCodecError
    from zarrext.codecs.shuffle import ShuffleCodec


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zarrext.codecs' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"zarrext.codecs.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ConditionalCodec",
    "ConditionalCodecError",
    "N5DefaultCodec",
    "N5DefaultCodecError",
    "OptionalCodec",
    "OptionalCodecError",
    "PackBitsCodec",
    "PackBitsCodecError",
    "PadCodec",
    "PadCodecError",
    "ShuffleCodec",
]
