/* call_int.h: what the files of one lock call share, and nothing else
 * includes: call.c (the acquire: tries, the wait, the acquire ladder),
 * release.c (the owner's standing before a call, and the release),
 * repair.c (what a hold taken needs
 * afterwards: replica sync, giving back what a failed call took, a
 * surplus shed) and defer.c (a release sent without waiting for its
 * reply, and the acquire that goes right behind it). */
#ifndef DIST_CALL_INT_H
#define DIST_CALL_INT_H

#include "engine.h"

static inline const char *name_of(const struct dist__call *c)
{
    return c->o->st->names->name.p;
}

/* When a call that began at c->started must have ended: the command
 * timeout later.  started is the clock cut down to the millisecond (as a
 * lease's start must be), so one more keeps the call from giving up
 * before the whole timeout has passed. */
static inline uint64_t call_cap(const struct dist__call *c)
{
    return c->started + dist__timeout_ms() + 1;
}

/* The sooner of two limits (link.h; 0: none). */
static inline uint64_t sooner(uint64_t limit, uint64_t until)
{
    return limit && limit < until ? limit : until;
}

/* At the end of a call: holds found lost go to the handler, and a reply
 * still owed is read by the renewal thread if this one stays idle. */
void dist__call_end(void);

/* ---- release.c ------------------------------------------------------------ */

/* The owner's standing, in c->n, once an earlier unknown outcome is
 * settled (two command timeouts at most): *held 1 for live holds, 0 for
 * none, -1 for holds that were lost (the record is dropped). */
int dist__prepare(struct dist__call *c, int *held);
/* The same, waiting for the settle until bound (monotonic ms; 0: none)
 * when that is sooner. */
int dist__prepare_by(struct dist__call *c, int *held, uint64_t bound);
/* Hands c's unknown outcome to the renewal thread: r's counts are what the
 * owner holds for sure.  The state's mu held. */
void dist__hand_over(struct dist__call *c, struct dist__rec *r);
/* r's renewal entry, made if it has none (NULL: out of memory).  The
 * state's mu held. */
struct dist__hold *dist__rec_hold(struct dist__call *c, struct dist__rec *r);
/* The owner has let go of every hold r stands for (see release.c).  The
 * state's mu held. */
int dist__let_go(struct dist__rec *r);
/* Gives back one hold of c->mode, which the owner has (deferred when
 * defer.c says it may be). */
int dist__release_held(struct dist__call *c);

/* ---- repair.c ------------------------------------------------------------- */

/* After a hold was recorded: its copy on a replica (see DIST_ENOREPLICA),
 * else it is given back; DIST__EDEPOSED and DIST__EATTACHING for the
 * acquire ladder to try again. */
int dist__replica_sync(struct dist__call *c);
/* A fresh hold the server counts more than once: the surplus goes back,
 * and the hold draws a new fencing token. */
int dist__shed_surplus(struct dist__call *c);
/* An acquire counted a hold whose deferred release did not run: one
 * given back. */
void dist__give_back_one(struct dist__obj *o);

/* ---- defer.c -------------------------------------------------------------- */

/* Whether c's release may go without waiting for its reply. */
int dist__defer_ok(const struct dist__call *c);
struct dist__defer *dist__defer_new(struct dist__call *c);
void dist__defer_free(struct dist__defer *d);
/* The link's handler of a deferred release's reply (dist__owed_fn). */
void dist__defer_done(void *arg, const redisReply *rep, int status);
/* The release was written: the owner has let go (0). */
int dist__defer_sent(struct dist__call *c, struct dist__defer *d);
/* Before and after an acquire's first try: an owner's deferred release
 * of the same lock still owed is acted on by this call, its reply read
 * by until (monotonic ms; 0: a command timeout from then). */
void dist__go_behind(struct dist__call *c);
void dist__behind_done(struct dist__call *c, int rc, uint64_t until);
/* At the end of a call: holds found lost while a reply was read in its
 * middle go to the lost handler. */
void dist__report_lost_notes(void);

#endif
