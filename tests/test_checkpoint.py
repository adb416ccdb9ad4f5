"""Checkpoints (dedupstore/checkpoint.py): what survives an operating-system crash.

A killed process loses nothing the kernel has (test_crash.py). An OS crash
loses the page cache: the disk then holds everything up to the last fsync plus
any subset of the pages written since, in any order. These tests build such
disk images page by page from a live store (the file as it was at the last
checkpoint, each later-written page taken or not at random), "restart the
machine" (a different boot id) and open them: the store must come back as
exactly the recorded checkpoint, which in sync mode holds every acknowledged
write, and verify clean.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dedupstore import DedupStore, RecordState, Status, checkpoint
from dedupstore.checkpoint import SLOT_SIZE, CheckpointFile, Record
from dedupstore.journal import DELETE_RANGE, WINDOW_RECORD, decode
from dedupstore.verify import verify_store

NS = "orders"
FLUSH_WRITER = Path(__file__).with_name("_flush_writer.py")


def _reboot(monkeypatch: pytest.MonkeyPatch) -> None:
    other = uuid.uuid4().bytes
    monkeypatch.setattr(checkpoint, "boot_id", lambda: other)


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every partition's data file as the page cache holds it now."""
    return {p.name: (p / "data.mdb").read_bytes() for p in sorted(root.glob("p[0-9][0-9][0-9]"))}


def _journal_synced(store: DedupStore) -> dict[str, int]:
    """How much of each of the store's journal segments an fdatasync covered."""
    journal = store._journal  # noqa: SLF001
    return {} if journal is None else journal.synced()


def _crash_image(
    root: Path, durable: dict[str, bytes], dest: Path, rng: random.Random, psize: int = 4096,
    journal_synced: dict[str, int] | None = None,
) -> None:
    """A disk after an OS crash: ``durable`` (what the last fsync left) with
    each page written since replaced, or not, at random (``rng``); each
    journal segment cut to what its last fdatasync covered (``journal_synced``)."""
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns("lock.mdb"))
    for name, synced in (journal_synced or {}).items():
        seg = dest / "journal" / name
        if seg.exists():
            os.truncate(seg, synced)
    for name, old in durable.items():
        new = (root / name / "data.mdb").read_bytes()
        out = bytearray()
        for at in range(0, max(len(old), len(new)), psize):
            o, n = old[at : at + psize], new[at : at + psize]
            if o == n:
                out += n
            elif rng.random() < 0.5:
                out += n if n else o
            else:
                out += o if o else bytes(len(n))  # a page never written back reads as zeros
        (dest / name / "data.mdb").write_bytes(bytes(out))


def _churn(store: DedupStore, keys: list[str], rng: random.Random, pending: dict[str, int]) -> None:
    """Many small transactions, so that LMDB frees and would reuse pages:
    claims of ``keys`` (most completed, the rest left in ``pending``), and
    completion of what ``pending`` held before."""
    old = dict(pending)
    pending.clear()
    for k in keys:
        r = store.claim(NS, k, {"v": 1})
        if r.status is Status.NEW:
            if rng.random() < 0.8:
                store.complete(NS, k, r.token, f"out-{k}".encode())
            else:
                pending[k] = r.token
    for k, token in old.items():
        store.complete(NS, k, token, b"late")


def _state(store: DedupStore, keys: list[str]) -> dict[str, tuple[RecordState, bytes] | None]:
    out: dict[str, tuple[RecordState, bytes] | None] = {}
    for k in keys:
        rec = store.lookup(NS, k)
        out[k] = None if rec is None else (rec.state, rec.outcome)
    return out


def test_an_os_crash_image_comes_back_as_the_last_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    root = tmp_path / "live"
    acked = [f"a{i}" for i in range(600)]
    # New keys, and completions of old records, written after the last flush().
    unsynced = [f"b{i}" for i in range(600)] + acked[:300]
    store = DedupStore.open(root, durability="flush", partitions=2, eviction_rate=0, flush_interval=3600)
    try:
        store.ensure_namespace(NS, horizon="1h", lease="1h")
        pending: dict[str, int] = {}
        _churn(store, acked, rng, pending)
        assert pending
        store.flush()
        expect = _state(store, acked)
        durable = _snapshot(root)
        _churn(store, unsynced, rng, pending)
        assert _state(store, acked) != expect  # the unsynced calls did change old records
        images = _images(root, durable, tmp_path)
    finally:
        _crash(store)

    _reboot(monkeypatch)
    for dest in images:
        got = _open_after_crash(dest, "flush", acked + unsynced)
        # Rolled back to exactly the last flush(): nothing later, nothing torn.
        assert {k: got[k] for k in acked} == expect
        assert all(got[k] is None for k in unsynced if k not in acked)


