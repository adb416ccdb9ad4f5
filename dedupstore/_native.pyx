# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, auto_pickle=False, autotestdict=False
"""The native hot path: canonical intents, keyed hashing, and claim/complete/
release/renew decided against LMDB records inside the caller's transaction.

The decision table and the record codec are plain C in csrc/; this module is the
glue that walks Python objects, builds LMDB keys and calls py-lmdb. Each public
function here does one whole step of a request (probe every live generation,
decide, write) so a claim crosses the Python/native boundary once per transaction.
"""

cimport cython

import math
import os
from collections.abc import Mapping

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Keys, PyDict_Next, PyDict_Size
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsSsize_t
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset
from posix.unistd cimport usleep

from .errors import (
    InvalidInputError,
    InvalidIntentError,
    InvalidKeyError,
    InvalidTokenError,
    OutcomeTooLargeError,
    StoreFormatError,
)

NEW = DS_NEW
DUPLICATE = DS_DUPLICATE
CONFLICT = DS_CONFLICT
IN_PROGRESS = DS_IN_PROGRESS
UNKNOWN = DS_UNKNOWN
BEYOND_HORIZON = DS_BEYOND_HORIZON

OP_APPLY = DS_OP_APPLY
OP_NOOP = DS_OP_NOOP
OP_LEASE_LOST = DS_OP_LEASE_LOST
OP_OUTCOME_DIFFERS = DS_OP_OUTCOME_DIFFERS

STATE_PENDING = DS_STATE_PENDING
STATE_COMPLETED = DS_STATE_COMPLETED
RECORD_VERSION = DS_RECORD_VERSION
NO_TIME = DS_NO_TIME

cdef extern from "ds_build.h":
    const char *DS_NATIVE_BUILD

#: Which build of this module this is: "plain", "profile-guided" (setup.py's
#: BuildExt with DEDUPSTORE_PGO=1, docs/build.md), "instrumented" (the build
#: a profile-guided one trains) or "debug". CPU figures depend on it.
NATIVE_BUILD = (<bytes>DS_NATIVE_BUILD).decode("ascii")

#: A filter build gathers at most this many key hashes (32 MiB) in its one
#: pass over a generation; a larger generation is read twice (Space.build_bloom).
MAX_GATHERED_HASHES = 1 << 22

#: The generation reported for an unresolved record: it lives in the
#: ``pending`` database, in no generation (docs/format.md).
UNRESOLVED_GEN = 0xFFFFFFFF
# The same for the native code to compare with and set: no lookup of the
# module's global, and no int object made to compare it with.
cdef uint32_t C_UNRESOLVED_GEN = 0xFFFFFFFF

cdef enum:
    C_MAX_KEY_BYTES = 400
    C_MAX_INTENT_BYTES = 65536
    C_MAX_INTENT_DEPTH = 32
    # Bytes in front of the business key in an LMDB key: namespace id (2) + generation (4).
    C_KEY_PREFIX_BYTES = 6

MAX_KEY_BYTES = C_MAX_KEY_BYTES
MAX_INTENT_BYTES = C_MAX_INTENT_BYTES
MAX_INTENT_DEPTH = C_MAX_INTENT_DEPTH
KEY_PREFIX_BYTES = C_KEY_PREFIX_BYTES

cdef uint64_t _token_state = 0


def reseed_tokens() -> None:
    """Start a fresh token sequence (at import, and in a forked child)."""
    global _token_state
    _token_state = int.from_bytes(os.urandom(8), "little")


reseed_tokens()
os.register_at_fork(after_in_child=reseed_tokens)


def next_token() -> int:
    return ds_next_token(&_token_state)


cdef class Hasher:
    """The store's keyed SipHash-2-4 (its 16-byte secret lives in the store's meta)."""

    cdef ds_hash_key key

    def __init__(self, bytes secret):
        if PyBytes_GET_SIZE(secret) != 16:
            raise ValueError("a hasher secret is exactly 16 bytes")
        ds_hash_key_init(&self.key, <const uint8_t *>PyBytes_AS_STRING(secret))

    def digest(self, bytes data) -> bytes:
        """128-bit keyed digest of ``data``."""
        return self._digest(data)

    cdef bytes _digest(self, bytes data):
        cdef bytes out = PyBytes_FromStringAndSize(NULL, 16)
        ds_siphash128(&self.key, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), <uint8_t *>PyBytes_AS_STRING(out))
        return out

    def hash64(self, bytes data) -> int:
        return ds_siphash64(&self.key, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))

    cdef inline uint32_t _route(self, char *buf, bytes key, uint32_t partitions):
        # ``buf`` holds the 2-byte namespace prefix; ``key`` is checked.
        cdef Py_ssize_t klen = PyBytes_GET_SIZE(key)
        memcpy(buf + 2, PyBytes_AS_STRING(key), klen)
        return ds_reduce(ds_siphash64(&self.key, buf, 2 + klen), partitions)

    def route(self, bytes ns_prefix, bytes key, uint32_t partitions) -> int:
        """The partition of (namespace, key): keyed, so keys cannot be crafted to pile onto one."""
        cdef char buf[2 + C_MAX_KEY_BYTES]
        if PyBytes_GET_SIZE(key) > C_MAX_KEY_BYTES or PyBytes_GET_SIZE(ns_prefix) != 2:
            raise ValueError("route() takes a 2-byte namespace prefix and a checked key")
        memcpy(buf, PyBytes_AS_STRING(ns_prefix), 2)
        return self._route(buf, key, partitions)

    def route_keys(self, bytes ns_prefix, object keys, uint32_t partitions):
        """Check every key of the sequence ``keys`` (as :func:`key_bytes`) and
        route it: returns (the keys as bytes, {partition: [indexes in input
        order]}). One pass for a whole batch instead of three Python loops."""
        return self._route_keys(ns_prefix, keys, partitions)

    cdef tuple _route_keys(self, bytes ns_prefix, object keys, uint32_t partitions):
        cdef Parts ps
        keys = keys if type(keys) is list else list(keys)
        _parts_init(&ps, len(keys))
        try:
            kbs = self._route_keys_into(ns_prefix, keys, partitions, &ps)
            return kbs, _parts_groups(&ps, partitions)
        finally:
            _parts_free(&ps)

    cdef list _route_keys_into(self, bytes ns_prefix, object keys, uint32_t partitions, Parts *parts):
        # route_keys(), each key's partition put in ``parts.of`` (made for
        # len(keys) keys) instead of a dict: the keys as bytes.
        cdef char buf[2 + C_MAX_KEY_BYTES]
        if type(keys) is not list:
            keys = list(keys)
        cdef Py_ssize_t i, n = len(keys)
        cdef list kbs = [None] * n
        cdef bytes kb
        if PyBytes_GET_SIZE(ns_prefix) != 2 or partitions < 1:
            raise ValueError("route_keys() takes a 2-byte namespace prefix and at least one partition")
        if n != parts.n:
            raise ValueError("route_keys() needs a Parts of one entry per key")
        memcpy(buf, PyBytes_AS_STRING(ns_prefix), 2)
        for i in range(n):
            kb = key_bytes(keys[i])
            kbs[i] = kb
            parts.of[i] = self._route(buf, kb, partitions)
        return kbs

    def route_leased(self, bytes ns_prefix, object items, uint32_t partitions, Py_ssize_t max_outcome=-1,
                     str namespace=None):
        """``complete_many``'s items (key, token, outcome), or with
        ``max_outcome`` -1 ``release_many``'s (key, token): each key checked
        and routed as by :meth:`route_keys`, each token by :func:`check_token`
        and each outcome by :func:`outcome_bytes` and against ``max_outcome``
        (the error names ``namespace``). Returns (keys as bytes, tokens,
        outcomes as bytes or None, {partition: [indexes]})."""
        return self._route_leased(ns_prefix, items, partitions, max_outcome, namespace)

    cdef tuple _route_leased(self, bytes ns_prefix, object items, uint32_t partitions, Py_ssize_t max_outcome,
                             str namespace):
        cdef Parts ps
        items = items if type(items) is list else list(items)
        _parts_init(&ps, len(items))
        try:
            kbs, toks, outs = self._route_leased_into(ns_prefix, items, partitions, max_outcome, namespace, &ps)
            return kbs, toks, outs, _parts_groups(&ps, partitions)
        finally:
            _parts_free(&ps)

    cdef tuple _route_leased_into(self, bytes ns_prefix, object items, uint32_t partitions, Py_ssize_t max_outcome,
                                  str namespace, Parts *parts):
        # route_leased(), each item's partition put in ``parts.of`` (made for
        # len(items) items) instead of a dict: (kbs, toks, outs).
        cdef char buf[2 + C_MAX_KEY_BYTES]
        if type(items) is not list:
            items = list(items)
        cdef Py_ssize_t i, n = len(items)
        cdef list kbs = [None] * n
        cdef list toks = [None] * n
        cdef list outs = None if max_outcome < 0 else [None] * n
        if PyBytes_GET_SIZE(ns_prefix) != 2 or partitions < 1:
            raise ValueError("route_leased() takes a 2-byte namespace prefix and at least one partition")
        if n != parts.n:
            raise ValueError("route_leased() needs a Parts of one entry per item")
        memcpy(buf, PyBytes_AS_STRING(ns_prefix), 2)
        cdef bytes kb
        cdef tuple item
        cdef Py_ssize_t width = 2 if outs is None else 3
        for i in range(n):
            # _leased_item's checks, its fields put straight into the lists.
            item = _leased_shape(items[i], i, width)
            kb = key_bytes(item[0])
            kbs[i] = kb
            toks[i] = check_token(item[1])
            if outs is not None:
                outs[i] = checked_outcome(item[2], max_outcome, namespace)
            parts.of[i] = self._route(buf, kb, partitions)
        return kbs, toks, outs

    def intent_digest(self, object intent, tuple fields=None):
        """The stored digest of ``intent``, or None for "no intent check"."""
        return self._intent_digest(intent, fields)

    cdef object _intent_digest(self, object intent, tuple fields):
        # As _digest(canonical_intent(intent, fields)), the canonical form
        # hashed where it was built.
        cdef uint8_t first[CANON_STACK]
        cdef ds_buf b
        cdef bytes out
        cdef Py_ssize_t n
        if type(intent) is bytes and PyBytes_GET_SIZE(intent) < CANON_STACK:
            # Bytes taken as they are (_canon_into's tag 0), put beside
            # their tag byte on the stack, without the buffer's bookkeeping.
            n = PyBytes_GET_SIZE(intent)
            first[0] = DS_CANON_TAG_RAW
            memcpy(first + 1, PyBytes_AS_STRING(intent), n)
            out = PyBytes_FromStringAndSize(NULL, 16)
            ds_siphash128(&self.key, <const char *>first, n + 1, <uint8_t *>PyBytes_AS_STRING(out))
            return out
        ds_buf_init_in(&b, C_MAX_INTENT_BYTES, first, CANON_STACK)
        try:
            if not _canon_into(&b, intent, fields):
                return None
            out = PyBytes_FromStringAndSize(NULL, 16)
            ds_siphash128(&self.key, <const char *>b.data, b.len, <uint8_t *>PyBytes_AS_STRING(out))
            return out
        finally:
            ds_buf_free(&b)

    def intent_digests(self, intents, tuple fields=None):
        """:meth:`intent_digest` of each of ``intents``, as a list (one call
        for a batch)."""
        return self._intent_digests(intents, fields)

    cdef list _intent_digests(self, object intents, tuple fields):
        cdef list out = []
        for intent in intents:
            out.append(self._intent_digest(intent, fields))
        return out


#: The largest lease token (tokens are 1..2**63-1).
MAX_TOKEN = 0x7FFFFFFFFFFFFFFF


cpdef object check_token(object value):
    """``value`` as a lease token: an int (not a bool) in 1..2**63-1, else
    InvalidTokenError."""
    cdef int overflow = 0
    if type(value) is int:
        # Every completion's: compared as a C integer, not as ints with the
        # module's MAX_TOKEN. An int past 2**63-1 reads -1 (overflow set).
        if PyLong_AsLongLongAndOverflow(value, &overflow) >= 1:
            return value
    elif isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TOKEN:
        return value
    raise InvalidTokenError(f"token must be an int in 1..2**63-1 as returned by claim(); got {value!r}")


cdef tuple _leased_item(object raw, Py_ssize_t i, Py_ssize_t max_outcome, str namespace):
    # Item i of complete_many's items (key, token, outcome), or with
    # ``max_outcome`` -1 release_many's (key, token), checked as
    # route_leased() documents: (key as bytes, token, outcome as bytes or None).
    cdef Py_ssize_t width = 2 if max_outcome < 0 else 3
    cdef tuple item = _leased_shape(raw, i, width)
    return (key_bytes(item[0]), check_token(item[1]),
            None if width == 2 else checked_outcome(item[2], max_outcome, namespace))


cdef tuple _leased_shape(object raw, Py_ssize_t i, Py_ssize_t width):
    # Item i as a tuple of ``width`` fields, else InvalidInputError.
    cdef tuple item
    if type(raw) is tuple:
        item = <tuple>raw
    elif isinstance(raw, (tuple, list)):
        item = tuple(raw)
    else:
        raise InvalidInputError(f"each item must be {_ITEM_SHAPES[width]}; item {i} is a {type(raw).__name__}")
    if len(item) != width:
        raise InvalidInputError(f"each item must be {_ITEM_SHAPES[width]}; item {i} has {len(item)} fields")
    return item


cdef dict _ITEM_SHAPES = {2: "(key, token)", 3: "(key, token, outcome)"}


cdef enum:
    # A batch of at most this many keys is grouped by partition without malloc.
    PARTS_STACK = 64
    # Partitions a store has at most (layout.MAX_PARTITIONS).
    C_MAX_PARTITIONS = 256


ctypedef struct Parts:
    # The partition of each of a batch's n keys (Hasher._route_keys_into,
    # _route_leased_into), and the batch grouped by them (_parts_group): the
    # indexes of each partition's keys in input order, the partitions in the
    # order their first key comes; no dict, no list per partition. Lives on
    # the caller's stack (_parts_init, _parts_free).
    uint32_t *of         # of[i]: key i's partition
    Py_ssize_t *idx      # after grouping: the indexes, group by group
    uint32_t of_stack[PARTS_STACK]     # of and idx, for a batch of at most PARTS_STACK keys
    Py_ssize_t idx_stack[PARTS_STACK]
    Py_ssize_t n
    int ngroups
    uint16_t group_of[C_MAX_PARTITIONS]  # partition -> its group (set for the store's partitions only)
    uint32_t part[C_MAX_PARTITIONS]      # group -> its partition
    Py_ssize_t start[C_MAX_PARTITIONS]   # group -> where its indexes start in idx
    Py_ssize_t count[C_MAX_PARTITIONS]   # group -> how many


cdef int _parts_init(Parts *ps, Py_ssize_t n) except -1:
    # For n keys: a batch of more than PARTS_STACK gets its arrays from
    # malloc (_parts_free gives them back).
    ps.n = n
    ps.ngroups = 0
    if n <= PARTS_STACK:
        ps.of, ps.idx = ps.of_stack, ps.idx_stack
        return 0
    ps.of = <uint32_t *>malloc(n * sizeof(uint32_t))
    ps.idx = <Py_ssize_t *>malloc(n * sizeof(Py_ssize_t))
    if ps.of == NULL or ps.idx == NULL:
        free(ps.of)
        free(ps.idx)
        ps.of, ps.idx = ps.of_stack, ps.idx_stack
        raise MemoryError()
    return 0


cdef void _parts_free(Parts *ps) noexcept:
    if ps.of != ps.of_stack:
        free(ps.of)
        free(ps.idx)


