/*
 * test_cost_pair: Redis commands per lock/unlock pair, counted by the
 * server (INFO commandstats).  Against a private redis-server:
 *
 *   - an uncontended pair runs two scripts and nothing else, also once the
 *     replica count the last ROLE read is over a second old (the acquire
 *     script reads it then, with INFO inside the script: no ROLE), also
 *     when three threads take turns then (one count read for the process,
 *     not one per thread);
 *   - a contended pair runs one acquire script per wake-up of the waiter,
 *     none more when its channel is subscribed already (with the pub/sub
 *     thread reading every message: see main), and no ROLE either;
 *   - with a replica attached, a new hold still waits for it (WAIT) on the
 *     count an acquire script read, and fails with DIST_ENOREPLICA when the
 *     replica is stopped, without a ROLE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
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

#define MUTEX_PROG   "test_cost_pair"
#define MUTEX_FILTER "TEST_COST_FILTER"
#include "mutexhelp.h"
#include "costhelp.h"

/* m taken and given back twice, a second apart, then a second's pause:
 * the replica count the process last read is over a second old, and the
 * server has cached the acquire script that reads it (its first EVALSHA
 * is a NOSCRIPT, then an EVAL: two scripts more). */
static void count_stale(dist_mutex_t *m)
{
    int i;

    for (i = 0; i < 2; i++) {
        assert_int_equal(dist_mutex_lock(m), 0);
        assert_int_equal(dist_mutex_unlock(m), 0);
        tu_sleep_ms(1100);
    }
}

/* A mutex whose release is waited for: a deferred one's script may reach
 * the server after the count is read. */
static void init_waited(dist_mutex_t *m, const char *name)
{
    dist_mutexattr_t a;

    dist_mutexattr_init(&a);
    dist_mutexattr_setdeferred(&a, 0);
    assert_int_equal(dist_mutex_init(m, name, &a), 0);
    dist_mutexattr_destroy(&a);
}

/* A waited mutex of name, the replica count it reads stale: a test's
 * counts begin with its link made and its script cached. */
static void init_stale(dist_mutex_t *m, const char *name)
{
    init_waited(m, name);
    count_stale(m);
}

/* The server's counts at a point of a test, and the time then. */
struct counts {
    long long scripts, roles, infos;
    double t;
};

static void counts_now(struct counts *c)
{
    c->scripts = scripts_run();
    c->roles = calls_of("role");
    c->infos = infos_in_scripts();
    c->t = tu_now();
}

/* Since c: no ROLE; the replica count was read by acquire scripts (INFO
 * inside the script), at least once and at most once a second for the
 * process. */
static void assert_count_read_in_scripts(const struct counts *c)
{
    long long infos = infos_in_scripts() - c->infos;
    double el = tu_now() - c->t;

    assert_int_equal(calls_of("role") - c->roles, 0);
    assert_true(infos >= 1);
    if (infos > (long long)el + 1)
        fail_msg("%lld counts read in %.1f s", infos, el);
}

#define PAIRS 100

