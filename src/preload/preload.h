/* preload.h: what the modules of libdistlock_preload share.
 *
 * msg.c      the messages: collected during start-up, printed at once after
 *            (calls nothing else here, so everything may report through it)
 * value.c    reads a value: numbers, yes/no, the grammar of "match ="
 * config.c   reads the INI file into struct pl_config (inih + a line-tracking
 *            reader, so that every message has FILE:LINE)
 * elf.c      reads the symbol tables of an ELF file (.symtab, else .dynsym)
 * resolve.c  turns each [mutex]/[rwlock]/[cond]/[barrier] section into
 *            addresses of the loaded objects (dl_iterate_phdr + elf.c)
 * real.c     glibc's functions behind ours, by symbol version
 * table.c    the address table of the mapped locks, and their entries
 * site.c     init_site: heap locks mapped when their init runs
 * startup.c  the lazy, thread-safe start-up and the status pipe
 * shim.c     the interposed pthread functions, and their distributed half
 * sem.c      the interposed sem_* functions: named semaphores
 *            (both use startup.c; startup.c reaches neither)
 *
 * Each uses only those listed above it.
 */
#ifndef DIST_PRELOAD_H
#define DIST_PRELOAD_H

/* (every file of the shim defines _GNU_SOURCE first: glibc declares the
 * clock variants of the lock functions, whose types are taken below, only
 * then) */
#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before the first include"
#endif

#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "distlock.h"

/* Nothing declared here leaves the library: declared hidden, it is reached
 * without the GOT or the PLT, as cheaply as a file's statics (the fast path
 * for an unmapped mutex reads pl_tab and pl_real). */
#pragma GCC visibility push(hidden)

/* Exit status of a process whose configuration was refused (sysexits'
 * EX_CONFIG); distlock-run exits with it too. */
#define PL_EXIT_CONFIG 78

#define PL_MSG_PREFIX "distlock-preload: "

/* errno is the program's: every path of the shim that can change it (the
 * mapped calls, start-up, mapping a heap mutex) begins with PL_KEEP_ERRNO,
 * which puts it back however the function returns.  The fast path for an
 * unmapped mutex does not need it (glibc's lock functions leave errno
 * alone) and must not pay for it (errno is TLS). */
static inline void pl_errno_put_back(const int *saved)
{
    errno = *saved;
}
#define PL_KEEP_ERRNO                                                        \
    const int pl_errno_saved                                                 \
        __attribute__((cleanup(pl_errno_put_back), unused)) = errno

/* Sleeps ms between tries against a Redis that cannot be reached; a
 * signal does not cut it short. */
