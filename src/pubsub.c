/* pubsub.c: the pub/sub thread, one per process.  It keeps one subscriber
 * connection, subscribes each channel once however many threads wait on it,
 * and turns release messages into wake-ups of local waiters.
 *
 * Waiters talk to it through the channel table and a pipe; only this thread
 * touches the connection.  A message is only a hint: waiters always bound
 * their sleep by the holder's lease, so a lost message costs time, never a
 * hang.  After a reconnect every channel is subscribed again and all its
 * waiters are woken to retry, since messages may have been missed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

enum wire { W_NONE, W_SUBSCRIBING, W_SUBSCRIBED, W_UNSUBSCRIBING };

struct dist__chan {
    struct dist__chan *next;
    char *name;
    size_t len;
    int refs;               /* threads waiting on it */
    enum wire wire;
    int resub;              /* subscribed again after a reconnect */
    unsigned long permits;  /* wake-ups not yet taken */
    unsigned long gen;      /* wake-all messages so far (see sub_wait_since) */
    uint64_t idle_since;    /* when refs last fell to 0 */
    pthread_cond_t cv;
};

/* A channel nobody waits on stays subscribed this long: a lock contended
 * once is usually contended again, and the next waiter then neither waits
 * for a SUBSCRIBE nor wakes this thread. */
#define GRACE_MS 250

static struct {
    pthread_mutex_t mu;
    struct dist__chan *chans;
    int running, stop;
    pthread_t th;
    int pipe[2];
    redisContext *c;        /* owned by the thread */
    unsigned long c_gen;
    struct dist__addr addr; /* where c is connected */
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .pipe = { -1, -1 } };

static void *pubsub_main(void *arg);

static void poke(void)
{
    char b = 1;
    ssize_t n;

    if (P.pipe[1] >= 0) {
        do
            n = write(P.pipe[1], &b, 1);
        while (n < 0 && errno == EINTR);
    }
}

/* P.mu held. */
static void ensure_thread(void)
{
    int i;

    if (P.running)
        return;
    if (P.pipe[0] < 0) {
        if (pipe(P.pipe) != 0) {
            P.pipe[0] = P.pipe[1] = -1;
            return;
        }
        for (i = 0; i < 2; i++) {
            fcntl(P.pipe[i], F_SETFL, fcntl(P.pipe[i], F_GETFL) | O_NONBLOCK);
            fcntl(P.pipe[i], F_SETFD, FD_CLOEXEC);
        }
    }
    P.stop = 0;
    if (dist__thread_start(&P.th, pubsub_main) == 0)
        P.running = 1;
    else
        fprintf(stderr, "distlock: cannot start the pub/sub thread\n");
}

static struct dist__chan *find(const char *name, size_t len)
{
    struct dist__chan *ch;

    for (ch = P.chans; ch; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

struct dist__chan *dist__sub_get(const struct dist__buf *chan)
{
    struct dist__chan *ch;

    pthread_mutex_lock(&P.mu);
    ch = find(chan->p, chan->len);
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch || !(ch->name = malloc(chan->len + 1)) ||
            dist__cond_init_mono(&ch->cv) != 0) {
            if (ch)
                free(ch->name);
            free(ch);
            pthread_mutex_unlock(&P.mu);
            return NULL;
        }
        memcpy(ch->name, chan->p, chan->len);
        ch->name[chan->len] = 0;
        ch->len = chan->len;
        ch->next = P.chans;
        P.chans = ch;
    }
    ch->refs++;
    ensure_thread();
    if (ch->wire != W_SUBSCRIBED)
        poke();
    pthread_mutex_unlock(&P.mu);
    return ch;
}

void dist__sub_put(struct dist__chan *ch)
{
    if (!ch)
        return;
    pthread_mutex_lock(&P.mu);
    if (--ch->refs == 0) {
        ch->permits = 0;
        ch->idle_since = dist__now_ms();   /* the thread unsubscribes later */
    }
    pthread_mutex_unlock(&P.mu);
}

int dist__sub_listening(const struct dist__buf *chan, int *waiters)
{
    struct dist__chan *ch;
    int subscribed = 0;

    *waiters = 0;
    pthread_mutex_lock(&P.mu);
    ch = find(chan->p, chan->len);
    if (ch) {
        subscribed = ch->wire == W_SUBSCRIBED || ch->wire == W_UNSUBSCRIBING;
        *waiters = ch->refs;
    }
    pthread_mutex_unlock(&P.mu);
    return subscribed;
}

void dist__sub_wait_ready(struct dist__chan *ch, uint64_t until_ms)
{
    struct timespec ts;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&P.mu);
    while (ch->wire != W_SUBSCRIBED && P.running && dist__now_ms() < until_ms)
        if (pthread_cond_timedwait(&ch->cv, &P.mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&P.mu);
}

