/*
 * testhelp.h: helpers the cmocka test programs share (harness_server.h is
 * the plain-C part; this one may use cmocka and is included after it).
 * Everything is static: each program gets its own copy.
 */
#ifndef DISTLOCK_TESTHELP_H
#define DISTLOCK_TESTHELP_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HAVE_VALGRIND_H 1
#endif
#endif

/* The sanitizer a test program is built with: GCC says it by a macro,
 * clang by __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif

/* GCC 12's AddressSanitizer runtime misreads a cancelled thread's unwinding
 * (__asan_handle_no_return reads shadow the unwound frames left poisoned,
 * and reports its own sigaltstack call as a stack overflow): a test that
 * cancels a thread in a wait skips itself under it. */
#ifdef TU_ASAN
#define SKIP_UNDER_ASAN()                                                    \
    do {                                                                     \
        print_message("  skipped under AddressSanitizer (its runtime "       \
                      "misreads a cancelled thread's unwinding)\n");         \
        skip();                                                              \
    } while (0)
#else
#define SKIP_UNDER_ASAN()                                                    \
    do {                                                                     \
    } while (0)
#endif

/* A test ThreadSanitizer cannot follow (why says what it loses) skips
 * itself under it. */
#ifdef TU_TSAN
#define SKIP_UNDER_TSAN(why)                                                 \
    do {                                                                     \
        print_message("  skipped under ThreadSanitizer (%s)\n", why);        \
        skip();                                                              \
    } while (0)
#else
#define SKIP_UNDER_TSAN(why)                                                 \
    do {                                                                     \
    } while (0)
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

/* The owner's count of the lock key on r (its one field), or -1 when it
 * has none. */
static inline long long owner_count(tu_redis_t *r, const char *key)
{
    long long cnt = -1;
    char *own = lock_owner_field(r, key, &cnt);
    int found = own != NULL;

    free(own);
    return found ? cnt : -1;
}

/* A table entry for a test run with *state = arg: one function for cases
 * that differ in a value only, each case under its own name.  teardown may
 * be NULL. */
#define param_test(name, fn, arg, teardown)                                  \
    {                                                                        \
#name, fn, NULL, teardown, (void *)(arg)                             \
    }

/* A fresh name (the program's NAME) and the lock on it, made by init
 * (dist_mutex_init, dist_rwlock_init) with default attributes. */
#define NAMED_LOCK(init, lock, buf, tag)                                     \
    do {                                                                     \
        NAME(buf, tag);                                                      \
        assert_int_equal(init(&(lock), buf, NULL), 0);                       \
    } while (0)

/* Runs only the tests whose names match the glob in the environment
 * variable env, when it is set (e.g. TEST_MUTEX_FILTER=test_fork*). */
static inline void filter_from_env(const char *env)
{
    const char *filter = getenv(env);

    if (filter && *filter)
        cmocka_set_test_filter(filter);
}

/* For a setting the library reads from its environment once: the test
 * runs this program again with var=value, its copy running that test
 * alone (filter_env names the program's filter variable), and asserts
 * that the copy passed.  In the copy, rerun_child() is true and the test
 * makes its checks instead. */
#define TU_ENV_CHILD "TU_ENV_CHILD"

static inline int rerun_child(void)
{
    return getenv(TU_ENV_CHILD) != NULL;
}

static inline void rerun_with_env(const char *prog, const char *filter_env,
                                  const char *test, const char *var,
                                  const char *value)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        setenv(var, value, 1);
        setenv(TU_ENV_CHILD, "1", 1);
        setenv(filter_env, test, 1);
        execl("/proc/self/exe", prog, (char *)NULL);
        _exit(127);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* The lock hash key on r has one owner, owner when not NULL, holding it
 * once. */
static inline void assert_held_once(tu_redis_t *r, const char *key,
                                    const char *owner)
{
    long long cnt = 0;
    char *own = lock_owner_field(r, key, &cnt);

    assert_non_null(own);
    if (owner != NULL)
        assert_string_equal(own, owner);
    assert_int_equal(cnt, 1);
    free(own);
}

#ifdef DISTLOCK_H /* programs of the library (test_preload_* are not) */
struct trylock_arg {
    dist_mutex_t *m;
    int rc;
};

