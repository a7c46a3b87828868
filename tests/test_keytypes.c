/*
 * test_keytypes: every script meets each key it touches holding another type
 * (a lock named after another lock's derived key, such as a mutex called
 * redisson_lock_token:{victim}, or plain tampering).  The call fails with an
 * error that names the key, and nothing was written: no hold left, no key
 * made or changed.  Redis keeps what a script wrote before a command failed,
 * so this holds only because every script does what can fail first.
 *
 * One server for the group; each case makes its objects under fresh names,
 * sets up what its script needs (through the API, or a holder of another
 * process written by hand), puts a key of the wrong type in place, takes a
 * snapshot of the whole keyspace (DUMP and PTTL of every key), runs the call
 * and compares.  The watchdog cases check that one broken hold in a renewal
 * batch does not stop the renewal of the others.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_proxy.h"
#include "testhelp.h"
#include "fixture.h"

static tu_redis_t r;

/* Leases and waiter windows long enough that no renewal runs during a case
 * (it would rightly push a deadline forward between the snapshots). */
static const struct fx_settings defaults = FX_DEFAULTS(30000);

/* ---- the keyspace, before and after ------------------------------------ */

struct entry {
    char *key;
    char *dump;
    size_t dlen;
    long long pttl;
};

struct snap {
    struct entry *e;
    size_t n;
};

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->key,
                  ((const struct entry *)b)->key);
}

static void snap_add(struct snap *s, const char *key)
{
    redisReply *d = tu_cmd(&r, "DUMP", key, NULL);
    struct entry *e;

    assert_non_null(d);
    s->e = realloc(s->e, (s->n + 1) * sizeof *s->e);
    assert_non_null(s->e);
    e = &s->e[s->n++];
    e->key = strdup(key);
    e->dlen = d->type == REDIS_REPLY_STRING ? d->len : 0;
    e->dump = malloc(e->dlen + 1);
    assert_true(e->key && e->dump);
    memcpy(e->dump, d->str ? d->str : "", e->dlen);
    freeReplyObject(d);
    assert_int_equal(tu_cmd_int_ex(&r, &e->pttl, "PTTL", key, NULL), 0);
}

/* Every key with its value and expiry. */
static struct snap snap_take(void)
{
    struct snap s = { NULL, 0 };
    char cursor[32] = "0";
    size_t i;

    do {
        redisReply *x = tu_cmd(&r, "SCAN", cursor, "COUNT", "1000", NULL);

        assert_non_null(x);
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof cursor, "%s", x->element[0]->str);
        for (i = 0; i < x->element[1]->elements; i++)
            snap_add(&s, x->element[1]->element[i]->str);
        freeReplyObject(x);
    } while (strcmp(cursor, "0") != 0);
    qsort(s.e, s.n, sizeof *s.e, by_key);
    return s;
}

static void snap_free(struct snap *s)
{
    size_t i;

    for (i = 0; i < s->n; i++) {
        free(s->e[i].key);
        free(s->e[i].dump);
    }
    free(s->e);
    s->e = NULL;
    s->n = 0;
}

/* The first difference in why (len bytes), and 1: a key made or gone, a
 * value changed, an expiry set, dropped or pushed later (a lease re-armed);
 * 0 when there is none.  Keys whose name holds skip (NULL: none) may
 * change.  Frees both. */
static int snap_diff(struct snap *a, struct snap *b, const char *skip,
                     char *why, size_t len)
{
    size_t i, j;
    int found = 0;

    for (i = j = 0; !found && (i < a->n || j < b->n);) {
        int c = i == a->n   ? 1
                : j == b->n ? -1
                            : strcmp(a->e[i].key, b->e[j].key);
        struct entry *x = c <= 0 ? &a->e[i] : &b->e[j], *y = &b->e[j];

        found = 1;
        if (skip && strstr(x->key, skip))
            found = 0;
        else if (c < 0)
            snprintf(why, len, "key '%s' was deleted", x->key);
        else if (c > 0)
            snprintf(why, len, "key '%s' was made", x->key);
        else if (x->dlen != y->dlen || memcmp(x->dump, y->dump, x->dlen) != 0)
            snprintf(why, len, "key '%s' was changed", x->key);
        else if ((x->pttl < 0) != (y->pttl < 0) || y->pttl > x->pttl)
            snprintf(why, len, "the expiry of '%s' went from %lld to %lld ms",
                     x->key, x->pttl, y->pttl);
        else
            found = 0;
        i += c <= 0, j += c >= 0;
    }
    snap_free(a);
    snap_free(b);
    return found;
}

