/*
 * test_preload_calls: the pthread calls on mapped locks keep their
 * meaning: trylock, timedlock and clocklock, error-checking mutexes,
 * errno, pthread_exit in main, condition waits, read-write locks; and
 * their results when memory runs out or Redis cannot be reached.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "preload_help.h"
#include "testhelp.h"

/* ---- trylock, timedlock, clocklock ------------------------------------------------- */

static void test_trylock_and_timedlock(void **state)
{
    const char *cfg = target_config(NULL);
    char line[256];
    struct proc holder;
    double t0;

    (void)state;
    start_target(&holder, cfg, "hold", "static", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);

    t0 = tu_now();
    expect_rc(cfg, "try", NULL, EBUSY, -1, -1);
    assert_true(tu_now() - t0 < 10); /* no waiting in there */
    expect_rc(cfg, "timed", "400", ETIMEDOUT, 390, 5000);
    expect_rc(cfg, "clock", "400", ETIMEDOUT, 390, 5000);

    let_go(&holder);

    expect_rc(cfg, "try", NULL, 0, -1, -1);
    expect_rc(cfg, "timed", "400", 0, 0, 5000);
    expect_rc(cfg, "clock", "400", 0, 0, 5000);
    assert_int_equal(prefixed_keys(), 0);
}

/* Lock, unlock, pthread_exit in main (Open POSIX sem_init/3-1): the
 * process ends by itself with status 0, as without the shim; the
 * library's threads do not keep it alive. */
static void test_pthread_exit_in_main_ends(void **state)
{
    (void)state;
    target_line("pexit", "static", "exiting", 20, NULL);
}

/* The real mutex keeps its type: relock and foreign unlock of an
 * error-checking mutex fail as without the shim. */
