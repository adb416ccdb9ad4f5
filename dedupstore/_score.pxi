cimport cython
from cpython.object cimport Py_TYPE, PyTypeObject
from cpython.tuple cimport PyTuple_GET_ITEM
from posix.time cimport CLOCK_MONOTONIC

cdef extern from "Python.h":
    # Cython's cpython.type declares its argument as an object, which C
    # compilers refuse as a PyTypeObject pointer under -Werror.
    object _type_alloc "PyType_GenericAlloc" (PyTypeObject *type, Py_ssize_t nitems)

# Included at the end of _native.pyx: the per-call path of the store
# (dedupstore/store.py's DedupStore subclasses StoreCore, its _Namespace
# NamespaceCore) and the verdicts it returns (ClaimResult, which
# dedupstore/verdicts.py exports; its BatchResult subclasses BatchCore). In
# Python, the calls' own lines, their frames and the verdicts' construction cost about
# as much as the native work under them; here they are C, which hands the
# rare cases (a namespace not yet looked up, a closed store, a partition
# whose window cannot take the call, a lease or event time given in another
# form, a lease error) back to the Python functions bound by bind_store()
# and the subclass's methods.

#: bind_store()'s arguments, read at each call.
cdef object _batch_cls = None      # verdicts.BatchResult
cdef tuple _status_by_code = None  # verdicts.STATUS_BY_CODE
cdef bint _leased[8]               # verdicts.LEASED_CODES
cdef object _small_bytes = None    # store._small_bytes
cdef object _lease_us = None       # store._lease_us
cdef object _time_us_slow = None   # store._time_us
cdef Py_ssize_t _max_claimant = 0, _max_event_id = 0, _max_batch = 0
cdef tuple _EMPTY = ()
#: time.time, the default clock: StoreCore reads it without the call.
cdef object _time_time = None


def bind_store(batch_cls, tuple status_by_code, tuple leased_codes, small_bytes,
               lease_us, time_us_slow, Py_ssize_t max_claimant, Py_ssize_t max_event_id,
               Py_ssize_t max_batch) -> None:
    """Called once by dedupstore/store.py with what the calls use of it and
    of dedupstore/verdicts.py."""
    global _batch_cls, _status_by_code, _small_bytes, _lease_us, _time_us_slow
    global _max_claimant, _max_event_id, _max_batch
    if not issubclass(batch_cls, BatchCore):
        raise TypeError("bind_store() needs a BatchCore subclass")
    if len(status_by_code) != len(leased_codes) or len(leased_codes) != DS_BEYOND_HORIZON + 1:
        raise ValueError(f"bind_store() needs a status and a lease flag for each of the {DS_BEYOND_HORIZON + 1} "
                         f"native status codes")
    for i, flag in enumerate(leased_codes):
        _leased[i] = flag
    _batch_cls, _status_by_code = batch_cls, status_by_code
    _small_bytes, _lease_us, _time_us_slow = small_bytes, lease_us, time_us_slow
    _max_claimant, _max_event_id, _max_batch = max_claimant, max_event_id, max_batch
    global _time_time
    import time
    _time_time = time.time


cdef inline double _monotonic() noexcept:
    # time.perf_counter's clock on Linux, in seconds.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


@cython.final
cdef class AcceleratedClock:
    """A store clock that stands still at ``base`` (default: the wall
    clock's time at construction) until :meth:`start`, then runs ``scale``
    times faster than the wall clock: ``dedupstore bench``'s, so that its
    horizon passes in seconds. Native, like time.time, so that a store's
    calls read it without running Python code (StoreCore._now): a Python
    callable's call costs each call more than the store's own read of the
    time."""

    cdef readonly double scale, base
    cdef double _t0
    cdef bint _started

    def __init__(self, double scale, base=None):
        import time
        self.scale = scale
        self.base = time.time() if base is None else <double>base
        self._started = False

    def start(self) -> None:
        """Set the clock running from ``base``, now."""
        self._t0 = _monotonic()
        self._started = True

    cdef inline double now(self) noexcept:
        if not self._started:
            return self.base
        return self.base + (_monotonic() - self._t0) * self.scale

    def __call__(self) -> float:
        return self.now()


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    enum:
        T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member

