/*
 * distlock-bench: throughput and latency of distlock against one Redis.
 *
 * A benchmark, not a test: it measures and prints, and says how each figure
 * compares with its target, but a missed target does not make it fail.  It
 * exits non-zero only when a scenario could not run (a distlock or Redis
 * call failed, a worker died or hung).
 *
 *   distlock-bench [--json] [--quick] [--only NAME[,NAME...]] [--csv FILE]
 *                  [--rounds N] [--compare] [--help]
 *
 * Scenarios (see usage() for the details):
 *   floor  EVALSHA round trip of a trivial lock-like script (raw hiredis)
 *   s1     one thread, one lock: lock+unlock pairs
 *   s1t    T threads, one lock each: aggregate pairs/s for T = 1..16
 *   s2     4 processes contending for one lock, guarding a counter
 *   s3     hand-off latency from unlock in one process to lock in another,
 *          then, as its lower bounds in the same run, PING's p50 and the same
 *          hand-off in raw hiredis with one wake-up and with two
 *   s4     1,000 held watchdog locks (--s4-locks N): init time, renewal
 *          cost, lateness and memory per lock
 *   rw     4 processes, 90% reads and 10% writes on one read-write lock
 *   s5     2 processes of 8 threads each on one lock (lock cohorting)
 *   fq     a fair queue at scale: W = 10, 100, 1,000 waiters in 8 processes,
 *          idle (Redis commands/s) and taking turns (hand-offs/s), plain
 *          mutexes beside (not in the default run: --only fq)
 *
 * The main process never calls distlock: every scenario that uses it runs
 * in forked processes, so each starts from a fresh library (and s2/s3
 * workers initialise distlock only after the fork).  Results come back
 * through a MAP_SHARED anonymous mapping.
 *
 * Needs DISTLOCK_URL (redis://[user:pass@]host[:port][/db] or
 * unix://[user:pass@]/path[?db=N]); scripts/with-redis.sh sets it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <dirent.h>
#include <semaphore.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "distlock.h"

/* ------------------------------------------------------------------------ */
/* Options and sizes                                                        */
/* ------------------------------------------------------------------------ */

enum {
    SC_FLOOR,
    SC_S1,
    SC_S1T,
    SC_S2,
    SC_S3,
    SC_S4,
    SC_S2F,
    SC_S3F,
    SC_RW,
    SC_CV,
    SC_SEM,
    SC_S5,
    SC_FQ,
    SC_S6,
    SC_S6F,
    SC_COUNT
};
static const char *const sc_names[SC_COUNT] = { "floor", "s1", "s1t", "s2",
                                                "s3",    "s4", "s2f", "s3f",
                                                "rw",    "cv", "sem", "s5",
                                                "fq",    "s6", "s6f" };

/* s2f and s3f run s2 and s3 on a fair (FIFO) mutex; workers fork after
 * these are set, so they see them. */
static int bench_fair;
static int bench_defer = -1;  /* deferred release: -1 the default */
static int bench_cohort = -1; /* lock cohorting: -1 the default */
static const char *cur_sc = "s2";

/* A mutex of the kind the current scenario measures. */
static int bench_mutex_init(dist_mutex_t *m, const char *name)
{
    dist_mutexattr_t a;
    int rc;

    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, bench_fair);
    if (bench_defer >= 0)
        dist_mutexattr_setdeferred(&a, bench_defer);
    if (bench_cohort >= 0)
        dist_mutexattr_setcohort(&a, bench_cohort);
    rc = dist_mutex_init(m, name, &a);
    dist_mutexattr_destroy(&a);
    return rc;
}

static struct {
    int json;
    int quick;
    unsigned only; /* bit per scenario; 0 = all */
    FILE *csv;     /* --csv: the distributions, for bench/plot.sh */
    int rounds;    /* --rounds N: interleaved mode; 0 off */
    int compare;   /* --compare: deferral off and on */
    int quiet;     /* a round's run: no rows, no JSON */
} opt;

/* The main figures of the last run of each scenario, for --rounds. */
static struct {
    double s2_acq, s2_maxw_ms, s2_minsh;
    double s3_p50_ms;
    double s5_acq, s5_maxw_ms, s5_minsh;
} lastrun;

static struct {
    int floor_warm, floor_calls, floor_conns;
    double floor_multi_s;
    int s1_warm, s1_pairs;
    double s1t_s;
    int s2_procs;
    double s2_s;
    int s3_warm, s3_rounds;
    int s4_locks;
    double s4_hold_s;
    unsigned long s4_watchdog_ms;
    int rw_procs;
    double rw_s;
    int cv_rounds;
    int sem_procs, sem_permits;
    double sem_s;
    int s5_procs, s5_threads;
    double s5_s;
} P;

/* --s4-locks, --s4-watchdog, --s4-hold: 0 unless given */
static int s4_locks_opt;
static unsigned long s4_watchdog_opt;
static double s4_hold_opt;

static void set_sizes(void)
{
    P.floor_conns = 50;
    P.s2_procs = 4;
    P.s3_warm = 3;
    P.rw_procs = 4;
    P.sem_procs = 4;
    P.sem_permits = 2;
    P.s5_procs = 2;
    P.s5_threads = 8;
    P.s5_s = opt.quick ? 1.0 : 5.0;
    if (opt.quick) {
        P.floor_warm = 100;
        P.floor_calls = 2000;
        P.floor_multi_s = 1.0;
        P.s1_warm = 100;
        P.s1_pairs = 2000;
        P.s1t_s = 0.5;
        P.s2_s = 1.0;
        P.s3_rounds = 50;
        P.s4_locks = 100;
        P.s4_hold_s = 3.0;
        P.rw_s = 1.0;
        P.cv_rounds = 200;
        P.sem_s = 1.0;
    } else {
        P.floor_warm = 500;
        P.floor_calls = 20000;
        P.floor_multi_s = 2.0;
        P.s1_warm = 500;
        P.s1_pairs = 20000;
        P.s1t_s = 2.0;
        P.s2_s = 5.0;
        P.s3_rounds = 500;
        P.s4_locks = 1000;
        P.s4_hold_s = 10.0;
        P.rw_s = 5.0;
        P.cv_rounds = 2000;
        P.sem_s = 5.0;
    }
    P.s4_watchdog_ms = 3000;
    if (s4_locks_opt)
        P.s4_locks = s4_locks_opt;
    if (s4_watchdog_opt)
        P.s4_watchdog_ms = s4_watchdog_opt;
    if (s4_hold_opt > 0)
        P.s4_hold_s = s4_hold_opt;
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000ull),
                           (long)(ns % 1000000000ull) };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
    size_t k;

    if (n == 0)
        return 0;
    k = (size_t)(p * (double)n);
    if ((double)k < p * (double)n)
        k++; /* ceil without libm */
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

/* --csv FILE: one row "scenario,series,x,y" per point of a distribution
 * (bench/plot.sh draws them).  Series: handoff_ms_cdf and wait_ms_cdf, x a
 * time in ms and y the fraction of the samples at or below it;
 * pairs_per_s, x a thread count. */
static void csv_row(const char *sc, const char *series, double x, double y)
{
    if (opt.csv)
        fprintf(opt.csv, "%s,%s,%.6g,%.6g\n", sc, series, x, y);
}

/* The n sorted samples (ns) as a cumulative distribution in ms. */
static void csv_cdf(const char *sc, const char *series, const uint64_t *lat,
                    size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (i + 1 == n || lat[i + 1] != lat[i])
            csv_row(sc, series, (double)lat[i] / 1e6,
                    (double)(i + 1) / (double)n);
}

