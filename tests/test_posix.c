/*
 * test_posix: the POSIX statements distlock claims to honour for its
 * mutexes and read-write locks, one case each, for every type: what
 * trylock, lock and unlock answer by type, when a deadline is looked at,
 * that a lock free at the deadline is taken rather than timed out, that
 * signals never make a call fail, that errno is left alone, the clock
 * variants (and steps of the wall clock during a wait), and recursive
 * counts.  Written from the behaviour (pthread_mutex_lock,
 * pthread_rwlock_*, pthread_mutex_clocklock), not from any test suite.
 *
 * One private redis-server for the group, with a TLS port too (its
 * certificate from a throwaway CA the openssl command makes), for every
 * call on a PTHREAD_STACK_MIN thread over TLS; fresh lock names per test.  Worker threads only record; the main thread asserts.
 * Time bounds are generous bounds that hold on a loaded 2-core machine.
 *
 * Steps of CLOCK_REALTIME are simulated by clock_hook.c, linked in: it
 * defines clock_gettime for the program.  The machine's clock is never
 * touched.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <spawn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "harness_proxy.h"
#include "testhelp.h"
#include "fixture.h"
#include "clock_hook.h"

static tu_redis_t r;

#define WATCHDOG_MS 30000UL
#define TIMEOUT_MS  2000UL

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_posix", __func__, tag)

/* ---- every type of lock, through one set of calls ------------------------------ */

enum kind {
    K_RECURSIVE,
    K_ERRORCHECK,
    K_FAIR,
    K_RWLOCK,
    K_RWLOCK_PW,
    K_COUNT
};

static const char *const kind_name[K_COUNT] = {
    "recursive", "errorcheck", "fair", "rwlock", "rwlock-prefer-writer",
};

struct obj {
    enum kind k;
    int rw;
    dist_mutex_t m;
    dist_rwlock_t l;
    char name[256];
};

static void obj_init(struct obj *o, enum kind k, const char *test)
{
    dist_mutexattr_t ma;
    dist_rwlockattr_t ra;

    memset(o, 0, sizeof *o);
    o->k = k;
    o->rw = k == K_RWLOCK || k == K_RWLOCK_PW;
    test_lock_name(o->name, sizeof o->name, "test_posix", test, kind_name[k]);
    if (o->rw) {
        assert_int_equal(dist_rwlockattr_init(&ra), 0);
        if (k == K_RWLOCK_PW)
            assert_int_equal(
                dist_rwlockattr_setkind(&ra, DIST_RWLOCK_PREFER_WRITER), 0);
        assert_int_equal(dist_rwlock_init(&o->l, o->name, &ra), 0);
        return;
    }
    assert_int_equal(dist_mutexattr_init(&ma), 0);
    if (k == K_ERRORCHECK)
        assert_int_equal(dist_mutexattr_settype(&ma, DIST_MUTEX_ERRORCHECK),
                         0);
    if (k == K_FAIR)
        assert_int_equal(dist_mutexattr_setfair(&ma, 1), 0);
    assert_int_equal(dist_mutex_init(&o->m, o->name, &ma), 0);
}

static void obj_destroy(struct obj *o)
{
    assert_int_equal(
        o->rw ? dist_rwlock_destroy(&o->l) : dist_mutex_destroy(&o->m), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", o->name, NULL), 0);
}

/* wr: for a rwlock, the write lock (ignored for a mutex) */
static int o_lock(struct obj *o, int wr)
{
    if (!o->rw)
        return dist_mutex_lock(&o->m);
    return wr ? dist_rwlock_wrlock(&o->l) : dist_rwlock_rdlock(&o->l);
}

static int o_try(struct obj *o, int wr)
{
    if (!o->rw)
        return dist_mutex_trylock(&o->m);
    return wr ? dist_rwlock_trywrlock(&o->l) : dist_rwlock_tryrdlock(&o->l);
}

static int o_timed(struct obj *o, int wr, const struct timespec *abs)
{
    if (!o->rw)
        return dist_mutex_timedlock(&o->m, abs);
    return wr ? dist_rwlock_timedwrlock(&o->l, abs)
              : dist_rwlock_timedrdlock(&o->l, abs);
}

static int o_clock(struct obj *o, int wr, clockid_t clk,
                   const struct timespec *abs)
{
    if (!o->rw)
        return dist_mutex_clocklock(&o->m, clk, abs);
    return wr ? dist_rwlock_clockwrlock(&o->l, clk, abs)
              : dist_rwlock_clockrdlock(&o->l, clk, abs);
}

static int o_unlock(struct obj *o)
{
    return o->rw ? dist_rwlock_unlock(&o->l) : dist_mutex_unlock(&o->m);
}

static int o_token(struct obj *o, uint64_t *tok)
{
    return o->rw ? dist_rwlock_token(&o->l, tok)
                 : dist_mutex_token(&o->m, tok);
}

/* The ways a call may ask for a lock with a deadline. */
enum how { H_TIMED, H_CLOCK_RT, H_CLOCK_MONO, H_COUNT };

static int o_deadline(struct obj *o, int wr, enum how h, double secs,
                      struct timespec *abs)
{
    clockid_t clk = h == H_CLOCK_MONO ? CLOCK_MONOTONIC : CLOCK_REALTIME;

    if (abs->tv_sec == 0 && abs->tv_nsec == 0)
        *abs = fx_clock_in(clk, secs);
    return h == H_TIMED ? o_timed(o, wr, abs) : o_clock(o, wr, clk, abs);
}

/* ---- a thread that holds a lock until told to let go ------------------------ */

/* the fixture's holder thread on one of the objects, as reader or writer */
struct holder {
    struct fx_holder fx;
    struct obj *o;
    int wr;
};

static int holder_lock(void *arg)
{
    struct holder *h = arg;

    return o_lock(h->o, h->wr);
}

static int holder_unlock(void *arg)
{
    return o_unlock(((struct holder *)arg)->o);
}

static void holder_start(struct holder *h, struct obj *o, int wr)
{
    h->o = o;
    h->wr = wr;
    fx_holder_start(&h->fx, holder_lock, holder_unlock, h);
}

static void holder_release(struct holder *h)
{
    fx_holder_release(&h->fx);
}

static void holder_join(struct holder *h)
{
    fx_holder_join(&h->fx);
}

static void holder_stop(struct holder *h)
{
    fx_holder_stop(&h->fx);
}

/* ---- a thread that makes one call ---------------------------------------------- */

enum op { OP_TRY, OP_UNLOCK };

struct oneshot {
    struct obj *o;
    int wr;
    enum op op;
    int rc;
};

static void *oneshot_main(void *arg)
{
    struct oneshot *s = arg;

    if (s->op == OP_TRY) {
        s->rc = o_try(s->o, s->wr);
        if (s->rc == 0)
            o_unlock(s->o);
    } else {
        s->rc = o_unlock(s->o);
    }
    return NULL;
}

/* The answer of op by another thread. */
static int other_thread(struct obj *o, int wr, enum op op)
{
    struct oneshot s = { o, wr, op, -1 };
    pthread_t th;

    assert_int_equal(pthread_create(&th, NULL, oneshot_main, &s), 0);
    pthread_join(th, NULL);
    return s.rc;
}

/* ---- the group's server, with a TLS port ------------------------------------------ */

static char cert_dir[256]; /* a throwaway CA and the server's certificate */

/* cert_dir/name, in a static buffer. */
static const char *cert_file(const char *name)
{
    static char buf[4][320];
    static int slot;

    slot = (slot + 1) % 4;
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", cert_dir, name);
    return buf[slot];
}

/* A CA and a server certificate for 127.0.0.1 it signed, made by the
 * openssl command in a new cert_dir (test_tls makes the same).  0 or -1. */
static int make_certs(void)
{
    static const char *const steps[] = {
        "printf 'subjectAltName=IP:127.0.0.1\\n' > srv.ext",
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        " -keyout ca.key -out ca.crt -days 2 -subj /CN=distlock-test-ca",
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        " -keyout srv.key -out srv.csr -subj /CN=localhost",
        "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key"
        " -CAcreateserial -days 2 -extfile srv.ext -out srv.crt",
    };
    const char *tmp = getenv("TMPDIR");
    char cmd[600];
    size_t i;

    snprintf(cert_dir, sizeof cert_dir, "%s/distlock-posix-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cert_dir))
        return -1;
    for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd '%s' && { %s; } >/dev/null 2>&1",
                 cert_dir, steps[i]);
        if (system(cmd) != 0) {
            fprintf(stderr, "test_posix: failed: %s\n", steps[i]);
            return -1;
        }
    }
    return 0;
}

