/* engine.h: what every kind of lock shares (the lock engine).
 *
 * A kind (mutex, fair mutex, rwlock) is its scripts: it fills one
 * struct dist__kind with the calls that build their KEYS and ARGV and read
 * their replies.  Everything else is here, written once: the per-name state
 * shared by the objects of a name, lazy initialisation, the calling thread's
 * record of its holds, the wait loop (subscribe, try, sleep bounded by the
 * holder's lease and the caller's deadline, clock steps), patience with a
 * Redis that cannot be reached, replica sync and its give-back, and the
 * hand-off of a call whose outcome is unknown to the renewal thread.
 *
 * Lock order, outermost first: a family's registry, one state's mu, the
 * renewal registry (renew.c), pub/sub channels, config, topology. */
#ifndef DIST_ENGINE_H
#define DIST_ENGINE_H

#include "internal.h"

/* A deferred release whose reply is owed (call.c).  Every field but the
 * first block is under its state's mu. */
struct dist__defer {
    struct dist__state *st; /* referenced (dist__state_ref) */
    const struct dist__kind *kind;
    unsigned long lease_ms;
    unsigned long gen;     /* fork generation it was sent in */
    struct dist__link *on; /* the link that owes the reply: only its
                                   * thread reads it, while outcome is 0 */
    struct dist__rec *r;   /* the owner's record; NULL once dropped */
    int behind;            /* an acquire of the owner followed it:
                                   * that call acts on the outcome */
    int outcome;           /* DIST__DEFER_*; 0 while owed */
    long long woken;
    uint64_t sent;  /* monotonic ms */
    int robust;     /* DIST__ROBUST_*: the release's */
    char owner[64]; /* the owner's field (dist__owner): the
                                   * reply may be read on another thread */
    size_t owner_len;
    uint64_t owner_no; /* and its number (dist__thread_no) */
};
#define DIST__DEFER_OK     1 /* released */
#define DIST__DEFER_LOST   2 /* the hold was gone before it */
#define DIST__DEFER_NOTRUN 3 /* an error reply: nothing ran */
#define DIST__DEFER_BROKEN 4 /* no reply: it may have run */

/* A caller's absolute deadline, taken at the API (dist__deadline_set) and
 * converted to the monotonic clock there, once per call; again only when
 * the clock it names was stepped (dist__deadline_step).  It goes down by
 * argument; below the engine, as the limit of a call's commands
 * (struct dist__call's limit, link.h). */
struct dist__deadline {
    clockid_t clock; /* CLOCK_REALTIME or CLOCK_MONOTONIC */
    struct timespec abs;
    uint64_t ms; /* abs on the monotonic clock */
    int bad;     /* abs.tv_nsec out of range: EINVAL when
                                   * the call would wait, ms 0 */
};

/* How a try may end when the lock is not free. */
enum dist__how {
    DIST__HOW_TRY,  /* trylock: not at all */
    DIST__HOW_WAIT, /* sleep and try again */
    DIST__HOW_QUEUE /* join a queue in Redis (fair mutex,
                                   * writer of a writer-preferring rwlock) */
};

struct dist__kind;

/* The start of a kind's own data in a record (its ext): how to free it. */
struct dist__rec_ext {
    void (*free)(struct dist__rec_ext *ext);
};

/* The calling thread's holds of one name.  Under its state's mu.  One per
 * held lock: 88 B (a 96 B chunk, docs/performance.md). */
