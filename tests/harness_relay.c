/*
 * harness_relay: the fault proxy's connections: the chunk pool, the
 * delayed byte queues of each direction, the one-shot faults and the
 * blackhole.  Runs on the proxy thread only (harness_relay.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

long long hx_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct tu_chunk *chunk_get(tu_proxy_t *p)
{
    struct tu_chunk *c = p->free_chunks;

    if (c != NULL)
        p->free_chunks = c->next;
    else
        c = malloc(sizeof(*c));
    return c;
}

void hx_chunk_put(tu_proxy_t *p, struct tu_chunk *c)
{
    c->next = p->free_chunks;
    p->free_chunks = c;
}

static void flow_clear(tu_proxy_t *p, struct tu_flow *f)
{
    struct tu_chunk *c;

    while ((c = f->head) != NULL) {
        f->head = c->next;
        hx_chunk_put(p, c);
    }
    f->tail = NULL;
    f->nchunks = 0;
    f->queued = 0;
}

static void pconn_close(struct tu_pconn *c)
{
    if (c->cfd >= 0)
        close(c->cfd);
    if (c->sfd >= 0)
        close(c->sfd);
    c->cfd = c->sfd = -1;
    c->dead = 1;
}

/* Closes c and keeps its record (and chunks) for reuse. */
static void pconn_free(tu_proxy_t *p, struct tu_pconn *c)
{
    pconn_close(c);
    flow_clear(p, &c->up);
    flow_clear(p, &c->down);
    c->next = p->free_conns;
    p->free_conns = c;
}

void hx_proxy_close_all(tu_proxy_t *p)
{
    struct tu_pconn *c;

    while ((c = p->conns) != NULL) {
        p->conns = c->next;
        pconn_free(p, c);
    }
}

/* Gives the free lists back to the allocator (at stop). */
void hx_proxy_free_pools(tu_proxy_t *p)
{
    struct tu_chunk *k;
    struct tu_pconn *c;

    while ((k = p->free_chunks) != NULL) {
        p->free_chunks = k->next;
        free(k);
    }
    while ((c = p->free_conns) != NULL) {
        p->free_conns = c->next;
        free(c);
    }
}

void hx_proxy_sweep(tu_proxy_t *p)
{
    struct tu_pconn **pp = &p->conns, *c;

    while ((c = *pp) != NULL) {
        if (c->dead) {
            *pp = c->next;
            pconn_free(p, c);
        } else {
            pp = &c->next;
        }
    }
}

/* 127.0.0.1:port, non-blocking: the fd (connecting), or -1. */
static int connect_tcp(int port)
{
    struct sockaddr_in sa;
    int fd;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static int connect_server(const tu_proxy_t *p)
{
    const char *path = p->sock;
    struct sockaddr_un sa;
    int fd;

    if (p->sport > 0)
        return connect_tcp(p->sport);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path)); /* length checked at start */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

void hx_proxy_accept(tu_proxy_t *p)
{
    for (;;) {
        struct tu_pconn *c;
        int cfd, sfd = -1;

        cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN, or out of fds: try again at next poll */
        }
        pthread_mutex_lock(&p->lock);
        p->count[PC_ACCEPTED]++;
        if (p->resetting)
            p->count[PC_REFUSED]++;
        pthread_mutex_unlock(&p->lock);
        if (p->resetting) {
            /* SO_LINGER 0: close() sends a RST, not a FIN. */
            struct linger lg = { 1, 0 };
            (void)setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            close(cfd);
            continue;
        }
        if (!p->holing && (sfd = connect_server(p)) < 0) {
            /* Server down: the client sees EOF at once. */
            close(cfd);
            continue;
        }
        if ((c = p->free_conns) != NULL) {
            p->free_conns = c->next;
            memset(c, 0, sizeof(*c));
        } else if ((c = calloc(1, sizeof(*c))) == NULL) {
            if (sfd >= 0)
                close(sfd);
            close(cfd);
            continue;
        }
        c->cfd = cfd;
        c->sfd = sfd;
        c->holed = p->holing;
        c->next = p->conns;
        p->conns = c;
    }
}

/* Queues chunk c holding n bytes read now, due after the delay in effect,
 * never before the chunk queued last. */
static void flow_push(struct tu_flow *f, struct tu_chunk *c, size_t n,
                      long long delay, long long now)
{
    c->next = NULL;
    c->due = now + delay;
    if (c->due < f->last_due)
        c->due = f->last_due;
    f->last_due = c->due;
    c->off = 0;
    c->len = n;
    if (f->tail)
        f->tail->next = c;
    else
        f->head = c;
    f->tail = c;
    f->nchunks++;
    f->queued += n;
}