/* ---- fixtures ------------------------------------------------------------------ */

static int group_setup(void **state)
{
    tu_tls_conf t = { NULL, NULL, NULL, 0 };
    tu_redis_opts o;

    (void)state;
    signal(SIGPIPE, SIG_IGN);
    if (make_certs() != 0)
        return -1;
    t.cert = cert_file("srv.crt");
    t.key = cert_file("srv.key");
    t.ca = cert_file("ca.crt");
    memset(&o, 0, sizeof o);
    o.tls = &t;
    if (tu_redis_start_opts(&r, &o) != 0)
        return -1;
    if (dist_set_url(r.url_unix) != 0 ||
        dist_set_watchdog_ms(WATCHDOG_MS) != 0 ||
        dist_set_timeout_ms(TIMEOUT_MS) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    char cmd[300];

    (void)state;
    dist_shutdown();
    tu_redis_stop(&r);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cert_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* After each test: its objects destroyed (fx_own_teardown), then the
 * clock and the library's settings as the group has them. */
static int restore(void **state)
{
    int rc = fx_own_teardown(state);

    clock_hook_unstep_realtime();
    dist_set_lost_handler(NULL, NULL);
    dist_set_url(r.url_unix);
    dist_set_watchdog_ms(WATCHDOG_MS);
    dist_set_timeout_ms(TIMEOUT_MS);
    return rc;
}

/* body on a fresh object of each kind in turn, named for test; the
 * object is destroyed after it (which checks that no key is left). */
static void each_kind(const char *test, void (*body)(struct obj *o))
{
    int k;

    for (k = 0; k < K_COUNT; k++) {
        struct obj o;

        obj_init(&o, (enum kind)k, test);
        body(&o);
        obj_destroy(&o);
    }
}

/* ---- EBUSY from trylock on a locked object, whoever holds it --------------------- */

static void trylock_busy_on(struct obj *o)
{
    struct holder h;
    int hw, tw;

    for (hw = 0; hw <= o->rw; hw++) {
        holder_start(&h, o, hw);
        for (tw = 0; tw <= o->rw; tw++) {
            /* readers share: a read try while another reads succeeds */
            int want = o->rw && !hw && !tw ? 0 : EBUSY, rc = o_try(o, tw);
            if (rc == 0)
                assert_int_equal(o_unlock(o), 0);
            if (rc != want)
                fail_msg("%s: try%s while another thread holds it%s: "
                         "%d, expected %d",
                         kind_name[o->k],
                         o->rw ? (tw ? "wrlock" : "rdlock") : "lock",
                         o->rw ? (hw ? " for writing" : " for reading") : "",
                         rc, want);
        }
        holder_stop(&h);
    }
    /* the owner itself: only the types that refuse a relock say EBUSY */
    assert_int_equal(o_lock(o, 0), 0);
    if (o->k == K_ERRORCHECK) {
        assert_int_equal(o_try(o, 0), EBUSY);
    } else {
        assert_int_equal(o_try(o, 0), 0);
        assert_int_equal(o_unlock(o), 0);
    }
    if (o->rw) /* a read hold cannot be upgraded */
        assert_int_equal(o_try(o, 1), EBUSY);
    assert_int_equal(o_unlock(o), 0);
}

static void test_trylock_busy(void **state)
{
    (void)state;
    each_kind(__func__, trylock_busy_on);
}

/* ---- EDEADLK and EPERM where the type says so -------------------------------------- */

static void deadlock_and_perm_by_type_on(struct obj *o)
{
    struct holder hd;
    struct timespec abs;
    int h;

    /* unlock of what nobody holds, and of another thread's hold */
    assert_int_equal(o_unlock(o), EPERM);
    holder_start(&hd, o, 1);
    assert_int_equal(o_unlock(o), EPERM);
    holder_stop(&hd); /* its hold was untouched */

    assert_int_equal(o_lock(o, 0), 0);
    for (h = 0; h < H_COUNT; h++) {
        int rc, want = o->k == K_ERRORCHECK ? EDEADLK : 0;
        memset(&abs, 0, sizeof abs);
        rc = o_deadline(o, 0, (enum how)h, 5.0, &abs);
        if (rc == 0)
            assert_int_equal(o_unlock(o), 0);
        if (rc != want)
            fail_msg("%s: relock by the owner (how %d): %d, expected %d",
                     kind_name[o->k], h, rc, want);
    }
    if (o->k == K_ERRORCHECK)
        assert_int_equal(o_lock(o, 0), EDEADLK);
    if (o->rw) {
        /* read holds only: waiting to write would wait for ever */
        assert_int_equal(o_lock(o, 1), EDEADLK);
        for (h = 0; h < H_COUNT; h++) {
            memset(&abs, 0, sizeof abs);
            assert_int_equal(o_deadline(o, 1, (enum how)h, 5.0, &abs),
                             EDEADLK);
        }
    }
    assert_int_equal(other_thread(o, 0, OP_UNLOCK), EPERM);
    assert_int_equal(o_unlock(o), 0);
    assert_int_equal(o_unlock(o), EPERM);
}

static void test_deadlock_and_perm_by_type(void **state)
{
    (void)state;
    each_kind(__func__, deadlock_and_perm_by_type_on);
}

/* ---- recursive counts ----------------------------------------------------------- */

/* n holds need n unlocks: after n-1 of them another thread still finds the
 * lock taken; after the n-th it is free and one more unlock is EPERM. */
static void check_counts(struct obj *o, int wr, int n)
{
    int i;

    for (i = 0; i < n; i++)
        assert_int_equal(o_lock(o, wr), 0);
    if (!o->rw) {
        long long cnt = -1;
        char *owner = lock_owner_field(&r, o->name, &cnt);
        assert_non_null(owner);
        free(owner);
        assert_int_equal(cnt, n);
    }
    for (i = 0; i < n - 1; i++) {
        assert_int_equal(o_unlock(o), 0);
        assert_int_equal(other_thread(o, 1, OP_TRY), EBUSY);
    }
    assert_int_equal(o_unlock(o), 0);
    assert_int_equal(other_thread(o, 1, OP_TRY), 0);
    assert_int_equal(o_unlock(o), EPERM);
}

static void recursive_counts_on(struct obj *o)
{
    check_counts(o, 0, o->k == K_ERRORCHECK ? 1 : 5);
    if (o->rw) {
        check_counts(o, 1, 5);
        /* a writer's read holds count with its write holds */
        assert_int_equal(o_lock(o, 1), 0);
        assert_int_equal(o_lock(o, 0), 0);
        assert_int_equal(o_lock(o, 0), 0);
        assert_int_equal(o_unlock(o), 0); /* the write hold */
        assert_int_equal(other_thread(o, 1, OP_TRY), EBUSY);
        assert_int_equal(other_thread(o, 0, OP_TRY), 0);
        assert_int_equal(o_unlock(o), 0);
        assert_int_equal(o_unlock(o), 0);
        assert_int_equal(o_unlock(o), EPERM);
    }
}

static void test_recursive_counts(void **state)
{
    (void)state;
    each_kind(__func__, recursive_counts_on);
}

/* ---- EINVAL for a bad deadline, only when the call would wait ---------------- */

static void einval_only_when_blocking_on(struct obj *o)
{
    static const long bad[] = { -1, 1000000000L, LONG_MAX };
    struct holder hd;
    struct timespec abs;
    int h, b, wr;

    for (wr = 0; wr <= o->rw; wr++) {
        for (h = 0; h < H_COUNT; h++) {
            for (b = 0; b < 3; b++) {
                int rc;
                double t0;
                /* free: taken, the deadline never looked at */
                memset(&abs, 0, sizeof abs);
                abs = fx_clock_in(h == H_CLOCK_MONO ? CLOCK_MONOTONIC
                                                    : CLOCK_REALTIME,
                                  5.0);
                abs.tv_nsec = bad[b];
                rc = o_deadline(o, wr, (enum how)h, 0, &abs);
                if (rc != 0)
                    fail_msg("%s: free lock, tv_nsec %ld (how %d): %d",
                             kind_name[o->k], bad[b], h, rc);
                assert_int_equal(o_unlock(o), 0);
                /* taken by another: EINVAL, at once */
                holder_start(&hd, o, 1);
                t0 = tu_now();
                rc = o_deadline(o, wr, (enum how)h, 0, &abs);
                assert_dbl_range(tu_now() - t0, 0.0, slack(1.0));
                holder_stop(&hd);
                if (rc != EINVAL)
                    fail_msg("%s: held lock, tv_nsec %ld (how %d): %d",
                             kind_name[o->k], bad[b], h, rc);
            }
        }
        /* no deadline at all, or a clock the call cannot wait on:
         * refused whether or not the lock is free */
        abs = fx_clock_in(CLOCK_REALTIME, 5.0);
        assert_int_equal(o_timed(o, wr, NULL), EINVAL);
        assert_int_equal(o_clock(o, wr, CLOCK_MONOTONIC, NULL), EINVAL);
        assert_int_equal(o_clock(o, wr, CLOCK_PROCESS_CPUTIME_ID, &abs),
                         EINVAL);
        assert_int_equal(o_clock(o, wr, CLOCK_THREAD_CPUTIME_ID, &abs),
                         EINVAL);
        assert_int_equal(o_clock(o, wr, (clockid_t)12345, &abs), EINVAL);
        assert_int_equal(tu_cmd_int(&r, "EXISTS", o->name, NULL), 0);
    }
}

static void test_einval_only_when_blocking(void **state)
{
    (void)state;
    each_kind(__func__, einval_only_when_blocking_on);
}

/* ---- no ETIMEDOUT for a lock that is free at the deadline ------------------------ */

/* A signal handler that keeps its thread busy until the lock has been
 * given back and its deadline is well past: the thread's wake-up comes
 * long after its deadline, and the lock is free by then. */
static atomic_int slow_released;
static _Atomic double slow_until;
static double slow_start, slow_end;

static void on_slow(int sig)
{
    int saved = errno;
    struct timespec ts = { 0, 10 * 1000000L };

    (void)sig;
    slow_start = tu_now();
    while (!atomic_load(&slow_released) ||
           tu_now() < atomic_load(&slow_until))
        nanosleep(&ts, NULL);
    slow_end = tu_now();
    errno = saved;
}

struct waiter {
    struct obj *o;
    int wr;
    enum how how;
    double secs; /* deadline from now */
    int rc, unlock_rc;
    double t_call, t_deadline, t_ret;
    sem_t started;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    struct timespec abs = { 0, 0 };

    w->t_call = tu_now();
    w->t_deadline = w->t_call + w->secs;
    sem_post(&w->started);
    /* secs < 0: no deadline at all */
    w->rc = w->secs < 0 ? o_lock(w->o, w->wr)
                        : o_deadline(w->o, w->wr, w->how, w->secs, &abs);
    w->t_ret = tu_now();
    w->unlock_rc = w->rc == 0 ? o_unlock(w->o) : -1;
    return NULL;
}

/* The waiter's wake-up comes late seconds after its deadline. */
static void late_wakeup_by(enum kind k, int hold_wr, int wait_wr,
                           enum how how, double late)
{
    struct sigaction sa;
    struct waiter w;
    struct holder h;
    struct obj o;
    pthread_t th;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_slow;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
    atomic_store(&slow_released, 0);
    slow_start = slow_end = 0;

    obj_init(&o, k, "late_wakeup");
    holder_start(&h, &o, hold_wr);
    memset(&w, 0, sizeof w);
    w.o = &o;
    w.wr = wait_wr;
    w.how = how;
    w.secs = 1.0;
    w.rc = w.unlock_rc = -1;
    sem_init(&w.started, 0, 0);
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (sem_wait(&w.started) != 0)
        ;
    atomic_store(&slow_until, w.t_deadline + late);
    tu_sleep_ms(300);          /* it waits now */
    pthread_kill(th, SIGUSR1); /* busy until free and late past 1 s */
    tu_sleep_ms(200);
    holder_stop(&h); /* free at about 0.5 s */
    atomic_store(&slow_released, 1);
    pthread_join(th, NULL);
    sem_destroy(&w.started);
    signal(SIGUSR1, SIG_DFL);

    /* the case is what it says: the call waited, and its thread was
     * kept away from the deadline until after it */
    assert_true(slow_start > w.t_call);
    assert_true(slow_end > w.t_deadline + late);
    if (w.rc != 0)
        fail_msg("%s %s: the lock was free at the deadline, the waiter's "
                 "wake-up came %.3f s after it, and the call said %d (%s)",
                 kind_name[k], wait_wr ? "write" : "read/lock",
                 slow_end - w.t_deadline, w.rc, strerror(w.rc));
    assert_int_equal(w.unlock_rc, 0);
    obj_destroy(&o);
}

static void late_wakeup(enum kind k, int hold_wr, int wait_wr, enum how how)
{
    late_wakeup_by(k, hold_wr, wait_wr, how, 0.3);
}

static void test_free_at_deadline_is_taken(void **state)
{
    (void)state;
    late_wakeup(K_RECURSIVE, 0, 0, H_TIMED);
    late_wakeup(K_RECURSIVE, 0, 0, H_CLOCK_MONO);
    late_wakeup(K_FAIR, 0, 0, H_TIMED);
    late_wakeup(K_RWLOCK, 1, 0, H_TIMED);
    late_wakeup(K_RWLOCK, 0, 1, H_CLOCK_RT);
    late_wakeup(K_RWLOCK_PW, 0, 1, H_TIMED);
}

/* The same, woken later than one command timeout past the deadline (a
 * short one here, 300 ms, to keep the test fast): the last try gets a
 * command timeout of its own.  It was capped at the deadline's, began
 * past its own end, and the link gave up before its first look: EIO for
 * a lock that was free, and that the try may have taken (LTP's
 * pthread_rwlock_timedrdlock/6-2 and timedwrlock/6-2, glibc says 0). */
#define LATE_TIMEOUT_MS 300UL

static void test_free_at_deadline_taken_late(void **state)
{
    double late = LATE_TIMEOUT_MS / 1000.0 + 0.5;

    (void)state;
    assert_int_equal(dist_set_timeout_ms(LATE_TIMEOUT_MS), 0);
    late_wakeup_by(K_RECURSIVE, 0, 0, H_TIMED, late);
    late_wakeup_by(K_FAIR, 0, 0, H_CLOCK_MONO, late);
    late_wakeup_by(K_RWLOCK, 1, 0, H_TIMED, late);
    late_wakeup_by(K_RWLOCK, 0, 1, H_TIMED, late);
    late_wakeup_by(K_RWLOCK_PW, 0, 1, H_CLOCK_RT, late);
}

/* A leased semaphore's timed wait, its thread kept away past its
 * deadline by more than a command timeout, and a permit free by then: the
 * permit is taken (it was EIO, as for the locks above).  POSIX lets a
 * signal handler end a semaphore wait with EINTR, so here the lateness is
 * a forward step of CLOCK_MONOTONIC (clock_hook.c), which the waiter sees
 * when the post wakes it. */
struct sem_waiter {
    dist_sem_t *s;
    struct timespec abs; /* its deadline, CLOCK_MONOTONIC */
};

/* The waiter's permit, given back once taken. */
static int sem_waiter_call(void *arg)
{
    struct sem_waiter *w = arg;
    int rc = dist_sem_clockwait(w->s, CLOCK_MONOTONIC, &w->abs);

    if (rc == 0)
        dist_sem_post(w->s);
    return rc;
}

static void test_sem_free_at_deadline_taken_late(void **state)
{
    struct sem_waiter w = { fx_sem("s", 1, NULL), { 0, 0 } };
    struct fx_thread th;
    int v = -1, rc;

    (void)state;
    assert_int_equal(dist_set_timeout_ms(LATE_TIMEOUT_MS), 0);
    assert_int_equal(dist_sem_trywait(w.s), 0); /* this thread's permit */
    w.abs = fx_clock_in(CLOCK_MONOTONIC, 1.0);
    fx_thread_start(&th, sem_waiter_call, &w);
    tu_sleep_ms(300); /* it waits now */
    /* past the deadline (0.7 s away) by the command timeout and 0.5 s */
    clock_hook_step_monotonic(0.7 + LATE_TIMEOUT_MS / 1000.0 + 0.5);
    assert_int_equal(dist_sem_post(w.s), 0); /* free, and it wakes */
    rc = fx_thread_join(&th);
    if (rc != 0)
        fail_msg("the permit was free when the waiter woke, more than a "
                 "command timeout past its deadline, and the wait said %d "
                 "(%s)",
                 rc, strerror(rc));
    assert_int_equal(dist_sem_getvalue(w.s, &v), 0);
    assert_int_equal(v, 1);
}

/* ---- deadlines at the ends of time_t ------------------------------------------------ */

/* A deadline centuries away (std::chrono's time_point::max arrives as a
 * tv_sec near the top of time_t) takes a free lock at once; one centuries
 * past times out at once on a held lock; neither overflows on the way. */
static void extreme_deadlines_on(struct obj *o)
{
    const time_t far = (time_t)(~(uint64_t)0 >> 1);
    const struct timespec never = { far, 999999999L };
    const struct timespec long_ago = { -far - 1, 0 };
    struct holder h;
    int wr, hw;

    for (wr = 0; wr <= o->rw; wr++) {
        assert_int_equal(o_timed(o, wr, &never), 0);
        assert_int_equal(o_unlock(o), 0);
        assert_int_equal(o_clock(o, wr, CLOCK_MONOTONIC, &never), 0);
        assert_int_equal(o_unlock(o), 0);
        hw = !o->rw || !wr; /* the holder excludes the caller */
        holder_start(&h, o, hw);
        assert_int_equal(o_timed(o, wr, &long_ago), ETIMEDOUT);
        assert_int_equal(o_clock(o, wr, CLOCK_MONOTONIC, &long_ago),
                         ETIMEDOUT);
        holder_stop(&h);
    }
}

static void test_extreme_deadlines(void **state)
{
    (void)state;
    each_kind(__func__, extreme_deadlines_on);
}

/* ---- no EINTR: a signal during a wait resumes it ---------------------------------- */

static atomic_int sigs_seen;

static void on_sig(int sig)
{
    (void)sig;
    atomic_fetch_add(&sigs_seen, 1);
}

#define NWAIT 10

static void test_signals_resume_waits(void **state)
{
    struct obj m, f, rw;
    struct holder hm, hf, hrw;
    struct waiter w[NWAIT], late;
    pthread_t th[NWAIT], lth;
    struct sigaction sa;
    double t_end;
    int i;

    (void)state;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig; /* no SA_RESTART: syscalls see EINTR */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR2, &sa, NULL), 0);
    atomic_store(&sigs_seen, 0);

    obj_init(&m, K_RECURSIVE, __func__);
    obj_init(&f, K_FAIR, __func__);
    obj_init(&rw, K_RWLOCK_PW, __func__);
    holder_start(&hm, &m, 0);
    holder_start(&hf, &f, 0);
    holder_start(&hrw, &rw, 1);
    {
        /* every kind of wait; the long deadlines are never reached */
        struct {
            struct obj *o;
            int wr;
            enum how how;
            double secs;
        } spec[NWAIT] = {
            { &m, 0, H_TIMED, 0 },       { &m, 0, H_TIMED, 60 },
            { &m, 0, H_CLOCK_MONO, 60 }, { &f, 0, H_TIMED, 0 },
            { &f, 0, H_CLOCK_RT, 60 },   { &rw, 0, H_TIMED, 0 },
            { &rw, 1, H_TIMED, 0 },      { &rw, 0, H_CLOCK_MONO, 60 },
            { &rw, 1, H_TIMED, 60 },     { &rw, 1, H_CLOCK_MONO, 60 },
        };
        for (i = 0; i < NWAIT; i++) {
            memset(&w[i], 0, sizeof w[i]);
            w[i].o = spec[i].o;
            w[i].wr = spec[i].wr;
            w[i].how = spec[i].how;
            w[i].secs = spec[i].secs;
            w[i].rc = w[i].unlock_rc = -1;
            sem_init(&w[i].started, 0, 0);
        }
    }
    /* secs 0 stands for a call without a deadline */
    for (i = 0; i < NWAIT; i++) {
        if (w[i].secs == 0)
            w[i].secs = -1;
    }
    for (i = 0; i < NWAIT; i++)
        assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    /* and one that times out under the signals */
    memset(&late, 0, sizeof late);
    late.o = &m;
    late.how = H_CLOCK_MONO;
    late.secs = 0.8;
    late.rc = late.unlock_rc = -1;
    sem_init(&late.started, 0, 0);
    assert_int_equal(pthread_create(&lth, NULL, waiter_main, &late), 0);

    t_end = tu_now() + 1.5;
    while (tu_now() < t_end) {
        for (i = 0; i < NWAIT; i++)
            pthread_kill(th[i], SIGUSR2);
        pthread_kill(lth, SIGUSR2);
        tu_sleep_ms(2);
    }
    pthread_join(lth, NULL);
    holder_release(&hm);
    holder_release(&hf);
    holder_release(&hrw);
    /* keep at it while the waiters take their turns */
    t_end = tu_now() + 1.0;
    while (tu_now() < t_end) {
        for (i = 0; i < NWAIT; i++)
            pthread_kill(th[i], SIGUSR2);
        tu_sleep_ms(2);
    }
    for (i = 0; i < NWAIT; i++)
        pthread_join(th[i], NULL);
    holder_join(&hm);
    holder_join(&hf);
    holder_join(&hrw);
    signal(SIGUSR2, SIG_DFL);

    assert_true(atomic_load(&sigs_seen) > 100);
    assert_int_equal(late.rc, ETIMEDOUT);
    assert_true(late.t_ret - late.t_call >= 0.8 - 0.002);
    for (i = 0; i < NWAIT; i++) {
        if (w[i].rc != 0)
            fail_msg("waiter %d (%s) said %d (%s) under signals", i,
                     kind_name[w[i].o->k], w[i].rc, strerror(w[i].rc));
        assert_int_equal(w[i].unlock_rc, 0);
        sem_destroy(&w[i].started);
    }
    sem_destroy(&late.started);
    obj_destroy(&m);
    obj_destroy(&f);
    obj_destroy(&rw);
}

