/* mutex.c: dist_mutex, Redisson's reentrant RLock.  The lock's state lives
 * in Redis; the object keeps which local threads hold it and their tokens. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MUTEX_MAGIC 0x64697374u   /* "dist" */
#define ATTR_FAIR   1u            /* dist_mutexattr_t.__flags */

/* What Redis keys by name is shared by every object of that name in the
 * process: Redis counts one owner thread's holds of a name together, so the
 * local record of them must be one too. */
struct dist__lock {
    struct dist__lock *prev, *next;   /* every lock name in use, for fork() */
    int refs;                         /* objects using it (locks_mu) */
    pthread_mutex_t mu;               /* guards holds */
    struct dist__names *names;
    struct dist__hold *holds;         /* one per local owner thread */
    /* Courtesy after a release that reached waiters: until yield_until
     * that thread lets them go first (see acquire()).  Under mu. */
    uint64_t yield_thread;
    uint64_t yield_until;
    uint64_t streak_thread;           /* who released to waiters last, */
    unsigned streak;                  /* and how often in a row */
};

/* One dist_mutex_t's own settings. */
struct dist__mobj {
    unsigned magic;
    int type;
    int fair;                         /* FIFO through the queue in Redis */
    unsigned long lease_ms;           /* 0: watchdog */
    struct dist__lock *lk;
};

static pthread_mutex_t locks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dist__lock *locks;

/* ---- attributes -------------------------------------------------------- */

int dist_mutexattr_init(dist_mutexattr_t *a)
{
    if (!a)
        return EINVAL;
    memset(a, 0, sizeof *a);
    a->__type = DIST_MUTEX_RECURSIVE;
    return 0;
}

int dist_mutexattr_destroy(dist_mutexattr_t *a)
{
    return a ? 0 : EINVAL;
}

int dist_mutexattr_settype(dist_mutexattr_t *a, int type)
{
    if (!a)
        return EINVAL;
    if (type != DIST_MUTEX_RECURSIVE && type != DIST_MUTEX_ERRORCHECK)
        return dist__err(EINVAL, "mutex type %d: use DIST_MUTEX_RECURSIVE or "
                         "DIST_MUTEX_ERRORCHECK", type);
    a->__type = type;
    return 0;
}

int dist_mutexattr_gettype(const dist_mutexattr_t *a, int *type)
{
    if (!a || !type)
        return EINVAL;
    *type = a->__type ? a->__type : DIST_MUTEX_RECURSIVE;
    return 0;
}

int dist_mutexattr_setlease(dist_mutexattr_t *a, unsigned long lease_ms)
{
    if (!a)
        return EINVAL;
    if (lease_ms > 24UL * 3600 * 1000)
        return dist__err(EINVAL, "lease of %lu ms is longer than a day", lease_ms);
    a->__lease_ms = lease_ms;
    return 0;
}

int dist_mutexattr_setfair(dist_mutexattr_t *a, int fair)
{
    if (!a)
        return EINVAL;
    if (fair != 0 && fair != 1)
        return dist__err(EINVAL, "fair must be 0 or 1, not %d", fair);
    a->__flags = fair ? (a->__flags | ATTR_FAIR) : (a->__flags & ~ATTR_FAIR);
    return 0;
}

int dist_mutexattr_getfair(const dist_mutexattr_t *a, int *fair)
{
    if (!a || !fair)
        return EINVAL;
    *fair = (a->__flags & ATTR_FAIR) != 0;
    return 0;
}

int dist_mutexattr_getlease(const dist_mutexattr_t *a, unsigned long *lease_ms)
{
    if (!a || !lease_ms)
        return EINVAL;
    *lease_ms = a->__lease_ms;
    return 0;
}

/* ---- objects ----------------------------------------------------------- */

static int check_name(const char *name, size_t *len)
{
    if (!name)
        return dist__err(EINVAL, "lock name is NULL");
    *len = strnlen(name, DIST_NAME_MAX + 1);
    if (*len == 0)
        return dist__err(EINVAL, "lock name is empty");
    if (*len > DIST_NAME_MAX)
        return dist__err(EINVAL, "lock name is longer than %d bytes",
                         DIST_NAME_MAX);
    return 0;
}

/* Lets go of a hold record: unregisters it from the watchdog and frees it
 * (or leaves that to the renewal thread).  lk->mu held. */
static void hold_drop(struct dist__lock *lk, struct dist__hold *h)
{
    struct dist__hold **pp;

    for (pp = &lk->holds; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    }
    if (h->gen != atomic_load(&dist__fork_gen)) {
        dist__hold_free(h);   /* the parent's: not in our registry */
        return;
    }
    if (dist__renew_remove(h))
        dist__hold_free(h);
}

