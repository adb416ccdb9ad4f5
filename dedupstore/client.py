"""Clients of the shared service: ``DedupClient`` and its asyncio twin ``AsyncDedupClient``.

They have ``DedupStore``'s methods and give its verdicts, records and
exceptions (tests/test_claims.py runs the same tests against all three)::

    from dedupstore.client import DedupClient

    with DedupClient("127.0.0.1:7411", token=open("/etc/dedup/token").read()) as store:
        res = store.claim("wallet.settlement.v1", "settlement:w42:r91:p7", {"amount_cents": 10000})

Arguments are checked here, with the store's own rules and errors, before
anything is sent. Every call is retried (``retries`` times, with backoff) when
the service is unavailable or the deadline passes, and each retry carries the
same request id as the first attempt: the server claims with it as the
claimant (unless the caller gave one), so a retry after a lost reply gets its
own lease back, never a second ``NEW`` (docs/service.md, "Retries").
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import json
import math
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import grpc

from . import _native, effects, errors, wire
from .errors import InvalidInputError, LeaseLostError
from .namespace import MAX_LEASE_S, MIN_LEASE_S, check_name
from .store import MAX_BATCH, MAX_CLAIMANT_BYTES, MAX_EVENT_ID_BYTES, _small_bytes, _time_us, _token
from .units import parse_duration
from .v1 import dedupstore_pb2 as pb
from .v1 import dedupstore_pb2_grpc as pb_grpc
from .verdicts import LEASED_CODES, STATUS_BY_CODE, BatchResult, ClaimResult, Record, Status

DEFAULT_TIMEOUT = 10.0
DEFAULT_RETRIES = 4
#: Codes after which the call may or may not have been applied, and a retry
#: with the same request id is safe.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_MAX_RECEIVE = 64 << 20
#: "No event time" in a batch's event_times column.
_NO_EVENT_TIME = math.nan

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

TLS: TypeAlias = bool | str | os.PathLike[str] | bytes | grpc.ChannelCredentials | None


# ------------------------------------------------------------------ the calls
# Each public method builds a _Call (checked request + how to read the reply);
# the sync and async clients differ only in how they send it.


@dataclass(frozen=True, slots=True)
class _Call:
    method: str
    request: Any
    parse: Callable[[Any], Any]
    note_on_retry: str = ""  # appended to a LeaseLostError met by a retry


#: Appended to a LeaseLostError met by a retried release: the first attempt may have applied.
_RELEASE_RETRY_NOTE = " (this was a retry after a lost reply: the first attempt may have released it)"


def _request_id() -> bytes:
    return b"rq-" + uuid.uuid4().hex.encode()


def _event_time(value: object) -> float:
    _time_us(value, "event_time")  # the store's checks and messages
    return value.timestamp() if isinstance(value, _dt.datetime) else float(value)  # type: ignore[arg-type]


def _lease(value: object) -> float:
    return parse_duration(value, what="lease", minimum=MIN_LEASE_S, maximum=MAX_LEASE_S)


_outcome = _native.outcome_bytes


def _record(msg: Any, field: str = "record") -> Record | None:
    return wire.record_from_pb(getattr(msg, field)) if msg.HasField(field) else None


def _status(code: int) -> Status:
    if not 1 <= code < len(STATUS_BY_CODE):
        raise errors.ServiceError(f"the server sent an unknown status {code}; is it a newer version?", "UNKNOWN")
    return STATUS_BY_CODE[code]


def _claim_call(
    namespace: str, key: bytes | str, intent: object, event_time: object, event_id: object, claimant: object,
    lease: object,
) -> _Call:
    req = pb.ClaimRequest(namespace=check_name(namespace), key=_native.key_bytes(key), request_id=_request_id())
    if intent is not None:
        wire.encode_intent(intent, req.intent)
    if event_time is not None:
        req.event_time = _event_time(event_time)
    if event_id is not None:
        req.event_id = _small_bytes(event_id, "event_id", MAX_EVENT_ID_BYTES)
    if claimant is not None:
        req.claimant = _small_bytes(claimant, "claimant", MAX_CLAIMANT_BYTES)
    if lease is not None:
        req.lease = _lease(lease)
    kb = req.key

    def parse(resp: Any) -> ClaimResult:
        status = _status(resp.status)
        return ClaimResult.from_record(
            status,
            resp.token if status.holds_lease else None,
            resp.retry_after if resp.HasField("retry_after") else None,
            namespace,
            kb,
            _record(resp),
        )

    return _Call("Claim", req, parse)


def _claim_batch_call(
    namespace: str, keys: Sequence[bytes | str], intents: Sequence[object] | None,
    event_times: Sequence[object] | None, claimant: object,
) -> _Call:
    n = len(keys)
    if n > MAX_BATCH:
        raise InvalidInputError(f"claim_many takes at most {MAX_BATCH} keys per call; got {n}")
    if intents is not None and len(intents) != n:
        raise InvalidInputError(f"intents must have one entry per key ({n}); got {len(intents)}")
    if event_times is not None and len(event_times) != n:
        raise InvalidInputError(f"event_times must have one entry per key ({n}); got {len(event_times)}")
    kbs = [_native.key_bytes(k) for k in keys]
    req = pb.ClaimBatchRequest(namespace=check_name(namespace), request_id=_request_id())
    req.keys.extend(kbs)
    if intents is not None and any(it is not None for it in intents):
        for it in intents:
            wire.encode_intent(it, req.intents.add())
    if event_times is not None and any(t is not None for t in event_times):
        req.event_times.extend([_NO_EVENT_TIME if t is None else _event_time(t) for t in event_times])
    if claimant is not None:
        req.claimant = _small_bytes(claimant, "claimant", MAX_CLAIMANT_BYTES)

    def parse(resp: Any) -> BatchResult:
        codes = list(resp.statuses)
        if len(codes) != n:
            raise errors.ServiceError(f"the server answered {len(codes)} verdicts for {n} keys", "INTERNAL")
        if codes:
            _status(min(codes))  # each raises, naming the code, if it is not one we know
            _status(max(codes))
        statuses = [STATUS_BY_CODE[c] for c in codes]
        raw_tokens = list(resp.tokens)
        raw_retry = list(resp.retry_after)
        if len(raw_tokens) != n or len(raw_retry) != n:
            raise errors.ServiceError(f"the server answered tokens or retry times not one per key ({n})", "INTERNAL")
        tokens: list[int | None] = [t if LEASED_CODES[c] else None for c, t in zip(codes, raw_tokens, strict=True)]
        in_progress = wire.STATUS_VALUE[Status.IN_PROGRESS]
        retry: list[float | None] = [r if c == in_progress else None for c, r in zip(codes, raw_retry, strict=True)]
        records = resp.records

        def make(i: int) -> ClaimResult:
            rec = wire.record_from_pb(records[i]) if i in records else None
            return ClaimResult.from_record(statuses[i], tokens[i], retry[i], namespace, kbs[i], rec)

        return BatchResult(statuses=statuses, tokens=tokens, retry_after=retry, make=make)

    return _Call("ClaimBatch", req, parse)


def _complete_call(namespace: str, key: bytes | str, token: int, outcome: bytes | str) -> _Call:
    req = pb.CompleteRequest(
        namespace=check_name(namespace), key=_native.key_bytes(key), token=_token(token), outcome=_outcome(outcome)
    )
    return _Call("Complete", req, _record)


def _release_call(namespace: str, key: bytes | str, token: int) -> _Call:
    req = pb.ReleaseRequest(namespace=check_name(namespace), key=_native.key_bytes(key), token=_token(token))
    return _Call(
        "Release", req, lambda _resp: None,
        note_on_retry=_RELEASE_RETRY_NOTE,
    )


def _renew_call(namespace: str, key: bytes | str, token: int, lease: object) -> _Call:
    req = pb.RenewRequest(namespace=check_name(namespace), key=_native.key_bytes(key), token=_token(token))
    if lease is not None:
        req.lease = _lease(lease)
    return _Call("Renew", req, _record)


def _leased_batch(n: int) -> Callable[[Any], list[LeaseLostError | None]]:
    def parse(resp: Any) -> list[LeaseLostError | None]:
        lost = list(resp.lease_lost)
        if len(lost) != n:
            raise errors.ServiceError(f"the server answered {len(lost)} results for {n} items", "INTERNAL")
        return [LeaseLostError(m) if m else None for m in lost]

    return parse


def _check_items(what: str, n: int) -> None:
    if n > MAX_BATCH:
        raise InvalidInputError(f"{what} takes at most {MAX_BATCH} items per call; got {n}")


def _complete_batch_call(namespace: str, items: Sequence[tuple[bytes | str, int, bytes | str]]) -> _Call:
    _check_items("complete_many", len(items))
    req = pb.CompleteBatchRequest(namespace=check_name(namespace))
    for key, token, outcome in items:
        req.items.add(key=_native.key_bytes(key), token=_token(token), outcome=_outcome(outcome))
    return _Call("CompleteBatch", req, _leased_batch(len(items)))


def _release_batch_call(namespace: str, items: Sequence[tuple[bytes | str, int]]) -> _Call:
    _check_items("release_many", len(items))
    req = pb.ReleaseBatchRequest(namespace=check_name(namespace))
    for key, token in items:
        req.items.add(key=_native.key_bytes(key), token=_token(token))
    return _Call(
        "ReleaseBatch", req, _leased_batch(len(items)),
        note_on_retry=_RELEASE_RETRY_NOTE,
    )


def _unresolved_call(namespace: str, limit: int | None) -> _Call:
    req = pb.UnresolvedRequest(namespace=check_name(namespace))
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit < 1 << 32:
            raise InvalidInputError(f"limit must be a non-negative int or None; got {limit!r}")
        req.limit = limit

    def parse(resp: Any) -> list[Record]:
        recs = [wire.record_from_pb(r) for r in resp.records]
        if resp.truncated and limit is None:
            raise errors.ServiceError(
                f"more records of {namespace!r} are unresolved than the server sends in one reply "
                f"({len(recs):,}); call unresolved({namespace!r}, limit=N) for the oldest N, resolve them, "
                f"and call again", "RESOURCE_EXHAUSTED",
            )
        return recs

    return _Call("Unresolved", req, parse)


def _finish(call: _Call, resp: Any, attempt: int) -> Any:
    out = call.parse(resp)
    if attempt and call.note_on_retry and isinstance(out, list):
        out = [LeaseLostError(str(e) + call.note_on_retry) if isinstance(e, LeaseLostError) else e for e in out]
    return out


def _lookup_call(namespace: str, key: bytes | str) -> _Call:
    req = pb.LookupRequest(namespace=check_name(namespace), key=_native.key_bytes(key))
    return _Call("Lookup", req, _record)


def _stats_call() -> _Call:
    return _Call("Stats", pb.StatsRequest(), lambda resp: json.loads(resp.json))


# ----------------------------------------------------------------- transport


def _credentials(tls: TLS) -> grpc.ChannelCredentials | None:
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    if isinstance(tls, bytes):
        return grpc.ssl_channel_credentials(root_certificates=tls)
    if isinstance(tls, (str, os.PathLike)):
        try:
            with open(tls, "rb") as f:
                return grpc.ssl_channel_credentials(root_certificates=f.read())
        except OSError as exc:
            raise InvalidInputError(f"tls: cannot read the CA certificate {os.fspath(tls)}: {exc.strerror}") from None
    raise InvalidInputError(
        f"tls must be None, True (system roots), a CA certificate path or PEM bytes, or grpc.ChannelCredentials; "
        f"got {type(tls).__name__}"
    )


def _metadata(token: str | bytes | None) -> tuple[tuple[str, str], ...] | None:
    if token is None:
        return None
    text = token.decode("ascii", "replace") if isinstance(token, bytes) else token
    text = text.strip()
    if not text or any(not 0x21 <= ord(c) <= 0x7E for c in text):
        raise InvalidInputError("token must be non-empty printable ASCII without spaces")
    return (("authorization", f"Bearer {text}"),)


class _Settings:
    """What both clients check and keep at construction."""

    def __init__(
        self, target: str, token: str | bytes | None, tls: TLS, timeout: float, retries: int,
        options: Sequence[tuple[str, Any]],
    ) -> None:
        if not isinstance(target, str) or not target:
            raise InvalidInputError(f"target must be 'HOST:PORT'; got {target!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise InvalidInputError(f"timeout must be 0 < seconds <= 3600; got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
            raise InvalidInputError(f"retries must be an int in 0..100; got {retries!r}")
        self.target = target
        self.metadata = _metadata(token)
        self.credentials = _credentials(tls)
        self.timeout = float(timeout)
        self.retries = retries
        self.options = [
            ("grpc.max_receive_message_length", _MAX_RECEIVE),
            # Reconnect quickly after a restart; the retry loop bounds the total wait.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            *options,
        ]

    def channel(self, module: Any) -> Any:
        """A channel to the target from ``module`` (``grpc`` or ``grpc.aio``)."""
        if self.credentials is None:
            return module.insecure_channel(self.target, options=self.options)
        return module.secure_channel(self.target, self.credentials, options=self.options)

    def backoff(self, attempt: int) -> float:
        return min(1.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0)

    def error(self, call: _Call, exc: Any, attempt: int) -> errors.DedupError:
        err = wire.error_from_status(exc.code(), exc.details() or "", exc.trailing_metadata())
        if attempt and isinstance(err, LeaseLostError) and call.note_on_retry:
            err = LeaseLostError(str(err) + call.note_on_retry)
        elif isinstance(err, errors.ServiceError) and attempt:
            err = type(err)(f"{err} (after {attempt + 1} attempts)", err.code)
        return err


class DedupClient:
    """A client of ``dedupstore serve`` with ``DedupStore``'s methods and verdicts.

    ``target`` is ``HOST:PORT``; ``token`` the server's bearer token; ``tls``
    None (plaintext), True (TLS, system roots), a CA certificate path or PEM
    bytes, or ``grpc.ChannelCredentials``. ``timeout`` bounds each attempt (s);
    ``retries`` is how many times a call is re-sent after UNAVAILABLE or
    DEADLINE_EXCEEDED (with the same request id). Thread-safe.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | bytes | None = None,
        tls: TLS = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._s = _Settings(target, token, tls, timeout, retries, options)
        self._channel = self._s.channel(grpc)
        self._stub = pb_grpc.DedupStoreStub(self._channel)

    def _send(self, call: _Call) -> Any:
        method = getattr(self._stub, call.method)
        attempt = 0
        while True:
            try:
                # Retries wait for the channel to (re)connect, within the deadline.
                resp = method(
                    call.request, timeout=self._s.timeout, metadata=self._s.metadata, wait_for_ready=attempt > 0
                )
            except grpc.RpcError as exc:
                if exc.code() in RETRYABLE and attempt < self._s.retries:
                    time.sleep(self._s.backoff(attempt))
                    attempt += 1
                    continue
                raise self._s.error(call, exc, attempt) from None
            return _finish(call, resp, attempt)

    def claim(
        self,
        namespace: str,
        key: bytes | str,
        intent: object = None,
        *,
        event_time: float | _dt.datetime | None = None,
        event_id: bytes | str | None = None,
        claimant: bytes | str | None = None,
        lease: float | str | None = None,
    ) -> ClaimResult:
        """As ``DedupStore.claim``."""
        return self._send(_claim_call(namespace, key, intent, event_time, event_id, claimant, lease))

    def claim_many(
        self,
        namespace: str,
        keys: Sequence[bytes | str],
        intents: Sequence[object] | None = None,
        *,
        event_times: Sequence[float | _dt.datetime | None] | None = None,
        claimant: bytes | str | None = None,
    ) -> BatchResult:
        """As ``DedupStore.claim_many`` (one ``ClaimBatch`` RPC; the server may cap the batch size)."""
        return self._send(_claim_batch_call(namespace, keys, intents, event_times, claimant))

    def complete(self, namespace: str, key: bytes | str, token: int, outcome: bytes | str = b"") -> Record:
        """As ``DedupStore.complete``."""
        return self._send(_complete_call(namespace, key, token, outcome))

    def release(self, namespace: str, key: bytes | str, token: int) -> None:
        """As ``DedupStore.release``."""
        self._send(_release_call(namespace, key, token))

    def renew(self, namespace: str, key: bytes | str, token: int, lease: float | str | None = None) -> Record:
        """As ``DedupStore.renew``."""
        return self._send(_renew_call(namespace, key, token, lease))

    def lookup(self, namespace: str, key: bytes | str) -> Record | None:
        """As ``DedupStore.lookup``."""
        return self._send(_lookup_call(namespace, key))

    def complete_many(
        self, namespace: str, items: Sequence[tuple[bytes | str, int, bytes | str]]
    ) -> list[LeaseLostError | None]:
        """As ``DedupStore.complete_many`` (one ``CompleteBatch`` RPC)."""
        return self._send(_complete_batch_call(namespace, items))

    def release_many(self, namespace: str, items: Sequence[tuple[bytes | str, int]]) -> list[LeaseLostError | None]:
        """As ``DedupStore.release_many`` (one ``ReleaseBatch`` RPC)."""
        return self._send(_release_batch_call(namespace, items))

    def unresolved(self, namespace: str, limit: int | None = None) -> list[Record]:
        """As ``DedupStore.unresolved``. One reply carries at most the server's
        cap (10,000); without ``limit``, more than that raises ServiceError."""
        return self._send(_unresolved_call(namespace, limit))

    def stats(self) -> dict[str, Any]:
        """The server's ``DedupStore.stats()`` (its counters count every client's calls)."""
        return self._send(_stats_call())

    def idempotent(
        self,
        namespace: str,
        *,
        key: Callable[..., bytes | str],
        intent: Callable[..., object] | None = None,
        dumps: Callable[[Any], bytes] | None = None,
        loads: Callable[[bytes], Any] | None = None,
        release_on: tuple[type[BaseException], ...] = (),
    ) -> Callable[[F], F]:
        """As ``DedupStore.idempotent``."""
        return effects.idempotent(
            self, namespace, key=key, intent=intent, dumps=dumps, loads=loads, release_on=release_on
        )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> DedupClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<DedupClient {self._s.target}>"


