"""Write-behind: many calls per LMDB transaction, each one surviving a
killed process once it returns (and, in sync mode, an OS crash).

A commit of one key (``MDB_NOSYNC``, in either mode) costs far more than
the key: the checkpoint pin keeps LMDB from reusing the pages freed since the
last checkpoint, so every transaction copies its root-to-leaf paths into fresh pages
(27-44 us and 30-38 KB written per one-key transaction against 6 us and
217 B with no reader; benches/bench_pin.py). A process that is a partition's
only writer therefore opens a *window* on it:

- It claims the window in LMDB, under LMDB's writer lock: the partition's
  meta key ``W`` names its log segment (and boot) and the offset up to which
  the segment is applied. While ``W`` names a live process, no other process
  commits to the partition: every write transaction reads ``W`` first
  (:func:`settle`) and waits (:class:`WindowBusy`).
- Each call decides against an :class:`dedupstore._native.Overlay` (a read
  snapshot under this process's unapplied writes), appends what it wrote as
  one journal-format record to the segment (copied into a shared mapping of
  the file, :class:`dedupstore._native.LogFile`: in the page cache once it
  returns, so a killed process loses nothing), and returns. No system call,
  no LMDB transaction, no lock another process waits on.
- Every ``apply_interval`` (the store's flusher thread; in flush mode the
  flusher's transaction has its puts made by the calls, a slice of
  :data:`SLICE_KEYS` keys each after its own log write, while the flusher
  waits without the GIL, and makes what they leave once they stop:
  :meth:`Window.apply_if_due`; a claim, whose caller waits for its verdict,
  leaves them to the next completion or release unless none was taken
  lately),
  before any other write transaction of this process, before a checkpoint,
  at the flusher's tick once the overlay holds :data:`APPLY_EARLY_KEYS`
  keys, and when it holds :data:`MAX_PENDING` keys, the overlay is written
  in one transaction that also moves ``W``'s offset past the records it
  holds. Calls go on meanwhile, in a fresh overlay that reads through the one
  being written. In flush mode, maintenance (an eviction step, a filter)
  runs the same way: its transaction applies the overlay first, then does
  its own writes, none of which a call makes (:meth:`Window.beside`; a claim
  leaves alone a record of a generation being evicted,
  ``Space.evict_floor``). Sealing a generation is written through the
  window like a call's write.
- Another process that wants to write holds the partition's writer lock (the
  checkpoint file's, taken at open); the owner sees it at its next tick
  (every :data:`CHECK_S`, or every ``apply_interval`` if that is shorter),
  closes the window (applies and deletes ``W`` in one transaction) and does
  not reopen it while that process is there. The other process waits for
  ``W`` to go (at most :data:`WAIT_LIMIT_S`).
- The owner died: the ``flock`` it held on its segment is free. The next
  writer, or the next open, replays the segment's records after ``W``'s
  offset into its own transaction and deletes ``W``: every call the dead
  process returned is there, and nothing it did not log.
- After an operating-system crash the partition is rolled back to its
  checkpoint; a ``W`` in it names a segment of the previous boot, whose
  unsynced tail may be lost or torn, and is dropped with it (flush mode's
  promise: an OS crash may lose writes since the last ``flush()``).

Segments: ``<store>/wlog/pNNN.<boot>.<pid>.<tag>.<seq>``; records as in
dedupstore/journal.py, with the record's sequence number in the txn id field.
A flush-mode window writes two in turn: the one rotated out is zeroed and
written again after the next (:meth:`Window.drop_retired`).

In ``sync`` mode a window works the same way, but each call's record goes to
the store's journal (dedupstore/journal.py) as a write-behind record, and the
call returns once a journal fdatasync covers it; callers in other threads and
other partitions share those fdatasyncs. The record's txn id field names the
LMDB transaction that will apply it: the partition's next one, since while the
window is open every write transaction of the partition is this process's and
carries the overlay first. (Calls taken while an apply is committing are
labelled with the transaction after it; if that apply fails they are applied
with it, one transaction early, and then that transaction commits nothing
else.) After an operating-system crash the journal's replay therefore runs
them in the right place, and ``W`` (magic ``DSW2``) only marks the window
open: its segment stays empty and is held for its lock alone, and its name
(``pNNN.<journal owner>.<seq>``) says whose journal segments hold the calls
that a takeover must replay.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from . import _native, checkpoint
from .errors import StoreFormatError, StoreFullError
from .journal import DELETE, PUT, Journal, decode, window_ops

log = logging.getLogger("dedupstore")

#: What an apply writes: (count, puts per database code, deletes), from
#: :meth:`dedupstore._native.Overlay.write_set`.
WriteSet = tuple[int, list[tuple[int, list[tuple[bytes, bytes]]]], list[tuple[int, bytes]]]

W_KEY = b"W"
WLOG_DIR = "wlog"
W_MAGIC = b"DSW1"
#: A sync-mode window's ``W``: its calls are journaled (see above).
W_MAGIC_SYNC = b"DSW2"
_W = struct.Struct("<4s16sQ")  # magic, boot id, applied offset; then the segment's name
#: Keys an overlay may hold before the call that reaches it applies them
#: (checked once the overlay has taken _native.FULL_CHECK_WRITES writes).
MAX_PENDING = 20_000
#: Keys at which the flusher's tick applies an overlay before its
#: apply_interval is up, so that at high rates the flusher applies it, not
#: the call that would reach MAX_PENDING: that call's caller would wait for
#: a whole apply (tens of milliseconds for 20,000 keys; at 180,000
#: events/s an overlay gains about 90,000 keys a second, so a 200 ms
#: interval reached MAX_PENDING first; at 18,000 events/s it gains about
#: 4,500, so the default 500 ms interval applies it first).
APPLY_EARLY_KEYS = MAX_PENDING // 4
#: A segment is replaced by the next one at the first apply after it has
#: grown past this. The two a window writes in turn are recycled
#: (:meth:`Window.drop_retired`), so a smaller one costs no more: a
#: rotation is a segment's zeroing and a ``W`` in an apply's transaction;
#: at the reference rate (about 1.1 MB/s a partition) one every few
#: seconds, and a segment's first pages are the only fresh ones it takes.
SEGMENT_BYTES = 4 << 20
#: A flush-mode segment's records are copied into a shared mapping of its
#: first bytes (no system call per call; csrc/ds_log.h), past it pwritten:
#: room for a segment grown past SEGMENT_BYTES before its next apply.
MAP_BYTES = SEGMENT_BYTES + (4 << 20)
#: File space is allocated this far ahead of the mapped records (a store to
#: a mapped page the disk cannot hold would be a SIGBUS, not an error).
RESERVE_BYTES = 1 << 20
#: How far past the last record the flusher's tick faults a flush-mode
#: segment's mapping in (LogFile.prefault), so that the calls' stores find
#: their pages there: all the space reserved ahead, many ticks' worth of
#: records at the reference rate (about 1.4 MB/s a partition), more than a
#: tick's at ten times it.
PREFAULT_BYTES = RESERVE_BYTES
#: After an attempt to open found another writer, how long until the next.
REOPEN_S = 0.1
#: How long a writer waits for another process's window before giving up
#: (the owner closes it within CHECK_S of a second writer's arrival).
WAIT_LIMIT_S = 30.0
#: How often the flusher ticks each window (:meth:`Window.tick`): looks for
#: another process that wants to write the partition, and applies an idle
#: window that is due. Apart from the apply interval, so that applying
#: seldom (fewer, larger transactions: fewer pages written per key) does not
#: keep another process waiting longer. Each tick wakes the flusher, and a
#: wake-up costs far more than the tick's own work: at 18,000 events/s,
#: ticking every 5 ms (with writeback started every 20 ms) took 5.8% of a
#: core in the store's threads, every 50 ms 3.8% (docs/benchmarks.md,
#: twenty-fourth session). Another process waits at most this once, for
#: its first write or read of a partition whose window this process holds.
CHECK_S = 0.05
#: How often a waiting writer looks again.
WAIT_POLL_S = 0.0005
#: How many keys' writes a call makes of a flush-mode apply: a few tens of
#: microseconds of puts (``dedupstore bench`` reports them: ``slice_mean_us``).
SLICE_KEYS = 32
#: How long the flusher waits for the calls to take the next slice before it
#: makes the rest itself (the calls stopped, or never came: an idle window's
#: apply); a claim takes one only when no call did for half of it.
HELP_WAIT_S = 0.002

#: ``own`` is set in the store's own threads (the flusher's, maintenance's):
#: their applies of a flush-mode window have the calls make the puts
#: (:meth:`Window._commit`). Another thread's (a caller's flush() or
#: evict()) may be the one that makes the calls: it applies on its own.
STORE_THREAD = threading.local()


def helping() -> bool:
    """Whether this thread is one of the store's own (:data:`STORE_THREAD`)."""
    return getattr(STORE_THREAD, "own", False)


