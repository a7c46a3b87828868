/*
 * fixture: one private server for a group of lock tests and the library's
 * settings around it (fixture.h).
 */
#define _GNU_SOURCE /* program_invocation_short_name */
#include "fixture.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "testhelp.h"

int fx_dirty;

static tu_redis_t *g_redis;
static const struct fx_settings *g_settings;
static volatile sig_atomic_t g_sigpipes;

static void on_sigpipe(int sig)
{
    (void)sig;
    g_sigpipes = g_sigpipes + 1;
}

struct timespec fx_clock_in(clockid_t clk, double secs)
{
    struct timespec ts;
    long long ns;

    clock_gettime(clk, &ts);
    ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec +
         (long long)(secs * 1e9);
    ts.tv_sec = (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    if (ts.tv_nsec < 0) {
        ts.tv_nsec += 1000000000L;
        ts.tv_sec--;
    }
    return ts;
}

struct timespec realtime_in(double secs)
{
    return fx_clock_in(CLOCK_REALTIME, secs);
}

int fx_sigpipes(void)
{
    return (int)g_sigpipes;
}

int fx_apply(const char *url, const struct fx_settings *s)
{
    if (dist_set_url(url) != 0)
        return -1;
    if (s->watchdog_ms != 0 && dist_set_watchdog_ms(s->watchdog_ms) != 0)
        return -1;
    if (s->timeout_ms != 0 && dist_set_timeout_ms(s->timeout_ms) != 0)
        return -1;
    if (s->waiter_ms != 0 && dist_set_waiter_ms(s->waiter_ms) != 0)
        return -1;
    return 0;
}

void fx_use(tu_redis_t *r, const struct fx_settings *s,
            const char *filter_env)
{
    const char *filter = getenv(filter_env);

    g_redis = r;
    g_settings = s;
    if (filter && *filter)
        cmocka_set_test_filter(filter);
}

int fx_group_setup(void **state)
{
    struct sigaction sa;

    (void)state;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigpipe;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPIPE, &sa, NULL);
    if (tu_redis_start(g_redis) != 0)
        return -1;
    return fx_apply(g_redis->url_unix, g_settings);
}

int fx_group_teardown(void **state)
{
    (void)state;
    dist_shutdown();
    tu_redis_stop(g_redis);
    return 0;
}

int fx_restore_defaults(void **state)
{
    int rc = fx_own_teardown(state);

    if (fx_dirty) {
        dist_set_lost_handler(NULL, NULL);
        (void)fx_apply(g_redis->url_unix, g_settings);
        fx_dirty = 0;
    }
    return rc;
}

tu_proxy_t *fx_proxy_up(tu_redis_t *r)
{
    tu_proxy_t *p = tu_proxy_start(r);
    char url[64];

    if (p == NULL)
        return NULL;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_proxy_port(p));
    fx_dirty = 1;
    if (dist_set_url(url) != 0) {
        tu_proxy_stop(p);
        return NULL;
    }
    return p;
}

int fx_proxy_down(tu_redis_t *r, tu_proxy_t *p)
{
    int rc = dist_set_url(r->url_unix) == 0 ? 0 : -1;

    tu_proxy_stop(p);
    return rc;
}

/* ---- a call on a thread of its own ------------------------------------ */

static void *thread_main(void *arg)
{
    struct fx_thread *t = arg;

    atomic_store(&t->rc, t->fn(t->arg));
    return NULL;
}

void fx_thread_start(struct fx_thread *t, int (*fn)(void *), void *arg)
{
    t->fn = fn;
    t->arg = arg;
    atomic_init(&t->rc, -1);
    assert_int_equal(pthread_create(&t->th, NULL, thread_main, t), 0);
}

int fx_thread_join(struct fx_thread *t)
{
    assert_int_equal(pthread_join(t->th, NULL), 0);
    return atomic_load(&t->rc);
}

static int locker_call(void *arg)
{
    struct fx_locker *l = arg;
    struct timespec dl;
    int rc;

    if (l->secs > 0) {
        dl = realtime_in(l->secs);
        rc = dist_mutex_timedlock(l->m, &dl);
    } else {
        rc = dist_mutex_lock(l->m);
    }
    l->t = tu_now();
    l->rc = rc;
    atomic_store(&l->done, 1);
    if (rc == 0)
        dist_mutex_unlock(l->m);
    return rc;
}

