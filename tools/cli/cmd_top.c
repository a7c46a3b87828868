/* cmd_top.c: distlock top [PATTERN]: a table of the locks and objects
 * under a pattern, drawn anew every interval: holders, waiters, lease, and
 * how long ago each lock was last taken.  That comes from the fencing
 * counter (redisson_lock_token:{N}): every new hold of a mutex, fair mutex
 * or rwlock's write lock draws a token that is at least the server's clock
 * in microseconds, so the counter says when the last one was drawn, and
 * sees a lock that is free at the moment of the look.  (A counter only
 * Redisson's RFencedLock ever moved counts by one and says no time: '-'.)
 * Reads only. */
#define _GNU_SOURCE
#include <errno.h>
#include <fnmatch.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "tool.h"

#define TOP_INTERVAL_MS 1000

struct top_opt {
    long interval;
    int once;
};

/* A lock's fencing counter, as read at one look. */
struct tok {
    char *name;
    size_t len;
    long long value; /* -1: unreadable (moved, not a number) */
};

struct toks {
    struct tok *v;
    size_t n;
    const char *pattern; /* the lock names wanted */
    size_t from;         /* the first one of the master being read */
};

/* One look at everything under the pattern. */
struct frame {
    struct rows rows;
    struct objs os;
    struct toks toks;
    long long at_us; /* CLOCK_REALTIME, us: when the counters were read */
};

/* The terminal, when top draws on one and reads q from one. */
static struct termios saved_tty;
static int tty_saved;

static void tty_restore(void)
{
    if (tty_saved)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_saved = 0;
}

/* Keys read one at a time without echo, so that q quits without Enter. */
static void tty_keys(void)
{
    struct termios t;

    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty) != 0)
        return;
    t = saved_tty;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0) {
        tty_saved = 1;
        atexit(tty_restore); /* die() exits too */
    }
}

/* ---- the counters ---------------------------------------------------------- */

static long long real_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* The lock name of a counter's key: Redisson puts braces around N unless
 * N has one of its own. */
static void add_tok(const char *k, size_t n, struct toks *t)
{
    const char *pre = dist__names_prefix(DIST__N_TOKEN), *p;
    size_t pl = strlen(pre), len;
    char *name;

    if (n <= pl || memcmp(k, pre, pl) != 0)
        return;
    p = k + pl;
    len = n - pl;
    if (len > 2 && p[0] == '{' && p[len - 1] == '}' &&
        !memchr(p + 1, '{', len - 2)) {
        p++;
        len -= 2;
    }
    name = xmemdup(p, len);
    if (strlen(name) != len || fnmatch(t->pattern, name, 0) != 0) {
        free(name);
        return;
    }
    t->v = xrealloc(t->v, (t->n + 1) * sizeof *t->v);
    t->v[t->n].name = name;
    t->v[t->n].len = len;
    t->v[t->n++].value = -1;
}

/* The values of the counters found on l, in one pipeline. */
static void read_toks(struct dist__link *l, struct toks *t)
{
    uint64_t until;
    size_t j;

    for (j = t->from; j < t->n; j++) {
        static const enum dist__nm token[] = { DIST__N_TOKEN };
        struct dist__names *nm = names_of(t->v[j].name, t->v[j].len);
        struct dist__buf *k = dist__names_set(nm, token, 1);
        const char *a[2] = { "GET", k ? B(*k) : NULL };
        size_t ln[2] = { 3, k ? L(*k) : 0 };
        if (!k || dist__link_append(l, 2, a, ln) != 0)
            die(EX_REDIS, "out of memory");
        free(k);
        dist__names_unref(nm);
    }
    until = dist__link_deadline(l, rlimit);
    for (j = t->from; j < t->n; j++) {
        redisReply *r;
        long long v;
        if (dist__link_reply(l, until, &r) != 0)
            die(EX_REDIS, "lost the connection to Redis at %s: %s",
                dist__link_where(l), dist__link_error(l));
        if (r->type == REDIS_REPLY_STRING &&
            parse_ll(r->str, r->len, &v) == 0)
            t->v[j].value = v;
        freeReplyObject(r);
    }
}

/* The fencing counters among one SCAN page's keys. */
static void toks_page(const redisReply *keys, void *arg)
{
    size_t i;

    for (i = 0; i < keys->elements; i++)
        if (keys->element[i]->type == REDIS_REPLY_STRING)
            add_tok(keys->element[i]->str, keys->element[i]->len, arg);
}

