/*
 * fixture: the group fixture the lock tests share (test_mutex, test_faults,
 * test_rwlock, test_fair; test_cluster and test_sentinel use fx_apply): one
 * private redis-server for the whole group, the library pointed at its
 * unix socket with known settings, the settings put back after a test that
 * changed them, and SIGPIPE counted instead of fatal.
 *
 * Plain C on the harness (harness_server.h) and the library; the
 * functions taking void **state are cmocka group or test fixtures.
 */
#ifndef DISTLOCK_FIXTURE_H
#define DISTLOCK_FIXTURE_H

#include "harness_server.h"

/* Library settings a group runs with; a 0 field is left as the library
 * has it. */
struct fx_settings {
    unsigned long watchdog_ms;
    unsigned long timeout_ms;
    unsigned long waiter_ms;
};

/* The library on url with the settings s.  0, or -1 when one is refused. */
int fx_apply(const char *url, const struct fx_settings *s);

/* The group's server and settings, for the fixtures below.  Call before
 * cmocka_run_group_tests; both must stay valid while it runs. */
void fx_use(tu_redis_t *r, const struct fx_settings *s);

/* Group setup: SIGPIPE counted (fx_sigpipes), the server started, the
 * library on its unix socket with the settings.  0 or -1. */
int fx_group_setup(void **state);

/* Group teardown: dist_shutdown, then the server stopped. */
int fx_group_teardown(void **state);

/* Set by a test that changes the library's settings or lost handler and
 * cleared when it put them back itself. */
extern int fx_dirty;

/* Test teardown, a safety net for a test that failed half-way: when
 * fx_dirty, no lost handler and the group's url and settings again. */
int fx_restore_defaults(void **state);

/* SIGPIPEs this process received since fx_group_setup.  The harness
 * blocks its own and its proxy uses MSG_NOSIGNAL, so any comes from the
 * library writing to a dead Redis socket. */
int fx_sigpipes(void);

#endif
