/*
 * counter_demo: why a distributed lock.  Several processes, each with several
 * threads, add 1 to a counter kept in Redis by reading it (GET) and writing
 * it back (SET): a read-modify-write that loses updates when two of them
 * interleave.  Run once inside dist_mutex_lock/unlock and once without.
 *
 *   DISTLOCK_URL=redis://127.0.0.1:6379 counter_demo [-p procs] [-t threads] [-n increments]
 *
 * The processes could as well run on different hosts: all they share is the
 * Redis server and the lock's name.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <distlock.h>

#define COUNTER_KEY "distlock-demo:counter"
#define MAX_SAMPLES 100000

/* Shared by all processes of one run (an anonymous MAP_SHARED mapping made
 * before fork).  CLOCK_MONOTONIC is one clock for the whole host, so a time
 * taken in one process can be compared with one taken in another. */
struct shared {
    _Atomic uint64_t released_ns; /* just before the last unlock */
    atomic_uint nsamples;
    atomic_uint failures;
    uint64_t handoff_ns[MAX_SAMPLES];
};

static struct shared *sh;
static int use_lock;
static int increments;

/* The lock: one name, the same in every process.  DIST_MUTEX_INITIALIZER
 * needs no init call; the library connects at first use, in each process. */
static dist_mutex_t counter_lock =
    DIST_MUTEX_INITIALIZER("distlock-demo:lock");

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The demo talks to Redis for its counter through plain hiredis; only the
 * simple URL forms are understood here (the library understands more). */
static redisContext *connect_url(const char *url)
{
    struct timeval tv = { 5, 0 };
    char host[256];
    int port = 6379;

    if (strncmp(url, "unix://", 7) == 0)
        return redisConnectUnixWithTimeout(url + 7, tv);
    if (strncmp(url, "redis://", 8) == 0 &&
        sscanf(url + 8, "%255[^:/]:%d", host, &port) >= 1)
        return redisConnectWithTimeout(host, port, tv);
    return NULL;
}

