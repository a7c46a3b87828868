/*
 * rwhelp.h: what the rwlock test programs share (test_rwlock: sharing and
 * exclusion; test_rwlock_lease: holds that end without an unlock;
 * test_rwlock_layout: the lock as Redis and other clients see it): the
 * group's server and settings, queries of the lock's keys, and a thread
 * that runs one lock call and holds until told.  Tests make their locks as
 * the fixture's own objects (fixture.h).
 * Static: each program gets its own copy.  Include after fixture.h.
 */
#ifndef DISTLOCK_RWHELP_H
#define DISTLOCK_RWHELP_H

#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

/* Each program uses a part of these. */
#define RW_FN static __attribute__((unused))

static tu_redis_t r;

#define DEFAULT_WAITER_MS 5000UL

/* How long a test gives a waiter that a release or a downgrade must wake.
 * A waiter nothing wakes sleeps on the answer of its last try, the holder's
 * remaining lease, which the renewals keep above two thirds of
 * DEFAULT_WATCHDOG_MS (20 s); half of that tells the wake-up apart from the
 * end of that sleep however slow the machine is, so it is no speed target
 * and takes no slack(). */
#define WOKEN_WITHIN_S (DEFAULT_WATCHDOG_MS / 3 / 1000.0)

/* The group's settings (fixture.h). */
static const struct fx_settings defaults = FX_DEFAULTS(DEFAULT_WAITER_MS);

/* Shared memory for what forked children report (testhelp.h). */
#define shared(n) shared_mem(n)

/* A writer-preferring rwlock of the test's own (fixture.h), on tag. */
#define fx_rwlock_prefer_writer(tag) prefer_writer_rwlock(__func__, tag)

RW_FN dist_rwlock_t *prefer_writer_rwlock(const char *test, const char *tag)
{
    dist_rwlockattr_t a;
    dist_rwlock_t *rw;

    assert_int_equal(dist_rwlockattr_init(&a), 0);
    assert_int_equal(dist_rwlockattr_setkind(&a, DIST_RWLOCK_PREFER_WRITER),
                     0);
    rw = fx_own_rwlock(test, tag, &a);
    assert_int_equal(dist_rwlockattr_destroy(&a), 0);
    return rw;
}

/* ---- Redis helpers (main thread or forked child) ------------------------ */

/* One-number queries (tu_cmd_int: -1 for nil or an error). */
#define key_exists(key)      tu_cmd_int(&r, "EXISTS", key, NULL)
#define hlen(key)            tu_cmd_int(&r, "HLEN", key, NULL)
#define hget_int(key, field) tu_cmd_int(&r, "HGET", key, field, NULL)

RW_FN char *hget_str(const char *key, const char *field)
{
    return tu_cmd_str(&r, "HGET", key, field, NULL);
}

RW_FN long long pttl(const char *key)
{
    long long v = -3;

    if (tu_cmd_int_ex(&r, &v, "PTTL", key, NULL) != 0)
        return -3;
    return v;
}

RW_FN int mode_is(const char *key, const char *mode)
{
    char *m = hget_str(key, "mode");
    int eq = m && strcmp(m, mode) == 0;

    free(m);
    return eq;
}

/* The hash's fields other than "mode", in *out (strdup'd), at most max. */
RW_FN int fields(const char *key, char **out, int max)
{
    redisReply *x = tu_cmd(&r, "HKEYS", key, NULL);
    int n = 0;
    size_t i;

    if (x && x->type == REDIS_REPLY_ARRAY)
        for (i = 0; i < x->elements && n < max; i++)
            if (strcmp(x->element[i]->str, "mode") != 0)
                out[n++] = strdup(x->element[i]->str);
    if (x)
        freeReplyObject(x);
    return n;
}

/* The one read owner field (no ":write" suffix) of the hash, strdup'd. */
RW_FN char *read_owner(const char *key)
{
    char *f[16], *res = NULL;
    int n = fields(key, f, 16), i;

    for (i = 0; i < n; i++) {
        size_t l = strlen(f[i]);
        if (!res && !(l > 6 && strcmp(f[i] + l - 6, ":write") == 0))
            res = f[i];
        else
            free(f[i]);
    }
    return res;
}

RW_FN void tkey(char *buf, size_t len, const char *name, const char *owner,
                int k)
{
    snprintf(buf, len, "{%s}:%s:rwlock_timeout:%d", name, owner, k);
}

/* Subscribers of chan (testhelp.h). */
#define numsub(chan) pubsub_numsub(&r, chan)

#define chan_of(buf, len, name)                                              \
    derived_name(buf, len, "redisson_rwlock", name)
#define writers_of(buf, len, name)                                           \
    derived_name(buf, len, "distlock_rwlock_writers", name)

/* Writers waiting on the lock (its writers queue). */
#define zcard_writers(name)                                                  \
    derived_int(&r, "ZCARD", "distlock_rwlock_writers", name)

