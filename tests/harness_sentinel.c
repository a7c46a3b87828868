/*
 * harness_sentinel: a master, its replicas and the sentinels watching
 * them, private servers for the tests: start, the waits for a settled
 * topology, failovers (harness_sentinel.h).  A node's own calls (port,
 * commands, signals, restart) are harness_topo.c's, on s->data and
 * s->sent.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"
#include "harness_sentinel.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Value of key in a flat [key, value, key, value...] array (SENTINEL
 * MASTER / REPLICAS); NULL if absent. */
static const char *kv_get(const redisReply *arr, const char *key)
{
    size_t i;

    if (arr == NULL || arr->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (i = 0; i + 1 < arr->elements; i += 2) {
        const char *k = tp_reply_text(arr->element[i]);
        if (k != NULL && strcmp(k, key) == 0)
            return tp_reply_text(arr->element[i + 1]);
    }
    return NULL;
}

struct tu_sentinel {
    struct tp_head head; /* first: the registry casts */
    int ndata, nsent;
    int fast_timers;
    int down_after_ms;
    int failover_timeout_ms;
    char name[64];
    char *url;
    struct tu_nodes data; /* node 0 the first master */
    struct tu_nodes sent; /* the sentinels */
};

/* The registry's free (tp_register): every server stopped, s freed. */
static void sentinel_free(struct tp_head *h)
{
    tu_sentinel_t *s = (tu_sentinel_t *)(void *)h;

    tp_nodes_stop(&s->sent);
    tp_nodes_stop(&s->data);
    free(s->url);
    free(s);
}

void tu_sentinel_stop(tu_sentinel_t *s)
{
    tp_stop(s != NULL ? &s->head : NULL);
}

/*
 * Shorter internal timers (see tu_sentinel_opts.redis_timers), chosen so
 * that no margin Sentinel relies on shrinks below what its own defaults
 * leave with down-after-milliseconds 1000:
 *
 *   ping-period = down_after * 2/5 (400 ms for 1000; at most 1000).  After a
 *     switch a sentinel resets the new master's "last answer" clock to now
 *     but still throttles reconnects to one per ping period; with both at
 *     1000 ms it can declare the new master down before it has connected
 *     and start another failover.  The replica selection's freshness limit
 *     (5 x ping-period = 2 s) stays well above the 1 s INFO period used
 *     during a failover.
 *   publish-period 1000: a replica that reports master is converted back by
 *     a sentinel that has not heard of the switch after 4 x publish-period;
 *     the leader notices a promotion within ~1 s (INFO every second) and
 *     tells the others at once, so 4 s leaves ~3 s.  (250 ms made fresh
 *     masters get demoted again under load.)
 *   info-period 1000, ask-period 250 (o_down within a quarter second of the
 *     others' s_down), tilt-period 5000 (a stalled sentinel resumes sooner).
 */
static int sentinel_debug(tu_sentinel_t *s, int i)
{
    char ping[16];
    int p = s->down_after_ms * 2 / 5;

    if (!s->fast_timers)
        return 0;
    snprintf(ping, sizeof(ping), "%d", p < 100 ? 100 : p > 1000 ? 1000 : p);
    return tp_cmd_ok(&s->sent.node[i], "sentinel", i, "SENTINEL", "DEBUG",
                     "info-period", "1000", "ping-period", ping, "ask-period",
                     "250", "publish-period", "1000", "tilt-period", "5000",
                     NULL);
}

/* A restarted sentinel reads its rewritten config, but not the timers
 * above: set them again (struct tu_nodes.restarted). */
static int sentinel_restarted(void *s, int i)
{
    return sentinel_debug(s, i);
}

/* The master port sentinel i reports; -1 if it does not answer. */
static int reported_master_port(tu_sentinel_t *s, int i)
{
    redisReply *x = tp_query(&s->sent.node[i], &s->sent.q[i], "SENTINEL",
                             "GET-MASTER-ADDR-BY-NAME", s->name, NULL);
    int port = -1;

    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        tp_reply_text(x->element[1]) != NULL)
        port = atoi(x->element[1]->str);
    if (x != NULL)
        freeReplyObject(x);
    return port;
}

