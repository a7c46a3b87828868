/*
 * test_wake: how a waiter learns that a lock was let go.  With
 * DISTLOCK_DIRECT_WAKE (the default) a waiter that is alone in reading
 * release messages reads them from the pub/sub connection itself, the
 * connection lent to it by the pub/sub thread (pubsub.c).  These tests
 * hold that lending to what the thread alone gave: every release message
 * wakes its waiter, whoever reads it; a channel that needs a SUBSCRIBE
 * while the connection is lent gets it; a connection killed while lent is
 * made again and its waiters woken; dist_shutdown and fork with a lent
 * connection neither hang nor lose a wake-up; with DISTLOCK_DIRECT_WAKE=0
 * nothing is lent; a message no thread waits for is counted as one that
 * woke the pub/sub thread alone.  The plain mutex's registered waiters: while the
 * holder is a distlock owner that left its mark, waiters listen on
 * channels of their own, a release wakes one of them (passing over one
 * nobody hears), and one that gives up passes on a wake-up it may have
 * been sent (the library's scripts run by EVAL from the source tree where
 * a test plays the other owner).  And the cancellation rules: no call is a cancellation
 * point, the condition and semaphore waits act on a request as they begin,
 * and a condition wait all through its sleep (whether it reads the lent
 * connection or sleeps until woken), its mutex taken back first; a signal
 * handler ends no condition wait.
 *
 * Locks are held by an owner nobody renews, written straight into Redis
 * with a 60 s lease: a waiter that missed its message would sleep out the
 * lease, so "woken within a second" proves the message reached it.
 * Children and threads only record; the main thread asserts.
 *
 * TEST_WAKE_FILTER=<glob> runs some tests only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

static tu_redis_t r;

#include "scripthelp.h"

static const struct fx_settings defaults = FX_DEFAULTS(0);

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_wake", __func__, tag)

/* A lock of its own, held in Redis by someone else. */
struct held {
    char name[200];
    char chan[260];
    dist_mutex_t m;
};

