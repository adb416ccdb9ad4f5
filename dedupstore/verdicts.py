"""What a claim answers: ``Status``, ``ClaimResult``, ``BatchResult`` and ``Record``."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from . import _native


class Status(enum.Enum):
    """The verdict of a claim (SPEC section 3)."""

    NEW = "NEW"
    DUPLICATE = "DUPLICATE"
    CONFLICT = "CONFLICT"
    IN_PROGRESS = "IN_PROGRESS"
    UNKNOWN = "UNKNOWN"
    BEYOND_HORIZON = "BEYOND_HORIZON"

    # Each member is a singleton and Enum's equality is identity, so the
    # identity hash agrees with it; Enum's own hashes the name in Python, a
    # function call per dict or set lookup (a consumer's counts by verdict,
    # holds_lease). benches/bench_instructions.py's "count by verdict".
    __hash__ = object.__hash__

    @property
    def holds_lease(self) -> bool:
        """True for the verdicts that hand the caller a token."""
        return self in _LEASED


_LEASED = frozenset({Status.NEW, Status.UNKNOWN, Status.BEYOND_HORIZON})

#: Native status codes (csrc/ds_decide.h) to members; index 0 is unused.
STATUS_BY_CODE: tuple[Status, ...] = (
    Status.NEW,
    Status.NEW,
    Status.DUPLICATE,
    Status.CONFLICT,
    Status.IN_PROGRESS,
    Status.UNKNOWN,
    Status.BEYOND_HORIZON,
)

#: Whether a native status code hands the caller a lease token.
LEASED_CODES: tuple[bool, ...] = tuple(s in _LEASED for s in STATUS_BY_CODE)


class RecordState(enum.Enum):
    """What a stored record says about its effect."""

    PENDING = "PENDING"  # a lease is live: someone is performing the effect
    UNKNOWN = "UNKNOWN"  # the lease expired without complete/release
    COMPLETED = "COMPLETED"


@dataclass(frozen=True, slots=True)
class Record:
    """The stored evidence for one (namespace, key)."""

    namespace: str
    key: bytes
    state: RecordState
    intent_digest: bytes | None
    first_seen: float
    lease_expires: float | None
    completed_at: float | None
    token: int
    attempts: int
    event_time: float | None
    event_id: bytes | None
    claimant: bytes | None
    outcome: bytes | None
    other_events: int
    #: The generation holding a completed record; 0xFFFFFFFF for an
    #: unresolved one, which lives apart from generations (docs/format.md).
    generation: int

    @classmethod
    def from_raw(cls, namespace: str, key: bytes, generation: int, raw: bytes, now_us: int) -> Record:
        """The Record of stored record ``raw`` (csrc/ds_record.h) in
        ``generation``, its state as of ``now_us``: PENDING while the lease
        runs, UNKNOWN once it has expired, COMPLETED with the outcome. Made
        in C (_native.make_record), without the dataclass's __init__."""
        return _native.make_record(namespace, key, generation, raw, now_us)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (bytes as UTF-8 where they decode, else hex)."""

        def text(b: bytes | None) -> str | None:
            if b is None:
                return None
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError:
                return "0x" + b.hex()

        return {
            "namespace": self.namespace,
            "key": text(self.key),
            "state": self.state.value,
            "intent_digest": None if self.intent_digest is None else self.intent_digest.hex(),
            "first_seen": self.first_seen,
            "lease_expires": self.lease_expires,
            "completed_at": self.completed_at,
            "token": self.token,
            "attempts": self.attempts,
            "event_time": self.event_time,
            "event_id": text(self.event_id),
            "claimant": text(self.claimant),
            "outcome": text(self.outcome),
            "other_events": self.other_events,
            "generation": self.generation,
        }


#: The verdict for one claim (made in C by the store's calls; its fields,
#: ``from_record``, ``record``, ``outcome`` and ``holds_lease`` are
#: documented there).
ClaimResult = _native.ClaimResult


class BatchResult(_native.BatchCore, Sequence[ClaimResult]):
    """Per-key verdicts of ``claim_many``, in input order.

    Built lazily: the columns (``statuses``, ``tokens``, ``retry_after``) are
    plain lists, and a key's :class:`ClaimResult` is made on first access, so
    a caller that only counts verdicts or walks the tokens never pays for
    a thousand objects.
    """

    # The fields, len() and the columns are BatchCore's: claim_many makes
    # this in C.
    __slots__ = ()

    def __init__(
        self,
        results: list[ClaimResult] | None = None,
        *,
        statuses: list[Status] | None = None,
        tokens: list[int | None] | None = None,
        retry_after: list[float | None] | None = None,
        make: Callable[[int], ClaimResult] | None = None,
    ) -> None:
        """Either ``results``, or the three columns and ``make(i)``, which
        builds key i's result."""
        if results is not None:
            self._results = list(results)
            self._make = None
            self._statuses = [r.status for r in results]
            self._tokens = [r.token for r in results]
            self._retry = [r.retry_after for r in results]
        else:
            if statuses is None or tokens is None or retry_after is None or make is None:
                raise TypeError("BatchResult needs results, or statuses, tokens, retry_after and make")
            self._results = [None] * len(statuses)
            self._make = make
            self._statuses = statuses
            self._tokens = tokens
            self._retry = retry_after

    def _item(self, i: int) -> ClaimResult:
        if self._results is None:  # claim_many's: made on the first access
            self._results = [None] * len(self)
        r = self._results[i]
        if r is None:
            r = self._results[i] = self._make(i) if self._make is not None else self._verdict(i)
        return r

    @overload
    def __getitem__(self, index: int) -> ClaimResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[ClaimResult]: ...
    def __getitem__(self, index: int | slice) -> ClaimResult | list[ClaimResult]:
        n = len(self)
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(n))]
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("BatchResult index out of range")
        return self._item(i)

    def __iter__(self) -> Iterator[ClaimResult]:
        for i in range(len(self)):
            yield self._item(i)

    def counts(self) -> dict[Status, int]:
        """How many keys got each verdict (every status present, zeros included)."""
        out = dict.fromkeys(Status, 0)
        tallies = self._tallies()  # claim_many's: counted in C, a dict update per status
        if tallies is None:
            for st in self.statuses:
                out[st] += 1
        else:
            for st, n in tallies:
                out[st] = n
        return out

    def __repr__(self) -> str:
        counts = ", ".join(f"{s.name}={n}" for s, n in self.counts().items() if n)
        return f"BatchResult({len(self)} keys: {counts})"


_native.bind_record(Record, RecordState.PENDING, RecordState.UNKNOWN, RecordState.COMPLETED)
