"""Write-behind (dedupstore/window.py), flush mode unless a test says sync: a partition's only writer
decides against an overlay, logs each call before it returns and applies many
calls per LMDB transaction. What it returned must survive its death, be seen
by every other process, and never let a key be NEW twice."""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupstore import (
    DedupStore,
    InvalidDurationError,
    InvalidInputError,
    InvalidIntentError,
    LeaseLostError,
    RecordState,
    Status,
    StoreFormatError,
    StoreFullError,
    _native,
    window,
)
from dedupstore.journal import decode, encode
from dedupstore.verify import verify_store

CHILD = Path(__file__).with_name("_window_child.py")


class Child:
    def __init__(
        self, path: Path, apply_interval: float = 1.0, durability: str = "flush", map_bytes: int | None = None,
        partitions: int | None = None,
    ) -> None:
        extra = ["-" if map_bytes is None else str(map_bytes)] + ([] if partitions is None else [str(partitions)])
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(path), str(apply_interval), durability, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.read() == "open"

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, f"the child exited ({self.proc.poll()})"
        return line

    def ask(self, command: str) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        verb, _, figures = self.read().partition(" ")
        assert verb == "ok"
        out: list[dict[str, Any]] = json.loads(figures)
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._close_pipes()

    def stop(self) -> None:
        assert self.proc.stdin is not None
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


def _expect(store: DedupStore, prefix: str, n: int) -> None:
    for i in range(n):
        key = f"{prefix}{i}"
        rec = store.lookup("n", key)
        assert rec is not None, f"acknowledged {key} is lost"
        if i % 2 == 0:
            assert (rec.state, rec.outcome) == (RecordState.COMPLETED, f"f-{key}".encode()), key
        else:
            assert rec.state is RecordState.PENDING, key


def _raw_w(path: Path, partition: int = 0) -> bytes | None:
    env = lmdb.open(str(path / f"p{partition:03d}"), max_dbs=4, readonly=True, lock=False)
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin() as txn:
            raw: bytes | None = txn.get(window.W_KEY, db=meta)
            return raw
    finally:
        env.close()


def _segments(path: Path) -> list[str]:
    wdir = path / window.WLOG_DIR
    return sorted(p.name for p in wdir.iterdir()) if wdir.is_dir() else []


# ---------------------------------------------------------------- the overlay


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.binary(min_size=1, max_size=12), st.booleans())))
def test_overlay_changes_come_in_bytes_order_per_database_and_group_as_applied(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, bytes, bool]]
) -> None:
    # changes() sorts each database's keys in C (memcmp, then the shorter
    # first): the order Python gives bytes, which LMDB's default order is.
    env = lmdb.open(str(tmp_path_factory.mktemp("ov")), max_dbs=4)
    dbs = {1: env.open_db(b"records"), 2: env.open_db(b"pending"), 3: env.open_db(b"meta")}
    ov = _native.Overlay(dbs[1], dbs[2], dbs[3], env.begin())
    newest: dict[tuple[int, bytes], bytes | None] = {}
    for code, key, put in writes:
        if put:  # an overwriting put: a later delete is a change too
            ov.put(key, key + b"!", db=dbs[code])
            newest[(code, key)] = key + b"!"
        elif ov.delete(key, b"", dbs[code]):
            newest[(code, key)] = None
    changes = [(c, k, v) for (c, k), v in sorted(newest.items())]
    assert ov.changes() == changes
    # What an apply writes: the same, grouped per database for putmulti.
    n, puts, deletes = ov.write_set()
    assert n == len(changes) and deletes == [(c, k) for c, k, v in changes if v is None]
    codes = sorted({c for c, _, v in changes if v is not None})
    assert puts == [(code, [(k, v) for c, k, v in changes if c == code and v is not None]) for code in codes]
    env.close()


def _overlay_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[int, Any]]:
    # An environment with the three databases an overlay covers, each
    # holding b"old" (the snapshot's key), by journal code.
    env = lmdb.open(str(tmp_path_factory.mktemp("ov")), max_dbs=4)
    dbs = {1: env.open_db(b"records"), 2: env.open_db(b"pending"), 3: env.open_db(b"meta")}
    with env.begin(write=True) as txn:
        for db in dbs.values():
            txn.put(b"old", b"snapshot's", db=db)
    return env, dbs


def _overlay_write(ov: Any, dbs: dict[int, Any], what: str, code: int, key: bytes, value: bytes) -> None:
    # "put" (overwriting), "put-new" (NOOVERWRITE, as a claim's) or "delete".
    if what == "put":
        ov.put(key, value, db=dbs[code])
    elif what == "put-new":
        ov.put(key, value, False, False, False, dbs[code])
    else:
        ov.delete(key, b"", dbs[code])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "put-new", "delete", "keep", "rollback"]),
                          st.sampled_from([1, 2, 3]), st.sampled_from([b"a", b"b", b"c", b"old"]))))
def test_a_rollback_undoes_every_write_since_the_last_keep(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, bytes]]
) -> None:
    # What an overlay answers and would apply after a rollback is what it
    # answered and would have applied at the last keep().
    env, dbs = _overlay_env(tmp_path_factory)
    ov = _native.Overlay(dbs[1], dbs[2], dbs[3], env.begin())

    def seen() -> tuple[list[tuple[int, bytes, bytes | None]], list[bytes | None]]:
        return ov.changes(), [ov.get(k, None, dbs[c]) for c in dbs for k in (b"a", b"b", b"c", b"old")]

    kept = seen()
    for n, (what, code, key) in enumerate(steps):
        if what in ("put", "put-new", "delete"):
            _overlay_write(ov, dbs, what, code, key, b"%d" % n)
        elif what == "keep":
            ov.record(0, n)  # the ops framed, as a log write takes them
            ov.keep()
            kept = seen()
        else:
            ov.rollback()
            assert seen() == kept
    ov.snapshot.abort()
    env.close()


_OPS = st.lists(st.tuples(st.sampled_from(["put", "put-new", "delete"]), st.sampled_from([1, 2, 3]),
                          st.sampled_from([b"a", b"b", b"old"])), max_size=12)


@settings(max_examples=200, deadline=None)
@given(_OPS, _OPS)
def test_an_absorbed_overlay_answers_and_applies_as_the_one_it_took_in(
    tmp_path_factory: pytest.TempPathFactory, first: list[tuple[str, int, bytes]],
    second: list[tuple[str, int, bytes]],
) -> None:
    # An overlay folds in the writes of one that read through it (its apply
    # failed): it then answers what that one answered, and what it would
    # apply makes the snapshot so, with no delete of a key the snapshot lacks
    # that only NOOVERWRITE puts wrote (a claim's pending record, completed
    # in either, leaves no change).
    env, dbs = _overlay_env(tmp_path_factory)
    older = _native.Overlay(dbs[1], dbs[2], dbs[3], env.begin())
    newer = _native.Overlay(dbs[1], dbs[2], dbs[3], older)
    for ov, steps in ((older, first), (newer, second)):
        for n, (what, code, key) in enumerate(steps):
            _overlay_write(ov, dbs, what, code, key, b"%d" % n)
        ov.record(0, 1)
        ov.keep()
    view = [newer.get(k, None, dbs[c]) for c in dbs for k in (b"a", b"b", b"old")]
    older.absorb(newer)
    assert [older.get(k, None, dbs[c]) for c in dbs for k in (b"a", b"b", b"old")] == view
    changes = older.changes()
    plain = {(code, key) for what, code, key in first + second if what == "put"}
    assert not [(c, k) for c, k, v in changes if v is None and k != b"old" and (c, k) not in plain]
    with env.begin(write=True) as txn:
        for code, key, value in changes:
            if value is None:
                txn.delete(key, db=dbs[code])
            else:
                txn.put(key, value, db=dbs[code])
        assert [txn.get(k, None, db=dbs[c]) for c in dbs for k in (b"a", b"b", b"old")] == view
        txn.abort()
    older.snapshot.abort()
    env.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "put-new", "put-new", "delete", "delete", "keep", "rollback"]),
                          st.sampled_from([1, 2, 3]), st.integers(0, 199)), min_size=200, max_size=600))
