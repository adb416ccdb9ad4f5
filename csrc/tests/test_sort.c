/* Unit tests of ds_sort_keys (csrc/ds_sort.c): every array it sorts must
 * come out in the order qsort gives it with LMDB's comparison (memcmp over
 * the common length, then the shorter first), each item whole.
 *
 * Built and run by tests/test_csrc.py (with ASan/UBSan where available):
 *   cc -std=c11 -Wall -Wextra -Werror -Icsrc csrc/tests/test_sort.c csrc/ds_*.c
 * The last line printed is "N passed, M failed"; the exit status is non-zero
 * on any failure.
 */
#include "../ds_sort.h"

#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* An item as the store's are: the key first, then what travels with it. */
typedef struct item {
    ds_key_ref key;
    size_t tag; /* the item's index before the sort */
    char pad[13]; /* an item size that is no multiple of 8 */
} item;

static uint64_t rng_state;

/* Zeroed memory, or the test program stops: nothing here is worth
 * running on without it. */
static void *must_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "test_sort: no memory for %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

static uint64_t next(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int lmdb_order(const ds_key_ref *a, const ds_key_ref *b) {
    size_t m = a->len < b->len ? a->len : b->len;
    int c = m > 0 ? memcmp(a->data, b->data, m) : 0;
    if (c != 0)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

static int item_order(const void *x, const void *y) {
    return lmdb_order(&((const item *)x)->key, &((const item *)y)->key);
}

/* Sorts ``n`` items whose keys are the ``lens[i]`` bytes at ``keys + i *
 * stride`` with ds_sort_keys and checks the result against qsort's, key for
 * key, and that each item kept its tag and padding. */
static void check_sorted(const char *what, const unsigned char *keys, size_t stride, const size_t *lens, size_t n) {
    item *got = must_alloc(n * sizeof *got);
    item *want = must_alloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) {
        got[i].key.data = keys + i * stride;
        got[i].key.len = lens[i];
        got[i].tag = i;
        memset(got[i].pad, (int)(i & 0x7f), sizeof got[i].pad);
    }
    memcpy(want, got, n * sizeof *got);
    ds_sort_keys(got, n, sizeof *got);
    qsort(want, n, sizeof *want, item_order);
    size_t wrong = 0, torn = 0;
    for (size_t i = 0; i < n; i++) {
        if (lmdb_order(&got[i].key, &want[i].key) != 0)
            wrong++;
        size_t t = got[i].tag;
        if (t >= n || got[i].key.data != keys + t * stride || got[i].key.len != lens[t] ||
            got[i].pad[0] != (char)(t & 0x7f) || got[i].pad[12] != (char)(t & 0x7f))
            torn++;
    }
    /* Every tag once: a permutation, nothing lost or doubled. */
    unsigned char *seen = must_alloc(n);
    size_t doubled = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i].tag < n && seen[got[i].tag]++)
            doubled++;
    }
    free(seen);
    CHECK_AT(wrong == 0, __FILE__, __LINE__, "%s (n=%zu): %zu keys out of place", what, n, wrong);
    CHECK_AT(torn == 0, __FILE__, __LINE__, "%s (n=%zu): %zu items not whole", what, n, torn);
    CHECK_AT(doubled == 0, __FILE__, __LINE__, "%s (n=%zu): %zu tags twice", what, n, doubled);
    free(got);
    free(want);
}

#define STRIDE 160

/* Keys of random lengths up to ``max_len`` after a shared prefix of
 * ``prefix`` bytes, their bytes drawn from ``alphabet`` (few letters make
 * keys that are prefixes of each other, and ties in every 8-byte window). */
static void random_keys(const char *what, size_t n, size_t prefix, size_t max_len, const unsigned char *alphabet,
                        size_t letters) {
    unsigned char *keys = must_alloc(n * STRIDE);
    size_t *lens = must_alloc(n * sizeof *lens);
    for (size_t i = 0; i < n; i++) {
        size_t len = prefix + (size_t)(next() % (max_len + 1));
        for (size_t b = 0; b < len; b++)
            keys[i * STRIDE + b] = b < prefix ? (unsigned char)(0xa0 + b) : alphabet[next() % letters];
        lens[i] = len;
    }
    check_sorted(what, keys, STRIDE, lens, n);
    free(keys);
    free(lens);
}

