#!/usr/bin/env python3
"""What one write-behind apply costs, against the keys it carries.

In flush mode a call only decides against the overlay and logs its record;
LMDB sees the calls when the window is applied (dedupstore/window.py), every
``apply_interval`` per partition. So the store's CPU per event at a given
rate is the calls' own cost plus (applies per second x cost of one apply) /
rate, and how that cost splits into a part per apply and a part per key
says what the apply interval and the partition count are worth.

This opens a flush-mode store with one partition, write-behind on but
applied only when this script says (``apply_interval`` 1 s, no background
checkpoint), fills it with ``--base`` keys, then for each n in ``--sizes``
repeats: claim n new keys (random, like the reference stream's), then apply
the window in this thread; every ``--checkpoint-every`` applies it
checkpoints (``flush()``), as a running store does once a second (every 20
applies at the default 50 ms interval, the default here too). A checkpoint moves the pin, so LMDB reuses the pages
freed before it: the apply then writes pages scattered
over the file, one pwrite(2) each, where under a pin held throughout
(``--checkpoint-every 0``) it appends fresh pages in a few writev(2) calls.
It prints, per n, the apply's CPU time (this thread's, ``time.thread_time``)
per apply and per key, the bytes it wrote with write(2) and pwrite(2)
(``/proc/self/io`` ``wchar``: LMDB's page writes), and the cost of each
further key between the two largest sizes. With ``--complete`` each
batch's claims are completed before the apply (the main job's mix: a claim
completed within one interval writes only its completed record).

First it times what one such page write costs this kernel: a 4 KiB pwrite at
a random page of a 64 MiB file whose page cache was filled by 4 KiB writes,
and by 1 MiB ones (a filesystem with large folios, ext4 on Linux 6.x, caches
the latter in large folios, and a small write into one costs more; LMDB
grows its file with writev of up to 64 pages).

With ``--py-lmdb`` the apply's writes are py-lmdb's calls (each releasing
and taking back the GIL), not LMDB's own with the GIL released once
(csrc/ds_lmdb.h): run both to compare.

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_apply.py [--base 200000] [--reps 30] [--py-lmdb]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dedupstore
from dedupstore import DedupStore, _native

SIZES = (1, 4, 16, 64, 256, 1024)


def wchar() -> int:
    with open(f"/proc/{os.getpid()}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar line")


def page_write_us(directory: str, fill: int, size: int = 64 << 20, writes: int = 20_000) -> float:
    """CPU per 4 KiB pwrite at random pages of a file first written (and
    synced) in ``fill``-byte writes."""
    rng = random.Random(3)
    with tempfile.TemporaryDirectory(prefix="bench-apply-pages-", dir=directory) as tmp:
        fd = os.open(Path(tmp) / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            zeros = bytes(fill)
            for off in range(0, size, fill):
                os.pwrite(fd, zeros, off)
            os.fsync(fd)
            page = b"p" * 4096
            offsets = [rng.randrange(size // 4096) * 4096 for _ in range(writes)]
            c0 = time.thread_time()
            for off in offsets:
                os.pwrite(fd, page, off)
            return (time.thread_time() - c0) / writes * 1e6
        finally:
            os.close(fd)


def measure(
    base: int, sizes: tuple[int, ...], reps: int, complete: bool, checkpoint_every: int, directory: str
) -> dict[str, Any]:
    rng = random.Random(7)

    def fresh(n: int) -> list[bytes]:
        return [b"order-%016x:v%d" % (rng.getrandbits(64), rng.randrange(4)) for _ in range(n)]

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-apply-", dir=directory) as tmp:
        store = DedupStore.open(
            Path(tmp) / "s", durability="flush", partitions=1, eviction_rate=0, flush_interval=3600,
            apply_interval=1.0,
        )
        try:
            store.ensure_namespace("n", horizon=12 * 3600.0, lease=600.0)
            window = store._parts[0].window  # noqa: SLF001 - the bench drives the apply itself
            if window is None:
                raise SystemExit("write-behind is off: nothing to measure")
            keys = fresh(base)
            for i in range(0, base, 1000):
                store.claim_many("n", keys[i : i + 1000])
            window.apply()
            store.flush()  # the pin now holds the filled tree: every apply after it copies what it touches
            applies = 0
            for n in sizes:
                cpu, wrote = [], []
                for _ in range(reps):
                    batch = fresh(n)
                    res = store.claim_many("n", batch)
                    if complete:
                        store.complete_many("n", [(k, t, b"ok") for k, t in zip(batch, res.tokens, strict=True) if t])
                    if not window.active:
                        raise SystemExit("the write-behind window closed: the figures would not be an apply's")
                    w0, c0 = wchar(), time.thread_time()
                    window.apply()
                    cpu.append(time.thread_time() - c0)
                    wrote.append(wchar() - w0)
                    applies += 1
                    if checkpoint_every and applies % checkpoint_every == 0:
                        store.flush()
                med = statistics.median(cpu)
                rows.append({
                    "keys": n, "apply_us": round(med * 1e6, 1), "per_key_us": round(med * 1e6 / n, 2),
                    "bytes_per_key": round(statistics.median(wrote) / n),
                })
        finally:
            store.close()
    # What one more key adds, where the apply's own pages (meta, roots, free
    # list) are spread thin: between the two largest sizes (None for one size).
    marginal = None
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        marginal = round((b["apply_us"] - a["apply_us"]) / (b["keys"] - a["keys"]), 2)
    return {"marginal_us_per_key": marginal, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=int, default=200_000, help="keys in the store before measuring (default 200,000)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="keys per apply, comma-separated")
    ap.add_argument("--reps", type=int, default=30, help="applies per size; the median is shown (default 30)")
    ap.add_argument("--complete", action="store_true", help="complete each batch's claims before its apply")
    ap.add_argument("--checkpoint-every", type=int, default=20,
                    help="checkpoint after every N applies (default 20); 0: never, the pin is held throughout")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temporary store (default: /tmp)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 2,000 keys, 3 reps, sizes 1 and 16, an 8 MiB page-write file")
    ap.add_argument("--py-lmdb", action="store_true",
                    help="make the apply's writes with py-lmdb's calls, not LMDB's own (csrc/ds_lmdb.h)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    base, reps = args.base, args.reps
    try:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    except ValueError:
        ap.error(f"--sizes takes whole numbers separated by commas; got {args.sizes!r}")
    if args.quick:
        base, reps, sizes = 2000, 3, (1, 16)
    if any(n < 1 for n in sizes) or list(sizes) != sorted(set(sizes)):
        ap.error(f"--sizes must be increasing and at least 1; got {args.sizes!r}")
    if reps < 1 or base < 0:
        ap.error(f"--reps must be at least 1 and --base at least 0; got {reps} and {base}")
    _native.set_lmdb_direct(not args.py_lmdb)
    direct, why = _native.lmdb_direct()
    size, writes = ((8 << 20), 2000) if args.quick else ((64 << 20), 20_000)
    pages = {f"filled_by_{fill}": round(page_write_us(args.dir, fill, size, writes), 2) for fill in (4096, 1 << 20)}
    try:
        out = measure(base, sizes, reps, args.complete, args.checkpoint_every, args.dir)
    finally:
        _native.set_lmdb_direct(True)  # the default again (the tests call main() in their process)
    out.update({"base": base, "reps": reps, "complete": args.complete, "checkpoint_every": args.checkpoint_every,
                "page_write_us": pages, "lmdb_direct": direct, "version": dedupstore.__version__})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    what = "claims completed before the apply" if args.complete else "claims"
    pin = (f"a checkpoint every {args.checkpoint_every} applies" if args.checkpoint_every
           else "the checkpoint pin held throughout")
    print(f"page write: 4 KiB pwrite at a random page, {pages['filled_by_4096']:.2f} us CPU where the file was "
          f"written in 4 KiB writes, {pages['filled_by_1048576']:.2f} us where in 1 MiB ones")
    print(f"dedupstore {dedupstore.__version__}: one write-behind apply (flush, 1 partition, {base:,} keys "
          f"already in it, {pin}); {what}; writes by {'LMDB directly' if direct else 'py-lmdb: ' + why}; "
          f"median of {reps}")
    print(f"{'keys':>6s} {'us per apply':>13s} {'us per key':>11s} {'bytes written per key':>22s}")
    for r in out["rows"]:
        print(f"{r['keys']:6d} {r['apply_us']:13.1f} {r['per_key_us']:11.2f} {r['bytes_per_key']:22,d}")
    if out["marginal_us_per_key"] is not None:
        a, b = out["rows"][-2]["keys"], out["rows"][-1]["keys"]
        print(f"each key past {a}: {out['marginal_us_per_key']:.2f} us (from {a} to {b} keys per apply)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