/* The calling thread's hold record, or NULL.  Drops records the parent
 * left behind across a fork.  lk->mu held. */
static struct dist__hold *hold_find(struct dist__lock *lk)
{
    unsigned long gen = atomic_load(&dist__fork_gen);
    uint64_t tno = dist__thread_no();
    struct dist__hold *h, *next;

    for (h = lk->holds; h; h = next) {
        next = h->next;
        if (h->gen != gen)
            hold_drop(lk, h);
        else if (h->thread_no == tno)
            return h;
    }
    return NULL;
}

/* Finds or makes the shared state of a name.  locks_mu held. */
static struct dist__lock *state_get(const char *name, size_t len)
{
    struct dist__lock *lk;

    for (lk = locks; lk; lk = lk->next) {
        if (lk->names->name.len == len &&
            memcmp(lk->names->name.p, name, len) == 0) {
            lk->refs++;
            return lk;
        }
    }
    lk = calloc(1, sizeof *lk);
    if (!lk || !(lk->names = dist__names_new(name, len))) {
        free(lk);
        return NULL;
    }
    pthread_mutex_init(&lk->mu, NULL);
    lk->refs = 1;
    lk->next = locks;
    if (locks)
        locks->prev = lk;
    locks = lk;
    return lk;
}

/* Drops one object's reference; the last one frees the state, and any hold
 * records left (lost ones, or releases the renewal thread still owes). */
static void state_put(struct dist__lock *lk)
{
    pthread_mutex_lock(&locks_mu);
    if (--lk->refs > 0) {
        pthread_mutex_unlock(&locks_mu);
        return;
    }
    if (lk->prev)
        lk->prev->next = lk->next;
    else
        locks = lk->next;
    if (lk->next)
        lk->next->prev = lk->prev;
    pthread_mutex_unlock(&locks_mu);
    pthread_mutex_lock(&lk->mu);
    while (lk->holds)
        hold_drop(lk, lk->holds);
    pthread_mutex_unlock(&lk->mu);
    pthread_mutex_destroy(&lk->mu);
    dist__names_unref(lk->names);
    free(lk);
}

static int obj_new(const char *name, const dist_mutexattr_t *attr,
                   struct dist__mobj **out)
{
    struct dist__mobj *o;
    size_t len = 0;
    int rc;

    if ((rc = check_name(name, &len)) != 0)
        return rc;
    if (attr && attr->__type && attr->__type != DIST_MUTEX_RECURSIVE &&
        attr->__type != DIST_MUTEX_ERRORCHECK)
        return dist__err(EINVAL, "mutex attribute has an unknown type %d",
                         attr->__type);
    dist__lib_init();
    if (!(o = calloc(1, sizeof *o)))
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_lock(&locks_mu);
    o->lk = state_get(name, len);
    pthread_mutex_unlock(&locks_mu);
    if (!o->lk) {
        free(o);
        return dist__err(ENOMEM, "out of memory");
    }
    o->magic = MUTEX_MAGIC;
    o->type = attr && attr->__type ? attr->__type : DIST_MUTEX_RECURSIVE;
    o->lease_ms = attr ? attr->__lease_ms : 0;
    o->fair = attr && (attr->__flags & ATTR_FAIR);
    *out = o;
    return 0;
}

static void obj_free(struct dist__mobj *o)
{
    o->magic = 0;
    state_put(o->lk);
    free(o);
}