static void test_random_shapes(void) {
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    static const unsigned char zero_one[] = {0, 1};
    static const unsigned char edges[] = {0, 1, 0x7f, 0x80, 0xff};
    static const size_t sizes[] = {0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 100, 1000, 4099};
    static const size_t prefixes[] = {0, 1, 7, 8, 9, 12, 30};
    for (size_t s = 0; s < COUNT(sizes); s++) {
        for (size_t p = 0; p < COUNT(prefixes); p++) {
            rng_state = sizes[s] * 1000 + prefixes[p];
            random_keys("any bytes", sizes[s], prefixes[p], 40, all, 256);
            random_keys("bytes 0 and 1", sizes[s], prefixes[p], 20, zero_one, COUNT(zero_one));
            random_keys("edge bytes", sizes[s], prefixes[p], 12, edges, COUNT(edges));
            random_keys("short keys", sizes[s], prefixes[p], 3, edges, COUNT(edges));
        }
    }
}

/* The store's record keys: namespace id, generation (two of them, as an
 * apply across a generation's end has), then "order-<12 hex>:v<1..3>". */
static void test_store_keys(void) {
    static const size_t sizes[] = {2, 50, 700, 3000};
    rng_state = 42;
    for (size_t s = 0; s < COUNT(sizes); s++) {
        size_t n = sizes[s];
        unsigned char *keys = must_alloc(n * STRIDE);
        size_t *lens = must_alloc(n * sizeof *lens);
        for (size_t i = 0; i < n; i++) {
            unsigned char *k = keys + i * STRIDE;
            uint32_t gen = 0x0001e240u + (uint32_t)(next() % 2);
            k[0] = 0;
            k[1] = 7;
            k[2] = (unsigned char)(gen >> 24);
            k[3] = (unsigned char)(gen >> 16);
            k[4] = (unsigned char)(gen >> 8);
            k[5] = (unsigned char)gen;
            int m = snprintf((char *)k + 6, STRIDE - 6, "order-%012llx:v%d",
                             (unsigned long long)(next() & 0xffffffffffffULL), (int)(1 + next() % 3));
            lens[i] = 6 + (size_t)m;
        }
        check_sorted("store keys", keys, STRIDE, lens, n);
        free(keys);
        free(lens);
    }
}

/* Keys alike for their first 150 bytes (a level per 8 of them), some
 * equal, some each other's prefixes. */
static void test_long_ties(void) {
    enum { N = 300 };
    static unsigned char keys[N * STRIDE];
    size_t lens[N];
    rng_state = 7;
    for (size_t i = 0; i < N; i++) {
        unsigned char *k = keys + i * STRIDE;
        memset(k, 'x', STRIDE);
        lens[i] = 140 + (size_t)(next() % 20);
        if (lens[i] > 150)
            k[150] = (unsigned char)('a' + next() % 3);
    }
    check_sorted("long ties", keys, STRIDE, lens, N);
    /* All equal: nothing to order, every item kept. */
    for (size_t i = 0; i < N; i++)
        lens[i] = 100;
    check_sorted("all equal", keys, STRIDE, lens, N);
    /* Already in order, and in reverse. */
    for (size_t i = 0; i < N; i++) {
        unsigned char *k = keys + i * STRIDE;
        k[0] = (unsigned char)(i >> 8);
        k[1] = (unsigned char)i;
        lens[i] = 2;
    }
    check_sorted("in order", keys, STRIDE, lens, N);
    for (size_t i = 0; i < N; i++) {
        unsigned char *k = keys + i * STRIDE;
        k[0] = (unsigned char)((N - 1 - i) >> 8);
        k[1] = (unsigned char)(N - 1 - i);
    }
    check_sorted("reversed", keys, STRIDE, lens, N);
}

int main(void) {
    test_random_shapes();
    test_store_keys();
    test_long_ties();
    return check_report();
}