static void test_uncontended_pair(void **state)
{
    struct counts c0;
    long long sub0;
    dist_mutex_t m;
    char name[200];
    int i;

    (void)state;
    NAME(name, "m");
    init_stale(&m, name); /* connects first */
    sub0 = calls_of("subscribe");
    counts_now(&c0);
    for (i = 0; i < PAIRS; i++) {
        assert_int_equal(dist_mutex_lock(&m), 0);
        assert_int_equal(dist_mutex_unlock(&m), 0);
    }
    assert_int_equal(scripts_run() - c0.scripts, 2 * PAIRS);
    /* the first acquire read the count, in its script, for the new hold's
     * replica sync and for a second of the ones after it (a ROLE after
     * the hold before) */
    assert_count_read_in_scripts(&c0);
    assert_int_equal(calls_of("subscribe") - sub0, 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* A thread that takes a lock and gives it back each time it is told to
 * (go), rounds times, and says when it is done (done, its result in rc):
 * the turns of test_count_once_per_process, the waiter of the contended
 * pair. */
struct taker {
    dist_mutex_t *m;
    int rounds;
    sem_t go, done;
    int rc;
    pthread_t th;
};

static void *taker_main(void *arg)
{
    struct taker *t = arg;
    int i;

    for (i = 0; i < t->rounds; i++) {
        sem_wait(&t->go);
        t->rc = dist_mutex_lock(t->m);
        if (t->rc == 0)
            t->rc = dist_mutex_unlock(t->m);
        sem_post(&t->done);
    }
    return NULL;
}

static void taker_start(struct taker *t, dist_mutex_t *m, int rounds)
{
    t->m = m;
    t->rounds = rounds;
    sem_init(&t->go, 0, 0);
    sem_init(&t->done, 0, 0);
    assert_int_equal(pthread_create(&t->th, NULL, taker_main, t), 0);
}

/* One round of t, waited for: its result. */
static int taker_turn(struct taker *t)
{
    sem_post(&t->go);
    sem_wait(&t->done);
    return t->rc;
}

/* After its last round. */
static void taker_join(struct taker *t)
{
    pthread_join(t->th, NULL);
    sem_destroy(&t->go);
    sem_destroy(&t->done);
}

/* Threads that each take a lock now and then, a second after their own
 * link read ROLE, while the process reads it for all of them. */
#define TURNS 3

static void test_count_once_per_process(void **state)
{
    struct taker t[TURNS];
    struct counts c0;
    dist_mutex_t m;
    char name[200];
    int i;

    (void)state;
    NAME(name, "m");
    init_stale(&m, name); /* the script that reads the count cached */
    for (i = 0; i < TURNS; i++)
        taker_start(&t[i], &m, 2);
    /* each thread's link made (its ROLE read) */
    for (i = 0; i < TURNS; i++)
        assert_int_equal(taker_turn(&t[i]), 0);
    tu_sleep_ms(1200); /* every count read is over a second old */
    counts_now(&c0);
    for (i = 0; i < TURNS; i++)
        assert_int_equal(taker_turn(&t[i]), 0);
    assert_int_equal(scripts_run() - c0.scripts, 2 * TURNS);
    /* the first acquire reads the count for the process, in its script;
     * the others take its count (one ROLE per thread once, then one ROLE
     * for the process) */
    assert_count_read_in_scripts(&c0);
    for (i = 0; i < TURNS; i++)
        taker_join(&t[i]);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* The contended pair: the main thread holds, a waiter asks, the main
 * thread lets go once the waiter's first try was refused and it had time
 * to fall asleep, the waiter takes it and lets go. */
#define ROUNDS 6

static long long messages_heard(void)
{
    struct dist_stats s;

    assert_int_equal(dist_stats_get(&s), 0);
    return (long long)s.pubsub_messages;
}

/* Every unlock publishes, and the process hears its own: the rounds start
 * once those of the last one were heard (a message still on its way when
 * the waiter next tries is one it must try again for), and a millisecond
 * later (the clock the waiter compares with has no finer grain). */
static void heard_all(long long n)
{
    double t0 = tu_now();

    while (messages_heard() < n && tu_now() - t0 < 10)
        tu_sleep_ms(1);
    assert_true(messages_heard() >= n);
    tu_sleep_ms(2);
}

/* One contended pair; the scripts it ran. */
static long long contended_round(dist_mutex_t *m, struct taker *w)
{
    long long s0 = scripts_run(), s;
    double t0;

    assert_int_equal(dist_mutex_lock(m), 0);
    s = scripts_run();
    sem_post(&w->go);
    /* the waiter's first try, refused */
    t0 = tu_now();
    while (scripts_run() == s && tu_now() - t0 < 10)
        tu_sleep_ms(1);
    tu_sleep_ms(100);
    assert_int_equal(dist_mutex_unlock(m), 0);
    sem_wait(&w->done);
    assert_int_equal(w->rc, 0);
    return scripts_run() - s0;
}

static void test_contended_pair(void **state)
{
    struct taker w;
    dist_mutex_t m;
    char name[200];
    struct counts c0;
    long long sub0, m0;
    int i;

    (void)state;
    NAME(name, "m");
    init_waited(&m, name);
    taker_start(&w, &m, ROUNDS + 2);
    /* a round that makes the waiter's and the pub/sub thread's links
     * (each reads ROLE when made), then a pause: the count is stale */
    contended_round(&m, &w);
    count_stale(&m);
    m0 = messages_heard();
    counts_now(&c0);
    /* this round subscribes the channel again; it stays subscribed for
     * 250 ms after each wait, and the rounds follow each other closer */
    contended_round(&m, &w);
    sub0 = calls_of("subscribe");
    for (i = 0; i < ROUNDS; i++) {
        /* the holder's lock and unlock, the waiter's refused try, its try
         * after the wake-up, its unlock: 5 (6 when a wait began with two
         * tries) */
        heard_all(m0 + 2 * (i + 1));
        assert_int_equal(contended_round(&m, &w), 5);
    }
    assert_int_equal(calls_of("subscribe") - sub0, 0);
    /* the count is read by acquire scripts, at most once a second for the
     * process (a ROLE a second before) */
    assert_count_read_in_scripts(&c0);
    taker_join(&w);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- replica sync ----------------------------------------------------- */

/* With a replica attached, a new hold still waits for it (WAIT) on the
 * count its acquire script read, with no ROLE; with the replica stopped
 * (the master still lists it), the hold fails with DIST_ENOREPLICA and is
 * given back.  Last: the group's server has a replica for a while. */
static void test_replica_still_waited(void **state)
{
    long long w0, r0, i0;
    tu_redis_t rep;
    dist_mutex_t m;
    char name[200];

    (void)state;
    NAME(name, "m");
    start_replica(&r, &rep);
    init_stale(&m, name);
    w0 = calls_of("wait");
    r0 = calls_of("role");
    i0 = infos_in_scripts();
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(tu_cmd_int(&rep, "EXISTS", name, NULL), 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    if (calls_of("wait") - w0 != 1)
        fail_msg("the hold was not made to wait for the replica (no WAIT)");
    assert_int_equal(calls_of("role") - r0, 0);
    assert_true(infos_in_scripts() - i0 >= 1);

    /* stopped, the replica acknowledges nothing within the default 1 s
     * (a setting changed would make the thread's links anew, each with a
     * ROLE): the hold is given back */
    assert_int_equal(tu_redis_signal(&rep, SIGSTOP), 0);
    tu_sleep_ms(1100); /* the count is stale */
    r0 = calls_of("role");
    assert_int_equal(dist_mutex_lock(&m), DIST_ENOREPLICA);
    assert_non_null(strstr(dist_last_error(), "replica"));
    assert_int_equal(calls_of("role") - r0, 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", name, NULL), 0);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    assert_int_equal(tu_redis_signal(&rep, SIGCONT), 0);
    tu_redis_stop(&rep);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

int main(void)
{
    /* The pub/sub thread reads every message, as it does for a process
     * with several waiters: a lone waiter that reads its own (direct
     * wake) leaves its own release's message unread until its next wait,
     * which then wakes once for nothing, one script more. */
    setenv("DISTLOCK_DIRECT_WAKE", "0", 1);
    const struct CMUnitTest tests[] = {
        FX_TEST(test_uncontended_pair),
        FX_TEST(test_count_once_per_process),
        FX_TEST(test_contended_pair),
        FX_TEST(test_replica_still_waited),
    };
    return MUTEX_RUN(tests);
}
