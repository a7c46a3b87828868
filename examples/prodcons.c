/*
 * prodcons: a producer/consumer program that knows nothing of distlock:
 * plain C, pthread_mutex_t and pthread_cond_t, built with -pthread only.
 *
 *   prodcons produce QUEUE N     puts N items into QUEUE
 *   prodcons consume QUEUE N     takes N items out of QUEUE
 *
 * QUEUE is a small file: a bounded queue of CAPACITY items, read and
 * written under g_queue_lock.  A consumer finding it empty waits on
 * g_nonempty, a producer finding it full waits on g_notfull; each wakes
 * the other after its change.  Within one process (threads) that is the
 * textbook program.  Run as two processes, the waits are local and nobody
 * wakes them: the consumer hangs for ever.  Under distlock-run with
 * examples/prodcons.ini the lock and both conditions are distributed, and
 * a producer in one process (or host) wakes a consumer in another.
 *
 * Each prints "pid N" first; every line the consumer prints then names the
 * process that produced the item: "item 7 from 12345".  Exit status 0, or 1 with a message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CAPACITY 4

static pthread_mutex_t g_queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_nonempty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_notfull = PTHREAD_COND_INITIALIZER;

/* The queue file: items put so far, items taken so far, and the producer
 * of each slot. */
struct queue {
    long put, taken;
    long from[CAPACITY];
};

static int g_fd;

static void fail(const char *what)
{
    fprintf(stderr, "prodcons: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void load(struct queue *q)
{
    ssize_t n = pread(g_fd, q, sizeof *q, 0);

    if (n < 0)
        fail("read");
    if (n < (ssize_t)sizeof *q)
        memset(q, 0, sizeof *q); /* a new queue */
}

static void store(const struct queue *q)
{
    if (pwrite(g_fd, q, sizeof *q, 0) != (ssize_t)sizeof *q)
        fail("write");
}

static void produce(long n)
{
    struct queue q;
    long i;

    for (i = 0; i < n; i++) {
        pthread_mutex_lock(&g_queue_lock);
        load(&q);
        while (q.put - q.taken >= CAPACITY) {
            pthread_cond_wait(&g_notfull, &g_queue_lock);
            load(&q);
        }
        q.from[q.put % CAPACITY] = (long)getpid();
        q.put++;
        store(&q);
        pthread_cond_signal(&g_nonempty);
        pthread_mutex_unlock(&g_queue_lock);
    }
}

static void consume(long n)
{
    struct queue q;
    long i, item, from;

    for (i = 0; i < n; i++) {
        pthread_mutex_lock(&g_queue_lock);
        load(&q);
        while (q.put == q.taken) {
            printf("waiting\n");
            fflush(stdout);
            pthread_cond_wait(&g_nonempty, &g_queue_lock);
            load(&q);
        }
        item = q.taken;
        from = q.from[q.taken % CAPACITY];
        q.taken++;
        store(&q);
        pthread_cond_signal(&g_notfull);
        pthread_mutex_unlock(&g_queue_lock);
        printf("item %ld from %ld\n", item, from);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    long n;

    if (argc != 4 || (strcmp(argv[1], "produce") != 0 &&
                      strcmp(argv[1], "consume") != 0)) {
        fprintf(stderr, "usage: prodcons produce|consume QUEUE N\n");
        return 2;
    }
    n = atol(argv[3]);
    g_fd = open(argv[2], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (g_fd < 0)
        fail(argv[2]);
    printf("pid %ld\n", (long)getpid());
    fflush(stdout);
    if (argv[1][0] == 'p')
        produce(n);
    else
        consume(n);
    close(g_fd);
    return 0;
}
