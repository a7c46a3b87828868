/* startup.c: the shim's lazy, thread-safe start-up.
 *
 * The first call of any interposed function (a library's constructor, a
 * thread, or our own constructor, whichever comes first) builds the
 * address table.  Other threads wait on a futex until it is published, so
 * no mapped lock is ever run as a plain one; the thread building it (whose
 * own calls into libdistlock, inih and libc come back to the shim) passes
 * straight through.  Start-up reads the configuration and the symbol
 * tables and creates the dist_mutex objects; it does no network I/O.  Its
 * messages and verdict go to distlock-run over the status pipe.  Its
 * settings are read with secure_getenv: a set-user-ID program never takes
 * them from its caller (the loader does not preload into one either, but
 * the shim may be linked or loaded by other means). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "startup.h"

static int phase; /* 0, 1 starting, 2 done (futex) */
static int status_fd = -1;

static void on_lost(const char *name, void *arg)
{
    (void)arg;
    if (pl_cfg.on_lease_lost == PL_LOST_ABORT)
        pl_die("lock '%s' was lost (its lease ran out, it was forced, or "
               "Redis lost its data): aborting (on_lease_lost = abort)",
               name);
    pl_msg("lock '%s' was lost (its lease ran out, it was forced, or Redis "
           "lost its data); the program goes on (on_lease_lost = log)",
           name);
}

/* Is this process the one distlock-run started (or, without distlock-run,
 * any process)?  Children that exec other programs inherit LD_PRELOAD; the
 * mappings are about one program only. */
