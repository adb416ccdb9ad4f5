#!/usr/bin/env python3
"""What one call costs when the caches are cold.

A tight loop of calls keeps everything a call touches in the CPU's caches:
the interpreter's and the module's code, the overlay's dicts, the LMDB
pages, the Bloom filters. A consumer under the reference load calls the
store about 10,000 times a second between its own work, and its calls cost
it several times what a tight loop measures (docs/benchmarks.md). This
bench times each call back to back ("warm"), after touching every cache
line of a buffer larger than the last-level cache ("cold"), and after a
sleep of ``--idle-us`` ("idle": what the consumer of the main job does
between its rounds at 18,000 events/s, about 90 us; on a virtual machine
whose idle CPU halts, its caches are then partly gone, see
docs/benchmarks.md), on a store that has run a while: a namespace 13 hours old on the store's injected clock,
whose twelve past hour-long generations (of the default 12 h horizon) hold
``--keys`` completed records each, sealed and filtered, as the main job's
store does (``--generations`` sets how many past generations). Calls:

    claim new       claim() of a new key, with the reference intent
    claim dup       claim() of a completed key of a past generation
    round(1)        claim_many(1) of a new key then complete_many(1)
    round(2)        the same with two keys (the main job's mean batch is 1.8)
    python          no store call: a fixed piece of the interpreter's work
                    over a few small objects of its own (dict stores, str
                    formatting, json.dumps), a few microseconds warm. It
                    touches nothing of the store's, so what an idle wait
                    adds to it is the machine's doing (the CPU's state lost
                    while it halted), not the store's memory: the last
                    column, idle over warm, compares the two

The figure is each call's wall time (time.perf_counter around the call
alone, not the buffer's touching), the median and the mean over ``--calls``
calls, in flush mode (write-behind applied every 50 ms; a call may apply,
which the mean shows and the median does not). It never asserts a timing.

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_cold.py \
        [--keys 20000] [--generations 12] [--calls 1000] [--evict-mib 64] [--idle-us 90] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dedupstore
from dedupstore import DedupStore, Status

NS = "n"
HOUR = 3600.0
INTENT = {"amount": 1234, "currency": "EUR"}  # the reference stream's shape (dedupstore.loadgen)


def aged_store(path: Path, keys: int, generations: int = 12) -> tuple[DedupStore, list[float]]:
    """A flush-mode store whose namespace is ``generations + 1`` hours old:
    that many hour-long generations of ``keys`` completed records each, then
    the prefilter refreshed (the ``generations`` that ended are sealed and
    filtered; 12, the default horizon's, by default)."""
    clock = [time.time() - (generations + 1) * HOUR]
    store = DedupStore.open(path, durability="flush", eviction_rate=0, clock=lambda: clock[0])
    store.ensure_namespace(NS)
    for g in range(generations + 1):
        for j in range(0, keys, 1000):
            batch = [f"old{g}.{i}" for i in range(j, min(keys, j + 1000))]
            got = store.claim_many(NS, batch, [INTENT] * len(batch))
            store.complete_many(NS, [(k, t, b"ok") for k, t in zip(batch, got.tokens, strict=True)])
        clock[0] += HOUR
    store.refresh_prefilter()
    return store, clock


#: The ``python`` case's objects: its own, made once.
_REF_ITEMS = {"amount": 1234, "currency": "EUR", "tags": ["a", "b"]}


def python_work() -> None:
    """The ``python`` case: interpreter work over small objects of its own,
    a few microseconds back to back (6.3-6.9 against a round of one key's
    3.1-4.4 on the machine of docs/benchmarks.md's thirty-seventh session),
    and nothing of the store's."""
    out: dict[str, str] = {}
    for i in range(12):
        out[f"k{i}"] = f"order-{i:06d}:v{i % 4}"
    json.dumps(_REF_ITEMS, sort_keys=True)


def measure(keys: int, calls: int, evict_mib: int, directory: str, idle_us: float = 90.0,
            generations: int = 12) -> dict[str, Any]:
    junk = bytearray(max(1, evict_mib) << 20)
    zeros = bytes(len(range(0, len(junk), 64)))

    def evict() -> None:
        junk[::64] = zeros  # one write to every 64-byte line

    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cold-", dir=directory) as tmp:
        store, _ = aged_store(Path(tmp) / "s", keys, generations)
        try:
            seq = iter(range(10**9))

            def claim_new() -> None:
                if store.claim(NS, f"new{next(seq)}", INTENT).status is not Status.NEW:
                    raise SystemExit("a claim of a new key was not NEW: not measuring that")

            # Past generations 1.. (0 only if it is the one).
            first, span = (1, generations - 1) if generations > 1 else (0, 1)
            olds = iter(f"old{first + i % span}.{i % keys}" for i in range(10**9))

            def claim_dup() -> None:
                if store.claim(NS, next(olds), INTENT).status is not Status.DUPLICATE:
                    raise SystemExit("a claim of a completed key was not DUPLICATE: not measuring that")

            def round_of(n: int) -> Callable[[], None]:
                def call() -> None:
                    keys = [f"rnd{next(seq)}" for _ in range(n)]
                    got = store.claim_many(NS, keys, [INTENT] * n)
                    store.complete_many(NS, [(k, t, b"ok") for k, t in zip(keys, got.tokens, strict=True)])
                return call

            cases: dict[str, Callable[[], None]] = {
                "claim new": claim_new, "claim dup": claim_dup, "round(1)": round_of(1), "round(2)": round_of(2),
                "python": python_work,
            }
            if generations == 0:
                del cases["claim dup"]  # no past generation to repeat a key of
            for name, call in cases.items():
                for _ in range(max(10, calls // 10)):  # warm-up
                    call()
                # The conditions alternate in blocks, so all see the same
                # moments of a shared machine.
                before: dict[str, Callable[[], None]] = {
                    "warm": lambda: None, "cold": evict, "idle": lambda: time.sleep(idle_us / 1e6),
                }
                times: dict[str, list[float]] = {cond: [] for cond in before}
                block = max(1, calls // 10)
                while len(times["cold"]) < calls:
                    for cond, prepare in before.items():
                        for _ in range(block):
                            prepare()
                            t0 = time.perf_counter()
                            call()
                            times[cond].append(time.perf_counter() - t0)
                rows[name] = {}
                for cond, got in times.items():
                    rows[name][f"{cond}_median_us"] = round(statistics.median(got) * 1e6, 2)
                    rows[name][f"{cond}_mean_us"] = round(statistics.fmean(got) * 1e6, 2)
            st = store.stats()
        finally:
            store.close()
    return {"rows": rows, "bloom_filters": st["namespaces"][NS]["prefilter"]["filters"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=20_000, help="completed records per past generation (default 20,000)")
    ap.add_argument("--generations", type=int, default=12,
                    help="past generations, sealed and filtered (default 12: the default 12 h horizon's)")
    ap.add_argument("--calls", type=int, default=1000, help="calls timed per case and condition (default 1,000)")
    ap.add_argument("--evict-mib", type=int, default=64,
                    help="MiB of buffer touched before each cold call; more than the last-level cache (default 64)")
    ap.add_argument("--idle-us", type=float, default=90.0,
                    help="microseconds slept before each idle call (default 90: the main job's wait between rounds)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 200 keys, 20 calls, 4 MiB (figures meaningless)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temporary store (default: /tmp)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    if args.quick:
        args.keys, args.calls, args.evict_mib = 200, 20, 4
    if args.keys < 1 or args.calls < 1 or args.evict_mib < 1:
        ap.error(f"--keys, --calls and --evict-mib must be at least 1; got {args.keys}, {args.calls}, {args.evict_mib}")
    if not 0 <= args.generations <= 48:
        ap.error(f"--generations must be 0..48; got {args.generations}")
    if not 0.0 <= args.idle_us <= 1e6:
        ap.error(f"--idle-us must be 0..1,000,000; got {args.idle_us}")
    res = measure(args.keys, args.calls, args.evict_mib, args.dir, args.idle_us, args.generations)
    out = {"version": dedupstore.__version__, "keys": args.keys, "generations": args.generations,
           "calls": args.calls, "evict_mib": args.evict_mib, "idle_us": args.idle_us, **res}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"dedupstore {dedupstore.__version__}: one call's wall time, warm (back to back), cold (after "
          f"touching {args.evict_mib} MiB) and idle (after sleeping {args.idle_us:g} us), flush mode, "
          f"{res['bloom_filters']} sealed filters (all partitions) of {args.keys:,} keys; {args.calls:,} calls each")
    print(f"{'call':10s} {'warm p50':>10s} {'warm mean':>10s} {'cold p50':>10s} {'cold mean':>10s} "
          f"{'idle p50':>10s} {'idle mean':>10s} {'idle/warm':>10s}")
    for name, r in res["rows"].items():
        print(f"{name:10s} {r['warm_median_us']:7.2f} us {r['warm_mean_us']:7.2f} us {r['cold_median_us']:7.2f} us "
              f"{r['cold_mean_us']:7.2f} us {r['idle_median_us']:7.2f} us {r['idle_mean_us']:7.2f} us "
              f"{r['idle_median_us'] / r['warm_median_us']:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
