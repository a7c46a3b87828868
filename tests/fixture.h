/*
 * fixture: the group fixture the lock tests share (test_mutex, test_faults,
 * test_rwlock, test_fair; test_cluster and test_sentinel use fx_apply): one
 * private redis-server for the whole group, the library pointed at its
 * unix socket with known settings, the settings put back after a test that
 * changed them, and SIGPIPE counted instead of fatal.
 *
 * On the harness (harness_server.h), the library and cmocka; the
 * functions taking void **state are cmocka group or test fixtures.
 */
#ifndef DISTLOCK_FIXTURE_H
#define DISTLOCK_FIXTURE_H

#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <time.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_proxy.h"

/* Library settings a group runs with; a 0 field is left as the library
 * has it. */
struct fx_settings {
    unsigned long watchdog_ms;
    unsigned long timeout_ms;
    unsigned long waiter_ms;
};

/* The settings most groups run with: a watchdog long enough that no lease
 * runs out in a test by accident, a command timeout short enough that a
 * call gone wrong fails soon; waiter_ms as the group needs it (0: the
 * library's). */
#define DEFAULT_WATCHDOG_MS 30000UL
#define DEFAULT_TIMEOUT_MS  2000UL
#define FX_DEFAULTS(waiter_ms)                                               \
    {                                                                        \
        DEFAULT_WATCHDOG_MS, DEFAULT_TIMEOUT_MS, (waiter_ms)                 \
    }

/* The library on url with the settings s.  0, or -1 when one is refused. */
int fx_apply(const char *url, const struct fx_settings *s);

/* The group's server and settings, for the fixtures below, and the tests
 * to run: only those whose names match the glob in the environment
 * variable filter_env when it is set.  Call before cmocka_run_group_tests;
 * r and s must stay valid while it runs. */
void fx_use(tu_redis_t *r, const struct fx_settings *s,
            const char *filter_env);

/* An entry of main's table of tests: the test, with fx_restore_defaults
 * as its teardown. */
#define FX_TEST(f) cmocka_unit_test_teardown(f, fx_restore_defaults)

/* main's last step: the tests of the group on r with settings s (fx_use),
 * filtered by $filter_env. */
#define fx_run_group(tests, r, s, filter_env)                                \
    (fx_use(r, s, filter_env),                                               \
     cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown))

/* Group setup: SIGPIPE counted (fx_sigpipes), the server started, the
 * library on its unix socket with the settings.  0 or -1. */
int fx_group_setup(void **state);

/* Group teardown: dist_shutdown, then the server stopped. */
int fx_group_teardown(void **state);

/* Set by a test that changes the library's settings or lost handler and
 * cleared when it put them back itself. */
extern int fx_dirty;

/* Test teardown, a safety net for a test that failed half-way: when
 * fx_dirty, no lost handler and the group's url and settings again.  A
 * test that is done with its own settings calls it too (state NULL). */
int fx_restore_defaults(void **state);

/* A fault proxy in front of r and the library on it (fx_dirty set); NULL
 * when either fails (nothing left running). */
tu_proxy_t *fx_proxy_up(tu_redis_t *r);

/* The library back on r's unix socket first, so that none of its
 * connections is left on the proxy's port, then the proxy stopped.  0, or
 * -1 when the url is refused.  fx_dirty is left as it is. */
int fx_proxy_down(tu_redis_t *r, tu_proxy_t *p);

/* clk's time secs from now (secs may be negative), for timed calls. */
struct timespec fx_clock_in(clockid_t clk, double secs);

/* CLOCK_REALTIME secs from now: fx_clock_in(CLOCK_REALTIME, secs). */
struct timespec realtime_in(double secs);

/* What a library call gave, how long it took, and the library's reason
 * (dist_last_error) right after it. */
struct fx_call {
    int rc;
    double el;
    char err[256];
};

