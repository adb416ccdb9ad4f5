#if defined(__linux__) && !defined(DS_GSYNC_NO_FUTEX)
#define _GNU_SOURCE /* syscall() */
#define DS_FUTEX 1
#else
#define _POSIX_C_SOURCE 200809L
#endif

#include "ds_gsync.h"

#include <errno.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#ifdef DS_FUTEX
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The words writers sleep on (done[n & 1] changes when the n-th fdatasync
 * returns). A futex on Linux: a woken writer checks the published position
 * and returns without the mutex, so a herd woken by one fdatasync does not
 * queue on it (each unlock with a waiter is a futex wake, each wait for it a
 * context switch). Elsewhere a mutex and condition of their own. */
static void word_wait(ds_gsync *g, _Atomic uint32_t *w, uint32_t seen)
{
#ifdef DS_FUTEX
    (void)g;
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
    pthread_mutex_lock(&g->word_mu);
    while (atomic_load(w) == seen) {
        pthread_cond_wait(&g->word_cond, &g->word_mu);
    }
    pthread_mutex_unlock(&g->word_mu);
#endif
}

static void word_bump(ds_gsync *g, _Atomic uint32_t *w)
{
    atomic_fetch_add(w, 1);
#ifdef DS_FUTEX
    (void)g;
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    pthread_mutex_lock(&g->word_mu);
    pthread_cond_broadcast(&g->word_cond);
    pthread_mutex_unlock(&g->word_mu);
#endif
}

/* One fdatasync for everything appended so far (mu held, none running);
 * returns with mu held again, the result published and the waiters woken. */
static void sync_once(ds_gsync *g)
{
    uint64_t target = atomic_load(&g->appended);
    int fd = g->fd;
    uint64_t n = ++g->started;
    g->target = target;
    g->syncing = 1;
    pthread_mutex_unlock(&g->mu);
    uint64_t t0 = now_ns();
    int rc;
    do {
        rc = fdatasync(fd);
    } while (rc != 0 && errno == EINTR);
    int e = rc == 0 ? 0 : errno;
    uint64_t took = now_ns() - t0;
    pthread_mutex_lock(&g->mu);
    g->busy_ns += took;
    if (e) {
        g->err = e;
    } else if (target > g->synced) {
        g->synced = target;
    }
    if (!e) {
        g->syncs++;
    }
    g->syncing = 0;
    atomic_store(&g->synced_pub, g->synced);
    atomic_store(&g->err_pub, g->err);
    word_bump(g, &g->done[n & 1]);
    if (e) {
        word_bump(g, &g->done[(n + 1) & 1]);
    }
}

/* The word a writer waiting for ``mark`` sleeps on while a sync runs: the
 * running one's if it covers the mark, else the next one's, so that a return
 * wakes only the writers it covered, not also those who would only go back
 * to sleep until the next. Read under mu, so no return is missed. */
static _Atomic uint32_t *done_for(ds_gsync *g, uint64_t mark)
{
    return &g->done[(mark <= g->target ? g->started : g->started + 1) & 1];
}

/* Sleeps until the sync that covers ``mark`` returns (mu held, released
 * meanwhile, held again on return; may return early: callers loop). */
static void await_sync(ds_gsync *g, uint64_t mark)
{
    _Atomic uint32_t *w = done_for(g, mark);
    uint32_t seen = atomic_load(w);
    pthread_mutex_unlock(&g->mu);
    word_wait(g, w, seen);
    pthread_mutex_lock(&g->mu);
}

static void wake_all(ds_gsync *g)
{
    atomic_store(&g->err_pub, g->err);
    word_bump(g, &g->done[0]);
    word_bump(g, &g->done[1]);
}

static void *syncer(void *arg)
{
    ds_gsync *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && !g->err && (g->requested <= g->synced || g->syncing)) {
            pthread_cond_wait(&g->work, &g->mu);
        }
        if (g->err) {
            break; /* nothing more is acknowledged */
        }
        if (g->stop) {
            while (g->syncing) {
                await_sync(g, g->target);
            }
            if (!g->err && atomic_load(&g->appended) > g->synced) {
                sync_once(g);
            }
            break;
        }
        sync_once(g);
    }
    g->stop = 1;
    g->exited = 1;
    wake_all(g);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int ds_gsync_init(ds_gsync *g, int fd)
{
    int e;
    g->fd = fd;
    g->err = 0;
    g->stop = 0;
    g->running = 0;
    g->exited = 0;
    g->syncing = 0;
    atomic_init(&g->appended, 0);
    atomic_init(&g->synced_pub, 0);
    atomic_init(&g->err_pub, 0);
    atomic_init(&g->done[0], 0);
    atomic_init(&g->done[1], 0);
    g->requested = g->synced = g->syncs = g->started = g->target = g->busy_ns = 0;
    if ((e = pthread_mutex_init(&g->mu, NULL)) != 0) {
        return e;
    }
    if ((e = pthread_cond_init(&g->work, NULL)) != 0) {
        goto no_work;
    }
#ifndef DS_FUTEX
    if ((e = pthread_mutex_init(&g->word_mu, NULL)) != 0) {
        goto no_word_mu;
    }
    if ((e = pthread_cond_init(&g->word_cond, NULL)) != 0) {
        goto no_word_cond;
    }
#endif
    if ((e = pthread_create(&g->thread, NULL, syncer, g)) != 0) {
        goto no_thread;
    }
    g->running = 1;
    return 0;
no_thread:
#ifndef DS_FUTEX
    pthread_cond_destroy(&g->word_cond);
no_word_cond:
    pthread_mutex_destroy(&g->word_mu);
no_word_mu:
#endif
    pthread_cond_destroy(&g->work);
no_work:
    pthread_mutex_destroy(&g->mu);
    return e;
}

