/* test_attr.c: the attribute objects of every kind (mutex, rwlock,
 * condition, semaphore), without a server: what init gives, what each
 * setter takes, refuses and says, what each getter answers, and that errno
 * is left alone.  The switches whose default comes from the environment
 * (deferred release, cohorting) are run with both set, so that a getter
 * that forgot the default would answer 0. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distlock.h"

/* rc is EINVAL, and the reason names what was wrong (words NULL: a NULL
 * argument, which sets no reason). */
static void refused(int rc, const char *words)
{
    assert_int_equal(rc, EINVAL);
    if (words && !strstr(dist_last_error(), words))
        fail_msg("reason '%s' lacks '%s'", dist_last_error(), words);
}

/* A getter's answer: 0 and want in *got (read after the call: got is
 * the getter's out argument). */
static void answers(int rc, const int *got, int want)
{
    assert_int_equal(rc, 0);
    assert_int_equal(*got, want);
}

/* The object of each mutexattr test, initialised afresh (its setup). */
static dist_mutexattr_t the_mutexattr;

static int fresh_mutexattr(void **state)
{
    *state = &the_mutexattr;
    return dist_mutexattr_init(&the_mutexattr);
}

static void test_mutexattr_defaults(void **state)
{
    dist_mutexattr_t *a = *state;
    unsigned long lease = 1;
    int v = -1;

    answers(dist_mutexattr_gettype(a, &v), &v, DIST_MUTEX_RECURSIVE);
    answers(dist_mutexattr_getfair(a, &v), &v, 0);
    answers(dist_mutexattr_getrobust(a, &v), &v, DIST_MUTEX_STALLED);
    /* DISTLOCK_DEFERRED_RELEASE and DISTLOCK_COHORT are 1 (main) */
    answers(dist_mutexattr_getdeferred(a, &v), &v, 1);
    answers(dist_mutexattr_getcohort(a, &v), &v, 1);
    assert_int_equal(dist_mutexattr_getlease(a, &lease), 0);
    assert_int_equal(lease, 0);
    assert_int_equal(dist_mutexattr_destroy(a), 0);

    /* an all-zero object reads as the defaults too */
    memset(a, 0, sizeof *a);
    answers(dist_mutexattr_gettype(a, &v), &v, DIST_MUTEX_RECURSIVE);
}

static void test_mutexattr_set_and_get(void **state)
{
    dist_mutexattr_t *a = *state;
    unsigned long lease = 0;
    int v = -1;

    assert_int_equal(dist_mutexattr_settype(a, DIST_MUTEX_ERRORCHECK), 0);
    answers(dist_mutexattr_gettype(a, &v), &v, DIST_MUTEX_ERRORCHECK);
    assert_int_equal(dist_mutexattr_setlease(a, 1500), 0);
    assert_int_equal(dist_mutexattr_getlease(a, &lease), 0);
    assert_int_equal(lease, 1500);

    /* said off beats the environment's on; said on again, on */
    assert_int_equal(dist_mutexattr_setdeferred(a, 0), 0);
    answers(dist_mutexattr_getdeferred(a, &v), &v, 0);
    assert_int_equal(dist_mutexattr_setdeferred(a, 1), 0);
    answers(dist_mutexattr_getdeferred(a, &v), &v, 1);
    assert_int_equal(dist_mutexattr_setcohort(a, 0), 0);
    answers(dist_mutexattr_getcohort(a, &v), &v, 0);

    /* a fair or robust mutex is no cohort one by default; said, it is */
    assert_int_equal(dist_mutexattr_init(a), 0);
    assert_int_equal(dist_mutexattr_setfair(a, 1), 0);
    answers(dist_mutexattr_getfair(a, &v), &v, 1);
    answers(dist_mutexattr_getcohort(a, &v), &v, 0);
    assert_int_equal(dist_mutexattr_setfair(a, 0), 0);
    assert_int_equal(dist_mutexattr_setrobust(a, DIST_MUTEX_ROBUST), 0);
    answers(dist_mutexattr_getrobust(a, &v), &v, DIST_MUTEX_ROBUST);
    answers(dist_mutexattr_getcohort(a, &v), &v, 0);
    assert_int_equal(dist_mutexattr_setcohort(a, 1), 0);
    answers(dist_mutexattr_getcohort(a, &v), &v, 1);
    assert_int_equal(dist_mutexattr_setrobust(a, DIST_MUTEX_STALLED), 0);
    answers(dist_mutexattr_getrobust(a, &v), &v, DIST_MUTEX_STALLED);
}

