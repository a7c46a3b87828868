/* repair.c: what a hold a lock call took needs afterwards: its copy on a
 * replica (replica sync, else it is given back), the holds of a call that
 * failed after all given back, and a surplus the server counts shed, with
 * a new fencing token.  The call itself is call.c's (call_int.h). */
#include <stdio.h>

#include "call_int.h"
#include "base/stats.h"

#define MAX_SURPLUS 8 /* resurrected holds of ours given back at once */

/* Gives back c's holds above keep, one release each: what an acquire took
 * when the call fails after all (keep: the owner's count before it), or
 * the surplus of a fresh hold the server counts more than once (keep: 1).
 * The server's count is what the acquire adopted, and it can exceed one
 * more than the owner had: a failover may bring back a hold of ours whose
 * release the new master never saw.  Giving back one hold only left the
 * owner with a hold it never asked for, which it never unlocked (the
 * Sentinel torture run: a failed lock left the thread holding the mutex,
 * and every later lock of its was a reentry).  A release refused or
 * unanswered sets the owner's count to keep at once and hands the outcome
 * to the renewal thread (release_held), which gives one more hold back
 * when Redis answers; anything left above that is renewed for nobody and
 * ends with its lease.  Stopped early (an earlier outcome not settled in
 * time, more surplus than MAX_SURPLUS), the count is set to keep the same
 * way. */
static __attribute__((noinline)) void give_back_to(struct dist__call *c,
                                                   unsigned long keep)
{
    struct dist__call back = {
        .o = c->o, .mode = c->mode, .keep_set = 1, .keep = keep
    };
    struct dist__rec *r;
    int held, i;

    for (i = 0; i <= MAX_SURPLUS; i++)
        if (dist__prepare(&back, &held) != 0 || held != 1 ||
            back.n[back.mode] <= keep || dist__release_held(&back) != 0)
            break;
    pthread_mutex_lock(&c->o->st->mu);
    r = dist__rec_find(c->o->st);
    if (r && r->n[c->mode] > keep && !r->unknown &&
        !(r->h && atomic_load(&r->h->lost))) {
        r->n[c->mode] = keep;
        dist__hand_over(&back, r);
    }
    pthread_mutex_unlock(&c->o->st->mu);
}

/* Gives back what c's acquire took, down to the owner's count before the
 * call; nothing, when the acquire found the earlier holds lost.  A
 * release refused (a master being demoted answers READONLY until the map
 * moves on) goes to the renewal thread as an unknown outcome, which it
 * settles with the conditional release (release_held); this thread's next
 * acquire waits for that.  Dropping the count alone would leave the hold
 * on the server, and the next acquire would find it there and count one
 * hold too many. */
static __attribute__((noinline)) void give_back(struct dist__call *c)
{
    /* a take that replaced the earlier hold consumed that one */
    give_back_to(c, c->lost || c->replaced ? 0 : c->n[c->mode]);
}

/* A new hold is only as safe as its copy on a replica: without one, it is
 * given back (see DIST_ENOREPLICA). */
__attribute__((noinline)) int dist__replica_sync(struct dist__call *c)
{
    struct dist__addr now;
    struct dist__why why;
    int rc;

    rc = dist__route_wait_replicas(c->on, dist__replica_wait_ms(), name_of(c),
                                   &now);
    if (rc == 0)
        return 0;
    dist__stat_add(DIST__ST_NOREPLICA, 1);
    dist__why_get(&why);
    /* on a deposed master too, while the map still points there: it is a
     * master until the sentinels demote it, and the hold would block its
     * other clients until then */
    give_back(c);
    if (rc == DIST__EDEPOSED) {
        dist__route_adopt(&now);
        return dist__err_as(EIO, &why, "%s", why.text), DIST__EDEPOSED;
    }
    if (rc == DIST__EATTACHING)
        return dist__err_as(DIST_ENOREPLICA, &why, "%s", why.text),
               DIST__EATTACHING;
    if (rc == DIST_ENOREPLICA)
        return dist__err_as(rc, &why, "%s", why.text);
    return dist__err_as(EIO, &why, "%s; the hold is given back", why.text);
}

