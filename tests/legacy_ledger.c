/*
 * legacy_ledger: a "legacy" batch program for the LD_PRELOAD tests.  It
 * knows nothing of distlock: plain C, built with -pthread only.
 *
 *   legacy_ledger FILE THREADS POSTS
 *   legacy_ledger                       (2 threads, 100 posts, temp file:
 *                                        checks the count; a self-test)
 *
 * THREADS threads each post POSTS entries to a counter kept in FILE: read
 * the number, think a little, write it back plus one, all under
 * g_ledger_lock.  The threads take turns in a fixed order, waiting for
 * their turn on a condition variable with that mutex (half of them with
 * pthread_cond_wait, half with pthread_cond_timedwait), so the lock is
 * given up inside a wait all the time.  Within one process the mutex
 * makes the count exact; several copies of the program lose updates,
 * unless g_ledger_lock is a distributed lock.
 *
 * Exit status 0, or 1 with a message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_ledger_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_turn_cv = PTHREAD_COND_INITIALIZER;
static int g_turn; /* whose turn it is, under g_ledger_lock */
static int g_threads;
static long g_posts;
static int g_fd;

static void fail(const char *what)
{
    fprintf(stderr, "legacy_ledger: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Read, think, write back: the update the lock must protect. */
static void post(void)
{
    char buf[32];
    struct timespec think = { 0, 200 * 1000 };
    ssize_t n;
    long v;

    n = pread(g_fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        fail("read");
    buf[n] = '\0';
    v = atol(buf);
    nanosleep(&think, NULL);
    n = snprintf(buf, sizeof buf, "%019ld\n", v + 1);
    if (pwrite(g_fd, buf, (size_t)n, 0) != n)
        fail("write");
}

static void *worker(void *arg)
{
    int me = (int)(long)arg;
    long i;

    for (i = 0; i < g_posts; i++) {
        pthread_mutex_lock(&g_ledger_lock);
        while (g_turn != me) {
            if (me % 2 == 0) {
                pthread_cond_wait(&g_turn_cv, &g_ledger_lock);
            } else {
                struct timespec ts;

                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 20 * 1000 * 1000;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_nsec -= 1000000000L;
                    ts.tv_sec++;
                }
                pthread_cond_timedwait(&g_turn_cv, &g_ledger_lock, &ts);
            }
        }
        post();
        g_turn = (g_turn + 1) % g_threads;
        pthread_cond_broadcast(&g_turn_cv);
        pthread_mutex_unlock(&g_ledger_lock);
    }
    return NULL;
}

static int run(void)
{
    pthread_t th[64];
    int i;

    for (i = 0; i < g_threads; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(long)i) != 0)
            fail("pthread_create");
    for (i = 0; i < g_threads; i++)
        pthread_join(th[i], NULL);
    return 0;
}

/* Without arguments: one process, where the mutex alone makes it exact. */
static int self_test(void)
{
    const char *dir = getenv("TMPDIR");
    char path[4096], buf[32];
    ssize_t n;

    snprintf(path, sizeof path, "%s/legacy_ledger.XXXXXX",
             dir && *dir ? dir : "/tmp");
    g_fd = mkstemp(path);
    if (g_fd < 0)
        fail(path);
    unlink(path);
    g_threads = 2;
    g_posts = 100;
    run();
    n = pread(g_fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(g_fd);
    if (atol(buf) != 200) {
        fprintf(stderr, "legacy_ledger: counted %ld, not 200\n", atol(buf));
        return 1;
    }
    printf("legacy_ledger: 200 posts by 2 threads, none lost\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 1)
        return self_test();
    if (argc != 4) {
        fprintf(stderr, "usage: legacy_ledger FILE THREADS POSTS\n");
        return 2;
    }
    g_threads = atoi(argv[2]);
    g_posts = atol(argv[3]);
    if (g_threads < 1 || g_threads > 64 || g_posts < 0) {
        fprintf(stderr, "legacy_ledger: 1..64 threads\n");
        return 2;
    }
    g_fd = open(argv[1], O_RDWR | O_CREAT, 0644);
    if (g_fd < 0)
        fail(argv[1]);
    run();
    close(g_fd);
    return 0;
}
