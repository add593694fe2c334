"""The ``zarrext`` command line.

Each job lives in its own module under ``zarrext.cli`` and exposes
``register(app)``; this module only assembles them.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="zarrext",
    help="Jobs on whole Zarr stores: demo, inspect, recompress, compact, n5, quantize.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# One module per group of commands; each defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "stores",
    "n5",
    "quantize",
    "sharding",
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"zarrext.cli.{_name}").register(app)


def main() -> None:
    """Entry point of the ``zarrext`` console script."""
    app()
