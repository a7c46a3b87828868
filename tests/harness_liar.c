/*
 * harness_liar: a fake Redis that answers chosen commands with scripted
 * bytes (see harness_liar.h).  One thread, poll(), a queue of answers per
 * connection, each sent whole, one byte per tick, or as a flood.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_liar.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LIAR_MAX_CONNS 64
#define LIAR_MAX_RULES 32
#define LIAR_MAX_NAMES 64
#define LIAR_MAX_ARGS  8
#define LIAR_TICK_MS   20 /* the thread looks at its stop flag this often */

struct answer {
    struct answer *next;
    char *data;
    size_t len, off;
    int drip_ms;
    long long due_ms; /* the next byte of a drip not before then */
    char *fill;       /* flood: sent again and again after data */
    size_t flen, foff;
};

struct conn {
    int fd;
    char *in;
    size_t inlen, incap;
    int in_multi;
    int closing; /* close once the answers queued are sent */
    struct answer *head, *tail;
};

struct rule {
    struct tu_lie lie; /* bytes and fill point into copies */
    char cmd[32];
};

struct name_count {
    char name[32];
    long n;
};

struct tu_liar {
    int lfd, port;
    pthread_t thread;
    int stop;
    pthread_mutex_t mu; /* rules, counts, stop */
    struct rule rules[LIAR_MAX_RULES];
    int nrules;
    struct name_count counts[LIAR_MAX_NAMES];
    int ncounts;
    long closed;       /* connections closed by a rule's close */
    long open;         /* connections open now (under mu) */
    int running;       /* the thread has reached its loop (under mu) */
    pthread_cond_t up; /* signalled when running is set */
    struct conn *conns[LIAR_MAX_CONNS];
};

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_bytes(const char *p, size_t n)
{
    char *d = malloc(n + 1);

    if (d) {
        memcpy(d, p, n);
        d[n] = 0;
    }
    return d;
}

/* ---- answers ----------------------------------------------------------- */

static void queue_answer(struct conn *c, const char *p, size_t n, int drip_ms,
                         const char *fill)
{
    struct answer *a = calloc(1, sizeof *a);

    if (!a || !(a->data = dup_bytes(p, n))) {
        free(a);
        c->closing = 1;
        return;
    }
    a->len = n;
    a->drip_ms = drip_ms;
    a->due_ms = now_ms();
    if (fill) {
        a->flen = strlen(fill);
        a->fill = dup_bytes(fill, a->flen);
    }
    if (c->tail)
        c->tail->next = a;
    else
        c->head = a;
    c->tail = a;
}

static void queue_str(struct conn *c, const char *s)
{
    queue_answer(c, s, strlen(s), 0, NULL);
}

static void answer_free(struct answer *a)
{
    free(a->data);
    free(a->fill);
    free(a);
}

static void conn_free(struct conn *c)
{
    struct answer *a, *next;

    close(c->fd);
    for (a = c->head; a; a = next) {
        next = a->next;
        answer_free(a);
    }
    free(c->in);
    free(c);
}

/* Sends what the head answer allows now.  0, or -1 when the connection
 * is to be closed. */
