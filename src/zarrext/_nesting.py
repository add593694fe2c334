"""A cap on how deeply metadata may nest codecs and data types.

``conditional`` holds codecs, ``optional`` holds codec chains and an ``optional``
data type holds another data type: each is parsed recursively, so hostile metadata
nesting them hundreds of levels deep would end in a ``RecursionError`` after
seconds of parsing. Every recursive parser enters :func:`nested` once per level,
and past :data:`MAX_NESTING` levels gets a ``ValueError`` at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["MAX_NESTING", "NestingError", "check_depth", "nested"]

# Far beyond any real chain (zarrs' examples nest optional two levels deep).
MAX_NESTING = 32

_depth: ContextVar[int] = ContextVar("zarrext_nesting_depth", default=0)


class NestingError(ValueError):
    """Metadata that nests codecs or data types more than :data:`MAX_NESTING` deep."""


@contextlib.contextmanager
def nested(what: str) -> Iterator[None]:
    """One more level of nesting while parsing ``what`` (a codec or data type name)."""
    depth = _depth.get() + 1
    if depth > MAX_NESTING:
        raise NestingError(
            f"{what}: metadata nests codecs or data types more than {MAX_NESTING} levels deep"
        )
    token = _depth.set(depth)
    try:
        yield
    finally:
        _depth.reset(token)


def check_depth(document: object, child: str, what: str) -> None:
    """Refuse ``document`` when following its ``child`` key nests past the cap.

    A cheap walk before parsing: the recursive parsers stop at the cap too, but
    only after each level has tried its candidates (zarr's data type registry
    tries every registered type per level).
    """
    depth = 0
    node = document
    # Only named children count: the innermost type's own configuration is no level.
    while isinstance(node, dict) and isinstance(node.get(child), dict) and "name" in node[child]:
        node = node[child]
        depth += 1
        if depth > MAX_NESTING:
            raise NestingError(
                f"{what}: metadata nests codecs or data types more than {MAX_NESTING} "
                "levels deep"
            )
