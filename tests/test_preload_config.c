/*
 * test_preload_config: distlock-run refuses a configuration it cannot
 * follow before the program starts, naming the file and the line, never
 * echoing a secret; names that do not resolve are refused (or, when
 * asked, only warned about).
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

static void test_config_errors_name_file_and_line(void **state)
{
    char text[2048];

    (void)state;
    snprintf(text, sizeof text,
             "%s[mutex a]\nmatch = symbol g_ledger_lock\n"
             "bogus = 1\n",
             redis_section);
    expect_refused(text, ":9: unknown key 'bogus' in [mutex a]");
    expect_refused("[redis]\nurl = redis://127.0.0.1:1\n[mutex a]\n"
                   "match symbol g_ledger_lock\n",
                   ":4: expected KEY = VALUE");
    expect_refused("[redis]\non_unavailable = sometimes\n[mutex a]\n"
                   "match = symbol g_ledger_lock\n",
                   ":2: on_unavailable: block, fail or abort");
    expect_refused("[preload]\non_unresolved = never\n[mutex a]\n"
                   "match = symbol g_ledger_lock\n",
                   ":2: on_unresolved: error or warn, not 'never'");
    expect_refused(
        "[redis]\nurl = redis://127.0.0.1:1\nport = 6379\n",
        ":3: unknown key 'port' in [redis] (known: url, lease_ms,");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[mutex a]\n"
                   "match = symbol g_turn_cv\n",
                   ":3: duplicate section [mutex a]");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n\n[mutex b]\n"
                   "match = symbol g_ledger_lock\n",
                   ":5: duplicate mapping: 'symbol g_ledger_lock' is already "
                   "mapped by [mutex a] at line 2");
    /* two spellings of one mutex: found once resolved */
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[mutex b]\n"
                   "match = symbol legacy_ledger.c:g_ledger_lock\n",
                   ":4: duplicate mapping: [b] maps g_ledger_lock");
    expect_refused("[mutex a]\nfair = yes\n", ":1: [mutex a] has no 'match");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[locks]\n",
                   ":3: unknown section [locks]");
    expect_refused(
        "[mutex a]\nmatch = symbol g_ledger_lock\nfair = perhaps\n",
        ":3: fair: yes or no");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n"
                   "  fair = yes\n",
                   ":3: indented line");
    expect_refused("[mutex a]\nmatch = pattern g_*\n", ":2: match: expected");
}

/* Issue 27: a secret in the configuration was echoed in its error: the
 * library's URL reason quoted a tls_key_pass= value, and the reader quoted
 * text after a section header (a url = written on the header's line).
 * Refused, with file and line, and the secret nowhere in the output. */
static void expect_refused_quietly(const char *cfg_text, const char *expect,
                                   const char *secret)
{
    refused(cfg_text, expect, secret);
}

static void test_config_secret_not_echoed(void **state)
{
    (void)state;
    expect_refused_quietly("[redis]\nurl = redis://127.0.0.1:1?"
                           "tls_key_pass=Pa55phrase\n[mutex a]\n"
                           "match = symbol g_ledger_lock\n",
                           ":2: url: ", "Pa55phrase");
    expect_refused_quietly("[redis]\nurl = redis-cluster://u:Sup3rS3cret@"
                           "127.0.0.1:1/x?tls_key_pass=Pa55phrase\n"
                           "[mutex a]\nmatch = symbol g_ledger_lock\n",
                           ":2: url: ", "Pa55phrase");
    expect_refused_quietly("[redis] url = redis://:Sup3rS3cret@127.0.0.1:1\n"
                           "[mutex a]\nmatch = symbol g_ledger_lock\n",
                           ":1: text after the section header",
                           "Sup3rS3cret");
}

/* Issue 15 item 1: a section with more than 16 keys before its 'match'
 * used to forget the later ones, so a second 'match' was parsed too and
 * wrote past the section's two qualifiers: the program died of SIGSEGV. */
static void test_config_many_keys_then_second_match(void **state)
{
    char text[1024];
    size_t n = 0;
    int k;

    (void)state;
    n += (size_t)snprintf(text + n, sizeof text - n, "[mutex a]\n");
    for (k = 1; k <= 16; k++)
        n += (size_t)snprintf(text + n, sizeof text - n, "k%d = 1\n", k);
    snprintf(text + n, sizeof text - n,
             "match = symbol obj:file.c:g_ledger_lock\n"
             "match = symbol obj:file.c:g_turn_cv\n");
    expect_refused(text, ":19: 'match' given twice in this section "
                         "(first at line 18)");
}

/* Issue 15 item 13: a NUL byte cut the line short for fgets, the rest was
 * taken for an over-long line and skipped together with the next line, and
 * every later line number was one too low. */
static void test_config_nul_byte(void **state)
{
    const char *cfg;
    struct proc p;

    (void)state;
    cfg = write_file("nul.ini",
                     "[mutex a]\nmatch = symbol g_ledger_lock\n"
                     "x%cy = 1\nbogus = 2\n\nworse = 3\n",
                     0);
    assert_exit(run_marked(&p, cfg, NULL, NULL, ledger_bin, 30), 78);
    assert_contains(p.ebuf, "nul.ini:3: a NUL byte in the line");
    assert_contains(p.ebuf, "nul.ini:4: unknown key 'bogus' in [mutex a]");
    assert_contains(p.ebuf, "nul.ini:6: unknown key 'worse' in [mutex a]");
    assert_false(marker_made());
}

