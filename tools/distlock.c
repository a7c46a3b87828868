/*
 * distlock: see, wait for and force distlock (and Redisson) locks from a shell.
 *
 *   distlock status NAME            who holds it, its lease, who waits
 *   distlock list [PATTERN]         the locks that exist now (SCAN)
 *   distlock lock NAME -- CMD...    run CMD while holding the lock (flock(1))
 *   distlock unlock --force NAME    remove a lock whatever its holder
 *   distlock watch NAME             one line per change until interrupted
 *
 * Exit codes: 0 success, 1 busy / timed out / declined, 2 usage error,
 * 3 Redis error; `lock` returns the command's own status.
 *
 * It links libdistlock statically and uses its internals (URL parsing,
 * connecting, the names derived from N, the script table), so that the tool
 * and the library can never disagree on where Redis is or on a layout, and
 * the shared library exports nothing more for it.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "distlock.h"
#include "internal.h"

#define EX_BUSY  1
#define EX_USAGE 2
#define EX_REDIS 3

#define WATCH_INTERVAL_MS 100
#define LIST_BATCH        64
#define LIST_MAX_FIELDS   4096   /* a larger hash is not taken for a lock */
#define READ_KEYS_MAX     1000   /* read-hold timeout keys looked at per owner */

static struct {
    int json;
    const char *url;
} opt;

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */
/* ------------------------------------------------------------------------ */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    fputs("distlock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
    va_list ap;

    fputs("distlock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

static const char *cur_cmd = NULL;   /* for "Try 'distlock CMD --help'" */

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("distlock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'distlock %s%s--help'.\n", cur_cmd ? cur_cmd : "",
            cur_cmd ? " " : "");
    exit(EX_USAGE);
}

/* ------------------------------------------------------------------------ */
/* Growing strings, escaping                                                */
/* ------------------------------------------------------------------------ */

struct sb {
    char *p;
    size_t len, cap;
};

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (!q)
        die(EX_REDIS, "out of memory");
    return q;
}

static char *xmemdup(const char *p, size_t n)
{
    char *q = xrealloc(NULL, n + 1);

    memcpy(q, p, n);
    q[n] = 0;
    return q;
}

static void sb_addn(struct sb *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_adds(struct sb *b, const char *s)
{
    sb_addn(b, s, strlen(s));
}

static void sb_printf(struct sb *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_addn(b, tmp, (size_t)n);
        return;
    }
    {
        char *big = xrealloc(NULL, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_addn(b, big, (size_t)n);
        free(big);
    }
}

/* Length of the valid UTF-8 sequence at s (of at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len, i;
    unsigned c = s[0];

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (len > n)
        return 0;
    for (i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
        (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return len;
}

/* A JSON string; bytes that are not UTF-8 become U+FFFD. */
static void sb_json(struct sb *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, l;

    sb_addn(b, "\"", 1);
    while (i < n) {
        unsigned c = u[i];
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            sb_addn(b, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            sb_printf(b, "\\u%04x", c);
            i++;
        } else if ((l = utf8_len(u + i, n - i)) > 0) {
            sb_addn(b, s + i, l);
            i += l;
        } else {
            sb_adds(b, "\\ufffd");
            i++;
        }
    }
    sb_addn(b, "\"", 1);
}

static void sb_jsonz(struct sb *b, const char *s)
{
    sb_json(b, s, strlen(s));
}

/* For a terminal: control bytes as \xNN, the rest as it is. */
static void sb_human(struct sb *b, const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            sb_printf(b, "\\x%02x", c);
        else
            sb_addn(b, s + i, 1);
    }
}

/* Writes a finished line to stdout in one go. */
static void sb_flush_line(struct sb *b)
{
    sb_addn(b, "\n", 1);
    fwrite(b->p, 1, b->len, stdout);
    b->len = 0;
    b->p[0] = 0;
}

