/* test_sentinel.c: locks on a master with 2 replicas watched by 3
 * sentinels (redis-sentinel:// URL), all on loopback and started here:
 * replica sync (WAIT) and its distinct error, failovers by SENTINEL
 * FAILOVER, SIGKILL and SIGSTOP of the master with a lock held and a waiter
 * blocked, the lost lock that the replica check exists to prevent, and
 * (a lying sentinel) no try begun past a timed call's deadline after a
 * hold on a deposed master was given back, and a deferred release owed
 * on the old master read within a timed call's bound. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "harness_sentinel.h"
#include "harness_liar.h"
#include "harness_proxy.h"
#include "hahelp.h"
#include "fixture.h"

#define WATCHDOG_MS 10000UL /* much longer than a failover */
#define TIMEOUT_MS  1000UL

static tu_sentinel_t *S;
static tu_nodes_t *D, *SENT; /* S's data nodes and sentinels */
static int g_seq;

static void lock_name(char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "ha-%s-%d-%d", what, (int)getpid(), ++g_seq);
}

/* EVALSHA and EVAL calls the node has run so far. */
static long long script_calls(int node)
{
    redisReply *r = tu_node_cmd(D, node, "INFO", "commandstats", NULL);
    long long n = 0;
    const char *p;

    if (!r) /* the admin connection may have died while it was stopped */
        r = tu_node_cmd(D, node, "INFO", "commandstats", NULL);

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    for (p = r->str; (p = strstr(p, "cmdstat_eval")) != NULL; p++) {
        const char *c = strstr(p, "calls=");
        if (c)
            n += atoll(c + 6);
    }
    freeReplyObject(r);
    return n;
}

static void settle(void)
{
    assert_int_equal(tu_sentinel_wait_ok(S, 30000), 0);
}

