# Included at the end of _native.pyx: an apply's writes made by LMDB itself,
# through csrc/ds_lmdb.c, with the GIL released once for all of them instead
# of around each put (py-lmdb's way). dedupstore/window.py's Window._write
# calls lmdb_write and falls back to py-lmdb's calls when it answers False;
# Space.evict_step deletes a generation with _lmdb_delete_prefix, and an
# Overlay reads its snapshot with _lmdb_get, each falling back likewise.

import lmdb as _pylmdb

from cpython.mem cimport PyMem_Free, PyMem_Malloc

cdef extern from "ds_lmdb.h":
    ctypedef struct ds_mdb_val:
        size_t mv_size
        void *mv_data
    ctypedef struct ds_lmdb_engine:
        const void *table
        int (*get)(void *txn, unsigned int dbi, ds_mdb_val *key, ds_mdb_val *data)
        void *(*txn_env)(void *txn)
        const char *(*strerror)(int err)
    ctypedef struct ds_lmdb:
        pass
    ctypedef struct ds_lmdb_write:
        ds_key_ref key
        const void *val
        size_t val_len
        unsigned int dbi
        int del_ "del"
    int DS_MDB_NOTFOUND
    int DS_MDB_MAP_FULL
    int DS_MDB_TXN_FULL
    int ds_lmdb_bind(ds_lmdb *api, const char *path, char *why, size_t why_len)
    const ds_lmdb_engine *ds_lmdb_engine_of(const ds_lmdb *api, const void *table)
    int ds_lmdb_write_all(const ds_lmdb_engine *e, void *txn, const ds_lmdb_write *w, size_t n,
                          size_t *done) nogil
    ctypedef struct ds_lmdb_scan:
        pass
    int ds_lmdb_scan_open(const ds_lmdb_engine *e, void *txn, unsigned int dbi, const void *prefix,
                          size_t prefix_len, ds_lmdb_scan *s)
    int ds_lmdb_scan_hash(const ds_lmdb_engine *e, ds_lmdb_scan *s, const void *prefix, size_t prefix_len,
                          size_t skip, const ds_hash_key *hk, uint64_t *out, size_t max, size_t *n, int *done)
    void ds_lmdb_scan_close(const ds_lmdb_engine *e, ds_lmdb_scan *s)
    int ds_lmdb_delete_prefix(const ds_lmdb_engine *e, void *txn, unsigned int dbi, const void *prefix,
                              size_t prefix_len, long budget, long *deleted, int *more) nogil

cdef extern from *:
    """
    /* py-lmdb 3's objects, as far as read here (its lmdb/cpython.c:
     * LmdbObject_HEAD, struct EnvObject, TransObject, DbObject), built
     * without memsink. _lmdb_txn checks a Transaction against this layout
     * (its size, its environment's, its engine's table) before reading its
     * handle. */
    typedef struct { PyObject_HEAD void *siblings[2]; void *children[2]; int valid; } ds_pylmdb_head;
    typedef struct { ds_pylmdb_head h; PyObject *weaklist; void *env; const void *libv; } ds_pylmdb_env;
    typedef struct {
        ds_pylmdb_head h; PyObject *weaklist; PyObject *env; PyObject *parent; const void *libv;
        void *txn; int flags; PyObject *db; int mutations;
    } ds_pylmdb_txn;
    typedef struct { ds_pylmdb_head h; PyObject *env; unsigned int dbi; unsigned int flags; } ds_pylmdb_db;
    #define DS_PYLMDB_TRANS_RDONLY 2
    """
    ctypedef struct ds_pylmdb_head:
        int valid
    ctypedef struct ds_pylmdb_env:
        ds_pylmdb_head h
        void *env
        const void *libv
    ctypedef struct ds_pylmdb_txn:
        ds_pylmdb_head h
        PyObject *env
        PyObject *parent
        const void *libv
        void *txn
        int flags
        int mutations
    ctypedef struct ds_pylmdb_db:
        ds_pylmdb_head h
        PyObject *env
        unsigned int dbi
    int DS_PYLMDB_TRANS_RDONLY


