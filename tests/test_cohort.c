/*
 * test_cohort: cohort mutexes (dist_mutexattr_setcohort) against a private
 * redis-server: threads of one process hand the Redis hold on among
 * themselves, exclude each other and other processes, leave other
 * processes their turns, and act on a hold lost meanwhile.
 *
 * Worker threads and forked children only record results; the main thread
 * asserts.  Bounds on time are generous (seconds where the mechanism works
 * in milliseconds), so that a loaded machine does not fail them.
 */
#define GROUP_PROG     "test_cohort"
#define GROUP_SETTINGS FX_DEFAULTS(0)
#include "grouphelp.h"
#define key_exists(key) tu_cmd_int(&r, "EXISTS", key, NULL)

/* a: the attributes of a cohort mutex of type type. */
static void cohort_attr(dist_mutexattr_t *a, int type)
{
    dist_mutexattr_init(a);
    dist_mutexattr_settype(a, type);
    dist_mutexattr_setcohort(a, 1);
}

/* A cohort mutex of type type of the test's own (fixture.h), its name
 * made with tag. */
#define cohort_mutex(tag, type) own_cohort(__func__, tag, type)
static dist_mutex_t *own_cohort(const char *test, const char *tag, int type)
{
    dist_mutexattr_t a;
    dist_mutex_t *m;

    cohort_attr(&a, type);
    m = fx_own_mutex(test, tag, &a);
    dist_mutexattr_destroy(&a);
    return m;
}

#define count_of(name) owner_count(&r, name)

/* Calls of EVALSHA and EVAL the server has answered so far. */
static long long script_calls(void)
{
    redisReply *x = tu_cmd(&r, "INFO", "commandstats", NULL);
    long long n = 0;
    const char *p;

    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    if ((p = strstr(x->str, "cmdstat_evalsha:calls=")) != NULL)
        n += strtoll(p + strlen("cmdstat_evalsha:calls="), NULL, 10);
    if ((p = strstr(x->str, "cmdstat_eval:calls=")) != NULL)
        n += strtoll(p + strlen("cmdstat_eval:calls="), NULL, 10);
    freeReplyObject(x);
    return n;
}

/* ---- the attribute ------------------------------------------------------ */

static void test_attribute(void **state)
{
    (void)state;
    assert_attr_switch(dist_mutexattr_setcohort, dist_mutexattr_getcohort);
}

/* A fair mutex keeps its FIFO across processes: no cohort. */
static void test_fair_refused(void **state)
{
    char name[200];
    dist_mutexattr_t a;
    dist_mutex_t m;

    (void)state;
    NAME(name, "m");
    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, 1);
    assert_int_equal(dist_mutexattr_setcohort(&a, 1), 0);
    assert_int_equal(dist_mutex_init(&m, name, &a), EINVAL);
    assert_non_null(strstr(dist_last_error(), "fair"));
    dist_mutexattr_destroy(&a);
}

/* The holds Redis counts for m's name while this thread holds it twice
 * (taken twice, then given back twice). */
static long long nested_count(dist_mutex_t *m, const char *name)
{
    long long n;

    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    n = count_of(name);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    return n;
}

/* DISTLOCK_COHORT=1 is the default of non-fair mutexes whose attribute did
 * not say, DIST_MUTEX_INITIALIZER ones included; fair ones are left alone.
 * The library reads its environment once, so this program runs again with
 * it set, this test alone, and the copy asserts (a cohort mutex counts
 * recursion locally: Redis sees 1 hold where a plain one sees 2). */
static void env_child_checks(void)
{
    char name[200];
    dist_mutex_t init = DIST_MUTEX_INITIALIZER(name), *fair;
    dist_mutexattr_t a;
    int c = -1;

    NAME(name, "m");
    dist_mutexattr_init(&a);
    assert_int_equal(dist_mutexattr_getcohort(&a, &c), 0);
    assert_int_equal(c, 1);
    dist_mutexattr_setfair(&a, 1);
    assert_int_equal(dist_mutexattr_getcohort(&a, &c), 0);
    assert_int_equal(c, 0);
    fair = fx_mutex("fair", &a);
    dist_mutexattr_destroy(&a);
    assert_int_equal(nested_count(&init, name), 1);
    assert_int_equal(nested_count(fair, fx_name(fair)), 2);
    /* not the fixture's: a statically initialised mutex */
    assert_int_equal(dist_mutex_destroy(&init), 0);
}

