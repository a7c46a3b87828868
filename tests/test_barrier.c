/*
 * test_barrier: behaviour of dist_barrier_* against a private redis-server:
 * rounds across processes with one serial waiter each, a member killed
 * mid-round, timed waits.
 *
 * As in test_mutex: one server for the group, fresh names per test, forked
 * children report through shared memory and exit codes, and only the main
 * thread asserts.
 */
#define WAITER_MS 1000UL

#define GROUP_PROG     "test_barrier"
#define GROUP_SETTINGS FX_DEFAULTS(WAITER_MS)
#include "grouphelp.h"

#define PARTIES 3
#define ROUNDS  20

struct shared {
    char name[160];
    atomic_int entered[ROUNDS]; /* waits begun in round i */
    atomic_int serial[ROUNDS];  /* DIST_BARRIER_SERIAL_THREAD in round i */
    atomic_int early[ROUNDS];   /* returned before every party entered */
    atomic_int rc[PARTIES];     /* per party: result, -1 until then */
};

static struct shared *shared_new(void)
{
    struct shared *s = shared_mem(sizeof *s);
    int i;

    for (i = 0; i < PARTIES; i++)
        atomic_init(&s->rc[i], -1);
    return s;
}

static int reaped_with(pid_t pid, int code)
{
    int st;

    return waitpid(pid, &st, 0) == pid && child_exit_ok(st, code);
}

/* ROUNDS rounds; 0, or the first failing wait's result. */
static int party(struct shared *s)
{
    dist_barrier_t b;
    struct timespec dl;
    int i, rc = 0;

    if (dist_barrier_init(&b, s->name, PARTIES) != 0)
        return ENOMEM;
    for (i = 0; i < ROUNDS; i++) {
        atomic_fetch_add(&s->entered[i], 1);
        dl = fx_clock_in(CLOCK_MONOTONIC, 30);
        rc = dist_barrier_clockwait(&b, CLOCK_MONOTONIC, &dl);
        if (rc == DIST_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&s->serial[i], 1);
        else if (rc != 0)
            break;
        rc = 0;
        if (atomic_load(&s->entered[i]) < PARTIES)
            atomic_fetch_add(&s->early[i], 1);
    }
    dist_barrier_destroy(&b);
    return rc;
}

static void party_child(void *arg)
{
    struct shared *s = arg;
    int rc = party(s);

    dist_shutdown();
    _exit(rc == 0 ? 0 : 1);
}

static void test_rounds(void **state)
{
    struct shared *s = shared_new();
    pid_t pids[PARTIES - 1];
    int i;

    (void)state;
    NAME(s->name, "b");
    for (i = 0; i < PARTIES - 1; i++)
        pids[i] = fork_started(party_child, s);
    assert_int_equal(party(s), 0);
    for (i = 0; i < PARTIES - 1; i++)
        assert_true(reaped_with(pids[i], 0));
    for (i = 0; i < ROUNDS; i++) {
        assert_int_equal(atomic_load(&s->entered[i]), PARTIES);
        assert_int_equal(atomic_load(&s->serial[i]), 1);
        assert_int_equal(atomic_load(&s->early[i]), 0);
    }
    munmap(s, sizeof *s);
}

/* One round with everyone, then one member is killed before it arrives
 * again: the others get EOWNERDEAD within its window, not a hang. */
struct member {
    struct shared *s;
    int stay_behind; /* after the first round, only sleep */
};

static void member_child(void *arg)
{
    struct member *m = arg;
    dist_barrier_t b;
    struct timespec dl;
    int rc;

    if (dist_barrier_init(&b, m->s->name, PARTIES) != 0)
        _exit(3);
    rc = dist_barrier_wait(&b);
    if (rc != 0 && rc != DIST_BARRIER_SERIAL_THREAD)
        _exit(1);
    if (m->stay_behind)
        for (;;)
            pause();
    dl = realtime_in(30);
    rc = dist_barrier_clockwait(&b, CLOCK_REALTIME, &dl);
    atomic_store(&m->s->rc[1], rc);
    dist_shutdown();
    _exit(rc == EOWNERDEAD ? 0 : 1);
}

static void test_dead_member_breaks_round(void **state)
{
    struct shared *s = shared_new();
    struct member victim = { s, 1 }, other = { s, 0 };
    struct timespec dl;
    dist_barrier_t b;
    pid_t vpid, opid;
    struct fx_call c;
    int rc;

    (void)state;
    NAME(s->name, "b");
    assert_int_equal(dist_barrier_init(&b, s->name, PARTIES), 0);
    vpid = fork_started(member_child, &victim);
    opid = fork_started(member_child, &other);
    rc = dist_barrier_wait(&b);
    assert_true(rc == 0 || rc == DIST_BARRIER_SERIAL_THREAD);
    kill(vpid, SIGKILL);
    waitpid(vpid, NULL, 0);
    /* timed, so that a broken implementation fails rather than hangs */
    dl = realtime_in(2.0 * WAITER_MS / 1000.0 + slack(3.0) + 5.0);
    FX_CALL(&c, dist_barrier_clockwait(&b, CLOCK_REALTIME, &dl));
    assert_int_equal(c.rc, EOWNERDEAD);
    /* its window ends, then the next look of a waiter (a window at most) */
    assert_dbl_range(c.el, 0.0, 2.0 * WAITER_MS / 1000.0 + slack(3.0));
    assert_true(reaped_with(opid, 0));
    assert_int_equal(atomic_load(&s->rc[1]), EOWNERDEAD);
    assert_int_equal(dist_barrier_destroy(&b), 0);
    munmap(s, sizeof *s);
}

