"""The sync-mode journal (dedupstore/journal.py): records, torn tails, segments."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from dedupstore import DedupStore, DurabilityError
from dedupstore import journal as journal_mod
from dedupstore.journal import DELETE, JOURNAL_DIR, PUT, Journal, decode, encode


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


def test_a_sync_covers_earlier_segments_a_checkpoint_has_not_dropped(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    try:
        with j.lock:
            j.append(1, [(PUT, 1, b"k", b"v")])  # maintenance: appended, not synced
            j.rotate()  # a checkpoint pinned after it, and has not recorded yet
            mark = j.append(2, [(PUT, 1, b"m", b"v")])
        j.sync(mark)
        assert j.syncs == 2  # both segments, not only the mark's
        j.sync(mark)
        with j.lock:
            j.sync(j.mark())
        assert j.syncs == 2  # nothing new since: no fdatasync
    finally:
        j.close()


def test_a_failed_fdatasync_fails_every_later_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with DedupStore.open(tmp_path, durability="sync", partitions=1, eviction_rate=0, flush_interval=3600) as s:
        s.ensure_namespace("n")
        s.claim("n", "a")  # checkpointed (a process's first commit); the next ones are journaled
        real = os.fdatasync
        failing = [True]

        def fdatasync(fd: int) -> None:
            if failing[0]:
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        monkeypatch.setattr(journal_mod.os, "fdatasync", fdatasync)
        with pytest.raises(DurabilityError, match="journal fdatasync failed"):
            s.claim("n", "b")
        failing[0] = False  # the disk "recovers": the pages it dropped stay lost
        with pytest.raises(DurabilityError, match="earlier journal fdatasync failed"):
            s.claim("n", "c")
        monkeypatch.setattr(journal_mod.os, "fdatasync", real)
    with DedupStore.open(tmp_path, durability="sync", partitions=1, eviction_rate=0) as s:
        assert s.lookup("n", "a") is not None  # the acknowledged claim
