/* internal.h: what the lock kinds and their engine share (holds, the
 * renewal thread) on top of the lower layers, and nothing exports.
 *
 * Layers, each including only those below it:
 *   base.h    clocks, errors, settings, identity, fork hooks
 *   link.h    one connection to one server
 *   route.h   which server a key lives on, and calls that reach it
 *   names.h, pubsub.h   a lock's Redis names; the pub/sub thread
 *   internal.h          holds and renewal; the kinds (mutex.c, rwlock.c)
 *
 * Lock order, outermost first: lock list (mutex.c), one lock's mu,
 * rwlock list (rwlock.c), one rwlock's mu, renewal registry (renew.c),
 * pub/sub channels (pubsub.c), config, topology (topo.c); the ranks of
 * enum dist__fork_rank follow it. */
#ifndef DIST_INTERNAL_H
#define DIST_INTERNAL_H

#include "distlock.h"
#include "names.h"
#include "pubsub.h"
#include "route.h"
#include "scripts.h"

/* fork hooks of the kinds (registered by ident.c for now) */
void dist__locks_fork(int phase);
void dist__rwlocks_fork(int phase);

/* ---- holds and the renewal thread (renew.c) ---------------------------- */

/* What the renewal thread does for a registered entry.  Each kind has one
 * batched script with the same layout: KEYS are the entries' keys one
 * after another, ARGV[1] the lease or window in ms, then for each entry its
 * owner and how many keys it has.  The reply has one integer per entry:
 * 1 renewed, 0 gone. */
enum dist__kind {
    DIST__K_MUTEX,     /* a mutex hold: keys { N } */
    DIST__K_RWLOCK,    /* a read-write hold: keys { N, its read-hold keys } */
    DIST__K_WAITER,    /* a live waiter's deadline: keys { the deadline ZSET } */
    DIST__K_COUNT
};

struct dist__hold {
    struct dist__hold *next;        /* the lock's list (lock's mu) */
    struct dist__hold *rprev, *rnext; /* renewal registry (registry mu) */
    struct dist__names *names;
    uint64_t thread_no;
    unsigned long gen;
    unsigned long count;            /* holds the owner believes it has */
    uint64_t token;
    unsigned long lease_ms;         /* 0: watchdog */
    uint64_t lease_end;             /* explicit lease: gone on the server
                                     * by then for sure (monotonic ms) */
    atomic_int lost;
    /* registry state, under the registry mutex */
    int registered;                 /* renewed by the watchdog */
    int inflight;                   /* part of a call under way */
    int orphan;                     /* owner let go while in flight */
    int doubt;                      /* a release may be owed: see renew.c */
    char owner[64];
    size_t owner_len;
    /* renewal, set before dist__renew_add; keys may change later only
     * through dist__renew_set_keys */
    int kind;                       /* enum dist__kind */
    int fair;                       /* a fair mutex's hold: settled with
                                     * fair_unlock, which wakes the head */
    unsigned long renew_ms;         /* ARGV[1]; 0: the watchdog lease */
    unsigned long period_ms;        /* how often; 0: a third of the watchdog */
    const struct dist__buf *keys;   /* NULL: just the lock's own name */
    int nkeys;
    uint64_t due;                   /* next renewal (registry mu) */
};

struct dist__hold *dist__hold_new(struct dist__names *names, unsigned long lease_ms);
void dist__hold_free(struct dist__hold *h);
void dist__renew_add(struct dist__hold *h);
/* Replaces the keys the renewal script gets for h (the caller keeps them
 * alive until the next call or until h is removed). */
void dist__renew_set_keys(struct dist__hold *h, const struct dist__buf *keys,
                          int nkeys);
/* Unregisters h; returns 1 when the caller frees it, 0 when the renewal
 * thread will (it was part of a call under way). */
int dist__renew_remove(struct dist__hold *h);
/* Hands the renewal thread a release that may be owed on Redis (the reply
 * of an acquire or release was lost): it finishes it when Redis answers. */
void dist__renew_doubt(struct dist__hold *h);
/* Waits (bounded) until h has no doubt left; EIO if it could not be settled. */
int dist__renew_settle(struct dist__hold *h, uint64_t until_ms);
/* A queued waiter's presence (fair mutex, writer of a writer-preferring
 * rwlock): the renewal thread keeps its deadline in the ZSET zset (one of
 * names' keys) fresh while it waits, so only a waiter whose process died is
 * dropped, within one DISTLOCK_WAITER_MS window.  NULL when out of memory. */
struct dist__hold *dist__waiter_start(struct dist__names *names,
                                      const struct dist__buf *zset);
void dist__waiter_stop(struct dist__hold *w);   /* NULL is fine */
/* Renews every hold now: a failover was seen, and the new master may have
 * an older lease than the last renewal set (renewals are not waited for
 * on replicas), or may have lost holds that should be reported. */
void dist__renew_all_now(void);
void dist__renew_shutdown(void);

void dist__renew_fork(int phase);

#endif
