/* pubsub.c: the pub/sub thread, one per process.  It subscribes each
 * channel once however many threads wait on it, and turns release messages
 * into wake-ups of local waiters.
 *
 * Waiters talk to it through the channel table and a pipe; only this thread
 * touches the connections.  A message is only a hint: waiters always bound
 * their sleep by the holder's lease, so a lost message costs time, never a
 * hang.  Whenever a channel may have missed messages its waiters are all
 * woken to retry: at once when its connection broke (and again once it is
 * subscribed anew), once it is subscribed on its new node when it moved.
 *
 * The connections, "nodes" here:
 *
 *   redis://, unix://, redis-sentinel://   one, to the master, opened when
 *       the thread starts and kept; SUBSCRIBE.  Behind sentinels it follows
 *       the master: it is dropped when dist__route names another one.
 *   redis-cluster://   releases are published with SPUBLISH and heard only
 *       on the node serving the channel's slot (a lock's channels carry its
 *       {hash tag}, so that is the lock's node).  A channel is subscribed
 *       with SSUBSCRIBE on the node dist__route names for its name; there
 *       is one connection per such node, opened when a channel needs it and
 *       closed once it has served none for IDLE_MS.  A channel moves to the
 *       node serving its slot now when its node's connection breaks, when
 *       the node answers MOVED or drops the subscription itself (an
 *       sunsubscribe not asked for: the slot was migrated away), and when
 *       the slot map changes (dist__topo_epoch, looked at every turn; the
 *       map is asked for every MAP_CHECK_MS, which reads it again when due).
 *
 * Every (S)SUBSCRIBE and (S)UNSUBSCRIBE names one channel, and each node
 * keeps those not answered yet: answers come in order, so an error belongs
 * to the oldest.  A channel leaving a node is unsubscribed there without
 * waiting; what that node says about it afterwards is ignored.
 *
 * P.mu guards the channel table and the list of nodes.  A node's other
 * fields and its context belong to the thread, which does its network I/O
 * without P.mu.  Only the thread frees channels and nodes (and
 * dist__pubsub_shutdown, after it ended), so it keeps pointers to them
 * across an unlock. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pubsub.h"
#include "route.h"

enum wire { W_NONE, W_SUBSCRIBING, W_SUBSCRIBED, W_UNSUBSCRIBING };

struct node;

struct dist__chan {
    struct dist__chan *next;
    char *name;
    size_t len;
    int refs;               /* threads waiting on it */
    struct node *node;      /* where it is or will be subscribed; NULL: not
                             * placed yet (or about to be freed) */
    enum wire wire;         /* its state there; W_NONE unless node is
                             * connected */
    int resub;              /* wake all waiters once subscribed: messages
                             * may have been missed meanwhile */
    int sent;               /* commands naming it not answered yet */
    int errors;             /* failed placements or subscribes in a row */
    uint64_t retry_at;      /* not placed or subscribed before (errors) */
    unsigned long permits;  /* wake-ups not yet taken */
    unsigned long gen;      /* wake-all messages so far (see sub_wait_since) */
    uint64_t idle_since;    /* when refs last fell to 0 */
    pthread_cond_t cv;
};

struct sent {               /* a command awaiting its answer */
    struct dist__chan *ch;
    int unsub;
};

struct node {
    struct node *next;
    struct dist__addr addr;   /* cluster: what it is; otherwise the master
                               * it last connected to */
    int sharded;              /* SSUBSCRIBE (cluster) rather than SUBSCRIBE */
    struct dist__link *link;  /* NULL: not connected */
    unsigned long cfg_gen;    /* the settings c was opened with */
    int backoff;              /* ms to wait after the next failed connect,
                               * or a connection lost soon after it */
    uint64_t retry_at;        /* no connect before */
    uint64_t connected_at;    /* when c was opened; 0: not connected */
    uint64_t idle_since;      /* cluster: connected and serving no channel
                               * since; 0 otherwise */
    int nchans;               /* channels placed on it, as last counted */
    int out;                  /* commands appended, not written yet */
    struct sent *q;           /* unanswered commands: a ring, oldest at */
    int qhead, qlen, qcap;    /* qhead */
};

