/*
 * topo: real Redis HA topologies on loopback for the distlock tests.
 *
 *   - Redis Cluster: tu_cluster_start(masters, replicas_per_master, opts)
 *   - Sentinel:      tu_sentinel_start(replicas, sentinels, opts)
 *
 * Plain C, no cmocka, built on testutil (link tests/testutil.c, hiredis,
 * -pthread).  Every function reports failure through its return value and
 * prints one line saying why on stderr ("topo: ..."), followed where it
 * helps by the tail of the log of the server concerned.
 *
 * Processes
 *   Every redis-server (data nodes and sentinels alike) is a tu_redis_t
 *   started by testutil (tu_redis_start_opts): our own child, not
 *   daemonized, on 127.0.0.1 at a port picked at run time (never a fixed
 *   port, never the system's Redis), with its own private temp dir
 *   "distlock-test-XXXXXX" (logfile redis.log, unix socket redis.sock, and
 *   nodes.conf / redis.conf), no persistence.  A node counts as started only
 *   once INFO server, over both its unix socket and its TCP port, reports
 *   our child's pid as process_id; a port somebody else holds (for a
 *   cluster node: the port or the bus port, port + 10000) is detected and
 *   another one tried.  Started from the main thread, the servers get
 *   PR_SET_PDEATHSIG SIGKILL and die with the test even on abort().  An
 *   atexit handler stops every topology still running (testutil's own one
 *   kills any server left), so a failed assertion leaks nothing but, after
 *   a crash that skips atexit, the temp dirs.  Admin commands (tu_*_cmd and
 *   everything topo sends itself) go over the unix sockets; the ports and
 *   URLs are what the library under test connects to.
 *
 * Connections
 *   tu_*_cmd open a fresh connection per command: nothing cached that a
 *   kill, a restart or a sentinel could leave broken.  Mind that a sentinel
 *   kills the clients of every node it promotes or reconfigures (CLIENT
 *   KILL TYPE normal): testutil's tu_cmd on tu_sentinel_node() keeps a
 *   cached connection, so its first command on such a node after a
 *   failover fails (NULL and a "Broken pipe"/"Connection reset" line) - use
 *   tu_sentinel_cmd there.  The same holds for the library under test:
 *   after a Sentinel failover, expect connection errors from the nodes
 *   involved, not only from the old master.  topo's own polling uses
 *   connections of its own (retried once after such an error), never
 *   testutil's.
 *
 * Node indexes
 *   Cluster: 0 .. masters-1 are the masters as created, master k owning the
 *   k-th of `masters` even, consecutive slot ranges (as redis-cli --cluster
 *   create splits them: 3 masters get 0-5460, 5461-10922, 10923-16383); the
 *   replicas of master k are nodes masters + k*replicas_per_master + j.
 *   Sentinel: data node 0 is the first master, 1 .. replicas its replicas;
 *   sentinel processes are numbered 0 .. sentinels-1 separately.
 *   Indexes never change; roles do (failovers).  Ask with tu_cluster_role /
 *   tu_sentinel_master, do not assume.
 *
 * Which nodes are "live"
 *   A node that was killed (tu_*_kill) or is stopped (SIGSTOP, however it
 *   was sent: /proc says so) is skipped by every wait and by the functions
 *   that ask "a node" something; they only talk to live nodes.  Commands
 *   sent explicitly (tu_*_cmd) to a stopped node time out after 1 s and
 *   return NULL.
 *
 * Threads and fork
 *   Read-only calls - tu_*_cmd, tu_cluster_cmd_asking, the accessors (size,
 *   port, pid, node id, url, name), tu_*_role, tu_*_master_of,
 *   tu_sentinel_master, tu_cluster_keyslot, tu_cluster_slot_owner,
 *   tu_cluster_redirect - may be called from any thread, also while another
 *   thread runs a wait, a migration or a signal (they use fresh
 *   connections or topo's locked ones), but not while the same node is
 *   being restarted, killed or stopped (tu_*_restart / _kill / _stop
 *   rewrite its tu_redis_t).  All other calls on one topology must not run
 *   concurrently with each other; tu_*_stop must be the last call.  A
 *   forked child may use the read-only calls (fresh connections);
 *   tu_*_stop in a child does nothing (the servers are the parent's) and
 *   the child's exit leaves them alone.
 *
 * Timeouts
 *   The waits take timeout_ms and poll (every 30 ms).  Pass generous
 *   bounds (10-30 s): on a loaded 2-core machine a failover that usually
 *   takes 2-3 s can take much longer.  Nothing here asserts a duration.
 *
 * Typical times (2-core VM; the same under 4 CPU hogs; every wait returns
 * only once everything it checks holds):
 *   cluster start, 3 masters or 3+3:  ~2.1 s (floor: Redis holds a new
 *       master's cluster_state at fail for 2 s after it starts)
 *   cluster failover, SIGKILL or SIGSTOP of a master (node timeout 1000 ms,
 *       until tu_cluster_wait_promoted returns):       2.2-2.9 s
 *   cluster: killed master restarted until it is a replica and the cluster
 *       is ok (tu_cluster_restart + tu_cluster_wait_ok): ~0.1 s;
 *       stopped one continued (SIGCONT):                ~0.5 s
 *   cluster: CLUSTER FAILOVER (tu_cluster_failover):    0.2-0.5 s
 *   cluster: slot move with a few keys:                 < 0.05 s
 *   sentinel start, 1+2 data nodes, 3 sentinels:        ~1.2 s
 *   SENTINEL FAILOVER (tu_sentinel_failover):           0.9-1.2 s
 *   sentinel failover after SIGKILL of the master (down-after 1000 ms,
 *       until tu_sentinel_wait_new_master returns):     2.1-2.3 s
 *   ... after SIGSTOP of the master:                    2.2-3.1 s
 *   old master back (alive after SENTINEL FAILOVER, or SIGCONT) until it
 *       reports role slave:                             ~4.1 s
 *   killed old master restarted until it is a synced replica: ~5.3 s
 * (Measured by tests/test_topo, which prints them; see there.)
 */
