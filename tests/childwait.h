/*
 * childwait: a bounded wait for a child, for the programs the shim is
 * tried on (preload_fork, preload_condfork), which are built with
 * -pthread alone and link nothing of the tests.
 *
 * A child hung in fork() or in a wait has no alarm of its own (alarms are
 * not inherited): the parent ends it, so that a hang fails the test and
 * leaves nothing behind.  CHILD_MAX_S is a bound, not a timing.
 */
#ifndef DISTLOCK_CHILDWAIT_H
#define DISTLOCK_CHILDWAIT_H

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#define CHILD_MAX_S 60

static inline void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* Waits for the child, CHILD_MAX_S at most, then kills it.  0, or -1 when
 * it had to be killed. */
static inline int wait_bounded(pid_t pid, int *st)
{
    long n;

    for (n = 0; n < CHILD_MAX_S * 50L; n++) {
        pid_t got = waitpid(pid, st, WNOHANG);

        if (got == pid)
            return 0;
        if (got < 0)
            return -1;
        sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, st, 0);
    return -1;
}

#endif
