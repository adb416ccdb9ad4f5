/* Unit tests of the mapped log writer (csrc/ds_log.c): records copied into
 * the mapping read back through read(), space is reserved ahead of them, a
 * record past the mapping and every later one are pwritten, a cut stops the
 * mapping, a reservation the filesystem refuses turns into an error code
 * from the write, not a SIGBUS, a prefault populates reserved pages only,
 * and a recycled segment reads as zeros and is written again from offset 0
 * (one with a pwritten record, a cut or no mapping is refused).
 *
 * Built and run by tests/test_csrc.py (with ASan/UBSan where available):
 *   cc -std=c11 -Wall -Wextra -Werror -Icsrc csrc/tests/test_log.c csrc/ds_log.c
 * The last line printed is "N passed, M failed". It writes small files in
 * $TMPDIR (or /tmp) and removes them.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* mincore() */

#include "../ds_log.h"

#include "check.h"
#include "tempfile.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static long long file_size(int fd)
{
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    return (long long)st.st_size;
}

/* Writes a record of ``n`` bytes of ``fill`` at ``*end`` and checks it reads back. */
static int put(ds_log *l, uint64_t *end, size_t n, char fill)
{
    char buf[4096], back[4096];
    CHECK(n <= sizeof buf);
    memset(buf, fill, n);
    int rc = ds_log_write(l, buf, n, *end);
    if (rc == 0) {
        CHECK_EQ(pread(l->fd, back, n, (off_t)*end), (long long)n);
        CHECK(memcmp(buf, back, n) == 0);
        *end += n;
    }
    return rc;
}

static void test_mapped_writes(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log l;
    ds_log_init(&l, fd, 1 << 20, 64 << 10);
    CHECK(l.base != NULL);
    uint64_t end = 0;
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ(put(&l, &end, 300, (char)('a' + i % 26)), 0);
    }
    CHECK_EQ(l.mapped_writes, 1000);
    /* Reserved a chunk ahead, never past the mapping; the file's size is what was reserved. */
    CHECK(l.reserved >= end && l.reserved <= end + (64 << 10));
    CHECK_EQ(file_size(fd), (long long)l.reserved);
    /* Past the reserved records the file reads as zeros (a reader stops there). */
    char z[16];
    CHECK_EQ(pread(fd, z, sizeof z, (off_t)end), (long long)sizeof z);
    for (size_t i = 0; i < sizeof z; i++) {
        CHECK_EQ(z[i], 0);
    }
    ds_log_release(&l);
    CHECK(l.base == NULL);
    close(fd);
    unlink(path);
}

static void test_past_the_mapping(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log l;
    ds_log_init(&l, fd, 8192, 4096);
    uint64_t end = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(put(&l, &end, 1000, 'm'), 0); /* 8,000 bytes: all mapped */
    }
    CHECK_EQ(l.mapped_writes, 8);
    CHECK_EQ(put(&l, &end, 1000, 'p'), 0); /* would cross the mapping's end: pwritten whole */
    CHECK_EQ(put(&l, &end, 100, 'q'), 0);
    CHECK_EQ(l.mapped_writes, 8);
    CHECK_EQ(file_size(fd), (long long)end);
    ds_log_release(&l);
    close(fd);
    unlink(path);
}

static void test_span(void)
{
    /* A record built in place: the span is inside the mapping, reserved,
     * counted; past the mapping there is none (the caller pwrites). */
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log l;
    ds_log_init(&l, fd, 8192, 4096);
    char *p = ds_log_span(&l, 100, 50);
    CHECK(p == l.base + 100);
    CHECK(l.reserved >= 150);
    memset(p, 's', 50);
    char back[50];
    CHECK_EQ(pread(fd, back, sizeof back, 100), 50);
    CHECK(memcmp(back, p, sizeof back) == 0);
    CHECK_EQ(l.mapped_writes, 1);
    CHECK(ds_log_span(&l, 8000, 200) == NULL);
    CHECK_EQ(l.mapped_writes, 1);
    ds_log_release(&l);
    CHECK(ds_log_span(&l, 0, 10) == NULL); /* released: nothing is mapped */
    close(fd);
    unlink(path);
}

static void test_unmapped(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log l;
    ds_log_init(&l, fd, 0, 4096);
    CHECK(l.base == NULL);
    uint64_t end = 0;
    CHECK_EQ(put(&l, &end, 200, 'u'), 0);
    CHECK_EQ(put(&l, &end, 200, 'v'), 0);
    CHECK_EQ(l.mapped_writes, 0);
    CHECK_EQ(file_size(fd), 400);
    ds_log_release(&l);
    close(fd);
    unlink(path);
}

