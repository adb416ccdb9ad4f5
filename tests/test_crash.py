"""SIGKILL a writer at random points: no acknowledged write is lost, the store
stays consistent, and no acknowledged key is ever NEW again.

A killed process cannot lose page-cache data, so both durability modes must
pass. The child (_crash_child.py) follows a plan that is a pure function of its
run number and acknowledges each returned call with one write to stdout, so the
parent knows each key's state exactly, except for the one call in flight at the
kill, whose keys may or may not have committed.

In sync mode the test also copies the store as some kills left it and opens
each copy after a simulated restart (another boot id): every partition rolls
back to its last checkpoint and replays the journal, and every write
acknowledged by then must be back.
"""

from __future__ import annotations

import copy
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
from _crash_child import HORIZON, LEASE, NS, Op, outcome_of, plan

from dedupstore import DedupStore, RecordState, Status, checkpoint
from dedupstore.verify import verify_store

CHILD = Path(__file__).with_name("_crash_child.py")
KILLS = 40
TIMEOUT = 60.0


@dataclass
class Expected:
    """What the store must hold after all the kills."""

    pending: dict[str, int] = field(default_factory=dict)  # key -> token of the acknowledged NEW
    completed: dict[str, int] = field(default_factory=dict)  # key -> token, outcome is outcome_of(key)
    claim_in_flight: set[str] = field(default_factory=set)  # absent, or PENDING with an unknown token
    complete_in_flight: set[str] = field(default_factory=set)  # PENDING or COMPLETED (token known)
    absent: set[str] = field(default_factory=set)  # planned after the call in flight: never written
    tokens: dict[str, int] = field(default_factory=dict)


class Child:
    """One run of _crash_child.py with its stdout collected by a thread."""

    def __init__(self, path: Path, durability: str, run: int, logs: Path) -> None:
        self.stderr_path = logs / f"child-{run}.stderr"
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), str(path), durability, str(run)],
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=logs,
            )
        self.out = bytearray()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read1(65536):
            with self.lock:
                self.out += chunk

    def wait_ready(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with self.lock:
                if self.out.startswith(b"READY\n"):
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.001)
        raise AssertionError(f"child never became ready: {self.stderr()}")

    def kill(self) -> list[str]:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        self.reader.join(TIMEOUT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        # It runs until killed: any other end is a failure inside the child.
        assert self.proc.returncode == -signal.SIGKILL, self.stderr()
        text = bytes(self.out).decode()
        # A line without its newline was never acknowledged (cannot happen with
        # one write per call, but a torn line must not count as an ack).
        lines = text.split("\n")[:-1]
        if lines and lines[0] == "READY":
            lines = lines[1:]
        return lines

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]


def account(run: int, lines: list[str], exp: Expected) -> list[str]:
    """Match a run's acknowledgements against its plan; return the keys acknowledged."""
    ops = plan(run)
    pos = 0
    acked: list[str] = []
    op: Op | None = None
    for op in ops:
        if op.kind == "claim":
            want = [f"NEW {k} " for k in op.keys]
            got = lines[pos:pos + len(op.keys)]
            if not got:
                break
            assert len(got) == len(want) and all(g.startswith(w) for g, w in zip(got, want, strict=True)), (got, want)
            for key, line in zip(op.keys, got, strict=True):
                token = int(line.split(" ")[2])
                exp.pending[key] = token
                exp.tokens[key] = token
                acked.append(key)
            pos += len(op.keys)
        else:
            (key,) = op.keys
            if pos == len(lines):
                break
            assert lines[pos] == f"DONE {key}", (lines[pos], op)
            exp.completed[key] = exp.pending.pop(key)
            pos += 1
    assert pos == len(lines), f"acknowledgements past the plan: {lines[pos:]}"
    assert op is not None
    # `op` is the call in flight at the kill: it may or may not have committed.
    if op.kind == "claim":
        exp.claim_in_flight.update(op.keys)
    else:
        exp.complete_in_flight.add(op.keys[0])
    # Nothing planned after it may exist: the next claim never started.
    nxt = next(o for o in ops if o.kind == "claim")
    exp.absent.update(nxt.keys)
    return acked


def _completed_are_there(store: DedupStore, completed: dict[str, int], parents: dict[str, bytes], where: str) -> None:
    for key, token in completed.items():
        rec = store.lookup(NS, key)
        assert rec is not None, f"acknowledged DONE {key} lost{where}"
        assert (rec.state, rec.token, rec.outcome) == (RecordState.COMPLETED, token, outcome_of(key)), key
    for key, outcome in parents.items():
        rec = store.lookup(NS, key)
        assert rec is not None and rec.outcome == outcome, f"{key}{where}"


def _image_at_kill(
    observer: DedupStore, path: Path, dest: Path, exp: Expected, parent_keys: dict[str, bytes]
) -> tuple[Path, Expected, dict[str, bytes]]:
    """The store's files as the kill left them, with what was acknowledged by then.
    The parent's checkpoints are held off while copying, so the copy is one moment."""
    locks = [p.checkpointer._lock for p in observer._parts]  # noqa: SLF001
    for lock in locks:
        lock.acquire()
    try:
        shutil.copytree(path, dest, ignore=shutil.ignore_patterns("lock.mdb"))
    finally:
        for lock in locks:
            lock.release()
    return dest, copy.deepcopy(exp), dict(parent_keys)