#: bind_record()'s: verdicts.Record, where its fields' slots are (in
#: RECORD_FIELDS order) and verdicts.RecordState's members.
cdef object _record_cls = None
cdef Py_ssize_t _record_offsets[15]
cdef object _rs_pending = None, _rs_unknown = None, _rs_completed = None

#: verdicts.Record's fields, in the order make_record() fills them.
RECORD_FIELDS = ("namespace", "key", "state", "intent_digest", "first_seen", "lease_expires", "completed_at",
                 "token", "attempts", "event_time", "event_id", "claimant", "outcome", "other_events",
                 "generation")


def bind_record(cls, pending, unknown, completed) -> None:
    """Called once by dedupstore/verdicts.py: ``cls`` is its Record, a
    frozen dataclass with slots whose fields are RECORD_FIELDS in that
    order; the others are RecordState's members."""
    global _record_cls, _rs_pending, _rs_unknown, _rs_completed
    import dataclasses
    import types
    names = tuple(f.name for f in dataclasses.fields(cls))
    if names != RECORD_FIELDS:
        raise TypeError(f"bind_record() needs a dataclass of the fields {RECORD_FIELDS}; got {names}")
    slots = tuple(cls.__dict__.get(name) for name in names)
    if cls.__new__ is not object.__new__ or not all(type(d) is types.MemberDescriptorType for d in slots):
        raise TypeError("bind_record() needs a dataclass with slots=True and object's __new__")
    cdef PyMemberDef *m
    cdef Py_ssize_t i
    cdef Py_ssize_t offsets[15]
    for i in range(len(slots)):
        m = (<PyMemberDescrObject *><PyObject *>slots[i]).d_member
        if (m.type != T_OBJECT_EX or m.offset < <Py_ssize_t>sizeof(PyObject)
                or m.offset + <Py_ssize_t>sizeof(PyObject *) > (<PyTypeObject *>cls).tp_basicsize):
            raise TypeError(f"bind_record() needs {names[i]!r} to be a plain object slot of {cls.__name__}")
        offsets[i] = m.offset
    # Only a class that passed every check replaces the bound one.
    memcpy(_record_offsets, offsets, sizeof(offsets))
    _record_cls = cls
    _rs_pending, _rs_unknown, _rs_completed = pending, unknown, completed


cdef inline int _fill(object rec, Py_ssize_t i, object value) except -1:
    # Slot i of a Record being made (all of them empty when it is
    # allocated): what its member descriptor's __set__ would do, written
    # straight into the slot, without the frozen dataclass's __setattr__
    # (which refuses) or the descriptor's call.
    cdef PyObject **slot = <PyObject **>(<char *><PyObject *>rec + _record_offsets[i])
    cdef PyObject *old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject *>value
    if old != NULL:
        Py_DECREF(<object>old)
    return 0


cdef inline object _us_or_none(int64_t us):
    return None if us == DS_NO_TIME else us / 1e6