static void test_cut(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log l;
    ds_log_init(&l, fd, 1 << 20, 64 << 10);
    uint64_t end = 0;
    CHECK_EQ(put(&l, &end, 500, 'a'), 0);
    CHECK_EQ(put(&l, &end, 500, 'b'), 0);
    CHECK_EQ(ds_log_cut(&l, 500), 0); /* the second record was torn: cut it off */
    CHECK_EQ(file_size(fd), 500);
    end = 500;
    CHECK_EQ(put(&l, &end, 300, 'c'), 0); /* past the cut: pwritten, no store to a page past the end */
    CHECK_EQ(l.mapped_writes, 2);
    CHECK_EQ(file_size(fd), 800);
    ds_log_release(&l);
    close(fd);
    unlink(path);
}

static void test_refused_reservation(void)
{
    /* A file size limit makes posix_fallocate fail as a full disk would: the
     * writes below it succeed, the one past it reports the error. */
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    struct rlimit old, lim;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 100 << 10;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ds_log l;
    ds_log_init(&l, fd, 1 << 20, 64 << 10);
    uint64_t end = 0;
    int rc = 0;
    while (rc == 0 && end < (1 << 20)) {
        rc = put(&l, &end, 1000, 'r');
    }
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
    CHECK_EQ(rc, EFBIG);
    CHECK(end >= 64 << 10 && end <= 100 << 10); /* the first chunk was mapped; writes went on to the limit */
    CHECK(l.mapped_writes > 0);
    ds_log_release(&l);
    close(fd);
    unlink(path);
}

/* How many of the mapping's pages [from, to) are in the page cache. */
static long resident(const ds_log *l, long from, long to)
{
    long page = sysconf(_SC_PAGESIZE), n = 0;
    unsigned char vec[1024];
    CHECK(to - from <= (long)sizeof vec);
    CHECK_EQ(mincore(l->base + from * page, (size_t)(to - from) * (size_t)page, vec), 0);
    for (long i = 0; i < to - from; i++) {
        n += vec[i] & 1;
    }
    return n;
}

static void test_prefault(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    long page = sysconf(_SC_PAGESIZE);
    ds_log l;
    ds_log_init(&l, fd, 1 << 20, 64 << 10);
    uint64_t end = 0;
    CHECK_EQ(put(&l, &end, 100, 'p'), 0); /* reserves up to 100 bytes + 64 KiB */
    long reserved_pages = (long)(l.reserved / (uint64_t)page);
    CHECK_EQ(resident(&l, 1, reserved_pages), 0); /* reserved, never touched */
    int rc = ds_log_prefault(&l, 100, 8 * (uint64_t)page);
    if (rc == EINVAL) {
        printf("prefault: this kernel predates MADV_POPULATE_WRITE; its checks skipped\n");
    } else {
        CHECK_EQ(rc, 0);
        CHECK_EQ(resident(&l, 0, 8), 8); /* from the page holding offset 100 */
        CHECK_EQ(resident(&l, 9, reserved_pages), 0);
        /* Whole pages populated so far: the partial ninth is asked for again. */
        CHECK_EQ(l.populated, 8 * (uint64_t)page);
        CHECK_EQ(ds_log_prefault(&l, 0, 4 * (uint64_t)page), 0);
        CHECK_EQ(l.populated, 8 * (uint64_t)page); /* nothing new asked for: no walk, no move back */
        /* Asked far past the reservation: the reserved pages only, no SIGBUS,
         * the file no longer. */
        long long size = file_size(fd);
        CHECK_EQ(ds_log_prefault(&l, 0, 1 << 30), 0);
        CHECK_EQ(resident(&l, 0, reserved_pages), reserved_pages);
        CHECK_EQ(file_size(fd), size);
        char zero = 'x', back[100];
        CHECK_EQ(pread(fd, &zero, 1, 5000), 1);
        CHECK(zero == 0); /* contents unchanged: still zeros */
        CHECK_EQ(pread(fd, back, 100, 0), 100);
        CHECK(back[0] == 'p' && back[99] == 'p');
        /* Cut short: nothing past the cut is asked for. */
        CHECK_EQ(ds_log_cut(&l, (uint64_t)page), 0);
        CHECK(l.populated <= (uint64_t)page);
        CHECK_EQ(ds_log_prefault(&l, 0, 1 << 20), 0);
        CHECK_EQ(file_size(fd), page);
    }
    ds_log_release(&l);
    CHECK_EQ(ds_log_prefault(&l, 0, 1 << 20), 0); /* released: nothing to do */
    close(fd);
    unlink(path);
}

