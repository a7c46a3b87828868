/* internal.h: what the modules of libdistlock share and nothing exports.
 * Lock order, outermost first: lock list (mutex.c), one lock's mu,
 * rwlock list (rwlock.c), one rwlock's mu, renewal registry (renew.c),
 * pub/sub channels (pubsub.c), config, topology (topo.c). */
#ifndef DIST_INTERNAL_H
#define DIST_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "distlock.h"
#include "scripts.h"

#define DIST__UNUSED(x) ((void)(x))

/* Every public entry point begins with DIST__KEEP_ERRNO: however the call
 * leaves, errno is put back as the caller had it.  The library's own system
 * calls change it (a non-blocking connect leaves EINPROGRESS) and the API
 * promises to leave it alone; a cleanup handler cannot be missed by a
 * return path added later, as a restore before each return could. */
static inline void dist__errno_put_back(const int *saved)
{
    errno = *saved;
}
#define DIST__KEEP_ERRNO                                                   \
    const int dist__errno_saved                                            \
        __attribute__((cleanup(dist__errno_put_back), unused)) = errno

/* ---- util.c ------------------------------------------------------------ */

uint64_t dist__now_ms(void);                  /* CLOCK_MONOTONIC */
void dist__sleep_ms(uint64_t ms);
void dist__ms_to_ts(uint64_t mono_ms, struct timespec *ts);
/* Sets the calling thread's last error and returns code, so that callers
 * can write `return dist__err(EIO, "...")`. */
