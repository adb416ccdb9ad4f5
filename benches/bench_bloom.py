#!/usr/bin/env python3
"""Bloom prefilter benchmark: our blocked filter in C (csrc/ds_bloom.c, through
the Cython class dedupstore._native.BloomFilter) against pybloom-live (the library
the original design named) and rbloom (a Rust filter), at 1M keys and 1% FP.

For each implementation: build (add) ns/op, query ns/op for present and for
absent keys, the measured false-positive rate over absent keys, and memory in
bytes per key. Rows:

    C per-op, hash given     add_hash / maybe_hash with precomputed 64-bit hashes
                             (the store's hot path computes the hash anyway)
    C per-op, key+SipHash    add(hasher, key) / maybe(hasher, key): keyed SipHash-64
                             of the 55-byte key and the probe, in one call
    C bulk, hash given       add_hashes / maybe_hashes over an array('Q')
    C bulk, key+SipHash      add_keys(hasher, keys): the build scan of a generation
    rbloom, builtin hash     Bloom.add / `in`, hashing with Python's hash(): salted
                             per process, so such a filter cannot be persisted;
                             bytes objects cache their hash, so repeated lookups of
                             the same object skip hashing (the present-key queries)
    rbloom, Hasher.hash64    hash_func = our keyed SipHash (persistable, like ours)
    rbloom bulk              Bloom.update (build only; rbloom has no bulk query)
    pybloom-live             BloomFilter.add / `in` (pure Python over bitarray)

Every per-op figure includes the Python loop and call (the "loop + call" line
measures that floor with len()). The SipHash line is Hasher.hash64 of a 55-byte
key alone, so a per-probe total is that plus a maybe_hash.

Timing: every pass is cut into chunks of 50,000 operations, each timed alone;
the table shows the fastest chunk over --reps passes (the JSON also has the
median chunk). On a shared machine a whole pass is rarely free of other work,
but a chunk of a few milliseconds often is, so the fastest chunk estimates the
uncontended cost. pybloom-live makes one pass, its queries on a sample. This is
a benchmark, not a test: it never asserts timings, but it does check that no
implementation gave a false negative.
Run it from outside the source tree so the installed package is imported:

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_bloom.py [--quick] [--json]

The peers are optional: pip install pybloom-live rbloom (a missing one is
skipped with a printed line).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import platform
import random
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import dedupstore
from dedupstore._native import BloomFilter, Hasher

try:
    import rbloom
except ImportError:  # pragma: no cover - optional peer
    rbloom = None

try:
    import pybloom_live
except ImportError:  # pragma: no cover - optional peer
    pybloom_live = None

KEY_BYTES = 55
FP_RATE = 0.01
CHUNK = 50_000

PROFILES = {
    # keys, passes per figure, pybloom-live query sample
    "full": dict(n=1_000_000, reps=15, pybloom_sample=200_000),
    "quick": dict(n=50_000, reps=1, pybloom_sample=10_000),
}


def make_keys(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(KEY_BYTES) for _ in range(n)]


def chunks(items: Sequence[Any], size: int = CHUNK) -> list[Any]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Timing:
    """ns per operation: the fastest chunk, and the median chunk."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def measure(op: Callable[[Any], Any], parts: list[Any], reps: int, setup: Callable[[], Any] | None = None) -> Timing:
    """Run op on every part, reps times (setup, untimed, before each pass); time each part."""
    t = Timing()
    for _ in range(reps):
        if setup is not None:
            setup()
        gc.collect()
        gc.disable()
        try:
            for part in parts:
                t0 = time.perf_counter_ns()
                op(part)
                t.samples.append((time.perf_counter_ns() - t0) / len(part))
        finally:
            gc.enable()
    return t


def loop_call(fn: Callable[[Any], Any], items: Sequence[Any]) -> None:
    """The timed loop: call fn on every item, nothing else (no per-hit work, so
    present and absent keys cost the same Python overhead)."""
    for x in items:
        fn(x)


def count_true(fn: Callable[[Any], Any], items: Sequence[Any]) -> int:
    """Untimed: how many items fn answers truthy for (the correctness and FP pass)."""
    return sum(1 for x in items if fn(x))


