/*
 * test_liar: the library and the distlock tool against a Redis that lies
 * (harness_liar.h): wrong types, impossible numbers, oversized headers,
 * one byte at a time, silence.  Every call must end with a clear error
 * within its bound, never crash, never take memory a number from the
 * server asked for, and never leave the caller believing it holds a lock
 * it was not shown to hold.
 *
 * Each case runs in a forked child (a fresh library, its own memory
 * figures); the child only reports (a pipe), the parent asserts.  Bounds
 * are generous: the command timeout plus 2 s, on a loaded 2-core machine.
 *
 * TEST_LIAR_FILTER=<glob> runs some tests only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_liar.h"
#include "testhelp.h"
#include "anylock.h"
#include "clockhelp.h"

#define TIMEOUT_MS 500UL /* DISTLOCK_TIMEOUT_MS of every case */
#define BOUND_S    (TIMEOUT_MS / 1000.0 + 2.0)
#define MAX_RSS_KB (400L * 1024) /* a child that took more asked for it */

#define AS_LIMIT (1024UL << 20) /* address space of a child */

/* ASan and TSan reserve terabytes of address space for their shadow
 * memory: no RLIMIT_AS under them (MAX_RSS_KB still bounds what a child
 * took). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

static tu_liar_t *liar;

/* ---- cases ------------------------------------------------------------- */

enum kind {
    K_MUTEX = LK_MUTEX,
    K_FAIR = LK_FAIR,
    K_READ = LK_READ,
    K_WRITE = LK_WRITE
};
enum op { OP_LOCK, OP_TRY, OP_TIMED, OP_UNLOCK };

struct lie_case {
    enum kind kind;
    enum op op;
    struct tu_lie lie; /* on EVALSHA unless lie.cmd says */
    const char *want;  /* in the error text (NULL: anything) */
    int want_rc;       /* 0: EIO */
    const char *held;  /* EVALSHA's other answers (NULL: none):
                                   the lock held by another, say */
};

/* What a child saw. */
struct outcome {
    int setup_rc; /* the lock taken before an unlock case */
    int rc;
    double secs;
    int token_rc; /* dist_*_token after the call */
    int next_rc;  /* an unlock after the call */
    char err[512];
};

/* A good answer to a lock script: taken, 1 hold, token 7. */
#define TAKEN      "*3\r\n:1\r\n:1\r\n:7\r\n"
/* Another: held by another owner for 200 ms more. */
#define HELD       "*2\r\n:0\r\n:200\r\n"
/* The same to a plain mutex's waiting call, which is also told whether the
 * holder will wake a registered waiter (0: wait on the shared channel). */
#define HELD_PLAIN "*3\r\n:0\r\n:200\r\n:0\r\n"

static const char *url(void)
{
    static char buf[64];

    snprintf(buf, sizeof buf, "redis://127.0.0.1:%d", tu_liar_port(liar));
    return buf;
}

static int do_op(union any_lock *l, enum kind k, enum op op)
{
    struct timespec ts;
    int rw = lk_is_rw(k);

    ts = clock_in_ms(CLOCK_REALTIME, 1000);
    switch (op) {
    case OP_LOCK:
        return !rw           ? dist_mutex_lock(&l->m)
               : k == K_READ ? dist_rwlock_rdlock(&l->rw)
                             : dist_rwlock_wrlock(&l->rw);
    case OP_TRY:
        return !rw           ? dist_mutex_trylock(&l->m)
               : k == K_READ ? dist_rwlock_tryrdlock(&l->rw)
                             : dist_rwlock_trywrlock(&l->rw);
    case OP_TIMED:
        return !rw           ? dist_mutex_timedlock(&l->m, &ts)
               : k == K_READ ? dist_rwlock_timedrdlock(&l->rw, &ts)
                             : dist_rwlock_timedwrlock(&l->rw, &ts);
    case OP_UNLOCK:
        return !rw ? dist_mutex_unlock(&l->m) : dist_rwlock_unlock(&l->rw);
    }
    return -1;
}

static int token_of(union any_lock *l, enum kind k)
{
    uint64_t t;

    return k == K_MUTEX || k == K_FAIR ? dist_mutex_token(&l->m, &t)
           : k == K_WRITE              ? dist_rwlock_token(&l->rw, &t)
                                       : dist_rwlock_token(&l->rw, &t);
}

/* In a child: the library on the liar with a command timeout of
 * timeout_ms, and a lock of kind named after the child.  0, or -1. */
static int child_lock(union any_lock *l, int kind, unsigned long timeout_ms)
{
    char name[96];

    snprintf(name, sizeof name, "liar:%d", (int)getpid());
    if (dist_set_url(url()) != 0 || dist_set_timeout_ms(timeout_ms) != 0)
        return -1;
    return any_lock_init(l, name, kind) != 0 ? -1 : 0;
}

/* The child's part: set up, the call, what it believes afterwards. */
static void child_run(const struct lie_case *c, struct outcome *o)
{
    union any_lock l;
    double t0;

    if (child_lock(&l, c->kind, TIMEOUT_MS) != 0) {
        o->setup_rc = -1;
        return;
    }
    if (c->op == OP_UNLOCK && (o->setup_rc = do_op(&l, c->kind, OP_TRY)) != 0)
        return;
    t0 = tu_now();
    o->rc = do_op(&l, c->kind, c->op);
    o->secs = tu_now() - t0;
    snprintf(o->err, sizeof o->err, "%s", dist_last_error());
    o->token_rc = token_of(&l, c->kind);
    o->next_rc = do_op(&l, c->kind, OP_UNLOCK);
}

/* Runs fn in a forked child that writes len bytes of its result to a
 * pipe; the child's peak RSS in *rss_kb.  Fails the test when the child
 * did not finish within limit_s or died. */
static void in_child(void (*fn)(const void *arg, void *res), const void *arg,
                     void *res, size_t len, double limit_s, long *rss_kb)
{
    int fd, st = 0;
    struct rusage ru;
    size_t got = 0;
    pid_t pid = fork_piped(&fd);
    double end;

    if (pid == 0) {
#ifndef UNDER_SANITIZER
        /* a regression must not take the machine's memory with it: past
         * this, allocations fail (and the case fails on its text) */
        setrlimit(RLIMIT_AS, &(struct rlimit){ AS_LIMIT, AS_LIMIT });
#endif
        memset(res, 0, len);
        fn(arg, res);
        if (write(fd, res, len) != (ssize_t)len)
            _exit(3);
        _exit(0);
    }
    end = tu_now() + limit_s + 5;
    while (got < len && tu_now() < end) {
        int b = read_byte(fd, 200);
        if (b >= 0)
            ((unsigned char *)res)[got++] = (unsigned char)b;
        else if (waitpid(pid, &st, WNOHANG) == pid)
            break;
    }
    close(fd);
    if (got < len)
        kill(pid, SIGKILL);
    memset(&ru, 0, sizeof ru);
    wait4(pid, &st, 0, &ru);
    *rss_kb = ru.ru_maxrss;
    /* What the child sent last (a release its renewal thread finished
     * as it ended) is answered before the next case changes the rules:
     * a late command once took the next case's first scripted answer. */
    for (end = tu_now() + 5; tu_liar_open(liar) > 0 && tu_now() < end;)
        tu_sleep_ms(5);
    if (got < len)
        fail_msg("the child %s (status %d) before it reported",
                 WIFSIGNALED(st) ? "was killed or crashed" : "exited", st);
}

