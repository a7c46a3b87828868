/* shim.c: the pthread functions of libdistlock_preload.so.
 *
 * Every interposed function first asks whether its mutex is mapped.  That
 * question must cost next to nothing for the mutexes that are not (nearly
 * all of them, including libdistlock's own): one load of the table pointer,
 * one multiply, one load of a slot; an empty slot means "not mapped" and
 * the call goes on to glibc's function as a tail call.  The table is an
 * open-addressing set of addresses, at most half full, published once with
 * a release store and never changed in place except by adding keys (heap
 * mutexes found through init_site); the loads on that path are plain moves
 * on x86-64: no locked instruction, no fence, no allocation, no TLS.
 *
 * Start-up is lazy: the first call of any interposed function (a library's
 * constructor, a thread, or our own constructor, whichever comes first)
 * builds the table.  Other threads wait on a futex until it is published,
 * so no mapped mutex is ever run as a plain one; the thread building it
 * (whose own calls into libdistlock, inih and libc come back here) passes
 * straight through.  Start-up reads the configuration and the symbol tables
 * and creates the dist_mutex objects; it does no network I/O.
 *
 * Every wrapper exists in each symbol version glibc 2.36 defines for it,
 * and forwards to the same version (dlvsym(RTLD_NEXT, name, version)):
 * a freshly built binary binds pthread_mutex_trylock@GLIBC_2.34 and
 * pthread_cond_wait@GLIBC_2.3.2, an old one @GLIBC_2.2.5, and both must
 * land here and then in the right glibc function. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SYMVER(s) __attribute__((symver(s)))

/* ---- the real functions ------------------------------------------------ */

typedef int (*lock_fn)(pthread_mutex_t *);
typedef int (*timed_fn)(pthread_mutex_t *, const struct timespec *);
typedef int (*clock_fn)(pthread_mutex_t *, clockid_t, const struct timespec *);
typedef int (*init_fn)(pthread_mutex_t *, const pthread_mutexattr_t *);
typedef int (*wait_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*twait_fn)(pthread_cond_t *, pthread_mutex_t *,
                        const struct timespec *);
typedef int (*cwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                        const struct timespec *);
typedef int (*rw_fn)(pthread_rwlock_t *);
typedef int (*rwtimed_fn)(pthread_rwlock_t *, const struct timespec *);
typedef int (*rwclock_fn)(pthread_rwlock_t *, clockid_t,
                          const struct timespec *);
typedef int (*rwinit_fn)(pthread_rwlock_t *, const pthread_rwlockattr_t *);

/* One entry point of ours: the glibc symbol it stands for, the glibc
 * function it forwards to, and how often it saw a mapped lock. */
enum {
    FN_LOCK, FN_UNLOCK, FN_INIT, FN_DESTROY,
    FN_TRYLOCK, FN_TRYLOCK_OLD, FN_TIMEDLOCK, FN_TIMEDLOCK_OLD,
    FN_CLOCKLOCK, FN_CLOCKLOCK_OLD,
    FN_WAIT, FN_WAIT_OLD, FN_TIMEDWAIT, FN_TIMEDWAIT_OLD,
    FN_CLOCKWAIT, FN_CLOCKWAIT_OLD,
    FN_RDLOCK, FN_RDLOCK_OLD, FN_TRYRDLOCK, FN_TRYRDLOCK_OLD,
    FN_TIMEDRDLOCK, FN_TIMEDRDLOCK_OLD, FN_CLOCKRDLOCK, FN_CLOCKRDLOCK_OLD,
    FN_WRLOCK, FN_WRLOCK_OLD, FN_TRYWRLOCK, FN_TRYWRLOCK_OLD,
    FN_TIMEDWRLOCK, FN_TIMEDWRLOCK_OLD, FN_CLOCKWRLOCK, FN_CLOCKWRLOCK_OLD,
    FN_RWUNLOCK, FN_RWUNLOCK_OLD, FN_RWINIT, FN_RWINIT_OLD,
    FN_RWDESTROY, FN_RWDESTROY_OLD,
    FN_COUNT
};

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
};

static void *real[FN_COUNT];
static int reals_ready;
static unsigned long calls[FN_COUNT];

#define REAL(f, type) ((type)real[f])

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void resolve_reals(void)
{
    void *p[FN_COUNT];
    int i;

    if (LIKELY(__atomic_load_n(&reals_ready, __ATOMIC_ACQUIRE)))
        return;
    /* Several threads may get here at once: each finds the same values. */
    for (i = 0; i < FN_COUNT; i++) {
        p[i] = dlvsym(RTLD_NEXT, fn_sym[i].name, fn_sym[i].version);
        if (!p[i])
            die("cannot find %s@%s after this library (dlvsym: %s)",
                fn_sym[i].name, fn_sym[i].version, dlerror());
    }
    for (i = 0; i < FN_COUNT; i++)
        __atomic_store_n(&real[i], p[i], __ATOMIC_RELAXED);
    __atomic_store_n(&reals_ready, 1, __ATOMIC_RELEASE);
}

/* ---- the configuration, fatal errors ------------------------------------------ */

static struct pl_config cfg;

/* Prints at once (start-up may not be over) and aborts. */
static void die(const char *fmt, ...)
{
    va_list ap;

    pl_msg_started();
    va_start(ap, fmt);
    pl_vmsg(fmt, ap);
    va_end(ap);
    abort();
}

/* ---- the address table ------------------------------------------------------ */

struct entry {
    uintptr_t addr;
    int kind;                     /* enum pl_kind */
    int dynamic;                  /* found through init_site */
    int live;                     /* atomic; always 1 for symbol entries */
    const struct pl_section *sec;
    char *lockname;
    char *where;
    dist_mutex_t dm;              /* PL_MUTEX */
    dist_rwlock_t drw;            /* PL_RWLOCK */
    /* a mutex's local holder: written only by the thread holding the real
     * mutex (relaxed atomics, for the reads of a buggy non-owner) */
    pthread_t owner;
    unsigned long owner_gen;
    unsigned depth;
};

