/* pubsub.c: the pub/sub thread, one per process.  It subscribes each
 * channel once however many threads wait on it, and turns release messages
 * into wake-ups of local waiters.
 *
 * Waiters talk to it through the channel table and a pipe.  A message is
 * only a hint: waiters always bound their sleep by the holder's lease, so
 * a lost message costs time, never a hang.  Whenever a channel may have
 * missed messages its waiters are all woken to retry: at once when its
 * connection broke (and again once it is subscribed anew), once it is
 * subscribed on its new node when it moved.
 *
 * The connections, "nodes" here:
 *
 *   redis://, unix://, redis-sentinel://   one, to the master, opened when
 *       the thread starts and kept; SUBSCRIBE.  Behind sentinels it follows
 *       the master: it is dropped when dist__route names another one,
 *       which it asks at once when one of the thread's ears on the
 *       sentinels hears of a switch (pubsub_ears.c).
 *   redis-cluster://...?pubsub=sharded   releases are published with
 *       SPUBLISH and heard only on the node serving the channel's slot (a lock's channels carry its
 *       {hash tag}, so that is the lock's node).  A channel is subscribed
 *       with SSUBSCRIBE on the node dist__route names for its name; there
 *       is one connection per such node, opened when a channel needs it and
 *       closed once it has served none for IDLE_MS.  A channel moves to the
 *       node serving its slot now when its node's connection breaks, when
 *       the node answers MOVED or drops the subscription itself (an
 *       sunsubscribe not asked for: the slot was migrated away), and when
 *       the slot map changes (dist__topo_epoch, looked at every turn; the
 *       map is asked for every MAP_CHECK_MS, which reads it again when due).
 *   redis-cluster://...?pubsub=plain   releases are published with PUBLISH,
 *       which the cluster passes to every node: one connection, to any
 *       master, with SUBSCRIBE, as on one server (what Redisson before 3.22
 *       does, and all there is on Redis 6).
 *   redis-cluster:// (pubsub=both, the default)   releases are published
 *       both ways, and each channel is heard both ways on the node its slot
 *       names, as with pubsub=sharded: SSUBSCRIBE, then SUBSCRIBE on the
 *       same connection (a plain PUBLISH reaches every node, that one too).
 *       The sharded answer alone moves the channel's state; the plain one
 *       is a second ear, so that Redisson clients of either kind wake us.
 *       A message heard twice only wakes twice: a wake is a hint.
 *
 * Every (S)SUBSCRIBE and (S)UNSUBSCRIBE names one channel, and each node
 * keeps those not answered yet: answers come in order, so an error belongs
 * to the oldest.  A channel leaving a node is unsubscribed there without
 * waiting; what that node says about it afterwards is ignored.
 *
 * A lone waiter reads its messages itself (DISTLOCK_DIRECT_WAKE): while the
 * thread sleeps in poll(2) with nothing queued or unanswered on a node
 * (one server, Sentinel, a cluster with ?pubsub=plain: never a sharded
 * node), it may lend that node to a thread that waits while no other
 * local thread does (dist__ps_borrow); the node comes back as soon as
 * another one starts to wait.  The borrower polls the node's socket and
 * the state's bell, hands every reply to the thread's own handle(), and
 * gives the node back once its wake-up came, its time is up, or the
 * thread rang the bell because it needs the node (a command to send, a
 * master to follow, settings, stop).  That saves a wake-up per hand-off:
 * the message wakes the thread that waits for it, not the pub/sub thread
 * first.
 *
 * The state (struct dist__ps_state: this file's, handed to the thread's
 * half by pointer) has a mutex, mu, that guards the channel table, the
 * list of nodes and the lending fields.  A node's other fields and its
 * context belong to the thread, which does its network I/O without mu,
 * or, while the node is lent, to its borrower: nodes are lent only while
 * the thread polls (polling), and a lent one is left out of everything
 * the thread does until it is back.  Only the thread frees channels and
 * nodes (and dist__pubsub_shutdown, after it ended), so it keeps pointers
 * to them across an unlock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pubsub_int.h"

/* The one pub/sub state of the process.  This file owns it; the thread's
 * half (pubsub_thread.c) is handed it by pointer, as its thread's argument
 * and in every call from here, so that what the two halves share is the
 * struct dist__ps_state of pubsub_int.h and nothing else. */
static struct dist__ps_state pubsub = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .pipe = { -1, -1 },
    .bell = { -1, -1 },
};

/* Before pubsub.mu is first taken.  Every other entry point has a channel from
 * dist__sub_get. */
