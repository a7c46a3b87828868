/*
 * test_mutex_wait: waiting for a dist_mutex: timedlock's deadline (one
 * that passes, one already past, one that is not a time), threads of
 * several processes never inside at once, and a waiter that sleeps on
 * pub/sub rather than polling and leaves no channel subscribed.  Against
 * a private redis-server (mutexhelp.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_proxy.h"
#include "testhelp.h"
#include "fixture.h"

#define MUTEX_PROG "test_mutex_wait"
#include "mutexhelp.h"

/* timedlock on m, which another thread holds, with a deadline secs from
 * now (set once the holder has it). */
static struct fx_call timed_vs_holder(dist_mutex_t *m, double secs)
{
    struct timespec dl;
    struct fx_call t;
    struct fx_holder h;

    holder_start(&h, m);
    dl = realtime_in(secs);
    FX_CALL(&t, dist_mutex_timedlock(m, &dl));
    fx_holder_stop(&h);
    return t;
}

static void test_timedlock_timeout(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    struct fx_call t;

    (void)state;
    t = timed_vs_holder(m, 3.0);
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_dbl_range(t.el, 3.0, 3.0 + slack(1.0));
}

/* A deadline in the past: a free lock is taken all the same, a held one
 * gives ETIMEDOUT at once. */
static void test_timedlock_past_deadline(void **state)
{
    struct timespec dl = realtime_in(-10.0);
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    struct fx_call t;

    (void)state;
    assert_int_equal(dist_mutex_timedlock(m, &dl), 0);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(key_exists(name), 0);
    t = timed_vs_holder(m, -10.0);
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_dbl_range(t.el, 0.0, slack(1.0));
}

static void test_timedlock_invalid(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    struct fx_holder h;
    struct timespec dl;
    int rc1, rc2;
    double t0, el;

    (void)state;
    holder_start(&h, m);
    t0 = tu_now();
    dl = fx_bad_deadline(0);
    rc1 = dist_mutex_timedlock(m, &dl);
    dl = fx_bad_deadline(1);
    rc2 = dist_mutex_timedlock(m, &dl);
    el = tu_now() - t0;
    fx_holder_stop(&h);
    assert_int_equal(rc1, EINVAL);
    assert_int_equal(rc2, EINVAL);
    assert_dbl_range(el, 0.0, slack(1.0));

    /* free lock: the deadline is never looked at */
    dl = fx_bad_deadline(0);
    assert_int_equal(dist_mutex_timedlock(m, &dl), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    dl = fx_bad_deadline(1);
    assert_int_equal(dist_mutex_timedlock(m, &dl), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);

    assert_int_equal(dist_mutex_timedlock(m, NULL), EINVAL);
}

/* Threads of several processes on one mutex (4 processes of 2 threads,
 * 100 turns each): never two inside at once (shared memory), and the Redis
 * counter they bump inside is exact (fx_mx_run). */
static void test_mutual_exclusion(void **state)
{
    char name[200];
    const struct fx_mx run = { name, 4, 2, 100, NULL, NULL };
    double t0, el;

    (void)state;
    NAME(name, "m");
    t0 = tu_now();
    fx_mx_run(&run);
    el = tu_now() - t0;
    assert_int_equal(key_exists(name), 0);
    print_message("mutual exclusion: %d lock/unlock in %.2f s\n",
                  run.procs * run.threads * run.iters, el);
}

struct waiter {
    dist_mutex_t *m;
    atomic_int *started, *inside, *acquired;
    int lock_rc, unlock_rc, overlap;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;

    atomic_fetch_add(w->started, 1);
    w->lock_rc = dist_mutex_lock(w->m);
    if (w->lock_rc != 0)
        return NULL;
    atomic_fetch_add(w->acquired, 1);
    if (atomic_fetch_add(w->inside, 1) != 0)
        w->overlap = 1;
    tu_sleep_ms(50);
    atomic_fetch_sub(w->inside, 1);
    w->unlock_rc = dist_mutex_unlock(w->m);
    return NULL;
}

/* Subscribers of chan (testhelp.h). */
#define numsub(chan) pubsub_numsub(&r, chan)

/* Script calls the server has run so far (testhelp.h). */
#define script_calls() script_calls_on(&r)

/* A waiter sleeps on pub/sub and the holder's lease, never polls: waiting
 * 3 s behind a holder costs a handful of script calls, not hundreds. */
static void test_waiting_does_not_poll(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    struct fx_holder h;
    struct oneshot o;
    struct fx_locker la;
    long long before, after;
    double t0, waited;

    (void)state;
    holder_start(&h, m);
    before = script_calls();
    assert_true(before >= 0);
    t0 = tu_now();
    /* a thread blocks in lock(); the holder lets go after 3 s */
    fx_locker_start(&la, m, 0);
    tu_sleep_ms(3000);
    fx_holder_stop(&h);
    fx_locker_join(&la);
    waited = la.t - t0;
    after = script_calls();
    assert_int_equal(la.rc, 0);
    run_oneshot(&o, m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, 0); /* all let go */
    assert_dbl_range(waited, 2.9, 3.0 + slack(1.0));
    /* the holder's unlock, the waiter's first try, its try after
     * subscribing, its try when woken, its unlock: about five.  Polling
     * every 100 ms would be 30 or more. */
    if (after - before > 12)
        fail_msg("waiting 3 s cost %lld script calls", after - before);
}

static void test_no_channels_left(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    char chan[260];
    struct waiter w[3];
    pthread_t th[3];
    atomic_int started = 0, inside = 0, acquired = 0;
    int i, early, subscribed = 0;
    double t0, el;

    (void)state;
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
    assert_int_equal(dist_mutex_lock(m), 0);
    for (i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].m = m;
        w[i].started = &started;
        w[i].inside = &inside;
        w[i].acquired = &acquired;
        w[i].lock_rc = w[i].unlock_rc = -1;
        assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    }
    t0 = tu_now();
    while (tu_now() - t0 < 5.0) {
        if (atomic_load(&started) == 3 && numsub(chan) >= 1) {
            subscribed = 1;
            break;
        }
        tu_sleep_ms(20);
    }
    tu_sleep_ms(300); /* let every waiter get into its wait */
    early = atomic_load(&acquired);
    t0 = tu_now();
    assert_int_equal(dist_mutex_unlock(m), 0);
    for (i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    el = tu_now() - t0;

    assert_true(subscribed); /* the waiters listened on the channel */
    assert_int_equal(early, 0);
    for (i = 0; i < 3; i++) {
        assert_int_equal(w[i].lock_rc, 0);
        assert_int_equal(w[i].unlock_rc, 0);
        assert_int_equal(w[i].overlap, 0);
    }
    /* handed on by release messages, not by the 30 s lease running out */
    assert_dbl_range(el, 0.15, 0.15 + slack(3.0));

    assert_int_equal(channels_left(&r, 3.0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_timedlock_timeout),
        FX_TEST(test_timedlock_past_deadline),
        FX_TEST(test_timedlock_invalid),
        FX_TEST(test_mutual_exclusion),
        FX_TEST(test_no_channels_left),
        FX_TEST(test_waiting_does_not_poll),
    };
    return MUTEX_RUN(tests);
}
