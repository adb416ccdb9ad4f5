/* Unit tests of the group fdatasync thread (csrc/ds_gsync.c): waits return
 * once covered, writers share fdatasyncs, a file switch syncs the old file
 * first, a failed fdatasync is sticky, and stop covers what was appended.
 *
 * Built and run by tests/test_csrc.py (with ASan/UBSan where available):
 *   cc -std=c11 -pthread -Wall -Wextra -Werror -Icsrc csrc/tests/test_gsync.c csrc/ds_gsync.c
 * The last line printed is "N passed, M failed". It writes small files in
 * $TMPDIR (or /tmp) and removes them.
 */
#define _POSIX_C_SOURCE 200809L

#include "../ds_gsync.h"

#include "check.h"
#include "tempfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void append(int fd, ds_gsync *g, uint64_t *end, size_t n)
{
    char buf[256];
    memset(buf, 'x', sizeof buf);
    CHECK(n <= sizeof buf);
    CHECK_EQ(write(fd, buf, n), (long long)n);
    *end += n;
    ds_gsync_appended(g, *end);
}

static void test_wait_covers(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_gsync");
    ds_gsync g;
    CHECK_EQ(ds_gsync_init(&g, fd), 0);
    uint64_t end = 0;
    int waited = -1;
    CHECK_EQ(ds_gsync_wait(&g, 0, &waited), 0); /* nothing appended: covered at once */
    CHECK_EQ(waited, 0);
    CHECK_EQ(ds_gsync_wait(&g, 1, &waited), EINVAL); /* beyond what was appended */
    append(fd, &g, &end, 100);
    CHECK_EQ(ds_gsync_wait(&g, end, &waited), 0);
    uint64_t a, s, n, busy;
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(a, 100);
    CHECK_EQ_U64(s, 100);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ(ds_gsync_wait(&g, end, &waited), 0); /* covered already: no new fdatasync */
    CHECK_EQ(waited, 0);
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(n, 1);
    ds_gsync_stop(&g);
    ds_gsync_stop(&g); /* idempotent */
    ds_gsync_destroy(&g);
    close(fd);
    unlink(path);
}

enum { WRITERS = 8, PER_WRITER = 200 };

struct shared {
    int fd;
    ds_gsync *g;
    pthread_mutex_t lock; /* the journal's append lock */
    uint64_t end;
    int failures;
};

static void *writer(void *arg)
{
    struct shared *sh = arg;
    for (int i = 0; i < PER_WRITER; i++) {
        pthread_mutex_lock(&sh->lock);
        char rec[40];
        memset(rec, 'r', sizeof rec);
        if (write(sh->fd, rec, sizeof rec) != (ssize_t)sizeof rec) {
            sh->failures++;
        }
        sh->end += sizeof rec;
        uint64_t mark = sh->end;
        ds_gsync_appended(sh->g, mark);
        pthread_mutex_unlock(&sh->lock);
        int waited;
        uint64_t a, s, n, busy;
        if (ds_gsync_wait(sh->g, mark, &waited) != 0) {
            sh->failures++;
        }
        ds_gsync_state(sh->g, &a, &s, &n, &busy);
        if (s < mark) {
            sh->failures++; /* returned before a sync covered the record */
        }
    }
    return NULL;
}

static void test_writers_share_syncs(void)
{
    char path[512];
    struct shared sh = {.fd = temp_file(path, sizeof path, "ds_gsync"), .end = 0, .failures = 0};
    ds_gsync g;
    sh.g = &g;
    pthread_mutex_init(&sh.lock, NULL);
    CHECK_EQ(ds_gsync_init(&g, sh.fd), 0);
    pthread_t t[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        pthread_create(&t[i], NULL, writer, &sh);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(t[i], NULL);
    }
    CHECK_EQ(sh.failures, 0);
    uint64_t a, s, n, busy;
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(a, (uint64_t)WRITERS * PER_WRITER * 40);
    CHECK_EQ_U64(s, a);
    /* Each writer waits for its own record: with 8 of them, fdatasyncs are
     * shared (at most one per record, and in practice far fewer). */
    CHECK(n >= 1 && n <= (uint64_t)WRITERS * PER_WRITER);
    printf("writers: %d records, %llu fdatasyncs\n", WRITERS * PER_WRITER, (unsigned long long)n);
    ds_gsync_stop(&g);
    ds_gsync_destroy(&g);
    pthread_mutex_destroy(&sh.lock);
    close(sh.fd);
    unlink(path);
}

static void test_switch_syncs_the_old_file_first(void)
{
    char p1[512], p2[512];
    int f1 = temp_file(p1, sizeof p1, "ds_gsync"), f2 = temp_file(p2, sizeof p2, "ds_gsync");
    ds_gsync g;
    CHECK_EQ(ds_gsync_init(&g, f1), 0);
    uint64_t end = 0;
    append(f1, &g, &end, 50); /* appended, nobody waits: no fdatasync yet */
    nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000}, NULL);
    uint64_t a, s, n, busy;
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(n, 0);
    CHECK_EQ(ds_gsync_switch(&g, f2, end), 0);
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(s, 50); /* the old file's bytes were synced before the switch returned */
    uint64_t end2 = end;
    append(f2, &g, &end2, 30);
    int waited;
    CHECK_EQ(ds_gsync_wait(&g, end2, &waited), 0);
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(s, 80); /* logical positions carry on over the switch */
    /* A base beyond what was appended (a skipped range) counts as synced. */
    CHECK_EQ(ds_gsync_switch(&g, f1, 1000), 0);
    CHECK_EQ(ds_gsync_wait(&g, 1000, &waited), 0);
    CHECK_EQ(waited, 0);
    ds_gsync_stop(&g);
    ds_gsync_destroy(&g);
    close(f1);
    close(f2);
    unlink(p1);
    unlink(p2);
}

