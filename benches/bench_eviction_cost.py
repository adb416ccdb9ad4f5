"""The cost of eviction itself, per record deleted, in each durability mode.

Loads ``--records`` completed records (in ``flush`` mode, batches of 1,000,
a store clock advancing 3 s a batch), moves the clock three horizons on, then
times ``store.evict(5000)`` until nothing is due, with the background evictor
off. Sync mode journals each eviction transaction (not waited on); flush mode
does not journal. A benchmark, not a test:

    cd /tmp && python /path/to/benches/bench_eviction_cost.py [--records 200000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from dedupstore import DedupStore

NS = "n"


def run(durability: str, records: int, where: str) -> str:
    now = [1_700_000_000.0]
    path = tempfile.mkdtemp(dir=where)
    try:
        with DedupStore.open(path, durability="flush", eviction_rate=0, clock=lambda: now[0]) as store:
            store.ensure_namespace(NS, horizon="1h")
            for b in range(0, records, 1000):
                keys = [f"k{b + i}" for i in range(1000)]
                got = store.claim_many(NS, keys)
                store.complete_many(NS, [(k, r.token or 0, b"ok") for k, r in zip(keys, got, strict=True)])
                now[0] += 3.0
        now[0] += 3 * 3600
        with DedupStore.open(path, durability=durability, eviction_rate=0, clock=lambda: now[0]) as store:
            t0, c0, n = time.perf_counter(), time.process_time(), 0
            while (deleted := store.evict(5000)["deleted"]) > 0:
                n += deleted
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return f"{durability:5s}: {n:,} evicted, {wall / n * 1e6:.2f} us a record ({cpu / n * 1e6:.2f} CPU)"
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--dir", default=os.environ.get("BENCH_DIR", "/tmp"))
    args = ap.parse_args()
    for durability in ("sync", "flush"):
        print(run(durability, args.records, args.dir), flush=True)


if __name__ == "__main__":
    main()