/* The object, created at first use for DIST_MUTEX_INITIALIZER. */
static int get_obj(dist_mutex_t *m, struct dist__mobj **out)
{
    struct dist__mobj *o, *expected = NULL;
    int rc;

    if (!m)
        return dist__err(EINVAL, "mutex is NULL");
    o = __atomic_load_n((struct dist__mobj **)&m->__impl, __ATOMIC_ACQUIRE);
    if (o) {
        if (o->magic != MUTEX_MAGIC)
            return dist__err(EINVAL, "mutex is not initialised (or destroyed)");
        *out = o;
        return 0;
    }
    if (!m->__name)
        return dist__err(EINVAL, "mutex has no name: use dist_mutex_init or "
                         "DIST_MUTEX_INITIALIZER");
    if ((rc = obj_new(m->__name, NULL, &o)) != 0)
        return rc;
    if (!__atomic_compare_exchange_n((struct dist__mobj **)&m->__impl,
                                     &expected, o, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        obj_free(o);        /* another thread won the race */
        o = expected;
    }
    *out = o;
    return 0;
}

int dist_mutex_init(dist_mutex_t *m, const char *name,
                    const dist_mutexattr_t *attr)
{
    struct dist__mobj *o;
    int rc;

    if (!m)
        return dist__err(EINVAL, "mutex is NULL");
    if ((rc = obj_new(name, attr, &o)) != 0)
        return rc;
    m->__name = NULL;
    m->__reserved[0] = m->__reserved[1] = 0;
    __atomic_store_n((struct dist__mobj **)&m->__impl, o, __ATOMIC_RELEASE);
    return 0;
}

int dist_mutex_destroy(dist_mutex_t *m)
{
    struct dist__mobj *o;
    struct dist__lock *lk;
    struct dist__hold *h;

    if (!m)
        return dist__err(EINVAL, "mutex is NULL");
    o = __atomic_load_n((struct dist__mobj **)&m->__impl, __ATOMIC_ACQUIRE);
    if (!o)
        return 0;
    if (o->magic != MUTEX_MAGIC)
        return dist__err(EINVAL, "mutex is not initialised (or destroyed)");
    lk = o->lk;
    pthread_mutex_lock(&lk->mu);
    hold_find(lk);   /* drops a parent's records */
    for (h = lk->holds; h; h = h->next) {
        /* a hold whose explicit lease has surely ended is not in the way,
         * even if its thread never unlocked (it may have exited) */
        int expired = h->lease_end && dist__now_ms() > h->lease_end;
        if (h->count > 0 && !atomic_load(&h->lost) && !expired) {
            pthread_mutex_unlock(&lk->mu);
            return dist__err(EBUSY, "mutex '%s' is still held by thread %" PRIu64,
                             lk->names->name.p, h->thread_no);
        }
    }
    pthread_mutex_unlock(&lk->mu);
    __atomic_store_n((struct dist__mobj **)&m->__impl, NULL, __ATOMIC_RELEASE);
    obj_free(o);
    return 0;
}

/* ---- talking to Redis -------------------------------------------------- */

struct attempt {
    int taken;
    long long holds;    /* the owner's count in Redis after the call */
    uint64_t token;
    long long pttl;     /* when not taken */
};

static unsigned long lease_of(const struct dist__mobj *o)
{
    return o->lease_ms ? o->lease_ms : dist__watchdog_ms();
}

/* Reads the owner's count after a lost reply.  0, or EIO. */
static int probe(struct dist__lock *lk, const char *owner, size_t olen,
                 long long *holds, long long *pttl, uint64_t *token)
{
    struct dist__buf kv[3] = { lk->names->name, lk->names->token,
                               { owner, olen } };
    redisReply *r;
    long long t;
    uint64_t give_up = 0;
    int tries, rc;

    /* The first reconnect usually works; a server that is restarting may
     * need a few tries: keep at it for up to the command timeout. */
    for (tries = 0;; tries++) {
        rc = dist__eval_here(DIST__S_MUTEX_PROBE, 2, kv, 3, &r);
        if (rc == 0 || rc == DIST__EREPLY || rc == ENOMEM)
            break;
        if (!give_up)
            give_up = dist__now_ms() + dist__timeout_ms();
        if (dist__now_ms() >= give_up)
            break;
        dist__sleep_ms(tries == 0 ? 10 : 50);
    }
    if (rc != 0)
        return EIO;
    if (dist__reply_int(r, 0, holds) || dist__reply_int(r, 1, pttl) ||
        dist__reply_int(r, 2, &t)) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to mutex_probe");
    }
    *token = (uint64_t)t;
    freeReplyObject(r);
    return 0;
}

/* One try at taking the lock.  before: the owner's count in Redis as far
 * as we know.  0 with *a filled, or EIO; *doubt when the outcome is unknown. */
enum { TRY_PLAIN, TRY_FAIR, WAIT_FAIR };

/* Runs the acquire script of the lock's kind.  A fair lock's WAIT_FAIR also
 * puts the caller in the queue (once) when it cannot take the lock. */
