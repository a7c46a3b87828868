/* resolve.c: from "match = symbol ..." / "init_site ..." to addresses.
 *
 * The loaded objects and their load addresses come from dl_iterate_phdr
 * (the main program first, then the libraries in load order); the symbols
 * from each object's file (elf.c), the main program's through
 * /proc/self/exe.  An address is load address + st_value, for PIE and
 * non-PIE alike (dlpi_addr is 0 for a fixed-address executable). */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

struct obj {
    char *path;       /* the file to read */
    char *display;    /* its name in messages */
    const char *base; /* basename of display */
    uintptr_t addr;
    const ElfW(Phdr) * phdr;
    int phnum;
    int is_main;
    int state; /* 0 unread, 1 read, -1 unreadable */
    struct pl_elf elf;
};

struct objs {
    struct obj *o;
    size_t n;
    int oom;
};

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct objs *os = arg;
    struct obj *o;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int is_main = os->n == 0 && *name == '\0';
    char exe[PATH_MAX];
    ssize_t n;

    (void)size;
    /* the vDSO and anything else without a file ("linux-vdso.so.1") */
    if (!is_main && !strchr(name, '/'))
        return 0;
    o = realloc(os->o, (os->n + 1) * sizeof *o);
    if (!o) {
        os->oom = 1;
        return 1;
    }
    os->o = o;
    o = &os->o[os->n];
    memset(o, 0, sizeof *o);
    if (is_main) {
        n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        o->path = strdup("/proc/self/exe");
        o->display = strdup(n > 0 ? exe : "the program");
    } else {
        o->path = strdup(name);
        o->display = strdup(name);
    }
    if (!o->path || !o->display) {
        free(o->path);
        free(o->display);
        os->oom = 1;
        return 1;
    }
    o->base =
        strrchr(o->display, '/') ? strrchr(o->display, '/') + 1 : o->display;
    o->addr = info->dlpi_addr;
    o->phdr = info->dlpi_phdr;
    o->phnum = info->dlpi_phnum;
    o->is_main = is_main;
    os->n++;
    return 0;
}

static void objs_free(struct objs *os)
{
    size_t i;

    for (i = 0; i < os->n; i++) {
        if (os->o[i].state == 1)
            pl_elf_close(&os->o[i].elf);
        free(os->o[i].path);
        free(os->o[i].display);
    }
    free(os->o);
}

static int obj_read(struct obj *o)
{
    char why[200];

    if (o->state == 0) {
        if (pl_elf_open(&o->elf, o->path, why, sizeof why) == 0) {
            o->state = 1;
            if (o->elf.symtab_bad)
                pl_msg("warning: %s: its .symtab is corrupted (%s): only "
                       "its dynamic symbols can be found",
                       o->display, o->elf.symtab_bad);
            else if (o->elf.dynamic_only && o->is_main && pl_verbose())
                pl_msg("note: %s has no .symtab (stripped): only its "
                       "dynamic symbols can be found",
                       o->display);
        } else {
            o->state = -1;
            pl_msg("warning: cannot read the symbols of %s: %s", o->display,
                   why);
        }
    }
    return o->state == 1;
}

/* Does qualifier q name object o?  "libfoo.so" matches libfoo.so.1.2; a
 * name with a '/' must be the object's path. */
static int obj_matches(const struct obj *o, const char *q)
{
    size_t n = strlen(q);

    if (strchr(q, '/'))
        return strcmp(o->display, q) == 0;
    return strncmp(o->base, q, n) == 0 &&
           (o->base[n] == '\0' || o->base[n] == '.');
}

/* A qualifier that can only mean a shared object: a path, or "NAME.so"
 * possibly followed by a version. */
static int looks_like_object(const char *q)
{
    const char *so = strstr(q, ".so");

    return strchr(q, '/') != NULL || (so && (so[3] == '\0' || so[3] == '.'));
}

static const char *basename_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ---- looking for one name in one object ------------------------------------ */

#define MAX_HITS 16

struct hit {
    const Elf64_Sym *s;
    const char *name;
    const char *file; /* NULL for a global */
};

struct search {
    const char *name;
    const char *file; /* required source file, or NULL */
    int func;         /* init_site: functions, and NAME.suffix too */
    struct hit hit[MAX_HITS];
    int n;
};

