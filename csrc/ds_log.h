/* An append-only log file written through a shared mapping: the flush-mode
 * write-behind segment (dedupstore/window.py).
 *
 * Each write-behind call appends one record and returns; the record only has
 * to outlive the process (an OS crash may lose it: flush mode rolls back to
 * the last checkpoint then), so reaching the page cache is enough. A pwrite()
 * of a few hundred bytes gets there through a system call and the
 * filesystem's write path (block mapping, buffer dirtying) per record; a
 * memcpy into a MAP_SHARED mapping of the same file puts the bytes in the
 * same page-cache pages with no call at all, and the kernel sees one page
 * fault per fresh page instead (benches/bench_calls.py measures the calls;
 * docs/benchmarks.md has the figures). Read-ahead is turned off for the
 * mapping, so that such a fault is one page, not a burst of them.
 *
 * A store to a mapped page the filesystem cannot back is not an error code
 * but SIGBUS, which would kill the process. So the mapping is written only
 * below ``reserved``: space posix_fallocate() has allocated (and so the file's
 * size covers), a chunk ahead of the writes. Where reserving fails (a full
 * disk, a filesystem without fallocate) or a record does not fit in the
 * mapping, the record and every later one go through pwrite(), whose errors
 * are ordinary return codes. Offsets only grow, so a write is either wholly
 * in the mapping or wholly pwritten.
 *
 * A killed process leaves whatever it had copied: a torn last record, which
 * the reader's CRC rejects, as it rejects a torn pwrite.
 */
#ifndef DS_LOG_H
#define DS_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct ds_log {
    int fd;
    char *base;        /* the mapping, or NULL */
    size_t map_len;    /* its length */
    uint64_t mapped;   /* the mapping is written below this only (its length, until a failure) */
    uint64_t reserved; /* file space allocated from offset 0 */
    uint64_t chunk;    /* bytes reserved at a time */
    uint64_t mapped_writes; /* records copied into the mapping (for stats and tests) */
    uint64_t populated; /* the pages below were faulted in by ds_log_prefault already */
    uint64_t high;     /* the end of the furthest write (mapped or pwritten) */
    int pwritten;      /* a write went through pwrite() */
} ds_log;

/* Sets ``l`` up over ``fd`` (open for reading and writing), mapping its
 * first ``map_bytes`` bytes (0: none; every write is a pwrite) and reserving
 * ``chunk`` bytes at a time. A mapping that cannot be made is not an error:
 * writes then go through pwrite. Never fails. */
void ds_log_init(ds_log *l, int fd, uint64_t map_bytes, uint64_t chunk);

/* Where to store ``n`` bytes at ``offset`` through the mapping (space for
 * them is reserved: counted as a mapped write), or NULL: then they go
 * through ds_log_write, which pwrites them. A caller that builds a record
 * in place gets no copy. */
void *ds_log_span(ds_log *l, uint64_t offset, size_t n);

/* Writes ``n`` bytes at ``offset``: returns 0 or an errno value (a short
 * pwrite is EIO). A failed write may have left part of the bytes there. */
int ds_log_write(ds_log *l, const void *p, size_t n, uint64_t offset);

/* Cuts the file to ``offset`` bytes (a torn record's tail) and stops writing
 * the mapping at or past it (those pages are past the end now). Returns 0 or
 * an errno value. */
int ds_log_cut(ds_log *l, uint64_t offset);

/* Faults in, writable, the mapped pages of [offset, offset + length) that
 * are reserved already (madvise MADV_POPULATE_WRITE): the page faults (and
 * the zeroing of fresh page-cache pages) that the writer's first stores to
 * them would take, taken in another thread ahead of the writer. The pages'
 * contents do not change. Pages an earlier call populated are not asked
 * for again (``populated``): the flusher calls this every few milliseconds
 * with a window far wider than what the writer moved on meanwhile, and the
 * kernel walked every page of it each time. (A populated page that
 * writeback cleaned since is write-protected again: the writer's first
 * store to it takes a minor fault, as it would have without this.) Safe
 * beside the writer's calls, not beside ds_log_release. Returns 0, or an
 * errno value (EINVAL from a kernel before Linux 5.14: advice only, nothing
 * is lost; those pages are asked for again next time). */
int ds_log_prefault(ds_log *l, uint64_t offset, uint64_t length);

/* Makes a segment whose records are all applied into a fresh one, to be
 * written again from offset 0: zeroes every byte written (the file reads as
 * a freshly reserved one does: all zeros, so a reader stops at offset 0 and
 * a later record is never followed by an earlier one's bytes) and forgets
 * the writes. Its pages stay in the page cache and in the mapping, its file
 * space stays reserved: the next writes take no page allocation, no fault
 * and no reservation, where a fresh file's take all three (and deleting
 * the old one frees them again). Only a segment written wholly through its
 * whole mapping can be: returns EINVAL (and changes nothing) for one with
 * no mapping, a pwritten record, a cut, or a refused reservation. Not beside
 * the writer's calls, nor beside ds_log_prefault. Returns 0 or EINVAL. */
int ds_log_recycle(ds_log *l);

/* Unmaps (the descriptor is the caller's to close). */
void ds_log_release(ds_log *l);

#endif
