/* cmd_watch.c: distlock watch NAME: a subscriber link on the lock's
 * release channels, and a fresh picture of the lock whenever a message
 * comes or the interval passes; watch_events.c prints the differences. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

#define WATCH_INTERVAL_MS 100
#define MAX_HOPS          5

struct chan {
    char *p;
    size_t n;
};

/* watch's subscriber link: the lock's release channels, and each fair
 * waiter's own channel (redisson_lock__channel:{N}:<owner>, where a
 * release wakes the head of the queue).  On one server (or the sentinels'
 * master, or a cluster with ?pubsub=plain, whose PUBLISH reaches every
 * node) a pattern covers the waiters' channels; a cluster otherwise
 * publishes with SPUBLISH, heard only by SSUBSCRIBE on the node that owns
 * the slot, and sharded pub/sub has no patterns, so there each queued
 * waiter's channel is subscribed while it waits.  With ?pubsub=both (a
 * cluster's default) the link, on the slot's node, listens both ways. */
struct sub {
    struct dist__link *l; /* NULL: not connected */
    struct dist__names *n;
    struct dist__buf *ch; /* [0] the lock's channel, [1] the rwlock's */
    const char *name;
    struct chan *own; /* the waiters' channels subscribed (cluster) */
    size_t nown;
    int resub; /* subscribe anew: a slot moved, a refusal */
};

static const enum dist__nm chans[] = { DIST__N_CHAN, DIST__N_RWCHAN };

/* The retries of one subscription. */
struct tries {
    int hops;
    uint64_t until;
    unsigned long backoff;
    int asking; /* the next try goes to `to`, after ASKING */
    struct dist__addr to;
};

/* The lock's channel as a glob that matches only itself. */
static void glob_quote(struct sb *b, const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strchr("*?[]\\", p[i]) && p[i])
            sb_addn(b, "\\", 1);
        sb_addn(b, p + i, 1);
    }
}

static int sub_wants(const struct sub *u, const char *p, size_t len)
{
    size_t i;

    if ((len == L(u->ch[0]) && memcmp(p, B(u->ch[0]), len) == 0) ||
        (len == L(u->ch[1]) && memcmp(p, B(u->ch[1]), len) == 0))
        return 1;
    for (i = 0; i < u->nown; i++)
        if (u->own[i].n == len && memcmp(u->own[i].p, p, len) == 0)
            return 1;
    return 0;
}

static void append(struct sub *u, int argc, const char **argv,
                   const size_t *lens)
{
    if (dist__link_append(u->l, argc, argv, lens) == ENOMEM)
        die(EX_REDIS, "out of memory");
}

/* Queues the plain subscriptions, SUBSCRIBE of the lock's channels and a
 * pattern for the waiters': returns how many replies they bring. */
static int sub_append_plain(struct sub *u)
{
    const char *sa[3] = { "SUBSCRIBE", B(u->ch[0]), B(u->ch[1]) };
    size_t sl[3] = { 9, L(u->ch[0]), L(u->ch[1]) };
    const char *pa[2] = { "PSUBSCRIBE", NULL };
    size_t pl[2] = { 10, 0 };
    struct sb pat = { 0 };

    glob_quote(&pat, B(u->ch[0]), L(u->ch[0]));
    sb_adds(&pat, ":*");
    pa[1] = pat.p;
    pl[1] = pat.len;
    append(u, 3, sa, sl);
    append(u, 2, pa, pl);
    sb_free(&pat);
    return 3;
}

/* Queues the subscriptions: returns how many replies they bring.  On a
 * cluster with ?pubsub=both (the default) both kinds, on the node of the
 * lock's slot: a plain PUBLISH reaches that node too. */
static int sub_append(struct sub *u)
{
    size_t argc = 3 + u->nown, i;
    const char **a;
    size_t *l;

    if (!sharded_pubsub())
        return sub_append_plain(u);
    a = xrealloc(NULL, argc * sizeof *a);
    l = xrealloc(NULL, argc * sizeof *l);
    a[0] = "SSUBSCRIBE";
    l[0] = 10;
    a[1] = B(u->ch[0]);
    l[1] = L(u->ch[0]);
    a[2] = B(u->ch[1]);
    l[2] = L(u->ch[1]);
    for (i = 0; i < u->nown; i++) {
        a[3 + i] = u->own[i].p;
        l[3 + i] = u->own[i].n;
    }
    append(u, (int)argc, a, l);
    free(a);
    free(l);
    return (int)argc - 1 + (both_pubsub() ? sub_append_plain(u) : 0);
}

