"""The shared service: one ``DedupStore`` served over gRPC (SPEC section 9, docs/service.md).

Requests run on a thread pool, so concurrent claims reach the store together
and share its group commits (one fsync for many claims in ``sync`` mode). The
store decides everything; this module checks what arrives from the network,
maps store errors to status codes, and makes retries safe: a claim carries a
request id that the server uses as the claimant when the caller gave none, so
a retry after a lost reply gets its own lease back instead of a second ``NEW``.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from . import errors, wire
from .metrics import ServiceMetrics
from .store import DedupStore
from .v1 import dedupstore_pb2 as pb
from .v1 import dedupstore_pb2_grpc as pb_grpc
from .verdicts import STATUS_BY_CODE, ClaimResult, Status

log = logging.getLogger("dedupstore.server")

DEFAULT_LISTEN = "127.0.0.1:7411"
DEFAULT_MAX_MESSAGE_BYTES = 4 << 20
DEFAULT_MAX_BATCH = 10_000
#: Most records one Unresolved reply carries (UnresolvedResponse.truncated says when more exist).
MAX_UNRESOLVED_REPLY = 10_000
DEFAULT_WORKERS = 32
MAX_WORKERS = 1024

#: Called after the store has answered (and, for a write, committed) and
#: before the reply is sent, with the RPC's name. Test-only: it lets tests
#: lose a reply whose claim is committed (docs/service.md, "Test hooks").
AfterCommit = Callable[[str], None]

R = TypeVar("R")


@dataclass(frozen=True)
class Limits:
    """What the server accepts; a request over a limit gets an error that names it."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_batch: int = DEFAULT_MAX_BATCH


def parse_listen(value: str, what: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); port 0 asks for any free port."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise errors.InvalidInputError(f"{what} must be HOST:PORT (port 0..65535), e.g. 127.0.0.1:7411; got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ------------------------------------------------------------------ the token