#ifndef DISTLOCK_TOPO_H
#define DISTLOCK_TOPO_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "testutil.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most nodes one topology may have (data nodes; sentinels separately). */
#define TU_TOPO_MAX_NODES 64
/* Number of hash slots of a Redis Cluster. */
#define TU_CLUSTER_SLOTS 16384

/* ======================================================================== */
/* Redis Cluster                                                            */
/* ======================================================================== */

typedef struct tu_cluster tu_cluster_t;

/* Settings for tu_cluster_start; NULL or a zero-filled struct means all
 * defaults. */
typedef struct tu_cluster_opts {
    /* --cluster-node-timeout; 0: 1000 ms.  Failure detection, and so
     * failover time, scales with it. */
    int node_timeout_ms;
    /* --cluster-require-full-coverage.  0 (default): "no", so a dead master
     * only takes ITS slots offline and the rest of the cluster keeps
     * answering during a failover; 1: "yes" (Redis's default: every node
     * answers CLUSTERDOWN until the slots are served again). */
    int require_full_coverage;
    /* How long tu_cluster_start waits for the cluster to form; 0: 30 s. */
    int start_timeout_ms;
    /* NULL-terminated redis-server arguments added to every node's command
     * line after ours (later ones win), e.g. {"--loglevel", "verbose",
     * NULL}; NULL: none. */
    const char *const *extra_args;
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
 * ADDSLOTSRANGE, MEET, REPLICATE; see topo.c for why not redis-cli).
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

/* Number of nodes (masters * (1 + replicas_per_master)). */
int tu_cluster_size(const tu_cluster_t *c);

/* Number of masters it was created with (not the current number). */
int tu_cluster_masters(const tu_cluster_t *c);

/* The slot range [*lo, *hi] master k was created with.  0 or -1. */
int tu_cluster_slot_range(const tu_cluster_t *c, int master, int *lo, int *hi);

/* The node's TCP port on 127.0.0.1 (its bus port is port + 10000); -1 for
 * a bad index.  Ports never change, not even across tu_cluster_restart. */
int tu_cluster_port(const tu_cluster_t *c, int node);

/* The node's pid; 0 if it was killed (and not restarted), -1 bad index. */
pid_t tu_cluster_pid(const tu_cluster_t *c, int node);

/* The node's cluster node id (40 hex digits, stable across restarts), or
 * NULL for a bad index.  Owned by c. */
const char *tu_cluster_node_id(const tu_cluster_t *c, int node);

/* The underlying testutil server (for tu_cmd_int, tu_cmd_str...).  Do not
 * stop, restart or kill it behind topo's back: use the tu_cluster_
 * functions.  NULL for a bad index. */
tu_redis_t *tu_cluster_node(tu_cluster_t *c, int node);

/* The node's role now, from ROLE: "master" or "slave"; NULL if it does not
 * answer (killed, stopped) or on error.  A static string. */
const char *tu_cluster_role(tu_cluster_t *c, int node);

/* For a node that is a replica now (ROLE), the index of the node it
 * replicates from; -1 otherwise. */
int tu_cluster_master_of(tu_cluster_t *c, int node);

/*
 * "redis-cluster://127.0.0.1:p1,127.0.0.1:p2,..." listing the nodes that
 * were created as masters (0 .. masters-1), in that order: the seed list a
 * cluster client starts from.  It does not change after failovers (a seed
 * that is down is one a client must skip).  Owned by c.
 */
const char *tu_cluster_url(const tu_cluster_t *c);