/* ---- errno is left alone --------------------------------------------------------- */

#define MAGIC_ERRNO 4242

struct errno_log {
    char bad[2048];
    size_t len;
    int calls;
};

static struct errno_log elog;

/* Runs one call with errno set to MAGIC_ERRNO and notes a change. */
#define KEEPS(call)                                                          \
    do {                                                                     \
        int rc_;                                                             \
        errno = MAGIC_ERRNO;                                                 \
        rc_ = (call);                                                        \
        (void)rc_;                                                           \
        elog.calls++;                                                        \
        if (errno != MAGIC_ERRNO && elog.len < sizeof elog.bad - 128)        \
            elog.len += (size_t)snprintf(                                    \
                elog.bad + elog.len, sizeof elog.bad - elog.len,             \
                "%s -> %d, errno %d; ", #call, rc_, errno);                  \
    } while (0)

static int void_call(void (*fn)(void))
{
    fn();
    return 0;
}

static int last_error_call(void)
{
    return dist_last_error() == NULL;
}

/* Every call, on a thread with no connection yet (its first call connects,
 * with a non-blocking connect), succeeding and failing. */
static void *errno_main(void *arg)
{
    struct obj *o = arg; /* [0] a mutex, [1] a rwlock */
    dist_mutexattr_t ma;
    dist_rwlockattr_t ra;
    dist_mutex_t zm;
    unsigned long ul;
    uint64_t tok;
    int ty;
    struct timespec past = fx_clock_in(CLOCK_REALTIME, -1.0);
    struct timespec soon = fx_clock_in(CLOCK_MONOTONIC, 0.2);

    KEEPS(dist_mutexattr_init(&ma));
    KEEPS(dist_mutexattr_settype(&ma, DIST_MUTEX_ERRORCHECK));
    KEEPS(dist_mutexattr_settype(&ma, 99));
    KEEPS(dist_mutexattr_gettype(&ma, &ty));
    KEEPS(dist_mutexattr_setlease(&ma, 0));
    KEEPS(dist_mutexattr_getlease(&ma, &ul));
    KEEPS(dist_mutexattr_setfair(&ma, 0));
    KEEPS(dist_mutexattr_getfair(&ma, &ty));
    KEEPS(dist_mutexattr_setdeferred(&ma, 0));
    KEEPS(dist_mutexattr_setdeferred(&ma, 5));
    KEEPS(dist_mutexattr_getdeferred(&ma, &ty));
    KEEPS(dist_mutexattr_destroy(&ma));
    KEEPS(dist_rwlockattr_init(&ra));
    KEEPS(dist_rwlockattr_setkind(&ra, DIST_RWLOCK_PREFER_WRITER));
    KEEPS(dist_rwlockattr_setlease(&ra, 0));
    KEEPS(dist_rwlockattr_destroy(&ra));

    KEEPS(dist_mutex_lock(&o[0].m)); /* connects */
    KEEPS(dist_mutex_lock(&o[0].m));
    KEEPS(dist_mutex_token(&o[0].m, &tok));
    KEEPS(dist_mutex_unlock(&o[0].m));
    KEEPS(dist_mutex_unlock(&o[0].m));
    KEEPS(dist_mutex_unlock(&o[0].m));      /* EPERM */
    KEEPS(dist_mutex_token(&o[0].m, &tok)); /* EPERM */
    KEEPS(dist_mutex_trylock(&o[0].m));
    KEEPS(dist_mutex_unlock(&o[0].m));
    KEEPS(dist_mutex_timedlock(&o[0].m, &past));
    KEEPS(dist_mutex_unlock(&o[0].m));
    KEEPS(dist_mutex_clocklock(&o[0].m, CLOCK_MONOTONIC, &soon));
    KEEPS(dist_mutex_unlock(&o[0].m));
    KEEPS(dist_mutex_clocklock(&o[0].m, CLOCK_PROCESS_CPUTIME_ID, &soon));

    KEEPS(dist_rwlock_rdlock(&o[1].l));
    KEEPS(dist_rwlock_tryrdlock(&o[1].l));
    KEEPS(dist_rwlock_trywrlock(&o[1].l)); /* EBUSY */
    KEEPS(dist_rwlock_wrlock(&o[1].l));    /* EDEADLK */
    KEEPS(dist_rwlock_unlock(&o[1].l));
    KEEPS(dist_rwlock_unlock(&o[1].l));
    KEEPS(dist_rwlock_timedwrlock(&o[1].l, &past));
    KEEPS(dist_rwlock_token(&o[1].l, &tok));
    KEEPS(dist_rwlock_timedrdlock(&o[1].l, &past));
    KEEPS(dist_rwlock_unlock(&o[1].l));
    KEEPS(dist_rwlock_unlock(&o[1].l));
    KEEPS(dist_rwlock_clockrdlock(&o[1].l, CLOCK_REALTIME, &past));
    KEEPS(dist_rwlock_unlock(&o[1].l));
    KEEPS(dist_rwlock_clockwrlock(&o[1].l, CLOCK_MONOTONIC, &soon));
    KEEPS(dist_rwlock_unlock(&o[1].l));
    KEEPS(dist_rwlock_unlock(&o[1].l)); /* EPERM */

    memset(&zm, 0, sizeof zm);
    KEEPS(dist_mutex_lock(&zm));           /* EINVAL */
    KEEPS(dist_mutex_init(&zm, "", NULL)); /* EINVAL */
    KEEPS(dist_mutex_init(&zm, o[0].name, NULL));
    KEEPS(dist_mutex_destroy(&zm));
    KEEPS(dist_set_lost_handler(NULL, NULL));
    KEEPS(last_error_call());
    return NULL;
}

static void test_errno_unchanged(void **state)
{
    struct obj o[2];
    struct holder h;
    pthread_t th;
    char url[64];
    int port;

    (void)state;
    obj_init(&o[0], K_ERRORCHECK, __func__);
    obj_init(&o[1], K_RWLOCK, __func__);
    memset(&elog, 0, sizeof elog);
    assert_int_equal(pthread_create(&th, NULL, errno_main, o), 0);
    pthread_join(th, NULL);

    /* failures of every kind: busy, timed out, Redis unreachable */
    holder_start(&h, &o[0], 0);
    {
        struct timespec soon = fx_clock_in(CLOCK_REALTIME, 0.2);
        KEEPS(dist_mutex_trylock(&o[0].m));          /* EBUSY */
        KEEPS(dist_mutex_timedlock(&o[0].m, &soon)); /* ETIMEDOUT */
    }
    holder_stop(&h);
    port = tu_free_port();
    assert_true(port > 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    KEEPS(dist_set_timeout_ms(300));
    KEEPS(dist_set_url(url));
    KEEPS(dist_set_url("nonsense://")); /* EINVAL */
    KEEPS(dist_mutex_lock(&o[0].m));    /* EIO */
    KEEPS(dist_set_url(r.url_unix));
    KEEPS(dist_set_timeout_ms(TIMEOUT_MS));
    KEEPS(dist_set_watchdog_ms(WATCHDOG_MS));
    KEEPS(dist_set_watchdog_ms(1)); /* EINVAL */
    KEEPS(dist_set_waiter_ms(5000));
    KEEPS(dist_set_replica_wait_ms(1000));
    KEEPS(void_call(dist_shutdown));
    KEEPS(dist_mutex_lock(&o[0].m)); /* starts again */
    KEEPS(dist_mutex_unlock(&o[0].m));

    if (elog.len)
        fail_msg("errno changed: %s", elog.bad);
    assert_true(elog.calls > 60);
    obj_destroy(&o[0]);
    obj_destroy(&o[1]);
}

/* ---- the clock variants ---------------------------------------------------------- */

/* A wait on clk until secs from now, on a lock another thread holds: it
 * times out, not before its deadline and not long after. */
static void clock_wait(struct obj *o, int wr, clockid_t clk, double secs)
{
    struct holder h;
    struct timespec abs;
    double t0, el;
    int rc;

    holder_start(&h, o, 1);
    t0 = tu_now();
    abs = fx_clock_in(clk, secs);
    rc = o_clock(o, wr, clk, &abs);
    el = tu_now() - t0;
    holder_stop(&h);
    assert_int_equal(rc, ETIMEDOUT);
    assert_dbl_range(el, secs - 0.002, secs + slack(1.0));
}

static void clock_variants_on(struct obj *o)
{
    struct timespec abs;
    int wr;

    for (wr = 0; wr <= o->rw; wr++) {
        clock_wait(o, wr, CLOCK_MONOTONIC, 0.4);
        clock_wait(o, wr, CLOCK_REALTIME, 0.4);
        /* a free lock is taken, whatever the deadline */
        abs = fx_clock_in(CLOCK_MONOTONIC, -5.0);
        assert_int_equal(o_clock(o, wr, CLOCK_MONOTONIC, &abs), 0);
        assert_int_equal(o_unlock(o), 0);
        abs.tv_sec = 0;
        abs.tv_nsec = 0;
        assert_int_equal(o_clock(o, wr, CLOCK_REALTIME, &abs), 0);
        assert_int_equal(o_unlock(o), 0);
    }
}

static void test_clock_variants(void **state)
{
    (void)state;
    each_kind(__func__, clock_variants_on);
}

/* A wait on clk for secs, with CLOCK_REALTIME stepped by step s after
 * 0.3 s.  Returns how long it took. */
static double stepped_wait(struct obj *o, clockid_t clk, double secs,
                           double step)
{
    struct waiter w;
    struct holder h;
    pthread_t th;
    double t_step;

    holder_start(&h, o, 1);
    memset(&w, 0, sizeof w);
    w.o = o;
    w.how = clk == CLOCK_MONOTONIC ? H_CLOCK_MONO : H_TIMED;
    w.secs = secs;
    w.rc = w.unlock_rc = -1;
    sem_init(&w.started, 0, 0);
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (sem_wait(&w.started) != 0)
        ;
    tu_sleep_ms(300);
    clock_hook_step_realtime(step);
    t_step = tu_now();
    pthread_join(th, NULL);
    holder_stop(&h);
    sem_destroy(&w.started);
    clock_hook_unstep_realtime();
    assert_int_equal(w.rc, ETIMEDOUT);
    if (t_step >= w.t_deadline)
        fail_msg("the clock was stepped only %.3f s after the wait began, "
                 "after its deadline: a machine too loaded for this case",
                 t_step - w.t_call);
    return w.t_ret - w.t_call;
}

static void test_realtime_steps(void **state)
{
    struct obj o;
    double el;

    (void)state;
    obj_init(&o, K_RECURSIVE, __func__);
    /* a realtime wait: the clock set back 2 s, so its deadline comes 2 s
     * later (never ETIMEDOUT before the clock reaches it) */
    el = stepped_wait(&o, CLOCK_REALTIME, 2.0, -2.0);
    assert_dbl_range(el, 4.0 - 0.01, 4.0 + slack(1.0));
    /* set forward past the deadline: over by the original time at most */
    el = stepped_wait(&o, CLOCK_REALTIME, 2.0, 5.0);
    assert_dbl_range(el, 0.3, 2.0 + slack(1.0));
    /* a monotonic wait does not see either step */
    el = stepped_wait(&o, CLOCK_MONOTONIC, 2.0, -2.0);
    assert_dbl_range(el, 2.0 - 0.002, 2.0 + slack(1.0));
    el = stepped_wait(&o, CLOCK_MONOTONIC, 2.0, 5.0);
    assert_dbl_range(el, 2.0 - 0.002, 2.0 + slack(1.0));
    obj_destroy(&o);
}

/* ---- a zero-filled object ----------------------------------------------------------- */

/* Every call on a zero-filled mutex (rw 0) or rwlock (rw 1), as reader
 * and as writer, on both clocks: EINVAL; destroy has nothing to free. */
static void test_zeroed_object_is_einval(void **state)
{
    struct timespec abs = fx_clock_in(CLOCK_REALTIME, 1.0);
    struct obj o;
    uint64_t tok;
    int rw, wr;

    (void)state;
    for (rw = 0; rw <= 1; rw++) {
        memset(&o, 0, sizeof o);
        o.rw = rw;
        for (wr = 0; wr <= rw; wr++) {
            assert_int_equal(o_lock(&o, wr), EINVAL);
            assert_int_equal(o_try(&o, wr), EINVAL);
            assert_int_equal(o_timed(&o, wr, &abs), EINVAL);
            assert_int_equal(o_clock(&o, wr, CLOCK_REALTIME, &abs), EINVAL);
            assert_int_equal(o_clock(&o, wr, CLOCK_MONOTONIC, &abs), EINVAL);
        }
        assert_int_equal(o_unlock(&o), EINVAL);
        assert_int_equal(o_token(&o, &tok), EINVAL);
        assert_int_equal(
            rw ? dist_rwlock_destroy(&o.l) : dist_mutex_destroy(&o.m), 0);
    }
}

/* ---- small stacks ------------------------------------------------------------------ */

/* glibc's locks work on a thread created with PTHREAD_STACK_MIN, and
 * programs create such threads; so must every call here (the link layer
 * reads replies through a heap buffer for that). */

struct small {
    struct obj *m, *rw;
    int bad; /* the first call that failed, 1-based */
    int rc;
    char why[256];            /* its dist_last_error() */
    struct timespec rt, mono; /* deadlines 5 s ahead, for every timed call */
};

/* Step n of small_main gave rc and must give want; the first that does
 * not is noted. */
static void small_step(struct small *s, int n, int rc, int want)
{
    if (rc != want && !s->bad) {
        s->bad = n;
        s->rc = rc;
        snprintf(s->why, sizeof s->why, "%s", dist_last_error());
    }
}

/* Steps from n on: o taken (as writer when wr) plainly, then its token
 * (not a reader's: it has none), then by try, timed and clock lock, all
 * succeeding.  The next step's number. */
static int small_take4(struct small *s, int n, struct obj *o, int wr)
{
    uint64_t tok;

    small_step(s, n++, o_lock(o, wr), 0);
    if (!o->rw || wr)
        small_step(s, n++, o_token(o, &tok), 0);
    small_step(s, n++, o_try(o, wr), 0);
    small_step(s, n++, o_timed(o, wr, &s->rt), 0);
    small_step(s, n++, o_clock(o, wr, CLOCK_MONOTONIC, &s->mono), 0);
    return n;
}

/* Steps n to n + 3: the four holds of small_take4 given back. */
static int small_unlock4(struct small *s, int n, struct obj *o)
{
    int end = n + 4;

    while (n < end)
        small_step(s, n++, o_unlock(o), 0);
    return n;
}

static void *small_main(void *arg)
{
    struct small *s = arg;
    struct timespec soon = fx_clock_in(CLOCK_MONOTONIC, 0.3);
    int n;

    s->rt = fx_clock_in(CLOCK_REALTIME, 5.0);
    s->mono = fx_clock_in(CLOCK_MONOTONIC, 5.0);
    n = small_take4(s, 1, s->m, 0); /* steps 1-5 */
    n = small_unlock4(s, n, s->m);  /* 6-9 */
    small_step(s, n++, dist_mutex_unlock(&s->m->m), EPERM);
    n = small_take4(s, n, s->rw, 0); /* 11-14 */
    small_step(s, n++, dist_rwlock_trywrlock(&s->rw->l), EBUSY);
    n = small_unlock4(s, n, s->rw);  /* 16-19 */
    n = small_take4(s, n, s->rw, 1); /* 20-24 */
    n = small_unlock4(s, n, s->rw);  /* 25-28 */
    /* a wait, on the lock's channel: the parent's holder keeps it */
    small_step(s, n++,
               dist_mutex_clocklock(&s->m[1].m, CLOCK_MONOTONIC, &soon),
               ETIMEDOUT);
    small_step(s, n++, dist_mutex_destroy(&s->m->m), 0);
    small_step(s, n++, dist_rwlock_destroy(&s->rw->l), 0);
    return NULL;
}

/* The stack of the small-stack thread: PTHREAD_STACK_MIN, as glibc's
 * locks promise; under AddressSanitizer twice that, since its redzones
 * about double every frame (the library's and glibc's alike), so 16 KiB
 * there would test ASan's frames rather than the library's depth. */
#ifdef TU_ASAN
#define SMALL_STACK (2 * PTHREAD_STACK_MIN)
#else
#define SMALL_STACK PTHREAD_STACK_MIN
#endif

/* The new client of test_small_stack, in a process of its own: the test
 * program run again with the names in its environment (small_env).  Not
 * a forked child: under ASan a fork can leave the sanitizer's allocator
 * locked by a thread of the parent (the renewal thread, the holder), and
 * the child's first allocation then waits for ever (GCC 12's ASan does
 * not lock it around fork; seen alone, two runs in three).  Its exit
 * status: 0, or 100 + the step that failed; 99 when it could not start. */
static int small_child(void)
{
    const char *m = getenv("TEST_POSIX_SMALL_M"),
               *e = getenv("TEST_POSIX_SMALL_E"),
               *w = getenv("TEST_POSIX_SMALL_RW");
    struct obj o[3];
    struct small s = { .m = &o[0], .rw = &o[2] };
    dist_mutexattr_t ma;
    pthread_attr_t a;
    pthread_t th;

    memset(o, 0, sizeof o);
    o[2].rw = 1;
    if (!e || !w || dist_mutexattr_init(&ma) != 0 ||
        dist_mutex_init(&o[0].m, m, &ma) != 0 ||
        dist_mutexattr_settype(&ma, DIST_MUTEX_ERRORCHECK) != 0 ||
        dist_mutex_init(&o[1].m, e, &ma) != 0 ||
        dist_rwlock_init(&o[2].l, w, NULL) != 0)
        return 99;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, SMALL_STACK);
    if (pthread_create(&th, &a, small_main, &s) != 0)
        return 99;
    pthread_join(th, NULL);
    if (s.bad)
        fprintf(stderr, "small stack: call %d said %d: %s\n", s.bad, s.rc,
                s.why);
    if (dist_mutex_destroy(&o[1].m) != 0 && !s.bad)
        return 99;
    dist_shutdown();
    return s.bad ? 100 + s.bad : 0;
}

/* The environment of small_child: the names and this server (over TLS
 * when tls), ahead of the rest.  A static array: nothing to free. */
static char **small_env(const struct obj *o, int tls)
{
    static char vars[7][1024];
    static char *env[256];
    extern char **environ;
    size_t n = 0, i;

    snprintf(vars[0], sizeof vars[0], "TEST_POSIX_SMALL_M=%s", o[0].name);
    snprintf(vars[1], sizeof vars[1], "TEST_POSIX_SMALL_E=%s", o[1].name);
    snprintf(vars[2], sizeof vars[2], "TEST_POSIX_SMALL_RW=%s", o[2].name);
    if (tls)
        snprintf(vars[3], sizeof vars[3],
                 "DISTLOCK_URL=rediss://127.0.0.1:%d", r.tls_port);
    else
        snprintf(vars[3], sizeof vars[3], "DISTLOCK_URL=%s", r.url_unix);
    snprintf(vars[4], sizeof vars[4], "DISTLOCK_TIMEOUT_MS=%lu", TIMEOUT_MS);
    snprintf(vars[5], sizeof vars[5], "DISTLOCK_WATCHDOG_MS=%lu",
             WATCHDOG_MS);
    snprintf(vars[6], sizeof vars[6], "DISTLOCK_TLS_CA=%s",
             cert_file("ca.crt"));
    for (i = 0; i < 7; i++)
        env[n++] = vars[i];
    for (i = 0; environ[i] && n < 255; i++)
        env[n++] = environ[i];
    env[n] = NULL;
    return env;
}

/* Every call on a PTHREAD_STACK_MIN thread of a new client, on the
 * server's unix socket or (tls) its TLS port, whose handshake and records
 * take OpenSSL far deeper than the link's own reads. */
static void small_stack(const char *test, int tls)
{
    struct obj o[3];
    struct holder h;
    char self[4096];
    char *argv[] = { self, NULL };
    ssize_t len;
    pid_t pid;
    int st;

    obj_init(&o[0], K_RECURSIVE, test);
    obj_init(&o[1], K_ERRORCHECK, test);
    obj_init(&o[2], K_RWLOCK, test);
    holder_start(&h, &o[1], 0);
    /* a new client: its holds are its own, o[1] is this one's */
    len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = 0;
    fflush(NULL);
    assert_int_equal(
        posix_spawn(&pid, self, NULL, NULL, argv, small_env(o, tls)), 0);
    while (waitpid(pid, &st, 0) < 0)
        ;
    holder_stop(&h);
    tu_cmd_int(&r, "DEL", o[0].name, NULL);
    tu_cmd_int(&r, "DEL", o[2].name, NULL);
    obj_destroy(&o[0]);
    obj_destroy(&o[1]);
    obj_destroy(&o[2]);
    if (WIFSIGNALED(st))
        fail_msg("a thread with a %ld-byte stack died of signal %d%s",
                 (long)PTHREAD_STACK_MIN, WTERMSIG(st), tls ? " (TLS)" : "");
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 99)
        fail_msg("the new client could not start or end (see stderr)");
    if (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) < 100)
        fail_msg("the new client exited with status %d (see stderr)",
                 WEXITSTATUS(st));
    if (!child_exit_ok(st, 0))
        fail_msg("on a %ld-byte stack, call %d failed%s (see stderr)",
                 (long)PTHREAD_STACK_MIN, WEXITSTATUS(st) - 100,
                 tls ? " over TLS" : "");
}

