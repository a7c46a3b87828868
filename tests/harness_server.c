/*
 * harness_server: private redis-server processes for the tests: start,
 * restart, crash, stop, and the cached admin connection of tu_cmdv.
 * See harness_server.h for the contract of each function.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness_int.h"

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

#define TU_START_TRIES      10
#define TU_READY_TIMEOUT    10.0 /* seconds to wait for a started server */
#define TU_TERM_GRACE       5.0  /* seconds between SIGTERM and SIGKILL */
#define TU_ADMIN_TIMEOUT_MS 1000
#define TU_PROBE_TIMEOUT_MS 250

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
    pid_t pid;          /* 0: not running */
    redisContext *conn; /* cached admin connection */
    /* What tu_redis_start_opts asked for, kept for tu_redis_restart.
     * Written before the server first starts, read only afterwards. */
    char conf[300]; /* config file passed first; "" none */
    char **args;    /* extra arguments (NULL-terminated) or NULL */
    int (*pick_port)(void);
    char *tls[3]; /* cert, key, CA of a TLS listener; NULLs none */
    int tls_auth; /* --tls-auth-clients yes */
    int tls_port; /* its port, picked with each new plain port */
};

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_reg_cond = PTHREAD_COND_INITIALIZER;
static struct tu_srv *g_reg;
static unsigned long g_reg_next_id = 1;
static pid_t g_reg_owner; /* last process that registered (atomic) */
static pthread_once_t g_atexit_once = PTHREAD_ONCE_INIT;

static void atexit_cleanup(void)
{
    tu_redis_stop_all();
}

