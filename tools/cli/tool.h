/* tool.h: what the files of the distlock command share.  The tool talks to
 * Redis through the library's route and link layers (convenience library,
 * not the public API), so that it and the library never disagree on where
 * Redis is or on a layout. */
#ifndef DISTLOCK_TOOL_H
#define DISTLOCK_TOOL_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "distlock.h"
#include "route/names.h"
#include "route/route.h"
#include "scripts.h"

#define EX_BUSY  1
#define EX_USAGE 2
#define EX_REDIS 3

#define READ_KEYS_MAX 1000 /* read-hold timeout keys looked at per owner */

#define B(buf) (buf).p
#define L(buf) (buf).len

/* ---- main.c: options, messages ------------------------------------------ */

extern struct tool_opt {
    int json;
    const char *url;
    const char *tls[6]; /* --tls-ca, -cert, -key, -server-name, -insecure,
                            * and the passphrase from --tls-key-pass-file */
} opt;
extern struct dist__cfg rcfg; /* the settings, once redis_setup ran */
extern uint64_t rlimit;       /* the end of the whole command (monotonic
                                    * ms; 0: none), the limit (link.h) every
                                    * call to Redis passes */
extern const char *cur_cmd;   /* for "Try 'distlock CMD --help'" */
extern const char *cur_usage; /* what --help prints */

/* text.c: messages on stderr, "distlock: " first */
void vsay(const char *fmt, va_list ap);
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
/* Options every command takes: 1 when argv[*i] was one (*i moved past its
 * value), 0 otherwise. */
int common_opt(int argc, char **argv, int *i);
/* "--opt V" or "--opt=V": V, or NULL when argv[*i] is not name. */
const char *opt_value(int argc, char **argv, int *i, const char *name);
void check_name(const char *name);
/* "--interval MS" (10..60000) into *ms: 1 when argv[*i] was it. */
/* v, the value of option name, as seconds: above 0 (or 0 too when
 * zero_ok) and at most max, or a usage error that names the option. */
double secs_value(const char *name, const char *v, int zero_ok, double max);
int interval_opt(int argc, char **argv, int *i, long *ms);
/* SIGINT, SIGTERM and SIGHUP set stop_sig (the signal) instead of ending
 * the tool, without SA_RESTART, so that a poll returns: for the commands
 * that run until stopped (watch, top). */
extern volatile sig_atomic_t stop_sig;
void catch_stops(void);
/* A command's own option: 1 when argv[*i] is one (*i moved past its
 * value), 0 otherwise. */
typedef int (*extra_opt_fn)(int argc, char **argv, int *i, void *arg);
/* Parses options (the command's own through extra, which may be NULL, then
 * the common ones; none after "--") and at most one operand, which it
 * returns (NULL: none). */
const char *operand_args(int argc, char **argv, extra_opt_fn extra,
                         void *arg);
/* The same, for a lock NAME, which must be there and valid. */
const char *name_args(int argc, char **argv, extra_opt_fn extra, void *arg);
/* On stderr, when the lock whose derived keys are all NAME's ("{q}" for
 * "q", and back) is held: the two block each other (names.h). */
void warn_twin(const char *name);
/* Reads the settings (--url or --url-file, DISTLOCK_URL, the --tls-*
 * flags and DISTLOCK_TLS_*); exit 2 when they are bad. */
void redis_setup(void);
/* Why the last call to Redis failed: never empty. */
const char *redis_why(void);
int on_cluster(void);
/* Releases go by SPUBLISH (a cluster without ?pubsub=plain). */
int sharded_pubsub(void);
/* Releases go by PUBLISH as well (a cluster with ?pubsub=both, its
 * default). */
int both_pubsub(void);
/* "host:port" or "unix:PATH" of a. */
void addr_text(char *buf, size_t len, const struct dist__addr *a);

/* ---- text.c: growing strings, escaping ---------------------------------- */

struct sb {
    char *p;
    size_t len, cap;
};

void *xrealloc(void *p, size_t n);
char *xmemdup(const char *p, size_t n);
/* Sorts the n elements of size bytes at base by cmp and keeps the first of
 * each run of equal ones, telling drop of every other (to free it, or
 * merge it into the one kept).  How many are kept. */
size_t sort_unique(void *base, size_t n, size_t size,
                   int (*cmp)(const void *, const void *),
                   void (*drop)(void *kept, void *dup));
