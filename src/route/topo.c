/* topo.c: which server a lock's keys live on.
 *
 *   redis://, unix://   the URL's server.
 *   redis-sentinel://   the master the sentinels name for the URL's master
 *                       name, confirmed with ROLE when it changes; asked
 *                       again after a connection to it failed and at least
 *                       every second, so a failover is followed about a
 *                       second after the sentinels announce it; at once
 *                       when a sentinel is heard announcing it
 *                       (dist__topo_heard, the pub/sub thread's ears).
 *   redis-cluster://    the slot map of CLUSTER SLOTS, patched by MOVED,
 *                       read again after MOVED or a failed connection and
 *                       every few seconds.
 *
 * One process-wide state under one mutex.  Only one thread asks the network
 * at a time; the others go on with what is known unless it is known to be
 * wrong (then they wait for the answer, bounded by the command timeout). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo.h"

#define SENTINEL_PERIOD_MS 1000 /* ask the sentinels again after this */
#define CLUSTER_PERIOD_MS  5000 /* read the slot map again after this */
#define MIN_GAP_MS         100  /* between two refreshes forced by failures */
#define VOUCH_MS           500 /* dist__topo_vouch's answer holds this long */
#define MAX_NODES          128
#define NO_NODE            0xff

/* ---- hash slots --------------------------------------------------------- */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, no reflection, initial value 0),
 * the checksum Redis Cluster takes modulo 16384. */
uint16_t dist__crc16(const char *p, size_t len)
{
    uint16_t crc = 0;
    size_t i;
    int b;

    for (i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)p[i] << 8);
        for (b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                                 : (uint16_t)(crc << 1);
    }
    return crc;
}

/* Only the part between the first '{' and the next '}' counts, if that part
 * is not empty; otherwise the whole key. */
int dist__keyslot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return dist__crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return dist__crc16(key, len) & 16383;
}

/* ---- shared state ------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a refresh finished */
    int busy;              /* a thread is asking the network */
    unsigned long cfg_gen; /* the settings this state belongs to */
    int valid;             /* what follows was read at least once */
    int stale;             /* known or suspected wrong: ask again */
    uint64_t checked;      /* when it was last read (monotonic ms) */
    uint64_t tried;        /* when a refresh last started */
    unsigned long epoch;   /* bumped whenever the answer changes */
    int kick_renewals;     /* a master changed: run on_change */
    /* sentinel */
    struct dist__addr master;
    int good_seed; /* the sentinel that answered last */
    /* cluster */
    int nnodes;
    struct dist__addr nodes[MAX_NODES];
    struct dist__addr good_node; /* the node that answered last */
    int have_good;
    unsigned char owner[16384]; /* index into nodes, or NO_NODE */
    char why[600];              /* why the last refresh failed */
} T = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* What dist__topo_on_change registered; written before nfns is raised. */
#define MAX_ON_CHANGE 4
static void (*on_change[MAX_ON_CHANGE])(void);
static atomic_int nfns;
static pthread_mutex_t fns_mu = PTHREAD_MUTEX_INITIALIZER;

void dist__topo_on_change(void (*fn)(void))
{
    int i, n;

    pthread_mutex_lock(&fns_mu);
    n = atomic_load(&nfns);
    for (i = 0; i < n && on_change[i] != fn; i++)
        ;
    if (i == n && n < MAX_ON_CHANGE) {
        on_change[n] = fn;
        atomic_store(&nfns, n + 1);
    }
    pthread_mutex_unlock(&fns_mu);
}

static void notify_change(void)
{
    int i, n = atomic_load(&nfns);

    for (i = 0; i < n; i++)
        on_change[i]();
}

/* Before T.mu is first taken.  T.cv is waited on with a monotonic deadline
 * (refresh), so it must run on CLOCK_MONOTONIC: a default condition variable
 * measures the deadline on CLOCK_REALTIME, finds it long past and returns at
 * once, which turned every wait for a busy refresh into a spin. */
