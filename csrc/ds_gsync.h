/* A group fdatasync: one background thread syncs an append-only file for
 * every writer, so that a writer only appends and waits.
 *
 * Writers append records to the file (under their own lock), tell the syncer
 * how far the file now goes (ds_gsync_appended), and wait for an fdatasync
 * that covers their record (ds_gsync_wait). The syncer thread runs one
 * fdatasync at a time, for everything appended when it started, and starts
 * the next as soon as one returns if a writer waits for a record it did not
 * cover: every writer that appended during a sync shares the next one. An
 * append nobody waits for (yet) starts no fdatasync: a batch that appends
 * several records and then waits for the last gets one.
 *
 * A writer that finds no fdatasync running runs it itself (a lone writer pays
 * no hand-off); when one returns and writers wait for records it did not
 * cover, the thread runs the next at once. Why in C, with a thread: when the
 * fdatasync was run by one of the waiting Python threads, the next one could
 * only start once that thread had been woken and had taken the GIL back
 * (benches/bench_core.py --only d measures the difference: docs/benchmarks.md).
 * Nothing here takes the GIL. A writer woken by an fdatasync's return reads the
 * published position and goes back without taking the mutex (on Linux, where
 * it sleeps on a futex word): a herd of writers woken together does not
 * queue on it.
 *
 * Positions are logical: bytes appended since the syncer was made, across
 * file switches (ds_gsync_switch), so that a writer's mark stays comparable
 * after the journal moved on to a new segment.
 *
 * A failed fdatasync is sticky (fail-stop): the kernel may have dropped the
 * pages it could not write, so a later fdatasync that succeeds would prove
 * nothing about them. Every later wait returns the first error.
 */
#ifndef DS_GSYNC_H
#define DS_GSYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct ds_gsync {
    pthread_mutex_t mu;
    pthread_cond_t work; /* the thread waits on it: writers wait for a next fdatasync, or stop */
    /* Writers sleep until done[n & 1] changes: the n-th fdatasync returned (or
     * one failed, or the thread exited). A futex word on Linux; elsewhere
     * word_mu and word_cond carry the wake-ups (unused on Linux). */
    _Atomic uint32_t done[2];
    pthread_mutex_t word_mu;
    pthread_cond_t word_cond;
    pthread_t thread;
    int fd;              /* the file the next fdatasync covers */
    int err;             /* errno of the first failed fdatasync, 0 if none */
    int stop;            /* ds_gsync_stop was called */
    int running;         /* the thread was started and not joined */
    int exited;          /* the thread returned (stopped, or an fdatasync failed) */
    int syncing;         /* an fdatasync is running (in the thread or a writer) */
    /* Logical end of what writers appended: atomic, so that an append
     * (made with the GIL held) never waits for the mutex, which a herd of
     * writers woken by one fdatasync's broadcast contends for. */
    _Atomic uint64_t appended;
    uint64_t requested;  /* the furthest position a writer waits for */
    uint64_t synced;     /* logical end an fdatasync that returned covered */
    /* synced and err as last published under mu, read without it by a woken
     * writer (and by a wait that finds its mark covered already). */
    _Atomic uint64_t synced_pub;
    _Atomic int err_pub;
    uint64_t syncs;      /* fdatasyncs that returned 0 */
    uint64_t started;    /* fdatasyncs started; the running one is the started-th */
    uint64_t target;     /* logical end the running (or last) fdatasync covers */
    uint64_t busy_ns;    /* time spent in fdatasync, summed */
} ds_gsync;

/* Starts the syncer thread for ``fd`` (position 0 is the file's offset 0).
 * Returns 0, or an errno value with nothing left to free. */
int ds_gsync_init(ds_gsync *g, int fd);

/* Writers appended up to logical position ``end`` (never moves it back). */
void ds_gsync_appended(ds_gsync *g, uint64_t end);

/* Blocks until an fdatasync covered logical position ``mark``: returns 0, or
 * the errno of a failed fdatasync (then at once, covered or not), or, at once,
 * EINVAL if nothing was appended at ``mark`` yet (ECANCELED after
 * ds_gsync_stop). Sets *waited to 1 if it had to wait. */
int ds_gsync_wait(ds_gsync *g, uint64_t mark, int *waited);

/* The journal moves on to ``fd``, whose offset 0 is logical position
 * ``base`` (at least everything appended so far): waits until everything
 * appended to the old file is synced, then points later syncs at the new one.
 * Returns 0 or the sticky errno (the switch is made either way). */
int ds_gsync_switch(ds_gsync *g, int fd, uint64_t base);

/* The counters at this moment (read under the mutex); ``busy_ns`` is the
 * time fdatasyncs took, summed (over wall time: how busy the journal kept
 * the disk). */
void ds_gsync_state(ds_gsync *g, uint64_t *appended, uint64_t *synced, uint64_t *syncs, uint64_t *busy_ns);

/* Lets the syncer cover everything appended (waited for or not), stops it and joins it; frees
 * nothing else (ds_gsync_destroy does). Idempotent. */
void ds_gsync_stop(ds_gsync *g);

/* Releases the mutex and conditions (after ds_gsync_stop). */
void ds_gsync_destroy(ds_gsync *g);

#endif