/* A channel nobody waits on stays subscribed this long: a lock contended
 * once is usually contended again, and the next waiter then neither waits
 * for a SUBSCRIBE nor wakes this thread. */
#define GRACE_MS 250
/* A cluster node's connection serving no channel is closed after this. */
#define IDLE_MS 1000
/* On a cluster, dist__route is asked this often so that the slot map is
 * read again when due even if no other thread needs it. */
#define MAP_CHECK_MS 1000
#define BACKOFF_MIN_MS 50
#define HEALTHY_MS     1000  /* a connection that lived this long worked */

static struct {
    pthread_mutex_t mu;
    struct dist__chan *chans;
    struct node *nodes;
    struct node *left;      /* in a forked child: the parent's nodes, never
                             * used (see pubsub_fork) */
    int running, stop;
    pthread_t th;
    int pipe[2];
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .pipe = { -1, -1 } };

static void *pubsub_main(void *arg);
static void pubsub_fork(int phase);
static pthread_once_t pubsub_once = PTHREAD_ONCE_INIT;

static void pubsub_register(void)
{
    dist__atfork_register(pubsub_fork, DIST__RANK_PUBSUB);
}

/* Before P.mu is first taken: a fork must find it registered.  Every other
 * entry point has a channel from dist__sub_get. */
static void pubsub_init(void)
{
    pthread_once(&pubsub_once, pubsub_register);
}

static void poke(void)
{
    char b = 1;
    ssize_t n;

    if (P.pipe[1] >= 0) {
        do
            n = write(P.pipe[1], &b, 1);
        while (n < 0 && errno == EINTR);
    }
}

/* P.mu held. */
static void ensure_thread(void)
{
    int i;

    if (P.running)
        return;
    if (P.pipe[0] < 0) {
        if (pipe(P.pipe) != 0) {
            P.pipe[0] = P.pipe[1] = -1;
            return;
        }
        for (i = 0; i < 2; i++) {
            fcntl(P.pipe[i], F_SETFL, fcntl(P.pipe[i], F_GETFL) | O_NONBLOCK);
            fcntl(P.pipe[i], F_SETFD, FD_CLOEXEC);
        }
    }
    P.stop = 0;
    if (dist__thread_start(&P.th, pubsub_main) == 0)
        P.running = 1;
    else
        fprintf(stderr, "distlock: cannot start the pub/sub thread\n");
}

static struct dist__chan *find(const char *name, size_t len)
{
    struct dist__chan *ch;

    for (ch = P.chans; ch; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

struct dist__chan *dist__sub_get(const struct dist__buf *chan)
{
    struct dist__chan *ch;

    pubsub_init();
    pthread_mutex_lock(&P.mu);
    ch = find(chan->p, chan->len);
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch || !(ch->name = malloc(chan->len + 1)) ||
            dist__cond_init_mono(&ch->cv) != 0) {
            if (ch)
                free(ch->name);
            free(ch);
            pthread_mutex_unlock(&P.mu);
            return NULL;
        }
        memcpy(ch->name, chan->p, chan->len);
        ch->name[chan->len] = 0;
        ch->len = chan->len;
        ch->next = P.chans;
        P.chans = ch;
    }
    ch->refs++;
    ensure_thread();
    if (ch->wire != W_SUBSCRIBED)
        poke();
    pthread_mutex_unlock(&P.mu);
    return ch;
}

void dist__sub_put(struct dist__chan *ch)
{
    if (!ch)
        return;
    pthread_mutex_lock(&P.mu);
    if (--ch->refs == 0) {
        ch->permits = 0;
        ch->idle_since = dist__now_ms();   /* the thread unsubscribes later */
    }
    pthread_mutex_unlock(&P.mu);
}

int dist__sub_listening(const struct dist__buf *chan, int *waiters)
{
    struct dist__chan *ch;
    int subscribed = 0;

    pubsub_init();
    *waiters = 0;
    pthread_mutex_lock(&P.mu);
    ch = find(chan->p, chan->len);
    if (ch) {
        subscribed = ch->wire == W_SUBSCRIBED || ch->wire == W_UNSUBSCRIBING;
        *waiters = ch->refs;
    }
    pthread_mutex_unlock(&P.mu);
    return subscribed;
}

