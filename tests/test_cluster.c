/* test_cluster.c: locks on a Redis Cluster of 3 masters with a replica
 * each (redis-cluster:// URL), all on loopback and started here: locks on
 * every master, a lock's keys and channel in one slot, MOVED after a slot
 * moves, ASK and TRYAGAIN while it migrates, a waiter subscribed on the old
 * owner woken after the move, a master failover with a lock held, and the
 * replica check. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "harness_cluster.h"
#include "hahelp.h"
#include "fixture.h"

#define WATCHDOG_MS 10000UL /* much longer than a failover */
#define TIMEOUT_MS  2000UL
#define MASTERS     3

static tu_cluster_t *C;
static tu_nodes_t *N; /* C's nodes */
static int g_seq;

/* PTTL on a node importing key's slot (ASKING first). */
static long long node_pttl_asking(void *topo, int node, const char *key)
{
    return ha_reply_int(tu_cluster_cmd_asking(topo, node, "PTTL", key, NULL),
                        -3);
}

/* A fresh lock name whose slot the master `master` serves now. */
static int name_on(char *buf, size_t len, const char *what, int master)
{
    int slot;

    for (;;) {
        snprintf(buf, len, "ha-%s-%d-%d", what, (int)getpid(), ++g_seq);
        slot = tu_cluster_keyslot(C, buf);
        assert_true(slot >= 0);
        if (tu_cluster_slot_owner(C, slot) == master)
            return slot;
    }
}

static int setup(void **state)
{
    static const struct fx_settings settings = { WATCHDOG_MS, TIMEOUT_MS, 0 };

    (void)state;
    C = tu_cluster_start(MASTERS, 1, NULL);
    N = tu_cluster_nodes(C);
    return C != NULL ? fx_apply(tu_cluster_url(C), &settings) : -1;
}

static int teardown(void **state)
{
    (void)state;
    dist_shutdown();
    tu_cluster_stop(C);
    return 0;
}

/* A waiter on name (kind) in another process, given the time to
 * subscribe and fall asleep. */
static void waiter_on(struct ha_waiter *w, const char *name, int kind)
{
    ha_waiter_start(w, tu_cluster_url(C), name, kind, WATCHDOG_MS);
    tu_sleep_ms(300);
}

/* Unlock on this thread, hand-off to w, woken by the sharded release
 * message; returns unlock -> waiter's lock in s. */
static double unlock_to(struct ha_waiter *w, const char *name, int kind,
                        void *lock)
{
    double t0, t;
    int rc;

    t0 = tu_now();
    rc =
        kind == HA_WRITE ? dist_rwlock_unlock(lock) : dist_mutex_unlock(lock);
    if (rc != 0)
        fail_msg("unlock of %s: %s", name, dist_last_error());
    t = ha_waiter_result(w, slack(10.0));
    assert_true(t > 0);
    return t - t0;
}

static double handoff(const char *name, int kind, void *lock)
{
    struct ha_waiter w;

    waiter_on(&w, name, kind);
    return unlock_to(&w, name, kind, lock);
}

/* Once the cluster is settled: a mutex of the test's own (fixture.h) on a
 * fresh name whose slot master serves, locked here; its slot in *slot. */
