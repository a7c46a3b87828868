/* pubsub.h: the pub/sub thread (pubsub.c), one per process: it subscribes
 * each lock channel once however many threads wait on it, on links route.c
 * confirms, and turns release messages into wake-ups of local waiters. */
#ifndef DIST_PUBSUB_H
#define DIST_PUBSUB_H

#include "base/base.h"

struct dist__chan;
struct dist__chan *dist__sub_get(const struct dist__buf *chan);
void dist__sub_put(struct dist__chan *ch);
/* Whether this process's subscriber connection listens on chan, and how
 * many local threads wait on it. */
int dist__sub_listening(const struct dist__buf *chan, int *waiters);
/* Waits until the channel is subscribed, or until_ms (monotonic). */
void dist__sub_wait_ready(struct dist__chan *ch, uint64_t until_ms);
/* A release message wakes one waiting thread; a wake-all message ('1')
 * wakes every thread waiting on the channel, but a woken thread that goes
 * back to sleep at once may take the wake-up of one that has not run yet.  A waiter that can be refused for a reason that
 * is not the others' (a reader a waiting writer keeps out) would miss it.
 * So a waiter reads the count of wake-all messages before each try and
 * sleeps with dist__sub_wait_since, which returns on a release message
 * for it, as soon as that count moved, or at until_ms (monotonic): 0
 * woken, ETIMEDOUT. */
unsigned long dist__sub_gen(struct dist__chan *ch);
/* 1 when ch was subscribed before us (dist__now_us) and no message for it
 * has come since: a try sent at us that found the lock busy would be told
 * of any release after it, so a waiter may sleep on its answer without
 * trying again.  0 when it may have missed one (not subscribed yet, just
 * subscribed, a message heard since, a node that also listens on plain
 * SUBSCRIBE, whose confirmation is not tracked). */
int dist__sub_quiet_since(struct dist__chan *ch, uint64_t us);
int dist__sub_wait_since(struct dist__chan *ch, unsigned long gen,
                         uint64_t until_ms);
/* dist__sub_wait_since for the waits POSIX lets a signal interrupt and
 * makes cancellation points: the semaphore waits (both flags) and the
 * condition waits (DIST__SUB_CANCEL alone: POSIX has no EINTR for them, a
 * handler that ran only ends one sleep).  intr: DIST__SUB_EINTR,
 * a signal handler that ran on the thread while it slept ends the wait
 * with EINTR (a wake-up that came too is left for the next look);
 * DIST__SUB_CANCEL, a cancel request acts in the sleep (only there: the
 * caller holds nothing of the channel's then but its reference, which its
 * own cleanup handler gives back).  0 woken, ETIMEDOUT, EINTR. */
#define DIST__SUB_EINTR  1
#define DIST__SUB_CANCEL 2
int dist__sub_wait_intr(struct dist__chan *ch, unsigned long gen,
                        uint64_t until_ms, int intr);
/* dist__sub_wait_ready as a cancellation point when intr has
 * DIST__SUB_CANCEL (a condition wait's first sleep); DIST__SUB_EINTR is
 * not heeded there. */
void dist__sub_wait_ready_intr(struct dist__chan *ch, uint64_t until_ms,
                               int intr);
/* A fair lock's release may grant the lock to the waiter at the head of
 * its queue, and tell it on the waiter's own channel (prelude_grant.lua).
 * dist__sub_grant_take: 1 with the grant's fencing token and lease (ms)
 * when one was heard for ch and not taken yet, taking it (and the
 * wake-up that came with it); else 0.  dist__sub_spend: a grant of token
 * (or an older one) was taken otherwise (a try that found the lock its
 * own) or passed on (a cancel): its message, if it is still on its way,
 * is ignored; _name: the same by the channel's name, if it is still in
 * the table. */
int dist__sub_grant_take(struct dist__chan *ch, uint64_t *token,
                         unsigned long *lease);
void dist__sub_spend(struct dist__chan *ch, uint64_t token);
void dist__sub_spend_name(const struct dist__buf *chan, uint64_t token);
/* Wakes every waiting thread of every channel, as a wake-all message
 * would (dist__abandon_waits). */
void dist__sub_wake_all(void);
void dist__pubsub_shutdown(void);

#endif
