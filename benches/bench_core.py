#!/usr/bin/env python3
"""Core benchmark: dedupstore claims against raw py-lmdb doing the least it could.

Every comparison uses the same durability flags, the same key shapes (55-byte
random business keys, not time-ordered), and a fresh temporary directory per
store or environment, all on the same filesystem (``--dir``, default /tmp).

    (a) single ``claim`` of new keys, durability "sync", vs raw py-lmdb: one
        ``txn.put(key, value, overwrite=False)`` per write transaction with
        sync=True, metasync=True and a value the size of our record.
    (b) the same in durability "flush" vs raw with sync=False (no fsync at
        all and so not crash-safe: the cheapest raw LMDB).
    (c) ``claim_many`` of 1000 new keys vs raw: 1000 puts in one write
        transaction; both durability modes, default partitions and partitions=1.
    (d) durability "sync", 8 threads calling ``claim`` vs 1 thread, and raw
        py-lmdb with 8 threads each committing its own synced transaction.
    (e) duplicate claims (keys already completed): ``claim`` answered from a
        read-only snapshot vs raw py-lmdb ``get`` in a read transaction.
    (f) (information, no target) ``claim_many`` in "flush" on a namespace
        created now vs one that is a horizon (12h) old, with 13 live
        generations and no records (the clock is injected, as the SPEC
        allows). Without the live filter (docs/guarantees.md, "Filters") an
        absent key was probed in every one of them; with it, in none.

This is a benchmark, not a test: it never asserts timings. It does check that
every verdict is the one being measured (NEW, DUPLICATE), since a fast wrong
answer would be worthless. Run it from outside the source tree so the
installed package is imported:

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_core.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

# benches/ is this script's directory, so the asv suite's helpers import as a package.
from asv_suite.common import run_threads

import dedupstore
from dedupstore import DedupStore, Status
from dedupstore.loadgen import block_device_stat, sectors_written

try:  # the same figures the store uses, so raw runs are configured alike
    from dedupstore.layout import DEFAULT_MAP_SIZE, DEFAULT_PARTITIONS, MAX_READERS
except ImportError:  # pragma: no cover - layout moved; fall back to the documented values
    DEFAULT_MAP_SIZE = 256 << 30
    DEFAULT_PARTITIONS = 4
    MAX_READERS = 1024

#: Raw LMDB per durability mode. sync: LMDB fsyncs each commit (data, then the
#: meta page). flush: no fsync per commit, as dedupstore's flush mode, but
#: without its checkpoints, so an OS crash may corrupt it: the cheapest raw
#: LMDB there is, a harder peer than one with our guarantee.
RAW_DURABILITY = {"sync": {"sync": True, "metasync": True}, "flush": {"sync": False, "metasync": False}}

NS = "bench.core"
KEY_BYTES = 55

TARGETS = {
    "a": ("ours/raw per-op", "<=", 1.5),
    "b": ("ours/raw per-op", "<=", 1.5),
    "c": ("ours/raw throughput", ">=", 0.7),
    "d": ("8-thread durable claims/s", ">=", 18_000.0),
}

# Sizes per profile: (single ops per rep, reps, batches per rep, batch size,
# 1-thread claims, claims per thread (8 threads), raw claims per thread,
# duplicate keys, duplicate passes, fsync samples)
PROFILES = {
    "quick": dict(
        single=150,
        reps=2,
        batches=3,
        batch=1000,
        t1=300,
        t8=150,
        raw_t8=40,
        dup_keys=500,
        dup_passes=2,
        fsyncs=100,
        warmup=20,
    ),
    "full": dict(
        single=1500,
        reps=5,
        batches=12,
        batch=1000,
        t1=1500,
        t8=700,
        raw_t8=150,
        dup_keys=2000,
        dup_passes=5,
        fsyncs=600,
        warmup=50,
    ),
}


# ----------------------------------------------------------------- utilities


class Workspace:
    """Fresh temporary directories under one parent, removed as we go."""

    def __init__(self, parent: str, keep: bool) -> None:
        os.makedirs(parent, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="bench_core-", dir=parent)
        self.keep = keep

    def fresh(self, tag: str) -> str:
        return tempfile.mkdtemp(prefix=f"{tag}-", dir=self.root)

    def drop(self, path: str) -> None:
        if not self.keep:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def make_keys(rng: random.Random, n: int) -> list[bytes]:
    """n distinct 55-byte business keys, random (not time-ordered), ASCII."""
    seen: set[bytes] = set()
    keys: list[bytes] = []
    while len(keys) < n:
        k = rng.randbytes(28).hex()[:KEY_BYTES].encode()
        if k not in seen:
            seen.add(k)
            keys.append(k)
    return keys


def open_raw(path: str, durability: str, *, max_dbs: int = 0) -> lmdb.Environment:
    # Configured like dedupstore.layout.open_env, so only the code path differs.
    return lmdb.open(
        path,
        map_size=DEFAULT_MAP_SIZE,
        subdir=True,
        max_dbs=max_dbs,
        max_readers=MAX_READERS,
        readahead=False,
        writemap=False,
        map_async=False,
        **RAW_DURABILITY[durability],
    )


HORIZON_S = 12 * 3600.0


def open_store(ws: Workspace, durability: str, partitions: int | None, age_s: float = 0.0) -> tuple[DedupStore, str]:
    """A fresh store with namespace NS (horizon 12h). ``age_s`` > 0 makes the
    namespace that old: the store clock runs ``age_s`` ahead of the clock that
    created it, so every live generation since creation is probed, as in a
    store that has run that long (nothing is evicted)."""
    path = ws.fresh(f"ours-{durability}-p{partitions or 'd'}")
    offset = [0.0]
    clock = (lambda: time.time() + offset[0]) if age_s else None
    store = DedupStore.open(path, durability=durability, partitions=partitions, clock=clock)
    store.ensure_namespace(NS, horizon=HORIZON_S, lease="30s")
    offset[0] = age_s
    return store, path


def verdicts(store: DedupStore) -> dict[str, int]:
    return dict(store.stats()["verdicts"])


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


class Timer:
    """Wall and process-CPU time of a block (CPU covers every thread)."""

    def __enter__(self) -> Timer:
        gc.collect()
        self.c0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def spread(xs: list[float]) -> tuple[float, float]:
    return (min(xs), max(xs)) if xs else (float("nan"), float("nan"))


def record_size(ws: Workspace) -> int:
    """Bytes of the record a NEW claim (no intent, claimant or event id) stores."""
    store, path = open_store(ws, "flush", 1)
    try:
        res = store.claim(NS, b"k" * KEY_BYTES)
        rec = res.record
        raw = getattr(res, "_raw", None)
        if isinstance(raw, bytes):
            return len(raw)
        return 68 if rec is None else 68 + len(rec.outcome or b"")
    finally:
        store.close()
        ws.drop(path)


# ------------------------------------------------------------------ machine


def fsync_bench(ws: Workspace, samples: int) -> dict[str, float]:
    """Median cost of rewriting one 4 KiB page and syncing it (fsync and
    fdatasync, which LMDB uses on Linux), in the benchmark's own directory."""
    path = ws.fresh("fsync")
    fn = os.path.join(path, "f")
    fd = os.open(fn, os.O_RDWR | os.O_CREAT, 0o600)
    out: dict[str, float] = {}
    try:
        page = os.urandom(4096)
        os.pwrite(fd, page * 64, 0)
        os.fsync(fd)
        for name, fsync in (("fsync_us", os.fsync), ("fdatasync_us", os.fdatasync)):
            ts = []
            for i in range(samples):
                os.pwrite(fd, page, (i % 64) * 4096)
                t0 = time.perf_counter()
                fsync(fd)
                ts.append(time.perf_counter() - t0)
            ts.sort()
            out[name] = med(ts) * 1e6
            out[name.replace("_us", "_p90_us")] = ts[int(len(ts) * 0.9)] * 1e6
    finally:
        os.close(fd)
        ws.drop(path)
    out.update(record_sync_bench(ws, samples))
    # Do syncs of different files overlap? Partitions rely on it (section d).
    for nt in (1, 4, 8):
        out[f"fdatasync_per_s_{nt}t"] = parallel_fdatasync(ws, nt, max(20, samples // 4))
    return out


def record_sync_bench(ws: Workspace, samples: int) -> dict[str, float]:
    """Median fdatasync of one journal-sized (150-byte) record written after
    the last, in a file that grows with each (an append) and in one that
    holds zeros there already (what dedupstore/journal.py keeps ahead of its
    records): the append's fdatasync also commits the new size and blocks.
    Also, per record, the bytes the device wrote (its /sys/dev/block counter,
    other processes' writes included) and the bytes getrusage's ru_oublock
    counted (pages as they are dirtied: a whole large folio on newer kernels)."""
    path = ws.fresh("recsync")
    rec = os.urandom(150)
    out: dict[str, float] = {}
    device = block_device_stat(Path(path))
    try:
        for name, zeros in (("append", 0), ("zeroed", 1 << 20)):
            fd = os.open(os.path.join(path, name), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                if zeros:
                    os.pwrite(fd, bytes(zeros), 0)
                os.fsync(fd)
                n = min(samples, zeros // len(rec)) if zeros else samples
                ts = []
                dev0 = sectors_written(device)
                ob0 = resource.getrusage(resource.RUSAGE_SELF).ru_oublock
                for i in range(n):
                    os.pwrite(fd, rec, i * len(rec))
                    t0 = time.perf_counter()
                    os.fdatasync(fd)
                    ts.append(time.perf_counter() - t0)
                ob1 = resource.getrusage(resource.RUSAGE_SELF).ru_oublock
                dev1 = sectors_written(device)
            finally:
                os.close(fd)
            ts.sort()
            out[f"{name}_fdatasync_us"] = med(ts) * 1e6
            out[f"{name}_oublock_bytes"] = (ob1 - ob0) * 512 / n
            out[f"{name}_device_bytes"] = (dev1 - dev0) * 512 / n if dev0 is not None and dev1 is not None else 0.0
    finally:
        ws.drop(path)
    return out


def parallel_fdatasync(ws: Workspace, n_threads: int, per_thread: int) -> float:
    """Aggregate 4 KiB rewrite+fdatasync per second, each thread on its own file."""
    path = ws.fresh(f"pfsync{n_threads}")
    page = os.urandom(4096)
    fds = []
    try:
        for i in range(n_threads):
            fd = os.open(os.path.join(path, f"f{i}"), os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            os.pwrite(fd, page * 16, 0)
            os.fsync(fd)

        def body(fd: int) -> None:
            for i in range(per_thread):
                os.pwrite(fd, page, (i % 16) * 4096)
                os.fdatasync(fd)

        threads = [threading.Thread(target=body, args=(fd,)) for fd in fds]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return n_threads * per_thread / (time.perf_counter() - t0)
    finally:
        for fd in fds:
            os.close(fd)
        ws.drop(path)


def filesystem_of(path: str) -> str:
    path = os.path.realpath(path)
    best = ("", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                    best = (mnt, fstype, dev)
    except OSError:
        pass
    return f"{best[1]} on {best[2]} (mounted at {best[0] or '?'})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def pressure() -> dict[str, float]:
    """Linux PSI 'some avg10' for cpu and io: share of the last 10 s in which
    some task waited (other work on a shared machine shows up here)."""
    out = {}
    for what in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{what}") as f:
                first = f.readline().split()
            out[what] = float(dict(x.split("=") for x in first[1:])["avg10"])
        except (OSError, ValueError, KeyError):
            pass
    return out


def wait_quiet(limit_s: float, cpu_max: float = 10.0, io_max: float = 5.0) -> float:
    """Wait (at most limit_s) until PSI shows the machine quiet; returns seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        p = pressure()
        if p.get("cpu", 0.0) < cpu_max and p.get("io", 0.0) < io_max:
            break
        time.sleep(2.0)
    return time.monotonic() - t0


def installed_fingerprint() -> str:
    """Short hash of the imported package's files: the tree may change between runs."""
    import hashlib

    h = hashlib.sha256()
    root = os.path.dirname(dedupstore.__file__)
    newest = 0.0
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".so", ".pyx")):
                fn = os.path.join(dirpath, name)
                with open(fn, "rb") as f:
                    h.update(name.encode() + f.read())
                newest = max(newest, os.path.getmtime(fn))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(newest))
    return f"{h.hexdigest()[:12]} (newest file {stamp} UTC)"


def machine(ws: Workspace, args: argparse.Namespace, samples: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "py_lmdb": lmdb.__version__,
        "lmdb": ".".join(map(str, lmdb.version())),
        "dedupstore": getattr(dedupstore, "__version__", "?"),
        "dedupstore_path": os.path.dirname(dedupstore.__file__),
        "dir": os.path.realpath(args.dir),
        "filesystem": filesystem_of(args.dir),
        "installed": installed_fingerprint(),
        "loadavg_start": os.getloadavg(),
        "pressure_start": pressure(),
    }
    info.update(fsync_bench(ws, samples))
    return info


# ---------------------------------------------------------- (a)/(b) single
#
# The machine may be shared and its disk latency drifts, so the sides of a
# comparison run interleaved, one operation (or batch) each in turn, against
# stores and environments that all start empty in the same repetition: every
# side sees the same disk weather and the same tree sizes.


class RawSide:
    """Plain py-lmdb: the key and value alone."""

    def __init__(self, ws: Workspace, durability: str, value: bytes) -> None:
        self.ws = ws
        self.path = ws.fresh(f"raw-{durability}")
        self.env = open_raw(self.path, durability, max_dbs=0)
        self.value = value

    def one(self, k: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(k, self.value, overwrite=False)

    def many(self, keys: list[bytes]) -> None:
        with self.env.begin(write=True) as txn:
            put = txn.put
            value = self.value
            for k in keys:
                put(k, value, overwrite=False)

    def check(self, n: int) -> None:
        with self.env.begin() as txn:
            got = txn.stat()["entries"]
        if got != n:
            raise SystemExit(f"bench_core: raw side holds {got} entries, expected {n}")

    def close(self) -> None:
        self.env.close()
        self.ws.drop(self.path)


class OursSide:
    def __init__(self, ws: Workspace, durability: str, partitions: int | None, age_s: float = 0.0) -> None:
        self.ws = ws
        self.store, self.path = open_store(ws, durability, partitions, age_s)
        self.claim = self.store.claim
        self.claim_many = self.store.claim_many
        self.before = verdicts(self.store)

    def one(self, k: bytes) -> None:
        self.claim(NS, k)

    def many(self, keys: list[bytes]) -> None:
        self.claim_many(NS, keys)

    def check(self, n: int) -> None:
        got = delta(verdicts(self.store), self.before)
        if got != {"NEW": n}:
            raise SystemExit(f"bench_core: expected {n} NEW verdicts, got {got}")

    def close(self) -> None:
        self.store.close()
        self.ws.drop(self.path)


def interleaved(sides: dict[str, Any], work: list[Any], warm: int, method: str) -> dict[str, tuple[float, float]]:
    """Run work[i] on every side in turn (rotating who goes first); returns
    side -> (wall seconds, CPU seconds) summed over the timed items."""
    names = list(sides)
    wall = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    fns = {n: getattr(sides[n], method) for n in names}
    perf, ptime = time.perf_counter, time.process_time
    gc.collect()
    for i, item in enumerate(work):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            fn = fns[name]
            c0 = ptime()
            t0 = perf()
            fn(item[name])
            t1 = perf()
            c1 = ptime()
            if i >= warm:
                wall[name] += t1 - t0
                cpu[name] += c1 - c0
    return {n: (wall[n], cpu[n]) for n in names}


def bench_single(
    ws: Workspace, rng: random.Random, p: dict[str, int], durability: str, value: bytes, partitions: int | None
) -> dict[str, Any]:
    names = ["ours", "raw"]
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    n_ops = p["single"]
    for _ in range(p["reps"]):
        sides: dict[str, Any] = {}
        try:
            sides["ours"] = OursSide(ws, durability, partitions)
            sides["raw"] = RawSide(ws, durability, value)
            total = p["warmup"] + n_ops
            keys = {n: make_keys(rng, total) for n in names}
            work = [{n: keys[n][i] for n in names} for i in range(total)]
            got = interleaved(sides, work, p["warmup"], "one")
            for n in names:
                sides[n].check(total)
                runs[n].append((got[n][0] / n_ops * 1e6, got[n][1] / n_ops * 1e6))
        finally:
            for side in sides.values():
                side.close()
    out: dict[str, Any] = {"durability": durability, "ops_per_rep": n_ops, "reps": p["reps"]}
    for who, rs in runs.items():
        walls = [r[0] for r in rs]
        out[who] = {
            "us_per_op": med(walls),
            "min_max": spread(walls),
            "cpu_us_per_op": med([r[1] for r in rs]),
            "all": walls,
        }
    out["ratio"] = out["ours"]["us_per_op"] / out["raw"]["us_per_op"]
    # per-rep ratios (each rep's sides ran side by side): a noise-robust second view
    out["ratio_per_rep"] = [a / b for a, b in zip(out["ours"]["all"], out["raw"]["all"], strict=True)]
    return out


# --------------------------------------------------------------- (c) batch


def many_runs(
    rng: random.Random, reps: int, size: int, nb: int, sides_of: dict[str, Callable[[], Any]]
) -> dict[str, dict[str, Any]]:
    """``claim_many`` of ``size``-key batches on every side, interleaved: per
    rep, fresh sides (each opened by its ``sides_of`` entry), one untimed warm-up batch (it also starts dedupstore's
    commit thread pool) and ``nb`` timed ones. Returns per-side figures."""
    warm = 1
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(reps):
        sides: dict[str, Any] = {}
        try:
            for name, open_side in sides_of.items():
                sides[name] = open_side()
            keys = {n: make_keys(rng, (warm + nb) * size) for n in sides}
            work = [{n: keys[n][i * size : (i + 1) * size] for n in sides} for i in range(warm + nb)]
            got = interleaved(sides, work, warm, "many")
            for n in sides:
                sides[n].check((warm + nb) * size)
                runs.setdefault(n, []).append((got[n][0] / (nb * size) * 1e6, got[n][1] / (nb * size) * 1e6))
        finally:
            for side in sides.values():
                side.close()
    out: dict[str, dict[str, Any]] = {}
    for who, rs in runs.items():
        walls = [r[0] for r in rs]
        us = med(walls)
        out[who] = {
            "us_per_key": us,
            "keys_per_s": 1e6 / us,
            "min_max": spread(walls),
            "cpu_us_per_key": med([r[1] for r in rs]),
            "all": walls,
        }
    return out


def bench_batch(ws: Workspace, rng: random.Random, p: dict[str, int], durability: str, value: bytes) -> dict[str, Any]:
    dp = f"ours-p{DEFAULT_PARTITIONS}"
    size, nb = p["batch"], p["batches"]
    out: dict[str, Any] = {"durability": durability, "batch": size, "batches_per_rep": nb, "reps": p["reps"]}
    out.update(
        many_runs(
            rng, p["reps"], size, nb,
            {
                dp: lambda: OursSide(ws, durability, None),
                "ours-p1": lambda: OursSide(ws, durability, 1),
                "raw": lambda: RawSide(ws, durability, value),
            },
        )
    )
    raw = out["raw"]["keys_per_s"]
    out["ratio"] = out[dp]["keys_per_s"] / raw
    out["ratio_p1"] = out["ours-p1"]["keys_per_s"] / raw
    out["ratio_per_rep"] = [b / a for a, b in zip(out[dp]["all"], out["raw"]["all"], strict=True)]
    return out


# -------------------------------------------------------- (f) aged namespace


def bench_aged(ws: Workspace, rng: random.Random, p: dict[str, int], value: bytes) -> dict[str, Any]:
    """claim_many (flush) on a namespace created now vs one horizon (12h) old.

    Not one of the targets: it shows whether the cost of a NEW key moves with
    the number of live generations (the fresh stores of (a)-(e) have one).
    The live filter answers for every generation past the newest one that
    holds records, so here neither side reads any."""
    dp = f"ours-p{DEFAULT_PARTITIONS}"
    names = [f"{dp}-age0", f"{dp}-age12h"]
    size, nb = p["batch"], max(2, p["batches"] // 2)
    out: dict[str, Any] = {
        "durability": "flush",
        "batch": size,
        "batches_per_rep": nb,
        "reps": p["reps"],
        "horizon_s": HORIZON_S,
    }
    out.update(
        many_runs(
            rng, p["reps"], size, nb,
            {
                names[0]: lambda: OursSide(ws, "flush", None),
                names[1]: lambda: OursSide(ws, "flush", None, age_s=HORIZON_S),
                "raw": lambda: RawSide(ws, "flush", value),
            },
        )
    )
    out["ratio_age0"] = out[names[0]]["keys_per_s"] / out["raw"]["keys_per_s"]
    out["ratio_age12h"] = out[names[1]]["keys_per_s"] / out["raw"]["keys_per_s"]
    return out


# ------------------------------------------------------------- (d) threads


def threads_ours(
    ws: Workspace, rng: random.Random, n_threads: int, per_thread: int, partitions: int | None, warmup: int
) -> dict[str, float]:
    store, path = open_store(ws, "sync", partitions)
    try:
        for k in make_keys(rng, warmup):
            store.claim(NS, k)
        work = [make_keys(rng, per_thread) for _ in range(n_threads)]
        before = verdicts(store)
        commits0 = sum(p["commits"] for p in store.stats()["partition_stats"])
        syncs0 = store.stats()["journal_syncs"]
        busy0 = store.stats()["journal_sync_seconds"]
        claim = store.claim
        use0 = resource.getrusage(resource.RUSAGE_SELF)
        wall, cpu = run_threads(work, lambda k: claim(NS, k))
        use1 = resource.getrusage(resource.RUSAGE_SELF)
        n = n_threads * per_thread
        got = delta(verdicts(store), before)
        if got != {"NEW": n}:
            raise SystemExit(f"bench_core: expected {n} NEW verdicts, got {got}")
        commits = sum(p["commits"] for p in store.stats()["partition_stats"]) - commits0
        syncs = store.stats()["journal_syncs"] - syncs0
        busy = store.stats()["journal_sync_seconds"] - busy0
        return {
            "claims_per_s": n / wall, "cpu_share": cpu / wall, "claims_per_commit": n / max(commits, 1),
            "claims_per_sync": n / max(syncs, 1), "sync_busy": busy / wall, "sync_us": busy / max(syncs, 1) * 1e6,
            # The process's CPU per claim, and of it the kernel's (fdatasync,
            # and the futex calls of threads waking one another).
            "cpu_us_per_claim": cpu / n * 1e6, "kernel_us_per_claim": (use1.ru_stime - use0.ru_stime) / n * 1e6,
        }
    finally:
        store.close()
        ws.drop(path)


def threads_raw(ws: Workspace, rng: random.Random, n_threads: int, per_thread: int, value: bytes) -> dict[str, float]:
    path = ws.fresh("rawthreads-sync")
    env = open_raw(path, "sync")
    try:
        work = [make_keys(rng, per_thread) for _ in range(n_threads)]

        def one(k: bytes) -> None:
            with env.begin(write=True) as txn:
                txn.put(k, value, overwrite=False)

        wall, cpu = run_threads(work, one)
        n = n_threads * per_thread
        return {
            "claims_per_s": n / wall, "cpu_share": cpu / wall, "claims_per_commit": 1.0, "claims_per_sync": 1.0,
            "sync_busy": float("nan"), "sync_us": float("nan"), "cpu_us_per_claim": float("nan"),
            "kernel_us_per_claim": float("nan"),
        }
    finally:
        env.close()
        ws.drop(path)


def bench_threads(ws: Workspace, rng: random.Random, p: dict[str, int], value: bytes) -> dict[str, Any]:
    variants = ["ours-1t", "ours-8t", "ours-8t-p1", "raw-1t", "raw-8t"]
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for rep in range(p["reps"]):
        for who in variants[::-1] if rep % 2 else variants:
            if who == "ours-1t":
                runs[who].append(threads_ours(ws, rng, 1, p["t1"], None, p["warmup"]))
            elif who == "ours-8t":
                runs[who].append(threads_ours(ws, rng, 8, p["t8"], None, p["warmup"]))
            elif who == "ours-8t-p1":
                runs[who].append(threads_ours(ws, rng, 8, p["t8"], 1, p["warmup"]))
            elif who == "raw-1t":
                runs[who].append(threads_raw(ws, rng, 1, p["raw_t8"] * 4, value))
            else:
                runs[who].append(threads_raw(ws, rng, 8, p["raw_t8"], value))
    out: dict[str, Any] = {
        "durability": "sync",
        "reps": p["reps"],
        "claims_1t": p["t1"],
        "claims_per_thread_8t": p["t8"],
        "raw_claims_per_thread_8t": p["raw_t8"],
    }
    for who, rs in runs.items():
        rates = [r["claims_per_s"] for r in rs]
        out[who] = {
            "claims_per_s": med(rates),
            "min_max": spread(rates),
            "cpu_share": med([r["cpu_share"] for r in rs]),
            "claims_per_commit": med([r["claims_per_commit"] for r in rs]),
            "claims_per_sync": med([r["claims_per_sync"] for r in rs]),
            "sync_busy": med([r["sync_busy"] for r in rs]),
            "sync_us": med([r["sync_us"] for r in rs]),
            "cpu_us_per_claim": med([r["cpu_us_per_claim"] for r in rs]),
            "kernel_us_per_claim": med([r["kernel_us_per_claim"] for r in rs]),
            "all": rates,
        }
    out["ratio_8t_1t"] = out["ours-8t"]["claims_per_s"] / out["ours-1t"]["claims_per_s"]
    out["ratio_vs_raw_8t"] = out["ours-8t"]["claims_per_s"] / out["raw-8t"]["claims_per_s"]
    return out


# ---------------------------------------------------------- (e) duplicates


def bench_duplicates(ws: Workspace, rng: random.Random, p: dict[str, int], value: bytes) -> dict[str, Any]:
    keys = make_keys(rng, p["dup_keys"])
    store, spath = open_store(ws, "sync", None)
    rpath = ws.fresh("rawdup-sync")
    env = open_raw(rpath, "sync")
    try:
        # Setup (untimed): every key claimed and completed, so a repeat is a DUPLICATE.
        res = store.claim_many(NS, keys)
        for k, r in zip(keys, res, strict=True):
            assert r.token is not None
            store.complete(NS, k, r.token, b"ok")
        with env.begin(write=True) as txn:
            for k in keys:
                txn.put(k, value, overwrite=False)
        ours: list[tuple[float, float]] = []
        raw: list[tuple[float, float]] = []
        claim = store.claim
        for rep in range(p["dup_passes"]):
            order = keys[:]
            rng.shuffle(order)
            for who in ("raw", "ours") if rep % 2 else ("ours", "raw"):
                if who == "ours":
                    before = verdicts(store)
                    with Timer() as t:
                        for k in order:
                            claim(NS, k)
                    got = delta(verdicts(store), before)
                    if got != {"DUPLICATE": len(order)}:
                        raise SystemExit(f"bench_core: expected {len(order)} DUPLICATE verdicts, got {got}")
                    ours.append((t.wall / len(order) * 1e6, t.cpu / len(order) * 1e6))
                else:
                    begin = env.begin
                    with Timer() as t:
                        for k in order:
                            with begin() as txn:
                                if txn.get(k) is None:
                                    raise SystemExit("bench_core: raw duplicate lookup missed")
                    raw.append((t.wall / len(order) * 1e6, t.cpu / len(order) * 1e6))
        # what the caller of a DUPLICATE does next: read the outcome
        r = claim(NS, keys[0])
        with Timer() as t:
            for k in keys:
                r = claim(NS, k)
                if r.status is not Status.DUPLICATE or r.outcome != b"ok":
                    raise SystemExit("bench_core: duplicate claim did not return the recorded outcome")
        with_outcome = t.wall / len(keys) * 1e6
    finally:
        store.close()
        env.close()
        ws.drop(spath)
        ws.drop(rpath)
    out: dict[str, Any] = {"keys": len(keys), "passes": p["dup_passes"]}
    for who, rs in (("ours", ours), ("raw", raw)):
        walls = [x[0] for x in rs]
        out[who] = {
            "us_per_op": med(walls),
            "min_max": spread(walls),
            "cpu_us_per_op": med([x[1] for x in rs]),
            "all": walls,
        }
    out["ours_with_outcome_us"] = with_outcome
    out["ratio"] = out["ours"]["us_per_op"] / out["raw"]["us_per_op"]
    return out


# ------------------------------------------------------------------ report


def verdict(section: str, value: float) -> str:
    _, op, target = TARGETS[section]
    ok = value <= target if op == "<=" else value >= target
    return "PASS" if ok else "MISS"


def fmt_psi(p: dict[str, float], what: str) -> str:
    return f"{p[what]:.1f}%" if what in p else "?"


def report(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "bench_core: dedupstore claims vs raw py-lmdb",
        f"command : {res['command']}",
        f"machine : nproc={m['nproc']} ({m['cpu_model']}), kernel {m['kernel']}, Python {m['python']}, "
        f"py-lmdb {m['py_lmdb']} (LMDB {m['lmdb']}), dedupstore {m['dedupstore']}",
        f"disk    : {m['dir']} on {m['filesystem']}; 4 KiB rewrite+fsync {m['fsync_us']:.0f} us "
        f"(p90 {m['fsync_p90_us']:.0f}), +fdatasync {m['fdatasync_us']:.0f} us (p90 {m['fdatasync_p90_us']:.0f})",
        f"records : 150-byte record+fdatasync, appended {m['append_fdatasync_us']:.0f} us, "
        f"written over zeros {m['zeroed_fdatasync_us']:.0f} us; per record the device wrote "
        f"{m['append_device_bytes']:,.0f} / {m['zeroed_device_bytes']:,.0f} B, ru_oublock counted "
        f"{m['append_oublock_bytes']:,.0f} / {m['zeroed_oublock_bytes']:,.0f} B",
        f"parallel: 4 KiB rewrite+fdatasync per second, one file per thread: "
        f"1 thread {m['fdatasync_per_s_1t']:,.0f}/s, 4 threads {m['fdatasync_per_s_4t']:,.0f}/s, "
        f"8 threads {m['fdatasync_per_s_8t']:,.0f}/s",
        f"load    : loadavg {m['loadavg_start'][0]:.2f} -> {res['loadavg_end'][0]:.2f}, "
        f"PSI some avg10 cpu {fmt_psi(m['pressure_start'], 'cpu')} -> {fmt_psi(res['pressure_end'], 'cpu')}, "
        f"io {fmt_psi(m['pressure_start'], 'io')} -> {fmt_psi(res['pressure_end'], 'io')} (start -> end; "
        f"other work on the machine skews figures)",
        f"package : {m['dedupstore_path']} {m['installed']}",
        f"shapes  : {KEY_BYTES}-byte random keys, raw value {res['value_bytes']} bytes (= our NEW record), "
        f"intent=None; medians over {res['profile']['reps']} reps, each in a fresh directory",
        "",
    ]
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(name: str, ours: str, raw: str, ratio: str = "", target: str = "", status: str = "") -> None:
        rows.append((name, ours, raw, ratio, target, status))

    def us(x: float) -> str:
        return f"{x:,.1f} us"

    for sec, key in (("a", "single_sync"), ("b", "single_flush")):
        r = res.get(key)
        if not r:
            continue
        t = TARGETS[sec]
        row(
            f"({sec}) claim, new key, {r['durability']}",
            us(r["ours"]["us_per_op"]),
            us(r["raw"]["us_per_op"]),
            f"{r['ratio']:.2f}",
            f"{t[1]} {t[2]}",
            verdict(sec, r["ratio"]),
        )
        row("      cpu per op (all threads)", us(r["ours"]["cpu_us_per_op"]), us(r["raw"]["cpu_us_per_op"]))
        row(
            "      min..max over reps",
            "{:,.0f}..{:,.0f}".format(*r["ours"]["min_max"]),
            "{:,.0f}..{:,.0f}".format(*r["raw"]["min_max"]),
        )
        row("      ratio per rep (sides interleaved)", " ".join(f"{x:.2f}" for x in r["ratio_per_rep"]), "")
    for mode in ("sync", "flush"):
        r = res.get(f"batch_{mode}")
        if not r:
            continue
        t = TARGETS["c"]
        dp = f"ours-p{DEFAULT_PARTITIONS}"

        def kps(v: dict[str, Any]) -> str:
            return f"{v['keys_per_s']:,.0f}/s ({v['us_per_key']:.2f} us/key)"

        row(
            f"(c) claim_many({r['batch']}), {mode}, p={DEFAULT_PARTITIONS}",
            kps(r[dp]),
            kps(r["raw"]),
            f"{r['ratio']:.2f}",
            f"{t[1]} {t[2]}",
            verdict("c", r["ratio"]),
        )
        row(
            f"    claim_many({r['batch']}), {mode}, p=1",
            kps(r["ours-p1"]),
            kps(r["raw"]),
            f"{r['ratio_p1']:.2f}",
            f"{t[1]} {t[2]}",
            verdict("c", r["ratio_p1"]),
        )
        row(
            "      cpu per key",
            us(r[dp]["cpu_us_per_key"]) + f" (p1 {r['ours-p1']['cpu_us_per_key']:.2f})",
            us(r["raw"]["cpu_us_per_key"]),
        )
        row(f"      ratio per rep, p={DEFAULT_PARTITIONS}", " ".join(f"{x:.2f}" for x in r["ratio_per_rep"]), "")
    r = res.get("threads")
    if r:
        t = TARGETS["d"]

        def cps(v: dict[str, Any]) -> str:
            return f"{v['claims_per_s']:,.0f}/s"

        row(
            "(d) claim, sync, 8 threads",
            cps(r["ours-8t"]),
            cps(r["raw-8t"]),
            f"{r['ratio_vs_raw_8t']:.2f}",
            f">= {t[2]:,.0f}/s",
            verdict("d", r["ours-8t"]["claims_per_s"]),
        )
        row("    claim, sync, 1 thread", cps(r["ours-1t"]), cps(r["raw-1t"]))
        row(
            "    8 threads / 1 thread",
            f"{r['ratio_8t_1t']:.2f}x",
            f"{r['raw-8t']['claims_per_s'] / r['raw-1t']['claims_per_s']:.2f}x",
        )
        row("    8 threads, partitions=1", cps(r["ours-8t-p1"]), "")
        row(
            "      claims per commit (8t / 8t p1)",
            f"{r['ours-8t']['claims_per_commit']:.2f} / {r['ours-8t-p1']['claims_per_commit']:.2f}",
            "1",
        )
        row(
            "      claims per journal fdatasync (8t / 8t p1)",
            f"{r['ours-8t']['claims_per_sync']:.2f} / {r['ours-8t-p1']['claims_per_sync']:.2f}",
            "1",
        )
        row(
            "      journal fdatasync: time busy, each (8t)",
            f"{r['ours-8t']['sync_busy']:.0%}, {r['ours-8t']['sync_us']:.0f} us",
            "",
        )
        row(
            "      CPU share, 8t (1.0 = one core)",
            f"{r['ours-8t']['cpu_share']:.2f}",
            f"{r['raw-8t']['cpu_share']:.2f}",
        )
        if "cpu_us_per_claim" in r["ours-8t"]:  # not in reports saved before it was measured
            row(
                "      CPU per claim, of it kernel (8t / 1t)",
                f"{r['ours-8t']['cpu_us_per_claim']:.0f}, {r['ours-8t']['kernel_us_per_claim']:.0f} / "
                f"{r['ours-1t']['cpu_us_per_claim']:.0f}, {r['ours-1t']['kernel_us_per_claim']:.0f} us",
                "",
            )
        row(
            "      min..max over reps (8t)",
            "{:,.0f}..{:,.0f}".format(*r["ours-8t"]["min_max"]),
            "{:,.0f}..{:,.0f}".format(*r["raw-8t"]["min_max"]),
        )
    r = res.get("duplicates")
    if r:
        row(
            "(e) claim, duplicate (completed key)",
            us(r["ours"]["us_per_op"]),
            us(r["raw"]["us_per_op"]),
            f"{r['ratio']:.2f}",
            "(none)",
            "",
        )
        row("      + reading result.outcome", us(r["ours_with_outcome_us"]), "")
    r = res.get("aged")
    if r:
        dp = f"ours-p{DEFAULT_PARTITIONS}"

        def kps2(v: dict[str, Any]) -> str:
            return f"{v['keys_per_s']:,.0f}/s ({v['us_per_key']:.2f} us/key)"

        row(
            "(f) claim_many(1000), flush, fresh ns",
            kps2(r[f"{dp}-age0"]),
            kps2(r["raw"]),
            f"{r['ratio_age0']:.2f}",
            "(info)",
            "",
        )
        row(
            "    same, namespace 12h old (13 gens)",
            kps2(r[f"{dp}-age12h"]),
            kps2(r["raw"]),
            f"{r['ratio_age12h']:.2f}",
            "(info)",
            "",
        )
        row(
            "      cpu per key (fresh / 12h old)",
            f"{r[f'{dp}-age0']['cpu_us_per_key']:.2f} / {r[f'{dp}-age12h']['cpu_us_per_key']:.2f} us",
            us(r["raw"]["cpu_us_per_key"]),
        )
    head = ("measurement", "ours", "raw py-lmdb", "ratio", "target", "")
    widths = [max(len(x[i]) for x in rows + [head]) for i in range(6)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines.append(fmt.format(*head))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(fmt.format(*x) for x in rows)
    lines += [
        "",
        "ratios: (a),(b),(e) ours/raw per-op time (lower is better); (c) ours/raw throughput (higher is better);",
        "        (d) target is absolute: durable claims per second with 8 threads in sync mode.",
        f"elapsed : {res['elapsed_s']:.1f} s",
    ]
    return "\n".join(lines)


# -------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run (tiny sizes, 2 reps)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object (no table)")
    ap.add_argument(
        "--dir", default=tempfile.gettempdir(), help="parent of the fresh temporary directories (default: %(default)s)"
    )
    ap.add_argument(
        "--only",
        default="abcdef",
        help="sections to run, letters from 'abcdef' (default: all); the machine figures always run",
    )
    ap.add_argument("--reps", type=int, help="repetitions per measurement (default: 5, --quick: 2)")
    ap.add_argument("--single-ops", type=int, help="claims per repetition in (a)/(b)")
    ap.add_argument("--seed", type=int, default=None, help="seed for the random keys (default: random)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on a shared machine: first wait up to SECONDS for Linux PSI (cpu and io 'some avg10') "
        "to drop below 10%% and 5%%",
    )
    ap.add_argument("--report", metavar="FILE", help="print the table for a saved --json result, then exit")
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            print(report(json.load(f)))
        return 0

    p = dict(PROFILES["quick" if args.quick else "full"])
    if args.reps:
        p["reps"] = args.reps
    if args.single_ops:
        p["single"] = args.single_ops
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    only = set(args.only.lower())
    if not only <= set("abcdef"):
        ap.error("--only takes letters from 'abcdef'")

    waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
    t0 = time.perf_counter()
    ws = Workspace(args.dir, args.keep)
    res: dict[str, Any] = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "profile": {"name": "quick" if args.quick else "full", **p},
        "seed": seed,
        "waited_for_quiet_s": waited,
        "key_bytes": KEY_BYTES,
        "partitions_default": DEFAULT_PARTITIONS,
        "targets": {k: {"metric": v[0], "op": v[1], "value": v[2]} for k, v in TARGETS.items()},
    }
    try:
        res["machine"] = machine(ws, args, p["fsyncs"])
        res["value_bytes"] = record_size(ws)
        value = rng.randbytes(res["value_bytes"])

        def log(msg: str) -> None:
            if not args.json:
                print(f"  ... {msg}", file=sys.stderr, flush=True)

        if "a" in only:
            log("(a) single claim, sync")
            res["single_sync"] = bench_single(ws, rng, p, "sync", value, None)
        if "b" in only:
            log("(b) single claim, flush")
            res["single_flush"] = bench_single(ws, rng, p, "flush", value, None)
        if "c" in only:
            for mode in ("sync", "flush"):
                log(f"(c) claim_many, {mode}")
                res[f"batch_{mode}"] = bench_batch(ws, rng, p, mode, value)
        if "d" in only:
            log("(d) threads, sync")
            res["threads"] = bench_threads(ws, rng, p, value)
        if "e" in only:
            log("(e) duplicates")
            res["duplicates"] = bench_duplicates(ws, rng, p, value)
        if "f" in only:
            log("(f) aged namespace")
            res["aged"] = bench_aged(ws, rng, p, value)
    finally:
        ws.close()
    res["elapsed_s"] = time.perf_counter() - t0
    res["loadavg_end"] = os.getloadavg()
    res["pressure_end"] = pressure()

    res["results"] = summary = {}
    for sec, key in (("a", "single_sync"), ("b", "single_flush")):
        if key in res:
            v = res[key]["ratio"]
            summary[f"{sec}_{key}_ratio"] = {"value": v, "status": verdict(sec, v)}
    for mode in ("sync", "flush"):
        if f"batch_{mode}" in res:
            v = res[f"batch_{mode}"]["ratio"]
            summary[f"c_batch_{mode}_ratio"] = {"value": v, "status": verdict("c", v)}
    if "threads" in res:
        v = res["threads"]["ours-8t"]["claims_per_s"]
        summary["d_threads8_claims_per_s"] = {"value": v, "status": verdict("d", v)}
    if "aged" in res:
        summary["f_aged_batch_ratio"] = {"value": res["aged"]["ratio_age12h"], "status": "INFO"}
    if "duplicates" in res:
        summary["e_duplicate_ratio"] = {"value": res["duplicates"]["ratio"], "status": "INFO"}

    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
