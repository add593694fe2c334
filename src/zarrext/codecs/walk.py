"""Codecs that hold codecs: the one walker over nested chains.

``sharding_indexed`` and ``conditional`` hold a chain (``codecs``), ``optional`` two
(``mask_codecs``, ``data_codecs``), and each nested codec may hold chains again.
Everything that looks through the nesting (the runtime binding of decisions and
padding, the scratch forms of a chain, which decisions keep chunk bytes, whether a
chain verifies its bytes) walks it here, by these attributes, so that a codec that
nests codecs is followed everywhere at once. This module imports nothing of
zarrext: every codec module may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

__all__ = ["NESTING_ATTRIBUTES", "map_nested", "nested_codecs", "walk_codecs"]

# Where a codec holds codecs of its own: sharding and conditional (``codecs``), the
# optional codec (``mask_codecs``, ``data_codecs``).
NESTING_ATTRIBUTES = ("codecs", "mask_codecs", "data_codecs")


def nested_codecs(codec: Any, chains: Sequence[str] = NESTING_ATTRIBUTES) -> list[Any]:
    """The codecs ``codec`` holds directly in its ``chains`` (none for a codec that
    nests none)."""
    return [c for attr in chains for c in getattr(codec, attr, ()) or ()]


def walk_codecs(codecs: Iterable[Any], chains: Sequence[str] = NESTING_ATTRIBUTES) -> Iterator[Any]:
    """Each of ``codecs`` and every codec nested in it through ``chains``, at any
    depth, depth first."""
    for codec in codecs:
        yield codec
        yield from walk_codecs(nested_codecs(codec, chains), chains)


def map_nested[C](codec: C, fn: Callable[[Any], Any],
                  chains: Sequence[str] = NESTING_ATTRIBUTES) -> C:
    """A copy of ``codec`` with ``fn`` applied to each codec it holds directly in its
    ``chains`` (``codec`` itself when it holds none there, or ``fn`` gives back each
    of them as it is: a codec's caches stay); ``fn`` recurses if it should.

    The copy is made by :func:`dataclasses.replace`: the codec's class and its other
    settings stay.
    """
    changes = {}
    for attr in chains:
        held = getattr(codec, attr, None)
        if held is None:
            continue
        mapped = tuple(fn(c) for c in held)
        if any(new is not old for new, old in zip(mapped, held, strict=True)):
            changes[attr] = mapped
    if not changes:
        return codec
    return replace(codec, **changes)  # type: ignore[type-var]
