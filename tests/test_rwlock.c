/*
 * test_rwlock: dist_rwlock_* sharing and exclusion against a private
 * redis-server: readers share, a writer excludes, try and timed calls,
 * reentrance, downgrade, no upgrade, writer preference, a mixed load.
 * Holds that end without an unlock are test_rwlock_lease's, the lock as
 * Redis and other clients see it test_rwlock_layout's.
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

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_rwlock", __func__, tag)
#include "rwhelp.h"

#define NREADERS 8

struct sharer {
    dist_rwlock_t *rw;
    atomic_int *inside, *max_inside;
    int rc, unlock_rc;
};

static void *sharer_main(void *arg)
{
    struct sharer *s = arg;
    double t0;
    int n, m;

    s->rc = dist_rwlock_rdlock(s->rw);
    if (s->rc != 0)
        return NULL;
    n = atomic_fetch_add(s->inside, 1) + 1;
    while ((m = atomic_load(s->max_inside)) < n &&
           !atomic_compare_exchange_weak(s->max_inside, &m, n))
        ;
    /* stay until everyone is in (or 10 s): readers share */
    t0 = tu_now();
    while (atomic_load(s->max_inside) < NREADERS && tu_now() - t0 < 10.0)
        tu_sleep_ms(5);
    atomic_fetch_sub(s->inside, 1);
    s->unlock_rc = dist_rwlock_unlock(s->rw);
    return NULL;
}

static void test_many_readers(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char *owner, tk[400];
    struct sharer s[NREADERS];
    pthread_t th[NREADERS];
    atomic_int inside = 0, max_inside = 0;
    long long fields_held, ttl_key, ttl_lock;
    int i, mode_read;

    (void)state;

    /* the layout of one read hold */
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    mode_read = mode_is(name, "read");
    fields_held = hlen(name);
    owner = read_owner(name);
    assert_non_null(owner);
    tkey(tk, sizeof tk, name, owner, 1);
    ttl_lock = pttl(name); /* set by one script: same expiry */
    ttl_key = pttl(tk);
    assert_true(mode_read);
    assert_int_equal(fields_held, 2);
    assert_int_equal(hget_int(name, owner), 1);
    assert_in_range(ttl_key, 1, DEFAULT_WATCHDOG_MS);
    assert_true(ttl_lock >= ttl_key);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(key_exists(tk), 0);
    free(owner);

    for (i = 0; i < NREADERS; i++) {
        s[i] = (struct sharer){ rw, &inside, &max_inside, -1, -1 };
        assert_int_equal(pthread_create(&th[i], NULL, sharer_main, &s[i]), 0);
    }
    for (i = 0; i < NREADERS; i++)
        pthread_join(th[i], NULL);
    for (i = 0; i < NREADERS; i++) {
        assert_int_equal(s[i].rc, 0);
        assert_int_equal(s[i].unlock_rc, 0);
    }
    assert_int_equal(atomic_load(&max_inside), NREADERS);
}

static void test_writer_excludes(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char wfield[200];
    struct th rd, wr;
    double t0, el_rd, el_wr;
    int early_rd, early_wr;
    char *f[4];
    int n, i;

    (void)state;
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_true(mode_is(name, "write"));
    n = fields(name, f, 4);
    assert_int_equal(n, 1);
    snprintf(wfield, sizeof wfield, "%s", f[0]);
    for (i = 0; i < n; i++)
        free(f[i]);
    assert_true(strlen(wfield) > 6 &&
                strcmp(wfield + strlen(wfield) - 6, ":write") == 0);
    assert_int_equal(hget_int(name, wfield), 1);

    assert_int_equal(other_thread(rw, OP_TRYRD), EBUSY);
    assert_int_equal(other_thread(rw, OP_TRYWR), EBUSY);

    th_start(&rd, rw, OP_RD);
    th_start(&wr, rw, OP_WR);
    early_rd = th_wait(&rd, 0.5) == 0;
    early_wr = th_wait(&wr, 0.01) == 0;
    t0 = tu_now();
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    /* one of them gets it first; the other follows once it lets go */
    while (th_wait(&rd, 0.01) != 0 && th_wait(&wr, 0.01) != 0)
        if (tu_now() - t0 > 10.0)
            break;
    if (atomic_load(&rd.in)) {
        el_rd = rd.t_locked - t0;
        th_finish(&rd);
        assert_int_equal(th_wait(&wr, 10.0), 0);
        el_wr = wr.t_locked - t0;
        th_finish(&wr);
    } else {
        el_wr = wr.t_locked - t0;
        th_finish(&wr);
        assert_int_equal(th_wait(&rd, 10.0), 0);
        el_rd = rd.t_locked - t0;
        th_finish(&rd);
    }
    assert_false(early_rd);
    assert_false(early_wr);
    assert_int_equal(rd.rc, 0);
    assert_int_equal(wr.rc, 0);
    assert_int_equal(rd.unlock_rc, 0);
    assert_int_equal(wr.unlock_rc, 0);
    assert_dbl_range(el_rd, 0.0, slack(2.0));
    assert_dbl_range(el_wr, 0.0, slack(2.0));
}