static void sb_free(struct sb *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* "29.9 s" */
static void sb_secs(struct sb *b, long long ms)
{
    if (ms < 0)
        ms = 0;
    sb_printf(b, "%lld.%lld s", ms / 1000, (ms % 1000) / 100);
}

/* ------------------------------------------------------------------------ */
/* Redis                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Every command about one lock goes to the server that owns the lock's keys
 * (they share N's hash tag, so one cluster slot): the URL's server, the
 * master the sentinels name, or on a cluster the master of the slot.  A
 * server that answers MOVED or ASK anyway (the cluster is being resharded)
 * is followed a few hops; one that says to try later (TRYAGAIN,
 * CLUSTERDOWN, LOADING, MASTERDOWN, READONLY) or a read whose connection
 * broke is tried again, for up to the command timeout.
 */

#define MAX_HOPS 5

static struct dist__cfg rcfg;   /* the settings, once redis_setup ran */

static void redis_setup(void)
{
    if (opt.url) {
        struct dist__cfg tmp;
        char why[200];
        if (dist__parse_url(opt.url, &tmp, why, sizeof why) != 0)
            usage_error("--url: %s", why);
        if (dist_set_url(opt.url) != 0)
            die(EX_USAGE, "--url: %s", dist_last_error());
    }
    dist__cfg_get(&rcfg);
    if (rcfg.bad[0])
        die(EX_USAGE, "%s", rcfg.bad);
}

static int on_cluster(void)
{
    return rcfg.mode == DIST__MODE_CLUSTER;
}

/* A connection to one server. */
struct srv {
    redisContext *c;
    struct dist__addr a;
    char where[300];      /* "host:port", or "unix:PATH" */
    int asking;           /* made for an ASK redirection: each keyed command
                           * goes after ASKING, and the next call routes anew */
};

static void srv_where(char *buf, size_t len, const struct dist__addr *a)
{
    if (!a->port)
        snprintf(buf, len, "unix:%s", rcfg.path);
    else
        snprintf(buf, len, "%s:%d", a->host, a->port);
}

static void srv_close(struct srv *s)
{
    if (s->c)
        redisFree(s->c);
    s->c = NULL;
    s->asking = 0;
}

/* A hiredis context to a, set up (AUTH, SELECT).  Temporary, until the
 * tool talks through the library's links. */
static int connect_addr(const struct dist__addr *a, redisContext **out)
{
    struct timeval tv = { (time_t)(rcfg.timeout_ms / 1000),
                          (suseconds_t)(rcfg.timeout_ms % 1000) * 1000 };
    redisContext *c = a->port ? redisConnectWithTimeout(a->host, a->port, tv)
                              : redisConnectUnixWithTimeout(rcfg.path, tv);
    char w[300];
    redisReply *r = NULL;

    srv_where(w, sizeof w, a);
    if (!c || c->err) {
        dist__err(EIO, "cannot connect to Redis at %s: %s", w,
                  c ? c->errstr : "out of memory");
        redisFree(c);
        return EIO;
    }
    redisSetTimeout(c, tv);
    if (rcfg.pass[0])
        r = rcfg.user[0] ? redisCommand(c, "AUTH %s %s", rcfg.user, rcfg.pass)
                         : redisCommand(c, "AUTH %s", rcfg.pass);
    if (rcfg.pass[0] && (!r || r->type == REDIS_REPLY_ERROR)) {
        dist__err(EIO, "AUTH refused: %s", r ? r->str : c->errstr);
        freeReplyObject(r);
        redisFree(c);
        return EIO;
    }
    freeReplyObject(r);
    if (rcfg.db && rcfg.mode != DIST__MODE_CLUSTER)
        freeReplyObject(redisCommand(c, "SELECT %d", rcfg.db));
    *out = c;
    return 0;
}

/* Connects s to a.  0, or -1 with the reason in dist_last_error(). */
static int srv_connect(struct srv *s, const struct dist__addr *a)
{
    srv_close(s);
    s->a = *a;
    srv_where(s->where, sizeof s->where, a);
    if (connect_addr(a, &s->c) != 0) {
        dist__topo_stale();
        return -1;
    }
    return 0;
}

/* Connects s to the server of key (NULL: the master, or any master of a
 * cluster).  0, or -1 with the reason in dist_last_error(). */
static int srv_route(struct srv *s, const struct dist__buf *key)
{
    struct dist__addr a;

    srv_close(s);
    if (dist__route(&rcfg, key, &a) != 0)
        return -1;
    return srv_connect(s, &a);
}

/* Same, or exit 3 saying why. */
static void srv_open(struct srv *s, const struct dist__buf *key)
{
    memset(s, 0, sizeof *s);
    if (srv_route(s, key) != 0)
        die(EX_REDIS, "%s", dist_last_error());
}

/* Whether s still goes where a call for key should: after an ASK, or when
 * the map of the servers changed (a failover, a slot that moved), the
 * next call connects anew. */
static int srv_placed(struct srv *s, const struct dist__buf *key)
{
    struct dist__addr a;

    if (!s->c || s->asking)
        return 0;
    if (rcfg.mode == DIST__MODE_SINGLE || dist__route(&rcfg, key, &a) != 0)
        return 1;     /* a failed lookup: the call itself will tell */
    return a.port == s->a.port && strcmp(a.host, s->a.host) == 0;
}

/* Whether s can take a call for key now: connected where key's calls go,
 * and not closed by the server while it sat idle (a server restart, its
 * idle timeout), so that a call is not sent into a dead connection where
 * it could not be told whether it ran. */
static int srv_ready(struct srv *s, const struct dist__buf *key)
{
    struct pollfd p;

    if (!srv_placed(s, key))
        return 0;
    p.fd = s->c->fd;
    p.events = POLLIN | POLLRDHUP;
    p.revents = 0;
    return poll(&p, 1, 0) == 0;
}

static void __attribute__((noreturn)) srv_lost(struct srv *s)
{
    die(EX_REDIS, "lost the connection to Redis at %s: %s", s->where,
        s->c && s->c->errstr[0] ? s->c->errstr : "no reply");
}

static void append(struct srv *s, int argc, const char **argv,
                   const size_t *lens)
{
    if (redisAppendCommandArgv(s->c, argc, argv, lens) != REDIS_OK)
        srv_lost(s);
}

/* ASKING before a keyed command on a connection made for an ASK; returns
 * the number of replies that adds (0 or 1). */
static int append_asking(struct srv *s)
{
    const char *a[1] = { "ASKING" };

    if (!s->asking)
        return 0;
    append(s, 1, a, NULL);
    return 1;
}

/* The next reply, or NULL when the connection failed. */
static redisReply *try_reply(struct srv *s)
{
    void *r = NULL;

    if (redisGetReply(s->c, &r) != REDIS_OK || !r) {
        if (r)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

static redisReply *get_reply(struct srv *s)
{
    redisReply *r = try_reply(s);

    if (!r)
        srv_lost(s);
    return r;
}

static redisReply *command(struct srv *s, int argc, const char **argv,
                           const size_t *lens)
{
    append(s, argc, argv, lens);
    return get_reply(s);
}

/* What an error reply asks for. */
enum { RD_NONE, RD_MOVED, RD_ASK, RD_LATER, RD_STALE, RD_CONN };

struct redir {
    int kind;
    int slot;
    struct dist__addr to;     /* MOVED, ASK */
    char msg[300];            /* the reply, for a message */
};

/* Classifies an error reply r from s; rd->kind RD_NONE when it is none of
 * the above. */
static int redir_of(const struct srv *s, const redisReply *r, struct redir *rd)
{
    const char *p = r->str, *sp, *colon;
    long v;

    memset(rd, 0, sizeof *rd);
    snprintf(rd->msg, sizeof rd->msg, "%s", r->str ? r->str : "");
    if (r->type != REDIS_REPLY_ERROR || !p)
        return rd->kind = RD_NONE;
    if (strncmp(p, "TRYAGAIN", 8) == 0 || strncmp(p, "LOADING", 7) == 0 ||
        strncmp(p, "BUSY ", 5) == 0)
        return rd->kind = RD_LATER;
    if (strncmp(p, "CLUSTERDOWN", 11) == 0 || strncmp(p, "MASTERDOWN", 10) == 0 ||
        strncmp(p, "READONLY", 8) == 0)
        return rd->kind = RD_STALE;
    if (strncmp(p, "MOVED ", 6) == 0)
        rd->kind = RD_MOVED, p += 6;
    else if (strncmp(p, "ASK ", 4) == 0)
        rd->kind = RD_ASK, p += 4;
    else
        return rd->kind = RD_NONE;
    /* "<slot> <host>:<port>"; no host: the one asked */
    v = strtol(p, (char **)&sp, 10);
    colon = sp == p || *sp != ' ' ? NULL : strrchr(sp + 1, ':');
    if (v < 0 || v > 16383 || !colon ||
        (size_t)(colon - sp - 1) >= sizeof rd->to.host)
        return rd->kind = RD_NONE;
    if (colon == sp + 1)
        snprintf(rd->to.host, sizeof rd->to.host, "%s", s->a.host);
    else
        memcpy(rd->to.host, sp + 1, (size_t)(colon - sp - 1));
    rd->to.port = atoi(colon + 1);
    if (rd->to.port <= 0 || rd->to.port > 65535)
        return rd->kind = RD_NONE;
    rd->slot = (int)v;
    return rd->kind;
}

/* The retries one call may take. */
struct tries {
    int hops;
    uint64_t until;
    unsigned long backoff;
};

static void tries_init(struct tries *t)
{
    t->hops = 0;
    t->until = dist__now_ms() + rcfg.timeout_ms;
    t->backoff = 10;
}

/* Gets s ready for the next try of a call on key after rd: connects where
 * a redirection points, or waits a little and connects to key's server
 * anew.  0 with s connected, or -1 with why when it is time to give up. */
static int srv_follow(struct srv *s, const struct dist__buf *key,
                      const struct redir *rd, struct tries *t, char *why,
                      size_t whylen)
{
    if (rd->kind == RD_MOVED || rd->kind == RD_ASK) {
        char from[300];
        snprintf(from, sizeof from, "%s", s->where);
        if (++t->hops > MAX_HOPS) {
            snprintf(why, whylen, "more than %d redirections (the cluster is "
                     "being resharded); the last, from %s: %s", MAX_HOPS,
                     s->where, rd->msg);
            return -1;
        }
        if (rd->kind == RD_MOVED)
            dist__topo_moved(rd->slot, &rd->to);
        if (srv_connect(s, &rd->to) != 0) {
            snprintf(why, whylen, "%s (redirected there by %s)", dist_last_error(),
                     from);
            return -1;
        }
        s->asking = rd->kind == RD_ASK;
        return 0;
    }
    if (rd->kind == RD_NONE) {
        snprintf(why, whylen, "Redis at %s: %s", s->where, rd->msg);
        return -1;
    }
    for (;;) {
        if (dist__now_ms() >= t->until) {
            if (rd->kind == RD_CONN && !s->c)
                snprintf(why, whylen, "%s", dist_last_error());
            else if (rd->kind == RD_CONN)
                snprintf(why, whylen, "lost the connection to Redis at %s: %s",
                         s->where, rd->msg);
            else
                snprintf(why, whylen, "Redis at %s: %s", s->where, rd->msg);
            return -1;
        }
        if (rd->kind != RD_LATER) {
            /* the server may be gone or no longer the master: ask again */
            dist__topo_stale();
            srv_close(s);
        }
        /* a connection that broke is tried again at once, once */
        if (rd->kind != RD_CONN || t->backoff > 10)
            dist__sleep_ms(t->backoff);
        if (t->backoff < 200)
            t->backoff *= 2;
        if (s->c || srv_route(s, key) == 0)
            return 0;
    }
}

/* Runs one script on s (after ASKING when asking), EVAL when the server
 * lacks it.  The reply (an error too), or NULL when the connection failed:
 * then it may have run. */
static redisReply *eval_once(struct srv *s, int script, int nkeys,
                             const struct dist__buf *kv, int nkv)
{
    const struct dist__script *sc = &dist__scripts[script];
    const char **argv = xrealloc(NULL, sizeof *argv * (size_t)(nkv + 3));
    size_t *lens = xrealloc(NULL, sizeof *lens * (size_t)(nkv + 3));
    redisReply *r = NULL;
    char nk[16];
    int i, pass, skip;

    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[2] = nk;
    lens[2] = strlen(nk);
    for (i = 0; i < nkv; i++) {
        argv[3 + i] = kv[i].p;
        lens[3 + i] = kv[i].len;
    }
    for (pass = 0; pass < 2; pass++) {
        argv[0] = pass ? "EVAL" : "EVALSHA";
        lens[0] = strlen(argv[0]);
        argv[1] = pass ? sc->body : sc->sha;
        lens[1] = pass ? sc->len : strlen(sc->sha);
        skip = append_asking(s);
        if (redisAppendCommandArgv(s->c, nkv + 3, argv, lens) != REDIS_OK)
            break;
        while (skip-- > 0 && (r = try_reply(s)) != NULL) {
            freeReplyObject(r);
            r = NULL;
        }
        if (s->c->err || !(r = try_reply(s)))
            break;
        if (pass == 0 && r->type == REDIS_REPLY_ERROR &&
            strncmp(r->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(r);
            r = NULL;
            continue;
        }
        break;
    }
    free(argv);
    free(lens);
    return r;
}

/* A script on the server of kv[0], following redirections (a server that
 * redirects has run nothing).  Its reply (an error reply that is no
 * redirection too), or NULL with why: either nothing ran or, when the
 * connection broke, it may have. */
static redisReply *srv_eval(struct srv *s, int script, int nkeys,
                            const struct dist__buf *kv, int nkv, char *why,
                            size_t whylen)
{
    struct tries t;
    struct redir rd;
    redisReply *r;

    tries_init(&t);
    if (!srv_ready(s, &kv[0]) && srv_route(s, &kv[0]) != 0) {
        snprintf(why, whylen, "%s", dist_last_error());
        return NULL;
    }
    for (;;) {
        if (!(r = eval_once(s, script, nkeys, kv, nkv))) {
            snprintf(why, whylen, "lost the connection to Redis at %s during "
                     "%s (it may or may not have run): %s", s->where,
                     dist__scripts[script].name,
                     s->c->errstr[0] ? s->c->errstr : "no reply");
            srv_close(s);
            return NULL;
        }
        if (r->type != REDIS_REPLY_ERROR || redir_of(s, r, &rd) == RD_NONE)
            break;
        freeReplyObject(r);
        if (srv_follow(s, &kv[0], &rd, &t, why, whylen) != 0)
            return NULL;
    }
    if (s->asking)
        srv_close(s);        /* the next call goes where the map says */
    return r;
}

/* ------------------------------------------------------------------------ */
/* A lock's state                                                           */
/* ------------------------------------------------------------------------ */

enum { KIND_NONE, KIND_MUTEX, KIND_FAIR, KIND_RWLOCK, KIND_UNKNOWN };
enum { ST_FREE, ST_HELD, ST_READ, ST_WRITE, ST_UNKNOWN };

static const char *const kind_name[] = { NULL, "mutex", "fair mutex", "rwlock", "unknown" };
static const char *const state_name[] = { "free", "held", "read-held", "write-held", "unknown" };

struct holder {
    char *owner;          /* "<client id>:<thread n>" */
    size_t olen;
    long long holds;      /* mutex */
    long long reads;      /* rwlock */
    long long writes;
    long long lease_ms;   /* rwlock reader: longest read-hold key; -3 none */
};

struct waiter {
    char *owner;
    size_t olen;
    long long window_ms;  /* deadline - server now; LLONG_MIN if unknown */
};

struct snap {
    struct dist__names *names;
    char type[32];        /* Redis TYPE of N */
    int kind, state;
    int lockish;          /* every field looks like a distlock/Redisson owner */
    int ownerish;         /* the same, loosely: "<something>:<digits>" */
    struct holder *h;
    size_t nh;
    long long pttl;
    int has_token;
    char token[32];
    struct waiter *q;     /* fair queue, head first */
    size_t nq;
    int has_timeouts;     /* the fair lock's deadline ZSET exists */
    struct waiter *w;     /* waiting writers, first deadline first */
    size_t nw;
    long long now_ms;     /* Redis server clock */
    uint64_t taken_ms;    /* our monotonic clock when it was read */
};

static void snap_free(struct snap *s)
{
    size_t i;

    for (i = 0; i < s->nh; i++)
        free(s->h[i].owner);
    for (i = 0; i < s->nq; i++)
        free(s->q[i].owner);
    for (i = 0; i < s->nw; i++)
        free(s->w[i].owner);
    free(s->h);
    free(s->q);
    free(s->w);
    dist__names_unref(s->names);
    memset(s, 0, sizeof *s);
}

static struct dist__names *names_of(const char *name, size_t len)
{
    struct dist__names *n = dist__names_new(name, len);

    if (!n)
        die(EX_REDIS, "out of memory");
    return n;
}

/* On a cluster the keys of a lock must share a slot (a script or a MULTI
 * is refused otherwise): they do unless N has a '{' that opens no tag or a
 * '}' without a '{'. */
static int names_fit(const struct dist__names *n)
{
    return !on_cluster() || n->slot >= 0;
}

static struct dist__names *lock_names(const char *name, size_t len)
{
    struct dist__names *n = names_of(name, len);

    if (!names_fit(n))
        die(EX_USAGE, "'%s' cannot be a lock on a Redis Cluster: its keys "
            "would fall in different slots (it has a '{' that opens no "
            "{tag}, or a '}' without a '{')", name);
    return n;
}

#define B(buf) (buf).p
#define L(buf) (buf).len

/* MULTI; the reads; EXEC: a consistent picture of N in one round trip.
 * Returns the number of replies to read before MULTI's. */
static int snap_append(struct srv *c, const struct dist__names *n)
{
    const char *a[5];
    size_t l[5];
    int pre = append_asking(c);

#define CMD1(x) (a[0] = x, l[0] = strlen(x))
    CMD1("MULTI");
    append(c, 1, a, l);
    CMD1("TYPE"); a[1] = B(n->name); l[1] = L(n->name);
    append(c, 2, a, l);
    CMD1("HGETALL");
    append(c, 2, a, l);
    CMD1("PTTL");
    append(c, 2, a, l);
    CMD1("GET"); a[1] = B(n->token); l[1] = L(n->token);
    append(c, 2, a, l);
    CMD1("LRANGE"); a[1] = B(n->queue); l[1] = L(n->queue);
    a[2] = "0"; l[2] = 1; a[3] = "-1"; l[3] = 2;
    append(c, 4, a, l);
    CMD1("ZRANGE"); a[1] = B(n->timeout); l[1] = L(n->timeout);
    a[4] = "WITHSCORES"; l[4] = 10;
    append(c, 5, a, l);
    a[1] = B(n->writers); l[1] = L(n->writers);
    append(c, 5, a, l);
    CMD1("TIME");
    append(c, 1, a, l);
    CMD1("EXEC");
    append(c, 1, a, l);
#undef CMD1
    return pre;
}

static int is_digits(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > 19)
        return 0;
    for (i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

static int parse_ll(const char *s, size_t n, long long *v)
{
    char tmp[32];
    char *end;

    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    *v = strtoll(tmp, &end, 10);
    return errno || *end ? -1 : 0;
}

/* "<8>-<4>-<4>-<4>-<12>" hex: the client ids of distlock and Redisson. */
static int is_uuid(const char *s, size_t n)
{
    size_t i;

    if (n != 36)
        return 0;
    for (i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return 0;
        } else if (!isxdigit((unsigned char)s[i])) {
            return 0;
        }
    }
    return 1;
}

/* Client id and thread number of an owner: split at the last ':'. */
static void owner_split(const char *o, size_t n, size_t *clen,
                        const char **thr, size_t *tlen)
{
    const char *colon = NULL;
    size_t i;

    for (i = n; i > 0; i--)
        if (o[i - 1] == ':') {
            colon = o + i - 1;
            break;
        }
    if (!colon) {
        *clen = n;
        *thr = o + n;
        *tlen = 0;
        return;
    }
    *clen = (size_t)(colon - o);
    *thr = colon + 1;
    *tlen = n - *clen - 1;
}

/* "<uuid>:<digits>", the strict form `list` looks for. */
static int owner_strict(const char *o, size_t n)
{
    size_t clen, tlen;
    const char *t;

    owner_split(o, n, &clen, &t, &tlen);
    return is_uuid(o, clen) && is_digits(t, tlen);
}

static int owner_loose(const char *o, size_t n)
{
    size_t clen, tlen;
    const char *t;

    owner_split(o, n, &clen, &t, &tlen);
    return clen > 0 && is_digits(t, tlen);
}

static struct holder *holder_get(struct snap *s, const char *o, size_t n)
{
    size_t i;
    struct holder *h;

    for (i = 0; i < s->nh; i++)
        if (s->h[i].olen == n && memcmp(s->h[i].owner, o, n) == 0)
            return &s->h[i];
    s->h = xrealloc(s->h, (s->nh + 1) * sizeof *s->h);
    h = &s->h[s->nh++];
    memset(h, 0, sizeof *h);
    h->owner = xmemdup(o, n);
    h->olen = n;
    h->lease_ms = -3;
    return h;
}

static int holder_cmp(const void *a, const void *b)
{
    const struct holder *x = a, *y = b;
    size_t n = x->olen < y->olen ? x->olen : y->olen;
    int c;

    if ((x->writes > 0) != (y->writes > 0))
        return x->writes > 0 ? -1 : 1;
    c = memcmp(x->owner, y->owner, n);
    return c ? c : (x->olen > y->olen) - (x->olen < y->olen);
}

static void waiters_from(struct waiter **out, size_t *nout,
                         const redisReply *zr, const redisReply *list,
                         long long now)
{
    size_t i, j;

    if (list && list->type == REDIS_REPLY_ARRAY) {
        /* the fair queue: order from the LIST, windows from the ZSET */
        *out = xrealloc(NULL, (list->elements + 1) * sizeof **out);
        for (i = 0; i < list->elements; i++) {
            const redisReply *e = list->element[i];
            struct waiter *w = &(*out)[(*nout)++];
            w->owner = xmemdup(e->str ? e->str : "", e->str ? e->len : 0);
            w->olen = e->str ? e->len : 0;
            w->window_ms = LLONG_MIN;
            if (zr && zr->type == REDIS_REPLY_ARRAY)
                for (j = 0; j + 1 < zr->elements; j += 2) {
                    const redisReply *m = zr->element[j], *sc = zr->element[j + 1];
                    double d;
                    if (m->len == w->olen && memcmp(m->str, w->owner, w->olen) == 0 &&
                        sc->str && (d = strtod(sc->str, NULL), 1))
                        w->window_ms = (long long)d - now;
                }
        }
        return;
    }
    if (!zr || zr->type != REDIS_REPLY_ARRAY)
        return;
    *out = xrealloc(NULL, (zr->elements / 2 + 1) * sizeof **out);
    for (j = 0; j + 1 < zr->elements; j += 2) {
        const redisReply *m = zr->element[j], *sc = zr->element[j + 1];
        struct waiter *w = &(*out)[(*nout)++];
        w->owner = xmemdup(m->str ? m->str : "", m->str ? m->len : 0);
        w->olen = m->str ? m->len : 0;
        w->window_ms = sc->str ? (long long)strtod(sc->str, NULL) - now : LLONG_MIN;
    }
}

/* Reads what snap_append asked for (pre replies first) into s, which holds
 * the names.  0, or 1 with rd when the server redirected the reads or
 * asked to try later, or the connection broke (RD_CONN; s closed): then
 * nothing is filled in. */
static int snap_read(struct srv *c, int pre, struct snap *s, struct redir *rd)
{
    redisReply *r, *e[8], *x;
    size_t i;
    int has_mode = 0;

    rd->kind = RD_NONE;
    for (i = 0; i < (size_t)pre + 9; i++) {   /* +OK, then +QUEUED x 8 */
        if (!(r = try_reply(c)))
            goto lost;
        /* on a cluster the first queued read that is redirected says
         * where; EXEC then refuses them all */
        if (r->type == REDIS_REPLY_ERROR && i >= (size_t)pre &&
            rd->kind == RD_NONE && redir_of(c, r, rd) == RD_NONE)
            die(EX_REDIS, "Redis at %s refused a read: %s", c->where, r->str);
        freeReplyObject(r);
    }
    if (!(r = try_reply(c)))
        goto lost;
    if (rd->kind == RD_NONE && r->type == REDIS_REPLY_ERROR)
        redir_of(c, r, rd);
    if (rd->kind != RD_NONE) {
        freeReplyObject(r);
        return 1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 8)
        die(EX_REDIS, "Redis at %s: unexpected answer to EXEC%s%s", c->where,
            r->type == REDIS_REPLY_ERROR ? ": " : "",
            r->type == REDIS_REPLY_ERROR ? r->str : "");
    for (i = 0; i < 8; i++)
        e[i] = r->element[i];

    x = e[7];
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2)
        s->now_ms = atoll(x->element[0]->str) * 1000 +
                    atoll(x->element[1]->str) / 1000;
    snprintf(s->type, sizeof s->type, "%s",
             e[0]->type == REDIS_REPLY_STATUS ? e[0]->str : "?");
    s->pttl = e[2]->type == REDIS_REPLY_INTEGER ? e[2]->integer : -2;
    if (e[3]->type == REDIS_REPLY_STRING && e[3]->len < sizeof s->token) {
        s->has_token = 1;
        memcpy(s->token, e[3]->str, e[3]->len);
        s->token[e[3]->len] = 0;
    }
    s->has_timeouts = e[5]->type == REDIS_REPLY_ARRAY && e[5]->elements > 0;
    waiters_from(&s->q, &s->nq, e[5], e[4], s->now_ms);
    waiters_from(&s->w, &s->nw, e[6], NULL, s->now_ms);

    s->lockish = s->ownerish = 0;
    if (strcmp(s->type, "hash") == 0 && e[1]->type == REDIS_REPLY_ARRAY &&
        e[1]->elements >= 2) {
        s->lockish = s->ownerish = 1;
        for (i = 0; i + 1 < e[1]->elements; i += 2) {
            const redisReply *f = e[1]->element[i], *v = e[1]->element[i + 1];
            if (f->len == 4 && memcmp(f->str, "mode", 4) == 0) {
                has_mode = 1;
                if (!(v->len == 4 && memcmp(v->str, "read", 4) == 0) &&
                    !(v->len == 5 && memcmp(v->str, "write", 5) == 0))
                    s->lockish = s->ownerish = 0;
            }
        }
        for (i = 0; i + 1 < e[1]->elements; i += 2) {
            const redisReply *f = e[1]->element[i], *v = e[1]->element[i + 1];
            size_t olen = f->len;
            int write = 0;
            long long count;
            struct holder *h;

            if (f->len == 4 && memcmp(f->str, "mode", 4) == 0)
                continue;
            if (has_mode && olen > 6 && memcmp(f->str + olen - 6, ":write", 6) == 0) {
                write = 1;
                olen -= 6;
            }
            if (parse_ll(v->str, v->len, &count) != 0 || count < 0) {
                s->lockish = s->ownerish = 0;
                count = 0;
            }
            if (!owner_strict(f->str, olen))
                s->lockish = 0;
            if (!owner_loose(f->str, olen))
                s->ownerish = 0;
            h = holder_get(s, f->str, olen);
            if (!has_mode)
                h->holds = count;
            else if (write)
                h->writes = count;
            else
                h->reads = count;
        }
        if (s->nh > 1)
            qsort(s->h, s->nh, sizeof *s->h, holder_cmp);
    }

    if (strcmp(s->type, "none") == 0) {
        s->state = ST_FREE;
        if (s->nq > 0 || s->has_timeouts)
            s->kind = KIND_FAIR;
        else if (s->nw > 0)
            s->kind = KIND_RWLOCK;
        else
            s->kind = KIND_NONE;
    } else if (strcmp(s->type, "hash") == 0 && s->ownerish) {
        if (has_mode) {
            size_t j;
            s->kind = KIND_RWLOCK;
            s->state = ST_READ;
            for (j = 0; j < s->nh; j++)
                if (s->h[j].writes > 0)
                    s->state = ST_WRITE;
        } else {
            s->kind = s->nq > 0 || s->has_timeouts ? KIND_FAIR : KIND_MUTEX;
            s->state = ST_HELD;
        }
    } else {
        s->kind = KIND_UNKNOWN;
        s->state = ST_UNKNOWN;
    }
    freeReplyObject(r);
    return 0;

lost:
    memset(rd, 0, sizeof *rd);
    rd->kind = RD_CONN;
    snprintf(rd->msg, sizeof rd->msg, "%s",
             c->c->errstr[0] ? c->c->errstr : "no reply");
    srv_close(c);
    return 1;
}

/* The read-hold timeout key {N}:<owner>:rwlock_timeout:<k>. */
static char *read_key(const struct dist__names *n, const struct holder *h,
                      long long k, size_t *len)
{
    struct sb suf = { 0 };
    char *key;

    sb_addn(&suf, ":", 1);
    sb_addn(&suf, h->owner, h->olen);
    sb_printf(&suf, ":rwlock_timeout:%lld", k);
    key = dist__names_derive(n, "", suf.p, len);
    sb_free(&suf);
    if (!key)
        die(EX_REDIS, "out of memory");
    return key;
}

/* Each reader's lease: the longest PTTL of its read-hold keys. */
static void snap_read_leases(struct srv *c, struct snap *s)
{
    size_t i;
    long long k;

    if (s->kind != KIND_RWLOCK)
        return;
    for (i = 0; i < s->nh; i++)
        for (k = 1; k <= s->h[i].reads && k <= READ_KEYS_MAX; k++) {
            size_t len;
            char *key = read_key(s->names, &s->h[i], k, &len);
            const char *a[2] = { "PTTL", key };
            size_t l[2] = { 4, len };
            append_asking(c);
            append(c, 2, a, l);
            free(key);
        }
    for (i = 0; i < s->nh; i++)
        for (k = 1; k <= s->h[i].reads && k <= READ_KEYS_MAX; k++) {
            redisReply *r;
            if (c->asking)
                freeReplyObject(get_reply(c));
            r = get_reply(c);
            long long *lease = &s->h[i].lease_ms;   /* -3: no key found */
            if (r->type == REDIS_REPLY_INTEGER) {
                if (r->integer == -1)
                    *lease = -1;                    /* no expiry: longest */
                else if (r->integer >= 0 && *lease != -1 && r->integer > *lease)
                    *lease = r->integer;
            }
            freeReplyObject(r);
        }
}

/* A picture of lock N, read on the server that owns it (c is moved there
 * as needed); exit 3 when it cannot be read. */
static void snap_take(struct srv *c, const char *name, size_t len,
                      struct snap *s)
{
    struct dist__names *n = lock_names(name, len);
    struct tries t;
    struct redir rd;
    char why[700];

    tries_init(&t);
    if (!srv_ready(c, &n->name) && srv_route(c, &n->name) != 0)
        die(EX_REDIS, "%s", dist_last_error());
    for (;;) {
        int pre;
        memset(s, 0, sizeof *s);
        s->names = n;
        pre = snap_append(c, n);
        if (snap_read(c, pre, s, &rd) == 0)
            break;
        if (srv_follow(c, &n->name, &rd, &t, why, sizeof why) != 0)
            die(EX_REDIS, "cannot read '%s': %s", name, why);
    }
    s->taken_ms = dist__now_ms();
    snap_read_leases(c, s);
    if (c->asking)
        srv_close(c);        /* the next call goes where the map says */
}

/* ------------------------------------------------------------------------ */
/* Printing a state                                                         */
/* ------------------------------------------------------------------------ */

static void json_owner(struct sb *b, const char *o, size_t n)
{
    size_t clen, tlen;
    const char *t;

    owner_split(o, n, &clen, &t, &tlen);
    sb_adds(b, "\"owner\":");
    sb_json(b, o, n);
    sb_adds(b, ",\"client\":");
    sb_json(b, o, clen);
    sb_adds(b, ",\"thread\":");
    if (is_digits(t, tlen))
        sb_addn(b, t, tlen);
    else if (tlen)
        sb_json(b, t, tlen);
    else
        sb_adds(b, "null");
}

static void human_owner(struct sb *b, const char *o, size_t n)
{
    size_t clen, tlen;
    const char *t;

    owner_split(o, n, &clen, &t, &tlen);
    if (!tlen) {
        sb_human(b, o, n);
        return;
    }
    sb_adds(b, "client ");
    sb_human(b, o, clen);
    sb_adds(b, ", thread ");
    sb_human(b, t, tlen);
}

static void json_lease(struct sb *b, const char *key, long long pttl)
{
    sb_printf(b, ",\"%s\":", key);
    if (pttl >= 0)
        sb_printf(b, "%lld", pttl);
    else
        sb_adds(b, "null");
}

static void json_waiters(struct sb *b, const char *key, const struct waiter *w,
                         size_t n)
{
    size_t i;

    sb_printf(b, ",\"%s\":[", key);
    for (i = 0; i < n; i++) {
        sb_adds(b, i ? ",{" : "{");
        json_owner(b, w[i].owner, w[i].olen);
        if (w[i].window_ms != LLONG_MIN)
            sb_printf(b, ",\"window_ms\":%lld", w[i].window_ms);
        else
            sb_adds(b, ",\"window_ms\":null");
        sb_adds(b, "}");
    }
    sb_adds(b, "]");
}

static void json_holders(struct sb *b, const struct snap *s)
{
    size_t i;

    sb_adds(b, ",\"holders\":[");
    for (i = 0; i < s->nh; i++) {
        const struct holder *h = &s->h[i];
        sb_adds(b, i ? ",{" : "{");
        json_owner(b, h->owner, h->olen);
        if (s->kind == KIND_RWLOCK) {
            sb_printf(b, ",\"reads\":%lld,\"writes\":%lld", h->reads, h->writes);
            if (h->lease_ms >= -1)
                json_lease(b, "read_lease_ms", h->lease_ms);
        } else {
            sb_printf(b, ",\"holds\":%lld", h->holds);
        }
        sb_adds(b, "}");
    }
    sb_adds(b, "]");
}

static void json_head(struct sb *b, const struct snap *s)
{
    sb_adds(b, "\"name\":");
    sb_json(b, B(s->names->name), L(s->names->name));
    sb_adds(b, ",\"kind\":");
    if (kind_name[s->kind])
        sb_jsonz(b, kind_name[s->kind]);
    else
        sb_adds(b, "null");
    sb_adds(b, ",\"state\":");
    sb_jsonz(b, state_name[s->state]);
    if (s->kind == KIND_UNKNOWN) {
        sb_adds(b, ",\"type\":");
        sb_jsonz(b, s->type);
    }
}

static void status_json(const struct snap *s)
{
    struct sb b = { 0 };

    sb_adds(&b, "{");
    json_head(&b, s);
    if (s->kind != KIND_UNKNOWN) {
        json_holders(&b, s);
        json_lease(&b, "lease_ms", s->state == ST_FREE ? -2 : s->pttl);
        if (s->state != ST_FREE && s->pttl == -1)
            sb_adds(&b, ",\"no_expiry\":true");
        json_waiters(&b, "queue", s->q, s->nq);
        json_waiters(&b, "waiting_writers", s->w, s->nw);
    }
    sb_adds(&b, ",\"token\":");
    if (s->has_token && is_digits(s->token, strlen(s->token)))
        sb_adds(&b, s->token);
    else
        sb_adds(&b, "null");
    sb_adds(&b, "}");
    sb_flush_line(&b);
    sb_free(&b);
}

static void human_window(struct sb *b, long long ms)
{
    if (ms == LLONG_MIN)
        sb_adds(b, "no deadline");
    else if (ms < 0)
        sb_adds(b, "window over (dropped at the next call)");
    else {
        sb_adds(b, "window ");
        sb_secs(b, ms);
    }
}

static void human_lease(struct sb *b, long long pttl)
{
    if (pttl == -1)
        sb_adds(b, "none (the key has no expiry)");
    else {
        sb_secs(b, pttl);
        sb_adds(b, " left");
    }
}

static void status_human(const struct snap *s)
{
    struct sb b = { 0 };
    size_t i;

    sb_adds(&b, "name:     ");
    sb_human(&b, B(s->names->name), L(s->names->name));
    sb_flush_line(&b);
    if (s->kind == KIND_UNKNOWN) {
        sb_printf(&b, "kind:     unknown (not a lock: a Redis %s)", s->type);
        sb_flush_line(&b);
    } else {
        sb_printf(&b, "kind:     %s", kind_name[s->kind] ? kind_name[s->kind]
                                     : "- (nothing in Redis)");
        sb_flush_line(&b);
        sb_printf(&b, "state:    %s", state_name[s->state]);
        sb_flush_line(&b);
    }
    for (i = 0; s->kind != KIND_UNKNOWN && i < s->nh; i++) {
        const struct holder *h = &s->h[i];
        if (s->kind != KIND_RWLOCK) {
            sb_adds(&b, "holder:   ");
            human_owner(&b, h->owner, h->olen);
            sb_printf(&b, ", %lld hold%s", h->holds, h->holds == 1 ? "" : "s");
        } else {
            sb_adds(&b, h->writes > 0 ? "writer:   " : "reader:   ");
            human_owner(&b, h->owner, h->olen);
            if (h->writes > 0)
                sb_printf(&b, ", %lld write hold%s", h->writes,
                          h->writes == 1 ? "" : "s");
            if (h->reads > 0)
                sb_printf(&b, ", %lld read hold%s", h->reads,
                          h->reads == 1 ? "" : "s");
            if (h->lease_ms >= 0) {
                sb_adds(&b, " (read lease ");
                sb_secs(&b, h->lease_ms);
                sb_adds(&b, ")");
            }
        }
        sb_flush_line(&b);
    }
    if (s->kind != KIND_UNKNOWN && s->state != ST_FREE) {
        sb_adds(&b, "lease:    ");
        human_lease(&b, s->pttl);
        sb_flush_line(&b);
    }
    for (i = 0; i < s->nq; i++) {
        sb_adds(&b, i ? "          " : "queue:    ");
        sb_printf(&b, "%zu. ", i + 1);
        human_owner(&b, s->q[i].owner, s->q[i].olen);
        sb_adds(&b, ", ");
        human_window(&b, s->q[i].window_ms);
        sb_flush_line(&b);
    }
    for (i = 0; i < s->nw; i++) {
        sb_adds(&b, "waiting writer: ");
        human_owner(&b, s->w[i].owner, s->w[i].olen);
        sb_adds(&b, ", ");
        human_window(&b, s->w[i].window_ms);
        sb_flush_line(&b);
    }
    if (s->has_token) {
        sb_adds(&b, "token:    ");
        sb_human(&b, s->token, strlen(s->token));
        sb_adds(&b, " (last fencing token issued)");
        sb_flush_line(&b);
    }
    sb_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

static const char usage_main[] =
"Usage: distlock [--url URL] [--json] COMMAND [ARGS]\n"
"See, wait for and force distlock (and Redisson) locks in Redis.\n"
"\n"
"Commands:\n"
"  status NAME                   kind, state, holders, lease, queue, token\n"
"  list [PATTERN]                the locks that exist now (SCAN MATCH PATTERN)\n"
"  lock NAME [OPTIONS] -- CMD... run CMD while holding the lock\n"
"  unlock --force [--yes] NAME   remove a lock whatever its holder\n"
"  watch NAME                    print each change until interrupted\n"
"  help [COMMAND]                this text, or a command's\n"
"\n"
"Options (before or after the command):\n"
"  --url URL    Redis to use (default: $DISTLOCK_URL, else redis://127.0.0.1:6379)\n"
"               redis://[user:password@]host[:port][/db], unix:///path[?db=N],\n"
"               redis-sentinel://host:port[,host:port...]/MASTER[?db=N],\n"
"               redis-cluster://host:port[,host:port...]\n"
"               (each command goes to the master that holds the lock)\n"
"  --json       one JSON object per line instead of text\n"
"  -h, --help   help; 'distlock COMMAND --help' for a command\n"
"  --version    the version\n"
"\n"
"Exit status: 0 done, 1 lock busy / timed out / declined, 2 usage error,\n"
"3 Redis error; 'lock' exits with the command's status.\n";

static const char usage_status[] =
"Usage: distlock status NAME\n"
"Show lock NAME: its kind (mutex, fair mutex, rwlock, or unknown when the\n"
"key is something else), its state (free, held, read-held, write-held),\n"
"each holder (client id, thread number, hold counts), the remaining lease,\n"
"a fair mutex's queue in order with each waiter's remaining window, the\n"
"writers waiting on a writer-preferring rwlock, and the last fencing token.\n"
"Reads only; one MULTI/EXEC, so the picture is consistent.\n";

static const char usage_list[] =
"Usage: distlock list [PATTERN]\n"
"List the locks that exist now, one line each: name, kind, state, lease,\n"
"number of holders and of waiters.  PATTERN is a Redis glob (default '*')\n"
"matched against lock names.  On a Redis Cluster it scans every master and\n"
"merges what they hold.  Uses SCAN, never KEYS; a key counts as a lock\n"
"when it is a hash whose fields are owners ('<uuid>:<thread>', ':write'\n"
"suffixes and a 'mode' field for an rwlock).  A free lock has no key, so it\n"
"is not listed.\n";

static const char usage_lock[] =
"Usage: distlock lock NAME [OPTIONS] [--] COMMAND [ARGS...]\n"
"Take lock NAME, run COMMAND while holding it, release it when COMMAND ends.\n"
"The lease is renewed while COMMAND runs (DISTLOCK_WATCHDOG_MS, 30 s); if\n"
"distlock itself is killed with SIGKILL, the lock frees itself within the\n"
"lease.  COMMAND gets the fencing token in DISTLOCK_TOKEN (not for --read).\n"
"\n"
"  --fair          a fair mutex: waiters take it in the order they came\n"
"  --read          a read lock of the rwlock NAME (shared with readers)\n"
"  --write         the write lock of the rwlock NAME\n"
"  --prefer-writer with --write: while it waits, new readers wait too\n"
"  --timeout S     give up after S seconds (decimals allowed; 0: try once)\n"
"  -v, --verbose   say on stderr when the lock is taken and released\n"
"\n"
"Signals: SIGINT, SIGTERM and SIGHUP sent to distlock are passed on to\n"
"COMMAND (which runs in distlock's process group, so that it keeps the\n"
"terminal; a Ctrl-C typed there reaches both and is not sent twice); distlock\n"
"waits for COMMAND, releases the lock and exits with COMMAND's status.\n"
"While still waiting for the lock, such a signal makes distlock leave the\n"
"queue and exit with 128+signal.\n"
"\n"
"Exit status: COMMAND's status (128+N if a signal N killed it), 1 when the\n"
"lock could not be taken in time, 2 usage error, 3 Redis error, 126/127\n"
"when COMMAND cannot be run.\n";

static const char usage_unlock[] =
"Usage: distlock unlock --force [--yes] NAME\n"
"Remove lock NAME whatever its holders and wake its waiters (a fair lock's\n"
"head, an rwlock's readers and writers).  The holders are not told: their\n"
"watchdog finds the hold gone and reports it lost.  Asks for confirmation\n"
"when stdin is a terminal; --yes (-y) skips it, and without a terminal it\n"
"is required.\n";

static const char usage_watch[] =
"Usage: distlock watch [--interval MS] NAME\n"
"Print one line per change of lock NAME until interrupted: acquired,\n"
"released, expired (the key vanished without a release message), queued,\n"
"left queue, and waiting writers.  Listens on the lock's release channels\n"
"(on a Redis Cluster with SSUBSCRIBE, on the master of the lock's slot,\n"
"followed when the slot moves) and reads the state every MS milliseconds\n"
"(default 100); changes nothing, and needs no keyspace notifications.\n";

static const struct {
    const char *name;
    const char *usage;
} cmds[] = {
    { "status", usage_status }, { "list", usage_list }, { "lock", usage_lock },
    { "unlock", usage_unlock }, { "watch", usage_watch },
};

static const char *usage_of(const char *cmd)
{
    size_t i;

    for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmds[i].name, cmd) == 0)
            return cmds[i].usage;
    return NULL;
}

/* Options every command takes.  Returns 1 when argv[*i] was one (and moves
 * *i past its value), 0 otherwise. */
static int common_opt(int argc, char **argv, int *i)
{
    const char *a = argv[*i];

    if (strcmp(a, "--json") == 0) {
        opt.json = 1;
        return 1;
    }
    if (strcmp(a, "--url") == 0) {
        if (*i + 1 >= argc)
            usage_error("--url needs a value");
        opt.url = argv[++*i];
        return 1;
    }
    if (strncmp(a, "--url=", 6) == 0) {
        opt.url = a + 6;
        return 1;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        fputs(cur_cmd ? usage_of(cur_cmd) : usage_main, stdout);
        exit(0);
    }
    return 0;
}

/* A value: "--opt V" or "--opt=V". */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);

    if (strcmp(argv[*i], name) == 0) {
        if (*i + 1 >= argc)
            usage_error("%s needs a value", name);
        return argv[++*i];
    }
    if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
        return argv[*i] + n + 1;
    return NULL;
}