static inline void *trylock_main(void *arg)
{
    struct trylock_arg *a = arg;

    a->rc = dist_mutex_trylock(a->m);
    if (a->rc == 0)
        dist_mutex_unlock(a->m);
    return NULL;
}

/* What a trylock of m (unlocked again on success) gives in a thread of its
 * own, whose holds are not the caller's: in the caller's thread a hold
 * would count as its own re-entry. */
static inline int trylock_in_thread(dist_mutex_t *m)
{
    struct trylock_arg ta = { m, -1 };
    pthread_t th;

    assert_int_equal(pthread_create(&th, NULL, trylock_main, &ta), 0);
    pthread_join(th, NULL);
    return ta.rc;
}

/* A mutex attribute's on/off switch (deferred release, cohorting) through
 * its set and get: 0 by default (no environment), then 1, then 0 as set;
 * EINVAL for 2, a NULL attribute or a NULL answer. */
static inline void assert_attr_switch(int (*set)(dist_mutexattr_t *, int),
                                      int (*get)(const dist_mutexattr_t *,
                                                 int *))
{
    dist_mutexattr_t a;
    int v = -1;

    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(get(&a, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(set(&a, 1), 0);
    assert_int_equal(get(&a, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(set(&a, 0), 0);
    assert_int_equal(get(&a, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(set(&a, 2), EINVAL);
    assert_int_equal(set(NULL, 1), EINVAL);
    assert_int_equal(get(&a, NULL), EINVAL);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
}
#endif

/* n bytes of zeroed memory shared with the forked children to come, for
 * what they report (munmap when done); fails the test when there is none. */
static inline void *shared_mem(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    assert_true(p != MAP_FAILED);
    return memset(p, 0, n);
}

/* EVAL and EVALSHA calls r has run so far (INFO commandstats); -1 when
 * INFO fails. */
static inline long long script_calls_on(tu_redis_t *r)
{
    static const char *const keys[] = { "cmdstat_evalsha:calls=",
                                        "cmdstat_eval:calls=" };
    char *info = tu_cmd_str(r, "INFO", "commandstats", NULL);
    long long n = 0;
    size_t i;

    if (!info)
        return -1;
    for (i = 0; i < 2; i++) {
        const char *p = strstr(info, keys[i]);
        if (p)
            n += atoll(p + strlen(keys[i]));
    }
    free(info);
    return n;
}

/* Channels with subscribers on r (PUBSUB CHANNELS) once there are none,
 * or when secs have passed. */
static inline long long channels_left(tu_redis_t *r, double secs)
{
    double end = tu_now() + secs;
    redisReply *x;
    long long n;

    for (;;) {
        x = tu_cmd(r, "PUBSUB", "CHANNELS", NULL);
        assert_non_null(x);
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        n = (long long)x->elements;
        freeReplyObject(x);
        if (n == 0 || tu_now() >= end)
            return n;
        tu_sleep_ms(50);
    }
}

/* Subscribers of chan on r (PUBSUB NUMSUB); -1 on error. */
static inline long long pubsub_numsub(tu_redis_t *r, const char *chan)
{
    redisReply *x = tu_cmd(r, "PUBSUB", "NUMSUB", chan, NULL);
    long long n = -1;

    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[1]->type == REDIS_REPLY_INTEGER)
        n = x->element[1]->integer;
    if (x)
        freeReplyObject(x);
    return n;
}

/* One byte from fd within timeout_ms: the byte (0..255), or -1. */
static inline int read_byte(int fd, int timeout_ms)
{
    struct pollfd pfd = { fd, POLLIN, 0 };
    unsigned char b;

    if (poll(&pfd, 1, timeout_ms) != 1 || read(fd, &b, 1) != 1)
        return -1;
    return b;
}

/* fork with a pipe from the child to the parent: *fd is its write end in
 * the child (0 returned), its read end in the parent (the child's pid
 * returned); each closes the other end. */
static inline pid_t fork_piped(int *fd)
{
    int fds[2];
    pid_t pid;

    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    close(fds[pid == 0 ? 0 : 1]);
    *fd = fds[pid == 0 ? 1 : 0];
    return pid;
}

/* A forked child that calls lock(obj), writes its result (one byte) on a
 * pipe and then sleeps until it is killed.  Returns its pid once the
 * result came, the result in *rc; if none came within 10 s (*rc -1) or
 * the lock failed, the child is killed and reaped and -1 returned. */
static inline pid_t fork_locked(int (*lock)(void *), void *obj, int *rc)
{
    int fd;
    pid_t pid = fork_piped(&fd);

    if (pid == 0) {
        unsigned char c = (unsigned char)lock(obj);

        if (write(fd, &c, 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    *rc = read_byte(fd, 10000);
    close(fd);
    if (*rc != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* A forked child that says it started (one byte on a pipe) and then runs
 * body(arg), which exits.  Returns its pid once it said so; when it did not
 * within 10 s, kills and reaps it and fails the test. */
static inline pid_t fork_started(void (*body)(void *), void *arg)
{
    int fd, said;
    pid_t pid = fork_piped(&fd);

    if (pid == 0) {
        if (write(fd, "w", 1) != 1)
            _exit(2);
        body(arg);
        _exit(2);
    }
    said = read_byte(fd, 10000);
    close(fd);
    if (said < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("the child did not start");
    }
    return pid;
}

/* ---- the server's counts and a replica (test_cost_*, test_acl) ---------- */

/* Calls of cmd (lower case) the server r has run so far, by its own count
 * (INFO commandstats: the commands scripts run count too, under their
 * names); -1 when INFO fails. */
static inline long long command_calls_on(tu_redis_t *r, const char *cmd)
{
    char *info = tu_cmd_str(r, "INFO", "commandstats", NULL), key[64];
    const char *p;
    long long n = 0;

    if (!info)
        return -1;
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    if ((p = strstr(info, key)) != NULL)
        n = atoll(p + strlen(key));
    free(info);
    return n;
}

/* A replica of master started as *rep, and synced: the master counts it
 * (WAIT 1 answers 1).  Fails the test when it is not within about 10 s. */
static inline void start_replica(tu_redis_t *master, tu_redis_t *rep)
{
    const char *args[4] = { "--replicaof", "127.0.0.1", NULL, NULL };
    char port[16];
    tu_redis_opts o;
    redisReply *x;
    int i;

    /* a full sync without the 5 s wait for more replicas */
    x = tu_cmd(master, "CONFIG", "SET", "repl-diskless-sync-delay", "0",
               NULL);
    assert_non_null(x);
    freeReplyObject(x);
    snprintf(port, sizeof port, "%d", master->port);
    args[2] = port;
    memset(&o, 0, sizeof o);
    o.args = args;
    assert_int_equal(tu_redis_start_opts(rep, &o), 0);
    for (i = 0; i < 100 && tu_cmd_int(master, "WAIT", "1", "100", NULL) < 1;
         i++)
        ;
    assert_true(i < 100);
}

/* The int a param_test case was given, as a pointer to it. */
static inline int param_int(void **state)
{
    return *(const int *)*state;
}

/* The name of a key or channel the library derives from a lock's name:
 * "<kind>:{<name>}" (the braces keep them in the lock's hash slot). */
static inline void derived_name(char *buf, size_t len, const char *kind,
                                const char *name)
{
    snprintf(buf, len, "%s:{%s}", kind, name);
}

/* cmd (a command of one key that answers a number: EXISTS, ZCARD, ...) on
 * the key of kind derived from name, on r (tu_cmd_int: -1 for nil or an
 * error). */
static inline long long derived_int(tu_redis_t *r, const char *cmd,
                                    const char *kind, const char *name)
{
    char key[1024]; /* the tests' names are short */

    derived_name(key, sizeof key, kind, name);
    return tu_cmd_int(r, cmd, key, NULL);
}

/* ---- a mutex attribute's values (test_mutex_hold, test_robust) --------- */
#ifdef DISTLOCK_H
/* A mutex attribute of a that takes values through set and get: def
 * where a is new, good once set, and EINVAL for each of the nbad values
 * of bad, which leave good in place. */
static inline void
assert_attr_values(dist_mutexattr_t *a, int (*set)(dist_mutexattr_t *, int),
                   int (*get)(const dist_mutexattr_t *, int *), int def,
                   int good, const int *bad, size_t nbad)
{
    int v = -1;
    size_t i;

    assert_int_equal(get(a, &v), 0);
    assert_int_equal(v, def);
    assert_int_equal(set(a, good), 0);
    for (i = 0; i < nbad; i++)
        assert_int_equal(set(a, bad[i]), EINVAL);
    assert_int_equal(get(a, &v), 0);
    assert_int_equal(v, good);
}
#endif

#endif
