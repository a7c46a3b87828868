/*
 * harness_layout: what each node of a test cluster says about the cluster
 * (CLUSTER INFO, CLUSTER NODES), and the waits until the live nodes agree
 * on one healthy layout (harness_int.h, tp_cluster_wait).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One node's view of the cluster (CLUSTER INFO + CLUSTER NODES). */
struct cview {
    int state_ok; /* cluster_state:ok */
    char state[16];
    unsigned long long cur_epoch; /* cluster_current_epoch */
    int parsed;                   /* lines naming one of our nodes */
    int stray;                    /* other lines (handshakes, strangers) */
    int self;                     /* node index of the "myself" line */
    int bad_master;               /* a replica of an unknown node */
    char role[TU_TOPO_MAX_NODES]; /* 'M', 'S', 0 not listed */
    int master[TU_TOPO_MAX_NODES];
    unsigned char fail[TU_TOPO_MAX_NODES]; /* 1 fail?, 2 fail */
    unsigned long long cepoch[TU_TOPO_MAX_NODES];
    short owner[TU_CLUSTER_SLOTS];
};

int tp_node_by_id(const tu_cluster_t *c, const char *id)
{
    int i;

    for (i = 0; i < c->nodes.n; i++)
        if (strcmp(c->id[i], id) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* One node's view                                                          */
/* ------------------------------------------------------------------------ */

static void view_clear(struct cview *v)
{
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
}

/* The flags field of node idx's line ("myself,master", ...). */
static void parse_flags(struct cview *v, int idx, char *flags)
{
    char *fl, *save_fl = NULL;

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
}

/* A slot field "lo-hi" or "slot" of node idx's line. */
static void parse_slots(struct cview *v, int idx, const char *tok)
{
    const char *dash = strchr(tok, '-');
    long lo = strtol(tok, NULL, 10);
    long hi = dash != NULL ? strtol(dash + 1, NULL, 10) : lo;
    long s;

    for (s = lo; s <= hi && s < TU_CLUSTER_SLOTS; s++)
        if (s >= 0)
            v->owner[s] = (short)idx;
}

/* One line of CLUSTER NODES into v. */
static void parse_line(const tu_cluster_t *c, char *line, struct cview *v)
{
    char *tok, *save_tok = NULL, *flags = NULL, *master = NULL;
    int field = 0, idx = -1;

    for (tok = strtok_r(line, " ", &save_tok); tok != NULL;
         tok = strtok_r(NULL, " ", &save_tok), field++) {
        if (field == 0) {
            idx = tp_node_by_id(c, tok);
            if (idx < 0)
                break;
        } else if (field == 2) {
            flags = tok;
        } else if (field == 3) {
            master = tok;
        } else if (field == 6) {
            v->cepoch[idx] = strtoull(tok, NULL, 10);
        } else if (field >= 8 && tok[0] != '[') {
            parse_slots(v, idx, tok);
        }
    }
    if (idx < 0 || flags == NULL || master == NULL) {
        v->stray++;
        return;
    }
    v->parsed++;
    parse_flags(v, idx, flags);
    if (strcmp(master, "-") != 0) {
        v->master[idx] = tp_node_by_id(c, master);
        if (v->master[idx] < 0)
            v->bad_master = 1;
    }
}

/* Parse CLUSTER NODES text into v (the INFO part is filled elsewhere). */
static void parse_nodes(const tu_cluster_t *c, const char *text,
                        struct cview *v)
{
    char *copy, *line, *save_line = NULL;

    view_clear(v);
    if (text == NULL || (copy = strdup(text)) == NULL) {
        v->stray = 1; /* unreadable: never agrees */
        return;
    }
    for (line = strtok_r(copy, "\r\n", &save_line); line != NULL;
         line = strtok_r(NULL, "\r\n", &save_line))
        parse_line(c, line, v);
    free(copy);
}

/* The text of a query to node i, or NULL with *why set. */
static redisReply *node_text(tu_cluster_t *c, int i, const char *sub,
                             char *why, size_t wlen)
{
    redisReply *x =
        tp_query(&c->nodes.node[i], &c->nodes.q[i], "CLUSTER", sub, NULL);

    if (tp_reply_text(x) != NULL)
        return x;
    hx_why(why, wlen, "node %d: CLUSTER %s: %s", i, sub, tp_reply_err(x));
    if (x != NULL)
        freeReplyObject(x);
    return NULL;
}

/* Fill v from node i.  0, or -1 with *why set. */
static int read_view(tu_cluster_t *c, int i, struct cview *v, char *why,
                     size_t wlen)
{
    redisReply *x;
    char buf[32];

    if ((x = node_text(c, i, "INFO", why, wlen)) == NULL)
        return -1;
    if (tp_info_field(x->str, "cluster_state", v->state, sizeof(v->state)) ==
            NULL ||
        tp_info_field(x->str, "cluster_current_epoch", buf, sizeof(buf)) ==
            NULL) {
        hx_why(why, wlen, "node %d: CLUSTER INFO: %s", i, tp_reply_err(x));
        freeReplyObject(x);
        return -1;
    }
    v->state_ok = strcmp(v->state, "ok") == 0;
    v->cur_epoch = strtoull(buf, NULL, 10);
    freeReplyObject(x);
    if ((x = node_text(c, i, "NODES", why, wlen)) == NULL)
        return -1;
    parse_nodes(c, x->str, v);
    freeReplyObject(x);
    return 0;
}

int tu_cluster_slot_owner(tu_cluster_t *c, int slot)
{
    struct cview *v;
    char why[256];
    int i, owner;

    if (c == NULL || !tp_valid_slot(slot)) {
        tp_err("slot owner: bad slot %d", slot);
        return -1;
    }
    if ((i = tp_first_usable(&c->nodes)) < 0) {
        tp_err("slot owner: no node running");
        return -1;
    }
    v = malloc(sizeof(*v));
    if (v == NULL) {
        tp_err("slot owner: out of memory");
        return -1;
    }
    if (read_view(c, i, v, why, sizeof(why)) != 0) {
        tp_err("slot owner: %s", why);
        free(v);
        return -1;
    }
    owner = v->owner[slot];
    free(v);
    return owner;
}

/* ------------------------------------------------------------------------ */
/* The whole cluster                                                        */
/* ------------------------------------------------------------------------ */

/* What one check of the cluster found: the views of the live nodes, and
 * when it is not ok, why and the node whose log tells more (bad). */
struct check {
    tu_cluster_t *c;
    struct cview *views;
    int live[TU_TOPO_MAX_NODES];
    int first; /* first live node: the reference view */
    char *why;
    size_t wlen;
    int bad;
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

/* Read the view of every live node.  0, or -1 (k->why says why). */
static int read_views(struct check *k)
{
    tu_cluster_t *c = k->c;
    int i;

    k->bad = k->first = -1;
    for (i = 0; i < c->nodes.n; i++) {
        k->live[i] = tp_usable(&c->nodes.node[i]);
        if (!k->live[i])
            continue;
        if (k->first < 0)
            k->first = i;
        k->bad = i;
        if (read_view(c, i, &k->views[i], k->why, k->wlen) != 0)
            return -1;
    }
    if (k->first < 0) {
        hx_why(k->why, k->wlen, "no node is running");
        return -1;
    }
    return 0;
}

/* The replica of w->old_master that serves all its old slots now, as the
 * first live node sees it; -1 if none (yet). */
static int taken_over(const struct check *k, const struct cl_want *w)
{
    const struct cview *f = &k->views[k->first];
    const tu_cluster_t *c = k->c;
    int j, s;

    for (j = 0; j < c->nodes.n; j++) {
        if (c->master_of[j] != w->old_master || !k->live[j] ||
            f->role[j] != 'M' || (w->new_master >= 0 && j != w->new_master))
            continue;
        for (s = 0; s < TU_CLUSTER_SLOTS; s++)
            if (w->old_owner[s] == w->old_master && f->owner[s] != j)
                break;
        if (s == TU_CLUSTER_SLOTS)
            return j;
    }
    return -1;
}

/* What this wait is for, checked first: the most telling message. */
static int check_want(struct check *k, struct cl_want *w)
{
    const struct cview *f = &k->views[k->first];

    if (w == NULL)
        return 0;
    if (w->slot >= 0 && f->owner[w->slot] != w->owner) {
        hx_why(k->why, k->wlen,
               "node %d sees slot %d still served by node "
               "%d, not %d",
               k->first, w->slot, f->owner[w->slot], w->owner);
        k->bad = w->owner;
        return -1;
    }
    if (w->old_master >= 0) {
        w->result = taken_over(k, w);
        if (w->result < 0) {
            hx_why(k->why, k->wlen,
                   "node %d sees no replica of node %d "
                   "serving its slots yet",
                   k->first, w->old_master);
            k->bad = w->new_master >= 0 ? w->new_master : k->first;
            return -1;
        }
    }
    return 0;
}

/* Live node i: cluster ok, knows itself and every node, replica in sync. */
static int check_node(struct check *k, int i)
{
    const struct cview *v = &k->views[i];
    tu_cluster_t *c = k->c;
    char link[32];

    k->bad = i;
    if (!v->state_ok) {
        hx_why(k->why, k->wlen, "node %d: cluster_state:%s", i, v->state);
        return -1;
    }
    if (v->self != i) {
        hx_why(k->why, k->wlen,
               "node %d: CLUSTER NODES has no line for "
               "itself",
               i);
        return -1;
    }
    if (v->parsed != c->nodes.n || v->stray != 0 || v->bad_master) {
        hx_why(k->why, k->wlen,
               "node %d knows %d of the %d nodes (%d other "
               "entries)",
               i, v->parsed, c->nodes.n, v->stray);
        return -1;
    }
    if (v->role[i] == 'S' &&
        (tp_server_info(&c->nodes.node[i], &c->nodes.q[i], "replication",
                        "master_link_status", link, sizeof(link)) == NULL ||
         strcmp(link, "up") != 0)) {
        hx_why(k->why, k->wlen, "replica %d: master_link_status not up", i);
        return -1;
    }
    return 0;
}

/* The live nodes agree with the first one, and none flags a live one. */
static int check_agreement(struct check *k)
{
    const tu_cluster_t *c = k->c;
    int i, j;

    for (i = k->first + 1; i < c->nodes.n; i++) {
        const char *d;

        if (!k->live[i])
            continue;
        d = layout_diff(&k->views[k->first], &k->views[i], c->nodes.n);
        if (d != NULL) {
            hx_why(k->why, k->wlen, "nodes %d and %d disagree on the %s",
                   k->first, i, d);
            k->bad = i;
            return -1;
        }
    }
    for (i = 0; i < c->nodes.n; i++) {
        for (j = 0; k->live[i] && j < c->nodes.n; j++) {
            if (k->live[j] && k->views[i].fail[j]) {
                hx_why(k->why, k->wlen, "node %d flags node %d as %s", i, j,
                       k->views[i].fail[j] == 2 ? "fail" : "fail?");
                k->bad = j;
                return -1;
            }
        }
    }
    return 0;
}

/* Every slot is served by a live master. */
static int check_slots(struct check *k)
{
    const struct cview *f = &k->views[k->first];
    int s;

    for (s = 0; s < TU_CLUSTER_SLOTS; s++) {
        int o = f->owner[s];

        if (o < 0) {
            hx_why(k->why, k->wlen, "slot %d is not assigned", s);
            k->bad = k->first;
            return -1;
        }
        if (!k->live[o] || f->role[o] != 'M') {
            hx_why(k->why, k->wlen,
                   "slot %d is assigned to node %d, which is "
                   "%s",
                   s, o,
                   k->live[o] ? "not a master"
                              : tp_down_name(&k->c->nodes.node[o]));
            k->bad = o;
            return -1;
        }
    }
    return 0;
}

/*
 * Is the cluster ok among its live nodes (see tu_cluster_start), and are
 * the conditions of w met?  1 yes (the layout cache is updated), 0 no with
 * k->why and k->bad.
 */
static int cluster_check(struct check *k, struct cl_want *w)
{
    tu_cluster_t *c = k->c;
    const struct cview *f;
    int i;

    if (read_views(k) != 0 || check_want(k, w) != 0)
        return 0;
    for (i = 0; i < c->nodes.n; i++)
        if (k->live[i] && check_node(k, i) != 0)
            return 0;
    if (check_agreement(k) != 0 || check_slots(k) != 0)
        return 0;
    f = &k->views[k->first];
    memcpy(c->owner, f->owner, sizeof(c->owner));
    for (i = 0; i < c->nodes.n; i++)
        c->master_of[i] = f->role[i] == 'S' ? f->master[i] : -1;
    return 1;
}

int tp_cluster_wait(tu_cluster_t *c, struct cl_want *w, int timeout_ms,
                    const char *what)
{
    double deadline = tu_now() + timeout_ms / 1000.0;
    char why[256] = "";
    struct check k;
    int ok;

    memset(&k, 0, sizeof(k));
    k.c = c;
    k.why = why;
    k.wlen = sizeof(why);
    k.bad = -1;
    k.views = calloc((size_t)c->nodes.n, sizeof(*k.views));
    if (k.views == NULL) {
        tp_err("%s: out of memory", what);
        return -1;
    }
    while (!(ok = cluster_check(&k, w)) && tu_now() <= deadline)
        tu_sleep_ms(TP_POLL_MS);
    free(k.views);
    if (ok)
        return 0;
    tp_err("%s: not done after %d ms: %s", what, timeout_ms, why);
    if (k.bad >= 0)
        tu_redis_print_log(&c->nodes.node[k.bad], TP_LOG_LINES);
    return -1;
}
