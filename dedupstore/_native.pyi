# Type stubs for the compiled dedupstore._native (checked by mypy.stubtest in the test command).
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, final

from typing_extensions import disjoint_base

from .errors import LeaseLostError
from .verdicts import BatchResult, Record, RecordState, Status

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
MAX_GATHERED_HASHES: int
UNRESOLVED_GEN: int
MAX_KEY_BYTES: int
MAX_INTENT_BYTES: int
MAX_INTENT_DEPTH: int
KEY_PREFIX_BYTES: int
NATIVE_BUILD: str

def reseed_tokens() -> None: ...
def next_token() -> int: ...
def key_bytes(key: object) -> bytes: ...
def bloom_sizing(fp_rate: float) -> tuple[float, int]: ...
def canonical_intent(intent: object, fields: tuple[str, ...] | None = None) -> bytes | None: ...
def decode_record(raw: bytes) -> tuple[Any, ...]: ...
def record_outcome(raw: bytes) -> bytes | None: ...
def record_key(prefix: bytes, gen: int, key: bytes) -> bytes: ...
def split_record_key(lkey: bytes) -> tuple[int, int, bytes]: ...
def bloom_key(prefix: bytes, gen: int) -> bytes: ...
def unresolved_key(prefix: bytes, key: bytes) -> bytes: ...
def split_unresolved_key(ukey: bytes) -> tuple[int, bytes]: ...
def claim_batch(
    space: Space,
    order: list[int],
    keys: list[bytes],
    digests: list[Any],
    now: int,
    lease: int,
    event_times: list[Any] | None,
    claimant: object,
    results: list[Any],
    write: bool,
    txn: Any,
) -> list[int]: ...

def times_us(values: Iterable[object], slow: Callable[[object, str], int]) -> list[int | None]: ...
@final
class Indexes:
    def __new__(cls, order: list[int]) -> Indexes: ...
def complete_batch(
    space: Space,
    order: list[int],
    keys: list[bytes],
    tokens: list[int],
    outcomes: list[bytes],
    now: int,
    results: list[Any],
    txn: Any,
) -> None: ...
def release_batch(
    space: Space, order: list[int], keys: list[bytes], tokens: list[int], now: int, results: list[Any], txn: Any
) -> None: ...

@disjoint_base
class Hasher:
    def __init__(self, secret: bytes) -> None: ...
    def digest(self, data: bytes) -> bytes: ...
    def hash64(self, data: bytes) -> int: ...
    def route(self, ns_prefix: bytes, key: bytes, partitions: int) -> int: ...
    def route_keys(
        self, ns_prefix: bytes, keys: Sequence[Any], partitions: int
    ) -> tuple[list[bytes], dict[int, list[int]]]: ...
    def route_leased(
        self, ns_prefix: bytes, items: Sequence[Any], partitions: int, max_outcome: int = -1,
        namespace: str | None = None,
    ) -> tuple[list[bytes], list[int], list[bytes] | None, dict[int, list[int]]]: ...
    def intent_digest(self, intent: object, fields: tuple[str, ...] | None = None) -> bytes | None: ...
    def intent_digests(
        self, intents: Iterable[object], fields: tuple[str, ...] | None = None
    ) -> list[bytes | None]: ...

LIVE_FIRST_KEYS: int
LIVE_FP_RATE: float
LIVE_PENDING_MAX: int
LIVE_KEEP_MAX: int
LIVE_SCAN_MAX: int

@disjoint_base
class LiveFilter:
    keys: int
    lo: int
    hi: int
    def __init__(self, first_keys: int = 0, lo: int = 0) -> None: ...
    @property
    def nbytes(self) -> int: ...

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
    blooms: dict[int, BloomFilter]
    gens_key: bytes
    bloom_skips: int
    probe_reads: int
    bloom_maybes: int
    live: LiveFilter | None
    live_older: list[LiveFilter]
    live_epoch: int
    live_from: int
    live_top: int
    live_pending: bool
    live_skips: int
    live_seeds: int
    live_rolls: int
    evict_floor: int
    def __init__(
        self,
        records: Any,
        pending: Any,
        meta: Any,
        prefix: bytes,
        gen_len: int,
        oldest: int,
        initial_frontier: int,
        hasher: Hasher,
    ) -> None: ...
    def generation_state(self, txn: Any) -> tuple[int, int]: ...
    def seal(self, txn: Any, gen: int) -> int: ...
    def build_bloom(
        self, txn: Any, gen: int, fp_rate: float, tag: int, max_gathered: int = ..., pause_every: int = ...
    ) -> BloomFilter | None: ...
    def generation(self, now: int) -> int: ...
    def frontier(self, txn: Any) -> int: ...
    def stored_oldest(self, txn: Any) -> int: ...
    def advance_oldest(self, gen: int) -> None: ...
    def evictable_below(self, horizon: int, now: int) -> int: ...
    def evict_step(
        self, txn: Any, horizon: int, now: int, budget: int, pause_every: int = ...
    ) -> tuple[int, int, int]: ...
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

