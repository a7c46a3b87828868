/*
 * distlock: distributed locks with the shape of pthread_mutex_t, backed by Redis.
 *
 * Every call returns 0 or a positive errno value (never -1; EINTR only from
 * the semaphore waits, as sem_wait) and leaves errno alone.  No call is a
 * cancellation point but the condition and semaphore waits: they act on a
 * cancel request as they begin (nothing changed yet) and while they sleep
 * (a condition wait takes its mutex back before the cleanup handlers run; a
 * semaphore wait never goes with a permit taken); a request made while
 * another call runs acts at the caller's next cancellation point.  When a
 * call fails, dist_last_error() gives a readable reason for the calling
 * thread.  The data kept in Redis is the layout of Redisson's RLock, so a
 * Java service and a C program can share one lock.
 */
#ifndef DISTLOCK_H
#define DISTLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define DIST_EXPORT __attribute__((visibility("default")))
#else
#define DIST_EXPORT
#endif

#define DIST_VERSION_MAJOR 0
#define DIST_VERSION_MINOR 1
#define DIST_VERSION_PATCH 0
#define DIST_VERSION_HEX                                                     \
    ((DIST_VERSION_MAJOR << 16) | (DIST_VERSION_MINOR << 8) |                \
     DIST_VERSION_PATCH)

/* Longest lock name accepted, in bytes (names are any bytes but NUL). */
#define DIST_NAME_MAX 4096

/* ------------------------------------------------------------------------ */
/* Library set-up                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Settings are read from the environment at first use:
 *   DISTLOCK_URL          redis://[user:password@]host[:port][/db]
 *                         unix://[user:password@]/path/to/socket[?db=N]
 *                         redis-sentinel://[user:password@]host:port[,host:port...]/MASTER[?db=N]
 *                         redis-cluster://[user:password@]host:port[,host:port...]
 *                         (default redis://127.0.0.1:6379; docs/deployment.md
 *                         "Sentinel and Cluster" says what each guarantees)
 *   DISTLOCK_WATCHDOG_MS  lease of a lock taken without an explicit lease;
 *                         the renewal thread renews it every third of that
 *                         (default 30000, at least 300)
 *   DISTLOCK_TIMEOUT_MS   connect timeout and command timeout (default 2000)
 *   DISTLOCK_WAITER_MS    how long a queued waiter (fair mutex, writer of a
 *                         writer-preferring rwlock) stays queued after its
 *                         process stops refreshing it, e.g. because it died
 *                         (default 5000, at least 300)
 *   DISTLOCK_REPLICA_WAIT_MS  after a lock is taken on a master that has
 *                         replicas, how long to wait for one of them to
 *                         acknowledge it (WAIT); none in time gives
 *                         DIST_ENOREPLICA and the lock is not taken
 *                         (default 1000; 0 turns the check off)
 *   DISTLOCK_LEASE_MARGIN_MS  the fixed part of a hold's safety margin: a
 *                         hold is declared lost (lost handler, EPERM from
 *                         unlock and dist_mutex_lease_left) this long plus a
 *                         hundredth of its lease before the server can let
 *                         it go, unless a renewal was acknowledged by then
 *                         (default 200; the margin is at most a third of
 *                         the lease)
 *   DISTLOCK_KEY_GRACE_MS  how long the keys a lock leaves beside it (its
 *                         fencing counter, a robust mutex's record) outlive
 *                         its lease once the name is no longer locked; a
 *                         counter that expired restarts from the server's
 *                         clock, still above every earlier token (default
 *                         86400000, a day; 0 keeps them for ever, which a
 *                         fleet that shares tokens with Redisson's
 *                         RFencedLock needs: see distlock(7))
 * The setters below override them and may be called at any time; they take
 * effect for connections opened afterwards (open ones are replaced at their
 * next use).  They return EINVAL for a malformed value, ENOMEM.
 */
DIST_EXPORT int dist_set_url(const char *url);
DIST_EXPORT int dist_set_watchdog_ms(unsigned long ms);
DIST_EXPORT int dist_set_timeout_ms(unsigned long ms);
DIST_EXPORT int dist_set_waiter_ms(unsigned long ms);
DIST_EXPORT int dist_set_replica_wait_ms(unsigned long ms);
DIST_EXPORT int dist_set_lease_margin_ms(unsigned long ms);
DIST_EXPORT int dist_set_key_grace_ms(unsigned long ms);

