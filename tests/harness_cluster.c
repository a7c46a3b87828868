/*
 * harness_cluster: a Redis Cluster of private servers for the tests:
 * start, accessors, ASKING, redirections and failovers (harness_cluster.h);
 * a node's own calls (port, commands, signals, restart) are
 * harness_topo.c's, on c->nodes.
 * What the nodes see of the cluster is harness_layout.c; slot migration
 * harness_slots.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TP_BUS_OFFSET 10000 /* cluster bus port = port + 10000 */

/* A fresh connection: ASKING, then the command, pipelined. */
static redisReply *asking_cmdv(tu_redis_t *r, int argc, const char **argv)
{
    redisContext *ctx;
    redisReply *first = NULL, *second = NULL;
    struct hx_pipe_guard g;
    char err[160];
    void *p;

    if (!tp_usable(r)) {
        tp_err("%s after ASKING: node not running", argv[0]);
        return NULL;
    }
    ctx = tp_connect(r, err, sizeof(err));
    if (ctx == NULL) {
        tp_err("%s after ASKING on port %d: %s", argv[0], r->port, err);
        return NULL;
    }
    hx_pipe_block(&g);
    if (redisAppendCommand(ctx, "ASKING") == REDIS_OK &&
        redisAppendCommandArgv(ctx, argc, argv, NULL) == REDIS_OK &&
        redisGetReply(ctx, &p) == REDIS_OK) {
        first = p;
        if (redisGetReply(ctx, &p) == REDIS_OK)
            second = p;
    }
    hx_pipe_unblock(&g);
    if (second == NULL)
        tp_err("%s after ASKING on port %d: %s", argv[0], r->port,
               ctx->errstr[0] ? ctx->errstr : "I/O error");
    else if (!tp_reply_ok(first))
        tp_err("ASKING on port %d: %s", r->port, tp_reply_err(first));
    if (first != NULL)
        freeReplyObject(first);
    redisFree(ctx);
    return second;
}

/* A TCP port on 127.0.0.1 we can bind now (no SO_REUSEADDR: a port in
 * TIME_WAIT counts as taken, which only makes us pick another). */