/* ---- objects -------------------------------------------------------------- */

/* How long a waiter of a case waits: long enough, on a loaded machine, for
 * the test to see it wait and break a key under it before it gives up. */
#define WAIT_S 2.0

enum kind { MUTEX, FAIR, RWLOCK, RWLOCK_W, COND, SEM, RSEM, BARRIER };

struct obj {
    enum kind kind;
    char name[64];
    dist_mutex_t m; /* MUTEX, FAIR; COND's mutex */
    dist_rwlock_t rw;
    dist_sem_t s;
    dist_cond_t c;
    dist_barrier_t b;
    pthread_t th; /* a second thread's call (struct call) */
    int th_rc;
    char th_err[256];
    double wait_s; /* how long that call waits; 0: WAIT_S */
};

static void obj_init(struct obj *o, enum kind kind, int n)
{
    char mname[80];

    memset(o, 0, sizeof *o);
    o->kind = kind;
    snprintf(o->name, sizeof o->name, "kt:%d:%ld", n, (long)getpid());
    if (kind == MUTEX || kind == FAIR) {
        dist_mutexattr_t a;

        assert_int_equal(dist_mutexattr_init(&a), 0);
        assert_int_equal(dist_mutexattr_setfair(&a, kind == FAIR), 0);
        assert_int_equal(dist_mutex_init(&o->m, o->name, &a), 0);
    } else if (kind == RWLOCK || kind == RWLOCK_W) {
        dist_rwlockattr_t a;

        assert_int_equal(dist_rwlockattr_init(&a), 0);
        if (kind == RWLOCK_W)
            assert_int_equal(
                dist_rwlockattr_setkind(&a, DIST_RWLOCK_PREFER_WRITER), 0);
        assert_int_equal(dist_rwlock_init(&o->rw, o->name, &a), 0);
    } else if (kind == COND) {
        snprintf(mname, sizeof mname, "%s:m", o->name);
        assert_int_equal(dist_mutex_init(&o->m, mname, NULL), 0);
        assert_int_equal(dist_cond_init(&o->c, o->name, NULL), 0);
    } else if (kind == SEM || kind == RSEM) {
        dist_semattr_t a;

        assert_int_equal(dist_semattr_init(&a), 0);
        if (kind == RSEM)
            assert_int_equal(dist_semattr_setmode(&a, DIST_SEM_REDISSON), 0);
        assert_int_equal(dist_sem_init(&o->s, o->name, 1, &a), 0);
    } else {
        assert_int_equal(dist_barrier_init(&o->b, o->name, 2), 0);
    }
}

static void flush(void)
{
    redisReply *x = tu_cmd(&r, "FLUSHALL", NULL);

    assert_non_null(x);
    assert_int_not_equal(x->type, REDIS_REPLY_ERROR);
    freeReplyObject(x);
}

/* Lets go of what the case left (its keys are deleted first, so a hold
 * whose release failed is found gone), then deletes every key. */
static void obj_done(struct obj *o)
{
    flush();
    if (o->kind == MUTEX || o->kind == FAIR) {
        while (dist_mutex_unlock(&o->m) == 0)
            ;
        dist_mutex_destroy(&o->m);
    } else if (o->kind == RWLOCK || o->kind == RWLOCK_W) {
        while (dist_rwlock_unlock(&o->rw) == 0)
            ;
        dist_rwlock_destroy(&o->rw);
    } else if (o->kind == COND) {
        while (dist_mutex_unlock(&o->m) == 0)
            ;
        dist_cond_destroy(&o->c);
        dist_mutex_destroy(&o->m);
    } else if (o->kind == SEM || o->kind == RSEM) {
        while (dist_sem_post(&o->s) == 0 && o->kind == SEM)
            ;
        dist_sem_destroy(&o->s);
    } else {
        dist_barrier_destroy(&o->b);
    }
    flush();
}

/* The key named by fmt, where "%s" is the object's name. */
static void key_of(const struct obj *o, const char *fmt, char *buf,
                   size_t len)
{
    snprintf(buf, len, fmt, o->name);
}

/* Replaces key by a value of type kind, in one script: between a DEL and
 * the write that follows it the key would be missing for a moment, and a
 * waiter that tried then would find a free lock and take it (or a broken
 * barrier) instead of the key of another type. */
