/*
 * test_stats: the counters of dist_stats_get against a private
 * redis-server: each lock call lands in the counters it should and no
 * other, the wait histogram puts a wait in its bucket, renewals and a lost
 * hold are counted by the renewal thread, a new connection is counted, and
 * dist_stats_reset clears everything.  Redirections, replica give-backs
 * and pub/sub resyncs need a Cluster, replicas and a lost pub/sub
 * connection; they are counted at the one place each happens (stats.h).
 *
 * Workers only record; the main thread asserts.  Bounds hold on a loaded
 * 2-core machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

static const struct fx_settings defaults = { 0, 0, 0 };
static tu_redis_t r;

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_stats", __func__, tag)

static int holder_lock(void *m)
{
    return dist_mutex_lock(m);
}
static int holder_unlock(void *m)
{
    return dist_mutex_unlock(m);
}

static struct dist_stats stats_now(void)
{
    struct dist_stats s;

    assert_int_equal(dist_stats_get(&s), 0);
    return s;
}

static uint64_t waits_from(const struct dist_stats *s, int first)
{
    uint64_t n = 0;
    int i;

    for (i = first; i < DIST_STATS_WAIT_BUCKETS; i++)
        n += s->wait_ms[i];
    return n;
}

static void assert_all_zero(const struct dist_stats *s)
{
    static const struct dist_stats zero;

    if (memcmp(s, &zero, sizeof zero) != 0)
        fail_msg("counters not zero: acquired %llu, busy %llu, connects %llu",
                 (unsigned long long)s->acquired, (unsigned long long)s->busy,
                 (unsigned long long)s->connects);
}

/* Lets h go after 600 ms, from its own thread. */
static void *release_later(void *arg)
{
    tu_sleep_ms(600);
    fx_holder_release(arg);
    return NULL;
}

/* lock, trylock, a busy trylock, a timeout and a contended lock, each in
 * its counters */
static void test_calls_are_counted(void **state)
{
    char name[200];
    dist_mutex_t m;
    struct fx_holder h;
    struct dist_stats s;
    pthread_t th;

    (void)state;
    NAMED_LOCK(dist_mutex_init, m, name, "m");
    dist_stats_reset();
    s = stats_now();
    assert_int_equal(s.acquired, 0);
    assert_int_equal(waits_from(&s, 0), 0);

    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_trylock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    s = stats_now();
    assert_int_equal(s.acquired, 2);
    assert_int_equal(s.contended, 0);
    assert_int_equal(waits_from(&s, 0), 1); /* trylock is not in it */

    fx_holder_start(&h, holder_lock, holder_unlock, &m);
    assert_int_equal(dist_mutex_trylock(&m), EBUSY);
    struct timespec soon = realtime_in(0.2);
    assert_int_equal(dist_mutex_timedlock(&m, &soon), ETIMEDOUT);
    s = stats_now();
    assert_int_equal(s.acquired, 3); /* the holder's lock */
    assert_int_equal(s.busy, 1);
    assert_int_equal(s.timed_out, 1);

    /* taken once the holder lets go 600 ms later: the wait is in the
     * buckets of 256 ms and more (the call starts at once, not 344 ms
     * late), and a release message woke it (the lease is 30 s) */
    assert_int_equal(pthread_create(&th, NULL, release_later, &h), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    pthread_join(th, NULL);
    fx_holder_join(&h);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    s = stats_now();
    assert_int_equal(s.acquired, 4); /* the holder's and ours */
    assert_int_equal(s.contended, 1);
    assert_int_equal(waits_from(&s, 0), 3);
    assert_int_equal(waits_from(&s, 9), 1);
    assert_true(s.pubsub_messages >= 1);
    assert_int_equal(s.lost, 0);

    dist_stats_reset();
    s = stats_now();
    assert_all_zero(&s);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* With a 300 ms watchdog the renewal thread renews every 100 ms; a hold
 * deleted behind its back is counted lost once. */
static void test_renewals_and_lost(void **state)
{
    char name[200];
    dist_mutex_t m;
    struct dist_stats s;
    double end;

    (void)state;
    fx_dirty = 1;
    assert_int_equal(dist_set_watchdog_ms(300), 0);
    NAMED_LOCK(dist_mutex_init, m, name, "m");
    dist_stats_reset();
    assert_int_equal(dist_mutex_lock(&m), 0);
    end = tu_now() + 5.0;
    do {
        tu_sleep_ms(50);
        s = stats_now();
    } while (s.renewed < 2 && tu_now() < end);
    assert_true(s.renewed >= 2);
    assert_int_equal(s.renew_failed, 0);
    assert_int_equal(s.lost, 0);

    assert_int_equal(tu_cmd_int(&r, "DEL", name, NULL), 1);
    end = tu_now() + 5.0;
    do {
        tu_sleep_ms(50);
        s = stats_now();
    } while (s.lost == 0 && tu_now() < end);
    assert_int_equal(s.lost, 1);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    assert_int_equal(stats_now().lost, 1);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    fx_restore_defaults(NULL);
}

/* A new url replaces the connections at their next use: one more opened
 * (at least: the library's threads may open theirs too). */
static void test_connects(void **state)
{
    char name[200];
    dist_mutex_t m;

    (void)state;
    NAMED_LOCK(dist_mutex_init, m, name, "m");
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    dist_stats_reset();
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_set_url(r.url_tcp), 0);
    fx_dirty = 1;
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_true(stats_now().connects >= 1);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    fx_restore_defaults(NULL);
}

static void test_null_is_einval(void **state)
{
    (void)state;
    assert_int_equal(dist_stats_get(NULL), EINVAL);
    assert_non_null(strstr(dist_last_error(), "NULL"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_calls_are_counted,
                                  fx_restore_defaults),
        cmocka_unit_test_teardown(test_renewals_and_lost,
                                  fx_restore_defaults),
        cmocka_unit_test_teardown(test_connects, fx_restore_defaults),
        cmocka_unit_test(test_null_is_einval),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_STATS_FILTER");
}
