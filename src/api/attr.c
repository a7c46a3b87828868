/* attr.c: the attribute objects of every kind, on one table: each
 * attribute is a descriptor (where it is kept, the two values it takes and
 * their names, its default), and every get and set call runs on that. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "api.h"

/* x and y said with their own names in a refusal. */
#define NAMED(x_, y_) .x = (x_), .y = (y_), .xs = #x_, .ys = #y_

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
    .what = "fair",
    .field = offsetof(dist_mutexattr_t, __flags),
    .y = 1,
    .on = DIST__MATTR_FAIR,
};
static const struct dist__attr mutex_deferred = {
    .what = "deferred",
    .field = offsetof(dist_mutexattr_t, __flags),
    .y = 1,
    .on = DIST__MATTR_DEFER_ON,
    .off = DIST__MATTR_DEFER_OFF,
    .dflt = deferred_default,
};
static const struct dist__attr mutex_cohort = {
    .what = "cohort",
    .field = offsetof(dist_mutexattr_t, __flags),
    .y = 1,
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
    .what = "unowned",
    .field = offsetof(dist_semattr_t, __flags),
    .y = 1,
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

/* ---- mutex --------------------------------------------------------------- */

int dist_mutexattr_init(dist_mutexattr_t *a)
{
    DIST__KEEP_ERRNO;
    return init(a, sizeof *a, &dist__attr_mutex_type);
}

int dist_mutexattr_destroy(dist_mutexattr_t *a)
{
    DIST__KEEP_ERRNO;
    return a ? 0 : EINVAL;
}

int dist_mutexattr_settype(dist_mutexattr_t *a, int type)
{
    DIST__KEEP_ERRNO;
    return set(a, &dist__attr_mutex_type, type);
}

int dist_mutexattr_gettype(const dist_mutexattr_t *a, int *type)
{
    DIST__KEEP_ERRNO;
    return get(a, &dist__attr_mutex_type, type);
}

int dist_mutexattr_setlease(dist_mutexattr_t *a, unsigned long lease_ms)
{
    DIST__KEEP_ERRNO;
    return a ? dist__lease_set(&a->__lease_ms, lease_ms) : EINVAL;
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

int dist_mutexattr_setfair(dist_mutexattr_t *a, int fair)
{
    DIST__KEEP_ERRNO;
    return set(a, &mutex_fair, fair);
}

int dist_mutexattr_getfair(const dist_mutexattr_t *a, int *fair)
{
    DIST__KEEP_ERRNO;
    return get(a, &mutex_fair, fair);
}

/* said on, said off, or neither, which leaves it to the default */
int dist_mutexattr_setdeferred(dist_mutexattr_t *a, int deferred)
{
    DIST__KEEP_ERRNO;
    return set(a, &mutex_deferred, deferred);
}

int dist_mutexattr_getdeferred(const dist_mutexattr_t *a, int *deferred)
{
    DIST__KEEP_ERRNO;
    return get(a, &mutex_deferred, deferred);
}

int dist_mutexattr_setcohort(dist_mutexattr_t *a, int cohort)
{
    DIST__KEEP_ERRNO;
    return set(a, &mutex_cohort, cohort);
}

/* What a mutex made with a would be (dist_mutex_init asks the same). */
int dist_mutexattr_getcohort(const dist_mutexattr_t *a, int *cohort)
{
    DIST__KEEP_ERRNO;
    return get(a, &mutex_cohort, cohort);
}

int dist_mutexattr_setrobust(dist_mutexattr_t *a, int robust)
{
    DIST__KEEP_ERRNO;
    return set(a, &mutex_robust, robust);
}

int dist_mutexattr_getrobust(const dist_mutexattr_t *a, int *robust)
{
    DIST__KEEP_ERRNO;
    return get(a, &mutex_robust, robust);
}

/* ---- read-write lock ----------------------------------------------------- */

int dist_rwlockattr_init(dist_rwlockattr_t *a)
{
    DIST__KEEP_ERRNO;
    return init(a, sizeof *a, &dist__attr_rwlock_kind);
}

int dist_rwlockattr_destroy(dist_rwlockattr_t *a)
{
    DIST__KEEP_ERRNO;
    return a ? 0 : EINVAL;
}

int dist_rwlockattr_setlease(dist_rwlockattr_t *a, unsigned long lease_ms)
{
    DIST__KEEP_ERRNO;
    return a ? dist__lease_set(&a->__lease_ms, lease_ms) : EINVAL;
}

int dist_rwlockattr_setkind(dist_rwlockattr_t *a, int kind)
{
    DIST__KEEP_ERRNO;
    return set(a, &dist__attr_rwlock_kind, kind);
}

/* ---- condition ----------------------------------------------------------- */

int dist_condattr_init(dist_condattr_t *a)
{
    DIST__KEEP_ERRNO;
    return init(a, sizeof *a, &dist__attr_cond_clock);
}

int dist_condattr_destroy(dist_condattr_t *a)
{
    DIST__KEEP_ERRNO;
    return a ? 0 : EINVAL;
}

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

int dist_semattr_destroy(dist_semattr_t *a)
{
    DIST__KEEP_ERRNO;
    return a ? 0 : EINVAL;
}

int dist_semattr_setmode(dist_semattr_t *a, int mode)
{
    DIST__KEEP_ERRNO;
    return set(a, &dist__attr_sem_mode, mode);
}

int dist_semattr_getmode(const dist_semattr_t *a, int *mode)
{
    DIST__KEEP_ERRNO;
    return get(a, &dist__attr_sem_mode, mode);
}

int dist_semattr_setlease(dist_semattr_t *a, unsigned long lease_ms)
{
    DIST__KEEP_ERRNO;
    return a ? dist__lease_set(&a->__lease_ms, lease_ms) : EINVAL;
}

int dist_semattr_setunowned(dist_semattr_t *a, int unowned)
{
    DIST__KEEP_ERRNO;
    return set(a, &sem_unowned, unowned);
}

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
