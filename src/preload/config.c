/* config.c: the preload configuration, an INI file read with inih.
 *
 * inih splits lines into sections, keys and values and strips comments, but
 * its handler is not told the line number (Debian builds it without
 * INI_HANDLER_LINENO) nor about section headers (nor about sections without
 * keys).  So the file is fed to ini_parse_stream through our own line
 * reader, which counts lines and classifies each one the way inih will read
 * it: every message can then name FILE:LINE, and headers, empty sections
 * and inih's silent quirks (a line longer than its buffer, an indented line
 * taken as the continuation of the previous value) are caught here. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "preload.h"

enum sect { S_NONE, S_REDIS, S_PRELOAD, S_MAP, S_SKIP };

/* A key given in the current section, to refuse a second one. */
struct seen {
    char *name;
    int line;
};

struct header {
    char *text;     /* normalised: "redis", "mutex NAME", ... */
    char *lockname; /* for mapping sections */
    int line;
};

struct parse {
    FILE *f;
    struct pl_config *cfg;
    int line; /* the line inih is parsing */
    int errors;
    int bad_line; /* a line already reported by the reader */
    int prev_key; /* a key line since the last header */
    char prev_name[64];
    enum sect cur;
    struct pl_section *sec; /* current mapping section */
    struct header *hdr;
    size_t nhdr;
    int redis_line, preload_line;
    struct seen *seen; /* every key of the current section */
    size_t nseen, seen_cap;
    int url_line;
    size_t bytes; /* read so far, at most PL_CONFIG_MAX + 1 */
};

/* The most of a configuration file read: one that is no text (/dev/zero,
 * a device) or a runaway one is refused once it passes this, rather than
 * read for ever inside someone else's program. */
#define PL_CONFIG_MAX (1024 * 1024)

