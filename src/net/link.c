/* link.c: one connection to one Redis server.  The socket is non-blocking
 * and every call waits with poll(2) for what is left of its deadline, so a
 * server that trickles bytes cannot stretch a command past its timeout.
 * Replies are read into a buffer on the heap and fed to hiredis's reader
 * (hiredis's own read path puts 16 KiB on the stack, too much for a thread
 * with a small one); hiredis does no I/O here.  The bytes go through a
 * transport: the socket itself, or a TLS session over it (tls.c).  What a
 * reply may hold is resp.c's, ROLE and WAIT replica.c's, a script's call
 * eval.c's (link_int.h). */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "link_int.h"
#include "base/stats.h"
#include "tls.h"

#define READ_CHUNK 8192 /* bytes asked of one read(2) */

/* A failure that trying again cannot mend: the thread is told so (see
 * dist__hopeless_set), so that a lock call gives up at once. */
static int hopeless(struct dist__link *l, const char *what)
{
    dist__hopeless_set();
    return fail(l, "%s", what);
}

static int timed_out(struct dist__link *l)
{
    if (l->own_timeout)
        return fail(l, "no answer within %lu ms", l->timeout_ms);
    return fail(l,
                "no answer within the command timeout of %lu ms "
                "(DISTLOCK_TIMEOUT_MS)",
                l->timeout_ms);
}

/* Waits until fd is ready for ev, or until (monotonic ms).  0, or
 * DIST__ECONN (l broken). */
static int wait_fd(struct dist__link *l, short ev, uint64_t until)
{
    for (;;) {
        struct pollfd p = { l->fd, ev, 0 };
        uint64_t now = dist__now_ms(), left;
        int n;

        if (now >= until)
            return timed_out(l);
        left = until - now;
        n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno == EINTR)
            dist__eintr_note(); /* for a semaphore wait in a try */
        else if (n < 0)
            return fail(l, "%s", strerror(errno));
    }
}

/* ---- transports ------------------------------------------------------- */

/* How bytes go to and from the server.  in and out: n > 0 bytes moved, 0
 * with *ev the poll(2) event to wait for, or DIST__ECONN (l broken, l->err
 * says why).  pending: bytes read from the socket and not handed out yet
 * (a poll(2) would not see them).  idle: whether a link whose socket polls
 * readable while no reply is due still only holds the transport's own
 * housekeeping.  drop: frees the transport's state, sending nothing. */
struct xport {
    ssize_t (*in)(struct dist__link *l, char *buf, size_t n, short *ev);
    ssize_t (*out)(struct dist__link *l, const char *buf, size_t n,
                   short *ev);
    size_t (*pending)(const struct dist__link *l);
    int (*idle)(const struct dist__link *l);
    void (*drop)(struct dist__link *l);
};

static int dial_tcp(const char *host, int port, uint64_t until, char *why,
                    size_t whylen);

/* Whether l's server answers TLS on a second connection: a TLS port
 * resets a plain-text client (its alert lost with the reset).  Half a
 * second at most: a plain server (behind a proxy that dropped us) may sit
 * silent on a handshake, and then the failure stays one to try again. */
static int speaks_tls(const struct dist__link *l)
{
    uint64_t until = dist__link_deadline(l, l->limit);
    uint64_t cap = dist__now_ms() + 500;
    char e[128];
    int fd, yes;

    until = cap < until ? cap : until;
    if (!l->addr.port ||
        (fd = dial_tcp(l->addr.host, l->addr.port, until, e, sizeof e)) < 0)
        return 0;
    yes = dist__tls_speaks(fd, until);
    close(fd);
    return yes;
}

/* Whether l's server answers PING in plain text on a second connection
 * (a reply of either kind, '+' or '-', such as NOAUTH): a TLS client whose
 * ClientHello it ignores would otherwise wait out its timeout.  Half a
 * second at most, as speaks_tls. */
