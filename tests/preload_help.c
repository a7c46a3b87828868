/*
 * preload_help: the LD_PRELOAD tests' files, child processes, Redis look-ups,
 * configurations and group set-up (preload_help.h).
 */
#define _GNU_SOURCE
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

#include "preload_help.h"
#include "testhelp.h"

tu_redis_t pl_redis;
char pl_dir[256];
char run_bin[PATH_MAX], shim[PATH_MAX], ledger_bin[PATH_MAX];
char repair_bin[PATH_MAX], static_bin[PATH_MAX], target_bin[PATH_MAX];
char fork_bin[PATH_MAX], condfork_bin[PATH_MAX], other_lib[PATH_MAX];
char pfx[64];
/* In a sanitizer build, libdistlock.so (and so the shim) needs the
 * sanitizer runtime, which must be preloaded first into the programs built
 * without it. */
char *child_env[4];

/* ---- files ---------------------------------------------------------------- */

void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", pl_dir, name);
}

const char *write_file(const char *name, const char *fmt, ...)
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

long read_count(const char *path)
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

int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* ---- child processes -------------------------------------------------------- */

/* envp: extra "NAME=VALUE" settings (NULL-terminated), or NULL */
void proc_start(struct proc *p, char *const argv[], char *const envp[])
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
void proc_pump(struct proc *p, int ms)
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
int proc_line(struct proc *p, char *line, size_t len, double timeout)
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

void proc_send(struct proc *p, const char *s)
{
    assert_int_equal(write(p->in, s, strlen(s)), (ssize_t)strlen(s));
}

/* Closes stdin, reads the rest, waits (killing it after timeout s).
 * Returns the wait status. */
int proc_end(struct proc *p, double timeout)
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
int proc_run(struct proc *p, char *const argv[], char *const envp[],
             double timeout)
{
    proc_start(p, argv, envp);
    return proc_end(p, timeout);
}

/* ---- Redis ---------------------------------------------------------------------- */

char *lockname(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s%s", pfx, name);
    return buf;
}

long long hlen(const char *name)
{
    char k[256];
    return tu_cmd_int(&pl_redis, "HLEN", lockname(k, sizeof k, name), NULL);
}

long long key_exists(const char *name)
{
    char k[256];
    return tu_cmd_int(&pl_redis, "EXISTS", lockname(k, sizeof k, name), NULL);
}

/* How many keys carry this run's prefix. */
long long prefixed_keys(void)
{
    char pat[128];
    redisReply *x;
    long long n;

    snprintf(pat, sizeof pat, "%s*", pfx); /* the locks, not their counters */
    x = tu_cmd(&pl_redis, "KEYS", pat, NULL);
    assert_non_null(x);
    n = x->type == REDIS_REPLY_ARRAY ? (long long)x->elements : -1;
    freeReplyObject(x);
    return n;
}

/* ---- configurations --------------------------------------------------------------- */

char redis_section[512];

/* A configuration mapping every kind of mutex preload_target has. */
const char *target_config(const char *extra)
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