static void test_small_stack(void **state)
{
    (void)state;
    small_stack(__func__, 0);
}

static void test_small_stack_tls(void **state)
{
    (void)state;
    small_stack(__func__, 1);
}

/* ---- a hold is never reported already expired --------------------------------- */

/* The validity of a hold runs from when its acquire was sent.  These
 * cases talk to Redis through the fault proxy, whose latency makes the
 * reply (and only the reply, the delay being switched off while it is held
 * back) late. */

/* The proxy's delay, switched off after_ms from the start of the call
 * on a thread of its own (fx_thread). */
struct delayer {
    tu_proxy_t *p;
    long after_ms;
};

static int delay_off_later(void *arg)
{
    struct delayer *d = arg;

    tu_sleep_ms(d->after_ms);
    tu_proxy_set_delay(d->p, 0);
    return 0;
}

/* Points the library at a new proxy and connects this thread (and the
 * library's) through it. */
static tu_proxy_t *via_proxy(unsigned long timeout_ms)
{
    char url[64], name[200];
    tu_proxy_t *p = tu_proxy_start(&r);
    dist_mutex_t warm;

    assert_non_null(p);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_proxy_port(p));
    assert_int_equal(dist_set_timeout_ms(timeout_ms), 0);
    assert_int_equal(dist_set_url(url), 0);
    NAME(name, "warm-up");
    assert_int_equal(dist_mutex_init(&warm, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&warm), 0);
    assert_int_equal(dist_mutex_unlock(&warm), 0);
    assert_int_equal(dist_mutex_destroy(&warm), 0);
    return p;
}

