/* sem.c: named POSIX semaphores of libdistlock_preload.so.
 *
 * sem_open of a name that a [semaphore NAME] section chooses returns no
 * semaphore of glibc's: it returns the address of a sem_t inside a shim
 * entry (pl_entry.shadow), registered in the address table as a PL_SEM
 * entry, whose dist_sem_t does the work.  Every sem_* function asks the
 * table first, as the lock functions do: an address it does not know is
 * glibc's and goes on to glibc (a tail call, nothing else: sem_post stays
 * async-signal-safe for those); an address it knows is never handed to
 * glibc, even after its sem_close.  Entries are never freed (the table's
 * readers need no lock): a name opened again after its last sem_close
 * takes its old entry back, so its address is the same, as glibc's is. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "startup.h"

/* out of line, as shim.c's MAPPED: the fast path stays a tail call */
#define MAPPED_SEM static __attribute__((noinline))

static struct pl_own_lock sem_mu = PL_OWN_LOCK(PL_OWN_SEMS);
static struct pl_entry **sems; /* one per opened section */
static size_t nsems;

/* The [semaphore] section of a sem_open name, or NULL.  glibc ignores the
 * leading slashes of the name; so does the comparison. */
static const struct pl_section *sem_section(const char *name)
{
    size_t i;

    if (!name || pl_tab == pl_table_none())
        return NULL; /* not the configured program */
    while (*name == '/')
        name++;
    for (i = 0; i < pl_cfg.nsec; i++) {
        const char *n = pl_cfg.sec[i].sem_name;

        if (pl_cfg.sec[i].kind != PL_SEM || !n)
            continue;
        while (*n == '/')
            n++;
        if (strcmp(n, name) == 0)
            return &pl_cfg.sec[i];
    }
    return NULL;
}

/* The entry of sec, made and registered at its first open.  sem_mu is
 * held.  NULL with *rc set on failure. */
static struct pl_entry *sem_entry(const struct pl_section *sec, int *rc)
{
    struct pl_entry **n, *e;
    size_t i;

    for (i = 0; i < nsems; i++)
        if (sems[i]->sec == sec)
            return sems[i];
    n = realloc(sems, (nsems + 1) * sizeof *n);
    e = calloc(1, sizeof *e);
    if (n)
        sems = n;
    if (!n || !e || !(e->lockname = strdup(sec->name))) {
        free(e);
        *rc = ENOMEM;
        return NULL;
    }
    e->kind = PL_SEM;
    e->sec = sec;
    e->addr = (uintptr_t)&e->shadow;
    e->where = NULL;
    if ((*rc = pl_heap_add(e)) != 0) {
        free(e->lockname);
        free(e);
        return NULL;
    }
    sems[nsems++] = e;
    return e;
}

/* fork() must not copy the list of semaphores half-changed (preload.h's
 * pl_own_lock).  Registered at the first mapped sem_open, after start-up's
 * handlers, so this prepare runs first: sem_mu, then site.c's lock, the
 * order mapped_open takes them in. */
static void fork_prepare(void)
{
    pl_own_fork_take(&sem_mu);
}

static void fork_after(void)
{
    pl_own_fork_give(&sem_mu);
}

static void register_atfork(void)
{
    pthread_atfork(fork_prepare, fork_after, fork_after);
}

/* sem_open of a mapped name.  0 with *out, or an errno value. */
static int mapped_open(const struct pl_section *sec, int oflag,
                       unsigned value, sem_t **out)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    PL_KEEP_ERRNO;
    struct pl_entry *e;
    int rc = 0;

    if (value > (unsigned)SEM_VALUE_MAX)
        return EINVAL;
    pthread_once(&once, register_atfork);
    pl_own_take(&sem_mu);
    pl_in_shim = 1;
    e = sem_entry(sec, &rc);
    if (e && !__atomic_load_n(&e->live, __ATOMIC_RELAXED)) {
        rc = pl_entry_sem(e, oflag & O_CREAT ? value : 0);
        if (rc == 0)
            __atomic_store_n(&e->live, 1, __ATOMIC_RELEASE);
        else
            pl_msg("semaphore '%s': %s", e->lockname, dist_last_error());
    }
    if (rc == 0) {
        e->sem_refs++;
        *out = &e->shadow;
        if (pl_verbose())
            pl_msg("semaphore '%s' = sem_open(\"%s\") at %p", e->lockname,
                   sec->sem_name, (void *)*out);
    }
    pl_in_shim = 0;
    pl_own_give(&sem_mu);
    return rc;
}

