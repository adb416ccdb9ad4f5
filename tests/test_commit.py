"""GroupCommitter: callers to one environment share write transactions."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from dedupstore.commit import GroupCommitter, StoreCommitter
from dedupstore.errors import InvalidTokenError
from dedupstore.journal import Journal


@pytest.fixture
def env(tmp_path: Path) -> Any:
    e = lmdb.open(str(tmp_path / "env"), map_size=1 << 24, sync=True)
    yield e
    e.close()


def put(key: bytes) -> Any:
    def op(txn: Any) -> bytes:
        assert txn.put(key, b"v", overwrite=False)
        return key

    return op


def wait_for(cond: Any) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.001)


def test_a_lone_caller_gets_one_transaction_per_call(env: Any) -> None:
    gc = GroupCommitter(env, "test env")
    for i in range(5):
        assert gc.run(put(b"k%d" % i)) == b"k%d" % i
    assert (gc.commits, gc.ops) == (5, 5)


def test_callers_queued_behind_a_commit_share_the_next_one(env: Any) -> None:
    gc = GroupCommitter(env, "test env")
    release = threading.Event()

    def slow(txn: Any) -> str:
        release.wait()  # the leader's transaction stays open while the others queue
        txn.put(b"first", b"v")
        return "first"

    results: dict[int, Any] = {}
    leader = threading.Thread(target=lambda: results.setdefault(-1, gc.run(slow)))
    leader.start()
    wait_for(lambda: gc._busy)
    followers = [threading.Thread(target=lambda i=i: results.setdefault(i, gc.run(put(b"f%d" % i)))) for i in range(7)]
    for t in followers:
        t.start()
    wait_for(lambda: len(gc._queue) == 7)
    release.set()
    for t in [leader, *followers]:
        t.join()
    assert results == {-1: "first", **{i: b"f%d" % i for i in range(7)}}
    # One commit for the leader, one shared by the seven that queued behind it.
    assert (gc.commits, gc.ops) == (2, 8)
    with env.begin() as txn:
        assert all(txn.get(b"f%d" % i) == b"v" for i in range(7))
    # The last commit carried seven: a caller now alone must not wait for six
    # more that never come (the linger is bounded).
    assert gc.run(put(b"alone")) == b"alone"
    assert (gc.commits, gc.ops) == (3, 9)


def test_a_refused_operation_does_not_undo_the_others_in_its_batch(env: Any) -> None:
    gc = GroupCommitter(env, "test env")
    release = threading.Event()
    errors: list[BaseException] = []

    def refused(txn: Any) -> None:
        raise InvalidTokenError("token refused")

    def run(op: Any) -> None:
        try:
            gc.run(op)
        except InvalidTokenError as exc:
            errors.append(exc)

    leader = threading.Thread(target=run, args=(lambda txn: release.wait(),))
    leader.start()
    wait_for(lambda: gc._busy)
    threads = [threading.Thread(target=run, args=(op,)) for op in (put(b"a"), refused, put(b"b"))]
    for t in threads:
        t.start()
    wait_for(lambda: len(gc._queue) == 3)
    release.set()
    for t in [leader, *threads]:
        t.join()
    assert [str(e) for e in errors] == ["token refused"]
    with env.begin() as txn:
        assert (txn.get(b"a"), txn.get(b"b")) == (b"v", b"v")


def test_a_durable_batch_that_writes_nothing_waits_for_what_was_journaled_before(env: Any, tmp_path: Path) -> None:
    # Maintenance (durable=False) is journaled without an fdatasync; a later
    # durable call that writes nothing (a duplicate, say) may have read it, so
    # it returns only once it is on disk, by a journal fdatasync, not a checkpoint.
    journal = Journal(tmp_path, b"\0" * 16)
    checkpoints: list[int] = []
    gc = GroupCommitter(env, "test env", journal=journal, codes={id(None): 3},
                        checkpoint=lambda: checkpoints.append(1), others=lambda: False)
    try:
        gc.run(put(b"first"))  # the first commit is checkpointed (someone may have written before)
        assert checkpoints == [1]
        gc.run(put(b"evicted"), durable=False)
        assert (journal.appends, journal.syncs) == (1, 0)
        assert gc.run(lambda txn: txn.get(b"evicted")) == b"v"
        assert (journal.appends, journal.syncs, checkpoints) == (1, 1, [1])
        gc.run(lambda txn: None)  # nothing new to wait for: no fdatasync
        assert journal.syncs == 1
    finally:
        journal.close()


def test_writeback_starts_after_a_journal_fdatasync_not_before_the_next(env: Any, tmp_path: Path) -> None:
    # The data file's writeback is started right after each journal
    # fdatasync, so it overlaps the next batch's work instead of the next
    # fdatasync (docs/benchmarks.md); maintenance, not synced, starts none.
    journal = Journal(tmp_path, b"\0" * 16)
    events: list[str] = []
    real_sync = journal.sync

    def sync(mark: tuple[int, int]) -> bool:
        events.append("sync")
        return real_sync(mark)

    journal.sync = sync  # type: ignore[method-assign]
    gc = GroupCommitter(env, "test env", journal=journal, codes={id(None): 3}, checkpoint=lambda: None,
                        others=lambda: False, trickle=lambda: events.append("trickle"))
    try:
        gc.run(put(b"first"))  # checkpointed: no journal, no fdatasync
        assert events == []
        gc.run(put(b"second"))
        assert events == ["sync", "trickle"]
        gc.run(put(b"evicted"), durable=False)
        assert events == ["sync", "trickle"]
    finally:
        journal.close()


def test_writes_to_several_partitions_queued_together_share_one_fdatasync(tmp_path: Path) -> None:
    # sync mode: the store-wide committer takes what is queued for every
    # partition, commits each partition's share once, and fdatasyncs the one
    # journal once for all of them before any caller returns.
    journal = Journal(tmp_path, b"\0" * 16)
    envs = [lmdb.open(str(tmp_path / f"p{i}"), map_size=1 << 24, sync=False) for i in range(2)]
    parts = [
        GroupCommitter(e, f"partition {i}", journal=journal, part=i, codes={id(None): 3},
                       checkpoint=lambda: None, others=lambda: False)
        for i, e in enumerate(envs)
    ]
    store = StoreCommitter(journal)
    release = threading.Event()
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def refused(txn: Any) -> None:
        raise InvalidTokenError("token refused")

    def slow(txn: Any) -> str:
        release.wait()  # the leader's transaction stays open while the others queue
        txn.put(b"lead", b"v")
        return "leader"

    def run(name: str, where: GroupCommitter, op: Any) -> None:
        try:
            results[name] = store.run_in(where, op)
        except InvalidTokenError as exc:
            errors.append(exc)

    try:
        for p in parts:
            store.run_in(p, put(b"warm"))  # each partition's first commit is checkpointed, not journaled
        syncs = journal.syncs
        leader = threading.Thread(target=run, args=("leader", parts[0], slow))
        leader.start()
        wait_for(lambda: store._busy)
        queued = [("a0", parts[0], put(b"a0")), ("b0", parts[1], put(b"b0")), ("x", parts[1], refused),
                  ("b1", parts[1], put(b"b1")), ("a1", parts[0], put(b"a1"))]
        threads = [threading.Thread(target=run, args=q) for q in queued]
        for t in threads:
            t.start()
        wait_for(lambda: len(store._queue) == len(queued))
        release.set()
        for t in [leader, *threads]:
            t.join()
        assert results == {"leader": "leader", "a0": b"a0", "b0": b"b0", "b1": b"b1", "a1": b"a1"}
        assert [str(e) for e in errors] == ["token refused"]
        # The leader's lone write, then one fdatasync for the five queued over both partitions.
        assert journal.syncs - syncs == 2
        # Each partition: its warm-up, the queued share as one transaction (and partition 0 the leader's).
        assert [(p.commits, p.ops) for p in parts] == [(3, 4), (2, 4)]
        for key, env in [(b"a0", envs[0]), (b"a1", envs[0]), (b"b0", envs[1]), (b"b1", envs[1])]:
            with env.begin() as txn:
                assert txn.get(key) == b"v"
    finally:
        journal.close()
        for e in envs:
            e.close()