DIST__FORK_HOOK(pubsub_init, pubsub_fork, DIST__RANK_PUBSUB)

static void poke(void)
{
    dist__ps_ring(pubsub.pipe);
}

/* A non-blocking close-on-exec pipe in fd, unless there is one.  0 or -1. */
static int open_pipe(int *fd)
{
    int i;

    if (fd[0] >= 0)
        return 0;
    if (pipe(fd) != 0) {
        fd[0] = fd[1] = -1;
        return -1;
    }
    for (i = 0; i < 2; i++) {
        fcntl(fd[i], F_SETFL, fcntl(fd[i], F_GETFL) | O_NONBLOCK);
        fcntl(fd[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

static void close_pipe(int *fd)
{
    if (fd[0] >= 0) {
        close(fd[0]);
        close(fd[1]);
        fd[0] = fd[1] = -1;
    }
}

/* pubsub.mu held. */
static void ensure_thread(void)
{
    if (pubsub.running)
        return;
    if (open_pipe(pubsub.pipe) != 0)
        return;
    open_pipe(pubsub.bell); /* without it no node is lent */
    pubsub.stop = 0;
    if (dist__thread_start(&pubsub.th, dist__ps_main, &pubsub) == 0)
        pubsub.running = 1;
    else
        fprintf(stderr, "distlock: cannot start the pub/sub thread\n");
}

struct dist__chan *dist__sub_get(const struct dist__buf *chan)
{
    struct dist__chan *ch;

    pubsub_init();
    pthread_mutex_lock(&pubsub.mu);
    ch = dist__ps_find(&pubsub, chan->p, chan->len);
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch || !(ch->name = malloc(chan->len + 1)) ||
            dist__cond_init_mono(&ch->cv) != 0) {
            if (ch)
                free(ch->name);
            free(ch);
            pthread_mutex_unlock(&pubsub.mu);
            return NULL;
        }
        memcpy(ch->name, chan->p, chan->len);
        ch->name[chan->len] = 0;
        ch->len = chan->len;
        ch->next = pubsub.chans;
        pubsub.chans = ch;
    }
    ch->refs++;
    ensure_thread();
    if (ch->wire != W_SUBSCRIBED)
        poke();
    pthread_mutex_unlock(&pubsub.mu);
    return ch;
}

void dist__sub_put(struct dist__chan *ch)
{
    if (!ch)
        return;
    pthread_mutex_lock(&pubsub.mu);
    if (--ch->refs == 0) {
        ch->permits = 0;
        ch->idle_since = dist__now_ms(); /* the thread unsubscribes later */
    }
    pthread_mutex_unlock(&pubsub.mu);
}

int dist__sub_listening(const struct dist__buf *chan, int *waiters)
{
    struct dist__chan *ch;
    int subscribed = 0;

    pubsub_init();
    *waiters = 0;
    pthread_mutex_lock(&pubsub.mu);
    ch = dist__ps_find(&pubsub, chan->p, chan->len);
    if (ch) {
        subscribed = ch->wire == W_SUBSCRIBED || ch->wire == W_UNSUBSCRIBING;
        *waiters = ch->refs;
    }
    pthread_mutex_unlock(&pubsub.mu);
    return subscribed;
}

int dist__sub_grant_take(struct dist__chan *ch, uint64_t *token,
                         unsigned long *lease)
{
    int got;

    pthread_mutex_lock(&pubsub.mu);
    got = ch->grant_token > ch->spent;
    if (got) {
        *token = ch->spent = ch->grant_token;
        *lease = ch->grant_lease;
        if (ch->permits > 0)
            ch->permits--; /* the wake-up it came with */
    }
    ch->grant_token = 0;
    pthread_mutex_unlock(&pubsub.mu);
    return got;
}

/* ps->mu held */
static void spend(struct dist__chan *ch, uint64_t token)
{
    if (token > ch->spent)
        ch->spent = token;
    if (ch->grant_token <= ch->spent)
        ch->grant_token = 0;
}

void dist__sub_spend(struct dist__chan *ch, uint64_t token)
{
    pthread_mutex_lock(&pubsub.mu);
    spend(ch, token);
    pthread_mutex_unlock(&pubsub.mu);
}

void dist__sub_spend_name(const struct dist__buf *chan, uint64_t token)
{
    struct dist__chan *ch;

    pubsub_init();
    pthread_mutex_lock(&pubsub.mu);
    if ((ch = dist__ps_find(&pubsub, chan->p, chan->len)) != NULL)
        spend(ch, token);
    pthread_mutex_unlock(&pubsub.mu);
}

unsigned long dist__sub_gen(struct dist__chan *ch)
{
    unsigned long gen;

    pthread_mutex_lock(&pubsub.mu);
    gen = ch->gen;
    pthread_mutex_unlock(&pubsub.mu);
    return gen;
}

int dist__sub_quiet_since(struct dist__chan *ch, uint64_t us)
{
    int quiet;

    pthread_mutex_lock(&pubsub.mu);
    /* a node's plain_too is fixed when the thread makes it */
    quiet = ch->wire == W_SUBSCRIBED && ch->node && !ch->node->plain_too &&
            ch->ready_us < us && ch->heard_us < us;
    pthread_mutex_unlock(&pubsub.mu);
    return quiet;
}

/* A futex sleeper, for its cleanup handler. */
struct fsleeper {
    struct dist__chan *ch;
    int counted; /* in pubsub.sleepers too */
};

/* A futex sleeper cancelled in its sleep leaves the counts it was in.
 * pubsub.mu is not held there. */
static void futex_sleeper_gone(void *arg)
{
    struct fsleeper *f = arg;

    pthread_mutex_lock(&pubsub.mu);
    f->ch->fsleepers--;
    if (f->counted)
        pubsub.sleepers--;
    pthread_mutex_unlock(&pubsub.mu);
}

/* The futex wait of futex_sleep: -1 with errno, or 0.  With cancel, a
 * request acts in it (async cancellation around the system call alone,
 * as glibc's own cancellation points do; nothing of the library is held
 * there). */
static long futex_wait(uint32_t *word, uint32_t seen,
                       const struct timespec *rel, int cancel)
{
    int type = 0, state = 0;
    long rc;

    if (!cancel)
        return syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, rel, NULL,
                       0);
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &state);
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &type);
    rc = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, rel, NULL, 0);
    pthread_setcanceltype(type, &type);
    pthread_setcancelstate(state, &state);
    return rc;
}

