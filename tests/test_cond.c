/*
 * test_cond: behaviour of dist_cond_* against a private redis-server:
 * wake-ups across processes, signal against broadcast, waiters that die,
 * timed waits.
 *
 * As in test_mutex: one server for the group, fresh names per test, and
 * forked children report through shared memory and exit codes; only the
 * main thread asserts.  State the processes share (a queue's length, whose
 * turn it is) lives in shared memory and is touched only while holding the
 * distributed mutex, which is what the test is about.
 */
/* A short waiter window, so that a dead waiter stops counting soon. */
#define WAITER_MS 1000UL

#define GROUP_PROG     "test_cond"
#define GROUP_SETTINGS FX_DEFAULTS(WAITER_MS)
#include "grouphelp.h"

/* Names of a mutex and of conditions that share its cluster slot (the
 * rule distlock.h documents): the conditions carry the mutex's name as
 * their hash tag. */
struct names {
    char m[160];
    char c[2][200];
};

static void names_for(struct names *n, const char *test)
{
    test_lock_name(n->m, sizeof n->m, "test_cond", test, "m");
    snprintf(n->c[0], sizeof n->c[0], "{%s}:a", n->m);
    snprintf(n->c[1], sizeof n->c[1], "{%s}:b", n->m);
}

/* A test's mutex and its first condition, named after it (a: the
 * condition's attributes, may be NULL). */
struct pair {
    struct names n;
    dist_mutex_t m;
    dist_cond_t c;
};

static void open_pair(struct pair *o, const char *test,
                      const dist_condattr_t *a)
{
    names_for(&o->n, test);
    assert_int_equal(dist_mutex_init(&o->m, o->n.m, NULL), 0);
    assert_int_equal(dist_cond_init(&o->c, o->n.c[0], a), 0);
}

static void close_pair(struct pair *o)
{
    assert_int_equal(dist_cond_destroy(&o->c), 0);
    assert_int_equal(dist_mutex_destroy(&o->m), 0);
}

/* The ZSET of c's waiters. */
static void waiters_key(char *buf, size_t len, const char *c)
{
    snprintf(buf, len, "distlock_cond_waiters:%s", c);
}

/* What processes share: a few counters, and per child its result. */
struct shared {
    atomic_int items;     /* producer/consumer: queue length */
    atomic_int turn;      /* ping-pong: whose turn */
    atomic_int woken;     /* waiters that returned from a wait */
    atomic_int rc[8];     /* per child: its result, -1 until then */
    atomic_long slow;     /* waits that took longer than a window */
    atomic_long waits;    /* waits that ended with the turn */
    atomic_long spurious; /* waits that returned without the turn */
};

static struct shared *shared_new(void)
{
    struct shared *s = shared_mem(sizeof *s);
    int i;

    for (i = 0; i < 8; i++)
        atomic_init(&s->rc[i], -1);
    return s;
}

static void shared_free(struct shared *s)
{
    munmap(s, sizeof *s);
}

/* Waits for pid; whether it exited with code. */
static int reaped_with(pid_t pid, int code)
{
    int st;

    return waitpid(pid, &st, 0) == pid && child_exit_ok(st, code);
}

/* Waits until cond() holds or secs pass; whether it held. */
static int eventually(int (*cond)(void *), void *arg, double secs)
{
    double end = tu_now() + secs;

    while (!cond(arg)) {
        if (tu_now() >= end)
            return 0;
        tu_sleep_ms(10);
    }
    return 1;
}

/* ---- producer and consumer --------------------------------------------- */

#define PC_ITEMS 200
#define PC_CAP   2

struct pc {
    struct names n;
    struct shared *s;
};

