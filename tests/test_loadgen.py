"""The load generator's logic: the stream's mix, the run's report, retention
during the run, and the ramp. Tiny rates and durations; nothing here times the
store (performance is measured by the benches, never asserted)."""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dedupstore import DedupStore, Status, loadgen
from dedupstore.errors import InvalidInputError
from dedupstore.loadgen import (
    LATE_AGE_S,
    AcceleratedClock,
    LoadConfig,
    LoadReport,
    find_max_rate,
    machine_floor,
    make_stream,
    run_load,
)


def test_stream_mix_follows_the_shares() -> None:
    config = LoadConfig(rate=10_000, duration=5, time_scale=43_200.0, redelivery_gap=100, redelivery_window=1000)
    s = make_stream(config)
    n = len(s.keys)
    assert n == 50_000 and len(s.intents) == len(s.times) == len(s.releases) == n
    first: dict[str, int] = {}
    repeats = conflicts = 0
    for i, (k, intent) in enumerate(zip(s.keys, s.intents, strict=True)):
        if k in first:
            if s.times[i] is None:  # a redelivery or conflict: shortly after its original
                assert config.redelivery_gap <= i - first[k] <= 3 * config.redelivery_window
                repeats += 1
                conflicts += intent != s.intents[first[k]]
        else:
            first[k] = i
    assert 0.05 * n < repeats < 0.09 * n  # 6% duplicates + 1% conflicts
    assert 0.005 * n < conflicts < 0.015 * n
    late = [i for i, t in enumerate(s.times) if t is not None]
    assert 0.005 * n < len(late) < 0.015 * n
    virtual = config.time_scale / config.rate
    for i in late:
        t = s.times[i]
        assert t is not None
        if t < 0:  # before a day of store time has passed: a fresh key from before the namespace
            assert t == -LATE_AGE_S and i * virtual < LATE_AGE_S + virtual
        else:  # a replay of a key sent at least a day (store clock) earlier, with its own time
            j = round(t / virtual)
            assert s.keys[j] == s.keys[i] and t == pytest.approx(j * virtual) and (i - j) * virtual >= LATE_AGE_S
    assert 0.01 * n < sum(s.releases) < 0.03 * n
    assert make_stream(config).keys == s.keys  # seeded


@pytest.mark.parametrize("mode", ["poll", "batch", "single"])
def test_run_reports_every_event(tmp_path: Path, mode: str) -> None:
    rate = 400 if mode == "single" else 1000  # single: two commits per event, keep it short
    config = LoadConfig(rate=rate, duration=0.5, durability="flush", mode=mode, batch=50, time_scale=1.0)
    report = run_load(config, tmp_path / "s")
    doc = report.to_dict()
    n = rate // 2
    assert doc["events"] == n == len(report.latencies_us) == sum(doc["verdicts"].values())
    assert doc["mode"] == mode and doc["batch"] == {"poll": 1000, "batch": 50, "single": 1}[mode]
    assert doc["verdicts"]["NEW"] > 0.8 * n and doc["verdicts"]["BEYOND_HORIZON"] > 0
    assert 0 < doc["p50_us"] <= doc["p99_us"] <= doc["p999_us"] <= doc["max_us"]
    assert doc["bytes_on_disk"] > 0 and doc["cpu_share"] > 0
    if mode == "batch":
        assert report.batches == 10
    if mode == "single":
        assert report.batches == n
    # Then the rounds again, back to back, of the run's sizes (poll mode:
    # whatever was due at each wake-up), on keys of their own.
    if mode != "poll":
        assert report.back_to_back_rounds == report.batches
    assert 1 <= report.back_to_back_rounds <= n and report.back_to_back_cpu_seconds > 0
    assert doc["store_call_back_to_back_cpu_us"] > 0
    assert gc.get_freeze_count() == 0  # the stream was frozen for the run only