/* One sleep of an interruptible waiter on ch->seq, until until_ms at the
 * latest; pubsub.mu held, released meanwhile.  EINTR when a signal handler ran
 * on the thread, else 0.  counted: a sleeper waiting for a message, in
 * pubsub.sleepers (not one waiting for the subscription, which
 * pthread_cond_timedwait's sleepers are not counted as either). */
static int futex_sleep(struct dist__chan *ch, uint64_t until_ms, int cancel,
                       int counted)
{
    struct fsleeper f = { ch, counted };
    uint32_t seen = __atomic_load_n(&ch->seq, __ATOMIC_RELAXED);
    uint64_t now = dist__now_ms(), left = until_ms > now ? until_ms - now : 0;
    struct timespec rel = { (time_t)(left / 1000),
                            (long)(left % 1000) * 1000000L };
    long rc;
    int err;

    ch->fsleepers++;
    pubsub.sleepers += counted;
    pthread_mutex_unlock(&pubsub.mu);
    pthread_cleanup_push(futex_sleeper_gone, &f);
    rc = futex_wait(&ch->seq, seen, &rel, cancel);
    err = errno;
    pthread_cleanup_pop(0);
    pthread_mutex_lock(&pubsub.mu);
    ch->fsleepers--;
    pubsub.sleepers -= counted;
    return rc < 0 && err == EINTR ? EINTR : 0;
}

/* dist__sub_wait_ready, and dist__sub_wait_ready_intr with intr: only
 * DIST__SUB_CANCEL counts there (a handler that ran only ends one sleep;
 * the caller's next sleep is soon). */
static void wait_ready(struct dist__chan *ch, uint64_t until_ms, int intr)
{
    struct timespec ts;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&pubsub.mu);
    while (ch->wire != W_SUBSCRIBED && pubsub.running &&
           dist__now_ms() < until_ms)
        if (intr & DIST__SUB_CANCEL)
            futex_sleep(ch, until_ms, 1, 0);
        else if (pthread_cond_timedwait(&ch->cv, &pubsub.mu, &ts) ==
                 ETIMEDOUT)
            break;
    pthread_mutex_unlock(&pubsub.mu);
}

void dist__sub_wait_ready(struct dist__chan *ch, uint64_t until_ms)
{
    wait_ready(ch, until_ms, 0);
}

void dist__sub_wait_ready_intr(struct dist__chan *ch, uint64_t until_ms,
                               int intr)
{
    wait_ready(ch, until_ms, intr);
}

