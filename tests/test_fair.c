/*
 * test_fair: the fair (FIFO) mutex against a private redis-server: order
 * across processes, a queue that never stalls behind a dead waiter, waiters
 * that give up leave at once, and only the head is told of a release.
 *
 * As in test_mutex, workers (threads, forked children) only record results
 * and the main thread asserts; bounds hold on a loaded 2-core machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

#define WAITER_MS 2000UL /* a short waiter window keeps the tests short */

/* The group's settings (fixture.h): the library's own but for the waiter
 * window. */
static const struct fx_settings defaults = { 0, 0, WAITER_MS };

static tu_redis_t r;

#include "scripthelp.h"

struct names {
    char lock[160], queue[200], timeout[200], chan[200];
};

static void make_names(struct names *n, const char *test)
{
    snprintf(n->lock, sizeof n->lock, "test_fair:%s:%ld", test,
             (long)getpid());
    snprintf(n->queue, sizeof n->queue, "redisson_lock_queue:{%s}", n->lock);
    snprintf(n->timeout, sizeof n->timeout, "redisson_lock_timeout:{%s}",
             n->lock);
    snprintf(n->chan, sizeof n->chan, "redisson_lock__channel:{%s}", n->lock);
}

static void fair_init(dist_mutex_t *m, const char *name, unsigned long lease)
{
    dist_mutexattr_t a;
    int fair = 0;

    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setfair(&a, 1), 0);
    assert_int_equal(dist_mutexattr_getfair(&a, &fair), 0);
    assert_int_equal(fair, 1);
    assert_int_equal(dist_mutexattr_setlease(&a, lease), 0);
    assert_int_equal(dist_mutex_init(m, name, &a), 0);
    dist_mutexattr_destroy(&a);
}

static long long llen(const char *key)
{
    return tu_cmd_int(&r, "LLEN", key, NULL);
}

static long long exists(const char *key)
{
    return tu_cmd_int(&r, "EXISTS", key, NULL);
}

/* Waits up to secs for LLEN(queue) to reach n. */
static int queue_reaches(const char *queue, long long n, double secs)
{
    double end = tu_now() + secs;

    while (tu_now() < end) {
        if (llen(queue) == n)
            return 1;
        tu_sleep_ms(5);
    }
    return 0;
}

/* ---- a waiter that starts at a given time -------------------------------- */

/* Shared by all processes of a test: where each waiter came in. */
struct order {
    atomic_int next;
    int seq[16]; /* seq[i]: waiter i's place in the order, -1 none */
    int rc[16];
    double t[16]; /* CLOCK_MONOTONIC when it got the lock */
};

struct waiter {
    dist_mutex_t *m;
    struct order *o;
    int idx;
    double start_at; /* tu_now() time to call lock */
    double timeout;  /* > 0: timedlock with this many seconds */
    int hold_ms;
    int unlock; /* 0: keep the lock (an explicit lease ends it) */
    int warm;   /* a trylock first, on the held lock: the thread's
                        * connection is made before start_at, so that its
                        * lock call then reaches Redis at once */
    pthread_t th;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    struct timespec ts;
    double d;
    int rc;

    if (w->warm && dist_mutex_trylock(w->m) != EBUSY) {
        w->o->rc[w->idx] = -2; /* the lock was to be held meanwhile */
        return NULL;
    }
    d = w->start_at - tu_now();
    if (d > 0)
        tu_sleep_ms((long)(d * 1000));
    if (w->timeout > 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)w->timeout;
        rc = dist_mutex_timedlock(w->m, &ts);
    } else {
        rc = dist_mutex_lock(w->m);
    }
    w->o->rc[w->idx] = rc;
    if (rc == 0) {
        w->o->t[w->idx] = tu_now();
        w->o->seq[w->idx] = atomic_fetch_add(&w->o->next, 1);
        tu_sleep_ms(w->hold_ms);
        if (w->unlock)
            w->o->rc[w->idx] = dist_mutex_unlock(w->m);
    }
    return NULL;
}

static struct order *order_new(void)
{
    struct order *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int i;

    assert_true(o != MAP_FAILED);
    atomic_init(&o->next, 0);
    for (i = 0; i < 16; i++) {
        o->seq[i] = -1;
        o->rc[i] = -1;
    }
    return o;
}

static void waiter_go(struct waiter *w, dist_mutex_t *m, struct order *o,
                      int idx, double start_at)
{
    memset(w, 0, sizeof *w);
    w->m = m;
    w->o = o;
    w->idx = idx;
    w->start_at = start_at;
    w->hold_ms = 20;
    w->unlock = 1;
}

/* A fair mutex on name for a forked child (no cmocka there).  0 or the
 * error of init. */
static int child_fair_init(dist_mutex_t *m, const char *name)
{
    dist_mutexattr_t a;

    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, 1);
    return dist_mutex_init(m, name, &a);
}

/* ---- what the tests share ------------------------------------------------- */

/* A test's names, its fair mutex and where its waiters came in. */
struct fair_case {
    struct names n;
    dist_mutex_t m;
    struct order *o;
};

/* Waits up to secs until n waiters have taken the lock or stand in its
 * queue.  A waiter counts in the queue before its lock returns, so the sum
 * may lag behind for a moment, never run ahead. */
