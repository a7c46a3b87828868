/* resp.c: what one reply from Redis may hold.  Every byte a link reads is
 * scanned here before hiredis's reader gets it, so that a reply that
 * announces more than a lock's replies ever hold, or is no RESP at all,
 * breaks the link before anything is allocated for it; and the integers
 * of a reply read back.  The link itself is link.c's (link_int.h). */
#include <string.h>

#include "link_int.h"

/* What one reply may hold.  hiredis 0.14.1 believes every header: for
 * "*2147483647" it callocs 16 GiB, for "$2147483647" it buffers whatever
 * comes until 2 GiB have.  A lock's replies are a few numbers and names;
 * the tool's largest (a lock's holders, a SCAN batch) are far below. */
#define REPLY_MAX_ELEMENTS (1L << 16) /* in one array */
#define REPLY_MAX_ITEMS                                                      \
    (1L << 17)                      /* in one reply, nested ones too;
                                         * hiredis builds the items it has
                                         * seen before the total passes
                                         * this: 2^19 cost 115 MB and
                                         * 0.5 s under ThreadSanitizer */
#define REPLY_MAX_BULK  (16L << 20) /* bytes of one string */
#define REPLY_MAX_BYTES (64L << 20) /* bytes of one reply */
#define REPLY_MAX_LINE  (64L << 10) /* a status, error or header line */

/* ---- bounds on replies -------------------------------------------------- */

/* One item of the reply is complete; the reply is when it owes no more. */
static void item_done(struct scan *sc)
{
    if (--sc->pending == 0)
        sc->items = sc->bytes = 0;
}

/* A header announces n of unit (a string's bytes, an array's elements):
 * more than max breaks the link.  0, or DIST__ECONN. */
static int announced(struct dist__link *l, const char *what, long long n,
                     const char *unit, long max)
{
    if (n <= max)
        return 0;
    return fail(l,
                "Redis at %s announced %s of %lld %s, more than the %ld %s "
                "may hold (the connection is dropped)",
                l->where, what, n, unit, max, what);
}

/* The end of a line: what its header announces.  0, or DIST__ECONN. */
static int line_done(struct dist__link *l, struct scan *sc)
{
    sc->in_line = 0;
    if (sc->type != '$' && sc->type != '*') {
        item_done(sc);
        return 0;
    }
    if (!sc->digits || sc->junk || (sc->neg && sc->num != 1))
        return fail(l,
                    "Redis at %s sent a bad %s header (the connection "
                    "is dropped)",
                    l->where, sc->type == '$' ? "string" : "array");
    if (sc->neg) { /* -1: nil */
        item_done(sc);
        return 0;
    }
    if (sc->type == '$') {
        if (announced(l, "a string", sc->num, "bytes", REPLY_MAX_BULK) != 0)
            return DIST__ECONN;
        sc->skip = (int)sc->num + 2;
        return 0;
    }
    if (announced(l, "an array", sc->num, "elements", REPLY_MAX_ELEMENTS) !=
        0)
        return DIST__ECONN;
    if (sc->items + sc->num > REPLY_MAX_ITEMS)
        return fail(l,
                    "Redis at %s sent a reply of more than %ld elements "
                    "in all (the connection is dropped)",
                    l->where, REPLY_MAX_ITEMS);
    sc->items += (int)sc->num;
    sc->pending += (int)sc->num;
    item_done(sc);
    return 0;
}

/* One byte of a line. */
static void line_byte(struct scan *sc, char c)
{
    if (c >= '0' && c <= '9') {
        if (sc->num < 1000000000000LL) /* beyond every bound: stays so */
            sc->num = sc->num * 10 + (c - '0');
        sc->digits++;
    } else if (c == '-' && !sc->digits && !sc->neg) {
        sc->neg = 1;
    } else if (c != '\r') {
        sc->junk = 1;
    }
}

/* Looks at every byte read before hiredis does, to refuse a reply that
 * announces more than it may hold (REPLY_MAX_*) or is no RESP, before
 * anything is allocated for it.  0, or DIST__ECONN (l broken). */
int dist__link_scan(struct dist__link *l, const char *p, size_t n)
{
    struct scan *sc = &l->scan;
    size_t i = 0;

    while (i < n) {
        if (sc->pending == 0)
            sc->pending = 1; /* a new reply */
        if (sc->skip) {
            size_t k = (size_t)sc->skip < n - i ? (size_t)sc->skip : n - i;
            sc->skip -= (int)k;
            sc->bytes += (int)k;
            i += k;
            if (!sc->skip)
                item_done(sc);
        } else if (!sc->in_line) {
            sc->type = p[i++];
            sc->bytes++;
            if (!strchr("+-:$*", sc->type) || !sc->type)
                return fail(l,
                            "Redis at %s sent something that is not a "
                            "Redis reply (byte 0x%02x; the connection is "
                            "dropped)",
                            l->where, (unsigned char)sc->type);
            sc->in_line = 1;
            sc->neg = sc->digits = sc->junk = 0;
            sc->num = sc->line = 0;
        } else {
            char c = p[i++];
            sc->bytes++;
            if (c == '\n') {
                if (line_done(l, sc) != 0)
                    return DIST__ECONN;
                continue;
            }
            if (++sc->line > REPLY_MAX_LINE)
                return fail(l,
                            "Redis at %s sent a line longer than %ld "
                            "bytes (the connection is dropped)",
                            l->where, REPLY_MAX_LINE);
            if (sc->type == '$' || sc->type == '*')
                line_byte(sc, c);
        }
        if (sc->bytes > REPLY_MAX_BYTES)
            return fail(l,
                        "Redis at %s sent a reply of more than %ld bytes "
                        "(the connection is dropped)",
                        l->where, REPLY_MAX_BYTES);
    }
    return 0;
}

int dist__reply_int(const redisReply *r, size_t i, long long *v)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
        r->element[i]->type != REDIS_REPLY_INTEGER)
        return -1;
    *v = r->element[i]->integer;
    return 0;
}