static void check_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0)
        usage_error("the lock name is empty");
    if (n > DIST_NAME_MAX)
        usage_error("the lock name is longer than %d bytes", DIST_NAME_MAX);
}

/* Parses "status NAME"-like argument lists: options and one operand. */
static const char *one_name(int argc, char **argv)
{
    const char *name = NULL;
    int i, dashdash = 0;

    for (i = 0; i < argc; i++) {
        if (!dashdash && strcmp(argv[i], "--") == 0) {
            dashdash = 1;
            continue;
        }
        if (!dashdash && argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
            continue;
        }
        if (name)
            usage_error("unexpected argument '%s'", argv[i]);
        name = argv[i];
    }
    if (!name)
        usage_error("missing the lock NAME");
    check_name(name);
    return name;
}

/* ------------------------------------------------------------------------ */
/* status                                                                   */
/* ------------------------------------------------------------------------ */

static int cmd_status(int argc, char **argv)
{
    const char *name = one_name(argc, argv);
    struct srv c = { 0 };
    struct snap s;

    redis_setup();
    snap_take(&c, name, strlen(name), &s);
    if (opt.json)
        status_json(&s);
    else
        status_human(&s);
    snap_free(&s);
    srv_close(&c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* list                                                                     */
/* ------------------------------------------------------------------------ */

struct key {
    char *p;
    size_t n;
};

static int key_cmp(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);

    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Names distlock and Redisson derive from a lock: never locks themselves. */
static int derived_key(const char *k, size_t n)
{
    static const char *const prefix[] = {
        "redisson_lock_token:", "redisson_lock_queue:", "redisson_lock_timeout:",
        "redisson_lock__channel:", "redisson_rwlock:", "distlock_rwlock_writers:",
        "distlock_rwlock_readers:",
    };
    size_t i, pl;

    for (i = 0; i < sizeof prefix / sizeof prefix[0]; i++) {
        pl = strlen(prefix[i]);
        if (n >= pl && memcmp(k, prefix[i], pl) == 0)
            return 1;
    }
    return memmem(k, n, ":rwlock_timeout:", 16) != NULL;
}

static void scan_keys(struct srv *c, const char *pattern, struct key **keys,
                      size_t *nkeys)
{
    char cursor[32] = "0";
    int with_type = 1;

    do {
        const char *a[8] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "1000",
                             "TYPE", "hash" };
        redisReply *r = command(c, with_type ? 8 : 6, a, NULL);
        size_t i;

        if (r->type == REDIS_REPLY_ERROR && with_type) {
            /* a Redis before 6.0: no TYPE filter; the snapshot checks */
            freeReplyObject(r);
            with_type = 0;
            continue;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY)
            die(EX_REDIS, "Redis at %s: unexpected answer to SCAN%s%s", c->where,
                r->type == REDIS_REPLY_ERROR ? ": " : "",
                r->type == REDIS_REPLY_ERROR ? r->str : "");
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (i = 0; i < r->element[1]->elements; i++) {
            const redisReply *k = r->element[1]->element[i];
            if (derived_key(k->str, k->len))
                continue;
            *keys = xrealloc(*keys, (*nkeys + 1) * sizeof **keys);
            (*keys)[*nkeys].p = xmemdup(k->str, k->len);
            (*keys)[(*nkeys)++].n = k->len;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

static int row_cmp(const void *a, const void *b)
{
    const struct snap *x = a, *y = b;
    struct key kx = { (char *)B(x->names->name), L(x->names->name) };
    struct key ky = { (char *)B(y->names->name), L(y->names->name) };

    return key_cmp(&kx, &ky);
}

/* Adds s to rows when it is a lock; frees it otherwise. */
static void list_keep(struct snap *s, struct snap **rows, size_t *nrows)
{
    if (!s->lockish || s->kind == KIND_UNKNOWN || s->kind == KIND_NONE) {
        snap_free(s);
        return;
    }
    *rows = xrealloc(*rows, (*nrows + 1) * sizeof **rows);
    (*rows)[(*nrows)++] = *s;
}

/* The locks among the keys SCAN found on c's server, in batches: HLEN,
 * then a snapshot of each hash that may be a lock.  A key whose slot moved
 * meanwhile (a cluster being resharded) is read where it went. */
static void list_server(struct srv *c, struct key *keys, size_t nkeys,
                        struct snap **rows, size_t *nrows)
{
    size_t i, j;

    for (i = 0; i < nkeys; i += LIST_BATCH) {
        size_t n = nkeys - i < LIST_BATCH ? nkeys - i : LIST_BATCH;
        long long len[LIST_BATCH];
        int moved[LIST_BATCH];
        struct snap s[LIST_BATCH];
        struct redir rd;

        /* a hash with very many fields is not a lock: skip it unread */
        for (j = 0; j < n; j++) {
            const char *a[2] = { "HLEN", keys[i + j].p };
            size_t l[2] = { 4, keys[i + j].n };
            append(c, 2, a, l);
        }
        for (j = 0; j < n; j++) {
            redisReply *r = get_reply(c);
            len[j] = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
            moved[j] = r->type == REDIS_REPLY_ERROR && redir_of(c, r, &rd) != RD_NONE;
            freeReplyObject(r);
        }
        for (j = 0; j < n; j++) {
            struct dist__names *nm;
            memset(&s[j], 0, sizeof s[j]);
            if (!moved[j] && (len[j] < 1 || len[j] > LIST_MAX_FIELDS))
                continue;
            nm = names_of(keys[i + j].p, keys[i + j].n);
            if (!names_fit(nm)) {      /* not a lock a cluster can hold */
                dist__names_unref(nm);
                moved[j] = 0;
                continue;
            }
            s[j].names = nm;
            if (!moved[j])
                snap_append(c, nm);
        }
        for (j = 0; j < n; j++) {
            if (!s[j].names)
                continue;
            if (!moved[j] && snap_read(c, 0, &s[j], &rd) != 0) {
                if (rd.kind == RD_CONN)
                    die(EX_REDIS, "lost the connection to Redis at %s: %s",
                        c->where, rd.msg);
                moved[j] = 1;
            }
            if (moved[j]) {
                struct srv k = { 0 };
                dist__names_unref(s[j].names);
                snap_take(&k, keys[i + j].p, keys[i + j].n, &s[j]);
                srv_close(&k);
            }
            list_keep(&s[j], rows, nrows);
        }
    }
}

static int cmd_list(int argc, char **argv)
{
    const char *pattern = NULL;
    size_t i, u, nrows = 0, width = 4;
    struct snap *rows = NULL;
    struct dist__addr masters[128];
    int m, nmasters, dashdash = 0;

    for (i = 0; i < (size_t)argc; i++) {
        int k = (int)i;
        if (!dashdash && strcmp(argv[i], "--") == 0) {
            dashdash = 1;
            continue;
        }
        if (!dashdash && argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &k))
                usage_error("unknown option '%s'", argv[i]);
            i = (size_t)k;
            continue;
        }
        if (pattern)
            usage_error("unexpected argument '%s'", argv[i]);
        pattern = argv[i];
    }
    if (!pattern)
        pattern = "*";

    redis_setup();
    /* one server, or every master of a cluster, each holding its slots */
    nmasters = dist__route_masters(&rcfg, masters, 128);
    if (nmasters < 0)
        die(EX_REDIS, "%s", dist_last_error());
    for (m = 0; m < nmasters; m++) {
        struct srv c = { 0 };
        struct key *keys = NULL;
        size_t nkeys = 0;

        if (srv_connect(&c, &masters[m]) != 0)
            die(EX_REDIS, "%s", dist_last_error());
        scan_keys(&c, pattern, &keys, &nkeys);
        /* SCAN may return a key twice */
        if (nkeys > 1)
            qsort(keys, nkeys, sizeof *keys, key_cmp);
        for (i = 0, u = 0; i < nkeys; i++) {
            if (u > 0 && key_cmp(&keys[u - 1], &keys[i]) == 0) {
                free(keys[i].p);
                continue;
            }
            keys[u++] = keys[i];
        }
        nkeys = u;
        list_server(&c, keys, nkeys, &rows, &nrows);
        for (i = 0; i < nkeys; i++)
            free(keys[i].p);
        free(keys);
        srv_close(&c);
    }
    /* in name order; a key that moved between two masters while they
     * were scanned is shown once */
    if (nrows > 1)
        qsort(rows, nrows, sizeof *rows, row_cmp);
    for (i = 0, u = 0; i < nrows; i++) {
        if (u > 0 && row_cmp(&rows[u - 1], &rows[i]) == 0) {
            snap_free(&rows[i]);
            continue;
        }
        rows[u++] = rows[i];
    }
    nrows = u;

    for (i = 0; i < nrows; i++)
        if (L(rows[i].names->name) > width)
            width = L(rows[i].names->name);
    if (width > 48)
        width = 48;
    for (i = 0; i < nrows; i++) {
        struct snap *s = &rows[i];
        struct sb b = { 0 };
        size_t waiting = s->nq + s->nw;

        if (opt.json) {
            sb_adds(&b, "{");
            json_head(&b, s);
            json_lease(&b, "lease_ms", s->pttl);
            sb_printf(&b, ",\"holders\":%zu,\"waiting\":%zu}", s->nh, waiting);
        } else {
            size_t start;
            if (i == 0) {
                sb_printf(&b, "%-*s  %-10s  %-10s  %-9s  %7s  %7s", (int)width,
                          "NAME", "KIND", "STATE", "LEASE", "HOLDERS", "WAITING");
                sb_flush_line(&b);
            }
            start = b.len;
            sb_human(&b, B(s->names->name), L(s->names->name));
            while (b.len - start < width)
                sb_addn(&b, " ", 1);
            sb_printf(&b, "  %-10s  %-10s  ", kind_name[s->kind], state_name[s->state]);
            start = b.len;
            if (s->pttl >= 0)
                sb_secs(&b, s->pttl);
            else
                sb_adds(&b, "no expiry");
            {
                char tmp[32];
                size_t l = b.len - start;
                snprintf(tmp, sizeof tmp, "%.*s", (int)l, b.p + start);
                b.len = start;
                sb_printf(&b, "%-9s  %7zu  %7zu", tmp, s->nh, waiting);
            }
        }
        sb_flush_line(&b);
        sb_free(&b);
        snap_free(s);
    }
    if (nrows == 0 && !opt.json)
        printf("no locks%s%s\n", strcmp(pattern, "*") ? " match " : "",
               strcmp(pattern, "*") ? pattern : "");
    free(rows);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* unlock --force                                                           */
/* ------------------------------------------------------------------------ */

static void holders_text(struct sb *b, const struct snap *s)
{
    size_t i;

    for (i = 0; i < s->nh; i++) {
        sb_adds(b, i ? "; " : "");
        human_owner(b, s->h[i].owner, s->h[i].olen);
    }
}

static int confirm(const struct snap *s)
{
    struct sb b = { 0 };
    char line[64];
    size_t i;

    sb_adds(&b, "distlock: force ");
    sb_adds(&b, kind_name[s->kind] ? kind_name[s->kind] : "lock");
    sb_adds(&b, " '");
    sb_human(&b, B(s->names->name), L(s->names->name));
    sb_adds(&b, "' free");
    if (s->nh) {
        sb_adds(&b, ", held by ");
        holders_text(&b, s);
    }
    sb_adds(&b, "? [y/N] ");
    fputs(b.p, stderr);
    fflush(stderr);
    sb_free(&b);
    if (!fgets(line, sizeof line, stdin))
        return 0;
    for (i = 0; line[i] && isspace((unsigned char)line[i]); i++)
        ;
    return strncasecmp(line + i, "y", 1) == 0 &&
           (line[i + 1] == 0 || isspace((unsigned char)line[i + 1]) ||
            strncasecmp(line + i, "yes", 3) == 0);
}

static int cmd_unlock(int argc, char **argv)
{
    const char *name = NULL;
    int i, force = 0, yes = 0, dashdash = 0;
    struct srv c = { 0 };
    struct snap s;
    char why[700];
    struct dist__buf *kv;
    size_t nkeys, k, j;
    long long result;
    redisReply *r;
    const char *pub = dist__publish_cmd();
    struct sb b = { 0 };

    for (i = 0; i < argc; i++) {
        if (!dashdash && strcmp(argv[i], "--") == 0) {
            dashdash = 1;
        } else if (!dashdash && strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (!dashdash && (strcmp(argv[i], "--yes") == 0 ||
                                 strcmp(argv[i], "-y") == 0)) {
            yes = 1;
        } else if (!dashdash && argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
        } else if (name) {
            usage_error("unexpected argument '%s'", argv[i]);
        } else {
            name = argv[i];
        }
    }
    if (!name)
        usage_error("missing the lock NAME");
    check_name(name);
    if (!force)
        usage_error("unlock needs --force: distlock releases the locks it holds "
                    "itself; this removes a lock whatever its holder");

    redis_setup();
    snap_take(&c, name, strlen(name), &s);
    if (s.kind == KIND_UNKNOWN)
        die(EX_USAGE, "'%s' is not a lock (a Redis %s); left alone", name, s.type);
    if (strcmp(s.type, "none") == 0) {
        if (opt.json) {
            sb_adds(&b, "{\"name\":");
            sb_jsonz(&b, name);
            sb_adds(&b, ",\"existed\":false,\"forced\":false}");
            sb_flush_line(&b);
        } else {
            sb_adds(&b, "'");
            sb_human(&b, name, strlen(name));
            sb_adds(&b, "' is not locked; nothing to do");
            sb_flush_line(&b);
        }
        sb_free(&b);
        snap_free(&s);
        srv_close(&c);
        return 0;
    }
    if (!yes) {
        if (!isatty(STDIN_FILENO))
            die(EX_USAGE, "refusing to force '%s' without --yes (no terminal "
                "to ask on)", name);
        if (!confirm(&s)) {
            say("'%s' left alone", name);
            snap_free(&s);
            srv_close(&c);
            return EX_BUSY;
        }
    }

    /* KEYS: N, the channels, the fair queue, the readers ZSET, then the
     * read-hold keys */
    nkeys = 6;
    for (j = 0; j < s.nh; j++)
        nkeys += (size_t)(s.h[j].reads < READ_KEYS_MAX ? s.h[j].reads : READ_KEYS_MAX);
    kv = xrealloc(NULL, (nkeys + 1) * sizeof *kv);
    kv[0] = s.names->name;
    kv[1] = s.names->chan;
    kv[2] = s.names->rwchan;
    kv[3] = s.names->queue;
    kv[4] = s.names->timeout;
    kv[5].p = dist__names_derive(s.names, "distlock_rwlock_readers:", "", &kv[5].len);
    if (!kv[5].p)
        die(EX_REDIS, "out of memory");
    k = 6;
    for (j = 0; j < s.nh; j++) {
        long long n;
        for (n = 1; n <= s.h[j].reads && n <= READ_KEYS_MAX; n++) {
            kv[k].p = read_key(s.names, &s.h[j], n, &kv[k].len);
            k++;
        }
    }
    kv[k].p = pub;
    kv[k].len = strlen(pub);
    /* on the server the lock was read from, unless its slot moved since */
    r = srv_eval(&c, DIST__S_FORCE_UNLOCK, (int)nkeys, kv, (int)nkeys + 1,
                 why, sizeof why);
    for (k = 5; k < nkeys; k++)
        free((char *)kv[k].p);
    free(kv);
    if (!r)
        die(EX_REDIS, "cannot force '%s': %s", name, why);
    if (r->type == REDIS_REPLY_ERROR)
        die(EX_REDIS, "Redis at %s refused %s: %s", c.where,
            dist__scripts[DIST__S_FORCE_UNLOCK].name, r->str);
    result = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
    freeReplyObject(r);
    if (result == -1)
        die(EX_USAGE, "'%s' is not a lock; left alone", name);
    if (opt.json) {
        struct sb o = { 0 };
        size_t jj;
        sb_adds(&o, "{\"name\":");
        sb_jsonz(&o, name);
        sb_printf(&o, ",\"existed\":%s,\"forced\":%s,\"kind\":",
                  result == 1 ? "true" : "false", result == 1 ? "true" : "false");
        if (kind_name[s.kind])
            sb_jsonz(&o, kind_name[s.kind]);
        else
            sb_adds(&o, "null");
        sb_adds(&o, ",\"was_held_by\":[");
        for (jj = 0; jj < s.nh; jj++) {
            sb_adds(&o, jj ? "," : "");
            sb_json(&o, s.h[jj].owner, s.h[jj].olen);
        }
        sb_adds(&o, "]}");
        sb_flush_line(&o);
        sb_free(&o);
    } else if (result == 1) {
        sb_adds(&b, "'");
        sb_human(&b, name, strlen(name));
        sb_adds(&b, "' forced free");
        if (s.nh) {
            sb_adds(&b, " (was held by ");
            holders_text(&b, &s);
            sb_adds(&b, ")");
        }
        if (s.nq)
            sb_printf(&b, "; the head of its queue (%zu waiting) was told", s.nq);
        sb_flush_line(&b);
    } else {
        sb_adds(&b, "'");
        sb_human(&b, name, strlen(name));
        sb_adds(&b, "' was released meanwhile; nothing to do");
        sb_flush_line(&b);
    }
    sb_free(&b);
    snap_free(&s);
    srv_close(&c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* watch                                                                    */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
}

/* One hold of the picture: an owner's holds of one kind. */
enum { M_MUTEX, M_READ, M_WRITE };
static const char *const mode_name[] = { NULL, "read", "write" };

struct ent {
    const char *o;
    size_t n;
    int mode;
    long long count;
};

static size_t entries(const struct snap *s, struct ent **out)
{
    size_t i, n = 0;

    *out = xrealloc(NULL, (2 * s->nh + 1) * sizeof **out);
    if (s->kind == KIND_UNKNOWN)
        return 0;
    for (i = 0; i < s->nh; i++) {
        const struct holder *h = &s->h[i];
        if (s->kind != KIND_RWLOCK) {
            (*out)[n++] = (struct ent){ h->owner, h->olen, M_MUTEX, h->holds };
            continue;
        }
        if (h->writes > 0)
            (*out)[n++] = (struct ent){ h->owner, h->olen, M_WRITE, h->writes };
        if (h->reads > 0)
            (*out)[n++] = (struct ent){ h->owner, h->olen, M_READ, h->reads };
    }
    return n;
}

static const struct ent *ent_find(const struct ent *e, size_t n, const struct ent *x)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (e[i].mode == x->mode && e[i].n == x->n && memcmp(e[i].o, x->o, x->n) == 0)
            return &e[i];
    return NULL;
}

static int waiter_in(const struct waiter *w, size_t n, const char *o, size_t on,
                     size_t *pos)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (w[i].olen == on && memcmp(w[i].owner, o, on) == 0) {
            if (pos)
                *pos = i + 1;
            return 1;
        }
    return 0;
}

static int holds_any(const struct snap *s, const char *o, size_t on, int write_only)
{
    size_t i;

    for (i = 0; i < s->nh; i++)
        if (s->h[i].olen == on && memcmp(s->h[i].owner, o, on) == 0)
            return !write_only || s->h[i].writes > 0;
    return 0;
}

/* Starts an event line: time, name, event. */
static void ev_start(struct sb *b, const struct snap *s, const char *event)
{
    struct timespec ts;
    struct tm tm;
    char buf[64];

    clock_gettime(CLOCK_REALTIME, &ts);
    if (opt.json) {
        gmtime_r(&ts.tv_sec, &tm);
        strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
        sb_printf(b, "{\"time\":\"%s.%03ldZ\",\"name\":", buf, ts.tv_nsec / 1000000);
        sb_json(b, B(s->names->name), L(s->names->name));
        sb_adds(b, ",\"event\":");
        sb_jsonz(b, event);
    } else {
        localtime_r(&ts.tv_sec, &tm);
        strftime(buf, sizeof buf, "%H:%M:%S", &tm);
        sb_printf(b, "%s.%03ld  ", buf, ts.tv_nsec / 1000000);
        sb_human(b, B(s->names->name), L(s->names->name));
        sb_adds(b, "  ");
    }
}

static int ev_end(struct sb *b)
{
    if (opt.json)
        sb_adds(b, "}");
    sb_flush_line(b);
    return fflush(stdout) == 0 ? 0 : -1;
}

/* "acquired by X (write, 2 holds)" and the like, for a hold entry. */
static int ev_hold(const struct snap *s, const char *event, const char *text,
                   const struct ent *e, int with_count)
{
    struct sb b = { 0 };
    int rc;

    ev_start(&b, s, event);
    if (opt.json) {
        sb_adds(&b, ",");
        json_owner(&b, e->o, e->n);
        if (e->mode != M_MUTEX)
            sb_printf(&b, ",\"mode\":\"%s\"", mode_name[e->mode]);
        if (with_count)
            sb_printf(&b, ",\"holds\":%lld", e->count);
        if (strcmp(event, "acquired") == 0 && s->pttl >= 0)
            sb_printf(&b, ",\"lease_ms\":%lld", s->pttl);
    } else {
        sb_adds(&b, text);
        sb_human(&b, e->o, e->n);
        if (e->mode != M_MUTEX || with_count) {
            sb_adds(&b, " (");
            if (e->mode != M_MUTEX)
                sb_printf(&b, "%s%s", mode_name[e->mode], with_count ? ", " : "");
            if (with_count)
                sb_printf(&b, "%lld hold%s", e->count, e->count == 1 ? "" : "s");
            sb_adds(&b, ")");
        }
    }
    rc = ev_end(&b);
    sb_free(&b);
    return rc;
}

static int ev_waiter(const struct snap *s, const char *event, const char *text,
                     const struct waiter *w, size_t pos)
{
    struct sb b = { 0 };
    int rc;

    ev_start(&b, s, event);
    if (opt.json) {
        sb_adds(&b, ",");
        json_owner(&b, w->owner, w->olen);
        if (pos)
            sb_printf(&b, ",\"position\":%zu", pos);
    } else {
        sb_adds(&b, text);
        sb_human(&b, w->owner, w->olen);
        if (pos)
            sb_printf(&b, " (position %zu)", pos);
    }
    rc = ev_end(&b);
    sb_free(&b);
    return rc;
}

/* The first line: the state when watching starts. */
static int ev_state(const struct snap *s)
{
    struct sb b = { 0 };
    size_t i;
    int rc;

    ev_start(&b, s, "state");
    if (opt.json) {
        sb_adds(&b, ",\"kind\":");
        if (kind_name[s->kind])
            sb_jsonz(&b, kind_name[s->kind]);
        else
            sb_adds(&b, "null");
        sb_adds(&b, ",\"state\":");
        sb_jsonz(&b, state_name[s->state]);
        json_holders(&b, s);
        json_lease(&b, "lease_ms", s->state == ST_FREE ? -2 : s->pttl);
        json_waiters(&b, "queue", s->q, s->nq);
        json_waiters(&b, "waiting_writers", s->w, s->nw);
    } else if (s->kind == KIND_UNKNOWN) {
        sb_printf(&b, "not a lock (a Redis %s)", s->type);
    } else {
        if (kind_name[s->kind])
            sb_printf(&b, "%s, ", kind_name[s->kind]);
        sb_adds(&b, state_name[s->state]);
        for (i = 0; i < s->nh; i++) {
            sb_adds(&b, i ? ", " : " by ");
            sb_human(&b, s->h[i].owner, s->h[i].olen);
        }
        if (s->state != ST_FREE) {
            sb_adds(&b, ", lease ");
            human_lease(&b, s->pttl);
        }
        if (s->nq)
            sb_printf(&b, ", %zu queued", s->nq);
        if (s->nw)
            sb_printf(&b, ", %zu writer%s waiting", s->nw, s->nw == 1 ? "" : "s");
    }
    rc = ev_end(&b);
    sb_free(&b);
    return rc;
}

/* A line without an owner: "released" when a release came and went
 * between two looks. */
static int ev_plain(const struct snap *s, const char *event, const char *text)
{
    struct sb b = { 0 };
    int rc;

    ev_start(&b, s, event);
    if (!opt.json)
        sb_adds(&b, text);
    rc = ev_end(&b);
    sb_free(&b);
    return rc;
}

/* Prints what changed from a to b.  released: a release message came.
 * A lock that vanished expired only if no release message came and its
 * lease could have run out since a (a fair lock released with nobody
 * queued, or a read release with no message, publishes nothing). */
static int ev_diff(const struct snap *a, const struct snap *b, int released)
{
    struct ent *ea, *eb;
    size_t na = entries(a, &ea), nb = entries(b, &eb), i, pos;
    int vanished = strcmp(b->type, "none") == 0 && na > 0;
    int expired = vanished && !released && a->pttl >= 0 &&
                  (uint64_t)a->pttl <= b->taken_ms - a->taken_ms + 100;
    int rc = 0, changed = 0;
    long long ta = 0, tb = 0, missed;
    const struct ent *f;

    /* Every acquisition of a free lock draws a fencing token: more tokens
     * than acquisitions seen means some came and went between two looks. */
    if (a->has_token)
        parse_ll(a->token, strlen(a->token), &ta);
    if (b->has_token)
        parse_ll(b->token, strlen(b->token), &tb);
    missed = tb > ta && a->has_token ? tb - ta : 0;
    for (i = 0; i < nb; i++)
        if (!ent_find(ea, na, &eb[i]) && eb[i].mode != M_READ && missed > 0)
            missed--;

    if (b->kind == KIND_UNKNOWN && a->kind != KIND_UNKNOWN) {
        struct sb s = { 0 };
        ev_start(&s, b, "not_a_lock");
        if (opt.json) {
            sb_adds(&s, ",\"type\":");
            sb_jsonz(&s, b->type);
        } else {
            sb_printf(&s, "not a lock any more (a Redis %s)", b->type);
        }
        rc |= ev_end(&s);
        sb_free(&s);
    }
    for (i = 0; i < na; i++)
        if (!ent_find(eb, nb, &ea[i])) {
            changed = 1;
            if (expired)
                rc |= ev_hold(b, "expired", "expired, was held by ", &ea[i], 0);
            else
                rc |= ev_hold(b, "released", "released by ", &ea[i], 0);
        }
    for (i = 0; i < a->nq; i++)
        if (!waiter_in(b->q, b->nq, a->q[i].owner, a->q[i].olen, NULL) &&
            !holds_any(b, a->q[i].owner, a->q[i].olen, 0)) {
            if (missed > 0) {
                /* it was served: took the lock and let it go meanwhile */
                missed--;
                rc |= ev_waiter(b, "acquired_released",
                                "acquired and released (between two looks) by ",
                                &a->q[i], 0);
            } else {
                rc |= ev_waiter(b, "left_queue", "left queue ", &a->q[i], 0);
            }
        }
    for (i = 0; i < a->nw; i++)
        if (!waiter_in(b->w, b->nw, a->w[i].owner, a->w[i].olen, NULL) &&
            !holds_any(b, a->w[i].owner, a->w[i].olen, 1))
            rc |= ev_waiter(b, "writer_left", "writer stopped waiting ", &a->w[i], 0);
    /* released and taken again between two looks: same holders, a message */
    if (!changed && released && na > 0 && na == nb) {
        for (i = 0; i < na; i++)
            if (ent_find(eb, nb, &ea[i]))
                rc |= ev_hold(b, "released", "released by ", &ea[i], 0);
        free(ea);
        ea = NULL;
        na = 0;
    } else if (!changed && (released || missed > 0) && na == 0 && nb == 0) {
        rc |= ev_plain(b, "acquired_released",
                       "acquired and released (between two looks)");
        missed = 0;
    }
    for (i = 0; i < nb; i++) {
        f = ent_find(ea, na, &eb[i]);
        if (!f)
            rc |= ev_hold(b, "acquired", "acquired by ", &eb[i], 1);
        else if (f->count != eb[i].count)
            rc |= ev_hold(b, "holds", "hold count changed: ", &eb[i], 1);
    }
    for (i = 0; i < b->nq; i++)
        if (!waiter_in(a->q, a->nq, b->q[i].owner, b->q[i].olen, NULL) &&
            waiter_in(b->q, b->nq, b->q[i].owner, b->q[i].olen, &pos))
            rc |= ev_waiter(b, "queued", "queued ", &b->q[i], pos);
    for (i = 0; i < b->nw; i++)
        if (!waiter_in(a->w, a->nw, b->w[i].owner, b->w[i].olen, NULL))
            rc |= ev_waiter(b, "writer_waiting", "writer waiting ", &b->w[i], 0);
    free(ea);
    free(eb);
    return rc;
}

/* "redisson_lock__channel:{N}" as a glob that matches only itself. */
static void glob_quote(struct sb *b, const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strchr("*?[]\\", p[i]) && p[i])
            sb_addn(b, "\\", 1);
        sb_addn(b, p + i, 1);
    }
}

/* watch's subscriber connection: the lock's release channels, and each
 * fair waiter's own channel (redisson_lock__channel:{N}:<owner>, where a
 * release wakes the head of the queue).  On one server (or the sentinels'
 * master) a pattern covers the waiters' channels; a cluster publishes with
 * SPUBLISH, heard only by SSUBSCRIBE on the node that owns the slot, and
 * sharded pub/sub has no patterns, so there each queued waiter's channel
 * is subscribed while it waits. */
struct sub {
    struct srv s;
    struct dist__names *n;
    const char *name;
    struct key *own;      /* the waiters' channels subscribed (cluster) */
    size_t nown;
    int resub;            /* subscribe anew: a slot moved, a refusal */
};

static int sub_wants(const struct sub *u, const char *p, size_t len)
{
    size_t i;

    if ((len == L(u->n->chan) && memcmp(p, B(u->n->chan), len) == 0) ||
        (len == L(u->n->rwchan) && memcmp(p, B(u->n->rwchan), len) == 0))
        return 1;
    for (i = 0; i < u->nown; i++)
        if (u->own[i].n == len && memcmp(u->own[i].p, p, len) == 0)
            return 1;
    return 0;
}

/* Sends what was appended to s (a subscriber reads only when told to). */
static int srv_flush(struct srv *s)
{
    int done = 0;

    while (!done)
        if (redisBufferWrite(s->c, &done) != REDIS_OK)
            return -1;
    return 0;
}

/* Subscribes u anew on the server of the lock; after a lost connection
 * (retry) keeps trying for the command timeout.  Exit 3 when it cannot. */
static void sub_open(struct sub *u, int retry)
{
    const struct dist__buf *key = &u->n->name;
    struct tries t;
    struct redir rd;
    char why[700];

    tries_init(&t);
    u->resub = 0;
    if (srv_route(&u->s, key) != 0) {
        if (!retry)
            die(EX_REDIS, "%s", dist_last_error());
        memset(&rd, 0, sizeof rd);
        rd.kind = RD_CONN;
        snprintf(rd.msg, sizeof rd.msg, "%s", dist_last_error());
        if (srv_follow(&u->s, key, &rd, &t, why, sizeof why) != 0)
            die(EX_REDIS, "cannot subscribe to the channels of '%s': %s",
                u->name, why);
    }
    for (;;) {
        struct srv *s = &u->s;
        redisReply *r;
        int pre = append_asking(s), nrep, k;

        if (on_cluster()) {
            size_t argc = 3 + u->nown, i;
            const char **a = xrealloc(NULL, argc * sizeof *a);
            size_t *l = xrealloc(NULL, argc * sizeof *l);
            a[0] = "SSUBSCRIBE"; l[0] = 10;
            a[1] = B(u->n->chan); l[1] = L(u->n->chan);
            a[2] = B(u->n->rwchan); l[2] = L(u->n->rwchan);
            for (i = 0; i < u->nown; i++) {
                a[3 + i] = u->own[i].p;
                l[3 + i] = u->own[i].n;
            }
            append(s, (int)argc, a, l);
            free(a);
            free(l);
            nrep = (int)argc - 1;
        } else {
            const char *a[3] = { "SUBSCRIBE", B(u->n->chan), B(u->n->rwchan) };
            size_t l[3] = { 9, L(u->n->chan), L(u->n->rwchan) };
            const char *pa[2] = { "PSUBSCRIBE", NULL };
            size_t pl[2] = { 10, 0 };
            struct sb pat = { 0 };
            glob_quote(&pat, B(u->n->chan), L(u->n->chan));
            sb_adds(&pat, ":*");
            pa[1] = pat.p;
            pl[1] = pat.len;
            append(s, 3, a, l);
            append(s, 2, pa, pl);
            sb_free(&pat);
            nrep = 3;
        }
        s->asking = 0;    /* ASKING went with this try only */
        rd.kind = RD_NONE;
        for (k = 0; k < pre + nrep; k++) {
            if (!(r = try_reply(s))) {
                memset(&rd, 0, sizeof rd);
                rd.kind = RD_CONN;
                snprintf(rd.msg, sizeof rd.msg, "%s",
                         s->c->errstr[0] ? s->c->errstr : "no reply");
                break;
            }
            if (k >= pre && r->type == REDIS_REPLY_ERROR) {
                /* refused: one error for the whole command */
                if (redir_of(s, r, &rd) == RD_NONE)
                    die(EX_REDIS, "Redis at %s refused %s: %s", s->where,
                        on_cluster() ? "SSUBSCRIBE" : "SUBSCRIBE", r->str);
                freeReplyObject(r);
                break;
            }
            freeReplyObject(r);
        }
        if (rd.kind == RD_NONE)
            return;
        if (srv_follow(s, key, &rd, &t, why, sizeof why) != 0)
            die(EX_REDIS, "cannot subscribe to the channels of '%s': %s",
                u->name, why);
    }
}

/* On a cluster: subscribes the channel of each waiter queued in cur, and
 * drops those of waiters gone. */
static void sub_waiters(struct sub *u, const struct snap *cur)
{
    size_t i, j;
    int sent = 0;

    if (!on_cluster())
        return;
    for (i = 0; i < u->nown;) {
        const char *o = u->own[i].p + L(u->n->chan) + 1;
        size_t on = u->own[i].n - L(u->n->chan) - 1;
        if (waiter_in(cur->q, cur->nq, o, on, NULL)) {
            i++;
            continue;
        }
        {
            const char *a[2] = { "SUNSUBSCRIBE", u->own[i].p };
            size_t l[2] = { 12, u->own[i].n };
            append(&u->s, 2, a, l);
            sent = 1;
        }
        free(u->own[i].p);
        u->own[i] = u->own[--u->nown];
    }
    for (i = 0; i < cur->nq; i++) {
        struct sb ch = { 0 };
        sb_addn(&ch, B(u->n->chan), L(u->n->chan));
        sb_addn(&ch, ":", 1);
        sb_addn(&ch, cur->q[i].owner, cur->q[i].olen);
        for (j = 0; j < u->nown; j++)
            if (u->own[j].n == ch.len && memcmp(u->own[j].p, ch.p, ch.len) == 0)
                break;
        if (j < u->nown) {
            sb_free(&ch);
            continue;
        }
        {
            const char *a[2] = { "SSUBSCRIBE", ch.p };
            size_t l[2] = { 10, ch.len };
            append(&u->s, 2, a, l);
            sent = 1;
        }
        u->own = xrealloc(u->own, (u->nown + 1) * sizeof *u->own);
        u->own[u->nown].p = ch.p;        /* keeps the buffer */
        u->own[u->nown++].n = ch.len;
    }
    if (sent && srv_flush(&u->s) != 0)
        u->resub = 1;     /* the next look finds the connection broken */
}

static void sub_close(struct sub *u)
{
    size_t i;

    for (i = 0; i < u->nown; i++)
        free(u->own[i].p);
    free(u->own);
    u->own = NULL;
    u->nown = 0;
    srv_close(&u->s);
}

/* Reads what the subscriber connection has, waiting up to ms for it.
 * Counts release messages; -1 when the connection failed.  Sets u->resub
 * when the server dropped a channel we want (its slot moved away) or
 * refused one. */
static int sub_drain(struct sub *u, int ms, int *msgs)
{
    redisContext *s = u->s.c;
    struct pollfd p = { s->fd, POLLIN, 0 };
    void *r;
    int n;

    for (;;) {
        if (redisGetReplyFromReader(s, &r) != REDIS_OK)
            return -1;
        if (!r)
            break;
        {
            redisReply *x = r;
            if (x->type == REDIS_REPLY_ERROR) {
                u->resub = 1;
            } else if (x->type == REDIS_REPLY_ARRAY && x->elements >= 3 &&
                       x->element[0]->type == REDIS_REPLY_STRING) {
                const char *kind = x->element[0]->str;
                const redisReply *ch = x->element[1];
                if (strcmp(kind, "message") == 0 ||
                    strcmp(kind, "pmessage") == 0 ||
                    strcmp(kind, "smessage") == 0)
                    ++*msgs;
                else if (strcmp(kind, "sunsubscribe") == 0 &&
                         ch->type == REDIS_REPLY_STRING &&
                         sub_wants(u, ch->str, ch->len))
                    u->resub = 1;
            }
        }
        freeReplyObject(r);
        ms = 0;    /* something came: look at the lock now */
    }
    n = poll(&p, 1, ms);
    if (n < 0)
        return errno == EINTR ? 0 : -1;
    if (n == 0)
        return 0;
    if (redisBufferRead(s) != REDIS_OK)
        return -1;
    return sub_drain(u, 0, msgs);
}

/* sub_drain, subscribing anew when the connection broke, the server
 * dropped the channels or the lock's server changed (a failover, a slot
 * that moved); exit 3 when that fails for the command timeout.  *look is
 * set when messages may have been missed meanwhile. */
static void sub_pump(struct sub *u, int ms, int *msgs, int *look)
{
    if (!u->resub && srv_placed(&u->s, &u->n->name) &&
        sub_drain(u, ms, msgs) == 0)
        return;
    sub_open(u, 1);
    *look = 1;
}

static int cmd_watch(int argc, char **argv)
{
    const char *name = NULL;
    long interval = WATCH_INTERVAL_MS;
    int i, dashdash = 0, msgs = 0, look = 0;
    struct srv c = { 0 };
    struct sub u;
    struct snap prev, cur;
    struct sigaction sa;
    uint64_t next;

    for (i = 0; i < argc; i++) {
        const char *v;
        if (!dashdash && strcmp(argv[i], "--") == 0) {
            dashdash = 1;
        } else if (!dashdash && (v = opt_value(argc, argv, &i, "--interval"))) {
            char *end;
            interval = strtol(v, &end, 10);
            if (*end || interval < 10 || interval > 60000)
                usage_error("--interval wants milliseconds, 10..60000");
        } else if (!dashdash && argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
        } else if (name) {
            usage_error("unexpected argument '%s'", argv[i]);
        } else {
            name = argv[i];
        }
    }
    if (!name)
        usage_error("missing the lock NAME");
    check_name(name);

    redis_setup();
    memset(&u, 0, sizeof u);
    u.name = name;
    u.n = lock_names(name, strlen(name));

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;        /* no SA_RESTART: poll returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    snap_take(&c, name, strlen(name), &prev);
    sub_open(&u, 0);
    /* subscribed: look again, so that nothing falls between */
    snap_free(&prev);
    snap_take(&c, name, strlen(name), &prev);
    sub_waiters(&u, &prev);
    if (ev_state(&prev) != 0)
        goto out;

    next = dist__now_ms() + (uint64_t)interval;
    while (!stop_sig) {
        uint64_t now = dist__now_ms();
        int wait = now >= next ? 0 : (int)(next - now);

        sub_pump(&u, wait, &msgs, &look);
        if (stop_sig)
            break;
        if (msgs == 0 && !look && dist__now_ms() < next)
            continue;
        snap_take(&c, name, strlen(name), &cur);
        if (strcmp(cur.type, "none") == 0 && prev.nh > 0 && msgs == 0) {
            /* gone: give a release message in flight a moment to arrive
             * before calling it an expiry */
            sub_pump(&u, 50, &msgs, &look);
        }
        if (ev_diff(&prev, &cur, msgs > 0) != 0) {
            snap_free(&cur);
            break;               /* stdout closed */
        }
        snap_free(&prev);
        prev = cur;
        sub_waiters(&u, &prev);
        msgs = look = 0;
        next = dist__now_ms() + (uint64_t)interval;
    }
out:
    sub_close(&u);
    dist__names_unref(u.n);
    snap_free(&prev);
    srv_close(&c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* lock -- COMMAND                                                          */
/* ------------------------------------------------------------------------ */

/*
 * The main thread takes the lock, forks the command, waits for it and
 * releases the lock (the library's renewal thread keeps the lease alive
 * meanwhile).  A second thread takes SIGINT, SIGTERM and SIGHUP with
 * sigwaitinfo: while the main thread still waits for the lock it gives up
 * the wait and exits; while the command runs it passes them on.
 */
enum { PH_WAIT, PH_ABANDON, PH_RUN, PH_DONE };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase;
    pid_t child;
    int sig;                     /* the last signal taken */
    sigset_t set;                /* the signals the thread takes */
    sigset_t old_mask;           /* the mask the command gets */
    struct srv c;                /* for the waiting thread's cancel */
    struct dist__names *names;
    char owner[64];              /* the main thread's owner */
    size_t owner_len;
    int fair;
    int mode;                    /* M_MUTEX, M_READ, M_WRITE */
    int prefer_writer;
} lk = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PH_WAIT, 0, 0,
         { { 0 } }, { { 0 } }, { 0 }, NULL, { 0 }, 0, 0, 0, 0 };

/* The descriptors open when distlock started: the command inherits these
 * and no others (the library's Redis sockets are not its business). */
static int *startup_fds;
static size_t n_startup_fds;

static void note_startup_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        startup_fds = xrealloc(startup_fds, (n_startup_fds + 1) * sizeof *startup_fds);
        startup_fds[n_startup_fds++] = (int)fd;
    }
    closedir(d);
}