static int run_acquire(struct dist__mobj *o, int how, redisReply **r)
{
    struct dist__lock *lk = o->lk;
    char lease[24], window[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[11];

    snprintf(lease, sizeof lease, "%lu", lease_of(o));
    if (how == TRY_PLAIN) {
        kv[0] = lk->names->name;
        kv[1] = lk->names->token;
        kv[2] = (struct dist__buf){ lease, strlen(lease) };
        kv[3] = (struct dist__buf){ owner, olen };
        return dist__eval_here(DIST__S_MUTEX_LOCK, 2, kv, 4, r);
    }
    snprintf(window, sizeof window, "%lu", dist__waiter_ms());
    kv[0] = lk->names->name;
    kv[1] = lk->names->queue;
    kv[2] = lk->names->timeout;
    kv[3] = lk->names->token;
    kv[4] = lk->names->chan;
    kv[5] = lk->names->fairwait;
    kv[6] = (struct dist__buf){ lease, strlen(lease) };
    kv[7] = (struct dist__buf){ owner, olen };
    kv[8] = (struct dist__buf){ window, strlen(window) };
    kv[9] = how == WAIT_FAIR ? (struct dist__buf){ "wait", 4 }
                             : (struct dist__buf){ "try", 3 };
    kv[10] = (struct dist__buf){ dist__publish_cmd(), strlen(dist__publish_cmd()) };
    return dist__eval_here(DIST__S_FAIR_LOCK, 6, kv, 11, r);
}

static int try_acquire(struct dist__mobj *o, int how, long long before,
                       struct attempt *a, int *doubt)
{
    struct dist__lock *lk = o->lk;
    size_t olen;
    const char *owner = dist__owner(&olen);
    redisReply *r;
    long long ok, v, t = 0;
    int rc;

    *doubt = 0;
    rc = run_acquire(o, how, &r);
    if (rc == DIST__ECONN) {
        /* The call may have run: ask Redis rather than run it twice. */
        if (probe(lk, owner, olen, &a->holds, &a->pttl, &a->token) != 0) {
            *doubt = 1;
            return EIO;
        }
        if (a->holds == before + 1) {
            a->taken = 1;
            return 0;
        }
        rc = run_acquire(o, how, &r);
        if (rc == DIST__ECONN)
            *doubt = 1;
    }
    if (rc != 0)
        return EIO;
    if (dist__reply_int(r, 0, &ok) != 0 || dist__reply_int(r, 1, &v) != 0) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to mutex_lock");
    }
    a->taken = ok == 1;
    if (a->taken) {
        a->holds = v;
        dist__reply_int(r, 2, &t);
        a->token = (uint64_t)t;
    } else {
        a->pttl = v;
    }
    freeReplyObject(r);
    return 0;
}

/* Records a successful acquire; *was_lost when Redis had forgotten an
 * earlier hold of ours and this is a fresh one. */
static int record(struct dist__mobj *o, const struct attempt *a,
                  long long before, int *was_lost)
{
    struct dist__lock *lk = o->lk;
    struct dist__hold *h;

    *was_lost = 0;
    pthread_mutex_lock(&lk->mu);
    h = hold_find(lk);
    if (!h) {
        h = dist__hold_new(lk->names, o->lease_ms);
        if (!h) {
            pthread_mutex_unlock(&lk->mu);
            return ENOMEM;
        }
        h->fair = o->fair;
        h->next = lk->holds;
        lk->holds = h;
    }
    if (a->holds != before + 1 && before > 0)
        *was_lost = 1;
    if (h->count == 0 || *was_lost)
        h->token = a->token;
    h->count = (unsigned long)a->holds;
    /* measured after the reply: the server's own expiry comes earlier */
    h->lease_end = h->lease_ms ? dist__now_ms() + h->lease_ms : 0;
    atomic_store(&h->lost, 0);
    if (!h->lease_ms && !h->registered)
        dist__renew_add(h);
    pthread_mutex_unlock(&lk->mu);
    return 0;
}

/* Leaves a record of a call whose outcome is unknown, so that the renewal
 * thread settles it and the owner's next call waits for that.  count is
 * what the owner holds for sure; Redis may count one more. */
static void leave_doubt(struct dist__mobj *o, unsigned long count)
{
    struct dist__lock *lk = o->lk;
    struct dist__hold *h;

    pthread_mutex_lock(&lk->mu);
    h = hold_find(lk);
    if (!h && (h = dist__hold_new(lk->names, o->lease_ms)) != NULL) {
        h->next = lk->holds;
        lk->holds = h;
    }
    if (h) {
        h->count = count;
        h->fair = o->fair;
        dist__renew_doubt(h);
    }
    pthread_mutex_unlock(&lk->mu);
}

/* Before any call: the owner's standing.  Settles an earlier doubt first.
 * *held is 1 for a live hold, 0 for none, -1 for one that was lost (its
 * record is dropped).  *before is the count Redis should have for us. */
static int prepare(struct dist__lock *lk, long long *before, int *held)
{
    struct dist__hold *h;
    uint64_t until = 0;
    int rc;

    pthread_mutex_lock(&lk->mu);
    for (;;) {
        h = hold_find(lk);
        if (!h || !h->doubt)
            break;
        pthread_mutex_unlock(&lk->mu);
        if (!until)
            until = dist__now_ms() + dist__timeout_ms() * 2;
        if ((rc = dist__renew_settle(h, until)) != 0)
            return rc;
        pthread_mutex_lock(&lk->mu);
    }
    *held = 0;
    *before = 0;
    if (h && atomic_load(&h->lost))
        *held = -1;
    else if (h && h->count > 0)
        *held = 1, *before = (long long)h->count;
    if (h && *held != 1)
        hold_drop(lk, h);
    pthread_mutex_unlock(&lk->mu);
    return 0;
}