/*
 * Send one command to one node (no redirection is followed), given as a
 * NULL-terminated list of strings like tu_cmd (binary-safe, no format):
 *   redisReply *x = tu_cluster_cmd(c, 1, "SET", key, "v", NULL);
 * On a fresh connection (unix socket, 1 s timeouts).  Returns the reply,
 * error replies included (MOVED/ASK arrive as REDIS_REPLY_ERROR
 * "MOVED <slot> 127.0.0.1:<port>"), for the caller to freeReplyObject();
 * NULL (and a line on stderr) on I/O failure or if the node is not
 * running.
 */
redisReply *tu_cluster_cmd(tu_cluster_t *c, int node, const char *arg0, ...)
    TU_SENTINEL TU_WARN_UNUSED;

/* The same, on a fresh connection, preceded by ASKING (as a client does
 * after an ASK redirection): the node serves a key of a slot it is
 * importing.  Returns the command's reply. */
redisReply *tu_cluster_cmd_asking(tu_cluster_t *c, int node,
                                  const char *arg0, ...)
    TU_SENTINEL TU_WARN_UNUSED;

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

/*
 * kill(pid, sig).  For SIGSTOP it returns once the process is stopped, for
 * SIGCONT once it runs again (/proc), so the next call sees it that way.
 * A stopped master is, for the cluster, a failing one: after the node
 * timeout its replica takes over just as after a kill; once continued it
 * learns of the newer configuration and turns into a replica.
 * 0, or -1 if the node is not running.
 */
int tu_cluster_signal(tu_cluster_t *c, int node, int sig);

/* SIGKILL the node and reap it (a crash).  Its dir, port and nodes.conf
 * are kept for tu_cluster_restart.  0 / -1. */
int tu_cluster_kill(tu_cluster_t *c, int node);

/*
 * Start a killed node again on the same port with its nodes.conf (stopping
 * it first if it runs), empty data.  A former master whose slots were taken
 * over rejoins as a replica of the new owner; one whose slots nobody took
 * serves them again.  Returns when it answers (as our child) - call
 * tu_cluster_wait_ok to wait until the cluster has taken it back.  0 / -1.
 */
int tu_cluster_restart(tu_cluster_t *c, int node);

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
 * tu_cluster_start (e.g. after tu_cluster_restart, or after commands sent
 * with tu_cluster_cmd changed the layout).  0 / -1. */
int tu_cluster_wait_ok(tu_cluster_t *c, int timeout_ms);

/* ======================================================================== */
/* Sentinel                                                                 */
/* ======================================================================== */

typedef struct tu_sentinel tu_sentinel_t;