void sb_addn(struct sb *b, const char *s, size_t n);
void sb_adds(struct sb *b, const char *s);
void sb_printf(struct sb *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sb_json(struct sb *b, const char *s, size_t n);  /* a JSON string */
void sb_jsonz(struct sb *b, const char *s);           /* NULL: null */
void sb_human(struct sb *b, const char *s, size_t n); /* for a terminal */
void sb_json_name(struct sb *b, const char *name);    /* {"name":"..." */
void sb_quoted(struct sb *b, const char *name);       /* 'name', human */
void sb_flush_line(struct sb *b);                     /* + "\n" to stdout */
void sb_free(struct sb *b);
void sb_secs(struct sb *b, long long ms); /* "29.9 s" */
int is_digits(const char *s, size_t n);
int parse_ll(const char *s, size_t n, long long *v);

/* ---- snap.c: a lock's state --------------------------------------------- */

enum { KIND_NONE, KIND_MUTEX, KIND_FAIR, KIND_RWLOCK, KIND_UNKNOWN };
enum { ST_FREE, ST_HELD, ST_READ, ST_WRITE, ST_UNKNOWN };
extern const char *const kind_name[];
extern const char *const state_name[];

struct holder {
    char *owner; /* "<client id>:<thread n>" */
    size_t olen;
    long long holds; /* mutex */
    long long reads; /* rwlock */
    long long writes;
    long long lease_ms; /* rwlock reader: longest read-hold key; -3 none */
};

struct waiter {
    char *owner;
    size_t olen;
    long long window_ms; /* deadline - server now; LLONG_MIN if unknown */
};

struct snap {
    struct dist__names *names;
    char type[32]; /* Redis TYPE of N */
    int kind, state;
    int lockish;  /* every field looks like a distlock/Redisson owner */
    int ownerish; /* the same, loosely: "<something>:<id>" */
    struct holder *h;
    size_t nh;
    long long pttl;
    int has_token;
    char token[32];
    struct waiter *q; /* fair queue, head first */
    size_t nq;
    int has_timeouts; /* the fair lock's deadline ZSET exists */
    struct waiter *w; /* waiting writers, first deadline first */
    size_t nw;
    long long now_ms;  /* Redis server clock */
    uint64_t taken_ms; /* our monotonic clock when it was read */
    /* a robust mutex's record (distlock_robust:{N}; snap_take only): its
     * fields, malloc'd, NULL when absent; has_robust when it exists */
    int has_robust;
    char *r_held, *r_dead, *r_nr;
};

#define SNAP_CMDS 10 /* MULTI, 8 reads, EXEC */

struct dist__names *names_of(const char *name, size_t len);
/* On a cluster a lock's keys must share a slot: whether n's do. */
int names_fit(const struct dist__names *n);
/* names_of, exit 2 when the name cannot be a lock here. */
struct dist__names *lock_names(const char *name, size_t len);
/* The commands of one picture of n (MULTI ... EXEC); args holds their
 * arguments until snap_args_free. */
struct snap_args {
    const char *a[SNAP_CMDS][5];
    size_t l[SNAP_CMDS][5];
    struct dist__buf *keys; /* the names derived from n that it reads */
};
void snap_cmds(const struct dist__names *n, struct snap_args *args,
               struct dist__cmd *cmds);
void snap_args_free(struct snap_args *args);
/* Fills s (which holds the names) from the SNAP_CMDS replies r read at
 * where.  0, or 1 when one redirects (nothing filled in); exit 3 when the
 * server refused a read. */
int snap_parse(struct snap *s, redisReply **r, const char *where);
/* A picture of lock N, read on the master that holds it; exit 3 when it
 * cannot be read. */
void snap_take(const char *name, size_t len, struct snap *s);
void snap_free(struct snap *s);
/* The read-hold timeout key {N}:<owner>:rwlock_timeout:<k>. */
char *read_key(const struct dist__names *n, const struct holder *h,
               long long k, size_t *len);
void owner_split(const char *o, size_t n, size_t *clen, const char **thr,
                 size_t *tlen);
int owner_strict(const char *o, size_t n); /* "<uuid>:<digits>" */
void json_owner(struct sb *b, const char *o, size_t n);
void human_owner(struct sb *b, const char *o, size_t n);

/* ---- cmd_status.c: printing a state ------------------------------------------- */

void json_lease(struct sb *b, const char *key, long long pttl);
void json_waiters(struct sb *b, const char *key, const struct waiter *w,
                  size_t n);
void json_holders(struct sb *b, const struct snap *s);
void json_head(struct sb *b, const struct snap *s);
void human_lease(struct sb *b, long long pttl);
void holders_text(struct sb *b, const struct snap *s);
void status_json(const struct snap *s);
void status_human(const struct snap *s);
/* A robust mutex's record's name, distlock_robust:{N}, malloc'd (free()
 * it); exit on out of memory (snap.c). */
struct dist__buf *robust_key(const struct dist__names *n);
/* The robust record's lines and JSON member (cmd_status.c). */
void robust_human(struct sb *b, const struct snap *s);
void robust_json(struct sb *b, const struct snap *s);

/* ---- watch_events.c ----------------------------------------------------- */

enum { M_MUTEX, M_READ, M_WRITE }; /* a hold's kind */
/* Whether owner o is among the n waiters w; *pos (may be NULL) its place. */
int waiter_in(const struct waiter *w, size_t n, const char *o, size_t on,
              size_t *pos);
/* The first line of watch: the state when watching starts.  0, or -1 when
 * stdout failed. */
int ev_state(const struct snap *s);
/* Prints what changed from a to b; released: a release message came. */
int ev_diff(const struct snap *a, const struct snap *b, int released);

/* ---- objs.c: a condition, semaphore or barrier ------------------------- */

enum { OBJ_NONE, OBJ_COND, OBJ_SEM, OBJ_RSEM, OBJ_BARRIER };

struct obj {
    struct dist__names *names;
    redisReply *e;    /* EXEC's replies, read when printed */
    long long now_ms; /* Redis server clock */
    int present;      /* bits 1 << OBJ_*: kinds with keys under the name */
    int lock;         /* the key N is a hash: a lock */
};

/* A picture of every kind's keys under name; exit 3 when unreadable. */
void obj_take(const char *name, size_t len, struct obj *o);
void obj_free(struct obj *o);
const char *obj_kind_text(int kind);             /* "cond", ...; NULL */
int obj_kind_of(const char *s);                  /* OBJ_NONE: not a kind */
size_t obj_live(const struct obj *o, int which); /* OBJ_COND, OBJ_BARRIER */
/* Waiters (cond), holders (sem) or members (barrier). */
size_t obj_entries(const struct obj *o, int kind);
void obj_sem_counts(const struct obj *o, long long *free_, long long *held);
void obj_barrier(const struct obj *o, long long *count, long long *arrived,
                 long long *round, long long *broken);
int obj_broken(const struct obj *o);
void obj_json(const struct obj *o, int kind);
void obj_human(const struct obj *o, int kind);

/* ---- scan.c: the scan of distlock list and top ------------------------- */

/* Called with the keys array of each SCAN page. */
typedef void (*scan_page_fn)(const redisReply *keys, void *arg);
/* Every key on l's server matching the glob pattern (and of type type,
 * where the server filters by type; NULL: any), page by page to fn.  Exit
 * 3 when the link fails, the answer is not a SCAN page, a cursor comes
 * back before the scan ends (a broken server), or list's --timeout has
 * passed. */
void list_scan(struct dist__link *l, const char *pattern, const char *type,
               scan_page_fn fn, void *arg);
/* Sets list_scan's deadline secs from now (list's --timeout); returns it
 * (monotonic ms).  Without it, scans have none but the link's own. */
uint64_t list_scan_deadline(double secs);

/* ---- list_objs.c: the objects distlock list shows ----------------------- */

struct objname {
    int kind;
    char *name;
    size_t len;
};
struct objs {
    struct objname *v;
    size_t n;
};
/* Adds the objects on l whose names match pattern. */
void objs_scan(struct dist__link *l, const char *pattern, struct objs *os);
/* In name order, each once (free()s the duplicates). */
void objs_unique(struct objs *os);
/* Prints them as rows of list's table (its heading first unless heading
 * is 0: the locks printed it); frees them.  How many were shown. */
size_t objs_print(struct objs *os, size_t width, int heading);

/* ---- cmd_list.c: what distlock list and top read ------------------------- */

struct rows {
    struct snap *s;
    size_t n;
};
typedef void (*master_fn)(struct dist__link *l, void *arg);
/* The locks (rows, in name order) and the other objects whose names match
 * pattern, on every master; each(l, arg) on each master's link too, when
 * each is not NULL.  Exit 3 when Redis cannot be read. */
void list_collect(const char *pattern, struct rows *rows, struct objs *os,
                  master_fn each, void *arg);

/* ---- the commands ------------------------------------------------------- */

/* The descriptors open at start-up (cmd_lock.c): the command lock runs
 * inherits these and no others. */
void note_startup_fds(void);

int cmd_status(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_lock(int argc, char **argv);
int cmd_unlock(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_sem_set(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_fence(int argc, char **argv);

#endif
