#!/usr/bin/env python3
"""What the checkpoint pin costs a one-key transaction, in plain py-lmdb.

A checkpoint (dedupstore/checkpoint.py) keeps a read transaction open at the
last durable snapshot, so LMDB cannot reuse a page freed after it: every
write transaction then copies its leaf-to-root path and free-list pages to
fresh pages, and each of them reaches the disk at the next sync. This times
``--txns`` transactions of one random 61-byte key each (``sync=False``, a
68-byte value: dedupstore's key and NEW record), with no reader held, and
with a reader taken under the writer lock and renewed every interval with an
``env.sync(True)``, as a checkpoint does. It prints time and CPU per
transaction, the data file's size after, and bytes written to disk per
transaction (``/proc/self/io``). A benchmark, not a test:

    cd /tmp && python /path/to/benches/bench_pin.py [--txns 40000] [--intervals 0,0.01,0.05,0.2,1]

Interval 0 means no reader at all (the cheapest raw LMDB, not crash-safe).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

import lmdb


def written() -> int:
    with open(f"/proc/{os.getpid()}/io") as f:
        return int(f.read().split("write_bytes: ")[1].split()[0])


def run(txns: int, interval: float, directory: str) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix="bench-pin-", dir=directory)
    env = lmdb.open(path, map_size=1 << 34, sync=False, metasync=False, max_dbs=4)
    try:
        db = env.open_db(b"pending")
        rng = random.Random(1)
        keys = [rng.randbytes(61) for _ in range(txns)]
        value = b"v" * 68
        w0, t0, c0 = written(), time.perf_counter(), time.process_time()
        pin = env.begin() if interval > 0 else None
        last = time.monotonic()
        for k in keys:
            with env.begin(write=True) as txn:
                txn.put(k, value, overwrite=False, db=db)
            if pin is not None and time.monotonic() - last > interval:
                with env.begin(write=True):  # under the writer lock: the newest snapshot
                    nxt = env.begin()
                pin.abort()
                pin = nxt
                env.sync(True)
                last = time.monotonic()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if pin is not None:
            pin.abort()
        return {
            "us": wall / txns * 1e6,
            "cpu_us": cpu / txns * 1e6,
            "file_mb": os.path.getsize(os.path.join(path, "data.mdb")) / 1e6,
            "bytes": (written() - w0) / txns,
        }
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=40_000, help="one-key transactions per interval (40,000)")
    ap.add_argument("--intervals", default="0,0.01,0.05,0.2,1",
                    help="pin renewal intervals in seconds, comma-separated; 0 = no reader")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the environments go (/tmp)")
    args = ap.parse_args()
    print(f"bench_pin: {args.txns:,} one-key transactions per row, py-lmdb {lmdb.__version__}, dir {args.dir}")
    print(f"{'pin renewed every':>18}  {'us/txn':>8}  {'cpu us':>8}  {'file MB':>8}  {'bytes written/txn':>17}")
    for text in args.intervals.split(","):
        interval = float(text)
        r = run(args.txns, interval, args.dir)
        label = "never (no reader)" if interval <= 0 else f"{interval:g} s"
        print(f"{label:>18}  {r['us']:8.2f}  {r['cpu_us']:8.2f}  {r['file_mb']:8.0f}  {r['bytes']:17,.0f}")


if __name__ == "__main__":
    main()
