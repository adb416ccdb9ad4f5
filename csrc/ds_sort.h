/* Sorting items by their keys in LMDB's default order: bytes compared as
 * unsigned, and where one key is a prefix of the other, the shorter first
 * (mdb_cmp_memn). An apply sorts its keys before it writes them, so that a
 * cursor finds each next key near the last (csrc/ds_lmdb.h).
 *
 * qsort with a memcmp callback made about n log n calls, each of which read
 * two keys that sit in Python bytes objects all over the heap, and compared
 * their common prefix (namespace, generation, and the business keys' own
 * prefix, "order-" in the reference stream) again every time: 633 of the
 * 3,686-3,805 instructions a key of applies of 600 keys under callgrind
 * (docs/benchmarks.md, thirty-sixth session). Here each key is read a few
 * times in all. Each
 * level orders 16-byte slots: the next 8 bytes of the key past what all the
 * keys in its range have in common, big-endian so that comparing integers
 * compares bytes, and how many of those bytes the key has; the keys that
 * tie on both (they share those 8 bytes and go on past them) are ordered
 * the same way from there, a level further, over their own range alone.
 * Each level is a merge sort of the slots, so no input takes more than
 * O(n log n) comparisons per level, and a level is at least 8 bytes
 * further into the keys. */
#ifndef DS_SORT_H
#define DS_SORT_H

#include <stddef.h>

/* A key: ``len`` bytes at ``data``. */
typedef struct ds_key_ref {
    const void *data;
    size_t len;
} ds_key_ref;

/* Sort ``n`` items of ``size`` bytes each, each of which begins with a
 * ds_key_ref, by their keys into LMDB's default order. Items with equal keys
 * end in any order. Calls no Python and takes no lock: run it without the
 * GIL. Allocates scratch of about (32 + ``size``) bytes an item; where that
 * fails (or past 2**32 items), it sorts with qsort instead, into the same
 * order. */
void ds_sort_keys(void *items, size_t n, size_t size);

#endif