int dist__sub_wait(struct dist__chan *ch, uint64_t until_ms)
{
    struct timespec ts;
    int rc = ETIMEDOUT;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&P.mu);
    for (;;) {
        if (ch->permits > 0) {
            ch->permits--;
            rc = 0;
            break;
        }
        if (dist__now_ms() >= until_ms)
            break;
        pthread_cond_timedwait(&ch->cv, &P.mu, &ts);
    }
    pthread_mutex_unlock(&P.mu);
    return rc;
}

unsigned long dist__sub_gen(struct dist__chan *ch)
{
    unsigned long gen;

    pthread_mutex_lock(&P.mu);
    gen = ch->gen;
    pthread_mutex_unlock(&P.mu);
    return gen;
}

int dist__sub_wait_since(struct dist__chan *ch, unsigned long gen,
                         uint64_t until_ms)
{
    struct timespec ts;
    int rc = ETIMEDOUT;

    dist__ms_to_ts(until_ms, &ts);
    pthread_mutex_lock(&P.mu);
    for (;;) {
        if (ch->gen != gen) {
            rc = 0;          /* a wake-all: no other waiter can take it */
            break;
        }
        if (ch->permits > 0) {
            ch->permits--;
            rc = 0;
            break;
        }
        if (dist__now_ms() >= until_ms)
            break;
        pthread_cond_timedwait(&ch->cv, &P.mu, &ts);
    }
    pthread_mutex_unlock(&P.mu);
    return rc;
}

/* P.mu held.  '1' (a write release of a read-write lock) wakes everyone,
 * anything else one waiter: the others would only lose the race. */
static void wake(struct dist__chan *ch, int all)
{
    if (all)
        ch->gen++;
    if (ch->refs == 0)
        return;
    if (all) {
        ch->permits = (unsigned long)ch->refs;
        pthread_cond_broadcast(&ch->cv);
    } else {
        if (ch->permits < (unsigned long)ch->refs)
            ch->permits++;
        pthread_cond_signal(&ch->cv);
    }
}

/* Queues the (un)subscribes the table asks for and frees channels nobody
 * needs.  P.mu held.  Returns the number of commands appended. */
static int reconcile(redisContext *c, uint64_t *next_ms)
{
    struct dist__chan **pp = &P.chans, *ch;
    uint64_t now = dist__now_ms();
    int n = 0;

    while ((ch = *pp) != NULL) {
        const char *argv[2];
        size_t argvlen[2];
        argv[1] = ch->name;
        argvlen[1] = ch->len;
        if (ch->refs > 0 && ch->wire == W_NONE && c) {
            argv[0] = "SUBSCRIBE";
            argvlen[0] = 9;
            if (redisAppendCommandArgv(c, 2, argv, argvlen) == REDIS_OK) {
                ch->wire = W_SUBSCRIBING;
                n++;
            }
        } else if (ch->refs == 0 && ch->wire == W_SUBSCRIBED && c &&
                   now < ch->idle_since + GRACE_MS) {
            if (next_ms && ch->idle_since + GRACE_MS < *next_ms)
                *next_ms = ch->idle_since + GRACE_MS;
        } else if (ch->refs == 0 && ch->wire == W_SUBSCRIBED && c) {
            argv[0] = "UNSUBSCRIBE";
            argvlen[0] = 11;
            if (redisAppendCommandArgv(c, 2, argv, argvlen) == REDIS_OK) {
                ch->wire = W_UNSUBSCRIBING;
                n++;
            }
        } else if (ch->refs == 0 && ch->wire == W_NONE) {
            *pp = ch->next;
            pthread_cond_destroy(&ch->cv);
            free(ch->name);
            free(ch);
            continue;
        }
        pp = &ch->next;
    }
    return n;
}

static void handle(redisReply *r)
{
    struct dist__chan *ch;
    redisReply *kind, *name;

    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
    kind = r->element[0];
    name = r->element[1];
    if (kind->type != REDIS_REPLY_STRING || name->type != REDIS_REPLY_STRING)
        return;
    pthread_mutex_lock(&P.mu);
    ch = find(name->str, name->len);
    if (ch && strcmp(kind->str, "message") == 0) {
        redisReply *msg = r->element[2];
        int all = msg->type == REDIS_REPLY_STRING && msg->len == 1 &&
                  msg->str[0] == '1';
        wake(ch, all);
    } else if (ch && strcmp(kind->str, "subscribe") == 0) {
        if (ch->wire == W_SUBSCRIBING) {
            ch->wire = W_SUBSCRIBED;
            pthread_cond_broadcast(&ch->cv);   /* wait_ready */
            if (ch->resub) {
                ch->resub = 0;
                wake(ch, 1);   /* messages may have been missed meanwhile */
            }
        }
    } else if (ch && strcmp(kind->str, "unsubscribe") == 0) {
        if (ch->wire == W_UNSUBSCRIBING)
            ch->wire = W_NONE;
    }
    pthread_mutex_unlock(&P.mu);
}

