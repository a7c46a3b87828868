/* cmd_unlock.c: distlock unlock --force NAME: remove a lock whatever its
 * holders, after a look at it and (on a terminal) a confirmation; and
 * distlock unlock --reset NAME: delete a robust mutex's record, which
 * makes a not recoverable lock usable again. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tool.h"

static int confirm(const struct snap *s)
{
    struct sb b = { 0 };
    char line[64];
    size_t i;

    sb_adds(&b, "distlock: force ");
    sb_adds(&b, kind_name[s->kind] ? kind_name[s->kind] : "lock");
    sb_adds(&b, " '");
    sb_human(&b, B(s->names->name), L(s->names->name));
    sb_adds(&b, "' free");
    if (s->nh) {
        sb_adds(&b, ", held by ");
        holders_text(&b, s);
    }
    sb_adds(&b, "? [y/N] ");
    fputs(b.p, stderr);
    fflush(stderr);
    sb_free(&b);
    if (!fgets(line, sizeof line, stdin))
        return 0;
    for (i = 0; line[i] && isspace((unsigned char)line[i]); i++)
        ;
    return strncasecmp(line + i, "y", 1) == 0 &&
           (line[i + 1] == 0 || isspace((unsigned char)line[i + 1]) ||
            strncasecmp(line + i, "yes", 3) == 0);
}

struct unlock_opts {
    int force, yes, reset;
};

static int unlock_opt(int argc, char **argv, int *i, void *arg)
{
    struct unlock_opts *o = arg;

    (void)argc;
    if (strcmp(argv[*i], "--force") == 0)
        o->force = 1;
    else if (strcmp(argv[*i], "--reset") == 0)
        o->reset = 1;
    else if (strcmp(argv[*i], "--yes") == 0 || strcmp(argv[*i], "-y") == 0)
        o->yes = 1;
    else
        return 0;
    return 1;
}

static void say_not_locked(const char *name)
{
    struct sb b = { 0 };

    if (opt.json) {
        sb_json_name(&b, name);
        sb_adds(&b, ",\"existed\":false,\"forced\":false}");
    } else {
        sb_quoted(&b, name);
        sb_adds(&b, " is not locked; nothing to do");
    }
    sb_flush_line(&b);
    sb_free(&b);
}

/* force_unlock's KEYS: N, the channels, the fair queue, the readers ZSET,
 * the plain mutex's waiters, then the read-hold keys; the publish command
 * after them.  *nkeys set; *set (kv[1..6]'s bytes) and kv[7] on are the
 * caller's to free. */
static struct dist__buf *force_args(const struct snap *s, size_t *nkeys,
                                    struct dist__buf **set)
{
    static const enum dist__nm derived[] = {
        DIST__N_CHAN,    DIST__N_RWCHAN,     DIST__N_QUEUE,
        DIST__N_TIMEOUT, DIST__N_RW_READERS, DIST__N_MUTEX_WAITERS,
    };
    const char *pub = dist__publish_cmd();
    struct dist__buf *kv;
    size_t j, k = 7, n = 7;
    long long r;

    for (j = 0; j < s->nh; j++)
        n += (size_t)(s->h[j].reads < READ_KEYS_MAX ? s->h[j].reads
                                                    : READ_KEYS_MAX);
    kv = xrealloc(NULL, (n + 1) * sizeof *kv);
    kv[0] = s->names->name;
    if (!(*set = dist__names_set(s->names, derived, 6)))
        die(EX_REDIS, "out of memory");
    memcpy(kv + 1, *set, 6 * sizeof *kv);
    for (j = 0; j < s->nh; j++)
        for (r = 1; r <= s->h[j].reads && r <= READ_KEYS_MAX; r++, k++)
            kv[k].p = read_key(s->names, &s->h[j], r, &kv[k].len);
    kv[k].p = pub;
    kv[k].len = strlen(pub);
    *nkeys = n;
    return kv;
}

/* Runs force_unlock on the lock's master: its result (1 forced, 0 gone
 * meanwhile, -1 not a lock); exit 3 when it cannot. */
static long long force(const char *name, const struct snap *s)
{
    struct dist__link *on;
    struct dist__buf *kv, *set;
    redisReply *r;
    size_t nkeys, k;
    long long result;
    int rc;

    kv = force_args(s, &nkeys, &set);
    rc = dist__route_eval(rlimit, DIST__S_FORCE_UNLOCK, (int)nkeys, kv,
                          (int)nkeys + 1, &r, &on);
    for (k = 7; k < nkeys; k++)
        free((char *)kv[k].p);
    free(set);
    free(kv);
    if (rc != 0)
        die(EX_REDIS, "cannot force '%s': %s%s", name, redis_why(),
            rc == DIST__ECONN ? " (it may or may not have run)" : "");
    result = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
    freeReplyObject(r);
    return result;
}

