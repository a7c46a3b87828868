/*
 * distlock: see, wait for and force distlock (and Redisson) locks from a shell.
 *
 *   distlock status NAME            who holds it, its lease, who waits
 *   distlock list [PATTERN]         the locks that exist now (SCAN)
 *   distlock lock NAME -- CMD...    run CMD while holding the lock (flock(1))
 *   distlock unlock --force NAME    remove a lock whatever its holder
 *   distlock unlock --reset NAME    clear a robust mutex's owner-dead or
 *                                   not recoverable state
 *   distlock watch NAME             one line per change until interrupted
 *   distlock top [PATTERN]          a live table: holders, waiters, rates
 *   distlock sem-set NAME N         set a semaphore's free permits
 *   distlock fence load [URL]       load the fence function library
 *
 * Exit codes: 0 success, 1 busy / timed out / declined, 2 usage error,
 * 3 Redis error; `lock` returns the command's own status.
 *
 * main.c: the command line and its help; what the commands share in
 * common.c, one file per command group beside it (cmd_*.c), a lock's state
 * in snap.c.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

/* The help texts are laid out as printed. */
/* clang-format off */
static const char usage_main[] =
"Usage: distlock [--url URL | --url-file FILE] [--tls-...] [--json] COMMAND\n"
"       [ARGS]\n"
"See, wait for and force distlock (and Redisson) locks in Redis.\n"
"\n"
"Commands:\n"
"  status [--kind K] NAME        kind, state, holders, lease, queue, token;\n"
"                                a condition, semaphore or barrier's picture\n"
"  list [PATTERN]                the locks that exist now (SCAN MATCH PATTERN)\n"
"  lock NAME [OPTIONS] -- CMD... run CMD while holding the lock\n"
"  unlock --force [--yes] NAME   remove a lock whatever its holder\n"
"  unlock --reset NAME           clear a robust mutex's not recoverable state\n"
"  watch NAME                    print each change until interrupted\n"
"  top [--once] [PATTERN]        a live table of the locks: holders, waiters,\n"
"                                last taken, lease\n"
"  sem-set [--redisson] NAME N   set semaphore NAME's free permits to N\n"
"  fence load [URL] | get FENCE  load the fence function library (FCALL\n"
"                                distlock_fenced) / show a fence's token\n"
"  help [COMMAND]                this text, or a command's\n"
"\n"
"Options (before or after the command):\n"
"  --url URL    Redis to use (default: $DISTLOCK_URL, else redis://127.0.0.1:6379)\n"
"               redis://[user:password@]host[:port][/db], unix:///path[?db=N],\n"
"               redis-sentinel://host:port[,host:port...]/MASTER[?db=N],\n"
"               redis-cluster://host:port[,host:port...][?pubsub=both|sharded|plain]\n"
"               (each command goes to the master that holds the lock);\n"
"               rediss://, rediss-sentinel://, rediss-cluster:// for TLS, with\n"
"               ?tls_ca=, tls_cert=, tls_key=, tls_key_pass=, tls_server_name=,\n"
"               tls_insecure=1 or $DISTLOCK_TLS_CA, _CERT, _KEY, _KEY_PASS,\n"
"               _SERVER_NAME, _INSECURE\n"
"  --url-file FILE  the URL from the first line of FILE (at most 8192 bytes):\n"
"               with a password, use it or $DISTLOCK_URL, not --url, which\n"
"               ps(1) shows to all\n"
"  --tls-ca FILE|DIR, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME,\n"
"  --tls-insecure   as $DISTLOCK_TLS_CA, ... (a URL's own tls_*= wins)\n"
"  --tls-key-pass-file FILE  the client key's passphrase from the first line\n"
"               of FILE (at most 8192 bytes; as $DISTLOCK_TLS_KEY_PASS; never\n"
"               on the command line)\n"
"  --json       one JSON object per line instead of text\n"
"  -h, --help   help; 'distlock COMMAND --help' for a command\n"
"  --version    the version\n"
"\n"
"Exit status: 0 done, 1 lock busy / timed out / declined, 2 usage error,\n"
"3 Redis error; 'lock' exits with the command's status.\n";

static const char usage_status[] =
"Usage: distlock status [--kind lock|cond|sem|rsem|barrier] NAME\n"
"Show lock NAME: its kind (mutex, fair mutex, rwlock, or unknown when the\n"
"key is something else), its state (free, held, read-held, write-held),\n"
"each holder (client id, thread number, hold counts), the remaining lease,\n"
"a fair mutex's queue in order with each waiter's remaining window, the\n"
"writers waiting on a writer-preferring rwlock, and the last fencing token.\n"
"Reads only; one MULTI/EXEC, so the picture is consistent.\n"
"\n"
"NAME may also be a condition variable (cond: its waiters, each live or not\n"
"by its liveness deadline, and which are signalled), a leased semaphore\n"
"(sem: free and held permits, each holder with its lease left), a\n"
"Redisson-mode semaphore (rsem: the count, an integer string at NAME) or a\n"
"barrier (barrier: arrived/count, round, whether the last round was broken\n"
"by a dead member, each member live or not).  Without --kind the kind is\n"
"the one whose keys exist under NAME (distlock(1), status, names them; an\n"
"rsem is NAME holding an integer); a lock when none does; a usage error\n"
"when several do.  --kind K shows\n"
"kind K whatever exists.\n";

