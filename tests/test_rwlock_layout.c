/*
 * test_rwlock_layout: the dist_rwlock as Redis and other clients see it,
 * against a private redis-server: the static initializer, the lease left,
 * no channel left behind, sharing the hash with a Redisson reader (destroy
 * and the names: test_names_rules; fencing tokens: test_tokens).
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

#define STATIC_NAME "test_rwlock:static_initializer:fixed-name-5b1e"
static dist_rwlock_t srw = DIST_RWLOCK_INITIALIZER(STATIC_NAME);

static void test_static_initializer(void **state)
{
    dist_rwlock_t z;

    (void)state;
    del_all(STATIC_NAME);
    assert_int_equal(dist_rwlock_rdlock(&srw), 0);
    assert_true(mode_is(STATIC_NAME, "read"));
    assert_int_equal(dist_rwlock_wrlock(&srw), EDEADLK);
    assert_int_equal(dist_rwlock_unlock(&srw), 0);
    assert_int_equal(dist_rwlock_wrlock(&srw), 0);
    assert_true(mode_is(STATIC_NAME, "write"));
    assert_int_equal(dist_rwlock_unlock(&srw), 0);
    assert_int_equal(key_exists(STATIC_NAME), 0);
    assert_int_equal(dist_rwlock_destroy(&srw), 0);

    memset(&z, 0, sizeof z);
    assert_int_equal(dist_rwlock_rdlock(&z), EINVAL);
    assert_true(dist_last_error()[0] != 0);
    assert_int_equal(dist_rwlock_wrlock(&z), EINVAL);
    assert_int_equal(dist_rwlock_tryrdlock(&z), EINVAL);
    assert_int_equal(dist_rwlock_unlock(&z), EINVAL);
    assert_int_equal(dist_rwlock_rdlock(NULL), EINVAL);
}

static void test_no_channels_left(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    struct th t[4];
    int i, subscribed, done = 0, finished[4] = { 0 };
    double t0;

    (void)state;
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    for (i = 0; i < 4; i++)
        th_start(&t[i], rw, i == 3 ? OP_WR : OP_RD);
    subscribed = wait_subscribed(name, 10.0);
    tu_sleep_ms(200);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    /* whoever gets in first lets go first (the writer may beat the readers) */
    t0 = tu_now();
    while (done < 4 && tu_now() - t0 < 10.0) {
        for (i = 0; i < 4; i++) {
            if (!finished[i] && th_wait(&t[i], 0.01) == 0) {
                th_finish(&t[i]);
                finished[i] = 1;
                done++;
            }
        }
    }
    for (i = 0; i < 4; i++)
        if (!finished[i])
            th_finish(&t[i]); /* hung: let it fail below */
    assert_int_equal(done, 4);
    assert_true(subscribed);
    for (i = 0; i < 4; i++) {
        assert_int_equal(t[i].rc, 0);
        assert_int_equal(t[i].unlock_rc, 0);
    }

    assert_int_equal(channels_left(&r, 3.0), 0);
}

/* The hash as a Redisson (Java) reader writes it: distlock shares with it,
 * its writer waits for it, and takes the lock once it is gone. */
#define JAVA_OWNER "6f1c2d3e-0a4b-4c5d-8e6f-7a8b9c0d1e2f:57"

