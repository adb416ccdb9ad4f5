/* Direct calls into py-lmdb's LMDB: see ds_lmdb.h. */
#define _GNU_SOURCE
#include "ds_lmdb.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int bind_engine(void *handle, const char *prefix, ds_lmdb_engine *e) {
    char name[64];
    /* The function table is data: its address identifies the engine a
     * py-lmdb object was made with. */
    snprintf(name, sizeof name, "lmdb_api_v%s", prefix + 3);
    e->table = dlsym(handle, name);
#define DS_BIND(field, fn)                                  \
    snprintf(name, sizeof name, "%s_%s", prefix, fn);       \
    *(void **)&e->field = dlsym(handle, name);              \
    if (e->field == NULL)                                   \
        return -1;
    DS_BIND(get, "get")
    DS_BIND(txn_env, "txn_env")
    DS_BIND(strerror, "strerror")
    DS_BIND(cursor_open, "cursor_open")
    DS_BIND(cursor_close, "cursor_close")
    DS_BIND(cursor_get, "cursor_get")
    DS_BIND(cursor_del, "cursor_del")
    DS_BIND(cursor_put, "cursor_put")
#undef DS_BIND
    return e->table == NULL ? -1 : 0;
}

int ds_lmdb_bind(ds_lmdb *api, const char *path, char *why, size_t why_len) {
    static const char *const prefixes[] = {"mdb09", "mdb10"};
    memset(api, 0, sizeof *api);
    void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (handle == NULL) {
        snprintf(why, why_len, "py-lmdb's module is not loaded from %s", path);
        return -1;
    }
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (bind_engine(handle, prefixes[i], &api->engines[api->count]) == 0)
            api->count++;
    }
    /* The handle stays open: it pins a module Python never unloads anyway. */
    if (api->count == 0) {
        snprintf(why, why_len, "py-lmdb's module exports no LMDB engine (mdb09_put, lmdb_api_v09, ...)");
        return -1;
    }
    return 0;
}

const ds_lmdb_engine *ds_lmdb_engine_of(const ds_lmdb *api, const void *table) {
    for (int i = 0; i < api->count; i++) {
        if (table != NULL && api->engines[i].table == table)
            return &api->engines[i];
    }
    return NULL;
}

int ds_lmdb_write_all(const ds_lmdb_engine *e, void *txn, const ds_lmdb_write *w, size_t n, size_t *done) {
    ds_mdb_val key, val;
    void *cur = NULL;
    unsigned int cur_dbi = 0;
    size_t i;
    int rc = 0;

    for (i = 0; i < n; i++) {
        if (cur == NULL || w[i].dbi != cur_dbi) {
            if (cur != NULL)
                e->cursor_close(cur);
            cur = NULL;
            rc = e->cursor_open(txn, w[i].dbi, &cur);
            if (rc != 0)
                break;
            cur_dbi = w[i].dbi;
        }
        key.mv_size = w[i].key.len;
        key.mv_data = (void *)w[i].key.data;
        if (w[i].del) {
            /* mdb_del's two steps: find the key, delete it (absent: no error). */
            rc = e->cursor_get(cur, &key, &val, DS_MDB_SET);
            if (rc == 0)
                rc = e->cursor_del(cur, 0);
            else if (rc == DS_MDB_NOTFOUND)
                rc = 0;
        } else {
            val.mv_size = w[i].val_len;
            val.mv_data = (void *)w[i].val;
            rc = e->cursor_put(cur, &key, &val, 0);
        }
        if (rc != 0)
            break;
    }
    if (cur != NULL)
        e->cursor_close(cur);
    *done = i;
    return rc;
}

static int has_prefix(const ds_mdb_val *key, const void *prefix, size_t prefix_len) {
    return key->mv_size >= prefix_len && memcmp(key->mv_data, prefix, prefix_len) == 0;
}

/* In ds_lmdb_delete_prefix's first pass, every THIN_KEEP-th key is kept. */
#define THIN_KEEP 4

/* The end of the database, for a cursor that was walking: NOTFOUND, or
 * EINVAL from GET_CURRENT past the last key (only after a delete). */
