/*
 * preload_sems: named POSIX semaphores the way legacy programs use them,
 * for tests/test_preload_examples.sh to run under distlock-run (built with
 * -pthread alone: it knows nothing of distlock).
 *
 *   preload_sems eintr NAME       a thread waits in sem_wait, then one in
 *                                 sem_timedwait (20 s), on NAME (0 permits);
 *                                 each is sent SIGUSR1, whose handler has no
 *                                 SA_RESTART: prints "eintr WAIT TIMED" with
 *                                 1 for each that returned -1/EINTR
 *   preload_sems cancel NAME      a thread waiting in sem_wait is cancelled:
 *                                 prints "cancel 1" when it went, its
 *                                 cleanup handler run, within 5 s
 *   preload_sems pair ITEMS SLOTS N
 *                                 a producer and a consumer thread pass N
 *                                 items (SLOTS starts at 4): prints
 *                                 "pair N VALUE-ITEMS VALUE-SLOTS" and then
 *                                 "closed RC RC" for the sem_close of each
 *
 * Exit 0 when every call it made did what POSIX says, else 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sem_t *open_sem(const char *name, unsigned value)
{
    sem_t *s = sem_open(name, O_CREAT, 0600, value);

    if (s == SEM_FAILED) {
        fprintf(stderr, "sem_open %s: %s\n", name, strerror(errno));
        exit(1);
    }
    return s;
}

/* ---- eintr -------------------------------------------------------------- */

static void on_usr1(int sig)
{
    (void)sig;
}

struct waiter {
    sem_t *s;
    int timed;
    atomic_int done;
    int rc, err;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 20;
    w->rc = w->timed ? sem_timedwait(w->s, &ts) : sem_wait(w->s);
    w->err = errno;
    atomic_store(&w->done, 1);
    return NULL;
}

/* Whether the waiter of w returned -1/EINTR within 5 s of the signal. */
static int interrupted(sem_t *s, int timed)
{
    struct waiter w = { .s = s, .timed = timed };
    pthread_t th;
    int i;

    atomic_init(&w.done, 0);
    if (pthread_create(&th, NULL, wait_thread, &w) != 0)
        return 0;
    sleep(1); /* waiting by now */
    pthread_kill(th, SIGUSR1);
    for (i = 0; i < 500 && !atomic_load(&w.done); i++)
        usleep(10000);
    if (!atomic_load(&w.done))
        sem_post(s); /* let it go: the check failed */
    pthread_join(th, NULL);
    return w.rc == -1 && w.err == EINTR;
}

static int eintr(const char *name)
{
    struct sigaction sa;
    sem_t *s = open_sem(name, 0);
    int a, b;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL); /* no SA_RESTART */
    a = interrupted(s, 0);
    b = interrupted(s, 1);
    printf("eintr %d %d\n", a, b);
    return a && b && sem_close(s) == 0 ? 0 : 1;
}

/* ---- cancel ------------------------------------------------------------- */

static atomic_int cleaned;

static void note_cleanup(void *arg)
{
    (void)arg;
    atomic_store(&cleaned, 1);
}

static void *cancel_thread(void *arg)
{
    pthread_cleanup_push(note_cleanup, NULL);
    sem_wait(arg);
    pthread_cleanup_pop(0);
    return NULL;
}

static int cancel(const char *name)
{
    sem_t *s = open_sem(name, 0);
    pthread_t th;
    void *res = NULL;
    int i, value = -1;

    if (pthread_create(&th, NULL, cancel_thread, s) != 0)
        return 1;
    sleep(1);
    pthread_cancel(th);
    for (i = 0; i < 500 && !atomic_load(&cleaned); i++)
        usleep(10000);
    if (!atomic_load(&cleaned))
        sem_post(s); /* let it go: the check failed */
    pthread_join(th, &res);
    sem_getvalue(s, &value);
    printf("cancel %d value %d\n",
           atomic_load(&cleaned) && res == PTHREAD_CANCELED, value);
    return atomic_load(&cleaned) && res == PTHREAD_CANCELED && value == 0 &&
                   sem_close(s) == 0
               ? 0
               : 1;
}

/* ---- pair --------------------------------------------------------------- */

static sem_t *items, *slots;
static long n_items;
static atomic_int errors;

/* One side of the pair, n_items times: a wait on ends[0], a post to
 * ends[1] (the producer from slots to items, the consumer back). */
static void *mover(void *arg)
{
    sem_t ***ends = arg;

    for (long i = 0; i < n_items; i++)
        if (sem_wait(*ends[0]) != 0 || sem_post(*ends[1]) != 0)
            atomic_fetch_add(&errors, 1);
    return NULL;
}

static int pair(const char *iname, const char *sname, long n)
{
    static sem_t **ends[2][2] = { { &slots, &items }, { &items, &slots } };
    pthread_t t[2];
    int vi = -1, vs = -1, ci, cs;

    n_items = n;
    items = open_sem(iname, 0);
    slots = open_sem(sname, 4);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, mover, ends[i]) != 0)
            return 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    sem_getvalue(items, &vi);
    sem_getvalue(slots, &vs);
    printf("pair %ld %d %d\n", n, vi, vs);
    ci = sem_close(items);
    cs = sem_close(slots);
    printf("closed %d %d\n", ci, cs);
    return atomic_load(&errors) == 0 && vi == 0 && vs == 4 && ci == 0 &&
                   cs == 0
               ? 0
               : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "eintr") == 0)
        return eintr(argv[2]);
    if (argc == 3 && strcmp(argv[1], "cancel") == 0)
        return cancel(argv[2]);
    if (argc == 5 && strcmp(argv[1], "pair") == 0)
        return pair(argv[2], argv[3], atol(argv[4]));
    if (argc == 1)
        return 0; /* run by the harness: nothing to do */
    fprintf(stderr, "usage: preload_sems eintr NAME | cancel NAME | "
                    "pair ITEMS SLOTS N\n");
    return 2;
}