/* The source sent EOF: pass it on after the delay, behind the data. */
static void flow_set_eof(struct tu_flow *f, long long delay, long long now)
{
    f->eof = 1;
    f->eof_due = now + delay;
    if (f->eof_due < f->last_due)
        f->eof_due = f->last_due;
}

/* Write what is due in f to fd.  -1 on a fatal error. */
static int flow_flush(tu_proxy_t *p, struct tu_flow *f, int fd, long long now)
{
    struct tu_chunk *c;

    while ((c = f->head) != NULL && c->due <= now) {
        ssize_t n = send(fd, c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        c->off += (size_t)n;
        f->queued -= (size_t)n;
        if (c->off == c->len) {
            f->head = c->next;
            if (f->head == NULL)
                f->tail = NULL;
            f->nchunks--;
            hx_chunk_put(p, c);
        }
    }
    if (f->head == NULL && f->eof && !f->shut && f->eof_due <= now) {
        (void)shutdown(fd, SHUT_WR);
        f->shut = 1;
    }
    return 0;
}

/* When f next has something to send that is not due yet; TU_NS_NEVER. */
static long long flow_next_due(const struct tu_flow *f, long long now)
{
    if (f->head != NULL)
        return f->head->due > now ? f->head->due : TU_NS_NEVER;
    if (f->eof && !f->shut && f->eof_due > now)
        return f->eof_due;
    return TU_NS_NEVER;
}

/* recv into buf.  >0 bytes, 0 EOF, -1 nothing now, -2 fatal */
static ssize_t recv_some(int fd, char *buf, size_t len)
{
    ssize_t n;

    do {
        n = recv(fd, buf, len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : -2;
    return n;
}

static int want_read(const struct tu_flow *f)
{
    return !f->eof && f->nchunks < TU_PROXY_QUEUE;
}

static int has_due(const struct tu_flow *f, long long now)
{
    return f->head != NULL && f->head->due <= now;
}

/* Reads and discards what fd has for us (events rev), and counts it.  0
 * when fd is at EOF or failed, 1 otherwise. */
static int swallow_from(tu_proxy_t *p, int fd, short rev)
{
    char buf[TU_PROXY_BUF];
    ssize_t n;

    if (rev & (POLLERR | POLLNVAL))
        return 0;
    if (!(rev & (POLLIN | POLLHUP)))
        return 1;
    n = recv_some(fd, buf, sizeof(buf));
    if (n == 0 || n == -2)
        return 0;
    if (n > 0) {
        pthread_mutex_lock(&p->lock);
        p->count[PC_SWALLOWED] += (unsigned long long)n;
        pthread_mutex_unlock(&p->lock);
    }
    return 1;
}

/* A connection during the blackhole: read both sides and discard.  The
 * client leaving closes it; the server leaving only closes the server side,
 * so that the client goes on seeing silence. */
void hx_pconn_swallow(tu_proxy_t *p, struct tu_pconn *c, short rc, short rs)
{
    if (!swallow_from(p, c->cfd, rc)) {
        pconn_close(c);
        return;
    }
    if (c->sfd >= 0 && !swallow_from(p, c->sfd, rs)) {
        close(c->sfd);
        c->sfd = -1;
    }
}

/* recv from fd into a chunk from the pool.  >0 bytes (in *out), 0 EOF,
 * -1 nothing now, -2 fatal (or no memory). */
static ssize_t recv_chunk(tu_proxy_t *p, int fd, struct tu_chunk **out)
{
    struct tu_chunk *c = chunk_get(p);
    ssize_t n;

    *out = NULL;
    if (c == NULL)
        return -2;
    n = recv_some(fd, c->data, sizeof(c->data));
    if (n > 0)
        *out = c;
    else
        hx_chunk_put(p, c);
    return n;
}

/* Client data arrived on c: fires an armed one-shot fault on it.  1 when
 * the request is to be dropped; the reply fault only marks c. */
static int fire_fault(tu_proxy_t *p, struct tu_pconn *c)
{
    int drop_request = 0;

    if (c->drop_reply)
        return 0;
    pthread_mutex_lock(&p->lock);
    if (p->arm[FAULT_REQUEST]) {
        p->arm[FAULT_REQUEST] = 0;
        p->count[PC_FIRED]++;
        drop_request = 1;
    } else if (p->arm[FAULT_REPLY]) {
        p->arm[FAULT_REPLY] = 0;
        p->count[PC_FIRED]++;
        c->drop_reply = 1;
    }
    pthread_mutex_unlock(&p->lock);
    return drop_request;
}

/* Reads one side of c into its flow (up: client -> server), when there is
 * room and something to read (events rev), with the delay in effect.  0,
 * or -1 when c is to be closed: a fatal error, a dropped request, or the
 * reply (or EOF) of a connection whose reply is dropped. */
static int pconn_read(tu_proxy_t *p, struct tu_pconn *c, int up, short rev,
                      long long now)
{
    struct tu_flow *f = up ? &c->up : &c->down;
    struct tu_chunk *k;
    ssize_t n;

    if (!want_read(f) || !(rev & (POLLIN | POLLHUP)))
        return 0;
    n = recv_chunk(p, up ? c->cfd : c->sfd, &k);
    if (n == -2)
        return -1;
    if ((!up && c->drop_reply && n >= 0) ||
        (up && n > 0 && fire_fault(p, c))) {
        if (k != NULL)
            hx_chunk_put(p, k);
        return -1;
    }
    if (n == 0)
        flow_set_eof(f, p->delay, now);
    else if (n > 0)
        flow_push(f, k, (size_t)n, p->delay, now);
    return 0;
}

/* A connection outside the blackhole: forward each way, with the delay in
 * effect, and fire the armed one-shot faults. */
void hx_pconn_forward(tu_proxy_t *p, struct tu_pconn *c, short rc, short rs,
                      long long now)
{
    if ((rc | rs) & (POLLERR | POLLNVAL)) {
        pconn_close(c);
        return;
    }
    if (rc & POLLHUP)
        c->chup = 1;
    if (rs & POLLHUP)
        c->shup = 1;
    if (pconn_read(p, c, 1, rc, now) != 0 ||
        flow_flush(p, &c->up, c->sfd, now) != 0 ||
        pconn_read(p, c, 0, rs, now) != 0 ||
        flow_flush(p, &c->down, c->cfd, now) != 0 ||
        (c->up.shut && c->down.shut))
        pconn_close(c);
}

static short events_for(const struct tu_flow *in, const struct tu_flow *out,
                        long long now)
{
    short ev = 0;

    if (want_read(in))
        ev |= POLLIN;
    if (has_due(out, now))
        ev |= POLLOUT;
    return ev;
}

/* Puts the settings in effect (proxy thread, at the top of its loop). */
void hx_proxy_apply(tu_proxy_t *p, const long *set)
{
    int blackhole = set[PS_BLACKHOLE] != 0;
    struct tu_pconn *c;

    p->delay = (long long)set[PS_DELAY_MS] * 1000000LL;
    p->resetting = set[PS_RESET_NEW] != 0;
    if (blackhole && !p->holing) {
        /* What is in flight is lost with the rest; a half-closed
         * connection is closed, its EOF being all that was left to say. */
        for (c = p->conns; c != NULL; c = c->next) {
            c->holed = 1;
            flow_clear(p, &c->up);
            flow_clear(p, &c->down);
            if (c->up.eof || c->down.eof)
                pconn_close(c);
        }
    } else if (!blackhole && p->holing) {
        for (c = p->conns; c != NULL; c = c->next)
            if (c->holed)
                pconn_close(c);
    }
    p->holing = blackhole;
    hx_proxy_sweep(p);
}

/* The poll slots of one connection (client, then server); the earliest
 * time something of it falls due goes into *next. */
void hx_pconn_poll_slots(const tu_proxy_t *p, const struct tu_pconn *c,
                         struct pollfd *pc, struct pollfd *ps, long long now,
                         long long *next)
{
    long long d;

    pc->fd = c->cfd;
    ps->fd = c->sfd; /* -1 (none) is ignored by poll */
    pc->revents = ps->revents = 0;
    if (p->holing) {
        pc->events = POLLIN;
        ps->events = POLLIN;
        return;
    }
    pc->events = events_for(&c->up, &c->down, now);
    ps->events = events_for(&c->down, &c->up, now);
    /* A hung-up fd we have no interest in would wake us forever. */
    if (pc->events == 0 && c->chup)
        pc->fd = -1;
    if (ps->events == 0 && c->shup)
        ps->fd = -1;
    if ((d = flow_next_due(&c->up, now)) < *next)
        *next = d;
    if ((d = flow_next_due(&c->down, now)) < *next)
        *next = d;
}
