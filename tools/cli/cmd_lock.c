/* cmd_lock.c: distlock lock NAME -- COMMAND: take the lock with the
 * library's public API, run COMMAND while holding it, release it.
 *
 * The main thread takes the lock, forks the command, waits for it and
 * releases the lock (the library's renewal thread keeps the lease alive
 * meanwhile).  A second thread takes SIGINT, SIGTERM and SIGHUP with
 * sigwaitinfo: while the main thread still waits for the lock it gives up
 * the wait and exits; while the command runs it passes them on.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h" /* dist__abandon_waits */
#include "tool.h"

enum { PH_WAIT, PH_ABANDON, PH_RUN, PH_DONE };

/* How long a signal waits for the main thread to give up its wait. */
#define ABANDON_WAIT_MS 1000

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase;
    pid_t child;
    int sig;           /* the last signal taken */
    sigset_t set;      /* the signals the thread takes */
    sigset_t old_mask; /* the mask the command gets */
    struct dist__names *names;
    char owner[64]; /* the main thread's owner */
    size_t owner_len;
    int fair;
    int mode; /* M_MUTEX, M_READ, M_WRITE */
    int prefer_writer;
} lk = { PTHREAD_MUTEX_INITIALIZER,
         PTHREAD_COND_INITIALIZER,
         PH_WAIT,
         0,
         0,
         { { 0 } },
         { { 0 } },
         NULL,
         { 0 },
         0,
         0,
         0,
         0 };

/* The descriptors open when distlock started: the command inherits these
 * and no others (the library's Redis sockets are not its business). */
static int *startup_fds;
static size_t n_startup_fds;

void note_startup_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        startup_fds =
            xrealloc(startup_fds, (n_startup_fds + 1) * sizeof *startup_fds);
        startup_fds[n_startup_fds++] = (int)fd;
    }
    closedir(d);
}

/* In the forked child: close-on-exec for every descriptor opened since
 * start-up.  Only async-signal-safe calls (getdents64 on the raw fd). */
static void cloexec_ours(void)
{
    char buf[2048];
    ssize_t n;
    int d = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (d < 0)
        return;
    while ((n = getdents64(d, buf, sizeof buf)) > 0) {
        ssize_t off = 0;
        while (off < n) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            const char *p = e->d_name;
            long fd = 0;
            size_t i;
            int known = 0;

            off += e->d_reclen;
            if (*p < '0' || *p > '9')
                continue;
            for (; *p >= '0' && *p <= '9'; p++)
                fd = fd * 10 + (*p - '0');
            if (fd <= 2 || fd == d)
                continue;
            for (i = 0; i < n_startup_fds; i++)
                if (startup_fds[i] == fd)
                    known = 1;
            if (!known)
                fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        }
    }
    close(d);
}

/* CLOCK_REALTIME secs from now, for the timed calls. */
static struct timespec realtime_in(double secs)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)secs;
    ts.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* The last resort when the main thread did not give up in time (Redis
 * slow to answer): the waiter leaves its queue (fair mutex; a writer of a
 * writer-preferring rwlock) from the signal thread's own link, with the
 * owner of the main thread.  The main thread may still be trying, and put
 * it back; then the queue's window ends it. */
