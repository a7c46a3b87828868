/* kind_rwlock.c: the scripts of the read-write lock (Redisson's
 * RReadWriteLock, with a downgrade that wakes readers and an opt-in writer
 * preference), for the engine (engine.h).
 *
 * Every acquire and release script is conditional on the owner's read and
 * write counts as the owner believes them.  After a lost reply the same
 * call is simply run again: the second run either does the work (the first
 * never ran) or refuses it and reports counts that show the first one ran,
 * so nothing is ever applied twice.  When Redis cannot be reached to find
 * out, the engine hands the outcome to the renewal thread, which settles it
 * with a conditional release (rw_settle). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kinds.h"

/* Timeout keys of one owner the watchdog renews; holds beyond that many
 * (one thread reentering hundreds of times) keep their hash entry and their
 * readers-ZSET lease, only their Redisson-side keys are not extended. */
#define RENEW_TKEYS_MAX 400

/* A thread's renewal keys: N, the readers ZSET, then the timeout keys of
 * its read holds 1..nt.  The record's ext. */
struct tkeys {
    struct dist__rec_ext base; /* first: freed by it (tkeys_free) */
    struct dist__buf *keys;
    unsigned nt, cap;
    char *tprefix; /* "{N}:<owner>:rwlock_timeout:" */
    size_t tplen;
};

/* The derived names a read-write lock's scripts use, made with its state
 * (its ext: dist__names_set), by these indexes. */
static const enum dist__nm rw_names[] = {
    DIST__N_RW_READERS,
    DIST__N_RW_WRITERS,
    DIST__N_RWCHAN,
    DIST__N_TOKEN,
};
enum { RW_READERS, RW_WRITERS, RW_CHAN, RW_TOKEN, RW_NAMES };

static const struct dist__buf *rw_name(const struct dist__state *st, int i)
{
    return (const struct dist__buf *)st->ext + i;
}

static const struct dist__buf *readers_of(const struct dist__state *st)
{
    return rw_name(st, RW_READERS);
}

/* ---- timeout keys ---------------------------------------------------------- */

static void tkeys_free(void *p)
{
    struct tkeys *t = p;
    unsigned i;

    if (!t)
        return;
    if (t->keys)
        for (i = 0; i < t->nt; i++)
            free((char *)t->keys[2 + i].p);
    free(t->keys);
    free(t->tprefix);
    free(t);
}

static void tkeys_ext_free(struct dist__rec_ext *e)
{
    tkeys_free(e);
}

/* "{N}:<owner>:rwlock_timeout:" of the calling thread; NULL when out of
 * memory. */
static char *tprefix_of(const struct dist__names *nm, const char *owner,
                        size_t olen, size_t *len)
{
    return dist__names_read_prefix(nm, owner, olen, len);
}

/* The record's keys, made at first use.  The state's mu held. */
static struct tkeys *tkeys_of(struct dist__state *st, struct dist__rec *r)
{
    struct tkeys *t = (struct tkeys *)r->ext;
    size_t olen;
    const char *owner;

    if (t)
        return t;
    if (!(t = calloc(1, sizeof *t)))
        return NULL;
    owner = dist__owner(&olen);
    t->tprefix = tprefix_of(st->names, owner, olen, &t->tplen);
    t->cap = 8;
    t->keys = malloc(t->cap * sizeof *t->keys);
    if (!t->tprefix || !t->keys) {
        tkeys_free(t);
        return NULL;
    }
    t->keys[0] = st->names->name;
    t->keys[1] = *readers_of(st);
    t->base.free = tkeys_ext_free;
    r->ext = &t->base;
    return t;
}

static int renew_nkeys(const struct tkeys *t)
{
    return 2 + (int)(t->nt < RENEW_TKEYS_MAX ? t->nt : RENEW_TKEYS_MAX);
}

static void rw_renew_keys(struct dist__state *st, struct dist__rec *r,
                          struct dist__hold *h)
{
    struct tkeys *t = tkeys_of(st, r);

    if (t) {
        h->keys = t->keys;
        h->nkeys = renew_nkeys(t);
    }
}

/* The renewal entry follows a change of r's keys (which waits for a
 * renewal under way that reads the old ones). */
static void keys_changed(struct dist__rec *r, struct tkeys *t)
{
    if (r->h)
        dist__renew_set_keys(r->h, t->keys, renew_nkeys(t));
}

