/* shim.c: the pthread functions of libdistlock_preload.so.
 *
 * Each one first asks the address table whether its lock is mapped
 * (pl_surely_plain, see table.c): for a lock that is not, that is all, and
 * the call goes on to glibc's function of the same symbol version (see
 * real.c) as a tail call.  A mapped lock takes the real one first, then
 * its distributed lock (and gives the distributed one back first); a
 * condition wait gives the distributed lock back for the time of the wait.
 * The symver attributes tie each wrapper to its glibc version;
 * preload.map declares the versions. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "startup.h"

/* The live entry of a lock, or NULL (start-up first if need be). */
static struct pl_entry *entry_of(const void *m)
{
    struct pl_entry *e = pl_table_get(pl_table_now(), (uintptr_t)m);

    if (e && !__atomic_load_n(&e->live, __ATOMIC_ACQUIRE))
        return NULL;
    return e;
}

/* ---- the distributed half ------------------------------------------------- */

enum { D_BLOCK, D_TRY, D_TIMED, D_MUST };

/* One attempt on the distributed lock: a mutex, or a read-write lock for
 * reading (wr 0) or writing (wr 1).  D_TIMED: abs on clk, the caller's own
 * clock (a CLOCK_MONOTONIC deadline stays one). */
static int dist_try_once(struct pl_entry *e, int how, int wr, clockid_t clk,
                         const struct timespec *abs)
{
    if (e->kind == PL_MUTEX) {
        if (how == D_TRY)
            return dist_mutex_trylock(&e->dm);
        if (how == D_TIMED)
            return dist_mutex_clocklock(&e->dm, clk, abs);
        return dist_mutex_lock(&e->dm);
    }
    if (how == D_TRY)
        return wr ? dist_rwlock_trywrlock(&e->drw)
                  : dist_rwlock_tryrdlock(&e->drw);
    if (how == D_TIMED)
        return wr ? dist_rwlock_clockwrlock(&e->drw, clk, abs)
                  : dist_rwlock_clockrdlock(&e->drw, clk, abs);
    return wr ? dist_rwlock_wrlock(&e->drw) : dist_rwlock_rdlock(&e->drw);
}

/* Takes the distributed lock; the real mutex is held.  0, EBUSY,
 * ETIMEDOUT, EAGAIN (Redis unavailable and on_unavailable = fail, or out
 * of memory: an error every lock call of pthread may give, where ENOMEM is
 * none), or the library's error.  D_MUST blocks whatever on_unavailable
 * says but abort, and waits for memory too: a condition wait has to
 * return with the whole mutex. */
static int dist_take(struct pl_entry *e, int how, int wr, clockid_t clk,
                     const struct timespec *abs)
{
    struct pl_away away = PL_AWAY_INIT;
    int rc;
    PL_KEEP_ERRNO;

    for (;;) {
        rc = dist_try_once(e, how, wr, clk, abs);
        if (rc == ENOMEM && how != D_MUST) {
            pl_msg("lock '%s': out of memory: the call fails with EAGAIN",
                   e->lockname);
            rc = EAGAIN;
            break;
        }
        if (rc == ENOMEM) {
            pl_away_pause(&away);
            continue;
        }
        if (rc != EIO)
            break;
        pl_away_aborts("lock", e->lockname);
        if (pl_cfg.on_unavailable == PL_FAIL && how != D_MUST) {
            pl_msg("lock '%s': %s: the call fails with EAGAIN "
                   "(on_unavailable = fail)",
                   e->lockname, dist_last_error());
            rc = EAGAIN;
            break;
        }
        if (how == D_TRY) {
            rc = EBUSY;
            break;
        }
        rc = pl_away_block(&away, "lock", e->lockname, how == D_TIMED, clk,
                           abs);
        if (rc != 0)
            break;
    }
    if (away.told && rc == 0)
        pl_msg("lock '%s': Redis answers again; lock taken", e->lockname);
    return rc;
}

/* Gives the distributed lock back; the real mutex is still held.  A
 * release that Redis did not confirm is retried until it does: leaving the
 * hold behind would keep every other process out. */
static void dist_give(struct pl_entry *e)
{
    struct pl_away away = PL_AWAY_INIT;
    int rc;
    PL_KEEP_ERRNO;

    while ((rc = e->kind == PL_MUTEX ? dist_mutex_unlock(&e->dm)
                                     : dist_rwlock_unlock(&e->drw)) == EIO) {
        if (pl_cfg.on_unavailable == PL_ABORT)
            pl_die(
                "lock '%s': release failed: %s: aborting (on_unavailable = "
                "abort)",
                e->lockname, dist_last_error());
        if (!away.told++)
            pl_msg("lock '%s': release failed: %s: retrying until Redis "
                   "answers",
                   e->lockname, dist_last_error());
        pl_away_pause(&away);
    }
    /* EPERM: the hold was lost (on_lost said so) or was never ours (a
     * fork() child unlocking what its parent locked) */
    if (rc != 0 && rc != EPERM)
        pl_msg("lock '%s': release: %s", e->lockname, dist_last_error());
}

/* ---- mapped mutexes ------------------------------------------------------- */