/* Runs call (an expression giving a library result) into *c. */
#define FX_CALL(c, call)                                                     \
    do {                                                                     \
        double t0_ = tu_now();                                               \
        (c)->rc = (call);                                                    \
        (c)->el = tu_now() - t0_;                                            \
        snprintf((c)->err, sizeof(c)->err, "%s", dist_last_error());         \
    } while (0)

/* ---- a call on a thread of its own ------------------------------------ */
/* fn(arg) on a thread of its own, for a call that blocks while the test
 * goes on: rc is -1 until fn returned, then what it returned. */
struct fx_thread {
    int (*fn)(void *arg);
    void *arg;
    atomic_int rc;
    pthread_t th;
};
/* Starts t (fails the test when the thread cannot be made). */
void fx_thread_start(struct fx_thread *t, int (*fn)(void *), void *arg);
/* Waits for t to end; what fn returned. */
int fx_thread_join(struct fx_thread *t);

/* A thread (fx_thread) that locks m (timedlock with a deadline secs ahead
 * when secs > 0), notes its result and when the call returned, and unlocks
 * at once. */
struct fx_locker {
    dist_mutex_t *m;
    double secs;
    int rc;          /* -1 until the call returned */
    double t;        /* tu_now() when it returned */
    atomic_int done; /* rc and t are set */
    struct fx_thread th;
};

/* Starts l (fails the test when the thread cannot be made). */
void fx_locker_start(struct fx_locker *l, dist_mutex_t *m, double secs);
void fx_locker_join(struct fx_locker *l);

/* The two signals between a test and a thread that holds a lock for it:
 * the thread says its lock call returned, the test says when to let go. */
struct fx_handshake {
    sem_t locked, release;
    pthread_t th;
};

/* Makes the signals and starts main(arg) on hs->th (fails the test when
 * the thread cannot be made). */
void fx_handshake_start(struct fx_handshake *hs, void *(*main)(void *),
                        void *arg);
/* On the thread: says its lock call returned, then waits to be let go. */
void fx_handshake_hold(struct fx_handshake *hs);
/* Tells the thread to let go, without waiting for it. */
void fx_handshake_release(struct fx_handshake *hs);
/* Waits for the thread to end and drops the signals. */
void fx_handshake_join(struct fx_handshake *hs);

/* A thread that takes a lock with lock(arg), notes when it got it, keeps
 * it until told to let go, then gives it back with unlock(arg) (both
 * return 0 or an error number).  A test wraps it with its kind of lock. */
struct fx_holder {
    int (*lock)(void *arg);
    int (*unlock)(void *arg);
    void *arg;
    struct fx_handshake hs;
    int lock_rc, unlock_rc; /* -1 until done; unlock_rc stays -1 when
                             * the lock failed */
    double t_locked;        /* tu_now() when lock returned */
};

/* Starts h and waits until its lock call returned; asserts it gave 0. */
void fx_holder_start(struct fx_holder *h, int (*lock)(void *),
                     int (*unlock)(void *), void *arg);
/* Tells it to let go, without waiting for it. */
void fx_holder_release(struct fx_holder *h);
/* Waits for it to end; asserts that its unlock gave 0. */
void fx_holder_join(struct fx_holder *h);
/* fx_holder_release, then fx_holder_join. */
void fx_holder_stop(struct fx_holder *h);

/* A test that watches for lost holds: fx_dirty set, the record below
 * emptied (fx_lost_reset), fx_on_lost installed as the lost handler. */
void fx_watch_lost(void);

/* A lost handler that records its calls, for dist_set_lost_handler
 * (fx_on_lost, NULL); the names of the first FX_LOST_MAX are kept. */
#define FX_LOST_MAX 16
void fx_on_lost(const char *name, void *arg);
/* Forget the calls recorded so far. */
void fx_lost_reset(void);
/* Calls recorded for name (NULL: all calls). */
int fx_lost_calls(const char *name);
/* The name of call i (from 0) in buf, "" when it was not kept; buf. */
const char *fx_lost_name(int i, char *buf, size_t len);
/* Whether the last call was for name. */
int fx_lost_last_is(const char *name);
/* fx_on_lost that holds up the thread reporting on its first call (since
 * fx_held_up_reset) until fx_held_up_go: the reports behind it wait. */
