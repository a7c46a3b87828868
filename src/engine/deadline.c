/* deadline.c: a caller's deadline, taken at the API and converted to the
 * monotonic clock there, once; again only when the clock it names was
 * stepped (struct dist__deadline, engine.h). */
#include <errno.h>

#include "engine.h"

/* ---- deadlines ---------------------------------------------------------- */

/* dl's abs on the monotonic clock (ms), as of now: rounded up, so that a
 * waiter never gives up early; callers still confirm with
 * dist__deadline_reached, the clock may be stepped.  abs.tv_nsec is in
 * range. */
static uint64_t to_mono(const struct dist__deadline *dl)
{
    /* a deadline further than this is "never" (std::chrono's time_point::max
     * arrives as a tv_sec near INT64_MAX); the cap keeps the sums in range */
    const int64_t far_s = INT64_C(1) << 32; /* about 136 years */
    struct timespec now;
    int64_t left_s, left_ns;
    uint64_t mono;

    mono = dist__now_ms();
    clock_gettime(dl->clock, &now);
    if (dl->abs.tv_sec > (time_t)now.tv_sec + far_s)
        left_s = far_s;
    else if (dl->abs.tv_sec < (time_t)now.tv_sec - far_s)
        left_s = -far_s;
    else
        left_s = (int64_t)dl->abs.tv_sec - (int64_t)now.tv_sec;
    left_ns = left_s * 1000000000LL + (dl->abs.tv_nsec - now.tv_nsec);
    return left_ns <= 0 ? mono
                        : mono + (uint64_t)(left_ns + 999999) / 1000000u;
}

int dist__deadline_set(struct dist__deadline *dl, clockid_t clock,
                       const struct timespec *abs)
{
    /* the clock is refused whether or not the call would wait, as glibc's
     * clocklock does */
    if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
        return dist__err(EINVAL,
                         "clock %d: use CLOCK_REALTIME or "
                         "CLOCK_MONOTONIC",
                         (int)clock);
    if (!abs)
        return dist__err(EINVAL, "abstime is NULL");
    dl->clock = clock;
    dl->abs = *abs;
    /* converted here, once per call; refused only when the call would
     * wait (dist__deadline_ms) */
    dl->bad = abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L;
    dl->ms = dl->bad ? 0 : to_mono(dl);
    return 0;
}

int dist__deadline_ms(const struct dist__deadline *dl, uint64_t *ms)
{
    if (dl->bad)
        return dist__err(EINVAL, "abstime.tv_nsec %ld is out of range",
                         dl->abs.tv_nsec);
    *ms = dl->ms;
    return 0;
}

int dist__deadline_reached(const struct dist__deadline *dl)
{
    struct timespec now;

    clock_gettime(dl->clock, &now);
    return now.tv_sec > dl->abs.tv_sec ||
           (now.tv_sec == dl->abs.tv_sec && now.tv_nsec >= dl->abs.tv_nsec);
}

int dist__deadline_step(const struct dist__deadline *dl, uint64_t *deadline)
{
    if (!*deadline || dist__now_ms() < *deadline)
        return 0;
    if (dist__deadline_reached(dl))
        return 1;
    if (!dl->bad)
        *deadline = to_mono(dl); /* the clock stepped */
    return 0;
}
