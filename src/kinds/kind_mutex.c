/* kind_mutex.c: the scripts of the reentrant mutex (Redisson's RLock) and
 * of the fair mutex (RFairLock), for the engine (engine.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kinds.h"

#define YIELD_MIN_MS     1
#define YIELD_AFTER      8 /* releases to waiters in a row before yielding */
#define YIELD_MAX_RTT_MS 2
/* Holds Redis may count for a thread beyond its own + 1: acquires whose
 * reply was lost and that could not be handed over (out of memory) are
 * counted in Redis and not in the thread.  More cannot be. */
#define HOLDS_AHEAD_MAX  1000000

/* Courtesy after a release that reached waiters: until yield_until that
 * thread lets them go first (see before_wait).  Under the state's mu; made
 * at the first release that reached waiters (the state's ext, NULL until
 * then): a lock nobody waits for costs nothing here (48 B less per lock,
 * docs/performance.md). */
struct courtesy {
    uint64_t yield_thread;
    uint64_t yield_until;
    uint64_t streak_thread; /* who released to waiters last, */
    unsigned streak;        /* and how often in a row */
};

static int is_fair(const struct dist__call *c)
{
    return c->o->kind == &dist__fair_kind;
}

/* The derived names each script gets, in the order of its KEYS after N;
 * a robust mutex's scripts get its record too, last (NKEYS less one
 * without it). */
static const enum dist__nm token_key[] = { DIST__N_TOKEN, DIST__N_ROBUST };
static const enum dist__nm lock_keys[] = {
    DIST__N_TOKEN,
    DIST__N_MUTEX_WAITERS,
    DIST__N_ROBUST,
};
static const enum dist__nm fair_lock_keys[] = {
    DIST__N_QUEUE, DIST__N_TIMEOUT,      DIST__N_TOKEN,
    DIST__N_CHAN,  DIST__N_FAIR_WAITERS, DIST__N_ROBUST,
};
static const enum dist__nm chan_key[] = { DIST__N_CHAN };
static const enum dist__nm unlock_keys[] = {
    DIST__N_CHAN,
    DIST__N_MUTEX_WAITERS,
    DIST__N_ROBUST,
};
/* a plain mutex's registered waiters: a waiter's renewal key, and with
 * the lock's name mutex_cancel's */
static const enum dist__nm waiters_key[] = { DIST__N_MUTEX_WAITERS };
/* a fair release's: the marks and the counter, for a grant to the head
 * (prelude_grant.lua) */
static const enum dist__nm fair_unlock_keys[] = {
    DIST__N_QUEUE,        DIST__N_TIMEOUT, DIST__N_CHAN,
    DIST__N_FAIR_WAITERS, DIST__N_TOKEN,   DIST__N_ROBUST,
};
static const enum dist__nm fair_cancel_keys[] = {
    DIST__N_QUEUE,        DIST__N_TIMEOUT, DIST__N_CHAN,
    DIST__N_FAIR_WAITERS, DIST__N_TOKEN,
};
static const enum dist__nm robust_key[] = { DIST__N_ROBUST };
/* a queued fair waiter's keys for waiter_renew, in its order */
static const enum dist__nm fair_wait_keys[] = {
    DIST__N_TIMEOUT,
    DIST__N_QUEUE,
    DIST__N_FAIR_WAITERS,
    DIST__N_CHAN,
};
#define NKEYS(a) ((int)(sizeof a / sizeof a[0]))

/* kv[0] = N, then which's names in room.  0 or ENOMEM (said). */
static int keys_of(const struct dist__names *nm, const enum dist__nm *which,
                   int count, struct dist__buf *kv, struct dist__room *room)
{
    kv[0] = nm->name;
    if (dist__names_keys(nm, which, count, kv + 1, room) != 0)
        return dist__err(ENOMEM, "out of memory");
    return 0;
}

static int is_robust(const struct dist__obj *o)
{
    return (o->flags & DIST__MUTEX_ROBUST) != 0;
}

/* ---- acquire -------------------------------------------------------------- */

/* Reads the owner's count after a lost reply, by limit (the call's, see
 * link.h).  robust: also what the robust record says into *dead
 * (mutex_probe's reply; NULL: not robust).  now_us (NULL: not wanted): the
 * server's clock in microseconds.  0, or EIO. */
