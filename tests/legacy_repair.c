/*
 * legacy_repair: a "legacy" program for the LD_PRELOAD tests of robust
 * mutexes.  It knows nothing of distlock: plain C, built with -pthread
 * only.  A record of two counters in FILE, "A B", must always have A == B;
 * an update writes A first, then B, under g_record_lock, a robust mutex
 * (PTHREAD_MUTEX_ROBUST).  A process that dies between the two writes
 * leaves the record half-written; the next locker is told EOWNERDEAD and
 * repairs it (B = A) before it marks the mutex consistent.
 *
 *   legacy_repair FILE crash     lock, write A, and die by SIGKILL
 *   legacy_repair FILE post      lock (repair on EOWNERDEAD), update, unlock;
 *                                prints "repaired A B" or "posted A B"
 *   legacy_repair FILE abandon   lock; on EOWNERDEAD unlock without repair
 *                                (the mutex is then not recoverable)
 *   legacy_repair FILE lock      lock, and print what it returned
 *   legacy_repair                the program's own repair with glibc alone
 *                                (run by make check): a thread that ends
 *                                between the two writes holding the lock
 *
 * Within one process a robust mutex never sees its owner die; across
 * processes it does only when the mutex is a distributed one.  Exit 0, or
 * 1 with a message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t g_record_lock;
static int g_fd;

static void fail(const char *what, int err)
{
    fprintf(stderr, "legacy_repair: %s: %s\n", what, strerror(err));
    exit(1);
}

static void get(long *a, long *b)
{
    char buf[64];
    ssize_t n = pread(g_fd, buf, sizeof buf - 1, 0);

    if (n < 0)
        fail("read", errno);
    buf[n] = '\0';
    *a = *b = 0;
    if (n > 0 && sscanf(buf, "%ld %ld", a, b) != 2)
        fail("record", EINVAL);
}

static void put(long a, long b)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%019ld %019ld\n", a, b);

    if (pwrite(g_fd, buf, (size_t)n, 0) != n)
        fail("write", errno);
}

static const char *rc_name(int rc)
{
    switch (rc) {
    case 0:
        return "0";
    case EOWNERDEAD:
        return "EOWNERDEAD";
    case ENOTRECOVERABLE:
        return "ENOTRECOVERABLE";
    default:
        return strerror(rc);
    }
}

/* The self test's thread: the update's first write, then the thread ends
 * holding the lock, as a process that dies there would. */
static void *half_update(void *arg)
{
    long a, b;
    int rc;

    (void)arg;
    if ((rc = pthread_mutex_lock(&g_record_lock)) != 0)
        fail("lock in the thread", rc);
    get(&a, &b);
    put(a + 1, b);
    return NULL;
}

/* Without the shim: glibc tells the next locker of a robust mutex whose
 * owner thread ended, and the repair below puts the record right. */
static int self_test(void)
{
    char path[] = "/tmp/legacy_repair.XXXXXX";
    pthread_mutexattr_t attr;
    pthread_t th;
    long a, b;
    int rc;

    if ((g_fd = mkstemp(path)) < 0)
        fail("mkstemp", errno);
    unlink(path);
    put(0, 0);
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&g_record_lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if ((rc = pthread_create(&th, NULL, half_update, NULL)) != 0)
        fail("pthread_create", rc);
    pthread_join(th, NULL);
    rc = pthread_mutex_lock(&g_record_lock);
    if (rc != EOWNERDEAD)
        fail("lock after the owner thread ended: not EOWNERDEAD",
             rc ? rc : EINVAL);
    get(&a, &b);
    if (a != b + 1)
        fail("the half-written record is not there", EINVAL);
    b = a;
    put(a, b);
    if ((rc = pthread_mutex_consistent(&g_record_lock)) != 0)
        fail("consistent", rc);
    if ((rc = pthread_mutex_unlock(&g_record_lock)) != 0)
        fail("unlock", rc);
    if ((rc = pthread_mutex_lock(&g_record_lock)) != 0)
        fail("lock after the repair", rc);
    get(&a, &b);
    pthread_mutex_unlock(&g_record_lock);
    if (a != 1 || b != 1)
        fail("the repaired record is not 1 1", EINVAL);
    printf("legacy_repair: a half-written record repaired after "
           "EOWNERDEAD\n");
    return 0;
}

int main(int argc, char **argv)
{
    pthread_mutexattr_t attr;
    long a, b;
    int rc;

    if (argc == 1)
        return self_test();
    if (argc != 3)
        fail("usage: legacy_repair FILE crash|post|abandon|lock", EINVAL);
    if ((g_fd = open(argv[1], O_RDWR | O_CREAT, 0600)) < 0)
        fail(argv[1], errno);
    pthread_mutexattr_init(&attr);
    if ((rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST)) != 0)
        fail("setrobust", rc);
    if ((rc = pthread_mutex_init(&g_record_lock, &attr)) != 0)
        fail("mutex_init", rc);
    pthread_mutexattr_destroy(&attr);

    rc = pthread_mutex_lock(&g_record_lock);
    if (strcmp(argv[2], "lock") == 0) {
        printf("%s\n", rc_name(rc));
        return 0;
    }
    if (rc != 0 && rc != EOWNERDEAD)
        fail("lock", rc);
    get(&a, &b);
    if (strcmp(argv[2], "abandon") == 0) {
        printf("%s\n", rc_name(rc));
        fflush(stdout);
        if ((rc = pthread_mutex_unlock(&g_record_lock)) != 0)
            fail("unlock", rc);
        return 0;
    }
    if (rc == EOWNERDEAD) {
        b = a; /* the repair: the half-written update */
        put(a, b);
        if ((rc = pthread_mutex_consistent(&g_record_lock)) != 0)
            fail("consistent", rc);
        printf("repaired ");
    } else if (a != b) {
        fail("a half-written record, and nobody was told", EINVAL);
    } else if (strcmp(argv[2], "post") == 0) {
        printf("posted ");
    }
    if (strcmp(argv[2], "crash") == 0) {
        put(a + 1, b); /* A written, B not yet */
        printf("crashing\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    put(a + 1, b + 1);
    printf("%ld %ld\n", a + 1, b + 1);
    if ((rc = pthread_mutex_unlock(&g_record_lock)) != 0)
        fail("unlock", rc);
    return 0;
}
