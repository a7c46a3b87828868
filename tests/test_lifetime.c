/*
 * test_lifetime: the library's threads and the life of the process.  A
 * pthread program ends when its last thread does, main's pthread_exit
 * included; the renewal and pub/sub threads must not keep it going, nor
 * leave it deaf to a SIGTERM (the Open POSIX test sem_init/3-1 hung so:
 * lock, unlock, pthread_exit).  And while a thread of the program lives,
 * its holds must go on being renewed.
 *
 * Each case is this program run again (posix_spawn, the case in
 * TEST_LIFETIME_CASE), a client of the group's private redis-server: its
 * main thread does its part and calls pthread_exit.  The parent waits for
 * it within a bound that holds on a loaded 2-core machine (the library's
 * threads look once a second).
 *
 * Not under ThreadSanitizer: its runtime keeps a thread of its own, so a
 * process of it never runs out of threads.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

static const struct fx_settings defaults = { 0, 0, 0 };
static tu_redis_t r;

#define BOUND_S  20.0   /* for a child to end once it should */
#define LEASE_MS 1500UL /* the "renewed" case's watchdog lease */

/* ---- the child: this program run again ----------------------------------- */

/* Exit statuses of a child that could not do its part. */
#define CH_SETUP 90 /* a call before pthread_exit failed */
#define CH_LOST  91 /* the "renewed" case's hold was lost */

static dist_mutex_t m;
static dist_cond_t cv;

static void *sleeper(void *arg)
{
    (void)arg;
    tu_sleep_ms(600000);
    return NULL;
}

