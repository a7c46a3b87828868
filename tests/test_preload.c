/*
 * test_preload: the LD_PRELOAD mode (libdistlock_preload.so, distlock-run)
 * against a private redis-server.
 *
 * The programs under test know nothing of distlock: legacy_ledger (threads
 * of several processes add to a counter in a file under a static mutex,
 * taking turns on a condition variable) and preload_target (one mutex of
 * every kind a configuration can map, driven through its arguments and
 * stdin/stdout).  This program starts them through distlock-run (or with a
 * bare LD_PRELOAD), reads what they print, and looks in Redis for the
 * locks they hold.  It is single-threaded: all asserts on the main thread.
 * Time bounds are generous bounds, never exact timings.
 *
 * Paths come from $top_builddir (set by make check).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness_server.h"
#include "testhelp.h"

static tu_redis_t r;
static char dir[256];               /* private temp dir */
static char run_bin[PATH_MAX];      /* tools/distlock-run */
static char shim[PATH_MAX];         /* .libs/libdistlock_preload.so */
static char ledger_bin[PATH_MAX];   /* tests/legacy_ledger */
static char repair_bin[PATH_MAX];   /* tests/legacy_repair */
static char static_bin[PATH_MAX];   /* tests/legacy_ledger_static, or "" */
static char target_bin[PATH_MAX];   /* tests/preload_target */
static char fork_bin[PATH_MAX];     /* tests/preload_fork */
static char condfork_bin[PATH_MAX]; /* tests/preload_condfork */
static char other_lib[PATH_MAX];    /* a library that is not the shim */
static char pfx[64];                /* lock-name prefix of this run */
/* Settings every child gets: in a sanitizer build, libdistlock.so (and so
 * the shim) needs the sanitizer runtime, which must be preloaded first
 * into the programs built without it. */
static char *child_env[4];