/* Waits (up to secs) until n writers wait; 1 then, else 0. */
RW_FN int wait_writers(const char *name, long long n, double secs)
{
    double t0 = tu_now();

    while (tu_now() - t0 < secs) {
        if (zcard_writers(name) == n)
            return 1;
        tu_sleep_ms(20);
    }
    return 0;
}

/* Waits (up to secs) until someone listens on the lock's channel. */
RW_FN int wait_subscribed(const char *name, double secs)
{
    char chan[300];
    double t0 = tu_now();

    chan_of(chan, sizeof chan, name);
    while (tu_now() - t0 < secs) {
        if (numsub(chan) >= 1)
            return 1;
        tu_sleep_ms(20);
    }
    return 0;
}

/* Removes what a test may leave behind. */
RW_FN void del_all(const char *name)
{
    char k[300];
    redisReply *x;

    x = tu_cmd(&r, "DEL", name, NULL);
    if (x)
        freeReplyObject(x);
    derived_name(k, sizeof k, "distlock_rwlock_readers", name);
    x = tu_cmd(&r, "DEL", k, NULL);
    if (x)
        freeReplyObject(x);
    writers_of(k, sizeof k, name);
    x = tu_cmd(&r, "DEL", k, NULL);
    if (x)
        freeReplyObject(x);
}

/* ---- a thread that runs one lock call and holds until told --------------- */

enum op {
    OP_RD,
    OP_WR,
    OP_TRYRD,
    OP_TRYWR,
    OP_TIMEDRD,
    OP_TIMEDWR,
    OP_UNLOCK
};

struct th {
    dist_rwlock_t *rw;
    enum op op;
    double timeout_s; /* for the timed ops */
    struct fx_handshake hs;
    int rc, unlock_rc;
    int relock; /* take it this many more times (reentrant) */
    double t_called, t_locked;
    atomic_int in; /* t_locked is set (for polling) */
    atomic_int *started;
};

RW_FN int do_op(dist_rwlock_t *rw, enum op op, double timeout_s)
{
    struct timespec dl;

    switch (op) {
    case OP_RD:
        return dist_rwlock_rdlock(rw);
    case OP_WR:
        return dist_rwlock_wrlock(rw);
    case OP_TRYRD:
        return dist_rwlock_tryrdlock(rw);
    case OP_TRYWR:
        return dist_rwlock_trywrlock(rw);
    case OP_TIMEDRD:
        dl = realtime_in(timeout_s);
        return dist_rwlock_timedrdlock(rw, &dl);
    case OP_TIMEDWR:
        dl = realtime_in(timeout_s);
        return dist_rwlock_timedwrlock(rw, &dl);
    case OP_UNLOCK:
        return dist_rwlock_unlock(rw);
    }
    return -1;
}

RW_FN void *th_main(void *arg)
{
    struct th *t = arg;
    int i;

    t->t_called = tu_now();
    if (t->started)
        atomic_fetch_add(t->started, 1);
    t->rc = do_op(t->rw, t->op, t->timeout_s);
    t->t_locked = tu_now();
    atomic_store(&t->in, 1);
    for (i = 0; i < t->relock && t->rc == 0; i++)
        t->rc = do_op(t->rw, t->op, t->timeout_s);
    fx_handshake_hold(&t->hs);
    t->unlock_rc = 0;
    if (t->rc == 0)
        for (i = 0; i <= t->relock && t->unlock_rc == 0; i++)
            t->unlock_rc = dist_rwlock_unlock(t->rw);
    else
        t->unlock_rc = -1;
    return NULL;
}

RW_FN void th_start(struct th *t, dist_rwlock_t *rw, enum op op)
{
    memset(t, 0, sizeof *t);
    t->rw = rw;
    t->op = op;
    t->rc = t->unlock_rc = -1;
    fx_handshake_start(&t->hs, th_main, t);
}

/* 0 when the thread's lock call returned within secs. */
RW_FN int th_wait(struct th *t, double secs)
{
    struct timespec dl = realtime_in(secs);
    int rc;

    while ((rc = sem_timedwait(&t->hs.locked, &dl)) != 0 && errno == EINTR)
        ;
    return rc == 0 ? 0 : -1;
}

/* Lets the thread unlock and exit; its lock call must have returned (or
 * return soon). */
RW_FN void th_finish(struct th *t)
{
    fx_handshake_release(&t->hs);
    fx_handshake_join(&t->hs);
}

/* Starts a thread that takes the lock (op) and waits until it has. */
RW_FN void th_hold(struct th *t, dist_rwlock_t *rw, enum op op)
{
    th_start(t, rw, op);
    assert_int_equal(th_wait(t, 10.0), 0);
    assert_int_equal(t->rc, 0);
}

/* Runs one call on a fresh thread: another owner than the caller. */
RW_FN int other_thread(dist_rwlock_t *rw, enum op op)
{
    struct th t;
    int rc;

    th_start(&t, rw, op);
    if (th_wait(&t, 30.0) != 0)
        fail_msg("the other thread's call did not return");
    rc = t.rc;
    th_finish(&t);
    return rc;
}

#endif
