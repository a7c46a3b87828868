/* table.c: the address table of the mapped locks, and their entries.
 *
 * Every interposed function first asks whether its lock is mapped.  That
 * question must cost next to nothing for the locks that are not (nearly
 * all of them, including libdistlock's own): one load of the table pointer,
 * one multiply, one load of a slot (pl_surely_plain in preload.h); an empty
 * slot means "not mapped" and the call goes on to glibc's function as a
 * tail call.  The table is an open-addressing set of addresses, at most
 * half full, published once with a release store and never changed in
 * place except by adding keys (heap locks found through init_site, see
 * site.c); the loads on that path are plain moves on x86-64: no locked
 * instruction, no fence, no allocation, no TLS. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "preload.h"

const struct pl_table *pl_tab;
struct pl_table *pl_tab_w;
unsigned long pl_fork_gen;

/* Nothing mapped: two empty slots (a shift of 64 would be undefined). */
static struct {
    struct pl_table t;
    uintptr_t k[2];
} empty = { { 63, 1, 0, NULL }, { 0, 0 } };

const struct pl_table *pl_table_none(void)
{
    return &empty.t;
}

struct pl_table *pl_table_new(size_t cap)
{
    struct pl_table *t;
    unsigned bits = 1;

    while (((size_t)1 << bits) < cap)
        bits++;
    cap = (size_t)1 << bits;
    t = calloc(1, sizeof *t + cap * sizeof t->key[0]);
    if (!t)
        return NULL;
    t->val = calloc(cap, sizeof *t->val);
    if (!t->val) {
        free(t);
        return NULL;
    }
    t->shift = 64 - bits;
    t->mask = cap - 1;
    return t;
}

void pl_table_put(struct pl_table *t, struct pl_entry *e)
{
    size_t i = pl_slot_of(t, e->addr);

    while (t->key[i])
        i = (i + 1) & t->mask;
    t->val[i] = e;
    __atomic_store_n(&t->key[i], e->addr, __ATOMIC_RELEASE);
    t->used++;
}

struct pl_table *pl_table_grow(const struct pl_table *t)
{
    struct pl_table *n = pl_table_new(2 * (t->mask + 1));
    size_t i;

    if (!n)
        return NULL;
    for (i = 0; i <= t->mask; i++)
        if (t->key[i])
            pl_table_put(n, t->val[i]);
    return n;
}

struct pl_entry *pl_table_get(const struct pl_table *t, uintptr_t a)
{
    size_t i = pl_slot_of(t, a);
    uintptr_t k;

    while ((k = __atomic_load_n(&t->key[i], __ATOMIC_ACQUIRE)) != 0) {
        if (k == a)
            return t->val[i];
        i = (i + 1) & t->mask;
    }
    return NULL;
}

/* ---- entries ------------------------------------------------------------ */

/* The distributed mutex of e's section into *m, robust or not. */
static int mutex_init(struct pl_entry *e, dist_mutex_t *m, int robust)
{
    const struct pl_section *s = e->sec;
    long lease = s->lease_ms >= 0 ? s->lease_ms : (long)pl_cfg.lease_ms;
    dist_mutexattr_t a;
    int rc;

    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, s->fair);
    /* never a cohort one, whatever DISTLOCK_COHORT says: the program's own
     * mutex lets one thread at a time at it already, and a mapped condition
     * wait needs a mutex that dist_cond_wait takes */
    dist_mutexattr_setcohort(&a, 0);
    dist_mutexattr_setrobust(&a,
                             robust ? DIST_MUTEX_ROBUST : DIST_MUTEX_STALLED);
    if ((rc = dist_mutexattr_setlease(&a, (unsigned long)lease)) == 0)
        rc = dist_mutex_init(m, e->lockname, &a);
    dist_mutexattr_destroy(&a);
    return rc;
}

