"""GroupCommitter: callers to one environment share write transactions."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from dedupstore.commit import GroupCommitter
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
