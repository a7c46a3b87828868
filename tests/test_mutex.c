/*
 * test_mutex: behaviour of dist_mutex_* against a private redis-server.
 *
 * One server is started for the whole group (tu_redis_start); every test
 * uses fresh lock names (test name + pid).  cmocka is not thread-safe, so
 * worker threads and forked children only record results (variables,
 * semaphores, pipes, exit codes, shared memory) and the main thread asserts.
 * Timing bounds are generous bounds, never exact timings: they must hold on a
 * loaded 2-core machine.
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

static tu_redis_t r;

#define DEFAULT_WATCHDOG_MS 30000UL
#define DEFAULT_TIMEOUT_MS  2000UL

/* The group's settings (fixture.h); SIGPIPE is counted, not fatal, and
 * test_no_sigpipe reports it without killing the run. */
static const struct fx_settings defaults = { DEFAULT_WATCHDOG_MS,
                                             DEFAULT_TIMEOUT_MS, 0 };

/* Shared memory for results of forked children (one int per child). */
static int *shared_ints(size_t n)
{
    int *p = mmap(NULL, n * sizeof *p, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    size_t i;

    if (p == MAP_FAILED)
        return NULL;
    for (i = 0; i < n; i++)
        p[i] = -1; /* not reported */
    return p;
}

/* The child reports code both in shared memory and as its exit status. */
static void child_exit(int *slot, int code)
{
    *slot = code;
    _exit(code);
}

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_mutex", __func__, tag)
#define NAMED_MUTEX(lock, buf) NAMED_LOCK(dist_mutex_init, lock, buf, "m")

/* ---- Redis helpers (main thread or forked child) ------------------------ */

/* The owner field of the lock hash and its count (testhelp.h). */
#define owner_field(key, count) lock_owner_field(&r, key, count)

/* One-number queries (tu_cmd_int: -1 for nil or an error). */
#define hash_fields(key)       tu_cmd_int(&r, "HLEN", key, NULL)
#define key_exists(key)        tu_cmd_int(&r, "EXISTS", key, NULL)
#define hget_count(key, field) tu_cmd_int(&r, "HGET", key, field, NULL)

/* Length of the uuid part of an owner field "<uuid>:<thread n>". */
static size_t uuid_len(const char *owner)
{
    const char *c = strrchr(owner, ':');
    return c ? (size_t)(c - owner) : strlen(owner);
}

/* ---- a thread that holds a lock until told to let go --------------------- */

static int holder_lock(void *m)
{
    return dist_mutex_lock(m);
}

static int holder_unlock(void *m)
{
    return dist_mutex_unlock(m);
}

/* The fixture's holder thread on m. */
static void holder_start(struct fx_holder *h, dist_mutex_t *m)
{
    fx_holder_start(h, holder_lock, holder_unlock, m);
}

/* ---- a thread that runs one call ----------------------------------------- */

enum op { OP_TRYLOCK_UNLOCK, OP_UNLOCK };

struct oneshot {
    dist_mutex_t *m;
    enum op op;
    int rc, rc2;
    char err[256];
};

static void *oneshot_main(void *arg)
{
    struct oneshot *o = arg;

    o->rc2 = -1;
    if (o->op == OP_TRYLOCK_UNLOCK) {
        o->rc = dist_mutex_trylock(o->m);
        snprintf(o->err, sizeof o->err, "%s", dist_last_error());
        if (o->rc == 0)
            o->rc2 = dist_mutex_unlock(o->m);
    } else {
        o->rc = dist_mutex_unlock(o->m);
        snprintf(o->err, sizeof o->err, "%s", dist_last_error());
    }
    return NULL;
}

static void run_oneshot(struct oneshot *o, dist_mutex_t *m, enum op op)
{
    pthread_t th;

    memset(o, 0, sizeof *o);
    o->m = m;
    o->op = op;
    o->rc = -1;
    assert_int_equal(pthread_create(&th, NULL, oneshot_main, o), 0);
    pthread_join(th, NULL);
}

/* ---- 1 ------------------------------------------------------------------- */

static void test_reentrant_hold_counts(void **state)
{
    char name[200];
    dist_mutex_t m;
    char *owner;
    long long cnt = -1;

    (void)state;
    NAMED_MUTEX(m, name);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);

    owner = owner_field(name, &cnt);
    assert_non_null(owner);
    assert_int_equal(cnt, 3);
    assert_int_equal(hget_count(name, owner), 3);
    assert_true(tu_cmd_int(&r, "PTTL", name, NULL) > 0);

    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(hget_count(name, owner), 2);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(hget_count(name, owner), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    assert_int_equal(key_exists(name), 0);
    free(owner);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 2 ------------------------------------------------------------------- */

static void test_errorcheck(void **state)
{
    char name[200];
    dist_mutex_t m;
    dist_mutexattr_t a;
    int type = -1;
    long long cnt = -1;
    char *owner;

    (void)state;
    NAME(name, "m");
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_gettype(&a, &type), 0);
    assert_int_equal(type, DIST_MUTEX_RECURSIVE);
    assert_int_equal(dist_mutexattr_settype(&a, DIST_MUTEX_ERRORCHECK), 0);
    assert_int_equal(dist_mutexattr_settype(&a, 0), EINVAL);
    assert_int_equal(dist_mutexattr_settype(&a, 3), EINVAL);
    assert_int_equal(dist_mutexattr_settype(&a, -1), EINVAL);
    assert_int_equal(dist_mutexattr_gettype(&a, &type), 0);
    assert_int_equal(type, DIST_MUTEX_ERRORCHECK);

    assert_int_equal(dist_mutex_init(&m, name, &a), 0);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_lock(&m), EDEADLK);
    assert_int_equal(dist_mutex_trylock(&m), EBUSY); /* POSIX: trylock
                                                        * finds it taken */
    owner = owner_field(name, &cnt);
    assert_non_null(owner);
    free(owner);
    assert_int_equal(cnt, 1); /* the refused relocks changed nothing */
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 3 ------------------------------------------------------------------- */

static void test_trylock_busy(void **state)
{
    char name[200];
    dist_mutex_t m;
    struct oneshot o;

    (void)state;
    NAMED_MUTEX(m, name);
    assert_int_equal(dist_mutex_lock(&m), 0);
    run_oneshot(&o, &m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, EBUSY);
    assert_true(o.err[0] != 0);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);

    run_oneshot(&o, &m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.rc2, 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 4 ------------------------------------------------------------------- */

static void test_unlock_not_owner(void **state)
{
    char name[200], name2[200];
    dist_mutex_t m, m2;
    struct oneshot o;
    long long cnt = -1;
    char *owner;

    (void)state;
    NAME(name, "m");
    NAME(name2, "unheld");
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_init(&m2, name2, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);

    run_oneshot(&o, &m, OP_UNLOCK);
    assert_int_equal(o.rc, EPERM);
    assert_true(o.err[0] != 0);
    owner = owner_field(name, &cnt); /* main's hold is untouched */
    assert_non_null(owner);
    free(owner);
    assert_int_equal(cnt, 1);

    assert_int_equal(dist_mutex_unlock(&m2), EPERM);
    assert_true(dist_last_error()[0] != 0);

    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    assert_int_equal(dist_mutex_destroy(&m2), 0);
}

/* ---- 5 ------------------------------------------------------------------- */

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
    struct fx_call t;
    char name[200];
    dist_mutex_t m;

    (void)state;
    NAMED_MUTEX(m, name);
    t = timed_vs_holder(&m, 3.0);
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_dbl_range(t.el, 3.0, 3.0 + slack(1.0));
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 6 ------------------------------------------------------------------- */

/* A deadline in the past: a free lock is taken all the same, a held one
 * gives ETIMEDOUT at once. */
static void test_timedlock_past_deadline(void **state)
{
    struct timespec dl = realtime_in(-10.0);
    char name[200];
    dist_mutex_t m;
    struct fx_call t;

    (void)state;
    NAMED_MUTEX(m, name);
    assert_int_equal(dist_mutex_timedlock(&m, &dl), 0);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    t = timed_vs_holder(&m, -10.0);
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_dbl_range(t.el, 0.0, slack(1.0));
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 7 ------------------------------------------------------------------- */

static void test_timedlock_invalid(void **state)
{
    char name[200];
    dist_mutex_t m;
    struct fx_holder h;
    struct timespec dl;
    int rc1, rc2;
    double t0, el;

    (void)state;
    NAMED_MUTEX(m, name);

    holder_start(&h, &m);
    t0 = tu_now();
    dl = realtime_in(10.0);
    dl.tv_nsec = 2000000000L;
    rc1 = dist_mutex_timedlock(&m, &dl);
    dl.tv_nsec = -1;
    rc2 = dist_mutex_timedlock(&m, &dl);
    el = tu_now() - t0;
    fx_holder_stop(&h);
    assert_int_equal(rc1, EINVAL);
    assert_int_equal(rc2, EINVAL);
    assert_dbl_range(el, 0.0, slack(1.0));

    /* free lock: the deadline is never looked at */
    dl = realtime_in(10.0);
    dl.tv_nsec = 2000000000L;
    assert_int_equal(dist_mutex_timedlock(&m, &dl), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    dl.tv_nsec = -1;
    assert_int_equal(dist_mutex_timedlock(&m, &dl), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);

    assert_int_equal(dist_mutex_timedlock(&m, NULL), EINVAL);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 8 ------------------------------------------------------------------- */

static void test_lease_expiry(void **state)
{
    char name[200];
    dist_mutex_t m;
    dist_mutexattr_t a;
    struct fx_holder h;
    double tb, wait;
    int rc_b, rc_b_unlock, calls, rc_destroy;
    long long ex;
    unsigned long lease = 0;

    (void)state;
    NAME(name, "m");
    fx_dirty = 1;
    fx_lost_reset();
    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setlease(&a, 2000), 0);
    assert_int_equal(dist_mutexattr_getlease(&a, &lease), 0);
    assert_int_equal(lease, 2000);
    assert_int_equal(dist_mutex_init(&m, name, &a), 0);

    holder_start(&h, &m);       /* thread A takes it and keeps it */
    rc_b = dist_mutex_lock(&m); /* thread B (main) waits */
    tb = tu_now();
    wait = tb - h.t_locked;
    sem_post(&h.release); /* A's unlock, after B took it */
    pthread_join(h.th, NULL);
    sem_destroy(&h.locked);
    sem_destroy(&h.release);
    rc_b_unlock = rc_b == 0 ? dist_mutex_unlock(&m) : -1;
    calls = fx_lost_calls(NULL);
    dist_set_lost_handler(NULL, NULL);
    fx_dirty = 0;
    ex = key_exists(name);
    rc_destroy = dist_mutex_destroy(&m);

    assert_int_equal(rc_b, 0);
    assert_dbl_range(wait, 1.5, 3.0);
    assert_int_equal(h.unlock_rc, EPERM);
    assert_int_equal(rc_b_unlock, 0);
    assert_true(calls >= 1);
    assert_true(fx_lost_last_is(name));
    assert_int_equal(ex, 0);
    assert_int_equal(rc_destroy, 0);
}

/* ---- 9 ------------------------------------------------------------------- */

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
    char name[200];
    dist_mutex_t m;
    struct prober p;
    pthread_t th;
    long long pttl, min_pttl = 1LL << 40, ex;
    double t0;
    int i, rc, rc_destroy;

    (void)state;
    NAME(name, "m");
    fx_dirty = 1;
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    t0 = tu_now();
    pttl = tu_cmd_int(&r, "PTTL", name, NULL);
    assert_in_range(pttl, 1, 1500); /* the watchdog lease, not 30 s */

    memset(&p, 0, sizeof p);
    p.m = &m;
    assert_int_equal(pthread_create(&th, NULL, prober_main, &p), 0);
    while (tu_now() - t0 < 4.0) {
        pttl = tu_cmd_int(&r, "PTTL", name, NULL);
        if (pttl < min_pttl)
            min_pttl = pttl;
        tu_sleep_ms(100);
    }
    pthread_join(th, NULL);
    rc = dist_mutex_unlock(&m);
    dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS);
    fx_dirty = 0;
    ex = key_exists(name);
    rc_destroy = dist_mutex_destroy(&m);

    if (min_pttl <= 0)
        fail_msg("the lock's PTTL fell to %lld while held", min_pttl);
    for (i = 0; i < 4; i++)
        assert_int_equal(p.rcs[i], EBUSY);
    assert_int_equal(rc, 0);
    assert_int_equal(ex, 0);
    assert_int_equal(rc_destroy, 0);
}

/* ---- 10 ------------------------------------------------------------------ */

static int lock_of(void *m)
{
    return dist_mutex_lock(m);
}

static void test_sigkill_holder(void **state)
{
    char name[200];
    dist_mutex_t m;
    int st = 0, rc_try, rc_lock, rc_child;
    pid_t pid;
    double t0, el;

    (void)state;
    NAME(name, "m");
    fx_dirty = 1;
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    pid = fork_locked(lock_of, &m, &rc_child);
    if (pid < 0)
        fail_msg("the child's lock returned %d (-1: no report)", rc_child);
    /* Longer than the 1.5 s lease: only the child's watchdog keeps it. */
    tu_sleep_ms(2000);
    rc_try = dist_mutex_trylock(&m);
    if (rc_try == 0)
        dist_mutex_unlock(&m);

    kill(pid, SIGKILL);
    t0 = tu_now();
    assert_int_equal(waitpid(pid, &st, 0), pid);
    rc_lock = dist_mutex_lock(&m);
    el = tu_now() - t0;
    if (rc_lock == 0)
        assert_int_equal(dist_mutex_unlock(&m), 0);
    dist_set_watchdog_ms(DEFAULT_WATCHDOG_MS);

    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(rc_try, EBUSY);
    assert_int_equal(rc_lock, 0);
    assert_dbl_range(el, 0.0, 1.5 + slack(1.5));
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    fx_dirty = 0;
}

/* ---- 11 ------------------------------------------------------------------ */

#define MX_PROCS   4
#define MX_THREADS 2
#define MX_ITERS   100

static int mx_init(dist_mutex_t *m, const char *name, void *arg)
{
    (void)arg;
    return dist_mutex_init(m, name, NULL);
}

/* Threads of several processes on one mutex: never two inside at once
 * (shared memory), and the Redis counter they bump inside is exact. */
static void test_mutual_exclusion(void **state)
{
    char name[200], counter[220];
    struct fx_mx run = { name,     counter, MX_PROCS, MX_THREADS,
                         MX_ITERS, mx_init, NULL };
    double t0, el;

    (void)state;
    NAME(name, "m");
    snprintf(counter, sizeof counter, "%s:counter", name);
    t0 = tu_now();
    fx_mx_run(&run);
    el = tu_now() - t0;
    assert_int_equal(tu_cmd_int(&r, "GET", counter, NULL),
                     MX_PROCS * MX_THREADS * MX_ITERS);
    assert_int_equal(key_exists(name), 0);
    print_message("mutual exclusion: %d lock/unlock in %.2f s\n",
                  MX_PROCS * MX_THREADS * MX_ITERS, el);
}

/* ---- 12 ------------------------------------------------------------------ */

static void test_redis_restart(void **state)
{
    char name[200];
    dist_mutex_t m;
    double t0, waited;
    int calls = 0, named, rc_restart, rc_unlock1, rc_lock, rc_unlock2,
        rc_destroy;
    long long fields_before, fields_after, ex_after_restart, ex_end;

    (void)state;
    NAME(name, "m");
    fx_dirty = 1;
    fx_lost_reset();
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    fields_before = hash_fields(name);

    rc_restart = tu_redis_restart(&r);
    ex_after_restart = key_exists(name);
    t0 = tu_now();
    while (tu_now() - t0 < 5.0 && (calls = fx_lost_calls(NULL)) == 0)
        tu_sleep_ms(50);
    waited = tu_now() - t0;
    named = fx_lost_last_is(name);

    /* clean up before asserting, so a failure leaves nothing behind */
    rc_unlock1 = dist_mutex_unlock(&m);
    rc_lock = dist_mutex_lock(&m);
    fields_after = hash_fields(name);
    rc_unlock2 = rc_lock == 0 ? dist_mutex_unlock(&m) : -1;
    ex_end = key_exists(name);
    rc_destroy = dist_mutex_destroy(&m);
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
    assert_int_equal(rc_destroy, 0);
}

/* ---- 13 ------------------------------------------------------------------ */

static void test_script_flush(void **state)
{
    char name[200];
    dist_mutex_t m;
    redisReply *x;

    (void)state;
    NAMED_MUTEX(m, name);
    assert_int_equal(dist_mutex_lock(&m), 0);
    x = tu_cmd(&r, "SCRIPT", "FLUSH", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 14 ------------------------------------------------------------------ */

static void test_unreachable(void **state)
{
    char name[200], url[64], addr[64];
    struct fx_call lk, try;
    dist_mutex_t m;
    int port;

    (void)state;
    NAME(name, "m");
    port = tu_free_port();
    assert_true(port > 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    fx_dirty = 1;
    assert_int_equal(dist_set_url(url), 0);
    assert_int_equal(dist_set_timeout_ms(500), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);

    FX_CALL(&lk, dist_mutex_lock(&m));
    FX_CALL(&try, dist_mutex_trylock(&m));

    assert_int_equal(dist_set_url(r.url_unix), 0);
    assert_int_equal(dist_set_timeout_ms(DEFAULT_TIMEOUT_MS), 0);
    fx_dirty = 0;

    assert_int_equal(lk.rc, EIO);
    assert_dbl_range(lk.el, 0.0, 2.0);
    if (!strstr(lk.err, addr) && !strstr(lk.err, "connect"))
        fail_msg("dist_last_error() after the failed lock: '%s'", lk.err);
    assert_int_equal(try.rc, EIO);
    assert_dbl_range(try.el, 0.0, 2.0 + slack(0.5));

    /* reachable again: the object works */
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 15 ------------------------------------------------------------------ */

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
    char name[200];
    dist_mutex_t m;
    struct fx_holder h;
    struct oneshot o;
    struct fx_locker la;
    long long before, after;
    double t0, waited;

    (void)state;
    NAMED_MUTEX(m, name);
    holder_start(&h, &m);
    before = script_calls();
    assert_true(before >= 0);
    t0 = tu_now();
    /* a thread blocks in lock(); the holder lets go after 3 s */
    assert_int_equal(fx_locker_start(&la, &m, 0), 0);
    tu_sleep_ms(3000);
    sem_post(&h.release);
    pthread_join(h.th, NULL);
    fx_locker_join(&la);
    waited = la.t - t0;
    after = script_calls();
    assert_int_equal(la.rc, 0);
    sem_destroy(&h.locked);
    sem_destroy(&h.release);
    assert_int_equal(h.unlock_rc, 0);
    run_oneshot(&o, &m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, 0); /* all let go */
    assert_int_equal(dist_mutex_destroy(&m), 0);
    assert_dbl_range(waited, 2.9, 3.0 + slack(1.0));
    /* the holder's unlock, the waiter's first try, its try after
     * subscribing, its try when woken, its unlock: about five.  Polling
     * every 100 ms would be 30 or more. */
    if (after - before > 12)
        fail_msg("waiting 3 s cost %lld script calls", after - before);
}

/* The server stops mid-unlock (SIGSTOP) for longer than the command
 * timeout: the outcome cannot be known, unlock says EIO, and once the
 * server runs again the renewal thread finishes the release, so the lock is
 * free for others without waiting out its 30 s lease. */
static void test_unknown_release_is_finished(void **state)
{
    char name[200];
    dist_mutex_t m;
    struct oneshot o;
    double t0, end;
    int rc;

    (void)state;
    NAME(name, "m");
    fx_dirty = 1;
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_set_timeout_ms(300), 0);
    assert_int_equal(tu_redis_signal(&r, SIGSTOP), 0);
    t0 = tu_now();
    rc = dist_mutex_unlock(&m);
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
    run_oneshot(&o, &m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.rc2, 0);
    /* and this thread holds nothing: a second unlock is EPERM */
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    fx_dirty = 0;
}

static void test_no_channels_left(void **state)
{
    char name[200], chan[260];
    dist_mutex_t m;
    struct waiter w[3];
    pthread_t th[3];
    atomic_int started = 0, inside = 0, acquired = 0;
    int i, early, subscribed = 0;
    double t0, el;

    (void)state;
    NAME(name, "m");
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    for (i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].m = &m;
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
    assert_int_equal(dist_mutex_unlock(&m), 0);
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
    assert_int_equal(key_exists(name), 0);

    assert_int_equal(channels_left(&r, 3.0), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 16 ------------------------------------------------------------------ */

#define STATIC_NAME "test_mutex:static_initializer:fixed-name-7f3a9c"
static dist_mutex_t sm = DIST_MUTEX_INITIALIZER(STATIC_NAME);

static void test_static_initializer(void **state)
{
    dist_mutex_t z;
    char *owner;
    long long cnt = -1;

    (void)state;
    assert_true(tu_cmd_int(&r, "DEL", STATIC_NAME, NULL) >= 0);
    assert_int_equal(dist_mutex_lock(&sm), 0);
    owner = owner_field(STATIC_NAME, &cnt);
    assert_non_null(owner);
    free(owner);
    assert_int_equal(cnt, 1);
    assert_int_equal(dist_mutex_trylock(&sm), 0);
    assert_int_equal(hget_count(STATIC_NAME, "nonexistent"), -1);
    assert_int_equal(dist_mutex_unlock(&sm), 0);
    assert_int_equal(dist_mutex_unlock(&sm), 0);
    assert_int_equal(key_exists(STATIC_NAME), 0);
    assert_int_equal(dist_mutex_destroy(&sm), 0);

    memset(&z, 0, sizeof z);
    assert_int_equal(dist_mutex_lock(&z), EINVAL);
    assert_true(dist_last_error()[0] != 0);
    assert_int_equal(dist_mutex_trylock(&z), EINVAL);
    assert_int_equal(dist_mutex_unlock(&z), EINVAL);
}

/* ---- 17 ------------------------------------------------------------------ */

static void test_fork_child_identity(void **state)
{
    char name[200], name2[200];
    dist_mutex_t m;
    char *powner;
    long long cnt = -1;
    pid_t pid;
    int st = -1, rep;
    int *slot = shared_ints(1);

    (void)state;
    assert_non_null(slot);
    NAME(name, "parent");
    NAME(name2, "child");
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    powner = owner_field(name, &cnt);
    assert_non_null(powner);
    assert_int_equal(cnt, 1);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dist_mutex_t m2;
        char *cowner;
        long long c2 = -1;
        int code = 0;

        if (dist_mutex_trylock(&m) != EBUSY)
            child_exit(slot, 10);
        if (dist_mutex_unlock(&m) != EPERM)
            child_exit(slot, 11);
        if (dist_mutex_init(&m2, name2, NULL) != 0)
            child_exit(slot, 12);
        if (dist_mutex_lock(&m2) != 0)
            child_exit(slot, 13);
        cowner = owner_field(name2, &c2);
        if (!cowner || c2 != 1)
            code = 14;
        else if (uuid_len(cowner) == uuid_len(powner) &&
                 memcmp(cowner, powner, uuid_len(cowner)) == 0)
            code = 15;
        free(cowner);
        if (dist_mutex_unlock(&m2) != 0 && !code)
            code = 16;
        if (!code && key_exists(name2) != 0)
            code = 17;
        if (!code && hget_count(name, powner) != 1) /* parent's untouched */
            code = 18;
        child_exit(slot, code);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    rep = *slot;
    munmap(slot, sizeof *slot);
    if (rep != 0 || !child_exit_ok(st, rep))
        fail_msg("child: reported %d, status 0x%x (exit code %d)", rep, st,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    assert_int_equal(hget_count(name, powner), 1);
    free(powner);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 18 ------------------------------------------------------------------ */

static void test_destroy_and_names(void **state)
{
    char name[200];
    dist_mutex_t m;
    char *big;

    (void)state;
    NAMED_MUTEX(m, name);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_destroy(&m), EBUSY);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    assert_int_equal(key_exists(name), 0);

    assert_int_equal(dist_mutex_init(&m, NULL, NULL), EINVAL);
    assert_int_equal(dist_mutex_init(&m, "", NULL), EINVAL);

    big = malloc(DIST_NAME_MAX + 2);
    assert_non_null(big);
    memset(big, 'a', DIST_NAME_MAX + 1);
    big[DIST_NAME_MAX + 1] = 0;
    assert_int_equal(dist_mutex_init(&m, big, NULL), EINVAL);
    /* exactly DIST_NAME_MAX bytes is accepted and works */
    big[DIST_NAME_MAX] = 0;
    memcpy(big, name, strlen(name));
    assert_int_equal(dist_mutex_init(&m, big, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(hash_fields(big), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(key_exists(big), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    free(big);
}

/* ---- 19 ------------------------------------------------------------------ */

static void test_fencing_token(void **state)
{
    char name[200], tokkey[260];
    dist_mutex_t m;
    uint64_t t1 = 0, t1b = 0, t2 = 0, t = 0;

    (void)state;
    NAME(name, "m");
    snprintf(tokkey, sizeof tokkey, "redisson_lock_token:{%s}", name);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_token(&m, &t), EPERM);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t1), 0);
    assert_true(t1 >= 1);
    assert_int_equal(tu_cmd_int(&r, "GET", tokkey, NULL), (long long)t1);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t1b), 0);
    assert_int_equal(t1b, t1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t), 0); /* still held once */
    assert_int_equal(t, t1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t), EPERM);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t2), 0);
    assert_true(t2 > t1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t), EPERM);
    assert_int_equal(dist_mutex_token(&m, NULL), EINVAL);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- 19b ----------------------------------------------------------------- */

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
    char name[200];
    dist_mutex_t m;
    double end;
    int entered, unlock_rc, done;

    (void)state;
    NAME(name, "m");
    fx_dirty = 1;
    fx_lost_reset();
    atomic_store(&slow_entered, 0);
    atomic_store(&slow_done, 0);
    assert_int_equal(dist_set_watchdog_ms(1500), 0); /* renewed each 0.5 s */
    assert_int_equal(dist_set_lost_handler(slow_on_lost, NULL), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(tu_cmd_int(&r, "DEL", name, NULL), 1);
    end = tu_now() + 10.0;
    while (!(entered = atomic_load(&slow_entered)) && tu_now() < end)
        tu_sleep_ms(5);
    unlock_rc = dist_mutex_unlock(&m);
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
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* dist_mutex_lease_left: EPERM with a zero left when not held; while held,
 * the send of the last acknowledged acquire or renewal + the lease - the
 * margin (a hundredth of the lease + dist_set_lease_margin_ms), minus now:
 * at most that, at least what is left after a renewal period; a reentrant
 * lock's acquire moves it forward (it sets the lease again); renewals keep
 * it from running out.  An explicit lease gives the same bound from its
 * lock call, nothing renews it, and past the bound it is EPERM while the
 * lost handler is not called (the unlock asks the server). */
static void test_lease_left(void **state)
{
    char name[200], nlease[200];
    dist_mutex_t m, leased;
    dist_mutexattr_t at;
    struct timespec left, left2;
    double t0;

    (void)state;
    NAME(name, "m");
    NAME(nlease, "leased");
    fx_dirty = 1;
    fx_lost_reset();
    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    assert_int_equal(dist_set_lease_margin_ms(200), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    left.tv_sec = 7;
    assert_int_equal(dist_mutex_lease_left(&m, &left), EPERM);
    assert_true(left.tv_sec == 0 && left.tv_nsec == 0);
    assert_int_equal(dist_mutex_lease_left(&m, NULL), EINVAL);

    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_lease_left(&m, &left), 0);
    /* 1500 - 15 - 200 ms at most; a fresh hold has two thirds of its
     * lease left at least, less the margin */
    assert_dbl_range(secs_of(&left), 1.0 - 0.215, 1.285);
    /* the second acquire sets the lease again, from its own send */
    tu_sleep_ms(100);
    assert_int_equal(dist_mutex_lease_left(&m, &left), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_lease_left(&m, &left2), 0);
    if (secs_of(&left2) <= secs_of(&left))
        fail_msg("a reentrant lock left %.3f s, %.3f s before it",
                 secs_of(&left2), secs_of(&left));
    assert_int_equal(dist_mutex_unlock(&m), 0);
    /* two leases later the renewals have kept it */
    t0 = tu_now();
    while (tu_now() - t0 < 3.0) {
        assert_int_equal(dist_mutex_lease_left(&m, &left), 0);
        assert_dbl_range(secs_of(&left), 0.0, 1.285);
        tu_sleep_ms(50);
    }
    /* no fixed part: the margin is the hundredth */
    assert_int_equal(dist_set_lease_margin_ms(0), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_lease_left(&m, &left), 0);
    assert_dbl_range(secs_of(&left), 1.285, 1.485);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_set_lease_margin_ms(200), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_lease_left(&m, &left), EPERM);
    assert_true(left.tv_sec == 0 && left.tv_nsec == 0);

    /* an explicit lease of 1 s: surely ours for 1000 - 10 - 200 ms */
    assert_int_equal(dist_mutexattr_init(&at), 0);
    assert_int_equal(dist_mutexattr_setlease(&at, 1000), 0);
    assert_int_equal(dist_mutex_init(&leased, nlease, &at), 0);
    assert_int_equal(dist_mutex_lock(&leased), 0);
    t0 = tu_now();
    assert_int_equal(dist_mutex_lease_left(&leased, &left), 0);
    assert_dbl_range(secs_of(&left), 0.3, 0.790);
    while (tu_now() - t0 < 1.2)
        tu_sleep_ms(20);
    assert_int_equal(dist_mutex_lease_left(&leased, &left), EPERM);
    assert_int_equal(fx_lost_calls(NULL), 0);
    assert_int_equal(dist_mutex_unlock(&leased), EPERM); /* it expired */
    assert_int_equal(fx_lost_calls(nlease), 1);

    assert_int_equal(dist_mutex_destroy(&leased), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    assert_int_equal(fx_lost_calls(name), 0);
    dist_set_lost_handler(NULL, NULL);
    fx_restore_defaults(NULL);
}

/* ---- 20 ------------------------------------------------------------------ */

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
    char name[200];
    dist_mutex_t m;
    tu_proxy_t *p;
    unsigned long fired;

    (void)state;
    NAME(name, "m");
    p = fx_proxy_up(&r);
    assert_non_null(p);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0); /* warm up */
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_true(tu_proxy_connections(p) >= 1);
    fired = tu_proxy_faults_fired(p);

    /* acquire ran, its reply was lost */
    tu_proxy_drop_next_reply(p);
    lock_through_fault(&m, name, p, fired + 1);

    /* release ran, its reply was lost */
    assert_int_equal(dist_mutex_lock(&m), 0);
    tu_proxy_drop_next_reply(p);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 2);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);

    /* acquire never reached the server */
    tu_proxy_drop_next_request(p);
    lock_through_fault(&m, name, p, fired + 3);
    assert_int_equal(dist_mutex_destroy(&m), 0);

    /* the library's connections through the proxy are replaced at next use */
    assert_int_equal(fx_proxy_down(&r, p), 0);
    fx_dirty = 0;
}