static void test_mutexattr_refusals(void **state)
{
    dist_mutexattr_t *a = *state;
    int v = -1;

    refused(dist_mutexattr_settype(a, 3),
            "mutex type 3: use DIST_MUTEX_RECURSIVE or "
            "DIST_MUTEX_ERRORCHECK");
    refused(dist_mutexattr_settype(a, 0), "mutex type 0");
    refused(dist_mutexattr_setfair(a, 2), "fair must be 0 or 1, not 2");
    refused(dist_mutexattr_setdeferred(a, -1),
            "deferred must be 0 or 1, not -1");
    refused(dist_mutexattr_setcohort(a, 7), "cohort must be 0 or 1, not 7");
    refused(dist_mutexattr_setrobust(a, 2),
            "mutex robustness 2: use DIST_MUTEX_STALLED or "
            "DIST_MUTEX_ROBUST");
    refused(dist_mutexattr_setlease(a, 24UL * 3600 * 1000 + 1),
            "longer than a day");
    /* nothing refused was kept */
    answers(dist_mutexattr_gettype(a, &v), &v, DIST_MUTEX_RECURSIVE);
    answers(dist_mutexattr_getfair(a, &v), &v, 0);
    answers(dist_mutexattr_getrobust(a, &v), &v, DIST_MUTEX_STALLED);
    answers(dist_mutexattr_getcohort(a, &v), &v, 1);

    refused(dist_mutexattr_init(NULL), NULL);
    refused(dist_mutexattr_destroy(NULL), NULL);
    refused(dist_mutexattr_settype(NULL, DIST_MUTEX_RECURSIVE), NULL);
    refused(dist_mutexattr_gettype(a, NULL), NULL);
    refused(dist_mutexattr_getfair(NULL, &v), NULL);
    refused(dist_mutexattr_setcohort(NULL, 1), NULL);
    refused(dist_mutexattr_getdeferred(a, NULL), NULL);
    refused(dist_mutexattr_setrobust(NULL, DIST_MUTEX_ROBUST), NULL);
    refused(dist_mutexattr_getlease(NULL, NULL), NULL);
}

static void test_other_kinds(void **state)
{
    dist_rwlockattr_t rw;
    dist_condattr_t c;
    dist_semattr_t s;
    clockid_t clock = -1;
    int v = -1;

    (void)state;
    assert_int_equal(dist_rwlockattr_init(&rw), 0);
    assert_int_equal(dist_rwlockattr_setkind(&rw, DIST_RWLOCK_PREFER_WRITER),
                     0);
    refused(dist_rwlockattr_setkind(&rw, 2),
            "rwlock kind 2: use DIST_RWLOCK_PREFER_READER or "
            "DIST_RWLOCK_PREFER_WRITER");
    refused(dist_rwlockattr_setkind(&rw, -1), "rwlock kind -1");
    refused(dist_rwlockattr_setlease(&rw, 24UL * 3600 * 1000 + 1),
            "longer than a day");
    refused(dist_rwlockattr_setkind(NULL, 0), NULL);
    refused(dist_rwlockattr_setlease(NULL, 10), NULL);
    assert_int_equal(dist_rwlockattr_destroy(&rw), 0);

    assert_int_equal(dist_condattr_init(&c), 0);
    assert_int_equal(dist_condattr_getclock(&c, &clock), 0);
    assert_int_equal(clock, CLOCK_REALTIME);
    assert_int_equal(dist_condattr_setclock(&c, CLOCK_MONOTONIC), 0);
    assert_int_equal(dist_condattr_getclock(&c, &clock), 0);
    assert_int_equal(clock, CLOCK_MONOTONIC);
    refused(dist_condattr_setclock(&c, CLOCK_PROCESS_CPUTIME_ID),
            ": use CLOCK_REALTIME or CLOCK_MONOTONIC");
    refused(dist_condattr_getclock(&c, NULL), NULL);
    refused(dist_condattr_destroy(NULL), NULL);

    assert_int_equal(dist_semattr_init(&s), 0);
    answers(dist_semattr_getmode(&s, &v), &v, DIST_SEM_LEASED);
    assert_int_equal(dist_semattr_setmode(&s, DIST_SEM_REDISSON), 0);
    answers(dist_semattr_getmode(&s, &v), &v, DIST_SEM_REDISSON);
    refused(dist_semattr_setmode(&s, 2),
            "semaphore mode 2: use DIST_SEM_LEASED or DIST_SEM_REDISSON");
    refused(dist_semattr_setunowned(&s, 2), "unowned must be 0 or 1, not 2");
    assert_int_equal(dist_semattr_setunowned(&s, 1), 0);
    refused(dist_semattr_setmax(&s, 0), "semaphore maximum 0");
    refused(dist_semattr_setlease(&s, 24UL * 3600 * 1000 + 1),
            "longer than a day");
    refused(dist_semattr_getmode(NULL, &v), NULL);
    assert_int_equal(dist_semattr_destroy(&s), 0);
}