class Row:
    def __init__(self, name: str) -> None:
        self.name = name
        self.build: Timing | None = None
        self.present: Timing | None = None
        self.absent: Timing | None = None
        self.fp_rate: float | None = None
        self.bytes_per_key: float | None = None
        self.note = ""

    def as_dict(self) -> dict[str, Any]:
        def both(t: Timing | None) -> dict[str, float] | None:
            return None if t is None else {"best": round(t.best, 2), "median": round(t.median, 2)}

        return {
            "build_ns_per_op": both(self.build),
            "query_present_ns_per_op": both(self.present),
            "query_absent_ns_per_op": both(self.absent),
            "fp_rate": self.fp_rate,
            "bytes_per_key": self.bytes_per_key,
            "note": self.note,
        }


def check_present(name: str, hits: int, n: int) -> None:
    if hits != n:
        raise SystemExit(f"{name}: {n - hits} false negatives out of {n}: the filter is broken")


# --------------------------------------------------------------------------


def bench_ours(
    hasher: Hasher, keys: list[bytes], absent: list[bytes], reps: int, log: Callable[[str], None]
) -> list[Row]:
    n = len(keys)
    hashes = [hasher.hash64(k) for k in keys]
    absent_hashes = [hasher.hash64(k) for k in absent]
    key_parts, absent_parts = chunks(keys), chunks(absent)
    hash_parts, absent_hash_parts = chunks(hashes), chunks(absent_hashes)
    arr_parts, absent_arr_parts = chunks(array("Q", hashes)), chunks(array("Q", absent_hashes))
    rows = []
    holder: dict[str, BloomFilter] = {}

    def fresh() -> None:
        holder["bf"] = BloomFilter(n, FP_RATE)

    # Per-op, hash given.
    row = Row("C per-op, hash given")
    row.build = measure(lambda part: loop_call(holder["bf"].add_hash, part), hash_parts, reps, fresh)
    bf = holder["bf"]
    check_present(row.name, count_true(bf.maybe_hash, hashes), n)
    row.present = measure(lambda part: loop_call(bf.maybe_hash, part), hash_parts, reps)
    row.absent = measure(lambda part: loop_call(bf.maybe_hash, part), absent_hash_parts, reps)
    row.fp_rate = count_true(bf.maybe_hash, absent_hashes) / len(absent)
    row.bytes_per_key = bf.nbytes / n
    row.note = f"k={bf.k}, {bf.nbytes * 8 / n:.2f} bits/key"
    rows.append(row)
    log(f"  {row.name}: done")

    # Per-op, key + SipHash in one call.
    row = Row("C per-op, key+SipHash")

    def add_keys_loop(part: list[bytes]) -> None:
        add = holder["bf"].add
        for k in part:
            add(hasher, k)

    row.build = measure(add_keys_loop, key_parts, reps, fresh)
    bf2 = holder["bf"]
    if bf2.to_bytes() != bf.to_bytes():
        raise SystemExit("add(hasher, key) and add_hash(hasher.hash64(key)) built different filters")

    def query_keys(part: list[bytes]) -> None:
        maybe = bf2.maybe
        for k in part:
            maybe(hasher, k)

    check_present(row.name, count_true(lambda k: bf2.maybe(hasher, k), keys), n)
    row.present = measure(query_keys, key_parts, reps)
    row.absent = measure(query_keys, absent_parts, reps)
    row.fp_rate = count_true(lambda k: bf2.maybe(hasher, k), absent) / len(absent)
    row.bytes_per_key = bf2.nbytes / n
    rows.append(row)
    log(f"  {row.name}: done")

    # Bulk, hash given.
    row = Row("C bulk, hash given")
    row.build = measure(lambda part: holder["bf"].add_hashes(part), arr_parts, reps, fresh)
    bf3 = holder["bf"]
    check_present(row.name, sum(bf3.maybe_hashes(part).count(1) for part in arr_parts), n)
    row.present = measure(bf3.maybe_hashes, arr_parts, reps)
    row.absent = measure(bf3.maybe_hashes, absent_arr_parts, reps)
    row.fp_rate = sum(bf3.maybe_hashes(part).count(1) for part in absent_arr_parts) / len(absent)
    row.bytes_per_key = bf3.nbytes / n
    row.note = "array('Q') in, bytes out"
    rows.append(row)

    # Bulk build from keys (the sealed-generation scan).
    row = Row("C bulk, key+SipHash")
    row.build = measure(lambda part: holder["bf"].add_keys(hasher, part), key_parts, reps, fresh)
    row.bytes_per_key = holder["bf"].nbytes / n
    row.note = "add_keys (build only)"
    rows.append(row)
    log("  C bulk: done")
    return rows