/* Issue 27: a configuration that never ends a line (/dev/zero) was read
 * for ever inside the program, which never started nor was refused until
 * distlock-run gave up on it.  The shim stops past PL_CONFIG_MAX and says
 * why. */
static void test_config_endless_file(void **state)
{
    struct proc p;

    (void)state;
    assert_exit(run_marked(&p, "/dev/zero", NULL, NULL, ledger_bin, 60), 78);
    assert_contains(p.ebuf, "/dev/zero:1: the configuration is longer than "
                            "1048576 bytes");
    assert_false(marker_made());
}

/* Two different qualifiers that read the same once joined with '|' (the
 * old canonical string) are two mappings, not a duplicate.  [mutex c]
 * lacks its 'match' so that the file is refused either way. */
static void test_config_distinct_qualifiers_not_duplicate(void **state)
{
    const char *cfg;
    struct proc p;

    (void)state;
    cfg = write_file("bad.ini", "%s",
                     "[mutex a]\nmatch = symbol o:f|g:g_ledger_lock\n"
                     "[mutex b]\nmatch = symbol o|f:g:g_ledger_lock\n"
                     "[mutex c]\nfair = yes\n");
    assert_exit(run_marked(&p, cfg, NULL, NULL, ledger_bin, 30), 78);
    assert_contains(p.ebuf, ":5: [mutex c] has no 'match");
    if (strstr(p.ebuf, "duplicate mapping"))
        fail_msg("two mappings taken for one: %s", p.ebuf);
}

static void test_config_missing_file(void **state)
{
    char cfg[PATH_MAX];
    struct proc p;

    (void)state;
    path_in(cfg, sizeof cfg, "no-such.ini");
    assert_exit(run_marked(&p, cfg, NULL, NULL, ledger_bin, 30), 78);
    assert_contains(p.ebuf, "no-such.ini: cannot open the configuration");
    assert_false(marker_made());
}

/* ---- names that do not resolve -------------------------------------------------- */

static void test_unresolved_name_refused(void **state)
{
    char text[1024];
    const char *cfg;
    struct proc p;

    (void)state;
    snprintf(text, sizeof text,
             "%s[mutex %sgone]\nmatch = symbol "
             "g_no_such_lock\n",
             redis_section, pfx);
    expect_refused(text, ":8: [mutex ");
    cfg = write_file("bad.ini", "%s", text);
    assert_exit(run_marked(&p, cfg, NULL, NULL, ledger_bin, 30), 78);
    assert_contains(p.ebuf, "symbol 'g_no_such_lock' in the program or its "
                            "libraries not found");
    assert_contains(p.ebuf, "was not started");
    /* a file that has no such static */
    snprintf(text, sizeof text,
             "[mutex a]\nmatch = symbol "
             "other.c:g_ledger_lock\n");
    expect_refused(text, ":2: [mutex a] symbol 'g_ledger_lock' of other.c");
    /* a library that is not loaded */
    snprintf(text, sizeof text,
             "[mutex a]\nmatch = symbol "
             "libnothere.so:g_ledger_lock\n");
    expect_refused(text, ":2: [mutex a] no loaded object is called "
                         "'libnothere.so'");
    /* a function is not a mutex */
    expect_refused("[mutex a]\nmatch = symbol main\n", ":2: [mutex a] 'main' "
                                                       "is a function");
}

static void test_unresolved_name_warned(void **state)
{
    char text[1024];
    const char *cfg, *count;
    struct proc p;

    (void)state;
    snprintf(text, sizeof text,
             "%s[preload]\non_unresolved = warn\n"
             "[mutex %sgone]\nmatch = symbol g_no_such_lock\n"
             "[mutex %sledger]\nmatch = symbol g_ledger_lock\n",
             redis_section, pfx, pfx);
    cfg = write_file("warn.ini", "%s", text);
    count = write_file("count-warn", "%s", "");
    assert_exit(proc_run(&p,
                         ARGV(run_bin, "--config", (char *)cfg, "--",
                              ledger_bin, (char *)count, "1", "3"),
                         NULL, 60),
                0);
    assert_contains(p.ebuf, "warning: ");
    assert_contains(p.ebuf, "g_no_such_lock");
    assert_int_equal(read_count(count), 3);
}

PL_MAIN(cmocka_unit_test(test_config_errors_name_file_and_line),
        cmocka_unit_test(test_config_secret_not_echoed),
        cmocka_unit_test(test_config_many_keys_then_second_match),
        cmocka_unit_test(test_config_nul_byte),
        cmocka_unit_test(test_config_endless_file),
        cmocka_unit_test(test_config_distinct_qualifiers_not_duplicate),
        cmocka_unit_test(test_config_missing_file),
        cmocka_unit_test(test_unresolved_name_refused),
        cmocka_unit_test(test_unresolved_name_warned))