cdef ds_lmdb _lmdb_api
# py-lmdb's types, looked up once (a module attribute each call costs more
# than the checks themselves).
cdef type _txn_type = _pylmdb.Transaction
cdef type _env_type = _pylmdb.Environment
cdef type _db_type = _pylmdb._Database
cdef int _lmdb_state = 0  # 0: not tried yet, 1: bound, -1: not available (_lmdb_why says why)
_lmdb_why = ""


cdef int _lmdb_bind() except -1:
    # Once: py-lmdb's engines, or the reason they are not used.
    global _lmdb_state, _lmdb_why
    cdef char why[200]
    cdef bytes path
    if os.environ.get("DEDUPSTORE_LMDB_DIRECT", "1") == "0":
        _lmdb_why = "turned off by DEDUPSTORE_LMDB_DIRECT=0"
    elif not _pylmdb.__version__.startswith("3."):
        _lmdb_why = f"py-lmdb {_pylmdb.__version__}: only py-lmdb 3's layout is known"
    elif (_pylmdb.Transaction.__basicsize__ != sizeof(ds_pylmdb_txn)
          or _pylmdb._Database.__basicsize__ != sizeof(ds_pylmdb_db)
          or _pylmdb.Environment.__basicsize__ < sizeof(ds_pylmdb_env)):
        _lmdb_why = f"py-lmdb {_pylmdb.__version__}'s objects are not the layout known (built with memsink?)"
    else:
        path = os.fsencode(_pylmdb.cpython.__file__)
        if ds_lmdb_bind(&_lmdb_api, path, why, sizeof(why)) == 0:
            _lmdb_state = 1
            return 0
        _lmdb_why = why.decode()
    _lmdb_state = -1
    return 0


def lmdb_direct():
    """(True, "") if an apply's writes are made by LMDB directly, with the
    GIL released once for all; else (False, why)."""
    if _lmdb_state == 0:
        _lmdb_bind()
    return (_lmdb_state == 1, _lmdb_why)


def set_lmdb_direct(bint enabled):
    """Let applies and eviction use LMDB's own calls when they can (the
    default), or not (py-lmdb's way, as under DEDUPSTORE_LMDB_DIRECT=0):
    for the tests and benches that compare the two ways."""
    global _lmdb_state, _lmdb_why
    if enabled:
        _lmdb_state, _lmdb_why = 0, ""  # found again at the next use
    else:
        _lmdb_state, _lmdb_why = -1, "turned off by set_lmdb_direct(False)"


cdef const ds_lmdb_engine *_lmdb_txn(object txn, void **handle, bint write=True) except? NULL:
    # ``txn``'s engine and MDB_txn handle if the direct way is available
    # (lmdb_direct) and ``txn`` is a live py-lmdb transaction (a write one if
    # ``write``) whose layout checks out; NULL otherwise.
    cdef ds_pylmdb_txn *t
    cdef ds_pylmdb_env *env
    cdef const ds_lmdb_engine *e
    if _lmdb_state == 0:
        _lmdb_bind()
    if _lmdb_state != 1 or type(txn) is not _txn_type:
        return NULL
    t = <ds_pylmdb_txn *><PyObject *>txn
    if not t.h.valid or t.txn == NULL or t.env == NULL or (write and t.flags & DS_PYLMDB_TRANS_RDONLY):
        return NULL
    if type(<object>t.env) is not _env_type:
        return NULL
    env = <ds_pylmdb_env *>t.env
    if env.libv != t.libv:
        return NULL
    e = ds_lmdb_engine_of(&_lmdb_api, t.libv)
    if e == NULL or e.txn_env(t.txn) != env.env:
        return NULL
    handle[0] = t.txn
    return e