static int placed_reach(struct fair_case *c, long long n, double secs)
{
    double end = tu_now() + secs;

    while (tu_now() < end) {
        if (llen(c->n.queue) + atomic_load(&c->o->next) >= n)
            return 1;
        tu_sleep_ms(5);
    }
    return 0;
}

/* Fresh names for test, the mutex with that lease (0: the watchdog), held
 * by this thread when locked. */
static void case_begin(struct fair_case *c, const char *test,
                       unsigned long lease, int locked)
{
    c->o = order_new();
    make_names(&c->n, test);
    fair_init(&c->m, c->n.lock, lease);
    if (locked)
        assert_int_equal(dist_mutex_lock(&c->m), 0);
}

/* Nobody is queued, no waiter deadline is left. */
static void queue_gone(const struct fair_case *c)
{
    assert_int_equal(exists(c->n.queue), 0);
    assert_int_equal(exists(c->n.timeout), 0);
}

static void case_end(struct fair_case *c)
{
    assert_int_equal(dist_mutex_destroy(&c->m), 0);
    munmap(c->o, sizeof *c->o);
}

/* Waiter idx on m starts now (timedlock when timeout > 0) and is the
 * queue's want-th entry within secs. */
static void join_queue(struct fair_case *c, struct waiter *w, dist_mutex_t *m,
                       int idx, double timeout, long long want, double secs)
{
    waiter_go(w, m, c->o, idx, tu_now());
    w->timeout = timeout;
    assert_int_equal(pthread_create(&w->th, NULL, waiter_main, w), 0);
    assert_true(queue_reaches(c->n.queue, want, secs));
}

/* How far apart the staggered waiters start: wider under valgrind, where
 * one lock call takes longer than 50 ms of the machine's time. */
static double stagger(void)
{
    return on_valgrind() ? 0.25 : 0.05;
}

/* Waiters from..to (step 2), warmed up, start stagger() apart after t0;
 * joined later. */
static void start_staggered(struct waiter *w, dist_mutex_t *m,
                            struct order *o, int from, int to, double t0)
{
    int i;

    for (i = from; i < to; i += 2) {
        waiter_go(&w[i], m, o, i, t0 + stagger() * i);
        w[i].warm = 1;
        assert_int_equal(pthread_create(&w[i].th, NULL, waiter_main, &w[i]),
                         0);
    }
}

/* ---- tests ---------------------------------------------------------------- */

/* The odd waiters of test_fifo_across_processes, in a forked child. */
static void fifo_child(const char *name, struct order *o, double t0)
{
    struct waiter w[8];
    dist_mutex_t cm;
    int i;

    if (child_fair_init(&cm, name) != 0)
        _exit(3);
    for (i = 1; i < 8; i += 2) {
        waiter_go(&w[i], &cm, o, i, t0 + stagger() * i);
        w[i].warm = 1;
        pthread_create(&w[i].th, NULL, waiter_main, &w[i]);
    }
    for (i = 1; i < 8; i += 2)
        pthread_join(w[i].th, NULL);
    dist_shutdown();
    _exit(0);
}

/* 8 waiters in 2 processes start stagger() apart while the lock is held,
 * and acquire in exactly that order. */