/* Subscribes on u's link (after ASKING when asking).  0 subscribed, 1 with
 * *err (a refusal: one error for the whole command), DIST__ECONN. */
static int sub_send(struct sub *u, int asking, redisReply **err)
{
    static const char *const ask[1] = { "ASKING" };
    uint64_t until = dist__link_deadline(u->l, rlimit);
    redisReply *r;
    int k, nrep;

    *err = NULL;
    if (asking)
        append(u, 1, (const char **)ask, NULL);
    nrep = sub_append(u) + asking;
    for (k = 0; k < nrep; k++) {
        if (dist__link_reply(u->l, until, &r) != 0)
            return DIST__ECONN;
        if (k >= asking && r->type == REDIS_REPLY_ERROR) {
            *err = r;
            return 1;
        }
        freeReplyObject(r);
    }
    return 0;
}

/* Connects u where the next try goes: the ASK target, or the master of
 * the lock now.  0, or -1 with the reason in dist_last_error(). */
static int sub_connect(struct sub *u, const struct tries *t)
{
    struct dist__addr a;

    dist__link_close(u->l);
    u->l = NULL;
    if (t->asking)
        a = t->to;
    else if (dist__route(&rcfg, rlimit, &u->n->name, &a) != 0)
        return -1;
    return dist__route_open_master(&rcfg, &a, rlimit, &u->l) == 0 ? 0 : -1;
}

/* After a refusal err: where the next try goes (MOVED, ASK), or a pause
 * (TRYAGAIN and the like).  Exit 3 when it is no redirection or too many. */
static void sub_redirect(struct sub *u, struct tries *t, redisReply *err)
{
    enum dist__redirect k;
    int slot;

    k = dist__redirect_of(err, dist__link_addr(u->l), &slot, &t->to);
    if (k == DIST__R_NONE)
        die(EX_REDIS, "Redis at %s refused %s: %s", dist__link_where(u->l),
            sharded_pubsub() ? "SSUBSCRIBE" : "SUBSCRIBE", err->str);
    if ((k == DIST__R_MOVED || k == DIST__R_ASK) && ++t->hops > MAX_HOPS)
        die(EX_REDIS,
            "cannot subscribe to the channels of '%s': more than "
            "%d redirections (the cluster is being resharded); the last, "
            "from %s: %s",
            u->name, MAX_HOPS, dist__link_where(u->l), err->str);
    if (k == DIST__R_MOVED)
        dist__topo_moved(slot, &t->to);
    t->asking = k == DIST__R_ASK;
    if (k == DIST__R_LATER_STALE)
        dist__topo_stale();
    if (k == DIST__R_LATER || k == DIST__R_LATER_STALE) {
        if (dist__now_ms() >= t->until)
            die(EX_REDIS,
                "cannot subscribe to the channels of '%s': Redis "
                "at %s: %s",
                u->name, dist__link_where(u->l), err->str);
        dist__sleep_ms(t->backoff);
        if (t->backoff < 200)
            t->backoff *= 2;
    }
}

/* The link failed or none could be made (why): tried again at once the
 * first time, then after a pause, for the command timeout. */
static void sub_lost(struct sub *u, struct tries *t, const char *why)
{
    dist__topo_stale();
    t->asking = 0;
    if (dist__now_ms() >= t->until)
        die(EX_REDIS, "cannot subscribe to the channels of '%s': %s", u->name,
            why);
    if (t->backoff > 10)
        dist__sleep_ms(t->backoff);
    if (t->backoff < 200)
        t->backoff *= 2;
}

/* Subscribes u anew on the master of the lock; after a lost link (retry)
 * keeps trying for the command timeout.  Exit 3 when it cannot. */
