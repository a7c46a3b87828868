/* attr.c: the attribute objects of every kind, on one table: each
 * attribute is a descriptor (where it is kept, the two values it takes and
 * their names, its default), and every get and set call runs on that. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "api.h"

/* x and y said with their own names in a refusal. */
#define NAMED(x_, y_) .x = (x_), .y = (y_), .xs = #x_, .ys = #y_
/* A switch of 0 or 1 kept in the __flags of attribute type t_. */
#define ZERO_ONE(t_, what_)                                                  \
    .what = (what_), .field = offsetof(t_, __flags), .y = 1

static int deferred_default(unsigned flags)
{
    (void)flags;
    return dist__deferred_release();
}

/* Cohorting by default applies to non-fair mutexes only (a fair one keeps
 * its cross-process FIFO), and never to a robust one (mutex.c says why). */
static int cohort_default(unsigned flags)
{
    return !(flags & (DIST__MATTR_FAIR | DIST__MATTR_ROBUST)) &&
           dist__cohort_default();
}

const struct dist__attr dist__attr_mutex_type = {
    .what = "mutex type",
    .noun = "mutex",
    .unknown = "mutex attribute has an unknown type",
    .field = offsetof(dist_mutexattr_t, __type),
    NAMED(DIST_MUTEX_RECURSIVE, DIST_MUTEX_ERRORCHECK),
};
static const struct dist__attr mutex_fair = {
    ZERO_ONE(dist_mutexattr_t, "fair"),
    .on = DIST__MATTR_FAIR,
};
static const struct dist__attr mutex_deferred = {
    ZERO_ONE(dist_mutexattr_t, "deferred"),
    .on = DIST__MATTR_DEFER_ON,
    .off = DIST__MATTR_DEFER_OFF,
    .dflt = deferred_default,
};
static const struct dist__attr mutex_cohort = {
    ZERO_ONE(dist_mutexattr_t, "cohort"),
    .on = DIST__MATTR_COHORT_ON,
    .off = DIST__MATTR_COHORT_OFF,
    .dflt = cohort_default,
};
static const struct dist__attr mutex_robust = {
    .what = "mutex robustness",
    .field = offsetof(dist_mutexattr_t, __flags),
    NAMED(DIST_MUTEX_STALLED, DIST_MUTEX_ROBUST),
    .on = DIST__MATTR_ROBUST,
};
const struct dist__attr dist__attr_rwlock_kind = {
    .what = "rwlock kind",
    .noun = "rwlock",
    .unknown = "rwlock attribute has an unknown kind",
    .field = offsetof(dist_rwlockattr_t, __kind),
    NAMED(DIST_RWLOCK_PREFER_READER, DIST_RWLOCK_PREFER_WRITER),
};
const struct dist__attr dist__attr_cond_clock = {
    .what = "clock",
    .noun = "condition",
    .unknown = "condition attribute has an unknown clock",
    .field = offsetof(dist_condattr_t, __clock),
    NAMED(CLOCK_REALTIME, CLOCK_MONOTONIC),
};
const struct dist__attr dist__attr_sem_mode = {
    .what = "semaphore mode",
    .noun = "semaphore",
    .unknown = "semaphore attribute has an unknown mode",
    .field = offsetof(dist_semattr_t, __mode),
    NAMED(DIST_SEM_LEASED, DIST_SEM_REDISSON),
};
static const struct dist__attr sem_unowned = {
    ZERO_ONE(dist_semattr_t, "unowned"),
    .on = DIST__SATTR_UNOWNED,
};

/* ---- the calls, on a descriptor ------------------------------------------ */

static int *field_of(void *a, const struct dist__attr *d)
{
    return (int *)((char *)a + d->field);
}

/* 0 when v is one of d's values, else EINVAL with the message set. */
static int refuse(const struct dist__attr *d, int v)
{
    if (v == d->x || v == d->y)
        return 0;
    if (!d->xs)
        return dist__err(EINVAL, "%s must be 0 or 1, not %d", d->what, v);
    return dist__err(EINVAL, "%s %d: use %s or %s", d->what, v, d->xs, d->ys);
}

/* A switch's value in flags: as said, else its default. */
static int switch_of(const struct dist__attr *d, unsigned flags)
{
    if (flags & (d->on | d->off))
        return flags & d->on ? d->y : d->x;
    return d->dflt ? d->dflt(flags) : d->x;
}

static int set(void *a, const struct dist__attr *d, int v)
{
    int rc = a ? refuse(d, v) : EINVAL;
    int *f;

    if (rc != 0)
        return rc;
    f = field_of(a, d);
    if (d->on | d->off)
        *f = (int)(((unsigned)*f & ~(d->on | d->off)) |
                   (v == d->y ? d->on : d->off));
    else
        *f = v;
    return 0;
}

/* What d's getter answers for a: a value as kept (zero: not said, so x),
 * a switch as its bits say. */
static int value_of(const void *a, const struct dist__attr *d)
{
    int f = *(const int *)((const char *)a + d->field);

    if (d->on | d->off)
        return switch_of(d, (unsigned)f);
    return f ? f : d->x;
}

static int get(const void *a, const struct dist__attr *d, int *v)
{
    if (!a || !v)
        return EINVAL;
    *v = value_of(a, d);
    return 0;
}

/* a cleared, and d, its kind's first attribute, at its default */
static int init(void *a, size_t size, const struct dist__attr *d)
{
    if (!a)
        return EINVAL;
    memset(a, 0, size);
    *field_of(a, d) = d->x;
    return 0;
}

