/*
 * test_sem: behaviour of dist_sem_* against a private redis-server: the
 * sem_t calls, leased permits that come back when their holder is killed
 * (free plus held stays the total), unowned posts, and the
 * Redisson-compatible layout.
 *
 * As in test_mutex: one server for the group, fresh names per test, forked
 * children report through shared memory and exit codes, and only the main
 * thread asserts.
 */
#define _GNU_SOURCE
#include <errno.h>
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

/* A short watchdog lease, so that a killed holder's permits come back
 * soon. */
#define WATCHDOG_MS 1500UL

static const struct fx_settings defaults = { WATCHDOG_MS, 2000, 1000 };

#define NAME(buf, tag) test_lock_name(buf, sizeof buf, "test_sem", __func__, tag)

/* Free and held permits of a leased semaphore, read in one script so that
 * they are one moment's. */
static void leased_counts(const char *name, long long *free_, long long *held)
{
    static const char *const script =
        "local f = tonumber(redis.call('hget', KEYS[1], 'free') or '-1') "
        "local h = 0 "
        "for _, n in ipairs(redis.call('hvals', KEYS[2])) do "
        "h = h + tonumber(n) end "
        "return {f, h}";
    char k1[256], k2[256];
    redisReply *x;

    snprintf(k1, sizeof k1, "distlock_sem:{%s}", name);
    snprintf(k2, sizeof k2, "distlock_sem_holds:{%s}", name);
    x = tu_cmd(&r, "EVAL", script, "2", k1, k2, NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    *free_ = x->element[0]->integer;
    *held = x->element[1]->integer;
    freeReplyObject(x);
}

static int reaped_with(pid_t pid, int code)
{
    int st;

    return waitpid(pid, &st, 0) == pid && child_exit_ok(st, code);
}

/* ---- the calls ---------------------------------------------------------- */

static void test_take_and_give_back(void **state)
{
    char name[160];
    dist_sem_t s, t;
    struct timespec dl;
    struct fx_call c;
    int v = -1;
    long long f, h;

    (void)state;
    NAME(name, "s");
    assert_int_equal(dist_sem_init(&s, name, 2, NULL), 0);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 2);
    assert_int_equal(dist_sem_trywait(&s), 0);
    assert_int_equal(dist_sem_wait(&s), 0);
    assert_int_equal(dist_sem_trywait(&s), EAGAIN);
    leased_counts(name, &f, &h);
    assert_int_equal(f, 0);
    assert_int_equal(h, 2);

    dl = realtime_in(0.3);
    FX_CALL(&c, dist_sem_timedwait(&s, &dl));
    assert_int_equal(c.rc, ETIMEDOUT);
    assert_dbl_range(c.el, 0.3, 0.3 + slack(2.0));

    /* the initial value counts only for a semaphore that is new */
    assert_int_equal(dist_sem_init(&t, name, 7, NULL), 0);
    assert_int_equal(dist_sem_getvalue(&t, &v), 0);
    assert_int_equal(v, 0);
    /* objects of one name share the thread's holds, as locks do */
    assert_int_equal(dist_sem_destroy(&t), EBUSY);

    assert_int_equal(dist_sem_destroy(&s), EBUSY);
    assert_int_equal(dist_sem_post(&s), 0);
    assert_int_equal(dist_sem_post_multiple(&s, 1), 0);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 2);
    /* holding none, without unowned posts */
    assert_int_equal(dist_sem_post(&s), EPERM);
    leased_counts(name, &f, &h);
    assert_int_equal(f, 2);
    assert_int_equal(h, 0);
    assert_int_equal(dist_sem_destroy(&t), 0);
    assert_int_equal(dist_sem_destroy(&s), 0);
}

static void test_unowned_posts_and_maximum(void **state)
{
    char name[160];
    dist_sem_t s;
    dist_semattr_t a;
    int v = -1;

    (void)state;
    NAME(name, "s");
    assert_int_equal(dist_semattr_init(&a), 0);
    assert_int_equal(dist_semattr_setunowned(&a, 1), 0);
    assert_int_equal(dist_semattr_setmax(&a, 3), 0);
    assert_int_equal(dist_sem_init(&s, name, 4, &a), EINVAL);
    assert_int_equal(dist_sem_init(&s, name, 0, &a), 0);
    assert_int_equal(dist_sem_post_multiple(&s, 2), 0);
    assert_int_equal(dist_sem_post(&s), 0);
    assert_int_equal(dist_sem_post(&s), EOVERFLOW);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 3);
    /* a holder's post gives its permit back, whatever the maximum */
    assert_int_equal(dist_sem_wait(&s), 0);
    assert_int_equal(dist_sem_post(&s), 0);
    assert_int_equal(dist_sem_setvalue(&s, 4), EINVAL);
    assert_int_equal(dist_sem_setvalue(&s, 1), 0);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(dist_sem_destroy(&s), 0);
}

