"""Words for messages: a count and its noun (singular or plural as the count asks), and
bytes as every report of zarrext counts them."""

from __future__ import annotations

__all__ = ["bytes_text", "counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``plural``, else ``noun + "s"``.

    >>> counted(1, "shard"), counted(3, "shard"), counted(0, "index", "indexes")
    ('1 shard', '3 shards', '0 indexes')
    >>> counted(2, "chunk", "chunks") == counted(2, "chunk")
    True
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def bytes_text(stored: int, objects: int, allocated: int | None = None) -> str:
    """Bytes as every report says them (:class:`zarrext.jobs.inspection.ArrayInventory`):
    the chunks' bytes stored; the objects' sizes where they differ (a shard's index
    and free space); what the file system allocates where holes (parts of fixed slots
    no chunk fills) make it less than the objects.

    >>> bytes_text(100, 100), bytes_text(99_462, 100_502)
    ('100 bytes stored', '99,462 bytes stored (100,502 in objects)')
    >>> bytes_text(99_462, 136_656, 110_592)
    '99,462 bytes stored (136,656 in objects, 110,592 on disk: compact reclaims the rest)'
    """
    notes = [f"{objects:,} in objects"] if objects != stored else []
    if allocated is not None and allocated < objects:
        notes.append(f"{allocated:,} on disk: compact reclaims the rest")
    return f"{stored:,} bytes stored" + (f" ({', '.join(notes)})" if notes else "")