static long vmrss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* A 64-bit xorshift: the hold times of s3 are the same on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void)
{
    uint64_t x = rng_state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* ------------------------------------------------------------------------ */
/* Results shared with worker processes                                     */
/* ------------------------------------------------------------------------ */

#define MAX_PROCS    16
#define S1T_MAX      5
#define S5_THREADS   8
#define S2_BUCKET_NS 10000ull /* wait histogram: 10 us buckets ... */
#define S2_BUCKETS   10001    /* ... up to 100 ms, then one overflow */
static const int s1t_threads[S1T_MAX] = { 1, 2, 4, 8, 16 };

/* Where the worker processes of a timed scenario line up: each says it
 * is ready, the parent then sets one start for all of them a little
 * ahead, and they run until end_ns. */
struct start_line {
    atomic_int ready;
    _Atomic uint64_t start_ns;
    uint64_t end_ns;
};

struct shared {
    atomic_int err_claimed;
    char errmsg[512];

    /* the scenarios run by run_workers (s2, rw, sem, s5): their start
     * line, and when each process of s2, rw and sem left its loop (s5's
     * threads stamp their own) */
    struct {
        struct start_line go;
        uint64_t finish_ns[MAX_PROCS];
    } run;

    struct {
        double pairs_per_s, p50_us, floor_same;
        int pairs;
        double plain_pps, tls_pps; /* s1 over TLS beside plain */
    } s1;
    struct {
        double pairs_per_s[S1T_MAX];
    } s1t;
    struct {
        long long count[MAX_PROCS];
        uint64_t max_wait_ns[MAX_PROCS];
        uint64_t sum_wait_ns[MAX_PROCS];
        uint32_t wait_hist[MAX_PROCS][S2_BUCKETS];
    } s2;
    struct {
        int rounds;
        uint64_t t0[1000];
        uint64_t t1[1000];
    } s3;
    struct {
        int locks, taken, alive, unlocked;
        long long min_pttl_ms;
        long long calls_delta;
        double hold_s;
        long rss_before_kb, rss_init_kb, rss_after_kb;
        double init_s, lock_s; /* all n dist_mutex_init, then locks */
        long long min_seen_ms; /* smallest PTTL seen during the hold */
        long long late;        /* PTTLs seen under half the lease */
        long long samples;     /* PTTLs read during the hold */
        unsigned long long renew_failed, lost; /* dist_stats */
    } s4;
    struct {
        long long reads[MAX_PROCS], writes[MAX_PROCS], torn[MAX_PROCS];
        uint64_t max_wwait_ns[MAX_PROCS]; /* longest wait in wrlock() */
        uint64_t max_rwait_ns[MAX_PROCS]; /* longest wait in rdlock() */
    } rw;
    struct {
        atomic_int turn;   /* whose turn: 0 or 1 */
        uint64_t t0[2000]; /* signal sent (handing to 1) */
        uint64_t t1[2000]; /* 1's wait returned with its turn */
    } cv;
    struct {
        atomic_int holding; /* holders now, by the workers' count */
        atomic_int max_holding;
        long long count[MAX_PROCS];
    } sem;
    struct {
        atomic_int inside;         /* threads inside the lock now */
        atomic_llong overlaps;     /* found another one inside */
        _Atomic long long counter; /* +1 inside, not atomically */
        long long count[MAX_PROCS][S5_THREADS];
        uint64_t max_wait_ns[MAX_PROCS][S5_THREADS];
        uint64_t finish_ns[MAX_PROCS][S5_THREADS];
        int failed[MAX_PROCS];
    } s5;
    struct {
        int w;                    /* waiters in all */
        long long target;         /* hand-offs counted */
        atomic_int held, release; /* the holder has it; lets go */
        atomic_int queued;        /* waiters in their first lock call */
        atomic_llong handoffs;    /* locks taken since the release */
        _Atomic uint64_t done_ns; /* when the target was reached */
        atomic_llong eio, errors; /* failed lock calls */
    } fq;
    struct {
        struct start_line go;
        atomic_llong handoffs; /* locks taken, all threads */
        atomic_int started;    /* threads past the start line */
        atomic_int turned;     /* threads that took the lock once */
        atomic_int inside;     /* threads inside the lock now */
        atomic_llong overlaps; /* found another one inside */
        atomic_int stop;
        int failed[MAX_PROCS];
        pid_t mon_tid[MAX_PROCS];  /* each worker's monitor thread */
        sem_t snap_req[MAX_PROCS]; /* the parent asks for a snapshot */
        sem_t snap_done;           /* a worker's snapshot is in */
        unsigned long long messages[MAX_PROCS]; /* dist_stats, as of the */
        unsigned long long direct[MAX_PROCS];   /* last snapshot */
        unsigned long long unwaited[MAX_PROCS]; /* (pubsub_unwaited) */
    } s6;
};

static struct shared *sh;

/* Records the first failure of a scenario (from any process or thread). */
static int fail(const char *fmt, ...)
{
    int expected = 0;
    va_list ap;

    if (atomic_compare_exchange_strong(&sh->err_claimed, &expected, 1)) {
        va_start(ap, fmt);
        vsnprintf(sh->errmsg, sizeof sh->errmsg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int dfail(const char *what, int rc)
{
    return fail("%s: %s (%s)", what, strerror(rc), dist_last_error());
}

/* ------------------------------------------------------------------------ */
/* Redis through hiredis                                                    */
/* ------------------------------------------------------------------------ */

static struct {
    char host[256];
    int port;
    char path[512];
    char user[128];
    char pass[256];
    int db;
} url;

static int parse_url(const char *s, char *why, size_t whylen)
{
    const char *p, *end, *at, *q;
    int is_unix;

    memset(&url, 0, sizeof url);
    url.port = 6379;
    if (strncmp(s, "redis://", 8) == 0) {
        is_unix = 0;
        p = s + 8;
    } else if (strncmp(s, "unix://", 7) == 0) {
        is_unix = 1;
        p = s + 7;
    } else {
        snprintf(why, whylen, "'%s' is neither redis://... nor unix://...",
                 s);
        return -1;
    }
    /* user:password@ */
    end = is_unix ? strchr(p, '/') : p + strcspn(p, "/?");
    if (!end)
        end = p + strlen(p);
    at = memchr(p, '@', (size_t)(end - p));
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            snprintf(url.user, sizeof url.user, "%.*s", (int)(colon - p), p);
            snprintf(url.pass, sizeof url.pass, "%.*s", (int)(at - colon - 1),
                     colon + 1);
        } else {
            snprintf(url.pass, sizeof url.pass, "%.*s", (int)(at - p), p);
        }
        p = at + 1;
    }
    if (is_unix) {
        q = strchr(p, '?');
        snprintf(url.path, sizeof url.path, "%.*s",
                 (int)(q ? (size_t)(q - p) : strlen(p)), p);
        if (url.path[0] != '/') {
            snprintf(why, whylen,
                     "unix:// URL needs an absolute socket path");
            return -1;
        }
        if (q && strncmp(q + 1, "db=", 3) == 0)
            url.db = atoi(q + 4);
        return 0;
    }
    end = p + strcspn(p, "/?");
    if (*p == '[') { /* [ipv6]:port */
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (!rb) {
            snprintf(why, whylen, "unterminated [ in the host");
            return -1;
        }
        snprintf(url.host, sizeof url.host, "%.*s", (int)(rb - p - 1), p + 1);
        if (rb + 1 < end && rb[1] == ':')
            url.port = atoi(rb + 2);
    } else {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon) {
            snprintf(url.host, sizeof url.host, "%.*s", (int)(colon - p), p);
            url.port = atoi(colon + 1);
        } else {
            snprintf(url.host, sizeof url.host, "%.*s", (int)(end - p), p);
        }
    }
    if (!url.host[0])
        snprintf(url.host, sizeof url.host, "127.0.0.1");
    if (url.port <= 0 || url.port > 65535) {
        snprintf(why, whylen, "bad port in '%s'", s);
        return -1;
    }
    if (*end == '/' && end[1])
        url.db = atoi(end + 1);
    return 0;
}

/* A command whose reply must not be an error; NULL (and fail()) otherwise. */
static redisReply *rcmd(redisContext *c, const char *fmt, ...)
{
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fail("redis: %s", c->errstr[0] ? c->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fail("redis refused '%s': %s", fmt, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static redisContext *rconnect(void)
{
    struct timeval tv = { 10, 0 };
    redisContext *c;
    redisReply *r;

    c = url.path[0] ? redisConnectUnixWithTimeout(url.path, tv)
                    : redisConnectWithTimeout(url.host, url.port, tv);
    if (!c) {
        fail("cannot allocate a hiredis context");
        return NULL;
    }
    if (c->err) {
        fail("cannot connect to Redis: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (url.pass[0]) {
        r = url.user[0] ? rcmd(c, "AUTH %s %s", url.user, url.pass)
                        : rcmd(c, "AUTH %s", url.pass);
        if (!r) {
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    if (url.db) {
        if (!(r = rcmd(c, "SELECT %d", url.db))) {
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/* Value of "field:" in an INFO reply, copied into out. */
static int info_field(const char *info, const char *field, char *out,
                      size_t outlen)
{
    size_t flen = strlen(field);
    const char *p = info;

    while ((p = strstr(p, field)) != NULL) {
        if ((p == info || p[-1] == '\n') && p[flen] == ':') {
            p += flen + 1;
            snprintf(out, outlen, "%.*s", (int)strcspn(p, "\r\n"), p);
            return 0;
        }
        p += flen;
    }
    return -1;
}

/* EVALSHA + EVAL calls counted by the server so far; -1 on failure. */
static long long script_calls(redisContext *c)
{
    static const char *const names[] = { "cmdstat_evalsha", "cmdstat_eval" };
    redisReply *r = rcmd(c, "INFO commandstats");
    long long sum = 0;
    char val[512];
    size_t i;

    if (!r)
        return -1;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (info_field(r->str, names[i], val, sizeof val) == 0 &&
            strncmp(val, "calls=", 6) == 0)
            sum += atoll(val + 6);
    }
    freeReplyObject(r);
    return sum;
}

/* Deletes keys (any number), pipelined. */
static void del_keys(redisContext *c, char **keys, int n)
{
    int i;
    void *r;

    for (i = 0; i < n; i++)
        redisAppendCommand(c, "DEL %s", keys[i]);
    for (i = 0; i < n; i++) {
        if (redisGetReply(c, &r) != REDIS_OK)
            return;
        freeReplyObject(r);
    }
}

static void del_lock_keys(redisContext *c, const char *name)
{
    char k1[256], k2[256];
    char *keys[2] = { k1, k2 };

    snprintf(k1, sizeof k1, "%s", name);
    snprintf(k2, sizeof k2, "redisson_lock_token:{%s}", name);
    del_keys(c, keys, 2);
}

/* ------------------------------------------------------------------------ */
/* Worker processes                                                         */
/* ------------------------------------------------------------------------ */

/* What the frame of a worker process (worker_run) opens for it before its
 * loop, and gives back after.  The scenario's lock (w->lk) is of at most
 * one kind; a worker without one makes its objects itself. */
enum {
    W_REDIS = 1 << 0,  /* its own Redis connection (w->c), for its own keys */
    W_MUTEX = 1 << 1,  /* a mutex with the bench's attributes */
    W_RWLOCK = 1 << 2, /* a read-write lock */
    W_SEM = 1 << 3,    /* a semaphore of the sem scenario's permits */
    W_WARM = 1 << 4,   /* one uncounted pass on the lock connects distlock */
    W_TIMED = 1 << 5,  /* lines up at sh->run.go, and stamps its finish */
    W_RAW = 1 << 6,    /* uses no distlock (the raw hand-off): no shutdown */
};

struct worker {
    int idx;          /* which of the scenario's workers */
    const char *lock; /* the lock's name */
    unsigned opens;   /* W_* */
    redisContext *c;  /* with W_REDIS */
    uint64_t end;     /* with W_TIMED: when the loop stops */
    union {
        dist_mutex_t m;
        dist_rwlock_t rw;
        dist_sem_t s;
    } lk;
};

/* A scenario's own work in a worker process: 0, or -1 (said why) when the
 * worker failed. */
typedef int (*worker_loop)(struct worker *w);

/* A worker at the start line: says it is ready, waits for the start.
 * When it must stop. */
static uint64_t line_up(struct start_line *g)
{
    uint64_t start, t;

    atomic_fetch_add(&g->ready, 1);
    while ((start = atomic_load(&g->start_ns)) == 0)
        sleep_ns(200000);
    while ((t = now_ns()) < start)
        sleep_ns(start - t);
    return g->end_ns;
}

static int lock_init(struct worker *w)
{
    int rc = 0;

    if (w->opens & W_MUTEX) {
        if ((rc = bench_mutex_init(&w->lk.m, w->lock)) != 0)
            return dfail("dist_mutex_init", rc);
    } else if (w->opens & W_RWLOCK) {
        if ((rc = dist_rwlock_init(&w->lk.rw, w->lock, NULL)) != 0)
            return dfail("dist_rwlock_init", rc);
    } else if (w->opens & W_SEM) {
        rc = dist_sem_init(&w->lk.s, w->lock, (unsigned)P.sem_permits, NULL);
        if (rc != 0)
            return dfail("dist_sem_init", rc);
    }
    return 0;
}

/* W_WARM: a mutex taken and given back once, a read-write lock so in
 * each mode. */
static int lock_warm(struct worker *w)
{
    dist_rwlock_t *rw = &w->lk.rw;
    int rc;

    if ((w->opens & W_MUTEX) && ((rc = dist_mutex_lock(&w->lk.m)) != 0 ||
                                 (rc = dist_mutex_unlock(&w->lk.m)) != 0))
        return dfail("warm-up lock/unlock", rc);
    if ((w->opens & W_RWLOCK) && ((rc = dist_rwlock_rdlock(rw)) != 0 ||
                                  (rc = dist_rwlock_unlock(rw)) != 0 ||
                                  (rc = dist_rwlock_wrlock(rw)) != 0 ||
                                  (rc = dist_rwlock_unlock(rw)) != 0))
        return dfail("warm-up rdlock/wrlock", rc);
    return 0;
}

static void lock_destroy(struct worker *w)
{
    if (w->opens & W_MUTEX)
        dist_mutex_destroy(&w->lk.m);
    else if (w->opens & W_RWLOCK)
        dist_rwlock_destroy(&w->lk.rw);
    else if (w->opens & W_SEM)
        dist_sem_destroy(&w->lk.s);
}

/* The frame every worker process runs in: what opens names (W_*) made,
 * the scenario's loop run, and all given back.  A worker that fails ends
 * at once: its process exits and takes all with it. */
static int worker_run(worker_loop loop, const char *lock, unsigned opens,
                      int idx)
{
    struct worker w = { .idx = idx, .lock = lock, .opens = opens };

    if ((opens & W_REDIS) && !(w.c = rconnect()))
        return -1;
    if (lock_init(&w) != 0 || ((opens & W_WARM) && lock_warm(&w) != 0))
        return -1;
    if (opens & W_TIMED)
        w.end = line_up(&sh->run.go);
    if (loop(&w) != 0)
        return -1;
    if (opens & W_TIMED)
        sh->run.finish_ns[idx] = now_ns();
    lock_destroy(&w);
    if (!(opens & W_RAW))
        dist_shutdown();
    if (w.c)
        redisFree(w.c);
    return 0;
}

struct kids {
    int n;
    pid_t pid[MAX_PROCS];
    int done[MAX_PROCS];
};

/* Forks worker idx of a scenario, which runs loop in the frame that opens
 * names, and exits 0 when it returns 0. */
static int spawn(struct kids *k, worker_loop loop, const char *lock,
                 unsigned opens, int idx)
{
    pid_t ppid = getpid(), pid;

    fflush(NULL);
    pid = fork();
    if (pid < 0)
        return fail("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != ppid)
            _exit(1);
        signal(SIGPIPE, SIG_IGN);
        _exit(worker_run(loop, lock, opens, idx) == 0 ? 0 : 1);
    }
    k->pid[k->n] = pid;
    k->done[k->n] = 0;
    k->n++;
    return 0;
}

static void kids_kill(struct kids *k)
{
    int i;

    for (i = 0; i < k->n; i++) {
        if (!k->done[i]) {
            kill(k->pid[i], SIGKILL);
            waitpid(k->pid[i], NULL, 0);
            k->done[i] = 1;
        }
    }
}

/* Reaps finished workers.  1 when all are done, 0 while some run, -1 (and
 * the others killed) when one failed. */
static int kids_poll(struct kids *k)
{
    int i, st, all = 1;

    for (i = 0; i < k->n; i++) {
        if (k->done[i])
            continue;
        if (waitpid(k->pid[i], &st, WNOHANG) == k->pid[i]) {
            k->done[i] = 1;
            if (WIFSIGNALED(st)) {
                fail("worker %d killed by signal %d", (int)k->pid[i],
                     WTERMSIG(st));
                kids_kill(k);
                return -1;
            }
            if (WEXITSTATUS(st) != 0) {
                fail("worker %d failed", (int)k->pid[i]);
                kids_kill(k);
                return -1;
            }
        } else {
            all = 0;
        }
    }
    return all;
}

/* Waits for all workers, at most timeout_s. */
static int kids_wait(struct kids *k, double timeout_s)
{
    uint64_t deadline = now_ns() + (uint64_t)(timeout_s * 1e9);
    int rc;

    while ((rc = kids_poll(k)) == 0) {
        if (now_ns() > deadline) {
            kids_kill(k);
            return fail("timed out after %.0f s (a worker hung)", timeout_s);
        }
        sleep_ns(2000000);
    }
    return rc > 0 ? 0 : -1;
}

static int run_in_child(worker_loop loop, const char *lock, unsigned opens,
                        double timeout_s)
{
    struct kids k = { 0 };

    if (spawn(&k, loop, lock, opens, 0) != 0)
        return -1;
    return kids_wait(&k, timeout_s);
}

/* ------------------------------------------------------------------------ */
/* Output                                                                   */
/* ------------------------------------------------------------------------ */

static int any_error;

#define ROW_FMT "%-6s  %-30s %14s  %-8s  %-16s  %s\n"

static void row(const char *sc, const char *fig, const char *val,
                const char *unit, const char *target, const char *verdict)
{
    if (opt.json || opt.quiet)
        return;
    printf(ROW_FMT, sc, fig, val, unit, target ? target : "-",
           verdict ? verdict : "-");
    fflush(stdout);
}

static const char *fmtd(char *buf, size_t n, double v, int decimals)
{
    snprintf(buf, n, "%.*f", decimals, v);
    return buf;
}

/* Higher is better: ratio value/target. */
static const char *v_hi(char *buf, size_t n, double v, double t)
{
    snprintf(buf, n, "%.2f %s", t > 0 ? v / t : 0.0, v >= t ? "ok" : "MISS");
    return buf;
}

/* Lower is better: ratio value/target, ok when at most (or under) it. */
static const char *v_lo(char *buf, size_t n, double v, double t, int strict)
{
    int ok = strict ? v < t : v <= t;

    snprintf(buf, n, "%.2f %s", t > 0 ? v / t : 0.0, ok ? "ok" : "MISS");
    return buf;
}

/* A figure without a target, with decimals digits after the point. */
static void row_fig(const char *sc, const char *fig, double v, int decimals,
                    const char *unit)
{
    char b[32];

    row(sc, fig, fmtd(b, sizeof b, v, decimals), unit, NULL, NULL);
}

/* A figure against its target, higher better (v_hi). */
static void row_hi(const char *sc, const char *fig, double v, int decimals,
                   const char *unit, double target)
{
    char b1[32], b2[32], b3[32];

    row(sc, fig, fmtd(b1, sizeof b1, v, decimals), unit,
        fmtd(b2, sizeof b2, target, decimals),
        v_hi(b3, sizeof b3, v, target));
}

/* One JSON object, built up then printed on one line. */
struct jobj {
    char b[4096];
    size_t n;
};

static void jraw(struct jobj *j, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (j->n >= sizeof j->b)
        return;
    va_start(ap, fmt);
    w = vsnprintf(j->b + j->n, sizeof j->b - j->n, fmt, ap);
    va_end(ap);
    if (w > 0)
        j->n += (size_t)w;
}

static void jstrval(struct jobj *j, const char *s)
{
    jraw(j, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            jraw(j, "\\%c", c);
        else if (c < 0x20)
            jraw(j, "\\u%04x", c);
        else
            jraw(j, "%c", c);
    }
    jraw(j, "\"");
}

static void jstart(struct jobj *j, const char *scenario)
{
    j->n = 0;
    jraw(j, "{\"scenario\":");
    jstrval(j, scenario);
}

static void jnum(struct jobj *j, const char *k, double v)
{
    if (isfinite(v))
        jraw(j, ",\"%s\":%.10g", k, v);
    else
        jraw(j, ",\"%s\":null", k);
}

static void jint(struct jobj *j, const char *k, long long v)
{
    jraw(j, ",\"%s\":%lld", k, v);
}

static void jbool(struct jobj *j, const char *k, int v)
{
    jraw(j, ",\"%s\":%s", k, v ? "true" : "false");
}

static void jstr(struct jobj *j, const char *k, const char *v)
{
    jraw(j, ",\"%s\":", k);
    jstrval(j, v);
}

/* A throughput run's figures: total acquisitions in secs, against target
 * acquisitions a second. */
static void jrate(struct jobj *j, double secs, long long total, double target)
{
    double acq = (double)total / secs;

    jnum(j, "seconds", secs);
    jint(j, "acquisitions", total);
    jnum(j, "acq_per_s", acq);
    jnum(j, "target", target);
    jnum(j, "ratio", acq / target);
}

/* A latency's median and 99th percentile, in ms: what_p50_ms and
 * what_p99_ms. */
static void jpct(struct jobj *j, const char *what, double p50, double p99)
{
    char k[64];

    snprintf(k, sizeof k, "%s_p50_ms", what);
    jnum(j, k, p50);
    snprintf(k, sizeof k, "%s_p99_ms", what);
    jnum(j, k, p99);
}

static void jend(struct jobj *j)
{
    jraw(j, "}");
    if (opt.json && !opt.quiet) {
        printf("%s\n", j->b);
        fflush(stdout);
    }
}

/* A scenario that could not run. */
static void report_error(const char *sc)
{
    struct jobj j;
    char msg[600];

    any_error = 1;
    snprintf(msg, sizeof msg, "ERROR: %s",
             sh->errmsg[0] ? sh->errmsg : "unknown failure");
    if (!opt.json) {
        printf("%-6s  %s\n", sc, msg);
        fflush(stdout);
        return;
    }
    jstart(&j, sc);
    jstr(&j, "error", sh->errmsg[0] ? sh->errmsg : "unknown failure");
    jend(&j);
}

static void reset_shared(void)
{
    memset(sh, 0, sizeof *sh);
}

/* ------------------------------------------------------------------------ */
/* floor: raw EVALSHA round trips                                           */
/* ------------------------------------------------------------------------ */

static const char floor_lua[] =
    "redis.call('hincrby', KEYS[1], ARGV[1], 1) "
    "redis.call('pexpire', KEYS[1], 30000) return 1";

static struct {
    int done;
    double ops1, p50_us, ops_multi;
} fl;

static char floor_sha[64];

/* One EVALSHA of the floor script on key; 0 or -1. */
static int floor_call(redisContext *c, const char *key)
{
    const char *argv[5] = { "EVALSHA", floor_sha, "1", key, "f" };
    size_t len[5] = { 7, strlen(floor_sha), 1, strlen(key), 1 };
    redisReply *r = redisCommandArgv(c, 5, argv, len);

    if (!r)
        return fail("floor: %s", c->errstr[0] ? c->errstr : "no reply");
    if (r->type != REDIS_REPLY_INTEGER) {
        fail("floor: unexpected reply to EVALSHA%s%s",
             r->type == REDIS_REPLY_ERROR ? ": " : "",
             r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

struct fthread {
    pthread_t th;
    char key[64];
    long long ops;
    int failed;
};

static pthread_barrier_t fbar;
static atomic_int fstop;

static void *floor_thread(void *arg)
{
    struct fthread *t = arg;
    redisContext *c = rconnect();

    if (!c)
        t->failed = 1;
    else if (floor_call(c, t->key) != 0) /* warm-up */
        t->failed = 1;
    pthread_barrier_wait(&fbar);
    while (!t->failed &&
           !atomic_load_explicit(&fstop, memory_order_relaxed)) {
        if (floor_call(c, t->key) != 0)
            t->failed = 1;
        else
            t->ops++;
    }
    if (c) {
        redisReply *r = redisCommand(c, "DEL %s", t->key);
        freeReplyObject(r);
        redisFree(c);
    }
    return NULL;
}

static int floor_measure(void)
{
    redisContext *c = rconnect();
    const char *key = "bench-floor-1";
    uint64_t *lat, t, start, end;
    struct fthread *th;
    redisReply *r;
    long long total = 0;
    int i, failed = 0;

    if (!c)
        return -1;
    if (!(r = rcmd(c, "SCRIPT LOAD %s", floor_lua))) {
        redisFree(c);
        return -1;
    }
    snprintf(floor_sha, sizeof floor_sha, "%s", r->str);
    freeReplyObject(r);

    /* one connection */
    lat = malloc(sizeof *lat * (size_t)P.floor_calls);
    if (!lat) {
        redisFree(c);
        return fail("out of memory");
    }
    for (i = 0; i < P.floor_warm; i++)
        if (floor_call(c, key) != 0)
            goto out;
    start = now_ns();
    for (i = 0; i < P.floor_calls; i++) {
        t = now_ns();
        if (floor_call(c, key) != 0)
            goto out;
        lat[i] = now_ns() - t;
    }
    end = now_ns();
    qsort(lat, (size_t)P.floor_calls, sizeof *lat, cmp_u64);
    fl.ops1 = P.floor_calls / ((double)(end - start) / 1e9);
    fl.p50_us = (double)pct(lat, (size_t)P.floor_calls, 0.50) / 1e3;
    r = redisCommand(c, "DEL %s", key);
    freeReplyObject(r);

    /* many connections, one thread each */
    th = calloc((size_t)P.floor_conns, sizeof *th);
    if (!th) {
        fail("out of memory");
        goto out;
    }
    atomic_store(&fstop, 0);
    pthread_barrier_init(&fbar, NULL, (unsigned)P.floor_conns + 1);
    for (i = 0; i < P.floor_conns; i++) {
        snprintf(th[i].key, sizeof th[i].key, "bench-floor-%d-%d",
                 P.floor_conns, i);
        if (pthread_create(&th[i].th, NULL, floor_thread, &th[i]) != 0) {
            fail("pthread_create failed");
            exit(1); /* the barrier would never open */
        }
    }
    pthread_barrier_wait(&fbar);
    start = now_ns();
    sleep_ns((uint64_t)(P.floor_multi_s * 1e9));
    atomic_store(&fstop, 1);
    end = now_ns();
    for (i = 0; i < P.floor_conns; i++) {
        pthread_join(th[i].th, NULL);
        total += th[i].ops;
        failed |= th[i].failed;
    }
    pthread_barrier_destroy(&fbar);
    free(th);
    if (failed)
        goto out;
    fl.ops_multi = (double)total / ((double)(end - start) / 1e9);
    fl.done = 1;
out:
    free(lat);
    redisFree(c);
    return fl.done ? 0 : -1;
}

static void scenario_floor(int print)
{
    char b1[32], b2[32];
    struct jobj j;

    reset_shared();
    if (floor_measure() != 0) {
        report_error("floor");
        return;
    }
    if (!print)
        return;
    row("floor", "EVALSHA, 1 conn", fmtd(b1, sizeof b1, fl.ops1, 0), "ops/s",
        NULL, NULL);
    row("floor", "EVALSHA, 1 conn, p50", fmtd(b1, sizeof b1, fl.p50_us, 1),
        "us", NULL, NULL);
    snprintf(b2, sizeof b2, "EVALSHA, %d conns", P.floor_conns);
    row_fig("floor", b2, fl.ops_multi, 0, "ops/s");
    jstart(&j, "floor");
    jint(&j, "calls_1conn", P.floor_calls);
    jnum(&j, "ops_per_s_1conn", fl.ops1);
    jnum(&j, "p50_us_1conn", fl.p50_us);
    jint(&j, "conns", P.floor_conns);
    jnum(&j, "seconds_multi", P.floor_multi_s);
    jnum(&j, "ops_per_s_multi", fl.ops_multi);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* s1: one thread, one lock                                                 */
/* ------------------------------------------------------------------------ */

/* The pairs run in S1_CHUNKS chunks, each preceded by as many raw floor
 * EVALSHAs on a hiredis connection of the same thread: on a small machine
 * the round trip depends a lot on where the scheduler puts the client
 * relative to redis-server (same core or not), so the floor scenario, run
 * earlier, may have seen other conditions than s1.  The interleaved floor
 * gives a second, like-for-like ratio. */
#define S1_CHUNKS 10

static int s1_loop(struct worker *w)
{
    redisContext *c = w->c;
    dist_mutex_t *m = &w->lk.m;
    uint64_t *lat, t, t_chunk, pair_ns = 0, floor_ns = 0;
    int i, k, rc, per = P.s1_pairs / S1_CHUNKS, n = 0;

    if (!(lat = malloc(sizeof *lat * (size_t)P.s1_pairs)))
        return fail("out of memory");
    for (i = 0; i < P.s1_warm; i++) {
        if (floor_call(c, "bench-s1-floor") != 0)
            return -1;
        if ((rc = dist_mutex_lock(m)) != 0)
            return dfail("dist_mutex_lock", rc);
        if ((rc = dist_mutex_unlock(m)) != 0)
            return dfail("dist_mutex_unlock", rc);
    }
    for (k = 0; k < S1_CHUNKS; k++) {
        t_chunk = now_ns();
        for (i = 0; i < per; i++)
            if (floor_call(c, "bench-s1-floor") != 0)
                return -1;
        t = now_ns();
        floor_ns += t - t_chunk;
        t_chunk = t;
        for (i = 0; i < per; i++) {
            t = now_ns();
            if ((rc = dist_mutex_lock(m)) != 0)
                return dfail("dist_mutex_lock", rc);
            if ((rc = dist_mutex_unlock(m)) != 0)
                return dfail("dist_mutex_unlock", rc);
            lat[n++] = now_ns() - t;
        }
        pair_ns += now_ns() - t_chunk;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    sh->s1.pairs_per_s = n / ((double)pair_ns / 1e9);
    sh->s1.floor_same = n / ((double)floor_ns / 1e9);
    sh->s1.p50_us = (double)pct(lat, (size_t)n, 0.50) / 1e3;
    sh->s1.pairs = n;
    free(lat);
    freeReplyObject(redisCommand(c, "DEL bench-s1-floor"));
    return 0;
}

/* S1 over TLS beside S1 plain, chunk for chunk (A B A B) in one process
 * switching the URL between DISTLOCK_URL and DISTLOCK_BENCH_TLS_URL (the
 * same server's TLS port), so that both see the same machine.  A switch
 * replaces the connections: the handshake falls in the untimed warm-up
 * pairs that follow it, as a long-lived program pays it once. */
static int s1_pairs_on(dist_mutex_t *m, const char *to, int warm, int n,
                       uint64_t *ns)
{
    uint64_t t = now_ns();
    int i, rc;

    if ((rc = dist_set_url(to)) != 0)
        return dfail("dist_set_url", rc);
    for (i = 0; i < warm + n; i++) {
        if (i == warm)
            t = now_ns();
        if ((rc = dist_mutex_lock(m)) != 0)
            return dfail("dist_mutex_lock", rc);
        if ((rc = dist_mutex_unlock(m)) != 0)
            return dfail("dist_mutex_unlock", rc);
    }
    *ns += now_ns() - t;
    return 0;
}

/* The loop makes its lock itself: with the library's defaults, not
 * bench_mutex_init's attributes. */
static int s1_tls_loop(struct worker *w)
{
    const char *plain = getenv("DISTLOCK_URL");
    const char *tls = getenv("DISTLOCK_BENCH_TLS_URL");
    int k, per = P.s1_pairs / S1_CHUNKS, rc;
    uint64_t plain_ns = 0, tls_ns = 0;
    dist_mutex_t m;

    (void)w;
    if ((rc = dist_mutex_init(&m, "bench-s1", NULL)) != 0)
        return dfail("dist_mutex_init", rc);
    for (k = 0; k < S1_CHUNKS; k++)
        if (s1_pairs_on(&m, plain, 50, per, &plain_ns) != 0 ||
            s1_pairs_on(&m, tls, 50, per, &tls_ns) != 0)
            return -1;
    sh->s1.plain_pps = per * S1_CHUNKS / ((double)plain_ns / 1e9);
    sh->s1.tls_pps = per * S1_CHUNKS / ((double)tls_ns / 1e9);
    dist_mutex_destroy(&m);
    return 0;
}

static void scenario_s1_tls(redisContext *c)
{
    char b1[32], b2[32], b3[32];
    struct jobj j;
    double target;

    del_lock_keys(c, "bench-s1");
    if (run_in_child(s1_tls_loop, NULL, 0, 120) != 0) {
        del_lock_keys(c, "bench-s1");
        report_error("s1");
        return;
    }
    del_lock_keys(c, "bench-s1");
    target = 0.8 * sh->s1.plain_pps;
    row("s1", "plain, interleaved with TLS",
        fmtd(b1, sizeof b1, sh->s1.plain_pps, 0), "pairs/s", NULL, NULL);
    row("s1", "TLS, interleaved with plain",
        fmtd(b1, sizeof b1, sh->s1.tls_pps, 0), "pairs/s",
        fmtd(b2, sizeof b2, target, 0),
        v_hi(b3, sizeof b3, sh->s1.tls_pps, target));
    jstart(&j, "s1_tls");
    jnum(&j, "plain_pairs_per_s", sh->s1.plain_pps);
    jnum(&j, "tls_pairs_per_s", sh->s1.tls_pps);
    jnum(&j, "ratio_tls_plain", sh->s1.tls_pps / sh->s1.plain_pps);
    jend(&j);
}

static void scenario_s1(redisContext *c)
{
    double target = 0.85 * (fl.ops1 / 2), target_same;
    char b1[32], b2[32], b3[32];
    struct jobj j;
    int rc;

    reset_shared();
    del_lock_keys(c, "bench-s1");
    rc = run_in_child(s1_loop, "bench-s1", W_REDIS | W_MUTEX, 120);
    del_lock_keys(c, "bench-s1");
    if (rc != 0) {
        report_error("s1");
        return;
    }
    target_same = 0.85 * (sh->s1.floor_same / 2);
    row("s1", "lock+unlock pairs, 1 thread",
        fmtd(b1, sizeof b1, sh->s1.pairs_per_s, 0), "pairs/s",
        fmtd(b2, sizeof b2, target, 0),
        v_hi(b3, sizeof b3, sh->s1.pairs_per_s, target));
    row_fig("s1", "pair latency p50", sh->s1.p50_us, 1, "us");
    row("s1", "floor interleaved, same thread",
        fmtd(b1, sizeof b1, sh->s1.floor_same, 0), "ops/s", NULL, NULL);
    row_hi("s1", "pairs vs interleaved floor", sh->s1.pairs_per_s, 0,
           "pairs/s", target_same);
    jstart(&j, "s1");
    jint(&j, "pairs", sh->s1.pairs);
    jnum(&j, "pairs_per_s", sh->s1.pairs_per_s);
    jnum(&j, "p50_us", sh->s1.p50_us);
    jnum(&j, "target", target);
    jnum(&j, "ratio", sh->s1.pairs_per_s / target);
    jbool(&j, "ok", sh->s1.pairs_per_s >= target);
    jnum(&j, "floor_interleaved_ops_per_s", sh->s1.floor_same);
    jnum(&j, "target_interleaved", target_same);
    jnum(&j, "ratio_interleaved", sh->s1.pairs_per_s / target_same);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* s1t: T threads, one lock each                                            */
/* ------------------------------------------------------------------------ */

struct s1t_thread {
    pthread_t th;
    char name[64];
    long long pairs;
};

static pthread_barrier_t s1t_bar;
static atomic_int s1t_stop;
static atomic_int s1t_failed;

static void *s1t_thread(void *arg)
{
    struct s1t_thread *t = arg;
    dist_mutex_t m;
    int i, rc, ok = 1;

    if ((rc = dist_mutex_init(&m, t->name, NULL)) != 0) {
        dfail("dist_mutex_init", rc);
        ok = 0;
    }
    for (i = 0; ok && i < 20; i++) { /* warm-up, connect */
        if ((rc = dist_mutex_lock(&m)) != 0 ||
            (rc = dist_mutex_unlock(&m)) != 0) {
            dfail("s1t warm-up lock/unlock", rc);
            ok = 0;
        }
    }
    pthread_barrier_wait(&s1t_bar);
    while (ok && !atomic_load_explicit(&s1t_stop, memory_order_relaxed)) {
        if ((rc = dist_mutex_lock(&m)) != 0) {
            dfail("dist_mutex_lock", rc);
            ok = 0;
        } else if ((rc = dist_mutex_unlock(&m)) != 0) {
            dfail("dist_mutex_unlock", rc);
            ok = 0;
        } else {
            t->pairs++;
        }
    }
    if (!ok)
        atomic_store(&s1t_failed, 1);
    else
        dist_mutex_destroy(&m);
    return NULL;
}

static int s1t_loop(struct worker *w)
{
    struct s1t_thread th[16];
    uint64_t start, end;
    long long total;
    int k, i, n;

    (void)w;
    for (k = 0; k < S1T_MAX; k++) {
        n = s1t_threads[k];
        memset(th, 0, sizeof th);
        atomic_store(&s1t_stop, 0);
        pthread_barrier_init(&s1t_bar, NULL, (unsigned)n + 1);
        for (i = 0; i < n; i++) {
            snprintf(th[i].name, sizeof th[i].name, "bench-s1t-%d-%d", n, i);
            if (pthread_create(&th[i].th, NULL, s1t_thread, &th[i]) != 0) {
                fail("pthread_create failed");
                _exit(1);
            }
        }
        pthread_barrier_wait(&s1t_bar);
        start = now_ns();
        sleep_ns((uint64_t)(P.s1t_s * 1e9));
        atomic_store(&s1t_stop, 1);
        end = now_ns();
        total = 0;
        for (i = 0; i < n; i++) {
            pthread_join(th[i].th, NULL);
            total += th[i].pairs;
        }
        pthread_barrier_destroy(&s1t_bar);
        if (atomic_load(&s1t_failed))
            return -1;
        sh->s1t.pairs_per_s[k] =
            (double)total / ((double)(end - start) / 1e9);
    }
    return 0;
}

static void s1t_cleanup(redisContext *c)
{
    char b[64];
    int k, i;

    for (k = 0; k < S1T_MAX; k++) {
        for (i = 0; i < s1t_threads[k]; i++) {
            snprintf(b, sizeof b, "bench-s1t-%d-%d", s1t_threads[k], i);
            del_lock_keys(c, b);
        }
    }
}

static void scenario_s1t(redisContext *c)
{
    double target = 0.7 * (fl.ops_multi / 2);
    char b0[48], b1[32], b2[32], b3[32];
    struct jobj j;
    int k, last, rc;

    reset_shared();
    s1t_cleanup(c);
    rc = run_in_child(s1t_loop, NULL, 0, 120 + S1T_MAX * P.s1t_s);
    s1t_cleanup(c);
    if (rc != 0) {
        report_error("s1t");
        return;
    }
    for (k = 0; k < S1T_MAX; k++) {
        double v = sh->s1t.pairs_per_s[k];
        last = k == S1T_MAX - 1;
        snprintf(b0, sizeof b0, "pairs, T=%d threads", s1t_threads[k]);
        row("s1t", b0, fmtd(b1, sizeof b1, v, 0), "pairs/s",
            last ? fmtd(b2, sizeof b2, target, 0) : NULL,
            last ? v_hi(b3, sizeof b3, v, target) : NULL);
        csv_row("s1t", "pairs_per_s", s1t_threads[k], v);
        jstart(&j, "s1t");
        jint(&j, "threads", s1t_threads[k]);
        jnum(&j, "seconds", P.s1t_s);
        jnum(&j, "pairs_per_s", v);
        if (last) {
            jnum(&j, "target", target);
            jnum(&j, "ratio", v / target);
            jbool(&j, "ok", v >= target);
        }
        jend(&j);
    }
}

/* ------------------------------------------------------------------------ */
/* the start line of the timed multi-process scenarios (s2, rw, sem, s5)    */
/* ------------------------------------------------------------------------ */

/* The parent: once the n workers of scenario sc are ready (30 s at most),
 * starts them all 50 ms from now for secs.  0, or -1 with the workers
 * killed and the failure recorded. */
static int start_workers(struct kids *k, struct start_line *g, int n,
                         double secs, const char *sc)
{
    uint64_t deadline = now_ns() + 30000000000ull;
    int rc = 0;

    while (atomic_load(&g->ready) < n) {
        if ((rc = kids_poll(k)) != 0 || now_ns() > deadline) {
            kids_kill(k);
            if (rc == 0)
                fail("%s workers did not get ready within 30 s", sc);
            else if (rc > 0)
                fail("%s workers exited before the start", sc);
            return -1;
        }
        sleep_ns(1000000);
    }
    g->end_ns = now_ns() + 50000000ull + (uint64_t)(secs * 1e9);
    atomic_store(&g->start_ns, g->end_ns - (uint64_t)(secs * 1e9));
    return 0;
}

/* The timed run of scenario sc: forks procs workers (0 .. procs-1) that
 * run loop in the frame that opens names, of which ready (processes or
 * threads) line up at sh->run.go, starts them for secs and waits for
 * them all (120 s past secs at most).  0, or -1 with the failure recorded
 * and no worker left running. */
static int run_workers(worker_loop loop, const char *lock, unsigned opens,
                       int procs, int ready, double secs, const char *sc)
{
    struct kids k = { 0 };
    int i;

    for (i = 0; i < procs; i++) {
        if (spawn(&k, loop, lock, opens, i) != 0) {
            kids_kill(&k);
            return -1;
        }
    }
    if (start_workers(&k, &sh->run.go, ready, secs, sc) != 0)
        return -1;
    return kids_wait(&k, secs + 120);
}

/* Seconds from the start of a timed run to the last of its procs
 * processes leaving its loop. */
static double run_secs(int procs)
{
    uint64_t last = 0;
    int i;

    for (i = 0; i < procs; i++)
        if (sh->run.finish_ns[i] > last)
            last = sh->run.finish_ns[i];
    return (double)(last - sh->run.go.start_ns) / 1e9;
}

/* ------------------------------------------------------------------------ */
/* s2: processes contending for one lock around a counter                   */
/* ------------------------------------------------------------------------ */

static const char s2_lock[] = "bench-s2";
static const char s2_counter[] = "bench-s2-counter";

static int s2_loop(struct worker *wk)
{
    redisContext *c = wk->c;
    dist_mutex_t *m = &wk->lk.m;
    uint64_t t, w, maxw = 0, sumw = 0;
    long long count = 0, v;
    redisReply *r;
    int rc, idx = wk->idx;

    while ((t = now_ns()) < wk->end) {
        if ((rc = dist_mutex_lock(m)) != 0)
            return dfail("dist_mutex_lock", rc);
        w = now_ns() - t;
        sumw += w;
        sh->s2.wait_hist[idx][w / S2_BUCKET_NS < S2_BUCKETS - 1
                                  ? w / S2_BUCKET_NS
                                  : S2_BUCKETS - 1]++;
        if (w > maxw)
            maxw = w;
        if (!(r = rcmd(c, "GET %s", s2_counter)))
            return -1;
        v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        if (!(r = rcmd(c, "SET %s %lld", s2_counter, v + 1)))
            return -1;
        freeReplyObject(r);
        if ((rc = dist_mutex_unlock(m)) != 0)
            return dfail("dist_mutex_unlock", rc);
        count++;
    }
    sh->s2.count[idx] = count;
    sh->s2.max_wait_ns[idx] = maxw;
    sh->s2.sum_wait_ns[idx] = sumw;
    return 0;
}

static int s2_run(redisContext *c, long long *final)
{
    redisReply *r;

    del_lock_keys(c, s2_lock);
    if (!(r = rcmd(c, "SET %s 0", s2_counter)))
        return -1;
    freeReplyObject(r);
    if (run_workers(s2_loop, s2_lock, W_REDIS | W_MUTEX | W_WARM | W_TIMED,
                    P.s2_procs, P.s2_procs, P.s2_s, "s2") != 0)
        return -1;
    if (!(r = rcmd(c, "GET %s", s2_counter)))
        return -1;
    *final = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    r = redisCommand(c, "DEL %s", s2_counter);
    freeReplyObject(r);
    del_lock_keys(c, s2_lock);
    return 0;
}

/* Upper edge, in ms, of the histogram bucket holding percentile p. */
static double s2_wait_pct(long long total, double p)
{
    long long want = (long long)(p * (double)total), seen = 0;
    int b, i;

    if (want < 1)
        want = 1;
    for (b = 0; b < S2_BUCKETS; b++) {
        for (i = 0; i < P.s2_procs; i++)
            seen += sh->s2.wait_hist[i][b];
        if (seen >= want)
            return (double)((uint64_t)(b + 1) * S2_BUCKET_NS) / 1e6;
    }
    return (double)(S2_BUCKETS * S2_BUCKET_NS) / 1e6;
}

/* The wait histogram as a cumulative distribution: each non-empty
 * bucket's upper edge (ms) and the fraction of waits in it or below. */
static void csv_s2_waits(long long total)
{
    long long seen = 0, in;
    int b, i;

    for (b = 0; b < S2_BUCKETS && total > 0; b++) {
        for (i = 0, in = 0; i < P.s2_procs; i++)
            in += sh->s2.wait_hist[i][b];
        seen += in;
        if (in > 0)
            csv_row(cur_sc, "wait_ms_cdf",
                    (double)((uint64_t)(b + 1) * S2_BUCKET_NS) / 1e6,
                    (double)seen / (double)total);
    }
}

static void scenario_s2(redisContext *c)
{
    double target = 0.7 * (fl.ops1 / 4), fair = 1.0 / P.s2_procs;
    double acq, secs, maxsh, minsh, maxw_ms = 0, meanw_ms;
    long long total = 0, final = 0, lost, mx = 0, mn = -1;
    uint64_t sumw = 0;
    char b1[32], b2[32], b3[32];
    struct jobj j;
    int i;

    reset_shared();
    if (s2_run(c, &final) != 0) {
        report_error(cur_sc);
        return;
    }
    for (i = 0; i < P.s2_procs; i++) {
        long long n = sh->s2.count[i];
        total += n;
        if (n > mx)
            mx = n;
        if (mn < 0 || n < mn)
            mn = n;
        if (sh->s2.max_wait_ns[i] / 1e6 > maxw_ms)
            maxw_ms = (double)sh->s2.max_wait_ns[i] / 1e6;
        sumw += sh->s2.sum_wait_ns[i];
    }
    secs = run_secs(P.s2_procs);
    acq = (double)total / secs;
    maxsh = total ? (double)mx / (double)total : 0;
    minsh = total ? (double)mn / (double)total : 0;
    meanw_ms = total ? (double)sumw / (double)total / 1e6 : 0;
    lost = total - final;
    lastrun.s2_acq = acq;
    lastrun.s2_maxw_ms = maxw_ms;
    lastrun.s2_minsh = minsh;

    row(cur_sc, "acquisitions, 4 procs", fmtd(b1, sizeof b1, acq, 0), "acq/s",
        fmtd(b2, sizeof b2, target, 0), v_hi(b3, sizeof b3, acq, target));
    row(cur_sc, "lost updates", fmtd(b1, sizeof b1, (double)lost, 0), "", "0",
        lost == 0 ? "ok" : "MISS");
    snprintf(b2, sizeof b2, ">= %.3f", 0.5 * fair);
    row(cur_sc, "smallest share of one proc", fmtd(b1, sizeof b1, minsh, 3),
        "frac", b2, v_hi(b3, sizeof b3, minsh, 0.5 * fair));
    row_fig(cur_sc, "largest share of one proc", maxsh, 3, "frac");
    row_fig(cur_sc, "longest wait in lock()", maxw_ms, 2, "ms");
    row_fig(cur_sc, "mean wait in lock()", meanw_ms, 3, "ms");
    row_fig(cur_sc, "wait in lock() p99 (10us bins)",
            s2_wait_pct(total, 0.99), 2, "ms");
    row_fig(cur_sc, "wait in lock() p99.9", s2_wait_pct(total, 0.999), 2,
            "ms");

    csv_s2_waits(total);
    jstart(&j, cur_sc);
    jint(&j, "procs", P.s2_procs);
    jrate(&j, secs, total, target);
    jint(&j, "final_counter", final);
    jint(&j, "lost_updates", lost);
    jnum(&j, "max_share", maxsh);
    jnum(&j, "min_share", minsh);
    jnum(&j, "min_share_target", 0.5 * fair);
    jnum(&j, "max_wait_ms", maxw_ms);
    jnum(&j, "mean_wait_ms", meanw_ms);
    jnum(&j, "p99_wait_ms", s2_wait_pct(total, 0.99));
    jnum(&j, "p999_wait_ms", s2_wait_pct(total, 0.999));
    jraw(&j, ",\"per_proc\":[");
    for (i = 0; i < P.s2_procs; i++)
        jraw(&j, "%s%lld", i ? "," : "", sh->s2.count[i]);
    jraw(&j, "]");
    jbool(&j, "ok", acq >= target && lost == 0 && minsh >= 0.5 * fair);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* s3: hand-off latency between two processes                               */
/* ------------------------------------------------------------------------ */

/* A holds the lock, B waits in dist_mutex_lock; A's unlock to B's return is
 * the hand-off.  Each round, over two pipes:
 *   A: lock L; send 'G'                (A holds L)
 *   B: read 'G'; send 'R'; lock L      (B about to block)
 *   A: read 'R'; sleep 3 ms + hold (5..105 ms, so B is surely waiting);
 *      t0 = now; unlock L
 *   B: lock returns; t1 = now; unlock L; send 'D'
 *   A: read 'D', next round
 * 'Q' from A ends B.  A few warm-up rounds are not recorded. */
static const char s3_lock[] = "bench-s3";
static int a2b[2], b2a[2];

/* s3 with TLS beside plain (scenario_s3_tls): rounds in chunks of
 * S3_CHUNK, plain and TLS by turns; both processes switch their URL at a
 * chunk's start, and its first S3_CHUNK_WARM rounds (new connections and
 * handshakes, a new subscription) are not counted. */
#define S3_CHUNK      20
#define S3_CHUNK_WARM 3
static int s3_mix;

static int s3_round_tls(int round)
{
    return round >= 0 && (round / S3_CHUNK) % 2 == 1;
}

/* At a chunk's start in the mixed run: this process onto its URL. */
static int s3_switch(int round)
{
    const char *to;
    int rc;

    if (!s3_mix || round < 0 || round % S3_CHUNK != 0)
        return 0;
    to = getenv(s3_round_tls(round) ? "DISTLOCK_BENCH_TLS_URL"
                                    : "DISTLOCK_URL");
    if ((rc = dist_set_url(to)) != 0)
        return dfail("dist_set_url", rc);
    return 0;
}

static int put(int fd, char c)
{
    ssize_t n;

    do
        n = write(fd, &c, 1);
    while (n < 0 && errno == EINTR);
    return n == 1 ? 0 : fail("s3 pipe write: %s", strerror(errno));
}

static int get(int fd, char want)
{
    ssize_t n;
    char c;

    do
        n = read(fd, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return fail("s3 pipe read: %s",
                    n == 0 ? "peer gone" : strerror(errno));
    if (want && c != want)
        return fail("s3 protocol: got '%c', expected '%c'", c, want);
    return c;
}

static int s3_a_loop(struct worker *w)
{
    dist_mutex_t *m = &w->lk.m;
    uint64_t hold_ms;
    int round, rc;

    close(a2b[0]);
    close(b2a[1]);
    for (round = -P.s3_warm; round < P.s3_rounds; round++) {
        if (s3_switch(round) != 0)
            return -1;
        if ((rc = dist_mutex_lock(m)) != 0)
            return dfail("A: dist_mutex_lock", rc);
        if (put(a2b[1], 'G') || get(b2a[0], 'R') < 0)
            return -1;
        hold_ms = 5 + rng_next() % 101;
        sleep_ns((3 + hold_ms) * 1000000ull);
        if (round >= 0)
            sh->s3.t0[round] = now_ns();
        if ((rc = dist_mutex_unlock(m)) != 0)
            return dfail("A: dist_mutex_unlock", rc);
        if (get(b2a[0], 'D') < 0)
            return -1;
    }
    return put(a2b[1], 'Q') ? -1 : 0;
}

static int s3_b_loop(struct worker *w)
{
    dist_mutex_t *m = &w->lk.m;
    uint64_t t1;
    int round, rc, c;

    close(a2b[1]);
    close(b2a[0]);
    for (round = -P.s3_warm;; round++) {
        if ((c = get(a2b[0], 0)) < 0)
            return -1;
        if (c == 'Q')
            break;
        if (c != 'G')
            return fail("s3 protocol: B got '%c'", c);
        if (s3_switch(round) != 0 || put(b2a[1], 'R'))
            return -1;
        rc = dist_mutex_lock(m);
        t1 = now_ns();
        if (rc != 0)
            return dfail("B: dist_mutex_lock", rc);
        if (round >= 0 && round < P.s3_rounds)
            sh->s3.t1[round] = t1;
        if ((rc = dist_mutex_unlock(m)) != 0)
            return dfail("B: dist_mutex_unlock", rc);
        if (put(b2a[1], 'D'))
            return -1;
    }
    return 0;
}

/* ---- the same hand-off without distlock: its lower bounds in this run ---- */

#define RAW_ROUNDS(n) ((n) < 200 ? (n) : 200)

/* A runs a release-like script (delete the hold, publish) after holding as
 * long as S3's A does, since how long B slept changes how long it takes to
 * wake (5-105 ms: 0.5 ms for 2 wake-ups here, 3-5 ms: 0.3 ms); B, blocked
 * on its subscribed connection, then runs an acquire-like script.  200
 * rounds at most.  raw_mode 1:
 * B's waiting thread reads the subscribed socket itself (one wake-up per
 * hand-off: the least any client can do, and what distlock's lone waiter
 * does); 2: a subscriber thread reads it and wakes the waiting thread (two
 * wake-ups, as in distlock with DISTLOCK_DIRECT_WAKE=0).  No distlock
 * call, no library code: what is left is Redis, the kernel and the
 * scheduler. */
static int raw_mode;
static const char raw_lock[] = "bench-s3-raw",
                  raw_chan[] = "bench-s3-raw-chan";
static const char raw_rel[] =
    "redis.call('del', KEYS[1]) return redis.call('publish', KEYS[2], '0')";
static const char raw_acq[] =
    "if redis.call('exists', KEYS[1]) == 1 then return 0 end "
    "redis.call('hset', KEYS[1], ARGV[1], 1) "
    "redis.call('pexpire', KEYS[1], 30000) return 1";

struct raw_sub {
    redisContext *sub;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long msgs;
    int dead;
};

/* SCRIPT LOAD: the SHA1 into sha (41 bytes).  0 or -1. */
static int raw_load(redisContext *c, const char *script, char *sha)
{
    redisReply *r = rcmd(c, "SCRIPT LOAD %s", script);

    if (!r)
        return -1;
    snprintf(sha, 41, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return sha[0] ? 0 : fail("SCRIPT LOAD gave no SHA1");
}

static void *raw_sub_main(void *arg)
{
    struct raw_sub *s = arg;
    void *msg;

    while (redisGetReply(s->sub, &msg) == REDIS_OK) {
        freeReplyObject(msg);
        pthread_mutex_lock(&s->mu);
        s->msgs++;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_lock(&s->mu);
    s->dead = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int raw_a_loop(struct worker *w)
{
    redisContext *c = w->c;
    char sha[41];
    redisReply *r;
    int round;

    close(a2b[0]);
    close(b2a[1]);
    if (raw_load(c, raw_rel, sha) != 0)
        return -1;
    for (round = -P.s3_warm; round < RAW_ROUNDS(P.s3_rounds); round++) {
        if (get(b2a[0], 'R') < 0)
            return -1;
        if (!(r = rcmd(c, "HSET %s a 1", raw_lock)))
            return -1;
        freeReplyObject(r);
        /* as S3's A holds: B is surely blocked, and as idle as there */
        sleep_ns((3 + 5 + rng_next() % 101) * 1000000ull);
        if (round >= 0)
            sh->s3.t0[round] = now_ns();
        if (!(r = rcmd(c, "EVALSHA %s 2 %s %s", sha, raw_lock, raw_chan)))
            return -1;
        freeReplyObject(r);
        if (get(b2a[0], 'D') < 0)
            return -1;
    }
    return 0;
}

static int raw_b_loop(struct worker *w)
{
    struct raw_sub s = { NULL, PTHREAD_MUTEX_INITIALIZER,
                         PTHREAD_COND_INITIALIZER, 0, 0 };
    redisContext *c = w->c;
    pthread_t th;
    char sha[41];
    redisReply *r;
    uint64_t t1;
    long seen = 0;
    int round;
    void *msg;

    close(a2b[1]);
    close(b2a[0]);
    if (!(s.sub = rconnect()) || raw_load(c, raw_acq, sha) != 0)
        return -1;
    if (!(r = rcmd(s.sub, "SUBSCRIBE %s", raw_chan)))
        return -1;
    freeReplyObject(r);
    if (raw_mode == 2 && pthread_create(&th, NULL, raw_sub_main, &s) != 0)
        return fail("pthread_create");
    for (round = -P.s3_warm; round < RAW_ROUNDS(P.s3_rounds); round++) {
        if (put(b2a[1], 'R'))
            return -1;
        if (raw_mode == 1) {
            if (redisGetReply(s.sub, &msg) != REDIS_OK)
                return fail("B: subscribed connection: %s", s.sub->errstr);
            freeReplyObject(msg);
        } else {
            pthread_mutex_lock(&s.mu);
            while (s.msgs == seen && !s.dead)
                pthread_cond_wait(&s.cv, &s.mu);
            seen = s.msgs;
            pthread_mutex_unlock(&s.mu);
            if (s.dead)
                return fail("B: subscribed connection: %s", s.sub->errstr);
        }
        if (!(r = rcmd(c, "EVALSHA %s 1 %s b", sha, raw_lock)))
            return -1;
        t1 = now_ns();
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            freeReplyObject(r);
            return fail("B: the raw acquire found the hold still there");
        }
        freeReplyObject(r);
        if (round >= 0)
            sh->s3.t1[round] = t1;
        if (!(r = rcmd(c, "DEL %s", raw_lock)))
            return -1;
        freeReplyObject(r);
        if (put(b2a[1], 'D'))
            return -1;
    }
    /* closing the subscribed connection ends the subscriber thread */
    shutdown(s.sub->fd, SHUT_RDWR);
    if (raw_mode == 2)
        pthread_join(th, NULL);
    redisFree(s.sub);
    return 0;
}

/* Runs first and second as two worker processes that talk through the
 * a2b and b2a pipes, and waits up to secs for both to end.  0, or -1
 * (said why). */
static int run_pair(worker_loop first, worker_loop second, const char *lock,
                    unsigned opens, double secs)
{
    struct kids k = { 0 };
    int rc;

    if (pipe(a2b) != 0)
        return fail("pipe: %s", strerror(errno));
    if (pipe(b2a) != 0) {
        close(a2b[0]);
        close(a2b[1]);
        return fail("pipe: %s", strerror(errno));
    }
    rc = spawn(&k, first, lock, opens, 0);
    if (rc == 0)
        rc = spawn(&k, second, lock, opens, 0);
    close(a2b[0]);
    close(a2b[1]);
    close(b2a[0]);
    close(b2a[1]);
    if (rc != 0) {
        kids_kill(&k);
        return -1;
    }
    return kids_wait(&k, secs);
}

/* Sorts the n hand-off latencies lat (ns) and gives their p50, p99 and, with
 * mx, their maximum, in ms (0 when there are none). */
static void handoff_ms(uint64_t *lat, int n, double *p50, double *p99,
                       double *mx)
{
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    *p50 = (double)pct(lat, (size_t)n, 0.50) / 1e6;
    *p99 = (double)pct(lat, (size_t)n, 0.99) / 1e6;
    if (mx)
        *mx = n ? (double)lat[n - 1] / 1e6 : 0;
}

/* p50 and p99 (ms) of the raw hand-off in mode; -1 when it failed. */
static int raw_handoff(int mode, double *p50, double *p99)
{
    uint64_t lat[1000];
    int n = 0;

    memset(sh->s3.t0, 0, sizeof sh->s3.t0);
    memset(sh->s3.t1, 0, sizeof sh->s3.t1);
    raw_mode = mode;
    if (run_pair(raw_b_loop, raw_a_loop, NULL, W_REDIS | W_RAW,
                 RAW_ROUNDS(P.s3_rounds) * 0.2 + 60) != 0)
        return -1;
    for (int i = 0; i < RAW_ROUNDS(P.s3_rounds); i++)
        if (sh->s3.t1[i] >= sh->s3.t0[i] && sh->s3.t0[i])
            lat[n++] = sh->s3.t1[i] - sh->s3.t0[i];
    handoff_ms(lat, n, p50, p99, NULL);
    return 0;
}

/* PING round trips on c in a hot loop: their p50 in ms. */
static double ping_p50(redisContext *c)
{
    uint64_t lat[2000], t;
    redisReply *r;

    for (int i = 0; i < 2000; i++) {
        t = now_ns();
        if (!(r = rcmd(c, "PING")))
            return -1;
        lat[i] = now_ns() - t;
        freeReplyObject(r);
    }
    qsort(lat, 2000, sizeof *lat, cmp_u64);
    return (double)pct(lat, 2000, 0.50) / 1e6;
}

/* S3's lower bounds, measured right after it (plain mutex only). */
static void s3_bounds(redisContext *c, double p50)
{
    double ping, p1 = 0, q1 = 0, p2 = 0, q2 = 0;
    char b1[32], b2[32];
    struct jobj j;

    ping = ping_p50(c);
    if (ping < 0 || raw_handoff(1, &p1, &q1) != 0 ||
        raw_handoff(2, &p2, &q2) != 0) {
        report_error("s3-bounds");
        return;
    }
    snprintf(b2, sizeof b2, "<= %.3f", 3 * ping);
    row_fig("s3", "PING p50 (hot loop)", ping, 3, "ms");
    row("s3", "raw hand-off, 1 wake-up: p50", fmtd(b1, sizeof b1, p1, 3),
        "ms", b2, p1 <= 3 * ping ? "ok" : "MISS");
    row("s3", "raw hand-off, 1 wake-up: p99", fmtd(b1, sizeof b1, q1, 3),
        "ms", NULL, NULL);
    row("s3", "raw hand-off, 2 wake-ups: p50", fmtd(b1, sizeof b1, p2, 3),
        "ms", NULL, NULL);
    row("s3", "raw hand-off, 2 wake-ups: p99", fmtd(b1, sizeof b1, q2, 3),
        "ms", NULL, NULL);
    row_fig("s3", "distlock p50 / 1 wake-up p50", p50 / p1, 2, "x");
    jstart(&j, "s3-bounds");
    jnum(&j, "ping_p50_ms", ping);
    jpct(&j, "raw1", p1, q1);
    jpct(&j, "raw2", p2, q2);
    jnum(&j, "distlock_p50_ms", p50);
    jend(&j);
}

static void scenario_s3(redisContext *c)
{
    double tgt_p50 = 4 * fl.p50_us / 1e3, p50, p99, mx;
    uint64_t lat[1000];
    char b1[32], b2[32], b3[32];
    struct jobj j;
    int i, n = 0, early = 0;

    reset_shared();
    del_lock_keys(c, s3_lock);
    if (run_pair(s3_a_loop, s3_b_loop, s3_lock, W_MUTEX,
                 P.s3_rounds * 0.2 + 120) != 0) {
        report_error(cur_sc);
        return;
    }
    del_lock_keys(c, s3_lock);
    for (i = 0; i < P.s3_rounds; i++) {
        if (sh->s3.t1[i] < sh->s3.t0[i])
            early++; /* B had the lock before A let it go */
        else
            lat[n++] = sh->s3.t1[i] - sh->s3.t0[i];
    }
    handoff_ms(lat, n, &p50, &p99, &mx);
    lastrun.s3_p50_ms = p50;

    snprintf(b2, sizeof b2, "<= %.3f", tgt_p50);
    row(cur_sc, "hand-off latency p50", fmtd(b1, sizeof b1, p50, 3), "ms", b2,
        v_lo(b3, sizeof b3, p50, tgt_p50, 0));
    row(cur_sc, "hand-off latency p99", fmtd(b1, sizeof b1, p99, 3), "ms",
        "< 2", v_lo(b3, sizeof b3, p99, 2.0, 1));
    row(cur_sc, "hand-off latency max", fmtd(b1, sizeof b1, mx, 3), "ms",
        "< 50", v_lo(b3, sizeof b3, mx, 50.0, 1));
    row(cur_sc, "acquired before the unlock", fmtd(b1, sizeof b1, early, 0),
        "rounds", "0", early == 0 ? "ok" : "MISS");

    csv_cdf(cur_sc, "handoff_ms_cdf", lat, (size_t)n);
    jstart(&j, cur_sc);
    jint(&j, "handoffs", P.s3_rounds);
    jnum(&j, "p50_ms", p50);
    jnum(&j, "p99_ms", p99);
    jnum(&j, "max_ms", mx);
    jnum(&j, "target_p50_ms", tgt_p50);
    jnum(&j, "target_p99_ms", 2.0);
    jnum(&j, "target_max_ms", 50.0);
    jint(&j, "early", early);
    jbool(&j, "ok", p50 <= tgt_p50 && p99 < 2.0 && mx < 50.0 && early == 0);
    jend(&j);
    if (!bench_fair && !opt.rounds)
        s3_bounds(c, p50);
}

/* p50 of the hand-offs of the rounds of one transport in the mixed run,
 * the warm-up rounds of each chunk left out; *n gets their number. */
static double s3_mixed_p(int tls, double q, int *n)
{
    uint64_t lat[1000];
    int i;

    *n = 0;
    for (i = 0; i < P.s3_rounds && i < 1000; i++)
        if (s3_round_tls(i) == tls && i % S3_CHUNK >= S3_CHUNK_WARM &&
            sh->s3.t1[i] >= sh->s3.t0[i])
            lat[(*n)++] = sh->s3.t1[i] - sh->s3.t0[i];
    qsort(lat, (size_t)*n, sizeof *lat, cmp_u64);
    return (double)pct(lat, (size_t)*n, q) / 1e6;
}

/* S3 over TLS beside S3 plain, in alternate chunks of rounds of one run
 * (the same two processes, the same machine load). */
static void scenario_s3_tls(redisContext *c)
{
    double pp50, pp99, tp50, tp99;
    char b1[32], b2[32];
    struct jobj j;
    int np, nt, rc;

    reset_shared();
    del_lock_keys(c, s3_lock);
    s3_mix = 1; /* read by the two workers */
    rc = run_pair(s3_a_loop, s3_b_loop, s3_lock, W_MUTEX,
                  P.s3_rounds * 0.2 + 120);
    s3_mix = 0;
    if (rc != 0) {
        report_error("s3");
        return;
    }
    del_lock_keys(c, s3_lock);
    pp50 = s3_mixed_p(0, 0.50, &np);
    pp99 = s3_mixed_p(0, 0.99, &np);
    tp50 = s3_mixed_p(1, 0.50, &nt);
    tp99 = s3_mixed_p(1, 0.99, &nt);
    snprintf(b2, sizeof b2, "p99 %.3f", pp99);
    row("s3", "hand-off p50, plain, interleaved with TLS",
        fmtd(b1, sizeof b1, pp50, 3), "ms", b2, NULL);
    snprintf(b2, sizeof b2, "p99 %.3f", tp99);
    row("s3", "hand-off p50, TLS, interleaved with plain",
        fmtd(b1, sizeof b1, tp50, 3), "ms", b2, NULL);
    jstart(&j, "s3_tls");
    jint(&j, "plain_handoffs", np);
    jint(&j, "tls_handoffs", nt);
    jpct(&j, "plain", pp50, pp99);
    jpct(&j, "tls", tp50, tp99);
    jnum(&j, "ratio_tls_plain_p50", pp50 > 0 ? tp50 / pp50 : 0);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* s5: threads of two processes on one lock (lock cohorting)                */
/* ------------------------------------------------------------------------ */

/* Each of s5_procs processes runs s5_threads threads on one mutex, every
 * thread lock+unlock in a loop with a shared-memory counter incremented
 * inside (no Redis call inside: what is measured is how fast the lock goes
 * round).  The counter, a read and a write apart, finds lost updates; the
 * inside count finds overlaps. */
static const char s5_lock[] = "bench-s5";

struct s5_arg {
    dist_mutex_t *m;
    int proc, th;
};

static void *s5_thread(void *p)
{
    struct s5_arg *a = p;
    uint64_t end, t, w, maxw = 0;
    long long count = 0, v;
    int rc;

    end = line_up(&sh->run.go);
    while ((t = now_ns()) < end) {
        if ((rc = dist_mutex_lock(a->m)) != 0) {
            dfail("dist_mutex_lock", rc);
            sh->s5.failed[a->proc] = 1;
            break;
        }
        w = now_ns() - t;
        if (w > maxw)
            maxw = w;
        if (atomic_fetch_add(&sh->s5.inside, 1) != 0)
            atomic_fetch_add(&sh->s5.overlaps, 1);
        v = atomic_load_explicit(&sh->s5.counter, memory_order_relaxed);
        atomic_store_explicit(&sh->s5.counter, v + 1, memory_order_relaxed);
        atomic_fetch_sub(&sh->s5.inside, 1);
        if ((rc = dist_mutex_unlock(a->m)) != 0) {
            dfail("dist_mutex_unlock", rc);
            sh->s5.failed[a->proc] = 1;
            break;
        }
        count++;
    }
    sh->s5.count[a->proc][a->th] = count;
    sh->s5.max_wait_ns[a->proc][a->th] = maxw;
    sh->s5.finish_ns[a->proc][a->th] = now_ns();
    return NULL;
}

static int s5_loop(struct worker *w)
{
    struct s5_arg args[S5_THREADS];
    pthread_t th[S5_THREADS];
    int i, n = 0, idx = w->idx;

    for (i = 0; i < P.s5_threads; i++, n++) {
        args[i] = (struct s5_arg){ &w->lk.m, idx, i };
        if (pthread_create(&th[i], NULL, s5_thread, &args[i]) != 0) {
            fail("s5: pthread_create failed");
            break;
        }
    }
    for (i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    return n == P.s5_threads && !sh->s5.failed[idx] ? 0 : -1;
}

/* Totals over the processes: acquisitions, the smallest process's share,
 * the longest wait, when the last thread finished. */
static long long s5_totals(double *minsh, double *maxw_ms, uint64_t *last)
{
    long long total = 0, per[MAX_PROCS] = { 0 }, mn = -1;
    int p, t;

    *maxw_ms = 0;
    *last = 0;
    for (p = 0; p < P.s5_procs; p++) {
        for (t = 0; t < P.s5_threads; t++) {
            per[p] += sh->s5.count[p][t];
            if (sh->s5.max_wait_ns[p][t] / 1e6 > *maxw_ms)
                *maxw_ms = (double)sh->s5.max_wait_ns[p][t] / 1e6;
            if (sh->s5.finish_ns[p][t] > *last)
                *last = sh->s5.finish_ns[p][t];
        }
        total += per[p];
        if (mn < 0 || per[p] < mn)
            mn = per[p];
    }
    *minsh = total ? (double)mn / (double)total : 0;
    return total;
}

static void scenario_s5(redisContext *c)
{
    double target = 10 * (fl.ops1 / 2), acq, secs, minsh, maxw_ms;
    long long total, lost;
    uint64_t last;
    char b1[32], b3[32], fig[64];
    struct jobj j;

    reset_shared();
    del_lock_keys(c, s5_lock);
    if (run_workers(s5_loop, s5_lock, W_MUTEX | W_WARM, P.s5_procs,
                    P.s5_procs * P.s5_threads, P.s5_s, "s5") != 0) {
        report_error("s5");
        return;
    }
    del_lock_keys(c, s5_lock);
    total = s5_totals(&minsh, &maxw_ms, &last);
    secs = (double)(last - sh->run.go.start_ns) / 1e9;
    acq = (double)total / secs;
    lost = total - atomic_load(&sh->s5.counter);
    lastrun.s5_acq = acq;
    lastrun.s5_maxw_ms = maxw_ms;
    lastrun.s5_minsh = minsh;

    snprintf(fig, sizeof fig, "acquisitions, %dx%d threads%s", P.s5_procs,
             P.s5_threads,
             bench_cohort == 1   ? ", cohort"
             : bench_cohort == 0 ? ", no cohort"
                                 : "");
    row_hi("s5", fig, acq, 0, "acq/s", target);
    row("s5", "lost updates / overlaps", fmtd(b1, sizeof b1, (double)lost, 0),
        "", "0",
        lost == 0 && atomic_load(&sh->s5.overlaps) == 0 ? "ok" : "MISS");
    row("s5", "smaller process's share", fmtd(b1, sizeof b1, minsh, 3),
        "frac", ">= 0.3", v_hi(b3, sizeof b3, minsh, 0.3));
    row("s5", "longest wait in lock()", fmtd(b1, sizeof b1, maxw_ms, 2), "ms",
        "< 50", maxw_ms < 50 ? "ok" : "MISS");

    jstart(&j, "s5");
    jint(&j, "procs", P.s5_procs);
    jint(&j, "threads", P.s5_threads);
    jint(&j, "cohort", bench_cohort);
    jrate(&j, secs, total, target);
    jint(&j, "lost_updates", lost);
    jint(&j, "overlaps", atomic_load(&sh->s5.overlaps));
    jnum(&j, "min_share", minsh);
    jnum(&j, "max_wait_ms", maxw_ms);
    jbool(&j, "ok",
          acq >= target && lost == 0 && minsh >= 0.3 && maxw_ms < 50);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* s6: the herd: many waiters in several processes on one lock              */
/* ------------------------------------------------------------------------ */

/* W threads spread over P processes loop on lock/unlock of one mutex (a
 * shared-memory check inside: no two at once).  Once every thread has made
 * its first call, the parent reads the server's command counts, the
 * workers' dist_stats and every worker thread's context switches, lets
 * --s6-handoffs locks be taken, and reads them all again.  Per hand-off
 * (a lock taken, whoever took it):
 *   - commands sent by clients: the server's counts (INFO commandstats)
 *     of the commands the library sends itself (EVALSHA, EVAL,
 *     (S)(UN)SUBSCRIBE, ROLE, PING, WAIT, ...), apart from the commands
 *     its scripts run;
 *   - release messages heard (dist_stats, exact): each woke a pub/sub
 *     thread, which woke at most one waiting thread (a message wakes one
 *     waiter of its channel) and none when no thread waited on the
 *     channel (pubsub_unwaited: a waiter between two tries), or was read
 *     by a lone waiter itself (pubsub_direct, one wake-up); so the thread
 *     wake-ups releases caused are at most 2 x messages - direct reads -
 *     unwaited ones;
 *   - voluntary context switches of the workers' threads (their monitor
 *     thread left out): every time a thread blocked, for a reply to its
 *     own command or for a release message; and those less the client
 *     commands (releases are not deferred here, so each command is one
 *     wait for its reply).  On a loaded machine a thread is often
 *     preempted rather than blocked, and these read low (below the
 *     commands even): the message counts are the figure to trust.
 * Each of the three is read while the herd runs on, and is divided by the
 * hand-offs counted around its own reading (s6_snapshot).
 * s6f: the same on a fair mutex.  No cohorting, no deferred release. */

#define S6_MAX_SWEEP 8
static int s6_procs[S6_MAX_SWEEP] = { 1, 4, 8, 16 }, s6_nprocs = 4;
static int s6_waiters[S6_MAX_SWEEP] = { 10, 100, 1000 }, s6_nwaiters = 3;
static int s6_handoffs; /* 0: 1,000 (--quick 200) */
static int s6_p, s6_w;  /* the run under way */
static const char s6_lock[] = "bench-s6";
/* a process's threads wait for the start here, not each polling the
 * start line (a thousand threads polling kept the machine busy) */
static pthread_barrier_t s6_bar;

static void *s6_thread(void *arg)
{
    dist_mutex_t *m = arg;
    int rc, first = 1;

    atomic_fetch_add(&sh->s6.go.ready, 1);
    pthread_barrier_wait(&s6_bar);
    atomic_fetch_add(&sh->s6.started, 1);
    while (!atomic_load(&sh->s6.stop)) {
        if ((rc = dist_mutex_lock(m)) != 0) {
            dfail("dist_mutex_lock", rc);
            return (void *)1;
        }
        if (atomic_fetch_add(&sh->s6.inside, 1) != 0)
            atomic_fetch_add(&sh->s6.overlaps, 1);
        atomic_fetch_sub(&sh->s6.inside, 1);
        atomic_fetch_add(&sh->s6.handoffs, 1);
        if (first) {
            first = 0;
            atomic_fetch_add(&sh->s6.turned, 1);
        }
        if ((rc = dist_mutex_unlock(m)) != 0) {
            dfail("dist_mutex_unlock", rc);
            return (void *)1;
        }
    }
    return NULL;
}

/* Answers the parent's requests for the process's dist_stats until the
 * run stops. */
static void *s6_monitor(void *arg)
{
    int idx = (int)(intptr_t)arg;
    struct dist_stats st;

    sh->s6.mon_tid[idx] = (pid_t)syscall(SYS_gettid);
    for (;;) {
        while (sem_wait(&sh->s6.snap_req[idx]) != 0)
            ;
        dist_stats_get(&st);
        sh->s6.messages[idx] = st.pubsub_messages;
        sh->s6.direct[idx] = st.pubsub_direct;
        sh->s6.unwaited[idx] = st.pubsub_unwaited;
        sem_post(&sh->s6.snap_done);
        if (atomic_load(&sh->s6.stop))
            return NULL;
    }
}

static int s6_loop(struct worker *w)
{
    int idx = w->idx, n = s6_w / s6_p + (idx < s6_w % s6_p), i, made = 0;
    pthread_t *th = calloc((size_t)n, sizeof *th), mon;
    pthread_attr_t a;
    void *ret;
    int bad = 0;

    if (!th)
        return fail("s6: out of memory");
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    if (pthread_create(&mon, &a, s6_monitor, (void *)(intptr_t)idx) != 0)
        return fail("s6: pthread_create failed");
    pthread_barrier_init(&s6_bar, NULL, (unsigned)n + 1);
    for (i = 0; i < n; i++, made++)
        if (pthread_create(&th[i], &a, s6_thread, &w->lk.m) != 0) {
            /* the others wait at the barrier for ever: the parent's
             * timeout kills the process */
            fail("s6: pthread_create failed");
            sh->s6.failed[idx] = 1;
            break;
        }
    pthread_attr_destroy(&a);
    while (atomic_load(&sh->s6.go.start_ns) == 0)
        sleep_ns(1000000);
    pthread_barrier_wait(&s6_bar);
    for (i = 0; i < made; i++) {
        pthread_join(th[i], &ret);
        bad |= ret != NULL;
    }
    pthread_join(mon, NULL);
    free(th);
    return bad || sh->s6.failed[idx] ? -1 : 0;
}

/* Voluntary context switches of every thread of the workers but their
 * monitors, now. */
static long long s6_switches(const struct kids *k)
{
    long long sum = 0;
    char path[64], file[320], line[128];
    struct dirent *e;
    int i;

    for (i = 0; i < k->n; i++) {
        DIR *d;
        snprintf(path, sizeof path, "/proc/%d/task", (int)k->pid[i]);
        if (!(d = opendir(path)))
            continue;
        while ((e = readdir(d)) != NULL) {
            FILE *f;
            if (e->d_name[0] == '.' || atoi(e->d_name) == sh->s6.mon_tid[i])
                continue;
            snprintf(file, sizeof file, "/proc/%d/task/%.32s/status",
                     (int)k->pid[i], e->d_name);
            if (!(f = fopen(file, "r")))
                continue;
            while (fgets(line, sizeof line, f))
                if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
                    sum += atoll(line + 24);
            fclose(f);
        }
        closedir(d);
    }
    return sum;
}

/* Whether cmdstat name (up to a '|' or the end) is one the library sends
 * itself rather than one its scripts run. */
static int s6_client_cmd(const char *name, size_t len)
{
    static const char *const sent[] = {
        "eval",      "evalsha",    "eval_ro",     "evalsha_ro",
        "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe",
        "role",      "ping",       "wait",        "select",
        "auth",      "hello",      "client",      "cluster",
        "sentinel",  "asking",     "readonly",    "multi",
        "exec",      "script",
    };
    size_t i;

    for (i = 0; i < sizeof sent / sizeof sent[0]; i++)
        if (strlen(sent[i]) == len && strncmp(sent[i], name, len) == 0)
            return 1;
    return 0;
}

/* The server's command counts: those clients sent and those scripts ran
 * (INFO itself, the parent's, left out).  0, or -1. */
static int s6_cmds(redisContext *c, long long *client, long long *inside)
{
    redisReply *r = rcmd(c, "INFO commandstats");
    const char *p;

    if (!r)
        return -1;
    *client = *inside = 0;
    for (p = r->str; (p = strstr(p, "cmdstat_")) != NULL;) {
        const char *name = p + 8, *calls = strstr(name, ":calls=");
        size_t len = strcspn(name, "|:");
        if (!calls)
            break;
        if (!(len == 4 && strncmp(name, "info", 4) == 0)) {
            if (s6_client_cmd(name, len))
                *client += atoll(calls + 7);
            else
                *inside += atoll(calls + 7);
        }
        p = calls;
    }
    freeReplyObject(r);
    return 0;
}

/* A snapshot: each count with the hand-offs as of its reading (h_*: the
 * mean of the counts before and after it). */
struct s6_snap {
    long long client, inside, switches;
    unsigned long long messages, direct, unwaited;
    long long h_stats, h_cmds, h_switches;
    uint64_t t_ns; /* when the workers' dist_stats were read */
};

/* The hand-offs counted around a reading that began when they were h0:
 * the herd runs on while the parent reads. */
static long long s6_around(long long h0)
{
    return (h0 + atomic_load(&sh->s6.handoffs)) / 2;
}

/* Reads the workers' dist_stats, their threads' switches and the server's
 * command counts, one after the other, each with the hand-offs around it.
 * They used to be divided by the hand-offs around all three, whose
 * middle lay 25 to 115 hand-offs after the dist_stats were read (the
 * scan of a thousand threads' /proc files, then INFO), by a different
 * amount at each end: 1 to 5 % off either way in a run of 1,000, 2.03
 * to 2.06 wake-ups per hand-off read where exactly one message each was
 * heard. */
static int s6_snapshot(redisContext *c, const struct kids *k,
                       struct s6_snap *s)
{
    uint64_t t0 = now_ns();
    long long h0 = atomic_load(&sh->s6.handoffs);
    int i;

    for (i = 0; i < k->n; i++)
        sem_post(&sh->s6.snap_req[i]);
    for (i = 0; i < k->n; i++)
        while (sem_wait(&sh->s6.snap_done) != 0)
            ;
    s->h_stats = s6_around(h0);
    s->t_ns = t0 + (now_ns() - t0) / 2;
    s->messages = s->direct = s->unwaited = 0;
    for (i = 0; i < k->n; i++) {
        s->messages += sh->s6.messages[i];
        s->direct += sh->s6.direct[i];
        s->unwaited += sh->s6.unwaited[i];
    }
    h0 = atomic_load(&sh->s6.handoffs);
    s->switches = s6_switches(k);
    s->h_switches = s6_around(h0);
    h0 = atomic_load(&sh->s6.handoffs);
    if (s6_cmds(c, &s->client, &s->inside) != 0)
        return -1;
    s->h_cmds = s6_around(h0);
    return 0;
}

/* Waits until handoffs locks were taken and started threads made their
 * first call; -1 when a worker failed or nothing moved for 120 s. */
static int s6_await(struct kids *k, long long handoffs, int started)
{
    uint64_t deadline = now_ns() + 120000000000ull;

    while (atomic_load(&sh->s6.handoffs) < handoffs ||
           atomic_load(&sh->s6.started) < started) {
        if (kids_poll(k) != 0 || now_ns() > deadline) {
            if (now_ns() > deadline)
                fail("s6: no progress within 120 s (%lld hand-offs)",
                     (long long)atomic_load(&sh->s6.handoffs));
            kids_kill(k);
            return -1;
        }
        sleep_ns(1000000);
    }
    return 0;
}

/* Waits until every one of w threads took the lock once, or for 10 s at
 * most: a thread past the start line may not have sent its first try
 * yet (a thousand threads on a loaded machine), and its first call's
 * one-time costs (its link's first commands, its channel's SUBSCRIBE)
 * would be counted as the hand-offs'.  A fair queue gives each a turn
 * within a round; a plain mutex need not, hence the bound. */
static int s6_await_turns(struct kids *k, int w)
{
    uint64_t until = now_ns() + 10000000000ull;

    while (atomic_load(&sh->s6.turned) < w && now_ns() < until) {
        if (kids_poll(k) != 0) {
            kids_kill(k);
            return -1;
        }
        sleep_ns(1000000);
    }
    return 0;
}

/* One run: P processes, W waiters.  0 with the figures, or -1. */
static int s6_run(redisContext *c, int p, int w, struct s6_snap *a,
                  struct s6_snap *b)
{
    int h = s6_handoffs ? s6_handoffs : opt.quick ? 200 : 1000, i;
    struct kids k = { 0 };
    uint64_t t0 = now_ns();

    reset_shared();
    for (i = 0; i < p; i++)
        sem_init(&sh->s6.snap_req[i], 1, 0);
    sem_init(&sh->s6.snap_done, 1, 0);
    s6_p = p;
    s6_w = w;
    del_lock_keys(c, s6_lock);
    for (i = 0; i < p; i++)
        if (spawn(&k, s6_loop, s6_lock, W_MUTEX | W_WARM, i) != 0) {
            kids_kill(&k);
            return -1;
        }
    /* a thousand threads take a while to start on a loaded machine */
    while (atomic_load(&sh->s6.go.ready) < w) {
        if (kids_poll(&k) != 0 || now_ns() > t0 + 300000000000ull) {
            kids_kill(&k);
            return fail("s6: %d of %d threads ready after %.0f s",
                        (int)atomic_load(&sh->s6.go.ready), w,
                        (double)(now_ns() - t0) / 1e9);
        }
        sleep_ns(1000000);
    }
    atomic_store(&sh->s6.go.start_ns, now_ns());
    /* every thread in its first call, and the start over: each had a
     * turn, and whatever the first herd subscribed to is let go (pub/sub
     * channels stay subscribed 250 ms after their last waiter) */
    if (s6_await(&k, 0, w) != 0 || s6_await(&k, w + 100, w) != 0 ||
        s6_await_turns(&k, w) != 0)
        return -1;
    sleep_ns(400000000);
    if (s6_await(&k, 0, w) != 0 || s6_snapshot(c, &k, a) != 0 ||
        s6_await(&k, a->h_stats + h, w) != 0 || s6_snapshot(c, &k, b) != 0) {
        kids_kill(&k);
        return -1;
    }
    atomic_store(&sh->s6.stop, 1);
    for (i = 0; i < p; i++)
        sem_post(&sh->s6.snap_req[i]);
    if (kids_wait(&k, 120) != 0)
        return -1;
    if (atomic_load(&sh->s6.overlaps) != 0)
        return fail("s6: %lld overlaps: two threads held the lock at once",
                    (long long)atomic_load(&sh->s6.overlaps));
    del_lock_keys(c, s6_lock);
    return 0;
}

/* A figure of s6's run with p processes and w waiters; with a bound
 * (max > 0), the figure against it, lower better. */
static void s6_row(const char *sc, int p, int w, const char *what, double v,
                   int decimals, const char *unit, double max)
{
    char fig[64], b1[32], b2[32], b3[32];

    snprintf(fig, sizeof fig, "P=%d W=%d %s", p, w, what);
    if (max <= 0) {
        row_fig(sc, fig, v, decimals, unit);
        return;
    }
    snprintf(b2, sizeof b2, "<= %g", max);
    row(sc, fig, fmtd(b1, sizeof b1, v, decimals), unit, b2,
        v_lo(b3, sizeof b3, v, max, 0));
}

static void scenario_s6(redisContext *c)
{
    const char *sc = bench_fair ? "s6f" : "s6";
    struct s6_snap a, b;
    struct jobj j;
    int ip, iw;

    for (iw = 0; iw < s6_nwaiters; iw++)
        for (ip = 0; ip < s6_nprocs; ip++) {
            int p = s6_procs[ip], w = s6_waiters[iw];
            double n, cmds, sw, rate, wk, unw;
            if (p > w || p > MAX_PROCS)
                continue;
            if (s6_run(c, p, w, &a, &b) != 0) {
                report_error(sc);
                return;
            }
            n = (double)(b.h_stats - a.h_stats);
            cmds =
                (double)(b.client - a.client) / (double)(b.h_cmds - a.h_cmds);
            sw = (double)(b.switches - a.switches) /
                 (double)(b.h_switches - a.h_switches);
            rate = n / ((double)(b.t_ns - a.t_ns) / 1e9);
            unw = (double)(b.unwaited - a.unwaited) / n;
            wk = (2.0 * (double)(b.messages - a.messages) -
                  (double)(b.direct - a.direct) -
                  (double)(b.unwaited - a.unwaited)) /
                 n;
            s6_row(sc, p, w, "cmds/hand-off", cmds, 2, "cmds", 4);
            s6_row(sc, p, w, "in scripts/h-o",
                   (double)(b.inside - a.inside) / n, 1, "cmds", 0);
            s6_row(sc, p, w, "switches/h-o", sw, 2, "vcsw", 0);
            s6_row(sc, p, w, "not replies/h-o", sw - cmds, 2, "vcsw", 0);
            s6_row(sc, p, w, "messages/h-o",
                   (double)(b.messages - a.messages) / n, 2, "msgs", 0);
            s6_row(sc, p, w, "no waiter on it/h-o", unw, 2, "msgs", 0);
            s6_row(sc, p, w, "wake-ups/h-o, at most", wk, 2, "threads", 2);
            s6_row(sc, p, w, "hand-offs", rate, 0, "/s", 0);
            jstart(&j, sc);
            jint(&j, "procs", p);
            jint(&j, "waiters", w);
            jint(&j, "handoffs", b.h_stats - a.h_stats);
            jnum(&j, "handoffs_per_s", rate);
            jnum(&j, "client_cmds_per_handoff", cmds);
            jnum(&j, "script_cmds_per_handoff",
                 (double)(b.inside - a.inside) / n);
            jnum(&j, "vcsw_per_handoff", sw);
            jnum(&j, "vcsw_not_replies_per_handoff", sw - cmds);
            jnum(&j, "messages_per_handoff",
                 (double)(b.messages - a.messages) / n);
            jnum(&j, "direct_per_handoff", (double)(b.direct - a.direct) / n);
            jnum(&j, "unwaited_per_handoff", unw);
            jnum(&j, "wakeups_per_handoff_at_most", wk);
            jbool(&j, "ok", cmds <= 4 && wk <= 2);
            jend(&j);
        }
}

/* --s6-procs / --s6-waiters: a list of up to S6_MAX_SWEEP numbers in
 * lo..hi.  0, or -1. */
static int parse_list(const char *s, int *out, int *n, int lo, int hi)
{
    char buf[128], *tok, *save = NULL;

    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int v = atoi(tok);
        if (v < lo || v > hi || *n == S6_MAX_SWEEP)
            return -1;
        out[(*n)++] = v;
    }
    return *n ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* s4: many held locks under the watchdog                                   */
/* ------------------------------------------------------------------------ */

/* PTTL of every lock, pipelined in chunks: the smallest into *min (-3:
 * none read yet), those under half the lease counted in *late (a renewal
 * overdue by half its interval), and all of them in *alive when alive is
 * not NULL.  0, or -1 when Redis failed. */
static int s4_pttls(redisContext *c, char **names, int n, long long *min,
                    long long *late, long long *samples, int *alive)
{
    const int chunk = 1000;
    long long half = (long long)P.s4_watchdog_ms / 2;
    int i, j;

    for (i = 0; i < n; i += chunk) {
        int m = n - i < chunk ? n - i : chunk;
        for (j = 0; j < m; j++)
            redisAppendCommand(c, "PTTL %s", names[i + j]);
        for (j = 0; j < m; j++) {
            redisReply *r;
            void *vr;
            if (redisGetReply(c, &vr) != REDIS_OK)
                return fail("redis: %s", c->errstr);
            r = vr;
            if (r->type == REDIS_REPLY_INTEGER) {
                if (alive && r->integer > 0)
                    (*alive)++;
                if (*min == -3 || r->integer < *min)
                    *min = r->integer;
                if (r->integer < half)
                    (*late)++;
                (*samples)++;
            }
            freeReplyObject(r);
        }
    }
    return 0;
}

static int s4_loop(struct worker *w)
{
    int n = P.s4_locks, i, rc;
    uint64_t interval_ns = (uint64_t)P.s4_watchdog_ms * 1000000ull / 3;
    dist_mutex_t *m, warm;
    struct dist_stats st;
    char **names;
    redisContext *c = w->c;
    long long c0, c1, ignore = 0;
    uint64_t t0, t1, end;

    if ((rc = dist_set_watchdog_ms(P.s4_watchdog_ms)) != 0)
        return dfail("dist_set_watchdog_ms", rc);
    m = calloc((size_t)n, sizeof *m);
    names = calloc((size_t)n + 1, sizeof *names);
    if (!m || !names)
        return fail("out of memory");
    memset(m, 0,
           (size_t)n * sizeof *m); /* the caller's memory: touch it now */
    for (i = 0; i < n; i++) {
        char b[64];
        snprintf(b, sizeof b, "bench-s4-%d", i);
        if (!(names[i] = strdup(b)))
            return fail("out of memory");
    }
    names[n] = "bench-s4-warm";
    del_keys(c, names, n + 1);

    /* One lock taken and given back first, so that the connection and the
     * renewal thread are not counted as the cost of the first lock. */
    if ((rc = dist_mutex_init(&warm, "bench-s4-warm", NULL)) != 0)
        return dfail("dist_mutex_init", rc);
    if ((rc = dist_mutex_lock(&warm)) != 0 ||
        (rc = dist_mutex_unlock(&warm)) != 0)
        return dfail("s4 warm-up lock/unlock", rc);
    dist_mutex_destroy(&warm);

    sh->s4.locks = n;
    sh->s4.rss_before_kb = vmrss_kb();
    t0 = now_ns();
    for (i = 0; i < n; i++)
        if ((rc = dist_mutex_init(&m[i], names[i], NULL)) != 0)
            return dfail("dist_mutex_init", rc);
    t1 = now_ns();
    sh->s4.init_s = (double)(t1 - t0) / 1e9;
    sh->s4.rss_init_kb = vmrss_kb();
    for (i = 0; i < n; i++) {
        if ((rc = dist_mutex_lock(&m[i])) != 0)
            return dfail("dist_mutex_lock", rc);
        sh->s4.taken++;
    }
    sh->s4.lock_s = (double)(now_ns() - t1) / 1e9;
    sh->s4.rss_after_kb = vmrss_kb();
    dist_stats_reset();

    /* the hold: every lock's PTTL read once per renewal interval, the
     * script calls counted around it */
    sh->s4.min_seen_ms = -3;
    if ((c0 = script_calls(c)) < 0)
        return -1;
    t0 = now_ns();
    end = t0 + (uint64_t)(P.s4_hold_s * 1e9);
    for (;;) {
        uint64_t now = now_ns(), next = now + interval_ns;
        if (now >= end)
            break;
        sleep_ns((next < end ? next : end) - now);
        if (now_ns() < end &&
            s4_pttls(c, names, n, &sh->s4.min_seen_ms, &sh->s4.late,
                     &sh->s4.samples, NULL) != 0)
            return -1;
    }
    if ((c1 = script_calls(c)) < 0)
        return -1;
    t1 = now_ns();
    /* the PTTL reads are not scripts: the count is the renewals' alone */
    sh->s4.calls_delta = c1 - c0;
    sh->s4.hold_s = (double)(t1 - t0) / 1e9;
    dist_stats_get(&st);
    sh->s4.renew_failed = st.renew_failed;
    sh->s4.lost = st.lost;

    /* every lock still there with a live lease? */
    sh->s4.min_pttl_ms = -3;
    if (s4_pttls(c, names, n, &sh->s4.min_pttl_ms, &ignore, &ignore,
                 &sh->s4.alive) != 0)
        return -1;

    for (i = 0; i < n; i++) {
        if ((rc = dist_mutex_unlock(&m[i])) == 0)
            sh->s4.unlocked++;
        else if (sh->s4.unlocked == i) /* first failure only */
            fail("dist_mutex_unlock(%s): %s (%s)", names[i], strerror(rc),
                 dist_last_error());
    }
    for (i = 0; i < n; i++)
        dist_mutex_destroy(&m[i]);

    /* the fencing counters stay behind otherwise; deleted before the
     * frame shuts distlock down, as a plain mutex's unlock (deferred or
     * not) never writes them */
    for (i = 0; i <= n; i++) {
        char b[96];
        snprintf(b, sizeof b, "redisson_lock_token:{%s}", names[i]);
        names[i] = strdup(b);
    }
    del_keys(c, names, n + 1);
    return 0;
}

static void scenario_s4(void)
{
    double per_s, tgt, rss_per_lock, rss_init, interval_s;
    char b1[32], b2[32], b3[32];
    struct jobj j;
    int n;

    reset_shared();
    /* a generous bound: the old registry took 154 s for 100,000 inits */
    if (run_in_child(s4_loop, NULL, W_REDIS,
                     P.s4_hold_s + 120 + P.s4_locks * 0.005) != 0 &&
        sh->s4.unlocked == 0) {
        report_error("s4");
        return;
    }
    /* An unlock failure is a result here (the figure "unlocked"), but it is
     * still reported as an error line below. */
    n = sh->s4.locks;
    interval_s = (double)P.s4_watchdog_ms / 3000.0;
    per_s = (double)sh->s4.calls_delta / sh->s4.hold_s;
    /* a renewal round of n holds is ceil(n/100) batches per interval */
    tgt = (double)((n + 99) / 100) / interval_s;
    rss_init =
        (double)(sh->s4.rss_init_kb - sh->s4.rss_before_kb) * 1024.0 / n;
    rss_per_lock =
        (double)(sh->s4.rss_after_kb - sh->s4.rss_before_kb) * 1024.0 / n;

    snprintf(b1, sizeof b1, "%d/%d", sh->s4.alive, n);
    snprintf(b2, sizeof b2, "%d", n);
    row("s4", "keys alive (PTTL>0) after hold", b1, "locks", b2,
        sh->s4.alive == n ? "ok" : "MISS");
    row("s4", "dist_mutex_init, all locks",
        fmtd(b1, sizeof b1, sh->s4.init_s, 3), "s", "< 1 s per 100k",
        v_lo(b3, sizeof b3, sh->s4.init_s, n / 100000.0, 1));
    row("s4", "dist_mutex_init, per call",
        fmtd(b1, sizeof b1, sh->s4.init_s * 1e6 / n, 2), "us", NULL, NULL);
    row("s4", "dist_mutex_lock, per call",
        fmtd(b1, sizeof b1, sh->s4.lock_s * 1e6 / n, 1), "us", NULL, NULL);
    row_fig("s4", "smallest PTTL during hold", (double)sh->s4.min_seen_ms, 0,
            "ms");
    snprintf(b1, sizeof b1, "%lld/%lld", sh->s4.late, sh->s4.samples);
    row("s4", "PTTLs under half the lease", b1, "reads", "0",
        sh->s4.late == 0 ? "ok" : "MISS");
    snprintf(b1, sizeof b1, "%llu/%llu", sh->s4.renew_failed, sh->s4.lost);
    row("s4", "renewals failed / holds lost", b1, "", "0/0",
        sh->s4.renew_failed == 0 && sh->s4.lost == 0 ? "ok" : "MISS");
    row_fig("s4", "smallest PTTL after hold", (double)sh->s4.min_pttl_ms, 0,
            "ms");
    snprintf(b1, sizeof b1, "%d/%d", sh->s4.unlocked, n);
    row("s4", "unlocks returning 0", b1, "locks", b2,
        sh->s4.unlocked == n ? "ok" : "MISS");
    snprintf(b2, sizeof b2, "<= %.0f", tgt);
    row("s4", "renewal script calls", fmtd(b1, sizeof b1, per_s, 2),
        "calls/s", b2, v_lo(b3, sizeof b3, per_s, tgt * 1.01, 0));
    row_fig("s4", "resident memory per lock made", rss_init, 0, "bytes");
    row("s4", "resident memory per held lock",
        fmtd(b1, sizeof b1, rss_per_lock, 0), "bytes", "<= 500",
        v_lo(b3, sizeof b3, rss_per_lock, 500, 0));
    if (sh->errmsg[0])
        report_error("s4");

    jstart(&j, "s4");
    jint(&j, "locks", n);
    jint(&j, "watchdog_ms", (long long)P.s4_watchdog_ms);
    jnum(&j, "init_s", sh->s4.init_s);
    jnum(&j, "init_us_per_call", sh->s4.init_s * 1e6 / n);
    jnum(&j, "lock_s", sh->s4.lock_s);
    jnum(&j, "hold_s", sh->s4.hold_s);
    jint(&j, "alive", sh->s4.alive);
    jint(&j, "min_pttl_ms", sh->s4.min_pttl_ms);
    jint(&j, "min_pttl_seen_ms", sh->s4.min_seen_ms);
    jint(&j, "late", sh->s4.late);
    jint(&j, "pttl_samples", sh->s4.samples);
    jint(&j, "renew_failed", (long long)sh->s4.renew_failed);
    jint(&j, "lost", (long long)sh->s4.lost);
    jint(&j, "unlocked", sh->s4.unlocked);
    jint(&j, "script_calls", sh->s4.calls_delta);
    jnum(&j, "script_calls_per_s", per_s);
    jnum(&j, "renew_interval_s", interval_s);
    jnum(&j, "target_calls_per_s", tgt);
    jnum(&j, "ratio", per_s / tgt);
    jint(&j, "rss_before_kb", sh->s4.rss_before_kb);
    jint(&j, "rss_init_kb", sh->s4.rss_init_kb);
    jint(&j, "rss_after_kb", sh->s4.rss_after_kb);
    jnum(&j, "rss_per_lock_made_bytes", rss_init);
    jnum(&j, "rss_per_lock_bytes", rss_per_lock);
    jnum(&j, "rss_target_bytes", 500);
    jbool(&j, "ok",
          sh->s4.alive == n && sh->s4.unlocked == n && sh->s4.late == 0 &&
              per_s <= tgt * 1.01 && rss_per_lock <= 500 &&
              sh->s4.init_s < n / 100000.0);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* rw: a read-heavy load on one read-write lock                             */
/* ------------------------------------------------------------------------ */

/* Each of 4 processes loops: 9 times in 10 a read (rdlock, GET the counter
 * twice, the two values must agree, unlock), else a write (wrlock, GET,
 * SET +1, unlock).  The choice comes from a per-process xorshift, so runs
 * are alike.  Lost updates (writes the counter does not show) and torn
 * reads (a write inside a read hold) must both be 0. */
static const char rw_lock[] = "bench-rw";
static const char rw_counter[] = "bench-rw-counter";

static void del_rw_keys(redisContext *c)
{
    char k[4][96];
    char *keys[5] = { k[0], k[1], k[2], k[3], (char *)rw_counter };

    snprintf(k[0], sizeof k[0], "%s", rw_lock);
    snprintf(k[1], sizeof k[1], "redisson_lock_token:{%s}", rw_lock);
    snprintf(k[2], sizeof k[2], "distlock_rwlock_readers:{%s}", rw_lock);
    snprintf(k[3], sizeof k[3], "distlock_rwlock_writers:{%s}", rw_lock);
    del_keys(c, keys, 5);
}

static int rw_get(redisContext *c, long long *v)
{
    redisReply *r = rcmd(c, "GET %s", rw_counter);

    if (!r)
        return -1;
    *v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return 0;
}

static int rw_loop(struct worker *wk)
{
    redisContext *c = wk->c;
    dist_rwlock_t *rw = &wk->lk.rw;
    int rc, idx = wk->idx;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1);
    uint64_t t, w, maxr = 0, maxw = 0;
    long long reads = 0, writes = 0, torn = 0, v1, v2;
    redisReply *r;

    while ((t = now_ns()) < wk->end) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (rng % 10 == 0) {
            if ((rc = dist_rwlock_wrlock(rw)) != 0)
                return dfail("dist_rwlock_wrlock", rc);
            if ((w = now_ns() - t) > maxw)
                maxw = w;
            if (rw_get(c, &v1) != 0)
                return -1;
            if (!(r = rcmd(c, "SET %s %lld", rw_counter, v1 + 1)))
                return -1;
            freeReplyObject(r);
            writes++;
        } else {
            if ((rc = dist_rwlock_rdlock(rw)) != 0)
                return dfail("dist_rwlock_rdlock", rc);
            if ((w = now_ns() - t) > maxr)
                maxr = w;
            if (rw_get(c, &v1) != 0 || rw_get(c, &v2) != 0)
                return -1;
            torn += v1 != v2;
            reads++;
        }
        if ((rc = dist_rwlock_unlock(rw)) != 0)
            return dfail("dist_rwlock_unlock", rc);
    }
    sh->rw.reads[idx] = reads;
    sh->rw.writes[idx] = writes;
    sh->rw.torn[idx] = torn;
    sh->rw.max_rwait_ns[idx] = maxr;
    sh->rw.max_wwait_ns[idx] = maxw;
    return 0;
}

static void scenario_rw(redisContext *c)
{
    long long reads = 0, writes = 0, torn = 0, final = 0, lost;
    double secs, ops, rfrac, maxr_ms = 0, maxw_ms = 0;
    char b1[32];
    struct jobj j;
    redisReply *r;
    int i;

    reset_shared();
    del_rw_keys(c);
    if (run_workers(rw_loop, rw_lock, W_REDIS | W_RWLOCK | W_WARM | W_TIMED,
                    P.rw_procs, P.rw_procs, P.rw_s, "rw") != 0 ||
        !(r = rcmd(c, "GET %s", rw_counter))) {
        del_rw_keys(c);
        report_error("rw");
        return;
    }
    final = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    del_rw_keys(c);

    for (i = 0; i < P.rw_procs; i++) {
        reads += sh->rw.reads[i];
        writes += sh->rw.writes[i];
        torn += sh->rw.torn[i];
        if ((double)sh->rw.max_rwait_ns[i] / 1e6 > maxr_ms)
            maxr_ms = (double)sh->rw.max_rwait_ns[i] / 1e6;
        if ((double)sh->rw.max_wwait_ns[i] / 1e6 > maxw_ms)
            maxw_ms = (double)sh->rw.max_wwait_ns[i] / 1e6;
    }
    secs = run_secs(P.rw_procs);
    ops = (double)(reads + writes) / secs;
    rfrac = reads + writes ? (double)reads / (double)(reads + writes) : 0;
    lost = writes - final;

    row("rw", "ops, 4 procs, 90% reads", fmtd(b1, sizeof b1, ops, 0), "ops/s",
        NULL, NULL);
    row_fig("rw", "reads", (double)reads / secs, 0, "ops/s");
    row_fig("rw", "writes", (double)writes / secs, 0, "ops/s");
    row_fig("rw", "read share", rfrac, 3, "frac");
    row("rw", "lost updates", fmtd(b1, sizeof b1, (double)lost, 0), "", "0",
        lost == 0 ? "ok" : "MISS");
    row("rw", "torn reads", fmtd(b1, sizeof b1, (double)torn, 0), "", "0",
        torn == 0 ? "ok" : "MISS");
    row_fig("rw", "longest wait in rdlock()", maxr_ms, 2, "ms");
    row_fig("rw", "longest wait in wrlock()", maxw_ms, 2, "ms");

    jstart(&j, "rw");
    jint(&j, "procs", P.rw_procs);
    jnum(&j, "seconds", secs);
    jint(&j, "reads", reads);
    jint(&j, "writes", writes);
    jnum(&j, "ops_per_s", ops);
    jnum(&j, "reads_per_s", (double)reads / secs);
    jnum(&j, "writes_per_s", (double)writes / secs);
    jnum(&j, "read_share", rfrac);
    jint(&j, "final_counter", final);
    jint(&j, "lost_updates", lost);
    jint(&j, "torn_reads", torn);
    jnum(&j, "max_rdlock_wait_ms", maxr_ms);
    jnum(&j, "max_wrlock_wait_ms", maxw_ms);
    jbool(&j, "ok", lost == 0 && torn == 0);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* cv: ping-pong through one mutex and two condition variables              */
/* ------------------------------------------------------------------------ */

static const char cv_lock[] = "bench-cv";
static const char *const cv_conds[2] = { "{bench-cv}:a", "{bench-cv}:b" };

static void del_cv_keys(redisContext *c)
{
    static const char *const fmt[] = {
        "distlock_cond_waiters:%s",
        "distlock_cond_queue:%s",
        "distlock_cond_signalled:%s",
    };
    char k[8][64], *keys[8];
    int i, n = 0;

    for (i = 0; i < 6; i++) {
        snprintf(k[n], sizeof k[n], fmt[i % 3], cv_conds[i / 3]);
        keys[n] = k[n];
        n++;
    }
    del_keys(c, keys, n);
    del_lock_keys(c, cv_lock);
}

/* Side me of the ping-pong: waits for its turn, hands it over, signals.
 * Its three objects are its own (the mutex with the library's defaults). */
static int cv_loop(struct worker *w)
{
    dist_mutex_t m;
    dist_cond_t mine, theirs;
    int round, rc, me = w->idx;

    if ((rc = dist_mutex_init(&m, cv_lock, NULL)) != 0 ||
        (rc = dist_cond_init(&mine, cv_conds[me], NULL)) != 0 ||
        (rc = dist_cond_init(&theirs, cv_conds[1 - me], NULL)) != 0)
        return dfail("cv init", rc);
    for (round = 0; round < P.cv_rounds; round++) {
        if ((rc = dist_mutex_lock(&m)) != 0)
            return dfail("cv: dist_mutex_lock", rc);
        while (atomic_load(&sh->cv.turn) != me)
            if ((rc = dist_cond_wait(&mine, &m)) != 0)
                return dfail("cv: dist_cond_wait", rc);
        if (me == 1)
            sh->cv.t1[round] = now_ns();
        else
            sh->cv.t0[round] = now_ns();
        atomic_store(&sh->cv.turn, 1 - me);
        if ((rc = dist_cond_signal(&theirs)) != 0)
            return dfail("cv: dist_cond_signal", rc);
        if ((rc = dist_mutex_unlock(&m)) != 0)
            return dfail("cv: dist_mutex_unlock", rc);
    }
    dist_cond_destroy(&mine);
    dist_cond_destroy(&theirs);
    dist_mutex_destroy(&m);
    return 0;
}

static void scenario_cv(redisContext *c)
{
    uint64_t lat[2000];
    struct kids k = { 0 };
    long long c0, c1;
    double p50, p99, mx, secs, per;
    uint64_t t0;
    struct jobj j;
    int i, n = 0;

    reset_shared();
    del_cv_keys(c);
    if ((c0 = script_calls(c)) < 0) {
        report_error("cv");
        return;
    }
    t0 = now_ns();
    if (spawn(&k, cv_loop, NULL, 0, 0) != 0 ||
        spawn(&k, cv_loop, NULL, 0, 1) != 0) {
        kids_kill(&k);
        report_error("cv");
        return;
    }
    if (kids_wait(&k, P.cv_rounds * 0.1 + 120) != 0) {
        report_error("cv");
        return;
    }
    secs = (double)(now_ns() - t0) / 1e9;
    c1 = script_calls(c);
    del_cv_keys(c);
    /* 0's signal in round i hands the turn to 1's wait of round i */
    for (i = 0; i < P.cv_rounds; i++)
        if (sh->cv.t1[i] >= sh->cv.t0[i])
            lat[n++] = sh->cv.t1[i] - sh->cv.t0[i];
    handoff_ms(lat, n, &p50, &p99, &mx);
    per = c1 >= c0 ? (double)(c1 - c0) / (2.0 * P.cv_rounds) : -1;
    csv_cdf("cv", "handoff_ms_cdf", lat, (size_t)n);

    row_fig("cv", "hand-offs (2 procs)", 2.0 * P.cv_rounds / secs, 0, "/s");
    row_fig("cv", "hand-off latency p50", p50, 3, "ms");
    row_fig("cv", "hand-off latency p99", p99, 3, "ms");
    row_fig("cv", "hand-off latency max", mx, 3, "ms");
    row_fig("cv", "scripts per hand-off", per, 2, "calls");
    jstart(&j, "cv");
    jint(&j, "rounds", P.cv_rounds);
    jnum(&j, "handoffs_per_s", 2.0 * P.cv_rounds / secs);
    jnum(&j, "p50_ms", p50);
    jnum(&j, "p99_ms", p99);
    jnum(&j, "max_ms", mx);
    jnum(&j, "scripts_per_handoff", per);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* sem: processes taking and giving back the permits of a semaphore         */
/* ------------------------------------------------------------------------ */

static const char sem_name[] = "bench-sem";

static void del_sem_keys(redisContext *c)
{
    char k1[64], k2[64], k3[64];
    char *keys[3] = { k1, k2, k3 };

    snprintf(k1, sizeof k1, "distlock_sem:{%s}", sem_name);
    snprintf(k2, sizeof k2, "distlock_sem_holds:{%s}", sem_name);
    snprintf(k3, sizeof k3, "distlock_sem_leases:{%s}", sem_name);
    del_keys(c, keys, 3);
}

static int sem_loop(struct worker *w)
{
    dist_sem_t *s = &w->lk.s;
    int rc, now, seen;

    while (now_ns() < w->end) {
        if ((rc = dist_sem_wait(s)) != 0)
            return dfail("dist_sem_wait", rc);
        now = atomic_fetch_add(&sh->sem.holding, 1) + 1;
        seen = atomic_load(&sh->sem.max_holding);
        while (now > seen && !atomic_compare_exchange_weak(
                                 &sh->sem.max_holding, &seen, now))
            ;
        atomic_fetch_sub(&sh->sem.holding, 1);
        if ((rc = dist_sem_post(s)) != 0)
            return dfail("dist_sem_post", rc);
        sh->sem.count[w->idx]++;
    }
    return 0;
}

static void scenario_sem(redisContext *c)
{
    long long total = 0;
    double secs, rate;
    char b1[32], b2[32];
    struct jobj j;
    int i, maxh;

    reset_shared();
    del_sem_keys(c);
    if (run_workers(sem_loop, sem_name, W_SEM | W_TIMED, P.sem_procs,
                    P.sem_procs, P.sem_s, "sem") != 0) {
        report_error("sem");
        return;
    }
    del_sem_keys(c);
    for (i = 0; i < P.sem_procs; i++)
        total += sh->sem.count[i];
    secs = run_secs(P.sem_procs);
    rate = (double)total / secs;
    maxh = atomic_load(&sh->sem.max_holding);
    snprintf(b2, sizeof b2, "<= %d", P.sem_permits);
    row("sem", "wait+post, 4 procs, 2 permits", fmtd(b1, sizeof b1, rate, 0),
        "pairs/s", NULL, NULL);
    row("sem", "most holders at once", fmtd(b1, sizeof b1, maxh, 0), "", b2,
        maxh <= P.sem_permits ? "ok" : "MISS");
    jstart(&j, "sem");
    jint(&j, "procs", P.sem_procs);
    jint(&j, "permits", P.sem_permits);
    jnum(&j, "pairs_per_s", rate);
    jint(&j, "max_holders", maxh);
    jbool(&j, "ok", maxh <= P.sem_permits);
    jend(&j);
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* fq: a fair queue at scale                                                */
/* ------------------------------------------------------------------------ */

/* W waiters (threads) in FQ_PROCS processes queue on one lock that another
 * process holds.  Idle: what the herd that merely waits costs Redis, every
 * command counted (scripts' own commands too: INFO commandstats), and its
 * CPU.  Then the holder lets go and the waiters take the lock in turn,
 * each taking it again at once: hand-offs per second until FQ_HANDOFFS,
 * Redis commands per hand-off, and lock calls that failed (EIO: Redis too
 * slow under the library's own load).  The same herd of plain mutexes is
 * measured beside it, for the ratio fair / plain. */
#define FQ_PROCS 8
#define FQ_NW    3
#define FQ_STACK (256 * 1024)
static const int fq_ws[FQ_NW] = { 10, 100, 1000 };
static const char fq_lock[] = "bench-fq";

struct fq_figs {
    double idle_cmds_s, idle_cpu, handoffs_s, cmds_handoff;
    long long eio, errors;
};

static struct fq_figs fq_res[2][FQ_NW]; /* [fair][w] */

/* Calls of every command so far but INFO (ours); -1 on failure. */
static long long fq_calls(redisContext *c)
{
    redisReply *r = rcmd(c, "INFO commandstats");
    long long sum = 0;
    const char *p;

    if (!r)
        return -1;
    for (p = r->str; (p = strstr(p, "cmdstat_")) != NULL; p++) {
        const char *calls = strstr(p, ":calls=");
        if (calls && strncmp(p, "cmdstat_info:", 13) != 0)
            sum += atoll(calls + 7);
    }
    freeReplyObject(r);
    return sum;
}

/* Redis's CPU seconds (user + system) so far; -1 on failure. */
static double fq_cpu(redisContext *c)
{
    redisReply *r = rcmd(c, "INFO cpu");
    char u[64], s[64];
    double v = -1;

    if (!r)
        return -1;
    if (info_field(r->str, "used_cpu_user", u, sizeof u) == 0 &&
        info_field(r->str, "used_cpu_sys", s, sizeof s) == 0)
        v = atof(u) + atof(s);
    freeReplyObject(r);
    return v;
}

static int fq_holder_loop(struct worker *w)
{
    int rc;

    if ((rc = dist_mutex_lock(&w->lk.m)) != 0)
        return dfail("fq holder: dist_mutex_lock", rc);
    atomic_store(&sh->fq.held, 1);
    while (!atomic_load(&sh->fq.release))
        sleep_ns(1000000);
    if ((rc = dist_mutex_unlock(&w->lk.m)) != 0)
        return dfail("fq holder: dist_mutex_unlock", rc);
    return 0;
}

static void *fq_thread(void *arg)
{
    dist_mutex_t *m = arg;
    long long n;
    int rc;

    atomic_fetch_add(&sh->fq.queued, 1);
    for (;;) {
        if ((rc = dist_mutex_lock(m)) != 0) {
            if (rc == EIO)
                atomic_fetch_add(&sh->fq.eio, 1);
            if (atomic_fetch_add(&sh->fq.errors, 1) == 0)
                dfail("fq: dist_mutex_lock", rc);
            if (atomic_load(&sh->fq.handoffs) >= sh->fq.target)
                return NULL;
            sleep_ns(10000000);
            continue;
        }
        n = atomic_load(&sh->fq.release)
                ? atomic_fetch_add(&sh->fq.handoffs, 1) + 1
                : 0;
        if (n == sh->fq.target)
            atomic_store(&sh->fq.done_ns, now_ns());
        if ((rc = dist_mutex_unlock(m)) != 0 &&
            atomic_fetch_add(&sh->fq.errors, 1) == 0)
            dfail("fq: dist_mutex_unlock", rc);
        if (n >= sh->fq.target)
            return NULL;
    }
}

static int fq_waiters_loop(struct worker *w)
{
    int idx = w->idx, i;
    int nt = sh->fq.w / FQ_PROCS + (idx < sh->fq.w % FQ_PROCS);
    pthread_t *th = calloc((size_t)nt + 1, sizeof *th);
    pthread_attr_t a;

    if (!th)
        return fail("out of memory");
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, FQ_STACK);
    for (i = 0; i < nt; i++)
        if (pthread_create(&th[i], &a, fq_thread, &w->lk.m) != 0)
            return fail("pthread_create: %s", strerror(errno));
    for (i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&a);
    free(th);
    return 0;
}

static void fq_del_keys(redisContext *c)
{
    char k[5][256];
    char *keys[5] = { k[0], k[1], k[2], k[3], k[4] };

    snprintf(k[0], sizeof k[0], "%s", fq_lock);
    snprintf(k[1], sizeof k[1], "redisson_lock_token:{%s}", fq_lock);
    snprintf(k[2], sizeof k[2], "redisson_lock_queue:{%s}", fq_lock);
    snprintf(k[3], sizeof k[3], "redisson_lock_timeout:{%s}", fq_lock);
    snprintf(k[4], sizeof k[4], "distlock_fair_waiters:{%s}", fq_lock);
    del_keys(c, keys, 5);
}

/* Waits until cond holds (polled every 10 ms) for at most secs; 0 or -1. */
static int fq_until(struct kids *k, int (*cond)(redisContext *),
                    redisContext *c, double secs, const char *what)
{
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9);

    while (!cond(c)) {
        if (kids_poll(k) != 0 || now_ns() > end) {
            kids_kill(k);
            return fail("fq: %s not within %.0f s", what, secs);
        }
        sleep_ns(10000000);
    }
    return 0;
}

static int fq_held(redisContext *c)
{
    (void)c;
    return atomic_load(&sh->fq.held);
}

/* All waiters are in their lock call, and a fair one's queue is full. */
static int fq_all_queued(redisContext *c)
{
    redisReply *r;
    long long n;

    if (atomic_load(&sh->fq.queued) < sh->fq.w)
        return 0;
    if (!bench_fair)
        return 1;
    if (!(r = rcmd(c, "LLEN redisson_lock_queue:{%s}", fq_lock)))
        return 0;
    n = r->integer;
    freeReplyObject(r);
    return n >= sh->fq.w;
}

static int fq_target_met(redisContext *c)
{
    (void)c;
    return atomic_load(&sh->fq.handoffs) >= sh->fq.target;
}

/* One herd of w waiters; figures into f.  0, or -1 (failure recorded). */
static int fq_run(redisContext *c, int w, struct fq_figs *f)
{
    double idle_s = opt.quick ? 4 : 10, cpu0, cpu1;
    struct kids k = { 0 };
    long long c0, c1, c2;
    uint64_t t0, t1, t2;
    int i;

    memset(&sh->fq, 0, sizeof sh->fq);
    sh->fq.w = w;
    sh->fq.target = opt.quick ? 300 : 1000;
    fq_del_keys(c);
    if (spawn(&k, fq_holder_loop, fq_lock, W_MUTEX, 0) != 0 ||
        fq_until(&k, fq_held, c, 30, "the holder's lock") != 0)
        return -1;
    for (i = 0; i < FQ_PROCS; i++)
        if (spawn(&k, fq_waiters_loop, fq_lock, W_MUTEX, i) != 0) {
            kids_kill(&k);
            return -1;
        }
    if (fq_until(&k, fq_all_queued, c, 120, "every waiter queued") != 0)
        return -1;
    sleep_ns(1000000000ull); /* the joins' renewals settle */
    c0 = fq_calls(c);
    cpu0 = fq_cpu(c);
    t0 = now_ns();
    sleep_ns((uint64_t)(idle_s * 1e9));
    c1 = fq_calls(c);
    cpu1 = fq_cpu(c);
    t1 = now_ns();
    atomic_store(&sh->fq.release, 1);
    if (fq_until(&k, fq_target_met, c, 600, "the hand-offs") != 0)
        return -1;
    c2 = fq_calls(c);
    t2 = atomic_load(&sh->fq.done_ns);
    if (kids_wait(&k, 600) != 0)
        return -1;
    f->idle_cmds_s = (double)(c1 - c0) / ((t1 - t0) / 1e9);
    f->idle_cpu = (cpu1 - cpu0) / ((t1 - t0) / 1e9);
    f->handoffs_s = sh->fq.target / ((t2 - t1) / 1e9);
    f->cmds_handoff = (double)(c2 - c1) / sh->fq.target;
    f->eio = atomic_load(&sh->fq.eio);
    f->errors = atomic_load(&sh->fq.errors);
    fq_del_keys(c);
    return 0;
}

static void scenario_fq(redisContext *c)
{
    static const char *const kind[2] = { "plain", "fair" };
    char fig[64], b1[32], b2[32], b3[32];
    struct jobj j;
    int fair, i;

    for (i = 0; i < FQ_NW; i++) {
        for (fair = 1; fair >= 0; fair--) {
            struct fq_figs *f = &fq_res[fair][i];
            bench_fair = fair;
            reset_shared();
            if (fq_run(c, fq_ws[i], f) != 0) {
                bench_fair = 0;
                report_error("fq");
                return;
            }
            snprintf(fig, sizeof fig, "%s W=%d idle cmds/s", kind[fair],
                     fq_ws[i]);
            row("fq", fig, fmtd(b1, sizeof b1, f->idle_cmds_s, 0), "cmd/s",
                fair ? "< 1000" : NULL,
                fair ? v_lo(b2, sizeof b2, f->idle_cmds_s, 1000, 1) : NULL);
            snprintf(fig, sizeof fig, "%s W=%d idle Redis CPU", kind[fair],
                     fq_ws[i]);
            row("fq", fig, fmtd(b1, sizeof b1, 100 * f->idle_cpu, 1), "%",
                NULL, NULL);
            snprintf(fig, sizeof fig, "%s W=%d hand-offs/s", kind[fair],
                     fq_ws[i]);
            if (fair) {
                row("fq", fig, fmtd(b1, sizeof b1, f->handoffs_s, 0), "1/s",
                    NULL, NULL);
            } else {
                double t = 0.8 * f->handoffs_s;
                snprintf(b3, sizeof b3, "fair >= %.0f", t);
                row("fq", fig, fmtd(b1, sizeof b1, f->handoffs_s, 0), "1/s",
                    b3, v_hi(b2, sizeof b2, fq_res[1][i].handoffs_s, t));
            }
            snprintf(fig, sizeof fig, "%s W=%d cmds/hand-off", kind[fair],
                     fq_ws[i]);
            row("fq", fig, fmtd(b1, sizeof b1, f->cmds_handoff, 1), "cmd",
                NULL, NULL);
            snprintf(fig, sizeof fig, "%s W=%d failed lock calls", kind[fair],
                     fq_ws[i]);
            snprintf(b3, sizeof b3, "%lld", f->errors);
            row("fq", fig, b3, "calls", "0 (EIO: none)",
                f->errors == 0 ? "ok" : "MISS");
            if (opt.json) {
                jstart(&j, "fq");
                jstr(&j, "kind", kind[fair]);
                jint(&j, "waiters", fq_ws[i]);
                jint(&j, "procs", FQ_PROCS);
                jnum(&j, "idle_cmds_per_s", f->idle_cmds_s);
                jnum(&j, "idle_redis_cpu", f->idle_cpu);
                jnum(&j, "handoffs_per_s", f->handoffs_s);
                jnum(&j, "cmds_per_handoff", f->cmds_handoff);
                jint(&j, "eio", f->eio);
                jint(&j, "failed_calls", f->errors);
                jend(&j);
            }
        }
    }
    bench_fair = 0;
}

/* ------------------------------------------------------------------------ */
/* --rounds: scenarios and configurations interleaved, medians              */
/* ------------------------------------------------------------------------ */

/* On a shared machine the round trip drifts by tens of percent within a
 * minute, so figures measured minutes apart say little about each other.
 * Here every wanted scenario runs once per round under each configuration
 * (deferral off and on with --compare), in one order on even rounds and
 * the reverse on odd ones; each ratio is taken within a round and the
 * median over the rounds is reported, with the smallest and largest. */

#define MAX_ROUNDS 99
#define NFIG       3

static const int round_scs[] = { SC_FLOOR, SC_S1, SC_S2, SC_S3, SC_S5 };
#define N_ROUND_SCS ((int)(sizeof round_scs / sizeof round_scs[0]))

/* [scenario index][configuration][round][figure] */
static double rfig[N_ROUND_SCS][2][MAX_ROUNDS][NFIG];
static int rok[N_ROUND_SCS][2][MAX_ROUNDS];
static int rounds_failed;

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Median, smallest and largest of v[0..n) (n > 0; v is sorted). */
static double med3(double *v, int n, double *lo, double *hi)
{
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    *lo = v[0];
    *hi = v[n - 1];
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int wanted(int sc);

static int round_wanted(int i)
{
    return round_scs[i] == SC_FLOOR || wanted(round_scs[i]);
}

/* One run of scenario i under configuration cfg (deferral off/on, or the
 * default without --compare; for s5 cohorting off/on, and on without
 * --compare), its figures noted for round k. */
static void round_run(redisContext *c, int i, int cfg, int k)
{
    double *f = rfig[i][cfg][k];

    bench_defer = opt.compare && round_scs[i] != SC_S5 ? cfg : -1;
    bench_cohort = round_scs[i] != SC_S5 ? -1 : opt.compare ? cfg : 1;
    reset_shared();
    sh->err_claimed = 0;
    any_error = 0;
    switch (round_scs[i]) {
    case SC_FLOOR:
        fl.done = 0;
        scenario_floor(0);
        f[0] = fl.ops1;
        f[1] = fl.p50_us;
        rok[i][cfg][k] = fl.done;
        rounds_failed |= !fl.done;
        return;
    case SC_S1:
        scenario_s1(c);
        f[0] = sh->s1.pairs_per_s;
        f[1] = sh->s1.floor_same;
        f[2] = sh->s1.p50_us;
        break;
    case SC_S2:
        cur_sc = "s2";
        scenario_s2(c);
        f[0] = lastrun.s2_acq;
        f[1] = lastrun.s2_maxw_ms;
        f[2] = lastrun.s2_minsh;
        break;
    case SC_S3:
        cur_sc = "s3";
        scenario_s3(c);
        f[0] = lastrun.s3_p50_ms;
        break;
    case SC_S5:
        scenario_s5(c);
        f[0] = lastrun.s5_acq;
        f[1] = lastrun.s5_maxw_ms;
        f[2] = lastrun.s5_minsh;
        break;
    }
    bench_cohort = -1;
    rok[i][cfg][k] = !any_error;
    rounds_failed |= any_error;
}

/* The ratio a/b of two runs of round k, for each round both ran in. */
static int ratios(int ia, int ca, int fa, int ib, int cb, int fb, double div,
                  double *out)
{
    int k, n = 0;

    for (k = 0; k < opt.rounds; k++)
        if (rok[ia][ca][k] && rok[ib][cb][k] && rfig[ib][cb][k][fb] > 0)
            out[n++] = rfig[ia][ca][k][fa] / (rfig[ib][cb][k][fb] / div);
    return n;
}

static void print_ratio(const char *sc, const char *what, int n, double *v)
{
    char b1[32], b2[64];
    double lo, hi, m;

    if (n == 0) {
        row(sc, what, "-", "ratio", "no round ran both", NULL);
        return;
    }
    m = med3(v, n, &lo, &hi);
    snprintf(b2, sizeof b2, "%.2f..%.2f n=%d", lo, hi, n);
    row(sc, what, fmtd(b1, sizeof b1, m, 2), "ratio", b2, NULL);
}

/* The median of figure fig of scenario i under cfg over the rounds. */
static void print_median(int i, int cfg, int fig, const char *what,
                         const char *unit, int decimals)
{
    double v[MAX_ROUNDS], lo, hi, m;
    char b1[32], b2[64], name[64];
    int k, n = 0;

    for (k = 0; k < opt.rounds; k++)
        if (rok[i][cfg][k])
            v[n++] = rfig[i][cfg][k][fig];
    if (n == 0)
        return;
    m = med3(v, n, &lo, &hi);
    snprintf(name, sizeof name, "%s%s", what,
             round_scs[i] == SC_S5
                 ? (!opt.compare || cfg ? ", cohort" : ", no cohort")
             : !opt.compare || round_scs[i] == SC_FLOOR ? ""
             : cfg                                      ? ", deferred"
                                                        : ", not deferred");
    snprintf(b2, sizeof b2, "%.*f..%.*f n=%d", decimals, lo, decimals, hi, n);
    row(sc_names[round_scs[i]], name, fmtd(b1, sizeof b1, m, decimals), unit,
        b2, NULL);
}

static void rounds_report(void)
{
    double v[MAX_ROUNDS];
    int cfg, ncfg = opt.compare ? 2 : 1;

    printf("# --rounds %d%s: medians over the rounds (target column: "
           "smallest..largest, rounds)\n",
           opt.rounds,
           opt.compare ? " --compare (deferred release off and on; s5: "
                         "cohorting off and on)"
                       : "");
    print_median(0, 0, 0, "EVALSHA, 1 conn", "ops/s", 0);
    for (cfg = 0; cfg < ncfg; cfg++) {
        if (!round_wanted(1))
            break;
        print_median(1, cfg, 0, "lock+unlock pairs", "pairs/s", 0);
        print_ratio("s1",
                    cfg && opt.compare ? "pairs / (floor/2), deferred"
                    : opt.compare      ? "pairs / (floor/2), not deferred"
                                       : "pairs / (floor/2)",
                    ratios(1, cfg, 0, 0, 0, 0, 2, v), v);
    }
    if (opt.compare && round_wanted(1))
        print_ratio("s1", "deferred / not deferred",
                    ratios(1, 1, 0, 1, 0, 0, 1, v), v);
    for (cfg = 0; cfg < ncfg && round_wanted(2); cfg++) {
        print_median(2, cfg, 0, "acquisitions, 4 procs", "acq/s", 0);
        print_median(2, cfg, 1, "longest wait", "ms", 1);
        print_median(2, cfg, 2, "smallest share", "frac", 3);
    }
    if (opt.compare && round_wanted(2))
        print_ratio("s2", "acq/s deferred / not deferred",
                    ratios(2, 1, 0, 2, 0, 0, 1, v), v);
    for (cfg = 0; cfg < ncfg && round_wanted(3); cfg++)
        print_median(3, cfg, 0, "hand-off p50", "ms", 3);
    if (opt.compare && round_wanted(3))
        print_ratio("s3", "p50 deferred / not deferred",
                    ratios(3, 1, 0, 3, 0, 0, 1, v), v);
    for (cfg = 0; cfg < ncfg && round_wanted(4); cfg++) {
        print_median(4, cfg, 0, "acquisitions, 2x8 threads", "acq/s", 0);
        print_ratio("s5",
                    !opt.compare || cfg ? "acq / (floor/2), cohort"
                                        : "acq / (floor/2), no cohort",
                    ratios(4, cfg, 0, 0, 0, 0, 2, v), v);
        print_median(4, cfg, 1, "longest wait", "ms", 1);
        print_median(4, cfg, 2, "smaller process's share", "frac", 3);
    }
    if (opt.compare && round_wanted(4))
        print_ratio("s5", "acq/s cohort / no cohort",
                    ratios(4, 1, 0, 4, 0, 0, 1, v), v);
}

static void run_rounds(redisContext *c)
{
    int order[N_ROUND_SCS * 2][2], n = 0, i, cfg, k, j;

    for (i = 0; i < N_ROUND_SCS; i++)
        for (cfg = 0; cfg < (opt.compare ? 2 : 1); cfg++)
            if (round_wanted(i) && (round_scs[i] != SC_FLOOR || cfg == 0)) {
                order[n][0] = i;
                order[n++][1] = cfg;
            }
    for (k = 0; k < opt.rounds; k++) {
        for (j = 0; j < n; j++) {
            int x = k % 2 ? n - 1 - j : j;
            opt.quiet = 1;
            round_run(c, order[x][0], order[x][1], k);
            opt.quiet = 0;
        }
        fprintf(stderr, "distlock-bench: round %d of %d done\n", k + 1,
                opt.rounds);
    }
    rounds_report();
    any_error = rounds_failed;
}

static void usage(FILE *f)
{
    /* The help text is laid out as printed. */
    /* clang-format off */
    fprintf(f,
"usage: distlock-bench [--json] [--quick] [--only NAME[,NAME...]] [--csv FILE]\n"
"                      [--rounds N] [--compare] [--s4-locks N]\n"
"                      [--s4-watchdog MS] [--s4-hold S] [--s6-procs LIST]\n"
"                      [--s6-waiters LIST] [--s6-handoffs N] [--help]\n"
"\n"
"Measures distlock against the Redis named by DISTLOCK_URL (required), e.g.\n"
"  scripts/with-redis.sh distlock-bench\n"
"\n"
"  --json    one JSON object per line per scenario (s1t: per thread count)\n"
"  --quick   short runs, for smoke tests\n"
"  --only    run only these scenarios: floor,s1,s1t,s2,s3,s4,s2f,s3f,rw,\n"
"            cv,sem,s5,s6,s6f,fq (fq runs only when named)\n"
"            (s2f, s3f, s6f: s2, s3 and s6 on a fair mutex)\n"
"            (floor is measured too when a chosen one's target needs it)\n"
"  --csv FILE  also write the distributions to FILE as CSV rows\n"
"            scenario,series,x,y: hand-off latencies of s3, s3f and cv and\n"
"            lock() waits of s2 and s2f (series handoff_ms_cdf, wait_ms_cdf:\n"
"            x ms, y the fraction at or below x), s1t's pairs/s by thread\n"
"            count (pairs_per_s); bench/plot.sh draws them\n"
"  --rounds N  interleaved mode: floor and the chosen ones of s1, s2, s3,\n"
"            s5 (all five without --only) run once per round, in alternating\n"
"            order; medians over the rounds, and ratios taken within a round\n"
"            (the only figures worth comparing on a shared machine)\n"
"  --compare each of them with deferred release off and on (s5: lock\n"
"            cohorting off and on), side by side, and the ratio on/off\n"
"            (implies --rounds 3 unless given)\n"
"  --s4-locks N, --s4-watchdog MS, --s4-hold S  s4's size: locks held\n"
"            (1,000; --quick 100), watchdog lease (3000 ms), hold (10 s;\n"
"            --quick 3 s); e.g. 100000, 30000, 30 for S4 at scale\n"
"  --s6-procs LIST, --s6-waiters LIST, --s6-handoffs N  s6's sweep:\n"
"            processes (1,4,8,16), waiters in all (10,100,1000), hand-offs\n"
"            measured per run (1,000; --quick 200)\n"
"  --help    this text\n"
"\n"
"Scenarios:\n"
"  floor  EVALSHA of hincrby+pexpire: 1 connection (ops/s, p50) and\n"
"         50 connections in 50 threads (aggregate ops/s)\n"
"  s1     1 thread, 1 lock, lock+unlock pairs   target 0.85 x floor1/2\n"
"         with DISTLOCK_BENCH_TLS_URL (rediss:// to the same server): also\n"
"         plain and TLS pairs in alternate chunks  target TLS 0.8 x plain\n"
"  s1t    T = 1,2,4,8,16 threads, a lock each    target(T=16) 0.7 x floor50/2\n"
"  s2     4 processes, 1 lock guarding GET/SET of a counter\n"
"         target acq/s >= 0.7 x floor1/4, 0 lost updates, min share >= 0.125\n"
"  s3     hand-off from unlock in one process to lock in another\n"
"         target p50 <= 4 x floor p50, p99 < 2 ms, max < 50 ms; then\n"
"         PING p50 and the same hand-off in raw hiredis, the waiting thread\n"
"         reading the subscribed socket (1 wake-up) or woken by a subscriber\n"
"         thread (2), as its lower bounds in the same run\n"
"  s4     1,000 watchdog locks made, taken and held 10 s with a 3 s lease:\n"
"         time per dist_mutex_init (target: 100,000 in < 1 s), every PTTL\n"
"         read each renewal interval (none under half the lease), all still\n"
"         held, <= ceil(N/100) renewal script calls per interval (a third\n"
"         of the lease), <= 500 B RSS per held lock\n"
"  rw     4 processes on 1 read-write lock, 5 s: 90%% reads (rdlock, GET the\n"
"         counter twice, unlock), 10%% writes (wrlock, GET, SET +1, unlock);\n"
"         ops/s and the split; 0 lost updates, 0 torn reads\n"
"  cv     2 processes ping-pong through 1 mutex and 2 condition variables:\n"
"         hand-offs/s, signal -> the other's wait returning p50/p99/max,\n"
"         script calls per hand-off\n"
"  sem    4 processes wait+post on a leased semaphore of 2 permits, 5 s:\n"
"         pairs/s; never more than 2 holders\n"
"  s5     2 processes of 8 threads each on 1 mutex, 5 s, a shared-memory\n"
"         counter inside; cohort mutexes (dist_mutexattr_setcohort) unless\n"
"         --compare also runs them without   target acq/s >= 10 x floor1/2,\n"
"         smaller process's share >= 0.3, longest wait < 50 ms, 0 lost\n"
"  fq     W = 10, 100, 1000 waiters in 8 processes on 1 fair mutex held by\n"
"         another process: Redis commands/s (scripts' own counted) while\n"
"         they wait (target < 1000), then 1000 hand-offs (--quick 300):\n"
"         hand-offs/s (target 0.8 x plain mutexes'), commands per hand-off,\n"
"         0 failed lock calls; the same herd of plain mutexes beside it\n"
"  s6     the herd: W threads spread over P processes loop on lock/unlock\n"
"         of 1 mutex (no cohorting), for each P and W of the sweep; per\n"
"         hand-off: commands clients sent (INFO commandstats, those the\n"
"         library sends itself)   target <= 4; commands scripts ran;\n"
"         voluntary context switches of the workers' threads, and those\n"
"         less the commands; release messages heard, those no thread\n"
"         waited on, and the thread wake-ups they caused at most (2 x\n"
"         messages - those a lone waiter read itself - those no thread\n"
"         waited on)   target <= 2; hand-offs/s.  s6f: on a fair mutex\n"
"\n"
"The ratio column is value/target; 'ok' when the target is met.  Missing a\n"
"target does not change the exit status: 1 means a scenario could not run.\n");
    /* clang-format on */
}

static int open_csv(const char *path)
{
    if (opt.csv)
        fclose(opt.csv);
    opt.csv = fopen(path, "w");
    if (!opt.csv) {
        fprintf(stderr, "distlock-bench: --csv %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    /* line-buffered: the workers fork from this process, and a row left
     * in the buffer would be written again by each that exits */
    setvbuf(opt.csv, NULL, _IOLBF, 0);
    fprintf(opt.csv, "scenario,series,x,y\n");
    return 0;
}

static int parse_only(const char *s)
{
    char buf[256], *tok, *save = NULL;
    int i;

    snprintf(buf, sizeof buf, "%s", s);
    for (tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        for (i = 0; i < SC_COUNT; i++)
            if (strcmp(tok, sc_names[i]) == 0)
                break;
        if (i == SC_COUNT) {
            fprintf(
                stderr,
                "distlock-bench: unknown scenario '%s' "
                "(floor,s1,s1t,s2,s3,s4,s2f,s3f,rw,cv,sem,s5,fq,s6,s6f)\n",
                tok);
            return -1;
        }
        opt.only |= 1u << i;
    }
    return opt.only ? 0 : -1;
}

static int wanted(int sc)
{
    return opt.only == 0 || (opt.only & (1u << sc));
}

/* s2 or s3 (run) under the name of sc, on fair mutexes when fair (s2f,
 * s3f), when sc is wanted. */
static void contended(redisContext *c, int sc, void (*run)(redisContext *),
                      int fair)
{
    if (!wanted(sc))
        return;
    cur_sc = sc_names[sc];
    bench_fair = fair;
    run(c);
    bench_fair = 0;
}

int main(int argc, char **argv)
{
    const char *env = getenv("DISTLOCK_URL");
    char why[256], date[64], version[64] = "?";
    redisContext *c;
    redisReply *r;
    struct jobj j;
    double load1 = -1;
    time_t now;
    FILE *f;
    int i, need_floor;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = 1;
        } else if (strcmp(argv[i], "--quick") == 0) {
            opt.quick = 1;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            if (parse_only(argv[++i]) != 0)
                return 2;
        } else if (strncmp(argv[i], "--only=", 7) == 0) {
            if (parse_only(argv[i] + 7) != 0)
                return 2;
        } else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
            if (open_csv(argv[++i]) != 0)
                return 2;
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            opt.rounds = atoi(argv[++i]);
            if (opt.rounds < 1 || opt.rounds > MAX_ROUNDS) {
                fprintf(stderr, "distlock-bench: --rounds wants 1..%d\n",
                        MAX_ROUNDS);
                return 2;
            }
        } else if (strcmp(argv[i], "--compare") == 0) {
            opt.compare = 1;
        } else if (strcmp(argv[i], "--s4-locks") == 0 && i + 1 < argc) {
            s4_locks_opt = atoi(argv[++i]);
            if (s4_locks_opt < 1 || s4_locks_opt > 1000000) {
                fprintf(stderr,
                        "distlock-bench: --s4-locks wants 1..1000000\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--s4-watchdog") == 0 && i + 1 < argc) {
            s4_watchdog_opt = strtoul(argv[++i], NULL, 10);
            if (s4_watchdog_opt < 300 || s4_watchdog_opt > 600000) {
                fprintf(
                    stderr,
                    "distlock-bench: --s4-watchdog wants 300..600000 ms\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--s4-hold") == 0 && i + 1 < argc) {
            s4_hold_opt = atof(argv[++i]);
            if (!(s4_hold_opt >= 1 && s4_hold_opt <= 3600)) {
                fprintf(stderr,
                        "distlock-bench: --s4-hold wants 1..3600 s\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--s6-procs") == 0 && i + 1 < argc) {
            if (parse_list(argv[++i], s6_procs, &s6_nprocs, 1, MAX_PROCS)) {
                fprintf(stderr,
                        "distlock-bench: --s6-procs wants up to %d "
                        "numbers in 1..%d\n",
                        S6_MAX_SWEEP, MAX_PROCS);
                return 2;
            }
        } else if (strcmp(argv[i], "--s6-waiters") == 0 && i + 1 < argc) {
            if (parse_list(argv[++i], s6_waiters, &s6_nwaiters, 1, 5000)) {
                fprintf(stderr,
                        "distlock-bench: --s6-waiters wants up to %d "
                        "numbers in 1..5000\n",
                        S6_MAX_SWEEP);
                return 2;
            }
        } else if (strcmp(argv[i], "--s6-handoffs") == 0 && i + 1 < argc) {
            s6_handoffs = atoi(argv[++i]);
            if (s6_handoffs < 10 || s6_handoffs > 10000000) {
                fprintf(stderr, "distlock-bench: --s6-handoffs wants "
                                "10..10000000\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 ||
                   strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "distlock-bench: unknown argument '%s'\n",
                    argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!env || !*env) {
        fprintf(stderr,
                "distlock-bench: DISTLOCK_URL is not set; point it at "
                "a Redis server (redis://HOST:PORT or unix:///PATH), or run "
                "under scripts/with-redis.sh\n");
        return 2;
    }
    if (parse_url(env, why, sizeof why) != 0) {
        fprintf(stderr, "distlock-bench: DISTLOCK_URL: %s\n", why);
        return 2;
    }
    set_sizes();
    signal(SIGPIPE, SIG_IGN);

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("distlock-bench: mmap");
        return 1;
    }
    reset_shared();
    if (!(c = rconnect())) {
        fprintf(stderr, "distlock-bench: %s\n", sh->errmsg);
        return 1;
    }
    if ((r = rcmd(c, "INFO server")) != NULL) {
        info_field(r->str, "redis_version", version, sizeof version);
        freeReplyObject(r);
    }
    now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", localtime(&now));
    if ((f = fopen("/proc/loadavg", "r")) != NULL) {
        if (fscanf(f, "%lf", &load1) != 1)
            load1 = -1;
        fclose(f);
    }

    if (opt.json) {
        jstart(&j, "info");
        jstr(&j, "date", date);
        jstr(&j, "redis_version", version);
        jint(&j, "nproc", sysconf(_SC_NPROCESSORS_ONLN));
        jnum(&j, "loadavg_1min", load1);
        snprintf(why, sizeof why, "%d.%d.%d", DIST_VERSION_MAJOR,
                 DIST_VERSION_MINOR, DIST_VERSION_PATCH);
        jstr(&j, "distlock_version", why);
        jstr(&j, "url", env);
        jbool(&j, "quick", opt.quick);
        jend(&j);
    } else {
        printf("# distlock-bench %d.%d.%d  %s  redis %s  nproc %ld  "
               "load %.2f  %s%s\n",
               DIST_VERSION_MAJOR, DIST_VERSION_MINOR, DIST_VERSION_PATCH,
               date, version, sysconf(_SC_NPROCESSORS_ONLN), load1, env,
               opt.quick ? "  (--quick)" : "");
        printf("# ratio = value/target; ok = target met (a benchmark: misses "
               "do not fail)\n");
        printf(ROW_FMT, "scen", "figure", "value", "unit", "target",
               "ratio/ok");
        printf(ROW_FMT, "------", "------------------------------",
               "--------------", "--------", "----------------", "--------");
        fflush(stdout);
    }

    if (opt.compare && !opt.rounds)
        opt.rounds = 3;
    if (opt.rounds) {
        run_rounds(c);
        redisFree(c);
        munmap(sh, sizeof *sh);
        return any_error ? 1 : 0;
    }
    need_floor = wanted(SC_FLOOR) || wanted(SC_S1) || wanted(SC_S1T) ||
                 wanted(SC_S2) || wanted(SC_S3) || wanted(SC_S2F) ||
                 wanted(SC_S3F) || wanted(SC_S5);
    if (need_floor) {
        if (!wanted(SC_FLOOR))
            fprintf(stderr, "distlock-bench: measuring floor too (targets "
                            "depend on it)\n");
        scenario_floor(1);
    }
    if (need_floor && !fl.done) {
        fprintf(stderr, "distlock-bench: floor failed; skipping s1..s3\n");
    } else {
        if (wanted(SC_S1))
            scenario_s1(c);
        if (wanted(SC_S1) && getenv("DISTLOCK_BENCH_TLS_URL"))
            scenario_s1_tls(c);
        if (wanted(SC_S1T))
            scenario_s1t(c);
        contended(c, SC_S2, scenario_s2, 0);
        contended(c, SC_S3, scenario_s3, 0);
        if (wanted(SC_S3) && getenv("DISTLOCK_BENCH_TLS_URL"))
            scenario_s3_tls(c);
        contended(c, SC_S2F, scenario_s2, 1);
        contended(c, SC_S3F, scenario_s3, 1);
        if (wanted(SC_S5)) {
            bench_cohort = 1;
            scenario_s5(c);
            bench_cohort = -1;
        }
    }
    if (wanted(SC_S6) || wanted(SC_S6F)) {
        /* the herd's cost without cohorting; releases waited for, so that
         * each command is one wait for its reply (a deferred release's
         * reply is read with the next command's) */
        bench_cohort = 0;
        bench_defer = 0;
        contended(c, SC_S6, scenario_s6, 0);
        contended(c, SC_S6F, scenario_s6, 1);
        bench_cohort = -1;
        bench_defer = -1;
    }
    if (wanted(SC_S4))
        scenario_s4();
    if (wanted(SC_RW))
        scenario_rw(c);
    if (wanted(SC_CV))
        scenario_cv(c);
    if (wanted(SC_SEM))
        scenario_sem(c);
    if (opt.only & (1u << SC_FQ))
        scenario_fq(c);
    redisFree(c);
    munmap(sh, sizeof *sh);
    if (opt.csv && fclose(opt.csv) != 0) {
        perror("distlock-bench: --csv");
        return 1;
    }
    return any_error ? 1 : 0;
}