/* The mapped paths stay out of line (MAPPED): inlined into a wrapper, they
 * would make its fast path save and restore registers it does not use. */
#define MAPPED static __attribute__((noinline))

/* The real mutex's lock call returned rc; when it took the mutex, the
 * distributed lock follows (how: D_BLOCK, D_TRY, or D_TIMED by abs on clk). */
MAPPED int mapped_lock(struct pl_entry *e, pthread_mutex_t *m, int rc,
                       int how, clockid_t clk, const struct timespec *abs)
{
    PL_KEEP_ERRNO;
    int rc2;

    if (rc != 0 && rc != EOWNERDEAD)
        return rc;
    if (rc == EOWNERDEAD)
        pl_set_holder(e, 0); /* the dead owner's record */
    if (pl_held_by_me(e)) {  /* a recursive mutex, again */
        __atomic_store_n(&e->depth, e->depth + 1, __ATOMIC_RELAXED);
        return rc;
    }
    rc2 = dist_take(e, how, 0, clk, abs);
    if (rc2 != 0 && rc2 != EOWNERDEAD) {
        /* ENOTRECOVERABLE too: nothing is taken, as glibc has it */
        REAL(FN_UNLOCK, lock_fn)(m);
        return rc2;
    }
    pl_set_holder(e, 1);
    /* a robust distributed mutex whose last holder, in any process, did
     * not release it: the program's own EOWNERDEAD handling repairs */
    return rc2 == EOWNERDEAD ? EOWNERDEAD : rc;
}

/* pthread_mutex_consistent on a mapped mutex: the distributed one's
 * owner-dead state, and the real one's (a robust mutex in shared memory
 * whose owner died is one too).  0 when either was inconsistent. */
MAPPED int mapped_consistent(struct pl_entry *e, pthread_mutex_t *m,
                             int (*real)(pthread_mutex_t *))
{
    PL_KEEP_ERRNO;
    int rc = real(m);

    if (pl_held_by_me(e) && dist_mutex_consistent(&e->dm) == 0)
        return 0;
    return rc;
}

MAPPED int mapped_unlock(struct pl_entry *e, pthread_mutex_t *m)
{
    PL_KEEP_ERRNO;
    unsigned d;

    if (!pl_held_by_me(e))
        return REAL(FN_UNLOCK, lock_fn)(m); /* EPERM, or as glibc does */
    d = __atomic_load_n(&e->depth, __ATOMIC_RELAXED);
    if (d > 1) {
        __atomic_store_n(&e->depth, d - 1, __ATOMIC_RELAXED);
        return REAL(FN_UNLOCK, lock_fn)(m);
    }
    pl_set_holder(e, 0);
    dist_give(e);
    return REAL(FN_UNLOCK, lock_fn)(m);
}

enum { W_WAIT, W_TIMED, W_CLOCK };

/* A thread cancelled in glibc's wait on an unmapped condition: glibc took
 * the real mutex back; the distributed one follows before the program's
 * cleanup handlers run, as after a wait. */
static void wait_cancelled(void *arg)
{
    struct pl_entry *e = arg;

    dist_take(e, D_MUST, 0, 0, NULL);
    pl_set_holder(e, 1);
}

static int real_wait(pthread_cond_t *c, pthread_mutex_t *m, int how, void *fn,
                     clockid_t clk, const struct timespec *abs)
{
    if (how == W_WAIT)
        return ((wait_fn)fn)(c, m);
    if (how == W_TIMED)
        return ((twait_fn)fn)(c, m, abs);
    return ((cwait_fn)fn)(c, m, clk, abs);
}

/* What glibc refuses in a wait before it lets go of the mutex. */
static int wait_refused(int how, clockid_t clk, const struct timespec *abs)
{
    if (how != W_WAIT && (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L))
        return 1;
    return how == W_CLOCK && clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC;
}

/* Whether this thread holds the mapped mutex e once: a wait with a mutex
 * locked recursively, or not held, is glibc's business. */
static int held_once(struct pl_entry *e)
{
    return pl_held_by_me(e) &&
           __atomic_load_n(&e->depth, __ATOMIC_RELAXED) == 1;
}

MAPPED int mapped_wait(struct pl_entry *e, pthread_cond_t *c,
                       pthread_mutex_t *m, int how, void *fn, clockid_t clk,
                       const struct timespec *abs)
{
    PL_KEEP_ERRNO;
    int rc;

    if (wait_refused(how, clk, abs))
        return EINVAL;
    if (!held_once(e))
        goto plain; /* not the holder, or locked recursively: as glibc */
    pl_set_holder(e, 0);
    dist_give(e);
    pthread_cleanup_push(wait_cancelled, e);
    rc = real_wait(c, m, how, fn, clk, abs);
    pthread_cleanup_pop(0);
    /* the real mutex is ours again: now the distributed one */
    dist_take(e, D_MUST, 0, 0, NULL);
    pl_set_holder(e, 1);
    return rc;
plain:
    return real_wait(c, m, how, fn, clk, abs);
}

/* A failed dist_cond wait: the wait ends as a spurious wake-up (POSIX
 * gives pthread_cond_wait no error for it), after a pause so that a
 * program looping on its predicate does not spin while Redis is away. */
