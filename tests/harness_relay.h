/*
 * harness_relay.h: inside the fault proxy (harness_proxy.h): its state and
 * connection records, shared by the thread and API (harness_proxy.c) and
 * the per-connection relaying (harness_relay.c).  Not for the tests.
 */
#ifndef DISTLOCK_HARNESS_RELAY_H
#define DISTLOCK_HARNESS_RELAY_H

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "harness_proxy.h"

#define TU_PROXY_BUF 16384 /* bytes read at once */
#define TU_PROXY_QUEUE                                                       \
    64 /* chunks (reads) queued in one direction
                                         before reading from its source pauses:
                                         up to 1 MiB */
#define TU_NS_NEVER LLONG_MAX
#define TU_PROXY_WARM                                                        \
    8 /* chunks and connection records made at
                                         start, before the thread runs */
#define TU_PROXY_PFD                                                         \
    64 /* poll slots made at start: room for
                                         31 connections before any realloc */

/* Bytes read from one side and not yet written to the other.  Chunks and
 * connection records are kept on free lists and reused: once warmed up the
 * proxy thread does not call the allocator, so a test may fork() while the
 * proxy forwards (a sanitizer's allocator whose lock another thread holds
 * at fork() stays locked in the child: GCC 12's ASan is such a one). */
struct tu_chunk {
    struct tu_chunk *next;
    long long due;   /* not sent before then (hx_now_ns) */
    size_t off, len; /* pending bytes data[off..len) */
    char data[TU_PROXY_BUF];
};

/* One direction of a connection: its chunks, oldest first.  Chunks are sent
 * in the order they were read, each no earlier than its due time. */
struct tu_flow {
    struct tu_chunk *head, *tail;
    size_t nchunks;     /* chunks in the queue */
    size_t queued;      /* bytes not yet sent */
    long long last_due; /* due time of the newest chunk */
    int eof;            /* source sent EOF */
    long long eof_due;  /* when that EOF may be passed on */
    int shut;           /* EOF passed on (shutdown(dst, SHUT_WR)) */
};

struct tu_pconn {
    struct tu_pconn *next;
    int cfd, sfd;        /* client (TCP) and server (unix) sockets; sfd is
                            -1 for one accepted during a blackhole, or whose
                            server side went away during one */
    int drop_reply;      /* fault fired: discard server data, close on it */
    int chup, shup;      /* POLLHUP seen on cfd / sfd */
    int holed;           /* open while the blackhole was on: closed when the
                            blackhole ends (its byte streams lost data) */
    int dead;            /* to be closed and freed */
    struct tu_flow up;   /* client -> server */
    struct tu_flow down; /* server -> client */
};

enum fault { FAULT_REQUEST, FAULT_REPLY };
enum proxy_count { PC_ACCEPTED, PC_FIRED, PC_REFUSED, PC_SWALLOWED, PC_N };
enum setting { PS_DELAY_MS, PS_BLACKHOLE, PS_RESET_NEW, PS_N };

struct tu_proxy {
    pthread_t thread;
    int thread_started;
    int lfd;
    int port;
    int wake[2];
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int sport; /* > 0: the server is 127.0.0.1:sport (TCP),
                               e.g. its TLS port, not the unix socket */

    pthread_mutex_t lock; /* guards everything below up to "owned by" */
    pthread_cond_t cond;
    int stop;
    int arm[2]; /* one-shot faults armed: enum fault */
    unsigned long reset_req, reset_done;
    unsigned long long count[PC_N]; /* enum proxy_count */
    /* settings (enum setting), applied by the thread at the top of its
     * loop; sync_done tells a setter that they are in effect */
    long set[PS_N];
    unsigned long sync_req, sync_done;

    /* Owned by the proxy thread only (and by tu_proxy_stop after it). */
    struct tu_pconn *conns;
    struct pollfd *pfd;
    size_t pfd_cap;
    struct tu_chunk *free_chunks; /* free lists, for reuse */
    struct tu_pconn *free_conns;
    long long delay; /* ns, in effect */
    int holing;      /* the blackhole is in effect */
    int resetting;   /* reset_new is in effect */
};

/* ---- harness_relay.c: the connections of the proxy thread ---------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
long long hx_now_ns(void);

/* A chunk back to the pool. */
void hx_chunk_put(tu_proxy_t *p, struct tu_chunk *c);

/* Close and pool every connection; drop the closed ones (hx_proxy_sweep);
 * give the pools back to the allocator (at stop). */
void hx_proxy_close_all(tu_proxy_t *p);
void hx_proxy_sweep(tu_proxy_t *p);
void hx_proxy_free_pools(tu_proxy_t *p);

/* Accept what the listener has, connecting each to the server (or not:
 * blackhole, reset_new). */
void hx_proxy_accept(tu_proxy_t *p);

/* Puts the settings (enum setting) in effect. */
void hx_proxy_apply(tu_proxy_t *p, const long *set);

/* The poll slots of one connection (client, then server); the earliest
 * time something of it falls due goes into *next. */
void hx_pconn_poll_slots(const tu_proxy_t *p, const struct tu_pconn *c,
                         struct pollfd *pc, struct pollfd *ps, long long now,
                         long long *next);

/* Serve one connection after poll (revents rc of the client, rs of the
 * server): discard everything during the blackhole, forward otherwise. */
void hx_pconn_swallow(tu_proxy_t *p, struct tu_pconn *c, short rc, short rs);
void hx_pconn_forward(tu_proxy_t *p, struct tu_pconn *c, short rc, short rs,
                      long long now);

#endif
