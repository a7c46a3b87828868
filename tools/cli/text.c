/* text.c: the distlock tool's messages, its growing strings, and text made
 * safe for JSON or a terminal (names and owners are arbitrary bytes). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */
/* ------------------------------------------------------------------------ */

void vsay(const char *fmt, va_list ap)
{
    fputs("distlock: ", stderr);
    vfprintf(stderr, fmt, ap);
}

void say(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void die(int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (!q)
        die(EX_REDIS, "out of memory");
    return q;
}

size_t sort_unique(void *base, size_t n, size_t size,
                   int (*cmp)(const void *, const void *),
                   void (*drop)(void *kept, void *dup))
{
    char *v = base;
    size_t i, u;

    if (n > 1)
        qsort(v, n, size, cmp);
    for (i = 0, u = 0; i < n; i++) {
        if (u > 0 && cmp(v + (u - 1) * size, v + i * size) == 0) {
            drop(v + (u - 1) * size, v + i * size);
            continue;
        }
        if (u != i)
            memcpy(v + u * size, v + i * size, size);
        u++;
    }
    return u;
}

char *xmemdup(const char *p, size_t n)
{
    char *q = xrealloc(NULL, n + 1);

    memcpy(q, p, n);
    q[n] = 0;
    return q;
}

void sb_addn(struct sb *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sb_adds(struct sb *b, const char *s)
{
    sb_addn(b, s, strlen(s));
}

void sb_printf(struct sb *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_addn(b, tmp, (size_t)n);
        return;
    }
    {
        char *big = xrealloc(NULL, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_addn(b, big, (size_t)n);
        free(big);
    }
}

/* Length of the valid UTF-8 sequence at s (of at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len, i;
    unsigned c = s[0];

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (len > n)
        return 0;
    for (i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
        (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return len;
}

/* A JSON string; bytes that are not UTF-8 become U+FFFD. */
void sb_json(struct sb *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, l;

    sb_addn(b, "\"", 1);
    while (i < n) {
        unsigned c = u[i];
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            sb_addn(b, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            sb_printf(b, "\\u%04x", c);
            i++;
        } else if ((l = utf8_len(u + i, n - i)) > 0) {
            sb_addn(b, s + i, l);
            i += l;
        } else {
            sb_adds(b, "\\ufffd");
            i++;
        }
    }
    sb_addn(b, "\"", 1);
}

void sb_jsonz(struct sb *b, const char *s)
{
    if (s)
        sb_json(b, s, strlen(s));
    else
        sb_adds(b, "null");
}

/* The start of a JSON object about the lock name: {"name":"..." */
void sb_json_name(struct sb *b, const char *name)
{
    sb_adds(b, "{\"name\":");
    sb_jsonz(b, name);
}

/* The lock name in quotes, for a terminal. */
void sb_quoted(struct sb *b, const char *name)
{
    sb_adds(b, "'");
    sb_human(b, name, strlen(name));
    sb_adds(b, "'");
}

/* For a terminal: control bytes as \xNN, the rest as it is. */
void sb_human(struct sb *b, const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            sb_printf(b, "\\x%02x", c);
        else
            sb_addn(b, s + i, 1);
    }
}

/* Writes a finished line to stdout in one go. */
void sb_flush_line(struct sb *b)
{
    sb_addn(b, "\n", 1);
    fwrite(b->p, 1, b->len, stdout);
    b->len = 0;
    b->p[0] = 0;
}

void sb_free(struct sb *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* "29.9 s" */
void sb_secs(struct sb *b, long long ms)
{
    if (ms < 0)
        ms = 0;
    sb_printf(b, "%lld.%lld s", ms / 1000, (ms % 1000) / 100);
}

int is_digits(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > 19)
        return 0;
    for (i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

int parse_ll(const char *s, size_t n, long long *v)
{
    char tmp[32];
    char *end;

    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    *v = strtoll(tmp, &end, 10);
    return errno || *end ? -1 : 0;
}
