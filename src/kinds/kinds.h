/* kinds.h: the kinds of lock the engine runs (engine.h), for the public
 * API files. */
#ifndef DIST_KINDS_H
#define DIST_KINDS_H

#include <errno.h>

#include "engine/engine.h"

extern const struct dist__kind dist__mutex_kind;  /* kind_mutex.c */
extern const struct dist__kind dist__fair_kind;   /* kind_mutex.c */
extern const struct dist__kind dist__rwlock_kind; /* kind_rwlock.c */

/* The first check of a lease_left call (mutex.c, rwlock.c): left given,
 * and zero until a hold says more, so that a failure leaves none. */
static inline int dist__lease_arg(struct timespec *left)
{
    if (!left)
        return dist__err(EINVAL, "left is NULL");
    left->tv_sec = 0;
    left->tv_nsec = 0;
    return 0;
}

/* The mutex object behind m (mutex.c), for the condition variable. */
int dist__mutex_obj(dist_mutex_t *m, struct dist__obj **out);

/* ---- condition variables (kind_cond.c, cond.c) ------------------------- */

#define DIST__COND_MAGIC 0x636f6e64u /* "cond" */
#define DIST__COND_NKEYS 4

/* A local thread in a wait on a condition (cond.c). */
struct dist__cond_wt;

/* One dist_cond_t.  Its keys, named after the condition with Redisson's
 * brace rule: the waiters' liveness ZSET, the queue LIST, the signalled
 * SET and the channel (see lua/prelude_cond.lua). */
struct dist__cond {
    unsigned magic;
    clockid_t clock;           /* of timedwait's abstime */
    int slot;                  /* of every key; -1 when they differ */
    struct dist__names *names; /* the condition's name */
    struct dist__buf keys[DIST__COND_NKEYS];
    pthread_mutex_t mu;        /* guards the four below; never held
                                   * over network I/O */
    struct dist__cond_wt *wts; /* local threads in a wait */
    unsigned long wts_gen;     /* fork generation of wts */
    unsigned long entered;     /* waits begun, ever */
    int doomed;                /* destroyed while woken threads were
                                   * still leaving: the last frees it */
    atomic_ulong spurious;     /* wake-ups without a signal */
};

int dist__cond_new(const char *name, clockid_t clock,
                   struct dist__cond **out);
void dist__cond_free(struct dist__cond *cv);
/* Registers the calling thread as a waiter while it holds the mutex named
 * by m.  0, EPERM (Redis says it does not hold it), EINVAL (cluster slots
 * differ), EIO. */
int dist__cond_register(struct dist__cond *cv, const struct dist__names *m);
/* Looks for the caller's mark: *res 1 signalled (mark taken), 0 not (and
 * gone when leave), -1 no longer registered.  0 or EIO. */
int dist__cond_check(struct dist__cond *cv, int leave, int *res);
/* Whether any of the n owners is still in the queue: waits that no signal
 * or broadcast marked yet.  0 with *any, EIO or ENOMEM. */
int dist__cond_queued(struct dist__cond *cv, const char (*owners)[64], int n,
                      int *any);
/* Marks the oldest live waiter, or all: *marked how many (may be NULL). */
int dist__cond_signal(struct dist__cond *cv, int all, long long *marked);

/* ---- semaphores (kind_sem.c, sem.c) ------------------------------------ */

extern const struct dist__kind dist__sem_kind; /* kind_sem.c */

#define DIST__SEM_NKEYS 4

/* A leased semaphore's state's ext: its keys (sem, holds, leases, channel;
 * see lua/prelude_sem.lua), and what a script needs to create it. */
struct dist__semx {
    struct dist__buf keys[DIST__SEM_NKEYS];
    atomic_long initial; /* free permits if new */
    atomic_long max;     /* most free permits */
    atomic_int unowned;  /* unowned posts: a take replaces the
                                   * taker's earlier hold (sem_acquire) */
};

/* The keys of the semaphore named by nm, malloc'd: DIST__SEM_NKEYS of them,
 * or with redisson the RSemaphore's two (S, redisson_sc:{S}).  0 or
 * ENOMEM. */
int dist__sem_keys(const struct dist__names *nm, int redisson,
                   struct dist__buf *keys);
/* sem_count on o's semaphore: op "get", "add" or "set" with n.  0 with
 * *free_ and *held (either may be NULL), EOVERFLOW, EIO. */
int dist__sem_count(struct dist__obj *o, const char *op, long n, long *free_,
                    long *held);
/* A semaphore with unowned posts: the permits the threads of this process
 * hold are consumed in Redis and their records dropped (its destroy).  0,
 * EBUSY (an earlier call's outcome is still being settled), ENOMEM, EIO. */
int dist__sem_drop(struct dist__obj *o);
/* Whether free, the count a count script (sem_count, rsem_count) answered
 * to op with n, could be its answer: from 0 to DIST_SEM_VALUE_MAX (not the
 * semaphore's own maximum: another process may have set a larger one),
 * exactly n after a 'set', -1 only to an 'add' it refused. */
int dist__sem_count_possible(const char *op, long n, long long free_);

/* struct dist__obj.flags */
#define DIST__MUTEX_ERRORCHECK     1
#define DIST__RWLOCK_PREFER_WRITER 1

#endif