static const char usage_list[] =
"Usage: distlock list [--timeout S] [PATTERN]\n"
"List the locks that exist now, one line each: name, kind, state, lease,\n"
"number of holders and of waiters.  PATTERN is a Redis glob (default '*')\n"
"matched against lock names.  On a Redis Cluster it scans every master and\n"
"merges what they hold.  Uses SCAN, never KEYS; a key counts as a lock\n"
"when it is a hash whose fields are owners ('<uuid>:<thread>', ':write'\n"
"suffixes and a 'mode' field for an rwlock).  A free lock has no key, so it\n"
"is not listed.\n"
"Condition variables with waiters, leased semaphores and barriers whose keys\n"
"exist are listed too, with their kind (cond, sem, barrier), after the\n"
"locks; PATTERN is matched against their names.  A Redisson-mode semaphore\n"
"is a plain integer string, which nothing tells from a counter: it is not\n"
"listed ('status --kind rsem NAME' shows it).\n"
"\n"
"  --timeout S     give up (exit 3) when the whole listing, every master and\n"
"                  every SCAN page, has not ended after S seconds (default\n"
"                  30; decimals allowed): a server that answers each page\n"
"                  slowly cannot keep it for ever\n";

static const char usage_lock[] =
"Usage: distlock lock NAME [OPTIONS] [--] COMMAND [ARGS...]\n"
"Take lock NAME, run COMMAND while holding it, release it when COMMAND ends.\n"
"The lease is renewed while COMMAND runs (DISTLOCK_WATCHDOG_MS, 30 s); if\n"
"distlock itself is killed with SIGKILL, the lock frees itself within the\n"
"lease.  COMMAND gets the fencing token in DISTLOCK_TOKEN (not for --read).\n"
"\n"
"  --fair          a fair mutex: waiters take it in the order they came\n"
"  --read          a read lock of the rwlock NAME (shared with readers)\n"
"  --write         the write lock of the rwlock NAME\n"
"  --prefer-writer with --write: while it waits, new readers wait too\n"
"  --timeout S     give up after S seconds (decimals allowed; 0: try once)\n"
"  -v, --verbose   say on stderr when the lock is taken and released\n"
"\n"
"Signals: SIGINT, SIGTERM and SIGHUP sent to distlock are passed on to\n"
"COMMAND (which runs in distlock's process group, so that it keeps the\n"
"terminal; a Ctrl-C typed there reaches both and is not sent twice); distlock\n"
"waits for COMMAND, releases the lock and exits with COMMAND's status.\n"
"While still waiting for the lock, such a signal makes distlock leave the\n"
"queue and exit with 128+signal.\n"
"\n"
"Exit status: COMMAND's status (128+N if a signal N killed it), 1 when the\n"
"lock could not be taken in time, 2 usage error, 3 Redis error, 126/127\n"
"when COMMAND cannot be run.\n";

static const char usage_unlock[] =
"Usage: distlock unlock --force [--yes] [--reset] NAME\n"
"       distlock unlock --reset NAME\n"
"--force: remove lock NAME whatever its holders and wake its waiters (a fair\n"
"lock's head, an rwlock's readers and writers).  The holders are not told:\n"
"their watchdog finds the hold gone and reports it lost; a robust mutex's\n"
"next holder gets EOWNERDEAD.  Asks for confirmation when stdin is a\n"
"terminal; --yes (-y) skips it, and without a terminal it is required.\n"
"--reset: delete a robust mutex's record (owner-dead, or not recoverable:\n"
"every lock gets ENOTRECOVERABLE until then); the next lock gets 0.\n";

static const char usage_watch[] =
"Usage: distlock watch [--interval MS] NAME\n"
"Print one line per change of lock NAME until interrupted: acquired,\n"
"released, expired (the key vanished without a release message), queued,\n"
"left queue, and waiting writers.  Listens on the lock's release channels\n"
"(on a Redis Cluster with SSUBSCRIBE, on the master of the lock's slot,\n"
"followed when the slot moves) and reads the state every MS milliseconds\n"
"(default 100); changes nothing, and needs no keyspace notifications.\n";