static void cancel_wait(void)
{
    const char *pub = dist__publish_cmd();
    struct dist__link *on;
    redisReply *r = NULL;

    if (!lk.names)
        return;
    if (lk.fair) {
        static const enum dist__nm d[] = {
            DIST__N_QUEUE,
            DIST__N_TIMEOUT,
            DIST__N_CHAN,
        };
        struct dist__buf *k = dist__names_set(lk.names, d, 3);
        struct dist__buf kv[7] = {
            lk.names->name,
            { 0 },
            { 0 },
            { 0 },
            { lk.owner, lk.owner_len },
            { pub, strlen(pub) },
            { "0", 1 },
        };
        if (k) {
            memcpy(kv + 1, k, 3 * sizeof *k);
            dist__route_eval(rlimit, DIST__S_FAIR_CANCEL, 4, kv, 7, &r, &on);
        }
        free(k);
    } else if (lk.mode == M_WRITE) {
        static const enum dist__nm d[] = { DIST__N_RW_WRITERS,
                                           DIST__N_RWCHAN };
        struct dist__buf *k = dist__names_set(lk.names, d, 2);
        struct dist__buf kv[5] = {
            lk.names->name,       { 0 }, { 0 }, { lk.owner, lk.owner_len },
            { pub, strlen(pub) },
        };
        if (k) {
            memcpy(kv + 1, k, 2 * sizeof *k);
            dist__route_eval(rlimit, DIST__S_RWLOCK_CANCEL, 3, kv, 5, &r,
                             &on);
        }
        free(k);
    }
    freeReplyObject(r);
}

static void *signal_thread(void *arg)
{
    (void)arg;
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&lk.set, &si);

        if (sig < 0)
            continue;
        pthread_mutex_lock(&lk.mu);
        lk.sig = sig;
        if (lk.phase == PH_WAIT) {
            struct timespec until;

            lk.phase = PH_ABANDON;
            pthread_mutex_unlock(&lk.mu);
            /* The main thread's wait gives up at once and leaves its
             * queue itself, after its last try, so that no try of it can
             * queue it again after the leaving; or the lock was granted
             * meanwhile.  Either way it sees PH_ABANDON and exits. */
            dist__abandon_waits();
            until = realtime_in(ABANDON_WAIT_MS / 1000.0);
            pthread_mutex_lock(&lk.mu);
            while (lk.phase == PH_ABANDON &&
                   pthread_cond_timedwait(&lk.cv, &lk.mu, &until) == 0)
                ;
            if (lk.phase == PH_ABANDON) {
                pthread_mutex_unlock(&lk.mu);
                cancel_wait();
                fflush(stderr);
                _exit(128 + sig);
            }
        } else if (lk.phase == PH_RUN && lk.child > 0) {
            /* A signal the terminal sent reached the whole foreground
             * process group, the command too: do not send it twice. */
            if (si.si_code != SI_KERNEL)
                kill(lk.child, sig);
        }
        pthread_mutex_unlock(&lk.mu);
    }
    return NULL;
}

static void on_lost(const char *name, void *arg)
{
    (void)arg;
    fprintf(stderr,
            "distlock: warning: lost the lock '%s' (its lease ran out, "
            "it was forced, or Redis lost it) while the command runs\n",
            name);
}

/* The lock `lock` takes: a mutex (plain or fair) or one side of an rwlock. */
static struct {
    dist_mutex_t m;
    dist_rwlock_t rw;
} obj;

static int obj_init(const char *name, int prefer_writer)
{
    if (lk.mode == M_MUTEX) {
        dist_mutexattr_t a;
        dist_mutexattr_init(&a);
        dist_mutexattr_setfair(&a, lk.fair);
        return dist_mutex_init(&obj.m, name, &a);
    } else {
        dist_rwlockattr_t a;
        dist_rwlockattr_init(&a);
        dist_rwlockattr_setkind(&a, prefer_writer
                                        ? DIST_RWLOCK_PREFER_WRITER
                                        : DIST_RWLOCK_PREFER_READER);
        return dist_rwlock_init(&obj.rw, name, &a);
    }
}

/* abstime NULL: wait as long as it takes; try: never wait. */
static int obj_lock(int try, const struct timespec *abstime)
{
    switch (lk.mode) {
    case M_READ:
        return try       ? dist_rwlock_tryrdlock(&obj.rw)
               : abstime ? dist_rwlock_timedrdlock(&obj.rw, abstime)
                         : dist_rwlock_rdlock(&obj.rw);
    case M_WRITE:
        return try       ? dist_rwlock_trywrlock(&obj.rw)
               : abstime ? dist_rwlock_timedwrlock(&obj.rw, abstime)
                         : dist_rwlock_wrlock(&obj.rw);
    default:
        return try       ? dist_mutex_trylock(&obj.m)
               : abstime ? dist_mutex_timedlock(&obj.m, abstime)
                         : dist_mutex_lock(&obj.m);
    }
}

