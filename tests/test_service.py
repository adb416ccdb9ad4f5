"""The shared service beyond the verdicts (those are in test_claims.py): the token, TLS,
limits, bad requests, health, reflection, metrics, group commit and the command line."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from _cli import run
from _service import served
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dedupstore import (
    DedupStore,
    InvalidInputError,
    InvalidIntentError,
    ServiceError,
    Status,
    UnauthenticatedError,
)
from dedupstore.client import AsyncDedupClient, DedupClient
from dedupstore.server import Limits
from dedupstore.v1 import dedupstore_pb2 as pb
from dedupstore.v1 import dedupstore_pb2_grpc as pb_grpc

NS = "orders"
TOKEN = "s3cret-token-for-tests"
CERTS = Path(__file__).parent / "certs"


@pytest.fixture
def guarded(store: DedupStore) -> Iterator[str]:
    """A server with a token; yields its target."""
    with served(store, token=TOKEN.encode()) as server:
        yield server.target


# ------------------------------------------------------------------ the token


def test_a_call_with_the_token_works(guarded: str) -> None:
    with DedupClient(guarded, token=TOKEN) as client:
        assert client.claim(NS, "k").status is Status.NEW


@pytest.mark.parametrize("token", [None, "wrong-token", TOKEN + "x", TOKEN[:-1]])
def test_a_call_without_or_with_a_wrong_token_is_refused_and_changes_nothing(
    guarded: str, store: DedupStore, token: str | None
) -> None:
    with DedupClient(guarded, token=token, retries=0) as client:
        with pytest.raises(UnauthenticatedError) as info:
            client.claim(NS, "k")
        assert info.value.code == "UNAUTHENTICATED"
        with pytest.raises(UnauthenticatedError):
            client.claim_many(NS, ["a", "b"])
        with pytest.raises(UnauthenticatedError):
            client.lookup(NS, "k")
    assert store.lookup(NS, "k") is None and store.lookup(NS, "a") is None
    assert store.stats()["verdicts"]["NEW"] == 0


def _raw_claim(target: str, payload: bytes, metadata: Any) -> grpc.RpcError:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary("/dedupstore.v1.DedupStore/Claim")  # bytes in, bytes out
        with pytest.raises(grpc.RpcError) as info:
            call(payload, metadata=metadata, timeout=10)
    return info.value


def test_the_token_is_checked_before_the_request_is_parsed(guarded: str) -> None:
    garbage = b"\xff\xff\xff\xff not a protobuf message"
    refused = _raw_claim(guarded, garbage, (("authorization", "Bearer nope"),))
    assert refused.code() is grpc.StatusCode.UNAUTHENTICATED
    # The same bytes with the right token do get parsed, and fail there.
    parsed = _raw_claim(guarded, garbage, (("authorization", f"Bearer {TOKEN}"),))
    assert parsed.code() is not grpc.StatusCode.UNAUTHENTICATED


def test_health_is_open_and_reflection_needs_the_token(guarded: str) -> None:
    with grpc.insecure_channel(guarded) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "dedupstore.v1.DedupStore"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as info:
            list(refl.ServerReflectionInfo(iter([ask]), timeout=10))
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        replies = list(
            refl.ServerReflectionInfo(iter([ask]), timeout=10, metadata=(("authorization", f"Bearer {TOKEN}"),))
        )
    names = {s.name for s in replies[0].list_services_response.service}
    assert {"dedupstore.v1.DedupStore", "grpc.health.v1.Health"} <= names


def test_reflection_describes_the_service(store: DedupStore) -> None:
    with served(store) as server, grpc.insecure_channel(server.target) as channel:
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(file_containing_symbol="dedupstore.v1.DedupStore")
        (reply,) = list(refl.ServerReflectionInfo(iter([ask]), timeout=10))
    assert reply.file_descriptor_response.file_descriptor_proto  # the .proto, as a descriptor


# ------------------------------------------------------------------------ TLS


def test_tls(store: DedupStore) -> None:
    tls = ((CERTS / "localhost.crt").read_bytes(), (CERTS / "localhost.key").read_bytes())
    with served(store, tls=tls, token=TOKEN.encode()) as server:
        with DedupClient(server.target, token=TOKEN, tls=CERTS / "localhost.crt") as client:
            assert client.claim(NS, "k").status is Status.NEW
        with DedupClient(server.target, token=TOKEN, retries=0, timeout=5) as plain:
            with pytest.raises(ServiceError) as info:
                plain.claim(NS, "k2")
            assert info.value.code == "UNAVAILABLE"
    assert store.lookup(NS, "k2") is None


# -------------------------------------------------------- limits, bad requests


def test_batch_limit_is_exact_and_named(store: DedupStore) -> None:
    with served(store, limits=Limits(max_batch=50)) as server, DedupClient(server.target) as client:
        assert len(client.claim_many(NS, [f"k{i}" for i in range(50)])) == 50
        with pytest.raises(InvalidInputError, match=r"at most 50 keys .*--max-batch.*got 51"):
            client.claim_many(NS, [f"x{i}" for i in range(51)])
    assert store.lookup(NS, "x0") is None
    batch = store.claim_many(NS, [f"y{i}" for i in range(51)])
    items = [(r.key, r.token, b"done") for r in batch if r.token is not None]
    with served(store, limits=Limits(max_batch=50)) as server, DedupClient(server.target) as client:
        for call in (lambda: client.complete_many(NS, items), lambda: client.release_many(NS, [i[:2] for i in items])):
            with pytest.raises(InvalidInputError, match=r"at most 50 items .*--max-batch.*got 51"):
                call()
    # nothing was completed or released
    assert {f"y{i}".encode() for i in range(51)} <= {r.key for r in store.unresolved(NS)}


def test_unresolved_over_the_cap_is_refused_without_a_limit(
    store: DedupStore, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dedupstore import server as server_module

    monkeypatch.setattr(server_module, "MAX_UNRESOLVED_REPLY", 3)
    for i in range(5):
        store.claim(NS, f"u{i}")
        clock.advance(1)
    with served(store) as server, DedupClient(server.target) as client:
        assert [r.key for r in client.unresolved(NS, limit=3)] == [b"u0", b"u1", b"u2"]
        with pytest.raises(ServiceError, match=r"unresolved\('orders', limit=N\)") as info:
            client.unresolved(NS)
        assert info.value.code == "RESOURCE_EXHAUSTED"
        with pytest.raises(InvalidInputError, match="at most 3 records per call; got limit=4"):
            client.unresolved(NS, limit=4)
        with pytest.raises(InvalidInputError, match="limit must be a non-negative int"):
            client.unresolved(NS, limit=-1)


def test_message_size_limit(store: DedupStore) -> None:
    with served(store, limits=Limits(max_message_bytes=64 * 1024)) as server, DedupClient(server.target) as client:
        client.claim_many(NS, [f"{i:04d}".encode() * 75 for i in range(150)])  # ~45 KiB: accepted
        with pytest.raises(ServiceError) as info:
            client.claim_many(NS, [f"{i:04d}".encode() * 100 for i in range(200)])  # ~80 KiB
        assert info.value.code == "RESOURCE_EXHAUSTED"


def _bad(stub: Any, method: str, request: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        getattr(stub, method)(request, timeout=10)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    return info.value


def test_bad_requests_get_invalid_argument_with_the_reason(store: DedupStore) -> None:
    with served(store) as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.DedupStoreStub(channel)
        cases = [
            ("Claim", pb.ClaimRequest(namespace=NS, key=b""), r"key must be 1\.\.400 bytes"),
            ("Claim", pb.ClaimRequest(namespace="Bad NS", key=b"k"), r"namespace must match"),
            ("Claim", pb.ClaimRequest(namespace=NS, key=b"k", request_id=b"r" * 129), r"request_id .* 128 bytes"),
            ("Claim", pb.ClaimRequest(namespace=NS, key=b"k", intent=pb.Intent(json=b"{nope")), r"not valid JSON"),
            ("Claim", pb.ClaimRequest(namespace=NS, key=b"k", intent=pb.Intent(json=b"[" * 100 + b"]" * 100)),
             r"(?i)nest|depth"),
            ("Claim", pb.ClaimRequest(namespace=NS, key=b"k", lease=0), r"lease"),
            ("Claim", pb.ClaimRequest(namespace=NS, key=b"k", event_time=float("nan")), r"event_time"),
            ("ClaimBatch", pb.ClaimBatchRequest(namespace=NS, keys=[b"a", b"b"], event_times=[1.0]),
             r"event_times must be empty or have one entry per key \(2\); got 1"),
            ("Complete", pb.CompleteRequest(namespace=NS, key=b"k", token=0),
             r"token must be an int in 1\.\.2\*\*63-1"),
            ("Lookup", pb.LookupRequest(namespace="nope", key=b"k"), r"not registered"),
        ]
        for method, request, reason in cases:
            err = _bad(stub, method, request)
            assert re.search(reason, err.details() or ""), (method, err.details())
            assert dict(err.trailing_metadata() or ())["dedupstore-error"].endswith("Error")
    assert store.stats()["verdicts"]["NEW"] == 0


def test_clients_check_arguments_with_the_stores_errors(store: DedupStore) -> None:
    with served(store) as server, DedupClient(server.target) as client:
        with pytest.raises(InvalidIntentError):
            client.claim(NS, "k", {"x": float("nan")})
        with pytest.raises(InvalidInputError, match="claimant"):
            client.claim(NS, "k", claimant="c" * 129)
        with pytest.raises(InvalidInputError, match="outcome is 70000 bytes"):
            res = client.claim(NS, "k")
            assert res.token is not None
            client.complete(NS, "k", res.token, b"o" * 70_000)


def test_intent_fields_are_applied_by_the_server(store: DedupStore) -> None:
    store.ensure_namespace("payments", intent_fields=["amount"])
    with served(store) as server, DedupClient(server.target) as client:
        res = client.claim("payments", "p1", {"amount": 5, "note": "a"})
        assert res.token is not None
        client.complete("payments", "p1", res.token, b"ok")
        assert client.claim("payments", "p1", {"amount": 5, "note": "b"}).status is Status.DUPLICATE
        assert client.claim("payments", "p1", {"amount": 6, "note": "a"}).status is Status.CONFLICT


# -------------------------------------------------- metrics and group commit


def test_metrics_endpoint(store: DedupStore) -> None:
    with served(store, metrics_listen="127.0.0.1:0") as server, DedupClient(server.target) as client:
        client.claim(NS, "a")
        client.claim(NS, "a")
        client.claim_many(NS, ["b", "c"])
        with pytest.raises(InvalidInputError):
            client.lookup("nope", "k")
        assert server.metrics_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    for line in (
        'dedupstore_verdicts_total{method="Claim",status="NEW"} 1.0',
        'dedupstore_verdicts_total{method="Claim",status="IN_PROGRESS"} 1.0',
        'dedupstore_verdicts_total{method="ClaimBatch",status="NEW"} 2.0',
        'dedupstore_rpc_duration_seconds_count{method="Claim"} 2.0',
        'dedupstore_rpc_errors_total{code="INVALID_ARGUMENT",method="Lookup"} 1.0',
        'dedupstore_unresolved{namespace="orders"} 3.0',
        'dedupstore_eviction_lag_seconds{namespace="orders"} 0.0',
    ):
        assert line in text.splitlines(), line


def test_concurrent_claims_share_commits(tmp_path: Path) -> None:
    # 64 claims in flight at once from one async client: the server's threads
    # reach the journal's group fdatasync together (the write-behind window
    # logs each claim; dedupstore/journal.py), so fewer fdatasyncs than
    # claims. (Rates are measured in benches/bench_service.py, not here.)
    with DedupStore.open(tmp_path / "s", partitions=1) as store:
        store.ensure_namespace(NS)
        with served(store) as server:

            async def burst() -> list[Status]:
                async with AsyncDedupClient(server.target) as client:
                    results = await asyncio.gather(*(client.claim(NS, f"k{i}") for i in range(64)))
                return [r.status for r in results]

            assert asyncio.run(burst()) == [Status.NEW] * 64
        stats = store.stats()
    assert stats["journal_appends"] >= 64 and stats["journal_syncs"] < stats["journal_appends"]


def test_async_idempotent_decorator(store: DedupStore) -> None:
    calls: list[int] = []

    async def main() -> list[Any]:
        async with AsyncDedupClient(client_target) as client:

            @client.idempotent(NS, key=lambda n: f"credit:{n}")
            async def credit(n: int) -> dict[str, int]:
                calls.append(n)
                return {"credited": n}

            return [await credit(1), await credit(1), await credit(2)]

    with served(store) as server:
        client_target = server.target
        assert asyncio.run(main()) == [{"credited": 1}, {"credited": 1}, {"credited": 2}]
    assert calls == [1, 2]


# --------------------------------------------------------------- command line


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), r"does not exist and create=False .*pass --create"),
        (("--create", "--listen", "0.0.0.0:0"), r"not a loopback address.*--token-file.*--insecure"),
        (("--create", "--listen", "nope"), r"--listen must be HOST:PORT"),
        (("--create", "--tls-cert", "x.pem"), r"--tls-cert and --tls-key go together"),
        (("--create", "--max-batch", "0"), r"--max-batch must be a whole number >= 1"),
        (("--create", "--token-file", "/nonexistent/token"), r"--token-file /nonexistent/token: No such file"),
        (("--create", "--thread-cpus", "one"), r"--thread-cpus must be a CPU list such as 1, 0,2 or 2-3"),
        (("--create", "--thread-cpus", "100000"), r"--thread-cpus \[100000\] are not among the CPUs"),
        (("--create", "--thread-nice", "20"), r"--thread-nice must be 0..19"),
        (("--create", "--apply-interval", "1h"), r"--apply-interval must be 0 \(no write-behind\) or 500us..1s"),
        (("--create", "--flush-interval", "2h"), r"--flush-interval must be at most 1h"),
    ],
)
def test_serve_refuses_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: tuple[str, ...],
                                 message: str) -> None:
    code, out, err = run(capsys, "serve", "--path", str(tmp_path / "missing"), *extra)
    assert code == 2 and out == ""
    assert err.startswith("dedupstore: error: ") and err.count("\n") == 1
    assert re.search(message, err), err


def test_serve_refuses_an_empty_token_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  \n")
    code, _, err = run(capsys, "serve", "--path", str(tmp_path / "s"), "--create", "--token-file",
                       str(tmp_path / "token"))
    assert code == 2 and "is empty" in err