static void put_wrong(const char *key, const char *kind)
{
    static const char *const script =
        "redis.call('del', KEYS[1]) "
        "return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))";
    redisReply *x;

    if (strcmp(kind, "string") == 0)
        x = tu_cmd(&r, "EVAL", script, "1", key, "SET", "x", NULL);
    else if (strcmp(kind, "hash") == 0)
        x = tu_cmd(&r, "EVAL", script, "1", key, "HSET", "f", "v", NULL);
    else if (strcmp(kind, "set") == 0)
        x = tu_cmd(&r, "EVAL", script, "1", key, "SADD", "x", NULL);
    else if (strcmp(kind, "list") == 0)
        x = tu_cmd(&r, "EVAL", script, "1", key, "RPUSH", "x", NULL);
    else
        x = tu_cmd(&r, "EVAL", script, "1", key, "ZADD", "1", "x", NULL);
    assert_non_null(x);
    assert_int_not_equal(x->type, REDIS_REPLY_ERROR);
    freeReplyObject(x);
}

static void cmd_ok(const char *a0, const char *a1, const char *a2,
                   const char *a3, const char *a4)
{
    redisReply *x = tu_cmd(&r, a0, a1, a2, a3, a4, NULL);

    assert_non_null(x);
    assert_int_not_equal(x->type, REDIS_REPLY_ERROR);
    freeReplyObject(x);
}

/* ---- set-ups: what the script needs to find --------------------------- */

#define OTHER "0b5e55ed-0000-4000-8000-000000000000:1" /* another process */

static void none(struct obj *o)
{
    (void)o;
}

static void hold(struct obj *o)
{
    assert_int_equal(dist_mutex_lock(&o->m), 0);
}

/* cmd on the key fmt names ("%s": the object's name), with a and b (b
 * may be NULL). */
static void put(const struct obj *o, const char *cmd, const char *fmt,
                const char *a, const char *b)
{
    char key[160];

    key_of(o, fmt, key, sizeof key);
    cmd_ok(cmd, key, a, b, NULL);
}

/* Held by another process's owner, written by hand: a waiter queues. */
static void held_by_other(struct obj *o)
{
    put(o, "HSET", "%s", OTHER, "1");
    put(o, "PEXPIRE", "%s", "30000", NULL);
}

/* A mutex we took while a waiter of another process was registered: the
 * hold left its mark among the waiters, and its release reads them. */
static void hold_marked(struct obj *o)
{
    put(o, "ZADD", "distlock_mutex_waiters:{%s}", "99999999999999", OTHER);
    hold(o);
}

/* A fair lock we hold, with a waiter at the head of its queue whose
 * deadline has passed: the release drops it. */
static void hold_dead_waiter_queued(struct obj *o)
{
    hold(o);
    put(o, "RPUSH", "redisson_lock_queue:{%s}", OTHER, NULL);
    put(o, "ZADD", "redisson_lock_timeout:{%s}", "1", OTHER);
}

static void rdhold(struct obj *o)
{
    assert_int_equal(dist_rwlock_rdlock(&o->rw), 0);
}

static void wrhold(struct obj *o)
{
    assert_int_equal(dist_rwlock_wrlock(&o->rw), 0);
}

/* Read-held by another process's owner, written by hand, with its reader
 * entry: a writer waits (and, preferring writers, says so). */
static void read_by_other(struct obj *o)
{
    put(o, "HSET", "%s", "mode", "read");
    held_by_other(o);
    put(o, "ZADD", "distlock_rwlock_readers:{%s}", "99999999999999", OTHER);
}

static void cond_mutex_held(struct obj *o)
{
    hold(o);
}

/* Another process's waiter queued on the condition, by hand. */
static void cond_waiter_queued(struct obj *o)
{
    put(o, "RPUSH", "distlock_cond_queue:{%s}", OTHER, NULL);
    put(o, "ZADD", "distlock_cond_waiters:{%s}", "99999999999999", OTHER);
}

static void sem_taken(struct obj *o)
{
    assert_int_equal(dist_sem_trywait(&o->s), 0);
}

/* ---- the calls ------------------------------------------------------------ */

/* name(o): the library's call fn on o's field, all a case's call takes. */
#define ON_OBJ(name, fn, field)                                              \
    static int name(struct obj *o)                                           \
    {                                                                        \
        return fn(&o->field);                                                \
    }
ON_OBJ(do_trylock, dist_mutex_trylock, m)
ON_OBJ(do_lock, dist_mutex_lock, m)
ON_OBJ(do_unlock, dist_mutex_unlock, m)
ON_OBJ(tryrdlock, dist_rwlock_tryrdlock, rw)
ON_OBJ(trywrlock, dist_rwlock_trywrlock, rw)
ON_OBJ(wrlock, dist_rwlock_wrlock, rw)
ON_OBJ(rwunlock, dist_rwlock_unlock, rw)
ON_OBJ(do_cond_signal, dist_cond_signal, c)
ON_OBJ(do_sem_trywait, dist_sem_trywait, s)
ON_OBJ(do_sem_post, dist_sem_post, s)

