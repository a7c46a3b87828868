/* internal.h: what the lock kinds and their engine share (holds, the
 * renewal thread) on top of the lower layers, and nothing exports.
 *
 * Layers are the folders of src/, each including only those below it
 * (tests/test_layers.sh checks it):
 *   base/     clocks, errors, settings, identity, fork hooks, counters
 *   net/      one connection to one server, TLS
 *   route/    which server a key lives on, Sentinel, Cluster (topo.h);
 *             calls that reach it (route.h, on topo.h); a lock's Redis
 *             names (names.h)
 *   engine/   the pub/sub thread (pubsub.h), holds and the renewal thread
 *             (this file), what every kind shares (engine.h: engine.c,
 *             call.c); in that order: the renewal thread (renew.c)
 *             includes this file, not engine.h, and sees a kind only
 *             through its struct dist__renewal
 *   kinds/    each kind's scripts and ops (kinds.h); the engine drives a
 *             kind only through its ops table, never by name
 *   api/      the public dist_* calls
 *
 * Lock order, outermost first: the mutex family's registry, one mutex
 * state's mu, the rwlock family's registry, one rwlock state's mu (all
 * engine.c), renewal registry (renew.c), pub/sub channels (pubsub.c),
 * config, topology (topo.c); the ranks of enum dist__fork_rank follow
 * it. */
#ifndef DIST_INTERNAL_H
#define DIST_INTERNAL_H

#include "distlock.h"
#include "route/names.h"
#include "pubsub.h"
#include "route/route.h"
#include "scripts.h"

/* ---- holds and the renewal thread (renew.c) ---------------------------- */

/* A renewal entry (one per held lock: 120 B, a 128 B chunk, see
 * docs/performance.md): a hold the watchdog keeps alive, a queued waiter whose
 * deadline it keeps fresh, or an outcome it settles.  Each renewal script
 * is batched with the same layout: KEYS are the entries' keys one after
 * another, ARGV[1] the lease or window in ms, then for each entry its owner
 * and how many keys it has; the reply has one integer per entry: 1 renewed,
 * 0 gone.  The owner fills the first block before handing the entry over
 * and never writes it after (the keys change only through
 * dist__renew_set_keys); the rest belongs to the registry mutex. */
struct dist__hold;

/* What the renewal thread asks of a hold's kind: its batched renewal
 * script, and the settle of an outcome left unknown (a kind's
 * struct dist__kind, engine.h, has one).  renew.c sees the kinds through
 * this alone, as the engine sees them through their ops. */
struct dist__renewal {
    int script;
    /* A conditional release of what h's owner may hold beyond h->n[].
     * 0 answered (*lost: the owner's holds were gone), -1 Redis did not
     * answer. */
    int (*settle)(struct dist__hold *h, int *lost);
};

struct dist__hold {
    const struct dist__renewal *kind; /* its kind's; NULL for a waiter */
    struct dist__names *names;
    uint64_t owner_no;            /* whose: its owner field is made from
                                     * it when a script needs it
                                     * (dist__hold_owner), not kept (64 B
                                     * per held lock) */
    const struct dist__buf *keys; /* NULL: just the lock's own name */
    /* 32 bits: every lease and setting is at most a day (an attribute's
     * lease, config.c's MAX_MS) */
    uint32_t lease_ms;  /* 0: watchdog */
    uint32_t renew_ms;  /* ARGV[1]; 0: the watchdog lease */
    uint32_t period_ms; /* how often; 0: a third of the watchdog */
    atomic_int lost;    /* found gone (set by the thread) */
    atomic_int let_go;  /* the owner let go of every hold the
                                     * entry stands for: no loss of it is
                                     * reported any more (written under the
                                     * registry mutex) */
    unsigned short nkeys;
    unsigned char renew_script; /* enum of scripts.h */
    unsigned char keys_owned;   /* keys are the entry's (a waiter's):
                                     * freed with it */
    /* registry mutex; the flags are bytes, not ints: an entry per held
     * lock (docs/performance.md) */
    unsigned char registered; /* renewed by the watchdog */
    unsigned char inflight;   /* part of a call under way */
    unsigned char orphan;     /* owner let go while in flight */
    unsigned char reporting;  /* reports of its loss not finished */
    unsigned char calling;    /* its report is decided: the lost
                                     * handler's call is under way */
    unsigned char unknown;    /* an outcome to settle: Redis may count
                                     * one hold of mode more than n[] */
    unsigned char robust;     /* with unknown: how the settle's
                                     * release treats a robust mutex's
                                     * record (DIST__ROBUST_*) */
    unsigned char mode;
    struct dist__hold *rprev, *rnext;
    uint64_t due;         /* next renewal */
    uint64_t valid_until; /* a hold: its lease runs at least until
                                     * then (monotonic ms), counted from when
                                     * the last acquire or renewal that
                                     * reached it was sent; 0: unknown */
    uint64_t safe_until;  /* valid_until less the safety margin:
                                     * past it with no newer renewal
                                     * acknowledged, the hold is lost (the
                                     * watch thread); 0: not watched */
    unsigned long n[2];
};

