/*
 * test_rwlock_lease: dist_rwlock_* holds that end without an unlock,
 * against a private redis-server: a killed reader or waiting writer, each
 * hold's own lease, the watchdog and the lost handler, replies lost on
 * the way, a forked child, calls whose outcome cannot be known.
 *
 * One server for the whole group (tu_redis_start); every test uses fresh
 * lock names (test name + pid).  cmocka is not thread-safe, so worker
 * threads and forked children only record results (variables, semaphores,
 * pipes, exit codes, shared memory) and the main thread asserts.  Timing
 * bounds are generous bounds, never exact timings: they must hold on a
 * loaded 2-core machine.  CLOCK_MONOTONIC is one clock for every process of
 * the machine, so children report the times they saw in shared memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
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

#include "rwhelp.h"

static int rdlock_of(void *rw)
{
    return dist_rwlock_rdlock(rw);
}

/* A reader killed with SIGKILL stops counting when its lease ends, although
 * a live reader keeps the lock alive; the writer then gets in as soon as the
 * live reader leaves.  The live reader has the default lease: were the dead
 * reader still counted, the lock would outlive the live reader's unlock by
 * what is left of that lease, and the writer, woken for nothing, would sleep
 * on it (WOKEN_WITHIN_S). */
static void test_sigkill_reader(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    struct th live, w;
    int st = 0, early, rc_try;
    double t_kill, t_live, el, before_live;
    long long held;
    pid_t pid;

    (void)state;
    pid = fx_fork_holder(rdlock_of, rw); /* its lease: 1.5 s */
    assert_int_equal(dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS), 0);

    th_hold(&live, rw, OP_RD); /* a live reader, renewed */
    th_start(&w, rw, OP_WR);   /* a writer waits for both */
    kill(pid, SIGKILL);
    t_kill = tu_now();
    assert_int_equal(waitpid(pid, &st, 0), pid);

    /* Twice the dead reader's lease: only the live one holds it now. */
    tu_sleep_ms(3000);
    early = th_wait(&w, 0.0) == 0;
    held = key_exists(name);
    rc_try = other_thread(rw, OP_TRYWR);
    before_live = tu_now() - t_kill;

    t_live = tu_now();
    th_finish(&live); /* the live reader leaves */
    if (th_wait(&w, WOKEN_WITHIN_S) != 0)
        el = 99;
    else
        el = w.t_locked - t_live;
    th_finish(&w);
    fx_dirty = 0;

    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_false(early);
    assert_int_equal(held, 1);
    assert_int_equal(rc_try, EBUSY);
    assert_true(before_live >= 3.0);
    assert_int_equal(live.unlock_rc, 0);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.unlock_rc, 0);
    /* the dead reader no longer counted: in by the live one's unlock */
    assert_dbl_range(el, 0.0, WOKEN_WITHIN_S);
    print_message("sigkill reader: writer in %.1f ms after the live reader "
                  "left\n",
                  el * 1e3);
}

/* Each read hold has its own lease: a 4 s hold and a 1 s hold taken by two
 * threads that never unlock keep a writer out until the 4 s one ends. */
static void test_per_hold_lease(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL), *rw4, *rw1;
    const char *name = fx_name(rw);
    dist_rwlockattr_t a;
    struct th t4, t1, w;
    double t0, el;
    int rc_try_2s;

    (void)state;
    assert_int_equal(dist_rwlockattr_init(&a), 0);
    assert_int_equal(dist_rwlockattr_setlease(&a, 4000), 0);
    rw4 = fx_rwlock_on(name, &a); /* the same lock, other leases */
    assert_int_equal(dist_rwlockattr_setlease(&a, 1000), 0);
    rw1 = fx_rwlock_on(name, &a);
    assert_int_equal(dist_rwlockattr_destroy(&a), 0);

    t0 = tu_now();
    th_hold(&t4, rw4, OP_RD);
    th_hold(&t1, rw1, OP_RD);
    assert_in_range(pttl(name), 3000, 4000);
    th_start(&w, rw, OP_WR);
    tu_sleep_ms(2000); /* the 1 s hold is over, the 4 s not */
    rc_try_2s = other_thread(rw, OP_TRYWR);
    if (th_wait(&w, 10.0) != 0)
        el = 99;
    else
        el = w.t_locked - t0;
    th_finish(&t4); /* their holds ended: EPERM */
    th_finish(&t1);
    th_finish(&w);

    assert_int_equal(rc_try_2s, EBUSY);
    assert_int_equal(w.rc, 0);
    assert_dbl_range(el, 3.95, 4.0 + slack(1.0));
    assert_int_equal(t4.unlock_rc, EPERM);
    assert_int_equal(t1.unlock_rc, EPERM);
    assert_int_equal(w.unlock_rc, 0);
    print_message("per-hold lease: writer in after %.2f s\n", el);
}

/* A forked child's writer, waiting until it is killed. */
static void wrlock_forever(void *rw)
{
    dist_rwlock_wrlock(rw);
    for (;;)
        pause();
}