static void test_timed_wait_leaves_round(void **state)
{
    char name[160], key[200];
    dist_barrier_t b, other;
    struct timespec dl;
    struct fx_call c;

    (void)state;
    NAME(name, "b");
    snprintf(key, sizeof key, "distlock_barrier:{%s}", name);
    assert_int_equal(dist_barrier_init(&b, name, 2), 0);
    dl = realtime_in(0.3);
    FX_CALL(&c, dist_barrier_clockwait(&b, CLOCK_REALTIME, &dl));
    assert_int_equal(c.rc, ETIMEDOUT);
    assert_dbl_range(c.el, 0.3, 0.3 + slack(2.0));
    /* it no longer counts: the round still needs two */
    assert_int_equal(tu_cmd_int(&r, "HGET", key, "arrived", NULL), 0);
    /* another count for the same name is refused */
    assert_int_equal(dist_barrier_init(&other, name, 3), 0);
    assert_int_equal(dist_barrier_wait(&other), EINVAL);
    assert_int_equal(dist_barrier_destroy(&other), 0);
    assert_int_equal(dist_barrier_init(&other, name, 0), EINVAL);
    assert_int_equal(dist_barrier_destroy(&b), 0);
}

/* A barrier of one: every wait is the serial one. */
static void test_barrier_of_one(void **state)
{
    char name[160];
    dist_barrier_t b;
    int i;

    (void)state;
    NAME(name, "b");
    assert_int_equal(dist_barrier_init(&b, name, 1), 0);
    for (i = 0; i < 3; i++)
        assert_int_equal(dist_barrier_wait(&b), DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(dist_barrier_destroy(&b), 0);
}

/* Destroy while a thread of this process waits in the round: EBUSY, and
 * the barrier goes on working; once the round is over it goes. */
static int wait_thread(void *arg)
{
    return dist_barrier_wait(arg);
}

static void test_destroy_while_waiting(void **state)
{
    char name[160], key[200];
    dist_barrier_t b;
    struct fx_thread t;
    int i, rc;

    (void)state;
    NAME(name, "b");
    snprintf(key, sizeof key, "distlock_barrier:{%s}", name);
    assert_int_equal(dist_barrier_init(&b, name, 2), 0);
    fx_thread_start(&t, wait_thread, &b);
    /* the thread counts as waiting before it arrives in Redis */
    for (i = 0; i < 3000 && tu_cmd_int(&r, "HGET", key, "arrived", NULL) != 1;
         i++)
        tu_sleep_ms(10);
    assert_int_equal(tu_cmd_int(&r, "HGET", key, "arrived", NULL), 1);
    assert_int_equal(dist_barrier_destroy(&b), EBUSY);
    assert_non_null(strstr(dist_last_error(), "has waiters"));
    rc = dist_barrier_wait(&b);
    assert_true(rc == 0 || rc == DIST_BARRIER_SERIAL_THREAD);
    /* exactly one of the two is the serial one */
    assert_int_equal(fx_thread_join(&t) + rc, DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(dist_barrier_destroy(&b), 0);
}

/* A barrier object carried across fork(): the child is a member of its
 * own (the parent stays one), and destroying it in the child leaves the
 * parent's membership alone. */
static void fork_child_body(void *arg)
{
    dist_barrier_t *b = arg;
    int rc = dist_barrier_wait(b);

    if (rc == DIST_BARRIER_SERIAL_THREAD)
        rc = dist_barrier_destroy(b);
    dist_shutdown();
    _exit(rc == 0 ? 0 : 1);
}

static void test_fork_child_member(void **state)
{
    char name[160], key[200];
    dist_barrier_t b;
    pid_t pid;
    int st;

    (void)state;
    NAME(name, "b");
    snprintf(key, sizeof key, "distlock_barrier_members:{%s}", name);
    assert_int_equal(dist_barrier_init(&b, name, 1), 0);
    assert_int_equal(dist_barrier_wait(&b), DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(tu_cmd_int(&r, "ZCARD", key, NULL), 1);
    pid = fork_started(fork_child_body, &b);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(child_exit_ok(st, 0));
    /* the child joined and left; the parent is still the one member */
    assert_int_equal(tu_cmd_int(&r, "ZCARD", key, NULL), 1);
    assert_int_equal(dist_barrier_wait(&b), DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(dist_barrier_destroy(&b), 0);
    assert_int_equal(tu_cmd_int(&r, "ZCARD", key, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_barrier_of_one),           T(test_timed_wait_leaves_round),
        T(test_destroy_while_waiting),    T(test_rounds),
        T(test_dead_member_breaks_round), T(test_fork_child_member),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_BARRIER_FILTER");
}
