/* objs.c: the picture of a condition variable, a semaphore (leased or
 * Redisson) or a barrier named N, read in one MULTI/EXEC, and its printing
 * for status and list.  The keys are those the library's scripts keep
 * (lua/prelude_cond.lua, prelude_sem.lua, prelude_barrier.lua). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

/* The reads, in the order of their replies inside EXEC. */
enum {
    R_TYPE,
    R_GET,
    R_CWAIT,
    R_CQUEUE,
    R_CSIG,
    R_SFREE,
    R_SHOLDS,
    R_SLEASES,
    R_BAR,
    R_BMEMBERS,
    R_TIME,
    R_N
};
#define OBJ_CMDS (R_N + 2) /* MULTI, the reads, EXEC */

/* Derived keys, by the reads that use them (-1: the name). */
static const int obj_key_name[R_N] = {
    -1,
    -1,
    DIST__N_COND_WAITERS,
    DIST__N_COND_QUEUE,
    DIST__N_COND_SIGNALLED,
    DIST__N_SEM,
    DIST__N_SEM_HOLDS,
    DIST__N_SEM_LEASES,
    DIST__N_BARRIER,
    DIST__N_BARRIER_MEMBERS,
    -1,
};

static const char *const obj_kind_name[] = {
    [OBJ_COND] = "cond",
    [OBJ_SEM] = "sem",
    [OBJ_RSEM] = "rsem",
    [OBJ_BARRIER] = "barrier",
};

const char *obj_kind_text(int kind)
{
    return kind > OBJ_NONE && kind <= OBJ_BARRIER ? obj_kind_name[kind]
                                                  : NULL;
}

int obj_kind_of(const char *s)
{
    int k;

    for (k = OBJ_COND; k <= OBJ_BARRIER; k++)
        if (strcmp(s, obj_kind_name[k]) == 0)
            return k;
    return OBJ_NONE;
}

/* Each command, its key (argument 1) left out: filled in by obj_cmds. */
static const char *const obj_cmd[R_N][5] = {
    { "TYPE" },
    { "GET" },
    { "ZRANGE", NULL, "0", "-1", "WITHSCORES" },
    { "LRANGE", NULL, "0", "-1" },
    { "SMEMBERS" },
    { "HGET", NULL, "free" },
    { "HGETALL" },
    { "ZRANGE", NULL, "0", "-1", "WITHSCORES" },
    { "HGETALL" },
    { "ZRANGE", NULL, "0", "-1", "WITHSCORES" },
    { "TIME" },
};
static const int obj_argc[R_N] = { 2, 2, 5, 4, 2, 3, 2, 5, 2, 5, 1 };

struct obj_args {
    const char *a[R_N][5];
    size_t l[R_N][5];
    char *keys[R_N];
};

static void obj_cmds(const struct dist__names *n, struct obj_args *x,
                     struct dist__cmd *cmds)
{
    static const char *multi = "MULTI", *exec = "EXEC";
    static const size_t five = 5, four = 4;
    int i, j;

    memset(x, 0, sizeof *x);
    cmds[0] = (struct dist__cmd){ 1, &multi, &five };
    for (i = 0; i < R_N; i++) {
        size_t kl = L(n->name);
        const char *k = B(n->name);
        if (obj_key_name[i] >= 0) {
            x->keys[i] = dist__names_derive(n, obj_key_name[i], "", &kl);
            if (!x->keys[i])
                die(EX_REDIS, "out of memory");
            k = x->keys[i];
        }
        for (j = 0; j < obj_argc[i]; j++) {
            x->a[i][j] = j == 1 ? k : obj_cmd[i][j];
            x->l[i][j] = j == 1 ? kl : strlen(obj_cmd[i][j]);
        }
        cmds[i + 1] = (struct dist__cmd){ obj_argc[i], x->a[i], x->l[i] };
    }
    cmds[R_N + 1] = (struct dist__cmd){ 1, &exec, &four };
}

static long long reply_ll(const redisReply *r)
{
    long long v;

    if (r && r->type == REDIS_REPLY_STRING &&
        parse_ll(r->str, r->len, &v) == 0)
        return v;
    return LLONG_MIN;
}

static int nonempty(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements > 0;
}

/* Which kinds have keys under n (bits 1 << OBJ_*), and whether the lock
 * key N is a hash (a lock). */