static int lost_calls;
static void on_lost(const char *name, void *arg)
{
    (void)name;
    (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static void stale_reap(void);

/* A child of a threaded process inherits every lock as it was: glibc's
 * malloc takes its own around fork, but the AddressSanitizer of gcc 12
 * takes none of its allocator's, and a child that allocates may wait for
 * ever (seen twice in check-asan, in the deposed and behind children,
 * each thread of the child waiting for one allocator lock).  Children are
 * therefore run as this program afresh (run_child, main), with what they
 * need in their arguments.  The stale window's workers share memory
 * mapped before the fork and cannot be: this process stops its library
 * threads before forking them, which leaves only the idle harness. */
static pid_t run_child(char *const argv[])
{
    pid_t pid = fork();

    if (pid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* fork, this process's library threads stopped first (run_child says why) */
static pid_t fork_quiet(void)
{
    dist_shutdown();
    return fork();
}

/* After each test, whatever it did: no data node or sentinel left
 * stopped, the check back at its default. */
static int resume_all(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < tu_nodes_count(D); i++)
        if (tu_node_pid(D, i) > 0)
            tu_node_signal(D, i, SIGCONT);
    for (i = 0; i < tu_nodes_count(SENT); i++)
        tu_node_signal(SENT, i, SIGCONT);
    stale_reap();
    dist_set_replica_wait_ms(1000);
    return 0;
}

/* rc of a lock call, with the library's reason when it is not the one
 * expected. */
#define expect_rc(call, want)                                                \
    do {                                                                     \
        int rc_ = (call);                                                    \
        if (rc_ != (want))                                                   \
            fail_msg("%s = %d, want %d: %s", #call, rc_, (want),             \
                     dist_last_error());                                     \
    } while (0)

static int setup(void **state)
{
    static const struct fx_settings settings = { WATCHDOG_MS, TIMEOUT_MS, 0 };

    (void)state;
    S = tu_sentinel_start(2, 3, NULL);
    D = tu_sentinel_data(S);
    SENT = tu_sentinel_sentinels(S);
    if (S == NULL || fx_apply(tu_sentinel_url(S), &settings) != 0)
        return -1;
    dist_set_lost_handler(on_lost, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dist_shutdown();
    tu_sentinel_stop(S);
    return 0;
}

/* A lock taken through the sentinels is on the master, and (WAIT) on at
 * least one replica by the time lock returns. */
static void test_lock_reaches_a_replica(void **state)
{
    char name[64];
    dist_mutex_t m;
    int master, i, copies = 0;

    (void)state;
    settle();
    master = tu_sentinel_master(S);
    assert_true(master >= 0);
    lock_name(name, sizeof name, "basic");
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(node_exists(D, master, name), 1);
    for (i = 0; i < tu_nodes_count(D); i++)
        if (i != master && node_exists(D, i, name) == 1)
            copies++;
    assert_true(copies >= 1);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(node_exists(D, master, name), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* Replication stopped (both replicas SIGSTOPped): an acquire gives
 * DIST_ENOREPLICA within the sync timeout and leaves no key behind, for the
 * mutex, the fair mutex and the rwlock; healthy again, it succeeds. */
static void test_no_replica_ack_fails_cleanly(void **state)
{
    char name[64], fname[64], rname[64];
    dist_mutex_t m, f;
    dist_mutexattr_t fa;
    dist_rwlock_t rw;
    int master, i;
    double t0, took;

    (void)state;
    settle();
    master = tu_sentinel_master(S);
    lock_name(name, sizeof name, "nosync");
    lock_name(fname, sizeof fname, "nosync-fair");
    lock_name(rname, sizeof rname, "nosync-rw");
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    dist_mutexattr_init(&fa);
    dist_mutexattr_setfair(&fa, 1);
    assert_int_equal(dist_mutex_init(&f, fname, &fa), 0);
    assert_int_equal(dist_rwlock_init(&rw, rname, NULL), 0);
    assert_int_equal(dist_set_replica_wait_ms(400), 0);

    for (i = 0; i < tu_nodes_count(D); i++)
        if (i != master)
            assert_int_equal(tu_node_signal(D, i, SIGSTOP), 0);
    t0 = tu_now();
    expect_rc(dist_mutex_lock(&m), DIST_ENOREPLICA);
    took = tu_now() - t0;
    assert_non_null(strstr(dist_last_error(), "replica"));
    expect_rc(dist_mutex_trylock(&m), DIST_ENOREPLICA);
    expect_rc(dist_mutex_lock(&f), DIST_ENOREPLICA);
    expect_rc(dist_rwlock_wrlock(&rw), DIST_ENOREPLICA);
    expect_rc(dist_rwlock_rdlock(&rw), DIST_ENOREPLICA);
    /* nothing left behind, nothing held */
    assert_int_equal(node_exists(D, master, name), 0);
    assert_int_equal(node_exists(D, master, fname), 0);
    assert_int_equal(node_exists(D, master, rname), 0);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    for (i = 0; i < tu_nodes_count(D); i++)
        if (i != master)
            assert_int_equal(tu_node_signal(D, i, SIGCONT), 0);
    assert_dbl_range(took, 0.4, 0.4 + slack(2.0));

    settle();
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_rwlock_wrlock(&rw), 0);
    assert_int_equal(dist_rwlock_unlock(&rw), 0);
    assert_int_equal(dist_set_replica_wait_ms(1000), 0);
    dist_mutex_destroy(&m);
    dist_mutex_destroy(&f);
    dist_rwlock_destroy(&rw);
}

enum fault { F_COMMAND, F_KILL, F_STOP };

/* When (monotonic s) a client listens on node on one of the channels of
 * lock name (PUBSUB CHANNELS: each carries the name in its hash tag), at
 * once or within timeout_s; -1 if none did. */
static double listened_on(int node, const char *name, double timeout_s)
{
    double end = tu_now() + timeout_s;
    char pattern[80];

    snprintf(pattern, sizeof pattern, "*{%s}*", name);
    do {
        redisReply *r =
            tu_node_cmd(D, node, "PUBSUB", "CHANNELS", pattern, NULL);
        int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
        freeReplyObject(r);
        if (yes)
            return tu_now();
        tu_sleep_ms(5);
    } while (tu_now() < end);
    return -1;
}

/* A connection to node subscribed to the keyspace events of lock name's
 * hash commands (notify-keyspace-events Kh there): it tells the moment a
 * waiter takes the lock, which its lock call returns only after the hold
 * is on a replica too (replica sync, while the replicas attach to the new
 * master: up to 0.65 s seen), not what is timed. */
static redisContext *watch_takes(int node, const char *name)
{
    redisContext *c;
    redisReply *r;

    freeReplyObject(tu_node_cmd(D, node, "CONFIG", "SET",
                                "notify-keyspace-events", "Kh", NULL));
    c = tu_redis_admin(tu_node_server(D, node));
    assert_non_null(c);
    r = redisCommand(c, "SUBSCRIBE __keyspace@0__:%s", name);
    assert_true(r != NULL && r->type == REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    return c;
}

/* When (monotonic s) the next HSET of the lock watched on c came (a take),
 * or -1 if none did within timeout_s; closes c. */
static double taken_at(redisContext *c, int node, double timeout_s)
{
    struct timeval tv = { (time_t)timeout_s, 0 };
    double t = -1;
    redisReply *r;

    redisSetTimeout(c, tv);
    while (t < 0 && redisGetReply(c, (void **)&r) == REDIS_OK) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[2]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[2]->str, "hset") == 0)
            t = tu_now();
        freeReplyObject(r);
    }
    redisFree(c);
    freeReplyObject(tu_node_cmd(D, node, "CONFIG", "SET",
                                "notify-keyspace-events", "", NULL));
    return t;
}

/* The renewal thread finds the new master and renews the hold there
 * (counted from the fault; the old master may renew it until the switch
 * after SENTINEL FAILOVER, so there only renewals at most 0.5 s before
 * every sentinel agreed count). */
static void renewed_on(int now_master, enum fault how, const char *tag,
                       const char *name, double t_fault, double t_fail)
{
    double t_renew = ha_renewed_since(
        node_pttl, D, &now_master, 1, name, WATCHDOG_MS,
        how == F_COMMAND ? t_fail - 0.5 : t_fault, slack(10.0));

    assert_true(t_renew > 0);
    fprintf(stderr,
            "    %s: fault -> sentinels agree %.3f s, fault -> first "
            "renewal on the new master %.3f s\n",
            tag, t_fail - t_fault, t_renew - t_fault);
}

/* A lock held here and a waiter blocked in another process; then the
 * master fails over.  The hold survives on the new master and is renewed
 * there, the unlock works and wakes the waiter through the new master. */
static void failover_with_lock(enum fault how, const char *tag, int kind)
{
    char name[64];
    dist_mutex_t m;
    dist_rwlock_t rw;
    dist_mutexattr_t a;
    struct ha_waiter w;
    redisContext *takes;
    int old, now_master, rc, i;
    long long before_calls = 0;
    double t_fault, t_fail, t_heard, t_unlock, t_taken, t_woken;

    settle();
    old = tu_sentinel_master(S);
    assert_true(old >= 0);
    lock_name(name, sizeof name, tag);
    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, kind == HA_FAIR);
    if (kind == HA_WRITE) {
        assert_int_equal(dist_rwlock_init(&rw, name, NULL), 0);
        expect_rc(dist_rwlock_wrlock(&rw), 0);
    } else {
        assert_int_equal(dist_mutex_init(&m, name, &a), 0);
        expect_rc(dist_mutex_lock(&m), 0);
    }
    ha_waiter_start(&w, tu_sentinel_url(S), name, kind, WATCHDOG_MS);
    tu_sleep_ms(300); /* subscribed and asleep */
    t_fault = tu_now();
    if (how == F_COMMAND) {
        now_master = tu_sentinel_failover(S, 30000);
    } else {
        if (how == F_KILL)
            assert_int_equal(tu_node_kill(D, old), 0);
        else
            assert_int_equal(tu_node_signal(D, old, SIGSTOP), 0);
        now_master = tu_sentinel_wait_new_master(S, old, 30000);
    }
    t_fail = tu_now();
    assert_true(now_master >= 0);
    assert_true(now_master != old);
    /* The waiter's process follows the switch as a sentinel announces it
     * (+switch-master), before every sentinel agrees: not at its next
     * question to the sentinels (up to a second later), nor once its
     * connection's backoff after the old master died is over (3.15 s
     * after the kill: 1.2 s after the sentinels agreed) */
    t_heard = listened_on(now_master, name, slack(10.0));
    assert_true(t_heard > 0);
    fprintf(stderr,
            "    %s: sentinels agree -> the waiter listens on the new "
            "master %.3f s\n",
            tag, t_heard - t_fail);
    assert_dbl_range(t_heard - t_fail, 0, slack(0.5));
    if (how == F_STOP) {
        /* the old master comes back believing it is the master until the
         * sentinels turn it into a replica: nothing of ours may reach it */
        assert_int_equal(tu_node_signal(D, old, SIGCONT), 0);
        tu_sleep_ms(200); /* it runs what it had queued */
        before_calls = script_calls(old);
    }

    /* the hold was replicated before lock returned: it is there */
    assert_int_equal(node_exists(D, now_master, name), 1);
    renewed_on(now_master, how, tag, name, t_fault, t_fail);

    takes = watch_takes(now_master, name);
    t_unlock = tu_now();
    rc = kind == HA_WRITE ? dist_rwlock_unlock(&rw) : dist_mutex_unlock(&m);
    if (rc != 0)
        fail_msg("unlock after the failover: %d %s", rc, dist_last_error());
    /* woken by the release message on the new master, not by a
     * resubscription nor the lease (10 s) running out: it takes the lock
     * there at once (0.001-0.005 s), even under ThreadSanitizer */
    t_taken = taken_at(takes, now_master, slack(10.0));
    t_woken = ha_waiter_result(&w, slack(10.0));
    assert_true(t_taken > 0 && t_woken > 0);
    fprintf(stderr,
            "    %s: unlock -> the blocked waiter takes the lock %.3f s, "
            "its lock call returns %.3f s\n",
            tag, t_taken - t_unlock, t_woken - t_unlock);
    assert_dbl_range(t_taken - t_unlock, 0, slack(0.5));

    if (how == F_STOP) {
        for (i = 0; i < 20; i++) { /* ~1 s of traffic */
            assert_int_equal(kind == HA_WRITE ? dist_rwlock_wrlock(&rw)
                                              : dist_mutex_lock(&m),
                             0);
            assert_int_equal(kind == HA_WRITE ? dist_rwlock_unlock(&rw)
                                              : dist_mutex_unlock(&m),
                             0);
            tu_sleep_ms(50);
        }
        assert_int_equal(script_calls(old), before_calls);
        assert_int_equal(tu_node_wait_role(D, old, "slave", 30000), 0);
    }
    if (how == F_KILL)
        assert_int_equal(tu_node_restart(D, old), 0);
    if (kind == HA_WRITE)
        dist_rwlock_destroy(&rw);
    else
        dist_mutex_destroy(&m);
    settle();
}

/* One failover with a lock held: how, the label of its figures, the kind of
 * lock (test_failover_command, test_master_killed, test_master_stopped). */
struct failover_case {
    enum fault how;
    const char *tag;
};

static void test_failover(void **state)
{
    const struct failover_case *c = *state;

    failover_with_lock(c->how, c->tag, HA_MUTEX);
}

static void test_fair_and_rwlock_across_failover(void **state)
{
    (void)state;
    failover_with_lock(F_COMMAND, "failover-fair", HA_FAIR);
    failover_with_lock(F_COMMAND, "failover-rw", HA_WRITE);
}

/* With the replica check off, a master that dies before replicating takes
 * the lock with it: after the failover a second client takes it while the
 * first still believes it holds it, until its renewal finds it gone.  This
 * is the warning of docs/deployment.md, shown. */
static void test_lost_lock_without_replica_check(void **state)
{
    char name[64];
    dist_mutex_t m;
    struct ha_waiter w;
    int old, i, nm, lost0;
    double t;

    (void)state;
    settle();
    old = tu_sentinel_master(S);
    lock_name(name, sizeof name, "lost");
    assert_int_equal(dist_set_replica_wait_ms(0), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    for (i = 0; i < tu_nodes_count(D); i++)
        if (i != old)
            assert_int_equal(tu_node_signal(D, i, SIGSTOP), 0);
    /* cut the replication links, or the stopped replicas' socket buffers
     * would still bring them the write once they run again */
    freeReplyObject(
        tu_node_cmd(D, old, "CLIENT", "KILL", "TYPE", "replica", NULL));
    assert_int_equal(dist_mutex_lock(&m), 0); /* not replicated */
    lost0 = __atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST);
    assert_int_equal(tu_node_kill(D, old), 0);
    for (i = 0; i < tu_nodes_count(D); i++)
        if (i != old)
            assert_int_equal(tu_node_signal(D, i, SIGCONT), 0);
    nm = tu_sentinel_wait_new_master(S, old, 30000);
    assert_true(nm >= 0);
    assert_int_equal(node_exists(D, nm, name), 0);

    /* a second holder, though this thread never let go: its hold is on
     * no server any more.  (This process finds out at its first renewal
     * on the new master, which it makes as soon as it sees the failover:
     * until then dist_mutex_token still answers.) */
    ha_waiter_start(&w, tu_sentinel_url(S), name, HA_MUTEX, WATCHDOG_MS);
    t = ha_waiter_result(&w, slack(10.0));
    assert_true(t > 0);

    /* the renewal finds it gone and says so */
    for (i = 0;
         i < 100 && __atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == lost0;
         i++)
        tu_sleep_ms(50);
    assert_true(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) > lost0);
    assert_int_equal(dist_mutex_unlock(&m), EPERM);
    assert_int_equal(dist_set_replica_wait_ms(1000), 0);
    dist_mutex_destroy(&m);
    assert_int_equal(tu_node_restart(D, old), 0);
    settle();
}

/* ---- the old master's window after a failover ---------------------------- */

#define STALE_PROCS   3
#define STALE_THREADS 2

/* Shared by the parent and the workers of
 * test_no_double_grant_in_stale_window. */
struct stale_board {
    int ready; /* worker threads warmed up */
    int go;
    int stop;
    int inside;      /* holders in the critical section now */
    int most_inside; /* the most there ever were */
    int granted;
    int refused; /* DIST_ENOREPLICA or EIO: nothing held */
    int other;   /* any other result: a failure */
    int other_rc;
};

static struct stale_board *board;
static dist_mutex_t stale_m;
static pid_t stale_pid[STALE_PROCS]; /* the workers, 0 once reaped */

/* The workers of a test that failed half-way: killed and reaped, so that
 * none outlives the run. */
static void stale_reap(void)
{
    int i;

    for (i = 0; i < STALE_PROCS; i++) {
        if (stale_pid[i] <= 0)
            continue;
        kill(stale_pid[i], SIGKILL);
        waitpid(stale_pid[i], NULL, 0);
        stale_pid[i] = 0;
    }
}

static void stale_enter(void)
{
    int in = __atomic_add_fetch(&board->inside, 1, __ATOMIC_SEQ_CST);

    if (in > __atomic_load_n(&board->most_inside, __ATOMIC_SEQ_CST))
        __atomic_store_n(&board->most_inside, in, __ATOMIC_SEQ_CST);
}

static void stale_leave(void)
{
    __atomic_sub_fetch(&board->inside, 1, __ATOMIC_SEQ_CST);
}

/* One lock, counted; the section held 2 ms. */
static void stale_once(void)
{
    int rc = dist_mutex_lock(&stale_m);

    if (rc == DIST_ENOREPLICA || rc == EIO) {
        __atomic_add_fetch(&board->refused, 1, __ATOMIC_SEQ_CST);
        tu_sleep_ms(5);
        return;
    }
    if (rc != 0) {
        board->other_rc = rc;
        __atomic_add_fetch(&board->other, 1, __ATOMIC_SEQ_CST);
        tu_sleep_ms(5);
        return;
    }
    stale_enter();
    __atomic_add_fetch(&board->granted, 1, __ATOMIC_SEQ_CST);
    tu_sleep_ms(2);
    stale_leave();
    dist_mutex_unlock(&stale_m); /* EPERM for a lost hold: no matter */
}

/* Each thread its own link to the master (and its replica count), made
 * before the failover; then, at go, locks until stop. */
static void *stale_worker(void *arg)
{
    (void)arg;
    if (dist_mutex_lock(&stale_m) == 0)
        dist_mutex_unlock(&stale_m);
    __atomic_add_fetch(&board->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&board->go, __ATOMIC_SEQ_CST))
        tu_sleep_ms(1);
    while (!__atomic_load_n(&board->stop, __ATOMIC_SEQ_CST))
        stale_once();
    return NULL;
}

