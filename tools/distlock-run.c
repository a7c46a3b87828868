/*
 * distlock-run: start an unmodified program with chosen pthread mutexes
 * turned into distributed locks (libdistlock_preload.so).
 *
 *   distlock-run [-v] [--config FILE] [--preload LIB] [--timeout SEC]
 *                [--] PROGRAM [ARGS...]
 *
 * The dynamic loader ignores LD_PRELOAD without a word in some cases: for a
 * statically linked program (there is no loader), and for a program that
 * runs in secure-execution mode (set-user-ID, set-group-ID, or with file
 * capabilities), and for a shim path with a space or a colon, which it
 * splits into pieces that are not the shim.  distlock-run refuses those up
 * front, and runs the very file it checked (fexecve).  A shim the loader
 * would skip for any other reason is caught by a trial run of the loader
 * alone (loader_takes_shim), and a library that loads but is not the shim
 * (libdistlock.so itself, libz) by the shim's handshake (shim_answers):
 * distlock-run runs itself with that library preloaded, and only the shim
 * answers, from its start-up, before main.  So the program's own code never
 * runs without the shim (short of the shim file being replaced between
 * those checks and the start).  Then it starts the program with LD_PRELOAD
 * and a status pipe; the shim inside it reports from its start-up, before
 * the program's main, that it read the configuration and found every lock
 * it maps.  Otherwise the program is stopped and distlock-run fails.
 *
 * Handshake (DISTLOCK_PRELOAD_PROBE=FD:PID:NONCE, answered by the shim in
 * process PID only, which then exits): "distlock-preload NONCE DEV:INO",
 * the device and inode of the shim's own file.
 *
 * Status protocol (DISTLOCK_PRELOAD_STATUS_FD=FD:PID, written by the shim
 * in process PID only): lines "msg TEXT" (to be shown), then one final
 * line, "ok N" (N locks or init sites mapped) or "fail" (the shim exits).
 *
 * Exit status: the program's; a program killed by a signal makes
 * distlock-run die of the same signal.  2 usage, 126 program refused,
 * 127 program not found, 78 configuration refused, not the shim, or shim
 * not loaded.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef DISTLOCK_PRELOAD_LIB
#define DISTLOCK_PRELOAD_LIB "libdistlock_preload.so"
#endif

#define EXIT_USAGE     2
#define EXIT_REFUSED   126
#define EXIT_NOTFOUND  127
#define EXIT_CONFIG    78
/* distlock-run run as the handshake's host, when nobody answered (its
 * main ran: the preloaded library is not the shim) */
#define EXIT_NO_ANSWER 3
#define PROBE_ENV      "DISTLOCK_PRELOAD_PROBE"

static const char *prog_name = "distlock-run";

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: distlock-run [-v] [--config FILE] [--preload LIB] "
        "[--timeout SEC] [--] PROGRAM [ARGS...]\n"
        "\n"
        "Runs PROGRAM with the pthread mutexes that FILE maps turned into\n"
        "distributed locks (LD_PRELOAD=libdistlock_preload.so).\n"
        "\n"
        "  --config FILE   the mapping (default: $DISTLOCK_PRELOAD_CONFIG)\n"
        "  --preload LIB   the shim (default: $DISTLOCK_PRELOAD_LIB, else\n"
        "                  %s)\n"
        "  --timeout SEC   how long the shim may take to answer and to "
        "report\n"
        "                  (default 30, at most 86400)\n"
        "  -v              show every mapping\n",
        DISTLOCK_PRELOAD_LIB);
}

/* ---- checks on the files ------------------------------------------------ */

struct elfinfo {
    int cls; /* ELFCLASS32 / ELFCLASS64 */
    int machine;
    int type;
    int interp;  /* has PT_INTERP */
    int dynamic; /* has PT_DYNAMIC */
};