/* The data node every live sentinel reports, or -1 (why says why). */
static int agreed_master(tu_sentinel_t *s, char *why, size_t wlen, int *bad)
{
    int i, m = -1, first = -1;

    for (i = 0; i < s->sent.n; i++) {
        int port, idx;

        if (!tp_usable(&s->sent.node[i]))
            continue;
        port = reported_master_port(s, i);
        idx = tp_by_port(&s->data, port);
        if (idx < 0) {
            hx_why(why, wlen,
                   "sentinel %d reports master port %d, not one "
                   "of the data nodes",
                   i, port);
            *bad = i;
            return -1;
        }
        if (first < 0) {
            first = i;
            m = idx;
        } else if (idx != m) {
            hx_why(why, wlen,
                   "sentinel %d reports node %d as master, "
                   "sentinel %d node %d",
                   first, m, i, idx);
            *bad = i;
            return -1;
        }
    }
    if (first < 0) {
        hx_why(why, wlen, "no sentinel is running");
        return -1;
    }
    return m;
}

/* The entry of data node j in a SENTINEL REPLICAS reply, or NULL. */
static const redisReply *replica_entry(const tu_sentinel_t *s,
                                       const redisReply *reps, int j)
{
    const redisReply *e = NULL;
    size_t k;

    for (k = 0; k < reps->elements; k++) {
        const char *p = kv_get(reps->element[k], "port");
        if (p != NULL && atoi(p) == s->data.node[j].port)
            e = reps->element[k];
    }
    return e;
}

/* Why a check failed, and whose logs tell more: sentinel bad, data node
 * bad_data (-1: none). */
struct verdict {
    char *why;
    size_t wlen;
    int bad, bad_data;
};

/* The master m says master, every other live data node replicates from
 * it, connected (ROLE). */
static int check_data(tu_sentinel_t *s, int m, struct verdict *v)
{
    char state[32];
    int j, mport;

    v->bad_data = m;
    if (tp_node_role(&s->data.node[m], &s->data.q[m], NULL, NULL, 0) != 'M') {
        hx_why(v->why, v->wlen, "node %d, the sentinels' master, is %s", m,
               tp_usable(&s->data.node[m]) ? "not a master"
                                           : tp_down_name(&s->data.node[m]));
        return -1;
    }
    for (j = 0; j < s->data.n; j++) {
        if (j == m || !tp_usable(&s->data.node[j]))
            continue;
        if (tp_node_role(&s->data.node[j], &s->data.q[j], &mport, state,
                         sizeof(state)) != 'S' ||
            mport != s->data.node[m].port ||
            strcmp(state, "connected") != 0) {
            hx_why(v->why, v->wlen,
                   "node %d does not replicate from node %d "
                   "(yet)",
                   j, m);
            v->bad_data = j;
            return -1;
        }
    }
    return 0;
}

/* SENTINEL MASTER on sentinel i: flags plain "master", the other
 * sentinels known, and with exact_slaves every replica counted. */
static int check_master_entry(tu_sentinel_t *s, int i, int exact_slaves,
                              struct verdict *v)
{
    redisReply *x = tp_query(&s->sent.node[i], &s->sent.q[i], "SENTINEL",
                             "MASTER", s->name, NULL);
    const char *f = kv_get(x, "flags");
    const char *o = kv_get(x, "num-other-sentinels");
    const char *n = kv_get(x, "num-slaves");
    int rc = -1;

