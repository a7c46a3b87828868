/*
 * costhelp.h: what the cost test programs share (test_cost_many: many
 * locks made and held; test_cost_pair: commands per lock/unlock pair;
 * test_cost_herd: commands and messages per hand-off in a herd of
 * processes): the server's count of the commands it ran.  Bounds hold on a loaded 2-core machine.
 * TEST_COST_FILTER=<glob> runs some tests of each program only.
 *
 * They are dist_mutex programs: the group's server, settings and names
 * are mutexhelp.h's, with TEST_COST_FILTER as their filter (the program
 * defines MUTEX_FILTER so).  Static: each program gets its own copy.
 * Include after mutexhelp.h.
 */
#ifndef DISTLOCK_COSTHELP_H
#define DISTLOCK_COSTHELP_H

static long long own_infos; /* INFO commands calls_of sent */

/* calls of one command so far, by the server's count (INFO commandstats
 * counts the commands scripts call too: only those no script calls are
 * asked for here, and INFO, see infos_in_scripts) */
static inline long long calls_of(const char *cmd)
{
    long long n = command_calls_on(&r, cmd);

    own_infos++;
    assert_true(n >= 0);
    return n;
}

static inline long long scripts_run(void)
{
    return calls_of("evalsha") + calls_of("eval");
}

/* INFO commands so far but those calls_of sent (an INFO's count leaves
 * itself out): the ones acquire scripts ran to read the replica count,
 * plus what came before the test (compare two of them). */
static inline long long infos_in_scripts(void)
{
    long long before = own_infos;

    return calls_of("info") - before;
}

#endif
