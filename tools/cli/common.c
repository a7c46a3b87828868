/*
 * common.c: what every command of the distlock tool shares: exit codes, the settings (--url and DISTLOCK_URL), and the options every
 * command takes.  main.c, above it, picks the command.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

struct tool_opt opt;
struct dist__cfg rcfg;
uint64_t rlimit;
const char *cur_usage = ""; /* what --help prints: main.c sets it */

const char *cur_cmd = NULL; /* for "Try 'distlock CMD --help'" */

void usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'distlock %s%s--help'.\n", cur_cmd ? cur_cmd : "",
            cur_cmd ? " " : "");
    exit(EX_USAGE);
}

/* ------------------------------------------------------------------------ */
/* Settings                                                                 */
/* ------------------------------------------------------------------------ */

/* Issue 15 item 9: by Redisson's brace rule "q" and "{q}" derive the same
 * fair queue, channels, token and read-write keys, so locks used under
 * both names block each other.  The layout must stay Redisson's; status
 * warns when the other name is held too.  A failed look says nothing: the
 * command has read the server already and reports it. */
void warn_twin(const char *name)
{
    size_t tlen, len = strlen(name);
    char *twin = dist__names_twin(name, len, &tlen);
    const char *av[2] = { "EXISTS", twin };
    size_t lens[2] = { 6, tlen };
    struct dist__cmd cmd = { 2, av, lens };
    struct dist__buf key = { name, len };
    redisReply *r = NULL;
    struct sb b = { 0 };

    if (!twin)
        return;
    /* the twin hashes to the name's slot: both are hashed on the text
     * inside the braces */
    if (dist__route_cmds(rlimit, &key, 1, &cmd, &r, NULL) == 0 &&
        r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        sb_adds(&b, "distlock: warning: the lock '");
        sb_human(&b, twin, tlen);
        sb_adds(&b, "' is held too, and shares every derived key of '");
        sb_human(&b, name, len);
        sb_adds(&b,
                "' (fair queue, channels, token, read-write keys: "
                "Redisson's naming), so they block each other and what is "
                "shown may be the other's; use one of the two names\n");
        fwrite(b.p, 1, b.len, stderr);
        sb_free(&b);
    }
    freeReplyObject(r);
    free(twin);
}

/* The --tls-* flags and the variables they stand for. */
#define NTLS 6
static const char *const tls_vars[NTLS] = {
    "DISTLOCK_TLS_CA",       "DISTLOCK_TLS_CERT",
    "DISTLOCK_TLS_KEY",      "DISTLOCK_TLS_SERVER_NAME",
    "DISTLOCK_TLS_INSECURE", "DISTLOCK_TLS_KEY_PASS",
};
static const char *const tls_flags[NTLS] = {
    "--tls-ca",          "--tls-cert",     "--tls-key",
    "--tls-server-name", "--tls-insecure", "--tls-key-pass-file",
};

/* The --tls-* flags go where the library reads them, its DISTLOCK_TLS_*
 * (so a URL's own tls_*= still wins), for as long as the settings are
 * read (back): `lock`'s command gets the environment it was given. */
static void tls_flags_env(int put, char **saved)
{
    size_t i;

    for (i = 0; i < NTLS; i++) {
        const char *old;
        if (!opt.tls[i])
            continue;
        if (put) {
            old = getenv(tls_vars[i]);
            saved[i] = old ? strdup(old) : NULL;
            setenv(tls_vars[i], opt.tls[i], 1);
        } else if (saved[i]) {
            setenv(tls_vars[i], saved[i], 1);
            free(saved[i]);
        } else {
            unsetenv(tls_vars[i]);
        }
    }
}

void redis_setup(void)
{
    char *saved[NTLS] = { NULL };

    tls_flags_env(1, saved);
    if (opt.url) {
        struct dist__cfg tmp;
        char why[200];
        if (dist__parse_url(opt.url, &tmp, why, sizeof why) != 0)
            usage_error("--url: %s", why);
        if (dist_set_url(opt.url) != 0)
            die(EX_USAGE, "--url: %s", dist_last_error());
    }
    dist__cfg_get(&rcfg);
    tls_flags_env(0, saved);
    if (rcfg.bad[0])
        die(EX_USAGE, "%s", rcfg.bad);
}

const char *redis_why(void)
{
    const char *e = dist_last_error();

    return e && *e ? e : "Redis did not answer (no reason was recorded)";
}

int on_cluster(void)
{
    return rcfg.mode == DIST__MODE_CLUSTER;
}

int sharded_pubsub(void)
{
    return dist__sharded_pubsub(&rcfg);
}

int both_pubsub(void)
{
    return dist__both_pubsub(&rcfg);
}