/* ---- lock and unlock --------------------------------------------------- */

/* How long a waiter may sleep before trying again: the holder's remaining
 * lease.  0 means the lease ends this very millisecond (a script sees time
 * stand still), so try again at once; -1 (a key with no expiry, which no
 * well-behaved client leaves) falls back to a lease of our own. */
static uint64_t sleep_bound(const struct dist__mobj *o, long long pttl)
{
    if (pttl >= 0)
        return (uint64_t)pttl + 1;
    return lease_of(o);
}

/* This thread released the lock to waiters a moment ago: sleep until one of
 * them has had time to take it, so that a thread looping on lock/unlock does
 * not starve other processes.  A plain sleep: our own release message must
 * not cut it short.  trylock never waits; a timed lock waits no longer than
 * its deadline. */
static void yield_to_waiters(struct dist__lock *lk, const struct timespec *abstime)
{
    struct timespec ts;
    uint64_t until = 0;

    pthread_mutex_lock(&lk->mu);
    if (lk->yield_thread == dist__thread_no()) {
        until = lk->yield_until;
        lk->yield_thread = 0;
    }
    pthread_mutex_unlock(&lk->mu);
    if (until <= dist__now_ms())
        return;
    if (abstime && abstime->tv_nsec >= 0 && abstime->tv_nsec < 1000000000L) {
        uint64_t deadline = dist__ts_to_mono_ms(abstime);
        if (deadline < until)
            until = deadline;
    }
    dist__ms_to_ts(until, &ts);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* A fair waiter that gives up leaves the queue at once (best effort: if
 * Redis cannot be reached, its deadline ends it within a window). */
static void fair_cancel(struct dist__lock *lk)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    const char *pub = dist__publish_cmd();
    struct dist__buf kv[7] = {
        lk->names->name, lk->names->queue, lk->names->timeout, lk->names->chan,
        { owner, olen }, { pub, strlen(pub) }, { "0", 1 },
    };
    redisReply *r;

    if (dist__eval_here(DIST__S_FAIR_CANCEL, 4, kv, 7, &r) == 0)
        freeReplyObject(r);
}

/* The channel a waiter sleeps on: the lock's, or for a fair lock its own
 * (only the head of the queue is told of a release). */
static struct dist__chan *wait_channel(struct dist__mobj *o)
{
    struct dist__lock *lk = o->lk;
    struct dist__chan *ch;
    struct dist__buf b;
    size_t olen;
    char *suffix, *name;

    if (!o->fair)
        return dist__sub_get(&lk->names->chan);
    dist__owner(&olen);
    if (!(suffix = malloc(olen + 2)))
        return NULL;
    suffix[0] = ':';
    memcpy(suffix + 1, dist__owner(NULL), olen + 1);
    name = dist__names_derive(lk->names, "redisson_lock__channel:", suffix,
                              &b.len);
    free(suffix);
    if (!name)
        return NULL;
    b.p = name;
    ch = dist__sub_get(&b);
    free(name);
    return ch;
}

/* try_acquire for a call that may wait: a Redis that cannot be reached for
 * a moment (a restart, a failover) is tried again until the patience runs
 * out (dist__patience_ms), or the caller's deadline.  A try whose outcome
 * is unknown is handed to the renewal thread, and the next try waits until
 * it has been settled (any hold it took given back), so a failover in the
 * middle of a try does not end the wait. */
static int try_patiently(struct dist__mobj *o, int how, long long before,
                         struct attempt *a, int *doubt, uint64_t deadline)
{
    struct dist__lock *lk = o->lk;
    struct dist__hold *h;
    uint64_t give_up = 0, now;
    int rc;

    for (;;) {
        rc = try_acquire(o, how, before, a, doubt);
        if (rc != EIO)
            return rc;
        now = dist__now_ms();
        if (!give_up)
            give_up = now + dist__patience_ms();
        if (deadline && deadline < give_up)
            give_up = deadline;
        if (now >= give_up)
            return rc;
        if (*doubt) {
            leave_doubt(o, (unsigned long)before);
            pthread_mutex_lock(&lk->mu);
            h = hold_find(lk);
            pthread_mutex_unlock(&lk->mu);
            /* the hold record stays while it is in doubt */
            if (h && dist__renew_settle(h, give_up) != 0)
                return rc;          /* still in doubt: the caller says so */
            *doubt = 0;
            continue;
        }
        dist__sleep_ms(give_up - now < 50 ? give_up - now : 50);
    }
}