#: Returned by :meth:`Window.run` and :meth:`Window.read` when no window is
#: open: the caller takes the ordinary path (a write transaction).
CLOSED = object()

#: Numbers the openings of windows (Overlay.epoch), never 0.
_EPOCHS = itertools.count(1)


@dataclass(frozen=True)
class Owner:
    """A partition's ``W`` entry: whose window it is and how much of its log is applied."""

    boot: bytes
    offset: int
    name: str
    #: A sync-mode window: its calls are in its process's journal segments.
    journaled: bool = False

    def pack(self) -> bytes:
        return _W.pack(W_MAGIC_SYNC if self.journaled else W_MAGIC, self.boot, self.offset) + self.name.encode()

    @classmethod
    def unpack(cls, raw: bytes) -> Owner:
        if len(raw) <= _W.size or raw[:4] not in (W_MAGIC, W_MAGIC_SYNC):
            raise StoreFormatError("a partition's write-behind entry (meta key 'W') is corrupt")
        magic, boot, offset = _W.unpack_from(raw)
        return cls(boot, offset, raw[_W.size :].decode(), magic == W_MAGIC_SYNC)


class Takeover:
    """What :func:`settle` returns after taking a dead owner's window over:
    called once the transaction has committed. ``alone``: the transaction
    must commit with nothing but the takeover in it (a sync-mode window's
    calls may be labelled with the transaction after it: see above), and the
    caller begins a fresh one for its own writes."""

    def __init__(self, cleanup: Callable[[], None], alone: bool = False) -> None:
        self._cleanup = cleanup
        self.alone = alone

    def __call__(self) -> None:
        self._cleanup()