static void obj_classify(struct obj *o)
{
    redisReply **e = o->e->element;

    o->present = 0;
    if (nonempty(e[R_CWAIT]) || nonempty(e[R_CQUEUE]) || nonempty(e[R_CSIG]))
        o->present |= 1 << OBJ_COND;
    if (e[R_SFREE]->type == REDIS_REPLY_STRING)
        o->present |= 1 << OBJ_SEM;
    if (e[R_TYPE]->type == REDIS_REPLY_STATUS &&
        strcmp(e[R_TYPE]->str, "string") == 0 &&
        reply_ll(e[R_GET]) != LLONG_MIN)
        o->present |= 1 << OBJ_RSEM;
    if (nonempty(e[R_BAR]))
        o->present |= 1 << OBJ_BARRIER;
    o->lock = e[R_TYPE]->type == REDIS_REPLY_STATUS &&
              strcmp(e[R_TYPE]->str, "hash") == 0;
}

void obj_take(const char *name, size_t len, struct obj *o)
{
    struct dist__cmd cmds[OBJ_CMDS];
    redisReply *r[OBJ_CMDS];
    struct obj_args x;
    redisReply *t;
    int i;

    memset(o, 0, sizeof *o);
    o->names = lock_names(name, len);
    obj_cmds(o->names, &x, cmds);
    if (dist__route_cmds(rlimit, &o->names->name, OBJ_CMDS, cmds, r, NULL) !=
        0)
        die(EX_REDIS, "cannot read '%s': %s", name, redis_why());
    for (i = 0; i < R_N; i++)
        free(x.keys[i]);
    for (i = 0; i < OBJ_CMDS - 1; i++)
        freeReplyObject(r[i]);
    o->e = r[OBJ_CMDS - 1];
    if (o->e->type != REDIS_REPLY_ARRAY || o->e->elements != R_N)
        die(EX_REDIS, "cannot read '%s': unexpected answer to EXEC%s%s", name,
            o->e->type == REDIS_REPLY_ERROR ? ": " : "",
            o->e->type == REDIS_REPLY_ERROR ? o->e->str : "");
    t = o->e->element[R_TIME];
    if (t->type != REDIS_REPLY_ARRAY || t->elements != 2)
        die(EX_REDIS, "cannot read '%s': unexpected answer to TIME", name);
    o->now_ms =
        reply_ll(t->element[0]) * 1000 + reply_ll(t->element[1]) / 1000;
    obj_classify(o);
}

void obj_free(struct obj *o)
{
    if (o->e)
        freeReplyObject(o->e);
    if (o->names)
        dist__names_unref(o->names);
    memset(o, 0, sizeof *o);
}

/* ---- reading the replies ------------------------------------------------- */

/* A field of an HGETALL reply as a number; LLONG_MIN when absent. */
static long long hash_ll(const redisReply *h, const char *field)
{
    size_t i;

    for (i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2)
        if (h->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(h->element[i]->str, field) == 0)
            return reply_ll(h->element[i + 1]);
    return LLONG_MIN;
}

static int in_set(const redisReply *set, const redisReply *m)
{
    size_t i;

    for (i = 0; set->type == REDIS_REPLY_ARRAY && i < set->elements; i++)
        if (set->element[i]->len == m->len &&
            memcmp(set->element[i]->str, m->str, m->len) == 0)
            return 1;
    return 0;
}

/* The liveness window of member i of a WITHSCORES reply: deadline - now. */
static long long window_of(const struct obj *o, const redisReply *z, size_t i)
{
    long long d = reply_ll(z->element[i + 1]);

    return d == LLONG_MIN ? LLONG_MIN : d - o->now_ms;
}

size_t obj_live(const struct obj *o, int which)
{
    const redisReply *z =
        o->e->element[which == OBJ_COND ? R_CWAIT : R_BMEMBERS];
    size_t i, n = 0;

    for (i = 0; z->type == REDIS_REPLY_ARRAY && i + 1 < z->elements; i += 2)
        if (window_of(o, z, i) >= 0)
            n++;
    return n;
}

size_t obj_entries(const struct obj *o, int kind)
{
    const redisReply *z = o->e->element[kind == OBJ_COND  ? R_CWAIT
                                        : kind == OBJ_SEM ? R_SHOLDS
                                                          : R_BMEMBERS];

    return z->type == REDIS_REPLY_ARRAY ? z->elements / 2 : 0;
}

void obj_sem_counts(const struct obj *o, long long *free_, long long *held)
{
    const redisReply *h = o->e->element[R_SHOLDS];
    size_t i;

    *free_ = reply_ll(o->e->element[R_SFREE]);
    *held = 0;
    for (i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        long long p = reply_ll(h->element[i + 1]);
        if (p > 0)
            *held += p;
    }
}

