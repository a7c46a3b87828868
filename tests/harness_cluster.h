/*
 * harness_cluster: a Redis Cluster of private servers on loopback for the
 * tests; harness_topo.h says what all topologies share (processes,
 * connections, node indexes, live nodes, threads, timeouts).
 */
#ifndef DISTLOCK_HARNESS_CLUSTER_H
#define DISTLOCK_HARNESS_CLUSTER_H

#include "harness_topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of hash slots of a Redis Cluster. */
#define TU_CLUSTER_SLOTS 16384

typedef struct tu_cluster tu_cluster_t;

/* Settings for tu_cluster_start; NULL or a zero-filled struct means all
 * defaults. */
typedef struct tu_cluster_opts {
    tu_topo_opts topo; /* start timeout, the nodes' own arguments */
    /* --cluster-node-timeout; 0: 1000 ms.  Failure detection, and so
     * failover time, scales with it. */
    int node_timeout_ms;
    /* --cluster-require-full-coverage.  0 (default): "no", so a dead master
     * only takes ITS slots offline and the rest of the cluster keeps
     * answering during a failover; 1: "yes" (Redis's default: every node
     * answers CLUSTERDOWN until the slots are served again). */
    int require_full_coverage;
} tu_cluster_opts;

/*
 * Start masters * (1 + replicas_per_master) nodes (at most
 * TU_TOPO_MAX_NODES) and make them one cluster.  Every node runs with
 *   --cluster-enabled yes --cluster-config-file nodes.conf (in its own dir)
 *   --cluster-node-timeout <opts> --cluster-replica-validity-factor 0
 *   --cluster-require-full-coverage <opts, default no>
 *   --cluster-allow-replica-migration no  (replicas stay where they were
 *                                          put, the layout is predictable)
 *   --repl-diskless-sync-delay 0          (a replica syncs at once)
 * The cluster is made by hand (unique config epochs 1..masters,
 * ADDSLOTSRANGE, MEET, REPLICATE; harness_cluster.c says why not
 * redis-cli).
 * Returns when every node reports cluster_state:ok, knows every node, all
 * nodes show the same current epoch and the same layout (slot owners,
 * roles, masters, config epochs), every slot is served by a live master
 * and every replica has master_link_status:up.
 * A failover needs a majority of masters to vote: use 3 masters or more.
 * NULL on failure (nothing left running).
 */
tu_cluster_t *tu_cluster_start(int masters, int replicas_per_master,
                               const tu_cluster_opts *opts) TU_WARN_UNUSED;

/* Kill every node, remove the temp dirs, free c.  NULL is fine.  In a
 * forked child it does nothing. */
void tu_cluster_stop(tu_cluster_t *c);

/* The cluster's nodes, masters * (1 + replicas_per_master) of them, for
 * the tu_node_ calls of harness_topo.h (port, pid, commands, ROLE,
 * signals, kill, restart); the node indexes harness_topo.h describes.
 * NULL for NULL. */
tu_nodes_t *tu_cluster_nodes(tu_cluster_t *c);

/* Number of masters it was created with (not the current number). */
int tu_cluster_masters(const tu_cluster_t *c);

/* The slot range [*lo, *hi] master k was created with.  0 or -1. */
int tu_cluster_slot_range(const tu_cluster_t *c, int master, int *lo,
                          int *hi);

/* A node's bus port is its port (tu_node_port) + 10000. */

/* The node's cluster node id (40 hex digits, stable across restarts), or
 * NULL for a bad index.  Owned by c. */
const char *tu_cluster_node_id(const tu_cluster_t *c, int node);

/*
 * "redis-cluster://127.0.0.1:p1,127.0.0.1:p2,..." listing the nodes that
 * were created as masters (0 .. masters-1), in that order: the seed list a
 * cluster client starts from.  It does not change after failovers (a seed
 * that is down is one a client must skip).  Owned by c.
 */
const char *tu_cluster_url(const tu_cluster_t *c);

/* tu_node_cmd to node `node` of the cluster, on a fresh connection,
 * preceded by ASKING (as a client does after an ASK redirection): the
 * node serves a key of a slot it is importing.  Returns the command's
 * reply. */
redisReply *tu_cluster_cmd_asking(tu_cluster_t *c, int node, const char *arg0,
                                  ...) TU_SENTINEL TU_WARN_UNUSED;