static int probe(const struct dist__names *nm, uint64_t limit,
                 long long *holds, long long *pttl, uint64_t *token,
                 long long *dead, uint64_t *now_us, struct dist__link **on)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[4];
    struct dist__room room;
    redisReply *r;
    long long t, d = 0, now = 0;
    uint64_t give_up = 0;
    int tries, rc;

    /* the record too for a robust mutex: N, token[, record], owner */
    if (keys_of(nm, token_key, dead ? 2 : 1, kv, &room) != 0) {
        dist__room_done(&room);
        return EIO;
    }
    kv[dead ? 3 : 2] = (struct dist__buf){ owner, olen };

    /* The first reconnect usually works; a server that is restarting may
     * need a few tries: keep at it for up to the command timeout. */
    for (tries = 0;; tries++) {
        rc = dist__route_eval(limit, DIST__S_MUTEX_PROBE, dead ? 3 : 2, kv,
                              dead ? 4 : 3, &r, on);
        if (rc == 0 || rc == DIST__EREPLY || rc == ENOMEM)
            break;
        if (!give_up)
            give_up = dist__link_until(dist__timeout_ms(), limit);
        if (dist__now_ms() >= give_up)
            break;
        dist__sleep_ms(tries == 0 ? 10 : 50);
    }
    dist__room_done(&room);
    if (rc != 0)
        return EIO;
    if (dist__reply_int(r, 0, holds) || dist__reply_int(r, 1, pttl) ||
        dist__reply_int(r, 2, &t) || dist__reply_int(r, 3, &d) ||
        dist__reply_int(r, 4, &now) || *holds < 0 || t < 0 || d < 0 ||
        d > 2 || now < 0) {
        freeReplyObject(r);
        return dist__err_lock(
            EIO, "mutex", nm->name.p,
            ": Redis answered mutex_probe with something no call could have "
            "left (a broken or hostile server)");
    }
    *token = (uint64_t)t;
    if (dead)
        *dead = d;
    if (now_us)
        *now_us = (uint64_t)now;
    freeReplyObject(r);
    return 0;
}

/* v in decimal at buf (24 bytes): what snprintf's "%lu" writes, for a
 * fraction of its cost on every lock call. */
static struct dist__buf ul_arg(char *buf, unsigned long v)
{
    char *p = buf + 23;

    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    return (struct dist__buf){ p, (size_t)(buf + 23 - p) };
}

/* Runs the acquire script of the lock's kind.  A fair lock's queued try
 * also puts the caller in the queue (once) when it cannot take the lock;
 * a plain one's try that may wait registers the caller as a waiter when
 * it cannot (prelude_wake.lua). */
