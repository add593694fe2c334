"""What importing zarrext, or resolving one of its codecs, loads (issue: zarr unchanged
for everyone else). Each check runs in a fresh interpreter."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import zarr

import zarrext

# fsspec is left out: zarr itself imports it when it is installed
HEAVY = ("rich", "typer", "matplotlib", "dask", "distributed", "pyarrow", "tifffile")

PROBE = """
import json, sys
import zarr, zarr.core.array as core_array
set_selection = core_array._set_selection
{action}
print(json.dumps({{
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r}
                      or m in ("zarrext.quantize", "zarrext.cli", "zarrext.api",
                               "zarrext.integration.optional")),
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




def test_the_layer_check_sees_imports() -> None:
    # the graph is not empty by mistake: known edges are in it
    graph = _graph(module_level_only=True)
    assert "zarrext.cli.render" in graph
    assert "zarrext.pipeline.codec_pipeline" in graph["zarrext.sharding.codec"]
    assert "zarrext.pipeline.codec_threads" in graph["zarrext.pipeline.codec_pipeline"]
    assert "zarrext.sharding.codec" in graph["zarrext.sharding.layout"]
    assert "zarrext.sharding" in graph["zarrext.jobs.recompression"]  # the package __init__ runs
    assert "zarrext.sharding.layout" in graph["zarrext.api"]
    assert "zarrext.api" in graph["zarrext.jobs.shards.dask"]
    uses = _graph(module_level_only=False)
    assert "zarrext.integration.optional" in uses["zarrext.api"]  # in a function
    assert "zarrext.integration.optional" not in graph["zarrext.api"]
    assert "zarrext.sharding" not in uses["zarrext.jobs.recompression"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "all"])
def test_no_import_circles(module_level_only: bool) -> None:
    """No circle among zarrext modules; with ``all``, imports inside functions count too
    (a deferred import hides a circle from Python, not from a reader)."""
    assert _cycles(_graph(module_level_only=module_level_only)) == []


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen




# What the pipeline module held besides the pipeline, each in a module of its own.
BELOW_THE_PIPELINE = tuple(f"zarrext.pipeline.{m}" for m in (
    "codec_threads", "chunk_io", "optional_decode", "shard_protocols", "write_encoding",
    "chunk_reads", "whole_shards"))


@pytest.mark.parametrize("module", BELOW_THE_PIPELINE)
def test_the_pipeline_helpers_sit_below_the_pipeline(module: str) -> None:
    """The pipeline uses each of them (at import time, itself or through another);
    none of them, in no function either, uses the pipeline (no circle through it)."""
    assert module in _reachable(_graph(module_level_only=True), "zarrext.pipeline.codec_pipeline")
    uses = _graph(module_level_only=False)
    assert "zarrext.pipeline.codec_pipeline" not in _reachable(uses, module)


# --- the layers: declared once in pyproject.toml ([tool.importlinter]), checked by
# `lint-imports` in `make lint`. What stays here says something the contract does not.


def test_the_layer_contract_holds() -> None:
    """The import contract as CI runs it (``make lint``), also under ``make test``."""
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))],
                          capture_output=True, text=True, cwd=SRC.parent.parent)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


def _names_the_readme_uses() -> set[str]:
    """Dotted ``zarrext`` names in the documentation's code and ``from zarrext... import``
    names."""
    from tests.docs_text import PYTHON

    code = "\n".join(block.code for block in PYTHON)
    names = set(re.findall(r"\bzarrext(?:\.[A-Za-z_][A-Za-z0-9_]*)+", code))
    for module, in_parens, plain in re.findall(
            r"from (zarrext[\w.]*) import (?:\(([\w, \n]+)\)|([\w, ]+))", code):
        imported = in_parens or plain
        names |= {f"{module}.{n.strip().split(' as ')[0]}" for n in imported.split(",")
                  if n.strip()}
    return names


def _entry_points() -> set[str]:
    pyproject = tomllib.loads((SRC.parent.parent / "pyproject.toml").read_text())
    groups = pyproject["project"]["entry-points"]
    values = {v.replace(":", ".") for group in groups.values() for v in group.values()}
    return values | {pyproject["project"]["scripts"]["zarrext"].replace(":", ".")}


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            value = getattr(value, attr)
        return value
    raise ModuleNotFoundError(dotted)


def test_every_name_the_readme_and_the_entry_points_use_imports() -> None:
    names = _names_the_readme_uses() | _entry_points() | {
        "zarrext.pipeline.ZarrextCodecPipeline"}  # the documented codec_pipeline.path
    assert len(names) > 20  # the README's blocks were found
    missing = []
    for dotted in sorted(names):
        try:
            _resolve(dotted)
        except (ImportError, AttributeError) as e:
            missing.append(f"{dotted}: {e}")
    assert missing == []


def test_a_job_function_does_not_hide_its_module() -> None:
    import zarrext.jobs.shards.check as check_module

    assert isinstance(check_module, ModuleType)
    assert zarrext.check is check_module.check


# --- the core install: no extras ------------------------------------------------------

EXTRA_PACKAGES = ("typer", "rich", "matplotlib", "dask", "distributed", "pyarrow", "tifffile",
                  "fsspec", "obstore", "icechunk")

# None in sys.modules makes every import of the package (and its submodules) fail
# with ModuleNotFoundError, as in an install without the extras.
WITHOUT_EXTRAS = f"""
import sys
for name in {EXTRA_PACKAGES!r}:
    sys.modules[name] = None
"""

