"""The live filter: while this process holds a partition's write-behind
window, a Bloom filter of every key each namespace wrote since it was seeded
spares the LMDB reads of keys it rules out, and never a verdict
(docs/guarantees.md, "Filters")."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import pytest
from _proc_workers import serve_store

from dedupstore import DedupStore, InvalidIntentError, Status, _native, window

SPAWN = mp.get_context("spawn")
NS = "n"


class CountingSnapshot:
    """Stands in for a window overlay's read snapshot and counts its reads."""

    def __init__(self, txn: Any) -> None:
        self.txn = txn
        self.gets = 0

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        return self.txn.get(*args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self.txn.cursor(*args, **kwargs)

    def stat(self, *args: Any, **kwargs: Any) -> Any:
        return self.txn.stat(*args, **kwargs)

    def abort(self) -> None:
        self.txn.abort()


def counting(store: DedupStore) -> CountingSnapshot:
    ov = store._parts[0].window.overlay  # noqa: SLF001 - the test watches the overlay's reads
    assert ov is not None
    snap = CountingSnapshot(ov.snapshot)
    ov.snapshot = snap
    return snap


def live(store: DedupStore) -> dict[str, Any]:
    return store.stats()["namespaces"][NS]["prefilter"]


@pytest.fixture
def clock() -> list[float]:
    return [1_000_000.0]


def open_store(
    path: Path, clock: list[float], durability: str = "flush", horizon: float = 80.0, lease: float = 3600.0,
    **kw: Any,
) -> DedupStore:
    store = DedupStore.open(
        path, durability=durability, partitions=1, eviction_rate=0, apply_interval=1.0, clock=lambda: clock[0], **kw
    )
    # By default 80 s: generations of 10 s (horizon / 8).
    store.ensure_namespace(NS, horizon=horizon, lease=lease, allow_short_horizon=True)
    return store


@pytest.mark.parametrize("durability", ["flush", "sync"])
def test_new_keys_read_nothing_and_every_verdict_stands(tmp_path: Path, clock: list[float], durability: str) -> None:
    with open_store(tmp_path / "s", clock, durability) as store:
        first = store.claim(NS, "first")  # opens the window and seeds the filter
        assert first.status is Status.NEW
        snap = counting(store)
        tokens = {}
        for i in range(200):
            res = store.claim(NS, f"k{i}")
            assert res.status is Status.NEW
            tokens[f"k{i}"] = res.token
        assert snap.gets == 0  # no generation and no pending read for a key the filter rules out
        assert live(store)["live_reads_skipped"] >= 400
        assert live(store)["live_keys"] >= 201
        store.flush()  # applied: only LMDB holds them now
        for key in ("first", "k0", "k199"):
            assert store.claim(NS, key).status is Status.IN_PROGRESS
        store.complete(NS, "k7", tokens["k7"], b"done")
        again = store.claim(NS, "k7")
        assert again.status is Status.DUPLICATE and again.outcome == b"done"


def test_every_key_of_a_batch_is_probed_by_its_own_hash(tmp_path: Path, clock: list[float]) -> None:
    # claim_many of a few keys starts each key's probes before it digests
    # the intents (Space.prefetch_early), and each claim takes the hash
    # computed then for its own key object: a hash of another key of the
    # batch would let the live filter rule out keys it holds (applied, so
    # only LMDB has them). A batch past PREFETCH_KEYS hashes in the claims.
    with open_store(tmp_path / "s", clock) as store:
        for i in range(50):
            res = store.claim(NS, f"done{i}")
            store.complete(NS, res.key, res.token, b"ok")
            store.claim(NS, f"open{i}")
        store.flush()
        for i in range(40):
            batch = store.claim_many(NS, [f"done{i}", f"open{i}", f"new{i}"])
            assert batch.statuses == [Status.DUPLICATE, Status.IN_PROGRESS, Status.NEW]
        keys = [k for i in range(40, 50) for k in (f"done{i}", f"open{i}", f"new{i}")]
        assert store.claim_many(NS, keys).statuses == [Status.DUPLICATE, Status.IN_PROGRESS, Status.NEW] * 10
        assert [store.claim(NS, f"new{i}").status for i in range(50)] == [Status.IN_PROGRESS] * 50


def test_a_completion_takes_its_claims_unresolved_key_never_another_keys(
    tmp_path: Path, clock: list[float],
) -> None:
    # A completion or release whose key has the bytes of one in the early
    # probes' ring takes the unresolved-record key its claim made (and the
    # hash). A slot the ring gives a new key must forget the old key's:
    # here a claim refused after its early probe started (a bad intent)
    # leaves its key in the slot where k1's was, and the completion of an
    # earlier lease on that key must reach that key's record, not k1's.
    with open_store(tmp_path / "s", clock) as store:  # one partition: one ring
        first = store.claim(NS, "k5")
        opened = {k: store.claim(NS, k).token for k in ("k1", "k2", "k3", "k4")}  # around the ring once
        with pytest.raises(InvalidIntentError):
            store.claim(NS, "k5", {"amount": float("nan")})
        assert first.token is not None
        store.complete(NS, "k5", first.token, b"done")
        rec = store.lookup(NS, "k5")
        assert rec is not None and rec.outcome == b"done"
        k1 = store.lookup(NS, "k1")
        assert k1 is not None and k1.outcome is None and k1.token == opened["k1"]
        # And the common case, each completion straight after its claim:
        # every record completed under its own key, in the window and applied.
        for i in range(20):
            res = store.claim_many(NS, [f"a{i}", f"b{i}"])
            store.complete_many(NS, [(k, t, k.encode()) for k, t in zip((f"a{i}", f"b{i}"), res.tokens, strict=True)])
            res = store.claim(NS, f"r{i}")
            assert res.token is not None
            store.release(NS, f"r{i}", res.token)
        store.flush()
        for i in range(20):
            for k in (f"a{i}", f"b{i}"):
                again = store.claim(NS, k)
                assert again.status is Status.DUPLICATE and again.outcome == k.encode()
            assert store.claim(NS, f"r{i}").status is Status.NEW


def test_bloom_off_keeps_no_live_filter(tmp_path: Path, clock: list[float]) -> None:
    with open_store(tmp_path / "s", clock, bloom=False) as store:
        store.claim(NS, "first")
        snap = counting(store)
        for i in range(50):
            assert store.claim(NS, f"k{i}").status is Status.NEW
        assert snap.gets >= 100  # the generation, then the pending database, for every key
        assert live(store)["live_reads_skipped"] == 0 and live(store)["live_keys"] == 0


def test_a_reopened_store_seeds_from_what_lmdb_holds(tmp_path: Path, clock: list[float]) -> None:
    path = tmp_path / "s"
    with open_store(path, clock) as store:
        done = {f"d{i}": store.claim(NS, f"d{i}").token for i in range(100)}
        for key, token in done.items():
            store.complete(NS, key, token, b"ok")
        for i in range(100):
            store.claim(NS, f"p{i}")  # left unresolved
    with open_store(path, clock) as store:
        for i in range(100):
            assert store.claim(NS, f"d{i}").status is Status.DUPLICATE
            assert store.claim(NS, f"p{i}").status is Status.IN_PROGRESS
        assert store.claim(NS, "fresh").status is Status.NEW
        sp = store._live_namespace(NS).spaces[0]  # noqa: SLF001
        assert sp.live_seeds == 1 and sp.live_pending
        # The current generation holds records from before: it is still read;
        # the next one is the filter's.
        assert sp.live_from == sp.generation(int(clock[0] * 1e6)) + 1


def gen_now(sp: _native.Space, clock: list[float]) -> int:
    return sp.generation(int(clock[0] * 1e6))


def test_a_new_generation_rolls_the_filter_and_the_old_one_answers_for_its_keys(
    tmp_path: Path, clock: list[float]
) -> None:
    with open_store(tmp_path / "s", clock) as store:
        done = {f"d{i}": store.claim(NS, f"d{i}").token for i in range(300)}
        for key, token in done.items():
            store.complete(NS, key, token, b"ok")
        for i in range(50):
            store.claim(NS, f"p{i}")
        late = store.claim(NS, "late").token
        sp = store._live_namespace(NS).spaces[0]  # noqa: SLF001
        g0 = gen_now(sp, clock)
        assert sp.live_seeds == 1 and sp.live_rolls == 0 and sp.live_from <= g0
        clock[0] += 10.0  # the next generation
        # Completed before any claim there: the completion rolls the filter,
        # and the new one holds its record, the new generation's first.
        store.complete(NS, "late", late, b"late")
        assert sp.live_seeds == 1 and sp.live_rolls == 1
        assert [lf.lo for lf in sp.live_older] == [sp.live_from] and sp.live.lo == sp.live.hi == g0 + 1
        assert sp.live_older[0].keys >= 350 and sp.live.keys == 51 + 1  # the unresolved ones again, then "late"
        store.flush()  # applied: only LMDB holds the old generation's records now
        assert store.claim(NS, "warm").status is Status.NEW  # reads the generation state once
        snap = counting(store)
        for i in range(100):
            assert store.claim(NS, f"k{i}").status is Status.NEW
        # Neither generation nor the pending database was read: a new seed
        # would have read the old generation for every key.
        assert snap.gets == 0
        assert store.claim(NS, "late").outcome == b"late"
        for i in range(300):
            assert store.claim(NS, f"d{i}").status is Status.DUPLICATE
        for i in range(50):
            assert store.claim(NS, f"p{i}").status is Status.IN_PROGRESS

        # Two generations on, the first is sealed and gets its filter: the
        # filter kept for it is dropped, and that generation is probed
        # through its sealed filter again.
        clock[0] += 10.0
        assert store.refresh_prefilter()["built"] >= 1 and g0 in sp.blooms
        assert store.claim(NS, "fresh").status is Status.NEW
        assert sp.live_rolls == 2 and sp.live_from == g0 + 1
        assert [(lf.lo, lf.hi) for lf in sp.live_older] == [(g0 + 1, g0 + 1)]
        for i in range(300):
            assert store.claim(NS, f"d{i}").status is Status.DUPLICATE
        for i in range(50):
            assert store.claim(NS, f"p{i}").status is Status.IN_PROGRESS
        for i in range(100):
            assert store.claim(NS, f"k{i}").status is Status.IN_PROGRESS
        assert store.claim(NS, "late").outcome == b"late"


def test_a_kept_filters_maybe_reads_its_own_generations_only(tmp_path: Path, clock: list[float]) -> None:
    # Three generations of completed keys, each in the filter kept for it
    # (no sealed filter is built here), applied to LMDB. A redelivery of a
    # key of the oldest is read there, not in the two newer generations too:
    # their filters rule it out.
    with open_store(tmp_path / "s", clock) as store:
        sp = store._live_namespace(NS).spaces[0]  # noqa: SLF001
        for g in range(3):
            for i in range(100):
                res = store.claim(NS, f"g{g}.{i}")
                store.complete(NS, res.key, res.token, f"g{g}".encode())
            clock[0] += 10.0  # the next generation
        store.flush()
        assert store.claim(NS, "warm").status is Status.NEW  # rolls the filter once more
        assert len(sp.live_older) == 3 and not sp.blooms
        g0 = sp.live_older[0].hi  # the seed's: every generation up to the first
        assert [(lf.lo, lf.hi) for lf in sp.live_older[1:]] == [(g0 + 1, g0 + 1), (g0 + 2, g0 + 2)]
        snap = counting(store)
        for i in range(100):
            res = store.claim(NS, f"g0.{i}")
            assert res.status is Status.DUPLICATE and res.outcome == b"g0"
        # One read a key, where it is (and the odd one of a filter's false
        # "maybe", 0.5% each); the four generations top down would be 400.
        assert 100 <= snap.gets <= 110
        for i in range(100):
            assert store.claim(NS, f"g2.{i}").outcome == b"g2"
            assert store.claim(NS, f"n{i}").status is Status.NEW


def test_filters_kept_for_unsealed_generations_are_bounded_and_forget_no_key(
    tmp_path: Path, clock: list[float]
) -> None:
    # No sealed filter is ever built here: past LIVE_KEEP_MAX the oldest
    # kept filter is dropped anyway, and its generations are read in LMDB.
    # A 12 h horizon: generations of an hour (the cap), 13 of them live,
    # more than LIVE_KEEP_MAX + 1; a lease that outlasts the test's hours.
    rolls = _native.LIVE_KEEP_MAX + 3
    assert rolls < 13
    with open_store(tmp_path / "s", clock, horizon=12 * 3600.0, lease=86_400.0) as store:
        sp = store._live_namespace(NS).spaces[0]  # noqa: SLF001
        keys: list[str] = []
        for g in range(rolls):
            for i in range(20):
                key = f"g{g}.{i}"
                res = store.claim(NS, key)
                assert res.status is Status.NEW
                if i % 2 == 0:
                    store.complete(NS, key, res.token, key.encode())
                keys.append(key)
            assert len(sp.live_older) <= _native.LIVE_KEEP_MAX
            clock[0] += 3600.0
        store.flush()
        assert store.claim(NS, "last").status is Status.NEW
        assert sp.live_rolls == rolls and len(sp.live_older) == _native.LIVE_KEEP_MAX
        assert sp.live_from == sp.live_older[0].lo > 0
        assert live(store)["live_keys"] == sum(lf.keys for lf in [sp.live, *sp.live_older])
        for key in keys:
            res = store.claim(NS, key)
            i = int(key.split(".")[1])
            if i % 2 == 0:
                assert res.status is Status.DUPLICATE and res.outcome == key.encode()
            else:
                assert res.status is Status.IN_PROGRESS


def test_too_many_unresolved_records_are_read_instead(
    tmp_path: Path, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with open_store(path, clock) as store:
        tokens = [store.claim(NS, f"p{i}").token for i in range(20)]
    monkeypatch.setattr(_native, "LIVE_PENDING_MAX", 5)
    with open_store(path, clock) as store:
        assert store.claim(NS, "fresh").status is Status.NEW
        sp = store._live_namespace(NS).spaces[0]  # noqa: SLF001
        assert not sp.live_pending
        for i in (*range(9), *range(10, 20)):
            assert store.claim(NS, f"p{i}").status is Status.IN_PROGRESS
        # "p9" sorts last, past what the seed read. Completed now, it moves
        # into a generation the filter answers for: the completion adds it.
        store.complete(NS, "p9", tokens[9], b"ok")
        store.flush()
        assert store.claim(NS, "p9").status is Status.DUPLICATE


def test_a_filter_grown_past_its_first_size_forgets_no_key(
    tmp_path: Path, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_native, "LIVE_FIRST_KEYS", 4)
    with open_store(tmp_path / "s", clock) as store:
        for i in range(500):
            assert store.claim(NS, f"k{i}").status is Status.NEW
        store.flush()  # applied: from here on only LMDB holds them, and the overlay cannot answer for the filter
        for i in range(500):
            assert store.claim(NS, f"k{i}").status is Status.IN_PROGRESS
        assert live(store)["live_keys"] == 500


class OtherProcess:
    """A second process with the store open (tests/_proc_workers.py's serve_store)."""

    def __init__(self, path: Path) -> None:
        self._conn, child = SPAWN.Pipe()
        self._proc = SPAWN.Process(target=serve_store, args=(str(path), child))
        self._proc.start()
        child.close()  # a child that dies is then an EOF here, not a wait for ever
        assert self._recv() == ("ok", "ready")

    def _recv(self) -> Any:
        if not self._conn.poll(60):
            raise AssertionError(f"the other process did not answer (exit code {self._proc.exitcode})")
        try:
            return self._conn.recv()
        except EOFError:
            self._proc.join(60)
            raise AssertionError(f"the other process ended (exit code {self._proc.exitcode})") from None

    def __call__(self, method: str, *args: Any) -> Any:
        self._conn.send((method, args, {}))
        reply = self._recv()
        assert reply[0] == "ok", reply
        return reply[1]

    def stop(self) -> None:
        if self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(60)
        if self._proc.is_alive():
            self._proc.kill()
        assert self._proc.exitcode == 0


def test_another_processs_writes_are_seen_after_the_window_reopens(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with DedupStore.open(path, durability="flush", partitions=1, apply_interval=0.05) as store:
        store.ensure_namespace(NS, horizon="7d", lease="1h")
        assert store.claim(NS, "mine").status is Status.NEW  # our window is open, its filter seeded
        opened = store.stats()["partition_stats"][0]["write_behind"]["opened"]
        other = OtherProcess(path)
        try:
            # It waits for our window to be given up, then writes keys our
            # filter never saw.
            assert other("claim", NS, "theirs")[1] == "NEW"
            assert other("claim", NS, "theirs-too")[1] == "NEW"
        finally:
            other.stop()
        time.sleep(2 * window.REOPEN_S)
        assert store.claim(NS, "again").status is Status.NEW  # alone again: the window reopens
        assert store.stats()["partition_stats"][0]["write_behind"]["opened"] > opened
        assert store.claim(NS, "theirs").status is Status.IN_PROGRESS
        assert store.claim(NS, "theirs-too").status is Status.IN_PROGRESS
        assert store.claim(NS, "mine").status is Status.IN_PROGRESS


def test_an_old_namespace_with_no_records_reads_no_generation(tmp_path: Path, clock: list[float]) -> None:
    path = tmp_path / "s"
    with open_store(path, clock) as store:
        store.claim(NS, "early")
    clock[0] += 70.0  # seven generations later, none of them written
    with open_store(path, clock) as store:
        assert store.claim(NS, "first").status is Status.NEW
        sp = store._live_namespace(NS).spaces[0]  # noqa: SLF001
        assert sp.live_from == 0  # no record in any generation: the filter answers for all
        snap = counting(store)
        for i in range(50):
            assert store.claim(NS, f"k{i}").status is Status.NEW
        assert snap.gets == 0
        assert store.claim(NS, "early").status is Status.IN_PROGRESS
