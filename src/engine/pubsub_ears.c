/* pubsub_ears.c: behind sentinels, the pub/sub thread's ears on them: a
 * link to every sentinel of the URL, subscribed to +switch-master.  A
 * sentinel announces there each failover as it takes it in; without it the
 * thread heard of a new master only at its next question to the sentinels
 * (about a second, SENTINEL_PERIOD_MS of topo.c), and until then its
 * channels stayed subscribed on the old master, or its connection waited
 * out a backoff after the old master died, while a holder that had found
 * the new master released there: its waiters here slept through the
 * release (0.3-1.1 s in test_sentinel).  Every sentinel, not one: the one
 * leading the failover switches first, the others when they hear of it
 * (up to a hello period later), and a holder elsewhere may have asked the
 * leader.
 *
 * Only the pub/sub thread uses them, without the state's mu (a forked
 * child puts them aside, as it does the nodes). */
#include <poll.h>
#include <stdlib.h>

#include "pubsub_int.h"

#define EAR_BACKOFF_MIN_MS 1000
#define EAR_BACKOFF_MAX_MS 30000

struct ear {
    struct ear *next;
    struct dist__link *link; /* NULL: not connected */
    int seed;                /* index into the settings' seeds */
    int backoff;             /* ms after the next failed connect */
    uint64_t retry_at;       /* no connect before */
};

static struct {
    struct ear *ears;
    unsigned long cfg_gen; /* the settings they were made for */
    struct ear *left;      /* a forked child's: the parent's, never used */
} E;

void dist__ps_ears_close(void)
{
    struct ear *e;

    while ((e = E.ears) != NULL) {
        E.ears = e->next;
        dist__link_close(e->link);
        free(e);
    }
}

void dist__ps_ears_fork(void)
{
    struct ear *e = E.ears;

    if (!e)
        return;
    while (e->next)
        e = e->next;
    e->next = E.left;
    E.left = E.ears;
    E.ears = NULL;
}

/* One ear per sentinel of cfg, made on first need.  0 or -1 (out of
 * memory: tried again at the next turn). */
static int make_ears(const struct dist__cfg *cfg)
{
    int i;

    if (E.ears && E.cfg_gen == cfg->gen)
        return 0;
    dist__ps_ears_close();
    E.cfg_gen = cfg->gen;
    for (i = cfg->nseeds - 1; i >= 0; i--) {
        struct ear *e = calloc(1, sizeof *e);
        if (!e) {
            dist__ps_ears_close();
            return -1;
        }
        e->seed = i;
        e->backoff = EAR_BACKOFF_MIN_MS;
        e->next = E.ears;
        E.ears = e;
    }
    return 0;
}

void dist__ps_ears_keep(const struct dist__cfg *cfg, uint64_t *next)
{
    struct ear *e;

    if (cfg->mode != DIST__MODE_SENTINEL) {
        dist__ps_ears_close();
        return;
    }
    if (make_ears(cfg) != 0)
        return;
    /* A sentinel that cannot be reached is tried less and less often:
     * connecting to one blocks this thread (up to a second), and the
     * others hear the switch as well. */
    for (e = E.ears; e; e = e->next) {
        uint64_t now = dist__now_ms();
        if (e->link)
            continue;
        if (now < e->retry_at) {
            if (e->retry_at < *next)
                *next = e->retry_at;
            continue;
        }
        if (dist__topo_listen(cfg, e->seed, &e->link) == 0) {
            e->backoff = EAR_BACKOFF_MIN_MS;
            continue;
        }
        e->retry_at = dist__now_ms() + (uint64_t)e->backoff;
        e->backoff = dist__ps_backoff_next(e->backoff, EAR_BACKOFF_MAX_MS);
        if (e->retry_at < *next)
            *next = e->retry_at;
    }
}

int dist__ps_ears_count(void)
{
    struct ear *e;
    int k = 0;

    for (e = E.ears; e; e = e->next)
        k += e->link != NULL;
    return k;
}

int dist__ps_ears_poll(struct pollfd *pfd)
{
    struct ear *e;
    int k = 0;

    for (e = E.ears; e; e = e->next)
        if (e->link)
            pfd[k++] = (struct pollfd){ dist__link_fd(e->link), POLLIN, 0 };
    return k;
}

/* What one ear's link has, read: 1 when a message said the master moved
 * (dist__topo_heard).  A broken link is closed and made again after its
 * backoff. */
static int hear(const struct dist__cfg *cfg, struct ear *e)
{
    redisReply *r;
    int news = 0;

    dist__link_read_some(e->link);
    while (dist__link_next(e->link, &r) == 1) {
        news |= dist__topo_heard(cfg, e->seed, r);
        freeReplyObject(r);
    }
    if (dist__link_broken(e->link)) {
        dist__link_close(e->link);
        e->link = NULL;
        e->retry_at = dist__now_ms() + (uint64_t)e->backoff;
    }
    return news;
}

int dist__ps_ears_read(const struct dist__cfg *cfg, const struct pollfd *pfd)
{
    struct ear *e;
    int k = 0, news = 0;

    /* in the order dist__ps_ears_poll filled pfd */
    for (e = E.ears; e; e = e->next)
        if (e->link && pfd[k++].revents)
            news |= hear(cfg, e);
    return news;
}