static int send_some(struct conn *c)
{
    static char big[65536];
    struct answer *a = c->head;
    ssize_t n;

    while ((a = c->head) != NULL) {
        if (a->off < a->len) {
            size_t want = a->drip_ms > 0 ? 1 : a->len - a->off;
            if (a->drip_ms > 0 && now_ms() < a->due_ms)
                return 0;
            n = send(c->fd, a->data + a->off, want,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
            a->off += (size_t)n;
            a->due_ms = now_ms() + a->drip_ms;
            if (a->drip_ms > 0)
                return 0;
            continue;
        }
        if (a->fill && a->flen) {
            size_t i;
            for (i = 0; i < sizeof big; i++)
                big[i] = a->fill[(a->foff + i) % a->flen];
            n = send(c->fd, big, sizeof big, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
            a->foff = (a->foff + (size_t)n) % a->flen;
            return 0;
        }
        c->head = a->next;
        if (!c->head)
            c->tail = NULL;
        answer_free(a);
    }
    return c->closing ? -1 : 0;
}

/* ---- commands ------------------------------------------------------------ */

/* One RESP command at the start of p[0..len): 1 with argv (pointers into
 * p, NUL-terminated in place) and *used, 0 when incomplete, -1 when it is
 * no command. */
static int parse_cmd(char *p, size_t len, int *argc, char **argv,
                     size_t *argl, size_t *used)
{
    size_t off = 0;
    long n, i, bl;
    char *e;

    if (len < 1)
        return 0;
    if (p[0] != '*')
        return -1;
    if (!(e = memchr(p, '\n', len)))
        return 0;
    n = strtol(p + 1, NULL, 10);
    if (n < 1 || n > 1000000)
        return -1;
    off = (size_t)(e - p) + 1;
    *argc = 0;
    for (i = 0; i < n; i++) {
        if (off >= len)
            return 0;
        if (p[off] != '$')
            return -1;
        if (!(e = memchr(p + off, '\n', len - off)))
            return 0;
        bl = strtol(p + off + 1, NULL, 10);
        if (bl < 0)
            return -1;
        off = (size_t)(e - p) + 1;
        if (off + (size_t)bl + 2 > len)
            return 0;
        if (*argc < LIAR_MAX_ARGS) {
            argv[*argc] = p + off;
            argl[*argc] = (size_t)bl;
            (*argc)++;
        }
        p[off + (size_t)bl] = 0; /* the '\r' */
        off += (size_t)bl + 2;
    }
    *used = off;
    return 1;
}

static void count_cmd(struct tu_liar *l, const char *name)
{
    int i;

    for (i = 0; i < l->ncounts; i++)
        if (strcasecmp(l->counts[i].name, name) == 0) {
            l->counts[i].n++;
            return;
        }
    if (l->ncounts < LIAR_MAX_NAMES) {
        snprintf(l->counts[l->ncounts].name, sizeof l->counts[0].name, "%s",
                 name);
        l->counts[l->ncounts++].n = 1;
    }
}

/* The first rule for name with answers left, used once.  l->mu held. */
static const struct tu_lie *rule_for(struct tu_liar *l, const char *name)
{
    int i;

    for (i = 0; i < l->nrules; i++) {
        struct rule *r = &l->rules[i];
        if (strcasecmp(r->cmd, name) != 0 || r->lie.times < 0)
            continue;
        if (r->lie.times > 0 && --r->lie.times == 0)
            r->lie.times = -1; /* used up */
        return &r->lie;
    }
    return NULL;
}

static void subscribed(struct conn *c, int argc, char **argv, size_t *argl)
{
    char head[96];
    int i;

    for (i = 1; i < argc; i++) {
        snprintf(head, sizeof head, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n", argl[0],
                 argv[0], argl[i]);
        /* the kind in lower case, as Redis sends it */
        for (char *q = head; *q; q++)
            if (*q >= 'A' && *q <= 'Z')
                *q = (char)(*q - 'A' + 'a');
        queue_str(c, head);
        queue_answer(c, argv[i], argl[i], 0, NULL);
        snprintf(head, sizeof head, "\r\n:%d\r\n", i);
        queue_str(c, head);
    }
}

static void time_answer(struct conn *c)
{
    struct timespec ts;
    char buf[96];

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, sizeof buf, "*2\r\n$10\r\n%010lld\r\n$6\r\n%06ld\r\n",
             (long long)ts.tv_sec, ts.tv_nsec / 1000);
    queue_str(c, buf);
}

static int is(const char *name, const char *s)
{
    return strcasecmp(name, s) == 0;
}

/* What a client needs to go on, for commands no rule lies about. */
static void default_answer(struct conn *c, int argc, char **argv,
                           size_t *argl)
{
    const char *n = argv[0];

    if (is(n, "PING"))
        queue_str(c, "+PONG\r\n");
    else if (is(n, "AUTH") || is(n, "SELECT") || is(n, "CLIENT") ||
             is(n, "ASKING") || is(n, "READONLY") || is(n, "DISCARD"))
        queue_str(c, "+OK\r\n");
    else if (is(n, "MULTI"))
        queue_str(c, "+OK\r\n");
    else if (is(n, "EXEC"))
        queue_str(c, "*-1\r\n");
    else if (is(n, "ROLE"))
        queue_str(c, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    else if (is(n, "SCRIPT"))
        queue_str(c, "$40\r\n0000000000000000000000000000000000000000\r\n");
    else if (is(n, "TIME"))
        time_answer(c);
    else if (is(n, "WAIT"))
        queue_str(c, ":0\r\n");
    else if (is(n, "SUBSCRIBE") || is(n, "SSUBSCRIBE") ||
             is(n, "UNSUBSCRIBE") || is(n, "SUNSUBSCRIBE"))
        subscribed(c, argc, argv, argl);
    else
        queue_str(c, "-ERR the liar does not do that\r\n");
}

static void handle_cmd(struct tu_liar *l, struct conn *c, int argc,
                       char **argv, size_t *argl)
{
    const struct tu_lie *lie = NULL;

    /* the answer is queued (copied) under the mutex: a reset may free
     * the rule's bytes as soon as it is released */
    pthread_mutex_lock(&l->mu);
    count_cmd(l, argv[0]);
    if (!c->in_multi || is(argv[0], "EXEC") || is(argv[0], "DISCARD"))
        lie = rule_for(l, argv[0]);
    if (is(argv[0], "MULTI"))
        c->in_multi = 1;
    else if (is(argv[0], "EXEC") || is(argv[0], "DISCARD"))
        c->in_multi = 0;
    else if (c->in_multi && !lie)
        queue_str(c, "+QUEUED\r\n");
    else if (!lie)
        default_answer(c, argc, argv, argl);
    if (lie && !lie->silent && lie->len)
        queue_answer(c, lie->bytes, lie->len, lie->drip_ms, lie->fill);
    if (lie && lie->close)
        c->closing = 1;
    else if (!lie && is(argv[0], "MULTI"))
        queue_str(c, "+OK\r\n");
    pthread_mutex_unlock(&l->mu);
}

/* Reads what the client sent and answers each whole command.  0, or -1
 * when the connection is to be closed. */
static int read_cmds(struct tu_liar *l, struct conn *c)
{
    char *argv[LIAR_MAX_ARGS];
    size_t argl[LIAR_MAX_ARGS], used;
    ssize_t n;
    int argc, rc;

    if (c->incap - c->inlen < 4096) {
        char *p = realloc(c->in, c->incap * 2 + 8192);
        if (!p)
            return -1;
        c->in = p;
        c->incap = c->incap * 2 + 8192;
    }
    n = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, MSG_DONTWAIT);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    c->inlen += (size_t)n;
    while (!c->closing &&
           (rc = parse_cmd(c->in, c->inlen, &argc, argv, argl, &used)) != 0) {
        if (rc < 0)
            return -1;
        handle_cmd(l, c, argc, argv, argl);
        memmove(c->in, c->in + used, c->inlen - used);
        c->inlen -= used;
    }
    return 0;
}

/* ---- the thread -------------------------------------------------------- */

static void accept_one(struct tu_liar *l)
{
    int fd = accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), i;
    struct conn *c;

    if (fd < 0)
        return;
    for (i = 0; i < LIAR_MAX_CONNS && l->conns[i]; i++)
        ;
    if (i == LIAR_MAX_CONNS || !(c = calloc(1, sizeof *c))) {
        close(fd);
        return;
    }
    c->fd = fd;
    l->conns[i] = c;
    pthread_mutex_lock(&l->mu);
    l->open++;
    pthread_mutex_unlock(&l->mu);
}

