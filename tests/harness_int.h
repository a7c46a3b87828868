/*
 * harness_int.h: what the files of the test harness share among
 * themselves.  Tests include harness_server.h, harness_proxy.h,
 * harness_cluster.h or harness_sentinel.h, never this one.
 */
#ifndef DISTLOCK_HARNESS_INT_H
#define DISTLOCK_HARNESS_INT_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "harness_server.h"

/* ---- harness_util.c ------------------------------------------------------ */

/* Block SIGPIPE in this thread around a command and swallow the one it
 * raised (hiredis writes with write(2)): writing to a server that just
 * died must not kill the test. */
struct hx_pipe_guard {
    sigset_t set, old;
    int was_pending;
};

void hx_pipe_block(struct hx_pipe_guard *g);
void hx_pipe_unblock(struct hx_pipe_guard *g);

/* redisCommandArgv inside the guard above. */
redisReply *hx_command(redisContext *c, int argc, const char **argv,
                       const size_t *lens);

/* A connection to the unix socket sock, or to 127.0.0.1:port when sock is
 * NULL, with timeout_ms as connect and command timeout, close-on-exec.
 * NULL with the reason in err (which may be NULL). */
redisContext *hx_connect(const char *sock, int port, long timeout_ms,
                         char *err, size_t elen);

/* A NULL-terminated va_list as a malloc'd vector, arg0 first; NULL when
 * arg0 is NULL or memory is short. */
const char **hx_collect_args(const char *arg0, va_list ap, int *argc);

/* The NULL-terminated arguments from arg0 on, sent to r by send; NULL
 * with a message when there are none or memory is short. */
redisReply *hx_send_va(tu_redis_t *r, const char *arg0, va_list ap,
                       redisReply *(*send)(tu_redis_t *, int, const char **));

/* "harness: <argv0>: <what>" on stderr. */
void hx_cmd_error(const char *argv0, const char *what);

