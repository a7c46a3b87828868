/*
 * test_expiry: a name no longer used leaves nothing in Redis once its lease
 * and DISTLOCK_KEY_GRACE_MS have passed (issue 30), for every kind: plain,
 * fair and robust mutex (an owner-dead one and a not recoverable one too),
 * read-write lock, condition variable, semaphore (both modes), barrier.
 * With a grace of 0 the fencing counter is kept for ever, as before.
 * Against a private redis-server; each test starts from an empty database
 * and ends when DBSIZE is 0, or fails after a bound that names the keys
 * left.  TEST_EXPIRY_FILTER=<glob> runs some tests only.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

static tu_redis_t r;
static const struct fx_settings defaults = { 600, 2000, 600 };

#define GRACE_MS 300UL
#define LEASE_MS 400UL
/* Keys may take this long past lease + grace to go: the watchdog lease of a
 * hold let go, a waiter's window, Redis's lazy expiry (an expired key is
 * found by its active cycle within a few hundred ms), a loaded machine. */
#define BOUND_MS 8000L

static void flush(void)
{
    redisReply *x = tu_cmd(&r, "FLUSHALL", NULL);

    assert_non_null(x);
    freeReplyObject(x);
    fx_dirty = 1;
    assert_int_equal(dist_set_key_grace_ms(GRACE_MS), 0);
}

/* Prints the keys left and their PTTL. */
static void print_keys(void)
{
    redisReply *k = tu_cmd(&r, "KEYS", "*", NULL);
    size_t i;

    for (i = 0; k && i < k->elements; i++)
        fprintf(stderr, "left: %s (pttl %lld)\n", k->element[i]->str,
                tu_cmd_int(&r, "PTTL", k->element[i]->str, NULL));
    freeReplyObject(k);
}

/* Waits until the database is empty; fails, naming what is left, after
 * BOUND_MS. */
static void expect_empty(void)
{
    double until = tu_now() + BOUND_MS / 1000.0;
    long long n;

    while ((n = tu_cmd_int(&r, "DBSIZE", NULL)) > 0 && tu_now() < until)
        tu_sleep_ms(100);
    if (n != 0)
        print_keys();
    assert_int_equal(n, 0);
}

/* Waits until only the n keys k1 (and k2) are left, with no expiry;
 * fails, naming what is left, after BOUND_MS. */
static void expect_left(long long n, const char *k1, const char *k2)
{
    double until = tu_now() + BOUND_MS / 1000.0;
    long long got;

    while ((got = tu_cmd_int(&r, "DBSIZE", NULL)) > n && tu_now() < until)
        tu_sleep_ms(100);
    if (got != n)
        print_keys();
    assert_int_equal(got, n);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", k1, NULL), 1);
    if (k2)
        assert_int_equal(tu_cmd_int(&r, "EXISTS", k2, NULL), 1);
}

/* A mutex of test's own (tag), fair or not, robust or stalled, taken
 * twice and given back twice; its name. */
static const char *mutex_with(const char *test, const char *tag, int fair,
                              int robust)
{
    dist_mutexattr_t a;
    dist_mutex_t *m;

    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setfair(&a, fair), 0);
    assert_int_equal(dist_mutexattr_setrobust(&a, robust), 0);
    m = fx_own_mutex(test, tag, &a);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    return fx_name(m);
}

/* PTTL of the key of kind derived from name. */
static long long derived_pttl(const char *kind, const char *name)
{
    return derived_int(&r, "PTTL", kind, name);
}

static void test_mutex(void **state)
{
    const char *name;
    long long pttl;

    (void)state;
    flush();
    name = mutex_with(__func__, "m", 0, DIST_MUTEX_STALLED);
    /* the counter lives lease + grace, no longer */
    pttl = derived_pttl("redisson_lock_token", name);
    assert_true(pttl > 0 && pttl <= (long long)(600 + GRACE_MS));
    expect_empty();
}

/* A fair mutex with a waiter queued behind the holder. */
static void *fair_waiter(void *arg)
{
    dist_mutex_t *m = arg;

    if (dist_mutex_lock(m) != 0 || dist_mutex_unlock(m) != 0)
        return (void *)1;
    return NULL;
}