/* A token is at least the server's clock in microseconds, so counting
 * draws by the counter needs a counter ahead of the clock, from which a draw
 * counts on by one (as from one Redisson's RFencedLock moved): token_ahead
 * sets it far ahead, token_count gives the draws since. */
#define TOKEN_AHEAD 4000000000000000LL /* the clock in the year 2096 */

static void token_ahead(const char *name)
{
    char key[300];
    redisReply *x;

    snprintf(key, sizeof key, "redisson_lock_token:{%s}", name);
    x = tu_cmd(&r, "SET", key, "4000000000000000", NULL);
    assert_non_null(x);
    freeReplyObject(x);
}

static long long token_count(const char *name)
{
    char key[300];
    long long v = -1;

    snprintf(key, sizeof key, "redisson_lock_token:{%s}", name);
    if (tu_cmd_int_ex(&r, &v, "GET", key, NULL) != 0)
        return 0;
    return v - TOKEN_AHEAD;
}

/* A lock call whose request and reply each take delay_ms, the delay being
 * switched off after switch_ms (while the reply is held back).  Returns its
 * answer, with the key's remaining lease right after it in *pttl_ms (plus
 * the time it took to ask). */
static int late_lock(tu_proxy_t *p, struct obj *o, int wr, long delay_ms,
                     long switch_ms, long long *pttl_ms)
{
    struct delayer d = { p, switch_ms };
    struct fx_thread th;
    double t_ret;
    int rc;

    tu_proxy_set_delay(p, delay_ms);
    fx_thread_start(&th, delay_off_later, &d);
    rc = o_lock(o, wr);
    t_ret = tu_now();
    *pttl_ms = tu_cmd_int(&r, "PTTL", o->name, NULL);
    if (*pttl_ms > 0)
        *pttl_ms += (long long)((tu_now() - t_ret) * 1000);
    fx_thread_join(&th);
    return rc;
}

