/*
 * harness_server: a private redis-server for the distlock test programs.
 *
 * Plain C, no cmocka: every function reports failure through its return
 * value and prints one line saying why on stderr.  Link with hiredis and
 * -pthread (tests/libharness.la).  The rest of the harness builds on it:
 * harness_proxy.h (a fault proxy in front of one server),
 * harness_cluster.h and harness_sentinel.h (HA topologies of servers).
 *
 * What it gives:
 *   - a private redis-server owned by the test process (tu_redis_*), talking
 *     on 127.0.0.1:<port> and on a unix socket inside a private temp dir
 *     (harness_server.c);
 *   - one-shot commands against that server (tu_cmd*, harness_cmd.c);
 *   - small clock / sleep / port helpers (harness_util.c).
 *
 * Thread safety
 *   tu_now, tu_sleep_ms, tu_free_port: any thread, any time.
 *   tu_cmd*, tu_redis_admin, tu_redis_signal: any thread, concurrently, also
 *     on the same server (commands sharing the cached admin connection are
 *     serialised by a mutex).
 *   tu_redis_start: concurrently on different tu_redis_t.
 *   tu_redis_restart, tu_redis_stop: not concurrently with any other call
 *     that uses the same tu_redis_t (they rewrite the struct).  Commands
 *     sent by other threads while a restart is in progress fail cleanly
 *     (NULL / -1) rather than crash.
 *
 * fork()
 *   A forked child may use tu_cmd* and tu_redis_admin on the parent's
 *   servers: it never touches the parent's cached connection nor any lock;
 *   it opens a fresh connection for each command.  tu_redis_stop,
 *   tu_redis_restart and tu_redis_stop_all do nothing in a process other
 *   than the one that started the server, and the atexit clean-up of a
 *   child that calls exit() leaves the parent's servers alone.
 *
 * Signals
 *   Commands sent by the harness block SIGPIPE in the calling thread while
 *   they run (and swallow the SIGPIPE they caused), so writing to a dead
 *   server never kills the test.  The proxy uses MSG_NOSIGNAL.  Do not set
 *   SIGCHLD to SIG_IGN nor reap with waitpid(-1, ...): the harness waits
 *   for its own redis-server children by pid.
 */
#ifndef DISTLOCK_HARNESS_SERVER_H
#define DISTLOCK_HARNESS_SERVER_H

#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define TU_SENTINEL    __attribute__((sentinel))
#define TU_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define TU_SENTINEL
#define TU_WARN_UNUSED
#endif

/* ------------------------------------------------------------------------ */
/* Private redis-server                                                     */
/* ------------------------------------------------------------------------ */

/*
 * A private redis-server owned by this test process.  All fields are read
 * only for the caller.  Before tu_redis_start the struct may hold anything;
 * after tu_redis_start (successful or not) and after tu_redis_stop it is in
 * a defined state, and tu_redis_stop on it is always safe.  A zero-filled
 * struct is "stopped" as well.
 */
typedef struct tu_redis {
    char dir[256];      /* private temp dir (mkdtemp under $TMPDIR or /tmp) */
    char sock[300];     /* unix socket path inside dir ("<dir>/redis.sock") */
    int port;           /* TCP port on 127.0.0.1 it listens on */
    pid_t pid;          /* the server's pid (our child, not daemonized);
                             0 while it is not running */
    char url_unix[512]; /* "unix://<sock>" */
    char url_tcp[64];   /* "redis://127.0.0.1:<port>" */
    int tls_port;       /* TLS on 127.0.0.1 (tu_redis_opts.tls); 0 none */
    /* private */
    pid_t creator_pid; /* process that started it (fork guard) */
    unsigned long
        reg_id; /* key in the registry of started servers; 0: none */
} tu_redis_t;