static void sub_open(struct sub *u, int retry)
{
    struct tries t = {
        0, dist__now_ms() + rcfg.timeout_ms, 10, 0, { "", 0 }
    };
    redisReply *err;
    char why[600];
    int rc;

    u->resub = 0;
    for (;;) {
        if (sub_connect(u, &t) != 0) {
            if (!retry)
                die(EX_REDIS, "%s", redis_why());
            snprintf(why, sizeof why, "%s", redis_why());
            sub_lost(u, &t, why);
            continue;
        }
        retry = 1;
        if ((rc = sub_send(u, t.asking, &err)) == 0)
            return;
        if (rc == 1) {
            sub_redirect(u, &t, err);
            freeReplyObject(err);
            continue;
        }
        snprintf(why, sizeof why, "lost the connection to Redis at %s: %s",
                 dist__link_where(u->l), dist__link_error(u->l));
        sub_lost(u, &t, why);
    }
}

/* On a cluster: drops the channels of waiters no longer queued in cur. */
static int sub_unwatch_gone(struct sub *u, const struct snap *cur)
{
    size_t i;
    int sent = 0;

    for (i = 0; i < u->nown;) {
        const char *o = u->own[i].p + L(u->ch[0]) + 1;
        size_t on = u->own[i].n - L(u->ch[0]) - 1;
        const char *a[2] = { "SUNSUBSCRIBE", u->own[i].p };
        size_t l[2] = { 12, u->own[i].n };
        if (waiter_in(cur->q, cur->nq, o, on, NULL)) {
            i++;
            continue;
        }
        append(u, 2, a, l);
        sent = 1;
        free(u->own[i].p);
        u->own[i] = u->own[--u->nown];
    }
    return sent;
}

/* With sharded pub/sub (no patterns): subscribes the channel of each waiter
 * queued in cur, and drops those of waiters gone. */
static void sub_waiters(struct sub *u, const struct snap *cur)
{
    size_t i, j;
    int sent;

    if (!sharded_pubsub() || !u->l)
        return;
    sent = sub_unwatch_gone(u, cur);
    for (i = 0; i < cur->nq; i++) {
        struct sb ch = { 0 };
        sb_addn(&ch, B(u->ch[0]), L(u->ch[0]));
        sb_addn(&ch, ":", 1);
        sb_addn(&ch, cur->q[i].owner, cur->q[i].olen);
        for (j = 0; j < u->nown; j++)
            if (u->own[j].n == ch.len &&
                memcmp(u->own[j].p, ch.p, ch.len) == 0)
                break;
        if (j < u->nown) {
            sb_free(&ch);
            continue;
        }
        {
            const char *a[2] = { "SSUBSCRIBE", ch.p };
            size_t l[2] = { 10, ch.len };
            append(u, 2, a, l);
            sent = 1;
        }
        u->own = xrealloc(u->own, (u->nown + 1) * sizeof *u->own);
        u->own[u->nown].p = ch.p; /* keeps the buffer */
        u->own[u->nown++].n = ch.len;
    }
    /* a subscriber reads only when told to: send now */
    if (sent &&
        dist__link_flush(u->l, dist__link_deadline(u->l, rlimit)) != 0)
        u->resub = 1; /* the next look finds the link broken */
}

static void sub_close(struct sub *u)
{
    size_t i;

    for (i = 0; i < u->nown; i++)
        free(u->own[i].p);
    free(u->own);
    u->own = NULL;
    u->nown = 0;
    dist__link_close(u->l);
    u->l = NULL;
}

/* One message or reply: counts release messages; a refusal, or the server
 * dropping a channel we want (its slot moved away), sets u->resub. */
static void sub_message(struct sub *u, const redisReply *x, int *msgs)
{
    const char *kind;
    const redisReply *ch;

    if (x->type == REDIS_REPLY_ERROR) {
        u->resub = 1;
        return;
    }
    if (x->type != REDIS_REPLY_ARRAY || x->elements < 3 ||
        x->element[0]->type != REDIS_REPLY_STRING)
        return;
    kind = x->element[0]->str;
    ch = x->element[1];
    if (strcmp(kind, "message") == 0 || strcmp(kind, "pmessage") == 0 ||
        strcmp(kind, "smessage") == 0)
        ++*msgs;
    else if (strcmp(kind, "sunsubscribe") == 0 &&
             ch->type == REDIS_REPLY_STRING && sub_wants(u, ch->str, ch->len))
        u->resub = 1;
}

