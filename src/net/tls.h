/* tls.h: TLS over a link's connected, non-blocking socket (OpenSSL).  The
 * link (link.c) decides when to wait and for what; this says how to move
 * bytes through a TLS session and, when that fails, why in words.  Every
 * call that enters OpenSSL deeply runs where the stack has room
 * (dist__with_stack): a caller's thread may have a small one. */
#ifndef DIST_TLS_H
#define DIST_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include "base/base.h"

struct dist__tls;

/* How dist__tls_open asks whether a server silent on the handshake is a
 * plain one: plain(arg) answers 1 when the server speaks plain text (on a
 * connection of its own), 0 otherwise; plain NULL: never asked. */
struct dist__tls_probe {
    int (*plain)(void *arg);
    void *arg;
};

/* The TLS handshake on fd (connected, non-blocking) with the server a
 * (its host is the name verified and sent as SNI unless the options name
 * another), by until (monotonic ms).  0 with *out (dist__tls_free), or
 * with the reason in why EIO (the connection failed: a restart may explain
 * it) or EPROTO (trying again cannot help: "certificate verify failed:
 * ...", "host name mismatch: ...", "TLS sent to a plain port: ...", a CA or
 * client certificate file that cannot be used; also when the server has
 * said nothing for a moment and pr says it speaks plain text).  The
 * options are cfg's;
 * one SSL_CTX serves every link of the same options.  It must run where
 * DIST__DEEP_NEED bytes of stack are left (dist__with_stack), as
 * dist__link_open's connection does. */
int dist__tls_open(const struct dist__cfg *cfg, const struct dist__addr *a,
                   int fd, uint64_t until, const struct dist__tls_probe *pr,
                   struct dist__tls **out, char *why, size_t whylen);
/* Whether the server on fd (connected, non-blocking) answers a TLS
 * handshake by until (monotonic ms): 1, or 0.  Nothing is verified and
 * nothing sent after the handshake: this only tells a TLS port, which
 * resets a plain-text client, from a server that fails for other reasons.
 * fd stays the caller's. */
int dist__tls_speaks(int fd, uint64_t until);
/* Frees the session without a close_notify: closing sends nothing, so a
 * child of fork() can drop a link it inherited while the parent goes on
 * with the same TLS session. */
void dist__tls_free(struct dist__tls *t);

/* Reads up to n bytes: n > 0, or 0 with *ev the poll(2) event to wait for,
 * or -1 when the connection failed or the server closed it (the reason in
 * dist__tls_error). */
ssize_t dist__tls_read(struct dist__tls *t, void *buf, size_t n, short *ev);
/* Writes up to n bytes (n > 0): the same. */
ssize_t dist__tls_write(struct dist__tls *t, const void *buf, size_t n,
                        short *ev);
/* Bytes decrypted and not read yet: a poll(2) on the socket does not see
 * them, so a reader drains them first. */
size_t dist__tls_pending(const struct dist__tls *t);
/* Whether an idle session whose socket polls readable only got TLS's own
 * records (a session ticket): 1, or 0 when data came or it was closed. */
int dist__tls_idle(struct dist__tls *t);
/* The server asked for a client certificate and none was set: a server
 * that requires one says no only after the handshake (TLS 1.3), so the
 * link asks it something at once to find out. */
int dist__tls_cert_asked(const struct dist__tls *t);
const char *dist__tls_error(const struct dist__tls *t);

#endif