struct table {
    unsigned shift;               /* slot = (addr * K) >> shift */
    size_t mask;
    size_t used;
    struct entry **val;
    uintptr_t key[];
};

#define HASH_K 0x9E3779B97F4A7C15ull

static const struct table *tab;         /* NULL until start-up is over */
static struct table *tab_w;             /* the same, for the writer */
static int phase;                       /* 0, 1 starting, 2 done (futex) */
/* Set while this thread runs our own code that calls back into the
 * interposed functions (start-up, mapping a heap mutex): those calls are
 * libdistlock's, inih's or libc's, and pass straight through. */
static __thread int in_shim __attribute__((tls_model("initial-exec")));
static unsigned long fork_gen;

/* Nothing mapped: two empty slots (a shift of 64 would be undefined). */
static struct {
    struct table t;
    uintptr_t k[2];
} empty = { { 63, 1, 0, NULL }, { 0, 0 } };

static inline size_t slot_of(const struct table *t, uintptr_t a)
{
    return (size_t)((a * HASH_K) >> t->shift);
}

static struct table *table_new(size_t cap)
{
    struct table *t;
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

static void table_put(struct table *t, struct entry *e)
{
    size_t i = slot_of(t, e->addr);

    while (t->key[i])
        i = (i + 1) & t->mask;
    t->val[i] = e;
    __atomic_store_n(&t->key[i], e->addr, __ATOMIC_RELEASE);
    t->used++;
}

/* The entry of an address, dead or alive. */
static struct entry *table_get(const struct table *t, uintptr_t a)
{
    size_t i = slot_of(t, a);
    uintptr_t k;

    while ((k = __atomic_load_n(&t->key[i], __ATOMIC_ACQUIRE)) != 0) {
        if (k == a)
            return t->val[i];
        i = (i + 1) & t->mask;
    }
    return NULL;
}

/* ---- init_site ---------------------------------------------------------------- */

static struct pl_site *sites;
static size_t nsites;
static pthread_mutex_t dyn_mu = PTHREAD_MUTEX_INITIALIZER;  /* via real[] */
static unsigned long *site_seq;

static const struct pl_site *site_of(uintptr_t ra, int kind)
{
    size_t i, j;

    for (i = 0; i < nsites; i++)
        for (j = 0; j < sites[i].nr && (int)sites[i].sec->kind == kind; j++)
            if (ra >= sites[i].r[j].lo && ra < sites[i].r[j].hi)
                return &sites[i];
    return NULL;
}

/* ---- start-up --------------------------------------------------------------- */

static int status_fd = -1;

static void on_lost(const char *name, void *arg)
{
    (void)arg;
    if (cfg.on_lease_lost == PL_LOST_ABORT)
        die("lock '%s' was lost (its lease ran out, it was forced, or Redis "
            "lost its data): aborting (on_lease_lost = abort)", name);
    pl_msg("lock '%s' was lost (its lease ran out, it was forced, or Redis "
           "lost its data); the program goes on (on_lease_lost = log)", name);
}

/* A fork() must not copy the heap-mutex table half-changed, nor dyn_mu
 * locked by a thread the child does not have.  (Registered after
 * libdistlock's handlers, so this prepare runs first: dyn_mu, then the
 * library's locks, the order site_init takes them in.) */
static void fork_prepare(void)
{
    if (nsites)
        REAL(FN_LOCK, lock_fn)(&dyn_mu);
}

static void fork_parent(void)
{
    if (nsites)
        REAL(FN_UNLOCK, lock_fn)(&dyn_mu);
}

static void fork_child(void)
{
    fork_gen++;           /* the parent's holders are not this process's */
    if (nsites)
        REAL(FN_UNLOCK, lock_fn)(&dyn_mu);
}

static int init_entry(struct entry *e, const char *lockname)
{
    const struct pl_section *s = e->sec;
    dist_mutexattr_t a;
    long lease = s->lease_ms >= 0 ? s->lease_ms : (long)cfg.lease_ms;
    int rc;

    free(e->lockname);
    e->lockname = strdup(lockname);
    if (!e->lockname)
        return ENOMEM;
    e->kind = s->kind;
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
    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, s->fair);
    if ((rc = dist_mutexattr_setlease(&a, (unsigned long)lease)) == 0)
        rc = dist_mutex_init(&e->dm, e->lockname, &a);
    dist_mutexattr_destroy(&a);
    return rc;
}

/* Is this process the one distlock-run started (or, without distlock-run,
 * any process)?  Children that exec other programs inherit LD_PRELOAD; the
 * mappings are about one program only. */
