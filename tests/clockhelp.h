/*
 * clockhelp.h: clock arithmetic the plain-C test programs share (they link
 * neither cmocka nor, some of them, the library): an absolute deadline
 * some milliseconds away on a clock, the monotonic clock in milliseconds.
 * Everything is static: each program gets its own copy.
 */
#ifndef DISTLOCK_CLOCKHELP_H
#define DISTLOCK_CLOCKHELP_H

#include <time.h>

/* The time on clk ms milliseconds from now, as a timed call takes it. */
static inline struct timespec clock_in_ms(clockid_t clk, long ms)
{
    struct timespec ts;

    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_nsec -= 1000000000L;
        ts.tv_sec++;
    }
    return ts;
}

/* CLOCK_MONOTONIC in milliseconds, for measuring how long a call took. */
static inline double mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#endif