static void late_reply_renewed(enum kind k, int wr)
{
    const unsigned long lease = 6000;
    dist_mutexattr_t ma;
    dist_rwlockattr_t ra;
    tu_proxy_t *p = via_proxy(8000);
    long long pttl;
    struct obj o;
    int rc;

    memset(&o, 0, sizeof o);
    o.k = k;
    o.rw = k == K_RWLOCK;
    test_lock_name(o.name, sizeof o.name, "test_posix", "late_reply",
                   kind_name[k]);
    if (o.rw) {
        dist_rwlockattr_init(&ra);
        dist_rwlockattr_setlease(&ra, lease);
        assert_int_equal(dist_rwlock_init(&o.l, o.name, &ra), 0);
    } else {
        dist_mutexattr_init(&ma);
        dist_mutexattr_setlease(&ma, lease);
        dist_mutexattr_setfair(&ma, k == K_FAIR);
        assert_int_equal(dist_mutex_init(&o.m, o.name, &ma), 0);
    }
    token_ahead(o.name);
    /* sent at 0, run at 1.5 s (lease until 7.5 s), reply back at 3 s: half
     * the lease is gone, more than the third allowed */
    rc = late_lock(p, &o, wr, 1500, 2250, &pttl);
    assert_int_equal(rc, 0);
    if (pttl < (long long)lease - 750)
        fail_msg("%s: a hold whose reply took 3 s of its 6 s lease was "
                 "reported with %lld ms left",
                 kind_name[k], pttl);
    if (!o.rw || wr)
        assert_int_equal(token_count(o.name), 1); /* renewed, not retaken */
    assert_int_equal(o_unlock(&o), 0);
    obj_destroy(&o);
    tu_proxy_stop(p);
}

