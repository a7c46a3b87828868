/* util.c: clocks, the per-thread error text and the lost-lock handler.
 * Small pieces every other module leans on. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "stats.h"

/* The calling thread's last error (struct dist__why in base.h), and
 * whether the failure just met is one that no retry can mend (a
 * certificate refused, a server that speaks another protocol, options that
 * cannot work): a caller that would try again for a while gives up at
 * once.  thread-local: dist_last_error() is the calling thread's, as errno
 * is; the mark is set deep in the link by whichever call met the failure
 * and taken by the same thread's retry loop (dist__hopeless_take). */
static __thread struct {
    struct dist__why why;
    int hopeless;
} last;

/* The new text is made in a buffer of its own, then copied: a caller may
 * well pass the old text as an argument (dist_last_error(), to add what it
 * was doing in front), and formatting the text into itself is undefined
 * behaviour that garbled such messages. */
static int set_why(int code, const char *lock, const char *noun,
                   const char *fmt, va_list ap)
{
    char text[sizeof last.why.text];
    int n = 0;

    if (noun)
        n = snprintf(text, sizeof text, "%s '%s'", noun, lock);
    if (n < 0 || (size_t)n >= sizeof text)
        n = 0;
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    memcpy(last.why.text, text, strlen(text) + 1);
    last.why.lock = lock;
    return code;
}

int dist__err(int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_why(code, NULL, NULL, fmt, ap);
    va_end(ap);
    return code;
}

int dist__err_lock(int code, const char *noun, const char *name,
                   const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_why(code, name, noun, fmt, ap);
    va_end(ap);
    return code;
}

int dist__err_as(int code, const struct dist__why *was, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_why(code, was->lock, NULL, fmt, ap);
    va_end(ap);
    return code;
}

void dist__why_get(struct dist__why *w)
{
    *w = last.why;
}

/* A thread-local flag's value, cleared (the *_take calls). */
static int flag_take(int *flag)
{
    int was = *flag;

    *flag = 0;
    return was;
}

void dist__hopeless_set(void)
{
    last.hopeless = 1;
}

int dist__hopeless_take(void)
{
    return flag_take(&last.hopeless);
}

void dist__bufs_free(struct dist__buf *keys, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        free((char *)keys[i].p);
        keys[i].p = NULL;
    }
}

const char *dist_last_error(void)
{
    DIST__KEEP_ERRNO;
    return last.why.text;
}

uint64_t dist__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t dist__now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void dist__ms_to_ts(uint64_t mono_ms, struct timespec *ts)
{
    ts->tv_sec = (time_t)(mono_ms / 1000u);
    ts->tv_nsec = (long)(mono_ms % 1000u) * 1000000L;
}

int dist__cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc;

    if ((rc = pthread_condattr_init(&ca)) != 0)
        return rc;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

/* The handler is read without a lock on the hot path of nothing: it is only
 * called when a lock is lost, so a mutex keeps fn and arg consistent. */
static pthread_mutex_t lost_mu = PTHREAD_MUTEX_INITIALIZER;
static dist_lost_fn lost_fn;
static void *lost_arg;

void dist__lost_handler_set(dist_lost_fn fn, void *arg)
{
    pthread_mutex_lock(&lost_mu);
    lost_fn = fn;
    lost_arg = arg;
    pthread_mutex_unlock(&lost_mu);
}

int dist_set_lost_handler(dist_lost_fn fn, void *arg)
{
    DIST__KEEP_ERRNO;
    dist__lost_handler_set(fn, arg);
    return 0;
}

void dist__call_lost_handler(const char *name)
{
    dist_lost_fn fn;
    void *arg;

    pthread_mutex_lock(&lost_mu);
    fn = lost_fn;
    arg = lost_arg;
    pthread_mutex_unlock(&lost_mu);
    dist__stat_add(DIST__ST_LOST, 1);
    if (fn)
        fn(name, arg);
}

/* hiredis writes with write(2); on a socket the server has closed that
 * raises SIGPIPE, whose default action kills the whole process.  Around
 * each call on a caller's thread SIGPIPE is blocked, and one that the call
 * raised is taken back before the mask is restored. */
void dist__sigpipe_block(struct dist__sigpipe *s)
{
    sigset_t pipe_set, pending;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    s->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &s->old);
}

void dist__sigpipe_restore(struct dist__sigpipe *s)
{
    sigset_t pipe_set, pending;
    struct timespec zero = { 0, 0 };

    if (!s->was_pending && sigismember(&s->old, SIGPIPE) == 0) {
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE)) {
            sigemptyset(&pipe_set);
            sigaddset(&pipe_set, SIGPIPE);
            while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
                ;
        }
    }
    pthread_sigmask(SIG_SETMASK, &s->old, NULL);
}

