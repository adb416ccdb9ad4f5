# Type stubs for the compiled dedupstore._native (checked by mypy.stubtest in the test command).
from typing import Any

from typing_extensions import disjoint_base

NEW: int
DUPLICATE: int
CONFLICT: int
IN_PROGRESS: int
UNKNOWN: int
BEYOND_HORIZON: int
OP_APPLY: int
OP_NOOP: int
OP_LEASE_LOST: int
OP_OUTCOME_DIFFERS: int
STATE_PENDING: int
STATE_COMPLETED: int
RECORD_VERSION: int
NO_TIME: int
PINNED_GEN: int
MAX_KEY_BYTES: int
MAX_INTENT_BYTES: int
MAX_INTENT_DEPTH: int
KEY_PREFIX_BYTES: int

def reseed_tokens() -> None: ...
def next_token() -> int: ...
def key_bytes(key: object) -> bytes: ...
def canonical_intent(intent: object, fields: tuple[str, ...] | None = None) -> bytes | None: ...
def decode_record(raw: bytes) -> tuple[Any, ...]: ...
def record_outcome(raw: bytes) -> bytes | None: ...
def record_key(prefix: bytes, gen: int, key: bytes) -> bytes: ...
def split_record_key(lkey: bytes) -> tuple[int, int, bytes]: ...
def pending_key(prefix: bytes, first_seen: int, key: bytes) -> bytes: ...
def split_pending_key(pkey: bytes) -> tuple[int, int, bytes]: ...
def claim_batch(
    spaces: list[Any],
    order: list[int],
    txn: Any,
    keys: list[bytes],
    digests: list[Any],
    now: int,
    lease: int,
    event_times: list[Any] | None,
    claimant: object,
    results: list[Any],
    write: bool,
) -> list[int]: ...

def complete_batch(
    spaces: list[Any],
    order: list[int],
    txn: Any,
    keys: list[bytes],
    tokens: list[int],
    outcomes: list[bytes],
    now: int,
    results: list[Any],
) -> None: ...
def release_batch(
    spaces: list[Any], order: list[int], txn: Any, keys: list[bytes], tokens: list[int], now: int, results: list[Any]
) -> None: ...

@disjoint_base
class Hasher:
    def __init__(self, secret: bytes) -> None: ...
    def digest(self, data: bytes) -> bytes: ...
    def hash64(self, data: bytes) -> int: ...
    def route(self, ns_prefix: bytes, key: bytes, partitions: int) -> int: ...
    def intent_digest(self, intent: object, fields: tuple[str, ...] | None = None) -> bytes | None: ...

@disjoint_base
class Space:
    records: Any
    pending: Any
    meta: Any
    prefix: bytes
    frontier_key: bytes
    gen_len: int
    oldest: int
    newest: int
    initial_frontier: int
    def __init__(
        self, records: Any, pending: Any, meta: Any, prefix: bytes, gen_len: int, oldest: int, initial_frontier: int
    ) -> None: ...
    def generation(self, now: int) -> int: ...
    def frontier(self, txn: Any) -> int: ...
    def stored_oldest(self, txn: Any) -> int: ...
    def advance_oldest(self, gen: int) -> None: ...
    def evict_step(self, txn: Any, horizon: int, now: int, budget: int) -> tuple[int, int, int, int]: ...
    def evicted_total(self, txn: Any) -> int: ...
    def lookup(self, txn: Any, key: bytes, now: int) -> tuple[int, bytes] | None: ...
    def claim(
        self,
        txn: Any,
        key: bytes,
        digest: bytes | None,
        now: int,
        lease: int,
        event_time: int,
        claimant: bytes | None,
        event_id: bytes | None,
        write: bool,
    ) -> tuple[int, int, int, bytes, bool, bool, int] | None: ...
    def complete(self, txn: Any, key: bytes, token: int, outcome: bytes, now: int) -> tuple[int, bytes | None, int]: ...
    def release(self, txn: Any, key: bytes, token: int, now: int) -> int: ...
    def renew(self, txn: Any, key: bytes, token: int, now: int, lease: int) -> tuple[int, bytes | None, int]: ...