/* In the forked child: close-on-exec for every descriptor opened since
 * start-up.  Only async-signal-safe calls (getdents64 on the raw fd). */
static void cloexec_ours(void)
{
    char buf[2048];
    ssize_t n;
    int d = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (d < 0)
        return;
    while ((n = getdents64(d, buf, sizeof buf)) > 0) {
        ssize_t off = 0;
        while (off < n) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            const char *p = e->d_name;
            long fd = 0;
            size_t i;
            int known = 0;

            off += e->d_reclen;
            if (*p < '0' || *p > '9')
                continue;
            for (; *p >= '0' && *p <= '9'; p++)
                fd = fd * 10 + (*p - '0');
            if (fd <= 2 || fd == d)
                continue;
            for (i = 0; i < n_startup_fds; i++)
                if (startup_fds[i] == fd)
                    known = 1;
            if (!known)
                fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        }
    }
    close(d);
}

/* A waiter that gives up leaves its queue (fair mutex; a writer of a
 * writer-preferring rwlock) on the thread's own connection, with the
 * owner of the main thread. */
static void cancel_wait(void)
{
    const char *pub = dist__publish_cmd();
    redisReply *r = NULL;
    char why[700];

    if (!lk.names)
        return;
    if (lk.fair) {
        struct dist__buf kv[7] = {
            lk.names->name, lk.names->queue, lk.names->timeout, lk.names->chan,
            { lk.owner, lk.owner_len }, { pub, strlen(pub) }, { "0", 1 },
        };
        r = srv_eval(&lk.c, DIST__S_FAIR_CANCEL, 4, kv, 7, why, sizeof why);
    } else if (lk.mode == M_WRITE) {
        struct dist__buf kv[5] = {
            lk.names->name, lk.names->writers, lk.names->rwchan,
            { lk.owner, lk.owner_len }, { pub, strlen(pub) },
        };
        r = srv_eval(&lk.c, DIST__S_RWLOCK_CANCEL, 3, kv, 5, why, sizeof why);
    }
    if (r)
        freeReplyObject(r);
}

