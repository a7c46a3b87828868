/* preload.h: what the modules of libdistlock_preload share.
 *
 * msg.c      the messages: collected during start-up, printed at once after
 *            (calls nothing else here, so everything may report through it)
 * config.c   reads the INI file into struct pl_config (inih + a line-tracking
 *            reader, so that every message has FILE:LINE)
 * elf.c      reads the symbol tables of an ELF file (.symtab, else .dynsym)
 * resolve.c  turns each [mutex]/[rwlock] section into addresses of the
 *            loaded objects (dl_iterate_phdr + elf.c)
 * shim.c     the interposed pthread functions, the address table and the
 *            lazy, thread-safe start-up
 */
#ifndef DIST_PRELOAD_H
#define DIST_PRELOAD_H

#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "distlock.h"

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
#define PL_KEEP_ERRNO                                                      \
    const int pl_errno_saved                                               \
        __attribute__((cleanup(pl_errno_put_back), unused)) = errno

/* ---- messages (msg.c) -------------------------------------------------- */

/* Collected during start-up; sent to distlock-run over the status pipe, or
 * printed on stderr when there is none.  Printf-like; one line each. */
void pl_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pl_vmsg(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* Start-up is over (or failing): from now on every message is printed at once. */
void pl_msg_started(void);
/* Hands the collected messages to distlock-run's status pipe as "msg LINE"
 * lines, or to stderr when status_fd < 0, and forgets them. */
void pl_msg_hand_over(int status_fd);
/* Forgets the collected messages (this process is not the one configured). */
void pl_msg_drop(void);
/* DISTLOCK_PRELOAD_VERBOSE or the configuration's verbose: more messages. */
void pl_set_verbose(int on);
int pl_verbose(void);
/* write(2) until all of p is written or the descriptor fails. */
void pl_write_all(int fd, const char *p, size_t n);

/* ---- configuration (config.c) ----------------------------------------- */

enum pl_kind { PL_MUTEX, PL_RWLOCK };
enum pl_how { PL_SYMBOL, PL_INIT_SITE };
enum pl_unavail { PL_BLOCK, PL_FAIL, PL_ABORT };
enum pl_lost { PL_LOST_ABORT, PL_LOST_LOG };
enum pl_unres { PL_UNRES_DEFAULT = -1, PL_UNRES_ERROR = 0, PL_UNRES_WARN = 1 };

/* One [mutex NAME] or [rwlock NAME] section. */
struct pl_section {
    enum pl_kind kind;
    char *name;              /* the distributed lock's name */
    int line;                /* of the [header] */
    int match_line;          /* of "match =", 0 when missing */
    char *match;             /* the value as written */
    enum pl_how how;
    /* symbol: [OBJECT:][FILE:]NAME[ [N] | [*] ][+OFFSET]
     * init_site: [OBJECT:][FILE:]FUNCTION */
    char *qual[2];           /* qualifiers as written, NULL when absent */
    int nqual;
    char *symbol;
    int each;                /* [*] */
    long index;              /* [N], -1 when absent */
    unsigned long offset;
    unsigned long stride;    /* bytes between elements; 0: the lock's size */
    unsigned long count;     /* elements; 0: from the symbol's size */
    int fair;
    long lease_ms;           /* -1: [redis] lease_ms */
    int rw_prefer_writer;
    int on_unresolved;       /* enum pl_unres */
};

struct pl_config {
    char *path;
    char *url;
    int url_line;
    unsigned long lease_ms;
    unsigned long watchdog_ms;   /* 0: the library's default */
    unsigned long timeout_ms;    /* 0: the library's default */
    enum pl_unavail on_unavailable;
    enum pl_lost on_lease_lost;
    int on_unresolved;           /* PL_UNRES_ERROR or PL_UNRES_WARN */
    int verbose;
    char *program;               /* [preload] program: only in that one */
    struct pl_section *sec;
    size_t nsec;
};

/* Reads path.  0, or -1 after reporting every problem with pl_msg as
 * "FILE:LINE: ...".  cfg is filled either way; free it with pl_config_free. */
int pl_config_load(const char *path, struct pl_config *cfg);
void pl_config_free(struct pl_config *cfg);

/* ---- ELF symbol tables (elf.c) ------------------------------------------ */

struct pl_elf {
    const unsigned char *map;
    size_t size;
    const Elf64_Shdr *sh;
    size_t shnum;
    const Elf64_Sym *sym;    /* .symtab, or .dynsym when there is none */
    size_t nsym;
    const char *str;
    size_t strsz;
    size_t first_global;     /* sh_info of the table: locals come first */
    int dynamic_only;        /* no .symtab: stripped */
};

/* Maps path read-only and finds its symbol table.  0, or -1 with why. */
int pl_elf_open(struct pl_elf *e, const char *path, char *why, size_t whylen);
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
    long index;              /* element of [*], or -1 */
    char *where;             /* "g_shards[2] (shards.c) in /path/prog" */
};

/* A function whose pthread_mutex_init/pthread_rwlock_init calls map the
 * object they initialise. */
struct pl_range {
    uintptr_t lo, hi;        /* [lo, hi) */
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
    size_t unresolved;       /* sections only warned about */
};

/* Resolves every section.  0, or -1 after reporting each name that does
 * not resolve (unless only warned) with pl_msg. */
int pl_resolve(const struct pl_config *cfg, struct pl_resolved *out);
void pl_resolved_free(struct pl_resolved *r);

#endif
