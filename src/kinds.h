/* kinds.h: the kinds of lock the engine runs (engine.h), for the public
 * API files. */
#ifndef DIST_KINDS_H
#define DIST_KINDS_H

#include "engine.h"

extern const struct dist__kind dist__mutex_kind;    /* kind_mutex.c */
extern const struct dist__kind dist__fair_kind;     /* kind_mutex.c */
extern const struct dist__kind dist__rwlock_kind;   /* kind_rwlock.c */

/* struct dist__obj.flags */
#define DIST__MUTEX_ERRORCHECK 1
#define DIST__RWLOCK_PREFER_WRITER 1

#endif
