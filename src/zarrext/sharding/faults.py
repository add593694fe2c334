"""Fault injection for tests: kill this process at named points of a transaction.

``ZARREXT_SHARDING_FAULT="point=probability,..."`` (read at import) makes
:func:`fault` return True with that probability at ``point`` (the writer's
``journal``, ``data``, ``index``, ``published``; in-place compaction's
``compact-data``, ``compact-index``); the caller then calls :func:`die`, which
sends itself SIGKILL. Unset, :func:`fault` is always False.
"""

from __future__ import annotations

import os
import random
import signal

__all__ = ["die", "fault"]


def _parse_faults(text: str | None) -> dict[str, float]:
    faults: dict[str, float] = {}
    for item in (text or "").split(","):
        if "=" in item:
            name, _, prob = item.partition("=")
            faults[name.strip()] = float(prob)
    return faults


_FAULTS = _parse_faults(os.environ.get("ZARREXT_SHARDING_FAULT"))


def fault(point: str) -> bool:
    """Whether to die at ``point`` now."""
    prob = _FAULTS.get(point)
    return prob is not None and random.random() < prob


def die() -> None:
    """SIGKILL this process (no cleanup, as a crash)."""
    os.kill(os.getpid(), signal.SIGKILL)
