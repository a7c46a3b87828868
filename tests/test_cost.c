/*
 * test_cost: costs that must not grow with what they need not grow with.
 * Against a private redis-server:
 *
 *   - 100,000 dist_mutex_init of distinct names end well within 20 s (the
 *     per-name registry, a list once, took 154 s), and a name made again
 *     among them still finds the state it shares;
 *   - heap per held lock stays within a bound (mallinfo2: exact, not a
 *     timing);
 *   - Redis commands per lock/unlock pair, counted by the server (INFO
 *     commandstats): an uncontended pair runs two scripts and nothing
 *     else, also once the replica count the last ROLE read is over a
 *     second old (the acquire script reads it then, with INFO inside the
 *     script: no ROLE), also when three threads take turns then (one
 *     count read for the process, not one per thread); a contended pair
 *     runs one acquire script per wake-up of the waiter, none more when
 *     its channel is subscribed already (with the pub/sub thread reading
 *     every message: see main), and no ROLE either;
 *   - with a replica attached, a new hold still waits for it (WAIT) on
 *     the count an acquire script read, and fails with DIST_ENOREPLICA
 *     when the replica is stopped, without a ROLE;
 *   - the herd: threads in 4 processes on one lock, at most 4 commands
 *     clients send and 2 release messages heard per hand-off (one release
 *     wakes one waiter, not one per process); the same on a fair mutex,
 *     whose hand-off is one message to the head of the queue and three
 *     scripts, none more when the head comes back within the millisecond
 *     it was woken in.
 *
 * Bounds hold on a loaded 2-core machine.  TEST_COST_FILTER=<glob> runs
 * some tests only.
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

static tu_redis_t r;
static const struct fx_settings defaults = { 30000, 2000, 0 };

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_cost", __func__, tag)

/* ---- many locks ------------------------------------------------------- */

#define MANY 100000

static void test_many_inits(void **state)
{
    dist_mutex_t *m = calloc(MANY, sizeof *m), again;
    char name[200];
    double t0, took;
    int i;

    (void)state;
    assert_non_null(m);
    t0 = tu_now();
    for (i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "test_cost-many-%d", i);
        assert_int_equal(dist_mutex_init(&m[i], name, NULL), 0);
    }
    took = tu_now() - t0;
    /* the list took 154 s here; a table that grows takes about 0.15 s on
     * a quiet machine */
    if (took >= 20.0)
        fail_msg("100,000 dist_mutex_init took %.1f s", took);

    /* a name made again, deep in the table, shares its state: the holds
     * of both objects are one owner's (a reentry) */
    snprintf(name, sizeof name, "test_cost-many-%d", MANY - 7);
    assert_int_equal(dist_mutex_init(&again, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m[MANY - 7]), 0);
    assert_int_equal(dist_mutex_trylock(&again), 0);
    assert_int_equal(dist_mutex_destroy(&m[MANY - 7]), EBUSY);
    assert_int_equal(dist_mutex_unlock(&again), 0);
    assert_int_equal(dist_mutex_unlock(&m[MANY - 7]), 0);
    assert_int_equal(dist_mutex_destroy(&again), 0);
    for (i = 0; i < MANY; i++)
        assert_int_equal(dist_mutex_destroy(&m[i]), 0);
    free(m);
}

#define HELD 2000

/* Heap in use, as malloc counts it (no timing, no RSS noise). */
static size_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();

    return mi.uordblks;
}