static void cwait_failed(struct pl_entry *ce, int rc)
{
    if (rc == EINVAL) /* names in two slots of a cluster: never works */
        pl_die("condition '%s': %s: aborting (on a cluster, name the "
               "condition with its mutex's {hash tag})",
               ce->lockname, dist_last_error());
    if (rc == EIO)
        pl_away_aborts("condition", ce->lockname);
    pl_msg("condition '%s': %s: the wait ends early", ce->lockname,
           dist_last_error());
    pl_sleep_ms(100);
}

/* A wait on a mapped condition with a mapped mutex that this thread holds
 * once: a dist_cond_t wait.  The real mutex goes first while the
 * distributed one is still held, so no signaller that takes the mutex (in
 * this process or another) can come between; then dist_cond_* registers
 * the waiter and gives the distributed mutex up in one step.  It comes
 * back holding the distributed mutex, which is given back and taken again
 * after the real one: real first, the order every mapped lock is taken
 * in (a thread of ours blocked holding the real mutex waits for it). */
struct cwait_pair {
    struct pl_entry *me;
    pthread_mutex_t *m;
};

/* After dist_cond_*, which holds the distributed mutex again: real first. */
static void cwait_retake(struct pl_entry *me, pthread_mutex_t *m)
{
    uint64_t tok;

    if (dist_mutex_token(&me->dm, &tok) == 0)
        dist_give(me);
    REAL(FN_LOCK, lock_fn)(m);
    dist_take(me, D_MUST, 0, 0, NULL);
    pl_set_holder(me, 1);
}

/* A thread cancelled in dist_cond_*: the library took the distributed
 * mutex back; the whole mutex is the thread's before the program's cleanup
 * handlers run, as with glibc. */
static void cwait_cancelled(void *arg)
{
    struct cwait_pair *p = arg;

    cwait_retake(p->me, p->m);
}

MAPPED int mapped_cwait(struct pl_entry *ce, struct pl_entry *me,
                        pthread_cond_t *c, pthread_mutex_t *m, int how,
                        void *fn, clockid_t clk, const struct timespec *abs)
{
    PL_KEEP_ERRNO;
    struct cwait_pair pair = { me, m };
    int rc;

    if (wait_refused(how, clk, abs))
        return EINVAL;
    if (!held_once(me))
        return mapped_wait(me, c, m, how, fn, clk, abs);
    pl_set_holder(me, 0);
    REAL(FN_UNLOCK, lock_fn)(m);
    pthread_cleanup_push(cwait_cancelled, &pair);
    if (how == W_WAIT)
        rc = dist_cond_wait(&ce->dc, &me->dm);
    else
        rc = dist_cond_clockwait(&ce->dc, &me->dm,
                                 how == W_TIMED ? ce->clock : clk, abs);
    pthread_cleanup_pop(0);
    if (rc != 0 && rc != ETIMEDOUT)
        cwait_failed(ce, rc);
    cwait_retake(me, m);
    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

/* Wakes the distributed waiters of a mapped condition; a signal Redis did
 * not take is sent again until it does (a lost signal is a hang), unless
 * on_unavailable says fail (then it is dropped, with a message). */
MAPPED void mapped_signal(struct pl_entry *ce, int all)
{
    PL_KEEP_ERRNO;
    struct pl_away away = PL_AWAY_INIT;
    int rc;

    while ((rc = all ? dist_cond_broadcast(&ce->dc)
                     : dist_cond_signal(&ce->dc)) == EIO) {
        pl_away_aborts("condition", ce->lockname);
        if (pl_cfg.on_unavailable == PL_FAIL)
            break;
        if (!away.told++)
            pl_msg("condition '%s': %s: signalling again until Redis "
                   "answers",
                   ce->lockname, dist_last_error());
        pl_away_pause(&away);
    }
    if (rc != 0)
        pl_msg("condition '%s': signal: %s", ce->lockname, dist_last_error());
}

/* ---- the interposed functions -------------------------------------------- */

/* clang-format 14 breaks _Generic associations apart. */
/* clang-format off */
#define KIND_OF(p)                                                           \
    _Generic((p), pthread_rwlock_t *: PL_RWLOCK, pthread_cond_t *: PL_COND,  \
             pthread_barrier_t *: PL_BARRIER, sem_t *: PL_SEM,               \
             default: PL_MUTEX)
/* clang-format on */

/* The live entry of p if it is one of p's kind, or NULL. */
#define ENTRY_OF_KIND(p)                                                     \
    (pl_surely_plain(p) ? NULL : entry_of_kind((p), KIND_OF(p)))

static struct pl_entry *entry_of_kind(const void *p, int kind)
{
    struct pl_entry *e = entry_of(p);

    return e && e->kind == kind ? e : NULL;
}

/* Returns plain (glibc's call) unless m is mapped; a mapped call goes on
 * with e, counted.  (An entry of the other kind: the program reused the
 * memory without initialising it; glibc decides.) */
#define PLAIN_OR_MAPPED(m, plain, f)                                         \
    struct pl_entry *e;                                                      \
    if (PL_LIKELY(pl_surely_plain(m)))                                       \
        return plain;                                                        \
    if (!(e = entry_of(m)) || e->kind != KIND_OF(m))                         \
        return plain;                                                        \
    pl_count(f)

PL_WRAPPER(int, pl_mutex_lock, "pthread_mutex_lock@@GLIBC_2.2.5",
           pthread_mutex_t *m)
{
    PLAIN_OR_MAPPED(m, REAL(FN_LOCK, lock_fn)(m), FN_LOCK);
    return mapped_lock(e, m, REAL(FN_LOCK, lock_fn)(m), D_BLOCK, 0, NULL);
}

PL_WRAPPER(int, pl_mutex_unlock, "pthread_mutex_unlock@@GLIBC_2.2.5",
           pthread_mutex_t *m)
{
    PLAIN_OR_MAPPED(m, REAL(FN_UNLOCK, lock_fn)(m), FN_UNLOCK);
    return mapped_unlock(e, m);
}

#define TRYLOCK(fname, f, ver)                                               \
    PL_WRAPPER(int, fname, "pthread_mutex_trylock" ver, pthread_mutex_t *m)  \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, lock_fn)(m), f);                          \
        return mapped_lock(e, m, REAL(f, lock_fn)(m), D_TRY, 0, NULL);       \
    }
