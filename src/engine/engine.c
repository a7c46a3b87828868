/* engine.c: the objects of every kind of lock, the per-name state they
 * share, and each thread's record of its holds (see engine.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* Every name in use, per family, for sharing and for fork(): a hash table
 * of chains (a state's next: one link, not two, being 8 B less per lock),
 * doubled when it holds as many
 * names as buckets, so that finding or adding one costs the same with
 * 100,000 names as with 10 (a list made 100,000 dist_mutex_init take
 * 154 s). */
static pthread_mutex_t fam_mu[DIST__FAM_COUNT] = {
    PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER,
};
struct fam {
    struct dist__state **tab; /* cap chains; NULL until the first name */
    size_t cap, n;            /* cap a power of two */
};
static struct fam fams[DIST__FAM_COUNT];
#define FAM_MIN_CAP 64
DIST__FORK_HOOK(engine_hook, engine_fork, DIST__RANK_LOCKS)

int dist__check_name(const char *name, size_t *len)
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

unsigned long dist__lease_of(const struct dist__obj *o)
{
    return o->lease_ms ? o->lease_ms : dist__watchdog_ms();
}

/* ---- records ------------------------------------------------------------ */

/* Lets go of a record: its renewal entry leaves the registry (or is left to
 * the renewal thread when a call or a settle on it is under way). */