    if (f == NULL || strcmp(f, "master") != 0)
        hx_why(v->why, v->wlen, "sentinel %d: master flags %s", i,
               f ? f : tp_reply_err(x));
    else if (o == NULL || atoi(o) != s->sent.n - 1)
        hx_why(v->why, v->wlen,
               "sentinel %d knows %s other sentinels, not "
               "%d",
               i, o ? o : "?", s->sent.n - 1);
    else if (exact_slaves && (n == NULL || atoi(n) != s->data.n - 1))
        hx_why(v->why, v->wlen, "sentinel %d knows %s replicas, not %d", i,
               n ? n : "?", s->data.n - 1);
    else
        rc = 0;
    if (x != NULL)
        freeReplyObject(x);
    return rc;
}

/* SENTINEL REPLICAS on sentinel i: every other live data node a healthy
 * slave of m. */
static int check_replicas(tu_sentinel_t *s, int i, int m, struct verdict *v)
{
    redisReply *reps = tp_query(&s->sent.node[i], &s->sent.q[i], "SENTINEL",
                                "REPLICAS", s->name, NULL);
    int j;

    if (reps == NULL || reps->type != REDIS_REPLY_ARRAY) {
        hx_why(v->why, v->wlen, "sentinel %d: SENTINEL REPLICAS: %s", i,
               tp_reply_err(reps));
        if (reps != NULL)
            freeReplyObject(reps);
        return -1;
    }
    for (j = 0; j < s->data.n; j++) {
        const redisReply *e;
        const char *flags, *link, *mport;

        if (j == m || !tp_usable(&s->data.node[j]))
            continue;
        e = replica_entry(s, reps, j);
        flags = kv_get(e, "flags");
        link = kv_get(e, "master-link-status");
        mport = kv_get(e, "master-port");
        if (flags == NULL || strcmp(flags, "slave") != 0 || link == NULL ||
            strcmp(link, "ok") != 0 || mport == NULL ||
            atoi(mport) != s->data.node[m].port) {
            hx_why(v->why, v->wlen,
                   "sentinel %d sees node %d as %s (link "
                   "%s, master port %s)",
                   i, j, flags ? flags : "unknown", link ? link : "?",
                   mport ? mport : "?");
            v->bad_data = j;
            freeReplyObject(reps);
            return -1;
        }
    }
    freeReplyObject(reps);
    return 0;
}

/*
 * Settled (see tu_sentinel_wait_ok)?  Returns the master's index, or -1
 * with v filled in.  With exact_slaves, num-slaves must be ndata - 1.
 */
static int sentinel_check(tu_sentinel_t *s, int exact_slaves,
                          struct verdict *v)
{
    int i, m;

    v->bad = v->bad_data = -1;
    m = agreed_master(s, v->why, v->wlen, &v->bad);
    if (m < 0 || check_data(s, m, v) != 0)
        return -1;
    for (i = 0; i < s->sent.n; i++) {
        if (!tp_usable(&s->sent.node[i]))
            continue;
        v->bad = i;
        if (check_master_entry(s, i, exact_slaves, v) != 0 ||
            check_replicas(s, i, m, v) != 0)
            return -1;
    }
    return m;
}

static int sentinel_wait(tu_sentinel_t *s, int exact_slaves, int timeout_ms,
                         const char *what)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    char why[256] = "";
    struct verdict v = { why, sizeof(why), -1, -1 };
    int m;

    while ((m = sentinel_check(s, exact_slaves, &v)) < 0 &&
           tu_now() <= deadline)
        tu_sleep_ms(TP_POLL_MS);
    if (m >= 0)
        return 0;
    tp_err("%s: not done after %d ms: %s", what, timeout_ms, why);
    if (v.bad >= 0)
        tu_redis_print_log(&s->sent.node[v.bad], TP_LOG_LINES);
    if (v.bad_data >= 0)
        tu_redis_print_log(&s->data.node[v.bad_data], TP_LOG_LINES);
    return -1;
}

