/*
 * harness_sentinel: a master, its replicas and the sentinels watching them,
 * private servers on loopback, for the tests; harness_topo.h says what all
 * topologies share (processes, connections, node indexes, live nodes,
 * threads, timeouts).
 */
#ifndef DISTLOCK_HARNESS_SENTINEL_H
#define DISTLOCK_HARNESS_SENTINEL_H

#include "harness_topo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tu_sentinel tu_sentinel_t;

/* Settings for tu_sentinel_start; NULL or zero-filled: all defaults. */
typedef struct tu_sentinel_opts {
    tu_topo_opts topo;       /* start timeout, the data nodes' arguments */
    const char *master_name; /* NULL: "distlock" */
    int quorum;              /* 0: sentinels / 2 + 1 (2 of 3) */
    int down_after_ms;       /* down-after-milliseconds; 0: 1000 */
    /* failover-timeout; 0: 5000.  Sentinel waits 2x this before it tries
     * again to fail over the same master after an attempt that failed, and
     * aborts a promotion that takes longer; it is also how long a sentinel
     * that has not yet heard of a switch waits before it "fixes" a replica
     * that follows the new master, so do not make it much shorter. */
    int failover_timeout_ms;
    /* 0 (default): shorten Sentinel's internal timers with SENTINEL DEBUG
     * (Redis >= 7.0): info-period 1000, ping-period down_after * 2/5
     * (400 for 1000, at most 1000), ask-period 250, publish-period 1000,
     * tilt-period 5000 ms (Redis: 10000, 1000, 1000, 2000, 30000), so that
     * sentinels find each other within ~1 s and a returning old master is
     * turned into a replica ~4 s after it answers instead of ~8-18 s.  The
     * choice keeps Sentinel's own safety margins (harness_sentinel.c says
     * which); 1: leave Redis's timers alone. */
    int redis_timers;
} tu_sentinel_opts;

/*
 * Start 1 master and `replicas` replicas (REPLICAOF the master; data nodes
 * run with --repl-diskless-sync-delay 0), wait until the replicas are in
 * sync, then start `sentinels` sentinels, each
 *   redis-server <dir>/redis.conf --sentinel --port S --bind 127.0.0.1 ...
 * with redis.conf written by us:
 *   sentinel resolve-hostnames no
 *   sentinel monitor <name> 127.0.0.1 <master port> <quorum>
 *   sentinel down-after-milliseconds <name> <opts, 1000>
 *   sentinel failover-timeout <name> <opts, 5000>
 *   sentinel parallel-syncs <name> 1
 * (the sentinel rewrites it; a restarted sentinel reads it back).  Returns
 * when every sentinel sees the master as master with num-slaves ==
 * replicas, every replica as a healthy slave, and sentinels - 1 other
 * sentinels, and the data nodes agree (tu_sentinel_wait_ok).
 * NULL on failure (nothing left running).
 */
tu_sentinel_t *tu_sentinel_start(int replicas, int sentinels,
                                 const tu_sentinel_opts *opts) TU_WARN_UNUSED;

/* Kill everything, remove the temp dirs, free s.  NULL is fine.  In a
 * forked child it does nothing. */
void tu_sentinel_stop(tu_sentinel_t *s);

/* The data nodes (1 + replicas; node 0 the first master) and the
 * sentinels, for the tu_node_ calls of harness_topo.h (port, pid,
 * commands, ROLE, signals, kill, restart).  A restarted sentinel reads its
 * rewritten config and gets the shortened timers again.  NULL for NULL. */
tu_nodes_t *tu_sentinel_data(tu_sentinel_t *s);
tu_nodes_t *tu_sentinel_sentinels(tu_sentinel_t *s);

/* The master name the sentinels monitor ("distlock" by default). */
const char *tu_sentinel_name(const tu_sentinel_t *s);

/* "redis-sentinel://127.0.0.1:s1,127.0.0.1:s2,.../<name>": every sentinel,
 * in index order, then the master name.  Owned by s. */
const char *tu_sentinel_url(const tu_sentinel_t *s);

/* Index of the data node every live sentinel reports as the master
 * (SENTINEL GET-MASTER-ADDR-BY-NAME); -1 if they do not all agree, or on
 * error.  No message for a disagreement (it is a normal state). */
int tu_sentinel_master(tu_sentinel_t *s);

/*
 * SENTINEL FAILOVER <name> (to the first live sentinel; retried while it
 * answers INPROG or NOGOODSLAVE, e.g. right after a previous failover),
 * then as tu_sentinel_wait_new_master.  Returns the new master's index, or
 * -1.  The old master stays up and is still a master until the sentinels
 * turn it into a replica (4 x publish-period after the switch: ~4 s with
 * the default timers, 8 s and more with Redis's): wait for that with
 * tu_node_wait_role(data, old, "slave") or tu_sentinel_wait_ok if it
 * matters.
 *
 * An old master that comes back - continued after SIGSTOP, or restarted
 * with tu_node_restart after a kill (empty, no persistence) - still says
 * it is a master.  The sentinels listed it as a replica of the new master
 * when they switched; once it has reported master for 4 x publish-period
 * (~4 s with our timers; 8 s plus up to an INFO period of 10 s with
 * Redis's) and has not been down for as long, a sentinel sends it
 * REPLICAOF <new master> ("+convert-to-slave" in the sentinel's log), it
 * resyncs and from then on reports role slave (tu_node_wait_role).  Until
 * then there are two masters, as in production.
 */
int tu_sentinel_failover(tu_sentinel_t *s, int timeout_ms);

/*
 * Wait until every live sentinel reports the same master, other than old,
 * and that node's ROLE says master.  For failovers caused by a kill or a
 * SIGSTOP of old.  Returns the new master's index or -1 on timeout.
 */
int tu_sentinel_wait_new_master(tu_sentinel_t *s, int old, int timeout_ms);

/*
 * Wait until the topology is settled: every live sentinel agrees on the
 * master, which is live and says master; it sees it flagged plain
 * "master" (no failover in progress), sentinels - 1 other sentinels, and
 * every other live data node as a healthy slave of it; and every other
 * live data node says (ROLE) it replicates from that master, connected.
 * 0 / -1.
 */
int tu_sentinel_wait_ok(tu_sentinel_t *s, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_HARNESS_SENTINEL_H */