static void master_toks(struct dist__link *l, void *arg)
{
    struct toks *t = arg;
    struct sb pat = { 0 };

    sb_adds(&pat, dist__names_prefix(DIST__N_TOKEN));
    sb_adds(&pat, "*");
    t->from = t->n;
    list_scan(l, pat.p, "string", toks_page, t);
    sb_free(&pat);
    read_toks(l, t);
}

static int tok_cmp(const void *a, const void *b)
{
    const struct tok *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);

    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* A token seen twice: the value one of them has, one name. */
static void tok_drop(void *kept, void *dup)
{
    struct tok *k = kept, *d = dup;

    if (k->value < 0)
        k->value = d->value;
    free(d->name);
}

/* In name order, each once (SCAN may return a key twice). */
static void toks_unique(struct toks *t)
{
    t->n = sort_unique(t->v, t->n, sizeof *t->v, tok_cmp, tok_drop);
}

static const struct tok *tok_find(const struct toks *t, const char *name,
                                  size_t len)
{
    struct tok key = { (char *)name, len, 0 };

    return t->n ? bsearch(&key, t->v, t->n, sizeof *t->v, tok_cmp) : NULL;
}

static void frame_take(struct frame *f, const char *pattern)
{
    memset(f, 0, sizeof *f);
    f->toks.pattern = pattern;
    list_collect(pattern, &f->rows, &f->os, master_toks, &f->toks);
    f->at_us = real_us();
    toks_unique(&f->toks);
    objs_unique(&f->os);
}

static void frame_free(struct frame *f)
{
    size_t i;

    for (i = 0; i < f->rows.n; i++)
        snap_free(&f->rows.s[i]);
    free(f->rows.s);
    for (i = 0; i < f->os.n; i++)
        free(f->os.v[i].name);
    free(f->os.v);
    for (i = 0; i < f->toks.n; i++)
        free(f->toks.v[i].name);
    free(f->toks.v);
    memset(f, 0, sizeof *f);
}

/* ---- one line per lock or object ------------------------------------------- */

/* What a line shows; -1 for what is not known. */
struct line {
    const char *name;
    size_t len;
    const char *kind, *state;
    long long holders, waiting, lease_ms, token;
    long long last_ms; /* ms since the last new hold; < 0: not known */
};

/* A token below this (the clock in microseconds in September 2001) was
 * counted, not drawn from a clock. */
#define TOKEN_FROM_CLOCK 1000000000000000LL

/* How long ago the last new hold of l was taken, by its token: the
 * server's clock when it was drawn (it may run a little ahead of ours). */
static long long last_taken_ms(const struct frame *cur, const struct line *l)
{
    if (l->token < TOKEN_FROM_CLOCK)
        return -1;
    return cur->at_us > l->token ? (cur->at_us - l->token) / 1000 : 0;
}

static void line_of_snap(struct line *l, const struct snap *s,
                         const struct toks *t)
{
    const struct tok *k = tok_find(t, B(s->names->name), L(s->names->name));
    long long v;

    l->name = B(s->names->name);
    l->len = L(s->names->name);
    l->kind = kind_name[s->kind];
    l->state = state_name[s->state];
    l->holders = (long long)s->nh;
    /* a plain mutex's waiters wait on pub/sub and leave nothing in Redis;
     * a fair mutex's queue and an rwlock's waiting writers are there */
    l->waiting = s->kind == KIND_MUTEX ? -1 : (long long)(s->nq + s->nw);
    l->lease_ms = s->pttl;
    l->token = -1;
    if (k && k->value >= 0)
        l->token = k->value;
    else if (s->has_token && parse_ll(s->token, strlen(s->token), &v) == 0)
        l->token = v;
}

/* A lock that only its counter shows: free now, of no kind Redis knows. */
static void line_of_tok(struct line *l, const struct tok *k)
{
    memset(l, 0, sizeof *l);
    l->name = k->name;
    l->len = k->len;
    l->kind = NULL;
    l->state = state_name[ST_FREE];
    l->holders = 0;
    l->waiting = -1;
    l->lease_ms = -1;
    l->token = k->value;
}

/* A condition (its waiters), semaphore (its holders) or barrier (its
 * members, of whom those arrived wait). */
