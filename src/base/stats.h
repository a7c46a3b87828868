/* stats.h: the process's counters behind dist_stats_get (stats.c).
 * Each is one relaxed atomic add where it happens: no lock, no
 * allocation, nothing the fast path waits for. */
#ifndef DISTLOCK_STATS_H
#define DISTLOCK_STATS_H

#include <stdint.h>

enum dist__stat {
    DIST__ST_ACQUIRED,     /* holds taken (reentrant ones too) */
    DIST__ST_CONTENDED,    /* of those, taken after waiting for a holder */
    DIST__ST_BUSY,         /* try calls that found the lock held */
    DIST__ST_TIMEDOUT,     /* timed calls that ran out of time */
    DIST__ST_RENEWED,      /* holds the renewal thread renewed */
    DIST__ST_RENEW_FAILED, /* hold renewals Redis did not answer */
    DIST__ST_LOST,         /* holds found lost */
    DIST__ST_CONNECTS,     /* connections opened to a Redis server */
    DIST__ST_REDIRECTS,    /* MOVED and ASK answers followed */
    DIST__ST_NOREPLICA,    /* new holds given back: no replica had them */
    DIST__ST_PS_MESSAGES,  /* release messages heard */
    DIST__ST_PS_RESYNCS,   /* channels whose waiters were all woken to
                             * retry because messages may have been
                             * missed (after a pub/sub reconnect) */
    DIST__ST_PS_DIRECT,    /* of the messages, those read by the thread
                             * waiting for them (DISTLOCK_DIRECT_WAKE) */
    DIST__ST_PS_UNWAITED,  /* of the messages the pub/sub thread read,
                             * those for a channel no thread waited on */
    DIST__ST_COUNT
};

void dist__stat_add(enum dist__stat s, uint64_t n);

/* A lock call that took its lock after ms milliseconds (the histogram). */
void dist__stat_wait(uint64_t ms);

struct dist_stats;
void dist__stats_read(struct dist_stats *s); /* every counter, now */
void dist__stats_zero(void);

#endif
