/*
 * test_preload_match: each way a configuration names a mutex (symbol,
 * file-static, struct member, array, init_site, in a library) maps it to a
 * distributed lock held in Redis; an unmapped one stays local; the shim
 * starts by a bare LD_PRELOAD, from a library constructor, and stays out
 * of the programs a child execs.
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

/* ---- every kind of match ------------------------------------------------------ */

struct kind {
    const char *which; /* preload_target's name for it */
    const char *lock;  /* the lock name after the prefix */
};

static const struct kind kinds[] = {
    { "global", "global" },       /* symbol g_global_lock */
    { "static", "static" },       /* symbol FILE:name, file-static */
    { "bank", "bank" },           /* symbol g_bank+32 */
    { "shard2", "shard:2" },      /* symbol g_shards[*] */
    { "errcheck", "err" },        /* re-initialised by the program */
    { "account", "acct:1" },      /* init_site, the 2nd account */
    { "lib", "lib" },             /* file-static in a library */
    { "libglobal", "libglobal" }, /* copy-relocated into the program */
};

static void hold_and_check(const char *cfg, const char *which,
                           const char *lock)
{
    char line[256];
    struct proc p;

    start_target(&p, cfg, "hold", which, NULL);
    expect_line(&p, "held", line, sizeof line, 20);
    if (lock) {
        char k[256];
        long long ttl;

        if (hlen(lock) != 1)
            fail_msg("%s: lock '%s%s' not held in Redis", which, pfx, lock);
        /* lease_ms = 5000 for the shards, the 30 s watchdog elsewhere */
        ttl =
            tu_cmd_int(&pl_redis, "PTTL", lockname(k, sizeof k, lock), NULL);
        if (strncmp(lock, "shard", 5) == 0 ? !(ttl > 0 && ttl <= 5000)
                                           : !(ttl > 5000 && ttl <= 30000))
            fail_msg("%s: lease %lld ms left", which, ttl);
    } else {
        assert_int_equal(prefixed_keys(), 0);
    }
    let_go(&p);
    if (lock)
        assert_int_equal(key_exists(lock), 0);
}

static void test_every_match_kind(void **state)
{
    const char *cfg = target_config(NULL);
    size_t i;

    (void)state;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        hold_and_check(cfg, kinds[i].which, kinds[i].lock);
}

static void test_unmapped_mutex_untouched(void **state)
{
    (void)state;
    hold_and_check(target_config(NULL), "unmapped", NULL);
    assert_int_equal(prefixed_keys(), 0);
}

/* The environment of a bare LD_PRELOAD of the shim (after the sanitizer
 * runtime, if any) with the configuration cfg. */
struct bare_env {
    char preload[2 * PATH_MAX + 20], config[PATH_MAX + 40];
    char *env[3];
};

static void bare_env(struct bare_env *e, const char *cfg)
{
    snprintf(e->preload, sizeof e->preload, "LD_PRELOAD=%s%s%s",
             child_env[0] ? child_env[0] + strlen("LD_PRELOAD=") : "",
             child_env[0] ? ":" : "", shim);
    snprintf(e->config, sizeof e->config, "DISTLOCK_PRELOAD_CONFIG=%s", cfg);
    e->env[0] = e->preload;
    e->env[1] = e->config;
    e->env[2] = NULL;
}

/* The same, with a bare LD_PRELOAD and no launcher. */
static void test_plain_ld_preload(void **state)
{
    struct bare_env e;
    char line[256];
    const char *cfg = target_config(NULL);
    struct proc p;

    (void)state;
    bare_env(&e, cfg);
    proc_start(&p, ARGV(target_bin, "hold", "static"), e.env);
    expect_line(&p, "held", line, sizeof line, 20);
    assert_int_equal(hlen("static"), 1);
    let_go(&p);
    /* a missing configuration stops the program before main */
    snprintf(e.config, sizeof e.config, "DISTLOCK_PRELOAD_CONFIG=%s/none.ini",
             pl_dir);
    assert_exit(proc_run(&p, ARGV(target_bin, "hold", "static"), e.env, 20),
                78);
    assert_contains(p.ebuf, "none.ini: cannot open the configuration");
    assert_int_equal(p.olen, 0);
}

/* A library constructor that runs before the shim's own locks a mapped
 * mutex: start-up happens then, and the call is a mapped one. */
static void test_start_up_from_a_library_constructor(void **state)
{
    struct proc p;

    (void)state;
    target_line("ctor", NULL, "ctor ", 30, "ctor 1");
    assert_exit(proc_run(&p, ARGV(target_bin, "ctor"), NULL, 20), 0);
    assert_contains(p.obuf, "ctor -1"); /* no shim: nobody counted */
    assert_int_equal(prefixed_keys(), 0);
}

/* A child that execs another program (here /bin/sh) inherits LD_PRELOAD
 * and the configuration, whose names are not in it: distlock-run's
 * DISTLOCK_PRELOAD_TARGET keeps the shim out of its way. */
static void test_children_stay_unmapped(void **state)
{
    (void)state;
    target_line("spawn", NULL, "child ", 30, "child 7");
}

/* With a bare LD_PRELOAD, [preload] program = does the same. */
static void test_program_key(void **state)
{
    struct bare_env e;
    char line[256];
    const char *cfg;
    struct proc p;

    (void)state;
    cfg = write_file("program.ini",
                     "[preload]\nprogram = preload_target\n"
                     "[mutex %sglobal]\nmatch = symbol g_global_lock\n",
                     pfx);
    bare_env(&e, cfg);
    proc_start(&p, ARGV(target_bin, "spawn"), e.env);
    expect_line(&p, "child ", line, sizeof line, 30);
    assert_string_equal(line, "child 7");
    assert_exit(proc_end(&p, 20), 0);
}

PL_MAIN(cmocka_unit_test(test_every_match_kind),
        cmocka_unit_test(test_unmapped_mutex_untouched),
        cmocka_unit_test(test_plain_ld_preload),
        cmocka_unit_test(test_start_up_from_a_library_constructor),
        cmocka_unit_test(test_children_stay_unmapped),
        cmocka_unit_test(test_program_key))
