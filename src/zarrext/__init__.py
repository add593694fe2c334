"""zarrext: Zarr v3 codec extensions for zarr-python.

Installing the package registers its codecs and data types with zarr-python
through entry points; importing it gives the runtime API for what metadata cannot
carry (decision functions, shard write layouts) and the jobs behind the CLI.
"""

from __future__ import annotations

from zarrext import quantize
from zarrext.api import create_array, open_array, with_runtime
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.n5_default import N5DefaultCodec
from zarrext.codecs.optional import OptionalCodec
from zarrext.codecs.packbits import PackBitsCodec
from zarrext.codecs.pad import PadCodec
from zarrext.codecs.shuffle import ShuffleCodec
from zarrext.decisions import from_plan
from zarrext.dtypes.optional import (
    OptionalDType,
    as_optional_array,
    from_arrow,
    from_masked,
    to_arrow,
    to_masked,
)
from zarrext.formats import tiff as _tiff  # noqa: F401  (registers the TIFF pad template)
from zarrext.inspection import inventory
from zarrext.recompression import RecompressReport, recompress
from zarrext.sharding import check, compact, expand, write_dask

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
    "create_array",
    "expand",
    "from_arrow",
    "from_masked",
    "from_plan",
    "inventory",
    "open_array",
    "quantize",
    "recompress",
    "to_arrow",
    "to_masked",
    "with_runtime",
    "write_dask",
]
__version__ = "0.1.0"