static int is_target(void)
{
    const char *t = getenv("DISTLOCK_PRELOAD_TARGET");
    unsigned long long dev, ino;
    struct stat st;

    if (!t || !*t)
        return 1;
    if (sscanf(t, "%llu:%llu", &dev, &ino) != 2 ||
        stat("/proc/self/exe", &st) != 0)
        return 1;
    return (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

/* [preload] program = NAME or /path: is this process that program? */
static int is_program(const char *want)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *base;

    if (n <= 0)
        return 1;
    exe[n] = '\0';
    if (strchr(want, '/'))
        return strcmp(exe, want) == 0;
    base = strrchr(exe, '/');
    return strcmp(base ? base + 1 : exe, want) == 0;
}

static void open_status(void)
{
    const char *s = getenv("DISTLOCK_PRELOAD_STATUS_FD");
    long long pid;
    int fd;

    if (s && sscanf(s, "%d:%lld", &fd, &pid) == 2 && fd > 2 &&
        pid == (long long)getpid())
        status_fd = fd;
}

/* Hands the messages to distlock-run (or prints them) and the verdict. */
static void finish_status(int ok, size_t mapped)
{
    char line[64];

    pl_msg_hand_over(status_fd);
    if (status_fd >= 0) {
        if (ok)
            snprintf(line, sizeof line, "ok %zu\n", mapped);
        else
            snprintf(line, sizeof line, "fail\n");
        pl_write_all(status_fd, line, strlen(line));
        close(status_fd);
        status_fd = -1;
    }
}

static void startup_fail(void)
{
    finish_status(0, 0);
    _exit(PL_EXIT_CONFIG);
}

/* The [redis] settings, for the library. */
static void apply_settings(void)
{
    int rc;

    if (cfg.url && (rc = dist_set_url(cfg.url)) != 0) {
        pl_msg("%s:%d: url: %s", cfg.path, cfg.url_line, dist_last_error());
        startup_fail();
    }
    if (cfg.watchdog_ms)
        dist_set_watchdog_ms(cfg.watchdog_ms);
    if (cfg.timeout_ms)
        dist_set_timeout_ms(cfg.timeout_ms);
}

/* The entry of one resolved address, its distributed lock made. */
static struct entry *target_entry(struct pl_target *pt)
{
    struct entry *e = calloc(1, sizeof *e);
    char name[DIST_NAME_MAX + 32];
    int rc;

    if (!e) {
        pl_msg("out of memory");
        startup_fail();
    }
    e->addr = pt->addr;
    e->sec = pt->sec;
    e->live = 1;
    e->where = pt->where;
    pt->where = NULL;
    if (pt->index >= 0)
        snprintf(name, sizeof name, "%s:%ld", pt->sec->name, pt->index);
    else
        snprintf(name, sizeof name, "%s", pt->sec->name);
    if ((rc = init_entry(e, name)) != 0) {
        pl_msg("%s:%d: lock '%s': %s", cfg.path, pt->sec->line, name,
               dist_last_error());
        startup_fail();
    }
    return e;
}

/* The address table, with room for the heap mutexes of init_site. */
static struct table *map_targets(struct pl_resolved *res)
{
    struct table *t;
    size_t i, cap;

    cap = 4 * res->nt + 16;
    if (res->ns)
        cap += 1024;
    t = table_new(cap);
    if (!t) {
        pl_msg("out of memory");
        startup_fail();
    }
    for (i = 0; i < res->nt; i++) {
        struct entry *e = target_entry(&res->t[i]);

        table_put(t, e);
        if (pl_verbose())
            pl_msg("%s '%s' = %s", e->kind == PL_MUTEX ? "mutex" : "rwlock",
                   e->lockname, e->where);
    }
    return t;
}

/* Takes the init_site sections from res, for site_init. */
static void take_sites(struct pl_resolved *res)
{
    size_t i;

    sites = res->s;
    nsites = res->ns;
    res->s = NULL;
    res->ns = 0;
    if (nsites) {
        site_seq = calloc(nsites, sizeof *site_seq);
        if (!site_seq) {
            pl_msg("out of memory");
            startup_fail();
        }
    }
    for (i = 0; i < nsites && pl_verbose(); i++)
        pl_msg("%s '%s:<n>' = every %s that %s",
               sites[i].sec->kind == PL_MUTEX ? "mutex" : "rwlock",
               sites[i].sec->name,
               sites[i].sec->kind == PL_MUTEX ? "mutex" : "rwlock",
               sites[i].where);
}

static const struct table *build(void)
{
    struct pl_resolved res;
    struct table *t;
    const char *path, *v;

    open_status();
    v = getenv("DISTLOCK_PRELOAD_VERBOSE");
    pl_set_verbose(v && *v && strcmp(v, "0") != 0);
    if (!is_target()) {
        pl_msg_drop();
        status_fd = -1;
        return &empty.t;
    }
    path = getenv("DISTLOCK_PRELOAD_CONFIG");
    if (!path || !*path) {
        pl_msg("DISTLOCK_PRELOAD_CONFIG is not set: no configuration to "
               "apply (distlock-run --config FILE sets it)");
        startup_fail();
    }
    if (pl_config_load(path, &cfg) != 0)
        startup_fail();
    if (cfg.program && !is_program(cfg.program)) {
        /* another program started with the same environment */
        pl_msg_drop();
        status_fd = -1;
        return &empty.t;
    }
    if (cfg.verbose)
        pl_set_verbose(1);
    apply_settings();
    if (pl_resolve(&cfg, &res) != 0)
        startup_fail();
    t = map_targets(&res);
    take_sites(&res);
    if (res.unresolved)
        pl_msg("warning: %zu section(s) not resolved (on_unresolved = warn)",
               res.unresolved);
    dist_set_lost_handler(on_lost, NULL);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    finish_status(1, res.nt + nsites);
    pl_resolved_free(&res);
    tab_w = t;
    return t;
}

static const struct table *startup(void)
{
    PL_KEEP_ERRNO;
    int expect = 0;
    const struct table *t;

    resolve_reals();
    if (in_shim)
        return &empty.t;            /* our own start-up's calls */
    if (__atomic_compare_exchange_n(&phase, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        in_shim = 1;
        t = build();
        in_shim = 0;
        pl_msg_started();
        __atomic_store_n(&tab, t, __ATOMIC_RELEASE);
        __atomic_store_n(&phase, 2, __ATOMIC_RELEASE);
        syscall(SYS_futex, &phase, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        return t;
    }
    while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 2)
        syscall(SYS_futex, &phase, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
    return __atomic_load_n(&tab, __ATOMIC_ACQUIRE);
}

__attribute__((constructor)) static void preload_ctor(void)
{
    if (!__atomic_load_n(&tab, __ATOMIC_ACQUIRE))
        startup();
}

/* The live entry of a mutex, or NULL (start-up first if need be). */
static struct entry *entry_of(const void *m)
{
    const struct table *t = __atomic_load_n(&tab, __ATOMIC_ACQUIRE);
    struct entry *e;

    if (UNLIKELY(!t))
        t = startup();
    e = table_get(t, (uintptr_t)m);
    if (e && !__atomic_load_n(&e->live, __ATOMIC_ACQUIRE))
        return NULL;
    return e;
}

/* The fast path: true when m is certainly not mapped (its first slot is
 * empty).  Plain loads only. */
static inline int surely_plain(const void *m)
{
    const struct table *t = __atomic_load_n(&tab, __ATOMIC_ACQUIRE);

    return LIKELY(t != NULL) &&
           LIKELY(__atomic_load_n(&t->key[slot_of(t, (uintptr_t)m)],
                                  __ATOMIC_RELAXED) == 0);
}

static inline void count(int f)
{
    __atomic_fetch_add(&calls[f], 1, __ATOMIC_RELAXED);
}

/* For tests: how often an entry point saw a mapped mutex, by
 * "name@VERSION" (-1 for an unknown name). */
EXPORT long distlock_preload_calls(const char *sym);
EXPORT long distlock_preload_calls(const char *sym)
{
    char buf[96];
    int i;

    for (i = 0; i < FN_COUNT; i++) {
        snprintf(buf, sizeof buf, "%s@%s", fn_sym[i].name, fn_sym[i].version);
        if (strcmp(buf, sym) == 0)
            return (long)__atomic_load_n(&calls[i], __ATOMIC_RELAXED);
    }
    return -1;
}

/* ---- the distributed half ------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int deadline_passed(clockid_t clk, const struct timespec *abs)
{
    struct timespec now;

    clock_gettime(clk, &now);
    return now.tv_sec > abs->tv_sec ||
           (now.tv_sec == abs->tv_sec && now.tv_nsec >= abs->tv_nsec);
}

enum { D_BLOCK, D_TRY, D_TIMED, D_MUST };

/* One attempt on the distributed lock: a mutex, or a read-write lock for
 * reading (wr 0) or writing (wr 1).  D_TIMED: abs on clk, the caller's own
 * clock (a CLOCK_MONOTONIC deadline stays one). */
static int dist_try_once(struct entry *e, int how, int wr, clockid_t clk,
                         const struct timespec *abs)
{
    if (e->kind == PL_MUTEX) {
        if (how == D_TRY)
            return dist_mutex_trylock(&e->dm);
        if (how == D_TIMED)
            return dist_mutex_clocklock(&e->dm, clk, abs);
        return dist_mutex_lock(&e->dm);
    }
    if (how == D_TRY)
        return wr ? dist_rwlock_trywrlock(&e->drw)
                  : dist_rwlock_tryrdlock(&e->drw);
    if (how == D_TIMED)
        return wr ? dist_rwlock_clockwrlock(&e->drw, clk, abs)
                  : dist_rwlock_clockrdlock(&e->drw, clk, abs);
    return wr ? dist_rwlock_wrlock(&e->drw) : dist_rwlock_rdlock(&e->drw);
}

/* Takes the distributed lock; the real mutex is held.  0, EBUSY,
 * ETIMEDOUT, EAGAIN (Redis unavailable and on_unavailable = fail, or out
 * of memory: an error every lock call of pthread may give, where ENOMEM is
 * none), or the library's error.  D_MUST blocks whatever on_unavailable
 * says but abort, and waits for memory too: a condition wait has to
 * return with the whole mutex. */
static int dist_take(struct entry *e, int how, int wr, clockid_t clk,
                     const struct timespec *abs)
{
    unsigned backoff = 20;
    int rc, told = 0;
    PL_KEEP_ERRNO;

    for (;;) {
        rc = dist_try_once(e, how, wr, clk, abs);
        if (rc == ENOMEM && how != D_MUST) {
            pl_msg("lock '%s': out of memory: the call fails with EAGAIN",
                   e->lockname);
            rc = EAGAIN;
            break;
        }
        if (rc == ENOMEM)
            goto again;
        if (rc != EIO)
            break;
        if (cfg.on_unavailable == PL_ABORT)
            die("lock '%s': %s: aborting (on_unavailable = abort)",
                e->lockname, dist_last_error());
        if (cfg.on_unavailable == PL_FAIL && how != D_MUST) {
            pl_msg("lock '%s': %s: the call fails with EAGAIN "
                   "(on_unavailable = fail)", e->lockname, dist_last_error());
            rc = EAGAIN;
            break;
        }
        if (how == D_TRY) {
            rc = EBUSY;
            break;
        }
        if (how == D_TIMED && deadline_passed(clk, abs)) {
            rc = ETIMEDOUT;
            break;
        }
        if (!told++)
            pl_msg("lock '%s': %s: waiting for Redis (on_unavailable = "
                   "block)", e->lockname, dist_last_error());
again:
        sleep_ms(backoff);
        backoff = backoff < 1000 ? backoff * 2 : 1000;
    }
    if (told && rc == 0)
        pl_msg("lock '%s': Redis answers again; lock taken", e->lockname);
    return rc;
}

/* Gives the distributed lock back; the real mutex is still held.  A
 * release that Redis did not confirm is retried until it does: leaving the
 * hold behind would keep every other process out. */
static void dist_give(struct entry *e)
{
    unsigned backoff = 20;
    int rc, told = 0;
    PL_KEEP_ERRNO;

    for (;;) {
        rc = e->kind == PL_MUTEX ? dist_mutex_unlock(&e->dm)
                                 : dist_rwlock_unlock(&e->drw);
        if (rc != EIO)
            break;
        if (cfg.on_unavailable == PL_ABORT)
            die("lock '%s': release failed: %s: aborting (on_unavailable = "
                "abort)", e->lockname, dist_last_error());
        if (!told++)
            pl_msg("lock '%s': release failed: %s: retrying until Redis "
                   "answers", e->lockname, dist_last_error());
        sleep_ms(backoff);
        backoff = backoff < 1000 ? backoff * 2 : 1000;
    }
    /* EPERM: the hold was lost (on_lost said so) or was never ours (a
     * fork() child unlocking what its parent locked) */
    if (rc != 0 && rc != EPERM)
        pl_msg("lock '%s': release: %s", e->lockname, dist_last_error());
}

static int held_by_me(const struct entry *e)
{
    return __atomic_load_n(&e->depth, __ATOMIC_RELAXED) > 0 &&
           __atomic_load_n(&e->owner_gen, __ATOMIC_RELAXED) == fork_gen &&
           pthread_equal(__atomic_load_n(&e->owner, __ATOMIC_RELAXED),
                         pthread_self());
}

static void set_holder(struct entry *e, unsigned depth)
{
    __atomic_store_n(&e->owner, depth ? pthread_self() : (pthread_t)0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&e->owner_gen, fork_gen, __ATOMIC_RELAXED);
    __atomic_store_n(&e->depth, depth, __ATOMIC_RELAXED);
}

/* ---- mapped mutexes ------------------------------------------------------- */

enum { L_LOCK, L_TRY, L_TIMED, L_CLOCK };

static int mapped_lock(struct entry *e, pthread_mutex_t *m, int how, void *fn,
                       clockid_t clk, const struct timespec *abs)
{
    PL_KEEP_ERRNO;
    int rc, rc2;

    switch (how) {
    case L_LOCK:
        rc = ((lock_fn)fn)(m);
        break;
    case L_TRY:
        rc = ((lock_fn)fn)(m);
        break;
    case L_TIMED:
        rc = ((timed_fn)fn)(m, abs);
        break;
    default:
        rc = ((clock_fn)fn)(m, clk, abs);
        break;
    }
    if (rc != 0 && rc != EOWNERDEAD)
        return rc;
    if (rc == EOWNERDEAD)
        set_holder(e, 0);           /* the dead owner's record */
    if (held_by_me(e)) {            /* a recursive mutex, again */
        __atomic_store_n(&e->depth, e->depth + 1, __ATOMIC_RELAXED);
        return rc;
    }
    if (how == L_TRY)
        rc2 = dist_take(e, D_TRY, 0, 0, NULL);
    else if (how == L_LOCK)
        rc2 = dist_take(e, D_BLOCK, 0, 0, NULL);
    else
        rc2 = dist_take(e, D_TIMED, 0, how == L_TIMED ? CLOCK_REALTIME : clk,
                        abs);
    if (rc2 != 0) {
        REAL(FN_UNLOCK, lock_fn)(m);
        return rc2;
    }
    set_holder(e, 1);
    return rc;
}

static int mapped_unlock(struct entry *e, pthread_mutex_t *m)
{
    PL_KEEP_ERRNO;
    unsigned d;

    if (!held_by_me(e))
        return REAL(FN_UNLOCK, lock_fn)(m);  /* EPERM, or as glibc does */
    d = __atomic_load_n(&e->depth, __ATOMIC_RELAXED);
    if (d > 1) {
        __atomic_store_n(&e->depth, d - 1, __ATOMIC_RELAXED);
        return REAL(FN_UNLOCK, lock_fn)(m);
    }
    set_holder(e, 0);
    dist_give(e);
    return REAL(FN_UNLOCK, lock_fn)(m);
}

enum { W_WAIT, W_TIMED, W_CLOCK };

static int mapped_wait(struct entry *e, pthread_cond_t *c, pthread_mutex_t *m,
                       int how, void *fn, clockid_t clk,
                       const struct timespec *abs)
{
    PL_KEEP_ERRNO;
    int rc;

    /* what glibc refuses before it lets go of the mutex */
    if (how != W_WAIT && (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L))
        return EINVAL;
    if (how == W_CLOCK && clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)
        return EINVAL;
    if (!held_by_me(e) || __atomic_load_n(&e->depth, __ATOMIC_RELAXED) != 1)
        goto plain;     /* not the holder, or locked recursively: as glibc */
    set_holder(e, 0);
    dist_give(e);
    if (how == W_WAIT)
        rc = ((wait_fn)fn)(c, m);
    else if (how == W_TIMED)
        rc = ((twait_fn)fn)(c, m, abs);
    else
        rc = ((cwait_fn)fn)(c, m, clk, abs);
    /* the real mutex is ours again: now the distributed one */
    dist_take(e, D_MUST, 0, 0, NULL);
    set_holder(e, 1);
    return rc;
plain:
    if (how == W_WAIT)
        return ((wait_fn)fn)(c, m);
    if (how == W_TIMED)
        return ((twait_fn)fn)(c, m, abs);
    return ((cwait_fn)fn)(c, m, clk, abs);
}

static void entry_kill(struct entry *e)
{
    PL_KEEP_ERRNO;
    __atomic_store_n(&e->live, 0, __ATOMIC_RELEASE);
    if (e->kind == PL_MUTEX)
        dist_mutex_destroy(&e->dm);
    else
        dist_rwlock_destroy(&e->drw);
}

/* pthread_mutex_init (pthread_rwlock_init) from an init_site function maps
 * the new lock; from anywhere else it unmaps a heap entry left at that
 * address.  0, or ENOMEM: the lock could not be mapped for want of memory,
 * and the caller's init fails with it (a lock that stayed local would not
 * exclude the other processes). */
static int site_init(void *m, uintptr_t ra, int kind)
{
    PL_KEEP_ERRNO;
    const struct pl_site *s = site_of(ra, kind);
    struct entry *e;
    char name[DIST_NAME_MAX + 32];
    int rc = 0;

    REAL(FN_LOCK, lock_fn)(&dyn_mu);
    in_shim = 1;
    e = table_get(tab_w, (uintptr_t)m);
    if (e && !e->dynamic)
        goto out;                   /* a mapped global, initialised again */
    if (e && __atomic_load_n(&e->live, __ATOMIC_RELAXED))
        entry_kill(e);
    if (!s)
        goto out;
    if (!e) {
        struct table *t = tab_w;

        e = calloc(1, sizeof *e);
        if (!e) {
            rc = ENOMEM;
            goto out;
        }
        e->addr = (uintptr_t)m;
        e->dynamic = 1;
        if ((t->used + 1) * 2 > t->mask + 1) {
            /* grow: the old table stays readable for whoever still has
             * it, and is never freed */
            struct table *n = table_new(2 * (t->mask + 1));
            size_t i;

            if (!n) {
                free(e);
                e = NULL;
                rc = ENOMEM;
                goto out;
            }
            for (i = 0; i <= t->mask; i++)
                if (t->key[i])
                    table_put(n, t->val[i]);
            tab_w = t = n;
            __atomic_store_n(&tab, n, __ATOMIC_RELEASE);
        }
        table_put(t, e);
    }
    e->sec = s->sec;
    snprintf(name, sizeof name, "%s:%lu", s->sec->name,
             site_seq[s - sites]++);
    set_holder(e, 0);
    if ((rc = init_entry(e, name)) == ENOMEM) {
        pl_msg("lock '%s': out of memory: its init fails with ENOMEM", name);
        goto out;
    }
    if (rc != 0) {
        pl_msg("lock '%s': %s: this mutex stays local", name,
               dist_last_error());
        rc = 0;
        goto out;
    }
    if (pl_verbose())
        pl_msg("%s '%s' = %p, initialised by %s",
               kind == PL_MUTEX ? "mutex" : "rwlock", name, m, s->where);
    __atomic_store_n(&e->live, 1, __ATOMIC_RELEASE);
out:
    if (rc == ENOMEM && s && e == NULL)
        pl_msg("%s initialised by %s: out of memory: its init fails with "
               "ENOMEM", kind == PL_MUTEX ? "mutex" : "rwlock", s->where);
    in_shim = 0;
    REAL(FN_UNLOCK, lock_fn)(&dyn_mu);
    return rc;
}

/* ---- the interposed functions -------------------------------------------- */

/* (an entry of the other kind: the program reused the memory without
 * initialising it; glibc decides) */
#define PLAIN_OR_MAPPED(m, plain, f)                                         \
    struct entry *e;                                                         \
    if (LIKELY(surely_plain(m)))                                             \
        return plain;                                                        \
    if (!(e = entry_of(m)) ||                                                \
        e->kind != (__builtin_types_compatible_p(__typeof__(m),              \
                                                 pthread_rwlock_t *)         \
                        ? PL_RWLOCK : PL_MUTEX))                             \
        return plain;                                                        \
    count(f)

int pl_mutex_lock(pthread_mutex_t *m);
int pl_mutex_unlock(pthread_mutex_t *m);
int pl_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int pl_mutex_destroy(pthread_mutex_t *m);

EXPORT SYMVER("pthread_mutex_lock@@GLIBC_2.2.5")
int pl_mutex_lock(pthread_mutex_t *m)
{
    PLAIN_OR_MAPPED(m, REAL(FN_LOCK, lock_fn)(m), FN_LOCK);
    return mapped_lock(e, m, L_LOCK, real[FN_LOCK], 0, NULL);
}

EXPORT SYMVER("pthread_mutex_unlock@@GLIBC_2.2.5")
int pl_mutex_unlock(pthread_mutex_t *m)
{
    PLAIN_OR_MAPPED(m, REAL(FN_UNLOCK, lock_fn)(m), FN_UNLOCK);
    return mapped_unlock(e, m);
}

#define TRYLOCK(fname, f, ver)                                               \
    int fname(pthread_mutex_t *m);                                           \
    EXPORT SYMVER("pthread_mutex_trylock" ver)                               \
    int fname(pthread_mutex_t *m)                                            \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, lock_fn)(m), f);                          \
        return mapped_lock(e, m, L_TRY, real[f], 0, NULL);                   \
    }
