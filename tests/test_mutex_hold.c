/*
 * test_mutex_hold: who holds a dist_mutex and how often: reentrant counts,
 * the error-checking type, trylock against another thread, unlock by one
 * that does not hold it, two objects of one name, a forked child's own
 * identity and the static initializer (names the library refuses and
 * destroy of a held lock: test_names_rules; the fencing token of a hold:
 * test_tokens).
 * Against a private redis-server (mutexhelp.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_proxy.h"
#include "testhelp.h"
#include "fixture.h"

#define MUTEX_PROG "test_mutex_hold"
#include "mutexhelp.h"

/* The owner field of name's hash (malloc'd), which must be there and hold
 * count holds. */
static char *owner_holding(const char *name, long long count)
{
    long long cnt = -1;
    char *owner = owner_field(name, &cnt);

    assert_non_null(owner);
    assert_int_equal(cnt, count);
    return owner;
}

static void test_reentrant_hold_counts(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    char *owner;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), 0);

    owner = owner_holding(name, 3);
    assert_int_equal(hget_count(name, owner), 3);
    assert_true(tu_cmd_int(&r, "PTTL", name, NULL) > 0);

    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(hget_count(name, owner), 2);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(hget_count(name, owner), 1);
    fx_last_unlock(m);
    free(owner);
}

static void test_errorcheck(void **state)
{
    static const int bad_types[] = { 0, 3, -1 };
    const char *name;
    dist_mutex_t *m;
    dist_mutexattr_t a;

    (void)state;
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_attr_values(&a, dist_mutexattr_settype, dist_mutexattr_gettype,
                       DIST_MUTEX_RECURSIVE, DIST_MUTEX_ERRORCHECK, bad_types,
                       3);

    m = fx_mutex("m", &a);
    name = fx_name(m);
    assert_int_equal(dist_mutexattr_destroy(&a), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_lock(m), EDEADLK);
    assert_int_equal(dist_mutex_trylock(m), EBUSY); /* POSIX: trylock
                                                        * finds it taken */
    free(owner_holding(name, 1)); /* the refused relocks changed nothing */
    fx_last_unlock(m);
}

/* Another thread's op on m (held by this one) is refused with rc, and the
 * library says why. */
static void refused_in_thread(dist_mutex_t *m, enum op op, int rc)
{
    struct oneshot o;

    run_oneshot(&o, m, op);
    assert_int_equal(o.rc, rc);
    assert_true(o.err[0] != 0);
}

static void test_trylock_busy(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    struct oneshot o;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    refused_in_thread(m, OP_TRYLOCK_UNLOCK, EBUSY);
    assert_int_equal(hash_fields(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);

    run_oneshot(&o, m, OP_TRYLOCK_UNLOCK);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.rc2, 0);
}

static void test_unlock_not_owner(void **state)
{
    dist_mutex_t *m = fx_mutex("m", NULL);
    const char *name = fx_name(m);
    dist_mutex_t *m2 = fx_mutex("unheld", NULL);

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);

    refused_in_thread(m, OP_UNLOCK, EPERM);
    free(owner_holding(name, 1)); /* main's hold is untouched */

    assert_int_equal(dist_mutex_unlock(m2), EPERM);
    assert_true(dist_last_error()[0] != 0);

    assert_int_equal(dist_mutex_unlock(m), 0);
}

static void test_same_name_two_objects(void **state)
{
    dist_mutex_t *a = fx_mutex("m", NULL), *b = fx_mutex_on(fx_name(a), NULL);
    const char *name = fx_name(a);
    char *owner;

    (void)state;
    assert_int_equal(dist_mutex_lock(a), 0);
    assert_int_equal(dist_mutex_lock(b), 0);
    owner = owner_holding(name, 2);
    assert_int_equal(dist_mutex_unlock(b), 0);
    assert_int_equal(hget_count(name, owner), 1);
    free(owner);
    fx_last_unlock(a);
    assert_int_equal(dist_mutex_unlock(b), EPERM);
}