def test_the_rounds_back_to_back_claim_keys_of_their_own(tmp_path: Path) -> None:
    config = LoadConfig(rate=1000, duration=0.3, durability="flush", time_scale=1.0)
    stream = make_stream(config)
    report = run_load(config, tmp_path / "s", stream=stream)
    assert sum(report.verdicts.values()) == 300  # the run's counts only
    with DedupStore.open(tmp_path / "s") as s:
        first = [s.lookup(loadgen.NAMESPACE, k) is not None for k in stream.keys]
        again = [s.lookup(loadgen.NAMESPACE, f"b2b:{k}") is not None for k in stream.keys]
    # The same events again under keys of their own, with the same outcome
    # for each key: a record where the run left one (completed), none where
    # it left none (released, or refused as a replay beyond the horizon).
    assert again == first and 0.8 * len(first) < sum(first) < len(first)
    off = run_load(config, tmp_path / "t", stream=stream, back_to_back=False)
    assert off.back_to_back_rounds == 0 and off.to_dict()["store_call_back_to_back_cpu_us"] is None


def test_the_stream_is_out_of_the_collectors_way_during_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen: list[int] = []
    real = loadgen._run

    def run(*args: Any) -> Any:
        frozen.append(gc.get_freeze_count())
        return real(*args)

    monkeypatch.setattr(loadgen, "_run", run)
    config = LoadConfig(rate=1000, duration=0.2, durability="flush", time_scale=1.0)
    stream = make_stream(config)
    run_load(config, tmp_path / "s", stream=stream)
    # Its intents (dicts: the keys are strings, which the collector never
    # tracks), and more, were in the permanent generation.
    assert frozen and frozen[0] >= len(stream.intents) and gc.get_freeze_count() == 0


def test_accelerated_clock_rotates_and_evicts(tmp_path: Path) -> None:
    # 12h of store time per wall second: ~24 generations pass in 2 s, and the
    # store's own background thread evicts those past the horizon.
    config = LoadConfig(rate=2000, duration=2.0, durability="flush", time_scale=43_200.0)
    doc = run_load(config, tmp_path / "s").to_dict()
    assert doc["store_seconds"] >= 2.0 * 43_200 * 0.9
    ev = doc["eviction"]
    assert ev["enabled"] and ev["evicted"] > 0 and ev["frontier_advance_seconds"] > 0
    assert ev["lag_seconds_max"] >= ev["lag_seconds_end"] >= 0
    off = run_load(replace(config, eviction=False), tmp_path / "t").to_dict()
    # Eviction off: nothing evicted, but generations still get their filters.
    assert off["eviction"]["evicted"] == 0 and off["bloom"]["filters"] > 0
    none = run_load(replace(config, eviction=False, bloom=False), tmp_path / "u").to_dict()
    assert none["eviction"]["evicted"] == 0 and none["bloom"]["filters"] == 0


def test_the_accelerated_clock_stands_still_then_runs_scaled_and_the_store_reads_it(tmp_path: Path) -> None:
    clock = AcceleratedClock(1000.0, base=1_000_000.0)
    assert (clock.base, clock.scale) == (1_000_000.0, 1000.0)
    assert clock() == clock() == 1_000_000.0
    with DedupStore.open(tmp_path / "s", durability="flush", eviction_rate=0, clock=clock) as store:
        store.ensure_namespace("ns")
        # Standing still: the store's calls (which read the clock natively)
        # see its base, to the microsecond.
        assert store.claim("ns", "a").record.first_seen == 1_000_000.0
        clock.start()
        wall = time.perf_counter()
        time.sleep(0.02)
        rec = store.claim("ns", "b").record
        elapsed = time.perf_counter() - wall
        # At most the scaled wall time since start() (and at least the 20 ms slept).
        assert 1_000_000.0 + 0.02 * 1000 <= rec.first_seen <= 1_000_000.0 + elapsed * 1000 + 1e-3
        assert clock() >= rec.first_seen


def test_a_run_that_falls_behind_stops_at_the_drain_deadline(tmp_path: Path) -> None:
    # Single sync-mode claims at 20,000/s cannot keep up (each waits on a
    # journal fdatasync); with no drain time the run stops when the schedule ends.
    config = LoadConfig(rate=20_000, duration=0.3, durability="sync", mode="single", drain=0.0, time_scale=1.0)
    report = run_load(config, tmp_path / "s")
    doc = report.to_dict()
    assert doc["events"] == 6000 == len(report.latencies_us)
    assert 0 < doc["claimed"] < 6000 and doc["claimed"] + doc["unclaimed"] == 6000
    assert sum(doc["verdicts"].values()) == doc["claimed"]
    assert report.wall_seconds < 1.0
    # Unclaimed events count with the time they had waited: at least until the schedule's end.
    assert report.latencies_us[-1] >= 0 and report.latencies_us[doc["claimed"]] > report.latencies_us[-1]