cdef int _lmdb_dbi(object db, PyObject *env, unsigned int *dbi):
    # A py-lmdb database handle of environment ``env``: 1 and its dbi, or 0.
    cdef ds_pylmdb_db *d
    if type(db) is not _db_type:
        return 0
    d = <ds_pylmdb_db *><PyObject *>db
    if not d.h.valid or d.env != env:
        return 0
    dbi[0] = d.dbi
    return 1


cdef inline int _lmdb_entry(ds_lmdb_write *w, object key, object val, unsigned int dbi):
    # One write's fields from its bytes (held by the caller's lists): 1, or
    # 0 if either is not exact bytes.
    if type(key) is not bytes or (val is not None and type(val) is not bytes):
        return 0
    w.key.data = PyBytes_AS_STRING(key)
    w.key.len = PyBytes_GET_SIZE(key)
    w.dbi = dbi
    w.del_ = val is None
    if val is not None:
        w.val = PyBytes_AS_STRING(val)
        w.val_len = PyBytes_GET_SIZE(val)
    return 1


def lmdb_write(txn, dict dbs, list puts, list deletes):
    """Make an apply's deletes, then its puts (Overlay.write_set's lists;
    ``dbs`` maps its database codes to py-lmdb databases) in py-lmdb write
    transaction ``txn``, LMDB's own calls with the GIL released once: True.
    False, nothing written, if that way is not available (lmdb_direct) or
    the arguments are not what it takes: the caller makes them py-lmdb's
    way. An LMDB error raises py-lmdb's (lmdb.MapFullError for a full map);
    the transaction can then only be aborted. py-lmdb's Environment.close
    does not wait for these calls as it does for its own: the caller keeps
    the environment open meanwhile (the store closes a partition only under
    the locks its applies and evictions hold)."""
    cdef void *handle = NULL
    cdef const ds_lmdb_engine *e
    cdef ds_lmdb_write *w
    cdef Py_ssize_t n = len(deletes), i = 0
    cdef size_t done = 0
    cdef unsigned int dbi
    cdef int rc
    cdef tuple item
    cdef list items
    e = _lmdb_txn(txn, &handle)
    if e == NULL:
        return False
    cdef PyObject *env = (<ds_pylmdb_txn *><PyObject *>txn).env
    for code, items in puts:
        n += len(items)
    w = <ds_lmdb_write *>PyMem_Malloc(max(n, 1) * sizeof(ds_lmdb_write))
    if w == NULL:
        raise MemoryError()
    try:
        # Every entry is checked before anything is written: a False answer
        # leaves the transaction as it was.
        for code, key in deletes:
            if not _lmdb_dbi(dbs[code], env, &dbi) or not _lmdb_entry(&w[i], key, None, dbi):
                return False
            i += 1
        for code, items in puts:
            if not _lmdb_dbi(dbs[code], env, &dbi):
                return False
            for item in items:
                if not _lmdb_entry(&w[i], item[0], item[1], dbi):
                    return False
                i += 1
        with nogil:
            rc = ds_lmdb_write_all(e, handle, w, <size_t>n, &done)
        # py-lmdb's cursors on this transaction re-read their position after
        # a write they did not make.
        (<ds_pylmdb_txn *><PyObject *>txn).mutations += 1
    finally:
        PyMem_Free(w)
    if rc != 0:
        _lmdb_raise(e, rc, "mdb_del" if done < <size_t>len(deletes) else "mdb_put")
    return True


