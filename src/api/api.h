/* api.h: what the public calls of several kinds share: the attribute
 * objects (attr.c), their bits and the values an init call reads. */
#ifndef DIST_API_API_H
#define DIST_API_API_H

#include <stddef.h>

#include "kinds/kinds.h"

#define DIST__MATTR_FAIR       1u  /* dist_mutexattr_t.__flags */
#define DIST__MATTR_DEFER_ON   2u  /* deferred release: said on */
#define DIST__MATTR_DEFER_OFF  4u  /* said off; neither: the default */
#define DIST__MATTR_COHORT_ON  8u  /* lock cohorting: said on */
#define DIST__MATTR_COHORT_OFF 16u /* said off; neither: the default */
#define DIST__MATTR_ROBUST     32u /* DIST_MUTEX_ROBUST */

#define DIST__SATTR_UNOWNED 1u /* dist_semattr_t.__flags */

/* Whether a mutex made with attribute flags is a cohort one, as
 * dist_mutexattr_getcohort answers. */
int dist__mutexattr_cohort(unsigned flags);

/* One int attribute of an attribute object (attr.c).  A value is kept as
 * it is in its field; a switch as bits of the flags field (on, or off
 * when "not said" must differ from off) and read back as y or x.  A setter
 * takes x or y only.  Where nothing was said (a zero field, or neither
 * bit) a getter answers x, or what dflt says for the flags. */
struct dist__attr {
    const char *what;            /* its name in a setter's refusal */
    const char *noun;            /* a chief one: its kind's object, */
    const char *unknown;         /* and an init's refusal of its value */
    size_t field;                /* offsetof the int it is kept in */
    int x, y;                    /* the two values it takes; x the default */
    const char *xs, *ys;         /* their names; NULL: a plain 0 or 1 */
    unsigned on, off;            /* a switch's bits; both 0: a value */
    int (*dflt)(unsigned flags); /* a switch not said: its value */
};

/* Each kind's chief attribute, which its init call reads. */
extern const struct dist__attr dist__attr_mutex_type;
extern const struct dist__attr dist__attr_rwlock_kind;
extern const struct dist__attr dist__attr_cond_clock;
extern const struct dist__attr dist__attr_sem_mode;

/* The arguments of an init call: obj, the caller's object, given, and
 * d's value in the attribute object attr (NULL: the default) known, into
 * *v.  0, or EINVAL with the message naming which (an attribute object
 * never initialised, or written by hand, holds an unknown value). */
int dist__init_args(const void *obj, const void *attr,
                    const struct dist__attr *d, int *v);

#endif
