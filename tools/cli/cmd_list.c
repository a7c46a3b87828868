/* cmd_list.c: distlock list [PATTERN]: SCAN every master for hashes whose
 * fields look like lock owners, and show each as status would, in short. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

#define LIST_BATCH      64
#define LIST_MAX_FIELDS 4096 /* a larger hash is not taken for a lock */
#define MAX_MASTERS     128
#define LIST_TIMEOUT_S  30.0 /* the listing's deadline unless --timeout */

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
    return dist__names_is_derived(k, n);
}

struct keys {
    struct key *v;
    size_t n;
};

/* Adds the keys of one SCAN page that may be locks. */
static void keys_page(const redisReply *page, void *arg)
{
    struct keys *ks = arg;
    size_t i;

    for (i = 0; i < page->elements; i++) {
        const redisReply *k = page->element[i];
        if (k->type != REDIS_REPLY_STRING || derived_key(k->str, k->len))
            continue;
        ks->v = xrealloc(ks->v, (ks->n + 1) * sizeof *ks->v);
        ks->v[ks->n].p = xmemdup(k->str, k->len);
        ks->v[ks->n++].n = k->len;
    }
}

/* Sorts keys and drops duplicates (SCAN may return a key twice). */
static size_t keys_unique(struct key *keys, size_t nkeys)
{
    size_t i, u;

    if (nkeys > 1)
        qsort(keys, nkeys, sizeof *keys, key_cmp);
    for (i = 0, u = 0; i < nkeys; i++) {
        if (u > 0 && key_cmp(&keys[u - 1], &keys[i]) == 0) {
            free(keys[i].p);
            continue;
        }
        keys[u++] = keys[i];
    }
    return u;
}

/* Adds s to rows when it is a lock; frees it otherwise. */
static void list_keep(struct snap *s, struct rows *rows)
{
    if (!s->lockish || s->kind == KIND_UNKNOWN || s->kind == KIND_NONE) {
        snap_free(s);
        return;
    }
    rows->s = xrealloc(rows->s, (rows->n + 1) * sizeof *rows->s);
    rows->s[rows->n++] = *s;
}

/* The next reply on l; exit 3 when the link fails. */
static redisReply *next_reply(struct dist__link *l, uint64_t until)
{
    redisReply *r;

    if (dist__link_reply(l, until, &r) != 0)
        die(EX_REDIS, "lost the connection to Redis at %s: %s",
            dist__link_where(l), dist__link_error(l));
    return r;
}

/* HLEN of each key (a hash with very many fields is not a lock: skipped
 * unread); moved[j] when a key's slot went elsewhere meanwhile. */
static void batch_hlen(struct dist__link *l, const struct key *keys, size_t n,
                       long long *len, int *moved)
{
    static const struct dist__addr nowhere;
    uint64_t until = dist__link_deadline(l, rlimit);
    struct dist__addr to;
    size_t j;
    int slot;

    for (j = 0; j < n; j++) {
        const char *a[2] = { "HLEN", keys[j].p };
        size_t ln[2] = { 4, keys[j].n };
        if (dist__link_append(l, 2, a, ln) != 0)
            die(EX_REDIS, "out of memory");
    }
    for (j = 0; j < n; j++) {
        redisReply *r = next_reply(l, until);
        len[j] = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        moved[j] = r->type == REDIS_REPLY_ERROR &&
                   dist__redirect_of(r, &nowhere, &slot, &to) != DIST__R_NONE;
        freeReplyObject(r);
    }
}

/* Queues a picture of n on l. */
static void snap_append(struct dist__link *l, const struct dist__names *n)
{
    struct dist__cmd cmds[SNAP_CMDS];
    struct snap_args args;
    int i;

    snap_cmds(n, &args, cmds);
    for (i = 0; i < SNAP_CMDS; i++)
        if (dist__link_append(l, cmds[i].argc, cmds[i].argv, cmds[i].lens) !=
            0)
            die(EX_REDIS, "out of memory");
    snap_args_free(&args);
}

