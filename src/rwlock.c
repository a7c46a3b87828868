/* rwlock.c: dist_rwlock, Redisson's RReadWriteLock with a downgrade that
 * wakes readers and an opt-in writer preference.  The lock's state lives in
 * Redis; the object keeps which local threads hold it, how often, and their
 * write tokens.
 *
 * Every acquire and release script is conditional on the owner's read and
 * write counts as the owner believes them.  After a lost reply the same
 * call is simply run again: the second run either does the work (the first
 * never ran) or refuses it and reports counts that show the first one ran,
 * so nothing is ever applied twice.  When Redis cannot be reached to find
 * out, the call returns EIO and the hold that Redis may count beyond the
 * owner's own is settled (a conditional release) at the thread's next call
 * on that lock; if none comes, the hold's lease ends it.  Unlike the mutex,
 * the renewal thread does not settle these by itself (see renew.c: its
 * settling is the mutex's script). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define RWLOCK_MAGIC 0x72776c6bu   /* "rwlk" */
/* Timeout keys of one owner the watchdog renews; holds beyond that many
 * (one thread reentering hundreds of times) keep their hash entry and their
 * readers-ZSET lease, only their Redisson-side keys are not extended. */
#define RENEW_TKEYS_MAX 400

/* One local thread's holds of one name. */
struct rwrec {
    struct rwrec *next;
    struct dist__hold *h;       /* owner, thread, fork generation, lost flag,
                                 * write token; the watchdog's entry */
    unsigned long rd, wr;       /* holds the owner believes it has */
    int owed;                   /* 'r'/'w': Redis may count one hold of that
                                 * kind more (a reply was lost) */
    int reg;                    /* registered with the renewal thread */
    uint64_t lease_end;         /* explicit lease: gone for sure by then */
    /* renewal keys: N, the readers ZSET, then timeout keys 1..nt */
    struct dist__buf *keys;
    unsigned nt, cap;
    char *tprefix;              /* "{N}:<owner>:rwlock_timeout:" */
    size_t tplen;
};

/* What Redis keys by name, shared by every object of that name. */
struct dist__rwstate {
    struct dist__rwstate *prev, *next;
    int refs;                       /* objects using it (rw_mu) */
    pthread_mutex_t mu;             /* guards recs */
    struct dist__names *names;
    struct dist__buf readers;       /* distlock_rwlock_readers:{N} */
    struct rwrec *recs;
};

struct dist__rwobj {
    unsigned magic;
    int kind;
    unsigned long lease_ms;         /* 0: watchdog */
    struct dist__rwstate *st;
};

static pthread_mutex_t rw_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dist__rwstate *states;

/* ---- attributes -------------------------------------------------------- */

int dist_rwlockattr_init(dist_rwlockattr_t *a)
{
    if (!a)
        return EINVAL;
    memset(a, 0, sizeof *a);
    a->__kind = DIST_RWLOCK_PREFER_READER;
    return 0;
}

int dist_rwlockattr_destroy(dist_rwlockattr_t *a)
{
    return a ? 0 : EINVAL;
}

int dist_rwlockattr_setlease(dist_rwlockattr_t *a, unsigned long lease_ms)
{
    if (!a)
        return EINVAL;
    if (lease_ms > 24UL * 3600 * 1000)
        return dist__err(EINVAL, "lease of %lu ms is longer than a day", lease_ms);
    a->__lease_ms = lease_ms;
    return 0;
}

int dist_rwlockattr_setkind(dist_rwlockattr_t *a, int kind)
{
    if (!a)
        return EINVAL;
    if (kind != DIST_RWLOCK_PREFER_READER && kind != DIST_RWLOCK_PREFER_WRITER)
        return dist__err(EINVAL, "rwlock kind %d: use DIST_RWLOCK_PREFER_READER "
                         "or DIST_RWLOCK_PREFER_WRITER", kind);
    a->__kind = kind;
    return 0;
}

/* ---- hold records ------------------------------------------------------ */

static void rec_free(struct rwrec *c)
{
    unsigned i;

    if (c->keys)
        for (i = 0; i < c->nt; i++)
            free((char *)c->keys[2 + i].p);
    free(c->keys);
    free(c->tprefix);
    free(c);
}

/* Takes c out of the watchdog's hands; c keeps a hold object of its own
 * (a new one when the renewal thread still had the old one in flight). */
static int rec_unregister(struct rwrec *c)
{
    struct dist__hold *nh;

    if (!c->reg)
        return 0;
    dist__renew_set_keys(c->h, NULL, 0);   /* waits for a renewal under way */
    c->reg = 0;
    if (dist__renew_remove(c->h))
        return 0;
    /* the renewal thread frees the old one */
    nh = dist__hold_new(c->h->names, c->h->lease_ms);
    if (!nh)
        return ENOMEM;
    nh->token = c->h->token;
    c->h = nh;
    return 0;
}