static int run_acquire(struct dist__call *c, redisReply **r)
{
    const struct dist__names *nm = c->o->st->names;
    char lease[24], window[24], keep[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[14];
    struct dist__room room;
    int rc, n, robust = is_robust(c->o);

    if (!is_fair(c)) {
        if ((rc = keys_of(nm, lock_keys, NKEYS(lock_keys) - 1 + robust, kv,
                          &room)) == 0) {
            n = 3 + robust;
            kv[n++] = ul_arg(lease, dist__lease_of(c->o));
            kv[n++] = (struct dist__buf){ owner, olen };
            kv[n++] = c->how == DIST__HOW_WAIT
                          ? ul_arg(window, dist__waiter_ms())
                          : dist__arg("0");
            kv[n++] = ul_arg(keep, dist__key_keep_ms(dist__lease_of(c->o)));
            rc = dist__route_eval(c->limit, DIST__S_MUTEX_LOCK, 3 + robust,
                                  kv, n, r, &c->on);
        }
        dist__room_done(&room);
        return rc;
    }
    snprintf(lease, sizeof lease, "%lu", dist__lease_of(c->o));
    snprintf(window, sizeof window, "%lu", dist__waiter_ms());
    if ((rc = keys_of(nm, fair_lock_keys, NKEYS(fair_lock_keys) - 1 + robust,
                      kv, &room)) == 0) {
        n = 6 + robust;
        kv[n++] = dist__arg(lease);
        kv[n++] = (struct dist__buf){ owner, olen };
        kv[n++] = dist__arg(window);
        kv[n++] = dist__arg(c->how == DIST__HOW_QUEUE ? "wait" : "try");
        kv[n++] = dist__arg(dist__publish_cmd());
        kv[n++] = ul_arg(keep, dist__key_keep_ms(dist__lease_of(c->o)));
        /* a hold found in the name of a caller that holds none was
         * granted to it (prelude_grant.lua): counted once.  Not right
         * behind a deferred release of its own, which may not have run:
         * that hold is counted, and the fix-up gives it back (defer.c) */
        kv[n++] = dist__arg(c->n[0] == 0 && !c->behind ? "fresh" : "");
        rc = dist__route_eval(c->limit, DIST__S_FAIR_LOCK, 6 + robust, kv, n,
                              r, &c->on);
    }
    dist__room_done(&room);
    return rc;
}

/* Reads the acquire script's reply: {1, holds, token} (a plain fresh
 * hold that left its mark: {1, 1, token, 1}), a robust owner-dead one's
 * {1, 1, token, mark, dead} (a fair one's {1, 1, token, dead}), {0, wait}
 * (a plain waiter's: {0, wait, aimed}), or a robust one's {2, 0} (not
 * recoverable: ENOTRECOVERABLE).  A hold taken leaves the owner 1 (a
 * fresh hold) to its count + 1 holds (a few more after lost replies,
 * HOLDS_AHEAD_MAX); a wait is a PTTL (-1: no expiry) or a waiter's
 * deadline.  Anything else cannot be, and is refused before a number of
 * it is used. */
static int read_acquire(struct dist__call *c, const redisReply *r)
{
    const char *script = is_fair(c) ? "fair_lock" : "mutex_lock";
    long long ok, v, t;

    if (dist__reply_int(r, 0, &ok) != 0 || dist__reply_int(r, 1, &v) != 0)
        return dist__call_bad(c, script, "a reply that is not {status, n}");
    if (ok == 1) {
        if (v < 1 || (unsigned long long)v > c->n[0] + 1ULL + HOLDS_AHEAD_MAX)
            return dist__call_bad(c, script,
                                  "%lld holds after taking it "
                                  "(this thread had %lu)",
                                  v, c->n[0]);
        if (dist__reply_int(r, 2, &t) != 0 || t < 0)
            return dist__call_bad(c, script,
                                  "no fencing token, or a "
                                  "negative one");
        c->taken = 1;
        c->count = (unsigned long)v;
        c->token = (uint64_t)t;
        /* a plain fresh hold says whether it left its mark */
        c->wakes = !is_fair(c) && dist__reply_int(r, 3, &t) == 0 && t == 1;
        c->ownerdead = is_robust(c->o) && r->elements > (is_fair(c) ? 3 : 4);
        if (c->ownerdead && v != 1)
            return dist__call_bad(c, script,
                                  "an owner-dead hold of count "
                                  "%lld",
                                  v);
        return 0;
    }
    if (ok == 2 && is_robust(c->o))
        return dist__err_lock(ENOTRECOVERABLE, "mutex",
                              c->o->st->names->name.p,
                              " is not recoverable: a holder told EOWNERDEAD "
                              "released it without dist_mutex_consistent; an "
                              "operator resets it (distlock unlock --reset)");
    if (ok != 0 || v < -1)
        return dist__call_bad(c, script, "status %lld, wait %lld ms", ok, v);
    c->taken = 0;
    c->wait = v;
    if (is_fair(c) && dist__reply_int(r, 2, &t) == 0 && t > 0 &&
        (uint64_t)t > c->seen_token)
        c->seen_token = (uint64_t)t;
    if (!is_fair(c) && c->how == DIST__HOW_WAIT) {
        if (dist__reply_int(r, 2, &t) != 0 || (t != 0 && t != 1))
            return dist__call_bad(c, script,
                                  "a refusal that does not say "
                                  "whether its holder wakes a waiter");
        c->registered = 1;
        c->aimed = (int)t;
    }
    return 0;
}

/* One try.  A lost reply is settled by reading the owner's count back
 * rather than running the script twice. */
/* The acquire's reply was lost: reads the owner's count back.  0 with the
 * hold taken, 1 to run the script again, or an error.  Apart from
 * m_acquire (noinline) so that its buffer is on the stack only on this
 * path: every call must fit a PTHREAD_STACK_MIN stack. */
static __attribute__((noinline)) int m_settle_lost(struct dist__call *c)
{
    long long holds, pttl, dead = 0;
    uint64_t tok;
    struct dist__why why;

    /* the reason the reply was lost says more than the probe's */
    dist__why_get(&why);
    if (probe(c->o->st->names, c->limit, &holds, &pttl, &tok,
              is_robust(c->o) ? &dead : NULL, NULL, &c->on) != 0) {
        c->unknown = 1;
        return dist__err_as(EIO, &why, "%s", why.text);
    }
    if (holds > (long long)c->n[0] + 1 + HOLDS_AHEAD_MAX)
        return dist__call_bad(c, "mutex_probe",
                              "%lld holds (this "
                              "thread had %lu)",
                              holds, c->n[0]);
    if (holds == (long long)c->n[0] + 1) {
        c->taken = 1;
        c->count = (unsigned long)holds;
        c->token = tok;
        c->wakes = 1; /* whether it left a mark is not known: the release
                         * looks */
        c->ownerdead = dead == 1 && c->n[0] == 0;
        return 0;
    }
    return 1;
}

/* One try.  A lost reply is settled by reading the owner's count back
 * rather than running the script twice. */
static int m_acquire(struct dist__call *c)
{
    redisReply *r;
    int rc = run_acquire(c, &r);

    if (rc == DIST__ECONN) {
        if ((rc = m_settle_lost(c)) != 1)
            return rc;
        if ((rc = run_acquire(c, &r)) == DIST__ECONN)
            c->unknown = 1;
    }
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM : EIO; /* ENOMEM: nothing was sent */
    rc = read_acquire(c, r);
    freeReplyObject(r);
    return rc;
}

/* An error-checking mutex refuses its owner: lock says EDEADLK (waiting
 * would wait for ever), trylock EBUSY, as POSIX and glibc have it (trylock
 * never deadlocks; it only finds the mutex taken). */
static int m_plan(struct dist__call *c, int try_only)
{
    if (c->n[0] > 0 && (c->o->flags & DIST__MUTEX_ERRORCHECK))
        return dist__err_lock(try_only ? EBUSY : EDEADLK, "mutex",
                              c->o->st->names->name.p,
                              " is already held by this thread");
    c->how = try_only     ? DIST__HOW_TRY
             : is_fair(c) ? DIST__HOW_QUEUE
                          : DIST__HOW_WAIT;
    return 0;
}

/* ---- release -------------------------------------------------------------- */

/* The release script's arguments, the derived names in room; wakes: a
 * plain mutex's hold that left its mark (mutex_unlock); expect: the count
 * a settle expects to find, or NULL; robust: DIST__ROBUST_*, with keep
 * (the record's time to live once not recoverable; a fair release's
 * always: the counter's that a grant draws, fair_unlock).  Returns the
 * number of keys, or -1 out of memory (said; room done all the same). */
static int release_args(const struct dist__names *nm, int fair, int wakes,
                        const char *lease, const char *owner, size_t olen,
                        const char *expect, int robust, const char *keep,
                        struct dist__buf *kv, int *nkv,
                        struct dist__room *room)
{
    static const char *const how[] = { "", "clean", "lost", "back" };
    /* A plain release whose hold left no mark among the waiters, the
     * usual one, neither reads them nor says so: no waiters' key, no
     * ARGV[5] (mutex_unlock); the server parses two arguments fewer. */
    int bare = !fair && !wakes && !expect && !robust, n, nkeys;

    n = (fair ? NKEYS(fair_unlock_keys) : NKEYS(unlock_keys)) - 1 + !!robust -
        bare;
    if (keys_of(nm, fair ? fair_unlock_keys : unlock_keys, n, kv, room) != 0)
        return -1;
    nkeys = ++n;
    kv[n++] = dist__arg(lease);
    kv[n++] = (struct dist__buf){ owner, olen };
    kv[n++] = dist__arg(dist__publish_cmd());
    kv[n++] = dist__arg("0");
    if (!fair && !bare)
        kv[n++] = dist__arg(wakes ? "1" : "0");
    if (expect || robust || fair)
        kv[n++] = dist__arg(expect ? expect : "");
    if (robust || fair) {
        kv[n++] = dist__arg(how[robust]);
        kv[n++] = dist__arg(keep);
    }
    *nkv = n;
    return nkeys;
}

/* Whether the fencing counter may have expired by itself since mytoken
 * was drawn, now_us being the server's clock: each draw gives it the lease
 * plus the grace to live (prelude_token), renewals do not, and a hold
 * renewed for longer outlives it.  A token is at least the server's clock
 * at its draw, so now_us - mytoken is at most the counter's age. */
static int counter_may_have_expired(const struct dist__call *c,
                                    uint64_t mytoken, uint64_t now_us)
{
    unsigned long keep = dist__key_keep_ms(dist__lease_of(c->o));

    return keep && now_us > mytoken &&
           now_us - mytoken >= (uint64_t)keep * 1000u;
}

/* After a lost reply: whether the release ran.  1 it did (c->count set),
 * 0 it did not, -1 the hold is gone, -2 unknown. */
static int release_ran(struct dist__call *c, uint64_t mytoken)
{
    long long holds, pttl;
    uint64_t tok, now_us;

    if (probe(c->o->st->names, c->limit, &holds, &pttl, &tok, NULL, &now_us,
              &c->on) != 0)
        return -2;
    /* A counter below our token means the server lost its data (a restart
     * without persistence): the hold went with it.  A counter that is gone
     * may only have expired, on a hold older than its time to live: then
     * the count alone tells (a final release that ran and a hold lost in a
     * restart meanwhile both leave none; taken as the release, as the
     * renewals found none lost until this unlock). */
    if (tok < mytoken &&
        !(tok == 0 && counter_may_have_expired(c, mytoken, now_us)))
        return -1;
    if (holds == (long long)c->n[0] - 1) {
        c->count = (unsigned long)holds;
        return 1;
    }
    return holds == (long long)c->n[0] ? 0 : -1;
}

static uint64_t my_token(struct dist__call *c)
{
    struct dist__rec *r;
    uint64_t t = 0;

    pthread_mutex_lock(&c->o->st->mu);
    if ((r = dist__rec_find(c->o->st)) != NULL)
        t = r->token;
    pthread_mutex_unlock(&c->o->st->mu);
    return t;
}

/* The release's reply was lost: whether it ran.  0 (it did), EPERM (the
 * hold was gone), EIO (cannot tell: the renewal thread settles it), or 1
 * to run it again.  noinline: see m_settle_lost. */
static __attribute__((noinline)) int release_lost(struct dist__call *c)
{
    struct dist__why why;

    dist__why_get(&why);
    switch (release_ran(c, my_token(c))) {
    case 1:
        return 0;
    case -1:
        return EPERM;
    case -2:
        c->unknown = 1;
        return dist__err_as(EIO, &why, "%s", why.text);
    }
    return 1;
}

/* Sends the release: 1 with its reply in *r, else what m_release returns
 * (a deferred one's 0 among them). */
static int send_release(struct dist__call *c, int script, int nkeys,
                        const struct dist__buf *kv, int nkv, redisReply **r)
{
    int rc;

    if (c->defer_fn) {
        /* deferred: its reply goes to the engine when the link is read */
        rc = dist__route_defer(c->limit, script, nkeys, kv, nkv, c->defer_fn,
                               c->defer_arg, &c->on);
        if (rc == 0) {
            c->deferred = 1;
            c->count = c->n[0] - 1;
            return 0;
        }
    } else {
        rc = dist__route_run(c->limit, script, nkeys, kv, nkv, r);
    }
    if (rc == DIST__ECONN) {
        if ((rc = release_lost(c)) != 1)
            return rc;
        if ((rc = dist__route_run(c->limit, script, nkeys, kv, nkv, r)) ==
            DIST__ECONN) {
            c->unknown = 1;
            return EIO;
        }
    }
    /* Nothing was sent, but the owner lets go all the same: a hold kept
     * after a failed unlock would be renewed for ever.  The renewal thread
     * releases it when Redis answers again. */
    if (rc == DIST__ENOCONN || rc == ENOMEM)
        c->unknown = 1;
    return rc == 0 ? 1 : EIO;
}

static int m_release(struct dist__call *c)
{
    const int fair = is_fair(c);
    char lease[24], keep[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[14];
    struct dist__room room;
    redisReply *r;
    long long res;
    int rc, nkv, nkeys,
        script = fair ? DIST__S_FAIR_UNLOCK : DIST__S_MUTEX_UNLOCK;

    snprintf(lease, sizeof lease, "%lu", dist__lease_of(c->o));
    if (c->robust || fair) /* only a robust or fair release sends it */
        snprintf(keep, sizeof keep, "%lu",
                 dist__key_keep_ms(dist__lease_of(c->o)));
    nkeys = release_args(c->o->st->names, fair, c->wakes, lease, owner, olen,
                         NULL, c->robust, keep, kv, &nkv, &room);
    if (nkeys < 0)
        c->unknown = 1; /* nothing sent: as for no connection, below */
    rc = nkeys < 0 ? EIO : send_release(c, script, nkeys, kv, nkv, &r);
    dist__room_done(&room);
    if (rc != 1)
        return rc;
    /* {holds left, woken}: left below what the owner had, or -1 (lost) */
    if (dist__reply_int(r, 0, &res) != 0 ||
        dist__reply_int(r, 1, &c->woken) != 0) {
        freeReplyObject(r);
        return dist__call_bad(c, fair ? "fair_unlock" : "mutex_unlock",
                              "a reply that is not {holds, woken}");
    }
    freeReplyObject(r);
    if (res < -1 || (res >= 0 && (unsigned long long)res >= c->n[0]) ||
        c->woken < 0)
        return dist__call_bad(c, fair ? "fair_unlock" : "mutex_unlock",
                              "%lld holds left and %lld woken (this thread "
                              "had %lu)",
                              res, c->woken, c->n[0]);
    if (res < 0)
        return EPERM;
    c->count = (unsigned long)res;
    return 0;
}

/* The renewal thread: a release whose reply was lost, run again on the
 * condition that Redis still counts the one hold more. */
static int m_settle(struct dist__hold *h, int *lost)
{
    const int fair = h->kind == &dist__fair_kind.renewal;
    char lease[24], expect[24], keep[24], owner[DIST__OWNER_MAX];
    struct dist__buf kv[14];
    struct dist__room room;
    redisReply *r = NULL;
    long long res = 0;
    int rc, nkv, nkeys;
    unsigned long ms = h->lease_ms ? h->lease_ms : dist__watchdog_ms();

    snprintf(lease, sizeof lease, "%lu", ms);
    snprintf(keep, sizeof keep, "%lu", dist__key_keep_ms(ms));
    snprintf(expect, sizeof expect, "%lu", h->n[0] + 1);
    /* whether the hold left its mark is not kept here: the release looks;
     * a release that gives back the last hold treats the record as the
     * call that handed it over said, one that leaves holds not at all */
    nkeys = release_args(h->names, fair, 1, lease, owner,
                         dist__hold_owner(h, owner), expect, h->robust, keep,
                         kv, &nkv, &room);
    rc = nkeys < 0 ? DIST__ENOCONN
                   : dist__route_run(
                         0, fair ? DIST__S_FAIR_UNLOCK : DIST__S_MUTEX_UNLOCK,
                         nkeys, kv, nkv, &r); /* no limit */
    dist__room_done(&room);
    if (rc == DIST__ECONN || rc == DIST__ENOCONN)
        return -1;
    if (rc == 0)
        dist__reply_int(r, 0, &res);
    freeReplyObject(r);
    /* -2 nothing was owed, >= 0 the owed release is done, -1 the owner
     * holds nothing at all any more */
    *lost = rc == 0 && res == -1;
    return 0;
}

/* ---- waiting ---------------------------------------------------------------- */

/* The channel a waiter sleeps on.  A fair waiter's own: only the head of
 * the queue is told of a release.  A plain waiter's own while its holder
 * will wake a registered waiter (c->aimed), else the lock's, which every
 * release and Redisson's tell (prelude_wake.lua): so a release wakes the
 * one process it picked, not every process with a waiter. */
static struct dist__chan *m_channel(struct dist__call *c)
{
    const struct dist__names *nm = c->o->st->names;
    struct dist__chan *ch = NULL;
    struct dist__room room;
    struct dist__buf b;
    size_t olen;
    const char *owner = dist__owner(&olen);
    char *name;

    if (!is_fair(c) && !c->aimed) {
        if (dist__names_keys(nm, chan_key, 1, &b, &room) == 0)
            ch = dist__sub_get(&b);
        dist__room_done(&room);
        return ch;
    }
    name = is_fair(c)
               ? dist__names_waiter_chan(nm, owner, olen, &b.len)
               : dist__names_mutex_waiter_chan(nm, owner, olen, &b.len);
    if (!name)
        return NULL;
    b.p = name;
    ch = dist__sub_get(&b);
    free(name);
    return ch;
}

/* A waiter's renewal keeps it in place: a fair one's as fair_lock set it,
 * four keys; a plain one's entry among the registered waiters (see
 * waiter_renew). */
static const enum dist__nm *m_queue(struct dist__call *c, int *nkeys)
{
    if (!is_fair(c)) {
        *nkeys = NKEYS(waiters_key);
        return waiters_key;
    }
    *nkeys = NKEYS(fair_wait_keys);
    return fair_wait_keys;
}

/* A plain waiter that gives up leaves the registered waiters, passing on
 * a wake-up it may have been sent (mutex_cancel). */
static void plain_cancel(struct dist__call *c)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[4];
    struct dist__room room;
    redisReply *r;

    if (keys_of(c->o->st->names, waiters_key, NKEYS(waiters_key), kv,
                &room) == 0) {
        kv[2] = (struct dist__buf){ owner, olen };
        kv[3] = dist__arg(dist__publish_cmd());
        if (dist__route_run(c->limit, DIST__S_MUTEX_CANCEL, 2, kv, 4, &r) ==
            0)
            freeReplyObject(r);
    }
    dist__room_done(&room);
}

/* A grant this caller passed on (fair_cancel): its message, still on its
 * way perhaps, is not to be taken by a later wait on the channel. */
static void spend_grant(struct dist__call *c, long long token)
{
    const struct dist__names *nm = c->o->st->names;
    struct dist__buf b;
    size_t olen;
    const char *owner = dist__owner(&olen);

    if (token <= 0 ||
        !(b.p = dist__names_waiter_chan(nm, owner, olen, &b.len)))
        return;
    dist__sub_spend_name(&b, (uint64_t)token);
    free((char *)b.p);
}

/* A waiter that gives up leaves at once (best effort: if Redis cannot be
 * reached, its entry ends with its window): a fair one the queue, passing
 * on a grant it may have been given meanwhile (fair_cancel), a plain one
 * the registered waiters. */
static void m_cancel(struct dist__call *c)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    char lease[24], keep[24];
    struct dist__buf kv[13];
    struct dist__room room;
    redisReply *r;
    long long granted = 0;

    if (!is_fair(c)) {
        plain_cancel(c);
        return;
    }
    if (keys_of(c->o->st->names, fair_cancel_keys, NKEYS(fair_cancel_keys),
                kv, &room) == 0) {
        kv[6] = (struct dist__buf){ owner, olen };
        kv[7] = dist__arg(dist__publish_cmd());
        kv[8] = dist__arg("0");
        kv[9] = ul_arg(lease, dist__lease_of(c->o));
        kv[10] = ul_arg(keep, dist__key_keep_ms(dist__lease_of(c->o)));
        kv[11] = dist__arg(c->n[0] == 0 ? "fresh" : "");
        if (dist__route_run(c->limit, DIST__S_FAIR_CANCEL, 6, kv, 12, &r) ==
            0) {
            if (dist__reply_int(r, 1, &granted) != 0)
                granted = 0;
            freeReplyObject(r);
        }
    }
    dist__room_done(&room);
    spend_grant(c, granted);
}