static void topo_fork(int phase);
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_register(void)
{
    dist__cond_init_mono(&T.cv);
    dist__atfork_register(topo_fork, DIST__RANK_TOPO);
}

static void topo_init(void)
{
    pthread_once(&topo_once, topo_register);
}

static int same_addr(const struct dist__addr *a, const struct dist__addr *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* A short-lived link for asking a sentinel or a node: no AUTH until the
 * server asks for it (a sentinel may have no password when the data nodes
 * do), and at most a second per command so that a dead one is passed over
 * quickly.  NULL with why filled in. */
static struct dist__link *ask_connect(const struct dist__cfg *cfg,
                                      uint64_t limit,
                                      const struct dist__addr *a, char *why,
                                      size_t whylen)
{
    unsigned long ms = cfg->timeout_ms < 1000 ? cfg->timeout_ms : 1000;
    struct dist__link *l;

    if (dist__link_open(cfg, a, ms, DIST__LINK_BARE, limit, &l, why,
                        whylen) != 0)
        return NULL;
    return l;
}

/* AUTH with the URL's credentials.  0, or -1 with why. */
static int ask_auth(struct dist__link *l, uint64_t limit,
                    const struct dist__cfg *cfg, char *why, size_t whylen)
{
    const char *av[3] = { "AUTH", cfg->user, cfg->pass };
    redisReply *r;
    int rc = cfg->user[0] ? dist__link_cmd(l, limit, 3, av, NULL, &r)
                          : (av[1] = cfg->pass,
                             dist__link_cmd(l, limit, 2, av, NULL, &r));

    if (rc == 0 && r->type != REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        return 0;
    }
    snprintf(why, whylen, "%s refused AUTH: %s", dist__link_where(l),
             rc == 0 ? r->str : dist__link_error(l));
    freeReplyObject(rc == 0 ? r : NULL);
    return -1;
}

/* One command on l, with AUTH first when the server asks for it and the URL
 * has credentials.  NULL with why filled in when it failed or was refused. */
static redisReply *ask(struct dist__link *l, uint64_t limit,
                       const struct dist__cfg *cfg, int argc,
                       const char **argv, char *why, size_t whylen)
{
    redisReply *r;
    int authed = 0;

    for (;;) {
        if (dist__link_cmd(l, limit, argc, argv, NULL, &r) != 0) {
            snprintf(why, whylen, "%s: %s", dist__link_where(l),
                     dist__link_error(l));
            return NULL;
        }
        if (r->type != REDIS_REPLY_ERROR)
            return r;
        if (authed || !(cfg->user[0] || cfg->pass[0]) ||
            strncmp(r->str, "NOAUTH", 6) != 0)
            break;
        freeReplyObject(r);
        authed = 1;
        if (ask_auth(l, limit, cfg, why, whylen) != 0)
            return NULL;
    }
    snprintf(why, whylen, "%s refused %s: %s", dist__link_where(l), argv[0],
             r->str);
    freeReplyObject(r);
    return NULL;
}

static int reply_addr(const redisReply *host, const redisReply *port,
                      const struct dist__addr *asked, struct dist__addr *out)
{
    long long p;

    if (host->type != REDIS_REPLY_STRING || host->len >= sizeof out->host)
        return -1;
    if (port->type == REDIS_REPLY_INTEGER)
        p = port->integer;
    else if (port->type == REDIS_REPLY_STRING)
        p = strtoll(port->str, NULL, 10);
    else
        return -1;
    if (p <= 0 || p > 65535)
        return -1;
    /* an empty or unknown host means the node we asked; the whole struct
     * is written so that two addresses compare with memcmp */
    memset(out, 0, sizeof *out);
    if (host->len == 0 || strcmp(host->str, "?") == 0)
        snprintf(out->host, sizeof out->host, "%s", asked->host);
    else
        memcpy(out->host, host->str, host->len);
    out->port = (int)p;
    return 0;
}

/* Whether the server at a says it is a master (ROLE). */
static int confirm_master(const struct dist__cfg *cfg, uint64_t limit,
                          const struct dist__addr *a, char *why,
                          size_t whylen)
{
    const char *argv[1] = { "ROLE" }, *role;
    struct dist__link *l = ask_connect(cfg, limit, a, why, whylen);
    redisReply *r;
    int ok, replicas;

    if (!l)
        return 0;
    r = ask(l, limit, cfg, 1, argv, why, whylen);
    dist__link_close(l);
    if (!r)
        return 0;
    if (!(ok = dist__role_of(r, &replicas, &role)))
        snprintf(why, whylen, "%.100s:%d is not a master (ROLE says %s)",
                 a->host, a->port, role);
    freeReplyObject(r);
    return ok;
}

/* Asks the sentinels, starting with the one that answered last.  Network
 * only: T.mu is not held.  0 with *out, or -1 with why. */
static int ask_sentinels(const struct dist__cfg *cfg, uint64_t limit,
                         int first, const struct dist__addr *known,
                         struct dist__addr *out, int *answered, char *why,
                         size_t whylen)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                            cfg->master };
    int i;

    for (i = 0; i < cfg->nseeds; i++) {
        int k = (first + i) % cfg->nseeds;
        const struct dist__addr *s = &cfg->seeds[k];
        struct dist__link *l;
        redisReply *r;

        why[0] = 0;
        if (!(l = ask_connect(cfg, limit, s, why, whylen)))
            continue;
        r = ask(l, limit, cfg, 3, argv, why, whylen);
        dist__link_close(l);
        if (!r)
            continue;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            reply_addr(r->element[0], r->element[1], s, out) != 0) {
            snprintf(why, whylen,
                     "sentinel %.100s:%d does not know a master "
                     "named '%s'",
                     s->host, s->port, cfg->master);
            freeReplyObject(r);
            continue;
        }
        freeReplyObject(r);
        /* a master we already use was confirmed when it was connected to;
         * a new one is asked, so that a stale sentinel is not believed */
        if ((known && same_addr(known, out)) ||
            confirm_master(cfg, limit, out, why, whylen)) {
            *answered = k;
            return 0;
        }
    }
    if (!why[0])
        snprintf(why, whylen, "no sentinel given");
    return -1;
}