/* ---- 21 ------------------------------------------------------------------ */

static void test_same_name_two_objects(void **state)
{
    char name[200];
    dist_mutex_t a, b;
    char *owner;
    long long cnt = -1;

    (void)state;
    NAME(name, "m");
    assert_int_equal(dist_mutex_init(&a, name, NULL), 0);
    assert_int_equal(dist_mutex_init(&b, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&a), 0);
    assert_int_equal(dist_mutex_lock(&b), 0);
    owner = owner_field(name, &cnt);
    assert_non_null(owner);
    assert_int_equal(cnt, 2);
    assert_int_equal(dist_mutex_unlock(&b), 0);
    assert_int_equal(hget_count(name, owner), 1);
    free(owner);
    assert_int_equal(dist_mutex_unlock(&a), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_unlock(&a), EPERM);
    assert_int_equal(dist_mutex_unlock(&b), EPERM);
    assert_int_equal(dist_mutex_destroy(&a), 0);
    assert_int_equal(dist_mutex_destroy(&b), 0);
}

/* ---- 22 ------------------------------------------------------------------ */

/* Runs last: the library must not have raised SIGPIPE in this process (the
 * Redis restart of test_redis_restart is where a careless write would). */
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
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_reentrant_hold_counts),
        T(test_errorcheck),
        T(test_trylock_busy),
        T(test_unlock_not_owner),
        T(test_timedlock_timeout),
        T(test_timedlock_past_deadline),
        T(test_timedlock_invalid),
        T(test_lease_expiry),
        T(test_watchdog_renews),
        T(test_sigkill_holder),
        T(test_mutual_exclusion),
        T(test_redis_restart),
        T(test_script_flush),
        T(test_unreachable),
        T(test_no_channels_left),
        T(test_waiting_does_not_poll),
        T(test_unknown_release_is_finished),
        T(test_static_initializer),
        T(test_fork_child_identity),
        T(test_destroy_and_names),
        T(test_fencing_token),
        T(test_lease_left),
        T(test_unlock_while_loss_reported),
        T(test_lost_reply_proxy),
        T(test_same_name_two_objects),
        T(test_acl_user_without_password),
        T(test_no_sigpipe),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_MUTEX_FILTER");
}
