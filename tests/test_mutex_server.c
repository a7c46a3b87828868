/*
 * test_mutex_server: a dist_mutex when the server is not as the library
 * left it: restarted empty, its scripts flushed, not there at all, stopped
 * in the middle of an unlock, a reply or request lost on the way, and an
 * ACL user without a password; none of it raises SIGPIPE.  Against a
 * private redis-server (mutexhelp.h).
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

#define MUTEX_PROG "test_mutex_server"
#include "mutexhelp.h"

static void test_redis_restart(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    double t0, waited;
    int calls = 0, named, rc_restart, rc_unlock1, rc_lock, rc_unlock2;
    long long fields_before, fields_after, ex_after_restart, ex_end;

    (void)state;
    fx_watch_lost();
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    fields_before = hash_fields(name);

    rc_restart = tu_redis_restart(&r);
    ex_after_restart = key_exists(name);
    t0 = tu_now();
    while (tu_now() - t0 < 5.0 && (calls = fx_lost_calls(NULL)) == 0)
        tu_sleep_ms(50);
    waited = tu_now() - t0;
    named = fx_lost_last_is(name);

    /* clean up before asserting, so a failure leaves nothing behind */
    rc_unlock1 = dist_mutex_unlock(m);
    rc_lock = dist_mutex_lock(m);
    fields_after = hash_fields(name);
    rc_unlock2 = rc_lock == 0 ? dist_mutex_unlock(m) : -1;
    ex_end = key_exists(name);
    dist_set_lost_handler(NULL, NULL);
    dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS);
    fx_dirty = 0;

    assert_int_equal(fields_before, 1);
    assert_int_equal(rc_restart, 0);
    assert_int_equal(ex_after_restart, 0);
    if (calls == 0)
        fail_msg("the lost handler did not fire within %.1f s of the restart",
                 waited);
    assert_true(named);
    assert_int_equal(rc_unlock1, EPERM);
    assert_int_equal(rc_lock, 0);
    assert_int_equal(fields_after, 1);
    assert_int_equal(rc_unlock2, 0);
    assert_int_equal(ex_end, 0);
}

static void test_script_flush(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    redisReply *x;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    x = tu_cmd(&r, "SCRIPT", "FLUSH", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_works(m, name);
}

static void test_unreachable(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    char url[64], addr[64];
    struct fx_call lk, try;
    int port;

    (void)state;
    port = tu_free_port();
    assert_true(port > 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    fx_dirty = 1;
    assert_int_equal(dist_set_url(url), 0);
    assert_int_equal(dist_set_timeout_ms(500), 0);

    FX_CALL(&lk, dist_mutex_lock(m));
    FX_CALL(&try, dist_mutex_trylock(m));

    assert_int_equal(dist_set_url(r.url_unix), 0);
    assert_int_equal(dist_set_timeout_ms(DEFAULT_TIMEOUT_MS), 0);
    fx_dirty = 0;

    assert_int_equal(lk.rc, EIO);
    assert_dbl_range(lk.el, 0.0, slack(2.0));
    if (!strstr(lk.err, addr) && !strstr(lk.err, "connect"))
        fail_msg("dist_last_error() after the failed lock: '%s'", lk.err);
    assert_int_equal(try.rc, EIO);
    assert_dbl_range(try.el, 0.0, 2.0 + slack(0.5));

    /* reachable again: the object works */
    assert_works(m, fx_name(m));
}

/* The server stops mid-unlock (SIGSTOP) for longer than the command
 * timeout: the outcome cannot be known, unlock says EIO, and once the
 * server runs again the renewal thread finishes the release, so the lock is
 * free for others without waiting out its 30 s lease. */
static void test_unknown_release_is_finished(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    struct oneshot o;
    double t0, end;
    int rc;

    (void)state;
    fx_dirty = 1;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_set_timeout_ms(300), 0);
    assert_int_equal(tu_redis_signal(&r, SIGSTOP), 0);
    t0 = tu_now();
    rc = dist_mutex_unlock(m);
    end = tu_now() - t0;
    assert_int_equal(tu_redis_signal(&r, SIGCONT), 0);
    assert_int_equal(rc, EIO);
    assert_dbl_range(end, 0.3, slack(3.0));
    assert_int_equal(dist_set_timeout_ms(DEFAULT_TIMEOUT_MS), 0);

    /* within a few seconds the release is done, whoever did it */
    end = tu_now() + slack(5.0);
    while (key_exists(name) != 0 && tu_now() < end)
        tu_sleep_ms(50);
    assert_int_equal(key_exists(name), 0);
    run_oneshot(&o, m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.rc2, 0);
    /* and this thread holds nothing: a second unlock is EPERM */
    assert_int_equal(dist_mutex_unlock(m), EPERM);
    fx_dirty = 0;
}

/* lock with a fault of p armed: it fires (fired in all), and the lock is
 * held once, then released. */
static void lock_through_fault(dist_mutex_t *m, const char *name,
                               tu_proxy_t *p, unsigned long fired)
{
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired);
    assert_held_once(&r, name, NULL);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(key_exists(name), 0);
}