/* ---- files ---------------------------------------------------------------- */

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* Writes dir/NAME; returns its path (static storage of 8 rotating slots). */
static const char *write_file(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *write_file(const char *name, const char *fmt, ...)
{
    static char paths[8][PATH_MAX];
    static int next;
    char *p = paths[next++ % 8];
    va_list ap;
    FILE *f;

    path_in(p, PATH_MAX, name);
    f = fopen(p, "w");
    assert_non_null(f);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    assert_int_equal(fclose(f), 0);
    return p;
}

static long read_count(const char *path)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");

    if (!f)
        return -1;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = '\0';
    fclose(f);
    return atol(buf);
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* ---- child processes -------------------------------------------------------- */

struct proc {
    pid_t pid;
    int in, out, err;
    char obuf[16384];
    size_t olen; /* unread stdout */
    char ebuf[16384];
    size_t elen;
    int out_eof, err_eof;
};

/* envp: extra "NAME=VALUE" settings (NULL-terminated), or NULL */
static void proc_start(struct proc *p, char *const argv[], char *const envp[])
{
    int i[2], o[2], e[2], k;
    pid_t pid;

    memset(p, 0, sizeof *p);
    assert_int_equal(pipe2(i, O_CLOEXEC), 0);
    assert_int_equal(pipe2(o, O_CLOEXEC), 0);
    assert_int_equal(pipe2(e, O_CLOEXEC), 0);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(i[0], 0);
        dup2(o[1], 1);
        dup2(e[1], 2);
        signal(SIGPIPE, SIG_DFL);
        for (k = 0; child_env[k]; k++)
            putenv(child_env[k]);
        for (; envp && *envp; envp++)
            putenv(*envp);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(i[0]);
    close(o[1]);
    close(e[1]);
    p->pid = pid;
    p->in = i[1];
    p->out = o[0];
    p->err = e[0];
}

/* One read from fd appended to buf (size cap, *len used, kept a string);
 * *eof set at its end. */
static void read_more(int fd, char *buf, size_t cap, size_t *len, int *eof)
{
    ssize_t got = read(fd, buf + *len, cap - 1 - *len);

    if (got <= 0)
        *eof = 1;
    else
        *len += (size_t)got;
    buf[*len] = '\0';
}

/* Reads what is there (or waits up to ms). */
static void proc_pump(struct proc *p, int ms)
{
    struct pollfd f[2];
    int n = 0, k;

    if (!p->out_eof)
        f[n++] = (struct pollfd){ p->out, POLLIN, 0 };
    if (!p->err_eof)
        f[n++] = (struct pollfd){ p->err, POLLIN, 0 };
    if (n == 0) {
        tu_sleep_ms(ms);
        return;
    }
    if (poll(f, (nfds_t)n, ms) <= 0)
        return;
    for (k = 0; k < n; k++) {
        if (!(f[k].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        if (f[k].fd == p->out)
            read_more(p->out, p->obuf, sizeof p->obuf, &p->olen, &p->out_eof);
        else
            read_more(p->err, p->ebuf, sizeof p->ebuf, &p->elen, &p->err_eof);
    }
}

/* Copies n bytes of s as a string, cut to fit. */
static void copy_cut(char *dst, size_t len, const char *s, size_t n)
{
    if (n >= len)
        n = len - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* The next line of stdout, within timeout seconds.  0, or -1. */
static int proc_line(struct proc *p, char *line, size_t len, double timeout)
{
    double until = tu_now() + timeout;
    char *nl;

    for (;;) {
        nl = memchr(p->obuf, '\n', p->olen);
        if (nl) {
            size_t n = (size_t)(nl - p->obuf);

            copy_cut(line, len, p->obuf, n);
            p->olen -= n + 1;
            memmove(p->obuf, nl + 1, p->olen);
            p->obuf[p->olen] = '\0';
            return 0;
        }
        if (p->out_eof || tu_now() >= until) {
            copy_cut(line, len, p->obuf, p->olen);
            return -1;
        }
        proc_pump(p, 50);
    }
}

static void proc_send(struct proc *p, const char *s)
{
    assert_int_equal(write(p->in, s, strlen(s)), (ssize_t)strlen(s));
}

/* Closes stdin, reads the rest, waits (killing it after timeout s).
 * Returns the wait status. */
static int proc_end(struct proc *p, double timeout)
{
    double until = tu_now() + timeout;
    int st = 0;

    if (p->in >= 0)
        close(p->in);
    p->in = -1;
    while ((!p->out_eof || !p->err_eof) && tu_now() < until)
        proc_pump(p, 50);
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (tu_now() >= until) {
            print_error("child %ld still running: killed\n", (long)p->pid);
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        tu_sleep_ms(20);
    }
    close(p->out);
    close(p->err);
    if (p->elen)
        print_message("[child stderr] %s", p->ebuf);
    return st;
}

/* Runs argv to its end; stdout and stderr in p.  Returns the wait status. */
static int run(struct proc *p, char *const argv[], char *const envp[],
               double timeout)
{
    proc_start(p, argv, envp);
    return proc_end(p, timeout);
}

#define assert_exit(st, code)                                                \
    do {                                                                     \
        int st_ = (st);                                                      \
        if (!WIFEXITED(st_) || WEXITSTATUS(st_) != (code))                   \
            fail_msg("status %#x (exit %d, signal %d), expected exit %d",    \
                     st_, WIFEXITED(st_) ? WEXITSTATUS(st_) : -1,            \
                     WIFSIGNALED(st_) ? WTERMSIG(st_) : 0, (code));          \
    } while (0)

#define assert_contains(hay, needle)                                         \
    do {                                                                     \
        if (!strstr((hay), (needle)))                                        \
            fail_msg("'%s' not in: %s", (needle), (hay));                    \
    } while (0)

/* ---- Redis ---------------------------------------------------------------------- */

static char *lockname(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s%s", pfx, name);
    return buf;
}

static long long hlen(const char *name)
{
    char k[256];
    return tu_cmd_int(&r, "HLEN", lockname(k, sizeof k, name), NULL);
}

static long long key_exists(const char *name)
{
    char k[256];
    return tu_cmd_int(&r, "EXISTS", lockname(k, sizeof k, name), NULL);
}

/* How many keys carry this run's prefix. */
static long long prefixed_keys(void)
{
    char pat[128];
    redisReply *x;
    long long n;

    snprintf(pat, sizeof pat, "%s*", pfx); /* the locks, not their counters */
    x = tu_cmd(&r, "KEYS", pat, NULL);
    assert_non_null(x);
    n = x->type == REDIS_REPLY_ARRAY ? (long long)x->elements : -1;
    freeReplyObject(x);
    return n;
}

/* ---- configurations --------------------------------------------------------------- */

/* The [redis] section of every configuration. */
static char redis_section[512];

/* A configuration mapping every kind of mutex preload_target has. */
static const char *target_config(const char *extra)
{
    return write_file(
        "target.ini",
        "%s"
        "[mutex %sglobal]\n"
        "match = symbol g_global_lock\n"
        "\n"
        "[mutex %sstatic]\n"
        "match = symbol preload_target.c:g_static_lock\n"
        "\n"
        "[mutex %sbank]\n"
        "match = symbol g_bank+32          ; the lock member of a struct\n"
        "fair = yes\n"
        "\n"
        "[mutex %sshard]\n"
        "match = symbol g_shards[*]\n"
        "lease_ms = 5000\n"
        "\n"
        "[mutex %serr]\n"
        "match = symbol g_errcheck\n"
        "\n"
        "[mutex %sacct]\n"
        "match = init_site account_create\n"
        "\n"
        "[mutex %slib]\n"
        "match = symbol libpreload_lib.so:cache_lock\n"
        "\n"
        "[mutex %slibglobal]\n"
        "match = symbol libpreload_lib.so:lib_global_lock\n"
        "\n"
        "[rwlock %scatalog]\n"
        "match = symbol g_catalog_lock\n"
        "kind = prefer-writer\n"
        "\n"
        "[rwlock %sheapcat]\n"
        "match = init_site catalog_create\n"
        "%s",
        redis_section, pfx, pfx, pfx, pfx, pfx, pfx, pfx, pfx, pfx, pfx,
        extra ? extra : "");
}

#define ARGV(...) ((char *const[]){ __VA_ARGS__, NULL })

/* distlock-run --config CFG -- preload_target ARGS... */
static void start_target(struct proc *p, const char *cfg, const char *a1,
                         const char *a2, const char *a3)
{
    char *argv[10];
    int n = 0;

    argv[n++] = run_bin;
    argv[n++] = "--config";
    argv[n++] = (char *)cfg;
    argv[n++] = "--";
    argv[n++] = target_bin;
    argv[n++] = (char *)a1;
    if (a2)
        argv[n++] = (char *)a2;
    if (a3)
        argv[n++] = (char *)a3;
    argv[n] = NULL;
    proc_start(p, argv, NULL);
}

static void expect_line(struct proc *p, const char *prefix, char *line,
                        size_t len, double timeout)
{
    if (proc_line(p, line, len, timeout) != 0) {
        proc_pump(p, 100);
        fail_msg("no line '%s...' (got '%s'; stderr: %s)", prefix, line,
                 p->ebuf);
    }
    if (strncmp(line, prefix, strlen(prefix)) != 0)
        fail_msg("expected '%s...', got '%s' (stderr: %s)", prefix, line,
                 p->ebuf);
}

/* The target in mode a1 (a2, a3 as start_target) says a line starting
 * with prefix within secs, then exits 0; that line in line. */
static void target_says(struct proc *p, const char *cfg, const char *a1,
                        const char *a2, const char *a3, const char *prefix,
                        double secs, char *line, size_t len)
{
    start_target(p, cfg, a1, a2, a3);
    expect_line(p, prefix, line, len, secs);
    assert_exit(proc_end(p, 20), 0);
}

/* target_says on the tests' usual configuration; the line, when want is
 * not NULL, is want. */
static void target_line(const char *a1, const char *a2, const char *prefix,
                        double secs, const char *want)
{
    char line[256];
    struct proc p;

    target_says(&p, target_config(NULL), a1, a2, NULL, prefix, secs, line,
                sizeof line);
    if (want)
        assert_string_equal(line, want);
}

/* ---- the legacy program, 4 copies ----------------------------------------------- */

#define COPIES  4
#define THREADS 2
#define POSTS   30

static void test_legacy_four_copies_exact(void **state)
{
    const char *cfg, *count;
    struct proc p[COPIES];
    char posts[16], threads[16];
    int i, st;

    (void)state;
    cfg = write_file("ledger.ini",
                     "%s"
                     "[mutex %sledger]\n"
                     "match = symbol legacy_ledger.c:g_ledger_lock\n"
                     "fair = no\n",
                     redis_section, pfx);
    count = write_file("count-shim", "%s", "");
    snprintf(posts, sizeof posts, "%d", POSTS);
    snprintf(threads, sizeof threads, "%d", THREADS);
    for (i = 0; i < COPIES; i++)
        proc_start(&p[i],
                   ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                        (char *)count, threads, posts),
                   NULL);
    for (i = 0; i < COPIES; i++) {
        st = proc_end(&p[i], 120);
        assert_exit(st, 0);
    }
    assert_int_equal(read_count(count), COPIES * THREADS * POSTS);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- a robust mutex: the legacy program's own EOWNERDEAD handling ------------ */

/* legacy_repair MODE under distlock-run with cfg on the record file; its
 * stdout's first line into out (may be NULL).  Returns the wait status. */
static int repair(const char *cfg, const char *file, const char *mode,
                  char *out, size_t len)
{
    struct proc p;
    int st;

    st = run(&p,
             ARGV(run_bin, "--config", (char *)cfg, "--", repair_bin,
                  (char *)file, (char *)mode),
             NULL, 60);
    if (out) {
        char *nl;
        snprintf(out, len, "%.*s", (int)p.olen, p.obuf);
        if ((nl = strchr(out, '\n')) != NULL)
            *nl = '\0';
    }
    return st;
}

/* A copy that dies between its two writes leaves the record half-written:
 * the next copy, in another process, is told EOWNERDEAD by its own
 * pthread_mutex_lock, repairs, and marks it consistent; the one after it
 * gets 0.  A copy that unlocks without repairing leaves the mutex not
 * recoverable: the next copy's lock says ENOTRECOVERABLE. */
static void test_legacy_robust_repair(void **state)
{
    const char *cfg, *file;
    char key[256], line[256];
    redisReply *x;
    int st;

    (void)state;
    cfg = write_file("repair.ini",
                     "%s"
                     "[mutex %srecord]\n"
                     "match = symbol legacy_repair.c:g_record_lock\n"
                     "lease_ms = 600\n",
                     redis_section, pfx);
    file = write_file("record", "%s", "");
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "posted 1 1");
    st = repair(cfg, file, "crash", line, sizeof line);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL);
    assert_string_equal(line, "crashing");
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "repaired 3 3");
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "posted 4 4");

    st = repair(cfg, file, "crash", line, sizeof line);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL);
    assert_exit(repair(cfg, file, "abandon", line, sizeof line), 0);
    assert_string_equal(line, "EOWNERDEAD");
    assert_exit(repair(cfg, file, "lock", line, sizeof line), 0);
    assert_string_equal(line, "ENOTRECOVERABLE");
    /* the operator repairs the record, then resets the mutex */
    file = write_file("record", "%019d %019d\n", 5, 5);
    snprintf(key, sizeof key, "distlock_robust:{%srecord}", pfx);
    x = tu_cmd(&r, "DEL", key, NULL);
    assert_non_null(x);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    assert_exit(repair(cfg, file, "post", line, sizeof line), 0);
    assert_string_equal(line, "posted 6 6");
}

/* Without the shim the same run need not be exact: it must just not crash. */
static void test_legacy_without_shim_runs(void **state)
{
    struct proc p[COPIES];
    const char *count;
    char posts[16], threads[16];
    long n;
    int i;

    (void)state;
    count = write_file("count-plain", "%s", "");
    snprintf(posts, sizeof posts, "%d", POSTS);
    snprintf(threads, sizeof threads, "%d", THREADS);
    for (i = 0; i < COPIES; i++)
        proc_start(&p[i], ARGV(ledger_bin, (char *)count, threads, posts),
                   NULL);
    for (i = 0; i < COPIES; i++)
        assert_exit(proc_end(&p[i], 120), 0);
    n = read_count(count);
    print_message("without the shim: %ld of %d posts counted\n", n,
                  COPIES * THREADS * POSTS);
    assert_true(n >= 1 && n <= COPIES * THREADS * POSTS);
}

/* ---- configuration errors: file and line, program not started ------------------- */

/* distlock-run refuses the configuration cfg_text: exit 78, the error
 * names the file and says expect, the program never runs (no marker
 * file); and secret, when not NULL, is nowhere in the output. */
static void refused(const char *cfg_text, const char *expect,
                    const char *secret)
{
    char marker[PATH_MAX], needle[PATH_MAX + 300];
    const char *cfg =
        write_file(secret ? "secret.ini" : "bad.ini", "%s", cfg_text);
    struct proc p;

    path_in(marker, sizeof marker, "not-started");
    unlink(marker);
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                         marker, "1", "1"),
                    NULL, 30),
                78);
    snprintf(needle, sizeof needle, "%s%s", cfg, expect);
    assert_contains(p.ebuf, needle);
    if (secret && (strstr(p.ebuf, secret) || strstr(p.obuf, secret)))
        fail_msg("the secret '%s' was echoed: %s%s", secret, p.obuf, p.ebuf);
    assert_false(exists(marker));
}