/* ---- the library's threads and the life of the process ----------------
 *
 * A pthread program ends when its last thread does, main's pthread_exit
 * included.  The library's threads (renewal, watch, pub/sub) must not keep
 * it going: each asks now and then (dist__threads_orphaned) whether any
 * thread but the library's is left, and when none is, leaves.  glibc ends
 * the process with exit(0) as the last of them returns, as it would have
 * when the program's last thread did.  /proc/self/stat says how many
 * threads the process has; without /proc the threads stay, as before. */

static atomic_int lib_threads; /* started and not yet returned */
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
/* The signals the thread that started this one let through.  thread-local:
 * each library thread's own, read only on it. */
static __thread sigset_t opener_mask;

/* The child of a fork has none of the parent's threads.  Where this runs
 * among the child handlers does not matter: a count too low only makes a
 * library thread stay. */
static void lib_threads_child(void)
{
    atomic_store(&lib_threads, 0);
}

static void lib_threads_init(void)
{
    pthread_atfork(NULL, NULL, lib_threads_child);
}

struct start {
    void *(*fn)(void *);
    void *arg;
    sigset_t mask;
};

static void *thread_main(void *arg)
{
    struct start st = *(struct start *)arg;
    void *ret;

    free(arg);
    opener_mask = st.mask;
    ret = st.fn(st.arg);
    atomic_fetch_sub(&lib_threads, 1);
    return ret;
}

/* The library's threads run with every signal blocked: the application's
 * handlers never run on them, and SIGPIPE cannot kill anything.  Counted
 * once pthread_create returned: until then the new thread may already run
 * but is not counted, which only makes the others think the program has a
 * thread more, never one less. */
int dist__thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
    struct start *st = malloc(sizeof *st);
    sigset_t all, old;
    int rc;

    if (!st)
        return ENOMEM;
    pthread_once(&lib_once, lib_threads_init);
    st->fn = fn;
    st->arg = arg;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    st->mask = old;
    /* st is the new thread's from here: it may already have freed it */
    rc = pthread_create(th, NULL, thread_main, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        free(st);
    else
        atomic_fetch_add(&lib_threads, 1);
    return rc;
}

/* thread-local: a signal handler ran on this thread in a poll(2) of its
 * call (dist__eintr_note); its semaphore wait takes it, as errno's EINTR */
static __thread int eintr_seen;

void dist__eintr_note(void)
{
    eintr_seen = 1;
}

int dist__eintr_take(void)
{
    return flag_take(&eintr_seen);
}

int dist__handlers_restart(void)
{
    struct sigaction sa;
    int sig;

    /* Which signal interrupted the wait is not known: any handler without
     * SA_RESTART may have been it.  glibc's own signals (cancellation,
     * set*id) are refused by sigaction and count as restarting, as their
     * handlers are. */
    for (sig = 1; sig < NSIG; sig++) {
        if (sigaction(sig, NULL, &sa) != 0)
            continue;
        if (!(sa.sa_flags & SA_SIGINFO) &&
            (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN))
            continue;
        if (!(sa.sa_flags & SA_RESTART))
            return 0;
    }
    return 1;
}

/* The process's thread count and whether its first thread has ended
 * (state Z: main called pthread_exit; the kernel still counts it while
 * other threads run), from /proc/self/stat.  0, or -1 when it cannot be
 * read. */
static int proc_threads(long *threads, int *main_gone)
{
    char buf[1024], *p;
    ssize_t n;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC), i;

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    /* "pid (comm) state ppid ...": the name may hold anything, ')' too */
    if (!(p = strrchr(buf, ')')) || p[1] != ' ' || !p[2])
        return -1;
    *main_gone = p[2] == 'Z' || p[2] == 'X';
    /* num_threads is the 20th field, the 18th after the state */
    for (p += 2, i = 0; i < 17; i++)
        if (!(p = strchr(p, ' ')) || !*++p)
            return -1;
    *threads = strtol(p, NULL, 10);
    return *threads > 0 ? 0 : -1;
}

int dist__threads_orphaned(uint64_t *next_look)
{
    uint64_t now = dist__now_ms();
    long threads;
    int main_gone;

    if (now < *next_look)
        return 0;
    *next_look = now + DIST__ORPHAN_LOOK_MS;
    if (proc_threads(&threads, &main_gone) != 0)
        return 0;
    return threads - main_gone <= atomic_load(&lib_threads);
}

/* SIGPIPE stays blocked: one the thread's own writes raised is pending on
 * it, and must not end the process now. */
void dist__thread_orphan_exit(void)
{
    sigset_t mask = opener_mask;

    sigaddset(&mask, SIGPIPE);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
}

void dist__sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000),
                           (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