def test_an_overlay_of_many_keys_answers_and_applies_as_a_model_of_its_writes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    # Enough keys for each database's map to grow several times and for
    # removed keys to sit in the probe runs of others; each key is made
    # anew for every write (equal bytes, another object). The model: the
    # newest value of each key written (None: deleted), and whether it is
    # fresh (first put here without overwriting, the snapshot lacking it):
    # a fresh key deleted leaves nothing to apply.
    env = lmdb.open(str(tmp_path_factory.mktemp("ov")), max_dbs=4)
    dbs = {1: env.open_db(b"records"), 2: env.open_db(b"pending"), 3: env.open_db(b"meta")}
    with env.begin(write=True) as txn:
        for db in dbs.values():
            for i in range(0, 200, 4):  # a quarter of the keys are the snapshot's
                txn.put(b"k%d" % i, b"snapshot's", db=db)
    ov = _native.Overlay(dbs[1], dbs[2], dbs[3], env.begin())
    model: dict[tuple[int, bytes], tuple[bytes | None, bool]] = {}
    kept = dict(model)

    def answer(code: int, key: bytes) -> bytes | None:
        if (code, key) in model:
            return model[(code, key)][0]
        return b"snapshot's" if int(key[1:]) % 4 == 0 else None

    for n, (what, code, i) in enumerate(steps):
        key = b"k" + str(i).encode()
        value = b"%d" % n
        held = model.get((code, key))
        if what == "put":
            assert ov.put(key, value, db=dbs[code]) is True
            model[(code, key)] = (value, held[1] if held else False)
        elif what == "put-new":
            was = answer(code, key)
            assert ov.put(key, value, False, False, False, dbs[code]) is (was is None)
            if was is None:
                model[(code, key)] = (value, held[1] if held else i % 4 != 0)
        elif what == "delete":
            was = answer(code, key)
            assert ov.delete(key, b"", dbs[code]) is (was is not None)
            if was is not None:
                if held and held[1]:
                    del model[(code, key)]
                else:
                    model[(code, key)] = (None, False)
        elif what == "keep":
            ov.record(0, n)
            ov.keep()
            kept = dict(model)
        else:
            ov.rollback()
            model = dict(kept)
        assert ov.get(b"k" + str(i).encode(), None, dbs[code]) == answer(code, key)
    assert [ov.get(b"k%d" % i, None, dbs[c]) for c in dbs for i in range(200)] == [
        answer(c, b"k%d" % i) for c in dbs for i in range(200)
    ]
    assert ov.changes() == sorted((c, k, v) for (c, k), (v, _) in model.items())
    assert len(ov) == len(model)
    ov.reset(env.begin())
    assert ov.changes() == [] and len(ov) == 0 and ov.get(b"k1", None, dbs[1]) is None
    ov.snapshot.abort()
    env.close()


def test_overlay_reads_its_own_writes_over_the_snapshot_and_logs_them_as_journal_ops(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), max_dbs=4)
    recs, pend, meta = (env.open_db(n) for n in (b"records", b"pending", b"meta"))
    with env.begin(write=True) as txn:
        txn.put(b"old", b"1", db=recs)
        txn.put(b"gone", b"2", db=pend)
    snap = env.begin()
    ov = _native.Overlay(recs, pend, meta, snap)
    assert ov.get(b"old", None, recs) == b"1" and ov.get(b"old", None, pend) is None
    assert ov.put(b"old", b"x", False, False, False, recs) is False  # NOOVERWRITE finds the snapshot's
    assert ov.put(b"new", b"3", False, False, False, recs) is True
    assert ov.delete(b"gone", b"", pend) is True and ov.get(b"gone", None, pend) is None
    assert ov.delete(b"gone", b"", pend) is False
    rec = ov.record(7, 42)
    assert rec is not None
    [(part, seq, decoded)] = list(decode(rec))
    assert (part, seq) == (7, 42)
    assert decoded == [(1, 1, b"new", b"3"), (2, 2, b"gone", b"")]
    assert rec == encode(7, 42, decoded)  # byte for byte a journal record, CRC included
    ov.keep()
    ov.put(b"new", b"4", db=recs)
    ov.put(b"other", b"5", db=meta)
    ov.rollback()  # the last call failed before its log write: undone, ops dropped
    assert ov.get(b"new", None, recs) == b"3" and ov.get(b"other", None, meta) is None
    assert ov.record(7, 43) is None
    assert ov.changes() == [(1, b"new", b"3"), (2, b"gone", None)] and len(ov) == 2
    # A key put where the snapshot lacked it and deleted again leaves nothing to apply,
    # though both ops are logged; undone, the put is back.
    assert ov.put(b"brief", b"8", False, False, False, pend) is True
    assert [op[:3] for op in list(decode(ov.record(7, 43)))[0][2]] == [(1, 2, b"brief")]
    ov.keep()
    assert ov.delete(b"brief", b"", pend) is True and ov.get(b"brief", None, pend) is None
    assert ov.changes() == [(1, b"new", b"3"), (2, b"gone", None)]
    ov.rollback()
    assert ov.get(b"brief", None, pend) == b"8"
    assert ov.delete(b"brief", b"", pend) is True
    assert [op[:3] for op in list(decode(ov.record(7, 44)))[0][2]] == [(2, 2, b"brief")]
    ov.keep()
    assert ov.changes() == [(1, b"new", b"3"), (2, b"gone", None)] and len(ov) == 2
    # The snapshot's meta answers are kept until reset(); the overlay's own writes win.
    assert ov.get(b"m", None, meta) is None
    with env.begin(write=True) as txn:
        txn.put(b"m", b"later", db=meta)
    assert ov.get(b"m", None, meta) is None  # still the snapshot's answer
    ov.put(b"m", b"mine", db=meta)
    assert ov.get(b"m", None, meta) == b"mine"
    ov.rollback()
    ov.reset(env.begin())
    assert ov.get(b"m", None, meta) == b"later"
    log = tmp_path / "log"
    w = _native.LogFile(os.open(log, os.O_RDWR | os.O_CREAT, 0o644))  # unmapped: pwritten
    os.pwrite(w.fd, bytes(64), 0)  # zeros ahead (as the journal keeps): written over, not appended to
    ov.put(b"logged", b"6", db=recs)
    n = ov.log(w, 7, 43, 5)
    assert log.read_bytes() == bytes(5) + encode(7, 43, [(1, 1, b"logged", b"6")]) + bytes(64 - 5 - n) and n > 0
    ov.rollback()  # log() kept it: nothing left to undo
    assert ov.get(b"logged", None, recs) == b"6" and ov.log(w, 7, 44, 5 + n) == 0
    assert w.mapped_writes == 0
    w.close()
    w.close()  # a second close does nothing
    # Through a mapping: the same bytes, read back through the file, which
    # reads as zeros past them (the space reserved ahead).
    mapped_log = tmp_path / "mapped"
    m = _native.LogFile(os.open(mapped_log, os.O_RDWR | os.O_CREAT, 0o644), 1 << 20, 4096)
    ov.put(b"mapped", b"9", db=recs)
    k = ov.log(m, 7, 44, 0)
    assert m.mapped_writes == 1
    assert mapped_log.read_bytes() == encode(7, 44, [(1, 1, b"mapped", b"9")]) + bytes(4096) and k > 0
    m.close()
    # A descriptor not open for writing cannot be mapped for writing either:
    # pwritten, EBADF, and the call can still be undone.
    w = _native.LogFile(os.open(log, os.O_RDONLY), 1 << 20)
    ov.put(b"lost", b"7", db=recs)
    with pytest.raises(OSError) as failed:
        ov.log(w, 7, 44, 5 + n)
    assert failed.value.errno == errno.EBADF
    ov.rollback()
    assert ov.get(b"lost", None, recs) is None
    w.close()
    with pytest.raises(ValueError, match="records, pending and meta"):
        ov.get(b"k", None, None)
    snap.abort()
    ov.snapshot.abort()
    env.close()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the mapping's flags from Linux's /proc")
