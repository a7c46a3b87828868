/* barrier.c: the dist_barrier API and its scripts: members kept alive by
 * the renewal thread, arrivals counted per round in Redis, and waiters
 * woken by pub/sub when their round ends or a dead member breaks it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

#define BARRIER_MAGIC 0x62617272u /* "barr" */
#define NKEYS         3           /* barrier, members, channel */

static const enum dist__nm key_name[NKEYS] = {
    DIST__N_BARRIER,
    DIST__N_BARRIER_MEMBERS,
    DIST__N_BARRIER_CHAN,
};

struct dist__barrier {
    unsigned magic;
    unsigned count;
    struct dist__names *names;
    struct dist__buf keys[NKEYS];
    pthread_mutex_t mu;        /* guards member and waiting */
    struct dist__hold *member; /* renewal entry, from the first wait */
    unsigned long gen;         /* fork generation of member */
    int waiting;
};

static atomic_ulong serials;

/* ---- objects ---------------------------------------------------------------- */

static void barrier_free(struct dist__barrier *bo)
{
    bo->magic = 0;
    dist__bufs_free(bo->keys, NKEYS);
    dist__names_unref(bo->names);
    pthread_mutex_destroy(&bo->mu);
    free(bo);
}

int dist_barrier_init(dist_barrier_t *b, const char *name, unsigned count)
{
    DIST__KEEP_ERRNO;
    struct dist__barrier *bo;
    size_t len;
    int rc;

    if (!b)
        return dist__err(EINVAL, "barrier is NULL");
    if (count == 0)
        return dist__err(EINVAL, "barrier count is 0");
    if ((rc = dist__check_name(name, &len)) != 0)
        return rc;
    if (!(bo = calloc(1, sizeof *bo)))
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_init(&bo->mu, NULL);
    bo->count = count;
    if (!(bo->names = dist__names_new(name, len)) ||
        dist__names_derive_all(bo->names, key_name, NKEYS, bo->keys) != 0)
        goto oom;
    bo->magic = BARRIER_MAGIC;
    memset(b->__reserved, 0, sizeof b->__reserved);
    dist__stamp(b->__reserved);
    __atomic_store_n((struct dist__barrier **)&b->__impl, bo,
                     __ATOMIC_RELEASE);
    return 0;
oom:
    barrier_free(bo);
    return dist__err(ENOMEM, "out of memory");
}

static int get_barrier(dist_barrier_t *b, struct dist__barrier **out)
{
    int rc;

    if (!b)
        return dist__err(EINVAL, "barrier is NULL");
    *out = dist__impl_load(&b->__impl, b->__reserved, BARRIER_MAGIC,
                           "barrier", &rc);
    if (rc == 0 && !*out) /* a barrier is made by its init only */
        rc = dist__err(EINVAL, "barrier is not initialised (or destroyed)");
    return rc;
}

/* ---- scripts -------------------------------------------------------------------- */

/* A member entry made before a fork is the parent's: the child's renewal
 * thread does not know it, and the parent is still that member.  The
 * child lets go of its copy (as the engine does with a parent's holds). */
static void drop_parents_member(struct dist__barrier *bo)
{
    if (bo->member && bo->gen != atomic_load(&dist__fork_gen)) {
        dist__hold_free(bo->member);
        bo->member = NULL;
    }
}

/* The object's member name, "<client id>:b<n>": each object is a member of
 * its own, whichever thread waits on it; a forked child's copy is a new
 * member.  bo->mu held. */
static int join(struct dist__barrier *bo)
{
    struct dist__hold *h;

    drop_parents_member(bo);
    if (bo->member)
        return 0;
    if (!(h = dist__hold_new(NULL, bo->names, 0)))
        return dist__err(ENOMEM, "out of memory");
    h->owner_no = DIST__OWNER_BARRIER | (atomic_fetch_add(&serials, 1) + 1);
    h->keys = &bo->keys[1];
    h->nkeys = 1;
    h->renew_ms = dist__waiter_ms();
    h->period_ms = h->renew_ms / 3;
    dist__renew_add(h, 0);
    bo->member = h;
    bo->gen = atomic_load(&dist__fork_gen);
    return 0;
}

/* Runs a barrier script with the three keys and args; both integers of
 * its reply in v[].  No second run: an arrival counts once.  0 or EIO. */
static int run(struct dist__barrier *bo, int script, const char *what,
               struct dist__buf *kv, int nkv, long long v[2])
{
    redisReply *r;
    int rc;

    kv[0] = bo->keys[0];
    kv[1] = bo->keys[1];
    kv[2] = bo->keys[2];
    rc = dist__route_run(0, script, NKEYS, kv, nkv, &r);
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM
                            : dist__err(EIO, "barrier '%s': %s",
                                        bo->names->name.p, dist_last_error());
    if (r->type == REDIS_REPLY_INTEGER) {
        v[0] = r->integer;
        v[1] = 0;
    } else if (dist__reply_int(r, 0, &v[0]) != 0 ||
               dist__reply_int(r, 1, &v[1]) != 0) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to %s", what);
    }
    freeReplyObject(r);
    return 0;
}

