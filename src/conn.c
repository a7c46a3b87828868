/* conn.c: the connections of each thread, and script calls on them.
 * A thread keeps one connection per server it talks to (one, unless on a
 * cluster).  A connection whose context failed is dead: it is freed and
 * reopened. */
#define _GNU_SOURCE   /* POLLRDHUP */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define POOL 8                 /* servers one thread keeps connections to */
#define ROLE_MAX_AGE_MS 1000   /* replica count older than this is read again */
#define MAX_REDIRECTS 5

struct nconn {
    struct dist__addr addr;
    redisContext *c;
    int replicas;              /* connected replicas ROLE reported; -1 unknown */
    uint64_t role_ms;          /* when it was read */
    uint64_t used;             /* for replacing the least recently used */
};

struct tconn {
    struct nconn n[POOL];
    struct nconn *last;        /* where the last script ran */
    struct dist__cfg cfg;      /* a copy, refreshed when the settings change */
    unsigned long fork_gen;
    uint64_t tick;
};

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t conn_key;
static __thread struct tconn *my_conn;

static void close_all(struct tconn *t)
{
    int i;

    /* A context inherited across fork() is the parent's socket: closing our
     * copy of the descriptor is harmless to it, sending anything is not,
     * and redisFree sends nothing. */
    for (i = 0; i < POOL; i++)
        if (t->n[i].c) {
            redisFree(t->n[i].c);
            t->n[i].c = NULL;
        }
    t->last = NULL;
}

static void conn_destructor(void *p)
{
    struct tconn *t = p;

    close_all(t);
    free(t);
    my_conn = NULL;
}

static void key_init(void)
{
    pthread_key_create(&conn_key, conn_destructor);
}

static struct timeval ms_tv(unsigned long ms)
{
    struct timeval tv;

    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    return tv;
}

static const char *where(const struct dist__cfg *cfg, const struct dist__addr *a,
                         char *buf, size_t len)
{
    if (!a->port)
        snprintf(buf, len, "unix:%s", cfg->path);
    else
        snprintf(buf, len, "%s:%d", a->host, a->port);
    return buf;
}

/* Why a call on c failed, in words: hiredis reports a command timeout as
 * the EAGAIN of the read ("Resource temporarily unavailable"). */
static const char *io_why(const redisContext *c, char *buf, size_t len)
{
    struct dist__cfg cfg;

    if (c->err == REDIS_ERR_IO && (strstr(c->errstr, "temporarily unavailable") ||
                                   strstr(c->errstr, "timed out"))) {
        dist__cfg_get(&cfg);
        snprintf(buf, len, "no answer within the command timeout of %lu ms "
                 "(DISTLOCK_TIMEOUT_MS)", cfg.timeout_ms);
        return buf;
    }
    return c->errstr[0] ? c->errstr : "no reply";
}

/* Sends one command during set-up; the reply, or NULL with EIO and the
 * reason set (an error reply too). */