/* The token of a hold whose surplus was shed is the counter's value, which
 * an earlier hold of this owner may have shown already (the acquire took
 * it for a reentry): a guarded resource would see one token for two
 * sections.  It draws a new one, as a new hold does (a counter that grows
 * by more than one is fine: tokens only need to grow), and a replica has
 * it before it is shown when replica sync is on. */
static __attribute__((noinline)) int fresh_token(struct dist__call *c)
{
    static const enum dist__nm token_key[] = { DIST__N_TOKEN };
    struct dist__link *on = NULL;
    struct dist__addr now;
    struct dist__room room;
    struct dist__buf key;
    struct dist__rec *r;
    redisReply *rep = NULL;
    long long t = 0;
    char why[256];
    int rc;

    rc = dist__names_keys(c->o->st->names, token_key, 1, &key, &room);
    if (rc != 0)
        dist__err(ENOMEM, "out of memory");
    else
        rc = dist__route_eval(c->limit, DIST__S_TOKEN_DRAW, 1, &key, 1, &rep,
                              &on);
    dist__room_done(&room);
    if (rc != 0)
        snprintf(why, sizeof why, "%s", dist_last_error());
    else if (rep->type == REDIS_REPLY_INTEGER && rep->integer > 0)
        t = rep->integer;
    else
        snprintf(why, sizeof why, "token_draw answered %.200s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "no number");
    freeReplyObject(rep);
    if (t > 0 && dist__replica_wait_ms() > 0 &&
        dist__route_wait_replicas(on, dist__replica_wait_ms(), name_of(c),
                                  &now) != 0) {
        snprintf(why, sizeof why, "%s", dist_last_error());
        t = 0;
    }
    if (t <= 0)
        return dist__err_lock(
            EIO, c->o->kind->noun, name_of(c),
            ": a hold counted twice needs a new fencing token, and none "
            "could be drawn (%s); the hold is given back",
            why);
    pthread_mutex_lock(&c->o->st->mu);
    if ((r = dist__rec_find(c->o->st)) != NULL)
        r->token = (uint64_t)t;
    pthread_mutex_unlock(&c->o->st->mu);
    return 0;
}

/* A fresh hold that the server counts more than once: an acquire whose
 * reply was lost is probed and run again, and a late copy of the first
 * (a slow path delivers it after the client gave up on it) ran between
 * the probe and the second; or a release of ours was undone since (a
 * failover promoted a replica it had not reached yet: releases are not
 * waited for).  The surplus is given back now, down to the one hold this
 * call took; else the owner's last unlock would leave the lock held,
 * renewed for it while it believes it free.  The hold draws a new fencing
 * token (fresh_token; releasing it all and taking it anew instead made
 * timed calls overrun their deadlines under faults).  A semaphore's count
 * is its permits: not for them.  Returns EIO, and says why, when the hold
 * is gone after all (a server that answered a give-back with "none
 * left"), or when no new token could be drawn (the hold is given back). */
__attribute__((noinline)) int dist__shed_surplus(struct dist__call *c)
{
    struct dist__rec *r;
    int held;

    if (c->o->kind->family == DIST__FAM_SEM)
        return 0;
    give_back_to(c, 1);
    pthread_mutex_lock(&c->o->st->mu);
    r = dist__rec_find(c->o->st);
    held = r && r->n[0] + r->n[1] > 0;
    pthread_mutex_unlock(&c->o->st->mu);
    if (!held)
        return dist__err_lock(EIO, c->o->kind->noun, name_of(c),
                              ": giving back a hold counted twice released "
                              "the last one: the lock is not held");
    /* a read hold has no token */
    if ((c->o->kind->family == DIST__FAM_MUTEX || c->mode == 1) &&
        fresh_token(c) != 0) {
        give_back(c);
        return EIO;
    }
    return 0;
}

/* An acquire counted a hold whose deferred release did not run: the
 * owner gives that one back now (its count in Redis is one too many). */
__attribute__((noinline)) void dist__give_back_one(struct dist__obj *o)
{
    struct dist__call back = { .o = o };
    int held;

    if (dist__prepare(&back, &held) == 0 && held == 1 && back.n[0] > 1)
        dist__release_held(&back);
}
