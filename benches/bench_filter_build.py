#!/usr/bin/env python3
"""What building one generation's Bloom filter costs: the background
refresh's scan of a sealed generation (``Space.build_bloom``), timed alone.

A store (flush mode, one partition, eviction off) gets ``--keys`` completed
records in one generation of a 12 h namespace; the clock then moves two
generations on, so the refresh seals it. The bench times ``build_bloom`` on
that generation ``--reps`` times (a read transaction each, the filter
discarded) and prints the best and median time per key, and the filter's
size. The scan runs in the store's maintenance thread in production, and
every key it reads hands the GIL over once (py-lmdb releases it around each
cursor step), so its length is also how long the consumer's thread shares
the GIL with it. It checks that the filter holds every key.

    cd /tmp && /path/to/.venv/bin/python /path/to/benches/bench_filter_build.py [--keys 1000000] [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dedupstore import DedupStore
from dedupstore.store import BLOOM_FP_RATE

GEN_S = 5400.0  # a 12 h horizon's generation: horizon / 8


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def run(keys: int, reps: int) -> dict[str, Any]:
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="dedupstore-filter-") as tmp, DedupStore.open(
        Path(tmp) / "s", clock=clock, durability="flush", partitions=1, eviction_rate=0
    ) as s:
        s.ensure_namespace("n", horizon="12h")
        names = [f"order-{i:012x}:v1" for i in range(keys)]
        t0 = time.perf_counter()
        for start in range(0, keys, 10_000):
            batch = s.claim_many("n", names[start:start + 10_000])
            s.complete_many("n", [(r.key, r.token, b"ok") for r in batch if r.token is not None])
        load_s = time.perf_counter() - t0
        part = s._parts[0]
        space = s._namespace("n").spaces[0]
        gen = space.generation(int(clock.now * 1_000_000))
        clock.now += 2 * GEN_S
        s.flush()
        s.refresh_prefilter(limit=0)  # seals the generation, builds nothing
        times = []
        bf = None
        for _ in range(reps):
            with part.reader() as txn:
                t = time.perf_counter()
                bf = space.build_bloom(txn, gen, BLOOM_FP_RATE, s._bloom_tag)
                times.append(time.perf_counter() - t)
        assert bf is not None
        missing = sum(1 for k in names if not bf.maybe(s._hasher, k.encode()))
        if missing:
            raise SystemExit(f"the filter misses {missing} of {keys} keys")
        return {
            "keys": keys,
            "reps": reps,
            "load_seconds": round(load_s, 2),
            "build_best_us_per_key": round(min(times) / keys * 1e6, 4),
            "build_median_us_per_key": round(statistics.median(times) / keys * 1e6, 4),
            "build_best_seconds": round(min(times), 4),
            "filter_bytes": bf.nbytes,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="records in the generation")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="50,000 keys, 2 reps: a smoke run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    keys, reps = (50_000, 2) if args.quick else (args.keys, args.reps)
    res = run(keys, reps)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(
            f"filter build of one generation of {res['keys']:,} keys (loaded in {res['load_seconds']} s): "
            f"best {res['build_best_us_per_key']:.3f} us/key ({res['build_best_seconds']:.3f} s), "
            f"median {res['build_median_us_per_key']:.3f} us/key over {res['reps']} reps; "
            f"filter {res['filter_bytes']:,} bytes"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