static const char *m_busy_why(const struct dist__call *c)
{
    return is_fair(c) ? " or has waiters" : "";
}

/* This thread released the lock to waiters a moment ago: sleep until one of
 * them has had time to take it, so that a thread looping on lock/unlock does
 * not starve other processes.  A plain sleep: our own release message must
 * not cut it short.  A timed lock waits no longer than its deadline. */
static void m_before_wait(struct dist__call *c, uint64_t deadline)
{
    struct dist__state *st = c->o->st;
    struct courtesy *y;
    struct timespec ts;
    uint64_t until = 0;

    if (c->n[0] > 0 || is_fair(c))
        return;
    pthread_mutex_lock(&st->mu);
    y = st->ext;
    if (y && y->yield_thread == dist__thread_no()) {
        until = y->yield_until;
        y->yield_thread = 0;
    }
    pthread_mutex_unlock(&st->mu);
    if (until <= dist__now_ms())
        return;
    if (deadline && deadline < until)
        until = deadline;
    dist__ms_to_ts(until, &ts);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR)
        ;
}

/* Whether this process listens on the lock's channel (dist__sub_listening). */
static int listening(const struct dist__names *nm, int *local)
{
    struct dist__room room;
    struct dist__buf b;
    int on = 0;

    if (dist__names_keys(nm, chan_key, 1, &b, &room) == 0)
        on = dist__sub_listening(&b, local);
    dist__room_done(&room);
    return on;
}