static void expect_refused(const char *cfg_text, const char *expect)
{
    refused(cfg_text, expect, NULL);
}

static void test_config_errors_name_file_and_line(void **state)
{
    char text[2048];

    (void)state;
    snprintf(text, sizeof text,
             "%s[mutex a]\nmatch = symbol g_ledger_lock\n"
             "bogus = 1\n",
             redis_section);
    expect_refused(text, ":9: unknown key 'bogus' in [mutex a]");
    expect_refused("[redis]\nurl = redis://127.0.0.1:1\n[mutex a]\n"
                   "match symbol g_ledger_lock\n",
                   ":4: expected KEY = VALUE");
    expect_refused("[redis]\non_unavailable = sometimes\n[mutex a]\n"
                   "match = symbol g_ledger_lock\n",
                   ":2: on_unavailable: block, fail or abort");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[mutex a]\n"
                   "match = symbol g_turn_cv\n",
                   ":3: duplicate section [mutex a]");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n\n[mutex b]\n"
                   "match = symbol g_ledger_lock\n",
                   ":5: duplicate mapping: 'symbol g_ledger_lock' is already "
                   "mapped by [mutex a] at line 2");
    /* two spellings of one mutex: found once resolved */
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[mutex b]\n"
                   "match = symbol legacy_ledger.c:g_ledger_lock\n",
                   ":4: duplicate mapping: [b] maps g_ledger_lock");
    expect_refused("[mutex a]\nfair = yes\n", ":1: [mutex a] has no 'match");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[locks]\n",
                   ":3: unknown section [locks]");
    expect_refused(
        "[mutex a]\nmatch = symbol g_ledger_lock\nfair = perhaps\n",
        ":3: fair: yes or no");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n"
                   "  fair = yes\n",
                   ":3: indented line");
    expect_refused("[mutex a]\nmatch = pattern g_*\n", ":2: match: expected");
}

/* Issue 27: a secret in the configuration was echoed in its error: the
 * library's URL reason quoted a tls_key_pass= value, and the reader quoted
 * text after a section header (a url = written on the header's line).
 * Refused, with file and line, and the secret nowhere in the output. */
static void expect_refused_quietly(const char *cfg_text, const char *expect,
                                   const char *secret)
{
    refused(cfg_text, expect, secret);
}

static void test_config_secret_not_echoed(void **state)
{
    (void)state;
    expect_refused_quietly("[redis]\nurl = redis://127.0.0.1:1?"
                           "tls_key_pass=Pa55phrase\n[mutex a]\n"
                           "match = symbol g_ledger_lock\n",
                           ":2: url: ", "Pa55phrase");
    expect_refused_quietly("[redis]\nurl = redis-cluster://u:Sup3rS3cret@"
                           "127.0.0.1:1/x?tls_key_pass=Pa55phrase\n"
                           "[mutex a]\nmatch = symbol g_ledger_lock\n",
                           ":2: url: ", "Pa55phrase");
    expect_refused_quietly("[redis] url = redis://:Sup3rS3cret@127.0.0.1:1\n"
                           "[mutex a]\nmatch = symbol g_ledger_lock\n",
                           ":1: text after the section header",
                           "Sup3rS3cret");
}

/* Issue 15 item 1: a section with more than 16 keys before its 'match'
 * used to forget the later ones, so a second 'match' was parsed too and
 * wrote past the section's two qualifiers: the program died of SIGSEGV. */
static void test_config_many_keys_then_second_match(void **state)
{
    char text[1024];
    size_t n = 0;
    int k;

    (void)state;
    n += (size_t)snprintf(text + n, sizeof text - n, "[mutex a]\n");
    for (k = 1; k <= 16; k++)
        n += (size_t)snprintf(text + n, sizeof text - n, "k%d = 1\n", k);
    snprintf(text + n, sizeof text - n,
             "match = symbol obj:file.c:g_ledger_lock\n"
             "match = symbol obj:file.c:g_turn_cv\n");
    expect_refused(text, ":19: 'match' given twice in this section "
                         "(first at line 18)");
}

/* Issue 15 item 13: a NUL byte cut the line short for fgets, the rest was
 * taken for an over-long line and skipped together with the next line, and
 * every later line number was one too low. */
static void test_config_nul_byte(void **state)
{
    char marker[PATH_MAX];
    const char *cfg;
    struct proc p;

    (void)state;
    cfg = write_file("nul.ini",
                     "[mutex a]\nmatch = symbol g_ledger_lock\n"
                     "x%cy = 1\nbogus = 2\n\nworse = 3\n",
                     0);
    path_in(marker, sizeof marker, "not-started");
    unlink(marker);
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                         marker, "1", "1"),
                    NULL, 30),
                78);
    assert_contains(p.ebuf, "nul.ini:3: a NUL byte in the line");
    assert_contains(p.ebuf, "nul.ini:4: unknown key 'bogus' in [mutex a]");
    assert_contains(p.ebuf, "nul.ini:6: unknown key 'worse' in [mutex a]");
    assert_false(exists(marker));
}

/* Issue 27: a configuration that never ends a line (/dev/zero) was read
 * for ever inside the program, which never started nor was refused until
 * distlock-run gave up on it.  The shim stops past PL_CONFIG_MAX and says
 * why. */
static void test_config_endless_file(void **state)
{
    char marker[PATH_MAX];
    struct proc p;

    (void)state;
    path_in(marker, sizeof marker, "not-started");
    unlink(marker);
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", "/dev/zero", "--", ledger_bin,
                         marker, "1", "1"),
                    NULL, 60),
                78);
    assert_contains(p.ebuf, "/dev/zero:1: the configuration is longer than "
                            "1048576 bytes");
    assert_false(exists(marker));
}

/* Two different qualifiers that read the same once joined with '|' (the
 * old canonical string) are two mappings, not a duplicate.  [mutex c]
 * lacks its 'match' so that the file is refused either way. */
static void test_config_distinct_qualifiers_not_duplicate(void **state)
{
    const char *cfg;
    char marker[PATH_MAX];
    struct proc p;

    (void)state;
    cfg = write_file("bad.ini", "%s",
                     "[mutex a]\nmatch = symbol o:f|g:g_ledger_lock\n"
                     "[mutex b]\nmatch = symbol o|f:g:g_ledger_lock\n"
                     "[mutex c]\nfair = yes\n");
    path_in(marker, sizeof marker, "not-started");
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                         marker, "1", "1"),
                    NULL, 30),
                78);
    assert_contains(p.ebuf, ":5: [mutex c] has no 'match");
    if (strstr(p.ebuf, "duplicate mapping"))
        fail_msg("two mappings taken for one: %s", p.ebuf);
}

static void test_config_missing_file(void **state)
{
    char cfg[PATH_MAX], marker[PATH_MAX];
    struct proc p;

    (void)state;
    path_in(cfg, sizeof cfg, "no-such.ini");
    path_in(marker, sizeof marker, "not-started");
    unlink(marker);
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", cfg, "--", ledger_bin, marker,
                         "1", "1"),
                    NULL, 30),
                78);
    assert_contains(p.ebuf, "no-such.ini: cannot open the configuration");
    assert_false(exists(marker));
}

/* ---- names that do not resolve -------------------------------------------------- */

static void test_unresolved_name_refused(void **state)
{
    char text[1024], marker[PATH_MAX];
    const char *cfg;
    struct proc p;

    (void)state;
    snprintf(text, sizeof text,
             "%s[mutex %sgone]\nmatch = symbol "
             "g_no_such_lock\n",
             redis_section, pfx);
    expect_refused(text, ":8: [mutex ");
    cfg = write_file("bad.ini", "%s", text);
    path_in(marker, sizeof marker, "not-started");
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                         marker, "1", "1"),
                    NULL, 30),
                78);
    assert_contains(p.ebuf, "symbol 'g_no_such_lock' in the program or its "
                            "libraries not found");
    assert_contains(p.ebuf, "was not started");
    /* a file that has no such static */
    snprintf(text, sizeof text,
             "[mutex a]\nmatch = symbol "
             "other.c:g_ledger_lock\n");
    expect_refused(text, ":2: [mutex a] symbol 'g_ledger_lock' of other.c");
    /* a library that is not loaded */
    snprintf(text, sizeof text,
             "[mutex a]\nmatch = symbol "
             "libnothere.so:g_ledger_lock\n");
    expect_refused(text, ":2: [mutex a] no loaded object is called "
                         "'libnothere.so'");
    /* a function is not a mutex */
    expect_refused("[mutex a]\nmatch = symbol main\n", ":2: [mutex a] 'main' "
                                                       "is a function");
}

