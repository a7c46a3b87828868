/* sys.c: the pthread functions behind the library's own mutexes and
 * conditions.
 *
 * Under the LD_PRELOAD shim (libdistlock_preload.so) every pthread_mutex_*
 * and pthread_cond_* call of the process reaches the shim first, and the
 * shim maps some of them onto this library.  The library's own objects
 * must never take that path: the shim's mapping takes its own locks (which
 * its fork handler holds across a fork, while the library's fork handler
 * re-initialises the library's mutexes), and a heap entry the program left
 * at an address the library's malloc hands out again would turn one of the
 * library's mutexes into a distributed lock of its own.  So base.h routes
 * the library's calls through the table below, and when the shim is in the
 * process (its distlock_preload_real, a weak reference: NULL otherwise),
 * the table holds glibc's functions, the very ones the shim forwards to.
 * A constructor fills it: this library is a dependency of the shim and of
 * any program that calls it, so it runs before either calls in.  (Should
 * another library's constructor set the shim's start-up off earlier, the
 * library's calls from start-up pass straight through the shim anyway.) */
#include "base.h"

struct dist__sys dist__sys = {
    .mutex_init = pthread_mutex_init,
    .mutex_destroy = pthread_mutex_destroy,
    .mutex_lock = pthread_mutex_lock,
    .mutex_unlock = pthread_mutex_unlock,
    .cond_init = pthread_cond_init,
    .cond_destroy = pthread_cond_destroy,
    .cond_wait = pthread_cond_wait,
    .cond_timedwait = pthread_cond_timedwait,
    .cond_signal = pthread_cond_signal,
    .cond_broadcast = pthread_cond_broadcast,
};

/* The shim's: glibc's function it forwards NAME to (the version a build
 * against this glibc binds), or NULL. */
typedef void (*dist__sys_fn)(void);
extern dist__sys_fn distlock_preload_real(const char *name)
    __attribute__((weak));

/* dist__sys.member = the shim's glibc function for name, when it has one
 * (void (*)(void) converts to any function pointer type without a word). */
#define TAKE(member, name)                                                   \
    do {                                                                     \
        dist__sys_fn f_ = distlock_preload_real(name);                       \
                                                                             \
        if (f_)                                                              \
            dist__sys.member = (__typeof__(dist__sys.member))f_;             \
    } while (0)

__attribute__((constructor)) static void sys_bind(void)
{
    if (!distlock_preload_real)
        return;
    TAKE(mutex_init, "pthread_mutex_init");
    TAKE(mutex_destroy, "pthread_mutex_destroy");
    TAKE(mutex_lock, "pthread_mutex_lock");
    TAKE(mutex_unlock, "pthread_mutex_unlock");
    TAKE(cond_init, "pthread_cond_init");
    TAKE(cond_destroy, "pthread_cond_destroy");
    TAKE(cond_wait, "pthread_cond_wait");
    TAKE(cond_timedwait, "pthread_cond_timedwait");
    TAKE(cond_signal, "pthread_cond_signal");
    TAKE(cond_broadcast, "pthread_cond_broadcast");
}