static void *signal_thread(void *arg)
{
    (void)arg;
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&lk.set, &si);

        if (sig < 0)
            continue;
        pthread_mutex_lock(&lk.mu);
        lk.sig = sig;
        if (lk.phase == PH_WAIT) {
            struct timespec until;

            lk.phase = PH_ABANDON;
            pthread_mutex_unlock(&lk.mu);
            cancel_wait();
            /* the lock may have been granted meanwhile: then the main
             * thread sees PH_ABANDON, releases it and exits */
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 200 * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_mutex_lock(&lk.mu);
            while (lk.phase == PH_ABANDON &&
                   pthread_cond_timedwait(&lk.cv, &lk.mu, &until) == 0)
                ;
            if (lk.phase == PH_ABANDON) {
                fflush(stderr);
                _exit(128 + sig);
            }
        } else if (lk.phase == PH_RUN && lk.child > 0) {
            /* A signal the terminal sent reached the whole foreground
             * process group, the command too: do not send it twice. */
            if (si.si_code != SI_KERNEL)
                kill(lk.child, sig);
        }
        pthread_mutex_unlock(&lk.mu);
    }
    return NULL;
}

static void on_lost(const char *name, void *arg)
{
    (void)arg;
    fprintf(stderr, "distlock: warning: lost the lock '%s' (its lease ran out, "
            "it was forced, or Redis lost it) while the command runs\n", name);
}