static dist_mutex_t *locked_on(const char *what, int master, int *slot)
{
    char name[64];
    dist_mutex_t *m;

    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    *slot = name_on(name, sizeof name, what, master);
    m = fx_mutex_on(name, NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    return m;
}

/* A mutex held here, on a fresh name, with a waiter on it in another
 * process. */
struct held {
    dist_mutex_t *m;
    const char *name;
    struct ha_waiter w;
    int slot;
};

static void held_with_waiter(struct held *h, const char *what, int master)
{
    h->m = locked_on(what, master, &h->slot);
    h->name = fx_name(h->m);
    waiter_on(&h->w, h->name, HA_MUTEX);
}

/* Mutex, fair mutex and rwlock on each of the 3 masters; every key and
 * channel of a lock is in the lock's slot, on its master. */
static void test_locks_on_every_master(void **state)
{
    static const char *const derived[] = {
        "redisson_lock__channel:{%s}", "redisson_lock_token:{%s}",
        "redisson_lock_queue:{%s}",    "redisson_lock_timeout:{%s}",
        "redisson_rwlock:{%s}",
    };
    char name[64], k[128];
    int master, slot, i;

    (void)state;
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    for (master = 0; master < MASTERS; master++) {
        dist_mutex_t m, f;
        dist_mutexattr_t fa;
        dist_rwlock_t rw;
        double t;

        slot = name_on(name, sizeof name, "every", master);
        for (i = 0; i < (int)(sizeof derived / sizeof derived[0]); i++) {
            snprintf(k, sizeof k, derived[i], name);
            assert_int_equal(tu_cluster_keyslot(C, k), slot);
        }
        assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
        assert_int_equal(dist_mutex_lock(&m), 0);
        assert_int_equal(node_exists(N, master, name), 1);
        snprintf(k, sizeof k, "redisson_lock_token:{%s}", name);
        assert_int_equal(node_exists(N, master, k), 1);
        t = handoff(name, HA_MUTEX, &m);
        fprintf(stderr, "    master %d: mutex hand-off %.4f s\n", master, t);
        assert_dbl_range(t, 0, slack(1.5)); /* not the 10 s lease */
        assert_int_equal(dist_mutex_destroy(&m), 0);

        dist_mutexattr_init(&fa);
        dist_mutexattr_setfair(&fa, 1);
        name_on(name, sizeof name, "every-fair", master);
        assert_int_equal(dist_mutex_init(&f, name, &fa), 0);
        assert_int_equal(dist_mutex_lock(&f), 0);
        t = handoff(name, HA_FAIR, &f);
        assert_dbl_range(t, 0, slack(1.5));
        assert_int_equal(dist_mutex_destroy(&f), 0);

        name_on(name, sizeof name, "every-rw", master);
        assert_int_equal(dist_rwlock_init(&rw, name, NULL), 0);
        assert_int_equal(dist_rwlock_rdlock(&rw), 0);
        assert_int_equal(dist_rwlock_rdlock(&rw), 0);
        assert_int_equal(dist_rwlock_unlock(&rw), 0);
        assert_int_equal(dist_rwlock_unlock(&rw), 0);
        assert_int_equal(dist_rwlock_wrlock(&rw), 0);
        t = handoff(name, HA_WRITE, &rw);
        assert_dbl_range(t, 0, slack(1.5));
        assert_int_equal(dist_rwlock_destroy(&rw), 0);
    }
}

/* A held lock's slot moves to another master: unlock follows MOVED, and
 * the next lock lands on the new owner. */
static void test_moved_after_reshard(void **state)
{
    int slot, to;
    dist_mutex_t *m = locked_on("moved", 0, &slot);
    const char *name = fx_name(m);

    (void)state;
    to = 1;
    assert_int_equal(tu_cluster_move_slot(C, slot, to), 0);
    assert_int_equal(node_exists(N, to, name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(node_exists(N, to, name), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(node_exists(N, to, name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_cluster_move_slot(C, slot, 0), 0);
}

/* The count of name's one holder on node, or -1. */
static long long node_count(int node, const char *name)
{
    redisReply *x = tu_node_cmd(N, node, "HGETALL", name, NULL);
    long long n = -1;

    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2)
        n = strtoll(x->element[1]->str, NULL, 10);
    freeReplyObject(x);
    return n;
}

/* Whether name is gone from node within 5 s (its lease is far longer). */
static int node_gone_within(int node, const char *name)
{
    double t0 = tu_now();

    while (node_exists(N, node, name) != 0) {
        if (tu_now() - t0 > 5.0)
            return 0;
        tu_sleep_ms(20);
    }
    return 1;
}

/* A deferred release whose slot moved meanwhile gets MOVED, read later:
 * by the owner's next lock of it (which follows MOVED, counts the old hold
 * there and gives it back), or by a call on another lock (the renewal
 * thread's conditional release follows MOVED). */
static void test_deferred_moved(void **state)
{
    char name[64], other[64];
    dist_mutex_t *m, *o;
    dist_mutexattr_t a;
    int slot, pass;

    (void)state;
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    dist_mutexattr_init(&a);
    dist_mutexattr_setdeferred(&a, 1);
    for (pass = 0; pass < 2; pass++) {
        slot = name_on(name, sizeof name, "dmoved", 0);
        name_on(other, sizeof other, "dother", 0);
        m = fx_mutex_on(name, &a);
        o = fx_mutex_on(other, NULL);
        assert_int_equal(dist_mutex_lock(m), 0);
        assert_int_equal(tu_cluster_move_slot(C, slot, 1), 0);
        assert_int_equal(dist_mutex_unlock(m), 0); /* to node 0: MOVED */
        if (pass == 0) {
            assert_int_equal(dist_mutex_lock(m), 0);
            assert_int_equal(node_count(1, name), 1);
            assert_int_equal(dist_mutex_unlock(m), 0);
        } else {
            assert_int_equal(dist_mutex_lock(o), 0); /* reads m's reply */
            assert_int_equal(dist_mutex_unlock(o), 0);
        }
        assert_true(node_gone_within(1, name));
        assert_int_equal(tu_cluster_move_slot(C, slot, 0), 0);
    }
    dist_mutexattr_destroy(&a);
}

struct bg_finish {
    int slot, to, rc;
    double at;
};

static void *bg_finish_main(void *arg)
{
    struct bg_finish *b = arg;

    tu_sleep_ms(300);
    b->at = tu_now();
    b->rc = tu_cluster_migrate_finish(C, b->slot, b->to);
    return NULL;
}

/* While the slot migrates: the renewal (one key) follows ASK to the node
 * importing it; an unlock (several keys, some on each side: Redis answers
 * TRYAGAIN) is retried until the migration ends, and succeeds. */
static void test_ask_during_migration(void **state)
{
    struct bg_finish b = { 0 };
    pthread_t th;
    int slot, to = 2, rc;
    dist_mutex_t *m = locked_on("ask", 0, &slot);
    const char *name = fx_name(m);
    double done, t_renew;

    (void)state;
    assert_int_equal(tu_cluster_migrate_begin(C, slot, to), 0);
    assert_int_equal(tu_cluster_migrate_key(C, name), 1);
    {
        /* the source sends clients of that key to the target */
        redisReply *r = tu_node_cmd(N, 0, "EXISTS", name, NULL);
        assert_non_null(r);
        assert_int_equal(tu_cluster_redirect(C, r, "ASK", NULL), to);
        freeReplyObject(r);
    }

    /* the renewal thread's next call is ASKed to the importing node */
    t_renew = ha_renewed_since(node_pttl_asking, C, &to, 1, name, WATCHDOG_MS,
                               tu_now(), slack(5.0));
    assert_true(t_renew > 0);

    b.slot = slot;
    b.to = to;
    assert_int_equal(pthread_create(&th, NULL, bg_finish_main, &b), 0);
    rc = dist_mutex_unlock(m);
    done = tu_now();
    pthread_join(th, NULL);
    assert_int_equal(b.rc, 0);
    if (rc != 0)
        fail_msg("unlock during the migration: %d %s", rc, dist_last_error());
    assert_true(done >= b.at); /* it waited for the end */
    assert_int_equal(node_exists(N, to, name), 0);
    assert_int_equal(tu_cluster_move_slot(C, slot, 0), 0);
}

/* A waiter subscribed on the old owner of the slot (sharded pub/sub) is
 * woken by the unlock published on the new owner after the slot moved. */
static void test_waiter_follows_moved_slot(void **state)
{
    struct held h;
    double t;

    (void)state;
    held_with_waiter(&h, "follow", 1);
    assert_int_equal(tu_cluster_move_slot(C, h.slot, 2), 0);
    tu_sleep_ms(300);
    t = unlock_to(&h.w, h.name, HA_MUTEX, h.m);
    fprintf(stderr, "    unlock on the new owner -> waiter %.4f s\n", t);
    assert_dbl_range(t, 0, slack(1.5));
    assert_int_equal(tu_cluster_move_slot(C, h.slot, 1), 0);
}

/* PUBSUB NUMSUB (plain) or SHARDNUMSUB of chan, summed over every node. */
static long long subscribers(const char *verb, const char *chan)
{
    long long sum = 0;
    int node;

    for (node = 0; node < tu_nodes_count(N); node++) {
        redisReply *r = tu_node_cmd(N, node, "PUBSUB", verb, chan, NULL);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_INTEGER)
            sum += r->element[1]->integer;
        freeReplyObject(r);
    }
    return sum;
}

/* Reads sub's pattern messages until a "0" on a channel that starts with
 * prefix (is prefix, unless more): 1, or 0 when none came in its timeout. */
static int got_plain(redisContext *sub, const char *prefix, int more)
{
    size_t n = strlen(prefix);

    for (;;) {
        redisReply *r = NULL;
        int ok;
        if (redisGetReply(sub, (void **)&r) != REDIS_OK || !r)
            return 0;
        ok = r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
             strcmp(r->element[0]->str, "pmessage") == 0 &&
             strncmp(r->element[2]->str, prefix, n) == 0 &&
             (more ? r->element[2]->len > n : r->element[2]->len == n) &&
             strcmp(r->element[3]->str, "0") == 0;
        freeReplyObject(r);
        if (ok)
            return 1;
    }
}

/* ?pubsub=plain, for Redisson lines before 3.22 and Redis 6 clusters:
 * releases go by PUBLISH, which the cluster passes to every node, and
 * waiters listen with SUBSCRIBE.  A subscriber on a master that does not
 * serve the lock hears the mutex's release and a fair waiter's wake-up,
 * the waiting processes are subscribed plainly (none sharded), and both
 * are woken by the message, long before the lease. */
static void test_plain_pubsub(void **state)
{
    char name[64], url[512], chan[160], own[200];
    dist_mutex_t *m;
    dist_mutexattr_t fa;
    struct ha_waiter w;
    struct timeval tv = { 5, 0 };
    redisContext *sub;
    redisReply *r;
    double t0, t;

    (void)state;
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    snprintf(url, sizeof url, "%s?pubsub=plain", tu_cluster_url(C));
    assert_int_equal(dist_set_url(url), 0);
    name_on(name, sizeof name, "plain", 1);
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
    assert_non_null(sub = tu_redis_admin(tu_node_server(N, 2)));
    redisSetTimeout(sub, tv);
    r = redisCommand(sub, "PSUBSCRIBE %s*", chan);
    assert_non_null(r);
    freeReplyObject(r);

    m = fx_mutex_on(name, NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    ha_waiter_start(&w, url, name, HA_MUTEX, WATCHDOG_MS);
    tu_sleep_ms(300); /* subscribed and asleep */
    assert_true(subscribers("NUMSUB", chan) >= 1);
    assert_int_equal(subscribers("SHARDNUMSUB", chan), 0);
    t0 = tu_now();
    assert_int_equal(dist_mutex_unlock(m), 0);
    t = ha_waiter_result(&w, slack(10.0));
    assert_true(t > 0);
    fprintf(stderr, "    plain pub/sub: mutex hand-off %.4f s\n", t - t0);
    assert_dbl_range(t - t0, 0, slack(1.5)); /* not the 10 s lease */
    assert_true(got_plain(sub, chan, 0));

    dist_mutexattr_init(&fa);
    dist_mutexattr_setfair(&fa, 1);
    m = fx_mutex_on(name, &fa); /* a fair one, on the same name */
    assert_int_equal(dist_mutex_lock(m), 0);
    ha_waiter_start(&w, url, name, HA_FAIR, WATCHDOG_MS);
    tu_sleep_ms(300);
    t0 = tu_now();
    assert_int_equal(dist_mutex_unlock(m), 0);
    t = ha_waiter_result(&w, slack(10.0));
    assert_true(t > 0);
    assert_dbl_range(t - t0, 0, slack(1.5));
    /* the fair release wakes the head on its own channel, N's plus ':<owner>' */
    snprintf(own, sizeof own, "%s:", chan);
    assert_true(got_plain(sub, own, 1));

    redisFree(sub);
    assert_int_equal(dist_set_url(tu_cluster_url(C)), 0);
}

/* Whether sub (subscribed to chan, sharded or not) gets a message on chan
 * within its timeout: 1, or 0 when none came. */
static int got_message(redisContext *sub, const char *chan)
{
    redisReply *r = NULL;
    int ok;

    if (redisGetReply(sub, (void **)&r) != REDIS_OK || !r)
        return 0;
    ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
         (strcmp(r->element[0]->str, "message") == 0 ||
          strcmp(r->element[0]->str, "smessage") == 0) &&
         strcmp(r->element[1]->str, chan) == 0;
    freeReplyObject(r);
    return ok;
}

/* One cluster pub/sub setting (query: "" the default, or "?pubsub=..."):
 * a distlock waiter behind a lock held by another client is woken by that
 * client's release published by `publish` (SPUBLISH or PUBLISH: Redisson's
 * two kinds), long before the lease; a distlock release reaches a plain
 * subscriber (on a master that does not serve the lock) when plain_too and
 * a sharded one on the lock's master always. */
static void check_pubsub_mode(const char *query, const char *publish,
                              int plain_too)
{
    char name[64], url[512], chan[160];
    dist_mutex_t *m;
    struct ha_waiter w;
    struct timeval tv = { 1, 0 };
    redisContext *plain, *sharded;
    redisReply *r;
    double t0, t;

    snprintf(url, sizeof url, "%s%s", tu_cluster_url(C), query);
    assert_int_equal(dist_set_url(url), 0);
    name_on(name, sizeof name, "mode", 1);
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);

    /* another client holds it; the distlock waiter listens both ways or one */
    freeReplyObject(tu_node_cmd(N, 1, "HSET", name, "other:1", "1", NULL));
    freeReplyObject(tu_node_cmd(N, 1, "PEXPIRE", name, "10000", NULL));
    ha_waiter_start(&w, url, name, HA_MUTEX, WATCHDOG_MS);
    tu_sleep_ms(300); /* subscribed and asleep */
    assert_true(subscribers("SHARDNUMSUB", chan) >= 1);
    if (plain_too)
        assert_true(subscribers("NUMSUB", chan) >= 1);
    else
        assert_int_equal(subscribers("NUMSUB", chan), 0);
    t0 = tu_now();
    freeReplyObject(tu_node_cmd(N, 1, "DEL", name, NULL));
    freeReplyObject(tu_node_cmd(N, 1, publish, chan, "0", NULL));
    t = ha_waiter_result(&w, slack(10.0));
    assert_true(t > 0);
    fprintf(stderr, "    pubsub%s: %s -> distlock waiter %.4f s\n",
            *query ? query + 7 : " (default)", publish, t - t0);
    assert_dbl_range(t - t0, 0, slack(1.5)); /* not the 10 s lease */

    /* a distlock release, heard by a plain and by a sharded subscriber */
    assert_non_null(plain = tu_redis_admin(tu_node_server(N, 2)));
    assert_non_null(sharded = tu_redis_admin(tu_node_server(N, 1)));
    redisSetTimeout(plain, tv);
    redisSetTimeout(sharded, tv);
    assert_non_null(r = redisCommand(plain, "SUBSCRIBE %s", chan));
    freeReplyObject(r);
    assert_non_null(r = redisCommand(sharded, "SSUBSCRIBE %s", chan));
    freeReplyObject(r);
    m = fx_mutex_on(name, NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_true(got_message(sharded, chan));
    assert_int_equal(got_message(plain, chan), plain_too);
    redisFree(plain);
    redisFree(sharded);
    assert_int_equal(dist_set_url(tu_cluster_url(C)), 0);
}

/* The default (pubsub=both) hears and reaches Redisson clients of either
 * kind: those from 3.22 (SPUBLISH, SSUBSCRIBE) and older lines (PUBLISH,
 * SUBSCRIBE); ?pubsub=both says the same; ?pubsub=sharded keeps to the
 * sharded kind, its waiters not subscribed plainly and its releases not
 * reaching plain subscribers. */
static void test_pubsub_modes(void **state)
{
    (void)state;
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    check_pubsub_mode("", "PUBLISH", 1);
    check_pubsub_mode("", "SPUBLISH", 1);
    check_pubsub_mode("?pubsub=both", "PUBLISH", 1);
    check_pubsub_mode("?pubsub=sharded", "SPUBLISH", 0);
}

/* The master of a held lock dies; its replica takes over.  The lock was
 * replicated before lock returned, so it is still held; the renewal's first
 * script call on the promoted replica (which has no cached scripts)
 * succeeds; unlock works and wakes a waiter through the new master. */
static void test_master_failover(void **state)
{
    struct held h;
    int old = 2, nm;
    double t_fault, t_fail, t_renew, t;

    (void)state;
    held_with_waiter(&h, "failover", old);

    t_fault = tu_now();
    assert_int_equal(tu_node_kill(N, old), 0);
    nm = tu_cluster_wait_promoted(C, old, 30000);
    t_fail = tu_now();
    assert_true(nm >= 0);
    assert_int_equal(node_exists(N, nm, h.name), 1);
    t_renew = ha_renewed_since(node_pttl, N, &nm, 1, h.name, WATCHDOG_MS,
                               t_fault, slack(10.0));
    assert_true(t_renew > 0);
    fprintf(stderr,
            "    kill -> replica promoted %.3f s, kill -> first "
            "renewal on it %.3f s\n",
            t_fail - t_fault, t_renew - t_fault);

    t = unlock_to(&h.w, h.name, HA_MUTEX, h.m); /* after the failover */
    fprintf(stderr, "    unlock -> waiter %.4f s\n", t);
    assert_dbl_range(t, 0, slack(1.5));

    assert_int_equal(tu_node_restart(N, old), 0);
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
}

/* With the master's replica stopped, an acquire on it gives
 * DIST_ENOREPLICA and leaves nothing behind; masters whose replica is
 * fine are not affected. */
static void test_replica_check(void **state)
{
    char name[64], other[64];
    dist_mutex_t *m, *o;
    int master = 0, replica = -1, i;

    (void)state;
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    for (i = 0; i < tu_nodes_count(N); i++)
        if (tu_node_master_of(N, i) == master)
            replica = i;
    assert_true(replica >= 0);
    name_on(name, sizeof name, "sync", master);
    name_on(other, sizeof other, "sync-other", 1);
    assert_int_equal(dist_set_replica_wait_ms(300), 0);
    m = fx_mutex_on(name, NULL);
    o = fx_mutex_on(other, NULL);
    assert_int_equal(tu_node_signal(N, replica, SIGSTOP), 0);
    assert_int_equal(dist_mutex_lock(m), DIST_ENOREPLICA);
    assert_int_equal(node_exists(N, master, name), 0);
    assert_int_equal(dist_mutex_lock(o), 0);
    assert_int_equal(dist_mutex_unlock(o), 0);
    assert_int_equal(tu_node_signal(N, replica, SIGCONT), 0);
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_set_replica_wait_ms(1000), 0);
}

/* ---- waiting objects (issue 21) ------------------------------------------- */

struct cond_waiter {
    dist_mutex_t *m;
    dist_cond_t *c;
    int rc;
    pthread_t th;
};

static void *cond_waiter_main(void *arg)
{
    struct cond_waiter *w = arg;
    struct timespec dl = realtime_in(20);

    w->rc = dist_mutex_lock(w->m);
    if (w->rc == 0) {
        w->rc = dist_cond_timedwait(w->c, w->m, &dl);
        if (dist_mutex_unlock(w->m) != 0 && w->rc == 0)
            w->rc = EIO;
    }
    return NULL;
}

/* The condition's slot rule: a condition tagged with its mutex's name
 * waits and is woken on the mutex's master; one that hashes elsewhere is
 * refused with EINVAL, the mutex still held.  The semaphore's and the
 * barrier's keys share their own slot. */
static void test_waiting_objects_slot_rule(void **state)
{
    char name[64], cname[96], key[128];
    struct cond_waiter w;
    dist_mutex_t m;
    dist_cond_t c, bad;
    dist_sem_t s;
    dist_barrier_t b;
    struct timespec dl;
    int slot, i;

    (void)state;
    assert_int_equal(tu_cluster_wait_ok(C, 30000), 0);
    slot = name_on(name, sizeof name, "cond", 1);
    snprintf(cname, sizeof cname, "{%s}:ready", name);
    snprintf(key, sizeof key, "distlock_cond_waiters:%s", cname);
    assert_int_equal(tu_cluster_keyslot(C, key), slot);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_cond_init(&c, cname, NULL), 0);
    w.m = &m;
    w.c = &c;
    w.rc = -1;
    assert_int_equal(pthread_create(&w.th, NULL, cond_waiter_main, &w), 0);
    for (i = 0; i < 200 && node_exists(N, 1, key) != 1; i++)
        tu_sleep_ms(20);
    assert_int_equal(node_exists(N, 1, key), 1);
    assert_int_equal(dist_cond_signal(&c), 0);
    pthread_join(w.th, NULL);
    assert_int_equal(w.rc, 0);

    /* a name in another slot (this one hashes whole) */
    for (i = 0;; i++) {
        snprintf(cname, sizeof cname, "cond-elsewhere-%d", i);
        snprintf(key, sizeof key, "distlock_cond_waiters:{%s}", cname);
        if (tu_cluster_keyslot(C, key) != slot)
            break;
    }
    assert_int_equal(dist_cond_init(&bad, cname, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    dl = realtime_in(0.2);
    assert_int_equal(dist_cond_timedwait(&bad, &m, &dl), EINVAL);
    assert_non_null(strstr(dist_last_error(), "slot"));
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_cond_destroy(&bad), 0);
    assert_int_equal(dist_cond_destroy(&c), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);

    name_on(name, sizeof name, "sem", 2);
    assert_int_equal(dist_sem_init(&s, name, 1, NULL), 0);
    assert_int_equal(dist_sem_trywait(&s), 0);
    assert_int_equal(dist_sem_trywait(&s), EAGAIN);
    assert_int_equal(dist_sem_post(&s), 0);
    assert_int_equal(dist_sem_destroy(&s), 0);
    name_on(name, sizeof name, "barrier", 0);
    assert_int_equal(dist_barrier_init(&b, name, 1), 0);
    assert_int_equal(dist_barrier_wait(&b), DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(dist_barrier_destroy(&b), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_OWN_TEST(test_locks_on_every_master),
        FX_OWN_TEST(test_moved_after_reshard),
        FX_OWN_TEST(test_deferred_moved),
        FX_OWN_TEST(test_ask_during_migration),
        FX_OWN_TEST(test_waiter_follows_moved_slot),
        FX_OWN_TEST(test_plain_pubsub),
        FX_OWN_TEST(test_pubsub_modes),
        FX_OWN_TEST(test_replica_check),
        FX_OWN_TEST(test_waiting_objects_slot_rule),
        FX_OWN_TEST(test_master_failover),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