void dist__sub_wait_ready(struct dist__chan *ch, uint64_t until_ms)
{
    struct timespec ts;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&P.mu);
    while (ch->wire != W_SUBSCRIBED && P.running && dist__now_ms() < until_ms)
        if (pthread_cond_timedwait(&ch->cv, &P.mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&P.mu);
}

int dist__sub_wait(struct dist__chan *ch, uint64_t until_ms)
{
    struct timespec ts;
    int rc = ETIMEDOUT;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&P.mu);
    for (;;) {
        if (ch->permits > 0) {
            ch->permits--;
            rc = 0;
            break;
        }
        if (dist__now_ms() >= until_ms)
            break;
        pthread_cond_timedwait(&ch->cv, &P.mu, &ts);
    }
    pthread_mutex_unlock(&P.mu);
    return rc;
}

unsigned long dist__sub_gen(struct dist__chan *ch)
{
    unsigned long gen;

    pthread_mutex_lock(&P.mu);
    gen = ch->gen;
    pthread_mutex_unlock(&P.mu);
    return gen;
}

int dist__sub_wait_since(struct dist__chan *ch, unsigned long gen,
                         uint64_t until_ms)
{
    struct timespec ts;
    int rc = ETIMEDOUT;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&P.mu);
    for (;;) {
        if (ch->gen != gen) {
            rc = 0;          /* a wake-all: no other waiter can take it */
            break;
        }
        if (ch->permits > 0) {
            ch->permits--;
            rc = 0;
            break;
        }
        if (dist__now_ms() >= until_ms)
            break;
        pthread_cond_timedwait(&ch->cv, &P.mu, &ts);
    }
    pthread_mutex_unlock(&P.mu);
    return rc;
}

/* P.mu held.  '1' (a write release of a read-write lock) wakes everyone,
 * anything else one waiter: the others would only lose the race. */
static void wake(struct dist__chan *ch, int all)
{
    if (all)
        ch->gen++;
    if (ch->refs == 0)
        return;
    if (all) {
        ch->permits = (unsigned long)ch->refs;
        pthread_cond_broadcast(&ch->cv);
    } else {
        if (ch->permits < (unsigned long)ch->refs)
            ch->permits++;
        pthread_cond_signal(&ch->cv);
    }
}

/* ---- the thread's side: nodes and what was sent to them ------------------ */

static int same_addr(const struct dist__addr *a, const struct dist__addr *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Remembers a command sent to n for ch.  0, or -1 when out of memory. */
static int q_push(struct node *n, struct dist__chan *ch, int unsub)
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
    n->q[(n->qhead + n->qlen) % n->qcap] = (struct sent){ ch, unsub };
    n->qlen++;
    ch->sent++;
    return 0;
}

/* Takes the oldest unanswered command of n into *s; 0 when there is none. */
static int q_pop(struct node *n, struct sent *s)
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
static int q_head_is(const struct node *n, int unsub, const redisReply *name)
{
    const struct sent *s = n->qlen ? &n->q[n->qhead] : NULL;

    return s && s->unsub == unsub && s->ch->len == name->len &&
           memcmp(s->ch->name, name->str, name->len) == 0;
}

/* Appends (S)SUBSCRIBE or (S)UNSUBSCRIBE of ch to n's output.  P.mu held.
 * 0, or -1 (not connected, out of memory). */
static int send_cmd(struct node *n, struct dist__chan *ch, int unsub)
{
    static const char *const cmds[2][2] = {
        { "SUBSCRIBE", "UNSUBSCRIBE" }, { "SSUBSCRIBE", "SUNSUBSCRIBE" },
    };
    const char *argv[2];
    size_t argvlen[2];

    if (!n->link || q_push(n, ch, unsub) != 0)
        return -1;
    argv[0] = cmds[n->sharded][unsub];
    argvlen[0] = strlen(argv[0]);
    argv[1] = ch->name;
    argvlen[1] = ch->len;
    if (dist__link_append(n->link, 2, argv, argvlen) != 0) {
        n->qlen--;            /* not sent after all */
        ch->sent--;
        return -1;
    }
    n->out++;
    return 0;
}