static int timedlock(struct obj *o)
{
    struct timespec dl = realtime_in(0.3);

    return dist_mutex_timedlock(&o->m, &dl);
}

static int timedwrlock(struct obj *o)
{
    struct timespec dl = realtime_in(0.3);

    return dist_rwlock_timedwrlock(&o->rw, &dl);
}

static int cond_timedwait(struct obj *o)
{
    struct timespec dl = realtime_in(0.3);

    return dist_cond_timedwait(&o->c, &o->m, &dl);
}

static int do_sem_getvalue(struct obj *o)
{
    int v;

    return dist_sem_getvalue(&o->s, &v);
}

static int do_sem_setvalue(struct obj *o)
{
    return dist_sem_setvalue(&o->s, 3);
}

static int barrier_wait(struct obj *o)
{
    struct timespec dl = fx_clock_in(CLOCK_MONOTONIC, 0.3);

    return dist_barrier_clockwait(&o->b, CLOCK_MONOTONIC, &dl);
}

/* An operator's `distlock unlock --force`: the tool's exit status. */
static int force_unlock(struct obj *o)
{
    char cmd[512];
    int st;

    snprintf(cmd, sizeof cmd,
             "DISTLOCK_URL=%s tools/distlock unlock --force "
             "--yes '%s' >/dev/null 2>&1",
             r.url_tcp, o->name);
    st = system(cmd);
    return st == 0 ? 0 : (st == -1 ? errno : st);
}

/* ---- the table ------------------------------------------------------------ */

/* A call (after setup) that runs script, tried against each of the keys
 * in bad made of the wrong type in turn, on a fresh object each time. */
struct kcase {
    const char *script; /* the script the call runs into the wrong key */
    enum kind kind;
    void (*setup)(struct obj *o);
    int (*call)(struct obj *o);
    int names_key; /* the caller's error names the key */
    struct bad {
        const char *key;   /* the key made wrong, "%s" the object's name */
        const char *wrong; /* the type put there */
    } bad[4];              /* up to the first without a key */
};

#define TOKEN   "redisson_lock_token:{%s}"
#define WAITERS "distlock_mutex_waiters:{%s}"
/* clang-format off */
/* every key of a leased semaphore, made a string */
#define SEM_KEYS                                                             \
    { "distlock_sem:{%s}", "string" },                                       \
    { "distlock_sem_holds:{%s}", "string" },                                 \
    { "distlock_sem_leases:{%s}", "string" }

