/* release.c: the owner's standing before any call (what it holds once an
 * earlier unknown outcome is settled, and the handing over of an outcome
 * that stays unknown to the renewal thread), and the release of a hold.
 * The acquire is call.c's, what a hold taken needs afterwards repair.c's,
 * a release sent without waiting for its reply defer.c's. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "call_int.h"

/* ---- the owner's standing ------------------------------------------------- */

/* A new renewal entry for r.  The state's mu held. */
struct dist__hold *dist__rec_hold(struct dist__call *c, struct dist__rec *r)
{
    const struct dist__kind *k = c->o->kind;

    if (!r->h &&
        (r->h = dist__hold_new(&k->renewal, c->o->st->names,
                               c->o->lease_ms)) != NULL &&
        k->renew_keys)
        k->renew_keys(c->o->st, r, r->h);
    return r->h;
}

/* The renewal thread settled r's outcome: its entry goes unless the
 * watchdog still renews it.  The state's mu held. */
static void settled(struct dist__rec *r)
{
    r->unknown = 0;
    if (!r->reg && dist__renew_remove(r->h)) {
        dist__hold_free(r->h);
        r->h = NULL;
    } else if (!r->reg) {
        r->h = NULL;
    }
}

/* The owner has let go of every hold r stands for: the watchdog stops,
 * and the lost handler will not be called for them once the unlock has
 * returned, whatever it returned (under the preload shim's default
 * on_lease_lost = abort, a report after an unlock that said EIO aborted
 * a program for a lock it had let go).  Returns what dist__renew_let_go
 * does.  The state's mu held. */
int dist__let_go(struct dist__rec *r)
{
    if (!r->h)
        return 0;
    r->reg = 0;
    return dist__renew_let_go(r->h);
}

/* Before any call: the owner's standing, in c->n.  Waits for an earlier
 * unknown outcome to be settled first: for two command timeouts, or until
 * bound (monotonic ms; 0: none) when that is sooner.  *held is 1 for live
 * holds, 0 for none, -1 for holds that were lost (the record is
 * dropped). */