def bench_rbloom_one(
    name: str, hash_func: Callable[[Any], int] | None, keys: list[bytes], absent: list[bytes], reps: int
) -> Row:
    assert rbloom is not None
    n = len(keys)
    key_parts, absent_parts = chunks(keys), chunks(absent)
    holder: dict[str, Any] = {}

    def fresh() -> None:
        holder["bf"] = rbloom.Bloom(n, FP_RATE) if hash_func is None else rbloom.Bloom(n, FP_RATE, hash_func)

    row = Row(name)
    row.build = measure(lambda part: loop_call(holder["bf"].add, part), key_parts, reps, fresh)
    bf = holder["bf"]
    contains = bf.__contains__
    check_present(name, count_true(contains, keys), n)
    row.present = measure(lambda part: loop_call(contains, part), key_parts, reps)
    row.absent = measure(lambda part: loop_call(contains, part), absent_parts, reps)
    row.fp_rate = count_true(contains, absent) / len(absent)
    row.bytes_per_key = bf.size_in_bits / 8 / n
    row.note = "not persistable (salted hash)" if hash_func is None else "persistable"
    return row


def bench_rbloom(
    hasher: Hasher, keys: list[bytes], absent: list[bytes], reps: int, log: Callable[[str], None]
) -> list[Row]:
    assert rbloom is not None
    n = len(keys)
    rows = []
    for name, hash_func in (("rbloom, builtin hash", None), ("rbloom, Hasher.hash64", hasher.hash64)):
        rows.append(bench_rbloom_one(name, hash_func, keys, absent, reps))
        log(f"  {name}: done")

    row = Row("rbloom bulk, builtin hash")
    holder: dict[str, Any] = {}

    def fresh_plain() -> None:
        holder["bf"] = rbloom.Bloom(n, FP_RATE)

    row.build = measure(lambda part: holder["bf"].update(part), chunks(keys), reps, fresh_plain)
    row.bytes_per_key = holder["bf"].size_in_bits / 8 / n
    row.note = "update (build only)"
    rows.append(row)
    return rows


