"""Claim cost as the store grows: 1M, 10M and the largest store loaded in the time allowed.

The store is loaded the way the reference stream fills it: random (not
time-ordered) 55-byte business keys, claimed with ``claim_many`` and completed
with ``complete_many``, 10,000 a batch, while an injected clock advances at
18,000 events/s (so 10M entries are 9.3 minutes of stream, one generation of a
12-hour horizon: the hard case, where the newest generation is the whole
store). Each point is a copy of the store as it was then; the copies are
open side by side and measured in interleaved rounds (after one warm-up
round), so the machine's busy spells fall on every size alike. Loading runs
in ``flush`` mode (commits reach the page cache, a checkpoint a second makes
them durable; the kernel coalesces the writes), or it would take most of an
hour on a disk that fsyncs ~10,000 random pages a second; every measurement
reopens the store in the real ``--durability``. At each point it measures, on the open store (warm cache):

- ``claim()`` of a new key: wall and CPU microseconds per claim (median, p99);
- ``claim_many(1000)`` of new keys: wall and CPU microseconds per key;
- ``claim()`` of a recently seen key (a redelivery: DUPLICATE, read only);

then closes the store, drops its files from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``), reopens it and counts major page
faults (``getrusage``) per 1,000 new-key claims and per 1,000 redeliveries.
Bytes per entry are the partitions' pages in use (and live B-tree pages) over
the entries. Run from outside the source tree:

    cd /tmp && python /path/to/benches/bench_scale.py [--points 1e6,1e7] [--largest-seconds 240] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lmdb

from dedupstore import DedupStore

# Loading only: commits reach the page cache, and a checkpoint each second
# makes them durable (see the docstring).
LOAD_DURABILITY = "flush"

NS = "orders"
RATE = 18_000.0  # events/s of stream the injected clock advances per entry loaded
LOAD_BATCH = 10_000
KEY_BYTES = 55
SAMPLES = 2000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Keys:
    """Random order-like keys of exactly KEY_BYTES bytes: `order/<16 hex>/v<n>` padded."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.n = 0

    def take(self, count: int) -> list[bytes]:
        raw = os.urandom(8 * count)
        out = []
        for i in range(count):
            k = b"order/%s/v%d/" % (raw[8 * i : 8 * i + 8].hex().encode(), self.seed)
            out.append(k.ljust(KEY_BYTES, b"."))
        self.n += count
        return out


def load(store: DedupStore, clock: Clock, keys: Keys, count: int) -> list[bytes]:
    last: list[bytes] = []
    while count > 0:
        n = min(LOAD_BATCH, count)
        batch = keys.take(n)
        res = store.claim_many(NS, batch)
        store.complete_many(NS, [(r.key, r.token, b"") for r in res if r.token is not None])
        clock.now += n / RATE
        count -= n
        last = batch
    return last