int dist__init_args(const void *obj, const void *attr,
                    const struct dist__attr *d, int *v)
{
    if (!obj)
        return dist__err(EINVAL, "%s is NULL", d->noun);
    *v = attr ? value_of(attr, d) : d->x;
    if (*v != d->x && *v != d->y)
        return dist__err(EINVAL, "%s %d", d->unknown, *v);
    return 0;
}

int dist__mutexattr_cohort(unsigned flags)
{
    return switch_of(&mutex_cohort, flags);
}

/* ---- the public calls ---------------------------------------------------- */

/* Most calls are one step on a descriptor or a field, the same for every
 * kind, so each such step is written once here and the calls are made from
 * it, one line each below (the public header declares every one of them in
 * plain C, and the compiler holds these definitions to it).  Each begins
 * with DIST__KEEP_ERRNO, as every entry point does. */

/* SET_ONLY: dist_<t>_set<name> on descriptor d; GET_SET: it and
 * dist_<t>_get<name> */
#define SET_ONLY(t, name, d)                                                 \
    int dist_##t##_set##name(dist_##t##_t *a, int v)                         \
    {                                                                        \
        DIST__KEEP_ERRNO;                                                    \
        return set(a, d, v);                                                 \
    }
#define GET_SET(t, name, d)                                                  \
    SET_ONLY(t, name, d)                                                     \
    int dist_##t##_get##name(const dist_##t##_t *a, int *v)                  \
    {                                                                        \
        DIST__KEEP_ERRNO;                                                    \
        return get(a, d, v);                                                 \
    }

/* dist_<t>_destroy: an attribute object owns nothing, so only NULL fails */
#define DESTROY(t)                                                           \
    int dist_##t##_destroy(dist_##t##_t *a)                                  \
    {                                                                        \
        DIST__KEEP_ERRNO;                                                    \
        return a ? 0 : EINVAL;                                               \
    }

/* dist_<t>_setlease */
#define SET_LEASE(t)                                                         \
    int dist_##t##_setlease(dist_##t##_t *a, unsigned long lease_ms)         \
    {                                                                        \
        DIST__KEEP_ERRNO;                                                    \
        return a ? dist__lease_set(&a->__lease_ms, lease_ms) : EINVAL;       \
    }

/* ---- mutex --------------------------------------------------------------- */

int dist_mutexattr_init(dist_mutexattr_t *a)
{
    DIST__KEEP_ERRNO;
    return init(a, sizeof *a, &dist__attr_mutex_type);
}

int dist_mutexattr_getlease(const dist_mutexattr_t *a,
                            unsigned long *lease_ms)
{
    DIST__KEEP_ERRNO;
    if (!a || !lease_ms)
        return EINVAL;
    *lease_ms = a->__lease_ms;
    return 0;
}

DESTROY(mutexattr)
SET_LEASE(mutexattr)
GET_SET(mutexattr, type, &dist__attr_mutex_type)
GET_SET(mutexattr, fair, &mutex_fair)
/* deferred: said on, said off, or neither, which leaves it to the default;
 * cohort's getter answers what a mutex made with a would be, as
 * dist_mutex_init asks it */
GET_SET(mutexattr, deferred, &mutex_deferred)
GET_SET(mutexattr, cohort, &mutex_cohort)
GET_SET(mutexattr, robust, &mutex_robust)

/* ---- read-write lock ----------------------------------------------------- */

int dist_rwlockattr_init(dist_rwlockattr_t *a)
{
    DIST__KEEP_ERRNO;
    return init(a, sizeof *a, &dist__attr_rwlock_kind);
}

DESTROY(rwlockattr)
SET_LEASE(rwlockattr)
SET_ONLY(rwlockattr, kind, &dist__attr_rwlock_kind)

/* ---- condition ----------------------------------------------------------- */

int dist_condattr_init(dist_condattr_t *a)
{
    DIST__KEEP_ERRNO;
    return init(a, sizeof *a, &dist__attr_cond_clock);
}

DESTROY(condattr)

int dist_condattr_setclock(dist_condattr_t *a, clockid_t clock)
{
    DIST__KEEP_ERRNO;
    return set(a, &dist__attr_cond_clock, (int)clock);
}

int dist_condattr_getclock(const dist_condattr_t *a, clockid_t *clock)
{
    DIST__KEEP_ERRNO;
    int v;
    int rc = clock ? get(a, &dist__attr_cond_clock, &v) : EINVAL;

    if (rc == 0)
        *clock = (clockid_t)v;
    return rc;
}

/* ---- semaphore ----------------------------------------------------------- */

int dist_semattr_init(dist_semattr_t *a)
{
    DIST__KEEP_ERRNO;
    int rc = init(a, sizeof *a, &dist__attr_sem_mode);

    if (rc == 0)
        a->__max = DIST_SEM_VALUE_MAX;
    return rc;
}

DESTROY(semattr)
SET_LEASE(semattr)
GET_SET(semattr, mode, &dist__attr_sem_mode)
SET_ONLY(semattr, unowned, &sem_unowned)

int dist_semattr_setmax(dist_semattr_t *a, long max)
{
    DIST__KEEP_ERRNO;
    if (!a)
        return EINVAL;
    if (max < 1 || max > DIST_SEM_VALUE_MAX)
        return dist__err(EINVAL,
                         "semaphore maximum %ld: use 1 to "
                         "DIST_SEM_VALUE_MAX",
                         max);
    a->__max = max;
    return 0;
}
