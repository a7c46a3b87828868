/*
 * cxx_clock_hook: steps of CLOCK_REALTIME for test_cxx, simulated as
 * test_posix does: the test program defines clock_gettime, which the
 * library's calls resolve to (the executable comes first in symbol
 * lookup), and adds the step to CLOCK_REALTIME.  The machine's clock is
 * never touched.  In C, so that the definition matches glibc's
 * declaration without C++ exception specifications.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <time.h>

#include "cxx_clock_hook.h"

static atomic_llong rt_step_ns;

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
    step = atomic_load(&rt_step_ns);
    if (rc == 0 && clk == CLOCK_REALTIME && step != 0) {
        ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + step;
        ts->tv_sec = (time_t)(ns / 1000000000LL);
        ts->tv_nsec = (long)(ns % 1000000000LL);
    }
    return rc;
}

void cxx_step_realtime(double secs)
{
    atomic_fetch_add(&rt_step_ns, (long long)(secs * 1e9));
}

void cxx_unstep_realtime(void)
{
    atomic_store(&rt_step_ns, 0);
}