/* After a release that reached waiters.  Others wait and need a message, a
 * wake-up and a round trip to get in; this thread needs only its next call,
 * and would take the lock back nearly every time.  After a short run of its
 * own it gives them a head start: turns go round in bursts, which is fair
 * over time without paying a cross-process hand-off every time.  The
 * state's mu held. */
static void m_after_release(struct dist__call *c)
{
    struct courtesy *y = c->o->st->ext;
    long long waiters = c->woken;
    uint64_t me = dist__thread_no(), rtt;
    int local;

    if (is_fair(c) || c->count != 0 || waiters <= 0)
        return; /* a fair queue already decides who is next */
    /* PUBLISH counted our own subscriber connection too, if it listens:
     * that one matters only while another local thread waits. */
    if (listening(c->o->st->names, &local) && local == 0)
        waiters--;
    if (waiters <= 0)
        return;
    if (!y && !(y = c->o->st->ext = calloc(1, sizeof *y)))
        return; /* out of memory: no courtesy, nothing wrong */
    y->streak = y->streak_thread == me ? y->streak + 1 : 1;
    y->streak_thread = me;
    /* a cohort's release comes after a run of local hand-offs already: its
     * next acquire lets the other processes in first at once */
    if (y->streak < YIELD_AFTER && !(c->o->flags & DIST__MUTEX_COHORT))
        return;
    /* a few round trips; an unlock slowed by a fault (a pause, a
     * reconnect) says nothing about the round trip */
    rtt = dist__now_ms() - c->started;
    if (rtt > YIELD_MAX_RTT_MS)
        rtt = YIELD_MAX_RTT_MS;
    y->yield_thread = me;
    y->yield_until = dist__now_ms() + YIELD_MIN_MS + 8 * rtt;
    y->streak = 0;
}