def test_acknowledged_sync_writes_survive_an_os_crash_through_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sync commits reach the data file without an fsync; the journal is what
    # was synced. The images lose or keep each data page written since the
    # last checkpoint at random; every acknowledged write must come back.
    rng = random.Random(5)
    root = tmp_path / "live"
    before = [f"a{i}" for i in range(400)]
    after = [f"b{i}" for i in range(400)] + before[:200]
    batched = [f"c{i}" for i in range(300)]
    store = DedupStore.open(root, durability="sync", partitions=2, eviction_rate=0, flush_interval=3600)
    try:
        store.ensure_namespace(NS, horizon="1h", lease="1h")
        pending: dict[str, int] = {}
        _churn(store, before, rng, pending)
        store.flush()  # a checkpoint: the data file as the disk holds it from now on
        durable = _snapshot(root)
        # Batches over both partitions: one fdatasync after both commits.
        for i in range(0, len(batched), 50):
            res = store.claim_many(NS, batched[i : i + 50], [{"v": 1}] * 50)
            store.complete_many(NS, [(r.key, r.token, b"batch") for r in res if i % 100 == 0])
        # The journal as its fdatasyncs left it: a record appended but not
        # synced is not on the disk after a crash. Images after the batches,
        # and after single calls (each would sync what the other left).
        expect_batched = _state(store, before + batched)
        images_batched = _images(root, durable, tmp_path / "batched", _journal_synced(store))
        _churn(store, after, rng, pending)  # each call returned: journaled and synced
        expect = _state(store, before + after + batched)
        assert store.stats()["journal_appends"] > 0
        images = _images(root, durable, tmp_path, _journal_synced(store))
    finally:
        _crash(store)

    _reboot(monkeypatch)
    for dest in images_batched:
        assert _open_after_crash(dest, "sync", before + batched) == expect_batched
    for dest in images:
        assert _open_after_crash(dest, "sync", before + after + batched) == expect
        # replayed, then the previous boot's segments deleted (and this open's at its close)
        assert not [p for p in (dest / "journal").iterdir() if not p.name.startswith(".")]


def test_journaled_eviction_replays_after_an_os_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Eviction journals each run of consecutive deletes as one range. After a
    # crash, replay must delete exactly what it deleted, so that the claims
    # journaled after it (keys claimed anew once evicted) land as they did.
    now = [1_700_000_000.0]
    root = tmp_path / "live"
    old = [f"old{i}" for i in range(300)]
    store = DedupStore.open(
        root, durability="sync", partitions=2, eviction_rate=0, flush_interval=3600, clock=lambda: now[0]
    )
    try:
        store.ensure_namespace(NS, horizon="1h", lease="1h")
        for key, res in zip(old, store.claim_many(NS, old), strict=True):
            store.complete(NS, key, res.token, b"first")
        now[0] += 3600 + 2 * 450  # the horizon and two generations later
        store.claim(NS, "kept")  # unresolved: never evicted
        store.flush()  # the checkpoint the crash rolls back to
        durable = _snapshot(root)
        assert store.evict(budget=250)["deleted"] == 250  # a few transactions of ranges, in both partitions
        again = store.claim_many(NS, old[::10])  # evicted keys are new again; the rest are still there
        expect = _state(store, old + ["kept"])
        frontier = store.stats()["namespaces"][NS]["frontier"]
        assert sum(r.status is Status.NEW for r in again) > 0
        images = _images(root, durable, tmp_path, _journal_synced(store))
    finally:
        _crash(store)
    _reboot(monkeypatch)
    for dest in images:
        assert set(verify_store(dest).problem_kinds) <= {"recovery-pending"}
        with DedupStore.open(dest, durability="sync", eviction_rate=0, clock=lambda: now[0]) as back:
            assert _state(back, old + ["kept"]) == expect
            assert back.stats()["namespaces"][NS]["frontier"] == frontier
        report = verify_store(dest)
        assert report.ok, report.problems


