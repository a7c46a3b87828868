/* snap.c: one lock's state as read from Redis: who holds it, its lease,
 * who waits, the last token.  Read with one MULTI/EXEC (a consistent
 * picture), on the master that holds the lock. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

const char *const kind_name[] = { NULL, "mutex", "fair mutex", "rwlock",
                                  "unknown" };
const char *const state_name[] = { "free", "held", "read-held", "write-held",
                                   "unknown" };

void snap_free(struct snap *s)
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
    free(s->r_held);
    free(s->r_dead);
    free(s->r_nr);
    dist__names_unref(s->names);
    memset(s, 0, sizeof *s);
}

struct dist__names *names_of(const char *name, size_t len)
{
    struct dist__names *n = dist__names_new(name, len);

    if (!n)
        die(EX_REDIS, "out of memory");
    return n;
}

/* On a cluster the keys of a lock must share a slot (a script or a MULTI
 * is refused otherwise): they do unless N has a '{' that opens no tag or a
 * '}' without a '{'. */
int names_fit(const struct dist__names *n)
{
    return !on_cluster() || n->slot >= 0;
}

struct dist__names *lock_names(const char *name, size_t len)
{
    struct dist__names *n = names_of(name, len);

    if (!names_fit(n))
        die(EX_USAGE,
            "'%s' cannot be a lock on a Redis Cluster: its keys "
            "would fall in different slots (it has a '{' that opens no "
            "{tag}, or a '}' without a '{')",
            name);
    return n;
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
void owner_split(const char *o, size_t n, size_t *clen, const char **thr,
                 size_t *tlen)
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

/* An owner for --json: the whole field, its client and its thread. */
void json_owner(struct sb *b, const char *o, size_t n)
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

void human_owner(struct sb *b, const char *o, size_t n)
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

/* A thread's part of an owner: letters, digits, '-', '_', '.', at least
 * one.  Java's are thread ids; node-redisson's default is a second UUID. */
static int is_id(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i]))
            return 0;
    return n > 0;
}

/* "<uuid>:<digits>" (distlock, Redisson) or "<uuid>:<uuid>" (node-redisson),
 * the strict form `list` looks for. */
int owner_strict(const char *o, size_t n)
{
    size_t clen, tlen;
    const char *t;

    owner_split(o, n, &clen, &t, &tlen);
    return is_uuid(o, clen) && (is_digits(t, tlen) || is_uuid(t, tlen));
}

