/* ident.c: who this process and thread are to Redis, and what fork() does
 * to that.  The child of a fork is a new client: new id, no holds. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <uuid/uuid.h>

#include "base.h"

atomic_ulong dist__fork_gen = 1;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t id_mu = PTHREAD_MUTEX_INITIALIZER;
static char client_id[37];
static unsigned long client_gen;          /* generation client_id was made for */
static atomic_uint_fast64_t next_thread_no = 1;

static __thread uint64_t my_thread_no;
static __thread char my_owner[64];
static __thread size_t my_owner_len;
static __thread unsigned long my_owner_gen;
/* A cohort call runs the engine as the cohort's owner (dist__ident_push):
 * its number and its own cached owner string, so that switching back and
 * forth does not rebuild the thread's own. */
static __thread uint64_t as_no;
static __thread char as_owner[64];
static __thread size_t as_owner_len;
static __thread unsigned long as_owner_gen;
static __thread uint64_t as_owner_no;

/* The fork hooks modules registered, in the order they came.  Entries are
 * written once, before nhooks counts them, so the handlers read the table
 * without a lock; hooks_mu only keeps two registrations apart. */
#define MAX_HOOKS 16
static struct {
    void (*fn)(int phase);
    int rank;
} hooks[MAX_HOOKS];
static atomic_int nhooks;
static pthread_mutex_t hooks_mu = PTHREAD_MUTEX_INITIALIZER;

/* The hooks the prepare handler ran, ascending by rank: the parent and
 * child handlers run the same ones, whatever registered since.  Per
 * thread, for two threads forking at once; the child's one thread has
 * its copy. */
static __thread int forked[MAX_HOOKS];
static __thread int nforked;

static void add_hook(void (*fn)(int phase), int rank)
{
    int i, n;

    pthread_mutex_lock(&hooks_mu);
    n = atomic_load(&nhooks);
    for (i = 0; i < n && hooks[i].fn != fn; i++)
        ;
    if (i == n && n < MAX_HOOKS) {
        hooks[n].fn = fn;
        hooks[n].rank = rank;
        atomic_store(&nhooks, n + 1);
    }
    pthread_mutex_unlock(&hooks_mu);
}

void dist__atfork_register(void (*fn)(int phase), int rank)
{
    dist__lib_init();
    add_hook(fn, rank);
}

/* Each module guards its state with its own mutex; the prepare handler takes
 * them in the documented lock order (ascending rank) so the child inherits
 * them unlocked and consistent, and the child handler then resets what
 * belonged to the parent. */
static void fork_prepare(void)
{
    int i, j, n = atomic_load(&nhooks);

    for (i = 0; i < n; i++) {           /* insertion sort by rank */
        for (j = i; j > 0 && hooks[forked[j - 1]].rank > hooks[i].rank; j--)
            forked[j] = forked[j - 1];
        forked[j] = i;
    }
    nforked = n;
    for (i = 0; i < n; i++)
        hooks[forked[i]].fn(0);
    pthread_mutex_lock(&id_mu);
}

static void fork_parent(void)
{
    int i;

    pthread_mutex_unlock(&id_mu);
    for (i = nforked; i-- > 0;)
        hooks[forked[i]].fn(1);
}

static void fork_child(void)
{
    int i;

    /* id_mu was taken by fork_prepare on this very thread: let go of it.
     * hooks_mu is not taken there (a registration may have been under way
     * in another thread, which the child does not have): start it anew. */
    pthread_mutex_unlock(&id_mu);
    pthread_mutex_init(&hooks_mu, NULL);
    atomic_fetch_add(&dist__fork_gen, 1);
    for (i = nforked; i-- > 0;)
        hooks[forked[i]].fn(2);
}

static void lib_init_once(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void dist__lib_init(void)
{
    pthread_once(&lib_once, lib_init_once);
}

const char *dist__client_id(void)
{
    unsigned long gen = atomic_load(&dist__fork_gen);

    pthread_mutex_lock(&id_mu);
    if (client_gen != gen) {
        uuid_t u;
        uuid_generate_random(u);
        uuid_unparse_lower(u, client_id);
        client_gen = gen;
    }
    pthread_mutex_unlock(&id_mu);
    return client_id;   /* only changes in a forked child, before it runs */
}

uint64_t dist__thread_no(void)
{
    if (as_no)
        return as_no;
    if (my_thread_no == 0)
        my_thread_no = atomic_fetch_add(&next_thread_no, 1);
    return my_thread_no;
}

uint64_t dist__thread_no_new(void)
{
    return atomic_fetch_add(&next_thread_no, 1);
}

uint64_t dist__ident_push(uint64_t no)
{
    uint64_t old = as_no;

    as_no = no;
    return old;
}

void dist__ident_pop(uint64_t old)
{
    as_no = old;
}

static const char *as_owner_get(size_t *len, unsigned long gen)
{
    if (as_owner_gen != gen || as_owner_no != as_no) {
        int n = snprintf(as_owner, sizeof as_owner, "%s:%" PRIu64,
                         dist__client_id(), as_no);
        as_owner_len = (size_t)n;
        as_owner_gen = gen;
        as_owner_no = as_no;
    }
    if (len)
        *len = as_owner_len;
    return as_owner;
}

const char *dist__owner(size_t *len)
{
    unsigned long gen = atomic_load(&dist__fork_gen);

    if (as_no)
        return as_owner_get(len, gen);
    if (my_owner_gen != gen) {
        int n = snprintf(my_owner, sizeof my_owner, "%s:%" PRIu64,
                         dist__client_id(), dist__thread_no());
        my_owner_len = (size_t)n;
        my_owner_gen = gen;
    }
    if (len)
        *len = my_owner_len;
    return my_owner;
}
