"""A paced, open-loop load generator: the reference stream against a store.

Events are scheduled at fixed intervals (``1/rate``) from the start, whatever
the store does. A consumer takes what is due and claims it: in ``poll`` mode
everything due at once with ``claim_many`` (as a broker consumer fetches a
batch), in ``batch`` mode fixed batches that the producer delivers whole, in
``single`` mode one ``claim`` per event. It "performs" the NEW effects and
completes them (a few are released instead). A claim's latency is measured from
its *scheduled* time, so a stall delays every event behind it and shows in the
percentiles instead of silently lowering the offered rate (no coordinated
omission).

The mix follows the seeds: mostly new business keys shaped like
``(order_id, version)`` in random order, redeliveries of a key shortly after
its original, a few conflicting intents, a few late replays carrying an old
``event_time``, and a few effects that fail cleanly and are released.

Retention runs during the load: the store's clock is accelerated
(``time_scale`` store seconds per wall second; by default a 12 h horizon
passes in 10 s), so generations rotate, are sealed and filtered, and are
evicted by the store's own background thread while the load runs.
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ._native import NATIVE_BUILD, AcceleratedClock
from .errors import InvalidInputError

try:
    import resource  # POSIX only: the kernel-time figure
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]
from .namespace import generation_length
from .store import (
    DEFAULT_APPLY_INTERVAL,
    DEFAULT_EVICTION_RATE,
    DEFAULT_THREAD_NICE,
    DEFAULT_THREAD_SLICE,
    FILTERS_PER_REFRESH,
    DedupStore,
    check_thread_cpus,
    check_thread_nice,
    check_thread_slice,
)
from .verdicts import Status

NAMESPACE = "bench.orders"
MODES = ("poll", "batch", "single")
#: The reference horizon (SPEC section 8's sizing example) and the default
#: acceleration that fits it into 10 s of wall time.
HORIZON_S = 12 * 3600.0
DEFAULT_TIME_SCALE = HORIZON_S / 10.0
#: The lease in wall seconds: an accelerated clock must not expire a lease
#: while its effect is being "performed".
LEASE_WALL_S = 30.0
#: Late replays reuse a key first sent at least this long ago (store clock);
#: earlier in a run they carry a time this far before the namespace existed.
LATE_AGE_S = 86_400.0


@dataclass(frozen=True)
class LoadConfig:
    rate: float = 18_000.0
    duration: float = 30.0
    durability: str = "sync"
    #: The store's background checkpoint interval (seconds).
    flush_interval: float = 1.0
    #: flush mode: the store's write-behind apply interval (seconds; 0 turns write-behind off).
    apply_interval: float = DEFAULT_APPLY_INTERVAL
    partitions: int | None = None
    #: Nice steps below the consumer at which the store's own threads run
    #: (DedupStore.open's ``thread_nice``).
    thread_nice: int | str = DEFAULT_THREAD_NICE
    #: CPUs the store's own threads are kept on (DedupStore.open's
    #: ``thread_cpus``; None: wherever the process may run).
    thread_cpus: tuple[int, ...] | None = None
    #: The time slice the store's own threads ask for (seconds; 0: the
    #: kernel's; DedupStore.open's ``thread_slice``).
    thread_slice: float = DEFAULT_THREAD_SLICE
    #: CPUs the consumer (the thread that runs the schedule) is kept on for
    #: the run and its floor (None: wherever the process may run).
    consumer_cpus: tuple[int, ...] | None = None
    mode: str = "poll"
    #: Events per producer batch in ``batch`` mode.
    batch: int = 100
    #: Most events one poll takes in ``poll`` mode (a broker fetch).
    max_batch: int = 1000
    #: Store-clock seconds per wall second (1.0 = real time).
    time_scale: float = DEFAULT_TIME_SCALE
    horizon: float = HORIZON_S
    bloom: bool = True
    eviction: bool = True
    duplicate_share: float = 0.06
    conflict_share: float = 0.01
    late_share: float = 0.01
    release_share: float = 0.02
    #: How long past ``duration`` a consumer that fell behind may keep claiming
    #: the backlog (default: half the duration, at least 5 s); what is left
    #: then is reported unclaimed.
    drain: float | None = None
    #: A redelivery repeats one of the new keys sent between ``redelivery_gap``
    #: and ``redelivery_window`` events earlier (about 0.05-0.5 s at 18,000/s).
    redelivery_gap: int = 1000
    redelivery_window: int = 10_000
    seed: int = 1

    def check(self) -> None:
        """Refuse settings the generator cannot honour, naming the limit."""
        if self.mode not in MODES:
            raise InvalidInputError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if not 0 < self.rate <= 10_000_000:
            raise InvalidInputError(f"rate must be in (0, 10,000,000] events/s; got {self.rate!r}")
        if not 0 < self.duration <= 86_400:
            raise InvalidInputError(f"duration must be in (0, 86,400] s; got {self.duration!r}")
        if self.drain is not None and not 0 <= self.drain <= 86_400:
            raise InvalidInputError(f"drain must be in [0, 86,400] s; got {self.drain!r}")
        if not 1 <= self.batch <= 100_000 or not 1 <= self.max_batch <= 100_000:
            raise InvalidInputError(f"batch sizes must be 1..100,000; got {self.batch} and {self.max_batch}")
        check_thread_nice(self.thread_nice)  # before the stream is made, not at the store's open
        check_thread_cpus(self.thread_cpus)
        check_thread_slice(self.thread_slice)
        check_thread_cpus(self.consumer_cpus, "consumer_cpus")
        if not 1 <= self.time_scale <= 1_000_000:
            raise InvalidInputError(f"time_scale must be 1..1,000,000; got {self.time_scale!r}")
        if self.rate * self.duration > 50_000_000:
            raise InvalidInputError(
                f"rate x duration must be at most 50,000,000 events (the stream is made in memory first); "
                f"got {self.rate * self.duration:,.0f}"
            )


@dataclass
class Stream:
    """The whole stream, made before the clock starts so that generating it
    costs nothing in the measured CPU share. ``times`` are store-clock offsets
    from the start of the run (None: no event_time)."""

    keys: list[str]
    intents: list[object]
    times: list[float | None]
    releases: list[bool]


def make_stream(config: LoadConfig, total: int | None = None) -> Stream:
    """``total`` events (default ``rate x duration``) of the reference mix."""
    rng = random.Random(config.seed)
    n = int(config.rate * config.duration) if total is None else total
    virtual_interval = config.time_scale / config.rate  # store seconds between events
    late_lag = int(LATE_AGE_S / virtual_interval) + 1  # events back to a key old enough to replay late
    keys: list[str] = []
    intents: list[object] = []
    times: list[float | None] = []
    releases: list[bool] = []
    fresh: list[int] = []  # stream positions of new keys, for redeliveries and late replays
    amounts: list[int] = []
    dup = config.duplicate_share
    conflict = dup + config.conflict_share
    late = conflict + config.late_share
    for i in range(n):
        r = rng.random()
        t: float | None = None
        lo = len(fresh) - config.redelivery_window
        hi = len(fresh) - config.redelivery_gap
        if r < conflict and hi > 0:
            j = fresh[rng.randrange(max(0, lo), hi)]
            key, amount = keys[j], amounts[j] + (r >= dup)
        elif conflict <= r < late:
            # A replay from the archive: the key and event_time of an event
            # sent a day ago (store clock), or, before a day has passed, a new
            # key dated a day before the namespace existed.
            if i >= late_lag:
                j = rng.randrange(0, i - late_lag + 1)
                key, amount, t = keys[j], amounts[j], j * virtual_interval
            else:
                key, amount, t = f"order-{rng.getrandbits(48):012x}:v1", rng.randrange(1, 100_000), -LATE_AGE_S
        else:
            key = f"order-{rng.getrandbits(48):012x}:v{rng.randrange(1, 4)}"
            amount = rng.randrange(1, 100_000)
            fresh.append(i)
        keys.append(key)
        amounts.append(amount)
        intents.append({"amount": amount, "currency": "EUR"})
        times.append(t)
        releases.append(rng.random() < config.release_share)
    return Stream(keys, intents, times, releases)


@dataclass
class LoadReport:
    config: LoadConfig
    path: str
    #: Events scheduled, and of those claimed before the drain deadline.
    scheduled: int = 0
    claimed: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    #: Of cpu_seconds, in the kernel (page writes, fsync, faults).
    cpu_system_seconds: float = 0.0
    #: Bytes the store's block device wrote during the run (Linux
    #: /sys/dev/block; 0 where it cannot be read, as for tmpfs). The device
    #: counts every process's writes, the store's among them. (getrusage's
    #: ru_oublock counts pages as they are dirtied, on newer kernels a whole
    #: large folio at a time, far more than a journal record written over
    #: zeros costs the disk: benches/bench_core.py's "records" line shows both.)
    written_bytes: int = 0
    #: Wall and CPU seconds the consumer's thread spent in store calls
    #: (claim, complete and release of each round; not its own work between
    #: them, which is the load generator's): how busy the store kept it.
    store_call_seconds: float = 0.0
    store_call_cpu_seconds: float = 0.0
    #: The same consumer's rounds run back to back once the run is over (no
    #: wait between them, so caches stay warm; :data:`BACK_TO_BACK_EVENTS`
    #: of the run's last events, under keys of their own, in rounds of the
    #: run's sizes): the CPU seconds of their store calls, and the rounds.
    #: Against store_call_cpu_seconds per round, what the consumer's waits
    #: between rounds cost its calls on this machine (docs/cli/bench.md).
    back_to_back_cpu_seconds: float = 0.0
    back_to_back_rounds: int = 0
    #: CPU seconds of the store's own threads (checkpoints, applies,
    #: eviction, filters: every thread named ``dedupstore-*``) over the run.
    #: With store_call_cpu_seconds, what the store cost; the rest of
    #: cpu_seconds is the load generator's (its schedule, its bookkeeping).
    background_cpu_seconds: float = 0.0
    #: Write-behind applies (LMDB transactions of the windows, flush or
    #: sync mode) and the wall time they took; of them, those whose puts the
    #: store's calls made (flush mode), the slices of puts the
    #: calls made and the wall time that took: time the consumer was not claiming.
    applies: int = 0
    apply_seconds: float = 0.0
    #: Of apply_seconds, the commits' (LMDB writing the dirty pages out).
    apply_commit_seconds: float = 0.0
    helped_applies: int = 0
    call_slices: int = 0
    call_slice_seconds: float = 0.0
    #: Flush-mode log segments zeroed for reuse at a rotation (not deleted).
    recycled_segments: int = 0
    #: Claim latency of each event in stream order, from its scheduled time (us);
    #: for an unclaimed event, the time it had waited when the run stopped (a
    #: lower bound, so a run cut short never looks faster than it was).
    latencies_us: list[float] = field(default_factory=list)
    #: Each consumer round's wall time (claim, then complete or release), and
    #: how late it began after it could have (its first event due, the round
    #: before it done): the loop's wake-up delay (us). Where a p99 comes from:
    #: long rounds, or rounds that began late.
    call_us: list[float] = field(default_factory=list)
    late_us: list[float] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    bytes_on_disk: int = 0
    store_seconds: float = 0.0
    evicted: int = 0
    eviction_lag_max: float = 0.0
    eviction_lag_end: float = 0.0
    frontier_advance: float = 0.0
    filters: int = 0
    #: Generations read in LMDB by the run's probes (prefilter "probes_read"):
    #: what the filters did not spare.
    probe_reads: int = 0
    _sorted: list[float] | None = field(default=None, repr=False)

    @property
    def achieved_rate(self) -> float:
        return self.claimed / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def store_cpu_share(self) -> float:
        """The store's part of :attr:`cpu_share`: the consumer's store calls
        and the store's background threads."""
        busy = self.store_call_cpu_seconds + self.background_cpu_seconds
        return busy / self.wall_seconds if self.wall_seconds else 0.0

    def percentile(self, q: float) -> float:
        return _percentile(self._latencies_sorted(), q)

    def _latencies_sorted(self) -> list[float]:
        if self._sorted is None or len(self._sorted) != len(self.latencies_us):
            self._sorted = sorted(self.latencies_us)
        return self._sorted

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "rate": c.rate,
            "duration_seconds": c.duration,
            "durability": c.durability,
            "flush_interval_seconds": c.flush_interval,
            "apply_interval_seconds": c.apply_interval,
            "thread_nice": c.thread_nice,
            "thread_cpus": None if c.thread_cpus is None else sorted(c.thread_cpus),
            "thread_slice_seconds": c.thread_slice,
            "consumer_cpus": None if c.consumer_cpus is None else sorted(c.consumer_cpus),
            "mode": c.mode,
            "batch": c.batch if c.mode == "batch" else (c.max_batch if c.mode == "poll" else 1),
            "path": self.path,
            "events": self.scheduled,
            "claimed": self.claimed,
            "unclaimed": self.scheduled - self.claimed,
            "achieved_rate": round(self.achieved_rate, 1),
            **_quantiles(self._latencies_sorted()),
            "cpu_share": round(self.cpu_share, 4),
            "cpu_system_share": round(self.cpu_system_seconds / self.wall_seconds, 4) if self.wall_seconds else 0.0,
            "store_cpu_share": round(self.store_cpu_share, 4),
            "store_background_cpu_share": (
                round(self.background_cpu_seconds / self.wall_seconds, 4) if self.wall_seconds else 0.0
            ),
            "written_bytes": self.written_bytes,
            "written_bytes_per_event": round(self.written_bytes / self.claimed) if self.claimed else 0,
            "batches": self.batches,
            "mean_batch": round(self.claimed / self.batches, 1) if self.batches else 0.0,
            "store_call_share": round(self.store_call_seconds / self.wall_seconds, 4) if self.wall_seconds else 0.0,
            "store_call_us": round(self.store_call_seconds / self.batches * 1e6, 1) if self.batches else 0.0,
            "store_call_cpu_us": round(self.store_call_cpu_seconds / self.batches * 1e6, 1) if self.batches else 0.0,
            "store_call_back_to_back_cpu_us": (
                round(self.back_to_back_cpu_seconds / self.back_to_back_rounds * 1e6, 1)
                if self.back_to_back_rounds else None
            ),
            "rounds": _quantiles(sorted(self.call_us)),
            "late_starts": _quantiles(sorted(self.late_us)),
            "verdicts": self.verdicts,
            "bytes_on_disk": self.bytes_on_disk,
            "time_scale": c.time_scale,
            "horizon_seconds": c.horizon,
            "store_seconds": round(self.store_seconds, 1),
            "eviction": {
                "enabled": c.eviction,
                "evicted": self.evicted,
                "lag_seconds_max": round(self.eviction_lag_max, 1),
                "lag_seconds_end": round(self.eviction_lag_end, 1),
                "frontier_advance_seconds": round(self.frontier_advance, 1),
            },
            "bloom": {
                "enabled": c.bloom, "filters": self.filters, "probe_reads": self.probe_reads,
                "probe_reads_per_event": round(self.probe_reads / self.claimed, 3) if self.claimed else 0.0,
            },
            "applies": {
                "count": self.applies,
                "mean_us": round(self.apply_seconds / self.applies * 1e6, 1) if self.applies else 0.0,
                "commit_mean_us": round(self.apply_commit_seconds / self.applies * 1e6, 1) if self.applies else 0.0,
                "helped": self.helped_applies,
                "slices_in_calls": self.call_slices,
                "slice_mean_us": (
                    round(self.call_slice_seconds / self.call_slices * 1e6, 1) if self.call_slices else 0.0
                ),
                "in_calls_share": round(self.call_slice_seconds / self.wall_seconds, 4) if self.wall_seconds else 0.0,
                "recycled_segments": self.recycled_segments,
            },
        }


