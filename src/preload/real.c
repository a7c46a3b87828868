/* real.c: glibc's functions behind the interposed ones.
 *
 * Every wrapper exists in each symbol version glibc 2.36 defines for it,
 * and forwards to the same version (dlvsym(RTLD_NEXT, name, version)):
 * a freshly built binary binds pthread_mutex_trylock@GLIBC_2.34 and
 * pthread_cond_wait@GLIBC_2.3.2, an old one @GLIBC_2.2.5, and both must
 * land in the shim and then in the right glibc function.  The table below
 * names them; the tests count, by the same names, which ones saw a mapped
 * lock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "preload.h"

#define EXPORT __attribute__((visibility("default")))

static const struct {
    const char *name, *version;
} fn_sym[FN_COUNT] = {
    [FN_LOCK] = { "pthread_mutex_lock", "GLIBC_2.2.5" },
    [FN_UNLOCK] = { "pthread_mutex_unlock", "GLIBC_2.2.5" },
    [FN_INIT] = { "pthread_mutex_init", "GLIBC_2.2.5" },
    [FN_DESTROY] = { "pthread_mutex_destroy", "GLIBC_2.2.5" },
    [FN_TRYLOCK] = { "pthread_mutex_trylock", "GLIBC_2.34" },
    [FN_TRYLOCK_OLD] = { "pthread_mutex_trylock", "GLIBC_2.2.5" },
    [FN_TIMEDLOCK] = { "pthread_mutex_timedlock", "GLIBC_2.34" },
    [FN_TIMEDLOCK_OLD] = { "pthread_mutex_timedlock", "GLIBC_2.2.5" },
    [FN_CLOCKLOCK] = { "pthread_mutex_clocklock", "GLIBC_2.34" },
    [FN_CLOCKLOCK_OLD] = { "pthread_mutex_clocklock", "GLIBC_2.30" },
    [FN_WAIT] = { "pthread_cond_wait", "GLIBC_2.3.2" },
    [FN_WAIT_OLD] = { "pthread_cond_wait", "GLIBC_2.2.5" },
    [FN_TIMEDWAIT] = { "pthread_cond_timedwait", "GLIBC_2.3.2" },
    [FN_TIMEDWAIT_OLD] = { "pthread_cond_timedwait", "GLIBC_2.2.5" },
    [FN_CLOCKWAIT] = { "pthread_cond_clockwait", "GLIBC_2.34" },
    [FN_CLOCKWAIT_OLD] = { "pthread_cond_clockwait", "GLIBC_2.30" },
#define RW(f, name, old)                                                     \
    [f] = { "pthread_rwlock_" name, "GLIBC_2.34" },                          \
    [f##_OLD] = { "pthread_rwlock_" name, old }
    RW(FN_RDLOCK, "rdlock", "GLIBC_2.2.5"),
    RW(FN_TRYRDLOCK, "tryrdlock", "GLIBC_2.2.5"),
    RW(FN_TIMEDRDLOCK, "timedrdlock", "GLIBC_2.2.5"),
    RW(FN_CLOCKRDLOCK, "clockrdlock", "GLIBC_2.30"),
    RW(FN_WRLOCK, "wrlock", "GLIBC_2.2.5"),
    RW(FN_TRYWRLOCK, "trywrlock", "GLIBC_2.2.5"),
    RW(FN_TIMEDWRLOCK, "timedwrlock", "GLIBC_2.2.5"),
    RW(FN_CLOCKWRLOCK, "clockwrlock", "GLIBC_2.30"),
    RW(FN_RWUNLOCK, "unlock", "GLIBC_2.2.5"),
    RW(FN_RWINIT, "init", "GLIBC_2.2.5"),
    RW(FN_RWDESTROY, "destroy", "GLIBC_2.2.5"),
#undef RW
#define V(f, name, new, old) [f] = { name, new }, [f##_OLD] = { name, old }
    V(FN_CSIGNAL, "pthread_cond_signal", "GLIBC_2.3.2", "GLIBC_2.2.5"),
    V(FN_CBROADCAST, "pthread_cond_broadcast", "GLIBC_2.3.2", "GLIBC_2.2.5"),
    V(FN_CINIT, "pthread_cond_init", "GLIBC_2.3.2", "GLIBC_2.2.5"),
    V(FN_CDESTROY, "pthread_cond_destroy", "GLIBC_2.3.2", "GLIBC_2.2.5"),
    V(FN_BINIT, "pthread_barrier_init", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_BWAIT, "pthread_barrier_wait", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_BDESTROY, "pthread_barrier_destroy", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_SOPEN, "sem_open", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_SWAIT, "sem_wait", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_STRYWAIT, "sem_trywait", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_STIMEDWAIT, "sem_timedwait", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_SCLOCKWAIT, "sem_clockwait", "GLIBC_2.34", "GLIBC_2.30"),
    V(FN_SPOST, "sem_post", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_SGETVALUE, "sem_getvalue", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_SCLOSE, "sem_close", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_SUNLINK, "sem_unlink", "GLIBC_2.34", "GLIBC_2.2.5"),
    V(FN_CONSISTENT, "pthread_mutex_consistent", "GLIBC_2.34", "GLIBC_2.12"),
#undef V
    [FN_CONSISTENT_NP] = { "pthread_mutex_consistent_np", "GLIBC_2.4" },
};

void *pl_real[FN_COUNT];
unsigned long pl_calls[FN_COUNT];
/* thread-local: the calling thread is inside the shim already (the
 * library's own calls go to the real functions, not back to it) */