/* The ELF headers of the file open on fd: 0, or 1 not ELF. */
static int read_elf_fd(int fd, struct elfinfo *ei)
{
    unsigned char id[EI_NIDENT];
    Elf64_Ehdr eh;
    int i;

    memset(ei, 0, sizeof *ei);
    if (pread(fd, id, sizeof id, 0) != (ssize_t)sizeof id ||
        memcmp(id, ELFMAG, SELFMAG) != 0)
        return 1;
    ei->cls = id[EI_CLASS];
    if (ei->cls != ELFCLASS64) {
        Elf32_Ehdr e32;
        if (pread(fd, &e32, sizeof e32, 0) == (ssize_t)sizeof e32) {
            ei->machine = e32.e_machine;
            ei->type = e32.e_type;
        }
        return 0;
    }
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
        return 1;
    ei->machine = eh.e_machine;
    ei->type = eh.e_type;
    for (i = 0; i < eh.e_phnum && eh.e_phentsize == sizeof(Elf64_Phdr); i++) {
        Elf64_Phdr ph;

        if (pread(fd, &ph, sizeof ph,
                  (off_t)(eh.e_phoff + (Elf64_Off)i * sizeof ph)) !=
            (ssize_t)sizeof ph)
            break;
        if (ph.p_type == PT_INTERP)
            ei->interp = 1;
        else if (ph.p_type == PT_DYNAMIC)
            ei->dynamic = 1;
    }
    return 0;
}

/* 0, 1 not ELF, -1 unreadable (errno) */
static int read_elf(const char *path, struct elfinfo *ei)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

    if (fd < 0)
        return -1;
    rc = read_elf_fd(fd, ei);
    close(fd);
    return rc;
}

/* The file execvp would run, in buf. */
static int find_program(const char *name, char *buf, size_t len)
{
    const char *path, *p, *end;

    if (strchr(name, '/')) {
        snprintf(buf, len, "%s", name);
        return access(buf, F_OK) == 0 ? 0 : -1;
    }
    path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (p = path;; p = end + 1) {
        struct stat st;

        end = strchr(p, ':');
        if (!end)
            end = p + strlen(p);
        snprintf(buf, len, "%.*s%s%s", (int)(end - p), p, end > p ? "/" : "",
                 name);
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return 0;
        if (!*end)
            break;
    }
    errno = ENOENT;
    return -1;
}

/* The loader ignores LD_PRELOAD in secure-execution mode, which a
 * set-user-ID or set-group-ID bit or file capabilities turn on.  0, or
 * EXIT_REFUSED after saying which. */
static int check_secure_exec(const char *path, int fd, const struct stat *st)
{
    const char *bit = NULL;
    ssize_t cap;

    if (st->st_mode & S_ISUID)
        bit = "set-user-ID";
    else if ((st->st_mode & S_ISGID) && (st->st_mode & S_IXGRP))
        bit = "set-group-ID";
    if (bit) {
        say("%s: %s (mode %04o): the loader ignores LD_PRELOAD in "
            "secure-execution mode; run a copy without the bit",
            path, bit, (unsigned)(st->st_mode & 07777));
        return EXIT_REFUSED;
    }
    cap = fgetxattr(fd, "security.capability", NULL, 0);
    if (cap > 0) {
        say("%s: has file capabilities (security.capability): the loader "
            "ignores LD_PRELOAD in secure-execution mode; run a copy "
            "without them (setcap -r)",
            path);
        return EXIT_REFUSED;
    }
    if (cap < 0 && errno != ENODATA && errno != ENOTSUP) {
        say("%s: cannot read its security.capability attribute: %s", path,
            strerror(errno));
        return EXIT_REFUSED;
    }
    return 0;
}

/* Refuses what the loader would start without the shim.  Every check is
 * made on the file open on *fd, which is the one executed (fexecve): a
 * file put in its place between the checks and the exec cannot run in its
 * stead.  *fd is -1 when it could not be opened. */
