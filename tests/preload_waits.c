/*
 * preload_waits: a program with a barrier and conditions for the LD_PRELOAD
 * tests (tests/test_preload_examples.sh).  It knows nothing of distlock:
 * built with -pthread only.
 *
 *   preload_waits barrier ROUNDS   pthread_barrier_init(&g_phase, NULL, 1),
 *                                  then ROUNDS waits: "round I" after each,
 *                                  "serial N" at the end (how many returned
 *                                  PTHREAD_BARRIER_SERIAL_THREAD)
 *   preload_waits waiter FLAG      under g_lock: until FLAG holds "1",
 *                                  pthread_cond_timedwait (60 s, on
 *                                  CLOCK_MONOTONIC) on a condition made by
 *                                  make_ready_cond; "waiting" first, then
 *                                  "woken RC"
 *   preload_waits waker FLAG       under g_lock: writes "1" to FLAG and
 *                                  broadcasts that condition
 *   preload_waits timeout MS       pthread_cond_clockwait for MS on
 *                                  g_idle_cv and g_lock, nobody signalling:
 *                                  "rc RC ms T errno E" (errno set to 4242
 *                                  before)
 *   preload_waits local            a thread waits on g_idle_cv with a mutex
 *                                  no test maps (g_plain), main signals:
 *                                  "local RC" (0: woken)
 *   preload_waits cancel HOW DIR   a thread waits on g_idle_cv under
 *                                  g_lock (HOW: wait, or timed for 60 s)
 *                                  until main, once DIR/go exists, cancels
 *                                  it; its cleanup handler says "cleanup
 *                                  trylock RC" (EBUSY: it holds g_lock),
 *                                  waits for DIR/release and unlocks:
 *                                  "unlocked RC"; then main says "joined
 *                                  canceled" (or "joined other")
 *   preload_waits                  a self-test without the shim
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clockhelp.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_idle_cv = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t g_phase;
static pthread_cond_t *g_ready;

/* The init site of the tests' configuration: a heap condition on the
 * monotonic clock. */