/* Returned by the calls that take a lock (lock, trylock, timedlock, rdlock,
 * wrlock and their try/timed forms) when the master has replicas and none of
 * them acknowledged the new hold within DISTLOCK_REPLICA_WAIT_MS: a failover
 * now would lose it, so it was given back.  Nothing is held; trying again
 * is safe.  dist_last_error() says how many replicas there were. */
#define DIST_ENOREPLICA ENOLINK

/* Called, from the library's renewal or watch thread or from the thread
 * that finds out, when a lock this process held is found lost (forced, the
 * server lost its data, or no renewal was acknowledged in time).  A
 * watchdog hold whose renewals go unanswered is declared lost at its
 * safe-until bound, before the server can let it go (see
 * dist_mutex_lease_left).  name is the lock's name, valid only during the
 * call.  The handler must not call back into distlock for the same lock.
 * fn may be NULL to remove the handler. */
typedef void (*dist_lost_fn)(const char *name, void *arg);
DIST_EXPORT int dist_set_lost_handler(dist_lost_fn fn, void *arg);

/* This thread's last failure as text; never NULL, "" when there is none.
 * The string belongs to the library and stays valid until the thread's next
 * distlock call. */
DIST_EXPORT const char *dist_last_error(void);

/* Stops the renewal and pub/sub threads and closes the calling thread's
 * connection.  Locks still held are no longer renewed and expire after their
 * lease.  Idempotent; the library starts again on its next use. */
DIST_EXPORT void dist_shutdown(void);

/* ------------------------------------------------------------------------ */
/* Mutex                                                                    */
/* ------------------------------------------------------------------------ */

#define DIST_MUTEX_RECURSIVE 1 /* default: n locks need n unlocks */
#define DIST_MUTEX_ERRORCHECK                                                \
    2 /* relock by the owner gives EDEADLK
                                   * (trylock: EBUSY) */

/* dist_mutexattr_setrobust: what a holder that does not release the lock
 * cleanly (it died, its lease ran out, its hold was forced) leaves. */
#define DIST_MUTEX_STALLED 0 /* default: nothing; the lease frees it */
#define DIST_MUTEX_ROBUST  1 /* the next holder gets EOWNERDEAD */

#ifndef EOWNERDEAD
#define EOWNERDEAD 130
#endif
#ifndef ENOTRECOVERABLE
#define ENOTRECOVERABLE 131
#endif

struct dist_mutexattr {
    int __type;
    int __flags;
    unsigned long __lease_ms;
    unsigned long __reserved[2];
};

/* The caller owns the object (static, automatic or a struct member).  Its
 * fields are private.  An object set with DIST_MUTEX_INITIALIZER keeps a
 * pointer to the name, which must outlive it; dist_mutex_init copies it. */
struct dist_mutex {
    const char *__name;
    void *__impl;
    unsigned long __reserved[2];
};

/* A named object's fields (dist_mutex_t, dist_rwlock_t, dist_cond_t share
 * them): the name, no state yet, nothing reserved. */
#define DIST__NAMED_INITIALIZER(name)                                        \
    {                                                                        \
        (name), 0,                                                           \
        {                                                                    \
            0, 0                                                             \
        }                                                                    \
    }

typedef struct dist_mutex dist_mutex_t;
typedef struct dist_mutexattr dist_mutexattr_t;

/* Static or automatic initialisation with default attributes; the internal
 * state is created, and Redis connected, at first use. */
#define DIST_MUTEX_INITIALIZER(name) DIST__NAMED_INITIALIZER(name)

/* name: 1..DIST_NAME_MAX bytes, copied.  attr may be NULL for defaults.
 * Does no network I/O.  EINVAL, ENOMEM. */
DIST_EXPORT int dist_mutex_init(dist_mutex_t *m, const char *name,
                                const dist_mutexattr_t *attr);

/* Frees what init allocated.  EBUSY while a thread of this process holds it. */
DIST_EXPORT int dist_mutex_destroy(dist_mutex_t *m);

/* Blocks until the lock is taken.  EDEADLK (errorcheck relock), EIO, EINVAL. */
DIST_EXPORT int dist_mutex_lock(dist_mutex_t *m);

/* Never waits for the lock: EBUSY when another owner holds it, or when the
 * caller holds an error-checking mutex already. */
DIST_EXPORT int dist_mutex_trylock(dist_mutex_t *m);

/* Waits until abstime (CLOCK_REALTIME): ETIMEDOUT once that time has been
 * reached.  A free lock is taken even when abstime has passed; abstime is
 * checked (EINVAL for tv_nsec out of range) only when the call would wait. */