static int check_program(const char *path, const struct elfinfo *shim,
                         struct stat *st, int *fd)
{
    struct elfinfo ei;
    int rc;

    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        say("%s: %s", path, strerror(errno));
        return errno == ENOENT ? EXIT_NOTFOUND : EXIT_REFUSED;
    }
    if (fstat(*fd, st) != 0 || !S_ISREG(st->st_mode) ||
        access(path, X_OK) != 0) {
        say("%s: not an executable file", path);
        return EXIT_REFUSED;
    }
    rc = read_elf_fd(*fd, &ei);
    if (rc > 0) {
        say("%s: not an ELF executable (a script?): name the program "
            "itself, so that the shim can be checked into it",
            path);
        return EXIT_REFUSED;
    }
    if (ei.cls != shim->cls || ei.machine != shim->machine) {
        say("%s: built for another architecture or word size than the "
            "shim (ELF class %d, machine %d; the shim: %d, %d): the loader "
            "would skip the shim",
            path, ei.cls, ei.machine, shim->cls, shim->machine);
        return EXIT_REFUSED;
    }
    if (ei.type != ET_EXEC && ei.type != ET_DYN) {
        say("%s: not an executable (ELF type %d)", path, ei.type);
        return EXIT_REFUSED;
    }
    if (!ei.interp) {
        say("%s: statically linked (no PT_INTERP program header): no dynamic "
            "loader runs, so LD_PRELOAD cannot load the shim; link the "
            "program dynamically",
            path);
        return EXIT_REFUSED;
    }
    if (!ei.dynamic) {
        say("%s: has no dynamic section (PT_DYNAMIC): the shim cannot "
            "interpose its pthread calls",
            path);
        return EXIT_REFUSED;
    }
    return check_secure_exec(path, *fd, st);
}

/* ---- signals ------------------------------------------------------------- */

static volatile pid_t child;
static const int fwd_sigs[] = { SIGHUP,  SIGINT,  SIGQUIT,
                                SIGTERM, SIGUSR1, SIGUSR2 };
#define NFWD ((int)(sizeof fwd_sigs / sizeof fwd_sigs[0]))

/* Passes a signal on to the program, except one the terminal sent to the
 * whole foreground process group (the program has it already). */
static void forward(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (si && si->si_code == SI_KERNEL && (sig == SIGINT || sig == SIGQUIT))
        return;
    if (child > 0)
        kill(child, sig);
}

static void die_like(int st)
{
    if (WIFEXITED(st))
        exit(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        struct sigaction sa;
        sigset_t set;

        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(sig, &sa, NULL);
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        if (sig != SIGKILL && sig != SIGSTOP)
            raise(sig);
        exit(128 + sig);
    }
    exit(EXIT_FAILURE);
}

static int wait_child(pid_t pid)
{
    int st;

    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            say("waitpid: %s", strerror(errno));
            exit(EXIT_FAILURE);
        }
    }
    return st;
}

/* ---- the status pipe ----------------------------------------------------- */

enum { ST_OK, ST_FAIL, ST_EXEC, ST_EOF, ST_TIMEOUT };

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads the shim's report; shows its messages.  *mapped: N of "ok N". */
static int read_status(int fd, double timeout, unsigned long *mapped,
                       int *exec_errno)
{
    char buf[8192];
    size_t have = 0;
    double until = now_s() + timeout;

    for (;;) {
        char *nl;
        struct pollfd pfd = { fd, POLLIN, 0 };
        double left = until - now_s();
        ssize_t n;
        int rc;

        while ((nl = memchr(buf, '\n', have)) != NULL) {
            *nl = '\0';
            if (strncmp(buf, "msg ", 4) == 0)
                fprintf(stderr, "%s\n", buf + 4);
            else if (sscanf(buf, "ok %lu", mapped) == 1)
                return ST_OK;
            else if (strcmp(buf, "fail") == 0)
                return ST_FAIL;
            else if (sscanf(buf, "exec %d", exec_errno) == 1)
                return ST_EXEC;
            have -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, have);
        }
        if (have == sizeof buf)
            have = 0; /* an absurd line: drop it */
        if (left <= 0)
            return ST_TIMEOUT;
        rc = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            continue;
        n = read(fd, buf + have, sizeof buf - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ST_EOF;
        have += (size_t)n;
    }
}

