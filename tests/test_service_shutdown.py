"""SIGTERM: health goes NOT_SERVING, in-flight calls finish, new calls are refused, the store closes cleanly."""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from _service import make_store_dir, serve_process, stop_process
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dedupstore import DedupStore, ServiceError, Status
from dedupstore.client import DedupClient

NS = "orders"


def test_sigterm_drains_in_flight_calls_and_closes_the_store(tmp_path: Path) -> None:
    path = make_store_dir(tmp_path, NS)
    # Each write's reply waits 2 s after its commit: long enough to signal mid-call.
    proc, target = serve_process(path, "127.0.0.1:0", "--grace", "30s", DEDUPSTORE_TEST_HOOK="delay-after-commit=2")
    signalled = False
    try:
        with grpc.insecure_channel(target) as channel, DedupClient(target, retries=0) as client, \
                ThreadPoolExecutor(1) as pool:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service="dedupstore.v1.DedupStore"), timeout=60
            )
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            in_flight = pool.submit(client.claim, NS, "slow")
            while client.lookup(NS, "slow") is None:  # committed: now waiting to reply
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            signalled = True  # once: a second SIGTERM is not part of this test
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()
            with pytest.raises(ServiceError) as refused:
                client.claim(NS, "late")
            # Refused either way: UNAVAILABLE once the listener is gone, CANCELLED
            # for a call the stopping server had just accepted (never run: see below).
            assert refused.value.code in ("UNAVAILABLE", "CANCELLED")
            assert in_flight.result(timeout=60).status is Status.NEW  # finished, reply delivered
    finally:
        code, out, err = stop_process(proc, signalled)
    assert code == 0, err
    assert "stopped on SIGTERM; store closed" in out
    with DedupStore.open(path) as store:
        assert store.lookup(NS, "slow") is not None
        assert store.lookup(NS, "late") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_serve_passes_the_store_thread_flags_to_the_store(tmp_path: Path) -> None:
    # --apply-interval 0 turns the served store's write-behind off (no
    # window in its stats) and --thread-nice sets how far below the main
    # thread its own threads run.
    path = make_store_dir(tmp_path, NS)
    proc, target = serve_process(path, "127.0.0.1:0", "--durability", "flush", "--apply-interval", "0",
                                 "--thread-nice", "3", "--flush-interval", "250ms")
    try:
        with DedupClient(target) as client:
            assert client.claim(NS, "k").status is Status.NEW
            stats = client.stats()
        assert [p["write_behind"] for p in stats["partition_stats"]] == [None] * stats["partitions"]
        tasks = Path(f"/proc/{proc.pid}/task")
        nice = {(t / "comm").read_text().strip(): os.getpriority(os.PRIO_PROCESS, int(t.name))
                for t in tasks.iterdir()}
        main = os.getpriority(os.PRIO_PROCESS, proc.pid)
        assert nice["ds-flush"] == nice["ds-maintain"] == min(main + 3, 19), nice
    finally:
        code, _, err = stop_process(proc)
    assert code == 0, err


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_serve_keeps_the_store_threads_on_thread_cpus(tmp_path: Path) -> None:
    # --thread-cpus pins the served store's flusher and maintenance thread;
    # the server's own threads keep every CPU the process may use.
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    path = make_store_dir(tmp_path, NS)
    proc, target = serve_process(path, "127.0.0.1:0", "--durability", "flush", "--thread-cpus", str(cpu))
    try:
        with DedupClient(target) as client:
            assert client.claim(NS, "k").status is Status.NEW
        tasks = Path(f"/proc/{proc.pid}/task")
        threads = {t.name: (t / "comm").read_text().strip() for t in tasks.iterdir()}
        by_name = {comm: int(tid) for tid, comm in threads.items()}
        assert {"ds-flush", "ds-maintain"} <= by_name.keys(), threads
        assert os.sched_getaffinity(by_name["ds-flush"]) == os.sched_getaffinity(by_name["ds-maintain"]) == {cpu}
        assert os.sched_getaffinity(proc.pid) == allowed  # the main thread: the process's own
    finally:
        code, _, err = stop_process(proc)
    assert code == 0, err
