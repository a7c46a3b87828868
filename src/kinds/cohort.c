/* cohort.c: lock cohorting for non-fair mutexes (dist_mutexattr_setcohort).
 *
 * The threads of one process that use a cohort mutex act in Redis as one
 * owner, "<uuid>:<no>", where no is drawn once per name from the thread
 * numbers' counter.  A thread first takes the local turn (one at a time,
 * FIFO, each waiter sleeping on its own condition variable so that a
 * hand-off wakes exactly one thread); only the turn's holder calls the
 * engine, as the cohort's owner (dist__ident_push).  An unlock with local
 * waiters keeps the Redis hold, for a bounded time and number of
 * hand-offs, so other processes still get their turns; then the hold is
 * released in Redis and the next local thread acquires it anew.
 *
 * While the hold is kept, a thread's unlock passes the turn straight to the
 * first waiter (FIFO) once that thread has had a short run of turns (RUN_*);
 * before that it only frees the turn, and whoever locks next takes it: in a
 * loop, the same thread, without a wake-up or a context switch.  A wake-up
 * per turn would cost more than the turn (S5 in docs/performance.md).
 * The first waiter looks every COHORT_POLL_MS, so a turn freed by a thread
 * that does not come back is taken within that.
 *
 * Lock order: the cohort's mu is a leaf: nothing else is taken under it
 * (the fork hook takes it after the state's mu). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "engine/engine.h"
#include "kinds.h"
#include "base/stats.h"

/* A Redis hold passes between local threads for at most this long and this
 * many times: a process waiting in Redis then waits about COHORT_MAX_MS
 * plus a hand-off between processes (see docs/api.md, Lock cohorting). */
#define COHORT_MAX_MS       5
#define COHORT_MAX_HANDOFFS 1000 /* from one thread to another */
/* A thread's run: turns in a row it may take back without passing the
 * turn to the first waiter (bounds a local waiter's wait to a few runs). */
#define RUN_MAX             16
#define RUN_MAX_NS          50000ull
#define COHORT_POLL_MS      1

/* A local waiter, on its own stack.  Under the cohort's mu. */
struct turn {
    struct turn *next;
    pthread_cond_t cv;
    uint64_t tno; /* its own thread number */
    int granted;  /* the turn is its own now */
    int polling;  /* first in line, looking for a freed
                                   * turn every COHORT_POLL_MS */
};

/* Per name and process.  Fields under mu. */
struct dist__cohort {
    struct dist__local base; /* first: the engine frees it by this */
    pthread_mutex_t mu;
    uint64_t no;         /* the owner number Redis sees */
    int busy;            /* a local thread has the turn */
    uint64_t owner;      /* its own thread number */
    unsigned long depth; /* its recursive holds */
    int held;            /* the cohort holds the lock in Redis */
    unsigned handoffs;   /* local hand-offs of that hold */
    uint64_t since;      /* when that hold was taken (monotonic ms) */
    uint64_t run_tno;    /* the thread of the current run */
    unsigned run_n;      /* turns it took in the run */
    uint64_t run_start;  /* when the run began (monotonic ns) */
    struct turn *head, *tail;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The turn is the calling thread's now (mu held). */
static void take_turn(struct dist__cohort *co, uint64_t me)
{
    co->busy = 1;
    co->owner = me;
    co->depth = 1;
    if (co->run_tno != me) {
        co->run_tno = me;
        co->run_n = 0;
        co->run_start = now_ns();
    }
    co->run_n++;
}

static const char *name_of(const struct dist__obj *o)
{
    return o->st->names->name.p;
}

static void cohort_free(void *local)
{
    struct dist__cohort *co = local;

    pthread_mutex_destroy(&co->mu);
    free(co);
}

/* fork(): phase 0 takes mu (the state's mu held), 1 lets go in the parent,
 * 2 in the child, which has neither the parent's Redis hold (its owner id
 * is new) nor its other threads: it starts with nobody in the cohort. */
static void cohort_fork(void *local, int phase)
{
    struct dist__cohort *co = local;

    if (phase == 0) {
        pthread_mutex_lock(&co->mu);
        return;
    }
    if (phase == 2) {
        co->busy = co->held = 0;
        co->owner = 0;
        co->depth = 0;
        co->handoffs = 0;
        co->run_tno = 0;
        co->head = co->tail = NULL;
    }
    pthread_mutex_unlock(&co->mu);
}

static const struct dist__local_ops cohort_ops = { cohort_free, cohort_fork };

/* The name's cohort, made at first use.  NULL when out of memory. */
static struct dist__cohort *cohort_of(struct dist__obj *o)
{
    struct dist__state *st = o->st;
    struct dist__cohort *co =
        (struct dist__cohort *)__atomic_load_n(&st->local, __ATOMIC_ACQUIRE);