static redisReply *setup_cmd(redisContext *c, const char *what, int argc,
                             const char **argv)
{
    struct dist__sigpipe sp;
    redisReply *r;

    dist__sigpipe_block(&sp);
    r = redisCommandArgv(c, argc, argv, NULL);
    dist__sigpipe_restore(&sp);

    if (!r) {
        char why[160];
        dist__err(EIO, "%s: %s", what, io_why(c, why, sizeof why));
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        dist__err(EIO, "%s refused: %.*s", what, (int)r->len, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int dist__connect_addr(const struct dist__cfg *cfg, const struct dist__addr *a,
                       redisContext **out)
{
    struct timeval tv = ms_tv(cfg->timeout_ms);
    redisContext *c;
    redisReply *r;
    char w[300];

    *out = NULL;
    if (cfg->bad[0])
        return dist__err(EIO, "%s", cfg->bad);
    if (!a->port)
        c = redisConnectUnixWithTimeout(cfg->path, tv);
    else
        c = redisConnectWithTimeout(a->host, a->port, tv);
    if (!c)
        return dist__err(ENOMEM, "out of memory connecting to Redis");
    if (c->err) {
        dist__err(EIO, "cannot connect to Redis at %s: %s",
                  where(cfg, a, w, sizeof w), c->errstr);
        redisFree(c);
        return EIO;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return dist__err(EIO, "cannot set the Redis command timeout");
    }
    /* not inherited by a program exec'd by ours: it would keep the
     * connection, and its subscriptions, open on the server */
    fcntl(c->fd, F_SETFD, fcntl(c->fd, F_GETFD) | FD_CLOEXEC);
    if (cfg->pass[0]) {
        const char *argv[3] = { "AUTH", cfg->user, cfg->pass };
        r = cfg->user[0] ? setup_cmd(c, "AUTH", 3, argv)
                         : (argv[1] = cfg->pass, setup_cmd(c, "AUTH", 2, argv));
        if (!r) {
            redisFree(c);
            return EIO;
        }
        freeReplyObject(r);
    }
    if (cfg->db && cfg->mode != DIST__MODE_CLUSTER) {
        char db[16];
        const char *argv[2] = { "SELECT", db };
        snprintf(db, sizeof db, "%d", cfg->db);
        if (!(r = setup_cmd(c, "SELECT", 2, argv))) {
            redisFree(c);
            return EIO;
        }
        freeReplyObject(r);
    }
    *out = c;
    return 0;
}

/* ROLE: whether the server is a master, and how many replicas it has.
 * 1 master, 0 not a master (role in the error), -1 no answer. */
static int read_role(struct nconn *n)
{
    const char *argv[1] = { "ROLE" };
    redisReply *r = setup_cmd(n->c, "ROLE", 1, argv);
    int master;

    n->role_ms = dist__now_ms();
    if (!r) {
        n->replicas = -1;
        /* a server that refuses ROLE (an ACL rule) is taken for a master
         * whose replicas cannot be counted */
        return n->c->err ? -1 : 1;
    }
    master = r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[0]->str, "master") == 0;
    n->replicas = master && r->element[2]->type == REDIS_REPLY_ARRAY
                      ? (int)r->element[2]->elements : 0;
    if (!master)
        dist__err(EIO, "not a master (ROLE says %s)",
                  r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                  r->element[0]->type == REDIS_REPLY_STRING
                      ? r->element[0]->str : "something else");
    freeReplyObject(r);
    return master;
}

/* An idle connection has nothing to read: if it is readable, the server
 * closed it (a restart, a timeout, CLIENT KILL).  Found now, the next call
 * goes out on a fresh connection instead of into a dead one, where it could
 * not be told whether it ran. */
static int alive(const redisContext *c)
{
    struct pollfd p = { c->fd, POLLIN | POLLRDHUP, 0 };

    return poll(&p, 1, 0) == 0;
}

static void drop(struct nconn *n)
{
    if (n->c) {
        redisFree(n->c);
        n->c = NULL;
    }
}

static struct tconn *thread_conns(void)
{
    struct tconn *t = my_conn;
    unsigned long fgen = atomic_load(&dist__fork_gen);
    unsigned long cgen = dist__cfg_gen();

    if (!t) {
        pthread_once(&key_once, key_init);
        t = calloc(1, sizeof *t);
        if (!t) {
            dist__err(ENOMEM, "out of memory");
            return NULL;
        }
        pthread_setspecific(conn_key, t);
        my_conn = t;
        t->cfg.gen = cgen - 1;
    }
    if (t->fork_gen != fgen || t->cfg.gen != cgen) {
        close_all(t);
        t->fork_gen = fgen;
        dist__cfg_get(&t->cfg);
    }
    return t;
}

/* The thread's connection to a, opened as needed.  NULL with the reason. */
static struct nconn *conn_to(struct tconn *t, const struct dist__addr *a)
{
    struct nconn *n = NULL, *lru = &t->n[0];
    int i, role;
    char w[300];

    for (i = 0; i < POOL; i++) {
        struct nconn *x = &t->n[i];
        if (x->c && x->addr.port == a->port && strcmp(x->addr.host, a->host) == 0) {
            n = x;
            break;
        }
        if (!x->c || (lru->c && x->used < lru->used))
            lru = x;
    }
    if (n && !alive(n->c))
        drop(n);
    if (!n) {
        n = lru;
        drop(n);
        memset(&n->addr, 0, sizeof n->addr);
        snprintf(n->addr.host, sizeof n->addr.host, "%s", a->host);
        n->addr.port = a->port;
    }
    n->used = ++t->tick;
    if (n->c)
        return n;
    if (dist__connect_addr(&t->cfg, a, &n->c) != 0) {
        dist__topo_stale();
        return NULL;
    }
    /* A master is confirmed before it is used: after a failover the old
     * one may come back still believing it is the master, and a cluster
     * map may be out of date. */
    role = read_role(n);
    if (role == 1 && dist__topo_confirm(&t->cfg, a) == 0)
        return n;
    if (role == 0)
        dist__err(EIO, "Redis at %s is not a master (the map of the "
                  "servers is out of date; it is read again)",
                  where(&t->cfg, a, w, sizeof w));
    drop(n);
    dist__topo_stale();
    return NULL;
}

void dist__conn_close_thread(void)
{
    if (my_conn)
        close_all(my_conn);
}

const char *dist__publish_cmd(void)
{
    struct dist__cfg cfg;

    if (my_conn && my_conn->cfg.gen == dist__cfg_gen())
        return my_conn->cfg.mode == DIST__MODE_CLUSTER ? "spublish" : "publish";
    dist__cfg_get(&cfg);
    return cfg.mode == DIST__MODE_CLUSTER ? "spublish" : "publish";
}

#define STACK_ARGS 24

/* Runs script on c, after ASKING when asking.  Returns 0 with *out set
 * (an error reply too), DIST__ECONN, or ENOMEM. */
static int eval_on(redisContext *c, const struct dist__script *s, int asking,
                   int nkeys, const struct dist__buf *kv, int nkv,
                   redisReply **out)
{
    struct dist__sigpipe sp;
    const char *sargv[STACK_ARGS];
    size_t slen[STACK_ARGS];
    const char **argv = sargv;
    size_t *argvlen = slen;
    char nk[16];
    redisReply *r = NULL;
    void *ar;
    int i, argc = 3 + nkv, pass;

    *out = NULL;
    if (argc > STACK_ARGS) {
        argv = malloc(sizeof *argv * (size_t)argc);
        argvlen = malloc(sizeof *argvlen * (size_t)argc);
        if (!argv || !argvlen) {
            free(argv);
            free(argvlen);
            return dist__err(ENOMEM, "out of memory");
        }
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[2] = nk;
    argvlen[2] = strlen(nk);
    for (i = 0; i < nkv; i++) {
        argv[3 + i] = kv[i].p;
        argvlen[3 + i] = kv[i].len;
    }
    /* EVALSHA first; NOSCRIPT (after SCRIPT FLUSH, a restart, or on a
     * replica just promoted) means the server lacks the script: EVAL sends
     * the body and caches it again. */
    dist__sigpipe_block(&sp);
    for (pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            argv[0] = "EVALSHA"; argvlen[0] = 7;
            argv[1] = s->sha;    argvlen[1] = 40;
        } else {
            argv[0] = "EVAL";    argvlen[0] = 4;
            argv[1] = s->body;   argvlen[1] = s->len;
        }
        if (asking) {
            /* ASKING lets the next command in on a slot being imported */
            if (redisAppendCommand(c, "ASKING") != REDIS_OK ||
                redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK ||
                redisGetReply(c, &ar) != REDIS_OK) {
                r = NULL;
                break;
            }
            freeReplyObject(ar);
            if (redisGetReply(c, &ar) != REDIS_OK) {
                r = NULL;
                break;
            }
            r = ar;
        } else {
            r = redisCommandArgv(c, argc, argv, argvlen);
        }
        if (!r) {
            char why[160];
            dist__err(EIO, "Redis connection failed during %s: %s", s->name,
                      io_why(c, why, sizeof why));
            break;
        }
        if (r->type == REDIS_REPLY_ERROR && pass == 0 &&
            strncmp(r->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(r);
            r = NULL;
            continue;
        }
        break;
    }
    dist__sigpipe_restore(&sp);
    if (argv != sargv) {
        free(argv);
        free(argvlen);
    }
    if (!r)
        return DIST__ECONN;
    *out = r;
    return 0;
}

/* An error reply: 0 or EREPLY with the reason set. */
static int refused(const struct dist__script *s, redisReply **r)
{
    if ((*r)->type != REDIS_REPLY_ERROR)
        return 0;
    dist__err(EIO, "Redis refused %s: %.*s", s->name, (int)(*r)->len, (*r)->str);
    freeReplyObject(*r);
    *r = NULL;
    return DIST__EREPLY;
}

int dist__eval(redisContext *c, int script, int nkeys,
               const struct dist__buf *kv, int nkv, redisReply **out)
{
    const struct dist__script *s = &dist__scripts[script];
    int rc = eval_on(c, s, 0, nkeys, kv, nkv, out);

    return rc ? rc : refused(s, out);
}

/* What an error reply asks of the caller. */
enum redirect { R_NONE, R_MOVED, R_ASK, R_LATER, R_LATER_STALE };

/* "MOVED <slot> <host>:<port>" / "ASK ..." into slot and a. */
static enum redirect classify(const redisReply *r, const struct dist__addr *from,
                              int *slot, struct dist__addr *a)
{
    const char *p = r->str, *sp, *colon;
    enum redirect k;
    long v;

    if (strncmp(p, "MOVED ", 6) == 0)
        k = R_MOVED, p += 6;
    else if (strncmp(p, "ASK ", 4) == 0)
        k = R_ASK, p += 4;
    else if (strncmp(p, "TRYAGAIN", 8) == 0 || strncmp(p, "LOADING", 7) == 0 ||
             strncmp(p, "BUSY ", 5) == 0)
        return R_LATER;
    else if (strncmp(p, "CLUSTERDOWN", 11) == 0 ||
             strncmp(p, "MASTERDOWN", 10) == 0 ||
             strncmp(p, "READONLY", 8) == 0)
        return R_LATER_STALE;
    else
        return R_NONE;
    v = strtol(p, (char **)&sp, 10);
    if (sp == p || *sp != ' ' || v < 0 || v > 16383)
        return R_NONE;
    sp++;
    colon = strrchr(sp, ':');
    if (!colon || (size_t)(colon - sp) >= sizeof a->host)
        return R_NONE;
    memset(a, 0, sizeof *a);
    if (colon == sp)        /* no host: the one we asked */
        snprintf(a->host, sizeof a->host, "%s", from->host);
    else
        memcpy(a->host, sp, (size_t)(colon - sp));
    a->port = atoi(colon + 1);
    if (a->port <= 0 || a->port > 65535)
        return R_NONE;
    *slot = (int)v;
    return k;
}

int dist__eval_here(int script, int nkeys, const struct dist__buf *kv,
                    int nkv, redisReply **out)
{
    const struct dist__script *s = &dist__scripts[script];
    struct tconn *t = thread_conns();
    struct dist__addr a, ask;
    struct nconn *n;
    uint64_t give_up = 0;
    unsigned long backoff = 10;
    int rc, asking = 0, hops = 0, slot;

    *out = NULL;
    if (!t)
        return DIST__ENOCONN;
    t->last = NULL;
    for (;;) {
        if (asking)
            a = ask;
        else if (dist__route(&t->cfg, nkeys > 0 ? &kv[0] : NULL, &a) != 0)
            return DIST__ENOCONN;
        if (!(n = conn_to(t, &a)))
            return DIST__ENOCONN;
        rc = eval_on(n->c, s, asking, nkeys, kv, nkv, out);
        if (rc == DIST__ECONN) {
            drop(n);
            dist__topo_stale();
            return rc;
        }
        if (rc != 0)
            return rc;
        t->last = n;
        if ((*out)->type != REDIS_REPLY_ERROR)
            return 0;
        /* nothing ran: a redirection, or a server not ready yet */
        switch (classify(*out, &a, &slot, &ask)) {
        case R_NONE:
            if (strncmp((*out)->str, "CROSSSLOT", 9) == 0) {
                freeReplyObject(*out);
                *out = NULL;
                return dist__err(EIO, "Redis Cluster refused %s: the lock's "
                                 "keys are in different slots; its name has "
                                 "a '{' that opens no {tag}, or a '}' "
                                 "without a '{'", s->name), DIST__EREPLY;
            }
            return refused(s, out);
        case R_MOVED:
            dist__topo_moved(slot, &ask);
            asking = 0;
            break;
        case R_ASK:
            asking = 1;
            break;
        case R_LATER_STALE:
            drop(n);
            t->last = NULL;
            dist__topo_stale();
            /* fall through */
        case R_LATER:
            asking = 0;
            if (!give_up)
                give_up = dist__now_ms() + t->cfg.timeout_ms;
            if (dist__now_ms() >= give_up)
                return refused(s, out);
            dist__sleep_ms(backoff);
            if (backoff < 200)
                backoff *= 2;
            /* bounded by time from here: during a migration a script of
             * several keys goes ASK, then TRYAGAIN, until the keys moved */
            hops = -1;
            break;
        }
        if (++hops > MAX_REDIRECTS) {
            rc = refused(s, out);
            dist__err(EIO, "Redis refused %s: more than %d redirections (the "
                      "cluster is being resharded)", s->name, MAX_REDIRECTS);
            return rc;
        }
        freeReplyObject(*out);
        *out = NULL;
    }
}

int dist__replica_sync(const char *what)
{
    struct tconn *t = my_conn;
    struct nconn *n = t ? t->last : NULL;
    struct dist__sigpipe sp;
    unsigned long ms = t ? t->cfg.replica_wait_ms : 0;
    struct timeval tv;
    redisReply *r;
    char arg[24];
    char w[300];
    long long acked;
    int role;

    if (!ms || !n || !n->c)
        return 0;
    if (dist__now_ms() >= n->role_ms + ROLE_MAX_AGE_MS) {
        role = read_role(n);
        if (role == -1) {
            drop(n);
            t->last = NULL;
            return DIST__ECONN;
        }
    }
    if (n->replicas <= 0)
        return 0;
    snprintf(arg, sizeof arg, "%lu", ms);
    /* WAIT may block for ms: the command timeout must not cut it short */
    if (ms >= t->cfg.timeout_ms) {
        tv = ms_tv(ms + t->cfg.timeout_ms);
        redisSetTimeout(n->c, tv);
    }
    dist__sigpipe_block(&sp);
    r = redisCommand(n->c, "WAIT 1 %s", arg);
    dist__sigpipe_restore(&sp);
    if (ms >= t->cfg.timeout_ms && !n->c->err) {
        tv = ms_tv(t->cfg.timeout_ms);
        redisSetTimeout(n->c, tv);
    }
    if (!r) {
        dist__err(EIO, "lock '%s': the connection failed while waiting for "
                  "a replica to acknowledge it: %s", what,
                  io_why(n->c, w, sizeof w));
        drop(n);
        t->last = NULL;
        return DIST__ECONN;
    }
    acked = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r->type == REDIS_REPLY_ERROR)
        dist__err(EIO, "%.*s", (int)r->len, r->str);
    freeReplyObject(r);
    if (acked >= 1)
        return 0;
    return dist__err(DIST_ENOREPLICA, "lock '%s': none of the %d replica%s of "
                     "%s acknowledged it within %lu ms, so it was given back "
                     "(a failover now would lose it; DISTLOCK_REPLICA_WAIT_MS=0 "
                     "turns this check off)", what, n->replicas,
                     n->replicas == 1 ? "" : "s",
                     where(&t->cfg, &n->addr, w, sizeof w), ms);
}

int dist__reply_int(const redisReply *r, size_t i, long long *v)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
        r->element[i]->type != REDIS_REPLY_INTEGER)
        return -1;
    *v = r->element[i]->integer;
    return 0;
}

