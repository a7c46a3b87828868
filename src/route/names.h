/* names.h: the Redis names of one lock (names.c), shared by the lock
 * kinds and the distlock tool so that they never disagree on a layout:
 * every key and channel prefix is spelled in names.c and nowhere else
 * (tests/test_names_owner.sh checks it). */
#ifndef DIST_NAMES_H
#define DIST_NAMES_H

#include <stdlib.h>

#include "base/base.h"

/* The names derived from a lock's name N: "<prefix>{N}" (no braces when N
 * has one, as Redisson does).  Redisson's first, then distlock's own; the
 * prefix of each is names.c's table. */
enum dist__nm {
    DIST__N_CHAN,    /* redisson_lock__channel:{N} */
    DIST__N_TOKEN,   /* redisson_lock_token:{N} */
    DIST__N_QUEUE,   /* redisson_lock_queue:{N}     (fair lock) */
    DIST__N_TIMEOUT, /* redisson_lock_timeout:{N}   (fair lock) */
    DIST__N_RWCHAN,  /* redisson_rwlock:{N}         (read-write lock) */
    DIST__N_RSEM,    /* redisson_sc:{N}             (RSemaphore's channel) */
    DIST__N_RW_WRITERS,    /* distlock_rwlock_writers:{N} (read-write lock) */
    DIST__N_RW_READERS,    /* distlock_rwlock_readers:{N} (read-write lock) */
    DIST__N_FAIR_WAITERS,  /* distlock_fair_waiters:{N}   (fair lock) */
    DIST__N_MUTEX_WAITERS, /* distlock_mutex_waiters:{N}  (mutex): its
                             * registered waiters; a waiter's own channel
                             * is this name with ':<owner>' appended */
    DIST__N_COND_WAITERS,  /* distlock_cond_waiters:{N}   (condition) */
    DIST__N_COND_QUEUE,    /* distlock_cond_queue:{N} */
    DIST__N_COND_SIGNALLED, /* distlock_cond_signalled:{N} */
    DIST__N_COND_CHAN,      /* distlock_cond:{N} */
    DIST__N_SEM,        /* distlock_sem:{N}            (leased semaphore) */
    DIST__N_SEM_HOLDS,  /* distlock_sem_holds:{N} */
    DIST__N_SEM_LEASES, /* distlock_sem_leases:{N} */
    DIST__N_SEM_CHAN,   /* distlock_sem_channel:{N} */
    DIST__N_BARRIER,    /* distlock_barrier:{N}        (barrier) */
    DIST__N_BARRIER_MEMBERS, /* distlock_barrier_members:{N} */
    DIST__N_BARRIER_CHAN,    /* distlock_barrier_channel:{N} */
    DIST__N_ROBUST,          /* distlock_robust:{N}         (robust mutex: who
                             * holds it, who died holding it; see
                             * lua/prelude_robust.lua) */
    DIST__N_COUNT
};

/* The Redis names of one lock, shared by the lock object and its holds
 * (a hold may outlive the object while a release finishes).  Only N is
 * kept: a derived name is made when a call needs it (dist__names_keys),
 * which costs less than a cache miss, and a lock made is then N's bytes
 * and this header. */
struct dist__names {
    atomic_int refs;
    int braces;            /* whether derived names wrap N in {} */
    int slot;              /* the cluster slot of all of them; -1 when
                              * they do not share one (see names_new) */
    struct dist__buf name; /* N, also the lock key */
    char mem[];
};

struct dist__names *dist__names_new(const char *name, size_t len);
void dist__names_ref(struct dist__names *n);
void dist__names_unref(struct dist__names *n);

/* The prefix of a derived name ("redisson_lock_token:"). */
const char *dist__names_prefix(enum dist__nm which);
/* Whether key k is one a lock derives (a token, a queue, a read hold's
 * timeout key, ...) or one of a condition's, a semaphore's or a barrier's:
 * never a lock of its own (the tool's list). */
int dist__names_is_derived(const char *k, size_t n);
/* Whether key k is one of a condition's, a semaphore's or a barrier's. */
int dist__names_is_object(const char *k, size_t n);
/* A SCAN pattern that every name of distlock's own matches. */
const char *dist__names_own_glob(void);

/* Room on the caller's stack for the derived names of one call; names
 * longer than it fits go to the heap (dist__room_done frees them). */
#define DIST__ROOM 320
struct dist__room {
    char *heap;
    char mem[DIST__ROOM];
};
/* The derived names which[0..count) of n into out[], their bytes in room
 * (NUL-terminated).  0, or ENOMEM.  Call dist__room_done after the last
 * use, also when this failed. */
int dist__names_keys(const struct dist__names *n, const enum dist__nm *which,
                     int count, struct dist__buf *out,
                     struct dist__room *room);
static inline void dist__room_done(struct dist__room *room)
{
    if (room->heap) {
        free(room->heap);
        room->heap = NULL;
    }
}
/* The same in one allocation, for those that keep them (a queued waiter's
 * renewal keys, a read-write lock's state, the tool): an array of count
 * buffers followed by their bytes; free() frees it.  NULL when out of
 * memory. */
struct dist__buf *dist__names_set(const struct dist__names *n,
                                  const enum dist__nm *which, int count);

/* "<prefix of which>{N}<suffix>", malloc'd, NUL-terminated; NULL when out
 * of memory.  which -1: no prefix ("{N}<suffix>").  For per-owner names:
 * the fair lock's per-waiter channel (dist__names_waiter_chan) and the
 * read-write lock's read-hold keys (dist__names_read_prefix). */
char *dist__names_derive(const struct dist__names *n, int which,
                         const char *suffix, size_t *len);
/* The derived names which[0..count) of n, each malloc'd into keys[] (free
 * them with dist__bufs_free).  0, or ENOMEM with none left allocated. */
int dist__names_derive_all(const struct dist__names *n,
                           const enum dist__nm *which, int count,
                           struct dist__buf *keys);
/* The fair lock's channel of one waiter: "redisson_lock__channel:{N}:<owner>". */
char *dist__names_waiter_chan(const struct dist__names *n, const char *owner,
                              size_t olen, size_t *len);
/* A plain mutex's registered waiter's channel:
 * "distlock_mutex_waiters:{N}:<owner>". */
char *dist__names_mutex_waiter_chan(const struct dist__names *n,
                                    const char *owner, size_t olen,
                                    size_t *len);
/* The start of a read hold's timeout keys, "{N}:<owner>:rwlock_timeout:"
 * (Redisson's; the hold's number follows). */
char *dist__names_read_prefix(const struct dist__names *n, const char *owner,
                              size_t olen, size_t *len);
/* The other lock name whose derived names are all those of name: "{q}" for
 * "q", "q" for "{q}".  Redisson's brace rule maps both to the same queue,
 * channels, token and read-write keys, so that locks used under both
 * names block each other; the layout is Redisson's and stays, the tool
 * warns.  malloc'd, NUL-terminated, its length in *tlen; NULL when name
 * has no twin (or out of memory). */
char *dist__names_twin(const char *name, size_t len, size_t *tlen);

#endif
