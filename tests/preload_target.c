/*
 * preload_target: a program with mutexes of every kind the LD_PRELOAD mode
 * can map, driven by the test_preload_* programs.  It knows nothing of
 * distlock (built with -pthread only); in "calls" mode it asks the shim, if
 * loaded, for its call counters through dlsym.
 *
 *   preload_target hold WHICH          lock; "held"; wait for a line on
 *                                      stdin; unlock; "released"
 *   preload_target try WHICH           "rc N" of trylock (unlocks on 0)
 *   preload_target timed WHICH MS      "rc N ms T" of timedlock
 *   preload_target clock WHICH MS      the same with clocklock (MONOTONIC)
 *   preload_target errcheck            relock and foreign unlock of an
 *                                      error-checking mutex
 *   preload_target condwait WHICH      wait on a condition variable until
 *                                      another thread, which must get the
 *                                      mutex meanwhile, signals; then hold
 *   preload_target condtimed WHICH MS  pthread_cond_timedwait that times
 *                                      out while another thread try-locks
 *                                      the mutex; then hold
 *   preload_target condclock WHICH MS  the same with pthread_cond_clockwait
 *   preload_target                     (no argument: "calls", a self-test)
 *   preload_target calls               every interposed function, every
 *                                      version, on mapped mutexes; prints
 *                                      "count SYMBOL@VERSION N" lines
 *
 *   preload_target rdhold|wrhold RW    read- or write-lock; "held"; wait for
 *                                      a line; unlock; "released"
 *   preload_target tryrd|trywr RW      "rc N"
 *   preload_target timedrd|timedwr|clockrd|clockwr RW MS    "rc N ms T"
 *   preload_target rwcalls             every pthread_rwlock_* entry point
 *   preload_target ctor                "ctor N": mapped lock calls the shim
 *                                      had counted when the library's
 *                                      constructor (run before the shim's)
 *                                      had locked its cache_lock
 *   preload_target pexit WHICH         lock; unlock; "exiting"; main calls
 *                                      pthread_exit: the process must end
 *                                      as without the shim
 *   preload_target spawn               system("exit 7"): a child that execs
 *                                      another program; "child N"
 *   preload_target errno               every mapped call with errno set to
 *                                      4242: "errno changed K of N" and
 *                                      "changed by NAME" lines
 *   preload_target nomem               with the address space exhausted
 *                                      (RLIMIT_AS): "nomem init N rwinit N
 *                                      undone N lock N try N rd N wait N";
 *                                      then with memory back: "back init N
 *                                      lock N global N"
 *
 * WHICH: global static bank shard2 errcheck account lib libglobal unmapped
 * RW: catalog (a global) heapcat (initialised in catalog_create)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clockhelp.h"

pthread_mutex_t *preload_lib_cache_lock(void);
pthread_mutex_t *preload_lib_global_lock(void);
long preload_lib_ctor_counted(void);
long preload_lib_rwlock_destroys(void);
extern pthread_mutex_t lib_global_lock;

/* match = symbol g_global_lock */
pthread_mutex_t g_global_lock = PTHREAD_MUTEX_INITIALIZER;
/* match = symbol preload_target.c:g_static_lock */
static pthread_mutex_t g_static_lock = PTHREAD_MUTEX_INITIALIZER;
/* never mapped */
static pthread_mutex_t g_unmapped = PTHREAD_MUTEX_INITIALIZER;

/* match = symbol g_bank+32 */
struct bank {
    char name[24];
    long balance;
    pthread_mutex_t lock;
    long audit;
};
_Static_assert(offsetof(struct bank, lock) == 32, "the tests map g_bank+32");
struct bank g_bank = { "main", 0, PTHREAD_MUTEX_INITIALIZER, 0 };

/* match = symbol g_shards[*] */
pthread_mutex_t g_shards[4] = { PTHREAD_MUTEX_INITIALIZER,
                                PTHREAD_MUTEX_INITIALIZER,
                                PTHREAD_MUTEX_INITIALIZER,
                                PTHREAD_MUTEX_INITIALIZER };