class AsyncDedupClient:
    """The asyncio twin of :class:`DedupClient`: the same arguments, ``await`` every method.

    Create and use it inside one running event loop.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | bytes | None = None,
        tls: TLS = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._s = _Settings(target, token, tls, timeout, retries, options)
        self._channel = self._s.channel(grpc.aio)
        self._stub = pb_grpc.DedupStoreStub(self._channel)

    async def _send(self, call: _Call) -> Any:
        method = getattr(self._stub, call.method)
        attempt = 0
        while True:
            try:
                resp = await method(
                    call.request, timeout=self._s.timeout, metadata=self._s.metadata, wait_for_ready=attempt > 0
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in RETRYABLE and attempt < self._s.retries:
                    await asyncio.sleep(self._s.backoff(attempt))
                    attempt += 1
                    continue
                raise self._s.error(call, exc, attempt) from None
            return _finish(call, resp, attempt)

    async def claim(
        self,
        namespace: str,
        key: bytes | str,
        intent: object = None,
        *,
        event_time: float | _dt.datetime | None = None,
        event_id: bytes | str | None = None,
        claimant: bytes | str | None = None,
        lease: float | str | None = None,
    ) -> ClaimResult:
        """As ``DedupStore.claim``."""
        return await self._send(_claim_call(namespace, key, intent, event_time, event_id, claimant, lease))

    async def claim_many(
        self,
        namespace: str,
        keys: Sequence[bytes | str],
        intents: Sequence[object] | None = None,
        *,
        event_times: Sequence[float | _dt.datetime | None] | None = None,
        claimant: bytes | str | None = None,
    ) -> BatchResult:
        """As ``DedupStore.claim_many``."""
        return await self._send(_claim_batch_call(namespace, keys, intents, event_times, claimant))

    async def complete(self, namespace: str, key: bytes | str, token: int, outcome: bytes | str = b"") -> Record:
        """As ``DedupStore.complete``."""
        return await self._send(_complete_call(namespace, key, token, outcome))

    async def release(self, namespace: str, key: bytes | str, token: int) -> None:
        """As ``DedupStore.release``."""
        await self._send(_release_call(namespace, key, token))

    async def renew(self, namespace: str, key: bytes | str, token: int, lease: float | str | None = None) -> Record:
        """As ``DedupStore.renew``."""
        return await self._send(_renew_call(namespace, key, token, lease))

    async def lookup(self, namespace: str, key: bytes | str) -> Record | None:
        """As ``DedupStore.lookup``."""
        return await self._send(_lookup_call(namespace, key))

    async def complete_many(
        self, namespace: str, items: Sequence[tuple[bytes | str, int, bytes | str]]
    ) -> list[LeaseLostError | None]:
        """As ``DedupStore.complete_many`` (one ``CompleteBatch`` RPC)."""
        return await self._send(_complete_batch_call(namespace, items))

    async def release_many(
        self, namespace: str, items: Sequence[tuple[bytes | str, int]]
    ) -> list[LeaseLostError | None]:
        """As ``DedupStore.release_many`` (one ``ReleaseBatch`` RPC)."""
        return await self._send(_release_batch_call(namespace, items))

    async def unresolved(self, namespace: str, limit: int | None = None) -> list[Record]:
        """As ``DedupClient.unresolved``."""
        return await self._send(_unresolved_call(namespace, limit))

    async def stats(self) -> dict[str, Any]:
        """The server's ``DedupStore.stats()``."""
        return await self._send(_stats_call())

    def idempotent(
        self,
        namespace: str,
        *,
        key: Callable[..., bytes | str],
        intent: Callable[..., object] | None = None,
        dumps: Callable[[Any], bytes] | None = None,
        loads: Callable[[bytes], Any] | None = None,
        release_on: tuple[type[BaseException], ...] = (),
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
        """As ``DedupStore.idempotent``, for ``async def`` functions."""
        enc = dumps or effects.default_dumps
        dec = loads or json.loads

        def wrap(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
            @functools.wraps(fn)
            async def run(*args: Any, **kwargs: Any) -> Any:
                k = key(*args, **kwargs)
                res = await self.claim(namespace, k, None if intent is None else intent(*args, **kwargs))
                if res.status is Status.DUPLICATE:
                    return dec(res.outcome or b"null")
                if res.status is not Status.NEW:
                    raise errors.EffectNotRunError(res)
                assert res.token is not None
                try:
                    value = await fn(*args, **kwargs)
                except release_on:
                    await self.release(namespace, k, res.token)
                    raise
                await self.complete(namespace, k, res.token, enc(value))
                return value

            return run

        return wrap

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncDedupClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncDedupClient {self._s.target}>"


__all__ = ["AsyncDedupClient", "DedupClient"]