/* Whether the file's bytes [from, to) are all zero. */
static int zeros(int fd, long long from, long long to)
{
    char buf[4096];
    while (from < to) {
        size_t n = to - from < (long long)sizeof buf ? (size_t)(to - from) : sizeof buf;
        CHECK_EQ(pread(fd, buf, n, (off_t)from), (long long)n);
        for (size_t i = 0; i < n; i++) {
            if (buf[i] != 0) {
                return 0;
            }
        }
        from += (long long)n;
    }
    return 1;
}

static void test_recycle(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log l;
    ds_log_init(&l, fd, 1 << 20, 64 << 10);
    /* Laps of fewer and fewer records: after each recycling the whole file
     * reads as zeros, and its size and reservation stay. */
    for (int lap = 0; lap < 3; lap++) {
        uint64_t end = 0;
        for (int i = 0; i < 900 - 300 * lap; i++) {
            CHECK_EQ(put(&l, &end, 300 + (size_t)lap, (char)('a' + (i + lap) % 26)), 0);
        }
        CHECK_EQ(l.high, end);
        CHECK_EQ(l.mapped_writes, (uint64_t)(900 - 300 * lap));
        long long size = file_size(fd);
        uint64_t reserved = l.reserved;
        CHECK(!zeros(fd, 0, (long long)end));
        CHECK(zeros(fd, (long long)end, size)); /* past the records: zeros, from the last lap's recycling */
        CHECK_EQ(ds_log_recycle(&l), 0);
        CHECK(zeros(fd, 0, size));
        CHECK_EQ(file_size(fd), size);
        CHECK_EQ(l.reserved, reserved);
        CHECK_EQ(l.mapped_writes, 0);
        CHECK_EQ(l.high, 0);
        CHECK_EQ(l.populated, 0);
    }
    /* A record built in place counts as written too. */
    char *p = ds_log_span(&l, 0, 64);
    CHECK(p != NULL);
    memset(p, 's', 64);
    CHECK_EQ(l.high, 64);
    CHECK_EQ(ds_log_recycle(&l), 0);
    CHECK(zeros(fd, 0, file_size(fd)));
    ds_log_release(&l);
    CHECK_EQ(ds_log_recycle(&l), EINVAL); /* released: no mapping */
    close(fd);
    unlink(path);
}

static void test_recycle_refused(void)
{
    /* A segment with bytes the mapping does not hold, or whose mapping was
     * cut short, is not recycled: nothing of it changes. */
    char path[512];
    uint64_t end;
    ds_log l;
    int fd = temp_file(path, sizeof path, "ds_log");
    ds_log_init(&l, fd, 8192, 4096);
    end = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(put(&l, &end, 1000, 'm'), 0);
    }
    CHECK_EQ(put(&l, &end, 1000, 'p'), 0); /* past the mapping: pwritten */
    CHECK_EQ(ds_log_recycle(&l), EINVAL);
    CHECK(!zeros(fd, 0, 1) && !zeros(fd, 8000, 8001));
    CHECK_EQ(l.high, end);
    ds_log_release(&l);
    close(fd);
    unlink(path);

    fd = temp_file(path, sizeof path, "ds_log");
    ds_log_init(&l, fd, 1 << 20, 64 << 10);
    end = 0;
    CHECK_EQ(put(&l, &end, 500, 'a'), 0);
    CHECK_EQ(ds_log_cut(&l, 500), 0);
    CHECK_EQ(ds_log_recycle(&l), EINVAL);
    CHECK(!zeros(fd, 0, 1));
    ds_log_release(&l);
    close(fd);
    unlink(path);

    fd = temp_file(path, sizeof path, "ds_log");
    ds_log_init(&l, fd, 0, 4096);
    end = 0;
    CHECK_EQ(put(&l, &end, 200, 'u'), 0);
    CHECK_EQ(ds_log_recycle(&l), EINVAL);
    ds_log_release(&l);
    close(fd);
    unlink(path);
}

int main(void)
{
    test_recycle();
    test_recycle_refused();
    test_prefault();
    test_mapped_writes();
    test_past_the_mapping();
    test_span();
    test_unmapped();
    test_cut();
    test_refused_reservation();
    return check_report();
}