static int line_of_obj(struct line *l, const struct objname *on,
                       struct obj *o)
{
    long long c, a, r, br, f, h;

    obj_take(on->name, on->len, o);
    if (!(o->present & (1 << on->kind)))
        return 0; /* gone since the scan */
    memset(l, 0, sizeof *l);
    l->name = on->name;
    l->len = on->len;
    l->kind = obj_kind_text(on->kind);
    l->holders = l->waiting = l->lease_ms = l->token = -1;
    l->last_ms = -1;
    l->state = "-";
    if (on->kind == OBJ_COND) {
        l->waiting = (long long)obj_entries(o, OBJ_COND);
    } else if (on->kind == OBJ_SEM) {
        obj_sem_counts(o, &f, &h);
        l->holders = (long long)obj_entries(o, OBJ_SEM);
    } else {
        obj_barrier(o, &c, &a, &r, &br);
        l->holders = (long long)obj_entries(o, OBJ_BARRIER);
        l->waiting = a;
        l->state = obj_broken(o) ? "broken" : "-";
    }
    return 1;
}

/* ---- printing ------------------------------------------------------------ */

static void json_num(struct sb *b, const char *key, long long v)
{
    if (v >= 0)
        sb_printf(b, ",\"%s\":%lld", key, v);
    else
        sb_printf(b, ",\"%s\":null", key);
}

static void line_json(struct sb *b, const struct line *l, int first)
{
    sb_adds(b, first ? "{\"name\":" : ",{\"name\":");
    sb_json(b, l->name, l->len);
    sb_adds(b, ",\"kind\":");
    sb_jsonz(b, l->kind);
    sb_adds(b, ",\"state\":");
    sb_jsonz(b, l->state);
    json_num(b, "holders", l->holders);
    json_num(b, "waiting", l->waiting);
    json_num(b, "last_taken_ms", l->last_ms);
    json_num(b, "token", l->token);
    json_lease(b, "lease_ms", l->lease_ms);
    sb_adds(b, "}");
}

static void cell_num(struct sb *b, long long v)
{
    if (v >= 0)
        sb_printf(b, "  %7lld", v);
    else
        sb_printf(b, "  %7s", "-");
}

static void line_text(struct sb *b, const struct line *l, size_t width)
{
    size_t start = b->len;
    char lease[32] = "-";

    sb_human(b, l->name, l->len);
    while (b->len - start < width)
        sb_addn(b, " ", 1);
    sb_printf(b, "  %-10s  %-10s", l->kind ? l->kind : "-", l->state);
    cell_num(b, l->holders);
    cell_num(b, l->waiting);
    if (l->last_ms >= 0) {
        char ago[32];
        snprintf(ago, sizeof ago, "%lld.%lld s", l->last_ms / 1000,
                 (l->last_ms % 1000) / 100);
        sb_printf(b, "  %9s", ago);
    } else {
        sb_printf(b, "  %9s", "-");
    }
    if (l->lease_ms >= 0)
        snprintf(lease, sizeof lease, "%lld.%lld s", l->lease_ms / 1000,
                 (l->lease_ms % 1000) / 100);
    sb_printf(b, "  %s", lease);
}

/* The lines of cur in name order: the locks (rows and free locks' counters
 * merged), then the objects. */
static size_t frame_lines(const struct frame *cur, struct line **out,
                          size_t *nlocks)
{
    size_t i = 0, j = 0, n = 0, k;
    struct line *v = xrealloc(
        NULL, (cur->rows.n + cur->toks.n + cur->os.n + 1) * sizeof *v);

    while (i < cur->rows.n || j < cur->toks.n) {
        const struct snap *s = i < cur->rows.n ? &cur->rows.s[i] : NULL;
        const struct tok *t = j < cur->toks.n ? &cur->toks.v[j] : NULL;
        struct tok sk = { s ? (char *)B(s->names->name) : NULL,
                          s ? L(s->names->name) : 0, 0 };
        int c = !s ? 1 : !t ? -1 : tok_cmp(&sk, t);
        if (c <= 0) {
            line_of_snap(&v[n], s, &cur->toks);
            i++;
            j += c == 0;
        } else {
            line_of_tok(&v[n], t);
            j++;
        }
        v[n].last_ms = last_taken_ms(cur, &v[n]);
        n++;
    }
    *nlocks = n;
    for (k = 0; k < cur->os.n; k++) {
        struct obj o;
        if (line_of_obj(&v[n], &cur->os.v[k], &o))
            n++;
        obj_free(&o);
    }
    *out = v;
    return n;
}