/* Room for one more key.  0 or ENOMEM. */
static int tkeys_grow(struct dist__rec *r, struct tkeys *t)
{
    struct dist__buf *nk, *old = t->keys;

    if (2 + t->nt < t->cap)
        return 0;
    if (!(nk = malloc(2 * t->cap * sizeof *nk)))
        return ENOMEM;
    memcpy(nk, t->keys, t->cap * sizeof *nk);
    t->cap *= 2;
    t->keys = nk;
    /* the renewal thread may be reading the old array: switch it over
     * before freeing */
    keys_changed(r, t);
    free(old);
    return 0;
}

/* The timeout key of the owner's k-th read hold (k >= 1), made on first
 * use and kept with the record.  0 or ENOMEM. */
static int tkey(struct dist__state *st, struct dist__rec *r, unsigned long k,
                struct dist__buf *out)
{
    struct tkeys *t;
    int rc = 0;

    pthread_mutex_lock(&st->mu);
    t = tkeys_of(st, r);
    while (t && t->nt < k) {
        char *p;
        if ((rc = tkeys_grow(r, t)) != 0)
            break;
        if (!(p = malloc(t->tplen + 24))) {
            rc = ENOMEM;
            break;
        }
        t->keys[2 + t->nt].len =
            (size_t)snprintf(p, t->tplen + 24, "%s%u", t->tprefix, t->nt + 1);
        t->keys[2 + t->nt].p = p;
        t->nt++;
        if (t->nt <= RENEW_TKEYS_MAX)
            keys_changed(r, t);
    }
    if (t && rc == 0)
        *out = t->keys[1 + k];
    pthread_mutex_unlock(&st->mu);
    return t ? rc : ENOMEM;
}

/* ---- script calls ------------------------------------------------------------ */

/* Runs one of the conditional scripts.  After a lost reply it runs it again
 * on a new connection (at most twice, each bounded by the timeouts): a
 * second run never repeats the first one's work, and *again tells the
 * caller to read the answer in that light.  Returns 0 with *r, EIO or
 * ENOMEM (nothing ran), or DIST__ECONN (sent, and whether it ran is
 * unknown). */
/* run() after a lost reply: runs the script again, at most twice, and
 * names the first loss if that fails too.  Apart (noinline) so that its
 * buffer is on the stack only on this path (PTHREAD_STACK_MIN stacks). */
static __attribute__((noinline)) int
run_again(uint64_t limit, int script, int nkeys, const struct dist__buf *kv,
          int nkv, redisReply **r, struct dist__link **on)
{
    struct dist__why why;
    int rc = DIST__ECONN, tries;

    dist__why_get(&why);
    for (tries = 0; tries < 2 && (rc == DIST__ECONN || rc == DIST__ENOCONN);
         tries++)
        rc = dist__route_eval(limit, script, nkeys, kv, nkv, r, on);
    if (rc == 0)
        return 0;
    return dist__err_as(EIO, &why, "%s", why.text), DIST__ECONN;
}

/* limit: the call's (link.h). */
static int run(uint64_t limit, int script, int nkeys,
               const struct dist__buf *kv, int nkv, redisReply **r,
               int *again, struct dist__link **on)
{
    struct dist__link *dummy;
    int rc;

    if (!on)
        on = &dummy;
    *again = 0;
    rc = dist__route_eval(limit, script, nkeys, kv, nkv, r, on);
    if (rc == DIST__ECONN) { /* why it was lost says more than a retry */
        *again = 1;
        return run_again(limit, script, nkeys, kv, nkv, r, on);
    }
    if (rc == 0)
        return 0;
    return rc == ENOMEM ? ENOMEM : EIO;
}

/* Up to four integers of a reply (elements missing: 0); 0, or EPROTO
 * when it is not an array of at least two integers (every script's reply
 * is, but wrlock's {-2}), with the text naming what. */
static int read_ints(redisReply *r, long long v[4], const char *what)
{
    int i;

    v[0] = v[1] = v[2] = v[3] = 0;
    if (dist__reply_int(r, 0, &v[0]) != 0 ||
        (v[0] != -2 && dist__reply_int(r, 1, &v[1]) != 0)) {
        freeReplyObject(r);
        dist__err(EIO,
                  "Redis answered %s with a reply that is not a list "
                  "of numbers",
                  what);
        return EPROTO;
    }
    for (i = 2; i < 4; i++)
        dist__reply_int(r, (size_t)i, &v[i]);
    freeReplyObject(r);
    return 0;
}