static const struct kcase cases[] = {
    /* a lock named redisson_lock_token:{victim} makes victim's counter a hash */
    { "mutex_lock", MUTEX, none, do_trylock, 1, {
          { TOKEN, "hash" }, { "%s", "string" } } },
    { "mutex_lock", MUTEX, hold, do_lock, 1, { { TOKEN, "hash" } } },
    { "mutex_unlock", MUTEX, hold, do_unlock, 1, { { "%s", "string" } } },
    /* the plain mutex's registered waiters: a fresh hold, a refused wait,
     * a release, an operator's force */
    { "mutex_lock", MUTEX, none, do_trylock, 1, { { WAITERS, "string" } } },
    { "mutex_lock", MUTEX, held_by_other, timedlock, 1, {
          { WAITERS, "hash" } } },
    { "mutex_unlock", MUTEX, hold_marked, do_unlock, 1, {
          { WAITERS, "string" } } },
    { "force_unlock", MUTEX, held_by_other, force_unlock, 0, {
          { WAITERS, "string" } } },
    { "fair_lock", FAIR, none, do_trylock, 1, {
          { TOKEN, "hash" }, { "%s", "string" },
          { "redisson_lock_queue:{%s}", "string" },
          { "distlock_fair_waiters:{%s}", "string" } } },
    { "fair_lock", FAIR, hold, do_lock, 1, { { TOKEN, "hash" } } },
    { "fair_lock", FAIR, held_by_other, timedlock, 1, {
          { "redisson_lock_timeout:{%s}", "string" },
          { "distlock_fair_waiters:{%s}", "hash" } } },
    { "fair_unlock", FAIR, hold, do_unlock, 1, {
          { "%s", "string" }, { "redisson_lock_queue:{%s}", "string" } } },
    { "fair_unlock", FAIR, hold_dead_waiter_queued, do_unlock, 1, {
          { "%s", "string" } } },
    { "force_unlock", FAIR, held_by_other, force_unlock, 0, {
          { "redisson_lock_queue:{%s}", "string" } } },
    { "rwlock_wrlock", RWLOCK, none, trywrlock, 1, {
          { TOKEN, "hash" }, { "%s", "string" },
          { "distlock_rwlock_readers:{%s}", "string" },
          { "distlock_rwlock_writers:{%s}", "string" } } },
    { "rwlock_wrlock", RWLOCK, wrhold, wrlock, 1, { { TOKEN, "hash" } } },
    { "rwlock_wrlock", RWLOCK_W, read_by_other, timedwrlock, 1, {
          { "distlock_rwlock_writers:{%s}", "string" } } },
    { "rwlock_rdlock", RWLOCK, none, tryrdlock, 1, {
          { "%s", "string" }, { "distlock_rwlock_readers:{%s}", "string" },
          { "distlock_rwlock_writers:{%s}", "hash" } } },
    { "rwlock_rdunlock", RWLOCK, rdhold, rwunlock, 1, {
          { "%s", "string" }, { "distlock_rwlock_readers:{%s}", "string" } } },
    { "rwlock_wrunlock", RWLOCK, wrhold, rwunlock, 1, {
          { "%s", "string" }, { "distlock_rwlock_writers:{%s}", "string" } } },
    { "cond_wait", COND, cond_mutex_held, cond_timedwait, 1, {
          { "distlock_cond_waiters:{%s}", "string" },
          { "distlock_cond_queue:{%s}", "string" },
          { "distlock_cond_signalled:{%s}", "string" } } },
    { "cond_signal", COND, cond_waiter_queued, do_cond_signal, 1, {
          { "distlock_cond_waiters:{%s}", "string" },
          { "distlock_cond_signalled:{%s}", "string" },
          { "distlock_cond_queue:{%s}", "hash" } } },
    { "sem_acquire", SEM, none, do_sem_trywait, 1, { SEM_KEYS } },
    { "sem_release", SEM, sem_taken, do_sem_post, 1, { SEM_KEYS } },
    { "sem_count", SEM, none, do_sem_getvalue, 1, {
          { "distlock_sem_leases:{%s}", "string" } } },
    { "sem_count", SEM, none, do_sem_setvalue, 1, {
          { "distlock_sem_holds:{%s}", "string" },
          { "distlock_sem:{%s}", "string" } } },
    { "rsem_acquire", RSEM, none, do_sem_trywait, 1, { { "%s", "hash" } } },
    { "rsem_count", RSEM, none, do_sem_post, 1, { { "%s", "hash" } } },
    { "barrier_arrive", BARRIER, none, barrier_wait, 1, {
          { "distlock_barrier_members:{%s}", "string" },
          { "distlock_barrier:{%s}", "string" } } },
};
/* clang-format on */

/* The end of a case on o: the keys changed between before and now (but
 * skip, when not NULL), or else the call or wait (what) succeeded, or its
 * error err (NULL: not checked) does not name key.  The object goes;
 * 0, or 1 with what went wrong printed after label. */
static int judged(struct obj *o, const char *label, struct snap *before,
                  const char *skip, const char *what, int rc, const char *err,
                  const char *key)
{
    struct snap after = snap_take();
    char why[400] = "";

    if (!snap_diff(before, &after, skip, why, sizeof why)) {
        if (rc == 0)
            snprintf(why, sizeof why, "the %s succeeded", what);
        else if (err && !strstr(err, key))
            snprintf(why, sizeof why, "the error does not name the key: %s",
                     err);
    }
    obj_done(o);
    if (why[0])
        print_error("%s: %s\n", label, why);
    return why[0] != 0;
}

/* Each of the n cases run by one (its index), the lost handler on: none
 * may fail. */
static void every_case(int (*one)(int n), size_t n)
{
    int failed = 0;

    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
    fx_dirty = 1;
    for (size_t i = 0; i < n; i++)
        failed += one((int)i);
    dist_set_lost_handler(NULL, NULL);
    assert_int_equal(failed, 0);
}

#define NCASES (sizeof cases / sizeof cases[0])
#define NBAD   (sizeof cases[0].bad / sizeof cases[0].bad[0])

/* Key n of the table, counting every key of every case in order: its
 * case, and the key in *b; NULL past the last. */
static const struct kcase *case_at(size_t n, const struct bad **b)
{
    for (size_t i = 0; i < NCASES; i++)
        for (size_t j = 0; j < NBAD && cases[i].bad[j].key; j++)
            if (n-- == 0) {
                *b = &cases[i].bad[j];
                return &cases[i];
            }
    return NULL;
}