#define STATIC_NAME "test_mutex:static_initializer:fixed-name-7f3a9c"
static dist_mutex_t sm = DIST_MUTEX_INITIALIZER(STATIC_NAME);

static void test_static_initializer(void **state)
{
    dist_mutex_t z;

    (void)state;
    assert_true(tu_cmd_int(&r, "DEL", STATIC_NAME, NULL) >= 0);
    assert_int_equal(dist_mutex_lock(&sm), 0);
    free(owner_holding(STATIC_NAME, 1));
    assert_int_equal(dist_mutex_trylock(&sm), 0);
    assert_int_equal(hget_count(STATIC_NAME, "nonexistent"), -1);
    assert_int_equal(dist_mutex_unlock(&sm), 0);
    assert_int_equal(dist_mutex_unlock(&sm), 0);
    mutex_done(&sm, STATIC_NAME);

    memset(&z, 0, sizeof z);
    assert_int_equal(dist_mutex_lock(&z), EINVAL);
    assert_true(dist_last_error()[0] != 0);
    assert_int_equal(dist_mutex_trylock(&z), EINVAL);
    assert_int_equal(dist_mutex_unlock(&z), EINVAL);
}

/* Shared memory for results of forked children (one int per child). */
static int *shared_ints(size_t n)
{
    int *p = mmap(NULL, n * sizeof *p, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    size_t i;

    if (p == MAP_FAILED)
        return NULL;
    for (i = 0; i < n; i++)
        p[i] = -1; /* not reported */
    return p;
}

/* The child reports code both in shared memory and as its exit status. */
static void child_exit(int *slot, int code)
{
    *slot = code;
    _exit(code);
}

/* Length of the uuid part of an owner field "<uuid>:<thread n>". */
static size_t uuid_len(const char *owner)
{
    const char *c = strrchr(owner, ':');
    return c ? (size_t)(c - owner) : strlen(owner);
}

static void test_fork_child_identity(void **state)
{
    dist_mutex_t *m = fx_mutex("parent", NULL);
    const char *name = fx_name(m);
    char name2[200]; /* the child's own lock */
    char *powner;
    pid_t pid;
    int st = -1, rep;
    int *slot = shared_ints(1);

    (void)state;
    assert_non_null(slot);
    NAME(name2, "child");
    assert_int_equal(dist_mutex_lock(m), 0);
    powner = owner_holding(name, 1);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dist_mutex_t m2;
        char *cowner;
        long long c2 = -1;
        int code = 0;

        if (dist_mutex_trylock(m) != EBUSY)
            child_exit(slot, 10);
        if (dist_mutex_unlock(m) != EPERM)
            child_exit(slot, 11);
        if (dist_mutex_init(&m2, name2, NULL) != 0)
            child_exit(slot, 12);
        if (dist_mutex_lock(&m2) != 0)
            child_exit(slot, 13);
        cowner = owner_field(name2, &c2);
        if (!cowner || c2 != 1)
            code = 14;
        else if (uuid_len(cowner) == uuid_len(powner) &&
                 memcmp(cowner, powner, uuid_len(cowner)) == 0)
            code = 15;
        free(cowner);
        if (dist_mutex_unlock(&m2) != 0 && !code)
            code = 16;
        if (!code && key_exists(name2) != 0)
            code = 17;
        if (!code && hget_count(name, powner) != 1) /* parent's untouched */
            code = 18;
        child_exit(slot, code);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    rep = *slot;
    munmap(slot, sizeof *slot);
    if (rep != 0 || !child_exit_ok(st, rep))
        fail_msg("child: reported %d, status 0x%x (exit code %d)", rep, st,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    assert_int_equal(hget_count(name, powner), 1);
    free(powner);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(key_exists(name), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX_TEST(test_reentrant_hold_counts), FX_TEST(test_errorcheck),
        FX_TEST(test_trylock_busy),          FX_TEST(test_unlock_not_owner),
        FX_TEST(test_same_name_two_objects), FX_TEST(test_static_initializer),
        FX_TEST(test_fork_child_identity),
    };
    return MUTEX_RUN(tests);
}
