"""An apply's writes and eviction's deletes by LMDB's own calls
(csrc/ds_lmdb.c, dedupstore/_lmdb.pxi): the same effect as py-lmdb's calls,
and py-lmdb's way whenever the direct one cannot be used."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from dedupstore import DedupStore, Status, _native


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Any, dict[int, Any]]]:
    e = lmdb.open(str(tmp_path / "env"), max_dbs=4, map_size=1 << 24)
    yield e, {1: e.open_db(b"one"), 2: e.open_db(b"two")}
    e.close()


def _contents(e: Any, dbs: dict[int, Any]) -> dict[int, list[tuple[bytes, bytes]]]:
    with e.begin() as txn:
        return {code: list(txn.cursor(db=db)) for code, db in dbs.items()}


def test_the_direct_way_is_found_with_py_lmdb_3() -> None:
    # The package's pinned py-lmdb is 3.x: if this fails, every apply has
    # silently gone back to py-lmdb's calls (lmdb_direct says why).
    assert lmdb.__version__.startswith("3.")
    assert _native.lmdb_direct() == (True, "")


def _both_ways(tmp_path: Path, fill: Any, writes: Any, map_size: int = 1 << 26) -> dict[str, Any]:
    # Two environments, each filled by ``fill(txn, dbs)``, then given the
    # writes ``writes()`` makes (puts, then deletes, as lmdb_write takes
    # them; the same both times): by lmdb_write in one, by py-lmdb's own
    # deletes and puts in the other. Their contents, by way.
    ways = {}
    for way in ("direct", "py-lmdb"):
        e = lmdb.open(str(tmp_path / way), max_dbs=4, map_size=map_size)
        dbs = {1: e.open_db(b"one"), 2: e.open_db(b"two")}
        with e.begin(write=True) as txn:
            fill(txn, dbs)
        puts, deletes = writes()
        txn = e.begin(write=True)
        if way == "direct":
            assert _native.lmdb_write(txn, dbs, puts, deletes)
        else:
            for code, key in deletes:
                txn.delete(key, db=dbs[code])
            for code, items in puts:
                for key, value in items:
                    txn.put(key, value, db=dbs[code])
        txn.commit()
        ways[way] = _contents(e, dbs)
        e.close()
    return ways


def test_writes_are_the_same_as_py_lmdbs(tmp_path: Path) -> None:
    def fill(txn: Any, dbs: dict[int, Any]) -> None:
        for i in range(0, 3000, 3):
            txn.put(b"k%05d" % i, b"old", db=dbs[1 + i % 2])

    def writes() -> tuple[list[Any], list[Any]]:
        r = random.Random(7)
        puts = [(code, sorted({b"k%05d" % r.randrange(3000): b"v" * r.randrange(1, 600) for _ in range(800)}.items()))
                for code in (1, 2)]
        deletes = [(1 + j % 2, b"k%05d" % j) for j in range(0, 3000, 7)]  # some absent: no error
        return puts, [(c, k) for c, k in deletes if all(k not in dict(items) for _, items in puts)]

    ways = _both_ways(tmp_path, fill, writes)
    assert ways["direct"] == ways["py-lmdb"]
    assert sum(len(v) for v in ways["direct"].values()) > 1000


def test_dense_deletes_and_puts_in_key_order_are_py_lmdbs(tmp_path: Path) -> None:
    # The direct way writes each database's keys in order through one
    # cursor, which looks on its current leaf before searching from the
    # root: deletes of most of a deep tree (leaves emptied and merged under
    # the cursor), absent keys among them, then puts into the gaps and past
    # the end, must leave what py-lmdb's own deletes and puts leave.
    def fill(txn: Any, dbs: dict[int, Any]) -> None:
        for i in range(8000):
            txn.put(b"k%05d" % i, b"v" * 400, db=dbs[1 + i % 2])
        assert all(txn.stat(db)["depth"] >= 3 for db in dbs.values())

    def writes() -> tuple[list[Any], list[Any]]:
        r = random.Random(11)
        deletes = sorted((1 + i % 2, b"k%05d" % i) for i in range(8200) if r.random() < 0.85)
        puts = [(code, sorted({b"k%05d" % r.randrange(9000) + b"p": b"w" * r.randrange(1, 900)
                               for _ in range(1500)}.items())) for code in (1, 2)]
        return puts, deletes

    ways = _both_ways(tmp_path, fill, writes, map_size=1 << 27)
    assert ways["direct"] == ways["py-lmdb"]
    assert 2000 < sum(len(v) for v in ways["direct"].values()) < 8000


@pytest.mark.parametrize("budget", [0, 1, 3, 4, 5, 8, 499, 500, 2999, 3000, 3001, 10_000])
def test_a_prefix_is_deleted_from_its_first_key_up_to_the_budget(tmp_path: Path, budget: int) -> None:
    # An eviction step's deletes (two passes: most keys first, then the
    # ones kept) take exactly the first ``budget`` keys with the prefix, in
    # a tree deep enough to merge and rebalance, and nothing around them.
    e = lmdb.open(str(tmp_path / "env"), max_dbs=4, map_size=1 << 27)
    db = e.open_db(b"records")
    r = random.Random(3)
    prefix = b"\x00\x01\x00\x00\x00\x05"
    mine = sorted(prefix + b"%016x" % r.getrandbits(64) for _ in range(3000))
    neighbours = (prefix[:-1] + b"\x04", prefix[:-1] + b"\x06")  # the generations before and after
    around = [p + b"%016x" % r.getrandbits(64) for p in neighbours for _ in range(500)]
    with e.begin(write=True) as txn:
        for k in mine + around:
            txn.put(k, b"v" * 300, db=db)
        assert txn.stat(db)["depth"] >= 3
    with e.begin(write=True) as txn:
        assert _native.lmdb_delete_prefix(txn, db, prefix, budget) == (min(budget, 3000), budget < 3000)
        left = [k for k, _ in txn.cursor(db=db)]
        txn.abort()
    assert left == sorted(mine[budget:] + around)
    e.close()


def test_a_cursor_of_the_transaction_sees_the_direct_writes(env: tuple[Any, dict[int, Any]]) -> None:
    e, dbs = env
    with e.begin(write=True) as txn:
        cur = txn.cursor(db=dbs[1])
        txn.put(b"a", b"1", db=dbs[1])
        assert cur.first() and cur.key() == b"a"
        assert _native.lmdb_write(txn, dbs, [(1, [(b"a", b"2"), (b"b", b"3")])], [])
        assert cur.value() == b"2"  # re-read: py-lmdb counts the writes it did not make
        assert cur.next() and cur.item() == (b"b", b"3")


@pytest.mark.parametrize("case", ["read-only", "not bytes", "another environment", "turned off"])
def test_what_the_direct_way_does_not_take_is_left_untouched(
    env: tuple[Any, dict[int, Any]], tmp_path: Path, case: str
) -> None:
    e, dbs = env
    puts: list[Any] = [(1, [(b"a", b"1"), (b"b", b"2")])]
    if case == "read-only":
        with e.begin() as txn:
            assert _native.lmdb_write(txn, dbs, puts, []) is False
        return
    other = lmdb.open(str(tmp_path / "other"), max_dbs=2)
    try:
        if case == "not bytes":
            puts = [(1, [(b"a", b"1"), (b"b", bytearray(b"2"))])]
        elif case == "another environment":
            puts.append((2, [(b"c", b"3")]))
            dbs = {**dbs, 2: other.open_db(b"two")}
        else:
            _native.set_lmdb_direct(False)
            assert _native.lmdb_direct() == (False, "turned off by set_lmdb_direct(False)")
        with e.begin(write=True) as txn:
            assert _native.lmdb_write(txn, dbs, puts, []) is False
            assert txn.get(b"a", db=dbs[1]) is None  # checked before anything was written
    finally:
        _native.set_lmdb_direct(True)
        other.close()
    assert _native.lmdb_direct()[0]


def test_a_full_map_raises_py_lmdbs_error_and_loses_nothing_committed(tmp_path: Path) -> None:
    e = lmdb.open(str(tmp_path / "small"), max_dbs=2, map_size=1 << 20)
    db = e.open_db(b"one")
    with e.begin(write=True) as txn:
        txn.put(b"kept", b"x", db=db)
    txn = e.begin(write=True)
    big = [(b"k%06d" % i, b"v" * 900) for i in range(5000)]  # 4.5 MB into a 1 MiB map
    with pytest.raises(lmdb.MapFullError, match="mdb_put: MDB_MAP_FULL"):
        _native.lmdb_write(txn, {1: db}, [(1, big)], [])
    txn.abort()
    with e.begin() as txn:
        assert list(txn.cursor(db=db)) == [(b"kept", b"x")]
    e.close()


def test_a_flush_mode_store_applies_with_no_slices_made_by_the_calls(tmp_path: Path) -> None:
    # LMDB's own calls need no GIL, so the flusher makes the whole apply
    # while the calls go on (py-lmdb's way has the calls make slices:
    # test_window.py's tests of _Job).
    with DedupStore.open(tmp_path / "s", durability="flush", apply_interval="5ms", partitions=1) as s:
        s.ensure_namespace("n")
        for i in range(3000):
            r = s.claim("n", f"k{i}", {"i": i})
            s.complete("n", r.key, r.token, b"ok")
            if i % 300 == 0:
                time.sleep(0.05)  # the flusher's applies, beside the calls
        s.flush()
        win = s.stats()["partition_stats"][0]["write_behind"]
        assert win["applies"] > 1 and win["applied_keys"] >= 3000
        assert win["helped_applies"] == win["call_slices"] == 0
        assert s.claim("n", "k2999", {"i": 2999}).outcome == b"ok"


def test_claims_read_applied_records_the_same_either_way(tmp_path: Path, lmdb_way: str) -> None:
    # Once applied, a window's records are read from its LMDB snapshot
    # (by mdb_get directly, or py-lmdb's get): every verdict the same.
    with DedupStore.open(tmp_path / "s", durability="flush", partitions=2) as s:
        s.ensure_namespace("n")
        for i in range(500):
            r = s.claim("n", f"k{i}", {"i": i})
            if i % 5:
                s.complete("n", r.key, r.token, b"out%d" % i)
        s.flush()
        for i in range(500):
            again = s.claim("n", f"k{i}", {"i": i})
            if i % 5:
                assert again.status is Status.DUPLICATE and again.outcome == b"out%d" % i
            else:
                assert again.status is Status.IN_PROGRESS
        assert s.claim("n", "k1", {"i": -1}).status is Status.CONFLICT
        assert s.claim("n", "never", {"i": 0}).status is Status.NEW


def _overlay_with_writes(e: Any, dbs: dict[int, Any], seed: int) -> Any:
    # An overlay over ``e`` (whose databases hold some keys) with puts
    # (new and overwriting) and deletes (of present keys, and of keys put
    # in the overlay first) in all three of its databases.
    with e.begin(write=True) as txn:
        for i in range(0, 2000, 3):
            txn.put(b"k%05d" % i, b"old", db=dbs[1 + i % 3])
    ov = _native.Overlay(dbs[1], dbs[2], dbs[3], e.begin())
    r = random.Random(seed)
    for _ in range(3000):
        code, key = r.choice((1, 2, 3)), b"k%05d" % r.randrange(2000)
        if r.random() < 0.7:
            ov.put(key + b"x" * r.randrange(3), b"v" * r.randrange(1, 300), db=dbs[code])
        else:
            ov.delete(key, b"", dbs[code])
    return ov


@pytest.mark.parametrize("seed", [1, 2])
def test_an_overlays_writes_made_natively_are_its_write_set_made_by_py_lmdb(tmp_path: Path, seed: int) -> None:
    ways = {}
    for way in ("native", "py-lmdb"):
        e = lmdb.open(str(tmp_path / way), max_dbs=4, map_size=1 << 26)
        dbs = {1: e.open_db(b"records"), 2: e.open_db(b"pending"), 3: e.open_db(b"meta")}
        ov = _overlay_with_writes(e, dbs, seed)
        n, puts, deletes = ov.write_set()
        assert n == len(ov) and deletes and len(puts) == 3
        with e.begin(write=True) as txn:
            if way == "native":
                assert _native.lmdb_write_overlay(txn, dbs, ov) == n
            else:
                for code, key in deletes:
                    txn.delete(key, db=dbs[code])
                for code, items in puts:
                    txn.cursor(db=dbs[code]).putmulti(items)
        ov.snapshot.abort()
        ways[way] = _contents(e, dbs)
        e.close()
    assert ways["native"] == ways["py-lmdb"]


@pytest.mark.parametrize("case", ["turned off", "another environment", "read-only"])
def test_an_overlay_the_native_way_cannot_write_is_left_for_py_lmdbs(tmp_path: Path, case: str) -> None:
    e = lmdb.open(str(tmp_path / "env"), max_dbs=4, map_size=1 << 26)
    other = lmdb.open(str(tmp_path / "other"), max_dbs=2)
    dbs = {1: e.open_db(b"records"), 2: e.open_db(b"pending"), 3: e.open_db(b"meta")}
    ov = _overlay_with_writes(e, dbs, 3)
    before = _contents(e, dbs)
    try:
        if case == "turned off":
            _native.set_lmdb_direct(False)
        elif case == "another environment":
            dbs = {**dbs, 3: other.open_db(b"meta")}  # the last database gathered: nothing is written before
        with e.begin(write=case != "read-only") as txn:
            assert _native.lmdb_write_overlay(txn, dbs, ov) == -1
        assert _contents(e, {c: db for c, db in dbs.items() if c != 3}) == {c: before[c] for c in (1, 2)}
    finally:
        _native.set_lmdb_direct(True)
        ov.snapshot.abort()
        other.close()
        e.close()


def test_an_empty_overlay_writes_nothing(env: tuple[Any, dict[int, Any]]) -> None:
    e, dbs = env
    meta = e.open_db(b"meta")
    ov = _native.Overlay(dbs[1], dbs[2], meta, e.begin())
    with e.begin(write=True) as txn:
        assert _native.lmdb_write_overlay(txn, {**dbs, 3: meta}, ov) == 0
    ov.snapshot.abort()
