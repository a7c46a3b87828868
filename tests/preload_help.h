/*
 * preload_help: what the LD_PRELOAD tests (test_preload_*.c) share.
 *
 * The programs under test know nothing of distlock: legacy_ledger (threads
 * of several processes add to a counter in a file under a static mutex,
 * taking turns on a condition variable), legacy_repair (a robust mutex),
 * preload_target (one mutex of every kind a configuration can map, driven
 * through its arguments and stdin/stdout), preload_fork and
 * preload_condfork.  The tests start them through distlock-run (or with a
 * bare LD_PRELOAD), read what they print, and look in Redis for the locks
 * they hold.  Each test program is single-threaded: all asserts on the
 * main thread.  Time bounds are generous bounds, never exact timings.
 *
 * The group set-up starts one private redis-server, makes a private
 * temporary directory and finds the programs under $top_builddir (set by
 * make check).
 */
#ifndef DISTLOCK_PRELOAD_HELP_H
#define DISTLOCK_PRELOAD_HELP_H

#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "harness_server.h"

extern tu_redis_t pl_redis;
extern char pl_dir[256];            /* private temp directory */
extern char run_bin[PATH_MAX];      /* tools/distlock-run */
extern char shim[PATH_MAX];         /* .libs/libdistlock_preload.so */
extern char ledger_bin[PATH_MAX];   /* tests/legacy_ledger */
extern char repair_bin[PATH_MAX];   /* tests/legacy_repair */
extern char static_bin[PATH_MAX];   /* tests/legacy_ledger_static, or "" */
extern char target_bin[PATH_MAX];   /* tests/preload_target */
extern char fork_bin[PATH_MAX];     /* tests/preload_fork */
extern char condfork_bin[PATH_MAX]; /* tests/preload_condfork */
extern char other_lib[PATH_MAX];    /* a library that is not the shim */
extern char pfx[64];                /* lock-name prefix of this run */
extern char *child_env[4];          /* settings every child gets */
extern char redis_section[512];     /* [redis] of every configuration */

/* ---- files ---------------------------------------------------------------- */

void path_in(char *buf, size_t len, const char *name);
/* Writes pl_dir/NAME; returns its path (static storage of 8 rotating
 * slots). */
const char *write_file(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The number on the first line of path, or -1 when it cannot be read. */
long read_count(const char *path);
int exists(const char *path);
void copy_file(const char *from, const char *to, mode_t mode);

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
void proc_start(struct proc *p, char *const argv[], char *const envp[]);
/* Reads what is there (or waits up to ms). */
void proc_pump(struct proc *p, int ms);
/* The next line of stdout, within timeout seconds.  0, or -1. */
int proc_line(struct proc *p, char *line, size_t len, double timeout);
void proc_send(struct proc *p, const char *s);
/* Closes stdin, reads the rest, waits (killing it after timeout s).
 * Returns the wait status. */
int proc_end(struct proc *p, double timeout);
/* Runs argv to its end; stdout and stderr in p.  Returns the wait status. */
int proc_run(struct proc *p, char *const argv[], char *const envp[],
             double timeout);

#define ARGV(...) ((char *const[]){ __VA_ARGS__, NULL })

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

char *lockname(char *buf, size_t len, const char *name);
long long hlen(const char *name);
long long key_exists(const char *name);
/* How many keys carry this run's prefix. */
long long prefixed_keys(void);

/* ---- the ledger program, told to leave a marker ------------------------------ */

/* distlock-run --config cfg [opt val] -- prog MARKER 1 1: the ledger
 * program (or a copy of it) posting once to pl_dir/not-started, which is
 * removed first.  Returns the wait status; the output in p. */
int run_marked(struct proc *p, const char *cfg, const char *opt,
               const char *val, const char *prog, double timeout);
/* Whether the program of run_marked ran (the marker is there). */
int marker_made(void);
/* distlock-run refuses the configuration cfg_text: exit 78, the error
 * names the file and says expect, the program never runs; and secret,
 * when not NULL, is nowhere in the output. */
void refused(const char *cfg_text, const char *expect, const char *secret);
void expect_refused(const char *cfg_text, const char *expect);
/* A configuration distlock-run accepts: the ledger program's lock. */
const char *ok_config(void);

/* ---- preload_target ------------------------------------------------------------- */

/* A configuration mapping every kind of mutex preload_target has, then
 * extra (may be NULL). */
const char *target_config(const char *extra);
/* distlock-run --config CFG -- preload_target a1 [a2 [a3]] */
void start_target(struct proc *p, const char *cfg, const char *a1,
                  const char *a2, const char *a3);
/* The next line starts with prefix, within timeout seconds; it is in
 * line. */
void expect_line(struct proc *p, const char *prefix, char *line, size_t len,
                 double timeout);
/* The target in mode a1 (a2, a3 as start_target) says a line starting
 * with prefix within secs, then exits 0; that line in line. */
void target_says(struct proc *p, const char *cfg, const char *a1,
                 const char *a2, const char *a3, const char *prefix,
                 double secs, char *line, size_t len);
/* target_says on the tests' usual configuration; the line, when want is
 * not NULL, is want. */
void target_line(const char *a1, const char *a2, const char *prefix,
                 double secs, const char *want);
/* The target in mode on lock `which` answers "rc RC ms MS": rc, and when
 * min_ms >= 0, MS in [min_ms, max_ms]. */
void expect_rc_on(const char *cfg, const char *mode, const char *which,
                  const char *ms, int rc, double min_ms, double max_ms);
/* expect_rc_on the static mutex. */
void expect_rc(const char *cfg, const char *mode, const char *ms, int rc,
               double min_ms, double max_ms);
/* Tells the target holding a lock to let go: it says "released 0" and
 * exits 0. */
void let_go(struct proc *p);
/* The target says it holds lock (one hold in Redis); told to, it lets go,
 * exits 0 and leaves no key. */
void held_then_released(struct proc *p, const char *lock);

/* ---- the group ------------------------------------------------------------------ */

int pl_group_setup(void **state);
int pl_group_teardown(void **state);

/* A program's main: the tests given, in the group, filtered by
 * $TEST_PRELOAD_FILTER. */
#define PL_MAIN(...)                                                         \
    int main(void)                                                           \
    {                                                                        \
        const struct CMUnitTest tests[] = { __VA_ARGS__ };                   \
                                                                             \
        filter_from_env("TEST_PRELOAD_FILTER");                              \
        return cmocka_run_group_tests(tests, pl_group_setup,                 \
                                      pl_group_teardown);                    \
    }

#endif