DIST_EXPORT int dist_mutex_timedlock(dist_mutex_t *m,
                                     const struct timespec *abstime);

/* dist_mutex_timedlock with abstime on clockid, CLOCK_REALTIME or
 * CLOCK_MONOTONIC (as glibc's pthread_mutex_clocklock).  EINVAL for any
 * other clock, whether or not the call would wait.  A CLOCK_MONOTONIC
 * deadline is not moved by steps of the wall clock. */
DIST_EXPORT int dist_mutex_clocklock(dist_mutex_t *m, clockid_t clockid,
                                     const struct timespec *abstime);

/* EPERM when the calling thread does not hold it, or its hold was lost. */
DIST_EXPORT int dist_mutex_unlock(dist_mutex_t *m);

/* A robust mutex (dist_mutexattr_setrobust): lock, trylock, timedlock and
 * clocklock return EOWNERDEAD, with the lock held, when its last holder
 * did not release it cleanly; the caller repairs what it guards and calls
 * this, and its unlock is clean again.  Unlocked without it, the lock is
 * not recoverable: every later lock in every process returns
 * ENOTRECOVERABLE without taking it, until `distlock unlock --reset`.
 * EINVAL (not robust, or not owner-dead), EPERM (not held by the caller).
 * See dist_mutex_consistent(3). */
DIST_EXPORT int dist_mutex_consistent(dist_mutex_t *m);

/* Fencing token of the caller's hold: a number that grows with every
 * acquisition of the lock by any distlock client, so a resource can refuse
 * a holder whose lease ran out.  EPERM when the caller does not hold it. */
DIST_EXPORT int dist_mutex_token(dist_mutex_t *m, uint64_t *token);

/* How long the caller's hold is surely still its own, into *left: the send
 * of the last acquire or renewal the server acknowledged, plus the lease,
 * less the safety margin (DISTLOCK_LEASE_MARGIN_MS), minus now.  Check it
 * before a write elsewhere that only the holder may make.  EPERM, with a
 * zero *left, when the caller does not hold it, or no longer surely: past
 * that bound a watchdog hold is declared lost (the lost handler is called,
 * unlock says EPERM).  An explicit lease gives the same bound from the
 * lock's send; nothing is called when it passes, and unlock asks the
 * server.  EINVAL for a NULL left. */
DIST_EXPORT int dist_mutex_lease_left(dist_mutex_t *m, struct timespec *left);

DIST_EXPORT int dist_mutexattr_init(dist_mutexattr_t *a);
DIST_EXPORT int dist_mutexattr_destroy(dist_mutexattr_t *a);
/* DIST_MUTEX_RECURSIVE or DIST_MUTEX_ERRORCHECK; EINVAL otherwise. */
DIST_EXPORT int dist_mutexattr_settype(dist_mutexattr_t *a, int type);
DIST_EXPORT int dist_mutexattr_gettype(const dist_mutexattr_t *a, int *type);
/* 0 (default): the watchdog lease, renewed while held.  Otherwise the hold
 * expires lease_ms after each lock unless unlocked first. */
DIST_EXPORT int dist_mutexattr_setlease(dist_mutexattr_t *a,
                                        unsigned long lease_ms);
DIST_EXPORT int dist_mutexattr_getlease(const dist_mutexattr_t *a,
                                        unsigned long *lease_ms);
/* 0 (default): whoever asks when the lock is free may take it.  1: strict
 * FIFO across processes: waiters queue in Redis (Redisson's RFairLock) and
 * take the lock in the order they started waiting; trylock succeeds only
 * when the lock is free and nobody is queued. */
DIST_EXPORT int dist_mutexattr_setfair(dist_mutexattr_t *a, int fair);
DIST_EXPORT int dist_mutexattr_getfair(const dist_mutexattr_t *a, int *fair);
/* Deferred release (1): an owner's last unlock writes the release to
 * Redis and returns without waiting for the reply, which the library reads
 * at the thread's next call on that connection (or when the thread ends or
 * the program exits) and acts on: see dist_mutexattr_setdeferred(3).  The
 * default is DISTLOCK_DEFERRED_RELEASE's (0 unless set). */
DIST_EXPORT int dist_mutexattr_setdeferred(dist_mutexattr_t *a, int deferred);
DIST_EXPORT int dist_mutexattr_getdeferred(const dist_mutexattr_t *a,
                                           int *deferred);