/* Replicas attached to the master and in sync (before any sentinel). */
static int wait_replication(tu_sentinel_t *s, double deadline)
{
    char buf[32];
    int j;

    for (;;) {
        int ok = 1;

        if (tp_server_info(&s->data.node[0], &s->data.q[0], "replication",
                           "connected_slaves", buf, sizeof(buf)) == NULL ||
            atoi(buf) != s->data.n - 1)
            ok = 0;
        for (j = 1; ok && j < s->data.n; j++) {
            if (tp_server_info(&s->data.node[j], &s->data.q[j], "replication",
                               "master_link_status", buf,
                               sizeof(buf)) == NULL ||
                strcmp(buf, "up") != 0)
                ok = 0;
        }
        if (ok)
            return 0;
        if (tu_now() > deadline) {
            tp_err("sentinel start: the replicas did not sync with the "
                   "master");
            tu_redis_print_log(&s->data.node[0], TP_LOG_LINES);
            return -1;
        }
        tu_sleep_ms(10);
    }
}

/* A registered topology of 1 + replicas data nodes and `sentinels`
 * sentinels, none started yet; NULL with a message. */
static tu_sentinel_t *sentinel_new(int replicas, int sentinels,
                                   const tu_sentinel_opts *o)
{
    tu_sentinel_t *s = calloc(1, sizeof(*s));
    int n;

    if (s == NULL) {
        tp_err("sentinel: out of memory");
        return NULL;
    }
    tp_nodes_init(&s->data, replicas + 1, "data node");
    tp_nodes_init(&s->sent, sentinels, "sentinel");
    s->sent.restarted = sentinel_restarted;
    s->sent.owner = s;
    s->fast_timers = !o->redis_timers;
    s->down_after_ms = o->down_after_ms > 0 ? o->down_after_ms : 1000;
    s->failover_timeout_ms =
        o->failover_timeout_ms > 0 ? o->failover_timeout_ms : 5000;
    n = snprintf(s->name, sizeof(s->name), "%s",
                 o->master_name != NULL ? o->master_name : "distlock");
    if (n <= 0 || (size_t)n >= sizeof(s->name) ||
        strcspn(s->name, " \t\r\n\"'") != strlen(s->name)) {
        tp_err("sentinel: bad master name");
        sentinel_free(&s->head);
        return NULL;
    }
    tp_register(&s->head, sentinel_free);
    return s;
}

/* The data nodes: node 0 the master, the others its replicas, in sync. */
static int start_data(tu_sentinel_t *s, const tu_sentinel_opts *o,
                      double deadline)
{
    const char *args[64] = { "--repl-diskless-sync-delay", "0" };
    char port0[16];
    tu_redis_opts ro;
    int i;

    if (tp_node_args(args, 2, (int)(sizeof(args) / sizeof(args[0])),
                     &o->topo) < 0)
        return -1;
    memset(&ro, 0, sizeof(ro));
    ro.args = args;
    for (i = 0; i < s->data.n; i++) {
        if (tu_redis_start_opts(&s->data.node[i], &ro) != 0) {
            tp_err("sentinel: data node %d did not start", i);
            return -1;
        }
    }
    snprintf(port0, sizeof(port0), "%d", s->data.node[0].port);
    for (i = 1; i < s->data.n; i++)
        if (tp_cmd_ok(&s->data.node[i], "node", i, "REPLICAOF", "127.0.0.1",
                      port0, NULL) != 0)
            return -1;
    return wait_replication(s, deadline);
}

/* The sentinels, monitoring data node 0 with the settings of o. */
static int start_sentinels(tu_sentinel_t *s, const tu_sentinel_opts *o)
{
    static const char *const sentinel_args[] = { "--sentinel", NULL };
    int quorum = o->quorum > 0 ? o->quorum : s->sent.n / 2 + 1;
    char conf[1024];
    tu_redis_opts ro;
    int n, i;

    n = snprintf(conf, sizeof(conf),
                 "sentinel resolve-hostnames no\n"
                 "sentinel monitor %s 127.0.0.1 %d %d\n"
                 "sentinel down-after-milliseconds %s %d\n"
                 "sentinel failover-timeout %s %d\n"
                 "sentinel parallel-syncs %s 1\n",
                 s->name, s->data.node[0].port, quorum, s->name,
                 s->down_after_ms, s->name, s->failover_timeout_ms, s->name);
    if (n <= 0 || (size_t)n >= sizeof(conf)) {
        tp_err("sentinel: config too long");
        return -1;
    }
    memset(&ro, 0, sizeof(ro));
    ro.conf = conf;
    ro.args = sentinel_args;
    for (i = 0; i < s->sent.n; i++) {
        if (tu_redis_start_opts(&s->sent.node[i], &ro) != 0) {
            tp_err("sentinel: sentinel %d did not start", i);
            return -1;
        }
        if (sentinel_debug(s, i) != 0)
            return -1;
    }
    return 0;
}

