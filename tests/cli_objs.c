/* cli_objs: a participant in a condition variable, a semaphore or a
 * barrier, for test_cli.sh to look at with the distlock tool.  It says on
 * stdout what it did, then stays (so that its waits, holds and membership
 * last) until the test kills it.
 *
 *   cli_objs cond NAME MUTEX        waits on condition NAME with MUTEX held
 *   cli_objs sem NAME INITIAL N     takes N permits of leased semaphore NAME
 *   cli_objs barrier NAME COUNT     waits once on barrier NAME; prints
 *                                   "serial", "0" or the error's name
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distlock.h"

static int fail(const char *what, int rc)
{
    printf("%s: %s\n", what, strerror(rc));
    fflush(stdout);
    return 1;
}

static void stay(void)
{
    for (;;)
        pause();
}

static int cond_waiter(const char *name, const char *mutex)
{
    dist_mutex_t m;
    dist_cond_t c;
    int rc;

    if ((rc = dist_mutex_init(&m, mutex, NULL)) != 0 ||
        (rc = dist_cond_init(&c, name, NULL)) != 0)
        return fail("init", rc);
    if ((rc = dist_mutex_lock(&m)) != 0)
        return fail("lock", rc);
    puts("waiting");
    fflush(stdout);
    /* a signal ends the wait: the test never sends one */
    rc = dist_cond_wait(&c, &m);
    printf("woken: %d\n", rc);
    fflush(stdout);
    stay();
    return 0;
}

static int sem_holder(const char *name, unsigned initial, int n)
{
    dist_sem_t s;
    int rc, i;

    if ((rc = dist_sem_init(&s, name, initial, NULL)) != 0)
        return fail("init", rc);
    for (i = 0; i < n; i++)
        if ((rc = dist_sem_trywait(&s)) != 0)
            return fail("trywait", rc);
    puts("held");
    fflush(stdout);
    stay();
    return 0;
}

static int barrier_member(const char *name, unsigned count)
{
    dist_barrier_t b;
    int rc;

    if ((rc = dist_barrier_init(&b, name, count)) != 0)
        return fail("init", rc);
    rc = dist_barrier_wait(&b);
    if (rc == DIST_BARRIER_SERIAL_THREAD)
        puts("serial");
    else if (rc == EOWNERDEAD)
        puts("EOWNERDEAD");
    else
        printf("%d\n", rc);
    fflush(stdout);
    stay();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "cond") == 0)
        return cond_waiter(argv[2], argv[3]);
    if (argc == 5 && strcmp(argv[1], "sem") == 0)
        return sem_holder(argv[2], (unsigned)atoi(argv[3]), atoi(argv[4]));
    if (argc == 4 && strcmp(argv[1], "barrier") == 0)
        return barrier_member(argv[2], (unsigned)atoi(argv[3]));
    fprintf(stderr, "usage: cli_objs cond NAME MUTEX | sem NAME INITIAL N | "
                    "barrier NAME COUNT\n");
    return 2;
}
