"""One notation for conditional masks everywhere: ``0b`` + one digit per nested codec."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec

import zarrext
from tests.conftest import Run
from tests.paths import ROOT
from zarrext.codecs.decisions import DecisionError, check_mask, format_mask
from zarrext.jobs.inspection import inventory

SRC = ROOT / "src" / "zarrext"
CODECS = [{"name": "shuffle", "configuration": {"element_size": 4}},
          {"name": "zstd", "configuration": {"level": 5}}]


@pytest.mark.parametrize(
    ("mask", "n_codecs", "text"),
    [(0, 2, "0b00"), (1, 2, "0b01"), (3, 2, "0b11"), (2, 4, "0b0010"), (0, 1, "0b0"),
     (1, 1, "0b1"), (0, 0, "0b0"), (0b101, 2, "0b101")],
)
def test_format_mask(mask: int, n_codecs: int, text: str) -> None:
    assert format_mask(mask, n_codecs) == text


def test_error_messages_use_the_notation() -> None:
    with pytest.raises(DecisionError, match=r"mask 0b100 sets bit 2"):
        check_mask(0b100, 2, "here")


def test_no_other_binary_formatting_in_the_package() -> None:
    """Masks are formatted by format_mask only: no ``{m:#b}`` / ``{m:#06b}`` elsewhere."""
    pattern = re.compile(r"\{[^{}]*:#?0?\d*b\}|bin\(")
    offenders = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line) and "def format_mask" not in line
    ]
    assert offenders == [], offenders


def _store(path: Path) -> None:
    """Two nested codecs; half the chunks compressed (0b11), half stored raw (0b00)."""
    z = zarrext.create_array(
        str(path), shape=(64, 64), chunks=(16, 32), dtype="float32", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec(CODECS)], decision="compress_if_smaller",
    )
    data = np.tile(np.linspace(0, 1, 64, dtype="float32"), (64, 1))
    noise = np.random.default_rng(0).integers(0, 2**32, (32, 64), dtype="uint32")
    data[32:] = noise.view("float32")  # random bits: neither codec helps
    z[:] = data


def test_every_surface_prints_the_same_masks(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich tables on one line each
    path = tmp_path / "a.zarr"
    _store(path)
    inv = inventory(zarr.open_array(str(path)))
    assert inv.mask_counts == {0b00: 4, 0b11: 4}

    code, out, err = run("inspect", path)
    assert code == 0, err
    assert "0b00: 4, 0b11: 4" in out

    code, out, err = run("inspect", path, "--json")
    assert code == 0, err
    assert json.loads(out)["arrays"][0]["mask_counts"] == {"0b00": 4, "0b11": 4}

    code, out, err = run("recompress", path, "--decision", "never_apply")
    assert code == 0, err
    assert re.search(r"mask 0b00\s.*\s4\s.*\s8", out), out
    assert re.search(r"mask 0b11\s.*\s4\s.*\s0", out), out

    code, out, err = run("recompress", path, "--decision", "compress_if_smaller", "--json")
    assert code == 0, err
    (report,) = json.loads(out)["arrays"]
    assert report["masks_before"] == {"0b00": 8}
    assert report["masks_after"] == {"0b00": 4, "0b11": 4}

    from zarrext.cli.plot import mask_legend

    assert mask_legend(inv) == ["0b00", "0b01", "0b10", "0b11"]