static int port_bindable(int port)
{
    struct sockaddr_in sa;
    int fd, ok;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((unsigned short)port);
    ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/*
 * Port chooser for cluster nodes: Redis listens on port + 10000 for the
 * cluster bus and refuses a port above 55535.  The check is only a hint
 * (someone may take either port before the server binds); the server then
 * exits with "Address already in use" and the server harness tries another
 * port.
 */
static int cluster_pick_port(void)
{
    int i;

    for (i = 0; i < 200; i++) {
        int p = tu_free_port();

        if (p <= 0)
            return -1;
        if (p + TP_BUS_OFFSET <= 65535 && port_bindable(p + TP_BUS_OFFSET))
            return p;
    }
    return -1;
}

/* Last slot of master k: round((k + 1) * 16384 / masters - 1), the way
 * redis-cli --cluster create splits them (exact integer arithmetic). */
static int range_end(int masters, int k)
{
    long a = (long)(k + 1) * TU_CLUSTER_SLOTS - masters;

    if (k >= masters - 1)
        return TU_CLUSTER_SLOTS - 1;
    return (int)((2 * a + masters) / (2L * masters));
}

/* The initial slot range of master k. */
static void initial_range(int masters, int k, int *lo, int *hi)
{
    *lo = k == 0 ? 0 : range_end(masters, k - 1) + 1;
    *hi = range_end(masters, k);
}

/* The registry's free (tp_register): the nodes stopped, c freed. */
static void cluster_free(struct tp_head *h)
{
    tu_cluster_t *c = (tu_cluster_t *)(void *)h;

    tp_nodes_stop(&c->nodes);
    free(c->url);
    free(c);
}

void tu_cluster_stop(tu_cluster_t *c)
{
    tp_stop(c != NULL ? &c->head : NULL);
}

/* CLUSTER REPLICATE on replica i once it knows its master (gossip). */
static int make_replica(tu_cluster_t *c, int i, int m, double deadline)
{
    redisReply *x = NULL;

    for (;;) {
        x = tp_act(
            &c->nodes.node[i],
            (const char *[]){ "CLUSTER", "REPLICATE", c->id[m], NULL });
        if (tp_reply_ok(x))
            break;
        if (x == NULL || tu_now() > deadline) {
            tp_err("CLUSTER REPLICATE on node %d (of node %d): %s", i, m,
                   tp_reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            tu_redis_print_log(&c->nodes.node[i], TP_LOG_LINES);
            return -1;
        }
        freeReplyObject(x); /* "Unknown node": not met yet */
        tu_sleep_ms(10);
    }
    freeReplyObject(x);
    return 0;
}

/* The command line of every node: ours, then o->topo.node_args.  The
 * number of arguments, or -1 (too many). */
static int cluster_args(const tu_cluster_opts *o, const char **args, int cap,
                        char *timeout, size_t tlen)
{
    /* nodes.conf is relative to the node's own dir: the same name for all */
    const char *mine[] = {
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        timeout,
        "--cluster-replica-validity-factor",
        "0",
        "--cluster-require-full-coverage",
        o->require_full_coverage ? "yes" : "no",
        "--cluster-allow-replica-migration",
        "no",
        "--repl-diskless-sync-delay",
        "0",
    };

    int nargs;

    snprintf(timeout, tlen, "%d",
             o->node_timeout_ms > 0 ? o->node_timeout_ms : 1000);
    for (nargs = 0; nargs < (int)(sizeof(mine) / sizeof(mine[0])); nargs++)
        args[nargs] = mine[nargs];
    return tp_node_args(args, nargs, cap, &o->topo);
}

/* A registered cluster of n nodes, none started yet. */
static tu_cluster_t *cluster_new(int masters, int replicas_per_master, int n)
{
    tu_cluster_t *c = calloc(1, sizeof(*c));
    int i;

    if (c == NULL) {
        tp_err("cluster: out of memory");
        return NULL;
    }
    tp_nodes_init(&c->nodes, n, "cluster node");
    c->masters = masters;
    c->replicas = replicas_per_master;
    for (i = 0; i < n; i++)
        c->master_of[i] =
            i < masters ? -1 : (i - masters) / replicas_per_master;
    tp_register(&c->head, cluster_free);
    return c;
}

/* Start every node and learn its id.  Masters first: Redis holds a
 * master's cluster_state at fail for 2 s after it starts, so they should
 * start their clocks first. */
static int start_nodes(tu_cluster_t *c, const tu_redis_opts *ro)
{
    int i;

    for (i = 0; i < c->nodes.n; i++) {
        redisReply *x;

        if (tu_redis_start_opts(&c->nodes.node[i], ro) != 0) {
            tp_err("cluster: node %d did not start", i);
            return -1;
        }
        x = tp_query(&c->nodes.node[i], &c->nodes.q[i], "CLUSTER", "MYID",
                     NULL);
        if (tp_reply_text(x) == NULL || strlen(x->str) != TP_ID_LEN) {
            tp_err("cluster: CLUSTER MYID on node %d: %s", i,
                   tp_reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            return -1;
        }
        memcpy(c->id[i], x->str, TP_ID_LEN + 1);
        freeReplyObject(x);
    }
    c->url = tp_make_url("redis-cluster://", &c->nodes, c->masters, "");
    if (c->url == NULL) {
        tp_err("cluster: out of memory");
        return -1;
    }
    return 0;
}

/* Unique config epochs and the initial slot ranges of the masters. */
static int assign_slots(tu_cluster_t *c)
{
    char buf[32], lo_s[16], hi_s[16];
    int k, i;

    for (k = 0; k < c->masters; k++) {
        int lo, hi;

        initial_range(c->masters, k, &lo, &hi);
        snprintf(buf, sizeof(buf), "%d", k + 1);
        snprintf(lo_s, sizeof(lo_s), "%d", lo);
        snprintf(hi_s, sizeof(hi_s), "%d", hi);
        if (tp_cmd_ok(&c->nodes.node[k], "node", k, "CLUSTER",
                      "SET-CONFIG-EPOCH", buf, NULL) != 0 ||
            tp_cmd_ok(&c->nodes.node[k], "node", k, "CLUSTER",
                      "ADDSLOTSRANGE", lo_s, hi_s, NULL) != 0)
            return -1;
        for (i = lo; i <= hi; i++)
            c->owner[i] = (short)k;
    }
    return 0;
}

/* Every node meets node 0; the replicas follow their masters. */
static int join_nodes(tu_cluster_t *c, double deadline)
{
    char port0[16];
    int i;

    snprintf(port0, sizeof(port0), "%d", c->nodes.node[0].port);
    for (i = 1; i < c->nodes.n; i++)
        if (tp_cmd_ok(&c->nodes.node[i], "node", i, "CLUSTER", "MEET",
                      "127.0.0.1", port0, NULL) != 0)
            return -1;
    for (i = c->masters; i < c->nodes.n; i++)
        if (make_replica(c, i, c->master_of[i], deadline) != 0)
            return -1;
    return 0;
}

/* A wait for the cluster with no extra condition. */
static int wait_plain(tu_cluster_t *c, int timeout_ms, const char *what)
{
    struct cl_want w;

    memset(&w, 0, sizeof(w));
    w.slot = -1;
    w.old_master = -1;
    return tp_cluster_wait(c, &w, timeout_ms, what);
}

/* The nodes started, the masters given their slots, everybody joined,
 * and the cluster ok by the deadline.  0 / -1. */
static int cluster_build(tu_cluster_t *c, const tu_redis_opts *ro,
                         double deadline)
{
    if (start_nodes(c, ro) != 0 || assign_slots(c) != 0 ||
        join_nodes(c, deadline) != 0)
        return -1;
    return wait_plain(c, tp_ms_left(deadline), "cluster start");
}

/*
 * Why not redis-cli --cluster create: it waits in steps of a second for
 * the nodes to join and checks with its own client, adding a few seconds
 * to every start, and its output would have to be parsed for errors.  By
 * hand it is a handful of commands, and the wait below checks more (every
 * node's view, replica links) than redis-cli does.  Unique config epochs
 * are set before the nodes meet, as redis-cli does, so that no epoch
 * collision has to be resolved while they join.
 */
tu_cluster_t *tu_cluster_start(int masters, int replicas_per_master,
                               const tu_cluster_opts *opts)
{
    static const tu_cluster_opts defaults;
    const tu_cluster_opts *o = opts != NULL ? opts : &defaults;
    const char *args[64];
    char timeout[16];
    tu_redis_opts ro;
    tu_cluster_t *c;
    double deadline;

    if (masters < 1 || replicas_per_master < 0 ||
        masters > TU_TOPO_MAX_NODES ||
        replicas_per_master >= TU_TOPO_MAX_NODES || /* no overflow below */
        masters * (1 + replicas_per_master) > TU_TOPO_MAX_NODES) {
        tp_err("cluster: bad size %d masters x %d replicas (at most %d "
               "nodes)",
               masters, replicas_per_master, TU_TOPO_MAX_NODES);
        return NULL;
    }
    deadline = tp_start_deadline(&o->topo);
    if (cluster_args(o, args, (int)(sizeof(args) / sizeof(args[0])), timeout,
                     sizeof(timeout)) < 0)
        return NULL;
    memset(&ro, 0, sizeof(ro));
    ro.args = args;
    ro.pick_port = cluster_pick_port;
    c = cluster_new(masters, replicas_per_master,
                    masters * (1 + replicas_per_master));
    if (c == NULL)
        return NULL;
    return tp_started(&c->head, cluster_build(c, &ro, deadline));
}

tu_nodes_t *tu_cluster_nodes(tu_cluster_t *c)
{
    return c != NULL ? &c->nodes : NULL;
}

int tu_cluster_masters(const tu_cluster_t *c)
{
    return c != NULL ? c->masters : -1;
}

int tu_cluster_slot_range(const tu_cluster_t *c, int master, int *lo, int *hi)
{
    if (c == NULL || master < 0 || master >= c->masters || !lo || !hi)
        return -1;
    initial_range(c->masters, master, lo, hi);
    return 0;
}

const char *tu_cluster_node_id(const tu_cluster_t *c, int node)
{
    return tp_valid_node(c, node) ? c->id[node] : NULL;
}

const char *tu_cluster_url(const tu_cluster_t *c)
{
    return c != NULL ? c->url : NULL;
}

redisReply *tu_cluster_cmd_asking(tu_cluster_t *c, int node, const char *arg0,
                                  ...)
{
    const char **argv;
    redisReply *x;
    va_list ap;
    int argc = 0;

    if (!tp_valid_node(c, node) || arg0 == NULL) {
        tp_err("cluster command: no node %d or no command", node);
        return NULL;
    }
    va_start(ap, arg0);
    argv = hx_collect_args(arg0, ap, &argc);
    va_end(ap);
    if (argv == NULL) {
        tp_err("%s: out of memory", arg0);
        return NULL;
    }
    x = asking_cmdv(&c->nodes.node[node], argc, argv);
    free(argv);
    return x;
}

int tu_cluster_redirect(const tu_cluster_t *c, const redisReply *reply,
                        const char *kind, int *slot)
{
    size_t klen;
    char host[64];
    int s, port, used = 0;

    if (c == NULL || kind == NULL || reply == NULL ||
        reply->type != REDIS_REPLY_ERROR || reply->str == NULL)
        return -1;
    klen = strlen(kind);
    if (strncmp(reply->str, kind, klen) != 0 || reply->str[klen] != ' ')
        return -1;
    if (sscanf(reply->str + klen, " %d %63[^:]:%d%n", &s, host, &port,
               &used) != 3 ||
        reply->str[klen + (size_t)used] != '\0' ||
        strcmp(host, "127.0.0.1") != 0)
        return -1;
    if (slot != NULL)
        *slot = s;
    return tp_by_port(&c->nodes, port);
}

int tu_cluster_keyslot(tu_cluster_t *c, const char *key)
{
    redisReply *x;
    long long v;
    int i;

    if (c == NULL || key == NULL || (i = tp_first_usable(&c->nodes)) < 0) {
        tp_err("CLUSTER KEYSLOT: no node running");
        return -1;
    }
    x = tp_query(&c->nodes.node[i], &c->nodes.q[i], "CLUSTER", "KEYSLOT", key,
                 NULL);
    if (x == NULL || x->type != REDIS_REPLY_INTEGER) {
        tp_err("CLUSTER KEYSLOT on node %d: %s", i, tp_reply_err(x));
        if (x != NULL)
            freeReplyObject(x);
        return -1;
    }
    v = x->integer;
    freeReplyObject(x);
    return (int)v;
}

static int wait_takeover(tu_cluster_t *c, int old_master, int new_master,
                         int timeout_ms, const char *what)
{
    struct cl_want w;
    int j, slots = 0, replicas = 0, rc;

    memset(&w, 0, sizeof(w));
    w.slot = -1;
    w.old_master = old_master;
    w.new_master = new_master;
    w.result = -1;
    for (j = 0; j < TU_CLUSTER_SLOTS; j++)
        slots += c->owner[j] == old_master;
    for (j = 0; j < c->nodes.n; j++)
        replicas += c->master_of[j] == old_master;
    if (slots == 0 || replicas == 0) {
        tp_err("%s: node %d served %d slots and had %d replicas (need "
               "both)",
               what, old_master, slots, replicas);
        return -1;
    }
    w.old_owner = malloc(sizeof(c->owner));
    if (w.old_owner == NULL) {
        tp_err("%s: out of memory", what);
        return -1;
    }
    memcpy(w.old_owner, c->owner, sizeof(c->owner));
    rc = tp_cluster_wait(c, &w, timeout_ms, what);
    free(w.old_owner);
    return rc == 0 ? w.result : -1;
}

int tu_cluster_wait_promoted(tu_cluster_t *c, int old_master, int timeout_ms)
{
    if (!tp_valid_node(c, old_master)) {
        tp_err("wait_promoted: no node %d", old_master);
        return -1;
    }
    return wait_takeover(c, old_master, -1, timeout_ms, "wait_promoted");
}

int tu_cluster_failover(tu_cluster_t *c, int replica, int timeout_ms)
{
    int old;

    if (!tp_valid_node(c, replica) || (old = c->master_of[replica]) < 0) {
        tp_err("failover: node %d is not a replica", replica);
        return -1;
    }
    if (tp_cmd_ok(&c->nodes.node[replica], "node", replica, "CLUSTER",
                  "FAILOVER", NULL) != 0)
        return -1;
    return wait_takeover(c, old, replica, timeout_ms, "failover") == replica
               ? 0
               : -1;
}

int tu_cluster_wait_ok(tu_cluster_t *c, int timeout_ms)
{
    if (c == NULL)
        return -1;
    return wait_plain(c, timeout_ms, "wait_ok");
}