int dist__err(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int dist__cond_init_mono(pthread_cond_t *cv);
void dist__call_lost_handler(const char *name);
void dist__lost_handler_set(dist_lost_fn fn, void *arg);
struct dist__sigpipe {
    sigset_t old;
    int was_pending;
};
void dist__sigpipe_block(struct dist__sigpipe *s);
void dist__sigpipe_restore(struct dist__sigpipe *s);
int dist__thread_start(pthread_t *th, void *(*fn)(void *));

/* ---- config.c ---------------------------------------------------------- */

#define DIST__MODE_SINGLE   0   /* redis:// or unix:// */
#define DIST__MODE_SENTINEL 1   /* redis-sentinel:// */
#define DIST__MODE_CLUSTER  2   /* redis-cluster:// */
#define DIST__MAX_SEEDS     16

struct dist__addr {
    char host[256];               /* "" with port 0: the unix socket */
    int port;
};

struct dist__cfg {
    int mode;                     /* DIST__MODE_* */
    int nseeds;                   /* sentinels or cluster nodes of the URL */
    struct dist__addr seeds[DIST__MAX_SEEDS];
    char master[128];             /* the sentinels' name for the master */
    unsigned long replica_wait_ms;/* WAIT after an acquire; 0: off */
    char host[256];
    int port;
    char path[256];               /* unix socket; host unused when set */
    char user[128];
    char pass[256];
    int db;
    unsigned long watchdog_ms;
    unsigned long timeout_ms;
    unsigned long waiter_ms;      /* a queued waiter's window */
    char bad[240];                /* why DISTLOCK_URL was refused, or "" */
    unsigned long gen;            /* bumped by every change */
};

void dist__cfg_get(struct dist__cfg *out);
unsigned long dist__cfg_gen(void);
unsigned long dist__watchdog_ms(void);
unsigned long dist__timeout_ms(void);
unsigned long dist__waiter_ms(void);
unsigned long dist__replica_wait_ms(void);
int dist__cfg_mode(void);                     /* DIST__MODE_* */
/* How long a call that may block keeps trying a Redis it cannot reach:
 * the command timeout, plus a failover's worth on Sentinel or Cluster. */
unsigned long dist__patience_ms(void);
int dist__parse_url(const char *url, struct dist__cfg *out, char *why,
                    size_t whylen);

/* ---- ident.c ----------------------------------------------------------- */

/* Bumped in the child after fork(); holds and connections of an older
 * generation belong to the parent. */
extern atomic_ulong dist__fork_gen;
void dist__lib_init(void);                    /* pthread_once: atfork etc. */
uint64_t dist__thread_no(void);
/* "<client id>:<thread n>" of the calling thread, valid until its next
 * distlock call after a fork; length in *len. */
const char *dist__owner(size_t *len);
const char *dist__client_id(void);
/* fork hooks of each module: phase 0 prepare (lock), 1 parent (unlock),
 * 2 child (reset what belonged to the parent) */
void dist__engine_fork(int phase);
void dist__renew_fork(int phase);
void dist__pubsub_fork(int phase);
void dist__cfg_fork(int phase);

struct dist__buf {        /* one argument of a command */
    const char *p;
    size_t len;
};

/* ---- topo.c ------------------------------------------------------------ */

uint16_t dist__crc16(const char *p, size_t len);
int dist__keyslot(const char *key, size_t len);   /* Redis Cluster's slot */
/* Where commands on key go: the URL's server, the master the sentinels
 * name, or the node serving key's slot (key NULL: any master).  0, or EIO
 * with the reason. */
int dist__route(const struct dist__cfg *cfg, const struct dist__buf *key,
                struct dist__addr *out);
/* Every master (one unless on a cluster), up to max; -1 on failure. */
int dist__route_masters(const struct dist__cfg *cfg, struct dist__addr *out,
                        int max);
void dist__topo_moved(int slot, const struct dist__addr *to);  /* MOVED */
/* Sentinel: asks the sentinels now whether a, which just answered ROLE as
 * a master, is the master they name (an old master back from a pause says
 * master until they demote it).  EIO with the reason when they name
 * another; 0 when they name a, when none answers, and in the other modes. */
int dist__topo_confirm(const struct dist__cfg *cfg, const struct dist__addr *a);
/* A connection failed or a node was not what the map said: ask again at
 * the next lookup. */
void dist__topo_stale(void);
/* Bumped whenever a master or a slot's owner changes. */
unsigned long dist__topo_epoch(void);
void dist__topo_fork(int phase);

/* ---- conn.c ------------------------------------------------------------ */

#define DIST__EREPLY (-2)  /* Redis answered with an error: nothing changed */
#define DIST__ECONN  (-3)  /* connection failed: a sent call may have run */
#define DIST__ENOCONN (-4) /* no connection could be made: nothing was sent */

/* A new connection to the server at a (dist__route says which), set up
 * (AUTH, SELECT).  The caller frees it.  0, or EIO/ENOMEM with the
 * reason. */
int dist__connect_addr(const struct dist__cfg *cfg, const struct dist__addr *a,
                       redisContext **out);
void dist__conn_close_thread(void);  /* dist_shutdown */
/* EVALSHA, falling back to EVAL on NOSCRIPT.  keys then args.  Returns 0
 * with *out set (never an error reply), DIST__EREPLY, DIST__ECONN (the
 * context is dead: the caller frees or drops it), or ENOMEM. */
int dist__eval(redisContext *c, int script, int nkeys,
               const struct dist__buf *kv, int nkv, redisReply **out);
/* Same on the calling thread's connection to the server of kv[0] (each
 * thread keeps one per server it talks to).  Follows MOVED and ASK, and
 * retries for up to the command timeout when the server says it cannot
 * run the script yet (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY:
 * nothing ran).  Drops the connection on DIST__ECONN; DIST__ENOCONN when
 * no connection could be made. */
int dist__eval_here(int script, int nkeys, const struct dist__buf *kv,
                    int nkv, redisReply **out);
/* After a script of dist__eval_here that took a lock: waits for a replica
 * of that server to acknowledge it (DISTLOCK_REPLICA_WAIT_MS).  0 when it
 * did, or the server has no replicas, or the check is off;
 * DIST_ENOREPLICA when none did; DIST__ECONN when the connection failed
 * meanwhile.  what names the lock in the message. */
int dist__replica_sync(const char *what);
int dist__reply_int(const redisReply *r, size_t i, long long *v);
const char *dist__publish_cmd(void);

/* ---- names ------------------------------------------------------------- */

/* The Redis names of one lock, shared by the lock object and its holds
 * (a hold may outlive the object while a release finishes). */
struct dist__names {
    atomic_int refs;
    int braces;              /* whether derived names wrap N in {} */
    int slot;                /* the cluster slot of all of them; -1 when
                              * they do not share one (see names_new) */
    struct dist__buf name;   /* N, also the lock key */
    struct dist__buf chan;   /* redisson_lock__channel:{N} */
    struct dist__buf token;  /* redisson_lock_token:{N} */
    struct dist__buf queue;  /* redisson_lock_queue:{N}     (fair lock) */
    struct dist__buf timeout;/* redisson_lock_timeout:{N}   (fair lock) */
    struct dist__buf rwchan; /* redisson_rwlock:{N}         (read-write lock) */
    struct dist__buf writers;/* distlock_rwlock_writers:{N} (read-write lock) */
    char mem[];
};

struct dist__names *dist__names_new(const char *name, size_t len);
void dist__names_ref(struct dist__names *n);
void dist__names_unref(struct dist__names *n);
/* "<prefix>{N}<suffix>" (no braces when N has one, as Redisson does), for
 * per-owner names: the fair lock's per-waiter channel
 * (prefix "redisson_lock__channel:", suffix ":<owner>") and the read-write
 * lock's read-hold keys (prefix "", suffix ":<owner>:rwlock_timeout:<k>").
 * malloc'd, NUL-terminated; NULL when out of memory. */
char *dist__names_derive(const struct dist__names *n, const char *prefix,
                         const char *suffix, size_t *len);

/* ---- holds and the renewal thread (renew.c) ---------------------------- */

/* A renewal entry: a hold the watchdog keeps alive, a queued waiter whose
 * deadline it keeps fresh, or an outcome it settles.  Each renewal script
 * is batched with the same layout: KEYS are the entries' keys one after
 * another, ARGV[1] the lease or window in ms, then for each entry its owner
 * and how many keys it has; the reply has one integer per entry: 1 renewed,
 * 0 gone.  The owner fills the first block before handing the entry over
 * and never writes it after (the keys change only through
 * dist__renew_set_keys); the rest belongs to the registry mutex. */
struct dist__kind;
struct dist__hold {
    const struct dist__kind *kind;  /* NULL for a waiter */
    struct dist__names *names;
    char owner[64];
    size_t owner_len;
    unsigned long lease_ms;         /* 0: watchdog */
    int renew_script;
    unsigned long renew_ms;         /* ARGV[1]; 0: the watchdog lease */
    unsigned long period_ms;        /* how often; 0: a third of the watchdog */
    const struct dist__buf *keys;   /* NULL: just the lock's own name */
    int nkeys;
    atomic_int lost;                /* found gone (set by the thread) */
    /* registry mutex */
    struct dist__hold *rprev, *rnext;
    int registered;                 /* renewed by the watchdog */
    int inflight;                   /* part of a call under way */
    int orphan;                     /* owner let go while in flight */
    uint64_t due;                   /* next renewal */
    uint64_t valid_until;           /* a hold: its lease runs at least until
                                     * then (monotonic ms), counted from when
                                     * the last acquire or renewal that
                                     * reached it was sent; 0: unknown */
    int unknown;                    /* an outcome to settle: Redis may count
                                     * one hold of mode more than n[] */
    int mode;
    unsigned long n[2];
};

struct dist__hold *dist__hold_new(const struct dist__kind *k,
                                  struct dist__names *names,
                                  unsigned long lease_ms);
void dist__hold_free(struct dist__hold *h);
/* Registers h with the watchdog.  valid_until: see struct dist__hold (the
 * caller's acquire was sent then, plus the lease). */
void dist__renew_add(struct dist__hold *h, uint64_t valid_until);
/* Renews the calling thread's hold of names now, with kind k's renewal
 * script on keys (NULL: the name alone), for ms: on the condition that the
 * owner still holds it.  1 renewed, 0 the owner holds nothing, -1 Redis
 * did not answer. */
int dist__renew_one(const struct dist__kind *k, struct dist__names *names,
                    const struct dist__buf *keys, int nkeys, unsigned long ms);
/* Replaces the keys the renewal script gets for h (the caller keeps them
 * alive until the next call or until h is removed). */
void dist__renew_set_keys(struct dist__hold *h, const struct dist__buf *keys,
                          int nkeys);
/* Unregisters h; returns 1 when the caller frees it, 0 when the renewal
 * thread will (a call or a settle on it is under way). */
int dist__renew_remove(struct dist__hold *h);
/* Hands the renewal thread an outcome to settle: the owner holds n[] for
 * sure, Redis may count one hold of mode more (an acquire or release ran
 * but its reply never came back).  The kind's settle finishes it when
 * Redis answers.  With n[] all 0 the entry is no longer renewed. */
void dist__renew_unknown(struct dist__hold *h, const unsigned long n[2],
                         int mode);
/* Waits (bounded) until h has nothing left to settle; EIO if it could not
 * be settled by then. */
int dist__renew_settle(struct dist__hold *h, uint64_t until_ms);
/* A queued waiter's presence (fair mutex, writer of a writer-preferring
 * rwlock): the renewal thread keeps its deadline in the ZSET zset (one of
 * names' keys) fresh while it waits, so only a waiter whose process died is
 * dropped, within one DISTLOCK_WAITER_MS window.  NULL when out of memory. */
struct dist__hold *dist__waiter_start(struct dist__names *names,
                                      const struct dist__buf *zset);
void dist__waiter_stop(struct dist__hold *w);   /* NULL is fine */
/* Renews every hold now: a failover was seen, and the new master may have
 * an older lease than the last renewal set (renewals are not waited for
 * on replicas), or may have lost holds that should be reported. */
void dist__renew_all_now(void);
void dist__renew_shutdown(void);

/* ---- pubsub.c ---------------------------------------------------------- */

struct dist__chan;
struct dist__chan *dist__sub_get(const struct dist__buf *chan);
void dist__sub_put(struct dist__chan *ch);
/* Whether this process's subscriber connection listens on chan, and how
 * many local threads wait on it. */
int dist__sub_listening(const struct dist__buf *chan, int *waiters);
/* Waits until the channel is subscribed, or until_ms (monotonic). */
void dist__sub_wait_ready(struct dist__chan *ch, uint64_t until_ms);
/* Waits for a release message, or until_ms.  0 woken, ETIMEDOUT. */
int dist__sub_wait(struct dist__chan *ch, uint64_t until_ms);
/* A wake-all message ('1') wakes every thread waiting on the channel, but
 * a woken thread that goes back to sleep at once may take the wake-up of
 * one that has not run yet.  A waiter that can be refused for a reason that
 * is not the others' (a reader a waiting writer keeps out) reads the count
 * of wake-all messages before each try and sleeps with
 * dist__sub_wait_since, which returns as soon as that count moved. */
unsigned long dist__sub_gen(struct dist__chan *ch);
int dist__sub_wait_since(struct dist__chan *ch, unsigned long gen,
                         uint64_t until_ms);
void dist__pubsub_shutdown(void);

#endif
