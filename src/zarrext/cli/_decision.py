"""The ``--decision`` option: a built-in decision's spelling, checked before any work."""

from __future__ import annotations

from typing import Any

import typer

from zarrext.codecs.decisions import (
    BUILTIN_DECISIONS,
    DecisionError,
    builtin_choices,
    from_spelling,
)

__all__ = ["DECISION", "decision_option"]


def _known_decision(spelling: str | None) -> str | None:
    """``spelling`` made canonical; an unknown or ill-spelt decision is a usage error."""
    if spelling is None:
        return None
    if spelling.partition("(")[0].strip() not in BUILTIN_DECISIONS:
        raise typer.BadParameter(f"{spelling!r} is unknown; choose one of {builtin_choices()}")
    try:
        return from_spelling(spelling).spelling()
    except DecisionError as e:
        raise typer.BadParameter(str(e)) from None


def decision_option(default: str = "") -> Any:
    """The ``--decision`` option, its help listing the built-ins (``default``: what
    the help says is taken without it, where typer shows no default)."""
    return typer.Option(
        "--decision",
        metavar="DECISION",
        help="Built-in decision for the conditional codec(s): " + builtin_choices()
        + "; a decision's arguments in parentheses: name(value) or name(parameter=value)."
        + default,
        callback=_known_decision,
    )


DECISION = decision_option()
"""The ``--decision`` option: a built-in decision's spelling (else exit 2)."""
