/* pubsub_int.h: what the two halves of the pub/sub module share:
 * pubsub.c, the waiters' side (the channel table), and pubsub_thread.c,
 * the thread's (nodes, links, the loop).  See pubsub.c for the design. */
#ifndef DIST_PUBSUB_INT_H
#define DIST_PUBSUB_INT_H

#include <poll.h>

#include "pubsub.h"
#include "route/route.h"

enum wire { W_NONE, W_SUBSCRIBING, W_SUBSCRIBED, W_UNSUBSCRIBING };

struct dist__node;

struct dist__chan {
    struct dist__chan *next;
    char *name;
    size_t len;
    int refs;                /* threads waiting on it */
    struct dist__node *node; /* where it is or will be subscribed; NULL:
                             * not placed yet (or about to be freed) */
    enum wire wire;          /* its state there; W_NONE unless node is
                             * connected */
    int resub;               /* wake all waiters once subscribed: messages
                             * may have been missed meanwhile */
    int sent;                /* commands naming it not answered yet */
    int errors;              /* failed placements or subscribes in a row */
    uint64_t retry_at;       /* not placed or subscribed before (errors) */
    unsigned long permits;   /* wake-ups not yet taken */
    unsigned long gen;   /* wake-all messages so far (see sub_wait_since) */
    uint64_t idle_since; /* when refs last fell to 0 */
    /* in microseconds (dist__now_us), not ms: a waiter woken, given the
     * lock and back for it within one millisecond must not read its own
     * wake-up as one that may have come after its next try */
    uint64_t ready_us; /* when it was last confirmed subscribed */
    uint64_t heard_us; /* when a message for it last came */
    /* A fair lock's grant heard on a waiter's own channel, not taken yet
     * (its token, 0: none, and lease), and the highest token of a grant
     * taken or passed on: a grant message at or below it is an old one,
     * ignored (dist__sub_grant_take). */
    uint64_t grant_token;
    unsigned long grant_lease;
    uint64_t spent;
    pthread_cond_t cv;
    /* Interruptible sleepers (dist__sub_wait_intr, _ready_intr) wait on
     * this futex word instead of cv: every wake-up of the channel moves
     * it (and its becoming subscribed), and a signal handler that runs on
     * the sleeper ends its futex wait. */
    uint32_t seq;
    int fsleepers; /* threads in that futex wait */
};

struct sent { /* a command awaiting its answer */
    struct dist__chan *ch;
    int unsub;
    int plain_too; /* the plain (UN)SUBSCRIBE that follows the
                             * sharded one on a plain_too node: its answer
                             * changes nothing but the queue */
};

struct dist__node {
    struct dist__node *next;
    struct dist__addr addr;  /* cluster: what it is; otherwise the master
                               * it last connected to */
    int sharded;             /* SSUBSCRIBE (cluster) rather than SUBSCRIBE */
    int plain_too;           /* sharded, and each channel SUBSCRIBEd too
                               * (?pubsub=both): a plain PUBLISH reaches
                               * every node of a cluster, this one too */
    struct dist__link *link; /* NULL: not connected */
    unsigned long cfg_gen;   /* the settings link was opened with */
    int backoff;             /* ms to wait after the next failed connect,
                               * or a connection lost soon after it */
    uint64_t retry_at;       /* no connect before */
    uint64_t connected_at;   /* when link was opened; 0: not connected */
    uint64_t idle_since;     /* cluster: connected and serving no channel
                               * since; 0 otherwise */
    int nchans;              /* channels placed on it, as last counted */
    int out;                 /* commands appended, not written yet */
    int lent;                /* a waiter reads it (dist__ps_borrow): the
                               * thread leaves its link alone meanwhile */
    int recall;              /* lent, and the thread wants it back */
    int failed;              /* its link broke while lent: the thread
                               * gives it up (lost_node) at its next turn */
    int in_poll;             /* in the thread's poll set, as last built */
    struct sent *q;          /* unanswered commands: a ring, oldest at */
    int qhead, qlen, qcap;   /* qhead */
};

/* A channel nobody waits on stays subscribed this long: a lock contended
 * once is usually contended again, and the next waiter then neither waits
 * for a SUBSCRIBE nor wakes this thread. */
#define GRACE_MS       250
/* A cluster node's connection serving no channel is closed after this. */
#define IDLE_MS        1000
/* On a cluster, dist__route is asked this often so that the slot map is
 * read again when due even if no other thread needs it. */
#define MAP_CHECK_MS   1000
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000 /* between a node's connects, at most */
#define HEALTHY_MS     1000 /* a connection that lived this long worked */

/* The backoff after one that was just waited out: doubled, up to max.
 * Doubled once more whenever it was still below max, it overshot (50 ms
 * doubled to 1600, 1000 to 32000). */
static inline int dist__ps_backoff_next(int ms, int max)
{
    return ms < max / 2 ? ms * 2 : max;
}

