/*
 * harness_slots: live slot migration in a test cluster, whole or in steps
 * (IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE), as redis-cli reshards.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP_MOVE_TIMEOUT  30000 /* ms: agreement after a slot moved */
#define TP_MIGRATE_BATCH 100   /* keys per MIGRATE */

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
        return tp_cmd_ok(&c->nodes.node[node], "node", node, "CLUSTER",
                         "SETSLOT", s, sub, NULL);
    return tp_cmd_ok(&c->nodes.node[node], "node", node, "CLUSTER", "SETSLOT",
                     s, sub, c->id[target], NULL);
}

/*
 * MIGRATE up to max keys (max < 0: all) of slot from -> to, in batches.
 * Returns the number moved, or -1.
 */
static int migrate_keys(tu_cluster_t *c, int slot, int from, int to, int max)
{
    char slot_s[16], count_s[16], port_s[16];
    const char *head[8] = { "MIGRATE", "127.0.0.1", NULL,      "",
                            "0",       "5000",      "REPLACE", "KEYS" };
    int moved = 0;

    snprintf(slot_s, sizeof(slot_s), "%d", slot);
    snprintf(port_s, sizeof(port_s), "%d", c->nodes.node[to].port);
    while (max < 0 || moved < max) {
        int want = TP_MIGRATE_BATCH, argc = 0;
        const char **argv;
        size_t *lens;
        redisReply *keys, *x;
        size_t i;

        if (max >= 0 && max - moved < want)
            want = max - moved;
        snprintf(count_s, sizeof(count_s), "%d", want);
        keys = tp_query(&c->nodes.node[from], &c->nodes.q[from], "CLUSTER",
                        "GETKEYSINSLOT", slot_s, count_s, NULL);
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            tp_err("GETKEYSINSLOT %d on node %d: %s", slot, from,
                   tp_reply_err(keys));
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
            tp_err("migrate: out of memory");
            return -1;
        }
        /* MIGRATE host port "" db timeout REPLACE KEYS key... */
        head[2] = port_s;
        for (argc = 0; argc < 8; argc++) {
            argv[argc] = head[argc];
            lens[argc] = strlen(head[argc]);
        }
        for (i = 0; i < keys->elements; i++) { /* keys may be binary */
            lens[argc] = keys->element[i]->len;
            argv[argc++] = keys->element[i]->str;
        }
        x = tp_fresh_cmdv(&c->nodes.node[from], argc, argv, lens, 1);
        free(argv);
        free(lens);
        if (!tp_reply_ok(x)) {
            tp_err("MIGRATE of %zu keys of slot %d from node %d to %d: %s",
                   keys->elements, slot, from, to, tp_reply_err(x));
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
    if (c == NULL || !tp_valid_slot(slot) || !tp_valid_node(c, to)) {
        tp_err("%s: bad slot %d or node %d", what, slot, to);
        return -1;
    }
    if (tp_node_role(&c->nodes.node[to], &c->nodes.q[to], NULL, NULL, 0) !=
        'M') {
        tp_err("%s: node %d is not a live master", what, to);
        return -1;
    }
    return 0;
}

static int migrate_begin(tu_cluster_t *c, int slot, int from, int to)
{
    if (c->nmig >= TP_MAX_MIG) {
        tp_err("migrate: more than %d slots migrating", TP_MAX_MIG);
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
        x = tp_act(&c->nodes.node[from],
                   (const char *[]){ "CLUSTER", "SETSLOT", s, "NODE",
                                     c->id[to], NULL });
        if (tp_reply_ok(x)) {
            freeReplyObject(x);
            break;
        }
        /* A key written meanwhile ("still hold keys"): move it too. */
        if (tries >= 3 || x == NULL || x->type != REDIS_REPLY_ERROR ||
            strstr(x->str, "keys") == NULL ||
            migrate_keys(c, slot, from, to, -1) < 0) {
            tp_err("CLUSTER SETSLOT %d NODE on node %d: %s", slot, from,
                   tp_reply_err(x));
            if (x != NULL)
                freeReplyObject(x);
            return -1;
        }
        freeReplyObject(x);
    }
    for (i = 0; i < c->nodes.n; i++) {
        if (i == to || i == from ||
            tp_node_role(&c->nodes.node[i], &c->nodes.q[i], NULL, NULL, 0) !=
                'M')
            continue;
        if (setslot(c, i, slot, "NODE", to) != 0)
            return -1;
    }
    memset(&w, 0, sizeof(w));
    w.slot = slot;
    w.owner = to;
    w.old_master = -1;
    return tp_cluster_wait(c, &w, TP_MOVE_TIMEOUT, "slot migration");
}

/* The master serving slot now, when the slot may start moving to `to`
 * (a live master); -1 with a message.  busy ends the message for a slot
 * that is migrating already. */
static int move_source(tu_cluster_t *c, int slot, int to, const char *what,
                       const char *busy)
{
    if (check_target(c, slot, to, what) != 0)
        return -1;
    if (mig_find(c, slot) != NULL) {
        tp_err("%s: slot %d is migrating %s", what, slot, busy);
        return -1;
    }
    return tu_cluster_slot_owner(c, slot);
}

int tu_cluster_migrate_begin(tu_cluster_t *c, int slot, int to)
{
    int from = move_source(c, slot, to, "migrate_begin", "already");

    if (from < 0 || from == to) {
        tp_err("migrate_begin: slot %d is served by node %d already", slot,
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
        tp_err("migrate_key: slot %d of \"%s\" is not migrating", slot, key);
        return -1;
    }
    snprintf(port_s, sizeof(port_s), "%d", c->nodes.node[m->to].port);
    x = tp_act(&c->nodes.node[m->from],
               (const char *[]){ "MIGRATE", "127.0.0.1", port_s, key, "0",
                                 "5000", "REPLACE", NULL });
    if (tp_reply_ok(x))
        rc = 1;
    else if (x != NULL && x->type == REDIS_REPLY_STATUS &&
             strcmp(x->str, "NOKEY") == 0)
        rc = 0;
    else
        tp_err("MIGRATE \"%s\" from node %d to %d: %s", key, m->from, m->to,
               tp_reply_err(x));
    if (x != NULL)
        freeReplyObject(x);
    return rc;
}

int tu_cluster_migrate_finish(tu_cluster_t *c, int slot, int to)
{
    struct tp_mig *m;
    int from;

    if (c == NULL || !tp_valid_slot(slot))
        return -1;
    m = mig_find(c, slot);
    if (m == NULL || m->to != to) {
        tp_err("migrate_finish: slot %d is not migrating to node %d", slot,
               to);
        return -1;
    }
    from = m->from;
    mig_remove(c, m);
    return migrate_finish(c, slot, from, to);
}

int tu_cluster_move_slot(tu_cluster_t *c, int slot, int to)
{
    int from = move_source(c, slot, to, "move_slot", "(use migrate_finish)");

    if (from < 0)
        return -1;
    if (from == to)
        return 0;
    if (migrate_begin(c, slot, from, to) != 0)
        return -1;
    mig_remove(c, mig_find(c, slot));
    return migrate_finish(c, slot, from, to);
}
