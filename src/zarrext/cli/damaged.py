"""Damaged chunks a command met, said: one stderr line each, or JSON records."""

from __future__ import annotations

from typing import Any

__all__ = ["damaged_json", "name_damaged"]


def name_damaged(damaged: list[Any], path: str) -> None:
    """One ``zarrext: damaged:`` line per damaged chunk on stderr, named from ``path``."""
    import sys

    from zarrext.cli.failures import named_by_path

    for error in damaged:
        print(f"zarrext: damaged: {named_by_path(error, path)}", file=sys.stderr)


def damaged_json(damaged: list[Any]) -> list[dict[str, Any]]:
    """Damaged chunks as JSON records: array, key, inner chunk, codec and reason."""
    return [
        {"array": e.array or "/", "key": e.key, "inner": None if e.inner is None else list(e.inner),
         "codec": e.codec, "reason": e.reason}
        for e in damaged
    ]