void fx_locker_start(struct fx_locker *l, dist_mutex_t *m, double secs)
{
    memset(l, 0, sizeof *l);
    l->m = m;
    l->secs = secs;
    l->rc = -1;
    atomic_init(&l->done, 0);
    fx_thread_start(&l->th, locker_call, l);
}

void fx_locker_join(struct fx_locker *l)
{
    fx_thread_join(&l->th);
}

void fx_handshake_start(struct fx_handshake *hs, void *(*main)(void *),
                        void *arg)
{
    sem_init(&hs->locked, 0, 0);
    sem_init(&hs->release, 0, 0);
    assert_int_equal(pthread_create(&hs->th, NULL, main, arg), 0);
}

void fx_handshake_hold(struct fx_handshake *hs)
{
    sem_post(&hs->locked);
    while (sem_wait(&hs->release) != 0)
        ;
}

void fx_handshake_release(struct fx_handshake *hs)
{
    sem_post(&hs->release);
}

void fx_handshake_join(struct fx_handshake *hs)
{
    pthread_join(hs->th, NULL);
    sem_destroy(&hs->locked);
    sem_destroy(&hs->release);
}

static void *holder_main(void *arg)
{
    struct fx_holder *h = arg;

    h->lock_rc = h->lock(h->arg);
    h->t_locked = tu_now();
    fx_handshake_hold(&h->hs);
    h->unlock_rc = h->lock_rc == 0 ? h->unlock(h->arg) : -1;
    return NULL;
}

void fx_holder_start(struct fx_holder *h, int (*lock)(void *),
                     int (*unlock)(void *), void *arg)
{
    memset(h, 0, sizeof *h);
    h->lock = lock;
    h->unlock = unlock;
    h->arg = arg;
    h->lock_rc = h->unlock_rc = -1;
    fx_handshake_start(&h->hs, holder_main, h);
    while (sem_wait(&h->hs.locked) != 0)
        ;
    assert_int_equal(h->lock_rc, 0);
}

void fx_holder_release(struct fx_holder *h)
{
    fx_handshake_release(&h->hs);
}

void fx_holder_join(struct fx_holder *h)
{
    fx_handshake_join(&h->hs);
    assert_int_equal(h->unlock_rc, 0);
}

void fx_holder_stop(struct fx_holder *h)
{
    fx_holder_release(h);
    fx_holder_join(h);
}

/* ---- the recording lost handler ------------------------------------------ */

static pthread_mutex_t g_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_lost_names[FX_LOST_MAX][256];
static char g_lost_last[256];
static int g_lost_n; /* calls so far */

void fx_on_lost(const char *name, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_lost_mu);
    if (g_lost_n < FX_LOST_MAX)
        snprintf(g_lost_names[g_lost_n], sizeof g_lost_names[0], "%s", name);
    snprintf(g_lost_last, sizeof g_lost_last, "%s", name);
    g_lost_n++;
    pthread_mutex_unlock(&g_lost_mu);
}

void fx_lost_reset(void)
{
    pthread_mutex_lock(&g_lost_mu);
    g_lost_n = 0;
    g_lost_last[0] = '\0';
    pthread_mutex_unlock(&g_lost_mu);
}

void fx_watch_lost(void)
{
    fx_dirty = 1;
    fx_lost_reset();
    assert_int_equal(dist_set_lost_handler(fx_on_lost, NULL), 0);
}

int fx_lost_calls(const char *name)
{
    int i, n = 0;

    pthread_mutex_lock(&g_lost_mu);
    if (name == NULL)
        n = g_lost_n;
    for (i = 0; name && i < g_lost_n && i < FX_LOST_MAX; i++)
        if (strcmp(g_lost_names[i], name) == 0)
            n++;
    pthread_mutex_unlock(&g_lost_mu);
    return n;
}

const char *fx_lost_name(int i, char *buf, size_t len)
{
    pthread_mutex_lock(&g_lost_mu);
    snprintf(buf, len, "%s",
             i >= 0 && i < g_lost_n && i < FX_LOST_MAX ? g_lost_names[i]
                                                       : "");
    pthread_mutex_unlock(&g_lost_mu);
    return buf;
}

int fx_lost_last_is(const char *name)
{
    int eq;

    pthread_mutex_lock(&g_lost_mu);
    eq = strcmp(g_lost_last, name) == 0;
    pthread_mutex_unlock(&g_lost_mu);
    return eq;
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered, go;
    char first[256];
} held_up = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, "" };

