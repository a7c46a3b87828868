/* kind_cond.c: the condition variable's side in Redis: its keys, named after
 * the condition, and the scripts that register, mark and check waiters. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds.h"

static const enum dist__nm key_name[DIST__COND_NKEYS] = {
    DIST__N_COND_WAITERS,
    DIST__N_COND_QUEUE,
    DIST__N_COND_SIGNALLED,
    DIST__N_COND_CHAN,
};

int dist__cond_new(const char *name, clockid_t clock, struct dist__cond **out)
{
    struct dist__cond *cv;
    size_t len;
    int i, rc;

    if ((rc = dist__check_name(name, &len)) != 0)
        return rc;
    if (!(cv = calloc(1, sizeof *cv)))
        goto oom;
    pthread_mutex_init(&cv->mu, NULL);
    cv->wts_gen = atomic_load(&dist__fork_gen);
    if (!(cv->names = dist__names_new(name, len)) ||
        dist__names_derive_all(cv->names, key_name, DIST__COND_NKEYS,
                               cv->keys) != 0)
        goto oom;
    cv->slot = dist__keyslot(cv->keys[0].p, cv->keys[0].len);
    /* a name with a '{' that opens no tag leaves them in several slots */
    for (i = 1; i < DIST__COND_NKEYS; i++)
        if (dist__keyslot(cv->keys[i].p, cv->keys[i].len) != cv->slot)
            cv->slot = -1;
    cv->magic = DIST__COND_MAGIC;
    cv->clock = clock;
    *out = cv;
    return 0;
oom:
    dist__cond_free(cv);
    return dist__err(ENOMEM, "out of memory");
}

void dist__cond_free(struct dist__cond *cv)
{
    if (!cv)
        return;
    cv->magic = 0;
    dist__bufs_free(cv->keys, DIST__COND_NKEYS);
    dist__names_unref(cv->names);
    pthread_mutex_destroy(&cv->mu);
    free(cv);
}

/* On a cluster every key of a script must share a slot. */
static int slot_ok(const struct dist__cond *cv, const struct dist__names *m)
{
    if (dist__cfg_mode() != DIST__MODE_CLUSTER)
        return 0;
    if (cv->slot < 0)
        return dist__err_lock(
            EINVAL, "condition", cv->names->name.p,
            ": its name has a '{' that opens no hash tag, so its keys would "
            "be spread over cluster slots");
    if (m && cv->slot != m->slot)
        return dist__err_lock(
            EINVAL, "condition", cv->names->name.p,
            " and mutex '%s' hash to different cluster slots: give the "
            "condition the mutex's name as a hash tag ('{%s}...')",
            m->name.p, m->name.p);
    return 0;
}

/* Runs a script whose reply is one integer.  A call whose reply was lost
 * runs again once: every caller's script may safely run twice (see each).
 * 0 with *v, or EIO.  A condition's calls have no call limit (link.h):
 * each command has its command timeout. */
static int run_int(int script, const char *what, int nkeys,
                   const struct dist__buf *kv, int nkv, long long *v)
{
    redisReply *r = NULL;
    int rc = dist__route_run(0, script, nkeys, kv, nkv, &r);

    if (rc == DIST__ECONN)
        rc = dist__route_run(0, script, nkeys, kv, nkv, &r);
    if (rc == ENOMEM)
        return ENOMEM;
    if (rc != 0)
        return EIO;
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to %s", what);
    }
    *v = r->integer;
    freeReplyObject(r);
    return 0;
}

#define COND_ARGS_MAX 2

/* Runs one of the condition's scripts: its keys are the mutex's name (m,
 * when the script takes it) and the condition's keys; its arguments are
 * args and, last, the command that publishes a wake-up.  0 with *v, the
 * reply, or the error. */