static void stale_child(const char *url, const char *name)
{
    pthread_t th[STALE_THREADS];
    int i;

    if (dist_set_url(url) != 0 || dist_set_replica_wait_ms(300) != 0 ||
        dist_mutex_init(&stale_m, name, NULL) != 0)
        _exit(3);
    for (i = 0; i < STALE_THREADS; i++)
        if (pthread_create(&th[i], NULL, stale_worker, NULL) != 0)
            _exit(3);
    for (i = 0; i < STALE_THREADS; i++)
        pthread_join(th[i], NULL);
    dist_mutex_destroy(&stale_m);
    dist_shutdown();
    _exit(0);
}

/* Forks the workers and waits until every thread is warmed up. */
static void stale_start(pid_t *pid, const char *name)
{
    int i;

    board = mmap(NULL, sizeof *board, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(board != MAP_FAILED);
    memset(board, 0, sizeof *board);
    for (i = 0; i < STALE_PROCS; i++) {
        pid[i] = fork_quiet();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0)
            stale_child(tu_sentinel_url(S), name);
    }
    for (i = 0; i < 300 && __atomic_load_n(&board->ready, __ATOMIC_SEQ_CST) <
                               STALE_PROCS * STALE_THREADS;
         i++)
        tu_sleep_ms(50);
    assert_int_equal(board->ready, STALE_PROCS * STALE_THREADS);
}