def test_the_machine_floor_is_the_schedule_with_no_store() -> None:
    config = LoadConfig(rate=5000)
    floor = machine_floor(config, 0.2)
    assert floor["seconds"] == 0.2 and floor["events"] == 1000
    assert 0 <= floor["p50_us"] <= floor["p99_us"] <= floor["p999_us"] <= floor["max_us"]
    # Batches share their scheduled time, as in a run: still every event once.
    assert machine_floor(replace(config, mode="batch", batch=50), 0.2)["events"] == 1000
    for bad in (0, -1.0, 601.0):
        with pytest.raises(InvalidInputError, match="floor"):
            machine_floor(config, bad)


def test_the_schedule_counts_a_stall_against_every_event_behind_it() -> None:
    # No coordinated omission: an answer that takes 20 ms makes the events
    # due meanwhile wait for it, and they are taken together afterwards.
    calls: list[tuple[int, int]] = []

    def serve(start: int, end: int) -> float:
        calls.append((start, end))
        if start == 0:
            time.sleep(0.02)
        return time.perf_counter()

    latencies: list[float] = []
    rounds: list[float] = []
    late: list[float] = []
    _, sent, n = loadgen._paced(100, 0.001, 1, 1000, 5.0, serve, latencies, None, rounds, late)
    assert sent == 100 == len(latencies) and n == len(calls) == len(rounds) == len(late)
    assert latencies[0] >= 20_000  # the first event waited for its own slow answer
    assert calls[1][0] == 1 and calls[1][1] >= 15  # the events due during the stall, in one call
    assert latencies[1] >= 15_000
    assert calls[-1][1] == 100
    # The stall is the first round's length, not the second's late start:
    # that one could begin as soon as the first returned, and did.
    assert rounds[0] >= 20_000 and min(late) >= 0 and late[1] < rounds[0]


def test_bad_config_is_refused() -> None:
    for bad in (
        LoadConfig(mode="burst"), LoadConfig(rate=0), LoadConfig(batch=0), LoadConfig(time_scale=0.5),
        LoadConfig(rate=1e6, duration=100), LoadConfig(drain=-1), LoadConfig(thread_nice=20),
        LoadConfig(thread_cpus=()), LoadConfig(consumer_cpus=(100_000,)),
    ):
        with pytest.raises(InvalidInputError):
            run_load(bad)


def _fake_run(limit_rate: float, calls: list[float]):  # type: ignore[no-untyped-def]
    """A run_load stand-in whose p99 crosses 1 ms above ``limit_rate``."""

    def fake(config: LoadConfig, *args: object, **kwargs: object) -> LoadReport:
        calls.append(config.rate)
        rep = LoadReport(config=config, path="-", scheduled=int(config.rate), claimed=int(config.rate),
                         wall_seconds=1.0)
        rep.latencies_us = [500.0 if config.rate <= limit_rate else 5000.0] * 10
        return rep

    return fake