TRYLOCK(pl_mutex_trylock, FN_TRYLOCK, "@@GLIBC_2.34")
TRYLOCK(pl_mutex_trylock_old, FN_TRYLOCK_OLD, "@GLIBC_2.2.5")

#define TIMEDLOCK(fname, f, ver)                                             \
    PL_WRAPPER(int, fname, "pthread_mutex_timedlock" ver,                    \
               pthread_mutex_t *m, const struct timespec *abs)               \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, timed_fn)(m, abs), f);                    \
        return mapped_lock(e, m, REAL(f, timed_fn)(m, abs), D_TIMED,         \
                           CLOCK_REALTIME, abs);                             \
    }
TIMEDLOCK(pl_mutex_timedlock, FN_TIMEDLOCK, "@@GLIBC_2.34")
TIMEDLOCK(pl_mutex_timedlock_old, FN_TIMEDLOCK_OLD, "@GLIBC_2.2.5")

#define CLOCKLOCK(fname, f, ver)                                             \
    PL_WRAPPER(int, fname, "pthread_mutex_clocklock" ver,                    \
               pthread_mutex_t *m, clockid_t clk,                            \
               const struct timespec *abs)                                   \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, clock_fn)(m, clk, abs), f);               \
        return mapped_lock(e, m, REAL(f, clock_fn)(m, clk, abs), D_TIMED,    \
                           clk, abs);                                        \
    }
CLOCKLOCK(pl_mutex_clocklock, FN_CLOCKLOCK, "@@GLIBC_2.34")
CLOCKLOCK(pl_mutex_clocklock_old, FN_CLOCKLOCK_OLD, "@GLIBC_2.30")

typedef int (*consistent_fn)(pthread_mutex_t *);
#define CONSISTENT(fname, f, sym)                                            \
    PL_WRAPPER(int, fname, sym, pthread_mutex_t *m)                          \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, consistent_fn)(m), f);                    \
        return mapped_consistent(e, m, REAL(f, consistent_fn));              \
    }
CONSISTENT(pl_mutex_consistent, FN_CONSISTENT,
           "pthread_mutex_consistent@@GLIBC_2.34")
CONSISTENT(pl_mutex_consistent_old, FN_CONSISTENT_OLD,
           "pthread_mutex_consistent@GLIBC_2.12")
CONSISTENT(pl_mutex_consistent_np, FN_CONSISTENT_NP,
           "pthread_mutex_consistent_np@@GLIBC_2.4")

/* The slow path of every condition wait: c or m (or both) is mapped, or
 * start-up is not over. */
MAPPED int cond_slow(pthread_cond_t *c, pthread_mutex_t *m, int how, int f,
                     clockid_t clk, const struct timespec *abs)
{
    struct pl_entry *ce = ENTRY_OF_KIND(c), *me = ENTRY_OF_KIND(m);
    void *fn = pl_real[f];

    if (ce || me)
        pl_count(f);
    if (ce && me)
        return mapped_cwait(ce, me, c, m, how, fn, clk, abs);
    if (me)
        return mapped_wait(me, c, m, how, fn, clk, abs);
    return real_wait(c, m, how, fn, clk, abs);
}

#define BOTH_PLAIN(c, m) (pl_surely_plain(c) && pl_surely_plain(m))

#define CONDWAIT(fname, f, ver)                                              \
    PL_WRAPPER(int, fname, "pthread_cond_wait" ver, pthread_cond_t *c,       \
               pthread_mutex_t *m)                                           \
    {                                                                        \
        if (PL_LIKELY(BOTH_PLAIN(c, m)))                                     \
            return REAL(f, wait_fn)(c, m);                                   \
        return cond_slow(c, m, W_WAIT, f, 0, NULL);                          \
    }
CONDWAIT(pl_cond_wait, FN_WAIT, "@@GLIBC_2.3.2")
CONDWAIT(pl_cond_wait_old, FN_WAIT_OLD, "@GLIBC_2.2.5")