cdef object _make_record(object namespace, bytes key, uint32_t generation, bytes raw, int64_t now):
    # Record.from_raw: the Record of ``raw`` at ``now`` (us) in ``generation``,
    # made without its __init__ (whose keyword call and fifteen
    # object.__setattr__ cost ten times the decoding).
    cdef ds_record r
    if _record_cls is None:
        raise RuntimeError("dedupstore.verdicts has not bound its Record (bind_record)")
    _decode(raw, &r)
    cdef bint done = r.state == DS_STATE_COMPLETED
    cdef object rec = _type_alloc(<PyTypeObject *>_record_cls, 0)
    _fill(rec, 0, namespace)
    _fill(rec, 1, key)
    _fill(rec, 2, _rs_completed if done else _rs_pending if r.until > now else _rs_unknown)
    _fill(rec, 3, PyBytes_FromStringAndSize(<char *>r.intent, 16) if r.flags & DS_F_INTENT else None)
    _fill(rec, 4, r.first_seen / 1e6)
    _fill(rec, 5, None if done else r.until / 1e6)
    _fill(rec, 6, r.until / 1e6 if done else None)
    _fill(rec, 7, r.token)
    _fill(rec, 8, r.attempts)
    _fill(rec, 9, _us_or_none(r.event_time))
    _fill(rec, 10, PyBytes_FromStringAndSize(<char *>r.event_id, r.event_id_len) if r.event_id_len else None)
    _fill(rec, 11, PyBytes_FromStringAndSize(<char *>r.claimant, r.claimant_len) if r.claimant_len else None)
    _fill(rec, 12, PyBytes_FromStringAndSize(<char *>r.outcome, r.outcome_len) if done else None)
    _fill(rec, 13, r.other_events)
    _fill(rec, 14, generation)
    return rec


def make_record(namespace, bytes key, uint32_t generation, bytes raw, int64_t now_us):
    """verdicts.Record.from_raw: the Record of stored record ``raw``."""
    return _make_record(namespace, key, generation, raw, now_us)


@cython.freelist(32)
cdef class ClaimResult:
    """The verdict for one claim.

    ``token`` is set for NEW, UNKNOWN and BEYOND_HORIZON (the caller holds the
    lease); ``outcome`` for DUPLICATE; ``retry_after`` (seconds) for
    IN_PROGRESS; ``record`` is the stored record the verdict rests on.
    """

    # Made in C by the store's calls (_verdict), from a free list.
    cdef public object status, token, retry_after, namespace, key, _raw, _record
    cdef public int64_t _gen, _now

    def __init__(self, status, token, retry_after, namespace, key, raw, int64_t gen, int64_t now_us):
        self.status = status
        self.token = token
        self.retry_after = retry_after
        self.namespace = namespace
        self.key = key
        self._raw = raw
        self._gen = gen
        self._now = now_us
        self._record = None

    @classmethod
    def from_record(cls, status, token, retry_after, namespace, key, record):
        """A verdict whose record is already decoded (the service's clients build these)."""
        res = cls(status, token, retry_after, namespace, key, None, 0, 0)
        res._record = record
        return res

    @property
    def record(self):
        # Decoded on first use: most callers of a NEW verdict never look.
        if self._record is None and self._raw is not None:
            self._record = _make_record(self.namespace, self.key, <uint32_t>self._gen, self._raw, self._now)
        return self._record

    @property
    def outcome(self):
        if self.status is not _status_by_code[DS_DUPLICATE]:
            return None
        if self._record is not None:
            return self._record.outcome
        return None if self._raw is None else record_outcome(self._raw)

    @property
    def holds_lease(self):
        return self.token is not None

    def __repr__(self):
        extra = ""
        if self.token is not None:
            extra = f", token={self.token}"
        elif self.retry_after is not None:
            extra = f", retry_after={self.retry_after:.3f}"
        return f"ClaimResult({self.status.name}, {self.namespace}/{self.key!r}{extra})"

    def __reduce__(self):
        return _claim_result, (type(self), self.status, self.token, self.retry_after, self.namespace, self.key,
                               self._raw, self._gen, self._now, self._record)


def _claim_result(cls, status, token, retry_after, namespace, key, raw, gen, now_us, record):
    # Unpickling a ClaimResult (its __reduce__).
    res = cls(status, token, retry_after, namespace, key, raw, gen, now_us)
    res._record = record
    return res


cdef inline int _code_of(tuple res) except -1:
    cdef int code = res[0]
    if not 0 <= code < len(_status_by_code):
        raise ValueError(f"verdict code {code} is not a status")
    return code