/* A waiter in another process is woken by a post, not by polling. */
struct waiter {
    const char *name;
    int mode;
    atomic_int *rc;
};

static void sem_waiter(void *arg)
{
    struct waiter *w = arg;
    dist_sem_t s;
    dist_semattr_t a;
    struct timespec dl = realtime_in(30);
    int rc;

    dist_semattr_init(&a);
    dist_semattr_setmode(&a, w->mode);
    dist_semattr_setunowned(&a, w->mode == DIST_SEM_LEASED);
    if (dist_sem_init(&s, w->name, 0, &a) != 0)
        _exit(3);
    rc = dist_sem_timedwait(&s, &dl);
    atomic_store(w->rc, rc);
    dist_shutdown();
    _exit(rc == 0 ? 0 : 1);
}

static void post_wakes_other_process(int mode)
{
    char name[160];
    dist_sem_t s;
    dist_semattr_t a;
    atomic_int *rc = mmap(NULL, sizeof *rc, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct waiter w;
    double t0;
    int v = -1;
    pid_t pid;

    assert_true(rc != MAP_FAILED);
    atomic_init(rc, -1);
    test_lock_name(name, sizeof name, "test_sem", "post_wakes", 
                   mode == DIST_SEM_LEASED ? "leased" : "redisson");
    w.name = name;
    w.mode = mode;
    w.rc = rc;
    assert_int_equal(dist_semattr_init(&a), 0);
    assert_int_equal(dist_semattr_setmode(&a, mode), 0);
    assert_int_equal(dist_semattr_setunowned(&a, mode == DIST_SEM_LEASED), 0);
    assert_int_equal(dist_sem_init(&s, name, 0, &a), 0);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 0);
    pid = fork_started(sem_waiter, &w);
    tu_sleep_ms(300);             /* it waits by now, most likely */
    assert_int_equal(atomic_load(rc), -1);
    t0 = tu_now();
    assert_int_equal(dist_sem_post(&s), 0);
    assert_true(reaped_with(pid, 0));
    /* woken by the message, well before its next look a window later */
    assert_dbl_range(tu_now() - t0, 0.0, 0.8);
    assert_int_equal(atomic_load(rc), 0);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(dist_sem_destroy(&s), 0);
    munmap(rc, sizeof *rc);
}

static void test_post_wakes_other_process(void **state)
{
    (void)state;
    post_wakes_other_process(DIST_SEM_LEASED);
}

/* ---- leases ----------------------------------------------------------------- */

/* A holder that is killed gives its permits back when the lease ends. */
static int take_two(void *arg)
{
    dist_sem_t *s = arg;
    int rc = dist_sem_wait(s);

    return rc ? rc : dist_sem_wait(s);
}

static void test_killed_holder_gives_back(void **state)
{
    char name[160];
    dist_sem_t s;
    struct timespec dl;
    struct fx_call c;
    long long f, h;
    int rc;
    pid_t pid;

    (void)state;
    NAME(name, "s");
    assert_int_equal(dist_sem_init(&s, name, 2, NULL), 0);
    pid = fork_locked(take_two, &s, &rc);
    assert_true(pid > 0);
    assert_int_equal(dist_sem_trywait(&s), EAGAIN);
    /* the renewal thread keeps them while the holder lives */
    tu_sleep_ms((long)(WATCHDOG_MS * 3 / 2));
    assert_int_equal(dist_sem_trywait(&s), EAGAIN);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dl = realtime_in(WATCHDOG_MS / 1000.0 + slack(3.0));
    FX_CALL(&c, dist_sem_timedwait(&s, &dl));
    assert_int_equal(c.rc, 0);
    assert_dbl_range(c.el, 0.0, WATCHDOG_MS / 1000.0 + slack(2.0));
    leased_counts(name, &f, &h);
    assert_int_equal(f + h, 2);
    assert_int_equal(h, 1);
    assert_int_equal(dist_sem_post(&s), 0);
    assert_int_equal(dist_sem_destroy(&s), 0);
}

#define PERMITS  3
#define WORKERS  6

struct pool {
    char name[160];
    atomic_int holding[WORKERS];  /* the worker is between wait and post */
    atomic_int over;              /* more holders than permits, seen */
    atomic_long rounds;
};

/* Takes a permit, checks nobody over-holds, keeps it a moment, gives it
 * back; until killed. */
static void worker(struct pool *p, int i)
{
    dist_sem_t s;
    int j, n;

    if (dist_sem_init(&s, p->name, PERMITS, NULL) != 0)
        _exit(3);
    srand((unsigned)getpid());
    for (;;) {
        if (dist_sem_wait(&s) != 0)
            _exit(4);
        atomic_store(&p->holding[i], 1);
        for (n = 0, j = 0; j < WORKERS; j++)
            n += atomic_load(&p->holding[j]);
        if (n > PERMITS)
            atomic_fetch_add(&p->over, 1);
        usleep((useconds_t)(rand() % 3000));
        atomic_store(&p->holding[i], 0);
        if (dist_sem_post(&s) != 0)
            _exit(5);
        atomic_fetch_add(&p->rounds, 1);
    }
}