TRYLOCK(pl_mutex_trylock, FN_TRYLOCK, "@@GLIBC_2.34")
TRYLOCK(pl_mutex_trylock_old, FN_TRYLOCK_OLD, "@GLIBC_2.2.5")

#define TIMEDLOCK(fname, f, ver)                                             \
    int fname(pthread_mutex_t *m, const struct timespec *abs);               \
    EXPORT SYMVER("pthread_mutex_timedlock" ver)                             \
    int fname(pthread_mutex_t *m, const struct timespec *abs)                \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, timed_fn)(m, abs), f);                    \
        return mapped_lock(e, m, L_TIMED, real[f], CLOCK_REALTIME, abs);     \
    }
TIMEDLOCK(pl_mutex_timedlock, FN_TIMEDLOCK, "@@GLIBC_2.34")
TIMEDLOCK(pl_mutex_timedlock_old, FN_TIMEDLOCK_OLD, "@GLIBC_2.2.5")

#define CLOCKLOCK(fname, f, ver)                                             \
    int fname(pthread_mutex_t *m, clockid_t clk,                             \
              const struct timespec *abs);                                   \
    EXPORT SYMVER("pthread_mutex_clocklock" ver)                             \
    int fname(pthread_mutex_t *m, clockid_t clk, const struct timespec *abs) \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, clock_fn)(m, clk, abs), f);               \
        return mapped_lock(e, m, L_CLOCK, real[f], clk, abs);                \
    }