struct dist__rec {
    struct dist__rec *next;
    uint64_t thread_no;
    unsigned gen;               /* fork generation, its low 32 bits
                                   * (dist__rec_gen): older is the
                                   * parent's */
    unsigned char reg;          /* h is renewed by the watchdog */
    unsigned char unknown;      /* h carries an outcome to settle */
    unsigned char wakes;        /* the kind's: the first hold's release
                                   * has waiters to wake (the plain mutex:
                                   * the owner left its mark among them) */
    unsigned char robust;       /* taken by a robust mutex: Redis keeps
                                   * its record (prelude_robust.lua) */
    unsigned char inconsistent; /* robust, taken owner-dead (EOWNERDEAD)
                                   * and not marked consistent since: its
                                   * last release makes the lock not
                                   * recoverable */
    unsigned long n[2];         /* holds the owner believes it has: [0]
                                   * the mutex's or the read holds, [1] the
                                   * write holds */
    uint64_t token;             /* fencing token of the first hold */
    uint64_t safe_end;          /* explicit lease: surely still held
                                   * until then (monotonic ms, the last
                                   * acquire's send + the lease - the
                                   * safety margin) */
    uint64_t lease_end;         /* explicit lease: gone on the server by
                                   * then for sure (monotonic ms) */
    struct dist__hold *h;       /* renewal entry while registered or while
                                   * an unknown outcome is being settled */
    struct dist__rec_ext *ext;  /* the kind's own (rwlock: timeout keys) */
    struct dist__defer *pend;   /* a deferred release whose reply has not
                                   * been read (call.c) */
};

/* What Redis keys by name, shared by every object of that name and family
 * in the process: Redis counts one owner thread's holds of a name together,
 * so the local record of them must be one too. */
/* How the engine frees a state's local attachment, and takes it through
 * fork() (phase as dist__fork_rank's; 0 with the state's mu held): the
 * engine calls down into what it knows, never up into a kind. */
struct dist__local_ops {
    void (*free)(void *local);
    void (*fork)(void *local, int phase);
};
/* The start of what a layer above keeps per name: how to free it. */
struct dist__local {
    const struct dist__local_ops *ops;
};

/* One per name in use: 88 B (a 96 B chunk), a part of every lock's cost
 * (docs/performance.md). */
struct dist__state {
    struct dist__state *next; /* its chain in the family registry */
    int refs;                 /* objects using it (family registry) */
    uint32_t hash;            /* of its name, for the registry */
    pthread_mutex_t mu;       /* guards recs and the kind's fields */
    struct dist__names *names;
    struct dist__rec *recs;
    void *ext; /* the kind's own, under mu */
    /* what a layer above keeps per name in this process (the local
     * hand-off of a cohort mutex, cohort.c), made at its first use under
     * mu, then read without it */
    struct dist__local *local;
};

/* struct dist__obj.flags the engine reads (the kinds' own start at 1,
 * kinds.h): the attribute's word on deferred release, else the default. */
#define DIST__MUTEX_DEFER_ON  0x100
#define DIST__MUTEX_DEFER_OFF 0x200
/* cohort mode (cohort.c), fixed when the object is made: on or off */
#define DIST__MUTEX_COHORT    0x400
/* a robust mutex (DIST_MUTEX_ROBUST): its scripts keep a record beside the
 * lock that tells a new holder the last one did not release it cleanly */
#define DIST__MUTEX_ROBUST    0x800

/* How a robust mutex's release treats its record (struct dist__call.robust,
 * the release scripts' 'how'): not robust; a clean release (the record
 * goes); an inconsistent hold's last release (not recoverable); a hold
 * given back that its owner never saw taken, or may not have (an acquire
 * that failed after all: the record goes back to what it was, so the
 * next holder is told what this one would have been). */
#define DIST__ROBUST_NONE  0
#define DIST__ROBUST_CLEAN 1
#define DIST__ROBUST_LOST  2
#define DIST__ROBUST_BACK  3

struct dist__cohort;

/* One user object (dist_mutex_t, dist_rwlock_t). */
struct dist__obj {
    unsigned magic;
    const struct dist__kind *kind;
    struct dist__state *st;
    int flags;              /* the kind's settings */
    unsigned long lease_ms; /* 0: the watchdog renews */
};

