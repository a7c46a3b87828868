/*
 * test_mutex_lease: holds that end without an unlock, and the lease that
 * bounds them: an explicit lease runs out under a waiter, the watchdog
 * renews a hold and stops with a killed holder, dist_mutex_lease_left, and
 * an unlock while the hold's loss is being reported.  Against a private
 * redis-server (mutexhelp.h).
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

#define MUTEX_PROG "test_mutex_lease"
#include "mutexhelp.h"

static void test_lease_expiry(void **state)
{
    dist_mutex_t *m;
    const char *name;
    dist_mutexattr_t a;
    struct fx_holder h;
    double tb, wait;
    int rc_b, rc_b_unlock, calls;
    long long ex;
    unsigned long lease = 0;

    (void)state;
    fx_watch_lost();
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setlease(&a, 2000), 0);
    assert_int_equal(dist_mutexattr_getlease(&a, &lease), 0);
    assert_int_equal(lease, 2000);
    m = fx_mutex("m", &a);
    name = fx_name(m);

    holder_start(&h, m);       /* thread A takes it and keeps it */
    rc_b = dist_mutex_lock(m); /* thread B (main) waits */
    tb = tu_now();
    wait = tb - h.t_locked;
    fx_handshake_release(&h.hs); /* A's unlock, after B took it */
    fx_handshake_join(&h.hs);
    rc_b_unlock = rc_b == 0 ? dist_mutex_unlock(m) : -1;
    calls = fx_lost_calls(NULL);
    dist_set_lost_handler(NULL, NULL);
    fx_dirty = 0;
    ex = key_exists(name);

    assert_int_equal(rc_b, 0);
    /* its 2 s lease ended A's hold: nothing renewed it */
    assert_dbl_range(wait, 1.5, 2.0 + slack(2.0));
    assert_int_equal(h.unlock_rc, EPERM);
    assert_int_equal(rc_b_unlock, 0);
    assert_true(calls >= 1);
    assert_true(fx_lost_last_is(name));
    assert_int_equal(ex, 0);
}

struct prober {
    dist_mutex_t *m;
    int rcs[4];
    int unlocked_rcs[4];
};

static void *prober_main(void *arg)
{
    struct prober *p = arg;
    int i;

    for (i = 0; i < 4; i++) {
        tu_sleep_ms(950);
        p->rcs[i] = dist_mutex_trylock(p->m);
        p->unlocked_rcs[i] = p->rcs[i] == 0 ? dist_mutex_unlock(p->m) : -1;
    }
    return NULL;
}

static void test_watchdog_renews(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    struct prober p;
    pthread_t th;
    long long pttl, min_pttl = 1LL << 40, ex;
    double t0;
    int i, rc;

    (void)state;
    fx_dirty = 1;
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    t0 = tu_now();
    pttl = tu_cmd_int(&r, "PTTL", name, NULL);
    assert_in_range(pttl, 1, 1500); /* the watchdog lease, not 30 s */

    memset(&p, 0, sizeof p);
    p.m = m;
    assert_int_equal(pthread_create(&th, NULL, prober_main, &p), 0);
    while (tu_now() - t0 < 4.0) {
        pttl = tu_cmd_int(&r, "PTTL", name, NULL);
        if (pttl < min_pttl)
            min_pttl = pttl;
        tu_sleep_ms(100);
    }
    pthread_join(th, NULL);
    rc = dist_mutex_unlock(m);
    dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS);
    fx_dirty = 0;
    ex = key_exists(name);

    if (min_pttl <= 0)
        fail_msg("the lock's PTTL fell to %lld while held", min_pttl);
    for (i = 0; i < 4; i++)
        assert_int_equal(p.rcs[i], EBUSY);
    assert_int_equal(rc, 0);
    assert_int_equal(ex, 0);
}

static int lock_of(void *m)
{
    return dist_mutex_lock(m);
}

static void test_sigkill_holder(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    int st = 0, rc_try, rc_lock;
    pid_t pid;
    double t0, el;

    (void)state;
    pid = fx_fork_holder(lock_of, m);
    /* Longer than the 1.5 s lease: only the child's watchdog keeps it. */
    tu_sleep_ms(2000);
    rc_try = dist_mutex_trylock(m);
    if (rc_try == 0)
        dist_mutex_unlock(m);

    kill(pid, SIGKILL);
    t0 = tu_now();
    assert_int_equal(waitpid(pid, &st, 0), pid);
    rc_lock = dist_mutex_lock(m);
    el = tu_now() - t0;
    if (rc_lock == 0)
        assert_int_equal(dist_mutex_unlock(m), 0);
    dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS);

    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(rc_try, EBUSY);
    assert_int_equal(rc_lock, 0);
    assert_dbl_range(el, 0.0, 1.5 + slack(1.5));
    fx_dirty = 0;
}

static double secs_of(const struct timespec *ts)
{
    return (double)ts->tv_sec + (double)ts->tv_nsec / 1e9;
}

/* A lost handler that takes its time (its first call: entered, then
 * slow_handler_ms later done). */
#define SLOW_HANDLER_MS 500
static atomic_int slow_entered, slow_done;

static void slow_on_lost(const char *name, void *arg)
{
    fx_on_lost(name, arg);
    if (atomic_exchange(&slow_entered, 1) == 0) {
        tu_sleep_ms(SLOW_HANDLER_MS);
        atomic_store(&slow_done, 1);
    }
}