static void test_fifo_across_processes(void **state)
{
    struct fair_case c;
    struct waiter w[8];
    double t0;
    pid_t pid;
    int i, st, go[2];

    (void)state;
    case_begin(&c, __func__, 0, 0);
    /* Fork before the lock starts the library's threads: under gcc 12's
     * AddressSanitizer a fork while another thread is inside the allocator
     * leaves the child's allocator locked for ever.  The child learns the
     * start time once the parent holds the lock. */
    assert_int_equal(pipe(go), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        if (read(go[0], &t0, sizeof t0) != (ssize_t)sizeof t0)
            _exit(4);
        fifo_child(c.n.lock, c.o, t0);
    }
    close(go[0]);
    assert_int_equal(dist_mutex_lock(&c.m), 0);
    t0 = tu_now() + slack(0.3);
    assert_int_equal(write(go[1], &t0, sizeof t0), (ssize_t)sizeof t0);
    close(go[1]);
    start_staggered(w, &c.m, c.o, 0, 8, t0);
    /* all 8 queued, in order, and none has the lock */
    assert_true(queue_reaches(c.n.queue, 8,
                              15.0)); /* 8 processes and threads start */
    assert_int_equal(atomic_load(&c.o->next), 0);
    assert_int_equal(dist_mutex_unlock(&c.m), 0);

    for (i = 0; i < 8; i += 2)
        pthread_join(w[i].th, NULL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (i = 0; i < 8; i++) {
        assert_int_equal(c.o->rc[i], 0);
        if (c.o->seq[i] != i)
            fail_msg("waiter %d (started %d ms after the first) came %d-th",
                     i, (int)(stagger() * 1000) * i, c.o->seq[i]);
    }
    assert_int_equal(exists(c.n.lock), 0);
    queue_gone(&c);
    case_end(&c);
}

/* 8 timedlock waiters with a 1 s lease that never unlock: each gets the lock
 * when the previous lease ends, in the order they came. */
static void test_fifo_leases_expire(void **state)
{
    struct fair_case c;
    struct waiter w[8];
    double t0, lo, hi;
    int i;

    (void)state;
    case_begin(&c, __func__, 1000, 0);
    t0 = tu_now();
    for (i = 0; i < 8; i++) {
        waiter_go(&w[i], &c.m, c.o, i, t0);
        w[i].timeout = 30;
        w[i].unlock = 0;
        w[i].hold_ms = 0;
        assert_int_equal(pthread_create(&w[i].th, NULL, waiter_main, &w[i]),
                         0);
        /* the next starts once this one holds or is queued: a start time
         * alone does not order threads on a loaded machine */
        assert_true(placed_reach(&c, i + 1, 15.0));
    }
    for (i = 0; i < 8; i++)
        pthread_join(w[i].th, NULL);
    /* each waits out the lease before it, and not much more; t[] is read
     * once lock has returned, which valgrind delays by up to a few hundred
     * ms after the server gave the hold */
    lo = on_valgrind() ? 0.5 : 0.9;
    hi = on_valgrind() ? 2.5 : 1.5;
    for (i = 0; i < 8; i++) {
        double gap = i > 0 ? c.o->t[i] - c.o->t[i - 1] : 1.0;

        assert_int_equal(c.o->rc[i], 0);
        if (c.o->seq[i] != i)
            fail_msg("waiter %d came %d-th", i, c.o->seq[i]);
        if (gap < lo || gap > hi)
            fail_msg("waiter %d got it %.3f s after waiter %d", i, gap,
                     i - 1);
    }
    queue_gone(&c);
    /* the holds were left to expire: busy until the last lease ends */
    assert_int_equal(dist_mutex_destroy(&c.m), EBUSY);
    tu_sleep_ms(1200);
    case_end(&c);
}

/* The head of a queue of 3 is SIGKILLed: the next waiter is delayed by at
 * most the waiter window plus a second. */
static void test_dead_head_evicted(void **state)
{
    struct fair_case c;
    struct waiter w[3];
    double t_unlock, delay;
    dist_mutex_t cm;
    pid_t pid;
    int st;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (child_fair_init(&cm, c.n.lock) == 0)
            dist_mutex_lock(&cm); /* never returns before the kill */
        _exit(1);
    }
    assert_true(queue_reaches(c.n.queue, 1, 5.0));
    join_queue(&c, &w[1], &c.m, 1, 0, 2, 5.0);
    join_queue(&c, &w[2], &c.m, 2, 0, 3, 5.0);

    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    t_unlock = tu_now();
    assert_int_equal(dist_mutex_unlock(&c.m), 0); /* tells the dead head */
    pthread_join(w[1].th, NULL);
    pthread_join(w[2].th, NULL);

    assert_int_equal(c.o->rc[1], 0);
    assert_int_equal(c.o->rc[2], 0);
    assert_int_equal(c.o->seq[1], 0);
    assert_int_equal(c.o->seq[2], 1);
    delay = c.o->t[1] - t_unlock;
    if (delay > WAITER_MS / 1000.0 + 1.0)
        fail_msg("the next waiter waited %.3f s behind a dead head", delay);
    queue_gone(&c);
    case_end(&c);
}

/* A child that waits on the fair lock name until it is killed. */
static pid_t queued_child(const struct fair_case *c, long long place)
{
    dist_mutex_t cm;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        if (child_fair_init(&cm, c->n.lock) == 0)
            dist_mutex_lock(&cm); /* never returns before the kill */
        _exit(1);
    }
    assert_true(queue_reaches(c->n.queue, place, 5.0));
    return pid;
}

