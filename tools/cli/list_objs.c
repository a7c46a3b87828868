/* list_objs.c: the conditions, semaphores and barriers for distlock list:
 * found by SCAN under their own key prefixes, matched by name against the
 * pattern, then read one by one as status reads them. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

/* The key that exists while each kind has something to show. */
static const struct {
    enum dist__nm key;
    int kind;
} obj_keys[] = {
    { DIST__N_COND_WAITERS, OBJ_COND },
    { DIST__N_SEM, OBJ_SEM },
    { DIST__N_BARRIER, OBJ_BARRIER },
};

/* The object name behind key k (after its prefix of pl bytes): "{N}" gives
 * N, as the library derives the keys of a name without braces. */
static char *name_of_key(const char *k, size_t n, size_t pl, size_t *len)
{
    const char *r = k + pl;
    size_t rl = n - pl;

    if (rl >= 2 && r[0] == '{' && r[rl - 1] == '}' &&
        !memchr(r + 1, '{', rl - 2) && !memchr(r + 1, '}', rl - 2)) {
        r++;
        rl -= 2;
    }
    *len = rl;
    return xmemdup(r, rl);
}

static void objs_add(struct objs *os, int kind, const char *k, size_t n,
                     size_t pl, const char *pattern)
{
    struct objname *e;
    size_t len;
    char *name = name_of_key(k, n, pl, &len);

    if (len == 0 || len > DIST_NAME_MAX || memchr(name, 0, len) ||
        fnmatch(pattern, name, 0) != 0) {
        free(name);
        return;
    }
    os->v = xrealloc(os->v, (os->n + 1) * sizeof *os->v);
    e = &os->v[os->n++];
    e->kind = kind;
    e->name = name;
    e->len = len;
}

struct objs_scan {
    const char *pattern;
    struct objs *os;
};

/* Keeps the keys of one SCAN page that name an object matching the
 * pattern. */
static void objs_page(const redisReply *page, void *arg)
{
    const struct objs_scan *sc = arg;
    size_t i, j, pl;

    for (i = 0; i < page->elements; i++) {
        const redisReply *k = page->element[i];
        if (k->type != REDIS_REPLY_STRING)
            continue;
        for (j = 0; j < sizeof obj_keys / sizeof obj_keys[0]; j++) {
            const char *pre = dist__names_prefix(obj_keys[j].key);
            pl = strlen(pre);
            if (k->len > pl && memcmp(k->str, pre, pl) == 0)
                objs_add(sc->os, obj_keys[j].kind, k->str, k->len, pl,
                         sc->pattern);
        }
    }
}

void objs_scan(struct dist__link *l, const char *pattern, struct objs *os)
{
    struct objs_scan sc = { pattern, os };

    /* every type: a semaphore's count is a string, its holds a hash */
    list_scan(l, dist__names_own_glob(), NULL, objs_page, &sc);
}

static int objname_cmp(const void *a, const void *b)
{
    const struct objname *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);

    if (c == 0)
        c = (x->len > y->len) - (x->len < y->len);
    return c ? c : x->kind - y->kind;
}

/* In name order, each once (SCAN may return a key twice). */
void objs_unique(struct objs *os)
{
    size_t i, u;

    if (os->n > 1)
        qsort(os->v, os->n, sizeof *os->v, objname_cmp);
    for (i = 0, u = 0; i < os->n; i++) {
        if (u > 0 && objname_cmp(&os->v[u - 1], &os->v[i]) == 0) {
            free(os->v[i].name);
            continue;
        }
        os->v[u++] = os->v[i];
    }
    os->n = u;
}

static void row_json(struct sb *b, const struct obj *o, int kind)
{
    long long f, h, c, a, r, br;
    size_t members = obj_entries(o, kind);

    sb_adds(b, "{\"name\":");
    sb_json(b, B(o->names->name), L(o->names->name));
    sb_printf(b, ",\"kind\":\"%s\"", obj_kind_text(kind));
    if (kind == OBJ_COND) {
        sb_printf(b, ",\"waiters\":%zu,\"live\":%zu}", members,
                  obj_live(o, OBJ_COND));
    } else if (kind == OBJ_SEM) {
        obj_sem_counts(o, &f, &h);
        sb_printf(b, ",\"free\":%lld,\"held\":%lld,\"holders\":%zu}", f, h,
                  obj_entries(o, OBJ_SEM));
    } else {
        obj_barrier(o, &c, &a, &r, &br);
        sb_printf(b,
                  ",\"count\":%lld,\"arrived\":%lld,\"round\":%lld,"
                  "\"broken\":%s,\"members\":%zu,\"live\":%zu}",
                  c, a, r, obj_broken(o) ? "true" : "false", members,
                  obj_live(o, OBJ_BARRIER));
    }
}

/* One table line: NAME KIND STATE LEASE HOLDERS WAITING, as locks have. */
static void row_text(struct sb *b, const struct obj *o, int kind,
                     size_t width)
{
    long long f, h, c, a, r, br;
    size_t start = b->len;
    char state[48];

    sb_human(b, B(o->names->name), L(o->names->name));
    while (b->len - start < width)
        sb_addn(b, " ", 1);
    if (kind == OBJ_COND) {
        snprintf(state, sizeof state, "%zu live", obj_live(o, OBJ_COND));
        sb_printf(b, "  %-10s  %-10s  %-9s  %7s  %7zu", "cond", state, "-",
                  "-", obj_entries(o, OBJ_COND));
    } else if (kind == OBJ_SEM) {
        obj_sem_counts(o, &f, &h);
        snprintf(state, sizeof state, "%lld free", f);
        sb_printf(b, "  %-10s  %-10s  %-9s  %7zu  %7s", "sem", state, "-",
                  obj_entries(o, OBJ_SEM), "-");
    } else {
        obj_barrier(o, &c, &a, &r, &br);
        if (obj_broken(o))
            snprintf(state, sizeof state, "broken");
        else
            snprintf(state, sizeof state, "%lld/%lld", a, c);
        sb_printf(b, "  %-10s  %-10s  %-9s  %7zu  %7lld", "barrier", state,
                  "-", obj_entries(o, OBJ_BARRIER), a);
    }
}

size_t objs_print(struct objs *os, size_t width, int heading)
{
    size_t i, shown = 0;
    struct obj o;

    objs_unique(os);
    for (i = 0; i < os->n; i++) {
        struct sb b = { 0 };
        obj_take(os->v[i].name, os->v[i].len, &o);
        /* gone since the scan: nothing to show */
        if (o.present & (1 << os->v[i].kind)) {
            if (!opt.json && heading && shown == 0) {
                sb_printf(&b, "%-*s  %-10s  %-10s  %-9s  %7s  %7s",
                          (int)width, "NAME", "KIND", "STATE", "LEASE",
                          "HOLDERS", "WAITING");
                sb_flush_line(&b);
            }
            if (opt.json)
                row_json(&b, &o, os->v[i].kind);
            else
                row_text(&b, &o, os->v[i].kind, width);
            sb_flush_line(&b);
            shown++;
        }
        sb_free(&b);
        obj_free(&o);
        free(os->v[i].name);
    }
    free(os->v);
    os->v = NULL;
    os->n = 0;
    return shown;
}
