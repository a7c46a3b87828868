/* util.c: clocks, the per-thread error text and the lost-lock handler.
 * Small pieces every other module leans on. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "stats.h"

static __thread char errbuf[256];

/* The new text is made in a buffer of its own, then copied: a caller may
 * well pass the old text as an argument (dist_last_error(), to add what it
 * was doing in front), and formatting errbuf into itself is undefined
 * behaviour that garbled such messages. */
int dist__err(int code, const char *fmt, ...)
{
    char text[sizeof errbuf];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(errbuf, text, strlen(text) + 1);
    return code;
}

/* Set when the calling thread met a failure that no retry can mend (a
 * certificate refused, a server that speaks another protocol, options that
 * cannot work): a caller that would try again for a while gives up at once. */
static __thread int hopeless;

void dist__hopeless_set(void)
{
    hopeless = 1;
}

int dist__hopeless_take(void)
{
    int was = hopeless;

    hopeless = 0;
    return was;
}

const char *dist_last_error(void)
{
    DIST__KEEP_ERRNO;
    return errbuf;
}

uint64_t dist__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

/* The library's threads run with every signal blocked: the application's
 * handlers never run on them, and SIGPIPE cannot kill anything. */
int dist__thread_start(pthread_t *th, void *(*fn)(void *))
{
    sigset_t all, old;
    int rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(th, NULL, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static __thread int eintr_seen;

void dist__eintr_note(void)
{
    eintr_seen = 1;
}

int dist__eintr_take(void)
{
    int was = eintr_seen;

    eintr_seen = 0;
    return was;
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

void dist__sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