/* Waits for a replica to acknowledge the hold just taken; gives it back
 * when none does (see DIST_ENOREPLICA). */
static int replica_sync(dist_mutex_t *m, struct dist__lock *lk)
{
    char why[256];
    int rc = dist__replica_sync(lk->names->name.p);

    if (rc == 0)
        return 0;
    snprintf(why, sizeof why, "%s", dist_last_error());
    dist_mutex_unlock(m);
    if (rc == DIST_ENOREPLICA)
        return dist__err(rc, "%s", why);
    return dist__err(EIO, "%s; the hold is given back", why);
}

static int acquire(dist_mutex_t *m, int try_only, const struct timespec *abstime)
{
    struct dist__mobj *o;
    struct dist__lock *lk;
    struct dist__chan *ch;
    struct dist__hold *w = NULL;
    struct attempt a = { 0 };
    long long before;
    uint64_t deadline = 0, until;
    int rc, held, doubt, lost, how, queued = 0;

    if ((rc = get_obj(m, &o)) != 0)
        return rc;
    lk = o->lk;
    if ((rc = prepare(lk, &before, &held)) != 0)
        return rc;
    if (held == 1 && o->type == DIST_MUTEX_ERRORCHECK)
        return dist__err(EDEADLK, "mutex '%s' is already held by this thread",
                         lk->names->name.p);
    if (!try_only && held == 0 && !o->fair)
        yield_to_waiters(lk, abstime);

    /* A fair lock's blocking call joins the queue at its first attempt, so
     * that callers are served in the order they arrived. */
    how = !o->fair ? TRY_PLAIN : try_only ? TRY_FAIR : WAIT_FAIR;
    rc = try_only ? try_acquire(o, how, before, &a, &doubt)
                  : try_patiently(o, how, before, &a, &doubt, 0);
    queued = how == WAIT_FAIR && rc == 0 && !a.taken;
    if (rc == 0 && !a.taken && try_only)
        return dist__err(EBUSY, "mutex '%s' is held by another owner%s",
                         lk->names->name.p, o->fair ? " or has waiters" : "");
    if (rc == 0 && !a.taken) {
        /* It would wait: only now is the deadline looked at (as musl). */
        if (abstime) {
            if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L)
                rc = dist__err(EINVAL, "abstime.tv_nsec %ld is out of range",
                               abstime->tv_nsec);
            else if (dist__realtime_reached(abstime))
                rc = dist__err(ETIMEDOUT, "mutex '%s': deadline passed",
                               lk->names->name.p);
            else
                deadline = dist__ts_to_mono_ms(abstime);
        }
    }
    if (rc == 0 && !a.taken) {
        /* a fair waiter's renewal needs four keys (see waiter_renew), set
         * long before its first renewal, a period away */
        if (o->fair &&
            (w = dist__waiter_start(lk->names, &lk->names->fairkeys[0])) != NULL)
            dist__renew_set_keys(w, lk->names->fairkeys, 4);
        if (!(ch = wait_channel(o))) {
            rc = dist__err(ENOMEM, "out of memory");
            goto out;
        }
        /* Subscribe before trying again, so that a release that comes
         * between that try and the sleep wakes the sleep. */
        until = dist__now_ms() + sleep_bound(o, a.pttl);
        if (deadline && deadline < until)
            until = deadline;
        dist__sub_wait_ready(ch, until);
        for (;;) {
            rc = try_patiently(o, how, before, &a, &doubt, deadline);
            if (rc != 0 || a.taken)
                break;
            /* Sleep until a release message, the end of the holder's lease
             * (for a fair waiter behind others: the head's deadline), or
             * our deadline, whichever comes first. */
            until = dist__now_ms() + sleep_bound(o, a.pttl);
            if (deadline && deadline < until)
                until = deadline;
            dist__sub_wait(ch, until);
            if (deadline && dist__now_ms() >= deadline) {
                if (dist__realtime_reached(abstime)) {
                    rc = dist__err(ETIMEDOUT, "mutex '%s': timed out",
                                   lk->names->name.p);
                    break;
                }
                deadline = dist__ts_to_mono_ms(abstime);   /* clock stepped */
            }
        }
        dist__sub_put(ch);
    }