static void test_errorcheck_kept(void **state)
{
    char want[128];

    (void)state;
    snprintf(want, sizeof want, "relock %d foreign %d unlock 0 again %d",
             EDEADLK, EPERM, EPERM);
    target_line("errcheck", NULL, "relock ", 20, want);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- errno -------------------------------------------------------------------------- */

static void test_errno_kept(void **state)
{
    char line[256];
    struct proc p;

    (void)state;
    start_target(&p, target_config(NULL), "errno", NULL, NULL);
    expect_line(&p, "errno changed ", line, sizeof line, 30);
    assert_exit(proc_end(&p, 20), 0);
    if (strcmp(line, "errno changed 0 of 22") != 0)
        fail_msg("%s; stdout: %s", line, p.obuf);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- out of memory ----------------------------------------------------------------- */

/* With the address space exhausted (RLIMIT_AS), pthread_mutex_init of an
 * init_site mutex and pthread_rwlock_init of an init_site rwlock fail
 * with ENOMEM (glibc's init of the rwlock undone: one call of glibc's
 * pthread_rwlock_destroy), and the lock calls of mapped locks with
 * EAGAIN, instead of an abort; with memory back both work, and a hold
 * whose reply the shortage lost is given back (no key is left).  The
 * configuration says on_unavailable = fail: out of memory, the library may
 * also answer as if Redis could not be reached, and then block would
 * wait for memory to come back. */
static void test_out_of_memory(void **state)
{
    char saved[sizeof redis_section], line[256], want[128], *at;
    const char *cfg;
    struct proc p;

    (void)state;
    if (child_env[0])
        skip(); /* the sanitizer's allocator dies rather than fail */
    memcpy(saved, redis_section, sizeof saved);
    at = strstr(redis_section, "on_unavailable = block");
    assert_non_null(at);
    memcpy(at + strlen("on_unavailable = "), "fail ", 5);
    cfg = target_config(NULL);
    memcpy(redis_section, saved, sizeof saved);
    start_target(&p, cfg, "nomem", NULL, NULL);
    expect_line(&p, "nomem ", line, sizeof line, 60);
    snprintf(want, sizeof want,
             "nomem init %d rwinit %d undone 1 lock %d try %d rd %d wait %d",
             ENOMEM, ENOMEM, EAGAIN, EAGAIN, EAGAIN, EAGAIN);
    assert_string_equal(line, want);
    expect_line(&p, "back ", line, sizeof line, 30);
    assert_string_equal(line, "back init 0 lock 0 global 0");
    assert_exit(proc_end(&p, 20), 0);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- condition variables -------------------------------------------------------- */

/* A wait on a condition variable with a mapped mutex: the target in mode
 * (on lock, ms as start_target) says "<said>rc <rc> helper 0", then holds
 * the lock until told to let go.
 *   test_cond_wait: pthread_cond_wait lets go of the distributed lock too
 *     (another thread, another owner for Redis, takes the mutex meanwhile)
 *     and has it back when it returns;
 *   test_cond_timedwait, test_cond_clockwait: the same when the wait times
 *     out. */
struct cond_case {
    const char *mode, *lock, *ms, *said;
    int rc;
};

static void test_cond(void **state)
{
    const struct cond_case *c = *state;
    const char *cfg = target_config(NULL);
    char line[256], want[64];
    struct proc p;

    start_target(&p, cfg, c->mode, c->lock, c->ms);
    expect_line(&p, c->said, line, sizeof line, 30);
    snprintf(want, sizeof want, "%src %d helper 0", c->said, c->rc);
    assert_string_equal(line, want);
    held_then_released(&p, c->lock);
}

static struct cond_case cond_wait = { "condwait", "static", NULL, "woke ",
                                      0 },
                        cond_timed = { "condtimed", "bank", "600",
                                       "timedout ", ETIMEDOUT },
                        cond_clock = { "condclock", "bank", "600",
                                       "timedout ", ETIMEDOUT };

/* ---- read-write locks ---------------------------------------------------------- */

static void test_rwlock_mapped(void **state)
{
    const char *cfg = target_config(NULL);
    char line[256];
    struct proc holder;

    (void)state;
    /* a writer in one process keeps out readers and writers of another */
    start_target(&holder, cfg, "wrhold", "catalog", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);
    assert_int_equal(key_exists("catalog"), 1);
    expect_rc_on(cfg, "tryrd", "catalog", NULL, EBUSY, -1, -1);
    expect_rc_on(cfg, "trywr", "catalog", NULL, EBUSY, -1, -1);
    expect_rc_on(cfg, "timedrd", "catalog", "400", ETIMEDOUT, 390, 5000);
    expect_rc_on(cfg, "clockwr", "catalog", "300", ETIMEDOUT, 290, 5000);
    let_go(&holder);
    assert_int_equal(key_exists("catalog"), 0);

    /* a reader lets readers in, keeps writers out */
    start_target(&holder, cfg, "rdhold", "catalog", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);
    assert_int_equal(key_exists("catalog"), 1);
    expect_rc_on(cfg, "tryrd", "catalog", NULL, 0, -1, -1);
    expect_rc_on(cfg, "clockrd", "catalog", "300", 0, 0, 5000);
    expect_rc_on(cfg, "trywr", "catalog", NULL, EBUSY, -1, -1);
    expect_rc_on(cfg, "timedwr", "catalog", "400", ETIMEDOUT, 390, 5000);
    let_go(&holder);
    expect_rc_on(cfg, "timedwr", "catalog", "400", 0, 0, 5000);
    assert_int_equal(key_exists("catalog"), 0);

    /* one initialised by an init_site function */
    start_target(&holder, cfg, "wrhold", "heapcat", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);
    assert_int_equal(key_exists("heapcat:0"), 1);
    let_go(&holder);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- Redis unavailable ------------------------------------------------------------ */

/* A configuration with Redis on port (where nobody listens) and the given
 * on_unavailable. */
static const char *down_config(int port, const char *on_unavailable)
{
    return write_file("down.ini",
                      "[redis]\nurl = redis://127.0.0.1:%d\n"
                      "timeout_ms = 300\non_unavailable = %s\n"
                      "[mutex %sstatic]\n"
                      "match = symbol preload_target.c:g_static_lock\n",
                      port, on_unavailable, pfx);
}

static void test_on_unavailable(void **state)
{
    char line[256];
    const char *cfg;
    struct proc p;
    int port = tu_free_port(), rc = -1, st;
    double ms = -1;

    (void)state;
    assert_true(port > 0);
    /* fail: the call fails with EAGAIN */
    cfg = down_config(port, "fail");
    target_says(&p, cfg, "timed", "static", "500", "rc ", 30, line,
                sizeof line);
    sscanf(line, "rc %d", &rc);
    assert_int_equal(rc, EAGAIN);
    assert_contains(p.ebuf, "on_unavailable = fail");

    /* block: waits for Redis until the deadline */
    cfg = down_config(port, "block");
    target_says(&p, cfg, "timed", "static", "800", "rc ", 30, line,
                sizeof line);
    sscanf(line, "rc %d ms %lf", &rc, &ms);
    assert_int_equal(rc, ETIMEDOUT);
    assert_true(ms >= 790);
    assert_contains(p.ebuf, "waiting for Redis");

    /* abort */
    cfg = down_config(port, "abort");
    start_target(&p, cfg, "try", "static", NULL);
    st = proc_end(&p, 30);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    assert_contains(p.ebuf, "on_unavailable = abort");
}

PL_MAIN(cmocka_unit_test(test_trylock_and_timedlock),
        cmocka_unit_test(test_pthread_exit_in_main_ends),
        cmocka_unit_test(test_errorcheck_kept),
        cmocka_unit_test(test_errno_kept),
        cmocka_unit_test(test_out_of_memory),
        param_test(test_cond_wait, test_cond, &cond_wait, NULL),
        param_test(test_cond_timedwait, test_cond, &cond_timed, NULL),
        param_test(test_cond_clockwait, test_cond, &cond_clock, NULL),
        cmocka_unit_test(test_rwlock_mapped),
        cmocka_unit_test(test_on_unavailable))