/* A holder's lease end from the leases ZSET, minus now; LLONG_MIN: none. */
static long long sem_lease(const struct obj *o, const redisReply *owner)
{
    const redisReply *z = o->e->element[R_SLEASES];
    size_t i;

    for (i = 0; z->type == REDIS_REPLY_ARRAY && i + 1 < z->elements; i += 2)
        if (z->element[i]->len == owner->len &&
            memcmp(z->element[i]->str, owner->str, owner->len) == 0)
            return window_of(o, z, i);
    return LLONG_MIN;
}

void obj_barrier(const struct obj *o, long long *count, long long *arrived,
                 long long *round, long long *broken)
{
    const redisReply *h = o->e->element[R_BAR];

    *count = hash_ll(h, "count");
    *arrived = hash_ll(h, "arrived");
    *round = hash_ll(h, "round");
    *broken = hash_ll(h, "broken");
}

/* Whether the barrier's last round ended broken (a dead member). */
int obj_broken(const struct obj *o)
{
    long long c, a, r, b;

    obj_barrier(o, &c, &a, &r, &b);
    return b != LLONG_MIN && r != LLONG_MIN && b == r - 1;
}

/* ---- printing ---------------------------------------------------------- */

static void json_ll(struct sb *b, const char *key, long long v)
{
    if (v == LLONG_MIN)
        sb_printf(b, ",\"%s\":null", key);
    else
        sb_printf(b, ",\"%s\":%lld", key, v);
}

/* "[{owner..., live, window_ms}, ...]" of a ZSET member -> deadline reply;
 * signalled (may be NULL) marks the members in it. */
static void json_members(struct sb *b, const struct obj *o, const char *key,
                         const redisReply *z, const redisReply *signalled)
{
    size_t i;

    sb_printf(b, ",\"%s\":[", key);
    for (i = 0; z->type == REDIS_REPLY_ARRAY && i + 1 < z->elements; i += 2) {
        long long w = window_of(o, z, i);
        sb_adds(b, i ? ",{" : "{");
        json_owner(b, z->element[i]->str, z->element[i]->len);
        sb_printf(b, ",\"live\":%s", w >= 0 ? "true" : "false");
        json_ll(b, "window_ms", w);
        if (signalled)
            sb_printf(b, ",\"signalled\":%s",
                      in_set(signalled, z->element[i]) ? "true" : "false");
        sb_adds(b, "}");
    }
    sb_adds(b, "]");
}

static void json_sem_holders(struct sb *b, const struct obj *o)
{
    const redisReply *h = o->e->element[R_SHOLDS];
    size_t i;

    sb_adds(b, ",\"holders\":[");
    for (i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        sb_adds(b, i ? ",{" : "{");
        json_owner(b, h->element[i]->str, h->element[i]->len);
        json_ll(b, "permits", reply_ll(h->element[i + 1]));
        json_ll(b, "lease_ms", sem_lease(o, h->element[i]));
        sb_adds(b, "}");
    }
    sb_adds(b, "]");
}

static void json_kind_body(struct sb *b, const struct obj *o, int kind)
{
    redisReply **e = o->e->element;
    long long f, h, c, a, r, br;

    if (kind == OBJ_COND) {
        json_members(b, o, "waiters", e[R_CWAIT], e[R_CSIG]);
        sb_printf(
            b, ",\"live\":%zu,\"queued\":%zu,\"signalled\":%zu",
            obj_live(o, OBJ_COND),
            e[R_CQUEUE]->type == REDIS_REPLY_ARRAY ? e[R_CQUEUE]->elements
                                                   : 0,
            e[R_CSIG]->type == REDIS_REPLY_ARRAY ? e[R_CSIG]->elements : 0);
    } else if (kind == OBJ_SEM) {
        obj_sem_counts(o, &f, &h);
        json_ll(b, "free", f);
        json_ll(b, "held", h);
        json_ll(b, "total", f == LLONG_MIN ? f : f + h);
        json_sem_holders(b, o);
    } else if (kind == OBJ_RSEM) {
        json_ll(b, "permits", reply_ll(e[R_GET]));
    } else {
        obj_barrier(o, &c, &a, &r, &br);
        json_ll(b, "count", c);
        json_ll(b, "arrived", a);
        json_ll(b, "round", r);
        sb_printf(b, ",\"broken\":%s", obj_broken(o) ? "true" : "false");
        json_ll(b, "broken_round", br);
        json_members(b, o, "members", e[R_BMEMBERS], NULL);
    }
}

void obj_json(const struct obj *o, int kind)
{
    struct sb b = { 0 };

    sb_adds(&b, "{\"name\":");
    sb_json(&b, B(o->names->name), L(o->names->name));
    sb_adds(&b, ",\"kind\":");
    sb_jsonz(&b, obj_kind_name[kind]);
    sb_printf(&b, ",\"exists\":%s",
              o->present & (1 << kind) ? "true" : "false");
    json_kind_body(&b, o, kind);
    sb_adds(&b, "}");
    sb_flush_line(&b);
    sb_free(&b);
}

