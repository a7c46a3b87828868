/* rwlock.c: the dist_rwlock API: argument checks, then the engine (call.c)
 * with the read-write lock's kind (kind_rwlock.c). */
#include <errno.h>
#include <string.h>

#include "api.h"

/* ---- objects ----------------------------------------------------------- */

static int get_obj(dist_rwlock_t *rw, struct dist__obj **out)
{
    if (!rw)
        return dist__err(EINVAL, "rwlock is NULL");
    return dist__obj_get(&dist__rwlock_kind, rw->__name, &rw->__impl,
                         rw->__reserved, out);
}

int dist_rwlock_init(dist_rwlock_t *rw, const char *name,
                     const dist_rwlockattr_t *attr)
{
    DIST__KEEP_ERRNO;
    int kind;

    if (dist__init_args(rw, attr, &dist__attr_rwlock_kind, &kind) != 0)
        return EINVAL; /* the message is set */
    return dist__obj_init(
        &dist__rwlock_kind, name,
        kind == DIST_RWLOCK_PREFER_WRITER ? DIST__RWLOCK_PREFER_WRITER : 0,
        attr ? attr->__lease_ms : 0, &rw->__name, &rw->__impl,
        rw->__reserved);
}

int dist_rwlock_destroy(dist_rwlock_t *rw)
{
    DIST__KEEP_ERRNO;
    if (!rw)
        return dist__err(EINVAL, "rwlock is NULL");
    return dist__obj_destroy(&dist__rwlock_kind, &rw->__impl, rw->__reserved);
}

/* ---- lock and unlock --------------------------------------------------- */

/* mode 0 read, 1 write; dl NULL: no deadline. */
static int acquire(dist_rwlock_t *rw, int mode, int try_only,
                   const struct dist__deadline *dl)
{
    struct dist__obj *o;
    int rc = get_obj(rw, &o);

    return rc ? rc : dist__acquire(o, mode, try_only, dl);
}

static int acquire_by(dist_rwlock_t *rw, int mode, clockid_t clockid,
                      const struct timespec *abstime)
{
    struct dist__deadline dl;
    int rc = dist__deadline_set(&dl, clockid, abstime);

    return rc ? rc : acquire(rw, mode, 0, &dl);
}

int dist_rwlock_rdlock(dist_rwlock_t *rw)
{
    DIST__KEEP_ERRNO;
    return acquire(rw, 0, 0, NULL);
}

int dist_rwlock_tryrdlock(dist_rwlock_t *rw)
{
    DIST__KEEP_ERRNO;
    return acquire(rw, 0, 1, NULL);
}

int dist_rwlock_timedrdlock(dist_rwlock_t *rw, const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    return acquire_by(rw, 0, CLOCK_REALTIME, abstime);
}

int dist_rwlock_clockrdlock(dist_rwlock_t *rw, clockid_t clockid,
                            const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    return acquire_by(rw, 0, clockid, abstime);
}

int dist_rwlock_wrlock(dist_rwlock_t *rw)
{
    DIST__KEEP_ERRNO;
    return acquire(rw, 1, 0, NULL);
}

int dist_rwlock_trywrlock(dist_rwlock_t *rw)
{
    DIST__KEEP_ERRNO;
    return acquire(rw, 1, 1, NULL);
}

int dist_rwlock_timedwrlock(dist_rwlock_t *rw, const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    return acquire_by(rw, 1, CLOCK_REALTIME, abstime);
}

int dist_rwlock_clockwrlock(dist_rwlock_t *rw, clockid_t clockid,
                            const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    return acquire_by(rw, 1, clockid, abstime);
}

int dist_rwlock_unlock(dist_rwlock_t *rw)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    int rc = get_obj(rw, &o);

    return rc ? rc : dist__release(o);
}

int dist_rwlock_token(dist_rwlock_t *rw, uint64_t *token)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    int rc = token ? get_obj(rw, &o) : dist__err(EINVAL, "token is NULL");

    return rc ? rc : dist__token(o, 1, token);
}

int dist_rwlock_lease_left(dist_rwlock_t *rw, struct timespec *left)
{
    DIST__KEEP_ERRNO;
    struct dist__obj *o;
    int rc = dist__lease_arg(left);

    if (rc == 0)
        rc = get_obj(rw, &o);
    return rc ? rc : dist__lease_left(o, left);
}