def test_the_generation_state_read_through_an_overlay_follows_every_change_of_its_meta(tmp_path: Path) -> None:
    # A Space keeps the generation state it last read through an overlay
    # while the overlay's meta_version stands: every way the overlay's meta
    # answers can change must move it, and the state read after is the new one.
    env = lmdb.open(str(tmp_path), max_dbs=4)
    recs, pend, meta = (env.open_db(n) for n in (b"records", b"pending", b"meta"))
    space = _native.Space(recs, pend, meta, b"\x00\x01", 3_600_000_000, 0, 0, _native.Hasher(bytes(16)))
    ov = _native.Overlay(recs, pend, meta, env.begin())
    assert space.generation_state(ov) == (0, 0)
    v = ov.meta_version
    assert space.seal(ov, 4) == 5  # a meta write through the overlay
    assert ov.meta_version > v and space.generation_state(ov) == (5, 0)
    v = ov.meta_version
    ov.rollback()  # the write undone
    assert ov.meta_version > v and space.generation_state(ov) == (0, 0)
    space.seal(ov, 6)
    ov.keep()
    assert space.generation_state(ov) == (7, 0)
    with env.begin(write=True) as txn:  # what an apply writes
        for code, key, value in ov.changes():
            assert code == 3 and value is not None
            txn.put(key, value, db=meta)
        space.seal(txn, 9)
    v = ov.meta_version
    ov.reset(env.begin())  # applied: read from the newer snapshot
    assert ov.meta_version > v and space.generation_state(ov) == (10, 0)
    newer = _native.Overlay(recs, pend, meta, ov)  # reads through ov, as during an apply
    assert space.generation_state(newer) == (10, 0)
    with env.begin(write=True) as txn:
        space.seal(txn, 11)
    v = newer.meta_version
    newer.rebase(env.begin())
    assert newer.meta_version > v and space.generation_state(newer) == (12, 0)
    other = _native.Overlay(recs, pend, meta, env.begin())
    space.seal(other, 20)
    assert other.record(0, 1) is not None  # its call's ops framed, as a log write takes them
    other.keep()
    v = newer.meta_version
    newer.absorb(other)  # another overlay's writes folded in
    assert newer.meta_version > v and space.generation_state(newer) == (21, 0)
    for o in (ov, newer, other):
        o.snapshot.abort()
    env.close()


def test_a_log_segments_mapping_reads_no_pages_ahead(tmp_path: Path) -> None:
    # The first store to each fresh page faults it in; with read-ahead that
    # one fault would read the rest of the reserved chunk too, a pause of
    # milliseconds in the call that touches it (docs/benchmarks.md). Linux
    # shows the advice as the mapping's "rr" flag.
    path = tmp_path / "segment"
    log = _native.LogFile(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), 1 << 20, 4096)
    try:
        flags = None
        lines = Path("/proc/self/smaps").read_text().splitlines()
        for i, line in enumerate(lines):
            if line.endswith(str(path)):
                flags = next(x for x in lines[i + 1 :] if x.startswith("VmFlags:")).split()[1:]
                break
        assert flags is not None, "the segment is not mapped"
        assert "rr" in flags
    finally:
        log.close()


def _mapped_kib(part_of_path: str) -> int:
    # Resident KiB of this process's mappings of files whose path has ``part_of_path``.
    total, lines = 0, Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if part_of_path in line and line.split()[-1].startswith("/"):
            total += int(next(x for x in lines[i + 1 :] if x.startswith("Rss:")).split()[1])
    return total


def test_the_flusher_faults_a_segments_next_pages_in_ahead_of_the_calls(tmp_path: Path) -> None:
    # The calls' stores into the mapping then find their pages there: the
    # page faults (and zeroing) are the flusher's, without the GIL.
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        s.claim("n", "k")  # opens the window: one record, a page or two touched
        deadline = time.monotonic() + 10
        while _mapped_kib(str(tmp_path / "s" / "wlog")) < window.PREFAULT_BYTES // 1024:
            assert time.monotonic() < deadline, _mapped_kib(str(tmp_path / "s" / "wlog"))
            time.sleep(window.CHECK_S)
        assert s.claim("n", "k").status is Status.IN_PROGRESS  # what was logged is intact
    path = tmp_path / "segment"
    log = _native.LogFile(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), 1 << 20, 4096)
    assert log.prefault(0, 1 << 20) == 0  # nothing reserved yet: nothing to fault in, no SIGBUS
    log.close()
    assert log.prefault(0, 1 << 20) == 0  # closed: nothing to do


# ------------------------------------------------------------- one process


def test_claims_go_through_the_window_and_are_applied_in_few_transactions(tmp_path: Path) -> None:
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        for i in range(300):
            r = s.claim("n", f"k{i}")
            assert r.status is Status.NEW
            s.complete("n", f"k{i}", r.token, b"done")
        assert s.claim("n", "k7").status is Status.DUPLICATE
        rec = s.lookup("n", "k7")
        assert rec is not None and rec.outcome == b"done"  # read through the overlay
        [wb] = [p["write_behind"] for p in s.stats()["partition_stats"]]
        assert wb["open"] and wb["opened"] == 1 and wb["logged_bytes"] > 0
        assert wb["mapped_records"] == 600  # each call's record copied into the segment's mapping
        # 600 calls, a handful of applies (stats() itself applies first).
        assert 1 <= wb["applies"] <= 5 and wb["applied_keys"] >= 300
        assert s.stats()["partition_stats"][0]["commits"] < 10
    assert _raw_w(tmp_path / "s") is None and _segments(tmp_path / "s") == []  # close gave the window up
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert s.claim("n", "k299").status is Status.DUPLICATE
    assert verify_store(tmp_path / "s").ok


def test_a_redelivery_of_a_claim_in_flight_is_decided_on_the_record_its_put_found(tmp_path: Path) -> None:
    # A claim that finds its key in no generation puts a pending record with
    # NOOVERWRITE; when one is there (in the overlay, or applied to LMDB), the
    # verdict is decided on the record that put found: the lease still held,
    # the intent compared, the lease taken over once it has run out.
    now = [1_700_000_000.0]
    with DedupStore.open(
        tmp_path / "s", durability="flush", partitions=1, apply_interval=1, eviction_rate=0, clock=lambda: now[0]
    ) as s:
        s.ensure_namespace("n", lease="1m")
        assert s.claim("n", "applied", {"amount": 1}).status is Status.NEW
        s.stats()  # applies its pending record to LMDB ...
        assert s.claim("n", "in-overlay", {"amount": 1}).status is Status.NEW  # ... and not this one's
        keys = ("applied", "in-overlay")
        for key in keys:
            again = s.claim("n", key, {"amount": 1})
            assert again.status is Status.IN_PROGRESS and again.token is None, key
            assert 0 < again.retry_after <= 60, key
            assert s.claim("n", key, {"amount": 2}).status is Status.CONFLICT, key
        now[0] += 61
        for key in keys:
            taken = s.claim("n", key, {"amount": 1})
            assert taken.status is Status.UNKNOWN and taken.token is not None, key
            s.complete("n", key, taken.token, b"done")
            again = s.claim("n", key, {"amount": 1})
            assert (again.status, again.outcome) == (Status.DUPLICATE, b"done"), key
    assert verify_store(tmp_path / "s").ok


