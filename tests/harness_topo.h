/*
 * harness_topo: real Redis HA topologies on loopback for the distlock
 * tests: what the two kinds share.
 *
 *   - Redis Cluster: tu_cluster_start(masters, replicas_per_master, opts)
 *                    (harness_cluster.h; harness_cluster.c, harness_slots.c)
 *   - Sentinel:      tu_sentinel_start(replicas, sentinels, opts)
 *                    (harness_sentinel.h; harness_sentinel.c)
 *
 * Plain C, no cmocka, built on harness_server.h (tests/libharness.la,
 * hiredis, -pthread).  Every function reports failure through its return value and
 * prints one line saying why on stderr ("topo: ..."), followed where it
 * helps by the tail of the log of the server concerned.
 *
 * Processes
 *   Every redis-server (data nodes and sentinels alike) is a tu_redis_t
 *   started by the server harness (tu_redis_start_opts): our own child, not
 *   daemonized, on 127.0.0.1 at a port picked at run time (never a fixed
 *   port, never the system's Redis), with its own private temp dir
 *   "distlock-test-XXXXXX" (logfile redis.log, unix socket redis.sock, and
 *   nodes.conf / redis.conf), no persistence.  A node counts as started only
 *   once INFO server, over both its unix socket and its TCP port, reports
 *   our child's pid as process_id; a port somebody else holds (for a
 *   cluster node: the port or the bus port, port + 10000) is detected and
 *   another one tried.  Started from the main thread, the servers get
 *   PR_SET_PDEATHSIG SIGKILL and die with the test even on abort().  An
 *   atexit handler stops every topology still running (the server
 *   harness's own one kills any server left), so a failed assertion leaks nothing but, after
 *   a crash that skips atexit, the temp dirs.  Admin commands (tu_node_cmd and
 *   everything topo sends itself) go over the unix sockets; the ports and
 *   URLs are what the library under test connects to.
 *
 * Connections
 *   tu_node_cmd opens a fresh connection per command: nothing cached that a
 *   kill, a restart or a sentinel could leave broken.  Mind that a sentinel
 *   kills the clients of every node it promotes or reconfigures (CLIENT
 *   KILL TYPE normal): the server harness's tu_cmd on tu_node_server()
 *   keeps a cached connection, so its first command on such a node after a
 *   failover fails (NULL and a "Broken pipe"/"Connection reset" line) - use
 *   tu_node_cmd there.  The same holds for the library under test:
 *   after a Sentinel failover, expect connection errors from the nodes
 *   involved, not only from the old master.  topo's own polling uses
 *   connections of its own (retried once after such an error), never
 *   the server harness's.
 *
 * Node indexes
 *   Cluster: 0 .. masters-1 are the masters as created, master k owning the
 *   k-th of `masters` even, consecutive slot ranges (as redis-cli --cluster
 *   create splits them: 3 masters get 0-5460, 5461-10922, 10923-16383); the
 *   replicas of master k are nodes masters + k*replicas_per_master + j.
 *   Sentinel: data node 0 is the first master, 1 .. replicas its replicas;
 *   sentinel processes are numbered 0 .. sentinels-1 separately.
 *   Indexes never change; roles do (failovers).  Ask with tu_node_role /
 *   tu_sentinel_master, do not assume.
 *
 * Which nodes are "live"
 *   A node that was killed (tu_node_kill) or is stopped (SIGSTOP, however it
 *   was sent: /proc says so) is skipped by every wait and by the functions
 *   that ask "a node" something; they only talk to live nodes.  Commands
 *   sent explicitly (tu_node_cmd) to a stopped node time out after 1 s and
 *   return NULL.
 *
 * Threads and fork
 *   Read-only calls - tu_node_cmd, tu_cluster_cmd_asking, the accessors
 *   (count, port, pid, node id, url, name), tu_node_role, tu_node_master_of,
 *   tu_sentinel_master, tu_cluster_keyslot, tu_cluster_slot_owner,
 *   tu_cluster_redirect - may be called from any thread, also while another
 *   thread runs a wait, a migration or a signal (they use fresh
 *   connections or topo's locked ones), but not while the same node is
 *   being restarted, killed or stopped (tu_node_restart / _kill / _signal
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
 *       is ok (tu_node_restart + tu_cluster_wait_ok): ~0.1 s;
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
#ifndef DISTLOCK_HARNESS_TOPO_H
#define DISTLOCK_HARNESS_TOPO_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "harness_server.h"

/* Most nodes one topology may have (data nodes; sentinels separately). */
#define TU_TOPO_MAX_NODES 64

