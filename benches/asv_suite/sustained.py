"""The reference load: 18,000 events/s through ``dedupstore.loadgen`` (the
``dedupstore bench`` verb's engine), with the 12 h horizon accelerated into 10 s
so that generations rotate and are evicted during the run.

One run per durability mode happens in ``setup_cache``; the ``track_``
benchmarks report its figures, so asv graphs latency percentiles (from each
event's scheduled send time), CPU share (the process's, and the store's part
of it) and eviction lag per commit.
"""

from __future__ import annotations

from typing import Any

from dedupstore.loadgen import LoadConfig, run_load

from .common import size, tracker

SECONDS = size(15, 1)
RATE = 18_000.0


class Sustained:
    params = (["sync", "flush"],)
    param_names = ["durability"]
    timeout = 600

    def setup_cache(self) -> dict[str, dict[str, Any]]:
        runs = {}
        for durability in self.params[0]:
            doc = run_load(LoadConfig(rate=RATE, duration=SECONDS, durability=durability)).to_dict()
            runs[durability] = {
                **doc, "cpu_percent": 100.0 * doc["cpu_share"],
                "store_cpu_percent": 100.0 * doc["store_cpu_share"],
                "consumer_busy_percent": 100.0 * doc["store_call_share"],
            }
        return runs

    track_achieved_rate = tracker("events/s", "achieved_rate")
    track_p50_us = tracker("us", "p50_us")
    track_p99_us = tracker("us", "p99_us")
    track_p999_us = tracker("us", "p999_us")
    track_cpu_share_percent = tracker("% of one core", "cpu_percent")
    # Of it, the store's: its calls and its own threads, not the load's loop.
    track_store_cpu_share_percent = tracker("% of one core", "store_cpu_percent")
    track_consumer_busy_percent = tracker("% of the time", "consumer_busy_percent")
    # The store calls' CPU per batch in the run, and the same rounds back to
    # back after it: their difference is the refill after each of the
    # consumer's waits on the machine (docs/cli/bench.md, "The machine's floor").
    track_store_call_cpu_us = tracker("us per batch", "store_call_cpu_us")
    track_store_call_back_to_back_cpu_us = tracker("us per batch", "store_call_back_to_back_cpu_us")
    track_eviction_lag_max_s = tracker("store-clock s", "eviction", "lag_seconds_max")
    track_bytes_on_disk = tracker("bytes", "bytes_on_disk")
    track_written_bytes_per_event = tracker("bytes", "written_bytes_per_event")