cdef object _verdict(tuple res, object namespace, bytes kb, int64_t now):
    # The ClaimResult of verdict tuple ``res`` (Space.claim's), as
    # ClaimResult(status, token, retry_after, namespace, key, raw, gen, now).
    cdef int code = _code_of(res)
    cdef ClaimResult r = ClaimResult.__new__(ClaimResult)
    r.status = _status_by_code[code]
    r.token = res[1] if _leased[code] else None
    r.retry_after = res[2] / 1e6 if code == DS_IN_PROGRESS else None
    r.namespace = namespace
    r.key = kb
    r._raw = res[3]
    r._gen = res[6]
    r._now = now
    return r


cdef class BatchCore:
    """A batch's verdicts' fields (dedupstore/verdicts.py's BatchResult
    documents them and adds the sequence methods)."""

    # ``_results`` caches each key's ClaimResult once made; ``_make(i)``
    # makes one. A batch claim_many made in C has neither (None) until a
    # ClaimResult is asked for, nor its columns (``_statuses``, ``_tokens``,
    # ``_retry``: None): its verdict tuples, keys, namespace and time are
    # kept here instead (_verdict), and each column is made from the tuples
    # when asked for, as the copy a column's reader gets anyway.
    cdef public list _results, _statuses, _tokens, _retry
    cdef public object _make
    cdef list _rows, _kbs
    cdef object _namespace
    cdef int64_t _now

    def __len__(self):
        return len(self._rows) if self._rows is not None else len(self._statuses)

    @property
    def statuses(self):
        """Each key's verdict (a copy)."""
        cdef Py_ssize_t i, n
        cdef list out
        if self._rows is None:
            return list(self._statuses)
        n = len(self._rows)
        out = [None] * n
        for i in range(n):
            out[i] = _status_by_code[_code_of(<tuple>self._rows[i])]
        return out

    @property
    def tokens(self):
        """Each key's token: set for the verdicts that hold a lease (a copy)."""
        cdef Py_ssize_t i, n
        cdef list out
        cdef tuple res
        if self._rows is None:
            return list(self._tokens)
        n = len(self._rows)
        out = [None] * n
        for i in range(n):
            res = <tuple>self._rows[i]
            if _leased[_code_of(res)]:
                out[i] = res[1]
        return out

    @property
    def retry_after(self):
        """Each key's ``retry_after`` in seconds: set for IN_PROGRESS (a copy)."""
        cdef Py_ssize_t i, n
        cdef list out
        cdef tuple res
        if self._rows is None:
            return [None] * len(self._statuses) if self._retry is None else list(self._retry)
        n = len(self._rows)
        out = [None] * n
        for i in range(n):
            res = <tuple>self._rows[i]
            if _code_of(res) == DS_IN_PROGRESS:
                out[i] = res[2] / 1e6
        return out

    def _tallies(self):
        """(status, how many keys got it) of each status some key got, in
        code order, counted in C (a batch made by claim_many); None for a
        batch made of columns."""
        cdef Py_ssize_t counts[8]
        cdef Py_ssize_t i
        cdef list out = []
        if self._rows is None:
            return None
        memset(counts, 0, sizeof(counts))
        for i in range(len(self._rows)):
            counts[_code_of(<tuple>self._rows[i])] += 1  # below len(_status_by_code): 6 (bind_store)
        for i in range(len(_status_by_code)):
            if counts[i]:
                out.append((_status_by_code[i], counts[i]))
        return out

    def _verdict(self, Py_ssize_t i):
        """Key i's ClaimResult, made from its verdict tuple (a batch made
        by claim_many; IndexError otherwise)."""
        if self._rows is None:
            raise IndexError("this BatchResult keeps no verdict tuples")
        if not 0 <= i < len(self._rows):  # the module does not check bounds
            raise IndexError(f"BatchResult index out of range: {i} of {len(self._rows)}")
        return _verdict(<tuple>self._rows[i], self._namespace, <bytes>self._kbs[i], self._now)