/* "<something>:<id>": what status shows as a holder (with integer counts). */
static int owner_loose(const char *o, size_t n)
{
    size_t clen, tlen;
    const char *t;

    owner_split(o, n, &clen, &t, &tlen);
    return clen > 0 && is_id(t, tlen);
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

/* A waiter's window: its deadline (a ZSET score, server ms) - now, or
 * LLONG_MIN when the score is no such time (a hostile "1e300" or "nan"
 * must not reach a conversion to an integer). */
static long long window_of(const redisReply *score, long long now)
{
    double d;

    if (score->type != REDIS_REPLY_STRING)
        return LLONG_MIN;
    d = strtod(score->str, NULL);
    if (!(d > -1e15 && d < 1e15))
        return LLONG_MIN;
    return (long long)d - now;
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
            int str = e->type == REDIS_REPLY_STRING;
            w->owner = xmemdup(str ? e->str : "", str ? e->len : 0);
            w->olen = str ? e->len : 0;
            w->window_ms = LLONG_MIN;
            if (zr && zr->type == REDIS_REPLY_ARRAY)
                for (j = 0; j + 1 < zr->elements; j += 2) {
                    const redisReply *m = zr->element[j],
                                     *sc = zr->element[j + 1];
                    if (m->type == REDIS_REPLY_STRING && m->len == w->olen &&
                        memcmp(m->str, w->owner, w->olen) == 0)
                        w->window_ms = window_of(sc, now);
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
        int str = m->type == REDIS_REPLY_STRING;
        w->owner = xmemdup(str ? m->str : "", str ? m->len : 0);
        w->olen = str ? m->len : 0;
        w->window_ms = window_of(sc, now);
    }
}

/* The read-hold timeout key {N}:<owner>:rwlock_timeout:<k>. */
char *read_key(const struct dist__names *n, const struct holder *h,
               long long k, size_t *len)
{
    struct sb suf = { 0 };
    char *key;

    if (!(key = dist__names_read_prefix(n, h->owner, h->olen, len)))
        die(EX_REDIS, "out of memory");
    sb_addn(&suf, key, *len);
    sb_printf(&suf, "%lld", k);
    free(key);
    *len = suf.len;
    return suf.p;
}

/* ---- reading ------------------------------------------------------------- */

void snap_args_free(struct snap_args *x)
{
    free(x->keys);
    x->keys = NULL;
}

static const char *const snap_name[SNAP_CMDS] = {
    "MULTI",  "TYPE",   "HGETALL", "PTTL", "GET",
    "LRANGE", "ZRANGE", "ZRANGE",  "TIME", "EXEC",
};

/* MULTI; the reads; EXEC: a consistent picture of N in one round trip. */
void snap_cmds(const struct dist__names *n, struct snap_args *x,
               struct dist__cmd *cmds)
{
    const char *const *name = snap_name;
    static const int argc[SNAP_CMDS] = { 1, 2, 2, 2, 2, 4, 5, 5, 1, 1 };
    static const enum dist__nm read[] = {
        DIST__N_TOKEN,
        DIST__N_QUEUE,
        DIST__N_TIMEOUT,
        DIST__N_RW_WRITERS,
    };
    const struct dist__buf *k = x->keys = dist__names_set(n, read, 4);
    const struct dist__buf *key[SNAP_CMDS] = {
        NULL,  &n->name, &n->name, &n->name, k,
        k + 1, k + 2,    k + 3,    NULL,     NULL,
    };
    int i;

    if (!k)
        die(EX_REDIS, "out of memory");
    for (i = 0; i < SNAP_CMDS; i++) {
        x->a[i][0] = name[i];
        x->l[i][0] = strlen(name[i]);
        if (key[i]) {
            x->a[i][1] = key[i]->p;
            x->l[i][1] = key[i]->len;
        }
        x->a[i][2] = "0";
        x->l[i][2] = 1;
        x->a[i][3] = "-1";
        x->l[i][3] = 2;
        x->a[i][4] = "WITHSCORES";
        x->l[i][4] = 10;
        cmds[i] = (struct dist__cmd){ argc[i], x->a[i], x->l[i] };
    }
}

/* TIME's [seconds, microseconds], when it is that. */
static long long server_ms(const redisReply *x)
{
    long long sec, usec;

    if (x->type != REDIS_REPLY_ARRAY || x->elements != 2 ||
        x->element[0]->type != REDIS_REPLY_STRING ||
        x->element[1]->type != REDIS_REPLY_STRING ||
        parse_ll(x->element[0]->str, x->element[0]->len, &sec) != 0 ||
        parse_ll(x->element[1]->str, x->element[1]->len, &usec) != 0 ||
        sec < 0 || sec > LLONG_MAX / 2000 || usec < 0)
        return 0;
    return sec * 1000 + usec / 1000;
}

static int is_str(const redisReply *r, const char *s)
{
    size_t n = strlen(s);

    return r->type == REDIS_REPLY_STRING && r->len == n &&
           memcmp(r->str, s, n) == 0;
}

/* Whether the hash's fields (alternating with values in e) have a "mode"
 * field, as a read-write lock has; an odd mode makes it no lock. */
static int hash_mode(struct snap *s, const redisReply *e)
{
    size_t i;
    int has_mode = 0;

    for (i = 0; i + 1 < e->elements; i += 2) {
        const redisReply *f = e->element[i], *v = e->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
            s->lockish = s->ownerish = 0;
        } else if (is_str(f, "mode")) {
            has_mode = 1;
            if (!is_str(v, "read") && !is_str(v, "write"))
                s->lockish = s->ownerish = 0;
        }
    }
    return has_mode;
}

