"""What :func:`~zarrext.jobs.shards.check.check` reports: one :class:`ShardCheck` per
store key, holding each :class:`Problem` found there and what repair did about it.

The report model only: it reads no bytes and imports nothing of zarrext; the kinds
of problem are described in :mod:`zarrext.jobs.shards.check`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["OBJECT_ADVICE", "RESTORE", "REWRITE", "Problem", "ShardCheck"]

RESTORE = "restore the shard from a copy"
"""What to do about a shard whose bytes are gone (truncated, index unreadable)."""
REWRITE = "rewrite the chunk (its data is gone) or delete it"
"""What to do about a chunk whose bytes do not decode."""
OBJECT_ADVICE = "rewrite or delete the shard object (--repair works on local directories)"
"""What to do about a bad index entry in a store that cannot be repaired in place."""


@dataclass(frozen=True)
class Problem:
    """One problem :func:`~zarrext.jobs.shards.check.check` found at a store key.

    Attributes
    ----------
    kind : str
        What sort of problem (see :mod:`zarrext.jobs.shards.check`): ``"truncated"``,
        ``"index_checksum"``, ``"index_unreadable"``, ``"entry_past_end"``,
        ``"entry_overlaps_index"``, ``"entries_overlap"``, ``"interrupted_write"``,
        ``"torn_journal"``, ``"inactive_journal"``, ``"orphan_journal"``,
        ``"orphan_quarantine"``, ``"stale_temporary_file"``, ``"undecodable_chunk"``
        or ``"fill_value_lost"`` (at ``zarr.json``: the array's metadata, not a chunk);
        ``zarrext check`` also reports ``"interrupted_output"``: a temporary output a
        killed job left in a group (:func:`zarrext.jobs.outputs.find_leftovers`).
    text : str
        The problem in words (without the key, which the finding carries).
    fix : str or None
        What ``repair=True`` does (or did) about it; None when it cannot fix it.
    advice : str or None
        What to do instead when ``repair`` cannot fix it.
    repaired : bool
        Whether this run fixed it.
    """

    kind: str
    text: str
    fix: str | None = None
    advice: str | None = None
    repaired: bool = False

    @property
    def repairable(self) -> bool:
        """Whether ``repair=True`` fixes it."""
        return self.fix is not None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this problem."""
        return {
            "kind": self.kind,
            "text": self.text,
            "repairable": self.repairable,
            "repaired": self.repaired,
            "fix": self.fix,
            "advice": self.advice,
        }


@dataclass
class ShardCheck:
    """What :func:`~zarrext.jobs.shards.check.check` found at one store key.

    A shard, or a chunk file.

    Attributes
    ----------
    key : str
        The store key, relative to the array (e.g. ``"c/0/1"``; ``"zarr.json"`` for
        a problem of the array's metadata).
    details : list of Problem
        Problems found, in the order they were found (empty: the key validates).
    """

    key: str
    details: list[Problem] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """The problems found, in words."""
        return [p.text for p in self.details]

    @property
    def repaired(self) -> list[str]:
        """What ``repair=True`` did about them."""
        return [p.fix for p in self.details if p.repaired and p.fix is not None]

    @property
    def remaining(self) -> list[str]:
        """Problems still there afterwards (every problem, without ``repair``)."""
        return [p.text for p in self.details if not p.repaired]

    @property
    def ok(self) -> bool:
        """Whether nothing is left to fix (after repair, if it ran)."""
        return not self.remaining

    def problem(
        self,
        kind: str,
        text: str,
        *,
        fix: str | None = None,
        advice: str | None = None,
        repaired: bool = False,
    ) -> None:
        """Record a problem: ``fix`` is what repair does (None: it cannot), ``repaired`` if done."""
        self.details.append(Problem(kind, text, fix, advice, repaired and fix is not None))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this finding."""
        return {
            "key": self.key,
            "ok": self.ok,
            "problems": [p.to_json() for p in self.details],
        }
