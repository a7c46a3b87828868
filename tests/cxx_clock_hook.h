/* cxx_clock_hook: simulated steps of CLOCK_REALTIME (cxx_clock_hook.c). */
#ifndef DISTLOCK_CXX_CLOCK_HOOK_H
#define DISTLOCK_CXX_CLOCK_HOOK_H

#ifdef __cplusplus
extern "C" {
#endif

/* From now on CLOCK_REALTIME reads secs later (earlier when negative)
 * than before, in the whole process. */
void cxx_step_realtime(double secs);
/* CLOCK_REALTIME as the machine has it again. */
void cxx_unstep_realtime(void);

#ifdef __cplusplus
}
#endif

#endif