/* distlock-run --config CFG -- preload_target ARGS... */
void start_target(struct proc *p, const char *cfg, const char *a1,
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

void expect_line(struct proc *p, const char *prefix, char *line, size_t len,
                 double timeout)
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
void target_says(struct proc *p, const char *cfg, const char *a1,
                 const char *a2, const char *a3, const char *prefix,
                 double secs, char *line, size_t len)
{
    start_target(p, cfg, a1, a2, a3);
    expect_line(p, prefix, line, len, secs);
    assert_exit(proc_end(p, 20), 0);
}

/* target_says on the tests' usual configuration; the line, when want is
 * not NULL, is want. */
void target_line(const char *a1, const char *a2, const char *prefix,
                 double secs, const char *want)
{
    char line[256];
    struct proc p;

    target_says(&p, target_config(NULL), a1, a2, NULL, prefix, secs, line,
                sizeof line);
    if (want)
        assert_string_equal(line, want);
}

/* ---- the ledger program, told to leave a marker ------------------------------ */

static void marker_path(char *buf, size_t len)
{
    path_in(buf, len, "not-started");
}

int run_marked(struct proc *p, const char *cfg, const char *opt,
               const char *val, const char *prog, double timeout)
{
    char marker[PATH_MAX];

    marker_path(marker, sizeof marker);
    unlink(marker);
    if (!opt)
        return proc_run(p,
                        ARGV(run_bin, "--config", (char *)cfg, "--",
                             (char *)prog, marker, "1", "1"),
                        NULL, timeout);
    return proc_run(p,
                    ARGV(run_bin, "--config", (char *)cfg, (char *)opt,
                         (char *)val, "--", (char *)prog, marker, "1", "1"),
                    NULL, timeout);
}

int marker_made(void)
{
    char marker[PATH_MAX];

    marker_path(marker, sizeof marker);
    return exists(marker);
}

void refused(const char *cfg_text, const char *expect, const char *secret)
{
    char needle[PATH_MAX + 300];
    const char *cfg =
        write_file(secret ? "secret.ini" : "bad.ini", "%s", cfg_text);
    struct proc p;

    assert_exit(run_marked(&p, cfg, NULL, NULL, ledger_bin, 30), 78);
    snprintf(needle, sizeof needle, "%s%s", cfg, expect);
    assert_contains(p.ebuf, needle);
    if (secret && (strstr(p.ebuf, secret) || strstr(p.obuf, secret)))
        fail_msg("the secret '%s' was echoed: %s%s", secret, p.obuf, p.ebuf);
    assert_false(marker_made());
}

void expect_refused(const char *cfg_text, const char *expect)
{
    refused(cfg_text, expect, NULL);
}

const char *ok_config(void)
{
    return write_file("ok.ini",
                      "%s[mutex %sledger]\nmatch = symbol "
                      "g_ledger_lock\n",
                      redis_section, pfx);
}

void copy_file(const char *from, const char *to, mode_t mode)
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

/* ---- preload_target's answers ------------------------------------------------- */

void expect_rc_on(const char *cfg, const char *mode, const char *which,
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

void expect_rc(const char *cfg, const char *mode, const char *ms, int rc,
               double min_ms, double max_ms)
{
    expect_rc_on(cfg, mode, "static", ms, rc, min_ms, max_ms);
}

void let_go(struct proc *p)
{
    char line[256];

    proc_send(p, "\n");
    expect_line(p, "released 0", line, sizeof line, 20);
    assert_exit(proc_end(p, 20), 0);
}

void held_then_released(struct proc *p, const char *lock)
{
    char line[256];

    expect_line(p, "held", line, sizeof line, 20);
    assert_int_equal(hlen(lock), 1);
    let_go(p);
    assert_int_equal(key_exists(lock), 0);
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

int pl_group_setup(void **state)
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
                "test_preload_*: build the shim, distlock-run and the "
                "test programs first (top_builddir=%s)\n",
                top);
        return -1;
    }
    snprintf(pl_dir, sizeof pl_dir, "%s/distlock-preload-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(pl_dir))
        return -1;
    snprintf(env, sizeof env, "DISTLOCK_PRELOAD_LIB=%s", shim);
    putenv(strdup(env));
    unsetenv("LD_PRELOAD");
    unsetenv("DISTLOCK_PRELOAD_CONFIG");
    snprintf(pfx, sizeof pfx, "pl%ld-", (long)getpid());
    find_sanitizer();
    if (tu_redis_start(&pl_redis) != 0)
        return -1;
    snprintf(redis_section, sizeof redis_section,
             "[redis]\n"
             "url = %s     ; as DISTLOCK_URL\n"
             "lease_ms = 0                     ; 0 = watchdog\n"
             "on_unavailable = block           ; block | fail | abort\n"
             "on_lease_lost = abort            ; abort | log\n\n",
             pl_redis.url_tcp);
    return 0;
}

int pl_group_teardown(void **state)
{
    char cmd[PATH_MAX + 16];

    (void)state;
    tu_redis_stop(&pl_redis);
    if (pl_dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", pl_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_preload_*: could not remove %s\n", pl_dir);
    }
    return 0;
}
