/* names.h: the Redis names of one lock (names.c), shared by the lock
 * kinds and the distlock tool so that they never disagree on a layout. */
#ifndef DIST_NAMES_H
#define DIST_NAMES_H

#include "base/base.h"

/* The Redis names of one lock, shared by the lock object and its holds
 * (a hold may outlive the object while a release finishes). */
struct dist__names {
    atomic_int refs;
    int braces;              /* whether derived names wrap N in {} */
    int slot;                /* the cluster slot of all of them; -1 when
                              * they do not share one (see names_new) */
    struct dist__buf name;   /* N, also the lock key */
    struct dist__buf chan;   /* redisson_lock__channel:{N} */
    struct dist__buf token;  /* redisson_lock_token:{N} */
    struct dist__buf queue;  /* redisson_lock_queue:{N}     (fair lock) */
    struct dist__buf timeout;/* redisson_lock_timeout:{N}   (fair lock) */
    struct dist__buf rwchan; /* redisson_rwlock:{N}         (read-write lock) */
    struct dist__buf writers;/* distlock_rwlock_writers:{N} (read-write lock) */
    struct dist__buf fairwait;/* distlock_fair_waiters:{N}  (fair lock) */
    /* a queued fair waiter's keys for waiter_renew, in its order: timeout,
     * queue, fairwait, chan */
    struct dist__buf fairkeys[4];
    char mem[];
};

struct dist__names *dist__names_new(const char *name, size_t len);
void dist__names_ref(struct dist__names *n);
void dist__names_unref(struct dist__names *n);
/* "<prefix>{N}<suffix>" (no braces when N has one, as Redisson does), for
 * per-owner names: the fair lock's per-waiter channel
 * (prefix "redisson_lock__channel:", suffix ":<owner>") and the read-write
 * lock's read-hold keys (prefix "", suffix ":<owner>:rwlock_timeout:<k>").
 * malloc'd, NUL-terminated; NULL when out of memory. */
char *dist__names_derive(const struct dist__names *n, const char *prefix,
                         const char *suffix, size_t *len);
/* The other lock name whose derived names are all those of name: "{q}" for
 * "q", "q" for "{q}".  Redisson's brace rule maps both to the same queue,
 * channels, token and read-write keys, so that locks used under both
 * names block each other; the layout is Redisson's and stays, the tool
 * warns.  malloc'd, NUL-terminated, its length in *tlen; NULL when name
 * has no twin (or out of memory). */
char *dist__names_twin(const char *name, size_t len, size_t *tlen);

#endif
