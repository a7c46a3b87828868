/* cond.c: the dist_cond API: a waiter registers (kind_cond.c), gives up the
 * mutex through the engine, sleeps on the condition's channel until its mark
 * is there, then takes the mutex back through the engine (call.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* ---- objects ---------------------------------------------------------------- */

int dist_cond_init(dist_cond_t *c, const char *name,
                   const dist_condattr_t *attr)
{
    DIST__KEEP_ERRNO;
    struct dist__cond *cv;
    int clock, rc;

    if ((rc = dist__init_args(c, attr, &dist__attr_cond_clock, &clock)) != 0)
        return rc;
    if ((rc = dist__cond_new(name, (clockid_t)clock, &cv)) != 0)
        return rc;
    c->__name = NULL;
    dist__stamp(c->__reserved);
    __atomic_store_n((struct dist__cond **)&c->__impl, cv, __ATOMIC_RELEASE);
    return 0;
}

/* The object behind c, created at first use for DIST_COND_INITIALIZER. */
static int get_cond(dist_cond_t *c, struct dist__cond **out)
{
    struct dist__cond *cv, *expected = NULL;
    int rc;

    if (!c)
        return dist__err(EINVAL, "condition is NULL");
    cv = dist__impl_load(&c->__impl, c->__reserved, DIST__COND_MAGIC,
                         "condition", &rc);
    if (rc || cv) {
        *out = cv;
        return rc;
    }
    if (!c->__name)
        return dist__err(EINVAL, "condition has no name: use dist_cond_init "
                                 "or DIST_COND_INITIALIZER");
    if ((rc = dist__cond_new(c->__name, CLOCK_REALTIME, &cv)) != 0)
        return rc;
    dist__stamp(c->__reserved); /* before cv is seen, as at init */
    if (!__atomic_compare_exchange_n((struct dist__cond **)&c->__impl,
                                     &expected, cv, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        dist__cond_free(cv); /* another thread won the race */
        cv = expected;
    }
    *out = cv;
    return 0;
}

/* ---- the local waits --------------------------------------------------------- */

/* One wait of a local thread, listed on its condition from its start to
 * its end.  A destroy asks Redis about those asleep, and a condition
 * destroyed while woken threads still leave is freed by the last one. */
enum { WT_ENTERING, WT_ASLEEP, WT_WOKEN };
struct dist__cond_wt {
    struct dist__cond_wt *next;
    int phase;
    char owner[64]; /* in the queue while not signalled */
};

/* cv->mu held.  In a child of fork() the list is the parent's: its
 * threads are not the child's, and their records were on their stacks,
 * which the child may reuse. */
static void wts_own(struct dist__cond *cv)
{
    unsigned long gen = atomic_load(&dist__fork_gen);

    if (cv->wts_gen != gen) {
        cv->wts = NULL;
        cv->wts_gen = gen;
    }
}

static void wt_enter(struct dist__cond *cv, struct dist__cond_wt *wt)
{
    size_t len;
    const char *owner = dist__owner(&len);

    wt->phase = WT_ENTERING;
    snprintf(wt->owner, sizeof wt->owner, "%.*s", (int)len, owner);
    pthread_mutex_lock(&cv->mu);
    wts_own(cv);
    wt->next = cv->wts;
    cv->wts = wt;
    cv->entered++;
    pthread_mutex_unlock(&cv->mu);
}

static void wt_phase(struct dist__cond *cv, struct dist__cond_wt *wt,
                     int phase)
{
    pthread_mutex_lock(&cv->mu);
    wt->phase = phase;
    pthread_mutex_unlock(&cv->mu);
}

/* The wait's last touch of cv. */
static void wt_leave(struct dist__cond *cv, struct dist__cond_wt *wt)
{
    struct dist__cond_wt **p;
    int last;

    pthread_mutex_lock(&cv->mu);
    wts_own(cv);
    for (p = &cv->wts; *p && *p != wt; p = &(*p)->next)
        ;
    if (*p)
        *p = wt->next;
    last = cv->doomed && !cv->wts;
    pthread_mutex_unlock(&cv->mu);
    if (last)
        dist__cond_free(cv);
}

/* Whether a local thread is still blocked on cv: one that has not given
 * its mutex up yet, or one asleep that no signal or broadcast marked yet
 * (Redis's queue says).  A thread marked and not yet awake, or taking its
 * mutex back, is not: POSIX lets a condition be destroyed right after a
 * broadcast.  0 with *gen (the waits begun by then), or EBUSY. */
static int still_blocked(struct dist__cond *cv, unsigned long *gen)
{
    char(*owners)[64] = NULL;
    struct dist__cond_wt *wt;
    int n = 0, busy = 0, any = 0, rc = 0;
    char why[256];

    pthread_mutex_lock(&cv->mu);
    wts_own(cv);
    *gen = cv->entered;
    for (wt = cv->wts; wt; wt = wt->next) {
        busy |= wt->phase == WT_ENTERING;
        n += wt->phase == WT_ASLEEP;
    }
    if (!busy && n > 0 && (owners = malloc(sizeof *owners * (size_t)n))) {
        n = 0;
        for (wt = cv->wts; wt; wt = wt->next)
            if (wt->phase == WT_ASLEEP)
                memcpy(owners[n++], wt->owner, sizeof wt->owner);
    }
    pthread_mutex_unlock(&cv->mu);
    if (busy || (n > 0 && !owners)) {
        free(owners);
        return dist__err(EBUSY, "condition '%s' has waiters in this process",
                         cv->names->name.p);
    }
    if (n > 0)
        rc = dist__cond_queued(cv, (const char(*)[64])owners, n, &any);
    free(owners);
    if (rc != 0) {
        snprintf(why, sizeof why, "%s", dist_last_error());
        return dist__err(EBUSY,
                         "condition '%s' has waiters in this process, "
                         "and Redis could not say whether a signal woke "
                         "them: %s",
                         cv->names->name.p, why);
    }
    if (any)
        return dist__err(EBUSY, "condition '%s' has waiters in this process",
                         cv->names->name.p);
    return 0;
}

int dist_cond_destroy(dist_cond_t *c)
{
    DIST__KEEP_ERRNO;
    struct dist__cond *cv;
    unsigned long gen;
    int rc, now;

    if (!c)
        return dist__err(EINVAL, "condition is NULL");
    cv = dist__impl_load(&c->__impl, c->__reserved, DIST__COND_MAGIC,
                         "condition", &rc);
    if (!cv)
        return rc;
    if ((rc = still_blocked(cv, &gen)) != 0)
        return rc;
    pthread_mutex_lock(&cv->mu);
    wts_own(cv);
    if (cv->entered != gen) { /* a wait began meanwhile */
        pthread_mutex_unlock(&cv->mu);
        return dist__err(EBUSY, "condition '%s' has waiters in this process",
                         cv->names->name.p);
    }
    __atomic_store_n((struct dist__cond **)&c->__impl, NULL,
                     __ATOMIC_RELEASE);
    cv->doomed = 1;
    now = !cv->wts;
    pthread_mutex_unlock(&cv->mu);
    if (now)
        dist__cond_free(cv);
    return 0;
}

/* ---- waiting ---------------------------------------------------------------- */

/* One wait, for its cleanup handler when it is cancelled. */
struct cwait {
    struct dist__cond *cv;
    struct dist__obj *o;
    struct dist__chan *ch;
    struct dist__hold *w; /* the waiter's liveness renewal */
    int intr;             /* DIST__SUB_CANCEL: its sleeps are
                                   * cancellation points (pubsub.h) */
    struct dist__cond_wt wt;
};

/* How long to sleep before looking again: until the next message, the
 * deadline, or the safety net (a message can be missed; the mark cannot). */
static uint64_t next_look(uint64_t deadline, uint64_t in_ms)
{
    uint64_t until = dist__now_ms() + in_ms;

    return deadline && deadline < until ? deadline : until;
}

/* Sleeps until the caller's mark is there (0), or the deadline has passed
 * and it left (ETIMEDOUT).  Never fails: when Redis cannot be reached for
 * longer than the patience, it ends as a spurious wake-up, and taking the
 * mutex back says what is wrong.  Its sleeps, and only they, are where a
 * cancel request acts (cw->intr); a signal handler that runs meanwhile
 * ends none of them early (POSIX has no EINTR for a condition wait). */
static int sleep_marked(struct cwait *cw, const struct dist__deadline *dl,
                        uint64_t deadline)
{
    struct dist__cond *cv = cw->cv;
    uint64_t failing = 0;
    int last = 0, res, rc;

    dist__sub_wait_ready_intr(cw->ch, next_look(deadline, dist__waiter_ms()),
                              cw->intr);
    for (;;) {
        /* read before the look: a message after it ends the sleep */
        unsigned long gen = dist__sub_gen(cw->ch);
        uint64_t until;

        rc = dist__cond_check(cv, last, &res);
        if (rc == 0) {
            failing = 0;
            if (res == 1)
                return 0;
            if (res < 0) {
                atomic_fetch_add(&cv->spurious, 1);
                return 0;
            }
            if (last)
                return dist__err(ETIMEDOUT, "condition '%s': timed out",
                                 cv->names->name.p);
        } else {
            if (!failing)
                failing = dist__now_ms() + dist__patience_ms();
            if (dist__now_ms() >= failing) {
                atomic_fetch_add(&cv->spurious, 1);
                return last ? dist__err(ETIMEDOUT,
                                        "condition '%s': timed "
                                        "out",
                                        cv->names->name.p)
                            : 0;
            }
        }
        until = next_look(deadline, rc == 0 ? dist__waiter_ms() : 50);
        dist__sub_wait_intr(cw->ch, gen, until, cw->intr);
        if (dist__deadline_step(dl, &deadline))
            last = 1;
    }
}

/* Registered, the mutex is given up; then the sleep.  The waiter's liveness
 * is renewed meanwhile, and the channel is subscribed before the release so
 * that the first look after it is already covered by a subscription. */
static int give_up_and_sleep(struct cwait *cw,
                             const struct dist__deadline *dl,
                             uint64_t deadline)
{
    static const enum dist__nm waiters[] = { DIST__N_COND_WAITERS };
    struct dist__cond *cv = cw->cv;
    int rc, res;

    if (!(cw->ch = dist__sub_get(&cv->keys[3])))
        return dist__err(ENOMEM, "out of memory");
    /* the same key as cv->keys[0], the entry's own */
    cw->w = dist__waiter_start(cv->names, waiters, 1);
    if ((rc = dist__cond_register(cv, cw->o->st->names)) != 0) {
        /* EPERM: the mutex's hold was gone (its lease ran out, or it was
         * forced): a loss like one an unlock finds (the torture run saw
         * the handler never told) */
        if (rc == EPERM)
            dist__hold_lost(cw->o);
        return rc;
    }
    /* in the queue from now on: Redis says whether it is still blocked */
    wt_phase(cv, &cw->wt, WT_ASLEEP);
    /* EIO: this thread has let go, the engine finishes the release */
    rc = dist__release_waiting(cw->o);
    if (rc == EPERM) {
        dist__cond_check(cv, 1, &res);
        return rc;
    }
    rc = sleep_marked(cw, dl, deadline);
    return rc == ETIMEDOUT ? rc : 0;
}

/* A wait cancelled in its sleep (the sleep's own handler put back what it
 * held): it leaves the queue, and a mark it took on the way out goes to
 * the next waiter (POSIX: a cancelled wait consumes no signal other
 * waiters could take), then takes the mutex back, so that the caller's
 * cleanup handlers run holding it, as with pthread_cond_wait. */
static void wait_cancelled(void *arg)
{
    struct cwait *cw = arg;
    int res = 0, was;

    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &was);
    if (dist__cond_check(cw->cv, 1, &res) == 0 && res == 1)
        dist__cond_signal(cw->cv, 0, NULL);
    dist__waiter_stop(cw->w);
    dist__sub_put(cw->ch);
    wt_leave(cw->cv, &cw->wt);
    dist__reacquire(cw->o);
}

