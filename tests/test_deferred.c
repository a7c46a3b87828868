/*
 * test_deferred: deferred release (dist_mutexattr_setdeferred) against a
 * private redis-server: unlock returns once the release is written, and
 * every outcome of its reply, read later, is acted on.
 *
 * As in test_mutex, worker threads and forked children only record
 * results; the main thread asserts.  Bounds on time are generous: "the key
 * is gone within 5 s" where the lease is 30 s, so that only the release
 * (not the lease) can have removed it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_proxy.h"
#include "testhelp.h"
#include "fixture.h"

static tu_redis_t r;

#define GONE_WITHIN_S 5.0 /* far below the 30 s lease */

static const struct fx_settings defaults = FX_DEFAULTS(0);

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_deferred", __func__, tag)
#define key_exists(key)        tu_cmd_int(&r, "EXISTS", key, NULL)
#define hget_count(key, field) tu_cmd_int(&r, "HGET", key, field, NULL)

/* The attributes of a mutex with deferred release on. */
static void deferred_attr(dist_mutexattr_t *a, int fair)
{
    dist_mutexattr_init(a);
    dist_mutexattr_setdeferred(a, 1);
    dist_mutexattr_setfair(a, fair);
}

/* A mutex with deferred release on, for a forked child. */
static int init_deferred(dist_mutex_t *m, const char *name, int fair)
{
    dist_mutexattr_t a;
    int rc;

    deferred_attr(&a, fair);
    rc = dist_mutex_init(m, name, &a);
    dist_mutexattr_destroy(&a);
    return rc;
}

/* A deferred-release mutex of the test's own (fixture.h), not fair. */
static dist_mutex_t *deferred_mutex(const char *test, const char *tag)
{
    dist_mutexattr_t a;
    dist_mutex_t *m;

    deferred_attr(&a, 0);
    m = fx_own_mutex(test, tag, &a);
    dist_mutexattr_destroy(&a);
    return m;
}

/* Whether key is gone within secs (polled from the test's own link). */
static int gone_within(const char *key, double secs)
{
    double t0 = tu_now();

    while (key_exists(key) != 0) {
        if (tu_now() - t0 > secs)
            return 0;
        tu_sleep_ms(20);
    }
    return 1;
}

#define count_of(name) owner_count(&r, name)

static void flush_scripts(void)
{
    redisReply *x = tu_cmd(&r, "SCRIPT", "FLUSH", NULL);

    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
}

/* ---- the attribute ------------------------------------------------------ */

static void test_attribute(void **state)
{
    (void)state;
    assert_attr_switch(dist_mutexattr_setdeferred,
                       dist_mutexattr_getdeferred);
}

/* ---- the plain path ------------------------------------------------------ */

/* Unlock returns; the release runs; reentrant holds are released the
 * usual way (only the last one is deferred); EPERM stays local. */
static void test_release_runs(void **state)
{
    dist_mutex_t *m = deferred_mutex(__func__, "m");
    const char *name = fx_name(m);
    int i;

    (void)state;
    assert_int_equal(dist_mutex_unlock(m), EPERM); /* never held */
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(count_of(name), 1); /* not deferred */
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), EPERM); /* local, at once */
    assert_true(gone_within(name, GONE_WITHIN_S));
    /* pairs in a row: each lock goes right behind the release before it */
    for (i = 0; i < 50; i++) {
        assert_int_equal(dist_mutex_lock(m), 0);
        assert_int_equal(count_of(name), 1);
        assert_int_equal(dist_mutex_unlock(m), 0);
    }
    assert_true(gone_within(name, GONE_WITHIN_S));
}

/* Unlock does not wait for the reply: with every byte swallowed on the
 * way (a reply that would never come) it still says 0, where an unlock
 * that waits says EIO after the command timeout.  The release was lost
 * with the connection: the next lock counts the old hold and gives it
 * back. */
