/* link.h: one connection to one Redis server, and nothing else: connect
 * (TCP or unix socket), AUTH and SELECT, a command bounded by a deadline,
 * EVALSHA with its fall-back to EVAL, ROLE, WAIT.  Every byte to and from
 * Redis goes through here (so TLS has one place to plug in).  A link knows
 * nothing of routing: route.h says which server a key lives on.
 *
 * A link belongs to one thread at a time.  Once a call on it failed it is
 * broken (dist__link_broken): every later call fails at once, and the
 * owner closes it.  Closing sends nothing (over TLS not even a
 * close_notify), so a link inherited across fork() can be closed by the
 * child without disturbing the parent.  Replies still owed
 * (dist__link_defer) are handed over as lost when it closes, unread.  With cfg->tls.on the link speaks
 * TLS (tls.h), handshake included in the connect timeout.
 *
 * A call's limit: the calls that take `limit` end by it (monotonic ms),
 * as well as within their own timeout; 0: no limit.  A lock call passes
 * its one deadline down this way (engine, route, link), so that
 * DISTLOCK_TIMEOUT_MS bounds the whole call, not each of its commands (a
 * reconnect, ROLE, EVALSHA, EVAL, a probe). */
#ifndef DIST_LINK_H
#define DIST_LINK_H

#include <hiredis/hiredis.h>

#include "base/base.h"

#define DIST__EREPLY  (-2) /* Redis answered with an error: nothing changed */
#define DIST__ECONN   (-3) /* connection failed: a sent call may have run */
#define DIST__ENOCONN (-4) /* no connection could be made: nothing was sent */

struct dist__link;
struct dist__script;

/* dist__link_open's flags */
#define DIST__LINK_BARE                                                      \
    1 /* no AUTH or SELECT: the caller authenticates
                            * when asked (sentinels, topology queries) */

/* Connects to a (port 0: the unix socket cfg->path) within timeout_ms
 * (0: cfg->timeout_ms, which is also each command's timeout then), with
 * close-on-exec, then AUTH and SELECT as cfg says unless DIST__LINK_BARE.
 * 0 with *out (the caller closes it), or EIO/ENOMEM with *out NULL and the
 * reason ("cannot connect to Redis at host:port: ...", "AUTH refused: ...")
 * in why, or, when why is NULL, in the thread's last error.  A failure
 * that no retry can mend (a certificate refused, a TLS port that got plain
 * text or a plain port TLS, settings that cannot work) also marks the
 * thread (dist__hopeless_set), here or on a later command of the link. */
int dist__link_open(const struct dist__cfg *cfg, const struct dist__addr *a,
                    unsigned long timeout_ms, int flags, uint64_t limit,
                    struct dist__link **out, char *why, size_t whylen);
void dist__link_close(struct dist__link *l); /* NULL is fine */

const struct dist__addr *dist__link_addr(const struct dist__link *l);
/* "host:port" or "unix:PATH", for messages. */
const char *dist__link_where(const struct dist__link *l);
/* Why the last call on l failed: "no answer within the command timeout of
 * N ms (DISTLOCK_TIMEOUT_MS)", "Server closed the connection", ... */
const char *dist__link_error(const struct dist__link *l);
int dist__link_broken(const struct dist__link *l);
/* Whether an idle link can take a call: not broken, and not closed by the
 * server while it sat idle (a restart, its idle timeout, CLIENT KILL), so
 * that a call is not sent into a dead connection where it could not be
 * told whether it ran.  Costs a poll(2), no round trip. */
int dist__link_alive(const struct dist__link *l);
int dist__link_fd(const struct dist__link *l);
/* now + the link's command timeout (monotonic ms), or limit when that
 * comes first (0: none). */
uint64_t dist__link_deadline(const struct dist__link *l, uint64_t limit);
/* now + ms, or limit when that comes first (0: none). */
uint64_t dist__link_until(unsigned long ms, uint64_t limit);

/* ---- commands ---------------------------------------------------------- */

/* Queues a command (binary-safe; lens NULL: NUL-terminated).  0, ENOMEM
 * (l broken: what was queued can no longer be sent whole) or DIST__ECONN
 * (l was broken). */
int dist__link_append(struct dist__link *l, int argc, const char **argv,
                      const size_t *lens);
/* Writes what is queued, waiting until `until` (monotonic ms) at most.
 * 0, or DIST__ECONN (l broken). */
int dist__link_flush(struct dist__link *l, uint64_t until);
/* Writes what is queued and reads the next reply, all by `until`.  0 with
 * *out (error replies too; the caller frees it), or DIST__ECONN. */