static void kill_child(pid_t pid)
{
    int st;

    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* Waiters killed behind a live head: once their windows end they are gone,
 * though they never reach the head before.  A dead waiter that stayed in
 * the queue with its mark gone passed for a Redisson waiter: one that came
 * in behind it got a Redisson waiter's wait (minutes) added to its
 * deadline, and when that one died too, the queue stood behind it for
 * minutes with the lock free (seen in the Sentinel torture run). */
static void test_dead_waiters_behind_head(void **state)
{
    struct fair_case c;
    struct waiter w[2];
    char marks[200];
    pid_t d1, d2;
    double t0;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    snprintf(marks, sizeof marks, "distlock_fair_waiters:{%s}", c.n.lock);
    join_queue(&c, &w[0], &c.m, 0, 0, 1, 5.0); /* the live head */
    d1 = queued_child(&c, 2);
    kill_child(d1);
    /* d1's window ends; a trylock's script sweeps the marks */
    tu_sleep_ms(WAITER_MS + 500);
    assert_int_equal(trylock_in_thread(&c.m), EBUSY);
    d2 = queued_child(&c, llen(c.n.queue) + 1);
    kill_child(d2);
    tu_sleep_ms(WAITER_MS + 500);
    assert_int_equal(trylock_in_thread(&c.m), EBUSY);
    /* only the live head is left */
    assert_int_equal(llen(c.n.queue), 1);

    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    pthread_join(w[0].th, NULL);
    assert_int_equal(c.o->rc[0], 0);
    /* the lock is free and nobody waits: a new waiter takes it at once */
    t0 = tu_now();
    waiter_go(&w[1], &c.m, c.o, 1, t0);
    w[1].timeout = 5;
    assert_int_equal(pthread_create(&w[1].th, NULL, waiter_main, &w[1]), 0);
    pthread_join(w[1].th, NULL);
    assert_int_equal(c.o->rc[1], 0);
    if (tu_now() - t0 > 2.0)
        fail_msg("a free lock took %.3f s to take", tu_now() - t0);
    queue_gone(&c);
    assert_int_equal(exists(marks), 0);
    case_end(&c);
}

/* A waiter that times out leaves the queue and the deadline set at once;
 * trylock never joins the queue. */
static void test_giving_up_leaves_no_entry(void **state)
{
    struct fair_case c;
    struct waiter w;
    double t0;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    t0 = tu_now();
    join_queue(&c, &w, &c.m, 0, 1, 1, 3.0);
    pthread_join(w.th, NULL);
    assert_int_equal(c.o->rc[0], ETIMEDOUT);
    assert_true(tu_now() - t0 < 3.0);
    queue_gone(&c);

    /* trylock from another thread: EBUSY, and it does not queue */
    assert_int_equal(trylock_in_thread(&c.m), EBUSY);
    assert_int_equal(exists(c.n.queue), 0);
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    case_end(&c);
}

/* A live Redisson waiter queued on c's lock: its entry, a deadline well
 * ahead on the server, no mark. */
static void redisson_queued(const struct fair_case *c, const char *owner)
{
    char deadline[32];
    redisReply *t = tu_cmd(&r, "TIME", NULL);

    assert_non_null(t);
    snprintf(deadline, sizeof deadline, "%lld",
             atoll(t->element[0]->str) * 1000 + 60000);
    freeReplyObject(t);
    assert_int_equal(tu_cmd_int(&r, "RPUSH", c->n.queue, owner, NULL), 1);
    assert_int_equal(
        tu_cmd_int(&r, "ZADD", c->n.timeout, deadline, owner, NULL), 1);
}

/* A free lock with someone queued is not for trylock: the queue decides. */
static void test_trylock_respects_queue(void **state)
{
    struct fair_case c;

    (void)state;
    case_begin(&c, __func__, 0, 0);
    redisson_queued(&c, "00000000-0000-0000-0000-000000000000:1");
    assert_int_equal(trylock_in_thread(&c.m), EBUSY);
    assert_int_equal(llen(c.n.queue), 1);

    /* once that waiter is gone, trylock takes the free lock */
    tu_cmd_int(&r, "DEL", c.n.queue, c.n.timeout, NULL);
    assert_int_equal(dist_mutex_trylock(&c.m), 0);
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    case_end(&c);
}

static void test_reentrant_counts(void **state)
{
    struct fair_case c;
    uint64_t t1 = 0, t2 = 0;
    redisReply *x;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    assert_int_equal(dist_mutex_token(&c.m, &t1), 0);
    assert_int_equal(dist_mutex_lock(&c.m), 0);
    assert_int_equal(dist_mutex_trylock(&c.m), 0);
    assert_int_equal(dist_mutex_token(&c.m, &t2), 0);
    assert_true(t1 >= 1 && t1 == t2);
    x = tu_cmd(&r, "HVALS", c.n.lock, NULL);
    assert_non_null(x);
    assert_int_equal(x->elements, 1);
    assert_string_equal(x->element[0]->str, "3");
    freeReplyObject(x);
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_int_equal(exists(c.n.lock), 1);
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_int_equal(exists(c.n.lock), 0);
    assert_int_equal(dist_mutex_unlock(&c.m), EPERM);
    case_end(&c);
}

/* What was published on sub for 0.5 s: messages, and how many went to the
 * channel of head (one ending in ":<head>") and to others. */
static void count_messages(redisContext *sub, const char *head, int *messages,
                           int *to_head, int *to_other)
{
    double end = tu_now() + 0.5;
    size_t hl = strlen(head);

    while (tu_now() < end) {
        void *reply = NULL;
        redisReply *x;

        if (redisGetReply(sub, &reply) != REDIS_OK)
            break; /* read timeout of the admin connection */
        x = reply;
        if (x->type == REDIS_REPLY_ARRAY && x->elements == 4) {
            const char *ch = x->element[2]->str;
            size_t cl = strlen(ch);

            (*messages)++;
            if (cl > hl && strcmp(ch + cl - hl, head) == 0 &&
                ch[cl - hl - 1] == ':')
                (*to_head)++;
            else
                (*to_other)++;
        }
        freeReplyObject(x);
    }
}

/* Only the head's own channel hears a release; the lock's channel does not. */
static void test_release_wakes_only_head(void **state)
{
    struct fair_case c;
    struct waiter w;
    redisContext *sub;
    redisReply *x;
    char pattern[256], *head;
    int messages = 0, to_head = 0, to_other = 0;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    join_queue(&c, &w, &c.m, 0, 0, 1, 3.0);
    head = tu_cmd_str(&r, "LINDEX", c.n.queue, "0", NULL);
    assert_non_null(head);

    sub = tu_redis_admin(&r);
    assert_non_null(sub);
    snprintf(pattern, sizeof pattern, "redisson_lock__channel:{%s}*",
             c.n.lock);
    x = redisCommand(sub, "PSUBSCRIBE %s", pattern);
    assert_non_null(x);
    freeReplyObject(x);

    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    pthread_join(w.th, NULL);
    assert_int_equal(c.o->rc[0], 0);
    count_messages(sub, head, &messages, &to_head, &to_other);
    redisFree(sub);
    free(head);
    /* the waiter's own unlock had nobody queued: nothing published */
    assert_int_equal(to_head, 1);
    assert_int_equal(to_other, 0);
    assert_int_equal(messages, 1);
    case_end(&c);
}

/* Redis restarts while waiters queue: the holder's hold is lost, the
 * waiters queue again and all acquire. */
static void test_restart_while_queued(void **state)
{
    struct fair_case c;
    struct waiter w[2];
    int i;

    (void)state;
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    case_begin(&c, __func__, 0, 1);
    for (i = 0; i < 2; i++)
        join_queue(&c, &w[i], &c.m, i, 15, i + 1, 3.0);
    assert_int_equal(tu_redis_restart(&r), 0);
    for (i = 0; i < 2; i++)
        pthread_join(w[i].th, NULL);
    assert_int_equal(dist_mutex_unlock(&c.m), EPERM);
    dist_set_watchdog_ms(30000);
    for (i = 0; i < 2; i++)
        if (c.o->rc[i] != 0)
            fail_msg("waiter %d: %s", i, strerror(c.o->rc[i]));
    queue_gone(&c);
    assert_int_equal(exists(c.n.lock), 0);
    case_end(&c);
}

/* The server stops mid-unlock: unlock says EIO, and once it runs again the
 * renewal thread finishes the release with the fair script, which tells the
 * queued head: it gets the lock in seconds, not after a 30 s lease. */
static void test_unknown_release_wakes_head(void **state)
{
    struct fair_case c;
    struct waiter w;
    double t_cont;
    int rc;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    join_queue(&c, &w, &c.m, 0, 20, 1, 3.0);

    assert_int_equal(dist_set_timeout_ms(300), 0);
    assert_int_equal(tu_redis_signal(&r, SIGSTOP), 0);
    rc = dist_mutex_unlock(&c.m);
    assert_int_equal(tu_redis_signal(&r, SIGCONT), 0);
    t_cont = tu_now();
    dist_set_timeout_ms(2000);
    pthread_join(w.th, NULL);
    assert_int_equal(rc, EIO);
    assert_int_equal(c.o->rc[0], 0);
    if (c.o->t[0] - t_cont > 5.0)
        fail_msg("the head got the lock %.3f s after the server resumed",
                 c.o->t[0] - t_cont);
    assert_int_equal(exists(c.n.queue), 0);
    case_end(&c);
}

/* ---- grants: a release makes a distlock head the holder ------------------ */

/* A fair mutex's waiter that reports its token and holds the lock until
 * told to let go. */
struct grantee {
    dist_mutex_t *m;
    int rc;
    uint64_t token;
    atomic_int got;     /* it holds the lock */
    atomic_int release; /* let go now */
    pthread_t th;
};

static void *grantee_main(void *arg)
{
    struct grantee *g = arg;

    g->rc = dist_mutex_lock(g->m);
    if (g->rc != 0)
        return NULL;
    if (dist_mutex_token(g->m, &g->token) != 0)
        g->rc = -1;
    atomic_store(&g->got, 1);
    while (!atomic_load(&g->release))
        tu_sleep_ms(1);
    if (dist_mutex_unlock(g->m) != 0)
        g->rc = -2;
    return NULL;
}

/* g starts waiting on c's lock, held by someone else, and is queued; its
 * owner (the queue's head) in head (freed by the caller). */
static long long scripts_run(void)
{
    return command_calls_on(&r, "evalsha") + command_calls_on(&r, "eval");
}

static char *grantee_go(struct fair_case *c, struct grantee *g)
{
    long long s0 = scripts_run();
    double end;

    memset(g, 0, sizeof *g);
    g->m = &c->m;
    assert_int_equal(pthread_create(&g->th, NULL, grantee_main, g), 0);
    assert_true(queue_reaches(c->n.queue, 1, 5.0));
    /* asleep: its first try queued it, and a fresh subscription has it
     * try once more before it sleeps (wait_on), which a count of the
     * scripts of one hand-off must not take for the hand-off's */
    end = tu_now() + 10.0;
    while (scripts_run() < s0 + 2 && tu_now() < end)
        tu_sleep_ms(2);
    assert_true(scripts_run() >= s0 + 2);
    return tu_cmd_str(&r, "LINDEX", c->n.queue, "0", NULL);
}

/* Whether owner's own channel of c's lock has a subscriber within secs:
 * a waiter subscribes after its first try queued it, and only one that
 * listens is granted the lock (prelude_grant.lua). */
static int listens_within(const struct fair_case *c, const char *owner,
                          double secs)
{
    double end = tu_now() + secs;
    char chan[300];
    redisReply *x;
    long long n = 0;

    snprintf(chan, sizeof chan, "%s:%s", c->n.chan, owner);
    while (n < 1 && tu_now() < end) {
        x = tu_cmd(&r, "PUBSUB", "NUMSUB", chan, NULL);
        assert_non_null(x);
        if (x->type == REDIS_REPLY_ARRAY && x->elements == 2)
            n = x->element[1]->integer;
        freeReplyObject(x);
        if (n < 1)
            tu_sleep_ms(2);
    }
    return n >= 1;
}

/* Whether g holds the lock within secs. */
static int grantee_got(struct grantee *g, double secs)
{
    double end = tu_now() + secs;

    while (!atomic_load(&g->got) && tu_now() < end)
        tu_sleep_ms(2);
    return atomic_load(&g->got);
}

/* g lets go of c's lock, which is gone then: its unlock gave back the
 * one hold Redis counted (a release may be deferred: its reply is read
 * later, so the lock goes a moment after the unlock returns). */
static void grantee_done(const struct fair_case *c, struct grantee *g)
{
    double end;

    atomic_store(&g->release, 1);
    pthread_join(g->th, NULL);
    assert_int_equal(g->rc, 0);
    for (end = tu_now() + slack(2.0); exists(c->n.lock) && tu_now() < end;)
        tu_sleep_ms(2);
    assert_int_equal(exists(c->n.lock), 0);
}

/* The derived names a grant touches. */
struct grant_names {
    char marks[200], counter[200];
};

static void grant_names(const struct fair_case *c, struct grant_names *k)
{
    snprintf(k->marks, sizeof k->marks, "distlock_fair_waiters:{%s}",
             c->n.lock);
    snprintf(k->counter, sizeof k->counter, "redisson_lock_token:{%s}",
             c->n.lock);
}

/* HGET N owner is "1": owner holds the lock once. */
static void holds_once(const struct fair_case *c, const char *owner)
{
    char *v = tu_cmd_str(&r, "HGET", c->n.lock, owner, NULL);

    assert_non_null(v);
    assert_string_equal(v, "1");
    free(v);
}

/* The lock held by another client's owner: HSET N owner 1, a minute's
 * lease. */
static void held_by(const struct fair_case *c, const char *owner)
{
    assert_int_equal(tu_cmd_int(&r, "HSET", c->n.lock, owner, "1", NULL), 1);
    assert_int_equal(tu_cmd_int(&r, "PEXPIRE", c->n.lock, "60000", NULL), 1);
}

/* A grant's case: c's lock held by holder, another client's owner, and g
 * queued at its head, listening on its channel; g's owner returned. */
static char *grant_case(struct fair_case *c, struct grant_names *k,
                        struct grantee *g, const char *test,
                        const char *holder)
{
    char *head;

    case_begin(c, test, 0, 0);
    grant_names(c, k);
    held_by(c, holder);
    head = grantee_go(c, g);
    assert_non_null(head);
    assert_true(listens_within(c, head, 5.0));
    return head;
}

static void grant_case_end(struct fair_case *c, char *head)
{
    free(head);
    queue_gone(c);
    case_end(c);
}

/* g took c's lock as granted, head being its owner: it holds the lock
 * once, with the token last drawn, which is returned. */
static uint64_t granted_to(const struct fair_case *c,
                           const struct grant_names *k,
                           const struct grantee *g, const char *head)
{
    char *tok = tu_cmd_str(&r, "GET", k->counter, NULL);
    uint64_t drawn;

    holds_once(c, head);
    assert_non_null(tok);
    drawn = strtoull(tok, NULL, 10);
    free(tok);
    assert_int_equal(g->token, drawn);
    return drawn;
}

/* fair_cancel run by owner, a waiter of another client that holds the
 * grant (fresh: "fresh" or ""): the token of the grant it passed on, 0
 * none.  It was not queued. */
static long long cancel_as(const struct fair_case *c,
                           const struct grant_names *k, const char *owner,
                           const char *fresh)
{
    redisReply *x =
        run_script("fair_cancel", 6, c->n.lock, c->n.queue, c->n.timeout,
                   c->n.chan, k->marks, k->counter, owner, "publish", "0",
                   "60000", "60000", fresh, NULL);
    long long granted;

    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 2);
    assert_int_equal(x->element[0]->integer, 0);
    granted = x->element[1]->integer;
    freeReplyObject(x);
    return granted;
}