def lmdb_write_overlay(txn, dict dbs, Overlay ov):
    """Make the writes of overlay ``ov``, as lmdb_write makes
    ``ov.write_set()``'s lists (its deletes, then each database's puts, a
    database's keys in order), in py-lmdb write transaction ``txn``, with
    the GIL held only while the keys are gathered: they are sorted and
    written with it released, and no Python object is made for them (the
    lists of an apply of a few thousand keys took milliseconds to build,
    sort and free, all with the GIL, that calls of other threads waited
    for). Returns how many writes, or -1, nothing written, if that way is not
    available (lmdb_direct, or a database not py-lmdb's of ``txn``): the
    caller writes ``ov.write_set()``'s lists py-lmdb's way. Raises as
    lmdb_write does. Each key and value is referenced meanwhile, so that
    nothing written is freed whatever happens to ``ov``."""
    cdef void *handle = NULL
    cdef const ds_lmdb_engine *e
    cdef Py_ssize_t n, nd = 0, np = 0, i
    cdef ds_lmdb_write *dels = NULL
    cdef ds_lmdb_write *puts = NULL
    cdef PyObject **refs = NULL
    cdef Py_ssize_t nrefs = 0
    cdef Py_ssize_t dstart[4]
    cdef Py_ssize_t pstart[4]
    cdef PyObject *k
    cdef PyObject *v
    cdef ds_lmdb_write *w
    cdef unsigned int dbi
    cdef size_t done = 0, ddone = 0
    cdef int rc = 0, code, j
    cdef const _ovtab *t
    cdef size_t slot
    e = _lmdb_txn(txn, &handle)
    if e == NULL:
        return -1
    cdef PyObject *env = (<ds_pylmdb_txn *><PyObject *>txn).env
    n = ov._count()
    if n == 0:
        return 0
    dels = <ds_lmdb_write *>PyMem_Malloc(n * sizeof(ds_lmdb_write))
    puts = <ds_lmdb_write *>PyMem_Malloc(n * sizeof(ds_lmdb_write))
    refs = <PyObject **>PyMem_Malloc(2 * n * sizeof(PyObject *))
    try:
        if dels == NULL or puts == NULL or refs == NULL:
            raise MemoryError()
        for code in range(1, 4):
            dstart[code - 1], pstart[code - 1] = nd, np
            if not _lmdb_dbi(dbs[code], env, &dbi):
                return -1
            t = ov._tab(code)
            for slot in range(0 if t.s == NULL else t.mask + 1):
                k = t.s[slot].key
                if k == NULL or k == _TOMB:
                    continue
                v = t.s[slot].value
                if nd + np == n:
                    raise RuntimeError("the overlay changed while its writes were gathered")
                w = &dels[nd] if v == <PyObject *>None else &puts[np]
                if not _lmdb_entry(w, <object>k, None if v == <PyObject *>None else <object>v, dbi):
                    return -1
                Py_INCREF(<object>k)
                Py_INCREF(<object>v)
                refs[nrefs] = k
                refs[nrefs + 1] = v
                nrefs += 2
                if v == <PyObject *>None:
                    nd += 1
                else:
                    np += 1
        dstart[3], pstart[3] = nd, np
        with nogil:
            for j in range(3):
                ds_sort_keys(&dels[dstart[j]], <size_t>(dstart[j + 1] - dstart[j]), sizeof(ds_lmdb_write))
                ds_sort_keys(&puts[pstart[j]], <size_t>(pstart[j + 1] - pstart[j]), sizeof(ds_lmdb_write))
            rc = ds_lmdb_write_all(e, handle, dels, <size_t>nd, &ddone)
            if rc == 0:
                rc = ds_lmdb_write_all(e, handle, puts, <size_t>np, &done)
        (<ds_pylmdb_txn *><PyObject *>txn).mutations += 1
    finally:
        for i in range(nrefs):
            Py_DECREF(<object>refs[i])
        PyMem_Free(dels)
        PyMem_Free(puts)
        PyMem_Free(refs)
    if rc != 0:
        _lmdb_raise(e, rc, "mdb_del" if ddone < <size_t>nd else "mdb_put")
    return nd + np


cdef int _lmdb_raise(const ds_lmdb_engine *e, int rc, str what) except -1:
    # py-lmdb's exception for LMDB error ``rc`` of call ``what``.
    msg = f"{what}: {e.strerror(rc).decode()}"
    if rc == DS_MDB_MAP_FULL:
        raise _pylmdb.MapFullError(msg)
    if rc == DS_MDB_TXN_FULL:
        raise _pylmdb.TxnFullError(msg)
    raise _pylmdb.Error(msg)