static void test_lost_reply_proxy(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    tu_proxy_t *p;
    unsigned long fired;

    (void)state;
    p = fx_proxy_up(&r);
    assert_non_null(p);
    assert_int_equal(dist_mutex_lock(m), 0); /* warm up */
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(tu_proxy_connections(p) >= 1);
    fired = tu_proxy_faults_fired(p);

    /* acquire ran, its reply was lost */
    tu_proxy_drop_next_reply(p);
    lock_through_fault(m, name, p, fired + 1);

    /* release ran, its reply was lost */
    assert_int_equal(dist_mutex_lock(m), 0);
    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 2);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_unlock(m), EPERM);

    /* acquire never reached the server */
    tu_proxy_drop_next_request(p);
    lock_through_fault(m, name, p, fired + 3);

    /* the library's connections through the proxy are replaced at next use */
    assert_int_equal(fx_proxy_down(&r, p), 0);
    fx_dirty = 0;
}

/* A thread's lock and unlock, for test_settings_change_mid_acquire. */
static int lock_unlock(void *arg)
{
    int rc = dist_mutex_lock(arg);

    return rc ? rc : dist_mutex_unlock(arg);
}

/* New settings made by another thread while a lock call waits for its
 * script's reply: the new hold's replica wait still runs on the link the
 * script used, which the settings must not close under it (they did: a
 * use after free, which AddressSanitizer reports).  The proxy slows every
 * reply, so the change comes after the thread opened its link (the
 * connection is counted) and before the script's answer. */
static void test_settings_change_mid_acquire(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    struct fx_thread t;
    tu_proxy_t *p;
    unsigned long conns;

    (void)state;
    p = fx_proxy_up(&r);
    assert_non_null(p);
    assert_int_equal(dist_set_timeout_ms(10000), 0);
    conns = tu_proxy_connections(p);
    tu_proxy_set_delay(p, 300);
    fx_thread_start(&t, lock_unlock, m);
    while (tu_proxy_connections(p) == conns)
        tu_sleep_ms(1);
    assert_int_equal(dist_set_timeout_ms(10001), 0);
    assert_int_equal(fx_thread_join(&t), 0);
    tu_proxy_set_delay(p, 0);
    assert_int_equal(fx_proxy_down(&r, p), 0);
}

/* Right after the renewal of name's hold (its PTTL jumps back up), within
 * timeout_s: a fault armed then meets the next call, not a renewal. */
static int after_renewal(const char *name, double timeout_s)
{
    double end = tu_now() + timeout_s;
    long long last = tu_cmd_int(&r, "PTTL", name, NULL), now;

    while (tu_now() < end) {
        tu_sleep_ms(2);
        now = tu_cmd_int(&r, "PTTL", name, NULL);
        if (now > last)
            return 1;
        last = now;
    }
    return 0;
}

/* A release whose reply was lost, on a hold older than its fencing
 * counter's time to live (the lease plus the grace from its draw;
 * renewals keep the hold, not the counter): the probe finds the counter
 * gone, which on a younger hold means the server lost its data, and here
 * only that it expired.  The unlock says 0 and no loss is reported; it
 * said EPERM, with the lost handler called, for a release that ran. */