/* initialised as an error-checking mutex in main */
pthread_mutex_t g_errcheck;

/* match = init_site account_create */
struct account {
    long id;
    pthread_mutex_t mu;
};

/* nomem: the memory of the next object made (allocated beforehand), and
 * whether an init that fails is reported in g_init_rc rather than fatal */
static void *g_spare;
static int g_init_soft, g_init_rc;

/* The zeroed memory of an object of size made by an init_site. */
static void *new_object(size_t size)
{
    void *p = g_spare ? g_spare : calloc(1, size);

    g_spare = NULL;
    if (!p)
        abort();
    return p;
}

/* rc, an init_site's init result: in g_init_rc, and fatal unless soft. */
static void init_result(int rc)
{
    g_init_rc = rc;
    if (rc != 0 && !g_init_soft)
        abort();
}

__attribute__((noinline)) struct account *account_create(long id);
__attribute__((noinline)) struct account *account_create(long id)
{
    struct account *a = new_object(sizeof *a);

    init_result(pthread_mutex_init(&a->mu, NULL));
    a->id = id;
    return a;
}

static struct account *g_accounts[3];

/* [rwlock] match = symbol g_catalog_lock */
pthread_rwlock_t g_catalog_lock = PTHREAD_RWLOCK_INITIALIZER;

/* [rwlock] match = init_site catalog_create */
struct catalog {
    pthread_rwlock_t rw;
    int entries;
};

__attribute__((noinline)) struct catalog *catalog_create(void);
__attribute__((noinline)) struct catalog *catalog_create(void)
{
    struct catalog *c = new_object(sizeof *c);

    init_result(pthread_rwlock_init(&c->rw, NULL));
    c->entries = 1;
    return c;
}

