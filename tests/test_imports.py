"""What importing zarrext, or resolving one of its codecs, loads (issue: zarr unchanged
for everyone else). Each check runs in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import zarrext

HEAVY = ("rich", "typer", "matplotlib", "dask", "distributed", "pyarrow", "tifffile")

PROBE = """
import json, sys
import zarr, zarr.core.array as core_array
set_selection = core_array._set_selection
{action}
print(json.dumps({{
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r}
                      or m in ("zarrext.quantize", "zarrext.cli", "zarrext.api",
                               "zarrext.optional_integration")),
    "wrapped": core_array._set_selection is not set_selection,
}}))
"""


@pytest.mark.parametrize(
    "action",
    [
        "from zarr.registry import get_codec_class; get_codec_class('shuffle')",
        "from zarr.registry import get_codec_class; get_codec_class('conditional')",
        "import zarrext",
    ],
    ids=["resolve-shuffle", "resolve-conditional", "import-zarrext"],
)
def test_loads_nothing_heavy_and_wraps_nothing(action: str) -> None:
    # zarrext.dtypes.optional (the data type alone, numpy and zarr only) may load: import
    # zarrext registers it so zarr's registry never grows while someone iterates it.
    # What wraps zarr functions (optional_integration) must not load.
    code = PROBE.format(action=action, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"modules": [], "wrapped": False}


def test_every_public_name_resolves_lazily() -> None:
    assert sorted(zarrext.__all__) == sorted(zarrext._LAZY)
    for name in zarrext.__all__:
        assert getattr(zarrext, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = zarrext.nope


# --- layers, read from the source with ast (no import needed) -----------------------

SRC = Path(zarrext.__file__).parent
UI_ONLY = ("rich", "typer", "matplotlib")  # drawing and command lines: cli/ and demo/ only


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package ``__init__``)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (not in functions, not TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse,
                          node.finalbody):
                yield from _module_level(block)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)


def _imported(name: str, is_package: bool, node: ast.Import | ast.ImportFrom,
              modules: dict[str, tuple[Path, bool]]) -> set[str]:
    """Dotted names ``node`` imports (a submodule where ``from x import y`` names one)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        package = name.split(".") if is_package else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}


def _graph(*, module_level_only: bool) -> dict[str, set[str]]:
    """zarrext module -> zarrext modules it imports.

    ``module_level_only``: what runs at import time. Importing ``a.b.c`` from outside
    package ``a.b`` also runs ``a/b/__init__.py``, so that edge is in the graph (it
    is how ``api`` -> ``sharding.layout`` closed a circle through
    ``sharding/__init__`` -> ``sharding.dask`` -> ``api``). Otherwise: every import,
    in functions too, from module to module (which module uses which; a package's
    re-exports are not uses).
    """
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = (
            _module_level(tree.body) if module_level_only
            else (n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom))
        )
        edges: set[str] = set()
        for node in nodes:
            for target in _imported(name, is_package, node, modules):
                if target.split(".")[0] != "zarrext":
                    continue
                while target not in modules:  # an attribute of a module: the module
                    target = target.rsplit(".", 1)[0]
                parts = target.split(".")
                edges.add(target)
                for i in range(2, len(parts) if module_level_only else 0):
                    ancestor = ".".join(parts[:i])
                    if not (name == ancestor or name.startswith(ancestor + ".")):
                        edges.add(ancestor)
        edges.discard(name)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_only_cli_and_demo_import_rich_typer_matplotlib() -> None:
    offenders = []
    for name, (path, is_package) in _modules().items():
        if name.split(".")[1:2] in (["cli"], ["demo"]):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):  # in functions too: a library job draws nothing
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(name, is_package, node, {}):
                    if target.split(".")[0] in UI_ONLY:
                        offenders.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {target}")
    assert offenders == []


def test_the_layer_check_sees_imports() -> None:
    # the graph is not empty by mistake: known edges are in it
    graph = _graph(module_level_only=True)
    assert "zarrext.cli.render" in graph
    assert "zarrext.pipeline" in graph["zarrext.sharding.layout"]
    assert "zarrext.sharding" in graph["zarrext.recompression"]  # the package __init__ runs
    assert "zarrext.sharding.layout" in graph["zarrext.api"]
    assert "zarrext.api" in graph["zarrext.sharding.dask"]
    uses = _graph(module_level_only=False)
    assert "zarrext.sharding.reader" in uses["zarrext.pipeline"]  # in a function
    assert "zarrext.sharding" not in uses["zarrext.recompression"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "all"])
def test_no_import_circles(module_level_only: bool) -> None:
    """No circle among zarrext modules; with ``all``, imports inside functions count too
    (a deferred import hides a circle from Python, not from a reader)."""
    assert _cycles(_graph(module_level_only=module_level_only)) == []