/* One acquire or release in progress. */
struct dist__call {
    struct dist__obj *o;
    int mode; /* 0 mutex or read, 1 write */
    enum dist__how how;
    unsigned long n[2]; /* the owner's counts before the call */
    /* an acquire try's answer */
    int taken;
    unsigned long count; /* the owner's holds of mode afterwards */
    uint64_t token;
    long long wait;        /* not taken: sleep at most this (ms);
                                   * -1: the lock never expires */
    uint64_t seen_token;   /* not taken (fair): the lock's fencing
                                   * counter then; a grant of a token no
                                   * greater came before the try and is
                                   * void (its hold found gone) */
    int registered;        /* not taken, and registered as a waiter
                                   * in Redis (the plain mutex's waiters):
                                   * its entry is renewed while it waits,
                                   * and it leaves (the kind's cancel) if
                                   * it gives up, as a queued one does */
    int wakes;             /* taken fresh: its release has waiters
                                   * to wake (kept in the record); a
                                   * release: what the record says */
    int aimed;             /* not taken: the holder's release will
                                   * wake this waiter on a channel of its
                                   * own; the kind's channel depends on it */
    int lost;              /* earlier holds were found gone */
    int unknown;           /* sent, and no answer came back */
    int bad;               /* the answer could not be true
                                   * (dist__call_bad): not tried again */
    long long woken;       /* release: subscribers the message reached */
    struct dist__link *on; /* where the acquire ran (for the replica
                                   * sync); valid until the thread's next
                                   * route call */
    uint64_t started;      /* when the call began (monotonic ms) */
    uint64_t tried_us;     /* when its last try was sent (dist__now_us):
                                   * see dist__sub_quiet_since */
    uint64_t limit;        /* the end of the commands of the kind's
                                   * acquire, release or cancel under way
                                   * (link.h; 0: none): set by the engine,
                                   * passed by the kind to every route
                                   * call it makes */
    /* deferred release (see call.c): a kind that can send its release
     * without waiting for the reply does so when defer_fn is set, hands
     * the reply to defer_fn(defer_arg), and says so with deferred (and
     * c->count as if the release had run, c->on the link) */
    dist__owed_fn defer_fn;
    void *defer_arg;
    int deferred;
    int no_defer;               /* the release must be waited for */
    struct dist__defer *behind; /* an acquire sent after a deferred
                                   * release of the same owner, whose reply
                                   * was not read yet */
    int fixup;                  /* that release did not run: the acquire
                                   * counted its hold, one to give back */
    int keep_set;               /* a release refused or unanswered: the */
    unsigned long keep;         /* owner's count becomes keep (else one
                                   * less); see give_back_to */
    int unlocking;              /* an unlock: holds found lost are let go
                                   * of at once (dist__renew_let_go) */
    int told;                   /* what that let-go returned */
    int intr;                   /* DIST__SUB_* (pubsub.h): the sleeps of
                                   * a waiting acquire end on a signal
                                   * handler, or are cancellation points */
    int replaced;               /* a take that replaced the owner's
                                   * holds of c->mode (c->count is all it
                                   * holds now; see the semaphore's kind) */
    int had;                    /* with replaced: Redis still had the
                                   * holds it replaced (else: lost) */
    int robust;                 /* DIST__ROBUST_*: how a release treats
                                   * the robust record; on an acquire,
                                   * BACK for a robust mutex (what a
                                   * settle of its unknown outcome does) */
    int ownerdead;              /* a robust acquire took the lock from a
                                   * holder that did not release it
                                   * cleanly: EOWNERDEAD */
};

