/*
 * test_preload_legacy: a program that knows nothing of distlock, under
 * the LD_PRELOAD shim: legacy_ledger's copies in four processes count
 * exactly, and legacy_repair's robust mutex reports a dead owner and an
 * unrecoverable state across processes as pthread does within one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "preload_help.h"
#include "testhelp.h"

/* ---- the legacy program, 4 copies ----------------------------------------------- */

#define COPIES  4
#define THREADS 2
#define POSTS   30

static void test_legacy_four_copies_exact(void **state)
{
    const char *cfg, *count;
    struct proc p[COPIES];
    char posts[16], threads[16];
    int i, st;

    (void)state;
    cfg = write_file("ledger.ini",
                     "%s"
                     "[mutex %sledger]\n"
                     "match = symbol legacy_ledger.c:g_ledger_lock\n"
                     "fair = no\n",
                     redis_section, pfx);
    count = write_file("count-shim", "%s", "");
    snprintf(posts, sizeof posts, "%d", POSTS);
    snprintf(threads, sizeof threads, "%d", THREADS);
    for (i = 0; i < COPIES; i++)
        proc_start(&p[i],
                   ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                        (char *)count, threads, posts),
                   NULL);
    for (i = 0; i < COPIES; i++) {
        st = proc_end(&p[i], 120);
        assert_exit(st, 0);
    }
    assert_int_equal(read_count(count), COPIES * THREADS * POSTS);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- a robust mutex: the legacy program's own EOWNERDEAD handling ------------ */

/* legacy_repair MODE under distlock-run with cfg on the record file; its
 * stdout's first line into out (may be NULL).  Returns the wait status. */
static int repair(const char *cfg, const char *file, const char *mode,
                  char *out, size_t len)
{
    struct proc p;
    int st;

    st = proc_run(&p,
                  ARGV(run_bin, "--config", (char *)cfg, "--", repair_bin,
                       (char *)file, (char *)mode),
                  NULL, 60);
    if (out) {
        char *nl;
        snprintf(out, len, "%.*s", (int)p.olen, p.obuf);
        if ((nl = strchr(out, '\n')) != NULL)
            *nl = '\0';
    }
    return st;
}

/* A copy that dies between its two writes leaves the record half-written:
 * the next copy, in another process, is told EOWNERDEAD by its own
 * pthread_mutex_lock, repairs, and marks it consistent; the one after it
 * gets 0.  A copy that unlocks without repairing leaves the mutex not
 * recoverable: the next copy's lock says ENOTRECOVERABLE. */
static void test_legacy_robust_repair(void **state)
{
    const char *cfg, *file;
    char key[256], line[256];
    redisReply *x;
    int st;

    (void)state;
    cfg = write_file("repair.ini",
                     "%s"
                     "[mutex %srecord]\n"
                     "match = symbol legacy_repair.c:g_record_lock\n"
                     "lease_ms = 600\n",
                     redis_section, pfx);
    file = write_file("record", "%s", "");
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "posted 1 1");
    st = repair(cfg, file, "crash", line, sizeof line);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL);
    assert_string_equal(line, "crashing");
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "repaired 3 3");
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "posted 4 4");

    st = repair(cfg, file, "crash", line, sizeof line);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL);
    assert_exit(repair(cfg, file, "abandon", line, sizeof line), 0);
    assert_string_equal(line, "EOWNERDEAD");
    assert_exit(repair(cfg, file, "lock", line, sizeof line), 0);
    assert_string_equal(line, "ENOTRECOVERABLE");
    /* the operator repairs the record, then resets the mutex */
    file = write_file("record", "%019d %019d\n", 5, 5);
    snprintf(key, sizeof key, "distlock_robust:{%srecord}", pfx);
    x = tu_cmd(&pl_redis, "DEL", key, NULL);
    assert_non_null(x);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "posted 6 6");
}

/* Without the shim the same run need not be exact: it must just not crash. */
static void test_legacy_without_shim_runs(void **state)
{
    struct proc p[COPIES];
    const char *count;
    char posts[16], threads[16];
    long n;
    int i;

    (void)state;
    count = write_file("count-plain", "%s", "");
    snprintf(posts, sizeof posts, "%d", POSTS);
    snprintf(threads, sizeof threads, "%d", THREADS);
    for (i = 0; i < COPIES; i++)
        proc_start(&p[i], ARGV(ledger_bin, (char *)count, threads, posts),
                   NULL);
    for (i = 0; i < COPIES; i++)
        assert_exit(proc_end(&p[i], 120), 0);
    n = read_count(count);
    print_message("without the shim: %ld of %d posts counted\n", n,
                  COPIES * THREADS * POSTS);
    assert_true(n >= 1 && n <= COPIES * THREADS * POSTS);
}

PL_MAIN(cmocka_unit_test(test_legacy_four_copies_exact),
        cmocka_unit_test(test_legacy_robust_repair),
        cmocka_unit_test(test_legacy_without_shim_runs))