/* Lock cohorting (1): the threads of this process act in Redis as one
 * owner; an unlock while another local thread waits hands the hold to it
 * without a round trip, for a bounded time, so other processes still get
 * turns: see dist_mutexattr_setcohort(3).  Not for fair mutexes (EINVAL
 * at init) nor condition waits (EINVAL).  The default is DISTLOCK_COHORT's
 * (0 unless set) for non-fair mutexes. */
DIST_EXPORT int dist_mutexattr_setcohort(dist_mutexattr_t *a, int cohort);
DIST_EXPORT int dist_mutexattr_getcohort(const dist_mutexattr_t *a,
                                         int *cohort);
/* DIST_MUTEX_STALLED (default) or DIST_MUTEX_ROBUST: see
 * dist_mutex_consistent.  Plain and fair mutexes; not with cohorting
 * (EINVAL at init when both are asked for; a robust mutex is never a
 * cohort one by default).  EINVAL for any other value. */
DIST_EXPORT int dist_mutexattr_setrobust(dist_mutexattr_t *a, int robust);
DIST_EXPORT int dist_mutexattr_getrobust(const dist_mutexattr_t *a,
                                         int *robust);

/* ------------------------------------------------------------------------ */
/* Read-write lock                                                          */
/* ------------------------------------------------------------------------ */

/*
 * Redisson's RReadWriteLock: readers share the lock, a writer excludes
 * everyone else.  Both sides are reentrant per thread (n holds need n
 * unlocks), and the write holder may also take read holds.  An unlock by a
 * thread that holds both gives back a write hold first, so that
 * `wrlock; rdlock; unlock` leaves it holding a read lock (a downgrade), and
 * readers blocked meanwhile enter at once.  A thread that holds read locks
 * only cannot take the write lock (no upgrade): wrlock and timedwrlock give
 * EDEADLK at once, trywrlock EBUSY.  Each read hold has its own lease, so a
 * reader whose process died stops counting when its lease ends, even while
 * other readers keep the lock.
 */
#define DIST_RWLOCK_PREFER_READER                                            \
    0 /* default: readers join readers, as glibc */
#define DIST_RWLOCK_PREFER_WRITER                                            \
    1 /* new readers wait while a writer waits */

struct dist_rwlockattr {
    int __kind;
    int __flags;
    unsigned long __lease_ms;
    unsigned long __reserved[2];
};

/* The caller owns the object; its fields are private.  As dist_mutex_t: an
 * object set with DIST_RWLOCK_INITIALIZER keeps a pointer to the name. */
struct dist_rwlock {
    const char *__name;
    void *__impl;
    unsigned long __reserved[2];
};

typedef struct dist_rwlock dist_rwlock_t;
typedef struct dist_rwlockattr dist_rwlockattr_t;

/* Static or automatic initialisation with default attributes; the internal
 * state is created, and Redis connected, at first use. */
#define DIST_RWLOCK_INITIALIZER(name) DIST__NAMED_INITIALIZER(name)

/* name: 1..DIST_NAME_MAX bytes, copied.  attr may be NULL for defaults.
 * Does no network I/O.  EINVAL, ENOMEM.  Not the same lock as a dist_mutex_t
 * of the same name (do not use one name for both). */
DIST_EXPORT int dist_rwlock_init(dist_rwlock_t *rw, const char *name,
                                 const dist_rwlockattr_t *attr);

/* Frees what init allocated.  EBUSY while a thread of this process holds it. */
DIST_EXPORT int dist_rwlock_destroy(dist_rwlock_t *rw);

/* Blocks until a read lock is taken.  EIO, EINVAL. */
DIST_EXPORT int dist_rwlock_rdlock(dist_rwlock_t *rw);

/* Never waits: EBUSY when a writer holds it, or (writer preference) a writer
 * waits and the caller holds no read lock yet. */
DIST_EXPORT int dist_rwlock_tryrdlock(dist_rwlock_t *rw);

/* Waits until abstime (CLOCK_REALTIME), as dist_mutex_timedlock. */
DIST_EXPORT int dist_rwlock_timedrdlock(dist_rwlock_t *rw,
                                        const struct timespec *abstime);

/* As dist_rwlock_timedrdlock, with abstime on clockid (see
 * dist_mutex_clocklock). */
DIST_EXPORT int dist_rwlock_clockrdlock(dist_rwlock_t *rw, clockid_t clockid,
                                        const struct timespec *abstime);

/* Blocks until the write lock is taken.  EDEADLK when the caller holds read
 * locks only.  EIO, EINVAL. */
DIST_EXPORT int dist_rwlock_wrlock(dist_rwlock_t *rw);

/* Never waits: EBUSY when anyone else holds it, or the caller holds read
 * locks only. */
