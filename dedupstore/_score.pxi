# Included at the end of _native.pyx: the per-call path of the store's
# claim() (dedupstore/store.py's DedupStore subclasses StoreCore) and the
# verdict it returns (dedupstore/verdicts.py's ClaimResult subclasses
# ClaimCore). In Python, claim()'s own lines, its frame and the verdict's
# __init__ cost about as much as the native work under them; here they are
# C, which hands the rare cases (a namespace not yet looked up, a closed
# store, a partition with no window, a lease or event time given in another
# form) back to the Python functions bound by bind_store().

#: bind_store()'s arguments, read at each call.
cdef object _claim_cls = None      # verdicts.ClaimResult
cdef tuple _status_by_code = None  # verdicts.STATUS_BY_CODE
cdef bint _leased[8]               # verdicts.LEASED_CODES
cdef object _small_bytes = None    # store._small_bytes
cdef object _lease_us = None       # store._lease_us
cdef object _time_us_slow = None   # store._time_us
cdef Py_ssize_t _max_claimant = 0, _max_event_id = 0


def bind_store(claim_cls, tuple status_by_code, tuple leased_codes, small_bytes, lease_us, time_us_slow,
               Py_ssize_t max_claimant, Py_ssize_t max_event_id) -> None:
    """Called once by dedupstore/store.py with what claim() uses of it and
    of dedupstore/verdicts.py."""
    global _claim_cls, _status_by_code, _small_bytes, _lease_us, _time_us_slow, _max_claimant, _max_event_id
    if not issubclass(claim_cls, ClaimCore):
        raise TypeError("bind_store() needs a ClaimCore subclass")
    if len(status_by_code) != len(leased_codes) or len(leased_codes) > 8:
        raise ValueError("bind_store() needs one lease flag per status code (at most 8)")
    for i, flag in enumerate(leased_codes):
        _leased[i] = flag
    _claim_cls, _status_by_code = claim_cls, status_by_code
    _small_bytes, _lease_us, _time_us_slow = small_bytes, lease_us, time_us_slow
    _max_claimant, _max_event_id = max_claimant, max_event_id


cdef class ClaimCore:
    """The verdict's fields (dedupstore/verdicts.py's ClaimResult documents
    them and adds the properties)."""

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


cdef object _verdict(tuple res, object namespace, bytes kb, int64_t now):
    # The ClaimResult of a verdict tuple (Space.claim's), as
    # ClaimResult(status, token, retry_after, namespace, key, raw, gen, now).
    cdef int code = res[0]
    if not 0 <= code < len(_status_by_code):
        raise ValueError(f"verdict code {code} is not a status")
    cdef ClaimCore r = ClaimCore.__new__(_claim_cls)
    r.status = _status_by_code[code]
    r.token = res[1] if _leased[code] else None
    r.retry_after = res[2] / 1e6 if code == DS_IN_PROGRESS else None
    r.namespace = namespace
    r.key = kb
    r._raw = res[3]
    r._gen = res[6]
    r._now = now
    return r


def claim_result(tuple res, object namespace, bytes kb, int64_t now):
    """The ClaimResult of verdict tuple ``res`` for (namespace, kb) at ``now``."""
    return _verdict(res, namespace, kb, now)


cdef class StoreCore:
    """The state claim() touches, and claim(). The attributes are the
    store's own (dedupstore/store.py's DedupStore sets them in _init); the
    subclass keeps every other one in its __dict__."""

    cdef public object _dead
    cdef public dict _ns
    cdef public Hasher _hasher
    cdef public list _parts
    cdef public object _windows
    cdef public object _clock
    cdef public list _counts
    cdef public uint32_t _nparts

    def claim(self, namespace, key, intent=None, *, event_time=None, event_id=None, claimant=None, lease=None):
        """Ask whether the effect ``key`` in ``namespace`` may be performed.

        Returns a :class:`ClaimResult` whose ``status`` is one of
        :class:`Status` (SPEC section 3 lists what the caller does for each).
        """
        cdef object ns = self._ns.get(namespace)
        if ns is None or self._dead is not None:
            ns = self._live_namespace(namespace)
        cdef bytes kb = key_bytes(key)
        cdef object digest = None
        cdef bytes canon
        if intent is not None:
            canon = canonical_intent(intent, ns.fields)
            if canon is not None:
                digest = self._hasher._digest(canon)
        cdef char buf[2 + C_MAX_KEY_BYTES]
        cdef bytes prefix = ns.prefix
        memcpy(buf, PyBytes_AS_STRING(prefix), 2)
        cdef uint32_t pidx = self._hasher._route(buf, kb, self._nparts)
        cdef object space = ns.spaces[pidx]
        cdef int64_t now = <int64_t>(<double>self._clock() * 1e6)
        cdef int64_t lease_us = ns.lease_us if lease is None else _lease_us(lease)
        cdef int64_t et = DS_NO_TIME if event_time is None else _time_us(event_time, _time_us_slow)
        cdef object cl = None if claimant is None else _small_bytes(claimant, "claimant", _max_claimant)
        cdef object eid = None if event_id is None else _small_bytes(event_id, "event_id", _max_event_id)
        cdef object window = None
        cdef object res = _wglobals["CLOSED"]
        if self._windows is not None:
            window = self._windows[pidx]
        else:
            window = self._parts[pidx].window
        if window is not None:
            # Decided against this process's unapplied writes, logged, no
            # transaction: no read-only pass first either (as window.run of
            # space.claim).
            res = claim_in(window, space, kb, digest, now, lease_us, et, cl, eid)
        if res is _wglobals["CLOSED"]:
            res = self._claim_unwindowed(self._parts[pidx], space, kb, digest, now, lease_us, et, cl, eid)
        # No lock: the native tally holds the GIL throughout and calls no
        # Python code, so it is atomic for every other thread.
        _tally((res,), self._counts)
        return _verdict(res, namespace, kb, now)