/* When the next drip byte of c is due (ms from now, at most the tick). */
static int next_due(const struct conn *c)
{
    long long d;

    if (c->head && c->head->off >= c->head->len && c->head->fill)
        return 0; /* a flood: as fast as it reads */
    if (c->head && c->head->drip_ms <= 0)
        return 0;
    if (!c->head || c->head->off >= c->head->len)
        return LIAR_TICK_MS;
    d = c->head->due_ms - now_ms();
    return d < 0 ? 0 : d > LIAR_TICK_MS ? LIAR_TICK_MS : (int)d;
}

static void serve_round(struct tu_liar *l)
{
    struct pollfd p[LIAR_MAX_CONNS + 1];
    int idx[LIAR_MAX_CONNS + 1], n = 1, i, wait = LIAR_TICK_MS;

    p[0] = (struct pollfd){ l->lfd, POLLIN, 0 };
    for (i = 0; i < LIAR_MAX_CONNS; i++) {
        struct conn *c = l->conns[i];
        int due;
        if (!c)
            continue;
        p[n] = (struct pollfd){ c->fd, POLLIN, 0 };
        due = next_due(c);
        if (c->head && due == 0)
            p[n].events |= POLLOUT;
        if (due < wait)
            wait = due;
        idx[n++] = i;
    }
    if (poll(p, (nfds_t)n, wait) < 0)
        return;
    if (p[0].revents & POLLIN)
        accept_one(l);
    for (i = 1; i < n; i++) {
        struct conn *c = l->conns[idx[i]];
        int bad = 0;
        if (p[i].revents & (POLLIN | POLLHUP | POLLERR))
            bad = read_cmds(l, c) != 0;
        if (!bad)
            bad = send_some(c) != 0;
        if (bad) {
            int by_rule = c->closing;
            conn_free(c);
            l->conns[idx[i]] = NULL;
            pthread_mutex_lock(&l->mu);
            l->open--;
            if (by_rule)
                l->closed++;
            pthread_mutex_unlock(&l->mu);
        }
    }
}

