/* defer.c: deferred release.  An owner's last unlock of a mutex may write
 * its release script and return without the reply; the reply is handed
 * over later (dist__defer_done), and an acquire of the same owner that
 * follows goes right behind it on the link and acts on its outcome
 * (dist__go_behind, dist__behind_done).  The lock call itself is call.c's
 * (call_int.h). */
#include <stdlib.h>
#include <string.h>

#include "call_int.h"

/* ---- deferred release ----------------------------------------------------- */

/* With deferral on, an owner's last unlock of a mutex writes the release
 * script and returns; the reply is read when the thread's link is next
 * read (by any call), when the thread ends, shuts down or the program
 * exits, or by the renewal thread once the owner has made no call for
 * DIST__IDLE_READ_MS (route.c, "idle threads"), and handed to defer_done.
 * Holds lost meanwhile are reported to the lost handler at the thread's
 * next lock call (the reply is read in the middle of another call, where
 * user code must not run), or by the renewal thread after its read. */

/* thread-local: a loss found while a reply was read in the middle of a
 * call goes to the lost handler at the end of that thread's call */
#define LOST_NOTES 8
static __thread char *lost_notes[LOST_NOTES];
static __thread int nlost_notes;

static void note_lost_later(const char *name)
{
    char *p;

    if (nlost_notes < LOST_NOTES && (p = strdup(name)) != NULL)
        lost_notes[nlost_notes++] = p;
}

void dist__report_lost_notes(void)
{
    while (nlost_notes > 0) {
        char *p = lost_notes[--nlost_notes];
        dist__call_lost_handler(p);
        free(p);
    }
}

static int defer_wanted(const struct dist__obj *o)
{
    if (o->flags & DIST__MUTEX_DEFER_ON)
        return 1;
    if (o->flags & DIST__MUTEX_DEFER_OFF)
        return 0;
    return dist__deferred_release();
}

/* Whether c's release may go without waiting: the option, a kind that
 * can (a mutex), and the owner's last hold, so that no count but 0 is
 * to be believed before the reply. */
int dist__defer_ok(const struct dist__call *c)
{
    return !c->no_defer && c->o->kind->family == DIST__FAM_MUTEX &&
           c->mode == 0 && c->n[0] == 1 && c->n[1] == 0 && defer_wanted(c->o);
}

struct dist__defer *dist__defer_new(struct dist__call *c)
{
    struct dist__defer *d = calloc(1, sizeof *d);
    const char *owner;

    if (!d)
        return NULL;
    dist__state_ref(c->o->kind, c->o->st);
    d->st = c->o->st;
    d->kind = c->o->kind;
    d->lease_ms = c->o->lease_ms;
    d->gen = atomic_load(&dist__fork_gen);
    d->sent = dist__now_ms();
    d->robust = c->robust;
    owner = dist__owner(&d->owner_len);
    memcpy(d->owner, owner, d->owner_len + 1);
    d->owner_no = dist__thread_no();
    return d;
}

void dist__defer_free(struct dist__defer *d)
{
    dist__state_unref(d->kind, d->st);
    free(d);
}

/* What the release's reply says: {holds left, woken}, 0 left being the
 * only count an owner's last release leaves. */
static int defer_outcome(const redisReply *r, int status, long long *woken)
{
    long long left;

    if (status != 0 || !r)
        return DIST__DEFER_BROKEN;
    if (r->type == REDIS_REPLY_ERROR)
        return DIST__DEFER_NOTRUN; /* NOSCRIPT, MOVED, ASK, TRYAGAIN */
    if (dist__reply_int(r, 0, &left) != 0 ||
        dist__reply_int(r, 1, woken) != 0 || *woken < 0 ||
        (left != 0 && left != -1))
        return DIST__DEFER_BROKEN; /* cannot be: settled as unknown */
    return left == 0 ? DIST__DEFER_OK : DIST__DEFER_LOST;
}

/* The release's courtesy to waiters (the kind's after_release), now that
 * the reply says whom it reached.  The state's mu held. */
static void defer_courtesy(const struct dist__defer *d)
{
    struct dist__obj o = { .kind = d->kind, .st = d->st };
    struct dist__call c = { .o = &o, .woken = d->woken, .started = d->sent };

    if (d->kind->after_release)
        d->kind->after_release(&c);
}

/* The release may not have run: the renewal thread finishes it with the
 * kind's conditional release (on r, so that the owner's next call waits
 * for it).  The state's mu held. */
static void defer_hand_over(struct dist__defer *d, struct dist__rec *r)
{
    const unsigned long none[2] = { 0, 0 };
    struct dist__hold *h;

    if (r && r->unknown)
        return; /* one settle at a time; the lease ends it */
    h = r && r->h
            ? r->h
            : dist__hold_new(&d->kind->renewal, d->st->names, d->lease_ms);
    if (!h)
        return; /* out of memory: the lease ends it */
    if (!(r && r->h))
        h->owner_no = d->owner_no; /* the owner's, also when the renewal
                                     * thread read the reply */
    h->robust = d->robust;
    if (!r) {
        dist__renew_unknown(h, none, 0);
        if (dist__renew_remove(h)) /* the thread frees it when done */
            dist__hold_free(h);
        return;
    }
    r->h = h;
    r->reg = 0;
    r->unknown = 1;
    h->robust = d->robust;
    dist__renew_unknown(h, r->n, 0);
}