cdef int _parts_group(Parts *ps, uint32_t partitions) except -1:
    # Group the indexes by partition (``partitions``: the store's count, which
    # every ``of`` is below): a stable counting sort.
    cdef Py_ssize_t i, at = 0
    cdef Py_ssize_t fill[C_MAX_PARTITIONS]
    cdef uint32_t p
    cdef int g
    if partitions > C_MAX_PARTITIONS:
        raise ValueError("more partitions than a store may have")
    for p in range(partitions):
        ps.group_of[p] = 0xFFFF
    ps.ngroups = 0
    for i in range(ps.n):
        p = ps.of[i]
        if p >= partitions:
            raise ValueError("a key routed past the store's partitions")
        g = ps.group_of[p]
        if g == 0xFFFF:
            g = ps.ngroups
            ps.group_of[p] = <uint16_t>g
            ps.part[g] = p
            ps.count[g] = 0
            ps.ngroups += 1
        ps.count[g] += 1
    for g in range(ps.ngroups):
        ps.start[g] = fill[g] = at
        at += ps.count[g]
    for i in range(ps.n):
        g = ps.group_of[ps.of[i]]
        ps.idx[fill[g]] = i
        fill[g] += 1
    return 0


cdef dict _parts_groups(Parts *ps, uint32_t partitions, object only=None):
    # {partition: [indexes]}, as route_keys() returns them (what the Python
    # paths take), of the partitions ``only`` (default: all) once grouped
    # (``partitions``: grouped here first; 0: grouped already).
    cdef dict out = {}
    cdef Py_ssize_t k
    cdef int g
    cdef uint32_t p
    if partitions:
        _parts_group(ps, partitions)
    for g in range(ps.ngroups):
        p = ps.part[g]
        if only is None or p in only:
            out[p] = [ps.idx[ps.start[g] + k] for k in range(ps.count[g])]
    return out


cpdef bytes checked_outcome(object value, Py_ssize_t max_outcome, str namespace):
    """:func:`outcome_bytes`, at most ``max_outcome`` bytes long (the
    namespace ``namespace``'s limit), else OutcomeTooLargeError."""
    cdef bytes out = outcome_bytes(value)
    if PyBytes_GET_SIZE(out) > max_outcome:
        raise OutcomeTooLargeError(
            f"outcome is {PyBytes_GET_SIZE(out)} bytes; namespace {namespace!r} allows at most "
            f"max_outcome_bytes={max_outcome}"
        )
    return out


cpdef bytes outcome_bytes(object value):
    """An outcome as bytes: bytes, str (UTF-8), bytearray or memoryview;
    anything else is InvalidInputError."""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return (<str>value).encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidInputError(f"outcome must be bytes or str; got {type(value).__name__}")


cpdef bytes key_bytes(object key):
    """The key as bytes, checked against the 1..400-byte limit."""
    cdef bytes kb
    if type(key) is bytes:
        kb = <bytes>key
    elif isinstance(key, str):
        try:
            kb = (<str>key).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(f"key must be valid UTF-8 text: {exc.reason}") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        kb = bytes(key)
    else:
        raise InvalidKeyError(f"key must be bytes or str (1..{MAX_KEY_BYTES} bytes); got {type(key).__name__}")
    cdef Py_ssize_t n = PyBytes_GET_SIZE(kb)
    if n < 1 or n > C_MAX_KEY_BYTES:
        raise InvalidKeyError(f"key must be 1..{MAX_KEY_BYTES} bytes; got {n} bytes")
    return kb


# ---------------------------------------------------------------------------
# Canonical intent (docs/format.md, "Canonical intent")


cdef int _check(ds_buf *b, int rc) except -1:
    if rc == DS_BUF_OK:
        return 0
    if rc == DS_BUF_TOO_LARGE:
        raise InvalidIntentError(f"canonical intent must be at most {MAX_INTENT_BYTES} bytes")
    if rc == DS_BUF_INVALID:
        raise SystemError("a canonical intent field of no known kind (a bug in dedupstore)")
    raise MemoryError()


cdef int _put_ascii(ds_buf *b, str text) except -1:
    cdef bytes raw = text.encode("ascii")
    return _check(b, ds_buf_put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw)))


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    # A borrowed reference, compared, never counted (Space._prefetched).
    PyObject *_list_item "PyList_GET_ITEM" (object lst, Py_ssize_t i) noexcept


cdef int _put_string(ds_buf *b, object text) except -1:
    # A str's own UTF-8 (for ASCII text, its characters: no copy); a str
    # subclass's too (its string, not its __str__).
    cdef Py_ssize_t n
    cdef const char *raw
    try:
        raw = PyUnicode_AsUTF8AndSize(text, &n)
    except UnicodeEncodeError as exc:
        raise InvalidIntentError(f"intent strings must be valid UTF-8 text: {exc.reason}") from None
    return _check(b, ds_buf_put_json_string(b, <const uint8_t *>raw, n))


cdef int _put_int(ds_buf *b, object o) except -1:
    # int.__repr__, not str(): an IntEnum member must canonicalise as its
    # value. One that fits in a long long is written in C, the same digits.
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(o, &overflow)
    if overflow:
        return _put_ascii(b, int.__repr__(o))
    return _check(b, ds_buf_put_int(b, v))


cdef enum:
    # A dict of at most this many keys is written by _canon_dict.
    CANON_FAST_KEYS = 16


cdef extern from "Python.h":
    # On borrowed references, with no reference counting around them:
    # _canon_flat reads a dict's entries with no Python code running.
    bint _compact_ascii "PyUnicode_IS_COMPACT_ASCII" (PyObject *text) noexcept
    const void *_ascii_data "PyUnicode_DATA" (PyObject *text) noexcept
    Py_ssize_t _text_length "PyUnicode_GET_LENGTH" (PyObject *text) noexcept
    long long _exact_int_value "PyLong_AsLongLongAndOverflow" (PyObject *value, int *overflow) noexcept
    bint _is_exact_str "PyUnicode_CheckExact" (PyObject *o) noexcept
    bint _is_exact_int "PyLong_CheckExact" (PyObject *o) noexcept


cdef int _canon_flat(ds_buf *b, PyObject **keys, PyObject **vals, Py_ssize_t n) except -1:
    # _canon_dict's members written in one C call (ds_buf_put_flat_object)
    # when every key is ASCII text and every value ASCII text, an int that
    # fits in a long long, None, True or False: the common intent, such as
    # {"amount": 1234, "currency": "EUR"}. 1; or 0, nothing written, for any
    # other member (the general path writes it, and raises what it raises).
    # Only exact str and int are taken: a subclass may write itself
    # otherwise (an IntEnum as its value, through int.__repr__). No Python
    # code runs here, so the borrowed entries stay as they are.
    cdef ds_canon_field f[CANON_FAST_KEYS]
    cdef Py_ssize_t i
    cdef PyObject *v
    cdef int overflow = 0
    for i in range(n):
        if not _compact_ascii(keys[i]):  # keys[i] is an exact str (_canon_dict)
            return 0
        f[i].key = <const uint8_t *>_ascii_data(keys[i])
        f[i].klen = <size_t>_text_length(keys[i])
        v = vals[i]
        if _is_exact_str(v):
            if not _compact_ascii(v):
                return 0
            f[i].kind = DS_FIELD_STRING
            f[i].text = <const uint8_t *>_ascii_data(v)
            f[i].tlen = <size_t>_text_length(v)
        elif _is_exact_int(v):
            f[i].num = _exact_int_value(v, &overflow)
            if overflow:
                return 0
            f[i].kind = DS_FIELD_INT
        elif v == <PyObject *>None:
            f[i].kind = DS_FIELD_NULL
        elif v == <PyObject *>True:
            f[i].kind = DS_FIELD_TRUE
        elif v == <PyObject *>False:
            f[i].kind = DS_FIELD_FALSE
        else:
            return 0
    _check(b, ds_buf_put_flat_object(b, f, <size_t>n))
    return 1


cdef int _canon_dict(ds_buf *b, dict o, int depth) except -1:
    # _canon of a dict whose keys are all exact str, as its general path
    # writes it (keys in code point order, which is their UTF-8 bytes'
    # order), without the key list, its sort and a lookup per key: 1; or 0,
    # nothing written, for a key that is not an exact str (a str subclass
    # may order itself otherwise: the general path sorts it as Python does).
    # At most CANON_FAST_KEYS keys. The entries are held (increfed) while
    # the values are written: writing one may run Python code (an
    # isinstance check against Mapping), which could change the dict.
    cdef PyObject *keys[CANON_FAST_KEYS]
    cdef PyObject *vals[CANON_FAST_KEYS]
    cdef const char *text[CANON_FAST_KEYS]
    cdef Py_ssize_t size[CANON_FAST_KEYS]
    cdef Py_ssize_t order[CANON_FAST_KEYS]
    cdef Py_ssize_t n = 0, pos = 0, i, j, t
    cdef PyObject *k
    cdef PyObject *v
    cdef int c
    while PyDict_Next(o, &pos, &k, &v):
        if n == CANON_FAST_KEYS or type(<object>k) is not str:
            return 0
        keys[n] = k
        vals[n] = v
        n += 1
    if _canon_flat(b, keys, vals, n):
        return 1
    for i in range(n):
        Py_INCREF(<object>keys[i])
        Py_INCREF(<object>vals[i])
    try:
        for i in range(n):
            try:
                text[i] = PyUnicode_AsUTF8AndSize(<object>keys[i], &size[i])
            except UnicodeEncodeError as exc:
                raise InvalidIntentError(f"intent strings must be valid UTF-8 text: {exc.reason}") from None
            # Insertion sort: a handful of keys.
            j = i
            while j > 0:
                t = order[j - 1]
                c = memcmp(text[t], text[i], size[t] if size[t] < size[i] else size[i])
                if c < 0 or (c == 0 and size[t] < size[i]):
                    break
                order[j] = t
                j -= 1
            order[j] = i
        _check(b, ds_buf_put_byte(b, ord("{")))
        for j in range(n):
            i = order[j]
            if j:
                _check(b, ds_buf_put_byte(b, ord(",")))
            _check(b, ds_buf_put_json_string(b, <const uint8_t *>text[i], size[i]))
            _check(b, ds_buf_put_byte(b, ord(":")))
            _canon(b, <object>vals[i], depth + 1)
        _check(b, ds_buf_put_byte(b, ord("}")))
    finally:
        for i in range(n):
            Py_DECREF(<object>keys[i])
            Py_DECREF(<object>vals[i])
    return 1


cdef int _canon(ds_buf *b, object o, int depth) except -1:
    cdef Py_ssize_t i
    # Depth counts containers ({"a": 1} is one level): a scalar inside the
    # deepest allowed container adds none.
    if depth > C_MAX_INTENT_DEPTH and isinstance(o, (list, dict, Mapping)):
        raise InvalidIntentError(f"intent nesting must be at most {MAX_INTENT_DEPTH} levels deep")
    if o is None:
        return _check(b, ds_buf_put(b, b"null", 4))
    if o is True:
        return _check(b, ds_buf_put(b, b"true", 4))
    if o is False:
        return _check(b, ds_buf_put(b, b"false", 5))
    if isinstance(o, str):
        return _put_string(b, <str>o)
    if isinstance(o, int):
        return _put_int(b, o)
    if isinstance(o, float):
        if not math.isfinite(o):
            raise InvalidIntentError(f"intent numbers must be finite (NaN and infinities are rejected); got {o!r}")
        # 100.0 and 100 are the same amount: integral floats within the exact
        # range of a double are written as integers.
        # float.is_integer on the double itself: a <float> cast would round to
        # single precision first and turn 16777217.5 into "16777217".
        if float.is_integer(o) and abs(o) < 9007199254740992.0:
            return _put_int(b, int(o))
        return _put_ascii(b, float.__repr__(o))
    if isinstance(o, (dict, Mapping)):
        if type(o) is dict and PyDict_Size(o) <= CANON_FAST_KEYS and _canon_dict(b, <dict>o, depth):
            return 0
        _check(b, ds_buf_put_byte(b, ord("{")))
        keys = PyDict_Keys(o) if type(o) is dict else list(o.keys())
        for k in keys:
            if not isinstance(k, str):
                raise InvalidIntentError(f"intent mapping keys must be str; got {type(k).__name__}")
        keys.sort()
        for i in range(len(keys)):
            if i:
                _check(b, ds_buf_put_byte(b, ord(",")))
            _put_string(b, keys[i])
            _check(b, ds_buf_put_byte(b, ord(":")))
            _canon(b, o[keys[i]], depth + 1)
        return _check(b, ds_buf_put_byte(b, ord("}")))
    if isinstance(o, list):
        _check(b, ds_buf_put_byte(b, ord("[")))
        for i in range(len(o)):
            if i:
                _check(b, ds_buf_put_byte(b, ord(",")))
            _canon(b, o[i], depth + 1)
        return _check(b, ds_buf_put_byte(b, ord("]")))
    raise InvalidIntentError(
        f"intent values must be str, int, float, bool, None, list or dict; got {type(o).__name__}"
    )


cdef enum:
    # A canonical form is built in this many bytes on the stack, and only a
    # longer one on the heap.
    CANON_STACK = 512


cdef int _canon_into(ds_buf *b, object intent, tuple fields) except -1:
    # ``intent``'s canonical bytes (tag byte first) written into ``b``: 1,
    # or 0 (nothing written) for None, "no check".
    cdef uint8_t tag = DS_CANON_TAG_RAW
    cdef bytes raw
    if intent is None:
        return 0
    if type(intent) is dict and fields is None and PyDict_Size(intent) <= CANON_FAST_KEYS:
        # The common intent, a small dict: straight to _canon_dict, past the
        # type tests below and _canon's (_canon writes it so too).
        tag = DS_CANON_TAG_STRUCTURED
        _check(b, ds_buf_put(b, &tag, 1))
        if not _canon_dict(b, <dict>intent, 1):
            _canon(b, intent, 1)  # a key not an exact str: nothing was written past the tag
        return 1
    if type(intent) is bytes:
        raw = <bytes>intent
    elif isinstance(intent, (bytes, bytearray, memoryview)):
        raw = bytes(intent)
    elif isinstance(intent, str):
        try:
            raw = (<str>intent).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidIntentError(f"intent must be valid UTF-8 text: {exc.reason}") from None
    else:
        if isinstance(intent, (dict, Mapping)):
            if fields is not None:
                intent = {f: intent[f] for f in fields if f in intent}
        elif not isinstance(intent, list):
            raise InvalidIntentError(
                f"intent must be bytes, str, a mapping, a list or None; got {type(intent).__name__}"
            )
        tag = DS_CANON_TAG_STRUCTURED
        _check(b, ds_buf_put(b, &tag, 1))
        _canon(b, intent, 1)
        return 1
    if PyBytes_GET_SIZE(raw) > C_MAX_INTENT_BYTES - 1:
        raise InvalidIntentError(f"canonical intent must be at most {MAX_INTENT_BYTES} bytes")
    _check(b, ds_buf_put(b, &tag, 1))
    _check(b, ds_buf_put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw)))
    return 1


cpdef object canonical_intent(object intent, tuple fields=None):
    """The canonical bytes of ``intent`` (tag byte first), or None for "no check".

    ``bytes`` are taken as is and ``str`` as UTF-8 (tag 0); a mapping or list is
    canonical JSON (tag 1): sorted keys, no whitespace, UTF-8. With ``fields``,
    only those top-level fields of a mapping count.
    """
    cdef uint8_t first[CANON_STACK]
    cdef ds_buf b
    ds_buf_init_in(&b, C_MAX_INTENT_BYTES, first, CANON_STACK)
    try:
        if not _canon_into(&b, intent, fields):
            return None
        return PyBytes_FromStringAndSize(<char *>b.data, b.len)
    finally:
        ds_buf_free(&b)