/* Reads what snap_append queued into s: 0, or 1 when it was redirected. */
static int snap_read(struct dist__link *l, uint64_t until, struct snap *s)
{
    redisReply *r[SNAP_CMDS];
    int i, rc;

    for (i = 0; i < SNAP_CMDS; i++)
        r[i] = next_reply(l, until);
    rc = snap_parse(s, r, dist__link_where(l));
    for (i = 0; i < SNAP_CMDS; i++)
        freeReplyObject(r[i]);
    return rc;
}

/* Pictures of the keys that may be locks, in one pipeline; a key whose
 * slot moved meanwhile (a cluster being resharded) is read where it went. */
static void batch_snaps(struct dist__link *l, const struct key *keys,
                        size_t n, const long long *len, int *moved,
                        struct rows *rows)
{
    struct snap s[LIST_BATCH];
    uint64_t until;
    size_t j;

    for (j = 0; j < n; j++) {
        struct dist__names *nm;
        memset(&s[j], 0, sizeof s[j]);
        if (!moved[j] && (len[j] < 1 || len[j] > LIST_MAX_FIELDS))
            continue;
        nm = names_of(keys[j].p, keys[j].n);
        if (!names_fit(nm)) { /* not a lock a cluster can hold */
            dist__names_unref(nm);
            continue;
        }
        s[j].names = nm;
        if (!moved[j])
            snap_append(l, nm);
    }
    until = dist__link_deadline(l, rlimit);
    for (j = 0; j < n; j++) {
        if (!s[j].names)
            continue;
        if (!moved[j] && snap_read(l, until, &s[j]) != 0)
            moved[j] = 1;
        if (moved[j]) {
            dist__names_unref(s[j].names);
            snap_take(keys[j].p, keys[j].n, &s[j]);
        }
        list_keep(&s[j], rows);
    }
}

/* The locks among the keys SCAN found on l's server, in batches. */
static void list_server(struct dist__link *l, const struct key *keys,
                        size_t nkeys, struct rows *rows)
{
    long long len[LIST_BATCH];
    int moved[LIST_BATCH];
    size_t i, n;

    for (i = 0; i < nkeys; i += n) {
        n = nkeys - i < LIST_BATCH ? nkeys - i : LIST_BATCH;
        batch_hlen(l, keys + i, n, len, moved);
        batch_snaps(l, keys + i, n, len, moved, rows);
    }
}

/* Scans one master (a link confirmed as the master) for pattern. */
static void list_master(const struct dist__addr *a, const char *pattern,
                        struct rows *rows, struct objs *os, master_fn each,
                        void *arg)
{
    struct dist__link *l;
    struct keys ks = { NULL, 0 };
    size_t i;

    if (dist__route_open_master(&rcfg, a, rlimit, &l) != 0)
        die(EX_REDIS, "%s", redis_why());
    /* hashes only where the server filters by type; the snapshot checks */
    list_scan(l, pattern, "hash", keys_page, &ks);
    ks.n = keys_unique(ks.v, ks.n);
    list_server(l, ks.v, ks.n, rows);
    objs_scan(l, pattern, os);
    if (each)
        each(l, arg);
    for (i = 0; i < ks.n; i++)
        free(ks.v[i].p);
    free(ks.v);
    dist__link_close(l);
}

static int row_cmp(const void *a, const void *b)
{
    const struct snap *x = a, *y = b;
    struct key kx = { (char *)B(x->names->name), L(x->names->name) };
    struct key ky = { (char *)B(y->names->name), L(y->names->name) };

    return key_cmp(&kx, &ky);
}

static void row_drop(void *kept, void *dup)
{
    (void)kept;
    snap_free(dup);
}

/* In name order; a key that moved between two masters while they were
 * scanned is shown once. */
static void rows_unique(struct rows *rows)
{
    rows->n =
        sort_unique(rows->s, rows->n, sizeof *rows->s, row_cmp, row_drop);
}

