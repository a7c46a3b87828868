/*
 * harness_proxy: the fault proxy of harness_proxy.h, one thread that
 * forwards TCP clients to a server's unix socket and misbehaves on request.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static void proxy_wake(tu_proxy_t *p)
{
    char b = 1;
    ssize_t n;

    do {
        n = write(p->wake[1], &b, 1);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the pipe is full, so the thread will wake anyway. */
}

static int proxy_grow_pfd(tu_proxy_t *p, size_t need)
{
    struct pollfd *n;
    size_t cap;

    if (need <= p->pfd_cap)
        return 0;
    cap = p->pfd_cap ? p->pfd_cap : 16;
    while (cap < need)
        cap *= 2;
    n = realloc(p->pfd, cap * sizeof(*n));
    if (n == NULL)
        return -1;
    p->pfd = n;
    p->pfd_cap = cap;
    return 0;
}

/* Takes the requests of the other threads (reset, settings) and tells them
 * they are done.  1 when the proxy is to stop. */
static int proxy_take_requests(tu_proxy_t *p, unsigned long *reset_seen)
{
    unsigned long reset_req, sync_req;
    long set[PS_N];

    pthread_mutex_lock(&p->lock);
    if (p->stop) {
        pthread_mutex_unlock(&p->lock);
        return 1;
    }
    reset_req = p->reset_req;
    sync_req = p->sync_req;
    memcpy(set, p->set, sizeof(set));
    pthread_mutex_unlock(&p->lock);
    if (reset_req != *reset_seen)
        hx_proxy_close_all(p);
    hx_proxy_apply(p, set);
    pthread_mutex_lock(&p->lock);
    *reset_seen = reset_req;
    p->reset_done = reset_req;
    p->sync_done = sync_req;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Fills p->pfd: the wake pipe, the listener, two slots a connection.  The
 * number of connections, or -1 when out of memory even for the first two
 * slots.  *next: when the first queued data falls due (TU_NS_NEVER). */
static long proxy_poll_set(tu_proxy_t *p, long long *next)
{
    struct tu_pconn *c;
    size_t nconn = 0, i;
    long long now;

    for (c = p->conns; c != NULL; c = c->next)
        nconn++;
    if (proxy_grow_pfd(p, 2 + 2 * nconn) != 0) {
        /* Out of memory: shed the connections rather than spin. */
        hx_proxy_close_all(p);
        nconn = 0;
        if (proxy_grow_pfd(p, 2) != 0)
            return -1;
    }
    p->pfd[0].fd = p->wake[0];
    p->pfd[0].events = POLLIN;
    p->pfd[0].revents = 0;
    p->pfd[1].fd = p->lfd;
    p->pfd[1].events = POLLIN;
    p->pfd[1].revents = 0;
    now = hx_now_ns();
    *next = TU_NS_NEVER;
    for (c = p->conns, i = 2; c != NULL; c = c->next, i += 2)
        hx_pconn_poll_slots(p, c, &p->pfd[i], &p->pfd[i + 1], now, next);
    return (long)nconn;
}

/* After ppoll: drain the wake pipe, serve the connections (the pfd slots
 * follow the list), then accept new ones. */
static void proxy_serve(tu_proxy_t *p, size_t nconn)
{
    struct tu_pconn *c;
    long long now;
    size_t i;

    if (p->pfd[0].revents & POLLIN) {
        char buf[64];
        while (read(p->wake[0], buf, sizeof(buf)) > 0) {
        }
    }
    now = hx_now_ns();
    for (c = p->conns, i = 2; c != NULL && i < 2 + 2 * nconn;
         c = c->next, i += 2) {
        if (p->holing)
            hx_pconn_swallow(p, c, p->pfd[i].revents, p->pfd[i + 1].revents);
        else
            hx_pconn_forward(p, c, p->pfd[i].revents, p->pfd[i + 1].revents,
                             now);
    }
    hx_proxy_sweep(p);
    if (p->pfd[1].revents & POLLIN)
        hx_proxy_accept(p);
}

static void *proxy_main(void *arg)
{
    tu_proxy_t *p = arg;
    unsigned long reset_seen = 0;

    while (!proxy_take_requests(p, &reset_seen)) {
        struct timespec ts, *tsp = NULL;
        long long next;
        long nconn = proxy_poll_set(p, &next);

        if (nconn < 0) {
            tu_sleep_ms(10);
            continue;
        }
        if (next != TU_NS_NEVER) {
            long long wait = next - hx_now_ns();

            if (wait < 0)
                wait = 0;
            ts.tv_sec = (time_t)(wait / 1000000000LL);
            ts.tv_nsec = (long)(wait % 1000000000LL);
            tsp = &ts;
        }
        if (ppoll(p->pfd, (nfds_t)(2 + 2 * nconn), tsp, NULL) < 0) {
            if (errno != EINTR)
                tu_sleep_ms(1);
            continue;
        }
        proxy_serve(p, (size_t)nconn);
    }
    hx_proxy_close_all(p);
    return NULL;
}

static void proxy_sync_locked(tu_proxy_t *p);

/* The listening socket on 127.0.0.1:<ephemeral> and the wake pipe.  0, or
 * -1 with a message. */
static int proxy_listen(tu_proxy_t *p)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "harness: proxy: pipe: %s\n", strerror(errno));
        return -1;
    }
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (p->lfd < 0) {
        fprintf(stderr, "harness: proxy: socket: %s\n", strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(p->lfd, 128) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "harness: proxy: listen on 127.0.0.1: %s\n",
                strerror(errno));
        return -1;
    }
    p->port = ntohs(sa.sin_port);
    return 0;
}