def timed(fn: Any, items: list[Any]) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for item in items:
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        fn(item)
        t1, c1 = time.perf_counter_ns(), time.process_time_ns()
        wall.append((t1 - t0) / 1e3)
        cpu.append((c1 - c0) / 1e3)
    return wall, cpu


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def disk_figures(root: Path) -> dict[str, int]:
    used = live = entries = 0
    for part in sorted(root.glob("p[0-9][0-9][0-9]")):
        env = lmdb.open(str(part), max_dbs=4, readonly=True, lock=False)
        try:
            psize = env.stat()["psize"]
            used += (env.info()["last_pgno"] + 1) * psize
            with env.begin() as txn:
                for name in (b"records", b"pending", b"meta"):
                    st = txn.stat(env.open_db(name, txn=txn, create=False))
                    live += (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * psize
                    if name == b"records":
                        entries += st["entries"]
        finally:
            env.close()
    return {"bytes_used": used, "live_bytes": live, "records": entries}


def drop_cache(root: Path) -> None:
    for f in root.rglob("*.mdb"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def majflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def measure(store: DedupStore, keys: Keys, recent: list[bytes], samples: int) -> dict[str, list[float]]:
    wall, cpu = timed(lambda k: store.claim(NS, k), keys.take(samples))
    bwall, bcpu = timed(lambda b: store.claim_many(NS, b), [keys.take(1000) for _ in range(2)])
    dwall, dcpu = timed(lambda k: store.claim(NS, k), recent[-samples:])
    return {
        "claim_new": wall,
        "claim_new_cpu": cpu,
        "claim_many": [w / 1000 for w in bwall],
        "claim_many_cpu": [c / 1000 for c in bcpu],
        "duplicate": dwall,
        "duplicate_cpu": dcpu,
    }


def cold(root: Path, clock: Clock, keys: Keys, recent: list[bytes], durability: str) -> dict[str, float]:
    drop_cache(root)
    with DedupStore.open(root, clock=clock, durability=durability, eviction_rate=0) as store:
        f0 = majflt()
        t0 = time.perf_counter()
        for k in keys.take(1000):
            store.claim(NS, k)
        t1 = time.perf_counter()
        f1 = majflt()
        for k in recent[:1000]:  # the oldest of the last batch: not touched since loading
            store.claim(NS, k)
        f2 = majflt()
    return {
        "cold_majflt_per_1000_new": f1 - f0,
        "cold_claim_new_us_mean": (t1 - t0) / 1000 * 1e6,
        "cold_majflt_per_1000_duplicates": f2 - f1,
    }


def fsync_files(root: Path) -> None:
    for f in root.rglob("data.mdb"):  # what the load left in the page cache, made durable
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


class Snapshot:
    """A closed copy of the store at one size, with the clock and keys it ended at."""

    def __init__(self, root: Path, entries: int, now: float, recent: list[bytes], load_s: float) -> None:
        self.root, self.entries, self.now, self.recent, self.load_s = root, entries, now, recent, load_s
        self.samples: dict[str, list[float]] = {}


def build(tmp: Path, points: list[int], largest_seconds: float, partitions: int, quiet: bool) -> list[Snapshot]:
    """Load one store through every point, copying it aside at each (closed, synced)."""
    clock = Clock()
    keys = Keys(seed=1)
    root = tmp / "loading"
    store = DedupStore.open(root, clock=clock, durability=LOAD_DURABILITY, partitions=partitions, eviction_rate=0)
    store.ensure_namespace(NS, horizon="12h")
    loaded = 0
    recent: list[bytes] = []
    snaps = []
    targets = [(p, None) for p in points] + ([(None, largest_seconds)] if largest_seconds > 0 else [])
    for target, seconds in targets:
        t0 = time.perf_counter()
        if target is not None:
            recent = load(store, clock, keys, target - loaded) or recent
            loaded = target
        else:
            deadline = t0 + seconds
            while time.perf_counter() < deadline:
                recent = load(store, clock, keys, 100_000)
                loaded += 100_000
        load_s = time.perf_counter() - t0
        store.close()
        fsync_files(root)
        snap = tmp / f"at-{loaded}"
        shutil.copytree(root, snap)
        fsync_files(snap)
        snaps.append(Snapshot(snap, loaded, clock.now, recent, load_s))
        if not quiet:
            print(f"loaded {loaded:,} entries ({load_s:.0f} s)", file=sys.stderr, flush=True)
        store = DedupStore.open(root, clock=clock, durability=LOAD_DURABILITY, eviction_rate=0)
    store.close()
    shutil.rmtree(root)
    return snaps


def run(
    points: list[int], largest_seconds: float, durability: str, partitions: int, rounds: int, quiet: bool
) -> list[dict]:
    """Build the snapshots, then measure them in interleaved rounds (each round
    visits every size, in rotating order), so that a busy spell on a shared
    machine lands on all sizes alike instead of on whichever was measured then."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        snaps = build(Path(tmp), points, largest_seconds, partitions, quiet)
        keys = Keys(seed=2)
        # All sizes open at once, as a long-running consumer has its store
        # open: pages stay mapped between rounds. Round 0 warms up and is
        # not counted (it would time first touches after open).
        stores = []
        for snap in snaps:
            clock = Clock()
            clock.now = snap.now + 1.0  # its own stream time: the same generation it was loaded in
            stores.append(DedupStore.open(snap.root, clock=clock, durability=durability, eviction_rate=0))
        try:
            for r in range(rounds + 1):
                pairs = list(zip(snaps, stores, strict=True))
                for snap, store in pairs[r % len(pairs):] + pairs[: r % len(pairs)]:
                    got = measure(store, keys, snap.recent, SAMPLES // rounds)
                    if r:
                        for name, xs in got.items():
                            snap.samples.setdefault(name, []).extend(xs)
                if not quiet:
                    print(f"round {r}/{rounds} measured" + (" (warm-up)" if r == 0 else ""), file=sys.stderr,
                          flush=True)
        finally:
            for store in stores:
                store.close()
        out: list[dict] = []
        for snap in snaps:
            m = snap.samples
            row: dict[str, Any] = {
                "entries": snap.entries,
                "load_seconds": round(snap.load_s, 1),
                "claim_new_us_p50": statistics.median(m["claim_new"]),
                "claim_new_us_p99": pct(m["claim_new"], 0.99),
                "claim_new_cpu_us_p50": statistics.median(m["claim_new_cpu"]),
                "claim_many_us_per_key": statistics.median(m["claim_many"]),
                "claim_many_cpu_us_per_key": statistics.median(m["claim_many_cpu"]),
                "duplicate_us_p50": statistics.median(m["duplicate"]),
                "duplicate_cpu_us_p50": statistics.median(m["duplicate_cpu"]),
            }
            row.update(disk_figures(snap.root))
            row["bytes_per_entry"] = row["bytes_used"] / row["records"]
            row["live_bytes_per_entry"] = row["live_bytes"] / row["records"]
            clock = Clock()
            clock.now = snap.now + 2.0
            row.update(cold(snap.root, clock, keys, snap.recent, durability))
            out.append(row)
            if not quiet:
                print(json.dumps(row), file=sys.stderr, flush=True)
            shutil.rmtree(snap.root)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1e6,1e7", help="entry counts to measure at (comma separated)")
    ap.add_argument("--largest-seconds", type=float, default=240.0,
                    help="after the last point, load for this long and measure again (0: skip)")
    ap.add_argument("--durability", default="flush", choices=["sync", "flush"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved measurement rounds over the sizes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    points = [int(float(p)) for p in args.points.split(",") if p]
    rows = run(points, args.largest_seconds, args.durability, args.partitions, args.rounds, quiet=args.json)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    cols = [
        ("entries", "{:,}"), ("claim_new_us_p50", "{:.1f}"), ("claim_new_cpu_us_p50", "{:.1f}"),
        ("claim_new_us_p99", "{:.0f}"), ("claim_many_us_per_key", "{:.2f}"), ("duplicate_us_p50", "{:.1f}"),
        ("cold_majflt_per_1000_new", "{}"), ("cold_majflt_per_1000_duplicates", "{}"),
        ("bytes_per_entry", "{:.1f}"), ("live_bytes_per_entry", "{:.1f}"),
    ]
    print("  ".join(name for name, _ in cols))
    for r in rows:
        print("  ".join(fmt.format(r[name]) for name, fmt in cols))
    first, last = rows[0], rows[-1]
    for name in ("claim_new_us_p50", "claim_new_cpu_us_p50", "claim_many_us_per_key", "duplicate_us_p50"):
        print(f"{name}: {last[name] / first[name]:.2f}x from {first['entries']:,} to {last['entries']:,} entries")


if __name__ == "__main__":
    main()