void ds_gsync_appended(ds_gsync *g, uint64_t end)
{
    uint64_t seen = atomic_load(&g->appended);
    while (end > seen && !atomic_compare_exchange_weak(&g->appended, &seen, end)) {
    }
}

int ds_gsync_wait(ds_gsync *g, uint64_t mark, int *waited)
{
    int rc;
    *waited = 0;
    if (atomic_load(&g->synced_pub) >= mark && !atomic_load(&g->err_pub)) {
        return 0; /* covered already */
    }
    pthread_mutex_lock(&g->mu);
    if (mark > atomic_load(&g->appended) && !g->err) {
        pthread_mutex_unlock(&g->mu);
        return g->stop ? ECANCELED : EINVAL; /* nothing was appended there: no sync will cover it */
    }
    if (mark > g->requested) {
        g->requested = mark;
    }
    while (!g->err && g->synced < mark && !g->exited) {
        *waited = 1;
        if (!g->syncing) {
            /* None running: run it here, sparing a hand-off to the thread
             * (a lone writer's latency). */
            sync_once(g);
            continue;
        }
        _Atomic uint32_t *w = done_for(g, mark);
        uint32_t seen = atomic_load(w);
        pthread_mutex_unlock(&g->mu);
        word_wait(g, w, seen);
        if (atomic_load(&g->synced_pub) >= mark && !atomic_load(&g->err_pub)) {
            return 0; /* covered: back without the mutex (whoever ran the sync kicks the thread) */
        }
        pthread_mutex_lock(&g->mu);
    }
    if (g->requested > g->synced && !g->syncing && !g->err) {
        pthread_cond_signal(&g->work); /* writers that came meanwhile: the thread syncs for them */
    }
    rc = g->err ? g->err : g->synced >= mark ? 0 : ECANCELED;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int ds_gsync_switch(ds_gsync *g, int fd, uint64_t base)
{
    int rc;
    pthread_mutex_lock(&g->mu);
    /* Ask for everything appended, waited for or not: while another writer's
     * fdatasync runs, this sleeps until the next one returns, and the next
     * one starts only for what someone asked for. */
    uint64_t end = atomic_load(&g->appended);
    if (end > g->requested) {
        g->requested = end;
    }
    while (!g->err && g->synced < atomic_load(&g->appended) && !g->exited) {
        if (!g->syncing) {
            sync_once(g);
            continue;
        }
        await_sync(g, atomic_load(&g->appended));
    }
    g->fd = fd;
    if (base > atomic_load(&g->appended)) {
        /* Nothing of the new file is appended yet: everything before it counts as synced. */
        atomic_store(&g->appended, base);
        g->requested = g->synced = base;
        atomic_store(&g->synced_pub, base);
    }
    rc = g->err;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void ds_gsync_state(ds_gsync *g, uint64_t *appended, uint64_t *synced, uint64_t *syncs, uint64_t *busy_ns)
{
    pthread_mutex_lock(&g->mu);
    *busy_ns = g->busy_ns;
    *appended = atomic_load(&g->appended);
    *synced = g->synced;
    *syncs = g->syncs;
    pthread_mutex_unlock(&g->mu);
}

void ds_gsync_stop(ds_gsync *g)
{
    pthread_mutex_lock(&g->mu);
    int running = g->running;
    g->stop = 1;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->mu);
    if (running) {
        pthread_join(g->thread, NULL);
        pthread_mutex_lock(&g->mu);
        g->running = 0;
        wake_all(g);
        pthread_mutex_unlock(&g->mu);
    }
}

void ds_gsync_destroy(ds_gsync *g)
{
#ifndef DS_FUTEX
    pthread_cond_destroy(&g->word_cond);
    pthread_mutex_destroy(&g->word_mu);
#endif
    pthread_cond_destroy(&g->work);
    pthread_mutex_destroy(&g->mu);
}