void fx_on_lost_held_up(const char *name, void *arg)
{
    fx_on_lost(name, arg);
    pthread_mutex_lock(&held_up.mu);
    if (!held_up.entered) {
        held_up.entered = 1;
        snprintf(held_up.first, sizeof held_up.first, "%s", name);
        while (!held_up.go)
            pthread_cond_wait(&held_up.cv, &held_up.mu);
    }
    pthread_mutex_unlock(&held_up.mu);
}

void fx_held_up_reset(void)
{
    pthread_mutex_lock(&held_up.mu);
    held_up.entered = held_up.go = 0;
    held_up.first[0] = '\0';
    pthread_mutex_unlock(&held_up.mu);
}

int fx_held_up_entered(double secs, char *first, size_t len)
{
    double end = tu_now() + secs;
    int in;

    pthread_mutex_lock(&held_up.mu);
    while (!held_up.entered && tu_now() < end) {
        pthread_mutex_unlock(&held_up.mu);
        tu_sleep_ms(20);
        pthread_mutex_lock(&held_up.mu);
    }
    in = held_up.entered;
    snprintf(first, len, "%s", held_up.first);
    pthread_mutex_unlock(&held_up.mu);
    return in;
}

void fx_held_up_go(void)
{
    pthread_mutex_lock(&held_up.mu);
    held_up.go = 1;
    pthread_cond_broadcast(&held_up.cv);
    pthread_mutex_unlock(&held_up.mu);
}

/* ---- mutual exclusion across processes ------------------------------------ */

/* Shared between the processes: who is inside, overlaps seen, and each
 * child's report (-1 until it reports). */
struct mx_shared {
    int inside, overlaps;
    int codes[FX_MX_MAX_PROCS];
};

struct mx_thread {
    const struct fx_mx *run;
    const char *counter;
    dist_mutex_t *m;
    struct mx_shared *sh;
    int fail;
};

/* One critical section: the shared flag says nobody else is inside, and
 * the Redis counter goes up by a read and a write.  0 or a failure code. */
static int mx_inside(struct mx_thread *t, redisContext *c)
{
    redisReply *x;
    long long v = 0;
    int rc = 0;

    if (__atomic_add_fetch(&t->sh->inside, 1, __ATOMIC_SEQ_CST) != 1)
        __atomic_add_fetch(&t->sh->overlaps, 1, __ATOMIC_SEQ_CST);
    x = redisCommand(c, "GET %s", t->counter);
    if (!x || (x->type != REDIS_REPLY_STRING && x->type != REDIS_REPLY_NIL))
        rc = 22;
    else if (x->type == REDIS_REPLY_STRING)
        v = strtoll(x->str, NULL, 10);
    if (x)
        freeReplyObject(x);
    if (!rc) {
        x = redisCommand(c, "SET %s %lld", t->counter, v + 1);
        rc = !x || x->type != REDIS_REPLY_STATUS ? 23 : 0;
        if (x)
            freeReplyObject(x);
    }
    __atomic_sub_fetch(&t->sh->inside, 1, __ATOMIC_SEQ_CST);
    return rc;
}

static void *mx_main(void *arg)
{
    struct mx_thread *t = arg;
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectUnixWithTimeout(g_redis->sock, tv);
    int i;

    if (!c || c->err) {
        t->fail = 20;
        if (c)
            redisFree(c);
        return NULL;
    }
    for (i = 0; i < t->run->iters && !t->fail; i++) {
        if (dist_mutex_lock(t->m) != 0) {
            t->fail = 21;
            break;
        }
        t->fail = mx_inside(t, c);
        if (dist_mutex_unlock(t->m) != 0 && !t->fail)
            t->fail = 24;
    }
    redisFree(c);
    return NULL;
}

/* A child's part: its threads, then its report. */
static void mx_child(const struct fx_mx *run, const char *counter,
                     struct mx_shared *sh, int idx)
{
    struct mx_thread t[64];
    pthread_t th[64];
    dist_mutex_t m;
    int i, n = run->threads < 64 ? run->threads : 64, code = 0;

    if ((run->init ? run->init(&m, run->name, run->arg)
                   : dist_mutex_init(&m, run->name, NULL)) != 0)
        _exit(sh->codes[idx] = 10);
    for (i = 0; i < n; i++) {
        t[i] = (struct mx_thread){ run, counter, &m, sh, 0 };
        if (pthread_create(&th[i], NULL, mx_main, &t[i]) != 0)
            _exit(sh->codes[idx] = 11);
    }
    for (i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (t[i].fail && !code)
            code = t[i].fail;
    }
    if (!code && dist_mutex_destroy(&m) != 0)
        code = 12;
    sh->codes[idx] = code;
    _exit(code); /* no leak report of the library's threads at exit */
}