static void install_atexit(void)
{
    if (atexit(atexit_cleanup) != 0)
        fprintf(stderr, "harness: atexit failed; servers will not be "
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

/* r's entry, or NULL if it is gone.  Caller holds g_reg_lock. */
static struct tu_srv *srv_find_locked(const tu_redis_t *r)
{
    struct tu_srv *e;

    for (e = g_reg; e != NULL; e = e->next)
        if (e->id == r->reg_id && e->creator == r->creator_pid)
            return e;
    return NULL;
}

/* Find r's entry and take a reference on it; NULL if it is gone. */
static struct tu_srv *srv_get(const tu_redis_t *r)
{
    struct tu_srv *e;

    if (r == NULL || r->reg_id == 0)
        return NULL;
    pthread_mutex_lock(&g_reg_lock);
    e = srv_find_locked(r);
    if (e != NULL)
        e->refs++;
    pthread_mutex_unlock(&g_reg_lock);
    return e;
}

/* The server is going down: forget its pid and its admin connection.
 * Returns the pid it had (0: none). */
static pid_t srv_take_pid(struct tu_srv *e)
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
    return pid;
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
/* Processes                                                                */
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
            return; /* ECHILD: reaped by someone else */
        if (w == 0 && tu_now() > deadline) {
            (void)kill(pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
            return;
        }
        tu_sleep_ms(2);
    }
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
    kill_and_reap(srv_take_pid(e), SIGKILL, 0);
    hx_remove_dir(e->dir);
    pthread_mutex_destroy(&e->lock);
    free_args(e->args);
    free(e->tls[0]);
    free(e->tls[1]);
    free(e->tls[2]);
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
    SPAWN_PORT_TAKEN, /* retry with another port */
    SPAWN_FAILED      /* give up */
};

static const char *server_program(void)
{
    const char *p = getenv("REDIS_SERVER");
    return (p != NULL && p[0] != '\0') ? p : "redis-server";
}

/* What the child of spawn_server needs, all made before fork() so that the
 * child only makes async-signal-safe calls. */
struct spawn_plan {
    const char *prog;
    const char **argv;
    char portstr[16];
    char tlsportstr[16];
    char dirarg[sizeof(((tu_redis_t *)0)->dir)];
    int nullfd, logfd;
    int deathsig; /* PR_SET_PDEATHSIG: started from the main thread */
    pid_t parent;
    long maxfd;
};

/* The redis-server command line of r on port (plan->argv, malloc'd). */
static int plan_argv(struct spawn_plan *pl, const tu_redis_t *r,
                     const struct tu_srv *e, int port, const char *logpath)
{
    const char **argv;
    size_t nextra = 0, i;
    int argc = 0;

    snprintf(pl->portstr, sizeof(pl->portstr), "%d", port);
    snprintf(pl->dirarg, sizeof(pl->dirarg), "%s", r->dir);
    while (e->args != NULL && e->args[nextra] != NULL)
        nextra++;
    argv = malloc(sizeof(*argv) * (48 + nextra));
    if (argv == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        return -1;
    }
    argv[argc++] = pl->prog;
    if (e->conf[0] != '\0')
        argv[argc++] = e->conf; /* redis-server wants it first */
    argv[argc++] = "--port";
    argv[argc++] = pl->portstr;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--unixsocket";
    argv[argc++] = r->sock;
    argv[argc++] = "--unixsocketperm";
    argv[argc++] = "700";
    argv[argc++] = "--dir";
    argv[argc++] = pl->dirarg;
    argv[argc++] = "--save";
    argv[argc++] = "";
    argv[argc++] = "--appendonly";
    argv[argc++] = "no";
    argv[argc++] = "--daemonize";
    argv[argc++] = "no";
    argv[argc++] = "--protected-mode";
    argv[argc++] = "no";
    argv[argc++] = "--logfile";
    argv[argc++] = logpath;
    argv[argc++] = "--databases";
    argv[argc++] = "16";
    if (e->tls[0] != NULL) {
        snprintf(pl->tlsportstr, sizeof(pl->tlsportstr), "%d", e->tls_port);
        argv[argc++] = "--tls-port";
        argv[argc++] = pl->tlsportstr;
        argv[argc++] = "--tls-cert-file";
        argv[argc++] = e->tls[0];
        argv[argc++] = "--tls-key-file";
        argv[argc++] = e->tls[1];
        argv[argc++] = "--tls-ca-cert-file";
        argv[argc++] = e->tls[2];
        argv[argc++] = "--tls-auth-clients";
        argv[argc++] = e->tls_auth ? "yes" : "no";
    }
    for (i = 0; i < nextra; i++)
        argv[argc++] = e->args[i];
    argv[argc] = NULL;
    pl->argv = argv;
    return 0;
}

/* stdin on /dev/null, stdout and stderr appended to the log.  0 or -1. */
static int plan_files(struct spawn_plan *pl, const char *logpath)
{
    pl->nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (pl->nullfd < 0) {
        fprintf(stderr, "harness: open /dev/null: %s\n", strerror(errno));
        return -1;
    }
    pl->logfd =
        open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (pl->logfd < 0) {
        fprintf(stderr, "harness: open redis log: %s\n", strerror(errno));
        close(pl->nullfd);
        return -1;
    }
    return 0;
}

/* In the child of fork(): async-signal-safe calls only. */
static void exec_server(const struct spawn_plan *pl)
{
    static const char msg[] = "harness: cannot exec redis-server "
                              "(set REDIS_SERVER or PATH)\n";
    sigset_t none;
    int n, l;
    long fd;

    if (pl->deathsig) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != pl->parent)
            _exit(126);
    }
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    /* Move both out of the way of 0..2 first (F_DUPFD clears FD_CLOEXEC
     * on the copy). */
    n = fcntl(pl->nullfd, F_DUPFD, 3);
    l = fcntl(pl->logfd, F_DUPFD, 3);
    if (n < 0 || l < 0)
        _exit(126);
    if (dup2(n, 0) < 0 || dup2(l, 1) < 0 || dup2(l, 2) < 0)
        _exit(126);
    /* Do not let the server inherit the test's sockets (a proxy or client
     * fd kept open by the server would hide EOFs). */
    if (close_range(3, ~0U, 0) != 0) {
        for (fd = 3; fd < pl->maxfd; fd++)
            (void)close((int)fd);
    }
    execvp(pl->prog, (char *const *)pl->argv);
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(127);
}

/* fork + exec redis-server for r on port.  Its pid, or -1. */
static pid_t spawn_server(const tu_redis_t *r, const struct tu_srv *e,
                          int port, const char *logpath)
{
    struct spawn_plan pl;
    struct rlimit rl;
    pid_t pid;

    memset(&pl, 0, sizeof(pl));
    pl.prog = server_program();
    pl.deathsig = gettid() == getpid();
    pl.parent = getpid();
    pl.maxfd = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        pl.maxfd = rl.rlim_cur > 1048576 ? 1048576 : (long)rl.rlim_cur;
    if (plan_argv(&pl, r, e, port, logpath) != 0)
        return -1;
    if (plan_files(&pl, logpath) != 0) {
        free(pl.argv);
        return -1;
    }
    pid = fork();
    if (pid == 0)
        exec_server(&pl);
    if (pid < 0)
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
    close(pl.nullfd);
    close(pl.logfd);
    free(pl.argv);
    return pid;
}