CLOCKLOCK(pl_mutex_clocklock, FN_CLOCKLOCK, "@@GLIBC_2.34")
CLOCKLOCK(pl_mutex_clocklock_old, FN_CLOCKLOCK_OLD, "@GLIBC_2.30")

#define CONDWAIT(fname, f, ver)                                              \
    int fname(pthread_cond_t *c, pthread_mutex_t *m);                        \
    EXPORT SYMVER("pthread_cond_wait" ver)                                   \
    int fname(pthread_cond_t *c, pthread_mutex_t *m)                         \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, wait_fn)(c, m), f);                       \
        return mapped_wait(e, c, m, W_WAIT, real[f], 0, NULL);               \
    }
CONDWAIT(pl_cond_wait, FN_WAIT, "@@GLIBC_2.3.2")
CONDWAIT(pl_cond_wait_old, FN_WAIT_OLD, "@GLIBC_2.2.5")

#define CONDTIMEDWAIT(fname, f, ver)                                         \
    int fname(pthread_cond_t *c, pthread_mutex_t *m,                         \
              const struct timespec *abs);                                   \
    EXPORT SYMVER("pthread_cond_timedwait" ver)                              \
    int fname(pthread_cond_t *c, pthread_mutex_t *m,                         \
              const struct timespec *abs)                                    \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, twait_fn)(c, m, abs), f);                 \
        return mapped_wait(e, c, m, W_TIMED, real[f], 0, abs);               \
    }
