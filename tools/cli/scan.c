/* scan.c: SCAN, page by page, for distlock list and top: one loop that
 * checks every answer, refuses a server whose cursors go round in
 * circles, and keeps to the listing's deadline. */
#include <stdio.h>
#include <string.h>

#include "tool.h"

/* Whether cursor was returned before in this scan: Redis never returns a
 * cursor twice before the scan ends, a broken or hostile server that does
 * would keep the tool scanning for ever.  Brent's method: the cursor is
 * compared with one saved at each power of two of rounds, so any cycle is
 * found within twice its start plus its length, in constant memory. */
static int cursor_cycles(const char *cursor, char *saved, size_t len,
                         unsigned long *round, unsigned long *power)
{
    if (strcmp(cursor, saved) == 0)
        return 1;
    if (++*round == *power) {
        snprintf(saved, len, "%s", cursor);
        *power *= 2;
        *round = 0;
    }
    return 0;
}

/* The whole listing's deadline (monotonic ms; 0: none), and --timeout's
 * seconds for messages. */
static uint64_t list_until;
static double list_secs;

uint64_t list_scan_deadline(double secs)
{
    list_secs = secs;
    list_until = dist__now_ms() + (uint64_t)(secs * 1000.0);
    return list_until;
}

/* Exit 3 with why a SCAN page did not come: the listing's deadline when it
 * has passed (a server that trickles pages, or one that never ends a
 * scan), else the link's own reason. */
static __attribute__((noreturn)) void scan_failed(struct dist__link *l)
{
    if (list_until && dist__now_ms() >= list_until)
        die(EX_REDIS,
            "Redis at %s: the listing did not end within %g s "
            "(--timeout): SCAN pages came too slowly",
            dist__link_where(l), list_secs);
    die(EX_REDIS, "lost the connection to Redis at %s: %s",
        dist__link_where(l), dist__link_error(l));
}

/* One SCAN page: the reply, checked to be [cursor, [keys...]]; NULL when
 * the server refused the TYPE filter (a Redis before 6.0). */
static redisReply *scan_page(struct dist__link *l, const char *cursor,
                             const char *pattern, const char *type)
{
    const char *a[8] = { "SCAN",  cursor, "MATCH", pattern,
                         "COUNT", "1000", "TYPE",  type };
    redisReply *r;

    if ((list_until && dist__now_ms() >= list_until) ||
        dist__link_cmd(l, rlimit, type ? 8 : 6, a, NULL, &r) != 0)
        scan_failed(l);
    if (r->type == REDIS_REPLY_ERROR && type) {
        freeReplyObject(r);
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY)
        die(EX_REDIS, "Redis at %s: unexpected answer to SCAN%s%s",
            dist__link_where(l), r->type == REDIS_REPLY_ERROR ? ": " : "",
            r->type == REDIS_REPLY_ERROR ? r->str : "");
    return r;
}

void list_scan(struct dist__link *l, const char *pattern, const char *type,
               scan_page_fn fn, void *arg)
{
    char cursor[32] = "0", saved[32] = "0";
    unsigned long round = 0, power = 1;

    do {
        redisReply *r = scan_page(l, cursor, pattern, type);

        if (!r) {
            /* no TYPE filter: the caller checks the type itself */
            type = NULL;
            continue;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        fn(r->element[1], arg);
        freeReplyObject(r);
        if (strcmp(cursor, "0") != 0 &&
            cursor_cycles(cursor, saved, sizeof saved, &round, &power))
            die(EX_REDIS,
                "Redis at %s: SCAN returned cursor %s twice (a "
                "broken server: the scan would never end)",
                dist__link_where(l), cursor);
    } while (strcmp(cursor, "0") != 0);
}
