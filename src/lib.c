/* lib.c: the library as a whole. */
#include "internal.h"

void dist_shutdown(void)
{
    DIST__KEEP_ERRNO;
    dist__pubsub_shutdown();
    dist__renew_shutdown();
    dist__route_close_thread();
}
