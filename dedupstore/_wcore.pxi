# Included at the end of _native.pyx: the per-call path of a write-behind
# window (dedupstore/window.py's Window, which subclasses WindowCore). Every
# call the window takes goes through run(), or (the store's calls, from
# _score.pxi) through _write_windows() and _one_in(), which share its
# _enter() and _leave(). Most of what run() did in Python was bookkeeping around one
# native op: here it is C, which hands the rare cases (opening the window, a
# failed log write, a full overlay, a slice of an apply under way) back to the Python
# methods.

from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME


#: dedupstore/window.py's globals (bind_window): MAX_PENDING is read there
#: at each call whose overlay has taken FULL_CHECK_WRITES writes, as the
#: module's own code would.
cdef dict _wglobals = None


cdef enum:
    # A call's overlay is checked against window.MAX_PENDING only once it
    # has taken this many writes (Overlay._nwrites, never fewer than the
    # keys it holds): until then the call reads neither the module's
    # globals nor the sizes of the overlay's six maps, each a cache miss
    # after the consumer's idle wait (1.6% of the calls' samples in the
    # main job). A MAX_PENDING below it takes effect at this many writes.
    C_FULL_CHECK_WRITES = 1024
FULL_CHECK_WRITES = C_FULL_CHECK_WRITES


cdef inline Py_ssize_t _max_pending() except? -1:
    # window.MAX_PENDING: a borrowed lookup, cheaper than Cython's for d[k].
    cdef PyObject *v = PyDict_GetItem(_wglobals, "MAX_PENDING")
    if v == NULL:
        raise KeyError("MAX_PENDING")
    return PyLong_AsSsize_t(<object>v)


#: window.CLOSED, which never changes.
cdef object _CLOSED = None
#: window.Window: a window is cast to WindowCore without the checked cast's
#: walk of its class's MRO (a cache miss of its own after an idle wait)
#: when it is one of these (_as_window).
cdef type _window_cls = None


def bind_window(dict module_globals) -> None:
    """Called once by dedupstore/window.py with its globals()."""
    global _wglobals, _CLOSED, _window_cls
    cls = module_globals["Window"]
    if not issubclass(cls, WindowCore):
        raise TypeError("bind_window() needs window.Window, a WindowCore subclass")
    _wglobals = module_globals
    _CLOSED = module_globals["CLOSED"]
    _window_cls = cls


cdef inline WindowCore _as_window(object w):
    # <WindowCore?>w, the check a type comparison for a window.Window.
    if type(w) is _window_cls:
        return <WindowCore>w
    return <WindowCore?>w


cdef class WindowLock:
    """A window's ``lock``: a plain mutex, as threading.Lock but taken and
    released from C by the calls without a method call each (with
    ``with``, acquire() and release() from Python). A blocked acquire waits
    with the GIL released; unlike threading.Lock's, it is not interrupted
    by a signal (the lock is held for one call's bookkeeping at a time, and
    an apply releases it while it writes LMDB)."""

    cdef PyThread_type_lock _l
    cdef bint _held

    def __cinit__(self):
        self._l = PyThread_allocate_lock()
        if self._l == NULL:
            raise MemoryError()
        self._held = False

    def __dealloc__(self):
        if self._l != NULL:
            if self._held:
                PyThread_release_lock(self._l)
            PyThread_free_lock(self._l)

    cdef inline int take(self) except -1:
        if not PyThread_acquire_lock(self._l, 0):
            with nogil:
                PyThread_acquire_lock(self._l, 1)
        self._held = True
        return 0

    cdef inline int give(self) except -1:
        if not self._held:
            raise RuntimeError("release of an unlocked window lock")
        self._held = False
        PyThread_release_lock(self._l)
        return 0

    def acquire(self, bint blocking=True):
        if not blocking:
            if not PyThread_acquire_lock(self._l, 0):
                return False
            self._held = True
            return True
        self.take()
        return True

    def release(self):
        self.give()

    def locked(self):
        return self._held

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.give()


