"""Scale points: the cost of a claim against the number of live entries.

SPEC section 6: the cost of a claim must not grow with the number of live
entries. ``setup_cache`` builds one store per size (durability flush, real
clock, nothing due for eviction) and measures on it, in the same process,
while the store is open: ``claim_many`` of 1,000 new keys (per key), a
duplicate claim of a random stored key (the read-only path) and a lookup of an
absent key. Each figure is the median of several rounds; the ``track_``
benchmarks report them, so asv graphs them per commit and per size.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time

from dedupstore import DedupStore

from .common import HORIZON_S, INTENT, NS, fill, keys, size, tracker

SIZES = [size(10_000, 1_000), size(100_000, 3_000), size(1_000_000, 10_000)]
ROUNDS = size(9, 2)


def _median_us(op: object, rounds: int, per_round: int) -> float:
    assert callable(op)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        op()
        samples.append((time.perf_counter() - t) / per_round * 1e6)
    return round(statistics.median(samples), 3)


def measure(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="dedupstore-asv-scale-") as tmp, DedupStore.open(
        f"{tmp}/store", durability="flush", eviction_rate=0
    ) as store:
        store.ensure_namespace(NS, horizon=HORIZON_S, lease="1d")
        stored = fill(store, keys(f"s{n}"), n)
        sample = random.Random(n).sample(stored, 1000)
        new = keys("new")
        intents = [INTENT] * 1000

        def many() -> None:
            store.claim_many(NS, [next(new) for _ in range(1000)], intents)

        def duplicates() -> None:
            for k in sample:
                store.claim(NS, k, INTENT)

        def absent() -> None:
            for _ in range(1000):
                store.lookup(NS, next(new))

        return {
            "claim_many_us_per_key": _median_us(many, ROUNDS, 1000),
            "duplicate_claim_us": _median_us(duplicates, ROUNDS, 1000),
            "lookup_absent_us": _median_us(absent, ROUNDS, 1000),
        }


class Scale:
    params = (SIZES,)
    param_names = ["live_entries"]
    timeout = 600

    def setup_cache(self) -> dict[int, dict[str, float]]:
        return {n: measure(n) for n in SIZES}

    track_claim_many_us_per_key = tracker("us", "claim_many_us_per_key")
    track_duplicate_claim_us = tracker("us", "duplicate_claim_us")
    track_lookup_absent_us = tracker("us", "lookup_absent_us")