static void hold_elsewhere(struct held *h)
{
    redisReply *x;

    snprintf(h->chan, sizeof h->chan, "redisson_lock__channel:{%s}", h->name);
    x = tu_cmd(&r, "HSET", h->name, "someone-else:1", "1", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    x = tu_cmd(&r, "PEXPIRE", h->name, "60000", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    assert_int_equal(dist_mutex_init(&h->m, h->name, NULL), 0);
}

/* The other owner lets go, as its unlock would: the hold gone, then the
 * release message.  When it was sent. */
static double let_go(const struct held *h)
{
    redisReply *x;
    double t;

    x = tu_cmd(&r, "DEL", h->name, NULL);
    freeReplyObject(x);
    t = tu_now();
    x = tu_cmd(&r, "PUBLISH", h->chan, "0", NULL);
    freeReplyObject(x);
    return t;
}

/* Waits up to secs for chan to have want subscribers; the last count. */
static long long await_numsub(const char *chan, long long want, double secs)
{
    double end = tu_now() + secs;
    long long n;

    while ((n = pubsub_numsub(&r, chan)) != want && tu_now() < end)
        tu_sleep_ms(10);
    return n;
}

/* A waiter on h, subscribed and asleep by now. */
static void start_waiter(struct fx_locker *l, struct held *h, double secs)
{
    fx_locker_start(l, &h->m, secs);
    assert_int_equal(await_numsub(h->chan, 1, slack(5.0)), 1);
    tu_sleep_ms(300);
}

/* Lets h go and asserts that the waiter l took it within a second. */
static void let_go_and_check(struct held *h, struct fx_locker *l)
{
    double t = let_go(h);

    fx_locker_join(l);
    assert_int_equal(l->rc, 0);
    assert_dbl_range(l->t - t, 0.0, slack(1.0));
}

static struct dist_stats stats_now(void)
{
    struct dist_stats s;

    assert_int_equal(dist_stats_get(&s), 0);
    return s;
}

/* ---- one waiter --------------------------------------------------------------- */

/* One hand-off to a lone waiter on h (its name set): the counters it left. */
static struct dist_stats lone_handoff(struct held *h)
{
    struct fx_locker l;

    hold_elsewhere(h);
    dist_stats_reset();
    start_waiter(&l, h, 20.0);
    let_go_and_check(h, &l);
    return stats_now();
}

/* A lone waiter reads its release message itself, and is woken by it. */
static void test_lone_waiter_reads_itself(void **state)
{
    struct held h;
    struct dist_stats s;

    (void)state;
    NAME(h.name, "m");
    s = lone_handoff(&h);
    assert_true(s.pubsub_messages >= 1);
    assert_true(s.pubsub_direct >= 1);
    assert_true(s.pubsub_direct <= s.pubsub_messages);
    assert_int_equal(dist_mutex_destroy(&h.m), 0);
}

/* DISTLOCK_DIRECT_WAKE=0: the pub/sub thread reads every message, and
 * still wakes the waiter.  The library reads its environment once, so
 * this program runs again with it set, this test alone. */
static void test_env_off(void **state)
{
    struct held h;
    struct dist_stats s;

    (void)state;
    if (on_valgrind() && !rerun_child()) {
        /* /proc/self/exe is valgrind's tool there, which refuses to run */
        print_message(
            "  skipped under valgrind: it runs the program again\n");
        skip();
    }
    if (rerun_child()) {
        NAME(h.name, "m");
        s = lone_handoff(&h);
        assert_true(s.pubsub_messages >= 1);
        assert_int_equal(s.pubsub_direct, 0);
        assert_int_equal(dist_mutex_destroy(&h.m), 0);
        return;
    }
    rerun_with_env("test_wake", "TEST_WAKE_FILTER", __func__,
                   "DISTLOCK_DIRECT_WAKE", "0");
}

/* A message for a channel no thread waits on wakes the pub/sub thread
 * alone, and is counted so (pubsub_unwaited): a lone waiter's channel
 * stays subscribed a moment after its wait, and hears its own release
 * and one more message then.  The release it waited for is not such a
 * one.  In a program of its own with DISTLOCK_DIRECT_WAKE=0: a message a
 * lent connection brought in after its waiter was woken is read at the
 * pub/sub thread's next turn, which may fall in the next test (an earlier
 * test's release counted here).  A loaded machine may let the channel go
 * before the test's own message: a fresh lock then, three times at
 * most. */
static void test_message_nobody_waits_on(void **state)
{
    struct held h;
    struct dist_stats s;
    long long heard = 0;
    double end;
    redisReply *x;
    int i;

    (void)state;
    if (on_valgrind() && !rerun_child()) {
        print_message(
            "  skipped under valgrind: it runs the program again\n");
        skip();
    }
    if (!rerun_child()) {
        rerun_with_env("test_wake", "TEST_WAKE_FILTER", __func__,
                       "DISTLOCK_DIRECT_WAKE", "0");
        return;
    }
    for (i = 0; i < 3 && heard != 1; i++) {
        char tag[8];
        snprintf(tag, sizeof tag, "m%d", i);
        NAME(h.name, tag);
        lone_handoff(&h);
        x = tu_cmd(&r, "PUBLISH", h.chan, "0", NULL);
        assert_non_null(x);
        heard = x->integer;
        freeReplyObject(x);
        if (heard != 1) {
            assert_int_equal(dist_mutex_destroy(&h.m), 0);
            continue;
        }
        /* the one it waited for, its own release, the test's; then
         * nothing more once the channel is let go */
        end = tu_now() + slack(5.0);
        while (stats_now().pubsub_messages < 3 && tu_now() < end)
            tu_sleep_ms(5);
        assert_int_equal(await_numsub(h.chan, 0, slack(5.0)), 0);
        s = stats_now();
        print_message("  %llu messages, %llu of them for no waiter\n",
                      (unsigned long long)s.pubsub_messages,
                      (unsigned long long)s.pubsub_unwaited);
        assert_int_equal(s.pubsub_messages, 3);
        assert_int_equal(s.pubsub_unwaited, 2);
        assert_int_equal(s.pubsub_direct, 0);
        assert_int_equal(dist_mutex_destroy(&h.m), 0);
    }
    assert_int_equal(heard, 1);
}

/* ---- the thread needs the connection back ------------------------------------ */

/* While a waiter on X has the connection, a waiter on Y needs Y
 * subscribed: the thread takes the connection back to send it, and both
 * are woken by their own release. */
static void test_new_channel_while_lent(void **state)
{
    struct held x, y;
    struct fx_locker lx, ly;

    (void)state;
    NAME(x.name, "x");
    NAME(y.name, "y");
    hold_elsewhere(&x);
    hold_elsewhere(&y);
    start_waiter(&lx, &x, 20.0);
    start_waiter(&ly, &y, 20.0);
    let_go_and_check(&y, &ly);
    let_go_and_check(&x, &lx);
    assert_int_equal(dist_mutex_destroy(&x.m), 0);
    assert_int_equal(dist_mutex_destroy(&y.m), 0);
}

/* The pub/sub connection is killed while a waiter reads it: the thread
 * connects again, subscribes again and wakes the waiter to try (a
 * resync); the release that follows wakes it. */
static void test_killed_while_lent(void **state)
{
    struct held h;
    struct fx_locker l;
    struct dist_stats s;
    redisReply *x;

    (void)state;
    NAME(h.name, "m");
    hold_elsewhere(&h);
    start_waiter(&l, &h, 30.0);
    dist_stats_reset();
    x = tu_cmd(&r, "CLIENT", "KILL", "TYPE", "pubsub", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    assert_true(x->integer >= 1);
    freeReplyObject(x);
    assert_int_equal(await_numsub(h.chan, 1, slack(5.0)), 1);
    tu_sleep_ms(300);
    let_go_and_check(&h, &l);
    s = stats_now();
    assert_true(s.pubsub_resyncs >= 1);
    assert_int_equal(dist_mutex_destroy(&h.m), 0);
}

/* dist_shutdown while a waiter reads the connection returns at once (the
 * thread takes it back before it ends), and the library works after. */
static void test_shutdown_while_lent(void **state)
{
    struct held h;
    struct fx_locker l;
    double t0, el;

    (void)state;
    NAME(h.name, "m");
    hold_elsewhere(&h);
    start_waiter(&l, &h, 1.5);
    t0 = tu_now();
    dist_shutdown();
    el = tu_now() - t0;
    fx_locker_join(&l);
    assert_dbl_range(el, 0.0, slack(1.0));
    assert_int_equal(l.rc, ETIMEDOUT);
    let_go(&h);
    assert_int_equal(dist_mutex_lock(&h.m), 0);
    assert_int_equal(dist_mutex_unlock(&h.m), 0);
    assert_int_equal(dist_mutex_destroy(&h.m), 0);
}

/* ---- other processes ------------------------------------------------------------ */

struct child_report {
    int rc;
    double t; /* tu_now() when its lock returned */
};

/* fork while a thread of this process reads the connection: the child
 * makes its own, and is woken by its own release message; the parent's
 * waiter is woken by its own after that. */
static void test_fork_while_lent(void **state)
{
    struct held x, y;
    struct fx_locker l;
    struct child_report *rep;
    double t;
    pid_t pid;
    int st;

    (void)state;
    NAME(x.name, "x");
    NAME(y.name, "y");
    hold_elsewhere(&x);
    hold_elsewhere(&y);
    rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(rep != MAP_FAILED);
    rep->rc = -1;
    start_waiter(&l, &x, 30.0);
    pid = fork();
    if (pid == 0) {
        struct timespec ts = realtime_in(20.0);
        rep->rc = dist_mutex_timedlock(&y.m, &ts);
        rep->t = tu_now();
        if (rep->rc == 0)
            dist_mutex_unlock(&y.m);
        _exit(0); /* as every child here: no leak check of the parent's
                     * state, which a child abandons on purpose */
    }
    assert_true(pid > 0);
    assert_int_equal(await_numsub(y.chan, 1, slack(5.0)), 1);
    tu_sleep_ms(300);
    t = let_go(&y);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(child_exit_ok(st, 0));
    assert_int_equal(rep->rc, 0);
    assert_dbl_range(rep->t - t, 0.0, slack(1.0));
    let_go_and_check(&x, &l);
    munmap(rep, sizeof *rep);
    assert_int_equal(dist_mutex_destroy(&x.m), 0);
    assert_int_equal(dist_mutex_destroy(&y.m), 0);
}

/* ---- many waiters ----------------------------------------------------------------- */

#define CROWD_THREADS 3
#define CROWD_ROUNDS  20

struct crowd {
    atomic_int inside;
    atomic_int overlaps;
    atomic_int done;
    atomic_int errors;
};

struct crowd_arg {
    struct crowd *c;
    dist_mutex_t *m;
};

static void *crowd_main(void *arg)
{
    struct crowd_arg *a = arg;
    int i;

    for (i = 0; i < CROWD_ROUNDS; i++) {
        if (dist_mutex_lock(a->m) != 0) {
            atomic_fetch_add(&a->c->errors, 1);
            return NULL;
        }
        if (atomic_fetch_add(&a->c->inside, 1) != 0)
            atomic_fetch_add(&a->c->overlaps, 1);
        tu_sleep_ms(2);
        atomic_fetch_sub(&a->c->inside, 1);
        if (dist_mutex_unlock(a->m) != 0)
            atomic_fetch_add(&a->c->errors, 1);
        atomic_fetch_add(&a->c->done, 1);
    }
    return NULL;
}

static void crowd_run(struct crowd *c, dist_mutex_t *m)
{
    struct crowd_arg a = { c, m };
    pthread_t th[CROWD_THREADS];
    int i;

    for (i = 0; i < CROWD_THREADS; i++)
        if (pthread_create(&th[i], NULL, crowd_main, &a) != 0) {
            atomic_fetch_add(&c->errors, 1);
            th[i] = pthread_self();
        }
    for (i = 0; i < CROWD_THREADS; i++)
        if (!pthread_equal(th[i], pthread_self()))
            pthread_join(th[i], NULL);
}

/* Three threads in each of two processes on one mutex: one of a process's
 * waiters reads the connection, the others sleep and are woken through
 * it.  Nobody is ever inside with another, and every wait ends by a
 * release message: a missed one would sleep out the 30 s lease. */
static void test_crowd_two_processes(void **state)
{
    char name[200];
    dist_mutex_t m;
    struct crowd *c;
    double t0;
    pid_t pid;
    int st;

    (void)state;
    NAMED_LOCK(dist_mutex_init, m, name, "m");
    c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(c != MAP_FAILED);
    memset(c, 0, sizeof *c);
    t0 = tu_now();
    pid = fork();
    if (pid == 0) {
        crowd_run(c, &m);
        _exit(0);
    }
    assert_true(pid > 0);
    crowd_run(c, &m);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(child_exit_ok(st, 0));
    print_message("  %d sections in %.2f s\n", atomic_load(&c->done),
                  tu_now() - t0);
    assert_int_equal(atomic_load(&c->errors), 0);
    assert_int_equal(atomic_load(&c->overlaps), 0);
    assert_int_equal(atomic_load(&c->done), 2 * CROWD_THREADS * CROWD_ROUNDS);
    assert_dbl_range(tu_now() - t0, 0.0, slack(25.0));
    munmap(c, sizeof *c);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- registered waiters of a plain mutex ------------------------------------------ */

#define OTHER "someone-else:1"

/* A lock of its own held by another distlock owner that took it while
 * waiters were registered: its mark is among them (prelude_wake.lua). */
struct marked {
    struct held h;
    char waiters[260];
    char prefix[270]; /* "<waiters>:": a waiter's own channel */
};

static void hold_marked(struct marked *k)
{
    redisReply *x;

    hold_elsewhere(&k->h);
    snprintf(k->waiters, sizeof k->waiters, "distlock_mutex_waiters:{%s}",
             k->h.name);
    snprintf(k->prefix, sizeof k->prefix, "%s:", k->waiters);
    x = tu_cmd(&r, "ZADD", k->waiters, "-1", OTHER, NULL);
    assert_non_null(x);
    freeReplyObject(x);
    x = tu_cmd(&r, "PEXPIRE", k->waiters, "60000", NULL);
    assert_non_null(x);
    freeReplyObject(x);
}

/* The other owner's unlock, the library's own script: {0, woken}. */
static long long release_marked(const struct marked *k)
{
    redisReply *x =
        run_script("mutex_unlock", 3, k->h.name, k->h.chan, k->waiters,
                   "60000", OTHER, "publish", "0", "1", NULL);
    long long woken;

    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->element[0]->integer, 0);
    woken = x->element[1]->integer;
    freeReplyObject(x);
    return woken;
}

/* Channels subscribed whose name starts with prefix. */
static long long own_channels(const char *prefix)
{
    char pat[300];
    redisReply *x;
    long long n;

    snprintf(pat, sizeof pat, "%s*", prefix);
    x = tu_cmd(&r, "PUBSUB", "CHANNELS", pat, NULL);
    assert_non_null(x);
    n = x->type == REDIS_REPLY_ARRAY ? (long long)x->elements : -1;
    freeReplyObject(x);
    return n;
}

/* Waits until n waiters are registered beside the mark, each listening on
 * its own channel (secs at most). */
static void await_registered(const struct marked *k, long long n, double secs)
{
    double end = tu_now() + secs;

    while ((tu_cmd_int(&r, "ZCARD", k->waiters, NULL) != n + 1 ||
            own_channels(k->prefix) != n) &&
           tu_now() < end)
        tu_sleep_ms(10);
    assert_int_equal(tu_cmd_int(&r, "ZCARD", k->waiters, NULL), n + 1);
    assert_int_equal(own_channels(k->prefix), n);
    tu_sleep_ms(300);
}

/* An entry for owner among k's waiters, live, and ahead of the waiters
 * the library registered (their windows end DISTLOCK_WAITER_MS, 5 s,
 * after their tries): a release picks it first. */
static void add_entry(const struct marked *k, const char *owner)
{
    redisReply *x = tu_cmd(&r, "TIME", NULL);
    long long ms;
    char score[32];

    assert_non_null(x);
    ms = atoll(x->element[0]->str) * 1000 + atoll(x->element[1]->str) / 1000;
    freeReplyObject(x);
    snprintf(score, sizeof score, "%lld", ms + 2000);
    x = tu_cmd(&r, "ZADD", k->waiters, score, owner, NULL);
    assert_non_null(x);
    freeReplyObject(x);
}

#define WAITERS 3

/* While a distlock owner that left its mark holds the lock, its waiters
 * register and listen on channels of their own, not on the lock's (which
 * every process with a waiter used to hear, and try on, at every
 * release); its release wakes one of them, whose own release wakes the
 * next: each is woken by a message (the lease is 60 s). */
static void test_release_wakes_a_registered_waiter(void **state)
{
    struct fx_locker l[WAITERS];
    struct marked k;
    double t;
    int i;

    (void)state;
    NAME(k.h.name, "m");
    hold_marked(&k);
    for (i = 0; i < WAITERS; i++)
        fx_locker_start(&l[i], &k.h.m, 20.0);
    await_registered(&k, WAITERS, slack(5.0));
    assert_int_equal(pubsub_numsub(&r, k.h.chan), 0);
    t = tu_now();
    assert_int_equal(release_marked(&k), 1);
    for (i = 0; i < WAITERS; i++) {
        fx_locker_join(&l[i]);
        assert_int_equal(l[i].rc, 0);
        assert_dbl_range(l[i].t - t, 0.0, slack(1.0));
    }
    /* nothing left behind: marks and entries went with the releases */
    assert_int_equal(tu_cmd_int(&r, "EXISTS", k.waiters, NULL), 0);
    assert_int_equal(dist_mutex_destroy(&k.h.m), 0);
}

/* The marked mutex k (named) held, l waiting for it (registered), and
 * behind it the entry of a waiter `entry` that is not there. */
static void waiter_then_entry(struct marked *k, struct fx_locker *l,
                              const char *entry)
{
    hold_marked(k);
    fx_locker_start(l, &k->h.m, 20.0);
    await_registered(k, 1, slack(5.0));
    add_entry(k, entry);
}

/* A registered waiter nobody hears (its process died) is passed over: the
 * release tells the next one. */
static void test_release_skips_a_waiter_nobody_hears(void **state)
{
    struct fx_locker l;
    struct marked k;
    redisReply *x;
    double t;

    (void)state;
    NAME(k.h.name, "m");
    waiter_then_entry(&k, &l, "dead-process:1");
    t = tu_now();
    assert_int_equal(release_marked(&k), 1);
    fx_locker_join(&l);
    assert_int_equal(l.rc, 0);
    assert_dbl_range(l.t - t, 0.0, slack(1.0));
    x = tu_cmd(&r, "ZSCORE", k.waiters, "dead-process:1", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_NIL);
    freeReplyObject(x);
    assert_int_equal(dist_mutex_destroy(&k.h.m), 0);
}

/* A waiter that a release woke and that gave up before it tried (its
 * deadline, an error) leaves, and passes the wake-up on: the others are
 * not left to sleep out the lease.  The one that leaves is an entry
 * whose channel a plain subscriber hears, so that the release reaches
 * it; its leaving is the library's own script.  Only it is woken: the
 * real waiter sleeps on until then. */
static void test_waiter_that_leaves_passes_its_wake_on(void **state)
{
    struct fx_locker l;
    struct marked k;
    char chan[400];
    redisContext *sub;
    redisReply *x;
    double t;

    (void)state;
    NAME(k.h.name, "m");
    waiter_then_entry(&k, &l, "gone:1");
    snprintf(chan, sizeof chan, "%sgone:1", k.prefix);
    sub = tu_redis_admin(&r);
    assert_non_null(sub);
    x = redisCommand(sub, "SUBSCRIBE %s", chan);
    assert_non_null(x);
    freeReplyObject(x);
    assert_int_equal(release_marked(&k), 1);
    tu_sleep_ms(500);
    assert_int_equal(atomic_load(&l.done), 0);
    t = tu_now();
    x = run_script("mutex_cancel", 2, k.h.name, k.waiters, "gone:1",
                   "publish", NULL);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    fx_locker_join(&l);
    assert_int_equal(l.rc, 0);
    assert_dbl_range(l.t - t, 0.0, slack(1.0));
    redisFree(sub);
    assert_int_equal(dist_mutex_destroy(&k.h.m), 0);
}

/* A waiter whose deadline came leaves the registered waiters. */
static void test_timed_out_waiter_leaves(void **state)
{
    struct timespec dl;
    struct marked k;

    (void)state;
    NAME(k.h.name, "m");
    hold_marked(&k);
    dl = fx_clock_in(CLOCK_REALTIME, 0.5);
    assert_int_equal(dist_mutex_timedlock(&k.h.m, &dl), ETIMEDOUT);
    assert_int_equal(tu_cmd_int(&r, "ZCARD", k.waiters, NULL), 1);
    assert_int_equal(dist_mutex_destroy(&k.h.m), 0);
}

/* ---- cancellation --------------------------------------------------------------- */

/* GCC 12's AddressSanitizer runtime reports its own sigaltstack call as a
 * stack overflow when a cancelled thread unwinds to its cleanup handlers,
 * so the cancellation tests run in the other builds only (SKIP_UNDER_ASAN,
 * testhelp.h). */

/* ThreadSanitizer loses a thread's lock calls once it was cancelled inside
 * one of its interceptors (a borrower's poll), and then reports the
 * cleanup handlers' writes under P.mu and R.mu as races; the cancellation
 * in a futex sleep (no interceptor) runs under it. */
#define TSAN_WHY "it loses a thread's locks once cancelled in poll"

struct canceled {
    dist_mutex_t *m;
    dist_cond_t *cv;
    dist_sem_t *sem;
    atomic_int returned; /* the call returned */
    atomic_int cleaned;  /* the cleanup handler ran */
    int rc;              /* what the call gave */
    int unlock_rc;       /* cond: the cleanup's unlock of the mutex */
};

static void note_cleanup(void *arg)
{
    struct canceled *c = arg;

    atomic_store(&c->cleaned, 1);
}

/* Blocks in dist_mutex_lock, with a cleanup handler that notes a cancel. */
static void *cancel_locker(void *arg)
{
    struct canceled *c = arg;

    pthread_cleanup_push(note_cleanup, c);
    c->rc = dist_mutex_lock(c->m);
    atomic_store(&c->returned, 1);
    if (c->rc == 0)
        dist_mutex_unlock(c->m);
    pthread_testcancel(); /* where the request made meanwhile acts */
    pthread_cleanup_pop(0);
    return NULL;
}

/* Nothing of the library was left taken by a cancel: m locks and
 * unlocks, and the library shuts down at once (then m goes). */
static void works_on_then_shuts_down(dist_mutex_t *m)
{
    double t;

    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    t = tu_now();
    dist_shutdown();
    assert_dbl_range(tu_now() - t, 0.0, slack(1.0));
    assert_int_equal(dist_mutex_destroy(m), 0);
}

/* pthread_mutex_lock is not a cancellation point, nor is dist_mutex_lock:
 * a request made while the thread waits (reading the pub/sub connection
 * itself, lent to it) acts only at the thread's next cancellation point,
 * after the lock was taken and let go; and the library works on. */
static void test_lock_is_not_a_cancellation_point(void **state)
{
    struct held h;
    struct canceled c;
    pthread_t th;
    void *res = NULL;
    double t;

    (void)state;
    SKIP_UNDER_ASAN();
    NAME(h.name, "m");
    hold_elsewhere(&h);
    memset(&c, 0, sizeof c);
    c.m = &h.m;
    c.rc = -1;
    assert_int_equal(pthread_create(&th, NULL, cancel_locker, &c), 0);
    assert_int_equal(await_numsub(h.chan, 1, slack(5.0)), 1);
    tu_sleep_ms(300);
    assert_int_equal(pthread_cancel(th), 0);
    tu_sleep_ms(300);
    assert_int_equal(atomic_load(&c.cleaned), 0); /* not inside the call */
    assert_int_equal(atomic_load(&c.returned), 0);
    t = let_go(&h);
    assert_int_equal(pthread_join(th, &res), 0);
    assert_true(res == PTHREAD_CANCELED);
    assert_int_equal(atomic_load(&c.returned), 1);
    assert_int_equal(c.rc, 0);
    assert_int_equal(atomic_load(&c.cleaned), 1);
    assert_dbl_range(tu_now() - t, 0.0, slack(2.0));
    assert_int_equal(tu_cmd_int(&r, "EXISTS", h.name, NULL), 0);
    /* nothing of the library was left taken by the cancel */
    works_on_then_shuts_down(&h.m);
}

static void unlock_cleanup(void *arg)
{
    struct canceled *c = arg;

    c->unlock_rc = dist_mutex_unlock(c->m);
    atomic_store(&c->cleaned, 1);
}

/* Holds the mutex, asks for its own cancel, then waits on the condition:
 * the wait is a cancellation point, so the request acts as it begins,
 * with the mutex still held for the cleanup handler to let go. */
static void *cancel_cond_waiter(void *arg)
{
    struct canceled *c = arg;

    if (dist_mutex_lock(c->m) != 0)
        return NULL;
    pthread_cleanup_push(unlock_cleanup, c);
    pthread_cancel(pthread_self());
    c->rc = dist_cond_wait(c->cv, c->m);
    atomic_store(&c->returned, 1);
    pthread_cleanup_pop(1);
    return NULL;
}

/* The same for a semaphore: nothing taken. */
static void *cancel_sem_waiter(void *arg)
{
    struct canceled *c = arg;

    pthread_cleanup_push(note_cleanup, c);
    pthread_cancel(pthread_self());
    c->rc = dist_sem_wait(c->sem);
    atomic_store(&c->returned, 1);
    pthread_cleanup_pop(0);
    return NULL;
}

/* pthread_cond_wait and sem_wait are cancellation points; their distlock
 * forms act on a request as they begin, before anything changed: the
 * mutex is still held when the cleanup handler runs, and no permit is
 * taken. */
static void test_waits_are_cancellation_points(void **state)
{
    char name[200], cname[220], sname[220];
    dist_mutex_t m;
    dist_cond_t cv;
    dist_sem_t sem;
    struct canceled c;
    pthread_t th;
    void *res = NULL;
    int v = -1;

    (void)state;
    SKIP_UNDER_ASAN();
    NAMED_LOCK(dist_mutex_init, m, name, "m");
    snprintf(cname, sizeof cname, "{%s}:cv", name);
    snprintf(sname, sizeof sname, "%s:sem", name);
    assert_int_equal(dist_cond_init(&cv, cname, NULL), 0);
    assert_int_equal(dist_sem_init(&sem, sname, 0, NULL), 0);

    memset(&c, 0, sizeof c);
    c.m = &m;
    c.cv = &cv;
    c.rc = c.unlock_rc = -1;
    assert_int_equal(pthread_create(&th, NULL, cancel_cond_waiter, &c), 0);
    assert_int_equal(pthread_join(th, &res), 0);
    assert_true(res == PTHREAD_CANCELED);
    assert_int_equal(atomic_load(&c.returned), 0);
    assert_int_equal(atomic_load(&c.cleaned), 1);
    assert_int_equal(c.unlock_rc, 0); /* it held the mutex */
    assert_int_equal(tu_cmd_int(&r, "EXISTS", name, NULL), 0);

    memset(&c, 0, sizeof c);
    c.sem = &sem;
    c.rc = -1;
    assert_int_equal(pthread_create(&th, NULL, cancel_sem_waiter, &c), 0);
    assert_int_equal(pthread_join(th, &res), 0);
    assert_true(res == PTHREAD_CANCELED);
    assert_int_equal(atomic_load(&c.returned), 0);
    assert_int_equal(atomic_load(&c.cleaned), 1);
    assert_int_equal(dist_sem_getvalue(&sem, &v), 0);
    assert_int_equal(v, 0);

    assert_int_equal(dist_sem_destroy(&sem), 0);
    assert_int_equal(dist_cond_destroy(&cv), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- cancelled in a condition wait ---------------------------------------------- */

/* A thread that locks m and waits on cv (timed: 60 s), with a cleanup
 * handler that lets m go. */
struct cwaiter {
    struct canceled c;
    int timed;
    atomic_int waiting; /* about to wait */
    double woke;        /* when the wait returned (tu_now) */
};

static void *cwaiter_body(void *arg)
{
    struct cwaiter *w = arg;
    struct timespec dl;

    if (dist_mutex_lock(w->c.m) != 0)
        return NULL;
    pthread_cleanup_push(unlock_cleanup, &w->c);
    atomic_store(&w->waiting, 1);
    if (w->timed) {
        dl = realtime_in(60);
        w->c.rc = dist_cond_timedwait(w->c.cv, w->c.m, &dl);
    } else {
        w->c.rc = dist_cond_wait(w->c.cv, w->c.m);
    }
    w->woke = tu_now();
    atomic_store(&w->c.returned, 1);
    pthread_cleanup_pop(1);
    return NULL;
}

static void cwaiter_start(struct cwaiter *w, pthread_t *th, dist_mutex_t *m,
                          dist_cond_t *cv, int timed)
{
    memset(w, 0, sizeof *w);
    w->c.m = m;
    w->c.cv = cv;
    w->c.rc = w->c.unlock_rc = -1;
    w->timed = timed;
    assert_int_equal(pthread_create(th, NULL, cwaiter_body, w), 0);
}

/* Waits up to secs for key to be a ZSET of n members (n 0: gone). */
static int await_zcard(const char *key, long long n, double secs)
{
    double end = tu_now() + secs;

    while (tu_cmd_int(&r, "ZCARD", key, NULL) != n)
        if (tu_now() >= end)
            return 0;
        else
            tu_sleep_ms(10);
    return 1;
}

/* Cancels a thread asleep in a condition wait and joins it within a
 * generous bound (a wait that never goes fails here rather than hang):
 * its cleanup handler ran holding the mutex, which it let go. */
static void cancel_and_join(pthread_t th, struct cwaiter *w)
{
    struct timespec until;
    void *res = NULL;

    assert_int_equal(pthread_cancel(th), 0);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)slack(10.0);
    assert_int_equal(pthread_timedjoin_np(th, &res, &until), 0);
    assert_true(res == PTHREAD_CANCELED);
    assert_int_equal(atomic_load(&w->c.returned), 0);
    assert_int_equal(atomic_load(&w->c.cleaned), 1);
    assert_int_equal(w->c.unlock_rc, 0); /* it held the mutex */
}

struct cnames {
    char m[200], c[220], waiters[260], queue[260], signalled[260], chan[260];
};

static void cnames_for(struct cnames *n, const char *test)
{
    test_lock_name(n->m, sizeof n->m, "test_wake", test, "m");
    snprintf(n->c, sizeof n->c, "{%s}:cv", n->m);
    snprintf(n->waiters, sizeof n->waiters, "distlock_cond_waiters:%s", n->c);
    snprintf(n->queue, sizeof n->queue, "distlock_cond_queue:%s", n->c);
    snprintf(n->signalled, sizeof n->signalled, "distlock_cond_signalled:%s",
             n->c);
    snprintf(n->chan, sizeof n->chan, "distlock_cond:%s", n->c);
}

/* A test's mutex and condition, and the waiters it starts on them. */
struct scene {
    struct cnames n;
    dist_mutex_t m;
    dist_cond_t cv;
    struct cwaiter w[2];
    pthread_t th[2];
};

static void scene_open(struct scene *s, const char *test)
{
    cnames_for(&s->n, test);
    assert_int_equal(dist_mutex_init(&s->m, s->n.m, NULL), 0);
    assert_int_equal(dist_cond_init(&s->cv, s->n.c, NULL), 0);
}

/* Waiter i (the second one's wait timed) started, and in the queue. */
static void scene_waiter(struct scene *s, int i)
{
    cwaiter_start(&s->w[i], &s->th[i], &s->m, &s->cv, i);
    assert_true(await_zcard(s->n.waiters, i + 1, slack(5.0)));
}

/* Whether the lone waiter on chan reads the lent connection itself: a
 * message that finds no mark (the waiter looks, then sleeps again, now
 * borrowing the connection if it slept on the channel) is read by it
 * (pubsub_direct), within a bound.  Asleep again after it. */
static int reads_itself(const char *chan)
{
    int i;

    dist_stats_reset();
    for (i = 0; i < 3 && stats_now().pubsub_direct == 0; i++) {
        redisReply *x = tu_cmd(&r, "PUBLISH", chan, "0", NULL);
        assert_non_null(x);
        freeReplyObject(x);
        tu_sleep_ms((int)(slack(1.0) * 300));
    }
    return stats_now().pubsub_direct >= 1;
}

/* pthread_cond_wait and timedwait are cancellation points all through:
 * a thread asleep in either goes when cancelled, after it took the mutex
 * back for its cleanup handler (as glibc does), and leaves nothing
 * behind: no waiter in Redis, no subscription, no hold, no local waiter
 * (destroy succeeds).  Two waiters: while both wait, each sleeps until
 * woken (the connection is lent to a lone waiter only); the second is
 * cancelled so, then the first, left alone, reads the pub/sub connection
 * itself and is cancelled there: each kind of sleep is cancelled. */
static void test_cond_wait_cancelled_while_asleep(void **state)
{
    struct scene s;
    double t;

    (void)state;
    SKIP_UNDER_ASAN();
    SKIP_UNDER_TSAN(TSAN_WHY);
    scene_open(&s, __func__);
    scene_waiter(&s, 0);
    scene_waiter(&s, 1);
    assert_int_equal(await_numsub(s.n.chan, 1, slack(5.0)), 1);
    tu_sleep_ms(300); /* both asleep by now */

    t = tu_now();
    cancel_and_join(s.th[1], &s.w[1]);
    assert_dbl_range(tu_now() - t, 0.0, slack(2.0));
    assert_int_equal(tu_cmd_int(&r, "ZCARD", s.n.waiters, NULL), 1);
    assert_int_equal(tu_cmd_int(&r, "LLEN", s.n.queue, NULL), 1);
    assert_true(reads_itself(s.n.chan));
    t = tu_now();
    cancel_and_join(s.th[0], &s.w[0]);
    assert_dbl_range(tu_now() - t, 0.0, slack(2.0));

    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.m, NULL), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.waiters, NULL), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.queue, NULL), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.signalled, NULL), 0);
    assert_int_equal(await_numsub(s.n.chan, 0, slack(5.0)), 0);
    assert_int_equal(dist_cond_destroy(&s.cv), 0);
    /* the library works on */
    works_on_then_shuts_down(&s.m);
}