# ---------------------------------------------------------------------------
# Records


cdef int _decode(object raw, ds_record *rec) except -1:
    cdef int rc = ds_record_decode(<const uint8_t *>PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), rec)
    if rc == DS_REC_OK:
        return 0
    if rc == DS_REC_VERSION:
        raise StoreFormatError(
            f"record format version {(<bytes>raw)[0]} is not one this dedupstore reads "
            f"(it reads version {DS_RECORD_VERSION}); refusing to guess"
        )
    raise StoreFormatError("a stored record is corrupt (its lengths do not match its size)")


cdef bytes _encode(const ds_record *rec):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, ds_record_size(rec))
    ds_record_encode(rec, <uint8_t *>PyBytes_AS_STRING(out))
    return out


def decode_record(bytes raw) -> tuple:
    """(state, flags, attempts, first_seen, until, token, intent, event_time,
    other_events, claimant, event_id, outcome) of a stored record."""
    cdef ds_record r
    _decode(raw, &r)
    return (
        r.state, r.flags, r.attempts, r.first_seen, r.until, r.token,
        PyBytes_FromStringAndSize(<char *>r.intent, 16) if r.flags & DS_F_INTENT else None,
        r.event_time, r.other_events,
        PyBytes_FromStringAndSize(<char *>r.claimant, r.claimant_len) if r.claimant_len else None,
        PyBytes_FromStringAndSize(<char *>r.event_id, r.event_id_len) if r.event_id_len else None,
        PyBytes_FromStringAndSize(<char *>r.outcome, r.outcome_len),
    )


def record_outcome(bytes raw):
    """The outcome bytes of a COMPLETED record, else None (without decoding the rest into objects)."""
    cdef ds_record r
    _decode(raw, &r)
    if r.state != DS_STATE_COMPLETED:
        return None
    return PyBytes_FromStringAndSize(<char *>r.outcome, r.outcome_len)


# ---------------------------------------------------------------------------
# LMDB keys: namespace id (u16 BE) | generation (u32 BE) | business key.
# Big-endian so one namespace's generations sort together, oldest first, and a
# generation's keys form one contiguous range that eviction can walk and drop.


cdef inline void _set_gen(bytes kb, uint32_t gen):
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(kb)
    p[2] = <uint8_t>(gen >> 24)
    p[3] = <uint8_t>(gen >> 16)
    p[4] = <uint8_t>(gen >> 8)
    p[5] = <uint8_t>gen


cdef inline uint32_t _record_gen(bytes kb):
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(kb)
    return (<uint32_t>p[2] << 24) | (<uint32_t>p[3] << 16) | (<uint32_t>p[4] << 8) | p[5]


cdef bytes _key_at(const char *prefix, const char *key, Py_ssize_t klen):
    # A fresh bytes object we own alone: its generation bytes are rewritten in
    # place while probing, which is safe because nothing else has seen it.
    cdef bytes kb = PyBytes_FromStringAndSize(NULL, C_KEY_PREFIX_BYTES + klen)
    cdef char *p = PyBytes_AS_STRING(kb)
    memcpy(p, prefix, 2)
    memcpy(p + C_KEY_PREFIX_BYTES, key, klen)
    return kb


cdef inline bytes _new_key(bytes prefix, bytes key):
    return _key_at(PyBytes_AS_STRING(prefix), PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))


def record_key(bytes prefix, uint32_t gen, bytes key) -> bytes:
    cdef bytes kb = _new_key(prefix, key)
    _set_gen(kb, gen)
    return kb


def split_record_key(bytes lkey) -> tuple:
    """(namespace id, generation, business key) of an LMDB record key."""
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(lkey)
    if PyBytes_GET_SIZE(lkey) <= KEY_PREFIX_BYTES:
        raise StoreFormatError("a record key is shorter than its prefix")
    return (
        (p[0] << 8) | p[1],
        (<uint32_t>p[2] << 24) | (<uint32_t>p[3] << 16) | (<uint32_t>p[4] << 8) | p[5],
        lkey[KEY_PREFIX_BYTES:],
    )


cdef bytes _unresolved_key(bytes prefix, bytes key):
    # Namespace, then the business key: no generation. Unresolved records live
    # in a small database of their own, which stays in memory whatever the
    # store's size, so a claim writes one short leaf-to-root path instead of a
    # path in a large generation plus an index entry (docs/benchmarks.md).
    cdef Py_ssize_t klen = PyBytes_GET_SIZE(key)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 2 + klen)
    cdef char *p = PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(prefix), 2)
    memcpy(p + 2, PyBytes_AS_STRING(key), klen)
    return out


cdef inline bytes _record_key_of(bytes ukey):
    # _new_key of an _unresolved_key's namespace and business key.
    return _key_at(PyBytes_AS_STRING(ukey), PyBytes_AS_STRING(ukey) + 2, PyBytes_GET_SIZE(ukey) - 2)


def bloom_key(bytes prefix, uint32_t gen) -> bytes:
    """Partition-meta key of the persisted filter of (namespace, generation)."""
    return b"B" + prefix + _gen_bytes(gen)


def unresolved_key(bytes prefix, bytes key) -> bytes:
    """Key of an unresolved record in the ``pending`` database."""
    return _unresolved_key(prefix, key)


def split_unresolved_key(bytes ukey) -> tuple:
    """(namespace id, business key) of a key in the ``pending`` database."""
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(ukey)
    if PyBytes_GET_SIZE(ukey) <= 2:
        raise StoreFormatError("a pending-database key is shorter than its namespace id")
    return ((p[0] << 8) | p[1], ukey[2:])


cdef inline uint32_t _gen_of(bytes g):
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(g)
    if PyBytes_GET_SIZE(g) != 4:
        raise StoreFormatError("a generation number is not 4 bytes")
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef bytes _gen_bytes(uint32_t gen):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 4)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    p[0] = <uint8_t>(gen >> 24)
    p[1] = <uint8_t>(gen >> 16)
    p[2] = <uint8_t>(gen >> 8)
    p[3] = <uint8_t>gen
    return out


include "_bloom.pxi"


cdef struct gen_state:
    uint32_t sealed1   # first unsealed generation (0: none sealed)
    uint32_t newest    # newest generation any writer put a record in
    uint8_t flags      # reserved: 0 (kept as read)


cdef enum:
    GS_BYTES = 9

#: "The frontier has not been read in this transaction yet" (no real
#: frontier is this far before the epoch).
cdef int64_t NO_FRONTIER = -0x7FFFFFFFFFFFFFFF - 1


cdef class Overlay


#: The live filter (below): keys its first Bloom filter is sized for, each
#: next one doubling; its false-positive rate; and how many unresolved records
#: of a namespace a seed reads into it at most (more: the pending database is
#: probed as before).
LIVE_FIRST_KEYS = 1 << 16
LIVE_FP_RATE = 0.005
bloom_sizing(LIVE_FP_RATE)
LIVE_PENDING_MAX = 200_000
#: Filters of past generations a Space keeps beside its newest (until those
#: generations' sealed filters are built; then the oldest goes first), and how
#: many generations one may answer for and still be given up for their
#: sealed filters (a longer run is given up only past LIVE_KEEP_MAX).
#: A generation is sealed only once the next one has ended, and its filter
#: built at the refresh after that (about once a second, behind eviction in
#: the same thread): in generations of a few seconds (a short horizon, or
#: an accelerated clock) that is several generations, each of them read in
#: LMDB by every new key once its kept filter is gone. Eight kept with the
#: newest answer for a whole horizon of up to 8 h (nine generations); a
#: kept filter costs about what its sealed one will, and none is kept once
#: the sealed ones are built.
LIVE_KEEP_MAX = 8
LIVE_SCAN_MAX = 64


#: How many Bloom filters the LiveFilters have grown (LiveFilter._grow): a
#: Space's _FilterTable of its live filters made before one grew is made again.
cdef uint64_t _live_grows = 0


@cython.final
cdef class _FilterTable:
    """The Bloom filters a claim tests, as one C array of their geometry
    (copies of each ds_bloom: bits, nblocks and k never change once a
    filter is made; nblocks 0: no filter), so that a claim's prefetches and
    tests read a few contiguous lines instead of one filter object after
    another: after a consumer's idle wait each object was a cache miss of
    its own, and the prefetch loop alone took 8% of the calls' samples in
    the main job (docs/benchmarks.md). Holds the filters (``refs``), so
    none is freed while the table is in use, even by a thread that made a
    newer one meanwhile.

    A Space has two: its sealed filters, one entry per generation from
    ``base`` (Space._index_blooms), and its live filters' (Space._live_table:
    live filter j's from ``start[j]`` to ``start[j + 1]``, the newest first,
    made for ``live``, ``older`` and ``grows``)."""

    cdef ds_bloom *f
    cdef Py_ssize_t n
    cdef Py_ssize_t *start
    cdef Py_ssize_t nf
    cdef uint32_t base
    cdef list refs
    cdef object live, older
    cdef uint64_t grows

    def __dealloc__(self):
        free(self.f)
        free(self.start)


cdef _FilterTable _filter_table(Py_ssize_t n, Py_ssize_t nf):
    # A table of n entries (zeroed: no filter) and, for nf > 0, nf + 1 starts.
    cdef _FilterTable t = _FilterTable.__new__(_FilterTable)
    t.f = <ds_bloom *>calloc(n if n > 0 else 1, sizeof(ds_bloom))
    if nf > 0:
        t.start = <Py_ssize_t *>malloc((nf + 1) * sizeof(Py_ssize_t))
    if t.f == NULL or (nf > 0 and t.start == NULL):
        raise MemoryError()
    t.n, t.nf = n, nf
    return t


cdef class LiveFilter:
    """Every key one Space wrote (or found unresolved) since it was seeded:
    Bloom filters of doubling size, the newest taking the adds. Insert-only,
    like the sealed generations' filters; "maybe" from any answers maybe
    (the Space tests them through its _FilterTable)."""

    cdef list filters
    cdef BloomFilter last
    cdef uint64_t room  # keys the newest filter takes before the next is made
    cdef public uint64_t keys
    # The generations whose records it holds keys of, lo..hi (its pending
    # keys, of no generation, aside); a Space widens hi as it adds.
    cdef public uint32_t lo, hi

    def __init__(self, uint64_t first_keys=0, uint32_t lo=0):
        self.filters = []
        self.keys = 0
        self.lo = lo
        self.hi = lo
        self._grow(first_keys or LIVE_FIRST_KEYS)

    cdef _grow(self, uint64_t n):
        global _live_grows
        self.last = BloomFilter(n, LIVE_FP_RATE)
        self.filters.append(self.last)
        self.room = n
        _live_grows += 1

    cdef add(self, uint64_t h):
        if self.room == 0:
            self._grow(2 * <uint64_t>self.last.b.nkeys)
        ds_bloom_add(&self.last.b, h)
        self.room -= 1
        self.keys += 1

    cdef add_at(self, uint64_t h, uint32_t gen):
        # A record's key, in generation ``gen``.
        self.add(h)
        if gen > self.hi:
            self.hi = gen

    @property
    def nbytes(self) -> int:
        cdef BloomFilter bf
        cdef uint64_t n = 0
        for bf in self.filters:
            n += <uint64_t>bf.b.nblocks * DS_BLOOM_BLOCK_BYTES
        return n


cdef enum:
    # Keys a Space remembers the early prefetch of (Space.prefetch_early):
    # a call starts them early for batches of at most this many keys.
    PREFETCH_KEYS = 4


cdef enum:
    # The live filters whose "maybe" a claim keeps apart (_live_hits): one
    # more is folded into the last range (a superset, so no record is
    # missed). A Space keeps at most LIVE_KEEP_MAX + 1 of them.
    LIVE_HITS_MAX = 16


cdef struct _live_hits:
    # The generation ranges lo..hi of the live filters that may hold a key
    # (n of them; none: the key is in no live filter).
    int n
    uint32_t lo[LIVE_HITS_MAX]
    uint32_t hi[LIVE_HITS_MAX]


cdef inline void _hits_add(_live_hits *hits, uint32_t lo, uint32_t hi) noexcept:
    cdef int i = hits.n
    if i == LIVE_HITS_MAX:
        i -= 1
        if hits.lo[i] < lo:
            lo = hits.lo[i]
        if hits.hi[i] > hi:
            hi = hits.hi[i]
    else:
        hits.n += 1
    hits.lo[i] = lo
    hits.hi[i] = hi


cdef inline bint _hits_cover(const _live_hits *hits, uint32_t g) noexcept:
    # Whether a live filter that may hold the key answers for generation g.
    cdef int i
    for i in range(hits.n):
        if hits.lo[i] <= g <= hits.hi[i]:
            return True
    return False


cdef list _overlay_chain(Overlay ov):
    # ``ov`` and the overlays it reads through (one being applied under it),
    # newest first; the last one's snapshot is LMDB's (_chain_base).
    cdef list chain = [ov]
    while type(ov.snapshot) is Overlay:
        ov = <Overlay>ov.snapshot
        chain.append(ov)
    return chain


cdef inline object _chain_base(list chain):
    # The LMDB snapshot under an _overlay_chain (no negative index: the
    # module is compiled with wraparound off).
    return (<Overlay>chain[len(chain) - 1]).snapshot


cdef inline object _getter(object txn):
    # What the Space's lookups take as ``get``: an Overlay itself (read by
    # cdef calls, _get), or any other transaction's bound get.
    return txn if type(txn) is Overlay else txn.get


cdef inline object _get(object get, bytes key, object db):
    # ``get(key, None, db)`` of a _getter() answer.
    if type(get) is Overlay:
        return (<Overlay>get)._get(key, db)
    return get(key, None, db)


cdef inline int _put(object txn, bytes key, bytes value, object db) except -1:
    # ``txn.put(key, value, db=db)`` (overwriting), in an Overlay a cdef call.
    if type(txn) is Overlay:
        (<Overlay>txn)._write((<Overlay>txn)._code(db), key, value, False)
    else:
        txn.put(key, value, False, True, False, db)
    return 0


cdef enum:
    # How long (us) a pause of a loop of py-lmdb calls in a background
    # thread lasts (Space.build_bloom, Space.evict_step; the store's own
    # threads pass ``pause_every``).
    PAUSE_US = 100


cdef inline void _pause() noexcept:
    # Each py-lmdb call releases the GIL and the loop takes it back at once,
    # before a thread that waits for it has woken up: that thread waits for
    # the whole loop. Sleeping a while without the GIL lets it in.
    with nogil:
        usleep(PAUSE_US)


