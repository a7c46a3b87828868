/*
 * topo: Redis Cluster and Sentinel topologies for the tests.
 * See topo.h for the contract of each function.
 *
 * Every server is a testutil server (tu_redis_start_opts), so start-up
 * checks (pid over both endpoints, another port when one is taken),
 * PDEATHSIG, the registry, the atexit clean-up and the fork guard are
 * testutil's; topo adds the command lines, the wiring and the waits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "topo.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TP_ID_LEN        40      /* cluster node id: 40 hex digits */
#define TP_BUS_OFFSET    10000   /* cluster bus port = port + 10000 */
#define TP_POLL_MS       30      /* poll period of the waits */
#define TP_MOVE_TIMEOUT  30000   /* ms: agreement after a slot moved */
#define TP_MAX_MIG       16      /* slots migrating at once */
#define TP_MIGRATE_BATCH 100     /* keys per MIGRATE */
#define TP_LOG_LINES     15      /* log tail printed on failure */

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static void topo_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void topo_err(const char *fmt, ...)
{
    char buf[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "topo: %s\n", buf);
}

static void set_why(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_why(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* State letter of a process from /proc/<pid>/stat (R, S, T, Z...); 0 if
 * it cannot be read (gone). */
static char proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;

    if (pid <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');   /* the command name may hold anything */
    if (p == NULL || p[1] != ' ')
        return 0;
    return p[2];
}

static int is_stopped_state(char st)
{
    return st == 'T' || st == 't';
}

/* Why a server is not usable, for messages. */
static const char *down_name(const tu_redis_t *r)
{
    char st;

    if (r->pid <= 0)
        return "killed";
    st = proc_state(r->pid);
    return is_stopped_state(st) ? "stopped" : st == 0 || st == 'Z' ? "dead"
                                                                  : "up";
}

/* Running and able to answer: started, not killed, not stopped, not a
 * zombie. */
static int usable(const tu_redis_t *r)
{
    char st;

    if (r->pid <= 0)
        return 0;
    st = proc_state(r->pid);
    return st != 0 && !is_stopped_state(st) && st != 'Z' && st != 'X';
}

/* Collect a NULL-terminated va_list into a malloc'd vector. */
static const char **collect_args(const char *arg0, va_list ap, int *argc)
{
    const char **argv;
    va_list cp;
    int n = 1, i;

    va_copy(cp, ap);
    while (va_arg(cp, const char *) != NULL)
        n++;
    va_end(cp);
    argv = malloc(sizeof(*argv) * (size_t)n);
    if (argv == NULL)
        return NULL;
    argv[0] = arg0;
    for (i = 1; i < n; i++)
        argv[i] = va_arg(ap, const char *);
    *argc = n;
    return argv;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

/*
 * topo never uses testutil's cached admin connection: a sentinel that
 * promotes or reconfigures a node kills its clients (CLIENT KILL TYPE
 * normal), which would leave that connection broken for the test's next
 * tu_cmd.  Commands that change something, and the tu_*_cmd functions, go
 * over a fresh connection each; the queries of the waits over one cached
 * connection per server (struct tp_conn), retried once on a new one.
 */

/* Block SIGPIPE in this thread around a command and swallow the one it
 * raised: writing to a server that just died must not kill the test. */
struct pipe_guard {
    sigset_t set, old;
    int was_pending;
};

static void guard_on(struct pipe_guard *g)
{
    sigset_t pending;

    sigemptyset(&g->set);
    sigaddset(&g->set, SIGPIPE);
    sigemptyset(&pending);
    g->was_pending = sigpending(&pending) == 0 &&
                     sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &g->set, &g->old);
}

static void guard_off(struct pipe_guard *g)
{
    struct timespec zero = {0, 0};

    if (!g->was_pending) {
        while (sigtimedwait(&g->set, NULL, &zero) == SIGPIPE) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* A connection to the server's unix socket, 1 s connect and command
 * timeouts, close-on-exec.  NULL with *err set. */
static redisContext *connect_server(const tu_redis_t *r, char *err,
                                    size_t elen)
{
    struct timeval tv = {1, 0};
    redisContext *ctx;
    int fl;

    if (r->sock[0] == '\0') {
        set_why(err, elen, "server not started");
        return NULL;
    }
    ctx = redisConnectUnixWithTimeout(r->sock, tv);
    if (ctx == NULL || ctx->err) {
        set_why(err, elen, "connect: %s", ctx ? ctx->errstr : "out of memory");
        if (ctx != NULL)
            redisFree(ctx);
        return NULL;
    }
    fl = fcntl(ctx->fd, F_GETFD);
    if (fl >= 0)
        (void)fcntl(ctx->fd, F_SETFD, fl | FD_CLOEXEC);
    if (redisSetTimeout(ctx, tv) != REDIS_OK) {
        set_why(err, elen, "set timeout: %s", ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    return ctx;
}

/* One command on a fresh connection; a line on stderr if it gets no reply
 * and loud.  Error replies are returned, not reported. */
static redisReply *fresh_cmdv(const tu_redis_t *r, int argc,
                              const char **argv, const size_t *lens, int loud)
{
    struct pipe_guard g;
    redisContext *ctx;
    redisReply *x;
    char err[160];

    ctx = connect_server(r, err, sizeof(err));
    if (ctx == NULL) {
        if (loud)
            topo_err("%s on port %d: %s", argv[0], r->port, err);
        return NULL;
    }
    guard_on(&g);
    x = redisCommandArgv(ctx, argc, argv, lens);
    guard_off(&g);
    if (x == NULL && loud)
        topo_err("%s on port %d: %s", argv[0], r->port,
                 ctx->errstr[0] ? ctx->errstr : "I/O error");
    redisFree(ctx);
    return x;
}

static redisReply *cmd_va(tu_redis_t *r, const char *arg0, va_list ap)
{
    const char **argv;
    redisReply *reply;
    int argc = 0;

    if (arg0 == NULL) {
        topo_err("command: no arguments");
        return NULL;
    }
    argv = collect_args(arg0, ap, &argc);
    if (argv == NULL) {
        topo_err("%s: out of memory", arg0);
        return NULL;
    }
    reply = fresh_cmdv(r, argc, argv, NULL, 1);
    free(argv);
    return reply;
}

/* A command that changes something: fresh connection, loud. */
static redisReply *act(tu_redis_t *r, const char *arg0, ...)
    __attribute__((sentinel));

static redisReply *act(tu_redis_t *r, const char *arg0, ...)
{
    redisReply *x;
    va_list ap;

    va_start(ap, arg0);
    x = cmd_va(r, arg0, ap);
    va_end(ap);
    return x;
}

/* topo's own cached connection to one server, for queries. */
struct tp_conn {
    pthread_mutex_t lock;
    redisContext *ctx;    /* NULL: connect at next use */
    pid_t owner;          /* process that may use ctx (fork guard) */
};

static void conn_init(struct tp_conn *q)
{
    pthread_mutex_init(&q->lock, NULL);
    q->ctx = NULL;
    q->owner = getpid();
}

/* Drop the cached connection (the server was killed or restarted). */
static void conn_reset(struct tp_conn *q)
{
    if (q->owner != getpid())
        return;
    pthread_mutex_lock(&q->lock);
    if (q->ctx != NULL)
        redisFree(q->ctx);
    q->ctx = NULL;
    pthread_mutex_unlock(&q->lock);
}

static void conn_destroy(struct tp_conn *q)
{
    conn_reset(q);
    pthread_mutex_destroy(&q->lock);
}

/*
 * An idempotent query (INFO, ROLE, CLUSTER NODES, SENTINEL MASTER...) over
 * q.  After an I/O error (server restarted, or our client killed by a
 * sentinel) it is sent once more on a new connection.  Quiet: NULL if the
 * server does not answer, and the caller says what it was waiting for.
 * Not sent to a server that is not usable (a stopped one would cost the
 * 1 s timeout).  In a forked child: a fresh connection.
 */
static redisReply *query_argv(tu_redis_t *r, struct tp_conn *q, int argc,
                              const char **argv)
{
    struct pipe_guard g;
    redisReply *x = NULL;
    char err[160];
    int attempt;

    if (!usable(r))
        return NULL;
    if (q->owner != getpid())
        return fresh_cmdv(r, argc, argv, NULL, 0);
    pthread_mutex_lock(&q->lock);
    for (attempt = 0; attempt < 2 && x == NULL; attempt++) {
        if (q->ctx == NULL)
            q->ctx = connect_server(r, err, sizeof(err));
        if (q->ctx == NULL)
            break;
        guard_on(&g);
        x = redisCommandArgv(q->ctx, argc, argv, NULL);
        guard_off(&g);
        if (x == NULL) {
            redisFree(q->ctx);
            q->ctx = NULL;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return x;
}

/* kill(sig) through testutil; for SIGSTOP / SIGCONT wait until /proc shows
 * the change; SIGKILL is a crash (tu_redis_kill reaps). */
static int signal_node(tu_redis_t *r, struct tp_conn *q, int sig,
                       const char *what, int idx)
{
    double deadline;

    if (sig == SIGKILL) {
        conn_reset(q);
        return tu_redis_kill(r);
    }
    if (r->pid <= 0) {
        topo_err("signal %d to %s %d: not running", sig, what, idx);
        return -1;
    }
    if (tu_redis_signal(r, sig) != 0)
        return -1;
    if (sig != SIGSTOP && sig != SIGCONT)
        return 0;
    deadline = tu_now() + 5.0;
    for (;;) {
        char st = proc_state(r->pid);

        if (st == 0 || (sig == SIGSTOP) == is_stopped_state(st))
            return 0;
        if (tu_now() > deadline) {
            topo_err("%s %d (pid %d) did not %s within 5 s", what, idx,
                     (int)r->pid, sig == SIGSTOP ? "stop" : "continue");
            return -1;
        }
        tu_sleep_ms(1);
    }
}

static redisReply *query(tu_redis_t *r, struct tp_conn *q, const char *arg0,
                         ...) __attribute__((sentinel));

static redisReply *query(tu_redis_t *r, struct tp_conn *q, const char *arg0,
                         ...)
{
    const char **argv;
    redisReply *x;
    va_list ap;
    int argc = 0;

    va_start(ap, arg0);
    argv = collect_args(arg0, ap, &argc);
    va_end(ap);
    if (argv == NULL)
        return NULL;
    x = query_argv(r, q, argc, argv);
    free(argv);
    return x;
}

/* Bulk/status text of a reply, or NULL. */
static const char *reply_text(const redisReply *x)
{
    if (x != NULL && (x->type == REDIS_REPLY_STRING ||
                      x->type == REDIS_REPLY_STATUS) && x->str != NULL)
        return x->str;
    return NULL;
}

static int reply_is_ok(const redisReply *x)
{
    return x != NULL && x->type == REDIS_REPLY_STATUS && x->str != NULL &&
           strcmp(x->str, "OK") == 0;
}

/* Text of an error reply for messages ("no reply" for NULL). */
static const char *reply_err(const redisReply *x)
{
    if (x == NULL)
        return "no reply";
    if (x->type == REDIS_REPLY_ERROR && x->str != NULL)
        return x->str;
    if (reply_text(x) != NULL)
        return x->str;
    return "unexpected reply type";
}

/* Send a command and expect +OK; -1 with a message otherwise. */
static int cmd_ok(tu_redis_t *r, const char *what, int idx, const char *arg0, ...)
    __attribute__((sentinel));

/* what/idx name the server in the message, e.g. "node", 3. */
static int cmd_ok(tu_redis_t *r, const char *what, int idx, const char *arg0, ...)
{
    char cmd[64] = "";
    redisReply *x;
    va_list ap;
    int ok;

    va_start(ap, arg0);
    x = cmd_va(r, arg0, ap);
    va_end(ap);
    ok = reply_is_ok(x);
    if (!ok) {
        /* Name the command by its first two words ("CLUSTER MEET"). */
        va_start(ap, arg0);
        {
            const char *a1 = va_arg(ap, const char *);
            snprintf(cmd, sizeof(cmd), "%s%s%s", arg0, a1 ? " " : "",
                     a1 ? a1 : "");
        }
        va_end(ap);
        topo_err("%s on %s %d: %s", cmd, what, idx, reply_err(x));
    }
    if (x != NULL)
        freeReplyObject(x);
    return ok ? 0 : -1;
}

/*
 * Value of "field:" in INFO-style text, copied into out; NULL if absent.
 * Only whole field names at the start of a line match.
 */
static const char *info_field(const char *text, const char *field,
                              char *out, size_t len)
{
    size_t flen = strlen(field);
    const char *p = text;

    if (text == NULL || len == 0)
        return NULL;
    while ((p = strstr(p, field)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[flen] == ':') {
            const char *v = p + flen + 1;
            size_t n = strcspn(v, "\r\n");

            if (n >= len)
                n = len - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
        p += flen;
    }
    return NULL;
}

/* INFO <section> field of a server, into out; NULL if unknown. */
static const char *server_info(tu_redis_t *r, struct tp_conn *q,
                               const char *section, const char *field,
                               char *out, size_t len)
{
    redisReply *x = query(r, q, "INFO", section, NULL);
    const char *v = info_field(reply_text(x), field, out, len);

    if (x != NULL)
        freeReplyObject(x);
    return v;
}

/* Value of key in a flat [key, value, key, value...] array (SENTINEL
 * MASTER / REPLICAS); NULL if absent. */
static const char *kv_get(const redisReply *arr, const char *key)
{
    size_t i;

    if (arr == NULL || arr->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (i = 0; i + 1 < arr->elements; i += 2) {
        const char *k = reply_text(arr->element[i]);
        if (k != NULL && strcmp(k, key) == 0)
            return reply_text(arr->element[i + 1]);
    }
    return NULL;
}

/*
 * ROLE of a server: 'M' master, 'S' replica (then *mport is the port it
 * replicates from and state its link state, e.g. "connected"), 0 if it
 * does not answer or answers something else.  Not sent to a node that is
 * not usable (no 1 s timeout on a stopped one).
 */
static char node_role(tu_redis_t *r, struct tp_conn *q, int *mport,
                      char *state, size_t slen)
{
    redisReply *x;
    const char *kind;
    char role = 0;

    if (mport != NULL)
        *mport = -1;
    if (state != NULL && slen > 0)
        state[0] = '\0';
    if (!usable(r))
        return 0;
    x = query(r, q, "ROLE", NULL);
    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements >= 1 &&
        (kind = reply_text(x->element[0])) != NULL) {
        if (strcmp(kind, "master") == 0) {
            role = 'M';
        } else if (strcmp(kind, "slave") == 0 && x->elements >= 4) {
            role = 'S';
            if (mport != NULL && x->element[2]->type == REDIS_REPLY_INTEGER)
                *mport = (int)x->element[2]->integer;
            if (state != NULL && slen > 0 && reply_text(x->element[3]))
                snprintf(state, slen, "%s", x->element[3]->str);
        }
    }
    if (x != NULL)
        freeReplyObject(x);
    return role;
}

static const char *role_name(char role)
{
    return role == 'M' ? "master" : role == 'S' ? "slave" : NULL;
}

/* A fresh connection: ASKING, then the command, pipelined. */
static redisReply *asking_cmdv(tu_redis_t *r, int argc, const char **argv)
{
    redisContext *ctx;
    redisReply *first = NULL, *second = NULL;
    struct pipe_guard g;
    char err[160];
    void *p;

    if (!usable(r)) {
        topo_err("%s after ASKING: node not running", argv[0]);
        return NULL;
    }
    ctx = connect_server(r, err, sizeof(err));
    if (ctx == NULL) {
        topo_err("%s after ASKING on port %d: %s", argv[0], r->port, err);
        return NULL;
    }
    guard_on(&g);
    if (redisAppendCommand(ctx, "ASKING") == REDIS_OK &&
        redisAppendCommandArgv(ctx, argc, argv, NULL) == REDIS_OK &&
        redisGetReply(ctx, &p) == REDIS_OK) {
        first = p;
        if (redisGetReply(ctx, &p) == REDIS_OK)
            second = p;
    }
    guard_off(&g);
    if (second == NULL)
        topo_err("%s after ASKING on port %d: %s", argv[0], r->port,
                 ctx->errstr[0] ? ctx->errstr : "I/O error");
    else if (!reply_is_ok(first))
        topo_err("ASKING on port %d: %s", r->port, reply_err(first));
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
 * exits with "Address already in use" and testutil tries another port.
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

/* "<scheme>127.0.0.1:p1,127.0.0.1:p2...<suffix>"; malloc'd or NULL. */
static char *make_url(const char *scheme, const tu_redis_t *nodes, int n,
                      const char *suffix)
{
    size_t cap = strlen(scheme) + strlen(suffix) + (size_t)n * 24 + 1;
    char *url = malloc(cap);
    size_t len;
    int i;

    if (url == NULL)
        return NULL;
    len = (size_t)snprintf(url, cap, "%s", scheme);
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(url + len, cap - len, "%s127.0.0.1:%d",
                                i > 0 ? "," : "", nodes[i].port);
    snprintf(url + len, cap - len, "%s", suffix);
    return url;
}

/* tu_redis_restart, and a new connection for the queries. */
static int restart_node(tu_redis_t *r, struct tp_conn *q)
{
    int rc = tu_redis_restart(r);

    conn_reset(q);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Registry of running topologies (atexit clean-up)                        */
/* ------------------------------------------------------------------------ */

enum { TOPO_CLUSTER = 1, TOPO_SENTINEL = 2 };

struct topo_head {
    struct topo_head *next;
    int kind;
    pid_t creator;        /* process that started it (fork guard) */
};

static pthread_mutex_t g_topo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct topo_head *g_topos;
static pthread_once_t g_topo_once = PTHREAD_ONCE_INIT;

static void cluster_free(tu_cluster_t *c);
static void sentinel_free(tu_sentinel_t *s);

static void topo_atexit(void)
{
    pid_t self = getpid();

    for (;;) {
        struct topo_head **pp, *h = NULL;

        pthread_mutex_lock(&g_topo_lock);
        for (pp = &g_topos; *pp != NULL; pp = &(*pp)->next) {
            if ((*pp)->creator == self) {
                h = *pp;
                *pp = h->next;
                break;
            }
        }
        pthread_mutex_unlock(&g_topo_lock);
        if (h == NULL)
            return;
        if (h->kind == TOPO_CLUSTER)
            cluster_free((tu_cluster_t *)(void *)h);
        else
            sentinel_free((tu_sentinel_t *)(void *)h);
    }
}

static void topo_install_atexit(void)
{
    if (atexit(topo_atexit) != 0)
        topo_err("atexit failed; topologies are stopped by testutil only");
}

static void topo_register(struct topo_head *h, int kind)
{
    h->kind = kind;
    h->creator = getpid();
    pthread_once(&g_topo_once, topo_install_atexit);
    pthread_mutex_lock(&g_topo_lock);
    h->next = g_topos;
    g_topos = h;
    pthread_mutex_unlock(&g_topo_lock);
}

/* Unlink h; 1 if it was registered. */
static int topo_unregister(struct topo_head *h)
{
    struct topo_head **pp;
    int found = 0;

    pthread_mutex_lock(&g_topo_lock);
    for (pp = &g_topos; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&g_topo_lock);
    return found;
}

/* ======================================================================== */
/* Redis Cluster                                                            */
/* ======================================================================== */

struct tp_mig {
    int slot, from, to;
};

struct tu_cluster {
    struct topo_head head;   /* first: the registry casts */
    int n, masters, replicas;
    tu_redis_t node[TU_TOPO_MAX_NODES];
    struct tp_conn q[TU_TOPO_MAX_NODES];   /* queries to node[i] */
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

/* One node's view of the cluster (CLUSTER INFO + CLUSTER NODES). */
struct cview {
    int state_ok;                 /* cluster_state:ok */
    char state[16];
    unsigned long long cur_epoch; /* cluster_current_epoch */
    int parsed;                   /* lines naming one of our nodes */
    int stray;                    /* other lines (handshakes, strangers) */
    int self;                     /* node index of the "myself" line */
    int bad_master;               /* a replica of an unknown node */
    char role[TU_TOPO_MAX_NODES]; /* 'M', 'S', 0 not listed */
    int master[TU_TOPO_MAX_NODES];
    unsigned char fail[TU_TOPO_MAX_NODES];  /* 1 fail?, 2 fail */
    unsigned long long cepoch[TU_TOPO_MAX_NODES];
    short owner[TU_CLUSTER_SLOTS];
};

static int valid_node(const tu_cluster_t *c, int node)
{
    return c != NULL && node >= 0 && node < c->n;
}

static int valid_slot(int slot)
{
    return slot >= 0 && slot < TU_CLUSTER_SLOTS;
}

static int node_by_id(const tu_cluster_t *c, const char *id)
{
    int i;

    for (i = 0; i < c->n; i++)
        if (strcmp(c->id[i], id) == 0)
            return i;
    return -1;
}

static int node_by_port(const tu_cluster_t *c, int port)
{
    int i;

    for (i = 0; i < c->n; i++)
        if (c->node[i].port == port)
            return i;
    return -1;
}

/* First node that is usable, or -1. */
static int first_usable(tu_cluster_t *c)
{
    int i;

    for (i = 0; i < c->n; i++)
        if (usable(&c->node[i]))
            return i;
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

/* Parse CLUSTER NODES text into v (the INFO part is filled elsewhere). */
static void parse_nodes(const tu_cluster_t *c, const char *text,
                        struct cview *v)
{
    char *copy, *line, *save_line = NULL;
    int i;

    v->parsed = v->stray = v->bad_master = 0;
    v->self = -1;
    for (i = 0; i < TU_TOPO_MAX_NODES; i++) {
        v->role[i] = 0;
        v->master[i] = -1;
        v->fail[i] = 0;
        v->cepoch[i] = 0;
    }
    for (i = 0; i < TU_CLUSTER_SLOTS; i++)
        v->owner[i] = -1;
    if (text == NULL || (copy = strdup(text)) == NULL) {
        v->stray = 1;   /* unreadable: never agrees */
        return;
    }
    for (line = strtok_r(copy, "\r\n", &save_line); line != NULL;
         line = strtok_r(NULL, "\r\n", &save_line)) {
        char *tok, *save_tok = NULL, *flags = NULL, *master = NULL;
        char *fl, *save_fl = NULL;
        int field = 0, idx = -1;

        for (tok = strtok_r(line, " ", &save_tok); tok != NULL;
             tok = strtok_r(NULL, " ", &save_tok), field++) {
            if (field == 0) {
                idx = node_by_id(c, tok);
                if (idx < 0)
                    break;
            } else if (field == 2) {
                flags = tok;
            } else if (field == 3) {
                master = tok;
            } else if (field == 6) {
                v->cepoch[idx] = strtoull(tok, NULL, 10);
            } else if (field >= 8 && tok[0] != '[') {
                char *dash = strchr(tok, '-');
                long lo = strtol(tok, NULL, 10);
                long hi = dash != NULL ? strtol(dash + 1, NULL, 10) : lo;
                long s;

                for (s = lo; s <= hi && s < TU_CLUSTER_SLOTS; s++)
                    if (s >= 0)
                        v->owner[s] = (short)idx;
            }
        }
        if (idx < 0 || flags == NULL || master == NULL) {
            v->stray++;
            continue;
        }
        v->parsed++;
        for (fl = strtok_r(flags, ",", &save_fl); fl != NULL;
             fl = strtok_r(NULL, ",", &save_fl)) {
            if (strcmp(fl, "myself") == 0)
                v->self = idx;
            else if (strcmp(fl, "master") == 0)
                v->role[idx] = 'M';
            else if (strcmp(fl, "slave") == 0)
                v->role[idx] = 'S';
            else if (strcmp(fl, "fail?") == 0)
                v->fail[idx] = 1;
            else if (strcmp(fl, "fail") == 0)
                v->fail[idx] = 2;
            else if (strcmp(fl, "handshake") == 0 || strcmp(fl, "noaddr") == 0)
                v->stray++;
        }
        if (strcmp(master, "-") != 0) {
            v->master[idx] = node_by_id(c, master);
            if (v->master[idx] < 0)
                v->bad_master = 1;
        }
    }
    free(copy);
}

/* Fill v from node i.  0, or -1 with *why set. */
static int read_view(tu_cluster_t *c, int i, struct cview *v,
                     char *why, size_t wlen)
{
    redisReply *x;
    char buf[32];
    const char *t;

    x = query(&c->node[i], &c->q[i], "CLUSTER", "INFO", NULL);
    t = reply_text(x);
    if (t == NULL || info_field(t, "cluster_state", v->state,
                                sizeof(v->state)) == NULL ||
        info_field(t, "cluster_current_epoch", buf, sizeof(buf)) == NULL) {
        set_why(why, wlen, "node %d: CLUSTER INFO: %s", i, reply_err(x));
        if (x != NULL)
            freeReplyObject(x);
        return -1;
    }
    v->state_ok = strcmp(v->state, "ok") == 0;
    v->cur_epoch = strtoull(buf, NULL, 10);
    freeReplyObject(x);

    x = query(&c->node[i], &c->q[i], "CLUSTER", "NODES", NULL);
    t = reply_text(x);
    if (t == NULL) {
        set_why(why, wlen, "node %d: CLUSTER NODES: %s", i, reply_err(x));
        if (x != NULL)
            freeReplyObject(x);
        return -1;
    }
    parse_nodes(c, t, v);
    freeReplyObject(x);
    return 0;
}

/* Extra conditions of a wait, and its result. */
struct cl_want {
    int slot, owner;     /* slot must be served by owner (slot < 0: none) */
    int old_master;      /* >= 0: a replica of it must serve its slots */
    int new_master;      /* with old_master: that replica, or -1 any */
    short *old_owner;    /* layout to take old_master's slots from */
    int result;          /* out: the replica that took over */
};

static const char *layout_diff(const struct cview *a, const struct cview *b,
                               int n)
{
    int j;

    if (a->cur_epoch != b->cur_epoch)
        return "current epoch";
    for (j = 0; j < n; j++) {
        if (a->role[j] != b->role[j])
            return "roles";
        if (a->master[j] != b->master[j])
            return "replica -> master links";
        if (a->role[j] == 'M' && a->cepoch[j] != b->cepoch[j])
            return "config epochs";
    }
    if (memcmp(a->owner, b->owner, sizeof(a->owner)) != 0)
        return "slot owners";
    return NULL;
}

/*
 * Is the cluster ok among its live nodes (see tu_cluster_start), and are
 * the conditions of w met?  1 yes (the layout cache is updated), 0 no with
 * *why and *bad (the node whose log tells more, or -1).
 */
static int cluster_check(tu_cluster_t *c, struct cview *views,
                         struct cl_want *w, char *why, size_t wlen, int *bad)
{
    int live[TU_TOPO_MAX_NODES];
    int i, j, s, first = -1;
    const struct cview *f;

    *bad = -1;
    for (i = 0; i < c->n; i++) {
        live[i] = usable(&c->node[i]);
        if (!live[i])
            continue;
        if (first < 0)
            first = i;
        *bad = i;
        if (read_view(c, i, &views[i], why, wlen) != 0)
            return 0;
    }
    if (first < 0) {
        set_why(why, wlen, "no node is running");
        return 0;
    }
    f = &views[first];

    /* What this wait is for first: the most telling message. */
    if (w != NULL && w->slot >= 0 && f->owner[w->slot] != w->owner) {
        set_why(why, wlen, "node %d sees slot %d still served by node %d, "
                "not %d", first, w->slot, f->owner[w->slot], w->owner);
        *bad = w->owner;
        return 0;
    }
    if (w != NULL && w->old_master >= 0) {
        int found = -1;

        for (j = 0; j < c->n && found < 0; j++) {
            if (c->master_of[j] != w->old_master || !live[j] ||
                f->role[j] != 'M' || (w->new_master >= 0 && j != w->new_master))
                continue;
            for (s = 0; s < TU_CLUSTER_SLOTS; s++)
                if (w->old_owner[s] == w->old_master && f->owner[s] != j)
                    break;
            if (s == TU_CLUSTER_SLOTS)
                found = j;
        }
        if (found < 0) {
            set_why(why, wlen, "node %d sees no replica of node %d serving "
                    "its slots yet", first, w->old_master);
            *bad = w->new_master >= 0 ? w->new_master : first;
            return 0;
        }
        w->result = found;
    }

    /* Then the cluster as a whole, as after start. */
    for (i = 0; i < c->n; i++) {
        if (!live[i])
            continue;
        *bad = i;
        if (!views[i].state_ok) {
            set_why(why, wlen, "node %d: cluster_state:%s", i, views[i].state);
            return 0;
        }
        if (views[i].self != i) {
            set_why(why, wlen, "node %d: CLUSTER NODES has no line for "
                    "itself", i);
            return 0;
        }
        if (views[i].parsed != c->n || views[i].stray != 0 ||
            views[i].bad_master) {
            set_why(why, wlen, "node %d knows %d of the %d nodes (%d other "
                    "entries)", i, views[i].parsed, c->n, views[i].stray);
            return 0;
        }
        if (views[i].role[i] == 'S') {
            char link[32];

            if (server_info(&c->node[i], &c->q[i], "replication",
                            "master_link_status", link, sizeof(link)) == NULL ||
                strcmp(link, "up") != 0) {
                set_why(why, wlen, "replica %d: master_link_status not up", i);
                return 0;
            }
        }
    }
    for (i = first + 1; i < c->n; i++) {
        const char *d;

        if (!live[i])
            continue;
        d = layout_diff(f, &views[i], c->n);
        if (d != NULL) {
            set_why(why, wlen, "nodes %d and %d disagree on the %s", first, i,
                    d);
            *bad = i;
            return 0;
        }
    }
    for (i = 0; i < c->n; i++) {
        if (!live[i])
            continue;
        for (j = 0; j < c->n; j++) {
            if (live[j] && views[i].fail[j]) {
                set_why(why, wlen, "node %d flags node %d as %s", i, j,
                        views[i].fail[j] == 2 ? "fail" : "fail?");
                *bad = j;
                return 0;
            }
        }
    }
    for (s = 0; s < TU_CLUSTER_SLOTS; s++) {
        int o = f->owner[s];

        if (o < 0) {
            set_why(why, wlen, "slot %d is not assigned", s);
            *bad = first;
            return 0;
        }
        if (!live[o] || f->role[o] != 'M') {
            set_why(why, wlen, "slot %d is assigned to node %d, which is %s",
                    s, o, live[o] ? "not a master" : down_name(&c->node[o]));
            *bad = o;
            return 0;
        }
    }
    memcpy(c->owner, f->owner, sizeof(c->owner));
    for (j = 0; j < c->n; j++)
        c->master_of[j] = f->role[j] == 'S' ? f->master[j] : -1;
    return 1;
}

static int cluster_wait(tu_cluster_t *c, struct cl_want *w, int timeout_ms,
                        const char *what)
{
    struct cview *views = calloc((size_t)c->n, sizeof(*views));
    double deadline = tu_now() + timeout_ms / 1000.0;
    char why[256] = "";
    int bad = -1;

    if (views == NULL) {
        topo_err("%s: out of memory", what);
        return -1;
    }
    for (;;) {
        if (cluster_check(c, views, w, why, sizeof(why), &bad)) {
            free(views);
            return 0;
        }
        if (tu_now() > deadline)
            break;
        tu_sleep_ms(TP_POLL_MS);
    }
    free(views);
    topo_err("%s: not done after %d ms: %s", what, timeout_ms, why);
    if (bad >= 0)
        tu_redis_print_log(&c->node[bad], TP_LOG_LINES);
    return -1;
}

static void cluster_free(tu_cluster_t *c)
{
    int i;

    for (i = 0; i < c->n; i++) {
        tu_redis_stop(&c->node[i]);
        conn_destroy(&c->q[i]);
    }
    free(c->url);
    free(c);
}

void tu_cluster_stop(tu_cluster_t *c)
{
    if (c == NULL || c->head.creator != getpid())
        return;
    (void)topo_unregister(&c->head);
    cluster_free(c);
}

/* CLUSTER REPLICATE on replica i once it knows its master (gossip). */
static int make_replica(tu_cluster_t *c, int i, int m, double deadline)
{
    redisReply *x = NULL;

    for (;;) {
        x = act(&c->node[i], "CLUSTER", "REPLICATE", c->id[m], NULL);
        if (reply_is_ok(x))
            break;
        if (x == NULL || tu_now() > deadline) {
            topo_err("CLUSTER REPLICATE on node %d (of node %d): %s", i, m,
                     reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            tu_redis_print_log(&c->node[i], TP_LOG_LINES);
            return -1;
        }
        freeReplyObject(x);   /* "Unknown node": not met yet */
        tu_sleep_ms(10);
    }
    freeReplyObject(x);
    return 0;
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
    char timeout[16], buf[32], lo_s[16], hi_s[16], port0[16];
    tu_redis_opts ro;
    tu_cluster_t *c;
    double deadline;
    int start_ms, nargs = 0, i, k, n;
    struct cl_want w;

    if (masters < 1 || replicas_per_master < 0 ||
        masters > TU_TOPO_MAX_NODES ||
        replicas_per_master >= TU_TOPO_MAX_NODES ||   /* no overflow below */
        masters * (1 + replicas_per_master) > TU_TOPO_MAX_NODES) {
        topo_err("cluster: bad size %d masters x %d replicas (at most %d "
                 "nodes)", masters, replicas_per_master, TU_TOPO_MAX_NODES);
        return NULL;
    }
    n = masters * (1 + replicas_per_master);
    start_ms = o->start_timeout_ms > 0 ? o->start_timeout_ms : 30000;
    deadline = tu_now() + start_ms / 1000.0;
    snprintf(timeout, sizeof(timeout), "%d",
             o->node_timeout_ms > 0 ? o->node_timeout_ms : 1000);

    args[nargs++] = "--cluster-enabled";
    args[nargs++] = "yes";
    /* Relative to the node's own dir; the name is the same for all. */
    args[nargs++] = "--cluster-config-file";
    args[nargs++] = "nodes.conf";
    args[nargs++] = "--cluster-node-timeout";
    args[nargs++] = timeout;
    args[nargs++] = "--cluster-replica-validity-factor";
    args[nargs++] = "0";
    args[nargs++] = "--cluster-require-full-coverage";
    args[nargs++] = o->require_full_coverage ? "yes" : "no";
    args[nargs++] = "--cluster-allow-replica-migration";
    args[nargs++] = "no";
    args[nargs++] = "--repl-diskless-sync-delay";
    args[nargs++] = "0";
    for (i = 0; o->extra_args != NULL && o->extra_args[i] != NULL; i++) {
        if (nargs >= (int)(sizeof(args) / sizeof(args[0])) - 1) {
            topo_err("cluster: too many extra_args");
            return NULL;
        }
        args[nargs++] = o->extra_args[i];
    }
    args[nargs] = NULL;
    memset(&ro, 0, sizeof(ro));
    ro.args = args;
    ro.pick_port = cluster_pick_port;

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        topo_err("cluster: out of memory");
        return NULL;
    }
    c->n = n;
    for (i = 0; i < n; i++)
        conn_init(&c->q[i]);
    c->masters = masters;
    c->replicas = replicas_per_master;
    for (i = 0; i < n; i++)
        c->master_of[i] = i < masters ? -1
                                      : (i - masters) / replicas_per_master;
    topo_register(&c->head, TOPO_CLUSTER);

    /* Masters first: Redis holds a master's cluster_state at fail for 2 s
     * after it starts, so they should start their clocks first. */
    for (i = 0; i < n; i++) {
        redisReply *x;

        if (tu_redis_start_opts(&c->node[i], &ro) != 0) {
            topo_err("cluster: node %d did not start", i);
            goto fail;
        }
        x = query(&c->node[i], &c->q[i], "CLUSTER", "MYID", NULL);
        if (reply_text(x) == NULL || strlen(x->str) != TP_ID_LEN) {
            topo_err("cluster: CLUSTER MYID on node %d: %s", i, reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            goto fail;
        }
        memcpy(c->id[i], x->str, TP_ID_LEN + 1);
        freeReplyObject(x);
    }
    c->url = make_url("redis-cluster://", c->node, masters, "");
    if (c->url == NULL) {
        topo_err("cluster: out of memory");
        goto fail;
    }

    for (k = 0; k < masters; k++) {
        int lo, hi;

        initial_range(masters, k, &lo, &hi);
        snprintf(buf, sizeof(buf), "%d", k + 1);
        snprintf(lo_s, sizeof(lo_s), "%d", lo);
        snprintf(hi_s, sizeof(hi_s), "%d", hi);
        if (cmd_ok(&c->node[k], "node", k, "CLUSTER",
                   "SET-CONFIG-EPOCH", buf, NULL) != 0 ||
            cmd_ok(&c->node[k], "node", k, "CLUSTER", "ADDSLOTSRANGE",
                   lo_s, hi_s, NULL) != 0)
            goto fail;
        for (i = lo; i <= hi; i++)
            c->owner[i] = (short)k;
    }
    snprintf(port0, sizeof(port0), "%d", c->node[0].port);
    for (i = 1; i < n; i++)
        if (cmd_ok(&c->node[i], "node", i, "CLUSTER", "MEET",
                   "127.0.0.1", port0, NULL) != 0)
            goto fail;
    for (i = masters; i < n; i++)
        if (make_replica(c, i, c->master_of[i], deadline) != 0)
            goto fail;

    memset(&w, 0, sizeof(w));
    w.slot = -1;
    w.old_master = -1;
    {
        int left = (int)((deadline - tu_now()) * 1000);
        if (cluster_wait(c, &w, left > 0 ? left : 1, "cluster start") != 0)
            goto fail;
    }
    return c;

fail:
    tu_cluster_stop(c);
    return NULL;
}

int tu_cluster_size(const tu_cluster_t *c)
{
    return c != NULL ? c->n : -1;
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

int tu_cluster_port(const tu_cluster_t *c, int node)
{
    return valid_node(c, node) ? c->node[node].port : -1;
}

pid_t tu_cluster_pid(const tu_cluster_t *c, int node)
{
    return valid_node(c, node) ? c->node[node].pid : -1;
}

const char *tu_cluster_node_id(const tu_cluster_t *c, int node)
{
    return valid_node(c, node) ? c->id[node] : NULL;
}

tu_redis_t *tu_cluster_node(tu_cluster_t *c, int node)
{
    return valid_node(c, node) ? &c->node[node] : NULL;
}

const char *tu_cluster_role(tu_cluster_t *c, int node)
{
    return valid_node(c, node) ? role_name(node_role(&c->node[node],
                                                     &c->q[node], NULL,
                                                     NULL, 0))
                               : NULL;
}

int tu_cluster_master_of(tu_cluster_t *c, int node)
{
    int mport;

    if (!valid_node(c, node) ||
        node_role(&c->node[node], &c->q[node], &mport, NULL, 0) != 'S')
        return -1;
    return node_by_port(c, mport);
}

const char *tu_cluster_url(const tu_cluster_t *c)
{
    return c != NULL ? c->url : NULL;
}

redisReply *tu_cluster_cmd(tu_cluster_t *c, int node, const char *arg0, ...)
{
    redisReply *x;
    va_list ap;

    if (!valid_node(c, node)) {
        topo_err("cluster command: no node %d", node);
        return NULL;
    }
    va_start(ap, arg0);
    x = cmd_va(&c->node[node], arg0, ap);
    va_end(ap);
    return x;
}

redisReply *tu_cluster_cmd_asking(tu_cluster_t *c, int node,
                                  const char *arg0, ...)
{
    const char **argv;
    redisReply *x;
    va_list ap;
    int argc = 0;

    if (!valid_node(c, node) || arg0 == NULL) {
        topo_err("cluster command: no node %d or no command", node);
        return NULL;
    }
    va_start(ap, arg0);
    argv = collect_args(arg0, ap, &argc);
    va_end(ap);
    if (argv == NULL) {
        topo_err("%s: out of memory", arg0);
        return NULL;
    }
    x = asking_cmdv(&c->node[node], argc, argv);
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
               &used) != 3 || reply->str[klen + (size_t)used] != '\0' ||
        strcmp(host, "127.0.0.1") != 0)
        return -1;
    if (slot != NULL)
        *slot = s;
    return node_by_port(c, port);
}

int tu_cluster_keyslot(tu_cluster_t *c, const char *key)
{
    redisReply *x;
    long long v;
    int i;

    if (c == NULL || key == NULL || (i = first_usable(c)) < 0) {
        topo_err("CLUSTER KEYSLOT: no node running");
        return -1;
    }
    x = query(&c->node[i], &c->q[i], "CLUSTER", "KEYSLOT", key, NULL);
    if (x == NULL || x->type != REDIS_REPLY_INTEGER) {
        topo_err("CLUSTER KEYSLOT on node %d: %s", i, reply_err(x));
        if (x != NULL)
            freeReplyObject(x);
        return -1;
    }
    v = x->integer;
    freeReplyObject(x);
    return (int)v;
}

int tu_cluster_slot_owner(tu_cluster_t *c, int slot)
{
    struct cview *v;
    char why[256];
    int i, owner;

    if (c == NULL || !valid_slot(slot)) {
        topo_err("slot owner: bad slot %d", slot);
        return -1;
    }
    if ((i = first_usable(c)) < 0) {
        topo_err("slot owner: no node running");
        return -1;
    }
    v = malloc(sizeof(*v));
    if (v == NULL) {
        topo_err("slot owner: out of memory");
        return -1;
    }
    if (read_view(c, i, v, why, sizeof(why)) != 0) {
        topo_err("slot owner: %s", why);
        free(v);
        return -1;
    }
    owner = v->owner[slot];
    free(v);
    return owner;
}

static struct tp_mig *mig_find(tu_cluster_t *c, int slot)
{
    int i;

    for (i = 0; i < c->nmig; i++)
        if (c->mig[i].slot == slot)
            return &c->mig[i];
    return NULL;
}

static void mig_remove(tu_cluster_t *c, struct tp_mig *m)
{
    *m = c->mig[--c->nmig];
}

/* CLUSTER SETSLOT slot <sub> <id> on node.  0 / -1 (message). */
static int setslot(tu_cluster_t *c, int node, int slot, const char *sub,
                   int target)
{
    char s[16];

    snprintf(s, sizeof(s), "%d", slot);
    if (target < 0)
        return cmd_ok(&c->node[node], "node", node, "CLUSTER", "SETSLOT", s,
                      sub, NULL);
    return cmd_ok(&c->node[node], "node", node, "CLUSTER", "SETSLOT", s, sub,
                  c->id[target], NULL);
}

/*
 * MIGRATE up to max keys (max < 0: all) of slot from -> to, in batches.
 * Returns the number moved, or -1.
 */
static int migrate_keys(tu_cluster_t *c, int slot, int from, int to, int max)
{
    char slot_s[16], count_s[16], port_s[16];
    int moved = 0;

    snprintf(slot_s, sizeof(slot_s), "%d", slot);
    snprintf(port_s, sizeof(port_s), "%d", c->node[to].port);
    while (max < 0 || moved < max) {
        int want = TP_MIGRATE_BATCH, argc = 0;
        const char **argv;
        size_t *lens;
        redisReply *keys, *x;
        size_t i;

        if (max >= 0 && max - moved < want)
            want = max - moved;
        snprintf(count_s, sizeof(count_s), "%d", want);
        keys = query(&c->node[from], &c->q[from], "CLUSTER", "GETKEYSINSLOT",
                     slot_s, count_s, NULL);
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            topo_err("GETKEYSINSLOT %d on node %d: %s", slot, from,
                     reply_err(keys));
            if (keys != NULL)
                freeReplyObject(keys);
            return -1;
        }
        if (keys->elements == 0) {
            freeReplyObject(keys);
            break;
        }
        argv = malloc(sizeof(*argv) * (keys->elements + 8));
        lens = malloc(sizeof(*lens) * (keys->elements + 8));
        if (argv == NULL || lens == NULL) {
            free(argv);
            free(lens);
            freeReplyObject(keys);
            topo_err("migrate: out of memory");
            return -1;
        }
        argv[argc++] = "MIGRATE";
        argv[argc++] = "127.0.0.1";
        argv[argc++] = port_s;
        argv[argc++] = "";
        argv[argc++] = "0";
        argv[argc++] = "5000";
        argv[argc++] = "REPLACE";
        argv[argc++] = "KEYS";
        for (i = 0; i < (size_t)argc; i++)
            lens[i] = strlen(argv[i]);
        for (i = 0; i < keys->elements; i++) {   /* keys may be binary */
            lens[argc] = keys->element[i]->len;
            argv[argc++] = keys->element[i]->str;
        }
        x = fresh_cmdv(&c->node[from], argc, argv, lens, 1);
        free(argv);
        free(lens);
        if (!reply_is_ok(x)) {
            topo_err("MIGRATE of %zu keys of slot %d from node %d to %d: %s",
                     keys->elements, slot, from, to, reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            freeReplyObject(keys);
            return -1;
        }
        moved += (int)keys->elements;
        freeReplyObject(x);
        freeReplyObject(keys);
    }
    return moved;
}

/* Usable to receive a slot: a live master. */
static int check_target(tu_cluster_t *c, int slot, int to, const char *what)
{
    if (c == NULL || !valid_slot(slot) || !valid_node(c, to)) {
        topo_err("%s: bad slot %d or node %d", what, slot, to);
        return -1;
    }
    if (node_role(&c->node[to], &c->q[to], NULL, NULL, 0) != 'M') {
        topo_err("%s: node %d is not a live master", what, to);
        return -1;
    }
    return 0;
}

static int migrate_begin(tu_cluster_t *c, int slot, int from, int to)
{
    if (c->nmig >= TP_MAX_MIG) {
        topo_err("migrate: more than %d slots migrating", TP_MAX_MIG);
        return -1;
    }
    if (setslot(c, to, slot, "IMPORTING", from) != 0)
        return -1;
    if (setslot(c, from, slot, "MIGRATING", to) != 0) {
        (void)setslot(c, to, slot, "STABLE", -1);
        return -1;
    }
    c->mig[c->nmig].slot = slot;
    c->mig[c->nmig].from = from;
    c->mig[c->nmig].to = to;
    c->nmig++;
    return 0;
}

/* Move what is left, assign the slot everywhere, wait for agreement. */
static int migrate_finish(tu_cluster_t *c, int slot, int from, int to)
{
    struct cl_want w;
    int i, tries;

    if (migrate_keys(c, slot, from, to, -1) < 0)
        return -1;
    /* The new owner first (it bumps its config epoch), then the old one,
     * then the others, as redis-cli does. */
    if (setslot(c, to, slot, "NODE", to) != 0)
        return -1;
    for (tries = 0;; tries++) {
        char s[16];
        redisReply *x;

        snprintf(s, sizeof(s), "%d", slot);
        x = act(&c->node[from], "CLUSTER", "SETSLOT", s, "NODE", c->id[to],
                NULL);
        if (reply_is_ok(x)) {
            freeReplyObject(x);
            break;
        }
        /* A key written meanwhile ("still hold keys"): move it too. */
        if (tries >= 3 || x == NULL || x->type != REDIS_REPLY_ERROR ||
            strstr(x->str, "keys") == NULL ||
            migrate_keys(c, slot, from, to, -1) < 0) {
            topo_err("CLUSTER SETSLOT %d NODE on node %d: %s", slot, from,
                     reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            return -1;
        }
        freeReplyObject(x);
    }
    for (i = 0; i < c->n; i++) {
        if (i == to || i == from ||
            node_role(&c->node[i], &c->q[i], NULL, NULL, 0) != 'M')
            continue;
        if (setslot(c, i, slot, "NODE", to) != 0)
            return -1;
    }
    memset(&w, 0, sizeof(w));
    w.slot = slot;
    w.owner = to;
    w.old_master = -1;
    return cluster_wait(c, &w, TP_MOVE_TIMEOUT, "slot migration");
}

int tu_cluster_migrate_begin(tu_cluster_t *c, int slot, int to)
{
    int from;

    if (check_target(c, slot, to, "migrate_begin") != 0)
        return -1;
    if (mig_find(c, slot) != NULL) {
        topo_err("migrate_begin: slot %d is migrating already", slot);
        return -1;
    }
    from = tu_cluster_slot_owner(c, slot);
    if (from < 0 || from == to) {
        topo_err("migrate_begin: slot %d is served by node %d already", slot,
                 from);
        return -1;
    }
    return migrate_begin(c, slot, from, to);
}

int tu_cluster_migrate_key(tu_cluster_t *c, const char *key)
{
    struct tp_mig *m;
    char port_s[16];
    redisReply *x;
    int slot, rc = -1;

    if (c == NULL || key == NULL)
        return -1;
    slot = tu_cluster_keyslot(c, key);
    if (slot < 0)
        return -1;
    m = mig_find(c, slot);
    if (m == NULL) {
        topo_err("migrate_key: slot %d of \"%s\" is not migrating", slot, key);
        return -1;
    }
    snprintf(port_s, sizeof(port_s), "%d", c->node[m->to].port);
    x = act(&c->node[m->from], "MIGRATE", "127.0.0.1", port_s, key, "0",
            "5000", "REPLACE", NULL);
    if (reply_is_ok(x))
        rc = 1;
    else if (x != NULL && x->type == REDIS_REPLY_STATUS &&
             strcmp(x->str, "NOKEY") == 0)
        rc = 0;
    else
        topo_err("MIGRATE \"%s\" from node %d to %d: %s", key, m->from, m->to,
                 reply_err(x));
    if (x != NULL)
        freeReplyObject(x);
    return rc;
}

int tu_cluster_migrate_finish(tu_cluster_t *c, int slot, int to)
{
    struct tp_mig *m;
    int from;

    if (c == NULL || !valid_slot(slot))
        return -1;
    m = mig_find(c, slot);
    if (m == NULL || m->to != to) {
        topo_err("migrate_finish: slot %d is not migrating to node %d", slot,
                 to);
        return -1;
    }
    from = m->from;
    mig_remove(c, m);
    return migrate_finish(c, slot, from, to);
}

int tu_cluster_move_slot(tu_cluster_t *c, int slot, int to)
{
    int from;

    if (check_target(c, slot, to, "move_slot") != 0)
        return -1;
    if (mig_find(c, slot) != NULL) {
        topo_err("move_slot: slot %d is migrating (use migrate_finish)", slot);
        return -1;
    }
    from = tu_cluster_slot_owner(c, slot);
    if (from < 0)
        return -1;
    if (from == to)
        return 0;
    if (migrate_begin(c, slot, from, to) != 0)
        return -1;
    mig_remove(c, mig_find(c, slot));
    return migrate_finish(c, slot, from, to);
}

int tu_cluster_signal(tu_cluster_t *c, int node, int sig)
{
    if (!valid_node(c, node)) {
        topo_err("signal: no node %d", node);
        return -1;
    }
    return signal_node(&c->node[node], &c->q[node], sig, "cluster node",
                       node);
}

int tu_cluster_kill(tu_cluster_t *c, int node)
{
    return tu_cluster_signal(c, node, SIGKILL);
}

int tu_cluster_restart(tu_cluster_t *c, int node)
{
    if (!valid_node(c, node)) {
        topo_err("restart: no node %d", node);
        return -1;
    }
    return restart_node(&c->node[node], &c->q[node]);
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
    for (j = 0; j < c->n; j++)
        replicas += c->master_of[j] == old_master;
    if (slots == 0 || replicas == 0) {
        topo_err("%s: node %d served %d slots and had %d replicas (need "
                 "both)", what, old_master, slots, replicas);
        return -1;
    }
    w.old_owner = malloc(sizeof(c->owner));
    if (w.old_owner == NULL) {
        topo_err("%s: out of memory", what);
        return -1;
    }
    memcpy(w.old_owner, c->owner, sizeof(c->owner));
    rc = cluster_wait(c, &w, timeout_ms, what);
    free(w.old_owner);
    return rc == 0 ? w.result : -1;
}

int tu_cluster_wait_promoted(tu_cluster_t *c, int old_master, int timeout_ms)
{
    if (!valid_node(c, old_master)) {
        topo_err("wait_promoted: no node %d", old_master);
        return -1;
    }
    return wait_takeover(c, old_master, -1, timeout_ms, "wait_promoted");
}

int tu_cluster_failover(tu_cluster_t *c, int replica, int timeout_ms)
{
    int old;

    if (!valid_node(c, replica) || (old = c->master_of[replica]) < 0) {
        topo_err("failover: node %d is not a replica", replica);
        return -1;
    }
    if (cmd_ok(&c->node[replica], "node", replica, "CLUSTER", "FAILOVER",
               NULL) != 0)
        return -1;
    return wait_takeover(c, old, replica, timeout_ms, "failover") == replica
               ? 0 : -1;
}

int tu_cluster_wait_ok(tu_cluster_t *c, int timeout_ms)
{
    struct cl_want w;

    if (c == NULL)
        return -1;
    memset(&w, 0, sizeof(w));
    w.slot = -1;
    w.old_master = -1;
    return cluster_wait(c, &w, timeout_ms, "wait_ok");
}

/* ======================================================================== */
/* Sentinel                                                                 */
/* ======================================================================== */

struct tu_sentinel {
    struct topo_head head;   /* first: the registry casts */
    int ndata, nsent;
    int fast_timers;
    int down_after_ms;
    char name[64];
    char *url;
    tu_redis_t data[TU_TOPO_MAX_NODES];
    tu_redis_t sent[TU_TOPO_MAX_NODES];
    struct tp_conn dq[TU_TOPO_MAX_NODES];   /* queries to data[i] */
    struct tp_conn sq[TU_TOPO_MAX_NODES];   /* queries to sent[i] */
};

static int valid_data(const tu_sentinel_t *s, int node)
{
    return s != NULL && node >= 0 && node < s->ndata;
}

static int valid_sent(const tu_sentinel_t *s, int i)
{
    return s != NULL && i >= 0 && i < s->nsent;
}

static int data_by_port(const tu_sentinel_t *s, int port)
{
    int i;

    for (i = 0; i < s->ndata; i++)
        if (s->data[i].port == port)
            return i;
    return -1;
}

static void sentinel_free(tu_sentinel_t *s)
{
    int i;

    for (i = 0; i < s->nsent; i++) {
        tu_redis_stop(&s->sent[i]);
        conn_destroy(&s->sq[i]);
    }
    for (i = 0; i < s->ndata; i++) {
        tu_redis_stop(&s->data[i]);
        conn_destroy(&s->dq[i]);
    }
    free(s->url);
    free(s);
}

void tu_sentinel_stop(tu_sentinel_t *s)
{
    if (s == NULL || s->head.creator != getpid())
        return;
    (void)topo_unregister(&s->head);
    sentinel_free(s);
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
    return cmd_ok(&s->sent[i], "sentinel", i, "SENTINEL", "DEBUG",
                  "info-period", "1000", "ping-period", ping,
                  "ask-period", "250", "publish-period", "1000",
                  "tilt-period", "5000", NULL);
}

/* The master port sentinel i reports; -1 if it does not answer. */
static int reported_master_port(tu_sentinel_t *s, int i)
{
    redisReply *x = query(&s->sent[i], &s->sq[i], "SENTINEL",
                          "GET-MASTER-ADDR-BY-NAME", s->name, NULL);
    int port = -1;

    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        reply_text(x->element[1]) != NULL)
        port = atoi(x->element[1]->str);
    if (x != NULL)
        freeReplyObject(x);
    return port;
}

/* The data node every live sentinel reports, or -1 (why says why). */
static int agreed_master(tu_sentinel_t *s, char *why, size_t wlen, int *bad)
{
    int i, m = -1, first = -1;

    for (i = 0; i < s->nsent; i++) {
        int port, idx;

        if (!usable(&s->sent[i]))
            continue;
        port = reported_master_port(s, i);
        idx = data_by_port(s, port);
        if (idx < 0) {
            set_why(why, wlen, "sentinel %d reports master port %d, not one "
                    "of the data nodes", i, port);
            *bad = i;
            return -1;
        }
        if (first < 0) {
            first = i;
            m = idx;
        } else if (idx != m) {
            set_why(why, wlen, "sentinel %d reports node %d as master, "
                    "sentinel %d node %d", first, m, i, idx);
            *bad = i;
            return -1;
        }
    }
    if (first < 0) {
        set_why(why, wlen, "no sentinel is running");
        return -1;
    }
    return m;
}

/*
 * Settled (see tu_sentinel_wait_ok)?  Returns the master's index, or -1
 * with *why, *bad (the sentinel whose log tells more, or -1) and *bad_data
 * (data node, or -1).  With exact_slaves, num-slaves must be ndata - 1.
 */
static int sentinel_check(tu_sentinel_t *s, int exact_slaves, char *why,
                          size_t wlen, int *bad, int *bad_data)
{
    int i, j, m;
    char state[32];

    *bad = *bad_data = -1;
    m = agreed_master(s, why, wlen, bad);
    if (m < 0)
        return -1;
    *bad_data = m;
    if (node_role(&s->data[m], &s->dq[m], NULL, NULL, 0) != 'M') {
        set_why(why, wlen, "node %d, the sentinels' master, is %s", m,
                usable(&s->data[m]) ? "not a master" : down_name(&s->data[m]));
        return -1;
    }
    for (j = 0; j < s->ndata; j++) {
        int mport;

        if (j == m || !usable(&s->data[j]))
            continue;
        if (node_role(&s->data[j], &s->dq[j], &mport, state,
                      sizeof(state)) != 'S' ||
            mport != s->data[m].port || strcmp(state, "connected") != 0) {
            set_why(why, wlen, "node %d does not replicate from node %d "
                    "(yet)", j, m);
            *bad_data = j;
            return -1;
        }
    }
    for (i = 0; i < s->nsent; i++) {
        redisReply *x, *reps;
        const char *v;

        if (!usable(&s->sent[i]))
            continue;
        *bad = i;
        x = query(&s->sent[i], &s->sq[i], "SENTINEL", "MASTER", s->name, NULL);
        v = kv_get(x, "flags");
        if (v == NULL || strcmp(v, "master") != 0) {
            set_why(why, wlen, "sentinel %d: master flags %s", i,
                    v ? v : reply_err(x));
            goto fail_x;
        }
        v = kv_get(x, "num-other-sentinels");
        if (v == NULL || atoi(v) != s->nsent - 1) {
            set_why(why, wlen, "sentinel %d knows %s other sentinels, not %d",
                    i, v ? v : "?", s->nsent - 1);
            goto fail_x;
        }
        v = kv_get(x, "num-slaves");
        if (exact_slaves && (v == NULL || atoi(v) != s->ndata - 1)) {
            set_why(why, wlen, "sentinel %d knows %s replicas, not %d", i,
                    v ? v : "?", s->ndata - 1);
            goto fail_x;
        }
        freeReplyObject(x);

        reps = query(&s->sent[i], &s->sq[i], "SENTINEL", "REPLICAS", s->name,
                     NULL);
        if (reps == NULL || reps->type != REDIS_REPLY_ARRAY) {
            set_why(why, wlen, "sentinel %d: SENTINEL REPLICAS: %s", i,
                    reply_err(reps));
            if (reps != NULL)
                freeReplyObject(reps);
            return -1;
        }
        for (j = 0; j < s->ndata; j++) {
            const redisReply *e = NULL;
            const char *flags, *link, *mport;
            size_t k;

            if (j == m || !usable(&s->data[j]))
                continue;
            for (k = 0; k < reps->elements; k++) {
                const char *p = kv_get(reps->element[k], "port");
                if (p != NULL && atoi(p) == s->data[j].port)
                    e = reps->element[k];
            }
            flags = kv_get(e, "flags");
            link = kv_get(e, "master-link-status");
            mport = kv_get(e, "master-port");
            if (flags == NULL || strcmp(flags, "slave") != 0 ||
                link == NULL || strcmp(link, "ok") != 0 || mport == NULL ||
                atoi(mport) != s->data[m].port) {
                set_why(why, wlen, "sentinel %d sees node %d as %s (link %s, "
                        "master port %s)", i, j, flags ? flags : "unknown",
                        link ? link : "?", mport ? mport : "?");
                *bad_data = j;
                freeReplyObject(reps);
                return -1;
            }
        }
        freeReplyObject(reps);
        continue;
fail_x:
        if (x != NULL)
            freeReplyObject(x);
        return -1;
    }
    return m;
}

static int sentinel_wait(tu_sentinel_t *s, int exact_slaves, int timeout_ms,
                         const char *what)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    char why[256] = "";
    int bad = -1, bad_data = -1;

    for (;;) {
        if (sentinel_check(s, exact_slaves, why, sizeof(why), &bad,
                           &bad_data) >= 0)
            return 0;
        if (tu_now() > deadline)
            break;
        tu_sleep_ms(TP_POLL_MS);
    }
    topo_err("%s: not done after %d ms: %s", what, timeout_ms, why);
    if (bad >= 0)
        tu_redis_print_log(&s->sent[bad], TP_LOG_LINES);
    if (bad_data >= 0)
        tu_redis_print_log(&s->data[bad_data], TP_LOG_LINES);
    return -1;
}

/* Replicas attached to the master and in sync (before any sentinel). */
static int wait_replication(tu_sentinel_t *s, double deadline)
{
    char buf[32];
    int j;

    for (;;) {
        int ok = 1;

        if (server_info(&s->data[0], &s->dq[0], "replication",
                        "connected_slaves", buf, sizeof(buf)) == NULL ||
            atoi(buf) != s->ndata - 1)
            ok = 0;
        for (j = 1; ok && j < s->ndata; j++) {
            if (server_info(&s->data[j], &s->dq[j], "replication",
                            "master_link_status", buf, sizeof(buf)) == NULL ||
                strcmp(buf, "up") != 0)
                ok = 0;
        }
        if (ok)
            return 0;
        if (tu_now() > deadline) {
            topo_err("sentinel start: the replicas did not sync with the "
                     "master");
            tu_redis_print_log(&s->data[0], TP_LOG_LINES);
            return -1;
        }
        tu_sleep_ms(10);
    }
}

tu_sentinel_t *tu_sentinel_start(int replicas, int sentinels,
                                 const tu_sentinel_opts *opts)
{
    static const tu_sentinel_opts defaults;
    static const char *const sentinel_args[] = {"--sentinel", NULL};
    const tu_sentinel_opts *o = opts != NULL ? opts : &defaults;
    const char *args[64];
    char conf[1024], port0[16];
    tu_redis_opts ro;
    tu_sentinel_t *s;
    double deadline;
    int start_ms, nargs = 0, i, quorum, n;

    if (replicas < 0 || replicas >= TU_TOPO_MAX_NODES || sentinels < 1 ||
        sentinels > TU_TOPO_MAX_NODES) {
        topo_err("sentinel: bad size %d replicas, %d sentinels", replicas,
                 sentinels);
        return NULL;
    }
    quorum = o->quorum > 0 ? o->quorum : sentinels / 2 + 1;
    start_ms = o->start_timeout_ms > 0 ? o->start_timeout_ms : 30000;
    deadline = tu_now() + start_ms / 1000.0;

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        topo_err("sentinel: out of memory");
        return NULL;
    }
    s->ndata = replicas + 1;
    s->nsent = sentinels;
    for (i = 0; i < s->ndata; i++)
        conn_init(&s->dq[i]);
    for (i = 0; i < s->nsent; i++)
        conn_init(&s->sq[i]);
    s->fast_timers = !o->redis_timers;
    s->down_after_ms = o->down_after_ms > 0 ? o->down_after_ms : 1000;
    n = snprintf(s->name, sizeof(s->name), "%s",
                 o->master_name != NULL ? o->master_name : "distlock");
    if (n <= 0 || (size_t)n >= sizeof(s->name) ||
        strcspn(s->name, " \t\r\n\"'") != strlen(s->name)) {
        topo_err("sentinel: bad master name");
        sentinel_free(s);
        return NULL;
    }
    topo_register(&s->head, TOPO_SENTINEL);

    args[nargs++] = "--repl-diskless-sync-delay";
    args[nargs++] = "0";
    for (i = 0; o->data_args != NULL && o->data_args[i] != NULL; i++) {
        if (nargs >= (int)(sizeof(args) / sizeof(args[0])) - 1) {
            topo_err("sentinel: too many data_args");
            goto fail;
        }
        args[nargs++] = o->data_args[i];
    }
    args[nargs] = NULL;
    memset(&ro, 0, sizeof(ro));
    ro.args = args;
    for (i = 0; i < s->ndata; i++) {
        if (tu_redis_start_opts(&s->data[i], &ro) != 0) {
            topo_err("sentinel: data node %d did not start", i);
            goto fail;
        }
    }
    snprintf(port0, sizeof(port0), "%d", s->data[0].port);
    for (i = 1; i < s->ndata; i++)
        if (cmd_ok(&s->data[i], "node", i, "REPLICAOF", "127.0.0.1",
                   port0, NULL) != 0)
            goto fail;
    if (wait_replication(s, deadline) != 0)
        goto fail;

    n = snprintf(conf, sizeof(conf),
                 "sentinel resolve-hostnames no\n"
                 "sentinel monitor %s 127.0.0.1 %d %d\n"
                 "sentinel down-after-milliseconds %s %d\n"
                 "sentinel failover-timeout %s %d\n"
                 "sentinel parallel-syncs %s 1\n",
                 s->name, s->data[0].port, quorum,
                 s->name, s->down_after_ms,
                 s->name,
                 o->failover_timeout_ms > 0 ? o->failover_timeout_ms : 5000,
                 s->name);
    if (n <= 0 || (size_t)n >= sizeof(conf)) {
        topo_err("sentinel: config too long");
        goto fail;
    }
    memset(&ro, 0, sizeof(ro));
    ro.conf = conf;
    ro.args = sentinel_args;
    for (i = 0; i < s->nsent; i++) {
        if (tu_redis_start_opts(&s->sent[i], &ro) != 0) {
            topo_err("sentinel: sentinel %d did not start", i);
            goto fail;
        }
        if (sentinel_debug(s, i) != 0)
            goto fail;
    }
    s->url = make_url("redis-sentinel://", s->sent, s->nsent, "");
    if (s->url != NULL) {
        size_t len = strlen(s->url) + strlen(s->name) + 2;
        char *u = malloc(len);

        if (u != NULL)
            snprintf(u, len, "%s/%s", s->url, s->name);
        free(s->url);
        s->url = u;
    }
    if (s->url == NULL) {
        topo_err("sentinel: out of memory");
        goto fail;
    }
    {
        int left = (int)((deadline - tu_now()) * 1000);
        if (sentinel_wait(s, 1, left > 0 ? left : 1, "sentinel start") != 0)
            goto fail;
    }
    return s;

fail:
    tu_sentinel_stop(s);
    return NULL;
}

int tu_sentinel_nodes(const tu_sentinel_t *s)
{
    return s != NULL ? s->ndata : -1;
}

int tu_sentinel_count(const tu_sentinel_t *s)
{
    return s != NULL ? s->nsent : -1;
}

const char *tu_sentinel_name(const tu_sentinel_t *s)
{
    return s != NULL ? s->name : NULL;
}

const char *tu_sentinel_url(const tu_sentinel_t *s)
{
    return s != NULL ? s->url : NULL;
}

int tu_sentinel_port(const tu_sentinel_t *s, int node)
{
    return valid_data(s, node) ? s->data[node].port : -1;
}

pid_t tu_sentinel_pid(const tu_sentinel_t *s, int node)
{
    return valid_data(s, node) ? s->data[node].pid : -1;
}

tu_redis_t *tu_sentinel_node(tu_sentinel_t *s, int node)
{
    return valid_data(s, node) ? &s->data[node] : NULL;
}

int tu_sentinel_sentinel_port(const tu_sentinel_t *s, int i)
{
    return valid_sent(s, i) ? s->sent[i].port : -1;
}

tu_redis_t *tu_sentinel_sentinel(tu_sentinel_t *s, int i)
{
    return valid_sent(s, i) ? &s->sent[i] : NULL;
}

redisReply *tu_sentinel_cmd(tu_sentinel_t *s, int node, const char *arg0, ...)
{
    redisReply *x;
    va_list ap;

    if (!valid_data(s, node)) {
        topo_err("sentinel command: no data node %d", node);
        return NULL;
    }
    va_start(ap, arg0);
    x = cmd_va(&s->data[node], arg0, ap);
    va_end(ap);
    return x;
}

redisReply *tu_sentinel_scmd(tu_sentinel_t *s, int i, const char *arg0, ...)
{
    redisReply *x;
    va_list ap;

    if (!valid_sent(s, i)) {
        topo_err("sentinel command: no sentinel %d", i);
        return NULL;
    }
    va_start(ap, arg0);
    x = cmd_va(&s->sent[i], arg0, ap);
    va_end(ap);
    return x;
}

int tu_sentinel_master(tu_sentinel_t *s)
{
    char why[256];
    int bad;

    if (s == NULL)
        return -1;
    return agreed_master(s, why, sizeof(why), &bad);
}

const char *tu_sentinel_role(tu_sentinel_t *s, int node)
{
    return valid_data(s, node)
               ? role_name(node_role(&s->data[node], &s->dq[node], NULL,
                                     NULL, 0))
               : NULL;
}

int tu_sentinel_master_of(tu_sentinel_t *s, int node)
{
    int mport;

    if (!valid_data(s, node) ||
        node_role(&s->data[node], &s->dq[node], &mport, NULL, 0) != 'S')
        return -1;
    return data_by_port(s, mport);
}

int tu_sentinel_wait_new_master(tu_sentinel_t *s, int old, int timeout_ms)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    char why[256] = "";
    int bad = -1;

    if (s == NULL)
        return -1;
    for (;;) {
        int m = agreed_master(s, why, sizeof(why), &bad);

        if (m >= 0 && m != old) {
            if (node_role(&s->data[m], &s->dq[m], NULL, NULL, 0) == 'M')
                return m;
            set_why(why, sizeof(why), "the sentinels report node %d, which "
                    "does not say master (yet)", m);
        } else if (m == old) {
            set_why(why, sizeof(why), "the sentinels still report node %d",
                    old);
        }
        if (tu_now() > deadline)
            break;
        tu_sleep_ms(TP_POLL_MS);
    }
    topo_err("wait_new_master: none after %d ms: %s", timeout_ms, why);
    for (bad = 0; bad < s->nsent; bad++) {
        if (usable(&s->sent[bad])) {
            tu_redis_print_log(&s->sent[bad], TP_LOG_LINES);
            break;
        }
    }
    return -1;
}

int tu_sentinel_failover(tu_sentinel_t *s, int timeout_ms)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    int old, i = 0, left;

    if (s == NULL)
        return -1;
    old = tu_sentinel_master(s);
    if (old < 0) {
        topo_err("failover: the sentinels do not agree on a master");
        return -1;
    }
    for (;;) {
        redisReply *x;
        int retry;

        while (i < s->nsent && !usable(&s->sent[i]))
            i++;
        if (i >= s->nsent) {
            topo_err("failover: no sentinel running");
            return -1;
        }
        x = act(&s->sent[i], "SENTINEL", "FAILOVER", s->name, NULL);
        if (reply_is_ok(x)) {
            freeReplyObject(x);
            break;
        }
        /* A failover still finishing, or no replica fit yet: try again. */
        retry = x != NULL && x->type == REDIS_REPLY_ERROR &&
                (strncmp(x->str, "INPROG", 6) == 0 ||
                 strncmp(x->str, "NOGOODSLAVE", 11) == 0);
        if (!retry || tu_now() > deadline) {
            topo_err("SENTINEL FAILOVER on sentinel %d: %s", i, reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            tu_redis_print_log(&s->sent[i], TP_LOG_LINES);
            return -1;
        }
        freeReplyObject(x);
        tu_sleep_ms(100);
    }
    left = (int)((deadline - tu_now()) * 1000);
    return tu_sentinel_wait_new_master(s, old, left > 0 ? left : 1);
}

int tu_sentinel_wait_role(tu_sentinel_t *s, int node, const char *role,
                          int timeout_ms)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    const char *now = NULL;

    if (!valid_data(s, node) || role == NULL ||
        (strcmp(role, "master") != 0 && strcmp(role, "slave") != 0)) {
        topo_err("wait_role: bad node %d or role", node);
        return -1;
    }
    for (;;) {
        now = role_name(node_role(&s->data[node], &s->dq[node], NULL, NULL,
                                  0));
        if (now != NULL && strcmp(now, role) == 0)
            return 0;
        if (tu_now() > deadline)
            break;
        tu_sleep_ms(TP_POLL_MS);
    }
    topo_err("wait_role: node %d is %s after %d ms, not %s", node,
             now ? now : "not answering", timeout_ms, role);
    tu_redis_print_log(&s->data[node], TP_LOG_LINES);
    return -1;
}

int tu_sentinel_wait_ok(tu_sentinel_t *s, int timeout_ms)
{
    if (s == NULL)
        return -1;
    return sentinel_wait(s, 0, timeout_ms, "sentinel wait_ok");
}

int tu_sentinel_signal(tu_sentinel_t *s, int node, int sig)
{
    if (!valid_data(s, node)) {
        topo_err("signal: no data node %d", node);
        return -1;
    }
    return signal_node(&s->data[node], &s->dq[node], sig, "data node", node);
}

int tu_sentinel_kill(tu_sentinel_t *s, int node)
{
    return tu_sentinel_signal(s, node, SIGKILL);
}

int tu_sentinel_restart(tu_sentinel_t *s, int node)
{
    if (!valid_data(s, node)) {
        topo_err("restart: no data node %d", node);
        return -1;
    }
    return restart_node(&s->data[node], &s->dq[node]);
}

int tu_sentinel_sentinel_signal(tu_sentinel_t *s, int i, int sig)
{
    if (!valid_sent(s, i)) {
        topo_err("signal: no sentinel %d", i);
        return -1;
    }
    return signal_node(&s->sent[i], &s->sq[i], sig, "sentinel", i);
}

int tu_sentinel_sentinel_kill(tu_sentinel_t *s, int i)
{
    return tu_sentinel_sentinel_signal(s, i, SIGKILL);
}

int tu_sentinel_sentinel_restart(tu_sentinel_t *s, int i)
{
    if (!valid_sent(s, i)) {
        topo_err("restart: no sentinel %d", i);
        return -1;
    }
    if (restart_node(&s->sent[i], &s->sq[i]) != 0)
        return -1;
    return sentinel_debug(s, i);
}