/* A robust hold's renewal re-arms its record too (mutex_renew). */
static void m_renew_keys(struct dist__state *st, struct dist__rec *r,
                         struct dist__hold *h)
{
    struct dist__buf *one, *k;

    if (!r->robust || h->keys_owned)
        return;
    /* {N, distlock_robust:{N}}, owned by the entry; out of memory, it is
     * renewed without the record, which then lives its keep from the
     * acquire */
    if (!(one = dist__names_set(st->names, robust_key, 1)))
        return;
    if ((k = malloc(2 * sizeof *k + one[0].len + 1)) != NULL) {
        k[0] = st->names->name; /* the entry holds a reference */
        k[1].p = memcpy((char *)(k + 2), one[0].p, one[0].len + 1);
        k[1].len = one[0].len;
        h->keys = k;
        h->nkeys = 2;
        h->keys_owned = 1;
    }
    free(one);
}

static void m_state_free(struct dist__state *st)
{
    free(st->ext);
}

/* DIST_MUTEX_INITIALIZER: DISTLOCK_COHORT says whether it is a cohort one */
static int m_default_flags(void)
{
    return dist__cohort_default() ? DIST__MUTEX_COHORT : 0;
}

#define MUTEX_OPS                                                            \
    .noun = "mutex", .family = DIST__FAM_MUTEX,                              \
    .magic = 0x64697374u, /* "dist" */                                       \
        .renewal = { DIST__S_MUTEX_RENEW, m_settle }, .plan = m_plan,        \
    .acquire = m_acquire, .release = m_release, .cancel = m_cancel,          \
    .channel = m_channel, .queue = m_queue, .busy_why = m_busy_why,          \
    .before_wait = m_before_wait, .after_release = m_after_release,          \
    .state_free = m_state_free, .renew_keys = m_renew_keys

const struct dist__kind dist__mutex_kind = { MUTEX_OPS, .default_flags =
                                                            m_default_flags };
const struct dist__kind dist__fair_kind = { MUTEX_OPS };