/* The lock `lock` takes: a mutex (plain or fair) or one side of an rwlock. */
static struct {
    dist_mutex_t m;
    dist_rwlock_t rw;
} obj;

static int obj_init(const char *name, int prefer_writer)
{
    if (lk.mode == M_MUTEX) {
        dist_mutexattr_t a;
        dist_mutexattr_init(&a);
        dist_mutexattr_setfair(&a, lk.fair);
        return dist_mutex_init(&obj.m, name, &a);
    } else {
        dist_rwlockattr_t a;
        dist_rwlockattr_init(&a);
        dist_rwlockattr_setkind(&a, prefer_writer ? DIST_RWLOCK_PREFER_WRITER
                                                  : DIST_RWLOCK_PREFER_READER);
        return dist_rwlock_init(&obj.rw, name, &a);
    }
}

/* abstime NULL: wait as long as it takes; try: never wait. */
static int obj_lock(int try, const struct timespec *abstime)
{
    switch (lk.mode) {
    case M_READ:
        return try ? dist_rwlock_tryrdlock(&obj.rw)
             : abstime ? dist_rwlock_timedrdlock(&obj.rw, abstime)
             : dist_rwlock_rdlock(&obj.rw);
    case M_WRITE:
        return try ? dist_rwlock_trywrlock(&obj.rw)
             : abstime ? dist_rwlock_timedwrlock(&obj.rw, abstime)
             : dist_rwlock_wrlock(&obj.rw);
    default:
        return try ? dist_mutex_trylock(&obj.m)
             : abstime ? dist_mutex_timedlock(&obj.m, abstime)
             : dist_mutex_lock(&obj.m);
    }
}

