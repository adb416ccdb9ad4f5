"""``DedupStore``: the embedded idempotency authority.

A request's path: validate and canonicalise at the edge (here and in
``_native``), route the key to its partition with the store's keyed hash, try
to answer from a read-only snapshot (duplicates, conflicts and in-flight leases
need no write and so no fsync), and otherwise decide again inside the
partition's group-committed write transaction, where the verdict and its record
are committed together.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import functools
import logging
import os
import platform
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from . import _native, checkpoint, effects
from .checkpoint import Checkpointer, CheckpointFile, recover
from .commit import GroupCommitter, StoreCommitter
from .errors import (
    ForkedStoreError,
    InvalidInputError,
    LeaseLostError,
    StoreAlreadyOpenError,
    StoreClosedError,
    StoreFormatError,
    UnknownNamespaceError,
)
from .journal import Journal, clear_other_boots, recovery_lock, replay
from .layout import (
    DEFAULT_MAP_SIZE,
    DURABILITY,
    FORMAT_KEY,
    MAX_PARTITIONS,
    NS_KEY,
    NSID_KEY,
    StoreInfo,
    check_partition_format,
    open_env,
    open_meta,
    partition_dir,
    partition_format,
    same_file_key,
)
from .namespace import (
    DEFAULT_HORIZON,
    DEFAULT_LEASE,
    DEFAULT_MAX_OUTCOME_BYTES,
    MAX_LEASE_S,
    MAX_NAMESPACES,
    MIN_LEASE_S,
    NamespaceConfig,
    build_config,
    check_name,
    generation_length,
)
from .units import format_duration, parse_duration
from .verdicts import LEASED_CODES, STATUS_BY_CODE, BatchResult, Record, Status
from .window import (
    CHECK_S,
    CLOSED,
    STORE_THREAD,
    W_KEY,
    WLOG_DIR,
    Owner,
    Window,
    WindowBusy,
    collect_dead,
    helping,
    settle,
)

F = TypeVar("F", bound=Callable[..., Any])

# The batch calls' per-partition ops: partials of these, positional (a
# partial with keywords costs a keyword parse per call), the txn last.
partial = functools.partial
_claim_batch = _native.claim_batch
_complete_batch = _native.complete_batch
_release_batch = _native.release_batch

MAX_CLAIMANT_BYTES = 128
MAX_EVENT_ID_BYTES = 128
MAX_BATCH = 100_000
MAX_TOKEN = _native.MAX_TOKEN
DEFAULT_EVICTION_RATE = 50_000.0
DEFAULT_EVICTION_BATCH = 500
MAX_EVICTION_RATE = 10_000_000.0
MAX_EVICTION_BATCH = 100_000
#: A background checkpoint at least this often (seconds).
DEFAULT_FLUSH_INTERVAL = 1.0
MIN_FLUSH_INTERVAL_S = 0.001
MAX_FLUSH_INTERVAL_S = 3600.0
#: Between checkpoints, writeback of the data files is started this often
#: (flush mode, and write-behind in either mode; in sync mode also after each
#: group commit's journal fdatasync). As seldom as window.CHECK_S: each
#: wakes the flusher, which costs more than the writeback it starts.
TRICKLE_S = 0.05
#: How long a returned write may wait in this process's
#: write-behind window before it is applied to LMDB (dedupstore/window.py).
#: Each apply writes every LMDB page its keys fall on (copy-on-write), so
#: seldom applies write fewer pages per key: at 18,000 events/s, 50 ms wrote
#: 3.3x fewer bytes than 5 ms, and 200 ms 2.2x fewer than 50 ms, with a
#: quarter to a third less of the store's threads' CPU and no worse p99
#: (docs/benchmarks.md, twenty-third session); once the flusher woke only
#: every 50 ms, 500 ms took the store's threads 0.6 points of a core less
#: than 200 ms and wrote 1.5x fewer bytes, with the same p99 (twenty-fourth
#: session). Longer still saves less (1 s: 0.2 points, 1.2x fewer bytes
#: than 500 ms) and holds more keys in memory (about 2,300 a partition at
#: 500 ms at the reference rate). Another process that wants the partition
#: waits for window.CHECK_S, not for this, and the writer after a crash
#: replays about this much of the log.
DEFAULT_APPLY_INTERVAL = 0.5
MIN_APPLY_INTERVAL_S = 0.0005
MAX_APPLY_INTERVAL_S = 1.0
#: How many nice steps below the thread that opened the store its own
#: threads run (the flusher and the maintenance thread; Linux, where nice is
#: per thread). A caller's thread that wakes while one of them has
#: the CPU then gets it at once, instead of waiting out that thread's time
#: slice: the largest part of the flush-mode p99 at the reference load
#: (docs/benchmarks.md, "The store's threads give way").
DEFAULT_THREAD_NICE = 10
#: The lowest priority there is.
MAX_NICE = 19
#: ``thread_nice`` below every nice level: the store's threads take Linux's
#: SCHED_IDLE policy, and run only on a CPU no other thread wants. A caller
#: that wakes on the CPU one of them has takes it at once, where at a nice
#: level it may wait out the running thread's slice (a millisecond or more):
#: the batch p99 at 50,000 events/s was 1.3-1.4 ms at nice 10 and
#: 0.35-0.52 ms this way (docs/benchmarks.md, twenty-second session). Its price: under other
#: processes' full load the store's own work (applies, eviction, filters,
#: checkpoints) waits for idle time, and a caller that needs the GIL one of
#: those threads holds waits with it.
IDLE = "idle"
#: The time slice the store's own threads ask Linux's scheduler for, in
#: seconds (EEVDF, Linux 6.12 and later: ``sched_setattr``'s
#: ``sched_runtime`` of a SCHED_OTHER thread; 0 leaves the kernel's).
#: A waking thread whose slice is shorter than the running thread's takes
#: the CPU at once (the kernel's PREEMPT_SHORT), where with equal slices it
#: may wait out the running one's (the kernel's base slice: 1.4 ms on the
#: 2-CPU machine of docs/benchmarks.md, a few ms on larger machines). Every
#: other thread keeps the base slice, so a caller that wakes on a CPU one
#: of the store's threads has gets it at once, as with IDLE, while those
#: threads keep their nice level's share of the CPU under load: the batch
#: p99 at 30,000 events/s fell from 1.0-1.6 ms to 0.53-0.61 ms, and the
#: highest rate of batches of 100 from 37,350 to 170,859-209,259 events/s
#: (docs/benchmarks.md, twenty-third session). Well above any base slice;
#: the kernel takes 100 us..100 ms. Ignored with IDLE and off Linux.
DEFAULT_THREAD_SLICE = 0.01
MIN_THREAD_SLICE_S = 0.0001
MAX_THREAD_SLICE_S = 0.1
#: Target false-positive rate of each sealed generation's filter. A new key
#: is tested against every sealed filter of its namespace (eight and more at
#: the default generation length), and each "maybe" is an LMDB read the
#: claim waits for: at 1% a filter, about one new key in eleven was read
#: for nothing in the main job (0.125 reads an event, against 0.075 at
#: 0.1%, of which duplicates and conflicts need about 0.07;
#: docs/benchmarks.md, thirty-sixth session). 0.1% takes 15.6 bits a
#: key in memory, against 9.9 at 1% (``_native.bloom_sizing``).
BLOOM_FP_RATE = 0.001
_native.bloom_sizing(BLOOM_FP_RATE)  # its sizing search done now, not in a refresh
#: Filters the background thread builds per refresh (about one refresh a second).
FILTERS_PER_REFRESH = 8
#: How many sealed generations below the newest a refresh considers.
MAX_FILTER_SCAN = 4096
EVICTION_TICK_S = 0.1
#: While this process inserts records, the background evictor deletes at most
#: EVICTION_PACE times as many per second as it inserts (and never more than
#: eviction_rate): enough to keep up and to work a backlog off, without
#: competing with the claims for the GIL, the writer and the disk
#: (docs/benchmarks.md). Below IDLE_INSERTS_PER_S it runs at eviction_rate.
EVICTION_PACE = 2.0
IDLE_INSERTS_PER_S = 100.0
#: Seconds over which the insert rate is averaged (exponentially).
INSERT_RATE_WINDOW_S = 1.0


def eviction_pace(rate: float, inserts_per_s: float) -> float:
    """Entries per second the background evictor deletes, given its cap
    ``rate`` and the records this process inserts per second."""
    if inserts_per_s < IDLE_INSERTS_PER_S:
        return rate
    return min(rate, EVICTION_PACE * inserts_per_s)

log = logging.getLogger("dedupstore")

# One handle per store directory per process: two LMDB handles on one file in
# one process break LMDB's locking (its docs forbid it), so a second open fails.
_open_lock = threading.Lock()
_open_stores: dict[tuple[int, int], weakref.ref[DedupStore]] = {}
_live: weakref.WeakSet[DedupStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child inherited LMDB handles and locks it must not use (LMDB forbids
    # it); make every use raise instead of corrupting the parent's view.
    for store in list(_live):
        store._dead = "forked"
        for part in store._parts:
            if part.window is not None:
                part.window.forget()  # so that the parent's death frees its log's lock
    _open_stores.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _small_bytes(value: object, what: str, limit: int) -> bytes:
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise InvalidInputError(f"{what} must be bytes or str (1..{limit} bytes); got {type(value).__name__}")
    if not 1 <= len(value) <= limit:
        raise InvalidInputError(f"{what} must be 1..{limit} bytes; got {len(value)} bytes")
    return value


def _time_us(value: object, what: str) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidInputError(f"{what} must be an aware datetime (with tzinfo) or seconds since the epoch")
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be seconds since the epoch or an aware datetime; got {value!r}")
    # _native.time_us and times_us (claim's event_time, claim_many's
    # event_times) apply the same bound to floats and ints themselves and
    # call this for anything else: change both (test_limits holds them
    # together).
    if not -1e11 < value < 1e11:  # NaN fails this too
        raise InvalidInputError(f"{what} must be within +-1e11 seconds of the epoch; got {value!r}")
    return int(value * 1_000_000)


_token = _native.check_token


def check_thread_nice(steps: object) -> None:
    """Refuse a ``thread_nice`` other than 0..MAX_NICE or IDLE, naming both."""
    if steps == IDLE and isinstance(steps, str):
        return
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_NICE:
        raise InvalidInputError(
            f"thread_nice must be an int in 0..{MAX_NICE} (nice steps below the opening thread) or {IDLE!r} "
            f"(SCHED_IDLE); got {steps!r}"
        )


def check_thread_cpus(cpus: object, what: str = "thread_cpus") -> frozenset[int] | None:
    """``cpus`` (a setting named ``what``) as a set of CPU numbers (None:
    not given), refusing anything but a non-empty collection of CPUs this
    process may run on, and any value where threads cannot be pinned (off
    Linux)."""
    if cpus is None:
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise InvalidInputError(f"{what} needs os.sched_setaffinity (Linux); leave it None on this platform")
    if isinstance(cpus, (str, bytes)) or not isinstance(cpus, Iterable):
        raise InvalidInputError(f"{what} must be a collection of CPU numbers, such as {{1}}; got {cpus!r}")
    chosen = set()
    for cpu in cpus:
        if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0:
            raise InvalidInputError(f"{what} must hold CPU numbers (ints of 0 or more); got {cpu!r}")
        chosen.add(cpu)
    if not chosen:
        raise InvalidInputError(f"{what} must name at least one CPU")
    allowed = os.sched_getaffinity(0)
    if not chosen <= allowed:
        raise InvalidInputError(
            f"{what} {sorted(chosen - allowed)} are not among the CPUs this process may run on "
            f"({', '.join(map(str, sorted(allowed)))})"
        )
    return frozenset(chosen)


def _pin(cpus: frozenset[int] | None) -> None:
    """Keep the calling thread on ``cpus`` (None: leave it where it may
    run). A refusal (a sandbox, a CPU gone offline) only costs latency."""
    if cpus is None:
        return
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        log.debug("dedupstore: could not keep thread %d on CPUs %s: %s", threading.get_native_id(), sorted(cpus), exc)


def _nice_target(steps: int | str) -> int | None:
    """The nice value the store's own threads take: the calling (opening)
    thread's plus ``steps``, at most MAX_NICE. None (left alone) for 0 steps
    and for IDLE (_idle_policy's), and off Linux, where
    setpriority(PRIO_PROCESS) of a thread id is not a thread's own."""
    if not steps or steps == IDLE or not sys.platform.startswith("linux"):
        return None
    assert isinstance(steps, int)
    try:
        return min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + steps)
    except OSError:
        return None