/* ---- names ------------------------------------------------------------- */

/* Redisson's rule: braces go around N unless N already has one, so that
 * every derived name hashes to N's cluster slot and stays byte-identical to
 * what a Java client computes. */
static const char *const derived_prefix[] = {
    "redisson_lock__channel:", "redisson_lock_token:", "redisson_lock_queue:",
    "redisson_lock_timeout:", "redisson_rwlock:", "distlock_rwlock_writers:",
    "distlock_fair_waiters:",
};
#define NDERIVED (sizeof derived_prefix / sizeof derived_prefix[0])

/* Writes prefix, N (in braces when wanted), suffix and a NUL at p. */
static size_t derive_at(char *p, const char *prefix, size_t plen,
                        const struct dist__buf *name, int braces,
                        const char *suffix, size_t slen)
{
    char *s = p;

    memcpy(s, prefix, plen);
    s += plen;
    if (braces)
        *s++ = '{';
    memcpy(s, name->p, name->len);
    s += name->len;
    if (braces)
        *s++ = '}';
    memcpy(s, suffix, slen);
    s += slen;
    *s = 0;
    return (size_t)(s - p);
}

/* Redisson's rule: braces go around N unless N already has one, so that
 * every derived name hashes to N's cluster slot and stays byte-identical to
 * what a Java client computes. */