out:
    dist__waiter_stop(w);
    if (queued && !(rc == 0 && a.taken))
        fair_cancel(lk);
    if (rc != 0) {
        if (doubt)
            leave_doubt(o, (unsigned long)before);
        if (rc == EIO) {
            char why[256];
            snprintf(why, sizeof why, "%s", dist_last_error());
            if (!strstr(why, lk->names->name.p))
                dist__err(EIO, "mutex '%s': %s", lk->names->name.p, why);
        }
        return rc;
    }
    if ((rc = record(o, &a, before, &lost)) != 0)
        return dist__err(rc, "out of memory");
    if (lost)
        dist__call_lost_handler(lk->names->name.p);
    /* A new hold is only as safe as its copy on a replica (a reentrant
     * one adds to a hold a replica has already). */
    if (before == 0 || lost)
        return replica_sync(m, lk);
    return 0;
}

int dist_mutex_lock(dist_mutex_t *m)
{
    return acquire(m, 0, NULL);
}

int dist_mutex_trylock(dist_mutex_t *m)
{
    return acquire(m, 1, NULL);
}

int dist_mutex_timedlock(dist_mutex_t *m, const struct timespec *abstime)
{
    if (!abstime)
        return dist__err(EINVAL, "abstime is NULL");
    return acquire(m, 0, abstime);
}

#define REL_FAILED (-100)
#define YIELD_MIN_MS 1
#define YIELD_AFTER  8   /* releases to waiters in a row before yielding */
#define YIELD_MAX_RTT_MS 2

/* Runs the release script; a lost reply is settled by reading the count
 * back.  Returns the script's answer (-1, or holds left >= 0), or
 * REL_FAILED with *doubt set when the outcome is unknown. */
static long long release(struct dist__mobj *o, long long before,
                         uint64_t mytoken, int *doubt, long long *waiters)
{
    struct dist__lock *lk = o->lk;
    char lease[24];
    size_t olen;
    const char *owner = dist__owner(&olen);
    const char *pub = dist__publish_cmd();
    struct dist__buf kv[8];
    redisReply *r;
    long long res, holds, pttl;
    uint64_t tok;
    int rc, n, nkeys, script;

    *doubt = 0;
    *waiters = 0;
    snprintf(lease, sizeof lease, "%lu", lease_of(o));
    n = 0;
    kv[n++] = lk->names->name;
    if (o->fair) {
        kv[n++] = lk->names->queue;
        kv[n++] = lk->names->timeout;
    }
    kv[n++] = lk->names->chan;
    nkeys = n;
    kv[n++] = (struct dist__buf){ lease, strlen(lease) };
    kv[n++] = (struct dist__buf){ owner, olen };
    kv[n++] = (struct dist__buf){ pub, strlen(pub) };
    kv[n++] = (struct dist__buf){ "0", 1 };
    script = o->fair ? DIST__S_FAIR_UNLOCK : DIST__S_MUTEX_UNLOCK;

    rc = dist__eval_here(script, nkeys, kv, n, &r);
    if (rc == DIST__ECONN) {
        if (probe(lk, owner, olen, &holds, &pttl, &tok) != 0) {
            *doubt = 1;
            return REL_FAILED;
        }
        /* A counter below our token means the server lost its data (a
         * restart without persistence): the hold went with it. */
        if (tok < mytoken)
            return -1;
        if (holds == before - 1)
            return holds;          /* it ran */
        if (holds != before)
            return -1;             /* the hold went away meanwhile */
        rc = dist__eval_here(script, nkeys, kv, n, &r);
        if (rc == DIST__ECONN) {
            *doubt = 1;
            return REL_FAILED;
        }
    }
    if (rc == DIST__ENOCONN) {
        /* Nothing was sent, but the owner lets go now all the same: a hold
         * kept after a failed unlock would be renewed for ever.  The
         * renewal thread releases it when Redis answers again. */
        *doubt = 1;
        return REL_FAILED;
    }
    if (rc != 0)
        return REL_FAILED;
    if (dist__reply_int(r, 0, &res) != 0 || dist__reply_int(r, 1, waiters) != 0) {
        freeReplyObject(r);
        dist__err(EIO, "unexpected reply to mutex_unlock");
        return REL_FAILED;
    }
    freeReplyObject(r);
    return res;
}