static long long get_counter(redisContext *c)
{
    redisReply *r = redisCommand(c, "GET %s", COUNTER_KEY);
    long long v = -1;

    if (r && r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    else if (r && r->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(r);
    return v;
}

static int set_counter(redisContext *c, long long v)
{
    redisReply *r = redisCommand(c, "SET %s %lld", COUNTER_KEY, v);
    int ok = r && r->type == REDIS_REPLY_STATUS;

    freeReplyObject(r);
    return ok ? 0 : -1;
}

static void *worker(void *arg)
{
    redisContext *c = connect_url(getenv("DISTLOCK_URL"));
    int i, rc;

    (void)arg;
    if (!c || c->err) {
        fprintf(stderr, "counter_demo: cannot reach Redis\n");
        atomic_fetch_add(&sh->failures, 1);
        if (c)
            redisFree(c);
        return NULL;
    }
    for (i = 0; i < increments; i++) {
        long long v;

        if (use_lock) {
            /* trylock first only to learn whether this acquisition had to
             * wait: a plain program would just call dist_mutex_lock. */
            rc = dist_mutex_trylock(&counter_lock);
            if (rc == EBUSY) {
                rc = dist_mutex_lock(&counter_lock);
                if (rc == 0) {
                    uint64_t t = now_ns(),
                             rel = atomic_load(&sh->released_ns);
                    unsigned n = atomic_fetch_add(&sh->nsamples, 1);
                    if (n < MAX_SAMPLES && rel && t > rel)
                        sh->handoff_ns[n] = t - rel;
                }
            }
            if (rc != 0) {
                fprintf(stderr, "counter_demo: lock: %s (%s)\n", strerror(rc),
                        dist_last_error());
                atomic_fetch_add(&sh->failures, 1);
                break;
            }
        }
        v = get_counter(c);                 /* the critical section:    */
        if (v < 0 || set_counter(c, v + 1)) /* read, then write back    */
            atomic_fetch_add(&sh->failures, 1);
        if (use_lock) {
            atomic_store(&sh->released_ns, now_ns());
            rc = dist_mutex_unlock(&counter_lock);
            if (rc != 0) {
                fprintf(stderr, "counter_demo: unlock: %s (%s)\n",
                        strerror(rc), dist_last_error());
                atomic_fetch_add(&sh->failures, 1);
            }
        }
    }
    redisFree(c);
    return NULL;
}

static int run_process(int threads)
{
    pthread_t th[64];
    int i;

    for (i = 0; i < threads; i++)
        if (pthread_create(&th[i], NULL, worker, NULL) != 0)
            return 1;
    for (i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    dist_shutdown();
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One run: reset the counter, fork the workers, wait, read the result. */
static int run(int procs, int threads, long long *final, double *secs)
{
    redisContext *c = connect_url(getenv("DISTLOCK_URL"));
    uint64_t t0;
    int i, status, bad = 0;

    if (!c || c->err || set_counter(c, 0)) {
        fprintf(stderr, "counter_demo: cannot reach Redis at DISTLOCK_URL\n");
        return -1;
    }
    atomic_store(&sh->released_ns, 0);
    atomic_store(&sh->nsamples, 0);
    atomic_store(&sh->failures, 0);
    t0 = now_ns();
    for (i = 0; i < procs; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return -1;
        }
        if (pid == 0)
            _exit(run_process(threads));
    }
    for (i = 0; i < procs; i++)
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            bad = 1;
    *secs = (double)(now_ns() - t0) / 1e9;
    *final = get_counter(c);
    redisFree(c);
    return bad || atomic_load(&sh->failures) ? -1 : 0;
}

int main(int argc, char **argv)
{
    int procs = 4, threads = 2, opt;
    long long expected, final_locked, final_unlocked;
    double secs_locked, secs_unlocked;
    unsigned n;

    increments = 250;
    while ((opt = getopt(argc, argv, "p:t:n:h")) != -1) {
        switch (opt) {
        case 'p':
            procs = atoi(optarg);
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'n':
            increments = atoi(optarg);
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-p processes] [-t threads] [-n increments]\n"
                    "Redis is taken from DISTLOCK_URL.\n",
                    argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (procs < 1 || procs > 64 || threads < 1 || threads > 64 ||
        increments < 1 || increments > 1000000) {
        fprintf(stderr, "counter_demo: want 1..64 processes, 1..64 threads, "
                        "1..1000000 increments\n");
        return 2;
    }
    if (!getenv("DISTLOCK_URL")) {
        fprintf(
            stderr,
            "counter_demo: set DISTLOCK_URL (e.g. redis://127.0.0.1:6379)\n");
        return 2;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    expected = (long long)procs * threads * increments;
    printf("distlock demo: %d processes x %d threads x %d increments of one "
           "Redis counter (GET, then SET)\n\n",
           procs, threads, increments);

    use_lock = 1;
    if (run(procs, threads, &final_locked, &secs_locked) != 0) {
        fprintf(stderr, "counter_demo: the run with the lock failed\n");
        return 1;
    }
    n = atomic_load(&sh->nsamples);
    if (n > MAX_SAMPLES)
        n = MAX_SAMPLES;
    qsort(sh->handoff_ns, n, sizeof sh->handoff_ns[0], cmp_u64);

    use_lock = 0;
    if (run(procs, threads, &final_unlocked, &secs_unlocked) != 0) {
        fprintf(stderr, "counter_demo: the run without the lock failed\n");
        return 1;
    }

    printf("  with dist_mutex : expected %lld, final %lld, lost %lld\n",
           expected, final_locked, expected - final_locked);
    printf("  without a lock  : expected %lld, final %lld, lost %lld\n\n",
           expected, final_unlocked, expected - final_unlocked);
    printf("  acquisitions/s  : %.0f (%lld in %.2f s, all processes)\n",
           (double)expected / secs_locked, expected, secs_locked);
    if (n > 0)
        printf("  handoff latency : p50 %.3f ms, p99 %.3f ms, max %.3f ms "
               "(unlock -> a waiter's lock returns, %u handoffs)\n",
               sh->handoff_ns[n / 2] / 1e6,
               sh->handoff_ns[(n * 99) / 100] / 1e6,
               sh->handoff_ns[n - 1] / 1e6, n);
    printf("\n%s\n",
           final_locked == expected
               ? "The lock kept every update; without it, concurrent "
                 "read-modify-writes overwrote each other."
               : "UNEXPECTED: updates were lost under the lock.");
    munmap(sh, sizeof *sh);
    return final_locked == expected ? 0 : 1;
}