def test_a_record_the_overlay_holds_in_an_older_generation_is_found(tmp_path: Path) -> None:
    # Generations pass while a completed record is still unapplied: a claim
    # probes from the current generation down, and must find it in the
    # overlay (each probe with a key object of its own: a key rewritten in
    # place keeps its first probe's cached hash, and missed in the overlay).
    now = [1_700_000_000.0]
    with DedupStore.open(
        tmp_path / "s", durability="flush", partitions=1, apply_interval=1, eviction_rate=0, clock=lambda: now[0]
    ) as s:
        s.ensure_namespace("n", horizon="7d", lease="1m")
        r = s.claim("n", "done-early")
        s.complete("n", "done-early", r.token, b"first")
        now[0] += 2 * 3600  # two generations of an hour
        s.stats()  # applies: this one is found in LMDB, the next in the overlay
        r = s.claim("n", "done-late")
        s.complete("n", "done-late", r.token, b"second")
        now[0] += 2 * 3600
        for key, outcome in (("done-early", b"first"), ("done-late", b"second")):
            again = s.claim("n", key)
            assert (again.status, again.outcome) == (Status.DUPLICATE, outcome), key
            rec = s.lookup("n", key)
            assert rec is not None and rec.outcome == outcome, key


def test_calls_go_on_while_an_apply_writes_lmdb_and_see_what_it_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        first = s.claim("n", "early")
        win = s._parts[0].window
        assert win is not None
        inside, go_on = threading.Event(), threading.Event()
        real = window.Window._commit

        def slow(self: window.Window, changes: Any, owner: Any, op: Any = None, helped: bool = False) -> Any:
            inside.set()
            assert go_on.wait(10)
            return real(self, changes, owner, op, helped)

        monkeypatch.setattr(window.Window, "_commit", slow)
        applier = threading.Thread(target=win.apply)
        applier.start()
        assert inside.wait(10)
        # The apply is writing "early": calls neither wait nor miss it.
        assert s.claim("n", "early").status is Status.IN_PROGRESS
        late = s.claim("n", "late")
        assert late.status is Status.NEW
        s.complete("n", "early", first.token, b"done")
        assert s.claim("n", "early").status is Status.DUPLICATE
        go_on.set()
        applier.join()
        monkeypatch.setattr(window.Window, "_commit", real)
        # In LMDB now: "early" as the apply froze it; the later writes are still in the overlay.
        ns = s._namespace("n")
        with s._parts[0].env.begin() as txn:
            assert ns.spaces[0].lookup(txn, b"early", s._now_us())[0] == _native.UNRESOLVED_GEN
            assert ns.spaces[0].lookup(txn, b"late", s._now_us()) is None
        assert s.claim("n", "early").status is Status.DUPLICATE and s.claim("n", "late").status is Status.IN_PROGRESS
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        rec = s.lookup("n", "early")
        assert rec is not None and rec.outcome == b"done" and s.lookup("n", "late") is not None


@pytest.fixture
def applies(monkeypatch: pytest.MonkeyPatch) -> Callable[[], tuple[list[str], threading.Event]]:
    """Spy on every background-style apply: the names of the threads that
    ran them (with " helped" when the calls were to make its puts), and an
    event set after each."""

    def install() -> tuple[list[str], threading.Event]:
        threads: list[str] = []
        applied = threading.Event()
        real = window.Window._behind

        def spy(self: window.Window, op: Any, helped: bool = False) -> Any:
            result = real(self, op, helped)
            if op is None:
                threads.append(threading.current_thread().name + (" helped" if helped else ""))
                applied.set()
            return result

        monkeypatch.setattr(window.Window, "_behind", spy)
        return threads, applied

    return install


@pytest.fixture
def slices(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """py-lmdb's writes (the calls make an apply's only then: LMDB's own
    need no GIL), one key a slice, the flusher never tired of waiting for
    the calls; the names of the threads that made each slice."""
    _native.set_lmdb_direct(False)
    monkeypatch.setattr(window, "SLICE_KEYS", 1)
    monkeypatch.setattr(window, "HELP_WAIT_S", 3600.0)
    made: list[str] = []
    real = window._Job._step

    def spy(self: window._Job) -> None:
        made.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(window._Job, "_step", spy)
    yield made
    _native.set_lmdb_direct(True)


def _posted(win: window.Window) -> window._Job:
    # Make the window due and wait for the flusher's next tick to post its apply.
    win._apply_at = 0.0
    deadline = time.monotonic() + 10
    while (job := win._job) is None:
        assert time.monotonic() < deadline, "the flusher posted no apply"
        time.sleep(0.001)
    return job


def _applied(win: window.Window, before: int) -> None:
    deadline = time.monotonic() + 10
    while win.stats()["applies"] == before or win._job is not None:
        assert time.monotonic() < deadline, "the apply did not commit"
        time.sleep(0.001)


def test_a_flush_mode_apply_is_the_flushers_transaction_whose_puts_the_calls_make(
    tmp_path: Path, slices: list[str], applies: Callable[[], tuple[list[str], threading.Event]]
) -> None:
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        keys = [f"k{i}" for i in range(40)]
        batch = s.claim_many("n", keys)
        win = s._parts[0].window
        assert win is not None
        threads, _ = applies()
        before = win.stats()
        job = _posted(win)
        frozen = len(job.slices)
        assert frozen >= len(keys) and job.next == 0  # nothing written yet: the calls make the slices
        calls = 0
        while not job.done.is_set():
            assert calls < len(keys), "a call made no slice"
            s.complete("n", keys[calls], batch.tokens[calls], b"done")
            calls += 1
        assert calls == frozen and slices == [threading.current_thread().name] * frozen
        _applied(win, before["applies"])
        after = win.stats()
        assert threads == [t for t in threads if t.startswith("dedupstore-flush") and t.endswith(" helped")] != []
        assert after["applies"] == before["applies"] + 1 and after["helped_applies"] == before["helped_applies"] + 1
        assert after["call_slices"] == before["call_slices"] + frozen
        assert after["call_slice_seconds"] > before["call_slice_seconds"]
        committing = after["apply_commit_seconds"] - before["apply_commit_seconds"]
        assert 0 < committing <= after["apply_seconds"] - before["apply_seconds"]  # of the apply's time
        ns = s._namespace("n")
        with s._parts[0].env.begin() as txn:
            for key in keys:
                assert ns.spaces[0].lookup(txn, key.encode(), s._now_us()) is not None, key
        # The completions made during the apply are in the fresh overlay, and they stand.
        assert len(win.overlay or ()) > 0
        assert {s.claim("n", k).status for k in keys[:calls]} == {Status.DUPLICATE}
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert {(r.outcome if (r := s.lookup("n", k)) else None) for k in keys[:calls]} == {b"done"}


def test_a_claim_leaves_the_slices_to_the_next_completion_unless_none_was_made_lately(
    tmp_path: Path, slices: list[str]
) -> None:
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        batch = s.claim_many("n", ["a", "b"])
        win = s._parts[0].window
        assert win is not None
        job = _posted(win)
        s.claim_many("n", ["c", "d"])
        one = s.claim("n", "e")
        assert slices == [] and job.next == 0  # the claims' callers were not held up
        assert s.complete_many("n", [("a", batch.tokens[0], b"A")]) == [None]
        assert slices == [threading.current_thread().name] and job.next == 1
        s.claim("n", "f")
        assert job.next == 1  # a slice was made just now
        job.last -= window.HELP_WAIT_S / 2  # as if made half HELP_WAIT_S ago
        assert s.claim("n", "g").status is Status.NEW
        assert job.next == 2 and one.status is Status.NEW


def test_maintenance_beside_a_flush_mode_window_runs_after_the_slices_the_calls_made(
    tmp_path: Path, slices: list[str]
) -> None:
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        keys = [f"k{i}" for i in range(20)]
        batch = s.claim_many("n", keys)
        win = s._parts[0].window
        assert win is not None
        before = win.stats()
        ran: list[tuple[str, int]] = []

        def op(txn: Any) -> str:
            job = win._job
            ran.append((threading.current_thread().name, len(slices)))
            assert job is None  # withdrawn once every slice was made
            return "evicted"

        def maintain() -> None:
            window.STORE_THREAD.own = True  # as the store's maintenance thread is
            results.append(win.beside(op))

        results: list[Any] = []
        side = threading.Thread(target=maintain, name="maintainer")
        side.start()
        deadline = time.monotonic() + 10
        while (job := win._job) is None:
            assert time.monotonic() < deadline and side.is_alive(), "beside posted no apply"
            time.sleep(0.001)
        calls = 0
        while not job.done.is_set():
            s.complete("n", keys[calls], batch.tokens[calls], b"done")
            calls += 1
        side.join(10)
        assert results == ["evicted"] and ran == [("maintainer", calls)]
        assert slices == [threading.current_thread().name] * calls
        after = win.stats()
        assert after["beside_commits"] == before["beside_commits"] + 1
        assert after["helped_applies"] == before["helped_applies"] + 1 and after["applies"] == before["applies"] + 1
        ns = s._namespace("n")
        with s._parts[0].env.begin() as txn:
            assert all(ns.spaces[0].lookup(txn, k.encode(), s._now_us()) is not None for k in keys)


def test_a_flush_mode_apply_is_finished_by_the_flusher_once_the_calls_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slices: list[str]
) -> None:
    monkeypatch.setattr(window, "HELP_WAIT_S", 0.01)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        s.claim_many("n", ["a", "b", "c"])
        win = s._parts[0].window
        assert win is not None
        before = win.stats()
        job = _posted(win)
        _applied(win, before["applies"])
        assert job.next == len(job.slices) and slices and all(t.startswith("dedupstore-flush") for t in slices)
        after = win.stats()
        assert after["helped_applies"] == before["helped_applies"] and after["call_slices"] == before["call_slices"]
        assert len(win.overlay or ()) == 0