class _TokenCheck(grpc.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` before their request is parsed.

    The refusal handler has no deserializer, so the request bytes of an
    unauthenticated call are never decoded, let alone applied. Both sides are
    hashed before the constant-time comparison, so not even the token's length
    leaks. Health checks stay open (probes carry no secrets and learn nothing).
    """

    def __init__(self, token: bytes) -> None:
        self._want = hashlib.sha256(b"Bearer " + token).digest()

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        if details.method.startswith("/grpc.health.v1.Health/"):
            return continuation(details)
        got = b""
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                got = value.encode("utf-8", "replace") if isinstance(value, str) else bytes(value)
        if hmac.compare_digest(hashlib.sha256(got).digest(), self._want):
            return continuation(details)
        handler = continuation(details)
        message = "missing or wrong token: send metadata 'authorization: Bearer <token>'"
        if handler is not None and (handler.request_streaming or handler.response_streaming):

            def deny_stream(_requests: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
                yield from ()  # pragma: no cover - abort raises

            return grpc.stream_stream_rpc_method_handler(deny_stream)

        def deny(_request: bytes, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        return grpc.unary_unary_rpc_method_handler(deny)


# ---------------------------------------------------------------- the service


def _opt_bytes(msg: Any, name: str) -> bytes | None:
    return getattr(msg, name) if msg.HasField(name) else None


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _request_id(msg: Any) -> bytes:
    rid: bytes = msg.request_id
    if len(rid) > wire.MAX_REQUEST_ID_BYTES:
        raise errors.InvalidInputError(
            f"request_id must be at most {wire.MAX_REQUEST_ID_BYTES} bytes; got {len(rid)} bytes"
        )
    return rid


def _result_to_pb(res: ClaimResult, into: Any) -> None:
    into.status = wire.STATUS_VALUE[res.status]
    if res.token is not None:
        into.token = res.token
    if res.retry_after is not None:
        into.retry_after = res.retry_after
    rec = res.record
    if rec is not None:
        wire.record_to_pb(rec, into.record)


class DedupService(pb_grpc.DedupStoreServicer):
    """The RPC handlers: each checks its request, asks the store, and maps errors."""

    def __init__(
        self, store: DedupStore, limits: Limits, metrics: ServiceMetrics | None = None,
        after_commit: AfterCommit | None = None,
    ) -> None:
        self._store = store
        self._limits = limits
        self._metrics = metrics
        self._after_commit = after_commit

    def _run(self, method: str, context: grpc.ServicerContext, fn: Callable[[], R]) -> R:
        start = time.perf_counter()
        try:
            return fn()
        except errors.DedupError as exc:
            code = wire.status_for(exc)
            if self._metrics is not None:
                self._metrics.error(method, code.name)
            context.set_trailing_metadata(((wire.ERROR_KEY, type(exc).__name__),))
            context.abort(code, str(exc))
            raise AssertionError("unreachable: abort() raises") from exc
        finally:
            if self._metrics is not None:
                self._metrics.latency(method, time.perf_counter() - start)

    def _committed(self, method: str) -> None:
        if self._after_commit is not None:
            self._after_commit(method)

    def Claim(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 (gRPC names)
        def claim() -> Any:
            rid = _request_id(request)
            claimant = _opt_bytes(request, "claimant")
            if claimant is None and rid:
                claimant = rid
            res = self._store.claim(
                request.namespace,
                request.key,
                wire.decode_intent(request.intent, request.HasField("intent")),
                event_time=_opt(request, "event_time"),
                event_id=_opt_bytes(request, "event_id"),
                claimant=claimant,
                lease=_opt(request, "lease"),
            )
            self._committed("Claim")
            if self._metrics is not None:
                self._metrics.verdict("Claim", res.status)
            reply = pb.ClaimResponse()
            _result_to_pb(res, reply)
            return reply

        return self._run("Claim", context, claim)

    def ClaimBatch(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def claim_batch() -> Any:
            keys = list(request.keys)
            n = len(keys)
            if n > self._limits.max_batch:
                raise errors.InvalidInputError(
                    f"ClaimBatch takes at most {self._limits.max_batch} keys per call (the server's --max-batch); "
                    f"got {n}"
                )
            for what, got in (("intents", len(request.intents)), ("event_times", len(request.event_times))):
                if got not in (0, n):
                    raise errors.InvalidInputError(f"{what} must be empty or have one entry per key ({n}); got {got}")
            intents = None
            if request.intents:
                intents = [wire.decode_intent(it, True) for it in request.intents]
            event_times = None
            if request.event_times:
                event_times = [None if math.isnan(t) else t for t in request.event_times]
            rid = _request_id(request)
            claimant = _opt_bytes(request, "claimant")
            by_request_id = claimant is None and bool(rid)
            batch = self._store.claim_many(
                request.namespace, keys, intents, event_times=event_times, claimant=rid if by_request_id else claimant
            )
            self._committed("ClaimBatch")
            status_value = wire.STATUS_VALUE
            statuses = [status_value[st] for st in batch.statuses]
            tokens = [t or 0 for t in batch.tokens]
            retry = [r or 0.0 for r in batch.retry_after]
            if by_request_id and len(set(keys)) < n:
                self._repeats_wait(batch, statuses, tokens, retry)
            reply = pb.ClaimBatchResponse()
            reply.statuses.extend(statuses)
            reply.tokens.extend(tokens)
            reply.retry_after.extend(retry)
            new = wire.STATUS_VALUE[Status.NEW]
            for i, code in enumerate(statuses):
                if code != new:
                    rec = batch[i].record
                    if rec is not None:
                        wire.record_to_pb(rec, reply.records[i])
            if self._metrics is not None:
                for code, count in collections.Counter(statuses).items():
                    self._metrics.verdict("ClaimBatch", STATUS_BY_CODE[code], count)
            return reply

        return self._run("ClaimBatch", context, claim_batch)

    def _repeats_wait(self, batch: Any, statuses: list[int], tokens: list[int], retry: list[float]) -> None:
        # The request id stands in for a claimant only across retries of one
        # call. Within the batch, a key's second occurrence must see the first
        # one's lease (IN_PROGRESS), as it would in the embedded store, not be
        # handed the same lease back as if it were the same claim.
        first: dict[bytes, int] = {}  # key -> token of its first leased occurrence
        now = self._store.now()
        for i, res in enumerate(batch):
            if res.token is None:
                continue
            token = first.get(res.key)
            if token is None:
                first[res.key] = res.token
            elif token == res.token:
                rec = res.record
                until = rec.lease_expires if rec is not None and rec.lease_expires is not None else now
                statuses[i] = wire.STATUS_VALUE[Status.IN_PROGRESS]
                tokens[i] = 0
                retry[i] = max(0.0, until - now)

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def complete() -> Any:
            rec = self._store.complete(request.namespace, request.key, request.token, request.outcome)
            self._committed("Complete")
            reply = pb.RecordResponse()
            wire.record_to_pb(rec, reply.record)
            return reply

        return self._run("Complete", context, complete)

    def Release(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def release() -> Any:
            self._store.release(request.namespace, request.key, request.token)
            self._committed("Release")
            return pb.ReleaseResponse()

        return self._run("Release", context, release)

    def Renew(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def renew() -> Any:
            rec = self._store.renew(request.namespace, request.key, request.token, _opt(request, "lease"))
            self._committed("Renew")
            reply = pb.RecordResponse()
            wire.record_to_pb(rec, reply.record)
            return reply

        return self._run("Renew", context, renew)

    def Lookup(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def lookup() -> Any:
            rec = self._store.lookup(request.namespace, request.key)
            reply = pb.LookupResponse()
            if rec is not None:
                wire.record_to_pb(rec, reply.record)
            return reply

        return self._run("Lookup", context, lookup)

    def Stats(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run("Stats", context, lambda: pb.StatsResponse(json=json.dumps(self._store.stats())))

    def _check_batch(self, method: str, n: int) -> None:
        if n > self._limits.max_batch:
            raise errors.InvalidInputError(
                f"{method} takes at most {self._limits.max_batch} items per call (the server's --max-batch); got {n}"
            )

    @staticmethod
    def _lease_lost(lost: list[errors.LeaseLostError | None]) -> Any:
        reply = pb.LeasedBatchResponse()
        reply.lease_lost.extend("" if e is None else str(e) for e in lost)
        return reply

    def CompleteBatch(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def complete_batch() -> Any:
            self._check_batch("CompleteBatch", len(request.items))
            lost = self._store.complete_many(
                request.namespace, [(it.key, it.token, it.outcome) for it in request.items]
            )
            self._committed("CompleteBatch")
            return self._lease_lost(lost)

        return self._run("CompleteBatch", context, complete_batch)

    def ReleaseBatch(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def release_batch() -> Any:
            self._check_batch("ReleaseBatch", len(request.items))
            lost = self._store.release_many(request.namespace, [(it.key, it.token) for it in request.items])
            self._committed("ReleaseBatch")
            return self._lease_lost(lost)

        return self._run("ReleaseBatch", context, release_batch)

    def Unresolved(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def unresolved() -> Any:
            limit = request.limit if request.HasField("limit") else MAX_UNRESOLVED_REPLY
            if limit > MAX_UNRESOLVED_REPLY:
                raise errors.InvalidInputError(
                    f"Unresolved sends at most {MAX_UNRESOLVED_REPLY:,} records per call; got limit={limit:,}"
                )
            recs = self._store.unresolved(request.namespace, limit=limit + 1)
            reply = pb.UnresolvedResponse(truncated=len(recs) > limit)
            for rec in recs[:limit]:
                wire.record_to_pb(rec, reply.records.add())
            return reply

        return self._run("Unresolved", context, unresolved)


# ------------------------------------------------------------------ the server


class Server:
    """A gRPC server over one open store: the DedupStore service, health and reflection.

    ``listen`` is ``HOST:PORT`` (port 0: any free port; :attr:`port` tells which).
    ``token`` turns on bearer-token checks; ``tls`` is (certificate chain PEM,
    private key PEM). The store stays the caller's: :meth:`stop` does not close it.
    """

    def __init__(
        self,
        store: DedupStore,
        *,
        listen: str = DEFAULT_LISTEN,
        token: bytes | None = None,
        tls: tuple[bytes, bytes] | None = None,
        limits: Limits | None = None,
        workers: int = DEFAULT_WORKERS,
        metrics_listen: str | None = None,
        after_commit: AfterCommit | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or Limits()
        if self.limits.max_message_bytes < 1024:
            raise errors.InvalidInputError(
                f"max message bytes must be at least 1024; got {self.limits.max_message_bytes}"
            )
        if not 1 <= self.limits.max_batch <= 100_000:
            raise errors.InvalidInputError(f"max batch must be 1..100000 keys; got {self.limits.max_batch}")
        if not 1 <= workers <= MAX_WORKERS:
            raise errors.InvalidInputError(f"workers must be 1..{MAX_WORKERS}; got {workers}")
        if token is not None and not token:
            raise errors.InvalidInputError("the token is empty")
        self.host, port = parse_listen(listen)
        self._metrics_addr = None if metrics_listen is None else parse_listen(metrics_listen, "--metrics-listen")
        self.metrics = ServiceMetrics(store) if metrics_listen is not None else None
        self.metrics_port: int | None = None
        self.health = health.HealthServicer()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="dedupstore-rpc")
        self._server = grpc.server(
            self._pool,
            interceptors=[_TokenCheck(token)] if token is not None else None,
            options=[
                ("grpc.max_receive_message_length", self.limits.max_message_bytes),
                ("grpc.max_send_message_length", -1),
                # Refuse a port another process already serves rather than share it.
                ("grpc.so_reuseport", 0),
            ],
        )
        pb_grpc.add_DedupStoreServicer_to_server(
            DedupService(store, self.limits, self.metrics, after_commit), self._server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (wire.SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self._server,
        )
        address = _hostport(self.host, port)
        try:
            if tls is not None:
                creds = grpc.ssl_server_credentials([(tls[1], tls[0])])
                self.port = self._server.add_secure_port(address, creds)
            else:
                self.port = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise errors.InvalidInputError(f"cannot listen on {address}: {exc}") from None
        if self.port == 0:
            raise errors.InvalidInputError(f"cannot listen on {address} (address in use or not available)")
        self._stopped = False

    @property
    def target(self) -> str:
        """The address a client connects to."""
        return _hostport(self.host, self.port)

    def start(self) -> None:
        if self._metrics_addr is not None and self.metrics is not None:
            self.metrics_port = self.metrics.serve(*self._metrics_addr)
        self._server.start()
        for service in ("", wire.SERVICE):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("dedupstore: serving %s on %s", self.store.path, self.target)

    def stop(self, grace: float | None = 10.0) -> None:
        """Health goes NOT_SERVING, new calls are refused, in-flight calls get ``grace`` seconds to finish."""
        if self._stopped:
            return
        self._stopped = True
        # Stop taking calls first, then say NOT_SERVING: a client that sees
        # NOT_SERVING must find new calls refused (the other order left a
        # window in which a call sent after NOT_SERVING was still accepted).
        stopped = self._server.stop(grace)
        self.health.enter_graceful_shutdown()
        stopped.wait()
        self._pool.shutdown(wait=True)
        if self.metrics is not None:
            self.metrics.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout``); True when it has."""
        return bool(self._server.wait_for_termination(timeout))


def read_token_file(path: str) -> bytes:
    """The token in ``path`` (surrounding whitespace dropped), refusing an empty or oversized file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4097)
    except OSError as exc:
        raise errors.InvalidInputError(f"--token-file {path}: {exc.strerror}") from None
    token = raw.strip()
    if len(raw) > 4096:
        raise errors.InvalidInputError(f"--token-file {path}: a token is at most 4096 bytes")
    if not token:
        raise errors.InvalidInputError(f"--token-file {path} is empty")
    if any(b < 0x21 or b > 0x7E for b in token):
        raise errors.InvalidInputError(f"--token-file {path}: the token must be printable ASCII without spaces")
    return token


