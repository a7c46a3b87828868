/* base.h: what every layer of libdistlock leans on: clocks and the error
 * text (util.c), the settings (config.c), who this process and thread are
 * and what fork() does to that (ident.c).  It knows nothing of Redis. */
#ifndef DIST_BASE_H
#define DIST_BASE_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "distlock.h"

#define DIST__UNUSED(x) ((void)(x))

/* ---- sys.c --------------------------------------------------------------- */

/* The pthread functions the library calls on its own mutexes and
 * conditions, called through this table: glibc's own when the LD_PRELOAD
 * shim is in the process (sys.c says why), the ordinary symbols otherwise.
 * The macros below route every such call of the library through it; a
 * call to another function the shim interposes must be added here (the
 * test test_preload_symbols checks that libdistlock.so calls none directly). */
struct dist__sys {
    int (*mutex_init)(pthread_mutex_t *, const pthread_mutexattr_t *);
    int (*mutex_destroy)(pthread_mutex_t *);
    int (*mutex_lock)(pthread_mutex_t *);
    int (*mutex_unlock)(pthread_mutex_t *);
    int (*cond_init)(pthread_cond_t *, const pthread_condattr_t *);
    int (*cond_destroy)(pthread_cond_t *);
    int (*cond_wait)(pthread_cond_t *, pthread_mutex_t *);
    int (*cond_timedwait)(pthread_cond_t *, pthread_mutex_t *,
                          const struct timespec *);
    int (*cond_signal)(pthread_cond_t *);
    int (*cond_broadcast)(pthread_cond_t *);
};
extern struct dist__sys dist__sys;

#define pthread_mutex_init(m, a) (dist__sys.mutex_init((m), (a)))
#define pthread_mutex_destroy(m) (dist__sys.mutex_destroy(m))
#define pthread_mutex_lock(m)    (dist__sys.mutex_lock(m))
#define pthread_mutex_unlock(m)  (dist__sys.mutex_unlock(m))
#define pthread_cond_init(c, a)  (dist__sys.cond_init((c), (a)))
#define pthread_cond_destroy(c)  (dist__sys.cond_destroy(c))
#define pthread_cond_wait(c, m)  (dist__sys.cond_wait((c), (m)))
#define pthread_cond_timedwait(c, m, t)                                      \
    (dist__sys.cond_timedwait((c), (m), (t)))
#define pthread_cond_signal(c)    (dist__sys.cond_signal(c))
#define pthread_cond_broadcast(c) (dist__sys.cond_broadcast(c))

/* Every public entry point begins with DIST__KEEP_ERRNO: however the call
 * leaves, errno is put back as the caller had it.  The library's own system
 * calls change it (a non-blocking connect leaves EINPROGRESS) and the API
 * promises to leave it alone; a cleanup handler cannot be missed by a
 * return path added later, as a restore before each return could. */
static inline void dist__errno_put_back(const int *saved)
{
    errno = *saved;
}
/* It also turns cancellation off for the call (put back the same way): a
 * thread cancelled inside the library would leave a lock of its own taken
 * (the pub/sub table's, a lock's state), a connection lent to it or half
 * used, a hold nobody knows of.  So, as with pthread_mutex_lock, no
 * distlock call is a cancellation point; a request made meanwhile acts at
 * the caller's next one.  The waits POSIX makes cancellation points
 * (dist_cond_wait, dist_sem_wait and their timed forms) look for a
 * request as they begin, before anything changed: DIST__CANCEL_POINT, and
 * in their sleeps (pubsub.h's DIST__SUB_CANCEL: dist__acquire_intr for the
 * semaphores, cond.c's own loop for the conditions), where they hold
 * nothing but what cleanup handlers give back, innermost first (the
 * sleep's, then the wait's: a condition wait leaves its queue and takes
 * its mutex back) before the caller's own handlers run. */
static inline int dist__cancel_off(void)
{
    int old = PTHREAD_CANCEL_ENABLE;

    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    return old;
}
static inline void dist__cancel_put_back(const int *old)
{
    int was;

    pthread_setcancelstate(*old, &was);
}
#define DIST__KEEP_ERRNO                                                     \
    const int dist__errno_saved                                              \
        __attribute__((cleanup(dist__errno_put_back), unused)) = errno;      \
    const int dist__cancel_saved                                             \
        __attribute__((cleanup(dist__cancel_put_back), unused)) =            \
            dist__cancel_off()
#define DIST__CANCEL_POINT pthread_testcancel()

/* ---- util.c ------------------------------------------------------------ */