def test_calls_taken_during_a_failed_apply_replay_in_order_after_an_os_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sync window's calls are journaled for the LMDB transaction that will
    # apply them; those taken while an apply commits are labelled for the one
    # after it. If that apply fails, the overlay holds both, and the next
    # transaction of the committer (eviction here) must apply them on its own
    # first, so that the labels still say where a replay puts each call.
    now = [1_700_000_000.0]
    root = tmp_path / "live"
    old = [f"old{i}" for i in range(200)]
    store = DedupStore.open(
        root, durability="sync", partitions=1, eviction_rate=0, flush_interval=3600, apply_interval=1,
        clock=lambda: now[0],
    )
    try:
        store.ensure_namespace(NS, horizon="1h", lease="1h")
        for key, res in zip(old, store.claim_many(NS, old), strict=True):
            store.complete(NS, key, res.token, b"first")
        now[0] += 3600 + 2 * 450  # the horizon and two generations later: old is evictable
        store.flush()  # the checkpoint the crash rolls back to
        durable = _snapshot(root)
        window = store._parts[0].window  # noqa: SLF001
        assert window is not None and window.active
        monkeypatch.setattr(window, "tick", lambda: None)  # the flusher's applies would come between
        before = [f"before{i}" for i in range(20)]
        during = [f"during{i}" for i in range(20)]
        for key in before:
            store.claim(NS, key)
        real_commit = window._commit  # noqa: SLF001

        def failing_commit(*args: object) -> None:
            for key in during:  # taken while the apply commits (its lock is not held)
                store.claim(NS, key)
            raise OSError(5, "injected: the apply's commit failed")

        monkeypatch.setattr(window, "_commit", failing_commit)
        with pytest.raises(OSError, match="injected"):
            window.apply()
        monkeypatch.setattr(window, "_commit", real_commit)
        assert window._ahead  # noqa: SLF001
        assert store.evict(budget=100)["deleted"] == 100  # a committer transaction, after the window's own
        # The journal says so: the calls taken during the failed apply are
        # labelled for a transaction no later than the eviction's, so a
        # replay runs them before it, as they were applied.
        labels, evictions = [], []
        for seg in sorted((root / "journal").glob("*-*.*")):
            for part, txnid, ops in decode(seg.read_bytes()):
                if part & WINDOW_RECORD and any(b"during" in op[2] for op in ops):
                    labels.append(txnid)
                elif not part & WINDOW_RECORD and any(op[0] == DELETE_RANGE for op in ops):
                    evictions.append(txnid)
        assert labels and evictions and max(labels) <= min(evictions)
        after = [f"after{i}" for i in range(20)]
        for key in after:
            store.claim(NS, key)
        keys = old + before + during + after
        expect = _state(store, keys)
        assert sum(v is None for v in expect.values()) == 100
        images = _images(root, durable, tmp_path, _journal_synced(store))
    finally:
        _crash(store)
    _reboot(monkeypatch)
    for dest in images:
        with DedupStore.open(dest, durability="sync", eviction_rate=0, clock=lambda: now[0]) as back:
            assert _state(back, keys) == expect
        report = verify_store(dest)
        assert report.ok, report.problems