/* dist__sub_wait_since, and dist__sub_wait_intr with intr. */
static int wait_since(struct dist__chan *ch, unsigned long gen,
                      uint64_t until_ms, int intr)
{
    struct timespec ts;
    int rc = ETIMEDOUT, direct = dist__direct_wake(), eintr = 0;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&pubsub.mu);
    for (;;) {
        if (ch->gen != gen) {
            rc = 0; /* a wake-all: no other waiter can take it */
            break;
        }
        if (ch->permits > 0) {
            ch->permits--;
            rc = 0;
            break;
        }
        if (eintr) {
            rc = EINTR; /* after the wake-ups: one that came is taken */
            break;
        }
        if (dist__now_ms() >= until_ms)
            break;
        if (direct && (intr ? dist__ps_borrow_intr(&pubsub, ch, gen, until_ms,
                                                   intr, &eintr)
                            : dist__ps_borrow(&pubsub, ch, gen, until_ms)))
            continue;
        /* a borrower is no lone waiter any more: it gives the node back
         * (dist__ps_borrow) */
        if (pubsub.lent && !pthread_equal(pubsub.borrower, pthread_self()))
            dist__ps_ring(pubsub.bell);
        if (intr) {
            eintr = futex_sleep(ch, until_ms, intr & DIST__SUB_CANCEL, 1) ==
                        EINTR &&
                    (intr & DIST__SUB_EINTR);
            continue;
        }
        pubsub.sleepers++;
        pthread_cond_timedwait(&ch->cv, &pubsub.mu, &ts);
        pubsub.sleepers--;
    }
    pthread_mutex_unlock(&pubsub.mu);
    return rc;
}

int dist__sub_wait_since(struct dist__chan *ch, unsigned long gen,
                         uint64_t until_ms)
{
    return wait_since(ch, gen, until_ms, 0);
}

int dist__sub_wait_intr(struct dist__chan *ch, unsigned long gen,
                        uint64_t until_ms, int intr)
{
    return wait_since(ch, gen, until_ms, intr);
}

void dist__sub_wake_all(void)
{
    struct dist__chan *ch;

    pubsub_init();
    pthread_mutex_lock(&pubsub.mu);
    for (ch = pubsub.chans; ch; ch = ch->next)
        dist__ps_wake(&pubsub, ch, 1);
    pthread_mutex_unlock(&pubsub.mu);
}

void dist__pubsub_shutdown(void)
{
    struct dist__chan *ch;
    pthread_t th;
    int running;

    pubsub_init();
    pthread_mutex_lock(&pubsub.mu);
    running = pubsub.running;
    th = pubsub.th;
    pubsub.stop = 1;
    poke();
    pthread_mutex_unlock(&pubsub.mu);
    if (running)
        pthread_join(th, NULL);

    pthread_mutex_lock(&pubsub.mu);
    pubsub.running = 0;
    for (ch = pubsub.chans; ch; ch = ch->next) {
        ch->wire = W_NONE;
        pthread_cond_broadcast(&ch->cv);
        dist__ps_kick(ch);
    }
    dist__ps_reconcile(&pubsub, 0,
                       NULL); /* frees the channels nobody waits on */
    pthread_mutex_unlock(&pubsub.mu);
}

static void pubsub_fork(int phase)
{
    struct dist__chan *ch;

    if (phase == 0) {
        pthread_mutex_lock(&pubsub.mu);
    } else if (phase == 1) {
        pthread_mutex_unlock(&pubsub.mu);
    } else {
        /* No thread waits in the child; the parent's subscriptions and
         * sockets are not ours.  Its nodes are put aside, never used nor
         * freed: the parent's thread may have been using a context when
         * the fork came, and closing a socket sends nothing anyway. */
        for (ch = pubsub.chans; ch; ch = ch->next) {
            ch->refs = 0;
            ch->wire = W_NONE;
            ch->node = NULL;
            ch->sent = 0;
            ch->permits = 0;
            ch->fsleepers = 0;
            dist__cond_init_mono(&ch->cv);
        }
        if (pubsub.nodes) {
            struct dist__node *last = pubsub.nodes;
            while (last->next)
                last = last->next;
            last->next = pubsub.left;
            pubsub.left = pubsub.nodes;
            pubsub.nodes = NULL;
        }
        dist__ps_ears_fork();
        dist__ps_reconcile(&pubsub, 0, NULL);
        pubsub.running = 0;
        pubsub.stop = 0;
        pubsub.polling = 0;
        pubsub.lent = NULL; /* if the forking thread's parent had one,
                               * it is among the nodes put aside */
        pubsub.lent_ch = NULL;
        pubsub.sleepers = 0;
        pubsub.want_ch = NULL;
        close_pipe(pubsub.pipe);
        close_pipe(pubsub.bell);
        pthread_mutex_unlock(&pubsub.mu);
    }
}
