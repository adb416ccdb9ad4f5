#!/usr/bin/env python3
"""What seeding a live filter costs the call that does it.

A process that holds a partition's write-behind window seeds each
namespace's live filter at the first claim of every opening of the window,
and rolls it at the first write of every new generation: a fresh filter
then takes the adds, seeded with the unresolved records (docs/guarantees.md,
"Filters"). Either reads every unresolved record of the namespace in the
partition, up to ``_native.LIVE_PENDING_MAX``, in the claiming call's
thread: that call waits for it. This bench leaves N records unresolved in a
one-partition store, moves the injected clock into the next generation, and
times the claim that rolls the filter against the claim after it, for each
N. It never asserts a timing.

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_live_seed.py [--sizes 1000,10000,50000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dedupstore
from dedupstore import DedupStore, Status, _native

SIZES = (1_000, 10_000, 50_000, 200_000)
NS = "n"
GEN_S = 10.0  # generation length: a horizon of 80 s is cut in eight


def measure(sizes: tuple[int, ...], reps: int, directory: str) -> list[dict[str, Any]]:
    rng = random.Random(7)
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-live-seed-", dir=directory) as tmp:
            clock = [1_000_000.0]
            store = DedupStore.open(
                Path(tmp) / "s", durability="flush", partitions=1, eviction_rate=0,
                clock=lambda c=clock: c[0],
            )
            try:
                store.ensure_namespace(NS, horizon=8 * GEN_S, lease=86_400.0, allow_short_horizon=True)
                keys = [rng.randbytes(40) for _ in range(n)]
                for i in range(0, n, 1000):
                    store.claim_many(NS, keys[i : i + 1000])  # left unresolved
                store.flush()
                space = store._live_namespace(NS).spaces[0]  # noqa: SLF001 - the bench reads the seed count
                seeds, after = [], []
                for _ in range(reps):
                    clock[0] += GEN_S  # the next generation: the next claim rolls the filter
                    # (With none left unresolved, the first rep's claim is
                    # the window's first: it seeds instead.)
                    before = space.live_seeds + space.live_rolls
                    t0 = time.perf_counter()
                    first = store.claim(NS, rng.randbytes(40))
                    t1 = time.perf_counter()
                    second = store.claim(NS, rng.randbytes(40))
                    t2 = time.perf_counter()
                    if first.status is not Status.NEW or second.status is not Status.NEW:
                        raise SystemExit("a claim of a new key was not NEW: not measuring that")
                    if space.live_seeds + space.live_rolls != before + 1:
                        raise SystemExit("the first claim in the new generation neither rolled nor seeded the filter")
                    seeds.append(t1 - t0)
                    after.append(t2 - t1)
                rows.append({
                    "unresolved": n,
                    "read_into_filter": space.live_pending,
                    "seeding_claim_ms": round(statistics.median(seeds) * 1e3, 3),
                    "next_claim_us": round(statistics.median(after) * 1e6, 1),
                })
            finally:
                store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="unresolved records, comma-separated")
    ap.add_argument("--reps", type=int, default=5, help="rolls per size; the median is shown (default 5)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temporary stores (default: /tmp)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    try:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    except ValueError:
        ap.error(f"--sizes takes whole numbers separated by commas; got {args.sizes!r}")
    if any(n < 0 for n in sizes) or args.reps < 1:
        ap.error(f"--sizes must be at least 0 and --reps at least 1; got {args.sizes!r} and {args.reps}")
    rows = measure(sizes, args.reps, args.dir)
    out = {"version": dedupstore.__version__, "live_pending_max": _native.LIVE_PENDING_MAX, "reps": args.reps,
           "rows": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"dedupstore {dedupstore.__version__}: the claim that rolls a live filter (flush, 1 partition), "
          f"against the claim after it; median of {args.reps}; at most {_native.LIVE_PENDING_MAX:,} unresolved "
          f"records are read into a filter")
    print(f"{'unresolved':>11s} {'read':>5s} {'seeding claim':>14s} {'next claim':>11s}")
    for r in rows:
        print(f"{r['unresolved']:11,d} {'yes' if r['read_into_filter'] else 'no':>5s} "
              f"{r['seeding_claim_ms']:11.2f} ms {r['next_claim_us']:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
