/*
 * grouphelp.h: how a test program of one group begins (fixture.h): what it
 * includes, the group's server r, its settings and NAME, which makes a
 * fresh lock name of the program, the test and a tag.
 *
 * Include first: it defines _GNU_SOURCE.  The program defines GROUP_PROG
 * (its name, for lock names) and GROUP_SETTINGS (an fx_settings
 * initializer, such as FX_DEFAULTS(0)) before it.  Static: each program
 * gets its own copy.
 */
#ifndef DISTLOCK_GROUPHELP_H
#define DISTLOCK_GROUPHELP_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "harness_proxy.h"
#include "testhelp.h"
#include "fixture.h"

static tu_redis_t r;

/* The group's settings (fixture.h). */
static const struct fx_settings defaults = GROUP_SETTINGS;

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, GROUP_PROG, __func__, tag)

#endif
