/* lib.c: the library as a whole. */
#include "internal.h"

void dist_shutdown(void)
{
    DIST__KEEP_ERRNO;
    dist__pubsub_shutdown();
    dist__renew_shutdown();
    dist__conn_close_thread();
}