def test_a_slice_that_fails_in_a_call_leaves_the_call_standing_and_the_flusher_applies_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slices: list[str],
    applies: Callable[[], tuple[list[str], threading.Event]],
) -> None:
    class Failing:
        # The flusher's transaction, whose first cursor fails (a put that failed).
        def __init__(self, txn: Any) -> None:
            self.txn, self.failed = txn, False

        def cursor(self, db: Any) -> Any:
            if not self.failed:
                self.failed = True
                raise lmdb.DiskError("disk went away")
            return self.txn.cursor(db=db)

        def delete(self, key: bytes, db: Any) -> bool:
            return bool(self.txn.delete(key, db=db))

    real_init = window._Job.__init__

    def failing(self: window._Job, txn: Any, dbs: Any, changes: Any) -> None:
        real_init(self, Failing(txn), dbs, changes)

    monkeypatch.setattr(window._Job, "__init__", failing)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        batch = s.claim_many("n", ["a", "b"])
        win = s._parts[0].window
        assert win is not None
        threads, _ = applies()
        before = win.stats()
        job = _posted(win)
        assert s.complete("n", "a", batch.tokens[0], b"A").outcome == b"A"  # its slice failed: the call stands
        assert job.done.is_set() and isinstance(job.error, lmdb.DiskError)
        _applied(win, before["applies"])
        after = win.stats()
        assert after["applies"] == before["applies"] + 1 and after["helped_applies"] == before["helped_applies"]
        ns = s._namespace("n")
        with s._parts[0].env.begin() as txn:  # the flusher's own transaction wrote every key
            for key in (b"a", b"b"):
                assert ns.spaces[0].lookup(txn, key, s._now_us()) is not None, key
        assert s.complete("n", "b", batch.tokens[1], b"B").outcome == b"B"
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert [(r.outcome if (r := s.lookup("n", k)) else None) for k in "ab"] == [b"A", b"B"]


@pytest.mark.parametrize("durability", ["flush", "sync"])
def test_a_due_window_is_applied_by_the_flusher_with_the_calls_making_the_puts_in_flush_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str,
    applies: Callable[[], tuple[list[str], threading.Event]],
) -> None:
    threads, applied = applies()
    with DedupStore.open(tmp_path / "s", durability=durability, partitions=1, apply_interval=0.05) as s:
        s.ensure_namespace("n")
        s.claim("n", "a")
        win = s._parts[0].window
        assert win is not None
        for key in ("b", "c"):
            s.claim("n", key)
            monkeypatch.setattr(win, "_apply_at", 0.0)  # due now
        assert applied.wait(10)
        assert threads and all(name.startswith("dedupstore-flush") for name in threads), threads
        # Sync-mode calls wait for their fdatasync without the GIL, which is when the flusher's puts run.
        assert all(name.endswith(" helped") == (durability == "flush") for name in threads), threads
        # A caller's own apply (here, before a scan) makes its puts itself: it may be the thread that makes the calls.
        del threads[:]
        s.claim("n", "d")
        win.apply()
        assert threads == [threading.current_thread().name] and len(win.overlay or ()) == 0


def test_a_tick_gives_the_window_up_to_another_writer_without_waiting_for_the_apply(tmp_path: Path) -> None:
    # The flusher ticks every CHECK_S: a window not yet due is left alone,
    # unless another process wants the partition; then it goes at once.
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        s.claim("n", "a")
        win = s._parts[0].window
        assert win is not None and win.active
        applies = win.stats()["applies"]
        win.tick()
        assert win.active and len(win.overlay or ()) > 0 and win.stats()["applies"] == applies
        win._others = lambda: True  # type: ignore[method-assign]
        win.tick()
        assert not win.active and win.stats()["applies"] == applies + 1
        ns = s._namespace("n")
        with s._parts[0].env.begin() as txn:
            assert ns.spaces[0].lookup(txn, b"a", s._now_us()) is not None


def test_a_tick_applies_a_window_that_holds_many_keys_before_it_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At a high rate an overlay would reach MAX_PENDING before the apply
    # interval is up, and the call that reached it would apply it: the
    # flusher's tick applies it at APPLY_EARLY_KEYS instead.
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        for key in "abc":
            s.claim("n", key)
        win = s._parts[0].window
        assert win is not None and win.active
        held = len(win.overlay or ())
        monkeypatch.setattr(window, "APPLY_EARLY_KEYS", held + 1)
        applies = win.stats()["applies"]
        win.tick()
        assert win.stats()["applies"] == applies and len(win.overlay or ()) == held  # not due, not full
        s.claim("n", "d")
        win.tick()  # (or the flusher's own tick, first)
        assert win.stats()["applies"] == applies + 1 and len(win.overlay or ()) == 0
        assert win.active and win._apply_at > time.monotonic() + 0.5  # the interval starts again