def test_sync_writes_beside_a_flush_writer_survive_an_os_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A flush-mode process in the same store: its writes after the last
    # checkpoint may go, the sync process's acknowledged writes may not, nor
    # the flush writer's writes that a sync write was built on.
    rng = random.Random(11)
    root = tmp_path / "live"
    store = DedupStore.open(root, durability="sync", partitions=2, eviction_rate=0, flush_interval=3600)
    writer = None
    try:
        store.ensure_namespace(NS, horizon="1h", lease="1h")
        writer = subprocess.Popen(
            [sys.executable, str(FLUSH_WRITER), str(root), NS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert writer.stdin is not None and writer.stdout is not None
        assert writer.stdout.readline().strip() == "open"

        def flush_writer(prefix: str, n: int) -> None:
            assert writer is not None and writer.stdin is not None and writer.stdout is not None
            writer.stdin.write(f"claim {prefix} {n}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "ok"

        flush_writer("f-early-", 300)
        acked = [f"s{i}" for i in range(400)]
        _churn(store, acked, rng, {})
        # Beside another writer process, each sync commit is checkpointed (a
        # journal record could otherwise be replayed without a commit of the
        # other process it was built on), so the disk holds everything so far.
        assert store.stats()["journal_appends"] == 0
        durable = _snapshot(root)
        flush_writer("f-late-", 300)
        early = [f"f-early-{i}" for i in range(300)]
        expect = _state(store, acked + early)
        images = _images(root, durable, tmp_path)
    finally:
        if writer is not None:
            writer.kill()  # a crash: no last checkpoint
            writer.communicate()
        _crash(store)

    late = [f"f-late-{i}" for i in range(300)]
    _reboot(monkeypatch)
    for dest in images:
        got = _open_after_crash(dest, "sync", acked + early + late)
        assert {k: got[k] for k in acked + early} == expect
        assert all(got[k] is None for k in late)


def _images(
    root: Path, durable: dict[str, bytes], tmp_path: Path, journal_synced: dict[str, int] | None = None
) -> list[Path]:
    images = []
    for i in range(4):
        dest = tmp_path / f"crash{i}"
        _crash_image(root, durable, dest, random.Random(i), journal_synced=journal_synced)
        images.append(dest)
    return images


def _crash(store: DedupStore) -> None:
    """Close without the last checkpoint a clean close makes (and keep the journal)."""
    for p in store._parts:  # noqa: SLF001
        p.checkpointer.release()
        p.checkpointer.checkpoint = lambda **_: 0  # type: ignore[method-assign]
    if store._journal is not None:  # noqa: SLF001
        store._journal.close = lambda **_: None  # type: ignore[method-assign]  # noqa: SLF001
    store.close()


def _open_after_crash(dest: Path, durability: str, keys: list[str]) -> dict[str, tuple[RecordState, bytes] | None]:
    before_open = verify_store(dest)
    # verify does not walk what the crash may have torn; it says open() will roll back.
    assert set(before_open.problem_kinds) <= {"recovery-pending"}
    with DedupStore.open(dest, durability=durability, eviction_rate=0) as again:
        got = _state(again, keys)
    report = verify_store(dest)
    assert report.ok, report.problems
    return got


def test_a_killed_process_loses_nothing_in_flush_mode_on_the_same_boot(tmp_path: Path) -> None:
    # Same boot: the page cache is the truth, so the newest commit stands even
    # though it was never checkpointed (the image takes every written page).
    root = tmp_path / "live"
    store = DedupStore.open(root, durability="flush", eviction_rate=0, flush_interval=3600)
    try:
        store.ensure_namespace(NS, horizon="1h", lease="1h")
        store.flush()
        durable = _snapshot(root)
        r = store.claim(NS, "late", {"v": 1})
        store.complete(NS, "late", r.token, b"kept")
        shutil.copytree(root, tmp_path / "killed", ignore=shutil.ignore_patterns("lock.mdb"))
    finally:
        store.close()
    assert durable  # the copy above is the killed process's page cache
    with DedupStore.open(tmp_path / "killed", durability="flush", eviction_rate=0) as again:
        rec = again.lookup(NS, "late")
        assert rec is not None and rec.outcome == b"kept"


def test_the_flush_thread_makes_writes_durable_within_the_interval(tmp_path: Path) -> None:
    with DedupStore.open(tmp_path, durability="flush", eviction_rate=0, flush_interval=0.01) as store:
        store.ensure_namespace(NS)
        store.claim(NS, "k", {"v": 1})
        parts = store._parts  # noqa: SLF001
        last = [p.env.info()["last_txnid"] for p in parts]
        deadline = time.monotonic() + 10
        while any(p.checkpointer.durable_txnid < t for p, t in zip(parts, last, strict=True)):
            assert time.monotonic() < deadline, "no background checkpoint within 10 s at a 10 ms interval"
            time.sleep(0.01)


def test_flush_interval_is_bounded_and_named(tmp_path: Path) -> None:
    from dedupstore.errors import InvalidInputError

    for bad in (0, 0.0005, 3601, "2h", "soon"):
        with pytest.raises(InvalidInputError, match="flush_interval"):
            DedupStore.open(tmp_path, durability="flush", flush_interval=bad)
    for good in (0.001, 3600, "250ms", "1h"):
        DedupStore.open(tmp_path, durability="flush", flush_interval=good).close()


def _meta(txnid: int) -> bytes:
    m = bytearray(checkpoint.META_LEN)
    m[checkpoint._META_TXNID : checkpoint._META_TXNID + 8] = txnid.to_bytes(8, "little")  # noqa: SLF001
    return bytes(m)


def test_a_torn_record_leaves_the_previous_one(tmp_path: Path) -> None:
    ck = CheckpointFile(tmp_path)
    try:
        with ck.locked():
            assert ck.write(5, _meta(5), 4096)
            assert ck.write(9, _meta(9), 4096)
            newest = ck.read()
            assert newest is not None and newest.txnid == 9
            # tear the newest slot: one byte of its meta
            raw = bytearray((tmp_path / "checkpoint").read_bytes())
            raw[(newest.seq % 2) * SLOT_SIZE + 60] ^= 0xFF
            (tmp_path / "checkpoint").write_bytes(bytes(raw))
            back = ck.read()
            assert back is not None and back.txnid == 5
    finally:
        ck.close()


def test_records_only_move_forward_within_a_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = CheckpointFile(tmp_path)
    try:
        with ck.locked():
            assert ck.write(9, _meta(9), 4096)
            assert not ck.write(7, _meta(7), 4096)  # a slower process's older snapshot
            assert not ck.write(9, _meta(9), 4096)
            rec = ck.read()
            assert isinstance(rec, Record) and rec.txnid == 9
            _reboot(monkeypatch)
            assert ck.write(9, _meta(9), 4096)  # a new boot records itself
            rec = ck.read()
            assert rec is not None and rec.boot == checkpoint.boot_id()
    finally:
        ck.close()


class _NothingWrittenBack:
    """An rng for _crash_image under which no page written since the checkpoint reached the disk."""

    def random(self) -> float:
        return 1.0