static int obj_unlock(void)
{
    return lk.mode == M_MUTEX ? dist_mutex_unlock(&obj.m)
                              : dist_rwlock_unlock(&obj.rw);
}

/* A read hold has no token of its own. */
static int obj_token(uint64_t *token)
{
    if (lk.mode == M_READ)
        return EPERM;
    return lk.mode == M_MUTEX ? dist_mutex_token(&obj.m, token)
                              : dist_rwlock_token(&obj.rw, token);
}

static void obj_destroy(void)
{
    if (lk.mode == M_MUTEX)
        dist_mutex_destroy(&obj.m);
    else
        dist_rwlock_destroy(&obj.rw);
}

/* The library's last error, naming the server of lock n when it does not
 * say already. */
static const char *lib_error(const struct dist__names *n)
{
    static char buf[1200];
    char e[800], w[300];
    struct dist__addr a;

    snprintf(e, sizeof e, "%s", dist_last_error()); /* routing may set it */
    snprintf(buf, sizeof buf, "%s", e);
    if (dist__route(&rcfg, rlimit, &n->name, &a) == 0) {
        addr_text(w, sizeof w, &a);
        if (!strstr(e, w))
            snprintf(buf, sizeof buf, "%s (Redis at %s)", e, w);
    }
    return buf;
}

static double since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) +
           (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void verbose_line(const char *event, const char *name,
                         const char *kind, double secs, int has_token,
                         uint64_t token, int status)
{
    struct sb b = { 0 };

    if (opt.json) {
        sb_printf(&b, "{\"event\":\"%s\",\"name\":", event);
        sb_jsonz(&b, name);
        sb_printf(&b, ",\"kind\":\"%s\"", kind);
        if (strcmp(event, "acquired") == 0) {
            sb_printf(&b, ",\"waited_ms\":%.0f", secs * 1000);
            if (has_token)
                sb_printf(&b, ",\"token\":%" PRIu64, token);
        } else {
            sb_printf(&b, ",\"held_ms\":%.0f,\"status\":%d", secs * 1000,
                      status);
        }
        sb_adds(&b, "}\n");
    } else if (strcmp(event, "acquired") == 0) {
        sb_printf(&b, "distlock: acquired %s '%s'", kind, name);
        if (has_token)
            sb_printf(&b, " (token %" PRIu64 ")", token);
        sb_printf(&b, " after %.1f s\n", secs);
    } else {
        sb_printf(&b,
                  "distlock: released %s '%s' after %.1f s; the command "
                  "exited with %d\n",
                  kind, name, secs, status);
    }
    fputs(b.p, stderr);
    sb_free(&b);
}

static void print_busy(const char *name, double waited)
{
    struct snap s;
    struct sb b = { 0 };

    snap_take(name, strlen(name), &s);
    sb_printf(&b, "distlock: gave up on '%s' after %.1f s", name, waited);
    if (s.nh) {
        sb_adds(&b, ": held by ");
        holders_text(&b, &s);
        if (s.pttl >= 0) {
            sb_adds(&b, ", lease ");
            sb_secs(&b, s.pttl);
            sb_adds(&b, " left");
        }
    }
    if (s.nq)
        sb_printf(&b, ", %zu queued", s.nq);
    sb_adds(&b, "\n");
    fputs(b.p, stderr);
    sb_free(&b);
    snap_free(&s);
}

/* The main thread's owner, for the signal thread's cancel. */
static void note_owner(void)
{
    size_t len;
    const char *o = dist__owner(&len);

    lk.owner_len = 0;
    if (len < sizeof lk.owner) {
        memcpy(lk.owner, o, len + 1);
        lk.owner_len = len;
    }
}

/* ---- the command ----------------------------------------------------------- */

struct lock_args {
    const char *name;
    char **command_argv;
    double timeout; /* seconds; < 0: as long as it takes */
    int verbose;
    int prefer_writer;
};

static void parse_args(int argc, char **argv, struct lock_args *a)
{
    const char *v;
    int i;

    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            a->command_argv = argv + i + 1;
            break;
        }
        if ((v = opt_value(argc, argv, &i, "--timeout"))) {
            a->timeout = secs_value("--timeout", v, 1, 1e9);
        } else if (strcmp(argv[i], "--fair") == 0) {
            lk.fair = 1;
        } else if (strcmp(argv[i], "--read") == 0 ||
                   strcmp(argv[i], "--write") == 0) {
            int mode = argv[i][2] == 'r' ? M_READ : M_WRITE;
            if (lk.mode != M_MUTEX && lk.mode != mode)
                usage_error("--read and --write exclude each other");
            lk.mode = mode;
        } else if (strcmp(argv[i], "--prefer-writer") == 0) {
            a->prefer_writer = 1;
        } else if (strcmp(argv[i], "-v") == 0 ||
                   strcmp(argv[i], "--verbose") == 0) {
            a->verbose = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
        } else if (!a->name) {
            a->name = argv[i];
        } else {
            a->command_argv = argv + i; /* flock(1) style: no '--' */
            break;
        }
    }
}

