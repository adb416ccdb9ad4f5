"""Checkpoints: what makes commits without an fsync each survive an OS crash.

Partitions are LMDB environments opened with ``MDB_NOSYNC``: a
commit writes its pages and its meta page with ``write()`` and returns. A
killed process loses nothing (the kernel has every page), but after an
operating-system crash the disk holds some unknown subset of the writes since
the last fsync, so the newest meta page may name pages that never reached the
disk. A checkpoint makes one committed snapshot recoverable, whatever the
crash:

1. **Pin.** A read transaction is begun at the newest committed snapshot T
   while the writer lock is held, and kept open until the next checkpoint.
   LMDB never reuses a page that a live reader's snapshot can reach, so from
   now on no write touches a page of T (or of any later snapshot).
2. **Copy the meta.** T's meta page (136 bytes: the roots of the free list
   and the main database, the last page number and T) is read while the
   writer lock is still held, so no commit can be rewriting it.
3. **Sync the data file** (``fdatasync``): every page of T is on disk.
4. **Record** T and its meta page in ``<partition>/checkpoint``, with the
   machine's boot id, and fsync that file. Records only move forward (a
   checkpoint older than the recorded one is not written).

At open, if the record is from another boot, the machine has restarted since
the last checkpoint, and anything the newest meta page names beyond T may be
missing: both meta pages are overwritten with T's, which rolls the partition
back to exactly the recorded snapshot, whose pages the pin kept untouched. In
the same boot nothing is rolled back: the page cache holds every commit.
``flush`` mode checkpoints on ``store.flush()``, at ``flush_interval`` and at
close, so an OS crash takes at most the writes since the last of those.

``sync`` partitions commit the same way and also journal each commit
(dedupstore/journal.py): its puts and deletes are appended to this process's
journal segment and fdatasynced before the callers return. A checkpoint then
also retires the segments its snapshot covers, and after a restart the
rollback is followed by a replay of every journaled transaction after T.
``sync`` mode checkpoints on ``store.flush()``, at ``flush_interval`` and at
close too, which bounds the journal.

Several processes share a partition, in either mode: every process pins its
own last checkpoint, and since records only move forward every live pin is
at or before the recorded snapshot, which therefore stays intact while any of
them lives. A checkpoint pin survives its process's death as a stale reader
slot; stale slots are cleared only just after this process's own checkpoint,
when its pin protects the record. docs/format.md describes the files and
docs/guarantees.md what each mode promises.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from .errors import StoreFormatError
from .journal import Journal

CHECKPOINT_FILE = "checkpoint"
MAGIC = b"DSCKPT\x00\x01"
SLOT_SIZE = 256
#: LMDB 0.9's MDB_meta on a 64-bit build: bytes 16..152 of meta pages 0 and 1.
META_AT = 16
META_LEN = 136
_META_MAGIC = 0xBEEFC0DE
_META_TXNID = 144 - META_AT  # txn id's offset inside MDB_meta
# magic, seq, txnid, boot id, page size, meta length, flags (reserved: 0);
# then the meta, then crc32
_HEAD = struct.Struct("<8sQQ16sIII")
_CRC_AT = _HEAD.size + META_LEN
#: struct flock (l_type, l_whence, l_start, l_len, l_pid), padded as C pads it.
_FLOCK = "@hhqqi"
_FLOCK_SIZE = 32
#: Dead processes' reader slots (and so their pins) are cleared at most this often.
READER_CHECK_S = 1.0


def _load_sync_file_range() -> Any:
    """libc's sync_file_range (Linux), or None: starts writeback of a file's
    dirty pages without waiting for it or flushing the disk's cache."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


