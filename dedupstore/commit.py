"""Group commit: writers to one partition share a transaction and its fsync.

A thread that finds no commit in flight becomes the leader: it takes every
operation queued so far, runs them in one LMDB write transaction and commits
once (no fsync: dedupstore/checkpoint.py). In sync mode it then appends the
transaction's writes to the journal and fdatasyncs it (dedupstore/journal.py;
the GIL is released meanwhile, so others keep queueing). Then it hands
leadership to the first waiter that arrived meanwhile. With one caller this
is exactly one transaction per call; with eight, one fdatasync serves up to
eight claims.

A leader lingers: when the last commit carried more operations than are
queued now, the callers it released are probably about to queue again, so the
leader waits for them, at most ``LINGER_FRACTION`` of the last commit's
duration (and never more than ``MAX_LINGER_S``), before it starts. Without
that, closed-loop callers split into two half-size groups taking turns, and
each fsync carries half what it could. A lone caller never lingers.

Every write transaction first asks whether another process holds the
partition's write-behind window (dedupstore/window.py) and, if
it does, waits for it to be given up; in the process that holds one, the
transaction carries the window's unapplied writes first, and holds the
window's calls up meanwhile (flush-mode maintenance runs beside the window
instead: Window.beside).
"""

from __future__ import annotations

import functools
import threading
import time
from _thread import allocate_lock
from collections.abc import Callable
from typing import Any

import lmdb

from .errors import DedupError, StoreFullError, WriterBusyError
from .journal import Journal, JournalTxn
from .window import CHECK_S, WAIT_LIMIT_S, WAIT_POLL_S, Window, WindowBusy, settle_alone

Op = Callable[[Any], Any]  # receives the write transaction, returns the caller's result

#: A leader waits for the callers of the last commit at most this share of
#: that commit's duration, and at most MAX_LINGER_S.
LINGER_FRACTION = 0.5
MAX_LINGER_S = 0.0005


class _Waiter:
    __slots__ = ("op", "durable", "defer", "mark", "result", "error", "gate", "lead", "where", "ops")

    def __init__(self, op: Op, durable: bool, defer: bool = False, where: Any = None, ops: int = 1) -> None:
        self.op = op
        #: StoreCommitter: the partition's GroupCommitter this op writes through.
        self.where = where
        #: Callers' operations this op runs (for the ``ops`` count).
        self.ops = ops
        self.durable = durable
        #: The caller runs the journal fdatasync itself (run_deferred), and
        #: gets the mark to pass to it here.
        self.defer = defer
        self.mark: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        #: Held while the caller waits; the leader releases it when the
        #: caller's commit is done or the caller is to lead. A bare lock is
        #: the cheapest wake-up Python has (an Event is a Condition and
        #: two more locks), and a wake-up is a context switch.
        self.gate: Any = None
        self.lead = False