static void check_args(const struct lock_args *a)
{
    if (!a->name)
        usage_error("missing the lock NAME");
    check_name(a->name);
    if (!a->command_argv || !a->command_argv[0])
        usage_error("missing the COMMAND to run (after '--')");
    if (lk.fair && lk.mode != M_MUTEX)
        usage_error(
            "--fair is for a mutex; an rwlock takes --read or --write");
    if (a->prefer_writer && lk.mode == M_MUTEX)
        usage_error("--prefer-writer goes with --read or --write");
}

/* Fails early, and clearly, when the lock's master cannot be reached: a
 * PING on the thread's link to it, which the lock then uses. */
static void reach(const struct dist__names *n)
{
    const char *ping[1] = { "PING" };
    struct dist__cmd c = { 1, ping, NULL };
    redisReply *r;

    if (dist__route_cmds(rlimit, &n->name, 1, &c, &r, NULL) != 0)
        die(EX_REDIS, "%s", redis_why());
    freeReplyObject(r);
}

/* Signals: the thread takes them, everyone else has them blocked.  One
 * ignored at start (nohup) stays ignored, for the command too. */
static void start_signal_thread(void)
{
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    pthread_t th;
    size_t k;
    int rc;

    sigemptyset(&lk.set);
    for (k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
        struct sigaction old;
        sigaction(sigs[k], NULL, &old);
        if (old.sa_handler != SIG_IGN)
            sigaddset(&lk.set, sigs[k]);
    }
    pthread_sigmask(SIG_BLOCK, &lk.set, &lk.old_mask);
    if ((rc = pthread_create(&th, NULL, signal_thread, NULL)) != 0)
        die(EX_REDIS, "cannot start a thread: %s", strerror(rc));
    pthread_detach(th);
}

/* Takes the lock within timeout seconds (0: one try; < 0: no limit). */
static int take(double timeout)
{
    struct timespec abstime;

    if (timeout == 0)
        return obj_lock(1, NULL);
    if (timeout < 0)
        return obj_lock(0, NULL);
    abstime = realtime_in(timeout);
    return obj_lock(0, &abstime);
}

/* After the try: exits unless the lock was taken and no signal came.
 * Called with lk.mu held; returns with it held. */
static void taken_or_exit(int rc, const char *name, const struct timespec *t0)
{
    if (lk.phase == PH_ABANDON) {
        /* a signal came while waiting: nothing runs */
        int sig = lk.sig;
        lk.phase = PH_DONE;
        pthread_cond_broadcast(&lk.cv);
        pthread_mutex_unlock(&lk.mu);
        if (rc == 0)
            obj_unlock();
        exit(128 + sig);
    }
    if (rc == 0)
        return;
    lk.phase = PH_DONE;
    pthread_mutex_unlock(&lk.mu);
    if (rc == EBUSY || rc == ETIMEDOUT) {
        print_busy(name, since(t0));
        exit(EX_BUSY);
    }
    die(rc == EINVAL ? EX_USAGE : EX_REDIS, "cannot lock '%s': %s", name,
        lib_error(lk.names));
}