CORE_JOBS = """
import json, sys
import numpy as np
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec
from zarr.registry import get_codec_class

root, extras = sys.argv[1], set(sys.argv[2].split(","))
for name in ("conditional", "optional", "zarrs.optional", "shuffle", "packbits", "pad",
             "n5_default"):
    get_codec_class(name)
import zarrext
from zarrext._extras import MissingExtraError

data = np.tile(np.linspace(0, 1, 64, dtype="float32"), (64, 1))
z = zarrext.create_array(
    f"{root}/plain", shape=(64, 64), chunks=(16, 16), dtype="float32",
    serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
    decision="never_apply",
)
z[:] = data
report = zarrext.recompress(f"{root}/plain", "compress_if_smaller")
assert report.bytes_after < report.bytes_before
s = zarrext.create_array(
    f"{root}/sharded", shape=(64, 64), chunks=(32, 32), dtype="float32",
    serializer=ShardingCodec(chunk_shape=(16, 16), codecs=[BytesCodec()]), compressors=None,
    shard_layout="fixed-slot",
)
s[:] = data
assert zarrext.compact(s).shards == 4
assert zarrext.check(s) == []
assert len(zarrext.inventory(s).chunks) == 16
from zarrext.quantize import copy_quantized
copy_quantized(f"{root}/plain", f"{root}/quantized", max_abs_error=1e-3)
assert np.allclose(zarr.open_array(f"{root}/quantized")[:], data, atol=1e-3)

messages = {}
for extra, call in [
    ("arrow", lambda: zarrext.to_arrow(np.zeros(2, dtype=[("value", "i4"), ("valid", "?")]))),
    ("dask", lambda: zarrext.write_dask(s, None)),
    ("remote", lambda: zarrext.open_array("s3://bucket/a")),
]:
    try:
        call()
    except ImportError as e:  # MissingExtraError
        messages[extra] = str(e)
    except ValueError as e:  # zarrext.stores.StoreOpenError
        messages[extra] = str(e)
loaded = sorted(m for m, v in sys.modules.items() if v is not None
                and m.split(".")[0] in extras)
print(json.dumps({"messages": messages, "loaded": loaded}))
"""


def test_the_core_runs_without_any_extra(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS + CORE_JOBS, str(tmp_path),
         ",".join(EXTRA_PACKAGES)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert set(report["messages"]) == {"arrow", "dask", "remote"}
    for extra, message in report["messages"].items():
        assert f"pip install 'zarrext[{extra}]'" in message
        assert "\n" not in message


@pytest.mark.parametrize(
    ("argv", "missing", "extra"),
    [
        (["--version"], "typer", "cli"),
        (["--version"], "rich", "cli"),
        (["inspect", "STORE", "--plot", "PNG"], "matplotlib", "plot"),
        (["demo", "DEMO"], "tifffile", "all"),
        (["demo", "DEMO"], "pyarrow", "all"),
    ],
    ids=["no-typer", "no-rich", "plot-no-matplotlib", "demo-no-tifffile", "demo-no-pyarrow"],
)
def test_the_command_without_its_extra_says_what_to_install(
    tmp_path: Path, argv: list[str], missing: str, extra: str
) -> None:
    store = tmp_path / "a.zarr"
    zarr.create_array(str(store), shape=(4,), dtype="i4")
    argv = [a.replace("STORE", str(store)).replace("PNG", str(tmp_path / "p.png"))
            .replace("DEMO", str(tmp_path / "demo")) for a in argv]
    code = (
        f"import sys\nsys.modules[{missing!r}] = None\n"
        f"from zarrext.__main__ import main\nmain({argv!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1, done.stderr  # one line, no traceback
    assert done.stderr.startswith("zarrext: error: ")
    assert f"needs {missing}, which is not installed: pip install 'zarrext[{extra}]'" in (
        done.stderr
    )
    assert not (tmp_path / "demo").exists() or not any((tmp_path / "demo").iterdir())


def test_python_m_zarrext_runs_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "zarrext", "--version"], capture_output=True,
                          text=True, check=True)
    assert done.stdout.startswith("zarrext ")


# the modules of zarrext/codecs/ that define codecs (the rest are their helpers)
CODEC_MODULES = ("conditional", "n5_default", "optional", "packbits", "pad", "shuffle")


def test_codecs_package_exports_every_codec_class_lazily() -> None:
    import inspect as pyinspect

    from zarr.abc.codec import Codec

    import zarrext.codecs

    # every Codec subclass (and error) defined in a codec's module is exported
    defined = set()
    for stem in CODEC_MODULES:
        module = importlib.import_module(f"zarrext.codecs.{stem}")
        defined |= {
            name for name, value in vars(module).items()
            if pyinspect.isclass(value) and value.__module__ == module.__name__
            and (issubclass(value, Codec) or issubclass(value, ValueError))
        }
    assert defined == set(zarrext.codecs.__all__)
    for name in zarrext.codecs.__all__:
        value = getattr(zarrext.codecs, name)
        assert value.__name__ == name
        assert getattr(zarrext, name, value) is value  # the same class as zarrext.<name>
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = zarrext.codecs.nope


def test_resolving_one_codec_loads_no_other_codec() -> None:
    code = (
        "import sys\nfrom zarr.registry import get_codec_class\n"
        "get_codec_class('shuffle')\n"
        "print(sorted(m for m in sys.modules if m.startswith('zarrext.codecs.')\n"
        f"             and m.rsplit('.', 1)[1] in {CODEC_MODULES!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    # pad comes with import zarrext (the TIFF template registers with it); the
    # heavier codecs (conditional: decisions; optional: the data type) do not
    # (private helpers of the codecs, such as _alignment, are no codecs)
    assert out.strip().splitlines()[-1] == "['zarrext.codecs.pad', 'zarrext.codecs.shuffle']"