/* One key of one case (case_at); 0, or 1 with what went wrong printed. */
static int run_case(int n)
{
    const struct bad *b;
    const struct kcase *c = case_at((size_t)n, &b);
    char label[320], key[160];
    struct snap before;
    struct fx_call res;
    struct obj o;

    obj_init(&o, c->kind, n);
    key_of(&o, b->key, key, sizeof key);
    snprintf(label, sizeof label, "case %d, %s: %s made a %s", n, c->script,
             key, b->wrong);
    c->setup(&o);
    put_wrong(key, b->wrong);
    before = snap_take();
    tu_sleep_ms(5); /* a lease re-armed now would end later */
    FX_CALL(&res, c->call(&o));
    return judged(&o, label, &before, NULL, "call", res.rc,
                  c->names_key ? res.err : NULL, key);
}

static void test_every_script_changes_nothing(void **state)
{
    const struct bad *b;
    size_t n = 0;

    (void)state;
    while (case_at(n, &b))
        n++;
    assert_true(n > NCASES); /* most cases try more than one key */
    every_case(run_case, n);
}

/* ---- a waiter that gives up ------------------------------------------------- */

/* The waiter's call, on a thread of its own, while the test breaks a key
 * under it: fair_cancel, rwlock_cancel, cond_check and barrier_check run
 * when a waiter gives up. */
static void *waiter(void *arg)
{
    struct obj *o = arg;
    struct timespec dl = realtime_in(o->wait_s > 0 ? o->wait_s : WAIT_S);

    if (o->kind == FAIR) {
        o->th_rc = dist_mutex_timedlock(&o->m, &dl);
    } else if (o->kind == RWLOCK_W) {
        o->th_rc = dist_rwlock_timedwrlock(&o->rw, &dl);
    } else if (o->kind == COND) {
        o->th_rc = dist_mutex_lock(&o->m);
        if (o->th_rc == 0)
            o->th_rc = dist_cond_timedwait(&o->c, &o->m, &dl);
        snprintf(o->th_err, sizeof o->th_err, "%s", dist_last_error());
        dist_mutex_unlock(&o->m); /* held again, or not: either way */
        return NULL;
    } else {
        struct timespec mdl = fx_clock_in(CLOCK_MONOTONIC, WAIT_S);

        o->th_rc = dist_barrier_clockwait(&o->b, CLOCK_MONOTONIC, &mdl);
    }
    snprintf(o->th_err, sizeof o->th_err, "%s", dist_last_error());
    return NULL;
}

struct gcase {
    const char *script;
    enum kind kind;
    void (*setup)(struct obj *o);
    const char *queued; /* the key where the waiter shows once it waits */
    const char *gone;   /* NULL, or a key gone once it waits (the cond's
                           * mutex, given back after the waiter registered) */
    const char *key;    /* then made wrong */
    const char *wrong;
};

static const struct gcase gcases[] = {
    { "fair_cancel", FAIR, held_by_other, "redisson_lock_queue:{%s}", NULL,
      "redisson_lock_timeout:{%s}", "string" },
    { "rwlock_cancel", RWLOCK_W, read_by_other,
      "distlock_rwlock_writers:{%s}", NULL, "%s", "string" },
    { "cond_check", COND, none, "distlock_cond_queue:{%s}", "%s:m",
      "distlock_cond_queue:{%s}", "string" },
    { "barrier_check", BARRIER, none, "distlock_barrier_members:{%s}", NULL,
      "distlock_barrier:{%s}", "string" },
};