/* The release grants the lock to the distlock head: the head's waiting
 * call returns holding it, with the token the release drew, and no script
 * of its own (it ran fair_lock a second time to take it: 2 scripts per
 * hand-off, and a second round trip on the hand-off's path). */
static void test_grant_one_script(void **state)
{
    struct fair_case c;
    struct grant_names k;
    struct grantee g;
    long long s0, s1;
    char *head;

    (void)state;
    /* no renewal of the waiter's place nor of the hold in the count: a
     * long window, an explicit lease */
    assert_int_equal(dist_set_waiter_ms(60000), 0);
    case_begin(&c, __func__, 60000, 1);
    /* the server has the release script (not an EVALSHA refused, then an
     * EVAL) */
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_int_equal(dist_mutex_lock(&c.m), 0);
    grant_names(&c, &k);
    head = grantee_go(&c, &g);
    assert_non_null(head);
    assert_true(listens_within(&c, head, 5.0));
    s0 = scripts_run();
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_true(grantee_got(&g, 5.0));
    s1 = scripts_run();
    granted_to(&c, &k, &g, head);
    print_message("hand-off to a distlock head: %lld script(s)\n", s1 - s0);
    assert_int_equal(s1 - s0, 1);
    grantee_done(&c, &g);
    grant_case_end(&c, head);
}