static inline void pl_sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Whether the clock clk has reached abs (a caller's deadline). */
static inline int pl_deadline_passed(clockid_t clk,
                                     const struct timespec *abs)
{
    struct timespec now;

    clock_gettime(clk, &now);
    return now.tv_sec > abs->tv_sec ||
           (now.tv_sec == abs->tv_sec && now.tv_nsec >= abs->tv_nsec);
}

/* ---- messages (msg.c) -------------------------------------------------- */

/* Collected during start-up; sent to distlock-run over the status pipe, or
 * printed on stderr when there is none.  Printf-like; one line each. */
void pl_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pl_vmsg(const char *fmt, va_list ap)
    __attribute__((format(printf, 1, 0)));
/* Start-up is over (or failing): from now on every message is printed at once. */
void pl_msg_started(void);
/* Hands the collected messages to distlock-run's status pipe as "msg LINE"
 * lines, or to stderr when fd < 0, and forgets them. */
void pl_msg_hand_over(int fd);
/* Forgets the collected messages (this process is not the one configured). */
void pl_msg_drop(void);
/* DISTLOCK_PRELOAD_VERBOSE or the configuration's verbose: more messages. */
void pl_set_verbose(int on);
int pl_verbose(void);
/* write(2) until all of p is written or the descriptor fails. */
void pl_write_all(int fd, const char *p, size_t n);
/* Prints at once (start-up may not be over) and aborts. */
void pl_die(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

/* ---- configuration (config.c) ----------------------------------------- */

enum pl_kind { PL_MUTEX, PL_RWLOCK, PL_COND, PL_BARRIER, PL_SEM };
enum pl_semmode { PL_SEM_LEASED, PL_SEM_REDISSON };
enum pl_how { PL_SYMBOL, PL_INIT_SITE };
enum pl_unavail { PL_BLOCK, PL_FAIL, PL_ABORT };
enum pl_lost { PL_LOST_ABORT, PL_LOST_LOG };
enum pl_unres {
    PL_UNRES_DEFAULT = -1,
    PL_UNRES_ERROR = 0,
    PL_UNRES_WARN = 1
};

/* One [mutex NAME], [rwlock NAME], [cond NAME], [barrier NAME] or
 * [semaphore NAME] section. */
struct pl_section {
    enum pl_kind kind;
    char *name;     /* the distributed lock's name */
    int line;       /* of the [header] */
    int match_line; /* of "match =", 0 when missing */
    char *match;    /* the value as written */
    enum pl_how how;
    /* symbol: [OBJECT:][FILE:]NAME[ [N] | [*] ][+OFFSET]
     * init_site: [OBJECT:][FILE:]FUNCTION */
    char *qual[2]; /* qualifiers as written, NULL when absent */
    int nqual;
    char *symbol;
    int each;   /* [*] */
    long index; /* [N], -1 when absent */
    unsigned long offset;
    unsigned long stride; /* bytes between elements; 0: the lock's size */
    unsigned long count;  /* elements; 0: from the symbol's size */
    int fair;
    long lease_ms; /* -1: [redis] lease_ms */
    int rw_prefer_writer;
    int on_unresolved; /* enum pl_unres */
    char *pair;        /* [cond]: mutex = the [mutex] it waits with */
    int pair_line;
    unsigned long parties; /* [barrier]: waits per round; 0: the program's */
    char *sem_name;        /* [semaphore]: match = sem_open /NAME */
    int sem_mode;          /* enum pl_semmode */
    int sem_unowned;       /* [semaphore]: unowned_post = yes */
    unsigned long sem_max; /* 0: the library's maximum */
};

struct pl_config {
    char *path;
    char *url;
    int url_line;
    unsigned long lease_ms;
    unsigned long watchdog_ms; /* 0: the library's default */
    unsigned long timeout_ms;  /* 0: the library's default */
    enum pl_unavail on_unavailable;
    enum pl_lost on_lease_lost;
    int on_unresolved; /* PL_UNRES_ERROR or PL_UNRES_WARN */
    int verbose;
    char *program; /* [preload] program: only in that one */
    struct pl_section *sec;
    size_t nsec;
};

/* "mutex", "rwlock", "cond", "barrier", "semaphore". */
const char *pl_kind_name(int kind);
/* The pthread type of a kind ("pthread_mutex_t"), and its size. */
const char *pl_kind_type(int kind);
size_t pl_kind_size(int kind);

/* Reads a number up to max (decimal, 0x hex or 0 octal; no sign).  0, or
 * -1 when v is not one. */
int pl_parse_ulong(const char *v, unsigned long max, unsigned long *out);
/* yes/true/on/1 or no/false/off/0, any case.  0, or -1 when v is neither. */
int pl_parse_bool(const char *v, int *out);
/* Reads the value of "match =" into s (how, qual, symbol, each, index,
 * offset; match as written).  0, or -1 with the reason in why. */
int pl_parse_match(struct pl_section *s, const char *v, char *why,
                   size_t whylen);

/* Reads path.  0, or -1 after reporting every problem with pl_msg as
 * "FILE:LINE: ...".  cfg is filled either way; free it with pl_config_free. */
int pl_config_load(const char *path, struct pl_config *cfg);
/* The same from f, named path in the messages (the fuzz target's entry). */
int pl_config_read(FILE *f, const char *path, struct pl_config *cfg);
void pl_config_free(struct pl_config *cfg);
/* The configuration this process runs with: loaded by start-up, read by
 * the shim afterwards. */
extern struct pl_config pl_cfg;

/* ---- a Redis that does not answer: on_unavailable ---------------------- */

/* One call's tries against a Redis that does not answer. */
struct pl_away {
    unsigned pause_ms; /* the next pause */
    int told;          /* "waiting for Redis" said */
};
#define PL_AWAY_INIT                                                         \
    {                                                                        \
        20, 0                                                                \
    }

/* on_unavailable = abort ends the process here, naming what ("lock",
 * "semaphore") and its name; otherwise nothing. */
static inline void pl_away_aborts(const char *what, const char *name)
{
    if (pl_cfg.on_unavailable == PL_ABORT)
        pl_die("%s '%s': %s: aborting (on_unavailable = abort)", what, name,
               dist_last_error());
}

/* A pause between tries, doubling up to a second. */
static inline void pl_away_pause(struct pl_away *a)
{
    pl_sleep_ms(a->pause_ms);
    a->pause_ms = a->pause_ms < 1000 ? a->pause_ms * 2 : 1000;
}

/* on_unavailable = block, once the call's own answers (fail, a try) are
 * given: ETIMEDOUT when a timed call's deadline (abs on clk) has passed,
 * else 0 after a pause, said the first time. */
static inline int pl_away_block(struct pl_away *a, const char *what,
                                const char *name, int timed, clockid_t clk,
                                const struct timespec *abs)
{
    if (timed && pl_deadline_passed(clk, abs))
        return ETIMEDOUT;
    if (!a->told++)
        pl_msg("%s '%s': %s: waiting for Redis (on_unavailable = block)",
               what, name, dist_last_error());
    pl_away_pause(a);
    return 0;
}

/* ---- ELF symbol tables (elf.c) ------------------------------------------ */

struct pl_elf {
    const unsigned char *map;
    size_t size;
    const Elf64_Shdr *sh;
    size_t shnum;
    const Elf64_Sym *sym; /* .symtab, or .dynsym when there is none */
    size_t nsym;
    const char *str;
    size_t strsz;
    size_t first_global;    /* sh_info of the table: locals come first */
    int dynamic_only;       /* .dynsym in use: no .symtab, or a bad one */
    const char *symtab_bad; /* why the .symtab was not usable, or NULL */
    int mapped;             /* map is ours (pl_elf_open) */
};

/* Maps path read-only and finds its symbol table.  0, or -1 with why. */
int pl_elf_open(struct pl_elf *e, const char *path, char *why, size_t whylen);
/* The same on size bytes at map, which stay the caller's and must outlive
 * e (the fuzz target's entry). */
int pl_elf_parse(struct pl_elf *e, const unsigned char *map, size_t size,
                 char *why, size_t whylen);
void pl_elf_close(struct pl_elf *e);

/* Calls fn for every defined symbol with a name.  file is the STT_FILE that
 * precedes a local symbol (NULL for globals and when unknown).  A non-zero
 * return from fn stops the walk and is returned. */
typedef int (*pl_sym_fn)(void *arg, const Elf64_Sym *s, const char *name,
                         const char *file);
int pl_elf_each(const struct pl_elf *e, pl_sym_fn fn, void *arg);

/* ---- resolution (resolve.c) ---------------------------------------------- */

/* One address to intercept. */
struct pl_target {
    uintptr_t addr;
    const struct pl_section *sec;
    long index;  /* element of [*], or -1 */
    char *where; /* "g_shards[2] (shards.c) in /path/prog" */
};

/* A function whose pthread_mutex_init/pthread_rwlock_init calls map the
 * object they initialise. */
struct pl_range {
    uintptr_t lo, hi; /* [lo, hi) */
};
struct pl_site {
    const struct pl_section *sec;
    struct pl_range *r;
    size_t nr;
    char *where;
};

struct pl_resolved {
    struct pl_target *t;
    size_t nt;
    struct pl_site *s;
    size_t ns;
    size_t unresolved; /* sections only warned about */
};

/* Resolves every section.  0, or -1 after reporting each name that does
 * not resolve (unless only warned) with pl_msg. */
int pl_resolve(const struct pl_config *cfg, struct pl_resolved *out);
void pl_resolved_free(struct pl_resolved *r);

/* ==== the shim's own parts: real.c, table.c, site.c, startup.c, shim.c === */

#define PL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define PL_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- glibc's functions (real.c) ----------------------------------------- */

/* The pointer types of glibc's own declarations. */
typedef __typeof__(&pthread_mutex_lock) lock_fn;
typedef __typeof__(&pthread_mutex_timedlock) timed_fn;
typedef __typeof__(&pthread_mutex_clocklock) clock_fn;
typedef __typeof__(&pthread_mutex_init) init_fn;
typedef __typeof__(&pthread_cond_wait) wait_fn;
typedef __typeof__(&pthread_cond_timedwait) twait_fn;
typedef __typeof__(&pthread_cond_clockwait) cwait_fn;
typedef __typeof__(&pthread_rwlock_rdlock) rw_fn;
typedef __typeof__(&pthread_rwlock_timedrdlock) rwtimed_fn;
typedef __typeof__(&pthread_rwlock_clockrdlock) rwclock_fn;
typedef __typeof__(&pthread_rwlock_init) rwinit_fn;
typedef __typeof__(&pthread_cond_signal) csig_fn;
typedef __typeof__(&pthread_cond_init) cinit_fn;
typedef __typeof__(&pthread_barrier_init) binit_fn;
typedef __typeof__(&pthread_barrier_wait) bwait_fn;
typedef __typeof__(&sem_open) sopen_fn;
typedef __typeof__(&sem_wait) swait_fn;
typedef __typeof__(&sem_timedwait) stimed_fn;
typedef __typeof__(&sem_clockwait) sclock_fn;
typedef __typeof__(&sem_getvalue) sget_fn;
typedef __typeof__(&sem_unlink) sunlink_fn;

/* One entry point of ours: the glibc symbol and version it stands for
 * (real.c's table), the glibc function it forwards to (pl_real) and how
 * often it saw a mapped lock (pl_count). */
enum {
    FN_LOCK,
    FN_UNLOCK,
    FN_INIT,
    FN_DESTROY,
    FN_TRYLOCK,
    FN_TRYLOCK_OLD,
    FN_TIMEDLOCK,
    FN_TIMEDLOCK_OLD,
    FN_CLOCKLOCK,
    FN_CLOCKLOCK_OLD,
    FN_WAIT,
    FN_WAIT_OLD,
    FN_TIMEDWAIT,
    FN_TIMEDWAIT_OLD,
    FN_CLOCKWAIT,
    FN_CLOCKWAIT_OLD,
    FN_RDLOCK,
    FN_RDLOCK_OLD,
    FN_TRYRDLOCK,
    FN_TRYRDLOCK_OLD,
    FN_TIMEDRDLOCK,
    FN_TIMEDRDLOCK_OLD,
    FN_CLOCKRDLOCK,
    FN_CLOCKRDLOCK_OLD,
    FN_WRLOCK,
    FN_WRLOCK_OLD,
    FN_TRYWRLOCK,
    FN_TRYWRLOCK_OLD,
    FN_TIMEDWRLOCK,
    FN_TIMEDWRLOCK_OLD,
    FN_CLOCKWRLOCK,
    FN_CLOCKWRLOCK_OLD,
    FN_RWUNLOCK,
    FN_RWUNLOCK_OLD,
    FN_RWINIT,
    FN_RWINIT_OLD,
    FN_RWDESTROY,
    FN_RWDESTROY_OLD,
    FN_CSIGNAL,
    FN_CSIGNAL_OLD,
    FN_CBROADCAST,
    FN_CBROADCAST_OLD,
    FN_CINIT,
    FN_CINIT_OLD,
    FN_CDESTROY,
    FN_CDESTROY_OLD,
    FN_BINIT,
    FN_BINIT_OLD,
    FN_BWAIT,
    FN_BWAIT_OLD,
    FN_BDESTROY,
    FN_BDESTROY_OLD,
    FN_SOPEN,
    FN_SOPEN_OLD,
    FN_SWAIT,
    FN_SWAIT_OLD,
    FN_STRYWAIT,
    FN_STRYWAIT_OLD,
    FN_STIMEDWAIT,
    FN_STIMEDWAIT_OLD,
    FN_SCLOCKWAIT,
    FN_SCLOCKWAIT_OLD,
    FN_SPOST,
    FN_SPOST_OLD,
    FN_SGETVALUE,
    FN_SGETVALUE_OLD,
    FN_SCLOSE,
    FN_SCLOSE_OLD,
    FN_SUNLINK,
    FN_SUNLINK_OLD,
    FN_CONSISTENT,
    FN_CONSISTENT_OLD,
    FN_CONSISTENT_NP,
    FN_COUNT
};

extern void *pl_real[FN_COUNT];
extern unsigned long pl_calls[FN_COUNT];
#define REAL(f, type) ((type)pl_real[f])

/* The head of an interposed function: its prototype (nothing else
 * declares it, and the build warns of a global function without one),
 * then its definition, exported under sym, glibc's "name@VERSION" (with
 * "@@": the version a new program binds; preload.map declares them).
 * shim.c and sem.c write one for each symbol version, through a macro a
 * family of functions. */
#define PL_WRAPPER(ret, fname, sym, ...)                                     \
    ret fname(__VA_ARGS__);                                                  \
    __attribute__((visibility("default"), symver(sym))) ret fname(__VA_ARGS__)

/* Fills pl_real (once; dies when a function is missing). */
void pl_resolve_reals(void);

static inline void pl_count(int f)
{
    __atomic_fetch_add(&pl_calls[f], 1, __ATOMIC_RELAXED);
}

/* Set while this thread runs our own code that calls back into the
 * interposed functions (start-up, mapping a heap lock): those calls are
 * libdistlock's, inih's or libc's, and pass straight through. */
extern __thread int pl_in_shim __attribute__((tls_model("initial-exec")));

/* A lock of the shim's own over a table it changes (site.c's heap locks,
 * sem.c's semaphores), taken through pl_real.  fork() must not copy the
 * table half-changed, nor the lock held by a thread the child does not
 * have: the forking thread takes it in its prepare handler and gives it
 * back in its parent and child handlers.  The other fork handlers run in
 * between on that thread, in an order that depends on when each was
 * registered (glibc runs the prepare handlers in reverse order of
 * registration, the others in order), and one of them may initialise a
 * lock or open a semaphore: its calls find the lock theirs already, as it
 * is.  Which locks the forking thread holds is a thread-local set of bits,
 * one a lock (real.c). */
struct pl_own_lock {
    pthread_mutex_t mu;
    unsigned bit; /* PL_OWN_* */
};
enum { PL_OWN_SITES = 1, PL_OWN_SEMS = 2 };
#define PL_OWN_LOCK(bit)                                                     \
    {                                                                        \
        PTHREAD_MUTEX_INITIALIZER, (bit)                                     \
    }

void pl_own_take(struct pl_own_lock *o);
void pl_own_give(struct pl_own_lock *o);
void pl_own_fork_take(struct pl_own_lock *o); /* in a prepare handler */
void pl_own_fork_give(struct pl_own_lock *o); /* in a parent or child one */

/* ---- the address table and its entries (table.c) ---------------------- */

struct pl_entry {
    uintptr_t addr;
    int kind;    /* enum pl_kind */
    int dynamic; /* found through init_site */
    int live;    /* atomic; always 1 for symbol entries */
    const struct pl_section *sec;
    char *lockname;
    char *where;
    dist_mutex_t dm;   /* PL_MUTEX */
    int robust;        /* PL_MUTEX: the program made it robust
                                   * (PTHREAD_MUTEX_ROBUST): dm is too */
    dist_rwlock_t drw; /* PL_RWLOCK */
    dist_cond_t dc;    /* PL_COND */
    clockid_t clock;   /* PL_COND: of pthread_cond_timedwait */
    dist_barrier_t db; /* PL_BARRIER, once pthread_barrier_init
                                   * gave the count (binit 1) */
    int binit;
    dist_sem_t ds;     /* PL_SEM */
    unsigned sem_refs; /* PL_SEM: sem_open minus sem_close */
    sem_t shadow;      /* PL_SEM: addr, what sem_open returns */
    /* a mutex's local holder: written only by the thread holding the real
     * mutex (relaxed atomics, for the reads of a buggy non-owner) */
    pthread_t owner;
    unsigned long owner_gen;
    unsigned depth;
};

/* An open-addressing set of addresses, at most half full: a key is
 * published with a release store and never removed. */
struct pl_table {
    unsigned shift; /* slot = (addr * K) >> shift */
    size_t mask;
    size_t used;
    struct pl_entry **val;
    uintptr_t key[];
};

#define PL_HASH_K 0x9E3779B97F4A7C15ull

extern const struct pl_table *pl_tab; /* NULL until start-up is over */
extern struct pl_table *pl_tab_w;     /* the same, for the writer */
/* Bumped in a fork() child: the parent's holders are not this process's. */
extern unsigned long pl_fork_gen;

static inline size_t pl_slot_of(const struct pl_table *t, uintptr_t a)
{
    return (size_t)((a * PL_HASH_K) >> t->shift);
}

/* The fast path: true when m is certainly not mapped (its first slot is
 * empty).  Plain loads only. */
static inline int pl_surely_plain(const void *m)
{
    const struct pl_table *t = __atomic_load_n(&pl_tab, __ATOMIC_ACQUIRE);

    return PL_LIKELY(t != NULL) &&
           PL_LIKELY(__atomic_load_n(&t->key[pl_slot_of(t, (uintptr_t)m)],
                                     __ATOMIC_RELAXED) == 0);
}

/* The table of a process with nothing mapped. */
const struct pl_table *pl_table_none(void);
/* Room for cap keys (a power of two at least that); NULL: no memory. */
struct pl_table *pl_table_new(size_t cap);
/* Twice as large, with t's entries; NULL: no memory. */
struct pl_table *pl_table_grow(const struct pl_table *t);
void pl_table_put(struct pl_table *t, struct pl_entry *e);
/* The entry of an address, dead or alive. */
struct pl_entry *pl_table_get(const struct pl_table *t, uintptr_t a);

/* Makes e's distributed lock, named lockname, as e->sec says.  0, or the
 * library's error. */
int pl_entry_init(struct pl_entry *e, const char *lockname);
/* A mapped mutex's program made it robust (1) or not (0) at its
 * pthread_mutex_init: its distributed mutex is made again to match.  0,
 * or the error of dist_mutex_init (the entry keeps the old one). */
int pl_entry_robust(struct pl_entry *e, int robust);
/* The distributed barrier of e for count waits (its section's parties
 * unless 0), made by pthread_barrier_init.  0, or the library's error. */
int pl_entry_barrier(struct pl_entry *e, unsigned count);
/* The distributed semaphore of e, with initial free permits if new. */
int pl_entry_sem(struct pl_entry *e, unsigned initial);
/* Marks e dead and destroys its distributed lock. */
void pl_entry_kill(struct pl_entry *e);
/* Does this thread hold e's real mutex (as recorded by pl_set_holder)? */
int pl_held_by_me(const struct pl_entry *e);
/* Records this thread as e's holder, depth times (0: nobody). */
void pl_set_holder(struct pl_entry *e, unsigned depth);

/* ---- init_site (site.c) ------------------------------------------------- */

extern size_t pl_nsites; /* init_site sections */

/* Takes the init_site sections from res.  1, or 0 when out of memory. */
int pl_take_sites(struct pl_resolved *res);
/* pthread_mutex_init (pthread_rwlock_init, ...) of the object at m (a
 * condition's clock clk), called from
 * ra, succeeded: maps it when ra is in an init_site function, unmaps a heap
 * entry left at m otherwise.  0, or ENOMEM: the lock could not be mapped
 * for want of memory, and the caller's init fails with it (a lock that
 * stayed local would not exclude the other processes). */
int pl_site_init(void *m, uintptr_t ra, int kind, clockid_t clk);
/* Adds e (not yet in the table: a sem_open's semaphore) to the table.  0,
 * or ENOMEM. */
int pl_heap_add(struct pl_entry *e);
/* The heap lock of e was destroyed: so is its distributed lock. */
void pl_site_forget(struct pl_entry *e);
/* fork() must not copy the heap entries half-changed. */
void pl_site_atfork(void);

#pragma GCC visibility pop

#endif
