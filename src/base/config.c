/* config.c: where Redis is and how long to wait for it.  Read from the
 * environment at first use; the dist_set_* calls override it at any time. */
#define _GNU_SOURCE /* secure_getenv */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

#define DEFAULT_URL             "redis://127.0.0.1:6379"
#define DEFAULT_WATCHDOG_MS     30000UL
#define DEFAULT_TIMEOUT_MS      2000UL
#define DEFAULT_WAITER_MS       5000UL
#define DEFAULT_REPLICA_WAIT_MS 1000UL
#define DEFAULT_DEFERRED        0UL /* see docs/performance.md */
#define DEFAULT_COHORT          0UL /* see docs/api.md, Lock cohorting */
#define DEFAULT_DIRECT_WAKE     1UL /* see docs/performance.md */
/* The fixed part of a hold's safety margin (docs/api.md, Semantics, "Lost
 * locks"): how late the watch thread may wake and the lost handler run on a
 * loaded machine, with time left for the holder to stop before its lease
 * can run out on the server. */
#define DEFAULT_LEASE_MARGIN_MS 200UL
/* How long the keys a lock leaves beside it (its fencing counter, a robust
 * mutex's record) outlive its lease once nobody uses the name (README,
 * "Keys and memory"): a day; 0 keeps them for ever. */
#define DEFAULT_KEY_GRACE_MS    (24UL * 3600 * 1000)
/* How much longer than the command timeout a blocked lock call keeps trying
 * when the master cannot be reached on Sentinel or Cluster: a failover
 * usually takes a few seconds. */
#define FAILOVER_GRACE_MS       15000UL
#define MIN_WAITER_MS           300UL
#define MIN_WATCHDOG_MS         300UL
#define MAX_MS                  (24UL * 3600 * 1000)

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static struct dist__cfg cfg;
static atomic_ulong cfg_gen = 1;

/* Decodes the %XX escapes of a user name or password into out; a '%' not
 * followed by two hex digits stands for itself.  -1 when it does not fit or
 * holds %00 (the AUTH arguments are C strings). */
static int unescape(const char *s, size_t len, char *out, size_t outlen)
{
    size_t i, o = 0;

    for (i = 0; i < len; i++) {
        int c = (unsigned char)s[i];
        if (c == '%' && i + 2 < len && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = { s[i + 1], s[i + 2], 0 };
            c = (int)strtol(hex, NULL, 16);
            i += 2;
        }
        if (o + 1 >= outlen || c == 0)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return 0;
}

static int parse_ulong(const char *s, size_t len, unsigned long max,
                       unsigned long *out)
{
    unsigned long v = 0;
    size_t i;

    if (len == 0)
        return -1;
    for (i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
        if (v > max)
            return -1;
    }
    *out = v;
    return 0;
}

#define BAD(...) (snprintf(why, whylen, __VA_ARGS__), EINVAL)

/* host[:port] or [v6]:port from p up to end into a; 0 or EINVAL.  The
 * reasons never quote the text: when a URL is mistyped (an '@' missing),
 * what stands where the host and port should be may be a password, and
 * the reason is kept and shown by every later dist_last_error(). */
static int parse_hostport(const char *p, const char *end,
                          struct dist__addr *a, char *why, size_t whylen)
{
    const char *h = p, *hend;
    unsigned long v;

    a->port = 6379;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (!rb || rb == p + 1)
            return BAD("unterminated IPv6 address");
        h = p + 1;
        hend = rb;
        p = rb + 1;
    } else {
        hend = memchr(p, ':', (size_t)(end - p));
        if (!hend)
            hend = end;
        p = hend;
    }
    if (hend == h)
        return BAD("no host");
    if ((size_t)(hend - h) >= sizeof a->host)
        return BAD("host name too long");
    memcpy(a->host, h, (size_t)(hend - h));
    a->host[hend - h] = 0;
    if (p < end && *p == ':') {
        if (parse_ulong(p + 1, (size_t)(end - p - 1), 65535, &v) || v == 0)
            return BAD("bad port (a number from 1 to 65535)");
        a->port = (int)v;
        p = end;
    }
    if (p != end)
        return BAD("unexpected text after the IPv6 address's ']'");
    return 0;
}

/* How much of the query option at p (n bytes) a reason may quote: its name
 * and '=', never its value, which may be a key's passphrase (tls_key_pass=,
 * or a misspelling of it) or another secret. */
