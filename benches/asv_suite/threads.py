"""Durable claims from many threads in ``sync`` mode: what the journal's group
fdatasync (csrc/ds_gsync.c) gives, one thread against eight.

Each thread claims its own new keys one ``claim`` at a time into one store
(default partitions); a claim returns only once a journal fdatasync covers it.
The figures: durable claims per second, claims per fdatasync (how many callers
share one), and the share of the time the journal was syncing. The same
measurement as section (d) of benches/bench_core.py, tracked per commit.
"""

from __future__ import annotations

import statistics

from .common import NS, TempStore, keys, run_threads, size, tracker

CLAIMS_PER_THREAD = size(2500, 50)
ROUNDS = size(3, 1)
THREADS = [1, 8]


def _round(n_threads: int) -> tuple[float, float, float]:
    """One run in a fresh store: (claims/s, claims per fdatasync, % of the time syncing)."""
    tmp = TempStore(durability="sync")
    try:
        store = tmp.store
        source = keys(f"t{n_threads}")
        for k in [next(source) for _ in range(200)]:  # each partition's first commit is checkpointed
            store.claim(NS, k)
        work = [[next(source) for _ in range(CLAIMS_PER_THREAD)] for _ in range(n_threads)]
        before = store.stats()
        wall, _ = run_threads(work, lambda k: store.claim(NS, k))
        after = store.stats()
    finally:
        tmp.close()
    n = n_threads * CLAIMS_PER_THREAD
    syncs = after["journal_syncs"] - before["journal_syncs"]
    busy = after["journal_sync_seconds"] - before["journal_sync_seconds"]
    return n / wall, n / max(syncs, 1), 100.0 * busy / wall


def measure_threads(n_threads: int) -> dict[str, float]:
    rates, per_sync, busy = zip(*(_round(n_threads) for _ in range(ROUNDS)), strict=True)
    return {
        "claims_per_s": round(statistics.median(rates), 1),
        "claims_per_fdatasync": round(statistics.median(per_sync), 3),
        "journal_busy_percent": round(statistics.median(busy), 1),
    }


class Threads:
    params = (THREADS,)
    param_names = ["threads"]
    timeout = 600

    def setup_cache(self) -> dict[int, dict[str, float]]:
        return {n: measure_threads(n) for n in THREADS}

    track_claims_per_s = tracker("claims/s", "claims_per_s")
    track_claims_per_fdatasync = tracker("claims", "claims_per_fdatasync")
    track_journal_busy_percent = tracker("% of the time", "journal_busy_percent")