static int speaks_plain(void *arg)
{
    const struct dist__link *l = arg;
    uint64_t until = dist__link_deadline(l, l->limit);
    uint64_t cap = dist__now_ms() + 500;
    char e[128], c = 0;
    struct pollfd p;
    int fd, n = -1;

    until = cap < until ? cap : until;
    if (!l->addr.port ||
        (fd = dial_tcp(l->addr.host, l->addr.port, until, e, sizeof e)) < 0)
        return 0;
    p.fd = fd;
    p.events = POLLIN;
    if (send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
        uint64_t now;
        while ((now = dist__now_ms()) < until &&
               (n = poll(&p, 1, (int)(until - now))) < 0 && errno == EINTR)
            ;
        if (n > 0)
            n = (int)recv(fd, &c, 1, 0);
    }
    close(fd);
    return n == 1 && (c == '+' || c == '-');
}

/* A server that resets or closes the connection before any reply may be a
 * TLS port that got plain text: a TLS handshake tells, and when it takes,
 * trying again in plain text cannot help.  Else say it as a question. */
static int closed(struct dist__link *l, const char *what)
{
    if (l->got || l->tls)
        return fail(l, "%s", what);
    if (speaks_tls(l)) {
        dist__hopeless_set();
        return fail(l,
                    "plain text sent to a TLS port: %s answers TLS "
                    "handshakes (the URL wants rediss://)",
                    l->where);
    }
    return fail(l,
                "%s before the first reply from %s (plain text sent to a "
                "TLS port? a TLS server wants rediss://)",
                what, l->where);
}

static ssize_t plain_in(struct dist__link *l, char *buf, size_t n, short *ev)
{
    for (;;) {
        ssize_t got = recv(l->fd, buf, n, 0);
        if (got > 0)
            return got;
        if (got == 0)
            return closed(l, "Server closed the connection");
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return *ev = POLLIN, 0;
        if (errno == ECONNRESET)
            return closed(l, strerror(errno));
        if (errno != EINTR)
            return fail(l, "%s", strerror(errno));
    }
}

/* MSG_NOSIGNAL: a server that closed the connection gives EPIPE, not a
 * SIGPIPE that would kill the program. */
static ssize_t plain_out(struct dist__link *l, const char *buf, size_t n,
                         short *ev)
{
    for (;;) {
        ssize_t put = send(l->fd, buf, n, MSG_NOSIGNAL);
        if (put > 0)
            return put;
        if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return *ev = POLLOUT, 0;
        if (put < 0 && errno != EINTR)
            return fail(l, "%s", strerror(errno));
    }
}

static size_t plain_pending(const struct dist__link *l)
{
    DIST__UNUSED(l);
    return 0;
}

static int plain_idle(const struct dist__link *l)
{
    DIST__UNUSED(l);
    return 0; /* bytes nobody asked for, or the server's close */
}

static void plain_drop(struct dist__link *l)
{
    DIST__UNUSED(l);
}

static const struct xport plain = { plain_in, plain_out, plain_pending,
                                    plain_idle, plain_drop };

static ssize_t tls_in(struct dist__link *l, char *buf, size_t n, short *ev)
{
    ssize_t got = dist__tls_read(l->tls, buf, n, ev);

    return got >= 0 ? got : fail(l, "%s", dist__tls_error(l->tls));
}

static ssize_t tls_out(struct dist__link *l, const char *buf, size_t n,
                       short *ev)
{
    ssize_t put = dist__tls_write(l->tls, buf, n, ev);

    return put >= 0 ? put : fail(l, "%s", dist__tls_error(l->tls));
}

static size_t tls_pending(const struct dist__link *l)
{
    return dist__tls_pending(l->tls);
}

static int tls_idle(const struct dist__link *l)
{
    return dist__tls_idle(l->tls);
}

static void tls_drop(struct dist__link *l)
{
    dist__tls_free(l->tls);
    l->tls = NULL;
}

