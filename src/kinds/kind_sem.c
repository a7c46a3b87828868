/* kind_sem.c: the scripts of the leased semaphore, for the engine
 * (engine.h): each permit taken is a hold of the taking thread, renewed by
 * the watchdog as a lock's is, and given back by its lease when the holder
 * dies.  Also the Redisson-compatible semaphore's scripts (RSemaphore),
 * which keep no holders and so are not a kind of the engine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kinds.h"

static const enum dist__nm sem_name[DIST__SEM_NKEYS] = {
    DIST__N_SEM,
    DIST__N_SEM_HOLDS,
    DIST__N_SEM_LEASES,
    DIST__N_SEM_CHAN,
};

int dist__sem_keys(const struct dist__names *nm, int redisson,
                   struct dist__buf *keys)
{
    static const enum dist__nm rsem_chan = DIST__N_RSEM;

    if (!redisson)
        return dist__names_derive_all(nm, sem_name, DIST__SEM_NKEYS, keys);
    /* RSemaphore's: the count under the name itself, and its channel */
    if (!(keys[0].p = strdup(nm->name.p)))
        return ENOMEM;
    keys[0].len = nm->name.len;
    if (dist__names_derive_all(nm, &rsem_chan, 1, &keys[1]) != 0) {
        dist__bufs_free(keys, 1);
        return ENOMEM;
    }
    return 0;
}

static struct dist__semx *semx(const struct dist__call *c)
{
    return c->o->st->ext;
}

/* ---- the engine's operations ---------------------------------------------- */

static int s_plan(struct dist__call *c, int try_only)
{
    c->how = try_only ? DIST__HOW_TRY : DIST__HOW_WAIT;
    return 0;
}

static int s_acquire(struct dist__call *c)
{
    struct dist__semx *sx = semx(c);
    char lease[24], initial[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[9] = {
        sx->keys[0],
        sx->keys[1],
        sx->keys[2],
        sx->keys[3],
        { lease, 0 },
        { owner, olen },
        { initial, 0 },
        dist__arg(dist__publish_cmd()),
        dist__arg(atomic_load(&sx->unowned) ? "1" : "0"),
    };
    long long ok, v, had = 0;
    redisReply *r;
    int rc;

    kv[4].len =
        (size_t)snprintf(lease, sizeof lease, "%lu", dist__lease_of(c->o));
    kv[6].len = (size_t)snprintf(initial, sizeof initial, "%ld",
                                 atomic_load(&sx->initial));
    rc =
        dist__route_eval(c->limit, DIST__S_SEM_ACQUIRE, 4, kv, 9, &r, &c->on);
    if (rc == DIST__ECONN) {
        c->unknown = 1; /* the renewal thread gives back what it took */
        return EIO;
    }
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM : EIO;
    if (dist__reply_int(r, 0, &ok) != 0 || dist__reply_int(r, 1, &v) != 0 ||
        (ok == 1 && dist__reply_int(r, 2, &had) != 0)) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to sem_acquire");
    }
    freeReplyObject(r);
    c->taken = ok == 1;
    c->token = 0;
    if (c->taken)
        c->count = (unsigned long)v;
    else
        c->wait = v;
    /* with unowned posts the owner's earlier hold was consumed: it holds
     * this one alone, and lost nothing if Redis still had that one */
    c->replaced = c->taken && atomic_load(&sx->unowned);
    c->had = had > 0;
    return 0;
}

/* Runs sem_release on keys (sem, holds, leases, channel) by limit (the
 * call's, link.h); expect: the count a settle expects, or NULL.  0 with
 * *res and *woken, or a DIST__E*. */
static int run_release(uint64_t limit, const struct dist__buf *keys,
                       const char *owner, size_t olen, unsigned long lease_ms,
                       const char *expect, long long *res, long long *woken)
{
    char lease[24];
    struct dist__buf kv[8] = {
        keys[0],
        keys[1],
        keys[2],
        keys[3],
        { lease, 0 },
        { owner, olen },
        dist__arg(dist__publish_cmd()),
        { NULL, 0 },
    };
    redisReply *r;
    int rc;

    kv[4].len = (size_t)snprintf(lease, sizeof lease, "%lu", lease_ms);
    if (expect)
        kv[7] = dist__arg(expect);
    rc = dist__route_run(limit, DIST__S_SEM_RELEASE, 4, kv, expect ? 8 : 7,
                         &r);
    if (rc != 0)
        return rc;
    if (dist__reply_int(r, 0, res) != 0 ||
        dist__reply_int(r, 1, woken) != 0) {
        freeReplyObject(r);
        dist__err(EIO, "unexpected reply to sem_release");
        return DIST__EREPLY;
    }
    freeReplyObject(r);
    return 0;
}