/* An init call reads the kind's chief value as the getter does, and
 * refuses one no setter would have kept (an object written by hand). */
static void test_init_reads_attributes(void **state)
{
    dist_mutexattr_t ma = { 7, 0, 0, { 0, 0 } };
    dist_rwlockattr_t ra = { 5, 0, 0, { 0, 0 } };
    dist_condattr_t ca = { 99, 0, { 0, 0 } };
    dist_semattr_t sa = { 3, 0, 0, 0, { 0, 0 } };
    dist_mutex_t m;
    dist_rwlock_t rw;
    dist_cond_t c;
    dist_sem_t s;

    (void)state;
    refused(dist_mutex_init(&m, "attr-m", &ma),
            "mutex attribute has an unknown type 7");
    refused(dist_rwlock_init(&rw, "attr-rw", &ra),
            "rwlock attribute has an unknown kind 5");
    /* and one an init of the attribute made, written over by hand */
    assert_int_equal(dist_rwlockattr_init(&ra), 0);
    ra.__kind = 7;
    refused(dist_rwlock_init(&rw, "attr-rw", &ra),
            "rwlock attribute has an unknown kind 7");
    assert_int_equal(dist_rwlockattr_destroy(&ra), 0);
    refused(dist_cond_init(&c, "attr-c", &ca),
            "condition attribute has an unknown clock 99");
    refused(dist_sem_init(&s, "attr-s", 1, &sa),
            "semaphore attribute has an unknown mode 3");
    refused(dist_mutex_init(NULL, "attr-m", NULL), "mutex is NULL");
    refused(dist_sem_init(NULL, "attr-s", 1, NULL), "semaphore is NULL");

    /* a zero type is the default, recursive */
    ma.__type = 0;
    assert_int_equal(dist_mutex_init(&m, "attr-m", &ma), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* Refusals and answers alike leave errno as the caller had it. */
static void test_errno_kept(void **state)
{
    dist_mutexattr_t *a = *state;
    int v;

    errno = ERANGE;
    refused(dist_mutexattr_setfair(a, 9), "fair");
    assert_int_equal(errno, ERANGE);
    answers(dist_mutexattr_getcohort(a, &v), &v, 1);
    assert_int_equal(errno, ERANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_mutexattr_defaults, fresh_mutexattr),
        cmocka_unit_test_setup(test_mutexattr_set_and_get, fresh_mutexattr),
        cmocka_unit_test_setup(test_mutexattr_refusals, fresh_mutexattr),
        cmocka_unit_test(test_other_kinds),
        cmocka_unit_test(test_init_reads_attributes),
        cmocka_unit_test_setup(test_errno_kept, fresh_mutexattr),
    };

    /* read at the library's first use: the switches' defaults on */
    setenv("DISTLOCK_DEFERRED_RELEASE", "1", 1);
    setenv("DISTLOCK_COHORT", "1", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
