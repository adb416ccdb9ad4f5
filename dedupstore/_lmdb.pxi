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
        const void *key
        size_t key_len
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


cdef const ds_lmdb_engine *_lmdb_txn(object txn, void **handle, bint write=True):
    # ``txn``'s engine and MDB_txn handle if it is a live py-lmdb
    # transaction (a write one if ``write``) whose layout checks out; NULL
    # otherwise.
    cdef ds_pylmdb_txn *t
    cdef ds_pylmdb_env *env
    cdef const ds_lmdb_engine *e
    if type(txn) is not _txn_type:
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
    w.key = PyBytes_AS_STRING(key)
    w.key_len = PyBytes_GET_SIZE(key)
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
    if _lmdb_state == 0:
        _lmdb_bind()
    if _lmdb_state != 1:
        return False
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


cdef int _lmdb_raise(const ds_lmdb_engine *e, int rc, str what) except -1:
    # py-lmdb's exception for LMDB error ``rc`` of call ``what``.
    msg = f"{what}: {e.strerror(rc).decode()}"
    if rc == DS_MDB_MAP_FULL:
        raise _pylmdb.MapFullError(msg)
    if rc == DS_MDB_TXN_FULL:
        raise _pylmdb.TxnFullError(msg)
    raise _pylmdb.Error(msg)


cdef object _lmdb_delete_prefix(object txn, object db, bytes prefix, long budget):
    # Delete, in py-lmdb write transaction ``txn``, up to ``budget`` keys
    # of ``db`` that begin with ``prefix``, in key order, with LMDB's own
    # calls and the GIL released once: (deleted, True if a key with the
    # prefix is left). None, nothing deleted, if that way is not available.
    cdef void *handle = NULL
    cdef const ds_lmdb_engine *e
    cdef unsigned int dbi
    cdef long deleted = 0
    cdef int more = 0, rc
    if _lmdb_state == 0:
        _lmdb_bind()
    if _lmdb_state != 1:
        return None
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
    if _lmdb_state == 0:
        _lmdb_bind()
    if _lmdb_state == 1:
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
