/*
 * test_preload_refuse: programs and shims the loader would run without
 * the shim (static, set-user-ID, capabilities, scripts, a shim path the
 * loader splits or cannot load, a library that is not the shim), bad
 * --timeout values and a corrupted .symtab: refused or reported before the
 * program runs unprotected.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
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

/* distlock-run, with the option opt val when opt is not NULL, refuses
 * to start prog: it exits code, says why (and also, when not NULL), and
 * the program never runs (no marker file). */
static void expect_not_started(const char *opt, const char *val,
                               const char *prog, int code, const char *why,
                               const char *also)
{
    struct proc p;

    assert_exit(run_marked(&p, ok_config(), opt, val, prog, 30), code);
    if (also)
        assert_contains(p.ebuf, also);
    assert_contains(p.ebuf, why);
    assert_false(marker_made());
}

static void expect_program_refused(const char *prog, const char *why)
{
    expect_not_started(NULL, NULL, prog, 126, why, NULL);
}

static void test_static_binary_refused(void **state)
{
    (void)state;
    if (!static_bin[0])
        skip(); /* no static C library to link one */
    expect_program_refused(static_bin, "statically linked");
}

static void test_secure_execution_refused(void **state)
{
    char copy[PATH_MAX], cmd[PATH_MAX + 100];

    (void)state;
    path_in(copy, sizeof copy, "setuid-ledger");
    copy_file(ledger_bin, copy, 04755);
    expect_program_refused(copy, "set-user-ID");
    path_in(copy, sizeof copy, "setgid-ledger");
    copy_file(ledger_bin, copy, 02755);
    expect_program_refused(copy, "set-group-ID");
    path_in(copy, sizeof copy, "script");
    {
        FILE *f = fopen(copy, "w");
        assert_non_null(f);
        fprintf(f, "#!/bin/sh\ntouch \"$1\"\n");
        fclose(f);
        chmod(copy, 0755);
    }
    expect_program_refused(copy, "not an ELF executable");
    path_in(copy, sizeof copy, "caps-ledger");
    copy_file(ledger_bin, copy, 0755);
    snprintf(cmd, sizeof cmd,
             "setcap cap_net_bind_service+ep '%s' "
             ">/dev/null 2>&1",
             copy);
    if (system(cmd) == 0)
        expect_program_refused(copy, "file capabilities");
    else
        print_message("setcap unavailable here: the file-capability refusal "
                      "is not exercised\n");
}

/* Issue 15 item 7: a shim path with a space or a colon is split by the
 * loader, which then loads no shim and runs the program unprotected (to
 * its end, or until --timeout), before distlock-run stopped it.  It must
 * be refused before the program runs at all. */
static void test_split_shim_path_refused(void **state)
{
    static const char *const names[] = { "shim copy.so", "shim:copy.so" };
    char copy[PATH_MAX];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_in(copy, sizeof copy, names[i]);
        copy_file(shim, copy, 0755);
        expect_not_started("--preload", copy, ledger_bin, 78,
                           "splits LD_PRELOAD at spaces and colons", NULL);
        unlink(copy);
    }
}

/* The same for a shim the loader skips although distlock-run's look at its
 * ELF header finds nothing wrong (here: its program header entry size
 * broken, "cannot be preloaded ... ignored"), and for one it would crash
 * on (cut short after 4 KiB: SIGBUS): the loader's own trial run, which
 * runs none of the program's code, finds both and the program never runs. */
static void expect_shim_refused(const char *copy, const char *why)
{
    expect_not_started("--preload", copy, ledger_bin, 78, why,
                       "the loader would start it without the shim");
}

