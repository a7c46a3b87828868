/* stack.c: deep work off a small stack.  OpenSSL needs far more stack than
 * the rest of a call (tls.c), and a caller's thread may have been made with
 * PTHREAD_STACK_MIN: such work then runs on a stack the thread keeps for it.
 *
 * The switch is makecontext/swapcontext on the calling thread itself, not a
 * hand-off to another thread: thread-locals (errno, OpenSSL's error queue,
 * the library's own), the signal mask and the thread's identity stay those
 * of the caller.  The sanitizers are told of each switch, as they must be
 * (ASan still prints, once per process, that it does not fully support
 * swapcontext: its interceptor does, and it also clears the shadow of the
 * stack switched to, which the switch back by setcontext must not do). */
#define _GNU_SOURCE /* pthread_getattr_np */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "base.h"

#if defined(__SANITIZE_ADDRESS__)
#define DIST__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DIST__ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DIST__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DIST__TSAN 1
#endif
#endif
#ifdef DIST__ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef DIST__TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* The stack kept for deep work: far more than any need given to
 * dist__with_stack (mmap: only the pages touched are memory), with a
 * guard page below it. */
#define ALT_SIZE (128u * 1024u)

struct alt {
    char *map; /* the mapping: guard page, then the stack */
    size_t guard;
    ucontext_t caller, callee;
    void (*fn)(void *);
    void *arg;
#ifdef DIST__ASAN
    const void *from_bottom; /* the caller's stack, for the way back */
    size_t from_size;
#endif
#ifdef DIST__TSAN
    void *caller_fiber, *fiber;
#endif
};

/* The calling thread's stack, [lo, hi), found on its first deep call;
 * lo 1: not known (then every deep call switches, which is safe); and its
 * spare stack.  thread-local: a stack is a thread's. */
static __thread uintptr_t stack_lo, stack_hi;
static __thread struct alt *my_alt;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t alt_key;
static int key_ok;

/* A thread's alternate stack goes when the thread does. */
static void alt_free(void *p)
{
    struct alt *a = p;

#ifdef DIST__TSAN
    __tsan_destroy_fiber(a->fiber);
#endif
    munmap(a->map, a->guard + ALT_SIZE);
    free(a);
}

static void key_make(void)
{
    key_ok = pthread_key_create(&alt_key, alt_free) == 0;
}

/* The bounds of the calling thread's stack into stack_lo, stack_hi. */
static void bounds_find(void)
{
    pthread_attr_t at;
    void *lo;
    size_t size;

    stack_lo = 1;
    stack_hi = 0;
    if (pthread_getattr_np(pthread_self(), &at) != 0)
        return;
    if (pthread_attr_getstack(&at, &lo, &size) == 0) {
        stack_lo = (uintptr_t)lo;
        stack_hi = (uintptr_t)lo + size;
    }
    pthread_attr_destroy(&at);
}

/* The calling thread's alternate stack, made the first time: NULL when
 * there is no memory for it. */
static struct alt *alt_get(void)
{
    struct alt *a = my_alt;
    long page = sysconf(_SC_PAGESIZE);

    if (a)
        return a;
    pthread_once(&key_once, key_make);
    if (!key_ok || !(a = calloc(1, sizeof *a)))
        return NULL;
    a->guard = page > 0 ? (size_t)page : 4096u;
    a->map = mmap(NULL, a->guard + ALT_SIZE, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (a->map == MAP_FAILED) {
        free(a);
        return NULL;
    }
    /* an overflow faults at once rather than writing over other memory */
    if (mprotect(a->map, a->guard, PROT_NONE) != 0 ||
        pthread_setspecific(alt_key, a) != 0) {
        munmap(a->map, a->guard + ALT_SIZE);
        free(a);
        return NULL;
    }
#ifdef DIST__TSAN
    a->fiber = __tsan_create_fiber(0);
#endif
    return my_alt = a;
}

/* Where a deep call begins, on the alternate stack: the work, then back
 * to the caller's stack (the context ends there; the next call makes a
 * new one).  No local of its own: ASan would leave the frame that never
 * returns poisoned. */
static void alt_main(void)
{
    struct alt *a = my_alt;

#ifdef DIST__ASAN
    __sanitizer_finish_switch_fiber(NULL, &a->from_bottom, &a->from_size);
#endif
    a->fn(a->arg);
#ifdef DIST__ASAN
    __sanitizer_start_switch_fiber(NULL, a->from_bottom, a->from_size);
#endif
#ifdef DIST__TSAN
    __tsan_switch_to_fiber(a->caller_fiber, 0);
#endif
    setcontext(&a->caller);
    abort(); /* setcontext does not return */
}

/* fn(arg) on the alternate stack.  getcontext takes the signal mask as it
 * is now (the caller may have blocked SIGPIPE), so the work runs with it.
 * 0, or -1 when no context could be made. */
static int alt_run(struct alt *a, void (*fn)(void *), void *arg)
{
#ifdef DIST__ASAN
    void *fake = NULL;
#endif

    if (getcontext(&a->callee) != 0)
        return -1;
    a->callee.uc_stack.ss_sp = a->map + a->guard;
    a->callee.uc_stack.ss_size = ALT_SIZE;
    a->callee.uc_link = NULL;
    makecontext(&a->callee, alt_main, 0);
    a->fn = fn;
    a->arg = arg;
#ifdef DIST__TSAN
    a->caller_fiber = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(a->fiber, 0);
#endif
#ifdef DIST__ASAN
    __sanitizer_start_switch_fiber(&fake, a->map + a->guard, ALT_SIZE);
#endif
    if (swapcontext(&a->caller, &a->callee) != 0)
        abort(); /* cannot fail with a context getcontext made */
#ifdef DIST__ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    return 0;
}

int dist__with_stack(size_t need, void (*fn)(void *), void *arg)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    struct alt *a = my_alt;

    if (!stack_lo)
        bounds_find();
    if (sp > stack_lo && sp <= stack_hi && sp - stack_lo >= need) {
        fn(arg); /* the common case: room enough here */
        return 0;
    }
    /* already on the alternate stack (a deep call within one): go on */
    if (a && sp > (uintptr_t)a->map + a->guard &&
        sp <= (uintptr_t)a->map + a->guard + ALT_SIZE) {
        fn(arg);
        return 0;
    }
    if (!(a = alt_get()) || alt_run(a, fn, arg) != 0)
        return ENOMEM;
    return 0;
}
