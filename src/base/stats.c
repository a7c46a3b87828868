/* stats.c: per-process counters, read by dist_stats_get (lib.c).  A leaf:
 * every layer counts here, so it calls nothing of the library.
 * Relaxed atomics: a reader gets each counter whole, not all of them at
 * one instant, which is all an operator's dashboard needs. */
#include <stdatomic.h>
#include <string.h>

#include "distlock.h"
#include "stats.h"

static _Atomic uint64_t counters[DIST__ST_COUNT];
static _Atomic uint64_t waits[DIST_STATS_WAIT_BUCKETS];

void dist__stat_add(enum dist__stat s, uint64_t n)
{
    atomic_fetch_add_explicit(&counters[s], n, memory_order_relaxed);
}

/* Bucket 0: under 1 ms; bucket i: [2^(i-1), 2^i) ms; the last one takes
 * everything above. */
void dist__stat_wait(uint64_t ms)
{
    int i = 0;

    while (ms > 0 && i < DIST_STATS_WAIT_BUCKETS - 1) {
        ms >>= 1;
        i++;
    }
    atomic_fetch_add_explicit(&waits[i], 1, memory_order_relaxed);
}

static uint64_t get(_Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void dist__stats_read(struct dist_stats *s)
{
    int i;

    memset(s, 0, sizeof *s);
    s->acquired = get(&counters[DIST__ST_ACQUIRED]);
    s->contended = get(&counters[DIST__ST_CONTENDED]);
    s->busy = get(&counters[DIST__ST_BUSY]);
    s->timed_out = get(&counters[DIST__ST_TIMEDOUT]);
    s->renewed = get(&counters[DIST__ST_RENEWED]);
    s->renew_failed = get(&counters[DIST__ST_RENEW_FAILED]);
    s->lost = get(&counters[DIST__ST_LOST]);
    s->connects = get(&counters[DIST__ST_CONNECTS]);
    s->redirects = get(&counters[DIST__ST_REDIRECTS]);
    s->no_replica = get(&counters[DIST__ST_NOREPLICA]);
    s->pubsub_messages = get(&counters[DIST__ST_PS_MESSAGES]);
    s->pubsub_resyncs = get(&counters[DIST__ST_PS_RESYNCS]);
    s->pubsub_direct = get(&counters[DIST__ST_PS_DIRECT]);
    s->pubsub_unwaited = get(&counters[DIST__ST_PS_UNWAITED]);
    for (i = 0; i < DIST_STATS_WAIT_BUCKETS; i++)
        s->wait_ms[i] = get(&waits[i]);
}

void dist__stats_zero(void)
{
    int i;

    for (i = 0; i < DIST__ST_COUNT; i++)
        atomic_store_explicit(&counters[i], 0, memory_order_relaxed);
    for (i = 0; i < DIST_STATS_WAIT_BUCKETS; i++)
        atomic_store_explicit(&waits[i], 0, memory_order_relaxed);
}