cdef object _batch_result(list results, object namespace, list kbs, int64_t now, int64_t *counts):
    # claim_many's BatchResult of its verdict tuples, tallied in ``counts``
    # (which checks each one's op code): its columns and a key's ClaimResult
    # are made when asked for.
    _tally(results, counts)
    # tp_new of the bound subclass without a method call (BatchCore.__new__
    # of a class not known here would be one).
    # (bind_store checked that _batch_cls is a BatchCore subclass: cast to
    # type unchecked, or its metaclass's MRO would be walked at each call.)
    cdef BatchCore out = <BatchCore>(<PyTypeObject *>_batch_cls).tp_new(<type>_batch_cls, <PyObject *>_EMPTY, NULL)
    out._rows, out._kbs, out._namespace, out._now = results, kbs, namespace, now
    return out


cdef bint _all_applied(list results, bint rows) except -1:
    # Whether every one of a batch's results is OP_APPLY or OP_NOOP: each
    # the op code (``rows`` false) or a tuple that starts with it.
    cdef object r
    cdef int code
    for r in results:
        code = (<tuple>r)[0] if rows else r
        if code != DS_OP_APPLY and code != DS_OP_NOOP:
            return False
    return True


#: The class of the namespace objects _ns_of last checked (store.py's
#: _Namespace): one of those is cast without the checked cast's walk of its
#: MRO (a cache miss of its own after an idle wait).
cdef type _ns_cls = None


cdef NamespaceCore _ns_checked(object ns):
    # <NamespaceCore?>ns, its class remembered for _ns_of.
    global _ns_cls
    cdef NamespaceCore out = <NamespaceCore?>ns
    _ns_cls = type(ns)
    return out


cdef class NamespaceCore:
    """A namespace's fields as the calls read them (dedupstore/store.py's
    _Namespace sets them)."""

    cdef public object config
    cdef public list spaces
    cdef public int64_t lease_us
    cdef public tuple fields
    cdef public Py_ssize_t max_outcome
    cdef public bytes prefix