/* s->url: every sentinel, then the master name. */
static int sentinel_url(tu_sentinel_t *s)
{
    char *list = tp_make_url("redis-sentinel://", &s->sent, s->sent.n, "");
    size_t len;

    if (list != NULL) {
        len = strlen(list) + strlen(s->name) + 2;
        s->url = malloc(len);
        if (s->url != NULL)
            snprintf(s->url, len, "%s/%s", list, s->name);
        free(list);
    }
    if (s->url == NULL) {
        tp_err("sentinel: out of memory");
        return -1;
    }
    return 0;
}

/* The data nodes and the sentinels started, and the topology settled by
 * the deadline.  0 / -1. */
static int sentinel_build(tu_sentinel_t *s, const tu_sentinel_opts *o,
                          double deadline)
{
    if (start_data(s, o, deadline) != 0 || start_sentinels(s, o) != 0 ||
        sentinel_url(s) != 0)
        return -1;
    return sentinel_wait(s, 1, tp_ms_left(deadline), "sentinel start");
}

tu_sentinel_t *tu_sentinel_start(int replicas, int sentinels,
                                 const tu_sentinel_opts *opts)
{
    static const tu_sentinel_opts defaults;
    const tu_sentinel_opts *o = opts != NULL ? opts : &defaults;
    tu_sentinel_t *s;
    double deadline;

    if (replicas < 0 || replicas >= TU_TOPO_MAX_NODES || sentinels < 1 ||
        sentinels > TU_TOPO_MAX_NODES) {
        tp_err("sentinel: bad size %d replicas, %d sentinels", replicas,
               sentinels);
        return NULL;
    }
    deadline = tp_start_deadline(&o->topo);
    s = sentinel_new(replicas, sentinels, o);
    if (s == NULL)
        return NULL;
    return tp_started(&s->head, sentinel_build(s, o, deadline));
}

tu_nodes_t *tu_sentinel_data(tu_sentinel_t *s)
{
    return s != NULL ? &s->data : NULL;
}

tu_nodes_t *tu_sentinel_sentinels(tu_sentinel_t *s)
{
    return s != NULL ? &s->sent : NULL;
}

const char *tu_sentinel_name(const tu_sentinel_t *s)
{
    return s != NULL ? s->name : NULL;
}

const char *tu_sentinel_url(const tu_sentinel_t *s)
{
    return s != NULL ? s->url : NULL;
}

int tu_sentinel_master(tu_sentinel_t *s)
{
    char why[256];
    int bad;

    if (s == NULL)
        return -1;
    return agreed_master(s, why, sizeof(why), &bad);
}

/* The new master once the sentinels agree on one other than old, and it
 * says master itself; -1 at the deadline, with why saying what was seen. */
static int poll_new_master(tu_sentinel_t *s, int old, double deadline,
                           char *why, size_t whylen)
{
    int bad = -1;

    for (;;) {
        int m = agreed_master(s, why, whylen, &bad);

        if (m >= 0 && m != old) {
            if (tp_node_role(&s->data.node[m], &s->data.q[m], NULL, NULL,
                             0) == 'M')
                return m;
            hx_why(why, whylen,
                   "the sentinels report node %d, which "
                   "does not say master (yet)",
                   m);
        } else if (m == old) {
            hx_why(why, whylen, "the sentinels still report node %d", old);
        }
        if (tu_now() > deadline)
            return -1;
        tu_sleep_ms(TP_POLL_MS);
    }
}

