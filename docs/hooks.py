"""MkDocs hooks: the API and CLI reference pages, generated at build time.

``reference/api.md`` holds the marker ``<!-- zarrext:api -->``: it becomes one
mkdocstrings block per name of ``zarrext.__all__``, taken from the module that
defines it. ``reference/cli.md`` holds ``<!-- zarrext:cli -->``: it becomes a section
per command of the ``zarrext`` command line, from the command definitions (usage,
help, every option with its default). Neither page is written by hand.
"""

from __future__ import annotations

import inspect
from typing import Any

API_MARKER = "<!-- zarrext:api -->"
CLI_MARKER = "<!-- zarrext:cli -->"


def defining_module(name: str) -> str:
    """The module a public name of ``zarrext`` is defined in (its reference's path)."""
    import zarrext

    value = getattr(zarrext, name)
    if inspect.ismodule(value):
        return value.__name__
    module = getattr(value, "__module__", None) or zarrext._LAZY[name]
    return f"{module}.{name}"


def api_reference() -> str:
    import zarrext

    blocks = []
    for name in sorted(zarrext.__all__, key=str.lower):
        target = defining_module(name)
        # a module (zarrext.quantize): its own docstring and its public functions
        options = "\n    options:\n      show_submodules: false" \
            if inspect.ismodule(getattr(zarrext, name)) else ""
        blocks.append(f"::: {target}{options}\n")
    return "\n".join(blocks)


def _option_rows(command: Any) -> list[str]:
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        if param.param_type_name == "argument":
            names = f"`{param.name.upper()}`"
        text = " ".join((getattr(param, "help", None) or "").split()).replace("|", "\\|")
        default = param.default
        shown = "" if default in (None, (), [], False) or callable(default) else f"`{default}`"
        rows.append(f"| {names} | {text} | {shown} |")
    return rows


def cli_reference() -> str:
    import typer

    from zarrext.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("zarrext", [], resilient_parsing=True)
    parts = [" ".join((group.help or "").split()), ""]
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
        usage = " ".join(command.collect_usage_pieces(sub))
        parts += [f"## `zarrext {name}`", "", "```", f"zarrext {name} {usage}", "```", ""]
        parts += [inspect.cleandoc(command.help or ""), ""]
        rows = _option_rows(command)
        if rows:
            parts += ["| argument or option | what it does | default |", "|---|---|---|",
                      *rows, ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, api_reference())
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown
