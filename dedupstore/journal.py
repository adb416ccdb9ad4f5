"""The sync-mode journal: one sequential fdatasync per group commit.

A ``sync`` partition commits like a ``flush`` one (``MDB_NOSYNC``: pages reach
the kernel, not the disk) and, before the callers return, appends what the
transaction wrote (every put and delete, with full values) to this process's
journal segment and fdatasyncs it: one sequential write, where LMDB's own sync
commit writes and syncs every page it dirtied, in random places, and then the
meta page. Checkpoints (dedupstore/checkpoint.py) fold the journal into the
data files: a segment is deleted once, for every partition it holds records
of, a recorded checkpoint covers its newest one.

One journal serves every partition of the store: a ``claim_many`` that
touches four partitions, or eight threads spread over them, wait for one
fdatasync, not one per partition's file.

Only while one process writes the partition: a record replayed without
another process's commit it was built on would rebuild a state that never
existed, so with another writer present (or for the first commit after one
left) a durable commit is checkpointed instead (dedupstore/commit.py).

After an operating-system crash, the first open rolls each partition back to
its recorded checkpoint T and replays, in txn order, every journaled
transaction of that partition after T. The replay is physical (the same puts
and deletes), so it rebuilds exactly what those transactions committed. The
open then deletes the previous boot's segments (recovery restarts LMDB's txn
ids from T, so their ids would mean other transactions now).

Layout: ``<store>/journal/<boot>-<owner>.<n>``, one writer process per file
(``boot`` is the boot id in hex, ``owner`` the pid and a random tag). A
process holds an exclusive ``flock`` on each of its segments while it lives,
so another process can tell a dead writer's segment (the lock is free) and
collect it once checkpoints cover it. Records, little-endian:

    magic "DSJ2" | payload length u32 | txn id u64 | partition u16 | payload | CRC-32 u32

The CRC covers length, txn id, partition and payload. The payload is a
sequence of ops, each ``op u8 (1 put, 2 delete, 3 delete range) | db u8 |
key length u16 | value length u32 | key | value`` (``db``: 1 records, 2
pending, 3 meta; a delete range removes every key from ``key`` to ``value``:
a run of consecutive cursor deletes). A torn or corrupt record ends the
segment's replay (nothing after it was acknowledged: a record is
acknowledged only once the fdatasync that wrote it returned). A segment is
written over zeros kept ahead of its last record (Journal._zero), so it ends
in zeros: no record starts with a zero magic.

Write-behind records (dedupstore/window.py): while a ``sync`` process is a
partition's only writer, each call is decided against the partition's
write-behind overlay and its writes are appended here as a record of their
own, before any LMDB transaction holds them, with :data:`WINDOW_RECORD` set
in the partition field and, in the txn id field, the id of the LMDB
transaction that will apply them (the partition's next one: no other
transaction can come between, dedupstore/window.py). A replay runs a
transaction's write-behind records, in the order they were appended, before
its own record: they were applied at its start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from ._native import GroupSync, LogFile
from .errors import DurabilityError, StoreFormatError

JOURNAL_DIR = "journal"
MAGIC = b"DSJ2"
_HEAD = struct.Struct("<4sIQH")  # magic, payload length, txn id, partition
RECOVERY_LOCK = ".recovery.lock"
_OP = struct.Struct("<BBHI")  # op, db, key length, value length
_CRC = struct.Struct("<I")
PUT, DELETE = 1, 2
#: Delete every key from ``key`` to ``value`` inclusive: what a run of
#: consecutive cursor deletes removed (eviction walks a generation that way),
#: in one entry instead of one per key.
DELETE_RANGE = 3
#: Set in a record's partition field: the record holds one write-behind call
#: of that partition, to be applied by the transaction its txn id names.
WINDOW_RECORD = 0x8000
#: Segments are zero-filled this far ahead of their last record, a chunk at
#: a time (see Journal._zero).
ZERO_AHEAD = 512 << 10
ZERO_CHUNK = 1 << 20
_ZEROS = bytes(ZERO_CHUNK)


class JournalTxn:
    """A write transaction that remembers what it changed (the journal's ops).

    It passes every call through to the real transaction and records each put
    that wrote and each delete that removed something; cursors opened through
    it record their deletes too. ``codes`` maps each named database handle's
    ``id()`` to its journal code.
    """

    __slots__ = ("_txn", "_codes", "ops", "get")

    def __init__(self, txn: Any, codes: dict[int, int]) -> None:
        self._txn = txn
        self._codes = codes
        self.ops: list[tuple[int, int, bytes, bytes]] = []
        self.get = txn.get  # the hot read path, without a wrapper

    def put(
        self, key: bytes, value: bytes, dupdata: bool = False, overwrite: bool = True, append: bool = False,
        db: Any = None,
    ) -> bool:
        done: bool = self._txn.put(key, value, dupdata, overwrite, append, db)
        if done:
            # Keys and values arrive as bytes (the engine makes them so).
            self.ops.append((PUT, self._codes[id(db)], key, value))
        return done

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        done: bool = self._txn.delete(key, value, db)
        if done:
            self.ops.append((DELETE, self._codes[id(db)], key, b""))
        return done

    def cursor(self, db: Any = None) -> _JournalCursor:
        return _JournalCursor(self._txn.cursor(db=db), self.ops, self._codes[id(db)])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


class _JournalCursor:
    # The read methods are the real cursor's own, bound once: an eviction
    # walks them per record, and a __getattr__ pass-through made sync-mode
    # eviction cost 7.3 us a record against 1.5 in flush mode.
    #
    # Consecutive deletes (each at the record the previous one left the
    # cursor on) are one DELETE_RANGE entry: an eviction of 500 records
    # journals one op, not 500. Anything that may move the cursor otherwise,
    # or an op journaled in between, ends the run.
    __slots__ = ("_cur", "_ops", "_code", "_run", "key", "value")

    def __init__(self, cur: Any, ops: list[tuple[int, int, bytes, bytes]], code: int) -> None:
        self._cur = cur
        self._ops = ops
        self._code = code
        self._run = -1  # index in ops of the entry the next consecutive delete extends
        self.key = cur.key
        self.value = cur.value

    def set_range(self, key: bytes) -> bool:
        self._run = -1
        return bool(self._cur.set_range(key))

    def next(self) -> bool:
        self._run = -1
        return bool(self._cur.next())

    def delete(self, dupdata: bool = False) -> bool:
        cur = self._cur
        key = cur.key()
        done = bool(cur.delete(dupdata))
        if done:
            ops = self._ops
            run = self._run
            if run >= 0 and run == len(ops) - 1:
                ops[run] = (DELETE_RANGE, self._code, ops[run][2], key)
            else:
                ops.append((DELETE, self._code, key, b""))
                self._run = len(ops) - 1
        else:
            self._run = -1
        return done

    def __iter__(self) -> Iterator[Any]:
        self._run = -1
        return iter(self._cur)

    def __getattr__(self, name: str) -> Any:
        self._run = -1  # any other method may move the cursor
        return getattr(self._cur, name)


def encode(part: int, txnid: int, ops: list[tuple[int, int, bytes, bytes]]) -> bytes:
    pack = _OP.pack
    parts: list[bytes] = []
    add = parts.append
    for op, db, k, v in ops:
        add(pack(op, db, len(k), len(v)))
        add(k)
        add(v)
    payload = b"".join(parts)
    head = _HEAD.pack(MAGIC, len(payload), txnid, part)
    return head + payload + _CRC.pack(zlib.crc32(head[4:] + payload))


def decode(raw: bytes) -> Iterator[tuple[int, int, list[tuple[int, int, bytes, bytes]]]]:
    """The intact records of one segment, in order, as (partition, txn id,
    ops); stops at the first torn one."""
    at = 0
    while at + _HEAD.size <= len(raw):
        if raw[at : at + 4] != MAGIC:
            return
        _, length, txnid, part = _HEAD.unpack_from(raw, at)
        start = at + _HEAD.size
        end = start + length
        if end + _CRC.size > len(raw):
            return
        (crc,) = _CRC.unpack_from(raw, end)
        if zlib.crc32(raw[at + 4 : end]) != crc:
            return
        ops = []
        pos = start
        while pos < end:
            op, db, klen, vlen = _OP.unpack_from(raw, pos)
            pos += _OP.size
            key = raw[pos : pos + klen]
            pos += klen
            ops.append((op, db, key, raw[pos : pos + vlen]))
            pos += vlen
        yield part, txnid, ops
        at = end + _CRC.size


def segment_boot(name: str) -> str:
    """The boot id (hex) a segment's name says it was written in."""
    return name.split("-", 1)[0]


@dataclass
class _Segment:
    seq: int
    path: Path
    #: Written with pwrite alone (unmapped): the next fdatasync covers the
    #: record, and one of zeros written ahead costs less (Journal._zero).
    log: LogFile
    #: The journal's logical position (bytes appended by this process, over
    #: every segment) of this segment's offset 0: marks are logical positions.
    base: int
    written: int = 0
    #: Zeros were written from ``written`` to here (the next fdatasync
    #: covers them), or tried: a failed zero-fill is not retried at once.
    zeroed: int = 0
    #: partition -> newest txn id appended for it
    top: dict[int, int] = field(default_factory=dict)

    @property
    def fd(self) -> int:
        return self.log.fd


class Journal:
    """This process's journal, shared by every partition of the store:
    appends, syncs, rotation and retirement of covered segments.

    The fdatasyncs are run by one thread of the native extension
    (:class:`dedupstore._native.GroupSync`, csrc/ds_gsync.c), which never
    takes the GIL: a writer appends, and :meth:`sync` waits for an fdatasync
    that covers its record. One runs at a time, each for everything appended
    when it started, the next as soon as one returns. (When a waiting Python
    thread ran it instead, the next one could only start once that thread had
    the GIL back; benches/bench_core.py --only d measures the difference,
    docs/benchmarks.md.)
    """

    def __init__(self, root: Path, boot: bytes) -> None:
        self.dir = root / JOURNAL_DIR
        self.dir.mkdir(exist_ok=True)
        self._boot = boot.hex()
        #: Names this process's segments (``<owner>.<n>``).
        self.owner = f"{self._boot}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        #: Held by appends and by rotation.
        self.lock = threading.Lock()
        #: Held by retirement and by changes of the segment table.
        self._segments_lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        self._seq = 0
        self._current: _Segment
        self._use(self._open(0, 0))
        self._gsync = GroupSync(self._current.fd)
        #: partition -> newest recorded checkpoint's txn id, as this process knows it
        self._durable: dict[int, int] = {}
        #: Records appended (for stats and tests).
        self.appends = 0
        #: Set by a failed fdatasync: the kernel may have dropped the pages
        #: it could not write, so a later fdatasync that succeeds proves
        #: nothing about them. Every later sync raises (fail-stop).
        self.failed: BaseException | None = None

    @property
    def syncs(self) -> int:
        """fdatasyncs run (for stats and tests)."""
        return int(self._gsync.state()[2])

    @property
    def sync_seconds(self) -> float:
        """Time the fdatasyncs took, summed (for stats)."""
        return float(self._gsync.state()[3])

    def _open(self, seq: int, base: int) -> _Segment:
        # Created under a hidden name, locked, then renamed: another process
        # looking for dead writers' segments never sees it unlocked.
        path = self.dir / f"{self.owner}.{seq}"
        hidden = self.dir / f".{self.owner}.{seq}"
        fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(hidden, path)
        return _Segment(seq, path, LogFile(fd), base)

    def _use(self, seg: _Segment) -> None:
        # Only a segment appends may go to is in the table: retire() takes
        # any other one in it whose records checkpoints cover (none, for a
        # new one), and closes its descriptor.
        with self._segments_lock:
            self._segments[seg.seq] = seg
            self._current = seg

    def append(self, part: int, txnid: int, ops: list[tuple[int, int, bytes, bytes]]) -> int:
        """Append one committed transaction of partition ``part`` (caller
        holds :attr:`lock`); returns the mark to pass to :meth:`sync`."""
        seg = self._current
        data = memoryview(encode(part, txnid, ops))
        done = 0
        while done < len(data):
            done += os.pwrite(seg.fd, data[done:], seg.written + done)
        return self._appended(seg, part, txnid, len(data))

    def _appended(self, seg: _Segment, part: int, txnid: int, n: int) -> int:
        seg.written += n
        if txnid > seg.top.get(part, 0):
            seg.top[part] = txnid
        self.appends += 1
        end = seg.base + seg.written
        self._gsync.appended(end)
        if seg.written + ZERO_AHEAD > seg.zeroed:
            self._zero(seg)
        return end

    def _zero(self, seg: _Segment) -> None:
        # Records are written over zeros the file already holds: an
        # fdatasync of such an overwrite writes the data blocks alone, where
        # one of an append also commits the file's new size and blocks to
        # the filesystem's journal (benches/bench_core.py's "records" line
        # measures both). The next fdatasync covers the
        # zeros too, so once per ZERO_CHUNK one costs more. The replay stops
        # at the zeros (no record starts with a zero magic). If this fails
        # (ENOSPC), appends still work, at the append's cost.
        start = max(seg.zeroed, seg.written)
        try:
            os.pwrite(seg.fd, _ZEROS, start)
        except OSError:
            seg.zeroed = start + ZERO_CHUNK  # try again a chunk later
            return
        seg.zeroed = start + ZERO_CHUNK

    def mark(self) -> int:
        """The mark of everything appended so far (caller holds :attr:`lock`)."""
        return self._current.base + self._current.written

    def log_window(self, overlay: Any, part: int, txnid: int) -> tuple[int, int]:
        """Append the write-behind call ``overlay`` holds unrecorded, as a
        :data:`WINDOW_RECORD` of ``part`` for txn ``txnid`` (the caller holds
        the partition's window lock); returns the bytes appended and the mark
        to :meth:`sync` (of everything appended so far, also when the call
        wrote nothing: its verdict may rest on a record not synced yet). A
        failed write raises OSError with the call still undoable and the
        segment cut back to its last whole record."""
        with self.lock:
            seg = self._current
            try:
                n = overlay.log(seg.log, part | WINDOW_RECORD, txnid, seg.written)
            except OSError:
                # A part of the record may be there: cut it off, so that no
                # replay can take it for a whole one (the next is written
                # at the same place).
                with contextlib.suppress(OSError):
                    seg.log.cut(seg.written)
                seg.zeroed = seg.written
                raise
            if n:
                return n, self._appended(seg, part, txnid, n)
            return 0, seg.base + seg.written

    def sync(self, mark: int) -> bool:
        """Return once every record up to ``mark`` is on disk (in the mark's
        segment and every earlier one). At once if fdatasyncs since already
        covered them (callers share them: group sync). True if this call
        waited for an fdatasync."""
        if self.failed is not None:
            raise self._refused()
        try:
            return bool(self._gsync.wait(mark))
        except OSError as exc:
            if self.failed is not None:
                raise self._refused() from None
            self.failed = exc
            raise DurabilityError(f"{self._current.path}: journal fdatasync failed: {exc}") from exc

    def _refused(self) -> DurabilityError:
        err = DurabilityError(
            f"{self.dir}: an earlier journal fdatasync failed ({self.failed}); writes since may not "
            f"be durable, so none is acknowledged. Close and reopen the store"
        )
        err.__cause__ = self.failed
        return err

    def synced(self) -> dict[str, int]:
        """How many bytes of each of this process's segments an fdatasync
        has covered, by file name (for tests that cut a segment there)."""
        synced = self._gsync.state()[1]
        with self._segments_lock:
            return {
                seg.path.name: max(0, min(seg.written, synced - seg.base)) for seg in self._segments.values()
            }

    def rotate(self) -> None:
        """Start a new segment if the current one holds records (caller holds
        :attr:`lock`; checkpoints call it, so a segment holds about one
        checkpoint interval and can be retired soon after). Waits until the
        old segment is synced: the fdatasync thread syncs one file."""
        old = self._current
        if old.written:
            self._seq += 1
            new = self._open(self._seq, old.base + old.written)
            with contextlib.suppress(OSError):  # a failed fdatasync: every later sync raises it
                self._gsync.switch(new.fd, new.base)
            self._use(new)

    def retire(self, part: int, txnid: int) -> None:
        """A checkpoint of partition ``part`` at ``txnid`` is recorded: delete
        this process's segments (but the current one) that checkpoints now
        cover for every partition they hold records of."""
        with self._segments_lock:
            if txnid > self._durable.get(part, 0):
                self._durable[part] = txnid
            for seg in list(self._segments.values()):
                if seg is not self._current and covered(seg.top, self._durable):
                    self._segments.pop(seg.seq, None)
                    seg.log.close()
                    seg.path.unlink(missing_ok=True)

    def collect_dead(self) -> int:
        """Delete dead writers' segments of this boot that recorded
        checkpoints cover; returns how many (the previous boot's are the
        opening process's: :func:`clear_other_boots`)."""
        with self._segments_lock:
            durable = dict(self._durable)
        return collect_dead(self.dir, self._boot, durable)

    def close(self, delete: bool = True) -> None:
        """Stop the fdatasync thread (after it synced what was appended),
        close every segment, and delete them (``delete``: the caller has just
        checkpointed every partition, so checkpoints cover them all)."""
        self._gsync.stop()
        with self._segments_lock:
            for seg in list(self._segments.values()):
                self._segments.pop(seg.seq, None)
                if delete:
                    seg.path.unlink(missing_ok=True)
                seg.log.close()


def covered(top: dict[int, int], durable: dict[int, int]) -> bool:
    return all(txnid <= durable.get(part, -1) for part, txnid in top.items())


def _dead_segments(jdir: Path) -> Iterator[tuple[Path, int]]:
    """Segments whose writer is gone (their flock is free), each yielded
    locked by us; the caller closes the descriptor."""
    if not jdir.is_dir():
        return
    for path in sorted(jdir.iterdir()):
        if path.name.startswith("."):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # its writer lives
            continue
        if os.fstat(fd).st_nlink == 0:
            # Deleted since we opened it, by its writer retiring it or by
            # another checkpoint's collection (partitions checkpoint in
            # parallel), which released the lock we then got.
            os.close(fd)
            continue
        yield path, fd


def collect_dead(jdir: Path, boot: str, durable: dict[int, int]) -> int:
    """Delete the dead writers' segments of boot ``boot`` whose every record
    is covered by ``durable`` (partition -> recorded checkpoint txn id)."""
    n = 0
    for path, fd in _dead_segments(jdir):
        try:
            if segment_boot(path.name) != boot:
                continue
            top: dict[int, int] = {}
            with open(fd, "rb", closefd=False) as f:  # the file we locked, whatever its name now names
                raw = f.read()
            for part, txnid, _ in decode(raw):
                part &= ~WINDOW_RECORD
                top[part] = max(top.get(part, 0), txnid)
            if covered(top, durable):
                path.unlink(missing_ok=True)
                n += 1
        finally:
            os.close(fd)
    return n


def clear_other_boots(root: Path, boot: bytes) -> int:
    """Delete every segment written in another boot (caller holds the
    recovery lock and has opened, so replayed and checkpointed, every
    partition in this boot). Returns how many."""
    n = 0
    for path, fd in _dead_segments(root / JOURNAL_DIR):
        try:
            if segment_boot(path.name) != boot.hex():
                path.unlink(missing_ok=True)
                n += 1
        finally:
            os.close(fd)
    return n


@contextmanager
def recovery_lock(root: Path) -> Iterator[None]:
    """Held while a process opens the store's partitions: the recovery of
    every partition after a restart, and the deletion of the previous boot's
    segments after it, are one step to every other opener."""
    jdir = root / JOURNAL_DIR
    jdir.mkdir(exist_ok=True)
    fd = os.open(jdir / RECOVERY_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _segments(jdir: Path, owner: str | None = None) -> list[Path]:
    """The journal's segments (of ``owner`` only, if given), each writer's in
    the order it wrote them."""
    found = []
    for path in jdir.iterdir() if jdir.is_dir() else []:
        stem, _, n = path.name.rpartition(".")
        if path.name.startswith(".") or not n.isdigit() or (owner is not None and stem != owner):
            continue
        found.append((stem, int(n), path))
    return [path for _, _, path in sorted(found)]


def replay(env: lmdb.Environment, dbs: dict[int, Any], root: Path, part: int, after: int) -> int:
    """Apply, in txn order, every transaction of partition ``part`` after txn
    ``after`` in the store's journal (caller holds the partition's checkpoint
    lock; no other process has it open in this boot): for each, its
    write-behind records in the order they were appended, then its own.
    Returns how many transactions were applied."""
    records: dict[int, list[tuple[int, int, bytes, bytes]]] = {}
    behind: dict[int, list[tuple[int, int, bytes, bytes]]] = {}
    for path in _segments(root / JOURNAL_DIR):
        for rpart, txnid, ops in decode(path.read_bytes()):
            if rpart & ~WINDOW_RECORD != part or txnid <= after:
                continue
            if rpart & WINDOW_RECORD:
                behind.setdefault(txnid, []).extend(ops)
                continue
            if txnid in records and records[txnid] != ops:
                raise StoreFormatError(f"{path}: two different journal records for txn {txnid} of partition {part}")
            records[txnid] = ops
    txnids = sorted(records.keys() | behind.keys())
    if txnids:
        with env.begin(write=True) as txn:
            for txnid in txnids:
                for op, code, key, value in behind.get(txnid, []) + records.get(txnid, []):
                    db = dbs[code]
                    if op == PUT:
                        txn.put(key, value, db=db)
                    elif op == DELETE:
                        txn.delete(key, db=db)
                    elif op == DELETE_RANGE:
                        delete_range(txn, key, value, db)
                    else:
                        raise StoreFormatError(f"journal record for txn {txnid} of partition {part}: unknown op {op}")
    return len(txnids)


def window_ops(root: Path, owner: str, part: int, first: int) -> tuple[int, list[tuple[int, int, bytes, bytes]]]:
    """The write-behind records of writer ``owner`` for partition ``part``
    from txn ``first`` on (a dead writer's calls that no transaction has
    applied yet), in the order they were appended: (how many, their ops)."""
    n = 0
    ops: list[tuple[int, int, bytes, bytes]] = []
    for path in _segments(root / JOURNAL_DIR, owner):
        for rpart, txnid, rops in decode(path.read_bytes()):
            if rpart == part | WINDOW_RECORD and txnid >= first:
                ops.extend(rops)
                n += 1
    return n, ops


def delete_range(txn: Any, first: bytes, last: bytes, db: Any) -> int:
    """Delete every key of ``db`` from ``first`` to ``last`` inclusive (a
    DELETE_RANGE entry); returns how many."""
    cur = txn.cursor(db=db)
    n = 0
    ok = cur.set_range(first)
    while ok:
        key = cur.key()
        if not key or key > last:
            break
        ok = cur.delete()
        n += 1
    return n