/* Settings for tu_sentinel_start; NULL or zero-filled: all defaults. */
typedef struct tu_sentinel_opts {
    const char *master_name;  /* NULL: "distlock" */
    int quorum;               /* 0: sentinels / 2 + 1 (2 of 3) */
    int down_after_ms;        /* down-after-milliseconds; 0: 1000 */
    /* failover-timeout; 0: 5000.  Sentinel waits 2x this before it tries
     * again to fail over the same master after an attempt that failed, and
     * aborts a promotion that takes longer; it is also how long a sentinel
     * that has not yet heard of a switch waits before it "fixes" a replica
     * that follows the new master, so do not make it much shorter. */
    int failover_timeout_ms;
    int start_timeout_ms;     /* how long start waits; 0: 30 s */
    /* 0 (default): shorten Sentinel's internal timers with SENTINEL DEBUG
     * (Redis >= 7.0): info-period 1000, ping-period down_after * 2/5
     * (400 for 1000, at most 1000), ask-period 250, publish-period 1000,
     * tilt-period 5000 ms (Redis: 10000, 1000, 1000, 2000, 30000), so that
     * sentinels find each other within ~1 s and a returning old master is
     * turned into a replica ~4 s after it answers instead of ~8-18 s.  The
     * choice keeps Sentinel's own safety margins (topo.c says which); 1:
     * leave Redis's timers alone. */
    int redis_timers;
    /* NULL-terminated redis-server arguments added to every data node's
     * command line (not the sentinels'); NULL: none. */
    const char *const *data_args;
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

/* Number of data nodes (1 + replicas) and of sentinels. */
int tu_sentinel_nodes(const tu_sentinel_t *s);
int tu_sentinel_count(const tu_sentinel_t *s);

/* The master name the sentinels monitor ("distlock" by default). */
const char *tu_sentinel_name(const tu_sentinel_t *s);

/* "redis-sentinel://127.0.0.1:s1,127.0.0.1:s2,.../<name>": every sentinel,
 * in index order, then the master name.  Owned by s. */
const char *tu_sentinel_url(const tu_sentinel_t *s);

/* Data node port / pid (0 if killed) / testutil server; -1 / NULL for a
 * bad index. */
int tu_sentinel_port(const tu_sentinel_t *s, int node);
pid_t tu_sentinel_pid(const tu_sentinel_t *s, int node);
tu_redis_t *tu_sentinel_node(tu_sentinel_t *s, int node);

/* Sentinel process i: port / testutil server (SENTINEL commands: use
 * tu_sentinel_scmd).  -1 / NULL for a bad index. */
int tu_sentinel_sentinel_port(const tu_sentinel_t *s, int i);
tu_redis_t *tu_sentinel_sentinel(tu_sentinel_t *s, int i);

/* One command to data node `node` / to sentinel i, NULL-terminated
 * arguments, as tu_cluster_cmd. */
redisReply *tu_sentinel_cmd(tu_sentinel_t *s, int node, const char *arg0, ...)
    TU_SENTINEL TU_WARN_UNUSED;
redisReply *tu_sentinel_scmd(tu_sentinel_t *s, int i, const char *arg0, ...)
    TU_SENTINEL TU_WARN_UNUSED;

/* Index of the data node every live sentinel reports as the master
 * (SENTINEL GET-MASTER-ADDR-BY-NAME); -1 if they do not all agree, or on
 * error.  No message for a disagreement (it is a normal state). */
int tu_sentinel_master(tu_sentinel_t *s);

/* The data node's role now, from ROLE: "master" or "slave"; NULL if it
 * does not answer.  A static string. */
const char *tu_sentinel_role(tu_sentinel_t *s, int node);

/* For a data node that is a replica now, the index of the node it
 * replicates from (ROLE); -1 otherwise. */
int tu_sentinel_master_of(tu_sentinel_t *s, int node);

/*
 * SENTINEL FAILOVER <name> (to the first live sentinel; retried while it
 * answers INPROG or NOGOODSLAVE, e.g. right after a previous failover),
 * then as tu_sentinel_wait_new_master.  Returns the new master's index, or
 * -1.  The old master stays up and is still a master until the sentinels
 * turn it into a replica (4 x publish-period after the switch: ~4 s with
 * the default timers, 8 s and more with Redis's): wait for that with
 * tu_sentinel_wait_role(old, "slave") or tu_sentinel_wait_ok if it
 * matters.
 */
int tu_sentinel_failover(tu_sentinel_t *s, int timeout_ms);

/*
 * Wait until every live sentinel reports the same master, other than old,
 * and that node's ROLE says master.  For failovers caused by a kill or a
 * SIGSTOP of old.  Returns the new master's index or -1 on timeout.
 */
int tu_sentinel_wait_new_master(tu_sentinel_t *s, int old, int timeout_ms);

/*
 * Wait until data node `node` reports role ("master" or "slave") in ROLE.
 * 0 / -1.
 *
 * An old master that comes back - continued after SIGSTOP, or restarted
 * with tu_sentinel_restart after a kill (empty, no persistence) - still
 * says it is a master.  The sentinels listed it as a replica of the new
 * master when they switched; once it has reported master for 4 x
 * publish-period (~4 s with our timers; 8 s plus up to an INFO period of
 * 10 s with Redis's) and has not been down for as long, a sentinel sends it
 * REPLICAOF <new master> ("+convert-to-slave" in the sentinel's log), it
 * resyncs and from then on reports role slave.  Until then there are two
 * masters, as in production.
 */
int tu_sentinel_wait_role(tu_sentinel_t *s, int node, const char *role,
                          int timeout_ms);

/*
 * Wait until the topology is settled: every live sentinel agrees on the
 * master, which is live and says master; it sees it flagged plain
 * "master" (no failover in progress), sentinels - 1 other sentinels, and
 * every other live data node as a healthy slave of it; and every other
 * live data node says (ROLE) it replicates from that master, connected.
 * 0 / -1.
 */
int tu_sentinel_wait_ok(tu_sentinel_t *s, int timeout_ms);

/* Data nodes: kill(pid, sig) (SIGSTOP / SIGCONT wait as tu_cluster_signal
 * does), SIGKILL + reap, restart on the same port (empty data, as a master;
 * see tu_sentinel_wait_role for what the sentinels do with it).  0 / -1. */
int tu_sentinel_signal(tu_sentinel_t *s, int node, int sig);
int tu_sentinel_kill(tu_sentinel_t *s, int node);
int tu_sentinel_restart(tu_sentinel_t *s, int node);

/* The same for sentinel i (a restarted sentinel reads its rewritten config
 * and gets the shortened timers again). */
int tu_sentinel_sentinel_signal(tu_sentinel_t *s, int i, int sig);
int tu_sentinel_sentinel_kill(tu_sentinel_t *s, int i);
int tu_sentinel_sentinel_restart(tu_sentinel_t *s, int i);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_TOPO_H */
