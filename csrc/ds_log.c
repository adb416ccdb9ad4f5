#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise() */

#include "ds_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void ds_log_init(ds_log *l, int fd, uint64_t map_bytes, uint64_t chunk)
{
    l->fd = fd;
    l->base = NULL;
    l->map_len = 0;
    l->mapped = 0;
    l->reserved = 0;
    l->chunk = chunk ? chunk : 1;
    l->mapped_writes = 0;
    l->populated = 0;
    l->high = 0;
    l->pwritten = 0;
    if (map_bytes == 0 || map_bytes > SIZE_MAX) {
        return;
    }
    void *p = mmap(NULL, (size_t)map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        /* No read-ahead: the first store to a fresh page faults it in, and
         * with read-ahead that fault would read (zero-fill) the rest of the
         * reserved chunk too, up to read_ahead_kb at once, all in the
         * caller's store. One page per fault costs the same in total, spread
         * evenly (docs/benchmarks.md, "The consumer's pauses in flush
         * mode"). Advice only: a refusal changes nothing but the cost. */
        (void)posix_madvise(p, (size_t)map_bytes, POSIX_MADV_RANDOM);
        l->base = p;
        l->map_len = (size_t)map_bytes;
        l->mapped = map_bytes;
    }
}

/* Allocates file space up to at least ``end`` (within the mapping), a chunk
 * ahead; on failure the mapping is written no further. */
static int reserve(ds_log *l, uint64_t end)
{
    uint64_t to = end + l->chunk;
    if (to > l->mapped) {
        to = l->mapped;
    }
    int rc;
    do {
        rc = posix_fallocate(l->fd, (off_t)l->reserved, (off_t)(to - l->reserved));
    } while (rc == EINTR);
    if (rc != 0) {
        l->mapped = l->reserved; /* this record and every later one: pwrite */
        return 0;
    }
    l->reserved = to;
    return 1;
}

void *ds_log_span(ds_log *l, uint64_t offset, size_t n)
{
    if (l->base != NULL && offset + n <= l->mapped && (offset + n <= l->reserved || reserve(l, offset + n))) {
        l->mapped_writes++;
        if (offset + n > l->high) {
            l->high = offset + n;
        }
        return l->base + offset;
    }
    return NULL;
}

int ds_log_write(ds_log *l, const void *p, size_t n, uint64_t offset)
{
    void *span = ds_log_span(l, offset, n);
    if (span != NULL) {
        memcpy(span, p, n);
        return 0;
    }
    const char *c = p;
    size_t done = 0;
    l->pwritten = 1;
    if (offset + n > l->high) {
        l->high = offset + n;
    }
    while (done < n) {
        ssize_t w = pwrite(l->fd, c + done, n - done, (off_t)(offset + done));
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        if (w == 0) {
            return EIO;
        }
        done += (size_t)w;
    }
    return 0;
}

int ds_log_cut(ds_log *l, uint64_t offset)
{
    if (offset < l->mapped) {
        l->mapped = offset;
    }
    if (offset < l->reserved) {
        l->reserved = offset;
    }
    if (offset < __atomic_load_n(&l->populated, __ATOMIC_RELAXED)) {
        __atomic_store_n(&l->populated, offset, __ATOMIC_RELAXED);
    }
    return ftruncate(l->fd, (off_t)offset) == 0 ? 0 : errno;
}

/* Linux 5.14's value, for C libraries older than the advice. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int ds_log_prefault(ds_log *l, uint64_t offset, uint64_t length)
{
    /* Read once: the writer's calls may move them on meanwhile (only ever
     * forward, but for a cut), and a stale value only populates less. */
    uint64_t top = __atomic_load_n(&l->reserved, __ATOMIC_RELAXED);
    uint64_t mapped = __atomic_load_n(&l->mapped, __ATOMIC_RELAXED);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t end = length > UINT64_MAX - offset ? UINT64_MAX : offset + length;

    if (l->base == NULL) {
        return 0;
    }
    if (top > mapped) {
        top = mapped;
    }
    if (end > top) {
        end = top;
    }
    uint64_t done = __atomic_load_n(&l->populated, __ATOMIC_RELAXED);
    if (offset < done) {
        offset = done;
    }
    offset -= offset % page;
    if (offset >= end) {
        return 0;
    }
    /* Population fails with an error code, never SIGBUS, where a page is
     * not backed (a file cut shorter meanwhile). */
    if (madvise(l->base + offset, (size_t)(end - offset), MADV_POPULATE_WRITE) != 0) {
        return errno;
    }
    /* Whole pages only: the one holding ``end`` is asked for again. */
    __atomic_store_n(&l->populated, end - end % page, __ATOMIC_RELAXED);
    return 0;
}

int ds_log_recycle(ds_log *l)
{
    /* A refused reservation or a cut lowers ``mapped``; with neither and no
     * pwrite, every write was a span, within the reserved space. */
    if (l->base == NULL || l->pwritten || l->mapped != l->map_len) {
        return EINVAL;
    }
    /* Beyond ``high`` the file holds zeros already: reserved space, or
     * zeroed by the last recycling. */
    memset(l->base, 0, (size_t)l->high);
    l->high = 0;
    l->mapped_writes = 0;
    /* A page that writeback cleaned since it was written is write-protected
     * again (the memset faulted it writable, but writeback may clean it once
     * more before the writer's stores): the flusher's prefaults go over
     * them again. */
    __atomic_store_n(&l->populated, 0, __ATOMIC_RELAXED);
    return 0;
}

void ds_log_release(ds_log *l)
{
    if (l->base != NULL) {
        munmap(l->base, l->map_len);
        l->base = NULL;
    }
    l->mapped = l->reserved = 0;
}