struct dist__kind {
    const char *noun; /* in messages: "mutex", "rwlock" */
    int family;       /* DIST__FAM_*: states are shared by name
                                   * within a family */
    unsigned magic;
    /* Its batched renewal script, and its settle of an unknown outcome
     * (internal.h): all the renewal thread asks of it. */
    struct dist__renewal renewal;
    /* One try of c->mode.  0 with c->taken and c->count/token or c->wait;
     * EDEADLK; EIO, with c->unknown when it may have run; ENOMEM. */
    int (*acquire)(struct dist__call *c);
    /* Gives back one hold of c->mode.  0 with c->count left; EPERM when
     * the holds were lost; EIO, with c->unknown when it may have run. */
    int (*release)(struct dist__call *c);
    /* A queued or registered waiter that gives up leaves the queue
     * (best effort). */
    void (*cancel)(struct dist__call *c);
    /* The channel a waiter of c sleeps on (asked again when the last
     * try's c->aimed changed); the names of the keys with which a queued
     * or registered one's deadline is kept fresh (waiter_renew), *nkeys
     * of them. */
    struct dist__chan *(*channel)(struct dist__call *c);
    const enum dist__nm *(*queue)(struct dist__call *c, int *nkeys);
    /* Optional: after a try that was refused, why (" or has waiters"). */
    const char *(*busy_why)(const struct dist__call *c);
    /* Optional hooks: before a blocking acquire (deadline: the caller's,
     * monotonic ms; 0: none), after a release. */
    void (*before_wait)(struct dist__call *c, uint64_t deadline);
    void (*after_release)(struct dist__call *c);
    /* Says how a try of c may end (c->how), or refuses the call (EDEADLK
     * for a relock the type forbids, with the text set). */
    int (*plan)(struct dist__call *c, int try_only);
    /* Optional: the flags of an object made at first use (an
     * INITIALIZER's), which no attribute set. */
    int (*default_flags)(void);
    /* Optional: the state's ext. */
    int (*state_init)(struct dist__state *st);
    void (*state_free)(struct dist__state *st);
    /* Optional: a new renewal entry of r gets its keys (default: the
     * name).  The state's mu held. */
    void (*renew_keys)(struct dist__state *st, struct dist__rec *r,
                       struct dist__hold *h);
};

#define DIST__FAM_MUTEX  0
#define DIST__FAM_RWLOCK 1
#define DIST__FAM_SEM    2
#define DIST__FAM_COUNT  3

/* ---- objects (engine.c) -------------------------------------------------- */

int dist__check_name(const char *name, size_t *len);
int dist__obj_new(const struct dist__kind *k, const char *name, int flags,
                  unsigned long lease_ms, struct dist__obj **out);
void dist__obj_free(struct dist__obj *o);
/* dist_*_init: a new object into the user's fields. */
int dist__obj_init(const struct dist__kind *k, const char *name, int flags,
                   unsigned long lease_ms, const char **uname, void **impl,
                   unsigned long reserved[2]);
/* An attribute's explicit lease: EINVAL past a day. */
int dist__lease_set(unsigned long *field, unsigned long lease_ms);
/* The object behind a user's (name, impl) pair, created at first use for
 * an object set with an INITIALIZER.  what: "mutex" or "rwlock". */
int dist__obj_get(const struct dist__kind *k, const char *name, void **impl,
                  unsigned long reserved[2], struct dist__obj **out);
/* Destroys *impl: EBUSY while a local thread holds it. */
int dist__obj_destroy(const struct dist__kind *k, void **impl,
                      unsigned long reserved[2]);
unsigned long dist__lease_of(const struct dist__obj *o);

/* ---- records (engine.c); the state's mu held -------------------------------- */

/* The fork generation as a record keeps it. */
static inline unsigned dist__rec_gen(void)
{
    return (unsigned)atomic_load(&dist__fork_gen);
}
struct dist__rec *dist__rec_find(struct dist__state *st);
struct dist__rec *dist__rec_get(struct dist__state *st);
void dist__rec_drop(struct dist__state *st, struct dist__rec *r);
void dist__rec_tidy(struct dist__state *st);

/* ---- calls (call.c) ------------------------------------------------------- */

int dist__acquire(struct dist__obj *o, int mode, int try_only,
                  const struct dist__deadline *dl);
/* A blocking acquire of mode 0 whose sleeps a signal handler interrupts
 * (EINTR, nothing taken) or which are cancellation points (nothing taken
 * either), as intr (DIST__SUB_* of pubsub.h) says: the semaphore waits.
 * Only for a kind that waits without a queue (DIST__HOW_WAIT). */
int dist__acquire_intr(struct dist__obj *o, const struct dist__deadline *dl,
                       int intr);
/* A blocking acquire of mode 0 by a thread that has been waiting already
 * (a condition variable's waiter taking its mutex back): without the
 * kind's before_wait, whose courtesy to other waiters is for a thread
 * that loops on lock and unlock. */
