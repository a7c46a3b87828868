/*
 * preload_condfork: a process-shared mutex and condition in shared memory,
 * the condition destroyed and made again by the parent after fork(), as
 * Open POSIX pthread_cond_destroy/2-1 does between its passes, for the
 * LD_PRELOAD tests (test_preload_*).  It knows nothing of distlock: built
 * with -pthread only.  make_mutex and make_cond are the init sites.
 *
 * The parent makes both and holds the mutex; the child forks off and
 * waits for the mutex.  The parent destroys the condition, fills its
 * memory with 0xFF and makes it again (same function, same address), then
 * lets the child in: the child waits on the condition until the parent
 * says go and broadcasts.  Output: "child 0" (the child's wait ended
 * well) and "parent 0" (the pair destroyed cleanly); exit 0.
 *
 * Under distlock-run with init_site sections on both, the parent's new
 * condition was the next object of its site, a lock of another name,
 * while the child still used the old one: the broadcast never reached it
 * and the test hung.  The parent ends a child that is not done within
 * CHILD_MAX_S seconds (a bound, not a timing) and exits 1.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "childwait.h"

struct shared {
    pthread_mutex_t m;
    pthread_cond_t c;
    int waiting, go, child_rc;
};

/* The init sites make_mutex and make_cond: each makes its object
 * process-shared (exits 1 when the init fails).  One definition for both,
 * since they differ in the kind alone; each stays a function of its own
 * and out of line, as an init_site section names a function. */
#define INIT_SITE(kind)                                                      \
    void make_##kind(pthread_##kind##_t *o);                                 \
    __attribute__((noinline)) void make_##kind(pthread_##kind##_t *o)        \
    {                                                                        \
        pthread_##kind##attr_t a;                                            \
                                                                             \
        pthread_##kind##attr_init(&a);                                       \
        pthread_##kind##attr_setpshared(&a, PTHREAD_PROCESS_SHARED);         \
        if (pthread_##kind##_init(o, &a) != 0)                               \
            exit(1);                                                         \
        pthread_##kind##attr_destroy(&a);                                    \
    }
INIT_SITE(mutex)
INIT_SITE(cond)

/* The child: in once the parent lets it, it waits until told to go. */
static void child(struct shared *s)
{
    int rc = pthread_mutex_lock(&s->m);

    if (rc == 0) {
        s->waiting = 1;
        while (rc == 0 && !s->go)
            rc = pthread_cond_wait(&s->c, &s->m);
        s->child_rc = rc;
        if (pthread_mutex_unlock(&s->m) != 0 && rc == 0)
            s->child_rc = -1;
    }
    _exit(rc == 0 ? 0 : 2);
}

int main(void)
{
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int st = -1, waiting = 0;
    long n;
    pid_t pid;

    if (s == MAP_FAILED)
        return 1;
    make_mutex(&s->m);
    make_cond(&s->c);
    s->child_rc = -1;
    if (pthread_mutex_lock(&s->m) != 0)
        return 1;
    fflush(stdout);
    if ((pid = fork()) < 0)
        return 1;
    if (pid == 0)
        child(s);
    /* made again after the fork, while the child waits for the mutex */
    if (pthread_cond_destroy(&s->c) != 0)
        return 1;
    memset(&s->c, 0xFF, sizeof s->c);
    make_cond(&s->c);
    /* the child in: it waits on the condition, which lets the mutex go */
    for (n = 0; !waiting && n < CHILD_MAX_S * 50L; n++) {
        pthread_mutex_unlock(&s->m);
        sleep_ms(20);
        pthread_mutex_lock(&s->m);
        waiting = s->waiting;
    }
    s->go = 1;
    pthread_cond_broadcast(&s->c);
    pthread_mutex_unlock(&s->m);
    if (wait_bounded(pid, &st) != 0) {
        printf("parent: the child did not end within %d s: killed\n",
               CHILD_MAX_S);
        return 1;
    }
    printf("child %d\n", s->child_rc);
    printf("parent %d\n", (pthread_cond_destroy(&s->c) != 0) +
                              (pthread_mutex_destroy(&s->m) != 0));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
