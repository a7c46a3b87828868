/* call.c: one acquire of any kind of lock: the owner's standing first,
 * then the kind's script, the wait for a release message, patience with a
 * Redis that cannot be reached, and the record of what was taken.  An
 * outcome that stays unknown is handed to the renewal thread, which
 * settles it with the kind's conditional release (see renew.c).  The
 * standing and the release are release.c's, what a hold taken needs
 * afterwards (replica sync, giving back) repair.c's, a release sent
 * without waiting for its reply defer.c's, and the caller's deadline
 * deadline.c's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "call_int.h"
#include "base/stats.h"

/* ---- replies that cannot be true ---------------------------------------------- */

int dist__call_bad(struct dist__call *c, const char *script, const char *fmt,
                   ...)
{
    char what[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->unknown = 1;
    c->bad = 1;
    return dist__err_lock(
        EIO, c->o->kind->noun, c->o->st->names->name.p,
        ": Redis answered %s with %s, which no call could have left (a "
        "broken or hostile server; the answer is not believed)",
        script, what);
}

/* prepare for a call with a deadline (monotonic ms; 0: none), by which
 * an earlier outcome still unknown makes it ETIMEDOUT. */
static int prepare_until(struct dist__call *c, int *held, uint64_t deadline)
{
    int rc = dist__prepare_by(c, held, deadline);

    if (rc != 0 && deadline && dist__now_ms() >= deadline)
        rc = dist__err_lock(ETIMEDOUT, c->o->kind->noun, name_of(c),
                            ": deadline passed while an earlier call's "
                            "outcome was being settled");
    return rc;
}

/* The latest the commands of a timed call's try that begins now may end:
 * one command timeout past the caller's deadline (monotonic ms; 0: none,
 * 0 too), or past now once the deadline has gone by.  A waiter woken long
 * after its deadline (a signal handler that ran for seconds) still makes
 * its last try, and that try needs a whole command timeout of its own:
 * capped at the deadline's, it would begin past its own end, the link
 * would give up before its first look, and a lock that was free, and may
 * have been taken by that very try, would end in EIO (LTP's
 * pthread_rwlock_timedrdlock/6-2). */
static uint64_t past_deadline(uint64_t deadline)
{
    uint64_t now = dist__now_ms();

    if (!deadline)
        return 0;
    return (deadline > now ? deadline : now) + dist__timeout_ms() + 1;
}

/* By when the release an acquire went behind is read (dist__behind_done),
 * taken before its first try: when that try must end, a timed call's
 * past_deadline, else one command timeout from the try's start, so that
 * a trylock behind it keeps its T (docs/design.md).  That release's reply
 * was due before the call began: one later than this is settled as
 * unknown. */
static uint64_t behind_bound(uint64_t deadline)
{
    return deadline ? past_deadline(deadline)
                    : dist__now_ms() + dist__timeout_ms() + 1;
}

static void note_unknown(struct dist__call *c)
{
    struct dist__state *st = c->o->st;
    struct dist__rec *r;

    pthread_mutex_lock(&st->mu);
    if ((r = dist__rec_get(st)) != NULL)
        dist__hand_over(c, r);
    pthread_mutex_unlock(&st->mu);
}

/* Records a hold taken.  c->lost when Redis had forgotten earlier holds of
 * ours and this is a fresh one.  0 or ENOMEM. */
static int record(struct dist__call *c)
{
    struct dist__state *st = c->o->st;
    unsigned long lease = c->o->lease_ms;
    struct dist__rec *r;

    pthread_mutex_lock(&st->mu);
    if (!(r = dist__rec_get(st))) {
        pthread_mutex_unlock(&st->mu);
        return ENOMEM;
    }
    if (c->replaced) /* the earlier hold was consumed by it */
        c->lost = c->n[c->mode] > 0 && !c->had;
    else if (c->n[c->mode] > 0 && c->count != c->n[c->mode] + 1)
        c->lost = 1;
    if (r->h && atomic_load(&r->h->lost)) {
        /* found gone meanwhile: that entry is done, a new one renews */
        if (dist__renew_remove(r->h))
            dist__hold_free(r->h);
        r->h = NULL;
        r->reg = 0;
    }
    if (c->token && (r->n[c->mode] == 0 || c->lost))
        r->token = c->token;
    if (r->n[c->mode] == 0 || c->lost)
        r->wakes = c->wakes;
    if (r->n[0] + r->n[1] == 0 || c->lost) {
        /* a new hold: robust when the object is, owner-dead as Redis said */
        r->robust = (c->o->flags & DIST__MUTEX_ROBUST) != 0;
        r->inconsistent = c->ownerdead;
    }
    r->n[c->mode] = c->count;
    if (lease && dist__now_ms() + lease > r->lease_end)
        r->lease_end = dist__now_ms() + lease; /* after the reply: the
                                                  * server's expiry is earlier */
    if (lease) /* from the send: the server's expiry is later */
        r->safe_end = c->started + lease - dist__safe_margin_ms(lease);
    if (!lease && r->reg)
        dist__renew_acked(r->h, c->started + dist__lease_of(c->o));
    if (!lease && !r->reg && dist__rec_hold(c, r)) {
        r->reg = 1;
        dist__renew_add(r->h, c->started + dist__lease_of(c->o));
    }
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* ---- freshness ---------------------------------------------------------------- */

/* A hold is valid from when its acquire was sent, not from when the reply
 * came back: the server set its lease somewhere in between.  A reply that
 * took longer than a third of the lease (FRESH_PART) leaves too little of
 * it to report a fresh hold, and a watchdog hold too little time for its
 * first renewal, due a third of the lease after it is taken.  Such a hold
 * is renewed at once, on the condition that it is still ours; if it is
 * gone (it expired on the way back), the try counts as not taken and the
 * caller tries again. */
#define FRESH_PART  3
#define FRESH_TRIES 3

static int stale(const struct dist__call *c)
{
    return dist__now_ms() - c->started > dist__lease_of(c->o) / FRESH_PART;
}

/* 1 renewed, 0 gone, -1 no answer (see dist__renew_one). */
static int renew_now(struct dist__call *c)
{
    const struct dist__kind *k = c->o->kind;
    struct dist__state *st = c->o->st;
    struct dist__hold keys;
    struct dist__rec *r;
    int rc;

    memset(&keys, 0, sizeof keys);
    if (k->renew_keys) {
        pthread_mutex_lock(&st->mu);
        if ((r = dist__rec_get(st)) != NULL)
            k->renew_keys(st, r, &keys);
        pthread_mutex_unlock(&st->mu);
    }
    rc = dist__renew_one(&k->renewal, st->names, keys.keys, keys.nkeys,
                         dist__lease_of(c->o), c->limit);
    if (keys.keys_owned)
        free((void *)keys.keys);
    return rc;
}

/* A try took the lock, but its reply came back late: renew before the
 * hold is reported.  0 with c->taken (fresh) or not (gone, c->wait 0: try
 * again at once); EIO with c->unknown when it could not be renewed in
 * time, which gives back the hold taken (see hand_over). */
static int refresh(struct dist__call *c)
{
    int i, rc;

    for (i = 0; i < FRESH_TRIES; i++) {
        c->started = dist__now_ms();
        if ((rc = renew_now(c)) < 0)
            break;
        if (rc == 0) {
            c->taken = 0;
            c->wait = 0;
            return 0;
        }
        if (!stale(c))
            return 0;
    }
    c->unknown = 1;
    return dist__err_lock(
        EIO, c->o->kind->noun, c->o->st->names->name.p,
        ": its acquire's reply came back later than a third of the lease, "
        "and it could not be renewed in time");
}

/* How long the first try of a timed call may wait for a Redis that cannot
 * be reached: until the caller's deadline (monotonic ms, as
 * dist__deadline_set converted it), not the whole patience (the torture
 * run saw a 145 ms timedlock return EIO after 1.5 s).  0: no deadline, or
 * a bad one, which is refused only when the call would wait. */
static uint64_t first_deadline(const struct dist__deadline *dl)
{
    return dl && !dl->bad ? dl->ms : 0;
}

/* The kind's acquire, all of whose commands (a reconnect, the script, a
 * probe after a lost reply) end within the command timeout from its start:
 * a server that answers one byte at a time cannot stretch it.  The kind
 * passes c->limit to every call it makes. */
static int try_limited(struct dist__call *c)
{
    uint64_t outer = c->limit;
    int rc;

    c->limit = sooner(outer, call_cap(c));
    rc = c->o->kind->acquire(c);
    c->limit = outer;
    return rc;
}

/* One try of the kind's acquire; a hold it takes is reported only when
 * it is fresh.  One that expired on the way back is tried for again at
 * once (a few times), so that trylock does not say EBUSY for it. */
static int try_once(struct dist__call *c)
{
    int i, rc = 0;

    for (i = 0; i < FRESH_TRIES; i++) {
        c->started = dist__now_ms();
        c->tried_us = dist__now_us();
        c->unknown = c->bad = 0;
        rc = try_limited(c);
        if (rc != 0 || !c->taken || !stale(c))
            return rc;
        if ((rc = refresh(c)) != 0 || c->taken)
            return rc;
    }
    return rc;
}

/* ---- trying ------------------------------------------------------------------- */

/* try_once, all of whose commands end within one command timeout of the
 * caller's deadline (monotonic ms; 0: none): a try that began before it
 * cannot run on long past it through slow replies, reconnects and the
 * re-tries of a hold that came back stale; one that begins after it (the
 * last try of a waiter that woke late) within one command timeout of its
 * start (past_deadline).  until (0: none) ends them sooner.  The bound
 * moves with the deadline when a realtime clock is stepped
 * (dist__deadline_step). */
static int try_bounded(struct dist__call *c, uint64_t deadline,
                       uint64_t until)
{
    uint64_t outer = c->limit, cap = past_deadline(deadline);
    int rc;

    if (until && (!cap || until < cap))
        cap = until;
    if (!cap)
        return try_once(c);
    c->limit = sooner(outer, cap);
    rc = try_once(c);
    c->limit = outer;
    return rc;
}

/* This call's own try lost its reply, and the renewal thread has been
 * settling it since: the next try waits for that, until give_up
 * (monotonic ms).  0 settled, and a try may follow (at give_up only when
 * last_at_end: a timed call's last try); EIO when it was not settled by
 * then, with c->unknown, or when no time is left for a try, each with the
 * try's own reason (the renewal thread's speaks of "an earlier call", and
 * there was none).  noinline: the rare path keeps its buffer out of the
 * caller's frame (small stacks, see acquire). */
static __attribute__((noinline)) int
settle_own(struct dist__call *c, uint64_t give_up, int last_at_end)
{
    struct dist__why why;
    uint64_t now;
    int held;

    dist__why_get(&why);
    note_unknown(c);
    c->unknown = 0;
    while (dist__prepare_by(c, &held, give_up) != 0) {
        now = dist__now_ms();
        if (now >= give_up) {
            c->unknown = 1; /* still unknown: the caller says so */
            return dist__err_as(EIO, &why, "%s; Redis has not answered since",
                                why.text);
        }
        dist__sleep_ms(give_up - now < 100 ? give_up - now : 100);
    }
    if (!last_at_end && dist__now_ms() >= give_up)
        return dist__err_as(EIO, &why, "%s", why.text); /* settled: nothing
                                                           was taken */
    return 0;
}

/* The kind's try for a call that may wait: a Redis that cannot be reached
 * for a moment (a restart, a failover) is tried again until the patience
 * runs out (dist__patience_ms, counted from the first failure), or the
 * caller's deadline.  A try whose outcome is unknown is handed to the
 * renewal thread, and the next try waits until it has been settled, so a
 * failover in the middle of a try does not end the wait.  The waits for
 * the settle and the tries after the first failure end with the patience
 * too (a timed call's last try keeps its command timeout past the
 * deadline): a lock whose reply was lost once ends within twice the
 * command timeout, as docs/design.md says, not three times (the settle waited
 * two command timeouts of its own).  A failure the link marked hopeless (a
 * refused certificate, a wrong URL scheme) ends it at once. */
static int try_patiently(struct dist__call *c, uint64_t deadline)
{
    uint64_t give_up = 0, within = 0, now;
    int rc;

    for (;;) {
        dist__hopeless_take();
        rc = try_bounded(c, deadline, within);
        /* a server that answers what cannot be is no server that cannot
         * be reached for a moment: asking again only repeats it (and runs
         * the script again each time) */
        if (rc != EIO || c->bad)
            return rc;
        now = dist__now_ms();
        if (!give_up) {
            give_up = now + dist__patience_ms();
            if (deadline && deadline < give_up)
                give_up = deadline; /* past_deadline bounds the tries */
            else
                within = give_up;
        }
        if (now >= give_up || dist__hopeless_take())
            return rc; /* a refused certificate stays refused: say so now */
        if (c->unknown) {
            if ((rc = settle_own(c, give_up, !within)) != 0)
                return rc;
            continue;
        }
        dist__sleep_ms(give_up - now < 50 ? give_up - now : 50);
        if (within && dist__now_ms() >= within)
            return rc; /* no time left for another try */
    }
}

/* How long a waiter may sleep before trying again: what the script said
 * (the holder's remaining lease, or the deadline of a waiter ahead).  0
 * means it ends this very millisecond (a script sees time stand still), so
 * try again at once; -1 (a lock with no expiry, which no well-behaved
 * client leaves) falls back to a lease of our own. */
static uint64_t sleep_until(const struct dist__call *c, uint64_t deadline)
{
    uint64_t until = dist__now_ms() + (c->wait >= 0 ? (uint64_t)c->wait + 1
                                                    : dist__lease_of(c->o));

    return deadline && deadline < until ? deadline : until;
}

/* Set once by dist__abandon_waits, for a process about to exit. */
static atomic_int abandon;

void dist__abandon_waits(void)
{
    atomic_store(&abandon, 1);
    dist__sub_wake_all();
}

/* The sleep between tries: EINTR when a signal handler interrupted it
 * (c->intr), else 0. */
static int sleep_on(const struct dist__call *c, struct dist__chan *ch,
                    unsigned long gen, uint64_t until)
{
    if (!c->intr) {
        dist__sub_wait_since(ch, gen, until);
        return 0;
    }
    return dist__sub_wait_intr(ch, gen, until, c->intr) == EINTR ? EINTR : 0;
}

/* The last try changed what the waiter should listen on (c->aimed: its
 * own channel, or the lock's): *ch becomes the kind's channel for it, and
 * the answer is 1 when the waiter may sleep on that try's answer (the new
 * channel was subscribed before it, and quiet since).  Out of memory, the
 * old channel stays: the sleep is bounded by the holder's lease anyway. */
static __attribute__((noinline)) int switch_channel(struct dist__call *c,
                                                    struct dist__chan **ch,
                                                    uint64_t deadline)
{
    struct dist__chan *to = c->o->kind->channel(c);

    if (!to)
        return 0;
    dist__sub_put(*ch);
    *ch = to;
    dist__sub_wait_ready(to, sleep_until(c, deadline));
    return c->wait != 0 && dist__sub_quiet_since(to, c->tried_us);
}

/* A grant heard on the waiter's channel (a fair lock's release made it
 * the holder, prelude_grant.lua): the lock is taken, with the token and
 * lease the release gave it.  The grant came after the waiter's last try
 * ran, so the hold is counted from when that try was sent; a hold whose
 * lease is not the caller's, or that leaves too little of it (a waiter
 * that slept long behind others), is renewed first, on the condition
 * that it is still ours (refresh: c->taken 0 when it is gone: try again).
 * The renewal's commands end as a try's would (try_bounded). */
static __attribute__((noinline)) int take_grant(struct dist__call *c,
                                                uint64_t token,
                                                unsigned long lease,
                                                uint64_t deadline)
{
    uint64_t outer = c->limit, cap = past_deadline(deadline);
    int rc = 0;

    c->taken = 1;
    c->count = c->n[c->mode] + 1;
    c->token = token;
    c->wakes = 0;
    c->ownerdead = 0;
    c->unknown = c->bad = 0;
    c->started = c->tried_us / 1000;
    if (lease == dist__lease_of(c->o) && !stale(c))
        return 0;
    if (cap)
        c->limit = sooner(outer, cap);
    rc = refresh(c);
    c->limit = outer;
    return rc;
}

/* Sleeps on the lock's channel *ch between tries until it is taken, an
 * error, the deadline (after one last try: a lock free at the deadline is
 * taken, never timed out), a signal handler or a cancel request
 * (c->intr), or dist__abandon_waits.  A try that was under way when the
 * deadline came is that last try: it looked at the lock about then, and
 * another one, with a command timeout of its own, made a call that a slow
 * Redis answered within each timeout end three command timeouts past its
 * deadline, the cancel included (the torture run, proxy latency).  *ch
 * changes with what the tries say (switch_channel). */
static int wait_on(struct dist__call *c, struct dist__chan **chp,
                   const struct dist__deadline *dl, uint64_t deadline)
{
    const struct dist__kind *k = c->o->kind;
    int rc, last = 0, asleep, aimed = c->aimed;
    uint64_t token;
    unsigned long lease;

    /* Subscribe before trying again, so that a release that comes between
     * that try and the sleep wakes the sleep.  When the channel was
     * subscribed already before the try that found the lock busy, and no
     * message came since, that try's answer stands: the first wake-up
     * runs the script, not the moment the wait begins (one script per
     * wake-up).  A try that said "again at once" (wait 0) is not slept
     * on. */
    dist__sub_wait_ready(*chp, sleep_until(c, deadline));
    asleep = c->wait != 0 && dist__sub_quiet_since(*chp, c->tried_us);
    for (;;) {
        /* Wake-ups are not taken from each other: a waiter woken with the
         * others and refused for its own reason (a reader a waiting writer
         * keeps out) must not sleep through its turn. */
        unsigned long gen = dist__sub_gen(*chp);
        /* read after gen: a wake-all that comes later ends the sleep */
        if (atomic_load(&abandon))
            return dist__err_lock(ECANCELED, k->noun, name_of(c),
                                  ": the wait was abandoned");
        /* a grant drawn before the last try's answer is void: that try
         * found the lock not ours (fair_lock's seen) */
        if (c->seen_token)
            dist__sub_spend(*chp, c->seen_token);
        if (dist__sub_grant_take(*chp, &token, &lease)) {
            rc = take_grant(c, token, lease, deadline);
            if (rc != 0 || c->taken)
                return rc;
            asleep = 0; /* gone before it was renewed: try */
        }
        if (!asleep) {
            rc = try_patiently(c, deadline);
            /* a grant whose message is still on its way is spent: the
             * try found the lock its own (fair_lock) */
            if (rc == 0 && c->taken && c->how == DIST__HOW_QUEUE)
                dist__sub_spend(*chp, c->token);
            if (rc != 0 || c->taken)
                return rc;
            if (last || dist__deadline_step(dl, &deadline))
                return dist__err_lock(ETIMEDOUT, k->noun, name_of(c),
                                      ": timed out");
            if (c->aimed != aimed) {
                aimed = c->aimed;
                asleep = switch_channel(c, chp, deadline);
                continue;
            }
        }
        asleep = 0;
        /* a handler that ran in the try (the link's wait for the reply
         * went on) interrupts the wait as one in the sleep would */
        if ((c->intr & DIST__SUB_EINTR) && dist__eintr_take())
            return dist__err_lock(
                EINTR, k->noun, name_of(c),
                ": the wait was interrupted by a signal handler");
        if (sleep_on(c, *chp, gen, sleep_until(c, deadline)) == EINTR)
            return dist__err_lock(
                EINTR, k->noun, name_of(c),
                ": the wait was interrupted by a signal handler");
        if (dist__deadline_step(dl, &deadline))
            last = 1;
    }
}

/* A waiter cancelled in its sleep (c->intr) gives its channel back. */
static void chan_put_cancelled(void *arg)
{
    dist__sub_put(*(struct dist__chan **)arg);
}

/* wait_on the lock's channel; a waiter cancelled in its sleep (c->intr)
 * gives the channel back. */
static int wait_loop(struct dist__call *c, const struct dist__deadline *dl,
                     uint64_t deadline)
{
    struct dist__chan *ch = c->o->kind->channel(c);
    int rc;

    if (!ch)
        return dist__err(ENOMEM, "out of memory");
    pthread_cleanup_push(chan_put_cancelled, &ch);
    rc = wait_on(c, &ch, dl, deadline);
    pthread_cleanup_pop(0);
    dist__sub_put(ch);
    return rc;
}

/* The lock is not free and the caller would wait: the deadline is looked
 * at only now (as musl does), then the wait. */
static int wait_for_it(struct dist__call *c, const struct dist__deadline *dl)
{
    const struct dist__kind *k = c->o->kind;
    struct dist__hold *w = NULL;
    uint64_t deadline = 0;
    int rc;

    if (dl) {
        if ((rc = dist__deadline_ms(dl, &deadline)) != 0)
            return rc;
        if (dist__deadline_reached(dl))
            return dist__err_lock(ETIMEDOUT, k->noun, name_of(c),
                                  ": deadline passed");
    }
    if (c->how == DIST__HOW_QUEUE || c->registered) {
        int nkeys;
        const enum dist__nm *keys = k->queue(c, &nkeys);
        w = dist__waiter_start(c->o->st->names, keys, nkeys);
    }
    rc = wait_loop(c, dl, deadline);
    dist__waiter_stop(w);
    return rc;
}

/* ---- acquire -------------------------------------------------------------------- */

/* Says why a call that did not take the lock failed, with the lock's
 * name. */
static int failed(struct dist__call *c, int rc)
{
    const struct dist__kind *k = c->o->kind;
    struct dist__why why;

    if (c->unknown) {
        /* why, with the name once */
        dist__why_get(&why);
        note_unknown(c);
        if (why.lock == name_of(c))
            return dist__err_as(EIO, &why,
                                "%s; whether it took the lock is unknown: "
                                "a hold it may have taken is given back when "
                                "Redis answers, or its lease ends it",
                                why.text);
        return dist__err_lock(
            EIO, k->noun, name_of(c),
            ": %s; whether it took the lock is unknown: a hold it may have "
            "taken is given back when Redis answers, or its lease ends it",
            why.text[0] ? why.text : "the reply was lost");
    }
    pthread_mutex_lock(&c->o->st->mu);
    dist__rec_tidy(c->o->st);
    pthread_mutex_unlock(&c->o->st->mu);
    if (rc == EIO) {
        dist__why_get(&why);
        if (why.lock != name_of(c))
            dist__err_lock(EIO, k->noun, name_of(c), ": %s", why.text);
    }
    return rc;
}

/* The counters of a hold taken (stats.h): a call that may wait also
 * counts in the histogram of how long it took, from t0. */
static void count_taken(int try_only, int waited, uint64_t t0)
{
    dist__stat_add(DIST__ST_ACQUIRED, 1);
    if (waited)
        dist__stat_add(DIST__ST_CONTENDED, 1);
    if (!try_only)
        dist__stat_wait(dist__now_ms() - t0);
}

/* A queued or registered waiter that gives up leaves (best effort: a waiter's
 * entry also ends with its window).  A timed call's leaving ends within
 * one command timeout of its deadline (of now, once it has passed), as
 * its tries do. */
static __attribute__((noinline)) void cancel(struct dist__call *c,
                                             const struct dist__deadline *dl)
{
    uint64_t bound = past_deadline(first_deadline(dl)), outer = c->limit;

    if (!bound) {
        c->o->kind->cancel(c);
        return;
    }
    c->limit = sooner(outer, bound);
    c->o->kind->cancel(c);
    c->limit = outer;
}

/* A robust mutex taken from a holder that did not release it cleanly:
 * EOWNERDEAD, the lock held, as POSIX has it. */
static __attribute__((noinline)) int owner_dead(struct dist__call *c)
{
    return dist__err_lock(
        EOWNERDEAD, c->o->kind->noun, name_of(c),
        ": its last holder did not release it cleanly (it died, its lease "
        "ran out, or its hold was forced); it is held now, the state it "
        "guards may need repair, then dist_mutex_consistent");
}

/* The rare steps after a try (give_back, replica_sync, shed_surplus,
 * cancel, give_back_one) are noinline: inlined, each one's struct
 * dist__call sat in acquire's frame through the whole try, and a lock
 * on a 16 KiB thread stack overflowed under ASan (test_posix). */
static int acquire(struct dist__obj *o, int mode, int try_only,
                   const struct dist__deadline *dl, int courtesy, int intr)
{
    const struct dist__kind *k = o->kind;
    struct dist__call c = { .o = o, .mode = mode, .intr = intr };
    uint64_t t0 = dist__now_ms(), until = first_deadline(dl), behind_by;
    int rc, held, queued, fresh, waited = 0;

    /* an earlier lost reply is settled first, within the deadline too */
    if ((rc = prepare_until(&c, &held, until)) != 0)
        return rc;
    /* what a settle of this acquire's unknown outcome does to the record */
    if (o->flags & DIST__MUTEX_ROBUST)
        c.robust = DIST__ROBUST_BACK;
    if ((rc = k->plan(&c, try_only)) != 0)
        return failed(&c, rc);
    if (!try_only && courtesy && k->before_wait)
        k->before_wait(&c, until);
    dist__go_behind(&c);
    /* the release ahead is read by when the first try must end */
    behind_by = behind_bound(until);
    rc = try_only ? try_once(&c) : try_patiently(&c, until);
    dist__behind_done(&c, rc, behind_by);
    queued =
        (c.how == DIST__HOW_QUEUE || c.registered) && rc == 0 && !c.taken;
    if (rc == 0 && !c.taken && try_only) {
        dist__stat_add(DIST__ST_BUSY, 1);
        return failed(&c, dist__err_lock(EBUSY, k->noun, name_of(&c),
                                         " is held by another owner%s",
                                         k->busy_why ? k->busy_why(&c) : ""));
    }
    if (rc == 0 && !c.taken) {
        waited = 1;
        rc = wait_for_it(&c, dl);
    }
    if (queued && !(rc == 0 && c.taken))
        cancel(&c, dl);
    if (rc == ETIMEDOUT)
        dist__stat_add(DIST__ST_TIMEDOUT, 1);
    if (rc != 0)
        return failed(&c, rc);
    fresh = c.n[0] + c.n[1] == 0;
    if (record(&c) != 0)
        return dist__err(ENOMEM, "out of memory");
    /* a reentrant hold adds to one a replica has already */
    if (fresh || c.lost || c.replaced)
        rc = dist__replica_sync(&c);
    /* after the sync, which waits on the link c.on names: a release may
     * close that link and open another (fuzz_reply found the WAIT on a
     * freed link).  On one server too (test_liar: a fresh hold counted
     * twice). */
    if (rc == 0 && fresh && c.count > 1)
        rc = dist__shed_surplus(&c);
    if (c.fixup)
        dist__give_back_one(o);
    if (c.lost)
        dist__call_lost_handler(name_of(&c));
    if (rc == 0)
        count_taken(try_only, waited, t0);
    if (rc == 0 && c.ownerdead)
        rc = owner_dead(&c);
    return rc;
}

#define MAX_DEPOSED     4   /* acquires that may find their master deposed */
#define ATTACH_PAUSE_MS 100 /* between tries while replicas attach */

/* Whether a call that may wait can try again, after a pause, while the
 * master's replicas attach (DIST__EATTACHING): until the caller's
 * deadline, or for the patience a call has for a Redis that cannot be
 * reached (a failover takes that long); never for a try. */
static int may_wait_attach(int try_only, const struct dist__deadline *dl,
                           uint64_t t0)
{
    uint64_t until = first_deadline(dl), now = dist__now_ms();

    if (try_only)
        return 0;
    if (!until)
        until = t0 + dist__patience_ms();
    if (now + ATTACH_PAUSE_MS >= until)
        return 0;
    dist__sleep_ms(ATTACH_PAUSE_MS);
    return 1;
}

/* Whether a timed call's deadline has passed (never for one without a
 * deadline, or with a bad one, which was refused if the call waited). */
static int deadline_gone(const struct dist__deadline *dl)
{
    return dl && !dl->bad && dist__deadline_reached(dl);
}

/* A timed call whose hold was given back from a deposed master after its
 * deadline: the acquire that was under way then was its last try, as in
 * wait_on (another, on the new master, took a command timeout and a
 * replica wait of its own, each of up to MAX_DEPOSED). */
static __attribute__((noinline)) int deposed_late(struct dist__obj *o)
{
    struct dist__why why;

    dist__why_get(&why);
    return dist__err_lock(ETIMEDOUT, o->kind->noun, o->st->names->name.p,
                          ": timed out; the hold taken at the deadline was "
                          "on a master the sentinels had replaced, and was "
                          "given back (%s)",
                          why.text);
}

/* acquire, again while the hold it took was on a master the sentinels
 * had just replaced (DIST__EDEPOSED: the map points at the new one then)
 * or on one whose replicas are still attaching (DIST__EATTACHING), each
 * try within the caller's deadline, and none begun after it. */
static int acquire_on_master(struct dist__obj *o, int mode, int try_only,
                             const struct dist__deadline *dl, int courtesy,
                             int intr)
{
    uint64_t t0 = dist__now_ms();
    int rc, tries = 0;

    for (;;) {
        rc = acquire(o, mode, try_only, dl, courtesy, intr);
        if (rc == DIST__EDEPOSED && deadline_gone(dl))
            return deposed_late(o);
        if (rc == DIST__EDEPOSED && ++tries < MAX_DEPOSED)
            continue;
        if (rc == DIST__EATTACHING && may_wait_attach(try_only, dl, t0))
            continue;
        break;
    }
    if (rc == DIST__EDEPOSED)
        return EIO;
    return rc == DIST__EATTACHING ? DIST_ENOREPLICA : rc;
}

int dist__acquire(struct dist__obj *o, int mode, int try_only,
                  const struct dist__deadline *dl)
{
    int rc = acquire_on_master(o, mode, try_only, dl, 1, 0);

    dist__call_end();
    return rc;
}

int dist__acquire_intr(struct dist__obj *o, const struct dist__deadline *dl,
                       int intr)
{
    int rc;

    dist__eintr_take(); /* a handler that ran before the call */
    rc = acquire_on_master(o, 0, 0, dl, 1, intr);

    dist__call_end();
    return rc;
}

int dist__reacquire(struct dist__obj *o)
{
    int rc = acquire_on_master(o, 0, 0, NULL, 0, 0);

    dist__call_end();
    return rc;
}

int dist__consistent(struct dist__obj *o)
{
    struct dist__state *st = o->st;
    struct dist__rec *r;
    int rc = 0;

    if (!(o->flags & DIST__MUTEX_ROBUST))
        return dist__err_lock(EINVAL, o->kind->noun, st->names->name.p,
                              " is not robust");
    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    if (!r || r->n[0] + r->n[1] == 0 || (r->h && atomic_load(&r->h->lost)))
        rc = EPERM;
    else if (!r->inconsistent)
        rc = EINVAL;
    else
        r->inconsistent = 0;
    pthread_mutex_unlock(&st->mu);
    if (rc == EPERM)
        return dist__err_lock(EPERM, o->kind->noun, st->names->name.p,
                              " is not held by this thread");
    if (rc == EINVAL)
        return dist__err_lock(
            EINVAL, o->kind->noun, st->names->name.p,
            " is consistent already (only a hold that lock returned "
            "EOWNERDEAD for is marked consistent)");
    return 0;
}

int dist__token(struct dist__obj *o, int mode, uint64_t *token)
{
    struct dist__state *st = o->st;
    struct dist__rec *r;

    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    if (!r || r->n[mode] == 0 || (r->h && atomic_load(&r->h->lost))) {
        pthread_mutex_unlock(&st->mu);
        return dist__err_lock(EPERM, o->kind->noun, st->names->name.p,
                              " is not %s by this thread",
                              mode ? "write-locked" : "held");
    }
    *token = r->token;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* When the calling thread's holds of o are surely still its own
 * (monotonic ms): the watchdog's safe-until bound, or an explicit lease's;
 * 0 when it holds none, or they were found lost.  The state's mu held. */
static uint64_t safe_until_of(struct dist__rec *r)
{
    if (!r || r->n[0] + r->n[1] == 0 || (r->h && atomic_load(&r->h->lost)))
        return 0;
    if (r->reg && r->h)
        return dist__renew_safe_until(r->h);
    return r->safe_end;
}

int dist__lease_left(struct dist__obj *o, struct timespec *left)
{
    struct dist__state *st = o->st;
    struct dist__rec *r;
    struct timespec now;
    uint64_t until, ns, now_ns;
    int held;

    left->tv_sec = 0;
    left->tv_nsec = 0;
    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    held = r && r->n[0] + r->n[1] > 0;
    until = safe_until_of(r);
    pthread_mutex_unlock(&st->mu);
    /* to the nanosecond: a bound read off a clock cut to the millisecond
     * would promise up to a millisecond too much */
    clock_gettime(CLOCK_MONOTONIC, &now);
    now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    if (!held)
        return dist__err_lock(EPERM, o->kind->noun, st->names->name.p,
                              " is not held by this thread");
    if (until * 1000000u <= now_ns)
        return dist__err_lock(
            EPERM, o->kind->noun, st->names->name.p,
            " may no longer be this thread's: its lease may run out on the "
            "server within the safety margin (or it was lost)");
    ns = until * 1000000u - now_ns;
    left->tv_sec = (time_t)(ns / 1000000000u);
    left->tv_nsec = (long)(ns % 1000000000u);
    return 0;
}

/* The calling thread lets go of its holds of o, which are gone (only if
 * they were found lost, when found): a report the renewal thread had not
 * decided yet is this call's to make, one under way is waited for, as in
 * release (a condition wait that said EPERM while the report waited behind
 * the renewal thread's other calls told the caller before the handler:
 * the Sentinel torture run).  Returns whether it let go. */
static int lose(struct dist__obj *o, int found)
{
    struct dist__state *st = o->st;
    struct dist__rec *r;
    int gone, news = 0;

    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    gone = r && r->n[0] + r->n[1] > 0 &&
           (!found || (r->h && atomic_load(&r->h->lost)));
    if (gone) {
        news = dist__let_go(r) != 2;
        r->n[0] = r->n[1] = 0;
        dist__rec_tidy(st);
    }
    pthread_mutex_unlock(&st->mu);
    if (news)
        dist__call_lost_handler(st->names->name.p);
    return gone;
}

void dist__hold_lost(struct dist__obj *o)
{
    lose(o, 0);
}

int dist__hold_found_lost(struct dist__obj *o)
{
    return lose(o, 1);
}

unsigned long dist__held(struct dist__obj *o, int mode)
{
    struct dist__state *st = o->st;
    struct dist__rec *r;
    unsigned long n = 0;

    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    if (r && !(r->h && atomic_load(&r->h->lost)))
        n = r->n[mode];
    pthread_mutex_unlock(&st->mu);
    return n;
}