/* The holders, from HGETALL's reply e.  Returns whether it has a mode. */
static int parse_holders(struct snap *s, const redisReply *e)
{
    size_t i;
    int has_mode;

    s->lockish = s->ownerish = 1;
    has_mode = hash_mode(s, e);
    for (i = 0; i + 1 < e->elements; i += 2) {
        const redisReply *f = e->element[i], *v = e->element[i + 1];
        size_t olen = f->len;
        int write = 0;
        long long count;
        struct holder *h;

        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            is_str(f, "mode"))
            continue;
        if (has_mode && olen > 6 &&
            memcmp(f->str + olen - 6, ":write", 6) == 0) {
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
    return has_mode;
}

/* Kind and state from what was read. */
static void classify(struct snap *s, int has_mode)
{
    size_t j;

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
}

/* EXEC's eight replies into s. */
static void parse_exec(struct snap *s, redisReply **e)
{
    int has_mode = 0;

    s->now_ms = server_ms(e[7]);
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
        e[1]->elements >= 2)
        has_mode = parse_holders(s, e[1]);
    classify(s, has_mode);
}

/* The first of EXEC's eight replies that is not what its command gives
 * (the reads of a key may also fail: a key of another type), or -1. */
static int exec_odd(redisReply **e)
{
    static const int want[7] = {
        REDIS_REPLY_STATUS, REDIS_REPLY_ARRAY, REDIS_REPLY_INTEGER,
        REDIS_REPLY_STRING, REDIS_REPLY_ARRAY, REDIS_REPLY_ARRAY,
        REDIS_REPLY_ARRAY,
    };
    int i;

    for (i = 0; i < 7; i++)
        if (e[i]->type != want[i] &&
            (i == 0 || e[i]->type != REDIS_REPLY_ERROR) &&
            !(i == 3 && e[i]->type == REDIS_REPLY_NIL))
            return i;
    return server_ms(e[7]) > 0 ? -1 : 7;
}

int snap_parse(struct snap *s, redisReply **r, const char *where)
{
    static const struct dist__addr nowhere;
    struct dist__addr to;
    redisReply *x = r[SNAP_CMDS - 1];
    int i, slot;

    /* on a cluster the first queued read that is redirected says where;
     * EXEC then refuses them all */
    for (i = 0; i < SNAP_CMDS; i++)
        if (r[i]->type == REDIS_REPLY_ERROR &&
            dist__redirect_of(r[i], &nowhere, &slot, &to) != DIST__R_NONE)
            return 1;
    for (i = 0; i < SNAP_CMDS - 1; i++)
        if (r[i]->type == REDIS_REPLY_ERROR)
            die(EX_REDIS, "Redis at %s refused a read: %s", where, r[i]->str);
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 8)
        die(EX_REDIS, "Redis at %s: unexpected answer to EXEC%s%s", where,
            x->type == REDIS_REPLY_ERROR ? ": " : "",
            x->type == REDIS_REPLY_ERROR ? x->str : "");
    if ((i = exec_odd(x->element)) >= 0)
        die(EX_REDIS,
            "Redis at %s: unexpected answer to %s inside EXEC (a "
            "broken or hostile server)",
            where, snap_name[i + 1]);
    parse_exec(s, x->element);
    return 0;
}

/* Sends the PTTLs of the n read-hold keys (av, lens: "PTTL", key pairs,
 * in the order of s's holders) and keeps each reader's longest. */
static void read_pttls(struct snap *s, const char **av, const size_t *lens,
                       size_t n)
{
    struct dist__cmd *cmds = xrealloc(NULL, n * sizeof *cmds);
    redisReply **r = xrealloc(NULL, n * sizeof *r);
    size_t i, k = 0;
    long long j;

    for (k = 0; k < n; k++)
        cmds[k] = (struct dist__cmd){ 2, av + 2 * k, lens + 2 * k };
    if (dist__route_cmds(rlimit, &s->names->name, (int)n, cmds, r, NULL) != 0)
        die(EX_REDIS, "cannot read '%s': %s", B(s->names->name), redis_why());
    for (i = 0, k = 0; i < s->nh; i++)
        for (j = 1; j <= s->h[i].reads && j <= READ_KEYS_MAX; j++, k++) {
            long long *lease = &s->h[i].lease_ms; /* -3: no key found */
            if (r[k]->type == REDIS_REPLY_INTEGER) {
                if (r[k]->integer == -1)
                    *lease = -1; /* no expiry: longest */
                else if (r[k]->integer >= 0 && *lease != -1 &&
                         r[k]->integer > *lease)
                    *lease = r[k]->integer;
            }
            freeReplyObject(r[k]);
        }
    free(cmds);
    free(r);
}

