"""zarrext: Zarr v3 codec extensions for zarr-python.

Installing the package registers its codecs and data types with zarr-python
through entry points; importing it gives the runtime API for what metadata cannot
carry (decision functions, shard write layouts) and the jobs behind the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zarrext.dtypes.optional import register_with_zarr as _register_optional

# Light and needed by any array whose pad codec holds a TIFF header: the check that
# says when that header does not fit the chunks must be registered before such an
# array is written through plain zarr.
from zarrext.formats import tiff as _tiff  # noqa: F401
from zarrext.integration.xarray_compat import XARRAY_ZARR as _XARRAY_ZARR
from zarrext.integration.xarray_compat import when_imported as _when_imported

_register_optional()


def _decide_xarray_writes(zarr_backend: Any) -> None:
    """xarray's ``to_zarr`` gives ``conditional`` codecs the decision zarrext's writers
    use (:mod:`zarrext.xarray.writes`); loaded only once xarray's zarr backend is."""
    from zarrext.xarray.writes import install_xarray_decisions

    install_xarray_decisions(zarr_backend)


_when_imported(_XARRAY_ZARR, _decide_xarray_writes)

# Public names and the modules they live in, imported on first use (PEP 562): an
# entry point that loads one codec, or ``import zarrext``, loads only what it needs.
_LAZY: dict[str, str] = {
    "convert": "zarrext.jobs.convert.converting",
    "quantize": "zarrext.quantize",
    "create_array": "zarrext.api",
    "open_array": "zarrext.api",
    "with_runtime": "zarrext.api",
    "ConditionalCodec": "zarrext.codecs.conditional",
    "N5DefaultCodec": "zarrext.codecs.n5_default",
    "OptionalCodec": "zarrext.codecs.optional",
    "PackBitsCodec": "zarrext.codecs.packbits",
    "PadCodec": "zarrext.codecs.pad",
    "ShuffleCodec": "zarrext.codecs.shuffle",
    "from_plan": "zarrext.codecs.decisions",
    "OptionalDType": "zarrext.integration.optional",
    "as_optional_array": "zarrext.dtypes.optional_conversions",
    "from_arrow": "zarrext.dtypes.optional_conversions",
    "from_masked": "zarrext.dtypes.optional_conversions",
    "to_arrow": "zarrext.dtypes.optional_conversions",
    "to_masked": "zarrext.dtypes.optional_conversions",
    "to_nan": "zarrext.dtypes.optional_conversions",
    "read_masked": "zarrext.pipeline.masked_read",
    "optional_encoding": "zarrext.xarray.backend",
    "decode_optional": "zarrext.xarray.backend",
    "encode_optional": "zarrext.xarray.backend",
    "inventory": "zarrext.jobs.inspection",
    "RecompressReport": "zarrext.jobs.recompression",
    "recompress": "zarrext.jobs.recompression",
    "check": "zarrext.jobs.shards.check",
    "compact": "zarrext.jobs.shards.compact",
    "expand": "zarrext.jobs.shards.compact",
    "write_dask": "zarrext.jobs.shards.dask",
}

if TYPE_CHECKING:
    from zarrext import quantize
    from zarrext.api import create_array, open_array, with_runtime
    from zarrext.codecs.conditional import ConditionalCodec
    from zarrext.codecs.decisions import from_plan
    from zarrext.codecs.n5_default import N5DefaultCodec
    from zarrext.codecs.optional import OptionalCodec
    from zarrext.codecs.packbits import PackBitsCodec
    from zarrext.codecs.pad import PadCodec
    from zarrext.codecs.shuffle import ShuffleCodec
    from zarrext.dtypes.optional import OptionalDType
    from zarrext.dtypes.optional_conversions import (
        as_optional_array,
        from_arrow,
        from_masked,
        to_arrow,
        to_masked,
        to_nan,
    )
    from zarrext.jobs.convert.converting import convert
    from zarrext.jobs.inspection import inventory
    from zarrext.jobs.recompression import RecompressReport, recompress
    from zarrext.jobs.shards.check import check
    from zarrext.jobs.shards.compact import compact, expand
    from zarrext.jobs.shards.dask import write_dask
    from zarrext.pipeline.masked_read import read_masked
    from zarrext.xarray.backend import decode_optional, encode_optional, optional_encoding


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zarrext' has no attribute {name!r}")
    if module == f"zarrext.{name}":
        value: Any = importlib.import_module(module)
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ConditionalCodec",
    "RecompressReport",
    "N5DefaultCodec",
    "OptionalCodec",
    "OptionalDType",
    "PackBitsCodec",
    "PadCodec",
    "ShuffleCodec",
    "as_optional_array",
    "check",
    "compact",
    "convert",
    "create_array",
    "decode_optional",
    "encode_optional",
    "expand",
    "from_arrow",
    "from_masked",
    "from_plan",
    "inventory",
    "open_array",
    "optional_encoding",
    "quantize",
    "read_masked",
    "recompress",
    "to_arrow",
    "to_masked",
    "to_nan",
    "with_runtime",
    "write_dask",
]
__version__ = "0.1.0"
