/* replica.c: what a link learns of its server's replicas: ROLE, or the
 * count an acquire script's counted form reads in the same round trip (a
 * master, and how many replicas it lists, shared by the process's links
 * to that server), and WAIT after a script that took a lock (replica
 * sync).  The link itself is link.c's (link_int.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "link_int.h"
#include "scripts.h"

#define ROLE_MAX_AGE_MS 1000 /* replica count older than this is read again */

/* ---- roles and replicas --------------------------------------------------- */

/* What the process last learnt of each server's replicas, shared by all
 * its links: a thread whose own link read ROLE over a second ago takes
 * another link's fresher count rather than asking again.  Threads that
 * take a lock now and then (a herd on one lock: each wins every few
 * seconds) otherwise paid a ROLE round trip for nearly every hold they
 * took; now the process asks at most once a second per server, and the
 * count a new hold relies on is still never older than a second.  It
 * asks within the acquire script (its counted form, count_wanted), and
 * reads ROLE only when the server refused that INFO. */
#define ROLES_MAX 16
static struct {
    char where[264]; /* the link's "host:port", "unix:PATH" */
    int replicas;
    uint64_t ms; /* when ROLE said so; 0: a free slot */
} roles[ROLES_MAX];
static pthread_mutex_t roles_mu = PTHREAD_MUTEX_INITIALIZER;
DIST__FORK_HOOK(roles_hook, roles_fork, DIST__RANK_ROLES)

static void roles_fork(int phase)
{
    if (phase == 0)
        pthread_mutex_lock(&roles_mu);
    else
        pthread_mutex_unlock(&roles_mu);
}

/* l has just read ROLE: its count is the process's now. */
static void roles_note(const struct dist__link *l)
{
    int i, slot = 0;

    roles_hook();
    pthread_mutex_lock(&roles_mu);
    for (i = 0; i < ROLES_MAX; i++) {
        if (strcmp(roles[i].where, l->where) == 0) {
            slot = i;
            break;
        }
        if (roles[i].ms < roles[slot].ms)
            slot = i; /* the oldest, or a free one */
    }
    snprintf(roles[slot].where, sizeof roles[slot].where, "%s", l->where);
    roles[slot].replicas = l->replicas;
    roles[slot].ms = l->role_ms;
    pthread_mutex_unlock(&roles_mu);
}

/* l's count is older than a second: another link's to the same server,
 * read since and under a second ago, is taken instead.  1 when it was. */
static int roles_take(struct dist__link *l, uint64_t now)
{
    int i, took = 0;

    roles_hook();
    pthread_mutex_lock(&roles_mu);
    for (i = 0; i < ROLES_MAX; i++) {
        if (roles[i].ms > l->role_ms && now < roles[i].ms + ROLE_MAX_AGE_MS &&
            strcmp(roles[i].where, l->where) == 0) {
            /* the most this link saw stays its own: the sentinels are
             * asked when its server lists fewer than it once did */
            l->replicas = roles[i].replicas;
            l->role_ms = roles[i].ms;
            if (l->replicas > l->replicas_most)
                l->replicas_most = l->replicas;
            took = 1;
            break;
        }
    }
    pthread_mutex_unlock(&roles_mu);
    return took;
}

/* Set once a counted script found INFO refused (an ACL user without it):
 * the process sends the plain scripts from then on and reads ROLE after a
 * new hold, so that the server logs one refusal, not one a second. */
static atomic_int info_refused;

/* Whether l runs s's counted form (scripts.h), which reads the replica
 * count in the same round trip: replica sync is on, l's count is over a
 * second old and no other link read a fresher one, which the counted form
 * saves a ROLE for after a new hold.  The time it is asked (never 0), or
 * 0 for the plain form. */
uint64_t dist__link_count_wanted(struct dist__link *l,
                                 const struct dist__script *s)
{
    uint64_t now;

    if (!s->counted ||
        atomic_load_explicit(&info_refused, memory_order_relaxed))
        return 0;
    now = dist__now_ms();
    if (now < l->role_ms + ROLE_MAX_AGE_MS || !dist__replica_wait_ms() ||
        roles_take(l, now))
        return 0;
    return now ? now : 1;
}

/* A counted script's reply, {"replicas:N", the body's reply}: *out
 * becomes the body's reply, and N l's replica count as of `asked`, as
 * ROLE's would be (-2: not a master, as ROLE says it; -1: INFO refused,
 * ROLE is read instead).  Any other reply stays as it is, the count as it
 * was (stale: ROLE is read if a new hold needs it): an error reply (the
 * body failed, or the script never ran), or one of another shape, which
 * no server sends (a proxy that answers for it). */