static void run_case(const void *arg, void *res)
{
    child_run(arg, res);
}

static const char *const op_name[] = { "lock", "trylock", "timedlock",
                                       "unlock" };
static const char *const kind_name[] = { "mutex", "fair mutex", "rdlock",
                                         "wrlock" };

static void check_case(void **state)
{
    const struct lie_case *c = *state;
    struct tu_lie lie = c->lie;
    struct outcome o;
    long rss;

    if (!lie.cmd)
        lie.cmd = "EVALSHA";
    tu_liar_reset(liar);
    if (c->op == OP_UNLOCK)
        tu_liar_add(liar, &(struct tu_lie){
                              .cmd = "EVALSHA", .bytes = TAKEN, .times = 1 });
    tu_liar_add(liar, &lie);
    if (c->held)
        tu_liar_add(liar,
                    &(struct tu_lie){ .cmd = "EVALSHA", .bytes = c->held });
    in_child(run_case, c, &o, sizeof o, BOUND_S * 3, &rss);
    print_message("%s %s: rc %d in %.3f s, rss %ld KiB: %s\n",
                  kind_name[c->kind], op_name[c->op], o.rc, o.secs, rss,
                  o.err);
    assert_int_equal(o.setup_rc, 0);
    assert_int_equal(o.rc, c->want_rc ? c->want_rc : EIO);
    if (!o.err[0])
        fail_msg("no error text");
    if (c->want && !strstr(o.err, c->want))
        fail_msg("'%s' is not in the error text '%s'", c->want, o.err);
    /* one call in a fresh process: no earlier one to blame */
    if (strstr(o.err, "earlier call"))
        fail_msg("the error blames an earlier call: '%s'", o.err);
    if (o.secs > BOUND_S)
        fail_msg("the call took %.3f s, more than %.3f s", o.secs, BOUND_S);
    if (rss > MAX_RSS_KB)
        fail_msg("the child took %ld KiB", rss);
    /* nothing is believed held: no token, and the unlock refuses */
    assert_int_equal(o.token_rc, EPERM);
    assert_int_not_equal(o.next_rc, 0);
}

/* ---- renewal ------------------------------------------------------------- */

/* A hold taken on a good answer, then every renewal (the watchdog's
 * EVALSHA of mutex_renew or rwlock_renew, every lease / 3) answered with
 * a lie.  The renewal thread must neither crash nor spin (its CPU time and
 * its calls are counted), the hold must be reported lost to the lost
 * handler once its safe-until bound passed unconfirmed (the lease less the
 * default safety margin), never before, and the next unlock says EPERM. */

#define LEASE_MS     1500UL /* the watchdog lease of the renewal cases */
#define MARGIN_MS    200UL  /* dist_set_lease_margin_ms (the default) */
/* its safe-until bound after the acquire: the margin is a hundredth of
 * the lease + MARGIN_MS */
#define SAFE_S       ((LEASE_MS - LEASE_MS / 100 - MARGIN_MS) / 1000.0)
#define LOST_BOUND_S ((LEASE_MS + TIMEOUT_MS) / 1000.0 + 2.0)

struct renew_case {
    enum kind kind;
    struct tu_lie lie; /* on EVALSHA, after the lock's TAKEN */
    int keeps;         /* a good answer: the hold must stay */
};

struct renew_out {
    int setup_rc;
    int lost;          /* the lost handler's calls */
    double lost_after; /* s from the lock to the first */
    double secs;       /* the time watched */
    double cpu;        /* the child's CPU time meanwhile */
    int token_rc, unlock_rc;
    char err[512];
};

/* Set by the renewal thread, read by the child's main thread. */
static pthread_mutex_t lost_mu = PTHREAD_MUTEX_INITIALIZER;
static int lost_calls;
static double lost_at;

static void on_lost(const char *name, void *arg)
{
    (void)name;
    (void)arg;
    pthread_mutex_lock(&lost_mu);
    if (lost_calls++ == 0)
        lost_at = tu_now();
    pthread_mutex_unlock(&lost_mu);
}

/* The lost handler's calls so far, and when the first came. */
static int lost_seen(double *at)
{
    int n;

    pthread_mutex_lock(&lost_mu);
    n = lost_calls;
    *at = lost_at;
    pthread_mutex_unlock(&lost_mu);
    return n;
}

