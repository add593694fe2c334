"""How the commands' ``--help`` reads: conventional placeholders, nothing cut at 80 columns.

typer shows every flag's type (``--json <bool>``) and a required argument as
``{path}``; these command classes show flags bare and arguments as ``PATH`` (the
name the help texts use), which also leaves room for the option names in a
narrow terminal.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["HelpCommand", "HelpGroup"]


def _tidy(param: Any) -> Any:
    if isinstance(param, TyperArgument) and param.metavar is None and param.name:
        param.metavar = param.name.upper()
    elif isinstance(param, TyperOption) and param.is_flag and not param.count:
        param.metavar = ""  # typer shows the metavar in place of the type: nothing
    return param


def _usage_pieces(command: TyperCommand | TyperGroup, ctx: Any) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if isinstance(param, TyperArgument):
            name = (param.metavar or "") + ("..." if param.nargs != 1 else "")
            pieces.append(name if param.required else f"[{name}]")
        else:
            pieces.extend(param.get_usage_pieces(ctx))
    return pieces


class HelpCommand(TyperCommand):
    """A typer command whose help shows ``PATH`` for an argument and no type for a flag."""

    def get_params(self, ctx: Any) -> list[Any]:
        return [_tidy(param) for param in super().get_params(ctx)]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)


class HelpGroup(TyperGroup):
    """The ``zarrext`` group, its options shown as :class:`HelpCommand` shows them."""

    def get_params(self, ctx: Any) -> list[Any]:
        return [_tidy(param) for param in super().get_params(ctx)]