/* The value of field name in one entry of a SENTINEL reply (field, value,
 * ...), or "". */
static const char *field_of(const redisReply *e, const char *name)
{
    size_t i;

    if (e->type != REDIS_REPLY_ARRAY)
        return "";
    for (i = 0; i + 1 < e->elements; i++) {
        const redisReply *k = e->element[i], *v = e->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
            strcmp(k->str, name) == 0)
            return v->str;
    }
    return "";
}

/* Whether one entry of SENTINEL REPLICAS is a copy of the master the
 * sentinel sees up: a replica by its own word (an old master not yet
 * demoted is listed too, saying master) whose link to the master is up
 * (one still in its first sync is not a copy yet, and a master's ROLE
 * lists only replicas online), not down or disconnected.  A replica being
 * promoted counts until the sentinel sees it as a master, which is when
 * it names it. */
static int replica_up(const redisReply *e)
{
    const char *flags = field_of(e, "flags");

    return strcmp(field_of(e, "role-reported"), "slave") == 0 &&
           strcmp(field_of(e, "master-link-status"), "ok") == 0 &&
           !strstr(flags, "s_down") && !strstr(flags, "o_down") &&
           !strstr(flags, "disconnected");
}

/* How many replicas of the master a sentinel sees up (SENTINEL REPLICAS on
 * l), or -1 when it cannot say. */
