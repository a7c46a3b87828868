/* preload_lib: a shared library with mutexes, for the LD_PRELOAD tests
 * (libpreload_lib.so, linked by preload_target).  Knows nothing of
 * distlock, except that its constructor asks the shim, if there is one,
 * for a call counter.  Linked by preload_fork too, for its fork handler.
 * It also stands between the shim and glibc's pthread_rwlock_destroy, to
 * count the calls that reach glibc (preload_lib.map gives it glibc's
 * version). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

pthread_mutex_t *preload_lib_cache_lock(void);
pthread_mutex_t *preload_lib_global_lock(void);
long preload_lib_ctor_counted(void);
int preload_lib_fork_reinits(void);
long preload_lib_rwlock_destroys(void);

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

/* A handler fork() runs in the child, as legacy libraries have: it
 * initialises the library's mutex anew (the parent's state may have been
 * copied half-changed).  Registered by the constructor below, which runs
 * before the shim's start-up, so glibc runs it in the child before the
 * handlers of the shim and of libdistlock, while they still hold their
 * locks: its pthread_mutex_init must not wait for them. */
static pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static int fork_reinits;

static void preload_lib_fork_child(void)
{
    if (pthread_mutex_init(&fork_lock, NULL) == 0)
        fork_reinits++;
}

/* How often this process's fork child handler initialised fork_lock. */
int preload_lib_fork_reinits(void)
{
    return fork_reinits;
}

/* pthread_rwlock_destroy@@GLIBC_2.34 (preload_lib.map), counted, then
 * glibc's.  The program's own calls reach the shim first (preloaded, it
 * comes before this library), and the shim's calls of "glibc's" function,
 * which it looks up after itself (dlvsym(RTLD_NEXT)), reach this one: so
 * the count takes in the rwlocks the shim destroys of itself. */
typedef int (*rwdestroy_fn)(pthread_rwlock_t *);
static rwdestroy_fn next_rwlock_destroy;
static long rwlock_destroys;

static rwdestroy_fn find_rwlock_destroy(void)
{
    return (rwdestroy_fn)dlvsym(RTLD_NEXT, "pthread_rwlock_destroy",
                                "GLIBC_2.34");
}

int pthread_rwlock_destroy(pthread_rwlock_t *rw)
{
    __atomic_fetch_add(&rwlock_destroys, 1, __ATOMIC_RELAXED);
    if (!next_rwlock_destroy)
        next_rwlock_destroy = find_rwlock_destroy();
    return next_rwlock_destroy(rw);
}

long preload_lib_rwlock_destroys(void)
{
    return __atomic_load_n(&rwlock_destroys, __ATOMIC_RELAXED);
}

/* The dynamic loader runs this constructor before the shim's (the shim is
 * preloaded, this library is a dependency of the program): its lock call
 * is the first, and must find cache_lock mapped all the same. */
static long ctor_counted = -2;

__attribute__((constructor)) static void preload_lib_ctor(void)
{
    long (*counter)(const char *) =
        (long (*)(const char *))dlsym(RTLD_DEFAULT, "distlock_preload_calls");

    /* now: a call out of memory could not look it up */
    next_rwlock_destroy = find_rwlock_destroy();
    pthread_atfork(NULL, NULL, preload_lib_fork_child);
    pthread_mutex_lock(&cache_lock);
    pthread_mutex_unlock(&cache_lock);
    ctor_counted = counter ? counter("pthread_mutex_lock@GLIBC_2.2.5") : -1;
}

long preload_lib_ctor_counted(void)
{
    return ctor_counted;
}