/* The conditional release of one hold of mode (0 read, 1 write) by owner,
 * who holds rd and wr as far as it knows.  tk: the read hold's timeout
 * key; limit: the call's (link.h).  Returns run()'s code, with v[] the
 * reply. */
static int run_release(uint64_t limit, const struct dist__state *st,
                       const char *owner, size_t olen, int mode,
                       unsigned long rd, unsigned long wr,
                       const struct dist__buf *tk, long long v[4], int *again)
{
    char erd[24], ewr[24];
    struct dist__buf kv[9];
    redisReply *r;
    int rc, n = 0;

    snprintf(erd, sizeof erd, "%lu", rd);
    snprintf(ewr, sizeof ewr, "%lu", wr);
    kv[n++] = st->names->name;
    kv[n++] = *readers_of(st);
    kv[n++] = *rw_name(st, RW_WRITERS);
    kv[n++] = *rw_name(st, RW_CHAN);
    if (!mode)
        kv[n++] = *tk;
    kv[n++] = (struct dist__buf){ owner, olen };
    kv[n++] = dist__arg(erd);
    kv[n++] = dist__arg(ewr);
    kv[n++] = dist__arg(dist__publish_cmd());
    rc = run(limit, mode ? DIST__S_RWLOCK_WRUNLOCK : DIST__S_RWLOCK_RDUNLOCK,
             mode ? 4 : 5, kv, n, &r, again, NULL);
    if (rc != 0)
        return rc;
    return read_ints(r, v, mode ? "rwlock_wrunlock" : "rwlock_rdunlock");
}

/* ---- acquire --------------------------------------------------------------- */

/* A read lock cannot be upgraded: a thread that holds read locks only and
 * asks to write would wait for ever. */
static int no_upgrade(struct dist__call *c, int try_only)
{
    const char *name = c->o->st->names->name.p;

    if (try_only)
        return dist__err_lock(EBUSY, "rwlock", name,
                              ": this thread holds read locks only, and a "
                              "read lock cannot be upgraded");
    return dist__err_lock(
        EDEADLK, "rwlock", name,
        ": this thread holds read locks only; waiting for the write lock "
        "would wait forever (a read lock cannot be upgraded)");
}

/* One acquire script call with the owner's expected counts c->n.  0 with
 * v[] the reply; EIO/ENOMEM; DIST__ECONN. */