static int s_release(struct dist__call *c)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    long long res = 0;
    int rc = run_release(c->limit, semx(c)->keys, owner, olen,
                         dist__lease_of(c->o), NULL, &res, &c->woken);

    /* a reply lost, or nothing sent: the owner lets go all the same and the
     * renewal thread finishes the release (see m_release) */
    if (rc == DIST__ECONN || rc == DIST__ENOCONN)
        c->unknown = 1;
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM : EIO;
    if (res < 0)
        return EPERM;
    c->count = (unsigned long)res;
    return 0;
}

/* The renewal thread: a release whose reply was lost, run again on the
 * condition that Redis still counts the one permit more. */
static int s_settle(struct dist__hold *h, int *lost)
{
    struct dist__buf keys[DIST__SEM_NKEYS];
    char expect[24], owner[DIST__OWNER_MAX];
    long long res = 0, woken;
    int rc;

    if (dist__sem_keys(h->names, 0, keys) != 0)
        return -1;
    snprintf(expect, sizeof expect, "%lu", h->n[0] + 1);
    rc = run_release(0, keys, owner, dist__hold_owner(h, owner),
                     h->lease_ms ? h->lease_ms : dist__watchdog_ms(), expect,
                     &res, &woken);
    dist__bufs_free(keys, DIST__SEM_NKEYS);
    if (rc == DIST__ECONN || rc == DIST__ENOCONN)
        return -1;
    *lost = rc == 0 && res == -1;
    return 0;
}

static struct dist__chan *s_channel(struct dist__call *c)
{
    return dist__sub_get(&semx(c)->keys[3]);
}

/* The watchdog renews a holder's lease in the holds and leases keys. */
static void s_renew_keys(struct dist__state *st, struct dist__rec *r,
                         struct dist__hold *h)
{
    struct dist__semx *sx = st->ext;

    DIST__UNUSED(r);
    h->keys = &sx->keys[1];
    h->nkeys = 2;
}

static int s_state_init(struct dist__state *st)
{
    struct dist__semx *sx = calloc(1, sizeof *sx);

    if (!sx)
        return ENOMEM;
    if (dist__sem_keys(st->names, 0, sx->keys) != 0) {
        free(sx);
        return ENOMEM;
    }
    st->ext = sx;
    return 0;
}

static void s_state_free(struct dist__state *st)
{
    struct dist__semx *sx = st->ext;

    dist__bufs_free(sx->keys, DIST__SEM_NKEYS);
    free(sx);
}

const struct dist__kind dist__sem_kind = {
    .noun = "semaphore",
    .family = DIST__FAM_SEM,
    .magic = 0x73656d61u, /* "sema" */
    .renewal = { DIST__S_SEM_RENEW, s_settle },
    .plan = s_plan,
    .acquire = s_acquire,
    .release = s_release,
    .channel = s_channel,
    .renew_keys = s_renew_keys,
    .state_init = s_state_init,
    .state_free = s_state_free,
};

/* ---- counts ------------------------------------------------------------------ */

int dist__sem_count_possible(const char *op, long n, long long free_)
{
    if (free_ == -1)
        return strcmp(op, "add") == 0;
    if (free_ < 0 || free_ > DIST_SEM_VALUE_MAX)
        return 0;
    return strcmp(op, "set") != 0 || free_ == n;
}

int dist__sem_count(struct dist__obj *o, const char *op, long n, long *free_,
                    long *held)
{
    struct dist__semx *sx = o->st->ext;
    char num[24], initial[24], max[24];
    struct dist__buf kv[9] = {
        sx->keys[0],    sx->keys[1],   sx->keys[2],
        sx->keys[3],    dist__arg(op), { num, 0 },
        { initial, 0 }, { max, 0 },    dist__arg(dist__publish_cmd()),
    };
    long long f, h;
    redisReply *r;
    int rc;

    kv[5].len = (size_t)snprintf(num, sizeof num, "%ld", n);
    kv[6].len = (size_t)snprintf(initial, sizeof initial, "%ld",
                                 atomic_load(&sx->initial));
    kv[7].len =
        (size_t)snprintf(max, sizeof max, "%ld", atomic_load(&sx->max));
    rc = dist__route_run(0, DIST__S_SEM_COUNT, 4, kv, 9, &r);
    /* 'add' is not run twice: a lost reply may have added the permits */
    if (rc == DIST__ECONN && strcmp(op, "add") != 0)
        rc = dist__route_run(0, DIST__S_SEM_COUNT, 4, kv, 9, &r);
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM : EIO;
    if (dist__reply_int(r, 0, &f) != 0 || dist__reply_int(r, 1, &h) != 0) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to sem_count");
    }
    freeReplyObject(r);
    /* a liar or a tampered key: refused, never passed on as a count (the
     * tool printed it and exited 0) */
    if (!dist__sem_count_possible(op, n, f) || h < 0)
        return dist__err_lock(
            EIO, "semaphore", o->st->names->name.p,
            ": impossible reply to sem_count %s %ld: %lld free, %lld held",
            op, n, f, h);
    if (f < 0)
        return dist__err_lock(
            EOVERFLOW, "semaphore", o->st->names->name.p,
            ": %ld more permits would pass its maximum of %ld", n,
            atomic_load(&sx->max));
    if (free_)
        *free_ = (long)f;
    if (held)
        *held = (long)h;
    return 0;
}