int dist_mutex_unlock(dist_mutex_t *m)
{
    struct dist__mobj *o;
    struct dist__lock *lk;
    struct dist__hold *h;
    long long before, res, waiters;
    uint64_t mytoken = 0, t0;
    int rc, held, doubt;

    if ((rc = get_obj(m, &o)) != 0)
        return rc;
    lk = o->lk;
    if ((rc = prepare(lk, &before, &held)) != 0)
        return rc;
    pthread_mutex_lock(&lk->mu);
    if ((h = hold_find(lk)) != NULL)
        mytoken = h->token;
    pthread_mutex_unlock(&lk->mu);
    if (held == -1)
        return dist__err(EPERM, "mutex '%s' was lost (its lease ran out or it "
                         "was forced) before this unlock", lk->names->name.p);
    if (held == 0)
        return dist__err(EPERM, "mutex '%s' is not held by this thread",
                         lk->names->name.p);

    t0 = dist__now_ms();
    res = release(o, before, mytoken, &doubt, &waiters);

    pthread_mutex_lock(&lk->mu);
    if (o->fair)
        waiters = 0;   /* the queue already decides who is next */
    if (res == 0 && waiters > 0) {
        /* PUBLISH counted our own subscriber connection too, if it listens:
         * that one matters only while another local thread waits. */
        int local;
        if (dist__sub_listening(&lk->names->chan, &local) && local == 0)
            waiters--;
    }
    if (res == 0 && waiters > 0) {
        /* Others wait and need a message, a wake-up and a round trip to
         * get in; this thread needs only its next call, and would take the
         * lock back nearly every time.  After a short run of its own it
         * gives them a head start: turns go round in bursts, which is fair
         * over time without paying a cross-process hand-off every time. */
        uint64_t me = dist__thread_no();
        lk->streak = lk->streak_thread == me ? lk->streak + 1 : 1;
        lk->streak_thread = me;
        if (lk->streak >= YIELD_AFTER) {
            uint64_t rtt = dist__now_ms() - t0;
            lk->yield_thread = me;
            /* a few round trips; an unlock slowed by a fault (a pause,
             * a reconnect) says nothing about the round trip */
            if (rtt > YIELD_MAX_RTT_MS)
                rtt = YIELD_MAX_RTT_MS;
            lk->yield_until = dist__now_ms() + YIELD_MIN_MS + 8 * rtt;
            lk->streak = 0;
        }
    }
    h = hold_find(lk);
    if (res >= 0 || doubt) {
        /* Given up locally either way; a doubtful release is finished by the
         * renewal thread when Redis answers again. */
        if (h) {
            h->count = (unsigned long)(before - 1);
            if (doubt)
                dist__renew_doubt(h);
            else if (h->count == 0)
                hold_drop(lk, h);
        }
        pthread_mutex_unlock(&lk->mu);
        if (doubt) {
            char why[256];
            snprintf(why, sizeof why, "%s", dist_last_error());
            return dist__err(EIO, "mutex '%s': the release got no answer "
                             "(%s); this thread holds nothing now, and the "
                             "release is finished when Redis answers, or the "
                             "lease ends it", lk->names->name.p, why);
        }
        return 0;
    }
    if (res == -1) {
        if (h)
            hold_drop(lk, h);
        pthread_mutex_unlock(&lk->mu);
        dist__call_lost_handler(lk->names->name.p);
        return dist__err(EPERM, "mutex '%s' was lost (its lease ran out or it "
                         "was forced) before this unlock", lk->names->name.p);
    }
    pthread_mutex_unlock(&lk->mu);
    return EIO;
}

int dist_mutex_token(dist_mutex_t *m, uint64_t *token)
{
    struct dist__mobj *o;
    struct dist__hold *h;
    int rc;

    if (!token)
        return dist__err(EINVAL, "token is NULL");
    if ((rc = get_obj(m, &o)) != 0)
        return rc;
    pthread_mutex_lock(&o->lk->mu);
    h = hold_find(o->lk);
    if (!h || h->count == 0 || atomic_load(&h->lost)) {
        pthread_mutex_unlock(&o->lk->mu);
        return dist__err(EPERM, "mutex '%s' is not held by this thread",
                         o->lk->names->name.p);
    }
    *token = h->token;
    pthread_mutex_unlock(&o->lk->mu);
    return 0;
}

/* ---- library ----------------------------------------------------------- */

void dist_shutdown(void)
{
    dist__pubsub_shutdown();
    dist__renew_shutdown();
    dist__conn_close_thread();
}

void dist__locks_fork(int phase)
{
    struct dist__lock *lk;

    if (phase == 0) {
        pthread_mutex_lock(&locks_mu);
        for (lk = locks; lk; lk = lk->next)
            pthread_mutex_lock(&lk->mu);
    } else if (phase == 1) {
        for (lk = locks; lk; lk = lk->next)
            pthread_mutex_unlock(&lk->mu);
        pthread_mutex_unlock(&locks_mu);
    } else {
        pthread_mutex_init(&locks_mu, NULL);
        for (lk = locks; lk; lk = lk->next)
            pthread_mutex_init(&lk->mu, NULL);
    }
}