static int run_acquire(struct dist__call *c, struct dist__rec *r,
                       long long v[4], int *again)
{
    static const char *const hows[] = { "try", "wait", "prefer" };
    struct dist__state *st = c->o->st;
    char lease[24], erd[24], ewr[24], window[24], keep[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[13], tk;
    redisReply *rep;
    int rc, n = 0;

    snprintf(lease, sizeof lease, "%lu", dist__lease_of(c->o));
    snprintf(erd, sizeof erd, "%lu", c->n[0]);
    snprintf(ewr, sizeof ewr, "%lu", c->n[1]);
    kv[n++] = st->names->name;
    kv[n++] = *readers_of(st);
    kv[n++] = *rw_name(st, RW_WRITERS);
    kv[n++] = *rw_name(st, RW_CHAN);
    if (c->mode) {
        kv[n++] = *rw_name(st, RW_TOKEN);
    } else {
        if (tkey(st, r, c->n[0] + 1, &tk) != 0)
            return dist__err(ENOMEM, "out of memory");
        kv[n++] = tk;
    }
    kv[n++] = dist__arg(lease);
    kv[n++] = (struct dist__buf){ owner, olen };
    kv[n++] = dist__arg(erd);
    kv[n++] = dist__arg(ewr);
    if (c->mode) {
        snprintf(window, sizeof window, "%lu", dist__waiter_ms());
        kv[n++] = dist__arg(hows[c->how]);
        kv[n++] = dist__arg(window);
    }
    kv[n++] = dist__arg(dist__publish_cmd());
    if (c->mode) {
        snprintf(keep, sizeof keep, "%lu",
                 dist__key_keep_ms(dist__lease_of(c->o)));
        kv[n++] = dist__arg(keep);
    }
    rc =
        run(c->limit, c->mode ? DIST__S_RWLOCK_WRLOCK : DIST__S_RWLOCK_RDLOCK,
            5, kv, n, &rep, again, &c->on);
    if (rc != 0)
        return rc;
    return read_ints(rep, v, c->mode ? "rwlock_wrlock" : "rwlock_rdlock");
}

/* Brings the record in line with Redis after a mismatch: holds Redis no
 * longer counts were lost.  *lost when some were.  EIO when Redis counts
 * more than the owner knows of (nothing explains that). */
static int reconcile(struct dist__state *st, struct dist__rec *r,
                     long long rr, long long rw, int *lost)
{
    *lost = 0;
    pthread_mutex_lock(&st->mu);
    if (rr > (long long)r->n[0] || rw > (long long)r->n[1] || rr < 0 ||
        rw < 0) {
        unsigned long rd = r->n[0], wr = r->n[1];
        pthread_mutex_unlock(&st->mu);
        return dist__err_lock(EIO, "rwlock", st->names->name.p,
                              ": Redis counts %lld read and %lld write holds "
                              "for this thread, which holds %lu and %lu",
                              rr, rw, rd, wr);
    }
    *lost = (unsigned long)rr < r->n[0] || (unsigned long)rw < r->n[1];
    r->n[0] = (unsigned long)rr;
    r->n[1] = (unsigned long)rw;
    dist__rec_tidy(st);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Whether an acquire's reply can be true: a hold taken is exactly the
 * owner's next (the scripts are conditional on its counts), a wait is a
 * PTTL or a deadline, counts and tokens are not negative.  0, or EIO
 * (c->unknown) naming what is wrong, before any number of it is used. */
static int acquire_sane(struct dist__call *c, const long long v[4])
{
    const char *script = c->mode ? "rwlock_wrlock" : "rwlock_rdlock";
    unsigned long had = c->n[c->mode];

    if (v[0] == 1 &&
        (v[1] < 1 || (unsigned long long)v[1] != had + 1ULL || v[2] < 0))
        return dist__call_bad(c, script,
                              "%lld holds after taking it (this "
                              "thread had %lu), token %lld",
                              v[1], had, v[2]);
    if (v[0] == 0 && v[1] < -1)
        return dist__call_bad(c, script, "a wait of %lld ms", v[1]);
    if (v[0] == -1 && (v[1] < 0 || v[2] < 0 || v[3] < 0))
        return dist__call_bad(c, script, "%lld read and %lld write holds",
                              v[1], v[2]);
    if (v[0] > 1 || v[0] < -2 || (v[0] == -2 && !c->mode))
        return dist__call_bad(c, script, "status %lld", v[0]);
    return 0;
}

/* What an acquire's or release's script run (rc) and its reply v mean for
 * the call: 0 when v may be read; EIO with c->unknown when the reply was
 * lost or unreadable (or, with unsent_too, the script not even sent), the
 * outcome in Redis then being unknown; EIO when v cannot be true (sane
 * says, c->unknown too); or rc. */
static int run_result(struct dist__call *c, int rc, int unsent_too,
                      int (*sane)(struct dist__call *, const long long[4]),
                      const long long v[4])
{
    if (rc == DIST__ECONN || rc == EPROTO || (unsent_too && rc == EIO)) {
        c->unknown = 1;
        return EIO;
    }
    if (rc != 0)
        return rc;
    return sane(c, v) != 0 ? EIO : 0;
}

/* Reads an acquire's reply.  1 when it was a mismatch (v[1..2] are the
 * counts in Redis), 0 otherwise. */
static int read_acquire(struct dist__call *c, const long long v[4], int again)
{
    long long rd = (long long)c->n[0], wr = (long long)c->n[1];

    if (v[0] == 1) {
        c->taken = 1;
        c->count = (unsigned long)v[1];
        c->token = (uint64_t)v[2];
    } else if (v[0] == 0) {
        c->wait = v[1];
    } else if (again && !c->mode && v[1] == rd + 1 && v[2] == wr) {
        c->taken = 1; /* the first run took it */
        c->count = (unsigned long)v[1];
    } else if (again && c->mode && v[2] == wr + 1 && v[1] == rd) {
        c->taken = 1;
        c->count = (unsigned long)v[2];
        c->token = (uint64_t)v[3];
    } else {
        return v[0] != -2;
    }
    return 0;
}

/* One try, with the record's expectations; a mismatch that shows lost holds
 * is reconciled and tried again. */
static int rw_acquire(struct dist__call *c)
{
    struct dist__state *st = c->o->st;
    struct dist__rec *r;
    long long v[4];
    int rc, tries, lost, again = 0;

    for (tries = 0; tries < 3; tries++) {
        pthread_mutex_lock(&st->mu);
        r = dist__rec_get(st);
        if (r)
            c->n[0] = r->n[0], c->n[1] = r->n[1];
        pthread_mutex_unlock(&st->mu);
        if (!r)
            return dist__err(ENOMEM, "out of memory");
        if (c->mode && c->n[0] > 0 && c->n[1] == 0)
            return no_upgrade(c, c->how == DIST__HOW_TRY);
        rc = run_acquire(c, r, v, &again);
        if ((rc = run_result(c, rc, 0, acquire_sane, v)) != 0)
            return rc;
        if (v[0] == -2 && c->how == DIST__HOW_TRY)
            return no_upgrade(c, 1);
        if (v[0] == -2) {
            /* Redis counts read holds of this thread that the thread does
             * not know of (it would have been refused above): a reply lost
             * beyond settling, or a server that lies.  Nothing renews them,
             * so they end with their lease: wait as for any holder, rather
             * than call it a deadlock */
            c->taken = 0;
            c->wait = -1;
            return 0;
        }
        if (!read_acquire(c, v, again))
            return 0;
        if (reconcile(st, r, v[1], v[2], &lost) != 0)
            return EIO;
        if (lost)
            dist__call_lost_handler(st->names->name.p);
    }
    return dist__err_lock(EIO, "rwlock", st->names->name.p,
                          ": this thread's holds keep changing in Redis");
}

static int rw_plan(struct dist__call *c, int try_only)
{
    if (c->mode && c->n[0] > 0 && c->n[1] == 0)
        return no_upgrade(c, try_only);
    c->how = try_only ? DIST__HOW_TRY
             : c->mode && (c->o->flags & DIST__RWLOCK_PREFER_WRITER)
                 ? DIST__HOW_QUEUE
                 : DIST__HOW_WAIT;
    return 0;
}

/* ---- release ------------------------------------------------------------------ */

/* Whether a release's reply can be true: {left, woken} with left one
 * below what the owner had (a second run after a lost reply may find the
 * first did it: -1 with those counts), or {-1, reads, writes} with counts
 * no higher than the owner's.  0, or EIO (c->unknown). */
static int release_sane(struct dist__call *c, const long long v[4])
{
    const char *script = c->mode ? "rwlock_wrunlock" : "rwlock_rdunlock";
    unsigned long had = c->n[c->mode];

    if (v[0] >= 0 && ((unsigned long long)v[0] + 1 != had || v[1] < 0))
        return dist__call_bad(c, script,
                              "%lld holds left and %lld woken "
                              "(this thread had %lu)",
                              v[0], v[1], had);
    if (v[0] == -1 &&
        (v[1] < 0 || v[2] < 0 || (unsigned long long)v[1] > c->n[0] ||
         (unsigned long long)v[2] > c->n[1]))
        return dist__call_bad(c, script,
                              "%lld read and %lld write holds "
                              "(this thread had %lu and %lu)",
                              v[1], v[2], c->n[0], c->n[1]);
    if (v[0] < -1)
        return dist__call_bad(c, script, "status %lld", v[0]);
    return 0;
}

static int rw_release(struct dist__call *c)
{
    struct dist__state *st = c->o->st;
    struct dist__rec *r;
    struct dist__buf tk = { 0 };
    unsigned long rd = c->n[0], wr = c->n[1];
    long long v[4];
    size_t olen;
    const char *owner = dist__owner(&olen);
    int rc, again = 0, lost;

    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    pthread_mutex_unlock(&st->mu);
    if (!r)
        return EPERM;
    if (!c->mode && tkey(st, r, rd, &tk) != 0)
        return dist__err(ENOMEM, "out of memory");
    rc = run_release(c->limit, st, owner, olen, c->mode, rd, wr, &tk, v,
                     &again);
    /* Not even sent: the owner lets go all the same, as for an unknown
     * outcome; a hold kept after a failed unlock would be renewed for ever. */
    if ((rc = run_result(c, rc, 1, release_sane, v)) != 0)
        return rc;
    if (v[0] == -1 && again &&
        ((c->mode && v[2] == (long long)wr - 1 && v[1] == (long long)rd) ||
         (!c->mode && v[1] == (long long)rd - 1 && v[2] == (long long)wr)))
        v[0] = c->mode ? v[2] : v[1]; /* the first run did it */
    if (v[0] >= 0) {
        c->count = (unsigned long)v[0];
        c->woken = v[1];
        return 0;
    }
    if (reconcile(st, r, v[1], v[2], &lost) != 0)
        return EIO;
    if (lost || (c->mode ? v[2] : v[1]) == 0)
        return EPERM;
    return dist__err_lock(EIO, "rwlock", st->names->name.p,
                          ": unexpected counts in Redis");
}

/* The renewal thread: the hold Redis may count beyond the owner's own,
 * given back on the condition that it is there. */
static int rw_settle(struct dist__hold *h, int *lost)
{
    struct dist__state st = { .names = h->names };
    unsigned long rd = h->n[0] + (h->mode == 0),
                  wr = h->n[1] + (h->mode == 1);
    char owner[DIST__OWNER_MAX];
    size_t olen = dist__hold_owner(h, owner);
    struct dist__buf tk = { 0 };
    long long v[4];
    char *p = NULL;
    size_t len;
    int rc, again = 0;

    if (!(st.ext = dist__names_set(h->names, rw_names, RW_NAMES)))
        return -1;
    if (h->mode == 0) {
        char *pre = tprefix_of(h->names, owner, olen, &len);
        if (pre && (p = malloc(len + 24)) != NULL)
            tk = (struct dist__buf){ p, (size_t)snprintf(p, len + 24, "%s%lu",
                                                         pre, rd) };
        free(pre);
    }
    rc = h->mode == 0 && !p
             ? ENOMEM
             : run_release(0, &st, owner, olen, h->mode, rd, wr, &tk, v,
                           &again); /* the renewal thread */
    free(p);
    free(st.ext);
    if (rc == EPROTO) {
        /* an answer no call could have left: nothing better will come of
         * asking again; the lease ends what Redis may keep */
        *lost = 0;
        return 0;
    }
    if (rc != 0)
        return -1;
    /* >= 0: the owed hold was given back; -1 with the owner's own counts:
     * nothing was owed (or the first run gave it back); lower counts: Redis
     * lost holds of ours meanwhile */
    *lost = v[0] == -1 &&
            (v[1] < (long long)h->n[0] || v[2] < (long long)h->n[1]);
    return 0;
}

/* ---- waiting ------------------------------------------------------------------ */

static struct dist__chan *rw_channel(struct dist__call *c)
{
    return dist__sub_get(rw_name(c->o->st, RW_CHAN));
}

static const enum dist__nm *rw_queue(struct dist__call *c, int *nkeys)
{
    (void)c;
    *nkeys = 1;
    return &rw_names[RW_WRITERS];
}

/* A waiting writer that gives up stops keeping readers out at once (best
 * effort: if Redis cannot be reached, its deadline ends it within a window). */
static void rw_cancel(struct dist__call *c)
{
    const struct dist__state *st = c->o->st;
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[5] = {
        st->names->name,
        *rw_name(st, RW_WRITERS),
        *rw_name(st, RW_CHAN),
        { owner, olen },
        dist__arg(dist__publish_cmd()),
    };
    redisReply *r;

    if (dist__route_run(c->limit, DIST__S_RWLOCK_CANCEL, 3, kv, 5, &r) == 0)
        freeReplyObject(r);
}

static const char *rw_busy_why(const struct dist__call *c)
{
    return c->mode ? "" : ", or a writer waits";
}

static int rw_state_init(struct dist__state *st)
{
    return (st->ext = dist__names_set(st->names, rw_names, RW_NAMES))
               ? 0
               : ENOMEM;
}

static void rw_state_free(struct dist__state *st)
{
    free(st->ext);
}

const struct dist__kind dist__rwlock_kind = {
    .noun = "rwlock",
    .family = DIST__FAM_RWLOCK,
    .magic = 0x72776c6bu, /* "rwlk" */
    .renewal = { DIST__S_RWLOCK_RENEW, rw_settle },
    .plan = rw_plan,
    .acquire = rw_acquire,
    .release = rw_release,
    .cancel = rw_cancel,
    .channel = rw_channel,
    .queue = rw_queue,
    .busy_why = rw_busy_why,
    .state_init = rw_state_init,
    .state_free = rw_state_free,
    .renew_keys = rw_renew_keys,
};