/* 1 serial, 0 arrived in *round, or an error. */
static int arrive(struct dist__barrier *bo, long long *round)
{
    char count[24], window[24], owner[DIST__OWNER_MAX];
    struct dist__buf kv[7];
    long long v[2];
    int rc;

    snprintf(count, sizeof count, "%u", bo->count);
    snprintf(window, sizeof window, "%lu", dist__waiter_ms());
    kv[3] = (struct dist__buf){ owner, dist__hold_owner(bo->member, owner) };
    kv[4] = dist__arg(count);
    kv[5] = dist__arg(window);
    kv[6] = dist__arg(dist__publish_cmd());
    if ((rc = run(bo, DIST__S_BARRIER_ARRIVE, "barrier_arrive", kv, 7, v)) !=
        0)
        return rc;
    *round = v[1];
    if (v[0] == -2)
        return dist__err(EINVAL,
                         "barrier '%s' exists with a count of %lld, "
                         "not %u",
                         bo->names->name.p, v[1], bo->count);
    if (v[0] == -1)
        return dist__err(EOWNERDEAD,
                         "barrier '%s': a member died, round "
                         "%lld is broken",
                         bo->names->name.p, v[1]);
    return v[0] == 1;
}

/* op "look", "leave" or "quit": 1 round over, -1 broken, 0 not over. */
static int check(struct dist__barrier *bo, long long round, const char *op,
                 int *res)
{
    char rbuf[24], owner[DIST__OWNER_MAX];
    struct dist__buf kv[7];
    long long v[2];
    int rc;

    snprintf(rbuf, sizeof rbuf, "%lld", round);
    kv[3] = (struct dist__buf){ owner, dist__hold_owner(bo->member, owner) };
    kv[4] = dist__arg(rbuf);
    kv[5] = dist__arg(op);
    kv[6] = dist__arg(dist__publish_cmd());
    if ((rc = run(bo, DIST__S_BARRIER_CHECK, "barrier_check", kv, 7, v)) != 0)
        return rc;
    *res = (int)v[0];
    return 0;
}

/* ---- waiting ------------------------------------------------------------------------ */

static uint64_t next_look(uint64_t deadline)
{
    uint64_t until = dist__now_ms() + dist__waiter_ms();

    return deadline && deadline < until ? deadline : until;
}

/* Sleeps until round is over: 0, EOWNERDEAD, ETIMEDOUT (left), EIO. */
static int sleep_round(struct dist__barrier *bo, long long round,
                       const struct dist__deadline *dl, uint64_t deadline)
{
    struct dist__chan *ch = dist__sub_get(&bo->keys[2]);
    int rc, res = 0, last = 0;

    if (!ch)
        return dist__err(ENOMEM, "out of memory");
    dist__sub_wait_ready(ch, next_look(deadline));
    for (;;) {
        unsigned long gen = dist__sub_gen(ch);
        if ((rc = check(bo, round, last ? "leave" : "look", &res)) != 0)
            break;
        if (res != 0 || last)
            break;
        dist__sub_wait_since(ch, gen, next_look(deadline));
        if (dist__deadline_step(dl, &deadline))
            last = 1;
    }
    dist__sub_put(ch);
    if (rc != 0)
        return rc;
    if (res < 0)
        return dist__err(EOWNERDEAD,
                         "barrier '%s': a member died, round %lld "
                         "is broken",
                         bo->names->name.p, round);
    if (res == 0)
        return dist__err(ETIMEDOUT, "barrier '%s': timed out in round %lld",
                         bo->names->name.p, round);
    return 0;
}

static int barrier_wait(dist_barrier_t *b, const struct dist__deadline *dl)
{
    struct dist__barrier *bo;
    uint64_t deadline = 0;
    long long round = 0;
    int rc;

    if ((rc = get_barrier(b, &bo)) != 0)
        return rc;
    if (dl && (rc = dist__deadline_ms(dl, &deadline)) != 0)
        return rc;
    pthread_mutex_lock(&bo->mu);
    if ((rc = join(bo)) == 0)
        bo->waiting++;
    pthread_mutex_unlock(&bo->mu);
    if (rc != 0)
        return rc;
    rc = arrive(bo, &round);
    if (rc == 1)
        rc = DIST_BARRIER_SERIAL_THREAD;
    else if (rc == 0)
        rc = sleep_round(bo, round, dl, deadline);
    pthread_mutex_lock(&bo->mu);
    bo->waiting--;
    pthread_mutex_unlock(&bo->mu);
    return rc;
}

int dist_barrier_wait(dist_barrier_t *b)
{
    DIST__KEEP_ERRNO;
    return barrier_wait(b, NULL);
}

int dist_barrier_clockwait(dist_barrier_t *b, clockid_t clockid,
                           const struct timespec *abstime)
{
    DIST__KEEP_ERRNO;
    struct dist__deadline dl;
    int rc;

    if ((rc = dist__deadline_set(&dl, clockid, abstime)) != 0)
        return rc;
    return barrier_wait(b, &dl);
}

int dist_barrier_destroy(dist_barrier_t *b)
{
    DIST__KEEP_ERRNO;
    struct dist__barrier *bo;
    int rc, res;

    if ((rc = get_barrier(b, &bo)) != 0)
        return rc;
    pthread_mutex_lock(&bo->mu);
    if (bo->waiting > 0) {
        pthread_mutex_unlock(&bo->mu);
        return dist__err(EBUSY, "barrier '%s' has waiters in this process",
                         bo->names->name.p);
    }
    drop_parents_member(bo);
    pthread_mutex_unlock(&bo->mu);
    if (bo->member) {
        /* best effort: else the member's window ends it, breaking a round */
        check(bo, 0, "quit", &res);
        dist__waiter_stop(bo->member);
        bo->member = NULL;
    }
    __atomic_store_n((struct dist__barrier **)&b->__impl, NULL,
                     __ATOMIC_RELEASE);
    barrier_free(bo);
    return 0;
}
