"""Retention: generations, rate-bounded eviction, the frontier and late replays (SPEC section 5)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock

from dedupstore import DedupStore, InvalidInputError, RecordState, Status, window
from dedupstore.verify import verify_store

HORIZON = 80.0  # seconds; generations are horizon/8 = 10 s
GEN = 10.0


def _open(path: Path, clock: FakeClock, **kw: object) -> DedupStore:
    kw.setdefault("eviction_rate", 0)
    kw.setdefault("partitions", 2)
    store = DedupStore.open(path, clock=clock, **kw)  # type: ignore[arg-type]
    store.ensure_namespace("n", horizon=f"{HORIZON:g}s", lease="5s")
    return store


def _fill(
    store: DedupStore, clock: FakeClock, steps: int, per_step: int = 20, *, pending_every: int = 0
) -> dict[str, float]:
    """Claim and complete keys over `steps` generations; returns key -> first-seen time."""
    seen: dict[str, float] = {}
    for step in range(steps):
        for i in range(per_step):
            key = f"s{step}-k{i}"
            res = store.claim("n", key, event_time=clock.now)
            seen[key] = clock.now
            if not (pending_every and i % pending_every == 0):
                assert res.token is not None
                store.complete("n", key, res.token, b"ok")
        clock.advance(GEN)
    return seen


def test_records_live_at_least_the_horizon_and_not_much_longer(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        seen = _fill(s, clock, steps=30)
        s.evict()
        now = clock.now
        for key, t in seen.items():
            present = s.lookup("n", key) is not None
            if now - t < HORIZON:
                assert present, f"{key} first seen {now - t:.0f}s ago was evicted before its horizon"
            if now - t >= HORIZON + GEN:
                assert not present, f"{key} first seen {now - t:.0f}s ago outlived horizon + generation"


def test_late_replay_beyond_the_frontier_is_not_new(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        start = clock.now
        _fill(s, clock, steps=30)
        assert s.evict()["deleted"] > 0
        # The original was evicted; the producer's event time betrays the replay.
        res = s.claim("n", "s0-k1", event_time=start + 1)
        assert res.status is Status.BEYOND_HORIZON and res.token is not None
        # Without event_time the store can only answer on the evidence it holds.
        assert s.claim("n", "s1-k1").status is Status.NEW
        # An event time after the frontier is an ordinary new effect.
        frontier = s.stats()["namespaces"]["n"]["frontier"]
        assert s.claim("n", "fresh", event_time=frontier + 1).status is Status.NEW


def test_unresolved_records_are_never_evicted(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        _fill(s, clock, steps=30, pending_every=10)
        done = s.evict()
        assert done["deleted"] > 0 and set(done) == {"deleted"}
        assert s.lookup("n", "s0-k0") is not None
        unresolved = {r.key for r in s.unresolved("n")}
        assert b"s0-k0" in unresolved and b"s0-k10" in unresolved
        assert all(r.state is RecordState.UNKNOWN for r in s.unresolved("n") if r.first_seen < clock.now - 10)
        res = s.claim("n", "s0-k0")
        assert res.status is Status.UNKNOWN and res.token is not None
        s.complete("n", "s0-k0", res.token, b"reconciled")
        assert s.claim("n", "s0-k0").outcome == b"reconciled"
        assert b"s0-k0" not in {r.key for r in s.unresolved("n")}
        # Completed now, it lives in the current generation: kept at least a
        # horizon from its completion, at most a generation more.
        clock.advance(HORIZON - GEN)
        s.evict()
        assert s.lookup("n", "s0-k0") is not None
        clock.advance(2 * GEN)
        s.evict()
        assert s.lookup("n", "s0-k0") is None


def test_frontier_survives_reopen_and_never_moves_back(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        start = clock.now
        _fill(s, clock, steps=30)
        s.evict()
        frontier = s.stats()["namespaces"]["n"]["frontier"]
        assert frontier > start
    with _open(store_path, clock) as s:
        assert s.stats()["namespaces"]["n"]["frontier"] == frontier
        assert s.claim("n", "s0-k3", event_time=start).status is Status.BEYOND_HORIZON
        clock.advance(-1000)  # a clock stepping back must not pull the frontier back
        s.evict()
        assert s.stats()["namespaces"]["n"]["frontier"] == frontier


def test_eviction_budget_and_steps_keep_invariants(store_path: Path, clock: FakeClock, lmdb_way: str) -> None:
    with _open(store_path, clock, eviction_batch=7) as s:
        seen = _fill(s, clock, steps=30, per_step=30)
        last_frontier = 0.0
        total = 0
        while True:
            done = s.evict(25)
            assert done["deleted"] <= 25
            total += done["deleted"]
            frontier = s.stats()["namespaces"]["n"]["frontier"]
            assert frontier >= last_frontier
            last_frontier = frontier
            # Nothing within its horizon is ever gone, whatever step we are at.
            for key, t in list(seen.items())[::37]:
                if clock.now - t < HORIZON:
                    assert s.lookup("n", key) is not None
            if done["deleted"] == 0:
                break
        assert total == s.stats()["namespaces"]["n"]["evicted"] > 0


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_stats_report_eviction_lag_until_eviction_runs(store_path: Path, clock: FakeClock, durability: str) -> None:
    with _open(store_path, clock, durability=durability) as s:
        _fill(s, clock, steps=30)
        before = s.stats()["namespaces"]["n"]  # applies the windows
        # The load generator's per-second gauge reads LMDB as it stands (as
        # of the windows' last apply), and agrees.
        assert before["eviction_lag_seconds"] == s._eviction_lag("n") > 0 and before["evicted"] == 0
        s.evict()
        assert s._eviction_lag("n") == 0
        after = s.stats()["namespaces"]["n"]
        assert after["eviction_lag_seconds"] == 0 and after["evicted"] > 0


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_an_eviction_in_the_stores_own_thread_pauses_and_deletes_the_same(
    store_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    from dedupstore import store as store_module

    monkeypatch.setattr(store_module, "PAUSE_KEYS", 3)
    asked: list[int] = []
    real = store_module._pause_every
    monkeypatch.setattr(store_module, "_pause_every", lambda: asked.append(real()) or asked[-1])
    with _open(store_path, clock, durability=durability, partitions=1) as s:
        seen = _fill(s, clock, steps=3)
        clock.advance(HORIZON + 2 * GEN)
        done: list[dict[str, int]] = []

        def own() -> None:
            window.STORE_THREAD.own = True  # as the maintenance thread is
            done.append(s.evict())

        worker = threading.Thread(target=own)
        worker.start()
        worker.join(30)
        # Only beside a flush-mode window: in sync mode the step is a group commit that holds the calls up.
        assert done == [{"deleted": len(seen)}] and (set(asked) == {3} if durability == "flush" else not asked)
        assert all(s.lookup("n", k) is None for k in seen)
        assert real() == 0  # a caller's own eviction does not pause
    assert verify_store(store_path).problems == []


def test_background_thread_evicts(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock, eviction_rate=100_000) as s:
        seen = _fill(s, clock, steps=30)
        oldest = min(seen, key=seen.__getitem__)
        deadline = time.monotonic() + 20
        while s.lookup("n", oldest) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.lookup("n", oldest) is None


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_disk_footprint_plateaus_under_steady_load(store_path: Path, clock: FakeClock, durability: str) -> None:
    # flush mode: a checkpoint's pin keeps the pages freed after it until the
    # next one, so the consumer here flushes each step, as before committing
    # its offsets (the background checkpoint does the same every interval).
    with _open(store_path, clock, partitions=1, durability=durability, flush_interval=3600) as s:

        def run(horizons: int) -> int:
            for _ in range(horizons * 8):
                batch = s.claim_many("n", [f"{clock.now}-{i}" for i in range(300)])
                s.complete_many("n", [(r.key, r.token, b"outcome") for r in batch if r.token is not None])
                clock.advance(GEN)
                s.evict()
                s.flush()
            return int(s.stats()["bytes_used"])

        run(2)
        warm = run(3)
        later = run(6)
        # Freed pages are reused: six more horizons of the same load must not
        # grow the file beyond noise.
        assert later <= warm * 1.25, (warm, later)


def test_horizon_change_applies_to_eviction(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        seen = _fill(s, clock, steps=12)
        s.ensure_namespace("n", horizon="1h", lease="5s")
        assert s.evict()["deleted"] == 0
        assert all(s.lookup("n", k) is not None for k in list(seen)[:5])


@pytest.mark.parametrize(("rate", "batch"), [(-1, 10), (1e12, 10), (10, 0), (10, 10**6), (True, 10)])
def test_eviction_settings_are_checked(tmp_path: Path, rate: float, batch: int) -> None:
    with pytest.raises(InvalidInputError, match="eviction_"):
        DedupStore.open(tmp_path / "s", eviction_rate=rate, eviction_batch=batch)


def test_evict_budget_is_checked(store: DedupStore) -> None:
    with pytest.raises(InvalidInputError, match="budget"):
        store.evict(-1)


def test_the_background_evictor_keeps_pace_with_inserts_and_runs_free_when_idle() -> None:
    from dedupstore.store import EVICTION_PACE, IDLE_INSERTS_PER_S, eviction_pace

    assert eviction_pace(50_000, 0) == 50_000  # idle: a backlog goes at the configured rate
    assert eviction_pace(50_000, IDLE_INSERTS_PER_S - 1) == 50_000
    assert eviction_pace(50_000, 5_000) == EVICTION_PACE * 5_000  # busy: twice the inserts
    assert eviction_pace(50_000, 18_000) == 36_000
    assert eviction_pace(50_000, 40_000) == 50_000  # never above the cap
    assert eviction_pace(1_000, 5_000) == 1_000


def test_evict_with_nothing_due_takes_no_write_transaction(store_path: Path, clock: FakeClock) -> None:
    # The background thread calls evict() ten times a second: where nothing
    # is past the horizon it must not open a write transaction, which would
    # apply each partition's write-behind window and hold its calls up.
    with _open(store_path, clock, durability="flush") as s:
        _fill(s, clock, steps=3)
        s.flush()

        def commits() -> int:  # the group commit's, and those beside each write-behind window
            return sum(p["commits"] + p["write_behind"]["beside_commits"] for p in s.stats()["partition_stats"])

        before = commits()
        assert s.evict() == {"deleted": 0}
        assert commits() == before
        clock.advance(HORIZON + 2 * GEN)  # every filled generation is now due
        assert s.evict()["deleted"] == 3 * 20
        assert commits() > before
        assert s.evict() == {"deleted": 0}


def test_calls_go_on_while_an_eviction_commits_beside_the_write_behind_window(
    store_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An eviction's transaction runs beside the window (Window.beside): the
    # calls made meanwhile neither wait for it nor undo it, and a repeat with
    # another event id of a record being deleted leaves it deleted (rewritten,
    # it would come back below the oldest generation).
    with _open(store_path, clock, durability="flush", partitions=1, apply_interval=1.0) as s:
        old = s.claim("n", "old", event_id="e1", event_time=clock.now)
        assert old.token is not None
        s.complete("n", "old", old.token, b"ok")
        _fill(s, clock, steps=3)
        clock.advance(HORIZON + 2 * GEN)
        inside, go_on = threading.Event(), threading.Event()
        real = window.Window._commit

        def held(self: window.Window, changes: Any, owner: Any, op: Any = None, helped: bool = False) -> Any:
            if op is not None:  # the eviction's transaction, not an apply
                inside.set()
                assert go_on.wait(5)
            return real(self, changes, owner, op, helped)

        monkeypatch.setattr(window.Window, "_commit", held)
        done: list[dict[str, int]] = []
        evictor = threading.Thread(target=lambda: done.append(s.evict()))
        evictor.start()
        assert inside.wait(5)
        assert s.claim("n", "fresh").status is Status.NEW
        repeat = s.claim("n", "old", event_id="e2")
        assert repeat.status is Status.DUPLICATE and repeat.outcome == b"ok"
        assert evictor.is_alive(), "the calls waited for the eviction's transaction"
        go_on.set()
        evictor.join()
        monkeypatch.setattr(window.Window, "_commit", real)
        assert done == [{"deleted": 3 * 20 + 1}]
        assert s.lookup("n", "old") is None
        assert s.claim("n", "fresh").status is Status.IN_PROGRESS
        assert s.stats()["partition_stats"][0]["write_behind"]["beside_commits"] >= 1
    report = verify_store(store_path)
    assert report.problems == [], report.problems