/* INFO server process_id over c; 0 if it could not be read. */
static long info_pid(redisContext *c)
{
    static const char *argv[] = { "INFO", "server" };
    redisReply *reply = hx_command(c, 2, argv, NULL);
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
    redisContext *c = hx_connect(sock, port, TU_PROBE_TIMEOUT_MS, NULL, 0);
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
            log = hx_read_from(logpath, logoff);
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
                log = hx_read_from(logpath, logoff);
                break;
            }
        } else if (u == -1) {
            what = "another server answers on our private unix socket";
            kill_and_reap(pid, SIGKILL, 0);
            log = hx_read_from(logpath, logoff);
            break;
        }
        if (tu_now() > deadline) {
            what = "redis-server not ready in time";
            kill_and_reap(pid, SIGKILL, 0);
            log = hx_read_from(logpath, logoff);
            break;
        }
        tu_sleep_ms(sleep_ms);
        if (sleep_ms < 20)
            sleep_ms *= 2;
    }

    if (res == SPAWN_PORT_TAKEN && !restarting) {
        fprintf(stderr, "harness: 127.0.0.1:%d: %s, trying another port\n",
                port, what);
    } else if (res == SPAWN_PORT_TAKEN) {
        fprintf(stderr,
                "harness: restart: port %d was taken by another "
                "process while the server was down (%s)\n",
                port, what);
        if (log != NULL)
            hx_print_tail(log, 20);
        res = SPAWN_FAILED;
    } else {
        fprintf(stderr, "harness: %s (port %d)\n", what, port);
        if (log != NULL)
            hx_print_tail(log, 20);
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
    logoff = hx_file_size(logpath);
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
    r->tls_port = e->tls[0] != NULL ? e->tls_port : 0;
    snprintf(r->url_tcp, sizeof(r->url_tcp), "redis://127.0.0.1:%d", port);
    return SPAWN_OK;
}