static void test_unlock_does_not_wait(void **state)
{
    dist_mutex_t *m = deferred_mutex(__func__, "m");
    const char *name = fx_name(m);
    tu_proxy_t *p;
    int rc;

    (void)state;
    assert_non_null(p = fx_proxy_up(&r));
    assert_int_equal(dist_mutex_lock(m), 0);
    tu_proxy_blackhole(p, 1);
    rc = dist_mutex_unlock(m);
    tu_proxy_blackhole(p, 0);
    assert_int_equal(rc, 0);
    assert_int_equal(count_of(name), 1); /* it never got there */
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(gone_within(name, GONE_WITHIN_S));
    assert_int_equal(fx_proxy_down(&r, p), 0);
    fx_dirty = 0;
}

/* ---- a deferred release disturbed ------------------------------------------ */

/* Whether the lost handler has been called for name within secs. */
static int lost_within(const char *name, double secs)
{
    double t0 = tu_now();

    while (fx_lost_calls(name) == 0) {
        if (tu_now() - t0 > secs)
            return 0;
        tu_sleep_ms(20);
    }
    return 1;
}

/* What goes wrong with the deferred release, and who reads its reply. */
enum disturb { FLUSH_SCRIPTS, DROP_REQUEST };
enum reader { BY_OWNER, BY_OTHER_LOCK, BY_RENEWAL };

struct release_case {
    const char *test; /* its name, for the lock's */
    enum disturb how;
    enum reader who; /* the owner's next lock, a call on another lock, or
                       * no call at all: the renewal thread */
    int again;       /* then the owner takes it again, once */
};

/* The release of a held lock is disturbed; whoever reads its reply
 * finishes it, the key goes (long before the 30 s lease would end it),
 * and nothing of the old hold is counted. */
static void test_disturbed_release(void **state)
{
    const struct release_case *c = *state;
    dist_mutex_t *m, *o = NULL;
    const char *name;
    tu_proxy_t *p = NULL;

    if (c->how == DROP_REQUEST)
        assert_non_null(p = fx_proxy_up(&r));
    m = deferred_mutex(c->test, "m");
    name = fx_name(m);
    if (c->who == BY_OTHER_LOCK)
        o = fx_own_mutex(c->test, "o", NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    if (c->how == FLUSH_SCRIPTS)
        flush_scripts();
    else
        tu_proxy_drop_next_request(p);
    assert_int_equal(dist_mutex_unlock(m), 0);
    if (c->who == BY_OTHER_LOCK) {
        assert_int_equal(dist_mutex_lock(o), 0); /* reads m's reply */
        assert_int_equal(dist_mutex_unlock(o), 0);
    }
    if (c->who != BY_OWNER)
        assert_true(gone_within(name, GONE_WITHIN_S));
    if (c->who == BY_OWNER || c->again) {
        assert_int_equal(dist_mutex_lock(m), 0);
        assert_int_equal(count_of(name), 1);
        assert_int_equal(dist_mutex_unlock(m), 0);
        assert_true(gone_within(name, GONE_WITHIN_S));
    }
    if (p) {
        assert_int_equal(fx_proxy_down(&r, p), 0);
        fx_dirty = 0;
    }
}

/* A hold lost before the unlock: unlock said 0 (it could not know), the
 * reply says it, and the lost handler hears it once: at the owner's next
 * lock, or, when the owner makes no call, from the renewal thread (and
 * the owner's next call does not hear of it again). */
static void test_lost_hold(void **state)
{
    int idle = *(const int *)*state;
    dist_mutex_t *m;
    const char *name;
    dist_mutexattr_t a;
    int heard = 1, calls;

    fx_watch_lost();
    dist_mutexattr_init(&a);
    dist_mutexattr_setdeferred(&a, 1);
    dist_mutexattr_setlease(&a, 300);
    m = fx_own_mutex(idle ? "test_lost_hold_idle" : "test_lost_hold", "m",
                     &a);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0);
    tu_sleep_ms(600); /* lease over */
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    if (idle)
        heard = lost_within(name, GONE_WITHIN_S);
    assert_int_equal(dist_mutex_lock(m), 0); /* reads the reply */
    calls = fx_lost_calls(name);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    if (idle)
        calls = fx_lost_calls(name);
    dist_set_lost_handler(NULL, NULL);
    fx_dirty = 0;
    if (idle)
        assert_true(heard);
    assert_int_equal(calls, 1);
}