#define CONDTIMEDWAIT(fname, f, ver)                                         \
    PL_WRAPPER(int, fname, "pthread_cond_timedwait" ver, pthread_cond_t *c,  \
               pthread_mutex_t *m, const struct timespec *abs)               \
    {                                                                        \
        if (PL_LIKELY(BOTH_PLAIN(c, m)))                                     \
            return REAL(f, twait_fn)(c, m, abs);                             \
        return cond_slow(c, m, W_TIMED, f, 0, abs);                          \
    }
CONDTIMEDWAIT(pl_cond_timedwait, FN_TIMEDWAIT, "@@GLIBC_2.3.2")
CONDTIMEDWAIT(pl_cond_timedwait_old, FN_TIMEDWAIT_OLD, "@GLIBC_2.2.5")

#define CONDCLOCKWAIT(fname, f, ver)                                         \
    PL_WRAPPER(int, fname, "pthread_cond_clockwait" ver, pthread_cond_t *c,  \
               pthread_mutex_t *m, clockid_t clk,                            \
               const struct timespec *abs)                                   \
    {                                                                        \
        if (PL_LIKELY(BOTH_PLAIN(c, m)))                                     \
            return REAL(f, cwait_fn)(c, m, clk, abs);                        \
        return cond_slow(c, m, W_CLOCK, f, clk, abs);                        \
    }
CONDCLOCKWAIT(pl_cond_clockwait, FN_CLOCKWAIT, "@@GLIBC_2.34")
CONDCLOCKWAIT(pl_cond_clockwait_old, FN_CLOCKWAIT_OLD, "@GLIBC_2.30")

/* A signal or broadcast on a mapped condition reaches the distributed
 * waiters and then the local ones glibc knows of (the waits that stayed
 * local: with an unmapped mutex, or a recursively held one). */
#define CONDSIGNAL(fname, f, sym, all)                                       \
    PL_WRAPPER(int, fname, sym, pthread_cond_t *c)                           \
    {                                                                        \
        PLAIN_OR_MAPPED(c, REAL(f, csig_fn)(c), f);                          \
        mapped_signal(e, all);                                               \
        return REAL(f, csig_fn)(c);                                          \
    }
CONDSIGNAL(pl_cond_signal, FN_CSIGNAL, "pthread_cond_signal@@GLIBC_2.3.2", 0)
CONDSIGNAL(pl_cond_signal_old, FN_CSIGNAL_OLD,
           "pthread_cond_signal@GLIBC_2.2.5", 0)
CONDSIGNAL(pl_cond_broadcast, FN_CBROADCAST,
           "pthread_cond_broadcast@@GLIBC_2.3.2", 1)
CONDSIGNAL(pl_cond_broadcast_old, FN_CBROADCAST_OLD,
           "pthread_cond_broadcast@GLIBC_2.2.5", 1)

/* ---- mapped read-write locks -------------------------------------------------
 *
 * Every real hold has one distributed hold: a read lock taken n times by a
 * thread is n read holds on both sides, and dist_rwlock_unlock, like
 * pthread_rwlock_unlock, gives back the caller's write hold or else one of
 * its read holds.  A thread that holds nothing gets EPERM from the library
 * and glibc's behaviour from the real unlock. */

/* The real lock call returned rc; when it took the lock, the distributed
 * lock follows, for reading (wr 0) or writing (wr 1), how as mapped_lock. */
MAPPED int mapped_rw_lock(struct pl_entry *e, pthread_rwlock_t *rw, int rc,
                          int wr, int how, clockid_t clk,
                          const struct timespec *abs)
{
    PL_KEEP_ERRNO;

    if (rc != 0)
        return rc;
    rc = dist_take(e, how, wr, clk, abs);
    if (rc != 0)
        REAL(FN_RWUNLOCK, rw_fn)(rw);
    return rc;
}

#define RWLOCK(fname, f, sym, wr, how)                                       \
    PL_WRAPPER(int, fname, sym, pthread_rwlock_t *rw)                        \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rw_fn)(rw), f);                          \
        return mapped_rw_lock(e, rw, REAL(f, rw_fn)(rw), wr, how, 0, NULL);  \
    }
RWLOCK(pl_rwlock_rdlock, FN_RDLOCK, "pthread_rwlock_rdlock@@GLIBC_2.34", 0,
       D_BLOCK)
RWLOCK(pl_rwlock_rdlock_old, FN_RDLOCK_OLD,
       "pthread_rwlock_rdlock@GLIBC_2.2.5", 0, D_BLOCK)
RWLOCK(pl_rwlock_wrlock, FN_WRLOCK, "pthread_rwlock_wrlock@@GLIBC_2.34", 1,
       D_BLOCK)
RWLOCK(pl_rwlock_wrlock_old, FN_WRLOCK_OLD,
       "pthread_rwlock_wrlock@GLIBC_2.2.5", 1, D_BLOCK)
RWLOCK(pl_rwlock_tryrdlock, FN_TRYRDLOCK,
       "pthread_rwlock_tryrdlock@@GLIBC_2.34", 0, D_TRY)
RWLOCK(pl_rwlock_tryrdlock_old, FN_TRYRDLOCK_OLD,
       "pthread_rwlock_tryrdlock@GLIBC_2.2.5", 0, D_TRY)
