/*
 * harness_topo: what the Cluster and Sentinel harnesses share: live-node
 * checks, fresh and cached connections, replies, ROLE and INFO, signals,
 * the tables of nodes with the tu_node_ calls (harness_topo.h), and the
 * registry that stops every topology at exit (harness_int.h).
 *
 * Every server is a harness server (tu_redis_start_opts), so start-up
 * checks (pid over both endpoints, another port when one is taken),
 * PDEATHSIG, the registry of servers, their atexit clean-up and the fork
 * guard come from harness_server.c; the topologies add the command lines,
 * the wiring and the waits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TP_CONN_TIMEOUT_MS 1000

void tp_err(const char *fmt, ...)
{
    char buf[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "topo: %s\n", buf);
}

/* ------------------------------------------------------------------------ */
/* Live nodes                                                               */
/* ------------------------------------------------------------------------ */

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
    p = strrchr(buf, ')'); /* the command name may hold anything */
    if (p == NULL || p[1] != ' ')
        return 0;
    return p[2];
}

static int is_stopped_state(char st)
{
    return st == 'T' || st == 't';
}

const char *tp_down_name(const tu_redis_t *r)
{
    char st;

    if (r->pid <= 0)
        return "killed";
    st = proc_state(r->pid);
    return is_stopped_state(st)   ? "stopped"
           : st == 0 || st == 'Z' ? "dead"
                                  : "up";
}

int tp_usable(const tu_redis_t *r)
{
    char st;

    if (r->pid <= 0)
        return 0;
    st = proc_state(r->pid);
    return st != 0 && !is_stopped_state(st) && st != 'Z' && st != 'X';
}

/* ------------------------------------------------------------------------ */
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

/*
 * The topologies never use the cached admin connection of tu_cmd: a
 * sentinel that promotes or reconfigures a node kills its clients (CLIENT
 * KILL TYPE normal), which would leave that connection broken for the
 * test's next tu_cmd.  Commands that change something, and the tu_*_cmd
 * functions, go over a fresh connection each; the queries of the waits
 * over one cached connection per server (struct tp_conn), retried once on
 * a new one.
 */

redisContext *tp_connect(const tu_redis_t *r, char *err, size_t elen)
{
    if (r->sock[0] == '\0') {
        hx_why(err, elen, "server not started");
        return NULL;
    }
    return hx_connect(r->sock, 0, TP_CONN_TIMEOUT_MS, err, elen);
}

redisReply *tp_fresh_cmdv(const tu_redis_t *r, int argc, const char **argv,
                          const size_t *lens, int loud)
{
    redisContext *ctx;
    redisReply *x;
    char err[160];

    ctx = tp_connect(r, err, sizeof(err));
    if (ctx == NULL) {
        if (loud)
            tp_err("%s on port %d: %s", argv[0], r->port, err);
        return NULL;
    }
    x = hx_command(ctx, argc, argv, lens);
    if (x == NULL && loud)
        tp_err("%s on port %d: %s", argv[0], r->port,
               ctx->errstr[0] ? ctx->errstr : "I/O error");
    redisFree(ctx);
    return x;
}

static redisReply *send_fresh(tu_redis_t *r, int argc, const char **argv)
{
    return tp_fresh_cmdv(r, argc, argv, NULL, 1);
}

redisReply *tp_cmd_va(tu_redis_t *r, const char *arg0, va_list ap)
{
    return hx_send_va(r, arg0, ap, send_fresh);
}

redisReply *tp_act(tu_redis_t *r, const char *const *argv)
{
    int argc = 0;

    while (argv[argc] != NULL)
        argc++;
    return tp_fresh_cmdv(r, argc, (const char **)argv, NULL, 1);
}

void tp_conn_init(struct tp_conn *q)
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