/* ---- main ---------------------------------------------------------------- */

static void absolute(const char *path, char *buf)
{
    if (!realpath(path, buf)) {
        say("%s: %s", path, strerror(errno));
        exit(EXIT_CONFIG);
    }
}

/* What one run is about: the options, then the files they lead to. */
struct run {
    const char *config, *shim;
    double timeout;
    int verbose;
    char **argv; /* the program's, from ours */
    char config_abs[PATH_MAX], shim_abs[PATH_MAX], prog[PATH_MAX];
    char preload[2 * PATH_MAX + 2];
    struct stat pst; /* of prog */
    int prog_fd;     /* prog, open: what is checked is run */
};

/* --timeout's value: seconds, more than 0 and at most MAX_TIMEOUT_S.  The
 * bound keeps the milliseconds poll() is given an int: 1e300, inf and nan
 * made that conversion undefined. */
#define MAX_TIMEOUT_S 86400.0
static int parse_timeout(const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !(v > 0) ||
        !(v <= MAX_TIMEOUT_S)) {
        say("--timeout: seconds, more than 0 and at most %g, not '%s'",
            MAX_TIMEOUT_S, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Reads the options into r.  -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct run *r)
{
    int i;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-')
            break;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            r->verbose = 1;
        } else if ((strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) &&
                   i + 1 < argc) {
            r->config = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            r->config = a + 9;
        } else if (strcmp(a, "--preload") == 0 && i + 1 < argc) {
            r->shim = argv[++i];
        } else if (strncmp(a, "--preload=", 10) == 0) {
            r->shim = a + 10;
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            if (parse_timeout(argv[++i], &r->timeout) != 0)
                return EXIT_USAGE;
        } else {
            say("unknown option '%s'", a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        say("no program to run");
        usage(stderr);
        return EXIT_USAGE;
    }
    r->argv = argv + i;
    return -1;
}

/* The configuration, the shim and the program, checked before anything
 * starts.  0, or the exit status. */
static int check_files(struct run *r)
{
    struct elfinfo shim_elf;
    int rc;

    if (!r->config || !*r->config) {
        say("no configuration: give --config FILE (or set "
            "DISTLOCK_PRELOAD_CONFIG)");
        return EXIT_USAGE;
    }
    if (access(r->config, R_OK) != 0) {
        say("%s: cannot open the configuration: %s", r->config,
            strerror(errno));
        return EXIT_CONFIG;
    }
    absolute(r->config, r->config_abs);
    if (!strchr(r->shim, '/') && access(r->shim, F_OK) != 0) {
        say("%s: the shim is not installed there; give --preload LIB",
            r->shim);
        return EXIT_CONFIG;
    }
    absolute(r->shim, r->shim_abs);
    if (strpbrk(r->shim_abs, " :")) {
        /* the loader would load the pieces, none of them the shim, and
         * start the program without it */
        say("%s: the loader splits LD_PRELOAD at spaces and colons, so it "
            "would not load the shim from this path; put it where the path "
            "has neither",
            r->shim_abs);
        return EXIT_CONFIG;
    }
    rc = read_elf(r->shim_abs, &shim_elf);
    if (rc != 0 || shim_elf.type != ET_DYN) {
        say("%s: not a shared library", r->shim_abs);
        return EXIT_CONFIG;
    }
    if (find_program(r->argv[0], r->prog, sizeof r->prog) != 0) {
        say("%s: command not found", r->argv[0]);
        return EXIT_NOTFOUND;
    }
    return check_program(r->prog, &shim_elf, &r->pst, &r->prog_fd);
}

/* The program's LD_PRELOAD.  0, or the exit status. */
static int set_preload(struct run *r)
{
    /* after what is there already: a sanitizer runtime, for one, must
     * stay first */
    const char *old_preload = getenv("LD_PRELOAD");

    if (old_preload && *old_preload) {
        if (strlen(old_preload) >= PATH_MAX) {
            say("LD_PRELOAD is too long");
            return EXIT_USAGE;
        }
        snprintf(r->preload, sizeof r->preload, "%s:%s", old_preload,
                 r->shim_abs);
    } else {
        snprintf(r->preload, sizeof r->preload, "%s", r->shim_abs);
    }
    return 0;
}

/* A child with a pipe p (close-on-exec) to talk with: its pid, or -1
 * (said why; nothing left open). */
static pid_t fork_piped(int p[2])
{
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) != 0) {
        say("pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    if ((pid = fork()) < 0) {
        say("fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
    }
    return pid;
}

/* The loader's own verdict, without running any of the program's code:
 * with LD_TRACE_LOADED_OBJECTS it loads the program's objects, the
 * preloaded ones first, lists them and exits.  The shim must be listed
 * ("\t/path (0x...)"); when it is not, the loader's complaint is shown.
 * 0, or the exit status. */
static int loader_takes_shim(const struct run *r)
{
    char out[65536], want[PATH_MAX + 8], *line;
    size_t have = 0;
    ssize_t n;
    int p[2], st;
    pid_t pid;

    if ((pid = fork_piped(p)) < 0)
        return EXIT_FAILURE;
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        setenv("LD_TRACE_LOADED_OBJECTS", "1", 1);
        setenv("LD_PRELOAD", r->preload, 1);
        fexecve(r->prog_fd, r->argv, environ);
        _exit(127);
    }
    close(p[1]);
    while (have < sizeof out - 1 &&
           ((n = read(p[0], out + have, sizeof out - 1 - have)) > 0 ||
            (n < 0 && errno == EINTR)))
        have += n > 0 ? (size_t)n : 0;
    out[have] = '\0';
    close(p[0]);
    st = wait_child(pid);
    snprintf(want, sizeof want, "\t%s (0x", r->shim_abs);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, want))
        return 0;
    line = strstr(out, "ERROR: ");
    if (WIFSIGNALED(st))
        say("%s: the loader would start it without the shim %s (it died of "
            "signal %d loading it)",
            r->prog, r->shim_abs, WTERMSIG(st));
    else
        say("%s: the loader would start it without the shim %s%s%.*s",
            r->prog, r->shim_abs, line ? ": " : "",
            line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    return EXIT_CONFIG;
}