/* A grant drawn before the waiter's last try, heard after it (its hold
 * ended with its lease while the waiter's process was stopped, and
 * another took the lock): the wait takes it for no grant of its own, and
 * takes the lock when it is really granted, with that grant's token.
 * Played by a grant message of a token below the counter the waiter's
 * tries saw; before fair_lock said what it saw, the waiter returned at
 * once "holding" a lock held by another (the torture run's fencing token
 * that went backwards). */
static void test_stale_grant_ignored(void **state)
{
    struct fair_case c;
    struct grant_names k;
    struct grantee g;
    char chan[300], msg[64], *head, *tok;
    unsigned long long seen;

    (void)state;
    assert_int_equal(dist_set_waiter_ms(60000), 0);
    case_begin(&c, __func__, 60000, 1);
    grant_names(&c, &k);
    head = grantee_go(&c, &g);
    assert_non_null(head);
    assert_true(listens_within(&c, head, 5.0));
    tok = tu_cmd_str(&r, "GET", k.counter, NULL);
    assert_non_null(tok);
    seen = strtoull(tok, NULL, 10);
    free(tok);
    snprintf(chan, sizeof chan, "%s:%s", c.n.chan, head);
    snprintf(msg, sizeof msg, "g%llu:60000", seen - 1);
    assert_int_equal(tu_cmd_int(&r, "PUBLISH", chan, msg, NULL), 1);
    assert_false(grantee_got(&g, 0.5));
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_true(grantee_got(&g, 5.0));
    assert_true(granted_to(&c, &k, &g, head) > seen);
    grantee_done(&c, &g);
    grant_case_end(&c, head);
}