def machine() -> dict[str, Any]:
    """What a run's CPU and latency figures depend on besides the store's
    own code: the CPUs this process may run on, the Python that runs it (a
    Python built with PGO and LTO, as Debian's, runs the same calls in
    fewer instructions: docs/benchmarks.md) and the native core's build
    (plain or profile-guided: docs/build.md)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return {
        "cpus": cpus,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": os.path.realpath(sys.executable),
        "native_build": NATIVE_BUILD,
    }


def _disk_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*.mdb"))


def run_load(
    config: LoadConfig,
    path: str | os.PathLike[str] | None = None,
    progress: Callable[[float, LoadReport], None] | None = None,
    stream: Stream | None = None,
    back_to_back: bool = True,
) -> LoadReport:
    """Drive a store at ``config.rate`` for ``config.duration`` seconds.

    ``path`` defaults to a fresh temporary directory (removed afterwards).
    ``progress`` is called about once a second with the fraction done.
    ``stream`` reuses events made by :func:`make_stream` (default: made here,
    before the clock starts). ``back_to_back``: once the figures are taken,
    run the consumer's rounds again back to back (the report's
    ``back_to_back_*`` fields; off, they stay 0).
    """
    config.check()
    if stream is None:
        stream = make_stream(config)
    # The stream is millions of objects the consumer never frees: left to
    # the cyclic GC, every full collection would walk them all, a pause of
    # milliseconds in the consumer that a real one (reading from a broker)
    # would not have. Frozen, the collector skips them.
    gc.collect()
    gc.freeze()
    try:
        if path is None:
            with tempfile.TemporaryDirectory(prefix="dedupstore-bench-") as tmp:
                return _run(config, Path(tmp) / "store", progress, stream, back_to_back)
        return _run(config, Path(path), progress, stream, back_to_back)
    finally:
        gc.unfreeze()


class _Consumer:
    """The consumer side: claims, then completes or releases the leased effects."""

    def __init__(self, store: DedupStore, stream: Stream, base: float, counts: dict[Status, int]) -> None:
        self.store = store
        self.keys = stream.keys
        self.intents = stream.intents
        self.releases = stream.releases
        # Absolute event times, made before the clock starts.
        self.times = [None if t is None else base + t for t in stream.times]
        self.counts = counts
        self.done = 0.0  # perf_counter() when the last claim returned
        #: Wall seconds the consumer's thread spent in store calls (claims,
        #: completes, releases); busy_cpu_seconds is their CPU time.
        self.busy_seconds = 0.0
        # The thread's CPU clock is a system call (585 ns a read on the
        # machine of docs/benchmarks.md, where perf_counter takes 45 ns),
        # and part of each read falls inside the call it brackets: read
        # around every call, the reads took 6% of the main job's perf
        # samples. So it is read around a random one call in
        # CPU_SAMPLE_EVERY (the first always), less what the reads cost.
        self._rng = random.Random(0x5EED)
        self._until_sample = 1
        self._sampled_cpu = 0.0
        self._sampled_wall = 0.0
        self._cpu_read_cost = _cpu_read_cost()

    def batch(self, start: int, end: int) -> None:
        store, releases, counts, keys = self.store, self.releases, self.counts, self.keys
        names, intents, times = keys[start:end], self.intents[start:end], self.times[start:end]
        began = self._begin()
        batch = store.claim_many(NAMESPACE, names, intents, event_times=times)
        self.done = self._end(began)
        completes: list[tuple[bytes | str, int, bytes | str]] = []
        released: list[tuple[bytes | str, int]] = []
        # The columns, not a ClaimResult per key: what a consumer that only
        # needs verdicts and tokens reads (BatchResult's docstring).
        for status in batch.statuses:
            counts[status] += 1
        for i, token in enumerate(batch.tokens, start):
            if token is None:
                continue
            if releases[i]:
                released.append((keys[i], token))
            else:
                completes.append((keys[i], token, b"ok"))
        if completes or released:
            began = self._begin()
            if completes:
                store.complete_many(NAMESPACE, completes)
            if released:
                store.release_many(NAMESPACE, released)
            self._end(began)

    def single(self, i: int) -> None:
        store = self.store
        began = self._begin()
        res = store.claim(NAMESPACE, self.keys[i], self.intents[i], event_time=self.times[i])
        self.done = self._end(began)
        self.counts[res.status] += 1
        if res.token is not None:
            began = self._begin()
            if self.releases[i]:
                store.release(NAMESPACE, res.key, res.token)
            else:
                store.complete(NAMESPACE, res.key, res.token, b"ok")
            self._end(began)

    # Only the store's calls are timed: the consumer's own work between a
    # claim and its completion (the counts, the lists) is the load
    # generator's, as in a real consumer.

    def _begin(self) -> tuple[float, float]:
        """(perf_counter(), the thread's CPU clock or -1.0 where this call
        is not sampled) at a store call's start."""
        self._until_sample -= 1
        if self._until_sample:
            return time.perf_counter(), -1.0
        self._until_sample = self._rng.randint(1, 2 * CPU_SAMPLE_EVERY - 1)
        cpu = time.thread_time()
        return time.perf_counter(), cpu

    def _end(self, began: tuple[float, float]) -> float:
        """Charges the store call begun at ``began`` to busy_seconds (and a
        sampled call to the CPU estimate); returns perf_counter() at its end."""
        now = time.perf_counter()
        wall = now - began[0]
        self.busy_seconds += wall
        if began[1] >= 0.0:
            self._sampled_cpu += time.thread_time() - began[1] - self._cpu_read_cost
            self._sampled_wall += wall
        return now

    @property
    def busy_cpu_seconds(self) -> float:
        """The CPU time of the store calls: their wall time, times the
        sampled calls' CPU over wall (at most 1: one thread makes them)."""
        if self._sampled_wall <= 0.0:
            return 0.0
        return self.busy_seconds * min(1.0, max(0.0, self._sampled_cpu / self._sampled_wall))