static void test_late_reply_is_renewed(void **state)
{
    (void)state;
    late_reply_renewed(K_RECURSIVE, 0);
    late_reply_renewed(K_FAIR, 0);
    late_reply_renewed(K_RWLOCK, 0);
    late_reply_renewed(K_RWLOCK, 1);
}

static void test_expired_on_arrival_is_taken_again(void **state)
{
    dist_mutexattr_t ma;
    tu_proxy_t *p;
    long long pttl;
    struct obj o;
    char *owner;
    int rc;

    (void)state;
    p = via_proxy(8000);
    memset(&o, 0, sizeof o);
    NAME(o.name, "m");
    dist_mutexattr_init(&ma);
    dist_mutexattr_setlease(&ma, 1000);
    assert_int_equal(dist_mutex_init(&o.m, o.name, &ma), 0);
    token_ahead(o.name);
    /* sent at 0, run at 1.5 s (lease until 2.5 s), reply back at 3 s: the
     * hold is gone when the caller hears of it */
    rc = late_lock(p, &o, 0, 1500, 2250, &pttl);
    assert_int_equal(rc, 0);
    owner = lock_owner_field(&r, o.name, NULL);
    if (!owner)
        fail_msg("lock returned 0 for a hold that had expired on the way "
                 "back (no holder in Redis)");
    free(owner);
    assert_true(pttl > 500);
    assert_int_equal(token_count(o.name), 2); /* taken again */
    assert_int_equal(o_unlock(&o), 0);
    obj_destroy(&o);
    tu_proxy_stop(p);
}

