/*
 * anylock.h: a lock of one of the kinds the tests drive alike: a mutex, a
 * fair mutex, a read-write lock taken for writing or for reading.  Static:
 * each program gets its own copy.  Include after distlock.h.
 */
#ifndef DISTLOCK_ANYLOCK_H
#define DISTLOCK_ANYLOCK_H

enum lock_kind { LK_MUTEX, LK_FAIR, LK_WRITE, LK_READ };

union any_lock {
    dist_mutex_t m;
    dist_rwlock_t rw;
};

static inline int lk_is_rw(int kind)
{
    return kind == LK_WRITE || kind == LK_READ;
}

/* The lock of that kind on name: 0 or the error of its init. */
static inline int any_lock_init(union any_lock *l, const char *name, int kind)
{
    dist_mutexattr_t a;

    if (lk_is_rw(kind))
        return dist_rwlock_init(&l->rw, name, NULL);
    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, kind == LK_FAIR);
    return dist_mutex_init(&l->m, name, &a);
}

#endif