/* ---- the shim's handshake ---------------------------------------------- */

/* Is this process the host of a handshake (PROBE_ENV names it)?  Then the
 * shim would have answered and ended it before main: it is not there. */
static int probe_host(void)
{
    const char *s = getenv(PROBE_ENV);
    long long pid;
    int fd;

    return s && sscanf(s, "%d:%lld:", &fd, &pid) == 2 &&
           pid == (long long)getpid();
}

/* In the child: distlock-run itself, with the preload list and the
 * handshake's settings; the answer (or "exec ERRNO") goes to fd. */
static void exec_probe(const struct run *r, int fd, unsigned long long nonce)
    __attribute__((noreturn));
static void exec_probe(const struct run *r, int fd, unsigned long long nonce)
{
    int sfd = fcntl(fd, F_DUPFD, 3), null = open("/dev/null", O_RDWR);
    char env[96];

    if (sfd < 0)
        _exit(EXIT_FAILURE);
    if (null >= 0) {
        /* the loader's complaints were shown by loader_takes_shim */
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    snprintf(env, sizeof env, "%d:%ld:%llx", sfd, (long)getpid(), nonce);
    setenv(PROBE_ENV, env, 1);
    setenv("LD_PRELOAD", r->preload, 1);
    execl("/proc/self/exe", prog_name, (char *)NULL);
    dprintf(sfd, "exec %d\n", errno);
    _exit(EXIT_FAILURE);
}

/* A number the answer must repeat. */
static unsigned long long new_nonce(void)
{
    unsigned long long n = 0;
    struct timespec ts;

    if (getrandom(&n, sizeof n, GRND_NONBLOCK) == (ssize_t)sizeof n && n)
        return n;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((unsigned long long)ts.tv_nsec << 20) ^
           (unsigned long long)ts.tv_sec ^ (unsigned long long)getpid();
}

/* Reads what the handshake's host wrote on fd until it ends (at most
 * timeout s; cut at len - 1 bytes).  0, or -1 at the timeout. */
static int read_answer(int fd, double timeout, char *buf, size_t len)
{
    double until = now_s() + timeout;
    size_t have = 0;

    buf[0] = '\0';
    for (;;) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        double left = until - now_s();
        ssize_t n;
        int rc;

        if (left <= 0)
            return -1;
        rc = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc <= 0)
            continue;
        n = read(fd, buf + have, len - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (have += (size_t)n) == len - 1) {
            buf[have] = '\0';
            return 0;
        }
    }
}