cdef object _lmdb_delete_prefix(object txn, object db, bytes prefix, long budget):
    # Delete, in py-lmdb write transaction ``txn``, the first ``budget``
    # keys of ``db`` that begin with ``prefix`` (ds_lmdb_delete_prefix:
    # in two passes), with LMDB's own calls and the GIL released once:
    # (deleted, True if a key with the prefix is left). None, nothing
    # deleted, if that way is not available.
    cdef void *handle = NULL
    cdef const ds_lmdb_engine *e
    cdef unsigned int dbi
    cdef long deleted = 0
    cdef int more = 0, rc
    e = _lmdb_txn(txn, &handle)
    if e == NULL or not _lmdb_dbi(db, (<ds_pylmdb_txn *><PyObject *>txn).env, &dbi):
        return None
    cdef const char *p = PyBytes_AS_STRING(prefix)
    cdef size_t plen = PyBytes_GET_SIZE(prefix)
    with nogil:
        rc = ds_lmdb_delete_prefix(e, handle, dbi, p, plen, budget, &deleted, &more)
    (<ds_pylmdb_txn *><PyObject *>txn).mutations += 1
    if rc != 0:
        _lmdb_raise(e, rc, "mdb_cursor_del")
    return (deleted, more != 0)


def lmdb_delete_prefix(txn, db, bytes prefix, long budget):
    """Delete, in py-lmdb write transaction ``txn``, the first ``budget``
    keys of ``db`` that begin with ``prefix`` (all of them if fewer), as an
    eviction step deletes a generation's records: (deleted, True if a key
    with the prefix is left), or None, nothing deleted, if LMDB's own calls
    are not available (lmdb_direct). For the tests."""
    return _lmdb_delete_prefix(txn, db, prefix, budget)


cdef object _lmdb_get(object txn, bytes key, object db):
    # ``txn.get(key, None, db)``: by LMDB's own mdb_get where ``txn`` is a
    # py-lmdb transaction that checks out, holding the GIL throughout (a
    # read of mapped pages: py-lmdb hands the GIL over for it, and the
    # caller then waits to take it back from whichever thread took it).
    cdef void *handle = NULL
    cdef const ds_lmdb_engine *e
    cdef unsigned int dbi
    cdef ds_mdb_val k, v
    cdef int rc
    e = _lmdb_txn(txn, &handle, False)
    if e != NULL and _lmdb_dbi(db, (<ds_pylmdb_txn *><PyObject *>txn).env, &dbi):
        k.mv_size = PyBytes_GET_SIZE(key)
        k.mv_data = PyBytes_AS_STRING(key)
        rc = e.get(handle, dbi, &k, &v)
        if rc == 0:
            return PyBytes_FromStringAndSize(<char *>v.mv_data, v.mv_size)
        if rc == DS_MDB_NOTFOUND:
            return None
        _lmdb_raise(e, rc, "mdb_get")
    return txn.get(key, None, db)


cdef enum:
    # A direct filter build in a store's own thread hands the GIL over
    # (_pause) every this many keys: about as long a hold as a call's slice
    # of an apply made py-lmdb's way.
    SCAN_CHUNK_KEYS = 256
    # Hashes taken per step when they are only counted or added.
    SCAN_SCRATCH = 4096

#: build_bloom's answer when the direct way cannot be taken.
_NOT_DIRECT = object()