/* Record o in e (config file written into the dir, arguments copied). */
static int srv_set_opts(struct tu_srv *e, const tu_redis_t *r,
                        const tu_redis_opts *o)
{
    size_t n = 0, i;

    if (o == NULL)
        return 0;
    e->pick_port = o->pick_port;
    if (o->tls != NULL) {
        e->tls[0] = strdup(o->tls->cert);
        e->tls[1] = strdup(o->tls->key);
        e->tls[2] = strdup(o->tls->ca);
        e->tls_auth = o->tls->auth_clients;
        if (!e->tls[0] || !e->tls[1] || !e->tls[2]) {
            fprintf(stderr, "harness: out of memory\n");
            return -1;
        }
    }
    if (o->conf != NULL) {
        int len = snprintf(e->conf, sizeof(e->conf), "%s/redis.conf", r->dir);
        if (len < 0 || (size_t)len >= sizeof(e->conf)) {
            fprintf(stderr, "harness: config file path too long\n");
            return -1;
        }
        if (hx_write_file(e->conf, o->conf) != 0)
            return -1;
    }
    if (o->args == NULL)
        return 0;
    while (o->args[n] != NULL)
        n++;
    e->args = calloc(n + 1, sizeof(*e->args));
    if (e->args == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        return -1;
    }
    for (i = 0; i < n; i++) {
        e->args[i] = strdup(o->args[i]);
        if (e->args[i] == NULL) {
            fprintf(stderr, "harness: out of memory\n");
            return -1; /* srv_destroy frees what was copied */
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
    if (hx_make_dir(r) != 0)
        return -1;
    e = srv_new(r->dir);
    if (e == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        hx_remove_dir(r->dir);
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
                   : e->pick_port != NULL     ? e->pick_port()
                                              : tu_free_port();
        enum spawn_result res;

        /* a TLS port taken meanwhile fails the start as a taken plain
         * port does: both are picked again */
        if (e->tls[0] != NULL && (e->tls_port = tu_free_port()) == port)
            e->tls_port = tu_free_port();
        if (port <= 0 || (e->tls[0] != NULL && e->tls_port <= 0)) {
            fprintf(stderr, "harness: no free port\n");
            break;
        }
        res = start_once(r, e, port, 0);
        if (res == SPAWN_OK)
            return 0;
        if (res == SPAWN_FAILED)
            break;
    }
    if (i == TU_START_TRIES)
        fprintf(stderr, "harness: no usable port after %d tries\n", i);
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

/* Our server r going down (op names the call in messages): its entry,
 * with a reference taken, and the pid it had in *pid; NULL with a message
 * when r is not a server this process started. */
static struct tu_srv *srv_take_own(tu_redis_t *r, const char *op, pid_t *pid)
{
    struct tu_srv *e;

    if (r == NULL || r->creator_pid != getpid()) {
        fprintf(stderr, "harness: %s: not our server\n", op);
        return NULL;
    }
    e = srv_get(r);
    if (e == NULL) {
        fprintf(stderr, "harness: %s: server not started\n", op);
        return NULL;
    }
    *pid = srv_take_pid(e);
    r->pid = 0;
    return e;
}

int tu_redis_restart(tu_redis_t *r)
{
    struct tu_srv *e;
    pid_t old;
    int rc;

    if ((e = srv_take_own(r, "restart", &old)) == NULL)
        return -1;
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
        return; /* a forked child: the server is the parent's */
    if (r->reg_id != 0) {
        pthread_mutex_lock(&g_reg_lock);
        e = srv_find_locked(r);
        if (e != NULL)
            srv_unlink_locked(e); /* waits for users to let go */
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
        pid = r->pid; /* forked child: trust the snapshot */
    }
    if (pid <= 0) {
        fprintf(stderr, "harness: signal: server not running\n");
        return -1;
    }
    if (kill(pid, sig) != 0) {
        fprintf(stderr, "harness: kill %d: %s\n", (int)pid, strerror(errno));
        return -1;
    }
    return 0;
}

int tu_redis_kill(tu_redis_t *r)
{
    struct tu_srv *e;
    pid_t pid;

    if ((e = srv_take_own(r, "kill", &pid)) == NULL)
        return -1;
    srv_put(e);
    if (pid <= 0) {
        fprintf(stderr, "harness: kill: server not running\n");
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
    log = hx_read_from(path, 0);
    if (log != NULL) {
        fprintf(stderr, "harness: %s:\n", path);
        hx_print_tail(log, lines > 0 ? lines : 20);
    }
    free(log);
}

redisContext *tu_redis_admin(tu_redis_t *r)
{
    redisContext *c;
    char err[160];

    if (r == NULL || r->sock[0] == '\0') {
        fprintf(stderr, "harness: admin: server not started\n");
        return NULL;
    }
    c = hx_connect(r->sock, 0, TU_ADMIN_TIMEOUT_MS, err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "harness: %s: %s\n", r->sock, err);
    return c;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */
/* ------------------------------------------------------------------------ */

/* One command on *c.  After an I/O error *c is freed and NULL: its state
 * is unknown, it is never used again. */
static redisReply *send_on(redisContext **c, int argc,
                           const char *const *argv, const size_t *argvlen)
{
    redisReply *reply = hx_command(*c, argc, (const char **)argv, argvlen);

    if (reply == NULL) {
        hx_cmd_error(argv[0], (*c)->errstr[0] ? (*c)->errstr : "I/O error");
        redisFree(*c);
        *c = NULL;
    }
    return reply;
}

redisReply *tu_cmdv(tu_redis_t *r, int argc, const char *const *argv,
                    const size_t *argvlen)
{
    redisReply *reply = NULL;
    struct tu_srv *e;

    if (r == NULL || argc <= 0 || argv == NULL) {
        hx_cmd_error(NULL, "bad arguments");
        return NULL;
    }
    if (r->reg_id == 0) {
        hx_cmd_error(argv[0], "server not started");
        return NULL;
    }
    if (r->creator_pid != getpid()) {
        /* Forked child: fresh connection, no locks, no shared state. */
        redisContext *c = tu_redis_admin(r);

        if (c != NULL)
            reply = send_on(&c, argc, argv, argvlen);
        if (c != NULL)
            redisFree(c);
        return reply;
    }
    e = srv_get(r);
    if (e == NULL) {
        hx_cmd_error(argv[0], "server not running");
        return NULL;
    }
    pthread_mutex_lock(&e->lock);
    if (e->pid <= 0) {
        hx_cmd_error(argv[0], "server not running");
    } else {
        if (e->conn != NULL && e->conn->err) {
            redisFree(e->conn);
            e->conn = NULL;
        }
        if (e->conn == NULL)
            e->conn = tu_redis_admin(r);
        if (e->conn != NULL)
            reply = send_on(&e->conn, argc, argv, argvlen);
    }
    pthread_mutex_unlock(&e->lock);
    srv_put(e);
    return reply;
}