cdef class Space:
    """One namespace inside one partition: the databases and the generations a
    lookup must probe. Held by the store; cheap to use on every request."""

    cdef public object records     # py-lmdb database handle: ns|gen|key -> record
    cdef public object pending     # ns|first_seen|key -> gen of every PENDING record
    cdef public object meta
    cdef public bytes prefix       # namespace id, 2 bytes big-endian
    cdef public bytes frontier_key
    cdef public int64_t gen_len    # microseconds
    cdef public uint32_t oldest    # oldest generation that may hold records
    cdef public uint32_t newest    # newest generation seen written
    cdef public int64_t initial_frontier
    cdef public dict blooms        # generation -> BloomFilter of its keys (sealed generations only)
    cdef public bytes gens_key
    cdef Hasher hasher
    cdef bytes _hit                # the key of _find's last generation hit
    # How often a filter let a probe be skipped, and how often it said
    # "maybe"; how many probes read a generation in LMDB (the maybes, and
    # the generations no filter answered for).
    cdef public unsigned long long bloom_skips
    cdef public unsigned long long bloom_maybes
    cdef public unsigned long long probe_reads
    # The live filter, while this process holds the partition's write-behind
    # window (live_epoch: the Overlay.epoch it was seeded in, one per
    # opening): every key this Space wrote since the seed, so "not in it"
    # proves a key absent from generations >= live_from and (live_pending)
    # from the pending database, with no LMDB read (docs/guarantees.md,
    # "Filters"). None until seeded (or if a seed failed: the next
    # generation's seed starts afresh).
    #
    # At a newer generation the filter is not made afresh but rolled: the
    # newest takes the adds from then on, seeded with the unresolved
    # records only, and the one before is kept in live_older (oldest first),
    # still answering for the generations it holds keys of (lo..hi), until
    # every one of them has its sealed filter in ``blooms``; then it is
    # dropped and live_from moves past its hi (_prune_live). Every key this
    # Space wrote since the seed, in a generation >= live_from, is in one of
    # them.
    cdef public LiveFilter live
    cdef public list live_older
    cdef public uint64_t live_epoch
    cdef public uint32_t live_from
    cdef public uint32_t live_top   # the generation probes started from at the seed or the last roll
    cdef public bint live_pending
    cdef public unsigned long long live_skips
    cdef public unsigned long long live_seeds
    cdef public unsigned long long live_rolls
    cdef Py_ssize_t _live_blooms    # len(blooms) when live_older was last pruned
    # The generation state as _read_state last read it through the overlay
    # whose serial is _gs_of, at its meta_version _gs_ver: good while that
    # has not moved. A serial, not the overlay: a reference kept here made
    # the call that next replaced it free an applied overlay's thousands of
    # entries (a fraction of a millisecond), where the thread that applied
    # it frees them now.
    cdef uint64_t _gs_of
    cdef uint64_t _gs_ver
    cdef gen_state _gs
    # The same for the stored eviction frontier (_frontier): read through
    # the overlay of serial _fr_of at its meta_version _fr_ver, NO_FRONTIER
    # for none stored (no initial_frontier is below it).
    cdef uint64_t _fr_of
    cdef uint64_t _fr_ver
    cdef int64_t _fr
    # ``blooms`` as a table indexed by generation - _bl.base (no filter
    # where a generation has none), for _find and _prefetch: made again
    # whenever blooms' size changed. Filters are only ever added for
    # generations that had none and dropped below the oldest one probed, so
    # a table made before a change at worst lacks a new filter (that
    # generation is read in LMDB). (40 bytes per generation between the
    # oldest filter and the newest: a small share of what the filters
    # themselves take.)
    cdef _FilterTable _bl
    cdef Py_ssize_t _bl_size
    # The live filters' table (_live_table), made again whenever ``live``,
    # ``live_older`` or the number of a live filter's Bloom filters changed.
    cdef _FilterTable _lv
    # The last PREFETCH_KEYS keys (bytes objects) whose probes were started
    # early (prefetch_early), a ring, and their _key_hash: _claim takes the
    # hash for one of those objects rather than computing it again, and
    # does not prefetch its blocks a second time. _pf_ukeys holds the
    # unresolved-record key _claim made for a slot's key (None: none yet),
    # and a completion or release of a key with the same bytes soon after
    # (_ring_ukey) takes that object and the hash instead of making the
    # key, hashing it for the overlay's dicts and for the filters again.
    cdef list _pf_keys, _pf_ukeys
    cdef uint64_t _pf_h[PREFETCH_KEYS]
    cdef unsigned _pf_next
    #: Generations below this one may be deleted by an eviction transaction
    #: running beside the write-behind window (dedupstore/window.py
    #: Window.beside) while calls go on: a claim leaves a record it finds
    #: there as it is (0: none).
    cdef public uint32_t evict_floor

    def __init__(self, records, pending, meta, bytes prefix, int64_t gen_len, uint32_t oldest,
                 int64_t initial_frontier, Hasher hasher):
        self.records = records
        self.pending = pending
        self.meta = meta
        self.prefix = prefix
        self.hasher = hasher
        self.blooms = {}
        self.gens_key = b"G" + prefix
        self.bloom_skips = 0
        self.bloom_maybes = 0
        self.probe_reads = 0
        self.live = None
        self.live_older = []
        self.live_epoch = 0
        self.live_from = 0
        self.live_top = 0
        self.live_pending = False
        self.live_skips = 0
        self.live_seeds = 0
        self.live_rolls = 0
        self._live_blooms = 0
        self._bl = _filter_table(0, 0)
        self._bl_size = 0
        self._lv = None
        self._pf_keys = [None] * PREFETCH_KEYS
        self._pf_ukeys = [None] * PREFETCH_KEYS
        self.frontier_key = b"F" + prefix
        self.gen_len = gen_len
        self.oldest = oldest
        self.newest = oldest
        self.initial_frontier = initial_frontier
        self.evict_floor = 0

    cpdef uint32_t generation(self, int64_t now):
        if now < 0:
            return 0
        return <uint32_t>(now // self.gen_len)

    cdef object _find(self, object get, object kb, bytes ukey, uint32_t top, uint32_t *found, bint pending=True,
                      const _live_hits *live=NULL, uint64_t h=0, bint hashed=False):
        """Probe generations from ``top`` down (completed records, under
        ``kb``), then, with ``pending``, the pending database (unresolved
        ones, under ``ukey``);
        a key is in exactly one place in any snapshot. After a generation hit
        kb holds the record's key; a pending hit sets ``found`` to
        UNRESOLVED_GEN. A sealed generation whose
        filter rules the key out is skipped; a "maybe" is always confirmed in
        LMDB. After a generation hit ``_hit`` is the key it was found under.

        Each probe asks with a fresh key object: a key object's hash is
        cached once computed, and the write-behind overlay looks keys up in
        dicts, so a key rewritten in place after one probe would miss there
        in the next (a record in an older generation, not yet applied, would
        look absent).

        ``live``: which live filters may hold the key (_live_hits): a
        generation from ``live_from`` on that none of them answers for is
        not probed (each record's key went into the filter answering for its
        generation when it was written, or into the seed), so a key none of
        them may hold is probed in none of those generations.
        ``hashed``: ``h`` is the key's hash (_key_hash) already. ``kb``
        None (only with ``hashed``): made from ``ukey`` at the first probe,
        if any (a new key the live filter and the sealed filters rule out is
        probed nowhere)."""
        cdef uint32_t g = top
        cdef object raw
        cdef bytes probe = kb
        cdef bint used = False, skip
        cdef const ds_bloom *bf
        cdef ds_bloom_probe q
        if hashed:
            ds_bloom_probe_init(&q, h)
        if PyDict_Size(self.blooms) != self._bl_size:
            self._index_blooms()
        cdef _FilterTable bl = self._bl  # kept: a table made meanwhile leaves this one whole
        while True:
            if live != NULL and g >= self.live_from and not _hits_cover(live, g):
                self.live_skips += 1
                if g <= self.oldest:
                    break
                g -= 1
                continue
            skip = False
            if g >= bl.base and <Py_ssize_t>(g - bl.base) < bl.n and bl.f[g - bl.base].nblocks:
                bf = &bl.f[g - bl.base]
                if not hashed:
                    ds_bloom_probe_init(&q, ds_siphash64(&self.hasher.key, PyBytes_AS_STRING(kb) + C_KEY_PREFIX_BYTES,
                                                         PyBytes_GET_SIZE(kb) - C_KEY_PREFIX_BYTES))
                    hashed = True
                if ds_bloom_probe_maybe(bf, &q):
                    self.bloom_maybes += 1
                else:
                    self.bloom_skips += 1
                    skip = True
            if not skip:
                if kb is None:
                    kb = probe = _record_key_of(ukey)
                elif used:
                    probe = PyBytes_FromStringAndSize(PyBytes_AS_STRING(kb), PyBytes_GET_SIZE(kb))
                used = True
                _set_gen(probe, g)
                self.probe_reads += 1
                raw = _get(get, probe, self.records)
                if raw is not None:
                    found[0] = g
                    self._hit = probe
                    return raw
            if g <= self.oldest:
                break
            g -= 1
        if not pending:
            return None
        raw = _get(get, ukey, self.pending)
        if raw is not None:
            found[0] = C_UNRESOLVED_GEN
        return raw

    cdef _index_blooms(self):
        cdef dict blooms = self.blooms
        cdef Py_ssize_t pos = 0
        cdef PyObject *k
        cdef PyObject *v
        cdef uint32_t lo = 0xFFFFFFFF, hi = 0, g
        cdef _FilterTable t
        while PyDict_Next(blooms, &pos, &k, &v):
            g = <object>k
            if g < lo:
                lo = g
            if g > hi:
                hi = g
        if lo > hi:
            t = _filter_table(0, 0)
            t.refs = []
        else:
            t = _filter_table(hi - lo + 1, 0)
            t.base = lo
            t.refs = []
            pos = 0
            while PyDict_Next(blooms, &pos, &k, &v):
                g = <object>k
                t.f[g - lo] = (<BloomFilter?><object>v).b
                t.refs.append(<object>v)
        self._bl, self._bl_size = t, PyDict_Size(blooms)

    cdef _FilterTable _live_table(self):
        # The live filters' table, made again if they changed since the last
        # (see _lv); only while ``live`` is set.
        cdef _FilterTable t = self._lv
        cdef list older = self.live_older
        cdef LiveFilter lf
        cdef BloomFilter bf
        cdef Py_ssize_t n = 0, i = 0, j, nf = 1 + len(older)
        if t is not None and t.live is self.live and t.older is older and t.grows == _live_grows:
            return t
        for j in range(nf):
            n += len((self.live if j == 0 else <LiveFilter>older[j - 1]).filters)
        t = _filter_table(n, nf)
        t.refs = []
        for j in range(nf):
            lf = self.live if j == 0 else <LiveFilter>older[j - 1]
            t.refs.append(lf)
            t.start[j] = i
            for bf in lf.filters:
                t.f[i] = bf.b
                i += 1
        t.start[nf] = i
        t.live, t.older, t.grows = self.live, older, _live_grows
        self._lv = t
        return t

    cdef inline uint64_t _key_hash(self, bytes key):
        return ds_siphash64(&self.hasher.key, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))

    cdef inline uint64_t _record_key_hash(self, bytes rkey):
        # _key_hash of the business key inside a records key (after ns|gen).
        return ds_siphash64(&self.hasher.key, PyBytes_AS_STRING(rkey) + C_KEY_PREFIX_BYTES,
                            PyBytes_GET_SIZE(rkey) - C_KEY_PREFIX_BYTES)

    cdef LiveFilter _live_for(self, object txn, uint32_t top):
        """The newest live filter, which takes the keys of a write in
        ``txn`` whose probes start at generation ``top``: seeded first if
        this is the first such write of the window's epoch, rolled if of a
        newer generation; None when ``txn`` is not a write-behind window's
        overlay."""
        cdef Overlay ov
        if type(txn) is not Overlay:
            return None
        ov = <Overlay>txn
        if ov.epoch == 0:
            return None
        if ov.epoch != self.live_epoch or (top > self.live_top and self.live is None):
            self._seed(ov, top)
        elif top > self.live_top:
            self._roll(ov, top)
        elif self.live_older and PyDict_Size(self.blooms) != self._live_blooms:
            self._prune_live()
        return self.live

    cdef int _prefetch(self, uint64_t h, uint32_t top) except -1:
        # Fetch every block a new key's probe will test: the live filters'
        # and the sealed filters' of generations top down to the oldest, one
        # load each that nothing waits for (ds_bloom_probe_fetch). Each
        # filter test is then a cache hit, not one DRAM miss after another
        # (a new key tests every filter: as many misses as there are
        # filters, where these loads overlap them).
        cdef _FilterTable t
        cdef Py_ssize_t i
        cdef ds_bloom_probe q
        ds_bloom_probe_init(&q, h)
        if self.live is not None:
            t = self._live_table()
            for i in range(t.n):
                ds_bloom_probe_fetch(&t.f[i], &q)
        if PyDict_Size(self.blooms) != self._bl_size:
            self._index_blooms()
        t = self._bl
        cdef Py_ssize_t lo = 0, hi = t.n
        if self.oldest > t.base:
            lo = self.oldest - t.base
        if top < t.base:
            return 0
        if <Py_ssize_t>(top - t.base) + 1 < hi:
            hi = <Py_ssize_t>(top - t.base) + 1
        for i in range(lo, hi):
            ds_bloom_probe_fetch(&t.f[i], &q)  # none where nblocks is 0
        return 0

    cdef int prefetch_early(self, bytes key) except -1:
        # A flush-mode call's _prefetch for ``key`` (checked, as key_bytes
        # gives it) before the work that comes before its claim (the
        # intent's canonical form, the window's lock), so that the Bloom
        # blocks arrive meanwhile instead of while the claim waits for them.
        # Every generation's sealed filter: the claim's top is not known yet.
        cdef unsigned i = self._pf_next % PREFETCH_KEYS
        cdef uint64_t h = self._key_hash(key)
        self._pf_keys[i] = key
        self._pf_ukeys[i] = None
        self._pf_h[i] = h
        self._pf_next += 1
        return self._prefetch(h, 0xFFFFFFFF)

    cdef inline int _prefetched(self, bytes key):
        # The ring slot of ``key`` (the object) in prefetch_early's ring; -1: none.
        cdef int i
        for i in range(PREFETCH_KEYS):
            if _list_item(self._pf_keys, i) == <PyObject *>key:
                return i
        return -1

    cdef bytes _ring_ukey(self, bytes key, uint64_t *h, bint *hashed):
        # For a completion or release of ``key``: the unresolved-record key
        # its claim made (the same object, its dict hash kept), with the
        # key's _key_hash in ``h`` and ``hashed`` set, when prefetch_early's
        # ring holds a key of the same bytes whose claim made one; else a
        # new one, ``hashed`` false. Nothing here runs Python code, so no
        # other thread moves the ring between the slot's test and its reads.
        cdef int i
        cdef PyObject *k
        cdef object u
        cdef Py_ssize_t n = PyBytes_GET_SIZE(key)
        for i in range(PREFETCH_KEYS):
            k = _list_item(self._pf_keys, i)
            if k == <PyObject *>key or (
                k != <PyObject *>None and PyBytes_GET_SIZE(<object>k) == n
                and memcmp(PyBytes_AS_STRING(<object>k), PyBytes_AS_STRING(key), n) == 0
            ):
                u = <object>_list_item(self._pf_ukeys, i)
                if u is not None:
                    h[0] = self._pf_h[i]
                    hashed[0] = True
                    return <bytes>u
                break
        hashed[0] = False
        return _unresolved_key(self.prefix, key)

    cdef int _live_hits(self, uint64_t h, _live_hits *hits) except -1:
        # The generation ranges of the live filters that may hold the key of
        # hash ``h`` (hits.n 0: none may). A "maybe" of a filter kept for
        # past generations sends the probe to those generations only, not to
        # every one the live filters answer for.
        cdef _FilterTable t = self._live_table()
        cdef LiveFilter lf
        cdef Py_ssize_t i, j
        cdef ds_bloom_probe q
        ds_bloom_probe_init(&q, h)
        hits.n = 0
        for j in range(t.nf):
            for i in range(t.start[j], t.start[j + 1]):
                if ds_bloom_probe_maybe(&t.f[i], &q):
                    lf = <LiveFilter>t.refs[j]
                    _hits_add(hits, lf.lo, lf.hi)
                    break
        return 0

    cdef _roll(self, Overlay ov, uint32_t top):
        # A newer generation, the same epoch: the newest filter is kept for
        # the generations it answers for, and a fresh one takes over.
        cdef LiveFilter lf = LiveFilter(0, top)
        cdef list chain = _overlay_chain(ov)
        cdef bint pend = self._seed_pending(lf, chain, _chain_base(chain))
        self.live_older = self.live_older + [self.live]
        self.live = lf
        self.live_pending = pend
        self.live_top = top
        self.live_rolls += 1
        self._prune_live()

    cdef _prune_live(self):
        # Drops the oldest kept filters while every generation they answer
        # for has its sealed filter (or is evicted), or while more than
        # LIVE_KEEP_MAX are kept; live_from then moves past them. The list is
        # replaced, not changed in place.
        cdef LiveFilter lf
        cdef uint32_t g, lo
        cdef bint done
        cdef dict blooms = self.blooms
        cdef list older = self.live_older
        self._live_blooms = PyDict_Size(blooms)
        while older:
            lf = older[0]
            if len(older) <= LIVE_KEEP_MAX:
                lo = lf.lo if lf.lo > self.oldest else self.oldest
                done = lf.hi < lo or lf.hi - lo < LIVE_SCAN_MAX
                g = lo
                while done and g <= lf.hi:
                    done = g in blooms
                    g += 1
                if not done:
                    break
            older = older[1:]
            if lf.hi + 1 > self.live_from:
                self.live_from = lf.hi + 1
        self.live_older = older

    cdef _seed(self, Overlay ov, uint32_t top):
        # What this handle knows now: the overlays (the window's, and the one
        # being applied under it, if any) over the snapshot they read. Only
        # this process writes the partition while its window is open, and
        # every key a Space writes afterwards is added (claim, complete), so
        # the filter stays a superset of the keys in what it covers.
        cdef list chain = _overlay_chain(ov)
        cdef object base = _chain_base(chain)
        cdef Overlay o
        cdef bytes k
        cdef bytes prefix = self.prefix
        cdef int ns = (<uint8_t>prefix[0] << 8) | <uint8_t>prefix[1]
        cdef LiveFilter lf
        self.live = None
        self.live_older = []
        self.live_epoch = ov.epoch
        self.live_top = top
        # The filter answers for the generations past the newest that LMDB
        # holds records of (all of them, if none: empty generations between
        # are not probed either); the overlays' records there go into it.
        self.live_from = 0
        cur = base.cursor(db=self.records)
        positioned = cur.set_range((<object>(ns + 1)).to_bytes(2, "big")) if ns < 0xFFFF else False
        positioned = cur.prev() if positioned else cur.last()
        if positioned:
            k = cur.key()
            if PyBytes_GET_SIZE(k) > C_KEY_PREFIX_BYTES and k[:2] == prefix:
                self.live_from = _record_gen(k) + 1
        lf = LiveFilter(0, self.live_from)
        lf.hi = top
        for o in chain:
            for k in o._keys(1):  # deleted ones too: a key too many only costs a probe
                if (PyBytes_GET_SIZE(k) > C_KEY_PREFIX_BYTES and k[:2] == prefix
                        and _record_gen(k) >= self.live_from):
                    lf.add_at(self._record_key_hash(k), _record_gen(k))
        self.live_pending = self._seed_pending(lf, chain, base)
        self.live = lf
        self.live_seeds += 1

    cdef bint _seed_pending(self, LiveFilter lf, list chain, object base) except -1:
        # Every unresolved record of the namespace into ``lf``, as the
        # overlays ``chain`` (_overlay_chain) over their snapshot ``base``
        # hold them, unless there are too many: then False (the pending
        # database is read instead).
        cdef Overlay o
        cdef bytes k
        cdef Py_ssize_t n = 0
        cdef bytes prefix = self.prefix
        cdef bint pend
        # Every unresolved record of the namespace, unless there are too many
        # (the database's count, of every namespace, spares reading them to
        # find out).
        pend = base.stat(self.pending)["entries"] <= LIVE_PENDING_MAX
        cur = base.cursor(db=self.pending)
        if pend and cur.set_range(prefix):
            for k in cur.iternext(keys=True, values=False):
                if k[:2] != prefix:
                    break
                n += 1
                if n > LIVE_PENDING_MAX:
                    pend = False
                    break
                lf.add(ds_siphash64(&self.hasher.key, PyBytes_AS_STRING(k) + 2, PyBytes_GET_SIZE(k) - 2))
        if pend:
            for o in chain:
                for k in o._keys(2):  # deleted ones too: a key too many only costs a probe
                    if PyBytes_GET_SIZE(k) > 2 and k[:2] == prefix:
                        lf.add(ds_siphash64(&self.hasher.key, PyBytes_AS_STRING(k) + 2, PyBytes_GET_SIZE(k) - 2))
        return pend

    cdef uint32_t _reach(self, object get, int64_t now, gen_state *gs) except? 0:
        """The generation probes start from, and new records go to, with the
        namespace's generation state (one meta lookup) in ``gs``.

        It is this clock's generation, unless another process (whose ``now``
        was read later, say after we waited for the writer lock) already wrote
        into a newer one, or that generation is sealed (its filter is final, so
        no key may be added to it)."""
        cdef uint32_t top = self._top(now)
        self._read_state(get, gs)
        if gs.newest > top:
            top = gs.newest
        if gs.sealed1 > top:
            top = gs.sealed1
        return top

    cdef int _read_state(self, object get, gen_state *gs) except -1:
        # Nearly every call reads it, and in a window it changes only with
        # the overlay's meta database (Overlay.meta_version): read through
        # the same overlay at the same version, the last answer is kept.
        cdef bint windowed = type(get) is Overlay
        if windowed and (<Overlay>get).serial == self._gs_of and (<Overlay>get).meta_version == self._gs_ver:
            gs[0] = self._gs
            return 0
        cdef object raw = _get(get, self.gens_key, self.meta)
        cdef const uint8_t *p
        if raw is None:
            gs.sealed1 = 0
            gs.newest = 0
            gs.flags = 0
        elif PyBytes_GET_SIZE(raw) != GS_BYTES:
            raise StoreFormatError("a generation-state entry is corrupt")
        else:
            p = <const uint8_t *>PyBytes_AS_STRING(raw)
            gs.sealed1 = (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]
            gs.newest = (<uint32_t>p[4] << 24) | (<uint32_t>p[5] << 16) | (<uint32_t>p[6] << 8) | p[7]
            gs.flags = p[8]
        if windowed:
            self._gs_of = (<Overlay>get).serial
            self._gs_ver = (<Overlay>get).meta_version
            self._gs = gs[0]
        return 0

    cdef int _write_state(self, object txn, const gen_state *gs) except -1:
        txn.put(self.gens_key, _gen_bytes(gs.sealed1) + _gen_bytes(gs.newest) + bytes((gs.flags,)),
                False, True, False, self.meta)
        return 0

    def generation_state(self, txn) -> tuple:
        """(first unsealed generation, newest generation written) as ``txn``
        sees it."""
        cdef gen_state gs
        self._read_state(_getter(txn), &gs)
        return (gs.sealed1, gs.newest)

    def seal(self, txn, uint32_t gen) -> int:
        """Seal every generation up to ``gen``: no key is added to them any
        more, so a filter built from one stays complete. Returns the first
        unsealed generation."""
        cdef gen_state gs
        self._read_state(_getter(txn), &gs)
        if gen + 1 > gs.sealed1:
            gs.sealed1 = gen + 1
            self._write_state(txn, &gs)
        return gs.sealed1

    def build_bloom(self, txn, uint32_t gen, double fp_rate, uint64_t tag,
                    Py_ssize_t max_gathered=MAX_GATHERED_HASHES, Py_ssize_t pause_every=0):
        """A filter of every key stored in generation ``gen``, or None when it
        holds no record. One cursor pass gathers the keys' hashes (8 bytes a
        key, at most ``max_gathered`` of them, freed on return), then the
        filter, sized to their count, takes them all; a larger generation is
        counted in that pass and added in a second. The passes are LMDB's own
        cursor, the GIL held, where py-lmdb allows it (_lmdb.pxi: with
        ``pause_every`` > 0, a pause every SCAN_CHUNK_KEYS keys); else
        py-lmdb's, each step handing the GIL over (``pause_every`` > 0: every
        that many keys, a pause, :func:`_pause`)."""
        cdef bytes start = record_key(self.prefix, gen, b"")
        cdef Py_ssize_t n = 0, cap = max(1, min(4096, max_gathered))
        cdef uint64_t *hashes
        cdef uint64_t *grown
        cdef bint gathered = True
        cdef BloomFilter bf
        cdef bytes k
        # LMDB's own cursor, the GIL held (_lmdb.pxi), else py-lmdb's.
        cdef object direct = _lmdb_bloom(txn, self.records, start, &self.hasher.key, fp_rate, tag,
                                         <size_t>max(0, max_gathered), pause_every > 0)
        if direct is not _NOT_DIRECT:
            return direct
        hashes = <uint64_t *>malloc(cap * sizeof(uint64_t))
        if hashes == NULL:
            raise MemoryError()
        try:
            cur = txn.cursor(db=self.records)
            if cur.set_range(start):
                for k in cur.iternext(keys=True, values=False):
                    if not k.startswith(start):
                        break
                    if pause_every > 0 and n % pause_every == pause_every - 1:
                        _pause()
                    if gathered and n == cap:
                        if cap >= max_gathered:
                            gathered = False  # only counted from here on
                        else:
                            grown = <uint64_t *>realloc(hashes, min(2 * cap, max_gathered) * sizeof(uint64_t))
                            if grown == NULL:
                                raise MemoryError()
                            hashes, cap = grown, min(2 * cap, max_gathered)
                    if gathered:
                        hashes[n] = self._record_key_hash(k)
                    n += 1
            if n == 0:
                return None
            bf = BloomFilter(n, fp_rate, tag)
            if gathered:
                ds_bloom_add_many(&bf.b, hashes, <size_t>n)
                return bf
            free(hashes)
            hashes = NULL
            cur.set_range(start)
            n = 0
            for k in cur.iternext(keys=True, values=False):
                if not k.startswith(start):
                    break
                n += 1
                if pause_every > 0 and n % pause_every == 0:
                    _pause()
                ds_bloom_add(&bf.b, self._record_key_hash(k))
            return bf
        finally:
            free(hashes)

    cdef inline uint32_t _top(self, int64_t now):
        cdef uint32_t g = self.generation(now)
        if g > self.newest:
            self.newest = g
        return self.newest

    cdef int64_t _frontier(self, object get) except? -1:
        # Every claim that could be new reads it: through the same overlay
        # at the same meta_version, the last answer is kept (as _read_state).
        cdef bint windowed = type(get) is Overlay
        cdef object raw
        cdef int64_t stored
        if windowed and (<Overlay>get).serial == self._fr_of and (<Overlay>get).meta_version == self._fr_ver:
            stored = self._fr
        else:
            raw = _get(get, self.frontier_key, self.meta)
            stored = NO_FRONTIER if raw is None else int.from_bytes(raw, "little", signed=True)
            if windowed:
                self._fr_of = (<Overlay>get).serial
                self._fr_ver = (<Overlay>get).meta_version
                self._fr = stored
        return stored if stored > self.initial_frontier else self.initial_frontier

    def frontier(self, txn) -> int:
        """The eviction frontier (microseconds) as committed in ``txn``'s snapshot."""
        return self._frontier(_getter(txn))

    def stored_oldest(self, txn) -> int:
        """The oldest generation that may hold records, as ``txn`` sees it
        (never below what this handle already knows)."""
        cdef object raw = txn.get(b"O" + self.prefix, None, self.meta)
        if raw is not None and _gen_of(raw) > self.oldest:
            return _gen_of(raw)
        return self.oldest

    def advance_oldest(self, uint32_t gen) -> None:
        """Stop probing generations below ``gen``: call only once the
        transaction that emptied them has committed."""
        if gen > self.oldest:
            self.oldest = gen
            for g in [g for g in self.blooms if g < gen]:
                del self.blooms[g]

    def evictable_below(self, int64_t horizon, int64_t now) -> int:
        """The first generation that :meth:`evict_step` at ``now`` leaves:
        every one below it ended at least ``horizon`` ago."""
        if now - horizon < self.gen_len:
            return 0
        return min(<uint32_t>((now - horizon) // self.gen_len), self.generation(now))

    def evict_step(self, txn, int64_t horizon, int64_t now, long budget, long pause_every=0):
        """Evict, inside ``txn``, up to ``budget`` records of generations whose
        every record is past ``horizon``, oldest generation first
        (``pause_every`` > 0: a pause every that many, :func:`_pause`).

        Generations hold completed records only: unresolved ones (the only
        evidence of an effect in flight) live in the pending database, which
        eviction never touches. The frontier is raised in the same transaction
        as the first deletion that needs it, so it can never lag the evidence
        it describes, and never moves backwards. Returns (deleted, budget_left,
        oldest): the caller passes ``oldest`` to advance_oldest() after the
        commit."""
        cdef object get = _getter(txn)
        cdef uint32_t oldest = self.stored_oldest(txn)
        cdef uint32_t current = self.generation(now)
        cdef int64_t frontier = self._frontier(get)
        cdef int64_t gen_end
        cdef long deleted = 0
        cdef bytes start
        cdef bint positioned
        cdef object direct
        cdef long n
        cur = txn.cursor(db=self.records)
        while budget > 0 and oldest < current:
            gen_end = (<int64_t>oldest + 1) * self.gen_len
            if gen_end + horizon > now:
                break
            start = record_key(self.prefix, oldest, b"")
            positioned = cur.set_range(start)
            if positioned and cur.key().startswith(start) and frontier < gen_end:
                # Before the first record of this generation goes.
                frontier = gen_end
                txn.put(self.frontier_key, int.to_bytes(frontier, 8, "little", signed=True), False, True, False,
                        self.meta)
            # LMDB's own calls, without the GIL (_lmdb.pxi); else py-lmdb's,
            # pausing for the calls (each hands the GIL over).
            direct = _lmdb_delete_prefix(txn, self.records, start, budget) if positioned else None
            if direct is not None:
                n, positioned = direct
                deleted += n
                budget -= n
            while direct is None and positioned and budget > 0:
                if not cur.key().startswith(start):
                    positioned = False
                    break
                positioned = cur.delete()
                deleted += 1
                budget -= 1
                if pause_every > 0 and deleted % pause_every == 0:
                    _pause()
            if positioned:
                break  # budget spent inside this generation
            txn.delete(bloom_key(self.prefix, oldest), b"", self.meta)
            oldest += 1
            txn.put(b"O" + self.prefix, _gen_bytes(oldest), False, True, False, self.meta)
        if deleted:
            raw = _get(get, b"E" + self.prefix, self.meta)
            total = deleted + (0 if raw is None else int.from_bytes(raw, "little"))
            txn.put(b"E" + self.prefix, total.to_bytes(8, "little"), False, True, False, self.meta)
        return (deleted, budget, oldest)

    def evicted_total(self, txn) -> int:
        cdef object raw = txn.get(b"E" + self.prefix, None, self.meta)
        return 0 if raw is None else int.from_bytes(raw, "little")

    def lookup(self, txn, bytes key, int64_t now):
        """(generation, raw record) or None; an unresolved record's generation
        is UNRESOLVED_GEN."""
        cdef uint32_t found = 0
        cdef gen_state gs
        cdef bytes kb = _new_key(self.prefix, key)
        cdef object get = _getter(txn)
        cdef uint32_t top = self._reach(get, now, &gs)
        raw = self._find(get, kb, _unresolved_key(self.prefix, key), top, &found)
        if raw is None:
            return None
        return (found, raw)

    def claim(self, txn, bytes key, object digest, int64_t now, int64_t lease, int64_t event_time,
              object claimant, object event_id, bint write):
        """Decide a claim. Returns (status, token, retry_after_us, raw_record,
        other_event, wrote, generation), or None when ``write`` is false and
        the verdict needs a write (the caller retries in a write transaction).
        ``generation`` is where the record lives: UNRESOLVED_GEN for one that
        is not completed, which is where a NEW record goes."""
        return self._claim_one(txn, key, digest, now, lease, event_time, claimant, event_id, write)

    cdef object _claim_one(self, object txn, bytes key, object digest, int64_t now, int64_t lease,
                           int64_t event_time, object claimant, object event_id, bint write):
        cdef gen_state gs
        cdef object get = _getter(txn)
        cdef int64_t frontier = NO_FRONTIER
        return self._claim(txn, get, key, digest, now, lease, event_time, claimant, event_id, write,
                           self._reach(get, now, &gs), &frontier)

    cdef object _claim(self, object txn, object get, bytes key, object digest, int64_t now, int64_t lease,
                       int64_t event_time, object claimant, object event_id, bint write, uint32_t top,
                       int64_t *frontier):
        # ``top`` is _reach()'s answer and ``frontier[0]`` the eviction
        # frontier once read (NO_FRONTIER before): neither changes inside a
        # transaction that only claims, so a batch reads each once.
        cdef ds_record cur, nxt
        cdef ds_claim_req req
        cdef ds_claim_out out
        cdef uint32_t found = 0
        cdef bytes ukey = _unresolved_key(self.prefix, key)
        cdef uint64_t h
        cdef int i = self._prefetched(key)
        if i >= 0:
            h = self._pf_h[i]  # and its blocks are on their way (prefetch_early)
            self._pf_ukeys[i] = ukey  # for the completion (_ring_ukey)
        else:
            h = self._key_hash(key)
            self._prefetch(h, top)
        # The live filter (a write in the window's overlay): a key it rules
        # out is in no generation from live_from on, nor (live_pending)
        # unresolved, and those are not read at all.
        cdef LiveFilter live = self._live_for(txn, top) if write else None
        cdef _live_hits hits
        if live is not None:
            self._live_hits(h, &hits)
        cdef bint absent = live is not None and hits.n == 0
        # Writing, the pending database is not probed first: a key found in
        # no generation is put there with NOOVERWRITE as if absent (most
        # claims that reach a write are NEW), and only when that finds a
        # record is it read and decided upon. One LMDB call instead of two.
        cdef object raw = self._find(get, None, ukey, top, &found, not write,
                                   &hits if live is not None else NULL, h, True)
        cdef bytes stored
        cdef bint put, unread

        memset(&req, 0, sizeof(req))
        req.now = now
        req.lease = lease
        req.event_time = event_time
        req.frontier = self.initial_frontier
        if digest is not None:
            req.intent = <const uint8_t *>PyBytes_AS_STRING(digest)
        if claimant is not None:
            req.claimant = <const uint8_t *>PyBytes_AS_STRING(claimant)
            req.claimant_len = <uint32_t>PyBytes_GET_SIZE(claimant)
        if event_id is not None:
            req.event_id = <const uint8_t *>PyBytes_AS_STRING(event_id)
            req.event_id_len = <uint32_t>PyBytes_GET_SIZE(event_id)
        if raw is None:
            if not write:
                return None
            if event_time != DS_NO_TIME:
                # Only a claim that could be NEW needs the frontier, and it must
                # be read in this transaction: eviction moves it forward.
                if frontier[0] == NO_FRONTIER:
                    frontier[0] = self._frontier(get)
                req.frontier = frontier[0]
            req.fresh_token = ds_next_token(&_token_state)
            ds_claim_decide(NULL, &req, &nxt, &out)
            stored = _encode(&nxt)
            if type(txn) is Overlay:
                # The record the put finds, if any, is the one to decide on:
                # handed back, not read a second time. A key the live filter
                # rules out, holding every unresolved key, is not asked of
                # the snapshot at all.
                unread = absent and self.live_pending
                self.live_skips += unread
                raw = (<Overlay>txn)._put_or_get(2, ukey, stored, self.pending, unread)
                put = raw is None
            else:
                put = txn.put(ukey, stored, False, False, False, self.pending)
            if put:
                if live is not None:
                    live.add(h)
                elif self.live is not None:  # a write outside the window's overlay
                    self.live.add(h)
                return (out.status, out.token, 0, stored, False, True, UNRESOLVED_GEN)
            # Unresolved already: decide on that record, as a probe would have.
            if raw is None:  # not handed back by an overlay's put
                raw = _get(get, ukey, self.pending)
            found = C_UNRESOLVED_GEN

        _decode(raw, &cur)
        req.fresh_token = ds_next_token(&_token_state)
        ds_claim_decide(&cur, &req, &nxt, &out)
        if out.write == DS_WRITE_NONE:
            return (out.status, out.token, out.retry_after, raw, False, False, found)
        if found != C_UNRESOLVED_GEN and found < self.evict_floor:
            # A completed record (only another event id to count) in a
            # generation that an eviction beside the window is deleting.
            # Rewritten, it would come back below the oldest generation once
            # the eviction commits; left, it goes as if the eviction had come
            # just after this claim.
            return (out.status, out.token, out.retry_after, raw, bool(out.other_event), False, found)
        if not write:
            return None
        stored = _encode(&nxt)
        # Rewritten where it was found: the pending database, or its generation.
        if found == C_UNRESOLVED_GEN:
            _put(txn, ukey, stored, self.pending)
        else:
            _put(txn, self._hit, stored, self.records)
        return (out.status, out.token, out.retry_after, stored, bool(out.other_event), True, found)

    cpdef tuple complete(self, object txn, bytes key, uint64_t token, bytes outcome, int64_t now):
        """(op code, raw record after, generation it lives in). The completed
        record moves from the pending database to the generation probes start
        from: the current one, unless a newer one was written or it is sealed."""
        cdef gen_state gs
        cdef object get = _getter(txn)
        return self._complete(txn, get, key, token, outcome, now, self._reach(get, now, &gs), &gs)

    cdef object _complete(self, object txn, object get, bytes key, uint64_t token, bytes outcome, int64_t now,
                          uint32_t top, gen_state *gs):
        # ``top`` and ``gs`` as _reach() gave them in this transaction; ``gs``
        # is kept current here, so a batch reads them once.
        cdef ds_record cur, nxt
        cdef bytes kb
        cdef uint64_t h = 0
        cdef bint hashed
        cdef bytes ukey = self._ring_ukey(key, &h, &hashed)
        cdef uint32_t found = C_UNRESOLVED_GEN
        cdef int rc
        cdef bytes stored
        cdef LiveFilter live
        cdef object old = _ABSENT
        cdef bint was = False
        # The pending database first: a key is in one place in any snapshot,
        # and a completion almost always finds its record unresolved, so the
        # generations are probed only for a repeated completion.
        cdef object raw
        if type(get) is Overlay:
            # What the overlay's own map holds (_ABSENT: nothing) is kept,
            # for the delete below (Overlay._write_at) to use.
            old = (<Overlay>get)._held(2, ukey, &was)
            raw = (<Overlay>get)._base(2, ukey, self.pending) if old is _ABSENT else old
        else:
            raw = get(ukey, None, self.pending)
        if raw is None:
            raw = self._find(get, _new_key(self.prefix, key), ukey, top, &found, False)
        if raw is None:
            return (DS_OP_LEASE_LOST, None, 0)
        _decode(raw, &cur)
        rc = ds_complete_decide(&cur, token, <const uint8_t *>PyBytes_AS_STRING(outcome),
                                <uint32_t>PyBytes_GET_SIZE(outcome), now, &nxt)
        if rc != DS_OP_APPLY:
            return (rc, raw, found)
        if found != C_UNRESOLVED_GEN:
            raise StoreFormatError("an unresolved record was found in a generation (store format violated)")
        stored = _encode(&nxt)
        # The newest live filter takes the record's key: rolled first if
        # ``top`` is a newer generation, so that it answers for ``top``.
        live = self._live_for(txn, top) if type(txn) is Overlay else self.live
        if type(txn) is Overlay:
            # Known to be there (just read, with what the overlay held).
            (<Overlay>txn)._write_at(2, ukey, None, False, old, was)
        else:
            txn.delete(ukey, b"", self.pending)
        kb = _new_key(self.prefix, key)  # never hashed: see _find
        _set_gen(kb, top)
        _put(txn, kb, stored, self.records)
        if live is not None:
            live.add_at(h if hashed else self._key_hash(key), top)
        if top > gs.newest:
            gs.newest = top
            self._write_state(txn, gs)
        return (rc, stored, top)

    cpdef int release(self, object txn, bytes key, uint64_t token, int64_t now) except? -1:
        cdef ds_record cur
        cdef uint64_t h
        cdef bint hashed
        cdef bytes ukey = self._ring_ukey(key, &h, &hashed)
        cdef object old = _ABSENT
        cdef bint was = False
        cdef object raw
        if type(txn) is Overlay:  # as in _complete
            old = (<Overlay>txn)._held(2, ukey, &was)
            raw = (<Overlay>txn)._base(2, ukey, self.pending) if old is _ABSENT else old
        else:
            raw = txn.get(ukey, None, self.pending)
        if raw is None:
            return DS_OP_LEASE_LOST  # only an unresolved record can be released
        _decode(raw, &cur)
        if ds_release_decide(&cur, token) != DS_OP_APPLY:
            return DS_OP_LEASE_LOST
        if type(txn) is Overlay:
            # Known to be there (just read), as in _complete.
            (<Overlay>txn)._write_at(2, ukey, None, False, old, was)
        else:
            txn.delete(ukey, b"", self.pending)
        return DS_OP_APPLY

    def renew(self, txn, bytes key, uint64_t token, int64_t now, int64_t lease):
        """(op code, raw record after, generation it lives in)."""
        cdef ds_record cur, nxt
        cdef bytes ukey = _unresolved_key(self.prefix, key)
        cdef object raw = txn.get(ukey, None, self.pending)
        cdef bytes stored
        if raw is None:
            # Only an unresolved record holds a lease; report what is there.
            found = self.lookup(txn, key, now)
            return (DS_OP_LEASE_LOST, None, 0) if found is None else (DS_OP_LEASE_LOST, found[1], found[0])
        _decode(raw, &cur)
        if ds_renew_decide(&cur, token, now, lease, &nxt) != DS_OP_APPLY:
            return (DS_OP_LEASE_LOST, raw, UNRESOLVED_GEN)
        stored = _encode(&nxt)
        txn.put(ukey, stored, False, True, False, self.pending)
        return (DS_OP_APPLY, stored, UNRESOLVED_GEN)

def claim_batch(Space space, list order, list keys, list digests, int64_t now, int64_t lease,
                list event_times, object claimant, list results, bint write, txn):
    """Run claims ``order`` (indexes into the other lists), all of keys in
    ``space``, in one transaction ``txn`` (last, so that a partial of the
    rest takes it positionally), storing each verdict tuple at
    ``results[i]``; with ``write`` false, indexes that need a write are left
    as None and returned."""
    cdef Indexes ix = Indexes(order)
    cdef list todo = _claim_batch(space, ix.idx, ix.n, keys, digests, now, lease, event_times, claimant, results,
                                  write, txn)
    return [] if todo is None else todo


cdef list _claim_batch(Space space, const Py_ssize_t *order, Py_ssize_t m, list keys, list digests, int64_t now,
                       int64_t lease, list event_times, object claimant, list results, bint write, object txn):
    # As claim_batch(), over the m indexes at ``order``, but None where no
    # index is left: a writing batch (every one the store runs) leaves none,
    # and makes neither collection.
    cdef list todo = None
    cdef set deferred = None
    cdef Py_ssize_t i, j
    cdef int64_t et
    cdef object get = _getter(txn)
    cdef gen_state gs
    # A claim writes neither the generation state nor the frontier, so one
    # read of each serves the whole batch.
    cdef uint32_t top = space._reach(get, now, &gs)
    cdef int64_t frontier = NO_FRONTIER
    for j in range(m):
        i = order[j]
        if deferred is not None and keys[i] in deferred:
            # An earlier claim of this key in the batch will write: this one is
            # decided after it in the write pass, as if claimed after it returned,
            # not from a snapshot that predates it.
            results[i] = None
            todo.append(i)
            continue
        et = DS_NO_TIME if event_times is None or event_times[i] is None else event_times[i]
        res = space._claim(txn, get, keys[i], digests[i], now, lease, et, claimant, None, write, top, &frontier)
        results[i] = res
        if res is None:
            if todo is None:
                todo, deferred = [], set()
            todo.append(i)
            deferred.add(keys[i])
    return todo


def times_us(object values, object slow):
    """Each of ``values`` (seconds since the epoch, or None) in whole
    microseconds, as a list: a float or an int (not a bool) strictly within
    +-1e11 seconds is converted here, as ``int(value * 1_000_000)`` would;
    anything else (a datetime, a value to refuse) by ``slow(value,
    "event_time")``, whose answer or error is the caller's."""
    cdef list out = []
    for t in values:
        out.append(None if t is None else _time_us(t, slow))
    return out


def time_us(object value, object slow):
    """One value (not None) as :func:`times_us` converts each."""
    return _time_us(value, slow)


cdef inline int64_t _time_us_c(object t, object slow) except? -1:
    # One value (not None) in whole microseconds, as times_us documents, as
    # a C integer: claim()'s event_time is not boxed into an int only to be
    # unboxed again.
    cdef double d
    cdef int overflow = 0
    cdef long long v
    if type(t) is float:
        d = t
        if -1e11 < d < 1e11:  # NaN fails this
            return <int64_t>(d * 1000000.0)
    elif type(t) is int:
        v = PyLong_AsLongLongAndOverflow(t, &overflow)
        if not overflow and -100000000000 < v < 100000000000:
            return v * 1000000
    return slow(t, "event_time")


cdef object _time_us(object t, object slow):
    # The same as an int (the items of times_us' list).
    return _time_us_c(t, slow)


cdef enum:
    # A store's verdict counters (StoreCore._tally_c): one per native status
    # code, then repeats with another event id and duplicates of the same
    # event, the two kinds of repeat stats() tells apart.
    C_NCOUNTS = DS_BEYOND_HORIZON + 3
    C_OTHER_EVENT = DS_BEYOND_HORIZON + 1
    C_SAME_EVENT = DS_BEYOND_HORIZON + 2


cdef inline int _tally_one(tuple res, int64_t *counts) except -1:
    # _tally() of one verdict tuple (claim()'s).
    cdef int code = res[0]
    if code < 0 or code > DS_BEYOND_HORIZON:  # a C array: no code past its end
        raise SystemError(f"a verdict with status code {code}, not one of 0..{DS_BEYOND_HORIZON}")
    counts[code] += 1
    if res[4]:
        counts[C_OTHER_EVENT] += 1
    elif code == DS_DUPLICATE:
        counts[C_SAME_EVENT] += 1
    return 0


cdef int _tally(list rows, int64_t *counts) except -1:
    # Add verdict tuples ``rows`` to ``counts`` (C_NCOUNTS of them). C
    # counters, not a list of ints: an increment of a Python int past 256
    # allocates a new one. Runs with the GIL held and calls no Python code,
    # so no other thread sees the counts half-updated.
    cdef object res
    for res in rows:
        _tally_one(<tuple>res, counts)
    return 0


def complete_batch(Space space, list order, list keys, list tokens, list outcomes, int64_t now,
                   list results, txn):
    """Run completions ``order``, all of keys in ``space``, in one
    transaction (last, as for :func:`claim_batch`); ``results[i]`` gets (op
    code, raw record, generation)."""
    cdef Indexes ix = Indexes(order)
    _complete_batch(space, ix.idx, ix.n, keys, tokens, outcomes, now, results, txn)


cdef int _complete_batch(Space space, const Py_ssize_t *order, Py_ssize_t m, list keys, list tokens,
                         list outcomes, int64_t now, list results, object txn) except -1:
    cdef Py_ssize_t i, j
    cdef object get = _getter(txn)
    cdef gen_state gs
    # Read once; _complete keeps ``gs`` current as it raises the newest generation.
    cdef uint32_t top = space._reach(get, now, &gs)
    for j in range(m):
        i = order[j]
        results[i] = space._complete(txn, get, keys[i], tokens[i], outcomes[i], now, top, &gs)
    return 0


def release_batch(Space space, list order, list keys, list tokens, int64_t now, list results, txn):
    """Run releases ``order``, all of keys in ``space``, in one transaction
    (last, as for :func:`claim_batch`); ``results[i]`` gets the op code."""
    cdef Indexes ix = Indexes(order)
    _release_batch(space, ix.idx, ix.n, keys, tokens, now, results, txn)


cdef int _release_batch(Space space, const Py_ssize_t *order, Py_ssize_t m, list keys, list tokens, int64_t now,
                        list results, object txn) except -1:
    cdef Py_ssize_t i, j
    for j in range(m):
        i = order[j]
        results[i] = space.release(txn, keys[i], tokens[i], now)
    return 0


@cython.final
cdef class Indexes:
    """A list of indexes (claim_batch's ``order``) as a C array."""

    cdef Py_ssize_t *idx
    cdef Py_ssize_t n

    def __cinit__(self, list order):
        cdef Py_ssize_t j
        self.n = len(order)
        self.idx = <Py_ssize_t *>malloc((self.n or 1) * sizeof(Py_ssize_t))
        if self.idx == NULL:
            raise MemoryError()
        for j in range(self.n):
            self.idx[j] = order[j]

    def __dealloc__(self):
        free(self.idx)



cdef object _ABSENT = object()


cdef class LogFile:
    """An append-only write-behind log segment open on ``fd`` (which it
    owns: :meth:`close` closes it). Records are copied into a shared mapping
    of the file's first ``map_bytes`` (none: 0), with space reserved ``chunk``
    bytes ahead of them; past the mapping, or where the filesystem refuses
    the space, they are pwritten (csrc/ds_log.h)."""

    cdef ds_log _l
    cdef bint _open
    # Held by prefault() (another thread's) and by close(): the mapping is
    # not unmapped under a prefault.
    cdef PyThread_type_lock _mu

    def __cinit__(self, int fd, uint64_t map_bytes=0, uint64_t chunk=1 << 20):
        self._mu = PyThread_allocate_lock()
        if self._mu == NULL:
            raise MemoryError()
        ds_log_init(&self._l, fd, map_bytes, chunk)
        self._open = True

    def __init__(self, int fd, uint64_t map_bytes=0, uint64_t chunk=1 << 20):
        pass  # all done in __cinit__ (so the signature is visible to stubtest)

    def __dealloc__(self):
        ds_log_release(&self._l)
        if self._mu != NULL:
            PyThread_free_lock(self._mu)

    @property
    def fd(self) -> int:
        return self._l.fd

    @property
    def mapped_writes(self) -> int:
        """Records copied into the mapping (the others were pwritten)."""
        return self._l.mapped_writes

    cdef uint8_t *span(self, Py_ssize_t n, uint64_t offset) except? NULL:
        # Where to build an n-byte record at offset in the mapping, or NULL (write() it).
        if not self._open:
            raise ValueError("the log segment is closed")
        return <uint8_t *>ds_log_span(&self._l, offset, <size_t>n)

    cdef int write(self, const char *p, Py_ssize_t n, uint64_t offset) except -1:
        cdef int rc
        if not self._open:
            raise ValueError("the log segment is closed")
        rc = ds_log_write(&self._l, p, <size_t>n, offset)
        if rc:
            raise OSError(rc, os.strerror(rc))
        return 0

    def cut(self, uint64_t offset):
        """Cut the file to ``offset`` bytes (a torn record's tail); later
        records are pwritten."""
        cdef int rc = ds_log_cut(&self._l, offset)
        if rc:
            raise OSError(rc, os.strerror(rc))

    def prefault(self, uint64_t offset, uint64_t length) -> int:
        """Fault in, writable, the mapped and reserved pages of ``length``
        bytes from ``offset`` (csrc/ds_log.h): the writes' first stores to
        them then find them there. For a thread beside the writer's (the
        flusher's), without the GIL. Returns 0 or an errno value (advice:
        nothing depends on it); 0 once closed."""
        cdef int rc = 0
        if not self._open:
            return 0
        with nogil:
            PyThread_acquire_lock(self._mu, 1)
            rc = ds_log_prefault(&self._l, offset, length)
            PyThread_release_lock(self._mu)
        return rc

    def recycle(self) -> bool:
        """Make this segment, all of whose records are applied and which no
        call writes any more, a fresh one to be written again from offset 0:
        every byte written is zeroed, the pages and the reserved space kept
        (csrc/ds_log.h). Without the GIL: a whole segment's zeroing takes a
        few milliseconds. False (nothing changed): it cannot be (a record
        went past the mapping or was cut off, or it is closed)."""
        cdef int rc = 0
        if not self._open:
            return False
        with nogil:
            PyThread_acquire_lock(self._mu, 1)
            rc = ds_log_recycle(&self._l)
            PyThread_release_lock(self._mu)
        return rc == 0

    def close(self):
        """Unmap and close the descriptor (once; later calls do nothing).
        The unmap runs without the GIL: dropping a segment's mapping of
        dirty pages can take milliseconds."""
        if self._open:
            self._open = False
            with nogil:
                PyThread_acquire_lock(self._mu, 1)
                ds_log_release(&self._l)
                PyThread_release_lock(self._mu)
            os.close(self._l.fd)


# An overlay's map of one database: an open-addressing table of bytes keys
# (linear probing, by ds_table_hash of the key: seeded, and a fraction of
# what Python's hash of a new bytes object costs), each slot holding a
# reference to its key and to its value (bytes, or None: a delete) and
# whether the key is fresh (put here, absent from the snapshot). It replaces two dicts per database (the fresh keys'
# and the others'), where a claim's put, its completion's delete and the
# record's put were each a miss in one dict and then a lookup or insert in
# the other, each a generic dict probe comparing bytes as Python objects:
# here each is one probe, comparing by identity, else hash, length and
# memcmp. No Python code runs in any of these (only bytes and None are
# released), so a slot found stays the key's until the table is written.
cdef struct _ovslot:
    PyObject *key      # NULL: never used; _TOMB: a key removed (probes go on past it)
    PyObject *value    # bytes, or None for a delete
    uint64_t hash
    bint fresh


cdef struct _ovtab:
    _ovslot *s         # NULL until the first insert
    size_t mask        # slots - 1
    Py_ssize_t live    # keys held
    Py_ssize_t used    # slots not NULL: keys held and removed ones


cdef PyObject *_TOMB = <PyObject *><size_t>1
#: The fewest slots a table has, and the most it keeps when cleared (a
#: larger one is freed: the table of one huge call is not kept for the
#: overlay's whole life).
cdef size_t _TAB_MIN = 16
cdef size_t _TAB_KEEP = 1 << 14


#: ds_table_hash's seed for the overlays' maps: this process's own.
cdef uint64_t _tab_seed = int.from_bytes(os.urandom(8), "little")


cdef inline uint64_t _tab_hash(bytes key) noexcept:
    return ds_table_hash(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), _tab_seed)


cdef inline bint _same_key(PyObject *k, object key, uint64_t h, uint64_t kh) noexcept:
    cdef Py_ssize_t n
    if k == <PyObject *>key:
        return True
    if k == _TOMB or kh != h:
        return False
    n = PyBytes_GET_SIZE(key)
    return PyBytes_GET_SIZE(<object>k) == n and memcmp(PyBytes_AS_STRING(<object>k), PyBytes_AS_STRING(key), n) == 0


cdef inline Py_ssize_t _tab_find(const _ovtab *t, object key, uint64_t h) noexcept:
    # The slot of ``key`` (hash ``h``), -1 if the table does not hold it.
    cdef size_t i
    cdef PyObject *k
    if t.s == NULL:
        return -1
    i = <size_t>h & t.mask
    while True:
        k = t.s[i].key
        if k == NULL:
            return -1
        if _same_key(k, key, h, t.s[i].hash):
            return <Py_ssize_t>i
        i = (i + 1) & t.mask


cdef int _tab_resize(_ovtab *t) except -1:
    # Room for one more key: slots at least three times the keys held (twice
    # as many when they fill half, else as many or fewer), the removed ones
    # left behind.
    cdef size_t cap = _TAB_MIN, old_cap = 0 if t.s == NULL else t.mask + 1, i, j
    cdef _ovslot *s
    cdef _ovslot *old = t.s
    while cap < 3 * <size_t>(t.live + 1):
        cap *= 2
    s = <_ovslot *>calloc(cap, sizeof(_ovslot))
    if s == NULL:
        raise MemoryError()
    for i in range(old_cap):
        if old[i].key != NULL and old[i].key != _TOMB:
            j = <size_t>old[i].hash & (cap - 1)
            while s[j].key != NULL:
                j = (j + 1) & (cap - 1)
            s[j] = old[i]
    free(old)
    t.s, t.mask, t.used = s, cap - 1, t.live
    return 0


cdef int _tab_insert(_ovtab *t, object key, uint64_t h, object value, bint fresh) except -1:
    # Add ``key`` (hash ``h``), which the table does not hold.
    cdef size_t i
    if t.s == NULL or 2 * <size_t>(t.used + 1) > t.mask + 1:
        _tab_resize(t)
    i = <size_t>h & t.mask
    while t.s[i].key != NULL and t.s[i].key != _TOMB:
        i = (i + 1) & t.mask
    if t.s[i].key == NULL:
        t.used += 1
    Py_INCREF(key)
    Py_INCREF(value)
    t.s[i].key = <PyObject *>key
    t.s[i].value = <PyObject *>value
    t.s[i].hash = h
    t.s[i].fresh = fresh
    t.live += 1
    return 0


cdef inline void _tab_set_value(_ovtab *t, Py_ssize_t i, object value) noexcept:
    cdef PyObject *old = t.s[i].value
    Py_INCREF(value)
    t.s[i].value = <PyObject *>value
    Py_DECREF(<object>old)


cdef void _tab_remove(_ovtab *t, Py_ssize_t i) noexcept:
    # Forget the key of slot ``i``. The slot becomes unused if the next one
    # is (no probe goes past it to reach a key), else a removed one.
    cdef PyObject *k = t.s[i].key
    cdef PyObject *v = t.s[i].value
    if t.s[(<size_t>i + 1) & t.mask].key == NULL:
        t.s[i].key = NULL
        t.used -= 1
    else:
        t.s[i].key = _TOMB
    t.s[i].value = NULL
    t.live -= 1
    Py_DECREF(<object>k)
    Py_DECREF(<object>v)


cdef void _tab_clear(_ovtab *t, bint keep=True) noexcept:
    # Forget every key; the slots are freed unless ``keep`` and the table
    # is no larger than _TAB_KEEP.
    cdef size_t i, cap
    if t.s == NULL:
        return
    cap = t.mask + 1
    for i in range(cap):
        if t.s[i].key != NULL and t.s[i].key != _TOMB:
            Py_DECREF(<object>t.s[i].key)
            Py_DECREF(<object>t.s[i].value)
    if keep and cap <= _TAB_KEEP:
        memset(t.s, 0, cap * sizeof(_ovslot))
    else:
        free(t.s)
        t.s, t.mask = NULL, 0
    t.live = t.used = 0


cdef struct _entry:
    ds_key_ref ref  # first: ds_sort_keys sorts an array of them
    PyObject *key
    PyObject *value


cdef Py_ssize_t _sorted_items(const _ovtab *t, int code, list out, list deletes=None) except -1:
    # Every item of ``t`` (an overlay's map of one database) in key order,
    # sorted in C (ds_sort_keys), which takes a fraction of what sorting
    # them as Python objects does (an apply lists a few hundred keys, every
    # apply interval). ``deletes`` None: (code, key, value) of each onto ``out``
    # (Overlay.changes); else (key, value) of each put onto ``out`` and
    # (code, key) of each delete onto ``deletes`` (Overlay.write_set).
    # Returns how many.
    cdef Py_ssize_t n = t.live, i = 0
    cdef size_t j
    cdef PyObject *k
    cdef _entry *items
    if n == 0:
        return 0
    items = <_entry *>malloc(n * sizeof(_entry))
    if items == NULL:
        raise MemoryError()
    try:
        for j in range(t.mask + 1):
            k = t.s[j].key
            if k != NULL and k != _TOMB:
                items[i].ref.data = PyBytes_AS_STRING(<object>k)
                items[i].ref.len = PyBytes_GET_SIZE(<object>k)
                items[i].key = k
                items[i].value = t.s[j].value
                i += 1
        ds_sort_keys(items, n, sizeof(_entry))
        for i in range(n):
            if deletes is None:
                out.append((code, <object>items[i].key, <object>items[i].value))
            elif items[i].value == <PyObject *>None:
                deletes.append((code, <object>items[i].key))
            else:
                out.append((<object>items[i].key, <object>items[i].value))
    finally:
        free(items)
    return n


#: An overlay's ops buffer larger than this is given back when it is reset.
cdef Py_ssize_t OPS_KEEP_BYTES = 1 << 20


cdef struct _undo_op:
    PyObject *key
    PyObject *old
    int code
    bint was


cdef uint64_t _overlay_serials = 0  # the last Overlay.serial given


cdef class Overlay:
    """Flush-mode write-behind: a stand-in for one partition's write
    transaction that holds this process's writes not yet applied to LMDB.

    It answers ``get``, ``put`` and ``delete`` as a py-lmdb write transaction
    would (the same positional signatures, which the Space methods call):
    reads see the newest value written here, else the read ``snapshot``
    (taken right after the last apply, so together they are the partition's
    state; or another overlay, being applied meanwhile). Each write is also
    encoded as a journal op (dedupstore/journal.py:
    ``op u8 | db u8 | key length u16 | value length u32 | key | value``);
    :meth:`record` frames the ops of one call as a journal record for the
    write-behind log (:meth:`log` also writes it there), and until :meth:`keep`
    the call's writes can be undone with :meth:`rollback`.
    :meth:`changes` is what an apply writes: the newest value (or a delete) of
    every key touched since :meth:`reset`.

    The snapshot's answers for the meta database (generation state, frontier:
    read by nearly every call) are kept until :meth:`reset` or
    :meth:`rebase`: a snapshot never changes, so they stay true."""

    cdef public object snapshot
    cdef object _records, _pending, _meta
    # Every key written here is in its database's map (_ovtab; records,
    # pending, meta: codes 1, 2, 3) with its newest value, None once
    # deleted; a fresh key (put here, absent from the snapshot) deleted again
    # leaves the map.
    cdef _ovtab _t[3]
    cdef dict _seen  # meta key -> the snapshot's value (None: absent)
    # The ops written since the last record: _olen bytes of a malloc'd
    # buffer of _ocap (a bytearray emptied after each record would be
    # reallocated as often).
    cdef char *_ob
    cdef Py_ssize_t _olen, _ocap
    # What each write since the last keep() found before it, to undo it
    # (rollback): a malloc'd array of _un ops (of _ucap), each holding a
    # reference to its key and to the old value. No tuple per write.
    cdef _undo_op *_ub
    cdef Py_ssize_t _un, _ucap
    # Writes (puts and deletes) since the last reset, and the entries of
    # overlays folded in (absorb): never fewer than the maps hold
    # (_count), so that a call need not read their sizes until it is
    # FULL_CHECK_WRITES (WindowCore._leave).
    cdef Py_ssize_t _nwrites
    #: Which opening of a write-behind window this overlay serves (0: none);
    #: a Space's live filter is good for one (see Space._live_for).
    cdef public uint64_t epoch
    #: Moves whenever what the overlay answers for the meta database may
    #: have: a meta write, an undo, a new snapshot, writes folded in.
    cdef public uint64_t meta_version
    #: This overlay's number, never 0 and never another's: what a Space's
    #: caches keep to know it again (Space._read_state), without a reference.
    cdef readonly uint64_t serial

    def __cinit__(self, *args, **kwargs):
        global _overlay_serials
        _overlay_serials += 1
        self.serial = _overlay_serials

    def __init__(self, records, pending, meta, snapshot):
        self._records = records
        self._pending = pending
        self._meta = meta
        self.reset(snapshot)

    def __dealloc__(self):
        cdef int i
        self._drop_undo()
        for i in range(3):
            _tab_clear(&self._t[i], False)
        free(self._ub)
        free(self._ob)

    cdef int _undo_room(self) except -1:
        # Room for one more undo op: after this, _push_undo cannot fail.
        cdef _undo_op *p
        cdef Py_ssize_t cap
        if self._un == self._ucap:
            cap = max(16, 2 * self._ucap)
            p = <_undo_op *>realloc(self._ub, cap * sizeof(_undo_op))
            if p == NULL:
                raise MemoryError()
            self._ub, self._ucap = p, cap
        return 0

    cdef int _push_undo(self, int code, bytes key, object old, bint was) except -1:
        # One write's undo: ``old`` is what the map held (_ABSENT: nothing),
        # ``was`` whether the key was in the fresh set.
        cdef _undo_op *p
        self._undo_room()
        p = &self._ub[self._un]
        Py_INCREF(key)
        Py_INCREF(old)
        p.key = <PyObject *>key
        p.old = <PyObject *>old
        p.code = code
        p.was = was
        self._un += 1
        return 0

    cdef void _drop_undo(self) noexcept:
        # Forget the undo ops (kept, logged or undone), releasing their
        # references; only bytes, None and _ABSENT go: no Python code runs.
        cdef Py_ssize_t i, n = self._un
        self._un = 0
        for i in range(n):
            Py_XDECREF(self._ub[i].key)
            Py_XDECREF(self._ub[i].old)

    cdef char *_grow_ops(self, Py_ssize_t n) except NULL:
        # Room for n more bytes of ops; returns where they go (the length
        # already counts them).
        cdef Py_ssize_t need = self._olen + n
        cdef Py_ssize_t cap
        cdef char *p
        if need > self._ocap:
            cap = max(need, 2 * self._ocap, 256)
            p = <char *>realloc(self._ob, cap)
            if p == NULL:
                raise MemoryError()
            self._ob, self._ocap = p, cap
        p = self._ob + self._olen
        self._olen = need
        return p

    cdef inline _ovtab *_tab(self, int code) noexcept:
        # The map of database ``code`` (1 records, 2 pending, 3 meta).
        return &self._t[code - 1]

    cdef list _keys(self, int code):
        # Every key of database ``code`` written here (deleted ones too).
        cdef const _ovtab *t = self._tab(code)
        cdef list out = []
        cdef size_t j
        for j in range(0 if t.s == NULL else t.mask + 1):
            if t.s[j].key != NULL and t.s[j].key != _TOMB:
                out.append(<object>t.s[j].key)
        return out

    cdef int _code(self, object db) except -1:
        # Journal database codes: 1 records, 2 pending, 3 meta.
        if db is self._pending:
            return 2
        if db is self._records:
            return 1
        if db is self._meta:
            return 3
        raise ValueError("the write-behind overlay covers the records, pending and meta databases only")

    cdef object _held(self, int code, bytes key, bint *fresh):
        # What this overlay holds for ``key`` (_ABSENT: nothing; None: a
        # delete), and in ``fresh`` whether it is a fresh key.
        cdef _ovtab *t = self._tab(code)
        cdef Py_ssize_t i = _tab_find(t, key, _tab_hash(key))
        if i < 0:
            fresh[0] = False
            return _ABSENT
        fresh[0] = t.s[i].fresh
        return <object>t.s[i].value

    cdef object _base(self, int code, bytes key, object db):
        # What the snapshot (or the overlay read through) holds; None: absent.
        cdef object v
        if code != 3:
            return _lmdb_get(self.snapshot, key, db)
        v = self._seen.get(key, _ABSENT)
        if v is _ABSENT:
            v = _lmdb_get(self.snapshot, key, db)
            self._seen[key] = v
        return v

    def get(self, bytes key, default=None, db=None):
        cdef object v = self._get(key, db)
        return default if v is None else v

    cdef object _get(self, bytes key, object db):
        # get(key, None, db) as a cdef call (the Spaces' _get).
        cdef int code = self._code(db)
        cdef bint fresh
        cdef object v = self._held(code, key, &fresh)
        if v is _ABSENT:
            v = self._base(code, key, db)
        return v

    cdef _write(self, int code, bytes key, object value, bint fresh):
        # ``fresh``: a put of a key the snapshot does not hold. Such a key
        # deleted again leaves no change to apply (a claim completed within
        # one apply interval never touches LMDB's pending database).
        cdef bint was
        cdef object old = self._held(code, key, &was)
        self._write_at(code, key, value, fresh, old, was)

    cdef _write_at(self, int code, bytes key, object value, bint fresh, object old, bint was):
        # _write() where ``old`` and ``was`` are what _held() answered for
        # ``key`` already.
        cdef _ovtab *t = self._tab(code)
        cdef uint64_t h = _tab_hash(key)
        cdef Py_ssize_t i
        cdef uint8_t *head
        cdef Py_ssize_t klen = PyBytes_GET_SIZE(key)
        cdef Py_ssize_t vlen = 0 if value is None else PyBytes_GET_SIZE(value)
        if code == 3:
            self.meta_version += 1
        # The undo's room first, so that a failure below changes nothing.
        self._undo_room()
        if old is _ABSENT:
            # A key new here: fresh if the caller knows the snapshot lacks it.
            _tab_insert(t, key, h, value, fresh)
        else:
            i = _tab_find(t, key, h)
            if i < 0:
                raise SystemError("an overlay write was told of a value its map does not hold")
            if was and value is None:
                # A fresh key deleted leaves the map (a completion's delete
                # of its pending record): nothing to apply.
                _tab_remove(t, i)
            else:
                _tab_set_value(t, i, value)  # a fresh key put again stays fresh
        self._nwrites += 1
        self._push_undo(code, key, old, was)
        head = <uint8_t *>self._grow_ops(8 + klen + vlen)
        head[0] = 2 if value is None else 1  # journal PUT / DELETE
        head[1] = <uint8_t>code
        head[2] = <uint8_t>(klen & 0xFF)
        head[3] = <uint8_t>(klen >> 8)
        head[4] = <uint8_t>(vlen & 0xFF)
        head[5] = <uint8_t>((vlen >> 8) & 0xFF)
        head[6] = <uint8_t>((vlen >> 16) & 0xFF)
        head[7] = <uint8_t>((vlen >> 24) & 0xFF)
        memcpy(head + 8, PyBytes_AS_STRING(key), klen)
        if vlen:
            memcpy(head + 8 + klen, PyBytes_AS_STRING(value), vlen)

    cdef object _put_or_get(self, int code, bytes key, bytes value, object db, bint unread=False):
        # put(overwrite=False) that says what stopped it: None when the put
        # was made, else the value the key already has here or in the
        # snapshot. ``unread``: the caller knows the snapshot lacks the key
        # (the live filter), so only this overlay is asked.
        cdef bint was
        cdef object old = self._held(code, key, &was)
        cdef object v
        if old is _ABSENT:
            if not unread:
                v = self._base(code, key, db)
                if v is not None:
                    return v
        elif old is not None:
            return old
        self._write_at(code, key, value, old is _ABSENT, old, was)
        return None

    def put(self, bytes key, bytes value, bint dupdata=False, bint overwrite=True, bint append=False, db=None):
        cdef int code = self._code(db)
        if not overwrite:
            return self._put_or_get(code, key, value, db) is None
        self._write(code, key, value, False)
        return True

    def delete(self, bytes key, bytes value=b"", db=None):
        cdef int code = self._code(db)
        if self.get(key, None, db) is None:
            return False
        self._write(code, key, None, False)
        return True

    def record(self, uint16_t part, uint64_t seq):
        """The ops written since the last record, framed as one journal
        record of partition ``part`` with ``seq`` in its txn id field
        (``magic "DSJ2" | payload length u32 | seq u64 | part u16 | payload |
        CRC-32 u32``, the CRC over everything after the magic); None if no
        op was written."""
        return self._frame(part, seq)

    def log(self, LogFile f, uint16_t part, uint64_t seq, uint64_t offset):
        """Frame the ops written since the last record as :meth:`record`
        does, write the record to ``f`` at ``offset`` (with the GIL held: a
        copy into the mapping, or a small write to the page cache, costs less
        than handing the GIL over) and :meth:`keep` them. Returns the bytes
        written, 0 if no op was written. Raises OSError with the ops dropped
        but the call's writes still undoable: the caller rolls them back."""
        return self._log_into(f, part, seq, offset)

    cdef Py_ssize_t _log_into(self, LogFile f, uint16_t part, uint64_t seq, uint64_t offset,
                              LogFile mirror=None, uint64_t mirror_offset=0) except -1:
        # As log(); with ``mirror``, the record is also written to it at
        # mirror_offset (a segment rotation under way: window.py's _behind).
        cdef Py_ssize_t n = self._olen
        cdef uint8_t *span
        cdef object rec
        if n == 0:
            return 0
        self._check_size(n)
        span = f.span(18 + n + 4, offset)
        if span != NULL:
            self._frame_into(span, n, part, seq)  # built in place: no copy
            if mirror is not None:
                mirror.write(<const char *>span, 18 + n + 4, mirror_offset)
        else:
            rec = self._frame(part, seq)
            f.write(PyBytes_AS_STRING(rec), PyBytes_GET_SIZE(rec), offset)
            if mirror is not None:
                mirror.write(PyBytes_AS_STRING(rec), PyBytes_GET_SIZE(rec), mirror_offset)
        self._drop_undo()
        return 18 + n + 4

    cdef int _check_size(self, Py_ssize_t n) except -1:
        if n > <Py_ssize_t>(0xFFFFFFFF - 32):  # a C comparison, not one of Python ints
            raise ValueError("one call wrote more than a journal record holds")
        return 0

    cdef object _frame(self, uint16_t part, uint64_t seq):
        cdef Py_ssize_t n = self._olen
        cdef bytes out
        if n == 0:
            return None
        self._check_size(n)
        out = PyBytes_FromStringAndSize(NULL, 18 + n + 4)
        self._frame_into(<uint8_t *>PyBytes_AS_STRING(out), n, part, seq)
        return out

    cdef int _frame_into(self, uint8_t *p, Py_ssize_t n, uint16_t part, uint64_t seq) except -1:
        # The record of the n bytes of ops taken (18 + n + 4 bytes at p); the ops are dropped.
        cdef uint32_t crc
        cdef int i
        memcpy(p, b"DSJ2", 4)
        for i in range(4):
            p[4 + i] = <uint8_t>((<uint64_t>n >> (8 * i)) & 0xFF)
        for i in range(8):
            p[8 + i] = <uint8_t>((seq >> (8 * i)) & 0xFF)
        p[16] = <uint8_t>(part & 0xFF)
        p[17] = <uint8_t>(part >> 8)
        memcpy(p + 18, self._ob, n)
        crc = ds_crc32(0, p + 4, 14 + n)
        for i in range(4):
            p[18 + n + i] = <uint8_t>((crc >> (8 * i)) & 0xFF)
        self._olen = 0
        return 0

    def keep(self):
        """The ops taken are in the log: they can no longer be undone."""
        self._drop_undo()

    def rollback(self):
        """Undo every write since the last :meth:`keep` (a call that failed
        before its ops reached the log)."""
        cdef _undo_op *u
        cdef _ovtab *t
        cdef Py_ssize_t i, j
        cdef uint64_t h
        cdef object key, old
        self.meta_version += 1
        for i in range(self._un - 1, -1, -1):
            u = &self._ub[i]
            key, old = <object>u.key, <object>u.old
            t = self._tab(u.code)
            h = _tab_hash(key)
            j = _tab_find(t, key, h)
            if old is _ABSENT:
                if j >= 0:
                    _tab_remove(t, j)
            elif j >= 0:
                _tab_set_value(t, j, old)
                t.s[j].fresh = u.was
            else:
                _tab_insert(t, key, h, old, u.was)
        self._drop_undo()
        self._olen = 0

    def changes(self):
        """(database code, key, value or None for a delete) of every key
        written since :meth:`reset`, sorted (LMDB inserts faster in order),
        except a key put here that the snapshot lacked and deleted again."""
        cdef list out = []
        cdef int code
        for code in range(1, 4):
            _sorted_items(self._tab(code), code, out)
        return out

    def write_set(self):
        """What :meth:`changes` lists, grouped as an apply writes it:
        (count, [(database code, [(key, value), ...]) of the puts of each
        database that has some, keys in order], [(code, key) of each
        delete])."""
        cdef list puts = [], deletes = [], items
        cdef Py_ssize_t n = 0
        cdef int code
        for code in range(1, 4):
            items = []
            n += _sorted_items(self._tab(code), code, items, deletes)
            if items:
                puts.append((code, items))
        return n, puts, deletes

    def __len__(self):
        return self._count()

    cdef inline Py_ssize_t _count(self):
        return self._t[0].live + self._t[1].live + self._t[2].live

    def rebase(self, snapshot):
        """Read from ``snapshot`` from now on, keeping every write: the
        overlay read through another one whose writes ``snapshot`` now holds."""
        self.snapshot = snapshot
        self._seen = {}
        self.meta_version += 1

    def absorb(self, Overlay newer):
        """Take ``newer``'s writes over ours (an overlay that read through
        this one, whose apply failed); no call may be under way in either."""
        cdef int code
        cdef _ovtab *t
        cdef const _ovtab *nt
        cdef size_t j
        cdef Py_ssize_t i
        cdef PyObject *k
        cdef object v
        if newer._un or newer._olen or self._un or self._olen:
            raise ValueError("an overlay with a call under way cannot be folded")
        self.meta_version += 1
        self._nwrites += newer._count()
        for code in range(1, 4):
            t = self._tab(code)
            nt = newer._tab(code)
            for j in range(0 if nt.s == NULL else nt.mask + 1):
                k = nt.s[j].key
                if k == NULL or k == _TOMB:
                    continue
                v = <object>nt.s[j].value
                i = _tab_find(t, <object>k, nt.s[j].hash)
                if i < 0:
                    # Fresh there (found nowhere) stays fresh; else ``newer``
                    # found it in the snapshot.
                    _tab_insert(t, <object>k, nt.s[j].hash, v, nt.s[j].fresh)
                elif t.s[i].fresh and v is None:
                    _tab_remove(t, i)  # put here, deleted there: the snapshot never had it
                else:
                    # Found here (fresh here stays fresh: the snapshot lacks it).
                    _tab_set_value(t, i, v)

    def reset(self, snapshot):
        """Forget every write (they are applied) and read from ``snapshot``."""
        cdef int i
        self.snapshot = snapshot
        for i in range(3):
            _tab_clear(&self._t[i])
        self._seen = {}
        self.meta_version += 1
        self._nwrites = 0
        self._drop_undo()
        self._olen = 0
        if self._ocap > OPS_KEEP_BYTES:
            # One huge call (a claim_many of 100,000 keys) does not keep its
            # buffer for the overlay's whole life.
            free(self._ob)
            self._ob, self._ocap = NULL, 0

include "_gsync.pxi"
include "_wcore.pxi"
include "_score.pxi"
include "_lmdb.pxi"