static double cpu_now(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void run_renew(const void *arg, void *res)
{
    const struct renew_case *c = arg;
    struct renew_out *o = res;
    union any_lock l;
    char name[96];
    double t0, cpu0, end, at;

    snprintf(name, sizeof name, "liar:%d", (int)getpid());
    if (dist_set_url(url()) != 0 || dist_set_timeout_ms(TIMEOUT_MS) != 0 ||
        dist_set_watchdog_ms(LEASE_MS) != 0 ||
        dist_set_lease_margin_ms(MARGIN_MS) != 0 ||
        dist_set_lost_handler(on_lost, NULL) != 0 ||
        any_lock_init(&l, name, c->kind) != 0 ||
        do_op(&l, c->kind, OP_TRY) != 0) {
        o->setup_rc = -1;
        snprintf(o->err, sizeof o->err, "%s", dist_last_error());
        return;
    }
    t0 = tu_now();
    cpu0 = cpu_now();
    /* the good case watches two leases; a lying one until the report */
    end = t0 + (c->keeps ? 2.0 * LEASE_MS / 1000.0 : LOST_BOUND_S + 2.0);
    while (tu_now() < end && !(lost_seen(&at) && !c->keeps))
        usleep(10000);
    o->secs = tu_now() - t0;
    o->cpu = cpu_now() - cpu0;
    o->lost = lost_seen(&at);
    o->lost_after = o->lost ? at - t0 : 0;
    o->token_rc = token_of(&l, c->kind);
    o->unlock_rc = do_op(&l, c->kind, OP_UNLOCK);
    snprintf(o->err, sizeof o->err, "%s", dist_last_error());
}

static void check_renew(void **state)
{
    const struct renew_case *c = *state;
    struct tu_lie lie = c->lie;
    struct renew_out o;
    long rss, calls;

    lie.cmd = "EVALSHA";
    tu_liar_reset(liar);
    tu_liar_add(liar, &(struct tu_lie){
                          .cmd = "EVALSHA", .bytes = TAKEN, .times = 1 });
    tu_liar_add(liar, &lie);
    calls = tu_liar_count(liar, "EVALSHA");
    in_child(run_renew, c, &o, sizeof o, LOST_BOUND_S + 4.0, &rss);
    calls = tu_liar_count(liar, "EVALSHA") - calls;
    print_message("%s: lost %d after %.3f s; %.3f s watched, %.3f s CPU, "
                  "%ld EVALSHA; token %d, unlock %d: %s\n",
                  kind_name[c->kind], o.lost, o.lost_after, o.secs, o.cpu,
                  calls, o.token_rc, o.unlock_rc, o.err);
    if (o.setup_rc != 0)
        fail_msg("the lock was not taken: %s", o.err);
    /* the renewal was asked, and not in a loop: one call per RETRY (250
     * ms) at most, and the thread slept meanwhile */
    if (calls < 2)
        fail_msg("no renewal was tried (%ld EVALSHA)", calls);
    if (calls > 4 + (long)(o.secs / 0.1))
        fail_msg("%ld EVALSHA in %.3f s: the renewal thread spins", calls,
                 o.secs);
    if (o.cpu > 0.3 + 0.25 * o.secs)
        fail_msg("%.3f s of CPU in %.3f s: the renewal thread spins", o.cpu,
                 o.secs);
    if (c->keeps) {
        assert_int_equal(o.lost, 0);
        assert_int_equal(o.token_rc == 0 || c->kind == K_READ, 1);
        return;
    }
    if (!o.lost)
        fail_msg("the hold was not reported lost within %.3f s", o.secs);
    assert_int_equal(o.lost, 1);
    if (o.lost_after > LOST_BOUND_S)
        fail_msg("the hold was reported lost after %.3f s, more than %.3f s",
                 o.lost_after, LOST_BOUND_S);
    /* unconfirmed past its safe-until bound: never reported before it */
    if (o.lost_after < SAFE_S - 0.1)
        fail_msg("reported lost after %.3f s, before its safe-until bound "
                 "(%.3f s)",
                 o.lost_after, SAFE_S);
    assert_int_equal(o.token_rc, EPERM);
    assert_int_equal(o.unlock_rc, EPERM);
}

/* ---- no lost handler after an unlock ------------------------------------- */

/* A mutex held once (a good answer), then the server answers no script
 * again: a reentrant trylock loses its reply (EIO, its outcome handed to
 * the renewal thread, whose settle is never answered either), and the
 * unlock that follows cannot run before that is settled: EIO.  The thread
 * has let go all the same, as after any unlock that said EIO: the
 * watchdog must stop, and the lost handler must not be called for a hold
 * the program let go (under the preload shim's default on_lease_lost =
 * abort it aborted the program once the lease ran out unconfirmed).  The
 * next unlock says the thread holds nothing. */
#define LET_GO_LEASE_MS 3000UL

struct let_go_out {
    int setup_rc, try_rc, unlock_rc, lost, next_rc, token_rc;
    char err[512];
};

static void run_let_go(const void *arg, void *res)
{
    struct let_go_out *o = res;
    dist_mutex_t m;
    char name[96];
    double end, at;
    uint64_t t;

    (void)arg;
    snprintf(name, sizeof name, "liar:%d", (int)getpid());
    if (dist_set_url(url()) != 0 || dist_set_timeout_ms(TIMEOUT_MS) != 0 ||
        dist_set_watchdog_ms(LET_GO_LEASE_MS) != 0 ||
        dist_set_lost_handler(on_lost, NULL) != 0 ||
        dist_mutex_init(&m, name, NULL) != 0 || dist_mutex_trylock(&m) != 0) {
        o->setup_rc = -1;
        snprintf(o->err, sizeof o->err, "%s", dist_last_error());
        return;
    }
    o->try_rc = dist_mutex_trylock(&m);
    o->unlock_rc = dist_mutex_unlock(&m);
    snprintf(o->err, sizeof o->err, "%s", dist_last_error());
    /* past the lease, unconfirmed: a hold still renewed is reported */
    end = tu_now() + LET_GO_LEASE_MS / 1000.0 + 2.0;
    while (tu_now() < end && !lost_seen(&at))
        usleep(10000);
    o->lost = lost_seen(&at);
    o->next_rc = dist_mutex_unlock(&m);
    o->token_rc = dist_mutex_token(&m, &t);
}

static void test_unlock_unsettled_no_lost_handler(void **state)
{
    struct let_go_out o;
    long rss;

    (void)state;
    tu_liar_reset(liar);
    tu_liar_add(liar, &(struct tu_lie){
                          .cmd = "EVALSHA", .bytes = TAKEN, .times = 1 });
    tu_liar_add(liar, &(struct tu_lie){ .cmd = "EVALSHA", .silent = 1 });
    in_child(run_let_go, NULL, &o, sizeof o,
             LET_GO_LEASE_MS / 1000.0 + 3 * BOUND_S, &rss);
    print_message("reentrant trylock %d, unlock %d (%s); lost handler %d; "
                  "next unlock %d, token %d\n",
                  o.try_rc, o.unlock_rc, o.err, o.lost, o.next_rc,
                  o.token_rc);
    if (o.setup_rc != 0)
        fail_msg("the lock was not taken: %s", o.err);
    assert_int_equal(o.try_rc, EIO);
    assert_int_equal(o.unlock_rc, EIO);
    if (!strstr(o.err, "let go"))
        fail_msg("the unlock does not say the thread let go: '%s'", o.err);
    if (o.lost != 0)
        fail_msg("the lost handler ran %d time(s) after the unlock let go",
                 o.lost);
    assert_int_equal(o.next_rc, EPERM);
    assert_int_equal(o.token_rc, EPERM);
}

/* ---- a fresh hold counted twice ------------------------------------------ */

/* One server, no failover: an acquire whose reply was lost is probed and
 * run again, and a late copy of the first (a slow path delivers it after
 * the client gave up on it) may run before the second.  That answers
 * "taken, 2 holds" to a thread that had none; the surplus is given back
 * (answered "1 left"), and the unlock (answered "0 left") leaves nothing
 * held.  Kept, the owner's unlock would leave one hold in Redis that its
 * watchdog renews, and each later lock of that thread would be a
 * reentrant hold with the old token (CI's torture run: 20 grants repeated
 * a token). */
struct twice_out {
    int lock_rc, token_rc, unlock_rc, after_rc;
    uint64_t token;
    char err[512];
};

static void run_twice(const void *arg, void *res)
{
    struct twice_out *o = res;
    dist_mutex_t m;
    uint64_t t = 0;
    char name[64];

    (void)arg;
    snprintf(name, sizeof name, "liar:%d", (int)getpid());
    o->lock_rc = -1;
    if (dist_set_url(url()) != 0 || dist_set_timeout_ms(TIMEOUT_MS) != 0 ||
        dist_mutex_init(&m, name, NULL) != 0)
        return;
    o->lock_rc = dist_mutex_trylock(&m);
    snprintf(o->err, sizeof o->err, "%s", dist_last_error());
    o->token_rc = dist_mutex_token(&m, &o->token);
    o->unlock_rc = dist_mutex_unlock(&m);
    o->after_rc = dist_mutex_token(&m, &t);
}

static void run_twice_synced(const void *arg, void *res)
{
    dist_set_replica_wait_ms(100);
    run_twice(arg, res);
}

/* A master with one replica, as ROLE tells it. */
#define ROLE_ONE_REPLICA                                                     \
    "*3\r\n$6\r\nmaster\r\n:0\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n"            \
    "$4\r\n6380\r\n$1\r\n0\r\n"

/* A result not checked. */
#define ANY INT_MIN

/* One case: the lock is answered "taken, 2 holds", the give-back of the
 * surplus as giveback says (NULL: "1 left"), the new token's draw
 * (token_draw) as draw says (NULL: an error), every later EVALSHA "0
 * left", and extra's rule too (NULL: none).  child (NULL: run_twice) runs
 * in a child; its results and the EVALSHA it sent are as the case wants. */
struct twice_case {
    const char *giveback, *draw;
    const struct tu_lie *extra;
    void (*child)(const void *arg, void *res);
    struct {
        int lock_rc, token_rc, unlock_rc, after_rc; /* or ANY */
        uint64_t token;                             /* 0: not checked */
        long evals;
    } want;
    const char *err; /* in the lock's error text (NULL: not checked) */
};

static void script_twice(const struct twice_case *c)
{
    tu_liar_reset(liar);
    if (c->extra)
        tu_liar_add(liar, c->extra);
    tu_liar_add(liar, &(struct tu_lie){ .cmd = "EVALSHA",
                                        .bytes = "*3\r\n:1\r\n:2\r\n:7\r\n",
                                        .times = 1 });
    tu_liar_add(liar,
                &(struct tu_lie){ .cmd = "EVALSHA",
                                  .bytes = c->giveback ? c->giveback
                                                       : "*2\r\n:1\r\n:0\r\n",
                                  .times = 1 });
    tu_liar_add(
        liar,
        &(struct tu_lie){
            .cmd = "EVALSHA",
            .times = 1,
            .bytes = c->draw ? c->draw
                             : "-ERR scripted refusal of token_draw\r\n" });
    tu_liar_add(liar, &(struct tu_lie){ .cmd = "EVALSHA",
                                        .bytes = "*2\r\n:0\r\n:0\r\n" });
}

static void expect_rc(const char *what, int got, int want)
{
    if (want != ANY && got != want)
        fail_msg("%s: %d, expected %d", what, got, want);
}

static void test_twice(void **state)
{
    const struct twice_case *c = *state;
    struct twice_out o;
    long evals, rss;

    script_twice(c);
    evals = tu_liar_count(liar, "EVALSHA");
    in_child(c->child ? c->child : run_twice, NULL, &o, sizeof o, BOUND_S * 3,
             &rss);
    evals = tu_liar_count(liar, "EVALSHA") - evals;
    print_message("lock %d, token %d (%" PRIu64 "), unlock %d, then token "
                  "%d; %ld EVALSHA: %s\n",
                  o.lock_rc, o.token_rc, o.token, o.unlock_rc, o.after_rc,
                  evals, o.err);
    expect_rc("lock", o.lock_rc, c->want.lock_rc);
    if (c->err && !strstr(o.err, c->err))
        fail_msg("'%s' is not in '%s'", c->err, o.err);
    expect_rc("token", o.token_rc, c->want.token_rc);
    if (c->want.token)
        assert_int_equal(o.token, c->want.token);
    expect_rc("unlock", o.unlock_rc, c->want.unlock_rc);
    assert_int_equal(evals, c->want.evals);
    expect_rc("token after", o.after_rc, c->want.after_rc);
}

/* The token is not the 7 the reentry showed, which an earlier hold of
 * this owner may have shown already: a new one, drawn by token_draw.  The
 * EVALSHA: the acquire, the give-back of the surplus, the draw, the
 * unlock. */
static const struct twice_case twice_fresh = {
    .draw = ":8\r\n",
    .want = { 0, 0, 0, EPERM, 8, 4 },
};

/* The give-back of the surplus refused (a master cut off from its
 * replicas answers NOREPLICAS; one being demoted, READONLY until the
 * command timeout): the owner has the one hold it took, and the renewal
 * thread gives the other back (one more EVALSHA) before the owner's next
 * call.  The EVALSHA: the acquire, the refused give-back, the draw, the
 * renewal thread's give-back, the unlock. */
static const struct twice_case twice_refused = {
    .giveback = "-NOREPLICAS Not enough good replicas to write.\r\n",
    .draw = ":8\r\n",
    .want = { 0, 0, 0, EPERM, 8, 5 },
};

/* A fresh hold counted twice (a failover brought back a hold of ours)
 * whose replica sync then fails (WAIT: no replica acknowledged it): the
 * lock fails with DIST_ENOREPLICA and gives back both holds, not just the
 * one it took.  Giving back one left the thread holding a lock it was
 * told it did not get, renewed for ever (the Sentinel torture run).  The
 * EVALSHA: the acquire, the give-back of the surplus, the new token's draw
 * and the give-back of the rest. */
static const struct twice_case twice_unsynced = {
    .draw = ":8\r\n",
    .extra =
        &(const struct tu_lie){ .cmd = "ROLE", .bytes = ROLE_ONE_REPLICA },
    .child = run_twice_synced,
    .want = { DIST_ENOREPLICA, EPERM, EPERM, ANY, 0, 4 },
};

/* No new token to be had: the hold is given back, and the lock fails.
 * The EVALSHA: the acquire, the give-back of the surplus, the refused
 * draw, the give-back of the rest. */
static const struct twice_case twice_no_token = {
    .want = { EIO, EPERM, EPERM, ANY, 0, 4 },
    .err = "fencing token",
};

/* ---- a lock whose own reply is lost ------------------------------------- */

/* The lock's script is never answered (silence, a closed connection, an
 * answer slower than the command timeout T), nor is anything after it:
 * the probe, the renewal thread's settle of the unknown outcome.
 * docs/design.md bounds lock at the first try, then T more of retries:
 * 2T, here under 2T + 1 s; it took 3T when the settle of the call's own
 * lost reply waited two command timeouts of its own.  T is longer than the
 * other cases' so that 3T is past the bound.  The error is this call's (it
 * blamed "an earlier call", and there was none) and names the lock. */
#define OWN_TIMEOUT_MS 2000UL
#define OWN_BOUND_S    (2 * OWN_TIMEOUT_MS / 1000.0 + 1.0)

struct own_case {
    enum kind kind;
    struct tu_lie lie; /* on EVALSHA */
};

static void run_own(const void *arg, void *res)
{
    const struct own_case *c = arg;
    struct outcome *o = res;
    union any_lock l;
    double t0;

    if (child_lock(&l, c->kind, OWN_TIMEOUT_MS) != 0) {
        o->setup_rc = -1;
        return;
    }
    t0 = tu_now();
    o->rc = do_op(&l, c->kind, OP_LOCK);
    o->secs = tu_now() - t0;
    snprintf(o->err, sizeof o->err, "%s", dist_last_error());
    o->token_rc = token_of(&l, c->kind);
}

static void check_own(void **state)
{
    const struct own_case *c = *state;
    struct tu_lie lie = c->lie;
    struct outcome o;
    long rss;

    lie.cmd = "EVALSHA";
    tu_liar_reset(liar);
    tu_liar_add(liar, &lie);
    in_child(run_own, c, &o, sizeof o, OWN_BOUND_S * 2, &rss);
    print_message("%s lock, T = %lu ms: rc %d in %.3f s: %s\n",
                  kind_name[c->kind], OWN_TIMEOUT_MS, o.rc, o.secs, o.err);
    assert_int_equal(o.setup_rc, 0);
    assert_int_equal(o.rc, EIO);
    if (o.secs > OWN_BOUND_S)
        fail_msg("the lock took %.3f s, more than 2T (T = %lu ms) and 1 s",
                 o.secs, OWN_TIMEOUT_MS);
    if (strstr(o.err, "earlier call"))
        fail_msg("the error blames an earlier call, and there was none: "
                 "'%s'",
                 o.err);
    if (!strstr(o.err, "'liar:"))
        fail_msg("the error does not name the lock: '%s'", o.err);
    assert_int_equal(o.token_rc, EPERM);
}

/* ---- the tool ---------------------------------------------------------- */

struct tool_out {
    int status;
    double secs;
    char err[1024];
};

static const char *tool_path(void)
{
    static char path[4096];
    const char *top = getenv("top_builddir");

    snprintf(path, sizeof path, "%s/tools/distlock", top ? top : ".");
    return path;
}

/* The tool's arguments after "--url URL": at most 4, NULL-terminated. */
struct tool_args {
    const char *argv[5];
};

/* Runs `distlock --url ... ARGS` with the command timeout, its stderr
 * into o->err. */
static void run_tool(const void *arg, void *res)
{
    struct tool_out *o = res;
    const struct tool_args *ta = arg;
    int fds[2], st;
    double t0 = tu_now();
    size_t got = 0;
    ssize_t n;
    pid_t pid;
    char ms[16];

    snprintf(ms, sizeof ms, "%lu", TIMEOUT_MS);
    if (pipe(fds) != 0)
        return;
    if ((pid = fork()) == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        setenv("DISTLOCK_TIMEOUT_MS", ms, 1);
        execl(tool_path(), "distlock", "--url", url(), ta->argv[0],
              ta->argv[1], ta->argv[2], ta->argv[3], ta->argv[4],
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    while (got + 1 < sizeof o->err &&
           (n = read(fds[0], o->err + got, sizeof o->err - 1 - got)) > 0)
        got += (size_t)n;
    close(fds[0]);
    waitpid(pid, &st, 0);
    o->status = st;
    o->secs = tu_now() - t0;
}

struct tool_case {
    struct tu_lie lie;
    const char *want;      /* in stderr */
    struct tool_args args; /* none: status x */
    int retried;           /* a server that closes or sends junk: the
                                   tool tries again for its whole command
                                   timeout, and no longer */
};

static void check_tool(void **state)
{
    const struct tool_case *c = *state;
    struct tool_out o;
    long rss;

    if (access(tool_path(), X_OK) != 0)
        fail_msg("%s is not there: build it first", tool_path());
    tu_liar_reset(liar);
    tu_liar_add(liar, &c->lie);
    const struct tool_args status = { { "status", "x", NULL, NULL, NULL } };
    const struct tool_args *ta = c->args.argv[0] ? &c->args : &status;

    in_child(run_tool, ta, &o, sizeof o, BOUND_S * 3, &rss);
    print_message("%s: %d in %.3f s: %s", ta->argv[0], o.status, o.secs,
                  o.err);
    if (!WIFEXITED(o.status))
        fail_msg("distlock %s died (status %d): %s", ta->argv[0], o.status,
                 o.err);
    assert_int_equal(WEXITSTATUS(o.status), 3);
    if (c->want && !strstr(o.err, c->want))
        fail_msg("'%s' is not in '%s'", c->want, o.err);
    /* a reason after "cannot read 'x': ", never an empty one */
    if (strstr(o.err, "': \n") || strstr(o.err, ": \n"))
        fail_msg("an empty reason: '%s'", o.err);
    if (o.secs > BOUND_S)
        fail_msg("distlock %s took %.3f s, more than %.3f s", ta->argv[0],
                 o.secs, BOUND_S);
    if (!c->retried)
        return;
    /* until the command timeout is nearly over (the last pause is cut
     * to leave the last try 50 ms) */
    if (o.secs < TIMEOUT_MS / 1000.0 - 0.1)
        fail_msg("distlock %s gave up after %.3f s, before its command "
                 "timeout of %lu ms",
                 ta->argv[0], o.secs, TIMEOUT_MS);
    /* The server answers every command, if wrongly.  Before the pause was
     * cut, a try began after a full pause (up to 200 ms) past the command
     * timeout and ended "no answer", the whole command taking T + 0.16-0.3
     * s.  The last try now begins with 50 ms left, which a loaded machine
     * may not be enough to reconnect in: a "no answer" then is that, as
     * long as the command ended near its timeout. */
    if (strstr(o.err, "no answer") && o.secs > TIMEOUT_MS / 1000.0 + 0.1)
        fail_msg("a try began with no time left (%.3f s): '%s'", o.secs,
                 o.err);
}

/* list: every SCAN page comes slowly (within the command timeout) with a
 * new cursor, so that the scan would go on for 30 pages (about 10 s):
 * --timeout ends the whole listing, with a message that names it. */
static void test_list_scan_trickle(void **state)
{
    static char page[30][40];
    struct tu_lie lie = { .cmd = "SCAN", .drip_ms = 20, .times = 1 };
    const struct tool_args ta = { { "list", "--timeout", "1.5", NULL,
                                    NULL } };
    struct tool_out o;
    long rss;

    (void)state;
    tu_liar_reset(liar);
    for (int i = 0; i < 30; i++) {
        snprintf(page[i], sizeof page[i], "*2\r\n$2\r\n%02d\r\n*0\r\n",
                 i + 10);
        lie.bytes = page[i];
        tu_liar_add(liar, &lie);
    }
    in_child(run_tool, &ta, &o, sizeof o, BOUND_S * 3, &rss);
    print_message("list: %d in %.3f s: %s", o.status, o.secs, o.err);
    assert_true(WIFEXITED(o.status));
    assert_int_equal(WEXITSTATUS(o.status), 3);
    if (!strstr(o.err, "--timeout"))
        fail_msg("'--timeout' is not in '%s'", o.err);
    if (o.secs < 1.45 || o.secs > 1.5 + BOUND_S)
        fail_msg("list ended after %.3f s, not about 1.5 s", o.secs);
}

/* ---- the text of a refusal ----------------------------------------------- */

/* A condition's signal and broadcast and a barrier's wait that Redis
 * refuses: the caller's words, then the route's, once each.  These callers
 * add what they were doing to the text already set; it used to be
 * formatted into itself, which garbled it ("condition 'c': signal
 * condition 'c': signal ope"). */

#define REFUSAL "ERR scripted refusal"

struct text_out {
    int setup_rc;
    int rc[3];
    char err[3][256];
};

static void run_texts(const void *arg, void *res)
{
    struct text_out *o = res;
    dist_cond_t c;
    dist_barrier_t b;
    int i;

    (void)arg;
    if (dist_set_url(url()) != 0 || dist_set_timeout_ms(TIMEOUT_MS) != 0 ||
        dist_cond_init(&c, "texts", NULL) != 0 ||
        dist_barrier_init(&b, "texts", 2) != 0) {
        o->setup_rc = -1;
        return;
    }
    o->rc[0] = dist_cond_signal(&c);
    snprintf(o->err[0], sizeof o->err[0], "%s", dist_last_error());
    o->rc[1] = dist_cond_broadcast(&c);
    snprintf(o->err[1], sizeof o->err[1], "%s", dist_last_error());
    o->rc[2] = dist_barrier_wait(&b);
    snprintf(o->err[2], sizeof o->err[2], "%s", dist_last_error());
    for (i = 0; i < 3; i++)
        if (o->rc[i] == 0)
            o->err[i][0] = 0;
}

static void test_refusal_texts(void **state)
{
    static const char *const want[3] = {
        "condition 'texts': signal: Redis refused cond_signal: " REFUSAL,
        "condition 'texts': broadcast: Redis refused cond_signal: " REFUSAL,
        "barrier 'texts': Redis refused barrier_arrive: " REFUSAL,
    };
    struct text_out o;
    long rss;
    int i;

    (void)state;
    tu_liar_reset(liar);
    tu_liar_add(liar, &(struct tu_lie){ .cmd = "EVALSHA",
                                        .bytes = "-" REFUSAL "\r\n" });
    in_child(run_texts, NULL, &o, sizeof o, BOUND_S * 3, &rss);
    assert_int_equal(o.setup_rc, 0);
    for (i = 0; i < 3; i++) {
        print_message("%s\n", o.err[i]);
        assert_int_equal(o.rc[i], EIO);
        assert_string_equal(o.err[i], want[i]);
    }
}

/* ---- the table ----------------------------------------------------------- */

#define LIE(...)                                                             \
    {                                                                        \
        __VA_ARGS__                                                          \
    }
#define CASE(k, op, lie, want)                                               \
    (&(const struct lie_case){ k, op, lie, want, 0, NULL })

static int setup(void **state)
{
    (void)state;
    return 0;
}

int main(void)
{
#define C(name, k, op, want, ...)                                            \
    param_test(name, check_case, CASE(k, op, LIE(__VA_ARGS__), want), NULL)
#define CR(name, k, op, rc, want, held, ...)                                 \
    param_test(name, check_case,                                             \
               (&(const struct lie_case){                                    \
                   k, op, { __VA_ARGS__ }, want, rc, held }),                \
               NULL)
#define RENEW(name, k, keeps, ...)                                           \
    param_test(name, check_renew,                                            \
               (&(const struct renew_case){ k, { __VA_ARGS__ }, keeps }),    \
               NULL)
#define OWN(name, k, ...)                                                    \
    param_test(name, check_own,                                              \
               (&(const struct own_case){ k, { __VA_ARGS__ } }), NULL)
#define TOOL(name, want, ...)                                                \
    param_test(name, check_tool,                                             \
               (&(const struct tool_case){                                   \
                   { __VA_ARGS__ }, want, { { NULL } }, 0 }),                \
               NULL)
#define TOOL_RETRIED(name, want, ...)                                        \
    param_test(name, check_tool,                                             \
               (&(const struct tool_case){                                   \
                   { __VA_ARGS__ }, want, { { NULL } }, 1 }),                \
               NULL)
#define LIST_ARGS    "list"
#define UNLOCK_ARGS  "unlock", "--force", "--yes", "x"
#define SEMSET_ARGS  "sem-set", "x", "5"
#define RSEMSET_ARGS "sem-set", "--redisson", "x", "5"
#define TOOLA(name, args, want, ...)                                         \
    param_test(name, check_tool,                                             \
               (&(const struct tool_case){                                   \
                   { __VA_ARGS__ }, want, { { args } }, 0 }),                \
               NULL)
    const struct CMUnitTest tests[] = {
        /* wrong types */
        C(mutex_try_string, K_MUTEX, OP_TRY, "mutex_lock",
          .bytes = "+OK\r\n"),
        C(mutex_try_nil_element, K_MUTEX, OP_TRY, "mutex_lock",
          .bytes = "*2\r\n$-1\r\n:5\r\n"),
        C(fair_lock_integer, K_FAIR, OP_LOCK, NULL, .bytes = ":1\r\n"),
        C(rdlock_try_array_of_arrays, K_READ, OP_TRY, "rwlock_rdlock",
          .bytes = "*2\r\n*0\r\n*0\r\n"),
        /* impossible numbers */
        C(mutex_try_count_huge, K_MUTEX, OP_TRY, "mutex 'liar",
          .bytes = "*3\r\n:1\r\n:9223372036854775807\r\n:7\r\n"),
        C(mutex_try_count_zero, K_MUTEX, OP_TRY, "mutex 'liar",
          .bytes = "*3\r\n:1\r\n:0\r\n:7\r\n"),
        C(fair_timed_count_negative, K_FAIR, OP_TIMED, "mutex 'liar",
          .bytes = "*3\r\n:1\r\n:-1\r\n:7\r\n"),
        C(mutex_timed_wait_negative, K_MUTEX, OP_TIMED, "mutex 'liar",
          .bytes = "*2\r\n:0\r\n:-5\r\n"),
        /* a plain mutex's refusal that does not say whether its holder
         * wakes a registered waiter, or says something else than 0 or 1 */
        C(mutex_timed_refusal_no_wakes, K_MUTEX, OP_TIMED, "wakes a waiter",
          .bytes = HELD),
        C(mutex_timed_refusal_wakes_2, K_MUTEX, OP_TIMED, "wakes a waiter",
          .bytes = "*3\r\n:0\r\n:200\r\n:2\r\n"),
        C(mutex_unlock_left_huge, K_MUTEX, OP_UNLOCK, "mutex 'liar",
          .bytes = "*2\r\n:9223372036854775807\r\n:0\r\n"),
        C(fair_unlock_left_negative, K_FAIR, OP_UNLOCK, "mutex 'liar",
          .bytes = "*2\r\n:-7\r\n:0\r\n"),
        /* a release refused with an error reply: the thread lets go all
         * the same (unlock(3)), the renewal thread finishes it; keeping
         * the hold instead left it renewed for ever once the caller went
         * on (the Sentinel torture run hung on it) */
        C(mutex_unlock_refused, K_MUTEX, OP_UNLOCK, "has let go",
          .bytes = "-ERR this liar refuses every release\r\n"),
        C(fair_unlock_refused, K_FAIR, OP_UNLOCK, "has let go",
          .bytes = "-NOREPLICAS Not enough good replicas to write.\r\n"),
        C(wrlock_unlock_readonly, K_WRITE, OP_UNLOCK, "has let go",
          .bytes = "-READONLY You can't write against a read only "
                   "replica.\r\n"),
        C(rdlock_unlock_refused, K_READ, OP_UNLOCK, "has let go",
          .bytes = "-ERR this liar refuses every release\r\n"),
        C(rdlock_try_holds_1e8, K_READ, OP_TRY, "rwlock 'liar",
          .bytes = "*2\r\n:1\r\n:100000000\r\n"),
        C(rdlock_lock_holds_max, K_READ, OP_LOCK, "rwlock 'liar",
          .bytes = "*2\r\n:1\r\n:9223372036854775807\r\n"),
        C(wrlock_timed_holds_negative, K_WRITE, OP_TIMED, "rwlock 'liar",
          .bytes = "*3\r\n:1\r\n:-1\r\n:7\r\n"),
        C(rdlock_unlock_left_1e8, K_READ, OP_UNLOCK, "rwlock 'liar",
          .bytes = "*2\r\n:100000000\r\n:0\r\n"),
        C(wrlock_unlock_counts_huge, K_WRITE, OP_UNLOCK, "rwlock 'liar",
          .bytes = "*3\r\n:-1\r\n:100000000\r\n:-100000000\r\n"),
        C(rdlock_try_mismatch_max, K_READ, OP_TRY, "rwlock 'liar",
          .bytes = "*3\r\n:-1\r\n:9223372036854775807\r\n:0\r\n"),
        CR(wrlock_try_no_upgrade, K_WRITE, OP_TRY, EBUSY, "upgraded", NULL,
           .bytes = "*1\r\n:-2\r\n"),
        C(rdlock_try_no_upgrade, K_READ, OP_TRY, "status -2",
          .bytes = "*1\r\n:-2\r\n"),
        /* a fresh hold counted twice (a retry after a lost reply) whose
         * give-back is answered "none left": not held after all */
        CR(mutex_try_twice_then_none, K_MUTEX, OP_TRY, EIO, "counted twice",
           "*2\r\n:0\r\n:0\r\n", .bytes = "*3\r\n:1\r\n:2\r\n:7\r\n",
           .times = 1),
        CR(fair_timed_twice_then_none, K_FAIR, OP_TIMED, EIO, "counted twice",
           "*2\r\n:0\r\n:0\r\n", .bytes = "*3\r\n:1\r\n:2\r\n:7\r\n",
           .times = 1),
        /* oversized headers */
        C(mutex_try_array_2g, K_MUTEX, OP_TRY, "elements",
          .bytes = "*2147483647\r\n"),
        C(rdlock_try_array_2g, K_READ, OP_TRY, "elements",
          .bytes = "*2147483647\r\n:1\r\n:1\r\n"),
        C(mutex_try_bulk_2g, K_MUTEX, OP_TRY, "a string may hold",
          .bytes = "$2147483647\r\n", .fill = "xxxxxxxx"),
        C(wrlock_try_nested, K_WRITE, OP_TRY, NULL,
          .bytes = "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n"
                   "*1\r\n:1\r\n"),
        C(mutex_try_element_flood, K_MUTEX, OP_TRY, NULL,
          .bytes = "*1000000000\r\n", .fill = ":1\r\n"),
        C(mutex_try_nested_flood, K_MUTEX, OP_TRY, "elements in all",
          .bytes = "*60000\r\n", .fill = "*3\r\n:1\r\n:1\r\n:1\r\n"),
        C(mutex_try_line_flood, K_MUTEX, OP_TRY, "line", .bytes = "+",
          .fill = "OKOKOKOK"),
        /* slow and silent */
        C(mutex_try_trickle, K_MUTEX, OP_TRY, "500 ms", .bytes = TAKEN,
          .drip_ms = 300),
        C(fair_timed_trickle, K_FAIR, OP_TIMED, "mutex 'liar", .bytes = TAKEN,
          .drip_ms = 300),
        C(wrlock_try_trickle, K_WRITE, OP_TRY, "500 ms", .bytes = TAKEN,
          .drip_ms = 300),
        C(mutex_try_silent, K_MUTEX, OP_TRY, "500 ms", .silent = 1),
        C(rdlock_unlock_silent, K_READ, OP_UNLOCK, NULL, .silent = 1),
        C(mutex_try_role_trickle, K_MUTEX, OP_TRY, "ROLE", .cmd = "ROLE",
          .bytes = "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n", .drip_ms = 300),
        /* no AUTH: every command refused (ROLE first), or a long one
         * refused with a protocol error and the connection closed */
        C(rdlock_try_noauth, K_READ, OP_TRY, "AUTH", .cmd = "ROLE",
          .bytes = "-NOAUTH Authentication required.\r\n"),
        C(mutex_try_noauth, K_MUTEX, OP_TRY, "AUTH", .cmd = "ROLE",
          .bytes = "-NOAUTH Authentication required.\r\n"),
        C(rdlock_try_unauthenticated, K_READ, OP_TRY, "AUTH",
          .bytes =
              "-ERR Protocol error: unauthenticated multibulk length\r\n",
          .close = 1),
        /* the pub/sub connection of a waiter lies; the lock is held by
         * another (200 ms left, again and again) */
        CR(mutex_timed_subscribe_2g, K_MUTEX, OP_TIMED, ETIMEDOUT,
           "timed out", HELD_PLAIN, .cmd = "SUBSCRIBE",
           .bytes = "*2147483647\r\n"),
        CR(fair_timed_subscribe_types, K_FAIR, OP_TIMED, ETIMEDOUT,
           "timed out", HELD, .cmd = "SUBSCRIBE",
           .bytes = "*3\r\n:1\r\n*0\r\n$-1\r\n"),
        CR(rdlock_timed_subscribe_message, K_READ, OP_TIMED, ETIMEDOUT,
           "timed out", HELD, .cmd = "SUBSCRIBE",
           .bytes = "*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n:1\r\n"
                    "*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n*0\r\n"),
        CR(wrlock_timed_subscribe_silent, K_WRITE, OP_TIMED, ETIMEDOUT,
           "timed out", HELD, .cmd = "SUBSCRIBE", .silent = 1),
        /* a lock whose own reply is lost: 2T at most */
        OWN(own_reply_silent, K_MUTEX, .silent = 1),
        OWN(own_reply_closing, K_FAIR, .close = 1),
        OWN(own_reply_trickle, K_WRITE, .bytes = TAKEN, .drip_ms = 700),
        cmocka_unit_test(test_unlock_unsettled_no_lost_handler),
        param_test(test_fresh_hold_counted_twice, test_twice, &twice_fresh,
                   NULL),
        param_test(test_fresh_hold_counted_twice_no_token, test_twice,
                   &twice_no_token, NULL),
        param_test(test_fresh_hold_counted_twice_refused, test_twice,
                   &twice_refused, NULL),
        param_test(test_fresh_hold_counted_twice_unsynced, test_twice,
                   &twice_unsynced, NULL),
        /* renewal: a good answer keeps the hold, every lie loses it */
        RENEW(renew_ok, K_MUTEX, 1, .bytes = "*1\r\n:1\r\n"),
        RENEW(renew_ok_write, K_WRITE, 1, .bytes = "*1\r\n:1\r\n"),
        RENEW(renew_string, K_MUTEX, 0, .bytes = "+OK\r\n"),
        RENEW(renew_bulk_element, K_MUTEX, 0, .bytes = "*1\r\n$1\r\n1\r\n"),
        RENEW(renew_too_many, K_FAIR, 0, .bytes = "*2\r\n:1\r\n:1\r\n"),
        RENEW(renew_huge, K_MUTEX, 0,
              .bytes = "*1\r\n:9223372036854775807\r\n"),
        RENEW(renew_negative, K_WRITE, 0, .bytes = "*1\r\n:-1\r\n"),
        RENEW(renew_error, K_READ, 0, .bytes = "-BUSY script running\r\n"),
        RENEW(renew_array_2g, K_READ, 0, .bytes = "*2147483647\r\n"),
        RENEW(renew_silent, K_MUTEX, 0, .silent = 1),
        RENEW(renew_closing, K_WRITE, 0, .close = 1),
        RENEW(renew_trickle, K_MUTEX, 0, .bytes = "*1\r\n:1\r\n",
              .drip_ms = 300),
        /* the tool */
        TOOL(status_time_integer, "TIME", .cmd = "EXEC",
             .bytes = "*8\r\n+hash\r\n*0\r\n:-2\r\n$-1\r\n*0\r\n*0\r\n*0\r\n"
                      "*2\r\n:1\r\n:2\r\n"),
        TOOL(status_time_nil, "TIME", .cmd = "EXEC",
             .bytes = "*8\r\n+none\r\n*0\r\n:-2\r\n$-1\r\n*0\r\n*0\r\n*0\r\n"
                      "$-1\r\n"),
        TOOL(status_type_integer, NULL, .cmd = "EXEC",
             .bytes =
                 "*8\r\n:5\r\n*2\r\n:1\r\n:1\r\n:-2\r\n:1\r\n*1\r\n:1\r\n"
                 "*2\r\n:1\r\n:2\r\n*1\r\n$1\r\nx\r\n*0\r\n"),
        TOOL(status_exec_trickle, "500 ms", .cmd = "EXEC",
             .bytes = "*8\r\n+none\r\n*0\r\n:-2\r\n$-1\r\n*0\r\n*0\r\n*0\r\n"
                      "*2\r\n$1\r\n1\r\n$1\r\n2\r\n",
             .drip_ms = 300),
        TOOL(status_silent, "500 ms", .cmd = "EXEC", .silent = 1),
        TOOL_RETRIED(status_junk, NULL, .cmd = "EXEC", .bytes = "?junk\r\n"),
        TOOL_RETRIED(status_closing, "closed", .cmd = "EXEC", .close = 1),
        TOOL_RETRIED(status_array_2g, "elements", .cmd = "EXEC",
                     .bytes = "*2147483647\r\n"),
        TOOL(status_noauth, "AUTH", .cmd = "ROLE",
             .bytes = "-NOAUTH Authentication required.\r\n"),
        /* list: a SCAN answered wrongly, or whose cursors go round */
        TOOLA(list_scan_string, LIST_ARGS, "SCAN", .cmd = "SCAN",
              .bytes = "+OK\r\n"),
        TOOLA(list_scan_nil_cursor, LIST_ARGS, "SCAN", .cmd = "SCAN",
              .bytes = "*2\r\n$-1\r\n*0\r\n"),
        TOOLA(list_scan_silent, LIST_ARGS, "500 ms", .cmd = "SCAN",
              .silent = 1),
        TOOLA(list_scan_endless, LIST_ARGS, "twice", .cmd = "SCAN",
              .bytes = "*2\r\n$1\r\n7\r\n*0\r\n"),
        cmocka_unit_test(test_list_scan_trickle),
        /* the text of a refusal */
        cmocka_unit_test(test_refusal_texts),
        /* unlock --force: its look at the lock, then its script */
        TOOLA(unlock_exec_junk, UNLOCK_ARGS, NULL, .cmd = "EXEC",
              .bytes = "?junk\r\n"),
        TOOLA(unlock_exec_trickle, UNLOCK_ARGS, "500 ms", .cmd = "EXEC",
              .bytes = "*8\r\n+hash\r\n*0\r\n:-2\r\n$-1\r\n*0\r\n*0\r\n"
                       "*0\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n",
              .drip_ms = 300),
        /* sem-set: a count no script could answer (another after 'set',
         * past DIST_SEM_VALUE_MAX, negative) was printed, exit 0 */
        TOOLA(sem_set_other_count, SEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA", .bytes = "*2\r\n:7\r\n:0\r\n"),
        TOOLA(sem_set_count_huge, SEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA",
              .bytes = "*2\r\n:9223372036854775807\r\n:0\r\n"),
        TOOLA(sem_set_count_negative, SEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA", .bytes = "*2\r\n:-5\r\n:0\r\n"),
        TOOLA(sem_set_refused_add, SEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA", .bytes = "*2\r\n:-1\r\n:0\r\n"),
        TOOLA(sem_set_held_negative, SEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA", .bytes = "*2\r\n:5\r\n:-1\r\n"),
        TOOLA(rsem_set_other_count, RSEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA", .bytes = ":7\r\n"),
        TOOLA(rsem_set_count_huge, RSEMSET_ARGS, "impossible reply",
              .cmd = "EVALSHA", .bytes = ":4294967301\r\n"),
    };
    int rc;

    (void)setup;
    filter_from_env("TEST_LIAR_FILTER");
    if (!(liar = tu_liar_start()))
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    tu_liar_stop(liar);
    return rc;
}
