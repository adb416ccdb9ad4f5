"""claim and claim_many per durability mode, Bloom on and off, eviction on and off.

Each store starts with one horizon of data: 13 generations of a 12 h namespace
(the clock stepped an hour per generation), Bloom filters built over the
sealed ones. Then the store clock runs at 3,600x, so a generation ends every
wall second: with eviction on, the background thread deletes the oldest
generation each second while the benchmark claims; with eviction off the
expired records stay (and ``PrefilterRefresher`` keeps building filters, the
other job of that thread, so "eviction off" does not also mean "Bloom off").
A new key must be shown absent from every live generation, which is where the
prefilter pays.
"""

from __future__ import annotations

import contextlib

from dedupstore.loadgen import PrefilterRefresher

from .common import INTENT, NS, StepClock, TempStore, fill, keys, size

KEYS_PER_GENERATION = size(2000, 200)


class Claim:
    params = (["sync", "flush"], ["bloom", "no-bloom"], ["eviction", "no-eviction"])
    param_names = ["durability", "prefilter", "eviction"]
    processes = 1
    repeat = (3, 10, 5.0)
    sample_time = 0.02
    warmup_time = 0.05
    timeout = 180

    def setup(self, durability: str, prefilter: str, eviction: str) -> None:
        self.clock = StepClock()
        self.tmp = TempStore(
            durability=durability,
            bloom=prefilter == "bloom",
            clock=self.clock,
            eviction_rate=50_000 if eviction == "eviction" else 0,
        )
        store = self.store = self.tmp.store
        self.new = keys("new")
        old = keys("old")
        for _ in range(13):
            self.recent = fill(store, old, KEYS_PER_GENERATION)
            self.clock.offset += 3600.0
        store.refresh_prefilter()
        self.background = contextlib.ExitStack()
        if eviction != "eviction" and prefilter == "bloom":
            self.background.enter_context(PrefilterRefresher(store))
        self.clock.accelerate(3600.0)
        self.duplicate = self.recent[len(self.recent) // 2]

    def teardown(self, *params: str) -> None:
        self.background.close()
        self.tmp.close()

    def time_claim_new(self, *params: str) -> None:
        self.store.claim(NS, next(self.new), INTENT)

    def time_claim_duplicate(self, *params: str) -> None:
        self.store.claim(NS, self.duplicate, INTENT)

    def time_claim_many_100_new(self, *params: str) -> None:
        ks = [next(self.new) for _ in range(100)]
        self.store.claim_many(NS, ks, [INTENT] * 100)


class ClaimMany:
    """claim_many of 1,000 new keys per durability mode and partition count (fresh namespace)."""

    params = (["sync", "flush"], [1, 4])
    param_names = ["durability", "partitions"]
    processes = 1
    repeat = (3, 10, 5.0)
    timeout = 120

    def setup(self, durability: str, partitions: int) -> None:
        self.tmp = TempStore(durability=durability, partitions=partitions)
        self.new = keys("new")
        self.intents = [INTENT] * 1000

    def teardown(self, *params: object) -> None:
        self.tmp.close()

    def time_claim_many_1000_new(self, *params: object) -> None:
        self.tmp.store.claim_many(NS, [next(self.new) for _ in range(1000)], self.intents)
