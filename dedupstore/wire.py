"""How verdicts, records, intents and errors travel between the service and its clients.

Both sides import this module, so a value means the same thing at each end:
statuses keep the engine's codes, times stay the store's float seconds (sent as
doubles, so a client's ``Record`` equals the server's field for field), and an
error raised by the store reaches the client as the same exception class with
the same message (its class name travels in the trailing metadata).
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from . import _native, errors
from .v1 import dedupstore_pb2 as pb
from .verdicts import STATUS_BY_CODE, Record, RecordState, Status

#: The fully qualified service name (for health and reflection).
SERVICE = "dedupstore.v1.DedupStore"
#: Trailing-metadata key that names the dedupstore exception behind an error status.
ERROR_KEY = "dedupstore-error"
#: Bytes of a request id or claimant (the store's claimant limit).
MAX_REQUEST_ID_BYTES = 128

#: Status <-> wire value; the proto's enum values are the engine's codes.
#: Wire value -> Status is verdicts.STATUS_BY_CODE (0, "unspecified", is never sent).
STATUS_VALUE: dict[Status, int] = {s: code for code, s in enumerate(STATUS_BY_CODE) if code}

_STATE_VALUE = {
    RecordState.PENDING: pb.PENDING,
    RecordState.UNKNOWN: pb.UNKNOWN_COMPLETION,
    RecordState.COMPLETED: pb.COMPLETED,
}
_STATE_OF = {v: k for k, v in _STATE_VALUE.items()}

# --------------------------------------------------------------------- intents


def encode_intent(intent: object, into: Any) -> None:
    """Fill ``into`` (an ``Intent`` message) from a caller's intent, checked as the store checks it.

    The client canonicalises (so bad intents fail locally with the store's own
    error) but sends mappings as canonical JSON rather than a digest: only the
    server knows the namespace's ``intent_fields``.
    """
    canon = _native.canonical_intent(intent)
    if canon is None:
        return
    if canon[0] == 0:
        into.raw = canon[1:]
    else:
        into.json = canon[1:]


def decode_intent(msg: Any, present: bool) -> object:
    """The intent a request carries, as ``DedupStore.claim`` takes it."""
    if not present:
        return None
    kind = msg.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "raw":
        return bytes(msg.raw)
    raw = msg.json
    if len(raw) > _native.MAX_INTENT_BYTES:
        raise errors.InvalidIntentError(
            f"intent is {len(raw)} canonical bytes; at most {_native.MAX_INTENT_BYTES} are allowed"
        )
    try:
        # Nesting deeper than the store allows is refused by the store; Python's
        # own recursion limit only guards the parse of a hostile request.
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise errors.InvalidIntentError(f"intent.json is not valid JSON: {exc}") from None
    if not isinstance(value, (dict, list)):
        raise errors.InvalidIntentError("intent.json must be a JSON object or array")
    return value


# --------------------------------------------------------------------- records


def record_to_pb(rec: Record, into: Any) -> None:
    into.namespace = rec.namespace
    into.key = rec.key
    into.state = _STATE_VALUE[rec.state]
    into.first_seen = rec.first_seen
    into.token = rec.token
    into.attempts = rec.attempts
    into.other_events = rec.other_events
    into.generation = rec.generation
    for name in ("intent_digest", "lease_expires", "completed_at", "event_time", "event_id", "claimant", "outcome"):
        value = getattr(rec, name)
        if value is not None:
            setattr(into, name, value)


def record_from_pb(msg: Any) -> Record:
    def opt(name: str) -> Any:
        return getattr(msg, name) if msg.HasField(name) else None

    return Record(
        namespace=msg.namespace,
        key=msg.key,
        state=_STATE_OF[msg.state],
        intent_digest=opt("intent_digest"),
        first_seen=msg.first_seen,
        lease_expires=opt("lease_expires"),
        completed_at=opt("completed_at"),
        token=msg.token,
        attempts=msg.attempts,
        event_time=opt("event_time"),
        event_id=opt("event_id"),
        claimant=opt("claimant"),
        outcome=opt("outcome"),
        other_events=msg.other_events,
        generation=msg.generation,
    )


# ---------------------------------------------------------------------- errors

#: How each store error maps onto a gRPC status (the first matching class wins).
_ERROR_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (errors.InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.LeaseLostError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.StoreFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.StoreClosedError, grpc.StatusCode.UNAVAILABLE),
    (errors.DurabilityError, grpc.StatusCode.INTERNAL),
    (errors.DedupError, grpc.StatusCode.FAILED_PRECONDITION),
)


def status_for(exc: BaseException) -> grpc.StatusCode:
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def error_from_status(code: grpc.StatusCode, details: str, trailing: Any) -> errors.DedupError:
    """The exception a client raises for an error status: the server's own class where it named one."""
    name = None
    for key, value in trailing or ():
        if key == ERROR_KEY:
            name = value
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, errors.DedupError) and cls not in (
        errors.ServiceError, errors.UnauthenticatedError, errors.EffectNotRunError,
    ):
        return cls(details)
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return errors.UnauthenticatedError(details, code.name)
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return errors.InvalidInputError(details)
    return errors.ServiceError(f"{code.name}: {details}", code.name)