static void test_a_failed_fdatasync_is_sticky(void)
{
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    ds_gsync g;
    CHECK_EQ(ds_gsync_init(&g, pipefd[1]), 0); /* fdatasync of a pipe fails: EINVAL */
    uint64_t end = 0;
    append(pipefd[1], &g, &end, 10);
    int waited;
    CHECK_EQ(ds_gsync_wait(&g, end, &waited), EINVAL);
    CHECK_EQ(ds_gsync_wait(&g, 0, &waited), EINVAL); /* even a covered mark: fail-stop */
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_gsync");
    CHECK_EQ(ds_gsync_switch(&g, fd, end), EINVAL); /* a good file later proves nothing */
    append(fd, &g, &end, 10);
    CHECK_EQ(ds_gsync_wait(&g, end, &waited), EINVAL);
    uint64_t a, s, n, busy;
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(n, 0);
    ds_gsync_stop(&g);
    ds_gsync_destroy(&g);
    close(fd);
    unlink(path);
    close(pipefd[0]);
    close(pipefd[1]);
}

static void test_stop_covers_what_was_appended(void)
{
    char path[512];
    int fd = temp_file(path, sizeof path, "ds_gsync");
    ds_gsync g;
    CHECK_EQ(ds_gsync_init(&g, fd), 0);
    uint64_t end = 0;
    append(fd, &g, &end, 64);
    ds_gsync_stop(&g);
    uint64_t a, s, n, busy;
    ds_gsync_state(&g, &a, &s, &n, &busy);
    CHECK_EQ_U64(s, 64);
    int waited;
    CHECK_EQ(ds_gsync_wait(&g, 64, &waited), 0);
    CHECK_EQ(ds_gsync_wait(&g, 65, &waited), ECANCELED); /* never appended: no sync will come */
    append(fd, &g, &end, 1); /* appended after the stop: refused, not waited for forever */
    CHECK_EQ(ds_gsync_wait(&g, 65, &waited), ECANCELED);
    ds_gsync_destroy(&g);
    close(fd);
    unlink(path);
}

struct churn {
    int fd;
    ds_gsync *g;
    pthread_mutex_t *lock; /* the journal's append lock */
    uint64_t *end;
    atomic_int stop;
    int failures;
};

static void *durable_writer(void *arg)
{
    struct churn *c = arg;
    char rec[64];
    memset(rec, 'd', sizeof rec);
    while (!atomic_load(&c->stop)) {
        pthread_mutex_lock(c->lock);
        if (write(c->fd, rec, sizeof rec) != (ssize_t)sizeof rec) {
            c->failures++;
        }
        *c->end += sizeof rec;
        uint64_t mark = *c->end;
        ds_gsync_appended(c->g, mark);
        pthread_mutex_unlock(c->lock);
        int waited;
        if (ds_gsync_wait(c->g, mark, &waited) != 0) {
            c->failures++;
        }
    }
    return NULL;
}

/* Appends nobody waits for (maintenance), then a file switch while another
 * writer's fdatasync runs: the switch must get the rest synced itself (it
 * once slept for an fdatasync nobody had asked for, holding the journal's
 * lock, and every writer hung behind it). A hang fails the test by alarm. */
static void test_a_switch_during_a_sync_covers_unrequested_appends(void)
{
    char p1[512], p2[512];
    int fds[2] = {temp_file(p1, sizeof p1, "ds_gsync"), temp_file(p2, sizeof p2, "ds_gsync")};
    ds_gsync g;
    CHECK_EQ(ds_gsync_init(&g, fds[0]), 0);
    pthread_mutex_t lock;
    pthread_mutex_init(&lock, NULL);
    uint64_t end = 0;
    struct churn c = {.fd = fds[0], .g = &g, .lock = &lock, .end = &end, .stop = 0, .failures = 0};
    pthread_t t;
    pthread_create(&t, NULL, durable_writer, &c);
    alarm(60);
    for (int i = 0; i < 300; i++) {
        pthread_mutex_lock(&lock);
        char rec[32];
        memset(rec, 'm', sizeof rec);
        if (write(c.fd, rec, sizeof rec) != (ssize_t)sizeof rec) {
            c.failures++;
        }
        end += sizeof rec;
        ds_gsync_appended(&g, end); /* maintenance: appended, nobody waits */
        int next = fds[(i + 1) % 2];
        CHECK_EQ(ds_gsync_switch(&g, next, end), 0);
        c.fd = next;
        uint64_t a, s, n, busy;
        ds_gsync_state(&g, &a, &s, &n, &busy);
        CHECK(s >= end); /* everything appended before the switch was synced */
        pthread_mutex_unlock(&lock);
    }
    alarm(0);
    atomic_store(&c.stop, 1);
    pthread_join(t, NULL);
    CHECK_EQ(c.failures, 0);
    ds_gsync_stop(&g);
    ds_gsync_destroy(&g);
    pthread_mutex_destroy(&lock);
    close(fds[0]);
    close(fds[1]);
    unlink(p1);
    unlink(p2);
}

int main(void)
{
    test_a_switch_during_a_sync_covers_unrequested_appends();
    test_wait_covers();
    test_writers_share_syncs();
    test_switch_syncs_the_old_file_first();
    test_a_failed_fdatasync_is_sticky();
    test_stop_covers_what_was_appended();
    return check_report();
}
