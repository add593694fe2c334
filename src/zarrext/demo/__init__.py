"""The examples behind ``zarrext demo``.

Each section is a module of this package with ``run(root: Path, console: Console)``;
it builds its stores under ``root / <section name>`` and prints what happened.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

SECTIONS: tuple[str, ...] = (
    "conditional",
    "quantize",
    "tiff",
    "nullable",
    "sharding",
)


def run_all(root: Path, console: Console) -> None:
    """Run every demo section in order under ``root``."""
    console.print(f"[bold]zarrext demo[/bold] in {root}")
    for name in SECTIONS:
        module = importlib.import_module(f"zarrext.demo.{name}")
        console.print(Rule(name))
        section_root = root / name
        section_root.mkdir(parents=True, exist_ok=True)
        module.run(section_root, console)
