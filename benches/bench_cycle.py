"""A consumer's whole cycle per event: claim, then complete, at a fixed amount of work.

bench_core.py times claims alone; a consumer also completes every effect it
performs, and the two together decide what a store writes. This opens a store
(no background eviction), fills it with ``--warm`` completed records, then
times ``--singles`` events of ``claim`` + ``complete`` (one transaction each)
and ``--batches`` batches of 100 through ``claim_many`` + ``complete_many``.
Prints wall and CPU time and bytes written to disk (``/proc/self/io``) per
event. Compare builds by running it with each one's interpreter, alternating:

    cd /tmp && python /path/to/benches/bench_cycle.py [--durability flush|sync]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

from dedupstore import DedupStore

NS = "orders"


def written() -> int:
    with open(f"/proc/{os.getpid()}/io") as f:
        return int(f.read().split("write_bytes: ")[1].split()[0])


def completions(keys: list[str], got: Any) -> list[tuple[bytes | str, int, bytes | str]]:
    out: list[tuple[bytes | str, int, bytes | str]] = []
    for key, res in zip(keys, got, strict=True):
        assert res.token is not None, "every key here is new"
        out.append((key, res.token, b"ok"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durability", default="flush", choices=["flush", "sync"])
    ap.add_argument("--warm", type=int, default=200_000, help="completed records stored before timing")
    ap.add_argument("--singles", type=int, default=None, help="default: 20,000 (flush) or 5,000 (sync)")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--dir", default=os.environ.get("BENCH_DIR", "/tmp"))
    args = ap.parse_args()
    singles = args.singles or (20_000 if args.durability == "flush" else 5_000)
    path = tempfile.mkdtemp(dir=args.dir)
    try:
        with DedupStore.open(path, durability=args.durability, eviction_rate=0) as store:
            store.ensure_namespace(NS, horizon="12h")
            for b in range(0, args.warm, 1000):
                keys = [f"warm-{b + i}" for i in range(1000)]
                got = store.claim_many(NS, keys)
                store.complete_many(NS, completions(keys, got))
            store.flush()
            w0, t0, c0 = written(), time.perf_counter(), time.process_time()
            for i in range(singles):
                key = f"order-{i}:v1"
                res = store.claim(NS, key, {"amount": 5})
                assert res.token is not None
                store.complete(NS, key, res.token, b"ok")
            w1, t1, c1 = written(), time.perf_counter(), time.process_time()
            for b in range(args.batches):
                keys = [f"batch-{b}-{i}" for i in range(100)]
                store.complete_many(NS, completions(keys, store.claim_many(NS, keys)))
            w2, t2, c2 = written(), time.perf_counter(), time.process_time()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    n = args.batches * 100
    print(
        f"{args.durability}: single {(t1 - t0) / singles * 1e6:.1f} us/event (cpu {(c1 - c0) / singles * 1e6:.1f}), "
        f"{(w1 - w0) / singles:,.0f} B/event | batches of 100 {(t2 - t1) / n * 1e6:.1f} us/event "
        f"(cpu {(c2 - c1) / n * 1e6:.1f}), {(w2 - w1) / n:,.0f} B/event"
    )


if __name__ == "__main__":
    main()