RWLOCK(pl_rwlock_trywrlock, FN_TRYWRLOCK,
       "pthread_rwlock_trywrlock@@GLIBC_2.34", 1, D_TRY)
RWLOCK(pl_rwlock_trywrlock_old, FN_TRYWRLOCK_OLD,
       "pthread_rwlock_trywrlock@GLIBC_2.2.5", 1, D_TRY)

#define RWTIMED(fname, f, sym, wr)                                           \
    PL_WRAPPER(int, fname, sym, pthread_rwlock_t *rw,                        \
               const struct timespec *abs)                                   \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rwtimed_fn)(rw, abs), f);                \
        return mapped_rw_lock(e, rw, REAL(f, rwtimed_fn)(rw, abs), wr,       \
                              D_TIMED, CLOCK_REALTIME, abs);                 \
    }
RWTIMED(pl_rwlock_timedrdlock, FN_TIMEDRDLOCK,
        "pthread_rwlock_timedrdlock@@GLIBC_2.34", 0)
RWTIMED(pl_rwlock_timedrdlock_old, FN_TIMEDRDLOCK_OLD,
        "pthread_rwlock_timedrdlock@GLIBC_2.2.5", 0)
RWTIMED(pl_rwlock_timedwrlock, FN_TIMEDWRLOCK,
        "pthread_rwlock_timedwrlock@@GLIBC_2.34", 1)
RWTIMED(pl_rwlock_timedwrlock_old, FN_TIMEDWRLOCK_OLD,
        "pthread_rwlock_timedwrlock@GLIBC_2.2.5", 1)

#define RWCLOCK(fname, f, sym, wr)                                           \
    PL_WRAPPER(int, fname, sym, pthread_rwlock_t *rw, clockid_t clk,         \
               const struct timespec *abs)                                   \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rwclock_fn)(rw, clk, abs), f);           \
        return mapped_rw_lock(e, rw, REAL(f, rwclock_fn)(rw, clk, abs), wr,  \
                              D_TIMED, clk, abs);                            \
    }
RWCLOCK(pl_rwlock_clockrdlock, FN_CLOCKRDLOCK,
        "pthread_rwlock_clockrdlock@@GLIBC_2.34", 0)
RWCLOCK(pl_rwlock_clockrdlock_old, FN_CLOCKRDLOCK_OLD,
        "pthread_rwlock_clockrdlock@GLIBC_2.30", 0)
RWCLOCK(pl_rwlock_clockwrlock, FN_CLOCKWRLOCK,
        "pthread_rwlock_clockwrlock@@GLIBC_2.34", 1)
RWCLOCK(pl_rwlock_clockwrlock_old, FN_CLOCKWRLOCK_OLD,
        "pthread_rwlock_clockwrlock@GLIBC_2.30", 1)

#define RWUNLOCK(fname, f, sym)                                              \
    PL_WRAPPER(int, fname, sym, pthread_rwlock_t *rw)                        \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rw_fn)(rw), f);                          \
        dist_give(e);                                                        \
        return REAL(f, rw_fn)(rw);                                           \
    }
RWUNLOCK(pl_rwlock_unlock, FN_RWUNLOCK, "pthread_rwlock_unlock@@GLIBC_2.34")
RWUNLOCK(pl_rwlock_unlock_old, FN_RWUNLOCK_OLD,
         "pthread_rwlock_unlock@GLIBC_2.2.5")

/* ---- init and destroy: the heap locks of init_site ---------------------- */

/* A mapped mutex follows its program's PTHREAD_MUTEX_ROBUST: the
 * distributed mutex is made robust (or not) to match.  One that cannot be
 * made again keeps what it was, and says so. */
static void robust_map(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    struct pl_entry *e = ENTRY_OF_KIND(m);
    int robust = 0;

    if (!e)
        return;
    if (a && pthread_mutexattr_getrobust(a, &robust) != 0)
        robust = 0;
    if (pl_entry_robust(e, robust == PTHREAD_MUTEX_ROBUST) != 0)
        pl_msg("lock '%s': cannot make it %srobust: %s", e->lockname,
               robust == PTHREAD_MUTEX_ROBUST ? "" : "not ",
               dist_last_error());
}

/* glibc's init of the lock at m, called from ra, succeeded: site.c maps it
 * or unmaps what it left at m.  0, or ENOMEM. */
static int site_map(void *m, uintptr_t ra, int kind, int f, clockid_t clk)
{
    if (!pl_nsites || pl_in_shim)
        return 0;
    pl_count(f);
    return pl_site_init(m, ra, kind, clk);
}

/* glibc's init of a mutex succeeded: an init_site maps it, robust or not
 * as its attributes say.  0, or ENOMEM. */
static int mutex_inited(pthread_mutex_t *m, const pthread_mutexattr_t *a,
                        uintptr_t ra, int f)
{
    int rc = site_map(m, ra, PL_MUTEX, f, 0);

    if (rc == 0 && !pl_in_shim)
        robust_map(m, a);
    return rc;
}

/* A condition's clock, from the attributes of its init. */
static clockid_t attr_clock(const pthread_condattr_t *a)
{
    clockid_t clk = CLOCK_REALTIME;

    if (a)
        pthread_condattr_getclock(a, &clk);
    return clk;
}

