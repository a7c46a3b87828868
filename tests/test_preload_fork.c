/*
 * test_preload_fork: fork() and init_site mappings: a forked child does
 * not hang in the library's fork handler, a [mutex] and a [cond] may share
 * an init_site function, and a condition made again after fork() is the
 * one the child waits on.
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

/* ---- fork() under init_site (issue 27) ---------------------------------------- */

/* prog under distlock-run -v with cfg ends with status 0; the shim's
 * messages in *p.  The programs kill a child that hangs after 60 s: a
 * bound, not a timing. */
static void verbose_runs(struct proc *p, const char *cfg, const char *prog)
{
    assert_exit(proc_run(p,
                         ARGV(run_bin, "-v", "--config", (char *)cfg, "--",
                              (char *)prog),
                         NULL, 120),
                0);
}

/* Whether the shim said it mapped a `kind` ("mutex", "cond") as the lock
 * named pfx + name. */
static int said_mapped(const struct proc *p, const char *kind,
                       const char *name)
{
    char want[128];

    snprintf(want, sizeof want, "%s '%s%s' = ", kind, pfx, name);
    return strstr(p->ebuf, want) != NULL;
}

#define assert_mapped(p, kind, name)                                         \
    do {                                                                     \
        if (!said_mapped((p), (kind), (name)))                               \
            fail_msg("no %s mapped as '%s%s': %s", (kind), pfx, (name),      \
                     (p)->ebuf);                                             \
    } while (0)

/* A configuration mapping the mutexes that function fn initialises. */
static const char *fork_config(const char *fn)
{
    return write_file("fork.ini", "%s[mutex %sfork]\nmatch = init_site %s\n",
                      redis_section, pfx, fn);
}

/* A configuration mapping the mutexes that function mfn initialises as
 * [mutex m], and the conditions cfn does as [cond c] on it. */
static const char *pair_config(const char *m, const char *mfn, const char *c,
                               const char *cfn)
{
    return write_file("pair.ini",
                      "%s[mutex %s%s]\nmatch = init_site %s\n"
                      "[cond %s%s]\nmatch = init_site %s\nmutex = %s%s\n",
                      redis_section, pfx, m, mfn, pfx, c, cfn, pfx, m);
}

/* preload_fork under cfg: its child and then its parent lock, signal and
 * unlock, and it ends. */
static void fork_runs(struct proc *p, const char *cfg)
{
    verbose_runs(p, cfg, fork_bin);
    /* the program's own inits only: main's mutex, and the library's in
     * the child (the library's handler ran, and its init returned) */
    assert_string_equal(p->obuf, "child 0 1 2 1\nparent 0\nparent 0 1 1\n");
    assert_int_equal(prefixed_keys(), 0);
}

/* The child of a fork ran libdistlock's fork handler, whose
 * pthread_mutex_init reached the shim's init_site mapping, and waited for
 * the shim's own lock, which the shim's prepare handler had taken and
 * whose child handler (registered later) had not run yet: every forked
 * child hung once the file had an init_site section, even one of a
 * function that never runs.  The library's own objects now bypass the
 * shim (the counts), and a handler registered before the shim's (the one
 * of libpreload_lib.so) may initialise a lock in the child. */
static void test_fork_with_init_site(void **state)
{
    struct proc p;

    (void)state;
    fork_runs(&p, fork_config("main"));
    assert_mapped(&p, "mutex", "fork:0");
    fork_runs(&p, fork_config("preload_fork_unused"));
    assert_contains(p.ebuf, "mutex that pthread_mutex_init called from "
                            "preload_fork_unused");
}

/* A [mutex] and a [cond] on one init_site function: each maps what it
 * initialises of its kind (refused as a duplicate mapping before).  Two
 * sections of one kind on one function, or two of any kinds on one
 * symbol, stay duplicates. */
static void test_mutex_and_cond_share_init_site(void **state)
{
    struct proc p;

    (void)state;
    fork_runs(&p, pair_config("fm", "main", "fc", "main"));
    assert_mapped(&p, "mutex", "fm:0");
    assert_mapped(&p, "cond", "fc:0");
    expect_refused("[mutex a]\nmatch = init_site main\n[mutex b]\n"
                   "match = init_site main\n",
                   ":4: duplicate mapping: 'init_site main' is already "
                   "mapped by [mutex a] at line 2");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[cond b]\n"
                   "match = symbol g_ledger_lock\n",
                   ":4: duplicate mapping: 'symbol g_ledger_lock' is already "
                   "mapped by [mutex a] at line 2");
}

/* A process-shared condition the parent destroys and makes again after
 * fork(), at the same address from the same init site, is the one its
 * child waits on: the child wakes at the parent's broadcast.  It was the
 * site's next lock, of another name, and the child waited for ever (Open
 * POSIX pthread_cond_destroy/2-1 hung; preload_condfork kills its child
 * after 60 s, a bound, not a timing). */
static void test_cond_made_again_after_fork(void **state)
{
    struct proc p;

    (void)state;
    verbose_runs(&p, pair_config("cfm", "make_mutex", "cfc", "make_cond"),
                 condfork_bin);
    assert_string_equal(p.obuf, "child 0\nparent 0\n");
    assert_mapped(&p, "cond", "cfc:0");
    if (said_mapped(&p, "cond", "cfc:1"))
        fail_msg("the condition made again got a name of its own:\n%s",
                 p.ebuf);
    assert_int_equal(prefixed_keys(), 0);
}

PL_MAIN(cmocka_unit_test(test_fork_with_init_site),
        cmocka_unit_test(test_mutex_and_cond_share_init_site),
        cmocka_unit_test(test_cond_made_again_after_fork))