static void test_env_default(void **state)
{
    (void)state;
    if (rerun_child())
        env_child_checks();
    else
        rerun_with_env("test_cohort", "TEST_COHORT_FILTER", __func__,
                       "DISTLOCK_COHORT", "1");
}

/* ---- one owner's semantics -------------------------------------------------- */

struct other {
    dist_mutex_t *m;
    int unlock_rc, token_rc, try_rc, timed_rc, left_rc;
};

static void *other_main(void *arg)
{
    struct other *o = arg;
    struct timespec ts = realtime_in(0.2), left;
    uint64_t tok;

    o->unlock_rc = dist_mutex_unlock(o->m);
    o->token_rc = dist_mutex_token(o->m, &tok);
    o->left_rc = dist_mutex_lease_left(o->m, &left);
    o->try_rc = dist_mutex_trylock(o->m);
    o->timed_rc = dist_mutex_timedlock(o->m, &ts);
    return NULL;
}

/* Recursion is local: Redis counts the cohort's one hold; another thread
 * may not unlock, and finds it busy (trylock) or waits until its deadline
 * (timedlock), all without a round trip changing the hold. */
static void test_recursive(void **state)
{
    dist_mutex_t *m = cohort_mutex("m", DIST_MUTEX_RECURSIVE);
    const char *name = fx_name(m);
    struct other o;
    pthread_t th;
    struct timespec left;
    uint64_t t1, t2;

    (void)state;
    assert_int_equal(dist_mutex_lease_left(m, &left), EPERM);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_token(m, &t1), 0);
    /* the cohort's Redis hold's bound, to the owner only */
    assert_int_equal(dist_mutex_lease_left(m, &left), 0);
    assert_true(left.tv_sec >= 19 && left.tv_sec <= 29);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_trylock(m), 0);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_token(m, &t2), 0);
    assert_true(t1 == t2);

    o = (struct other){ m, -1, -1, -1, -1, -1 };
    assert_int_equal(pthread_create(&th, NULL, other_main, &o), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(o.unlock_rc, EPERM);
    assert_int_equal(o.token_rc, EPERM);
    assert_int_equal(o.left_rc, EPERM);
    assert_int_equal(o.try_rc, EBUSY);
    assert_int_equal(o.timed_rc, ETIMEDOUT);

    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_destroy(m), EBUSY);
    fx_last_unlock(m); /* released at once */
}

static void test_errorcheck(void **state)
{
    dist_mutex_t *m = cohort_mutex("m", DIST_MUTEX_ERRORCHECK);
    const char *name = fx_name(m);

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), EDEADLK);
    assert_int_equal(dist_mutex_trylock(m), EBUSY);
    assert_int_equal(count_of(name), 1);
    fx_last_unlock(m);
}

/* A condition wait would give the hold up for the whole cohort. */
static void test_cond_refused(void **state)
{
    dist_mutex_t *m = cohort_mutex("m", DIST_MUTEX_RECURSIVE);
    dist_cond_t *c = fx_cond("cond", NULL);

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_cond_wait(c, m), EINVAL);
    assert_non_null(strstr(dist_last_error(), "cohort"));
    assert_int_equal(dist_mutex_unlock(m), 0);
}

/* ---- hand-off between threads ------------------------------------------------ */

#define HO_THREADS 4
#define HO_ITERS   200

struct ho_shared {
    dist_mutex_t *m;
    int inside, overlaps, fail;
    uint64_t last_token;
    int token_back; /* a token below one seen before */
};

