/*
 * clock_hook: simulated steps of CLOCK_REALTIME, for the programs that
 * test how waits behave when the wall clock is set (test_posix, test_cxx).
 * Linked into such a program, this file defines clock_gettime; the
 * library's calls resolve to it (the executable comes first in symbol
 * lookup), and it adds the current step to CLOCK_REALTIME before
 * answering; and forward steps of CLOCK_MONOTONIC, for a thread that
 * wakes long after its deadline.  The machine's clock is never touched.  In C, so that the
 * definition matches glibc's declaration (no C++ exception
 * specifications).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <time.h>

#include "clock_hook.h"

static atomic_llong rt_step_ns;   /* added to CLOCK_REALTIME */
static atomic_llong mono_step_ns; /* added to CLOCK_MONOTONIC */

typedef int (*gettime_fn)(clockid_t, struct timespec *);

int clock_gettime(clockid_t clk, struct timespec *ts)
{
    static gettime_fn real;
    gettime_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    long long step, ns;
    int rc;

    if (!f) {
        f = (gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    rc = f(clk, ts);
    step = clk == CLOCK_REALTIME    ? atomic_load(&rt_step_ns)
           : clk == CLOCK_MONOTONIC ? atomic_load(&mono_step_ns)
                                    : 0;
    if (rc == 0 && step != 0) {
        ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + step;
        ts->tv_sec = (time_t)(ns / 1000000000LL);
        ts->tv_nsec = (long)(ns % 1000000000LL);
    }
    return rc;
}

void clock_hook_step_realtime(double secs)
{
    atomic_fetch_add(&rt_step_ns, (long long)(secs * 1e9));
}

void clock_hook_unstep_realtime(void)
{
    atomic_store(&rt_step_ns, 0);
}

void clock_hook_step_monotonic(double secs)
{
    if (secs > 0)
        atomic_fetch_add(&mono_step_ns, (long long)(secs * 1e9));
}
