/* ident.c: who this process and thread are to Redis, and what fork() does
 * to that.  The child of a fork is a new client: new id, no holds. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <uuid/uuid.h>

#include "internal.h"

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

/* Each module guards its state with its own mutex; the prepare handler takes
 * them in the documented lock order so the child inherits them unlocked and
 * consistent, and the child handler then resets what belonged to the parent. */
static void fork_prepare(void)
{
    dist__engine_fork(0);
    dist__renew_fork(0);
    dist__pubsub_fork(0);
    dist__cfg_fork(0);
    dist__topo_fork(0);
    pthread_mutex_lock(&id_mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&id_mu);
    dist__topo_fork(1);
    dist__cfg_fork(1);
    dist__pubsub_fork(1);
    dist__renew_fork(1);
    dist__engine_fork(1);
}

static void fork_child(void)
{
    pthread_mutex_init(&id_mu, NULL);
    atomic_fetch_add(&dist__fork_gen, 1);
    dist__topo_fork(2);
    dist__cfg_fork(2);
    dist__pubsub_fork(2);
    dist__renew_fork(2);
    dist__engine_fork(2);
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
    if (my_thread_no == 0)
        my_thread_no = atomic_fetch_add(&next_thread_no, 1);
    return my_thread_no;
}

const char *dist__owner(size_t *len)
{
    unsigned long gen = atomic_load(&dist__fork_gen);

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