/* Each reader's lease: the longest PTTL of its read-hold keys. */
/* A string element of a reply, malloc'd; NULL when it is none. */
static char *str_of(const redisReply *e)
{
    return e->type == REDIS_REPLY_STRING ? xmemdup(e->str, e->len) : NULL;
}

/* The robust mutex's record, if there is one (a second read: the picture
 * of the lock itself is what the other commands share). */
struct dist__buf *robust_key(const struct dist__names *n)
{
    static const enum dist__nm which[] = { DIST__N_ROBUST };
    struct dist__buf *k = dist__names_set(n, which, 1);

    if (!k)
        die(EX_REDIS, "out of memory");
    return k;
}

static void read_robust(struct snap *s)
{
    static const char *const av[] = { "HMGET", NULL, "held", "dead", "nr" };
    struct dist__buf *key = robust_key(s->names);
    const char *a[5];
    size_t l[5], i;
    struct dist__cmd cmd = { 5, a, l };
    redisReply *r;
    int rc;

    for (i = 0; i < 5; i++) {
        a[i] = i == 1 ? B(key[0]) : av[i];
        l[i] = i == 1 ? L(key[0]) : strlen(av[i]);
    }
    rc = dist__route_cmds(rlimit, &s->names->name, 1, &cmd, &r, NULL);
    free(key);
    if (rc != 0)
        die(EX_REDIS, "cannot read '%s': %s", B(s->names->name), redis_why());
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        s->r_held = str_of(r->element[0]);
        s->r_dead = str_of(r->element[1]);
        s->r_nr = str_of(r->element[2]);
        s->has_robust = s->r_held || s->r_dead || s->r_nr;
    }
    /* anything else (a key of another type) is no record of ours */
    freeReplyObject(r);
}

static void read_leases(struct snap *s)
{
    size_t i, n = 0, k = 0;
    const char **av;
    size_t *lens;
    long long j;

    for (i = 0; i < s->nh; i++)
        n += (size_t)(s->h[i].reads < READ_KEYS_MAX ? s->h[i].reads
                                                    : READ_KEYS_MAX);
    if (s->kind != KIND_RWLOCK || n == 0)
        return;
    av = xrealloc(NULL, 2 * n * sizeof *av);
    lens = xrealloc(NULL, 2 * n * sizeof *lens);
    for (i = 0; i < s->nh; i++)
        for (j = 1; j <= s->h[i].reads && j <= READ_KEYS_MAX; j++, k++) {
            av[2 * k] = "PTTL";
            lens[2 * k] = 4;
            av[2 * k + 1] = read_key(s->names, &s->h[i], j, &lens[2 * k + 1]);
        }
    read_pttls(s, av, lens, n);
    for (k = 0; k < n; k++)
        free((char *)av[2 * k + 1]);
    free(av);
    free(lens);
}

void snap_take(const char *name, size_t len, struct snap *s)
{
    struct dist__names *n = lock_names(name, len);
    struct dist__cmd cmds[SNAP_CMDS];
    redisReply *r[SNAP_CMDS];
    struct snap_args args;
    struct dist__link *on;
    int i;

    memset(s, 0, sizeof *s);
    s->names = n;
    snap_cmds(n, &args, cmds);
    if (dist__route_cmds(rlimit, &n->name, SNAP_CMDS, cmds, r, &on) != 0)
        die(EX_REDIS, "cannot read '%s': %s", name, redis_why());
    /* the route followed every redirection: none is left */
    snap_args_free(&args);
    if (snap_parse(s, r, dist__link_where(on)) != 0)
        die(EX_REDIS, "cannot read '%s': redirected", name);
    for (i = 0; i < SNAP_CMDS; i++)
        freeReplyObject(r[i]);
    s->taken_ms = dist__now_ms();
    read_leases(s);
    read_robust(s);
}