/* Issue 16's strict torture finding: after SENTINEL FAILOVER the old
 * master is still a master, with no replica (or one about to follow the
 * new master), for seconds until the sentinels demote it, and a process
 * keeps routing there until it has asked the sentinels again.  A lock
 * taken there was granted while the new master granted it too.
 *
 * The window, forced: worker threads, each linked to the old master,
 * wait out a failover; then the first sentinel, the one every process
 * asks first, is stopped.  Asking the sentinels again within a call's
 * command timeout (1 s here) then fails in every process, which goes on
 * with the master it knows, the old one, for as long as that answers as
 * a master (a known limit: docs/deployment.md).  A holder of another
 * process (made by hand) has the lock on the new master while the workers
 * go.
 * Never two holders at once, the lock keeps being granted afterwards, and
 * every result is a documented one. */
static void test_no_double_grant_in_stale_window(void **state)
{
    char name[64];
    pid_t *pid = stale_pid;
    int old, nm, i, st;

    (void)state;
    settle();
    old = tu_sentinel_master(S);
    assert_true(old >= 0);
    lock_name(name, sizeof name, "stale");
    stale_start(pid, name);
    nm = tu_sentinel_failover(S, 30000);
    assert_true(nm >= 0 && nm != old);
    assert_int_equal(tu_node_signal(SENT, 0, SIGSTOP), 0);
    /* a holder elsewhere, on the new master, for 4 s: its section is
     * counted from now until a second before that ends */
    freeReplyObject(
        tu_node_cmd(D, nm, "HSET", name, "elsewhere:1", "1", NULL));
    freeReplyObject(tu_node_cmd(D, nm, "PEXPIRE", name, "4000", NULL));
    assert_int_equal(node_exists(D, nm, name), 1);
    assert_string_equal(tu_node_role(D, old), "master");
    stale_enter();
    __atomic_store_n(&board->go, 1, __ATOMIC_SEQ_CST);
    tu_sleep_ms(3000);
    stale_leave();
    /* until the old master answers as a replica, then a second more for
     * every process to have followed */
    assert_int_equal(tu_node_wait_role(D, old, "slave", 30000), 0);
    tu_sleep_ms(1000);
    assert_int_equal(tu_node_signal(SENT, 0, SIGCONT), 0);
    __atomic_store_n(&board->stop, 1, __ATOMIC_SEQ_CST);
    for (i = 0; i < STALE_PROCS; i++) {
        assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
        pid[i] = 0;
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    fprintf(stderr,
            "    stale window: %d granted, %d refused, most holders "
            "at once %d\n",
            board->granted, board->refused, board->most_inside);
    if (board->other)
        fail_msg("%d lock calls gave %d", board->other, board->other_rc);
    assert_int_equal(board->most_inside, 1);
    assert_true(board->granted > 10);
    munmap(board, sizeof *board);
    settle();
}

/* ---- no try begun past a timed call's deadline on a deposed master ---- */

#define DEPOSED_SWAPS 8 /* more than the tries a deposed master gets */
#define DRIP_MS       5 /* per byte of the lying sentinel's answers */

/* A sentinel's answer naming 127.0.0.1:port (GET-MASTER-ADDR-BY-NAME). */
static void master_answer(char *buf, size_t len, int port)
{
    char p[16];

    snprintf(p, sizeof p, "%d", port);
    snprintf(buf, len, "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n", strlen(p),
             p);
}

/* The child of test_no_try_past_deadline_on_deposed, a library of its own
 * on the lying sentinel: a timed lock with its deadline 0.1 s away.  Exits
 * 0 when it said ETIMEDOUT, else 1 + its rc (at most 99). */
static void deposed_child(const char *url, const char *name)
{
    struct timespec dl;
    dist_mutex_t m;
    int rc;

    if (dist_set_url(url) != 0 || dist_set_replica_wait_ms(1000) != 0 ||
        dist_mutex_init(&m, name, NULL) != 0)
        _exit(100);
    dl = realtime_in(0.1);
    rc = dist_mutex_timedlock(&m, &dl);
    if (rc != ETIMEDOUT)
        fprintf(stderr, "    timedlock = %d: %s\n", rc, dist_last_error());
    if (rc == 0)
        dist_mutex_unlock(&m);
    dist_mutex_destroy(&m);
    dist_shutdown();
    _exit(rc == ETIMEDOUT ? 0 : rc < 98 ? rc + 1 : 99);
}

/* An acquire whose hold was on a master the sentinels had replaced tries
 * again on the new one, a few times; a timed call's deadline ends that
 * (its retries, each with a command timeout and a replica wait of its
 * own, ran on past it).  Two masters without replicas and a lying
 * sentinel that names the other one each time it is asked, slowly (its
 * answer takes longer than the deadline is away): the acquire under way
 * at the deadline is the last, and the call says ETIMEDOUT. */
static void test_no_try_past_deadline_on_deposed(void **state)
{
    char url[128], name[64], ans[2][64];
    tu_redis_t node[2];
    tu_liar_t *liar;
    long long later;
    long asked;
    pid_t pid;
    int i, st;

    (void)state;
    memset(node, 0, sizeof node);
    for (i = 0; i < 2; i++)
        assert_int_equal(tu_redis_start(&node[i]), 0);
    assert_non_null(liar = tu_liar_start());
    for (i = 0; i < 2; i++)
        master_answer(ans[i], sizeof ans[i], node[i].port);
    /* node 0 for the map and for the check when the library connects to
     * it; then, after each acquire, the other node (slowly), and that one
     * again for the check when the library connects there */
    tu_liar_add(liar, &(struct tu_lie){
                          .cmd = "SENTINEL", .bytes = ans[0], .times = 2 });
    for (i = 1; i <= DEPOSED_SWAPS; i++) {
        tu_liar_add(liar, &(struct tu_lie){ .cmd = "SENTINEL",
                                            .bytes = ans[i % 2],
                                            .drip_ms = DRIP_MS,
                                            .times = 1 });
        tu_liar_add(liar, &(struct tu_lie){ .cmd = "SENTINEL",
                                            .bytes = ans[i % 2],
                                            .times = 1 });
    }
    snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/distlock",
             tu_liar_port(liar));
    lock_name(name, sizeof name, "deposed-late");
    pid = run_child(
        (char *[]){ "test_sentinel", "--deposed", url, name, NULL });
    assert_true(pid >= 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    asked = tu_liar_count(liar, "SENTINEL");
    later = command_calls_on(&node[1], "evalsha") +
            command_calls_on(&node[1], "eval");
    tu_liar_stop(liar);
    for (i = 0; i < 2; i++)
        tu_redis_stop(&node[i]);
    if (later != 0)
        fail_msg("the master named after the deadline ran %lld scripts "
                 "(the sentinel was asked %ld times)",
                 later, asked);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- a deferred release's reply read within a timed call's bound ---- */

#define BEHIND_T_MS  2000UL /* the child's command timeout */
#define BEHIND_DL_S  0.1    /* its timed lock's deadline, from its start */
#define BEHIND_DELAY 150    /* ms each way on the new master's proxy */

struct behind_report {
    int rc;
    double took; /* s, the timed lock or the trylock */
};

/* The call behind the release: a timed lock (its bound is its deadline
 * and T after), or a trylock (T from its start, docs/design.md). */
struct behind_case {
    int timed;
    double bound_s; /* without slack */
};

static void *trylock_other(void *arg)
{
    dist_mutex_t o;

    if (dist_mutex_init(&o, arg, NULL) == 0) {
        if (dist_mutex_trylock(&o) == 0)
            dist_mutex_unlock(&o);
        dist_mutex_destroy(&o);
    }
    return NULL;
}

/* The child of test_behind_read_by_deadline: a mutex with deferred
 * release, held on the first master; when the parent says (go), its
 * unlock, a thread of its own finding the master gone, and the timed
 * lock or the trylock.  Reports on out. */
static void behind_child(const char *url, const char *name, int timed, int go,
                         int out)
{
    struct behind_report rep = { -1, 0 };
    char other[80], c;
    struct timespec dl;
    dist_mutexattr_t a;
    dist_mutex_t m;
    pthread_t th;
    double t0;

    snprintf(other, sizeof other, "%s-other", name);
    dist_mutexattr_init(&a);
    dist_mutexattr_setdeferred(&a, 1);
    if (dist_set_url(url) != 0 || dist_set_timeout_ms(BEHIND_T_MS) != 0 ||
        dist_set_replica_wait_ms(0) != 0 || dist_mutex_init(&m, name, &a) ||
        dist_mutex_lock(&m) != 0 || write(out, &rep, sizeof rep) < 0 ||
        read(go, &c, 1) != 1)
        _exit(3);
    /* the map is read again after a failure only 100 ms after the last
     * time (topo.c) */
    tu_sleep_ms(200);
    if (dist_mutex_unlock(&m) != 0)
        _exit(3);
    /* another thread's link to the old master fails: the map is read
     * again, and names the new one */
    if (pthread_create(&th, NULL, trylock_other, other) != 0 ||
        pthread_join(th, NULL) != 0)
        _exit(4);
    t0 = tu_now();
    dl = realtime_in(BEHIND_DL_S);
    rep.rc = timed ? dist_mutex_timedlock(&m, &dl) : dist_mutex_trylock(&m);
    rep.took = tu_now() - t0;
    if (rep.rc != 0)
        fprintf(stderr, "    %s = %d: %s\n", timed ? "timedlock" : "trylock",
                rep.rc, dist_last_error());
    if (write(out, &rep, sizeof rep) < 0)
        _exit(5);
    _exit(0);
}

/* An owner's deferred release is owed on its link to a master when the
 * sentinels name another: its next lock goes there, and reads the release
 * ahead from the old link afterwards.  That read ends by the bound of its
 * first try: for a timed call its deadline and a command timeout after,
 * for a trylock a command timeout from its start (it was a command
 * timeout from the end of the try, which may have run as long).  The old
 * master swallows everything from the release on; the new one answers
 * slowly. */
static void test_behind_read_by_deadline(void **state)
{
    const struct behind_case *bc = *state;
    struct behind_report rep;
    char url[128], name[64], ans[2][64];
    tu_redis_t node[2];
    tu_proxy_t *px[2];
    tu_liar_t *liar;
    int go[2], rp[2], out, i, st;
    char fds[2][16];
    ssize_t got;
    long asked;
    pid_t pid;

    memset(node, 0, sizeof node);
    for (i = 0; i < 2; i++) {
        assert_int_equal(tu_redis_start(&node[i]), 0);
        assert_non_null(px[i] = tu_proxy_start(&node[i]));
        master_answer(ans[i], sizeof ans[i], tu_proxy_port(px[i]));
    }
    tu_proxy_set_delay(px[1], BEHIND_DELAY);
    assert_non_null(liar = tu_liar_start());
    /* the first master for the map and the check when connecting to it,
     * then the second */
    tu_liar_add(liar, &(struct tu_lie){
                          .cmd = "SENTINEL", .bytes = ans[0], .times = 2 });
    tu_liar_add(liar, &(struct tu_lie){ .cmd = "SENTINEL", .bytes = ans[1] });
    snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/distlock",
             tu_liar_port(liar));
    lock_name(name, sizeof name, "behind");
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(rp), 0);
    snprintf(fds[0], sizeof fds[0], "%d", go[0]);
    snprintf(fds[1], sizeof fds[1], "%d", rp[1]);
    pid =
        run_child((char *[]){ "test_sentinel", "--behind", url, name,
                              bc->timed ? "1" : "0", fds[0], fds[1], NULL });
    assert_true(pid >= 0);
    close(go[0]);
    close(rp[1]);
    out = rp[0];
    rep.rc = -1;
    assert_int_equal(read(out, &rep, sizeof rep), sizeof rep); /* held */
    tu_proxy_blackhole(px[0], 1);
    tu_proxy_reset_new(px[0], 1);
    assert_int_equal(write(go[1], "g", 1), 1);
    got = read(out, &rep, sizeof rep);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    close(go[1]);
    close(out);
    asked = tu_liar_count(liar, "SENTINEL");
    tu_liar_stop(liar);
    for (i = 0; i < 2; i++) {
        tu_proxy_stop(px[i]);
        tu_redis_stop(&node[i]);
    }
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(got, sizeof rep);
    fprintf(stderr,
            "    %s behind a release owed: %.2f s (sentinel asked %ld "
            "times)\n",
            bc->timed ? "timed lock" : "trylock", rep.took, asked);
    assert_int_equal(rep.rc, 0);
    assert_true(rep.took < bc->bound_s + slack(0.5));
}