/* The connection broke: every channel must be subscribed again. */
static void lost_connection(void)
{
    struct dist__chan *ch;

    if (P.c) {
        redisFree(P.c);
        P.c = NULL;
    }
    pthread_mutex_lock(&P.mu);
    for (ch = P.chans; ch; ch = ch->next) {
        if (ch->wire != W_NONE)
            ch->resub = 1;
        ch->wire = W_NONE;
        /* waiters retry now rather than sleep out the lease */
        wake(ch, 1);
    }
    pthread_mutex_unlock(&P.mu);
}

static void drain_pipe(void)
{
    char buf[64];

    while (read(P.pipe[0], buf, sizeof buf) > 0)
        ;
}

/* Waits up to ms for a poke; returns early on stop. */
static void nap(int ms)
{
    struct pollfd pfd = { P.pipe[0], POLLIN, 0 };

    if (poll(&pfd, 1, ms) > 0)
        drain_pipe();
}

static void *pubsub_main(void *arg)
{
    int backoff = 50;

    DIST__UNUSED(arg);
    for (;;) {
        struct pollfd pfd[2];
        uint64_t next, now;
        int n, done = 0, stop;
        unsigned long gen = dist__cfg_gen();

        pthread_mutex_lock(&P.mu);
        stop = P.stop;
        pthread_mutex_unlock(&P.mu);
        if (stop)
            break;

        if (P.c && P.c_gen != gen)
            lost_connection();
        if (P.c && dist__cfg_mode() == DIST__MODE_SENTINEL) {
            /* follow the master: the sentinels are asked about once a
             * second, and releases are published on the new master */
            struct dist__cfg cfg;
            struct dist__addr a;
            dist__cfg_get(&cfg);
            if (dist__route(&cfg, NULL, &a) == 0 &&
                (a.port != P.addr.port || strcmp(a.host, P.addr.host) != 0))
                lost_connection();
        }
        if (!P.c) {
            struct dist__cfg cfg;
            dist__cfg_get(&cfg);
            if (dist__route(&cfg, NULL, &P.addr) != 0 ||
                dist__connect_addr(&cfg, &P.addr, &P.c) != 0) {
                dist__topo_stale();
                nap(backoff);
                if (backoff < 1000)
                    backoff *= 2;
                continue;
            }
            P.c_gen = cfg.gen;
            backoff = 50;
        }

        next = dist__now_ms() + 1000;
        pthread_mutex_lock(&P.mu);
        n = reconcile(P.c, &next);
        pthread_mutex_unlock(&P.mu);
        while (n > 0 && !done)
            if (redisBufferWrite(P.c, &done) != REDIS_OK)
                break;
        if (P.c->err) {
            lost_connection();
            continue;
        }

        pfd[0] = (struct pollfd){ P.pipe[0], POLLIN, 0 };
        pfd[1] = (struct pollfd){ P.c->fd, POLLIN, 0 };
        now = dist__now_ms();
        if (poll(pfd, 2, next > now ? (int)(next - now) : 0) < 0)
            continue;
        if (pfd[0].revents)
            drain_pipe();
        if (pfd[1].revents) {
            void *reply;
            if (redisBufferRead(P.c) != REDIS_OK) {
                lost_connection();
                continue;
            }
            while (redisGetReplyFromReader(P.c, &reply) == REDIS_OK && reply) {
                handle(reply);
                freeReplyObject(reply);
            }
            if (P.c->err)
                lost_connection();
        }
    }
    if (P.c) {
        redisFree(P.c);
        P.c = NULL;
    }
    return NULL;
}

void dist__pubsub_shutdown(void)
{
    struct dist__chan *ch;
    pthread_t th;
    int running;

    pthread_mutex_lock(&P.mu);
    running = P.running;
    th = P.th;
    P.stop = 1;
    poke();
    pthread_mutex_unlock(&P.mu);
    if (running)
        pthread_join(th, NULL);

    pthread_mutex_lock(&P.mu);
    P.running = 0;
    for (ch = P.chans; ch; ch = ch->next) {
        ch->wire = W_NONE;
        pthread_cond_broadcast(&ch->cv);
    }
    reconcile(NULL, NULL);   /* frees the channels nobody waits on */
    pthread_mutex_unlock(&P.mu);
}

void dist__pubsub_fork(int phase)
{
    struct dist__chan *ch;

    if (phase == 0) {
        pthread_mutex_lock(&P.mu);
    } else if (phase == 1) {
        pthread_mutex_unlock(&P.mu);
    } else {
        pthread_mutex_init(&P.mu, NULL);
        /* No thread waits in the child; the parent's subscriptions and
         * socket are not ours (the socket is left open, never used). */
        for (ch = P.chans; ch; ch = ch->next) {
            ch->refs = 0;
            ch->wire = W_NONE;
            ch->permits = 0;
            dist__cond_init_mono(&ch->cv);
        }
        reconcile(NULL, NULL);
        P.running = 0;
        P.stop = 0;
        P.c = NULL;
        if (P.pipe[0] >= 0) {
            close(P.pipe[0]);
            close(P.pipe[1]);
            P.pipe[0] = P.pipe[1] = -1;
        }
    }
}