void dist__link_counted_reply(struct dist__link *l, uint64_t asked,
                              redisReply **out)
{
    static const char tag[] = "replicas:";
    redisReply *r = *out;
    long long n;
    char *end;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        strncmp(r->element[0]->str, tag, sizeof tag - 1) != 0)
        return;
    n = strtoll(r->element[0]->str + sizeof tag - 1, &end, 10);
    if (*end || end == r->element[0]->str + sizeof tag - 1)
        return;
    *out = r->element[1];
    r->element[1] = NULL;
    freeReplyObject(r);
    if (n == -1) {
        atomic_store(&info_refused, 1);
        return;
    }
    l->role_ms = asked;
    l->replicas = n > 0 ? (int)(n < INT_MAX ? n : INT_MAX) : 0;
    if (l->replicas > l->replicas_most)
        l->replicas_most = l->replicas;
    if (n >= 0)
        roles_note(l);
}

int dist__role_of(const redisReply *r, int *replicas, const char **role)
{
    int master;

    *role = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                    r->element[0]->type == REDIS_REPLY_STRING
                ? r->element[0]->str
                : "something else";
    master = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             strcmp(*role, "master") == 0;
    *replicas =
        master && r->elements >= 3 && r->element[2]->type == REDIS_REPLY_ARRAY
            ? (int)r->element[2]->elements
            : 0;
    return master;
}

int dist__link_role(struct dist__link *l, uint64_t limit)
{
    const char *argv[1] = { "ROLE" }, *role;
    redisReply *r;
    int master;

    l->role_ms = dist__now_ms();
    l->replicas = -1;
    if (dist__link_cmd(l, limit, 1, argv, NULL, &r) != 0)
        return -1;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0) {
        /* said before anything else refuses, in plain words */
        freeReplyObject(r);
        return fail(l,
                    "Redis at %s wants a password (NOAUTH): give it in "
                    "the URL, redis://:PASSWORD@HOST:PORT (or "
                    "redis://USER:PASSWORD@... for an ACL user)",
                    l->where),
               -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        return 1;
    }
    master = dist__role_of(r, &l->replicas, &role);
    if (l->replicas > l->replicas_most)
        l->replicas_most = l->replicas;
    if (!master)
        snprintf(l->err, sizeof l->err, "not a master (ROLE says %s)", role);
    else
        roles_note(l);
    freeReplyObject(r);
    return master;
}

/* WAIT 1 ms; the deadline leaves WAIT its ms on top of the timeout. */
static int wait_one(struct dist__link *l, unsigned long ms, redisReply **out)
{
    const char *argv[3] = { "WAIT", "1", NULL };
    char arg[24];
    uint64_t until = dist__link_deadline(l, 0); /* no call's limit */

    snprintf(arg, sizeof arg, "%lu", ms);
    argv[2] = arg;
    if (ms >= l->timeout_ms)
        until += ms;
    if (dist__link_append(l, 3, argv, NULL) != 0)
        return DIST__ECONN;
    return dist__link_reply(l, until, out);
}

int dist__link_wait_replicas(struct dist__link *l, unsigned long ms,
                             const char *what, int *listed, int *most)
{
    redisReply *r;
    long long acked;
    uint64_t now;

    *listed = *most = -1;
    if (!ms || !l || l->broken)
        return 0;
    now = dist__now_ms();
    if (now >= l->role_ms + ROLE_MAX_AGE_MS && !roles_take(l, now) &&
        dist__link_role(l, 0) == -1)
        return dist__err(EIO, "ROLE: %s", dist__link_error(l)), DIST__ECONN;
    *listed = l->replicas;
    *most = l->replicas_most;
    if (l->replicas <= 0)
        return 0;
    if (wait_one(l, ms, &r) != 0) {
        dist__err(EIO,
                  "lock '%s': the connection failed while waiting for "
                  "a replica to acknowledge it: %s",
                  what, dist__link_error(l));
        return DIST__ECONN;
    }
    acked = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (acked >= 1)
        return 0;
    return dist__err(
        DIST_ENOREPLICA,
        "lock '%s': none of the %d replica%s of "
        "%s acknowledged it within %lu ms, so it was given back "
        "(a failover now would lose it; DISTLOCK_REPLICA_WAIT_MS=0 "
        "turns this check off)",
        what, l->replicas, l->replicas == 1 ? "" : "s", l->where, ms);
}