static int opt_name_len(const char *p, size_t n)
{
    const char *eq = memchr(p, '=', n);

    return (int)(eq ? (size_t)(eq - p) + 1 : n);
}

/* How much of a URL's tail at p a reason may quote: up to its query, whose
 * values may be secrets (?tls_key_pass=). */
static int tail_len(const char *p)
{
    return (int)strcspn(p, "?");
}

/* The TLS options that name a file or a name: as a URL's query option,
 * as an environment variable (tls_env), and where they go. */
static const struct {
    const char *opt, *var;
    size_t off;
} tls_paths[] = {
    { "tls_ca=", "DISTLOCK_TLS_CA", offsetof(struct dist__tls_opts, ca) },
    { "tls_cert=", "DISTLOCK_TLS_CERT",
      offsetof(struct dist__tls_opts, cert) },
    { "tls_key=", "DISTLOCK_TLS_KEY", offsetof(struct dist__tls_opts, key) },
    { "tls_key_pass=", "DISTLOCK_TLS_KEY_PASS",
      offsetof(struct dist__tls_opts, key_pass) },
    { "tls_server_name=", "DISTLOCK_TLS_SERVER_NAME",
      offsetof(struct dist__tls_opts, name) },
};
#define N_TLS_PATHS (sizeof tls_paths / sizeof tls_paths[0])

/* One TLS option of a URL's query, n bytes at p: tls_ca=, tls_cert=,
 * tls_key=, tls_key_pass=, tls_server_name= (%XX escapes decoded) or
 * tls_insecure=0|1.
 * 0, EINVAL, or -1 when p is no TLS option. */
static int parse_tls_opt(const char *p, size_t n, struct dist__tls_opts *t,
                         char *why, size_t whylen)
{
    size_t i, k;

    if (n >= 4 && strncmp(p, "tls=", 4) == 0)
        return BAD("there is no tls= option: TLS is chosen by the scheme "
                   "(rediss://, rediss-sentinel://, rediss-cluster://)");
    if (n < 4 || strncmp(p, "tls_", 4) != 0)
        return -1;
    if (!t->on)
        return BAD("'%.*s' needs a TLS URL (rediss://, rediss-sentinel:// "
                   "or rediss-cluster://)",
                   opt_name_len(p, n), p);
    if (n == 14 && (strncmp(p, "tls_insecure=1", 14) == 0 ||
                    strncmp(p, "tls_insecure=0", 14) == 0)) {
        t->insecure = p[13] == '1';
        t->insecure_said = 1;
        return 0;
    }
    for (i = 0; i < N_TLS_PATHS; i++) {
        k = strlen(tls_paths[i].opt);
        if (n > k && strncmp(p, tls_paths[i].opt, k) == 0) {
            if (unescape(p + k, n - k, (char *)t + tls_paths[i].off, 256))
                return BAD("'%.*s' is too long", (int)k - 1, p);
            return 0;
        }
    }
    /* the name only: a misspelt tls_key_pass= must not show its value */
    return BAD(
        "unexpected '%.*s' (the TLS options are tls_ca=, tls_cert=, "
        "tls_key=, tls_key_pass=, tls_server_name= and tls_insecure=1)",
        opt_name_len(p, n), p);
}

typedef int opt_fn(const char *p, size_t n, struct dist__cfg *out, char *why,
                   size_t whylen);

/* A URL's query, ?opt[&opt]... at p ("" for none, where names where it
 * stands for the error): each option, n bytes, goes to one.  0, or the
 * first error (EINVAL). */
static int parse_opts(const char *p, opt_fn *one, struct dist__cfg *out,
                      const char *where, char *why, size_t whylen)
{
    int rc;

    if (!*p)
        return 0;
    if (*p != '?')
        return BAD("unexpected '%.*s'%s", tail_len(p), p, where);
    do {
        size_t n = strcspn(++p, "&");
        if ((rc = one(p, n, out, why, whylen)) != 0)
            return rc;
        p += n;
    } while (*p == '&');
    return 0;
}

/* The option db=N, n bytes at p.  0 with *db, EINVAL, or -1 when p is
 * no db= option. */
static int parse_db_opt(const char *p, size_t n, int *db, char *why,
                        size_t whylen)
{
    unsigned long v;

    if (n < 3 || strncmp(p, "db=", 3) != 0)
        return -1;
    if (parse_ulong(p + 3, n - 3, 1000000, &v))
        return BAD("bad database number (db=N, N from 0 to 1000000)");
    *db = (int)v;
    return 0;
}