cdef class StoreCore:
    """The state the per-call methods touch, and those methods: claim,
    claim_many, complete, complete_many, release, release_many. The
    attributes are the store's own (dedupstore/store.py's DedupStore sets
    them in _init); the subclass keeps every other one in its __dict__."""

    cdef public object _dead
    cdef public dict _ns
    cdef public Hasher _hasher
    cdef public list _parts
    cdef public object _windows
    cdef public object _clock
    cdef public uint32_t _nparts
    # The verdict counters (C_NCOUNTS: one per native status code, then the
    # two kinds of repeat), updated by the calls with the GIL held.
    cdef int64_t _tally_c[C_NCOUNTS]

    @property
    def _counts(self):
        """The verdict counters, a copy taken at one moment: one per native
        status code, then repeats with another event id and duplicates of
        the same event (stats())."""
        cdef int64_t snap[C_NCOUNTS]
        memcpy(snap, self._tally_c, sizeof(snap))  # no Python code runs in between
        return [snap[i] for i in range(C_NCOUNTS)]

    cdef NamespaceCore _ns_of(self, object name):
        # As DedupStore._live_namespace: a closed store or a namespace not
        # yet looked up goes to the Python method.
        cdef object ns = self._ns.get(name)
        if ns is None or self._dead is not None:
            ns = self._live_namespace(name)
        if type(ns) is _ns_cls:
            return <NamespaceCore>ns
        return _ns_checked(ns)

    cdef inline int64_t _now(self) except? -1:
        # As DedupStore._now_us: int(clock() * 1e6); time.time's own clock
        # (CLOCK_REALTIME) read here when that is the store's, and an
        # AcceleratedClock's without its call.
        cdef timespec ts
        if self._clock is _time_time:
            clock_gettime(CLOCK_REALTIME, &ts)
            return <int64_t>ts.tv_sec * 1000000 + ts.tv_nsec // 1000
        if type(self._clock) is AcceleratedClock:
            return <int64_t>((<AcceleratedClock>self._clock).now() * 1e6)
        return <int64_t>(<double>self._clock() * 1e6)

    cdef inline uint32_t _route(self, NamespaceCore ns, bytes kb):
        cdef char buf[2 + C_MAX_KEY_BYTES]
        memcpy(buf, PyBytes_AS_STRING(ns.prefix), 2)
        return self._hasher._route(buf, kb, self._nparts)

    cdef object _one(self, int kind, NamespaceCore ns, uint32_t p, bytes kb, object a, object b, int64_t now,
                     int64_t lease, int64_t event_time, object claimant, object event_id):
        # One key's op (_one_in's kinds) in partition p's write-behind
        # window; if it has none, or it cannot take the call, the ordinary
        # way (DedupStore._unwindowed).
        cdef object window = self._windows[p] if self._windows is not None else self._parts[p].window
        cdef object res = _CLOSED
        if window is not None:
            res = _one_in(_as_window(window), kind, <Space?>ns.spaces[p], kb, a, b, now, lease, event_time,
                          claimant, event_id)
        if res is _CLOSED:
            res = self._unwindowed(kind, self._parts[p], ns.spaces[p], kb, a, b, now, lease, event_time,
                                   claimant, event_id)
        return res

    cdef int _write_batch(self, int kind, NamespaceCore ns, Parts *parts, list kbs, object a, object b,
                          int64_t now, int64_t lease, object event_times, object claimant,
                          list results) except -1:
        # A batch call's writes (_write_windows' kinds) of the keys of each
        # partition in ``parts``. Flush mode runs them in the partitions'
        # write-behind windows; the partitions whose window could not take
        # the call, and every partition in sync mode, go to
        # DedupStore._write_rest (with {partition: [indexes]} of those),
        # which also raises the first error. Every partition is written even
        # if one fails.
        cdef list left
        cdef object first = None
        cdef int g
        _parts_group(parts, self._nparts)
        if self._windows is not None:
            left, first = _write_windows(self._windows, ns.spaces, parts, kind, kbs, a, b, now, lease,
                                         event_times, claimant, results)
        else:
            left = [parts.part[g] for g in range(parts.ngroups)]
        if left or first is not None:
            self._write_rest(kind, ns, _parts_groups(parts, 0, left), left, first, kbs, a, b, now, lease,
                             event_times, claimant, results)
        return 0

    def claim(self, namespace, key, intent=None, *, event_time=None, event_id=None, claimant=None, lease=None):
        """Ask whether the effect ``key`` in ``namespace`` may be performed.

        Returns a :class:`ClaimResult` whose ``status`` is one of
        :class:`Status` (SPEC section 3 lists what the caller does for each).
        """
        cdef NamespaceCore ns = self._ns_of(namespace)
        cdef bytes kb = key_bytes(key)
        cdef int64_t now
        cdef tuple res = self._claim_key(ns, kb, intent, event_time, event_id, claimant, lease, &now)
        # No lock: the native tally (here and in claim_many's) holds the GIL
        # throughout and calls no Python code, so it is atomic for every
        # other thread.
        _tally_one(res, self._tally_c)
        return _verdict(res, namespace, kb, now)

    cdef tuple _claim_key(self, NamespaceCore ns, bytes kb, object intent, object event_time, object event_id,
                          object claimant, object lease, int64_t *now_out):
        # The claim of key ``kb`` (key_bytes' answer), its other arguments
        # checked as claim() documents them: the verdict tuple; ``now_out``
        # gets the time it ran at.
        cdef uint32_t p = self._route(ns, kb)
        if self._windows is not None:
            (<Space?>ns.spaces[p]).prefetch_early(kb)  # arriving while the intent is digested
        cdef object digest = None if intent is None else self._hasher._intent_digest(intent, ns.fields)
        cdef int64_t now = self._now()
        cdef int64_t lease_us = ns.lease_us if lease is None else _lease_us(lease)
        cdef int64_t et = DS_NO_TIME if event_time is None else _time_us_c(event_time, _time_us_slow)
        cdef object cl = None if claimant is None else _small_bytes(claimant, "claimant", _max_claimant)
        cdef object eid = None if event_id is None else _small_bytes(event_id, "event_id", _max_event_id)
        now_out[0] = now
        # In a window: decided against this process's unapplied writes,
        # logged, no transaction, so no read-only pass first either.
        return self._one(C_BATCH_CLAIM, ns, p, kb, digest, None, now, lease_us, et, cl, eid)

    def claim_many(self, namespace, keys, intents=None, *, event_times=None, claimant=None):
        """Claim many keys at once: one transaction per partition touched,
        partitions written one after another; verdicts in input order."""
        cdef NamespaceCore ns = self._ns_of(namespace)
        cdef Py_ssize_t n = len(keys)
        if n > _max_batch:
            raise InvalidInputError(f"claim_many takes at most {_max_batch} keys per call; got {n}")
        if intents is not None and len(intents) != n:
            raise InvalidInputError(f"intents must have one entry per key ({n}); got {len(intents)}")
        if event_times is not None and len(event_times) != n:
            raise InvalidInputError(f"event_times must have one entry per key ({n}); got {len(event_times)}")
        cdef list kbs
        cdef bytes kb
        cdef int64_t now
        cdef Py_ssize_t i
        if n == 1 and self._windows is not None:
            # The consumer's common batch, of one key, in flush mode:
            # claim()'s path, without the batch's lists and groups.
            kb = key_bytes(keys[0])
            res = self._claim_key(ns, kb, None if intents is None else intents[0],
                                  None if event_times is None else event_times[0], None, claimant, None, &now)
            return _batch_result([res], namespace, [kb], now, self._tally_c)
        cdef Parts parts
        cdef list digests, results
        cdef object ets, cl
        _parts_init(&parts, n)
        try:
            kbs = self._hasher._route_keys_into(ns.prefix, keys, self._nparts, &parts)
            if self._windows is not None and n <= PREFETCH_KEYS:
                # Each key's Bloom blocks arriving while the intents are
                # digested (a bigger batch's would be more blocks than the
                # caches keep, and its keys' probes overlap each other).
                for i in range(n):
                    (<Space?>ns.spaces[parts.of[i]]).prefetch_early(<bytes>kbs[i])
            digests = [None] * n if intents is None else self._hasher._intent_digests(intents, ns.fields)
            ets = None if event_times is None else times_us(event_times, _time_us_slow)
            cl = None if claimant is None else _small_bytes(claimant, "claimant", _max_claimant)
            now = self._now()
            results = [None] * n
            # Straight to the write transactions: a batch almost always writes
            # something, and a partition whose keys all turn out to be duplicates
            # commits nothing, so pays no fsync. A read-only pass first would
            # probe every key twice.
            self._write_batch(C_BATCH_CLAIM, ns, &parts, kbs, digests, None, now, ns.lease_us, ets, cl, results)
        finally:
            _parts_free(&parts)
        return _batch_result(results, namespace, kbs, now, self._tally_c)

    cdef object _leased_key(self, int kind, NamespaceCore ns, bytes kb, object tok, object out, int *rc,
                            int64_t *now_out):
        # One key's completion (``kind`` C_BATCH_COMPLETE, ``out`` its
        # outcome) or release, its inputs checked: _one's result, its op
        # code in ``rc`` and the time it ran at in ``now_out``.
        cdef int64_t now = self._now()
        cdef object res = self._one(kind, ns, self._route(ns, kb), kb, tok, out, now, 0, DS_NO_TIME, None, None)
        rc[0] = (<tuple>res)[0] if kind == C_BATCH_COMPLETE else res
        now_out[0] = now
        return res

    cdef tuple _leased_one(self, int kind, object namespace, object key, object token, object outcome):
        # complete() (``kind`` C_BATCH_COMPLETE) or release(): (its result,
        # the key as bytes, the time it ran at); a lease error is raised.
        cdef NamespaceCore ns = self._ns_of(namespace)
        cdef bytes kb = key_bytes(key)
        cdef object tok = check_token(token)
        cdef object out = None
        cdef int rc
        cdef int64_t now
        if kind == C_BATCH_COMPLETE:
            out = checked_outcome(outcome, ns.max_outcome, namespace)
        cdef object res = self._leased_key(kind, ns, kb, tok, out, &rc, &now)
        if rc != DS_OP_APPLY and rc != DS_OP_NOOP:
            err = self._lease_error(namespace, kb, tok, rc)
            if err is not None:
                raise err
        return res, kb, now

    def complete(self, namespace, key, token, outcome=b""):
        """Record ``outcome`` for the effect and end the lease.

        Raises :class:`LeaseLostError` (changing nothing) when ``token`` is not
        the current lease. Repeating a successful call is a no-op.
        """
        res, kb, now = self._leased_one(C_BATCH_COMPLETE, namespace, key, token, outcome)
        _, raw, gen = res
        return _make_record(namespace, kb, gen, raw, now)

    def release(self, namespace, key, token):
        """Remove the claim: only when the caller knows no effect happened."""
        self._leased_one(C_BATCH_RELEASE, namespace, key, token, None)

    cdef list _leased_many(self, int kind, object namespace, object items, str what):
        # complete_many (``kind`` C_BATCH_COMPLETE: (key, token, outcome)
        # items) or release_many ((key, token) items).
        cdef NamespaceCore ns = self._ns_of(namespace)
        cdef Py_ssize_t n = len(items)
        if n > _max_batch:
            raise InvalidInputError(f"{what} takes at most {_max_batch} items per call; got {n}")
        cdef bint completes = kind == C_BATCH_COMPLETE
        cdef Py_ssize_t max_outcome = ns.max_outcome if completes else -1
        cdef list kbs, toks
        cdef object outs
        cdef int64_t now
        cdef bytes kb
        cdef object tok, out
        cdef int rc
        if n == 1 and self._windows is not None:
            # The consumer's common batch, of one item, in flush mode:
            # complete()'s path, without the batch's lists and groups.
            kb, tok, out = _leased_item(items[0], 0, max_outcome, namespace)
            self._leased_key(kind, ns, kb, tok, out, &rc, &now)
            if rc == DS_OP_APPLY or rc == DS_OP_NOOP:
                return [None]
            return self._lease_errors(namespace, [kb], [tok], [rc])
        cdef Parts parts
        cdef list results
        _parts_init(&parts, n)
        try:
            kbs, toks, outs = self._hasher._route_leased_into(ns.prefix, items, self._nparts, max_outcome,
                                                              namespace, &parts)
            now = self._now()
            results = [None] * n
            self._write_batch(kind, ns, &parts, kbs, toks, outs, now, 0, None, None, results)
        finally:
            _parts_free(&parts)
        if _all_applied(results, completes):
            return [None] * n
        return self._lease_errors(namespace, kbs, toks, [res[0] for res in results] if completes else results)

    def complete_many(self, namespace, items):
        """Complete many leases at once: ``items`` are (key, token, outcome).

        One transaction per partition touched. Returns, in input order, None
        for each item applied and, for an item whose token does not hold the
        lease, the LeaseLostError that ``complete`` would have raised (that
        item changed nothing; the others are applied).
        """
        return self._leased_many(C_BATCH_COMPLETE, namespace, items, "complete_many")

    def release_many(self, namespace, items):
        """Release many leases at once: ``items`` are (key, token). Results as
        for :meth:`complete_many`."""
        return self._leased_many(C_BATCH_RELEASE, namespace, items, "release_many")