static void *ho_main(void *arg)
{
    struct ho_shared *s = arg;
    uint64_t tok;
    int i;

    for (i = 0; i < HO_ITERS; i++) {
        if (dist_mutex_lock(s->m) != 0) {
            __atomic_store_n(&s->fail, 1, __ATOMIC_SEQ_CST);
            return NULL;
        }
        if (__atomic_add_fetch(&s->inside, 1, __ATOMIC_SEQ_CST) != 1)
            __atomic_add_fetch(&s->overlaps, 1, __ATOMIC_SEQ_CST);
        if (dist_mutex_token(s->m, &tok) != 0)
            __atomic_store_n(&s->fail, 2, __ATOMIC_SEQ_CST);
        else if (tok < s->last_token)
            s->token_back = 1;
        else
            s->last_token = tok;
        usleep(50); /* others queue meanwhile */
        __atomic_sub_fetch(&s->inside, 1, __ATOMIC_SEQ_CST);
        if (dist_mutex_unlock(s->m) != 0)
            __atomic_store_n(&s->fail, 3, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* Threads taking turns run fewer lock scripts than they take the lock
 * (each hold from Redis costs two: lock and unlock), and the tokens they
 * see never go back. */
static void test_handoff(void **state)
{
    dist_mutex_t *m = cohort_mutex("m", DIST_MUTEX_RECURSIVE);
    struct ho_shared s = { m, 0, 0, 0, 0, 0 };
    pthread_t th[HO_THREADS];
    long long before, calls;
    int i;

    (void)state;
    before = script_calls();
    for (i = 0; i < HO_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, ho_main, &s), 0);
    for (i = 0; i < HO_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    calls = script_calls() - before;
    assert_int_equal(s.fail, 0);
    assert_int_equal(s.overlaps, 0);
    assert_int_equal(s.token_back, 0);
    print_message("%d acquisitions, %lld scripts\n", HO_THREADS * HO_ITERS,
                  calls);
    assert_true(calls < HO_THREADS * HO_ITERS);
}

/* ---- other processes ------------------------------------------------------------ */

/* The children's mutex, with the attributes attr (the test's, which they
 * inherit). */
static int mx_init(dist_mutex_t *m, const char *name, void *attr)
{
    return dist_mutex_init(m, name, attr);
}

/* Threads of two processes, each process a cohort of 4 taking 150 turns
 * each: no two are ever inside at once, and the counter they increment is
 * exact (fx_mx_run). */
static void test_mutual_exclusion(void **state)
{
    char name[200];
    dist_mutexattr_t a;
    const struct fx_mx run = { name, 2, 4, 150, mx_init, &a };

    (void)state;
    NAME(name, "m");
    cohort_attr(&a, DIST_MUTEX_RECURSIVE);
    fx_mx_run(&run);
    dist_mutexattr_destroy(&a);
    assert_int_equal(key_exists(name), 0);
}

/* ---- a remote waiter ---------------------------------------------------------------- */

#define RW_THREADS 4
#define RW_BOUND_S 5.0 /* the mechanism: about 10 ms */

struct rw_shared {
    int go;        /* the child starts waiting */
    int got;       /* it has had the lock */
    double waited; /* how long its lock took (s) */
    int code;
};

struct rw_thread {
    dist_mutex_t *m;
    struct rw_shared *sh;
    int stop, fail;
    long n;
};

static void *rw_main(void *arg)
{
    struct rw_thread *t = arg;

    while (!__atomic_load_n(&t->stop, __ATOMIC_SEQ_CST)) {
        if (dist_mutex_lock(t->m) != 0) {
            t->fail = 1;
            return NULL;
        }
        __atomic_add_fetch(&t->n, 1, __ATOMIC_SEQ_CST);
        if (dist_mutex_unlock(t->m) != 0) {
            t->fail = 2;
            return NULL;
        }
    }
    return NULL;
}

static void rw_child(const char *name, struct rw_shared *sh)
{
    dist_mutex_t m;
    double t0;

    while (!__atomic_load_n(&sh->go, __ATOMIC_SEQ_CST))
        usleep(1000);
    if (dist_mutex_init(&m, name, NULL) != 0)
        _exit(sh->code = 10);
    t0 = tu_now();
    if (dist_mutex_lock(&m) != 0)
        _exit(sh->code = 11);
    sh->waited = tu_now() - t0;
    __atomic_store_n(&sh->got, 1, __ATOMIC_SEQ_CST);
    if (dist_mutex_unlock(&m) != 0)
        _exit(sh->code = 12);
    _exit(sh->code = 0);
}

/* Local threads that keep handing the hold on among themselves still let
 * another process's waiter in, within bounds far above the mechanism's. */
static void test_remote_waiter(void **state)
{
    dist_mutex_t *m;
    struct rw_shared *sh;
    struct rw_thread t[RW_THREADS];
    pthread_t th[RW_THREADS];
    double t0;
    pid_t pid;
    int st, i;

    (void)state;
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    sh->code = -1;
    m = cohort_mutex("m", DIST_MUTEX_RECURSIVE);
    pid = fork(); /* before this process's threads start */
    if (pid == 0)
        rw_child(fx_name(m), sh);
    assert_true(pid > 0);
    for (i = 0; i < RW_THREADS; i++) {
        t[i] = (struct rw_thread){ m, sh, 0, 0, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, rw_main, &t[i]), 0);
    }
    while (__atomic_load_n(&t[0].n, __ATOMIC_SEQ_CST) < 50 && !t[0].fail)
        usleep(1000);
    __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
    t0 = tu_now();
    while (!__atomic_load_n(&sh->got, __ATOMIC_SEQ_CST) &&
           tu_now() - t0 < 4 * RW_BOUND_S)
        usleep(1000);
    for (i = 0; i < RW_THREADS; i++)
        __atomic_store_n(&t[i].stop, 1, __ATOMIC_SEQ_CST);
    for (i = 0; i < RW_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(t[i].fail, 0);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(sh->code, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    print_message("the other process waited %.1f ms\n", sh->waited * 1e3);
    assert_true(sh->waited < RW_BOUND_S);
    munmap(sh, sizeof *sh);
}

/* ---- a hold lost during a cohort ------------------------------------------------------ */

struct waiter {
    dist_mutex_t *m;
    int started, rc, unlock_rc;
    uint64_t token;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;

    __atomic_store_n(&w->started, 1, __ATOMIC_SEQ_CST);
    w->rc = dist_mutex_lock(w->m);
    if (w->rc == 0) {
        if (dist_mutex_token(w->m, &w->token) != 0)
            w->rc = -2;
        w->unlock_rc = dist_mutex_unlock(w->m);
    }
    return NULL;
}

/* The key is deleted while a thread holds and another waits locally: the
 * holder's unlock says EPERM and the lost handler runs; the waiter then
 * takes the lock anew from Redis (a higher token). */
static void test_lost_hold(void **state)
{
    static const struct fx_settings fast = { 300, DEFAULT_TIMEOUT_MS, 0 };
    const char *name;
    dist_mutex_t *m;
    struct waiter w = { NULL, 0, -1, -1, 0 };
    pthread_t th;
    uint64_t tok;
    double t0;
    int rc = 0;

    (void)state;
    fx_dirty = 1;
    assert_int_equal(fx_apply(r.url_unix, &fast), 0);
    fx_watch_lost();
    m = w.m = cohort_mutex("m", DIST_MUTEX_RECURSIVE);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_token(m, &tok), 0);
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (!__atomic_load_n(&w.started, __ATOMIC_SEQ_CST))
        usleep(1000);
    tu_sleep_ms(100); /* it queues behind this thread */
    assert_int_equal(tu_cmd_int(&r, "DEL", name, NULL), 1);
    /* the renewal thread (every 100 ms here) finds it gone */
    t0 = tu_now();
    while ((rc = dist_mutex_token(m, &tok)) == 0 && tu_now() - t0 < 10)
        tu_sleep_ms(20);
    assert_int_equal(rc, EPERM);
    assert_int_equal(dist_mutex_unlock(m), EPERM);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.unlock_rc, 0);
    assert_true(w.token > tok);
    assert_int_equal(fx_lost_calls(name), 1);
}

static int unlock_of(void *m)
{
    return dist_mutex_unlock(m);
}

/* Who else is there when the hold is found lost, and how deep the
 * owner's recursion is. */
struct lost_case {
    const char *tag;
    int with_waiter;
    int depth;
};

/* An unlock of a cohort hold the renewal thread found lost but has not
 * reported yet (its report waits behind another lock's handler): EPERM,
 * and the handler has heard of it, once, when the unlock returns; with a
 * local waiter queued too (the unlock then first asks whether the hold
 * may pass to it).  The cohort's unlock releases through the engine,
 * which makes the report (test_mutex test_unlock_while_loss_reported).
 * Deeper in a recursion, the first unlock says so all the same and lets
 * go of every hold, as a plain recursive mutex's does: the unlocks after
 * it find nothing held (EPERM), and the waiter takes the lock anew. */
static void test_unlock_of_hold_found_lost(void **state)
{
    const struct lost_case *lc = *state;
    const char *name, *other;
    char tag[64];
    dist_mutex_t *m, *o;
    struct waiter w = { NULL, 0, -1, -1, 0 };
    pthread_t th;
    struct fx_held_up_call call;
    int other_rc, i, deeper_rc = EPERM;

    snprintf(tag, sizeof tag, "%s-other", lc->tag);
    fx_watch_held_up();
    m = w.m = cohort_mutex(lc->tag, DIST_MUTEX_RECURSIVE);
    o = fx_mutex(tag, NULL);
    name = fx_name(m);
    other = fx_name(o);
    /* the plain mutex is renewed, and reported, first: a round goes in
     * order of the entries' due times (each a period after its lock), so
     * it is taken a few ms before the cohort one.  (Taken in the same ms,
     * the order was the list's, newest first; a ms apart, the cohort's
     * report came first and its unlock waited for a held-up handler.) */
    assert_int_equal(dist_mutex_lock(o), 0);
    tu_sleep_ms(5);
    for (i = 0; i < lc->depth; i++)
        assert_int_equal(dist_mutex_lock(m), 0);
    if (lc->with_waiter) {
        assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
        while (!__atomic_load_n(&w.started, __ATOMIC_SEQ_CST))
            usleep(1000);
        tu_sleep_ms(100); /* it queues behind this thread */
    }
    /* both gone at once: one renewal round finds them both; the unlock
     * runs while the report of the plain mutex holds the thread up */
    assert_int_equal(tu_cmd_int(&r, "DEL", name, other, NULL), 2);
    fx_held_up_call(&call, unlock_of, m, name);
    other_rc = dist_mutex_unlock(o);
    for (i = 1; i < lc->depth; i++) { /* nothing left to let go of */
        int d = dist_mutex_unlock(m);
        if (d != EPERM)
            deeper_rc = d;
    }
    if (lc->with_waiter)
        assert_int_equal(pthread_join(th, NULL), 0);
    dist_set_lost_handler(NULL, NULL);
    fx_held_up_check(&call, other, "unlock", "mutex");
    assert_int_equal(deeper_rc, EPERM);
    assert_int_equal(other_rc, EPERM);
    assert_int_equal(fx_lost_calls(name), 1);
    if (lc->with_waiter) { /* it took the lock anew */
        assert_int_equal(w.rc, 0);
        assert_int_equal(w.unlock_rc, 0);
    }
}

/* ---- fork ------------------------------------------------------------------------------ */

/* The child of a process whose thread holds a cohort mutex holds nothing:
 * unlock and token say EPERM, and a try finds it held (by the parent). */
static void test_fork(void **state)
{
    dist_mutex_t *m = cohort_mutex("m", DIST_MUTEX_RECURSIVE);
    const char *name = fx_name(m);
    pid_t pid;
    int st;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    pid = fork();
    if (pid == 0) {
        uint64_t tok;
        int code = 0;
        if (dist_mutex_unlock(m) != EPERM)
            code = 1;
        else if (dist_mutex_token(m, &tok) != EPERM)
            code = 2;
        else if (dist_mutex_trylock(m) != EBUSY)
            code = 3;
        _exit(code);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(count_of(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
}

int main(void)
{
    static const struct lost_case alone = { "alone", 0, 1 },
                                  waited = { "waited", 1, 1 },
                                  deep = { "deep", 1, 2 };
    const struct CMUnitTest tests[] = {
        FX_TEST(test_attribute),
        FX_TEST(test_fair_refused),
        FX_TEST(test_env_default),
        FX_TEST(test_recursive),
        FX_TEST(test_errorcheck),
        FX_TEST(test_cond_refused),
        FX_TEST(test_handoff),
        FX_TEST(test_mutual_exclusion),
        FX_TEST(test_remote_waiter),
        FX_TEST(test_lost_hold),
        param_test(test_unlock_of_hold_found_lost_alone,
                   test_unlock_of_hold_found_lost, &alone,
                   fx_restore_defaults),
        param_test(test_unlock_of_hold_found_lost_waited,
                   test_unlock_of_hold_found_lost, &waited,
                   fx_restore_defaults),
        param_test(test_unlock_of_hold_found_lost_deep,
                   test_unlock_of_hold_found_lost, &deep,
                   fx_restore_defaults),
        FX_TEST(test_fork),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_COHORT_FILTER");
}
