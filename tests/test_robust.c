/*
 * test_robust: robust mutexes (DIST_MUTEX_ROBUST) against a private
 * redis-server: a holder that does not release the lock cleanly (killed in
 * its section, its lease run out under SIGSTOP, its hold forced) makes the
 * next lock in another process return EOWNERDEAD with the lock held; that
 * holder's consistent + unlock is clean (the next locker gets 0), its
 * unlock without consistent makes the lock not recoverable for every
 * process (ENOTRECOVERABLE, nothing taken) until the record is deleted;
 * reentrant holds, the fair mutex, deferred release, cohorting (refused)
 * and what a mutex that is not robust leaves (nothing).
 * TEST_ROBUST_FILTER=<glob> runs some tests only.
 */
#define _GNU_SOURCE
#include <errno.h>
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
static const struct fx_settings defaults = { 30000, 2000, 0 };

/* how a robust mutex is made in these tests */
enum { PLAIN = 0, FAIR = 1 };
/* The kinds, for the cases run once with each (param_test). */
static const int plain_kind = PLAIN, fair_kind = FAIR;
#define LEASE_MS                                                             \
    800UL /* an explicit lease: a killed holder's hold ends
                            * this long after its lock */

/* a: the attributes of a robust mutex, fair or not, with an explicit
 * lease of lease_ms (0: the watchdog's). */
static void robust_attr(dist_mutexattr_t *a, int fair, unsigned long lease_ms)
{
    assert_int_equal(dist_mutexattr_init(a), 0);
    assert_int_equal(dist_mutexattr_setrobust(a, DIST_MUTEX_ROBUST), 0);
    assert_int_equal(dist_mutexattr_setfair(a, fair), 0);
    assert_int_equal(dist_mutexattr_setlease(a, lease_ms), 0);
}

static void init_robust(dist_mutex_t *m, const char *name, int fair,
                        unsigned long lease_ms)
{
    dist_mutexattr_t a;

    robust_attr(&a, fair, lease_ms);
    assert_int_equal(dist_mutex_init(m, name, &a), 0);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
}

/* A robust mutex of the test's own (fixture.h), its name made with tag;
 * robust_on: another on the name of first. */
#define robust_mutex(tag, fair, lease_ms)                                    \
    own_robust(__func__, tag, fair, lease_ms)
static dist_mutex_t *own_robust(const char *test, const char *tag, int fair,
                                unsigned long lease_ms)
{
    dist_mutexattr_t a;
    dist_mutex_t *m;

    robust_attr(&a, fair, lease_ms);
    m = fx_own_mutex(test, tag, &a);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
    return m;
}

static dist_mutex_t *robust_on(const dist_mutex_t *first, int fair,
                               unsigned long lease_ms)
{
    dist_mutexattr_t a;
    dist_mutex_t *m;

    robust_attr(&a, fair, lease_ms);
    m = fx_mutex_on(fx_name(first), &a);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
    return m;
}

/* The robust record of a lock (who held it, whether it died). */
#define record_key(key, len, name)                                           \
    derived_name(key, len, "distlock_robust", name)

#define record_exists(name) derived_int(&r, "EXISTS", "distlock_robust", name)

/* What distlock unlock --reset does: the record, which is there, deleted. */
static void reset_record(const char *name)
{
    char key[300];

    record_key(key, sizeof key, name);
    assert_int_equal(tu_cmd_int(&r, "DEL", key, NULL), 1);
}

/* A field of the record, malloc'd, or NULL. */
static char *record_field(const char *name, const char *field)
{
    char key[300];

    record_key(key, sizeof key, name);
    return tu_cmd_str(&r, "HGET", key, field, NULL);
}

/* What a child does with its robust mutex once it holds it. */
enum child_act {
    HOLD,            /* lock, say so, wait to be killed or stopped */
    TAKE_AND_UNLOCK, /* lock (any rc written), unlock if it holds it */
    TRY,             /* trylock and timedlock (0.3 s): their rcs written
                        * together; then lock: its rc, and it unlocks */
};

/* Forks a child that acts on a robust mutex of name; its results come on
 * the returned pipe's read end (*fd).  For HOLD, the child writes its lock's
 * rc and sleeps. */
static pid_t child(const char *name, int fair, unsigned long lease_ms,
                   enum child_act act, int *fd)
{
    pid_t pid = fork_piped(fd);