/* One row: JSON, or a table line (with a heading before the first). */
static void print_row(struct sb *b, const struct snap *s, size_t width,
                      int first)
{
    size_t waiting = s->nq + s->nw, start;
    char tmp[32];

    if (opt.json) {
        sb_adds(b, "{");
        json_head(b, s);
        json_lease(b, "lease_ms", s->pttl);
        sb_printf(b, ",\"holders\":%zu,\"waiting\":%zu}", s->nh, waiting);
        return;
    }
    if (first) {
        sb_printf(b, "%-*s  %-10s  %-10s  %-9s  %7s  %7s", (int)width, "NAME",
                  "KIND", "STATE", "LEASE", "HOLDERS", "WAITING");
        sb_flush_line(b);
    }
    start = b->len;
    sb_human(b, B(s->names->name), L(s->names->name));
    while (b->len - start < width)
        sb_addn(b, " ", 1);
    sb_printf(b, "  %-10s  %-10s  ", kind_name[s->kind],
              state_name[s->state]);
    start = b->len;
    if (s->pttl >= 0)
        sb_secs(b, s->pttl);
    else
        sb_adds(b, "no expiry");
    snprintf(tmp, sizeof tmp, "%.*s", (int)(b->len - start), b->p + start);
    b->len = start;
    sb_printf(b, "%-9s  %7zu  %7zu", tmp, s->nh, waiting);
}

static void print_rows(struct rows *rows, struct objs *os,
                       const char *pattern)
{
    size_t i, width = 4, shown;

    for (i = 0; i < rows->n; i++)
        if (L(rows->s[i].names->name) > width)
            width = L(rows->s[i].names->name);
    for (i = 0; i < os->n; i++)
        if (os->v[i].len > width)
            width = os->v[i].len;
    if (width > 48)
        width = 48;
    for (i = 0; i < rows->n; i++) {
        struct sb b = { 0 };
        print_row(&b, &rows->s[i], width, i == 0);
        sb_flush_line(&b);
        sb_free(&b);
        snap_free(&rows->s[i]);
    }
    shown = objs_print(os, width, rows->n == 0);
    if (rows->n == 0 && shown == 0 && !opt.json)
        printf("no locks%s%s\n", strcmp(pattern, "*") ? " match " : "",
               strcmp(pattern, "*") ? pattern : "");
}

/* --timeout S: the whole listing's deadline, in seconds (> 0). */
static int timeout_opt(int argc, char **argv, int *i, void *arg)
{
    const char *v = opt_value(argc, argv, i, "--timeout");

    if (!v)
        return 0;
    *(double *)arg = secs_value("--timeout", v, 0, 1e6);
    return 1;
}

void list_collect(const char *pattern, struct rows *rows, struct objs *os,
                  master_fn each, void *arg)
{
    struct dist__addr masters[MAX_MASTERS];
    int m, nmasters;

    /* one server, or every master of a cluster, each holding its slots */
    nmasters = dist__route_masters(&rcfg, rlimit, masters, MAX_MASTERS);
    if (nmasters < 0)
        die(EX_REDIS, "%s", redis_why());
    for (m = 0; m < nmasters; m++)
        list_master(&masters[m], pattern, rows, os, each, arg);
    rows_unique(rows);
}

int cmd_list(int argc, char **argv)
{
    const char *pattern;
    struct rows rows = { NULL, 0 };
    struct objs os = { NULL, 0 };
    double secs = LIST_TIMEOUT_S;

    pattern = operand_args(argc, argv, timeout_opt, &secs);
    if (!pattern)
        pattern = "*";
    redis_setup();
    /* the whole listing, connecting and every page included, within
     * --timeout: a server that trickles SCAN pages cannot keep it */
    rlimit = list_scan_deadline(secs);
    list_collect(pattern, &rows, &os, NULL, NULL);
    print_rows(&rows, &os, pattern);
    free(rows.s);
    return 0;
}