static int on_sym(void *arg, const Elf64_Sym *s, const char *name,
                  const char *file)
{
    struct search *q = arg;
    size_t len = strlen(q->name);
    int type = ELF64_ST_TYPE(s->st_info);

    if (strncmp(name, q->name, len) != 0)
        return 0;
    if (name[len] != '\0' && !(q->func && name[len] == '.'))
        return 0;
    if (q->func && type != STT_FUNC)
        return 0;
    if (q->file && file &&
        strcmp(basename_of(file), basename_of(q->file)) != 0)
        return 0;
    if (q->file && ELF64_ST_BIND(s->st_info) == STB_LOCAL && !file)
        return 0;
    if (q->n < MAX_HITS) {
        q->hit[q->n].s = s;
        q->hit[q->n].name = name;
        q->hit[q->n].file =
            ELF64_ST_BIND(s->st_info) == STB_LOCAL ? file : NULL;
        q->n++;
    }
    return 0;
}

/* Keeps the hits that count: with a required file, its locals (or, when
 * it has none, globals, whose file the table does not record); exact names
 * only, unless keep_variants.  Returns how many distinct addresses. */
static int filter(struct search *q, int keep_variants)
{
    int i, j, k = 0, locals = 0, distinct = 0;

    for (i = 0; i < q->n; i++)
        if (q->file && q->hit[i].file)
            locals++;
    for (i = 0; i < q->n; i++) {
        int exact = strcmp(q->hit[i].name, q->name) == 0;

        if (q->file && locals && !q->hit[i].file)
            continue;
        if (!exact && !keep_variants)
            continue;
        q->hit[k++] = q->hit[i];
    }
    q->n = k;
    for (i = 0; i < q->n; i++) {
        for (j = 0; j < i; j++)
            if (q->hit[j].s->st_value == q->hit[i].s->st_value)
                break;
        if (j == i && strcmp(q->hit[i].name, q->name) == 0)
            distinct++;
    }
    return distinct;
}

static void describe_hits(const struct search *q, char *buf, size_t len)
{
    size_t used = 0;
    int i;

    buf[0] = '\0';
    for (i = 0; i < q->n && used < len; i++) {
        if (strcmp(q->hit[i].name, q->name) != 0)
            continue;
        used +=
            (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                             q->hit[i].file ? q->hit[i].file : "global");
    }
}

/* ---- checks on an address ----------------------------------------------------- */

static int writable(const struct obj *o, uintptr_t a, size_t len)
{
    int i, ok = 0;

    for (i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *p = &o->phdr[i];
        uintptr_t lo = o->addr + p->p_vaddr, hi = lo + p->p_memsz;

        if (a < lo || a + len > hi)
            continue;
        if (p->p_type == PT_LOAD && (p->p_flags & PF_W))
            ok = 1;
        if (p->p_type == PT_GNU_RELRO)
            return 0;
    }
    return ok;
}

/* ---- one section ---------------------------------------------------------------- */

struct ctx {
    const struct pl_config *cfg;
    struct objs *os;
    struct pl_resolved *out;
    int errors;
};

