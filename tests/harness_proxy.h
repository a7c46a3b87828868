/*
 * harness_proxy: a TCP proxy in front of one private redis-server
 * (harness_server.h) that can lose a request or a reply on purpose, add
 * latency, swallow all traffic (a blackhole) and reset connections.
 *
 * Plain C, no cmocka, like the rest of the harness.
 *
 * Thread safety
 *   tu_proxy_*: any thread, except that tu_proxy_stop must be the last call
 *   on that proxy.  Not in a forked child: the proxy's thread lives in the
 *   parent only, so the calls that wait for it (tu_proxy_reset_all and the
 *   settings) would wait forever.  Children connect to it like any client.
 */
#ifndef DISTLOCK_HARNESS_PROXY_H
#define DISTLOCK_HARNESS_PROXY_H

#include "harness_server.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tu_proxy tu_proxy_t;

/*
 * Listen on 127.0.0.1:<ephemeral port>; every accepted connection is
 * forwarded, byte for byte, to the server's unix socket (opened per
 * connection, so the proxy keeps working across tu_redis_restart; if the
 * server is down the client's connection is closed at once).  One thread
 * runs everything with poll(); shared state is under a mutex.
 * NULL on error (message on stderr).
 *
 * Faults, which may be combined:
 *   one-shot       tu_proxy_drop_next_reply / _request: one command's reply
 *                  or request is lost and its connection closed;
 *   latency        tu_proxy_set_delay: everything arrives ms late;
 *   blackhole      tu_proxy_blackhole: nothing arrives at all, nothing is
 *                  closed (a partition, or a peer that hangs);
 *   resets         tu_proxy_reset_all: every open connection is closed;
 *                  tu_proxy_reset_new: every new one is reset at once.
 * The settings (delay, blackhole, reset_new) are in effect when their call
 * returns; all are off after tu_proxy_start.
 *
 * Once warmed up the proxy thread reuses its buffers and does not call the
 * allocator, so the test may fork() while it forwards.  (Under ASan, a
 * child forked while another thread held the allocator's lock can hang at
 * its first allocation.)  Forking while the test's other threads allocate,
 * e.g. a child already talking through the proxy, is still best avoided:
 * fork all children first, then let them start.
 */
tu_proxy_t *tu_proxy_start(tu_redis_t *r) TU_WARN_UNUSED;

/* The same, forwarding each connection to r's TCP port `port` on
 * 127.0.0.1 (e.g. its TLS port; 0: the unix socket) instead.  The faults
 * act on bytes, never on what they mean, so they work inside a TLS
 * stream too: a dropped reply is the TLS records of the reply, and the
 * connection closed under it. */
tu_proxy_t *tu_proxy_start_tcp(tu_redis_t *r, int port) TU_WARN_UNUSED;

/* The proxy's TCP port on 127.0.0.1. */
int tu_proxy_port(tu_proxy_t *p);

/*
 * Arm a one-shot fault: the next chunk of data any client connection sends
 * (whichever connection sends first after this call) is forwarded to the
 * server; from then on that connection's server->client data is read and
 * discarded, and as soon as the first of it arrives (the reply: the command
 * has run) both sockets of that connection are closed.  The client sees
 * EOF: "the command ran but the reply was lost".  (Client data that follows
 * before the reply, e.g. the rest of a long command, is still forwarded.)
 * Arming again before it fired changes nothing.
 * Arm it when the client is connected and idle: a client that sends setup
 * commands on connect (AUTH, SELECT, CLIENT SETNAME...) would have those
 * hit by the fault instead.
 */
void tu_proxy_drop_next_reply(tu_proxy_t *p);

/* Arm a one-shot fault: the next chunk of data any client connection sends
 * is NOT forwarded, and that connection is closed at once (the command
 * never ran).  If both faults are armed, this one fires first.  Same
 * caveat about setup commands as above. */
void tu_proxy_drop_next_request(tu_proxy_t *p);

/* Close every connection open now (the clients see EOF or a reset).
 * Synchronous: when it returns, they are closed.  Armed faults stay armed. */
void tu_proxy_reset_all(tu_proxy_t *p);

/*
 * Added latency: every chunk of data read from either side afterwards (and
 * an EOF) is passed on ms milliseconds after it was read, so a request and
 * its reply take at least 2 * ms more.  Order within each connection and
 * direction is kept, also across a change of the delay (a chunk is never
 * sent before the one read before it).  Up to 64 reads (1 MiB) per
 * direction are held back; beyond that the proxy stops reading from that
 * side until it drains.
 * ms <= 0 turns it off for data read from then on (data already held back
 * keeps its time).  The one-shot faults act when the data is read: a
 * dropped request or reply closes its connection at once, not ms later.
 */
void tu_proxy_set_delay(tu_proxy_t *p, long ms);

/*
 * Blackhole: while on, all data of every connection, open ones and those
 * accepted meanwhile, is read and discarded in both directions, including
 * data held back by the delay when it was turned on.  Connections stay
 * open: a client's request goes out and no reply ever comes back, so it
 * sees a timeout, never EOF.  New connections are accepted (connect
 * succeeds) but not connected to the server.  Only two things close a
 * connection meanwhile: its client closing it (a connection already
 * half-closed when the blackhole starts is closed then), and
 * tu_proxy_reset_all.  If the server closes its side, the client is not
 * told.  Armed one-shot faults do not fire on swallowed data.
 *
 * Turning it off closes every connection that was open at any time while
 * it was on (their clients see EOF at their next read: the byte streams
 * lost data, so nothing more may pass on them), and connections accepted
 * afterwards are forwarded normally.  Both directions are synchronous: when
 * the call returns, nothing more is forwarded (on), or the old connections
 * are closed (off).  Turning it on while on, or off while off, changes
 * nothing.
 */
void tu_proxy_blackhole(tu_proxy_t *p, int on);

/* While on, every connection accepted is reset at once (closed with
 * SO_LINGER 0: the client's connect succeeds, its first read or write
 * fails with ECONNRESET or EOF); the server never sees it.  Connections
 * already open are left alone (see tu_proxy_reset_all).  Takes precedence
 * over the blackhole for new connections. */
void tu_proxy_reset_new(tu_proxy_t *p, int on);

/* Number of client connections accepted so far. */
unsigned long tu_proxy_connections(tu_proxy_t *p);

/* Number of armed faults that have fired so far (both kinds). */
unsigned long tu_proxy_faults_fired(tu_proxy_t *p);

/* Bytes the blackhole has discarded so far (both directions; data held back
 * by the delay and discarded when the blackhole started is not counted). */
unsigned long long tu_proxy_swallowed(tu_proxy_t *p);

/* Connections reset at once by tu_proxy_reset_new so far (they are counted
 * by tu_proxy_connections too). */
unsigned long tu_proxy_refused(tu_proxy_t *p);

/* Stop the thread, close every socket, free p.  NULL is fine. */
void tu_proxy_stop(tu_proxy_t *p);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_HARNESS_PROXY_H */
