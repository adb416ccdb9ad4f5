"""Why unresolved records live in a database of their own (docs/format.md, format 2).

Plain py-lmdb, no dedupstore: the pages a claim and its completion write
under a reader held and renewed every second, as the checkpoint's pin holds
one (dedupstore/checkpoint.py), for two layouts of the same data:

- ``index`` (format 1): a claim puts the record into the generation tree (a
  large tree of random keys) and an index entry into a time-ordered tree; the
  completion rewrites the record and deletes the entry.
- ``apart`` (format 2): a claim puts the record into a small tree of
  unresolved records; the completion deletes it there and puts it into the
  generation tree.

Each layout starts from ``--live`` completed records and runs claims then
completions, one event per transaction and in batches of ``--batch`` (a few
batches in flight, as a consumer completes what it claimed). Prints wall and
CPU time and bytes written to disk (``/proc/self/io``) per event. A benchmark,
not a test; run it on the disk the store would use:

    cd /tmp && python /path/to/benches/bench_layout.py [--live 200000] [--batch 150]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import tempfile
import time

import lmdb

NS = b"\0\1"
OLD_GEN = b"\0\0\0\5"
GEN = b"\0\0\0\6"


def written() -> int:
    with open(f"/proc/{os.getpid()}/io") as f:
        return int(f.read().split("write_bytes: ")[1].split()[0])


def run(layout: str, batch: int, events: int, live: int, where: str) -> dict[str, float]:
    path = tempfile.mkdtemp(dir=where)
    env = lmdb.open(path, map_size=16 << 30, max_dbs=4, sync=False, metasync=False, readahead=False)
    try:
        records, pending = env.open_db(b"records"), env.open_db(b"pending")
        rnd = random.Random(1)
        with env.begin(write=True) as txn:
            for _ in range(live):
                txn.put(NS + OLD_GEN + rnd.randbytes(40), b"d" * 68, db=records)
        env.sync(True)
        pin, pinned_at = env.begin(), time.monotonic()
        seq = 0
        in_flight: list[tuple[list[bytes], int]] = []
        w0, t0, c0 = written(), time.perf_counter(), time.process_time()
        for _ in range(events // batch):
            keys = [rnd.randbytes(40) for _ in range(batch)]
            with env.begin(write=True) as txn:  # the claims
                for k in keys:
                    seq += 1
                    if layout == "index":
                        txn.put(NS + GEN + k, b"p" * 68, db=records)
                        txn.put(NS + struct.pack(">Q", seq) + k, GEN, db=pending)
                    else:
                        txn.put(NS + k, b"p" * 68, db=pending)
            in_flight.append((keys, seq))
            if len(in_flight) > 2:
                keys, last = in_flight.pop(0)
                with env.begin(write=True) as txn:  # the completions
                    for i, k in enumerate(keys):
                        if layout == "index":
                            txn.put(NS + GEN + k, b"d" * 68, db=records)
                            txn.delete(NS + struct.pack(">Q", last - batch + 1 + i) + k, db=pending)
                        else:
                            txn.delete(NS + k, db=pending)
                            txn.put(NS + GEN + k, b"d" * 68, db=records)
            if time.monotonic() - pinned_at > 1.0:  # a checkpoint: sync, then pin the new snapshot
                pin.abort()
                env.sync(True)
                pin, pinned_at = env.begin(), time.monotonic()
        pin.abort()
        env.sync(True)
        n = (events // batch) * batch
        return {
            "us": (time.perf_counter() - t0) / n * 1e6,
            "cpu_us": (time.process_time() - c0) / n * 1e6,
            "bytes": (written() - w0) / n,
        }
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--live", type=int, default=200_000, help="completed records already stored")
    ap.add_argument("--batch", type=int, default=150, help="events per transaction in the batched runs")
    ap.add_argument("--dir", default=os.environ.get("BENCH_DIR", "/tmp"))
    args = ap.parse_args()
    print(f"{'layout':8s} {'per txn':>8s} {'us/event':>9s} {'cpu us':>8s} {'bytes/event':>12s}")
    for batch, events in ((1, 20_000), (args.batch, 150 * args.batch * 7)):
        for layout in ("index", "apart"):
            r = run(layout, batch, events, args.live, args.dir)
            print(f"{layout:8s} {batch:8d} {r['us']:9.1f} {r['cpu_us']:8.1f} {r['bytes']:12,.0f}", flush=True)


if __name__ == "__main__":
    main()