/* One option of a server's or the sentinels' URL, n bytes at p: db=N or
 * a TLS option. */
static int parse_server_opt(const char *p, size_t n, struct dist__cfg *out,
                            char *why, size_t whylen)
{
    int rc;

    if ((rc = parse_tls_opt(p, n, &out->tls, why, whylen)) >= 0 ||
        (rc = parse_db_opt(p, n, &out->db, why, whylen)) >= 0)
        return rc;
    return BAD("unexpected '%.*s' (the options are ?db=N and, with TLS, "
               "tls_...=)",
               opt_name_len(p, n), p);
}

/* The scheme: sets *mode, *is_unix and *tls, *rest to what follows "://".
 * TLS is the scheme's "s" (rediss-sentinel://, not a query flag). */
static int parse_scheme(const char *url, const char **rest, int *mode,
                        int *is_unix, int *tls, char *why, size_t whylen)
{
    static const struct {
        const char *s;
        int mode, is_unix, tls;
    } k[] = {
        { "redis://", DIST__MODE_SINGLE, 0, 0 },
        { "rediss://", DIST__MODE_SINGLE, 0, 1 },
        { "unix://", DIST__MODE_SINGLE, 1, 0 },
        { "redis-sentinel://", DIST__MODE_SENTINEL, 0, 0 },
        { "rediss-sentinel://", DIST__MODE_SENTINEL, 0, 1 },
        { "redis-cluster://", DIST__MODE_CLUSTER, 0, 0 },
        { "rediss-cluster://", DIST__MODE_CLUSTER, 0, 1 },
    };
    size_t i, n;

    for (i = 0; i < sizeof k / sizeof k[0]; i++) {
        n = strlen(k[i].s);
        if (strncmp(url, k[i].s, n) == 0) {
            *rest = url + n;
            *mode = k[i].mode;
            *is_unix = k[i].is_unix;
            *tls = k[i].tls;
            return 0;
        }
    }
    if (strncmp(url, "redis-sentinels://", 18) == 0 ||
        strncmp(url, "redis-clusters://", 17) == 0 ||
        strncmp(url, "unixs://", 8) == 0)
        return BAD("TLS is written rediss://, rediss-sentinel:// or "
                   "rediss-cluster:// (and not over a unix socket)");
    return BAD("the URL must start with redis://, rediss://, unix://, "
               "redis-sentinel://, rediss-sentinel://, redis-cluster:// "
               "or rediss-cluster://");
}

/* user[:password]@ at *p, if any, before end: into out, *p past it.
 * Credentials end at the last '@' before end (an '@' may stand in the
 * password as it is); the user name at the first ':' (so may a ':').  The
 * reasons never quote them. */
static int parse_credentials(const char **p, const char *end,
                             struct dist__cfg *out, char *why, size_t whylen)
{
    const char *q, *at = NULL, *colon;

    for (q = *p; q < end; q++)
        if (*q == '@')
            at = q;
    if (!at)
        return 0;
    colon = memchr(*p, ':', (size_t)(at - *p));
    if (colon) {
        if (unescape(*p, (size_t)(colon - *p), out->user, sizeof out->user) ||
            unescape(colon + 1, (size_t)(at - colon - 1), out->pass,
                     sizeof out->pass))
            return BAD("user name or password too long, or holding %%00");
    } else if (unescape(*p, (size_t)(at - *p), out->pass, sizeof out->pass)) {
        return BAD("password too long, or holding %%00");
    }
    *p = at + 1;
    return 0;
}

/* Where the credentials and addresses at p end: at the first '/' or '?'
 * (unix://: at the socket path's '/').  An '@' after that means a password
 * holding '/' or '?' as they are, which would be taken for a path or a
 * query; refused without quoting anything. */
static int authority_end(const char *p, int is_unix, const char **end,
                         char *why, size_t whylen)
{
    *end = p + strcspn(p, is_unix ? "/" : "/?");
    if (is_unix) {
        if (*end > p && (*end)[-1] != '@')
            return BAD("unix:// needs an absolute socket path, after "
                       "user:password@ if any (a '/' in a password is "
                       "written %%2F)");
        return 0;
    }
    if (strchr(*end, '@'))
        return BAD("'@' after the address: a user name or password holding "
                   "'/' or '?' must write them percent-encoded (%%2F, %%3F)");
    return 0;
}