void fx_mx_run(const struct fx_mx *run)
{
    pid_t pids[FX_MX_MAX_PROCS];
    struct mx_shared *sh;
    char *counter;
    int st, i, overlaps;

    assert_true(run->procs > 0 && run->procs <= FX_MX_MAX_PROCS);
    assert_true(run->threads > 0 && run->threads <= 64);
    counter = malloc(strlen(run->name) + sizeof ":counter");
    assert_non_null(counter);
    sprintf(counter, "%s:counter", run->name);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    for (i = 0; i < run->procs; i++)
        sh->codes[i] = -1;
    fflush(NULL);
    for (i = 0; i < run->procs; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            mx_child(run, counter, sh, i);
        assert_true(pids[i] > 0);
    }
    for (i = 0; i < run->procs; i++) {
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        if (sh->codes[i] != 0 || !child_exit_ok(st, 0))
            fail_msg("child %d: reported %d, status 0x%x", i, sh->codes[i],
                     st);
    }
    overlaps = sh->overlaps;
    munmap(sh, sizeof *sh);
    assert_int_equal(overlaps, 0);
    assert_int_equal(tu_cmd_int(g_redis, "GET", counter, NULL),
                     (long long)run->procs * run->threads * run->iters);
    free(counter);
}

/* ---- a call while the loss report is held up ------------------------------ */

/* How long fx_held_up_call waits for the thread to be held up. */
#define HELD_UP_WAIT_S 10.0

/* The watchdog of a test that watches held-up reports.  The round that
 * finds its holds gone comes one renewal period (a third of the watchdog)
 * after they were taken: with a group's 30 s watchdog that was 10 s, the
 * whole of the wait, begun a few ms after the holds were taken, and on a
 * loaded machine the report came those ms too late (test_cohort
 * test_unlock_of_hold_found_lost_alone).  Renewed each second, it comes
 * with 9 s to spare, and the lease (3 s) outlives a round late by more
 * than a second: the watch thread does not declare the holds lost first,
 * newest first, in an order the tests do not expect. */
#define HELD_UP_WATCHDOG_MS 3000UL

void fx_watch_held_up(void)
{
    fx_watch_lost(); /* fx_dirty: the teardown restores the watchdog */
    fx_held_up_reset();
    assert_int_equal(dist_set_watchdog_ms(HELD_UP_WATCHDOG_MS), 0);
    assert_int_equal(dist_set_lost_handler(fx_on_lost_held_up, NULL), 0);
}

void fx_held_up_call(struct fx_held_up_call *c, int (*call)(void *),
                     void *arg, const char *name)
{
    c->rc = c->calls = -1;
    c->entered =
        fx_held_up_entered(HELD_UP_WAIT_S, c->first, sizeof c->first);
    /* the report held up must be another lock's: were it name's own, the
     * call would wait for it, and so for ever (the check then fails) */
    if (c->entered && strcmp(c->first, name) != 0) {
        c->rc = call(arg);
        c->calls = fx_lost_calls(name);
    }
    fx_held_up_go();
}

void fx_held_up_check(const struct fx_held_up_call *c, const char *first,
                      const char *what, const char *kind)
{
    assert_true(c->entered);
    assert_string_equal(c->first, first);
    assert_int_equal(c->rc, EPERM);
    if (c->calls != 1)
        fail_msg("the %s said EPERM with the lost handler called %d times "
                 "for its %s",
                 what, c->calls, kind);
}

pid_t fx_fork_holder(int (*lock)(void *), void *obj)
{
    pid_t pid;
    int rc;

    fx_dirty = 1;
    assert_int_equal(dist_set_watchdog_ms(1500), 0);
    pid = fork_locked(lock, obj, &rc);
    if (pid < 0)
        fail_msg("the child's lock returned %d (-1: no report)", rc);
    return pid;
}

char *fx_name_too_long(void)
{
    char *big = malloc(DIST_NAME_MAX + 2);

    assert_non_null(big);
    memset(big, 'a', DIST_NAME_MAX + 1);
    big[DIST_NAME_MAX + 1] = 0;
    return big;
}

/* ---- objects a test owns ---------------------------------------------- */

