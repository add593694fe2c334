"""The ``zarrext`` command line.

Each job lives in its own module under ``zarrext.cli`` and exposes
``register(app)``; this module only assembles them and turns expected failures
into one line on stderr (see ``zarrext.cli.failures``).

Layer: the top, with :mod:`zarrext.demo`; may import every other layer. Only the
CLI and the demo import rich, typer and matplotlib (the import contract in
``pyproject.toml``, checked by ``make lint``).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn

import typer

# typer >= 0.20 carries its own copy of click; its usage errors are these classes.
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from zarr.errors import BaseZarrError

from zarrext._exit import settle_background_io
from zarrext._extras import MissingExtraError
from zarrext.cli._help import HelpCommand, HelpGroup
from zarrext.cli._warnings import wrapped as shown_warnings
from zarrext.cli.failures import (
    EXIT_CODES_HELP,
    CliError,
    ExitCode,
    failure,
    named_by_path,
    one_line,
)

HELP = (
    "Jobs on whole Zarr stores: convert and quantize copy Zarr format 3 or 2 into "
    "format 3; the other jobs work on format 3 (see each command's --help)."
)

app = typer.Typer(
    name="zarrext",
    help=HELP,
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=True,
    cls=HelpGroup,
    pretty_exceptions_show_locals=False,
)

# One module per group of commands; each defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "info",
    "inspect",
    "recompress",
    "n5",
    "quantize",
    "convert",
    "sharding",
)

# Failures a user can cause and fix: bad input, bad data, an unusable path. Anything
# else is a bug in zarrext and keeps its traceback.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, OSError, BaseZarrError, MissingExtraError,
)


def _remote_errors() -> tuple[type[BaseException], ...]:
    # obstore's errors are no OSError: a remote store's failure is expected too.
    try:
        from obstore.exceptions import BaseError
    except ImportError:
        return ()
    return (BaseError,)


def _show_tracebacks() -> bool:
    return os.environ.get("ZARREXT_TRACEBACK", "") not in ("", "0")


def _error(message: str, code: int) -> NoReturn:
    typer.echo(f"zarrext: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command so that an expected failure ends it with one line on stderr."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as e:
            if _show_tracebacks():
                raise
            _error(f"interrupted: {one_line(e) or 'stopped'}", ExitCode.INTERRUPTED)
        except Exception as e:
            if not isinstance(e, (CliError, *EXPECTED_ERRORS, *_remote_errors())):
                raise  # a bug in zarrext: its traceback
            if _show_tracebacks():
                raise
            # the stores the command names, for an error of a remote one
            locations = [kwargs.get(name) for name in ("path", "out")]
            _error(*failure(named_by_path(e, kwargs.get("path")), locations))

    return run


def _print_version(value: bool) -> None:
    if value:
        from zarrext import __version__

        typer.echo(f"zarrext {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Jobs on whole Zarr stores (see each command's --help)."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"zarrext.cli.{_name}").register(app)
for _command in app.registered_commands:
    # warnings inside, errors outside: a warning raised before an error is shown first
    _command.callback = one_line_errors(
        shown_warnings(_command.callback)  # type: ignore[arg-type]
    )
    _command.cls = HelpCommand


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``zarrext`` console script: exits with the command's code.

    Usage errors (a bad option value, an unknown command) are one line too.
    """
    # obstore's threads must be out of Python before the interpreter finalizes, or a
    # run can abort after its output (see zarrext._exit). atexit runs this before
    # zarr's own cleanup (registered earlier) closes zarr's event loop.
    atexit.unregister(settle_background_io)
    atexit.register(settle_background_io)
    command = typer.main.get_command(app)
    try:
        code = command.main(
            args=list(argv) if argv is not None else None,
            prog_name="zarrext",
            standalone_mode=False,
        )
    except NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx is not None else str(e))
        sys.exit(0)
    except UsageError as e:
        name = e.ctx.command_path if e.ctx is not None else "zarrext"
        typer.echo(f"zarrext: error: {e.format_message()} (see {name} --help)", err=True)
        sys.exit(ExitCode.USAGE)
    except typer.Abort:
        typer.echo("zarrext: error: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