int dist__prepare_by(struct dist__call *c, int *held, uint64_t bound)
{
    struct dist__state *st = c->o->st;
    struct dist__rec *r;
    uint64_t until = 0;
    int rc;

    pthread_mutex_lock(&st->mu);
    while ((r = dist__rec_find(st)) != NULL && r->unknown) {
        struct dist__hold *h = r->h;
        pthread_mutex_unlock(&st->mu);
        if (!until) {
            until = dist__now_ms() + dist__timeout_ms() * 2;
            if (bound && bound < until)
                until = bound;
        }
        rc = dist__renew_settle(h, until);
        pthread_mutex_lock(&st->mu);
        if (rc != 0) {
            pthread_mutex_unlock(&st->mu);
            return rc;
        }
        settled(r);
    }
    c->n[0] = c->n[1] = 0;
    *held = 0;
    if (r && r->h && atomic_load(&r->h->lost))
        *held = r->n[0] + r->n[1] > 0 ? -1 : 0;
    else if (r && r->n[0] + r->n[1] > 0)
        *held = 1, c->n[0] = r->n[0], c->n[1] = r->n[1], c->wakes = r->wakes;
    /* a release's treatment of a robust record: a give-back (keep_set)
     * of an owner-dead hold puts the record back as it found it */
    if (*held == 1 && (c->unlocking || c->keep_set))
        c->robust = !r->robust         ? DIST__ROBUST_NONE
                    : !r->inconsistent ? DIST__ROBUST_CLEAN
                    : c->keep_set      ? DIST__ROBUST_BACK
                                       : DIST__ROBUST_LOST;
    if (r && *held == -1 && c->unlocking)
        c->told = dist__let_go(r);
    if (r && *held != 1 && !r->pend)
        dist__rec_drop(st, r);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

int dist__prepare(struct dist__call *c, int *held)
{
    return dist__prepare_by(c, held, 0);
}

/* Hands c's unknown outcome to the renewal thread: r's counts are what the
 * owner holds for sure.  The state's mu held. */
void dist__hand_over(struct dist__call *c, struct dist__rec *r)
{
    if (r->unknown)
        return; /* handed over already, and not settled yet */
    if (!dist__rec_hold(c, r))
        return; /* out of memory: the lease ends it */
    r->unknown = 1;
    if (r->n[0] + r->n[1] == 0)
        r->reg = 0; /* not renewed: see dist__renew_unknown */
    r->h->robust = c->robust;
    dist__renew_unknown(r->h, r->n, c->mode);
}

/* The end of a call: holds found lost go to the handler, and a reply
 * still owed is read by the renewal thread if this one stays idle. */
void dist__call_end(void)
{
    dist__report_lost_notes();
    if (dist__route_idle_mark())
        dist__renew_idle_watch();
}

/* ---- release ----------------------------------------------------------------- */

/* An unlock found its hold lost: the lost handler's report is made
 * before the unlock returns, once: here, unless the renewal thread made it
 * already (told 2, from let_go).  EPERM. */
static int lost_before_unlock(struct dist__call *c, int told)
{
    if (told != 2)
        dist__call_lost_handler(name_of(c));
    return dist__err_lock(EPERM, c->o->kind->noun, name_of(c),
                          " was lost (its lease ran out or it was "
                          "forced) before this unlock");
}

/* Gives back one hold of c->mode, which the owner has. */
int dist__release_held(struct dist__call *c)
{
    const struct dist__kind *k = c->o->kind;
    struct dist__state *st = c->o->st;
    struct dist__rec *r;
    struct dist__why why;
    uint64_t outer = c->limit;
    int rc, told = 0;

    struct dist__defer *d = dist__defer_ok(c) ? dist__defer_new(c) : NULL;

    c->started = dist__now_ms();
    c->unknown = 0;
    c->defer_fn = d ? dist__defer_done : NULL;
    c->defer_arg = d;
    c->limit = sooner(outer, call_cap(c));
    rc = k->release(c);
    c->limit = outer;
    if (d && rc == 0 && c->deferred)
        return dist__defer_sent(c, d);
    if (d)
        dist__defer_free(d); /* sent the usual way after all */
    /* EIO: the reply was lost (c->unknown), or Redis refused the release
     * (READONLY from a master being demoted, NOREPLICAS, an error
     * reply).  Either way the thread lets go and the renewal thread
     * finishes the release.  Keeping the hold after a refusal, as this
     * once did, broke the promise of unlock(3): a caller that took EIO as
     * "let go" never unlocked again, and the watchdog renewed the hold for
     * ever (the Sentinel torture run: every other worker hung on it, and a
     * condition waiter's next lock counted two holds). */
    if (rc == EIO) /* kept for the message below */
        dist__why_get(&why);
    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    if (rc == 0 && k->after_release)
        k->after_release(c);
    if (r && rc == 0) {
        r->n[c->mode] = c->count;
    } else if (r && rc == EIO) {
        /* given up locally either way; the renewal thread finishes the
         * release when Redis answers again */
        r->n[c->mode] = c->keep_set && c->keep < r->n[c->mode]
                            ? c->keep
                            : r->n[c->mode] - 1;
        dist__hand_over(c, r);
    } else if (r) {
        r->n[0] = r->n[1] = 0; /* lost */
    }
    if (c->unlocking && r && r->n[0] + r->n[1] == 0)
        told = dist__let_go(r);
    if (r)
        dist__rec_tidy(st);
    pthread_mutex_unlock(&st->mu);
    if (rc == EIO && why.lock == name_of(c))
        return dist__err_as(EIO, &why,
                            "%s; this thread has let go of it, and the "
                            "release is finished when Redis answers, or the "
                            "lease ends it",
                            why.text);
    if (rc == EIO)
        return dist__err_lock(EIO, k->noun, name_of(c),
                              ": the release failed (%s); this thread has "
                              "let go of it, and the release is finished "
                              "when Redis answers, or the lease ends it",
                              why.text);
    if (rc == EPERM)
        return lost_before_unlock(c, told);
    return rc;
}

/* An unlock that could not run because an earlier call's outcome is still
 * unknown (rc, with the text): EPERM when the thread holds nothing (that
 * outcome is no hold of its own); else the thread lets go of one hold all the
 * same, as after any unlock that said EIO (a caller that took EIO for
 * "let go" never unlocked again, and the watchdog renewed the hold, and
 * reported it lost, for ever).  Nothing releases that hold in Redis: once
 * the owner holds none, it is no longer renewed and its lease ends it.  A
 * hold found lost meanwhile is EPERM, its report made before the unlock
 * returns, as in release. */
static __attribute__((noinline)) int let_go_unsettled(struct dist__call *c,
                                                      int rc)
{
    const struct dist__kind *k = c->o->kind;
    struct dist__state *st = c->o->st;
    struct dist__rec *r;
    struct dist__why why;
    int mode, lost, told = 0;

    dist__why_get(&why);
    pthread_mutex_lock(&st->mu);
    r = dist__rec_find(st);
    if (!r || r->n[0] + r->n[1] == 0) {
        /* an outcome still unknown is no hold of the thread's */
        pthread_mutex_unlock(&st->mu);
        return dist__err_lock(EPERM, k->noun, name_of(c),
                              " is not held by this thread");
    }
    lost = r->h && atomic_load(&r->h->lost);
    mode = r->n[1] > 0; /* a write hold goes first */
    if (lost)
        r->n[0] = r->n[1] = 0;
    else
        r->n[mode]--;
    if (r->n[0] + r->n[1] == 0)
        told = dist__let_go(r);
    pthread_mutex_unlock(&st->mu);
    if (lost)
        return lost_before_unlock(c, told);
    return dist__err_as(rc, &why,
                        "%s; this thread has let go of it, and the lease "
                        "ends what Redis still holds of it",
                        why.text);
}

static int release(struct dist__obj *o, int may_defer)
{
    const struct dist__kind *k = o->kind;
    struct dist__call c = { .o = o, .no_defer = !may_defer, .unlocking = 1 };
    int rc, held;

    if ((rc = dist__prepare(&c, &held)) != 0)
        return let_go_unsettled(&c, rc);
    if (held == -1) /* the renewal thread found it lost */
        return lost_before_unlock(&c, c.told);
    if (held == 0)
        return dist__err_lock(EPERM, k->noun, name_of(&c),
                              " is not held by this thread");
    c.mode = c.n[1] > 0; /* a write hold goes first */
    rc = dist__release_held(&c);
    dist__call_end();
    return rc;
}

int dist__release(struct dist__obj *o)
{
    return release(o, 1);
}

int dist__release_waiting(struct dist__obj *o)
{
    return release(o, 0);
}
