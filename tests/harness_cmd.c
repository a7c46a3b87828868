/*
 * harness_cmd: one-shot commands to a private server, and their replies
 * read as numbers or strings.  See harness_server.h ("Commands").
 */
#include "harness_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static redisReply *send_admin(tu_redis_t *r, int argc, const char **argv)
{
    return tu_cmdv(r, argc, argv, NULL);
}

static redisReply *cmd_va(tu_redis_t *r, const char *arg0, va_list ap)
{
    return hx_send_va(r, arg0, ap, send_admin);
}

redisReply *tu_cmd(tu_redis_t *r, const char *arg0, ...)
{
    redisReply *reply;
    va_list ap;

    va_start(ap, arg0);
    reply = cmd_va(r, arg0, ap);
    va_end(ap);
    return reply;
}

/* Parse a whole base-10 long long; 0 on success. */
static int parse_ll(const char *s, size_t len, long long *out)
{
    char buf[32], *end;
    long long v;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return -1;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || end == buf)
        return -1;
    *out = v;
    return 0;
}

/* "error reply: <text>" for arg0. */
static void error_reply(const char *arg0, const redisReply *reply)
{
    char msg[200];

    snprintf(msg, sizeof(msg), "error reply: %.*s",
             (int)(reply->len > 150 ? 150 : reply->len), reply->str);
    hx_cmd_error(arg0, msg);
}

/* 0 value, 1 nil, -1 other (message printed). */
static int reply_int(redisReply *reply, const char *arg0, long long *out)
{
    char msg[200];

    if (reply == NULL)
        return -1; /* already reported */
    switch (reply->type) {
    case REDIS_REPLY_INTEGER:
        *out = reply->integer;
        return 0;
    case REDIS_REPLY_NIL:
        return 1;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        if (parse_ll(reply->str, reply->len, out) == 0)
            return 0;
        snprintf(msg, sizeof(msg), "not an integer: \"%.*s\"",
                 (int)(reply->len > 60 ? 60 : reply->len), reply->str);
        hx_cmd_error(arg0, msg);
        return -1;
    case REDIS_REPLY_ERROR:
        error_reply(arg0, reply);
        return -1;
    default:
        hx_cmd_error(arg0, "unexpected reply type (not an integer)");
        return -1;
    }
}

/* The command's integer in *out: 0, 1 nil, -1 other (see tu_cmd_int_ex). */
static int cmd_int_va(tu_redis_t *r, long long *out, const char *arg0,
                      va_list ap)
{
    redisReply *reply = cmd_va(r, arg0, ap);
    int rc = reply_int(reply, arg0, out);

    if (reply != NULL)
        freeReplyObject(reply);
    return rc;
}

long long tu_cmd_int(tu_redis_t *r, const char *arg0, ...)
{
    long long v = -1;
    va_list ap;

    va_start(ap, arg0);
    if (cmd_int_va(r, &v, arg0, ap) != 0)
        v = -1;
    va_end(ap);
    return v;
}

int tu_cmd_int_ex(tu_redis_t *r, long long *out, const char *arg0, ...)
{
    long long v = 0;
    va_list ap;
    int rc;

    va_start(ap, arg0);
    rc = cmd_int_va(r, &v, arg0, ap);
    va_end(ap);
    if (rc == 0 && out != NULL)
        *out = v;
    return rc;
}

char *tu_cmd_str(tu_redis_t *r, const char *arg0, ...)
{
    redisReply *reply;
    char *s = NULL;
    va_list ap;

    va_start(ap, arg0);
    reply = cmd_va(r, arg0, ap);
    va_end(ap);
    if (reply == NULL)
        return NULL;
    switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        s = malloc(reply->len + 1);
        if (s != NULL) {
            memcpy(s, reply->str, reply->len);
            s[reply->len] = '\0';
        } else {
            hx_cmd_error(arg0, "out of memory");
        }
        break;
    case REDIS_REPLY_INTEGER:
        s = malloc(24);
        if (s != NULL)
            snprintf(s, 24, "%lld", reply->integer);
        else
            hx_cmd_error(arg0, "out of memory");
        break;
    case REDIS_REPLY_NIL:
        break;
    case REDIS_REPLY_ERROR:
        error_reply(arg0, reply);
        break;
    default:
        hx_cmd_error(arg0, "unexpected reply type (not a string)");
        break;
    }
    freeReplyObject(reply);
    return s;
}