static void test_redisson_layout(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char tk_java[400], tk_mine[400], chan[300], wfield[300];
    struct th w;
    redisReply *x;
    char *mine;
    double t0, el;
    int early, early2;
    long long java_left, ttl_left;

    (void)state;
    tkey(tk_java, sizeof tk_java, name, JAVA_OWNER, 1);
    chan_of(chan, sizeof chan, name);
    x = tu_cmd(&r, "HSET", name, "mode", "read", JAVA_OWNER, "1", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    x = tu_cmd(&r, "SET", tk_java, "1", "PX", "30000", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    assert_int_equal(tu_cmd_int(&r, "PEXPIRE", name, "30000", NULL), 1);

    assert_int_equal(dist_rwlock_trywrlock(rw), EBUSY);
    th_start(&w, rw, OP_WR);
    early = th_wait(&w, 0.5) == 0;

    /* readers share with it */
    assert_int_equal(dist_rwlock_tryrdlock(rw), 0);
    assert_int_equal(hlen(name), 3);
    mine = NULL;
    {
        char *f[4];
        int n = fields(name, f, 4), i;
        for (i = 0; i < n; i++) {
            if (!mine && strcmp(f[i], JAVA_OWNER) != 0)
                mine = f[i];
            else
                free(f[i]);
        }
    }
    assert_non_null(mine);
    tkey(tk_mine, sizeof tk_mine, name, mine, 1);
    assert_int_equal(key_exists(tk_mine), 1);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    java_left = hget_int(name, JAVA_OWNER);
    ttl_left = pttl(name);
    early2 = th_wait(&w, 0.3) == 0;

    /* the Java reader unlocks as Redisson's script does */
    x = tu_cmd(&r, "HDEL", name, JAVA_OWNER, NULL);
    freeReplyObject(x);
    x = tu_cmd(&r, "DEL", tk_java, NULL);
    freeReplyObject(x);
    x = tu_cmd(&r, "DEL", name, NULL);
    freeReplyObject(x);
    t0 = tu_now();
    x = tu_cmd(&r, "PUBLISH", chan, "0", NULL);
    freeReplyObject(x);
    el = th_wait(&w, 10.0) == 0 ? w.t_locked - t0 : 99;
    snprintf(wfield, sizeof wfield, "%.*s:write",
             (int)(strrchr(mine, ':') - mine), mine);
    (void)wfield;

    assert_false(early);
    assert_false(early2);
    assert_int_equal(java_left, 1);
    assert_true(ttl_left > 20000); /* its lease, not shortened by ours */
    assert_int_equal(w.rc, 0);
    assert_dbl_range(el, 0.0, slack(1.0));
    /* the writer's hold, as Redisson's writer would write it */
    assert_true(mode_is(name, "write"));
    assert_int_equal(hlen(name), 2);
    {
        char *f[4];
        int n = fields(name, f, 4), i, ok;
        ok = n == 1 && strlen(f[0]) > 6 &&
             strcmp(f[0] + strlen(f[0]) - 6, ":write") == 0;
        if (ok)
            ok = hget_int(name, f[0]) == 1;
        for (i = 0; i < n; i++)
            free(f[i]);
        assert_true(ok);
    }
    th_finish(&w);
    assert_int_equal(w.unlock_rc, 0);
    assert_int_equal(key_exists(name), 0);

    /* a Java writer keeps everyone out */
    x = tu_cmd(&r, "HSET", name, "mode", "write", JAVA_OWNER ":write", "1",
               NULL);
    freeReplyObject(x);
    assert_int_equal(tu_cmd_int(&r, "PEXPIRE", name, "30000", NULL), 1);
    assert_int_equal(dist_rwlock_tryrdlock(rw), EBUSY);
    assert_int_equal(dist_rwlock_trywrlock(rw), EBUSY);
    x = tu_cmd(&r, "DEL", name, NULL);
    freeReplyObject(x);
    assert_int_equal(dist_rwlock_tryrdlock(rw), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    free(mine);
}

/* dist_rwlock_lease_left: one bound for a thread's holds of either side,
 * within the watchdog lease less the margin (30 s - 0.3 s - 0.2 s), EPERM
 * with a zero left once it holds neither; EINVAL for NULL. */
static void test_lease_left(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    struct timespec left;

    (void)state;
    assert_int_equal(dist_rwlock_lease_left(rw, &left), EPERM);
    assert_int_equal(dist_rwlock_lease_left(rw, NULL), EINVAL);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(dist_rwlock_lease_left(rw, &left), 0);
    assert_true(left.tv_sec >= 19 && left.tv_sec <= 29);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_lease_left(rw, &left), EPERM);
    assert_true(left.tv_sec == 0 && left.tv_nsec == 0);
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(dist_rwlock_lease_left(rw, &left), 0);
    assert_true(left.tv_sec >= 19 && left.tv_sec <= 29);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_lease_left(rw, &left), 0); /* a read */
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_lease_left(rw, &left), EPERM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_static_initializer),
        FX_TEST(test_no_channels_left),
        FX_TEST(test_redisson_layout),
        FX_TEST(test_lease_left),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_RWLOCK_LAYOUT_FILTER");
}