/* The pub/sub state: one per process, pubsub.c's.  The thread's half gets
 * it only by pointer (ps), from the thread's argument and from each call
 * pubsub.c makes into it. */
struct dist__ps_state {
    pthread_mutex_t mu;
    struct dist__chan *chans;
    struct dist__node *nodes;
    struct dist__node *left; /* in a forked child: the parent's nodes, never
                             * used (see pubsub_fork) */
    int running, stop;
    pthread_t th;
    int pipe[2];
    /* Lending (dist__ps_borrow): at most one node is lent at a time, only
     * while the thread sleeps in poll(2) (polling), so that nothing the
     * thread does in its turn meets a node lent under its feet. */
    int polling;
    struct dist__node *lent;    /* the node lent, or NULL */
    struct dist__chan *lent_ch; /* what its borrower waits on */
    pthread_t borrower;
    int bell[2];                /* rings the borrower: recalled, woken */
    int sleepers;               /* threads in pthread_cond_timedwait on a
                                   * channel */
    struct dist__chan *want_ch; /* a sleeper on it found no node to
                                   * borrow: woken to try again once the
                                   * thread polls */
};

/* ---- pubsub_thread.c ---- */
/* Writes a byte to the pipe fd (ps->pipe: wakes the thread; ps->bell: wakes
 * a borrower), unless it is closed (fd[1] < 0). */
void dist__ps_ring(const int *fd);
/* The channel named so, or NULL.  ps->mu held. */
struct dist__chan *dist__ps_find(struct dist__ps_state *ps, const char *name,
                                 size_t len);
/* A release message for ch: wakes one waiter, or all (a '1').  ps->mu held. */
void dist__ps_wake(struct dist__ps_state *ps, struct dist__chan *ch, int all);
/* A message heard for ch from n: a grant ('g<token>:<lease>') is kept
 * for its waiter and wakes it, unless it is old (see dist__chan.spent) or
 * came before n confirmed ch (for an earlier subscription of that name);
 * any other wakes as dist__ps_wake.  ps->mu held. */
void dist__ps_heard(struct dist__ps_state *ps, struct dist__node *n,
                    struct dist__chan *ch, const redisReply *msg);
/* Wakes ch's futex sleepers (dist__sub_wait_intr, _ready_intr) to look
 * again: they are woken for every wake-up of ch, and those that find
 * nothing for them sleep again.  The state's mu held. */
void dist__ps_kick(struct dist__chan *ch);
/* Lets the calling thread, waiting on ch for a message after gen, read
 * ch's node itself rather than sleep until the thread wakes it: one
 * wake-up instead of two.  Lends only to a lone waiter (no other thread
 * waits on ch or sleeps on any channel; the node comes back when one
 * does), only a node that the thread does not need (nothing queued or
 * unanswered, the thread asleep in poll), one at a time.  ps->mu held
 * (released while it waits).  1 when the node was lent and is back (ch's
 * state then says whether the wait is over), 0 when no node could be lent
 * (the caller sleeps on ch->cv). */
int dist__ps_borrow(struct dist__ps_state *ps, struct dist__chan *ch,
                    unsigned long gen, uint64_t until);
/* The same for an interruptible wait (intr: DIST__SUB_* of pubsub.h):
 * 1 with *eintr set when a signal handler ran on the thread while it
 * polled; a cancel request acts in the poll when DIST__SUB_CANCEL (the
 * node is given back first, by a cleanup handler). */
int dist__ps_borrow_intr(struct dist__ps_state *ps, struct dist__chan *ch,
                         unsigned long gen, uint64_t until, int intr,
                         int *eintr);
/* ---- pubsub_ears.c: behind sentinels, links to them that hear each
 * switch of the master (+switch-master).  The thread's alone. ---- */
/* Connects the ears that are due (every sentinel of cfg; none in another
 * mode); next lowered to the next retry. */
void dist__ps_ears_keep(const struct dist__cfg *cfg, uint64_t *next);
/* The connected ears, and their pollfds into pfd (as many). */
int dist__ps_ears_count(void);
int dist__ps_ears_poll(struct pollfd *pfd);
/* Reads the ears pfd (filled by dist__ps_ears_poll) says are readable: 1
 * when one heard that the master moved (the next dist__route asks). */
int dist__ps_ears_read(const struct dist__cfg *cfg, const struct pollfd *pfd);
void dist__ps_ears_close(void);
/* In a forked child: the parent's ears are put aside, never used. */
void dist__ps_ears_fork(void);
/* The thread; arg is the state (pubsub.c's). */
void *dist__ps_main(void *arg);
/* Queues the (un)subscribes the table asks for, frees channels nobody
 * needs and counts the channels of each node.  ps->mu held.  next (may be
 * NULL): lowered to when something is due. */
void dist__ps_reconcile(struct dist__ps_state *ps, uint64_t now,
                        uint64_t *next);
/* Unlinks and frees n; no channel may be placed on it.  ps->mu held. */
void dist__ps_node_free(struct dist__ps_state *ps, struct dist__node *n);

#endif