/* A waiting writer of a writer-preferring lock whose process is killed stops
 * keeping readers out within its window. */
static void test_preferring_writer_killed(void **state)
{
    dist_rwlock_t *rw = fx_rwlock_prefer_writer("rw");
    const char *name = fx_name(rw);
    struct th rd;
    int st = 0, waiting, rc_try;
    double t_kill, el, lo;
    pid_t pid;

    (void)state;
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    pid = fork_started(wrlock_forever, rw);
    waiting = wait_writers(name, 1, 10.0);
    tu_sleep_ms(2000); /* its process has refreshed its deadline */
    rc_try = other_thread(rw, OP_TRYRD);
    kill(pid, SIGKILL);
    t_kill = tu_now();
    assert_int_equal(waitpid(pid, &st, 0), pid);
    th_start(&rd, rw, OP_RD);
    el = th_wait(&rd, 15.0) == 0 ? rd.t_locked - t_kill : 99;
    th_finish(&rd);
    assert_int_equal(dist_rwlock_unlock(rw), 0);

    assert_true(waiting);
    assert_int_equal(rc_try, EBUSY);
    assert_int_equal(rd.rc, 0);
    assert_int_equal(rd.unlock_rc, 0);
    /* refreshed every window/3: at least 2/3 of the window was left */
    lo = on_valgrind() ? 0.0 : 2.5;
    assert_dbl_range(el, lo, DEFAULT_WAITER_MS / 1000.0 + slack(2.0));
    assert_int_equal(zcard_writers(name), 0);
    print_message("killed waiting writer: readers in again after %.2f s\n",
                  el);
}

/* Replies lost on the way back: each call is settled by running it again,
 * never applied twice. */
static void test_lost_reply_proxy(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char tokkey[260], wfield[300];
    tu_proxy_t *p;
    unsigned long fired;
    long long tok0;
    char *owner;

    (void)state;
    snprintf(tokkey, sizeof tokkey, "redisson_lock_token:{%s}", name);
    p = fx_proxy_up(&r);
    assert_non_null(p);
    assert_int_equal(dist_rwlock_rdlock(rw), 0); /* warm up */
    owner = read_owner(name);
    assert_non_null(owner);
    snprintf(wfield, sizeof wfield, "%s:write", owner);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    fired = tu_proxy_faults_fired(p);

    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(hget_int(name, owner), 1);
    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(hget_int(name, owner), 2);
    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(hget_int(name, owner), 1);
    tu_proxy_drop_next_reply(p);
    fx_last_unlock(rw);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 4);

    /* a counter ahead of the server's clock (as Redisson's RFencedLock may
     * leave it) is counted on by one: one draw shows as one more */
    {
        redisReply *x = tu_cmd(&r, "SET", tokkey, "4000000000000000", NULL);
        assert_non_null(x);
        freeReplyObject(x);
    }
    tok0 = 4000000000000000LL;
    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(hget_int(name, wfield), 1);
    assert_int_equal(tu_cmd_int(&r, "GET", tokkey, NULL), tok0 + 1);
    {
        uint64_t t = 0;
        assert_int_equal(dist_rwlock_token(rw, &t), 0);
        assert_int_equal((long long)t, tok0 + 1);
    }
    tu_proxy_drop_next_request(p);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(hget_int(name, owner), 1);
    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_rwlock_unlock(rw), 0); /* the write hold */
    assert_true(mode_is(name, "read"));
    assert_int_equal(hget_int(name, wfield), -1);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 7);
    free(owner);

    assert_int_equal(fx_proxy_down(&r, p), 0);
    fx_dirty = 0;
}

static void test_watchdog_and_lost(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char tk1[400], tk2[400];
    long long v, min_lock = 1LL << 40, min_k1 = 1LL << 40, min_k2 = 1LL << 40;
    double t0;
    char *owner;
    int rc_try, lost, rc_unlock;

    (void)state;
    fx_watch_lost();
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    owner = read_owner(name);
    assert_non_null(owner);
    tkey(tk1, sizeof tk1, name, owner, 1);
    tkey(tk2, sizeof tk2, name, owner, 2);
    assert_in_range(pttl(name), 1, 1500);
    t0 = tu_now();
    while (tu_now() - t0 < 4.0) {
        if ((v = pttl(name)) < min_lock)
            min_lock = v;
        if ((v = pttl(tk1)) < min_k1)
            min_k1 = v;
        if ((v = pttl(tk2)) < min_k2)
            min_k2 = v;
        tu_sleep_ms(100);
    }
    rc_try = other_thread(rw, OP_TRYWR);

    /* forced away: the watchdog notices, the unlock says EPERM */
    del_all(name);
    t0 = tu_now();
    while (fx_lost_calls(NULL) == 0 && tu_now() - t0 < 3.0)
        tu_sleep_ms(20);
    lost = fx_lost_calls(NULL);
    rc_unlock = dist_rwlock_unlock(rw);
    dist_set_lost_handler(NULL, NULL);
    dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS);
    fx_dirty = 0;

    if (min_lock <= 0 || min_k1 <= 0 || min_k2 <= 0)
        fail_msg("a PTTL fell to 0 while held: lock %lld, holds %lld %lld",
                 min_lock, min_k1, min_k2);
    assert_int_equal(rc_try, EBUSY);
    assert_true(lost >= 1);
    assert_int_equal(rc_unlock, EPERM);
    assert_int_equal(dist_rwlock_unlock(rw), EPERM);
    free(owner);
}

