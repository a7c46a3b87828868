/* ident.c: who this process and thread are to Redis, and what fork() does
 * to that.  The child of a fork is a new client: new id, no holds. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "base.h"

atomic_ulong dist__fork_gen = 1;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t id_mu = PTHREAD_MUTEX_INITIALIZER;
static char client_id[37];
static unsigned long client_gen; /* generation client_id was made for */
static atomic_uint_fast64_t next_thread_no = 1;

/* An owner identity: a thread's number, and its owner field
 * ("<client id>:<number>") as last made: for the number made_no and the
 * client id of fork generation gen (0: not made yet). */
struct ident {
    uint64_t no, made_no;
    unsigned long gen;
    size_t len;
    char owner[64];
};

/* The identity the calling thread acts as: its own, or while a cohort call
 * runs the engine as the cohort's owner (dist__ident_push) that one, with
 * its own cached owner field, so that switching back and forth does not
 * rebuild the thread's own (as.no 0: none pushed).  thread-local: the
 * owner identity Redis keys holds by is the thread's (Redisson's "client
 * id:thread"), so its cache is per thread too. */
static __thread struct {
    struct ident me, as;
} id;

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
 * its copy.  thread-local: for that reason. */
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

    for (i = 0; i < n; i++) { /* insertion sort by rank */
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

static void stamp_fork_child(void);

static void fork_child(void)
{
    int i;

    stamp_fork_child();
    /* id_mu was taken by fork_prepare on this very thread: let go of it.
     * hooks_mu is not taken there (a registration may have been under way
     * in another thread, which the child does not have): start it anew. */
    pthread_mutex_unlock(&id_mu);
    pthread_mutex_init(&hooks_mu, NULL);
    atomic_fetch_add(&dist__fork_gen, 1);
    for (i = nforked; i-- > 0;)
        hooks[forked[i]].fn(2);
}

/* ---- which process made an object ------------------------------------ */

/* A dist_*_t holds a pointer into the heap of the process that initialised
 * it.  A forked child has a copy of that heap, so the objects its parent
 * made before the fork are its own too; one another process initialised
 * in shared memory (pthread_cond_destroy/2-1 in API mode: the parent made
 * its condition again after the fork) points into a heap that is not
 * this process's: what is there is garbage, an object of this process
 * (waited on under its old name: a hang), or nothing (a crash).  So each
 * object carries a stamp, its maker's pid and a serial number, and a
 * process accepts its own and its ancestors' made before each fork on the
 * way to it.  The ancestors are written only in a fork child, which has
 * one thread then; a chain deeper than MAX_ANCESTORS forgets the oldest. */
#define MAX_ANCESTORS 32
static atomic_ulong self_pid; /* 0: nothing stamped yet */
static atomic_ulong serial;   /* the last serial given */
static struct {
    unsigned long pid, last; /* its serials up to last */
} ancestors[MAX_ANCESTORS];
static atomic_int nancestors;

static unsigned long own_pid(void)
{
    unsigned long pid = atomic_load_explicit(&self_pid, memory_order_relaxed);

    if (!pid) {
        pid = (unsigned long)getpid();
        atomic_store(&self_pid, pid);
    }
    return pid;
}

static void stamp_fork_child(void)
{
    unsigned long parent = atomic_load(&self_pid);
    int n = atomic_load(&nancestors);

    if (parent) {
        if (n == MAX_ANCESTORS) {
            memmove(&ancestors[0], &ancestors[1],
                    (MAX_ANCESTORS - 1) * sizeof ancestors[0]);
            n--;
        }
        ancestors[n].pid = parent;
        ancestors[n].last = atomic_load(&serial);
        atomic_store(&nancestors, n + 1);
    }
    atomic_store(&self_pid, (unsigned long)getpid());
}

void dist__stamp(unsigned long stamp[2])
{
    dist__lib_init(); /* a child must learn its parent */
    stamp[0] = own_pid();
    stamp[1] = atomic_fetch_add(&serial, 1) + 1;
}

int dist__stamp_check(const unsigned long stamp[2], const char *noun)
{
    int i, n;

    if (stamp[1] == 0 || /* none: made before the stamps */
        stamp[0] == atomic_load_explicit(&self_pid, memory_order_relaxed))
        return 0;
    n = atomic_load(&nancestors);
    for (i = 0; i < n; i++)
        if (ancestors[i].pid == stamp[0] && stamp[1] <= ancestors[i].last)
            return 0;
    return dist__err(EINVAL,
                     "%s was initialised by another process (pid "
                     "%lu), not by this one or before the fork it comes "
                     "from: an object belongs to the process that made it "
                     "(no process-shared objects); each process initialises "
                     "its own object of the lock's name",
                     noun, stamp[0]);
}

void *dist__impl_load(void *const *impl, const unsigned long stamp[2],
                      unsigned magic, const char *noun, int *rc)
{
    const unsigned *p =
        __atomic_load_n((const unsigned *const *)impl, __ATOMIC_ACQUIRE);

    *rc = p ? dist__stamp_check(stamp, noun) : 0;
    if (*rc == 0 && p && *p != magic)
        *rc = dist__err(EINVAL, "%s is not initialised (or destroyed)", noun);
    return *rc ? NULL : (void *)p;
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
    return client_id; /* only changes in a forked child, before it runs */
}

uint64_t dist__thread_no(void)
{
    if (id.as.no)
        return id.as.no;
    if (id.me.no == 0)
        id.me.no = atomic_fetch_add(&next_thread_no, 1);
    return id.me.no;
}

uint64_t dist__thread_no_new(void)
{
    return atomic_fetch_add(&next_thread_no, 1);
}

uint64_t dist__ident_push(uint64_t no)
{
    uint64_t old = id.as.no;

    id.as.no = no;
    return old;
}

void dist__ident_pop(uint64_t old)
{
    id.as.no = old;
}

/* i's owner field, made again when the client id changed since it was
 * last made (a fork: gen) or the number did. */
static const char *owner_of(struct ident *i, size_t *len, unsigned long gen)
{
    if (i->gen != gen || i->made_no != i->no) {
        int n = snprintf(i->owner, sizeof i->owner, "%s:%" PRIu64,
                         dist__client_id(), i->no);
        i->len = (size_t)n;
        i->gen = gen;
        i->made_no = i->no;
    }
    if (len)
        *len = i->len;
    return i->owner;
}

const char *dist__owner(size_t *len)
{
    unsigned long gen = atomic_load(&dist__fork_gen);

    if (id.as.no)
        return owner_of(&id.as, len, gen);
    if (!id.me.no)
        dist__thread_no(); /* its number, at its first call */
    return owner_of(&id.me, len, gen);
}