static struct catalog *g_catalog;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static pthread_mutex_t *which(const char *w)
{
    if (strcmp(w, "global") == 0)
        return &g_global_lock;
    if (strcmp(w, "static") == 0)
        return &g_static_lock;
    if (strcmp(w, "bank") == 0)
        return &g_bank.lock;
    if (strcmp(w, "shard2") == 0)
        return &g_shards[2];
    if (strcmp(w, "errcheck") == 0)
        return &g_errcheck;
    if (strcmp(w, "account") == 0)
        return &g_accounts[1]->mu;
    if (strcmp(w, "lib") == 0)
        return preload_lib_cache_lock();
    if (strcmp(w, "libglobal") == 0)
        return &lib_global_lock;
    if (strcmp(w, "unmapped") == 0)
        return &g_unmapped;
    fprintf(stderr, "preload_target: unknown mutex '%s'\n", w);
    exit(2);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* "held", a line from stdin, unlock (mutex, or rwlock when rw), then
 * "released" */
static int hold_then_release_lock(void *lock, int rw)
{
    char line[64];
    int rc;

    say("held");
    if (!fgets(line, sizeof line, stdin))
        line[0] = '\0';
    rc = rw ? pthread_rwlock_unlock(lock) : pthread_mutex_unlock(lock);
    say("released %d", rc);
    return rc == 0 ? 0 : 1;
}

static int hold_then_release(pthread_mutex_t *m)
{
    return hold_then_release_lock(m, 0);
}

/* ---- condition variables ------------------------------------------------ */

static pthread_mutex_t *W;
static int w_flag; /* under W */
static volatile int w_failed;
static int helper_rc = -1;
static long helper_ms;

static void *signaller(void *arg)
{
    struct timespec ts;

    (void)arg;
    sleep_ms(100);
    ts = clock_in_ms(CLOCK_REALTIME, 5000);
    helper_rc = pthread_mutex_timedlock(W, &ts);
    if (helper_rc != 0) {
        w_failed = 1;
        pthread_cond_signal(&g_cv);
        return NULL;
    }
    w_flag = 1;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(W);
    return NULL;
}

static void *trier(void *arg)
{
    (void)arg;
    sleep_ms(helper_ms);
    helper_rc = pthread_mutex_trylock(W);
    if (helper_rc == 0)
        pthread_mutex_unlock(W);
    return NULL;
}

static int condwait(pthread_mutex_t *m)
{
    pthread_t th;
    int rc = 0;

    W = m;
    pthread_mutex_lock(m);
    pthread_create(&th, NULL, signaller, NULL);
    while (!w_flag && !w_failed)
        rc = pthread_cond_wait(&g_cv, m);
    pthread_join(th, NULL);
    say("woke rc %d helper %d", rc, helper_rc);
    return hold_then_release(m);
}

static int condtimed(pthread_mutex_t *m, long ms, int clocked)
{
    struct timespec ts;
    pthread_t th;
    int rc;

    W = m;
    helper_ms = ms / 3;
    pthread_mutex_lock(m);
    pthread_create(&th, NULL, trier, NULL);
    ts = clock_in_ms(clocked ? CLOCK_MONOTONIC : CLOCK_REALTIME, ms);
    do {
        if (clocked)
            rc = pthread_cond_clockwait(&g_cv, m, CLOCK_MONOTONIC, &ts);
        else
            rc = pthread_cond_timedwait(&g_cv, m, &ts);
    } while (rc == 0);
    pthread_join(th, NULL);
    say("timedout rc %d helper %d", rc, helper_rc);
    return hold_then_release(m);
}

/* ---- errcheck --------------------------------------------------------------- */

static void *foreign_unlock(void *arg)
{
    helper_rc = pthread_mutex_unlock(arg);
    return NULL;
}

static int errcheck(void)
{
    pthread_t th;
    int relock, unlock;

    pthread_mutex_lock(&g_errcheck);
    relock = pthread_mutex_lock(&g_errcheck);
    pthread_create(&th, NULL, foreign_unlock, &g_errcheck);
    pthread_join(th, NULL);
    unlock = pthread_mutex_unlock(&g_errcheck);
    say("relock %d foreign %d unlock %d again %d", relock, helper_rc, unlock,
        pthread_mutex_unlock(&g_errcheck));
    return 0;
}

/* ---- calls: every entry point, every version --------------------------------- */

static pthread_cond_t old_cv; /* zeroed: for the GLIBC_2.2.5 condvar */

/* which pthread_cond_signal (the current one, or an older version found
 * by dlvsym: NULL when there is none) signals which condvar */
struct signal_arg {
    int (*sig)(pthread_cond_t *);
    pthread_cond_t *cv;
};

/* Under W, sets the flag and signals as arg says: one thread body for
 * the current and the GLIBC_2.2.5 condvar. */
static void *flag_and_signal(void *arg)
{
    struct signal_arg *a = arg;

    pthread_mutex_lock(W);
    w_flag = 1;
    if (a->sig)
        a->sig(a->cv);
    pthread_mutex_unlock(W);
    return NULL;
}

/* fn as version ver of it, as an older binary binds it; the type is the
 * declaration's. */
#define OLD(fn, ver) ((__typeof__(&fn))dlvsym(RTLD_DEFAULT, #fn, ver))

/* expr must give want; a bad one is reported and sets bad */
static void check_rc(int rc, int want, const char *what, int *bad)
{
    if (rc != want) {
        fprintf(stderr, "preload_target: %s = %d, not %d\n", what, rc, want);
        *bad = 1;
    }
}

/* A call that must give want (else a line on stderr and bad = 1). */
#define CHECK(expr, want) check_rc((expr), (want), #expr, &bad)

/* A lock call that must succeed, then the unlock that must too. */
#define CHECK_HELD(expr, unlock)                                             \
    (check_rc((expr), 0, #expr, &bad), check_rc((unlock), 0, #unlock, &bad))

static int calls(void)
{
    static const char *syms[] = {
        "pthread_mutex_lock@GLIBC_2.2.5",
        "pthread_mutex_unlock@GLIBC_2.2.5",
        "pthread_mutex_init@GLIBC_2.2.5",
        "pthread_mutex_destroy@GLIBC_2.2.5",
        "pthread_mutex_trylock@GLIBC_2.34",
        "pthread_mutex_trylock@GLIBC_2.2.5",
        "pthread_mutex_timedlock@GLIBC_2.34",
        "pthread_mutex_timedlock@GLIBC_2.2.5",
        "pthread_mutex_clocklock@GLIBC_2.34",
        "pthread_mutex_clocklock@GLIBC_2.30",
        "pthread_cond_wait@GLIBC_2.3.2",
        "pthread_cond_wait@GLIBC_2.2.5",
        "pthread_cond_timedwait@GLIBC_2.3.2",
        "pthread_cond_timedwait@GLIBC_2.2.5",
        "pthread_cond_clockwait@GLIBC_2.34",
        "pthread_cond_clockwait@GLIBC_2.30",
    };
    long (*counter)(const char *) =
        (long (*)(const char *))dlsym(RTLD_DEFAULT, "distlock_preload_calls");
    struct signal_arg new_sig = { pthread_cond_signal, &g_cv };
    struct signal_arg old_sig = { OLD(pthread_cond_signal, "GLIBC_2.2.5"),
                                  &old_cv };
    pthread_mutex_t *m = &g_global_lock;
    struct timespec ts;
    struct account *a;
    pthread_t th;
    size_t i;
    int bad = 0;

    /* the versions a fresh build binds */
    CHECK_HELD(pthread_mutex_lock(m), pthread_mutex_unlock(m));
    CHECK_HELD(pthread_mutex_trylock(m), pthread_mutex_unlock(m));
    ts = clock_in_ms(CLOCK_REALTIME, 2000);
    CHECK_HELD(pthread_mutex_timedlock(m, &ts), pthread_mutex_unlock(m));
    ts = clock_in_ms(CLOCK_MONOTONIC, 2000);
    CHECK(pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), 0);
    ts = clock_in_ms(CLOCK_REALTIME, 10);
    CHECK(pthread_cond_timedwait(&g_cv, m, &ts), ETIMEDOUT);
    ts = clock_in_ms(CLOCK_MONOTONIC, 10);
    CHECK(pthread_cond_clockwait(&g_cv, m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
    W = m;
    w_flag = 0;
    pthread_create(&th, NULL, flag_and_signal, &new_sig);
    while (!w_flag)
        CHECK(pthread_cond_wait(&g_cv, m), 0);
    pthread_join(th, NULL);
    CHECK(pthread_mutex_unlock(m), 0);
    a = account_create(99);
    CHECK(pthread_mutex_destroy(&a->mu), 0);
    free(a);

    /* the older versions, as an old binary would bind them */
    CHECK_HELD(OLD(pthread_mutex_trylock, "GLIBC_2.2.5")(m),
               pthread_mutex_unlock(m));
    ts = clock_in_ms(CLOCK_REALTIME, 2000);
    CHECK_HELD(OLD(pthread_mutex_timedlock, "GLIBC_2.2.5")(m, &ts),
               pthread_mutex_unlock(m));
    ts = clock_in_ms(CLOCK_MONOTONIC, 2000);
    CHECK(OLD(pthread_mutex_clocklock, "GLIBC_2.30")(m, CLOCK_MONOTONIC, &ts),
          0);
    ts = clock_in_ms(CLOCK_REALTIME, 10);
    CHECK(OLD(pthread_cond_timedwait, "GLIBC_2.2.5")(&old_cv, m, &ts),
          ETIMEDOUT);
    ts = clock_in_ms(CLOCK_MONOTONIC, 10);
    CHECK(OLD(pthread_cond_clockwait, "GLIBC_2.30")(&g_cv, m, CLOCK_MONOTONIC,
                                                    &ts),
          ETIMEDOUT);
    w_flag = 0;
    pthread_create(&th, NULL, flag_and_signal, &old_sig);
    while (!w_flag)
        CHECK(OLD(pthread_cond_wait, "GLIBC_2.2.5")(&old_cv, m), 0);
    pthread_join(th, NULL);
    CHECK(pthread_mutex_unlock(m), 0);

    for (i = 0; i < sizeof syms / sizeof syms[0]; i++)
        say("count %s %ld", syms[i], counter ? counter(syms[i]) : -1L);
    return bad;
}

/* ---- read-write locks ---------------------------------------------------- */

static pthread_rwlock_t *which_rw(const char *w)
{
    if (strcmp(w, "catalog") == 0)
        return &g_catalog_lock;
    if (strcmp(w, "heapcat") == 0)
        return &g_catalog->rw;
    fprintf(stderr, "preload_target: unknown rwlock '%s'\n", w);
    exit(2);
}

static int rwcalls(void)
{
    static const char *names[] = {
        "rdlock", "tryrdlock", "timedrdlock", "clockrdlock",
        "wrlock", "trywrlock", "timedwrlock", "clockwrlock",
        "unlock", "init",      "destroy"
    };
    long (*counter)(const char *) =
        (long (*)(const char *))dlsym(RTLD_DEFAULT, "distlock_preload_calls");
    pthread_rwlock_t *rw = &g_catalog_lock, scratch;
    struct timespec ts;
    struct catalog *c;
    char sym[96];
    size_t i;
    int bad = 0, v;

    CHECK_HELD(pthread_rwlock_rdlock(rw), pthread_rwlock_unlock(rw));
    CHECK_HELD(pthread_rwlock_wrlock(rw), pthread_rwlock_unlock(rw));
    CHECK_HELD(pthread_rwlock_tryrdlock(rw), pthread_rwlock_unlock(rw));
    CHECK_HELD(pthread_rwlock_trywrlock(rw), pthread_rwlock_unlock(rw));
    ts = clock_in_ms(CLOCK_REALTIME, 2000);
    CHECK_HELD(pthread_rwlock_timedrdlock(rw, &ts),
               pthread_rwlock_unlock(rw));
    CHECK_HELD(pthread_rwlock_timedwrlock(rw, &ts),
               pthread_rwlock_unlock(rw));
    ts = clock_in_ms(CLOCK_MONOTONIC, 2000);
    CHECK_HELD(pthread_rwlock_clockrdlock(rw, CLOCK_MONOTONIC, &ts),
               pthread_rwlock_unlock(rw));
    CHECK_HELD(pthread_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &ts),
               pthread_rwlock_unlock(rw));
    c = catalog_create();
    CHECK(pthread_rwlock_destroy(&c->rw), 0);
    free(c);

    /* the GLIBC_2.2.5 / GLIBC_2.30 versions */
    CHECK(OLD(pthread_rwlock_rdlock, "GLIBC_2.2.5")(rw), 0);
    CHECK(OLD(pthread_rwlock_unlock, "GLIBC_2.2.5")(rw), 0);
    CHECK_HELD(OLD(pthread_rwlock_wrlock, "GLIBC_2.2.5")(rw),
               pthread_rwlock_unlock(rw));
    CHECK_HELD(OLD(pthread_rwlock_tryrdlock, "GLIBC_2.2.5")(rw),
               pthread_rwlock_unlock(rw));
    CHECK_HELD(OLD(pthread_rwlock_trywrlock, "GLIBC_2.2.5")(rw),
               pthread_rwlock_unlock(rw));
    ts = clock_in_ms(CLOCK_REALTIME, 2000);
    CHECK_HELD(OLD(pthread_rwlock_timedrdlock, "GLIBC_2.2.5")(rw, &ts),
               pthread_rwlock_unlock(rw));
    CHECK_HELD(OLD(pthread_rwlock_timedwrlock, "GLIBC_2.2.5")(rw, &ts),
               pthread_rwlock_unlock(rw));
    ts = clock_in_ms(CLOCK_MONOTONIC, 2000);
    CHECK_HELD(OLD(pthread_rwlock_clockrdlock,
                   "GLIBC_2.30")(rw, CLOCK_MONOTONIC, &ts),
               pthread_rwlock_unlock(rw));
    CHECK_HELD(OLD(pthread_rwlock_clockwrlock,
                   "GLIBC_2.30")(rw, CLOCK_MONOTONIC, &ts),
               pthread_rwlock_unlock(rw));
    CHECK(OLD(pthread_rwlock_init, "GLIBC_2.2.5")(&scratch, NULL), 0);
    CHECK(pthread_rwlock_destroy(&scratch), 0);
    c = catalog_create();
    CHECK(OLD(pthread_rwlock_destroy, "GLIBC_2.2.5")(&c->rw), 0);
    free(c);

    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        for (v = 0; v < 2; v++) {
            snprintf(sym, sizeof sym, "pthread_rwlock_%s@%s", names[i],
                     v == 0                               ? "GLIBC_2.34"
                     : strncmp(names[i], "clock", 5) == 0 ? "GLIBC_2.30"
                                                          : "GLIBC_2.2.5");
            say("count %s %ld", sym, counter ? counter(sym) : -1L);
        }
    }
    return bad;
}

static int rw_mode(const char *mode, pthread_rwlock_t *rw, const char *ms)
{
    int wr = strstr(mode, "wr") != NULL, rc;

    if (strcmp(mode, "rdhold") == 0 || strcmp(mode, "wrhold") == 0) {
        rc = wr ? pthread_rwlock_wrlock(rw) : pthread_rwlock_rdlock(rw);
        if (rc != 0) {
            say("lock %d", rc);
            return 1;
        }
        return hold_then_release_lock(rw, 1);
    }
    if (strcmp(mode, "tryrd") == 0 || strcmp(mode, "trywr") == 0) {
        rc = wr ? pthread_rwlock_trywrlock(rw) : pthread_rwlock_tryrdlock(rw);
        say("rc %d ms 0", rc);
    } else if (ms) {
        int clocked = mode[0] == 'c';
        struct timespec ts =
            clock_in_ms(clocked ? CLOCK_MONOTONIC : CLOCK_REALTIME, atol(ms));
        double t0 = mono_ms();

        if (clocked)
            rc = wr ? pthread_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &ts)
                    : pthread_rwlock_clockrdlock(rw, CLOCK_MONOTONIC, &ts);
        else
            rc = wr ? pthread_rwlock_timedwrlock(rw, &ts)
                    : pthread_rwlock_timedrdlock(rw, &ts);
        say("rc %d ms %.0f", rc, mono_ms() - t0);
    } else {
        return 2;
    }
    if (rc == 0)
        pthread_rwlock_unlock(rw);
    return 0;
}

static int errno_calls, errno_bad;

#define KEEPS(call)                                                          \
    do {                                                                     \
        errno = 4242;                                                        \
        (void)(call);                                                        \
        errno_calls++;                                                       \
        if (errno != 4242) {                                                 \
            errno_bad++;                                                     \
            say("changed by %s: %d", #call, errno);                          \
        }                                                                    \
    } while (0)

/* The program's errno is its own: no mapped call changes it (the first
 * one connects to Redis, with a non-blocking connect). */
static int errno_mode(void)
{
    pthread_mutex_t *m = &g_global_lock;
    struct timespec ts;
    struct account *a;

    KEEPS(pthread_mutex_lock(m));
    KEEPS(pthread_mutex_lock(&g_errcheck));
    KEEPS(pthread_mutex_lock(&g_errcheck)); /* EDEADLK */
    KEEPS(pthread_mutex_unlock(&g_errcheck));
    ts = clock_in_ms(CLOCK_REALTIME, 10);
    KEEPS(pthread_cond_timedwait(&g_cv, m, &ts));
    ts = clock_in_ms(CLOCK_MONOTONIC, 10);
    KEEPS(pthread_cond_clockwait(&g_cv, m, CLOCK_MONOTONIC, &ts));
    KEEPS(pthread_mutex_unlock(m));
    KEEPS(pthread_mutex_unlock(m)); /* EPERM */
    KEEPS(pthread_mutex_trylock(m));
    KEEPS(pthread_mutex_unlock(m));
    ts = clock_in_ms(CLOCK_REALTIME, 1000);
    KEEPS(pthread_mutex_timedlock(m, &ts));
    KEEPS(pthread_mutex_unlock(m));
    ts = clock_in_ms(CLOCK_MONOTONIC, 1000);
    KEEPS(pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts));
    KEEPS(pthread_mutex_unlock(m));
    KEEPS(pthread_rwlock_rdlock(&g_catalog_lock));
    KEEPS(pthread_rwlock_unlock(&g_catalog_lock));
    ts = clock_in_ms(CLOCK_MONOTONIC, 1000);
    KEEPS(pthread_rwlock_clockwrlock(&g_catalog_lock, CLOCK_MONOTONIC, &ts));
    KEEPS(pthread_rwlock_unlock(&g_catalog_lock));
    KEEPS((a = account_create(7)) != NULL);
    KEEPS(pthread_mutex_lock(&a->mu));
    KEEPS(pthread_mutex_unlock(&a->mu));
    KEEPS(pthread_mutex_destroy(&a->mu));
    free(a);
    say("errno changed %d of %d", errno_bad, errno_calls);
    return 0;
}

/* Fills what is left of the address space below a limit just above what
 * is mapped now; returns the allocations, chained. */
static void *exhaust(struct rlimit *old)
{
    struct rlimit lim;
    unsigned long pages = 0;
    void *hoard = NULL, *p;
    size_t sz;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f || fscanf(f, "%lu", &pages) != 1)
        abort();
    fclose(f);
    getrlimit(RLIMIT_AS, old);
    lim = *old;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (1u << 20);
    if (setrlimit(RLIMIT_AS, &lim) != 0)
        abort();
    for (sz = 1u << 20; sz >= sizeof(void *); sz /= 2) {
        while ((p = malloc(sz)) != NULL) {
            *(void **)p = hoard;
            hoard = p;
        }
    }
    return hoard;
}

