/* route.c: calls on the server a key lives on.  Each thread keeps one link
 * per server it talks to (one, unless on a cluster), confirmed as the
 * master when it was opened; a link that failed is closed and reopened.
 * What a server answers instead of running a call is followed here:
 * MOVED and ASK a few hops, "not now" (TRYAGAIN, CLUSTERDOWN, LOADING,
 * MASTERDOWN, READONLY) for up to the command timeout. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "base/stats.h"
#include "scripts.h"

#define POOL          8 /* servers one thread keeps links to */
#define MAX_REDIRECTS 5

struct pooled {
    struct dist__addr addr;
    struct dist__link *l; /* NULL: free slot */
    uint64_t used;        /* for replacing the least recently used */
};

struct tconn {
    struct pooled n[POOL];
    struct dist__cfg cfg; /* a copy, refreshed when the settings change */
    unsigned long fork_gen;
    uint64_t tick;
    /* replies owed while the thread is idle (see "idle threads" below) */
    atomic_int idle;              /* IDLE_NO, IDLE_OWED or IDLE_READING */
    _Atomic uint64_t owed_at;     /* when marked IDLE_OWED, monotonic ms */
    unsigned long listed_gen;     /* in idle_list when it is dist__fork_gen;
                                * idle_mu */
    struct tconn *inext, **iprev; /* idle_list; idle_mu */
};

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t conn_key;
/* thread-local: a thread's links are its own (a link belongs to one thread:
 * replies come back in order); the key's destructor closes them */
static __thread struct tconn *my_conn;

/* ---- idle threads ---------------------------------------------------------
 *
 * A thread's links are its own: only it reads them.  A thread that ends a
 * call with replies still owed (a deferred release) and then stays idle
 * would leave them unread, and a release Redis refused unfinished, until
 * its next call.  So it marks itself IDLE_OWED at the end of the call;
 * the renewal thread may then take its links (IDLE_READING) for a read
 * that does not wait, and gives them back (IDLE_NO once nothing is owed).
 * The owner takes them back at the start of its next use
 * (reclaim, in thread_conns and at its end), waiting while a read is under
 * way.  The state is an atomic: its transitions order everything the two
 * threads do with the links.  idle_list holds the threads that marked
 * themselves (a child of fork starts it empty: the parent's replies are
 * not its own); idle_mu guards it and is held through a read, so that an
 * ending thread, which leaves the list first, is never read once freed. */
enum { IDLE_NO, IDLE_OWED, IDLE_READING };

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tconn *idle_list;
/* thread-local: the renewal thread is in a read of an idle thread's links,
 * for the owed replies' handlers it runs (dist__route_reading_idle) */
static __thread int reading_idle;

DIST__FORK_HOOK(idle_hook, idle_fork, DIST__RANK_IDLE)

/* The parent's threads did not come along, and their replies are not the
 * child's to read. */
static void idle_fork(int phase)
{
    if (phase == 0) {
        pthread_mutex_lock(&idle_mu);
        return;
    }
    if (phase == 2)
        idle_list = NULL;
    pthread_mutex_unlock(&idle_mu);
}

/* idle_mu held. */
static void idle_unlink(struct tconn *t)
{
    if (t->listed_gen != atomic_load(&dist__fork_gen))
        return;
    *t->iprev = t->inext;
    if (t->inext)
        t->inext->iprev = t->iprev;
    t->listed_gen = 0;
}

/* The owner takes its links back: waits while the renewal thread reads
 * them (a read that does not wait: a moment). */
static void reclaim(struct tconn *t)
{
    int s = atomic_load_explicit(&t->idle, memory_order_acquire);

    while (s != IDLE_NO) {
        if (s == IDLE_OWED && atomic_compare_exchange_weak_explicit(
                                  &t->idle, &s, IDLE_NO, memory_order_acquire,
                                  memory_order_acquire))
            return;
        if (s == IDLE_READING) {
            sched_yield();
            s = atomic_load_explicit(&t->idle, memory_order_acquire);
        }
    }
}

/* Whether one of t's links owes a reply. */
static int owes(const struct tconn *t)
{
    int i;

    for (i = 0; i < POOL; i++)
        if (t->n[i].l && dist__link_owed(t->n[i].l))
            return 1;
    return 0;
}

