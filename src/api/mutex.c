/* mutex.c: the dist_mutex API: argument checks, then the engine (call.c)
 * with the mutex's kind (kind_mutex.c). */
#include <errno.h>
#include <string.h>

#include "api.h"

/* ---- objects ----------------------------------------------------------- */

static int get_obj(dist_mutex_t *m, struct dist__obj **out)
{
    if (!m)
        return dist__err(EINVAL, "mutex is NULL");
    return dist__obj_get(&dist__mutex_kind, m->__name, &m->__impl,
                         m->__reserved, out);
}

int dist__mutex_obj(dist_mutex_t *m, struct dist__obj **out)
{
    return get_obj(m, out);
}

int dist_mutex_init(dist_mutex_t *m, const char *name,
                    const dist_mutexattr_t *attr)
{
    DIST__KEEP_ERRNO;
    int fair = attr && (attr->__flags & DIST__MATTR_FAIR);
    int type;

    if (dist__init_args(m, attr, &dist__attr_mutex_type, &type) != 0)
        return EINVAL; /* the message is set */
    int flags = type == DIST_MUTEX_ERRORCHECK ? DIST__MUTEX_ERRORCHECK : 0;

    if (fair && (attr->__flags & DIST__MATTR_COHORT_ON))
        return dist__err(EINVAL,
                         "mutex '%s': a fair mutex cannot be a cohort "
                         "one (its waiters keep one FIFO across processes)",
                         name ? name : "(null)");
    /* A cohort hands the lock between its threads without Redis: each
     * hand-off would have to carry the owner-dead state, and the cohort's
     * one owner in Redis would hide which thread died.  Not worth it: a
     * robust mutex is never a cohort one. */
    if (attr && (attr->__flags & DIST__MATTR_ROBUST) &&
        (attr->__flags & DIST__MATTR_COHORT_ON))
        return dist__err(
            EINVAL,
            "mutex '%s': a robust mutex cannot be a "
            "cohort one (threads hand a cohort's hold on without "
            "Redis, which keeps the robust state)",
            name ? name : "(null)");
    if (attr && (attr->__flags & DIST__MATTR_ROBUST))
        flags |= DIST__MUTEX_ROBUST;
    if (dist__mutexattr_cohort(attr ? (unsigned)attr->__flags : 0))
        flags |= DIST__MUTEX_COHORT;
    if (attr && (attr->__flags & DIST__MATTR_DEFER_ON))
        flags |= DIST__MUTEX_DEFER_ON;
    else if (attr && (attr->__flags & DIST__MATTR_DEFER_OFF))
        flags |= DIST__MUTEX_DEFER_OFF;
    return dist__obj_init(fair ? &dist__fair_kind : &dist__mutex_kind, name,
                          flags, attr ? attr->__lease_ms : 0, &m->__name,
                          &m->__impl, m->__reserved);
}

int dist_mutex_destroy(dist_mutex_t *m)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    int rc;

    if (!m)
        return dist__err(EINVAL, "mutex is NULL");
    o = dist__impl_load(&m->__impl, m->__reserved, dist__mutex_kind.magic,
                        "mutex", &rc);
    if (rc)
        return rc;
    if (o && (o->flags & DIST__MUTEX_COHORT) && dist__cohort_busy(o))
        return dist__err(EBUSY,
                         "mutex '%s' is still held or awaited by a "
                         "thread of this process",
                         o->st->names->name.p);
    return dist__obj_destroy(&dist__mutex_kind, &m->__impl, m->__reserved);
}

/* ---- lock and unlock --------------------------------------------------- */

/* Where a mutex's holds are taken, let go and told: in Redis by the
 * engine, or, for a cohort mutex, by its cohort (cohort.c), whose one hold
 * in Redis its threads pass between them.  Chosen once per call. */
struct holds {
    int (*lock)(struct dist__obj *o, int try_only,
                const struct dist__deadline *dl);
    int (*unlock)(struct dist__obj *o);
    int (*token)(struct dist__obj *o, uint64_t *token);
    int (*lease_left)(struct dist__obj *o, struct timespec *left);
};

static int engine_lock(struct dist__obj *o, int try_only,
                       const struct dist__deadline *dl)
{
    return dist__acquire(o, 0, try_only, dl);
}

static int engine_token(struct dist__obj *o, uint64_t *token)
{
    return dist__token(o, 0, token);
}

static const struct holds by_engine = { engine_lock, dist__release,
                                        engine_token, dist__lease_left };
static const struct holds by_cohort = { dist__cohort_lock,
                                        dist__cohort_unlock,
                                        dist__cohort_token,
                                        dist__cohort_lease_left };

/* m's object in *o and where its holds go in *h: 0, or the error. */
static int get_holds(dist_mutex_t *m, struct dist__obj **o,
                     const struct holds **h)
{
    int rc = get_obj(m, o);

    *h = rc == 0 && ((*o)->flags & DIST__MUTEX_COHORT) ? &by_cohort
                                                       : &by_engine;
    return rc;
}

/* Every lock call: try_only 1 never waits, dl NULL waits without a
 * deadline. */
static int acquire(dist_mutex_t *m, int try_only,
                   const struct dist__deadline *dl)
{
    struct dist__obj *o;
    const struct holds *h;
    int rc = get_holds(m, &o, &h);

    return rc ? rc : h->lock(o, try_only, dl);
}

int dist_mutex_lock(dist_mutex_t *m)
{
    DIST__KEEP_ERRNO;
    return acquire(m, 0, NULL);
}

int dist_mutex_trylock(dist_mutex_t *m)
{
    DIST__KEEP_ERRNO;
    return acquire(m, 1, NULL);
}

int dist_mutex_timedlock(dist_mutex_t *m, const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    return dist_mutex_clocklock(m, CLOCK_REALTIME, abstime);
}

int dist_mutex_clocklock(dist_mutex_t *m, clockid_t clockid,
                         const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    struct dist__deadline dl;
    int rc = dist__deadline_set(&dl, clockid, abstime);

    return rc ? rc : acquire(m, 0, &dl);
}

int dist_mutex_unlock(dist_mutex_t *m)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    const struct holds *h;
    int rc = get_holds(m, &o, &h);

    return rc ? rc : h->unlock(o);
}

int dist_mutex_consistent(dist_mutex_t *m)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    int rc = get_obj(m, &o);

    return rc ? rc : dist__consistent(o);
}

int dist_mutex_token(dist_mutex_t *m, uint64_t *token)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    const struct holds *h;
    int rc =
        token ? get_holds(m, &o, &h) : dist__err(EINVAL, "token is NULL");

    return rc ? rc : h->token(o, token);
}

int dist_mutex_lease_left(dist_mutex_t *m, struct timespec *left)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    const struct holds *h;
    int rc = dist__lease_arg(left);

    if (rc == 0)
        rc = get_holds(m, &o, &h);
    return rc ? rc : h->lease_left(o, left);
}