static void test_unloadable_shim_refused(void **state)
{
    char copy[PATH_MAX];
    int fd;

    (void)state;
    path_in(copy, sizeof copy, "bad-shim.so");
    copy_file(shim, copy, 0755);
    fd = open(copy, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(
        pwrite(fd, "\x10\x00", 2, offsetof(Elf64_Ehdr, e_phentsize)), 2);
    close(fd);
    expect_shim_refused(copy, "cannot be preloaded");
    assert_int_equal(truncate(copy, 0), 0);
    copy_file(shim, copy, 0755);
    assert_int_equal(truncate(copy, 4096), 0);
    expect_shim_refused(copy, "died of signal");
    unlink(copy);
}

/* Issue 27: a library that loads but is not the shim (libdistlock.so
 * itself, an easy mix-up, or any other) passed the loader's trial, and the
 * program ran to its end on local mutexes before distlock-run found no
 * report.  The shim's handshake, run before the program, refuses it. */
static void test_not_the_shim_refused(void **state)
{
    char libs[2][PATH_MAX], marker[PATH_MAX];
    const char *slash = strrchr(shim, '/');
    const char *cfg;
    struct proc p;
    size_t i;

    (void)state;
    snprintf(libs[0], sizeof libs[0], "%.*s/libdistlock.so",
             (int)(slash - shim), shim);
    snprintf(libs[1], sizeof libs[1], "%s", other_lib);
    assert_true(libs[1][0] != '\0');
    cfg = ok_config();
    for (i = 0; i < 2; i++) {
        assert_exit(run_marked(&p, cfg, "--preload", libs[i], ledger_bin, 30),
                    78);
        assert_contains(p.ebuf, "not the distlock shim: it loads, but does "
                                "not answer the shim's handshake");
        assert_contains(p.ebuf, "was not started");
        assert_false(marker_made());
    }
    /* the shim itself answers: the same run goes ahead */
    assert_exit(run_marked(&p, cfg, "--preload", shim, ledger_bin, 30), 0);
    path_in(marker, sizeof marker, "not-started");
    assert_int_equal(read_count(marker), 1);
}

/* Issue 15 item 14: --timeout 1e300 or inf reached an out-of-range
 * float-to-int conversion (undefined behaviour); nan, 0 and negatives are
 * no timeouts either. */
static void test_timeout_out_of_range_refused(void **state)
{
    static const char *const bad[] = {
        "1e300", "inf", "-inf", "nan", "0", "-1", "86401", "1e", "", "0x"
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_not_started("--timeout", bad[i], ledger_bin, 2,
                           "--timeout: seconds, more than 0 and at most "
                           "86400",
                           NULL);
}

/* Issue 15, minor: a .symtab that cannot be read made the shim fall back to
 * .dynsym silently, and an unresolved name was blamed on a stripped
 * program.  A copy of the ledger with its .symtab's entry size broken must
 * be reported as corrupted. */
static void break_symtab(const char *path)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh;
    int fd = open(path, O_RDWR), i, done = 0;

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &eh, sizeof eh, 0), sizeof eh);
    for (i = 0; i < eh.e_shnum && !done; i++) {
        off_t at = (off_t)(eh.e_shoff + (Elf64_Off)i * sizeof sh);
        assert_int_equal(pread(fd, &sh, sizeof sh, at), sizeof sh);
        if (sh.sh_type == SHT_SYMTAB) {
            sh.sh_entsize = 7;
            assert_int_equal(pwrite(fd, &sh, sizeof sh, at), sizeof sh);
            done = 1;
        }
    }
    close(fd);
    assert_true(done);
}

static void test_corrupted_symtab_reported(void **state)
{
    char copy[PATH_MAX], text[1024];
    const char *cfg;
    struct proc p;

    (void)state;
    path_in(copy, sizeof copy, "broken-symtab-ledger");
    copy_file(ledger_bin, copy, 0755);
    break_symtab(copy);
    snprintf(text, sizeof text,
             "%s[mutex %sledger]\nmatch = symbol "
             "g_ledger_lock\n",
             redis_section, pfx);
    cfg = write_file("symtab.ini", "%s", text);
    assert_exit(proc_run(&p,
                         ARGV(run_bin, "--config", (char *)cfg, "--", copy,
                              "/dev/null", "1", "1"),
                         NULL, 30),
                78);
    assert_contains(p.ebuf, "its .symtab is corrupted (a bad entry size, "
                            "alignment or string table)");
    assert_contains(p.ebuf, "(the program's .symtab is corrupted: only its "
                            "dynamic symbols are known)");
    if (strstr(p.ebuf, "stripped"))
        fail_msg("a corrupted .symtab called stripped: %s", p.ebuf);
}

PL_MAIN(cmocka_unit_test(test_static_binary_refused),
        cmocka_unit_test(test_secure_execution_refused),
        cmocka_unit_test(test_split_shim_path_refused),
        cmocka_unit_test(test_unloadable_shim_refused),
        cmocka_unit_test(test_not_the_shim_refused),
        cmocka_unit_test(test_timeout_out_of_range_refused),
        cmocka_unit_test(test_corrupted_symtab_reported))