/* The shim's handshake: the library to preload, run in distlock-run
 * itself (not in the program, whose main would run if it is not the
 * shim), must answer as the shim, from the very file given.  0, or the
 * exit status after saying why not. */
static int shim_answers(const struct run *r)
{
    unsigned long long nonce = new_nonce(), got_nonce, dev, ino;
    char buf[512], again[64];
    struct stat st;
    int p[2], rc, status, err;
    pid_t pid;

    if (stat(r->shim_abs, &st) != 0) {
        say("%s: %s", r->shim_abs, strerror(errno));
        return EXIT_CONFIG;
    }
    if ((pid = fork_piped(p)) < 0)
        return EXIT_FAILURE;
    if (pid == 0)
        exec_probe(r, p[1], nonce);
    close(p[1]);
    rc = read_answer(p[0], r->timeout, buf, sizeof buf);
    close(p[0]);
    if (rc != 0)
        kill(pid, SIGKILL);
    status = wait_child(pid);
    if (rc == 0 &&
        sscanf(buf, "distlock-preload %llx %llu:%llu", &got_nonce, &dev,
               &ino) == 3 &&
        got_nonce == nonce) {
        if (dev == (unsigned long long)st.st_dev &&
            ino == (unsigned long long)st.st_ino)
            return 0;
        say("%s: not the shim that answered: another distlock shim, already "
            "in LD_PRELOAD, did; %s was not started",
            r->shim_abs, r->prog);
        return EXIT_CONFIG;
    }
    if (rc != 0) {
        say("%s: no answer to the shim's handshake within %g s; %s was not "
            "started",
            r->shim_abs, r->timeout, r->prog);
    } else if (sscanf(buf, "exec %d", &err) == 1) {
        say("cannot run the shim's handshake (/proc/self/exe: %s); %s was "
            "not started",
            strerror(err), r->prog);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_NO_ANSWER) {
        say("%s: not the distlock shim: it loads, but does not answer the "
            "shim's handshake, so the program would run without distributed "
            "locks (the shim is libdistlock_preload.so; libdistlock.so is "
            "the "
            "library it uses); %s was not started",
            r->shim_abs, r->prog);
    } else {
        if (WIFSIGNALED(status))
            snprintf(again, sizeof again, "died of signal %d",
                     WTERMSIG(status));
        else
            snprintf(again, sizeof again, "exited %d",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        say("%s: the shim's handshake failed (distlock-run with it preloaded "
            "%s without an answer); %s was not started",
            r->shim_abs, again, r->prog);
    }
    return EXIT_CONFIG;
}

/* In the child: the settings the shim reads, then the program.  The status
 * pipe's write end is duplicated without FD_CLOEXEC for the shim. */
static void exec_program(const struct run *r, int status_w,
                         const sigset_t *old) __attribute__((noreturn));
static void exec_program(const struct run *r, int status_w,
                         const sigset_t *old)
{
    int sfd = fcntl(status_w, F_DUPFD, 3);
    char env[64];

    if (sfd < 0)
        _exit(EXIT_FAILURE);
    snprintf(env, sizeof env, "%d:%ld", sfd, (long)getpid());
    setenv("DISTLOCK_PRELOAD_STATUS_FD", env, 1);
    snprintf(env, sizeof env, "%llu:%llu", (unsigned long long)r->pst.st_dev,
             (unsigned long long)r->pst.st_ino);
    setenv("DISTLOCK_PRELOAD_TARGET", env, 1);
    setenv("DISTLOCK_PRELOAD_CONFIG", r->config_abs, 1);
    setenv("LD_PRELOAD", r->preload, 1);
    unsetenv(PROBE_ENV);
    if (r->verbose)
        setenv("DISTLOCK_PRELOAD_VERBOSE", "1", 1);
    sigprocmask(SIG_SETMASK, old, NULL);
    fexecve(r->prog_fd, r->argv, environ);
    dprintf(sfd, "msg %s: cannot execute %s: %s\nexec %d\n", prog_name,
            r->prog, strerror(errno), errno);
    _exit(errno == ENOENT ? EXIT_NOTFOUND : EXIT_REFUSED);
}

/* Forks the program and forwards signals to it.  Its pid, or -1. */
static pid_t start_program(const struct run *r, int fds[2])
{
    struct sigaction sa;
    sigset_t fwd, old;
    pid_t pid;
    int i;

    /* no forwarded signal may slip between fork and knowing the pid */
    sigemptyset(&fwd);
    for (i = 0; i < NFWD; i++)
        sigaddset(&fwd, fwd_sigs[i]);
    sigprocmask(SIG_BLOCK, &fwd, &old);
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0)
        exec_program(r, fds[1], &old);
    child = pid;
    close(fds[1]);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < NFWD; i++)
        sigaction(fwd_sigs[i], &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return pid;
}

