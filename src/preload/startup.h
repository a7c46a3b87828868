/* The shim's start-up as its callers see it: the table, built at the first
 * call that needs it.  Apart from preload.h because startup.c, which
 * builds the table from every other part of the shim, sits above them:
 * only the entry points (shim.c, sem.c) look up through it. */
#ifndef DIST_PRELOAD_STARTUP_H
#define DIST_PRELOAD_STARTUP_H

#include "preload.h"

#pragma GCC visibility push(hidden)

/* Builds the table once (waiting for another thread doing it) and returns
 * it; during our own start-up calls, the empty table. */
const struct pl_table *pl_startup(void);

/* The table, start-up done first if it is not over yet (a call of the
 * program's may come before our constructor). */
static inline const struct pl_table *pl_table_now(void)
{
    const struct pl_table *t = __atomic_load_n(&pl_tab, __ATOMIC_ACQUIRE);

    return PL_LIKELY(t != NULL) ? t : pl_startup();
}

#pragma GCC visibility pop

#endif
