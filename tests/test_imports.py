"""What importing zarrext, or resolving one of its codecs, loads (issue: zarr unchanged
for everyone else). Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import zarrext

HEAVY = ("rich", "typer", "matplotlib", "dask", "distributed", "pyarrow", "tifffile")

PROBE = """
import json, sys
import zarr, zarr.core.array as core_array
set_selection = core_array._set_selection
{action}
print(json.dumps({{
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r}
                      or m in ("zarrext.quantize", "zarrext.cli", "zarrext.api",
                               "zarrext.optional_integration")),
    "wrapped": core_array._set_selection is not set_selection,
}}))
"""


@pytest.mark.parametrize(
    "action",
    [
        "from zarr.registry import get_codec_class; get_codec_class('shuffle')",
        "from zarr.registry import get_codec_class; get_codec_class('conditional')",
        "import zarrext",
    ],
    ids=["resolve-shuffle", "resolve-conditional", "import-zarrext"],
)
def test_loads_nothing_heavy_and_wraps_nothing(action: str) -> None:
    # zarrext.dtypes.optional (the data type alone, numpy and zarr only) may load: import
    # zarrext registers it so zarr's registry never grows while someone iterates it.
    # What wraps zarr functions (optional_integration) must not load.
    code = PROBE.format(action=action, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"modules": [], "wrapped": False}


def test_every_public_name_resolves_lazily() -> None:
    assert sorted(zarrext.__all__) == sorted(zarrext._LAZY)
    for name in zarrext.__all__:
        assert getattr(zarrext, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = zarrext.nope