static void test_unresolved_name_warned(void **state)
{
    char text[1024];
    const char *cfg, *count;
    struct proc p;

    (void)state;
    snprintf(text, sizeof text,
             "%s[preload]\non_unresolved = warn\n"
             "[mutex %sgone]\nmatch = symbol g_no_such_lock\n"
             "[mutex %sledger]\nmatch = symbol g_ledger_lock\n",
             redis_section, pfx, pfx);
    cfg = write_file("warn.ini", "%s", text);
    count = write_file("count-warn", "%s", "");
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--", ledger_bin,
                         (char *)count, "1", "3"),
                    NULL, 60),
                0);
    assert_contains(p.ebuf, "warning: ");
    assert_contains(p.ebuf, "g_no_such_lock");
    assert_int_equal(read_count(count), 3);
}

/* ---- what the loader would ignore --------------------------------------------- */

/* A configuration distlock-run accepts: the ledger program's lock. */
static const char *ok_config(void)
{
    return write_file("ok.ini",
                      "%s[mutex %sledger]\nmatch = symbol "
                      "g_ledger_lock\n",
                      redis_section, pfx);
}

/* distlock-run, with the option opt val when opt is not NULL, refuses
 * to start prog: it exits code, says why (and also, when not NULL), and
 * the program never runs (no marker file). */
static void expect_not_started(const char *opt, const char *val,
                               const char *prog, int code, const char *why,
                               const char *also)
{
    char marker[PATH_MAX];
    const char *cfg = ok_config();
    struct proc p;

    path_in(marker, sizeof marker, "not-started");
    unlink(marker);
    if (!opt)
        assert_exit(run(&p,
                        ARGV(run_bin, "--config", (char *)cfg, "--",
                             (char *)prog, marker, "1", "1"),
                        NULL, 30),
                    code);
    else
        assert_exit(
            run(&p,
                ARGV(run_bin, "--config", (char *)cfg, (char *)opt,
                     (char *)val, "--", (char *)prog, marker, "1", "1"),
                NULL, 30),
            code);
    if (also)
        assert_contains(p.ebuf, also);
    assert_contains(p.ebuf, why);
    assert_false(exists(marker));
}

static void expect_program_refused(const char *prog, const char *why)
{
    expect_not_started(NULL, NULL, prog, 126, why, NULL);
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out;
    ssize_t n;

    assert_true(in >= 0);
    unlink(to);
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0700);
    assert_true(out >= 0);
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    close(in);
    assert_int_equal(close(out), 0);
    assert_int_equal(chmod(to, mode), 0);
}

static void test_static_binary_refused(void **state)
{
    (void)state;
    if (!static_bin[0])
        skip(); /* no static C library to link one */
    expect_program_refused(static_bin, "statically linked");
}

static void test_secure_execution_refused(void **state)
{
    char copy[PATH_MAX], cmd[PATH_MAX + 100];

    (void)state;
    path_in(copy, sizeof copy, "setuid-ledger");
    copy_file(ledger_bin, copy, 04755);
    expect_program_refused(copy, "set-user-ID");
    path_in(copy, sizeof copy, "setgid-ledger");
    copy_file(ledger_bin, copy, 02755);
    expect_program_refused(copy, "set-group-ID");
    path_in(copy, sizeof copy, "script");
    {
        FILE *f = fopen(copy, "w");
        assert_non_null(f);
        fprintf(f, "#!/bin/sh\ntouch \"$1\"\n");
        fclose(f);
        chmod(copy, 0755);
    }
    expect_program_refused(copy, "not an ELF executable");
    path_in(copy, sizeof copy, "caps-ledger");
    copy_file(ledger_bin, copy, 0755);
    snprintf(cmd, sizeof cmd,
             "setcap cap_net_bind_service+ep '%s' "
             ">/dev/null 2>&1",
             copy);
    if (system(cmd) == 0)
        expect_program_refused(copy, "file capabilities");
    else
        print_message("setcap unavailable here: the file-capability refusal "
                      "is not exercised\n");
}

/* Issue 15 item 7: a shim path with a space or a colon is split by the
 * loader, which then loads no shim and runs the program unprotected (to
 * its end, or until --timeout), before distlock-run stopped it.  It must
 * be refused before the program runs at all. */
static void test_split_shim_path_refused(void **state)
{
    static const char *const names[] = { "shim copy.so", "shim:copy.so" };
    char copy[PATH_MAX];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_in(copy, sizeof copy, names[i]);
        copy_file(shim, copy, 0755);
        expect_not_started("--preload", copy, ledger_bin, 78,
                           "splits LD_PRELOAD at spaces and colons", NULL);
        unlink(copy);
    }
}

/* The same for a shim the loader skips although distlock-run's look at its
 * ELF header finds nothing wrong (here: its program header entry size
 * broken, "cannot be preloaded ... ignored"), and for one it would crash
 * on (cut short after 4 KiB: SIGBUS): the loader's own trial run, which
 * runs none of the program's code, finds both and the program never runs. */
static void expect_shim_refused(const char *copy, const char *why)
{
    expect_not_started("--preload", copy, ledger_bin, 78, why,
                       "the loader would start it without the shim");
}

static void test_unloadable_shim_refused(void **state)
{
    char copy[PATH_MAX];
    int fd;

    (void)state;
    path_in(copy, sizeof copy, "bad-shim.so");
    copy_file(shim, copy, 0755);
    fd = open(copy, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(
        pwrite(fd, "\x10\x00", 2, offsetof(Elf64_Ehdr, e_phentsize)), 2);
    close(fd);
    expect_shim_refused(copy, "cannot be preloaded");
    assert_int_equal(truncate(copy, 0), 0);
    copy_file(shim, copy, 0755);
    assert_int_equal(truncate(copy, 4096), 0);
    expect_shim_refused(copy, "died of signal");
    unlink(copy);
}

/* Issue 27: a library that loads but is not the shim (libdistlock.so
 * itself, an easy mix-up, or any other) passed the loader's trial, and the
 * program ran to its end on local mutexes before distlock-run found no
 * report.  The shim's handshake, run before the program, refuses it. */
static void test_not_the_shim_refused(void **state)
{
    char libs[2][PATH_MAX], marker[PATH_MAX];
    const char *slash = strrchr(shim, '/');
    const char *cfg;
    struct proc p;
    size_t i;

    (void)state;
    snprintf(libs[0], sizeof libs[0], "%.*s/libdistlock.so",
             (int)(slash - shim), shim);
    snprintf(libs[1], sizeof libs[1], "%s", other_lib);
    assert_true(libs[1][0] != '\0');
    cfg = ok_config();
    path_in(marker, sizeof marker, "not-started");
    for (i = 0; i < 2; i++) {
        unlink(marker);
        assert_exit(run(&p,
                        ARGV(run_bin, "--config", (char *)cfg, "--preload",
                             libs[i], "--", ledger_bin, marker, "1", "1"),
                        NULL, 30),
                    78);
        assert_contains(p.ebuf, "not the distlock shim: it loads, but does "
                                "not answer the shim's handshake");
        assert_contains(p.ebuf, "was not started");
        assert_false(exists(marker));
    }
    /* the shim itself answers: the same run goes ahead */
    unlink(marker);
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--preload", shim,
                         "--", ledger_bin, marker, "1", "1"),
                    NULL, 30),
                0);
    assert_int_equal(read_count(marker), 1);
}

/* Issue 15 item 14: --timeout 1e300 or inf reached an out-of-range
 * float-to-int conversion (undefined behaviour); nan, 0 and negatives are
 * no timeouts either. */
static void test_timeout_out_of_range_refused(void **state)
{
    static const char *const bad[] = {
        "1e300", "inf", "-inf", "nan", "0", "-1", "86401", "1e", "", "0x"
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_not_started("--timeout", bad[i], ledger_bin, 2,
                           "--timeout: seconds, more than 0 and at most "
                           "86400",
                           NULL);
}

/* Issue 15, minor: a .symtab that cannot be read made the shim fall back to
 * .dynsym silently, and an unresolved name was blamed on a stripped
 * program.  A copy of the ledger with its .symtab's entry size broken must
 * be reported as corrupted. */
static void break_symtab(const char *path)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh;
    int fd = open(path, O_RDWR), i, done = 0;

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &eh, sizeof eh, 0), sizeof eh);
    for (i = 0; i < eh.e_shnum && !done; i++) {
        off_t at = (off_t)(eh.e_shoff + (Elf64_Off)i * sizeof sh);
        assert_int_equal(pread(fd, &sh, sizeof sh, at), sizeof sh);
        if (sh.sh_type == SHT_SYMTAB) {
            sh.sh_entsize = 7;
            assert_int_equal(pwrite(fd, &sh, sizeof sh, at), sizeof sh);
            done = 1;
        }
    }
    close(fd);
    assert_true(done);
}