@pytest.mark.parametrize("max_pending", [1500, 100])
def test_the_call_that_fills_an_overlay_applies_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_pending: int
) -> None:
    # With the flusher's ticks (the interval's applies, and the early one
    # at APPLY_EARLY_KEYS) out of the way, the call whose writes bring the
    # overlay to MAX_PENDING keys applies it. The check waits for
    # FULL_CHECK_WRITES writes, so a MAX_PENDING below that (100) takes
    # effect there.
    monkeypatch.setattr(window, "MAX_PENDING", max_pending)
    monkeypatch.setattr(window.Window, "tick", lambda self: None)
    full = max(max_pending, _native.FULL_CHECK_WRITES)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, eviction_rate=0) as s:
        s.ensure_namespace("n")
        s.claim("n", "k0")  # opens the window
        win = s._parts[0].window
        assert win is not None and win.active
        applies = win.stats()["applies"]
        for i in range(1, full - 1):
            assert s.claim("n", f"k{i}").status is Status.NEW
        assert len(win.overlay or ()) == full - 1 and win.stats()["applies"] == applies
        assert s.claim("n", f"k{full - 1}").status is Status.NEW  # the write that fills it
        assert len(win.overlay or ()) == 0 and win.stats()["applies"] == applies + 1
        assert s.claim("n", "k0").status is Status.IN_PROGRESS


def test_a_failed_apply_keeps_every_write_for_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        a = s.claim("n", "a")
        s.claim("n", "gone")
        win = s._parts[0].window
        assert win is not None
        real = window.Window._commit

        def fails(self: window.Window, changes: Any, owner: Any, op: Any = None, helped: bool = False) -> None:
            # Calls made while the apply runs, then the apply fails.
            assert s.claim("n", "b").status is Status.NEW
            s.complete("n", "a", a.token, b"done")
            raise OSError("disk went away")

        monkeypatch.setattr(window.Window, "_commit", fails)
        with pytest.raises(OSError, match="disk went away"):
            win.apply()
        monkeypatch.setattr(window.Window, "_commit", real)
        assert s.claim("n", "a").status is Status.DUPLICATE
        assert s.claim("n", "b").status is Status.IN_PROGRESS and s.claim("n", "gone").status is Status.IN_PROGRESS
        win.apply()
        assert len(win.overlay or ()) == 0
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert s.claim("n", "a").status is Status.DUPLICATE
        assert s.claim("n", "b").status is Status.IN_PROGRESS and s.claim("n", "gone").status is Status.IN_PROGRESS


def test_apply_interval_zero_has_no_window(tmp_path: Path) -> None:
    for kw in ({"durability": "sync", "apply_interval": 0}, {"durability": "flush", "apply_interval": 0}):
        with DedupStore.open(tmp_path / str(len(kw)), **kw) as s:  # type: ignore[arg-type]
            s.ensure_namespace("n")
            s.claim("n", "k")
            assert all(p["write_behind"] is None for p in s.stats()["partition_stats"])


@pytest.mark.parametrize("bad", [-1, "0.1ms", 2, "2s", "soon", True])
def test_apply_interval_out_of_range_is_refused_naming_the_limit(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidDurationError, match="apply_interval"):
        DedupStore.open(tmp_path / "s", durability="flush", apply_interval=bad)  # type: ignore[arg-type]


def test_apply_interval_edges_pass(tmp_path: Path) -> None:
    for i, ok in enumerate(("0.5ms", 1.0)):
        DedupStore.open(tmp_path / str(i), durability="flush", apply_interval=ok).close()


@pytest.mark.parametrize("mapped", [True, False], ids=["recycled", "pwritten"])
def test_segments_rotate_and_the_old_ones_are_recycled_or_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mapped: bool
) -> None:
    # A segment rotated out is zeroed and written again after the next one
    # (two files in turn); one whose records were pwritten (no mapping) is
    # deleted instead.
    monkeypatch.setattr(window, "SEGMENT_BYTES", 4096)
    if not mapped:
        monkeypatch.setattr(window, "MAP_BYTES", 0)
    path = tmp_path / "s"
    with DedupStore.open(path, durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        names = set()
        win = s._parts[0].window
        assert win is not None
        # Never due: on a slow machine the flusher's own apply, a second
        # after the open, could rotate between a flush() and the tick.
        win._apply_at = float("inf")
        for i in range(400):
            s.claim("n", f"k{i}")
            if i % 50 == 49:
                s.flush()  # applies: past 4 KiB the segment is replaced
                names.update(_segments(path))
                # The old one waits for the flusher's next tick (the call
                # that rotated did not pay for it); after it, the segment W
                # names is left, and a zeroed spare if recycled.
                assert len(_segments(path)) <= 2
                win.tick()
                segments = _segments(path)
                named = win.name
                assert named in segments and len(segments) == (2 if mapped else 1)
                for spare in set(segments) - {named}:
                    data = (path / window.WLOG_DIR / spare).read_bytes()
                    assert len(data) >= 4096 and data.count(0) == len(data)
        assert win.stats()["recycled_segments"] == (8 if mapped else 0)
        assert len(names) == (2 if mapped else 9)  # eight rotations
    assert _segments(path) == []  # closing deleted the spare too
    with DedupStore.open(path, durability="flush") as s:
        assert all(s.claim("n", f"k{i}").status is Status.IN_PROGRESS for i in range(400))


def test_an_applied_overlay_is_not_kept_alive_by_a_spaces_caches(tmp_path: Path) -> None:
    # A Space remembers which overlay it read its generation state and
    # frontier through by the overlay's serial, not by a reference: else the
    # call that next replaced the reference freed an applied overlay's
    # entries, where the thread that applied it does.
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        win = s._parts[0].window
        assert win is not None
        win._apply_at = float("inf")
        assert all(s.claim("n", f"k{i}").status is Status.NEW for i in range(100))
        frozen = win.overlay
        win.apply()
        assert win.overlay is not frozen and win.overlay.serial > frozen.serial > 0
        assert not [r for r in gc.get_referrers(frozen) if isinstance(r, _native.Space)]
        # The caches go on answering through the overlay that took over.
        assert all(s.claim("n", f"k{i}").status is Status.IN_PROGRESS for i in range(100))
        assert s.claim("n", "k100").status is Status.NEW


def _fail_log_writes(win: Any) -> None:
    # The segment's descriptor now writes to /dev/full: every write fails with ENOSPC.
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, win._log.fd)
    os.close(full)