void dist__rec_drop(struct dist__state *st, struct dist__rec *r)
{
    struct dist__rec **pp;

    for (pp = &st->recs; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    if (r->h) {
        if (r->gen != dist__rec_gen()) {
            dist__hold_free(r->h); /* the parent's: not in our registry */
        } else {
            /* renewal keys kept in r's ext (a rwlock's timeout keys) are
             * freed below: the entry lets go of them first, after a
             * renewal under way that reads them (the torture run under
             * TSan: an entry left to the thread read them freed) */
            if (r->ext && r->h->keys)
                dist__renew_set_keys(r->h, NULL, 0);
            if (dist__renew_remove(r->h))
                dist__hold_free(r->h);
        }
    }
    if (r->pend)
        r->pend->r = NULL; /* the reply's handler acts alone now */
    if (r->ext)
        r->ext->free(r->ext);
    free(r);
}

/* The calling thread's record, or NULL.  Drops records the parent left
 * behind across a fork. */
struct dist__rec *dist__rec_find(struct dist__state *st)
{
    unsigned gen = dist__rec_gen();
    uint64_t tno = dist__thread_no();
    struct dist__rec *r, *next;

    for (r = st->recs; r; r = next) {
        next = r->next;
        if (r->gen != gen)
            dist__rec_drop(st, r);
        else if (r->thread_no == tno)
            return r;
    }
    return NULL;
}

struct dist__rec *dist__rec_get(struct dist__state *st)
{
    struct dist__rec *r = dist__rec_find(st);

    if (r)
        return r;
    if (!(r = calloc(1, sizeof *r)))
        return NULL;
    r->thread_no = dist__thread_no();
    r->gen = dist__rec_gen();
    r->next = st->recs;
    st->recs = r;
    return r;
}

/* Drops the calling thread's record when it holds nothing and owes
 * nothing. */
void dist__rec_tidy(struct dist__state *st)
{
    struct dist__rec *r = dist__rec_find(st);

    if (r && r->n[0] + r->n[1] == 0 && !r->unknown && !r->pend)
        dist__rec_drop(st, r);
}

/* ---- per-name state --------------------------------------------------------- */

/* FNV-1a over the name. */
static uint32_t name_hash(const char *name, size_t len)
{
    uint32_t h = 2166136261u;
    size_t i;

    for (i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

static void chain_push(struct dist__state **head, struct dist__state *st)
{
    st->next = *head;
    *head = st;
}

/* Doubles f's buckets (or makes the first ones).  Out of memory, the
 * table stays as it is: longer chains, still correct. */
static void fam_grow(struct fam *f)
{
    size_t cap = f->cap ? f->cap * 2 : FAM_MIN_CAP, i;
    struct dist__state **tab = calloc(cap, sizeof *tab), *st, *next;

    if (!tab)
        return;
    for (i = 0; i < f->cap; i++)
        for (st = f->tab[i]; st; st = next) {
            next = st->next;
            chain_push(&tab[st->hash & (cap - 1)], st);
        }
    free(f->tab);
    f->tab = tab;
    f->cap = cap;
}

/* Finds or makes the state of a name.  The family's registry mutex held. */
static struct dist__state *state_get(const struct dist__kind *k,
                                     const char *name, size_t len)
{
    struct fam *f = &fams[k->family];
    uint32_t hash = name_hash(name, len);
    struct dist__state *st;

    if (f->n >= f->cap)
        fam_grow(f);
    if (!f->tab)
        return NULL;
    for (st = f->tab[hash & (f->cap - 1)]; st; st = st->next) {
        if (st->hash == hash && st->names->name.len == len &&
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
    if (k->state_init && k->state_init(st) != 0) {
        dist__names_unref(st->names);
        free(st);
        return NULL;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->refs = 1;
    st->hash = hash;
    chain_push(&f->tab[hash & (f->cap - 1)], st);
    f->n++;
    return st;
}

/* Drops one object's reference; the last one frees the state and any
 * records left (lost holds, or settles the renewal thread still owes). */
static void state_put(const struct dist__kind *k, struct dist__state *st)
{
    pthread_mutex_t *mu = &fam_mu[k->family];
    struct fam *f = &fams[k->family];
    struct dist__state **pp;

    pthread_mutex_lock(mu);
    if (--st->refs > 0) {
        pthread_mutex_unlock(mu);
        return;
    }
    /* a chain is about one state long: the table has as many buckets as
     * names at least */
    for (pp = &f->tab[st->hash & (f->cap - 1)]; *pp != st; pp = &(*pp)->next)
        ;
    *pp = st->next;
    f->n--;
    pthread_mutex_unlock(mu);
    pthread_mutex_lock(&st->mu);
    while (st->recs)
        dist__rec_drop(st, st->recs);
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_destroy(&st->mu);
    if (st->local)
        st->local->ops->free(st->local);
    if (k->state_free)
        k->state_free(st);
    dist__names_unref(st->names);
    free(st);
}

void dist__state_ref(const struct dist__kind *k, struct dist__state *st)
{
    pthread_mutex_lock(&fam_mu[k->family]);
    st->refs++;
    pthread_mutex_unlock(&fam_mu[k->family]);
}

void dist__state_unref(const struct dist__kind *k, struct dist__state *st)
{
    state_put(k, st);
}

/* ---- objects ---------------------------------------------------------------- */

int dist__obj_new(const struct dist__kind *k, const char *name, int flags,
                  unsigned long lease_ms, struct dist__obj **out)
{
    struct dist__obj *o;
    size_t len = 0;
    int rc;

    if ((rc = dist__check_name(name, &len)) != 0)
        return rc;
    engine_hook();
    if (!(o = calloc(1, sizeof *o)))
        return dist__err(ENOMEM, "out of memory");
    pthread_mutex_lock(&fam_mu[k->family]);
    o->st = state_get(k, name, len);
    pthread_mutex_unlock(&fam_mu[k->family]);
    if (!o->st) {
        free(o);
        return dist__err(ENOMEM, "out of memory");
    }
    o->magic = k->magic;
    o->kind = k;
    o->flags = flags;
    o->lease_ms = lease_ms;
    *out = o;
    return 0;
}

void dist__obj_free(struct dist__obj *o)
{
    const struct dist__kind *k = o->kind;

    o->magic = 0;
    state_put(k, o->st);
    free(o);
}

int dist__obj_init(const struct dist__kind *k, const char *name, int flags,
                   unsigned long lease_ms, const char **uname, void **impl,
                   unsigned long reserved[2])
{
    struct dist__obj *o;
    int rc = dist__obj_new(k, name, flags, lease_ms, &o);

    if (rc != 0)
        return rc;
    *uname = NULL;
    dist__stamp(reserved);
    __atomic_store_n((struct dist__obj **)impl, o, __ATOMIC_RELEASE);
    return 0;
}

int dist__lease_set(unsigned long *field, unsigned long lease_ms)
{
    if (lease_ms > 24UL * 3600 * 1000)
        return dist__err(EINVAL, "lease of %lu ms is longer than a day",
                         lease_ms);
    *field = lease_ms;
    return 0;
}

static unsigned family_magic(const struct dist__kind *k)
{
    return k->magic;
}

int dist__obj_get(const struct dist__kind *k, const char *name, void **impl,
                  unsigned long reserved[2], struct dist__obj **out)
{
    struct dist__obj *o, *expected = NULL;
    int rc;

    o = dist__impl_load(impl, reserved, family_magic(k), k->noun, &rc);
    if (rc || o) {
        *out = o;
        return rc;
    }
    if (!name)
        return dist__err(EINVAL,
                         "%s has no name: use dist_%s_init or "
                         "DIST_%s_INITIALIZER",
                         k->noun, k->noun,
                         k->family == DIST__FAM_MUTEX ? "MUTEX" : "RWLOCK");
    if ((rc = dist__obj_new(
             k, name, k->default_flags ? k->default_flags() : 0, 0, &o)) != 0)
        return rc;
    dist__stamp(reserved); /* before o is seen, as at init */
    if (!__atomic_compare_exchange_n((struct dist__obj **)impl, &expected, o,
                                     0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        dist__obj_free(o); /* another thread won the race */
        o = expected;
    }
    *out = o;
    return 0;
}

int dist__obj_destroy(const struct dist__kind *k, void **impl,
                      unsigned long reserved[2])
{
    struct dist__obj *o;
    struct dist__state *st;
    struct dist__rec *r;
    int rc;

    o = dist__impl_load(impl, reserved, family_magic(k), k->noun, &rc);
    if (!o)
        return rc;
    st = o->st;
    pthread_mutex_lock(&st->mu);
    dist__rec_find(st); /* drops a parent's records */
    for (r = st->recs; r; r = r->next) {
        /* a hold whose explicit lease has surely ended is not in the way,
         * even if its thread never unlocked (it may have exited) */
        int expired = r->lease_end && dist__now_ms() > r->lease_end;
        int lost = r->h && atomic_load(&r->h->lost);
        if (r->n[0] + r->n[1] > 0 && !lost && !expired) {
            pthread_mutex_unlock(&st->mu);
            return dist__err_lock(EBUSY, k->noun, st->names->name.p,
                                  " is still held by thread %" PRIu64,
                                  r->thread_no);
        }
    }
    pthread_mutex_unlock(&st->mu);
    __atomic_store_n((struct dist__obj **)impl, NULL, __ATOMIC_RELEASE);
    dist__obj_free(o);
    return 0;
}

/* ---- fork ------------------------------------------------------------------- */

static void engine_fork(int phase)
{
    struct dist__state *st;
    size_t i;
    int f;

    for (f = 0; f < DIST__FAM_COUNT; f++) {
        if (phase == 0)
            pthread_mutex_lock(&fam_mu[f]);
        for (i = 0; i < fams[f].cap; i++) {
            for (st = fams[f].tab[i]; st; st = st->next) {
                if (phase == 0) {
                    pthread_mutex_lock(&st->mu);
                    if (st->local)
                        st->local->ops->fork(st->local, 0);
                    continue;
                }
                /* parent or child alike: the forking thread took them
                 * all, and in the child it is that thread that lets go
                 * (re-initialising a locked mutex is undefined) */
                if (st->local)
                    st->local->ops->fork(st->local, phase);
                pthread_mutex_unlock(&st->mu);
            }
        }
        if (phase != 0)
            pthread_mutex_unlock(&fam_mu[f]);
    }
}
