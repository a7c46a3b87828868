/*
 * test_cost_herd: the herd: threads in 4 processes on one lock.  The plain
 * mutex: at most 4 commands clients send and 1.25 release messages heard
 * per hand-off (one release wakes one waiter, not one per process); the fair
 * mutex, whose hand-off is one message to the head of the queue, which
 * grants it the lock, and two scripts, none more when the head comes back
 * within the millisecond it was woken in.  Against a private redis-server.
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

#define MUTEX_PROG   "test_cost_herd"
#define MUTEX_FILTER "TEST_COST_FILTER"
#include "mutexhelp.h"
#include "costhelp.h"

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
    _Atomic unsigned long long unwaited[HERD_PROCS]; /* of those, for a
                                                      * channel no thread
                                                      * waited on */
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
        atomic_store(&h->unwaited[idx], st.pubsub_unwaited);
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

/* The release messages heard, and of those the ones no thread waited
 * for (*unwaited), as the processes last told; the hand-offs as of then
 * (those counted around the reading: the herd runs on meanwhile). */
static long long herd_messages(struct herd *h, unsigned long long *msgs,
                               unsigned long long *unwaited)
{
    long long h0 = atomic_load(&h->handoffs);
    int i;

    *msgs = *unwaited = 0;
    for (i = 0; i < HERD_PROCS; i++) {
        *msgs += atomic_load(&h->messages[i]);
        *unwaited += atomic_load(&h->unwaited[i]);
    }
    return (h0 + atomic_load(&h->handoffs)) / 2;
}

/* The commands clients sent, and the hand-offs as of their reading. */
static long long herd_commands(struct herd *h, long long *cmds)
{
    long long h0 = atomic_load(&h->handoffs);

    *cmds = client_commands();
    return (h0 + atomic_load(&h->handoffs)) / 2;
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
 * commands clients sent and msgs_max release messages heard per hand-off.
 * The thread wake-ups those caused are told too: a message wakes the
 * process's pub/sub thread and at most one waiting thread, none when no
 * thread waited on its channel (DISTLOCK_DIRECT_WAKE is off here), so at
 * most 2 x messages - unwaited ones; how many found no waiter depends on
 * the scheduling (0.04 to 0.29 per hand-off here), so the bound is on the
 * messages. */
static void herd_bounded(int fair, double cmds_max, double msgs_max)
{
    struct herd *h;
    pid_t pid[HERD_PROCS];
    long long c0, c1, hc0, hc1, hm0, hm1;
    unsigned long long m0, m1, u0, u1;
    double cmds, msgs, wakes;
    char name[200];
    int i, st;

    NAME(name, fair ? "fair" : "plain");
    h = shared_mem(sizeof *h);
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
    /* each count over the hand-offs as of its own reading: the seven INFO
     * commands take a while, and a count divided by hand-offs read a
     * moment away from it is off by the hand-offs of that moment */
    hc0 = herd_commands(h, &c0);
    hm0 = herd_messages(h, &m0, &u0);
    herd_await(h, hm0 + HERD_HANDOFFS);
    hm1 = herd_messages(h, &m1, &u1);
    hc1 = herd_commands(h, &c1);
    atomic_store(&h->stop, 1);
    for (i = 0; i < HERD_PROCS; i++) {
        assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    cmds = (double)(c1 - c0) / (double)(hc1 - hc0);
    msgs = (double)(m1 - m0) / (double)(hm1 - hm0);
    wakes =
        (2.0 * (double)(m1 - m0) - (double)(u1 - u0)) / (double)(hm1 - hm0);
    print_message("%s, %d processes x %d threads: %.2f commands, %.2f "
                  "messages heard (%.2f for no waiter) and at most %.2f "
                  "wake-ups per hand-off (%lld hand-offs)\n",
                  fair ? "fair" : "plain", HERD_PROCS, HERD_THREADS, cmds,
                  msgs, (double)(u1 - u0) / (double)(hm1 - hm0), wakes,
                  hm1 - hm0);
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

/* A plain release wakes one registered waiter: one message per hand-off
 * (0.97 to 1.01 here), each read against the hand-offs around its own
 * reading.  The bound was 2 while the messages were divided by hand-offs
 * read a few INFO commands away (the bench's herd read 2.03 to 2.06
 * wake-ups, 2 x messages, so); 1.25 leaves room for a process's count,
 * told every millisecond, a moment old. */
static void test_herd_commands_per_handoff(void **state)
{
    (void)state;
    herd_bounded(0, 4.0, 1.25);
}

/* The fair mutex's herd: the unlock grants the lock to the head of the
 * queue and tells it alone, on its own channel, and nobody else (a grant
 * tells only a Redisson waiter next in line): one message.  The unlock
 * and the releaser's next try, which joins the queue: 2 scripts (the
 * head's own try that took the lock made 3, 2.98 here, before the
 * grant).  A head woken, given the lock and back for it within
 * the millisecond of its wake-up used to read its own wake-up as one that
 * may have come after that try, and try once more (3.8-3.9 commands here);
 * and the head's take told the next in line to reckon its sleep again,
 * a second message.  At most 2.6 and 1.5 say all are gone, with room
 * for waiter renewals (and their word to the head). */
static void test_fair_herd_commands_per_handoff(void **state)
{
    (void)state;
    herd_bounded(1, 2.6, 1.5);
}

int main(void)
{
    /* The pub/sub thread reads every message, as it does for a process
     * with several waiters: a lone waiter that reads its own (direct
     * wake) leaves its own release's message unread until its next wait,
     * which then wakes once for nothing, one script more. */
    setenv("DISTLOCK_DIRECT_WAKE", "0", 1);
    const struct CMUnitTest tests[] = {
        FX_TEST(test_herd_commands_per_handoff),
        FX_TEST(test_fair_herd_commands_per_handoff),
    };
    return MUTEX_RUN(tests);
}