/* The owner field of record r: the renewal entry's, else made as
 * dist__owner makes the calling thread's.  The state's mu held. */
static void rec_owner(const struct dist__rec *r, char *buf, size_t size,
                      size_t *len)
{
    int n;

    if (r->h && size >= DIST__OWNER_MAX) {
        *len = dist__hold_owner(r->h, buf);
        return;
    }
    n = snprintf(buf, size, "%s:%llu", dist__client_id(),
                 (unsigned long long)r->thread_no);
    *len = n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* The owners of st's records that hold permits, into *owners (malloc'd,
 * 64 bytes each) and their lengths; -1 (EBUSY) when one's outcome is
 * still being settled.  The state's mu held.  The count, or -ENOMEM. */
static int holding_owners(struct dist__state *st, char (**owners)[64],
                          size_t **lens)
{
    struct dist__rec *r;
    int n = 0, i = 0;

    dist__rec_find(st); /* drops a parent's records */
    for (r = st->recs; r; r = r->next) {
        if (r->unknown)
            return -EBUSY;
        n += r->n[0] > 0;
    }
    *owners = NULL;
    *lens = NULL;
    if (n == 0)
        return 0;
    *owners = malloc(sizeof **owners * (size_t)n);
    *lens = malloc(sizeof **lens * (size_t)n);
    if (!*owners || !*lens) {
        free(*owners);
        free(*lens);
        return -ENOMEM;
    }
    for (r = st->recs; r; r = r->next)
        if (r->n[0] > 0) {
            rec_owner(r, (*owners)[i], sizeof(*owners)[i], &(*lens)[i]);
            i++;
        }
    return n;
}

/* Runs sem_count 'drop' for the n owners.  0 or EIO/ENOMEM. */
static int run_drop(struct dist__obj *o, char (*owners)[64],
                    const size_t *lens, int n)
{
    struct dist__semx *sx = o->st->ext;
    char initial[24], max[24];
    struct dist__buf *kv = calloc((size_t)(9 + n), sizeof *kv);
    redisReply *r;
    int i, rc;

    if (!kv)
        return ENOMEM;
    kv[0] = sx->keys[0], kv[1] = sx->keys[1];
    kv[2] = sx->keys[2], kv[3] = sx->keys[3];
    kv[4] = dist__arg("drop");
    kv[5] = dist__arg("0");
    kv[6] =
        (struct dist__buf){ initial,
                            (size_t)snprintf(initial, sizeof initial, "%ld",
                                             atomic_load(&sx->initial)) };
    kv[7] =
        (struct dist__buf){ max, (size_t)snprintf(max, sizeof max, "%ld",
                                                  atomic_load(&sx->max)) };
    kv[8] = dist__arg(dist__publish_cmd());
    for (i = 0; i < n; i++)
        kv[9 + i] = (struct dist__buf){ owners[i], lens[i] };
    /* run again on a lost reply: dropping twice is dropping once */
    rc = dist__route_run(0, DIST__S_SEM_COUNT, 4, kv, 9 + n, &r);
    if (rc == DIST__ECONN)
        rc = dist__route_run(0, DIST__S_SEM_COUNT, 4, kv, 9 + n, &r);
    free(kv);
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM : EIO;
    freeReplyObject(r);
    return 0;
}

int dist__sem_drop(struct dist__obj *o)
{
    struct dist__state *st = o->st;
    struct dist__rec *r, *next;
    char(*owners)[64];
    size_t *lens;
    int n, rc;

    pthread_mutex_lock(&st->mu);
    n = holding_owners(st, &owners, &lens);
    pthread_mutex_unlock(&st->mu);
    if (n == -EBUSY)
        return dist__err_lock(
            EBUSY, "semaphore", st->names->name.p,
            ": an earlier call's outcome is still being settled");
    if (n < 0)
        return dist__err(ENOMEM, "out of memory");
    if (n == 0)
        return 0;
    rc = run_drop(o, owners, lens, n);
    free(owners);
    free(lens);
    if (rc != 0)
        return dist__err_lock(rc, "semaphore", st->names->name.p,
                              ": the permits this process's threads hold "
                              "could not be consumed: %s",
                              dist_last_error());
    /* the fields stay at 0 until their lease ends: renewals under way find
     * them, and none is made once the records are gone */
    pthread_mutex_lock(&st->mu);
    for (r = st->recs; r; r = next) {
        next = r->next;
        if (r->n[0] > 0 && !r->unknown)
            dist__rec_drop(st, r);
    }
    pthread_mutex_unlock(&st->mu);
    return 0;
}