def test_a_failed_log_write_is_not_acknowledged_and_the_call_goes_the_ordinary_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records pwritten (as past a segment's mapping, or where the disk had no
    # space to reserve for it: csrc/tests/test_log.c checks that a refused
    # reservation turns into a failed write, not a SIGBUS).
    monkeypatch.setattr(window, "MAP_BYTES", 0)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        assert s.claim("n", "before").status is Status.NEW
        win = s._parts[0].window
        assert win is not None and win.active and win._log is not None
        _fail_log_writes(win)
        r = s.claim("n", "during")
        assert r.status is Status.NEW and not win.active  # committed directly instead
        assert s.claim("n", "during").status is Status.IN_PROGRESS
        assert s.claim("n", "before").status is Status.IN_PROGRESS
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert s.lookup("n", "during") is not None and s.lookup("n", "before") is not None


def test_a_failed_log_write_in_a_batch_call_goes_the_ordinary_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, through claim_many, complete_many and release_many, whose
    # windowed path is _native.write_windows.
    monkeypatch.setattr(window, "MAP_BYTES", 0)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        done = s.claim_many("n", ["a", "b"])
        win = s._parts[0].window
        assert win is not None and win.active and win._log is not None
        _fail_log_writes(win)
        got = s.claim_many("n", ["c", "d"])
        assert got.statuses == [Status.NEW, Status.NEW] and not win.active  # committed directly instead
        assert s.claim_many("n", ["c", "d"]).statuses == [Status.IN_PROGRESS] * 2
        assert s.complete_many("n", [("a", done.tokens[0], b"A"), ("c", got.tokens[0], b"C")]) == [None, None]
        assert s.release_many("n", [("b", done.tokens[1])]) == [None]
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert [r.status for r in s.claim_many("n", ["a", "b", "c", "d"])] == [
            Status.DUPLICATE, Status.NEW, Status.DUPLICATE, Status.IN_PROGRESS
        ]
        assert s.lookup("n", "a").outcome == b"A"  # type: ignore[union-attr]


def test_a_batch_of_one_in_a_window_that_cannot_take_it_goes_the_ordinary_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # claim_many of one key in flush mode takes claim()'s path (StoreCore's
    # _claim_key); when the window's log write fails, nothing of it stays
    # in the overlay and it is committed directly, as claim()'s would be.
    monkeypatch.setattr(window, "MAP_BYTES", 0)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        first = s.claim_many("n", ["a"], [b"i"], event_times=[time.time()], claimant="c1")
        win = s._parts[0].window
        assert win is not None and win.active and win._log is not None
        assert first.statuses == [Status.NEW] and first[0].record is not None
        assert first[0].record.claimant == b"c1" and first[0].record.event_time is not None
        assert s.claim_many("n", ["a"], [b"i"]).statuses == [Status.IN_PROGRESS]
        assert s.claim_many("n", ["a"], [b"other"]).statuses == [Status.CONFLICT]
        _fail_log_writes(win)
        got = s.claim_many("n", ["b"])
        assert got.statuses == [Status.NEW] and not win.active  # committed directly instead
        assert s.claim_many("n", ["b"]).statuses == [Status.IN_PROGRESS]
        assert s.stats()["verdicts"] == {**dict.fromkeys(s.stats()["verdicts"], 0), "NEW": 2, "IN_PROGRESS": 2,
                                          "CONFLICT": 1}
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert [r.status for r in s.claim_many("n", ["a", "b"])] == [Status.IN_PROGRESS] * 2


def test_completions_and_releases_of_one_item_answer_as_a_batch_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # complete_many and release_many of one item in flush mode take
    # complete()'s and release()'s path (StoreCore._leased_many); their
    # answers, lease errors and refusals are the batch's, and a failed log
    # write sends them the ordinary way.
    monkeypatch.setattr(window, "MAP_BYTES", 0)
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=1, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        got = s.claim_many("n", ["a", "b", "c", "d"])
        win = s._parts[0].window
        assert win is not None and win.active
        a, b, c, d = got.tokens
        assert s.complete_many("n", [("a", a, b"A")]) == [None]
        assert s.complete_many("n", [["a", a, "A"]]) == [None]  # the same completion again: a no-op
        (differs,) = s.complete_many("n", [("a", a, b"other")])
        (stale,) = s.complete_many("n", [("b", b + 1, b"B")])
        (lost,) = s.release_many("n", [("b", b + 1)])
        # The same items in batches of two: the same errors.
        pair = s.complete_many("n", [("a", a, b"other"), ("b", b + 1, b"B")])
        assert [type(e) for e in (differs, stale, lost)] == [type(e) for e in (*pair, pair[1])]
        assert all(isinstance(e, LeaseLostError) for e in (differs, stale, lost))
        assert str(differs) == str(pair[0]) and str(stale) == str(pair[1])
        for bad, where in (([("b", b)], "complete_many"), ([("b", b, b"B")], "release_many")):
            with pytest.raises(InvalidInputError, match="item 0 has"):
                getattr(s, where)("n", bad)
        assert s.release_many("n", [("b", b)]) == [None]
        assert s.claim("n", "b").status is Status.NEW  # released
        _fail_log_writes(win)
        assert s.complete_many("n", [("c", c, b"C")]) == [None] and not win.active  # committed directly
        assert s.release_many("n", [("d", d)]) == [None]
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert s.lookup("n", "a").outcome == b"A" and s.lookup("n", "c").outcome == b"C"  # type: ignore[union-attr]
        assert s.lookup("n", "d") is None and s.claim("n", "b").status is Status.IN_PROGRESS


@pytest.mark.parametrize("size", [2, 5])
def test_a_windowed_batch_checks_every_input_first_and_reports_each_item(tmp_path: Path, size: int) -> None:
    # Flush mode, two partitions: every input is checked before anything is
    # written, a key repeated in one batch sees its first claim, and a stale
    # token is reported while the other items apply.
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=2, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        keys = [f"k{i}" for i in range(size)]
        with pytest.raises(InvalidIntentError):
            s.claim_many("n", keys, [b"i"] * (size - 1) + [object()])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError):
            s.claim_many("n", keys, event_times=[time.time()] * (size - 1) + ["soon"])
        assert all(s.lookup("n", k) is None for k in keys)  # nothing written
        got = s.claim_many("n", [*keys[:-1], keys[0]], [b"i"] * size, event_times=[time.time()] * size)
        assert got.statuses == [Status.NEW] * (size - 1) + [Status.IN_PROGRESS]
        items = [(k, tok, b"done") for k, tok in zip(keys[:-1], got.tokens, strict=False)]
        items[0] = (keys[0], items[0][1] + 1, b"done")  # stale
        results = s.complete_many("n", items)
        assert isinstance(results[0], LeaseLostError) and results[1:] == [None] * (size - 2)
        assert s.release_many("n", [(keys[0], got.tokens[0])]) == [None]
        again = s.claim_many("n", keys, [b"i"] * size)
        assert again.statuses == [Status.NEW] + [Status.DUPLICATE] * (size - 2) + [Status.NEW]
    with DedupStore.open(tmp_path / "s", durability="flush") as s:
        assert [s.lookup("n", k).state for k in keys] == (  # type: ignore[union-attr]
            [RecordState.PENDING] + [RecordState.COMPLETED] * (size - 2) + [RecordState.PENDING]
        )


def test_a_batch_call_writes_every_partition_when_one_fails(tmp_path: Path) -> None:
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=2, apply_interval=1.0) as s:
        s.ensure_namespace("n")
        keys = [f"k{i}" for i in range(20)]
        s.claim_many("n", ["w"])  # a window open in the partition of "w"
        ns = s._live_namespace("n")  # noqa: SLF001
        parts = [s._hasher.route(ns.prefix, k.encode(), 2) for k in keys]  # noqa: SLF001
        assert set(parts) == {0, 1}
        # The failing partition first: the batch goes on past it.
        order = sorted(range(len(keys)), key=lambda i: parts[i])
        keys, parts = [keys[i] for i in order], [parts[i] for i in order]
        broken = s._parts[0].window  # noqa: SLF001
        assert broken is not None
        broken.failed = StoreFullError("partition 0 is full (test)")
        try:
            with pytest.raises(StoreFullError, match="partition 0 is full"):
                s.claim_many("n", keys)
        finally:
            broken.failed = None
        # Partition 1's keys were claimed, partition 0's not.
        statuses = s.claim_many("n", keys).statuses
        assert statuses == [Status.NEW if p == 0 else Status.IN_PROGRESS for p in parts]


def test_an_orphan_segment_is_collected_at_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    DedupStore.open(path, durability="flush").close()
    (path / window.WLOG_DIR).mkdir(exist_ok=True)
    orphan = path / window.WLOG_DIR / "p000.00.1.dead.1"
    orphan.write_bytes(b"junk")
    DedupStore.open(path, durability="flush").close()
    assert not orphan.exists()


# ------------------------------------------------------------ processes