static int run_group(void)
{
    static struct failover_case by_command = { F_COMMAND, "failover" },
                                by_kill = { F_KILL, "kill" },
                                by_stop = { F_STOP, "stop" };
    static struct behind_case timed = { 1,
                                        BEHIND_DL_S + BEHIND_T_MS / 1000.0 },
                              try = { 0, BEHIND_T_MS / 1000.0 };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_lock_reaches_a_replica, resume_all),
        cmocka_unit_test_teardown(test_no_replica_ack_fails_cleanly,
                                  resume_all),
        param_test(test_failover_command, test_failover, &by_command,
                   resume_all),
        param_test(test_master_killed, test_failover, &by_kill, resume_all),
        param_test(test_master_stopped, test_failover, &by_stop, resume_all),
        cmocka_unit_test_teardown(test_fair_and_rwlock_across_failover,
                                  resume_all),
        cmocka_unit_test_teardown(test_lost_lock_without_replica_check,
                                  resume_all),
        cmocka_unit_test_teardown(test_no_double_grant_in_stale_window,
                                  resume_all),
        cmocka_unit_test(test_no_try_past_deadline_on_deposed),
        param_test(test_behind_read_by_deadline, test_behind_read_by_deadline,
                   &timed, NULL),
        param_test(test_behind_trylock_read_by_t,
                   test_behind_read_by_deadline, &try, NULL),
    };
    /* e.g. TEST_SENTINEL_FILTER='*stale*' runs that one */
    const char *filter = getenv("TEST_SENTINEL_FILTER");

    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}

int main(int argc, char **argv)
{
    /* a child of the deposed or behind test (run_child) */
    if (argc == 4 && strcmp(argv[1], "--deposed") == 0)
        deposed_child(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "--behind") == 0)
        behind_child(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]),
                     atoi(argv[6]));
    return run_group();
}