@disjoint_base
class BloomFilter:
    def __init__(self, n_keys: int, fp_rate: float, tag: int = 0) -> None: ...
    def add_hash(self, h: int) -> None: ...
    def maybe_hash(self, h: int) -> bool: ...
    def add_hashes(self, hashes: Any) -> None: ...
    def maybe_hashes(self, hashes: Any) -> bytes: ...
    def add(self, hasher: Hasher, key: bytes) -> None: ...
    def maybe(self, hasher: Hasher, key: bytes) -> bool: ...
    def add_keys(self, hasher: Hasher, keys: Any) -> None: ...
    @staticmethod
    def hasher_tag(hasher: Hasher) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def nblocks(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def tag(self) -> int: ...
    @property
    def expected_fp_rate(self) -> float: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(data: Any, expected_tag: int | None = None) -> BloomFilter: ...

MAX_TOKEN: int

def check_token(value: object) -> int: ...
def outcome_bytes(value: object) -> bytes: ...
def checked_outcome(value: object, max_outcome: int, namespace: str) -> bytes: ...

@disjoint_base
class LogFile:
    def __init__(self, fd: int, map_bytes: int = 0, chunk: int = 1048576) -> None: ...
    @property
    def fd(self) -> int: ...
    @property
    def mapped_writes(self) -> int: ...
    def cut(self, offset: int) -> None: ...
    def prefault(self, offset: int, length: int) -> int: ...
    def recycle(self) -> bool: ...
    def close(self) -> None: ...

@disjoint_base
class Overlay:
    snapshot: Any
    epoch: int
    meta_version: int
    @property
    def serial(self) -> int: ...
    def __init__(self, records: Any, pending: Any, meta: Any, snapshot: Any) -> None: ...
    def get(self, key: bytes, default: Any = None, db: Any = None) -> Any: ...
    def put(
        self, key: bytes, value: bytes, dupdata: bool = False, overwrite: bool = True, append: bool = False,
        db: Any = None,
    ) -> bool: ...
    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool: ...
    def record(self, part: int, seq: int) -> bytes | None: ...
    def log(self, f: LogFile, part: int, seq: int, offset: int) -> int: ...
    def keep(self) -> None: ...
    def rollback(self) -> None: ...
    def changes(self) -> list[tuple[int, bytes, bytes | None]]: ...
    def write_set(
        self,
    ) -> tuple[int, list[tuple[int, list[tuple[bytes, bytes]]]], list[tuple[int, bytes]]]: ...
    def __len__(self) -> int: ...
    def rebase(self, snapshot: Any) -> None: ...
    def absorb(self, newer: Overlay) -> None: ...
    def reset(self, snapshot: Any) -> None: ...

@disjoint_base
class GroupSync:
    def __init__(self, fd: int) -> None: ...
    def appended(self, end: int) -> None: ...
    def wait(self, mark: int) -> bool: ...
    def switch(self, fd: int, base: int) -> None: ...
    def state(self) -> tuple[int, int, int, float]: ...
    def stop(self) -> None: ...

FULL_CHECK_WRITES: int

def bind_window(module_globals: dict[str, Any]) -> None: ...
def lmdb_direct() -> tuple[bool, str]: ...
def set_lmdb_direct(enabled: bool) -> None: ...
def lmdb_write(
    txn: Any, dbs: dict[int, Any], puts: list[tuple[int, list[tuple[bytes, bytes]]]], deletes: list[tuple[int, bytes]]
) -> bool: ...
def lmdb_write_overlay(txn: Any, dbs: dict[int, Any], ov: Overlay) -> int: ...
@disjoint_base
class WindowLock:
    def acquire(self, blocking: bool = True) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...

@disjoint_base
class WindowCore:
    lock: WindowLock
    applying: Any
    failed: BaseException | None
    _broken: bool
    active: bool
    _calls_apply: bool
    overlay: Overlay | None
    _log: LogFile | None
    _journal: Any
    _mirror: LogFile | None
    _mirror_size: int
    _index: int
    _records: int
    _size: int
    logged_bytes: int
    _apply_s: float
    _apply_at: float
    _job: Any
    def run(self, op: Callable[[Any], Any], sync: bool = True) -> Any: ...
    def apply_if_due(self) -> None: ...

BATCH_CLAIM: int
BATCH_COMPLETE: int
BATCH_RELEASE: int
def time_us(value: object, slow: Callable[[object, str], int]) -> int: ...
RECORD_FIELDS: tuple[str, ...]
def bind_record(cls: type[Record], pending: RecordState, unknown: RecordState, completed: RecordState) -> None: ...
def make_record(namespace: str, key: bytes, generation: int, raw: bytes, now_us: int) -> Record: ...
def bind_store(
    batch_cls: type[BatchCore],
    status_by_code: tuple[Any, ...],
    leased_codes: tuple[bool, ...],
    small_bytes: Callable[[object, str, int], bytes],
    lease_us: Callable[[object], int],
    time_us_slow: Callable[[object, str], int],
    max_claimant: int,
    max_event_id: int,
    max_batch: int,
) -> None: ...
@final
class AcceleratedClock:
    @property
    def scale(self) -> float: ...
    @property
    def base(self) -> float: ...
    def __init__(self, scale: float, base: float | None = None) -> None: ...
    def start(self) -> None: ...
    # A type slot, as stubtest sees it: it takes no arguments.
    def __call__(self, *args: object, **kwargs: object) -> float: ...
@disjoint_base
class ClaimResult:
    status: Status
    token: int | None
    retry_after: float | None
    namespace: str
    key: bytes
    _raw: bytes | None
    _record: Record | None
    _gen: int
    _now: int
    def __init__(
        self,
        status: Status,
        token: int | None,
        retry_after: float | None,
        namespace: str,
        key: bytes,
        raw: bytes | None,
        gen: int,
        now_us: int,
    ) -> None: ...
    @classmethod
    def from_record(
        cls,
        status: Status,
        token: int | None,
        retry_after: float | None,
        namespace: str,
        key: bytes,
        record: Record | None,
    ) -> ClaimResult: ...
    @property
    def record(self) -> Record | None: ...
    @property
    def outcome(self) -> bytes | None: ...
    @property
    def holds_lease(self) -> bool: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@disjoint_base
class BatchCore:
    _results: list[ClaimResult | None]
    _statuses: list[Status]
    _tokens: list[int | None]
    _retry: list[float | None]
    _make: Callable[[int], ClaimResult] | None

@disjoint_base
class NamespaceCore:
    config: Any
    spaces: list[Space]
    lease_us: int
    fields: tuple[str, ...] | None
    max_outcome: int
    prefix: bytes

@disjoint_base
class StoreCore:
    _dead: str | None
    _ns: dict[str, Any]
    _hasher: Hasher
    _parts: list[Any]
    _windows: list[Any] | None
    _clock: Callable[[], float]
    _counts: list[int]
    _nparts: int
    def claim(
        self,
        namespace: str,
        key: bytes | str,
        intent: object = None,
        *,
        event_time: float | datetime | None = None,
        event_id: bytes | str | None = None,
        claimant: bytes | str | None = None,
        lease: float | str | None = None,
    ) -> ClaimResult: ...
    def claim_many(
        self,
        namespace: str,
        keys: Sequence[bytes | str],
        intents: Sequence[object] | None = None,
        *,
        event_times: Sequence[float | datetime | None] | None = None,
        claimant: bytes | str | None = None,
    ) -> BatchResult: ...
    def complete(self, namespace: str, key: bytes | str, token: int, outcome: bytes | str = b"") -> Record: ...
    def complete_many(
        self, namespace: str, items: Sequence[tuple[bytes | str, int, bytes | str]]
    ) -> list[LeaseLostError | None]: ...
    def release(self, namespace: str, key: bytes | str, token: int) -> None: ...
    def release_many(self, namespace: str, items: Sequence[tuple[bytes | str, int]]) -> list[LeaseLostError | None]: ...