def bench_pybloom(keys: list[bytes], absent: list[bytes], sample: int, log: Callable[[str], None]) -> list[Row]:
    assert pybloom_live is not None
    n = len(keys)
    row = Row("pybloom-live")
    holder: dict[str, Any] = {}

    def fresh() -> None:
        holder["bf"] = pybloom_live.BloomFilter(capacity=n, error_rate=FP_RATE)

    row.build = measure(lambda part: loop_call(holder["bf"].add, part), chunks(keys), 1, fresh)
    bf = holder["bf"]
    contains = bf.__contains__
    present = keys[:: max(1, n // sample)][:sample]
    absent_sample = absent[:sample]
    check_present(row.name, count_true(contains, present), len(present))
    row.present = measure(lambda part: loop_call(contains, part), chunks(present), 1)
    row.absent = measure(lambda part: loop_call(contains, part), chunks(absent_sample), 1)
    row.fp_rate = count_true(contains, absent_sample) / len(absent_sample)
    row.bytes_per_key = bf.num_bits / 8 / n
    row.note = f"queries on {len(absent_sample):,} keys; 1 pass"
    log("  pybloom-live: done")
    return [row]


# --------------------------------------------------------------------------


def fmt(t: Timing | float | None, width: int, prec: int = 1) -> str:
    if t is None:
        return f"{'-':>{width}}"
    return format(t.best if isinstance(t, Timing) else t, f"{width}.{prec}f")


def print_table(rows: list[Row], extras: dict[str, Timing], cfg: dict[str, Any]) -> None:
    print()
    print(
        f"Bloom filters, {cfg['n']:,} keys of {KEY_BYTES} bytes, target FP {FP_RATE:.0%}; ns/op = fastest "
        f"{CHUNK:,}-op chunk of {cfg['reps']} pass(es) (profile {cfg['profile']})"
    )
    head = (
        f"{'implementation':28} {'build ns/op':>11} {'present ns/op':>13} {'absent ns/op':>12} "
        f"{'FP rate':>8} {'bytes/key':>9}  note"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        fp = "-" if r.fp_rate is None else f"{r.fp_rate * 100:.3f}%"
        print(
            f"{r.name:28} {fmt(r.build, 11)} {fmt(r.present, 13)} {fmt(r.absent, 12)} "
            f"{fp:>8} {fmt(r.bytes_per_key, 9, 3)}  {r.note}"
        )
    sip, floor = extras["siphash64"], extras["loop_call"]
    probe, fused = rows[0].absent, rows[1].absent
    assert probe is not None and fused is not None
    print()
    print(f"Hasher.hash64 of a {KEY_BYTES}-byte key (keyed SipHash-2-4):  {sip.best:.1f} ns/op")
    print(f"Python loop + call floor (len(key) per key):       {floor.best:.1f} ns/op")
    print(
        f"per-probe total, absent key: hash64 + maybe_hash = {sip.best + probe.best:.1f} ns as two calls; "
        f"fused maybe(hasher, key) = {fused.best:.1f} ns"
    )


def pressure() -> dict[str, float]:
    """Linux PSI 'some avg10' for cpu: the share of the last 10 s in which some task
    waited for a CPU (other work on a shared machine shows up here)."""
    out = {}
    try:
        with open("/proc/pressure/cpu") as f:
            first = f.readline().split()
        out["cpu"] = float(dict(x.split("=") for x in first[1:])["avg10"])
    except (OSError, ValueError, KeyError):
        pass
    return out


def wait_quiet(limit_s: float, cpu_max: float = 10.0) -> float:
    """Wait (at most limit_s) until PSI shows the CPUs quiet; returns seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if pressure().get("cpu", 0.0) < cpu_max:
            break
        time.sleep(2.0)
    return time.monotonic() - t0


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--reps", type=int, default=None, help="runs per figure (best is kept)")
    ap.add_argument("--keys", type=int, default=None, help="keys in the filter (default 1M; --quick 50k)")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for CPU pressure (PSI avg10) below 10%%",
    )
    args = ap.parse_args(argv)

    profile = "quick" if args.quick else "full"
    cfg: dict[str, Any] = dict(PROFILES[profile])
    cfg["profile"] = profile
    if args.reps:
        cfg["reps"] = args.reps
    if args.keys:
        cfg["n"] = args.keys
    n, reps = cfg["n"], cfg["reps"]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)

    waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
    psi_start = pressure()
    log(f"generating {2 * n:,} random {KEY_BYTES}-byte keys")
    keys = make_keys(1, n)
    absent = make_keys(2, n)
    hasher = Hasher(os.urandom(16))

    rows: list[Row] = []
    skipped: dict[str, str] = {}
    log("dedupstore C filter")
    rows += bench_ours(hasher, keys, absent, reps, log)
    if rbloom is None:
        skipped["rbloom"] = "not installed (pip install rbloom)"
        log("rbloom: skipped, not installed (pip install rbloom)")
    else:
        log("rbloom")
        rows += bench_rbloom(hasher, keys, absent, reps, log)
    if pybloom_live is None:
        skipped["pybloom-live"] = "not installed (pip install pybloom-live)"
        log("pybloom-live: skipped, not installed (pip install pybloom-live)")
    else:
        log("pybloom-live")
        rows += bench_pybloom(keys, absent, cfg["pybloom_sample"], log)

    h64 = hasher.hash64
    extras = {
        "siphash64": measure(lambda part: loop_call(h64, part), chunks(absent), reps),
        "loop_call": measure(lambda part: loop_call(len, part), chunks(absent), reps),
    }

    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": "bloom",
                    "config": {**cfg, "key_bytes": KEY_BYTES, "fp_rate": FP_RATE},
                    "environment": {
                        "python": sys.version.split()[0],
                        "platform": platform.platform(),
                        "machine": platform.machine(),
                        "cpus": os.cpu_count(),
                        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                        "waited_for_quiet_s": round(waited, 1),
                        "cpu_pressure_avg10_start": psi_start.get("cpu"),
                        "cpu_pressure_avg10_end": pressure().get("cpu"),
                        "dedupstore": getattr(dedupstore, "__version__", None),
                        "rbloom": _version("rbloom") if rbloom else None,
                        "pybloom_live": _version("pybloom-live") if pybloom_live else None,
                    },
                    "results": {r.name: r.as_dict() for r in rows},
                    "extras_ns_per_op": {
                        "hasher_hash64_55B": {
                            "best": round(extras["siphash64"].best, 2),
                            "median": round(extras["siphash64"].median, 2),
                        },
                        "loop_call_floor": {
                            "best": round(extras["loop_call"].best, 2),
                            "median": round(extras["loop_call"].median, 2),
                        },
                    },
                    "chunk_ops": CHUNK,
                    "skipped": skipped,
                }
            )
        )
    else:
        print_table(rows, extras, cfg)
        load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "?"
        print(
            f"machine: {os.cpu_count()} CPUs; CPU pressure (PSI avg10) {psi_start.get('cpu', '?')}% at start, "
            f"{pressure().get('cpu', '?')}% at end; load average {load} at end"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
