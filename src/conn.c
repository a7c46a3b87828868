/* conn.c: one hiredis connection per thread, and script calls on it.
 * A connection whose context failed is dead: it is freed and reopened. */
#define _GNU_SOURCE   /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct tconn {
    redisContext *c;
    unsigned long cfg_gen;
    unsigned long fork_gen;
};

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t conn_key;
static __thread struct tconn *my_conn;

static void conn_destructor(void *p)
{
    struct tconn *t = p;

    /* A context inherited across fork() is the parent's socket: closing our
     * copy of the descriptor is harmless to it, sending anything is not,
     * and redisFree sends nothing. */
    if (t->c)
        redisFree(t->c);
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

static const char *where(const struct dist__cfg *cfg, char *buf, size_t len)
{
    if (cfg->path[0])
        snprintf(buf, len, "unix:%s", cfg->path);
    else
        snprintf(buf, len, "%s:%d", cfg->host, cfg->port);
    return buf;
}

/* Sends one command during set-up; 0 or EIO with the reason. */
static int setup_cmd(redisContext *c, const char *what, int argc,
                     const char **argv)
{
    struct dist__sigpipe sp;
    redisReply *r;

    dist__sigpipe_block(&sp);
    r = redisCommandArgv(c, argc, argv, NULL);
    dist__sigpipe_restore(&sp);

    if (!r)
        return dist__err(EIO, "%s: %s", what, c->errstr[0] ? c->errstr : "no reply");
    if (r->type == REDIS_REPLY_ERROR) {
        dist__err(EIO, "%s refused: %.*s", what, (int)r->len, r->str);
        freeReplyObject(r);
        return EIO;
    }
    freeReplyObject(r);
    return 0;
}

int dist__connect(const struct dist__cfg *cfg, redisContext **out)
{
    struct timeval tv = ms_tv(cfg->timeout_ms);
    redisContext *c;
    char w[300];

    *out = NULL;
    if (cfg->bad[0])
        return dist__err(EIO, "%s", cfg->bad);
    if (cfg->path[0])
        c = redisConnectUnixWithTimeout(cfg->path, tv);
    else
        c = redisConnectWithTimeout(cfg->host, cfg->port, tv);
    if (!c)
        return dist__err(ENOMEM, "out of memory connecting to Redis");
    if (c->err) {
        dist__err(EIO, "cannot connect to Redis at %s: %s",
                  where(cfg, w, sizeof w), c->errstr);
        redisFree(c);
        return EIO;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return dist__err(EIO, "cannot set the Redis command timeout");
    }
    if (cfg->pass[0]) {
        const char *argv[3] = { "AUTH", cfg->user, cfg->pass };
        int rc = cfg->user[0] ? setup_cmd(c, "AUTH", 3, argv)
                              : (argv[1] = cfg->pass, setup_cmd(c, "AUTH", 2, argv));
        if (rc) {
            redisFree(c);
            return rc;
        }
    }
    if (cfg->db) {
        char db[16];
        const char *argv[2] = { "SELECT", db };
        snprintf(db, sizeof db, "%d", cfg->db);
        if (setup_cmd(c, "SELECT", 2, argv)) {
            redisFree(c);
            return EIO;
        }
    }
    *out = c;
    return 0;
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

redisContext *dist__conn(void)
{
    struct tconn *t = my_conn;
    unsigned long fgen = atomic_load(&dist__fork_gen);
    unsigned long cgen = dist__cfg_gen();
    struct dist__cfg cfg;

    if (!t) {
        pthread_once(&key_once, key_init);
        t = calloc(1, sizeof *t);
        if (!t) {
            dist__err(ENOMEM, "out of memory");
            return NULL;
        }
        pthread_setspecific(conn_key, t);
        my_conn = t;
    }
    if (t->c && (t->fork_gen != fgen || t->cfg_gen != cgen || !alive(t->c))) {
        redisFree(t->c);
        t->c = NULL;
    }
    if (t->c)
        return t->c;
    dist__cfg_get(&cfg);
    if (dist__connect(&cfg, &t->c) != 0)
        return NULL;
    t->cfg_gen = cfg.gen;
    t->fork_gen = fgen;
    return t->c;
}

void dist__conn_drop(void)
{
    if (my_conn && my_conn->c) {
        redisFree(my_conn->c);
        my_conn->c = NULL;
    }
}

void dist__conn_close_thread(void)
{
    dist__conn_drop();
}

const char *dist__publish_cmd(void)
{
    return "publish";
}

#define STACK_ARGS 24

int dist__eval(redisContext *c, int script, int nkeys,
               const struct dist__buf *kv, int nkv, redisReply **out)
{
    const struct dist__script *s = &dist__scripts[script];
    struct dist__sigpipe sp;
    const char *sargv[STACK_ARGS];
    size_t slen[STACK_ARGS];
    const char **argv = sargv;
    size_t *argvlen = slen;
    char nk[16];
    redisReply *r;
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
    /* EVALSHA first; NOSCRIPT (after SCRIPT FLUSH or a restart) means the
     * server lost the script: EVAL sends the body and caches it again. */
    dist__sigpipe_block(&sp);
    for (pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            argv[0] = "EVALSHA"; argvlen[0] = 7;
            argv[1] = s->sha;    argvlen[1] = 40;
        } else {
            argv[0] = "EVAL";    argvlen[0] = 4;
            argv[1] = s->body;   argvlen[1] = s->len;
        }
        r = redisCommandArgv(c, argc, argv, argvlen);
        if (!r) {
            dist__err(EIO, "Redis connection failed during %s: %s", s->name,
                      c->errstr[0] ? c->errstr : "no reply");
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
    if (r->type == REDIS_REPLY_ERROR) {
        dist__err(EIO, "Redis refused %s: %.*s", s->name, (int)r->len, r->str);
        freeReplyObject(r);
        return DIST__EREPLY;
    }
    *out = r;
    return 0;
}

int dist__eval_here(int script, int nkeys, const struct dist__buf *kv,
                    int nkv, redisReply **out)
{
    redisContext *c = dist__conn();
    int rc;

    *out = NULL;
    if (!c)
        return DIST__ENOCONN;
    rc = dist__eval(c, script, nkeys, kv, nkv, out);
    if (rc == DIST__ECONN)
        dist__conn_drop();
    return rc;
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
    for (i = 0; i < NDERIVED; i++) {
        size_t l = derive_at(p, derived_prefix[i], strlen(derived_prefix[i]),
                             &n->name, braces, "", 0);
        field[i]->p = p;
        field[i]->len = l;
        p += l + 1;
    }
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