int dist__route_idle_mark(void)
{
    struct tconn *t = my_conn;
    unsigned long gen = atomic_load(&dist__fork_gen);

    if (!t || t->fork_gen != gen || !owes(t))
        return 0;
    idle_hook();
    pthread_mutex_lock(&idle_mu);
    if (t->listed_gen != gen) {
        t->inext = idle_list;
        t->iprev = &idle_list;
        if (idle_list)
            idle_list->iprev = &t->inext;
        idle_list = t;
        t->listed_gen = gen;
    }
    pthread_mutex_unlock(&idle_mu);
    atomic_store_explicit(&t->owed_at, dist__now_ms(), memory_order_relaxed);
    atomic_store_explicit(&t->idle, IDLE_OWED, memory_order_release);
    return 1;
}

int dist__route_reading_idle(void)
{
    return reading_idle;
}

/* Reads what has arrived for t, which the caller has taken; whether it
 * still owes anything. */
static int read_idle_one(struct tconn *t)
{
    int i;

    reading_idle = 1;
    for (i = 0; i < POOL; i++)
        if (t->n[i].l && dist__link_owed(t->n[i].l))
            dist__link_settle(t->n[i].l, 0);
    reading_idle = 0;
    return owes(t);
}

uint64_t dist__route_read_idle(void)
{
    uint64_t now = dist__now_ms(), next = 0, due;
    struct tconn *t, *tn;
    int s;

    idle_hook();
    pthread_mutex_lock(&idle_mu);
    for (t = idle_list; t; t = tn) {
        tn = t->inext;
        s = IDLE_OWED;
        /* a thread that marked itself just now is likely busy: not taken
         * (it would wait for the read) */
        due = atomic_load_explicit(&t->owed_at, memory_order_relaxed) +
              DIST__IDLE_READ_MS;
        if (due > now &&
            atomic_load_explicit(&t->idle, memory_order_relaxed) != IDLE_NO) {
            if (!next || due < next)
                next = due;
            continue;
        }
        if (!atomic_compare_exchange_strong_explicit(
                &t->idle, &s, IDLE_READING, memory_order_acquire,
                memory_order_relaxed)) {
            if (s == IDLE_NO)
                idle_unlink(t); /* busy: it marks itself again */
            continue;
        }
        if (!read_idle_one(t)) {
            idle_unlink(t);
            atomic_store_explicit(&t->idle, IDLE_NO, memory_order_release);
            continue;
        }
        due = now + DIST__IDLE_READ_MS; /* not there yet: look again */
        if (!next || due < next)
            next = due;
        atomic_store_explicit(&t->idle, IDLE_OWED, memory_order_release);
    }
    pthread_mutex_unlock(&idle_mu);
    return next;
}

/* A thread that ends leaves the list, after any read of it. */
static void idle_leave(struct tconn *t)
{
    reclaim(t);
    if (t->listed_gen != atomic_load(&dist__fork_gen))
        return;
    pthread_mutex_lock(&idle_mu);
    idle_unlink(t);
    pthread_mutex_unlock(&idle_mu);
}

/* A link inherited across fork() is the parent's socket: closing our copy
 * of the descriptor is harmless to it, sending anything is not, and
 * closing a link sends nothing.  So the pool needs no fork hook: a child's
 * thread finds dist__fork_gen changed and closes what it has. */
static void close_all(struct tconn *t)
{
    int i;

    for (i = 0; i < POOL; i++) {
        dist__link_close(t->n[i].l);
        t->n[i].l = NULL;
    }
}

/* Reads the replies the thread's links still owe (deferred releases),
 * each within the command timeout and limit (link.h), before they are
 * closed: a thread that exits or shuts down right after a deferred unlock
 * still learns how it ended.  Never in a child of fork(): those replies
 * are the parent's. */
static void settle_all(struct tconn *t, uint64_t limit)
{
    int i;

    if (t->fork_gen != atomic_load(&dist__fork_gen))
        return;
    for (i = 0; i < POOL; i++)
        if (t->n[i].l && dist__link_owed(t->n[i].l))
            dist__link_settle(t->n[i].l,
                              dist__link_deadline(t->n[i].l, limit));
}

static void conn_destructor(void *p)
{
    struct tconn *t = p;

    idle_leave(t);
    settle_all(t, 0);
    close_all(t);
    free(t);
    my_conn = NULL;
}

/* exit() runs no thread-specific destructors: the thread that exits reads
 * its owed replies here. */
