"""The sync-mode journal: one sequential fdatasync per group commit.

A ``sync`` partition commits like a ``flush`` one (``MDB_NOSYNC``: pages reach
the kernel, not the disk) and, before the callers return, appends what the
transaction wrote (every put and delete, with full values) to this process's
journal segment and fdatasyncs it: one sequential write, where LMDB's own sync
commit writes and syncs every page it dirtied, in random places, and then the
meta page. Checkpoints (dedupstore/checkpoint.py) fold the journal into the
data file: after a checkpoint at txn T is recorded, segments holding only
transactions up to T are deleted.

Only while one process writes the partition: a record replayed without
another process's commit it was built on would rebuild a state that never
existed, so with another writer present (or for the first commit after one
left) a durable commit is checkpointed instead (dedupstore/commit.py).

After an operating-system crash, the first open rolls the partition back to
the recorded checkpoint T and replays, in txn order, every journaled
transaction after T. The replay is physical (the same puts and deletes), so
it rebuilds exactly what those transactions committed.

Layout: ``<partition>/journal/<owner>.<n>``, one writer process per file
(``owner`` is the pid and a random tag). A process holds an exclusive
``flock`` on each of its segments while it lives, so another process can tell
a dead writer's segment (the lock is free) and collect it once a checkpoint
covers it. Records, little-endian:

    magic "DSJ1" | payload length u32 | txn id u64 | payload | CRC-32 u32

The CRC covers length, txn id and payload. The payload is a sequence of ops,
each ``op u8 (1 put, 2 delete) | db u8 | key length u16 | value length u32 |
key | value`` (``db``: 1 records, 2 pending, 3 meta). A torn or corrupt record
ends the segment's replay (nothing after it was acknowledged: a record is
acknowledged only once the fdatasync that wrote it returned).
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from .errors import DurabilityError, StoreFormatError

JOURNAL_DIR = "journal"
MAGIC = b"DSJ1"
_HEAD = struct.Struct("<4sIQ")  # magic, payload length, txn id
_OP = struct.Struct("<BBHI")  # op, db, key length, value length
_CRC = struct.Struct("<I")
PUT, DELETE = 1, 2


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
    # The read and move methods are the real cursor's own, bound once: an
    # eviction walks them per record, and a __getattr__ pass-through made
    # sync-mode eviction cost 7.3 us a record against 1.5 in flush mode.
    __slots__ = ("_cur", "_ops", "_code", "key", "value", "set_range", "next")

    def __init__(self, cur: Any, ops: list[tuple[int, int, bytes, bytes]], code: int) -> None:
        self._cur = cur
        self._ops = ops
        self._code = code
        self.key = cur.key
        self.value = cur.value
        self.set_range = cur.set_range
        self.next = cur.next

    def delete(self, dupdata: bool = False) -> bool:
        cur = self._cur
        key = cur.key()
        done = bool(cur.delete(dupdata))
        if done:
            self._ops.append((DELETE, self._code, key, b""))
        return done

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def encode(txnid: int, ops: list[tuple[int, int, bytes, bytes]]) -> bytes:
    pack = _OP.pack
    parts: list[bytes] = []
    add = parts.append
    for op, db, k, v in ops:
        add(pack(op, db, len(k), len(v)))
        add(k)
        add(v)
    payload = b"".join(parts)
    head = _HEAD.pack(MAGIC, len(payload), txnid)
    return head + payload + _CRC.pack(zlib.crc32(head[4:] + payload))


def decode(raw: bytes) -> Iterator[tuple[int, list[tuple[int, int, bytes, bytes]]]]:
    """The intact records of one segment, in order; stops at the first torn one."""
    at = 0
    while at + _HEAD.size <= len(raw):
        magic, length, txnid = _HEAD.unpack_from(raw, at)
        end = at + _HEAD.size + length
        if magic != MAGIC or end + _CRC.size > len(raw):
            return
        (crc,) = _CRC.unpack_from(raw, end)
        if zlib.crc32(raw[at + 4 : end]) != crc:
            return
        ops = []
        pos = at + _HEAD.size
        while pos < end:
            op, db, klen, vlen = _OP.unpack_from(raw, pos)
            pos += _OP.size
            key = raw[pos : pos + klen]
            pos += klen
            ops.append((op, db, key, raw[pos : pos + vlen]))
            pos += vlen
        yield txnid, ops
        at = end + _CRC.size


@dataclass
class _Segment:
    seq: int
    path: Path
    fd: int
    written: int = 0
    synced: int = 0


class Journal:
    """This process's journal of one partition: appends, syncs, rotation."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory / JOURNAL_DIR
        self.dir.mkdir(exist_ok=True)
        self._owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        #: Held from a transaction's commit to its append, and by rotation.
        self.lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        self._seq = 0
        self._current = self._open(0)
        #: Records appended and fdatasyncs run (for stats and tests).
        self.appends = 0
        self.syncs = 0
        #: Set by a failed fdatasync: the kernel may have dropped the pages
        #: it could not write, so a later fdatasync that succeeds proves
        #: nothing about them. Every later sync raises (fail-stop).
        self.failed: BaseException | None = None

    def _open(self, seq: int) -> _Segment:
        # Created under a hidden name, locked, then renamed: another process
        # looking for dead writers' segments never sees it unlocked.
        path = self.dir / f"{self._owner}.{seq}"
        hidden = self.dir / f".{self._owner}.{seq}"
        fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(hidden, path)
        seg = _Segment(seq, path, fd)
        self._segments[seq] = seg
        return seg

    def append(self, txnid: int, ops: list[tuple[int, int, bytes, bytes]]) -> tuple[int, int]:
        """Append one committed transaction (caller holds :attr:`lock`);
        returns the mark to pass to :meth:`sync`."""
        seg = self._current
        data = memoryview(encode(txnid, ops))
        done = 0
        while done < len(data):
            done += os.write(seg.fd, data[done:])
        seg.written += len(data)
        self.appends += 1
        return seg.seq, seg.written

    def mark(self) -> tuple[int, int]:
        """The mark of everything appended so far (caller holds :attr:`lock`)."""
        return self._current.seq, self._current.written

    def sync(self, mark: tuple[int, int]) -> None:
        """Return once every record up to ``mark`` is on disk: the mark's
        segment and any earlier one a checkpoint has not dropped yet (their
        records are covered only once that checkpoint is recorded). At once
        if fdatasyncs since already covered them."""
        seq, end = mark
        with self._sync_lock:
            if self.failed is not None:
                raise DurabilityError(
                    f"{self.dir}: an earlier journal fdatasync failed ({self.failed}); writes since may not be "
                    f"durable, so none is acknowledged. Close and reopen the store"
                ) from self.failed
            for seg in list(self._segments.values()):
                if seg.seq > seq:
                    continue
                target = seg.written if seg.seq < seq else end
                if seg.synced >= target:
                    continue
                target = seg.written
                try:
                    os.fdatasync(seg.fd)
                except OSError as exc:
                    self.failed = exc
                    raise DurabilityError(f"{seg.path}: journal fdatasync failed: {exc}") from exc
                seg.synced = max(seg.synced, target)
                self.syncs += 1

    def rotate(self) -> list[_Segment]:
        """Start a new segment (caller holds :attr:`lock`, right after pinning
        the checkpoint's snapshot, so every record appended so far belongs to
        it); returns the segments a durable checkpoint will have made obsolete."""
        old = [s for s in self._segments.values()]
        self._seq += 1
        self._current = self._open(self._seq)
        return old

    def drop(self, segments: list[_Segment]) -> None:
        with self._sync_lock:
            for seg in segments:
                self._segments.pop(seg.seq, None)
                os.close(seg.fd)
                seg.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Drop every segment (the caller has just checkpointed)."""
        self.drop(list(self._segments.values()))

    def dead_segments(self) -> list[tuple[Path, int]]:
        """Other processes' segments whose writer is gone (their flock is
        free), each returned locked by us: collect them before pinning a
        checkpoint, delete them once it is recorded."""
        mine = {s.path.name for s in self._segments.values()}
        found = []
        for path in sorted(self.dir.iterdir()):
            if path.name in mine or path.name.startswith("."):
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
            found.append((path, fd))
        return found


def drop_dead(found: list[tuple[Path, int]]) -> None:
    for path, fd in found:
        path.unlink(missing_ok=True)
        os.close(fd)


def replay(env: lmdb.Environment, dbs: dict[int, Any], directory: Path, after: int) -> int:
    """Apply, in txn order, every journaled transaction after txn ``after``
    (caller holds the checkpoint lock; no other process has the environment
    open in this boot). Returns how many were applied."""
    jdir = directory / JOURNAL_DIR
    if not jdir.is_dir():
        return 0
    records: dict[int, list[tuple[int, int, bytes, bytes]]] = {}
    for path in sorted(jdir.iterdir()):
        for txnid, ops in decode(path.read_bytes()):
            if txnid > after:
                if txnid in records and records[txnid] != ops:
                    raise StoreFormatError(f"{path}: two different journal records for txn {txnid}")
                records[txnid] = ops
    if records:
        with env.begin(write=True) as txn:
            for txnid in sorted(records):
                for op, code, key, value in records[txnid]:
                    db = dbs[code]
                    if op == PUT:
                        txn.put(key, value, db=db)
                    elif op == DELETE:
                        txn.delete(key, db=db)
                    else:
                        raise StoreFormatError(f"{jdir}: journal record for txn {txnid} has unknown op {op}")
    return len(records)


def clear(directory: Path) -> None:
    """Delete every segment (after a replay and the checkpoint that covers it)."""
    jdir = directory / JOURNAL_DIR
    if jdir.is_dir():
        for path in jdir.iterdir():
            path.unlink(missing_ok=True)