/* One case; 0, or 1 with what went wrong printed. */
static int run_gcase(int n)
{
    const struct gcase *c = &gcases[n];
    char label[320], key[160], queued[160], gone[160] = "";
    struct snap before;
    double until;
    struct obj o;
    int early;

    obj_init(&o, c->kind, 100 + n);
    key_of(&o, c->key, key, sizeof key);
    key_of(&o, c->queued, queued, sizeof queued);
    snprintf(label, sizeof label, "waiter %d, %s: %s made a %s", n, c->script,
             key, c->wrong);
    c->setup(&o);
    assert_int_equal(pthread_create(&o.th, NULL, waiter, &o), 0);
    until = tu_now() + slack(WAIT_S * 0.75);
    while (tu_cmd_int(&r, "EXISTS", queued, NULL) != 1 && tu_now() < until)
        tu_sleep_ms(2);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", queued, NULL), 1);
    if (c->gone) {
        key_of(&o, c->gone, gone, sizeof gone);
        while (tu_cmd_int(&r, "EXISTS", gone, NULL) != 0 && tu_now() < until)
            tu_sleep_ms(2);
        assert_int_equal(tu_cmd_int(&r, "EXISTS", gone, NULL), 0);
    }
    put_wrong(key, c->wrong);
    /* a waiter that gave up before has left its queue: the case would pass
     * without a single script meeting the key */
    early = strcmp(queued, key) != 0 &&
            tu_cmd_int(&r, "EXISTS", queued, NULL) != 1;
    before = snap_take();
    assert_int_equal(pthread_join(o.th, NULL), 0);
    if (early) {
        snap_free(&before);
        obj_done(&o);
        print_error("%s: the waiter gave up before the key was made wrong "
                    "(its %.1f s were too short here)\n",
                    label, WAIT_S);
        return 1;
    }
    /* the cond's waiter takes its mutex back, whatever the wait gave */
    return judged(&o, label, &before, c->gone ? gone : NULL, "wait", o.th_rc,
                  o.th_rc != ETIMEDOUT ? o.th_err : NULL, key);
}

static void test_waiter_giving_up_changes_nothing(void **state)
{
    (void)state;
    every_case(run_gcase, sizeof gcases / sizeof gcases[0]);
}

/* ---- no second try ---------------------------------------------------------- */

/* Script calls that failed so far (EVALSHA's failed_calls). */
static long long failed_scripts(void)
{
    char *info = tu_cmd_str(&r, "INFO", "commandstats", NULL);
    const char *p = info ? strstr(info, "cmdstat_evalsha:") : NULL;
    long long n = 0;

    assert_non_null(info);
    if (p && (p = strstr(p, "failed_calls=")) != NULL)
        n = atoll(p + strlen("failed_calls="));
    free(info);
    return n;
}

/* A lock that waits gives up at the first refusal of a key of another
 * type: asking again only repeats it (it ran the script again and again
 * for the whole patience, each run leaving one more hold, before). */
static void test_refusal_is_not_retried(void **state)
{
    char key[160];
    long long before;
    struct fx_call res;
    struct obj o;

    (void)state;
    obj_init(&o, MUTEX, 300);
    key_of(&o, TOKEN, key, sizeof key);
    put_wrong(key, "hash");
    before = failed_scripts();
    FX_CALL(&res, dist_mutex_lock(&o.m));
    assert_int_equal(res.rc, EIO);
    assert_non_null(strstr(res.err, key));
    assert_int_equal(failed_scripts() - before, 1);
    obj_done(&o);
}

/* ---- the watchdog: one broken hold in a batch ----------------------------- */

#define SHORT_LEASE_MS 1500UL

/* PTTL of key. */
static long long pttl(const char *key)
{
    long long v = -3;

    assert_int_equal(tu_cmd_int_ex(&r, &v, "PTTL", key, NULL), 0);
    return v;
}

/* The first score of the ZSET key less the server's clock, in ms. */
static long long first_score_left(const char *key)
{
    static const char *const script =
        "local s = redis.call('zrange', KEYS[1], 0, 0, 'withscores')[2] "
        "local t = redis.call('time') "
        "return math.floor(tonumber(s or '0') - (tonumber(t[1]) * 1000 + "
        "math.floor(tonumber(t[2]) / 1000)))";
    long long v = -3;

    assert_int_equal(tu_cmd_int_ex(&r, &v, "EVAL", script, "1", key, NULL),
                     0);
    return v;
}

/* How long a's hold has left: its lock's PTTL, or for a semaphore the end
 * of its lease in the leases ZSET. */
static long long left_ms(const struct obj *a)
{
    char key[160];

    if (a->kind != SEM)
        return pttl(a->name);
    key_of(a, "distlock_sem_leases:{%s}", key, sizeof key);
    return first_score_left(key);
}

/* Two holds of kind, renewed in one batch; b's key made wrong.  After
 * more than a lease, a's hold still lives (renewed), b's broken key is
 * untouched, and b was reported lost. */
