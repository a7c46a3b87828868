/* preload_lib: a shared library with mutexes, for the LD_PRELOAD tests
 * (libpreload_lib.so, linked by preload_target).  Knows nothing of
 * distlock. */
#include <pthread.h>

pthread_mutex_t *preload_lib_cache_lock(void);
pthread_mutex_t *preload_lib_global_lock(void);

/* file-static in the library: only in its .symtab */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* exported, and used by the program directly: the program gets a copy
 * (a copy relocation) that every object, this library too, then uses */
pthread_mutex_t lib_global_lock = PTHREAD_MUTEX_INITIALIZER;

pthread_mutex_t *preload_lib_cache_lock(void)
{
    return &cache_lock;
}

pthread_mutex_t *preload_lib_global_lock(void)
{
    return &lib_global_lock;
}