    if (pid == 0) {
        dist_mutex_t m;
        struct timespec ts;
        int rc[3] = { -1, -1, -1 };

        if (fx_apply(r.url_unix, &defaults) != 0)
            _exit(2);
        if (act == HOLD)
            dist_set_watchdog_ms(600); /* for a watchdog hold (lease 0) */
        init_robust(&m, name, fair, lease_ms);
        if (act == TRY) {
            rc[0] = dist_mutex_trylock(&m);
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 300000000L;
            if (ts.tv_nsec >= 1000000000L)
                ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            rc[1] = dist_mutex_timedlock(&m, &ts);
            if (write(*fd, rc, 2 * sizeof rc[0]) != 2 * (ssize_t)sizeof rc[0])
                _exit(3);
            rc[2] = dist_mutex_lock(&m);
            if (write(*fd, &rc[2], sizeof rc[2]) != (ssize_t)sizeof rc[2])
                _exit(3);
            if (rc[2] == 0 && dist_mutex_unlock(&m) != 0)
                _exit(4);
            _exit(0);
        }
        rc[0] = dist_mutex_lock(&m);
        if (write(*fd, rc, sizeof rc[0]) != (ssize_t)sizeof rc[0])
            _exit(3);
        if (act == HOLD)
            for (;;)
                pause();
        if (rc[0] == 0 || rc[0] == EOWNERDEAD)
            rc[1] = dist_mutex_unlock(&m);
        if (write(*fd, &rc[1], sizeof rc[1]) != (ssize_t)sizeof rc[1])
            _exit(3);
        _exit(0);
    }
    return pid;
}

static int read_rc(int fd)
{
    int rc = -100;

    assert_int_equal(read(fd, &rc, sizeof rc), (ssize_t)sizeof rc);
    return rc;
}

static void reap(pid_t pid)
{
    int st;

    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) || WIFSIGNALED(st));
    if (WIFEXITED(st))
        assert_int_equal(WEXITSTATUS(st), 0);
}

/* A child holds name (robust) and is killed in its section. */
static void holder_killed(const char *name, int fair)
{
    int fd;
    pid_t pid = child(name, fair, LEASE_MS, HOLD, &fd);

    assert_int_equal(read_rc(fd), 0);
    close(fd);
    assert_int_equal(kill(pid, SIGKILL), 0);
    reap(pid);
}

/* A second process (a child) locks name: the rc of its lock, and of its
 * unlock when it took it. */
static void other_locks(const char *name, int fair, int *lock_rc,
                        int *unlock_rc)
{
    int fd;
    pid_t pid = child(name, fair, LEASE_MS, TAKE_AND_UNLOCK, &fd);

    *lock_rc = read_rc(fd);
    *unlock_rc = read_rc(fd);
    close(fd);
    reap(pid);
}

/* The holder was killed: this process's lock waits for its lease, then
 * gets EOWNERDEAD with the lock held; consistent; a clean unlock, after
 * which another process's lock gets 0 and no record is left. */
static void killed_then_consistent(void **state)
{
    const int fair = param_int(state);
    dist_mutex_t *m = robust_mutex(fair ? "fair" : "plain", fair, LEASE_MS);
    const char *name = fx_name(m);
    int lrc, urc, fd, rc[2];
    pid_t pid;
    char *dead;

    holder_killed(name, fair);
    /* the record names the dead holder */
    dead = record_field(name, "held");
    assert_non_null(dead);
    free(dead);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    /* held: another process cannot take it; its lock waits, and gets 0
     * after the clean unlock below */
    pid = child(name, fair, LEASE_MS, TRY, &fd);
    assert_int_equal(read(fd, rc, 2 * sizeof rc[0]),
                     2 * (ssize_t)sizeof rc[0]);
    assert_int_equal(rc[0], EBUSY);
    assert_int_equal(rc[1], ETIMEDOUT);
    dead = record_field(name, "dead");
    assert_non_null(dead);
    free(dead);
    assert_int_equal(dist_mutex_consistent(m), 0);
    /* a second consistent is refused: it is consistent already */
    assert_int_equal(dist_mutex_consistent(m), EINVAL);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(read_rc(fd), 0);
    close(fd);
    reap(pid);
    assert_int_equal(record_exists(name), 0);
    other_locks(name, fair, &lrc, &urc);
    assert_int_equal(lrc, 0);
    assert_int_equal(urc, 0);
    assert_int_equal(record_exists(name), 0);
}

/* The owner-dead holder unlocks without consistent: every later lock,
 * trylock and timedlock in another process gets ENOTRECOVERABLE without
 * taking it, until the record is deleted (what distlock unlock --reset
 * does); then 0. */