/* glibc's init of a condition succeeded: an init_site maps it; a mapped
 * static one takes its (new) clock.  0, or ENOMEM. */
static int cond_inited(pthread_cond_t *c, const pthread_condattr_t *a,
                       uintptr_t ra, int f)
{
    struct pl_entry *e;
    int rc = site_map(c, ra, PL_COND, f, attr_clock(a));

    if (rc == 0 && !pl_in_shim && (e = ENTRY_OF_KIND(c)) && !e->dynamic)
        e->clock = attr_clock(a);
    return rc;
}

/* glibc's init of a barrier for count succeeded: an init_site maps it, and
 * a mapped barrier (static or heap) gets its distributed barrier, for its
 * section's parties or else count.  0, ENOMEM or EINVAL. */
static int barrier_inited(pthread_barrier_t *b, unsigned count, uintptr_t ra,
                          int f)
{
    PL_KEEP_ERRNO;
    struct pl_entry *e;
    int rc = site_map(b, ra, PL_BARRIER, f, 0);

    if (rc != 0 || pl_in_shim || !(e = ENTRY_OF_KIND(b)))
        return rc;
    pl_count(f);
    if ((rc = pl_entry_barrier(e, count)) != 0)
        pl_msg("barrier '%s': %s", e->lockname, dist_last_error());
    return rc;
}

/* glibc's init f of the lock at p, of kind, succeeded: what that kind
 * does next (above), with a, its attributes, or count, a barrier's. */
static int inited(void *p, int kind, const void *a, unsigned count,
                  uintptr_t ra, int f)
{
    if (kind == PL_MUTEX)
        return mutex_inited(p, a, ra, f);
    if (kind == PL_COND)
        return cond_inited(p, a, ra, f);
    if (kind == PL_BARRIER)
        return barrier_inited(p, count, ra, f);
    return site_map(p, ra, PL_RWLOCK, f, 0);
}

/* glibc's destroy fd of the lock at p, of kind. */
static void real_destroy(void *p, int kind, int fd)
{
    if (kind == PL_MUTEX)
        REAL(fd, lock_fn)(p);
    else if (kind == PL_RWLOCK)
        REAL(fd, rw_fn)(p);
    else if (kind == PL_COND)
        REAL(fd, csig_fn)(p);
    else
        REAL(fd, bwait_fn)(p);
}

/* The end of every init wrapper: glibc's init f of the lock at p, called
 * from ra, returned rc.  A lock it initialised is mapped, or else
 * destroyed again by glibc's fd, so that an init that fails (ENOMEM, or
 * EINVAL for a barrier) leaves nothing initialised, as glibc's own. */
static int init_done(void *p, int kind, const void *a, unsigned count,
                     uintptr_t ra, int f, int fd, int rc)
{
    if (rc == 0 && (rc = inited(p, kind, a, count, ra, f)) != 0)
        real_destroy(p, kind, fd);
    return rc;
}

/* glibc's init f, of type, start-up done first: it finds glibc's
 * functions (pl_real). */
#define REAL_INIT(f, type) (pl_table_now(), REAL(f, type))

/* The caller of an init wrapper: which init_site it is. */
#define INIT_CALLER() ((uintptr_t)__builtin_return_address(0))

/* pthread_mutex_init, pthread_rwlock_init, pthread_cond_init: the lock
 * at p of type, kind and attribute type at; glibc's init f, of init_type,
 * and its destroy fd. */
#define LOCKINIT(fname, type, at, kind, init_type, f, fd, sym)               \
    PL_WRAPPER(int, fname, sym, type *p, const at *a)                        \
    {                                                                        \
        return init_done(p, kind, a, 0, INIT_CALLER(), f, fd,                \
                         REAL_INIT(f, init_type)(p, a));                     \
    }
LOCKINIT(pl_mutex_init, pthread_mutex_t, pthread_mutexattr_t, PL_MUTEX,
         init_fn, FN_INIT, FN_DESTROY, "pthread_mutex_init@@GLIBC_2.2.5")
LOCKINIT(pl_rwlock_init, pthread_rwlock_t, pthread_rwlockattr_t, PL_RWLOCK,
         rwinit_fn, FN_RWINIT, FN_RWDESTROY,
         "pthread_rwlock_init@@GLIBC_2.34")
LOCKINIT(pl_rwlock_init_old, pthread_rwlock_t, pthread_rwlockattr_t,
         PL_RWLOCK, rwinit_fn, FN_RWINIT_OLD, FN_RWDESTROY_OLD,
         "pthread_rwlock_init@GLIBC_2.2.5")
LOCKINIT(pl_cond_init, pthread_cond_t, pthread_condattr_t, PL_COND, cinit_fn,
         FN_CINIT, FN_CDESTROY, "pthread_cond_init@@GLIBC_2.3.2")
LOCKINIT(pl_cond_init_old, pthread_cond_t, pthread_condattr_t, PL_COND,
         cinit_fn, FN_CINIT_OLD, FN_CDESTROY_OLD,
         "pthread_cond_init@GLIBC_2.2.5")