/* Unlinks and frees a record.  st->mu held. */
static void rec_drop(struct dist__rwstate *st, struct rwrec *c)
{
    struct rwrec **pp;

    for (pp = &st->recs; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    if (c->h->gen != atomic_load(&dist__fork_gen)) {
        /* the parent's: never in this process's registry */
        dist__hold_free(c->h);
    } else {
        dist__renew_set_keys(c->h, NULL, 0);
        if (dist__renew_remove(c->h))
            dist__hold_free(c->h);
    }
    rec_free(c);
}

/* The calling thread's record, or NULL.  Drops records a parent left
 * behind across a fork.  st->mu held. */
static struct rwrec *rec_find(struct dist__rwstate *st)
{
    unsigned long gen = atomic_load(&dist__fork_gen);
    uint64_t tno = dist__thread_no();
    struct rwrec *c, *next;

    for (c = st->recs; c; c = next) {
        next = c->next;
        if (c->h->gen != gen)
            rec_drop(st, c);
        else if (c->h->thread_no == tno)
            return c;
    }
    return NULL;
}

/* Finds or makes the calling thread's record.  st->mu held. */
static struct rwrec *rec_get(struct dist__rwstate *st, unsigned long lease_ms)
{
    struct rwrec *c = rec_find(st);
    char *suffix;
    size_t olen;
    const char *owner;

    if (c)
        return c;
    if (!(c = calloc(1, sizeof *c)))
        return NULL;
    if (!(c->h = dist__hold_new(st->names, lease_ms))) {
        free(c);
        return NULL;
    }
    owner = dist__owner(&olen);
    suffix = malloc(olen + 32);
    if (suffix) {
        snprintf(suffix, olen + 32, ":%s:rwlock_timeout:", owner);
        c->tprefix = dist__names_derive(st->names, "", suffix, &c->tplen);
        free(suffix);
    }
    c->cap = 8;
    c->keys = malloc(c->cap * sizeof *c->keys);
    if (!c->tprefix || !c->keys) {
        dist__hold_free(c->h);
        rec_free(c);
        return NULL;
    }
    c->keys[0] = st->names->name;
    c->keys[1] = st->readers;
    c->h->kind = DIST__K_RWLOCK;
    c->h->keys = c->keys;
    c->h->nkeys = 2;
    c->next = st->recs;
    st->recs = c;
    return c;
}

static int renew_nkeys(const struct rwrec *c)
{
    return 2 + (int)(c->nt < RENEW_TKEYS_MAX ? c->nt : RENEW_TKEYS_MAX);
}

/* The timeout key of the owner's k-th read hold (k >= 1), made on first
 * use and kept with the record.  st->mu held.  0 or ENOMEM. */
static int rec_tkey(struct rwrec *c, unsigned long k, struct dist__buf *out)
{
    while (c->nt < k) {
        char *p;
        size_t len;

        if (2 + c->nt == c->cap) {
            struct dist__buf *nk = malloc(2 * c->cap * sizeof *nk), *old = c->keys;
            if (!nk)
                return ENOMEM;
            memcpy(nk, c->keys, c->cap * sizeof *nk);
            c->cap *= 2;
            c->keys = nk;
            /* the renewal thread may be reading the old array: switch it
             * over (which waits for a renewal under way) before freeing */
            dist__renew_set_keys(c->h, c->keys, renew_nkeys(c));
            free(old);
        }
        if (!(p = malloc(c->tplen + 24)))
            return ENOMEM;
        len = (size_t)snprintf(p, c->tplen + 24, "%s%u", c->tprefix, c->nt + 1);
        c->keys[2 + c->nt] = (struct dist__buf){ p, len };
        c->nt++;
        if (c->nt <= RENEW_TKEYS_MAX)
            dist__renew_set_keys(c->h, c->keys, renew_nkeys(c));
    }
    *out = c->keys[1 + k];
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

/* Finds or makes the shared state of a name.  rw_mu held. */
static struct dist__rwstate *state_get(const char *name, size_t len)
{
    struct dist__rwstate *st;
    char *rd;

    for (st = states; st; st = st->next) {
        if (st->names->name.len == len &&
            memcmp(st->names->name.p, name, len) == 0) {
            st->refs++;
            return st;
        }
    }
    st = calloc(1, sizeof *st);
    if (!st || !(st->names = dist__names_new(name, len))) {
        free(st);
        return NULL;
    }
    rd = dist__names_derive(st->names, "distlock_rwlock_readers:", "",
                            &st->readers.len);
    if (!rd) {
        dist__names_unref(st->names);
        free(st);
        return NULL;
    }
    st->readers.p = rd;
    pthread_mutex_init(&st->mu, NULL);
    st->refs = 1;
    st->next = states;
    if (states)
        states->prev = st;
    states = st;
    return st;
}

static void state_put(struct dist__rwstate *st)
{
    pthread_mutex_lock(&rw_mu);
    if (--st->refs > 0) {
        pthread_mutex_unlock(&rw_mu);
        return;
    }
    if (st->prev)
        st->prev->next = st->next;
    else
        states = st->next;
    if (st->next)
        st->next->prev = st->prev;
    pthread_mutex_unlock(&rw_mu);
    pthread_mutex_lock(&st->mu);
    while (st->recs)
        rec_drop(st, st->recs);
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_destroy(&st->mu);
    free((char *)st->readers.p);
    dist__names_unref(st->names);
    free(st);
}

static int obj_new(const char *name, const dist_rwlockattr_t *attr,
                   struct dist__rwobj **out)
{
    struct dist__rwobj *o;
    size_t len = 0;
    int rc;

    if ((rc = check_name(name, &len)) != 0)
        return rc;
    if (attr && attr->__kind != DIST_RWLOCK_PREFER_READER &&
        attr->__kind != DIST_RWLOCK_PREFER_WRITER)
        return dist__err(EINVAL, "rwlock attribute has an unknown kind %d",
                         attr->__kind);
    dist__lib_init();
    if (!(o = calloc(1, sizeof *o)))
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_lock(&rw_mu);
    o->st = state_get(name, len);
    pthread_mutex_unlock(&rw_mu);
    if (!o->st) {
        free(o);
        return dist__err(ENOMEM, "out of memory");
    }
    o->magic = RWLOCK_MAGIC;
    o->kind = attr ? attr->__kind : DIST_RWLOCK_PREFER_READER;
    o->lease_ms = attr ? attr->__lease_ms : 0;
    *out = o;
    return 0;
}

static void obj_free(struct dist__rwobj *o)
{
    o->magic = 0;
    state_put(o->st);
    free(o);
}

/* The object, created at first use for DIST_RWLOCK_INITIALIZER. */
static int get_obj(dist_rwlock_t *rw, struct dist__rwobj **out)
{
    struct dist__rwobj *o, *expected = NULL;
    int rc;

    if (!rw)
        return dist__err(EINVAL, "rwlock is NULL");
    o = __atomic_load_n((struct dist__rwobj **)&rw->__impl, __ATOMIC_ACQUIRE);
    if (o) {
        if (o->magic != RWLOCK_MAGIC)
            return dist__err(EINVAL, "rwlock is not initialised (or destroyed)");
        *out = o;
        return 0;
    }
    if (!rw->__name)
        return dist__err(EINVAL, "rwlock has no name: use dist_rwlock_init or "
                         "DIST_RWLOCK_INITIALIZER");
    if ((rc = obj_new(rw->__name, NULL, &o)) != 0)
        return rc;
    if (!__atomic_compare_exchange_n((struct dist__rwobj **)&rw->__impl,
                                     &expected, o, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        obj_free(o);        /* another thread won the race */
        o = expected;
    }
    *out = o;
    return 0;
}

int dist_rwlock_init(dist_rwlock_t *rw, const char *name,
                     const dist_rwlockattr_t *attr)
{
    struct dist__rwobj *o;
    int rc;

    if (!rw)
        return dist__err(EINVAL, "rwlock is NULL");
    if ((rc = obj_new(name, attr, &o)) != 0)
        return rc;
    rw->__name = NULL;
    rw->__reserved[0] = rw->__reserved[1] = 0;
    __atomic_store_n((struct dist__rwobj **)&rw->__impl, o, __ATOMIC_RELEASE);
    return 0;
}

int dist_rwlock_destroy(dist_rwlock_t *rw)
{
    struct dist__rwobj *o;
    struct dist__rwstate *st;
    struct rwrec *c;

    if (!rw)
        return dist__err(EINVAL, "rwlock is NULL");
    o = __atomic_load_n((struct dist__rwobj **)&rw->__impl, __ATOMIC_ACQUIRE);
    if (!o)
        return 0;
    if (o->magic != RWLOCK_MAGIC)
        return dist__err(EINVAL, "rwlock is not initialised (or destroyed)");
    st = o->st;
    pthread_mutex_lock(&st->mu);
    rec_find(st);   /* drops a parent's records */
    for (c = st->recs; c; c = c->next) {
        /* a hold whose explicit lease has surely ended is not in the way */
        int expired = c->lease_end && dist__now_ms() > c->lease_end;
        if (c->rd + c->wr > 0 && !atomic_load(&c->h->lost) && !expired) {
            pthread_mutex_unlock(&st->mu);
            return dist__err(EBUSY, "rwlock '%s' is still held by thread %" PRIu64,
                             st->names->name.p, c->h->thread_no);
        }
    }
    pthread_mutex_unlock(&st->mu);
    __atomic_store_n((struct dist__rwobj **)&rw->__impl, NULL, __ATOMIC_RELEASE);
    obj_free(o);
    return 0;
}

/* ---- talking to Redis -------------------------------------------------- */

static unsigned long lease_of(const struct dist__rwobj *o)
{
    return o->lease_ms ? o->lease_ms : dist__watchdog_ms();
}

#define UNKNOWN (-100)   /* a call was sent and no answer came back */

/* Runs one of the conditional scripts.  After a lost reply it runs it again
 * on a new connection (at most twice, each bounded by the timeouts): a
 * second run never repeats the first one's work, and *again tells the
 * caller to read the answer in that light.  Returns 0 with *r, EIO or
 * ENOMEM (nothing ran), or UNKNOWN. */
static int run(int script, int nkeys, const struct dist__buf *kv, int nkv,
               redisReply **r, int *again)
{
    int rc, tries;

    *again = 0;
    rc = dist__eval_here(script, nkeys, kv, nkv, r);
    for (tries = 0; tries < 2 && (rc == DIST__ECONN ||
                                  (*again && rc == DIST__ENOCONN)); tries++) {
        *again = 1;
        rc = dist__eval_here(script, nkeys, kv, nkv, r);
    }
    if (rc == 0)
        return 0;
    if (*again)
        return UNKNOWN;
    return rc == ENOMEM ? ENOMEM : EIO;
}

/* Answer of an acquire script. */
struct attempt {
    int taken;
    int deadlock;           /* the owner reads only and asked to write */
    long long count;        /* the owner's holds of that kind afterwards */
    uint64_t token;
    long long wait;         /* not taken: how long to wait at most (-1: own lease) */
    long long rr, rw;       /* counts in Redis when they differ (mismatch) */
    int mismatch;
};

enum how { HOW_TRY, HOW_WAIT, HOW_PREFER };

/* One acquire script call with the owner's expected counts.  0 with *a
 * filled; EIO/ENOMEM; UNKNOWN. */
static int call_acquire(struct dist__rwobj *o, struct rwrec *c, int write,
                        enum how how, unsigned long rd, unsigned long wr,
                        struct attempt *a)
{
    struct dist__rwstate *st = o->st;
    char lease[24], erd[24], ewr[24], window[24];
    const char *pub = dist__publish_cmd();
    static const char *const hows[] = { "try", "wait", "prefer" };
    size_t olen;
    const char *owner = dist__owner(&olen);
    struct dist__buf kv[12], tk;
    redisReply *r;
    long long v0 = 0, v1 = 0, v2 = 0, v3 = 0;
    int rc, again, n = 0;

    memset(a, 0, sizeof *a);
    snprintf(lease, sizeof lease, "%lu", lease_of(o));
    snprintf(erd, sizeof erd, "%lu", rd);
    snprintf(ewr, sizeof ewr, "%lu", wr);
    kv[n++] = st->names->name;
    kv[n++] = st->readers;
    kv[n++] = st->names->writers;
    kv[n++] = st->names->rwchan;
    if (write) {
        kv[n++] = st->names->token;
    } else {
        pthread_mutex_lock(&st->mu);
        rc = rec_tkey(c, rd + 1, &tk);
        pthread_mutex_unlock(&st->mu);
        if (rc)
            return dist__err(ENOMEM, "out of memory");
        kv[n++] = tk;
    }
    kv[n++] = (struct dist__buf){ lease, strlen(lease) };
    kv[n++] = (struct dist__buf){ owner, olen };
    kv[n++] = (struct dist__buf){ erd, strlen(erd) };
    kv[n++] = (struct dist__buf){ ewr, strlen(ewr) };
    if (write) {
        snprintf(window, sizeof window, "%lu", dist__waiter_ms());
        kv[n++] = (struct dist__buf){ hows[how], strlen(hows[how]) };
        kv[n++] = (struct dist__buf){ window, strlen(window) };
    }
    kv[n++] = (struct dist__buf){ pub, strlen(pub) };

    rc = run(write ? DIST__S_RWLOCK_WRLOCK : DIST__S_RWLOCK_RDLOCK, 5, kv, n,
             &r, &again);
    if (rc != 0)
        return rc;
    if (dist__reply_int(r, 0, &v0) != 0 ||
        (v0 != -2 && dist__reply_int(r, 1, &v1) != 0)) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to %s",
                         write ? "rwlock_wrlock" : "rwlock_rdlock");
    }
    dist__reply_int(r, 2, &v2);
    dist__reply_int(r, 3, &v3);
    freeReplyObject(r);
    if (v0 == 1) {
        a->taken = 1;
        a->count = v1;
        a->token = (uint64_t)v2;
    } else if (v0 == 0) {
        a->wait = v1;
    } else if (v0 == -2) {
        a->deadlock = 1;
    } else if (again && !write && v1 == (long long)rd + 1 && v2 == (long long)wr) {
        a->taken = 1;           /* the first run took it */
        a->count = v1;
    } else if (again && write && v2 == (long long)wr + 1 && v1 == (long long)rd) {
        a->taken = 1;
        a->count = v2;
        a->token = (uint64_t)v3;
    } else {
        a->mismatch = 1;
        a->rr = v1;
        a->rw = v2;
    }
    return 0;
}

/* Brings the record in line with Redis after a mismatch: holds Redis no
 * longer counts were lost.  *lost when some were.  EIO when Redis counts
 * more than the owner knows of (nothing explains that). */
static int reconcile(struct dist__rwstate *st, struct rwrec *c,
                     long long rr, long long rw, int *lost)
{
    *lost = 0;
    pthread_mutex_lock(&st->mu);
    if (rr > (long long)c->rd || rw > (long long)c->wr || rr < 0 || rw < 0) {
        unsigned long rd = c->rd, wr = c->wr;
        pthread_mutex_unlock(&st->mu);
        return dist__err(EIO, "rwlock '%s': Redis counts %lld read and %lld "
                         "write holds for this thread, which holds %lu and %lu",
                         st->names->name.p, rr, rw, rd, wr);
    }
    if ((unsigned long)rr < c->rd || (unsigned long)rw < c->wr)
        *lost = 1;
    if ((unsigned long)rw < c->wr)
        c->h->token = 0;
    c->rd = (unsigned long)rr;
    c->wr = (unsigned long)rw;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Settles a hold Redis may count beyond the owner's own (see the top of the
 * file) with a conditional release.  st->mu not held.  0 or EIO. */
static int settle(struct dist__rwobj *o, struct rwrec *c)
{
    struct dist__rwstate *st = o->st;
    const char *pub = dist__publish_cmd();
    char erd[24], ewr[24];
    struct dist__buf kv[9], tk;
    redisReply *r;
    long long v0 = 0, v1 = 0, v2 = 0;
    unsigned long rd, wr;
    int rc, again, n = 0, kind, lost = 0;

    DIST__UNUSED(again);
    pthread_mutex_lock(&st->mu);
    kind = c->owed;
    rd = c->rd + (kind == 'r');
    wr = c->wr + (kind == 'w');
    rc = kind == 'r' ? rec_tkey(c, rd, &tk) : 0;
    pthread_mutex_unlock(&st->mu);
    if (rc)
        return dist__err(ENOMEM, "out of memory");
    snprintf(erd, sizeof erd, "%lu", rd);
    snprintf(ewr, sizeof ewr, "%lu", wr);
    kv[n++] = st->names->name;
    kv[n++] = st->readers;
    kv[n++] = st->names->writers;
    kv[n++] = st->names->rwchan;
    if (kind == 'r')
        kv[n++] = tk;
    kv[n++] = (struct dist__buf){ c->h->owner, c->h->owner_len };
    kv[n++] = (struct dist__buf){ erd, strlen(erd) };
    kv[n++] = (struct dist__buf){ ewr, strlen(ewr) };
    kv[n++] = (struct dist__buf){ pub, strlen(pub) };
    rc = run(kind == 'r' ? DIST__S_RWLOCK_RDUNLOCK : DIST__S_RWLOCK_WRUNLOCK,
             kind == 'r' ? 5 : 4, kv, n, &r, &again);
    if (rc != 0)
        return dist__err(EIO, "rwlock '%s': an earlier call lost its reply and "
                         "Redis has not answered since", st->names->name.p);
    if (dist__reply_int(r, 0, &v0) != 0) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to rwlock release");
    }
    dist__reply_int(r, 1, &v1);
    dist__reply_int(r, 2, &v2);
    freeReplyObject(r);
    pthread_mutex_lock(&st->mu);
    c->owed = 0;
    pthread_mutex_unlock(&st->mu);
    /* >= 0: the owed hold was given back; -1 with the owner's own counts:
     * nothing was owed (or the first run gave it back); any other counts:
     * Redis lost holds of ours meanwhile */
    if (v0 == -1 && !(v1 == (long long)c->rd && v2 == (long long)c->wr)) {
        if (reconcile(st, c, v1, v2, &lost) != 0)
            return EIO;
        if (lost)
            dist__call_lost_handler(st->names->name.p);
    }
    return 0;
}