def _lower_priority(target: int | None) -> None:
    """Raise the calling thread's nice value to ``target`` (never lower it:
    that takes a privilege). A refusal (a sandbox) only costs latency."""
    if target is None:
        return
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) < target:
            os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError as exc:
        log.debug("dedupstore: could not lower thread %d's priority to nice %d: %s", tid, target, exc)


def check_thread_slice(seconds: object, what: str = "thread_slice") -> float:
    """``thread_slice`` in seconds: 0 (the kernel's own) or
    MIN_THREAD_SLICE_S..MAX_THREAD_SLICE_S, else refused naming ``what``
    and the bounds."""
    value = parse_duration(seconds, what=what, allow_zero=True)
    if value and not MIN_THREAD_SLICE_S <= value <= MAX_THREAD_SLICE_S:
        raise InvalidInputError(
            f"{what} must be 0 (the kernel's own) or {format_duration(MIN_THREAD_SLICE_S)}.."
            f"{format_duration(MAX_THREAD_SLICE_S)}; got {seconds!r}"
        )
    return value


class _SchedAttr(ctypes.Structure):
    # struct sched_attr as of Linux 5.3 (SCHED_ATTR_SIZE_VER1, 56 bytes).
    _fields_ = [
        ("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32), ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64), ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32), ("sched_util_max", ctypes.c_uint32),
    ]


#: sched_setattr and sched_getattr's system call numbers (no C library
#: wrapper before glibc 2.41), on the machines that have them.
_SCHED_CALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}.get(platform.machine()) \
    if sys.platform.startswith("linux") else None


def _sched_attr(tid: int) -> _SchedAttr | None:
    """Thread ``tid``'s sched_attr (its ``sched_runtime`` is its custom time
    slice, 0 where it has none or the kernel predates them), or None where
    it cannot be read."""
    if _SCHED_CALLS is None:
        return None
    attr = _SchedAttr()
    if ctypes.CDLL(None, use_errno=True).syscall(_SCHED_CALLS[1], tid, ctypes.byref(attr), ctypes.sizeof(attr), 0):
        return None
    return attr


def _long_slice(seconds: float) -> None:
    """The calling thread asks for a time slice of ``seconds``
    (DEFAULT_THREAD_SLICE), keeping its policy (SCHED_OTHER only) and nice
    level. A refusal, or a kernel without custom slices, only costs latency."""
    if not seconds or _SCHED_CALLS is None:
        return
    tid = threading.get_native_id()
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return
        nice = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        return
    attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=os.SCHED_OTHER, sched_nice=nice,
                      sched_runtime=int(seconds * 1e9))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SCHED_CALLS[0], tid, ctypes.byref(attr), 0):
        log.debug("dedupstore: could not give thread %d a %g s time slice: %s", tid, seconds,
                  os.strerror(ctypes.get_errno()))


def _idle_policy() -> None:
    """The calling thread takes the SCHED_IDLE policy (thread_nice IDLE;
    Linux). A refusal only costs latency."""
    if not hasattr(os, "SCHED_IDLE"):
        return
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:
        log.debug("dedupstore: could not give thread %d the SCHED_IDLE policy: %s", tid, exc)