/* ---- broken connections ------------------------------------------------------ */

/* The release ran and its reply was lost; the release never reached the
 * server.  Either way the next lock holds it once, and the last release
 * leaves nothing. */
static void test_broken_then_lock(void **state)
{
    dist_mutex_t *m = deferred_mutex(__func__, "m");
    const char *name = fx_name(m);
    tu_proxy_t *p;
    unsigned long fired;

    (void)state;
    assert_non_null(p = fx_proxy_up(&r));
    assert_int_equal(dist_mutex_lock(m), 0); /* warm up */
    fired = tu_proxy_faults_fired(p);

    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(gone_within(name, GONE_WITHIN_S)); /* it ran */
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 1);
    assert_int_equal(count_of(name), 1);

    tu_proxy_drop_next_request(p);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 2);
    assert_int_equal(count_of(name), 1); /* not 2 */
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0); /* reads it */
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(gone_within(name, GONE_WITHIN_S));
    assert_int_equal(fx_proxy_down(&r, p), 0);
    fx_dirty = 0;
}

/* ---- threads, fork, exit ------------------------------------------------------ */

struct once {
    dist_mutex_t *m;
    int flush; /* SCRIPT FLUSH between lock and unlock */
    int rc_lock, rc_unlock;
};

static void *lock_unlock_exit(void *arg)
{
    struct once *o = arg;

    o->rc_lock = dist_mutex_lock(o->m);
    if (o->flush) {
        redisReply *x = tu_cmd(&r, "SCRIPT", "FLUSH", NULL);
        if (x)
            freeReplyObject(x);
    }
    o->rc_unlock = dist_mutex_unlock(o->m);
    return NULL; /* ends with the reply unread */
}

/* A thread that ends right after its unlock: its links are read before
 * they close, so even a release refused with NOSCRIPT is finished. */
static void test_thread_exit(void **state)
{
    dist_mutex_t *m = deferred_mutex(__func__, "m");
    struct once o = { m, 0, -1, -1 };
    pthread_t th;
    int flush;

    (void)state;
    for (flush = 0; flush < 2; flush++) {
        o.flush = flush;
        assert_int_equal(pthread_create(&th, NULL, lock_unlock_exit, &o), 0);
        pthread_join(th, NULL);
        assert_int_equal(o.rc_lock, 0);
        assert_int_equal(o.rc_unlock, 0);
        assert_true(gone_within(fx_name(m), GONE_WITHIN_S));
    }
}

/* fork() with a reply owed: the child must not read it (it is the
 * parent's), and the parent reads it at its next lock. */
static void test_fork_pending(void **state)
{
    dist_mutex_t *m = deferred_mutex(__func__, "m");
    const char *name = fx_name(m);
    char other[200]; /* the child's lock */
    pid_t pid;
    int st = 0;
    double t0, el;

    (void)state;
    NAME(other, "o");
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dist_mutex_t o;
        int code = dist_mutex_init(&o, other, NULL) != 0 ? 10
                   : dist_mutex_lock(&o) != 0            ? 11
                   : dist_mutex_unlock(&o) != 0          ? 12
                                                         : 0;
        _exit(code);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    t0 = tu_now();
    assert_int_equal(dist_mutex_lock(m), 0);
    el = tu_now() - t0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* had the child taken the reply, the lock would have waited for the
     * command timeout (2 s) for a reply that never comes */
    assert_true(el < 1.5);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(gone_within(name, GONE_WITHIN_S));
}

