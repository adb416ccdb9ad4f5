"""The sync-mode journal (dedupstore/journal.py): records, torn tails, segments."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import lmdb
import pytest

from dedupstore import DedupStore, DurabilityError, checkpoint
from dedupstore import journal as journal_mod
from dedupstore.journal import DELETE, DELETE_RANGE, JOURNAL_DIR, PUT, Journal, JournalTxn, decode, encode, replay


def test_records_round_trip_and_a_torn_tail_ends_the_segment() -> None:
    ops7 = [(PUT, 1, b"k", b"v" * 300), (DELETE, 2, b"p", b"")]
    ops8 = [(PUT, 3, b"m", b"")]
    a, b = encode(2, 7, ops7), encode(0, 8, ops8)
    assert list(decode(a + b)) == [(2, 7, ops7), (0, 8, ops8)]
    for cut in range(1, len(b)):
        assert [t for _, t, _ in decode(a + b[:cut])] == [7]  # a record cut anywhere is not replayed
    flipped = bytearray(a + b)
    flipped[len(a) + 20] ^= 1
    assert [t for _, t, _ in decode(bytes(flipped))] == [7]


def test_consecutive_cursor_deletes_journal_one_range_that_replays_the_same(tmp_path: Path) -> None:
    keys = [b"k%02d" % i for i in range(20)]
    envs = []
    for name in ("live", "replica"):
        env = lmdb.open(str(tmp_path / name), max_dbs=2)
        db = env.open_db(b"records")
        with env.begin(write=True) as txn:
            for k in keys:
                txn.put(k, b"v", db=db)
        envs.append((env, db))
    (live, live_db), (replica, replica_db) = envs
    with live.begin(write=True) as txn:
        jt = JournalTxn(txn, {id(live_db): 1})
        cur = jt.cursor(db=live_db)
        assert cur.set_range(b"k03")
        for _ in range(4):
            assert cur.delete()  # k03..k06, each where the last one left the cursor
        assert cur.set_range(b"k10")  # a jump ends the run
        assert cur.delete()
        assert cur.next()  # k11 stays: a skip ends the run
        assert cur.delete()  # k12
        jt.put(b"k99", b"w", db=live_db)  # an op in between ends the run
        assert cur.delete()  # k13
        assert cur.delete()  # k14
        txnid = txn.id()
        ops = list(jt.ops)
    assert ops == [
        (DELETE_RANGE, 1, b"k03", b"k06"),
        (DELETE, 1, b"k10", b""),
        (DELETE, 1, b"k12", b""),
        (PUT, 1, b"k99", b"w"),
        (DELETE_RANGE, 1, b"k13", b"k14"),
    ]
    (tmp_path / JOURNAL_DIR).mkdir()
    (tmp_path / JOURNAL_DIR / "segment.0").write_bytes(encode(0, txnid, ops))
    assert replay(replica, {1: replica_db}, tmp_path, 0, 0) == 1
    contents = []
    for env, db in envs:
        with env.begin() as txn:
            contents.append(list(txn.cursor(db=db)))
        env.close()
    assert contents[0] == contents[1]
    gone = {b"k03", b"k04", b"k05", b"k06", b"k10", b"k12", b"k13", b"k14"}
    assert [k for k, _ in contents[0]] == [k for k in keys if k not in gone] + [b"k99"]


def test_one_journal_and_one_fdatasync_for_a_batch_over_every_partition(tmp_path: Path) -> None:
    # The group-commit path (apply_interval=0: no write-behind window).
    with DedupStore.open(
        tmp_path, durability="sync", partitions=4, eviction_rate=0, flush_interval=3600, apply_interval=0
    ) as s:
        s.ensure_namespace("n")
        s.claim_many("n", [f"warm{i}" for i in range(100)])  # each partition's first commit is checkpointed
        before = s.stats()
        s.claim_many("n", [f"k{i}" for i in range(100)])
        after = s.stats()
        assert [p["commits"] for p in after["partition_stats"]] == [p["commits"] + 1 for p in before["partition_stats"]]
        assert after["journal_appends"] - before["journal_appends"] == 4
        assert after["journal_syncs"] - before["journal_syncs"] == 1  # not one per partition
        assert [p.name for p in (tmp_path / JOURNAL_DIR).iterdir() if not p.name.startswith(".")] != []
        assert not (tmp_path / "p000" / JOURNAL_DIR).exists()


def test_a_checkpoint_retires_covered_segments_and_dead_writers_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "READER_CHECK_S", 0.0)  # collect dead writers' segments at every checkpoint
    boot = checkpoint.boot_id().hex()
    jdir = tmp_path / JOURNAL_DIR
    with DedupStore.open(
        tmp_path, durability="sync", partitions=1, eviction_rate=0, flush_interval=3600, apply_interval=0
    ) as s:
        s.ensure_namespace("n")
        s.claim("n", "a")  # a process's first commit is checkpointed (it cannot know who wrote before)
        s.claim("n", "b")
        (first,) = [p.name for p in jdir.iterdir() if not p.name.startswith(".")]
        # b's record, journaled:
        assert [(part, len(ops)) for part, _, ops in decode((jdir / first).read_bytes())] == [(0, 1)]
        txnid = s.stats()["partition_stats"][0]["durable_txnid"]
        # Dead writers' segments (no process holds their lock) of this boot:
        # one a checkpoint covers, one with a txn beyond it.
        (jdir / f"{boot}-999999-deadbeef.0").write_bytes(encode(0, txnid, [(PUT, 3, b"x", b"y")]))
        (jdir / f"{boot}-999998-deadbeef.0").write_bytes(encode(0, txnid + 10**6, [(PUT, 3, b"x", b"y")]))
        # A live one (this test holds its lock) is left alone.
        live = jdir / f"{boot}-888888-cafef00d.0"
        fd = os.open(live, os.O_WRONLY | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            s.flush()
            names = {p.name for p in jdir.iterdir() if not p.name.startswith(".")}
            assert first not in names and f"{boot}-999999-deadbeef.0" not in names and live.name in names
            assert f"{boot}-999998-deadbeef.0" in names  # not covered yet
            assert len(names) == 3  # those two, and this process's new segment
        finally:
            os.close(fd)
    # close deletes this process's segments and the other writer's (dead by
    # then, and empty: covered); the uncovered dead one stays
    assert {p.name for p in jdir.iterdir() if not p.name.startswith(".")} == {f"{boot}-999998-deadbeef.0"}


def test_a_dead_segment_deleted_by_another_collector_meanwhile_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Partitions checkpoint in parallel (flush), and each collects dead
    # writers' segments: one may open a segment, then get its lock only once
    # the other has deleted it and let go. That used to raise
    # FileNotFoundError out of flush().
    boot = "ab" * 16
    jdir = tmp_path / JOURNAL_DIR
    jdir.mkdir()
    seg = jdir / f"{boot}-999999-deadbeef.0"
    seg.write_bytes(encode(0, 5, [(PUT, 1, b"k", b"v")]))
    real_flock = fcntl.flock

    def flock_after_the_other_collector(fd: int, op: int) -> None:
        seg.unlink(missing_ok=True)  # the other thread deleted it, then released its lock
        real_flock(fd, op)

    monkeypatch.setattr(journal_mod.fcntl, "flock", flock_after_the_other_collector)
    assert journal_mod.collect_dead(jdir, boot, {0: 10}) == 0
    seg.write_bytes(encode(0, 5, [(PUT, 1, b"k", b"v")]))
    assert journal_mod.clear_other_boots(tmp_path, bytes(16)) == 0


def test_a_sync_covers_earlier_segments_a_checkpoint_has_not_dropped(tmp_path: Path) -> None:
    j = Journal(tmp_path, b"\0" * 16)
    try:
        with j.lock:
            j.append(0, 1, [(PUT, 1, b"k", b"v")])  # maintenance: appended, not synced
            j.rotate()  # a checkpoint pinned after it, and has not recorded yet
            mark = j.append(1, 2, [(PUT, 1, b"m", b"v")])
        j.sync(mark)
        assert j.syncs == 2  # both segments, not only the mark's
        j.sync(mark)
        with j.lock:
            j.sync(j.mark())
        assert j.syncs == 2  # nothing new since: no fdatasync
    finally:
        j.close()


def test_a_failed_fdatasync_fails_every_later_sync(tmp_path: Path) -> None:
    with DedupStore.open(
        tmp_path, durability="sync", partitions=1, eviction_rate=0, flush_interval=3600, apply_interval=0
    ) as s:
        s.ensure_namespace("n")
        s.claim("n", "a")  # checkpointed (a process's first commit); the next ones are journaled
        journal = s._journal  # noqa: SLF001
        assert journal is not None
        seg_fd = journal._current.fd  # noqa: SLF001
        # The fdatasyncs run in C (csrc/ds_gsync.c), so the failure is a real
        # one: the segment's descriptor made /dev/null's for a while, where
        # writes go through and fdatasync fails (EINVAL).
        saved = os.dup(seg_fd)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, seg_fd)
            with pytest.raises(DurabilityError, match="journal fdatasync failed"):
                s.claim("n", "b")
            os.dup2(saved, seg_fd)  # the disk "recovers": the pages it dropped stay lost
            with pytest.raises(DurabilityError, match="earlier journal fdatasync failed"):
                s.claim("n", "c")
        finally:
            for fd in (saved, null):
                os.close(fd)
    with DedupStore.open(tmp_path, durability="sync", partitions=1, eviction_rate=0) as s:
        assert s.lookup("n", "a") is not None  # the acknowledged claim