/* The node at a, made when new.  P.mu held.  NULL when out of memory. */
static struct node *node_get(const struct dist__addr *a, int sharded)
{
    struct node *n;

    for (n = P.nodes; n; n = n->next)
        if (same_addr(&n->addr, a))
            return n;
    if (!(n = calloc(1, sizeof *n)))
        return NULL;
    n->addr = *a;
    n->sharded = sharded;
    n->backoff = BACKOFF_MIN_MS;
    n->next = P.nodes;
    P.nodes = n;
    return n;
}

/* Closes n and forgets what was sent to it.  P.mu held. */
static void disconnect(struct node *n)
{
    struct sent s;

    while (q_pop(n, &s))
        ;
    dist__link_close(n->link);
    n->link = NULL;
    n->out = 0;
    n->idle_since = 0;
}

/* Unlinks and frees n; no channel may be placed on it.  P.mu held. */
static void node_free(struct node *n)
{
    struct node **pp;

    for (pp = &P.nodes; *pp; pp = &(*pp)->next)
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
 * otherwise n is the only node and every channel is its.  P.mu held. */
static void lost_node(struct node *n)
{
    struct dist__chan *ch;

    disconnect(n);
    if (n->connected_at && dist__now_ms() >= n->connected_at + HEALTHY_MS) {
        n->backoff = BACKOFF_MIN_MS;
        n->retry_at = 0;      /* it had worked: reconnect at once */
    } else {
        /* lost as soon as it was made (a server at maxclients, or one
         * that refuses us after accepting): back off as after a failed
         * connect, instead of reconnecting in a tight loop */
        n->retry_at = dist__now_ms() + (uint64_t)n->backoff;
        if (n->backoff < 1000)
            n->backoff *= 2;
    }
    n->connected_at = 0;
    for (ch = P.chans; ch; ch = ch->next) {
        if (n->sharded && ch->node != n)
            continue;
        if (ch->wire != W_NONE)
            ch->resub = 1;
        ch->wire = W_NONE;
        if (n->sharded)
            ch->node = NULL;
        wake(ch, 1);
    }
    if (n->sharded)
        dist__topo_stale();
}

/* Takes ch off its node so that it is placed again (the slot map says its
 * slot is served elsewhere): unsubscribed there if it may be subscribed,
 * without waiting for the answer, and its waiters woken once it is
 * subscribed on the new node.  P.mu held. */
static void move_off(struct dist__chan *ch)
{
    struct node *n = ch->node;

    if (n && (ch->wire == W_SUBSCRIBED || ch->wire == W_SUBSCRIBING))
        send_cmd(n, ch, 1);
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

/* "MOVED <slot> <host>:<port>"; an empty host is the node that said it.
 * 0 with *slot and *to, or -1. */
static int parse_moved(const char *e, const struct node *n, int *slot,
                       struct dist__addr *to)
{
    const char *host, *colon;
    char *end;
    long s, p;

    if (strncmp(e, "MOVED ", 6) != 0)
        return -1;
    s = strtol(e + 6, &end, 10);
    if (end == e + 6 || *end != ' ' || s < 0 || s > 16383)
        return -1;
    host = end + 1;
    if (!(colon = strrchr(host, ':')) || (size_t)(colon - host) >= sizeof to->host)
        return -1;
    p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || p <= 0 || p > 65535)
        return -1;
    memset(to, 0, sizeof *to);   /* topo.c compares whole addresses */
    if (colon == host)
        snprintf(to->host, sizeof to->host, "%s", n->addr.host);
    else
        memcpy(to->host, host, (size_t)(colon - host));
    to->port = (int)p;
    *slot = (int)s;
    return 0;
}

/* n answered a command with an error.  A SUBSCRIBE is tried again (on a
 * cluster after placing the channel again: MOVED says where its slot went,
 * and the map is patched with it); a refused UNSUBSCRIBE leaves nothing to
 * wait for.  P.mu held. */
static void refused(struct node *n, const struct sent *s, const char *err)
{
    struct dist__chan *ch = s->ch;
    struct dist__addr to;
    int slot;

    if (ch->node != n)
        return;               /* it has left n since */
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
        if (parse_moved(err, n, &slot, &to) == 0)
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
static void handle(struct node *n, redisReply *r)
{
    struct dist__chan *ch;
    redisReply *kind, *name;
    struct sent s;

    pthread_mutex_lock(&P.mu);
    if (r->type == REDIS_REPLY_ERROR) {
        if (q_pop(n, &s))
            refused(n, &s, r->str);
        pthread_mutex_unlock(&P.mu);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        pthread_mutex_unlock(&P.mu);
        return;
    }
    kind = r->element[0];
    name = r->element[1];
    ch = find(name->str, name->len);
    if (kind_is(kind, "message")) {
        /* from whichever node: a hint is never wrong for long */
        redisReply *msg = r->element[2];
        int all = msg->type == REDIS_REPLY_STRING && msg->len == 1 &&
                  msg->str[0] == '1';
        if (ch)
            wake(ch, all);
    } else if (kind_is(kind, "subscribe")) {
        if (q_head_is(n, 0, name))
            q_pop(n, &s);
        if (ch && ch->node == n && ch->wire == W_SUBSCRIBING) {
            ch->wire = W_SUBSCRIBED;
            ch->errors = 0;
            pthread_cond_broadcast(&ch->cv);   /* wait_ready */
            if (ch->resub) {
                ch->resub = 0;
                wake(ch, 1);   /* messages may have been missed meanwhile */
            }
        }
    } else if (kind_is(kind, "unsubscribe")) {
        /* Our answer, or the node dropping the subscription itself (a
         * cluster node does when the slot leaves it).  Either way ch is no
         * longer subscribed there.  An answer to an older command always
         * comes before the one that made ch subscribed again, so while it
         * is subscribed this cannot be stale. */
        if (q_head_is(n, 1, name))
            q_pop(n, &s);
        if (ch && ch->node == n && ch->wire == W_UNSUBSCRIBING) {
            ch->wire = W_NONE;
        } else if (ch && ch->node == n && ch->wire == W_SUBSCRIBED) {
            ch->wire = W_NONE;
            ch->resub = 1;
            if (n->sharded) {
                ch->node = NULL;       /* placed again where the map says */
                dist__topo_stale();
            }
        }
    }
    pthread_mutex_unlock(&P.mu);
}

/* ---- the thread's turns ------------------------------------------------ */

struct loop {                 /* the thread's own */
    struct dist__cfg cfg;     /* the settings, as last read */
    int have_cfg;
    int cluster;              /* cfg.mode == DIST__MODE_CLUSTER */
    unsigned long epoch;      /* dist__topo_epoch the channels were placed at */
    uint64_t map_due;         /* next dist__route to keep the map fresh */
    struct pollfd *pfd;       /* the pipe, then the connected nodes */
    struct node **pn;
    int cap;
};

/* Takes in new settings.  Connections made with the old ones are dropped;
 * on a cluster, or when the mode changed, every channel is placed again. */
static void settings(struct loop *l)
{
    struct dist__chan *ch;
    struct node *n, *nx;
    int was = l->have_cfg ? l->cluster : -1;

    if (l->have_cfg && dist__cfg_gen() == l->cfg.gen)
        return;
    dist__cfg_get(&l->cfg);
    l->have_cfg = 1;
    l->cluster = l->cfg.mode == DIST__MODE_CLUSTER;
    pthread_mutex_lock(&P.mu);
    for (n = P.nodes; n; n = n->next)
        if (n->link && n->cfg_gen != l->cfg.gen)
            lost_node(n);
    if (l->cluster || was != l->cluster) {
        for (ch = P.chans; ch; ch = ch->next) {
            ch->node = NULL;
            ch->wire = W_NONE;   /* already, as no node is connected */
        }
        for (n = P.nodes; n; n = nx) {
            nx = n->next;
            node_free(n);
        }
    }
    pthread_mutex_unlock(&P.mu);
}

/* Behind sentinels: drops the connection when the master changed.  On a
 * cluster: lets the map be read again when due, and moves the channels
 * whose slot is now served by another node. */
static void follow(struct loop *l, uint64_t now)
{
    struct dist__chan *ch;
    struct dist__addr a;
    struct node *n = P.nodes;   /* only this thread changes the list */
    unsigned long e;

    if (l->cfg.mode == DIST__MODE_SENTINEL && n && n->link) {
        /* the sentinels are asked about once a second, and releases are
         * published on the new master */
        if (dist__route(&l->cfg, NULL, &a) == 0 && !same_addr(&a, &n->addr)) {
            pthread_mutex_lock(&P.mu);
            lost_node(n);
            pthread_mutex_unlock(&P.mu);
        }
        return;
    }
    if (!l->cluster)
        return;
    if (n && now >= l->map_due) {
        dist__route(&l->cfg, NULL, &a);
        l->map_due = now + MAP_CHECK_MS;
    }
    if ((e = dist__topo_epoch()) == l->epoch)
        return;
    l->epoch = e;
    pthread_mutex_lock(&P.mu);
    for (ch = P.chans; ch; ch = ch->next) {
        struct dist__buf key = { ch->name, ch->len };
        struct node *to;
        int rc;
        if (!(n = ch->node) || ch->wire == W_UNSUBSCRIBING)
            continue;
        pthread_mutex_unlock(&P.mu);
        rc = dist__route(&l->cfg, &key, &a);
        pthread_mutex_lock(&P.mu);
        if (rc != 0 || same_addr(&a, &n->addr))
            continue;
        to = ch->refs > 0 ? node_get(&a, 1) : NULL;
        move_off(ch);
        ch->node = to;     /* NULL: placed again, or freed if unused */
    }
    pthread_mutex_unlock(&P.mu);
}

/* Gives the channels that need one a node: the master's, or on a cluster
 * the one serving the channel's slot. */
static void place(struct loop *l, uint64_t now, uint64_t *next)
{
    struct dist__chan *ch;
    struct node *master = NULL;

    pthread_mutex_lock(&P.mu);
    if (!l->cluster) {
        static const struct dist__addr none;
        /* the connection is kept even while no channel needs it */
        if ((master = P.nodes) == NULL)
            master = node_get(&none, 0);
    }
    for (ch = P.chans; ch; ch = ch->next) {
        struct dist__buf key = { ch->name, ch->len };
        struct dist__addr a;
        struct node *n;
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
        pthread_mutex_unlock(&P.mu);
        rc = dist__route(&l->cfg, &key, &a);
        pthread_mutex_lock(&P.mu);
        if (rc == 0 && (n = node_get(&a, 1)) != NULL) {
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
    pthread_mutex_unlock(&P.mu);
}

/* Counts the channels of each node.  P.mu held. */
static void count_chans(void)
{
    struct dist__chan *ch;
    struct node *n;

    for (n = P.nodes; n; n = n->next)
        n->nchans = 0;
    for (ch = P.chans; ch; ch = ch->next)
        if (ch->node)
            ch->node->nchans++;
}

/* Connects the nodes that are needed and due. */
static void open_nodes(struct loop *l, uint64_t *next)
{
    struct node *n;

    pthread_mutex_lock(&P.mu);
    count_chans();
    pthread_mutex_unlock(&P.mu);
    for (n = P.nodes; n; n = n->next) {
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
            rc = dist__route(&l->cfg, NULL, &a);   /* the master, now */
        if (rc == 0)
            rc = dist__route_open_master(&l->cfg, &a, &c);
        pthread_mutex_lock(&P.mu);
        if (rc == 0) {
            n->link = c;
            n->addr = a;
            n->cfg_gen = l->cfg.gen;
            n->connected_at = dist__now_ms();
        } else {
            struct dist__chan *ch;
            dist__topo_stale();
            n->retry_at = dist__now_ms() + (uint64_t)n->backoff;
            if (n->backoff < 1000)
                n->backoff *= 2;
            if (*next > n->retry_at)
                *next = n->retry_at;
            /* on a cluster its channels are placed again: the map may
             * name another node by now */
            for (ch = P.chans; n->sharded && ch; ch = ch->next)
                if (ch->node == n)
                    ch->node = NULL;
        }
        pthread_mutex_unlock(&P.mu);
    }
}

/* Queues the (un)subscribes the table asks for, frees channels nobody needs
 * and counts the channels of each node.  P.mu held.  next (may be NULL):
 * lowered to when something is due. */
static void reconcile(uint64_t now, uint64_t *next)
{
    struct dist__chan **pp = &P.chans, *ch;
    struct node *n;

    for (n = P.nodes; n; n = n->next)
        n->nchans = 0;
    while ((ch = *pp) != NULL) {
        if (ch->refs == 0 && ch->wire == W_NONE) {
            ch->node = NULL;
            if (ch->sent == 0) {   /* no answer will name it */
                *pp = ch->next;
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
            } else if (send_cmd(n, ch, 0) == 0) {
                ch->wire = W_SUBSCRIBING;
            }
        } else if (n && n->link && ch->refs == 0 && ch->wire == W_SUBSCRIBED) {
            if (now < ch->idle_since + GRACE_MS) {
                if (next && ch->idle_since + GRACE_MS < *next)
                    *next = ch->idle_since + GRACE_MS;
            } else if (send_cmd(n, ch, 1) == 0) {
                ch->wire = W_UNSUBSCRIBING;
            }
        }
        pp = &ch->next;
    }
}

/* Closes the cluster nodes that have served no channel for IDLE_MS, and
 * forgets the unconnected ones once their backoff is over.  P.mu held,
 * right after reconcile counted the channels. */
static void close_idle(uint64_t now, uint64_t *next)
{
    struct node *n, *nx;
    uint64_t due;

    for (n = P.nodes; n; n = nx) {
        nx = n->next;
        if (!n->sharded || n->nchans > 0) {
            n->idle_since = 0;
            continue;
        }
        if (n->link && !n->idle_since)
            n->idle_since = now;
        due = n->link ? n->idle_since + IDLE_MS : n->retry_at;
        if (now >= due)
            node_free(n);
        else if (due < *next)
            *next = due;
    }
}

/* Sends what reconcile and follow queued. */
static void flush(void)
{
    struct node *n;

    for (n = P.nodes; n; n = n->next) {
        if (!n->link || n->out == 0)
            continue;
        n->out = 0;
        if (dist__link_flush(n->link, dist__link_deadline(n->link)) != 0) {
            pthread_mutex_lock(&P.mu);
            lost_node(n);
            pthread_mutex_unlock(&P.mu);
        }
    }
}

static void drain_pipe(void)
{
    char buf[64];

    while (read(P.pipe[0], buf, sizeof buf) > 0)
        ;
}

static void read_node(struct node *n)
{
    redisReply *reply;

    dist__link_read_some(n->link);
    while (dist__link_next(n->link, &reply) == 1) {
        handle(n, reply);
        freeReplyObject(reply);
    }
    if (dist__link_broken(n->link)) {
        pthread_mutex_lock(&P.mu);
        lost_node(n);
        pthread_mutex_unlock(&P.mu);
    }
}

/* Polls the pipe and every connected node until next, and reads what came. */
static void wait_and_read(struct loop *l, uint64_t next)
{
    struct node *n;
    uint64_t now;
    int k = 1, i;

    for (n = P.nodes; n; n = n->next)
        k += n->link != NULL;
    if (k > l->cap) {
        struct pollfd *pfd = realloc(l->pfd, sizeof *pfd * (size_t)k);
        struct node **pn;
        if (pfd)
            l->pfd = pfd;
        pn = realloc(l->pn, sizeof *pn * (size_t)k);
        if (pn)
            l->pn = pn;
        if (!pfd || !pn) {
            dist__sleep_ms(50);   /* out of memory: try again soon */
            return;
        }
        l->cap = k;
    }
    l->pfd[0] = (struct pollfd){ P.pipe[0], POLLIN, 0 };
    k = 1;
    for (n = P.nodes; n; n = n->next)
        if (n->link) {
            l->pn[k] = n;
            l->pfd[k++] = (struct pollfd){ dist__link_fd(n->link), POLLIN, 0 };
        }
    now = dist__now_ms();
    if (poll(l->pfd, (nfds_t)k, next > now ? (int)(next - now) : 0) <= 0)
        return;
    if (l->pfd[0].revents) {
        drain_pipe();
        /* Someone needs a channel: the master's connection in backoff is
         * tried now.  Not a cluster node's: connecting blocks this thread,
         * and the other nodes' messages would wait for a dead one. */
        for (n = P.nodes; n; n = n->next)
            if (!n->link && !n->sharded)
                n->retry_at = 0;
    }
    for (i = 1; i < k; i++)
        if (l->pfd[i].revents && l->pn[i]->link)
            read_node(l->pn[i]);
}

static void *pubsub_main(void *arg)
{
    struct loop l;
    struct dist__chan *ch;

    DIST__UNUSED(arg);
    memset(&l, 0, sizeof l);
    for (;;) {
        uint64_t now, next;
        int stop;

        pthread_mutex_lock(&P.mu);
        stop = P.stop;
        pthread_mutex_unlock(&P.mu);
        if (stop)
            break;

        settings(&l);
        now = dist__now_ms();
        next = now + 1000;
        follow(&l, now);
        place(&l, now, &next);
        open_nodes(&l, &next);
        now = dist__now_ms();
        pthread_mutex_lock(&P.mu);
        reconcile(now, &next);
        if (l.cluster)
            close_idle(now, &next);
        pthread_mutex_unlock(&P.mu);
        flush();
        wait_and_read(&l, next);
    }
    pthread_mutex_lock(&P.mu);
    for (ch = P.chans; ch; ch = ch->next)
        ch->node = NULL;
    while (P.nodes)
        node_free(P.nodes);
    pthread_mutex_unlock(&P.mu);
    free(l.pfd);
    free(l.pn);
    return NULL;
}

void dist__pubsub_shutdown(void)
{
    struct dist__chan *ch;
    pthread_t th;
    int running;

    pubsub_init();
    pthread_mutex_lock(&P.mu);
    running = P.running;
    th = P.th;
    P.stop = 1;
    poke();
    pthread_mutex_unlock(&P.mu);
    if (running)
        pthread_join(th, NULL);

    pthread_mutex_lock(&P.mu);
    P.running = 0;
    for (ch = P.chans; ch; ch = ch->next) {
        ch->wire = W_NONE;
        pthread_cond_broadcast(&ch->cv);
    }
    reconcile(0, NULL);   /* frees the channels nobody waits on */
    pthread_mutex_unlock(&P.mu);
}

static void pubsub_fork(int phase)
{
    struct dist__chan *ch;

    if (phase == 0) {
        pthread_mutex_lock(&P.mu);
    } else if (phase == 1) {
        pthread_mutex_unlock(&P.mu);
    } else {
        pthread_mutex_init(&P.mu, NULL);
        /* No thread waits in the child; the parent's subscriptions and
         * sockets are not ours.  Its nodes are put aside, never used nor
         * freed: the parent's thread may have been using a context when
         * the fork came, and closing a socket sends nothing anyway. */
        for (ch = P.chans; ch; ch = ch->next) {
            ch->refs = 0;
            ch->wire = W_NONE;
            ch->node = NULL;
            ch->sent = 0;
            ch->permits = 0;
            dist__cond_init_mono(&ch->cv);
        }
        if (P.nodes) {
            struct node *last = P.nodes;
            while (last->next)
                last = last->next;
            last->next = P.left;
            P.left = P.nodes;
            P.nodes = NULL;
        }
        reconcile(0, NULL);
        P.running = 0;
        P.stop = 0;
        if (P.pipe[0] >= 0) {
            close(P.pipe[0]);
            close(P.pipe[1]);
            P.pipe[0] = P.pipe[1] = -1;
        }
    }
}