static void human_window_of(struct sb *b, long long w)
{
    if (w == LLONG_MIN) {
        sb_adds(b, "no deadline");
    } else if (w >= 0) {
        sb_adds(b, "live, window ");
        sb_secs(b, w);
    } else {
        sb_adds(b, "not live (deadline passed ");
        sb_secs(b, -w);
        sb_adds(b, " ago; dropped at the next call)");
    }
}

static void human_members(struct sb *b, const struct obj *o, const char *what,
                          const redisReply *z, const redisReply *signalled)
{
    size_t i;

    for (i = 0; z->type == REDIS_REPLY_ARRAY && i + 1 < z->elements; i += 2) {
        sb_printf(b, "%-10s", what);
        human_owner(b, z->element[i]->str, z->element[i]->len);
        sb_adds(b, ", ");
        human_window_of(b, window_of(o, z, i));
        if (signalled && in_set(signalled, z->element[i]))
            sb_adds(b, ", signalled");
        sb_flush_line(b);
    }
}

static void human_sem(struct sb *b, const struct obj *o)
{
    const redisReply *h = o->e->element[R_SHOLDS];
    long long f, held, w;
    size_t i;

    obj_sem_counts(o, &f, &held);
    if (f == LLONG_MIN)
        sb_printf(b, "permits:  - (nothing in Redis)");
    else
        sb_printf(b, "permits:  %lld free, %lld held (total %lld)", f, held,
                  f + held);
    sb_flush_line(b);
    for (i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        sb_adds(b, "holder:   ");
        human_owner(b, h->element[i]->str, h->element[i]->len);
        sb_printf(b, ", %lld permit%s, ", reply_ll(h->element[i + 1]),
                  reply_ll(h->element[i + 1]) == 1 ? "" : "s");
        w = sem_lease(o, h->element[i]);
        if (w == LLONG_MIN) {
            sb_adds(b, "no lease");
        } else if (w >= 0) {
            sb_adds(b, "lease ");
            sb_secs(b, w);
            sb_adds(b, " left");
        } else {
            sb_adds(b, "lease over (its permits go back at the next call)");
        }
        sb_flush_line(b);
    }
}

static void human_barrier(struct sb *b, const struct obj *o)
{
    long long c, a, r, br;

    obj_barrier(o, &c, &a, &r, &br);
    if (c == LLONG_MIN) {
        sb_adds(b, "state:    - (nothing in Redis)");
        sb_flush_line(b);
        return;
    }
    sb_printf(b, "arrived:  %lld/%lld", a, c);
    sb_flush_line(b);
    sb_printf(b, "round:    %lld", r);
    sb_flush_line(b);
    if (obj_broken(o))
        sb_printf(b,
                  "broken:   round %lld (a member died; its waiters got "
                  "EOWNERDEAD)",
                  br);
    else if (br != LLONG_MIN)
        sb_printf(b, "broken:   no (round %lld was)", br);
    else
        sb_adds(b, "broken:   no");
    sb_flush_line(b);
    human_members(b, o, "member:", o->e->element[R_BMEMBERS], NULL);
}

void obj_human(const struct obj *o, int kind)
{
    struct sb b = { 0 };
    redisReply **e = o->e->element;

    sb_adds(&b, "name:     ");
    sb_human(&b, B(o->names->name), L(o->names->name));
    sb_flush_line(&b);
    sb_printf(&b, "kind:     %s",
              kind == OBJ_COND   ? "condition variable"
              : kind == OBJ_SEM  ? "semaphore (leased)"
              : kind == OBJ_RSEM ? "semaphore (Redisson)"
                                 : "barrier");
    sb_flush_line(&b);
    if (kind == OBJ_COND) {
        sb_printf(&b, "waiters:  %zu (%zu live)",
                  e[R_CWAIT]->type == REDIS_REPLY_ARRAY
                      ? e[R_CWAIT]->elements / 2
                      : 0,
                  obj_live(o, OBJ_COND));
        sb_flush_line(&b);
        human_members(&b, o, "waiter:", e[R_CWAIT], e[R_CSIG]);
    } else if (kind == OBJ_SEM) {
        human_sem(&b, o);
    } else if (kind == OBJ_RSEM) {
        if (reply_ll(e[R_GET]) == LLONG_MIN)
            sb_adds(&b, "permits:  - (no count in Redis)");
        else
            sb_printf(&b, "permits:  %lld", reply_ll(e[R_GET]));
        sb_flush_line(&b);
    } else {
        human_barrier(&b, o);
    }
    sb_free(&b);
}