static void test_late_renewal_is_lost(void **state)
{
    tu_proxy_t *p;
    struct obj o;
    double until;
    long long prev, pttl;

    (void)state;
    p = via_proxy(8000);
    fx_lost_reset();
    dist_set_lost_handler(fx_on_lost, NULL);
    assert_int_equal(dist_set_watchdog_ms(3000), 0);
    obj_init(&o, K_RECURSIVE, __func__);
    assert_int_equal(o_lock(&o, 0), 0);
    /* the first renewal, with no delay (the renewal thread connects and
     * loads its script meanwhile): the lease jumps back up */
    until = tu_now() + slack(10.0);
    prev = tu_cmd_int(&r, "PTTL", o.name, NULL);
    while ((pttl = tu_cmd_int(&r, "PTTL", o.name, NULL)) <= prev &&
           tu_now() < until) {
        prev = pttl;
        tu_sleep_ms(20);
    }
    assert_true(pttl > prev);
    /* renewed (sent) at s, the lease runs until s + 3 s.  The next renewal,
     * sent at s + 0.75..1 s, runs at s + 2.25..2.5 s, still in time, but its
     * answer is back at s + 3.75..4 s: for a while nothing showed that the
     * hold was still there.  The delay ends while that answer is held back,
     * so the renewal after it is in time again: only the late answer can
     * make the hold lost. */
    tu_proxy_set_delay(p, 1500);
    tu_sleep_ms(3500);
    tu_proxy_set_delay(p, 0);
    until = tu_now() + slack(5.0);
    while (fx_lost_calls(NULL) == 0 && tu_now() < until)
        tu_sleep_ms(50);
    dist_set_lost_handler(NULL, NULL);
    if (fx_lost_calls(NULL) == 0)
        fail_msg("a watchdog renewal answered after the lease ran out was "
                 "not reported lost");
    assert_int_equal(o_unlock(&o), EPERM);
    tu_cmd_int(&r, "DEL", o.name,
               NULL); /* what it left ends with its lease */
    obj_destroy(&o);
    tu_proxy_stop(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, restore)
        T(test_trylock_busy),
        T(test_deadlock_and_perm_by_type),
        T(test_recursive_counts),
        T(test_einval_only_when_blocking),
        T(test_free_at_deadline_is_taken),
        T(test_free_at_deadline_taken_late),
        T(test_sem_free_at_deadline_taken_late),
        T(test_extreme_deadlines),
        T(test_signals_resume_waits),
        T(test_errno_unchanged),
        T(test_clock_variants),
        T(test_realtime_steps),
        T(test_zeroed_object_is_einval),
        T(test_small_stack),
        T(test_small_stack_tls),
        T(test_late_reply_is_renewed),
        T(test_expired_on_arrival_is_taken_again),
        T(test_late_renewal_is_lost),
#undef T
    };
    const char *filter = getenv("TEST_POSIX_FILTER");

    if (getenv("TEST_POSIX_SMALL_M"))
        return small_child();

    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