/* POSIX: a thread cancelled in a condition wait consumes no signal that
 * another waiter could take.  The oldest waiter is marked signalled
 * straight in Redis, as a signal would, without the message that wakes
 * it (its next look is 30 s away); it is cancelled before it saw the
 * mark, so its leaving finds the mark and passes it on: the other waiter
 * wakes at once, long before its next look or its deadline. */
static void test_cancelled_wait_passes_its_signal_on(void **state)
{
    struct scene s;
    redisReply *x;
    char owner[128];
    double t;

    (void)state;
    SKIP_UNDER_ASAN();
    fx_dirty = 1;
    assert_int_equal(dist_set_waiter_ms(30000), 0);
    scene_open(&s, __func__);
    scene_waiter(&s, 0);
    scene_waiter(&s, 1);
    tu_sleep_ms(300);

    x = tu_cmd(&r, "LPOP", s.n.queue, NULL); /* the oldest: a */
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    snprintf(owner, sizeof owner, "%s", x->str);
    freeReplyObject(x);
    assert_int_equal(tu_cmd_int(&r, "SADD", s.n.signalled, owner, NULL), 1);
    t = tu_now();
    cancel_and_join(s.th[0], &s.w[0]);
    assert_true(pthread_join(s.th[1], NULL) == 0);
    assert_int_equal(s.w[1].c.rc, 0);
    assert_int_equal(s.w[1].c.unlock_rc, 0);
    assert_dbl_range(s.w[1].woke - t, 0.0, slack(5.0));

    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.m, NULL), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.waiters, NULL), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", s.n.signalled, NULL), 0);
    assert_int_equal(dist_cond_destroy(&s.cv), 0);
    assert_int_equal(dist_mutex_destroy(&s.m), 0);
    fx_restore_defaults(NULL);
}

