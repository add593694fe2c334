"""The package as a user gets it (``make dist``): ``python -m build`` makes an sdist and
a wheel that ``twine check`` passes, and the wheel, installed with pip into a fresh venv
that holds nothing of this repository, gives ``zarr.open_array`` the ``conditional``
codec with no ``import zarrext``, and the ``zarrext`` command.

pip resolves the wheel's dependencies from the package index (or its cache), as
``make`` does; the commands run from a temporary directory, never the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from tests.paths import ROOT
from zarrext import ConditionalCodec, ShuffleCodec

pytestmark = pytest.mark.slow

# Generous guards against a hung build or install; no test bounds how long they take.
HANG_GUARD = 1800


def _run(args: list[str | Path], cwd: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    """``args`` run in ``cwd`` with no trace of this checkout in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD, check=False, **kwargs)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built from the checkout (the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    _ok(_run([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=out))
    (sdist,) = out.glob("zarrext-*.tar.gz")
    (wheel,) = out.glob("zarrext-*-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def venv(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (and the ``cli`` extra, for the command)."""
    home = tmp_path_factory.mktemp("venv")
    _ok(_run([sys.executable, "-m", "venv", home / "env"], cwd=home))
    python = home / "env" / "bin" / "python"
    _ok(_run([python, "-m", "pip", "install", "--quiet", f"{dist['wheel']}[cli]"], cwd=home))
    return home / "env"


def test_twine_check_passes_the_sdist_and_the_wheel(dist: dict[str, Path]) -> None:
    out = _ok(_run([sys.executable, "-m", "twine", "check", "--strict",
                    dist["sdist"], dist["wheel"]], cwd=dist["wheel"].parent))
    assert out.count("PASSED") == 2, out


def test_both_carry_the_one_version(dist: dict[str, Path]) -> None:
    assert dist["sdist"].name == f"zarrext-{zarrext.__version__}.tar.gz"
    assert dist["wheel"].name == f"zarrext-{zarrext.__version__}-py3-none-any.whl"


def test_the_wheel_holds_the_type_hints_and_the_license(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = f"zarrext-{zarrext.__version__}.dist-info"
        metadata = wheel.read(f"{info}/METADATA").decode()
    assert "zarrext/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    assert "License-Expression: MIT" in metadata.splitlines()
    assert not [n for n in names if not n.startswith(("zarrext/", f"{info}/"))]


def test_the_sdist_holds_the_source_and_no_junk(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as sdist:
        top = f"zarrext-{zarrext.__version__}/"
        names = {m.name.removeprefix(top) for m in sdist.getmembers()}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "Makefile",
                   "src/zarrext/__init__.py", "src/zarrext/py.typed", "tests/conftest.py"):
        assert needed in names, needed
    junk = [n for n in names if any(
        part in (".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                 ".hypothesis", ".benchmarks", ".git", ".ci", "dist", "build")
        or part.endswith((".pyc", ".egg-info"))
        for part in Path(n).parts)]
    assert not junk, junk[:10]


def test_zarr_reads_a_conditional_array_with_no_import(venv: Path, tmp_path: Path) -> None:
    store = tmp_path / "c.zarr"
    values = np.concatenate([np.full(64, 7, "uint16"),  # compresses: applied
                             np.random.default_rng(0).integers(0, 2**16, 64, "uint16")])
    array = zarrext.create_array(
        str(store), shape=(128,), chunks=(64,), dtype="uint16", serializer=BytesCodec(),
        compressors=[ConditionalCodec([ShuffleCodec(element_size=2), ZstdCodec()])],
        decision="compress_if_smaller",
    )
    array[:] = values
    assert "conditional" in (store / "zarr.json").read_text()
    # the sevens compressed (their chunk needs shuffle and zstd to read), the noise raw
    assert (store / "c" / "0").stat().st_size < 64 * 2 < (store / "c" / "1").stat().st_size
    script = (
        "import json, sys, zarr\n"
        "a = zarr.open_array(sys.argv[1], mode='r')\n"
        "print(json.dumps({'values': a[:].tolist(),\n"
        "                  'codec': type(a.metadata.codecs[1]).__module__,\n"
        "                  'from': sys.modules['zarrext'].__file__}))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    read = json.loads(_ok(_run([venv / "bin" / "python", "-c", script, store],
                               cwd=elsewhere)))
    assert read["values"] == values.tolist()
    assert read["codec"] == "zarrext.codecs.conditional"
    # the installed wheel's code, loaded by zarr's entry points, not this checkout's
    assert Path(read["from"]).is_relative_to(venv), read["from"]
    print(f"read through {read['codec']} from {read['from']}")


def test_the_command_prints_its_version_and_help(venv: Path, tmp_path: Path) -> None:
    version = _ok(_run([venv / "bin" / "zarrext", "--version"], cwd=tmp_path))
    assert version.strip() == f"zarrext {zarrext.__version__}"
    shown = _ok(_run([venv / "bin" / "zarrext", "--help"], cwd=tmp_path))
    for command in ("convert", "quantize", "check", "info"):
        assert command in shown
    print(version.strip())


def test_the_fresh_venv_has_nothing_of_the_checkout(venv: Path, tmp_path: Path) -> None:
    where = _ok(_run([venv / "bin" / "python", "-c",
                      "import sys, zarrext; print(zarrext.__file__); print(sys.path)"],
                     cwd=tmp_path)).splitlines()
    assert Path(where[0]).is_relative_to(venv)
    assert str(ROOT) not in where[1]