#ifdef __cplusplus
extern "C" {
#endif

/* What the start of every topology takes: the first member, topo, of
 * tu_cluster_opts and tu_sentinel_opts.  Zero-filled: the defaults. */
typedef struct tu_topo_opts {
    int start_timeout_ms; /* how long start waits; 0: 30 s */
    /* NULL-terminated redis-server arguments added to every data node's
     * command line after ours (later ones win), e.g. {"--loglevel",
     * "verbose", NULL}: a cluster's nodes, a Sentinel setup's data nodes
     * (not its sentinels).  NULL: none. */
    const char *const *node_args;
} tu_topo_opts;

/*
 * A table of one topology's servers, indexed from 0: a cluster's nodes
 * (tu_cluster_nodes), a Sentinel setup's data nodes (tu_sentinel_data) or
 * its sentinels (tu_sentinel_sentinels).  Owned by the topology, valid
 * until its tu_*_stop; the same pointer for the topology's whole life.
 * The calls below work alike on every kind of node and take NULL (the
 * table of a NULL topology) as a table with no node.
 */
typedef struct tu_nodes tu_nodes_t;

/* Number of nodes in the table; -1 for NULL. */
int tu_nodes_count(const tu_nodes_t *t);

/* Node i's TCP port on 127.0.0.1; -1 for a bad index.  Ports never change,
 * not even across tu_node_restart. */
int tu_node_port(const tu_nodes_t *t, int i);

/* Node i's pid; 0 if it was killed (and not restarted), -1 bad index. */
pid_t tu_node_pid(const tu_nodes_t *t, int i);

/* The underlying harness server (for tu_cmd_int, tu_cmd_str...).  Do not
 * stop, restart or kill it behind topo's back: use tu_node_kill and the
 * like.  NULL for a bad index. */
tu_redis_t *tu_node_server(tu_nodes_t *t, int i);

/*
 * Send one command to node i (no redirection is followed), given as a
 * NULL-terminated list of strings like tu_cmd (binary-safe, no format):
 *   redisReply *x = tu_node_cmd(tu_cluster_nodes(c), 1, "SET", key, "v",
 *                               NULL);
 * On a fresh connection (unix socket, 1 s timeouts).  Returns the reply,
 * error replies included (a cluster's MOVED/ASK arrive as
 * REDIS_REPLY_ERROR "MOVED <slot> 127.0.0.1:<port>"), for the caller to
 * freeReplyObject(); NULL (and a line on stderr) on I/O failure or if the
 * node is not running.
 */
redisReply *tu_node_cmd(tu_nodes_t *t, int i, const char *arg0,
                        ...) TU_SENTINEL TU_WARN_UNUSED;

/* Node i's role now, from ROLE: "master" or "slave"; NULL if it does not
 * answer (killed, stopped), answers something else (a sentinel) or on
 * error.  A static string. */
const char *tu_node_role(tu_nodes_t *t, int i);

/* For a node that is a replica now (ROLE), the index in the same table of
 * the node it replicates from; -1 otherwise. */
int tu_node_master_of(tu_nodes_t *t, int i);

/* Wait until node i reports role ("master" or "slave") in ROLE.  0 / -1.
 * (An old master of a Sentinel setup that comes back: see
 * tu_sentinel_failover for when it turns into a replica.) */
int tu_node_wait_role(tu_nodes_t *t, int i, const char *role, int timeout_ms);

/*
 * kill(pid, sig).  For SIGSTOP it returns once the process is stopped, for
 * SIGCONT once it runs again (/proc), so the next call sees it that way.
 * A stopped master is, for the cluster and for the sentinels, a failing
 * one: after the node timeout (down-after) a replica takes over just as
 * after a kill.  0, or -1 if the node is not running.
 */
int tu_node_signal(tu_nodes_t *t, int i, int sig);

/* SIGKILL the node and reap it (a crash).  Its dir, port and config files
 * are kept for tu_node_restart.  0 / -1. */
int tu_node_kill(tu_nodes_t *t, int i);

/*
 * Start a killed node again on the same port with its config (stopping it
 * first if it runs), empty data.  Returns when it answers (as our child);
 * what the topology then makes of it is the topology's: a cluster takes a
 * former master back as a replica of the node that took over its slots
 * (tu_cluster_wait_ok waits for that), sentinels turn a returning old
 * master into a replica (tu_node_wait_role), a restarted sentinel gets the
 * shortened timers again.  0 / -1.
 */
int tu_node_restart(tu_nodes_t *t, int i);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_HARNESS_TOPO_H */