static void test_corrupted_symtab_reported(void **state)
{
    char copy[PATH_MAX], text[1024];
    const char *cfg;
    struct proc p;

    (void)state;
    path_in(copy, sizeof copy, "broken-symtab-ledger");
    copy_file(ledger_bin, copy, 0755);
    break_symtab(copy);
    snprintf(text, sizeof text,
             "%s[mutex %sledger]\nmatch = symbol "
             "g_ledger_lock\n",
             redis_section, pfx);
    cfg = write_file("symtab.ini", "%s", text);
    assert_exit(run(&p,
                    ARGV(run_bin, "--config", (char *)cfg, "--", copy,
                         "/dev/null", "1", "1"),
                    NULL, 30),
                78);
    assert_contains(p.ebuf, "its .symtab is corrupted (a bad entry size, "
                            "alignment or string table)");
    assert_contains(p.ebuf, "(the program's .symtab is corrupted: only its "
                            "dynamic symbols are known)");
    if (strstr(p.ebuf, "stripped"))
        fail_msg("a corrupted .symtab called stripped: %s", p.ebuf);
}

/* ---- every kind of match ------------------------------------------------------ */

struct kind {
    const char *which; /* preload_target's name for it */
    const char *lock;  /* the lock name after the prefix */
};

static const struct kind kinds[] = {
    { "global", "global" },       /* symbol g_global_lock */
    { "static", "static" },       /* symbol FILE:name, file-static */
    { "bank", "bank" },           /* symbol g_bank+32 */
    { "shard2", "shard:2" },      /* symbol g_shards[*] */
    { "errcheck", "err" },        /* re-initialised by the program */
    { "account", "acct:1" },      /* init_site, the 2nd account */
    { "lib", "lib" },             /* file-static in a library */
    { "libglobal", "libglobal" }, /* copy-relocated into the program */
};

static void hold_and_check(const char *cfg, const char *which,
                           const char *lock)
{
    char line[256];
    struct proc p;

    start_target(&p, cfg, "hold", which, NULL);
    expect_line(&p, "held", line, sizeof line, 20);
    if (lock) {
        char k[256];
        long long ttl;

        if (hlen(lock) != 1)
            fail_msg("%s: lock '%s%s' not held in Redis", which, pfx, lock);
        /* lease_ms = 5000 for the shards, the 30 s watchdog elsewhere */
        ttl = tu_cmd_int(&r, "PTTL", lockname(k, sizeof k, lock), NULL);
        if (strncmp(lock, "shard", 5) == 0 ? !(ttl > 0 && ttl <= 5000)
                                           : !(ttl > 5000 && ttl <= 30000))
            fail_msg("%s: lease %lld ms left", which, ttl);
    } else {
        assert_int_equal(prefixed_keys(), 0);
    }
    proc_send(&p, "\n");
    expect_line(&p, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(&p, 20), 0);
    if (lock)
        assert_int_equal(key_exists(lock), 0);
}

static void test_every_match_kind(void **state)
{
    const char *cfg = target_config(NULL);
    size_t i;

    (void)state;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        hold_and_check(cfg, kinds[i].which, kinds[i].lock);
}

static void test_unmapped_mutex_untouched(void **state)
{
    (void)state;
    hold_and_check(target_config(NULL), "unmapped", NULL);
    assert_int_equal(prefixed_keys(), 0);
}

/* The same, with a bare LD_PRELOAD and no launcher. */
static void test_plain_ld_preload(void **state)
{
    char env1[2 * PATH_MAX + 20], env2[PATH_MAX + 40], line[256];
    const char *cfg = target_config(NULL);
    struct proc p;

    (void)state;
    snprintf(env1, sizeof env1, "LD_PRELOAD=%s%s%s",
             child_env[0] ? child_env[0] + strlen("LD_PRELOAD=") : "",
             child_env[0] ? ":" : "", shim);
    snprintf(env2, sizeof env2, "DISTLOCK_PRELOAD_CONFIG=%s", cfg);
    proc_start(&p, ARGV(target_bin, "hold", "static"),
               (char *const[]){ env1, env2, NULL });
    expect_line(&p, "held", line, sizeof line, 20);
    assert_int_equal(hlen("static"), 1);
    proc_send(&p, "\n");
    expect_line(&p, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(&p, 20), 0);
    /* a missing configuration stops the program before main */
    snprintf(env2, sizeof env2, "DISTLOCK_PRELOAD_CONFIG=%s/none.ini", dir);
    assert_exit(run(&p, ARGV(target_bin, "hold", "static"),
                    (char *const[]){ env1, env2, NULL }, 20),
                78);
    assert_contains(p.ebuf, "none.ini: cannot open the configuration");
    assert_int_equal(p.olen, 0);
}

/* A library constructor that runs before the shim's own locks a mapped
 * mutex: start-up happens then, and the call is a mapped one. */
static void test_start_up_from_a_library_constructor(void **state)
{
    struct proc p;

    (void)state;
    target_line("ctor", NULL, "ctor ", 30, "ctor 1");
    assert_exit(run(&p, ARGV(target_bin, "ctor"), NULL, 20), 0);
    assert_contains(p.obuf, "ctor -1"); /* no shim: nobody counted */
    assert_int_equal(prefixed_keys(), 0);
}

/* A child that execs another program (here /bin/sh) inherits LD_PRELOAD
 * and the configuration, whose names are not in it: distlock-run's
 * DISTLOCK_PRELOAD_TARGET keeps the shim out of its way. */
static void test_children_stay_unmapped(void **state)
{
    (void)state;
    target_line("spawn", NULL, "child ", 30, "child 7");
}

/* With a bare LD_PRELOAD, [preload] program = does the same. */
static void test_program_key(void **state)
{
    char env1[2 * PATH_MAX + 20], env2[PATH_MAX + 40], line[256];
    const char *cfg;
    struct proc p;

    (void)state;
    cfg = write_file("program.ini",
                     "[preload]\nprogram = preload_target\n"
                     "[mutex %sglobal]\nmatch = symbol g_global_lock\n",
                     pfx);
    snprintf(env1, sizeof env1, "LD_PRELOAD=%s%s%s",
             child_env[0] ? child_env[0] + strlen("LD_PRELOAD=") : "",
             child_env[0] ? ":" : "", shim);
    snprintf(env2, sizeof env2, "DISTLOCK_PRELOAD_CONFIG=%s", cfg);
    proc_start(&p, ARGV(target_bin, "spawn"),
               (char *const[]){ env1, env2, NULL });
    expect_line(&p, "child ", line, sizeof line, 30);
    assert_string_equal(line, "child 7");
    assert_exit(proc_end(&p, 20), 0);
}

/* ---- fork() under init_site (issue 27) ---------------------------------------- */

/* preload_fork under cfg: its child and then its parent lock, signal and
 * unlock, and it ends (it kills a child that hangs, after 60 s: a
 * bound, not a timing).  Verbose: the shim's messages in *p. */
static void fork_runs(struct proc *p, const char *cfg)
{
    assert_exit(
        run(p, ARGV(run_bin, "-v", "--config", (char *)cfg, "--", fork_bin),
            NULL, 120),
        0);
    /* the program's own inits only: main's mutex, and the library's in
     * the child (the library's handler ran, and its init returned) */
    assert_string_equal(p->obuf, "child 0 1 2 1\nparent 0\nparent 0 1 1\n");
    assert_int_equal(prefixed_keys(), 0);
}

/* The child of a fork ran libdistlock's fork handler, whose
 * pthread_mutex_init reached the shim's init_site mapping, and waited for
 * the shim's own lock, which the shim's prepare handler had taken and
 * whose child handler (registered later) had not run yet: every forked
 * child hung once the file had an init_site section, even one of a
 * function that never runs.  The library's own objects now bypass the
 * shim (the counts), and a handler registered before the shim's (the one
 * of libpreload_lib.so) may initialise a lock in the child. */
static void test_fork_with_init_site(void **state)
{
    const char *cfg;
    struct proc p;
    char want[128];

    (void)state;
    cfg = write_file("fork.ini", "%s[mutex %sfork]\nmatch = init_site main\n",
                     redis_section, pfx);
    fork_runs(&p, cfg);
    snprintf(want, sizeof want, "mutex '%sfork:0' = ", pfx);
    assert_contains(p.ebuf, want);
    cfg = write_file("fork.ini",
                     "%s[mutex %sfork]\nmatch = init_site "
                     "preload_fork_unused\n",
                     redis_section, pfx);
    fork_runs(&p, cfg);
    assert_contains(p.ebuf, "mutex that pthread_mutex_init called from "
                            "preload_fork_unused");
}