def settle_alone(
    env: lmdb.Environment, txn: Any, cleanup: Callable[[], None] | None
) -> tuple[Any, Callable[[], None] | None]:
    """After :func:`settle` in ``txn``: when the takeover must commit alone,
    commit it, run its cleanup and return a fresh write transaction and no
    cleanup (else both as they were)."""
    if isinstance(cleanup, Takeover) and cleanup.alone:
        txn.commit()
        cleanup()
        return env.begin(write=True), None
    return txn, cleanup


class WindowBusy(Exception):
    """Another live process holds the partition's window (internal: the
    committer waits and retries)."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(owner.name)
        self.owner = owner


def settle(txn: Any, dbs: dict[int, Any], wdir: Path, mine: str | None = None) -> Callable[[], None] | None:
    """Make sure no other live process holds the window of the partition
    ``txn`` writes (a write transaction: LMDB's writer lock is held, so
    ``W`` cannot change under us). ``dbs``: journal code -> database.

    Returns None when no window is open or it is ``mine``. A window of a
    dead owner is taken over: its unapplied records are replayed into
    ``txn`` and ``W`` deleted; the returned callable removes its segment
    and must run once ``txn`` has committed. A window of another boot is
    dropped the same way, without replay. Raises :class:`WindowBusy` when a
    live process holds it."""
    meta = dbs[3]
    raw = txn.get(W_KEY, db=meta)
    if raw is None:
        return None
    owner = Owner.unpack(raw)
    if owner.name == mine:
        return None
    path = wdir / owner.name
    if owner.boot != checkpoint.boot_id():
        # The open after a restart rolled the partition back to a checkpoint
        # that an apply of this window preceded; the log's unsynced tail is
        # not to be trusted, and flush mode does not promise it. (A sync-mode
        # window's calls are in the journal, replayed by that open.)
        txn.delete(W_KEY, db=meta)
        return Takeover(lambda: _unlink(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise StoreFormatError(
            f"{path} is missing, but its partition's write-behind entry names it: writes a "
            f"process acknowledged would be lost; refusing to write to the partition"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise WindowBusy(owner) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        if owner.journaled:
            # Its calls that no transaction applied: labelled with this
            # transaction or (taken during an apply that never committed)
            # the one after.
            replayed, ops = window_ops(wdir.parent, _journal_owner(owner.name), _partition_of(owner.name), txn.id())
            _apply_ops(txn, dbs, ops, path)
        else:
            replayed = replay(txn, dbs, path, owner.offset)
    except BaseException:
        os.close(fd)
        raise
    txn.delete(W_KEY, db=meta)
    log.warning(
        "dedupstore: %s: took over the write-behind log of a process that died: replayed %d acknowledged "
        "calls", path, replayed,
    )

    def cleanup() -> None:
        _unlink(path)
        os.close(fd)

    return Takeover(cleanup, alone=owner.journaled)


def _partition_of(name: str) -> int:
    return int(name[1:].split(".", 1)[0])


def _journal_owner(name: str) -> str:
    # pNNN.<journal owner>.<seq>
    return name.split(".")[1]


def _apply_ops(txn: Any, dbs: dict[int, Any], ops: list[tuple[int, int, bytes, bytes]], path: Path) -> None:
    for op, code, key, value in ops:
        if op == PUT:
            txn.put(key, value, db=dbs[code])
        elif op == DELETE:
            txn.delete(key, db=dbs[code])
        else:
            raise StoreFormatError(f"{path}: a write-behind record holds unknown op {op}")


def replay(txn: Any, dbs: dict[int, Any], path: Path, offset: int) -> int:
    """Apply the records of segment ``path`` from ``offset`` on, in order,
    into ``txn``; stops at a torn record (a call that never returned).
    Returns how many records."""
    with open(path, "rb") as f:
        f.seek(offset)
        raw = f.read()
    n = 0
    for _, _, ops in decode(raw):
        _apply_ops(txn, dbs, ops, path)
        n += 1
    return n


def collect_dead(root: Path, named: Callable[[int], str | None]) -> int:
    """Delete the segments under ``root`` that no process holds and no
    partition's ``W`` names (``named(partition)``: the name, or None);
    a window opened and a crash came before ``W`` named its new segment, say.
    Returns how many."""
    wdir = root / WLOG_DIR
    n = 0
    for path in sorted(wdir.iterdir()) if wdir.is_dir() else []:
        name = path.name
        if name.startswith(".") or not name.startswith("p"):
            continue
        try:
            part = _partition_of(name)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (ValueError, FileNotFoundError):
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its writer lives
        finally:
            os.close(fd)
        if named(part) != name:
            _unlink(path)
            n += 1
    return n


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class Window(_native.WindowCore):
    """One partition's write-behind window in this process (``journal``: a
    sync-mode one, whose calls are journaled).

    Every method that touches the overlay or the log runs under
    :attr:`lock`; every apply holds :attr:`applying`, and the partition's
    group committer takes both (``applying``, then ``lock``, then LMDB's
    writer lock) for every write transaction of this process. An apply
    releases ``lock`` while it writes LMDB, so calls go on meanwhile."""

    def __init__(
        self, env: lmdb.Environment, dbs: dict[int, Any], root: Path, index: int,
        others: Callable[[], bool], checkpoint_now: Callable[[], Any], journal: Journal | None = None,
        apply_s: float = 0.0, live_filters: bool = True,
    ) -> None:
        self.lock = _native.WindowLock()
        #: Give each opening an epoch, so that Spaces keep live filters for
        #: the calls it takes (the store's ``bloom`` option).
        self._live_filters = live_filters
        #: Held through every apply, and by the committer around its
        #: transactions: taken before :attr:`lock`, never after.
        self.applying = threading.Lock()
        self._broken = False  # a log write failed: close at the next chance
        self.active = False
        self.overlay = None
        self.failed = None
        self._env = env
        self._dbs = dbs
        self._dir = root / WLOG_DIR
        self._index = index
        self._others = others
        self._checkpoint = checkpoint_now  # moves the pin before a retry when the map is full
        self._boot = checkpoint.boot_id()
        self._journal = journal
        #: How often the overlay is applied, and when next. Flush-mode calls
        #: make the puts of the store's own applies (:meth:`apply_if_due`);
        #: sync-mode calls leave them to the flusher: they wait for their
        #: fdatasync without the GIL anyway, which is when its apply runs.
        self._apply_s = apply_s
        self._calls_apply = journal is None and apply_s > 0
        self._apply_at = 0.0
        #: The apply under way whose slices the calls make
        #: (:class:`_Job`), or None.
        self._job = None
        self._stem = (
            f"p{index:03d}.{self._boot.hex()}.{os.getpid()}.{uuid.uuid4().hex[:8]}" if journal is None
            else f"p{index:03d}.{journal.owner}"
        )
        #: The id of the partition's next write transaction: the one that
        #: applies the overlay (sync mode labels each call's record with it,
        #: or with the one after while an apply commits).
        self._next = 0
        self._label = 0
        #: The overlay holds calls labelled past ``_next`` (an apply failed):
        #: it must be applied in a transaction of its own.
        self._ahead = False
        self._seq = 0
        self._log: _native.LogFile | None = None  # the open segment
        self._name = ""
        self._size = 0  # bytes in the segment; all of it is in the overlay or applied
        #: While an apply rotates the segment (:meth:`_behind`): the next
        #: one, which the calls log to as well, and the bytes in it.
        self._mirror = None
        self._mirror_size = 0
        self._records = 0
        self._retry_at = 0.0
        #: For stats(): windows opened, applies, keys applied, log bytes written.
        self.opened = 0
        self.applies = 0
        self.applied_keys = 0
        self.logged_bytes = 0
        self._mapped_records = 0  # of segments dropped or retired
        #: Segments rotated out, W no longer naming them, for the flusher's
        #: next tick to recycle or delete (:meth:`_retire`).
        self._retired: list[tuple[Path, _native.LogFile | None]] = []
        #: A retired segment zeroed for the next rotation (:meth:`drop_retired`):
        #: (name, segment). A list, whose pop and append are atomic.
        self._spares: list[tuple[str, _native.LogFile]] = []
        self.recycled = 0  # segments zeroed for reuse
        self.apply_seconds = 0.0
        #: Of apply_seconds, the time in LMDB's commit (its page writes):
        #: the rest is the transaction's puts and deletes.
        self.apply_commit_seconds = 0.0
        #: Applies whose writes the calls made (some or all), the slices
        #: they made and the wall time those took (what a call waited for).
        self.helped_applies = 0
        self.call_slices = 0
        self.call_slice_seconds = 0.0
        #: Maintenance transactions run beside the window (:meth:`beside`).
        self.beside_commits = 0

    @property
    def name(self) -> str | None:
        """The segment ``W`` names while the window is open."""
        return self._name if self.active else None

    def stats(self) -> dict[str, Any]:
        """For ``DedupStore.stats()``: whether the window is open now, how
        often it was opened, the applies (transactions), keys they wrote and
        wall time their transactions took (and of it, their commits'), how
        many of them had their writes made by the calls, the slices of those
        writes the calls made (:meth:`apply_if_due`) and the wall time the
        slices took (what a call waited for), the maintenance transactions run beside the
        window (:meth:`beside`), the bytes logged, and how many records went
        into a segment's mapping (the others were pwritten: sync mode's
        journal records, and records past the mapping or the disk space it
        could reserve), and how many segments were zeroed for reuse rather
        than deleted (:meth:`drop_retired`)."""
        mapped = self._mapped_records + (self._log.mapped_writes if self._log is not None else 0)
        return {
            "open": self.active, "opened": self.opened, "applies": self.applies,
            "applied_keys": self.applied_keys, "apply_seconds": round(self.apply_seconds, 6),
            "apply_commit_seconds": round(self.apply_commit_seconds, 6),
            "helped_applies": self.helped_applies, "call_slices": self.call_slices,
            "call_slice_seconds": round(self.call_slice_seconds, 6),
            "beside_commits": self.beside_commits, "logged_bytes": self.logged_bytes, "mapped_records": mapped,
            "recycled_segments": self.recycled,
        }

    # run() and apply_if_due(), every call's path, are WindowCore's
    # (dedupstore/_wcore.pxi); apply_if_due hands a slice of an apply here.

    def _help(self, claim: bool) -> None:
        """apply_if_due's slice of the flusher's apply under way."""
        job = self._job
        if job is None:
            return
        t0 = time.perf_counter()
        if job.help(claim):
            self.call_slices += 1
            self.call_slice_seconds += time.perf_counter() - t0

    def read(self, op: Callable[[Any], Any]) -> Any:
        """``op(overlay)`` for a read that must see this process's unapplied
        writes; :data:`CLOSED` when no window is open."""
        with self.lock:
            if not self.active:
                return CLOSED
            return op(self.overlay)

    def apply(self) -> None:
        """Write the overlay to LMDB now (before a checkpoint or a scan):
        when this returns, LMDB holds every write this window took before."""
        if self.active:
            with self.applying:
                self._behind(None, helped=self._calls_apply and helping())

    def tick(self) -> None:
        """The flusher's call every :data:`CHECK_S` (or ``apply_interval``,
        if shorter): close the window if another process wants to write;
        else apply if due, or if the overlay holds :data:`APPLY_EARLY_KEYS`
        keys (flush mode: with its calls making the puts,
        :meth:`apply_if_due`)."""
        self.drop_retired()
        if not self.active:
            return
        log = self._log
        if log is not None and self._journal is None:
            log.prefault(self._size, PREFAULT_BYTES)  # without the GIL, and not under the calls' lock
        with self.applying:
            if self._others():
                with self.lock:
                    if self.active:
                        self._apply(closing=True)
                return
            now = time.monotonic()
            if now < self._apply_at and len(self.overlay or ()) < APPLY_EARLY_KEYS:
                return
            self._apply_at = now + self._apply_s
            self._behind(None, helped=self._calls_apply and helping())

    def close(self) -> None:
        """Apply and give the window up (the store is closing)."""
        with self.applying, self.lock:
            if self.active:
                self._apply(closing=True)
        self.drop_retired()

    def forget(self) -> None:
        """In a forked child: drop the inherited segment descriptors (so that
        the parent's death frees their locks), touching nothing else."""
        for _, seg in (*self._retired, *self._spares):
            if seg is not None:
                seg.close()
        self._retired.clear()
        self._spares.clear()
        for seg in (self._log, self._mirror):
            if seg is not None:
                seg.close()
        self._log = self._mirror = None
        self._job = None
        self.active = False

    # The group committer's side: a write transaction of this process
    # carries the unapplied writes first (the caller holds applying and lock).

    def before(self) -> None:
        """Before the committer begins a transaction: an overlay holding
        calls labelled past it is applied in one of its own first."""
        if self.active and self._ahead:
            self._apply()

    def prelude(self, txn: Any) -> None:
        if not self.active:
            return
        if self.failed is not None:
            raise self.failed
        assert self.overlay is not None
        self._write(txn, self.overlay, self._owner(self._size, self._name))

    def committed(self) -> None:
        if not self.active:
            return
        assert self.overlay is not None
        if len(self.overlay):
            self.applies += 1  # the transaction applied the window, as _apply does
            self.applied_keys += len(self.overlay)
        self._renew()

    # Internals (self.lock held, unless a docstring says otherwise).

    def _log_path(self) -> Path:
        # Where this window's calls are logged: its segment, or (sync mode) the journal.
        return self._dir / self._name if self._journal is None else self._journal.dir

    def _owner(self, offset: int, name: str) -> Owner:
        return Owner(self._boot, offset, name, self._journal is not None)

    def _based(self, snapshot: Any) -> None:
        # The overlay now reads through ``snapshot``: the next write
        # transaction is the one after it.
        self._next = self._label = snapshot.id() + 1
        self._ahead = False

    def _open(self) -> bool:
        now = time.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + REOPEN_S
        if self._others():
            return False
        name, seg = self._new_segment()
        cleanup = None
        txn = self._env.begin(write=True)
        try:
            if self._others():  # asked again under LMDB's writer lock
                raise _NotNow
            cleanup = settle(txn, self._dbs, self._dir)
            txn, cleanup = settle_alone(self._env, txn, cleanup)
            txn.put(W_KEY, self._owner(0, name).pack(), db=self._dbs[3])
            txn.commit()
        except (WindowBusy, _NotNow, lmdb.MapFullError):
            txn.abort()
            self._drop_segment(name, seg)
            return False
        except BaseException:
            txn.abort()
            self._drop_segment(name, seg)
            raise
        if cleanup is not None:
            cleanup()
        self._log, self._name, self._size = seg, name, 0
        snapshot = self._env.begin()
        self.overlay = _native.Overlay(self._dbs[1], self._dbs[2], self._dbs[3], snapshot)
        # A fresh epoch: the Spaces' live filters of an earlier opening know
        # nothing of what other processes wrote since (_native.Space._live_for).
        self.overlay.epoch = next(_EPOCHS) if self._live_filters else 0
        self._based(snapshot)
        self.active = True
        self.opened += 1
        self._apply_at = time.monotonic() + self._apply_s
        if self._journal is not None:
            # A commit of another process's that came before ours may have
            # been neither journaled nor checkpointed (its maintenance, say);
            # a replay of our calls must not run without it.
            self._checkpoint()
        return True

    def _log_failed(self, exc: OSError) -> None:
        # This call is not acknowledged: undo it, cut any torn tail, and give
        # the window up (what was logged before is applied); the caller takes
        # the ordinary path.
        assert self.overlay is not None
        self.overlay.rollback()
        log.warning("dedupstore: write-behind log %s: %s; closing the window", self._log_path(), exc)
        with contextlib.suppress(OSError):
            assert self._log is not None
            self._log.cut(self._size)
        if self._mirror is not None:  # a rotation under way: the next segment's copy goes too
            with contextlib.suppress(OSError):
                self._mirror.cut(self._mirror_size)
        # Closing needs ``applying``, taken before self.lock: without waiting
        # here, or (an apply is running) by the caller's ordinary commit, whose
        # transaction carries the overlay, and then the next tick.
        self._retry_at = time.monotonic() + 100 * REOPEN_S
        self._broken = True
        if self.applying.acquire(blocking=False):
            try:
                self._apply(closing=True)
            finally:
                self.applying.release()

    def _apply(self, closing: bool = False) -> None:
        """Apply with both locks held: calls wait. For closing, rotating the
        segment, and a full overlay."""
        ov = self.overlay
        assert ov is not None
        rotate = not closing and self._size >= SEGMENT_BYTES
        if not len(ov) and not closing and not rotate:
            return
        new: tuple[str, _native.LogFile] | None = self._new_segment() if rotate else None
        owner: Owner | None = None
        if not closing:
            owner = self._owner(0, new[0]) if new else self._owner(self._size, self._name)
        try:
            self._commit(ov, owner)
        except BaseException:
            if new is not None:
                self._drop_segment(*new)
            raise
        if closing:
            self._drop_segment(self._name, self._log)
        elif new is not None:
            # W names the new segment now. Dropping the old one (an unlink,
            # and an unmap of its dirty pages) can take milliseconds: the
            # flusher's next tick does it, not this call. Until then it stays
            # locked; a crash meanwhile leaves it unlocked and unnamed, which
            # the next open deletes.
            self._retire(self._name, self._log)
        if closing or new is not None:
            self._log, self._name, self._size = (None, "", 0) if new is None else (new[1], new[0], 0)
        if closing:
            ov.snapshot.abort()
            self.overlay = None
            self.active = False
            self._broken = False
        else:
            self._renew()

    def _apply_behind(self) -> None:
        """Apply without holding calls up (``applying`` held, self.lock not)."""
        self._behind(None)

    def beside(self, op: Callable[[Any], Any]) -> Any:
        """Maintenance (an eviction step, a filter), flush mode: ``op(txn)``
        in a write transaction that first applies the overlay, as
        :meth:`_apply_behind` does, so calls go on meanwhile; returns its
        result. :data:`CLOSED` when no window is open, or in sync mode (whose
        transactions are journaled): then the caller takes the group commit,
        which holds calls up. ``op`` must write nothing a call may write
        meanwhile: the calls' overlay is rebased onto its commit, and where
        both wrote, the call's write would win. Flush mode, one of the
        store's own threads: the calls make the overlay's puts
        (:meth:`_commit`); ``op`` runs in this thread."""
        if self._journal is not None:
            return CLOSED
        with self.applying:
            result = self._behind(op, helped=self._calls_apply and helping())
            if result is not CLOSED:
                self.beside_commits += 1
            return result

    def _behind(self, op: Callable[[Any], Any] | None, helped: bool = False) -> Any:
        """Under the lock the overlay is frozen and a fresh one, reading
        through it, takes the calls that come meanwhile; the frozen one's
        writes (then ``op``'s, if given) are committed with the lock released
        (LMDB's writes need no GIL, so calls go on meanwhile); under the lock
        again the fresh overlay is rebased onto a snapshot that holds them. A
        failed commit folds the fresh overlay back into the frozen one.
        ``helped``: the calls make the overlay's puts (:meth:`_commit`).
        Returns ``op``'s result (CLOSED: ``op`` did not run).

        A segment past :data:`SEGMENT_BYTES` is rotated here too, without
        holding calls up: the next one is made first; while the commit that
        names it in ``W`` (at offset 0) runs, each call's record goes to both
        segments (:attr:`_mirror`), so that whichever ``W`` a crash leaves
        names a segment that holds it; after the commit the calls log to the
        new one alone and the old one is retired."""
        new = None
        if not self._broken and self.active and self._size >= SEGMENT_BYTES:
            try:  # made, its space reserved and its first pages faulted in, with the calls going on
                new = self._new_segment()
                new[1].prefault(0, PREFAULT_BYTES)
            except OSError as exc:
                log.warning("dedupstore: write-behind log %s: no next segment (%s); the next apply tries again",
                            self._log_path(), exc)
        try:
            with self.lock:
                if not self.active:
                    return CLOSED
                frozen = self.overlay
                assert frozen is not None
                if self._broken:
                    if op is not None:
                        return CLOSED  # the committer's way, which closes first
                    self._apply(closing=True)  # rare: the blocking way
                    return None
                if op is None and not len(frozen) and new is None:
                    return None
                if new is not None:
                    owner = self._owner(0, new[0])
                    self._mirror, self._mirror_size = new[1], 0
                else:
                    owner = self._owner(self._size, self._name)
                self.overlay = _native.Overlay(self._dbs[1], self._dbs[2], self._dbs[3], frozen)
                self.overlay.epoch = frozen.epoch
                self._label = self._next + 1  # this commit takes txn _next
            # No call writes the frozen overlay any more: its writes are
            # made without holding calls up.
            try:
                result = self._commit(frozen, owner, op, helped)
            except BaseException:
                with self.lock:
                    assert self.overlay is not None
                    frozen.absorb(self.overlay)
                    self.overlay = frozen
                    self._label = self._next
                    self._ahead = self._journal is not None
                    self._mirror = None  # W still names the old segment, which has every record
                raise
            with self.lock:
                assert self.overlay is not None
                if new is not None:
                    self._retire(self._name, self._log)
                    self._name, self._log, self._size = new[0], new[1], self._mirror_size
                    self._mirror, new = None, None
                snapshot = self._env.begin()
                self.overlay.rebase(snapshot)
                self._based(snapshot)
                frozen.snapshot.abort()
            return result
        finally:
            if new is not None:  # not taken: no W names it (its records, if any, are in the old one too)
                _discard(self._dir / new[0], new[1])

    def _commit(
        self, ov: _native.Overlay, owner: Owner | None, op: Callable[[Any], Any] | None = None,
        helped: bool = False,
    ) -> Any:
        """One transaction writing overlay ``ov``'s writes (which no call
        makes meanwhile: it is frozen, or the lock is held) and ``W``
        (deleted if ``owner`` is None), then running ``op`` (if given: its
        result is returned); a full map is checkpointed once and retried. The
        writes are gathered, sorted and made by LMDB's own calls, all but the
        gathering without the GIL (:func:`_native.lmdb_write_overlay`), where
        py-lmdb allows it. Otherwise, ``helped``
        (flush mode, the store's own thread, ``applying`` held): the calls
        that come meanwhile make the puts and deletes, a slice each, while
        this thread waits for them without the GIL (:class:`_Job`); this
        thread begins the transaction, runs ``op`` and commits (LMDB's writer
        lock belongs to the thread that took it). A slice that fails drops
        the transaction, and this thread makes the writes in the next."""
        t0 = time.perf_counter()
        result = None
        attempt = 0
        count = len(ov)
        try:
            while True:
                txn = self._env.begin(write=True)
                try:
                    # With LMDB's own calls the writes need no GIL, so the
                    # calls need not make them.
                    write = self._write_helped if helped and not _native.lmdb_direct()[0] else self._write
                    calls_helped = write(txn, ov, owner)
                    if op is not None:
                        result = op(txn)
                    t1 = time.perf_counter()
                    txn.commit()
                    if count:
                        self.apply_commit_seconds += time.perf_counter() - t1
                        self.helped_applies += calls_helped
                    break
                except _SliceFailed:
                    txn.abort()
                    helped = False
                except lmdb.MapFullError:
                    txn.abort()
                    if attempt:
                        raise
                    attempt = 1
                    self._checkpoint()  # moves the pin: freed pages become reusable
                except BaseException:
                    txn.abort()
                    raise
        except lmdb.MapFullError:
            self.failed = StoreFullError(
                f"partition {self._index} reached its map size with {count:,} acknowledged "
                f"writes not yet applied; they are safe in {self._log_path()} and this handle answers "
                f"from them, but takes no more writes. Close it and reopen with a larger map_size: the open "
                f"applies them"
            )
            raise self.failed from None
        finally:
            if count:  # a maintenance transaction's own time is not an apply's
                self.apply_seconds += time.perf_counter() - t0
        if count:
            self.applies += 1
            self.applied_keys += count
        return result

    def _write_helped(self, txn: Any, ov: _native.Overlay, owner: Owner | None) -> bool:
        # _write's writes, made by the calls (see _commit); True if a call
        # made a slice.
        job = _Job(txn, self._dbs, ov.write_set())
        self._job = job
        try:
            job.finish()
        finally:
            self._job = None
        self._put_owner(txn, owner)
        return job.helped > 0

    def _write(self, txn: Any, ov: _native.Overlay, owner: Owner | None) -> bool:
        # The deletes, then each database's puts in key order (a database's
        # keys are distinct, so its deletes may go first).
        if self._journal is not None and txn.id() != self._next:
            # The journal's replay would put the calls in the wrong place.
            raise RuntimeError(
                f"partition {self._index}: write-behind calls were journaled for txn {self._next}, but "
                f"txn {txn.id()} applies them; another transaction came between"
            )
        dbs = self._dbs
        # LMDB's own calls, the GIL released once for all (csrc/ds_lmdb.h);
        # else py-lmdb's, which release it around each: each database's
        # puts in one putmulti (grouped and sorted in C by Overlay.write_set).
        if _native.lmdb_write_overlay(txn, dbs, ov) < 0:
            _, puts, deletes = ov.write_set()
            for code, key in deletes:
                txn.delete(key, db=dbs[code])
            for code, items in puts:
                txn.cursor(db=dbs[code]).putmulti(items)
        self._put_owner(txn, owner)
        return False  # no call made a slice

    def _put_owner(self, txn: Any, owner: Owner | None) -> None:
        if owner is None:
            txn.delete(W_KEY, db=self._dbs[3])
        else:
            txn.put(W_KEY, owner.pack(), db=self._dbs[3])

    def _renew(self) -> None:
        ov = self.overlay
        assert ov is not None
        ov.snapshot.abort()
        snapshot = self._env.begin()
        ov.reset(snapshot)
        self._based(snapshot)

    def _new_segment(self) -> tuple[str, _native.LogFile]:
        """A fresh segment, locked before it gets its name (so that no
        collector takes it for a dead process's). A flush-mode one is
        written through a mapping of its first :data:`MAP_BYTES`, and is a
        retired one zeroed for reuse when there is one (:meth:`drop_retired`);
        a sync-mode one holds no records."""
        with contextlib.suppress(IndexError):
            return self._spares.pop()
        self._dir.mkdir(exist_ok=True)
        self._seq += 1
        name = f"{self._stem}.{self._seq}"
        tmp = self._dir / f".{name}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(tmp, self._dir / name)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        return name, _native.LogFile(fd, 0 if self._journal is not None else MAP_BYTES, RESERVE_BYTES)

    def _drop_segment(self, name: str, seg: _native.LogFile | None) -> None:
        if seg is not None:
            self._mapped_records += seg.mapped_writes
        _discard(self._dir / name, seg)

    def _retire(self, name: str, seg: _native.LogFile | None) -> None:
        """A segment W no longer names, for :meth:`drop_retired`."""
        if seg is not None:
            self._mapped_records += seg.mapped_writes
        self._retired.append((self._dir / name, seg))

    def drop_retired(self) -> None:
        """Deal with the segments rotated out since the last call (the
        flusher's tick, and closing). While the window is open, one is
        zeroed and kept for the next rotation (:meth:`LogFile.recycle`:
        its pages stay in the page cache and in the mapping, its file space
        reserved, so the calls' records go into them with no page allocated
        or faulted in, and nothing is freed); the others are deleted, and
        every one once the window is closed. A spare segment is locked and
        no ``W`` names it: at a crash, the next open deletes it."""
        while True:
            try:
                path, seg = self._retired.pop()  # atomic: close() may race the flusher here
            except IndexError:
                break
            if seg is not None and self.active and not self._spares and seg.recycle():
                self._spares.append((path.name, seg))
                self.recycled += 1
            else:
                _discard(path, seg)
        if not self.active:  # after the appends: a close() meanwhile leaves no spare behind
            while True:
                try:
                    name, seg = self._spares.pop()
                except IndexError:
                    return
                _discard(self._dir / name, seg)


def _discard(path: Path, seg: _native.LogFile | None) -> None:
    _unlink(path)
    if seg is not None:
        seg.close()


class _Job:
    """A flush-mode window's apply under way (:meth:`Window._commit`): the
    flusher's write transaction and its writes, in slices of at most
    :data:`SLICE_KEYS` keys (the deletes first, as :meth:`Window._write`
    makes them), that the window's calls make one at a time
    (:meth:`help`)."""

    __slots__ = ("txn", "dbs", "slices", "next", "lock", "done", "error", "last", "helped")

    def __init__(self, txn: Any, dbs: dict[int, Any], changes: WriteSet) -> None:
        _, puts, deletes = changes
        self.txn, self.dbs = txn, dbs
        self.slices: list[tuple[int, list[Any]]] = [
            (0, deletes[i:i + SLICE_KEYS]) for i in range(0, len(deletes), SLICE_KEYS)
        ]
        for code, items in puts:
            self.slices += [(code, items[i:i + SLICE_KEYS]) for i in range(0, len(items), SLICE_KEYS)]
        self.next = 0
        self.lock = threading.Lock()  # held while a slice is made
        self.done = threading.Event()  # every slice is made, or one failed
        self.error: BaseException | None = None
        self.last = time.monotonic()  # when the last slice was made
        self.helped = 0  # slices the calls made
        if not self.slices:
            self.done.set()

    def help(self, claim: bool) -> bool:
        """A call's: make the next slice, unless another thread is making
        one (or, for a claim, a call made one in the last half of
        :data:`HELP_WAIT_S`). True: it made one."""
        if self.done.is_set() or (claim and time.monotonic() - self.last < HELP_WAIT_S / 2):
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if self.done.is_set():
                return False
            self._step()
            self.helped += 1
            return True
        finally:
            self.lock.release()

    def finish(self) -> None:
        """The flusher's: wait until the calls have made every slice,
        making the rest itself once none was made for :data:`HELP_WAIT_S`
        (the calls stopped). Raises :class:`_SliceFailed` if a slice failed."""
        while not self.done.wait(HELP_WAIT_S):
            if time.monotonic() - self.last >= HELP_WAIT_S and self.lock.acquire(blocking=False):
                try:
                    while not self.done.is_set():
                        self._step()
                finally:
                    self.lock.release()
        with self.lock:  # no slice is being made any more
            if self.error is not None:
                raise _SliceFailed() from self.error

    def _step(self) -> None:
        # With self.lock held: the next slice. An error ends the job, for
        # finish() to report: the call that made the slice is acknowledged
        # already (an interrupt is raised in that call's thread too).
        code, part = self.slices[self.next]
        self.next += 1
        try:
            if code:
                self.txn.cursor(db=self.dbs[code]).putmulti(part)
            else:
                for dcode, key in part:
                    self.txn.delete(key, db=self.dbs[dcode])
        except BaseException as exc:
            self.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self.last = time.monotonic()
            if self.error is not None or self.next >= len(self.slices):
                self.done.set()


class _SliceFailed(Exception):
    """A slice of a :class:`_Job` failed: its transaction is dropped and
    the apply made again the flusher's own way."""


class _NotNow(Exception):
    """Another writer appeared between the two checks of :meth:`Window._open`."""


_native.bind_window(globals())