static int is_target(void)
{
    const char *t = secure_getenv("DISTLOCK_PRELOAD_TARGET");
    unsigned long long dev, ino;
    struct stat st;

    if (!t || !*t)
        return 1;
    if (sscanf(t, "%llu:%llu", &dev, &ino) != 2 ||
        stat("/proc/self/exe", &st) != 0)
        return 1;
    return (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

/* [preload] program = NAME or /path: is this process that program? */
static int is_program(const char *want)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *base;

    if (n <= 0)
        return 1;
    exe[n] = '\0';
    if (strchr(want, '/'))
        return strcmp(exe, want) == 0;
    base = strrchr(exe, '/');
    return strcmp(base ? base + 1 : exe, want) == 0;
}

/* ---- the status pipe ---------------------------------------------------- */

static void open_status(void)
{
    const char *s = secure_getenv("DISTLOCK_PRELOAD_STATUS_FD");
    long long pid;
    int fd;

    if (s && sscanf(s, "%d:%lld", &fd, &pid) == 2 && fd > 2 &&
        pid == (long long)getpid())
        status_fd = fd;
}

/* Hands the messages to distlock-run (or prints them) and the verdict. */
static void finish_status(int ok, size_t mapped)
{
    char line[64];

    pl_msg_hand_over(status_fd);
    if (status_fd >= 0) {
        if (ok)
            snprintf(line, sizeof line, "ok %zu\n", mapped);
        else
            snprintf(line, sizeof line, "fail\n");
        pl_write_all(status_fd, line, strlen(line));
        close(status_fd);
        status_fd = -1;
    }
}

static void startup_fail(void)
{
    finish_status(0, 0);
    _exit(PL_EXIT_CONFIG);
}

/* This process is not the one configured: it maps nothing, says nothing. */
static const struct pl_table *not_ours(void)
{
    pl_msg_drop();
    status_fd = -1;
    return pl_table_none();
}

/* ---- applying the configuration ----------------------------------------- */

/* The [redis] settings, for the library. */
static void apply_settings(void)
{
    int rc;

    if (pl_cfg.url && (rc = dist_set_url(pl_cfg.url)) != 0) {
        pl_msg("%s:%d: url: %s", pl_cfg.path, pl_cfg.url_line,
               dist_last_error());
        startup_fail();
    }
    if (pl_cfg.watchdog_ms)
        dist_set_watchdog_ms(pl_cfg.watchdog_ms);
    if (pl_cfg.timeout_ms)
        dist_set_timeout_ms(pl_cfg.timeout_ms);
}

/* The entry of one resolved address, its distributed lock made. */
static struct pl_entry *target_entry(struct pl_target *pt)
{
    struct pl_entry *e = calloc(1, sizeof *e);
    char name[DIST_NAME_MAX + 32];
    int rc;

    if (!e) {
        pl_msg("out of memory");
        startup_fail();
    }
    e->addr = pt->addr;
    e->sec = pt->sec;
    e->live = 1;
    e->where = pt->where;
    pt->where = NULL;
    if (pt->index >= 0)
        snprintf(name, sizeof name, "%s:%ld", pt->sec->name, pt->index);
    else
        snprintf(name, sizeof name, "%s", pt->sec->name);
    if ((rc = pl_entry_init(e, name)) != 0) {
        pl_msg("%s:%d: lock '%s': %s", pl_cfg.path, pt->sec->line, name,
               dist_last_error());
        startup_fail();
    }
    return e;
}

/* The address table, with room for the heap locks of init_site. */
static struct pl_table *map_targets(struct pl_resolved *res)
{
    struct pl_table *t;
    size_t i, cap;

    cap = 4 * res->nt + 16;
    if (res->ns)
        cap += 1024;
    t = pl_table_new(cap);
    if (!t) {
        pl_msg("out of memory");
        startup_fail();
    }
    for (i = 0; i < res->nt; i++) {
        struct pl_entry *e = target_entry(&res->t[i]);

        pl_table_put(t, e);
        if (pl_verbose())
            pl_msg("%s '%s' = %s", pl_kind_name(e->kind), e->lockname,
                   e->where);
    }
    return t;
}

/* The [semaphore] sections: mapped when the program opens their names. */
static size_t sem_sections(void)
{
    size_t i, n = 0;

    for (i = 0; i < pl_cfg.nsec; i++) {
        if (pl_cfg.sec[i].kind != PL_SEM)
            continue;
        n++;
        if (pl_verbose())
            pl_msg("semaphore '%s' = sem_open(\"%s\")", pl_cfg.sec[i].name,
                   pl_cfg.sec[i].sem_name);
    }
    return n;
}

/* ---- distlock-run's handshake -------------------------------------------- */

/* Before it starts a program, distlock-run runs itself with the shim
 * preloaded and DISTLOCK_PRELOAD_PROBE=FD:PID:NONCE: the shim answers on
 * FD, in process PID only, "distlock-preload NONCE DEV:INO" (the device
 * and inode of its own file, which distlock-run compares with the file it
 * was given), and the process ends here, before distlock-run's main.  Any
 * other library loads without a word, and distlock-run's main, run then,
 * says that nobody answered: a library that is not the shim (libdistlock.so
 * itself, say) is refused before the program runs at all. */
static void answer_probe(void)
{
    const char *s = secure_getenv("DISTLOCK_PRELOAD_PROBE");
    unsigned long long nonce;
    long long pid;
    char line[128];
    struct stat st;
    Dl_info di;
    int fd;

    if (!s || sscanf(s, "%d:%lld:%llx", &fd, &pid, &nonce) != 3 || fd <= 2 ||
        pid != (long long)getpid())
        return;
    if (dladdr((void *)answer_probe, &di) && di.dli_fname &&
        stat(di.dli_fname, &st) == 0) {
        snprintf(line, sizeof line, "distlock-preload %llx %llu:%llu\n",
                 nonce, (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        pl_write_all(fd, line, strlen(line));
    }
    _exit(0);
}

static const struct pl_table *build(void)
{
    struct pl_resolved res;
    struct pl_table *t;
    const char *path, *v;

    answer_probe();
    open_status();
    v = secure_getenv("DISTLOCK_PRELOAD_VERBOSE");
    pl_set_verbose(v && *v && strcmp(v, "0") != 0);
    if (!is_target())
        return not_ours();
    path = secure_getenv("DISTLOCK_PRELOAD_CONFIG");
    if (!path || !*path) {
        pl_msg("DISTLOCK_PRELOAD_CONFIG is not set: no configuration to "
               "apply (distlock-run --config FILE sets it)");
        startup_fail();
    }
    if (pl_config_load(path, &pl_cfg) != 0)
        startup_fail();
    if (pl_cfg.program && !is_program(pl_cfg.program))
        return not_ours(); /* another program started with this environment */
    if (pl_cfg.verbose)
        pl_set_verbose(1);
    apply_settings();
    if (pl_resolve(&pl_cfg, &res) != 0)
        startup_fail();
    t = map_targets(&res);
    if (!pl_take_sites(&res)) {
        pl_msg("out of memory");
        startup_fail();
    }
    if (res.unresolved)
        pl_msg("warning: %zu section(s) not resolved (on_unresolved = warn)",
               res.unresolved);
    dist_set_lost_handler(on_lost, NULL);
    pl_site_atfork();
    finish_status(1, res.nt + pl_nsites + sem_sections());
    pl_resolved_free(&res);
    pl_tab_w = t;
    return t;
}

const struct pl_table *pl_startup(void)
{
    PL_KEEP_ERRNO;
    int expect = 0;
    const struct pl_table *t;

    pl_resolve_reals();
    if (pl_in_shim)
        return pl_table_none(); /* our own start-up's calls */
    if (__atomic_compare_exchange_n(&phase, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        pl_in_shim = 1;
        t = build();
        pl_in_shim = 0;
        pl_msg_started();
        __atomic_store_n(&pl_tab, t, __ATOMIC_RELEASE);
        __atomic_store_n(&phase, 2, __ATOMIC_RELEASE);
        syscall(SYS_futex, &phase, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL,
                0);
        return t;
    }
    while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 2)
        syscall(SYS_futex, &phase, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
    return __atomic_load_n(&pl_tab, __ATOMIC_ACQUIRE);
}

__attribute__((constructor)) static void preload_ctor(void)
{
    if (!__atomic_load_n(&pl_tab, __ATOMIC_ACQUIRE))
        pl_startup();
}