__thread int pl_in_shim __attribute__((tls_model("initial-exec")));
static int reals_ready;

void pl_resolve_reals(void)
{
    void *p[FN_COUNT];
    int i;

    if (PL_LIKELY(__atomic_load_n(&reals_ready, __ATOMIC_ACQUIRE)))
        return;
    /* Several threads may get here at once: each finds the same values. */
    for (i = 0; i < FN_COUNT; i++) {
        p[i] = dlvsym(RTLD_NEXT, fn_sym[i].name, fn_sym[i].version);
        if (!p[i])
            pl_die("cannot find %s@%s after this library (dlvsym: %s)",
                   fn_sym[i].name, fn_sym[i].version, dlerror());
    }
    for (i = 0; i < FN_COUNT; i++)
        __atomic_store_n(&pl_real[i], p[i], __ATOMIC_RELAXED);
    __atomic_store_n(&reals_ready, 1, __ATOMIC_RELEASE);
}

/* thread-local: the pl_own_locks this thread holds for a fork.  Only
 * the forking thread's fork handlers set bits, and its other handlers,
 * which take the same locks, must see that they are held already
 * (preload.h says why). */
static __thread unsigned forking __attribute__((tls_model("initial-exec")));

void pl_own_take(struct pl_own_lock *o)
{
    if (!(forking & o->bit))
        REAL(FN_LOCK, lock_fn)(&o->mu);
}

void pl_own_give(struct pl_own_lock *o)
{
    if (!(forking & o->bit))
        REAL(FN_UNLOCK, lock_fn)(&o->mu);
}

void pl_own_fork_take(struct pl_own_lock *o)
{
    REAL(FN_LOCK, lock_fn)(&o->mu);
    forking |= o->bit;
}

void pl_own_fork_give(struct pl_own_lock *o)
{
    forking &= ~o->bit;
    REAL(FN_UNLOCK, lock_fn)(&o->mu);
}

/* For libdistlock (sys.c): glibc's function behind name, in the version
 * a build against this glibc binds (the first of the table), so that the
 * library's own mutexes and conditions bypass the shim.  NULL for a name
 * the shim does not interpose. */
typedef void (*pl_any_fn)(void);
EXPORT pl_any_fn distlock_preload_real(const char *name);
EXPORT pl_any_fn distlock_preload_real(const char *name)
{
    int i;

    pl_resolve_reals();
    for (i = 0; i < FN_COUNT; i++)
        if (strcmp(fn_sym[i].name, name) == 0)
            return (pl_any_fn)pl_real[i];
    return NULL;
}

/* For tests: how often an entry point saw a mapped lock, by
 * "name@VERSION" (-1 for an unknown name). */
EXPORT long distlock_preload_calls(const char *sym);
EXPORT long distlock_preload_calls(const char *sym)
{
    char buf[96];
    int i;

    for (i = 0; i < FN_COUNT; i++) {
        snprintf(buf, sizeof buf, "%s@%s", fn_sym[i].name, fn_sym[i].version);
        if (strcmp(buf, sym) == 0)
            return (long)__atomic_load_n(&pl_calls[i], __ATOMIC_RELAXED);
    }
    return -1;
}
