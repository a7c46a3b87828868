/*
 * preload-bench: what libdistlock_preload.so costs a mutex it does not map.
 *
 *   preload-bench [PAIRS]      (default 50000000)
 *
 * Locks and unlocks one plain mutex PAIRS times and prints the time per
 * lock+unlock pair in ns.  bench/preload-bench.sh runs it with and without
 * the shim (whose configuration maps g_mapped, which is never locked here,
 * so that the shim has a non-empty table as in real use).  Plain C, built
 * with -pthread alone.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

pthread_mutex_t g_mapped = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_plain = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 50000000L, i;
    double t0, t1;

    if (n <= 0) {
        fprintf(stderr, "usage: preload-bench [PAIRS]\n");
        return 2;
    }
    for (i = 0; i < n / 20; i++) { /* warm up */
        pthread_mutex_lock(&g_plain);
        pthread_mutex_unlock(&g_plain);
    }
    t0 = now();
    for (i = 0; i < n; i++) {
        pthread_mutex_lock(&g_plain);
        pthread_mutex_unlock(&g_plain);
    }
    t1 = now();
    printf("%.3f\n", (t1 - t0) * 1e9 / (double)n);
    return 0;
}