int dist__link_reply(struct dist__link *l, uint64_t until, redisReply **out);
/* One command within the command timeout and limit: append + reply. */
int dist__link_cmd(struct dist__link *l, uint64_t limit, int argc,
                   const char **argv, const size_t *lens, redisReply **out);
/* For a caller that polls dist__link_fd itself (subscribers): reads what
 * the socket has without waiting (and, over TLS, all that was decrypted:
 * a poll(2) would not see it) (0, or DIST__ECONN when the server closed
 * the connection or it failed), and takes the replies read so far one by
 * one (1 with *out, 0 when none is complete, DIST__ECONN on a protocol
 * error). */
int dist__link_read_some(struct dist__link *l);
int dist__link_next(struct dist__link *l, redisReply **out);

/* Runs script s with nkeys keys then args (kv), after ASKING when asking:
 * EVALSHA, and EVAL with the body when the server lacks it (NOSCRIPT: after
 * SCRIPT FLUSH, a restart, or on a replica just promoted).  0 with *out
 * (an error reply too), DIST__ECONN (may have run), or ENOMEM.  When l's
 * replica count is stale and s has a counted form (scripts.h), that form
 * runs instead: l notes the count it read, *out is the body's reply. */
int dist__link_eval(struct dist__link *l, uint64_t limit,
                    const struct dist__script *s, int asking, int nkeys,
                    const struct dist__buf *kv, int nkv, redisReply **out);

/* ---- replies owed to others (deferred calls) ------------------------------ */

/* Called once for a reply owed: r the reply (error replies too; the link
 * frees it afterwards) with status 0, or r NULL with DIST__ECONN when it
 * can never be read (the link failed, or was closed with it unread).  It
 * runs on the thread that owns the link, in the middle of another call on
 * it, or on the renewal thread while the owner is idle (route.c): it must
 * not use the link, nor any lock held around link calls. */
typedef void (*dist__owed_fn)(void *arg, const redisReply *r, int status);

/* Writes what is queued (the whole of it, by `until`) and notes that the
 * next reply not yet claimed belongs to fn(arg): every later read on l
 * hands owed replies over first, in order.  0, or DIST__ECONN (l broken;
 * fn is not called: what was written is the caller's to settle). */
int dist__link_defer(struct dist__link *l, uint64_t until, dist__owed_fn fn,
                     void *arg);
/* Replies owed on l. */
int dist__link_owed(const struct dist__link *l);
/* Reads the owed replies by `until` (0: only what has arrived, without
 * waiting) and hands them over; when l fails meanwhile, each one left is
 * handed over as lost.  0, or DIST__ECONN. */
int dist__link_settle(struct dist__link *l, uint64_t until);

/* The same as dist__link_eval, but returns once the EVALSHA is written,
 * its reply owed to fn(arg).  NOSCRIPT comes back to fn like any error
 * reply.  0, DIST__ECONN (l broken: it may have been sent), ENOMEM. */
int dist__link_eval_defer(struct dist__link *l, uint64_t limit,
                          const struct dist__script *s, int nkeys,
                          const struct dist__buf *kv, int nkv,
                          dist__owed_fn fn, void *arg);

/* ---- roles and replicas --------------------------------------------------- */

/* ROLE: 1 a master (its replica count noted, see below), 0 not a master
 * (dist__link_error says what ROLE said), -1 no answer (l broken).  A
 * server that refuses ROLE (an ACL rule) is taken for a master whose
 * replicas cannot be counted. */
int dist__link_role(struct dist__link *l, uint64_t limit);
/* Whether a ROLE reply names a master; *replicas gets the connected
 * replicas it lists (0 when not a master), *role the role's name. */
int dist__role_of(const redisReply *r, int *replicas, const char **role);
/* After a script on l that took a lock: waits up to ms for a replica of
 * l's server to acknowledge it (WAIT 1 ms), reading ROLE first when the
 * replica count is older than a second (which the counted form of the
 * acquire script, see dist__link_eval, spares).  0 when one did, the server has no
 * replicas, or ms is 0; DIST_ENOREPLICA when none did; DIST__ECONN when l
 * failed meanwhile.  what names the lock in the message (thread's error).
 * *listed gets the replicas ROLE listed, *most the most it ever listed on
 * l (both -1 when nothing was checked): fewer than before may mean l's
 * server was just deposed (dist__route_wait_replicas). */
int dist__link_wait_replicas(struct dist__link *l, unsigned long ms,
                             const char *what, int *listed, int *most);

/* Integer element i of an array reply: 0, or -1 when there is none. */
int dist__reply_int(const redisReply *r, size_t i, long long *v);

#endif