static const struct xport tls = { tls_in, tls_out, tls_pending, tls_idle,
                                  tls_drop };

/* ---- connecting ------------------------------------------------------- */

/* connect(2) on a non-blocking socket, finished by until.  0, or an errno. */
static int connect_fd(int fd, const struct sockaddr *sa, socklen_t len,
                      uint64_t until)
{
    int e = 0;
    socklen_t elen = sizeof e;

    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return errno;
    for (;;) {
        /* one look even when the time is up: on loopback the connection
         * is usually made by then */
        struct pollfd p = { fd, POLLOUT, 0 };
        uint64_t now = dist__now_ms(), left = until > now ? until - now : 0;
        int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);

        if (n > 0)
            break;
        if (n == 0)
            return ETIMEDOUT;
        if (errno != EINTR)
            return errno;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0)
        return errno;
    return e;
}

struct gai_op {
    const char *host, *port;
    const struct addrinfo *hints;
    struct addrinfo **res;
    int rc;
};

static void gai_deep(void *arg)
{
    struct gai_op *o = arg;

    o->rc = getaddrinfo(o->host, o->port, o->hints, o->res);
}

/* getaddrinfo(3) where the stack has room: a name looked up in DNS takes
 * glibc some 10 KiB of stack (an address, under 1 KiB), more than a
 * thread made with PTHREAD_STACK_MIN has left here.  EAI_MEMORY when no
 * stack could be had for it. */
static int resolve(const char *host, const char *port,
                   const struct addrinfo *hints, struct addrinfo **res)
{
    struct gai_op o = { host, port, hints, res, EAI_MEMORY };

    *res = NULL;
    return dist__with_stack(DIST__DEEP_NEED, gai_deep, &o) == 0 ? o.rc
                                                                : EAI_MEMORY;
}

/* A TCP connection to host:port, IPv4 addresses first (as hiredis does:
 * IPv6 only when the name has no IPv4 address).  The fd, or -1 with why. */