class GroupCommitter:
    """Serialises and batches the write transactions of one LMDB environment."""

    def __init__(
        self, env: lmdb.Environment, describe: str, journal: Journal | None = None,
        codes: dict[int, int] | None = None, checkpoint: Callable[[], Any] | None = None,
        others: Callable[[], bool] | None = None, part: int = 0, trickle: Callable[[], Any] | None = None,
        settle: Callable[[Any, str | None], Callable[[], None] | None] | None = None, window: Window | None = None,
    ) -> None:
        self._env = env
        #: settle(txn, mine): waits out (WindowBusy) or takes over another
        #: process's write-behind window (dedupstore/window.py); ``window``:
        #: this process's, whose unapplied writes each transaction carries first.
        self._settle = settle
        self._window = window
        self._describe = describe
        #: sync mode: each commit's writes are appended to the journal and
        #: fdatasynced before its callers are released; if that fails, every
        #: caller gets the error. ``codes``: database handle -> journal code.
        self._journal = journal
        self._part = part  # this environment's partition index, in journal records
        #: sync mode: called right after a journal fdatasync, to have the data
        #: file's writeback started then (by the store's flusher thread), so
        #: that it overlaps the next batch's work rather than the next
        #: fdatasync (docs/benchmarks.md).
        self._trickle = trickle
        self._codes = codes or {}
        #: Runs once when a batch finds the map full, before one retry (the
        #: pin moves, so freed pages become reusable). In sync mode beside
        #: other writer processes, a journal record of ours could be replayed
        #: without a commit of theirs it was built on, so while ``others()``
        #: (asked under the writer lock), and for the first commit after they
        #: leave, a durable commit is checkpointed instead.
        self._checkpoint = checkpoint
        self._others = others
        self._was_shared = True
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: list[_Waiter] = []
        self._busy = False
        self._lingering = False  # a leader waits on _arrived
        self._last_batch = 0  # operations the last commit carried
        self._last_commit_s = 0.0  # how long it took
        #: Transactions committed and operations they carried (for stats()).
        self.commits = 0
        self.ops = 0

    def run(self, op: Op, *, durable: bool = True) -> Any:
        """Run ``op`` in a group commit and return its result. ``durable=False``
        (maintenance: eviction, sealing, filters) journals the writes but does
        not wait for them to reach the disk: the next durable commit's
        fdatasync carries them, as it carries everything appended before it."""
        return self._wait(_Waiter(op, durable)).result

    def run_deferred(self, op: Op, ops: int = 1) -> tuple[Any, int | None]:
        """Run ``op`` like :meth:`run`, but leave the journal fdatasync to the
        caller: returns the result and the journal mark to sync (None when
        nothing needs it). A batch over several partitions commits each, then
        syncs the shared journal once, up to the greatest mark. ``ops``: how
        many callers' operations ``op`` carries."""
        w = self._wait(_Waiter(op, True, defer=True, ops=ops))
        return w.result, w.mark

    def _wait(self, waiter: _Waiter) -> _Waiter:
        with self._lock:
            self._queue.append(waiter)
            if self._busy:
                gate = waiter.gate = allocate_lock()
                gate.acquire()
                if self._lingering:
                    self._arrived.notify()
            else:
                self._busy = True
                waiter.lead = True
        if not waiter.lead:
            waiter.gate.acquire()  # released by the leader: done, or lead now
        if waiter.lead:
            self._lead()
        if waiter.error is not None:
            raise waiter.error
        return waiter

    def _lead(self) -> None:
        with self._lock:
            want = self._last_batch
            if want > len(self._queue):
                self._lingering = True
                deadline = time.monotonic() + min(MAX_LINGER_S, LINGER_FRACTION * self._last_commit_s)
                while len(self._queue) < want:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._arrived.wait(left):
                        break
                self._lingering = False
            batch = self._queue
            self._queue = []
        synced = False
        try:
            started = time.monotonic()
            mark = self._execute(batch)
            if mark is not None and not any(w.durable and not w.defer for w in batch):
                for w in batch:
                    w.mark = mark  # the deferring callers sync it themselves
                mark = None
            if mark is not None:
                # Before leadership passes on: while this fdatasync runs, the
                # next batch gathers every caller that arrives. (Handing over
                # first, to overlap the next transaction with it, was
                # measured: it split 8 threads into batches of 2.7 instead of
                # 6.6, and ran more fdatasyncs for fewer claims.)
                assert self._journal is not None
                try:
                    synced = self._journal.sync(mark)
                except BaseException as exc:
                    for w in batch:
                        w.error = exc
            self._last_batch = len(batch)
            self._last_commit_s = time.monotonic() - started
        finally:
            nxt: _Waiter | None = None
            with self._lock:
                if self._queue:
                    nxt = self._queue[0]
                    nxt.lead = True
                else:
                    self._busy = False
            for w in batch:
                if w.gate is not None:
                    w.gate.release()
            if nxt is not None:
                nxt.gate.release()
        if synced and self._trickle is not None:
            self._trickle()

    def _execute(self, batch: list[_Waiter]) -> int | None:
        """Run the batch; returns the journal mark its callers wait for, if any."""
        try:
            try:
                mark = self._attempt_waiting(batch)
            except lmdb.MapFullError:
                if self._checkpoint is None:
                    raise
                # A checkpoint moves its pin, so LMDB may reuse the pages
                # freed since the last one; then the batch gets one more try.
                self._checkpoint()
                mark = self._attempt_waiting(batch)
        except lmdb.MapFullError:
            full = StoreFullError(
                f"{self._describe} reached its map size ({self._env.info()['map_size']:,} bytes); "
                f"nothing from this batch was written and everything committed before is intact. "
                f"Reopen with a larger map_size, or let eviction free space"
            )
            for w in batch:
                w.error = full
            return None
        except BaseException as exc:
            for w in batch:
                w.error = exc
            return None
        self.commits += 1
        self.ops += sum(w.ops for w in batch)
        return mark

    def _attempt_waiting(self, batch: list[_Waiter]) -> int | None:
        """:meth:`_attempt`, again every WAIT_POLL_S while another process
        holds the partition's write-behind window (it looks every
        window.CHECK_S and then gives it up), at most WAIT_LIMIT_S."""
        deadline = 0.0
        while True:
            try:
                return self._attempt(batch)
            except WindowBusy as busy:
                now = time.monotonic()
                deadline = deadline or now + WAIT_LIMIT_S
                if now >= deadline:
                    raise WriterBusyError(
                        f"{self._describe}: another process (write-behind log {busy.owner.name}) has held this "
                        f"partition's write-behind window for {WAIT_LIMIT_S:g} s although this "
                        f"process wants to write; a live process looks for other writers every "
                        f"{CHECK_S * 1000:g} ms and gives the window up, so that one is stopped or hung. "
                        f"Nothing of this call was written"
                    ) from None
                time.sleep(WAIT_POLL_S)

    def _attempt(self, batch: list[_Waiter]) -> int | None:
        """One transaction for the batch; ops are re-run from scratch on a
        retry. Returns the journal mark to fdatasync before the callers
        return (sync mode, when the batch wrote and a caller waits)."""
        window = self._window
        if window is None:
            return self._transaction(batch)
        with window.applying, window.lock:  # before LMDB's writer lock, as the window's own applies take them
            window.before()
            return self._transaction(batch)

    def _transaction(self, batch: list[_Waiter]) -> int | None:
        journal = self._journal
        window = self._window
        cleanup = None
        catch_up = False
        txn = self._env.begin(write=True)
        try:
            if self._settle is not None:
                cleanup = self._settle(txn, None if window is None else window.name)
                txn, cleanup = settle_alone(self._env, txn, cleanup)
            txnid = txn.id()
            if window is not None:
                window.prelude(txn)
            if journal is not None and self._others is not None:
                # Asked under the writer lock: no other process can commit
                # between this answer and our commit.
                shared = self._others()
                # While our sync-mode window is open nobody else committed
                # since its opening checkpoint (dedupstore/window.py).
                fenced = window is not None and window.active
                if shared or (self._was_shared and not fenced):
                    journal = None  # checkpointed below instead
                # The first commit after the others left is checkpointed even
                # when nobody waits for it (maintenance): later journal records
                # are built on it.
                catch_up = self._was_shared and not shared and not fenced
                self._was_shared = shared
            jt = JournalTxn(txn, self._codes) if journal is not None else None
            target = txn if jt is None else jt
            durable = False
            for w in batch:
                durable = durable or w.durable
                w.error = None
                try:
                    w.result = w.op(target)
                except DedupError as exc:
                    # Ops decide before they write, so a refused op (a stale
                    # token, say) has changed nothing and the others proceed.
                    w.error = exc
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        if window is not None:
            window.committed()
        if cleanup is not None:
            cleanup()
        if jt is not None:
            assert journal is not None
            if not durable:
                if jt.ops:
                    with journal.lock:
                        journal.append(self._part, txnid, jt.ops)
                return None
            with journal.lock:
                # A batch that wrote nothing still waits for what is
                # journaled before it: its verdicts may rest on it.
                return journal.append(self._part, txnid, jt.ops) if jt.ops else journal.mark()
        if self._journal is not None and (durable or catch_up) and self._checkpoint is not None:
            self._checkpoint()  # beside another writer process: checkpointed instead
        return None