/*
 * Start a server: make the private dir, pick a free port, run
 *   redis-server --port P --bind 127.0.0.1 --unixsocket <dir>/redis.sock
 *     --unixsocketperm 700 --dir <dir> --save "" --appendonly no
 *     --daemonize no --protected-mode no --logfile <dir>/redis.log
 *     --databases 16
 * as our child (the program is $REDIS_SERVER if set and not empty, else
 * "redis-server" looked up on PATH), with stdin on /dev/null and
 * stdout/stderr appended to <dir>/redis.log, then wait (up to ~10 s) until
 * INFO server over both the unix socket and 127.0.0.1:P reports the child's
 * pid as process_id.  If the port turns out to be taken (the server exits
 * with "Address already in use", or another process answers on it) the
 * child is killed and another port is tried, up to 10 times.
 *
 * When called from the main thread the server also gets PR_SET_PDEATHSIG
 * SIGKILL, so it dies with the test process even on abort() or SIGKILL.
 * (Not from other threads: that signal fires when the creating *thread*
 * exits.)
 *
 * Every started server is registered; an atexit handler (and
 * tu_redis_stop_all) kills and removes whatever is still running.  After a
 * crash that skips atexit (abort, SIGKILL) the server still dies (from the
 * main thread, see above) but its temp dir "distlock-test-XXXXXX" stays.
 * Returns 0, or -1 with a message (and the tail of the server's log) on
 * stderr; on failure nothing is left behind and r is "stopped".
 */
int tu_redis_start(tu_redis_t *r);

/* The same, but try first_port first (0: pick one).  Mainly to test the
 * retry logic: a taken first_port makes it fall back to free ports. */
int tu_redis_start_port(tu_redis_t *r, int first_port);

/*
 * Extra settings for tu_redis_start_opts (used by the Cluster and Sentinel
 * harnesses for their nodes).  A zero-filled struct means plain tu_redis_start.  They
 * are copied: the caller's strings may go away after the call.  Restarts
 * (tu_redis_restart) use them again.
 */
typedef struct tu_redis_opts {
    /* If not NULL: written to <dir>/redis.conf before the first start, and
     * that file is passed as the first argument (before the options above),
     * e.g. "sentinel monitor ..." text.  The server may rewrite it (Sentinel
     * does); a restart uses it as rewritten. */
    const char *conf;
    /* NULL-terminated extra arguments appended after the standard ones
     * (later ones win), e.g. {"--cluster-enabled", "yes", NULL}. */
    const char *const *args;
    /* Port chooser for each attempt (a port <= 0 gives up); NULL:
     * tu_free_port.  E.g. one that also keeps port+10000 free. */
    int (*pick_port)(void);
    /* If not NULL: the server also listens for TLS, on r->tls_port (a
     * free port picked with the plain one, kept across restarts), with
     * these files (copied). */
    const struct tu_tls_conf *tls;
} tu_redis_opts;

/* A TLS listener's files (PEM paths) and whether it wants client
 * certificates (--tls-auth-clients yes). */
typedef struct tu_tls_conf {
    const char *cert, *key; /* the server's certificate and key */
    const char *ca;         /* the CA client certificates are checked
                               * against (Redis wants one even when it
                               * does not ask for them) */
    int auth_clients;
} tu_tls_conf;

/* tu_redis_start with extra settings (o may be NULL).  Same contract:
 * readiness checked by pid, another port tried when one is taken. */
int tu_redis_start_opts(tu_redis_t *r, const tu_redis_opts *o);

/*
 * Crash the server: SIGKILL and reap it.  Unlike tu_redis_stop the dir, the
 * port and the registry entry stay, so tu_redis_restart brings it back on
 * the same port (with whatever files it left in its dir, e.g. a cluster's
 * nodes.conf) and tu_redis_stop still cleans up.  r->pid becomes 0; commands
 * fail until a restart.  0, or -1 if it was not running (or in a forked
 * child).
 */
int tu_redis_kill(tu_redis_t *r);

/* Print the last `lines` lines (0: 20) of the server's log on stderr. */
void tu_redis_print_log(const tu_redis_t *r, int lines);

/*
 * Stop the server (SIGTERM, and SIGCONT in case it is stopped; SIGKILL after
 * 5 s), wait for it, and start it again on the SAME port and socket path, so
 * the URLs stay valid.  No persistence: all data is gone.  r->pid changes.
 * The cached admin connection is dropped.  If the port was taken by someone
 * else meanwhile it fails (no other port is tried) and says so.  On failure
 * r->pid is 0 and the dir is kept until tu_redis_stop.  Also brings back a
 * server crashed with tu_redis_kill.
 * Returns 0 or -1 (message on stderr).
 */
int tu_redis_restart(tu_redis_t *r);

/* SIGKILL the server, reap it, remove the temp dir recursively, and leave r
 * "stopped" (fields zeroed).  Idempotent; a no-op for a zeroed struct or one
 * already cleaned up by tu_redis_stop_all.  In a forked child it does
 * nothing (the server belongs to the parent). */