static void say_json(const char *name, const struct snap *s, long long result)
{
    struct sb o = { 0 };
    size_t j;

    sb_json_name(&o, name);
    sb_printf(&o, ",\"existed\":%s,\"forced\":%s,\"kind\":",
              result == 1 ? "true" : "false", result == 1 ? "true" : "false");
    sb_jsonz(&o, kind_name[s->kind]);
    sb_adds(&o, ",\"was_held_by\":[");
    for (j = 0; j < s->nh; j++) {
        sb_adds(&o, j ? "," : "");
        sb_json(&o, s->h[j].owner, s->h[j].olen);
    }
    sb_adds(&o, "]}");
    sb_flush_line(&o);
    sb_free(&o);
}

static void say_forced(const char *name, const struct snap *s,
                       long long result)
{
    struct sb b = { 0 };

    sb_quoted(&b, name);
    if (result == 1) {
        sb_adds(&b, " forced free");
        if (s->nh) {
            sb_adds(&b, " (was held by ");
            holders_text(&b, s);
            sb_adds(&b, ")");
        }
        if (s->nq)
            sb_printf(&b, "; the head of its queue (%zu waiting) was told",
                      s->nq);
    } else {
        sb_adds(&b, " was released meanwhile; nothing to do");
    }
    sb_flush_line(&b);
    sb_free(&b);
}

/* Deletes the robust record of the lock s shows, and says what it was. */
static void reset(const char *name, const struct snap *s)
{
    struct dist__buf *key = robust_key(s->names);
    const char *a[2] = { "DEL", B(key[0]) };
    size_t l[2] = { 3, L(key[0]) };
    struct dist__cmd cmd = { 2, a, l };
    struct sb b = { 0 };
    redisReply *r;
    long long n;
    int rc = dist__route_cmds(rlimit, &s->names->name, 1, &cmd, &r, NULL);

    free(key);
    if (rc != 0)
        die(EX_REDIS, "cannot reset '%s': %s", name, redis_why());
    n = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    if (opt.json) {
        sb_json_name(&b, name);
        sb_printf(&b, ",\"reset\":%s", n > 0 ? "true" : "false");
        robust_json(&b, s);
        sb_adds(&b, "}");
    } else if (n > 0) {
        sb_quoted(&b, name);
        sb_adds(&b, s->r_nr ? " was not recoverable; reset: the next lock "
                              "gets 0"
                            : " had a robust record; deleted: the next lock "
                              "gets 0");
    } else {
        sb_quoted(&b, name);
        sb_adds(&b, " has no robust record; nothing to do");
    }
    sb_flush_line(&b);
    sb_free(&b);
}

int cmd_unlock(int argc, char **argv)
{
    struct unlock_opts o = { 0, 0, 0 };
    const char *name = name_args(argc, argv, unlock_opt, &o);
    long long result;
    struct snap s;

    if (!o.force && !o.reset)
        usage_error("unlock needs --force or --reset: distlock releases the "
                    "locks it holds itself; --force removes a lock whatever "
                    "its holder, --reset a robust mutex's owner-dead or not "
                    "recoverable state");
    redis_setup();
    snap_take(name, strlen(name), &s);
    if (!o.force) {
        /* --reset alone: the lock and its holder are left alone */
        reset(name, &s);
        snap_free(&s);
        return 0;
    }
    if (s.kind == KIND_UNKNOWN)
        die(EX_USAGE, "'%s' is not a lock (a Redis %s); left alone", name,
            s.type);
    if (strcmp(s.type, "none") == 0) {
        if (o.reset)
            reset(name, &s);
        else
            say_not_locked(name);
        snap_free(&s);
        return 0;
    }
    if (!o.yes && !isatty(STDIN_FILENO))
        die(EX_USAGE,
            "refusing to force '%s' without --yes (no terminal "
            "to ask on)",
            name);
    if (!o.yes && !confirm(&s)) {
        say("'%s' left alone", name);
        snap_free(&s);
        return EX_BUSY;
    }
    result = force(name, &s);
    if (result == -1)
        die(EX_USAGE, "'%s' is not a lock; left alone", name);
    if (opt.json && !o.reset)
        say_json(name, &s, result);
    else if (!opt.json)
        say_forced(name, &s, result);
    if (o.reset)
        reset(name, &s);
    snap_free(&s);
    return 0;
}
