/*
 * harness_util: clocks, ports, connections, argument lists and files for
 * the rest of the test harness (harness_int.h, harness_server.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HX_DIR_PREFIX "distlock-test-"

double tu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void tu_sleep_ms(long ms)
{
    struct timespec ts, rem;

    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &rem) != 0 && errno == EINTR)
        ts = rem;
}

int tu_free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd, port = -1;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "harness: socket: %s\n", strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "harness: bind 127.0.0.1:0: %s\n", strerror(errno));
    } else if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "harness: getsockname: %s\n", strerror(errno));
    } else {
        port = ntohs(sa.sin_port);
    }
    close(fd);
    return port;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

void hx_pipe_block(struct hx_pipe_guard *g)
{
    sigset_t pending;

    sigemptyset(&g->set);
    sigaddset(&g->set, SIGPIPE);
    sigemptyset(&pending);
    g->was_pending =
        sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &g->set, &g->old);
}

void hx_pipe_unblock(struct hx_pipe_guard *g)
{
    struct timespec zero = { 0, 0 };

    /* One that was pending before is not ours to swallow. */
    if (!g->was_pending) {
        while (sigtimedwait(&g->set, NULL, &zero) == SIGPIPE) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

redisReply *hx_command(redisContext *c, int argc, const char **argv,
                       const size_t *lens)
{
    struct hx_pipe_guard g;
    redisReply *reply;

    hx_pipe_block(&g);
    reply = redisCommandArgv(c, argc, argv, lens);
    hx_pipe_unblock(&g);
    return reply;
}

static struct timeval ms_to_tv(long ms)
{
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

redisContext *hx_connect(const char *sock, int port, long timeout_ms,
                         char *err, size_t elen)
{
    struct timeval tv = ms_to_tv(timeout_ms);
    redisContext *c;
    int fl;

    c = sock != NULL ? redisConnectUnixWithTimeout(sock, tv)
                     : redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (err != NULL)
            hx_why(err, elen, "connect: %s", c ? c->errstr : "out of memory");
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    /* A server started later must not inherit the test's connections. */
    fl = fcntl(c->fd, F_GETFD);
    if (fl >= 0)
        (void)fcntl(c->fd, F_SETFD, fl | FD_CLOEXEC);
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        if (err != NULL)
            hx_why(err, elen, "set timeout: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    return c;
}

const char **hx_collect_args(const char *arg0, va_list ap, int *argc)
{
    const char **argv;
    va_list cp;
    int n = 1, i;

    if (arg0 == NULL)
        return NULL;
    va_copy(cp, ap);
    while (va_arg(cp, const char *) != NULL)
        n++;
    va_end(cp);
    argv = malloc(sizeof(*argv) * (size_t)n);
    if (argv == NULL)
        return NULL;
    argv[0] = arg0;
    for (i = 1; i < n; i++)
        argv[i] = va_arg(ap, const char *);
    *argc = n;
    return argv;
}

redisReply *hx_send_va(tu_redis_t *r, const char *arg0, va_list ap,
                       redisReply *(*send)(tu_redis_t *, int, const char **))
{
    const char **argv;
    redisReply *reply;
    int argc = 0;

    argv = hx_collect_args(arg0, ap, &argc);
    if (argv == NULL) {
        hx_cmd_error(arg0, arg0 ? "out of memory" : "no command");
        return NULL;
    }
    reply = send(r, argc, argv);
    free(argv);
    return reply;
}

void hx_why(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* Files and directories                                                    */
/* ------------------------------------------------------------------------ */

off_t hx_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : 0;
}

char *hx_read_from(const char *path, off_t off)
{
    const off_t cap = 65536;
    off_t size = hx_file_size(path);
    char *buf;
    ssize_t n;
    size_t got = 0;
    int fd;

    if (size - off > cap)
        off = size - cap;
    if (off < 0 || off > size)
        off = 0;
    buf = malloc((size_t)(size - off) + 1);
    if (buf == NULL)
        return NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (got < (size_t)(size - off)) {
            n = pread(fd, buf + got, (size_t)(size - off) - got,
                      off + (off_t)got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        close(fd);
    }
    buf[got] = '\0';
    return buf;
}

void hx_print_tail(const char *text, int lines)
{
    const char *p = text + strlen(text);
    int seen = 0;

    while (p > text && (p[-1] == '\n' || p[-1] == '\r'))
        p--;
    while (p > text) {
        if (p[-1] == '\n' && ++seen == lines)
            break;
        p--;
    }
    if (*p == '\0')
        return;
    fprintf(stderr, "harness: --- redis-server log (last lines) ---\n");
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > 0)
            fprintf(stderr, "  %.*s\n", (int)len, p);
        p += len + (nl ? 1 : 0);
    }
    fprintf(stderr, "harness: ---\n");
}

int hx_write_file(const char *path, const char *text)
{
    size_t len = strlen(text), off = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0) {
        fprintf(stderr, "harness: create %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "harness: write %s: %s\n", path,
                    n < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0) {
        fprintf(stderr, "harness: close %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int hx_make_dir(tu_redis_t *r)
{
    const char *base = getenv("TMPDIR");
    const size_t sun_max = sizeof(((struct sockaddr_un *)0)->sun_path);
    char tmpl[sizeof(r->dir)];
    int n;

    /* The socket path must fit in sun_path; fall back to /tmp if $TMPDIR
     * is too long. */
    if (base == NULL || base[0] != '/' ||
        strlen(base) + sizeof("/" HX_DIR_PREFIX "XXXXXX/redis.sock") >
            sun_max)
        base = "/tmp";
    n = snprintf(tmpl, sizeof(tmpl), "%s/" HX_DIR_PREFIX "XXXXXX", base);
    if (n < 0 || (size_t)n >= sizeof(tmpl))
        return -1;
    if (mkdtemp(tmpl) == NULL) {
        fprintf(stderr, "harness: mkdtemp %s: %s\n", tmpl, strerror(errno));
        return -1;
    }
    snprintf(r->dir, sizeof(r->dir), "%s", tmpl);
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->url_unix, sizeof(r->url_unix), "unix://%s", r->sock);
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int type,
                    struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type == FTW_DP)
        (void)rmdir(path);
    else
        (void)unlink(path);
    return 0;
}

void hx_remove_dir(const char *dir)
{
    /* Only ever remove what we made. */
    if (dir[0] == '\0' || strstr(dir, "/" HX_DIR_PREFIX) == NULL)
        return;
    (void)nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    (void)rmdir(dir);
}

void hx_cmd_error(const char *argv0, const char *what)
{
    fprintf(stderr, "harness: %s: %s\n", argv0 ? argv0 : "(command)", what);
}