/* Reads what the subscriber link has, waiting up to ms for it.  -1 when
 * the link failed. */
static int sub_drain(struct sub *u, int ms, int *msgs)
{
    struct pollfd p = { dist__link_fd(u->l), POLLIN, 0 };
    redisReply *x;
    int n;

    for (;;) {
        while ((n = dist__link_next(u->l, &x)) == 1) {
            sub_message(u, x, msgs);
            freeReplyObject(x);
            ms = 0; /* something came: look at the lock now */
        }
        if (n < 0)
            return -1;
        n = poll(&p, 1, ms);
        if (n < 0)
            return errno == EINTR ? 0 : -1;
        if (n == 0)
            return 0;
        if (dist__link_read_some(u->l) != 0)
            return -1;
        ms = 0;
    }
}

/* Whether u's link still goes where the lock lives: after a failover or a
 * slot that moved it is subscribed anew. */
static int sub_placed(const struct sub *u)
{
    const struct dist__addr *at;
    struct dist__addr a;

    if (!u->l)
        return 0;
    if (rcfg.mode == DIST__MODE_SINGLE ||
        dist__route(&rcfg, rlimit, &u->n->name, &a) != 0)
        return 1; /* a failed lookup: the link itself will tell */
    at = dist__link_addr(u->l);
    return a.port == at->port && strcmp(a.host, at->host) == 0;
}

/* sub_drain, subscribing anew when the link broke, the server dropped the
 * channels or the lock's master changed; exit 3 when that fails for the
 * command timeout.  *look is set when messages may have been missed. */
static void sub_pump(struct sub *u, int ms, int *msgs, int *look)
{
    if (!u->resub && sub_placed(u) && sub_drain(u, ms, msgs) == 0)
        return;
    sub_open(u, 1);
    *look = 1;
}

static int watch_opt(int argc, char **argv, int *i, void *arg)
{
    return interval_opt(argc, argv, i, arg);
}

/* Looks at the lock whenever a message came or the interval passed, and
 * prints what changed, until a signal (or stdout closed). */
static void watch_loop(struct sub *u, struct snap *prev, long interval)
{
    uint64_t next = dist__now_ms() + (uint64_t)interval;
    int msgs = 0, look = 0;
    struct snap cur;

    while (!stop_sig) {
        uint64_t now = dist__now_ms();
        int wait = now >= next ? 0 : (int)(next - now);

        sub_pump(u, wait, &msgs, &look);
        if (stop_sig)
            break;
        if (msgs == 0 && !look && dist__now_ms() < next)
            continue;
        snap_take(u->name, strlen(u->name), &cur);
        if (strcmp(cur.type, "none") == 0 && prev->nh > 0 && msgs == 0) {
            /* gone: give a release message in flight a moment to arrive
             * before calling it an expiry */
            sub_pump(u, 50, &msgs, &look);
        }
        if (ev_diff(prev, &cur, msgs > 0) != 0) {
            snap_free(&cur);
            break; /* stdout closed */
        }
        snap_free(prev);
        *prev = cur;
        sub_waiters(u, prev);
        msgs = look = 0;
        next = dist__now_ms() + (uint64_t)interval;
    }
}

int cmd_watch(int argc, char **argv)
{
    long interval = WATCH_INTERVAL_MS;
    const char *name = name_args(argc, argv, watch_opt, &interval);
    struct snap prev;
    struct sub u;

    redis_setup();
    memset(&u, 0, sizeof u);
    u.name = name;
    u.n = lock_names(name, strlen(name));
    if (!(u.ch = dist__names_set(u.n, chans, 2)))
        die(EX_REDIS, "out of memory");
    catch_stops();
    snap_take(name, strlen(name), &prev);
    sub_open(&u, 0);
    /* subscribed: look again, so that nothing falls between */
    snap_free(&prev);
    snap_take(name, strlen(name), &prev);
    sub_waiters(&u, &prev);
    if (ev_state(&prev) == 0)
        watch_loop(&u, &prev, interval);
    sub_close(&u);
    free(u.ch);
    dist__names_unref(u.n);
    snap_free(&prev);
    return 0;
}