#: The consumer reads its thread's CPU clock around one store call in this
#: many, chosen at random (_Consumer._begin).
CPU_SAMPLE_EVERY = 8


def _cpu_read_cost() -> float:
    """What a sampled call's CPU reading adds to it: the median, over 101
    tries, of two reads of the thread's CPU clock with the two perf_counter
    reads of a call between them."""
    costs = []
    for _ in range(101):
        cpu = time.thread_time()
        time.perf_counter()
        time.perf_counter()
        costs.append(time.thread_time() - cpu)
    costs.sort()
    return costs[len(costs) // 2]


class PrefilterRefresher:
    """Keeps the Bloom prefilter up to date for a store opened with eviction
    off: the store's background thread does both jobs, so without it no
    generation would get a filter and "eviction off" would also mean "Bloom
    off". Refreshes about once a second, as that thread does."""

    def __init__(self, store: DedupStore) -> None:
        self._store = store
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dedupstore-bench-prefilter", daemon=True)

    def _run(self) -> None:
        self._store._as_own_thread()  # as the store's thread would run
        while not self._stop.wait(1.0):
            self._store.refresh_prefilter(limit=FILTERS_PER_REFRESH)

    def __enter__(self) -> PrefilterRefresher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _retention(stats: dict[str, Any]) -> dict[str, Any]:
    ns: dict[str, Any] = stats["namespaces"][NAMESPACE]
    return ns


#: The write-behind figures the report sums over partitions.
_APPLY_FIGURES = (
    "applies", "apply_seconds", "apply_commit_seconds", "helped_applies", "call_slices", "call_slice_seconds",
    "recycled_segments",
)


def _applies(stats: dict[str, Any]) -> dict[str, float]:
    """The write-behind windows' apply figures, summed over partitions."""
    wbs = [p["write_behind"] for p in stats["partition_stats"] if p.get("write_behind")]
    return {k: sum(wb[k] for wb in wbs) for k in _APPLY_FIGURES}


def _run(
    config: LoadConfig, root: Path, progress: Callable[[float, LoadReport], None] | None, stream: Stream,
    back_to_back: bool,
) -> LoadReport:
    report = LoadReport(config=config, path=str(root))
    clock = AcceleratedClock(config.time_scale)
    with DedupStore.open(
        root,
        durability=config.durability,
        flush_interval=config.flush_interval,
        apply_interval=config.apply_interval,
        partitions=config.partitions,
        bloom=config.bloom,
        clock=clock,
        eviction_rate=DEFAULT_EVICTION_RATE if config.eviction else 0,
        thread_nice=config.thread_nice,
        thread_cpus=config.thread_cpus,
        thread_slice=config.thread_slice,
    ) as store:
        lease = min(LEASE_WALL_S * config.time_scale, 7 * 86_400.0)
        store.ensure_namespace(NAMESPACE, horizon=config.horizon, lease=lease)
        with contextlib.ExitStack() as stack:
            if config.bloom and not config.eviction:
                stack.enter_context(PrefilterRefresher(store))
            sizes = _drive(config, store, stream, clock, report, progress)
            if back_to_back:
                report.back_to_back_cpu_seconds, report.back_to_back_rounds = _back_to_back(
                    store, stream, clock.base, sizes
                )
    report.bytes_on_disk = _disk_bytes(root)
    return report


def block_device_stat(path: Path) -> Path | None:
    """The I/O counters of the block device ``path`` is on (Linux)."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return stat if stat.is_file() else None


def sectors_written(stat: Path | None) -> int | None:
    if stat is None:
        return None
    try:
        return int(stat.read_text().split()[6])  # Documentation/block/stat.rst: write sectors
    except (OSError, ValueError, IndexError):
        return None


def _shape(config: LoadConfig) -> tuple[int, int]:
    """(events that share a scheduled time, most events one call takes):
    a producer batch in ``batch`` mode, a broker fetch in ``poll`` mode."""
    step = config.batch if config.mode == "batch" else 1
    take = config.max_batch if config.mode == "poll" else step
    return step, take


def _paced(
    total: int,
    interval: float,
    step: int,
    take: int,
    limit: float,
    serve: Callable[[int, int], float],
    latencies: list[float],
    tick: Callable[[int, float], None] | None = None,
    calls_us: list[float] | None = None,
    late_us: list[float] | None = None,
) -> tuple[float, int, int]:
    """The open-loop schedule: event ``i`` is due at ``i * interval`` from
    the start (a group of ``step`` at the time of its first), whatever
    ``serve`` does. ``serve(start, end)`` answers events ``start..end-1`` (at
    most ``take``, all due) and returns ``perf_counter()`` at the answer; each
    event's latency from its due time is appended to ``latencies`` (us).
    Stops after ``limit`` seconds even with events left. ``tick(sent,
    elapsed)`` is called about once a second. ``calls_us`` gets each call's
    wall time (to its return, which may come after its answer) and
    ``late_us`` how late each began: after the moment it could have (its
    first event due and the call before it returned), the loop's wake-up
    delay (us). Returns (start time, events answered, calls)."""
    t0 = time.perf_counter()
    next_tick = t0 + 1.0
    deadline = t0 + limit
    sent = calls = 0
    free = t0  # when the last call returned
    while sent < total:
        now = time.perf_counter()
        if now > deadline:
            break
        due = min(total, (int((now - t0) / (interval * step)) + 1) * step)
        if due <= sent:
            time.sleep(max(0.0, t0 + sent * interval - now))
            continue
        end = min(due, sent + take)
        done = serve(sent, end)
        if calls_us is not None or late_us is not None:
            after = time.perf_counter()  # the round may go on after its answer (completes)
            if calls_us is not None:
                calls_us.append((after - now) * 1e6)
            if late_us is not None:
                late_us.append((now - max(free, t0 + (sent - sent % step) * interval)) * 1e6)
            free = after
        since = done - t0
        if step == 1:
            latencies.extend((since - i * interval) * 1e6 for i in range(sent, end))
        else:
            latencies.extend((since - (i - i % step) * interval) * 1e6 for i in range(sent, end))
        sent = end
        calls += 1
        if tick is not None and done >= next_tick:
            next_tick = done + 1.0
            tick(sent, since)
    return t0, sent, calls


def _thread_cpu() -> dict[int, float]:
    """CPU seconds so far of each of the store's threads (named
    ``dedupstore-*``) by thread id; none where the platform has no
    per-thread clocks."""
    out: dict[int, float] = {}
    for t in threading.enumerate():
        if t.ident is None or not t.name.startswith("dedupstore-"):
            continue
        try:
            out[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (AttributeError, OSError):  # no per-thread clock here, or the thread just ended
            continue
    return out


def _quantiles(data: list[float]) -> dict[str, float]:
    """p50, p99, p99.9 and max of sorted ``data`` (us)."""
    return {
        "p50_us": round(_percentile(data, 0.50), 1),
        "p99_us": round(_percentile(data, 0.99), 1),
        "p999_us": round(_percentile(data, 0.999), 1),
        "max_us": round(data[-1] if data else 0.0, 1),
    }


def _percentile(data: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``data`` (0 when empty)."""
    if not data:
        return 0.0
    return data[min(len(data) - 1, int(q * len(data)))]


