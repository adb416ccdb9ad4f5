"""Claim latency with eviction running vs without, under the same paced load (SPEC 5: p99 within 1.5x).

Each run builds a store holding ``--backlog`` completed entries that are all
past their one-hour horizon, then drives it with an open-loop stream of new
keys at ``--rate`` events/s for ``--seconds``: due events are claimed with
``claim_many`` (as a consumer claims what it polled) and completed, and each
event's latency is measured from its scheduled time (a stall shows, it is not
hidden). The backlog is loaded in ``flush`` mode (no fsync per commit, a
checkpoint a second), as bench_scale.py loads, and flushed to disk before the
measured part. One run has the background evictor off (``eviction_rate=0``);
the other has it on at its default rate, deleting the backlog while the
claims run.
Run from outside the source tree:

    cd /tmp && python /path/to/benches/bench_eviction_latency.py [--rate 5000] [--seconds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_scale import LOAD_DURABILITY, Keys, fsync_files, load, pct

from dedupstore import DedupStore
from dedupstore.store import DEFAULT_EVICTION_BATCH, DEFAULT_EVICTION_RATE

NS = "orders"
HORIZON_S = 3600.0


class Clock:
    """Wall time shifted by ``offset``: the backlog is written "two horizons ago"."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    @property
    def now(self) -> float:
        return self()

    @now.setter
    def now(self, value: float) -> None:  # the loader advances the clock by the events it writes
        self.offset = value - time.time()


def run(
    evict: bool,
    rate: float,
    seconds: float,
    backlog: int,
    durability: str,
    eviction_rate: float = DEFAULT_EVICTION_RATE,
    eviction_batch: int = DEFAULT_EVICTION_BATCH,
) -> dict[str, Any]:
    clock = Clock()
    keys = Keys(seed=2)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp) / "s"
        with DedupStore.open(root, clock=clock, durability=LOAD_DURABILITY, eviction_rate=0) as store:
            clock.offset = -2 * HORIZON_S - 900  # the namespace and its backlog date from two horizons ago
            store.ensure_namespace(NS, horizon=HORIZON_S)
            load(store, clock, keys, backlog)
        fsync_files(root)
        clock.offset = 0.0
        rate_arg = eviction_rate if evict else 0
        with DedupStore.open(
            root, clock=clock, durability=durability, eviction_rate=rate_arg, eviction_batch=eviction_batch
        ) as store:
            # The same prefilter in both runs: the background thread that
            # evicts also builds filters (eviction_rate=0 turns both off), and
            # without them a new key is probed in every live generation.
            store.refresh_prefilter()
            stream = keys.take(int(rate * seconds))
            lat: list[float] = []
            interval = 1.0 / rate
            start = time.perf_counter()
            sent = 0
            c0 = time.process_time()
            while sent < len(stream):
                now = time.perf_counter()
                due = min(len(stream), int((now - start) / interval) + 1, sent + 1000)
                if due <= sent:
                    time.sleep(min(interval * (sent + 1) - (now - start), 0.001))
                    continue
                res = store.claim_many(NS, stream[sent:due])
                done = time.perf_counter()
                lat.extend((done - start - i * interval) * 1e6 for i in range(sent, due))
                store.complete_many(NS, [(r.key, r.token, b"") for r in res if r.token is not None])
                sent = due
            wall = time.perf_counter() - start
            cpu = time.process_time() - c0
            evicted = store.stats()["namespaces"][NS]["evicted"]
    return {
        "eviction": evict,
        "events": len(lat),
        "achieved_rate": len(lat) / wall,
        "p50_us": pct(lat, 0.50),
        "p99_us": pct(lat, 0.99),
        "p999_us": pct(lat, 0.999),
        "max_us": max(lat),
        "cpu_share": cpu / wall,
        "evicted_during_run": evicted,
        "backlog": backlog,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=5000.0, help="events/s of new keys offered")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--backlog", type=int, default=500_000, help="entries past their horizon when the run starts")
    ap.add_argument("--durability", default="sync", choices=["sync", "flush"])
    ap.add_argument("--rounds", type=int, default=3, help="alternating off/on pairs")
    ap.add_argument(
        "--eviction-rate", type=float, default=DEFAULT_EVICTION_RATE, help="entries/s of the run with eviction on"
    )
    ap.add_argument("--eviction-batch", type=int, default=DEFAULT_EVICTION_BATCH, help="entries per eviction txn")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for evict in (False, True):
            row = run(
                evict, args.rate, args.seconds, args.backlog, args.durability, args.eviction_rate, args.eviction_batch
            )
            rows.append(row)
            if not args.json:
                print(json.dumps(row), file=sys.stderr, flush=True)
    off = sorted(r["p99_us"] for r in rows if not r["eviction"])
    on = sorted(r["p99_us"] for r in rows if r["eviction"])
    summary = {
        "rows": rows,
        "p99_us_without_eviction_median": off[len(off) // 2],
        "p99_us_with_eviction_median": on[len(on) // 2],
    }
    summary["ratio"] = summary["p99_us_with_eviction_median"] / summary["p99_us_without_eviction_median"]
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"p99 claim latency at {args.rate:,.0f} events/s ({args.durability}, eviction at "
          f"{args.eviction_rate:,.0f}/s, {args.eviction_batch} a txn): "
          f"{summary['p99_us_without_eviction_median']:.0f} us without eviction, "
          f"{summary['p99_us_with_eviction_median']:.0f} us while evicting "
          f"({min(r['evicted_during_run'] for r in rows if r['eviction']):,}+ entries evicted per run): "
          f"{summary['ratio']:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