CONDTIMEDWAIT(pl_cond_timedwait, FN_TIMEDWAIT, "@@GLIBC_2.3.2")
CONDTIMEDWAIT(pl_cond_timedwait_old, FN_TIMEDWAIT_OLD, "@GLIBC_2.2.5")

#define CONDCLOCKWAIT(fname, f, ver)                                         \
    int fname(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,          \
              const struct timespec *abs);                                   \
    EXPORT SYMVER("pthread_cond_clockwait" ver)                              \
    int fname(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,          \
              const struct timespec *abs)                                    \
    {                                                                        \
        PLAIN_OR_MAPPED(m, REAL(f, cwait_fn)(c, m, clk, abs), f);            \
        return mapped_wait(e, c, m, W_CLOCK, real[f], clk, abs);             \
    }
CONDCLOCKWAIT(pl_cond_clockwait, FN_CLOCKWAIT, "@@GLIBC_2.34")
CONDCLOCKWAIT(pl_cond_clockwait_old, FN_CLOCKWAIT_OLD, "@GLIBC_2.30")

EXPORT SYMVER("pthread_mutex_init@@GLIBC_2.2.5")
int pl_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    int rc;

    if (UNLIKELY(!__atomic_load_n(&tab, __ATOMIC_ACQUIRE)))
        startup();
    rc = REAL(FN_INIT, init_fn)(m, a);
    if (rc == 0 && nsites && !in_shim) {
        count(FN_INIT);
        if ((rc = site_init(m, ra, PL_MUTEX)) != 0)
            REAL(FN_DESTROY, lock_fn)(m);
    }
    return rc;
}