/* unix://: /path[?db=N] */
static int parse_socket(const char *p, struct dist__cfg *out, char *why,
                        size_t whylen)
{
    size_t plen = strcspn(p, "?");
    unsigned long v;

    if (plen == 0 || p[0] != '/')
        return BAD("unix:// needs an absolute socket path");
    if (plen >= sizeof out->path)
        return BAD("socket path too long");
    memcpy(out->path, p, plen);
    out->path[plen] = 0;
    p += plen;
    if (*p == '?' && (strncmp(p, "?db=", 4) != 0 ||
                      parse_ulong(p + 4, strlen(p + 4), 1000000, &v)))
        return BAD("expected ?db=N after the socket path");
    if (*p == '?')
        out->db = (int)v;
    return 0;
}

/* A comma-separated list of sentinels or cluster nodes up to end, into
 * out->seeds; the first is also out->host and out->port. */
static int parse_seeds(const char *p, const char *end, struct dist__cfg *out,
                       char *why, size_t whylen)
{
    int rc;

    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        if (out->nseeds == DIST__MAX_SEEDS)
            return BAD("more than %d addresses", DIST__MAX_SEEDS);
        if ((rc =
                 parse_hostport(p, e, &out->seeds[out->nseeds], why, whylen)))
            return rc;
        out->nseeds++;
        p = comma ? comma + 1 : end;
        if (comma && p == end)
            return BAD("empty address after ','");
    }
    if (out->nseeds == 0)
        return BAD("no host");
    memcpy(out->host, out->seeds[0].host, sizeof out->host);
    out->port = out->seeds[0].port;
    return 0;
}

/* One option of a cluster URL, n bytes at p: db=N or
 * pubsub=both|sharded|plain. */
static int parse_cluster_opt(const char *p, size_t n, struct dist__cfg *out,
                             char *why, size_t whylen)
{
    int db = 0, rc;

    if ((rc = parse_tls_opt(p, n, &out->tls, why, whylen)) >= 0)
        return rc;
    if ((rc = parse_db_opt(p, n, &db, why, whylen)) >= 0) {
        if (rc == 0 && db != 0)
            return BAD("Redis Cluster has only database 0");
        return rc;
    }
    if (n == 11 && strncmp(p, "pubsub=both", 11) == 0) {
        out->pubsub = DIST__PUBSUB_BOTH;
        return 0;
    }
    if (n == 14 && strncmp(p, "pubsub=sharded", 14) == 0) {
        out->pubsub = DIST__PUBSUB_SHARDED;
        return 0;
    }
    if (n == 12 && strncmp(p, "pubsub=plain", 12) == 0) {
        out->pubsub = DIST__PUBSUB_PLAIN;
        return 0;
    }
    return BAD(
        "unexpected '%.*s' (a cluster's options are ?db=N, N being 0, "
        "and pubsub=both, pubsub=sharded or pubsub=plain, and with TLS "
        "the tls_...= options, joined by '&')",
        opt_name_len(p, n), p);
}

/* What follows a cluster's addresses: [/][?opt[&opt]...] (parse_cluster_opt) */
static int parse_cluster_tail(const char *p, struct dist__cfg *out, char *why,
                              size_t whylen)
{
    if (*p == '/' && p[1] && p[1] != '?')
        return BAD("a cluster has no database number or master name "
                   "(unexpected '%.*s')",
                   tail_len(p), p);
    if (*p == '/')
        p++;
    return parse_opts(p, parse_cluster_opt, out, " after the addresses", why,
                      whylen);
}

/* What follows the sentinels' addresses: /MASTER[?db=N] */
static int parse_sentinel_tail(const char *p, struct dist__cfg *out,
                               char *why, size_t whylen)
{
    const char *q;

    if (*p != '/' || !p[1] || p[1] == '?')
        return BAD("redis-sentinel:// needs the master's name after the "
                   "addresses (.../mymaster)");
    p++;
    q = p + strcspn(p, "?");
    if ((size_t)(q - p) >= sizeof out->master)
        return BAD("master name too long");
    memcpy(out->master, p, (size_t)(q - p));
    out->master[q - p] = 0;
    return parse_opts(q, parse_server_opt, out, "", why, whylen);
}