DIST_EXPORT int dist_rwlock_trywrlock(dist_rwlock_t *rw);

/* Waits until abstime (CLOCK_REALTIME), as dist_mutex_timedlock; EDEADLK as
 * dist_rwlock_wrlock. */
DIST_EXPORT int dist_rwlock_timedwrlock(dist_rwlock_t *rw,
                                        const struct timespec *abstime);

/* As dist_rwlock_timedwrlock, with abstime on clockid (see
 * dist_mutex_clocklock). */
DIST_EXPORT int dist_rwlock_clockwrlock(dist_rwlock_t *rw, clockid_t clockid,
                                        const struct timespec *abstime);

/* Gives back one hold of the calling thread: a write hold when it has one,
 * else a read hold.  EPERM when it holds none, or its hold was lost. */
DIST_EXPORT int dist_rwlock_unlock(dist_rwlock_t *rw);

/* Fencing token of the caller's write hold (see dist_mutex_token): it grows
 * with every write acquisition by any distlock client.  EPERM when the
 * caller does not hold the write lock. */
DIST_EXPORT int dist_rwlock_token(dist_rwlock_t *rw, uint64_t *token);

/* dist_mutex_lease_left for the caller's holds of rw, write or read (one
 * lease covers all of a thread's holds of one lock). */
DIST_EXPORT int dist_rwlock_lease_left(dist_rwlock_t *rw,
                                       struct timespec *left);

DIST_EXPORT int dist_rwlockattr_init(dist_rwlockattr_t *a);
DIST_EXPORT int dist_rwlockattr_destroy(dist_rwlockattr_t *a);
/* 0 (default): the watchdog lease, renewed while held.  Otherwise each hold
 * expires lease_ms after it was taken unless unlocked first. */
DIST_EXPORT int dist_rwlockattr_setlease(dist_rwlockattr_t *a,
                                         unsigned long lease_ms);
/* DIST_RWLOCK_PREFER_READER (default) or DIST_RWLOCK_PREFER_WRITER; EINVAL
 * otherwise.  With writer preference a writer that waits is recorded in
 * Redis while its process lives (it stops counting within
 * DISTLOCK_WAITER_MS after the process dies) and keeps out new readers of
 * every process, whatever their own kind; a thread that already holds a
 * read lock may always take another. */
DIST_EXPORT int dist_rwlockattr_setkind(dist_rwlockattr_t *a, int kind);

/* ------------------------------------------------------------------------ */
/* Counters                                                                 */
/* ------------------------------------------------------------------------ */

/* Buckets of struct dist_stats.wait_ms: bucket 0 counts waits under 1 ms,
 * bucket i (1..14) those of 2^(i-1) to 2^i ms, bucket 15 those of 16384 ms
 * or more. */
#define DIST_STATS_WAIT_BUCKETS 16

/* What this process's locks did since it started (or since the last
 * dist_stats_reset).  A forked child starts with its parent's counts. */
struct dist_stats {
    uint64_t acquired;  /* holds taken by every lock call, try and
                               * reentrant ones included */
    uint64_t contended; /* of those, taken after waiting for another
                               * holder */
    uint64_t busy;      /* try calls that found the lock held */
    uint64_t timed_out; /* timed calls that gave ETIMEDOUT */
    uint64_t wait_ms[DIST_STATS_WAIT_BUCKETS];
    /* lock calls that may wait (not try), by how
                               * long they took to take the lock */
    uint64_t renewed;      /* holds renewed by the renewal thread */
    uint64_t renew_failed; /* hold renewals Redis did not answer */
    uint64_t lost;         /* holds found lost (the lost handler's calls) */
    uint64_t connects;     /* connections opened to Redis servers: after
                               * the first few, reconnects */
    uint64_t redirects;    /* Cluster MOVED and ASK answers followed */
    uint64_t no_replica;   /* new holds given back because no replica
                               * acknowledged them in time (DIST_ENOREPLICA),
                               * or the WAIT for one failed */
    uint64_t pubsub_messages; /* release messages heard */
    uint64_t pubsub_resyncs;  /* waits woken to try again because release
                               * messages may have been missed (after the
                               * pub/sub connection was lost) */
    uint64_t pubsub_direct;   /* of pubsub_messages, those read by the
                               * thread waiting for them, not by the pub/sub
                               * thread (DISTLOCK_DIRECT_WAKE) */
    uint64_t pubsub_unwaited; /* of pubsub_messages, those the pub/sub
                               * thread read for a channel no thread of
                               * the process waited on: they woke that
                               * thread alone */
    uint64_t __reserved[6];
};