struct fx_own {
    union {
        dist_mutex_t m;
        dist_rwlock_t rw;
        dist_cond_t c;
        dist_sem_t s;
    } u;
    enum own_kind { OWN_MUTEX, OWN_RWLOCK, OWN_COND, OWN_SEM } kind;
    /* The keys a lock left free does not have, besides its name: prefixes
     * of derived names (NULL-ended); NULL when the kind's keys may stay
     * (a condition's, a semaphore's) or the test said so (fx_keys_stay). */
    const char *const *gone;
    char name[200];
};

/* What a lock left free leaves in Redis, besides the lock hash (its name):
 * a mutex nothing; a fair one no queue of waiters, no waiter deadlines or
 * marks (their entries go with the waiter); a rwlock no live readers (the
 * last unlock deletes them with the lock). */
static const char *const gone_mutex[] = { NULL };
static const char *const gone_fair[] = { "redisson_lock_queue",
                                         "redisson_lock_timeout",
                                         "distlock_fair_waiters", NULL };
static const char *const gone_rwlock[] = { "distlock_rwlock_readers", NULL };

static struct fx_own g_own[FX_OWN_MAX];
static int g_nown;

static int own_destroy(struct fx_own *o)
{
    switch (o->kind) {
    case OWN_MUTEX:
        return dist_mutex_destroy(&o->u.m);
    case OWN_RWLOCK:
        return dist_rwlock_destroy(&o->u.rw);
    case OWN_COND:
        return dist_cond_destroy(&o->u.c);
    default:
        return dist_sem_destroy(&o->u.s);
    }
}

/* The unlock of o, a mutex or a rwlock (as every checked lock is). */
static int own_unlock(struct fx_own *o)
{
    return o->kind == OWN_MUTEX ? dist_mutex_unlock(&o->u.m)
                                : dist_rwlock_unlock(&o->u.rw);
}

/* The next free slot, named; it is the test's once kept (own_keep), after
 * its init succeeded. */
static struct fx_own *own_slot(const char *test, const char *tag)
{
    struct fx_own *o;

    if (g_nown == FX_OWN_MAX)
        fail_msg("%s: more than %d objects of the test's own", test,
                 FX_OWN_MAX);
    o = &g_own[g_nown];
    test_lock_name(o->name, sizeof o->name, program_invocation_short_name,
                   test, tag);
    return o;
}

static void *own_keep(struct fx_own *o, int rc, enum own_kind kind,
                      const char *const *gone)
{
    if (rc != 0)
        fail_msg("init of %s: %s", o->name, strerror(rc));
    o->kind = kind;
    o->gone = gone;
    g_nown++;
    return &o->u;
}

/* What a mutex made with attr leaves once free: a deferred one's release
 * may still be on its way when the test ends (test_deferred waits for it
 * itself), so it is not checked. */
static const char *const *mutex_gone(const dist_mutexattr_t *attr)
{
    int fair = 0, deferred = 0;

    if (attr && (dist_mutexattr_getfair(attr, &fair) != 0 ||
                 dist_mutexattr_getdeferred(attr, &deferred) != 0))
        fail_msg("a mutex attribute that cannot be read");
    if (deferred)
        return NULL;
    return fair ? gone_fair : gone_mutex;
}

/* Whether o's lock is checked: it has keys that must go, and the group's
 * server is known (not so in a program that runs servers of its own). */
static int own_checked(const struct fx_own *o)
{
    return o->gone && g_redis;
}

/* A key o's lock (checked) has in Redis though it is free, in key; 0 when
 * there is none or the server does not answer (the test's failure says
 * why). */
static int own_left(const struct fx_own *o, char *key, size_t len)
{
    snprintf(key, len, "%s", o->name);
    if (tu_cmd_int(g_redis, "EXISTS", key, NULL) == 1)
        return 1;
    for (int i = 0; o->gone[i]; i++) {
        /* Redisson's rule (names.c): no braces when the name has one */
        snprintf(key, len, strchr(o->name, '{') ? "%s:%s" : "%s:{%s}",
                 o->gone[i], o->name);
        if (tu_cmd_int(g_redis, "EXISTS", key, NULL) == 1)
            return 1;
    }
    return 0;
}

dist_mutex_t *fx_own_mutex(const char *test, const char *tag,
                           const dist_mutexattr_t *attr)
{
    struct fx_own *o = own_slot(test, tag);

    return own_keep(o, dist_mutex_init(&o->u.m, o->name, attr), OWN_MUTEX,
                    mutex_gone(attr));
}