static int obj_unlock(void)
{
    return lk.mode == M_MUTEX ? dist_mutex_unlock(&obj.m)
                              : dist_rwlock_unlock(&obj.rw);
}

/* A read hold has no token of its own. */
static int obj_token(uint64_t *token)
{
    if (lk.mode == M_READ)
        return EPERM;
    return lk.mode == M_MUTEX ? dist_mutex_token(&obj.m, token)
                              : dist_rwlock_token(&obj.rw, token);
}

static void obj_destroy(void)
{
    if (lk.mode == M_MUTEX)
        dist_mutex_destroy(&obj.m);
    else
        dist_rwlock_destroy(&obj.rw);
}

/* The library's last error, naming the server of lock n when it does not
 * say already. */
static const char *lib_error(const struct dist__names *n)
{
    static char buf[1200];
    char e[800], w[300];
    struct dist__addr a;

    snprintf(e, sizeof e, "%s", dist_last_error());   /* routing may set it */
    snprintf(buf, sizeof buf, "%s", e);
    if (dist__route(&rcfg, &n->name, &a) == 0) {
        srv_where(w, sizeof w, &a);
        if (!strstr(e, w))
            snprintf(buf, sizeof buf, "%s (Redis at %s)", e, w);
    }
    return buf;
}

static double since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void verbose_line(const char *event, const char *name, const char *kind,
                         double secs, int has_token, uint64_t token, int status)
{
    struct sb b = { 0 };

    if (opt.json) {
        sb_printf(&b, "{\"event\":\"%s\",\"name\":", event);
        sb_jsonz(&b, name);
        sb_printf(&b, ",\"kind\":\"%s\"", kind);
        if (strcmp(event, "acquired") == 0) {
            sb_printf(&b, ",\"waited_ms\":%.0f", secs * 1000);
            if (has_token)
                sb_printf(&b, ",\"token\":%" PRIu64, token);
        } else {
            sb_printf(&b, ",\"held_ms\":%.0f,\"status\":%d", secs * 1000, status);
        }
        sb_adds(&b, "}\n");
    } else if (strcmp(event, "acquired") == 0) {
        sb_printf(&b, "distlock: acquired %s '%s'", kind, name);
        if (has_token)
            sb_printf(&b, " (token %" PRIu64 ")", token);
        sb_printf(&b, " after %.1f s\n", secs);
    } else {
        sb_printf(&b, "distlock: released %s '%s' after %.1f s; the command "
                  "exited with %d\n", kind, name, secs, status);
    }
    fputs(b.p, stderr);
    sb_free(&b);
}

