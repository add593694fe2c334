"""The ``zarrext`` console script (and ``python -m zarrext``).

Outside ``zarrext.cli`` so that an install without the ``cli`` extra (typer,
rich) ends with one line saying what to install, not an import traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zarrext._extras import MissingExtraError, needs


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line; exits with the command's code (1 when the extra is missing)."""
    try:
        with needs("cli", "the zarrext command"):
            from zarrext.cli import main as cli_main
    except MissingExtraError as e:
        print(f"zarrext: error: {e}", file=sys.stderr)
        sys.exit(1)
    cli_main(argv)


if __name__ == "__main__":
    main()