static void test_fair(void **state)
{
    dist_mutexattr_t a;
    dist_mutex_t *m;
    pthread_t t;
    void *res;

    (void)state;
    flush();
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setfair(&a, 1), 0);
    m = fx_mutex("fair", &a);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(pthread_create(&t, NULL, fair_waiter, m), 0);
    tu_sleep_ms(200);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(pthread_join(t, &res), 0);
    assert_null(res);
    expect_empty();
}

static void test_robust_clean(void **state)
{
    (void)state;
    flush();
    mutex_with(__func__, "robust", 0, DIST_MUTEX_ROBUST);
    mutex_with(__func__, "robustfair", 1, DIST_MUTEX_ROBUST);
    expect_empty();
}

/* A robust holder that died, and a lock made not recoverable: their
 * records go too, once nobody has tried the lock for lease + grace. */
static void test_robust_dead_and_unrecoverable(void **state)
{
    dist_mutexattr_t a;
    dist_mutex_t m;
    pid_t pid;
    int st, fd;
    char c = 0;

    (void)state;
    flush();
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setrobust(&a, DIST_MUTEX_ROBUST), 0);
    assert_int_equal(dist_mutexattr_setlease(&a, LEASE_MS), 0);
    pid = fork_piped(&fd);
    if (pid == 0) {
        dist_mutex_t k;
        if (fx_apply(r.url_unix, &defaults) != 0 ||
            dist_set_key_grace_ms(GRACE_MS) != 0 ||
            dist_mutex_init(&k, "exp:dead", &a) != 0 ||
            dist_mutex_lock(&k) != 0 ||
            dist_mutex_init(&k, "exp:nr", &a) != 0 ||
            dist_mutex_lock(&k) != 0 || write(fd, &c, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    assert_int_equal(read(fd, &c, 1), 1);
    close(fd);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(dist_mutex_init(&m, "exp:nr", &a), 0);
    assert_int_equal(dist_mutex_lock(&m), EOWNERDEAD);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_lock(&m), ENOTRECOVERABLE);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    expect_empty();
}

static void test_rwlock(void **state)
{
    dist_rwlockattr_t a;
    dist_rwlock_t rw, pw;

    (void)state;
    flush();
    assert_int_equal(dist_rwlock_init(&rw, "exp:rw", NULL), 0);
    assert_int_equal(dist_rwlock_rdlock(&rw), 0);
    assert_int_equal(dist_rwlock_unlock(&rw), 0);
    assert_int_equal(dist_rwlock_wrlock(&rw), 0);
    assert_int_equal(dist_rwlock_rdlock(&rw), 0);
    assert_int_equal(dist_rwlock_unlock(&rw), 0);
    assert_int_equal(dist_rwlock_unlock(&rw), 0);
    assert_int_equal(dist_rwlock_destroy(&rw), 0);
    assert_int_equal(dist_rwlockattr_init(&a), 0);
    assert_int_equal(dist_rwlockattr_setkind(&a, DIST_RWLOCK_PREFER_WRITER),
                     0);
    assert_int_equal(dist_rwlockattr_setlease(&a, LEASE_MS), 0);
    assert_int_equal(dist_rwlock_init(&pw, "exp:rwpw", &a), 0);
    assert_int_equal(dist_rwlock_wrlock(&pw), 0);
    assert_int_equal(dist_rwlock_unlock(&pw), 0);
    assert_int_equal(dist_rwlock_rdlock(&pw), 0); /* left to its lease */
    assert_int_equal(dist_rwlock_destroy(&pw), EBUSY);
    tu_sleep_ms(LEASE_MS + 100);
    assert_int_equal(dist_rwlock_unlock(&pw), EPERM);
    assert_int_equal(dist_rwlock_destroy(&pw), 0);
    expect_empty();
}

struct cond_arg {
    dist_cond_t *c;
    dist_mutex_t *m;
    int rc;
};

static void *cond_waiter(void *arg)
{
    struct cond_arg *x = arg;
    struct timespec ts = realtime_in(5);

    x->rc = dist_mutex_lock(x->m);
    if (x->rc == 0)
        x->rc = dist_cond_timedwait(x->c, x->m, &ts);
    if (x->rc == 0)
        x->rc = dist_mutex_unlock(x->m);
    return NULL;
}

static void test_cond(void **state)
{
    dist_mutex_t *m;
    pthread_t t;
    struct cond_arg x;
    struct timespec ts;

    (void)state;
    flush();
    m = fx_mutex("m", NULL);
    x.c = fx_cond("c", NULL);
    x.m = m;
    x.rc = -1;
    assert_int_equal(pthread_create(&t, NULL, cond_waiter, &x), 0);
    tu_sleep_ms(300);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_cond_signal(x.c), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(x.rc, 0);
    /* a wait that times out */
    assert_int_equal(dist_mutex_lock(m), 0);
    ts = realtime_in(0.2);
    assert_int_equal(dist_cond_timedwait(x.c, m, &ts), ETIMEDOUT);
    assert_int_equal(dist_mutex_unlock(m), 0);
    expect_empty();
}

/* A semaphore of test's own (tag) in mode, of 2 permits, both taken and
 * given back; its name. */
static const char *sem_with(const char *test, const char *tag, int mode)
{
    dist_semattr_t a;
    dist_sem_t *s;

    assert_int_equal(dist_semattr_init(&a), 0);
    assert_int_equal(dist_semattr_setmode(&a, mode), 0);
    s = fx_own_sem(test, tag, 2, &a);
    assert_int_equal(dist_sem_wait(s), 0);
    assert_int_equal(dist_sem_trywait(s), 0);
    assert_int_equal(dist_sem_trywait(s), EAGAIN);
    assert_int_equal(dist_sem_post(s), 0);
    assert_int_equal(dist_sem_post(s), 0);
    return fx_name(s);
}

/* A semaphore's count is its state, as a named POSIX semaphore's is until
 * sem_unlink: it stays (and a Redisson RSemaphore's key is Redisson's).
 * Everything else of it goes: its holds and leases. */
static void test_sem(void **state)
{
    const char *leased, *rsem;
    char count[300];

    (void)state;
    flush();
    leased = sem_with(__func__, "sem", DIST_SEM_LEASED);
    rsem = sem_with(__func__, "rsem", DIST_SEM_REDISSON);
    derived_name(count, sizeof count, "distlock_sem", leased);
    expect_left(2, count, rsem);
}

static void *barrier_member(void *arg)
{
    dist_barrier_t *b = arg;
    int rc = dist_barrier_wait(b);

    return (void *)(intptr_t)(rc == 0 || rc == DIST_BARRIER_SERIAL_THREAD);
}

static void test_barrier(void **state)
{
    dist_barrier_t a, b;
    pthread_t t;
    void *ok;
    int rc;

    (void)state;
    flush();
    assert_int_equal(dist_barrier_init(&a, "exp:barrier", 2), 0);
    assert_int_equal(dist_barrier_init(&b, "exp:barrier", 2), 0);
    assert_int_equal(pthread_create(&t, NULL, barrier_member, &b), 0);
    rc = dist_barrier_wait(&a);
    assert_true(rc == 0 || rc == DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_true(ok != NULL);
    assert_int_equal(dist_barrier_destroy(&a), 0);
    assert_int_equal(dist_barrier_destroy(&b), 0);
    /* its count and round stay, as a semaphore's count does */
    expect_left(1, "distlock_barrier:{exp:barrier}", NULL);
}

/* A grace of 0: the counter is kept for ever (PTTL -1), as before the
 * setting; and a counter that expired restarts above the tokens before. */
static void test_grace_zero_and_restart(void **state)
{
    dist_mutex_t *m;
    uint64_t t1 = 0, t2 = 0;

    (void)state;
    flush();
    m = fx_mutex("zero", NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_token(m, &t1), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    expect_empty();
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_token(m, &t2), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(t2 > t1);
    assert_int_equal(dist_set_key_grace_ms(0), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(derived_pttl("redisson_lock_token", fx_name(m)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_mutex),
        T(test_fair),
        T(test_robust_clean),
        T(test_robust_dead_and_unrecoverable),
        T(test_rwlock),
        T(test_cond),
        T(test_sem),
        T(test_barrier),
        T(test_grace_zero_and_restart),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_EXPIRY_FILTER");
}
