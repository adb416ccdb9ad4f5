"""A paced, open-loop load generator: the reference stream against a store.

Events are scheduled at fixed intervals (``1/rate``) from the start, whatever
the store does; a consumer loop polls everything that is due (as a broker
consumer fetches a batch), claims it with ``claim_many``, "performs" the NEW
effects and completes them with ``complete_many``. A claim's latency is measured
from its *scheduled* time, so a stall delays every event behind it and shows in
the percentiles instead of silently lowering the offered rate (no coordinated
omission).

The mix follows the seeds: mostly new business keys shaped like
``(order_id, version)`` in random order, redeliveries of recent keys, a few
conflicting intents, a few late replays carrying an old ``event_time``, and a
few effects that fail cleanly and are released.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .store import DedupStore
from .verdicts import Status

NAMESPACE = "bench.orders"


@dataclass(frozen=True)
class LoadConfig:
    rate: float = 18_000.0
    duration: float = 30.0
    durability: str = "sync"
    partitions: int | None = None
    max_batch: int = 1000
    duplicate_share: float = 0.06
    conflict_share: float = 0.01
    late_share: float = 0.01
    release_share: float = 0.02
    seed: int = 1


@dataclass
class LoadReport:
    config: LoadConfig
    path: str
    offered: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    latencies_us: list[float] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    bytes_on_disk: int = 0

    @property
    def achieved_rate(self) -> float:
        return self.offered / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds else 0.0

    def percentile(self, q: float) -> float:
        data = sorted(self.latencies_us)
        if not data:
            return 0.0
        return data[min(len(data) - 1, int(q * len(data)))]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.config.rate,
            "duration_seconds": self.config.duration,
            "durability": self.config.durability,
            "path": self.path,
            "events": self.offered,
            "achieved_rate": round(self.achieved_rate, 1),
            "p50_us": round(self.percentile(0.50), 1),
            "p99_us": round(self.percentile(0.99), 1),
            "p999_us": round(self.percentile(0.999), 1),
            "max_us": round(max(self.latencies_us, default=0.0), 1),
            "cpu_share": round(self.cpu_share, 4),
            "mean_batch": round(self.offered / self.batches, 1) if self.batches else 0.0,
            "verdicts": self.verdicts,
            "bytes_on_disk": self.bytes_on_disk,
        }


def _disk_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*.mdb"))


def run_load(
    config: LoadConfig,
    path: str | os.PathLike[str] | None = None,
    progress: Callable[[float, LoadReport], None] | None = None,
) -> LoadReport:
    """Drive a store at ``config.rate`` for ``config.duration`` seconds.

    ``path`` defaults to a fresh temporary directory (removed afterwards).
    ``progress`` is called about once a second with the fraction done.
    """
    if path is None:
        with tempfile.TemporaryDirectory(prefix="dedupstore-bench-") as tmp:
            return _run(config, Path(tmp) / "store", progress)
    return _run(config, Path(path), progress)


def _events(config: LoadConfig, rng: random.Random, total: int, old_time: float) -> tuple[
    list[str], list[object], list[float | None], list[bool]
]:
    """The whole stream, made before the clock starts so that generating it
    costs nothing in the measured CPU share."""
    keys: list[str] = []
    intents: list[object] = []
    times: list[float | None] = []
    releases: list[bool] = []
    recent: list[tuple[str, int]] = []  # (key, amount) of recent effects, for redeliveries
    for _ in range(total):
        r = rng.random()
        if recent and r < config.duplicate_share:
            key, amount = recent[rng.randrange(len(recent))]
        elif recent and r < config.duplicate_share + config.conflict_share:
            key, amount = recent[rng.randrange(len(recent))]
            amount += 1
        else:
            key = f"order-{rng.getrandbits(48):012x}:v{rng.randrange(1, 4)}"
            amount = rng.randrange(1, 100_000)
            if len(recent) < 50_000:
                recent.append((key, amount))
            else:
                recent[rng.randrange(len(recent))] = (key, amount)
        keys.append(key)
        intents.append({"amount": amount, "currency": "EUR"})
        times.append(old_time if rng.random() < config.late_share else None)
        releases.append(rng.random() < config.release_share)
    return keys, intents, times, releases


def _run(config: LoadConfig, root: Path, progress: Callable[[float, LoadReport], None] | None) -> LoadReport:
    rng = random.Random(config.seed)
    report = LoadReport(config=config, path=str(root))
    counts = dict.fromkeys((s.name for s in Status), 0)
    total = int(config.rate * config.duration)
    with DedupStore.open(root, durability=config.durability, partitions=config.partitions) as store:
        store.ensure_namespace(NAMESPACE, horizon="12h", lease="30s")
        # Before the namespace existed, so beyond its frontier: late replays.
        keys, intents, times, releases = _events(config, rng, total, store.now() - 86400.0)
        interval = 1.0 / config.rate
        latencies = report.latencies_us
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        next_progress = t0 + 1.0
        sent = 0
        while sent < total:
            now = time.perf_counter()
            due = min(total, int((now - t0) / interval) + 1)
            if due <= sent:
                time.sleep(max(0.0, t0 + sent * interval - now))
                continue
            end = min(due, sent + config.max_batch)
            batch = store.claim_many(NAMESPACE, keys[sent:end], intents[sent:end], event_times=times[sent:end])
            done = time.perf_counter()
            latencies.extend((done - t0 - i * interval) * 1e6 for i in range(sent, end))
            completes: list[tuple[bytes | str, int, bytes | str]] = []
            released: list[tuple[bytes | str, int]] = []
            for i, res in enumerate(batch, sent):
                counts[res.status.name] += 1
                if res.token is None:
                    continue
                if releases[i]:
                    released.append((res.key, res.token))
                else:
                    completes.append((res.key, res.token, b"ok"))
            if completes:
                store.complete_many(NAMESPACE, completes)
            if released:
                store.release_many(NAMESPACE, released)
            sent = end
            report.batches += 1
            if progress is not None and done >= next_progress:
                next_progress = done + 1.0
                report.offered = sent
                report.wall_seconds = done - t0
                progress(sent / total, report)
        report.wall_seconds = time.perf_counter() - t0
        report.cpu_seconds = time.process_time() - cpu0
        report.offered = sent
        report.verdicts = counts
    report.bytes_on_disk = _disk_bytes(root)
    return report
