/*
 * preload_fork: a mutex and a condition made in main, then fork(), for the
 * LD_PRELOAD tests (test_preload_*).  It knows nothing of distlock: built
 * with -pthread only, and linked with libpreload_lib.so, whose fork child
 * handler initialises a mutex.
 *
 *   preload_fork      the child locks the mutex, signals the condition,
 *                     unlocks and says "child RC REINITS INITS" (RC 0: all
 *                     three worked; REINITS: how often the library's
 *                     child handler initialised its mutex), and exits; the
 *                     parent waits for it and says "parent STATUS" (its
 *                     wait status), then uses the pair itself: "parent RC
 *                     INITS"
 *
 * INITS, "M C": how many pthread_mutex_init and pthread_cond_init calls
 * reached the shim's init_site mapping (its counters), or "-1 -1" without
 * the shim.  The program's own calls only: libdistlock's inits of its own
 * objects must bypass the shim.
 *
 * Issue 27: under distlock-run, with any init_site section (main's, or
 * that of preload_fork_unused, which never runs), the child hung in the
 * fork handlers, before it could say anything.  The parent gives the
 * child CHILD_MAX_S seconds, then kills it and exits 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "childwait.h"

int preload_lib_fork_reinits(void);

/* "M C": the shim's counts of init calls, -1 without it. */
static void say_inits(void)
{
    long (*count)(const char *) =
        (long (*)(const char *))dlsym(RTLD_DEFAULT, "distlock_preload_calls");

    printf(" %ld %ld\n", count ? count("pthread_mutex_init@GLIBC_2.2.5") : -1,
           count ? count("pthread_cond_init@GLIBC_2.3.2") : -1);
}

/* An init site that never runs (the tests name it: its mere section made
 * every child hang). */
void preload_fork_unused(void);
__attribute__((noinline)) void preload_fork_unused(void)
{
    pthread_mutex_t m;

    pthread_mutex_init(&m, NULL);
    pthread_mutex_destroy(&m);
}

/* Lock, signal, unlock: 0 when all three worked. */
static int use(pthread_mutex_t *m, pthread_cond_t *c)
{
    int rc = pthread_mutex_lock(m);

    if (rc == 0) {
        rc = pthread_cond_signal(c);
        if (pthread_mutex_unlock(m) != 0 && rc == 0)
            rc = -1;
    }
    return rc;
}

int main(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    int st = -1;
    pid_t pid;

    if (pthread_mutex_init(&m, NULL) != 0 || pthread_cond_init(&c, NULL) != 0)
        return 1;
    if (use(&m, &c) != 0)
        return 1;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        printf("child %d %d", use(&m, &c), preload_lib_fork_reinits());
        say_inits();
        exit(0);
    }
    if (wait_bounded(pid, &st) != 0) {
        printf("parent: the child did not end within %d s: killed\n",
               CHILD_MAX_S);
        return 1;
    }
    printf("parent %d\n", st);
    printf("parent %d", use(&m, &c));
    say_inits();
    pthread_cond_destroy(&c);
    pthread_mutex_destroy(&m);
    return 0;
}
