/*
 * fixture: one private server for a group of lock tests and the library's
 * settings around it (fixture.h).
 */
#include "fixture.h"

#include <signal.h>
#include <string.h>

#include "distlock.h"

int fx_dirty;

static tu_redis_t *g_redis;
static const struct fx_settings *g_settings;
static volatile sig_atomic_t g_sigpipes;

static void on_sigpipe(int sig)
{
    (void)sig;
    g_sigpipes = g_sigpipes + 1;
}

int fx_sigpipes(void)
{
    return (int)g_sigpipes;
}

int fx_apply(const char *url, const struct fx_settings *s)
{
    if (dist_set_url(url) != 0)
        return -1;
    if (s->watchdog_ms != 0 && dist_set_watchdog_ms(s->watchdog_ms) != 0)
        return -1;
    if (s->timeout_ms != 0 && dist_set_timeout_ms(s->timeout_ms) != 0)
        return -1;
    if (s->waiter_ms != 0 && dist_set_waiter_ms(s->waiter_ms) != 0)
        return -1;
    return 0;
}

void fx_use(tu_redis_t *r, const struct fx_settings *s)
{
    g_redis = r;
    g_settings = s;
}

int fx_group_setup(void **state)
{
    struct sigaction sa;

    (void)state;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigpipe;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPIPE, &sa, NULL);
    if (tu_redis_start(g_redis) != 0)
        return -1;
    return fx_apply(g_redis->url_unix, g_settings);
}

int fx_group_teardown(void **state)
{
    (void)state;
    dist_shutdown();
    tu_redis_stop(g_redis);
    return 0;
}

int fx_restore_defaults(void **state)
{
    (void)state;
    if (fx_dirty) {
        dist_set_lost_handler(NULL, NULL);
        (void)fx_apply(g_redis->url_unix, g_settings);
        fx_dirty = 0;
    }
    return 0;
}