static int walked_off(int rc, long deleted) {
    return rc == DS_MDB_NOTFOUND || (rc == EINVAL && deleted > 0);
}

int ds_lmdb_delete_prefix(const ds_lmdb_engine *e, void *txn, unsigned int dbi, const void *prefix, size_t prefix_len,
                          long budget, long *deleted, int *more) {
    void *cur;
    ds_mdb_val key = {prefix_len, (void *)prefix}, val;
    long n = 0, seen = 0, kept = 0;
    int rc = e->cursor_open(txn, dbi, &cur);
    *deleted = 0;
    *more = 0;
    if (rc != 0)
        return rc;
    /* First pass: of the first ``budget`` keys with the prefix, all but
     * every THIN_KEEP-th. */
    rc = e->cursor_get(cur, &key, &val, DS_MDB_SET_RANGE);
    while (rc == 0 && has_prefix(&key, prefix, prefix_len)) {
        if (seen == budget) {
            *more = 1;
            break;
        }
        if (seen++ % THIN_KEEP == 0) {
            kept++;
            rc = e->cursor_get(cur, &key, &val, DS_MDB_NEXT);
            continue;
        }
        rc = e->cursor_del(cur, 0);
        if (rc != 0)
            break;
        n++;
        /* After a delete the cursor stands on the next key, if any. */
        rc = e->cursor_get(cur, &key, &val, DS_MDB_GET_CURRENT);
    }
    if (walked_off(rc, n))
        rc = 0;
    /* Second pass: the keys kept, now the first ones with the prefix. */
    if (rc == 0 && kept > 0) {
        key.mv_size = prefix_len;
        key.mv_data = (void *)prefix;
        rc = e->cursor_get(cur, &key, &val, DS_MDB_SET_RANGE);
        while (rc == 0 && kept > 0 && has_prefix(&key, prefix, prefix_len)) {
            rc = e->cursor_del(cur, 0);
            if (rc != 0)
                break;
            n++;
            kept--;
            rc = e->cursor_get(cur, &key, &val, DS_MDB_GET_CURRENT);
        }
        if (walked_off(rc, n))
            rc = 0;
    }
    e->cursor_close(cur);
    *deleted = n;
    return rc;
}

int ds_lmdb_scan_open(const ds_lmdb_engine *e, void *txn, unsigned int dbi, const void *prefix, size_t prefix_len,
                      ds_lmdb_scan *s) {
    ds_mdb_val val;
    int rc = e->cursor_open(txn, dbi, &s->cursor);
    if (rc != 0) {
        s->cursor = NULL;
        return rc;
    }
    s->key.mv_size = prefix_len;
    s->key.mv_data = (void *)prefix;
    s->rc = e->cursor_get(s->cursor, &s->key, &val, DS_MDB_SET_RANGE);
    return s->rc == DS_MDB_NOTFOUND ? 0 : s->rc;
}

int ds_lmdb_scan_hash(const ds_lmdb_engine *e, ds_lmdb_scan *s, const void *prefix, size_t prefix_len, size_t skip,
                      const ds_hash_key *hk, uint64_t *out, size_t max, size_t *n, int *done) {
    ds_mdb_val val;
    size_t i = 0;
    *done = 0;
    while (i < max) {
        if (s->rc != 0 || !has_prefix(&s->key, prefix, prefix_len) || s->key.mv_size < skip) {
            *done = 1;
            break;
        }
        out[i++] = ds_siphash64(hk, (const uint8_t *)s->key.mv_data + skip, s->key.mv_size - skip);
        s->rc = e->cursor_get(s->cursor, &s->key, &val, DS_MDB_NEXT);
    }
    *n = i;
    return s->rc == 0 || s->rc == DS_MDB_NOTFOUND ? 0 : s->rc;
}

void ds_lmdb_scan_close(const ds_lmdb_engine *e, ds_lmdb_scan *s) {
    if (s->cursor != NULL)
        e->cursor_close(s->cursor);
    s->cursor = NULL;
}
