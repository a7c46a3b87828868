/* attr.h: the attribute objects' private bits (attr.c), for the init calls
 * of mutex.c and sem.c, which read them. */
#ifndef DIST_API_ATTR_H
#define DIST_API_ATTR_H

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

#endif