#define OPEN(fname, f, sym)                                                  \
    PL_WRAPPER(sem_t *, fname, sym, const char *name, int oflag, ...)        \
    {                                                                        \
        const struct pl_section *sec;                                        \
        unsigned mode = 0, value = 0;                                        \
        sem_t *s = NULL;                                                     \
        va_list ap;                                                          \
        int rc;                                                              \
                                                                             \
        if (oflag & O_CREAT) {                                               \
            va_start(ap, oflag);                                             \
            mode = va_arg(ap, unsigned);                                     \
            value = va_arg(ap, unsigned);                                    \
            va_end(ap);                                                      \
        }                                                                    \
        pl_table_now();                                                      \
        if (pl_in_shim || !(sec = sem_section(name)))                        \
            return REAL(f, sopen_fn)(name, oflag, mode, value);              \
        pl_count(f);                                                         \
        if ((rc = mapped_open(sec, oflag, value, &s)) != 0) {                \
            errno = rc;                                                      \
            return SEM_FAILED;                                               \
        }                                                                    \
        return s;                                                            \
    }
OPEN(pl_sem_open, FN_SOPEN, "sem_open@@GLIBC_2.34")
OPEN(pl_sem_open_old, FN_SOPEN_OLD, "sem_open@GLIBC_2.2.5")

/* ---- the calls on an open semaphore -------------------------------------- */

enum { S_WAIT, S_TRY, S_TIMED, S_POST, S_VALUE };

static int sem_once(struct pl_entry *e, int op, clockid_t clk,
                    const struct timespec *abs, int *val)
{
    switch (op) {
    case S_WAIT:
        return dist_sem_wait(&e->ds);
    case S_TRY:
        return dist_sem_trywait(&e->ds);
    case S_TIMED:
        return dist_sem_clockwait(&e->ds, clk, abs);
    case S_POST:
        return dist_sem_post(&e->ds);
    default:
        return dist_sem_getvalue(&e->ds, val);
    }
}

/* One call on a mapped semaphore, with on_unavailable's answer to a Redis
 * that does not answer (block: again until it does, or until a timed
 * wait's deadline; fail: EAGAIN; abort).  0 or an errno value. */
MAPPED_SEM int sem_call(struct pl_entry *e, int op, clockid_t clk,
                        const struct timespec *abs, int *val)
{
    PL_KEEP_ERRNO;
    struct pl_away away = PL_AWAY_INIT;
    int rc;

    if (!__atomic_load_n(&e->live, __ATOMIC_ACQUIRE))
        return EINVAL; /* used after its sem_close */
    while ((rc = sem_once(e, op, clk, abs, val)) == EIO) {
        pl_away_aborts("semaphore", e->lockname);
        if (pl_cfg.on_unavailable == PL_FAIL || op == S_TRY) {
            rc = EAGAIN;
            break;
        }
        rc = pl_away_block(&away, "semaphore", e->lockname, op == S_TIMED,
                           clk, abs);
        if (rc != 0)
            break;
    }
    return rc;
}

/* The entry of s, a semaphore of ours, alive or closed; NULL for glibc's. */
static struct pl_entry *sem_of(sem_t *s)
{
    struct pl_entry *e = pl_table_get(pl_table_now(), (uintptr_t)s);

    return e && e->kind == PL_SEM ? e : NULL;
}

/* glibc's call for a semaphore of glibc's, else on with e, counted. */
#define SEM_PLAIN_OR_MAPPED(s, plain, f)                                     \
    struct pl_entry *e;                                                      \
    int rc;                                                                  \
    if (PL_LIKELY(pl_surely_plain(s)) || !(e = sem_of(s)))                   \
        return plain;                                                        \
    pl_count(f)

/* -1 with errno = rc, or 0, as the sem_* functions return. */
#define SEM_RETURN(rc)                                                       \
    do {                                                                     \
        if ((rc) != 0) {                                                     \
            errno = (rc);                                                    \
            return -1;                                                       \
        }                                                                    \
        return 0;                                                            \
    } while (0)

#define SEMOP(fname, f, sym, op)                                             \
    PL_WRAPPER(int, fname, sym, sem_t *s)                                    \
    {                                                                        \
        SEM_PLAIN_OR_MAPPED(s, REAL(f, swait_fn)(s), f);                     \
        rc = sem_call(e, op, 0, NULL, NULL);                                 \
        SEM_RETURN(rc);                                                      \
    }
SEMOP(pl_sem_wait, FN_SWAIT, "sem_wait@@GLIBC_2.34", S_WAIT)
SEMOP(pl_sem_wait_old, FN_SWAIT_OLD, "sem_wait@GLIBC_2.2.5", S_WAIT)
SEMOP(pl_sem_trywait, FN_STRYWAIT, "sem_trywait@@GLIBC_2.34", S_TRY)
SEMOP(pl_sem_trywait_old, FN_STRYWAIT_OLD, "sem_trywait@GLIBC_2.2.5", S_TRY)
SEMOP(pl_sem_post, FN_SPOST, "sem_post@@GLIBC_2.34", S_POST)
SEMOP(pl_sem_post_old, FN_SPOST_OLD, "sem_post@GLIBC_2.2.5", S_POST)