/* Acts on the outcome of d for an owner with no call behind it.  The
 * state's mu held. */
static void defer_act(struct dist__defer *d, struct dist__rec *r)
{
    /* on the renewal thread for an idle owner (dist__route_read_idle):
     * no courtesy (it is about the owner's next call, which may never
     * come), and a loss is reported by that thread */
    int idle = dist__route_reading_idle();

    if (d->outcome == DIST__DEFER_OK && !idle)
        defer_courtesy(d);
    else if (d->outcome == DIST__DEFER_LOST && idle)
        dist__renew_note_lost(d->st->names->name.p);
    else if (d->outcome == DIST__DEFER_LOST)
        note_lost_later(d->st->names->name.p);
    else if (d->outcome != DIST__DEFER_OK)
        defer_hand_over(d, r);
    if (r && r->n[0] + r->n[1] == 0 && !r->unknown)
        dist__rec_drop(d->st, r);
}

/* The link's handler of a deferred release's reply (dist__owed_fn): on
 * the owner's thread, in the middle of a call on that link, or on the
 * renewal thread for an idle owner. */
void dist__defer_done(void *arg, const redisReply *rep, int status)
{
    struct dist__defer *d = arg;
    struct dist__state *st = d->st;
    long long woken = 0;
    int outcome = defer_outcome(rep, status, &woken);
    struct dist__rec *r;

    pthread_mutex_lock(&st->mu);
    d->outcome = outcome;
    d->woken = woken;
    d->on = NULL;
    r = d->r;
    if (r && d->behind && d->gen == atomic_load(&dist__fork_gen)) {
        pthread_mutex_unlock(&st->mu);
        return; /* the acquire that followed acts on it */
    }
    if (r)
        r->pend = NULL;
    d->r = NULL;
    /* a child of fork() closes the parent's links unread: not ours */
    if (d->gen == atomic_load(&dist__fork_gen))
        defer_act(d, r);
    pthread_mutex_unlock(&st->mu);
    dist__defer_free(d);
}

/* The release was written: the owner has let go.  Its record stays, with
 * the reply owed, until the reply is read. */
int dist__defer_sent(struct dist__call *c, struct dist__defer *d)
{
    struct dist__state *st = c->o->st;
    struct dist__rec *r;

    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    d->on = c->on;
    d->r = r;
    if (r) {
        r->n[0] = 0;
        if (r->h)
            dist__renew_let_go(r->h);
        if (r->h && dist__renew_remove(r->h))
            dist__hold_free(r->h);
        r->h = NULL;
        r->reg = 0;
        r->pend = d;
    }
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* An acquire is about to go out while the owner's deferred release of the
 * same lock is still owed: on the same link it goes right behind it (no
 * wait for the release's reply), and this call acts on the outcome. */
void dist__go_behind(struct dist__call *c)
{
    struct dist__state *st = c->o->st;
    struct dist__rec *r;

    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    if (r && r->pend && r->pend->outcome == 0) {
        c->behind = r->pend;
        r->pend->behind = 1;
    }
    pthread_mutex_unlock(&st->mu);
}

/* After the acquire's first try: the release ahead of it is read (if its
 * link was not: the try went to another server), by until, the bound of
 * the first try (a command timeout from now, as before, ran a trylock on
 * to 2T), then acted on.  What has arrived is read also when until has
 * passed; a reply not read by then leaves the link broken and the
 * release's outcome unknown, settled below.  A release that did not run, or may not
 * have, left the old hold: an acquire that took the lock counted it (the
 * fix-up gives one back), one that failed leaves it to the renewal
 * thread, one that did not take it found it gone. */
void dist__behind_done(struct dist__call *c, int rc, uint64_t until)
{
    struct dist__defer *d = c->behind;
    struct dist__state *st = c->o->st;
    struct dist__rec *r;

    if (!d)
        return;
    c->behind = NULL;
    if (d->outcome == 0 && d->on)
        dist__link_settle(d->on, 0);
    if (d->outcome == 0 && d->on)
        dist__link_settle(d->on, dist__link_deadline(d->on, until));
    pthread_mutex_lock(&st->mu);
    r = d->r;
    if (r)
        r->pend = NULL;
    d->r = NULL;
    if (d->outcome == DIST__DEFER_OK)
        defer_courtesy(d);
    else if (d->outcome == DIST__DEFER_LOST)
        note_lost_later(st->names->name.p);
    else if (rc == 0 && c->taken && c->count == c->n[c->mode] + 2)
        c->fixup = 1;
    else if (rc != 0 && !c->unknown)
        defer_hand_over(d, r);
    pthread_mutex_unlock(&st->mu);
    dist__defer_free(d);
}