void tu_redis_stop(tu_redis_t *r);

/* Stop every server this process started and has not stopped yet.  Also
 * run from an atexit handler.  Afterwards tu_redis_stop on their structs is
 * a harmless no-op; other calls on them fail.  Call it when no other thread
 * is using those servers. */
void tu_redis_stop_all(void);

/* kill(r->pid, sig), e.g. SIGSTOP / SIGCONT.  0, or -1 if the server is not
 * running or kill fails. */
int tu_redis_signal(tu_redis_t *r, int sig);

/* A new hiredis connection over the unix socket, 1 s connect and command
 * timeouts, FD_CLOEXEC.  The caller frees it with redisFree().  NULL on
 * error (message on stderr). */
redisContext *tu_redis_admin(tu_redis_t *r) TU_WARN_UNUSED;

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Run one command, given as a NULL-terminated list of C strings, e.g.
 *   redisReply *x = tu_cmd(r, "HGET", key, field, NULL);
 * Arguments are sent binary-safe (redisCommandArgv, no format parsing), so
 * '%' or spaces in them are fine; for arguments containing NUL bytes use
 * tu_cmdv.
 *
 * Uses a cached admin connection (unix socket, 1 s timeouts), opened on
 * first use and reopened after an I/O error or a restart; in a forked child
 * a fresh connection per command.  The server must be running: a SIGSTOPped
 * server makes the call fail after the 1 s timeout.
 *
 * Returns the reply, including error replies (type REDIS_REPLY_ERROR), for
 * the caller to freeReplyObject(); NULL on connection / I/O failure or if
 * the server is not running (message on stderr).  Note that after an I/O
 * failure it is unknown whether the command ran.
 */
redisReply *tu_cmd(tu_redis_t *r, const char *arg0,
                   ...) TU_SENTINEL TU_WARN_UNUSED;

/* The same with an argument vector; argvlen may be NULL (then strlen). */
redisReply *tu_cmdv(tu_redis_t *r, int argc, const char *const *argv,
                    const size_t *argvlen) TU_WARN_UNUSED;

/*
 * Integer result of a command (NULL-terminated argument list as tu_cmd):
 *   - integer reply                            -> its value;
 *   - bulk/status reply that is entirely a base-10 long long (optional
 *     leading '-'), e.g. GET of a counter       -> that number;
 *   - nil reply                                -> -1, silently;
 *   - anything else (error reply, non-numeric string, array, I/O failure,
 *     server not running)                      -> -1, with a line on stderr.
 * -1 is ambiguous when the real answer may be -1 (TTL of a key without
 * expiry, ...): use tu_cmd_int_ex then.
 */
long long tu_cmd_int(tu_redis_t *r, const char *arg0, ...) TU_SENTINEL;

/* Unambiguous variant: returns 0 and stores the number in *out (same
 * conversions as tu_cmd_int), 1 for a nil reply (*out untouched), -1 for
 * anything else (*out untouched, line on stderr). */
int tu_cmd_int_ex(tu_redis_t *r, long long *out, const char *arg0,
                  ...) TU_SENTINEL;

/*
 * String result of a command, as a malloc'd NUL-terminated copy that the
 * caller free()s:
 *   - bulk or status reply -> a copy of all its bytes (embedded NULs are
 *                             copied, but then strlen() stops at them);
 *   - integer reply        -> its decimal text;
 *   - nil reply            -> NULL, silently;
 *   - anything else (error reply, array, I/O failure, no server, out of
 *     memory)              -> NULL, with a line on stderr.
 */
char *tu_cmd_str(tu_redis_t *r, const char *arg0,
                 ...) TU_SENTINEL TU_WARN_UNUSED;

/* ------------------------------------------------------------------------ */
/* Misc                                                                     */
/* ------------------------------------------------------------------------ */

/* CLOCK_MONOTONIC, in seconds. */
double tu_now(void);

/* Sleep ms milliseconds (resumes after signals; <= 0 returns at once). */
void tu_sleep_ms(long ms);

/* A TCP port on 127.0.0.1 that was free a moment ago (bind port 0,
 * getsockname, close).  -1 on error.  Someone may take it before you do. */
int tu_free_port(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTLOCK_HARNESS_SERVER_H */