dist_rwlock_t *fx_own_rwlock(const char *test, const char *tag,
                             const dist_rwlockattr_t *attr)
{
    struct fx_own *o = own_slot(test, tag);

    return own_keep(o, dist_rwlock_init(&o->u.rw, o->name, attr), OWN_RWLOCK,
                    gone_rwlock);
}

dist_cond_t *fx_own_cond(const char *test, const char *tag,
                         const dist_condattr_t *attr)
{
    struct fx_own *o = own_slot(test, tag);

    return own_keep(o, dist_cond_init(&o->u.c, o->name, attr), OWN_COND,
                    NULL);
}

dist_sem_t *fx_own_sem(const char *test, const char *tag, unsigned initial,
                       const dist_semattr_t *attr)
{
    struct fx_own *o = own_slot(test, tag);

    return own_keep(o, dist_sem_init(&o->u.s, o->name, initial, attr),
                    OWN_SEM, NULL);
}

/* The slot of obj; what names the caller in the failure when it is not
 * an object of the test's own. */
static struct fx_own *own_of(const void *obj, const char *what)
{
    for (int i = 0; i < g_nown; i++)
        if ((const void *)&g_own[i].u == obj)
            return &g_own[i];
    fail_msg("%s: not an object of the test's own", what);
    return NULL;
}

const char *fx_name(const void *obj)
{
    return own_of(obj, "fx_name")->name;
}

void fx_keys_stay(const void *obj)
{
    own_of(obj, "fx_keys_stay")->gone = NULL;
}

void fx_last_unlock(const void *obj)
{
    struct fx_own *o = own_of(obj, "fx_last_unlock");
    char key[256];
    int rc;

    if (!own_checked(o))
        fail_msg("fx_last_unlock: %s is not a lock whose keys are checked",
                 o->name);
    if ((rc = own_unlock(o)) != 0)
        fail_msg("the unlock of %s: %s", o->name, strerror(rc));
    if (own_left(o, key, sizeof key))
        fail_msg("the last unlock of %s left key %s in Redis", o->name, key);
    if ((rc = own_unlock(o)) != EPERM)
        fail_msg("an unlock of %s after its last returned %d, not EPERM",
                 o->name, rc);
}

int fx_own_teardown(void **state)
{
    int bad = 0;
    char key[256];

    (void)state;
    while (g_nown > 0) {
        struct fx_own *o = &g_own[--g_nown];
        int rc;

        if (own_checked(o) && own_left(o, key, sizeof key)) {
            print_error("the test left %s held: key %s is still in Redis "
                        "(fx_keys_stay when it means to)\n",
                        o->name, key);
            bad = -1;
        }
        rc = own_destroy(o);
        if (rc != 0) {
            print_error("destroy of %s: %s\n", o->name, strerror(rc));
            bad = -1;
        }
    }
    return bad;
}

/* ---- objects a test owns, on a name it chose ---------------------------- */

/* The next free slot, on name. */
static struct fx_own *own_slot_on(const char *name)
{
    struct fx_own *o = own_slot(name, "on");

    if (snprintf(o->name, sizeof o->name, "%s", name) >= (int)sizeof o->name)
        fail_msg("%s: too long a name for an object of the test's own", name);
    return o;
}

dist_mutex_t *fx_mutex_on(const char *name, const dist_mutexattr_t *attr)
{
    struct fx_own *o = own_slot_on(name);

    return own_keep(o, dist_mutex_init(&o->u.m, o->name, attr), OWN_MUTEX,
                    mutex_gone(attr));
}

dist_rwlock_t *fx_rwlock_on(const char *name, const dist_rwlockattr_t *attr)
{
    struct fx_own *o = own_slot_on(name);

    return own_keep(o, dist_rwlock_init(&o->u.rw, o->name, attr), OWN_RWLOCK,
                    gone_rwlock);
}

struct timespec fx_bad_deadline(int i)
{
    struct timespec dl = realtime_in(10.0);

    dl.tv_nsec = i == 0 ? 1000000000L : -1;
    return dl;
}

/* ---- a semaphore a test owns, on a name it chose ------------------------ */

dist_sem_t *fx_sem_on(const char *name, unsigned initial,
                      const dist_semattr_t *attr)
{
    struct fx_own *o = own_slot_on(name);

    return own_keep(o, dist_sem_init(&o->u.s, o->name, initial, attr),
                    OWN_SEM, NULL);
}

/* ---- the last test of a group --------------------------------------- */

void fx_no_channels_left(void **state)
{
    (void)state;
    assert_int_equal(channels_left(g_redis, 3.0), 0);
}