/* vsnprintf into why (a reason kept for a later message). */
void hx_why(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Size of a file, 0 if it cannot be read. */
off_t hx_file_size(const char *path);

/* path from offset off on (at most the last 64 KiB), malloc'd; NULL when
 * memory is short. */
char *hx_read_from(const char *path, off_t off);

/* The last lines of text on stderr, indented, framed as a server log. */
void hx_print_tail(const char *text, int lines);

/* text into path (mode 0600).  0, or -1 with a message. */
int hx_write_file(const char *path, const char *text);

/* A private dir "<$TMPDIR or /tmp>/distlock-test-XXXXXX" for r, with
 * r->dir, r->sock and r->url_unix filled in.  0 or -1. */
int hx_make_dir(tu_redis_t *r);

/* Remove a dir made by hx_make_dir, recursively; anything else is left
 * alone. */
void hx_remove_dir(const char *dir);

/* ---- harness_topo.c: what the Cluster and Sentinel harnesses share ------- */

#include <pthread.h>

#include "harness_topo.h"

/* "topo: <text>" on stderr. */
void tp_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Running and able to answer: started, not killed, not stopped, not a
 * zombie. */
int tp_usable(const tu_redis_t *r);

/* Why a server is not usable, for messages ("killed", "stopped"...). */
const char *tp_down_name(const tu_redis_t *r);

/* A connection to the server's unix socket, 1 s connect and command
 * timeouts.  NULL with *err set. */
redisContext *tp_connect(const tu_redis_t *r, char *err, size_t elen);

/* One command on a fresh connection; a line on stderr if it gets no reply
 * and loud.  Error replies are returned, not reported. */
redisReply *tp_fresh_cmdv(const tu_redis_t *r, int argc, const char **argv,
                          const size_t *lens, int loud);

/* The same, loud, with a NULL-terminated list: as a va_list, or as an
 * array (tp_act, for a command that changes something). */
redisReply *tp_cmd_va(tu_redis_t *r, const char *arg0, va_list ap);
redisReply *tp_act(tu_redis_t *r, const char *const *argv);

/* Send a command and expect +OK; -1 with a message otherwise.  what/idx
 * name the server in the message, e.g. "node", 3. */
int tp_cmd_ok(tu_redis_t *r, const char *what, int idx, const char *arg0, ...)
    __attribute__((sentinel));

/* The topologies' own cached connection to one server, for queries. */
struct tp_conn {
    pthread_mutex_t lock;
    redisContext *ctx; /* NULL: connect at next use */
    pid_t owner;       /* process that may use ctx (fork guard) */
};

void tp_conn_init(struct tp_conn *q);
void tp_conn_destroy(struct tp_conn *q);

/* An idempotent query over q, retried once on a new connection; quiet,
 * NULL when the server does not answer (or is not usable). */
redisReply *tp_query(tu_redis_t *r, struct tp_conn *q, const char *arg0, ...)
    __attribute__((sentinel));

/* kill(sig) through the server harness; for SIGSTOP / SIGCONT wait until
 * /proc shows the change; SIGKILL is a crash (tu_redis_kill reaps).
 * what/idx name the server in messages. */
int tp_signal_node(tu_redis_t *r, struct tp_conn *q, int sig,
                   const char *what, int idx);

/* tu_redis_restart, and a new connection for the queries. */
int tp_restart_node(tu_redis_t *r, struct tp_conn *q);

/* Bulk/status text of a reply, or NULL; +OK?; the text of an error reply
 * for messages ("no reply" for NULL). */
const char *tp_reply_text(const redisReply *x);
int tp_reply_ok(const redisReply *x);
const char *tp_reply_err(const redisReply *x);

/* Value of "field:" in INFO-style text, copied into out; NULL if absent.
 * Only whole field names at the start of a line match. */
const char *tp_info_field(const char *text, const char *field, char *out,
                          size_t len);

/* INFO <section> field of a server, into out; NULL if unknown. */
const char *tp_server_info(tu_redis_t *r, struct tp_conn *q,
                           const char *section, const char *field, char *out,
                           size_t len);

/* ROLE of a server: 'M' master, 'S' replica (then *mport is the port it
 * replicates from and state its link state, e.g. "connected"), 0 if it
 * does not answer or answers something else.  Not sent to a node that is
 * not usable (no 1 s timeout on a stopped one). */
char tp_node_role(tu_redis_t *r, struct tp_conn *q, int *mport, char *state,
                  size_t slen);

/* "master" / "slave" for 'M' / 'S', else NULL. */
const char *tp_role_name(char role);

/* A server's ROLE as "master" / "slave"; NULL when it does not answer. */
const char *tp_role_of(tu_redis_t *r, struct tp_conn *q);

/*
 * One table of a topology's servers, tu_nodes_t of harness_topo.h: a
 * cluster's nodes, a Sentinel setup's data nodes, or its sentinels.  The
 * accessors, commands, signals and restarts of every kind of node are
 * written once, on this table.
 */
struct tu_nodes {
    int n;
    const char *what; /* names a node in messages: "data node" */
    tu_redis_t node[TU_TOPO_MAX_NODES];
    struct tp_conn q[TU_TOPO_MAX_NODES]; /* queries to node[i] */
    /* Run after tu_node_restart brought node i back, with owner (a
     * sentinel's shortened timers); NULL: nothing more to do. */
    int (*restarted)(void *owner, int i);
    void *owner;
};

/* n nodes named what, none started yet, their query connections ready. */
void tp_nodes_init(struct tu_nodes *t, int n, const char *what);

/* Stop the nodes and drop their query connections: a topology's free. */
void tp_nodes_stop(struct tu_nodes *t);

static inline int tp_node_ok(const struct tu_nodes *t, int i)
{
    return t != NULL && i >= 0 && i < t->n;
}

/* Node i of t, or NULL with a message "<op>: no <what> <i>". */
tu_redis_t *tp_node_at(struct tu_nodes *t, int i, const char *op);

/* The index of the node listening on port, or -1. */
int tp_by_port(const struct tu_nodes *t, int port);

/* The index of the node that node i replicates from; -1 when node i is
 * no replica, does not answer, or follows a server not in t. */
int tp_master_of(struct tu_nodes *t, int i);

/* The first node that is usable, or -1. */
int tp_first_usable(struct tu_nodes *t);

/* When a start gives up: o->start_timeout_ms from now, 30 s when it is
 * 0. */
double tp_start_deadline(const tu_topo_opts *o);

/* Milliseconds until deadline (tu_now), at least 1: a wait's timeout. */
int tp_ms_left(double deadline);

/* o->node_args appended to the nargs arguments of args (room for cap),
 * then a NULL.  The new count, or -1 with a message when they do not
 * fit. */
int tp_node_args(const char **args, int nargs, int cap,
                 const tu_topo_opts *o);

/* "<scheme>127.0.0.1:p1,127.0.0.1:p2...<suffix>" for the first n nodes of
 * t; malloc'd or NULL. */
char *tp_make_url(const char *scheme, const struct tu_nodes *t, int n,
                  const char *suffix);

/* A running topology, first member of tu_cluster / tu_sentinel: at exit
 * every one its process started is freed with its own free function. */
struct tp_head {
    struct tp_head *next;
    void (*free)(struct tp_head *);
    pid_t creator; /* process that started it (fork guard) */
};

void tp_register(struct tp_head *h, void (*free_fn)(struct tp_head *));

/* Unlink h; 1 if it was registered. */
int tp_unregister(struct tp_head *h);

/* tu_*_stop: h unregistered and freed by its free function, unless h is
 * NULL or the topology is not this process's (a forked child leaves the
 * parent's servers alone). */
void tp_stop(struct tp_head *h);

/* The end of a tu_*_start whose steps returned rc: the topology (h, the
 * first member) when rc is 0, else NULL with it stopped. */
void *tp_started(struct tp_head *h, int rc);

#define TP_POLL_MS   30 /* poll period of the waits */
#define TP_LOG_LINES 15 /* log tail printed on failure */

/* ---- harness_cluster.c, harness_layout.c, harness_slots.c ---------------- */

#include "harness_cluster.h"

#define TP_ID_LEN  40 /* cluster node id: 40 hex digits */
#define TP_MAX_MIG 16 /* slots migrating at once */

struct tp_mig {
    int slot, from, to;
};

struct tu_cluster {
    struct tp_head head; /* first: the registry casts */
    struct tu_nodes nodes;
    int masters, replicas;
    char id[TU_TOPO_MAX_NODES][TP_ID_LEN + 1];
    char *url;
    /* The last layout every live node agreed on (start, and every
     * successful wait): slot owners, and each node's master (-1 for a
     * master).  wait_promoted takes the old master's slots and replicas
     * from it. */
    short owner[TU_CLUSTER_SLOTS];
    int master_of[TU_TOPO_MAX_NODES];
    struct tp_mig mig[TP_MAX_MIG];
    int nmig;
};

/* Extra conditions of a wait for the cluster, and its result. */
struct cl_want {
    int slot, owner;  /* slot must be served by owner (slot < 0: none) */
    int old_master;   /* >= 0: a replica of it must serve its slots */
    int new_master;   /* with old_master: that replica, or -1 any */
    short *old_owner; /* layout to take old_master's slots from */
    int result;       /* out: the replica that took over */
};

static inline int tp_valid_node(const tu_cluster_t *c, int node)
{
    return c != NULL && tp_node_ok(&c->nodes, node);
}

static inline int tp_valid_slot(int slot)
{
    return slot >= 0 && slot < TU_CLUSTER_SLOTS;
}

/* The node with that cluster id, or -1 (by TCP port: tp_by_port). */
int tp_node_by_id(const tu_cluster_t *c, const char *id);

/* Wait until the live nodes form an ok cluster (tu_cluster_start says
 * what that means) and the conditions of w (NULL: none) hold; the agreed
 * layout is then kept in c->owner and c->master_of.  0, or -1 with a
 * message naming what (and the log of the node concerned). */
int tp_cluster_wait(tu_cluster_t *c, struct cl_want *w, int timeout_ms,
                    const char *what);

#endif