static void give_back(void *hoard, const struct rlimit *old)
{
    while (hoard) {
        void *next = *(void **)hoard;
        free(hoard);
        hoard = next;
    }
    setrlimit(RLIMIT_AS, old);
}

/* Every mapped entry point, out of memory: each returns an error pthread
 * documents for it, none aborts. */
static int nomem(void)
{
    struct timespec ts = clock_in_ms(CLOCK_MONOTONIC, 200);
    struct rlimit old;
    struct account *a;
    struct catalog *c, *spare_catalog = calloc(1, sizeof *c);
    void *hoard;
    long undone;
    int init, rwinit, lock, try, rd, wait, rc;

    g_init_soft = 1;
    g_spare = calloc(1, sizeof *a);
    hoard = exhaust(&old);
    a = account_create(100);
    init = g_init_rc;
    /* glibc's pthread_rwlock_destroy calls meanwhile: the shim's undoing
     * of an init it could not map */
    undone = preload_lib_rwlock_destroys();
    g_spare = spare_catalog;
    c = catalog_create();
    rwinit = g_init_rc;
    undone = preload_lib_rwlock_destroys() - undone;
    lock = pthread_mutex_lock(&g_global_lock);
    if (lock == 0)
        pthread_mutex_unlock(&g_global_lock);
    try = pthread_mutex_trylock(&g_static_lock);
    if (try == 0)
        pthread_mutex_unlock(&g_static_lock);
    rd = pthread_rwlock_rdlock(&g_catalog_lock);
    if (rd == 0)
        pthread_rwlock_unlock(&g_catalog_lock);
    wait = pthread_mutex_clocklock(&g_shards[1], CLOCK_MONOTONIC, &ts);
    if (wait == 0)
        pthread_mutex_unlock(&g_shards[1]);
    give_back(hoard, &old);
    say("nomem init %d rwinit %d undone %ld lock %d try %d rd %d wait %d",
        init, rwinit, undone, lock, try, rd, wait);
    if (init == 0)
        pthread_mutex_destroy(&a->mu);
    free(a);
    if (rwinit == 0)
        pthread_rwlock_destroy(&c->rw);
    free(c);

    a = account_create(101);
    lock = g_init_rc == 0 ? pthread_mutex_lock(&a->mu) : -1;
    if (lock == 0)
        pthread_mutex_unlock(&a->mu);
    /* The global lock's reply may have been lost to the memory shortage
     * after its script ran (reading a reply allocates): its next call
     * settles that first, so a lock and an unlock leave no hold behind. */
    rc = pthread_mutex_lock(&g_global_lock);
    if (rc == 0)
        rc = pthread_mutex_unlock(&g_global_lock);
    say("back init %d lock %d global %d", g_init_rc, lock, rc);
    return 0;
}

