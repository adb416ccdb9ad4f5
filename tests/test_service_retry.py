"""The service's own ambiguity: a claim commits and its reply is lost. The client retries
with the same request id, and the retry gets the claim's own lease back (NEW, the same
token, one attempt on the record), never a second NEW. One test per way to lose a reply:
the deadline passes, the connection is reset, the server is killed and restarted."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _proxy import ResettingProxy
from _service import make_store_dir, serve_process, served, stop_process

from dedupstore import ClaimResult, DedupStore, LeaseLostError, Status
from dedupstore.client import DedupClient

NS = "orders"


def _only_one_claim_happened(store: DedupStore, key: str, res: ClaimResult) -> None:
    rec = store.lookup(NS, key)
    assert rec is not None
    assert res.status is Status.NEW and res.token == rec.token
    assert rec.attempts == 1  # the retry did not claim again
    assert store.claim(NS, key).status is Status.IN_PROGRESS  # and the lease is held


class _LoseFirstReply:
    """An after-commit hook: the first call of ``method`` runs ``lose`` after its commit."""

    def __init__(self, method: str, lose: Any) -> None:
        self.method = method
        self.lose = lose
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, method: str) -> None:
        if method != self.method:
            return
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.lose()


def test_retry_after_deadline_exceeded_is_not_a_second_new(store: DedupStore) -> None:
    retried = threading.Event()

    def hold_reply() -> None:
        # Reply only once the client, past its deadline, has sent the retry.
        retried.wait(30)

    hook = _LoseFirstReply("Claim", hold_reply)

    def hook_and_release(method: str) -> None:
        if method == "Claim" and hook.calls >= 1:
            retried.set()
        hook(method)

    with served(store, after_commit=hook_and_release) as server, DedupClient(
        server.target, timeout=0.5, retries=3
    ) as client:
        res = client.claim(NS, "k")
    assert hook.calls == 2
    _only_one_claim_happened(store, "k", res)


@contextmanager
def _through_resetting_proxy(store: DedupStore, method: str) -> Iterator[tuple[DedupClient, _LoseFirstReply]]:
    """A client whose connection to the server is reset right after the first ``method`` commits."""
    proxies: list[ResettingProxy] = []
    hook = _LoseFirstReply(method, lambda: proxies[0].reset_all())
    with served(store, after_commit=hook) as server:
        proxies.append(ResettingProxy((server.host, server.port)))
        try:
            with DedupClient(proxies[0].target, retries=3) as client:
                yield client, hook
        finally:
            proxies[0].close()


def test_retry_after_connection_reset_is_not_a_second_new(store: DedupStore) -> None:
    with _through_resetting_proxy(store, "Claim") as (client, hook):
        res = client.claim(NS, "k")
    assert hook.calls == 2
    _only_one_claim_happened(store, "k", res)


def test_retried_claim_batch_after_connection_reset_is_not_a_second_new(store: DedupStore) -> None:
    with _through_resetting_proxy(store, "ClaimBatch") as (client, hook):
        batch = client.claim_many(NS, ["b1", "b2", "b1"])
    assert hook.calls == 2
    # The repeated key still sees the first one's lease, as in the embedded store.
    assert batch.statuses == [Status.NEW, Status.NEW, Status.IN_PROGRESS]
    _only_one_claim_happened(store, "b1", batch[0])
    _only_one_claim_happened(store, "b2", batch[1])


def test_a_retried_release_that_had_applied_says_so(store: DedupStore) -> None:
    res = store.claim(NS, "k")
    assert res.token is not None
    with _through_resetting_proxy(store, "Release") as (client, hook), pytest.raises(
        LeaseLostError, match="may have released"
    ):
        client.release(NS, "k", res.token)
    assert hook.calls == 1  # the retry met the store's LeaseLostError, so it committed nothing
    assert store.lookup(NS, "k") is None


def test_retried_batches_after_connection_reset(store: DedupStore) -> None:
    batch = store.claim_many(NS, ["c1", "c2", "r1"])
    c1, c2, r1 = (r.token for r in batch)
    assert c1 is not None and c2 is not None and r1 is not None
    # A completion is idempotent: the retry of an applied CompleteBatch succeeds.
    with _through_resetting_proxy(store, "CompleteBatch") as (client, hook):
        assert client.complete_many(NS, [("c1", c1, b"one"), ("c2", c2, b"two")]) == [None, None]
    assert hook.calls == 2
    assert store.claim(NS, "c2").outcome == b"two"
    # A release is not: the retry's per-item answer says the first attempt may have applied.
    with _through_resetting_proxy(store, "ReleaseBatch") as (client, hook):
        (lost,) = client.release_many(NS, [("r1", r1)])
    assert isinstance(lost, LeaseLostError) and "may have released" in str(lost)
    assert store.lookup(NS, "r1") is None


# ------------------------------------------------------ killed and restarted


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return make_store_dir(tmp_path, NS)


def test_retry_after_the_server_was_killed_between_commit_and_reply(store_dir: Path) -> None:
    proc, target = serve_process(store_dir, "127.0.0.1:0", DEDUPSTORE_TEST_HOOK="kill-after-commit")
    restarted: subprocess.Popen[str] | None = None
    try:
        with DedupClient(target, timeout=5, retries=20) as client, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.claim, NS, "k")
            assert proc.wait(60) == -signal.SIGKILL  # killed itself after committing the claim
            # Same port, so the client's retries find it (the store is the same directory).
            restarted, again = serve_process(store_dir, target)
            assert again == target
            res = pending.result(timeout=120)
    finally:
        if restarted is not None:
            code, out, _ = stop_process(restarted)
            assert code == 0 and "stopped on SIGTERM" in out
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)  # reap it and close its pipes
    with DedupStore.open(store_dir) as store:
        _only_one_claim_happened(store, "k", res)
