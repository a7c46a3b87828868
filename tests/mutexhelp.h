/*
 * mutexhelp.h: what the dist_mutex test programs share (test_mutex_hold:
 * holds and who owns them; test_mutex_wait: waiting and deadlines;
 * test_mutex_lease: holds that end without an unlock; test_mutex_server:
 * a server that restarts, stalls or is not there): the group's server and
 * settings, queries of the lock's hash, a thread that holds a lock until
 * told, and a thread that runs one call.
 *
 * One server is started for a whole program (fixture.h); every test uses
 * fresh lock names (test name + pid).  cmocka is not thread-safe, so worker
 * threads and forked children only record results (variables, semaphores,
 * pipes, exit codes, shared memory) and the main thread asserts.  Timing
 * bounds are generous bounds, never exact timings: they must hold on a
 * loaded 2-core machine.  TEST_MUTEX_FILTER=<glob> runs some tests of each
 * program only.
 *
 * Static: each program gets its own copy.  Include after fixture.h; the
 * program defines MUTEX_PROG (its name, for lock names) before it.
 */
#ifndef DISTLOCK_MUTEXHELP_H
#define DISTLOCK_MUTEXHELP_H

#include <stdio.h>
#include <string.h>

static tu_redis_t r;

/* The group's settings (fixture.h); SIGPIPE is counted, not fatal
 * (test_mutex_server's test_no_sigpipe reports it). */
static const struct fx_settings defaults = FX_DEFAULTS(0);

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, MUTEX_PROG, __func__, tag)

/* Runs the program's tests (main's last step). */
#define MUTEX_RUN(tests)                                                     \
    fx_run_group(tests, &r, &defaults, "TEST_MUTEX_FILTER")

/* ---- Redis helpers (main thread or forked child) ------------------------ */

/* The owner field of the lock hash and its count (testhelp.h). */
#define owner_field(key, count) lock_owner_field(&r, key, count)

/* One-number queries (tu_cmd_int: -1 for nil or an error). */
#define hash_fields(key)       tu_cmd_int(&r, "HLEN", key, NULL)
#define key_exists(key)        tu_cmd_int(&r, "EXISTS", key, NULL)
#define hget_count(key, field) tu_cmd_int(&r, "HGET", key, field, NULL)

/* m works: a lock holds it once, and its unlock leaves nothing under
 * name. */
static inline void assert_works(dist_mutex_t *m, const char *name)
{
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(key_exists(name), 0);
}

/* A test's end: nothing is left under name, and m is destroyed. */
static inline void mutex_done(dist_mutex_t *m, const char *name)
{
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_destroy(m), 0);
}

/* ---- a thread that holds a lock until told to let go --------------------- */

static inline int holder_lock(void *m)
{
    return dist_mutex_lock(m);
}

static inline int holder_unlock(void *m)
{
    return dist_mutex_unlock(m);
}

/* The fixture's holder thread on m. */
static inline void holder_start(struct fx_holder *h, dist_mutex_t *m)
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

static inline void *oneshot_main(void *arg)
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

/* Runs op on m in a thread of its own (another owner than the caller). */
static inline void run_oneshot(struct oneshot *o, dist_mutex_t *m, enum op op)
{
    pthread_t th;

    memset(o, 0, sizeof *o);
    o->m = m;
    o->op = op;
    o->rc = -1;
    assert_int_equal(pthread_create(&th, NULL, oneshot_main, o), 0);
    pthread_join(th, NULL);
}

#endif