/* What the thread needs at first, made here rather than by it (see struct
 * tu_chunk): a test may fork() as soon as tu_proxy_start returns.  0 or
 * -1 (out of memory). */
static int proxy_warm(tu_proxy_t *p)
{
    int i;

    if (proxy_grow_pfd(p, TU_PROXY_PFD) != 0)
        return -1;
    for (i = 0; i < TU_PROXY_WARM; i++) {
        struct tu_chunk *k = malloc(sizeof(*k));
        struct tu_pconn *c = calloc(1, sizeof(*c));

        if (k == NULL || c == NULL) {
            free(k);
            free(c);
            return -1;
        }
        hx_chunk_put(p, k);
        c->next = p->free_conns;
        p->free_conns = c;
    }
    return 0;
}

/* A zeroed proxy for r's socket with its lock and condition made; NULL
 * with a message. */
static tu_proxy_t *proxy_new(const tu_redis_t *r)
{
    tu_proxy_t *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        fprintf(stderr, "harness: proxy: out of memory\n");
        return NULL;
    }
    p->lfd = p->wake[0] = p->wake[1] = -1;
    if (strlen(r->sock) >= sizeof(p->sock)) {
        fprintf(stderr, "harness: proxy: socket path too long\n");
        free(p);
        return NULL;
    }
    memcpy(p->sock, r->sock, strlen(r->sock) + 1);
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cond, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    return p;
}

tu_proxy_t *tu_proxy_start(tu_redis_t *r)
{
    return tu_proxy_start_tcp(r, 0);
}

tu_proxy_t *tu_proxy_start_tcp(tu_redis_t *r, int port)
{
    tu_proxy_t *p;
    int err;

    if (r == NULL || r->sock[0] == '\0') {
        fprintf(stderr, "harness: proxy: server not started\n");
        return NULL;
    }
    if ((p = proxy_new(r)) == NULL)
        return NULL;
    p->sport = port;
    if (proxy_listen(p) != 0)
        goto fail;
    if (proxy_warm(p) != 0) {
        fprintf(stderr, "harness: proxy: out of memory\n");
        goto fail;
    }
    err = pthread_create(&p->thread, NULL, proxy_main, p);
    if (err != 0) {
        fprintf(stderr, "harness: proxy: pthread_create: %s\n",
                strerror(err));
        goto fail;
    }
    p->thread_started = 1;
    /* and it returns once the thread runs (its own start-up allocates) */
    pthread_mutex_lock(&p->lock);
    proxy_sync_locked(p);
    pthread_mutex_unlock(&p->lock);
    return p;

fail:
    tu_proxy_stop(p);
    return NULL;
}

int tu_proxy_port(tu_proxy_t *p)
{
    return p ? p->port : -1;
}

static void proxy_arm(tu_proxy_t *p, enum fault which)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->arm[which] = 1;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
}

void tu_proxy_drop_next_reply(tu_proxy_t *p)
{
    proxy_arm(p, FAULT_REPLY);
}

void tu_proxy_drop_next_request(tu_proxy_t *p)
{
    proxy_arm(p, FAULT_REQUEST);
}

void tu_proxy_reset_all(tu_proxy_t *p)
{
    unsigned long want;

    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    want = ++p->reset_req;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
    pthread_mutex_lock(&p->lock);
    while (p->reset_done < want && !p->stop)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* Waits until the thread has put the settings changed so far in effect.
 * p->lock held on entry and on return. */
static void proxy_sync_locked(tu_proxy_t *p)
{
    unsigned long want = ++p->sync_req;

    if (!p->thread_started)
        return;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
    pthread_mutex_lock(&p->lock);
    while (p->sync_done < want && !p->stop)
        pthread_cond_wait(&p->cond, &p->lock);
}

/* Changes one setting; returns once it is in effect. */
static void proxy_setting(tu_proxy_t *p, enum setting which, long v)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->set[which] = v;
    proxy_sync_locked(p);
    pthread_mutex_unlock(&p->lock);
}

void tu_proxy_set_delay(tu_proxy_t *p, long ms)
{
    proxy_setting(p, PS_DELAY_MS, ms > 0 ? ms : 0);
}

void tu_proxy_blackhole(tu_proxy_t *p, int on)
{
    proxy_setting(p, PS_BLACKHOLE, on != 0);
}

void tu_proxy_reset_new(tu_proxy_t *p, int on)
{
    proxy_setting(p, PS_RESET_NEW, on != 0);
}

static unsigned long long proxy_count(tu_proxy_t *p, enum proxy_count which)
{
    unsigned long long n;

    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    n = p->count[which];
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned long tu_proxy_connections(tu_proxy_t *p)
{
    return (unsigned long)proxy_count(p, PC_ACCEPTED);
}

unsigned long tu_proxy_faults_fired(tu_proxy_t *p)
{
    return (unsigned long)proxy_count(p, PC_FIRED);
}

unsigned long long tu_proxy_swallowed(tu_proxy_t *p)
{
    return proxy_count(p, PC_SWALLOWED);
}

unsigned long tu_proxy_refused(tu_proxy_t *p)
{
    return (unsigned long)proxy_count(p, PC_REFUSED);
}

void tu_proxy_stop(tu_proxy_t *p)
{
    if (p == NULL)
        return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->lock);
        p->stop = 1;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        proxy_wake(p);
        pthread_join(p->thread, NULL);
    }
    hx_proxy_close_all(p);
    hx_proxy_free_pools(p);
    free(p->pfd);
    if (p->lfd >= 0)
        close(p->lfd);
    if (p->wake[0] >= 0)
        close(p->wake[0]);
    if (p->wake[1] >= 0)
        close(p->wake[1]);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