uint64_t dist__now_ms(void); /* CLOCK_MONOTONIC */
uint64_t dist__now_us(void); /* the same clock, in microseconds */
void dist__sleep_ms(uint64_t ms);
void dist__ms_to_ts(uint64_t mono_ms, struct timespec *ts);
/* The calling thread's last error: its text (dist_last_error) and the lock
 * it begins by naming, so that the engine, which adds a lock's name to a
 * failure met below it, knows whether the text names it already without
 * reading the text back. */
struct dist__why {
    const char *lock; /* the name (that very pointer) the text begins with,
                       * after its noun (dist__err_lock); NULL: none */
    char text[256];
};
/* Sets the calling thread's last error, a text that names no lock, and
 * returns code, so that callers can write `return dist__err(EIO, "...")`. */
int dist__err(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same for a text about one lock: "<noun> '<name>'" and what fmt
 * makes after it (": timed out", " is not held by this thread"). */
int dist__err_lock(int code, const char *noun, const char *name,
                   const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for a text made from an earlier error (was, as dist__why_get
 * copied it) that still begins as that one did: it names the lock was
 * named. */
int dist__err_as(int code, const struct dist__why *was, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A copy of the calling thread's last error. */
void dist__why_get(struct dist__why *w);
/* A per-thread mark: the failure just met is one that trying again cannot
 * mend (set by the link; see link.h).  take returns it and clears it. */
void dist__hopeless_set(void);
int dist__hopeless_take(void);
int dist__cond_init_mono(pthread_cond_t *cv);
void dist__call_lost_handler(const char *name);
void dist__lost_handler_set(dist_lost_fn fn, void *arg);
struct dist__sigpipe {
    sigset_t old;
    int was_pending;
};
void dist__sigpipe_block(struct dist__sigpipe *s);
void dist__sigpipe_restore(struct dist__sigpipe *s);
/* Starts fn(arg) on a thread of the library's (see util.c).  0 or an
 * error number. */
int dist__thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
/* 1 when every signal handler the program installed has SA_RESTART (or
 * it installed none): an untimed wait a handler interrupted goes on, as
 * glibc's sem_wait does then (its futex wait is restarted); 0 when one
 * has not, and the wait returns EINTR. */
int dist__handlers_restart(void);
/* A per-thread mark: a signal handler interrupted one of the library's
 * own waits for a reply (which goes on), so that an interruptible wait
 * (dist__acquire_intr) that was in a try then still returns EINTR rather
 * than sleeping on.  take returns it and clears it. */
void dist__eintr_note(void);
int dist__eintr_take(void);
/* How often a library thread asks whether it is all that is left. */
#define DIST__ORPHAN_LOOK_MS 1000
/* Whether every thread of the process left is the library's: the program
 * is over, as it would be without them (see util.c).  Asks at most once
 * per DIST__ORPHAN_LOOK_MS, when *next_look (monotonic ms, 0 at first)
 * has come. */
int dist__threads_orphaned(uint64_t *next_look);
/* The last step of a library thread leaving because it was orphaned: the
 * signals the thread that started it let through are let through, so that
 * one sent to the process once no thread of the program could take it is
 * acted on (a SIGTERM ends the process) rather than dropped. */
void dist__thread_orphan_exit(void);

/* ---- stack.c ----------------------------------------------------------- */

/* Runs fn(arg) where at least need bytes of stack are left: on the
 * caller's stack when it has that much, else on a stack the calling thread
 * keeps for this (made on its first use, freed when the thread ends), as
 * for deep library code (OpenSSL) called on a thread created with a small
 * stack.  The same thread runs it, with its signal mask.  0, or ENOMEM
 * (fn not run) when there was no memory for that stack. */
int dist__with_stack(size_t need, void (*fn)(void *), void *arg);
/* The need given for deep calls (OpenSSL's, the resolver's): a few times
 * what they were measured to take (tls.c, link.c), for other versions,
 * other ciphers and the sanitizers' interceptors. */
#define DIST__DEEP_NEED (32u * 1024u)

/* ---- config.c ---------------------------------------------------------- */

#define DIST__MODE_SINGLE   0 /* redis://, rediss:// or unix:// */
#define DIST__MODE_SENTINEL 1 /* redis-sentinel://, rediss-sentinel:// */
#define DIST__MODE_CLUSTER  2 /* redis-cluster://, rediss-cluster:// */
#define DIST__MAX_SEEDS     16

struct dist__addr {
    char host[256]; /* "" with port 0: the unix socket */
    int port;
};

/* TLS, chosen by the scheme (rediss...://); the options come from the
 * URL's query (tls_ca=, ...) or else from DISTLOCK_TLS_* (config.c). */
struct dist__tls_opts {
    int on;             /* every server is reached over TLS */
    int insecure;       /* no certificate checks (warned once) */
    int insecure_said;  /* the URL said tls_insecure=0|1: it wins
                                   * over DISTLOCK_TLS_INSECURE */
    char ca[256];       /* CA file or directory; "": system store */
    char cert[256];     /* client certificate (mutual TLS) */
    char key[256];      /* its key; "": in the cert file */
    char key_pass[256]; /* the key's passphrase; "": none.  Never
                                   * in a message or log */
    char name[256];     /* name to verify; "": each server's host */
};

struct dist__cfg {
    int mode;   /* DIST__MODE_* */
    int nseeds; /* sentinels or cluster nodes of the URL */
    struct dist__addr seeds[DIST__MAX_SEEDS];
    char master[128];              /* the sentinels' name for the master */
    int pubsub;                    /* cluster: how release messages go,
                                   * DIST__PUBSUB_* (?pubsub=) */
    unsigned long replica_wait_ms; /* WAIT after an acquire; 0: off */
    char host[256];
    int port;
    char path[256]; /* unix socket; host unused when set */
    char user[128];
    char pass[256];
    int db;
    unsigned long watchdog_ms;
    unsigned long timeout_ms;
    unsigned long waiter_ms;       /* a queued waiter's window */
    unsigned long lease_margin_ms; /* fixed part of a hold's safety margin
                                   * (dist__safe_margin_ms) */
    unsigned long key_grace_ms;    /* how long a lock's side keys outlive
                                   * its lease (DISTLOCK_KEY_GRACE_MS);
                                   * 0: for ever */
    unsigned long deferred;        /* mutexes defer their release by default
                                   * (DISTLOCK_DEFERRED_RELEASE) */
    unsigned long cohort;          /* non-fair mutexes hand off between
                                   * local threads (DISTLOCK_COHORT) */
    unsigned long direct_wake;     /* a lone waiter reads release messages
                                   * itself (DISTLOCK_DIRECT_WAKE) */
    struct dist__tls_opts tls;
    char bad[240];     /* why DISTLOCK_URL was refused, or "" */
    unsigned long gen; /* bumped by every change */
};

void dist__cfg_get(struct dist__cfg *out);
/* The two settings a release message depends on, without copying the
 * whole of them (a struct dist__cfg is kilobytes: too much for a 16 KiB
 * stack on the unlock path). */
void dist__cfg_pubsub(int *mode, int *pubsub);
unsigned long dist__cfg_gen(void);
unsigned long dist__watchdog_ms(void);
unsigned long dist__timeout_ms(void);
unsigned long dist__waiter_ms(void);
unsigned long dist__lease_margin_ms(void);
unsigned long dist__replica_wait_ms(void);
unsigned long dist__key_grace_ms(void);
/* The time to live of the keys a hold of lease_ms writes beside its lock
 * (fencing counter, robust record): the lease plus DISTLOCK_KEY_GRACE_MS,
 * or 0 (kept for ever) when that is 0. */
unsigned long dist__key_keep_ms(unsigned long lease_ms);
/* Whether a mutex whose attribute did not say defers its release. */
int dist__deferred_release(void);
/* Whether a non-fair mutex whose attribute did not say is a cohort one. */
int dist__cohort_default(void);
/* Whether a waiter may read its release messages from the pub/sub
 * connection itself while no other thread does (pubsub.c). */
int dist__direct_wake(void);
int dist__cfg_mode(void); /* DIST__MODE_* */
/* A cluster's ways of sending release messages.  BOTH, the default, sends
 * each one by SPUBLISH and by PUBLISH and listens both ways, so that Redisson
 * clients of either kind (sharded from 3.22, plain before, or set so) and
 * distlock hear each other; SHARDED and PLAIN keep to one. */
enum { DIST__PUBSUB_BOTH, DIST__PUBSUB_SHARDED, DIST__PUBSUB_PLAIN };
/* Whether release messages go by SPUBLISH, heard by SSUBSCRIBE on the node
 * serving the channel's slot: on a cluster, unless ?pubsub=plain. */
int dist__sharded_pubsub(const struct dist__cfg *cfg);
/* Whether they also go by plain PUBLISH, heard by SUBSCRIBE on any node:
 * on a cluster with ?pubsub=both (the default). */
int dist__both_pubsub(const struct dist__cfg *cfg);
/* How long a call that may block keeps trying a Redis it cannot reach:
 * the command timeout, plus a failover's worth on Sentinel or Cluster. */
unsigned long dist__patience_ms(void);
int dist__parse_url(const char *url, struct dist__cfg *out, char *why,
                    size_t whylen);

/* ---- ident.c ----------------------------------------------------------- */

/* Bumped in the child after fork(); holds and connections of an older
 * generation belong to the parent. */
extern atomic_ulong dist__fork_gen;
void dist__lib_init(void); /* pthread_once: atfork etc. */
/* Stamps a new object (two words of its dist_*_t) as this process's. */
void dist__stamp(unsigned long stamp[2]);
/* 0 when an object of that stamp is this process's to use (made by it, or
 * by an ancestor before the fork); else EINVAL, which names the maker. */
int dist__stamp_check(const unsigned long stamp[2], const char *noun);
/* The object a public dist_*_t keeps at impl (NULL: none made yet), each
 * kind's beginning with its magic number: *rc 0, or EINVAL with the
 * message set (and NULL) when the stamp says another process made it or
 * magic is not there (never initialised, or destroyed). */
void *dist__impl_load(void *const *impl, const unsigned long stamp[2],
                      unsigned magic, const char *noun, int *rc);
uint64_t dist__thread_no(void);
/* A number drawn from the thread numbers' counter that no thread has (a
 * mutex cohort's owner, cohort.c). */
uint64_t dist__thread_no_new(void);
/* While pushed, the calling thread is thread no to the engine
 * (dist__thread_no and dist__owner say so); pop with what push returned. */
uint64_t dist__ident_push(uint64_t no);
void dist__ident_pop(uint64_t old);
/* "<client id>:<thread n>" of the calling thread, valid until its next
 * distlock call after a fork; length in *len. */
const char *dist__owner(size_t *len);
const char *dist__client_id(void);

/* fork(): a module whose state a mutex guards registers a hook, called with
 * phase 0 before the fork (take the mutexes), 1 in the parent after it
 * (release them), 2 in the child (release them too, and reset what belonged
 * to the parent: the forking thread, the child's only one, holds them).
 * Prepare runs in ascending rank, parent and child in descending rank, so
 * the ranks are the lock order, outermost first.  A module registers before
 * it first takes its mutex (a pthread_once at its entry points); registering
 * the same hook again does nothing.  Registration takes no lock a hook
 * takes, so it may be called with any mutex held. */
enum dist__fork_rank {
    DIST__RANK_IDLE = 5,    /* idle threads' owed replies (route.c), read
                                * under it: their handlers take the below */
    DIST__RANK_LOCKS = 10,  /* the lock families' registries and states
                                * (engine.c) */
    DIST__RANK_RENEW = 30,  /* renewal registry (renew.c) */
    DIST__RANK_PUBSUB = 40, /* pub/sub channels (pubsub.c) */
    DIST__RANK_CFG = 50,    /* settings (config.c) */
    DIST__RANK_TOPO = 60,   /* topology (topo.c) */
    DIST__RANK_TLS = 70,    /* the TLS context (tls.c), taken while a
                                * link opens, under any of the above */
    DIST__RANK_ROLES = 80,  /* the servers' replica counts (link.c),
                                * taken under any of the above */
};
void dist__atfork_register(void (*fn)(int phase), int rank);

/* Defines a module's NAME(void), which registers its fork hook HOOK at RANK
 * the first time it is called and costs a pthread_once check after that:
 * the module calls it at every entry point that may take its mutex first,
 * so that a fork always finds the hook registered. */
#define DIST__FORK_HOOK(name, hook, rank)                                    \
    static void hook(int phase);                                             \
    static pthread_once_t name##_once = PTHREAD_ONCE_INIT;                   \
    static void name##_register(void)                                        \
    {                                                                        \
        dist__atfork_register(hook, rank);                                   \
    }                                                                        \
    static void name(void)                                                   \
    {                                                                        \
        pthread_once(&name##_once, name##_register);                         \
    }

struct dist__buf { /* one argument of a command */
    const char *p;
    size_t len;
};

/* A C string as an argument of a command. */
static inline struct dist__buf dist__arg(const char *s)
{
    return (struct dist__buf){ s, strlen(s) };
}
/* Frees the n arguments' strings that keys owns, and forgets them (util.c). */
void dist__bufs_free(struct dist__buf *keys, int n);

#endif
