"""The examples behind ``zarrext demo``.

Each section is a module of this package with ``run(root: Path, console: Console)``;
it builds its stores under ``root / <section name>`` and prints what happened.

Layer: the top, with :mod:`zarrext.cli` (whose tables it prints); may import every
other layer, and rich.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

from zarrext._extras import needs

SECTIONS: tuple[str, ...] = (
    "conditional",
    "quantize",
    "tiff",
    "nullable",
    "sharding",
)


def run_all(root: Path, console: Console, *, temporary: bool = False) -> None:
    """Run every demo section in order under ``root``.

    ``temporary``: ``root`` is removed when the demo ends, so its path is not
    printed (a path that no longer exists would only mislead); otherwise the demo
    says where the stores stay, first and last.
    """
    # Every section first: a missing extra (Arrow, TIFF) fails before any output.
    with needs("all", "zarrext demo"):
        modules = {name: importlib.import_module(f"zarrext.demo.{name}") for name in SECTIONS}
    where = ("in a temporary directory, removed when the demo ends (zarrext demo DIRECTORY "
             "keeps the stores)" if temporary else f"in {root}")
    console.print(f"[bold]zarrext demo[/bold] {where}")
    for name, module in modules.items():
        console.print(Rule(name))
        section_root = root / name
        section_root.mkdir(parents=True, exist_ok=True)
        module.run(section_root, console)
    if not temporary:
        console.print(f"the stores are kept in {root}", highlight=False)