int main(int argc, char **argv)
{
    pthread_mutexattr_t a;
    pthread_mutex_t *m;
    long i;
    double t0;
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&g_errcheck, &a);
    pthread_mutexattr_destroy(&a);
    for (i = 0; i < 3; i++)
        g_accounts[i] = account_create(i);
    g_catalog = catalog_create();
    if (preload_lib_global_lock() != &lib_global_lock) {
        fprintf(stderr, "preload_target: the library uses another "
                        "lib_global_lock than the program\n");
        return 1;
    }
    if (argc < 2) /* without the shim: everything still works */
        return calls() | rwcalls();
    if (strcmp(argv[1], "calls") == 0)
        return calls();
    if (strcmp(argv[1], "errcheck") == 0)
        return errcheck();
    if (strcmp(argv[1], "rwcalls") == 0)
        return rwcalls();
    if (strcmp(argv[1], "ctor") == 0) {
        say("ctor %ld", preload_lib_ctor_counted());
        return 0;
    }
    if (strcmp(argv[1], "nomem") == 0)
        return nomem();
    if (strcmp(argv[1], "errno") == 0)
        return errno_mode();
    if (strcmp(argv[1], "spawn") == 0) {
        rc = system("exit 7");
        say("child %d", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
        return 0;
    }
    if (argc >= 3 && (strstr(argv[1], "rd") || strstr(argv[1], "wr")))
        return rw_mode(argv[1], which_rw(argv[2]), argc > 3 ? argv[3] : NULL);
    if (argc < 3)
        return 2;
    m = which(argv[2]);
    if (strcmp(argv[1], "hold") == 0) {
        rc = pthread_mutex_lock(m);
        if (rc != 0) {
            say("lock %d", rc);
            return 1;
        }
        return hold_then_release(m);
    }
    if (strcmp(argv[1], "pexit") == 0) {
        if ((rc = pthread_mutex_lock(m)) != 0 ||
            (rc = pthread_mutex_unlock(m)) != 0) {
            say("lock %d", rc);
            return 1;
        }
        say("exiting");
        pthread_exit(NULL);
    }
    if (strcmp(argv[1], "try") == 0) {
        rc = pthread_mutex_trylock(m);
        say("rc %d", rc);
        if (rc == 0)
            pthread_mutex_unlock(m);
        return 0;
    }
    if (strcmp(argv[1], "condwait") == 0)
        return condwait(m);
    if (argc < 4)
        return 2;
    if (strcmp(argv[1], "condtimed") == 0)
        return condtimed(m, atol(argv[3]), 0);
    if (strcmp(argv[1], "condclock") == 0)
        return condtimed(m, atol(argv[3]), 1);
    if (strcmp(argv[1], "timed") == 0 || strcmp(argv[1], "clock") == 0) {
        int clocked = argv[1][0] == 'c';
        struct timespec ts = clock_in_ms(
            clocked ? CLOCK_MONOTONIC : CLOCK_REALTIME, atol(argv[3]));

        t0 = mono_ms();
        rc = clocked ? pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts)
                     : pthread_mutex_timedlock(m, &ts);
        say("rc %d ms %.0f", rc, mono_ms() - t0);
        if (rc == 0)
            pthread_mutex_unlock(m);
        return 0;
    }
    return 2;
}