static const char usage_top[] =
"Usage: distlock top [--interval MS] [--once] [PATTERN]\n"
"A table of the locks, condition variables, semaphores and barriers whose\n"
"names match PATTERN (a glob, default '*'), looked at anew every MS\n"
"milliseconds (default 1000, 10..60000): kind, state, holders, waiters,\n"
"how long ago it was last taken and lease left.  On a terminal the table\n"
"is redrawn in place and q quits; otherwise each look is printed after the\n"
"last, a blank line between.  Ctrl-C (SIGINT), SIGTERM and SIGHUP end it.\n"
"--once: look once, print the table and exit.\n"
"--json: one object per look, {\"interval_ms\", \"locks\": [...],\n"
"\"objects\": [...]}, null where a figure is not known.\n"
"\n"
"TAKEN is how long ago the last new hold of a mutex, fair mutex or write\n"
"lock was taken, by any client, read from its fencing token (which is the\n"
"server's clock in microseconds when it was drawn; '-' for a counter only\n"
"Redisson's RFencedLock counted); read locks and re-entries do not count.\n"
"A free lock whose counter exists is shown 'free'.\n"
"WAITING is what Redis knows: a fair mutex's queue, an rwlock's waiting\n"
"writers, a condition's waiters, a barrier's arrived members; a plain\n"
"mutex's waiters wait on pub/sub and show '-'.  Reads only (SCAN).\n";

static const char usage_sem_set[] =
"Usage: distlock sem-set [--redisson] NAME N\n"
"Set the free permits of semaphore NAME to N (0 to 2147483647), creating\n"
"it when it does not exist, as dist_sem_setvalue does (the same script):\n"
"permits held in leased mode stay held and come back on top of N.\n"
"--redisson: a Redisson-mode semaphore (RSemaphore's count at NAME).\n"
"Waiters are woken for the permits now free.  Prints the free permits.\n";

static const char usage_fence[] =
"Usage: distlock fence load [URL]\n"
"       distlock fence get FENCE\n"
"The resource side of fencing tokens: a Redis 7 function library that any\n"
"client calls (redis-cli, hiredis, redis-py, Jedis...):\n"
"\n"
"  FCALL distlock_fenced 2 FENCE DATA TOKEN COMMAND [ARG...]\n"
"      runs COMMAND DATA ARG... unless TOKEN is lower than the highest token\n"
"      FENCE accepted (then an error starting with STALE: the lock was lost,\n"
"      stop and do not retry with that token), and records TOKEN\n"
"  FCALL_RO distlock_fence_get 1 FENCE\n"
"      the highest token FENCE accepted (0 when none)\n"
"\n"
"load     loads (FUNCTION LOAD REPLACE: again is harmless) the library on\n"
"         URL's server (default --url, $DISTLOCK_URL): on Sentinel on the\n"
"         current master, which replicates it; on a cluster on every master.\n"
"         Prints each server it loaded.  Needs Redis 7.\n"
"get      prints the highest token FENCE accepted.\n"
"\n"
"On a cluster FENCE and DATA must share a hash tag: fence:{orders} and\n"
"{orders}:total.  The same text is installed as share/distlock/fence.lua;\n"
"share/distlock/fence.sql is the PostgreSQL side (distlock-fence(7)).\n";
/* clang-format on */

static const struct command {
    const char *name;
    const char *usage;
    int (*run)(int argc, char **argv);
} cmds[] = {
    { "status", usage_status, cmd_status },
    { "list", usage_list, cmd_list },
    { "lock", usage_lock, cmd_lock },
    { "unlock", usage_unlock, cmd_unlock },
    { "watch", usage_watch, cmd_watch },
    { "sem-set", usage_sem_set, cmd_sem_set },
    { "top", usage_top, cmd_top },
    { "fence", usage_fence, cmd_fence },
};

static const struct command *command_of(const char *cmd)
{
    size_t i;

    for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmds[i].name, cmd) == 0)
            return &cmds[i];
    return NULL;
}

static const char *usage_of(const char *cmd)
{
    const struct command *c = command_of(cmd);

    return c ? c->usage : NULL;
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int i;
    const char *cmd = NULL;
    const struct command *c;
    struct sigaction sa;

    note_startup_fds();
    cur_usage = usage_main;
    /* A Redis socket that closed must give an error, not kill us; `lock`
     * gives its command the original disposition back. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("distlock %d.%d.%d\n", DIST_VERSION_MAJOR,
                   DIST_VERSION_MINOR, DIST_VERSION_PATCH);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            if (!common_opt(argc, argv, &i))
                usage_error("unknown option '%s'", argv[i]);
            continue;
        }
        cmd = argv[i];
        break;
    }
    if (!cmd) {
        fputs(usage_main, stderr);
        return EX_USAGE;
    }
    if (strcmp(cmd, "help") == 0) {
        const char *u = i + 1 < argc ? usage_of(argv[i + 1]) : usage_main;
        if (!u)
            usage_error("no command '%s'", argv[i + 1]);
        fputs(u, stdout);
        return 0;
    }
    if (!(c = command_of(cmd)))
        usage_error("no command '%s'", cmd);
    cur_cmd = cmd;
    cur_usage = c->usage;
    return c->run(argc - (i + 1), argv + i + 1);
}