static int dial_tcp(const char *host, int port, uint64_t until, char *why,
                    size_t whylen)
{
    struct addrinfo hints, *res = NULL, *ai;
    char sport[16];
    int rc, fd = -1, e = 0, one = 1;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(sport, sizeof sport, "%d", port);
    if ((rc = resolve(host, sport, &hints, &res)) != 0) {
        hints.ai_family = AF_INET6;
        if ((rc = resolve(host, sport, &hints, &res)) != 0) {
            snprintf(why, whylen, "%s", gai_strerror(rc));
            return -1;
        }
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if ((e = connect_fd(fd, ai->ai_addr, ai->ai_addrlen, until)) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(e ? e : EADDRNOTAVAIL));
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int dial_unix(const char *path, uint64_t until, char *why,
                     size_t whylen)
{
    struct sockaddr_un sa;
    int fd, e;

    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(why, whylen, "%s", strerror(ENAMETOOLONG));
        return -1;
    }
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    if ((e = connect_fd(fd, (struct sockaddr *)&sa, sizeof sa, until)) != 0) {
        snprintf(why, whylen, "%s", strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

static struct dist__link *link_new(const struct dist__cfg *cfg,
                                   const struct dist__addr *a,
                                   unsigned long timeout_ms)
{
    struct dist__link *l = calloc(1, sizeof *l);

    if (!l)
        return NULL;
    l->fd = -1;
    l->x = &plain;
    l->replicas = -1;
    l->timeout_ms = timeout_ms ? timeout_ms : cfg->timeout_ms;
    l->own_timeout = l->timeout_ms != cfg->timeout_ms;
    l->addr = *a;
    if (!a->port)
        snprintf(l->where, sizeof l->where, "unix:%s", cfg->path);
    else
        snprintf(l->where, sizeof l->where, "%s:%d", a->host, a->port);
    l->in = malloc(READ_CHUNK);
    l->reader = redisReaderCreate();
    if (!l->in || !l->reader) {
        dist__link_close(l);
        return NULL;
    }
    return l;
}

/* Sends one set-up command; 0, or EIO with the reason in why. */
static int setup_cmd(struct dist__link *l, const char *what, int argc,
                     const char **argv, char *why, size_t whylen)
{
    redisReply *r;

    if (dist__link_cmd(l, l->limit, argc, argv, NULL, &r) != 0) {
        snprintf(why, whylen, "%s: %s", what, l->err);
        return EIO;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s refused: %.*s", what, (int)r->len, r->str);
        freeReplyObject(r);
        return EIO;
    }
    freeReplyObject(r);
    return 0;
}

/* AUTH when the URL has credentials: a user with an empty password
 * (redis://np:@host, an ACL user made with nopass) authenticates as that
 * user too, AUTH np "", or the connection would run as 'default' and the
 * ACL meant for np would not apply.  Then SELECT. */
static int setup(struct dist__link *l, const struct dist__cfg *cfg, char *why,
                 size_t whylen)
{
    if (cfg->user[0] || cfg->pass[0]) {
        const char *argv[3] = { "AUTH", cfg->user, cfg->pass };
        int rc = cfg->user[0] ? setup_cmd(l, "AUTH", 3, argv, why, whylen)
                              : (argv[1] = cfg->pass,
                                 setup_cmd(l, "AUTH", 2, argv, why, whylen));
        if (rc)
            return rc;
    }
    if (cfg->db && cfg->mode != DIST__MODE_CLUSTER) {
        char db[16];
        const char *argv[2] = { "SELECT", db };
        snprintf(db, sizeof db, "%d", cfg->db);
        return setup_cmd(l, "SELECT", 2, argv, why, whylen);
    }
    return 0;
}

/* TLS over l's connected socket, within l's timeout.  A server that asked
 * for a client certificate we lack may say no only after the handshake
 * (TLS 1.3), so it is asked for a PING at once: the refusal then shows
 * here, in words, rather than on the first lock call.  0, or EIO with
 * why. */
static int start_tls(struct dist__link *l, const struct dist__cfg *cfg,
                     char *why, size_t whylen)
{
    const char *ping[1] = { "PING" };
    struct dist__tls_probe pr = { speaks_plain, l };
    redisReply *r;
    int rc;

    rc =
        dist__tls_open(cfg, &l->addr, l->fd, dist__link_deadline(l, l->limit),
                       &pr, &l->tls, why, whylen);
    if (rc == EPROTO)
        dist__hopeless_set();
    if (rc)
        return EIO;
    l->x = &tls;
    if (!dist__tls_cert_asked(l->tls))
        return 0;
    if (dist__link_cmd(l, l->limit, 1, ping, NULL, &r) != 0) {
        if (dist__tls_cert_asked(l->tls)) /* refused, not just dropped */
            dist__hopeless_set();
        return snprintf(why, whylen, "%.200s", l->err), EIO;
    }
    freeReplyObject(r); /* an error reply (NOAUTH) is an answer too */
    return 0;
}

static int open_into(const struct dist__cfg *cfg, const struct dist__addr *a,
                     unsigned long timeout_ms, int flags, uint64_t limit,
                     struct dist__link **out, char *why, size_t whylen)
{
    struct dist__link *l;
    char e[256];

    if (cfg->bad[0]) {
        dist__hopeless_set(); /* the settings are wrong: say it now */
        snprintf(why, whylen, "%s", cfg->bad);
        return EIO;
    }
    if (!(l = link_new(cfg, a, timeout_ms))) {
        snprintf(why, whylen, "out of memory connecting to Redis");
        return ENOMEM;
    }
    l->limit = limit;
    l->fd = a->port ? dial_tcp(a->host, a->port,
                               dist__link_deadline(l, limit), e, sizeof e)
                    : dial_unix(cfg->path, dist__link_deadline(l, limit), e,
                                sizeof e);
    if (l->fd < 0 || (cfg->tls.on && start_tls(l, cfg, e, sizeof e) != 0)) {
        snprintf(why, whylen, "cannot connect to Redis at %s: %s", l->where,
                 e);
        dist__link_close(l);
        return EIO;
    }
    if (!(flags & DIST__LINK_BARE) && setup(l, cfg, why, whylen) != 0) {
        dist__link_close(l);
        return EIO;
    }
    *out = l;
    return 0;
}

struct open_op {
    const struct dist__cfg *cfg;
    const struct dist__addr *a;
    unsigned long timeout_ms;
    int flags;
    uint64_t limit;
    struct dist__link **out;
    char *why;
    size_t whylen;
    int rc;
};

static void open_deep(void *arg)
{
    struct open_op *o = arg;

    o->rc = open_into(o->cfg, o->a, o->timeout_ms, o->flags, o->limit, o->out,
                      o->why, o->whylen);
}

/* A connection is made where the stack has room (dist__with_stack): it
 * may look a name up, shake hands in TLS and put errors in words, all
 * deeper than a command on an open link goes; under AddressSanitizer
 * that no longer fits a thread made with PTHREAD_STACK_MIN. */
int dist__link_open(const struct dist__cfg *cfg, const struct dist__addr *a,
                    unsigned long timeout_ms, int flags, uint64_t limit,
                    struct dist__link **out, char *why, size_t whylen)
{
    char buf[400];
    struct open_op o = {
        cfg,   a,   timeout_ms,      flags,
        limit, out, why ? why : buf, why ? whylen : sizeof buf,
        0
    };
    int rc;

    *out = NULL;
    if (dist__with_stack(DIST__DEEP_NEED, open_deep, &o) != 0) {
        snprintf(o.why, o.whylen,
                 "no memory for a stack to connect on: this "
                 "thread has less than %u KiB of stack left",
                 DIST__DEEP_NEED / 1024);
        o.rc = ENOMEM;
    }
    rc = o.rc;
    if (rc && !why)
        dist__err(rc, "%s", buf);
    if (rc == 0)
        dist__stat_add(DIST__ST_CONNECTS, 1);
    return rc;
}

/* Hands every owed reply over as lost (none can be read any more). */
static void owed_abandon(struct dist__link *l)
{
    while (l->nowed > 0) {
        struct owed o = l->owed[0];
        memmove(l->owed, l->owed + 1, sizeof *l->owed * (size_t)--l->nowed);
        o.fn(o.arg, NULL, DIST__ECONN);
    }
}

void dist__link_close(struct dist__link *l)
{
    if (!l)
        return;
    owed_abandon(l);
    l->x->drop(l);
    if (l->fd >= 0)
        close(l->fd);
    if (l->reader)
        redisReaderFree(l->reader);
    free(l->in);
    free(l->out);
    free(l);
}

const struct dist__addr *dist__link_addr(const struct dist__link *l)
{
    return &l->addr;
}

const char *dist__link_where(const struct dist__link *l)
{
    return l->where;
}

const char *dist__link_error(const struct dist__link *l)
{
    return l->err[0] ? l->err : "no reply";
}

int dist__link_broken(const struct dist__link *l)
{
    return l->broken;
}

int dist__link_alive(const struct dist__link *l)
{
    struct pollfd p = { l->fd, POLLIN | POLLRDHUP, 0 };

    if (l->broken)
        return 0;
    if (poll(&p, 1, 0) == 0 && !l->x->pending(l))
        return 1;
    /* an owed reply that arrived is expected, not a sign of a dead link */
    if (l->nowed > 0)
        return !(p.revents & (POLLRDHUP | POLLHUP | POLLERR));
    return !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)) && l->x->idle(l);
}

int dist__link_fd(const struct dist__link *l)
{
    return l->fd;
}

uint64_t dist__link_until(unsigned long ms, uint64_t limit)
{
    uint64_t d = dist__now_ms() + ms + 1; /* now is cut to the ms */

    return limit && limit < d ? limit : d;
}

uint64_t dist__link_deadline(const struct dist__link *l, uint64_t limit)
{
    return dist__link_until(l->timeout_ms, limit);
}

/* ---- commands ---------------------------------------------------------- */

static size_t dec_len(size_t v)
{
    size_t n = 1;

    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* "<kind><v>\r\n": a RESP array or bulk string header. */
static char *put_head(char *p, char kind, size_t v)
{
    char digits[24];
    size_t n = 0;

    *p++ = kind;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = digits[--n];
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* Room for need more bytes at the end of l->out. */
static int out_reserve(struct dist__link *l, size_t need)
{
    char *p;
    size_t cap;

    if (l->outlen + need <= l->outcap)
        return 0;
    cap = (l->outlen + need) * 2;
    if (!(p = realloc(l->out, cap)))
        return fail(l, "out of memory"), ENOMEM;
    l->out = p;
    l->outcap = cap;
    return 0;
}

/* The command is written in RESP straight into the output buffer: one
 * pass to size it, one to write it, no allocation once the buffer has
 * grown to the largest command (hiredis's formatter would allocate and
 * sprintf every header, about a sixth of a lock call's instructions). */
int dist__link_append(struct dist__link *l, int argc, const char **argv,
                      const size_t *lens)
{
    size_t need = 3 + dec_len((size_t)argc), len;
    char *p;
    int i;

    if (l->broken)
        return DIST__ECONN;
    for (i = 0; i < argc; i++) {
        len = lens ? lens[i] : strlen(argv[i]);
        need += 5 + dec_len(len) + len;
    }
    if (out_reserve(l, need) != 0)
        return ENOMEM;
    p = put_head(l->out + l->outlen, '*', (size_t)argc);
    for (i = 0; i < argc; i++) {
        len = lens ? lens[i] : strlen(argv[i]);
        p = put_head(p, '$', len);
        if (len)
            memcpy(p, argv[i], len);
        p += len;
        *p++ = '\r';
        *p++ = '\n';
    }
    l->outlen = (size_t)(p - l->out);
    return 0;
}

int dist__link_flush(struct dist__link *l, uint64_t until)
{
    size_t off = 0;
    ssize_t n;
    short ev;
    int rc = 0;

    if (l->broken)
        return DIST__ECONN;
    while (off < l->outlen) {
        n = l->x->out(l, l->out + off, l->outlen - off, &ev);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0) {
            rc = (int)n;
            break;
        } else if ((rc = wait_fd(l, ev, until)) != 0) {
            break;
        }
    }
    if (off) {
        memmove(l->out, l->out + off, l->outlen - off);
        l->outlen -= off;
    }
    return rc;
}

/* Whether the first bytes from a plain link are a TLS record (an alert:
 * 0x15, version 3.x): a TLS port that got plain text. */
static int tls_answer(const struct dist__link *l, const char *p, ssize_t n)
{
    return !l->got && !l->tls && n >= 3 && p[0] == 0x15 && p[1] == 0x03;
}

/* One read into the reader: 0 (something read), the poll(2) event to
 * wait for when nothing is there yet, or DIST__ECONN. */
static int read_once(struct dist__link *l)
{
    short ev = 0;
    ssize_t n = l->x->in(l, l->in, READ_CHUNK, &ev);

    if (n <= 0)
        return n < 0 ? (int)n : ev;
    if (tls_answer(l, l->in, n))
        return hopeless(l, "plain text sent to a TLS port: the server "
                           "answered in TLS (the URL wants rediss://)");
    l->got = 1;
    if (dist__link_scan(l, l->in, (size_t)n) != 0)
        return DIST__ECONN;
    if (redisReaderFeed(l->reader, l->in, (size_t)n) != REDIS_OK)
        return fail(l, "%s", l->reader->errstr);
    return 0;
}

int dist__link_next(struct dist__link *l, redisReply **out)
{
    void *r = NULL;

    *out = NULL;
    if (l->broken)
        return DIST__ECONN;
    if (redisReaderGetReply(l->reader, &r) != REDIS_OK)
        return fail(l, "%s", l->reader->errstr);
    *out = r;
    return r != NULL;
}

/* What TLS decrypted beyond one read is drained too: the caller's poll(2)
 * would not wake for it. */
int dist__link_read_some(struct dist__link *l)
{
    int rc;

    if (l->broken)
        return DIST__ECONN;
    do
        rc = read_once(l);
    while (rc == 0 && l->x->pending(l) > 0);
    return rc < 0 ? rc : 0;
}

/* The next reply by until: 0 with *out, or DIST__ECONN.  until 0: only
 * what has arrived (0 with *out NULL when nothing complete has). */
static int next_reply(struct dist__link *l, uint64_t until, redisReply **out)
{
    int rc;

    /* poll before each read: right after a command the answer is rarely
     * there yet, and a read that finds nothing would cost a system call;
     * but not for what TLS already holds decrypted */
    for (;;) {
        if ((rc = dist__link_next(l, out)) != 0)
            return rc == 1 ? 0 : rc;
        if (!until) {
            while ((rc = read_once(l)) == 0 && l->x->pending(l) > 0)
                ;
            if (rc < 0)
                return rc;
            rc = dist__link_next(l, out);
            return rc < 0 ? rc : 0;
        }
        if (!l->x->pending(l) && (rc = wait_fd(l, POLLIN, until)) != 0)
            return rc;
        while ((rc = read_once(l)) > 0)
            if ((rc = wait_fd(l, (short)rc, until)) != 0)
                return rc;
        if (rc < 0)
            return rc;
    }
}

int dist__link_settle(struct dist__link *l, uint64_t until)
{
    redisReply *r;
    struct owed o;
    int rc = 0;

    while (l->nowed > 0) {
        if (l->broken || (rc = next_reply(l, until, &r)) != 0) {
            owed_abandon(l);
            return DIST__ECONN;
        }
        if (!r)
            return 0; /* not arrived yet, and not waited for */
        o = l->owed[0];
        memmove(l->owed, l->owed + 1, sizeof *l->owed * (size_t)--l->nowed);
        o.fn(o.arg, r, 0);
        freeReplyObject(r);
    }
    return rc;
}

int dist__link_owed(const struct dist__link *l)
{
    return l->nowed;
}

int dist__link_defer(struct dist__link *l, uint64_t until, dist__owed_fn fn,
                     void *arg)
{
    int rc;

    if ((rc = dist__link_flush(l, until)) != 0)
        return rc;
    /* full: the oldest must be read first (it came long ago) */
    if (l->nowed == OWED_MAX && dist__link_settle(l, until) != 0)
        return DIST__ECONN;
    l->owed[l->nowed].fn = fn;
    l->owed[l->nowed++].arg = arg;
    return 0;
}

int dist__link_reply(struct dist__link *l, uint64_t until, redisReply **out)
{
    int rc;

    *out = NULL;
    if (l->outlen && (rc = dist__link_flush(l, until)) != 0)
        return rc;
    if (l->nowed > 0 && dist__link_settle(l, until) != 0)
        return DIST__ECONN;
    return next_reply(l, until, out);
}

int dist__link_cmd(struct dist__link *l, uint64_t limit, int argc,
                   const char **argv, const size_t *lens, redisReply **out)
{
    *out = NULL;
    l->limit = limit;
    if (dist__link_append(l, argc, argv, lens) != 0)
        return DIST__ECONN;
    return dist__link_reply(l, dist__link_deadline(l, limit), out);
}