void tp_conn_destroy(struct tp_conn *q)
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
    redisReply *x = NULL;
    char err[160];
    int attempt;

    if (!tp_usable(r))
        return NULL;
    if (q->owner != getpid())
        return tp_fresh_cmdv(r, argc, argv, NULL, 0);
    pthread_mutex_lock(&q->lock);
    for (attempt = 0; attempt < 2 && x == NULL; attempt++) {
        if (q->ctx == NULL)
            q->ctx = tp_connect(r, err, sizeof(err));
        if (q->ctx == NULL)
            break;
        x = hx_command(q->ctx, argc, argv, NULL);
        if (x == NULL) {
            redisFree(q->ctx);
            q->ctx = NULL;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return x;
}

redisReply *tp_query(tu_redis_t *r, struct tp_conn *q, const char *arg0, ...)
{
    const char **argv;
    redisReply *x;
    va_list ap;
    int argc = 0;

    va_start(ap, arg0);
    argv = hx_collect_args(arg0, ap, &argc);
    va_end(ap);
    if (argv == NULL)
        return NULL;
    x = query_argv(r, q, argc, argv);
    free(argv);
    return x;
}

int tp_signal_node(tu_redis_t *r, struct tp_conn *q, int sig,
                   const char *what, int idx)
{
    double deadline;

    if (sig == SIGKILL) {
        conn_reset(q);
        return tu_redis_kill(r);
    }
    if (r->pid <= 0) {
        tp_err("signal %d to %s %d: not running", sig, what, idx);
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
            tp_err("%s %d (pid %d) did not %s within 5 s", what, idx,
                   (int)r->pid, sig == SIGSTOP ? "stop" : "continue");
            return -1;
        }
        tu_sleep_ms(1);
    }
}

int tp_restart_node(tu_redis_t *r, struct tp_conn *q)
{
    int rc = tu_redis_restart(r);

    conn_reset(q);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                  */
/* ------------------------------------------------------------------------ */

const char *tp_reply_text(const redisReply *x)
{
    if (x != NULL &&
        (x->type == REDIS_REPLY_STRING || x->type == REDIS_REPLY_STATUS) &&
        x->str != NULL)
        return x->str;
    return NULL;
}

int tp_reply_ok(const redisReply *x)
{
    return x != NULL && x->type == REDIS_REPLY_STATUS && x->str != NULL &&
           strcmp(x->str, "OK") == 0;
}

const char *tp_reply_err(const redisReply *x)
{
    if (x == NULL)
        return "no reply";
    if (x->type == REDIS_REPLY_ERROR && x->str != NULL)
        return x->str;
    if (tp_reply_text(x) != NULL)
        return x->str;
    return "unexpected reply type";
}

int tp_cmd_ok(tu_redis_t *r, const char *what, int idx, const char *arg0, ...)
{
    char cmd[64] = "";
    redisReply *x;
    va_list ap;
    int ok;

    va_start(ap, arg0);
    x = tp_cmd_va(r, arg0, ap);
    va_end(ap);
    ok = tp_reply_ok(x);
    if (!ok) {
        /* Name the command by its first two words ("CLUSTER MEET"). */
        va_start(ap, arg0);
        {
            const char *a1 = va_arg(ap, const char *);
            snprintf(cmd, sizeof(cmd), "%s%s%s", arg0, a1 ? " " : "",
                     a1 ? a1 : "");
        }
        va_end(ap);
        tp_err("%s on %s %d: %s", cmd, what, idx, tp_reply_err(x));
    }
    if (x != NULL)
        freeReplyObject(x);
    return ok ? 0 : -1;
}

const char *tp_info_field(const char *text, const char *field, char *out,
                          size_t len)
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

const char *tp_server_info(tu_redis_t *r, struct tp_conn *q,
                           const char *section, const char *field, char *out,
                           size_t len)
{
    redisReply *x = tp_query(r, q, "INFO", section, NULL);
    const char *v = tp_info_field(tp_reply_text(x), field, out, len);

    if (x != NULL)
        freeReplyObject(x);
    return v;
}

/* ROLE's reply for a replica: the port it replicates from and the state
 * of its link. */
static void replica_of(const redisReply *x, int *mport, char *state,
                       size_t slen)
{
    if (mport != NULL && x->element[2]->type == REDIS_REPLY_INTEGER)
        *mport = (int)x->element[2]->integer;
    if (state != NULL && slen > 0 && tp_reply_text(x->element[3]))
        snprintf(state, slen, "%s", x->element[3]->str);
}

char tp_node_role(tu_redis_t *r, struct tp_conn *q, int *mport, char *state,
                  size_t slen)
{
    redisReply *x;
    const char *kind;
    char role = 0;

    if (mport != NULL)
        *mport = -1;
    if (state != NULL && slen > 0)
        state[0] = '\0';
    if (!tp_usable(r))
        return 0;
    x = tp_query(r, q, "ROLE", NULL);
    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements >= 1 &&
        (kind = tp_reply_text(x->element[0])) != NULL) {
        if (strcmp(kind, "master") == 0) {
            role = 'M';
        } else if (strcmp(kind, "slave") == 0 && x->elements >= 4) {
            role = 'S';
            replica_of(x, mport, state, slen);
        }
    }
    if (x != NULL)
        freeReplyObject(x);
    return role;
}

