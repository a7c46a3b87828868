/* fuzz_url.c: the URL parser (dist__parse_url, src/base/config.c) on any bytes.
 * Besides not crashing: what it accepts is well-formed, what it refuses
 * has a reason, and no reason depends on what the credentials say. */
#define _GNU_SOURCE
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "engine/internal.h"

static void check_addr(const struct dist__addr *a)
{
    FUZZ_CHECK(memchr(a->host, 0, sizeof a->host) && a->host[0]);
    FUZZ_CHECK(a->port >= 1 && a->port <= 65535);
}

static void check_parsed(const struct dist__cfg *c)
{
    int i;

    FUZZ_CHECK(memchr(c->user, 0, sizeof c->user));
    FUZZ_CHECK(memchr(c->pass, 0, sizeof c->pass));
    FUZZ_CHECK(memchr(c->path, 0, sizeof c->path));
    FUZZ_CHECK(memchr(c->master, 0, sizeof c->master));
    FUZZ_CHECK(c->db >= 0);
    if (c->mode == DIST__MODE_SINGLE) {
        if (c->path[0])
            FUZZ_CHECK(c->path[0] == '/');
        else
            FUZZ_CHECK(c->host[0] && c->port >= 1 && c->port <= 65535);
        return;
    }
    FUZZ_CHECK(c->nseeds >= 1 && c->nseeds <= DIST__MAX_SEEDS);
    for (i = 0; i < c->nseeds; i++)
        check_addr(&c->seeds[i]);
    if (c->mode == DIST__MODE_SENTINEL)
        FUZZ_CHECK(c->master[0]);
    else
        FUZZ_CHECK(c->db == 0);
}

/* The URL with the letters and digits of its credentials (from "://" to
 * the last '@') replaced, except those of %XX escapes; NULL when it has
 * none.  The parser's verdict and reason must not change: a reason that
 * depends on what the credentials say quotes them. */
static char *masked(const char *url)
{
    const char *from = strstr(url, "://"), *at = strrchr(url, '@');
    char *m;
    size_t i, a, b;

    if (!from || !at || at < from + 3 || !(m = strdup(url)))
        return NULL;
    a = (size_t)(from + 3 - url);
    b = (size_t)(at - url);
    for (i = a; i < b; i++) {
        int esc =
            (i >= 1 && url[i - 1] == '%') || (i >= 2 && url[i - 2] == '%');
        if (!esc && isalnum((unsigned char)url[i]))
            m[i] = url[i] == 'Q' ? 'R' : 'Q';
    }
    return m;
}

static void check_reason(const char *url, int rc, const char *why)
{
    struct dist__cfg c;
    char why2[200] = "";
    char *m = masked(url);

    if (rc != 0)
        FUZZ_CHECK(why[0]);
    if (!m)
        return;
    if (dist__parse_url(m, &c, why2, sizeof why2) != rc ||
        (rc != 0 && strcmp(why, why2) != 0)) {
        fprintf(stderr,
                "'%s' gives '%s' but '%s' gives '%s': the reason "
                "depends on the credentials\n",
                url, why, m, why2);
        abort();
    }
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dist__cfg c;
    char why[200] = "";
    char *url = malloc(size + 1);
    int rc;

    if (!url)
        return 0;
    memcpy(url, data, size);
    url[size] = 0;
    memset(&c, 0x5a, sizeof c);
    rc = dist__parse_url(url, &c, why, sizeof why);
    if (rc == 0)
        check_parsed(&c);
    check_reason(url, rc, why);
    free(url);
    return 0;
}