/* The fencing token into DISTLOCK_TOKEN (a read hold has none). */
static void export_token(int *has_token, uint64_t *token)
{
    char tok[32];

    *has_token = obj_token(token) == 0;
    if (!*has_token) {
        unsetenv("DISTLOCK_TOKEN");
        return;
    }
    snprintf(tok, sizeof tok, "%" PRIu64, *token);
    setenv("DISTLOCK_TOKEN", tok, 1);
}

/* In the forked child: the command, with distlock's process group, the
 * original signal mask and SIGPIPE disposition, no descriptor of ours. */
static void __attribute__((noreturn)) exec_command(char **command_argv)
{
    struct sigaction dfl;
    char msg[512];
    int e, n;

    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    cloexec_ours();
    pthread_sigmask(SIG_SETMASK, &lk.old_mask, NULL);
    execvp(command_argv[0], command_argv);
    e = errno;
    n = snprintf(msg, sizeof msg, "distlock: cannot run '%s': %s\n",
                 command_argv[0], strerror(e));
    if (n > 0)
        (void)!write(STDERR_FILENO, msg,
                     (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(e == ENOENT ? 127 : 126);
}

/* Runs the command and waits for it (lk.mu held on entry, not on exit):
 * its exit status as a shell gives it. */
static int run_command(char **command_argv)
{
    int status = 0;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid == 0)
        exec_command(command_argv);
    if (pid < 0) {
        int e = errno;
        lk.phase = PH_DONE;
        pthread_mutex_unlock(&lk.mu);
        obj_unlock();
        die(EX_REDIS, "cannot fork: %s", strerror(e));
    }
    lk.child = pid;
    lk.phase = PH_RUN;
    pthread_mutex_unlock(&lk.mu);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&lk.mu);
    lk.phase = PH_DONE;
    lk.child = 0;
    pthread_mutex_unlock(&lk.mu);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 128;
}

static void release(const char *name)
{
    int rc = obj_unlock();

    if (rc == EPERM)
        say("'%s' was no longer held when the command ended (lost or forced)",
            name);
    else if (rc != 0)
        say("could not release '%s': %s; it frees itself when its lease ends",
            name, lib_error(lk.names));
}

int cmd_lock(int argc, char **argv)
{
    struct lock_args a = { NULL, NULL, -1, 0, 0 };
    int rc, has_token, status_code;
    struct timespec t0;
    uint64_t token = 0;
    const char *kind;

    parse_args(argc, argv, &a);
    check_args(&a);
    kind = lk.mode == M_READ    ? "read lock"
           : lk.mode == M_WRITE ? "write lock"
           : lk.fair            ? "fair mutex"
                                : "mutex";
    redis_setup();
    lk.names = lock_names(a.name, strlen(a.name));
    reach(lk.names);
    note_owner();
    start_signal_thread();
    dist_set_lost_handler(on_lost, NULL);
    if ((rc = obj_init(a.name, a.prefer_writer)) != 0)
        die(rc == EINVAL ? EX_USAGE : EX_REDIS, "%s", dist_last_error());

    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = take(a.timeout);
    pthread_mutex_lock(&lk.mu);
    taken_or_exit(rc, a.name, &t0);
    export_token(&has_token, &token);
    if (a.verbose)
        verbose_line("acquired", a.name, kind, since(&t0), has_token, token,
                     0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    status_code = run_command(a.command_argv);
    release(a.name);
    if (a.verbose)
        verbose_line("released", a.name, kind, since(&t0), 0, 0, status_code);
    obj_destroy();
    dist_shutdown();
    return status_code;
}