def within(fn: Callable[[], None], what: str) -> None:
    # A killed writer may die holding LMDB's write mutex; a store that could
    # not recover it would block forever, which must fail rather than hang.
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(TIMEOUT)
    assert not t.is_alive(), f"{what} blocked for {TIMEOUT}s after a child was killed"
    if errors:
        raise errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_acknowledged_writes_survive_sigkill(tmp_path: Path, durability: str) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"seed={seed}")  # shown on failure, to replay the same kill points
    rng = random.Random(seed)
    path = tmp_path / "store"
    logs = tmp_path / "logs"
    logs.mkdir()
    exp = Expected()
    parent_keys: dict[str, bytes] = {}

    # The parent keeps its own handle open throughout, as a sibling consumer
    # would: the children then never start on a fresh lock file, and a child
    # killed while holding the write lock must be recovered from, not reset.
    observer = DedupStore.open(path, partitions=2, durability=durability)
    images: list[tuple[Path, Expected, dict[str, bytes]]] = []
    try:
        observer.ensure_namespace(NS, horizon=HORIZON, lease=LEASE)
        for run in range(KILLS):
            child = Child(path, durability, run, logs)
            if rng.random() < 0.2:
                # Sometimes kill during interpreter start-up or opening the store.
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                child.wait_ready()
                time.sleep(rng.uniform(0.002, 0.1))
            acked = account(run, child.kill(), exp)
            if durability == "sync" and run % 8 == 7:
                images.append(_image_at_kill(observer, path, tmp_path / f"image-{run}", exp, parent_keys))

            def sibling_checks(run: int = run, acked: list[str] = acked) -> None:
                # Every acknowledged write is visible to another process at once.
                for key in acked:
                    rec = observer.lookup(NS, key)
                    assert rec is not None, key
                    if key in exp.completed:
                        assert rec.state is RecordState.COMPLETED, key
                key = f"parent-{run}"
                res = observer.claim(NS, key)
                assert res.status is Status.NEW and res.token is not None
                observer.complete(NS, key, res.token, key.encode())
                parent_keys[key] = key.encode()

            within(sibling_checks, "the parent's handle")
    finally:
        observer.close()

    print(
        f"acknowledged: {len(exp.pending)} pending, {len(exp.completed)} completed; in flight at the kills: "
        f"{len(exp.claim_in_flight)} claimed keys, {len(exp.complete_in_flight)} completions"
    )
    # Kill points must land mid-stream, not only before the first call.
    assert len(exp.pending) + len(exp.completed) > KILLS, "the children acknowledged almost nothing"
    found_pending: set[str] = set()
    with DedupStore.open(path, durability=durability) as store:
        for key, token in exp.pending.items():
            rec = store.lookup(NS, key)
            assert rec is not None, f"acknowledged NEW {key} lost"
            if key in exp.complete_in_flight:
                assert rec.state in (RecordState.PENDING, RecordState.COMPLETED), (key, rec)
                assert rec.token == token
                if rec.state is RecordState.COMPLETED:
                    assert rec.outcome == outcome_of(key)
                    continue
            assert (rec.state, rec.token) == (RecordState.PENDING, token), (key, rec)
            found_pending.add(key)
        _completed_are_there(store, exp.completed, parent_keys, "")
        in_flight_written: set[str] = set()
        for key in exp.claim_in_flight:
            rec = store.lookup(NS, key)
            if rec is not None:
                # Committed but killed before the acknowledgement: a lease nobody knows of.
                assert rec.state is RecordState.PENDING, (key, rec)
                in_flight_written.add(key)
        for key in exp.absent:
            assert store.lookup(NS, key) is None, f"{key} was never claimed but has a record"

        # The pending index agrees with the records, and counts add up.
        unresolved = {r.key.decode() for r in store.unresolved(NS)}
        assert unresolved == found_pending | in_flight_written
        stats = store.stats()
        records = sum(p["records"] for p in stats["partition_stats"])
        pending = sum(p["pending"] for p in stats["partition_stats"])
        assert records == len(exp.pending) + len(exp.completed) + len(in_flight_written) + len(parent_keys)
        assert pending == len(unresolved)

        # No acknowledged key is ever NEW again.
        for key in exp.completed:
            res = store.claim(NS, key)
            assert (res.status, res.outcome) == (Status.DUPLICATE, outcome_of(key)), key
        for key in exp.pending:
            res = store.claim(NS, key)
            if key in found_pending:
                assert res.status is Status.IN_PROGRESS, key
            else:
                assert (res.status, res.outcome) == (Status.DUPLICATE, outcome_of(key)), key

        # And the store still takes writes.
        fresh = store.claim(NS, "after-crashes")
        assert fresh.status is Status.NEW and fresh.token is not None
        store.complete(NS, "after-crashes", fresh.token, b"ok")

    # sync mode: each image is the files as the kill left them. Opened after a
    # (simulated) restart, every partition rolls back to its last checkpoint
    # and replays the journal: every write acknowledged by then must be back.
    replayed = 0
    for image, then, parents in images:
        restarted = mock.patch.object(checkpoint, "boot_id", mock.Mock(return_value=uuid.uuid4().bytes))
        with restarted, DedupStore.open(image) as store:
            for key, token in then.pending.items():
                rec = store.lookup(NS, key)
                assert rec is not None and rec.token == token, f"acknowledged NEW {key} lost in {image.name}"
            _completed_are_there(store, then.completed, parents, f" in {image.name}")
            replayed += sum(p.replayed for p in store._parts)  # noqa: SLF001
        assert verify_store(image).ok
    if images:
        assert replayed > 0, "no image had journaled writes after its checkpoint: the replay went untested"

    # Once the leases have run out, the pending keys are UNKNOWN, still never NEW.
    later = time.time() + 2 * 3600
    with DedupStore.open(path, durability=durability, clock=lambda: later) as store:
        for key in found_pending | in_flight_written:
            res = store.claim(NS, key)
            assert res.status is Status.UNKNOWN and res.token is not None, key
            assert res.token != exp.tokens.get(key)