static void test_lost_release_reply_old_hold(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    char counter[256];
    tu_proxy_t *p;
    unsigned long fired;
    double end;
    int rc;

    (void)state;
    snprintf(counter, sizeof counter, "redisson_lock_token:{%s}", name);
    p = fx_proxy_up(&r);
    assert_non_null(p);
    fx_lost_reset();
    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
    assert_int_equal(dist_set_watchdog_ms(3000), 0); /* renewed each 1 s */
    assert_int_equal(dist_set_key_grace_ms(1), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    end = tu_now() + 20.0;
    while (key_exists(counter) == 1 && tu_now() < end)
        tu_sleep_ms(20);
    assert_int_equal(key_exists(counter), 0);
    assert_true(after_renewal(name, 10.0));
    fired = tu_proxy_faults_fired(p);
    tu_proxy_drop_next_reply(p);
    rc = dist_mutex_unlock(m);
    dist_set_lost_handler(NULL, NULL);
    assert_int_equal(dist_set_key_grace_ms(86400000), 0); /* the default */
    assert_int_equal(rc, 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 1);
    assert_int_equal(fx_lost_calls(name), 0);
    assert_int_equal(fx_proxy_down(&r, p), 0); /* teardown: the watchdog */
}

/* ---- an ACL user without a password (issue 27) ---------------------------- */

/* How many of the server's clients run as ACL user user. */
static int clients_of(const char *user)
{
    redisReply *x = tu_cmd(&r, "CLIENT", "LIST", NULL);
    char needle[64];
    const char *p;
    int n = 0;

    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    snprintf(needle, sizeof needle, " user=%s ", user);
    for (p = x->str; (p = strstr(p, needle)) != NULL; p++)
        n++;
    freeReplyObject(x);
    return n;
}

/* redis://np:@host (a user, an empty password) skipped AUTH because the
 * password was empty: the connection ran as 'default', and a lock outside
 * the keys np may touch was taken.  The ACL user here is made with nopass
 * and may touch only keys and channels holding "aclok-"; over TCP and the
 * unix socket, the library must run as np: the lock np may take is taken,
 * the other is refused and left unheld. */
static void test_acl_user_without_password(void **state)
{
    char ok[64], no[64], url[600];
    const char *const forms[2] = { r.url_tcp, r.url_unix };
    dist_mutex_t a, b;
    redisReply *x;
    int i, rc;

    (void)state;
    snprintf(ok, sizeof ok, "aclok-%d", (int)getpid());
    snprintf(no, sizeof no, "aclno-%d", (int)getpid());
    x = tu_cmd(&r, "ACL", "SETUSER", "np", "reset", "on", "nopass",
               "~*aclok-*", "&*aclok-*", "+@all", NULL);
    assert_non_null(x);
    assert_int_not_equal(x->type, REDIS_REPLY_ERROR);
    freeReplyObject(x);
    fx_dirty = 1;
    for (i = 0; i < 2; i++) {
        /* "redis://" or "unix://", then np:@, then the rest */
        const char *rest = strstr(forms[i], "://") + 3;
        snprintf(url, sizeof url, "%.*snp:@%s", (int)(rest - forms[i]),
                 forms[i], rest);
        assert_int_equal(dist_set_url(url), 0);
        assert_int_equal(dist_mutex_init(&a, ok, NULL), 0);
        assert_int_equal(dist_mutex_init(&b, no, NULL), 0);
        assert_int_equal(dist_mutex_lock(&a), 0);
        assert_true(clients_of("np") >= 1);
        rc = dist_mutex_lock(&b);
        if (rc == 0) {
            dist_mutex_unlock(&b);
            fail_msg("%s: a lock outside np's keys was taken: the "
                     "connection does not run as np",
                     url);
        }
        assert_int_equal(key_exists(no), 0);
        assert_int_equal(dist_mutex_unlock(&a), 0);
        assert_int_equal(key_exists(ok), 0);
        dist_mutex_destroy(&a);
        dist_mutex_destroy(&b);
    }
    fx_restore_defaults(NULL);
    x = tu_cmd(&r, "ACL", "DELUSER", "np", NULL);
    freeReplyObject(x);
}

/* Runs last: the library must not have raised SIGPIPE in this process (the
 * Redis restart of test_redis_restart is where a careless write would). */
static void test_no_sigpipe(void **state)
{
    (void)state;
    if (fx_sigpipes() != 0)
        fail_msg("the library raised SIGPIPE %d time(s); with the default "
                 "disposition the process would have been killed",
                 fx_sigpipes());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_redis_restart),
        FX_TEST(test_script_flush),
        FX_TEST(test_unreachable),
        FX_TEST(test_unknown_release_is_finished),
        FX_TEST(test_lost_reply_proxy),
        FX_TEST(test_settings_change_mid_acquire),
        FX_TEST(test_lost_release_reply_old_hold),
        FX_TEST(test_acl_user_without_password),
        FX_TEST(test_no_sigpipe),
    };
    return MUTEX_RUN(tests);
}