/* Before any call: the calling thread's standing.  Settles an owed hold
 * first, drops a record the watchdog found lost.  *rd and *wr: the holds to
 * expect in Redis; *was_lost when the record was found lost. */
static int prepare(struct dist__rwobj *o, unsigned long *rd, unsigned long *wr,
                   int *was_lost)
{
    struct dist__rwstate *st = o->st;
    struct rwrec *c;
    int rc;

    *rd = *wr = 0;
    if (was_lost)
        *was_lost = 0;
    pthread_mutex_lock(&st->mu);
    c = rec_find(st);
    if (c && atomic_load(&c->h->lost)) {
        if (was_lost)
            *was_lost = c->rd + c->wr > 0;
        rec_drop(st, c);
        c = NULL;
    }
    if (c && c->owed) {
        pthread_mutex_unlock(&st->mu);
        if ((rc = settle(o, c)) != 0)
            return rc;
        pthread_mutex_lock(&st->mu);
    }
    if (c) {
        *rd = c->rd;
        *wr = c->wr;
        if (c->rd + c->wr == 0 && !c->owed)
            rec_drop(st, c);
    }
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Records a hold taken. */
static int record(struct dist__rwobj *o, int write, const struct attempt *a)
{
    struct dist__rwstate *st = o->st;
    struct rwrec *c;

    pthread_mutex_lock(&st->mu);
    c = rec_get(st, o->lease_ms);
    if (!c) {
        pthread_mutex_unlock(&st->mu);
        return ENOMEM;
    }
    if (write) {
        if (c->wr == 0)
            c->h->token = a->token;
        c->wr = (unsigned long)a->count;
    } else {
        c->rd = (unsigned long)a->count;
    }
    if (o->lease_ms) {
        uint64_t end = dist__now_ms() + o->lease_ms;
        if (end > c->lease_end)
            c->lease_end = end;
    }
    atomic_store(&c->h->lost, 0);
    if (!o->lease_ms && !c->reg) {
        c->h->lease_ms = 0;
        c->h->kind = DIST__K_RWLOCK;
        c->h->keys = c->keys;
        c->h->nkeys = renew_nkeys(c);
        c->reg = 1;
        dist__renew_add(c->h);
    }
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Drops the calling thread's record when an attempt left it empty. */
static void rec_tidy(struct dist__rwstate *st)
{
    struct rwrec *c;

    pthread_mutex_lock(&st->mu);
    c = rec_find(st);
    if (c && c->rd + c->wr == 0 && !c->owed)
        rec_drop(st, c);
    pthread_mutex_unlock(&st->mu);
}

/* Notes that Redis may count one hold of kind more than the record. */
static void note_owed(struct dist__rwstate *st, struct dist__rwobj *o, int kind)
{
    struct rwrec *c;

    pthread_mutex_lock(&st->mu);
    c = rec_get(st, o->lease_ms);
    if (c) {
        c->owed = kind;
        /* no renewal for a hold nobody knows it has: its lease ends it */
        if (c->rd + c->wr == 0)
            rec_unregister(c);
    }
    pthread_mutex_unlock(&st->mu);
}

/* One try, with the record's expectations; a mismatch that shows lost holds
 * is reconciled and tried again.  0 with *a; EDEADLK when the owner holds
 * read holds only and asked to write; EIO/ENOMEM; *unknown when the outcome
 * is unknown. */
static int try_acquire(struct dist__rwobj *o, int write, enum how how,
                       struct attempt *a, int *unknown)
{
    struct dist__rwstate *st = o->st;
    struct rwrec *c;
    unsigned long rd, wr;
    int rc, tries, lost;

    *unknown = 0;
    for (tries = 0; tries < 3; tries++) {
        pthread_mutex_lock(&st->mu);
        c = rec_get(st, o->lease_ms);
        rd = c ? c->rd : 0;
        wr = c ? c->wr : 0;
        pthread_mutex_unlock(&st->mu);
        if (!c)
            return dist__err(ENOMEM, "out of memory");
        if (write && rd > 0 && wr == 0)
            return EDEADLK;
        rc = call_acquire(o, c, write, how, rd, wr, a);
        if (rc == UNKNOWN) {
            *unknown = 1;
            return EIO;
        }
        if (rc != 0)
            return rc;
        if (a->deadlock)
            return EDEADLK;
        if (!a->mismatch)
            return 0;
        if (reconcile(st, c, a->rr, a->rw, &lost) != 0)
            return EIO;
        /* a record left empty goes (with its renewal entry, which would
         * report it lost once more): the next try starts a fresh one */
        rec_tidy(st);
        if (lost)
            dist__call_lost_handler(st->names->name.p);
    }
    return dist__err(EIO, "rwlock '%s': this thread's holds keep changing in "
                     "Redis", st->names->name.p);
}

/* try_acquire for a call that may wait: a Redis that cannot be reached for
 * a moment (a restart, a failover) is tried again until the patience runs
 * out (dist__patience_ms), or the caller's deadline.  A try whose outcome
 * is unknown is noted as owed and settled (a hold it took given back)
 * before the next try, so a failover in the middle of a try does not end
 * the wait. */
static int try_patiently(struct dist__rwobj *o, int write, enum how how,
                         struct attempt *a, int *unknown, uint64_t deadline)
{
    unsigned long rd, wr;
    uint64_t give_up = 0, now;
    int rc;

    for (;;) {
        rc = try_acquire(o, write, how, a, unknown);
        if (rc != EIO)
            return rc;
        now = dist__now_ms();
        if (!give_up)
            give_up = now + dist__patience_ms();
        if (deadline && deadline < give_up)
            give_up = deadline;
        if (now >= give_up)
            return rc;
        if (*unknown) {
            note_owed(o->st, o, write ? 'w' : 'r');
            *unknown = 0;
            while (prepare(o, &rd, &wr, NULL) != 0) {
                now = dist__now_ms();
                if (now >= give_up)
                    return EIO;     /* still owed: its next call settles it */
                dist__sleep_ms(give_up - now < 100 ? give_up - now : 100);
            }
            continue;
        }
        dist__sleep_ms(give_up - now < 50 ? give_up - now : 50);
    }
}

/* How long a waiter may sleep before trying again: what the script said
 * (the holder's remaining lease, or a waiting writer's deadline); -1 (a
 * lock without expiry, which no well-behaved client leaves) falls back to
 * a lease of our own. */
static uint64_t sleep_bound(const struct dist__rwobj *o, long long wait)
{
    if (wait >= 0)
        return (uint64_t)wait + 1;
    return lease_of(o);
}

/* A waiting writer that gives up stops keeping readers out at once (best
 * effort: if Redis cannot be reached, its deadline ends it within a window). */
static void writer_cancel(struct dist__rwstate *st)
{
    size_t olen;
    const char *owner = dist__owner(&olen);
    const char *pub = dist__publish_cmd();
    struct dist__buf kv[5] = {
        st->names->name, st->names->writers, st->names->rwchan,
        { owner, olen }, { pub, strlen(pub) },
    };
    redisReply *r;

    if (dist__eval_here(DIST__S_RWLOCK_CANCEL, 3, kv, 5, &r) == 0)
        freeReplyObject(r);
}

static int acquire(dist_rwlock_t *rw, int write, int try_only,
                   const struct timespec *abstime)
{
    const char *what = write ? "write" : "read";
    struct dist__rwobj *o;
    struct dist__rwstate *st;
    struct dist__chan *ch;
    struct dist__hold *w = NULL;
    struct attempt a = { 0 };
    unsigned long rd, wr;
    uint64_t deadline = 0, until;
    enum how how;
    int rc, unknown = 0, queued = 0;

    if ((rc = get_obj(rw, &o)) != 0)
        return rc;
    st = o->st;
    if ((rc = prepare(o, &rd, &wr, NULL)) != 0)
        return rc;
    if (write && rd > 0 && wr == 0)
        goto deadlock;

    how = try_only ? HOW_TRY
                   : write && o->kind == DIST_RWLOCK_PREFER_WRITER ? HOW_PREFER
                                                                   : HOW_WAIT;
    rc = try_only ? try_acquire(o, write, how, &a, &unknown)
                  : try_patiently(o, write, how, &a, &unknown, 0);
    if (rc == EDEADLK)
        goto deadlock;
    queued = how == HOW_PREFER && rc == 0 && !a.taken;
    if (rc == 0 && !a.taken && try_only) {
        rec_tidy(st);
        return dist__err(EBUSY, "rwlock '%s' is held by another owner%s",
                         st->names->name.p, write ? "" : ", or a writer waits");
    }
    if (rc == 0 && !a.taken && abstime) {
        /* It would wait: only now is the deadline looked at (as musl). */
        if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L)
            rc = dist__err(EINVAL, "abstime.tv_nsec %ld is out of range",
                           abstime->tv_nsec);
        else if (dist__realtime_reached(abstime))
            rc = dist__err(ETIMEDOUT, "rwlock '%s': deadline passed",
                           st->names->name.p);
        else
            deadline = dist__ts_to_mono_ms(abstime);
    }
    if (rc == 0 && !a.taken) {
        if (how == HOW_PREFER)
            w = dist__waiter_start(st->names, &st->names->writers);
        if (!(ch = dist__sub_get(&st->names->rwchan))) {
            rc = dist__err(ENOMEM, "out of memory");
            goto out;
        }
        /* Subscribe before trying again, so that a release that comes
         * between that try and the sleep wakes the sleep. */
        until = dist__now_ms() + sleep_bound(o, a.wait);
        if (deadline && deadline < until)
            until = deadline;
        dist__sub_wait_ready(ch, until);
        for (;;) {
            /* Wake-ups are not taken from each other: a reader kept out by a
             * waiting writer, woken with it and refused, must not sleep
             * through the writer's turn (see dist__sub_wait_since). */
            unsigned long gen = dist__sub_gen(ch);
            rc = try_patiently(o, write, how, &a, &unknown, deadline);
            if (rc != 0 || a.taken)
                break;
            /* Sleep until a release message, the end of the holders'
             * lease (for a reader a waiting writer keeps out: the writer's
             * deadline), or our deadline, whichever comes first. */
            until = dist__now_ms() + sleep_bound(o, a.wait);
            if (deadline && deadline < until)
                until = deadline;
            dist__sub_wait_since(ch, gen, until);
            if (deadline && dist__now_ms() >= deadline) {
                if (dist__realtime_reached(abstime)) {
                    rc = dist__err(ETIMEDOUT, "rwlock '%s': timed out",
                                   st->names->name.p);
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
        writer_cancel(st);
    if (rc == EDEADLK)
        goto deadlock;
    if (rc != 0) {
        if (unknown) {
            note_owed(st, o, write ? 'w' : 'r');
            return dist__err(EIO, "rwlock '%s': the %s lock's reply was lost "
                             "and Redis has not answered since; a hold it may "
                             "have taken is given back at this thread's next "
                             "call on the lock, or its lease ends it",
                             st->names->name.p, what);
        }
        rec_tidy(st);
        return rc;
    }
    if (record(o, write, &a) != 0)
        return dist__err(ENOMEM, "out of memory");
    /* The owner's first hold is only as safe as its copy on a replica:
     * without one, give it back (see DIST_ENOREPLICA).  Later holds add to
     * a hold a replica already has. */
    if (rd + wr == 0 && (rc = dist__replica_sync(st->names->name.p)) != 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", dist_last_error());
        dist_rwlock_unlock(rw);
        if (rc == DIST_ENOREPLICA)
            return dist__err(rc, "%s", why);
        return dist__err(EIO, "%s; the hold is given back", why);
    }
    return 0;

deadlock:
    rec_tidy(st);
    if (try_only)
        return dist__err(EBUSY, "rwlock '%s': this thread holds read locks "
                         "only, and a read lock cannot be upgraded",
                         st->names->name.p);
    return dist__err(EDEADLK, "rwlock '%s': this thread holds read locks only; "
                     "waiting for the write lock would wait forever (a read "
                     "lock cannot be upgraded)", st->names->name.p);
}

int dist_rwlock_rdlock(dist_rwlock_t *rw)
{
    return acquire(rw, 0, 0, NULL);
}

int dist_rwlock_tryrdlock(dist_rwlock_t *rw)
{
    return acquire(rw, 0, 1, NULL);
}

int dist_rwlock_timedrdlock(dist_rwlock_t *rw, const struct timespec *abstime)
{
    if (!abstime)
        return dist__err(EINVAL, "abstime is NULL");
    return acquire(rw, 0, 0, abstime);
}

int dist_rwlock_wrlock(dist_rwlock_t *rw)
{
    return acquire(rw, 1, 0, NULL);
}

int dist_rwlock_trywrlock(dist_rwlock_t *rw)
{
    return acquire(rw, 1, 1, NULL);
}

int dist_rwlock_timedwrlock(dist_rwlock_t *rw, const struct timespec *abstime)
{
    if (!abstime)
        return dist__err(EINVAL, "abstime is NULL");
    return acquire(rw, 1, 0, abstime);
}

/* Gives back one hold: a write hold when the thread has one, else a read
 * hold.  Returns 0, EPERM (lost), EIO, or UNKNOWN. */
static int release(struct dist__rwobj *o, struct rwrec *c, int write,
                   unsigned long rd, unsigned long wr)
{
    struct dist__rwstate *st = o->st;
    const char *pub = dist__publish_cmd();
    char erd[24], ewr[24];
    struct dist__buf kv[9], tk;
    redisReply *r;
    long long v0 = 0, v1 = 0, v2 = 0;
    int rc, again, n = 0, lost = 0;

    if (!write) {
        pthread_mutex_lock(&st->mu);
        rc = rec_tkey(c, rd, &tk);
        pthread_mutex_unlock(&st->mu);
        if (rc)
            return dist__err(ENOMEM, "out of memory");
    }
    snprintf(erd, sizeof erd, "%lu", rd);
    snprintf(ewr, sizeof ewr, "%lu", wr);
    kv[n++] = st->names->name;
    kv[n++] = st->readers;
    kv[n++] = st->names->writers;
    kv[n++] = st->names->rwchan;
    if (!write)
        kv[n++] = tk;
    kv[n++] = (struct dist__buf){ c->h->owner, c->h->owner_len };
    kv[n++] = (struct dist__buf){ erd, strlen(erd) };
    kv[n++] = (struct dist__buf){ ewr, strlen(ewr) };
    kv[n++] = (struct dist__buf){ pub, strlen(pub) };
    rc = run(write ? DIST__S_RWLOCK_WRUNLOCK : DIST__S_RWLOCK_RDUNLOCK,
             write ? 4 : 5, kv, n, &r, &again);
    /* Not even sent: the owner lets go all the same, as for an unknown
     * outcome; a hold kept after a failed unlock would be renewed for ever. */
    if (rc == EIO)
        rc = UNKNOWN;
    if (rc != 0)
        return rc;
    if (dist__reply_int(r, 0, &v0) != 0 || dist__reply_int(r, 1, &v1) != 0) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to %s",
                         write ? "rwlock_wrunlock" : "rwlock_rdunlock");
    }
    dist__reply_int(r, 2, &v2);
    freeReplyObject(r);

    if (v0 == -1 && again &&
        ((write && v2 == (long long)wr - 1 && v1 == (long long)rd) ||
         (!write && v1 == (long long)rd - 1 && v2 == (long long)wr)))
        v0 = write ? v2 : v1;        /* the first run did it */
    if (v0 >= 0) {
        pthread_mutex_lock(&st->mu);
        if (write)
            c->wr = (unsigned long)v0;
        else
            c->rd = (unsigned long)v0;
        if (write && c->wr == 0)
            c->h->token = 0;
        pthread_mutex_unlock(&st->mu);
        return 0;
    }
    if (reconcile(st, c, v1, v2, &lost) != 0)
        return EIO;
    if (lost || (write ? c->wr : c->rd) == 0) {
        dist__call_lost_handler(st->names->name.p);
        return dist__err(EPERM, "rwlock '%s' was lost (its lease ran out or it "
                         "was forced) before this unlock", st->names->name.p);
    }
    return dist__err(EIO, "rwlock '%s': unexpected counts in Redis",
                     st->names->name.p);
}

int dist_rwlock_unlock(dist_rwlock_t *rw)
{
    struct dist__rwobj *o;
    struct dist__rwstate *st;
    struct rwrec *c;
    unsigned long rd, wr;
    int rc, was_lost, write;

    if ((rc = get_obj(rw, &o)) != 0)
        return rc;
    st = o->st;
    if ((rc = prepare(o, &rd, &wr, &was_lost)) != 0)
        return rc;
    if (was_lost)
        return dist__err(EPERM, "rwlock '%s' was lost (its lease ran out or it "
                         "was forced) before this unlock", st->names->name.p);
    if (rd + wr == 0)
        return dist__err(EPERM, "rwlock '%s' is not held by this thread",
                         st->names->name.p);
    pthread_mutex_lock(&st->mu);
    c = rec_find(st);
    pthread_mutex_unlock(&st->mu);
    if (!c)
        return dist__err(EPERM, "rwlock '%s' is not held by this thread",
                         st->names->name.p);

    write = wr > 0;
    rc = release(o, c, write, rd, wr);
    pthread_mutex_lock(&st->mu);
    if (rc == UNKNOWN) {
        /* given up locally; Redis may still count it until settled */
        if (write)
            c->wr--;
        else
            c->rd--;
        c->owed = write ? 'w' : 'r';
        if (c->rd + c->wr == 0)
            rec_unregister(c);
        pthread_mutex_unlock(&st->mu);
        return dist__err(EIO, "rwlock '%s': the unlock's reply was lost and "
                         "Redis has not answered since; it is finished at this "
                         "thread's next call on the lock, or the lease ends it",
                         st->names->name.p);
    }
    if (c->rd + c->wr == 0 && !c->owed)
        rec_drop(st, c);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int dist_rwlock_token(dist_rwlock_t *rw, uint64_t *token)
{
    struct dist__rwobj *o;
    struct rwrec *c;
    int rc;

    if (!token)
        return dist__err(EINVAL, "token is NULL");
    if ((rc = get_obj(rw, &o)) != 0)
        return rc;
    pthread_mutex_lock(&o->st->mu);
    c = rec_find(o->st);
    if (!c || c->wr == 0 || atomic_load(&c->h->lost)) {
        pthread_mutex_unlock(&o->st->mu);
        return dist__err(EPERM, "rwlock '%s' is not write-locked by this thread",
                         o->st->names->name.p);
    }
    *token = c->h->token;
    pthread_mutex_unlock(&o->st->mu);
    return 0;
}

/* ---- fork -------------------------------------------------------------- */

void dist__rwlocks_fork(int phase)
{
    struct dist__rwstate *st;

    if (phase == 0) {
        pthread_mutex_lock(&rw_mu);
        for (st = states; st; st = st->next)
            pthread_mutex_lock(&st->mu);
    } else if (phase == 1) {
        for (st = states; st; st = st->next)
            pthread_mutex_unlock(&st->mu);
        pthread_mutex_unlock(&rw_mu);
    } else {
        pthread_mutex_init(&rw_mu, NULL);
        for (st = states; st; st = st->next)
            pthread_mutex_init(&st->mu, NULL);
    }
}