static void renew_case(int n, enum kind kind, const char *key_fmt,
                       const char *wrong)
{
    struct fx_settings s = { SHORT_LEASE_MS, 2000, 30000 };
    char key[160];
    struct obj a, b;
    double until;

    fx_dirty = 1;
    assert_int_equal(fx_apply(r.url_unix, &s), 0);
    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
    fx_lost_reset();
    obj_init(&a, kind, 200 + 2 * n);
    obj_init(&b, kind, 201 + 2 * n);
    if (kind == MUTEX) {
        hold(&a), hold(&b);
    } else if (kind == RWLOCK) {
        rdhold(&a), rdhold(&b);
    } else {
        sem_taken(&a), sem_taken(&b);
    }
    key_of(&b, key_fmt, key, sizeof key);
    put_wrong(key, wrong);
    tu_sleep_ms((long)(SHORT_LEASE_MS * 3 / 2));
    until = tu_now() + slack(3.0);
    while (fx_lost_calls(b.name) == 0 && tu_now() < until)
        tu_sleep_ms(20);
    if (left_ms(&a) <= 0)
        fail_msg("'%s' was not renewed beside a broken hold", a.name);
    assert_int_equal(fx_lost_calls(a.name), 0);
    assert_int_equal(fx_lost_calls(b.name), 1);
    assert_int_equal(pttl(key), -1); /* left as it was */
    obj_done(&a);
    obj_done(&b);
    dist_set_lost_handler(NULL, NULL);
    fx_restore_defaults(NULL);
}

static void test_renewal_skips_a_broken_hold(void **state)
{
    (void)state;
    renew_case(0, MUTEX, "%s", "string");
    renew_case(1, RWLOCK, "distlock_rwlock_readers:{%s}", "string");
    renew_case(2, SEM, "distlock_sem_leases:{%s}", "string");
}

/* Two fair waiters, each first in the queue of a lock another process
 * holds, pushed forward in one waiter_renew batch; b's marks made wrong.
 * After more than a window, a's deadline is still ahead (renewed), b's
 * keys are as they were (its deadline not pushed), and b's wait failed
 * naming the broken key. */
static void test_waiter_renewal_skips_a_broken_waiter(void **state)
{
    struct fx_settings s = { 30000, 2000, SHORT_LEASE_MS };
    char key[160], deadlines[160], queue[160];
    long long b_deadline;
    struct obj a, b;
    double until;

    (void)state;
    fx_dirty = 1;
    assert_int_equal(fx_apply(r.url_unix, &s), 0);
    obj_init(&a, FAIR, 400);
    obj_init(&b, FAIR, 401);
    a.wait_s = b.wait_s = 3.0 * SHORT_LEASE_MS / 1000;
    held_by_other(&a);
    held_by_other(&b);
    assert_int_equal(pthread_create(&a.th, NULL, waiter, &a), 0);
    assert_int_equal(pthread_create(&b.th, NULL, waiter, &b), 0);
    key_of(&b, "redisson_lock_queue:{%s}", queue, sizeof queue);
    until = tu_now() + slack(1.0);
    while (tu_cmd_int(&r, "EXISTS", queue, NULL) != 1 && tu_now() < until)
        tu_sleep_ms(2);
    key_of(&a, "redisson_lock_queue:{%s}", queue, sizeof queue);
    while (tu_cmd_int(&r, "EXISTS", queue, NULL) != 1 && tu_now() < until)
        tu_sleep_ms(2);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", queue, NULL), 1);
    key_of(&b, "distlock_fair_waiters:{%s}", key, sizeof key);
    put_wrong(key, "string");
    key_of(&b, "redisson_lock_timeout:{%s}", deadlines, sizeof deadlines);
    b_deadline = first_score_left(deadlines);
    tu_sleep_ms((long)(SHORT_LEASE_MS * 3 / 2));
    /* b's entry changed nothing: its deadline was not pushed forward */
    assert_true(first_score_left(deadlines) < b_deadline);
    key_of(&a, "redisson_lock_timeout:{%s}", deadlines, sizeof deadlines);
    if (first_score_left(deadlines) <= 0)
        fail_msg("the waiter on '%s' was not pushed forward beside a broken "
                 "one",
                 a.name);
    assert_int_equal(pthread_join(b.th, NULL), 0);
    assert_int_not_equal(b.th_rc, 0);
    if (!strstr(b.th_err, key))
        fail_msg("the broken waiter's error does not name '%s': %s", key,
                 b.th_err);
    assert_int_equal(pttl(key), -1); /* left as it was */
    assert_int_equal(pthread_join(a.th, NULL), 0);
    assert_int_equal(a.th_rc, ETIMEDOUT);
    obj_done(&a);
    obj_done(&b);
    fx_restore_defaults(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_every_script_changes_nothing),
        T(test_waiter_giving_up_changes_nothing),
        T(test_refusal_is_not_retried),
        T(test_renewal_skips_a_broken_hold),
        T(test_waiter_renewal_skips_a_broken_waiter),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_KEYTYPES_FILTER");
}
