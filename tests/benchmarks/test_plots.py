"""benchmarks/plots.py makes the Performance page's tables and plots from the results
the benchmarks save (timing.save_results); the page includes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_results_become_a_table_and_a_plot(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    results.mkdir()
    (results / "demo.json").write_text(json.dumps({
        "title": "Demo: 8 MiB", "reference": "b", "mib": 8.0, "load": [1.0, 2.0, 3.0],
        "seconds": {"a": [1.0, 3.0, 2.0], "b": [2.0, 2.0, 4.0]},
    }))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plots.py"),
                           "--results", str(results), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    table = (out / "demo.md").read_text()
    assert "load average 1.0 2.0 3.0" in table
    # row a: best 1 s, median 2 s, 8 MiB/s, paired ratios 0.5, 1.5, 0.5 -> median 0.5
    assert "| a | 1.000 s | 2.000 s | 8 | 0.50 |" in table
    assert "| b | 2.000 s | 2.000 s | 4 | 1.00 |" in table
    assert (out / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_performance_page_includes_every_committed_result() -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    made = sorted((ROOT / "docs" / "assets" / "performance").glob("*.md"))
    assert made
    for table in made:
        assert f'--8<-- "docs/assets/performance/{table.name}"' in page
        assert f"(assets/performance/{table.stem}.png)" in page
        assert table.with_suffix(".png").is_file()
