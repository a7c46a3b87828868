/* msg.c: the shim's messages.
 *
 * During start-up they are collected, because distlock-run wants them over
 * its status pipe together with the verdict (or, without distlock-run, they
 * go to stderr when start-up is over); after start-up each one is printed
 * at once.  This file calls nothing else of the shim: the configuration
 * reader and the resolver report through it, and startup.c drives it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

static char *msgs; /* start-up messages, one per line */
static size_t msgs_len;
static int started; /* after start-up: print at once */
static int verbose;

void pl_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

void pl_vmsg(const char *fmt, va_list ap)
{
    char line[1024];
    size_t n;
    int k;

    k = snprintf(line, sizeof line, PL_MSG_PREFIX);
    vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
    n = strlen(line);
    line[n++] = '\n';
    if (__atomic_load_n(&started, __ATOMIC_ACQUIRE)) {
        int saved = errno;
        pl_write_all(2, line, n);
        errno = saved;
        return;
    }
    {
        char *m = realloc(msgs, msgs_len + n);
        if (!m) {
            pl_write_all(2, line, n);
            return;
        }
        memcpy(m + msgs_len, line, n);
        msgs = m;
        msgs_len += n;
    }
}

void pl_msg(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    pl_vmsg(fmt, ap);
    va_end(ap);
}

void pl_msg_started(void)
{
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
}

void pl_msg_drop(void)
{
    free(msgs);
    msgs = NULL;
    msgs_len = 0;
}

void pl_msg_hand_over(int status_fd)
{
    size_t i, j;

    if (status_fd < 0) {
        if (msgs_len)
            pl_write_all(2, msgs, msgs_len);
    } else {
        for (i = 0; i < msgs_len; i = j + 1) {
            for (j = i; j < msgs_len && msgs[j] != '\n'; j++)
                ;
            pl_write_all(status_fd, "msg ", 4);
            pl_write_all(status_fd, msgs + i, j - i + 1);
        }
    }
    pl_msg_drop();
}

void pl_set_verbose(int on)
{
    verbose = on;
}

int pl_verbose(void)
{
    return verbose;
}

void pl_die(const char *fmt, ...)
{
    va_list ap;

    pl_msg_started();
    va_start(ap, fmt);
    pl_vmsg(fmt, ap);
    va_end(ap);
    abort();
}