const char *tp_role_name(char role)
{
    return role == 'M' ? "master" : role == 'S' ? "slave" : NULL;
}

const char *tp_role_of(tu_redis_t *r, struct tp_conn *q)
{
    return tp_role_name(tp_node_role(r, q, NULL, NULL, 0));
}

/* ------------------------------------------------------------------------ */
/* Tables of nodes                                                          */
/* ------------------------------------------------------------------------ */

void tp_nodes_init(struct tu_nodes *t, int n, const char *what)
{
    int i;

    t->n = n;
    t->what = what;
    for (i = 0; i < n; i++)
        tp_conn_init(&t->q[i]);
}

void tp_nodes_stop(struct tu_nodes *t)
{
    int i;

    for (i = 0; i < t->n; i++) {
        tu_redis_stop(&t->node[i]);
        tp_conn_destroy(&t->q[i]);
    }
}

tu_redis_t *tp_node_at(struct tu_nodes *t, int i, const char *op)
{
    if (!tp_node_ok(t, i)) {
        tp_err("%s: no %s %d", op, t != NULL ? t->what : "node", i);
        return NULL;
    }
    return &t->node[i];
}

int tp_by_port(const struct tu_nodes *t, int port)
{
    int i;

    for (i = 0; i < t->n; i++)
        if (t->node[i].port == port)
            return i;
    return -1;
}

int tp_master_of(struct tu_nodes *t, int i)
{
    int mport;

    if (tp_node_role(&t->node[i], &t->q[i], &mport, NULL, 0) != 'S')
        return -1;
    return tp_by_port(t, mport);
}

int tp_first_usable(struct tu_nodes *t)
{
    int i;

    for (i = 0; i < t->n; i++)
        if (tp_usable(&t->node[i]))
            return i;
    return -1;
}

/* The accessors of harness_topo.h: every kind of node alike. */

int tu_nodes_count(const tu_nodes_t *t)
{
    return t != NULL ? t->n : -1;
}

int tu_node_port(const tu_nodes_t *t, int i)
{
    return tp_node_ok(t, i) ? t->node[i].port : -1;
}

pid_t tu_node_pid(const tu_nodes_t *t, int i)
{
    return tp_node_ok(t, i) ? t->node[i].pid : -1;
}

tu_redis_t *tu_node_server(tu_nodes_t *t, int i)
{
    return tp_node_ok(t, i) ? &t->node[i] : NULL;
}

redisReply *tu_node_cmd(tu_nodes_t *t, int i, const char *arg0, ...)
{
    tu_redis_t *r = tp_node_at(t, i, "command");
    redisReply *x;
    va_list ap;

    if (r == NULL)
        return NULL;
    va_start(ap, arg0);
    x = tp_cmd_va(r, arg0, ap);
    va_end(ap);
    return x;
}

const char *tu_node_role(tu_nodes_t *t, int i)
{
    return tp_node_ok(t, i) ? tp_role_of(&t->node[i], &t->q[i]) : NULL;
}

