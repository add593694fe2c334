"""``--help`` reads well at 80 columns, and the shell completion is there (issue 27.12)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from tests.conftest import Run
from zarrext.cli import app

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _option_names(command: str) -> list[str]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return [
        name for param in click_command.params if param.param_type_name == "option"
        for name in (*param.opts, *param.secondary_opts)
    ]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_at_80_columns_is_whole_and_plain(
    run: Run, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(command, "--help")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out  # nothing cut
    assert "<bool>" not in out  # a flag is shown bare
    assert "{" + "path}" not in out
    assert "{PATH}" not in out
    words = set(out.replace("│", " ").replace(",", " ").split())
    for name in _option_names(command):
        assert name in words, f"{command} --help lacks {name}"
    if any(name == "path" for name in _argument_names(command)):
        assert f"Usage: zarrext {command} [OPTIONS] PATH" in out


def _argument_names(command: str) -> list[str]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return [p.name for p in click_command.params if p.param_type_name == "argument"]


def test_top_level_help_is_plain(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run("--help")
    assert code == 0
    assert "<bool>" not in out
    assert "…" not in out
    assert "--install-completion" in out
    assert "--show-completion" in out


@pytest.mark.parametrize(
    ("command", "offered", "says"),
    [
        ("info", True, None),
        ("inspect", True, None),
        ("check", True, "Not with --repair"),
        ("recompress", True, "Only with --dry-run"),
        ("compact", True, "Only with --dry-run"),
        ("quantize", False, None),  # always writes: a snapshot is never taken
        ("expand", False, None),
    ],
)
def test_icechunk_snapshot_help_says_when_it_applies(
    run: Run, monkeypatch: pytest.MonkeyPatch, command: str, offered: bool, says: str | None
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(command, "--help")
    assert code == 0
    assert ("--icechunk-snapshot" in out) is offered
    assert "commands that only read" not in out
    if says is not None:
        assert says in out


def test_quantize_refuses_a_snapshot_as_an_unknown_option(run: Run) -> None:
    code, _, err = run("quantize", "x.zarr", "--out", "y.zarr", "--max-abs-error", "0.1",
                       "--icechunk-snapshot", "ABC")
    assert code == 2
    assert "--icechunk-snapshot" in err


def _console_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``zarrext ARGS`` as a shell runs it: the venv's console script, in a process of
    its own, ``env`` added to the environment."""
    script = Path(sys.executable).with_name("zarrext")
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)


def test_shell_completion_script_and_completions() -> None:
    # typer detects the shell from the parent process (sh under make, as in CI) unless
    # told, by its own test switch, to take the shell named on the command line
    shown = _console_script("--show-completion", "bash",
                            _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    assert shown.returncode == 0, shown.stderr
    assert "_ZARREXT_COMPLETE=complete_bash" in shown.stdout
    assert "complete " in shown.stdout
    assert "zarrext" in shown.stdout
    commands = _console_script(_ZARREXT_COMPLETE="complete_bash", COMP_WORDS="zarrext in",
                               COMP_CWORD="1")
    assert commands.returncode == 0, commands.stderr
    assert commands.stdout.split() == ["info", "inspect"]
    options = _console_script(_ZARREXT_COMPLETE="complete_bash",
                              COMP_WORDS="zarrext recompress --dr", COMP_CWORD="2")
    assert options.returncode == 0, options.stderr
    assert options.stdout.split() == ["--dry-run"]
