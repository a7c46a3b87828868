/* lib.c: the library as a whole. */
#include <errno.h>

#include "engine/internal.h"
#include "base/stats.h"

void dist_shutdown(void)
{
    DIST__KEEP_ERRNO;
    dist__pubsub_shutdown();
    dist__renew_shutdown();
    dist__route_close_thread();
}

int dist_stats_get(struct dist_stats *s)
{
    DIST__KEEP_ERRNO;
    if (!s)
        return dist__err(EINVAL, "dist_stats_get: the struct is NULL");
    dist__stats_read(s);
    return 0;
}

void dist_stats_reset(void)
{
    DIST__KEEP_ERRNO;
    dist__stats_zero();
}