@pytest.mark.parametrize("map_bytes", [None, 8192], ids=["mapped", "past-the-mapping"])
def test_a_killed_owner_loses_nothing_it_returned(tmp_path: Path, map_bytes: int | None) -> None:
    # Every record copied into the segment's mapping; or (8 KiB mapped) the
    # first ones, and the rest pwritten after them.
    path = tmp_path / "s"
    child = Child(path, apply_interval=1.0, map_bytes=map_bytes)  # nothing applied between its calls and the kill
    try:
        figures = child.ask("claim a 200")
        assert figures[0]["open"] and figures[0]["logged_bytes"] > 0
        mapped = sum(p["mapped_records"] for p in child.ask("claim b 50"))
        if map_bytes is None:
            assert mapped == 250 + 125  # every claim and complete
        else:
            assert 0 < mapped < 250 + 125
    finally:
        child.kill()
    assert _raw_w(path) is not None  # it died with its window open
    with DedupStore.open(path, durability="flush") as s:
        _expect(s, "a", 200)
        _expect(s, "b", 50)
        assert s.claim("n", "a1").status is Status.IN_PROGRESS  # not NEW a second time
        assert s.claim("n", "a0", {"v": 1}).status is Status.DUPLICATE
    assert _raw_w(path) is None and _segments(path) == []
    assert verify_store(path).ok


def test_a_killed_owner_of_recycled_segments_loses_nothing_and_replays_no_stale_record(tmp_path: Path) -> None:
    # The window's two segments are written in turn, each zeroed before it
    # is written again; the last lap writes fewer records, of the same sizes
    # in the same order (one partition: claim, complete, claim, claim, ...),
    # than the one before it in the same segment. Had that segment kept its
    # old records, they would follow the new ones intact, and the replay
    # would go on into them.
    path = tmp_path / "s"
    child = Child(path, partitions=1)
    try:
        figures = child.ask("laps a 20 4")
        assert figures[0]["recycled_segments"] == 4
        child.ask("claim b0- 10")
    finally:
        child.kill()
    owner = window.Owner.unpack(_raw_w(path) or b"")
    data = (path / window.WLOG_DIR / owner.name).read_bytes()
    assert owner.offset == 0 and len(data) > 4096  # from its start; its size: space reserved in an earlier lap
    assert len(list(decode(data))) == 10 + 5  # the claims of b0-*, the completions of the even ones
    with DedupStore.open(path, durability="flush") as s:
        for lap in range(4):
            _expect(s, f"a{lap}-", 20)
        _expect(s, "b0-", 10)
        assert s.lookup("n", "b0-10") is None
    assert _raw_w(path) is None and _segments(path) == []
    assert verify_store(path).ok


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_killed_owner_loses_nothing_it_returned_while_a_rotation_commits(tmp_path: Path, when: str) -> None:
    # Every window's apply rotates its segment and stops for good before (W
    # names the old segment) or after (the new one) its commit; the calls
    # that come meanwhile are logged to both, so either W finds them.
    path = tmp_path / "s"
    child = Child(path)
    try:
        child.ask("claim a 200")
        held = child.ask(f"hold {when}")
        assert any(w["rotating"] for w in held if w is not None)
        after = child.ask("claim b 50")  # "stuck" (ask fails) if the rotation held the calls up
        assert all(w["rotating"] for w, h in zip(after, held, strict=True) if h is not None and h["rotating"])
    finally:
        child.kill()
    with DedupStore.open(path, durability="flush") as s:
        _expect(s, "a", 200)
        _expect(s, "b", 50)
        assert s.claim("n", "b1").status is Status.IN_PROGRESS
    assert _raw_w(path) is None and _segments(path) == []
    assert verify_store(path).ok


def test_a_killed_sync_owner_loses_nothing_it_returned_and_its_journal_replays_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sync mode: the calls are journaled as write-behind records labelled with
    # the transaction that will apply them. The next open takes the dead
    # owner's window over and replays them from its journal segments, and
    # after an OS crash the journal's replay puts them in the same place.
    import shutil
    import uuid

    from dedupstore import checkpoint

    path = tmp_path / "s"
    child = Child(path, apply_interval=1.0, durability="sync")
    try:
        assert child.ask("claim a 200")[0]["open"]
        child.ask("claim b 50")
    finally:
        child.kill()
    raw = _raw_w(path)
    assert raw is not None and window.Owner.unpack(raw).journaled
    shutil.copytree(path, tmp_path / "image", ignore=shutil.ignore_patterns("lock.mdb"))
    with DedupStore.open(path, durability="sync") as s:
        _expect(s, "a", 200)
        _expect(s, "b", 50)
        assert s.claim("n", "a1").status is Status.IN_PROGRESS  # not NEW a second time
        assert s.claim("n", "c0").status is Status.NEW
    assert _raw_w(path) is None
    assert verify_store(path).ok
    # The files as the kill left them, opened after a restart: the partition
    # is rolled back to its checkpoint and the journal replayed.
    monkeypatch.setattr(checkpoint, "boot_id", lambda: uuid.uuid4().bytes)
    with DedupStore.open(tmp_path / "image", durability="sync") as again:
        assert sum(p.replayed for p in again._parts) > 0  # noqa: SLF001
        _expect(again, "a", 200)
        _expect(again, "b", 50)
    assert verify_store(tmp_path / "image").ok


def test_a_dead_owners_writes_are_seen_by_a_process_that_only_reads(tmp_path: Path) -> None:
    path = tmp_path / "s"
    child = Child(path, apply_interval=1.0)
    try:
        child.ask("claim a 100")
        with DedupStore.open(path, durability="sync") as s:  # opened while the owner lives
            child.kill()
            _expect(s, "a", 100)  # the read took the dead window over first
    finally:
        child.kill()


def test_another_process_sees_a_live_owners_writes_and_takes_turns_with_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    child = Child(path, apply_interval=1.0)  # it gives the window up at its next tick, not its next apply
    try:
        child.ask("claim a 100")
        with DedupStore.open(path, durability="flush") as s:
            # Its writes are still in its window; our lookup waits for it to give it up.
            _expect(s, "a", 100)
            assert s.claim("n", "a1").status is Status.IN_PROGRESS
            assert s.claim("n", "mine").status is Status.NEW
            figures = child.ask("claim b 20")  # it writes directly now, beside us
            assert not figures[0]["open"]
            _expect(s, "b", 20)
            assert all(p["write_behind"]["open"] is False for p in s.stats()["partition_stats"])
        time.sleep(2 * window.REOPEN_S)  # alone again: its next write reopens the window
        figures = child.ask("claim c 20")
        assert figures[0]["open"] and figures[0]["opened"] >= 2
    finally:
        child.stop()
    with DedupStore.open(path, durability="flush") as s:
        for prefix, n in (("a", 100), ("b", 20), ("c", 20)):
            _expect(s, prefix, n)
        assert s.lookup("n", "mine") is not None


def test_a_missing_log_that_w_names_is_refused_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s"
    child = Child(path, apply_interval=1.0)
    try:
        child.ask("claim a 10")
    finally:
        child.kill()
    for seg in (path / window.WLOG_DIR).iterdir():
        seg.unlink()
    with pytest.raises(StoreFormatError, match="is missing, but its partition's write-behind entry names it"):
        DedupStore.open(path, durability="flush")
    report = verify_store(path)
    assert "write-behind" in report.problem_kinds


def test_the_window_lock_excludes_and_a_blocked_acquire_releases_the_gil() -> None:
    lock = _native.WindowLock()
    assert lock.acquire() and lock.locked()
    assert lock.acquire(blocking=False) is False  # held: not taken twice
    got: list[float] = []

    def waiter() -> None:
        with lock:  # blocks until the main thread releases it
            got.append(time.monotonic())

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)  # the waiter is blocked in acquire; this thread still runs
    assert got == [] and t.is_alive()
    released = time.monotonic()
    lock.release()
    t.join(5)
    assert got and got[0] >= released and not lock.locked()
    with pytest.raises(RuntimeError, match="unlocked"):
        lock.release()
