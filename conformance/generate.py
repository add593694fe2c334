"""Build the corpus: ``python -m conformance.generate [--out DIR] [--check]``.

Writes every case of :mod:`conformance.builders` to ``conformance/cases/`` (or
``--out``), replacing what was there; ``--check`` builds into a scratch folder and
compares it with the committed corpus file by file (exit 1 on any difference).
Deterministic: fixed seeds, gzip with ``mtime=0``, no timestamps anywhere.
This module never imports zarrext.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from conformance import values
from conformance.builders import (
    conditional,
    optional,
    pad,
    scale_offset_cast_value,
    sharding,
    statements,
)
from conformance.builders.common import SPECS, Case, dump_json
from conformance.builders.levels import relevel
from conformance.builders.names import under_the_spec_000_name

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
BUILDERS = (conditional, sharding, scale_offset_cast_value, optional, pad, statements)


def all_cases() -> list[Case]:
    """Every case, checked: ids unique, each case consistent."""
    out = relevel([case for module in BUILDERS for case in module.cases()])
    out += under_the_spec_000_name(out)
    seen = Counter(c.id for c in out)
    duplicates = [i for i, n in seen.items() if n > 1]
    assert not duplicates, f"duplicate case ids: {duplicates}"
    for case in out:
        case.check()
    return out


def _write_objects(root: Path, objects: dict[str, bytes]) -> None:
    for key, data in objects.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def write_case(case: Case, root: Path) -> Path:
    """``case`` into ``root/<spec folder>/<id>/``."""
    folder = root / SPECS[case.spec]["folder"] / case.id
    folder.mkdir(parents=True)
    record = case.record()
    arrays = {}
    for stem, array in (("expected", case.expected), ("input", case.input)):
        if array is not None:
            arrays.update(values.save(folder, stem, array))
    if "expected.valid.npy" in arrays:
        record["expected"]["valid"] = "expected.valid.npy"
    if "input.valid.npy" in arrays:
        record["expected"]["input_valid"] = "input.valid.npy"
    if arrays:
        record["arrays"] = arrays
    writer = record.get("writer")
    if writer is not None and has_conditional(case.metadata["codecs"]) and not (
            {"conditional_masks", "decision"} & writer.keys()):
        writer["decision"] = None  # said outright: the spec's default mask, all zeros
    (folder / "case.json").write_bytes(dump_json(record))
    store = folder / "store"
    store.mkdir()
    (store / "zarr.json").write_bytes(dump_json(case.metadata))
    _write_objects(store, case.objects)
    if case.expected_objects:
        _write_objects(folder / "expected", case.expected_objects)
    return folder


def has_conditional(codecs: list) -> bool:
    """Whether a codec chain holds spec 000's codec, nested ones included."""
    for codec in codecs:
        if not isinstance(codec, dict):
            continue
        if codec.get("name") in ("conditional", "optional") and "codecs" in (
                codec.get("configuration") or {}):
            return True
        config = codec.get("configuration") or {}
        if any(isinstance(config.get(k), list) and has_conditional(config[k])
               for k in ("codecs", "index_codecs", "mask_codecs", "data_codecs")):
            return True
    return False


def write_corpus(root: Path) -> list[Case]:
    """The whole corpus into ``root`` (emptied first), with ``index.json``."""
    cases = all_cases()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    index = []
    for case in cases:
        folder = write_case(case, root)
        index.append({"id": case.id, "spec": case.spec, "kind": case.kind,
                      "path": folder.relative_to(root).as_posix()})
    counts = Counter(c.spec for c in cases)
    (root / "index.json").write_bytes(dump_json({
        "specs": {k: {**v, "cases": counts[k]} for k, v in SPECS.items()},
        "cases": index,
    }))
    return cases


def _normalized(text: str) -> str:
    return " ".join(text.split())


def unquoted_clauses(cases: list[Case], specs: Path) -> list[str]:
    """Ids of cases whose clause is not verbatim in its spec's text (whitespace aside).

    ``specs`` holds the spec files, one per spec, named from its number
    (``000_*.txt`` ... ``004_*.txt``).
    """
    texts = {p.name[:3]: _normalized(p.read_text(encoding="utf-8"))
             for p in specs.glob("[0-9][0-9][0-9]_*")}
    return [c.id for c in cases if _normalized(c.clause) not in texts.get(c.spec, "")]


def differences(left: Path, right: Path) -> list[str]:
    """Relative paths that differ between two trees (missing on one side included)."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.extend(prefix + n for n in cmp.left_only + cmp.right_only + cmp.funny_files)
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files,
                                               shallow=False)
        out.extend(prefix + n for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(left, right), "")
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.generate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CASES, help="corpus folder to (re)write")
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh build with --out instead of writing it")
    parser.add_argument("--specs", type=Path,
                        help="folder of the spec texts (000_*.txt ...): check that every "
                             "case's clause is quoted verbatim")
    args = parser.parse_args(argv)
    if args.specs is not None:
        unquoted = unquoted_clauses(all_cases(), args.specs)
        for case_id in unquoted:
            print(f"clause not in its spec: {case_id}")
        if unquoted:
            return 1
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            write_corpus(Path(tmp) / "cases")
            diff = differences(Path(tmp) / "cases", args.out)
        for path in diff:
            print(f"differs: {path}")
        print(f"{len(diff)} differences" if diff else "corpus up to date")
        return 1 if diff else 0
    cases = write_corpus(args.out)
    counts = Counter(c.spec for c in cases)
    for spec, n in sorted(counts.items()):
        print(f"{SPECS[spec]['folder']}: {n} cases")
    print(f"{len(cases)} cases written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