/* Copies the counters into *s (each read whole, not all at one instant).
 * Cheap: they are atomics counted where things happen, never behind a
 * lock.  EINVAL when s is NULL. */
DIST_EXPORT int dist_stats_get(struct dist_stats *s);

/* Sets every counter back to 0. */
DIST_EXPORT void dist_stats_reset(void);

/* ------------------------------------------------------------------------ */
/* Condition variable                                                       */
/* ------------------------------------------------------------------------ */

/*
 * A condition variable shared by every process that names it, used with a
 * dist_mutex_t as pthread_cond_t is with a pthread_mutex_t.  A waiter is
 * registered in Redis while it still holds the mutex, so a signal from a
 * thread that takes the mutex after the waiter let go of it is never lost.
 * A wait returns holding the mutex again, taken through the mutex's normal
 * path (replica sync, fencing token, lost handler).  Waiters are woken by
 * pub/sub; each has a mark in Redis, so a missed message only delays it
 * (by at most DISTLOCK_WAITER_MS).  A waiter whose process died stops
 * counting within DISTLOCK_WAITER_MS: signal skips it, and a signal it was
 * given and never took goes to the next waiter.  A signal when no live
 * waiter is registered does nothing.  Never EINTR.
 *
 * Cluster: the wait runs one script on the mutex and the condition's keys,
 * so the condition's name must hash to the mutex's slot: give it the
 * mutex's name as a {hash tag} (mutex "jobs", condition "{jobs}:ready"), or
 * give both the same tag.  A wait on a cluster refuses names that do not
 * (EINVAL).  On one server or Sentinel any names work.
 */
struct dist_condattr {
    int __clock;
    int __flags;
    unsigned long __reserved[2];
};

/* The caller owns the object; its fields are private.  As dist_mutex_t: an
 * object set with DIST_COND_INITIALIZER keeps a pointer to the name. */
struct dist_cond {
    const char *__name;
    void *__impl;
    unsigned long __reserved[2];
};

typedef struct dist_cond dist_cond_t;
typedef struct dist_condattr dist_condattr_t;

/* Static or automatic initialisation with default attributes
 * (CLOCK_REALTIME); the internal state is created at first use. */
#define DIST_COND_INITIALIZER(name) DIST__NAMED_INITIALIZER(name)

/* Sets up c under name (copied); attr may be NULL.  Does no network I/O.
 * EINVAL, ENOMEM. */
DIST_EXPORT int dist_cond_init(dist_cond_t *c, const char *name,
                               const dist_condattr_t *attr);

/* Frees what init allocated.  EBUSY while a thread of this process is
 * blocked on it (threads a signal or broadcast woke do not count, even
 * before they ran).  Other processes' waiters are not affected. */
DIST_EXPORT int dist_cond_destroy(dist_cond_t *c);

/* Gives up m, which the caller must hold exactly once (EPERM when it does
 * not hold it, EINVAL when it holds it more than once), waits until
 * signalled, and takes m again.  0 holding m; a wake-up may be spurious,
 * as POSIX allows, so wait in a loop on the predicate.  An error from
 * taking m back (EIO when Redis could not be reached) is returned without
 * holding m.  A cancellation point while it sleeps: a cancelled waiter
 * takes m back before its cleanup handlers run. */
DIST_EXPORT int dist_cond_wait(dist_cond_t *c, dist_mutex_t *m);

/* dist_cond_wait until abstime on the condition's clock (CLOCK_REALTIME
 * unless set by dist_condattr_setclock): ETIMEDOUT, holding m again, once
 * abstime has passed.  A signal that reaches the waiter as its deadline
 * passes is taken (0), so it is never lost for the other waiters. */
DIST_EXPORT int dist_cond_timedwait(dist_cond_t *c, dist_mutex_t *m,
                                    const struct timespec *abstime);

/* dist_cond_timedwait with abstime on clockid, CLOCK_REALTIME or
 * CLOCK_MONOTONIC (as glibc's pthread_cond_clockwait); EINVAL otherwise. */
DIST_EXPORT int dist_cond_clockwait(dist_cond_t *c, dist_mutex_t *m,
                                    clockid_t clockid,
                                    const struct timespec *abstime);

/* Wakes the oldest live waiter of any process, if there is one.  The caller
 * need not hold the mutex; a waiter is certain to be reached only when the
 * signaller took the mutex after the waiter began to wait.  EIO. */
DIST_EXPORT int dist_cond_signal(dist_cond_t *c);