class StoreCommitter(GroupCommitter):
    """sync mode: single-key writes to every partition of a store share one
    leader and one journal fdatasync.

    Per-partition group commit splits concurrent callers by partition: eight
    threads over four partitions made groups of about two, each waiting for
    an fdatasync of its own of the one store journal. Here the leader takes
    every queued write, whatever its partition, runs each partition's share
    as one transaction through that partition's committer (which still orders
    it with maintenance, and still checkpoints instead of journaling beside
    another writer process), then fdatasyncs the journal once, up to the
    greatest mark, before any of them returns.
    """

    def __init__(self, journal: Journal, trickle: Callable[[], Any] | None = None) -> None:
        super().__init__(None, "store", journal=journal, trickle=trickle)  # type: ignore[arg-type]

    def run_in(self, where: GroupCommitter, op: Op) -> Any:
        """Run ``op`` in a transaction of ``where``'s partition; durable."""
        return self._wait(_Waiter(op, True, where=where)).result

    def _execute(self, batch: list[_Waiter]) -> int | None:
        groups: dict[int, list[_Waiter]] = {}
        for w in batch:
            groups.setdefault(id(w.where), []).append(w)
        marks = []
        for group in groups.values():
            where = group[0].where
            try:
                _, mark = where.run_deferred(functools.partial(_run_each, group), ops=len(group))
            except BaseException as exc:
                for w in group:
                    w.error = exc
                continue
            if mark is not None:
                marks.append(mark)
        self.commits += 1
        self.ops += len(batch)
        return max(marks) if marks else None


def _run_each(group: list[_Waiter], txn: Any) -> None:
    # One transaction for a partition's share of the batch; each op's refusal
    # is its own (as in GroupCommitter._attempt), and a retry after a full map
    # runs them all again from scratch.
    for w in group:
        w.error = None
        try:
            w.result = w.op(txn)
        except DedupError as exc:
            w.error = exc