def _load_setname() -> Any:
    """libc's pthread_setname_np (Linux's two-argument one), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).pthread_setname_np
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_ulong, ctypes.c_char_p)
    fn.restype = ctypes.c_int
    return fn


_setname = _load_setname()


def _name_os_thread(name: str) -> None:
    """Name the calling thread for the kernel (``ps -L``, ``top -H``,
    ``perf``), where every Python thread is "python": at most 15 bytes."""
    if _setname is not None:
        _setname(threading.get_ident(), name.encode()[:15])  # get_ident() is pthread_self() here


def _put_meta(txn: Any, *, key: bytes, value: bytes, db: Any) -> None:
    txn.put(key, value, db=db)


def _maintenance(part: _Partition, op: Callable[[Any], Any]) -> Any:
    """A maintenance write (an eviction step, a filter), not waited on:
    beside the partition's write-behind window if one is open, so that its
    calls go on meanwhile (Window.beside), else in the group commit."""
    if part.window is not None:
        res = part.window.beside(op)
        if res is not CLOSED:
            return res
    return part.committer.run(op, durable=False)


def _lag_us(txn: Any, part: _Partition, space: _native.Space, cfg: NamespaceConfig, now: int) -> int:
    """How long (us) the oldest generation of ``space`` stored in ``part``
    has been fully past its horizon and still holds a record: 0 while
    eviction keeps up."""
    oldest = space.stored_oldest(txn)
    due_at = (oldest + 1) * cfg.generation_us + int(cfg.horizon * 1_000_000)
    if due_at >= now:
        return 0
    cursor = txn.cursor(db=part.records)
    start = _native.record_key(cfg.prefix, oldest, b"")
    return now - due_at if cursor.set_range(start) and cursor.key().startswith(start) else 0


#: The store's own threads pause every this many keys of a filter build or
#: of an eviction step beside a flush-mode window (as many py-lmdb calls as a call's slice of an apply
#: makes, window.SLICE_KEYS, each handing the GIL over),
#: so that a call waiting for the GIL gets it (dedupstore/_native.pyx, _pause).
PAUSE_KEYS = 32


def _pause_every() -> int:
    return PAUSE_KEYS if helping() else 0


def _beside_calls(part: _Partition) -> bool:
    # A maintenance write goes beside the calls (a flush-mode window), not
    # in a group commit that holds them up (sync mode), where a pause would
    # only make them wait longer.
    return part.window is not None and part.window._calls_apply


def _settled(txn: Any) -> None:
    # A write transaction that writes nothing: its committer has settled
    # another process's write-behind window first (dedupstore/window.py).
    return None


def _batch_op(
    kind: int, space: _native.Space, order: list[int], kbs: list[bytes], a: list[Any], b: list[Any] | None,
    now: int, lease_us: int, ets: list[int | None] | None, cl: bytes | None, results: list[Any],
) -> Callable[[Any], Any]:
    """DedupStore._write_rest's op for one partition: the batch function of
    ``kind`` over its indexes ``order``, taking the transaction."""
    if kind == _native.BATCH_CLAIM:
        return partial(_claim_batch, space, order, kbs, a, now, lease_us, ets, cl, results, True)
    if kind == _native.BATCH_COMPLETE:
        assert b is not None
        return partial(_complete_batch, space, order, kbs, a, b, now, results)
    return partial(_release_batch, space, order, kbs, a, now, results)


def _lease_us(value: object) -> int:
    return int(parse_duration(value, what="lease", minimum=MIN_LEASE_S, maximum=MAX_LEASE_S) * 1_000_000)


class _Partition:
    """One LMDB environment with its own writer lock and group committer."""

    def __init__(
        self, root: Path, index: int, info: StoreInfo, map_size: int, hasher: _native.Hasher,
        journal: Journal | None, trickle: Callable[[], Any] | None = None, apply_s: float = 0.0,
        live_filters: bool = True,
    ) -> None:
        path = partition_dir(root, index)
        if not path.is_dir():
            # Created with the store (inside its creation transaction); missing
            # now means lost, and an empty stand-in would answer NEW for keys
            # it has already seen.
            raise StoreFormatError(f"{path} is missing: this store's partition {index} is gone; refusing to open")
        self.index = index
        self.journal = journal  # the store's, in sync mode
        self.ckpt = CheckpointFile(path)
        try:
            # Under the checkpoint file's lock: the first opener after a
            # restart rolls back to the recorded checkpoint, replays the sync
            # journal and records this boot before anyone else can write.
            with self.ckpt.locked():
                rec = self.ckpt.read()
                restarted = rec is not None and rec.boot != checkpoint.boot_id()
                self.recovered_to = recover(path, self.ckpt)
                self.ckpt.hold_writer()  # before this process's first commit
                self.env = open_env(path, map_size=map_size, max_dbs=4, synced=False)
                try:
                    self.records = self.env.open_db(b"records")
                    self.pending = self.env.open_db(b"pending")
                    self.meta = self.env.open_db(b"meta")
                    self.replayed = 0
                    if restarted:
                        assert rec is not None
                        self.replayed = replay(
                            self.env, {1: self.records, 2: self.pending, 3: self.meta}, root, index, rec.txnid
                        )
                    if self.recovered_to is not None or self.replayed:
                        log.warning(
                            "dedupstore: %s: the machine restarted since this partition's last checkpoint (txn "
                            "%d): rolled back to it, then replayed %d journaled sync-mode transactions; writes "
                            "that were never made durable are gone", path, rec.txnid if rec else 0, self.replayed,
                        )
                    self.dbs = {1: self.records, 2: self.pending, 3: self.meta}
                    self._wdir = root / WLOG_DIR
                    cleanup = None
                    with self.env.begin(write=True) as txn:
                        raw = txn.get(FORMAT_KEY, db=self.meta)
                        if raw is None:
                            txn.put(FORMAT_KEY, partition_format(info, index), db=self.meta)
                        else:
                            check_partition_format(raw, info, index, path)
                        # A process that died with a window open: what
                        # it acknowledged is applied before anyone reads. (A live
                        # one's window stays: it gives it up when we write.)
                        with contextlib.suppress(WindowBusy):
                            cleanup = self._settle(txn, None)
                    if cleanup is not None:
                        cleanup()
                    self.checkpointer = Checkpointer(self.env, path, self.ckpt)
                    self.checkpointer.checkpoint(locked=True)
                    if journal is not None:
                        self.checkpointer.attach(journal, index)
                except lmdb.Error as exc:
                    self.env.close()
                    raise StoreFormatError(f"{path} is not a valid dedupstore partition: {exc}") from None
                except BaseException:
                    self.env.close()
                    raise
        except BaseException:
            self.ckpt.close()
            raise
        #: This process's write-behind window (dedupstore/window.py), applied
        #: every ``apply_s``; in sync mode its calls are journaled.
        self.window = (
            Window(
                self.env, self.dbs, root, index, self.ckpt.other_writers, self.checkpointer.checkpoint,
                journal=journal, apply_s=apply_s, live_filters=live_filters,
            )
            if apply_s > 0 else None
        )
        # sync: each group commit is journaled and the journal fdatasynced
        # before its callers return (dedupstore/journal.py).
        self.committer = GroupCommitter(
            self.env, f"partition {index} ({path})", journal=self.journal, part=index,
            codes={id(self.records): 1, id(self.pending): 2, id(self.meta): 3},
            checkpoint=self.checkpointer.checkpoint, others=self.ckpt.other_writers, trickle=trickle,
            settle=self._settle, window=self.window,
        )
        self.spaces: dict[int, _native.Space] = {}
        self.hasher = hasher

    def _settle(self, txn: Any, mine: str | None) -> Callable[[], None] | None:
        return settle(txn, self.dbs, self._wdir, mine)

    def checkpoint(self, if_changed: bool = False) -> None:
        """Apply the write-behind window, then checkpoint: everything
        returned so far survives an OS crash. ``if_changed``: skip the
        checkpoint when nothing was committed since the last one."""
        if self.window is not None:
            self.window.apply()
        if not if_changed or self.env.info()["last_txnid"] != self.checkpointer.durable_txnid:
            self.checkpointer.checkpoint()

    def reader(self) -> Any:
        """A read transaction that sees every write returned so far, by this
        process or another: this process's window is applied first (a scan
        cannot read through it), and while another process's window is open
        (or a dead one's is not yet taken over) a write transaction waits it
        out first, which takes up to window.CHECK_S (50 ms)."""
        window = self.window
        if window is not None:
            window.apply()
        txn = self.env.begin()
        raw = txn.get(W_KEY, db=self.meta)
        if raw is not None and (window is None or Owner.unpack(raw).name != window.name):
            txn.abort()
            self.committer.run(_settled, durable=False)
            txn = self.env.begin()
        return txn

    def close(self) -> None:
        """Give up the window, checkpoint, drop the pin, close the environment."""
        try:
            if self.window is not None:
                try:
                    self.window.close()
                finally:
                    self.window.forget()  # a failed close keeps the log for the next open
            self.checkpointer.checkpoint()
        finally:
            self.checkpointer.release()
            self.env.close()
            self.ckpt.close()

    def space(self, ns: NamespaceConfig) -> _native.Space:
        sp = self.spaces.get(ns.id)
        if sp is None:
            with self.env.begin() as txn:
                raw = txn.get(b"O" + ns.prefix, db=self.meta)
            oldest = int.from_bytes(raw, "big") if raw else int(ns.created * 1_000_000) // ns.generation_us
            sp = _native.Space(
                self.records, self.pending, self.meta, ns.prefix, ns.generation_us, oldest, ns.initial_frontier_us,
                self.hasher,
            )
            self.spaces[ns.id] = sp
        return sp


class _Namespace(_native.NamespaceCore):
    """A registered namespace as this handle uses it: config plus one Space per partition."""

    __slots__ = ()

    def __init__(self, config: NamespaceConfig, parts: Sequence[_Partition]) -> None:
        self.config = config
        self.spaces = [p.space(config) for p in parts]
        self.lease_us = int(config.lease * 1_000_000)
        self.fields = config.intent_fields
        self.max_outcome = config.max_outcome_bytes
        self.prefix = config.prefix  # computed once: every request routes with it


class DedupStore(_native.StoreCore):
    """An embedded, durable idempotency authority (see SPEC and docs/guarantees.md).

    Open with :meth:`open`; thread-safe; several processes may open the same
    directory. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, *_: object, **__: object) -> None:
        raise TypeError("use DedupStore.open(path, ...)")

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        partitions: int | None = None,
        durability: str = "sync",
        bloom: bool = True,
        create: bool = True,
        clock: Callable[[], float] | None = None,
        map_size: int = DEFAULT_MAP_SIZE,
        eviction_rate: float = DEFAULT_EVICTION_RATE,
        eviction_batch: int = DEFAULT_EVICTION_BATCH,
        flush_interval: float | str = DEFAULT_FLUSH_INTERVAL,
        apply_interval: float | str = DEFAULT_APPLY_INTERVAL,
        thread_nice: int | str = DEFAULT_THREAD_NICE,
        thread_cpus: Iterable[int] | None = None,
        thread_slice: float | str = DEFAULT_THREAD_SLICE,
    ) -> DedupStore:
        """Open (or create) the store at ``path``.

        ``partitions`` is fixed when the store is created (default 4);
        ``durability`` is ``"sync"`` or ``"flush"`` (docs/guarantees.md);
        ``clock`` returns seconds since the epoch (default ``time.time``);
        ``map_size`` is the most bytes one partition's file may grow to;
        ``eviction_rate`` (entries per second; 0 turns the background thread
        off, leaving eviction to :meth:`evict` and the Bloom prefilter's
        upkeep to :meth:`refresh_prefilter`) and ``eviction_batch`` (entries
        per transaction) bound how fast records past their horizon are removed
        (while this handle inserts 100 records a second or more, the thread
        deletes at most twice as many as it inserts); ``bloom`` keeps Bloom
        filters of sealed generations and, while a write-behind window is
        open, of the keys written since (docs/guarantees.md, "Filters"), which
        spare the LMDB reads of keys they rule out;
        ``flush_interval`` (seconds or a duration string) is how often a
        background thread checkpoints: in ``flush`` mode the most an OS crash
        can take, in ``sync`` mode how much journal a restart may replay
        (docs/guarantees.md); ``apply_interval`` (0 turns write-behind
        off; default 500 ms) is how often this process's write-behind window
        is applied to LMDB while it is a partition's only writer; another
        process's first write or read of that partition waits up to 50 ms
        for the window to be given up, whatever the interval (docs/guarantees.md);
        ``thread_nice`` (0..19, default 10) is how many nice steps below the
        opening thread the store's own threads run on Linux, so that the
        callers' threads get a CPU first (0: the same priority; ``"idle"``:
        the SCHED_IDLE policy, below every nice level, for the lowest
        latency where the machine has idle CPU time (see :data:`IDLE` for
        its price); elsewhere ignored); ``ps -L`` and ``top -H`` show them as ``ds-flush`` and
        ``ds-maintain``; ``thread_cpus`` (Linux; default None: wherever the
        opening thread may run) are the CPUs they are kept on, for a
        deployment that keeps them off its consumers' CPUs (a few CPU
        numbers this process may run on, such as ``{1}``);
        ``thread_slice`` (default 10 ms; 0 leaves the kernel's; Linux 6.12
        and later, else ignored, as with ``"idle"``) is the time slice they
        ask for: longer than every other thread's, so that a caller that
        wakes where one of them runs takes the CPU at once (see
        :data:`DEFAULT_THREAD_SLICE`).
        """
        if durability not in DURABILITY:
            raise InvalidInputError(f"durability must be one of {sorted(DURABILITY)}; got {durability!r}")
        if partitions is not None and (
            isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS
        ):
            raise InvalidInputError(f"partitions must be an int in 1..{MAX_PARTITIONS}; got {partitions!r}")
        if isinstance(map_size, bool) or not isinstance(map_size, int) or map_size < 1 << 20:
            raise InvalidInputError(f"map_size must be an int of at least 1 MiB; got {map_size!r}")
        if isinstance(eviction_rate, bool) or not isinstance(eviction_rate, (int, float)) or not (
            0 <= eviction_rate <= MAX_EVICTION_RATE
        ):
            raise InvalidInputError(f"eviction_rate must be 0..{MAX_EVICTION_RATE:g} entries/s; got {eviction_rate!r}")
        if isinstance(eviction_batch, bool) or not isinstance(eviction_batch, int) or not (
            1 <= eviction_batch <= MAX_EVICTION_BATCH
        ):
            raise InvalidInputError(
                f"eviction_batch must be an int in 1..{MAX_EVICTION_BATCH} entries per transaction; "
                f"got {eviction_batch!r}"
            )
        check_thread_nice(thread_nice)
        cpus = check_thread_cpus(thread_cpus)
        slice_s = check_thread_slice(thread_slice)
        interval = parse_duration(
            flush_interval, what="flush_interval", minimum=MIN_FLUSH_INTERVAL_S, maximum=MAX_FLUSH_INTERVAL_S
        )
        apply_s = 0.0
        if apply_interval != 0:
            apply_s = parse_duration(
                apply_interval, what="apply_interval", minimum=MIN_APPLY_INTERVAL_S, maximum=MAX_APPLY_INTERVAL_S
            )
        clock = clock or time.time
        root = Path(path)
        if create:
            root.mkdir(parents=True, exist_ok=True)
        elif not root.is_dir():
            raise StoreFormatError(f"{root} does not exist and create=False")
        ident = same_file_key(root)
        self = _native.StoreCore.__new__(cls)
        with _open_lock:
            other = _open_stores.get(ident)
            if other is not None and other() is not None:
                raise StoreAlreadyOpenError(
                    f"{root} is already open in this process; share that DedupStore handle (it is thread-safe) "
                    f"or close it first"
                )
            _open_stores[ident] = weakref.ref(self)
        try:
            self._init(root, ident, partitions, durability, bloom, clock, map_size, apply_s)
            self._nice = _nice_target(thread_nice)
            self._idle = thread_nice == IDLE
            self._slice = slice_s
            self._cpus = cpus
            self._start_evictor(float(eviction_rate), eviction_batch)
            self._start_flusher(interval, apply_s)
        except BaseException:
            with _open_lock:
                _open_stores.pop(ident, None)
            raise
        return self

    def _init(
        self, root: Path, ident: tuple[int, int], partitions: int | None, durability: str, bloom: bool,
        clock: Callable[[], float], map_size: int, apply_s: float,
    ) -> None:
        self._dead: str | None = None
        self._root = root
        self._ident = ident
        self._clock = clock
        self._durability = durability
        self._bloom = bloom
        self._meta, self._info = open_meta(root, create=True, partitions=partitions, now=clock())
        self._hasher = _native.Hasher(self._info.secret)
        self._parts: list[_Partition] = []
        self._journal: Journal | None = None
        #: Set after a journal fdatasync: the flusher thread starts the data
        #: files' writeback (see _flush_every).
        self._trickle_due = threading.Event()
        try:
            # One step to any other opener: after a restart, every partition
            # is rolled back and replayed, then the previous boot's journal
            # segments are deleted (their txn ids mean other transactions now).
            boot = checkpoint.boot_id()
            with recovery_lock(root):
                if durability == "sync":
                    self._journal = Journal(root, boot)
                for i in range(self._info.partitions):
                    self._parts.append(
                        _Partition(
                            root, i, self._info, map_size, self._hasher, self._journal, self._trickle_due.set, apply_s,
                            live_filters=bloom,
                        )
                    )
                clear_other_boots(root, boot)
                collect_dead(root, self._window_named)
        except BaseException:
            for p in self._parts:
                p.close()
            if self._journal is not None:
                self._journal.close()  # nothing was journaled yet
            self._meta.close()
            raise
        self._nparts = len(self._parts)
        #: flush mode: each partition's write-behind window (None: it has
        #: none), for the batch calls' windowed path in C (StoreCore._write_batch).
        self._windows: list[Window | None] | None = (
            [p.window for p in self._parts] if self._journal is None else None
        )
        #: sync mode: single-key writes to any partition share one leader and
        #: one journal fdatasync (claim_many does so per call already).
        self._committer: StoreCommitter | None = None
        if self._journal is not None and self._nparts > 1:
            self._committer = StoreCommitter(self._journal, self._trickle_due.set)
        self._bloom_tag = _native.BloomFilter.hasher_tag(self._hasher)
        self._ns: dict[str, _Namespace] = {}
        self._ns_lock = threading.Lock()
        #: evict() runs in one thread at a time: each step sets its partition's
        #: Space.evict_floor for the claims that run beside its transaction.
        self._evict_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        #: The nice value the store's own threads take (_lower_priority),
        #: or whether they take SCHED_IDLE (_idle_policy).
        self._nice: int | None = None
        self._idle = False
        #: The time slice they ask for (_long_slice; 0: the kernel's).
        self._slice = 0.0
        #: The CPUs they are kept on (_pin; None: anywhere).
        self._cpus: frozenset[int] | None = None
        self._evict_batch = DEFAULT_EVICTION_BATCH
        self._evictor: threading.Thread | None = None
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid = os.getpid()
        _live.add(self)

    def _window_named(self, index: int) -> str | None:
        # The segment partition ``index``'s W names, if any (for collect_dead).
        part = self._parts[index] if index < len(self._parts) else None
        if part is None:
            return None
        with part.env.begin() as txn:
            raw = txn.get(W_KEY, db=part.meta)
        return None if raw is None else Owner.unpack(raw).name

    @property
    def path(self) -> Path:
        return self._root

    @property
    def partitions(self) -> int:
        return self._nparts

    @property
    def durability(self) -> str:
        return self._durability

    def __enter__(self) -> DedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = self._dead or "open"
        return f"<DedupStore {str(self._root)!r} partitions={self._nparts} durability={self._durability} {state}>"

    def _check(self) -> None:
        if self._dead is not None:
            if self._dead == "forked":
                raise ForkedStoreError(
                    f"this DedupStore was opened in process {self._pid} and used after fork(): LMDB handles "
                    f"do not survive fork. Open the store in each worker process instead (a child cannot reopen "
                    f"a store its parent had open when it forked: start workers with the 'spawn' method, or "
                    f"fork before opening)"
                )
            raise StoreClosedError("the store is closed")

    def close(self) -> None:
        """Close the store (idempotent). In a forked child this only drops the handle."""
        if self._dead == "closed":
            return
        forked = self._dead == "forked"
        self._stop.set()
        self._trickle_due.set()  # wakes the sync-mode flusher
        for thread in (self._evictor, self._flusher):
            if thread is not None and not forked and thread is not threading.current_thread():
                thread.join()
        self._dead = "closed"
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        errors = []
        if not forked:
            # Closing LMDB in a forked child would release the parent's locks.
            # An eviction a caller's thread is making finishes first: its
            # deletes may be LMDB's own calls, which py-lmdb's close does not
            # wait for (an apply's are under the window's lock, which the
            # partition's close takes).
            with self._evict_lock:
                for p in self._parts:
                    try:
                        p.close()  # a last checkpoint: everything returned so far is durable
                    except Exception as exc:
                        errors.append(exc)
            if self._journal is not None:
                # Every partition checkpointed: the journal is covered. If one
                # failed, its segments stay for a later open to replay or retire.
                self._journal.close(delete=not errors)
            self._meta.close()
        with _open_lock:
            ref = _open_stores.get(self._ident)
            if ref is not None and ref() is self:
                del _open_stores[self._ident]
        _live.discard(self)
        if errors:
            raise errors[0]

    def flush(self) -> None:
        """Make every write returned so far durable: a checkpoint of every
        partition (docs/guarantees.md). A background thread also does this
        every ``flush_interval``. In ``sync`` mode every write is durable when
        it returns already; a checkpoint only folds the journal into the data
        file, so that a restart has less to replay."""
        self._check()
        self._checkpoint_all()

    def _checkpoint_all(self) -> None:
        parts = self._parts
        if len(parts) == 1:
            parts[0].checkpoint()
        else:
            # Each partition's checkpoint waits on its own fsyncs with the GIL
            # released; running them side by side overlaps those waits.
            for fut in [self._executor().submit(p.checkpoint) for p in parts]:
                fut.result()

    def _start_flusher(self, interval: float, apply_s: float) -> None:
        self._flusher = threading.Thread(
            target=self._flush_every, args=(interval, apply_s), name=f"dedupstore-flush:{self._root}",
            daemon=True,
        )
        self._flusher.start()

    def _flush_every(self, interval: float, apply_s: float) -> None:
        # Bounds what an OS crash can take in flush mode, and how long a pin
        # keeps LMDB from reusing freed pages (so how far the file can grow).
        # Between checkpoints it starts writeback of what commits wrote, so
        # that no checkpoint meets a burst: in flush mode every TRICKLE_S, in
        # sync mode also when a journal fdatasync of a group commit has just
        # returned (the committer sets _trickle_due), so that the writeback
        # overlaps the callers' next work rather than their next fdatasync,
        # and costs them no CPU. With write-behind it also ticks every
        # window.CHECK_S (or apply_interval, if shorter): each partition's
        # window is given up if another process wants to write, else applied
        # if it is due (Window.tick).
        STORE_THREAD.own = True
        self._as_own_thread()
        _name_os_thread("ds-flush")
        windows = [p.window for p in self._parts if p.window is not None]
        synced = self._journal is not None
        check_s = min(apply_s, CHECK_S)
        tick = min(interval, TRICKLE_S, check_s) if windows else min(interval, TRICKLE_S)
        next_checkpoint = time.monotonic() + interval
        next_trickle = time.monotonic() + TRICKLE_S
        next_check = time.monotonic() + check_s
        while True:
            if synced:
                wait = max(0.0, next_checkpoint - time.monotonic())
                if self._trickle_due.wait(min(wait, tick) if windows else wait):
                    self._trickle_due.clear()
                    next_trickle = 0.0
            else:
                self._stop.wait(tick)
            if self._stop.is_set():
                return
            try:
                now = time.monotonic()
                if windows and now >= next_check:
                    # On its own schedule: a wake-up for a trickle (sync mode,
                    # after a group commit's fdatasync) is no reason to apply,
                    # and applying at each made many more, smaller transactions.
                    next_check = now + check_s
                    for w in windows:
                        w.tick()
                    now = time.monotonic()
                if now < next_checkpoint:
                    if now >= next_trickle:
                        next_trickle = now + TRICKLE_S
                        for p in self._parts:
                            p.checkpointer.trickle()
                    continue
                next_checkpoint = now + interval
                for p in self._parts:
                    p.checkpoint(if_changed=True)
            except Exception:
                if self._dead is not None:
                    return
                log.exception("dedupstore: background checkpoint failed; retrying in %.3g s", interval)

    def _as_own_thread(self) -> None:
        """The calling thread, one of the store's own or doing the work of
        one (the load generator's filter refresher), takes their priority
        (``thread_nice``), time slice (``thread_slice``) and CPUs
        (``thread_cpus``)."""
        _lower_priority(self._nice)
        if self._idle:
            _idle_policy()
        else:
            _long_slice(self._slice)
        _pin(self._cpus)

    def now(self) -> float:
        """The store clock, in seconds since the epoch."""
        return float(self._clock())

    def _now_us(self) -> int:
        return int(self._clock() * 1_000_000)

    # --------------------------------------------------------------- namespaces

    def ensure_namespace(
        self,
        name: str,
        horizon: object = DEFAULT_HORIZON,
        lease: object = DEFAULT_LEASE,
        *,
        max_outcome_bytes: int = DEFAULT_MAX_OUTCOME_BYTES,
        intent_fields: Iterable[str] | None = None,
        replay_windows: Mapping[str, object] | None = None,
        empty_history: bool = False,
        allow_short_horizon: bool = False,
    ) -> NamespaceConfig:
        """Register ``name`` (or update its config) and return the persisted config.

        A replay window longer than ``horizon`` is refused with the figures
        unless ``allow_short_horizon=True`` (then it warns, and the choice is
        recorded). ``intent_fields`` and ``empty_history`` are fixed at
        creation: changing them would change the verdicts of records already
        stored.
        """
        self._check()
        fields = build_config(
            name,
            horizon=horizon,
            lease=lease,
            max_outcome_bytes=max_outcome_bytes,
            intent_fields=intent_fields,
            replay_windows=dict(replay_windows) if replay_windows else None,
            empty_history=empty_history,
            allow_short_horizon=allow_short_horizon,
        )
        key = NS_KEY + name.encode()
        with self._ns_lock, self._meta.begin(write=True) as txn:
            raw = txn.get(key)
            if raw is None:
                cursor = txn.cursor()
                next_id = 1
                if cursor.set_range(NSID_KEY) and cursor.key().startswith(NSID_KEY):
                    cursor.last()
                    next_id = int.from_bytes(cursor.key()[len(NSID_KEY):], "big") + 1
                if next_id > MAX_NAMESPACES:
                    raise InvalidInputError(f"a store holds at most {MAX_NAMESPACES} namespaces")
                config = NamespaceConfig(
                    id=next_id, created=self.now(), generation_us=generation_length(fields["horizon"]), **fields
                )
                txn.put(NSID_KEY + next_id.to_bytes(2, "big"), name.encode())
            else:
                old = NamespaceConfig.from_json(raw)
                for fixed in ("intent_fields", "empty_history"):
                    if fields[fixed] != getattr(old, fixed):
                        raise InvalidInputError(
                            f"namespace {name!r}: {fixed} is fixed at creation ({getattr(old, fixed)!r}); "
                            f"changing it would change the verdicts of stored records. Use a new namespace"
                        )
                config = NamespaceConfig(
                    id=old.id, created=old.created, generation_us=old.generation_us, **fields
                )
            if raw != config.to_json():
                txn.put(key, config.to_json())
        self._ns.pop(name, None)
        return config

    def namespaces(self) -> dict[str, NamespaceConfig]:
        """Every registered namespace with its persisted config."""
        self._check()
        out = {}
        with self._meta.begin() as txn:
            cursor = txn.cursor()
            if cursor.set_range(NS_KEY):
                for k, v in cursor:
                    if not k.startswith(NS_KEY):
                        break
                    out[k[len(NS_KEY):].decode()] = NamespaceConfig.from_json(v)
        return out

    def _live_namespace(self, name: str) -> _Namespace:
        """:meth:`_check`, then :meth:`_namespace`: in one call on the common
        path (an open store, a namespace already looked up)."""
        ns = self._ns.get(name)
        if ns is None or self._dead is not None:
            self._check()
            ns = self._namespace(name)
        return ns

    def _namespace(self, name: str) -> _Namespace:
        ns = self._ns.get(name)
        if ns is not None:
            return ns
        check_name(name)
        with self._meta.begin() as txn:
            raw = txn.get(NS_KEY + name.encode())
        if raw is None:
            raise UnknownNamespaceError(f"namespace {name!r} is not registered; call ensure_namespace({name!r}) first")
        ns = _Namespace(NamespaceConfig.from_json(raw), self._parts)
        self._ns[name] = ns
        return ns

    # ------------------------------------------------------------------- claims
    #
    # claim, claim_many, complete, complete_many, release and release_many
    # are StoreCore's (dedupstore/_score.pxi); what they hand back to Python
    # is here: _live_namespace, _unwindowed, _write_rest, _lease_error(s).

    def _unwindowed(
        self, kind: int, part: _Partition, space: Any, kb: bytes, a: Any, b: Any, now: int, lease_us: int, et: int,
        cl: bytes | None, eid: bytes | None,
    ) -> Any:
        """One key's op (StoreCore's _one) in a partition whose window could
        not take the call, or that has none: a claim (``a`` the digest) with
        a read-only pass first (a duplicate commits nothing), a completion
        (``a`` the token, ``b`` the outcome) or a release (``a`` the token),
        each written in the partition's group commit."""
        if kind == _native.BATCH_CLAIM:
            with part.reader() as txn:
                res = space.claim(txn, kb, a, now, lease_us, et, cl, eid, False)
            if res is None:
                res = self._commit(part, lambda txn: space.claim(txn, kb, a, now, lease_us, et, cl, eid, True))
            return res
        if kind == _native.BATCH_COMPLETE:
            return self._commit(part, lambda txn: space.complete(txn, kb, a, b, now))
        return self._commit(part, lambda txn: space.release(txn, kb, a, now))

    def _commit(self, part: _Partition, op: Callable[[Any], Any]) -> Any:
        """Run a single-key durable write op in ``part``'s group commit (in
        sync mode through the store-wide one, which shares the fdatasync)."""
        if part.window is not None:
            res = part.window.run(op)
            if res is not CLOSED:
                return res
        if self._committer is None:
            return part.committer.run(op)
        return self._committer.run_in(part.committer, op)

    def _write_rest(
        self, kind: int, ns: _Namespace, groups: dict[int, list[int]], left: list[int], first: BaseException | None,
        kbs: list[bytes], a: list[Any], b: list[Any] | None, now: int, lease_us: int, ets: list[int | None] | None,
        cl: bytes | None, results: list[Any],
    ) -> None:
        """What StoreCore's _write_batch leaves of a batch call: the writes
        (``kind`` _native.BATCH_*: claim_batch with ``a`` the digests,
        complete_batch with ``a`` the tokens and ``b`` the outcomes, or
        release_batch with ``a`` the tokens) of the partitions ``left`` of
        ``groups`` by _write_partitions, then the first error (``first``, one
        of the windowed partitions', else theirs) raised."""
        if left:
            args = (kbs, a, b, now, lease_us, ets, cl, results)
            try:
                self._write_partitions(
                    [(self._parts[p], _batch_op(kind, ns.spaces[p], groups[p], *args)) for p in left]
                )
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first

    def _write_partitions(self, writes: Sequence[tuple[_Partition, Callable[[Any], Any]]]) -> None:
        """Run one write op per partition, each in that partition's group
        commit, in the caller's thread. A commit costs no fsync (flush) or a
        share of one journal fdatasync (sync): the partitions are committed
        one after another, then the store's journal is fdatasynced once for
        all of them. Handing partitions to threads costs more in wake-ups and
        GIL hand-offs than it overlaps (docs/benchmarks.md). Every partition
        is written even if one fails; the first error is raised."""
        if len(writes) == 1:  # the common case of a small batch: one partition
            part, op = writes[0]
            if part.window is None or part.window.run(op) is CLOSED:
                part.committer.run(op)
            return
        first: BaseException | None = None
        journal = self._journal
        marks = []
        behind = False  # a sync-mode window took a write: the journal is synced below
        for part, op in writes:
            try:
                if part.window is not None and part.window.run(op, sync=journal is None) is not CLOSED:
                    behind = behind or journal is not None
                    continue
                if journal is None:
                    part.committer.run(op)
                else:
                    _, mark = part.committer.run_deferred(op)
                    if mark is not None:
                        marks.append(mark)
            except BaseException as exc:
                first = first or exc
        # Only commits wrote the data files (a window's writes reach them at
        # its applies, whose writeback the flusher starts every TRICKLE_S).
        committed = bool(marks)
        if behind:
            assert journal is not None
            with journal.lock:
                marks.append(journal.mark())
        if marks:
            assert journal is not None
            try:
                if journal.sync(max(marks)) and committed:
                    self._trickle_due.set()  # as GroupCommitter does after its own fdatasync
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._ns_lock:
                if self._pool is None:
                    # Only flush() uses it: its threads, spawned by the first
                    # caller's, keep that thread's priority.
                    self._pool = ThreadPoolExecutor(self._nparts, thread_name_prefix="dedupstore-commit")
        return self._pool

    def _leased_op(self, namespace: str, key: bytes | str, token: object) -> tuple[_Namespace, bytes, int, _Partition]:
        ns = self._live_namespace(namespace)
        kb = _native.key_bytes(key)
        tok = _token(token)
        pidx = self._hasher.route(ns.prefix, kb, self._nparts)
        return ns, kb, tok, self._parts[pidx]

    @classmethod
    def _lease_errors(
        cls, namespace: str, kbs: list[bytes], toks: list[int], codes: list[int]
    ) -> list[LeaseLostError | None]:
        errs: list[LeaseLostError | None] = [None] * len(codes)
        for i, rc in enumerate(codes):
            if rc != _native.OP_APPLY and rc != _native.OP_NOOP:
                errs[i] = cls._lease_error(namespace, kbs[i], toks[i], rc)
        return errs

    @staticmethod
    def _lease_error(namespace: str, kb: bytes, tok: int, rc: int) -> LeaseLostError | None:
        if rc == _native.OP_LEASE_LOST:
            return LeaseLostError(f"{namespace}/{kb!r}: token {tok} does not hold the lease; nothing was changed")
        if rc == _native.OP_OUTCOME_DIFFERS:
            return LeaseLostError(
                f"{namespace}/{kb!r}: already completed with token {tok} and a different outcome; nothing was changed"
            )
        return None

    def renew(self, namespace: str, key: bytes | str, token: int, lease: float | str | None = None) -> Record:
        """Extend the lease to ``lease`` (default: the namespace's) from now."""
        ns, kb, tok, part = self._leased_op(namespace, key, token)
        lease_us = ns.lease_us if lease is None else _lease_us(lease)
        space = ns.spaces[part.index]
        now = self._now_us()
        rc, raw, gen = self._commit(part, lambda txn: space.renew(txn, kb, tok, now, lease_us))
        err = self._lease_error(namespace, kb, tok, rc)
        if err is not None:
            raise err
        return Record.from_raw(namespace, kb, gen, raw, now)

    # ------------------------------------------------------------------ reading

    def lookup(self, namespace: str, key: bytes | str) -> Record | None:
        """The stored record for ``key``, or None."""
        ns = self._live_namespace(namespace)
        kb = _native.key_bytes(key)
        pidx = self._hasher.route(ns.prefix, kb, self._nparts)
        now = self._now_us()
        part = self._parts[pidx]
        space = ns.spaces[pidx]
        hit: Any = CLOSED if part.window is None else part.window.read(lambda ov: space.lookup(ov, kb, now))
        if hit is CLOSED:
            with part.reader() as txn:
                hit = space.lookup(txn, kb, now)
        if hit is None:
            return None
        return Record.from_raw(namespace, kb, hit[0], hit[1], now)

    def unresolved(self, namespace: str, limit: int | None = None) -> list[Record]:
        """Records in PENDING or UNKNOWN state (oldest first), for reconciliation."""
        ns = self._live_namespace(namespace)
        prefix = ns.prefix
        now = self._now_us()
        out: list[Record] = []
        for part in self._parts:
            with part.reader() as txn:
                cursor = txn.cursor(db=part.pending)
                if not cursor.set_range(prefix):
                    continue
                for k, raw in cursor:
                    if not k.startswith(prefix):
                        break
                    out.append(Record.from_raw(namespace, k[2:], _native.UNRESOLVED_GEN, raw, now))
        out.sort(key=lambda r: r.first_seen)
        return out if limit is None else out[:limit]

    def stats(self) -> dict[str, Any]:
        """Figures for operators: verdicts, commits, storage and per-namespace state."""
        self._check()
        counts = self._counts  # one copy, taken at one moment
        verdicts = {s.name: 0 for s in Status}
        for code, n in enumerate(counts[: len(STATUS_BY_CODE)]):
            if code:
                verdicts[STATUS_BY_CODE[code].name] += n
        other, same = counts[-2:]
        parts = []
        total_bytes = 0
        for p in self._parts:
            info = p.env.info()
            st = p.env.stat()
            with p.reader() as txn:
                pending = txn.stat(p.pending)["entries"]  # unresolved records live apart
                records = txn.stat(p.records)["entries"] + pending
            size = (info["last_pgno"] + 1) * st["psize"]
            total_bytes += size
            parts.append(
                {
                    "partition": p.index,
                    "records": records,
                    "pending": pending,
                    "bytes_used": size,
                    "commits": p.committer.commits,
                    "ops_committed": p.committer.ops,
                    "checkpoints": p.checkpointer.count,
                    "durable_txnid": p.checkpointer.durable_txnid,
                    "write_behind": None if p.window is None else p.window.stats(),
                }
            )
        namespaces = {}
        now = self._now_us()
        for name, cfg in self.namespaces().items():
            namespaces[name] = {
                **cfg.describe(),
                **self._eviction_stats(self._namespace(name), cfg, now),
                "unresolved": self._count_pending(cfg.prefix),
            }
        return {
            "path": str(self._root),
            "format_version": self._info.format_version,
            "partitions": self._nparts,
            "durability": self._durability,
            "verdicts": verdicts,
            "duplicates_same_event": same,
            "repeats_other_event": other,
            "bytes_used": total_bytes,
            "partition_stats": parts,
            # sync mode: records appended to this process's journal, the
            # fdatasyncs that made them durable (shared by partitions and
            # callers), and the time they took, summed
            "journal_appends": self._journal.appends if self._journal is not None else 0,
            "journal_syncs": self._journal.syncs if self._journal is not None else 0,
            "journal_sync_seconds": self._journal.sync_seconds if self._journal is not None else 0.0,
            "namespaces": namespaces,
        }

    def _eviction_stats(self, ns: _Namespace, cfg: NamespaceConfig, now: int) -> dict[str, Any]:
        frontier = 0
        evicted = 0
        lag_us = 0
        for part, space in zip(self._parts, ns.spaces, strict=True):
            with part.reader() as txn:
                frontier = max(frontier, space.frontier(txn))
                evicted += space.evicted_total(txn)
                lag_us = max(lag_us, _lag_us(txn, part, space, cfg, now))
        # The newest live filters and those kept for past generations.
        live = [lf for sp in ns.spaces if sp.live is not None for lf in [sp.live, *sp.live_older]]
        return {
            "frontier": frontier / 1e6,
            "evicted": evicted,
            "prefilter": {
                "filters": sum(len(sp.blooms) for sp in ns.spaces),
                # What the sealed filters take in memory (their bit arrays;
                # each dict copied at once, as the refresh thread adds to it).
                "bytes": sum(bf.nbytes for sp in ns.spaces for bf in list(sp.blooms.values())),
                "probes_skipped": sum(sp.bloom_skips for sp in ns.spaces),
                "probes_confirmed": sum(sp.bloom_maybes for sp in ns.spaces),
                # Generations read in LMDB: the confirmations, and every
                # generation no filter answers for (not yet sealed and
                # filtered, and not the live filter's).
                "probes_read": sum(sp.probe_reads for sp in ns.spaces),
                # The live filters of the write-behind windows (docs/guarantees.md,
                # "Filters"): LMDB reads they spared, keys and bytes they hold.
                "live_reads_skipped": sum(sp.live_skips for sp in ns.spaces),
                "live_keys": sum(lf.keys for lf in live),
                "live_bytes": sum(lf.nbytes for lf in live),
            },
            # How long the oldest generation has been fully past its horizon
            # and still present: 0 while eviction keeps up.
            "eviction_lag_seconds": lag_us / 1e6,
        }

    def _eviction_lag(self, namespace: str) -> float:
        """stats()'s ``eviction_lag_seconds`` of ``namespace``, read from
        LMDB as it stands: as of this process's windows' last apply (at most
        an apply interval ago; eviction commits beside them), in a few
        microseconds a partition, where stats(), which applies them first,
        takes milliseconds (the load generator samples it every second, in
        its consumer's thread)."""
        self._check()
        cfg = self.namespaces()[namespace]
        now = self._now_us()
        lag_us = 0
        for part, space in zip(self._parts, self._namespace(namespace).spaces, strict=True):
            with part.env.begin() as txn:
                lag_us = max(lag_us, _lag_us(txn, part, space, cfg, now))
        return lag_us / 1e6

    def _count_pending(self, prefix: bytes) -> int:
        n = 0
        for p in self._parts:
            with p.reader() as txn:
                cursor = txn.cursor(db=p.pending)
                if cursor.set_range(prefix):
                    for k in cursor.iternext(keys=True, values=False):
                        if not k.startswith(prefix):
                            break
                        n += 1
        return n

    # ----------------------------------------------------------------- eviction

    def _start_evictor(self, rate: float, batch: int) -> None:
        self._evict_batch = batch
        if rate <= 0:
            return
        self._evictor = threading.Thread(
            target=self._maintain, args=(rate,), name=f"dedupstore-maintain:{self._root}", daemon=True
        )
        self._evictor.start()

    def _inserted(self) -> int:
        """Records this handle has created (NEW and BEYOND_HORIZON verdicts)."""
        counts = self._counts
        return counts[_native.NEW] + counts[_native.BEYOND_HORIZON]

    def _maintain(self, rate: float) -> None:
        # Eviction draws on a token bucket refilled at eviction_pace() and
        # capped at one second's worth of `rate`, so an idle spell cannot save
        # up into a deletion storm. The prefilter is refreshed about once a
        # second, a few filters a time.
        STORE_THREAD.own = True  # its evictions' and filters' commits beside a window have the calls make the puts
        self._as_own_thread()
        _name_os_thread("ds-maintain")
        tokens = 0.0
        inserts_per_s = 0.0
        last = next_filters = time.monotonic()
        inserted = self._inserted()
        while not self._stop.wait(EVICTION_TICK_S):
            now = time.monotonic()
            elapsed = now - last
            seen = self._inserted()
            weight = min(1.0, elapsed / INSERT_RATE_WINDOW_S)
            inserts_per_s += weight * ((seen - inserted) / max(elapsed, 1e-6) - inserts_per_s)
            inserted = seen
            tokens = min(rate, tokens + eviction_pace(rate, inserts_per_s) * elapsed)
            last = now
            try:
                if tokens >= 1:
                    done = self.evict(int(tokens))
                    tokens -= done["deleted"]
                if self._bloom and now >= next_filters:
                    next_filters = now + 1.0
                    self._refresh_prefilter(FILTERS_PER_REFRESH, current=False)
            except (StoreClosedError, ForkedStoreError):
                return
            except Exception:
                log.exception("dedupstore: background maintenance failed; retrying in %.1f s", EVICTION_TICK_S)

    def refresh_prefilter(self, limit: int | None = None) -> dict[str, int]:
        """Bring the Bloom prefilter up to date (the background thread does the
        same about once a second, from LMDB as it stands: below).

        Seals every generation that ended at least one generation ago (no key
        is added to a sealed generation any more), then gives each sealed,
        live generation a filter: loaded if some process already persisted one,
        otherwise built from the generation's keys and persisted, newest first,
        at most ``limit`` built per call. Returns counts: ``loaded``, ``built``.
        A filter only ever lets a probe be skipped; without one the generation
        is probed in LMDB, so a store is correct before, during and without this.
        """
        return self._refresh_prefilter(limit, current=True)

    def _refresh_prefilter(self, limit: int | None, current: bool) -> dict[str, int]:
        # ``current``: read each partition as Partition.reader() does (this
        # process's window applied first, another's waited out), so that
        # every generation sealed by now gets its filter. The background
        # thread reads LMDB as it stands instead: a seal shows there only
        # together with every write made before it (a window applies its
        # writes in order, all of an overlay at once), so what it builds is
        # as complete, and a generation sealed in a window's overlay gets
        # its filter at the next refresh, after the window's next apply. It
        # then neither applies a window from this thread (handing the GIL
        # over at every key, beside the calls) nor waits for another
        # process's.
        self._check()
        done = {"loaded": 0, "built": 0}
        if not self._bloom:
            return done
        now = self._now_us()
        budget = limit
        for name in self.namespaces():
            ns = self._namespace(name)
            for part, space in zip(self._parts, ns.spaces, strict=True):
                target = space.generation(now) - 2
                if target >= space.oldest:
                    seal = functools.partial(space.seal, gen=target)
                    # Under the window, a call's write like any other: LMDB
                    # shows the seal only with every write made before it,
                    # all applied at once, so the filter built once it shows
                    # is complete.
                    if part.window is None or part.window.run(seal, sync=False) is CLOSED:
                        part.committer.run(seal, durable=False)
                with part.reader() if current else part.env.begin() as txn:
                    sealed1, _ = space.generation_state(txn)
                    oldest = space.stored_oldest(txn)
                    # Newest first, and only so far back: an old store whose
                    # eviction was off has long runs of empty generations.
                    floor = max(oldest, sealed1 - MAX_FILTER_SCAN)
                    wanted = [g for g in range(sealed1 - 1, floor - 1, -1) if g not in space.blooms]
                    to_build = []
                    for g in wanted:
                        raw = txn.get(_native.bloom_key(ns.prefix, g), db=part.meta)
                        if raw is None:
                            to_build.append(g)
                            continue
                        try:
                            space.blooms[g] = _native.BloomFilter.from_bytes(raw, expected_tag=self._bloom_tag)
                            done["loaded"] += 1
                        except StoreFormatError as exc:
                            log.warning("dedupstore: %s partition %d generation %d: %s; rebuilding it",
                                        name, part.index, g, exc)
                            to_build.append(g)
                for g in to_build:
                    if budget is not None and budget <= 0:
                        return done
                    with part.reader() if current else part.env.begin() as txn:
                        bf = space.build_bloom(txn, g, BLOOM_FP_RATE, self._bloom_tag, pause_every=_pause_every())
                    if bf is None:
                        bf = _native.BloomFilter(1, BLOOM_FP_RATE, self._bloom_tag)  # empty: rules every key out
                    blob = bf.to_bytes()
                    key = _native.bloom_key(ns.prefix, g)
                    _maintenance(part, functools.partial(_put_meta, key=key, value=blob, db=part.meta))
                    space.blooms[g] = bf
                    done["built"] += 1
                    if budget is not None:
                        budget -= 1
        return done

    def evict(self, budget: int | None = None) -> dict[str, int]:
        """Remove records past their namespace's horizon, at most ``budget`` of
        them (default: all that are due), ``eviction_batch`` per transaction.

        Whole generations are removed oldest first once every record in them
        is past the horizon. Generations hold completed records only:
        unresolved ones live apart and are never evicted. Returns counts:
        ``deleted``.
        """
        self._check()
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise InvalidInputError(f"budget must be a non-negative int or None; got {budget!r}")
        with self._evict_lock:
            return self._evict(budget)

    def _evict(self, budget: int | None) -> dict[str, int]:
        totals = {"deleted": 0}
        remaining = budget
        now = self._now_us()
        for name, cfg in self.namespaces().items():
            ns = self._namespace(name)
            horizon_us = int(cfg.horizon * 1_000_000)
            for part, space in zip(self._parts, ns.spaces, strict=True):
                if space.oldest >= space.generation(now) or (space.oldest + 1) * space.gen_len + horizon_us > now:
                    # Nothing is due: evict_step would find that too (the
                    # stored oldest generation is at or past this handle's),
                    # but in a write transaction, which applies the
                    # partition's write-behind window (and in sync mode holds
                    # its calls up), ten times a second from the background
                    # thread.
                    continue
                while remaining is None or remaining > 0:
                    step = self._evict_batch if remaining is None else min(self._evict_batch, remaining)
                    # Maintenance: not waited on (sync mode journals it, and
                    # the next durable commit's fdatasync carries it). A lost
                    # eviction only brings back records and the frontier
                    # together. Beside a window, claims go on meanwhile; the
                    # floor keeps them from rewriting a record being deleted.
                    space.evict_floor = space.evictable_below(horizon_us, now)
                    try:
                        deleted, left, oldest = _maintenance(
                            part, functools.partial(
                                space.evict_step, horizon=horizon_us, now=now, budget=step,
                                pause_every=_pause_every() if _beside_calls(part) else 0,
                            ),
                        )
                    finally:
                        space.evict_floor = 0
                    space.advance_oldest(oldest)
                    totals["deleted"] += deleted
                    if remaining is not None:
                        remaining -= step - left
                    if left > 0:
                        break  # nothing more is due in this partition
        return totals

    # ---------------------------------------------------------------- decorator

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
        """Run the decorated function only when its effect is NEW.

        ``key`` (and ``intent``) are called with the function's arguments. The
        return value is serialised (JSON by default) as the outcome; on
        DUPLICATE the stored outcome is deserialised and returned instead.
        Other verdicts raise :class:`EffectNotRunError` carrying the result. An
        exception from the function keeps the lease (the effect may have
        happened: the key turns UNKNOWN when the lease expires) unless it is
        one of ``release_on``, which declare "no effect happened".
        """
        return effects.idempotent(
            self, namespace, key=key, intent=intent, dumps=dumps, loads=loads, release_on=release_on
        )


_native.bind_store(
    BatchResult, STATUS_BY_CODE, LEASED_CODES, _small_bytes, _lease_us, _time_us,
    MAX_CLAIMANT_BYTES, MAX_EVENT_ID_BYTES, MAX_BATCH,
)