static void unlock_without_consistent(void **state)
{
    const int fair = param_int(state);
    dist_mutex_t *m = robust_mutex(fair ? "fair" : "plain", fair, LEASE_MS);
    const char *name = fx_name(m);
    char key[300];
    int fd, rc[3], lrc, urc;
    pid_t pid;
    char *nr;

    holder_killed(name, fair);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    assert_int_equal(dist_mutex_unlock(m), 0);
    nr = record_field(name, "nr");
    assert_non_null(nr);
    free(nr);
    pid = child(name, fair, LEASE_MS, TRY, &fd);
    assert_int_equal(read(fd, rc, 2 * sizeof rc[0]),
                     2 * (ssize_t)sizeof rc[0]);
    rc[2] = read_rc(fd);
    close(fd);
    reap(pid);
    assert_int_equal(rc[0], ENOTRECOVERABLE);
    assert_int_equal(rc[1], ENOTRECOVERABLE);
    assert_int_equal(rc[2], ENOTRECOVERABLE);
    /* nothing was taken, nobody is queued */
    assert_int_equal(tu_cmd_int(&r, "EXISTS", name, NULL), 0);
    derived_name(key, sizeof key, "redisson_lock_queue", name);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", key, NULL), 0);
    /* this process too */
    assert_int_equal(dist_mutex_lock(m), ENOTRECOVERABLE);
    assert_int_equal(dist_mutex_trylock(m), ENOTRECOVERABLE);
    assert_int_equal(dist_mutex_unlock(m), EPERM);
    /* an operator's reset */
    reset_record(name);
    other_locks(name, fair, &lrc, &urc);
    assert_int_equal(lrc, 0);
    assert_int_equal(urc, 0);
}

/* A watchdog hold whose process is stopped (SIGSTOP) past its lease: the
 * next locker gets EOWNERDEAD; the stopped holder, continued, finds its
 * hold lost (its unlock says EPERM) and the record is the new holder's. */
