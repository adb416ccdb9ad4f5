"""The service's Prometheus metrics (``dedupstore serve --metrics-listen``).

Counters and histograms are updated by the RPC handlers; the store's own
figures (eviction lag, unresolved records, records, bytes) are read from
``DedupStore.stats()`` when Prometheus scrapes, so they cost nothing between
scrapes. Each server has its own registry: two servers in one process (tests)
do not share or clash.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .errors import DedupError
from .store import DedupStore
from .verdicts import Status

log = logging.getLogger("dedupstore.server")

#: RPC latency buckets, seconds: from a duplicate answered from a snapshot
#: (tens of microseconds) to a batch waiting on a slow fsync.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


class _StoreCollector(Collector):
    """Gauges read from the store at scrape time."""

    def __init__(self, store: DedupStore) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            stats = self._store.stats()
        except DedupError:  # closed while shutting down: report nothing rather than fail the scrape
            return
        lag = GaugeMetricFamily(
            "dedupstore_eviction_lag_seconds",
            "How long the namespace's oldest generation has been wholly past its horizon and still present",
            labels=["namespace"],
        )
        unresolved = GaugeMetricFamily(
            "dedupstore_unresolved", "Records in PENDING or UNKNOWN state (need complete/release or reconciliation)",
            labels=["namespace"],
        )
        frontier = GaugeMetricFamily(
            "dedupstore_eviction_frontier_seconds", "The namespace's eviction frontier (Unix seconds)",
            labels=["namespace"],
        )
        for name, ns in stats["namespaces"].items():
            lag.add_metric([name], ns["eviction_lag_seconds"])
            unresolved.add_metric([name], ns["unresolved"])
            frontier.add_metric([name], ns["frontier"])
        records = GaugeMetricFamily("dedupstore_records", "Records stored, all namespaces", labels=["partition"])
        used = GaugeMetricFamily("dedupstore_bytes_used", "LMDB pages in use, bytes", labels=["partition"])
        for p in stats["partition_stats"]:
            records.add_metric([str(p["partition"])], p["records"])
            used.add_metric([str(p["partition"])], p["bytes_used"])
        yield from (lag, unresolved, frontier, records, used)


class ServiceMetrics:
    """Verdict counters, RPC latency histograms and error counters, plus the store's gauges."""

    def __init__(self, store: DedupStore) -> None:
        self.registry = CollectorRegistry()
        self._verdicts = Counter(
            "dedupstore_verdicts", "Verdicts returned, by RPC and status (ClaimBatch counts each key)",
            ["method", "status"], registry=self.registry,
        )
        self._latency = Histogram(
            "dedupstore_rpc_duration_seconds", "Time from a request's arrival in its handler to its reply",
            ["method"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._errors = Counter(
            "dedupstore_rpc_errors", "RPCs that ended with an error status, by RPC and gRPC code",
            ["method", "code"], registry=self.registry,
        )
        self.registry.register(_StoreCollector(store))
        # Children looked up once: labels() costs more than the increment itself.
        self._verdict_child: dict[tuple[str, Status], Any] = {}
        self._latency_child: dict[str, Any] = {}
        self._http: Any = None
        self._lock = threading.Lock()

    def verdict(self, method: str, status: Status, n: int = 1) -> None:
        child = self._verdict_child.get((method, status))
        if child is None:
            child = self._verdict_child[(method, status)] = self._verdicts.labels(method, status.name)
        child.inc(n)

    def latency(self, method: str, seconds: float) -> None:
        child = self._latency_child.get(method)
        if child is None:
            child = self._latency_child[method] = self._latency.labels(method)
        child.observe(seconds)

    def error(self, method: str, code: str) -> None:
        self._errors.labels(method, code).inc()

    def serve(self, host: str, port: int) -> int:
        """Start the HTTP endpoint (``/metrics``) on a daemon thread; returns the bound port."""
        with self._lock:
            self._http, _ = start_http_server(port, addr=host, registry=self.registry)
            bound: int = self._http.server_port
        log.info("dedupstore: metrics on http://%s:%d/metrics", host, bound)
        return bound

    def stop(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
                self._http = None