#define SEMTIMED(fname, f, sym)                                              \
    PL_WRAPPER(int, fname, sym, sem_t *s, const struct timespec *abs)        \
    {                                                                        \
        SEM_PLAIN_OR_MAPPED(s, REAL(f, stimed_fn)(s, abs), f);               \
        rc = sem_call(e, S_TIMED, CLOCK_REALTIME, abs, NULL);                \
        SEM_RETURN(rc);                                                      \
    }
SEMTIMED(pl_sem_timedwait, FN_STIMEDWAIT, "sem_timedwait@@GLIBC_2.34")
SEMTIMED(pl_sem_timedwait_old, FN_STIMEDWAIT_OLD, "sem_timedwait@GLIBC_2.2.5")

#define SEMCLOCK(fname, f, sym)                                              \
    PL_WRAPPER(int, fname, sym, sem_t *s, clockid_t clk,                     \
               const struct timespec *abs)                                   \
    {                                                                        \
        SEM_PLAIN_OR_MAPPED(s, REAL(f, sclock_fn)(s, clk, abs), f);          \
        if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)                 \
            SEM_RETURN(EINVAL);                                              \
        rc = sem_call(e, S_TIMED, clk, abs, NULL);                           \
        SEM_RETURN(rc);                                                      \
    }
SEMCLOCK(pl_sem_clockwait, FN_SCLOCKWAIT, "sem_clockwait@@GLIBC_2.34")
SEMCLOCK(pl_sem_clockwait_old, FN_SCLOCKWAIT_OLD, "sem_clockwait@GLIBC_2.30")

#define SEMVALUE(fname, f, sym)                                              \
    PL_WRAPPER(int, fname, sym, sem_t *s, int *v)                            \
    {                                                                        \
        SEM_PLAIN_OR_MAPPED(s, REAL(f, sget_fn)(s, v), f);                   \
        rc = sem_call(e, S_VALUE, 0, NULL, v);                               \
        SEM_RETURN(rc);                                                      \
    }
SEMVALUE(pl_sem_getvalue, FN_SGETVALUE, "sem_getvalue@@GLIBC_2.34")
SEMVALUE(pl_sem_getvalue_old, FN_SGETVALUE_OLD, "sem_getvalue@GLIBC_2.2.5")

/* The last sem_close of a name frees its dist_sem_t, unless a thread of
 * this process still holds one of its leased permits (EBUSY: it stays, and
 * the lease runs on until the permit is posted or the process ends). */
MAPPED_SEM int mapped_close(struct pl_entry *e)
{
    PL_KEEP_ERRNO;
    int rc = 0;

    pl_own_take(&sem_mu);
    pl_in_shim = 1;
    if (!__atomic_load_n(&e->live, __ATOMIC_RELAXED) || e->sem_refs == 0)
        rc = EINVAL;
    else if (--e->sem_refs == 0 && dist_sem_destroy(&e->ds) == 0)
        __atomic_store_n(&e->live, 0, __ATOMIC_RELEASE);
    pl_in_shim = 0;
    pl_own_give(&sem_mu);
    return rc;
}

#define SEMCLOSE(fname, f, sym)                                              \
    PL_WRAPPER(int, fname, sym, sem_t *s)                                    \
    {                                                                        \
        SEM_PLAIN_OR_MAPPED(s, REAL(f, swait_fn)(s), f);                     \
        rc = mapped_close(e);                                                \
        SEM_RETURN(rc);                                                      \
    }
SEMCLOSE(pl_sem_close, FN_SCLOSE, "sem_close@@GLIBC_2.34")
SEMCLOSE(pl_sem_close_old, FN_SCLOSE_OLD, "sem_close@GLIBC_2.2.5")

/* sem_unlink of a mapped name does nothing: the semaphore lives in Redis
 * for every process that maps the name, and removing it under them would
 * lose their permits (distlock sem-set resets one on purpose). */
#define SEMUNLINK(fname, f, sym)                                             \
    PL_WRAPPER(int, fname, sym, const char *name)                            \
    {                                                                        \
        pl_table_now();                                                      \
        if (pl_in_shim || !sem_section(name))                                \
            return REAL(f, sunlink_fn)(name);                                \
        pl_count(f);                                                         \
        return 0;                                                            \
    }
SEMUNLINK(pl_sem_unlink, FN_SUNLINK, "sem_unlink@@GLIBC_2.34")
SEMUNLINK(pl_sem_unlink_old, FN_SUNLINK_OLD, "sem_unlink@GLIBC_2.2.5")