void addr_text(char *buf, size_t len, const struct dist__addr *a)
{
    if (!a->port)
        snprintf(buf, len, "unix:%s", rcfg.path);
    else
        snprintf(buf, len, "%s:%d", a->host, a->port);
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

#define FILE_LINE_MAX 8192 /* bytes of that line, its end not counted */

/* The first line of file, for --url-file (a password in the URL stays out
 * of argv, and so out of ps(1), as with DISTLOCK_URL) and
 * --tls-key-pass-file (out of argv and the shell's history).  At most
 * FILE_LINE_MAX bytes are read and kept, its end of line not counted: a
 * longer line, or a file that is no text (/dev/zero), is refused, not
 * read on without bound.  Exits 2 when it cannot be used, naming flag and
 * file; the text itself is never shown.  what: what the line holds. */
static const char *line_from_file(const char *flag, const char *file,
                                  const char *what)
{
    FILE *f = fopen(file, "re");
    char *line;
    size_t n = 0;
    int c = EOF, nul = 0;

    if (!f)
        die(EX_USAGE, "%s %s: %s", flag, file, strerror(errno));
    line = malloc(FILE_LINE_MAX + 2);
    if (!line)
        die(EX_REDIS, "out of memory");
    /* one byte past the bound tells a line of exactly FILE_LINE_MAX bytes
     * from a longer one; a '\r' before the '\n' is kept until the end */
    while (n <= FILE_LINE_MAX && (c = getc(f)) != EOF && c != '\n') {
        nul |= c == 0;
        line[n++] = (char)c;
    }
    if (ferror(f))
        die(EX_USAGE, "%s %s: %s", flag, file, strerror(errno));
    fclose(f);
    while (n > 0 && line[n - 1] == '\r')
        n--;
    line[n] = 0;
    if (n > FILE_LINE_MAX)
        die(EX_USAGE, "%s %s: its first line is longer than %d bytes", flag,
            file, FILE_LINE_MAX);
    if (nul)
        die(EX_USAGE, "%s %s: a NUL byte in its first line", flag, file);
    if (n == 0)
        die(EX_USAGE, "%s %s: no %s on its first line", flag, file, what);
    return line; /* kept for the process's life */
}

/* --tls-* (a value) and --tls-insecure (none): 1 when argv[*i] was one. */
static int tls_opt(int argc, char **argv, int *i)
{
    const char *v;
    size_t k;

    if (strcmp(argv[*i], "--tls-insecure") == 0) {
        opt.tls[4] = "1";
        return 1;
    }
    if ((v = opt_value(argc, argv, i, tls_flags[5])) != NULL) {
        opt.tls[5] = line_from_file(tls_flags[5], v, "passphrase");
        return 1;
    }
    for (k = 0; k < 4; k++)
        if ((v = opt_value(argc, argv, i, tls_flags[k])) != NULL) {
            opt.tls[k] = v;
            return 1;
        }
    return 0;
}

/* Options every command takes.  Returns 1 when argv[*i] was one (and moves
 * *i past its value), 0 otherwise. */
int common_opt(int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *v;

    if (strcmp(a, "--json") == 0) {
        opt.json = 1;
        return 1;
    }
    if (strcmp(a, "--url") == 0) {
        if (*i + 1 >= argc)
            usage_error("--url needs a value");
        opt.url = argv[++*i];
        return 1;
    }
    if (strncmp(a, "--url=", 6) == 0) {
        opt.url = a + 6;
        return 1;
    }
    if ((v = opt_value(argc, argv, i, "--url-file")) != NULL) {
        opt.url = line_from_file("--url-file", v, "URL");
        return 1;
    }
    if (tls_opt(argc, argv, i))
        return 1;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        fputs(cur_usage, stdout);
        exit(0);
    }
    return 0;
}

/* A value: "--opt V" or "--opt=V". */
const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);

    if (strcmp(argv[*i], name) == 0) {
        if (*i + 1 >= argc)
            usage_error("%s needs a value", name);
        return argv[++*i];
    }
    if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
        return argv[*i] + n + 1;
    return NULL;
}

void check_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0)
        usage_error("the lock name is empty");
    if (n > DIST_NAME_MAX)
        usage_error("the lock name is longer than %d bytes", DIST_NAME_MAX);
}

const char *operand_args(int argc, char **argv, extra_opt_fn extra, void *arg)
{
    const char *operand = NULL;
    int i, dashdash = 0;

    for (i = 0; i < argc; i++) {
        if (!dashdash && strcmp(argv[i], "--") == 0) {
            dashdash = 1;
        } else if (!dashdash && extra && extra(argc, argv, &i, arg)) {
            continue;
        } else if (!dashdash && argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
        } else if (operand) {
            usage_error("unexpected argument '%s'", argv[i]);
        } else {
            operand = argv[i];
        }
    }
    return operand;
}

const char *name_args(int argc, char **argv, extra_opt_fn extra, void *arg)
{
    const char *name = operand_args(argc, argv, extra, arg);

    if (!name)
        usage_error("missing the lock NAME");
    check_name(name);
    return name;
}

double secs_value(const char *name, const char *v, int zero_ok, double max)
{
    char *end;
    double secs;

    errno = 0;
    secs = strtod(v, &end);
    if (errno || *end || end == v || !(zero_ok ? secs >= 0 : secs > 0) ||
        secs > max)
        usage_error("%s wants seconds%s (like 30 or 0.5), got '%s'", name,
                    zero_ok ? "" : " above 0", v);
    return secs;
}

int interval_opt(int argc, char **argv, int *i, long *ms)
{
    const char *v = opt_value(argc, argv, i, "--interval");
    char *end;

    if (!v)
        return 0;
    *ms = strtol(v, &end, 10);
    if (*end || *ms < 10 || *ms > 60000)
        usage_error("--interval wants milliseconds, 10..60000");
    return 1;
}

volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
}

void catch_stops(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: poll returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}