static void test_try_busy(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);

    (void)state;

    assert_int_equal(dist_rwlock_tryrdlock(rw), 0);
    assert_int_equal(other_thread(rw, OP_TRYRD), 0); /* readers share */
    assert_int_equal(other_thread(rw, OP_TRYWR), EBUSY);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(key_exists(name), 0);

    assert_int_equal(dist_rwlock_trywrlock(rw), 0);
    assert_int_equal(other_thread(rw, OP_TRYRD), EBUSY);
    assert_int_equal(other_thread(rw, OP_TRYWR), EBUSY);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(other_thread(rw, OP_TRYWR), 0);
}

static void test_reentrant(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char tk[400], wfield[300];
    char *owner;
    int k;

    (void)state;
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(dist_rwlock_tryrdlock(rw), 0);
    owner = read_owner(name);
    assert_non_null(owner);
    assert_int_equal(hget_int(name, owner), 3);
    for (k = 1; k <= 3; k++) { /* one timeout key per read hold */
        tkey(tk, sizeof tk, name, owner, k);
        assert_int_equal(key_exists(tk), 1);
    }
    tkey(tk, sizeof tk, name, owner, 4);
    assert_int_equal(key_exists(tk), 0);

    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(hget_int(name, owner), 2);
    tkey(tk, sizeof tk, name, owner, 3);
    assert_int_equal(key_exists(tk), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(hget_int(name, owner), 1);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(key_exists(name), 0);
    tkey(tk, sizeof tk, name, owner, 1);
    assert_int_equal(key_exists(tk), 0);
    assert_int_equal(dist_rwlock_unlock(rw), EPERM);
    assert_true(dist_last_error()[0] != 0);

    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(dist_rwlock_trywrlock(rw), 0);
    snprintf(wfield, sizeof wfield, "%s:write", owner);
    assert_int_equal(hget_int(name, wfield), 3);
    assert_int_equal(hlen(name), 2);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(hget_int(name, wfield), 1);
    assert_int_equal(other_thread(rw, OP_TRYRD), EBUSY);
    fx_last_unlock(rw);
    assert_int_equal(other_thread(rw, OP_UNLOCK), EPERM);
    free(owner);
}

/* The reader of test_downgrade, in a forked child: rdlock on the parent's
 * object (a new owner), the time it got in, unlock. */
struct downgrade_arg {
    dist_rwlock_t *rw;
    double *t_in;
};

static void downgrade_child(void *arg)
{
    struct downgrade_arg *a = arg;
    int rc = dist_rwlock_rdlock(a->rw);

    a->t_in[0] = tu_now();
    if (rc != 0)
        _exit(3);
    _exit(dist_rwlock_unlock(a->rw) == 0 ? 0 : 4);
}

/* wrlock; rdlock; unlock leaves a read lock, and a reader blocked in another
 * process is woken by it and enters while the downgraded holder still
 * reads (it keeps its read hold until the reader has gone). */
static void test_downgrade(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    char wfield[300];
    double *t_in = shared(sizeof(double) * 2);
    struct downgrade_arg ta;
    int st = -1, subscribed, early, rc_try_wr, rc_try_rd;
    char *owner;
    double t0, el;
    pid_t pid;

    (void)state;
    assert_non_null(t_in);
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(dist_rwlock_rdlock(rw), 0); /* the writer may read */
    assert_true(mode_is(name, "write"));
    assert_int_equal(hlen(name), 3);
    owner = read_owner(name);
    assert_non_null(owner);
    snprintf(wfield, sizeof wfield, "%s:write", owner);
    assert_int_equal(hget_int(name, owner), 1);
    assert_int_equal(hget_int(name, wfield), 1);
    assert_int_equal(other_thread(rw, OP_TRYRD), EBUSY);

    ta.rw = rw;
    ta.t_in = t_in;
    pid = fork_started(downgrade_child, &ta);
    subscribed = wait_subscribed(name, 10.0);
    tu_sleep_ms(300); /* into its sleep */
    early = t_in[0] != 0;

    t0 = tu_now();
    assert_int_equal(dist_rwlock_unlock(rw), 0); /* the downgrade */
    while (t_in[0] == 0 && tu_now() - t0 < WOKEN_WITHIN_S)
        tu_sleep_ms(5);
    el = t_in[0] != 0 ? t_in[0] - t0 : 99;
    if (el == 99)
        kill(pid, SIGKILL); /* not woken: it sleeps on our lease */
    assert_int_equal(waitpid(pid, &st, 0), pid);

    assert_true(subscribed);
    assert_false(early);
    /* woken by the downgrade, not let in by the end of its sleep */
    assert_dbl_range(el, 0.0, WOKEN_WITHIN_S);
    if (!child_exit_ok(st, 0))
        fail_msg("child: status 0x%x", st);
    /* still a reader: others may read, nobody may write */
    assert_true(mode_is(name, "read"));
    assert_int_equal(hget_int(name, owner), 1);
    assert_int_equal(hget_int(name, wfield), -1);
    rc_try_wr = other_thread(rw, OP_TRYWR);
    rc_try_rd = other_thread(rw, OP_TRYRD);
    assert_int_equal(rc_try_wr, EBUSY);
    assert_int_equal(rc_try_rd, 0);
    fx_last_unlock(rw);
    free(owner);
    munmap(t_in, sizeof(double) * 2);
    print_message("downgrade: the blocked reader entered %.1f ms after the "
                  "unlock\n",
                  el * 1e3);
}

static void test_no_upgrade(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    struct timespec dl;
    double t0, el;
    int rc_wr, rc_timed, rc_try;
    char *owner;

    (void)state;
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    t0 = tu_now();
    rc_wr = dist_rwlock_wrlock(rw);
    dl = realtime_in(5.0);
    rc_timed = dist_rwlock_timedwrlock(rw, &dl);
    rc_try = dist_rwlock_trywrlock(rw);
    el = tu_now() - t0;
    assert_int_equal(rc_wr, EDEADLK);
    assert_int_equal(rc_timed, EDEADLK);
    assert_int_equal(rc_try, EBUSY);
    assert_dbl_range(el, 0.0, slack(1.0));
    owner = read_owner(name);
    assert_non_null(owner);
    assert_int_equal(hget_int(name, owner), 2); /* nothing changed */
    assert_int_equal(hlen(name), 2);
    free(owner);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
}

#define NBLOCKED 20

static void test_readers_behind_writer(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    const char *name = fx_name(rw);
    struct th t[NBLOCKED];
    atomic_int started = 0;
    double t0, t0s, worst = 0;
    int i, early = 0, subscribed, all_in = 0;
    long long holders = -1;

    (void)state;
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    for (i = 0; i < NBLOCKED; i++) {
        th_start(&t[i], rw, OP_RD);
    }
    (void)started;
    subscribed = wait_subscribed(name, 10.0);
    tu_sleep_ms(500); /* every reader into its sleep */
    for (i = 0; i < NBLOCKED; i++)
        if (th_wait(&t[i], 0.0) == 0)
            early++;

    t0 = tu_now();
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    t0s = tu_now();
    while (tu_now() - t0s < 10.0) {
        for (i = all_in = 0; i < NBLOCKED; i++)
            all_in += atomic_load(&t[i].in);
        if (all_in == NBLOCKED)
            break;
        tu_sleep_ms(5);
    }
    if (all_in == NBLOCKED)
        holders = hlen(name) - 1; /* all of them at once */
    for (i = 0; i < NBLOCKED; i++) {
        if (atomic_load(&t[i].in) && t[i].t_locked - t0 > worst)
            worst = t[i].t_locked - t0;
    }
    for (i = 0; i < NBLOCKED; i++)
        th_finish(&t[i]);

    assert_true(subscribed);
    assert_int_equal(early, 0);
    assert_int_equal(all_in, NBLOCKED);
    for (i = 0; i < NBLOCKED; i++) {
        assert_int_equal(t[i].rc, 0);
        assert_int_equal(t[i].unlock_rc, 0);
    }
    assert_int_equal(holders, NBLOCKED);
    assert_dbl_range(worst, 0.0, slack(1.0));
    print_message(
        "%d blocked readers all in %.1f ms after the write unlock\n",
        NBLOCKED, worst * 1e3);
}

static void test_writer_preference(void **state)
{
    dist_rwlock_t *rw = fx_rwlock_prefer_writer("prefer"), *rwd;
    const char *name = fx_name(rw), *name2;
    struct th w, rd, wd;
    double t0, el_w, el_rd;
    int rc_try, rc_reenter, waiting, rd_early, rd_during_w, rc_try_default;
    long long writers_after;

    (void)state;
    assert_int_equal(dist_rwlock_rdlock(rw), 0);
    th_start(&w, rw, OP_WR);
    waiting = wait_writers(name, 1, 10.0);
    rc_try = other_thread(rw, OP_TRYRD); /* a new reader: no */
    th_start(&rd, rw, OP_RD);
    rd_early = th_wait(&rd, 0.5) == 0;
    rc_reenter = dist_rwlock_rdlock(rw); /* a holder: yes */
    if (rc_reenter == 0)
        dist_rwlock_unlock(rw);
    t0 = tu_now();
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    el_w = th_wait(&w, 10.0) == 0 ? w.t_locked - t0 : 99;
    writers_after = zcard_writers(name);
    rd_during_w = th_wait(&rd, 0.3) == 0;
    t0 = tu_now();
    th_finish(&w);
    el_rd = th_wait(&rd, 10.0) == 0 ? rd.t_locked - t0 : 99;
    th_finish(&rd);

    assert_true(waiting);
    assert_int_equal(rc_try, EBUSY);
    assert_false(rd_early);
    assert_int_equal(rc_reenter, 0);
    assert_int_equal(w.rc, 0);
    assert_dbl_range(el_w, 0.0, slack(1.0));
    assert_int_equal(writers_after, 0);
    assert_false(rd_during_w);
    assert_int_equal(w.unlock_rc, 0);
    assert_int_equal(rd.rc, 0);
    assert_dbl_range(el_rd, 0.0, slack(1.0));
    assert_int_equal(rd.unlock_rc, 0);
    assert_int_equal(key_exists(name), 0);

    /* readers preferred (the default): a waiting writer keeps nobody out */
    rwd = fx_rwlock("default", NULL);
    name2 = fx_name(rwd);
    assert_int_equal(dist_rwlock_rdlock(rwd), 0);
    th_start(&wd, rwd, OP_WR);
    assert_true(wait_subscribed(name2, 10.0));
    rc_try_default = other_thread(rwd, OP_TRYRD);
    assert_int_equal(zcard_writers(name2), 0);
    assert_int_equal(dist_rwlock_unlock(rwd), 0);
    assert_int_equal(th_wait(&wd, 10.0), 0);
    th_finish(&wd);
    assert_int_equal(rc_try_default, 0);
    assert_int_equal(wd.rc, 0);
    assert_int_equal(wd.unlock_rc, 0);
}

static void test_timed(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("rw", NULL);
    struct th w;
    struct timespec dl;
    double t0, el_rd, el_wr, el_quick;
    int rc_rd, rc_wr, rc_inval1, rc_inval2, rc_past;

    (void)state;
    th_hold(&w, rw, OP_WR);
    t0 = tu_now();
    dl = realtime_in(2.0);
    rc_rd = dist_rwlock_timedrdlock(rw, &dl);
    el_rd = tu_now() - t0;
    t0 = tu_now();
    dl = realtime_in(2.0);
    rc_wr = dist_rwlock_timedwrlock(rw, &dl);
    el_wr = tu_now() - t0;
    t0 = tu_now();
    dl = fx_bad_deadline(0);
    rc_inval1 = dist_rwlock_timedrdlock(rw, &dl);
    dl = fx_bad_deadline(1);
    rc_inval2 = dist_rwlock_timedwrlock(rw, &dl);
    dl = realtime_in(-10.0);
    rc_past = dist_rwlock_timedrdlock(rw, &dl);
    el_quick = tu_now() - t0;
    th_finish(&w);

    assert_int_equal(rc_rd, ETIMEDOUT);
    assert_int_equal(rc_wr, ETIMEDOUT);
    assert_dbl_range(el_rd, 2.0, 2.0 + slack(1.0));
    assert_dbl_range(el_wr, 2.0, 2.0 + slack(1.0));
    assert_int_equal(rc_inval1, EINVAL);
    assert_int_equal(rc_inval2, EINVAL);
    assert_int_equal(rc_past, ETIMEDOUT);
    assert_dbl_range(el_quick, 0.0, slack(1.0));
    assert_int_equal(w.unlock_rc, 0);

    /* a free lock is taken whatever the deadline */
    dl = realtime_in(-10.0);
    assert_int_equal(dist_rwlock_timedrdlock(rw, &dl), 0);
    dl.tv_nsec = 2000000000L;
    assert_int_equal(dist_rwlock_timedrdlock(rw, &dl), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_timedwrlock(rw, &dl), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_int_equal(dist_rwlock_timedrdlock(rw, NULL), EINVAL);
    assert_int_equal(dist_rwlock_timedwrlock(rw, NULL), EINVAL);
}

#define MIX_PROCS   4
#define MIX_SECONDS 2.0

struct mix_report {
    long long reads, writes, torn;
    int code;
};

static long long get_counter(redisContext *c, const char *key, int *fail)
{
    redisReply *x = redisCommand(c, "GET %s", key);
    long long v = 0;

    if (!x || (x->type != REDIS_REPLY_STRING && x->type != REDIS_REPLY_NIL))
        *fail = 1;
    else if (x->type == REDIS_REPLY_STRING)
        v = strtoll(x->str, NULL, 10);
    if (x)
        freeReplyObject(x);
    return v;
}

static void mix_child(const char *name, const char *counter, int idx,
                      struct mix_report *rep)
{
    struct timeval tv = { 5, 0 };
    redisContext *c = redisConnectUnixWithTimeout(r.sock, tv);
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1);
    dist_rwlock_t rw;
    double t0;
    int fail = 0;

    if (!c || c->err || dist_rwlock_init(&rw, name, NULL) != 0) {
        rep->code = 10;
        _exit(10);
    }
    redisSetTimeout(c, tv);
    t0 = tu_now();
    while (!fail && tu_now() - t0 < MIX_SECONDS) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (rng % 10 == 0) {
            long long v;
            redisReply *x;
            if (dist_rwlock_wrlock(&rw) != 0) {
                fail = 11;
                break;
            }
            v = get_counter(c, counter, &fail);
            x = redisCommand(c, "SET %s %lld", counter, v + 1);
            if (!x || x->type != REDIS_REPLY_STATUS)
                fail = 12;
            if (x)
                freeReplyObject(x);
            if (dist_rwlock_unlock(&rw) != 0 && !fail)
                fail = 13;
            rep->writes++;
        } else {
            long long v1, v2;
            if (dist_rwlock_rdlock(&rw) != 0) {
                fail = 14;
                break;
            }
            v1 = get_counter(c, counter, &fail);
            if (rng % 7 == 0)
                usleep(500);
            v2 = get_counter(c, counter, &fail);
            if (v1 != v2)
                rep->torn++;
            if (dist_rwlock_unlock(&rw) != 0 && !fail)
                fail = 15;
            rep->reads++;
        }
    }
    if (!fail && dist_rwlock_destroy(&rw) != 0)
        fail = 16;
    redisFree(c);
    rep->code = fail;
    _exit(fail);
}