/* Waits for the shim's report on fd.  -1 when the program may run on,
 * else the exit status (the program stopped). */
static int await_shim(const struct run *r, pid_t pid, int fd)
{
    unsigned long mapped = 0;
    int rc, st, exec_errno = 0;

    rc = read_status(fd, r->timeout, &mapped, &exec_errno);
    close(fd);
    switch (rc) {
    case ST_OK:
        if (r->verbose)
            say("%s: %lu mapping%s in place", r->prog, mapped,
                mapped == 1 ? "" : "s");
        return -1;
    case ST_FAIL:
        wait_child(pid);
        say("%s was not started: the shim refused the configuration %s",
            r->prog, r->config_abs);
        return EXIT_CONFIG;
    case ST_EXEC:
        wait_child(pid);
        return exec_errno == ENOENT ? EXIT_NOTFOUND : EXIT_REFUSED;
    case ST_EOF:
        kill(pid, SIGKILL);
        st = wait_child(pid);
        say("%s: the shim did not load (the program closed the status pipe "
            "without a report%s); it was stopped",
            r->prog, WIFEXITED(st) ? ", and exited" : "");
        return EXIT_CONFIG;
    default:
        kill(pid, SIGKILL);
        wait_child(pid);
        say("%s: the shim did not report within %g s (not loaded?); the "
            "program was killed",
            r->prog, r->timeout);
        return EXIT_CONFIG;
    }
}

int main(int argc, char **argv)
{
    static struct run r;
    int fds[2], rc;
    pid_t pid;

    if (probe_host())
        _exit(EXIT_NO_ANSWER);
    r.config = getenv("DISTLOCK_PRELOAD_CONFIG");
    r.shim = getenv("DISTLOCK_PRELOAD_LIB");
    r.timeout = 30;
    if (!r.shim || !*r.shim)
        r.shim = DISTLOCK_PRELOAD_LIB;
    if ((rc = parse_options(argc, argv, &r)) >= 0)
        return rc;
    if ((rc = check_files(&r)) != 0)
        return rc;
    if ((rc = set_preload(&r)) != 0 || (rc = loader_takes_shim(&r)) != 0 ||
        (rc = shim_answers(&r)) != 0)
        return rc;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        say("pipe: %s", strerror(errno));
        return EXIT_FAILURE;
    }
    pid = start_program(&r, fds);
    if (pid < 0)
        return EXIT_FAILURE;
    if ((rc = await_shim(&r, pid, fds[0])) >= 0)
        return rc;
    die_like(wait_child(pid));
    return EXIT_FAILURE;
}