static int give_up_guarded(struct cwait *cw, const struct dist__deadline *dl,
                           uint64_t deadline)
{
    int rc;

    pthread_cleanup_push(wait_cancelled, cw);
    rc = give_up_and_sleep(cw, dl, deadline);
    pthread_cleanup_pop(0);
    dist__waiter_stop(cw->w);
    dist__sub_put(cw->ch);
    return rc;
}

/* A condition wait's sleeps are cancellation points when the caller's
 * cancellation was enabled (cancel_was, as DIST__KEEP_ERRNO found it). */
static int wait_intr(int cancel_was)
{
    return cancel_was == PTHREAD_CANCEL_ENABLE ? DIST__SUB_CANCEL : 0;
}

static int cond_wait(dist_cond_t *c, dist_mutex_t *m,
                     const struct dist__deadline *dl, int intr)
{
    struct cwait cw = { .intr = intr };
    uint64_t deadline = 0;
    unsigned long held;
    int rc, back;

    if ((rc = get_cond(c, &cw.cv)) != 0 ||
        (rc = dist__mutex_obj(m, &cw.o)) != 0)
        return rc;
    if (dl && (rc = dist__deadline_ms(dl, &deadline)) != 0)
        return rc;
    if (cw.o->flags & DIST__MUTEX_COHORT)
        return dist__err(EINVAL,
                         "mutex '%s' is a cohort mutex, which a "
                         "condition wait cannot give up (see "
                         "dist_mutexattr_setcohort)",
                         cw.o->st->names->name.p);
    /* a hold found lost: the wait says so as an unlock would, after the
     * lost handler heard of it */
    if (dist__hold_found_lost(cw.o))
        return dist__err(EPERM,
                         "mutex '%s' was lost (its lease ran out or "
                         "it was forced) before this wait",
                         cw.o->st->names->name.p);
    held = dist__held(cw.o, 0);
    if (held == 0)
        return dist__err(EPERM, "mutex '%s' is not held by this thread",
                         cw.o->st->names->name.p);
    if (held > 1)
        return dist__err(EINVAL,
                         "mutex '%s' is held %lu times by this "
                         "thread; a condition wait gives up exactly one "
                         "hold",
                         cw.o->st->names->name.p, held);
    wt_enter(cw.cv, &cw.wt);
    rc = give_up_guarded(&cw, dl, deadline);
    if (rc != 0 && rc != ETIMEDOUT) {
        wt_leave(cw.cv, &cw.wt);
        return rc; /* EPERM, EINVAL, EIO: m as it was */
    }
    /* woken: no longer blocked, whatever a destroy asks */
    wt_phase(cw.cv, &cw.wt, WT_WOKEN);
    /* the mutex comes back however the wait ended, as POSIX has it */
    back = dist__reacquire(cw.o);
    if (back == 0 && rc == ETIMEDOUT)
        dist__err(ETIMEDOUT, "condition '%s': timed out",
                  cw.cv->names->name.p);
    wt_leave(cw.cv, &cw.wt);
    return back ? back : rc;
}