/* A [mutex] and a [cond] on one init_site function: each maps what it
 * initialises of its kind (refused as a duplicate mapping before).  Two
 * sections of one kind on one function, or two of any kinds on one
 * symbol, stay duplicates. */
static void test_mutex_and_cond_share_init_site(void **state)
{
    const char *cfg;
    struct proc p;
    char want[128];

    (void)state;
    cfg = write_file("pair.ini",
                     "%s[mutex %sfm]\nmatch = init_site main\n"
                     "[cond %sfc]\nmatch = init_site main\nmutex = %sfm\n",
                     redis_section, pfx, pfx, pfx);
    fork_runs(&p, cfg);
    snprintf(want, sizeof want, "mutex '%sfm:0' = ", pfx);
    assert_contains(p.ebuf, want);
    snprintf(want, sizeof want, "cond '%sfc:0' = ", pfx);
    assert_contains(p.ebuf, want);
    expect_refused("[mutex a]\nmatch = init_site main\n[mutex b]\n"
                   "match = init_site main\n",
                   ":4: duplicate mapping: 'init_site main' is already "
                   "mapped by [mutex a] at line 2");
    expect_refused("[mutex a]\nmatch = symbol g_ledger_lock\n[cond b]\n"
                   "match = symbol g_ledger_lock\n",
                   ":4: duplicate mapping: 'symbol g_ledger_lock' is already "
                   "mapped by [mutex a] at line 2");
}

/* A process-shared condition the parent destroys and makes again after
 * fork(), at the same address from the same init site, is the one its
 * child waits on: the child wakes at the parent's broadcast.  It was the
 * site's next lock, of another name, and the child waited for ever (Open
 * POSIX pthread_cond_destroy/2-1 hung; preload_condfork kills its child
 * after 60 s, a bound, not a timing). */
static void test_cond_made_again_after_fork(void **state)
{
    const char *cfg;
    struct proc p;
    char want[128];

    (void)state;
    cfg = write_file("condfork.ini",
                     "%s[mutex %scfm]\nmatch = init_site "
                     "make_mutex\n[cond %scfc]\nmatch = init_site make_cond\n"
                     "mutex = %scfm\n",
                     redis_section, pfx, pfx, pfx);
    assert_exit(
        run(&p,
            ARGV(run_bin, "-v", "--config", (char *)cfg, "--", condfork_bin),
            NULL, 120),
        0);
    assert_string_equal(p.obuf, "child 0\nparent 0\n");
    snprintf(want, sizeof want, "cond '%scfc:0' = ", pfx);
    assert_contains(p.ebuf, want);
    snprintf(want, sizeof want, "cond '%scfc:1' = ", pfx);
    if (strstr(p.ebuf, want))
        fail_msg("the condition made again got a name of its own:\n%s",
                 p.ebuf);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- symbol versions --------------------------------------------------------------- */

static int is_wrapped(const char *sym)
{
    static const char *names[] = {
        "pthread_mutex_lock@",         "pthread_mutex_unlock@",
        "pthread_mutex_init@",         "pthread_mutex_destroy@",
        "pthread_mutex_trylock@",      "pthread_mutex_timedlock@",
        "pthread_mutex_clocklock@",    "pthread_cond_wait@",
        "pthread_cond_timedwait@",     "pthread_cond_clockwait@",
        "pthread_rwlock_rdlock@",      "pthread_rwlock_tryrdlock@",
        "pthread_rwlock_timedrdlock@", "pthread_rwlock_clockrdlock@",
        "pthread_rwlock_wrlock@",      "pthread_rwlock_trywrlock@",
        "pthread_rwlock_timedwrlock@", "pthread_rwlock_clockwrlock@",
        "pthread_rwlock_unlock@",      "pthread_rwlock_init@",
        "pthread_rwlock_destroy@",
    };
    size_t i;

    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(sym, names[i], strlen(names[i])) == 0)
            return 1;
    return 0;
}

/* readelf --dyn-syms: "name@VERSION" of undefined (want_defined 0) or
 * defined symbols, one per line, in out. */
static void dyn_syms(const char *file, int want_defined, char *out,
                     size_t len)
{
    char cmd[PATH_MAX + 64], line[512];
    size_t used = 0;
    FILE *f;

    snprintf(cmd, sizeof cmd, "readelf --dyn-syms -W '%s'", file);
    f = popen(cmd, "r");
    assert_non_null(f);
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char ndx[32], name[256];
        char *at;

        if (sscanf(line, "%*s %*s %*s %*s %*s %*s %31s %255s", ndx, name) !=
            2)
            continue;
        if ((strcmp(ndx, "UND") == 0) == (want_defined != 0))
            continue;
        at = strstr(name, "@@");
        if (at)
            memmove(at, at + 1, strlen(at)); /* default version: @ */
        if (!strchr(name, '@'))
            continue;
        used += (size_t)snprintf(out + used, len - used, "%s\n", name);
    }
    pclose(f);
}

/* The target in mode counts the calls that reached the shim ("count <sym>
 * <n>" lines): each at least one, each symbol one the shim defines (of
 * those it wraps only, when wrapped_only).  Returns how many it counted. */
static int shim_counts(struct proc *p, const char *cfg, const char *mode,
                       const char *defined, int wrapped_only)
{
    char line[512], want[300];
    int counted = 0;

    start_target(p, cfg, mode, NULL, NULL);
    while (proc_line(p, line, sizeof line, 30) == 0) {
        char sym[256];
        long n;

        if (sscanf(line, "count %255s %ld", sym, &n) != 2)
            continue;
        counted++;
        if (n < 1)
            fail_msg("%s: %ld calls reached the shim", sym, n);
        snprintf(want, sizeof want, "%s\n", sym);
        if ((!wrapped_only || is_wrapped(want)) && !strstr(defined, want))
            fail_msg("counted but not defined: %s", sym);
    }
    assert_exit(proc_end(p, 30), 0);
    return counted;
}

static void test_symbol_versions_intercepted(void **state)
{
    static char imported[16384], defined[16384];
    char line[512];
    const char *cfg = target_config(NULL);
    const char *s, *nl;
    struct proc p;
    int seen = 0;

    (void)state;
    dyn_syms(target_bin, 0, imported, sizeof imported);
    dyn_syms(shim, 1, defined, sizeof defined);
    /* what glibc 2.36 binds a fresh build to */
    assert_contains(imported, "pthread_mutex_trylock@GLIBC_2.34\n");
    assert_contains(imported, "pthread_mutex_timedlock@GLIBC_2.34\n");
    assert_contains(imported, "pthread_cond_wait@GLIBC_2.3.2\n");
    assert_contains(imported, "pthread_rwlock_rdlock@GLIBC_2.34\n");
    /* the shim defines each of those, in that version */
    for (s = imported; (nl = strchr(s, '\n')) != NULL; s = nl + 1) {
        snprintf(line, sizeof line, "%.*s\n", (int)(nl - s), s);
        if (!is_wrapped(line))
            continue;
        seen++;
        if (!strstr(defined, line))
            fail_msg("the shim does not define %s", line);
    }
    assert_true(seen >= 21);

    /* and each call on a mapped mutex reaches the shim, every version */
    assert_int_equal(shim_counts(&p, cfg, "calls", defined, 1), 16);
    assert_int_equal(shim_counts(&p, cfg, "rwcalls", defined, 0), 22);
    assert_int_equal(prefixed_keys(), 0);

    /* without the shim the same calls work, and nobody counts them */
    assert_exit(run(&p, ARGV(target_bin, "calls"), NULL, 30), 0);
    assert_contains(p.obuf, "count pthread_mutex_lock@GLIBC_2.2.5 -1");
}

/* libdistlock.so's own mutexes and conditions bypass the shim only when
 * every call the library makes to a function the shim interposes goes
 * through its table (src/base/sys.c): none may be a plain call, bound through
 * the PLT (JUMP_SLOT) or the GOT (GLOB_DAT, -fno-plt) to whichever
 * definition comes first, which is the shim's. */
