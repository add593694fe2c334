"""The documentation as a reader meets it: README.md, then the site's pages in the
order of mkdocs.yml's navigation, with their code blocks.

One harness for both (tests/docs/test_examples.py runs every block; other tests
look up a sentence or a section here, wherever it lives).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.paths import ROOT

DOCS = ROOT / "docs"


def _nav_pages(nav: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _documents() -> list[Path]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return [ROOT / "README.md", *(DOCS / page for page in _nav_pages(config["nav"]))]


DOCUMENTS: list[Path] = _documents()


def name(document: Path) -> str:
    """A document's path in the repository."""
    return document.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """One fenced code block: its document, its language and its code."""

    document: str
    kind: str
    code: str
    number: int

    @property
    def id(self) -> str:
        return f"{self.document}:{self.number}"


def blocks_of(document: Path) -> list[Block]:
    found = re.findall(r"```(\w*)\n(.*?)```", document.read_text(), flags=re.S)
    return [Block(name(document), kind, code, i) for i, (kind, code) in enumerate(found)]


ALL_BLOCKS: list[Block] = [b for document in DOCUMENTS for b in blocks_of(document)]
PYTHON: list[Block] = [b for b in ALL_BLOCKS if b.kind == "python"]


def is_setup(block: Block) -> bool:
    """A shell block of set-up commands (make, pip): what a reader runs once, not a
    zarrext command; tests/docs/test_examples.py checks them apart."""
    lines = [line for line in block.code.splitlines() if line.strip()]
    return block.kind == "sh" and all(line.split()[0] in ("make", "pip") for line in lines)


def text() -> str:
    """Every document's text, in order, as one string."""
    return "\n".join(d.read_text() for d in DOCUMENTS)


def page(path: str) -> str:
    """The text of one document, by its path in the repository."""
    return (ROOT / path).read_text()


def one_block(kind: str, containing: str) -> Block:
    """The one block of ``kind`` whose code contains ``containing``."""
    [block] = [b for b in ALL_BLOCKS if b.kind == kind and containing in b.code]
    return block
