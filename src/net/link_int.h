/* link_int.h: what the files of one link share, and nothing else
 * includes: link.c (the socket, its transports, commands and owed
 * replies), resp.c (what a reply may hold, checked before hiredis reads
 * it), replica.c (ROLE, WAIT and the counted scripts: a server's
 * replicas) and eval.c (a script on a link, on top of the other three).
 * link.h is the link's face to the layers above. */
#ifndef DIST_LINK_INT_H
#define DIST_LINK_INT_H

#include <stdarg.h>
#include <stdio.h>

#include "link.h"

#define OWED_MAX 8 /* replies one link may owe to others */

struct dist__script;

/* Where the scan of the bytes read stands (see scan_bytes).  Small: a
 * link's size is felt when memory is short.  Every count stays below its
 * REPLY_MAX_* bound, far below 2^31. */
struct scan {
    char in_line;   /* in a line: its type byte was seen */
    char type;      /* '+', '-', ':', '$', '*' */
    char neg, junk; /* the line's number so far */
    int digits;
    long long num;
    int line;         /* bytes of the line so far */
    int skip;         /* bytes of a string (and its CRLF) to pass */
    int pending;      /* items the reply still owes; 0: between */
    int items, bytes; /* of the reply being read */
};

struct xport;

struct owed {
    dist__owed_fn fn;
    void *arg;
};

struct dist__link {
    int fd;
    int broken;
    int got;               /* something was ever read */
    const struct xport *x; /* plain, or TLS over fd */
    struct dist__tls *tls; /* the TLS session, or NULL */
    redisReader *reader;
    struct scan scan;
    char *out; /* formatted commands not written yet */
    size_t outlen, outcap;
    char *in; /* READ_CHUNK bytes */
    unsigned long timeout_ms;
    int own_timeout;   /* timeout_ms is not DISTLOCK_TIMEOUT_MS */
    int replicas;      /* connected replicas ROLE listed; -1 unknown */
    int replicas_most; /* the most ROLE ever listed on this link */
    uint64_t role_ms;  /* when ROLE was read; 0 never */
    uint64_t limit;    /* the limit of the command under way (see
                                * link.h), for the TLS probe that a reset
                                * before the first reply makes deep in a
                                * read (closed): set by every entry that
                                * takes one */
    struct dist__addr addr;
    char where[264]; /* "host:port", "unix:PATH" */
    char err[256];
    struct owed owed[OWED_MAX]; /* replies owed to others, oldest first */
    int nowed;
};

/* Breaks l with the reason: DIST__ECONN.  Here so that the three files
 * say their failures one way. */
static inline int fail(struct dist__link *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int fail(struct dist__link *l, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
    l->broken = 1;
    return DIST__ECONN;
}

/* ---- resp.c ---------------------------------------------------------------- */

/* Looks at every byte read before hiredis does (see resp.c).  0, or
 * DIST__ECONN (l broken). */
int dist__link_scan(struct dist__link *l, const char *p, size_t n);

/* ---- replica.c ------------------------------------------------------------- */

/* Whether dist__link_eval runs s's counted form on l: the time it is
 * asked (never 0), or 0 for the plain form (see replica.c). */
uint64_t dist__link_count_wanted(struct dist__link *l,
                                 const struct dist__script *s);
/* A counted script's reply: *out becomes the body's reply, and l notes
 * the replica count it read as of asked. */
void dist__link_counted_reply(struct dist__link *l, uint64_t asked,
                              redisReply **out);

#endif
