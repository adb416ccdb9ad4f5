"""claim and claim_many per durability mode, Bloom on and off, eviction on and off.

Each store starts with one horizon of data: 13 generations of a 12 h namespace
(the clock stepped an hour per generation), Bloom filters built over the
sealed ones. Then the store clock runs at 3,600x, so a generation ends every
wall second: with eviction on, the background thread deletes the oldest
generation each second while the claims are timed; with eviction off the
expired records stay (and ``PrefilterRefresher`` keeps building filters, the
other job of that thread, so "eviction off" does not also mean "Bloom off").
A new key must be shown absent from every live generation, which is where the
prefilter pays.

Why ``track_`` and not ``time_``: asv re-runs ``setup`` before every timed
call of a ``time_`` benchmark that has one (asv#966), which here would rebuild
a 26,000-record store per call and time only cold first calls. So
``setup_cache`` builds each store once and times the operations itself, in
interleaved rounds (median of the rounds' means), and the ``track_``
benchmarks report the figures per parameter combination.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from collections.abc import Callable

from dedupstore.loadgen import PrefilterRefresher

from .common import INTENT, NS, StepClock, TempStore, fill, keys, size, tracker

KEYS_PER_GENERATION = size(2000, 200)
ROUNDS = size(9, 2)
DURABILITY = ["sync", "flush"]


def _rounds(ops: dict[str, tuple[Callable[[], None], int]]) -> dict[str, float]:
    """Median over ROUNDS of each op's mean time per unit (us); ops interleave."""
    samples: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(ROUNDS):
        for name, (op, units) in ops.items():
            t = time.perf_counter()
            op()
            samples[name].append((time.perf_counter() - t) / units * 1e6)
    return {name: round(statistics.median(xs), 3) for name, xs in samples.items()}


def measure_claims(durability: str, prefilter: str, eviction: str) -> dict[str, float]:
    clock = StepClock()
    tmp = TempStore(
        durability=durability,
        bloom=prefilter == "bloom",
        clock=clock,
        eviction_rate=50_000 if eviction == "eviction" else 0,
    )
    try:
        store = tmp.store
        old = keys("old")
        for _ in range(13):
            recent = fill(store, old, KEYS_PER_GENERATION)
            clock.offset += 3600.0
        store.refresh_prefilter()
        with contextlib.ExitStack() as background:
            if eviction != "eviction" and prefilter == "bloom":
                background.enter_context(PrefilterRefresher(store))
            clock.accelerate(3600.0)
            new = keys("new")
            duplicates = recent[-200:]  # the newest generation's: present for the whole measurement

            def claim_new() -> None:
                for _ in range(20):
                    store.claim(NS, next(new), INTENT)

            def claim_duplicate() -> None:
                for k in duplicates:
                    store.claim(NS, k, INTENT)

            def claim_many_100() -> None:
                for _ in range(5):
                    store.claim_many(NS, [next(new) for _ in range(100)], [INTENT] * 100)

            return _rounds(
                {"claim_new_us": (claim_new, 20), "claim_duplicate_us": (claim_duplicate, len(duplicates)),
                 "claim_many_100_us_per_key": (claim_many_100, 500)}
            )
    finally:
        tmp.close()


class Claim:
    params = (DURABILITY, ["bloom", "no-bloom"], ["eviction", "no-eviction"])
    param_names = ["durability", "prefilter", "eviction"]
    timeout = 900

    def setup_cache(self) -> dict[tuple[str, str, str], dict[str, float]]:
        return {combo: measure_claims(*combo) for combo in itertools.product(*self.params)}

    track_claim_new_us = tracker("us", "claim_new_us")
    track_claim_duplicate_us = tracker("us", "claim_duplicate_us")
    track_claim_many_100_us_per_key = tracker("us", "claim_many_100_us_per_key")


def measure_claim_many(durability: str, partitions: int) -> dict[str, float]:
    tmp = TempStore(durability=durability, partitions=partitions)
    try:
        new = keys("new")
        intents = [INTENT] * 1000

        def claim_many_1000() -> None:
            tmp.store.claim_many(NS, [next(new) for _ in range(1000)], intents)

        return _rounds({"claim_many_1000_us_per_key": (claim_many_1000, 1000)})
    finally:
        tmp.close()


class ClaimMany:
    """claim_many of 1,000 new keys per durability mode and partition count (fresh namespace)."""

    params = (DURABILITY, [1, 4])
    param_names = ["durability", "partitions"]
    timeout = 300

    def setup_cache(self) -> dict[tuple[str, int], dict[str, float]]:
        return {combo: measure_claim_many(*combo) for combo in itertools.product(*self.params)}

    track_claim_many_1000_us_per_key = tracker("us", "claim_many_1000_us_per_key")