/* redis://: host[:port] up to end, then [/db][?db=N] */
static int parse_single(const char *p, const char *end, struct dist__cfg *out,
                        char *why, size_t whylen)
{
    struct dist__addr a;
    unsigned long v;
    int rc;

    if ((rc = parse_hostport(p, end, &a, why, whylen)))
        return rc;
    memcpy(out->host, a.host, sizeof out->host);
    out->port = a.port;
    p = end;
    if (*p == '/' && p[1] && p[1] != '?') {
        size_t n = strcspn(p + 1, "?");
        if (parse_ulong(p + 1, n, 1000000, &v))
            return BAD("bad database number");
        out->db = (int)v;
        p += 1 + n;
    } else if (*p == '/') {
        p++;
    }
    return parse_opts(p, parse_server_opt, out, "", why, whylen);
}

/* redis://[user[:password]@]host[:port][/db][?db=N]
 * rediss://, rediss-sentinel://, rediss-cluster://: the same over TLS,
 * with the options ?tls_ca=...&tls_cert=... (parse_tls_opt)
 * unix://[user[:password]@]/path[?db=N]
 * redis-sentinel://[user[:password]@]host[:port][,host[:port]...]/MASTER[?db=N]
 * redis-cluster://[user[:password]@]host[:port][,host[:port]...]
 * A user name or password may hold any byte but NUL written %XX; '/' and
 * '?' must be (%2F, %3F), '@', ':' and '%' may be.  Fills the connection
 * part of out; leaves the rest alone.  why never quotes the credentials. */
int dist__parse_url(const char *url, struct dist__cfg *out, char *why,
                    size_t whylen)
{
    const char *p, *end;
    int is_unix = 0, mode = DIST__MODE_SINGLE, tls = 0, rc;

    if (!url || !*url)
        return BAD("empty Redis URL");
    if ((rc = parse_scheme(url, &p, &mode, &is_unix, &tls, why, whylen)))
        return rc;
    memset(&out->tls, 0, sizeof out->tls);
    out->tls.on = tls;

    out->user[0] = out->pass[0] = out->host[0] = out->path[0] = 0;
    out->master[0] = 0;
    out->port = 6379;
    out->db = 0;
    out->mode = mode;
    out->nseeds = 0;
    out->pubsub = DIST__PUBSUB_BOTH;

    if ((rc = authority_end(p, is_unix, &end, why, whylen)) ||
        (rc = parse_credentials(&p, end, out, why, whylen)))
        return rc;
    if (is_unix)
        return parse_socket(p, out, why, whylen);
    if (mode == DIST__MODE_SINGLE)
        return parse_single(p, end, out, why, whylen);
    if ((rc = parse_seeds(p, end, out, why, whylen)))
        return rc;
    p = end;
    if (mode == DIST__MODE_CLUSTER)
        return parse_cluster_tail(p, out, why, whylen);
    return parse_sentinel_tail(p, out, why, whylen);
}

/* The environment is read with secure_getenv: in a set-user-ID or
 * set-group-ID program (or one with file capabilities) it is the caller's,
 * who must not point the program at another Redis or change its timeouts;
 * there the defaults apply, and dist_set_* is the program's own way. */
static unsigned long env_ms(const char *var, unsigned long def,
                            unsigned long min)
{
    const char *s = secure_getenv(var);
    unsigned long v;

    if (!s || !*s)
        return def;
    if (parse_ulong(s, strlen(s), MAX_MS, &v) || v < min) {
        fprintf(stderr, "distlock: ignoring %s='%s' (want %lu..%lu ms)\n",
                var, s, min, MAX_MS);
        return def;
    }
    return v;
}

/* A switch: 0 or 1, anything else is ignored (and said). */
static unsigned long env_flag(const char *var, unsigned long def)
{
    const char *s = secure_getenv(var);

    if (!s || !*s)
        return def;
    if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0) {
        fprintf(stderr, "distlock: ignoring %s='%s' (want 0 or 1)\n", var, s);
        return def;
    }
    return s[0] == '1';
}

/* DISTLOCK_TLS_* for each TLS option the URL did not give (tls_insecure=0
 * included: a URL that asks for checks gets them). */