cdef int _scan_pass(const ds_lmdb_engine *e, object txn, void *handle, unsigned int dbi, bytes start,
                    const ds_hash_key *hk, uint64_t **hashes, size_t *cap, size_t max_gathered,
                    BloomFilter bf, bint pause, size_t *count) except -1:
    # One pass of _lmdb_bloom over the keys beginning with ``start``: their
    # hashes gathered into ``*hashes`` (grown up to ``max_gathered``; past
    # that ``*hashes`` is freed and set NULL, and the rest only counted), or
    # with ``bf`` added to it. ``*count``: keys seen.
    cdef ds_lmdb_scan scan
    cdef uint64_t scratch[SCAN_SCRATCH]
    cdef uint64_t *grown
    cdef size_t n = 0, got = 0, take, since = 0
    cdef int done = 0, rc
    cdef const char *p = PyBytes_AS_STRING(start)
    cdef size_t plen = PyBytes_GET_SIZE(start)
    rc = ds_lmdb_scan_open(e, handle, dbi, p, plen, &scan)
    try:
        while rc == 0 and not done:
            if bf is None and hashes[0] != NULL and n == cap[0]:
                if cap[0] >= max_gathered:
                    free(hashes[0])
                    hashes[0] = NULL  # only counted from here on
                else:
                    grown = <uint64_t *>realloc(hashes[0], min(2 * cap[0], max_gathered) * sizeof(uint64_t))
                    if grown == NULL:
                        raise MemoryError()
                    hashes[0], cap[0] = grown, min(2 * cap[0], max_gathered)
            take = SCAN_CHUNK_KEYS - since if pause else SCAN_SCRATCH
            if bf is None and hashes[0] != NULL:
                take = min(take, cap[0] - n)
                rc = ds_lmdb_scan_hash(e, &scan, p, plen, C_KEY_PREFIX_BYTES, hk, hashes[0] + n, take, &got, &done)
            else:
                take = min(take, <size_t>SCAN_SCRATCH)
                rc = ds_lmdb_scan_hash(e, &scan, p, plen, C_KEY_PREFIX_BYTES, hk, scratch, take, &got, &done)
                if bf is not None:
                    ds_bloom_add_many(&bf.b, scratch, got)
            n += got
            since += got
            if pause and since >= SCAN_CHUNK_KEYS and not done:
                since = 0
                _pause()
                if not (<ds_pylmdb_txn *><PyObject *>txn).h.valid:
                    raise _pylmdb.Error("the read transaction ended during a filter build")
        if rc != 0:
            _lmdb_raise(e, rc, "mdb_cursor_get")
    finally:
        ds_lmdb_scan_close(e, &scan)
    count[0] = n
    return 0


cdef object _lmdb_bloom(object txn, object db, bytes start, const ds_hash_key *hk, double fp_rate, uint64_t tag,
                        size_t max_gathered, bint pause):
    # Space.build_bloom's filter by a direct pass over the generation (the
    # GIL held, handed over every SCAN_CHUNK_KEYS keys if ``pause``):
    # the filter, None if no key begins with ``start``, or _NOT_DIRECT.
    cdef void *handle = NULL
    cdef const ds_lmdb_engine *e
    cdef unsigned int dbi
    cdef size_t cap = max(1, min(4096, max_gathered)), n = 0
    cdef uint64_t *hashes
    cdef BloomFilter bf
    e = _lmdb_txn(txn, &handle, False)
    if e == NULL or not _lmdb_dbi(db, (<ds_pylmdb_txn *><PyObject *>txn).env, &dbi):
        return _NOT_DIRECT
    hashes = NULL if max_gathered == 0 else <uint64_t *>malloc(cap * sizeof(uint64_t))
    if hashes == NULL and max_gathered != 0:
        raise MemoryError()
    try:
        _scan_pass(e, txn, handle, dbi, start, hk, &hashes, &cap, max_gathered, None, pause, &n)
        if n == 0:
            return None
        bf = BloomFilter(n, fp_rate, tag)
        if hashes != NULL:
            ds_bloom_add_many(&bf.b, hashes, n)
            return bf
        # Too many to gather: a second pass adds them.
        _scan_pass(e, txn, handle, dbi, start, hk, &hashes, &cap, max_gathered, bf, pause, &n)
        return bf
    finally:
        free(hashes)