static void print_json(const struct line *v, size_t n, size_t nlocks,
                       long interval)
{
    struct sb b = { 0 };
    size_t i;

    sb_printf(&b, "{\"interval_ms\":%ld,\"locks\":[", interval);
    for (i = 0; i < nlocks; i++)
        line_json(&b, &v[i], i == 0);
    sb_adds(&b, "],\"objects\":[");
    for (i = nlocks; i < n; i++)
        line_json(&b, &v[i], i == nlocks);
    sb_adds(&b, "]}");
    sb_flush_line(&b);
    sb_free(&b);
}

static void print_text(const struct line *v, size_t n, size_t nlocks,
                       const char *pattern, long interval)
{
    struct sb b = { 0 };
    size_t i, width = 4;
    char when[16] = "";
    time_t now = time(NULL);
    struct tm tm;

    if (localtime_r(&now, &tm))
        strftime(when, sizeof when, "%H:%M:%S", &tm);
    for (i = 0; i < n; i++)
        if (v[i].len > width)
            width = v[i].len;
    if (width > 48)
        width = 48;
    sb_printf(&b,
              "distlock top %s: %zu lock%s, %zu object%s matching '%s',"
              " every %ld ms",
              when, nlocks, nlocks == 1 ? "" : "s", n - nlocks,
              n - nlocks == 1 ? "" : "s", pattern, interval);
    sb_flush_line(&b);
    sb_printf(&b, "%-*s  %-10s  %-10s  %7s  %7s  %9s  %s", (int)width, "NAME",
              "KIND", "STATE", "HOLDERS", "WAITING", "TAKEN", "LEASE");
    sb_flush_line(&b);
    for (i = 0; i < n; i++) {
        line_text(&b, &v[i], width);
        sb_flush_line(&b);
    }
    sb_free(&b);
}

/* Prints cur; -1 when stdout failed. */
static int frame_print(const struct frame *cur, const char *pattern,
                       const struct top_opt *o, int redraw)
{
    struct line *v;
    size_t nlocks, n = frame_lines(cur, &v, &nlocks);

    if (redraw)
        fputs("\033[H\033[2J", stdout); /* home, clear the screen */
    if (opt.json)
        print_json(v, n, nlocks, o->interval);
    else
        print_text(v, n, nlocks, pattern, o->interval);
    free(v);
    if (!redraw && !opt.json && !o->once)
        putchar('\n'); /* between the looks */
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : -1;
}

/* ---- the loop -------------------------------------------------------------- */

/* Waits ms, or until a signal or q on the terminal: 1 to stop. */
static int top_wait(long ms)
{
    struct pollfd p = { STDIN_FILENO, POLLIN, 0 };
    uint64_t until = dist__now_ms() + (uint64_t)ms;
    char c;

    while (!stop_sig) {
        uint64_t now = dist__now_ms();
        if (now >= until)
            return 0;
        if (poll(&p, tty_saved ? 1 : 0, (int)(until - now)) > 0) {
            if (read(STDIN_FILENO, &c, 1) != 1 || c == 'q' || c == 'Q')
                return 1;
        }
    }
    return 1;
}

static int top_arg(int argc, char **argv, int *i, void *arg)
{
    struct top_opt *o = arg;

    if (strcmp(argv[*i], "--once") == 0) {
        o->once = 1;
        return 1;
    }
    return interval_opt(argc, argv, i, &o->interval);
}

int cmd_top(int argc, char **argv)
{
    struct top_opt o = { TOP_INTERVAL_MS, 0 };
    const char *pattern = operand_args(argc, argv, top_arg, &o);
    int redraw;
    struct frame cur;

    if (!pattern)
        pattern = "*";
    redis_setup();
    catch_stops();
    /* on a terminal the table is drawn in place; otherwise (a pipe, a
     * file, --json) each look is printed after the last */
    redraw = !o.once && !opt.json && isatty(STDOUT_FILENO);
    if (redraw)
        tty_keys();
    do {
        frame_take(&cur, pattern);
        if (frame_print(&cur, pattern, &o, redraw) != 0)
            stop_sig = 1;
        frame_free(&cur);
    } while (!o.once && !top_wait(o.interval));
    tty_restore();
    return 0;
}