/* An unlock of a hold whose loss the renewal thread is reporting (its
 * handler call under way) says EPERM after that call has returned, and
 * does not call the handler again: the report of an unlock's EPERM is
 * made before the unlock returns.  It once returned at once, while the
 * report could still be held up for as long as the reporting thread was
 * (a process stopped between the decision and the call: the Sentinel
 * torture run's "EPERM without lost handler"). */
static void test_unlock_while_loss_reported(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    double end;
    int entered, unlock_rc, done;

    (void)state;
    fx_dirty = 1;
    fx_lost_reset();
    atomic_store(&slow_entered, 0);
    atomic_store(&slow_done, 0);
    assert_int_equal(dist_set_watchdog_ms(1500), 0); /* renewed each 0.5 s */
    assert_int_equal(dist_set_lost_handler(slow_on_lost, NULL), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_cmd_int(&r, "DEL", name, NULL), 1);
    end = tu_now() + 10.0;
    while (!(entered = atomic_load(&slow_entered)) && tu_now() < end)
        tu_sleep_ms(5);
    unlock_rc = dist_mutex_unlock(m);
    done = atomic_load(&slow_done);
    end = tu_now() + 10.0;
    while (!atomic_load(&slow_done) && tu_now() < end)
        tu_sleep_ms(20);
    dist_set_lost_handler(NULL, NULL);
    fx_dirty = 0;
    assert_true(entered);
    assert_int_equal(unlock_rc, EPERM);
    if (!done)
        fail_msg("the unlock said EPERM while the lost handler's call for "
                 "its hold had not returned");
    assert_int_equal(fx_lost_calls(name), 1);
}

/* What dist_mutex_lease_left said (left) of a hold whose last acquire was
 * sent after t_sent: at most full, the lease less the margin; at least that
 * less the time since t_sent, however slow the machine (2 ms: the library
 * counts whole milliseconds). */
static void assert_left_since(const struct timespec *left, double full,
                              double t_sent)
{
    double since = tu_now() - t_sent;

    assert_dbl_range(secs_of(left), full - since - 0.002, full);
}

/* dist_mutex_lease_left: EPERM with a zero left when not held; while held,
 * the send of the last acknowledged acquire or renewal + the lease - the
 * margin (a hundredth of the lease + dist_set_lease_margin_ms), minus now:
 * at most that, and just after an acquire no less than that minus the time
 * since its send (assert_left_since); a reentrant
 * lock's acquire moves it forward (it sets the lease again); renewals keep
 * it from running out.  An explicit lease gives the same bound from its
 * lock call, nothing renews it, and past the bound it is EPERM while the
 * lost handler is not called (the unlock asks the server). */
static void test_lease_left(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL), *leased;
    const char *name = fx_name(m);
    dist_mutexattr_t at;
    struct timespec left, left2;
    double t0;

    (void)state;
    fx_watch_lost();
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_set_lease_margin_ms(200), 0);
    left.tv_sec = 7;
    assert_int_equal(dist_mutex_lease_left(m, &left), EPERM);
    assert_true(left.tv_sec == 0 && left.tv_nsec == 0);
    assert_int_equal(dist_mutex_lease_left(m, NULL), EINVAL);

    t0 = tu_now();
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lease_left(m, &left), 0);
    assert_left_since(&left, 1.5 - 0.015 - 0.2, t0);
    /* the second acquire sets the lease again, from its own send */
    tu_sleep_ms(100);
    assert_int_equal(dist_mutex_lease_left(m, &left), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lease_left(m, &left2), 0);
    if (secs_of(&left2) <= secs_of(&left))
        fail_msg("a reentrant lock left %.3f s, %.3f s before it",
                 secs_of(&left2), secs_of(&left));
    assert_int_equal(dist_mutex_unlock(m), 0);
    /* two leases later the renewals have kept it */
    t0 = tu_now();
    while (tu_now() - t0 < 3.0) {
        assert_int_equal(dist_mutex_lease_left(m, &left), 0);
        assert_dbl_range(secs_of(&left), 0.0, 1.285);
        tu_sleep_ms(50);
    }
    /* no fixed part: the margin is the hundredth */
    assert_int_equal(dist_set_lease_margin_ms(0), 0);
    t0 = tu_now();
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lease_left(m, &left), 0);
    assert_left_since(&left, 1.5 - 0.015, t0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_set_lease_margin_ms(200), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_lease_left(m, &left), EPERM);
    assert_true(left.tv_sec == 0 && left.tv_nsec == 0);

    /* an explicit lease of 1 s: surely ours for 1000 - 10 - 200 ms */
    assert_int_equal(dist_mutexattr_init(&at), 0);
    assert_int_equal(dist_mutexattr_setlease(&at, 1000), 0);
    leased = fx_mutex("leased", &at);
    t0 = tu_now();
    assert_int_equal(dist_mutex_lock(leased), 0);
    assert_int_equal(dist_mutex_lease_left(leased, &left), 0);
    assert_left_since(&left, 1.0 - 0.01 - 0.2, t0);
    while (tu_now() - t0 < 1.2)
        tu_sleep_ms(20);
    assert_int_equal(dist_mutex_lease_left(leased, &left), EPERM);
    assert_int_equal(fx_lost_calls(NULL), 0);
    assert_int_equal(dist_mutex_unlock(leased), EPERM); /* it expired */
    assert_int_equal(fx_lost_calls(fx_name(leased)), 1);
    assert_int_equal(fx_lost_calls(name), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_lease_expiry),
        FX_TEST(test_watchdog_renews),
        FX_TEST(test_sigkill_holder),
        FX_TEST(test_lease_left),
        FX_TEST(test_unlock_while_loss_reported),
    };
    return MUTEX_RUN(tests);
}