static void print_sentinel_log(tu_sentinel_t *s)
{
    int i = tp_first_usable(&s->sent);

    if (i >= 0)
        tu_redis_print_log(&s->sent.node[i], TP_LOG_LINES);
}

int tu_sentinel_wait_new_master(tu_sentinel_t *s, int old, int timeout_ms)
{
    char why[256] = "";
    int m;

    if (s == NULL)
        return -1;
    m = poll_new_master(s, old, tu_now() + timeout_ms / 1000.0, why,
                        sizeof(why));
    if (m >= 0)
        return m;
    tp_err("wait_new_master: none after %d ms: %s", timeout_ms, why);
    print_sentinel_log(s);
    return -1;
}

/* Asks the sentinels for a failover, again while one is still finishing or
 * no replica fits yet; 0, or -1 having said why.  Asked again (again set),
 * one under way is the one wanted: INPROG ends the asking. */
static int request_failover(tu_sentinel_t *s, double deadline, int again)
{
    int i = 0;

    for (;;) {
        redisReply *x;
        int retry;

        while (i < s->sent.n && !tp_usable(&s->sent.node[i]))
            i++;
        if (i >= s->sent.n) {
            tp_err("failover: no sentinel running");
            return -1;
        }
        x = tp_act(&s->sent.node[i],
                   (const char *[]){ "SENTINEL", "FAILOVER", s->name, NULL });
        if (tp_reply_ok(x) ||
            (again && x != NULL && x->type == REDIS_REPLY_ERROR &&
             strncmp(x->str, "INPROG", 6) == 0)) {
            freeReplyObject(x);
            return 0;
        }
        retry = x != NULL && x->type == REDIS_REPLY_ERROR &&
                (strncmp(x->str, "INPROG", 6) == 0 ||
                 strncmp(x->str, "NOGOODSLAVE", 11) == 0);
        if (!retry || tu_now() > deadline) {
            tp_err("SENTINEL FAILOVER on sentinel %d: %s", i,
                   tp_reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            tu_redis_print_log(&s->sent.node[i], TP_LOG_LINES);
            return -1;
        }
        freeReplyObject(x);
        tu_sleep_ms(100);
    }
}

/* A failover the sentinels abort (the chosen replica did not report
 * itself master within the failover timeout: "-failover-abort-slave-
 * timeout", seen on a loaded 2-core machine) is not tried again by them:
 * once a round of that timeout and a margin has passed with the old master
 * still named, it is asked for again, until the caller's deadline. */
int tu_sentinel_failover(tu_sentinel_t *s, int timeout_ms)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    char why[256] = "";
    int old, m;

    if (s == NULL)
        return -1;
    old = tu_sentinel_master(s);
    if (old < 0) {
        tp_err("failover: the sentinels do not agree on a master");
        return -1;
    }
    for (int again = 0;; again = 1) {
        double round = tu_now() + (s->failover_timeout_ms + 3000) / 1000.0;
        int bad = -1;

        if (request_failover(s, deadline, again) != 0)
            return -1;
        do {
            m = poll_new_master(s, old, round < deadline ? round : deadline,
                                why, sizeof(why));
            if (m >= 0)
                return m;
            round = deadline; /* another master named: it is coming */
        } while (tu_now() <= deadline &&
                 agreed_master(s, why, sizeof(why), &bad) != old);
        if (tu_now() > deadline)
            break;
        fprintf(stderr,
                "harness: the sentinels still name node %d %d ms "
                "after a failover was asked for; asking again\n",
                old, s->failover_timeout_ms + 3000);
    }
    tp_err("failover: no new master after %d ms: %s", timeout_ms, why);
    print_sentinel_log(s);
    return -1;
}

int tu_sentinel_wait_ok(tu_sentinel_t *s, int timeout_ms)
{
    if (s == NULL)
        return -1;
    return sentinel_wait(s, 0, timeout_ms, "sentinel wait_ok");
}