static void test_lease_ran_out_under_sigstop(void **state)
{
    dist_mutex_t *m = robust_mutex("stop", PLAIN, LEASE_MS);
    const char *name = fx_name(m);
    int fd, rc;
    pid_t pid;
    char *held;

    (void)state;
    pid = child(name, PLAIN, 0, HOLD, &fd); /* watchdog lease, 600 ms */
    assert_int_equal(read_rc(fd), 0);
    close(fd);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    rc = dist_mutex_lock(m);
    assert_int_equal(rc, EOWNERDEAD);
    held = record_field(name, "dead");
    assert_non_null(held);
    free(held);
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    reap(pid);
    assert_int_equal(dist_mutex_consistent(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(record_exists(name), 0);
}

/* A hold forced away (what distlock unlock --force does: the lock key
 * deleted): the next holder gets EOWNERDEAD; the forced holder's unlock
 * says EPERM and leaves the new holder's record alone. */
static void test_forced_hold(void **state)
{
    dist_mutex_t *a = robust_mutex("forced", PLAIN, 0), *b;
    const char *name = fx_name(a);
    int fd, lrc, urc;
    pid_t pid;

    (void)state;
    assert_int_equal(dist_mutex_lock(a), 0);
    assert_int_equal(tu_cmd_int(&r, "DEL", name, NULL), 1);
    pid = child(name, PLAIN, LEASE_MS, HOLD, &fd);
    assert_int_equal(read_rc(fd), EOWNERDEAD);
    close(fd);
    assert_int_equal(dist_mutex_unlock(a), EPERM);
    assert_int_equal(record_exists(name), 1);
    assert_int_equal(kill(pid, SIGKILL), 0);
    reap(pid);
    /* the child died owner-dead, unrepaired: the next holder is told */
    b = robust_on(a, PLAIN, LEASE_MS);
    assert_int_equal(dist_mutex_lock(b), EOWNERDEAD);
    assert_int_equal(dist_mutex_consistent(b), 0);
    assert_int_equal(dist_mutex_unlock(b), 0);
    other_locks(name, PLAIN, &lrc, &urc);
    assert_int_equal(lrc, 0);
}

/* Reentrant holds of an owner-dead lock: a relock adds a hold (0), only
 * the last unlock ends it; consistent at any depth makes that last unlock
 * clean.  Without it the last one makes it not recoverable. */
static void test_reentrant(void **state)
{
    dist_mutex_t *m = robust_mutex("reentrant", PLAIN, LEASE_MS);
    const char *name = fx_name(m);
    int lrc, urc;

    (void)state;
    holder_killed(name, PLAIN);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_trylock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_consistent(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(record_exists(name), 1); /* still held */
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(record_exists(name), 0);
    other_locks(name, PLAIN, &lrc, &urc);
    assert_int_equal(lrc, 0);

    /* the same without consistent: not recoverable at the last unlock */
    holder_killed(name, PLAIN);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", name, NULL), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    other_locks(name, PLAIN, &lrc, &urc);
    assert_int_equal(lrc, ENOTRECOVERABLE);
    reset_record(name);
}

/* A clean robust pair leaves nothing but what a mutex that is not robust
 * leaves (the fencing counter); a mutex that is not robust never writes
 * the record, and does not see one. */
static void test_clean_and_not_robust(void **state)
{
    dist_mutex_t *m = robust_mutex("clean", PLAIN, 0), *plain;
    const char *name = fx_name(m);

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(record_exists(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(record_exists(name), 0);
    assert_int_equal(dist_mutex_consistent(m), EPERM);

    plain = fx_mutex_on(fx_name(m), NULL);
    assert_int_equal(dist_mutex_lock(plain), 0);
    assert_int_equal(record_exists(name), 0);
    assert_int_equal(dist_mutex_consistent(plain), EINVAL);
    assert_int_equal(dist_mutex_unlock(plain), 0);
    /* a record left by a dead robust holder: a plain mutex takes the lock
     * as always, and leaves the record for the next robust locker */
    holder_killed(name, PLAIN);
    assert_int_equal(dist_mutex_lock(plain), 0);
    assert_int_equal(dist_mutex_unlock(plain), 0);
    assert_int_equal(record_exists(name), 1);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    assert_int_equal(dist_mutex_consistent(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
}

/* The attribute: its values, and no cohorting with it. */
static void test_attr(void **state)
{
    static const int bad = 2;
    dist_mutexattr_t a;
    dist_mutex_t m;
    int v = -1;

    (void)state;
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_attr_values(&a, dist_mutexattr_setrobust, dist_mutexattr_getrobust,
                       DIST_MUTEX_STALLED, DIST_MUTEX_ROBUST, &bad, 1);
    assert_int_equal(dist_mutexattr_getcohort(&a, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(dist_mutexattr_setcohort(&a, 1), 0);
    assert_int_equal(dist_mutex_init(&m, "test_robust:attr", &a), EINVAL);
    assert_non_null(strstr(dist_last_error(), "robust"));
    assert_int_equal(dist_mutexattr_setrobust(&a, DIST_MUTEX_STALLED), 0);
    assert_int_equal(dist_mutex_init(&m, "test_robust:attr", &a), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* Deferred release: a clean deferred unlock leaves no record once its
 * reply is read; an owner-dead hold's deferred unlock without consistent
 * makes it not recoverable all the same. */
static void test_deferred(void **state)
{
    const char *name;
    dist_mutexattr_t a;
    dist_mutex_t *m, *other;
    int lrc, urc;

    (void)state;
    robust_attr(&a, PLAIN, LEASE_MS);
    assert_int_equal(dist_mutexattr_setdeferred(&a, 1), 0);
    m = fx_mutex("deferred", &a);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    /* the next call on the thread's link reads the release's reply */
    other = robust_mutex("other", PLAIN, LEASE_MS);
    assert_int_equal(dist_mutex_lock(other), 0);
    assert_int_equal(dist_mutex_unlock(other), 0);
    assert_int_equal(record_exists(name), 0);

    holder_killed(name, PLAIN);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    assert_int_equal(dist_mutex_unlock(m), 0);
    other_locks(name, PLAIN, &lrc, &urc);
    assert_int_equal(lrc, ENOTRECOVERABLE);
    reset_record(name);
}

/* Waiters blocked while an owner-dead holder unlocks without consistent
 * are woken and get ENOTRECOVERABLE; a fair waiter leaves the queue. */
static void waiter_woken_unrecoverable(void **state)
{
    const int fair = param_int(state);
    dist_mutex_t *m = robust_mutex(fair ? "fair" : "plain", fair, 0);
    const char *name = fx_name(m);
    char key[300];
    int fd, lrc;
    pid_t pid;

    holder_killed(name, fair);
    assert_int_equal(dist_mutex_lock(m), EOWNERDEAD);
    pid = child(name, fair, LEASE_MS, TAKE_AND_UNLOCK, &fd);
    tu_sleep_ms(300); /* the child waits (a fair one is queued) */
    assert_int_equal(dist_mutex_unlock(m), 0);
    lrc = read_rc(fd);
    assert_int_equal(lrc, ENOTRECOVERABLE);
    (void)read_rc(fd);
    close(fd);
    reap(pid);
    derived_name(key, sizeof key, "redisson_lock_queue", name);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", key, NULL), 0);
    reset_record(name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define P(name, fn, kind) param_test(name, fn, kind, fx_restore_defaults)
        FX_TEST(test_attr),
        FX_TEST(test_clean_and_not_robust),
        P(test_killed_holder_plain, killed_then_consistent, &plain_kind),
        P(test_killed_holder_fair, killed_then_consistent, &fair_kind),
        P(test_unlock_without_consistent_plain, unlock_without_consistent,
          &plain_kind),
        P(test_unlock_without_consistent_fair, unlock_without_consistent,
          &fair_kind),
        FX_TEST(test_lease_ran_out_under_sigstop),
        FX_TEST(test_forced_hold),
        FX_TEST(test_reentrant),
        FX_TEST(test_deferred),
        P(test_waiter_woken_plain, waiter_woken_unrecoverable, &plain_kind),
        P(test_waiter_woken_fair, waiter_woken_unrecoverable, &fair_kind),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_ROBUST_FILTER");
}