static int replicas_up(struct dist__link *l, const struct dist__cfg *cfg)
{
    const char *argv[3] = { "SENTINEL", "replicas", cfg->master };
    redisReply *r;
    char why[300];
    size_t i;
    int n = 0;

    if (!(r = ask(l, 0, cfg, 3, argv, why, sizeof why)))
        return -1;
    if (r->type != REDIS_REPLY_ARRAY)
        n = -1;
    for (i = 0; n >= 0 && i < r->elements; i++)
        n += replica_up(r->element[i]);
    freeReplyObject(r);
    return n;
}

/* Sentinel s's word on a: 1 when it names another master (*other), 0 when
 * it names a (*up: the replicas of it s sees up, or -1), -1 when it does
 * not answer. */
static int sentinel_word(const struct dist__cfg *cfg,
                         const struct dist__addr *s,
                         const struct dist__addr *a, struct dist__addr *other,
                         int *up)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                            cfg->master };
    struct dist__link *l;
    redisReply *r;
    char why[300];
    int rc = -1;

    if (!(l = ask_connect(cfg, 0, s, why, sizeof why)))
        return -1;
    if ((r = ask(l, 0, cfg, 3, argv, why, sizeof why)) != NULL &&
        r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        reply_addr(r->element[0], r->element[1], s, other) == 0)
        rc = !same_addr(a, other);
    freeReplyObject(r);
    if (rc == 0)
        *up = replicas_up(l, cfg);
    dist__link_close(l);
    return rc;
}

static int node_index(const struct dist__addr *a)
{
    int i;

    for (i = 0; i < T.nnodes; i++)
        if (same_addr(&T.nodes[i], a))
            return i;
    if (T.nnodes == MAX_NODES)
        return -1;
    T.nodes[T.nnodes] = *a;
    return T.nnodes++;
}

/* The slot map from one node.  0 with the map filled, -1 with why. */
static int read_slots(const struct dist__cfg *cfg, uint64_t limit,
                      const struct dist__addr *a, int *nnodes,
                      struct dist__addr *nodes, unsigned char *owner,
                      char *why, size_t whylen)
{
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    struct dist__link *l = ask_connect(cfg, limit, a, why, whylen);
    redisReply *r;
    size_t i;
    int j, covered = 0;

    if (!l)
        return -1;
    r = ask(l, limit, cfg, 2, argv, why, whylen);
    dist__link_close(l);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        snprintf(why, whylen,
                 "%.100s:%d serves no slots (is it a cluster node "
                 "that has joined a cluster?)",
                 a->host, a->port);
        freeReplyObject(r);
        return -1;
    }
    memset(owner, NO_NODE, 16384);
    *nnodes = 0;
    for (i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        struct dist__addr m;
        long long lo, hi;
        int idx = -1;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 ||
            reply_addr(e->element[2]->element[0], e->element[2]->element[1],
                       a, &m) != 0)
            continue;
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        if (lo < 0 || hi > 16383 || lo > hi)
            continue;
        for (j = 0; j < *nnodes; j++)
            if (same_addr(&nodes[j], &m))
                idx = j;
        if (idx < 0 && *nnodes < MAX_NODES) {
            idx = (*nnodes)++;
            nodes[idx] = m;
        }
        if (idx < 0)
            continue;
        for (j = (int)lo; j <= (int)hi; j++)
            owner[j] = (unsigned char)idx;
        covered += (int)(hi - lo + 1);
    }
    freeReplyObject(r);
    if (covered == 0) {
        snprintf(why, whylen, "%.100s:%d gave an empty slot map", a->host,
                 a->port);
        return -1;
    }
    return 0;
}