static void tls_env(struct dist__tls_opts *t)
{
    const char *s;
    size_t i;

    if (!t->on)
        return;
    for (i = 0; i < N_TLS_PATHS; i++) {
        char *field = (char *)t + tls_paths[i].off;
        if (field[0] || (s = secure_getenv(tls_paths[i].var)) == NULL)
            continue;
        if (strlen(s) >= sizeof t->ca) /* every field has that size */
            fprintf(stderr, "distlock: ignoring %s: longer than %zu bytes\n",
                    tls_paths[i].var, sizeof t->ca - 1);
        else
            memcpy(field, s, strlen(s) + 1);
    }
    /* a switch like the others: 0 or 1, junk (yes, true) ignored and said,
     * not taken silently for 0 */
    if (env_flag("DISTLOCK_TLS_INSECURE", 0) && !t->insecure_said)
        t->insecure = 1;
}

static void cfg_fork(int phase);

static void load_env(void)
{
    const char *url = secure_getenv("DISTLOCK_URL");
    char why[200];

    if (!url || !*url)
        url = DEFAULT_URL;
    if (dist__parse_url(url, &cfg, why, sizeof why) != 0)
        snprintf(cfg.bad, sizeof cfg.bad, "DISTLOCK_URL: %s", why);
    tls_env(&cfg.tls);
    cfg.watchdog_ms =
        env_ms("DISTLOCK_WATCHDOG_MS", DEFAULT_WATCHDOG_MS, MIN_WATCHDOG_MS);
    cfg.timeout_ms = env_ms("DISTLOCK_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 1);
    cfg.waiter_ms =
        env_ms("DISTLOCK_WAITER_MS", DEFAULT_WAITER_MS, MIN_WAITER_MS);
    cfg.lease_margin_ms =
        env_ms("DISTLOCK_LEASE_MARGIN_MS", DEFAULT_LEASE_MARGIN_MS, 0);
    cfg.replica_wait_ms =
        env_ms("DISTLOCK_REPLICA_WAIT_MS", DEFAULT_REPLICA_WAIT_MS, 0);
    cfg.key_grace_ms =
        env_ms("DISTLOCK_KEY_GRACE_MS", DEFAULT_KEY_GRACE_MS, 0);
    cfg.deferred = env_flag("DISTLOCK_DEFERRED_RELEASE", DEFAULT_DEFERRED);
    cfg.cohort = env_flag("DISTLOCK_COHORT", DEFAULT_COHORT);
    cfg.direct_wake = env_flag("DISTLOCK_DIRECT_WAKE", DEFAULT_DIRECT_WAKE);
    /* before cfg_mu is first taken: every user comes through here */
    dist__atfork_register(cfg_fork, DIST__RANK_CFG);
}

void dist__cfg_get(struct dist__cfg *out)
{
    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    *out = cfg;
    out->gen = atomic_load(&cfg_gen);
    pthread_mutex_unlock(&cfg_mu);
}

unsigned long dist__cfg_gen(void)
{
    pthread_once(&cfg_once, load_env);
    return atomic_load(&cfg_gen);
}

/* One setting, read consistently with the others. */
static unsigned long read_ms(const unsigned long *field)
{
    unsigned long v;

    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    v = *field;
    pthread_mutex_unlock(&cfg_mu);
    return v;
}

unsigned long dist__watchdog_ms(void)
{
    return read_ms(&cfg.watchdog_ms);
}

unsigned long dist__waiter_ms(void)
{
    return read_ms(&cfg.waiter_ms);
}

unsigned long dist__timeout_ms(void)
{
    return read_ms(&cfg.timeout_ms);
}

unsigned long dist__lease_margin_ms(void)
{
    return read_ms(&cfg.lease_margin_ms);
}

/* Read on every acquire: without the settings' mutex (the setter stores
 * it atomically, and nothing else must agree with it). */
unsigned long dist__key_grace_ms(void)
{
    pthread_once(&cfg_once, load_env);
    return __atomic_load_n(&cfg.key_grace_ms, __ATOMIC_RELAXED);
}

unsigned long dist__key_keep_ms(unsigned long lease_ms)
{
    unsigned long grace = dist__key_grace_ms();

    return grace ? lease_ms + grace : 0;
}

unsigned long dist__patience_ms(void)
{
    unsigned long ms = dist__timeout_ms();

    return dist__cfg_mode() == DIST__MODE_SINGLE ? ms
                                                 : ms + FAILOVER_GRACE_MS;
}

int dist__sharded_pubsub(const struct dist__cfg *c)
{
    return c->mode == DIST__MODE_CLUSTER && c->pubsub != DIST__PUBSUB_PLAIN;
}

int dist__both_pubsub(const struct dist__cfg *c)
{
    return c->mode == DIST__MODE_CLUSTER && c->pubsub == DIST__PUBSUB_BOTH;
}

void dist__cfg_pubsub(int *mode, int *pubsub)
{
    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    *mode = cfg.mode;
    *pubsub = cfg.pubsub;
    pthread_mutex_unlock(&cfg_mu);
}

int dist__cfg_mode(void)
{
    int mode;

    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    mode = cfg.mode;
    pthread_mutex_unlock(&cfg_mu);
    return mode;
}

unsigned long dist__replica_wait_ms(void)
{
    return read_ms(&cfg.replica_wait_ms);
}

int dist__deferred_release(void)
{
    return read_ms(&cfg.deferred) != 0;
}

int dist__cohort_default(void)
{
    return read_ms(&cfg.cohort) != 0;
}

int dist__direct_wake(void)
{
    return read_ms(&cfg.direct_wake) != 0;
}

int dist_set_url(const char *url)
{
    DIST__KEEP_ERRNO;
    struct dist__cfg tmp;
    char why[200];

    if (dist__parse_url(url, &tmp, why, sizeof why) != 0)
        return dist__err(EINVAL, "dist_set_url: %s", why);
    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    cfg.mode = tmp.mode;
    cfg.nseeds = tmp.nseeds;
    memcpy(cfg.seeds, tmp.seeds, sizeof cfg.seeds);
    memcpy(cfg.master, tmp.master, sizeof cfg.master);
    memcpy(cfg.host, tmp.host, sizeof cfg.host);
    memcpy(cfg.path, tmp.path, sizeof cfg.path);
    memcpy(cfg.user, tmp.user, sizeof cfg.user);
    memcpy(cfg.pass, tmp.pass, sizeof cfg.pass);
    cfg.port = tmp.port;
    cfg.db = tmp.db;
    cfg.pubsub = tmp.pubsub;
    tls_env(&tmp.tls);
    cfg.tls = tmp.tls;
    cfg.bad[0] = 0;
    atomic_fetch_add(&cfg_gen, 1);
    pthread_mutex_unlock(&cfg_mu);
    return 0;
}

static int set_ms(unsigned long *field, unsigned long ms, unsigned long min,
                  const char *what)
{
    if (ms < min || ms > MAX_MS)
        return dist__err(EINVAL, "%s: %lu ms is out of range (%lu..%lu)",
                         what, ms, min, MAX_MS);
    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    *field = ms;
    atomic_fetch_add(&cfg_gen, 1);
    pthread_mutex_unlock(&cfg_mu);
    return 0;
}

int dist_set_watchdog_ms(unsigned long ms)
{
    DIST__KEEP_ERRNO;
    return set_ms(&cfg.watchdog_ms, ms, MIN_WATCHDOG_MS,
                  "dist_set_watchdog_ms");
}

int dist_set_waiter_ms(unsigned long ms)
{
    DIST__KEEP_ERRNO;
    return set_ms(&cfg.waiter_ms, ms, MIN_WAITER_MS, "dist_set_waiter_ms");
}

int dist_set_timeout_ms(unsigned long ms)
{
    DIST__KEEP_ERRNO;
    return set_ms(&cfg.timeout_ms, ms, 1, "dist_set_timeout_ms");
}

int dist_set_lease_margin_ms(unsigned long ms)
{
    DIST__KEEP_ERRNO;
    return set_ms(&cfg.lease_margin_ms, ms, 0, "dist_set_lease_margin_ms");
}

int dist_set_key_grace_ms(unsigned long ms)
{
    DIST__KEEP_ERRNO;
    if (ms > MAX_MS)
        return dist__err(EINVAL,
                         "dist_set_key_grace_ms: %lu ms is out of "
                         "range (0..%lu)",
                         ms, MAX_MS);
    pthread_once(&cfg_once, load_env);
    pthread_mutex_lock(&cfg_mu);
    /* no connection depends on it: no new generation */
    __atomic_store_n(&cfg.key_grace_ms, ms, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&cfg_mu);
    return 0;
}

int dist_set_replica_wait_ms(unsigned long ms)
{
    DIST__KEEP_ERRNO;
    return set_ms(&cfg.replica_wait_ms, ms, 0, "dist_set_replica_wait_ms");
}

static void cfg_fork(int phase)
{
    if (phase == 0)
        pthread_mutex_lock(&cfg_mu);
    else
        pthread_mutex_unlock(&cfg_mu); /* parent, or the child's copy */
}
