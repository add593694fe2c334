"""Reading a Zarr format 2 array through zarrext's pipeline, so that a chunk its
numcodecs cannot decode is named.

zarr-python reads a format 2 array through its own batched pipeline: a damaged,
truncated or empty chunk then raises numcodecs' error (``RuntimeError: Zstd
decompression error``, or ``cannot reshape array of size 80 into shape (16,10)`` for
an uncompressed chunk cut short), naming neither the array nor the chunk.
:func:`format_2_reader` gives the array :class:`Format2Pipeline`, zarrext's pipeline
over the same codecs, which raises :class:`~zarrext.errors.ChunkDecodeError` naming
the array, the chunk's key and the format 2 codecs, as for format 3.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, NoReturn

import zarr
from zarr.core.array import AsyncArray
from zarr.core.array_spec import ArraySpec
from zarr.core.buffer import default_buffer_prototype

from zarrext._zarr_compat import async_array_of, set_codec_pipeline
from zarrext.errors import ChunkDecodeError
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline

__all__ = ["Format2Pipeline", "format_2_codecs", "format_2_reader"]


def format_2_codecs(metadata: Any) -> str:
    """A format 2 array's codecs as its ``.zarray`` names them (``"delta > zstd"``:
    filters, then the compressor; ``""`` for raw chunks)."""
    codecs = [*(metadata.filters or ()), metadata.compressor]
    names = [str(getattr(c, "codec_id", type(c).__name__)) for c in codecs if c is not None]
    return " > ".join(names)


@dataclasses.dataclass(frozen=True)
class Format2Pipeline(ZarrextCodecPipeline):
    """zarrext's pipeline over a format 2 array's codecs (zarr's ``V2Codec``): a decode
    error names the codecs of ``.zarray`` (``named``), not zarr's wrapper class."""

    named: str = ""
    """The codecs as ``.zarray`` names them (:func:`format_2_codecs`)."""

    def raise_decode_error(self, error: BaseException, key_holder: object) -> NoReturn:
        try:
            super().raise_decode_error(error, key_holder)
        except ChunkDecodeError as e:
            named = ChunkDecodeError(_reason(e.reason), array=e.array, key=e.key,
                                     codec=self.named or None, inner=e.inner)
            raise named from e.__cause__


_RESHAPE = re.compile(r"ValueError: cannot reshape array of size (\d+) into shape \(([\d, ]+)\)")


def _reason(reason: str) -> str:
    """numpy's complaint about a chunk of the wrong size (zarr reshapes the decoded
    bytes) in the chunk's words; any other reason as it is."""
    found = _RESHAPE.fullmatch(reason)
    if found is None:
        return reason
    shape = [int(n) for n in found.group(2).replace(" ", "").split(",") if n]
    held = int(found.group(1))
    return (f"it holds {held} values and the chunk {math.prod(shape)} "
            f"({'x'.join(map(str, shape))}): the chunk object is cut short or not this "
            "array's")


def format_2_reader(array: zarr.Array) -> zarr.Array:
    """The format 2 ``array`` over the same store, read through :class:`Format2Pipeline`
    (a chunk that does not decode raises :class:`~zarrext.errors.ChunkDecodeError`)."""
    async_array = async_array_of(array)
    metadata = async_array.metadata
    if metadata.zarr_format != 2:
        raise ValueError("format_2_reader reads Zarr format 2 arrays")
    codecs: Any = async_array.codec_pipeline  # zarr's batched pipeline: its codecs in order
    pipeline = dataclasses.replace(
        Format2Pipeline.from_codecs(list(codecs)),
        array_path=async_array.store_path.path,
        ndim=len(metadata.shape),
    )
    spec = ArraySpec(shape=tuple(metadata.chunks), dtype=metadata.dtype,
                     fill_value=metadata.fill_value, config=async_array.config,
                     prototype=default_buffer_prototype())
    new = AsyncArray(metadata=metadata, store_path=async_array.store_path,
                     config=async_array.config)
    # set once evolved: evolving builds the pipeline anew from its codecs
    evolved = dataclasses.replace(pipeline.evolve_from_array_spec(spec),
                                  named=format_2_codecs(metadata))
    set_codec_pipeline(new, evolved)
    return zarr.Array(new)
