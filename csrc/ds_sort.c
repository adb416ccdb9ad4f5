/* Items by their keys in LMDB's default order: see ds_sort.h. */
#include "ds_sort.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* An item's place at one level of the sort, which starts ``off`` bytes into
 * the keys of its range (all of them at least that long). */
typedef struct slot {
    uint64_t w; /* the key's bytes off..off+8, big-endian, zeros past its end */
    uint32_t c; /* how many of those bytes it has (0..8), or 9 if it goes on past them */
    uint32_t i; /* the item's index */
} slot;

/* Slots sorted by insertion before the merges start. */
#define RUN 16

static inline const ds_key_ref *key_at(const char *items, size_t size, uint32_t i) {
    return (const ds_key_ref *)(items + (size_t)i * size);
}

static inline uint64_t load_be64(const unsigned char *p) {
    return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
           (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 | (uint64_t)p[6] << 8 | (uint64_t)p[7];
}

static inline void place(slot *s, const ds_key_ref *k, size_t off) {
    const unsigned char *p = (const unsigned char *)k->data + off;
    size_t have = k->len - off;
    if (have >= 8) {
        s->w = load_be64(p);
        s->c = have > 8 ? 9 : 8;
    } else {
        unsigned char b[8] = {0};
        if (have > 0)
            memcpy(b, p, have);
        s->w = load_be64(b);
        s->c = (uint32_t)have;
    }
}

/* (w, c) order is the keys' order: where the windows differ, the first
 * byte that differs decides, a key's end (a zero in its window, with
 * nothing of it after) coming before any byte of a key that goes on; where
 * they are equal, the key with fewer bytes in it is a prefix of the other.
 * Keys equal in both that go on past the window are ordered a level
 * further. */
static inline int less(const slot *a, const slot *b) {
    return a->w < b->w || (a->w == b->w && a->c < b->c);
}

/* How many bytes all the keys of s[0..n) have in common, knowing they have
 * the first ``from``: at most the shortest one's length. */
static size_t common(const char *items, size_t size, const slot *s, size_t n, size_t from) {
    const ds_key_ref *k0 = key_at(items, size, s[0].i);
    const unsigned char *a = k0->data;
    size_t end = k0->len;
    for (size_t j = 1; j < n && end > from; j++) {
        const ds_key_ref *k = key_at(items, size, s[j].i);
        const unsigned char *b = k->data;
        size_t m = k->len < end ? k->len : end, l = from;
        while (l + 8 <= m && memcmp(a + l, b + l, 8) == 0)
            l += 8;
        while (l < m && a[l] == b[l])
            l++;
        end = l;
    }
    return end;
}

static void insertion(slot *s, size_t n) {
    for (size_t j = 1; j < n; j++) {
        slot x = s[j];
        size_t k = j;
        while (k > 0 && less(&x, &s[k - 1])) {
            s[k] = s[k - 1];
            k--;
        }
        s[k] = x;
    }
}

static void merge(const slot *a, size_t na, const slot *b, size_t nb, slot *out) {
    size_t i = 0, j = 0, k = 0;
    while (i < na && j < nb)
        out[k++] = less(&b[j], &a[i]) ? b[j++] : a[i++];
    while (i < na)
        out[k++] = a[i++];
    while (j < nb)
        out[k++] = b[j++];
}

/* s[0..n) in (w, c) order, with t[0..n) to merge into. */
static void sort_slots(slot *s, slot *t, size_t n) {
    for (size_t j = 0; j < n; j += RUN)
        insertion(s + j, n - j < RUN ? n - j : RUN);
    slot *from = s, *to = t;
    for (size_t width = RUN; width < n; width *= 2) {
        for (size_t j = 0; j < n; j += 2 * width) {
            size_t mid = n - j > width ? j + width : n;
            size_t end = n - mid > width ? mid + width : n;
            merge(from + j, mid - j, from + mid, end - mid, to + j);
        }
        slot *x = from;
        from = to;
        to = x;
    }
    if (from != s)
        memcpy(s, from, n * sizeof *s);
}

/* The items of s[0..n), all of whose keys agree on their first ``off``
 * bytes, in key order. Each level goes at least 8 bytes further, so the
 * recursion is at most a key's length / 8 deep (LMDB's keys: 511 bytes). */
static void sort_level(const char *items, size_t size, slot *s, slot *t, size_t n, size_t off) {
    for (size_t j = 0; j < n; j++)
        place(&s[j], key_at(items, size, s[j].i), off);
    sort_slots(s, t, n);
    for (size_t j = 0; j < n;) {
        size_t e = j + 1;
        while (e < n && s[e].w == s[j].w && s[e].c == s[j].c)
            e++;
        if (e - j > 1 && s[j].c == 9)
            sort_level(items, size, s + j, t + j, e - j, common(items, size, s + j, e - j, off + 8));
        j = e;
    }
}

static int key_order(const void *x, const void *y) {
    const ds_key_ref *a = x, *b = y;
    size_t m = a->len < b->len ? a->len : b->len;
    int c = m > 0 ? memcmp(a->data, b->data, m) : 0;
    if (c != 0)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

void ds_sort_keys(void *items, size_t n, size_t size) {
    slot *s = NULL;
    char *moved = NULL;
    char *base = items;
    if (n < 2)
        return;
    if (n <= UINT32_MAX && size <= SIZE_MAX / n) {
        s = malloc(2 * n * sizeof *s);
        moved = malloc(n * size);
    }
    if (s == NULL || moved == NULL) {
        free(s);
        free(moved);
        qsort(items, n, size, key_order);
        return;
    }
    for (size_t j = 0; j < n; j++)
        s[j].i = (uint32_t)j;
    sort_level(base, size, s, s + n, n, common(base, size, s, n, 0));
    for (size_t j = 0; j < n; j++)
        memcpy(moved + j * size, base + (size_t)s[j].i * size, size);
    memcpy(base, moved, n * size);
    free(s);
    free(moved);
}