struct dist__names *dist__names_new(const char *name, size_t len)
{
    struct dist__buf *field[NDERIVED];
    struct dist__names *n;
    size_t i, total = len + 1;
    int braces = memchr(name, '{', len) == NULL;
    char *p;

    for (i = 0; i < NDERIVED; i++)
        total += strlen(derived_prefix[i]) + len + (braces ? 2 : 0) + 1;
    n = malloc(sizeof *n + total);
    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    n->braces = braces;
    p = n->mem;
    memcpy(p, name, len);
    p[len] = 0;
    n->name.p = p;
    n->name.len = len;
    p += len + 1;

    field[0] = &n->chan;
    field[1] = &n->token;
    field[2] = &n->queue;
    field[3] = &n->timeout;
    field[4] = &n->rwchan;
    field[5] = &n->writers;
    field[6] = &n->fairwait;
    for (i = 0; i < NDERIVED; i++) {
        size_t l = derive_at(p, derived_prefix[i], strlen(derived_prefix[i]),
                             &n->name, braces, "", 0);
        field[i]->p = p;
        field[i]->len = l;
        p += l + 1;
    }
    n->fairkeys[0] = n->timeout;
    n->fairkeys[1] = n->queue;
    n->fairkeys[2] = n->fairwait;
    n->fairkeys[3] = n->chan;
    /* On a cluster a script's keys must share a slot.  They do, unless N
     * has a '{' that opens no tag ("a{b", "a{}b": N is hashed whole, the
     * derived names too but with a prefix) or a '}' without a '{' ("a}b":
     * the braces put around N close early). */
    n->slot = dist__keyslot(n->name.p, n->name.len);
    for (i = 0; i < NDERIVED; i++)
        if (dist__keyslot(field[i]->p, field[i]->len) != n->slot)
            n->slot = -1;
    return n;
}

char *dist__names_derive(const struct dist__names *n, const char *prefix,
                         const char *suffix, size_t *len)
{
    size_t plen = strlen(prefix), slen = strlen(suffix);
    char *p = malloc(plen + n->name.len + 2 + slen + 1);

    if (!p)
        return NULL;
    *len = derive_at(p, prefix, plen, &n->name, n->braces, suffix, slen);
    return p;
}

void dist__names_ref(struct dist__names *n)
{
    atomic_fetch_add(&n->refs, 1);
}

void dist__names_unref(struct dist__names *n)
{
    if (n && atomic_fetch_sub(&n->refs, 1) == 1)
        free(n);
}