/* Reads the map from the nodes known so far, then the URL's.  Network only. */
static int ask_cluster(const struct dist__cfg *cfg, uint64_t limit,
                       int nknown, const struct dist__addr *known,
                       const struct dist__addr *last_good,
                       struct dist__addr *answered, int *nnodes,
                       struct dist__addr *nodes, unsigned char *owner,
                       char *why, size_t whylen)
{
    int i;

    /* the node that answered last first: a dead node early in the list
     * would cost a connect timeout at every refresh */
    for (i = -1; i < nknown + cfg->nseeds; i++) {
        const struct dist__addr *a;
        if (i < 0 && !last_good)
            continue;
        a = i < 0        ? last_good
            : i < nknown ? &known[i]
                         : &cfg->seeds[i - nknown];
        why[0] = 0;
        if (read_slots(cfg, limit, a, nnodes, nodes, owner, why, whylen) ==
            0) {
            *answered = *a;
            return 0;
        }
    }
    if (!why[0])
        snprintf(why, whylen, "no cluster node given");
    return -1;
}

/* A refresh got an answer; changed: it differs from what T held.  A change
 * of a master that was known makes the renewal thread renew every hold on
 * the new one.  T.mu held. */
static void answered_with(int changed)
{
    if (T.valid && changed)
        T.kick_renewals = 1;
    if (!T.valid || changed)
        T.epoch++;
    T.valid = 1;
    T.stale = 0;
    T.checked = dist__now_ms();
}

static void failed_with(const char *why)
{
    snprintf(T.why, sizeof T.why, "%s", why);
    T.stale = 1;
}

/* Brings T up to date when it is due, or waits for the thread that does,
 * until then; the queries end by limit (see link.h).  T.mu held on entry
 * and exit. */
static void refresh(const struct dist__cfg *cfg, uint64_t limit,
                    uint64_t until)
{
    uint64_t now = dist__now_ms();
    unsigned long period = cfg->mode == DIST__MODE_SENTINEL
                               ? SENTINEL_PERIOD_MS
                               : CLUSTER_PERIOD_MS;
    int due, must;

    if (T.cfg_gen != cfg->gen) {
        T.cfg_gen = cfg->gen;
        T.valid = 0;
        T.stale = 0;
        T.nnodes = 0;
        T.have_good = 0;
        T.good_seed = 0;
        T.why[0] = 0;
    }
    must = !T.valid || (T.stale && now >= T.tried + MIN_GAP_MS);
    due = must || now >= T.checked + period;
    if (!due)
        return;
    if (T.busy) {
        struct timespec ts;
        /* someone asks already: go on with what is known, unless it is
         * known to be wrong */
        if (!must)
            return;
        dist__ms_to_ts(until, &ts);
        while (T.busy && dist__now_ms() < until)
            pthread_cond_timedwait(&T.cv, &T.mu, &ts);
        return;
    }
    T.busy = 1;
    T.tried = now;
    if (cfg->mode == DIST__MODE_SENTINEL) {
        struct dist__addr known = T.master, got;
        int had = T.valid, first = T.good_seed, answered = 0, rc;
        char why[600];
        pthread_mutex_unlock(&T.mu);
        rc = ask_sentinels(cfg, limit, first, had ? &known : NULL, &got,
                           &answered, why, sizeof why);
        pthread_mutex_lock(&T.mu);
        if (T.cfg_gen == cfg->gen) {
            if (rc == 0) {
                answered_with(!T.valid || !same_addr(&T.master, &got));
                T.master = got;
                T.good_seed = answered;
            } else {
                failed_with(why);
            }
        }
    } else {
        static struct dist__addr known[MAX_NODES], nodes[MAX_NODES];
        static unsigned char owner[16384];
        struct dist__addr good = T.good_node, answered;
        int nknown = T.nnodes, nnodes = 0, had_good = T.have_good, rc;
        char why[600];

        /* the static scratch is only touched by the one busy thread */
        memcpy(known, T.nodes, sizeof known[0] * (size_t)nknown);
        pthread_mutex_unlock(&T.mu);
        rc = ask_cluster(cfg, limit, nknown, known, had_good ? &good : NULL,
                         &answered, &nnodes, nodes, owner, why, sizeof why);
        pthread_mutex_lock(&T.mu);
        if (T.cfg_gen == cfg->gen) {
            if (rc == 0) {
                answered_with(T.nnodes != nnodes ||
                              memcmp(T.nodes, nodes,
                                     sizeof nodes[0] * (size_t)nnodes) ||
                              memcmp(T.owner, owner, sizeof owner));
                T.nnodes = nnodes;
                memcpy(T.nodes, nodes, sizeof nodes[0] * (size_t)nnodes);
                memcpy(T.owner, owner, sizeof owner);
                T.good_node = answered;
                T.have_good = 1;
            } else {
                failed_with(why);
            }
        }
    }
    T.busy = 0;
    pthread_cond_broadcast(&T.cv);
}

