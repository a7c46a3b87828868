/* route.h: calls that reach the server a key lives on.
 *
 * route.c keeps each thread's links (one per server it talks to), confirms
 * a new link's server is the master, and follows what a server answers
 * instead of running a call (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING,
 * MASTERDOWN, READONLY) within the command timeout.  It sits on topo.h,
 * which says where a key lives, and knows nothing of locks.
 *
 * A `limit` argument is the caller's call's limit (link.h: monotonic ms,
 * 0: none): every command the call makes, a reconnect or a question to
 * the sentinels included, ends by it. */
#ifndef DIST_ROUTE_H
#define DIST_ROUTE_H

#include "net/link.h"
#include "topo.h"

/* ---- route.c ------------------------------------------------------------ */

/* A hold was taken on the master the sentinels name, but it has fewer
 * replicas attached than they see up (a failover under way: the new
 * master's replicas still attaching, or the old one's being promoted):
 * given back; DIST_ENOREPLICA unless the call may try again shortly. */
#define DIST__EATTACHING (-6)

/* What an error reply asks of the caller. */
enum dist__redirect {
    DIST__R_NONE,       /* nothing: a real error */
    DIST__R_MOVED,      /* the slot lives at *to now */
    DIST__R_ASK,        /* this once at *to, after ASKING */
    DIST__R_LATER,      /* TRYAGAIN, LOADING, BUSY: nothing ran, try again */
    DIST__R_LATER_STALE /* CLUSTERDOWN, MASTERDOWN, READONLY: the same, and
                          * the map may be wrong */
};
/* Classifies an error reply of the server at from; *slot and *to for
 * MOVED and ASK (no host in the reply: from's). */
enum dist__redirect dist__redirect_of(const redisReply *r,
                                      const struct dist__addr *from,
                                      int *slot, struct dist__addr *to);

/* A new link to a, set up and confirmed as the master: ROLE, and on
 * Sentinel the sentinels' word (after a failover the old master may come
 * back still believing it is one, and a cluster map may be out of date).
 * 0 with *out (the caller closes it), or EIO/ENOMEM with the reason; the
 * map is marked stale then. */
int dist__route_open_master(const struct dist__cfg *cfg,
                            const struct dist__addr *a, uint64_t limit,
                            struct dist__link **out);

/* Runs script on the calling thread's link to the server of kv[0] (keys
 * then args), following MOVED and ASK and retrying for up to the command
 * timeout while the server cannot run it yet.  Returns 0 with *out (never
 * an error reply; the caller frees it) and *on the link it ran on,
 * DIST__EREPLY (refused: nothing ran), DIST__ECONN (the link failed: it may
 * have run), DIST__ENOCONN (no link could be made: nothing was sent) or
 * ENOMEM, with the reason in the thread's error; *on is NULL unless 0.
 * *on stays valid until the thread's next route call (dist__route_*):
 * e.g. for dist__link_wait_replicas. */
int dist__route_eval(uint64_t limit, int script, int nkeys,
                     const struct dist__buf *kv, int nkv, redisReply **out,
                     struct dist__link **on);

/* Sends script as dist__route_eval would, and returns once it is written
 * (dist__link_eval_defer): its reply, or a redirection or NOSCRIPT, goes
 * to fn(arg) when the link is next read, settled (see below) or closed.
 * 0 with *on, DIST__ECONN (may have been sent; fn is not called),
 * DIST__ENOCONN (nothing sent) or ENOMEM.  A program that exits, or a
 * thread that ends or shuts down, reads what its links owe first. */
int dist__route_defer(uint64_t limit, int script, int nkeys,
                      const struct dist__buf *kv, int nkv, dist__owed_fn fn,
                      void *arg, struct dist__link **on);
/* Reads what the calling thread's links owe, by until. */
void dist__route_settle_thread(uint64_t until);

/* After a script on l (from dist__route_eval) took a lock: replica sync
 * (dist__link_wait_replicas), and on Sentinel, when l's server listed no
 * replica or none acknowledged, the sentinels' word on it
 * (dist__topo_vouch).  0, DIST_ENOREPLICA, DIST__ECONN, DIST__EATTACHING,
 * or DIST__EDEPOSED with *now the master they name instead, the reason in
 * the thread's error. */
int dist__route_wait_replicas(struct dist__link *l, unsigned long ms,
                              const char *what, struct dist__addr *now);

/* At the end of a call: when a link of the thread still owes a reply (a
 * deferred release), lets the renewal thread read it if the thread stays
 * idle (route.c, "idle threads").  Whether it did. */
int dist__route_idle_mark(void);
#define DIST__IDLE_READ_MS 200 /* how long an idle thread is let be first */
/* The renewal thread: reads what has arrived for threads idle for a while
 * (the owed replies' handlers run on it, dist__route_reading_idle saying
 * so).  When to look again (monotonic ms; 0: nothing owed). */
uint64_t dist__route_read_idle(void);
int dist__route_reading_idle(void);

/* dist__topo_adopt with the thread's settings. */
void dist__route_adopt(const struct dist__addr *m);

/* The same, for calls whose link nobody needs afterwards. */
int dist__route_run(uint64_t limit, int script, int nkeys,
                    const struct dist__buf *kv, int nkv, redisReply **out);

/* One command of a pipeline (lens NULL: NUL-terminated arguments). */
struct dist__cmd {
    int argc;
    const char **argv;
    const size_t *lens;
};
/* Sends n commands in one write to the server of key (NULL: any master)
 * and reads their n replies into out[] (the caller frees each; error
 * replies too), following redirections as dist__route_eval does: when any
 * reply redirects, the whole pipeline goes again where it points (after
 * ASKING, outside MULTI).  For reads and MULTI ... EXEC blocks of reads
 * only: a link that fails is replaced and the pipeline sent again, within
 * the command timeout.  0 with *on (as for dist__route_eval; on may be
 * NULL), or DIST__ECONN, DIST__ENOCONN, DIST__EREPLY (a redirection not
 * followed: too many, or the server kept saying later), ENOMEM, with the
 * reason in the thread's error. */
int dist__route_cmds(uint64_t limit, const struct dist__buf *key, int n,
                     const struct dist__cmd *cmds, redisReply **out,
                     struct dist__link **on);

/* "spublish+publish" when dist__both_pubsub (the scripts then publish
 * both ways), "spublish" when dist__sharded_pubsub alone, "publish"
 * otherwise. */
const char *dist__publish_cmd(void);
/* Closes the calling thread's links (dist_shutdown). */
void dist__route_close_thread(void);

#endif