/* Ends when the parent closes the child's stdin. */
static void *reader(void *arg)
{
    char c;

    (void)arg;
    while (read(0, &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* "renewed": the program's other thread keeps the lock for more than
 * three leases after main is gone, then lets it go; its unlock says
 * whether it was renewed all along. */
static void *keeper(void *arg)
{
    (void)arg;
    if (dist_mutex_lock(&m) != 0)
        exit(CH_SETUP);
    tu_sleep_ms(LEASE_MS * 3 + 500);
    exit(dist_mutex_unlock(&m) == 0 ? 0 : CH_LOST);
}

/* Tells the parent that main is about to call pthread_exit. */
static void ready(void)
{
    if (write(1, "r", 1) != 1)
        exit(CH_SETUP);
}

static int child(const char *what)
{
    const char *name = getenv("TEST_LIFETIME_NAME");
    struct timespec soon;
    pthread_t th;
    sigset_t term;

    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (!name || dist_mutex_init(&m, name, NULL) != 0)
        return CH_SETUP;
    if (strcmp(what, "renewed") == 0) {
        if (pthread_create(&th, NULL, keeper, NULL) != 0)
            return CH_SETUP;
        ready();
        pthread_exit(NULL);
    }
    /* the case of sem_init/3-1: a lock taken and given back */
    if (dist_mutex_lock(&m) != 0 || dist_mutex_unlock(&m) != 0)
        return CH_SETUP;
    if (strcmp(what, "held") == 0) {
        /* a hold (renewal thread) and a wait on a condition (pub/sub
         * thread, its channel subscribed) left behind */
        soon = fx_clock_in(CLOCK_REALTIME, 0.3);
        if (dist_cond_init(&cv, name, NULL) != 0 ||
            dist_mutex_lock(&m) != 0 ||
            dist_cond_timedwait(&cv, &m, &soon) != ETIMEDOUT)
            return CH_SETUP;
    } else if (strcmp(what, "sleeper") == 0) {
        /* a thread of the program still there to take the signal */
        if (pthread_create(&th, NULL, sleeper, NULL) != 0)
            return CH_SETUP;
    } else if (strcmp(what, "pending") == 0) {
        /* every thread left blocks SIGTERM (the library's, and the
         * program's last, which ends when the parent says) */
        pthread_sigmask(SIG_BLOCK, &term, NULL);
        if (pthread_create(&th, NULL, reader, NULL) != 0)
            return CH_SETUP;
    } else if (strcmp(what, "plain") != 0) {
        return CH_SETUP;
    }
    ready();
    pthread_exit(NULL);
}

/* ---- the parent ---------------------------------------------------------------- */

struct run {
    pid_t pid;
    int out; /* the child's stdout */
    int in;  /* its stdin: closed, its reader ends */
    int status;
    double ended; /* s from main's pthread_exit to the end */
};

/* Starts the case what with lock name name; returns once the child's main
 * is about to call pthread_exit. */
static void run_start(struct run *c, const char *what, const char *name,
                      const char *watchdog)
{
    static char vars[5][1024];
    char *env[300], self[4096], *argv[2] = { self, NULL };
    extern char **environ;
    posix_spawn_file_actions_t fa;
    ssize_t len;
    size_t n = 0, i;
    int fds[2], ins[2];

    snprintf(vars[0], sizeof vars[0], "TEST_LIFETIME_CASE=%s", what);
    snprintf(vars[1], sizeof vars[1], "TEST_LIFETIME_NAME=%s", name);
    snprintf(vars[2], sizeof vars[2], "DISTLOCK_URL=%s", r.url_unix);
    snprintf(vars[3], sizeof vars[3], "DISTLOCK_WATCHDOG_MS=%s", watchdog);
    /* what the program leaves behind at its end is not a leak to report */
    snprintf(vars[4], sizeof vars[4], "ASAN_OPTIONS=%s%sdetect_leaks=0",
             getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "",
             getenv("ASAN_OPTIONS") ? ":" : "");
    for (i = 0; i < 5; i++)
        env[n++] = vars[i];
    for (i = 0; environ[i] && n < 299; i++)
        if (strncmp(environ[i], "ASAN_OPTIONS=", 13) != 0)
            env[n++] = environ[i];
    env[n] = NULL;
    len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = 0;
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(pipe(ins), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, ins[0], 0);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, ins[1]);
    fflush(NULL);
    assert_int_equal(posix_spawn(&c->pid, self, &fa, NULL, argv, env), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    close(ins[0]);
    c->out = fds[0];
    c->in = ins[1];
    if (read_byte(c->out, (int)(BOUND_S * 1000)) != 'r') {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        close(c->out);
        close(c->in);
        fail_msg("case %s: the child did not get as far as pthread_exit",
                 what);
    }
}

/* What each thread of pid is doing and which signals it blocks and has
 * pending, on stderr: what a process that did not end was left with. */
static void print_tasks(pid_t pid)
{
    static const char *const want[] = { "Name:",   "State:",  "SigPnd:",
                                        "ShdPnd:", "SigBlk:", "SigIgn:" };
    char path[300], line[256];
    struct dirent *e;
    DIR *d;
    FILE *f;
    size_t i;

    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    if (!(d = opendir(path)))
        return;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/status", (int)pid,
                 e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        print_error("thread %s:", e->d_name);
        while (fgets(line, sizeof line, f))
            for (i = 0; i < sizeof want / sizeof want[0]; i++)
                if (strncmp(line, want[i], strlen(want[i])) == 0)
                    print_error(" %.*s", (int)strcspn(line, "\n"), line);
        print_error("\n");
        fclose(f);
    }
    closedir(d);
}

/* Waits for the child's end, SIGKILL after BOUND_S.  Returns 0, or -1
 * when it had to be killed. */
static int run_wait(struct run *c, double t0)
{
    double end = t0 + BOUND_S;
    int killed = 0;

    if (c->in >= 0)
        close(c->in);
    c->in = -1;
    while (waitpid(c->pid, &c->status, WNOHANG) == 0) {
        if (tu_now() > end && !killed) {
            print_tasks(c->pid);
            kill(c->pid, SIGKILL);
            killed = 1;
        }
        tu_sleep_ms(20);
    }
    c->ended = tu_now() - t0;
    close(c->out);
    return killed ? -1 : 0;
}

/* Whether pid's first thread has ended (state Z in /proc/PID/stat). */
static int main_gone(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return 1;
    p = fgets(buf, sizeof buf, f);
    fclose(f);
    return !p || ((p = strrchr(buf, ')')) && p[1] && p[2] == 'Z');
}

static void wait_main_gone(struct run *c)
{
    double end = tu_now() + BOUND_S;

    while (!main_gone(c->pid) && tu_now() < end)
        tu_sleep_ms(10);
}

/* The case what: the child must end by itself within BOUND_S; its status
 * in *st. */
static void ends_by_itself(const char *what, const char *tag, int *st)
{
    char name[256];
    struct run c;
    double t0;

    test_lock_name(name, sizeof name, "test_lifetime", what, tag);
    run_start(&c, what, name, "30000");
    t0 = tu_now();
    if (run_wait(&c, t0) != 0)
        fail_msg("case %s: the process was still there %.0f s after its "
                 "main thread called pthread_exit (killed)",
                 what, BOUND_S);
    print_message("case %s: ended %.3f s after main's pthread_exit\n", what,
                  c.ended);
    *st = c.status;
    tu_cmd_int(&r, "DEL", name, NULL);
}

/* ThreadSanitizer keeps a thread of its own: the process cannot end by
 * its program's threads ending. */
#define TSAN_WHY "it keeps a thread of its own"

/* lock, unlock, pthread_exit: the process ends as without the library,
 * with status 0.  The case ("plain", or "held": with a hold kept and a
 * condition's channel subscribed, both of the library's threads run when
 * main goes) is the test's state. */
static void test_pthread_exit_ends_process(void **state)
{
    int st;

    SKIP_UNDER_TSAN(TSAN_WHY);
    ends_by_itself(*state, "m", &st);
    if (!child_exit_ok(st, 0))
        fail_msg("status %#x, not exit 0", st);
}

/* A SIGTERM for the process while main is gone ends it.  The case is the
 * test's state: "sleeper", a thread of the program sleeps; "pending",
 * every thread blocks it: the program's last thread then ends.  The
 * library's threads, the last left, let through what the thread that
 * started them did (SIGTERM, open in main when it locked): the signal
 * ends the process rather than staying pending for ever. */
static void test_sigterm_ends_process(void **state)
{
    const char *what = *state;
    char name[256];
    struct run c;
    double t0;

    SKIP_UNDER_TSAN(TSAN_WHY);
    test_lock_name(name, sizeof name, "test_lifetime", __func__, what);
    run_start(&c, what, name, "30000");
    wait_main_gone(&c);
    t0 = tu_now();
    kill(c.pid, SIGTERM);
    if (strcmp(what, "pending") == 0) {
        tu_sleep_ms(100);
        if (waitpid(c.pid, &c.status, WNOHANG) != 0)
            fail_msg("status %#x: the process ended while a thread of it "
                     "was still there",
                     c.status);
        t0 = tu_now(); /* run_wait closes the reader's stdin */
    }
    if (run_wait(&c, t0) != 0)
        fail_msg("the process was still there %.0f s after SIGTERM (killed)",
                 BOUND_S);
    if (!WIFSIGNALED(c.status) || WTERMSIG(c.status) != SIGTERM)
        fail_msg("status %#x, not the end by SIGTERM", c.status);
}

/* main gone, a thread of the program keeps a lock for more than three
 * leases: the process lives on and the hold is renewed all along (its
 * unlock gives 0, not EPERM). */
static void test_renewed_while_a_thread_lives(void **state)
{
    char name[256], lease[24];
    struct run c;

    (void)state;
    test_lock_name(name, sizeof name, "test_lifetime", __func__, "m");
    snprintf(lease, sizeof lease, "%lu", LEASE_MS);
    run_start(&c, "renewed", name, lease);
    if (run_wait(&c, tu_now()) != 0)
        fail_msg("the keeper did not end within %.0f s (killed)", BOUND_S);
    if (child_exit_ok(c.status, CH_LOST))
        fail_msg("the hold was lost while its thread lived on");
    if (!child_exit_ok(c.status, 0))
        fail_msg("status %#x, not exit 0", c.status);
    if (c.ended < LEASE_MS * 3 / 1000.0)
        fail_msg("ended after %.3f s, before its hold was let go", c.ended);
    tu_cmd_int(&r, "DEL", name, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        { "test_pthread_exit_ends_process", test_pthread_exit_ends_process,
          NULL, NULL, "plain" },
        { "test_pthread_exit_with_hold_ends_process",
          test_pthread_exit_ends_process, NULL, NULL, "held" },
        { "test_sigterm_after_pthread_exit", test_sigterm_ends_process, NULL,
          NULL, "sleeper" },
        { "test_pending_sigterm_ends_process", test_sigterm_ends_process,
          NULL, NULL, "pending" },
        cmocka_unit_test(test_renewed_while_a_thread_lives),
    };
    const char *what = getenv("TEST_LIFETIME_CASE");

    if (what)
        return child(what);
    return fx_run_group(tests, &r, &defaults, "TEST_LIFETIME_FILTER");
}