static void perr(struct parse *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void perr(struct parse *p, int line, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (line > 0)
        pl_msg("%s:%d: %s", p->cfg->path, line, buf);
    else
        pl_msg("%s: %s", p->cfg->path, buf);
    p->errors++;
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);

    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static const char *skipws(const char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    return s;
}

/* Length of s without trailing white space. */
static size_t trimlen(const char *s, size_t n)
{
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return n;
}

/* Where inih ends a header or key: the first of chars, or an inline comment
 * (';' after white space). */
static const char *find_end(const char *s, const char *chars)
{
    int was_space = 0;

    while (*s && !strchr(chars, *s) && !(was_space && *s == ';')) {
        was_space = isspace((unsigned char)*s);
        s++;
    }
    return s;
}

/* ---- sections -------------------------------------------------------------- */

/* A new section starts with no keys given. */
static void forget_keys(struct parse *p)
{
    while (p->nseen > 0)
        free(p->seen[--p->nseen].name);
}

static void section_defaults(struct pl_section *s)
{
    memset(s, 0, sizeof *s);
    s->index = -1;
    s->lease_ms = -1;
    s->on_unresolved = PL_UNRES_DEFAULT;
}

/* The name of "KIND NAME" (text trimmed, wlen the length of KIND, *mk set
 * by the caller).  S_MAP with *norm and *lock allocated (*norm NULL when
 * out of memory), or S_SKIP after reporting. */
static enum sect map_header(struct parse *p, const char *text, size_t n,
                            size_t wlen, char **norm, char **lock)
{
    const char *nm = text + wlen;
    size_t nl;

    while (nm < text + n && isspace((unsigned char)*nm))
        nm++;
    nl = (size_t)(text + n - nm);
    if (nl == 0) {
        perr(p, p->line,
             "[%.*s] needs the distributed lock's name: "
             "[%.*s NAME]",
             (int)n, text, (int)wlen, text);
        return S_SKIP;
    }
    if (nl > DIST_NAME_MAX) {
        perr(p, p->line, "lock name longer than %d bytes", DIST_NAME_MAX);
        return S_SKIP;
    }
    *lock = dupn(nm, nl);
    *norm = *lock ? malloc(wlen + 1 + nl + 1) : NULL;
    if (*norm)
        sprintf(*norm, "%.*s %s", (int)wlen, text, *lock);
    return S_MAP;
}

/* What a header's text (trimmed) opens: its kind and normalised text, and
 * for a mapping section the lock's kind and name.  *norm is NULL when out
 * of memory; S_SKIP after reporting a header that is not understood. */
static enum sect read_header(struct parse *p, const char *text, size_t n,
                             char **norm, char **lock, enum pl_kind *mk)
{
    const char *sp;
    size_t wlen;

    for (sp = text; sp < text + n && !isspace((unsigned char)*sp); sp++)
        ;
    wlen = (size_t)(sp - text);
    if (wlen == n && n == 5 && memcmp(text, "redis", 5) == 0) {
        *norm = dupn(text, n);
        return S_REDIS;
    }
    if (wlen == n && n == 7 && memcmp(text, "preload", 7) == 0) {
        *norm = dupn(text, n);
        return S_PRELOAD;
    }
    for (*mk = PL_MUTEX; *mk <= PL_SEM; (*mk)++) {
        const char *k = pl_kind_name(*mk);

        if (wlen == strlen(k) && memcmp(text, k, wlen) == 0)
            return map_header(p, text, n, wlen, norm, lock);
    }
    perr(p, p->line,
         "unknown section [%.*s]: expected [redis], "
         "[preload], [mutex NAME], [rwlock NAME], [cond NAME], "
         "[barrier NAME] or [semaphore NAME]",
         (int)n, text);
    return S_SKIP;
}

/* Reports a header (or a lock name) given before.  1 when it was. */
static int duplicate_header(struct parse *p, const char *norm,
                            const char *lock)
{
    size_t i;

    for (i = 0; i < p->nhdr; i++) {
        if (strcmp(p->hdr[i].text, norm) == 0 ||
            (lock && p->hdr[i].lockname &&
             strcmp(p->hdr[i].lockname, lock) == 0)) {
            perr(p, p->line,
                 "duplicate section [%s]: lock name or section "
                 "already given at line %d",
                 norm, p->hdr[i].line);
            return 1;
        }
    }
    return 0;
}

/* Keeps a header, taking norm, for the duplicate check.  0, or -1 when out
 * of memory (norm not taken). */
static int record_header(struct parse *p, char *norm, const char *lock)
{
    struct header *h = realloc(p->hdr, (p->nhdr + 1) * sizeof *h);

    if (!h)
        return -1;
    p->hdr = h;
    h[p->nhdr].text = norm;
    h[p->nhdr].lockname = lock ? strdup(lock) : NULL;
    h[p->nhdr].line = p->line;
    p->nhdr++;
    return 0;
}

/* Opens the pl_section of a [KIND NAME], taking lock. */
static void add_map_section(struct parse *p, enum pl_kind mk, char *lock)
{
    struct pl_config *cfg = p->cfg;
    struct pl_section *s = realloc(cfg->sec, (cfg->nsec + 1) * sizeof *s);

    if (!s) {
        free(lock);
        perr(p, p->line, "out of memory");
        p->cur = S_SKIP;
        return;
    }
    cfg->sec = s;
    p->sec = &s[cfg->nsec++];
    section_defaults(p->sec);
    p->sec->kind = mk;
    p->sec->name = lock;
    p->sec->line = p->line;
}

static void new_section(struct parse *p, const char *text, size_t n)
{
    char *norm = NULL, *lock = NULL;
    enum pl_kind mk = PL_MUTEX;
    enum sect kind;

    p->cur = S_SKIP;
    p->sec = NULL;
    forget_keys(p);
    while (n > 0 && isspace((unsigned char)*text))
        text++, n--;
    n = trimlen(text, n);
    kind = read_header(p, text, n, &norm, &lock, &mk);
    if (kind == S_SKIP)
        return;
    if (!norm) {
        free(lock);
        perr(p, p->line, "out of memory");
        return;
    }
    if (duplicate_header(p, norm, lock)) {
        free(norm);
        free(lock);
        return;
    }
    if (record_header(p, norm, lock) != 0) {
        free(norm);
        free(lock);
        perr(p, p->line, "out of memory");
        return;
    }
    p->cur = kind;
    if (kind == S_MAP)
        add_map_section(p, mk, lock);
}

/* ---- the line reader ------------------------------------------------------- */

/* Classifies one line as inih will (see ini_parse_stream in inih r55). */
static void classify(struct parse *p, char *line)
{
    const char *s = line, *t, *end;

    if (p->line == 1 && (unsigned char)s[0] == 0xEF &&
        (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
        s += 3;
    t = skipws(s);
    if (*t == '\0' || *t == ';' || *t == '#')
        return;
    if (p->prev_key && t > s) {
        perr(p, p->line,
             "indented line: inih reads it as more of the value "
             "of '%s' above; remove the indentation",
             p->prev_name);
        p->bad_line = p->line;
        return;
    }
    if (*t == '[') {
        end = find_end(t + 1, "]");
        if (*end != ']') {
            perr(p, p->line, "section header without ']'");
            p->bad_line = p->line;
            p->cur = S_SKIP;
            p->sec = NULL;
            p->prev_key = 0;
            return;
        }
        t++;
        new_section(p, t, (size_t)(end - t));
        end = skipws(end + 1);
        /* not quoted: it may be a key written on the header's line, such
         * as a url = holding a password */
        if (*end && *end != ';' && *end != '#')
            perr(p, p->line,
                 "text after the section header's ']': a key "
                 "goes on a line of its own");
        p->prev_key = 0;
        return;
    }
    end = find_end(t, "=:");
    if (*end != '=' && *end != ':') {
        perr(p, p->line, "expected KEY = VALUE");
        p->bad_line = p->line;
        return;
    }
    snprintf(p->prev_name, sizeof p->prev_name, "%.*s",
             (int)trimlen(t, (size_t)(end - t)), t);
    p->prev_key = 1;
}

/* One line into str, as fgets would, but read a byte at a time: a NUL in a
 * line made fgets's line look short, so the rest of it was taken for an
 * over-long line and skipped with the line after it, and every later line
 * number was off by one.  Now a line with a NUL, or longer than inih's
 * buffer, is reported and handed to inih as an empty line. */
static char *reader(char *str, int num, void *stream)
{
    struct parse *p = stream;
    size_t n = 0, max = num > 1 ? (size_t)num - 1 : 0;
    int c = EOF, nul = 0, longer = 0;

    if (p->bytes > PL_CONFIG_MAX)
        return NULL;
    while ((c = getc(p->f)) != EOF) {
        if (++p->bytes > PL_CONFIG_MAX) {
            perr(p, p->line + 1,
                 "the configuration is longer than %d "
                 "bytes: not read further",
                 PL_CONFIG_MAX);
            return NULL;
        }
        if (c == '\0')
            nul = 1;
        if (n < max)
            str[n++] = (char)c;
        else
            longer = 1;
        if (c == '\n')
            break;
    }
    if (n == 0 && c == EOF)
        return NULL;
    str[n] = '\0';
    p->line++;
    if (nul || longer) {
        if (nul)
            perr(p, p->line, "a NUL byte in the line");
        else
            perr(p, p->line, "line longer than %d bytes (inih's limit)",
                 num - 2);
        p->bad_line = p->line;
        strcpy(str, "\n");
        return str;
    }
    classify(p, str);
    return str;
}

/* ---- keys ---------------------------------------------------------------- */

/* Every key is remembered, however many a section has: a key missed here
 * is applied twice, and a second 'match' would add qualifiers past
 * pl_section.qual. */
static int seen_before(struct parse *p, const char *name)
{
    size_t i;

    for (i = 0; i < p->nseen; i++) {
        if (strcmp(p->seen[i].name, name) == 0) {
            perr(p, p->line,
                 "'%s' given twice in this section (first at "
                 "line %d)",
                 name, p->seen[i].line);
            return 1;
        }
    }
    if (p->nseen == p->seen_cap) {
        size_t cap = p->seen_cap ? 2 * p->seen_cap : 8;
        struct seen *n = realloc(p->seen, cap * sizeof *n);

        if (!n) {
            perr(p, p->line, "out of memory");
            return 1;
        }
        p->seen = n;
        p->seen_cap = cap;
    }
    p->seen[p->nseen].name = strdup(name);
    if (!p->seen[p->nseen].name) {
        perr(p, p->line, "out of memory");
        return 1;
    }
    p->seen[p->nseen++].line = p->line;
    return 0;
}

/* The words a key that names a choice takes, by the value each stands
 * for (0, 1, ...; NULL after the last). */
static const char *const unres_words[] = {
    [PL_UNRES_ERROR] = "error", [PL_UNRES_WARN] = "warn", NULL
};
static const char *const unavail_words[] = {
    [PL_BLOCK] = "block", [PL_FAIL] = "fail", [PL_ABORT] = "abort", NULL
};
static const char *const lost_words[] = {
    [PL_LOST_ABORT] = "abort", [PL_LOST_LOG] = "log", NULL
};
static const char *const semmode_words[] = {
    [PL_SEM_LEASED] = "leased", [PL_SEM_REDISSON] = "redisson", NULL
};
/* a [rwlock]'s kind: rw_prefer_writer */
static const char *const rwkind_words[] = { "prefer-reader", "prefer-writer",
                                            NULL };

/* One of words for key k ("k: a, b or c, not 'v'" otherwise).  0 with
 * *x, the word's value, or -1 said. */
static int word_value(struct parse *p, const char *k, const char *v,
                      const char *const *words, int *x)
{
    char list[128] = "";
    size_t len = 0;
    int i;

    for (i = 0; words[i]; i++) {
        if (strcmp(v, words[i]) == 0) {
            *x = i;
            return 0;
        }
    }
    for (i = 0; words[i] && len < sizeof list; i++) {
        const char *sep = i == 0 ? "" : words[i + 1] ? ", " : " or ";

        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", sep,
                                words[i]);
    }
    perr(p, p->line, "%s: %s, not '%s'", k, list, v);
    return -1;
}

/* A yes or no for key k.  0 with *b, or -1 said. */
static int bool_value(struct parse *p, const char *k, const char *v, int *b)
{
    if (pl_parse_bool(v, b) == 0)
        return 0;
    perr(p, p->line, "%s: yes or no, not '%s'", k, v);
    return -1;
}

/* A number from least to most, what it is said by what ("count: a number
 * of elements").  0 with *x, or -1 said. */
static int num_value(struct parse *p, const char *v, unsigned long least,
                     unsigned long most, const char *what, unsigned long *x)
{
    if (pl_parse_ulong(v, most, x) == 0 && *x >= least)
        return 0;
    perr(p, p->line, "%s, not '%s'", what, v);
    return -1;
}

/* k is none of the keys known to its section, [what] or [what name]. */
static void unknown_key(struct parse *p, const char *k, const char *what,
                        const char *name, const char *known)
{
    perr(p, p->line, "unknown key '%s' in [%s%s%s] (known: %s)", k, what,
         name ? " " : "", name ? name : "", known);
}

#define DAY_MS (24UL * 3600 * 1000)
#define MANY   (1UL << 20) /* bound of a stride, a count, the parties */
#define LEASE_WHAT                                                           \
    "lease_ms: a number of milliseconds up to a day, or 0 for the watchdog"

static void redis_key(struct parse *p, const char *k, const char *v)
{
    struct pl_config *cfg = p->cfg;
    unsigned long x;
    int w;

    if (strcmp(k, "url") == 0) {
        free(cfg->url);
        cfg->url = strdup(v);
        p->url_line = p->line;
    } else if (strcmp(k, "lease_ms") == 0) {
        if (num_value(p, v, 0, DAY_MS, LEASE_WHAT, &x) == 0)
            cfg->lease_ms = x;
    } else if (strcmp(k, "watchdog_ms") == 0) {
        if (num_value(p, v, 300, DAY_MS, "watchdog_ms: 300 or more", &x) == 0)
            cfg->watchdog_ms = x;
    } else if (strcmp(k, "timeout_ms") == 0) {
        if (num_value(p, v, 1, 3600UL * 1000,
                      "timeout_ms: a number of milliseconds", &x) == 0)
            cfg->timeout_ms = x;
    } else if (strcmp(k, "on_unavailable") == 0) {
        if (word_value(p, k, v, unavail_words, &w) == 0)
            cfg->on_unavailable = (enum pl_unavail)w;
    } else if (strcmp(k, "on_lease_lost") == 0) {
        if (word_value(p, k, v, lost_words, &w) == 0)
            cfg->on_lease_lost = (enum pl_lost)w;
    } else {
        unknown_key(p, k, "redis", NULL,
                    "url, lease_ms, watchdog_ms, timeout_ms, "
                    "on_unavailable, on_lease_lost");
    }
}

static void preload_key(struct parse *p, const char *k, const char *v)
{
    int b, w;

    if (strcmp(k, "on_unresolved") == 0) {
        if (word_value(p, k, v, unres_words, &w) == 0)
            p->cfg->on_unresolved = w;
    } else if (strcmp(k, "program") == 0) {
        free(p->cfg->program);
        p->cfg->program = strdup(v);
    } else if (strcmp(k, "verbose") == 0) {
        if (bool_value(p, k, v, &b) == 0)
            p->cfg->verbose = b;
    } else {
        unknown_key(p, k, "preload", NULL, "on_unresolved, verbose, program");
    }
}

/* The keys only a [semaphore NAME] has.  1 when k was one of them. */
static int sem_key(struct parse *p, const char *k, const char *v)
{
    struct pl_section *s = p->sec;
    unsigned long x;
    int b, w;

    if (strcmp(k, "match") == 0) {
        s->match_line = p->line;
        if (strncmp(v, "sem_open", 8) != 0 || !isspace((unsigned char)v[8]) ||
            *skipws(v + 8) != '/' || strchr(skipws(v + 8) + 1, '/') ||
            strlen(skipws(v + 8)) > 255)
            perr(p, p->line,
                 "match: 'sem_open /NAME' (one slash, at the "
                 "start, as sem_open wants it), not '%s'",
                 v);
        else if (!(s->sem_name = strdup(skipws(v + 8))))
            perr(p, p->line, "out of memory");
        s->how = PL_SYMBOL;
    } else if (strcmp(k, "mode") == 0) {
        if (word_value(p, k, v, semmode_words, &w) == 0)
            s->sem_mode = w;
    } else if (strcmp(k, "unowned_post") == 0) {
        if (bool_value(p, k, v, &b) == 0)
            s->sem_unowned = b;
    } else if (strcmp(k, "max") == 0) {
        if (pl_parse_ulong(v, DIST_SEM_VALUE_MAX, &x) != 0 || x == 0)
            perr(p, p->line,
                 "max: a number of permits from 1 to %ld, not "
                 "'%s'",
                 DIST_SEM_VALUE_MAX, v);
        else
            s->sem_max = x;
    } else {
        return 0;
    }
    return 1;
}

/* The keys of one kind of section only.  1 when k was one of them. */
static int kind_key(struct parse *p, const char *k, const char *v)
{
    struct pl_section *s = p->sec;
    unsigned long x;
    int b, w;

    if (s->kind == PL_SEM)
        return sem_key(p, k, v);
    if (strcmp(k, "fair") == 0 && s->kind == PL_MUTEX) {
        if (bool_value(p, k, v, &b) == 0)
            s->fair = b;
    } else if (strcmp(k, "kind") == 0 && s->kind == PL_RWLOCK) {
        if (word_value(p, k, v, rwkind_words, &w) == 0)
            s->rw_prefer_writer = w;
    } else if (strcmp(k, "mutex") == 0 && s->kind == PL_COND) {
        free(s->pair);
        if (!(s->pair = strdup(v)))
            perr(p, p->line, "out of memory");
        s->pair_line = p->line;
    } else if (strcmp(k, "parties") == 0 && s->kind == PL_BARRIER) {
        if (num_value(p, v, 1, MANY, "parties: a number of waits", &x) == 0)
            s->parties = x;
    } else {
        return 0;
    }
    return 1;
}

static const char *const known_keys[] = {
    [PL_MUTEX] = "match, fair, lease_ms, stride, count, on_unresolved",
    [PL_RWLOCK] = "match, kind, lease_ms, stride, count, on_unresolved",
    [PL_COND] = "match, mutex, stride, count, on_unresolved",
    [PL_BARRIER] = "match, parties, stride, count, on_unresolved",
    [PL_SEM] = "match, mode, lease_ms, unowned_post, max",
};

static void map_key(struct parse *p, const char *k, const char *v)
{
    struct pl_section *s = p->sec;
    int sem = s->kind == PL_SEM;
    unsigned long x;
    int w;

    if (kind_key(p, k, v))
        return;
    if (strcmp(k, "match") == 0) {
        char why[512];

        s->match_line = p->line;
        if (pl_parse_match(s, v, why, sizeof why) != 0)
            perr(p, p->line, "%s", why);
    } else if (strcmp(k, "lease_ms") == 0 && (s->kind <= PL_RWLOCK || sem)) {
        if (num_value(p, v, 0, DAY_MS, LEASE_WHAT, &x) == 0)
            s->lease_ms = (long)x;
    } else if (strcmp(k, "stride") == 0 && !sem) {
        if (num_value(p, v, 1, MANY, "stride: a number of bytes", &x) == 0)
            s->stride = x;
    } else if (strcmp(k, "count") == 0 && !sem) {
        if (num_value(p, v, 1, MANY, "count: a number of elements", &x) == 0)
            s->count = x;
    } else if (strcmp(k, "on_unresolved") == 0 && !sem) {
        if (word_value(p, k, v, unres_words, &w) == 0)
            s->on_unresolved = w;
    } else {
        unknown_key(p, k, pl_kind_name(s->kind), s->name,
                    known_keys[s->kind]);
    }
}

static int handler(void *user, const char *section, const char *name,
                   const char *value)
{
    struct parse *p = user;

    (void)section; /* ours is untruncated: see new_section */
    if (p->line == p->bad_line)
        return 1;
    if (p->cur == S_NONE) {
        perr(p, p->line, "'%s' before any [section]", name);
        return 1;
    }
    if (p->cur == S_SKIP || seen_before(p, name))
        return 1;
    switch (p->cur) {
    case S_REDIS:
        redis_key(p, name, value);
        break;
    case S_PRELOAD:
        preload_key(p, name, value);
        break;
    case S_MAP:
        map_key(p, name, value);
        break;
    default:
        break;
    }
    return 1;
}

/* ---- after the last line --------------------------------------------------- */

static int same_string(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Whether two sections map the same thing as written.  Field by field: a
 * joined string would need a bound and a separator no field contains.  A
 * symbol is one object, whatever the kinds; an init_site function maps
 * what it initialises of one kind only, so a [mutex] and a [cond] (the
 * usual pair of a function that sets both up) may name the same one. */
static int same_match(const struct pl_section *a, const struct pl_section *b)
{
    return a->how == b->how && (a->how == PL_SYMBOL || a->kind == b->kind) &&
           same_string(a->nqual > 0 ? a->qual[0] : NULL,
                       b->nqual > 0 ? b->qual[0] : NULL) &&
           same_string(a->nqual > 1 ? a->qual[1] : NULL,
                       b->nqual > 1 ? b->qual[1] : NULL) &&
           same_string(a->symbol, b->symbol) && a->each == b->each &&
           a->index == b->index && a->offset == b->offset;
}

/* The section of kind named name, or NULL. */
static const struct pl_section *section_named(const struct pl_config *cfg,
                                              int kind, const char *name)
{
    size_t i;

    for (i = 0; i < cfg->nsec; i++)
        if ((int)cfg->sec[i].kind == kind &&
            strcmp(cfg->sec[i].name, name) == 0)
            return &cfg->sec[i];
    return NULL;
}

static int section_named_any(const struct pl_config *cfg, int kind)
{
    size_t i;

    for (i = 0; i < cfg->nsec; i++)
        if ((int)cfg->sec[i].kind == kind)
            return 1;
    return 0;
}

/* A [cond] whose waits can never be distributed, as far as the file
 * tells: a warning, once, since the program still runs as it did. */
static void check_pairing(struct parse *p, const struct pl_section *s)
{
    const struct pl_config *cfg = p->cfg;

    if (s->pair && !section_named(cfg, PL_MUTEX, s->pair))
        pl_msg("warning: %s:%d: [cond %s] mutex = %s: no [mutex %s] "
               "section: its waits stay local, and only its signals reach "
               "other processes",
               cfg->path, s->pair_line, s->name, s->pair, s->pair);
    else if (!s->pair && !section_named_any(cfg, PL_MUTEX))
        pl_msg("warning: %s:%d: [cond %s]: no [mutex] section: a wait "
               "with an unmapped mutex stays local, and only its signals "
               "reach other processes",
               cfg->path, s->line, s->name);
}

/* Two [semaphore] sections on one sem_open name. */
static void check_sem(struct parse *p, size_t i)
{
    const struct pl_config *cfg = p->cfg;
    const struct pl_section *s = &cfg->sec[i];
    size_t j;

    for (j = 0; j < i && s->sem_name; j++)
        if (cfg->sec[j].sem_name &&
            strcmp(cfg->sec[j].sem_name, s->sem_name) == 0)
            perr(p, s->match_line,
                 "duplicate mapping: '%s' is already "
                 "mapped by [semaphore %s] at line %d",
                 s->sem_name, cfg->sec[j].name, cfg->sec[j].match_line);
}

static void check_sections(struct parse *p)
{
    struct pl_config *cfg = p->cfg;
    size_t i, j;

    for (i = 0; i < cfg->nsec; i++) {
        struct pl_section *s = &cfg->sec[i];

        if (!s->match_line) {
            perr(p, s->line, "[%s %s] has no 'match = ...'",
                 pl_kind_name(s->kind), s->name);
            continue;
        }
        if (s->kind == PL_SEM) {
            check_sem(p, i);
            continue;
        }
        if (s->kind == PL_COND)
            check_pairing(p, s);
        if (!s->symbol)
            continue; /* reported */
        if ((s->stride || s->count) && !s->each)
            perr(p, s->match_line,
                 "stride and count apply to an array "
                 "match, NAME[*]");
        for (j = 0; j < i; j++) {
            if (!cfg->sec[j].symbol || cfg->sec[j].kind == PL_SEM)
                continue;
            if (same_match(s, &cfg->sec[j]))
                perr(p, s->match_line,
                     "duplicate mapping: '%s' is already "
                     "mapped by [%s %s] at line %d",
                     s->match, pl_kind_name(cfg->sec[j].kind),
                     cfg->sec[j].name, cfg->sec[j].match_line);
        }
    }
}

struct pl_config pl_cfg;

int pl_config_load(const char *path, struct pl_config *cfg)
{
    FILE *f = fopen(path, "re");
    int rc;

    if (!f) {
        memset(cfg, 0, sizeof *cfg);
        pl_msg("%s: cannot open the configuration: %s", path,
               strerror(errno));
        return -1;
    }
    rc = pl_config_read(f, path, cfg);
    fclose(f);
    return rc;
}

int pl_config_read(FILE *f, const char *path, struct pl_config *cfg)
{
    struct parse p;
    size_t i;
    int rc;

    memset(cfg, 0, sizeof *cfg);
    memset(&p, 0, sizeof p);
    cfg->path = strdup(path);
    cfg->on_unavailable = PL_BLOCK;
    cfg->on_lease_lost = PL_LOST_ABORT;
    cfg->on_unresolved = PL_UNRES_ERROR;
    p.cfg = cfg;
    if (!cfg->path)
        return -1;
    p.f = f;
    rc = ini_parse_stream(reader, &p, handler, &p);
    if (ferror(p.f))
        perr(&p, p.line, "read error");
    if (rc > 0 && p.errors == 0)
        perr(&p, rc, "cannot parse this line");
    else if (rc < 0 && p.errors == 0)
        perr(&p, 0, "inih failed (%d)", rc);
    check_sections(&p);
    if (cfg->nsec == 0 && p.errors == 0)
        perr(&p, 0,
             "maps nothing: add a [mutex NAME], [rwlock NAME], "
             "[cond NAME], [barrier NAME] or [semaphore NAME] section");
    for (i = 0; i < p.nhdr; i++) {
        free(p.hdr[i].text);
        free(p.hdr[i].lockname);
    }
    free(p.hdr);
    forget_keys(&p);
    free(p.seen);
    cfg->url_line = p.url_line;
    return p.errors ? -1 : 0;
}

void pl_config_free(struct pl_config *cfg)
{
    size_t i;
    int q;

    for (i = 0; i < cfg->nsec; i++) {
        struct pl_section *s = &cfg->sec[i];

        free(s->name);
        free(s->match);
        free(s->symbol);
        free(s->pair);
        free(s->sem_name);
        for (q = 0; q < s->nqual; q++)
            free(s->qual[q]);
    }
    free(cfg->sec);
    free(cfg->url);
    free(cfg->program);
    free(cfg->path);
    memset(cfg, 0, sizeof *cfg);
}
