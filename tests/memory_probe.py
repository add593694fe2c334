"""Peak memory of one ``zarrext.convert`` call, measured in a process of its own.

``python -m tests.memory_probe JSON`` (JSON: :class:`Probe`'s fields) converts a
small array first (imports, codec threads, store clients: the process's constant
part), resets the kernel's high-water mark of its resident memory (``5`` written to
``/proc/self/clear_refs``), converts the array measured, and prints, as JSON, how
far the resident memory rose above what it was just before (``VmHWM`` minus
``VmRSS``, bytes).

The kernel's count is what a user sees (every allocation: numpy's, the codecs' C
libraries', the store clients'); in a process of its own, the test's own arrays
and earlier tests do not count.

:func:`worker_mark` and :func:`worker_rise` are the same two readings for a Dask
worker (run there with ``client.run``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.paths import ROOT


@dataclass(frozen=True)
class Probe:
    """One measured conversion: ``zarrext.convert(source, output, **kwargs)``, after
    ``zarrext.convert(warm_source, warm_output, **kwargs)``, under ``config``
    (zarr's configuration, e.g. ``{"async.concurrency": 4}``)."""

    source: str
    output: str
    warm_source: str
    warm_output: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, Any] | None = None


def _status(name: str) -> int:
    """A ``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    raise KeyError(name)


def worker_mark() -> int:
    """Reset this process's high-water mark of resident memory; its resident bytes now."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def worker_rise(mark: int) -> int:
    """How far the resident memory rose above ``mark`` since :func:`worker_mark`."""
    return _status("VmHWM") - mark


def _main(probe: Probe) -> dict[str, int]:
    import zarr

    import zarrext

    options = {"storage_options": probe.storage_options} if probe.storage_options else {}
    with zarr.config.set(probe.config):
        zarrext.convert(probe.warm_source, probe.warm_output, **probe.kwargs, **options)
        mark = worker_mark()
        zarrext.convert(probe.source, probe.output, **probe.kwargs, **options)
        return {"rss_rise": worker_rise(mark), "rss_before": mark}


def measure(probe: Probe) -> dict[str, int]:
    """Run ``probe`` in a new Python process; its readings (bytes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-m", "tests.memory_probe", json.dumps(asdict(probe))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the probe failed:\n{done.stderr}")
    result: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    return result


if __name__ == "__main__":
    print(json.dumps(_main(Probe(**json.loads(sys.argv[1])))))
