"""The reference load: 18,000 events/s through ``dedupstore.loadgen`` (the
``dedupstore bench`` verb's engine), with the 12 h horizon accelerated into 10 s
so that generations rotate and are evicted during the run.

One run per durability mode happens in ``setup_cache``; the ``track_``
benchmarks report its figures, so asv graphs latency percentiles (from each
event's scheduled send time), CPU share and eviction lag per commit.
"""

from __future__ import annotations

from typing import Any

from dedupstore.loadgen import LoadConfig, run_load

from .common import size

SECONDS = size(15, 1)
RATE = 18_000.0


class Sustained:
    params = (["sync", "flush"],)
    param_names = ["durability"]
    timeout = 600

    def setup_cache(self) -> dict[str, dict[str, Any]]:
        return {d: run_load(LoadConfig(rate=RATE, duration=SECONDS, durability=d)).to_dict() for d in self.params[0]}

    def track_achieved_rate(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return float(runs[durability]["achieved_rate"])

    track_achieved_rate.unit = "events/s"  # type: ignore[attr-defined]

    def track_p50_us(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return float(runs[durability]["p50_us"])

    track_p50_us.unit = "us"  # type: ignore[attr-defined]

    def track_p99_us(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return float(runs[durability]["p99_us"])

    track_p99_us.unit = "us"  # type: ignore[attr-defined]

    def track_p999_us(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return float(runs[durability]["p999_us"])

    track_p999_us.unit = "us"  # type: ignore[attr-defined]

    def track_cpu_share_percent(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return 100.0 * runs[durability]["cpu_share"]

    track_cpu_share_percent.unit = "% of one core"  # type: ignore[attr-defined]

    def track_eviction_lag_max_s(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return float(runs[durability]["eviction"]["lag_seconds_max"])

    track_eviction_lag_max_s.unit = "store-clock s"  # type: ignore[attr-defined]

    def track_bytes_on_disk(self, runs: dict[str, dict[str, Any]], durability: str) -> float:
        return float(runs[durability]["bytes_on_disk"])

    track_bytes_on_disk.unit = "bytes"  # type: ignore[attr-defined]