static void test_memory_per_held_lock(void **state)
{
    dist_mutex_t *m = calloc(HELD, sizeof *m), warm;
    size_t before, made, held;
    char name[200];
    int i;

    (void)state;
    assert_non_null(m);
    /* the connection and the renewal thread first, not counted */
    NAME(name, "warm");
    assert_int_equal(dist_mutex_init(&warm, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&warm), 0);
    assert_int_equal(dist_mutex_unlock(&warm), 0);
    assert_int_equal(dist_mutex_destroy(&warm), 0);
    before = heap_used();
    for (i = 0; i < HELD; i++) {
        snprintf(name, sizeof name, "test_cost-held-%d", i);
        assert_int_equal(dist_mutex_init(&m[i], name, NULL), 0);
    }
    made = heap_used();
    for (i = 0; i < HELD; i++)
        assert_int_equal(dist_mutex_lock(&m[i]), 0);
    held = heap_used();
    print_message("heap per lock made %zu B, per held lock %zu B\n",
                  (made - before) / HELD, (held - before) / HELD);
    if (held <= before) {
        /* a sanitizer's allocator: malloc's own counts stay 0 */
        for (i = 0; i < HELD; i++) {
            assert_int_equal(dist_mutex_unlock(&m[i]), 0);
            assert_int_equal(dist_mutex_destroy(&m[i]), 0);
        }
        free(m);
        skip();
    }
    /* 441 B here (glibc, x86-64), in malloc's chunks: object 48, per-name
     * state 96, names 64 (N only: derived names are made per call), the
     * holder's record 96 and its renewal entry 128 (the owner's number,
     * not its field); the mutex's courtesy record is made only once a
     * release reached waiters.  1,100 B while the object kept its seven
     * derived names, 649 B while the renewal entry kept the owner's field.
     * The target is 500 B; the bound leaves room for a field or
     * two more in the record or the entry (16 B each in chunks).  Per lock
     * made 216 B here. */
    if ((made - before) / HELD > 260)
        fail_msg("%zu B of heap per lock made", (made - before) / HELD);
    if ((held - before) / HELD > 480)
        fail_msg("%zu B of heap per held lock", (held - before) / HELD);
    for (i = 0; i < HELD; i++) {
        assert_int_equal(dist_mutex_unlock(&m[i]), 0);
        assert_int_equal(dist_mutex_destroy(&m[i]), 0);
    }
    free(m);
}

/* ---- commands per pair ------------------------------------------------ */

static long long own_infos; /* INFO commands calls_of sent */

/* calls of one command so far, by the server's count (INFO commandstats
 * counts the commands scripts call too: only those no script calls are
 * asked for here, and INFO, see infos_in_scripts) */
static long long calls_of(const char *cmd)
{
    redisReply *x = tu_cmd(&r, "INFO", "commandstats", NULL);
    char key[64];
    const char *p;
    long long n = 0;

    own_infos++;
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    if ((p = strstr(x->str, key)) != NULL)
        n = atoll(p + strlen(key));
    freeReplyObject(x);
    return n;
}

static long long scripts_run(void)
{
    return calls_of("evalsha") + calls_of("eval");
}

/* INFO commands so far but those calls_of sent (an INFO's count leaves
 * itself out): the ones acquire scripts ran to read the replica count,
 * plus what came before the test (compare two of them). */
static long long infos_in_scripts(void)
{
    long long before = own_infos;

    return calls_of("info") - before;
}

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

#define PAIRS 100

