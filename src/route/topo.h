/* topo.h: which server a key lives on (topo.c): the URL's server, the
 * master the sentinels name, or the cluster's slot map, asked for on links
 * of its own.  It sits on link.h alone; route.h, which runs calls there,
 * sits on it.
 *
 * A `limit` argument is the caller's call's limit (link.h: monotonic ms,
 * 0: none): the questions to the sentinels or the nodes end by it. */
#ifndef DIST_TOPO_H
#define DIST_TOPO_H

#include "net/link.h"

/* A hold was taken on a master the sentinels no longer name: nothing is
 * held (give back what the script took there), try again on the new one. */
#define DIST__EDEPOSED (-5)

uint16_t dist__crc16(const char *p, size_t len);
int dist__keyslot(const char *key, size_t len); /* Redis Cluster's slot */
/* Where commands on key go: the URL's server, the master the sentinels
 * name, or the node serving key's slot (key NULL: any master).  0, or EIO
 * with the reason. */
int dist__route(const struct dist__cfg *cfg, uint64_t limit,
                const struct dist__buf *key, struct dist__addr *out);
/* Every master (one unless on a cluster), up to max; -1 on failure. */
int dist__route_masters(const struct dist__cfg *cfg, uint64_t limit,
                        struct dist__addr *out, int max);
void dist__topo_moved(int slot, const struct dist__addr *to); /* MOVED */
/* Sentinel: asks the sentinels now whether a, which just answered ROLE as
 * a master, is the master they name (an old master back from a pause says
 * master until they demote it).  EIO with the reason when they name
 * another; 0 when they name a, when none answers, and in the other modes. */
int dist__topo_confirm(const struct dist__cfg *cfg,
                       const struct dist__addr *a, uint64_t limit);
/* Sentinel, after a hold was taken on a with replica sync on, when a
 * listed fewer replicas (ROLE) than before or none at all, or none
 * acknowledged the hold: asks the sentinels whether a is still the master.
 * Just after a failover the old master answers as one, with no replica,
 * for seconds, and a hold taken there is lost when it is demoted, while
 * the new master grants the lock too.  DIST__EDEPOSED with *now when they
 * name another; DIST_ENOREPLICA when they name a but see more replicas of
 * it up than the `listed` it has attached (one is being promoted: a hold
 * here would not survive it; -1: do not count); 0 otherwise, also when no
 * sentinel answers, and in the other modes.  A master found fine with
 * `listed` is not asked about again for half a second.  Leaves the map
 * alone. */
int dist__topo_vouch(const struct dist__cfg *cfg, const struct dist__addr *a,
                     int listed, struct dist__addr *now);
/* Takes m as the master the sentinels name (from dist__topo_vouch). */
void dist__topo_adopt(const struct dist__cfg *cfg,
                      const struct dist__addr *m);
/* A connection failed or a node was not what the map said: ask again at
 * the next lookup. */
void dist__topo_stale(void);
/* Sentinel: opens a link to sentinel seed (index into cfg->seeds)
 * subscribed to +switch-master, whose messages dist__topo_heard reads.  0
 * with *out (the caller closes it), or -1. */
int dist__topo_listen(const struct dist__cfg *cfg, int seed,
                      struct dist__link **out);
/* One message r from that link: 1 when it announces that cfg's master
 * moved, else 0.  Moved to a server other than the one known, the next
 * dist__route asks sentinel seed at once (it switched, the others may
 * follow later). */
int dist__topo_heard(const struct dist__cfg *cfg, int seed,
                     const redisReply *r);
/* Bumped whenever a master or a slot's owner changes. */
unsigned long dist__topo_epoch(void);
/* fn runs (on the thread that noticed, with no lock of topo.c held) when a
 * master that was known changed: a failover.  Up to 4 functions; the same
 * one registered twice runs once. */
void dist__topo_on_change(void (*fn)(void));

#endif