void fx_on_lost_held_up(const char *name, void *arg);
void fx_held_up_reset(void);
/* Whether the first call came within secs; its name in first. */
int fx_held_up_entered(double secs, char *first, size_t len);
void fx_held_up_go(void);

/* Mutual exclusion across processes: procs children of threads threads
 * each take the mutex init makes (init(m, name, arg): 0 or an errno; NULL:
 * dist_mutex_init with default attributes) iters times; inside, each GETs
 * and SETs the counter "<name>:counter" on a connection of its own to the
 * group's server and counts itself in shared memory.  Fails the test when
 * a child reports an error, two threads were ever inside at once, or the
 * counter, read once the children are gone, is not procs * threads *
 * iters: an update lost to an overlap the flag did not see. */
#define FX_MX_MAX_PROCS 8
struct fx_mx {
    const char *name;
    int procs, threads, iters;
    int (*init)(dist_mutex_t *m, const char *name, void *arg);
    void *arg;
};
void fx_mx_run(const struct fx_mx *run);

/* SIGPIPEs this process received since fx_group_setup.  The harness
 * blocks its own and its proxy uses MSG_NOSIGNAL, so any comes from the
 * library writing to a dead Redis socket. */
int fx_sigpipes(void);

/* A call made while the renewal thread is held up in the report of the
 * first lost hold of its round (fx_on_lost_held_up), and what it saw. */
struct fx_held_up_call {
    int entered;     /* the thread was held up within 10 s */
    char first[256]; /* the name of the report that holds it up */
    int rc;          /* what the call returned (-1: not made) */
    int calls;       /* reports of the call's lock as it returned */
};
/* A test that watches for lost holds (fx_watch_lost) with the reporting
 * thread held up on its first report (fx_on_lost_held_up), and a watchdog
 * that renews its holds, and so finds them gone, within a second or so
 * (the teardown restores the group's). */
void fx_watch_held_up(void);
/* Waits for the renewal thread to be held up, makes call(arg) then with
 * the reports of name counted as it returns, and lets the thread go. */
void fx_held_up_call(struct fx_held_up_call *c, int (*call)(void *),
                     void *arg, const char *name);
/* Asserts that the thread was held up in the report of first and that the
 * call said EPERM with its lock reported lost once: the report came before
 * it.  what and kind name them in the message ("post", "semaphore"). */
void fx_held_up_check(const struct fx_held_up_call *c, const char *first,
                      const char *what, const char *kind);

/* A forked child that holds obj (lock(obj), as fork_locked in testhelp.h)
 * with a 1.5 s lease that only its renewal keeps, fx_dirty set (the
 * watchdog setting changes).  Its pid; fails the test when it did not
 * lock. */
pid_t fx_fork_holder(int (*lock)(void *), void *obj);

/* A name one byte longer than DIST_NAME_MAX ('a's), which init refuses;
 * on the heap (free it). */
char *fx_name_too_long(void);

