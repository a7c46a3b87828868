/*
 * sem-pair: a producer and a consumer thread pass N items through two
 * leased dist_sem_t with unowned posts (the API's default mode for the
 * signalling use), as tests/preload_sems does with sem_open under the
 * shim.  bench/sem-pair.sh runs both and watches Redis meanwhile.
 *
 *   sem-pair ITEMS SLOTS N      prints "done N VALUE-ITEMS VALUE-SLOTS"
 *                               and "destroyed RC RC"
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "distlock.h"

static dist_sem_t items, slots;
static long n_items;
static atomic_int errors;

/* One side of the pair, n_items times: a wait on ends[0], a post to
 * ends[1] (the producer from slots to items, the consumer back). */
static void *mover(void *arg)
{
    dist_sem_t **ends = arg;

    for (long i = 0; i < n_items; i++)
        if (dist_sem_wait(ends[0]) != 0 || dist_sem_post(ends[1]) != 0)
            atomic_fetch_add(&errors, 1);
    return NULL;
}

static void init(dist_sem_t *s, const char *name, unsigned initial)
{
    dist_semattr_t a;

    dist_semattr_init(&a);
    dist_semattr_setunowned(&a, 1);
    if (dist_sem_init(s, name, initial, &a) != 0) {
        fprintf(stderr, "sem-pair: %s: %s\n", name, dist_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    static dist_sem_t *ends[2][2] = { { &slots, &items },
                                      { &items, &slots } };
    pthread_t t[2];
    int vi = -1, vs = -1, di, ds;

    if (argc != 4) {
        fprintf(stderr, "usage: sem-pair ITEMS SLOTS N\n");
        return 2;
    }
    n_items = atol(argv[3]);
    init(&items, argv[1], 0);
    init(&slots, argv[2], 4);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, mover, ends[i]) != 0)
            return 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    dist_sem_getvalue(&items, &vi);
    dist_sem_getvalue(&slots, &vs);
    printf("done %ld %d %d\n", n_items, vi, vs);
    di = dist_sem_destroy(&items);
    ds = dist_sem_destroy(&slots);
    printf("destroyed %d %d\n", di, ds);
    dist_shutdown();
    return atomic_load(&errors) == 0 && di == 0 && ds == 0 ? 0 : 1;
}