/* test_grant_one_script's teardown: the group's window again. */
static int window_back(void **state)
{
    (void)state;
    return dist_set_waiter_ms(WAITER_MS);
}

/* A grant whose message was lost (its pub/sub link dropped): the waiter's
 * renewal finds it no longer queued and tells it, and its try finds the
 * lock its own: held once, with the grant's token, as granted (fair_lock
 * counted it as a reentry, 2 holds, and the take then gave one back and
 * drew another token). */
static void test_grant_lost_is_claimed(void **state)
{
    const char *other = "00000000-0000-0000-0000-000000000000:1";
    struct fair_case c;
    struct grant_names k;
    struct grantee g;
    char *head, tok[32];
    redisReply *t;

    (void)state;
    head = grant_case(&c, &k, &g, __func__, other);
    /* what the grant leaves, but its message: the head out of the queue,
     * its deadline and its mark, the lock its own, a token drawn */
    t = tu_cmd(&r, "TIME", NULL);
    assert_non_null(t);
    snprintf(tok, sizeof tok, "%s%06lld", t->element[0]->str,
             atoll(t->element[1]->str));
    freeReplyObject(t);
    assert_int_equal(tu_cmd_int(&r, "LPOP", c.n.queue, NULL), -1);
    tu_cmd_int(&r, "ZREM", c.n.timeout, head, NULL);
    tu_cmd_int(&r, "ZREM", k.marks, head, NULL);
    tu_cmd_int(&r, "DEL", c.n.lock, NULL);
    held_by(&c, head);
    freeReplyObject(tu_cmd(&r, "SET", k.counter, tok, NULL));
    /* told by its renewal within a third of its window */
    assert_true(grantee_got(&g, slack(3.0 * WAITER_MS / 1000)));
    assert_int_equal(granted_to(&c, &k, &g, head), strtoull(tok, NULL, 10));
    grantee_done(&c, &g); /* one unlock let it go */
    grant_case_end(&c, head);
}

/* A waiter that gives up at the moment it is granted the lock (its last
 * try looked before the grant, the message has not come): its cancel
 * finds the hold in its name and passes it on to the next distlock head,
 * whose call returns holding it.  Played here with the library's own
 * fair_cancel for a waiter of another client, whose hold is the grant:
 * deterministic, which a real deadline racing a release is not.  Only a
 * caller that holds nothing ('fresh') passes a hold on. */
static void test_cancel_passes_grant_on(void **state)
{
    const char *gone = "00000000-0000-0000-0000-000000000000:2";
    struct fair_case c;
    struct grant_names k;
    struct grantee g;
    char *head;

    (void)state;
    head = grant_case(&c, &k, &g, __func__, gone);
    freeReplyObject(tu_cmd(&r, "SET", k.counter, "1000", NULL));
    assert_int_equal(cancel_as(&c, &k, gone, ""), 0); /* kept */
    holds_once(&c, gone);
    /* passed on: the grant's token said, a new one drawn for the head */
    assert_int_equal(cancel_as(&c, &k, gone, "fresh"), 1000);
    assert_true(grantee_got(&g, 5.0));
    assert_true(granted_to(&c, &k, &g, head) > 1000);
    grantee_done(&c, &g);
    grant_case_end(&c, head);
}