int pl_entry_init(struct pl_entry *e, const char *lockname)
{
    const struct pl_section *s = e->sec;
    long lease = s->lease_ms >= 0 ? s->lease_ms : (long)pl_cfg.lease_ms;
    int rc;

    free(e->lockname);
    e->lockname = strdup(lockname);
    if (!e->lockname)
        return ENOMEM;
    e->kind = s->kind;
    if (s->kind == PL_COND) {
        dist_condattr_t ca;

        dist_condattr_init(&ca);
        rc = dist_condattr_setclock(&ca, e->clock);
        if (rc == 0)
            rc = dist_cond_init(&e->dc, e->lockname, &ca);
        dist_condattr_destroy(&ca);
        return rc;
    }
    if (s->kind == PL_BARRIER || s->kind == PL_SEM)
        return 0; /* at pthread_barrier_init, at sem_open */
    if (s->kind == PL_RWLOCK) {
        dist_rwlockattr_t ra;

        dist_rwlockattr_init(&ra);
        dist_rwlockattr_setkind(&ra, s->rw_prefer_writer
                                         ? DIST_RWLOCK_PREFER_WRITER
                                         : DIST_RWLOCK_PREFER_READER);
        if ((rc = dist_rwlockattr_setlease(&ra, (unsigned long)lease)) == 0)
            rc = dist_rwlock_init(&e->drw, e->lockname, &ra);
        dist_rwlockattr_destroy(&ra);
        return rc;
    }
    return mutex_init(e, &e->dm, e->robust);
}

int pl_entry_robust(struct pl_entry *e, int robust)
{
    dist_mutex_t m;
    int rc;

    if (e->kind != PL_MUTEX || e->robust == robust)
        return 0;
    if ((rc = mutex_init(e, &m, robust)) != 0)
        return rc;
    /* at the program's init: no thread holds the mutex it reinitialises */
    dist_mutex_destroy(&e->dm);
    e->dm = m;
    e->robust = robust;
    return 0;
}

int pl_entry_barrier(struct pl_entry *e, unsigned count)
{
    if (e->binit) {
        dist_barrier_destroy(&e->db);
        e->binit = 0;
    }
    if (e->sec->parties)
        count = (unsigned)e->sec->parties;
    if (dist_barrier_init(&e->db, e->lockname, count) != 0)
        return EINVAL;
    e->binit = 1;
    return 0;
}

int pl_entry_sem(struct pl_entry *e, unsigned initial)
{
    const struct pl_section *s = e->sec;
    long lease = s->lease_ms >= 0 ? s->lease_ms : (long)pl_cfg.lease_ms;
    dist_semattr_t a;
    int rc;

    dist_semattr_init(&a);
    dist_semattr_setmode(&a, s->sem_mode == PL_SEM_REDISSON
                                 ? DIST_SEM_REDISSON
                                 : DIST_SEM_LEASED);
    dist_semattr_setunowned(&a, s->sem_unowned);
    if (s->sem_max)
        dist_semattr_setmax(&a, (long)s->sem_max);
    rc = dist_semattr_setlease(&a, (unsigned long)lease);
    if (rc == 0)
        rc = dist_sem_init(&e->ds, e->lockname, initial, &a);
    dist_semattr_destroy(&a);
    return rc;
}

void pl_entry_kill(struct pl_entry *e)
{
    PL_KEEP_ERRNO;
    __atomic_store_n(&e->live, 0, __ATOMIC_RELEASE);
    switch (e->kind) {
    case PL_MUTEX:
        dist_mutex_destroy(&e->dm);
        break;
    case PL_RWLOCK:
        dist_rwlock_destroy(&e->drw);
        break;
    case PL_COND:
        dist_cond_destroy(&e->dc);
        break;
    case PL_BARRIER:
        if (e->binit)
            dist_barrier_destroy(&e->db);
        e->binit = 0;
        break;
    default:
        dist_sem_destroy(&e->ds);
        break;
    }
}

int pl_held_by_me(const struct pl_entry *e)
{
    return __atomic_load_n(&e->depth, __ATOMIC_RELAXED) > 0 &&
           __atomic_load_n(&e->owner_gen, __ATOMIC_RELAXED) == pl_fork_gen &&
           pthread_equal(__atomic_load_n(&e->owner, __ATOMIC_RELAXED),
                         pthread_self());
}

void pl_set_holder(struct pl_entry *e, unsigned depth)
{
    __atomic_store_n(&e->owner, depth ? pthread_self() : (pthread_t)0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&e->owner_gen, pl_fork_gen, __ATOMIC_RELAXED);
    __atomic_store_n(&e->depth, depth, __ATOMIC_RELAXED);
}