#: How long ``dedupstore bench`` measures the machine's own floor by default.
FLOOR_SECONDS = 2.0


def machine_floor(config: LoadConfig, seconds: float = FLOOR_SECONDS) -> dict[str, float]:
    """The latency the schedule itself costs on this machine: ``config``'s
    pacing for ``seconds`` with no store, each due event answered at once.
    What is left is the loop's sleep and wake-up (timer slack, the scheduler,
    a virtual CPU's halt and resume): a floor under every run's percentiles,
    measured the same way (from the scheduled time), and the CPU share the
    schedule alone takes."""
    if not 0 < seconds <= 600:
        raise InvalidInputError(f"the floor's duration must be in (0, 600] s; got {seconds!r}")
    step, take = _shape(config)
    latencies: list[float] = []
    cpu0 = time.process_time()
    with pinned(config.consumer_cpus):
        t0, _, _ = _paced(int(config.rate * seconds), 1.0 / config.rate, step, take, seconds + 1.0, _now, latencies)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    latencies.sort()
    return {
        "seconds": seconds,
        "events": len(latencies),
        "cpu_share": round(cpu / wall, 4) if wall > 0 else 0.0,
        **_quantiles(latencies),
    }


@contextlib.contextmanager
def pinned(cpus: Iterable[int] | None) -> Iterator[None]:
    """The calling thread kept on ``cpus`` meanwhile (None: left alone),
    then given back the CPUs it had."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _now(start: int, end: int) -> float:
    return time.perf_counter()


def _drive(
    config: LoadConfig,
    store: DedupStore,
    stream: Stream,
    clock: AcceleratedClock,
    report: LoadReport,
    progress: Callable[[float, LoadReport], None] | None,
) -> list[int] | None:
    """The measured part: the schedule, the consumer, the figures. Returns
    the events of each round (None: single claims)."""
    total = len(stream.keys)
    counts = dict.fromkeys(Status, 0)
    consumer = _Consumer(store, stream, clock.base, counts)
    stats0 = store.stats()
    ret0 = _retention(stats0)
    frontier0, reads0 = ret0["frontier"], ret0["prefilter"]["probes_read"]
    applies0 = _applies(stats0)
    interval = 1.0 / config.rate
    step, take = _shape(config)
    single = config.mode == "single"
    cpu0 = time.process_time()
    use0 = None if resource is None else resource.getrusage(resource.RUSAGE_SELF)
    device = block_device_stat(store.path)
    written0 = sectors_written(device)
    threads0 = _thread_cpu()

    sizes: list[int] = []

    def serve(start: int, end: int) -> float:
        if single:
            consumer.single(start)
        else:
            sizes.append(end - start)
            consumer.batch(start, end)
        return consumer.done

    def tick(sent: int, elapsed: float) -> None:
        # Not stats(): it applies every window and counts what is pending, milliseconds in this thread.
        report.eviction_lag_max = max(report.eviction_lag_max, store._eviction_lag(NAMESPACE))
        if progress is not None:
            report.claimed = sent
            report.wall_seconds = elapsed
            progress(sent / total, report)

    limit = config.duration + (max(5.0, config.duration / 2) if config.drain is None else config.drain)
    clock.start()
    with pinned(config.consumer_cpus):
        t0, sent, report.batches = _paced(
            total, interval, step, take, limit, serve, report.latencies_us, tick, report.call_us, report.late_us
        )
    stop = time.perf_counter()
    report.wall_seconds = stop - t0
    # The parts first, the whole last: the process's CPU is read over a span
    # that holds those of its threads' and its kernel time (each read on
    # its own clock), so neither part can come out larger than the whole.
    threads1 = _thread_cpu()
    use1 = None if use0 is None else resource.getrusage(resource.RUSAGE_SELF)
    report.cpu_seconds = time.process_time() - cpu0
    # A thread started during the run counts from zero; one that ended is
    # not counted (the store's threads live as long as it does).
    report.background_cpu_seconds = sum(c - threads0.get(ident, 0.0) for ident, c in threads1.items())
    report.store_call_seconds = consumer.busy_seconds
    report.store_call_cpu_seconds = consumer.busy_cpu_seconds
    if use0 is not None and use1 is not None:
        report.cpu_system_seconds = use1.ru_stime - use0.ru_stime
    written1 = sectors_written(device)
    if written0 is not None and written1 is not None:
        report.written_bytes = (written1 - written0) * 512  # the kernel counts 512-byte sectors
    report.store_seconds = clock() - clock.base
    report.scheduled = total
    report.claimed = sent
    report.latencies_us.extend((stop - t0 - (i - i % step) * interval) * 1e6 for i in range(sent, total))
    report.verdicts = {s.name: n for s, n in counts.items()}
    stats1 = store.stats()
    applies1 = _applies(stats1)
    delta = {k: applies1[k] - applies0[k] for k in _APPLY_FIGURES}
    report.applies, report.helped_applies = int(delta["applies"]), int(delta["helped_applies"])
    report.call_slices, report.call_slice_seconds = int(delta["call_slices"]), delta["call_slice_seconds"]
    report.apply_seconds = delta["apply_seconds"]
    report.apply_commit_seconds = delta["apply_commit_seconds"]
    report.recycled_segments = int(delta["recycled_segments"])
    ret = _retention(stats1)
    report.evicted = ret["evicted"]
    report.eviction_lag_end = ret["eviction_lag_seconds"]
    report.eviction_lag_max = max(report.eviction_lag_max, report.eviction_lag_end)
    report.frontier_advance = ret["frontier"] - frontier0
    report.filters = ret["prefilter"]["filters"]
    report.probe_reads = ret["prefilter"]["probes_read"] - reads0
    return None if single else sizes


#: Events the consumer's rounds take again back to back after a run (_back_to_back).
BACK_TO_BACK_EVENTS = 20_000


def _back_to_back(store: DedupStore, stream: Stream, base: float, sizes: list[int] | None) -> tuple[float, int]:
    """(CPU seconds of the store calls, rounds) of the consumer's rounds run
    once more with no wait between them: the last BACK_TO_BACK_EVENTS events
    of ``stream`` under keys of their own (a new key is new again, a repeat
    of one of them repeats it, a late replay is as late), in rounds of
    ``sizes`` in the run's order (None: single claims). Nothing
    runs between the calls but the consumer's own bookkeeping, so they find
    their code and data in the caches: the calls' cost without the refill
    after the run's waits."""
    if sizes is not None and not sizes:
        return 0.0, 0  # the run made no round to copy
    n = min(len(stream.keys), BACK_TO_BACK_EVENTS)
    first = len(stream.keys) - n
    own = Stream(
        [f"b2b:{k}" for k in stream.keys[first:]], stream.intents[first:], stream.times[first:],
        stream.releases[first:],
    )
    consumer = _Consumer(store, own, base, dict.fromkeys(Status, 0))
    if sizes is None:
        for i in range(n):
            consumer.single(i)
        return consumer.busy_cpu_seconds, n
    start = rounds = 0
    while start < n:
        end = min(n, start + sizes[rounds % len(sizes)])
        consumer.batch(start, end)
        start = end
        rounds += 1
    return consumer.busy_cpu_seconds, rounds