static int cond_run(const struct dist__cond *cv, const struct dist__names *m,
                    int script, const char *what,
                    const struct dist__buf *args, int nargs, long long *v)
{
    struct dist__buf kv[1 + DIST__COND_NKEYS + COND_ARGS_MAX + 1];
    int i, nkeys, n = 0, rc;

    if ((rc = slot_ok(cv, m)) != 0)
        return rc;
    if (m)
        kv[n++] = m->name;
    for (i = 0; i < DIST__COND_NKEYS; i++)
        kv[n++] = cv->keys[i];
    nkeys = n;
    for (i = 0; i < nargs; i++)
        kv[n++] = args[i];
    kv[n++] = dist__arg(dist__publish_cmd());
    return run_int(script, what, nkeys, kv, n, v);
}

/* Registering twice only moves the waiter to the back of the queue. */
int dist__cond_register(struct dist__cond *cv, const struct dist__names *m)
{
    char window[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf args[2] = { { owner, olen }, { window, 0 } };
    long long v = 0;
    int rc;

    args[1].len =
        (size_t)snprintf(window, sizeof window, "%lu", dist__waiter_ms());
    rc = cond_run(cv, m, DIST__S_COND_WAIT, "cond_wait", args, 2, &v);
    if (rc != 0)
        return rc;
    if (v < 0)
        return dist__err_lock(EPERM, "mutex", m->name.p,
                              " is not held by this thread (its lease ran "
                              "out or it was forced)");
    return 0;
}

/* Running twice: a mark taken the first time reads as "not registered"
 * the second (see the caller). */
int dist__cond_check(struct dist__cond *cv, int leave, int *res)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf args[2] = { { owner, olen },
                                 dist__arg(leave ? "1" : "0") };
    long long v = 0;
    int rc;

    rc = cond_run(cv, NULL, DIST__S_COND_CHECK, "cond_check", args, 2, &v);
    if (rc != 0)
        return rc;
    *res = (int)v;
    return 0;
}

/* A read: nothing to fear from running twice. */
int dist__cond_queued(struct dist__cond *cv, const char (*owners)[64], int n,
                      int *any)
{
    const char *argv[4] = { "LRANGE", cv->keys[1].p, "0", "-1" };
    const size_t lens[4] = { 6, cv->keys[1].len, 1, 2 };
    const struct dist__cmd cmd = { 4, argv, lens };
    redisReply *rep = NULL;
    size_t i;
    int j, rc;

    *any = 0;
    if ((rc = slot_ok(cv, NULL)) != 0)
        return rc;
    if ((rc = dist__route_cmds(0, &cv->keys[1], 1, &cmd, &rep, NULL)) != 0)
        return rc == ENOMEM ? ENOMEM : EIO;
    if (rep->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(rep);
        return dist__err_lock(
            EIO, "condition", cv->names->name.p,
            ": Redis answered LRANGE of its queue with no list");
    }
    for (i = 0; i < rep->elements && !*any; i++) {
        const redisReply *e = rep->element[i];

        if (e->type != REDIS_REPLY_STRING)
            continue;
        for (j = 0; j < n; j++)
            if (strlen(owners[j]) == e->len &&
                memcmp(owners[j], e->str, e->len) == 0)
                *any = 1;
    }
    freeReplyObject(rep);
    return 0;
}

/* Running twice marks more waiters than asked: spurious wake-ups, which
 * POSIX allows, rather than a signal lost. */
int dist__cond_signal(struct dist__cond *cv, int all, long long *marked)
{
    struct dist__buf arg = dist__arg(all ? "all" : "1");
    long long v = 0;
    int rc;

    rc = cond_run(cv, NULL, DIST__S_COND_SIGNAL, "cond_signal", &arg, 1, &v);
    if (rc == EIO)
        return dist__err_lock(EIO, "condition", cv->names->name.p, ": %s: %s",
                              all ? "broadcast" : "signal",
                              dist_last_error());
    if (marked)
        *marked = v;
    return rc;
}