/* Wakes every live waiter of every process.  EIO. */
DIST_EXPORT int dist_cond_broadcast(dist_cond_t *c);

DIST_EXPORT int dist_condattr_init(dist_condattr_t *a);
DIST_EXPORT int dist_condattr_destroy(dist_condattr_t *a);
/* The clock of dist_cond_timedwait's abstime: CLOCK_REALTIME (default) or
 * CLOCK_MONOTONIC; EINVAL otherwise. */
DIST_EXPORT int dist_condattr_setclock(dist_condattr_t *a, clockid_t clock);
DIST_EXPORT int dist_condattr_getclock(const dist_condattr_t *a,
                                       clockid_t *clock);

/* ------------------------------------------------------------------------ */
/* Semaphore                                                                */
/* ------------------------------------------------------------------------ */

/*
 * A counting semaphore shared by every process that names it, shaped like
 * sem_t.  Two modes, chosen per semaphore by attribute:
 *
 * DIST_SEM_LEASED (default): each permit taken is a hold of the thread that
 * took it, with a lease the renewal thread renews as it does a lock's; a
 * holder whose process dies gives its permits back when the lease ends, so
 * free plus held permits stay what they were set to.  dist_sem_post gives
 * back one of the calling thread's permits; a thread that holds none gets
 * EPERM, unless the semaphore allows unowned posts
 * (dist_semattr_setunowned), where such a post adds a new permit.  A thread
 * that takes a permit and never posts keeps it while its process lives;
 * with unowned posts (the signalling use) it keeps only the last one it
 * took: a take consumes the one before, and destroy the last.
 *
 * DIST_SEM_REDISSON: Redisson's RSemaphore layout (the permit count in the
 * plain string key NAME, wake-ups on redisson_sc:{NAME}), so that a Java
 * service and a C program share the permits.  Nothing records who took a
 * permit: any thread may post, and a permit taken by a process that dies
 * is lost for good, as with Redisson.
 *
 * Waiters are woken by pub/sub, not FIFO: a post wakes one waiting thread
 * in each process that waits, which race for the permit.
 */
#define DIST_SEM_LEASED    0
#define DIST_SEM_REDISSON  1
#define DIST_SEM_VALUE_MAX 2147483647L /* as SEM_VALUE_MAX */

struct dist_semattr {
    int __mode;
    int __flags;
    unsigned long __lease_ms;
    long __max;
    unsigned long __reserved[2];
};

/* The caller owns the object; its fields are private. */
struct dist_sem {
    void *__impl;
    unsigned long __reserved[3];
};

typedef struct dist_sem dist_sem_t;
typedef struct dist_semattr dist_semattr_t;

/* Sets up s under name (copied); attr may be NULL.  A semaphore that does
 * not exist in Redis yet is created with initial_if_new free permits by the
 * first call that reaches it.  Does no network I/O.  EINVAL (initial past
 * the maximum), ENOMEM. */
DIST_EXPORT int dist_sem_init(dist_sem_t *s, const char *name,
                              unsigned initial_if_new,
                              const dist_semattr_t *attr);

/* Frees what init allocated.  EBUSY while a thread of this process holds
 * one of its leased permits; with unowned posts those are consumed
 * instead (EIO when Redis cannot be reached for that). */
DIST_EXPORT int dist_sem_destroy(dist_sem_t *s);

/* Takes a permit, waiting until one is free.  EIO; EINTR when a signal
 * handler without SA_RESTART interrupted the wait (the timed forms: any
 * handler), as glibc's sem_wait.  A cancellation point, as the timed forms
 * are. */
DIST_EXPORT int dist_sem_wait(dist_sem_t *s);

/* Takes a permit if one is free; EAGAIN otherwise (as sem_trywait). */
DIST_EXPORT int dist_sem_trywait(dist_sem_t *s);

/* dist_sem_wait until abstime (CLOCK_REALTIME): ETIMEDOUT.  A free permit
 * is taken even when abstime has passed (as sem_timedwait). */
DIST_EXPORT int dist_sem_timedwait(dist_sem_t *s,
                                   const struct timespec *abstime);

/* dist_sem_timedwait with abstime on clockid, CLOCK_REALTIME or
 * CLOCK_MONOTONIC (as glibc's sem_clockwait); EINVAL otherwise. */
DIST_EXPORT int dist_sem_clockwait(dist_sem_t *s, clockid_t clockid,
                                   const struct timespec *abstime);