def generations_per_second(config: LoadConfig) -> float:
    """How many generations the accelerated clock rotates through per wall second."""
    return config.time_scale / (generation_length(config.horizon) / 1e6)


# ------------------------------------------------------------ sustainable rate

#: A ramp step with fewer events has no meaningful p99.
MIN_STEP_EVENTS = 200


@dataclass(frozen=True)
class RampStep:
    rate: float
    achieved_rate: float
    p50_us: float
    p99_us: float
    cpu_share: float
    ok: bool
    #: The same rate again, after a try of it that was not sustained.
    retry: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": round(self.rate, 1),
            "achieved_rate": round(self.achieved_rate, 1),
            "p50_us": round(self.p50_us, 1),
            "p99_us": round(self.p99_us, 1),
            "cpu_share": round(self.cpu_share, 4),
            "ok": self.ok,
            "retry": self.retry,
        }


@dataclass
class RampResult:
    mode: str
    batch: int
    p99_limit_us: float
    steps: list[RampStep] = field(default_factory=list)

    @property
    def max_rate(self) -> float | None:
        """The highest offered rate that was sustained (None: not even the first)."""
        passed = [s.rate for s in self.steps if s.ok]
        return max(passed) if passed else None

    @property
    def capped(self) -> bool:
        """Every rate tried was sustained (at one of its tries): the ramp ran
        out of steps before it found a rate that is not, so :attr:`max_rate`
        is only a lower bound."""
        passed = {s.rate for s in self.steps if s.ok}
        return bool(self.steps) and all(s.rate in passed for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        best = self.max_rate
        return {
            "mode": self.mode,
            "batch": self.batch,
            "p99_limit_us": self.p99_limit_us,
            "max_rate": None if best is None else round(best, 1),
            "capped": self.capped,
            "steps": [s.to_dict() for s in self.steps],
        }


def find_max_rate(
    config: LoadConfig,
    *,
    start: float,
    factor: float = 1.5,
    step_seconds: float = 3.0,
    p99_limit_us: float = 1000.0,
    min_achieved: float = 0.95,
    refine: int = 2,
    max_steps: int = 20,
    retries: int = 1,
    on_step: Callable[[RampStep], None] | None = None,
) -> RampResult:
    """Ramp the offered rate until a step is not sustained, then narrow down.

    Each step is a fresh store under ``config`` at one rate for
    ``step_seconds``. A step is sustained when its claim p99 (from the
    scheduled time) is at most ``p99_limit_us`` and it achieved at least
    ``min_achieved`` of the offered rate. The rate grows by ``factor`` per step
    until one fails (or, when ``start`` already fails, shrinks by it until one
    passes, then tries the lowest failed rate once more, and grows again from
    it if it passes now); then ``refine`` bisections (geometric) between the
    highest sustained rate and the lowest failed one. At most ``max_steps`` steps
    before the bisections (the result is then :attr:`RampResult.capped` if
    none failed), and none of fewer than MIN_STEP_EVENTS events.

    A rate that is not sustained is tried ``retries`` more times (each a
    step of its own in the result) before it counts as failed: a step's p99
    is its 1% worst events, which for batches of 100 at 10,000/s in 3 s are
    three batches, so one stall of the machine's (a CPU taken for a
    millisecond by another process) would fail a rate the store sustains.
    A rate the store cannot sustain fails every try.
    """
    if factor <= 1.0 or start <= 0 or refine < 0 or max_steps < 1 or retries < 0:
        raise InvalidInputError(
            "find_max_rate needs start > 0, factor > 1, refine >= 0, max_steps >= 1, retries >= 0"
        )
    result = RampResult(config.mode, config.batch if config.mode == "batch" else 1, p99_limit_us)

    def attempt(rate: float) -> bool:
        for n in range(1 + retries):
            # A step whose backlog is not gone a second after it ends has failed.
            rep = run_load(replace(config, rate=rate, duration=step_seconds, drain=1.0), back_to_back=False)
            ok = rep.percentile(0.99) <= p99_limit_us and rep.achieved_rate >= min_achieved * rate
            st = RampStep(rate, rep.achieved_rate, rep.percentile(0.5), rep.percentile(0.99), rep.cpu_share, ok,
                          retry=n > 0)
            result.steps.append(st)
            if on_step is not None:
                on_step(st)
            if ok:
                return True
        return False

    good: float | None = None
    bad: float | None = None
    rate = start
    rechecked = False
    for _ in range(max_steps):
        if attempt(rate):
            good = rate
            if bad is None:
                rate *= factor
                continue
            # Only a ramp that went down finds a failed rate above one that
            # passes: going up, the first failure ends the loop.
            if not rechecked:
                # The start failed and a lower rate passed. The start's tries
                # came first, one after the other: a spell of the machine's
                # (another process's burst) fails them all, and a bound
                # taken from them would hold the whole search under it. So
                # the failed rate is tried once more, and if it passes now
                # the ramp goes on up from it.
                rechecked = True
                rate, bad = bad, None
                continue
            break
        bad = rate
        if good is not None:
            break
        rate /= factor  # not even the start: ramp down instead
        if rate * step_seconds < MIN_STEP_EVENTS:
            break
    if good is not None and bad is not None:
        for _ in range(refine):
            mid = (good * bad) ** 0.5
            if attempt(mid):
                good = mid
            else:
                bad = mid
    return result
