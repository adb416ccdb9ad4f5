#!/usr/bin/env python3
"""Service benchmark: the gRPC server's Claim and ClaimBatch against Redis SET NX from Python.

In one run, on one machine, each side a separate server process on loopback:

    floor        an empty call: grpc.health.v1 Health/Check vs redis-py PING, the
                 transports' own cost and so the most the unary ratio can be
    unary        dedupstore Claim (DedupClient, one call at a time) vs redis-py
                 SET key 1 NX (one round trip each, one connection)
    unary x C    the same with C calls in flight (AsyncDedupClient / C redis-py
                 threads), where the server's group commit can share fsyncs
    batch        dedupstore ClaimBatch of 1,000 keys (DedupClient.claim_many) vs
                 redis-py pipeline of 1,000 SET NX (transaction=False)

Targets (issue #6): unary >= 0.5x redis-py round trips; ClaimBatch(1000) >= 2x
pipelined redis-py. Every key is new (55 random bytes, as in bench_core.py); the
bench checks each verdict (NEW, and SET NX returning True) so a fast wrong answer
cannot pass. Redis runs as Debian's redis-server with persistence off (its
default is a periodic snapshot): it acknowledges from memory, while dedupstore
in durability "sync" fsyncs before replying, so the run is repeated with
durability "flush" (no fsync per commit; survives a killed process) for the
like-for-like figure. If redis-server is not installed the peer is skipped.

This is a benchmark, not a test: it never asserts timings. Run it from outside
the source tree so the installed package is imported:

    cd /tmp && /work/main/.venv/bin/python /work/main/benches/bench_service.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

# benches/ is this script's directory, so the asv suite's helpers import as a package.
from asv_suite.common import serve_process

import dedupstore
from dedupstore import DedupStore, Status
from dedupstore.client import AsyncDedupClient, DedupClient

NS = "bench.service"
KEY_BYTES = 55
BATCH = 1000
PROFILES = {
    "quick": {"seconds": 1.0, "concurrency": 16},
    "full": {"seconds": 5.0, "concurrency": 32},
}


class Keys:
    """Fresh random keys of KEY_BYTES (3-byte prefix, 52 hex digits), never repeated in practice."""

    def __init__(self, prefix: str) -> None:
        assert len(prefix) == 3
        self._prefix = prefix.encode()

    def take(self, n: int) -> list[bytes]:
        blob = os.urandom(n * 26).hex().encode()
        p = self._prefix
        return [p + blob[i : i + 52] for i in range(0, n * 52, 52)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ------------------------------------------------------------------ the servers


@contextmanager
def dedup_server(durability: str, workdir: str) -> Iterator[str]:
    path = os.path.join(workdir, f"store-{durability}")
    with DedupStore.open(path, durability=durability) as store:
        store.ensure_namespace(NS, horizon="12h", lease="5m")
    with serve_process(path, durability) as target:
        yield target


@contextmanager
def redis_server(workdir: str) -> Iterator[Any]:
    exe = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        redis = None
    if exe is None or redis is None:
        print("bench_service: redis-server or redis-py not installed (apt-get install redis-server; "
              "pip install redis): skipping the Redis peer", file=sys.stderr)
        yield None
        return
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir,
         "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield client
        client.close()
    finally:
        proc.terminate()
        proc.wait(30)


# --------------------------------------------------------------- measurements
# Each side runs a row for a short slice at a time, alternating with the other
# sides, so a machine whose load changes during the run affects every side alike.


def run_for(seconds: float, step: Callable[[], int]) -> tuple[int, float]:
    ops = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        ops += step()
    return ops, time.perf_counter() - start


class DedupSide:
    def __init__(self, target: str, concurrency: int) -> None:
        self.target = target
        self.concurrency = concurrency
        self.client = DedupClient(target)
        self.keys = Keys("ds-")
        self.client.lookup(NS, b"connect")
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        self._health_channel = grpc.insecure_channel(target)
        self._health = health_pb2_grpc.HealthStub(self._health_channel)
        self._health_request = health_pb2.HealthCheckRequest()

    def floor(self, seconds: float) -> tuple[int, float]:
        """The transport's own cost: an empty unary call (grpc.health.v1 Check)."""
        def step() -> int:
            self._health.Check(self._health_request)
            return 1

        return run_for(seconds, step)

    def unary(self, seconds: float) -> tuple[int, float]:
        def step() -> int:
            (key,) = self.keys.take(1)
            if self.client.claim(NS, key).status is not Status.NEW:
                raise SystemExit("bench_service: a claim of a new key was not NEW")
            return 1

        return run_for(seconds, step)

    def batch(self, seconds: float) -> tuple[int, float]:
        def step() -> int:
            if self.client.claim_many(NS, self.keys.take(BATCH)).counts()[Status.NEW] != BATCH:
                raise SystemExit("bench_service: a batch of new keys was not all NEW")
            return BATCH

        return run_for(seconds, step)

    def unary_concurrent(self, seconds: float) -> tuple[int, float]:
        async def go() -> tuple[int, float]:
            async with AsyncDedupClient(self.target) as aclient:
                await aclient.lookup(NS, b"connect")
                done = 0
                start = time.perf_counter()
                stop = start + seconds

                async def worker() -> None:
                    nonlocal done
                    while time.perf_counter() < stop:
                        (key,) = self.keys.take(1)
                        if (await aclient.claim(NS, key)).status is not Status.NEW:
                            raise SystemExit("bench_service: a claim of a new key was not NEW")
                        done += 1

                await asyncio.gather(*(worker() for _ in range(self.concurrency)))
                return done, time.perf_counter() - start

        return asyncio.run(go())

    def close(self) -> None:
        self.client.close()
        self._health_channel.close()