static void unresolved(struct ctx *c, const struct pl_section *s,
                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void unresolved(struct ctx *c, const struct pl_section *s,
                       const char *fmt, ...)
{
    char buf[700];
    va_list ap;
    int warn = s->on_unresolved != PL_UNRES_DEFAULT
                   ? s->on_unresolved == PL_UNRES_WARN
                   : c->cfg->on_unresolved == PL_UNRES_WARN;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pl_msg("%s%s:%d: [%s %s] %s", warn ? "warning: " : "", c->cfg->path,
           s->match_line, pl_kind_name(s->kind), s->name, buf);
    if (warn)
        c->out->unresolved++;
    else
        c->errors++;
}

/* Sets up the search for the section's name from its qualifiers: a file
 * into q->file; returns the object qualifier, or NULL.  A lone qualifier is
 * an object when a loaded object has that name or it looks like one. */
static const char *search_for(struct ctx *c, const struct pl_section *s,
                              struct search *q)
{
    size_t i;
    int any_obj = 0;

    memset(q, 0, sizeof *q);
    q->name = s->symbol;
    q->func = s->how == PL_INIT_SITE;
    if (s->nqual == 2) {
        q->file = s->qual[1];
        return s->qual[0];
    }
    if (s->nqual == 1) {
        for (i = 0; i < c->os->n; i++)
            if (obj_matches(&c->os->o[i], s->qual[0]))
                any_obj = 1;
        if (any_obj || looks_like_object(s->qual[0]))
            return s->qual[0];
        q->file = s->qual[0];
    }
    return NULL;
}

static int any_object_called(const struct ctx *c, const char *objq)
{
    int any_obj = 0;
    size_t i;

    for (i = 0; i < c->os->n; i++)
        any_obj |= obj_matches(&c->os->o[i], objq);
    return any_obj;
}

/* Why the program's own symbols may be missing: stripped, or a .symtab
 * that could not be read (elf.c). */
static const char *main_note(const struct ctx *c)
{
    const struct pl_elf *e;

    if (!c->os->n || c->os->o[0].state != 1)
        return "";
    e = &c->os->o[0].elf;
    if (e->symtab_bad)
        return " (the program's .symtab is corrupted: only its dynamic "
               "symbols are known)";
    if (e->dynamic_only)
        return " (the program is stripped: only its dynamic symbols are "
               "known)";
    return "";
}

static void not_found(struct ctx *c, const struct pl_section *s,
                      const struct search *q, const char *objq)
{
    char in[300];

    if (objq)
        snprintf(in, sizeof in, " in %s", objq);
    else
        snprintf(in, sizeof in, " in the program or its libraries");
    unresolved(c, s, "%s '%s'%s%s%s not found%s",
               q->func ? "function" : "symbol", s->symbol,
               q->file ? " of " : "", q->file ? q->file : "", in,
               main_note(c));
}

/* Finds the section's name: the object it is in (*where) and its hits. */
static int find(struct ctx *c, const struct pl_section *s, struct search *q,
                struct obj **where)
{
    const char *objq;
    struct obj *first = NULL;
    struct search best;
    char list[300];
    size_t i;
    int first_global = 0;

    memset(&best, 0, sizeof best);
    objq = search_for(c, s, q);
    if (objq && !any_object_called(c, objq)) {
        unresolved(c, s, "no loaded object is called '%s'", objq);
        return -1;
    }
    for (i = 0; i < c->os->n; i++) {
        struct obj *o = &c->os->o[i];
        struct search one = *q;
        int distinct, global;

        if (objq && !obj_matches(o, objq))
            continue;
        if (!obj_read(o))
            continue;
        one.n = 0;
        pl_elf_each(&o->elf, on_sym, &one);
        distinct = filter(&one, q->func);
        if (distinct == 0)
            continue;
        if (distinct > 1) {
            describe_hits(&one, list, sizeof list);
            unresolved(c, s, "'%s' is ambiguous in %s (%s): write FILE:%s",
                       s->symbol, o->display, list, s->symbol);
            return -1;
        }
        global = one.hit[0].file == NULL &&
                 ELF64_ST_BIND(one.hit[0].s->st_info) != STB_LOCAL;
        if (!first) {
            first = o;
            first_global = global;
            best = one;
            if (o->is_main && !objq)
                break; /* unqualified: the program's own comes first */
            continue;
        }
        /* a global defined in several objects is one object at run time
         * (the first definition wins); a file-static one is not */
        if (!(global && first_global)) {
            unresolved(c, s, "'%s' is in both %s and %s: write OBJECT:%s",
                       s->symbol, first->display, o->display, s->symbol);
            return -1;
        }
    }
    if (!first) {
        not_found(c, s, q, objq);
        return -1;
    }
    *q = best;
    *where = first;
    return 0;
}

static char *where_text(const struct pl_section *s, const struct hit *h,
                        const struct obj *o, long idx, uintptr_t a)
{
    char ix[32] = "", off[32] = "", fl[300] = "", buf[1000];

    if (idx >= 0)
        snprintf(ix, sizeof ix, "[%ld]", idx);
    if (s->offset)
        snprintf(off, sizeof off, "+%lu", s->offset);
    if (h->file)
        snprintf(fl, sizeof fl, " (%s)", h->file);
    snprintf(buf, sizeof buf, "%s%s%s%s in %s at %#lx", s->symbol, ix, off,
             fl, o->display, (unsigned long)a);
    return strdup(buf);
}

static int add_target(struct ctx *c, const struct pl_section *s, uintptr_t a,
                      long idx, char *where)
{
    struct pl_target *t = realloc(c->out->t, (c->out->nt + 1) * sizeof *t);

    if (!t || !where) {
        free(where);
        pl_msg("out of memory");
        c->errors++;
        return -1;
    }
    c->out->t = t;
    t[c->out->nt].addr = a;
    t[c->out->nt].sec = s;
    t[c->out->nt].index = idx;
    t[c->out->nt].where = where;
    c->out->nt++;
    return 0;
}

/* A global defined by a library may live in the program instead: a
 * non-PIC reference from the program copies it there (a copy relocation)
 * and every object then uses that copy. */
static uintptr_t copy_of(struct ctx *c, const struct obj *o,
                         const struct hit *h, const struct obj **in)
{
    struct obj *m = &c->os->o[0];
    struct search q;

    *in = o;
    if (o->is_main || h->file || !m->is_main ||
        ELF64_ST_VISIBILITY(h->s->st_other) != STV_DEFAULT || !obj_read(m))
        return o->addr + h->s->st_value;
    memset(&q, 0, sizeof q);
    q.name = h->name;
    pl_elf_each(&m->elf, on_sym, &q);
    if (q.n == 1 && q.hit[0].file == NULL &&
        ELF64_ST_TYPE(q.hit[0].s->st_info) == STT_OBJECT &&
        ELF64_ST_BIND(q.hit[0].s->st_info) != STB_LOCAL) {
        *in = m;
        return m->addr + q.hit[0].s->st_value;
    }
    return o->addr + h->s->st_value;
}

/* Refuses a name that cannot be a lock object.  0 when it can be. */
static int refuse_kind(struct ctx *c, const struct pl_section *s,
                       const struct hit *h)
{
    int type = ELF64_ST_TYPE(h->s->st_info);

    if (type == STT_FUNC || type == STT_GNU_IFUNC) {
        unresolved(c, s, "'%s' is a function, not a %s", s->symbol,
                   pl_kind_type(s->kind));
        return -1;
    }
    if (type == STT_TLS) {
        unresolved(c, s, "'%s' is thread-local: not supported", s->symbol);
        return -1;
    }
    return 0;
}

/* Which elements of an array match, NAME[*] or NAME[N]: [*first, *count).
 * 0, or -1 after reporting. */
static int array_range(struct ctx *c, const struct pl_section *s,
                       const struct hit *h, size_t lsize,
                       unsigned long stride, unsigned long *first,
                       unsigned long *count)
{
    if (s->offset + lsize > stride) {
        unresolved(c, s,
                   "offset %lu leaves no room for a %zu-byte lock "
                   "in a %lu-byte element (set stride =)",
                   s->offset, lsize, stride);
        return -1;
    }
    *count = s->count ? s->count : h->s->st_size / stride;
    if (s->count && h->s->st_size && s->count * stride > h->s->st_size) {
        unresolved(c, s,
                   "%lu elements of %lu bytes do not fit in '%s' "
                   "(%lu bytes)",
                   s->count, stride, s->symbol, (unsigned long)h->s->st_size);
        return -1;
    }
    if (*count == 0) {
        unresolved(c, s, "'%s' has %s (%lu bytes): set count =", s->symbol,
                   h->s->st_size ? "no whole element" : "no recorded size",
                   (unsigned long)h->s->st_size);
        return -1;
    }
    *first = 0;
    if (s->index >= 0) {
        if ((unsigned long)s->index >= *count) {
            unresolved(c, s,
                       "index %ld is past the end of '%s' (%lu "
                       "elements)",
                       s->index, s->symbol, *count);
            return -1;
        }
        *first = (unsigned long)s->index;
        *count = *first + 1;
    }
    return 0;
}

/* Adds the lock at base + i * stride + offset for i in [first, count),
 * each checked for alignment and writable memory. */
static void add_elements(struct ctx *c, const struct pl_section *s,
                         const struct hit *h, const struct obj *in,
                         uintptr_t base, size_t lsize, unsigned long stride,
                         unsigned long first, unsigned long count)
{
    unsigned long i;

    for (i = first; i < count; i++) {
        uintptr_t a = base + i * stride + s->offset;
        long idx = (s->each || s->index >= 0) ? (long)i : -1;

        if (a % 8 != 0) {
            unresolved(c, s, "%#lx is not aligned for a lock (offset?)",
                       (unsigned long)a);
            return;
        }
        if (!writable(in, a, lsize)) {
            unresolved(c, s, "%#lx (%s) is not in writable data of %s",
                       (unsigned long)a, s->symbol, in->display);
            return;
        }
        if (add_target(c, s, a, s->each ? idx : -1,
                       where_text(s, h, in, idx, a)) != 0)
            return;
    }
}

static void resolve_symbol(struct ctx *c, const struct pl_section *s)
{
    size_t lsize = pl_kind_size(s->kind);
    const struct obj *in;
    struct search q;
    struct obj *o;
    const struct hit *h;
    uintptr_t base;
    unsigned long stride, count, first;

    if (find(c, s, &q, &o) != 0)
        return;
    h = &q.hit[0];
    if (refuse_kind(c, s, h) != 0)
        return;
    base = copy_of(c, o, h, &in);
    stride = s->stride ? s->stride : lsize;
    if (s->each || s->index >= 0) {
        if (array_range(c, s, h, lsize, stride, &first, &count) != 0)
            return;
    } else {
        if (h->s->st_size && s->offset + lsize > h->s->st_size) {
            unresolved(c, s,
                       "'%s' is %lu bytes: no room for a %zu-byte lock "
                       "at offset %lu",
                       s->symbol, (unsigned long)h->s->st_size, lsize,
                       s->offset);
            return;
        }
        first = 0;
        count = 1;
    }
    add_elements(c, s, h, in, base, lsize, stride, first, count);
}

static void resolve_site(struct ctx *c, const struct pl_section *s)
{
    struct pl_site *site;
    struct search q;
    struct obj *o;
    const char *file;
    char buf[600];
    int i;

    if (find(c, s, &q, &o) != 0)
        return;
    site = realloc(c->out->s, (c->out->ns + 1) * sizeof *site);
    if (!site) {
        c->errors++;
        return;
    }
    c->out->s = site;
    site = &site[c->out->ns];
    memset(site, 0, sizeof *site);
    site->sec = s;
    site->r = calloc((size_t)q.n, sizeof *site->r);
    if (!site->r) {
        c->errors++;
        return;
    }
    /* the function itself, and its parts split off by the compiler
     * (NAME.cold, NAME.part.0, ...) from the same file */
    file = NULL;
    for (i = 0; i < q.n; i++)
        if (strcmp(q.hit[i].name, s->symbol) == 0)
            file = q.hit[i].file;
    for (i = 0; i < q.n; i++) {
        const Elf64_Sym *sym = q.hit[i].s;

        if (q.hit[i].file != file &&
            !(file && q.hit[i].file && strcmp(file, q.hit[i].file) == 0))
            continue;
        if (sym->st_size == 0)
            continue;
        site->r[site->nr].lo = o->addr + sym->st_value;
        site->r[site->nr].hi = o->addr + sym->st_value + sym->st_size;
        site->nr++;
    }
    if (site->nr == 0) {
        free(site->r);
        unresolved(c, s, "function '%s' has no recorded size", s->symbol);
        return;
    }
    snprintf(buf, sizeof buf, "pthread_%s_init called from %s%s%s%s in %s",
             pl_kind_name(s->kind), s->symbol, file ? " (" : "",
             file ? file : "", file ? ")" : "", o->display);
    site->where = strdup(buf);
    c->out->ns++;
}

int pl_resolve(const struct pl_config *cfg, struct pl_resolved *out)
{
    struct objs os = { 0 };
    struct ctx c = { cfg, &os, out, 0 };
    size_t i, j;

    memset(out, 0, sizeof *out);
    dl_iterate_phdr(collect, &os);
    if (os.oom || os.n == 0 || !os.o[0].is_main) {
        pl_msg("cannot list the loaded objects (dl_iterate_phdr)");
        objs_free(&os);
        return -1;
    }
    for (i = 0; i < cfg->nsec; i++) {
        if (cfg->sec[i].kind == PL_SEM)
            continue; /* found by name at sem_open */
        if (cfg->sec[i].how == PL_SYMBOL)
            resolve_symbol(&c, &cfg->sec[i]);
        else
            resolve_site(&c, &cfg->sec[i]);
    }
    /* two sections on one lock object */
    for (i = 0; i < out->nt; i++) {
        for (j = 0; j < i; j++) {
            if (out->t[i].addr == out->t[j].addr) {
                pl_msg("%s:%d: duplicate mapping: [%s] maps %s, already "
                       "mapped by [%s] at line %d",
                       cfg->path, out->t[i].sec->match_line,
                       out->t[i].sec->name, out->t[i].where,
                       out->t[j].sec->name, out->t[j].sec->match_line);
                c.errors++;
                break;
            }
        }
    }
    objs_free(&os);
    return c.errors ? -1 : 0;
}

void pl_resolved_free(struct pl_resolved *r)
{
    size_t i;

    for (i = 0; i < r->nt; i++)
        free(r->t[i].where);
    for (i = 0; i < r->ns; i++) {
        free(r->s[i].r);
        free(r->s[i].where);
    }
    free(r->t);
    free(r->s);
    memset(r, 0, sizeof *r);
}