/* Registered before the library's own exit handler, so it runs after it:
 * the child ends there, before a leak checker's report of the library's
 * threads (ASan) could change its exit status. */
static void end_quietly(void)
{
    _exit(0);
}

/* A process that ends right after unlock: by exit() (its reply is read
 * at exit), by _exit() and by SIGKILL (the release is in the kernel). */
static void test_exit_after_unlock(void **state)
{
    char name[200];
    int how, st;

    (void)state;
    NAME(name, "m");
    for (how = 0; how < 3; how++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            dist_mutex_t m;
            atexit(end_quietly);
            if (init_deferred(&m, name, 0) != 0 || dist_mutex_lock(&m) != 0 ||
                dist_mutex_unlock(&m) != 0)
                _exit(10);
            if (how == 0)
                exit(0);
            if (how == 1)
                _exit(0);
            raise(SIGKILL);
            _exit(11);
        }
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(how == 2 ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
                             : WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_true(gone_within(name, GONE_WITHIN_S));
    }
}

/* ---- mutual exclusion with deferral on ------------------------------------------ */

static int mx_init(dist_mutex_t *m, const char *name, void *arg)
{
    return init_deferred(m, name, *(const int *)arg);
}

/* Threads of several processes with deferral on (3 processes of 2
 * threads, 100 turns each): no two inside at once, the counter exact
 * (fx_mx_run), and the lock gone at the end. */
static void test_mutual_exclusion(void **state)
{
    int fair = *(const int *)*state;
    char name[200];
    const struct fx_mx run = { name, 3, 2, 100, mx_init, &fair };

    NAME(name, fair ? "fair" : "m");
    fx_mx_run(&run);
    assert_true(gone_within(name, GONE_WITHIN_S));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define CASE(f, how, who, again)                                             \
    {                                                                        \
#f, test_disturbed_release, NULL, fx_restore_defaults,               \
            &(struct release_case)                                           \
        {                                                                    \
#f, how, who, again                                              \
        }                                                                    \
    }
/* a test run under its name with an int as its state */
#define WITH(name, f, v)                                                     \
    {                                                                        \
#name, f, NULL, fx_restore_defaults, &(int)                          \
        {                                                                    \
            v                                                                \
        }                                                                    \
    }
        FX_TEST(test_attribute),
        FX_TEST(test_release_runs),
        FX_TEST(test_unlock_does_not_wait),
        /* NOSCRIPT read by the lock that follows it: the lock counted
         * the old hold and gives that one back */
        CASE(test_noscript_then_lock, FLUSH_SCRIPTS, BY_OWNER, 0),
        /* NOSCRIPT read by a call on another lock: the renewal thread
         * finishes the release; the owner can take it again */
        CASE(test_noscript_elsewhere, FLUSH_SCRIPTS, BY_OTHER_LOCK, 1),
        /* NOSCRIPT and an owner that makes no call after it: the renewal
         * thread reads the reply */
        CASE(test_noscript_idle, FLUSH_SCRIPTS, BY_RENEWAL, 1),
        WITH(test_lost_hold_idle, test_lost_hold, 1),
        WITH(test_lost_hold, test_lost_hold, 0),
        FX_TEST(test_broken_then_lock),
        /* the release never reached the server and the owner does not
         * come back: the broken link is found by a call on another lock */
        CASE(test_broken_elsewhere, DROP_REQUEST, BY_OTHER_LOCK, 0),
        FX_TEST(test_thread_exit),
        FX_TEST(test_fork_pending),
        FX_TEST(test_exit_after_unlock),
        WITH(test_mutual_exclusion, test_mutual_exclusion, 0),
        WITH(test_mutual_exclusion_fair, test_mutual_exclusion, 1),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_DEFERRED_FILTER");
}