int dist__route(const struct dist__cfg *cfg, uint64_t limit,
                const struct dist__buf *key, struct dist__addr *out)
{
    uint64_t until = dist__link_until(cfg->timeout_ms, limit);
    int rc = 0;

    if (cfg->mode == DIST__MODE_SINGLE) {
        if (cfg->path[0]) {
            out->host[0] = 0;
            out->port = 0;
        } else {
            memcpy(out->host, cfg->host, sizeof out->host);
            out->port = cfg->port;
        }
        return 0;
    }
    topo_init();
    pthread_mutex_lock(&T.mu);
    refresh(cfg, limit, until);
    if (T.kick_renewals) {
        /* a master changed: tell who asked (the renewal thread renews
         * every hold now); outside T.mu, as they may route calls too */
        T.kick_renewals = 0;
        pthread_mutex_unlock(&T.mu);
        notify_change();
        pthread_mutex_lock(&T.mu);
    }
    if (!T.valid || T.cfg_gen != cfg->gen) {
        rc = dist__err(EIO, "%s: %s",
                       cfg->mode == DIST__MODE_SENTINEL
                           ? "cannot find the master from the sentinels"
                           : "cannot read the cluster's slot map",
                       T.why[0] ? T.why : "no answer yet");
    } else if (cfg->mode == DIST__MODE_SENTINEL) {
        *out = T.master;
    } else {
        int slot = key ? dist__keyslot(key->p, key->len) : -1, i;
        unsigned char o = NO_NODE;
        if (slot >= 0)
            o = T.owner[slot];
        for (i = 0; slot < 0 && i < 16384; i++) /* any master */
            if (T.owner[i] != NO_NODE)
                o = T.owner[i];
        if (o == NO_NODE) {
            T.stale = 1;
            rc = dist__err(EIO,
                           "cluster slot %d has no master (the cluster "
                           "is down or being resharded)",
                           slot);
        } else {
            *out = T.nodes[o];
        }
    }
    pthread_mutex_unlock(&T.mu);
    return rc;
}

int dist__topo_confirm(const struct dist__cfg *cfg,
                       const struct dist__addr *a, uint64_t limit)
{
    struct dist__addr got;
    int first, answered = 0, rc;
    char why[600];

    if (cfg->mode != DIST__MODE_SENTINEL)
        return 0;
    topo_init();
    pthread_mutex_lock(&T.mu);
    first = T.good_seed;
    pthread_mutex_unlock(&T.mu);
    /* a is known to answer as a master, so no ROLE for it again */
    rc =
        ask_sentinels(cfg, limit, first, a, &got, &answered, why, sizeof why);
    pthread_mutex_lock(&T.mu);
    if (rc == 0 && T.cfg_gen == cfg->gen) {
        answered_with(!T.valid || !same_addr(&T.master, &got));
        T.master = got;
        T.good_seed = answered;
    }
    pthread_mutex_unlock(&T.mu);
    /* no sentinel answers: the server's own word (ROLE) stands, rather
     * than refusing a master that works */
    if (rc != 0)
        return 0;
    if (!same_addr(&got, a))
        return dist__err(EIO,
                         "%.100s:%d answers as a master, but the "
                         "sentinels now name %.100s:%d",
                         a->host, a->port, got.host, got.port);
    return 0;
}