class RedisSide:
    def __init__(self, client: Any, concurrency: int) -> None:
        import redis

        self.client = client
        self.concurrency = concurrency
        self.keys = Keys("rd-")
        kwargs = client.connection_pool.connection_kwargs
        self.pool = redis.ConnectionPool(host=kwargs["host"], port=kwargs["port"], max_connections=concurrency)
        self.threaded = [redis.Redis(connection_pool=self.pool) for _ in range(concurrency)]

    def floor(self, seconds: float) -> tuple[int, float]:
        """The transport's own cost: an empty round trip (PING)."""
        def step() -> int:
            self.client.ping()
            return 1

        return run_for(seconds, step)

    def unary(self, seconds: float) -> tuple[int, float]:
        def step() -> int:
            (key,) = self.keys.take(1)
            if self.client.set(key, b"1", nx=True) is not True:
                raise SystemExit("bench_service: SET NX of a new key did not succeed")
            return 1

        return run_for(seconds, step)

    def batch(self, seconds: float) -> tuple[int, float]:
        def step() -> int:
            pipe = self.client.pipeline(transaction=False)
            for key in self.keys.take(BATCH):
                pipe.set(key, b"1", nx=True)
            if not all(r is True for r in pipe.execute()):
                raise SystemExit("bench_service: a pipelined SET NX of a new key did not succeed")
            return BATCH

        return run_for(seconds, step)

    def unary_concurrent(self, seconds: float) -> tuple[int, float]:
        counts = [0] * self.concurrency
        start = time.perf_counter()
        stop = start + seconds

        def worker(i: int) -> None:
            c = self.threaded[i]
            while time.perf_counter() < stop:
                (key,) = self.keys.take(1)
                if c.set(key, b"1", nx=True) is not True:
                    raise SystemExit("bench_service: SET NX of a new key did not succeed")
                counts[i] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts), time.perf_counter() - start

    def close(self) -> None:
        self.pool.disconnect()


ROWS = ("floor", "unary", "unary_concurrent", "batch")