static void print_busy(const char *name, double waited)
{
    struct snap s;
    struct sb b = { 0 };

    snap_take(&lk.c, name, strlen(name), &s);
    sb_printf(&b, "distlock: gave up on '%s' after %.1f s", name, waited);
    if (s.nh) {
        sb_adds(&b, ": held by ");
        holders_text(&b, &s);
        if (s.pttl >= 0) {
            sb_adds(&b, ", lease ");
            sb_secs(&b, s.pttl);
            sb_adds(&b, " left");
        }
    }
    if (s.nq)
        sb_printf(&b, ", %zu queued", s.nq);
    sb_adds(&b, "\n");
    fputs(b.p, stderr);
    sb_free(&b);
    snap_free(&s);
}

static int cmd_lock(int argc, char **argv)
{
    const char *name = NULL;
    char **command_argv = NULL;
    double timeout = -1;
    int i, verbose = 0, rc, status = 0, has_token = 0, status_code;
    struct timespec t0, abstime;
    uint64_t token = 0;
    int prefer_writer = 0;
    pthread_t th;
    pid_t pid;
    const char *kind;
    struct sigaction ign;

    for (i = 0; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--") == 0) {
            command_argv = argv + i + 1;
            break;
        }
        if ((v = opt_value(argc, argv, &i, "--timeout"))) {
            char *end;
            errno = 0;
            timeout = strtod(v, &end);
            if (errno || *end || end == v || !(timeout >= 0) || timeout > 1e9)
                usage_error("--timeout wants seconds (like 1 or 0.5), got '%s'", v);
        } else if (strcmp(argv[i], "--fair") == 0) {
            lk.fair = 1;
        } else if (strcmp(argv[i], "--read") == 0 || strcmp(argv[i], "--write") == 0) {
            int mode = argv[i][2] == 'r' ? M_READ : M_WRITE;
            if (lk.mode != M_MUTEX && lk.mode != mode)
                usage_error("--read and --write exclude each other");
            lk.mode = mode;
        } else if (strcmp(argv[i], "--prefer-writer") == 0) {
            prefer_writer = 1;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
        } else if (!name) {
            name = argv[i];
        } else {
            command_argv = argv + i;   /* flock(1) style: no '--' */
            break;
        }
    }
    if (!name)
        usage_error("missing the lock NAME");
    check_name(name);
    if (!command_argv || !command_argv[0])
        usage_error("missing the COMMAND to run (after '--')");
    if (lk.fair && lk.mode != M_MUTEX)
        usage_error("--fair is for a mutex; an rwlock takes --read or --write");
    if (prefer_writer && lk.mode == M_MUTEX)
        usage_error("--prefer-writer goes with --read or --write");
    kind = lk.mode == M_READ ? "read lock" : lk.mode == M_WRITE ? "write lock"
         : lk.fair ? "fair mutex" : "mutex";

    redis_setup();
    lk.names = lock_names(name, strlen(name));
    srv_open(&lk.c, &lk.names->name);   /* fail early, and clearly */
    lk.owner_len = 0;
    {
        size_t len;
        const char *o = dist__owner(&len);
        if (len < sizeof lk.owner) {
            memcpy(lk.owner, o, len + 1);
            lk.owner_len = len;
        }
    }

    /* Signals: the thread takes them, everyone else has them blocked.
     * One ignored at start (nohup) stays ignored, for the command too. */
    sigemptyset(&lk.set);
    {
        static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
        size_t k;
        for (k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
            struct sigaction old;
            sigaction(sigs[k], NULL, &old);
            if (old.sa_handler != SIG_IGN)
                sigaddset(&lk.set, sigs[k]);
        }
    }
    pthread_sigmask(SIG_BLOCK, &lk.set, &lk.old_mask);
    if ((rc = pthread_create(&th, NULL, signal_thread, NULL)) != 0)
        die(EX_REDIS, "cannot start a thread: %s", strerror(rc));
    pthread_detach(th);
    dist_set_lost_handler(on_lost, NULL);

    if ((rc = obj_init(name, prefer_writer)) != 0)
        die(rc == EINVAL ? EX_USAGE : EX_REDIS, "%s", dist_last_error());

    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (timeout == 0) {
        rc = obj_lock(1, NULL);
    } else if (timeout > 0) {
        clock_gettime(CLOCK_REALTIME, &abstime);
        abstime.tv_sec += (time_t)timeout;
        abstime.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
        if (abstime.tv_nsec >= 1000000000L) {
            abstime.tv_sec++;
            abstime.tv_nsec -= 1000000000L;
        }
        rc = obj_lock(0, &abstime);
    } else {
        rc = obj_lock(0, NULL);
    }

    pthread_mutex_lock(&lk.mu);
    if (lk.phase == PH_ABANDON) {
        /* a signal came while waiting: nothing runs */
        int sig = lk.sig;
        lk.phase = PH_DONE;
        pthread_cond_broadcast(&lk.cv);
        pthread_mutex_unlock(&lk.mu);
        if (rc == 0)
            obj_unlock();
        exit(128 + sig);
    }
    if (rc != 0) {
        lk.phase = PH_DONE;
        pthread_mutex_unlock(&lk.mu);
        if (rc == EBUSY || rc == ETIMEDOUT) {
            print_busy(name, since(&t0));
            exit(EX_BUSY);
        }
        die(rc == EINVAL ? EX_USAGE : EX_REDIS, "cannot lock '%s': %s", name,
            lib_error(lk.names));
    }
    if (obj_token(&token) == 0)
        has_token = 1;
    if (verbose)
        verbose_line("acquired", name, kind, since(&t0), has_token, token, 0);
    if (has_token) {
        char tok[32];
        snprintf(tok, sizeof tok, "%" PRIu64, token);
        setenv("DISTLOCK_TOKEN", tok, 1);
    } else {
        unsetenv("DISTLOCK_TOKEN");
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        /* the command: distlock's process group, the original signal
         * mask and SIGPIPE disposition, no descriptor of ours */
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &ign, NULL);
        cloexec_ours();
        pthread_sigmask(SIG_SETMASK, &lk.old_mask, NULL);
        execvp(command_argv[0], command_argv);
        {
            int e = errno;
            char msg[512];
            int n = snprintf(msg, sizeof msg, "distlock: cannot run '%s': %s\n",
                             command_argv[0], strerror(e));
            if (n > 0)
                (void)!write(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
            _exit(e == ENOENT ? 127 : 126);
        }
    }
    if (pid < 0) {
        int e = errno;
        lk.phase = PH_DONE;
        pthread_mutex_unlock(&lk.mu);
        obj_unlock();
        die(EX_REDIS, "cannot fork: %s", strerror(e));
    }
    lk.child = pid;
    lk.phase = PH_RUN;
    pthread_mutex_unlock(&lk.mu);

    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&lk.mu);
    lk.phase = PH_DONE;
    lk.child = 0;
    pthread_mutex_unlock(&lk.mu);

    if (WIFEXITED(status))
        status_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        status_code = 128 + WTERMSIG(status);
    else
        status_code = 128;

    rc = obj_unlock();
    if (rc == EPERM)
        say("'%s' was no longer held when the command ended (lost or forced)", name);
    else if (rc != 0)
        say("could not release '%s': %s; it frees itself when its lease ends",
            name, lib_error(lk.names));
    if (verbose)
        verbose_line("released", name, kind, since(&t0), 0, 0, status_code);
    obj_destroy();
    dist_shutdown();
    return status_code;
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int i;
    const char *cmd = NULL;
    struct sigaction sa;

    note_startup_fds();
    /* A Redis socket that closed must give an error, not kill us; `lock`
     * gives its command the original disposition back. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("distlock %d.%d.%d\n", DIST_VERSION_MAJOR, DIST_VERSION_MINOR,
                   DIST_VERSION_PATCH);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
            continue;
        }
        cmd = argv[i];
        break;
    }
    if (!cmd) {
        fputs(usage_main, stderr);
        return EX_USAGE;
    }
    if (strcmp(cmd, "help") == 0) {
        const char *u = i + 1 < argc ? usage_of(argv[i + 1]) : usage_main;
        if (!u)
            usage_error("no command '%s'", argv[i + 1]);
        fputs(u, stdout);
        return 0;
    }
    if (!usage_of(cmd))
        usage_error("no command '%s'", cmd);
    cur_cmd = cmd;
    argc -= i + 1;
    argv += i + 1;
    if (strcmp(cmd, "status") == 0)
        return cmd_status(argc, argv);
    if (strcmp(cmd, "list") == 0)
        return cmd_list(argc, argv);
    if (strcmp(cmd, "lock") == 0)
        return cmd_lock(argc, argv);
    if (strcmp(cmd, "unlock") == 0)
        return cmd_unlock(argc, argv);
    return cmd_watch(argc, argv);
}