static void test_library_calls_bypass_shim(void **state)
{
    static char defined[16384];
    char lib[PATH_MAX], cmd[PATH_MAX + 64], line[512], want[300];
    const char *slash = strrchr(shim, '/');
    int relocs = 0;
    FILE *f;

    (void)state;
    snprintf(lib, sizeof lib, "%.*s/libdistlock.so", (int)(slash - shim),
             shim);
    defined[0] = '\n'; /* whole lines: sem_close is not close */
    dyn_syms(shim, 1, defined + 1, sizeof defined - 1);
    assert_contains(defined, "\npthread_mutex_init@GLIBC_2.2.5\n");
    snprintf(cmd, sizeof cmd, "readelf -r -W '%s'", lib);
    f = popen(cmd, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) {
        char type[64], name[256];

        if (sscanf(line, "%*s %*s %63s %*s %255s", type, name) != 2)
            continue;
        if (strcmp(type, "R_X86_64_JUMP_SLOT") != 0 &&
            strcmp(type, "R_X86_64_GLOB_DAT") != 0)
            continue;
        relocs++;
        snprintf(want, sizeof want, "\n%s\n", name);
        if (strstr(defined, want))
            fail_msg("libdistlock.so calls %s directly: through the shim "
                     "when it is preloaded (add it to src/base/sys.c)",
                     name);
    }
    pclose(f);
    assert_true(relocs > 10); /* the listing was read */
}

/* ---- trylock, timedlock, clocklock ------------------------------------------------- */

static void expect_rc_on(const char *cfg, const char *mode, const char *which,
                         const char *ms, int rc, double min_ms, double max_ms)
{
    char line[256];
    struct proc p;
    int got = -1;
    double took = -1;

    target_says(&p, cfg, mode, which, ms, "rc ", 30, line, sizeof line);
    sscanf(line, "rc %d ms %lf", &got, &took);
    if (got != rc)
        fail_msg("%s: rc %d, expected %d", mode, got, rc);
    if (min_ms >= 0 && !(took >= min_ms && took <= max_ms))
        fail_msg("%s: took %.0f ms, expected [%.0f, %.0f]", mode, took,
                 min_ms, max_ms);
}

static void expect_rc(const char *cfg, const char *mode, const char *ms,
                      int rc, double min_ms, double max_ms)
{
    expect_rc_on(cfg, mode, "static", ms, rc, min_ms, max_ms);
}

static void test_trylock_and_timedlock(void **state)
{
    const char *cfg = target_config(NULL);
    char line[256];
    struct proc holder;
    double t0;

    (void)state;
    start_target(&holder, cfg, "hold", "static", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);

    t0 = tu_now();
    expect_rc(cfg, "try", NULL, EBUSY, -1, -1);
    assert_true(tu_now() - t0 < 10); /* no waiting in there */
    expect_rc(cfg, "timed", "400", ETIMEDOUT, 390, 5000);
    expect_rc(cfg, "clock", "400", ETIMEDOUT, 390, 5000);

    proc_send(&holder, "\n");
    expect_line(&holder, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(&holder, 20), 0);

    expect_rc(cfg, "try", NULL, 0, -1, -1);
    expect_rc(cfg, "timed", "400", 0, 0, 5000);
    expect_rc(cfg, "clock", "400", 0, 0, 5000);
    assert_int_equal(prefixed_keys(), 0);
}

/* Lock, unlock, pthread_exit in main (Open POSIX sem_init/3-1): the
 * process ends by itself with status 0, as without the shim; the
 * library's threads do not keep it alive. */
static void test_pthread_exit_in_main_ends(void **state)
{
    (void)state;
    target_line("pexit", "static", "exiting", 20, NULL);
}

/* The real mutex keeps its type: relock and foreign unlock of an
 * error-checking mutex fail as without the shim. */
static void test_errorcheck_kept(void **state)
{
    char want[128];

    (void)state;
    snprintf(want, sizeof want, "relock %d foreign %d unlock 0 again %d",
             EDEADLK, EPERM, EPERM);
    target_line("errcheck", NULL, "relock ", 20, want);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- errno -------------------------------------------------------------------------- */

static void test_errno_kept(void **state)
{
    char line[256];
    struct proc p;

    (void)state;
    start_target(&p, target_config(NULL), "errno", NULL, NULL);
    expect_line(&p, "errno changed ", line, sizeof line, 30);
    assert_exit(proc_end(&p, 20), 0);
    if (strcmp(line, "errno changed 0 of 22") != 0)
        fail_msg("%s; stdout: %s", line, p.obuf);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- out of memory ----------------------------------------------------------------- */

/* With the address space exhausted (RLIMIT_AS), pthread_mutex_init of an
 * init_site mutex fails with ENOMEM, and the lock calls of mapped locks
 * with EAGAIN, instead of an abort; with memory back both work, and a hold
 * whose reply the shortage lost is given back (no key is left).  The
 * configuration says on_unavailable = fail: out of memory, the library may
 * also answer as if Redis could not be reached, and then block would
 * wait for memory to come back. */
static void test_out_of_memory(void **state)
{
    char saved[sizeof redis_section], line[256], want[128], *at;
    const char *cfg;
    struct proc p;

    (void)state;
    if (child_env[0])
        skip(); /* the sanitizer's allocator dies rather than fail */
    memcpy(saved, redis_section, sizeof saved);
    at = strstr(redis_section, "on_unavailable = block");
    assert_non_null(at);
    memcpy(at + strlen("on_unavailable = "), "fail ", 5);
    cfg = target_config(NULL);
    memcpy(redis_section, saved, sizeof saved);
    start_target(&p, cfg, "nomem", NULL, NULL);
    expect_line(&p, "nomem ", line, sizeof line, 60);
    snprintf(want, sizeof want, "nomem init %d lock %d try %d rd %d wait %d",
             ENOMEM, EAGAIN, EAGAIN, EAGAIN, EAGAIN);
    assert_string_equal(line, want);
    expect_line(&p, "back ", line, sizeof line, 30);
    assert_string_equal(line, "back init 0 lock 0 global 0");
    assert_exit(proc_end(&p, 20), 0);
    assert_int_equal(prefixed_keys(), 0);
}

/* The target says it holds lock (one hold in Redis); told to, it lets go,
 * exits 0 and leaves no key. */
static void held_then_released(struct proc *p, const char *lock)
{
    char line[256];

    expect_line(p, "held", line, sizeof line, 20);
    assert_int_equal(hlen(lock), 1);
    proc_send(p, "\n");
    expect_line(p, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(p, 20), 0);
    assert_int_equal(key_exists(lock), 0);
}

/* ---- condition variables -------------------------------------------------------- */

/* A wait on a condition variable with a mapped mutex: the target in mode
 * (on lock, ms as start_target) says "<said>rc <rc> helper 0", then holds
 * the lock until told to let go.
 *   test_cond_wait: pthread_cond_wait lets go of the distributed lock too
 *     (another thread, another owner for Redis, takes the mutex meanwhile)
 *     and has it back when it returns;
 *   test_cond_timedwait, test_cond_clockwait: the same when the wait times
 *     out. */
struct cond_case {
    const char *mode, *lock, *ms, *said;
    int rc;
};

static void test_cond(void **state)
{
    const struct cond_case *c = *state;
    const char *cfg = target_config(NULL);
    char line[256], want[64];
    struct proc p;

    start_target(&p, cfg, c->mode, c->lock, c->ms);
    expect_line(&p, c->said, line, sizeof line, 30);
    snprintf(want, sizeof want, "%src %d helper 0", c->said, c->rc);
    assert_string_equal(line, want);
    held_then_released(&p, c->lock);
}

/* ---- read-write locks ---------------------------------------------------------- */

static void test_rwlock_mapped(void **state)
{
    const char *cfg = target_config(NULL);
    char line[256];
    struct proc holder;

    (void)state;
    /* a writer in one process keeps out readers and writers of another */
    start_target(&holder, cfg, "wrhold", "catalog", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);
    assert_int_equal(key_exists("catalog"), 1);
    expect_rc_on(cfg, "tryrd", "catalog", NULL, EBUSY, -1, -1);
    expect_rc_on(cfg, "trywr", "catalog", NULL, EBUSY, -1, -1);
    expect_rc_on(cfg, "timedrd", "catalog", "400", ETIMEDOUT, 390, 5000);
    expect_rc_on(cfg, "clockwr", "catalog", "300", ETIMEDOUT, 290, 5000);
    proc_send(&holder, "\n");
    expect_line(&holder, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(&holder, 20), 0);
    assert_int_equal(key_exists("catalog"), 0);

    /* a reader lets readers in, keeps writers out */
    start_target(&holder, cfg, "rdhold", "catalog", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);
    assert_int_equal(key_exists("catalog"), 1);
    expect_rc_on(cfg, "tryrd", "catalog", NULL, 0, -1, -1);
    expect_rc_on(cfg, "clockrd", "catalog", "300", 0, 0, 5000);
    expect_rc_on(cfg, "trywr", "catalog", NULL, EBUSY, -1, -1);
    expect_rc_on(cfg, "timedwr", "catalog", "400", ETIMEDOUT, 390, 5000);
    proc_send(&holder, "\n");
    expect_line(&holder, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(&holder, 20), 0);
    expect_rc_on(cfg, "timedwr", "catalog", "400", 0, 0, 5000);
    assert_int_equal(key_exists("catalog"), 0);

    /* one initialised by an init_site function */
    start_target(&holder, cfg, "wrhold", "heapcat", NULL);
    expect_line(&holder, "held", line, sizeof line, 20);
    assert_int_equal(key_exists("heapcat:0"), 1);
    proc_send(&holder, "\n");
    expect_line(&holder, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(&holder, 20), 0);
    assert_int_equal(prefixed_keys(), 0);
}

/* ---- Redis unavailable ------------------------------------------------------------ */

/* A configuration with Redis on port (where nobody listens) and the given
 * on_unavailable. */
static const char *down_config(int port, const char *on_unavailable)
{
    return write_file("down.ini",
                      "[redis]\nurl = redis://127.0.0.1:%d\n"
                      "timeout_ms = 300\non_unavailable = %s\n"
                      "[mutex %sstatic]\n"
                      "match = symbol preload_target.c:g_static_lock\n",
                      port, on_unavailable, pfx);
}

static void test_on_unavailable(void **state)
{
    char line[256];
    const char *cfg;
    struct proc p;
    int port = tu_free_port(), rc = -1, st;
    double ms = -1;

    (void)state;
    assert_true(port > 0);
    /* fail: the call fails with EAGAIN */
    cfg = down_config(port, "fail");
    target_says(&p, cfg, "timed", "static", "500", "rc ", 30, line,
                sizeof line);
    sscanf(line, "rc %d", &rc);
    assert_int_equal(rc, EAGAIN);
    assert_contains(p.ebuf, "on_unavailable = fail");

    /* block: waits for Redis until the deadline */
    cfg = down_config(port, "block");
    target_says(&p, cfg, "timed", "static", "800", "rc ", 30, line,
                sizeof line);
    sscanf(line, "rc %d ms %lf", &rc, &ms);
    assert_int_equal(rc, ETIMEDOUT);
    assert_true(ms >= 790);
    assert_contains(p.ebuf, "waiting for Redis");

    /* abort */
    cfg = down_config(port, "abort");
    start_target(&p, cfg, "try", "static", NULL);
    st = proc_end(&p, 30);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    assert_contains(p.ebuf, "on_unavailable = abort");
}

/* ---- set-up -------------------------------------------------------------------- */

static void built(char *buf, const char *top, const char *rel)
{
    char tmp[PATH_MAX];

    snprintf(tmp, sizeof tmp, "%s/%s", top, rel);
    if (!realpath(tmp, buf))
        buf[0] = '\0';
}

/* The sanitizer runtime the shim pulls in (through libdistlock.so), if
 * any, from ldd's "libasan.so.8 => /path (0x...)". */
static void find_sanitizer(void)
{
    static char preload[PATH_MAX + 16];
    char cmd[PATH_MAX + 32], line[PATH_MAX + 64], lib[PATH_MAX];
    FILE *f;

    snprintf(cmd, sizeof cmd, "ldd '%s' 2>/dev/null", shim);
    f = popen(cmd, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "libasan.so") &&
            sscanf(line, " %*s => %4095s", lib) == 1) {
            snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
            child_env[0] = preload;
            child_env[1] = "ASAN_OPTIONS=detect_leaks=0";
        }
    }
    pclose(f);
}