static void test_uncontended_pair(void **state)
{
    long long s0, r0, sub0, i0, infos;
    dist_mutex_t m;
    char name[200];
    double t0;
    int i;

    (void)state;
    NAME(name, "m");
    init_waited(&m, name);
    count_stale(&m); /* connects first */
    s0 = scripts_run();
    r0 = calls_of("role");
    sub0 = calls_of("subscribe");
    i0 = infos_in_scripts();
    t0 = tu_now();
    for (i = 0; i < PAIRS; i++) {
        assert_int_equal(dist_mutex_lock(&m), 0);
        assert_int_equal(dist_mutex_unlock(&m), 0);
    }
    infos = infos_in_scripts() - i0;
    assert_int_equal(scripts_run() - s0, 2 * PAIRS);
    /* the first acquire read the count, in its script, for the new hold's
     * replica sync and for a second of the ones after it (a ROLE after
     * the hold before) */
    assert_int_equal(calls_of("role") - r0, 0);
    assert_true(infos >= 1);
    assert_true(infos <= (long long)(tu_now() - t0) + 1);
    assert_int_equal(calls_of("subscribe") - sub0, 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* Threads that each take a lock now and then, a second after their own
 * link read ROLE, while the process reads it for all of them. */
#define TURNS 3

struct turn {
    dist_mutex_t *m;
    sem_t go, done;
    int rc;
};

static void *turn_taker(void *arg)
{
    struct turn *t = arg;
    int i;

    for (i = 0; i < 2; i++) {
        sem_wait(&t->go);
        t->rc = dist_mutex_lock(t->m);
        if (t->rc == 0)
            t->rc = dist_mutex_unlock(t->m);
        sem_post(&t->done);
    }
    return NULL;
}

static void test_count_once_per_process(void **state)
{
    struct turn t[TURNS];
    pthread_t th[TURNS];
    long long s0, r0, i0, infos;
    dist_mutex_t m;
    char name[200];
    double t0;
    int i;

    (void)state;
    NAME(name, "m");
    init_waited(&m, name);
    count_stale(&m); /* the script that reads the count cached */
    for (i = 0; i < TURNS; i++) {
        t[i].m = &m;
        sem_init(&t[i].go, 0, 0);
        sem_init(&t[i].done, 0, 0);
        assert_int_equal(pthread_create(&th[i], NULL, turn_taker, &t[i]), 0);
    }
    /* each thread's link made (its ROLE read) */
    for (i = 0; i < TURNS; i++) {
        sem_post(&t[i].go);
        sem_wait(&t[i].done);
        assert_int_equal(t[i].rc, 0);
    }
    tu_sleep_ms(1200); /* every count read is over a second old */
    s0 = scripts_run();
    r0 = calls_of("role");
    i0 = infos_in_scripts();
    t0 = tu_now();
    for (i = 0; i < TURNS; i++) {
        sem_post(&t[i].go);
        sem_wait(&t[i].done);
        assert_int_equal(t[i].rc, 0);
    }
    infos = infos_in_scripts() - i0;
    assert_int_equal(scripts_run() - s0, 2 * TURNS);
    /* the first acquire reads the count for the process, in its script;
     * the others take its count (one ROLE per thread once, then one ROLE
     * for the process) */
    assert_int_equal(calls_of("role") - r0, 0);
    assert_true(infos >= 1);
    if (infos > 1 && infos > (long long)(tu_now() - t0) + 1)
        fail_msg("%lld counts read for %d turns", infos, TURNS);
    for (i = 0; i < TURNS; i++) {
        pthread_join(th[i], NULL);
        sem_destroy(&t[i].go);
        sem_destroy(&t[i].done);
    }
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* The contended pair: the main thread holds, a waiter asks, the main
 * thread lets go once the waiter's first try was refused and it had time
 * to fall asleep, the waiter takes it and lets go. */
#define ROUNDS 6

struct waiter {
    dist_mutex_t *m;
    sem_t go, done;
    int rc;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    int i;

    for (i = 0; i < ROUNDS + 2; i++) {
        sem_wait(&w->go);
        w->rc = dist_mutex_lock(w->m);
        if (w->rc == 0)
            w->rc = dist_mutex_unlock(w->m);
        sem_post(&w->done);
    }
    return NULL;
}

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
static long long contended_round(dist_mutex_t *m, struct waiter *w)
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
    struct waiter w;
    pthread_t th;
    dist_mutex_t m;
    char name[200];
    long long sub0, r0, m0, i0, infos;
    double t0;
    int i;

    (void)state;
    NAME(name, "m");
    init_waited(&m, name);
    w.m = &m;
    sem_init(&w.go, 0, 0);
    sem_init(&w.done, 0, 0);
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    /* a round that makes the waiter's and the pub/sub thread's links
     * (each reads ROLE when made), then a pause: the count is stale */
    contended_round(&m, &w);
    count_stale(&m);
    m0 = messages_heard();
    r0 = calls_of("role");
    i0 = infos_in_scripts();
    t0 = tu_now();
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
    assert_int_equal(calls_of("role") - r0, 0);
    infos = infos_in_scripts() - i0;
    assert_true(infos >= 1);
    assert_true(infos <= (long long)(tu_now() - t0) + 1);
    pthread_join(th, NULL);
    sem_destroy(&w.go);
    sem_destroy(&w.done);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* ---- the herd ----------------------------------------------------------- */

/* HERD_THREADS threads in each of HERD_PROCS processes loop on lock/unlock
 * of one mutex.  Each release used to be heard by every process with a
 * waiter, each of which tried: about 2.5 + 1.06 x P commands per hand-off
 * (6.6-6.9 here for P = 4).  Now a release wakes one registered waiter:
 * an unlock, the winner's try and the next refused try, 3 (a few waiter
 * renewals more on a slow machine), and about one message heard
 * per hand-off in all the processes. */
#define HERD_PROCS    4
#define HERD_THREADS  5
#define HERD_HANDOFFS 300

struct herd {
    atomic_llong handoffs; /* locks taken, all processes */
    atomic_int started;    /* threads in their first call */
    atomic_int stop;
    atomic_int errors;
    atomic_int inside; /* threads inside now */
    atomic_int overlaps;
    _Atomic unsigned long long messages[HERD_PROCS]; /* heard so far */
    int fair;                                        /* a fair mutex */
};

struct herd_arg {
    struct herd *h;
    dist_mutex_t *m;
};

static void *herd_thread(void *arg)
{
    struct herd_arg *a = arg;

    atomic_fetch_add(&a->h->started, 1);
    while (!atomic_load(&a->h->stop)) {
        if (dist_mutex_lock(a->m) != 0) {
            atomic_fetch_add(&a->h->errors, 1);
            return NULL;
        }
        if (atomic_fetch_add(&a->h->inside, 1) != 0)
            atomic_fetch_add(&a->h->overlaps, 1);
        atomic_fetch_sub(&a->h->inside, 1);
        atomic_fetch_add(&a->h->handoffs, 1);
        if (dist_mutex_unlock(a->m) != 0) {
            atomic_fetch_add(&a->h->errors, 1);
            return NULL;
        }
    }
    return NULL;
}

/* One process of the herd: its threads, and its count of the release
 * messages it heard, kept up to date for the parent. */
static void herd_proc(struct herd *h, int idx, const char *name)
{
    pthread_t th[HERD_THREADS];
    struct herd_arg a;
    struct dist_stats st;
    dist_mutexattr_t at;
    dist_mutex_t m;
    int i, n = 0;

    if (dist_mutexattr_init(&at) != 0 ||
        dist_mutexattr_setfair(&at, h->fair) != 0 ||
        dist_mutex_init(&m, name, &at) != 0)
        _exit(1);
    dist_mutexattr_destroy(&at);
    a.h = h;
    a.m = &m;
    for (i = 0; i < HERD_THREADS; i++, n++)
        if (pthread_create(&th[i], NULL, herd_thread, &a) != 0) {
            atomic_fetch_add(&h->errors, 1);
            break;
        }
    while (!atomic_load(&h->stop)) {
        dist_stats_get(&st);
        atomic_store(&h->messages[idx], st.pubsub_messages);
        tu_sleep_ms(1);
    }
    for (i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    dist_mutex_destroy(&m);
    _exit(0);
}

/* Commands the library sends itself, by the server's count (those its
 * scripts run are counted apart, under their own names). */
static long long client_commands(void)
{
    static const char *const sent[] = {
        "evalsha", "eval", "subscribe", "unsubscribe", "role", "ping", "wait",
    };
    long long n = 0;
    size_t i;

    for (i = 0; i < sizeof sent / sizeof sent[0]; i++)
        n += calls_of(sent[i]);
    return n;
}

static unsigned long long herd_messages(struct herd *h)
{
    unsigned long long n = 0;
    int i;

    for (i = 0; i < HERD_PROCS; i++)
        n += atomic_load(&h->messages[i]);
    return n;
}

/* Waits until the herd took n locks (60 s at most). */
static void herd_await(struct herd *h, long long n)
{
    double t0 = tu_now();

    while (atomic_load(&h->handoffs) < n && !atomic_load(&h->errors) &&
           tu_now() - t0 < slack(60))
        tu_sleep_ms(1);
    assert_int_equal(atomic_load(&h->errors), 0);
    assert_true(atomic_load(&h->handoffs) >= n);
}

/* Runs the herd on a mutex (fair or not) and holds it to at most cmds_max
 * commands clients sent and msgs_max release messages heard per
 * hand-off. */
static void herd_bounded(int fair, double cmds_max, double msgs_max)
{
    struct herd *h;
    pid_t pid[HERD_PROCS];
    long long c0, c1, h0, h1;
    unsigned long long m0, m1;
    double cmds, msgs;
    char name[200];
    int i, st;

    NAME(name, fair ? "fair" : "plain");
    h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(h != MAP_FAILED);
    memset(h, 0, sizeof *h);
    h->fair = fair;
    for (i = 0; i < HERD_PROCS; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0)
            herd_proc(h, i, name);
    }
    /* every thread had a turn, and the first herd's subscriptions to the
     * lock's channel are let go (250 ms after their last waiter) */
    herd_await(h, HERD_PROCS * HERD_THREADS + 50);
    tu_sleep_ms(400);
    h0 = atomic_load(&h->handoffs);
    c0 = client_commands();
    m0 = herd_messages(h);
    herd_await(h, h0 + HERD_HANDOFFS);
    c1 = client_commands();
    m1 = herd_messages(h);
    h1 = atomic_load(&h->handoffs);
    atomic_store(&h->stop, 1);
    for (i = 0; i < HERD_PROCS; i++) {
        assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    /* the counts were read one after the other, while the herd ran on:
     * take the hand-offs between the first read and the last */
    cmds = (double)(c1 - c0) / (double)(h1 - h0);
    msgs = (double)(m1 - m0) / (double)(h1 - h0);
    print_message("%s, %d processes x %d threads: %.2f commands and %.2f "
                  "messages heard per hand-off (%lld hand-offs)\n",
                  fair ? "fair" : "plain", HERD_PROCS, HERD_THREADS, cmds,
                  msgs, h1 - h0);
    assert_int_equal(atomic_load(&h->errors), 0);
    assert_int_equal(atomic_load(&h->overlaps), 0);
    munmap(h, sizeof *h);
    if (cmds > cmds_max)
        fail_msg("%.2f commands per hand-off of a %s mutex (at most %.1f)",
                 cmds, fair ? "fair" : "plain", cmds_max);
    if (msgs > msgs_max)
        fail_msg("%.2f release messages heard per hand-off of a %s mutex "
                 "(at most %.1f)",
                 msgs, fair ? "fair" : "plain", msgs_max);
}

static void test_herd_commands_per_handoff(void **state)
{
    (void)state;
    herd_bounded(0, 4.0, 2.0);
}

/* The fair mutex's herd: the unlock tells the head of the queue alone,
 * on its own channel, and nobody else (the head's take tells only a
 * Redisson waiter next in line): one message.  The unlock, the head's
 * try that takes the lock and the releaser's next try, which joins the
 * queue: 3 scripts.  A head woken, given the lock and back for it within
 * the millisecond of its wake-up used to read its own wake-up as one that
 * may have come after that try, and try once more (3.8-3.9 commands here);
 * and the head's take told the next in line to reckon its sleep again,
 * a second message.  At most 3.5 and 1.5 say both are gone, with room
 * for waiter renewals (and their word to the head). */
static void test_fair_herd_commands_per_handoff(void **state)
{
    (void)state;
    herd_bounded(1, 3.5, 1.5);
}

/* ---- replica sync ----------------------------------------------------- */

/* With a replica attached, a new hold still waits for it (WAIT) on the
 * count its acquire script read, with no ROLE; with the replica stopped
 * (the master still lists it), the hold fails with DIST_ENOREPLICA and is
 * given back.  Last: the group's server has a replica for a while. */
static void test_replica_still_waited(void **state)
{
    const char *args[4] = { "--replicaof", "127.0.0.1", NULL, NULL };
    long long w0, r0, i0;
    tu_redis_opts o;
    tu_redis_t rep;
    dist_mutex_t m;
    char name[200], port[16];
    redisReply *x;
    int i;

    (void)state;
    NAME(name, "m");
    /* a full sync without the 5 s wait for more replicas */
    x = tu_cmd(&r, "CONFIG", "SET", "repl-diskless-sync-delay", "0", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    snprintf(port, sizeof port, "%d", r.port);
    args[2] = port;
    memset(&o, 0, sizeof o);
    o.args = args;
    assert_int_equal(tu_redis_start_opts(&rep, &o), 0);
    for (i = 0; i < 100 && tu_cmd_int(&r, "WAIT", "1", "100", NULL) < 1; i++)
        ;
    assert_true(i < 100);
    init_waited(&m, name);
    count_stale(&m);
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
#define T(f) cmocka_unit_test_teardown(f, fx_restore_defaults)
        T(test_many_inits),
        T(test_memory_per_held_lock),
        T(test_uncontended_pair),
        T(test_count_once_per_process),
        T(test_contended_pair),
        T(test_herd_commands_per_handoff),
        T(test_fair_herd_commands_per_handoff),
        T(test_replica_still_waited),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_COST_FILTER");
}
