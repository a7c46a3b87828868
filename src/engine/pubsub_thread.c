/* pubsub_thread.c: the pub/sub thread's side: its nodes (one link each,
 * confirmed as the master by route.c), what was sent to them, and the
 * loop that keeps the subscriptions where the channel table wants them;
 * and the lookups and wake-ups of the channel table that pubsub.c uses too
 * (so that this file never calls up into pubsub.c); and the lending of a
 * node to a waiter (dist__ps_borrow).  The design is in pubsub.c. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pubsub_int.h"
#include "base/stats.h"

void dist__ps_ring(const int *fd)
{
    char b = 1;
    ssize_t n;

    if (fd[1] >= 0) {
        do
            n = write(fd[1], &b, 1);
        while (n < 0 && errno == EINTR);
    }
}

static void drain(int fd)
{
    char buf[64];

    while (read(fd, buf, sizeof buf) > 0)
        ;
}

/* ---- the channel table, for both halves (ps->mu held) ------------------ */

struct dist__chan *dist__ps_find(struct dist__ps_state *ps, const char *name,
                                 size_t len)
{
    struct dist__chan *ch;

    for (ch = ps->chans; ch; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

void dist__ps_kick(struct dist__chan *ch)
{
    __atomic_store_n(&ch->seq, ch->seq + 1, __ATOMIC_RELEASE);
    if (ch->fsleepers > 0)
        syscall(SYS_futex, &ch->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL,
                0);
}

/* ps->mu held.  '1' (a write release of a read-write lock) wakes everyone,
 * anything else one waiter: the others would only lose the race. */
void dist__ps_wake(struct dist__ps_state *ps, struct dist__chan *ch, int all)
{
    ch->heard_us = dist__now_us();
    if (all)
        ch->gen++;
    if (ch->refs == 0)
        return;
    dist__ps_kick(ch);
    if (all) {
        ch->permits = (unsigned long)ch->refs;
        pthread_cond_broadcast(&ch->cv);
    } else {
        if (ch->permits < (unsigned long)ch->refs)
            ch->permits++;
        pthread_cond_signal(&ch->cv);
    }
    /* its borrower polls a socket, not ch->cv */
    if (ps->lent && ch == ps->lent_ch &&
        !pthread_equal(ps->borrower, pthread_self()))
        dist__ps_ring(ps->bell);
}

/* 'g<token>:<lease>' (prelude_grant.lua): 1 with both read, else 0 */
static int grant_of(const redisReply *msg, uint64_t *token,
                    unsigned long *lease)
{
    char buf[64], *end;
    unsigned long long t;

    if (msg->type != REDIS_REPLY_STRING || msg->len < 4 ||
        msg->len >= sizeof buf || msg->str[0] != 'g')
        return 0;
    memcpy(buf, msg->str + 1, msg->len - 1);
    buf[msg->len - 1] = 0;
    errno = 0;
    t = strtoull(buf, &end, 10);
    if (errno || end == buf || *end != ':' || t == 0)
        return 0;
    *lease = strtoul(end + 1, &end, 10);
    if (errno || *end || *lease == 0)
        return 0;
    *token = t;
    return 1;
}

void dist__ps_heard(struct dist__ps_state *ps, struct dist__node *n,
                    struct dist__chan *ch, const redisReply *msg)
{
    uint64_t token;
    unsigned long lease;

    if (!grant_of(msg, &token, &lease)) {
        /* from whichever node: a hint is never wrong for long */
        dist__ps_wake(ps, ch,
                      msg->type == REDIS_REPLY_STRING && msg->len == 1 &&
                          msg->str[0] == '1');
        return;
    }
    /* a grant is no hint: only for this subscription, and once (both
     * pub/sub kinds may bring it) */
    if (ch->node != n || ch->wire != W_SUBSCRIBED || token <= ch->spent ||
        token <= ch->grant_token)
        return;
    ch->grant_token = token;
    ch->grant_lease = lease;
    dist__ps_wake(ps, ch, 0);
}

/* ---- the thread's side: nodes and what was sent to them ------------------ */

static int same_addr(const struct dist__addr *a, const struct dist__addr *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Remembers a command sent to n for ch.  0, or -1 when out of memory. */
static int q_push(struct dist__node *n, struct dist__chan *ch, int unsub,
                  int plain_too)
{
    if (n->qlen == n->qcap) {
        int cap = n->qcap ? 2 * n->qcap : 8, i;
        struct sent *q = malloc(sizeof *q * (size_t)cap);
        if (!q)
            return -1;
        for (i = 0; i < n->qlen; i++)
            q[i] = n->q[(n->qhead + i) % n->qcap];
        free(n->q);
        n->q = q;
        n->qcap = cap;
        n->qhead = 0;
    }
    n->q[(n->qhead + n->qlen) % n->qcap] =
        (struct sent){ ch, unsub, plain_too };
    n->qlen++;
    ch->sent++;
    return 0;
}

/* Takes the oldest unanswered command of n into *s; 0 when there is none. */
static int q_pop(struct dist__node *n, struct sent *s)
{
    if (n->qlen == 0)
        return 0;
    *s = n->q[n->qhead];
    n->qhead = (n->qhead + 1) % n->qcap;
    n->qlen--;
    s->ch->sent--;
    return 1;
}

/* Whether the oldest unanswered command of n is this one. */
static int q_head_is(const struct dist__node *n, int unsub, int plain_too,
                     const redisReply *name)
{
    const struct sent *s = n->qlen ? &n->q[n->qhead] : NULL;

    return s && s->unsub == unsub && s->plain_too == plain_too &&
           s->ch->len == name->len &&
           memcmp(s->ch->name, name->str, name->len) == 0;
}

/* Asks for n back from the waiter it is lent to.  ps->mu held. */
static void recall(struct dist__ps_state *ps, struct dist__node *n)
{
    if (n->lent && !n->recall) {
        n->recall = 1;
        dist__ps_ring(ps->bell);
    }
}

/* Appends one (un)subscribe of ch to n's output, sharded or not.  ps->mu
 * held.  0, or -1 (not connected, lent: asked back, out of memory). */
static int append_cmd(struct dist__ps_state *ps, struct dist__node *n,
                      struct dist__chan *ch, int unsub, int sharded,
                      int plain_too)
{
    static const char *const cmds[2][2] = {
        { "SUBSCRIBE", "UNSUBSCRIBE" },
        { "SSUBSCRIBE", "SUNSUBSCRIBE" },
    };
    const char *argv[2];
    size_t argvlen[2];

    if (n->lent) {
        recall(ps, n); /* sent once it is back */
        return -1;
    }
    if (!n->link || q_push(n, ch, unsub, plain_too) != 0)
        return -1;
    argv[0] = cmds[sharded][unsub];
    argvlen[0] = strlen(argv[0]);
    argv[1] = ch->name;
    argvlen[1] = ch->len;
    if (dist__link_append(n->link, 2, argv, argvlen) != 0) {
        n->qlen--; /* not sent after all */
        ch->sent--;
        return -1;
    }
    n->out++;
    return 0;
}

/* Appends (S)SUBSCRIBE or (S)UNSUBSCRIBE of ch to n's output, on a
 * plain_too node after the plain one (RESP2 lets one connection hold both
 * kinds).  The sharded answer alone moves ch's state: the plain one is a
 * second ear, and a message heard twice only wakes twice.  Sent first, the
 * plain SUBSCRIBE is in force by the time ch counts as subscribed.  ps->mu
 * held.  0, or -1 (not connected, out of memory). */
static int send_cmd(struct dist__ps_state *ps, struct dist__node *n,
                    struct dist__chan *ch, int unsub)
{
    if (n->plain_too && append_cmd(ps, n, ch, unsub, 0, 1) != 0)
        return -1;
    return append_cmd(ps, n, ch, unsub, n->sharded, 0);
}

/* The node at a, made when new.  ps->mu held.  NULL when out of memory. */
static struct dist__node *node_get(struct dist__ps_state *ps,
                                   const struct dist__addr *a, int sharded)
{
    struct dist__node *n;

    for (n = ps->nodes; n; n = n->next)
        if (same_addr(&n->addr, a))
            return n;
    if (!(n = calloc(1, sizeof *n)))
        return NULL;
    n->addr = *a;
    n->sharded = sharded;
    n->backoff = BACKOFF_MIN_MS;
    n->next = ps->nodes;
    ps->nodes = n;
    return n;
}

/* Closes n and forgets what was sent to it, and what its link did while
 * lent (a later link must not be given up for it).  ps->mu held; n not
 * lent. */
static void disconnect(struct dist__node *n)
{
    struct sent s;

    while (q_pop(n, &s))
        ;
    dist__link_close(n->link);
    n->link = NULL;
    n->failed = 0;
    n->recall = 0;
    n->out = 0;
    n->idle_since = 0;
}

/* Unlinks and frees n; no channel may be placed on it.  ps->mu held. */
void dist__ps_node_free(struct dist__ps_state *ps, struct dist__node *n)
{
    struct dist__node **pp;

    for (pp = &ps->nodes; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            break;
        }
    disconnect(n);
    free(n->q);
    free(n);
}

/* n's connection broke, or must be given up: its channels must be
 * subscribed again, and their waiters retry now rather than sleep out the
 * lease.  On a cluster they are placed again too (the node may be gone);
 * otherwise n is the only node and every channel is its.  ps->mu held. */
static void lost_node(struct dist__ps_state *ps, struct dist__node *n)
{
    struct dist__chan *ch;

    disconnect(n);
    if (n->connected_at && dist__now_ms() >= n->connected_at + HEALTHY_MS) {
        n->backoff = BACKOFF_MIN_MS;
        n->retry_at = 0; /* it had worked: reconnect at once */
    } else {
        /* lost as soon as it was made (a server at maxclients, or one
         * that refuses us after accepting): back off as after a failed
         * connect, instead of reconnecting in a tight loop */
        n->retry_at = dist__now_ms() + (uint64_t)n->backoff;
        n->backoff = dist__ps_backoff_next(n->backoff, BACKOFF_MAX_MS);
    }
    n->connected_at = 0;
    for (ch = ps->chans; ch; ch = ch->next) {
        if (n->sharded && ch->node != n)
            continue;
        if (ch->wire != W_NONE)
            ch->resub = 1;
        ch->wire = W_NONE;
        if (n->sharded)
            ch->node = NULL;
        dist__ps_wake(ps, ch, 1);
    }
    if (n->sharded)
        dist__topo_stale();
}

/* Takes ch off its node so that it is placed again (the slot map says its
 * slot is served elsewhere): unsubscribed there if it may be subscribed,
 * without waiting for the answer, and its waiters woken once it is
 * subscribed on the new node.  ps->mu held. */
static void move_off(struct dist__ps_state *ps, struct dist__chan *ch)
{
    struct dist__node *n = ch->node;

    if (n && (ch->wire == W_SUBSCRIBED || ch->wire == W_SUBSCRIBING))
        send_cmd(ps, n, ch, 1);
    if (ch->wire == W_SUBSCRIBED)
        ch->resub = 1;
    ch->wire = W_NONE;
    ch->node = NULL;
}

/* How long a channel waits after its errors-th failure in a row: the
 * first is retried at once (a MOVED usually names the right node). */
static uint64_t retry_delay(int errors)
{
    return errors <= 1 ? 0 : errors >= 7 ? 1000 : 50u << (errors - 2);
}

/* n answered a command with an error.  A SUBSCRIBE is tried again (on a
 * cluster after placing the channel again: MOVED says where its slot went,
 * and the map is patched with it); a refused UNSUBSCRIBE leaves nothing to
 * wait for.  ps->mu held. */
static void refused(struct dist__node *n, const struct sent *s,
                    const redisReply *err)
{
    struct dist__chan *ch = s->ch;
    struct dist__addr to;
    int slot;

    if (ch->node != n || s->plain_too)
        return; /* it has left n since; or the second ear */
    if (s->unsub) {
        if (ch->wire == W_UNSUBSCRIBING)
            ch->wire = W_NONE;
        return;
    }
    if (ch->wire != W_SUBSCRIBING)
        return;
    ch->wire = W_NONE;
    ch->errors++;
    ch->retry_at = dist__now_ms() + retry_delay(ch->errors);
    if (n->sharded) {
        ch->node = NULL;
        if (dist__redirect_of(err, &n->addr, &slot, &to) == DIST__R_MOVED)
            dist__topo_moved(slot, &to);
        else
            dist__topo_stale();
    }
}

/* "message" or "smessage" and so on: the sharded kinds are an 's' ahead. */
static int kind_is(const redisReply *kind, const char *what)
{
    return strcmp(kind->str, what) == 0 ||
           (kind->str[0] == 's' && strcmp(kind->str + 1, what) == 0);
}

/* One reply or message from n. */
static void handle(struct dist__ps_state *ps, struct dist__node *n,
                   redisReply *r)
{
    struct dist__chan *ch;
    redisReply *kind, *name;
    struct sent s;

    pthread_mutex_lock(&ps->mu);
    if (r->type == REDIS_REPLY_ERROR) {
        if (q_pop(n, &s))
            refused(n, &s, r);
        pthread_mutex_unlock(&ps->mu);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        pthread_mutex_unlock(&ps->mu);
        return;
    }
    kind = r->element[0];
    name = r->element[1];
    ch = dist__ps_find(ps, name->str, name->len);
    if (n->plain_too && (strcmp(kind->str, "subscribe") == 0 ||
                         strcmp(kind->str, "unsubscribe") == 0)) {
        /* the answer to a plain_too command: nothing else to do */
        if (q_head_is(n, kind->str[0] == 'u', 1, name))
            q_pop(n, &s);
        pthread_mutex_unlock(&ps->mu);
        return;
    }
    if (kind_is(kind, "message")) {
        dist__stat_add(DIST__ST_PS_MESSAGES, 1);
        /* what it woke: its reader alone when it was lent, or when no
         * thread waits on ch (a waiter not yet back on its channel after a
         * try, or gone from it within its GRACE_MS) */
        if (n->lent)
            dist__stat_add(DIST__ST_PS_DIRECT, 1);
        else if (!ch || ch->refs == 0)
            dist__stat_add(DIST__ST_PS_UNWAITED, 1);
        if (ch)
            dist__ps_heard(ps, n, ch, r->element[2]);
    } else if (kind_is(kind, "subscribe")) {
        if (q_head_is(n, 0, 0, name))
            q_pop(n, &s);
        if (ch && ch->node == n && ch->wire == W_SUBSCRIBING) {
            ch->wire = W_SUBSCRIBED;
            ch->ready_us = dist__now_us();
            ch->errors = 0;
            pthread_cond_broadcast(&ch->cv); /* wait_ready */
            dist__ps_kick(ch);
            if (ch->resub) {
                ch->resub = 0;
                dist__stat_add(DIST__ST_PS_RESYNCS, 1);
                dist__ps_wake(
                    ps, ch, 1); /* messages may have been missed meanwhile */
            }
        }
    } else if (kind_is(kind, "unsubscribe")) {
        /* Our answer, or the node dropping the subscription itself (a
         * cluster node does when the slot leaves it).  Either way ch is no
         * longer subscribed there.  An answer to an older command always
         * comes before the one that made ch subscribed again, so while it
         * is subscribed this cannot be stale. */
        if (q_head_is(n, 1, 0, name))
            q_pop(n, &s);
        if (ch && ch->node == n && ch->wire == W_UNSUBSCRIBING) {
            ch->wire = W_NONE;
        } else if (ch && ch->node == n && ch->wire == W_SUBSCRIBED) {
            ch->wire = W_NONE;
            ch->resub = 1;
            if (n->plain_too)
                append_cmd(ps, n, ch, 1, 0, 1); /* its second ear too */
            if (n->sharded) {
                ch->node = NULL; /* placed again where the map says */
                dist__topo_stale();
            }
        }
    }
    pthread_mutex_unlock(&ps->mu);
}

/* ---- the thread's turns ------------------------------------------------ */

struct loop {             /* the thread's own */
    struct dist__cfg cfg; /* the settings, as last read */
    int have_cfg;
    int cluster;         /* channels go to the node of their slot:
                               * dist__sharded_pubsub (a cluster with
                               * ?pubsub=plain has one node, as one
                               * server has) */
    unsigned long epoch; /* dist__topo_epoch the channels were placed at */
    uint64_t map_due;    /* next dist__route to keep the map fresh */
    struct pollfd *pfd;  /* the pipe, then the connected nodes */
    struct dist__node **pn;
    int cap;
};

/* Takes in new settings.  Connections made with the old ones are dropped;
 * on a cluster, or when the mode changed, every channel is placed again. */
static void settings(struct dist__ps_state *ps, struct loop *l)
{
    struct dist__chan *ch;
    struct dist__node *n, *nx;
    int was = l->have_cfg ? l->cluster : -1;

    if (l->have_cfg && dist__cfg_gen() == l->cfg.gen)
        return;
    pthread_mutex_lock(&ps->mu);
    if (ps->lent) { /* taken in once it is back (no node is lent
                               * again before this thread's next poll) */
        recall(ps, ps->lent);
        pthread_mutex_unlock(&ps->mu);
        return;
    }
    pthread_mutex_unlock(&ps->mu);
    dist__cfg_get(&l->cfg);
    l->have_cfg = 1;
    l->cluster = dist__sharded_pubsub(&l->cfg);
    pthread_mutex_lock(&ps->mu);
    for (n = ps->nodes; n; n = n->next)
        if (n->link && n->cfg_gen != l->cfg.gen)
            lost_node(ps, n);
    if (l->cluster || was != l->cluster) {
        for (ch = ps->chans; ch; ch = ch->next) {
            ch->node = NULL;
            ch->wire = W_NONE; /* already, as no node is connected */
        }
        for (n = ps->nodes; n; n = nx) {
            nx = n->next;
            dist__ps_node_free(ps, n);
        }
    }
    pthread_mutex_unlock(&ps->mu);
}

/* Behind sentinels: drops the connection when the master changed.  On a
 * cluster: lets the map be read again when due, and moves the channels
 * whose slot is now served by another node. */
static void follow(struct dist__ps_state *ps, struct loop *l, uint64_t now)
{
    struct dist__chan *ch;
    struct dist__addr a;
    struct dist__node *n = ps->nodes; /* only this thread changes the list */
    unsigned long e;

    if (l->cfg.mode == DIST__MODE_SENTINEL && n && n->link) {
        /* the sentinels are asked about once a second, and releases are
         * published on the new master */
        if (dist__route(&l->cfg, 0, NULL, &a) == 0 &&
            !same_addr(&a, &n->addr)) {
            pthread_mutex_lock(&ps->mu);
            if (n->lent)
                recall(ps, n); /* dropped at a turn once it is back */
            else
                lost_node(ps, n);
            pthread_mutex_unlock(&ps->mu);
        }
        return;
    }
    if (!l->cluster)
        return;
    if (n && now >= l->map_due) {
        dist__route(&l->cfg, 0, NULL, &a);
        l->map_due = now + MAP_CHECK_MS;
    }
    if ((e = dist__topo_epoch()) == l->epoch)
        return;
    l->epoch = e;
    pthread_mutex_lock(&ps->mu);
    for (ch = ps->chans; ch; ch = ch->next) {
        struct dist__buf key = { ch->name, ch->len };
        struct dist__node *to;
        int rc;
        if (!(n = ch->node) || ch->wire == W_UNSUBSCRIBING)
            continue;
        pthread_mutex_unlock(&ps->mu);
        rc = dist__route(&l->cfg, 0, &key, &a);
        pthread_mutex_lock(&ps->mu);
        if (rc != 0 || same_addr(&a, &n->addr))
            continue;
        to = ch->refs > 0 ? node_get(ps, &a, 1) : NULL;
        move_off(ps, ch);
        ch->node = to; /* NULL: placed again, or freed if unused */
    }
    pthread_mutex_unlock(&ps->mu);
}

/* Gives the channels that need one a node: the master's, or on a cluster
 * the one serving the channel's slot. */
static void place(struct dist__ps_state *ps, struct loop *l, uint64_t now,
                  uint64_t *next)
{
    struct dist__chan *ch;
    struct dist__node *master = NULL;

    pthread_mutex_lock(&ps->mu);
    if (!l->cluster) {
        static const struct dist__addr none;
        /* the connection is kept even while no channel needs it */
        if ((master = ps->nodes) == NULL)
            master = node_get(ps, &none, 0);
    }
    for (ch = ps->chans; ch; ch = ch->next) {
        struct dist__buf key = { ch->name, ch->len };
        struct dist__addr a;
        struct dist__node *n;
        int rc;
        if (ch->node || ch->refs == 0)
            continue;
        if (!l->cluster) {
            ch->node = master;
            continue;
        }
        if (now < ch->retry_at) {
            if (ch->retry_at < *next)
                *next = ch->retry_at;
            continue;
        }
        pthread_mutex_unlock(&ps->mu);
        rc = dist__route(&l->cfg, 0, &key, &a);
        pthread_mutex_lock(&ps->mu);
        if (rc == 0 && (n = node_get(ps, &a, 1)) != NULL) {
            n->plain_too = dist__both_pubsub(&l->cfg);
            ch->node = n;
        } else {
            ch->errors++;
            ch->retry_at = now + retry_delay(ch->errors);
            if (ch->retry_at == now)
                ch->retry_at = now + BACKOFF_MIN_MS;
            if (ch->retry_at < *next)
                *next = ch->retry_at;
        }
    }
    pthread_mutex_unlock(&ps->mu);
}

/* Counts the channels of each node.  ps->mu held. */
static void count_chans(struct dist__ps_state *ps)
{
    struct dist__chan *ch;
    struct dist__node *n;

    for (n = ps->nodes; n; n = n->next)
        n->nchans = 0;
    for (ch = ps->chans; ch; ch = ch->next)
        if (ch->node)
            ch->node->nchans++;
}

/* Connects the nodes that are needed and due. */
static void open_nodes(struct dist__ps_state *ps, struct loop *l,
                       uint64_t *next)
{
    struct dist__node *n;

    pthread_mutex_lock(&ps->mu);
    count_chans(ps);
    pthread_mutex_unlock(&ps->mu);
    for (n = ps->nodes; n; n = n->next) {
        struct dist__addr a = n->addr;
        struct dist__link *c = NULL;
        uint64_t now = dist__now_ms();
        int rc = 0;
        if (n->link || (n->sharded && n->nchans == 0))
            continue;
        if (now < n->retry_at) {
            if (n->retry_at < *next)
                *next = n->retry_at;
            continue;
        }
        if (!n->sharded)
            rc = dist__route(&l->cfg, 0, NULL, &a); /* the master, now */
        if (rc == 0)
            rc = dist__route_open_master(&l->cfg, &a, 0, &c);
        pthread_mutex_lock(&ps->mu);
        if (rc == 0) {
            n->link = c;
            n->addr = a;
            n->cfg_gen = l->cfg.gen;
            n->connected_at = dist__now_ms();
        } else {
            struct dist__chan *ch;
            dist__topo_stale();
            n->retry_at = dist__now_ms() + (uint64_t)n->backoff;
            n->backoff = dist__ps_backoff_next(n->backoff, BACKOFF_MAX_MS);
            if (*next > n->retry_at)
                *next = n->retry_at;
            /* on a cluster its channels are placed again: the map may
             * name another node by now */
            for (ch = ps->chans; n->sharded && ch; ch = ch->next)
                if (ch->node == n)
                    ch->node = NULL;
        }
        pthread_mutex_unlock(&ps->mu);
    }
}

/* Queues the (un)subscribes the table asks for, frees channels nobody needs
 * and counts the channels of each node.  ps->mu held.  next (may be NULL):
 * lowered to when something is due. */
void dist__ps_reconcile(struct dist__ps_state *ps, uint64_t now,
                        uint64_t *next)
{
    struct dist__chan **pp = &ps->chans, *ch;
    struct dist__node *n;

    for (n = ps->nodes; n; n = n->next)
        n->nchans = 0;
    while ((ch = *pp) != NULL) {
        if (ch->refs == 0 && ch->wire == W_NONE) {
            ch->node = NULL;
            if (ch->sent == 0) { /* no answer will name it */
                *pp = ch->next;
                if (ps->want_ch == ch)
                    ps->want_ch = NULL;
                pthread_cond_destroy(&ch->cv);
                free(ch->name);
                free(ch);
                continue;
            }
        }
        if ((n = ch->node) != NULL)
            n->nchans++;
        if (n && n->link && ch->refs > 0 && ch->wire == W_NONE) {
            if (now < ch->retry_at) {
                if (next && ch->retry_at < *next)
                    *next = ch->retry_at;
            } else if (send_cmd(ps, n, ch, 0) == 0) {
                ch->wire = W_SUBSCRIBING;
            }
        } else if (n && n->link && ch->refs == 0 &&
                   ch->wire == W_SUBSCRIBED) {
            if (now < ch->idle_since + GRACE_MS) {
                if (next && ch->idle_since + GRACE_MS < *next)
                    *next = ch->idle_since + GRACE_MS;
            } else if (send_cmd(ps, n, ch, 1) == 0) {
                ch->wire = W_UNSUBSCRIBING;
            }
        }
        pp = &ch->next;
    }
}

/* Closes the cluster nodes that have served no channel for IDLE_MS, and
 * forgets the unconnected ones once their backoff is over.  ps->mu held,
 * right after reconcile counted the channels. */
static void close_idle(struct dist__ps_state *ps, uint64_t now,
                       uint64_t *next)
{
    struct dist__node *n, *nx;
    uint64_t due;

    for (n = ps->nodes; n; n = nx) {
        nx = n->next;
        if (!n->sharded || n->nchans > 0) {
            n->idle_since = 0;
            continue;
        }
        if (n->link && !n->idle_since)
            n->idle_since = now;
        due = n->link ? n->idle_since + IDLE_MS : n->retry_at;
        if (now >= due)
            dist__ps_node_free(ps, n);
        else if (due < *next)
            *next = due;
    }
}

/* Sends what reconcile and follow queued. */
static void flush(struct dist__ps_state *ps)
{
    struct dist__node *n;

    for (n = ps->nodes; n; n = n->next) {
        if (!n->link || n->out == 0)
            continue;
        n->out = 0;
        if (dist__link_flush(n->link, dist__link_deadline(n->link, 0)) != 0) {
            pthread_mutex_lock(&ps->mu);
            lost_node(ps, n);
            pthread_mutex_unlock(&ps->mu);
        }
    }
}

/* Reads what n's socket has and handles each reply.  0, or -1 when its
 * link broke. */
static int read_replies(struct dist__ps_state *ps, struct dist__node *n)
{
    redisReply *reply;

    dist__link_read_some(n->link);
    while (dist__link_next(n->link, &reply) == 1) {
        handle(ps, n, reply);
        freeReplyObject(reply);
    }
    return dist__link_broken(n->link) ? -1 : 0;
}

static void read_node(struct dist__ps_state *ps, struct dist__node *n)
{
    if (read_replies(ps, n) != 0) {
        pthread_mutex_lock(&ps->mu);
        lost_node(ps, n);
        pthread_mutex_unlock(&ps->mu);
    }
}

/* At the start of a turn: the nodes given back are the thread's for the
 * whole of it (none is lent before the next poll), so what it recalled
 * them for is done in it; those whose link broke while lent are given up. */
static void take_back(struct dist__ps_state *ps)
{
    struct dist__node *n;

    pthread_mutex_lock(&ps->mu);
    for (n = ps->nodes; n; n = n->next) {
        if (n->lent)
            continue;
        n->recall = 0;
        if (n->failed) {
            n->failed = 0;
            lost_node(ps, n);
        }
    }
    pthread_mutex_unlock(&ps->mu);
}

/* The end of a loan: n goes back to the thread.  ps->mu held. */
static void give_back(struct dist__ps_state *ps, struct dist__node *n,
                      int broken)
{
    int recalled = n->recall; /* left set: not lent again before the
                               * thread's next turn (take_back) */

    n->lent = 0;
    n->failed = broken;
    ps->lent = NULL;
    ps->lent_ch = NULL;
    /* The thread, asleep without n in its poll set, is woken only when
     * someone else could need n's messages, it asked for n, or to give up
     * a broken link; otherwise it takes n in again at its next turn, and
     * the next waiter borrows n meanwhile without waking it. */
    if (broken || recalled || ps->sleepers > 0 || ps->stop)
        dist__ps_ring(ps->pipe);
}

/* A node lent, for the cleanup handler of a borrower's poll. */
struct lent {
    struct dist__ps_state *ps;
    struct dist__node *n;
};

/* A borrower cancelled in its poll gives the node back (ps->mu is not held
 * there; nothing was read half). */
static void give_back_cancelled(void *arg)
{
    struct lent *lt = arg;

    pthread_mutex_lock(&lt->ps->mu);
    give_back(lt->ps, lt->n, 0);
    pthread_mutex_unlock(&lt->ps->mu);
}

/* poll(2) of a borrower; with cancel, a cancellation point. */
static int borrow_poll(struct dist__ps_state *ps, struct dist__node *n,
                       struct pollfd *pfd, int ms, int cancel)
{
    struct lent lt = { ps, n };
    int rc, state = 0;

    if (!cancel)
        return poll(pfd, 2, ms);
    pthread_cleanup_push(give_back_cancelled, &lt);
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &state);
    rc = poll(pfd, 2, ms);
    pthread_setcancelstate(state, &state);
    pthread_cleanup_pop(0);
    return rc;
}

int dist__ps_borrow_intr(struct dist__ps_state *ps, struct dist__chan *ch,
                         unsigned long gen, uint64_t until, int intr,
                         int *eintr)
{
    struct dist__node *n = ch->node;
    int broken = 0;

    if (!n || n->sharded || !n->link || ps->stop || ps->bell[0] < 0)
        return 0;
    /* A lone waiter only.  Among several, the borrower woke for every
     * message of the others too and passed it on: in a herd that made
     * 1.6-1.7 x the thread wake-ups of the thread's own reading, and no
     * more hand-offs. */
    if (ch->refs != 1 || ps->sleepers > 0)
        return 0;
    /* ps->polling first: the thread writes some of n's fields without ps->mu
     * in its turn, never while it polls */
    if (!ps->polling || ps->lent || n->lent || n->recall || n->failed ||
        n->out || n->qlen || ch->wire != W_SUBSCRIBED) {
        ps->want_ch = ch; /* for now: the thread is busy with n */
        return 0;
    }
    n->lent = 1;
    ps->lent = n;
    ps->lent_ch = ch;
    ps->borrower = pthread_self();
    drain(ps->bell[0]); /* rung for an earlier borrower */
    if (n->in_poll)
        dist__ps_ring(ps->pipe); /* the thread polls again without n */
    while (ch->gen == gen && ch->permits == 0 && !n->recall && !ps->stop &&
           ch->refs == 1 && ps->sleepers == 0) {
        struct pollfd pfd[2];
        uint64_t now = dist__now_ms();
        int rc, err;
        if (now >= until)
            break;
        pfd[0] = (struct pollfd){ dist__link_fd(n->link), POLLIN, 0 };
        pfd[1] = (struct pollfd){ ps->bell[0], POLLIN, 0 };
        pthread_mutex_unlock(&ps->mu);
        rc = borrow_poll(ps, n, pfd,
                         until - now > 60000 ? 60000 : (int)(until - now),
                         intr & DIST__SUB_CANCEL);
        err = errno;
        if (rc > 0 && pfd[1].revents)
            drain(ps->bell[0]);
        if (rc > 0 && pfd[0].revents && read_replies(ps, n) != 0)
            broken = 1;
        pthread_mutex_lock(&ps->mu);
        if (broken)
            break;
        /* poll(2) is never restarted after a handler, whatever SA_RESTART */
        if (rc < 0 && err == EINTR && (intr & DIST__SUB_EINTR)) {
            *eintr = 1;
            break;
        }
    }
    give_back(ps, n, broken);
    return 1;
}

int dist__ps_borrow(struct dist__ps_state *ps, struct dist__chan *ch,
                    unsigned long gen, uint64_t until)
{
    int eintr = 0;

    return dist__ps_borrow_intr(ps, ch, gen, until, 0, &eintr);
}

/* A sentinel announced a new master: a connection in its backoff after
 * the old one failed is made now, to the new one (follow drops one
 * still open to the old one, at the next turn). */
static void switched(struct dist__ps_state *ps)
{
    struct dist__node *n;

    pthread_mutex_lock(&ps->mu);
    for (n = ps->nodes; n; n = n->next)
        if (!n->link && !n->sharded) {
            n->retry_at = 0;
            n->backoff = BACKOFF_MIN_MS;
        }
    pthread_mutex_unlock(&ps->mu);
}

/* Polls the pipe, every connected node and the ears on the sentinels
 * until next, and reads what came. */
static void wait_and_read(struct dist__ps_state *ps, struct loop *l,
                          uint64_t next)
{
    struct dist__node *n;
    uint64_t now;
    int k = 1 + dist__ps_ears_count(), k2, i, ears;

    for (n = ps->nodes; n; n = n->next)
        k += n->link != NULL;
    if (k > l->cap) {
        struct pollfd *pfd = realloc(l->pfd, sizeof *pfd * (size_t)k);
        struct dist__node **pn;
        if (pfd)
            l->pfd = pfd;
        pn = realloc(l->pn, sizeof *pn * (size_t)k);
        if (pn)
            l->pn = pn;
        if (!pfd || !pn) {
            dist__sleep_ms(50); /* out of memory: try again soon */
            return;
        }
        l->cap = k;
    }
    l->pfd[0] = (struct pollfd){ ps->pipe[0], POLLIN, 0 };
    k = 1;
    /* A node may be lent while this thread polls (ps->polling), and only
     * then; one lent already is left to its borrower. */
    pthread_mutex_lock(&ps->mu);
    for (n = ps->nodes; n; n = n->next)
        if ((n->in_poll = n->link && !n->lent) != 0) {
            l->pn[k] = n;
            l->pfd[k++] =
                (struct pollfd){ dist__link_fd(n->link), POLLIN, 0 };
        }
    ears = k; /* after the nodes */
    k += dist__ps_ears_poll(&l->pfd[k]);
    ps->polling = 1;
    if (ps->want_ch) { /* one of its sleepers may borrow now */
        pthread_cond_signal(&ps->want_ch->cv);
        dist__ps_kick(ps->want_ch);
        ps->want_ch = NULL;
    }
    pthread_mutex_unlock(&ps->mu);
    now = dist__now_ms();
    i = poll(l->pfd, (nfds_t)k, next > now ? (int)(next - now) : 0);
    pthread_mutex_lock(&ps->mu);
    ps->polling = 0;
    /* lent during the poll: its borrower reads it (or it broke in its
     * hands: take_back gives it up) */
    for (k2 = 1; k2 < ears; k2++)
        if (l->pn[k2]->lent || l->pn[k2]->failed)
            l->pfd[k2].revents = 0;
    pthread_mutex_unlock(&ps->mu);
    if (i <= 0)
        return;
    if (l->pfd[0].revents) {
        drain(ps->pipe[0]);
        /* Someone needs a channel: the master's connection in backoff is
         * tried now.  Not a cluster node's: connecting blocks this thread,
         * and the other nodes' messages would wait for a dead one. */
        for (n = ps->nodes; n; n = n->next)
            if (!n->link && !n->sharded)
                n->retry_at = 0;
    }
    for (i = 1; i < ears; i++)
        if (l->pfd[i].revents && l->pn[i]->link)
            read_node(ps, l->pn[i]);
    if (dist__ps_ears_read(&l->cfg, &l->pfd[ears]))
        switched(ps);
}

void *dist__ps_main(void *arg)
{
    struct dist__ps_state *ps = arg;
    struct loop l;
    struct dist__chan *ch;
    uint64_t look = 0;
    int orphaned = 0;

    memset(&l, 0, sizeof l);
    for (;;) {
        uint64_t now, next;
        int stop;

        pthread_mutex_lock(&ps->mu);
        stop = ps->stop;
        pthread_mutex_unlock(&ps->mu);
        if (stop)
            break;
        /* no thread of the program is left: this one must not keep the
         * process alive (as renew_main); its turns come at least once a
         * second */
        if ((orphaned = dist__threads_orphaned(&look)) != 0)
            break;

        take_back(ps);
        settings(ps, &l);
        now = dist__now_ms();
        next = now + 1000;
        follow(ps, &l, now);
        place(ps, &l, now, &next);
        open_nodes(ps, &l, &next);
        dist__ps_ears_keep(&l.cfg, &next);
        now = dist__now_ms();
        pthread_mutex_lock(&ps->mu);
        dist__ps_reconcile(ps, now, &next);
        if (l.cluster)
            close_idle(ps, now, &next);
        pthread_mutex_unlock(&ps->mu);
        flush(ps);
        wait_and_read(ps, &l, next);
    }
    pthread_mutex_lock(&ps->mu);
    while (ps->lent) { /* its borrower gives it back, then pokes */
        struct pollfd pfd = { ps->pipe[0], POLLIN, 0 };
        recall(ps, ps->lent);
        pthread_mutex_unlock(&ps->mu);
        poll(&pfd, 1, 100);
        drain(ps->pipe[0]);
        pthread_mutex_lock(&ps->mu);
    }
    for (ch = ps->chans; ch; ch = ch->next)
        ch->node = NULL;
    while (ps->nodes)
        dist__ps_node_free(ps, ps->nodes);
    dist__ps_ears_close();
    if (orphaned) {
        /* Nobody joins this thread.  Only now, its nodes gone, may a call
         * start another, which subscribes every channel anew. */
        for (ch = ps->chans; ch; ch = ch->next) {
            ch->wire = W_NONE;
            pthread_cond_broadcast(&ch->cv);
            dist__ps_kick(ch);
        }
        ps->running = 0;
        pthread_detach(pthread_self());
    }
    pthread_mutex_unlock(&ps->mu);
    free(l.pfd);
    free(l.pn);
    if (orphaned)
        dist__thread_orphan_exit();
    return NULL;
}
