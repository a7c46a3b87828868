/* value.c: the values of the preload configuration.
 *
 * Numbers, yes/no, and the small grammar of "match =", which names where a
 * lock lives: "symbol [OBJECT:][FILE:]NAME[[N]|[*]][+OFFSET]" or
 * "init_site [OBJECT:][FILE:]FUNCTION".  config.c finds the values in the
 * file and says on which line a value was refused; this file says why. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"

/* What each kind of lock is, in words and in the program's memory. */
static const struct {
    const char *name, *type;
    size_t size;
} kinds[] = {
    [PL_MUTEX] = { "mutex", "pthread_mutex_t", sizeof(pthread_mutex_t) },
    [PL_RWLOCK] = { "rwlock", "pthread_rwlock_t", sizeof(pthread_rwlock_t) },
    [PL_COND] = { "cond", "pthread_cond_t", sizeof(pthread_cond_t) },
    [PL_BARRIER] = { "barrier", "pthread_barrier_t",
                     sizeof(pthread_barrier_t) },
    /* no size: a mapped semaphore is sem_open's, never a symbol's */
    [PL_SEM] = { "semaphore", "sem_t", 0 },
};

const char *pl_kind_name(int kind)
{
    return kind >= 0 && kind <= PL_SEM ? kinds[kind].name : "?";
}

const char *pl_kind_type(int kind)
{
    return kind >= 0 && kind <= PL_SEM ? kinds[kind].type : "?";
}

size_t pl_kind_size(int kind)
{
    return kind >= 0 && kind <= PL_SEM ? kinds[kind].size : 0;
}

int pl_parse_ulong(const char *v, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long x;

    if (!*v || *v == '-' || *v == '+' || isspace((unsigned char)*v))
        return -1;
    errno = 0;
    x = strtoul(v, &end, 0);
    if (errno || *end || x > max)
        return -1;
    *out = x;
    return 0;
}

int pl_parse_bool(const char *v, int *out)
{
    static const char *yes[] = { "yes", "true", "on", "1" };
    static const char *no[] = { "no", "false", "off", "0" };
    size_t i;

    for (i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(v, no[i]) == 0)
            return *out = 0, 0;
    }
    return -1;
}

/* ---- match = ------------------------------------------------------------- */

/* Where the reason a match is refused goes. */
struct why {
    char *buf;
    size_t len;
};

static int refuse(struct why *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes the reason; returns -1. */
static int refuse(struct why *w, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w->buf, w->len, fmt, ap);
    va_end(ap);
    return -1;
}

static int is_symchar(int c)
{
    return isalnum(c) || c == '_' || c == '.' || c == '$' || c == '@';
}

/* The kind of match ("symbol" or "init_site") into s->how; returns the
 * spec after it, or NULL after refusing. */
static const char *match_how(struct why *w, struct pl_section *s,
                             const char *v)
{
    const char *sp = v, *spec, *c;
    size_t wlen;

    while (*sp && !isspace((unsigned char)*sp))
        sp++;
    wlen = (size_t)(sp - v);
    for (spec = sp; *spec && isspace((unsigned char)*spec); spec++)
        ;
    if (wlen == 6 && memcmp(v, "symbol", 6) == 0)
        s->how = PL_SYMBOL;
    else if (wlen == 9 && memcmp(v, "init_site", 9) == 0)
        s->how = PL_INIT_SITE;
    else {
        refuse(w,
               "match: expected 'symbol NAME' or 'init_site FUNCTION', "
               "not '%s'",
               v);
        return NULL;
    }
    if (!*spec) {
        refuse(w, "match: '%.*s' needs a name", (int)wlen, v);
        return NULL;
    }
    for (c = spec; *c; c++) {
        if (isspace((unsigned char)*c)) {
            refuse(w, "match: white space inside '%s'", spec);
            return NULL;
        }
    }
    return spec;
}

/* The qualifiers, everything up to the last ':' before any '[' or '+',
 * into s->qual.  Returns what follows them, or NULL after refusing. */
static const char *match_qualifiers(struct why *w, struct pl_section *s,
                                    const char *spec)
{
    const char *name = spec;
    int i;

    for (i = 0; i < 3; i++) {
        const char *colon = strchr(name, ':');
        const char *stop = name + strcspn(name, "[+");

        if (!colon || colon > stop)
            break;
        if (i == 2 || colon == name) {
            refuse(w,
                   "match: cannot read '%s': expected "
                   "[OBJECT:][FILE:]NAME",
                   spec);
            return NULL;
        }
        /* indexed by i, not nqual: the bound of qual is this loop's */
        s->qual[i] = strndup(name, (size_t)(colon - name));
        s->nqual = i + 1;
        name = colon + 1;
    }
    return name;
}

/* What may follow a symbol's name: [N] or [*], then +OFFSET. */
static int match_suffix(struct why *w, struct pl_section *s, const char *c,
                        const char *spec)
{
    if (*c == '[') {
        if (c[1] == '*' && c[2] == ']') {
            s->each = 1;
            c += 3;
        } else {
            char *end;
            unsigned long x;

            errno = 0;
            x = strtoul(c + 1, &end, 10);
            if (!isdigit((unsigned char)c[1]) || *end != ']' || errno ||
                x > LONG_MAX / 2)
                return refuse(w, "match: bad index in '%s': [N] or [*]",
                              spec);
            s->index = (long)x;
            c = end + 1;
        }
    }
    if (*c == '+') {
        if (pl_parse_ulong(c + 1, 1UL << 30, &s->offset) != 0)
            return refuse(w, "match: bad offset in '%s': +N or +0xN", spec);
        c += strlen(c);
    }
    if (*c)
        return refuse(w, "match: unexpected '%s' in '%s'", c, spec);
    return 0;
}

int pl_parse_match(struct pl_section *s, const char *v, char *why,
                   size_t whylen)
{
    struct why w = { why, whylen };
    const char *spec, *name, *c;

    spec = match_how(&w, s, v);
    if (!spec)
        return -1;
    s->match = strdup(v);
    name = match_qualifiers(&w, s, spec);
    if (!name)
        return -1;
    for (c = name; *c && is_symchar((unsigned char)*c); c++)
        ;
    if (c == name)
        return refuse(&w, "match: no symbol name in '%s'", spec);
    s->symbol = strndup(name, (size_t)(c - name));
    if (s->how == PL_INIT_SITE && *c)
        return refuse(&w,
                      "match: init_site takes a function name, without "
                      "[index] or +offset: '%s'",
                      spec);
    if (s->how == PL_INIT_SITE)
        return 0;
    return match_suffix(&w, s, c, spec);
}
