/* site.c: init_site, heap locks mapped when their init runs.
 *
 * A [mutex NAME] with "match = init_site FUNCTION" maps every lock that
 * FUNCTION initialises: pthread_mutex_init (pthread_rwlock_init) called
 * from inside it adds the lock's address to the table, as a dynamic entry
 * named NAME:<n> (or as before, when FUNCTION made one at that address
 * already: see map_heap), and its destroy (or an init from elsewhere at
 * the same address) kills that entry again.  Entries are never removed from the
 * table, only marked dead, so the fast path's readers need no lock; the
 * writers take dyn_mu. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "preload.h"

static struct pl_site *sites;
size_t pl_nsites;
static struct pl_own_lock dyn_mu = PL_OWN_LOCK(PL_OWN_SITES);
static unsigned long *site_seq;

static const char *kind_name(int kind)
{
    return pl_kind_name(kind);
}

int pl_take_sites(struct pl_resolved *res)
{
    size_t i;

    sites = res->s;
    pl_nsites = res->ns;
    res->s = NULL;
    res->ns = 0;
    if (pl_nsites) {
        site_seq = calloc(pl_nsites, sizeof *site_seq);
        if (!site_seq)
            return 0;
    }
    for (i = 0; i < pl_nsites && pl_verbose(); i++)
        pl_msg("%s '%s:<n>' = every %s that %s",
               kind_name(sites[i].sec->kind), sites[i].sec->name,
               kind_name(sites[i].sec->kind), sites[i].where);
    return 1;
}

static const struct pl_site *site_of(uintptr_t ra, int kind)
{
    size_t i, j;

    for (i = 0; i < pl_nsites; i++)
        for (j = 0; j < sites[i].nr && (int)sites[i].sec->kind == kind; j++)
            if (ra >= sites[i].r[j].lo && ra < sites[i].r[j].hi)
                return &sites[i];
    return NULL;
}

/* Puts e into the table, grown when it would be more than half full.  0,
 * or ENOMEM.  The old table stays readable for whoever still has it, and
 * is never freed.  dyn_mu is held. */
static int put_entry(struct pl_entry *e)
{
    struct pl_table *t = pl_tab_w;

    if ((t->used + 1) * 2 > t->mask + 1) {
        struct pl_table *n = pl_table_grow(t);

        if (!n)
            return ENOMEM;
        pl_tab_w = t = n;
        __atomic_store_n(&pl_tab, n, __ATOMIC_RELEASE);
    }
    pl_table_put(t, e);
    return 0;
}

/* A new heap entry for m in the table; NULL: out of memory. */
static struct pl_entry *heap_entry(void *m)
{
    struct pl_entry *e = calloc(1, sizeof *e);

    if (!e)
        return NULL;
    e->addr = (uintptr_t)m;
    e->dynamic = 1;
    if (put_entry(e) != 0) {
        free(e);
        return NULL;
    }
    return e;
}

/* Makes e (at m) the next lock of site s; or the lock it was, when s
 * made it before (destroyed, or initialised twice, at this address).
 *
 * A site numbers its objects in the order a process makes them at new
 * addresses, so that the n-th of one process is the n-th of another
 * running the same code.  One made again where s made one before keeps
 * its name, for two reasons.  A process-shared object in shared memory
 * (Open POSIX pthread_cond_destroy/2-1): the parent destroys it and
 * makes it again after fork(), while its children go on using it at
 * that address; numbered anew, the parent's was another lock than the
 * children's, and its broadcast never reached them.  And a loop that
 * makes and destroys a lock at one stack address each turn makes one
 * logical lock, only one of which ever exists at a time: numbered anew
 * each turn, two processes at different turns used different locks and
 * did not exclude each other.  Objects alive together are at different
 * addresses, so they still get names of their own.  0, or ENOMEM. */
static int map_heap(struct pl_entry *e, const struct pl_site *s, void *m,
                    int kind, clockid_t clk)
{
    char name[DIST_NAME_MAX + 32];
    int rc;

    if (e->sec == s->sec && e->lockname)
        snprintf(name, sizeof name, "%s", e->lockname);
    else
        snprintf(name, sizeof name, "%s:%lu", s->sec->name,
                 site_seq[s - sites]++);
    e->sec = s->sec;
    e->clock = clk;
    pl_set_holder(e, 0);
    if ((rc = pl_entry_init(e, name)) == ENOMEM) {
        pl_msg("lock '%s': out of memory: its init fails with ENOMEM", name);
        return rc;
    }
    if (rc != 0) {
        pl_msg("lock '%s': %s: this mutex stays local", name,
               dist_last_error());
        return 0;
    }
    if (pl_verbose())
        pl_msg("%s '%s' = %p, initialised by %s", kind_name(kind), name, m,
               s->where);
    __atomic_store_n(&e->live, 1, __ATOMIC_RELEASE);
    return 0;
}

int pl_site_init(void *m, uintptr_t ra, int kind, clockid_t clk)
{
    PL_KEEP_ERRNO;
    const struct pl_site *s = site_of(ra, kind);
    struct pl_entry *e;
    int rc = 0;

    pl_own_take(&dyn_mu);
    pl_in_shim = 1;
    e = pl_table_get(pl_tab_w, (uintptr_t)m);
    if (e && !e->dynamic)
        goto out; /* a mapped global, initialised again */
    if (e && __atomic_load_n(&e->live, __ATOMIC_RELAXED))
        pl_entry_kill(e);
    if (!s)
        goto out;
    if (!e && !(e = heap_entry(m))) {
        pl_msg("%s initialised by %s: out of memory: its init fails with "
               "ENOMEM",
               kind_name(kind), s->where);
        rc = ENOMEM;
        goto out;
    }
    rc = map_heap(e, s, m, kind, clk);
out:
    pl_in_shim = 0;
    pl_own_give(&dyn_mu);
    return rc;
}

int pl_heap_add(struct pl_entry *e)
{
    int rc;

    pl_own_take(&dyn_mu);
    rc = put_entry(e);
    pl_own_give(&dyn_mu);
    return rc;
}

void pl_site_forget(struct pl_entry *e)
{
    pl_own_take(&dyn_mu);
    pl_in_shim = 1;
    if (__atomic_load_n(&e->live, __ATOMIC_RELAXED))
        pl_entry_kill(e);
    pl_in_shim = 0;
    pl_own_give(&dyn_mu);
}

/* Registered after libdistlock's handlers, so this prepare runs first:
 * dyn_mu, then the library's locks, the order pl_site_init takes them in.
 * The library's own handlers never come here: its mutexes and conditions
 * bypass the shim, see libdistlock's sys.c. */
static void fork_prepare(void)
{
    pl_own_fork_take(&dyn_mu);
}

static void fork_parent(void)
{
    pl_own_fork_give(&dyn_mu);
}

static void fork_child(void)
{
    pl_fork_gen++; /* the parent's holders are not this process's */
    pl_own_fork_give(&dyn_mu);
}

void pl_site_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