/* ---- objects a test owns ---------------------------------------------- */
/* fx_mutex(), fx_rwlock(), fx_cond(), fx_sem(): an object made on a name of
 * the test's own ("<prog>:<test>:<tag>:<pid>", as NAME in the programs)
 * and kept by the fixture until the test's teardown (fx_restore_defaults,
 * fx_own_teardown), which destroys the test's objects, the last made
 * first, and fails the test when a destroy does not return 0.  So a test
 * declares no name buffer and ends without destroy calls of its own; one
 * whose subject is destroy still makes and destroys its objects itself.
 * An init that fails fails the test.  At most FX_OWN_MAX objects a test.
 *
 * Before it destroys a mutex or a rwlock, the teardown checks that the
 * test left its lock free in Redis, on the group's server (fx_use): the
 * lock's hash (the name) is gone, and so are a fair mutex's queue, waiter
 * deadlines and marks and a rwlock's live readers; it fails the test
 * naming the object and the key left.  (A destroy refuses a hold this
 * process still counts; the check finds what Redis kept though the
 * library let go: a release that did not run, another client's hold, a
 * waiter's leftover.)  So a test does not end with a check of its own
 * that the key is gone.  Not checked: conditions and
 * semaphores (their keys may stay), a deferred mutex (its release may be
 * on its way), and an object of a test that leaves its lock held on
 * purpose and says so with fx_keys_stay(obj) (a child killed holding it, a
 * hash another client wrote). */
#define FX_OWN_MAX                 8
#define fx_mutex(tag, attr)        fx_own_mutex(__func__, tag, attr)
#define fx_rwlock(tag, attr)       fx_own_rwlock(__func__, tag, attr)
#define fx_cond(tag, attr)         fx_own_cond(__func__, tag, attr)
#define fx_sem(tag, initial, attr) fx_own_sem(__func__, tag, initial, attr)
dist_mutex_t *fx_own_mutex(const char *test, const char *tag,
                           const dist_mutexattr_t *attr);
dist_rwlock_t *fx_own_rwlock(const char *test, const char *tag,
                             const dist_rwlockattr_t *attr);
dist_cond_t *fx_own_cond(const char *test, const char *tag,
                         const dist_condattr_t *attr);
dist_sem_t *fx_own_sem(const char *test, const char *tag, unsigned initial,
                       const dist_semattr_t *attr);
/* The name an object of the test's own was made on. */
const char *fx_name(const void *obj);
/* obj's lock may be left held: the teardown does not check its keys. */
void fx_keys_stay(const void *obj);
/* The unlock of obj (a mutex or a rwlock the teardown checks) that gives
 * up the thread's last hold: it returns 0, leaves none of the keys the
 * teardown checks, and one more unlock says EPERM. */
void fx_last_unlock(const void *obj);
/* Teardown of a test that is not run by fx_run_group (cmocka's
 * cmocka_unit_test_teardown(f, fx_own_teardown)): the test's objects
 * destroyed, as above. */
int fx_own_teardown(void **state);
/* An entry of main's table for such a test. */
#define FX_OWN_TEST(f) cmocka_unit_test_teardown(f, fx_own_teardown)

/* ---- objects a test owns, on a name it chose ---------------------------- */
/* As fx_mutex() and fx_rwlock(), on name itself: a second object on the
 * lock of another (fx_name of it), or a name the test picked for where it
 * lands (a Cluster slot).  fx_name() gives name back. */
dist_mutex_t *fx_mutex_on(const char *name, const dist_mutexattr_t *attr);
dist_rwlock_t *fx_rwlock_on(const char *name, const dist_rwlockattr_t *attr);

/* A deadline 10 s ahead that is not a time, which a timed call that would
 * wait refuses with EINVAL: tv_nsec of one second, the first value out of
 * range (i == 0), or -1 (i == 1). */
struct timespec fx_bad_deadline(int i);

/* ---- a semaphore a test owns, on a name it chose ------------------------ */
/* As fx_sem(), on name itself (as fx_mutex_on()): a second object on the
 * semaphore of another. */
dist_sem_t *fx_sem_on(const char *name, unsigned initial,
                      const dist_semattr_t *attr);

/* ---- the last test of a group --------------------------------------- */
/* Nothing of any test of the group stays subscribed: no channel of the
 * group's server has a subscriber within 3 s.  An entry of main's table,
 * as test_no_channels_left. */
void fx_no_channels_left(void **state);
#define FX_NO_CHANNELS_LEFT                                                  \
    {                                                                        \
        "test_no_channels_left", fx_no_channels_left, NULL, NULL, NULL       \
    }

#endif