static void *liar_main(void *arg)
{
    struct tu_liar *l = arg;
    int stop = 0;

    pthread_mutex_lock(&l->mu);
    l->running = 1;
    pthread_cond_signal(&l->up);
    pthread_mutex_unlock(&l->mu);
    while (!stop) {
        serve_round(l);
        pthread_mutex_lock(&l->mu);
        stop = l->stop;
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

/* ---- the API ------------------------------------------------------------- */

tu_liar_t *tu_liar_start(void)
{
    struct tu_liar *l = calloc(1, sizeof *l);
    struct sockaddr_in sa;
    socklen_t slen = sizeof sa;
    int one = 1;

    if (!l)
        return NULL;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->up, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->lfd < 0 ||
        setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(l->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(l->lfd, 64) != 0 ||
        getsockname(l->lfd, (struct sockaddr *)&sa, &slen) != 0 ||
        pthread_create(&l->thread, NULL, liar_main, l) != 0) {
        perror("harness_liar: listen");
        if (l->lfd >= 0)
            close(l->lfd);
        free(l);
        return NULL;
    }
    l->port = ntohs(sa.sin_port);
    /* It returns once the thread runs: a test forks its cases' children
     * right after, and the thread's start-up allocates; GCC 12's ASan
     * does not lock its allocator around fork(), so a child forked in
     * that moment could inherit a lock held for good.  Idle, the thread
     * waits in poll() and holds none. */
    pthread_mutex_lock(&l->mu);
    while (!l->running)
        pthread_cond_wait(&l->up, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return l;
}

int tu_liar_port(tu_liar_t *l)
{
    return l->port;
}

void tu_liar_add(tu_liar_t *l, const struct tu_lie *lie)
{
    struct rule *r;

    pthread_mutex_lock(&l->mu);
    if (l->nrules == LIAR_MAX_RULES) {
        pthread_mutex_unlock(&l->mu);
        fprintf(stderr, "harness_liar: more than %d rules\n", LIAR_MAX_RULES);
        return;
    }
    r = &l->rules[l->nrules++];
    r->lie = *lie;
    snprintf(r->cmd, sizeof r->cmd, "%s", lie->cmd);
    r->lie.cmd = r->cmd;
    if (lie->bytes) {
        r->lie.len = lie->len ? lie->len : strlen(lie->bytes);
        r->lie.bytes = dup_bytes(lie->bytes, r->lie.len);
    } else {
        r->lie.len = 0;
        r->lie.bytes = dup_bytes("", 0);
    }
    r->lie.fill = lie->fill ? dup_bytes(lie->fill, strlen(lie->fill)) : NULL;
    pthread_mutex_unlock(&l->mu);
}

void tu_liar_reset(tu_liar_t *l)
{
    int i;

    pthread_mutex_lock(&l->mu);
    for (i = 0; i < l->nrules; i++) {
        free((char *)l->rules[i].lie.bytes);
        free((char *)l->rules[i].lie.fill);
    }
    l->nrules = 0;
    pthread_mutex_unlock(&l->mu);
}

/* One of l's counts, read under its lock (its threads change them). */
static long count_of(tu_liar_t *l, const long *count)
{
    long n;

    pthread_mutex_lock(&l->mu);
    n = *count;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int tu_liar_open(tu_liar_t *l)
{
    return (int)count_of(l, &l->open);
}

long tu_liar_closed(tu_liar_t *l)
{
    return count_of(l, &l->closed);
}

long tu_liar_count(tu_liar_t *l, const char *cmd)
{
    long n = 0;
    int i;

    pthread_mutex_lock(&l->mu);
    for (i = 0; i < l->ncounts; i++)
        if (strcasecmp(l->counts[i].name, cmd) == 0)
            n = l->counts[i].n;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void tu_liar_stop(tu_liar_t *l)
{
    int i;

    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    for (i = 0; i < LIAR_MAX_CONNS; i++)
        if (l->conns[i])
            conn_free(l->conns[i]);
    close(l->lfd);
    tu_liar_reset(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->up);
    free(l);
}