EXPORT SYMVER("pthread_mutex_destroy@@GLIBC_2.2.5")
int pl_mutex_destroy(pthread_mutex_t *m)
{
    struct entry *e;
    int rc;

    if (LIKELY(surely_plain(m)))
        return REAL(FN_DESTROY, lock_fn)(m);
    e = entry_of(m);
    rc = REAL(FN_DESTROY, lock_fn)(m);
    if (rc == 0 && e && e->dynamic && !in_shim) {
        count(FN_DESTROY);
        REAL(FN_LOCK, lock_fn)(&dyn_mu);
        in_shim = 1;
        if (__atomic_load_n(&e->live, __ATOMIC_RELAXED))
            entry_kill(e);
        in_shim = 0;
        REAL(FN_UNLOCK, lock_fn)(&dyn_mu);
    }
    return rc;
}

/* ---- mapped read-write locks -------------------------------------------------
 *
 * Every real hold has one distributed hold: a read lock taken n times by a
 * thread is n read holds on both sides, and dist_rwlock_unlock, like
 * pthread_rwlock_unlock, gives back the caller's write hold or else one of
 * its read holds.  A thread that holds nothing gets EPERM from the library
 * and glibc's behaviour from the real unlock. */

enum { RW_LOCK, RW_TRY, RW_TIMED, RW_CLOCK };

static int mapped_rw_lock(struct entry *e, pthread_rwlock_t *rw, int wr,
                          int how, void *fn, clockid_t clk,
                          const struct timespec *abs)
{
    PL_KEEP_ERRNO;
    int rc;

    switch (how) {
    case RW_LOCK:
    case RW_TRY:
        rc = ((rw_fn)fn)(rw);
        break;
    case RW_TIMED:
        rc = ((rwtimed_fn)fn)(rw, abs);
        break;
    default:
        rc = ((rwclock_fn)fn)(rw, clk, abs);
        break;
    }
    if (rc != 0)
        return rc;
    if (how == RW_TRY) {
        rc = dist_take(e, D_TRY, wr, 0, NULL);
    } else if (how == RW_LOCK) {
        rc = dist_take(e, D_BLOCK, wr, 0, NULL);
    } else {
        rc = dist_take(e, D_TIMED, wr, how == RW_TIMED ? CLOCK_REALTIME : clk,
                       abs);
    }
    if (rc != 0)
        REAL(FN_RWUNLOCK, rw_fn)(rw);
    return rc;
}

#define RWLOCK(fname, f, sym, wr, how)                                       \
    int fname(pthread_rwlock_t *rw);                                         \
    EXPORT SYMVER(sym)                                                       \
    int fname(pthread_rwlock_t *rw)                                          \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rw_fn)(rw), f);                          \
        return mapped_rw_lock(e, rw, wr, how, real[f], 0, NULL);             \
    }
RWLOCK(pl_rwlock_rdlock, FN_RDLOCK, "pthread_rwlock_rdlock@@GLIBC_2.34", 0, RW_LOCK)
RWLOCK(pl_rwlock_rdlock_old, FN_RDLOCK_OLD, "pthread_rwlock_rdlock@GLIBC_2.2.5", 0, RW_LOCK)
RWLOCK(pl_rwlock_wrlock, FN_WRLOCK, "pthread_rwlock_wrlock@@GLIBC_2.34", 1, RW_LOCK)
RWLOCK(pl_rwlock_wrlock_old, FN_WRLOCK_OLD, "pthread_rwlock_wrlock@GLIBC_2.2.5", 1, RW_LOCK)
RWLOCK(pl_rwlock_tryrdlock, FN_TRYRDLOCK, "pthread_rwlock_tryrdlock@@GLIBC_2.34", 0, RW_TRY)
RWLOCK(pl_rwlock_tryrdlock_old, FN_TRYRDLOCK_OLD, "pthread_rwlock_tryrdlock@GLIBC_2.2.5", 0, RW_TRY)
RWLOCK(pl_rwlock_trywrlock, FN_TRYWRLOCK, "pthread_rwlock_trywrlock@@GLIBC_2.34", 1, RW_TRY)
RWLOCK(pl_rwlock_trywrlock_old, FN_TRYWRLOCK_OLD, "pthread_rwlock_trywrlock@GLIBC_2.2.5", 1, RW_TRY)