static pid_t start_worker(struct pool *p, int i)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0)
        worker(p, i);
    return pid;
}

/* Workers share PERMITS permits; some are SIGKILLed at random moments and
 * replaced.  At every look free + held is the total, and no moment has
 * more holders than permits; at the end every permit is free again. */
static void test_invariant_under_sigkill(void **state)
{
    struct pool *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[WORKERS];
    long long f, h;
    double end;
    int i, k, kills = 0;

    (void)state;
    assert_true(p != MAP_FAILED);
    memset(p, 0, sizeof *p);
    test_lock_name(p->name, sizeof p->name, "test_sem", __func__, "s");
    srand((unsigned)getpid());
    for (i = 0; i < WORKERS; i++)
        pids[i] = start_worker(p, i);
    for (k = 0; k < 12; k++) {
        tu_sleep_ms(100 + rand() % 300);
        i = rand() % WORKERS;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
        /* its permit, if any, stays held until the lease ends: it no longer
         * counts as a holder the workers can see */
        atomic_store(&p->holding[i], 0);
        kills++;
        leased_counts(p->name, &f, &h);
        assert_int_equal(f + h, PERMITS);
        assert_true(f >= 0 && h >= 0);
        pids[i] = start_worker(p, i);
    }
    for (i = 0; i < WORKERS; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    /* all leases end within one watchdog lease: then every permit is free */
    end = tu_now() + WATCHDOG_MS / 1000.0 + slack(3.0);
    for (;;) {
        dist_sem_t s;
        int v = -1;
        assert_int_equal(dist_sem_init(&s, p->name, PERMITS, NULL), 0);
        assert_int_equal(dist_sem_getvalue(&s, &v), 0);
        assert_int_equal(dist_sem_destroy(&s), 0);
        if (v == PERMITS || tu_now() > end)
            break;
        tu_sleep_ms(100);
    }
    leased_counts(p->name, &f, &h);
    assert_int_equal(f, PERMITS);
    assert_int_equal(h, 0);
    assert_int_equal(atomic_load(&p->over), 0);
    print_message("%d kills, %ld rounds of take and give back\n", kills,
                  atomic_load(&p->rounds));
    assert_true(atomic_load(&p->rounds) > 0);
    munmap(p, sizeof *p);
}

/* ---- Redisson-compatible layout ----------------------------------------------- */

static void test_redisson_layout(void **state)
{
    char name[160], chan[200];
    dist_sem_t s;
    dist_semattr_t a;
    int v = -1;
    redisReply *x;

    (void)state;
    NAME(name, "s");
    snprintf(chan, sizeof chan, "redisson_sc:{%s}", name);
    assert_int_equal(dist_semattr_init(&a), 0);
    assert_int_equal(dist_semattr_setmode(&a, DIST_SEM_REDISSON), 0);
    assert_int_equal(dist_semattr_setmax(&a, 5), 0);
    assert_int_equal(dist_sem_init(&s, name, 2, &a), 0);
    assert_int_equal(dist_sem_trywait(&s), 0);
    /* RSemaphore's layout: the count in a plain string key */
    x = tu_cmd(&r, "GET", name, NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    assert_string_equal(x->str, "1");
    freeReplyObject(x);
    assert_int_equal(dist_sem_trywait(&s), 0);
    assert_int_equal(dist_sem_trywait(&s), EAGAIN);
    /* anyone may post; a dead taker's permit is not given back */
    assert_int_equal(dist_sem_post_multiple(&s, 5), 0);
    assert_int_equal(dist_sem_post(&s), EOVERFLOW);
    assert_int_equal(dist_sem_getvalue(&s, &v), 0);
    assert_int_equal(v, 5);
    /* a Redisson client's release: INCRBY and a message on the channel */
    assert_int_equal(dist_sem_setvalue(&s, 0), 0);
    assert_int_equal(tu_cmd_int(&r, "INCRBY", name, "1", NULL), 1);
    assert_int_equal(dist_sem_trywait(&s), 0);
    assert_int_equal(tu_cmd_int(&r, "GET", name, NULL), 0);
    assert_int_equal(dist_sem_destroy(&s), 0);
}

static void test_redisson_post_wakes_other_process(void **state)
{
    (void)state;
    post_wakes_other_process(DIST_SEM_REDISSON);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_take_and_give_back),
        T(test_unowned_posts_and_maximum),
        T(test_post_wakes_other_process),
        T(test_killed_holder_gives_back),
        T(test_invariant_under_sigkill),
        T(test_redisson_layout),
        T(test_redisson_post_wakes_other_process),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_SEM_FILTER");
}