@functools.lru_cache(maxsize=1)
def boot_id() -> bytes:
    """This boot's id (Linux: a random UUID drawn at every boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError) as exc:
        raise StoreFormatError(
            f"cannot read this machine's boot id (/proc/sys/kernel/random/boot_id: {exc}); dedupstore needs "
            f"it to tell a restart from a killed process"
        ) from None


@dataclass(frozen=True)
class Record:
    seq: int
    txnid: int
    boot: bytes
    psize: int
    meta: bytes
    flags: int = 0

    def pack(self) -> bytes:
        body = _HEAD.pack(MAGIC, self.seq, self.txnid, self.boot, self.psize, len(self.meta), self.flags) + self.meta
        return (body + struct.pack("<I", zlib.crc32(body))).ljust(SLOT_SIZE, b"\0")

    @classmethod
    def unpack(cls, raw: bytes) -> Record | None:
        """The record in one slot, or None if the slot is empty or torn."""
        if len(raw) < _CRC_AT + 4:
            return None
        magic, seq, txnid, boot, psize, mlen, flags = _HEAD.unpack_from(raw)
        if magic != MAGIC or mlen != META_LEN:
            return None
        (crc,) = struct.unpack_from("<I", raw, _CRC_AT)
        if zlib.crc32(raw[:_CRC_AT]) != crc:
            return None
        return cls(seq, txnid, boot, psize, raw[_HEAD.size : _CRC_AT], flags)


def meta_txnid(meta: bytes) -> int:
    return int.from_bytes(meta[_META_TXNID : _META_TXNID + 8], "little")


def read_metas(data: Path, psize: int) -> list[bytes]:
    """The MDB_meta bytes of meta pages 0 and 1 of an LMDB data file."""
    fd = os.open(data, os.O_RDONLY)
    try:
        return [os.pread(fd, META_LEN, i * psize + META_AT) for i in (0, 1)]
    finally:
        os.close(fd)


class CheckpointFile:
    """``<partition>/checkpoint``: two slots, written alternately, each whole
    record checksummed, so a torn write leaves the previous record readable."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / CHECKPOINT_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive against this process's threads and other processes."""
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def hold_writer(self) -> None:
        """Announce, until this file is closed, that this process writes the
        partition: a shared ``fcntl`` lock on byte 1 (the kernel drops it
        when the process dies)."""
        fcntl.lockf(self._fd, fcntl.LOCK_SH, 1, 1)

    def other_writers(self) -> bool:
        """Whether another process holds :meth:`hold_writer` now (F_GETLK:
        asks without taking anything)."""
        probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 1, 1, 0).ljust(_FLOCK_SIZE, b"\0")
        got = fcntl.fcntl(self._fd, fcntl.F_GETLK, probe)
        return struct.unpack_from(_FLOCK, got)[0] != fcntl.F_UNLCK

    def read(self) -> Record | None:
        """The newest intact record (under the lock, or a hint without it)."""
        return _newest(os.pread(self._fd, 2 * SLOT_SIZE, 0))

    def write(self, txnid: int, meta: bytes, psize: int) -> bool:
        """Record snapshot ``txnid`` durably, unless this boot has recorded it
        or a newer one already (caller holds the lock). True if written."""
        boot = boot_id()
        last = self.read()
        if last is not None and last.boot == boot and last.txnid >= txnid:
            return False
        seq = 0 if last is None else last.seq + 1
        rec = Record(seq, txnid, boot, psize, meta)
        os.pwrite(self._fd, rec.pack(), (seq % 2) * SLOT_SIZE)
        os.fdatasync(self._fd)
        return True


def rollback_due(directory: Path, rec: Record | None) -> bool:
    """Whether the first open of this boot must roll the partition in
    ``directory`` back to ``rec``: recorded in another boot, and the data
    file's newest meta page is not the recorded one."""
    data = directory / "data.mdb"
    if rec is None or rec.boot == boot_id() or not data.exists():
        return False
    metas = read_metas(data, rec.psize)
    for have in metas:
        if int.from_bytes(have[:4], "little") != _META_MAGIC:
            raise StoreFormatError(f"{data}: a meta page is not LMDB's (bad magic); refusing to recover into it")
    return max(metas, key=meta_txnid) != rec.meta