/* A Redisson waiter at the head (an entry without a mark) is not granted
 * the lock, though it listens on its own channel: it is told '0' there, as
 * Redisson's release tells it, and takes the lock itself. */
static void test_redisson_head_only_told(void **state)
{
    const char *rid = "00000000-0000-0000-0000-000000000000:3";
    struct fair_case c;
    char chan[300];
    redisContext *sub;
    redisReply *x;
    void *reply = NULL;

    (void)state;
    case_begin(&c, __func__, 0, 1);
    redisson_queued(&c, rid);
    snprintf(chan, sizeof chan, "%s:%s", c.n.chan, rid);
    sub = tu_redis_admin(&r);
    assert_non_null(sub);
    x = redisCommand(sub, "SUBSCRIBE %s", chan);
    assert_non_null(x);
    freeReplyObject(x);

    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    assert_int_equal(redisGetReply(sub, &reply), REDIS_OK);
    x = reply;
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 3);
    assert_string_equal(x->element[1]->str, chan);
    assert_string_equal(x->element[2]->str, "0");
    freeReplyObject(x);
    redisFree(sub);
    assert_int_equal(exists(c.n.lock), 0);
    assert_int_equal(llen(c.n.queue), 1);
    tu_cmd_int(&r, "DEL", c.n.queue, c.n.timeout, NULL);
    case_end(&c);
}

/* ---- what an idle queue costs --------------------------------------------- */

/* Commands the server ran so far, those scripts called included (INFO
 * commandstats counts them), but INFO itself. */
static long long commands_run(void)
{
    char *info = tu_cmd_str(&r, "INFO", "commandstats", NULL);
    long long n = 0;
    const char *p, *calls;

    assert_non_null(info);
    for (p = info; (p = strstr(p, "cmdstat_")) != NULL; p++)
        if ((calls = strstr(p, ":calls=")) != NULL &&
            strncmp(p, "cmdstat_info:", 13) != 0)
            n += atoll(calls + 7);
    free(info);
    return n;
}

/* Commands per second the server runs while n fair waiters wait behind a
 * held lock and nothing else happens; then they all get it in turn. */
static double idle_rate(const char *test, int n)
{
    struct fx_locker *w = calloc((size_t)n, sizeof *w);
    struct fair_case c;
    long long c0, c1;
    double t0, t1, settle = WAITER_MS / 1000.0;
    int i;

    assert_non_null(w);
    case_begin(&c, test, 0, 1);
    for (i = 0; i < n; i++)
        fx_locker_start(&w[i], &c.m, 0);
    assert_true(queue_reaches(c.n.queue, n, slack(20)));
    /* the waiters' first tries are done, their renewals under way */
    tu_sleep_ms((long)(settle * 1000));
    c0 = commands_run();
    t0 = tu_now();
    tu_sleep_ms(3 * WAITER_MS);
    c1 = commands_run();
    t1 = tu_now();
    assert_int_equal(dist_mutex_unlock(&c.m), 0);
    for (i = 0; i < n; i++) {
        fx_locker_join(&w[i]);
        assert_int_equal(w[i].rc, 0);
    }
    /* each gave the lock back */
    assert_int_equal(exists(c.n.lock), 0);
    queue_gone(&c);
    case_end(&c);
    free(w);
    return (double)(c1 - c0) / (t1 - t0);
}

/* A waiter renews its place with its own entry only, the waiters of a
 * process on one lock in one call, and one behind others does not try
 * again on its own: ten times the waiters cost nowhere near ten times the
 * commands (it was a hundred times: every renewal and every try of every
 * waiter read the whole queue and every deadline ahead of it). */
static void test_idle_queue_cost(void **state)
{
    double few, many;

    (void)state;
    few = idle_rate("idle5", 5);
    many = idle_rate("idle50", 50);
    print_message(
        "idle fair queue: %.0f commands/s with 5 waiters, %.0f with "
        "50\n",
        few, many);
    assert_true(many <= 2 * few + 60);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_across_processes),
        cmocka_unit_test(test_fifo_leases_expire),
        cmocka_unit_test(test_dead_head_evicted),
        cmocka_unit_test(test_dead_waiters_behind_head),
        cmocka_unit_test(test_giving_up_leaves_no_entry),
        cmocka_unit_test(test_trylock_respects_queue),
        cmocka_unit_test(test_reentrant_counts),
        cmocka_unit_test(test_release_wakes_only_head),
        cmocka_unit_test(test_restart_while_queued),
        cmocka_unit_test(test_unknown_release_wakes_head),
        cmocka_unit_test_teardown(test_grant_one_script, window_back),
        cmocka_unit_test_teardown(test_stale_grant_ignored, window_back),
        cmocka_unit_test(test_grant_lost_is_claimed),
        cmocka_unit_test(test_cancel_passes_grant_on),
        cmocka_unit_test(test_redisson_head_only_told),
        cmocka_unit_test(test_idle_queue_cost),
        FX_NO_CHANNELS_LEFT,
    };
    return fx_run_group(tests, &r, &defaults, "TEST_FAIR_FILTER");
}
