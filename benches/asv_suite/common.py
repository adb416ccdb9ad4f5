"""What the asv benchmarks share: sizes, temporary stores and a steppable clock."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dedupstore import DedupStore

SMOKE = os.environ.get("DEDUPSTORE_ASV_SMOKE", "") not in ("", "0")
NS = "asv.orders"
HORIZON_S = 12 * 3600.0
GENERATION_S = 3600.0  # what a 12h horizon gets (dedupstore.namespace.generation_length)
INTENT = {"amount": 4200, "currency": "EUR"}


def size(full: int, smoke: int) -> int:
    return smoke if SMOKE else full


class StepClock:
    """Store clock: wall time plus a settable offset, optionally accelerated
    (``scale`` store seconds per wall second) from :meth:`accelerate` on."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.scale = 1.0
        self.t0 = time.perf_counter()

    def accelerate(self, scale: float) -> None:
        self.offset += (time.perf_counter() - self.t0) * (self.scale - 1.0)
        self.t0 = time.perf_counter()
        self.scale = scale

    def __call__(self) -> float:
        return time.time() + self.offset + (time.perf_counter() - self.t0) * (self.scale - 1.0)


def keys(prefix: str) -> Iterator[str]:
    """Endless distinct keys shaped like the reference stream's, not time-ordered."""
    n = 0
    while True:
        n += 1
        yield f"order-{prefix}-{(n * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFF:012x}:v1"


def fill(store: DedupStore, source: Iterator[str], count: int, batch: int = 1000) -> list[str]:
    """Claim and complete ``count`` new keys; returns them."""
    done: list[str] = []
    while len(done) < count:
        ks = [next(source) for _ in range(min(batch, count - len(done)))]
        res = store.claim_many(NS, ks, [INTENT] * len(ks))
        store.complete_many(NS, [(r.key, r.token, b"ok") for r in res if r.token is not None])
        done.extend(ks)
    return done


class TempStore:
    """A store in a fresh temporary directory, closed and removed by :meth:`close`."""

    def __init__(self, **kwargs: object) -> None:
        self.dir = tempfile.mkdtemp(prefix="dedupstore-asv-")
        self.store = DedupStore.open(os.path.join(self.dir, "store"), **kwargs)  # type: ignore[arg-type]
        self.store.ensure_namespace(NS, horizon=HORIZON_S, lease="1d")

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def tracker(unit: str, *path: str) -> Callable[..., float]:
    """A ``track_`` method reporting ``runs[params][path...]``, where ``runs`` is
    what the class's ``setup_cache`` returned, keyed by the parameter value (one
    parameter) or the tuple of values (several). asv names it after the attribute."""

    def track(self: object, runs: Mapping[Any, Any], *params: Any) -> float:
        value = runs[params[0] if len(params) == 1 else params]
        for step in path:
            value = value[step]
        return float(value)

    track.unit = unit  # type: ignore[attr-defined]
    return track


def run_threads(work: Sequence[Sequence[Any]], fn: Callable[[Any], Any]) -> tuple[float, float]:
    """One thread per list of ``work``, each calling ``fn`` on every item,
    all let go at once: (wall seconds, process CPU seconds) until the last
    is done. The first error of any thread is raised after the run. (Also
    used by benches/bench_core.py, section d.)"""
    barrier = threading.Barrier(len(work) + 1)
    errors: list[BaseException] = []

    def body(items: Sequence[Any]) -> None:
        try:
            barrier.wait()
            for item in items:
                fn(item)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(w,)) for w in work]
    for th in threads:
        th.start()
    gc.collect()
    c0 = time.process_time()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if errors:
        raise errors[0]
    return wall, cpu


@contextmanager
def serve_process(path: str, durability: str) -> Iterator[str]:
    """``dedupstore serve`` on the store at ``path``, in a process of its
    own on a free loopback port, until the block ends: yields its address.
    (Also used by benches/bench_service.py.)"""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dedupstore", "serve", "--path", path, "--listen", "127.0.0.1:0",
         "--durability", durability, "--json"],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        raise RuntimeError("dedupstore serve did not start")
    try:
        yield json.loads(line)["listen"]
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
