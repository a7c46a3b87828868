/*
 * harness_liar: a fake Redis on 127.0.0.1 that lies.  Chosen commands are
 * answered with scripted bytes: wrong types, impossible numbers, oversized
 * headers, one byte at a time, a flood, silence or a closed connection.
 * Everything else gets the least a client needs to go on: PING -> PONG,
 * AUTH/SELECT/CLIENT/MULTI -> OK, commands inside MULTI -> QUEUED, ROLE ->
 * a master without replicas, SCRIPT LOAD -> a sha, TIME -> a time, WAIT ->
 * 0, (S)SUBSCRIBE -> the confirmation; any other command -> an error.
 *
 * Plain C, no cmocka, like the rest of the harness.  One thread serves
 * every connection with poll(); the rules are under a mutex, so the test
 * may change them at any time.  Children forked by the test connect to it
 * like any client (the thread lives in the parent only: change the rules
 * from the parent).
 */
#ifndef DISTLOCK_HARNESS_LIAR_H
#define DISTLOCK_HARNESS_LIAR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tu_liar tu_liar_t;

/* How a command named cmd (case-insensitive) is answered.  Rules are
 * looked at in the order they were added; the first one that matches and
 * has answers left wins. */
struct tu_lie {
    const char *cmd;   /* "EVALSHA", "EXEC", "ROLE", ... */
    const char *bytes; /* the answer (may hold NUL bytes) */
    size_t len;        /* its length; 0 with bytes: strlen(bytes) */
    int drip_ms;       /* > 0: one byte every drip_ms ms */
    int silent;        /* never answer (bytes ignored) */
    int close;         /* close the connection (after bytes, if any) */
    const char *fill;  /* after bytes, send fill again and again as
                               fast as the client reads, until it closes
                               the connection (a flood) */
    int times;         /* answers left; 0: no limit */
};

/* Listens on 127.0.0.1:<ephemeral port>.  NULL on error (stderr says). */
tu_liar_t *tu_liar_start(void);
int tu_liar_port(tu_liar_t *l);
/* Adds a rule (copied). */
void tu_liar_add(tu_liar_t *l, const struct tu_lie *lie);
/* Drops every rule: the defaults answer again. */
void tu_liar_reset(tu_liar_t *l);
/* Commands named cmd received since the start, on every connection. */
long tu_liar_count(tu_liar_t *l, const char *cmd);
/* Connections open now.  A client that ended may still have commands on
 * its way: once its connection is no longer counted here, every one of
 * them was answered (by the rules of then). */
int tu_liar_open(tu_liar_t *l);
/* Connections closed by a rule's close since the start (closed when
 * this says so: a client polling its socket sees the end). */
long tu_liar_closed(tu_liar_t *l);
/* Stops the thread, closes everything. */
void tu_liar_stop(tu_liar_t *l);

#ifdef __cplusplus
}
#endif

#endif