cdef class WindowCore:
    """The state run() and apply_if_due() touch, and those two methods.
    The attributes are the Window's own (dedupstore/window.py documents
    them); the subclass keeps every other one in its __dict__."""

    cdef public WindowLock lock
    cdef public object applying, failed
    cdef public bint _broken, active, _calls_apply
    cdef public Overlay overlay
    cdef public object _log, _journal
    #: While an apply rotates the segment (Window._behind): the next one,
    #: which each call's record is also written to, and the bytes in it.
    cdef public LogFile _mirror
    cdef public uint64_t _mirror_size
    cdef public uint16_t _index
    cdef public uint64_t _records, _size, logged_bytes
    cdef public double _apply_s, _apply_at
    cdef public object _job

    def run(self, op, bint sync=True):
        """``op(overlay)`` under the window, its writes logged before it
        returns; window.CLOSED when no window could be opened (another
        process writes the partition): then nothing ran. Sync mode: the
        journal is fdatasynced up to the call's record (and whatever its
        verdict may rest on) before this returns; ``sync=False`` leaves that
        to the caller (Journal.sync of Journal.mark)."""
        cdef object result
        cdef Overlay ov = self._enter()
        if ov is None:
            return _CLOSED
        try:
            result = op(ov)
        except BaseException:
            self._abort(ov)
            raise
        if not self._leave(ov, sync):
            return _CLOSED
        return result

    cdef Overlay _enter(self):
        # The overlay, with self.lock held for the call's op; None (the
        # lock not held) when no window could be opened.
        self.lock.take()
        try:
            if self.failed is not None:
                raise self.failed
            if self._broken or (not self.active and not self._open()):
                self.lock.give()
                return None
        except BaseException:
            self.lock.give()
            raise
        return self.overlay

    cdef int _abort(self, Overlay ov) except -1:
        # After the op that _enter let run raised: its writes undone and the
        # lock released (the caller raises the op's error again).
        try:
            ov.rollback()
        finally:
            self.lock.give()
        return 0

    cdef bint _leave(self, Overlay ov, bint sync, bint claim=False) except -1:
        # After the op that _enter let run: log its writes and release the
        # lock, then sync (sync mode) or make a slice of the apply under
        # way (flush mode; a claim only if none was made lately, see
        # _apply_if_due). False: the log write
        # failed, the op was undone and the window is being given up; the
        # caller takes the ordinary path.
        cdef Py_ssize_t n
        cdef object mark = None
        try:
            try:
                if self._journal is None:
                    n = ov._log_into(<LogFile?>self._log, self._index, self._records, self._size,
                                     self._mirror, self._mirror_size)
                    self._size += <uint64_t>n
                    if self._mirror is not None:
                        self._mirror_size += <uint64_t>n
                else:
                    n, mark = self._journal.log_window(ov, self._index, self._label)
            except OSError as exc:
                self._log_failed(exc)
                return False
            if n:
                self._records += 1
                self.logged_bytes += <uint64_t>n
                # A full overlay is applied at once, unless an apply is
                # running already (it holds ``applying``; waiting for it here
                # would invert the lock order): then the next one takes it.
                if (ov._nwrites >= C_FULL_CHECK_WRITES and ov._count() >= _max_pending()
                        and self.applying.acquire(False)):
                    try:
                        self._apply()
                    finally:
                        self.applying.release()
        finally:
            self.lock.give()
        if mark is not None and sync:
            self._journal.sync(mark)
        if sync and self._calls_apply:
            self._apply_if_due(claim)
        return True

    def apply_if_due(self):
        """After a flush-mode call: make a slice of the writes of the apply
        the flusher has under way (Window._help), if it has one.

        The flusher's tick applies a window that is due, in a transaction
        of its own, but the calls make its puts, a slice each
        (:data:`window.SLICE_KEYS`), while it waits without the GIL (and
        makes what they leave once they stop): a background thread that
        writes through py-lmdb needs the GIL back after each of its LMDB
        calls, and retaking it at once after each release keeps a call that
        waits for it waiting until the loop ends (docs/benchmarks.md). The
        commit, one LMDB call, is the flusher's."""
        self._apply_if_due()

    cdef int _apply_if_due(self, bint claim=False) except -1:
        # A claim's caller waits for its verdict before it performs the
        # effect: it leaves the slices to the next completion or release
        # (whose effect is done), unless none was taken lately (Window._help).
        if not self._calls_apply:
            return 0
        if self._job is not None:
            self._help(claim)
        return 0