/*
 * If reply is the error "<kind> <slot> 127.0.0.1:<port>" with kind "MOVED"
 * or "ASK" as asked, the index of the node it points to (and the slot in
 * *slot if not NULL); -1 if it is not such a redirection or the port is
 * not one of ours.  No message.
 */
int tu_cluster_redirect(const tu_cluster_t *c, const redisReply *reply,
                        const char *kind, int *slot);

/* The hash slot of key (CLUSTER KEYSLOT, asked from a live node), or -1. */
int tu_cluster_keyslot(tu_cluster_t *c, const char *key);

/* Index of the master serving slot, as the first live node sees it now
 * (CLUSTER NODES); -1 if none or on error. */
int tu_cluster_slot_owner(tu_cluster_t *c, int slot);

/*
 * Live migration of one slot to master `to` (the way redis-cli reshards):
 *   CLUSTER SETSLOT slot IMPORTING <source> on to,
 *   CLUSTER SETSLOT slot MIGRATING <to> on the source,
 *   GETKEYSINSLOT + MIGRATE ... REPLACE KEYS ... until the source has none,
 *   CLUSTER SETSLOT slot NODE <to> on to, the source, then every other
 *   live master,
 * then waits (up to 30 s) until every live node agrees on the new owner and
 * the cluster is ok as after tu_cluster_start.  From then on the source
 * (and every other node) answers MOVED <slot> <to> for keys of the slot.
 * 0 (also if `to` owns it already), -1 on error.
 */
int tu_cluster_move_slot(tu_cluster_t *c, int slot, int to);

/*
 * The same in steps, to look at a slot while it migrates:
 *   tu_cluster_migrate_begin: the two SETSLOT IMPORTING / MIGRATING; no key
 *     moves.  From now on the source answers ASK <slot> <to> for keys of
 *     the slot it does not have (any more), and `to` serves such keys to a
 *     client that sends ASKING first (tu_cluster_cmd_asking); without
 *     ASKING it answers MOVED to the source.
 *   tu_cluster_migrate_key: MIGRATE one key of a migrating slot from the
 *     source to `to` (the slot and both ends are those given to begin).
 *     1 moved, 0 the source did not have it, -1 error.
 *   tu_cluster_migrate_finish: move the keys left and assign the slot as
 *     tu_cluster_move_slot does, and wait for agreement.  `to` must be the
 *     one given to begin.
 * At most 16 slots may be migrating at once.  0 / -1.
 */
int tu_cluster_migrate_begin(tu_cluster_t *c, int slot, int to);
int tu_cluster_migrate_key(tu_cluster_t *c, const char *key);
int tu_cluster_migrate_finish(tu_cluster_t *c, int slot, int to);

/* Signals, kill and restart are tu_node_signal, tu_node_kill and
 * tu_node_restart on tu_cluster_nodes.  A stopped master is, for the
 * cluster, a failing one: after the node timeout its replica takes over
 * just as after a kill; once continued it learns of the newer
 * configuration and turns into a replica.  A restarted former master whose
 * slots were taken over rejoins as a replica of the new owner; one whose
 * slots nobody took serves them again: call tu_cluster_wait_ok to wait
 * until the cluster has taken it back. */

/*
 * After old_master died (or was stopped), wait until one of its replicas
 * (as of the last layout topo saw agreed: at start, or after the last
 * successful wait) is a master serving every slot old_master served, and
 * the cluster is ok again among the live nodes as after start (agreement,
 * every slot served, replicas in sync).  Returns the new master's index,
 * or -1 on timeout (the line says what was missing) or if old_master had
 * no replica.
 */
int tu_cluster_wait_promoted(tu_cluster_t *c, int old_master, int timeout_ms);

/*
 * Manual failover: CLUSTER FAILOVER on replica (a live replica; its
 * master must be live too), then wait as tu_cluster_wait_promoted for it.
 * The old master becomes its replica.  0 / -1.
 */
int tu_cluster_failover(tu_cluster_t *c, int replica, int timeout_ms);

/* Wait until the live nodes form an ok cluster, as checked at the end of
 * tu_cluster_start (e.g. after tu_node_restart, or after commands sent
 * with tu_node_cmd changed the layout).  0 / -1. */
int tu_cluster_wait_ok(tu_cluster_t *c, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_HARNESS_CLUSTER_H */