static void settle_at_exit(void)
{
    if (my_conn) {
        reclaim(my_conn);
        settle_all(my_conn, 0);
    }
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void exit_init(void)
{
    atexit(settle_at_exit);
}

static void key_init(void)
{
    pthread_key_create(&conn_key, conn_destructor);
}

/* The calling thread's links; settling what they owe on new settings
 * ends by limit (link.h). */
static struct tconn *thread_conns(uint64_t limit)
{
    struct tconn *t = my_conn;
    unsigned long fgen = atomic_load(&dist__fork_gen);
    unsigned long cgen = dist__cfg_gen();

    if (!t) {
        pthread_once(&key_once, key_init);
        t = calloc(1, sizeof *t);
        if (!t) {
            dist__err(ENOMEM, "out of memory");
            return NULL;
        }
        pthread_setspecific(conn_key, t);
        my_conn = t;
        t->cfg.gen = cgen - 1;
    }
    reclaim(t);
    if (t->fork_gen != fgen || t->cfg.gen != cgen) {
        settle_all(t, limit); /* new settings: replies owed still count */
        close_all(t);
        t->fork_gen = fgen;
        dist__cfg_get(&t->cfg);
    }
    return t;
}

int dist__route_open_master(const struct dist__cfg *cfg,
                            const struct dist__addr *a, uint64_t limit,
                            struct dist__link **out)
{
    struct dist__link *l;
    int role, rc;

    *out = NULL;
    if ((rc = dist__link_open(cfg, a, 0, 0, limit, &l, NULL, 0)) != 0) {
        dist__topo_stale();
        return rc;
    }
    role = dist__link_role(l, limit);
    if (role == 1 && dist__topo_confirm(cfg, a, limit) == 0) {
        *out = l;
        return 0;
    }
    if (role == 0)
        dist__err(EIO,
                  "Redis at %s is not a master (the map of the "
                  "servers is out of date; it is read again)",
                  dist__link_where(l));
    else if (role == -1)
        dist__err(EIO, "ROLE: %s", dist__link_error(l));
    dist__link_close(l);
    dist__topo_stale();
    return EIO;
}

/* Closes the link of slot n, reading what it owes by limit (link.h). */
static void pool_close(struct tconn *t, struct pooled *n, uint64_t limit)
{
    /* what it owes may be there already, even on a link the server closed
     * since: read it rather than hand it over as lost */
    if (n->l && dist__link_owed(n->l) &&
        t->fork_gen == atomic_load(&dist__fork_gen))
        dist__link_settle(n->l, dist__link_deadline(n->l, limit));
    dist__link_close(n->l);
    n->l = NULL;
}

/* The thread's link to a, opened as needed, by limit (link.h).  NULL with
 * the reason. */
static struct dist__link *
pool_link(struct tconn *t, const struct dist__addr *a, uint64_t limit)
{
    struct pooled *n = NULL, *lru = &t->n[0];
    int i;

    for (i = 0; i < POOL; i++) {
        struct pooled *x = &t->n[i];
        if (x->l && x->addr.port == a->port &&
            strcmp(x->addr.host, a->host) == 0) {
            n = x;
            break;
        }
        if (!x->l || (lru->l && x->used < lru->used))
            lru = x;
    }
    if (n && !dist__link_alive(n->l))
        pool_close(t, n, limit);
    if (!n) {
        n = lru;
        pool_close(t, n, limit);
        memset(&n->addr, 0, sizeof n->addr);
        snprintf(n->addr.host, sizeof n->addr.host, "%s", a->host);
        n->addr.port = a->port;
    }
    n->used = ++t->tick;
    if (!n->l && dist__route_open_master(&t->cfg, a, limit, &n->l) != 0)
        return NULL;
    return n->l;
}

void dist__route_close_thread(void)
{
    if (my_conn) {
        reclaim(my_conn);
        settle_all(my_conn, 0);
        close_all(my_conn);
    }
}

void dist__route_settle_thread(uint64_t until)
{
    int i;

    if (!my_conn || my_conn->fork_gen != atomic_load(&dist__fork_gen))
        return;
    reclaim(my_conn);
    for (i = 0; i < POOL; i++)
        if (my_conn->n[i].l && dist__link_owed(my_conn->n[i].l))
            dist__link_settle(my_conn->n[i].l, until);
}

/* The scripts' name for how a release message goes under cfg (see
 * prelude_publish.lua). */
static const char *publish_cmd_of(int mode, int pubsub)
{
    if (mode != DIST__MODE_CLUSTER || pubsub == DIST__PUBSUB_PLAIN)
        return "publish";
    return pubsub == DIST__PUBSUB_BOTH ? "spublish+publish" : "spublish";
}

const char *dist__publish_cmd(void)
{
    struct dist__cfg *c = my_conn ? &my_conn->cfg : NULL;
    int mode, pubsub;

    if (c && c->gen == dist__cfg_gen())
        return publish_cmd_of(c->mode, c->pubsub);
    dist__cfg_pubsub(&mode, &pubsub);
    return publish_cmd_of(mode, pubsub);
}

/* ---- redirections ------------------------------------------------------- */

enum dist__redirect dist__redirect_of(const redisReply *r,
                                      const struct dist__addr *from,
                                      int *slot, struct dist__addr *to)
{
    const char *p = r->str, *sp, *colon;
    enum dist__redirect k;
    long v;

    if (r->type != REDIS_REPLY_ERROR || !p)
        return DIST__R_NONE;
    if (strncmp(p, "MOVED ", 6) == 0)
        k = DIST__R_MOVED, p += 6;
    else if (strncmp(p, "ASK ", 4) == 0)
        k = DIST__R_ASK, p += 4;
    else if (strncmp(p, "TRYAGAIN", 8) == 0 ||
             strncmp(p, "LOADING", 7) == 0 || strncmp(p, "BUSY ", 5) == 0)
        return DIST__R_LATER;
    else if (strncmp(p, "CLUSTERDOWN", 11) == 0 ||
             strncmp(p, "MASTERDOWN", 10) == 0 ||
             strncmp(p, "READONLY", 8) == 0)
        return DIST__R_LATER_STALE;
    else
        return DIST__R_NONE;
    v = strtol(p, (char **)&sp, 10);
    if (sp == p || *sp != ' ' || v < 0 || v > 16383)
        return DIST__R_NONE;
    sp++;
    colon = strrchr(sp, ':');
    if (!colon || (size_t)(colon - sp) >= sizeof to->host)
        return DIST__R_NONE;
    memset(to, 0, sizeof *to); /* topo.c compares whole addresses */
    if (colon == sp)           /* no host: the one we asked */
        snprintf(to->host, sizeof to->host, "%s", from->host);
    else
        memcpy(to->host, sp, (size_t)(colon - sp));
    to->port = atoi(colon + 1);
    if (to->port <= 0 || to->port > 65535)
        return DIST__R_NONE;
    *slot = (int)v;
    return k;
}

/* One routed call's state across its tries. */
struct trip {
    struct dist__addr ask; /* where an ASK points */
    int asking;
    int hops;
    uint64_t give_up; /* 0: not waiting yet */
    unsigned long backoff;
    int cut; /* the last pause, cut short, was taken */
    unsigned long timeout_ms;
    uint64_t limit; /* the caller's (link.h) */
};

/* A trip begun through the calling thread's connections, by limit (the
 * caller's, link.h): they, or NULL when it has none (DIST__ENOCONN for
 * the caller). */
static struct tconn *trip_begin(struct trip *tr, uint64_t limit)
{
    struct tconn *t = thread_conns(limit);

    if (t) {
        memset(tr, 0, sizeof *tr);
        tr->backoff = 10;
        tr->timeout_ms = t->cfg.timeout_ms;
        tr->limit = limit;
    }
    return t;
}

/* Where the next try goes: the ASK target, or where the map says.  0, or
 * DIST__ENOCONN with the reason. */
static int trip_target(struct tconn *t, const struct trip *tr,
                       const struct dist__buf *key, struct dist__link **l)
{
    struct dist__addr a;

    if (tr->asking)
        a = tr->ask;
    else if (dist__route(&t->cfg, tr->limit, key, &a) != 0)
        return DIST__ENOCONN;
    if (!(*l = pool_link(t, &a, tr->limit)))
        return DIST__ENOCONN;
    return 0;
}

/* The pause before trying again, or -1 when there is no time for another
 * try, with until (monotonic ms) the end of the call.  The full pause (it
 * doubles up to 320 ms) is taken while it leaves the next try
 * PAUSE_RESERVE_MS; past that, once, a pause cut to leave it that much (or
 * half of what is left), and then no more.  Uncut, the last pause ran past
 * until, and the try after it, begun with no time left, made a call, or
 * `distlock status`, outlast its command timeout by up to a third of a
 * second, and failed with "no answer" from a server that was never
 * asked. */
#define PAUSE_RESERVE_MS  50
#define PAUSE_MIN_LEFT_MS 10

static long pause_for(struct trip *tr, uint64_t until)
{
    uint64_t now = dist__now_ms(), left = until > now ? until - now : 0;
    uint64_t reserve =
        left / 2 < PAUSE_RESERVE_MS ? left / 2 : PAUSE_RESERVE_MS;

    if (left < PAUSE_MIN_LEFT_MS)
        return -1;
    if (tr->backoff + PAUSE_RESERVE_MS <= left)
        return (long)tr->backoff;
    if (tr->cut)
        return -1;
    tr->cut = 1;
    return (long)(left - reserve);
}

/* Sleeps before trying a server that said "not now" again.  0, or -1 when
 * the command timeout is over. */
static int trip_later(struct trip *tr)
{
    long pause;

    if (!tr->give_up)
        tr->give_up = dist__link_until(tr->timeout_ms, tr->limit);
    if ((pause = pause_for(tr, tr->give_up)) < 0)
        return -1;
    dist__sleep_ms((unsigned long)pause);
    if (tr->backoff < 200)
        tr->backoff *= 2;
    /* bounded by time from here: during a migration a script of several
     * keys goes ASK, then TRYAGAIN, until the keys moved */
    tr->hops = -1;
    return 0;
}

/* Closes the pooled link l: its server may be gone or no master. */
static void pool_drop(struct tconn *t, struct dist__link *l, uint64_t limit)
{
    int i;

    for (i = 0; i < POOL; i++)
        if (t->n[i].l == l)
            pool_close(t, &t->n[i], limit);
}

/* The error reply r came from l.  1: try again (tr says where), 0: r is
 * no redirection, -1: time is up (DIST__R_LATER*), -2: too many hops. */
static int trip_next(struct tconn *t, struct trip *tr, struct dist__link *l,
                     const redisReply *r)
{
    struct dist__addr to;
    int slot = -1;

    switch (dist__redirect_of(r, dist__link_addr(l), &slot, &to)) {
    case DIST__R_NONE:
        return 0;
    case DIST__R_MOVED:
        dist__stat_add(DIST__ST_REDIRECTS, 1);
        dist__topo_moved(slot, &to);
        tr->asking = 0;
        break;
    case DIST__R_ASK:
        dist__stat_add(DIST__ST_REDIRECTS, 1);
        tr->ask = to;
        tr->asking = 1;
        break;
    case DIST__R_LATER_STALE:
        pool_drop(t, l, tr->limit);
        dist__topo_stale();
        /* fall through */
    case DIST__R_LATER:
        tr->asking = 0;
        if (trip_later(tr) != 0)
            return -1;
        break;
    }
    return ++tr->hops > MAX_REDIRECTS ? -2 : 1;
}

/* ---- scripts ------------------------------------------------------------ */

/* Whether r is a script's refusal of data it cannot work on: a key of
 * another type (WRONGTYPE) or a value that is no number.  The scripts fail
 * before they write (lua/prelude_guard.lua), so nothing changed, and asking
 * again only repeats it. */
static int bad_data(const redisReply *r)
{
    return strncmp(r->str, "WRONGTYPE ", 10) == 0 ||
           strncmp(r->str, "ERR key '", 9) == 0;
}

/* The length of r's text without the " script: <sha>, on @user_script:N."
 * Redis adds to an error raised inside a script. */
static int reply_text_len(const redisReply *r)
{
    const char *tail = strstr(r->str, " script: ");

    return (int)(tail ? (size_t)(tail - r->str) : r->len);
}

#define TYPED_KEYS_MAX 8 /* the most KEYS a script declares types for */

/* After a WRONGTYPE from s: the first of its keys kv whose type differs from
 * the one its '-- Types' line gives, named in buf with both types (one TYPE
 * per typed key, in one round trip, on the failing path only).  1 when
 * found. */
static int name_wrong_key(uint64_t limit, const struct dist__script *s,
                          int nkeys, const struct dist__buf *kv, char *buf,
                          size_t len)
{
    const char *argv[TYPED_KEYS_MAX][2], *want[TYPED_KEYS_MAX], *p = s->types;
    size_t lens[TYPED_KEYS_MAX][2], wlen[TYPED_KEYS_MAX];
    struct dist__cmd cmds[TYPED_KEYS_MAX];
    redisReply *out[TYPED_KEYS_MAX] = { NULL };
    int idx[TYPED_KEYS_MAX], i, n = 0, found = 0;

    for (i = 0; i < nkeys && i < TYPED_KEYS_MAX && *p; i++) {
        size_t w = strcspn(p, " ");

        if (!(w == 1 && *p == '-')) {
            argv[n][0] = "TYPE", lens[n][0] = 4;
            argv[n][1] = kv[i].p, lens[n][1] = kv[i].len;
            cmds[n] = (struct dist__cmd){ 2, argv[n], lens[n] };
            want[n] = p, wlen[n] = w, idx[n++] = i;
        }
        p += w + strspn(p + w, " ");
    }
    if (n == 0 || dist__route_cmds(limit, &kv[0], n, cmds, out, NULL) != 0)
        return 0;
    for (i = 0; i < n; i++) {
        const redisReply *t = out[i];

        if (found || t->type != REDIS_REPLY_STATUS ||
            strcmp(t->str, "none") == 0 ||
            (strlen(t->str) == wlen[i] &&
             strncmp(t->str, want[i], wlen[i]) == 0))
            continue;
        snprintf(buf, len,
                 "key '%.*s' is a %s, not a %.*s (another program's "
                 "key, or a lock whose name collides with it)",
                 (int)(kv[idx[i]].len < 120 ? kv[idx[i]].len : 120),
                 kv[idx[i]].p, t->str, (int)wlen[i], want[i]);
        found = 1;
    }
    for (i = 0; i < n; i++)
        freeReplyObject(out[i]);
    return found;
}

/* r is an error reply from s on the keys kv that is not followed: EREPLY
 * with the reason (looked up by limit, link.h). */
static int refused(uint64_t limit, const struct dist__script *s, int nkeys,
                   const struct dist__buf *kv, redisReply **r, int why)
{
    char which[256];

    if (why != -2 && bad_data(*r))
        dist__hopeless_set(); /* a lock call says so now */
    if (why == -2)
        dist__err(EIO,
                  "Redis refused %s: more than %d redirections (the "
                  "cluster is being resharded)",
                  s->name, MAX_REDIRECTS);
    else if (strncmp((*r)->str, "NOAUTH", 6) == 0 ||
             strstr((*r)->str, "unauthenticated"))
        dist__err(EIO,
                  "Redis refused %s: it wants a password (AUTH) first; "
                  "give it in the URL, redis://:PASSWORD@HOST:PORT (it "
                  "said: %.*s)",
                  s->name, (int)(*r)->len, (*r)->str);
    else if (strncmp((*r)->str, "CROSSSLOT", 9) == 0)
        dist__err(EIO,
                  "Redis Cluster refused %s: the lock's keys are in "
                  "different slots; its name has a '{' that opens no "
                  "{tag}, or a '}' without a '{'",
                  s->name);
    else if (strncmp((*r)->str, "WRONGTYPE ", 10) == 0 &&
             name_wrong_key(limit, s, nkeys, kv, which, sizeof which))
        dist__err(EIO, "Redis refused %s: %s; nothing was changed", s->name,
                  which);
    else if (bad_data(*r))
        dist__err(EIO, "Redis refused %s: %.*s; nothing was changed", s->name,
                  reply_text_len(*r), (*r)->str);
    else
        dist__err(EIO, "Redis refused %s: %.*s", s->name, reply_text_len(*r),
                  (*r)->str);
    freeReplyObject(*r);
    *r = NULL;
    return DIST__EREPLY;
}

int dist__route_wait_replicas(struct dist__link *l, unsigned long ms,
                              const char *what, struct dist__addr *now)
{
    /* The thread's links as they are, not thread_conns(): l is one of
     * them, and new settings made by another thread since the acquire
     * would close it under the caller (a use after free, seen under
     * ASan).  The hold was taken under the settings these links have;
     * the next call takes up the new ones. */
    struct tconn *t = my_conn;
    int listed, most, rc, vrc;
    char why[256];

    rc = dist__link_wait_replicas(l, ms, what, &listed, &most);
    if (!t || t->cfg.mode != DIST__MODE_SENTINEL || listed < 0 ||
        (rc != 0 && rc != DIST_ENOREPLICA))
        return rc;
    /* acknowledged, on a master with as many replicas as it ever had */
    if (rc == 0 && listed > 0 && listed >= most)
        return 0;
    if (rc != 0) /* WAIT's own words come first */
        snprintf(why, sizeof why, "%s", dist_last_error());
    vrc = dist__topo_vouch(&t->cfg, dist__link_addr(l), rc == 0 ? listed : -1,
                           now);
    if (vrc == 0)
        return rc == 0 ? 0 : dist__err(rc, "%s", why);
    snprintf(why, sizeof why, "%s", dist_last_error());
    if (vrc == DIST__EDEPOSED)
        return dist__err(EIO, "lock '%s': %s", what, why), DIST__EDEPOSED;
    return dist__err(DIST_ENOREPLICA,
                     "lock '%s': %s; the hold was given "
                     "back",
                     what, why),
           DIST__EATTACHING;
}

void dist__route_adopt(const struct dist__addr *m)
{
    struct tconn *t = thread_conns(0);

    if (t)
        dist__topo_adopt(&t->cfg, m);
}

/* A script's link failed: says so, and has the map checked (a failover
 * may be why).  DIST__ECONN. */
static int conn_failed(const struct dist__script *s, struct dist__link *l)
{
    dist__err(EIO, "Redis connection failed during %s: %s", s->name,
              dist__link_error(l));
    dist__topo_stale();
    return DIST__ECONN;
}

/* A script's routed call: the script, its trip through the calling
 * thread's connections, and the link its try goes to. */
struct script_call {
    const struct dist__script *s;
    struct trip tr;
    struct tconn *t;
    struct dist__link *l;
};

/* Begins a script's call by limit, with *on cleared: 0, or DIST__ENOCONN
 * (the thread has no connections). */
static int script_begin(struct script_call *c, uint64_t limit, int script,
                        struct dist__link **on)
{
    c->s = &dist__scripts[script];
    *on = NULL;
    c->t = trip_begin(&c->tr, limit);
    return c->t ? 0 : DIST__ENOCONN;
}

/* Where the call's next try goes (c->l): where its first key lives, or
 * any server for a script without keys.  0, or DIST__ENOCONN. */
static int script_target(struct script_call *c, int nkeys,
                         const struct dist__buf *kv)
{
    return trip_target(c->t, &c->tr, nkeys > 0 ? &kv[0] : NULL, &c->l);
}

int dist__route_eval(uint64_t limit, int script, int nkeys,
                     const struct dist__buf *kv, int nkv, redisReply **out,
                     struct dist__link **on)
{
    struct script_call c;
    int rc;

    *out = NULL;
    if ((rc = script_begin(&c, limit, script, on)) != 0)
        return rc;
    for (;;) {
        if ((rc = script_target(&c, nkeys, kv)) != 0)
            return rc;
        rc = dist__link_eval(c.l, limit, c.s, c.tr.asking, nkeys, kv, nkv,
                             out);
        if (rc == DIST__ECONN)
            return conn_failed(c.s, c.l);
        if (rc != 0)
            return rc;
        if ((*out)->type != REDIS_REPLY_ERROR) {
            *on = c.l;
            return 0;
        }
        /* nothing ran: a redirection, or a server not ready yet */
        if ((rc = trip_next(c.t, &c.tr, c.l, *out)) != 1)
            return refused(limit, c.s, nkeys, kv, out, rc);
        freeReplyObject(*out);
        *out = NULL;
    }
}

int dist__route_defer(uint64_t limit, int script, int nkeys,
                      const struct dist__buf *kv, int nkv, dist__owed_fn fn,
                      void *arg, struct dist__link **on)
{
    struct script_call c;
    int rc;

    if ((rc = script_begin(&c, limit, script, on)) != 0)
        return rc;
    pthread_once(&exit_once, exit_init);
    if ((rc = script_target(&c, nkeys, kv)) != 0)
        return rc;
    rc = dist__link_eval_defer(c.l, limit, c.s, nkeys, kv, nkv, fn, arg);
    if (rc == DIST__ECONN)
        return conn_failed(c.s, c.l);
    if (rc == 0)
        *on = c.l;
    return rc;
}

int dist__route_run(uint64_t limit, int script, int nkeys,
                    const struct dist__buf *kv, int nkv, redisReply **out)
{
    struct dist__link *on;

    return dist__route_eval(limit, script, nkeys, kv, nkv, out, &on);
}

/* ---- pipelines ------------------------------------------------------------ */

static int is_cmd(const struct dist__cmd *c, const char *name)
{
    size_t n = strlen(name);

    return c->argc > 0 &&
           (c->lens ? c->lens[0] == n : strlen(c->argv[0]) == n) &&
           strncasecmp(c->argv[0], name, n) == 0;
}

/* Whether cmds[i] goes after ASKING: when asking, each command outside a
 * MULTI (inside, ASKING would be queued; the one before MULTI covers the
 * transaction).  *in_multi follows the commands. */
static int asks(const struct dist__cmd *c, int asking, int *in_multi)
{
    int before = asking && !*in_multi;

    if (is_cmd(c, "MULTI"))
        *in_multi = 1;
    else if (is_cmd(c, "EXEC") || is_cmd(c, "DISCARD"))
        *in_multi = 0;
    return before;
}

/* Sends cmds on l and reads their replies into out, by limit (link.h).
 * 0, DIST__ECONN (out all NULL), ENOMEM. */
static int pipeline(struct dist__link *l, uint64_t limit, int asking, int n,
                    const struct dist__cmd *cmds, redisReply **out)
{
    static const char *const ask[1] = { "ASKING" };
    uint64_t until = dist__link_deadline(l, limit);
    redisReply *r;
    int i, in_multi = 0, rc = 0;

    for (i = 0; i < n && rc == 0; i++)
        if ((rc = asks(&cmds[i], asking, &in_multi)
                      ? dist__link_append(l, 1, (const char **)ask, NULL)
                      : 0) ||
            (rc = dist__link_append(l, cmds[i].argc, cmds[i].argv,
                                    cmds[i].lens)))
            return rc == ENOMEM ? dist__err(ENOMEM, "out of memory") : rc;
    in_multi = 0;
    for (i = 0; i < n && rc == 0; i++) {
        if (asks(&cmds[i], asking, &in_multi) &&
            (rc = dist__link_reply(l, until, &r)) == 0)
            freeReplyObject(r);
        if (rc == 0)
            rc = dist__link_reply(l, until, &out[i]);
    }
    if (rc)
        while (i-- > 0) {
            freeReplyObject(out[i]);
            out[i] = NULL;
        }
    return rc;
}

static void free_replies(int n, redisReply **out)
{
    int i;

    for (i = 0; i < n; i++) {
        freeReplyObject(out[i]);
        out[i] = NULL;
    }
}

/* The first reply of out that redirects, or NULL. */
static const redisReply *redirecting(int n, redisReply **out,
                                     struct dist__link *l)
{
    struct dist__addr to;
    int i, slot;

    for (i = 0; i < n; i++)
        if (out[i]->type == REDIS_REPLY_ERROR &&
            dist__redirect_of(out[i], dist__link_addr(l), &slot, &to) !=
                DIST__R_NONE)
            return out[i];
    return NULL;
}

/* A link failed during a pipeline of reads: 0 to send it again (after a
 * pause, but at once the first time), or DIST__ECONN when time is up, with
 * the first failure and the last (why) as the reason. */
static int retry_lost(struct trip *tr, uint64_t *until, const char *first,
                      const char *why)
{
    uint64_t now = dist__now_ms();
    long pause;

    dist__topo_stale();
    tr->asking = 0;
    if (!*until) {
        *until = dist__link_until(tr->timeout_ms, tr->limit);
        if (*until > now)
            return 0; /* else the caller's time is up: say why */
    }
    if ((pause = pause_for(tr, *until)) < 0 && strcmp(first, why) != 0)
        return dist__err(EIO,
                         "%s; tried again until the command timeout ran "
                         "out: %s",
                         first, why),
               DIST__ECONN;
    if (pause < 0)
        return dist__err(EIO, "%s", why), DIST__ECONN;
    dist__sleep_ms((unsigned long)pause);
    if (tr->backoff < 200)
        tr->backoff *= 2;
    return 0;
}

/* dist__route_cmds, with *first the reason of the first lost connection
 * (on the heap: the caller's stack may be PTHREAD_STACK_MIN, and this is
 * the rare path). */
static int route_cmds(uint64_t limit, const struct dist__buf *key, int n,
                      const struct dist__cmd *cmds, redisReply **out,
                      struct dist__link **on, char **first)
{
    struct trip tr;
    struct tconn *t = trip_begin(&tr, limit);
    struct dist__link *l;
    const redisReply *r;
    uint64_t lost_until = 0;
    char why[400];
    int rc;

    memset(out, 0, sizeof *out * (size_t)n);
    if (on)
        *on = NULL;
    if (!t)
        return DIST__ENOCONN;
    for (;;) {
        if ((rc = trip_target(t, &tr, key, &l)) != 0) {
            snprintf(why, sizeof why, "%s", dist_last_error());
            if (!lost_until ||
                retry_lost(&tr, &lost_until, *first ? *first : why, why) != 0)
                return rc;
            continue;
        }
        if ((rc = pipeline(l, limit, tr.asking, n, cmds, out)) ==
            DIST__ECONN) {
            snprintf(why, sizeof why,
                     "lost the connection to Redis at %s: %s",
                     dist__link_where(l), dist__link_error(l));
            if (!*first)
                *first = strdup(why); /* NULL: only the last is told */
            if (retry_lost(&tr, &lost_until, *first ? *first : why, why) != 0)
                return DIST__ECONN;
            continue;
        }
        if (rc != 0)
            return rc;
        if (!(r = redirecting(n, out, l)))
            break;
        snprintf(why, sizeof why, "%s", dist__link_where(l)); /* l may go */
        if ((rc = trip_next(t, &tr, l, r)) != 1) {
            if (rc == -2)
                dist__err(EIO,
                          "more than %d redirections (the cluster is "
                          "being resharded); the last, from %s: %s",
                          MAX_REDIRECTS, why, r->str);
            else
                dist__err(EIO, "Redis at %s: %s", why, r->str);
            free_replies(n, out);
            return DIST__EREPLY;
        }
        free_replies(n, out);
    }
    if (on)
        *on = l;
    return 0;
}

int dist__route_cmds(uint64_t limit, const struct dist__buf *key, int n,
                     const struct dist__cmd *cmds, redisReply **out,
                     struct dist__link **on)
{
    char *first = NULL;
    int rc = route_cmds(limit, key, n, cmds, out, on, &first);

    free(first);
    return rc;
}
