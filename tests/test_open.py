"""Opening, reopening, durability modes, and refusing what is not ours."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import lmdb
import pytest
from conftest import FakeClock

from dedupstore import (
    DedupStore,
    InvalidInputError,
    Status,
    StoreClosedError,
    StoreFormatError,
)
from dedupstore import store as store_module


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_state_survives_close_and_reopen(tmp_path: Path, clock: FakeClock, durability: str) -> None:
    path = tmp_path / "s"
    with DedupStore.open(path, durability=durability, clock=clock) as s:
        s.ensure_namespace("n", horizon="2h", lease="10s", intent_fields=["amount"])
        done = s.claim("n", "done", {"amount": 1})
        assert done.token is not None
        s.complete("n", "done", done.token, b"out")
        pending = s.claim("n", "pending")
        s.flush()
    with DedupStore.open(path, durability=durability, clock=clock) as s:
        cfg = s.namespaces()["n"]
        assert cfg.horizon == 7200 and cfg.lease == 10 and cfg.intent_fields == ("amount",)
        assert s.claim("n", "done", {"amount": 1, "note": "ignored"}).outcome == b"out"
        assert s.claim("n", "pending").status is Status.IN_PROGRESS
        assert pending.token is not None
        s.complete("n", "pending", pending.token)
        assert s.partitions == 4 and s.durability == durability


def test_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="durability must be one of"):
        DedupStore.open(tmp_path / "s", durability="async")


def test_partition_count_is_fixed_at_creation(tmp_path: Path) -> None:
    DedupStore.open(tmp_path / "s", partitions=3).close()
    with pytest.raises(StoreFormatError, match="created with 3 partitions"):
        DedupStore.open(tmp_path / "s", partitions=4)
    with DedupStore.open(tmp_path / "s") as s:
        assert s.partitions == 3


def test_create_false_on_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(StoreFormatError, match="create=False"):
        DedupStore.open(tmp_path / "missing", create=False)


def test_foreign_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("not a store")
    with pytest.raises(StoreFormatError, match="not a dedupstore store"):
        DedupStore.open(tmp_path / "s")
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["notes.txt"]


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises((StoreFormatError, FileExistsError)):
        DedupStore.open(tmp_path / "f")


def test_foreign_lmdb_environment_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s" / "meta").mkdir(parents=True)
    env = lmdb.open(str(tmp_path / "s" / "meta"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"someone", b"else")
    env.close()
    with pytest.raises(StoreFormatError, match="not a dedupstore"):
        DedupStore.open(tmp_path / "s")


def test_corrupt_meta_file_is_refused(tmp_path: Path) -> None:
    DedupStore.open(tmp_path / "s").close()
    data = tmp_path / "s" / "meta" / "data.mdb"
    data.write_bytes(b"\x00garbage" * 4096)
    with pytest.raises(StoreFormatError):
        DedupStore.open(tmp_path / "s")


def test_corrupt_partition_file_is_refused(tmp_path: Path) -> None:
    DedupStore.open(tmp_path / "s", partitions=2).close()
    (tmp_path / "s" / "p001" / "data.mdb").write_bytes(b"\xff" * 65536)
    with pytest.raises(StoreFormatError):
        DedupStore.open(tmp_path / "s")


def _rewrite_format(path: Path, **changes: object) -> None:
    env = lmdb.open(str(path / "meta"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        data = json.loads(txn.get(b"format"))
        data.update(changes)
        txn.put(b"format", json.dumps(data).encode())
    env.close()


@pytest.mark.parametrize("version", [1, 3])  # 1: unresolved records in generations, plus a pending index
def test_other_format_version_is_refused_with_both_versions(tmp_path: Path, version: int) -> None:
    DedupStore.open(tmp_path / "s").close()
    _rewrite_format(tmp_path / "s", format_version=version)
    with pytest.raises(StoreFormatError, match=rf"format version {version}; this dedupstore reads version 2"):
        DedupStore.open(tmp_path / "s")


def test_mixed_up_partition_directories_are_refused(tmp_path: Path) -> None:
    DedupStore.open(tmp_path / "a", partitions=2).close()
    DedupStore.open(tmp_path / "b", partitions=2).close()
    (tmp_path / "a" / "p001").rename(tmp_path / "p001-a")
    (tmp_path / "b" / "p001").rename(tmp_path / "a" / "p001")
    with pytest.raises(StoreFormatError, match="directories were mixed up"):
        DedupStore.open(tmp_path / "a")


def test_unknown_record_version_is_refused_not_misread(tmp_path: Path, clock: FakeClock) -> None:
    with DedupStore.open(tmp_path / "s", partitions=1, clock=clock) as s:
        s.ensure_namespace("n")
        s.claim("n", "k")  # unresolved: in the pending database
        s.complete("n", "c", s.claim("n", "c").token)  # completed: in a generation
    env = lmdb.open(str(tmp_path / "s" / "p000"), max_dbs=4, map_size=1 << 30)
    with env.begin(write=True) as txn:
        for name in (b"records", b"pending"):
            db = env.open_db(name, txn=txn)
            ((key, value),) = list(txn.cursor(db=db))
            txn.put(key, b"\x09" + value[1:], db=db)
    env.close()
    with DedupStore.open(tmp_path / "s", clock=clock) as s:
        for key in ("k", "c"):
            with pytest.raises(StoreFormatError, match="record format version 9"):
                s.claim("n", key)
            with pytest.raises(StoreFormatError, match="record format version 9"):
                s.lookup("n", key)


def test_closed_store_raises(tmp_path: Path) -> None:
    s = DedupStore.open(tmp_path / "s")
    s.ensure_namespace("n")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreClosedError):
        s.claim("n", "k")
    with pytest.raises(StoreClosedError):
        s.stats()


def test_constructor_is_not_the_way_in() -> None:
    with pytest.raises(TypeError, match=r"DedupStore.open"):
        DedupStore()


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_threads_share_commits_and_each_key_is_new_once(tmp_path: Path, durability: str) -> None:
    # flush without write-behind: every claim that writes goes through the group commit.
    with DedupStore.open(tmp_path / "s", durability=durability, partitions=2, apply_interval=0) as s:
        s.ensure_namespace("n")
        keys = [f"k{i}" for i in range(400)]
        verdicts: list[list[Status]] = [[] for _ in range(8)]

        def worker(i: int) -> None:
            for k in keys[i::2] + keys:  # overlapping key sets, so threads race on every key
                verdicts[i].append(s.claim("n", k).status)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        new = sum(v.count(Status.NEW) for v in verdicts)
        assert new == len(keys)
        commits = sum(p["commits"] for p in s.stats()["partition_stats"])
        ops = sum(p["ops_committed"] for p in s.stats()["partition_stats"])
        # Racing claims that the snapshot saw as absent all reach the write
        # path; with eight threads some of them must have shared a commit.
        assert ops >= len(keys) and commits < ops


def test_a_missing_partition_is_refused_not_recreated(tmp_path: Path) -> None:
    import shutil

    with DedupStore.open(tmp_path / "s", partitions=2) as s:
        s.ensure_namespace("n")
        for i in range(20):
            res = s.claim("n", f"k{i}")
            assert res.token is not None
            s.complete("n", f"k{i}", res.token)
    shutil.rmtree(tmp_path / "s" / "p001")
    for create in (False, True):
        with pytest.raises(StoreFormatError, match="p001 is missing"):
            DedupStore.open(tmp_path / "s", create=create)
    assert not (tmp_path / "s" / "p001").exists()


def test_a_truncated_data_file_is_refused_not_a_crash(tmp_path: Path) -> None:
    with DedupStore.open(tmp_path / "s", partitions=1) as s:
        s.ensure_namespace("n")
        batch = s.claim_many("n", [f"key-{i}" for i in range(5000)])
        assert len(batch) == 5000
    data = tmp_path / "s" / "p000" / "data.mdb"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    with pytest.raises(StoreFormatError, match="truncated"):
        DedupStore.open(tmp_path / "s")


def test_a_file_ending_before_lmdbs_last_page_number_still_opens(tmp_path: Path) -> None:
    # Found by the state machine (sealing and filtering empty generations,
    # then evicting them): a partition whose last transaction allocated pages
    # and freed them again. LMDB counts them in its last page number but never
    # writes them, so the file ends early; that file is healthy. Made here
    # directly, as such a transaction.
    clock = FakeClock(1_700_000_000.0)
    store = DedupStore.open(tmp_path / "s", partitions=1, clock=clock, eviction_rate=0)
    store.ensure_namespace("n", horizon=3600)
    store.close()
    data = tmp_path / "s" / "p000" / "data.mdb"
    env = lmdb.open(str(data.parent), max_dbs=4)
    try:
        meta = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            txn.put(b"zz-scratch", b"x" * 20_000, db=meta)
            txn.delete(b"zz-scratch", db=meta)
        assert (env.info()["last_pgno"] + 1) * env.stat()["psize"] > data.stat().st_size
    finally:
        env.close()
    with DedupStore.open(tmp_path / "s", clock=clock) as again:
        assert again.claim("n", "k").status is Status.NEW


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def _comm(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/comm").read_text().strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")
@pytest.mark.parametrize("steps", [0, 7, 19])
def test_store_threads_run_below_the_thread_that_opened_it(tmp_path: Path, steps: int) -> None:
    # The opener runs at nice 2 (or more, if the test's own runs there):
    # the store's threads take its value plus thread_nice (at most 19); the
    # opener's own is left alone, and so are the threads that run its
    # flush()'s checkpoints side by side.
    base = max(2, _nice(threading.get_native_id()))
    seen: dict[str, int] = {}
    comms: dict[str, str] = {}
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, base)
            with DedupStore.open(tmp_path / "s", durability="flush", thread_nice=steps) as s:
                s.ensure_namespace("ns")
                s.claim("ns", "k")
                s.flush()  # four partitions: their checkpoints run in the store's pool, side by side
                own = min(19, base + steps)
                deadline = time.monotonic() + 10
                while True:  # each of the store's threads lowers itself when it starts
                    threads = {
                        t.name.split(":")[0]: t for t in threading.enumerate() if t.name.startswith("dedupstore-")
                    }
                    mine = [t for name, t in threads.items() if name in ("dedupstore-flush", "dedupstore-maintain")]
                    if len(mine) == 2 and all(_nice(t.native_id) == own for t in mine if t.native_id):
                        break
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                seen.update({name: _nice(t.native_id) for name, t in threads.items() if t.native_id})
                comms.update({name: _comm(t.native_id) for name, t in threads.items() if t.native_id})
                seen["opener"] = _nice(tid)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    t = threading.Thread(target=opener)
    t.start()
    t.join()
    assert not errors, errors
    assert seen.pop("opener") == base
    assert seen.pop("dedupstore-flush") == seen.pop("dedupstore-maintain") == min(19, base + steps)
    assert "dedupstore-commit_0" in seen and set(seen.values()) == {base}, seen  # flush()'s, at its caller's
    # Named for ps -L, top -H and perf, where a Python thread is "python".
    assert comms["dedupstore-flush"] == "ds-flush" and comms["dedupstore-maintain"] == "ds-maintain", comms


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_idle_store_threads_take_sched_idle_and_leave_the_opener_alone(tmp_path: Path) -> None:
    before = os.sched_getscheduler(threading.get_native_id())
    with DedupStore.open(tmp_path / "s", durability="flush", thread_nice="idle") as s:
        s.ensure_namespace("ns")
        assert s.claim("ns", "k").status is Status.NEW
        deadline = time.monotonic() + 10
        while True:  # each of the store's threads takes it when it starts
            mine = {t.name.split(":")[0]: t for t in threading.enumerate() if t.name.startswith("dedupstore-")}
            policies = {name: os.sched_getscheduler(t.native_id) for name, t in mine.items()
                        if name in ("dedupstore-flush", "dedupstore-maintain") and t.native_id}
            if len(policies) == 2 and set(policies.values()) == {os.SCHED_IDLE} or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert policies == {"dedupstore-flush": os.SCHED_IDLE, "dedupstore-maintain": os.SCHED_IDLE}
        assert os.sched_getscheduler(threading.get_native_id()) == before
        s.flush()  # applies and checkpoints still run (with the CPU idle, as here)
        assert s.claim("ns", "k").status is Status.IN_PROGRESS


def _store_threads(s: DedupStore) -> dict[str, int]:
    """The store's own threads' native ids by name, once both have started."""
    deadline = time.monotonic() + 10
    while True:
        mine = {t.name.split(":")[0]: t.native_id for t in threading.enumerate()
                if t.name.split(":")[0] in ("dedupstore-flush", "dedupstore-maintain") and t.native_id}
        if len(mine) == 2 or time.monotonic() > deadline:
            return mine
        time.sleep(0.01)


@pytest.mark.parametrize("thread_slice", [0.01, "20ms", 0])
def test_store_threads_ask_for_a_longer_time_slice(tmp_path: Path, thread_slice: object) -> None:
    # Linux 6.12 and later report a SCHED_OTHER thread's slice as its
    # sched_runtime; earlier kernels 0 (and ignore the request).
    me = store_module._sched_attr(threading.get_native_id())
    if me is None or me.sched_runtime == 0:
        pytest.skip("this kernel has no per-thread time slices (Linux 6.12) or no sched_getattr here")
    base = me.sched_runtime
    with DedupStore.open(tmp_path / "s", durability="flush", thread_slice=thread_slice) as s:  # type: ignore[arg-type]
        mine = _store_threads(s)
        assert len(mine) == 2
        # Each thread sets its own when it starts: wait for both.
        want = {0.01: 10_000_000, "20ms": 20_000_000, 0: base}[thread_slice]  # type: ignore[index]
        deadline = time.monotonic() + 10
        while True:
            attrs = {name: store_module._sched_attr(tid) for name, tid in mine.items()}
            got = {name: (a.sched_policy, a.sched_runtime) for name, a in attrs.items() if a is not None}
            if set(got.values()) == {(os.SCHED_OTHER, want)} or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert got == {"dedupstore-flush": (os.SCHED_OTHER, want), "dedupstore-maintain": (os.SCHED_OTHER, want)}
        assert all(a is not None and a.sched_nice == min(19, 10 + me.sched_nice) for a in attrs.values())  # nice kept
        after = store_module._sched_attr(threading.get_native_id())
        assert after is not None and after.sched_runtime == base  # the opener's is left alone


@pytest.mark.parametrize(("bad", "message"), [
    (50e-6, r"thread_slice must be 0 \(the kernel's own\) or 100us\.\.100ms; got 5e-05"),
    (0.2, r"thread_slice must be 0 \(the kernel's own\) or 100us\.\.100ms; got 0\.2"),
    ("1s", r"thread_slice must be 0 \(the kernel's own\) or 100us\.\.100ms; got '1s'"),
    (-1, r"thread_slice must be >= 0"),
    (True, r"thread_slice must be seconds"),
    ("long", r"thread_slice 'long' is not a duration"),
])
def test_thread_slice_out_of_range_is_refused_naming_the_range(tmp_path: Path, bad: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        DedupStore.open(tmp_path / "s", thread_slice=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()  # refused before anything is made


@pytest.mark.parametrize("bad", [-1, 20, 1.5, True, "10", "IDLE", "nice"])
def test_thread_nice_out_of_range_is_refused_naming_the_range(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidInputError, match=r"thread_nice must be an int in 0\.\.19 .* or 'idle'"):
        DedupStore.open(tmp_path / "s", thread_nice=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()  # refused before anything is made


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_store_threads_stay_on_thread_cpus(tmp_path: Path) -> None:
    # The store's two threads keep to thread_cpus (the last CPU this process
    # may use); the opener keeps every CPU it had, and so does the pool that
    # runs flush()'s checkpoints.
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    with DedupStore.open(tmp_path / "s", durability="flush", thread_cpus=[cpu]) as s:
        s.ensure_namespace("ns")
        s.claim("ns", "k")
        s.flush()
        deadline = time.monotonic() + 10
        while True:
            threads = {t.name.split(":")[0]: t for t in threading.enumerate() if t.name.startswith("dedupstore-")}
            mine = [threads.get("dedupstore-flush"), threads.get("dedupstore-maintain")]
            pinned = [t is not None and t.native_id and os.sched_getaffinity(t.native_id) == {cpu} for t in mine]
            if all(pinned) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert all(pinned), {name: os.sched_getaffinity(t.native_id) for name, t in threads.items() if t.native_id}
        pool = [t for name, t in threads.items() if name.startswith("dedupstore-commit")]
        assert pool and all(os.sched_getaffinity(t.native_id) == allowed for t in pool if t.native_id)
        assert os.sched_getaffinity(0) == allowed


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([], "must name at least one CPU"),
        ([100_000], r"thread_cpus \[100000\] are not among the CPUs this process may run on"),
        ([-1], "must hold CPU numbers"),
        ([True], "must hold CPU numbers"),
        ("1", "must be a collection of CPU numbers"),
        (1, "must be a collection of CPU numbers"),
    ],
)
def test_bad_thread_cpus_are_refused_naming_the_limit(tmp_path: Path, bad: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        DedupStore.open(tmp_path / "s", thread_cpus=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()  # refused before anything is made