/* The last master dist__topo_vouch found fine with `listed` replicas, and
 * when: asking again within VOUCH_MS is spared (a master that stays
 * replica-less would otherwise cost every acquire a sentinel's round
 * trips).  Under T.mu. */
static struct dist__addr vouched;
static int vouched_listed = -1;
static uint64_t vouched_ms;

static int vouched_lately(const struct dist__addr *a, int listed)
{
    int yes;

    pthread_mutex_lock(&T.mu);
    yes = vouched_listed == listed && same_addr(&vouched, a) &&
          dist__now_ms() < vouched_ms + VOUCH_MS;
    pthread_mutex_unlock(&T.mu);
    return yes;
}

static void vouch_for(const struct dist__addr *a, int listed)
{
    pthread_mutex_lock(&T.mu);
    vouched = *a;
    vouched_listed = listed;
    vouched_ms = dist__now_ms();
    pthread_mutex_unlock(&T.mu);
}

int dist__topo_vouch(const struct dist__cfg *cfg, const struct dist__addr *a,
                     int listed, struct dist__addr *now)
{
    int i, up, most_up = -1;
    char why[600];

    if (cfg->mode != DIST__MODE_SENTINEL || vouched_lately(a, listed))
        return 0;
    topo_init();
    /* every sentinel: the one leading a failover may be the only one that
     * knows yet, and it names the new master only once it sees it
     * promoted */
    for (i = 0; i < cfg->nseeds; i++) {
        int w = sentinel_word(cfg, &cfg->seeds[i], a, now, &up);
        if (w == 1 && confirm_master(cfg, 0, now, why, sizeof why))
            return dist__err(EIO,
                             "%.100s:%d is no longer the master: the "
                             "sentinels name %.100s:%d",
                             a->host, a->port, now->host, now->port),
                   DIST__EDEPOSED;
        if (w == 0 && up > most_up)
            most_up = up;
    }
    /* still theirs (or nobody's word better than its own), but with fewer
     * replicas attached than a sentinel sees up: the one missing may be
     * the one being promoted, and a hold taken here would not survive
     * that promotion */
    if (listed < 0 || most_up <= listed) {
        vouch_for(a, listed);
        return 0;
    }
    return dist__err(DIST_ENOREPLICA,
                     "%.100s:%d lists %d replica%s while a "
                     "sentinel sees %d up (a failover may be under way)",
                     a->host, a->port, listed, listed == 1 ? "" : "s",
                     most_up);
}

void dist__topo_adopt(const struct dist__cfg *cfg, const struct dist__addr *m)
{
    topo_init();
    pthread_mutex_lock(&T.mu);
    if (T.cfg_gen == cfg->gen) {
        answered_with(!T.valid || !same_addr(&T.master, m));
        T.master = *m;
    }
    pthread_mutex_unlock(&T.mu);
}

int dist__route_masters(const struct dist__cfg *cfg, uint64_t limit,
                        struct dist__addr *out, int max)
{
    int n = 0, i, j;

    if (cfg->mode != DIST__MODE_CLUSTER)
        return dist__route(cfg, limit, NULL, out) == 0 ? 1 : -1;
    if (dist__route(cfg, limit, NULL, out) != 0) /* the map up to date */
        return -1;
    pthread_mutex_lock(&T.mu);
    for (i = 0; i < T.nnodes && n < max; i++) {
        int serves = 0;
        for (j = 0; j < 16384 && !serves; j++)
            serves = T.owner[j] == i;
        if (serves)
            out[n++] = T.nodes[i];
    }
    pthread_mutex_unlock(&T.mu);
    return n;
}