/* owner_no of a barrier's member, "<client id>:b<n>" (barrier.c): a
 * thread's is "<client id>:<thread number>" (dist__owner) */
#define DIST__OWNER_BARRIER (UINT64_C(1) << 63)
/* The longest owner field, with its NUL. */
#define DIST__OWNER_MAX     64
/* h's owner field into buf; its length. */
size_t dist__hold_owner(const struct dist__hold *h,
                        char buf[DIST__OWNER_MAX]);

struct dist__hold *dist__hold_new(const struct dist__renewal *k,
                                  struct dist__names *names,
                                  unsigned long lease_ms);
void dist__hold_free(struct dist__hold *h);
/* Registers h with the watchdog.  valid_until: see struct dist__hold (the
 * caller's acquire was sent then, plus the lease); a hold of a kind is
 * watched from then on: it is lost at valid_until less the safety margin
 * unless a renewal was acknowledged before. */
void dist__renew_add(struct dist__hold *h, uint64_t valid_until);
/* A newer acquire of a registered h was acknowledged (a reentrant lock):
 * its lease runs at least until valid_until, when that is later. */
void dist__renew_acked(struct dist__hold *h, uint64_t valid_until);
/* The safety margin of a hold with a lease of lease_ms: a hundredth of the
 * lease (the rates of this host's clock and the server's may differ) plus
 * DISTLOCK_LEASE_MARGIN_MS (a late wake-up, the handler, a holder that
 * stops), at most a third of the lease, so that a renewal sent a third of
 * the lease after the last one has a third of it to come back. */
unsigned long dist__safe_margin_ms(unsigned long lease_ms);
/* When h is surely still held (monotonic ms): its safe_until; 0 when it
 * was found lost, or is not watched. */
uint64_t dist__renew_safe_until(struct dist__hold *h);
/* Renews the calling thread's hold of names now, with kind k's renewal
 * script on keys (NULL: the name alone), for ms: on the condition that the
 * owner still holds it; by limit, the call's (link.h).  1 renewed, 0 the
 * owner holds nothing, -1 Redis did not answer. */
int dist__renew_one(const struct dist__renewal *k, struct dist__names *names,
                    const struct dist__buf *keys, int nkeys, unsigned long ms,
                    uint64_t limit);
/* Replaces the keys the renewal script gets for h (the caller keeps them
 * alive until the next call or until h is removed). */
void dist__renew_set_keys(struct dist__hold *h, const struct dist__buf *keys,
                          int nkeys);
/* Unregisters h; returns 1 when the caller frees it, 0 when the renewal
 * thread will (a call or a settle on it is under way). */
int dist__renew_remove(struct dist__hold *h);
/* Hands the renewal thread an outcome to settle: the owner holds n[] for
 * sure, Redis may count one hold of mode more (an acquire or release ran
 * but its reply never came back).  The kind's settle finishes it when
 * Redis answers.  With n[] all 0 the entry is no longer renewed. */
void dist__renew_unknown(struct dist__hold *h, const unsigned long n[2],
                         int mode);
/* A thread ended a call with a reply owed (dist__route_idle_mark): the
 * renewal thread reads it if the thread is still idle DIST__IDLE_READ_MS
 * later. */
void dist__renew_idle_watch(void);
/* For the owed replies' handler on the renewal thread: the hold of name
 * was lost; the lost handler hears of it once the read is done. */
void dist__renew_note_lost(const char *name);
/* The owner has let go of every hold h stands for (an unlock took its
 * count to 0, whatever the unlock returned): h is not renewed, and the
 * lost handler is not called for it from now on; a report of its loss
 * that the renewal thread has not made yet is cancelled.  Returns 0 when
 * no loss was found, 1 when its report was cancelled (the caller tells the
 * handler itself if the loss is its news, as an unlock that says EPERM
 * does), 2 when the report was made: one under way is waited for, so
 * that the handler has returned when the caller says EPERM.  The handler
 * must therefore not wait for a thread that is letting go. */
int dist__renew_let_go(struct dist__hold *h);
/* Waits (bounded) until h has nothing left to settle; EIO if it could not
 * be settled by then. */
int dist__renew_settle(struct dist__hold *h, uint64_t until_ms);
/* A queued waiter's presence (fair mutex, writer of a writer-preferring
 * rwlock): the renewal thread keeps its deadline fresh with waiter_renew
 * on keys (nkeys names derived from names: a writer's ZSET, or a fair
 * waiter's four, made here and kept with the entry)
 * while it waits, so only a waiter whose process died is dropped, within
 * one DISTLOCK_WAITER_MS window.  NULL when out of memory. */
struct dist__hold *dist__waiter_start(struct dist__names *names,
                                      const enum dist__nm *keys, int nkeys);
void dist__waiter_stop(struct dist__hold *w); /* NULL is fine */
/* Renews every hold now: a failover was seen, and the new master may have
 * an older lease than the last renewal set (renewals are not waited for
 * on replicas), or may have lost holds that should be reported. */
void dist__renew_all_now(void);
void dist__renew_shutdown(void);

void dist__renew_fork(int phase);

#endif
