"""The pure slot allocator: own places, quarantine, appends (no files)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from zarrext.sharding.allocator import WHOLE_FILE, Busy, allocate, freed_ranges
from zarrext.sharding.geometry import EMPTY, ShardGeometry

S = 100
START = ShardGeometry((4,), index_size=68, index_location="start", slot_size=S)
END = ShardGeometry((4,), index_size=68, index_location="end", slot_size=S)


def table(*entries: tuple[int, int] | None) -> np.ndarray:
    out = np.full((4, 2), EMPTY, dtype=np.uint64)
    for flat, entry in enumerate(entries):
        if entry is not None:
            out[flat] = entry
    return out


def test_chunks_alternate_between_their_two_places() -> None:
    g = START
    home1, spare1 = g.data_start + S, g.spare_start + S
    t = table(None, (home1, 80), None, None)
    size = g.slots_end
    got = allocate(t, size, 0, g, {1: 90}, "fixed-slot")
    assert got.offsets == {1: spare1}  # home is live: the spare slot
    t2 = table(None, (spare1, 90), None, None)
    got = allocate(t2, spare1 + 90, 0, g, {1: 50, 2: 100}, "fixed-slot")
    assert got.offsets == {1: home1, 2: g.data_start + 2 * S}  # back home; 2 to its home
    # own places need no quarantine when freed
    assert freed_ranges(t, [1], g) == []
    assert freed_ranges(t2, [1], g) == []


def test_foreign_bytes_are_quarantined_and_not_reused() -> None:
    g = START
    # a compacted shard: chunk 0 dense at the start of home 0, chunk 1 right after
    t = table((g.data_start, 60), (g.data_start + 60, 60), None, None)
    assert freed_ranges(t, [0], g) == []  # inside its own home
    assert freed_ranges(t, [1], g) == [(g.data_start + 60, g.data_start + 120)]
    # chunk 1 moved away; its old bytes overlap home 0 and home 1: held for a while
    t2 = table((g.data_start, 60), (g.spare_start + S, 60), None, None)
    held = [(g.data_start + 60, g.data_start + 120, 10.0)]
    got = allocate(t2, g.spare_end, 0, g, {1: 60}, "fixed-slot", held, now=5.0)
    assert got.offsets == {1: g.spare_end}  # home held, spare slot live: appended
    got = allocate(t2, g.spare_end, 0, g, {1: 60}, "fixed-slot", held, now=11.0)
    assert got.offsets == {1: g.data_start + S}  # grace over: home
    # a rolled-back transaction's tail past the end is not appended over
    got = allocate(t2, 1000, 0, g, {3: 150}, "fixed-slot", [(1000, 1500, 10.0)], now=5.0)
    assert got.offsets == {3: 1500}


def test_unreadable_quarantine_holds_the_file_and_appends_at_its_end() -> None:
    # CI once saw EFBIG: a torn quarantine held [0, 2**62) and appends went past it.
    g = START
    t = table((g.data_start, 60), None, None, None)
    everything = [(0, WHOLE_FILE, 10.0)]
    got = allocate(t, g.spare_end, 0, g, {0: 60, 1: 60}, "fixed-slot", everything, now=5.0)
    assert got.offsets == {0: g.spare_end, 1: g.spare_end + 60}
    assert got.eof == g.spare_end + 120


def test_index_at_end_moves_past_the_spare_area() -> None:
    g = END
    t = table((0, 100), None, None, None)
    size = g.slots_end + g.index_size  # a fresh fixed-slot shard: index right after slots
    got = allocate(t, size, g.slots_end, g, {0: 100}, "fixed-slot")
    assert got.offsets == {0: g.spare_start}
    assert g.spare_start == g.slots_end + g.index_size  # never over the index
    assert got.eof == g.spare_end  # the new index goes after every spare slot
    # append layout: always the end of the file
    got = allocate(t, size, g.slots_end, g, {1: 10}, "append")
    assert got.offsets == {1: size}


@given(
    occupied=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=8),
    start=st.integers(0, 60),
    length=st.integers(1, 20),
)
def test_busy_overlaps(occupied: list[tuple[int, int]], start: int, length: int) -> None:
    """Busy.overlaps is the half-open overlap test against every occupied range
    (in-place compaction and the allocator both rely on it)."""
    ranges = [(s, s + n) for s, n in occupied]
    busy = Busy([a for a, _ in ranges], [b for _, b in ranges])
    lo, hi = start, start + length
    assert busy.overlaps(lo, hi) == any(a < hi and b > lo for a, b in ranges)


def _spare_versions_every_chunk(table, size, eof, geometry, offsets, busy):
    """The spare slots to fill, by asking every chunk of the shard (the rule as it
    reads; :func:`zarrext.sharding.allocator._spare_versions` asks only the chunks
    written and the spare slots entering the file)."""
    slot = geometry.slot_size
    prefill, mirror = {}, {}
    for flat in range(geometry.n_chunks):
        spare = geometry.spare_start + flat * slot
        old, length = (int(v) for v in table[flat])
        if flat in offsets:
            if (offsets[flat] == geometry.home(flat) and old != spare and spare < size
                    and not busy.overlaps(spare, spare + slot)):
                mirror[flat] = spare
        elif (size <= spare and spare + slot <= eof and old != int(EMPTY) and length <= slot
              and not busy.overlaps(spare, spare + slot)):
            prefill[flat] = spare
    return prefill, mirror


@given(
    n=st.integers(1, 12),
    slot=st.integers(1, 64),
    data=st.data(),
)
def test_spare_versions_ask_only_the_chunks_that_can_need_one(n, slot, data) -> None:
    from zarrext.sharding.allocator import _spare_versions

    geometry = ShardGeometry((n,), 16 * n + 4, "end", slot)
    places = [geometry.home(f) for f in range(n)] + [
        geometry.spare_start + f * slot for f in range(n)]
    rows = data.draw(st.lists(
        st.one_of(st.none(), st.tuples(st.sampled_from(places), st.integers(0, slot))),
        min_size=n, max_size=n))
    table_ = np.array([(EMPTY, EMPTY) if r is None else r for r in rows], dtype="<u8")
    # slot boundaries, where the old and new ends of the file usually lie
    edges = [geometry.spare_start + k * slot for k in range(n + 2)]
    size = data.draw(st.one_of(st.sampled_from(edges), st.integers(0, geometry.spare_end + slot)))
    eof = data.draw(st.one_of(st.sampled_from([e for e in edges if e >= size] or [size]),
                              st.integers(size, geometry.spare_end + 2 * slot)))
    written = data.draw(st.sets(st.integers(0, n - 1)))
    offsets = {f: data.draw(st.sampled_from([geometry.home(f), geometry.spare_start + f * slot]))
               for f in written}
    held = data.draw(st.lists(st.tuples(st.integers(0, eof), st.integers(1, 3 * slot)),
                              max_size=3))
    busy = Busy([a for a, _ in held], [a + b for a, b in held])
    assert _spare_versions(table_, size, eof, geometry, offsets, busy) == (
        _spare_versions_every_chunk(table_, size, eof, geometry, offsets, busy))