__attribute__((noinline)) static pthread_cond_t *make_ready_cond(void)
{
    pthread_condattr_t a;
    pthread_cond_t *c = malloc(sizeof *c);

    if (!c)
        exit(1);
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
    return c;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

static int flag_set(const char *path)
{
    FILE *f = fopen(path, "r");
    int c = f ? fgetc(f) : EOF;

    if (f)
        fclose(f);
    return c == '1';
}

static int barrier(long rounds)
{
    long i, serial = 0;
    int rc;

    if (pthread_barrier_init(&g_phase, NULL, 1) != 0)
        return 1;
    for (i = 0; i < rounds; i++) {
        rc = pthread_barrier_wait(&g_phase);
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            serial++;
        else if (rc != 0)
            printf("error %d\n", rc);
        printf("round %ld\n", i);
        fflush(stdout);
    }
    printf("serial %ld\n", serial);
    return pthread_barrier_destroy(&g_phase) != 0;
}

static int waiter(const char *flag)
{
    struct timespec until = clock_in_ms(CLOCK_MONOTONIC, 60000);
    int rc = 0;

    g_ready = make_ready_cond();
    pthread_mutex_lock(&g_lock);
    printf("waiting\n");
    fflush(stdout);
    while (!flag_set(flag) && rc == 0)
        rc = pthread_cond_timedwait(g_ready, &g_lock, &until);
    pthread_mutex_unlock(&g_lock);
    printf("woken %d\n", rc);
    pthread_cond_destroy(g_ready);
    free(g_ready);
    return 0;
}

static int waker(const char *flag)
{
    FILE *f;

    g_ready = make_ready_cond();
    pthread_mutex_lock(&g_lock);
    f = fopen(flag, "w");
    if (!f || fputs("1", f) < 0 || fclose(f) != 0)
        return 1;
    pthread_cond_broadcast(g_ready);
    pthread_mutex_unlock(&g_lock);
    pthread_cond_destroy(g_ready);
    free(g_ready);
    return 0;
}

static pthread_mutex_t g_plain = PTHREAD_MUTEX_INITIALIZER;
static int g_flag; /* under g_plain */

static void *local_waiter(void *arg)
{
    struct timespec until = clock_in_ms(CLOCK_MONOTONIC, 30000);
    int rc = 0;

    (void)arg;
    pthread_mutex_lock(&g_plain);
    while (!g_flag && rc == 0)
        rc = pthread_cond_clockwait(&g_idle_cv, &g_plain, CLOCK_MONOTONIC,
                                    &until);
    pthread_mutex_unlock(&g_plain);
    return (void *)(long)rc;
}

/* A wait on g_idle_cv with a mutex no configuration maps: local, and a
 * signal of this process still wakes it. */
static int local(void)
{
    pthread_t t;
    void *rc;

    if (pthread_create(&t, NULL, local_waiter, NULL) != 0)
        return 1;
    sleep_ms(200);
    pthread_mutex_lock(&g_plain);
    g_flag = 1;
    pthread_cond_signal(&g_idle_cv);
    pthread_mutex_unlock(&g_plain);
    pthread_join(t, &rc);
    printf("local %ld\n", (long)rc);
    return 0;
}

static const char *g_dir;

/* Waits up to 60 s for the file DIR/name. */
static int await_file(const char *name)
{
    char path[4096];
    FILE *f;
    int i;

    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    for (i = 0; i < 6000; i++) {
        if ((f = fopen(path, "r")) != NULL) {
            fclose(f);
            return 1;
        }
        sleep_ms(10);
    }
    return 0;
}

static void unlock_on_cancel(void *arg)
{
    (void)arg;
    printf("cleanup trylock %d\n", pthread_mutex_trylock(&g_lock));
    fflush(stdout);
    await_file("release");
    printf("unlocked %d\n", pthread_mutex_unlock(&g_lock));
    fflush(stdout);
}

static void *cancel_waiter(void *arg)
{
    int timed = arg != NULL;
    struct timespec until;

    pthread_mutex_lock(&g_lock);
    pthread_cleanup_push(unlock_on_cancel, NULL);
    for (;;) {
        if (timed) {
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 60;
            pthread_cond_timedwait(&g_idle_cv, &g_lock, &until);
        } else {
            pthread_cond_wait(&g_idle_cv, &g_lock);
        }
    }
    pthread_cleanup_pop(0);
    return NULL;
}

/* A thread cancelled in a condition wait goes, its cleanup handler run
 * holding the mutex (pthread_cond_wait/2-3, pthread_cond_timedwait/2-6). */
static int cancel(const char *how, const char *dir)
{
    pthread_t t;
    void *res = NULL;

    g_dir = dir;
    if (pthread_create(&t, NULL, cancel_waiter,
                       strcmp(how, "timed") == 0 ? (void *)1 : NULL) != 0)
        return 1;
    if (!await_file("go"))
        return 1;
    pthread_cancel(t);
    pthread_join(t, &res);
    printf("joined %s\n", res == PTHREAD_CANCELED ? "canceled" : "other");
    return 0;
}

static int timeout(long ms)
{
    struct timespec until = clock_in_ms(CLOCK_MONOTONIC, ms);
    double t0 = mono_ms();
    int rc, e;

    pthread_mutex_lock(&g_lock);
    errno = 4242;
    rc = pthread_cond_clockwait(&g_idle_cv, &g_lock, CLOCK_MONOTONIC, &until);
    e = errno;
    pthread_mutex_unlock(&g_lock);
    printf("rc %d ms %.0f errno %d\n", rc, mono_ms() - t0, e);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 1) {
        if (barrier(3) != 0)
            return 1;
        return timeout(10) || local();
    }
    if (argc == 3 && strcmp(argv[1], "barrier") == 0)
        return barrier(atol(argv[2]));
    if (argc == 3 && strcmp(argv[1], "waiter") == 0)
        return waiter(argv[2]);
    if (argc == 3 && strcmp(argv[1], "waker") == 0)
        return waker(argv[2]);
    if (argc == 2 && strcmp(argv[1], "local") == 0)
        return local();
    if (argc == 3 && strcmp(argv[1], "timeout") == 0)
        return timeout(atol(argv[2]));
    if (argc == 4 && strcmp(argv[1], "cancel") == 0)
        return cancel(argv[2], argv[3]);
    fprintf(stderr,
            "usage: preload_waits barrier ROUNDS | waiter FLAG | "
            "waker FLAG | timeout MS | local | cancel wait|timed DIR\n");
    return 2;
}