static int group_setup(void **state)
{
    const char *top = getenv("top_builddir");
    const char *tmp = getenv("TMPDIR");
    char env[PATH_MAX + 32];

    (void)state;
    signal(SIGPIPE, SIG_IGN);
    if (!top || !*top)
        top = ".";
    built(run_bin, top, "tools/distlock-run");
    built(shim, top, ".libs/libdistlock_preload.so");
    built(ledger_bin, top, "tests/legacy_ledger");
    built(repair_bin, top, "tests/legacy_repair");
    built(static_bin, top, "tests/legacy_ledger_static");
    built(target_bin, top, "tests/preload_target");
    built(fork_bin, top, "tests/preload_fork");
    built(condfork_bin, top, "tests/preload_condfork");
    built(other_lib, top, "tests/.libs/libpreload_lib.so");
    if (!run_bin[0] || !shim[0] || !ledger_bin[0] || !target_bin[0] ||
        !fork_bin[0] || !condfork_bin[0] || !repair_bin[0]) {
        fprintf(stderr,
                "test_preload: build the shim, distlock-run and the "
                "test programs first (top_builddir=%s)\n",
                top);
        return -1;
    }
    snprintf(dir, sizeof dir, "%s/distlock-preload-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return -1;
    snprintf(env, sizeof env, "DISTLOCK_PRELOAD_LIB=%s", shim);
    putenv(strdup(env));
    unsetenv("LD_PRELOAD");
    unsetenv("DISTLOCK_PRELOAD_CONFIG");
    snprintf(pfx, sizeof pfx, "pl%ld-", (long)getpid());
    find_sanitizer();
    if (tu_redis_start(&r) != 0)
        return -1;
    snprintf(redis_section, sizeof redis_section,
             "[redis]\n"
             "url = %s     ; as DISTLOCK_URL\n"
             "lease_ms = 0                     ; 0 = watchdog\n"
             "on_unavailable = block           ; block | fail | abort\n"
             "on_lease_lost = abort            ; abort | log\n\n",
             r.url_tcp);
    return 0;
}

static int group_teardown(void **state)
{
    char cmd[PATH_MAX + 16];

    (void)state;
    tu_redis_stop(&r);
    if (dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_preload: could not remove %s\n", dir);
    }
    return 0;
}

int main(void)
{
    static struct cond_case cond_wait = { "condwait", "static", NULL, "woke ",
                                          0 },
                            cond_timed = { "condtimed", "bank", "600",
                                           "timedout ", ETIMEDOUT },
                            cond_clock = { "condclock", "bank", "600",
                                           "timedout ", ETIMEDOUT };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legacy_four_copies_exact),
        cmocka_unit_test(test_legacy_without_shim_runs),
        cmocka_unit_test(test_legacy_robust_repair),
        cmocka_unit_test(test_config_errors_name_file_and_line),
        cmocka_unit_test(test_config_many_keys_then_second_match),
        cmocka_unit_test(test_config_nul_byte),
        cmocka_unit_test(test_config_endless_file),
        cmocka_unit_test(test_config_secret_not_echoed),
        cmocka_unit_test(test_config_distinct_qualifiers_not_duplicate),
        cmocka_unit_test(test_config_missing_file),
        cmocka_unit_test(test_unresolved_name_refused),
        cmocka_unit_test(test_unresolved_name_warned),
        cmocka_unit_test(test_corrupted_symtab_reported),
        cmocka_unit_test(test_static_binary_refused),
        cmocka_unit_test(test_secure_execution_refused),
        cmocka_unit_test(test_split_shim_path_refused),
        cmocka_unit_test(test_unloadable_shim_refused),
        cmocka_unit_test(test_not_the_shim_refused),
        cmocka_unit_test(test_timeout_out_of_range_refused),
        cmocka_unit_test(test_every_match_kind),
        cmocka_unit_test(test_unmapped_mutex_untouched),
        cmocka_unit_test(test_plain_ld_preload),
        cmocka_unit_test(test_start_up_from_a_library_constructor),
        cmocka_unit_test(test_children_stay_unmapped),
        cmocka_unit_test(test_program_key),
        cmocka_unit_test(test_fork_with_init_site),
        cmocka_unit_test(test_library_calls_bypass_shim),
        cmocka_unit_test(test_mutex_and_cond_share_init_site),
        cmocka_unit_test(test_cond_made_again_after_fork),
        cmocka_unit_test(test_symbol_versions_intercepted),
        cmocka_unit_test(test_trylock_and_timedlock),
        cmocka_unit_test(test_errorcheck_kept),
        cmocka_unit_test(test_pthread_exit_in_main_ends),
        param_test(test_cond_wait, test_cond, &cond_wait, NULL),
        param_test(test_cond_timedwait, test_cond, &cond_timed, NULL),
        param_test(test_cond_clockwait, test_cond, &cond_clock, NULL),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_errno_kept),
        cmocka_unit_test(test_rwlock_mapped),
        cmocka_unit_test(test_on_unavailable),
    };

    filter_from_env("TEST_PRELOAD_FILTER");
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