int tu_node_master_of(tu_nodes_t *t, int i)
{
    return tp_node_ok(t, i) ? tp_master_of(t, i) : -1;
}

int tu_node_wait_role(tu_nodes_t *t, int i, const char *role, int timeout_ms)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    const char *now = NULL;

    if (!tp_node_ok(t, i) || role == NULL ||
        (strcmp(role, "master") != 0 && strcmp(role, "slave") != 0)) {
        tp_err("wait_role: bad node %d or role", i);
        return -1;
    }
    for (;;) {
        now = tp_role_of(&t->node[i], &t->q[i]);
        if (now != NULL && strcmp(now, role) == 0)
            return 0;
        if (tu_now() > deadline)
            break;
        tu_sleep_ms(TP_POLL_MS);
    }
    tp_err("wait_role: %s %d is %s after %d ms, not %s", t->what, i,
           now ? now : "not answering", timeout_ms, role);
    tu_redis_print_log(&t->node[i], TP_LOG_LINES);
    return -1;
}

int tu_node_signal(tu_nodes_t *t, int i, int sig)
{
    tu_redis_t *r = tp_node_at(t, i, "signal");

    return r != NULL ? tp_signal_node(r, &t->q[i], sig, t->what, i) : -1;
}

int tu_node_kill(tu_nodes_t *t, int i)
{
    return tu_node_signal(t, i, SIGKILL);
}

int tu_node_restart(tu_nodes_t *t, int i)
{
    tu_redis_t *r = tp_node_at(t, i, "restart");

    if (r == NULL || tp_restart_node(r, &t->q[i]) != 0)
        return -1;
    return t->restarted != NULL ? t->restarted(t->owner, i) : 0;
}

double tp_start_deadline(const tu_topo_opts *o)
{
    return tu_now() +
           (o->start_timeout_ms > 0 ? o->start_timeout_ms : 30000) / 1000.0;
}

int tp_ms_left(double deadline)
{
    int left = (int)((deadline - tu_now()) * 1000);

    return left > 0 ? left : 1;
}

int tp_node_args(const char **args, int nargs, int cap, const tu_topo_opts *o)
{
    int i;

    for (i = 0; o->node_args != NULL && o->node_args[i] != NULL; i++) {
        if (nargs >= cap - 1) {
            tp_err("too many node_args: at most %d", cap - 1);
            return -1;
        }
        args[nargs++] = o->node_args[i];
    }
    args[nargs] = NULL;
    return nargs;
}

char *tp_make_url(const char *scheme, const struct tu_nodes *t, int n,
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
                                i > 0 ? "," : "", t->node[i].port);
    snprintf(url + len, cap - len, "%s", suffix);
    return url;
}

/* ------------------------------------------------------------------------ */
/* Registry of running topologies (atexit clean-up)                        */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t g_topo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp_head *g_topos;
static pthread_once_t g_topo_once = PTHREAD_ONCE_INIT;

static void topo_atexit(void)
{
    pid_t self = getpid();

    for (;;) {
        struct tp_head **pp, *h = NULL;

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
        h->free(h);
    }
}

static void topo_install_atexit(void)
{
    if (atexit(topo_atexit) != 0)
        tp_err("atexit failed; topologies are stopped by the server "
               "harness only");
}

void tp_register(struct tp_head *h, void (*free_fn)(struct tp_head *))
{
    h->free = free_fn;
    h->creator = getpid();
    pthread_once(&g_topo_once, topo_install_atexit);
    pthread_mutex_lock(&g_topo_lock);
    h->next = g_topos;
    g_topos = h;
    pthread_mutex_unlock(&g_topo_lock);
}

int tp_unregister(struct tp_head *h)
{
    struct tp_head **pp;
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

void tp_stop(struct tp_head *h)
{
    if (h == NULL || h->creator != getpid())
        return;
    (void)tp_unregister(h);
    h->free(h);
}

void *tp_started(struct tp_head *h, int rc)
{
    if (rc == 0)
        return h;
    tp_stop(h);
    return NULL;
}