#define BARRIERINIT(fname, f, fd, sym)                                       \
    PL_WRAPPER(int, fname, sym, pthread_barrier_t *b,                        \
               const pthread_barrierattr_t *a, unsigned count)               \
    {                                                                        \
        return init_done(b, PL_BARRIER, a, count, INIT_CALLER(), f, fd,      \
                         REAL_INIT(f, binit_fn)(b, a, count));               \
    }
BARRIERINIT(pl_barrier_init, FN_BINIT, FN_BDESTROY,
            "pthread_barrier_init@@GLIBC_2.34")
BARRIERINIT(pl_barrier_init_old, FN_BINIT_OLD, FN_BDESTROY_OLD,
            "pthread_barrier_init@GLIBC_2.2.5")

/* ---- barriers ------------------------------------------------------------ */

/* A wait on a mapped barrier is a dist_barrier_t wait: 0 or
 * PTHREAD_BARRIER_SERIAL_THREAD, or EOWNERDEAD when a member died during
 * the round (no pthread error says that; the program sees it as it is). */
MAPPED int mapped_barrier_wait(struct pl_entry *e)
{
    PL_KEEP_ERRNO;
    struct pl_away away = PL_AWAY_INIT;
    int rc;

    while ((rc = dist_barrier_wait(&e->db)) == EIO) {
        pl_away_aborts("barrier", e->lockname);
        if (pl_cfg.on_unavailable == PL_FAIL)
            return EAGAIN;
        pl_away_block(&away, "barrier", e->lockname, 0, 0, NULL);
    }
    if (rc == DIST_BARRIER_SERIAL_THREAD)
        return PTHREAD_BARRIER_SERIAL_THREAD;
    return rc;
}

#define BARRIERWAIT(fname, f, sym)                                           \
    PL_WRAPPER(int, fname, sym, pthread_barrier_t *b)                        \
    {                                                                        \
        PLAIN_OR_MAPPED(b, REAL(f, bwait_fn)(b), f);                         \
        if (!e->binit)                                                       \
            return REAL(f, bwait_fn)(b);                                     \
        return mapped_barrier_wait(e);                                       \
    }
BARRIERWAIT(pl_barrier_wait, FN_BWAIT, "pthread_barrier_wait@@GLIBC_2.34")
BARRIERWAIT(pl_barrier_wait_old, FN_BWAIT_OLD,
            "pthread_barrier_wait@GLIBC_2.2.5")

/* A destroyed barrier leaves its distributed barrier; a heap one is
 * unmapped too. */
#define BARRIERDESTROY(fname, f, sym)                                        \
    PL_WRAPPER(int, fname, sym, pthread_barrier_t *b)                        \
    {                                                                        \
        PLAIN_OR_MAPPED(b, REAL(f, bwait_fn)(b), f);                         \
        barrier_leave(e);                                                    \
        return REAL(f, bwait_fn)(b);                                         \
    }

MAPPED void barrier_leave(struct pl_entry *e)
{
    PL_KEEP_ERRNO;

    if (e->dynamic && !pl_in_shim) {
        pl_site_forget(e);
    } else if (e->binit) {
        dist_barrier_destroy(&e->db);
        e->binit = 0;
    }
}
BARRIERDESTROY(pl_barrier_destroy, FN_BDESTROY,
               "pthread_barrier_destroy@@GLIBC_2.34")
BARRIERDESTROY(pl_barrier_destroy_old, FN_BDESTROY_OLD,
               "pthread_barrier_destroy@GLIBC_2.2.5")

/* A destroyed heap lock takes its distributed lock with it. */
#define DESTROY(fname, type, f, fn_type, sym)                                \
    PL_WRAPPER(int, fname, sym, type *l)                                     \
    {                                                                        \
        struct pl_entry *e;                                                  \
        int rc;                                                              \
                                                                             \
        if (PL_LIKELY(pl_surely_plain(l)))                                   \
            return REAL(f, fn_type)(l);                                      \
        e = entry_of(l);                                                     \
        rc = REAL(f, fn_type)(l);                                            \
        if (rc == 0 && e && e->dynamic && !pl_in_shim) {                     \
            pl_count(f);                                                     \
            pl_site_forget(e);                                               \
        }                                                                    \
        return rc;                                                           \
    }
DESTROY(pl_mutex_destroy, pthread_mutex_t, FN_DESTROY, lock_fn,
        "pthread_mutex_destroy@@GLIBC_2.2.5")
DESTROY(pl_rwlock_destroy, pthread_rwlock_t, FN_RWDESTROY, rw_fn,
        "pthread_rwlock_destroy@@GLIBC_2.34")
DESTROY(pl_rwlock_destroy_old, pthread_rwlock_t, FN_RWDESTROY_OLD, rw_fn,
        "pthread_rwlock_destroy@GLIBC_2.2.5")
DESTROY(pl_cond_destroy, pthread_cond_t, FN_CDESTROY, csig_fn,
        "pthread_cond_destroy@@GLIBC_2.3.2")
DESTROY(pl_cond_destroy_old, pthread_cond_t, FN_CDESTROY_OLD, csig_fn,
        "pthread_cond_destroy@GLIBC_2.2.5")