int dist_cond_wait(dist_cond_t *c, dist_mutex_t *m)
{
    DIST__CANCEL_POINT; /* as POSIX has it: nothing changed yet */
    DIST__KEEP_ERRNO;
    return cond_wait(c, m, NULL, wait_intr(dist__cancel_saved));
}

int dist_cond_timedwait(dist_cond_t *c, dist_mutex_t *m,
                        const struct timespec *abstime)
{
    DIST__CANCEL_POINT; /* as POSIX has it: nothing changed yet */
    DIST__KEEP_ERRNO;
    struct dist__deadline dl;
    struct dist__cond *cv;
    int rc;

    if ((rc = get_cond(c, &cv)) != 0 ||
        (rc = dist__deadline_set(&dl, cv->clock, abstime)) != 0)
        return rc;
    return cond_wait(c, m, &dl, wait_intr(dist__cancel_saved));
}

int dist_cond_clockwait(dist_cond_t *c, dist_mutex_t *m, clockid_t clockid,
                        const struct timespec *abstime)
{
    DIST__CANCEL_POINT; /* as POSIX has it: nothing changed yet */
    DIST__KEEP_ERRNO;
    struct dist__deadline dl;
    int rc;

    if ((rc = dist__deadline_set(&dl, clockid, abstime)) != 0)
        return rc;
    return cond_wait(c, m, &dl, wait_intr(dist__cancel_saved));
}

/* ---- waking ----------------------------------------------------------------- */

int dist_cond_signal(dist_cond_t *c)
{
    DIST__KEEP_ERRNO;
    struct dist__cond *cv;
    int rc = get_cond(c, &cv);

    return rc ? rc : dist__cond_signal(cv, 0, NULL);
}

int dist_cond_broadcast(dist_cond_t *c)
{
    DIST__KEEP_ERRNO;
    struct dist__cond *cv;
    int rc = get_cond(c, &cv);

    return rc ? rc : dist__cond_signal(cv, 1, NULL);
}
