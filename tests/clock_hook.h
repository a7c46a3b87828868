/* clock_hook: simulated steps of CLOCK_REALTIME (clock_hook.c), for test
 * programs in C and C++. */
#ifndef DISTLOCK_CLOCK_HOOK_H
#define DISTLOCK_CLOCK_HOOK_H

#ifdef __cplusplus
extern "C" {
#endif

/* From now on CLOCK_REALTIME reads secs later (earlier when negative)
 * than before, in the whole process; steps add up. */
void clock_hook_step_realtime(double secs);
/* CLOCK_REALTIME as the machine has it again. */
void clock_hook_unstep_realtime(void);
/* From now on CLOCK_MONOTONIC reads secs (> 0) later than before, in the
 * whole process, as if every thread had been kept away that long (a
 * suspended machine, a long stop).  It never goes back: there is no
 * unstep. */
void clock_hook_step_monotonic(double secs);

#ifdef __cplusplus
}
#endif

#endif
