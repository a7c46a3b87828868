/*
 * test_preload_symbols: every symbol version of the pthread calls a
 * program binds reaches the shim, and libdistlock.so's own calls to those
 * functions bypass it.
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

/* ---- symbol versions --------------------------------------------------------------- */

static int is_wrapped(const char *sym)
{
    static const char *names[] = {
        "pthread_mutex_lock@",         "pthread_mutex_unlock@",
        "pthread_mutex_init@",         "pthread_mutex_destroy@",
        "pthread_mutex_trylock@",      "pthread_mutex_timedlock@",
        "pthread_mutex_clocklock@",    "pthread_cond_wait@",
        "pthread_cond_timedwait@",     "pthread_cond_clockwait@",
        "pthread_rwlock_rdlock@",      "pthread_rwlock_tryrdlock@",
        "pthread_rwlock_timedrdlock@", "pthread_rwlock_clockrdlock@",
        "pthread_rwlock_wrlock@",      "pthread_rwlock_trywrlock@",
        "pthread_rwlock_timedwrlock@", "pthread_rwlock_clockwrlock@",
        "pthread_rwlock_unlock@",      "pthread_rwlock_init@",
        "pthread_rwlock_destroy@",
    };
    size_t i;

    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(sym, names[i], strlen(names[i])) == 0)
            return 1;
    return 0;
}

/* readelf --dyn-syms: "name@VERSION" of undefined (want_defined 0) or
 * defined symbols, one per line, in out. */
static void dyn_syms(const char *file, int want_defined, char *out,
                     size_t len)
{
    char cmd[PATH_MAX + 64], line[512];
    size_t used = 0;
    FILE *f;

    snprintf(cmd, sizeof cmd, "readelf --dyn-syms -W '%s'", file);
    f = popen(cmd, "r");
    assert_non_null(f);
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char ndx[32], name[256];
        char *at;

        if (sscanf(line, "%*s %*s %*s %*s %*s %*s %31s %255s", ndx, name) !=
            2)
            continue;
        if ((strcmp(ndx, "UND") == 0) == (want_defined != 0))
            continue;
        at = strstr(name, "@@");
        if (at)
            memmove(at, at + 1, strlen(at)); /* default version: @ */
        if (!strchr(name, '@'))
            continue;
        used += (size_t)snprintf(out + used, len - used, "%s\n", name);
    }
    pclose(f);
}

/* The target in mode counts the calls that reached the shim ("count <sym>
 * <n>" lines): each at least one, each symbol one the shim defines (of
 * those it wraps only, when wrapped_only).  Returns how many it counted. */
static int shim_counts(struct proc *p, const char *cfg, const char *mode,
                       const char *defined, int wrapped_only)
{
    char line[512], want[300];
    int counted = 0;

    start_target(p, cfg, mode, NULL, NULL);
    while (proc_line(p, line, sizeof line, 30) == 0) {
        char sym[256];
        long n;

        if (sscanf(line, "count %255s %ld", sym, &n) != 2)
            continue;
        counted++;
        if (n < 1)
            fail_msg("%s: %ld calls reached the shim", sym, n);
        snprintf(want, sizeof want, "%s\n", sym);
        if ((!wrapped_only || is_wrapped(want)) && !strstr(defined, want))
            fail_msg("counted but not defined: %s", sym);
    }
    assert_exit(proc_end(p, 30), 0);
    return counted;
}

static void test_symbol_versions_intercepted(void **state)
{
    static char imported[16384], defined[16384];
    char line[512];
    const char *cfg = target_config(NULL);
    const char *s, *nl;
    struct proc p;
    int seen = 0;

    (void)state;
    dyn_syms(target_bin, 0, imported, sizeof imported);
    dyn_syms(shim, 1, defined, sizeof defined);
    /* what glibc 2.36 binds a fresh build to */
    assert_contains(imported, "pthread_mutex_trylock@GLIBC_2.34\n");
    assert_contains(imported, "pthread_mutex_timedlock@GLIBC_2.34\n");
    assert_contains(imported, "pthread_cond_wait@GLIBC_2.3.2\n");
    assert_contains(imported, "pthread_rwlock_rdlock@GLIBC_2.34\n");
    /* the shim defines each of those, in that version */
    for (s = imported; (nl = strchr(s, '\n')) != NULL; s = nl + 1) {
        snprintf(line, sizeof line, "%.*s\n", (int)(nl - s), s);
        if (!is_wrapped(line))
            continue;
        seen++;
        if (!strstr(defined, line))
            fail_msg("the shim does not define %s", line);
    }
    assert_true(seen >= 21);

    /* and each call on a mapped mutex reaches the shim, every version */
    assert_int_equal(shim_counts(&p, cfg, "calls", defined, 1), 16);
    assert_int_equal(shim_counts(&p, cfg, "rwcalls", defined, 0), 22);
    assert_int_equal(prefixed_keys(), 0);

    /* without the shim the same calls work, and nobody counts them */
    assert_exit(proc_run(&p, ARGV(target_bin, "calls"), NULL, 30), 0);
    assert_contains(p.obuf, "count pthread_mutex_lock@GLIBC_2.2.5 -1");
}

/* libdistlock.so's own mutexes and conditions bypass the shim only when
 * every call the library makes to a function the shim interposes goes
 * through its table (src/base/sys.c): none may be a plain call, bound through
 * the PLT (JUMP_SLOT) or the GOT (GLOB_DAT, -fno-plt) to whichever
 * definition comes first, which is the shim's. */
static void test_library_calls_bypass_shim(void **state)
{
    static char defined[16384];
    char lib[PATH_MAX], cmd[PATH_MAX + 64], line[512], want[300];
    const char *slash = strrchr(shim, '/');
    int relocs = 0;
    FILE *f;

    (void)state;
    snprintf(lib, sizeof lib, "%.*s/libdistlock.so", (int)(slash - shim),
             shim);
    defined[0] = '\n'; /* whole lines: sem_close is not close */
    dyn_syms(shim, 1, defined + 1, sizeof defined - 1);
    assert_contains(defined, "\npthread_mutex_init@GLIBC_2.2.5\n");
    snprintf(cmd, sizeof cmd, "readelf -r -W '%s'", lib);
    f = popen(cmd, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) {
        char type[64], name[256];

        if (sscanf(line, "%*s %*s %63s %*s %255s", type, name) != 2)
            continue;
        if (strcmp(type, "R_X86_64_JUMP_SLOT") != 0 &&
            strcmp(type, "R_X86_64_GLOB_DAT") != 0)
            continue;
        relocs++;
        snprintf(want, sizeof want, "\n%s\n", name);
        if (strstr(defined, want))
            fail_msg("libdistlock.so calls %s directly: through the shim "
                     "when it is preloaded (add it to src/base/sys.c)",
                     name);
    }
    pclose(f);
    assert_true(relocs > 10); /* the listing was read */
}

PL_MAIN(cmocka_unit_test(test_symbol_versions_intercepted),
        cmocka_unit_test(test_library_calls_bypass_shim))
