"""The sync-mode journal (dedupstore/journal.py): records, torn tails, segments."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from dedupstore import DedupStore
from dedupstore.journal import DELETE, JOURNAL_DIR, PUT, decode, encode


def test_records_round_trip_and_a_torn_tail_ends_the_segment() -> None:
    ops7 = [(PUT, 1, b"k", b"v" * 300), (DELETE, 2, b"p", b"")]
    ops8 = [(PUT, 3, b"m", b"")]
    a, b = encode(7, ops7), encode(8, ops8)
    assert list(decode(a + b)) == [(7, ops7), (8, ops8)]
    for cut in range(1, len(b)):
        assert [t for t, _ in decode(a + b[:cut])] == [7]  # a record cut anywhere is not replayed
    flipped = bytearray(a + b)
    flipped[len(a) + 20] ^= 1
    assert [t for t, _ in decode(bytes(flipped))] == [7]


def test_a_checkpoint_retires_covered_segments_and_dead_writers_ones(tmp_path: Path) -> None:
    with DedupStore.open(tmp_path, durability="sync", partitions=1, eviction_rate=0, flush_interval=3600) as s:
        s.ensure_namespace("n")
        jdir = tmp_path / "p000" / JOURNAL_DIR
        s.claim("n", "a")  # a process's first commit is checkpointed (it cannot know who wrote before)
        s.claim("n", "b")
        (first,) = [p.name for p in jdir.iterdir()]
        assert len(list(decode((jdir / first).read_bytes()))) == 1  # the second claim is journaled
        # A dead writer's segment: no process holds its lock.
        (jdir / "999999-deadbeef.0").write_bytes(encode(1, [(PUT, 3, b"x", b"y")]))
        # A live one (this test holds its lock) is left alone.
        live = jdir / "888888-cafef00d.0"
        fd = os.open(live, os.O_WRONLY | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            s.flush()
            names = {p.name for p in jdir.iterdir()}
            assert first not in names and "999999-deadbeef.0" not in names and live.name in names
            assert len(names) == 2  # the live one, and this process's new segment
        finally:
            os.close(fd)
    # close retires this process's segments, and the other writer's, dead by then
    assert list(jdir.iterdir()) == []
