"""The gRPC server (``dedupstore serve``) from a Python client on loopback:
unary ``Claim`` calls and ``ClaimBatch`` of 100 keys, per durability mode.

The server is its own process, as in production (and as in
benches/bench_service.py, which also runs Redis beside it); the client is
``dedupstore.client.DedupClient`` in the benchmark's process, one call at a
time, so a figure is the round trip plus the store's work.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from dedupstore import DedupStore, Status
from dedupstore.client import DedupClient

from .common import HORIZON_S, NS, keys, serve_process, size, tracker

UNARY_CALLS = size(2000, 20)
BATCHES = size(200, 2)
BATCH = 100
ROUNDS = size(3, 1)


def measure_service(durability: str) -> dict[str, float]:
    workdir = tempfile.mkdtemp(prefix="dedupstore-asv-service-")
    path = os.path.join(workdir, "store")
    with DedupStore.open(path, durability=durability) as store:
        store.ensure_namespace(NS, horizon=HORIZON_S, lease="1d")
    try:
        with serve_process(path, durability) as target, DedupClient(target) as client:
            client.lookup(NS, "connect")  # the channel is up before anything is timed
            source = keys(f"svc-{durability}")
            unary, batch = [], []
            for _ in range(ROUNDS):
                ks = [next(source) for _ in range(UNARY_CALLS)]
                t = time.perf_counter()
                for k in ks:
                    if client.claim(NS, k).status is not Status.NEW:
                        raise RuntimeError("a claim of a new key was not NEW")
                unary.append(UNARY_CALLS / (time.perf_counter() - t))
                groups = [[next(source) for _ in range(BATCH)] for _ in range(BATCHES)]
                t = time.perf_counter()
                for g in groups:
                    if client.claim_many(NS, g).counts()[Status.NEW] != BATCH:
                        raise RuntimeError("a batch of new keys was not all NEW")
                batch.append(BATCHES * BATCH / (time.perf_counter() - t))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "claim_calls_per_s": round(statistics.median(unary), 1),
        "batch_keys_per_s": round(statistics.median(batch), 1),
    }


class Service:
    params = (["sync", "flush"],)
    param_names = ["durability"]
    timeout = 600

    def setup_cache(self) -> dict[str, dict[str, Any]]:
        return {d: measure_service(d) for d in self.params[0]}

    track_claim_calls_per_s = tracker("calls/s", "claim_calls_per_s")
    track_claim_batch_100_keys_per_s = tracker("keys/s", "batch_keys_per_s")