/* Gives a permit back (see the modes above) and wakes a waiter.  EPERM
 * (leased, the caller holds none, unowned posts not allowed), EOVERFLOW
 * (a new permit would pass the maximum), EIO. */
DIST_EXPORT int dist_sem_post(dist_sem_t *s);

/* n posts in one call, waking up to n waiters.  Leased: the caller's own
 * permits go back first; the rest are new ones (unowned posts) or EPERM,
 * after those given back. */
DIST_EXPORT int dist_sem_post_multiple(dist_sem_t *s, unsigned n);

/* The free permits now, in *value (as sem_getvalue; a snapshot).  EIO. */
DIST_EXPORT int dist_sem_getvalue(dist_sem_t *s, int *value);

/* Sets the free permits to value whatever they were: a reset after a
 * change of plan, or of a Redisson semaphore.  Leased permits held stay
 * held and still come back when posted or when their lease ends.  EINVAL
 * past the maximum, EIO. */
DIST_EXPORT int dist_sem_setvalue(dist_sem_t *s, unsigned value);

DIST_EXPORT int dist_semattr_init(dist_semattr_t *a);
DIST_EXPORT int dist_semattr_destroy(dist_semattr_t *a);
/* DIST_SEM_LEASED (default) or DIST_SEM_REDISSON; EINVAL otherwise. */
DIST_EXPORT int dist_semattr_setmode(dist_semattr_t *a, int mode);
DIST_EXPORT int dist_semattr_getmode(const dist_semattr_t *a, int *mode);
/* Leased mode: 0 (default) the watchdog lease, renewed while held;
 * otherwise each permit's lease ends lease_ms after it was taken unless
 * posted first.  EINVAL past a day. */
DIST_EXPORT int dist_semattr_setlease(dist_semattr_t *a,
                                      unsigned long lease_ms);
/* Leased mode: 1 lets a thread that holds no permit post, adding one; a
 * permit taken then replaces the taker's earlier one, which is consumed
 * (a consumer holds only the item it works on). */
DIST_EXPORT int dist_semattr_setunowned(dist_semattr_t *a, int unowned);
/* The most free permits (default and at most DIST_SEM_VALUE_MAX): a post
 * past it gives EOVERFLOW. */
DIST_EXPORT int dist_semattr_setmax(dist_semattr_t *a, long max);

/* ------------------------------------------------------------------------ */
/* Barrier                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A barrier shared by every process that names it, shaped like
 * pthread_barrier_t: each round ends when count waits have arrived, and
 * the barrier is used again round after round.  A thread's barrier object
 * becomes a member at its first wait and stays one until destroyed; its
 * renewal thread keeps it alive in Redis.  A member whose process dies
 * breaks the round under way within DISTLOCK_WAITER_MS: the members
 * waiting in it get EOWNERDEAD, and the next round starts (without it).
 */
#define DIST_BARRIER_SERIAL_THREAD (-1) /* as PTHREAD_BARRIER_SERIAL_THREAD */

/* The caller owns the object; its fields are private. */
struct dist_barrier {
    void *__impl;
    unsigned long __reserved[3];
};

typedef struct dist_barrier dist_barrier_t;

/* Sets up b under name (copied) for rounds of count (>= 1) waits.  Every
 * process must give the same count (a wait gives EINVAL otherwise).  Does
 * no network I/O.  EINVAL, ENOMEM. */
DIST_EXPORT int dist_barrier_init(dist_barrier_t *b, const char *name,
                                  unsigned count);

/* Leaves the barrier (this object is no longer a member) and frees what
 * init allocated.  EBUSY while a thread waits on it. */
DIST_EXPORT int dist_barrier_destroy(dist_barrier_t *b);

/* Arrives and waits until count waits have arrived in this round.
 * DIST_BARRIER_SERIAL_THREAD in exactly one of them (the last to arrive),
 * 0 in the others; EOWNERDEAD when a member died in this round (the round
 * is over for everyone; wait again for the next), EINVAL when the barrier
 * exists with another count, EIO.  Never EINTR. */
DIST_EXPORT int dist_barrier_wait(dist_barrier_t *b);

/* dist_barrier_wait until abstime on clockid (CLOCK_REALTIME or
 * CLOCK_MONOTONIC): ETIMEDOUT once it has passed, and the caller no longer
 * counts in the round.  A round that ends as the deadline passes ends for
 * it too (0 or DIST_BARRIER_SERIAL_THREAD). */
DIST_EXPORT int dist_barrier_clockwait(dist_barrier_t *b, clockid_t clockid,
                                       const struct timespec *abstime);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_H */