def test_ramp_goes_up_then_bisects(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(loadgen, "run_load", _fake_run(3000.0, calls))
    res = find_max_rate(LoadConfig(mode="batch"), start=1000, factor=2.0, refine=2, retries=0)
    assert calls[:3] == [1000, 2000, 4000]  # up until 4000 fails
    assert len(calls) == 5  # then two bisections between 2000 and 4000
    assert res.max_rate is not None and 2000 <= res.max_rate <= 3000
    doc = res.to_dict()
    assert doc["mode"] == "batch" and doc["batch"] == 100 and doc["p99_limit_us"] == 1000.0
    assert [s["ok"] for s in doc["steps"]][:3] == [True, True, False]


def test_a_ramp_that_runs_out_of_steps_says_its_maximum_is_a_lower_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(loadgen, "run_load", _fake_run(1e9, calls))
    res = find_max_rate(LoadConfig(mode="single"), start=250, factor=1.5, max_steps=4, retries=0)
    assert len(calls) == 4 and res.max_rate == calls[-1] and res.capped
    assert res.to_dict()["capped"] is True
    calls.clear()
    monkeypatch.setattr(loadgen, "run_load", _fake_run(30_000.0, calls))
    res = find_max_rate(LoadConfig(mode="single"), start=250, factor=1.5)  # the CLI's single ramp
    assert res.max_rate is not None and 21_000 < res.max_rate <= 30_000 and not res.capped


def test_ramp_goes_down_when_the_start_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(loadgen, "run_load", _fake_run(300.0, calls))
    res = find_max_rate(LoadConfig(mode="single"), start=1000, factor=2.0, refine=0, retries=0)
    # Down until 250 passes; then 500, the lowest failed rate, once more.
    assert calls == [1000, 500, 250, 500] and res.max_rate == 250
    calls.clear()
    monkeypatch.setattr(loadgen, "run_load", _fake_run(0.0, calls))
    res = find_max_rate(LoadConfig(mode="single"), start=1000, factor=2.0, step_seconds=1.0)
    assert res.max_rate is None and calls[-1] >= loadgen.MIN_STEP_EVENTS  # stops before steps too small to judge
    assert res.to_dict()["max_rate"] is None and not res.capped


def test_a_start_failed_by_a_spell_of_the_machine_does_not_bound_the_ramp(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine is busy for the first two steps (the start and its retry),
    # whatever their rate; the store sustains up to 3000 events/s. Seen on
    # a shared VM: batches of 100 "9,036 events/s", then 231,583 in the
    # next run (docs/benchmarks.md, twenty-seventh session).
    calls: list[float] = []
    fake = _fake_run(3000.0, calls)

    def busy_at_first(config: LoadConfig, *args: object, **kwargs: object) -> LoadReport:
        rep = fake(config)
        if len(calls) <= 2:
            rep.latencies_us = [5000.0] * 10
        return rep

    monkeypatch.setattr(loadgen, "run_load", busy_at_first)
    res = find_max_rate(LoadConfig(mode="batch"), start=1000, factor=2.0, refine=1)
    # 1000 fails twice (the spell), 500 passes, 1000 passes when tried again,
    # and the ramp goes on up: 2000, then 4000 fails both tries, then one
    # bisection between 2000 and 4000 (2828 passes).
    assert calls == [1000, 1000, 500, 1000, 2000, 4000, 4000, 2000 * 2 ** 0.5]
    assert res.max_rate == pytest.approx(2000 * 2 ** 0.5) and not res.capped
    # A start the store cannot sustain is tried again once, and still bounds it.
    calls.clear()
    monkeypatch.setattr(loadgen, "run_load", _fake_run(600.0, calls))
    res = find_max_rate(LoadConfig(mode="batch"), start=1000, factor=2.0, refine=0)
    assert calls == [1000, 1000, 500, 1000, 1000] and res.max_rate == 500


def test_a_rate_not_sustained_is_tried_again_once_before_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # Saturation fails every try: 4000 is run twice, each bisection's failure too.
    calls: list[float] = []
    monkeypatch.setattr(loadgen, "run_load", _fake_run(3000.0, calls))
    res = find_max_rate(LoadConfig(mode="batch"), start=1000, factor=2.0, refine=1)
    assert calls[:4] == [1000, 2000, 4000, 4000] and len(calls) == 5  # the bisection (2828) passes
    doc = res.to_dict()
    assert [(s["ok"], s["retry"]) for s in doc["steps"][:4]] == [(True, False), (True, False), (False, False),
                                                               (False, True)]
    # A stall: the first try of 2000 fails, its second passes, and the ramp goes on up.
    calls.clear()
    fake = _fake_run(3000.0, calls)
    stalled: list[float] = []

    def once(config: LoadConfig, *args: object, **kwargs: object) -> LoadReport:
        rep = fake(config)
        if config.rate == 2000 and not stalled:
            stalled.append(config.rate)
            rep.latencies_us = [5000.0] * 10
        return rep

    monkeypatch.setattr(loadgen, "run_load", once)
    res = find_max_rate(LoadConfig(mode="batch"), start=1000, factor=2.0, refine=0)
    assert calls == [1000, 2000, 2000, 4000, 4000] and res.max_rate == 2000
    with pytest.raises(InvalidInputError, match="retries >= 0"):
        find_max_rate(LoadConfig(), start=1000, retries=-1)


class _SlowCounts(dict):  # type: ignore[type-arg]
    """The consumer's own work made slow: each verdict it counts takes 2 ms."""

    def __setitem__(self, key: Any, value: Any) -> None:
        time.sleep(0.002)
        super().__setitem__(key, value)


class _TimedStore:
    """A store whose every call takes 1 ms of wall time: asleep, or on the
    CPU (``spin``)."""

    def __init__(self, spin: bool = False) -> None:
        self.calls = 0
        self.spin = spin

    def _call(self) -> None:
        self.calls += 1
        if self.spin:
            end = time.thread_time() + 0.001
            while time.thread_time() < end:
                pass
        else:
            time.sleep(0.001)

    def claim_many(self, namespace: str, keys: list[Any], intents: list[Any], *, event_times: Any) -> Any:
        self._call()
        n = len(keys)
        return type("B", (), {"statuses": [Status.NEW] * n, "tokens": list(range(1, n + 1))})()

    def complete_many(self, namespace: str, items: list[Any]) -> list[None]:
        self._call()
        return [None] * len(items)

    def claim(self, namespace: str, key: Any, intent: Any, *, event_time: Any) -> Any:
        self._call()
        return type("R", (), {"status": Status.NEW, "token": 1, "key": key})()

    def complete(self, namespace: str, key: Any, token: int, outcome: bytes) -> None:
        self._call()

    def release_many(self, namespace: str, items: list[Any]) -> list[None]:
        self._call()
        return [None] * len(items)


def test_the_consumer_charges_the_store_only_for_its_calls() -> None:
    # Five rounds of four events: three store calls of 1 ms each a round (a
    # claim, the completions, the release), and 8 ms of the consumer's own
    # counting, which is the load generator's.
    stream = loadgen.Stream([f"k{i}" for i in range(20)], [None] * 20, [None] * 20, [i % 4 == 0 for i in range(20)])
    store = _TimedStore()
    consumer = loadgen._Consumer(store, stream, 0.0, _SlowCounts(dict.fromkeys(Status, 0)))  # type: ignore[arg-type]
    for start in range(0, 20, 4):
        consumer.batch(start, start + 4)
    assert store.calls == 15  # a claim, the completes and a release a round
    assert consumer.counts[Status.NEW] == 20
    # 15 ms of calls; the 40 ms of counting between them is not charged.
    assert 0.015 <= consumer.busy_seconds < 0.05, consumer.busy_seconds
    assert consumer.busy_cpu_seconds < consumer.busy_seconds


@pytest.mark.parametrize("spin", [False, True])
def test_the_consumer_estimates_its_calls_cpu_from_a_sample(spin: bool) -> None:
    # The thread's CPU clock is read around about one call in
    # CPU_SAMPLE_EVERY; the estimate scales the calls' wall time by the
    # sampled calls' CPU over wall. Calls that sleep cost next to no CPU;
    # calls that spin cost about their wall time (less where this machine
    # took the CPU away meanwhile, never more).
    n = 40 * loadgen.CPU_SAMPLE_EVERY
    stream = loadgen.Stream([f"k{i}" for i in range(n)], [None] * n, [None] * n, [False] * n)
    store = _TimedStore(spin=spin)
    consumer = loadgen._Consumer(store, stream, 0.0, dict.fromkeys(Status, 0))  # type: ignore[arg-type]
    for i in range(n):
        consumer.single(i)
    assert store.calls == 2 * n  # a claim and a complete each
    assert 0 < consumer._sampled_wall < consumer.busy_seconds  # some calls sampled, not all
    if spin:
        assert 0.5 * consumer.busy_seconds < consumer.busy_cpu_seconds <= consumer.busy_seconds
    else:
        assert consumer.busy_cpu_seconds < 0.2 * consumer.busy_seconds


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_pinned_keeps_the_thread_on_its_cpus_and_gives_the_rest_back() -> None:
    allowed = os.sched_getaffinity(0)
    with loadgen.pinned([max(allowed)]):
        assert os.sched_getaffinity(0) == {max(allowed)}
    assert os.sched_getaffinity(0) == allowed
    with loadgen.pinned(None):
        assert os.sched_getaffinity(0) == allowed