int dist__reacquire(struct dist__obj *o);
/* Every waiting acquire of the process, now and later, gives up at its next
 * wake-up with ECANCELED, leaving its queue from its own thread, after its
 * last try (for the distlock tool, which exits on a signal while its main
 * thread waits).  Async-signal-unsafe; never undone. */
void dist__abandon_waits(void);
int dist__release(struct dist__obj *o);
/* The same, never deferred: for a thread about to sleep (a condition
 * wait), which would read a deferred release's reply only after waking,
 * while a release that was refused kept the mutex from everyone. */
int dist__release_waiting(struct dist__obj *o);
/* A state kept alive by a deferred release in flight. */
void dist__state_ref(const struct dist__kind *k, struct dist__state *st);
void dist__state_unref(const struct dist__kind *k, struct dist__state *st);
/* A kind found c's reply impossible (a count no call could have left, a
 * reply of the wrong shape): EIO with the text "<noun> '<name>': Redis
 * answered <script> with <what>, ...", and c->unknown, since whatever the
 * server did is not known (the engine hands it to the renewal thread, the
 * caller believes no hold from it). */
int dist__call_bad(struct dist__call *c, const char *script, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));
/* Marks the calling thread's owner-dead hold of a robust o consistent:
 * its release is clean again.  0, EINVAL (o not robust, or the hold is
 * consistent), EPERM (not held by the caller). */
int dist__consistent(struct dist__obj *o);
/* The calling thread's fencing token; mode 1: of a write hold. */
int dist__token(struct dist__obj *o, int mode, uint64_t *token);
/* How long the calling thread's holds of o are surely still its own, into
 * *left: 0, or EPERM (a zero *left) when it holds none, or no longer
 * surely (past the safe-until bound, or found lost). */
int dist__lease_left(struct dist__obj *o, struct timespec *left);
/* The calling thread's holds of mode as it believes them: 0 when it holds
 * none or they were found lost. */
unsigned long dist__held(struct dist__obj *o, int mode);
/* Redis said the calling thread's hold of o is gone (a script of another
 * kind found its field missing): the record goes, as after an unlock that
 * said EPERM, and the lost handler hears of it unless it did already. */
void dist__hold_lost(struct dist__obj *o);
/* When the calling thread's holds of o were found lost (by the renewal or
 * watch thread): the same, and 1; else 0 (nothing changes). */
int dist__hold_found_lost(struct dist__obj *o);
/* Fills dl from an API call's arguments, converted to the monotonic
 * clock: EINVAL for a clock other than CLOCK_REALTIME and
 * CLOCK_MONOTONIC, or a NULL abstime (abstime's fields are checked only
 * when the call would wait). */
int dist__deadline_set(struct dist__deadline *dl, clockid_t clock,
                       const struct timespec *abs);
/* ms on the monotonic clock when dl is reached, as dist__deadline_set
 * converted it; EINVAL for a bad dl */
int dist__deadline_ms(const struct dist__deadline *dl, uint64_t *ms);
int dist__deadline_reached(const struct dist__deadline *dl);
/* After a sleep bounded by *deadline (monotonic ms, 0: none): 1 when dl is
 * reached (the caller makes its last try), else 0, with *deadline moved
 * when the clock dl names was stepped meanwhile. */
int dist__deadline_step(const struct dist__deadline *dl, uint64_t *deadline);

/* ---- lock cohorting (cohort.c) ---------------------------------------- */

/* A cohort mutex's lock (try_only: trylock; dl: a deadline or NULL),
 * unlock and token, for the calling thread as a member of the process's
 * cohort of that name. */
int dist__cohort_lock(struct dist__obj *o, int try_only,
                      const struct dist__deadline *dl);
int dist__cohort_unlock(struct dist__obj *o);
int dist__cohort_token(struct dist__obj *o, uint64_t *token);
int dist__cohort_lease_left(struct dist__obj *o, struct timespec *left);
/* 1 while a local thread has the cohort's turn or waits for it */
int dist__cohort_busy(struct dist__obj *o);

#endif