def read_record(directory: Path) -> Record | None:
    """The partition's checkpoint record, read without taking the lock (for
    read-only tools)."""
    try:
        raw = (directory / CHECKPOINT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    return _newest(raw)


def _newest(raw: bytes) -> Record | None:
    found = [Record.unpack(raw[i * SLOT_SIZE : (i + 1) * SLOT_SIZE]) for i in (0, 1)]
    records = [r for r in found if r is not None]
    return max(records, key=lambda r: r.seq) if records else None


def recover(directory: Path, ckpt: CheckpointFile) -> int | None:
    """Roll a partition back to its recorded checkpoint if the machine has
    restarted since (caller holds the lock, and the environment is not open
    in this boot: whoever opens it first records this boot). Returns the txn
    id rolled back to, or None when nothing needed doing."""
    rec = ckpt.read()
    if rec is None or not rollback_due(directory, rec):
        return None
    fd = os.open(directory / "data.mdb", os.O_WRONLY)
    try:
        for i in (0, 1):
            os.pwrite(fd, rec.meta, i * rec.psize + META_AT)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return rec.txnid


class Checkpointer:
    """Pins, syncs and records one environment's snapshots."""

    def __init__(self, env: lmdb.Environment, directory: Path, ckpt: CheckpointFile) -> None:
        self._env = env
        self._journal: Journal | None = None  # sync mode: see attach()
        self._part = 0
        self._data = directory / "data.mdb"
        self._ckpt = ckpt
        self._psize = int(env.stat()["psize"])
        self._pin: Any = None
        self._lock = threading.Lock()
        #: The newest snapshot this process made durable, and how many checkpoints it ran.
        self.durable_txnid = 0
        self.count = 0
        self._next_reader_check = 0.0
        self._data_fd = -1  # for trickle(), opened on first use

    def attach(self, journal: Journal, part: int) -> None:
        """From now on, checkpoints of this partition (index ``part``) also
        retire ``journal``'s covered segments."""
        self._journal = journal
        self._part = part

    def checkpoint(self, *, locked: bool = False) -> int:
        """Make every commit so far durable and recoverable as a rollback
        target; returns the snapshot's txn id. ``locked``: the caller holds
        the checkpoint file's lock already. With a journal (sync mode), the
        segments the checkpoint covers are deleted once it is recorded."""
        with self._lock:
            journal = self._journal
            if journal is None:
                pin, txnid, meta = self._pin_newest()
            else:
                with journal.lock:
                    pin, txnid, meta = self._pin_newest()
                    journal.rotate()  # so the segment before can be retired soon
            try:
                self._env.sync(True)
                if locked:
                    self._ckpt.write(txnid, meta, self._psize)
                else:
                    with self._ckpt.locked():
                        self._ckpt.write(txnid, meta, self._psize)
            except BaseException:
                pin.abort()
                raise
            old, self._pin = self._pin, pin
            if old is not None:
                old.abort()
            self.durable_txnid = txnid
            self.count += 1
            if journal is not None:
                journal.retire(self._part, txnid)
            # Safe now: this process's pin is at or before the recorded
            # snapshot, so clearing dead processes' pins cannot expose it.
            self._check_readers(journal)
            return txnid

    def trickle(self) -> None:
        """Start writing the data file's dirty pages back now, without waiting.
        Called often between checkpoints, it spreads their writes out, so a
        checkpoint's fdatasync has little left to write and does not hold up
        the journal's fdatasyncs behind a burst (docs/benchmarks.md)."""
        if _sync_file_range is None:
            return
        # A running checkpoint fdatasyncs the file anyway: never wait for it.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._data_fd < 0:
                self._data_fd = os.open(self._data, os.O_RDONLY | os.O_CLOEXEC)
            _sync_file_range(self._data_fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
        finally:
            self._lock.release()

    def _check_readers(self, journal: Journal | None) -> None:
        now = time.monotonic()
        if now >= self._next_reader_check:
            self._next_reader_check = now + READER_CHECK_S
            self._env.reader_check()
            if journal is not None:
                journal.collect_dead()  # dead writers' segments our checkpoints now cover

    def _pin_newest(self) -> tuple[Any, int, bytes]:
        # Under the writer lock no commit (and so no meta page write) can
        # happen: the read transaction begun now is at the newest snapshot,
        # and that snapshot's meta page is stable while it is read.
        w = self._env.begin(write=True)
        try:
            pin = self._env.begin()
            txnid = pin.id()
            try:
                meta = read_metas(self._data, self._psize)[txnid % 2]
                if meta_txnid(meta) != txnid or w.id() != txnid + 1:
                    raise StoreFormatError(
                        f"{self._data}: meta page {txnid % 2} holds txn {meta_txnid(meta)}, not the "
                        f"newest committed txn {txnid}; the file was changed outside LMDB"
                    )
            except BaseException:
                pin.abort()
                raise
            return pin, txnid, meta
        finally:
            w.abort()

    def release(self) -> None:
        with self._lock:
            if self._pin is not None:
                self._pin.abort()
                self._pin = None
            if self._data_fd >= 0:
                os.close(self._data_fd)
                self._data_fd = -1