static void on_usr1(int sig)
{
    (void)sig;
}

/* Five handlers run on th. */
static void signal_five_times(pthread_t th)
{
    int i;

    for (i = 0; i < 5; i++) {
        assert_int_equal(pthread_kill(th, SIGUSR1), 0);
        tu_sleep_ms(50);
    }
}

/* A condition wait whose sleeps are cancellation points (cancellation is
 * on in a new thread) is no EINTR point: POSIX gives the condition waits
 * no EINTR, and the sleeps the semaphore waits share with them end on a
 * signal handler.  A lone waiter reading the lent connection, then two
 * asleep on the channel, each interrupted by handlers without SA_RESTART:
 * they sleep on, and a broadcast wakes them with 0. */
static void test_cond_wait_sleeps_on_after_a_signal(void **state)
{
    struct sigaction sa, old;
    struct scene s;

    (void)state;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    scene_open(&s, __func__);
    scene_waiter(&s, 0);
    assert_int_equal(await_numsub(s.n.chan, 1, slack(5.0)), 1);
    assert_true(reads_itself(s.n.chan));
    signal_five_times(s.th[0]);
    tu_sleep_ms(300);
    assert_int_equal(atomic_load(&s.w[0].c.returned), 0);

    scene_waiter(&s, 1);
    tu_sleep_ms(300); /* both asleep by now */
    signal_five_times(s.th[0]);
    signal_five_times(s.th[1]);
    tu_sleep_ms(300);
    assert_int_equal(atomic_load(&s.w[0].c.returned), 0);
    assert_int_equal(atomic_load(&s.w[1].c.returned), 0);
    assert_int_equal(tu_cmd_int(&r, "ZCARD", s.n.waiters, NULL), 2);

    assert_int_equal(dist_mutex_lock(&s.m), 0);
    assert_int_equal(dist_cond_broadcast(&s.cv), 0);
    assert_int_equal(dist_mutex_unlock(&s.m), 0);
    assert_int_equal(pthread_join(s.th[0], NULL), 0);
    assert_int_equal(pthread_join(s.th[1], NULL), 0);
    assert_int_equal(s.w[0].c.rc, 0);
    assert_int_equal(s.w[1].c.rc, 0);
    assert_int_equal(s.w[0].c.unlock_rc, 0);
    assert_int_equal(s.w[1].c.unlock_rc, 0);
    assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
    assert_int_equal(dist_cond_destroy(&s.cv), 0);
    assert_int_equal(dist_mutex_destroy(&s.m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_lone_waiter_reads_itself),
        T(test_env_off),
        T(test_message_nobody_waits_on),
        T(test_new_channel_while_lent),
        T(test_killed_while_lent),
        T(test_shutdown_while_lent),
        T(test_fork_while_lent),
        T(test_crowd_two_processes),
        T(test_release_wakes_a_registered_waiter),
        T(test_release_skips_a_waiter_nobody_hears),
        T(test_waiter_that_leaves_passes_its_wake_on),
        T(test_timed_out_waiter_leaves),
        T(test_lock_is_not_a_cancellation_point),
        T(test_waits_are_cancellation_points),
        T(test_cond_wait_cancelled_while_asleep),
        T(test_cancelled_wait_passes_its_signal_on),
        T(test_cond_wait_sleeps_on_after_a_signal),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_WAKE_FILTER");
}