#: What write_windows runs in each partition's window.
cdef enum:
    C_BATCH_CLAIM = 0
    C_BATCH_COMPLETE = 1
    C_BATCH_RELEASE = 2
BATCH_CLAIM, BATCH_COMPLETE, BATCH_RELEASE = C_BATCH_CLAIM, C_BATCH_COMPLETE, C_BATCH_RELEASE


cdef tuple _write_windows(list windows, list spaces, Parts *parts, int kind, list keys, object a, object b,
                          int64_t now, int64_t lease, object event_times, object claimant, list results):
    """A batch's partitions in their write-behind windows, flush mode, one
    after another, as the store's Window.run of claim_batch (``kind``
    BATCH_CLAIM: ``a`` the digests), complete_batch (BATCH_COMPLETE: ``a``
    the tokens, ``b`` the outcomes) or release_batch (BATCH_RELEASE: ``a``
    the tokens) would run them; ``parts`` holds the keys grouped by
    partition (_parts_group), ``windows[p]`` is partition p's WindowCore
    (None: it has none). Every partition is tried even if one fails.
    Returns (the partitions whose window could not take the call, to run by
    the ordinary path; the first error, or None)."""
    cdef list left = []
    cdef object first = None
    cdef object w
    cdef WindowCore wc
    cdef Overlay ov
    cdef Space space
    cdef uint32_t p
    cdef int g
    cdef const Py_ssize_t *order
    cdef Py_ssize_t m
    for g in range(parts.ngroups):
        p = parts.part[g]
        order, m = parts.idx + parts.start[g], parts.count[g]
        w = windows[p]
        if w is None:
            left.append(p)
            continue
        wc = _as_window(w)
        space = <Space?>spaces[p]
        try:
            ov = wc._enter()
            if ov is None:
                left.append(p)
                continue
            try:
                if kind == C_BATCH_CLAIM:
                    _claim_batch(space, order, m, keys, a, now, lease, event_times, claimant, results, True, ov)
                elif kind == C_BATCH_COMPLETE:
                    _complete_batch(space, order, m, keys, a, b, now, results, ov)
                else:
                    _release_batch(space, order, m, keys, a, now, results, ov)
            except BaseException:
                wc._abort(ov)
                raise
            if not wc._leave(ov, True, kind == C_BATCH_CLAIM):
                left.append(p)
        except BaseException as exc:
            if first is None:
                first = exc
    return left, first


cdef object _one_in(WindowCore wc, int kind, Space space, bytes key, object a, object b, int64_t now,
                    int64_t lease, int64_t event_time, object claimant, object event_id):
    # One key's ``kind`` of op under partition's write-behind window ``wc``,
    # as its run() of that op would: a claim (``a`` the digest), a
    # completion (``a`` the token, ``b`` the outcome) or a release (``a``
    # the token); its result, or window.CLOSED (nothing ran).
    cdef Overlay ov = wc._enter()
    cdef object res
    if ov is None:
        return _CLOSED
    try:
        if kind == C_BATCH_CLAIM:
            res = space._claim_one(ov, key, a, now, lease, event_time, claimant, event_id, True)
        elif kind == C_BATCH_COMPLETE:
            res = space.complete(ov, key, a, b, now)
        else:
            res = space.release(ov, key, a, now)
    except BaseException:
        wc._abort(ov)
        raise
    if not wc._leave(ov, True, kind == C_BATCH_CLAIM):
        return _CLOSED
    return res
