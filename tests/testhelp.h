/*
 * testhelp.h: helpers the cmocka test programs share (harness_server.h is
 * the plain-C part; this one may use cmocka and is included after it).
 * Everything is static: each program gets its own copy.
 */
#ifndef DISTLOCK_TESTHELP_H
#define DISTLOCK_TESTHELP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HAVE_VALGRIND_H 1
#endif
#endif

static inline int on_valgrind(void)
{
#ifdef HAVE_VALGRIND_H
    return RUNNING_ON_VALGRIND;
#else
    return 0;
#endif
}

/* Extra slack (seconds) on upper time bounds: processing only, never a
 * lease or deadline itself.  Larger under valgrind, which slows everything. */
static inline double slack(double s)
{
    return on_valgrind() ? s * 4 : s;
}

/* Did the child exit with the code it reported?  Under valgrind a forked
 * child's exit status is replaced by --error-exitcode when its exit-time leak
 * check finds the parent's state the library deliberately abandons in a
 * child (the renewal and pub/sub threads' connections), so 9 is accepted
 * there for a child that reported success. */
static inline int child_exit_ok(int st, int code)
{
    if (!WIFEXITED(st))
        return 0;
    if (WEXITSTATUS(st) == code)
        return 1;
    return on_valgrind() && code == 0 && WEXITSTATUS(st) == 9;
}

#define assert_dbl_range(v, lo, hi)                                          \
    do {                                                                     \
        double v_ = (v), lo_ = (lo), hi_ = (hi);                             \
        if (!(v_ >= lo_ && v_ <= hi_))                                       \
            fail_msg("%s = %.3f s, expected within [%.3f, %.3f]", #v, v_,    \
                     lo_, hi_);                                              \
    } while (0)

/* A lock name no other test, program or run shares:
 * "<prog>:<test>:<tag>:<pid>".  Use through a NAME(buf, tag) macro that
 * passes the program and __func__. */
static inline void test_lock_name(char *buf, size_t len, const char *prog,
                                  const char *test, const char *tag)
{
    snprintf(buf, len, "%s:%s:%s:%ld", prog, test, tag, (long)getpid());
}

/* The only field of the lock hash key on r (the owner), strdup'd, and its
 * value (the hold count) in *count.  NULL when the key does not have
 * exactly one field. */
static inline char *lock_owner_field(tu_redis_t *r, const char *key,
                                     long long *count)
{
    redisReply *x = tu_cmd(r, "HGETALL", key, NULL);
    char *f = NULL;

    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[0]->type == REDIS_REPLY_STRING &&
        x->element[1]->type == REDIS_REPLY_STRING) {
        f = strdup(x->element[0]->str);
        if (count)
            *count = strtoll(x->element[1]->str, NULL, 10);
    }
    if (x)
        freeReplyObject(x);
    return f;
}

/* Runs only the tests whose names match the glob in the environment
 * variable env, when it is set (e.g. TEST_MUTEX_FILTER=test_fork*). */
static inline void filter_from_env(const char *env)
{
    const char *filter = getenv(env);

    if (filter && *filter)
        cmocka_set_test_filter(filter);
}

/* CLOCK_REALTIME secs from now, for timed calls. */
static inline struct timespec realtime_in(double secs)
{
    struct timespec ts;
    long long ns;

    clock_gettime(CLOCK_REALTIME, &ts);
    ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec +
         (long long)(secs * 1e9);
    ts.tv_sec = (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    if (ts.tv_nsec < 0) {
        ts.tv_nsec += 1000000000L;
        ts.tv_sec--;
    }
    return ts;
}

#endif
