"""``zarrext demo``: build real examples and print what happened."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from zarrext.cli.failures import fail


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        directory: Annotated[
            Path | None,
            typer.Argument(help="Where to build the examples and keep them (default: a "
                           "temporary directory, removed when the demo ends)."),
        ] = None,
    ) -> None:
        """Build every example store and show what each extension did."""
        from zarrext.demo import run_all

        console = Console()
        if directory is None:
            with tempfile.TemporaryDirectory(prefix="zarrext-demo-") as tmp:
                run_all(Path(tmp), console, temporary=True)
        else:
            if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
                fail(f"{directory} already exists and is not empty; give a new directory")
            directory.mkdir(parents=True, exist_ok=True)
            run_all(directory, console)
