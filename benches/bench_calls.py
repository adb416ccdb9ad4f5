#!/usr/bin/env python3
"""What one call costs: the CPU time of each call the load generator's consumer
makes, on a quiet store (one thread, no load, no eviction).

At 18,000 events/s, 10% of one core leaves 5.6 us of CPU per event for
everything (issue #5). The consumer of ``dedupstore bench`` (poll mode) takes
what is due, about 1.5 events at that rate, claims it with ``claim_many`` and
completes the NEW ones with ``complete_many``: so a call's fixed cost weighs as
much as its cost per key. This bench measures both:

- ``claim_many(n)`` of new keys, of duplicates (completed keys), and
  ``complete_many(n)`` of the leases just granted, for n in 1, 4, 16, 100;
- ``claim`` and ``complete`` of one key;
- the consumer's whole round (``dedupstore.loadgen``'s, on the reference mix)
  for batches of 1, 4 and 16 events.

Each figure is the process's CPU time (``time.process_time``: the calling
thread's, and the store's background threads' applying and checkpointing what
the calls wrote) per call and per key, the median of ``--repeat`` runs, each
on a fresh store with the default settings (write-behind applied every 50 ms). The reference stream's
keys and intents are used (``dedupstore.loadgen.make_stream``). Python's
cyclic garbage collector is paused while the calls run (and run between
sections): each section keeps its 20,000 results for the next, and the
collections that walked them cost more than the calls (``claim_many(1)`` of
new keys: 6.58 and 8.07 us a call with it running, 3.50 us paused);
the store's calls leave no cyclic garbage for it to find. Run it from
outside the source tree:

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_calls.py [--durability sync] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dedupstore
from dedupstore import DedupStore, Status
from dedupstore.loadgen import NAMESPACE, LoadConfig, _Consumer, make_stream

SIZES = (1, 4, 16, 100)
ROUNDS = (1, 4, 16)


def _store(tmp: str, durability: str) -> DedupStore:
    gc.collect()  # the last section's garbage, before this one's clock starts
    store = DedupStore.open(Path(tmp) / "store", durability=durability, eviction_rate=0)
    store.ensure_namespace(NAMESPACE, horizon=12 * 3600.0, lease=600.0)
    return store


def measure(durability: str, events: int, repeat: int) -> list[dict[str, Any]]:
    """The table's rows, with the collector paused (see the module's
    docstring); each section's store is opened after a collection (_store)."""
    gc.disable()
    try:
        return _measure(durability, events, repeat)
    finally:
        gc.enable()


def _measure(durability: str, events: int, repeat: int) -> list[dict[str, Any]]:
    stream = make_stream(LoadConfig(rate=events, duration=1.0))
    keys, intents = stream.keys, stream.intents
    rows: dict[str, list[tuple[float, int, int]]] = {}  # label -> [(cpu s, calls, keys)]
    cpu = time.process_time

    def add(label: str, seconds: float, calls: int, nkeys: int) -> None:
        rows.setdefault(label, []).append((seconds, calls, nkeys))

    for _ in range(repeat):
        for n in SIZES:
            with tempfile.TemporaryDirectory(prefix="dedupstore-calls-") as tmp, _store(tmp, durability) as store:
                calls = max(1, events // n)
                spans = [(i * n, i * n + n) for i in range(calls)]
                c0 = cpu()
                batches = [store.claim_many(NAMESPACE, keys[a:b], intents[a:b]) for a, b in spans]
                add(f"claim_many({n}) new", cpu() - c0, calls, calls * n)
                if sum(bt.statuses.count(Status.NEW) for bt in batches) < calls * n * 0.9:
                    raise SystemExit("claim_many of new keys did not answer NEW: not measuring that")
                granted = [
                    [(k, t, b"ok") for k, t in zip(keys[a:b], bt.tokens, strict=True) if t is not None]
                    for (a, b), bt in zip(spans, batches, strict=True)
                ]
                granted = [g for g in granted if g]
                c0 = cpu()
                for g in granted:
                    store.complete_many(NAMESPACE, g)
                add(f"complete_many({n})", cpu() - c0, len(granted), sum(map(len, granted)))
                c0 = cpu()
                for a, b in spans:
                    store.claim_many(NAMESPACE, keys[a:b], intents[a:b])
                add(f"claim_many({n}) duplicate", cpu() - c0, calls, calls * n)
        with tempfile.TemporaryDirectory(prefix="dedupstore-calls-") as tmp, _store(tmp, durability) as store:
            c0 = cpu()
            results = [store.claim(NAMESPACE, keys[i], intents[i]) for i in range(events)]
            add("claim() new", cpu() - c0, events, events)
            leased = [r for r in results if r.token is not None]
            c0 = cpu()
            for r in leased:
                store.complete(NAMESPACE, r.key, r.token, b"ok")
            add("complete()", cpu() - c0, len(leased), len(leased))
        for n in ROUNDS:
            with tempfile.TemporaryDirectory(prefix="dedupstore-calls-") as tmp, _store(tmp, durability) as store:
                consumer = _Consumer(store, stream, store.now(), dict.fromkeys(Status, 0))
                calls = max(1, events // n)
                c0 = cpu()
                for i in range(calls):
                    consumer.batch(i * n, i * n + n)
                add(f"consumer round of {n}", cpu() - c0, calls, calls * n)
    out = []
    for label, runs in rows.items():
        per_call = statistics.median(cpu / calls * 1e6 for cpu, calls, _ in runs)
        per_key = statistics.median(cpu / nk * 1e6 for cpu, _, nk in runs)
        out.append({"call": label, "cpu_us_per_call": round(per_call, 2), "cpu_us_per_key": round(per_key, 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--durability", choices=("flush", "sync"), default="flush")
    ap.add_argument("--events", type=int, default=20_000, help="keys per section and run (default 20,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is shown (default 3)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1,000 keys, one run")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    events, repeat = (1000, 1) if args.quick else (args.events, args.repeat)
    rows = measure(args.durability, events, repeat)
    if args.json:
        print(json.dumps({"durability": args.durability, "events": events, "repeat": repeat,
                          "version": dedupstore.__version__, "calls": rows}, indent=2))
        return 0
    print(f"dedupstore {dedupstore.__version__}, durability {args.durability}: process CPU per call, "
          f"median of {repeat} run(s) of {events:,} keys each")
    print(f"{'call':28s} {'us per call':>12s} {'us per key':>11s}")
    for r in rows:
        print(f"{r['call']:28s} {r['cpu_us_per_call']:12.2f} {r['cpu_us_per_key']:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
