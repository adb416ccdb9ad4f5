"""Claim cost for new keys in a namespace as old as its horizon, with and without the Bloom prefilter.

A 12 h namespace has 13 live generations; a new key must be shown absent from
every one. Without filters each is a B-tree probe; with them, a sealed
generation costs one filter check. Run from outside the source tree:

    cd /tmp && python /path/to/benches/bench_prefilter.py [--keys-per-gen 20000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from dedupstore import DedupStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def measure(bloom: bool, keys_per_gen: int, rounds: int) -> dict[str, float]:
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp, DedupStore.open(
        Path(tmp) / "s", clock=clock, bloom=bloom, eviction_rate=0, durability="flush"
    ) as s:
        s.ensure_namespace("n", horizon="12h")
        for g in range(13):  # one horizon of data, generation by generation
            for start in range(0, keys_per_gen, 1000):
                batch = s.claim_many("n", [f"g{g}-{i}" for i in range(start, start + 1000)])
                s.complete_many("n", [(r.key, r.token, b"ok") for r in batch if r.token is not None])
            clock.now += 3600
        filters = s.refresh_prefilter()["built"]
        per_key = []
        for r in range(rounds):
            keys = [f"new-{r}-{i}" for i in range(1000)]
            t = time.perf_counter()
            lookups = [s.lookup("n", k) for k in keys]
            per_key.append((time.perf_counter() - t) / len(keys) * 1e6)
            assert all(x is None for x in lookups)
        pre = s.stats()["namespaces"]["n"]["prefilter"]
    return {
        "bloom": bloom,
        "filters": filters,
        "lookup_absent_us_median": statistics.median(per_key),
        "probes_skipped": pre["probes_skipped"],
        "probes_confirmed": pre["probes_confirmed"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys-per-gen", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [measure(b, args.keys_per_gen, args.rounds) for b in (False, True)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(
            f"bloom={row['bloom']!s:5}  filters={row['filters']:3}  absent-key lookup "
            f"{row['lookup_absent_us_median']:6.2f} us  skipped={row['probes_skipped']}  "
            f"confirmed={row['probes_confirmed']}"
        )
    print(f"ratio without/with: {rows[0]['lookup_absent_us_median'] / rows[1]['lookup_absent_us_median']:.2f}x")


if __name__ == "__main__":
    main()
