/*
 * costhelp.h: what the cost test programs share (test_cost_many: many
 * locks made and held; test_cost_pair: commands per lock/unlock pair;
 * test_cost_herd: commands and messages per hand-off in a herd of
 * processes): the group's server and settings and the server's count of
 * the commands it ran.  Bounds hold on a loaded 2-core machine.
 * TEST_COST_FILTER=<glob> runs some tests of each program only.
 *
 * Static: each program gets its own copy.  Include after fixture.h; the
 * program defines COST_PROG (its name, for lock names) before it.
 */
#ifndef DISTLOCK_COSTHELP_H
#define DISTLOCK_COSTHELP_H

/* Each program uses a part of these. */
#define COST_FN static __attribute__((unused))

static tu_redis_t r;
static const struct fx_settings defaults = FX_DEFAULTS(0);

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, COST_PROG, __func__, tag)

/* Runs the program's tests (main's last step). */
#define COST_RUN(tests) fx_run_group(tests, &r, &defaults, "TEST_COST_FILTER")

static long long own_infos; /* INFO commands calls_of sent */

/* calls of one command so far, by the server's count (INFO commandstats
 * counts the commands scripts call too: only those no script calls are
 * asked for here, and INFO, see infos_in_scripts) */
COST_FN long long calls_of(const char *cmd)
{
    long long n = command_calls_on(&r, cmd);

    own_infos++;
    assert_true(n >= 0);
    return n;
}

COST_FN long long scripts_run(void)
{
    return calls_of("evalsha") + calls_of("eval");
}

/* INFO commands so far but those calls_of sent (an INFO's count leaves
 * itself out): the ones acquire scripts ran to read the replica count,
 * plus what came before the test (compare two of them). */
COST_FN long long infos_in_scripts(void)
{
    long long before = own_infos;

    return calls_of("info") - before;
}

#endif