def measure(sides: dict[str, Any], seconds: float, slice_s: float) -> dict[str, dict[str, dict[str, float]]]:
    """row -> side -> {ops, seconds, rate}, the sides alternating slice by slice."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    names = list(sides)
    for row in ROWS:
        totals = {name: [0, 0.0] for name in names}
        slices = max(1, round(seconds / slice_s))
        for i in range(slices):
            for name in names[i % len(names):] + names[: i % len(names)]:  # rotate who goes first
                ops, wall = getattr(sides[name], row)(seconds / slices)
                totals[name][0] += ops
                totals[name][1] += wall
        out[row] = {name: {"ops": ops, "seconds": wall, "rate": ops / wall} for name, (ops, wall) in totals.items()}
    return out


def machine_load() -> dict[str, Any]:
    load: dict[str, Any] = {"loadavg": os.getloadavg()}
    for what in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{what}") as f:
                load[f"psi_{what}_some_avg10"] = float(f.readline().split()[1].split("=")[1])
        except (OSError, IndexError, ValueError):
            pass
    return load


def report(doc: dict[str, Any]) -> None:
    print(f"# bench_service  {doc['machine']}")
    print(f"# dedupstore {doc['package']}  {doc['profile']} profile, {doc['seconds']} s per row and side "
          f"(in {doc['slice']} s slices, sides alternating), concurrency {doc['concurrency']}, batch {BATCH}")
    print(f"# load at start {doc['load_start']}")
    print(f"# load at end   {doc['load_end']}")
    names = {"floor": "empty call (Health.Check vs PING)",
             "unary": "Claim, one at a time", "unary_concurrent": f"Claim, {doc['concurrency']} in flight",
             "batch": f"ClaimBatch({BATCH}) vs pipeline({BATCH})"}
    targets = {"unary": 0.5, "batch": 2.0}
    print(f"{'row':<44} {'dedupstore/s':>13} {'redis-py/s':>11} {'ratio':>6}  target")
    for row, sides in doc["rows"].items():
        peer = sides.get("redis", {}).get("rate")
        for side, fig in sides.items():
            if side == "redis":
                continue
            ratio = fig["rate"] / peer if peer else None
            want = targets.get(row)
            verdict = ""
            if want is not None and ratio is not None:
                verdict = f">= {want}x {'PASS' if ratio >= want else 'MISS'}"
            peer_text = "-" if peer is None else f"{peer:,.0f}"
            ratio_text = "-" if ratio is None else f"{ratio:.2f}"
            label = f"{names[row]} ({side})"
            print(f"{label:<44} {fig['rate']:>13,.0f} {peer_text:>11} {ratio_text:>6}  {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, help="seconds per row and side (default: 5, quick: 1)")
    parser.add_argument("--concurrency", type=int, help="calls in flight for the concurrent row")
    parser.add_argument("--durability", action="append", choices=("sync", "flush"),
                        help="server durability (repeatable; default: both)")
    parser.add_argument("--dir", default=None, help="parent directory of the stores (default: /tmp)")
    args = parser.parse_args()
    profile = PROFILES["quick" if args.quick else "full"]
    seconds = args.seconds or float(profile["seconds"])
    concurrency = args.concurrency or int(profile["concurrency"])
    modes = args.durability or ["sync", "flush"]
    slice_s = 0.5
    doc: dict[str, Any] = {
        "machine": f"nproc {os.cpu_count()}, {platform.platform()}, Python {platform.python_version()}",
        "package": dedupstore.__version__,
        "profile": "quick" if args.quick else "full",
        "seconds": seconds,
        "slice": slice_s,
        "concurrency": concurrency,
        "load_start": machine_load(),
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as work, ExitStack() as stack:
        sides: dict[str, Any] = {}
        rclient = stack.enter_context(redis_server(work))
        if rclient is not None:
            sides["redis"] = RedisSide(rclient, concurrency)
            stack.callback(sides["redis"].close)
        for durability in modes:
            target = stack.enter_context(dedup_server(durability, work))
            sides[durability] = DedupSide(target, concurrency)
            stack.callback(sides[durability].close)
        doc["rows"] = measure(sides, seconds, slice_s)
    doc["load_end"] = machine_load()
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
