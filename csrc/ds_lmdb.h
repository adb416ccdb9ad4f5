/* Direct calls into the LMDB that py-lmdb carries: an apply's writes and
 * eviction's deletes without the GIL, and a window's snapshot reads with it
 * kept.
 *
 * py-lmdb releases the GIL around every put, delete and get, and takes it
 * back after each: an apply of thousands of puts hands the GIL to and fro
 * with the consumer's calls thousands of times, and a call cannot run while
 * the apply's thread holds it between two puts. This module calls LMDB's
 * own functions for a whole list of writes, with the GIL released once for
 * all of them (benches/bench_apply.py with and without --py-lmdb, and dedupstore bench
 * with and without DEDUPSTORE_LMDB_DIRECT=0, measure the difference).
 *
 * py-lmdb has no C API. Its extension module links LMDB in statically and
 * exports LMDB's functions under their engine's prefix (mdb09_put for
 * LMDB 0.9, mdb10_put for 1.0, py-lmdb 3's two engines), and the engines'
 * function tables (lmdb_api_v09, lmdb_api_v10): ds_lmdb_bind finds both in
 * the already loaded module with dlsym. The transaction handle itself comes
 * from py-lmdb's Transaction object (dedupstore/_lmdb.pxi, which checks
 * that object's layout before it reads it).
 *
 * Only the LMDB declarations used here are written out: MDB_val's layout
 * and the functions' signatures are LMDB's public, stable API (lmdb.h).
 */
#ifndef DS_LMDB_H
#define DS_LMDB_H

#include <stddef.h>
#include <stdint.h>

#include "ds_hash.h"
#include "ds_sort.h"

/* lmdb.h's MDB_val. */
typedef struct ds_mdb_val {
    size_t mv_size;
    void *mv_data;
} ds_mdb_val;

/* lmdb.h's error codes used here. */
#define DS_MDB_NOTFOUND (-30798)
#define DS_MDB_MAP_FULL (-30792)
#define DS_MDB_TXN_FULL (-30788)
/* lmdb.h's MDB_cursor_op values used here. */
#define DS_MDB_GET_CURRENT 4
#define DS_MDB_NEXT 8
#define DS_MDB_SET 15
#define DS_MDB_SET_RANGE 17

/* One engine's functions (opaque MDB_txn, MDB_dbi as unsigned int). */
typedef struct ds_lmdb_engine {
    const void *table;  /* py-lmdb's function table for the engine: its identity */
    int (*get)(void *txn, unsigned int dbi, ds_mdb_val *key, ds_mdb_val *data);
    void *(*txn_env)(void *txn);
    const char *(*strerror)(int err);
    int (*cursor_open)(void *txn, unsigned int dbi, void **cursor);
    void (*cursor_close)(void *cursor);
    int (*cursor_get)(void *cursor, ds_mdb_val *key, ds_mdb_val *data, int op);
    int (*cursor_del)(void *cursor, unsigned int flags);
    int (*cursor_put)(void *cursor, ds_mdb_val *key, ds_mdb_val *data, unsigned int flags);
} ds_lmdb_engine;

/* What ds_lmdb_bind found: up to two engines. */
typedef struct ds_lmdb {
    ds_lmdb_engine engines[2];
    int count;
} ds_lmdb;

/* Find the engines in the shared object at ``path``, which must be loaded
 * already (it is never loaded here, nor unloaded: a handle to a loaded
 * object pins it). 0, or -1 with a reason in ``why`` (at most ``why_len``
 * bytes, NUL-terminated). */
int ds_lmdb_bind(ds_lmdb *api, const char *path, char *why, size_t why_len);

/* The engine whose function table is ``table``, or NULL. */
const ds_lmdb_engine *ds_lmdb_engine_of(const ds_lmdb *api, const void *table);

/* One write: a put of ``val`` (overwriting) or, with ``del`` set, a delete
 * (a key that is absent is no error, as py-lmdb's delete). The key comes
 * first, so that ds_sort_keys sorts an array of them. */
typedef struct ds_lmdb_write {
    ds_key_ref key;
    const void *val;
    size_t val_len;
    unsigned int dbi;
    int del;
} ds_lmdb_write;

/* The ``n`` writes, in order, in write transaction ``txn``: 0, or the first
 * error's LMDB code (``*done``: the writes made before it; LMDB has then
 * marked the transaction failed, and it can only be aborted). Takes no lock
 * of its own and calls no Python: run it without the GIL, from the only
 * thread using ``txn`` meanwhile.
 *
 * The writes are made through one cursor per run of writes to the same
 * database, not by mdb_put and mdb_del (each of which searches from the
 * root with a cursor of its own): a cursor that stands on a leaf looks
 * there first (mdb_cursor_set), so of keys in order, each that falls on
 * the leaf of the one before skips the search. The writes made are
 * mdb_put's and mdb_del's, key for key. */
int ds_lmdb_write_all(const ds_lmdb_engine *e, void *txn, const ds_lmdb_write *w, size_t n, size_t *done);

/* Delete, in write transaction ``txn``, the first ``budget`` keys of
 * database ``dbi`` that begin with ``prefix`` (all of them if fewer): 0, or
 * an LMDB error code (the transaction is then failed). ``*deleted``: how
 * many went; ``*more``: 1 if a key with the prefix is left (the budget ran
 * out). Without the GIL, as ds_lmdb_write_all.
 *
 * In two passes: all but every fourth of those keys, then the ones kept.
 * Deleted in key order, once the first leaf fell under LMDB's fill
 * threshold every further delete made mdb_rebalance move one node into it
 * from its full neighbour, so that nearly every key was moved once before
 * it went; thinned first, the same keys take about a third fewer
 * instructions a delete (docs/benchmarks.md). */
int ds_lmdb_delete_prefix(const ds_lmdb_engine *e, void *txn, unsigned int dbi, const void *prefix, size_t prefix_len,
                          long budget, long *deleted, int *more);

/* A pass over the keys of one database that begin with a prefix, in key
 * order, hashing each (ds_siphash64 of the key past its first ``skip``
 * bytes) in chunks: ds_lmdb_scan_open positions it, each
 * ds_lmdb_scan_hash takes the next keys' hashes, ds_lmdb_scan_close ends
 * it (also after its read transaction has ended). Read-only: run with the
 * GIL held, and hand it over between chunks only if nothing can end the
 * transaction meanwhile. */
typedef struct ds_lmdb_scan {
    void *cursor;
    ds_mdb_val key;
    int rc;  /* the cursor's last answer: 0 on a key, else NOTFOUND or an error */
} ds_lmdb_scan;

int ds_lmdb_scan_open(const ds_lmdb_engine *e, void *txn, unsigned int dbi, const void *prefix, size_t prefix_len,
                      ds_lmdb_scan *s);

/* Up to ``max`` hashes into ``out``: 0 and their count in ``*n`` (fewer
 * than ``max`` only at the prefix's end; ``*done`` then 1), or an LMDB
 * error code. */
int ds_lmdb_scan_hash(const ds_lmdb_engine *e, ds_lmdb_scan *s, const void *prefix, size_t prefix_len, size_t skip,
                      const ds_hash_key *hk, uint64_t *out, size_t max, size_t *n, int *done);

void ds_lmdb_scan_close(const ds_lmdb_engine *e, ds_lmdb_scan *s);

#endif
