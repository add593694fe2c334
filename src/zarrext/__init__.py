"""zarrext: Zarr v3 codec extensions for zarr-python.

Installing the package registers its codecs and data types with zarr-python
through entry points; importing it gives the runtime API for what metadata cannot
carry (decision functions, shard write layouts) and the jobs behind the CLI.
"""

from __future__ import annotations

from zarrext.api import create_array, open_array, with_runtime
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.n5_default import N5DefaultCodec
from zarrext.codecs.pad import PadCodec
from zarrext.codecs.shuffle import ShuffleCodec
from zarrext.decisions import from_plan
from zarrext.inspection import inventory
from zarrext.recompression import RecompressReport, recompress

__all__ = [
    "ConditionalCodec",
    "RecompressReport",
    "N5DefaultCodec",
    "PadCodec",
    "ShuffleCodec",
    "create_array",
    "from_plan",
    "inventory",
    "open_array",
    "recompress",
    "with_runtime",
]
__version__ = "0.1.0"