static void test_fork_child(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    int *code = shared(sizeof(int));
    char *owner;
    pid_t pid;
    int st = -1;

    (void)state;
    assert_non_null(code);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    owner = read_owner(name);
    assert_non_null(owner);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int c = 0;
        if (dist_rwlock_unlock(rw) != EPERM) /* not the parent */
            c = 10;
        else if (dist_rwlock_tryrdlock(rw) != 0)
            c = 11;
        else if (hlen(name) != 3)
            c = 12;
        else if (dist_rwlock_trywrlock(rw) != EBUSY)
            c = 13;
        else if (dist_rwlock_unlock(rw) != 0)
            c = 14;
        else if (hget_int(name, owner) != 1)
            c = 15;
        *code = c;
        _exit(c);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (*code != 0 || !child_exit_ok(st, *code))
        fail_msg("child: reported %d, status 0x%x", *code, st);
    assert_int_equal(hget_int(name, owner), 1);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    free(owner);
    munmap(code, sizeof(int));
}

/* op on rw while the server is stopped (SIGSTOP) for longer than the
 * command timeout: its result, and how long it took in *el.  The server
 * then resumes, with 300 ms to run what it was sent. */
static int while_stopped(int (*op)(dist_rwlock_t *), dist_rwlock_t *rw,
                         double *el)
{
    double t0;
    int rc;

    assert_int_equal(tu_redis_signal(&r, SIGSTOP), 0);
    t0 = tu_now();
    rc = op(rw);
    *el = tu_now() - t0;
    assert_int_equal(tu_redis_signal(&r, SIGCONT), 0);
    tu_sleep_ms(300);
    return rc;
}

/* The server stops (SIGSTOP) for longer than the command timeout during a
 * lock and an unlock: their outcome cannot be known, so they say EIO, and
 * the thread's next call on the lock settles what Redis may still count
 * (whether the stopped call ran once the server resumed or not). */
static void test_unknown_outcome(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char *owner;
    double el_lock, el_unlock;
    int rc_lock, rc_unlock, rc_settle, rc_try;
    long long after_lock, after_unlock, left;

    (void)state;
    fx_dirty = 1;
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    owner = read_owner(name);
    assert_non_null(owner);
    assert_int_equal(dist_set_timeout_ms(300), 0);

    /* a second read hold, outcome unknown */
    rc_lock = while_stopped(dist_rwlock_rdlock, rw, &el_lock);
    after_lock = hget_int(name, owner); /* 2 if it ran, else 1 */
    /* the next call first gives back what may be owed, then unlocks the
     * one hold the thread knows of */
    rc_settle = dist_rwlock_unlock(rw);
    left = key_exists(name);

    /* an unlock, outcome unknown */
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    rc_unlock = while_stopped(dist_rwlock_unlock, rw, &el_unlock);
    after_unlock = hget_int(name, owner); /* 0 (-1: nil) if it ran, else 1 */
    rc_try = dist_rwlock_tryrdlock(rw);   /* settles first */
    assert_int_equal(dist_set_timeout_ms(DEFAULT_TIMEOUT_MS), 0);
    fx_dirty = 0;

    assert_int_equal(rc_lock, EIO);
    assert_dbl_range(el_lock, 0.3, slack(5.0));
    assert_true(after_lock == 1 || after_lock == 2);
    assert_int_equal(rc_settle, 0);
    assert_int_equal(left, 0);
    assert_int_equal(rc_unlock, EIO);
    assert_dbl_range(el_unlock, 0.3, slack(5.0));
    assert_true(after_unlock == -1 || after_unlock == 1);
    assert_int_equal(rc_try, 0);
    assert_int_equal(hget_int(name, owner), 1);
    fx_last_unlock(rw);
    free(owner);
    print_message("unknown outcomes: the lock %s, the unlock %s\n",
                  after_lock == 2 ? "ran" : "did not run",
                  after_unlock == -1 ? "ran" : "did not run");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_sigkill_reader),
        FX_TEST(test_per_hold_lease),
        FX_TEST(test_preferring_writer_killed),
        FX_TEST(test_lost_reply_proxy),
        FX_TEST(test_watchdog_and_lost),
        FX_TEST(test_fork_child),
        FX_TEST(test_unknown_outcome),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_RWLOCK_LEASE_FILTER");
}
