/*
 * testutil: support code shared by the distlock test programs.
 * See testutil.h for the contract of each function.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TU_START_TRIES     10
#define TU_READY_TIMEOUT   10.0  /* seconds to wait for a started server */
#define TU_TERM_GRACE      5.0   /* seconds between SIGTERM and SIGKILL */
#define TU_ADMIN_TIMEOUT_MS 1000
#define TU_PROBE_TIMEOUT_MS 250
#define TU_DIR_PREFIX      "distlock-test-"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

double tu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void tu_sleep_ms(long ms)
{
    struct timespec ts, rem;

    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &rem) != 0 && errno == EINTR)
        ts = rem;
}

int tu_free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd, port = -1;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "testutil: socket: %s\n", strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "testutil: bind 127.0.0.1:0: %s\n", strerror(errno));
    } else if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "testutil: getsockname: %s\n", strerror(errno));
    } else {
        port = ntohs(sa.sin_port);
    }
    close(fd);
    return port;
}

static struct timeval ms_to_tv(long ms)
{
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

static void set_cloexec(int fd)
{
    int fl;

    if (fd < 0)
        return;
    fl = fcntl(fd, F_GETFD);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
}

/*
 * SIGPIPE guard: hiredis writes with write(2), so a command sent to a dead
 * server would raise SIGPIPE and kill the test.  Block it in this thread
 * for the duration of the command and swallow the one we caused.
 */
struct sigpipe_guard {
    sigset_t old;
    int was_pending;
};

static void sigpipe_block(struct sigpipe_guard *g)
{
    sigset_t set, pending;

    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigemptyset(&pending);
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void sigpipe_unblock(struct sigpipe_guard *g)
{
    if (!g->was_pending) {
        sigset_t set;
        struct timespec zero = {0, 0};

        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        while (sigtimedwait(&set, NULL, &zero) == SIGPIPE) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static redisReply *command_argv(redisContext *c, int argc, const char **argv,
                                const size_t *argvlen)
{
    struct sigpipe_guard g;
    redisReply *reply;

    sigpipe_block(&g);
    reply = redisCommandArgv(c, argc, argv, argvlen);
    sigpipe_unblock(&g);
    return reply;
}

static redisContext *connect_unix(const char *path, long timeout_ms)
{
    redisContext *c;

    c = redisConnectUnixWithTimeout(path, ms_to_tv(timeout_ms));
    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    set_cloexec(c->fd);
    if (redisSetTimeout(c, ms_to_tv(timeout_ms)) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static redisContext *connect_tcp(int port, long timeout_ms)
{
    redisContext *c;

    c = redisConnectWithTimeout("127.0.0.1", port, ms_to_tv(timeout_ms));
    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    set_cloexec(c->fd);
    if (redisSetTimeout(c, ms_to_tv(timeout_ms)) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* Registry of started servers                                              */
/* ------------------------------------------------------------------------ */

/*
 * One entry per tu_redis_t between start and stop.  It is the truth about
 * the child's pid (tu_redis_t is only a snapshot), so that a struct whose
 * server was already cleaned up by tu_redis_stop_all never makes us kill a
 * recycled pid.
 *
 * Locking: g_reg_lock guards the list, every entry's refs and unlinked.
 * e->lock guards e->pid and e->conn, and serialises the commands on
 * e->conn.  An entry is freed only after it was unlinked and its refs went
 * back to 0.
 */
struct tu_srv {
    struct tu_srv *next;
    unsigned long id;
    pid_t creator;
    int refs;
    int unlinked;
    char dir[256];
    pthread_mutex_t lock;
    pid_t pid;            /* 0: not running */
    redisContext *conn;   /* cached admin connection */
    /* What tu_redis_start_opts asked for, kept for tu_redis_restart.
     * Written before the server first starts, read only afterwards. */
    char conf[300];       /* config file passed first; "" none */
    char **args;          /* extra arguments (NULL-terminated) or NULL */
    int (*pick_port)(void);
};

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_reg_cond = PTHREAD_COND_INITIALIZER;
static struct tu_srv *g_reg;
static unsigned long g_reg_next_id = 1;
static pid_t g_reg_owner;   /* last process that registered (atomic) */
static pthread_once_t g_atexit_once = PTHREAD_ONCE_INIT;

static void atexit_cleanup(void)
{
    tu_redis_stop_all();
}

static void install_atexit(void)
{
    if (atexit(atexit_cleanup) != 0)
        fprintf(stderr, "testutil: atexit failed; servers will not be "
                        "cleaned up automatically\n");
}

static struct tu_srv *srv_new(const char *dir)
{
    struct tu_srv *e = calloc(1, sizeof(*e));

    if (e == NULL)
        return NULL;
    if (pthread_mutex_init(&e->lock, NULL) != 0) {
        free(e);
        return NULL;
    }
    e->creator = getpid();
    snprintf(e->dir, sizeof(e->dir), "%s", dir);
    pthread_once(&g_atexit_once, install_atexit);
    pthread_mutex_lock(&g_reg_lock);
    e->id = g_reg_next_id++;
    e->next = g_reg;
    g_reg = e;
    __atomic_store_n(&g_reg_owner, e->creator, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&g_reg_lock);
    return e;
}

/* Find r's entry and take a reference on it; NULL if it is gone. */
static struct tu_srv *srv_get(const tu_redis_t *r)
{
    struct tu_srv *e;

    if (r == NULL || r->reg_id == 0)
        return NULL;
    pthread_mutex_lock(&g_reg_lock);
    for (e = g_reg; e != NULL; e = e->next) {
        if (e->id == r->reg_id && e->creator == r->creator_pid) {
            e->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return e;
}

static void srv_put(struct tu_srv *e)
{
    pthread_mutex_lock(&g_reg_lock);
    e->refs--;
    if (e->refs == 0 && e->unlinked)
        pthread_cond_broadcast(&g_reg_cond);
    pthread_mutex_unlock(&g_reg_lock);
}

/* Caller holds g_reg_lock.  Unlink e and wait until nobody uses it. */
static void srv_unlink_locked(struct tu_srv *e)
{
    struct tu_srv **pp;

    for (pp = &g_reg; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    e->next = NULL;
    e->unlinked = 1;
    while (e->refs > 0)
        pthread_cond_wait(&g_reg_cond, &g_reg_lock);
}

/* ------------------------------------------------------------------------ */
/* Processes and directories                                                */
/* ------------------------------------------------------------------------ */

/* Send sig (plus SIGCONT, so a stopped server can act on it) and reap;
 * SIGKILL after grace seconds.  Safe if the process is already gone. */
static void kill_and_reap(pid_t pid, int sig, double grace)
{
    double deadline;
    int st;

    if (pid <= 0)
        return;
    (void)kill(pid, sig);
    if (sig != SIGKILL)
        (void)kill(pid, SIGCONT);
    deadline = tu_now() + grace;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return;
        if (w < 0 && errno != EINTR)
            return;   /* ECHILD: reaped by someone else */
        if (w == 0 && tu_now() > deadline) {
            (void)kill(pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
            return;
        }
        tu_sleep_ms(2);
    }
}

static int rm_entry(const char *path, const struct stat *sb, int type,
                    struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type == FTW_DP)
        (void)rmdir(path);
    else
        (void)unlink(path);
    return 0;
}

static void remove_dir(const char *dir)
{
    /* Only ever remove what we made. */
    if (dir[0] == '\0' || strstr(dir, "/" TU_DIR_PREFIX) == NULL)
        return;
    (void)nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    (void)rmdir(dir);
}

static void free_args(char **args)
{
    size_t i;

    if (args == NULL)
        return;
    for (i = 0; args[i] != NULL; i++)
        free(args[i]);
    free(args);
}

/* Kill, reap, remove dir and free an entry already unlinked. */
static void srv_destroy(struct tu_srv *e)
{
    pid_t pid;

    pthread_mutex_lock(&e->lock);
    pid = e->pid;
    e->pid = 0;
    if (e->conn != NULL) {
        redisFree(e->conn);
        e->conn = NULL;
    }
    pthread_mutex_unlock(&e->lock);
    kill_and_reap(pid, SIGKILL, 0);
    remove_dir(e->dir);
    pthread_mutex_destroy(&e->lock);
    free_args(e->args);
    free(e);
}

void tu_redis_stop_all(void)
{
    struct tu_srv *mine = NULL, *e;
    pid_t self = getpid();

    /* A forked child that never started a server of its own must not touch
     * the parent's (nor the registry lock, which may have been copied
     * while held). */
    if (__atomic_load_n(&g_reg_owner, __ATOMIC_SEQ_CST) != self)
        return;
    pthread_mutex_lock(&g_reg_lock);
    for (;;) {
        for (e = g_reg; e != NULL && e->creator != self; e = e->next) {
        }
        if (e == NULL)
            break;
        srv_unlink_locked(e);
        e->next = mine;
        mine = e;
    }
    pthread_mutex_unlock(&g_reg_lock);
    while (mine != NULL) {
        e = mine;
        mine = e->next;
        srv_destroy(e);
    }
}

static void redis_clear(tu_redis_t *r)
{
    memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------------------------ */
/* Starting redis-server                                                    */
/* ------------------------------------------------------------------------ */

enum spawn_result {
    SPAWN_OK = 0,
    SPAWN_PORT_TAKEN,   /* retry with another port */
    SPAWN_FAILED        /* give up */
};

static const char *server_program(void)
{
    const char *p = getenv("REDIS_SERVER");
    return (p != NULL && p[0] != '\0') ? p : "redis-server";
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : 0;
}

/* Read path from offset off (at most 64 KiB, the last part); malloc'd. */
static char *read_from(const char *path, off_t off)
{
    const off_t cap = 65536;
    off_t size = file_size(path);
    char *buf;
    ssize_t n;
    size_t got = 0;
    int fd;

    if (size - off > cap)
        off = size - cap;
    if (off < 0 || off > size)
        off = 0;
    buf = malloc((size_t)(size - off) + 1);
    if (buf == NULL)
        return NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (got < (size_t)(size - off)) {
            n = pread(fd, buf + got, (size_t)(size - off) - got,
                      off + (off_t)got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        close(fd);
    }
    buf[got] = '\0';
    return buf;
}

/* Print the last lines of text on stderr, indented. */
static void print_tail(const char *text, int lines)
{
    const char *p = text + strlen(text);
    int seen = 0;

    while (p > text && (p[-1] == '\n' || p[-1] == '\r'))
        p--;
    while (p > text) {
        if (p[-1] == '\n' && ++seen == lines)
            break;
        p--;
    }
    if (*p == '\0')
        return;
    fprintf(stderr, "testutil: --- redis-server log (last lines) ---\n");
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > 0)
            fprintf(stderr, "  %.*s\n", (int)len, p);
        p += len + (nl ? 1 : 0);
    }
    fprintf(stderr, "testutil: ---\n");
}

/*
 * fork + exec redis-server.  Everything the child needs is prepared before
 * fork(), so that the child only makes async-signal-safe calls.
 */
static pid_t spawn_server(const tu_redis_t *r, const struct tu_srv *e,
                          int port, const char *logpath)
{
    char portstr[16], dirarg[sizeof(r->dir)];
    const char *prog = server_program();
    const char **argv;
    size_t nextra = 0, i;
    int argc = 0, nullfd, logfd;
    int deathsig = gettid() == getpid();
    pid_t parent = getpid(), pid;
    struct rlimit rl;
    long maxfd = 1024;

    snprintf(portstr, sizeof(portstr), "%d", port);
    snprintf(dirarg, sizeof(dirarg), "%s", r->dir);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        maxfd = rl.rlim_cur > 1048576 ? 1048576 : (long)rl.rlim_cur;

    while (e->args != NULL && e->args[nextra] != NULL)
        nextra++;
    argv = malloc(sizeof(*argv) * (32 + nextra));
    if (argv == NULL) {
        fprintf(stderr, "testutil: out of memory\n");
        return -1;
    }
    argv[argc++] = prog;
    if (e->conf[0] != '\0')
        argv[argc++] = e->conf;   /* redis-server wants it first */
    argv[argc++] = "--port";           argv[argc++] = portstr;
    argv[argc++] = "--bind";           argv[argc++] = "127.0.0.1";
    argv[argc++] = "--unixsocket";     argv[argc++] = r->sock;
    argv[argc++] = "--unixsocketperm"; argv[argc++] = "700";
    argv[argc++] = "--dir";            argv[argc++] = dirarg;
    argv[argc++] = "--save";           argv[argc++] = "";
    argv[argc++] = "--appendonly";     argv[argc++] = "no";
    argv[argc++] = "--daemonize";      argv[argc++] = "no";
    argv[argc++] = "--protected-mode"; argv[argc++] = "no";
    argv[argc++] = "--logfile";        argv[argc++] = logpath;
    argv[argc++] = "--databases";      argv[argc++] = "16";
    for (i = 0; i < nextra; i++)
        argv[argc++] = e->args[i];
    argv[argc] = NULL;

    nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nullfd < 0) {
        fprintf(stderr, "testutil: open /dev/null: %s\n", strerror(errno));
        free(argv);
        return -1;
    }
    logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0) {
        fprintf(stderr, "testutil: open redis log: %s\n", strerror(errno));
        close(nullfd);
        free(argv);
        return -1;
    }

    pid = fork();
    if (pid == 0) {
        static const char msg[] = "testutil: cannot exec redis-server "
                                  "(set REDIS_SERVER or PATH)\n";
        sigset_t none;
        int n, l;
        long fd;

        if (deathsig) {
            (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(126);
        }
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        /* Move both out of the way of 0..2 first (F_DUPFD clears
         * FD_CLOEXEC on the copy). */
        n = fcntl(nullfd, F_DUPFD, 3);
        l = fcntl(logfd, F_DUPFD, 3);
        if (n < 0 || l < 0)
            _exit(126);
        if (dup2(n, 0) < 0 || dup2(l, 1) < 0 || dup2(l, 2) < 0)
            _exit(126);
        /* Do not let the server inherit the test's sockets (a proxy or
         * client fd kept open by the server would hide EOFs). */
        if (close_range(3, ~0U, 0) != 0) {
            for (fd = 3; fd < maxfd; fd++)
                (void)close((int)fd);
        }
        execvp(prog, (char *const *)argv);
        (void)!write(2, msg, sizeof(msg) - 1);
        _exit(127);
    }
    if (pid < 0)
        fprintf(stderr, "testutil: fork: %s\n", strerror(errno));
    close(nullfd);
    close(logfd);
    free(argv);
    return pid;
}

/* INFO server process_id over c; 0 if it could not be read. */
static long info_pid(redisContext *c)
{
    static const char *argv[] = {"INFO", "server"};
    redisReply *reply = command_argv(c, 2, argv, NULL);
    long pid = 0;

    if (reply != NULL && reply->type == REDIS_REPLY_STRING && reply->str) {
        const char *p = reply->str;
        while ((p = strstr(p, "process_id:")) != NULL) {
            if (p == reply->str || p[-1] == '\n') {
                pid = strtol(p + strlen("process_id:"), NULL, 10);
                break;
            }
            p++;
        }
    }
    if (reply != NULL)
        freeReplyObject(reply);
    return pid;
}

/* 1: the server on this endpoint is pid; 0: cannot tell yet;
 * -1: someone else answers there. */
static int probe(const char *sock, int port, pid_t pid)
{
    redisContext *c = sock ? connect_unix(sock, TU_PROBE_TIMEOUT_MS)
                           : connect_tcp(port, TU_PROBE_TIMEOUT_MS);
    long got;

    if (c == NULL)
        return 0;
    got = info_pid(c);
    redisFree(c);
    if (got == 0)
        return 0;
    return got == (long)pid ? 1 : -1;
}

/*
 * Wait until the child answers as itself on both endpoints.  On failure the
 * child is reaped, and *why says whether another port may help.
 */
static enum spawn_result await_ready(const tu_redis_t *r, int port, pid_t pid,
                                     const char *logpath, off_t logoff,
                                     int restarting)
{
    double deadline = tu_now() + TU_READY_TIMEOUT;
    enum spawn_result res = SPAWN_FAILED;
    const char *what = NULL;
    char *log = NULL;
    long sleep_ms = 2;

    for (;;) {
        int st = 0, u, t;
        pid_t w = waitpid(pid, &st, WNOHANG);

        if (w == pid || (w < 0 && errno == ECHILD)) {
            log = read_from(logpath, logoff);
            if (log != NULL && strstr(log, "Address already in use")) {
                res = SPAWN_PORT_TAKEN;
                what = "port is taken";
            } else if (w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 127) {
                what = "could not execute redis-server";
            } else {
                what = "redis-server exited during start";
            }
            break;
        }
        u = probe(r->sock, 0, pid);
        if (u == 1) {
            t = probe(NULL, port, pid);
            if (t == 1)
                return SPAWN_OK;
            if (t == -1) {
                res = SPAWN_PORT_TAKEN;
                what = "another server answers on the port";
                kill_and_reap(pid, SIGKILL, 0);
                log = read_from(logpath, logoff);
                break;
            }
        } else if (u == -1) {
            what = "another server answers on our private unix socket";
            kill_and_reap(pid, SIGKILL, 0);
            log = read_from(logpath, logoff);
            break;
        }
        if (tu_now() > deadline) {
            what = "redis-server not ready in time";
            kill_and_reap(pid, SIGKILL, 0);
            log = read_from(logpath, logoff);
            break;
        }
        tu_sleep_ms(sleep_ms);
        if (sleep_ms < 20)
            sleep_ms *= 2;
    }

    if (res == SPAWN_PORT_TAKEN && !restarting) {
        fprintf(stderr, "testutil: 127.0.0.1:%d: %s, trying another port\n",
                port, what);
    } else if (res == SPAWN_PORT_TAKEN) {
        fprintf(stderr, "testutil: restart: port %d was taken by another "
                        "process while the server was down (%s)\n", port, what);
        if (log != NULL)
            print_tail(log, 20);
        res = SPAWN_FAILED;
    } else {
        fprintf(stderr, "testutil: %s (port %d)\n", what, port);
        if (log != NULL)
            print_tail(log, 20);
    }
    free(log);
    return res;
}

/* One attempt on port: spawn, record the pid in e, wait for readiness. */
static enum spawn_result start_once(tu_redis_t *r, struct tu_srv *e, int port,
                                    int restarting)
{
    char logpath[sizeof(r->dir) + 16];
    enum spawn_result res;
    off_t logoff;
    pid_t pid;

    snprintf(logpath, sizeof(logpath), "%s/redis.log", r->dir);
    logoff = file_size(logpath);
    pid = spawn_server(r, e, port, logpath);
    if (pid < 0)
        return SPAWN_FAILED;
    pthread_mutex_lock(&e->lock);
    e->pid = pid;
    pthread_mutex_unlock(&e->lock);

    res = await_ready(r, port, pid, logpath, logoff, restarting);
    if (res != SPAWN_OK) {
        /* await_ready reaped it already. */
        pthread_mutex_lock(&e->lock);
        e->pid = 0;
        pthread_mutex_unlock(&e->lock);
        return res;
    }
    r->pid = pid;
    r->port = port;
    snprintf(r->url_tcp, sizeof(r->url_tcp), "redis://127.0.0.1:%d", port);
    return SPAWN_OK;
}

static int make_dir(tu_redis_t *r)
{
    const char *base = getenv("TMPDIR");
    const size_t sun_max = sizeof(((struct sockaddr_un *)0)->sun_path);
    char tmpl[sizeof(r->dir)];
    int n;

    /* The socket path must fit in sun_path; fall back to /tmp if $TMPDIR
     * is too long. */
    if (base == NULL || base[0] != '/' ||
        strlen(base) + sizeof("/" TU_DIR_PREFIX "XXXXXX/redis.sock") > sun_max)
        base = "/tmp";
    n = snprintf(tmpl, sizeof(tmpl), "%s/" TU_DIR_PREFIX "XXXXXX", base);
    if (n < 0 || (size_t)n >= sizeof(tmpl))
        return -1;
    if (mkdtemp(tmpl) == NULL) {
        fprintf(stderr, "testutil: mkdtemp %s: %s\n", tmpl, strerror(errno));
        return -1;
    }
    snprintf(r->dir, sizeof(r->dir), "%s", tmpl);
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->url_unix, sizeof(r->url_unix), "unix://%s", r->sock);
    return 0;
}

/* Write text to path (mode 0600).  0 or -1 (message printed). */
static int write_file(const char *path, const char *text)
{
    size_t len = strlen(text), off = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0) {
        fprintf(stderr, "testutil: create %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "testutil: write %s: %s\n", path,
                    n < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0) {
        fprintf(stderr, "testutil: close %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Record o in e (config file written into the dir, arguments copied). */
static int srv_set_opts(struct tu_srv *e, const tu_redis_t *r,
                        const tu_redis_opts *o)
{
    size_t n = 0, i;

    if (o == NULL)
        return 0;
    e->pick_port = o->pick_port;
    if (o->conf != NULL) {
        int len = snprintf(e->conf, sizeof(e->conf), "%s/redis.conf", r->dir);
        if (len < 0 || (size_t)len >= sizeof(e->conf)) {
            fprintf(stderr, "testutil: config file path too long\n");
            return -1;
        }
        if (write_file(e->conf, o->conf) != 0)
            return -1;
    }
    if (o->args == NULL)
        return 0;
    while (o->args[n] != NULL)
        n++;
    e->args = calloc(n + 1, sizeof(*e->args));
    if (e->args == NULL) {
        fprintf(stderr, "testutil: out of memory\n");
        return -1;
    }
    for (i = 0; i < n; i++) {
        e->args[i] = strdup(o->args[i]);
        if (e->args[i] == NULL) {
            fprintf(stderr, "testutil: out of memory\n");
            return -1;   /* srv_destroy frees what was copied */
        }
    }
    return 0;
}

static int start_common(tu_redis_t *r, int first_port, const tu_redis_opts *o)
{
    struct tu_srv *e;
    int i;

    if (r == NULL)
        return -1;
    redis_clear(r);
    if (make_dir(r) != 0)
        return -1;
    e = srv_new(r->dir);
    if (e == NULL) {
        fprintf(stderr, "testutil: out of memory\n");
        remove_dir(r->dir);
        redis_clear(r);
        return -1;
    }
    r->creator_pid = e->creator;
    r->reg_id = e->id;
    if (srv_set_opts(e, r, o) != 0) {
        tu_redis_stop(r);
        return -1;
    }

    for (i = 0; i < TU_START_TRIES; i++) {
        int port = (i == 0 && first_port > 0) ? first_port
                   : e->pick_port != NULL ? e->pick_port() : tu_free_port();
        enum spawn_result res;

        if (port <= 0) {
            fprintf(stderr, "testutil: no free port\n");
            break;
        }
        res = start_once(r, e, port, 0);
        if (res == SPAWN_OK)
            return 0;
        if (res == SPAWN_FAILED)
            break;
    }
    if (i == TU_START_TRIES)
        fprintf(stderr, "testutil: no usable port after %d tries\n", i);
    tu_redis_stop(r);
    return -1;
}

int tu_redis_start_port(tu_redis_t *r, int first_port)
{
    return start_common(r, first_port, NULL);
}

int tu_redis_start(tu_redis_t *r)
{
    return start_common(r, 0, NULL);
}

int tu_redis_start_opts(tu_redis_t *r, const tu_redis_opts *o)
{
    return start_common(r, 0, o);
}

int tu_redis_restart(tu_redis_t *r)
{
    struct tu_srv *e;
    pid_t old;
    int rc;

    if (r == NULL || r->creator_pid != getpid()) {
        fprintf(stderr, "testutil: restart: not our server\n");
        return -1;
    }
    e = srv_get(r);
    if (e == NULL) {
        fprintf(stderr, "testutil: restart: server not started\n");
        return -1;
    }
    pthread_mutex_lock(&e->lock);
    old = e->pid;
    e->pid = 0;
    if (e->conn != NULL) {
        redisFree(e->conn);
        e->conn = NULL;
    }
    pthread_mutex_unlock(&e->lock);
    r->pid = 0;
    kill_and_reap(old, SIGTERM, TU_TERM_GRACE);

    rc = start_once(r, e, r->port, 1) == SPAWN_OK ? 0 : -1;
    srv_put(e);
    return rc;
}

void tu_redis_stop(tu_redis_t *r)
{
    struct tu_srv *e;

    if (r == NULL)
        return;
    if (r->reg_id != 0 && r->creator_pid != getpid())
        return;   /* a forked child: the server is the parent's */
    if (r->reg_id != 0) {
        pthread_mutex_lock(&g_reg_lock);
        for (e = g_reg; e != NULL; e = e->next) {
            if (e->id == r->reg_id && e->creator == r->creator_pid)
                break;
        }
        if (e != NULL)
            srv_unlink_locked(e);   /* waits for users to let go */
        pthread_mutex_unlock(&g_reg_lock);
        if (e != NULL)
            srv_destroy(e);
    }
    redis_clear(r);
}

int tu_redis_signal(tu_redis_t *r, int sig)
{
    struct tu_srv *e = srv_get(r);
    pid_t pid = 0;

    if (e != NULL) {
        pthread_mutex_lock(&e->lock);
        pid = e->pid;
        pthread_mutex_unlock(&e->lock);
        srv_put(e);
    } else if (r != NULL && r->reg_id != 0 && r->creator_pid != getpid()) {
        pid = r->pid;   /* forked child: trust the snapshot */
    }
    if (pid <= 0) {
        fprintf(stderr, "testutil: signal: server not running\n");
        return -1;
    }
    if (kill(pid, sig) != 0) {
        fprintf(stderr, "testutil: kill %d: %s\n", (int)pid, strerror(errno));
        return -1;
    }
    return 0;
}

int tu_redis_kill(tu_redis_t *r)
{
    struct tu_srv *e;
    pid_t pid;

    if (r == NULL || r->reg_id == 0 || r->creator_pid != getpid()) {
        fprintf(stderr, "testutil: kill: not our server\n");
        return -1;
    }
    e = srv_get(r);
    if (e == NULL) {
        fprintf(stderr, "testutil: kill: server not started\n");
        return -1;
    }
    pthread_mutex_lock(&e->lock);
    pid = e->pid;
    e->pid = 0;
    if (e->conn != NULL) {
        redisFree(e->conn);
        e->conn = NULL;
    }
    pthread_mutex_unlock(&e->lock);
    r->pid = 0;
    srv_put(e);
    if (pid <= 0) {
        fprintf(stderr, "testutil: kill: server not running\n");
        return -1;
    }
    kill_and_reap(pid, SIGKILL, 0);
    return 0;
}

void tu_redis_print_log(const tu_redis_t *r, int lines)
{
    char path[sizeof(r->dir) + 16];
    char *log;

    if (r == NULL || r->dir[0] == '\0')
        return;
    snprintf(path, sizeof(path), "%s/redis.log", r->dir);
    log = read_from(path, 0);
    if (log != NULL) {
        fprintf(stderr, "testutil: %s:\n", path);
        print_tail(log, lines > 0 ? lines : 20);
    }
    free(log);
}

redisContext *tu_redis_admin(tu_redis_t *r)
{
    redisContext *c;

    if (r == NULL || r->sock[0] == '\0') {
        fprintf(stderr, "testutil: admin: server not started\n");
        return NULL;
    }
    c = redisConnectUnixWithTimeout(r->sock, ms_to_tv(TU_ADMIN_TIMEOUT_MS));
    if (c == NULL || c->err) {
        fprintf(stderr, "testutil: connect %s: %s\n", r->sock,
                c ? c->errstr : "out of memory");
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    set_cloexec(c->fd);
    if (redisSetTimeout(c, ms_to_tv(TU_ADMIN_TIMEOUT_MS)) != REDIS_OK) {
        fprintf(stderr, "testutil: redisSetTimeout: %s\n", c->errstr);
        redisFree(c);
        return NULL;
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */
/* ------------------------------------------------------------------------ */

static void cmd_error(const char *argv0, const char *what)
{
    fprintf(stderr, "testutil: %s: %s\n", argv0 ? argv0 : "(command)", what);
}

redisReply *tu_cmdv(tu_redis_t *r, int argc, const char *const *argv,
                    const size_t *argvlen)
{
    redisReply *reply = NULL;
    struct tu_srv *e;

    if (r == NULL || argc <= 0 || argv == NULL) {
        cmd_error(NULL, "bad arguments");
        return NULL;
    }
    if (r->reg_id == 0) {
        cmd_error(argv[0], "server not started");
        return NULL;
    }

    if (r->creator_pid != getpid()) {
        /* Forked child: fresh connection, no locks, no shared state. */
        redisContext *c = tu_redis_admin(r);
        if (c == NULL)
            return NULL;
        reply = command_argv(c, argc, (const char **)argv, argvlen);
        if (reply == NULL)
            cmd_error(argv[0], c->errstr[0] ? c->errstr : "I/O error");
        redisFree(c);
        return reply;
    }

    e = srv_get(r);
    if (e == NULL) {
        cmd_error(argv[0], "server not running");
        return NULL;
    }
    pthread_mutex_lock(&e->lock);
    if (e->pid <= 0) {
        cmd_error(argv[0], "server not running");
    } else {
        if (e->conn != NULL && e->conn->err) {
            redisFree(e->conn);
            e->conn = NULL;
        }
        if (e->conn == NULL)
            e->conn = tu_redis_admin(r);
        if (e->conn != NULL) {
            reply = command_argv(e->conn, argc, (const char **)argv, argvlen);
            if (reply == NULL) {
                cmd_error(argv[0], e->conn->errstr[0] ? e->conn->errstr
                                                      : "I/O error");
                redisFree(e->conn);   /* state unknown: never reuse */
                e->conn = NULL;
            }
        }
    }
    pthread_mutex_unlock(&e->lock);
    srv_put(e);
    return reply;
}

/* Collect a NULL-terminated va_list into a malloc'd vector (arg0 first). */
static const char **collect_args(const char *arg0, va_list ap, int *argc)
{
    const char **argv;
    const char *s;
    va_list cp;
    int n = 0, i;

    if (arg0 == NULL)
        return NULL;
    va_copy(cp, ap);
    n = 1;
    while (va_arg(cp, const char *) != NULL)
        n++;
    va_end(cp);
    argv = malloc(sizeof(*argv) * (size_t)n);
    if (argv == NULL)
        return NULL;
    argv[0] = arg0;
    for (i = 1; i < n; i++) {
        s = va_arg(ap, const char *);
        argv[i] = s;
    }
    *argc = n;
    return argv;
}

static redisReply *cmd_va(tu_redis_t *r, const char *arg0, va_list ap)
{
    const char **argv;
    redisReply *reply;
    int argc = 0;

    argv = collect_args(arg0, ap, &argc);
    if (argv == NULL) {
        cmd_error(arg0, arg0 ? "out of memory" : "no command");
        return NULL;
    }
    reply = tu_cmdv(r, argc, argv, NULL);
    free(argv);
    return reply;
}

redisReply *tu_cmd(tu_redis_t *r, const char *arg0, ...)
{
    redisReply *reply;
    va_list ap;

    va_start(ap, arg0);
    reply = cmd_va(r, arg0, ap);
    va_end(ap);
    return reply;
}

/* Parse a whole base-10 long long; 0 on success. */
static int parse_ll(const char *s, size_t len, long long *out)
{
    char buf[32], *end;
    long long v;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return -1;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || end == buf)
        return -1;
    *out = v;
    return 0;
}

/* 0 value, 1 nil, -1 other (message printed). */
static int reply_int(redisReply *reply, const char *arg0, long long *out)
{
    char msg[200];

    if (reply == NULL)
        return -1;   /* already reported */
    switch (reply->type) {
    case REDIS_REPLY_INTEGER:
        *out = reply->integer;
        return 0;
    case REDIS_REPLY_NIL:
        return 1;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        if (parse_ll(reply->str, reply->len, out) == 0)
            return 0;
        snprintf(msg, sizeof(msg), "not an integer: \"%.*s\"",
                 (int)(reply->len > 60 ? 60 : reply->len), reply->str);
        cmd_error(arg0, msg);
        return -1;
    case REDIS_REPLY_ERROR:
        snprintf(msg, sizeof(msg), "error reply: %.*s",
                 (int)(reply->len > 150 ? 150 : reply->len), reply->str);
        cmd_error(arg0, msg);
        return -1;
    default:
        cmd_error(arg0, "unexpected reply type (not an integer)");
        return -1;
    }
}

long long tu_cmd_int(tu_redis_t *r, const char *arg0, ...)
{
    redisReply *reply;
    long long v = -1;
    va_list ap;

    va_start(ap, arg0);
    reply = cmd_va(r, arg0, ap);
    va_end(ap);
    if (reply_int(reply, arg0, &v) != 0)
        v = -1;
    if (reply != NULL)
        freeReplyObject(reply);
    return v;
}

int tu_cmd_int_ex(tu_redis_t *r, long long *out, const char *arg0, ...)
{
    redisReply *reply;
    long long v = 0;
    va_list ap;
    int rc;

    va_start(ap, arg0);
    reply = cmd_va(r, arg0, ap);
    va_end(ap);
    rc = reply_int(reply, arg0, &v);
    if (rc == 0 && out != NULL)
        *out = v;
    if (reply != NULL)
        freeReplyObject(reply);
    return rc;
}

char *tu_cmd_str(tu_redis_t *r, const char *arg0, ...)
{
    redisReply *reply;
    char *s = NULL;
    char msg[200];
    va_list ap;

    va_start(ap, arg0);
    reply = cmd_va(r, arg0, ap);
    va_end(ap);
    if (reply == NULL)
        return NULL;
    switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        s = malloc(reply->len + 1);
        if (s != NULL) {
            memcpy(s, reply->str, reply->len);
            s[reply->len] = '\0';
        } else {
            cmd_error(arg0, "out of memory");
        }
        break;
    case REDIS_REPLY_INTEGER:
        s = malloc(24);
        if (s != NULL)
            snprintf(s, 24, "%lld", reply->integer);
        else
            cmd_error(arg0, "out of memory");
        break;
    case REDIS_REPLY_NIL:
        break;
    case REDIS_REPLY_ERROR:
        snprintf(msg, sizeof(msg), "error reply: %.*s",
                 (int)(reply->len > 150 ? 150 : reply->len), reply->str);
        cmd_error(arg0, msg);
        break;
    default:
        cmd_error(arg0, "unexpected reply type (not a string)");
        break;
    }
    freeReplyObject(reply);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Fault proxy                                                              */
/* ------------------------------------------------------------------------ */

#define TU_PROXY_BUF   16384          /* bytes read at once */
#define TU_PROXY_QUEUE 64             /* chunks (reads) queued in one direction
                                         before reading from its source pauses:
                                         up to 1 MiB */
#define TU_NS_NEVER    LLONG_MAX
#define TU_PROXY_WARM  8              /* chunks and connection records made at
                                         start, before the thread runs */
#define TU_PROXY_PFD   64             /* poll slots made at start: room for
                                         31 connections before any realloc */

/* CLOCK_MONOTONIC in nanoseconds. */
static long long now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Bytes read from one side and not yet written to the other.  Chunks and
 * connection records are kept on free lists and reused: once warmed up the
 * proxy thread does not call the allocator, so a test may fork() while the
 * proxy forwards (a sanitizer's allocator whose lock another thread holds
 * at fork() stays locked in the child: GCC 12's ASan is such a one). */
struct tu_chunk {
    struct tu_chunk *next;
    long long due;       /* not sent before then (now_ns) */
    size_t off, len;     /* pending bytes data[off..len) */
    char data[TU_PROXY_BUF];
};

/* One direction of a connection: its chunks, oldest first.  Chunks are sent
 * in the order they were read, each no earlier than its due time. */
struct tu_flow {
    struct tu_chunk *head, *tail;
    size_t nchunks;      /* chunks in the queue */
    size_t queued;       /* bytes not yet sent */
    long long last_due;  /* due time of the newest chunk */
    int eof;             /* source sent EOF */
    long long eof_due;   /* when that EOF may be passed on */
    int shut;            /* EOF passed on (shutdown(dst, SHUT_WR)) */
};

struct tu_pconn {
    struct tu_pconn *next;
    int cfd, sfd;        /* client (TCP) and server (unix) sockets; sfd is
                            -1 for one accepted during a blackhole, or whose
                            server side went away during one */
    int drop_reply;      /* fault fired: discard server data, close on it */
    int chup, shup;      /* POLLHUP seen on cfd / sfd */
    int holed;           /* open while the blackhole was on: closed when the
                            blackhole ends (its byte streams lost data) */
    int dead;            /* to be closed and freed */
    struct tu_flow up;   /* client -> server */
    struct tu_flow down; /* server -> client */
};

struct tu_proxy {
    pthread_t thread;
    int thread_started;
    int lfd;
    int port;
    int wake[2];
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];

    pthread_mutex_t lock;   /* guards everything below up to "owned by" */
    pthread_cond_t cond;
    int stop;
    int arm_drop_reply;
    int arm_drop_request;
    unsigned long reset_req, reset_done;
    unsigned long accepted, fired, refused;
    unsigned long long swallowed;
    /* settings, applied by the thread at the top of its loop; sync_done
     * tells a setter that they are in effect */
    long delay_ms;
    int blackhole;
    int reset_new;
    unsigned long sync_req, sync_done;

    /* Owned by the proxy thread only (and by tu_proxy_stop after it). */
    struct tu_pconn *conns;
    struct pollfd *pfd;
    size_t pfd_cap;
    struct tu_chunk *free_chunks;   /* free lists, for reuse */
    struct tu_pconn *free_conns;
    long long delay;        /* ns, in effect */
    int holing;             /* the blackhole is in effect */
    int resetting;          /* reset_new is in effect */
};

static void proxy_wake(tu_proxy_t *p)
{
    char b = 1;
    ssize_t n;

    do {
        n = write(p->wake[1], &b, 1);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the pipe is full, so the thread will wake anyway. */
}

static struct tu_chunk *chunk_get(tu_proxy_t *p)
{
    struct tu_chunk *c = p->free_chunks;

    if (c != NULL)
        p->free_chunks = c->next;
    else
        c = malloc(sizeof(*c));
    return c;
}

static void chunk_put(tu_proxy_t *p, struct tu_chunk *c)
{
    c->next = p->free_chunks;
    p->free_chunks = c;
}

static void flow_clear(tu_proxy_t *p, struct tu_flow *f)
{
    struct tu_chunk *c;

    while ((c = f->head) != NULL) {
        f->head = c->next;
        chunk_put(p, c);
    }
    f->tail = NULL;
    f->nchunks = 0;
    f->queued = 0;
}

static void pconn_close(struct tu_pconn *c)
{
    if (c->cfd >= 0)
        close(c->cfd);
    if (c->sfd >= 0)
        close(c->sfd);
    c->cfd = c->sfd = -1;
    c->dead = 1;
}

/* Closes c and keeps its record (and chunks) for reuse. */
static void pconn_free(tu_proxy_t *p, struct tu_pconn *c)
{
    pconn_close(c);
    flow_clear(p, &c->up);
    flow_clear(p, &c->down);
    c->next = p->free_conns;
    p->free_conns = c;
}

static void proxy_close_all(tu_proxy_t *p)
{
    struct tu_pconn *c;

    while ((c = p->conns) != NULL) {
        p->conns = c->next;
        pconn_free(p, c);
    }
}

/* Gives the free lists back to the allocator (at stop). */
static void proxy_free_pools(tu_proxy_t *p)
{
    struct tu_chunk *k;
    struct tu_pconn *c;

    while ((k = p->free_chunks) != NULL) {
        p->free_chunks = k->next;
        free(k);
    }
    while ((c = p->free_conns) != NULL) {
        p->free_conns = c->next;
        free(c);
    }
}

static void proxy_sweep(tu_proxy_t *p)
{
    struct tu_pconn **pp = &p->conns, *c;

    while ((c = *pp) != NULL) {
        if (c->dead) {
            *pp = c->next;
            pconn_free(p, c);
        } else {
            pp = &c->next;
        }
    }
}

static int connect_server(const char *path)
{
    struct sockaddr_un sa;
    int fd;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));   /* length checked at start */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static void proxy_accept(tu_proxy_t *p)
{
    for (;;) {
        struct tu_pconn *c;
        int cfd, sfd = -1;

        cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return;   /* EAGAIN, or out of fds: try again at next poll */
        }
        pthread_mutex_lock(&p->lock);
        p->accepted++;
        if (p->resetting)
            p->refused++;
        pthread_mutex_unlock(&p->lock);
        if (p->resetting) {
            /* SO_LINGER 0: close() sends a RST, not a FIN. */
            struct linger lg = { 1, 0 };
            (void)setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            close(cfd);
            continue;
        }
        if (!p->holing && (sfd = connect_server(p->sock)) < 0) {
            /* Server down: the client sees EOF at once. */
            close(cfd);
            continue;
        }
        if ((c = p->free_conns) != NULL) {
            p->free_conns = c->next;
            memset(c, 0, sizeof(*c));
        } else if ((c = calloc(1, sizeof(*c))) == NULL) {
            if (sfd >= 0)
                close(sfd);
            close(cfd);
            continue;
        }
        c->cfd = cfd;
        c->sfd = sfd;
        c->holed = p->holing;
        c->next = p->conns;
        p->conns = c;
    }
}

/* Queues chunk c holding n bytes read now, due after the delay in effect,
 * never before the chunk queued last. */
static void flow_push(struct tu_flow *f, struct tu_chunk *c, size_t n,
                      long long delay, long long now)
{
    c->next = NULL;
    c->due = now + delay;
    if (c->due < f->last_due)
        c->due = f->last_due;
    f->last_due = c->due;
    c->off = 0;
    c->len = n;
    if (f->tail)
        f->tail->next = c;
    else
        f->head = c;
    f->tail = c;
    f->nchunks++;
    f->queued += n;
}

/* The source sent EOF: pass it on after the delay, behind the data. */
static void flow_set_eof(struct tu_flow *f, long long delay, long long now)
{
    f->eof = 1;
    f->eof_due = now + delay;
    if (f->eof_due < f->last_due)
        f->eof_due = f->last_due;
}

/* Write what is due in f to fd.  -1 on a fatal error. */
static int flow_flush(tu_proxy_t *p, struct tu_flow *f, int fd, long long now)
{
    struct tu_chunk *c;

    while ((c = f->head) != NULL && c->due <= now) {
        ssize_t n = send(fd, c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        c->off += (size_t)n;
        f->queued -= (size_t)n;
        if (c->off == c->len) {
            f->head = c->next;
            if (f->head == NULL)
                f->tail = NULL;
            f->nchunks--;
            chunk_put(p, c);
        }
    }
    if (f->head == NULL && f->eof && !f->shut && f->eof_due <= now) {
        (void)shutdown(fd, SHUT_WR);
        f->shut = 1;
    }
    return 0;
}

/* When f next has something to send that is not due yet; TU_NS_NEVER. */
static long long flow_next_due(const struct tu_flow *f, long long now)
{
    if (f->head != NULL)
        return f->head->due > now ? f->head->due : TU_NS_NEVER;
    if (f->eof && !f->shut && f->eof_due > now)
        return f->eof_due;
    return TU_NS_NEVER;
}

/* recv into buf.  >0 bytes, 0 EOF, -1 nothing now, -2 fatal */
static ssize_t recv_some(int fd, char *buf, size_t len)
{
    ssize_t n;

    do {
        n = recv(fd, buf, len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : -2;
    return n;
}

static int want_read(const struct tu_flow *f)
{
    return !f->eof && f->nchunks < TU_PROXY_QUEUE;
}

static int has_due(const struct tu_flow *f, long long now)
{
    return f->head != NULL && f->head->due <= now;
}

/* A connection during the blackhole: read both sides and discard.  The
 * client leaving closes it; the server leaving only closes the server side,
 * so that the client goes on seeing silence. */
static void pconn_swallow(tu_proxy_t *p, struct tu_pconn *c, short rc, short rs)
{
    char buf[TU_PROXY_BUF];
    ssize_t n;

    if (rc & (POLLERR | POLLNVAL)) {
        pconn_close(c);
        return;
    }
    if (rc & (POLLIN | POLLHUP)) {
        n = recv_some(c->cfd, buf, sizeof(buf));
        if (n == 0 || n == -2) {
            pconn_close(c);
            return;
        }
        if (n > 0) {
            pthread_mutex_lock(&p->lock);
            p->swallowed += (unsigned long long)n;
            pthread_mutex_unlock(&p->lock);
        }
    }
    if (c->sfd >= 0 && (rs & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
        n = (rs & (POLLERR | POLLNVAL)) ? -2 : recv_some(c->sfd, buf, sizeof(buf));
        if (n == 0 || n == -2) {
            close(c->sfd);
            c->sfd = -1;
        } else if (n > 0) {
            pthread_mutex_lock(&p->lock);
            p->swallowed += (unsigned long long)n;
            pthread_mutex_unlock(&p->lock);
        }
    }
}

/* recv from fd into a chunk from the pool.  >0 bytes (in *out), 0 EOF,
 * -1 nothing now, -2 fatal (or no memory). */
static ssize_t recv_chunk(tu_proxy_t *p, int fd, struct tu_chunk **out)
{
    struct tu_chunk *c = chunk_get(p);
    ssize_t n;

    *out = NULL;
    if (c == NULL)
        return -2;
    n = recv_some(fd, c->data, sizeof(c->data));
    if (n > 0)
        *out = c;
    else
        chunk_put(p, c);
    return n;
}

/* A connection outside the blackhole: forward, with the delay in effect,
 * and fire the armed one-shot faults. */
static void pconn_forward(tu_proxy_t *p, struct tu_pconn *c, short rc, short rs,
                          long long now)
{
    struct tu_chunk *k;
    ssize_t n;

    if ((rc | rs) & (POLLERR | POLLNVAL)) {
        pconn_close(c);
        return;
    }
    if (rc & POLLHUP)
        c->chup = 1;
    if (rs & POLLHUP)
        c->shup = 1;

    /* client -> server */
    if (want_read(&c->up) && (rc & (POLLIN | POLLHUP))) {
        n = recv_chunk(p, c->cfd, &k);
        if (n == -2) {
            pconn_close(c);
            return;
        }
        if (n == 0) {
            flow_set_eof(&c->up, p->delay, now);
        } else if (n > 0) {
            int action = 0;   /* 1 drop request, 2 drop reply */

            if (!c->drop_reply) {
                pthread_mutex_lock(&p->lock);
                if (p->arm_drop_request) {
                    p->arm_drop_request = 0;
                    p->fired++;
                    action = 1;
                } else if (p->arm_drop_reply) {
                    p->arm_drop_reply = 0;
                    p->fired++;
                    action = 2;
                }
                pthread_mutex_unlock(&p->lock);
            }
            if (action == 1) {
                chunk_put(p, k);
                pconn_close(c);
                return;
            }
            if (action == 2)
                c->drop_reply = 1;
            flow_push(&c->up, k, (size_t)n, p->delay, now);
        }
    }
    if (flow_flush(p, &c->up, c->sfd, now) != 0) {
        pconn_close(c);
        return;
    }

    /* server -> client */
    if (want_read(&c->down) && (rs & (POLLIN | POLLHUP))) {
        n = recv_chunk(p, c->sfd, &k);
        if (n == -2) {
            pconn_close(c);
            return;
        }
        if (c->drop_reply && n >= 0) {
            /* The reply (or EOF): discard it and hang up on both. */
            if (k)
                chunk_put(p, k);
            pconn_close(c);
            return;
        }
        if (n == 0)
            flow_set_eof(&c->down, p->delay, now);
        else if (n > 0)
            flow_push(&c->down, k, (size_t)n, p->delay, now);
    }
    if (flow_flush(p, &c->down, c->cfd, now) != 0) {
        pconn_close(c);
        return;
    }

    if (c->up.shut && c->down.shut)
        pconn_close(c);
}

static short events_for(const struct tu_flow *in, const struct tu_flow *out,
                        long long now)
{
    short ev = 0;

    if (want_read(in))
        ev |= POLLIN;
    if (has_due(out, now))
        ev |= POLLOUT;
    return ev;
}

static int proxy_grow_pfd(tu_proxy_t *p, size_t need)
{
    struct pollfd *n;
    size_t cap;

    if (need <= p->pfd_cap)
        return 0;
    cap = p->pfd_cap ? p->pfd_cap : 16;
    while (cap < need)
        cap *= 2;
    n = realloc(p->pfd, cap * sizeof(*n));
    if (n == NULL)
        return -1;
    p->pfd = n;
    p->pfd_cap = cap;
    return 0;
}

/* Puts the settings in effect (proxy thread, at the top of its loop). */
static void proxy_apply(tu_proxy_t *p, long delay_ms, int blackhole,
                        int reset_new)
{
    struct tu_pconn *c;

    p->delay = (long long)delay_ms * 1000000LL;
    p->resetting = reset_new;
    if (blackhole && !p->holing) {
        /* What is in flight is lost with the rest; a half-closed
         * connection is closed, its EOF being all that was left to say. */
        for (c = p->conns; c != NULL; c = c->next) {
            c->holed = 1;
            flow_clear(p, &c->up);
            flow_clear(p, &c->down);
            if (c->up.eof || c->down.eof)
                pconn_close(c);
        }
    } else if (!blackhole && p->holing) {
        for (c = p->conns; c != NULL; c = c->next)
            if (c->holed)
                pconn_close(c);
    }
    p->holing = blackhole;
    proxy_sweep(p);
}

static void *proxy_main(void *arg)
{
    tu_proxy_t *p = arg;
    unsigned long reset_seen = 0;

    for (;;) {
        struct tu_pconn *c;
        size_t nconn = 0, i;
        unsigned long reset_req, sync_req;
        long delay_ms;
        long long now, next = TU_NS_NEVER;
        struct timespec ts, *tsp = NULL;
        int stop, rc, blackhole, reset_new;

        pthread_mutex_lock(&p->lock);
        stop = p->stop;
        reset_req = p->reset_req;
        sync_req = p->sync_req;
        delay_ms = p->delay_ms;
        blackhole = p->blackhole;
        reset_new = p->reset_new;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            break;
        if (reset_req != reset_seen)
            proxy_close_all(p);
        proxy_apply(p, delay_ms, blackhole, reset_new);
        pthread_mutex_lock(&p->lock);
        reset_seen = reset_req;
        p->reset_done = reset_req;
        p->sync_done = sync_req;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);

        for (c = p->conns; c != NULL; c = c->next)
            nconn++;
        if (proxy_grow_pfd(p, 2 + 2 * nconn) != 0) {
            /* Out of memory: shed the connections rather than spin. */
            proxy_close_all(p);
            nconn = 0;
            if (proxy_grow_pfd(p, 2) != 0) {
                tu_sleep_ms(10);
                continue;
            }
        }
        p->pfd[0].fd = p->wake[0];
        p->pfd[0].events = POLLIN;
        p->pfd[1].fd = p->lfd;
        p->pfd[1].events = POLLIN;
        now = now_ns();
        for (c = p->conns, i = 2; c != NULL; c = c->next, i += 2) {
            struct pollfd *pc = &p->pfd[i], *ps = &p->pfd[i + 1];
            long long d;

            pc->fd = c->cfd;
            ps->fd = c->sfd;   /* -1 (none) is ignored by poll */
            if (p->holing) {
                pc->events = POLLIN;
                ps->events = POLLIN;
                continue;
            }
            pc->events = events_for(&c->up, &c->down, now);
            ps->events = events_for(&c->down, &c->up, now);
            /* A hung-up fd we have no interest in would wake us forever. */
            if (pc->events == 0 && c->chup)
                pc->fd = -1;
            if (ps->events == 0 && c->shup)
                ps->fd = -1;
            if ((d = flow_next_due(&c->up, now)) < next)
                next = d;
            if ((d = flow_next_due(&c->down, now)) < next)
                next = d;
        }
        for (i = 0; i < 2 + 2 * nconn; i++)
            p->pfd[i].revents = 0;
        if (next != TU_NS_NEVER) {
            long long wait = next - now;
            ts.tv_sec = (time_t)(wait / 1000000000LL);
            ts.tv_nsec = (long)(wait % 1000000000LL);
            tsp = &ts;
        }

        rc = ppoll(p->pfd, (nfds_t)(2 + 2 * nconn), tsp, NULL);
        if (rc < 0) {
            if (errno != EINTR)
                tu_sleep_ms(1);
            continue;
        }

        if (p->pfd[0].revents & POLLIN) {
            char buf[64];
            while (read(p->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        /* Connections first (the pfd slots follow the list), then accept. */
        now = now_ns();
        for (c = p->conns, i = 2; c != NULL && i < 2 + 2 * nconn;
             c = c->next, i += 2) {
            if (p->holing)
                pconn_swallow(p, c, p->pfd[i].revents, p->pfd[i + 1].revents);
            else
                pconn_forward(p, c, p->pfd[i].revents, p->pfd[i + 1].revents,
                              now);
        }
        proxy_sweep(p);
        if (p->pfd[1].revents & POLLIN)
            proxy_accept(p);
    }
    proxy_close_all(p);
    return NULL;
}

static void proxy_sync_locked(tu_proxy_t *p);

tu_proxy_t *tu_proxy_start(tu_redis_t *r)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    tu_proxy_t *p;
    int err, i;

    if (r == NULL || r->sock[0] == '\0') {
        fprintf(stderr, "testutil: proxy: server not started\n");
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        fprintf(stderr, "testutil: proxy: out of memory\n");
        return NULL;
    }
    p->lfd = p->wake[0] = p->wake[1] = -1;
    if (strlen(r->sock) >= sizeof(p->sock)) {
        fprintf(stderr, "testutil: proxy: socket path too long\n");
        free(p);
        return NULL;
    }
    memcpy(p->sock, r->sock, strlen(r->sock) + 1);
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cond, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }

    if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "testutil: proxy: pipe: %s\n", strerror(errno));
        goto fail;
    }
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (p->lfd < 0) {
        fprintf(stderr, "testutil: proxy: socket: %s\n", strerror(errno));
        goto fail;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(p->lfd, 128) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "testutil: proxy: listen on 127.0.0.1: %s\n",
                strerror(errno));
        goto fail;
    }
    p->port = ntohs(sa.sin_port);

    /* What the thread needs at first, made here rather than by it (see
     * struct tu_chunk): a test may fork() as soon as this returns. */
    if (proxy_grow_pfd(p, TU_PROXY_PFD) != 0)
        goto nomem;
    for (i = 0; i < TU_PROXY_WARM; i++) {
        struct tu_chunk *k = malloc(sizeof(*k));
        struct tu_pconn *c = calloc(1, sizeof(*c));

        if (k == NULL || c == NULL) {
            free(k);
            free(c);
            goto nomem;
        }
        chunk_put(p, k);
        c->next = p->free_conns;
        p->free_conns = c;
    }

    err = pthread_create(&p->thread, NULL, proxy_main, p);
    if (err != 0) {
        fprintf(stderr, "testutil: proxy: pthread_create: %s\n", strerror(err));
        goto fail;
    }
    p->thread_started = 1;
    /* and it returns once the thread runs (its own start-up allocates) */
    pthread_mutex_lock(&p->lock);
    proxy_sync_locked(p);
    pthread_mutex_unlock(&p->lock);
    return p;

nomem:
    fprintf(stderr, "testutil: proxy: out of memory\n");

fail:
    tu_proxy_stop(p);
    return NULL;
}

int tu_proxy_port(tu_proxy_t *p)
{
    return p ? p->port : -1;
}

void tu_proxy_drop_next_reply(tu_proxy_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->arm_drop_reply = 1;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
}

void tu_proxy_drop_next_request(tu_proxy_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->arm_drop_request = 1;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
}

void tu_proxy_reset_all(tu_proxy_t *p)
{
    unsigned long want;

    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    want = ++p->reset_req;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
    pthread_mutex_lock(&p->lock);
    while (p->reset_done < want && !p->stop)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* Waits until the thread has put the settings changed so far in effect.
 * p->lock held on entry and on return. */
static void proxy_sync_locked(tu_proxy_t *p)
{
    unsigned long want = ++p->sync_req;

    if (!p->thread_started)
        return;
    pthread_mutex_unlock(&p->lock);
    proxy_wake(p);
    pthread_mutex_lock(&p->lock);
    while (p->sync_done < want && !p->stop)
        pthread_cond_wait(&p->cond, &p->lock);
}

void tu_proxy_set_delay(tu_proxy_t *p, long ms)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->delay_ms = ms > 0 ? ms : 0;
    proxy_sync_locked(p);
    pthread_mutex_unlock(&p->lock);
}

void tu_proxy_blackhole(tu_proxy_t *p, int on)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->blackhole = on != 0;
    proxy_sync_locked(p);
    pthread_mutex_unlock(&p->lock);
}

void tu_proxy_reset_new(tu_proxy_t *p, int on)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->reset_new = on != 0;
    proxy_sync_locked(p);
    pthread_mutex_unlock(&p->lock);
}

unsigned long tu_proxy_connections(tu_proxy_t *p)
{
    unsigned long n;

    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    n = p->accepted;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned long tu_proxy_faults_fired(tu_proxy_t *p)
{
    unsigned long n;

    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    n = p->fired;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned long long tu_proxy_swallowed(tu_proxy_t *p)
{
    unsigned long long n;

    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    n = p->swallowed;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned long tu_proxy_refused(tu_proxy_t *p)
{
    unsigned long n;

    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    n = p->refused;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void tu_proxy_stop(tu_proxy_t *p)
{
    if (p == NULL)
        return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->lock);
        p->stop = 1;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        proxy_wake(p);
        pthread_join(p->thread, NULL);
    }
    proxy_close_all(p);
    proxy_free_pools(p);
    free(p->pfd);
    if (p->lfd >= 0)
        close(p->lfd);
    if (p->wake[0] >= 0)
        close(p->wake[0]);
    if (p->wake[1] >= 0)
        close(p->wake[1]);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