/* Takes PC_ITEMS items off the queue; the exit code says how it went. */
static void consumer(void *arg)
{
    struct pc *pc = arg;
    dist_mutex_t m;
    dist_cond_t nonempty, nonfull;
    struct timespec dl;
    int i, rc = 0;

    if (dist_mutex_init(&m, pc->n.m, NULL) ||
        dist_cond_init(&nonempty, pc->n.c[0], NULL) ||
        dist_cond_init(&nonfull, pc->n.c[1], NULL))
        _exit(3);
    for (i = 0; i < PC_ITEMS && rc == 0; i++) {
        if ((rc = dist_mutex_lock(&m)) != 0)
            break;
        dl = realtime_in(30);
        while (rc == 0 && atomic_load(&pc->s->items) == 0)
            rc = dist_cond_timedwait(&nonempty, &m, &dl);
        if (rc == 0) {
            atomic_fetch_sub(&pc->s->items, 1);
            rc = dist_cond_signal(&nonfull);
        }
        if (dist_mutex_unlock(&m) != 0 && rc == 0)
            rc = EIO;
    }
    atomic_store(&pc->s->rc[0], rc);
    dist_shutdown();
    _exit(rc == 0 ? 0 : 1);
}

static void test_producer_consumer(void **state)
{
    struct pc pc;
    dist_mutex_t m;
    dist_cond_t nonempty, nonfull;
    struct timespec dl;
    int i, rc = 0;
    pid_t pid;

    (void)state;
    names_for(&pc.n, __func__);
    pc.s = shared_new();
    assert_int_equal(dist_mutex_init(&m, pc.n.m, NULL), 0);
    assert_int_equal(dist_cond_init(&nonempty, pc.n.c[0], NULL), 0);
    assert_int_equal(dist_cond_init(&nonfull, pc.n.c[1], NULL), 0);
    pid = fork_started(consumer, &pc);
    for (i = 0; i < PC_ITEMS && rc == 0; i++) {
        assert_int_equal(dist_mutex_lock(&m), 0);
        dl = realtime_in(30);
        while (rc == 0 && atomic_load(&pc.s->items) >= PC_CAP)
            rc = dist_cond_timedwait(&nonfull, &m, &dl);
        /* the bound holds while the mutex is held */
        assert_true(atomic_load(&pc.s->items) <= PC_CAP);
        if (rc == 0) {
            atomic_fetch_add(&pc.s->items, 1);
            rc = dist_cond_signal(&nonempty);
        }
        assert_int_equal(dist_mutex_unlock(&m), 0);
    }
    assert_int_equal(rc, 0);
    assert_true(reaped_with(pid, 0));
    assert_int_equal(atomic_load(&pc.s->rc[0]), 0);
    assert_int_equal(atomic_load(&pc.s->items), 0);
    assert_int_equal(dist_cond_destroy(&nonempty), 0);
    assert_int_equal(dist_cond_destroy(&nonfull), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    shared_free(pc.s);
}

/* ---- the lost wake-up hunt ------------------------------------------------ */

/* Rounds of the hunt: 10,000 (the sanitizers hardly slow it: about 0.5 ms
 * a hand-off), 500 under valgrind, or $TEST_COND_ROUNDS. */
static int hunt_rounds(void)
{
    const char *env = getenv("TEST_COND_ROUNDS");
    int slow = on_valgrind();

    if (env && atoi(env) > 0)
        return atoi(env);
    return slow ? 500 : 10000;
}

struct hunt {
    struct names n;
    struct shared *s;
    int rounds;
};

/* Plays one side of the ping-pong: waits for its turn on its condition,
 * hands the turn over and signals the other's.  Waits are timed with a
 * deadline far past any hand-off, so a lost wake-up shows as ETIMEDOUT
 * rather than as a hang.  0, or the failing call's result. */
static int play(struct hunt *h, int me, double *lat)
{
    dist_mutex_t m;
    dist_cond_t mine, theirs;
    struct timespec dl;
    double t0, worst = 0;
    int i, rc = 0;

    if (dist_mutex_init(&m, h->n.m, NULL) ||
        dist_cond_init(&mine, h->n.c[me], NULL) ||
        dist_cond_init(&theirs, h->n.c[1 - me], NULL))
        return ENOMEM;
    for (i = 0; i < h->rounds && rc == 0; i++) {
        if ((rc = dist_mutex_lock(&m)) != 0)
            break;
        t0 = tu_now();
        dl = realtime_in(20);
        if (atomic_load(&h->s->turn) != me)
            atomic_fetch_add(&h->s->waits, 1);
        while (rc == 0 && atomic_load(&h->s->turn) != me) {
            rc = dist_cond_timedwait(&mine, &m, &dl);
            /* only the other side signals this condition, and only after
             * handing the turn over */
            if (rc == 0 && atomic_load(&h->s->turn) != me)
                atomic_fetch_add(&h->s->spurious, 1);
        }
        if (tu_now() - t0 > WAITER_MS / 1000.0)
            atomic_fetch_add(&h->s->slow, 1);
        if (lat && tu_now() - t0 > worst)
            worst = tu_now() - t0;
        if (rc == 0) {
            atomic_store(&h->s->turn, 1 - me);
            rc = dist_cond_signal(&theirs);
        }
        if (dist_mutex_unlock(&m) != 0 && rc == 0)
            rc = EIO;
    }
    if (lat)
        *lat = worst;
    dist_cond_destroy(&mine);
    dist_cond_destroy(&theirs);
    dist_mutex_destroy(&m);
    return rc;
}

static void hunt_child(void *arg)
{
    struct hunt *h = arg;
    int rc = play(h, 1, NULL);

    atomic_store(&h->s->rc[1], rc);
    dist_shutdown();
    _exit(rc == 0 ? 0 : 1);
}

static void test_lost_wakeup_hunt(void **state)
{
    struct hunt h;
    double t0, el, worst = 0;
    int rc;
    pid_t pid;

    (void)state;
    names_for(&h.n, __func__);
    h.s = shared_new();
    h.rounds = hunt_rounds();
    atomic_store(&h.s->turn, 0);
    t0 = tu_now();
    pid = fork_started(hunt_child, &h);
    rc = play(&h, 0, &worst);
    el = tu_now() - t0;
    if (rc != 0)
        kill(pid, SIGKILL);
    assert_int_equal(rc, 0);
    assert_true(reaped_with(pid, 0));
    assert_int_equal(atomic_load(&h.s->rc[1]), 0);
    /* the last turn was handed to the child */
    assert_int_equal(atomic_load(&h.s->turn), 0);
    print_message(
        "hunt: %d rounds (%d hand-offs) in %.1f s, %.3f ms per "
        "hand-off; longest wait %.3f s; %ld waits longer than a "
        "window (a missed message); %ld hand-offs went through a wait, %ld "
        "spurious wake-ups\n",
        h.rounds, 2 * h.rounds, el, el * 1000.0 / (2 * h.rounds), worst,
        atomic_load(&h.s->slow), atomic_load(&h.s->waits),
        atomic_load(&h.s->spurious));
    /* the hunt is only one if the processes did wait for each other */
    assert_true(atomic_load(&h.s->waits) >= h.rounds / 2);
    shared_free(h.s);
}

/* ---- signal wakes one, broadcast all -------------------------------------- */

#define NWAITERS 3

struct waiter {
    struct names n;
    struct shared *s;
    int idx;
    double secs; /* the wait's deadline from its start */
};

/* Waits once on the first condition; notes its result and that it woke. */
static void waiter_body(void *arg)
{
    struct waiter *w = arg;
    dist_mutex_t m;
    dist_cond_t c;
    struct timespec dl;
    int rc;

    if (dist_mutex_init(&m, w->n.m, NULL) ||
        dist_cond_init(&c, w->n.c[0], NULL))
        _exit(3);
    if ((rc = dist_mutex_lock(&m)) == 0) {
        dl = realtime_in(w->secs);
        rc = dist_cond_timedwait(&c, &m, &dl);
        atomic_fetch_add(&w->s->woken, 1);
        if (dist_mutex_unlock(&m) != 0 && rc == 0)
            rc = EIO;
    }
    atomic_store(&w->s->rc[w->idx], rc);
    dist_shutdown();
    _exit(rc == 0 ? 0 : 1);
}

struct zcard {
    const char *key;
    long long want;
};

static int has_waiters(void *arg)
{
    struct zcard *z = arg;

    return tu_cmd_int(&r, "ZCARD", z->key, NULL) == z->want;
}

static int woke_at_least(void *arg)
{
    struct waiter *w = arg;

    return atomic_load(&w->s->woken) >= w->idx;
}

/* Starts n waiters one after the other, each registered before the next
 * starts (so their order is known). */
static void start_waiters(struct waiter *w, pid_t *pids, int n,
                          const struct names *nm, struct shared *s,
                          double secs)
{
    char key[256];
    struct zcard z = { key, 0 };
    int i;

    waiters_key(key, sizeof key, nm->c[0]);
    for (i = 0; i < n; i++) {
        w[i].n = *nm;
        w[i].s = s;
        w[i].idx = i;
        w[i].secs = secs;
        pids[i] = fork_started(waiter_body, &w[i]);
        z.want = i + 1;
        assert_true(eventually(has_waiters, &z, slack(10)));
    }
}

static void test_signal_wakes_one_broadcast_all(void **state)
{
    struct waiter w[NWAITERS];
    struct waiter probe;
    pid_t pids[NWAITERS];
    struct names n;
    struct shared *s = shared_new();
    dist_cond_t c;
    int i;

    (void)state;
    names_for(&n, __func__);
    start_waiters(w, pids, NWAITERS, &n, s, 60);
    assert_int_equal(dist_cond_init(&c, n.c[0], NULL), 0);
    assert_int_equal(dist_cond_signal(&c), 0);
    probe.s = s;
    probe.idx = 1;
    assert_true(eventually(woke_at_least, &probe, slack(10)));
    /* the oldest went; nobody else in a while (a wait would take 60 s) */
    assert_true(reaped_with(pids[0], 0));
    tu_sleep_ms(500);
    assert_int_equal(atomic_load(&s->woken), 1);
    assert_int_equal(atomic_load(&s->rc[0]), 0);
    assert_int_equal(dist_cond_broadcast(&c), 0);
    for (i = 1; i < NWAITERS; i++) {
        assert_true(reaped_with(pids[i], 0));
        assert_int_equal(atomic_load(&s->rc[i]), 0);
    }
    assert_int_equal(atomic_load(&s->woken), NWAITERS);
    /* nobody is left registered */
    {
        char key[256];
        waiters_key(key, sizeof key, n.c[0]);
        assert_int_equal(tu_cmd_int(&r, "EXISTS", key, NULL), 0);
    }
    assert_int_equal(dist_cond_destroy(&c), 0);
    shared_free(s);
}

/* ---- a waiter that dies ------------------------------------------------------ */

/* Two waiters; the older one is killed.  signal_late: the signal comes
 * after the dead one's window ended, so signal must skip it: the live one
 * wakes at once, well before its next look a window after its last (which
 * would also find the signal if the dead one had taken it).  Otherwise the
 * signal comes at once, while the dead one still counts as live, so the
 * mark it was given and never took must pass on to the other, at the live
 * one's next look after the dead one's window ended. */
static void killed_waiter(int signal_late)
{
    const unsigned long win = signal_late ? 3000 : WAITER_MS;
    struct waiter w[2];
    pid_t pids[2];
    struct names n;
    struct shared *s = shared_new();
    dist_cond_t c;
    double t0, el;

    names_for(&n, signal_late ? "killed_waiter_late" : "killed_waiter_now");
    fx_dirty = 1;
    assert_int_equal(dist_set_waiter_ms(win), 0);
    start_waiters(w, pids, 2, &n, s, 60);
    kill(pids[0], SIGKILL);
    waitpid(pids[0], NULL, 0);
    if (signal_late)
        tu_sleep_ms((long)(win * 11 / 10));
    assert_int_equal(dist_cond_init(&c, n.c[0], NULL), 0);
    t0 = tu_now();
    assert_int_equal(dist_cond_signal(&c), 0);
    assert_true(reaped_with(pids[1], 0));
    el = tu_now() - t0;
    assert_int_equal(atomic_load(&s->rc[1]), 0);
    assert_int_equal(atomic_load(&s->woken), 1);
    if (signal_late)
        assert_dbl_range(el, 0.0, 0.6 * win / 1000.0);
    else
        assert_dbl_range(el, 0.0, 2.0 * win / 1000.0 + slack(3.0));
    assert_int_equal(dist_cond_destroy(&c), 0);
    shared_free(s);
    fx_restore_defaults(NULL);
}

static void test_killed_waiter_skipped(void **state)
{
    (void)state;
    killed_waiter(1);
}

static void test_killed_waiter_passes_signal_on(void **state)
{
    (void)state;
    killed_waiter(0);
}

/* A signal with no live waiter does nothing: a later waiter waits. */
static void test_signal_without_waiters_is_dropped(void **state)
{
    struct pair o;
    struct timespec dl;
    struct fx_call t;

    (void)state;
    open_pair(&o, __func__, NULL);
    assert_int_equal(dist_cond_signal(&o.c), 0);
    assert_int_equal(dist_cond_broadcast(&o.c), 0);
    assert_int_equal(dist_mutex_lock(&o.m), 0);
    dl = realtime_in(0.5);
    FX_CALL(&t, dist_cond_timedwait(&o.c, &o.m, &dl));
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_int_equal(dist_mutex_unlock(&o.m), 0);
    close_pair(&o);
}

/* ---- destroy after a broadcast ------------------------------------------------- */

#define DW_THREADS 4

struct dwaiters {
    dist_mutex_t *m;
    dist_cond_t *c;
    atomic_int go; /* the predicate, under m */
    atomic_int rc[DW_THREADS];
    atomic_int unlock_rc[DW_THREADS];
    atomic_int idx;
};

/* Waits under m until go, then lets m go: that unlock succeeds only
 * when the wait came back holding m. */
static void *dwaiter(void *arg)
{
    struct dwaiters *d = arg;
    int i = atomic_fetch_add(&d->idx, 1), rc;

    if ((rc = dist_mutex_lock(d->m)) == 0) {
        while (rc == 0 && !atomic_load(&d->go))
            rc = dist_cond_wait(d->c, d->m);
        atomic_store(&d->unlock_rc[i], dist_mutex_unlock(d->m));
    }
    atomic_store(&d->rc[i], rc);
    return NULL;
}

/* Waiters on o's condition, none started, none returned yet. */
static void dwaiters_init(struct dwaiters *d, struct pair *o)
{
    memset(d, 0, sizeof *d);
    d->m = &o->m;
    d->c = &o->c;
    for (int i = 0; i < DW_THREADS; i++) {
        atomic_init(&d->rc[i], -1);
        atomic_init(&d->unlock_rc[i], -1);
    }
}

/* POSIX: a condition may be destroyed as soon as no thread is blocked on
 * it, right after a broadcast (its own example does that; LTP's
 * pthread_cond_destroy/2-1); threads woken and still taking the mutex
 * back do not count.  A destroy while they are really blocked stays
 * EBUSY, and the woken waiters return as they should, mutex held. */
static void test_destroy_right_after_broadcast(void **state)
{
    struct pair o;
    struct dwaiters d;
    pthread_t th[DW_THREADS];
    char key[256];
    int i;

    (void)state;
    open_pair(&o, __func__, NULL);
    waiters_key(key, sizeof key, o.n.c[0]);
    dwaiters_init(&d, &o);
    for (i = 0; i < DW_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, dwaiter, &d), 0);
    {
        double end = tu_now() + slack(10.0);
        while (tu_cmd_int(&r, "ZCARD", key, NULL) != DW_THREADS &&
               tu_now() < end)
            tu_sleep_ms(10);
    }
    assert_int_equal(tu_cmd_int(&r, "ZCARD", key, NULL), DW_THREADS);
    /* really blocked: not yet */
    assert_int_equal(dist_cond_destroy(&o.c), EBUSY);
    assert_non_null(strstr(dist_last_error(), "has waiters"));

    assert_int_equal(dist_mutex_lock(&o.m), 0);
    atomic_store(&d.go, 1);
    assert_int_equal(dist_cond_broadcast(&o.c), 0);
    assert_int_equal(dist_mutex_unlock(&o.m), 0);
    assert_int_equal(dist_cond_destroy(&o.c), 0);

    for (i = 0; i < DW_THREADS; i++) /* thread i is not waiter i */
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (i = 0; i < DW_THREADS; i++) {
        assert_int_equal(atomic_load(&d.rc[i]), 0);
        assert_int_equal(atomic_load(&d.unlock_rc[i]), 0);
    }
    assert_int_equal(tu_cmd_int(&r, "EXISTS", key, NULL), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", o.n.m, NULL), 0);
    /* destroyed: the object is gone (a zero-filled one without a name) */
    assert_int_equal(dist_cond_signal(&o.c), EINVAL);
    assert_int_equal(dist_mutex_destroy(&o.m), 0);
}

/* The child of a fork() while a thread of the parent waits: that wait is
 * the parent's, so a thread of the child waits on its copy of the
 * condition and the child destroys it (0); the parent's waiter still
 * counts in the parent (EBUSY) until a broadcast wakes it. */
struct forked_cond {
    dist_mutex_t *m;
    dist_cond_t *c;
};

static void *brief_wait(void *arg)
{
    struct forked_cond *f = arg;
    struct timespec dl = realtime_in(0.2);
    int rc = dist_mutex_lock(f->m);

    if (rc == 0) {
        rc = dist_cond_timedwait(f->c, f->m, &dl);
        if (dist_mutex_unlock(f->m) != 0)
            rc = EIO;
    }
    return (void *)(intptr_t)rc;
}

static void child_of_waiting_parent(void *arg)
{
    struct forked_cond *f = arg;
    pthread_t th;
    void *rc = NULL;

    if (pthread_create(&th, NULL, brief_wait, f) != 0 ||
        pthread_join(th, &rc) != 0)
        _exit(3);
    if ((intptr_t)rc != ETIMEDOUT)
        _exit(4);
    if (dist_cond_destroy(f->c) != 0)
        _exit(5);
    dist_shutdown();
    _exit(0);
}

static void test_fork_child_ignores_parents_waiters(void **state)
{
    struct pair o;
    struct dwaiters d;
    struct forked_cond f;
    pthread_t th;
    char key[256];
    struct zcard z = { key, 1 };

    (void)state;
    open_pair(&o, __func__, NULL);
    waiters_key(key, sizeof key, o.n.c[0]);
    dwaiters_init(&d, &o);
    assert_int_equal(pthread_create(&th, NULL, dwaiter, &d), 0);
    assert_true(eventually(has_waiters, &z, slack(10)));

    f.m = &o.m;
    f.c = &o.c;
    assert_true(reaped_with(fork_started(child_of_waiting_parent, &f), 0));

    assert_int_equal(dist_cond_destroy(&o.c), EBUSY);
    assert_int_equal(dist_mutex_lock(&o.m), 0);
    atomic_store(&d.go, 1);
    assert_int_equal(dist_cond_broadcast(&o.c), 0);
    assert_int_equal(dist_mutex_unlock(&o.m), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(atomic_load(&d.rc[0]), 0);
    assert_int_equal(atomic_load(&d.unlock_rc[0]), 0);
    close_pair(&o);
}

/* ---- timed waits ------------------------------------------------------------- */

static void test_timedwait_times_out_holding_mutex(void **state)
{
    struct pair o;
    dist_condattr_t a;
    struct timespec dl;
    struct fx_call t;
    uint64_t tok;
    char key[256];

    (void)state;
    assert_int_equal(dist_condattr_init(&a), 0);
    assert_int_equal(dist_condattr_setclock(&a, CLOCK_MONOTONIC), 0);
    open_pair(&o, __func__, &a);
    assert_int_equal(dist_mutex_lock(&o.m), 0);

    dl = fx_clock_in(CLOCK_MONOTONIC, 0.5);
    FX_CALL(&t, dist_cond_timedwait(&o.c, &o.m, &dl));
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_dbl_range(t.el, 0.5, 0.5 + slack(2.0));
    assert_int_equal(dist_mutex_token(&o.m, &tok), 0);
    assert_held_once(&r, o.n.m, NULL);
    waiters_key(key, sizeof key, o.n.c[0]);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", key, NULL), 0);

    /* a deadline already passed: the same, at once */
    dl = fx_clock_in(CLOCK_REALTIME, -1);
    FX_CALL(&t, dist_cond_clockwait(&o.c, &o.m, CLOCK_REALTIME, &dl));
    assert_int_equal(t.rc, ETIMEDOUT);
    assert_dbl_range(t.el, 0.0, slack(2.0));
    assert_held_once(&r, o.n.m, NULL);

    /* bad arguments change nothing */
    dl.tv_nsec = 1000000000L;
    assert_int_equal(dist_cond_timedwait(&o.c, &o.m, &dl), EINVAL);
    assert_int_equal(
        dist_cond_clockwait(&o.c, &o.m, CLOCK_PROCESS_CPUTIME_ID, &dl),
        EINVAL);
    assert_held_once(&r, o.n.m, NULL);
    assert_int_equal(dist_mutex_unlock(&o.m), 0);
    close_pair(&o);
}

/* A wait needs the mutex held exactly once. */
static void test_wait_needs_mutex_held_once(void **state)
{
    struct pair o;
    struct timespec dl = realtime_in(5);

    (void)state;
    open_pair(&o, __func__, NULL);
    assert_int_equal(dist_cond_wait(&o.c, &o.m), EPERM);
    assert_int_equal(dist_mutex_lock(&o.m), 0);
    assert_int_equal(dist_mutex_lock(&o.m), 0);
    assert_int_equal(dist_cond_timedwait(&o.c, &o.m, &dl), EINVAL);
    assert_int_equal(dist_mutex_unlock(&o.m), 0);
    assert_int_equal(dist_mutex_unlock(&o.m), 0);
    close_pair(&o);
}

/* A wait on a mutex whose hold is gone in Redis (forced, or its lease ran
 * out while the process could not renew it): EPERM, the lost handler
 * hears of it once, and the mutex is not held any more (the torture run
 * saw the handler never told). */
static void test_wait_on_lost_hold(void **state)
{
    struct pair o;
    struct timespec dl;
    int rc, calls, unlock_rc;

    (void)state;
    open_pair(&o, __func__, NULL);
    fx_dirty = 1;
    fx_lost_reset();
    dist_set_lost_handler(fx_on_lost, NULL);
    assert_int_equal(dist_mutex_lock(&o.m), 0);
    assert_int_equal(tu_cmd_int(&r, "DEL", o.n.m, NULL), 1);
    dl = realtime_in(5);
    rc = dist_cond_timedwait(&o.c, &o.m, &dl);
    calls = fx_lost_calls(o.n.m);
    unlock_rc = dist_mutex_unlock(&o.m);
    dist_set_lost_handler(NULL, NULL);
    fx_dirty = 0;
    assert_int_equal(rc, EPERM);
    assert_int_equal(calls, 1);
    assert_int_equal(unlock_rc, EPERM);
    assert_int_equal(fx_lost_calls(o.n.m), 1);
    close_pair(&o);
}

/* A timed wait, as one call for fx_held_up_call. */
struct timed_wait {
    dist_cond_t *c;
    dist_mutex_t *m;
    const struct timespec *dl;
};

static int timed_wait_of(void *arg)
{
    struct timed_wait *w = arg;

    return dist_cond_timedwait(w->c, w->m, w->dl);
}

/* A wait on a mutex whose hold the renewal thread found lost but has not
 * reported yet (its report waits behind another one's handler): EPERM,
 * and the handler has heard of it when the wait returns, once.  The
 * torture run saw a wait say EPERM and the report come seconds later, the
 * renewal thread's other calls of the round in between. */
static void test_wait_on_hold_found_lost(void **state)
{
    struct names n;
    char other[200];
    dist_mutex_t m, m2;
    dist_cond_t c;
    struct timespec dl = realtime_in(5);
    struct timed_wait w = { &c, &m, &dl };
    struct fx_held_up_call call;
    int unlock2_rc, unlock_rc;

    (void)state;
    names_for(&n, __func__);
    snprintf(other, sizeof other, "%s:2", n.m);
    fx_watch_held_up();
    assert_int_equal(dist_mutex_init(&m, n.m, NULL), 0);
    assert_int_equal(dist_mutex_init(&m2, other, NULL), 0);
    assert_int_equal(dist_cond_init(&c, n.c[0], NULL), 0);
    /* m2 is renewed, and reported, first: a round goes in order of the
     * entries' due times (each a period after its lock), so m2 is taken a
     * few ms before m */
    assert_int_equal(dist_mutex_lock(&m2), 0);
    tu_sleep_ms(5);
    assert_int_equal(dist_mutex_lock(&m), 0);
    /* both gone at once: one renewal round finds them both */
    assert_int_equal(tu_cmd_int(&r, "DEL", n.m, other, NULL), 2);
    fx_held_up_call(&call, timed_wait_of, &w, n.m);
    unlock2_rc = dist_mutex_unlock(&m2);
    unlock_rc = dist_mutex_unlock(&m);
    dist_set_lost_handler(NULL, NULL);
    fx_held_up_check(&call, other, "wait", "mutex");
    assert_int_equal(unlock2_rc, EPERM);
    assert_int_equal(unlock_rc, EPERM); /* not held any more */
    assert_int_equal(fx_lost_calls(n.m), 1);
    assert_int_equal(fx_lost_calls(other), 1);
    assert_int_equal(dist_cond_destroy(&c), 0);
    assert_int_equal(dist_mutex_destroy(&m2), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* Conditions in shared memory: one made before a fork, one the parent
 * made after it. */
struct made_apart {
    dist_cond_t before, after;
    atomic_int made; /* the parent made "after" */
    atomic_int rc_before, rc_after;
    char why[512]; /* the child's error for "after" */
};

static void child_of_maker(void *arg)
{
    struct made_apart *a = arg;
    double end = tu_now() + 10.0;

    while (!atomic_load(&a->made) && tu_now() < end)
        tu_sleep_ms(10);
    atomic_store(&a->rc_before, dist_cond_signal(&a->before));
    atomic_store(&a->rc_after, dist_cond_signal(&a->after));
    snprintf(a->why, sizeof a->why, "%s", dist_last_error());
    _exit(0);
}

/* An object another process initialised in shared memory after the fork
 * (Open POSIX pthread_cond_destroy/2-1 in API mode: the parent makes its
 * condition again between the passes) is EINVAL that says so: it points
 * into the other process's heap, and what this one found there was
 * garbage, nothing, or its own old object (a wait on another name: a
 * hang).  One made before the fork is the child's too. */
static void test_cond_made_by_another_process(void **state)
{
    struct names n;
    struct made_apart *a;
    pid_t pid;

    (void)state;
    names_for(&n, __func__);
    a = mmap(NULL, sizeof *a, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(a != MAP_FAILED);
    memset(a, 0, sizeof *a);
    atomic_init(&a->rc_before, -1);
    atomic_init(&a->rc_after, -1);
    assert_int_equal(dist_cond_init(&a->before, n.c[0], NULL), 0);
    pid = fork_started(child_of_maker, a);
    assert_int_equal(dist_cond_init(&a->after, n.c[1], NULL), 0);
    atomic_store(&a->made, 1);
    assert_true(reaped_with(pid, 0));
    assert_int_equal(atomic_load(&a->rc_before), 0);
    assert_int_equal(atomic_load(&a->rc_after), EINVAL);
    if (!strstr(a->why, "initialised by another process"))
        fail_msg("the child's error does not say who made the condition: "
                 "%s",
                 a->why);
    assert_int_equal(dist_cond_destroy(&a->after), 0);
    assert_int_equal(dist_cond_destroy(&a->before), 0);
    munmap(a, sizeof *a);
}

/* A static initializer works; destroy of an unused one is fine. */
static void test_static_initializer(void **state)
{
    struct names n;
    dist_mutex_t m;
    dist_cond_t c = DIST_COND_INITIALIZER(NULL), d;
    struct timespec dl;

    (void)state;
    names_for(&n, __func__);
    assert_int_equal(dist_cond_signal(&c), EINVAL); /* no name */
    c.__name = n.c[0];
    d = c;
    assert_int_equal(dist_mutex_init(&m, n.m, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    dl = realtime_in(0.2);
    assert_int_equal(dist_cond_timedwait(&c, &m, &dl), ETIMEDOUT);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_cond_destroy(&c), 0);
    assert_int_equal(dist_cond_destroy(&d), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_timedwait_times_out_holding_mutex),
        T(test_wait_needs_mutex_held_once),
        T(test_wait_on_lost_hold),
        T(test_wait_on_hold_found_lost),
        T(test_static_initializer),
        T(test_signal_without_waiters_is_dropped),
        T(test_destroy_right_after_broadcast),
        T(test_fork_child_ignores_parents_waiters),
        T(test_cond_made_by_another_process),
        T(test_producer_consumer),
        T(test_signal_wakes_one_broadcast_all),
        T(test_killed_waiter_skipped),
        T(test_killed_waiter_passes_signal_on),
        T(test_lost_wakeup_hunt),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_COND_FILTER");
}