void dist__topo_moved(int slot, const struct dist__addr *to)
{
    int idx;

    topo_init();
    pthread_mutex_lock(&T.mu);
    if (T.valid && slot >= 0 && slot < 16384 && (idx = node_index(to)) >= 0) {
        T.owner[slot] = (unsigned char)idx;
        T.epoch++;
    }
    T.stale = 1; /* more slots probably moved with it */
    pthread_mutex_unlock(&T.mu);
}

/* Sentinel: a link to sentinel seed subscribed to +switch-master, where
 * it announces each switch of a master as it takes it in: a process that
 * listens there follows a failover when a sentinel does, not at its next
 * question (SENTINEL_PERIOD_MS).  AUTH as ask does it. */
int dist__topo_listen(const struct dist__cfg *cfg, int seed,
                      struct dist__link **out)
{
    const char *argv[2] = { "SUBSCRIBE", "+switch-master" };
    struct dist__link *l;
    redisReply *r;
    char why[600];

    *out = NULL;
    if (cfg->mode != DIST__MODE_SENTINEL || seed < 0 || seed >= cfg->nseeds)
        return -1;
    if (!(l = ask_connect(cfg, 0, &cfg->seeds[seed], why, sizeof why)))
        return -1;
    if (!(r = ask(l, 0, cfg, 2, argv, why, sizeof why))) {
        dist__link_close(l);
        return -1;
    }
    freeReplyObject(r); /* ["subscribe", "+switch-master", 1] */
    *out = l;
    return 0;
}

/* The new master in a +switch-master message of cfg's master: "<name>
 * <old ip> <old port> <new ip> <new port>".  0, or -1 when it is about
 * another master or not one. */
static int switched_to(const struct dist__cfg *cfg, const redisReply *r,
                       struct dist__addr *to)
{
    const redisReply *m;
    size_t nlen = strlen(cfg->master);
    char host[sizeof to->host], rest[sizeof to->host + 64];
    int port;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "message") != 0)
        return -1;
    m = r->element[2];
    if (m->type != REDIS_REPLY_STRING || m->len <= nlen ||
        m->len >= sizeof rest + nlen || memcmp(m->str, cfg->master, nlen) ||
        m->str[nlen] != ' ')
        return -1;
    memcpy(rest, m->str + nlen, m->len - nlen);
    rest[m->len - nlen] = 0;
    if (sscanf(rest, "%*s %*d %255s %d", host, &port) != 2 || port <= 0 ||
        port > 65535)
        return -1;
    memset(to, 0, sizeof *to); /* compared with same_addr */
    snprintf(to->host, sizeof to->host, "%s", host);
    to->port = port;
    return 0;
}

int dist__topo_heard(const struct dist__cfg *cfg, int seed,
                     const redisReply *r)
{
    struct dist__addr to;

    if (switched_to(cfg, r, &to) != 0)
        return 0;
    topo_init();
    pthread_mutex_lock(&T.mu);
    if (T.cfg_gen == cfg->gen && !(T.valid && same_addr(&T.master, &to))) {
        /* asked at the next lookup, that sentinel first: it has switched
         * (the answer is confirmed with ROLE as any new master is) */
        T.stale = 1;
        T.tried = 0;
        T.good_seed = seed;
    }
    pthread_mutex_unlock(&T.mu);
    return 1;
}

void dist__topo_stale(void)
{
    topo_init();
    pthread_mutex_lock(&T.mu);
    T.stale = 1;
    pthread_mutex_unlock(&T.mu);
}

unsigned long dist__topo_epoch(void)
{
    unsigned long e;

    topo_init();
    pthread_mutex_lock(&T.mu);
    e = T.epoch;
    pthread_mutex_unlock(&T.mu);
    return e;
}

static void topo_fork(int phase)
{
    if (phase == 0) {
        pthread_mutex_lock(&T.mu);
    } else if (phase == 1) {
        pthread_mutex_unlock(&T.mu);
    } else {
        dist__cond_init_mono(&T.cv);
        T.busy = 0;
        pthread_mutex_unlock(&T.mu);
    }
}