    if (co)
        return co;
    pthread_mutex_lock(&st->mu);
    if (!(co = (struct dist__cohort *)st->local) &&
        (co = calloc(1, sizeof *co)) != NULL) {
        pthread_mutex_init(&co->mu, NULL);
        co->no = dist__thread_no_new();
        co->base.ops = &cohort_ops;
        __atomic_store_n(&st->local, &co->base, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&st->mu);
    return co;
}

/* Gives the turn to the first waiter (with one hold), or frees it.  mu
 * held. */
static void pass_turn(struct dist__cohort *co)
{
    struct turn *t = co->head;

    if (!t) {
        co->busy = 0;
        co->owner = 0;
        co->depth = 0;
        return;
    }
    co->head = t->next;
    if (!co->head)
        co->tail = NULL;
    co->owner = t->tno;
    co->depth = 1;
    co->run_tno = t->tno;
    co->run_n = 1;
    co->run_start = now_ns();
    t->granted = 1;
    pthread_cond_signal(&t->cv);
}

/* Frees the turn without passing it: the next lock takes it, or the first
 * waiter when it looks (told now if it is not looking yet).  mu held. */
static void free_turn(struct dist__cohort *co)
{
    co->busy = 0;
    co->owner = 0;
    co->depth = 0;
    if (co->head && !co->head->polling)
        pthread_cond_signal(&co->head->cv);
}

static void unqueue(struct dist__cohort *co, struct turn *t)
{
    struct turn **pp, *prev = NULL;

    for (pp = &co->head; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            if (co->tail == t)
                co->tail = prev;
            return;
        }
    }
}

/* Sleeps until the turn is passed to this thread, or until dl.  mu held. */
static int wait_turn(struct dist__cohort *co, struct dist__obj *o,
                     uint64_t me, const struct dist__deadline *dl)
{
    struct turn t = { .tno = me };
    struct timespec ts;
    uint64_t until = 0;
    int rc;

    if (dl && (rc = dist__deadline_ms(dl, &until)) != 0)
        return rc;
    if ((rc = dist__cond_init_mono(&t.cv)) != 0)
        return dist__err_lock(rc, "mutex", name_of(o),
                              ": no condition variable to wait on");
    if (co->tail)
        co->tail->next = &t;
    else
        co->head = &t;
    co->tail = &t;
    while (!t.granted) {
        uint64_t wake = 0;
        if (co->head == &t && !co->busy) {
            unqueue(co, &t); /* a freed turn: first in line */
            take_turn(co, me);
            break;
        }
        if (co->head == &t) {
            t.polling = 1;
            wake = dist__now_ms() + COHORT_POLL_MS;
        }
        if (dl && (!wake || until < wake))
            wake = until;
        if (!wake) {
            pthread_cond_wait(&t.cv, &co->mu);
            continue;
        }
        dist__ms_to_ts(wake, &ts);
        if (pthread_cond_timedwait(&t.cv, &co->mu, &ts) == ETIMEDOUT &&
            !t.granted && dl && wake == until &&
            dist__deadline_step(dl, &until) &&
            !(co->head == &t && !co->busy)) {
            unqueue(co, &t);
            rc = dist__err_lock(ETIMEDOUT, "mutex", name_of(o),
                                " is held by another thread of this process "
                                "(cohort) until past the deadline");
            break;
        }
    }
    pthread_cond_destroy(&t.cv);
    if (rc == ETIMEDOUT)
        dist__stat_add(DIST__ST_TIMEDOUT, 1);
    return rc;
}

/* The turn's holder takes the lock in Redis as the cohort's owner; on
 * failure the next waiter gets the turn and tries Redis itself. */
static int from_redis(struct dist__cohort *co, struct dist__obj *o,
                      int try_only, const struct dist__deadline *dl)
{
    uint64_t old = dist__ident_push(co->no);
    int rc = dist__acquire(o, 0, try_only, dl);

    dist__ident_pop(old);
    pthread_mutex_lock(&co->mu);
    if (rc == 0) {
        co->held = 1;
        co->handoffs = 0;
        co->since = dist__now_ms();
    } else {
        pass_turn(co);
    }
    pthread_mutex_unlock(&co->mu);
    return rc;
}

int dist__cohort_lock(struct dist__obj *o, int try_only,
                      const struct dist__deadline *dl)
{
    struct dist__cohort *co = cohort_of(o);
    uint64_t me = dist__thread_no();
    int rc = 0, held;

    if (!co)
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_lock(&co->mu);
    if (co->busy && co->owner == me) {
        if (o->flags & DIST__MUTEX_ERRORCHECK)
            rc =
                dist__err_lock(try_only ? EBUSY : EDEADLK, "mutex",
                               name_of(o), " is already held by this thread");
        else
            co->depth++;
        pthread_mutex_unlock(&co->mu);
        return rc;
    }
    if (co->busy && try_only) {
        pthread_mutex_unlock(&co->mu);
        dist__stat_add(DIST__ST_BUSY, 1);
        return dist__err_lock(
            EBUSY, "mutex", name_of(o),
            " is held by another thread of this process (cohort)");
    }
    if (co->busy)
        rc = wait_turn(co, o, me, dl);
    else
        take_turn(co, me); /* waiters or not: see the top */
    held = co->held;
    pthread_mutex_unlock(&co->mu);
    if (rc != 0 || held)
        return rc; /* held: a local hand-off, the hold goes on */
    return from_redis(co, o, try_only, dl);
}

/* Whether the cohort's Redis hold is still believed alive (the renewal
 * thread marks one it finds gone). */
static int alive(struct dist__cohort *co, struct dist__obj *o)
{
    uint64_t old = dist__ident_push(co->no);
    unsigned long n = dist__held(o, 0);

    dist__ident_pop(old);
    return n > 0;
}

/* Whether the hold may pass to a local waiter: within the bounds, and
 * alive.  mu held; let go and taken again around the check. */
static int may_hand_off(struct dist__cohort *co, struct dist__obj *o)
{
    int ok;

    if (!co->head || !co->held || co->handoffs >= COHORT_MAX_HANDOFFS ||
        dist__now_ms() - co->since >= COHORT_MAX_MS)
        return 0;
    pthread_mutex_unlock(&co->mu);
    ok = alive(co, o);
    pthread_mutex_lock(&co->mu);
    return ok && co->head; /* that waiter may have timed out meanwhile */
}

/* An unlock of one of several recursive holds: one fewer, unless the hold
 * was found lost.  Then this unlock is the last, as a plain recursive
 * mutex's is: it lets go of them all and says EPERM, the lost handler
 * told first (before, it said 0, and only the last unlock told).  Returns
 * whether holds remain.  mu held; let go and taken again around the
 * check (only the owner changes depth). */
static int one_fewer(struct dist__cohort *co, struct dist__obj *o)
{
    int ok;

    if (co->depth <= 1)
        return 0;
    pthread_mutex_unlock(&co->mu);
    ok = alive(co, o);
    pthread_mutex_lock(&co->mu);
    if (ok)
        co->depth--;
    return ok;
}

int dist__cohort_unlock(struct dist__obj *o)
{
    struct dist__cohort *co = cohort_of(o);
    uint64_t me = dist__thread_no(), old;
    int rc = 0, held;

    if (!co)
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_lock(&co->mu);
    if (!co->busy || co->owner != me) {
        pthread_mutex_unlock(&co->mu);
        return dist__err_lock(EPERM, "mutex", name_of(o),
                              " is not held by this thread");
    }
    if (one_fewer(co, o)) {
        pthread_mutex_unlock(&co->mu);
        return 0;
    }
    co->depth = 0;
    if (may_hand_off(co, o)) {
        if (co->run_tno == me && co->run_n < RUN_MAX &&
            now_ns() - co->run_start < RUN_MAX_NS) {
            free_turn(co);
        } else {
            co->handoffs++;
            pass_turn(co);
        }
        pthread_mutex_unlock(&co->mu);
        return 0;
    }
    held = co->held;
    co->held = 0;
    pthread_mutex_unlock(&co->mu);
    if (held) {
        /* never deferred: the reply would sit on this thread's connection
         * while the next owner, another thread, acts on the release */
        old = dist__ident_push(co->no);
        rc = dist__release_waiting(o);
        dist__ident_pop(old);
    }
    pthread_mutex_lock(&co->mu);
    pass_turn(co);
    pthread_mutex_unlock(&co->mu);
    return rc;
}

/* The calling thread holds o's cohort: then, in *old, the identity it
 * had before it took the cohort's number, under which the hold in Redis
 * is (the caller pops it back); else EPERM. */
static int as_cohort(struct dist__obj *o, uint64_t *old)
{
    struct dist__cohort *co = cohort_of(o);
    int mine;

    if (!co)
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_lock(&co->mu);
    mine = co->busy && co->owner == dist__thread_no();
    pthread_mutex_unlock(&co->mu);
    if (!mine)
        return dist__err_lock(EPERM, "mutex", name_of(o),
                              " is not held by this thread");
    *old = dist__ident_push(co->no);
    return 0;
}

int dist__cohort_token(struct dist__obj *o, uint64_t *token)
{
    uint64_t old;
    int rc = as_cohort(o, &old);

    if (rc)
        return rc;
    rc = dist__token(o, 0, token);
    dist__ident_pop(old);
    return rc;
}

int dist__cohort_lease_left(struct dist__obj *o, struct timespec *left)
{
    uint64_t old;
    int rc;

    left->tv_sec = 0;
    left->tv_nsec = 0;
    if ((rc = as_cohort(o, &old)) != 0)
        return rc;
    rc = dist__lease_left(o, left);
    dist__ident_pop(old);
    return rc;
}

int dist__cohort_busy(struct dist__obj *o)
{
    struct dist__cohort *co = (struct dist__cohort *)__atomic_load_n(
        &o->st->local, __ATOMIC_ACQUIRE);
    int busy = 0;

    if (co) {
        pthread_mutex_lock(&co->mu);
        busy = co->busy || co->head;
        pthread_mutex_unlock(&co->mu);
    }
    return busy;
}
