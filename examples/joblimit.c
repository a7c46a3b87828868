/*
 * joblimit: a job runner that limits itself with a named POSIX semaphore,
 * and knows nothing of distlock: plain C, built with -pthread only.
 *
 *   joblimit SEMNAME LIMIT THREADS JOBS BOARD
 *
 * THREADS threads each run JOBS jobs; a job runs only holding a permit of
 * sem_open(SEMNAME, O_CREAT, 0600, LIMIT).  BOARD is a file mapped shared
 * by every copy of the program on this host: each job counts itself in
 * while it runs and records the most jobs ever seen running at once.  On
 * one host the kernel's named semaphore already bounds every copy; across
 * hosts it bounds nothing.  Under distlock-run with examples/joblimit.ini
 * the semaphore is a distributed one, and LIMIT holds across hosts.
 *
 * Prints "most N done M" (the board's record of jobs at once, and of jobs
 * finished by every copy, when this copy ended).  Exit status
 * 0, or 1 with a message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct board {
    long running;
    long most;
    long done;
};

static sem_t *g_sem;
static struct board *g_board;
static long g_jobs;

static void fail(const char *what)
{
    fprintf(stderr, "joblimit: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void job(void)
{
    struct timespec work = { 0, 20 * 1000 * 1000 };
    long now = __atomic_add_fetch(&g_board->running, 1, __ATOMIC_SEQ_CST);
    long most = __atomic_load_n(&g_board->most, __ATOMIC_SEQ_CST);

    while (now > most &&
           !__atomic_compare_exchange_n(&g_board->most, &most, now, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    nanosleep(&work, NULL);
    __atomic_sub_fetch(&g_board->running, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&g_board->done, 1, __ATOMIC_SEQ_CST);
}

static void *worker(void *arg)
{
    long i;

    (void)arg;
    for (i = 0; i < g_jobs; i++) {
        while (sem_wait(g_sem) != 0)
            if (errno != EINTR)
                fail("sem_wait");
        job();
        if (sem_post(g_sem) != 0)
            fail("sem_post");
    }
    return NULL;
}

static struct board *map_board(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    void *p;

    if (fd < 0)
        fail(path);
    if (ftruncate(fd, sizeof(struct board)) != 0)
        fail("ftruncate");
    p = mmap(NULL, sizeof(struct board), PROT_READ | PROT_WRITE, MAP_SHARED,
             fd, 0);
    if (p == MAP_FAILED)
        fail("mmap");
    close(fd);
    return p;
}

int main(int argc, char **argv)
{
    pthread_t t[64];
    long i, threads;

    if (argc != 6) {
        fprintf(stderr, "usage: joblimit SEMNAME LIMIT THREADS JOBS BOARD\n");
        return 2;
    }
    threads = atol(argv[3]);
    g_jobs = atol(argv[4]);
    if (threads < 1 || threads > 64)
        threads = 1;
    g_board = map_board(argv[5]);
    g_sem = sem_open(argv[1], O_CREAT, 0600, (unsigned)atol(argv[2]));
    if (g_sem == SEM_FAILED)
        fail("sem_open");
    for (i = 0; i < threads; i++)
        if ((errno = pthread_create(&t[i], NULL, worker, NULL)) != 0)
            fail("pthread_create");
    for (i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("most %ld done %ld\n",
           __atomic_load_n(&g_board->most, __ATOMIC_SEQ_CST),
           __atomic_load_n(&g_board->done, __ATOMIC_SEQ_CST));
    sem_close(g_sem);
    return 0;
}
