#!/usr/bin/env python3
"""Peers, side by side in one run: the reference claim stream through dedupstore
and through the stores people reach for instead.

Every side gets the same events in the same order: the keys and intents of
``dedupstore.loadgen.make_stream`` (new ``(order_id, version)`` keys, 6%
redeliveries, 1% conflicting intents, 1% late replays of old keys). A "claim"
on each side is the least that side must do to give the same answer: insert
the key with its intent if absent; if present, read the stored intent to tell
a duplicate from a conflict.

    dedupstore   ``claim(ns, key, intent)``; batches: ``claim_many``
    raw py-lmdb  ``put(key, intent, overwrite=False)`` (+ ``get`` when present),
                 one write txn per claim or per batch, the store's flags
    sqlite3      WAL, ``INSERT OR IGNORE`` (+ ``SELECT`` when present), one
                 transaction per claim or per batch
    Redis        ``SET key intent NX GET EX 43200`` (one round trip: sets when
                 absent, else returns what is stored) through redis-py to a
                 ``redis-server`` (>= 7.0) this script starts on a free
                 loopback port and stops; batches: one pipeline round trip
    diskcache    ``Cache.add(key, intent, expire=43200)`` (+ ``get``);
                 batches: inside ``cache.transact()``

Durability is matched as closely as each allows, for ``--durability flush``
(the default here): dedupstore flush commits without an fsync and
checkpoints once a second (an OS crash loses at most that second); raw
py-lmdb ``sync=False`` never fsyncs (and is not crash-safe); sqlite3
``synchronous=FULL`` fsyncs the WAL at each commit; Redis appends every write
to its AOF before replying and fsyncs it once a second (``appendfsync
everysec``), the nearest promise to ours; diskcache keeps its defaults (WAL,
``synchronous=NORMAL``: no fsync per commit).

Three shapes: ``single`` (the first ``--single-events`` events, one claim per
call, each its own commit or round trip), ``repeat`` (the same events again:
every key is stored, so every claim is a redelivery, the read path) and
``batch`` (all ``--events`` in claims of ``--batch`` per call, transaction or
pipeline).

The sides run interleaved: each round, every side takes the next chunk of the
stream in turn (the starting side rotating), so all see the same disk weather.
A peer that is not installed is skipped with a line saying so. This is a
benchmark, not a test: it never asserts timings; it does check that every
side answered "first time" for exactly the same events.

    cd /tmp && /path/to/.venv/bin/python /path/to/benches/bench_peers.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import lmdb

from dedupstore import DedupStore, Status
from dedupstore.layout import DEFAULT_MAP_SIZE, DURABILITY
from dedupstore.loadgen import LoadConfig, machine, make_stream

#: Raw LMDB per mode, as in bench_core.py: flush is LMDB without any fsync per
#: commit (and without dedupstore's checkpoints: not crash-safe).
RAW_DURABILITY = {"sync": {"sync": True, "metasync": True}, "flush": {"sync": False, "metasync": False}}

NS = "bench.peers"
EXPIRE_S = 43_200  # the reference 12 h horizon, for the peers that expire keys
TARGETS = {"redis": 40.0, "diskcache": 20.0}

class Side:
    name = "?"
    note = ""

    def one(self, key: str, intent: bytes) -> bool:
        raise NotImplementedError

    def many(self, keys: Sequence[str], intents: Sequence[bytes]) -> list[bool]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Ours(Side):
    name = "dedupstore"

    def __init__(self, root: str, durability: str) -> None:
        self.store = DedupStore.open(os.path.join(root, "dedupstore"), durability=durability)
        self.store.ensure_namespace(NS, horizon="12h", lease="1d")
        self.note = f"durability {durability}, {self.store.partitions} partitions"

    def one(self, key: str, intent: bytes) -> bool:
        return self.store.claim(NS, key, intent).status is Status.NEW

    def many(self, keys: Sequence[str], intents: Sequence[bytes]) -> list[bool]:
        return [r.status is Status.NEW for r in self.store.claim_many(NS, keys, intents)]

    def close(self) -> None:
        self.store.close()


class RawLmdb(Side):
    name = "py-lmdb"

    def __init__(self, root: str, durability: str) -> None:
        self.env = lmdb.open(
            os.path.join(root, "lmdb"), map_size=DEFAULT_MAP_SIZE, readahead=False, writemap=False,
            map_async=False, **RAW_DURABILITY[durability],
        )
        self.note = "put(overwrite=False), {}".format(
            ", ".join(f"{k}={v}" for k, v in RAW_DURABILITY[durability].items())
        )

    @staticmethod
    def _claim(txn: Any, key: str, intent: bytes) -> bool:
        k = key.encode()
        if txn.put(k, intent, overwrite=False):
            return True
        txn.get(k)  # duplicate or conflict: read what is stored
        return False

    def one(self, key: str, intent: bytes) -> bool:
        with self.env.begin(write=True) as txn:
            return self._claim(txn, key, intent)

    def many(self, keys: Sequence[str], intents: Sequence[bytes]) -> list[bool]:
        with self.env.begin(write=True) as txn:
            return [self._claim(txn, k, i) for k, i in zip(keys, intents, strict=True)]

    def close(self) -> None:
        self.env.close()


class Sqlite(Side):
    name = "sqlite3"

    def __init__(self, root: str, durability: str) -> None:
        self.db = sqlite3.connect(os.path.join(root, "claims.sqlite"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        sync = "FULL" if durability in ("sync", "flush") else "NORMAL"
        self.db.execute(f"PRAGMA synchronous={sync}")
        self.db.execute("CREATE TABLE claims (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self.note = f"WAL, synchronous={sync}, INSERT OR IGNORE, sqlite {sqlite3.sqlite_version}"

    def _claim(self, key: str, intent: bytes) -> bool:
        if self.db.execute("INSERT OR IGNORE INTO claims VALUES (?, ?)", (key, intent)).rowcount:
            return True
        self.db.execute("SELECT v FROM claims WHERE k = ?", (key,)).fetchone()
        return False

    def one(self, key: str, intent: bytes) -> bool:
        self.db.execute("BEGIN")
        first = self._claim(key, intent)
        self.db.execute("COMMIT")
        return first

    def many(self, keys: Sequence[str], intents: Sequence[bytes]) -> list[bool]:
        self.db.execute("BEGIN")
        out = [self._claim(k, i) for k, i in zip(keys, intents, strict=True)]
        self.db.execute("COMMIT")
        return out

    def close(self) -> None:
        self.db.close()


class RedisServer:
    """A throwaway redis-server on a free loopback port, stopped by :meth:`stop`."""

    def __init__(self, root: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        data = os.path.join(root, "redis")
        os.makedirs(data)
        self.proc = subprocess.Popen(
            [
                "redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", data,
                "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no",
                "--protected-mode", "yes", "--loglevel", "warning",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Redis(Side):
    name = "redis"

    def __init__(self, root: str, durability: str) -> None:
        import redis  # optional: skipped by the caller when missing

        self.server = RedisServer(root)
        try:
            self.r = redis.Redis(host="127.0.0.1", port=self.server.port)
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.r.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline or self.server.proc.poll() is not None:
                        raise
                    time.sleep(0.05)
            version = self.r.info("server")["redis_version"]
        except BaseException:
            self.server.stop()
            raise
        self.note = (f"SET NX GET EX {EXPIRE_S}, redis-server {version} on 127.0.0.1:{self.server.port} "
                     f"(AOF, appendfsync everysec), redis-py {redis.__version__}")

    # SET ... NX GET (Redis >= 7.0) sets when absent and returns what was
    # stored: a claim is exactly one round trip, first time or repeat.
    def one(self, key: str, intent: bytes) -> bool:
        return self.r.set(key, intent, nx=True, ex=EXPIRE_S, get=True) is None

    def many(self, keys: Sequence[str], intents: Sequence[bytes]) -> list[bool]:
        pipe = self.r.pipeline(transaction=False)
        for k, i in zip(keys, intents, strict=True):
            pipe.set(k, i, nx=True, ex=EXPIRE_S, get=True)
        return [x is None for x in pipe.execute()]

    def close(self) -> None:
        self.r.close()
        self.server.stop()


class DiskCache(Side):
    name = "diskcache"

    def __init__(self, root: str, durability: str) -> None:
        import diskcache  # optional: skipped by the caller when missing

        self.cache = diskcache.Cache(os.path.join(root, "diskcache"))
        self.note = (f"Cache.add(expire={EXPIRE_S}), defaults (WAL, synchronous=NORMAL), "
                     f"diskcache {diskcache.__version__}")

    def one(self, key: str, intent: bytes) -> bool:
        if self.cache.add(key, intent, expire=EXPIRE_S):
            return True
        self.cache.get(key)
        return False

    def many(self, keys: Sequence[str], intents: Sequence[bytes]) -> list[bool]:
        with self.cache.transact():
            return [self.one(k, i) for k, i in zip(keys, intents, strict=True)]

    def close(self) -> None:
        self.cache.close()


SIDES: list[type[Side]] = [Ours, RawLmdb, Sqlite, Redis, DiskCache]


def open_sides(root: str, durability: str, only: set[str] | None, say: Callable[[str], None]) -> list[Side]:
    sides: list[Side] = []
    for cls in SIDES:
        if only is not None and cls.name not in only and cls is not Ours:
            continue
        if cls is Redis and shutil.which("redis-server") is None:
            say("redis: skipped: redis-server is not installed (Debian: apt-get install redis-server)")
            continue
        try:
            sides.append(cls(root, durability))
        except ImportError as exc:
            say(f"{cls.name}: skipped: {exc.name} is not installed (pip install {exc.name}, or the bench extra)")
    return sides


def run(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    stream = make_stream(LoadConfig(rate=float(args.events), duration=1.0, time_scale=1.0, seed=args.seed))
    keys = stream.keys
    intents = [json.dumps(i, sort_keys=True, separators=(",", ":")).encode() for i in stream.intents]
    n = len(keys)
    root = tempfile.mkdtemp(prefix="bench_peers-", dir=args.dir)
    results: dict[str, Any] = {}
    try:
        for shape in ("single", "batch"):
            sub = os.path.join(root, shape)
            os.makedirs(sub)
            sides = open_sides(sub, args.durability, args.only, say if shape == "single" else lambda _: None)
            try:
                m = n if shape == "batch" else min(n, args.single_events)
                results[shape] = measure(sides, keys, intents, shape, args, m)
                if shape == "single":
                    # The same stream again: every key is now stored, so each
                    # claim is a redelivery, the read path on every side.
                    results["repeat"] = measure(sides, keys, intents, "repeat", args, m)
            finally:
                for side in sides:
                    side.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def measure(
    sides: list[Side], keys: list[str], intents: list[bytes], shape: str, args: argparse.Namespace, n: int
) -> dict[str, Any]:
    chunk = max(args.chunk // args.batch, 1) * args.batch if shape == "batch" else args.chunk
    seconds = dict.fromkeys((s.name for s in sides), 0.0)
    firsts: dict[str, list[bool]] = {s.name: [] for s in sides}
    for rnd, start in enumerate(range(0, n, chunk)):
        ks, its = keys[start:start + chunk], intents[start:start + chunk]
        order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
        for side in order:
            t = time.perf_counter()
            if shape != "batch":
                got = [side.one(k, i) for k, i in zip(ks, its, strict=True)]
            else:
                got = []
                for b in range(0, len(ks), args.batch):
                    got += side.many(ks[b:b + args.batch], its[b:b + args.batch])
            seconds[side.name] += time.perf_counter() - t
            firsts[side.name] += got
    reference = firsts[sides[0].name]
    out: dict[str, Any] = {"events": n, "batch": args.batch if shape == "batch" else 1, "sides": {}}
    for side in sides:
        agree = firsts[side.name] == reference
        out["sides"][side.name] = {
            "note": side.note,
            "claims_per_s": n / seconds[side.name],
            "us_per_claim": seconds[side.name] / n * 1e6,
            "first_seen": sum(firsts[side.name]),
            "agrees": agree,
        }
    ours = out["sides"]["dedupstore"]["claims_per_s"]
    for v in out["sides"].values():
        v["ours_over_this"] = ours / v["claims_per_s"]
    return out


def report(res: dict[str, Any], header: dict[str, Any]) -> str:
    lines = [
        f"peers   : the reference claim stream, the first {header['single_events']:,} events one claim at a time "
        f"(then again: repeat), all {header['events']:,} in batches; sides interleaved in chunks",
        f"machine : nproc {header['nproc']}, Python {header['python']} ({header['python_executable']}), "
        f"native core {header['native_build']}, durability {header['durability']}, dir {header['dir']}",
        "",
        f"{'side':<11} {'single claims/s':>16} {'us/claim':>9} {'ours/this':>10}   "
        f"{'batch claims/s':>15} {'us/claim':>9} {'ours/this':>10}   "
        f"{'repeat claims/s':>16} {'us/claim':>9} {'ours/this':>10}   agrees",
    ]
    names = list(res["single"]["sides"])
    for name in names:
        s, b, r = (res[shape]["sides"][name] for shape in ("single", "batch", "repeat"))
        row = (f"{name:<11} {s['claims_per_s']:>16,.0f} {s['us_per_claim']:>9.1f} {s['ours_over_this']:>9.2f}x"
               f"   {b['claims_per_s']:>15,.0f} {b['us_per_claim']:>9.1f} {b['ours_over_this']:>9.2f}x"
               f"   {r['claims_per_s']:>16,.0f} {r['us_per_claim']:>9.1f} {r['ours_over_this']:>9.2f}x")
        row += "   " + ("yes" if s["agrees"] and b["agrees"] and r["agrees"] else "NO")
        lines.append(row)
    lines.append(f"single: one claim per call, each its own commit or round trip; batch: {res['batch']['batch']} "
                 f"claims per call / transaction / pipeline; repeat: the single stream again (every key stored)")
    lines.append("")
    for name, side in res["single"]["sides"].items():
        lines.append(f"  {name}: {side['note']}")
    lines.append("")
    ours = res["single"]["sides"]["dedupstore"]
    ours_b = res["batch"]["sides"]["dedupstore"]
    ours_r = res["repeat"]["sides"]["dedupstore"]
    for peer, target in TARGETS.items():
        if peer not in res["single"]["sides"]:
            lines.append(f"target vs {peer} (>= {target:g}x): not measured ({peer} skipped)")
            continue
        p1 = res["single"]["sides"][peer]["claims_per_s"]
        pb = res["batch"]["sides"][peer]["claims_per_s"]
        pr = res["repeat"]["sides"][peer]["claims_per_s"]
        ratios = {
            "single/single": ours["claims_per_s"] / p1,
            "batch/batch": ours_b["claims_per_s"] / pb,
            f"our batch/{peer} single": ours_b["claims_per_s"] / p1,
            "repeat/repeat": ours_r["claims_per_s"] / pr,
        }
        lines.append(f"target vs {peer} (>= {target:g}x): " + ", ".join(
            f"{k} {v:.2f}x [{'met' if v >= target else 'MISSED'}]" for k, v in ratios.items()))
    lines.append(f"elapsed : {header['elapsed_s']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run (figures not meaningful)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    ap.add_argument("--events", type=int, default=None, help="events in batches (default 20,000; --quick 1,000)")
    ap.add_argument("--single-events", type=int, default=None,
                    help="of those, the first N one claim at a time and then repeated (default 3,000; --quick 500): "
                         "each single claim waits on its own fsync")
    ap.add_argument("--batch", type=int, default=100, help="claims per batch (default 100)")
    ap.add_argument("--chunk", type=int, default=200,
                    help="events per side per turn (default 200; batches: rounded to whole batches): small turns "
                         "let every side see the same disk weather")
    ap.add_argument("--durability", default="flush", choices=sorted(DURABILITY), help="dedupstore's mode (flush)")
    ap.add_argument("--only", default=None, help="comma-separated peers to run beside dedupstore")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temporary directories")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    args.events = args.events or (1_000 if args.quick else 20_000)
    args.single_events = args.single_events or (500 if args.quick else 3_000)
    args.only = None if args.only is None else set(args.only.split(","))

    def say(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    t0 = time.perf_counter()
    res = run(args, say)
    host = machine()
    header = {
        "events": args.events,
        "single_events": min(args.events, args.single_events),
        "nproc": host["cpus"],
        "python": platform.python_version(),
        "python_executable": host["python_executable"],
        "native_build": host["native_build"],
        "durability": args.durability,
        "dir": os.path.realpath(args.dir),
        "elapsed_s": time.perf_counter() - t0,
    }
    if args.json:
        print(json.dumps({"header": header, **res}, sort_keys=True))
    else:
        print(report(res, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