static void test_mixed_load(void **state)
{
    char name[200], counter[240];
    struct mix_report *rep = shared(MIX_PROCS * sizeof *rep);
    pid_t pids[MIX_PROCS];
    int st[MIX_PROCS], i;
    long long reads = 0, writes = 0, torn = 0;

    (void)state;
    assert_non_null(rep);
    NAME(name, "rw");
    snprintf(counter, sizeof counter, "%s:counter", name);
    for (i = 0; i < MIX_PROCS; i++) {
        rep[i].code = -1;
        pids[i] = fork();
        if (pids[i] == 0)
            mix_child(name, counter, i, &rep[i]);
        assert_true(pids[i] > 0);
    }
    for (i = 0; i < MIX_PROCS; i++) {
        st[i] = -1;
        waitpid(pids[i], &st[i], 0);
    }
    for (i = 0; i < MIX_PROCS; i++) {
        if (rep[i].code != 0 || !child_exit_ok(st[i], rep[i].code))
            fail_msg("child %d: reported %d, status 0x%x", i, rep[i].code,
                     st[i]);
        reads += rep[i].reads;
        writes += rep[i].writes;
        torn += rep[i].torn;
    }
    munmap(rep, MIX_PROCS * sizeof *rep);
    assert_true(writes > 0);
    assert_true(reads > writes);
    assert_int_equal(tu_cmd_int(&r, "GET", counter, NULL), writes);
    assert_int_equal(torn, 0);
    assert_int_equal(key_exists(name), 0);
    print_message("mixed load: %lld reads, %lld writes in %.0f s, 0 torn, "
                  "0 lost\n",
                  reads, writes, MIX_SECONDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_many_readers),
        FX_TEST(test_writer_excludes),
        FX_TEST(test_try_busy),
        FX_TEST(test_reentrant),
        FX_TEST(test_downgrade),
        FX_TEST(test_no_upgrade),
        FX_TEST(test_readers_behind_writer),
        FX_TEST(test_writer_preference),
        FX_TEST(test_timed),
        FX_TEST(test_mixed_load),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_RWLOCK_FILTER");
}