#define RWTIMED(fname, f, sym, wr)                                           \
    int fname(pthread_rwlock_t *rw, const struct timespec *abs);             \
    EXPORT SYMVER(sym)                                                       \
    int fname(pthread_rwlock_t *rw, const struct timespec *abs)              \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rwtimed_fn)(rw, abs), f);                \
        return mapped_rw_lock(e, rw, wr, RW_TIMED, real[f], 0, abs);         \
    }
RWTIMED(pl_rwlock_timedrdlock, FN_TIMEDRDLOCK, "pthread_rwlock_timedrdlock@@GLIBC_2.34", 0)
RWTIMED(pl_rwlock_timedrdlock_old, FN_TIMEDRDLOCK_OLD, "pthread_rwlock_timedrdlock@GLIBC_2.2.5", 0)
RWTIMED(pl_rwlock_timedwrlock, FN_TIMEDWRLOCK, "pthread_rwlock_timedwrlock@@GLIBC_2.34", 1)
RWTIMED(pl_rwlock_timedwrlock_old, FN_TIMEDWRLOCK_OLD, "pthread_rwlock_timedwrlock@GLIBC_2.2.5", 1)

#define RWCLOCK(fname, f, sym, wr)                                           \
    int fname(pthread_rwlock_t *rw, clockid_t clk,                           \
              const struct timespec *abs);                                   \
    EXPORT SYMVER(sym)                                                       \
    int fname(pthread_rwlock_t *rw, clockid_t clk,                           \
              const struct timespec *abs)                                    \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rwclock_fn)(rw, clk, abs), f);           \
        return mapped_rw_lock(e, rw, wr, RW_CLOCK, real[f], clk, abs);       \
    }
RWCLOCK(pl_rwlock_clockrdlock, FN_CLOCKRDLOCK, "pthread_rwlock_clockrdlock@@GLIBC_2.34", 0)
RWCLOCK(pl_rwlock_clockrdlock_old, FN_CLOCKRDLOCK_OLD, "pthread_rwlock_clockrdlock@GLIBC_2.30", 0)
RWCLOCK(pl_rwlock_clockwrlock, FN_CLOCKWRLOCK, "pthread_rwlock_clockwrlock@@GLIBC_2.34", 1)
RWCLOCK(pl_rwlock_clockwrlock_old, FN_CLOCKWRLOCK_OLD, "pthread_rwlock_clockwrlock@GLIBC_2.30", 1)

#define RWUNLOCK(fname, f, sym)                                              \
    int fname(pthread_rwlock_t *rw);                                         \
    EXPORT SYMVER(sym)                                                       \
    int fname(pthread_rwlock_t *rw)                                          \
    {                                                                        \
        PLAIN_OR_MAPPED(rw, REAL(f, rw_fn)(rw), f);                          \
        dist_give(e);                                                        \
        return REAL(f, rw_fn)(rw);                                           \
    }
RWUNLOCK(pl_rwlock_unlock, FN_RWUNLOCK, "pthread_rwlock_unlock@@GLIBC_2.34")
RWUNLOCK(pl_rwlock_unlock_old, FN_RWUNLOCK_OLD, "pthread_rwlock_unlock@GLIBC_2.2.5")

#define RWINIT(fname, f, sym)                                                \
    int fname(pthread_rwlock_t *rw, const pthread_rwlockattr_t *a);          \
    EXPORT SYMVER(sym)                                                       \
    int fname(pthread_rwlock_t *rw, const pthread_rwlockattr_t *a)           \
    {                                                                        \
        uintptr_t ra = (uintptr_t)__builtin_return_address(0);               \
        int rc;                                                              \
                                                                             \
        if (UNLIKELY(!__atomic_load_n(&tab, __ATOMIC_ACQUIRE)))              \
            startup();                                                       \
        rc = REAL(f, rwinit_fn)(rw, a);                                      \
        if (rc == 0 && nsites && !in_shim) {                                 \
            count(f);                                                        \
            rc = site_init(rw, ra, PL_RWLOCK);                               \
        }                                                                    \
        return rc;                                                           \
    }
RWINIT(pl_rwlock_init, FN_RWINIT, "pthread_rwlock_init@@GLIBC_2.34")
RWINIT(pl_rwlock_init_old, FN_RWINIT_OLD, "pthread_rwlock_init@GLIBC_2.2.5")

static int rw_destroy(pthread_rwlock_t *rw, int f)
{
    struct entry *e;
    int rc;

    if (LIKELY(surely_plain(rw)))
        return REAL(f, rw_fn)(rw);
    e = entry_of(rw);
    rc = REAL(f, rw_fn)(rw);
    if (rc == 0 && e && e->dynamic && !in_shim) {
        count(f);
        REAL(FN_LOCK, lock_fn)(&dyn_mu);
        in_shim = 1;
        if (__atomic_load_n(&e->live, __ATOMIC_RELAXED))
            entry_kill(e);
        in_shim = 0;
        REAL(FN_UNLOCK, lock_fn)(&dyn_mu);
    }
    return rc;
}

int pl_rwlock_destroy(pthread_rwlock_t *rw);
EXPORT SYMVER("pthread_rwlock_destroy@@GLIBC_2.34")
int pl_rwlock_destroy(pthread_rwlock_t *rw)
{
    return rw_destroy(rw, FN_RWDESTROY);
}

int pl_rwlock_destroy_old(pthread_rwlock_t *rw);
EXPORT SYMVER("pthread_rwlock_destroy@GLIBC_2.2.5")
int pl_rwlock_destroy_old(pthread_rwlock_t *rw)
{
    return rw_destroy(rw, FN_RWDESTROY_OLD);
}
