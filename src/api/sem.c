/* sem.c: the dist_sem API.  A leased semaphore runs on the engine (call.c)
 * with the semaphore's kind (kind_sem.c); a Redisson-compatible one keeps
 * no holders and has its own short wait loop here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#define SEM_MAGIC 0x73656d21u /* "sem!" */

struct dist__sem {
    unsigned magic;
    int mode; /* DIST_SEM_* */
    int unowned;
    long initial, max;
    struct dist__obj *o;       /* leased */
    struct dist__names *names; /* Redisson: the name, */
    struct dist__buf keys[2];  /* S and redisson_sc:{S} */
};

/* ---- objects ---------------------------------------------------------------- */

static void sem_free(struct dist__sem *sm)
{
    sm->magic = 0;
    if (sm->o)
        dist__obj_free(sm->o);
    dist__bufs_free(sm->keys, 2);
    dist__names_unref(sm->names);
    free(sm);
}

/* The leased semaphore's object, its create-if-new settings in the
 * per-name state. */
static int leased_new(struct dist__sem *sm, const char *name,
                      unsigned long lease_ms)
{
    struct dist__semx *sx;
    int rc = dist__obj_new(&dist__sem_kind, name, 0, lease_ms, &sm->o);

    if (rc != 0)
        return rc;
    sx = sm->o->st->ext;
    atomic_store(&sx->initial, sm->initial);
    atomic_store(&sx->max, sm->max);
    atomic_store(&sx->unowned, sm->unowned);
    return 0;
}

static int redisson_new(struct dist__sem *sm, const char *name)
{
    size_t len;
    int rc;

    if ((rc = dist__check_name(name, &len)) != 0)
        return rc;
    if (!(sm->names = dist__names_new(name, len)) ||
        dist__sem_keys(sm->names, 1, sm->keys) != 0)
        return dist__err(ENOMEM, "out of memory");
    return 0;
}

int dist_sem_init(dist_sem_t *s, const char *name, unsigned initial_if_new,
                  const dist_semattr_t *attr)
{
    DIST__KEEP_ERRNO;
    struct dist__sem *sm;
    int mode, rc;

    if ((rc = dist__init_args(s, attr, &dist__attr_sem_mode, &mode)) != 0)
        return rc;
    if (!(sm = calloc(1, sizeof *sm)))
        return dist__err(ENOMEM, "out of memory");
    sm->mode = mode;
    sm->unowned = attr && (attr->__flags & DIST__SATTR_UNOWNED);
    sm->max = attr && attr->__max > 0 ? attr->__max : DIST_SEM_VALUE_MAX;
    sm->initial = (long)initial_if_new;
    if (sm->initial > sm->max) {
        rc = dist__err(EINVAL,
                       "semaphore '%s': initial value %u is past "
                       "its maximum of %ld",
                       name ? name : "", initial_if_new, sm->max);
        free(sm);
        return rc;
    }
    rc = sm->mode == DIST_SEM_LEASED
             ? leased_new(sm, name, attr ? attr->__lease_ms : 0)
             : redisson_new(sm, name);
    if (rc != 0) {
        sem_free(sm);
        return rc;
    }
    sm->magic = SEM_MAGIC;
    memset(s->__reserved, 0, sizeof s->__reserved);
    dist__stamp(s->__reserved);
    __atomic_store_n((struct dist__sem **)&s->__impl, sm, __ATOMIC_RELEASE);
    return 0;
}

static int get_sem(dist_sem_t *s, struct dist__sem **out)
{
    int rc;

    if (!s)
        return dist__err(EINVAL, "semaphore is NULL");
    *out = dist__impl_load(&s->__impl, s->__reserved, SEM_MAGIC, "semaphore",
                           &rc);
    if (rc == 0 && !*out) /* a semaphore is made by its init only */
        rc = dist__err(EINVAL, "semaphore is not initialised (or destroyed)");
    return rc;
}

int dist_sem_destroy(dist_sem_t *s)
{
    DIST__KEEP_ERRNO;
    struct dist__sem *sm;
    int rc;

    if ((rc = get_sem(s, &sm)) != 0)
        return rc;
    /* With unowned posts a permit taken is its taker's only to give back
     * if it dies: the ones this process's threads still hold are
     * consumed, as sem_wait's are (a consumer's last item, a thread that
     * ended holding one).  Otherwise they are locks, and in the way. */
    if (sm->o && sm->unowned && (rc = dist__sem_drop(sm->o)) != 0)
        return rc;
    if (sm->o && dist__held(sm->o, 0) > 0)
        return dist__err(EBUSY, "semaphore '%s': this thread holds permits",
                         sm->o->st->names->name.p);
    if (sm->o) {
        /* another thread's holds make it EBUSY as for a lock */
        void *impl = sm->o;
        unsigned long ours[2] = { 0, 0 }; /* the engine's, no stamp */
        if ((rc = dist__obj_destroy(&dist__sem_kind, &impl, ours)) != 0)
            return rc;
        sm->o = NULL;
    }
    __atomic_store_n((struct dist__sem **)&s->__impl, NULL, __ATOMIC_RELEASE);
    sem_free(sm);
    return 0;
}

/* ---- the Redisson-compatible semaphore ---------------------------------------- */

static const char *rs_name(const struct dist__sem *sm)
{
    return sm->names->name.p;
}

/* One try: 1 taken, 0 none free, or -EIO. */
static int rs_try(struct dist__sem *sm)
{
    char initial[24];
    struct dist__buf kv[2] = { sm->keys[0], { initial, 0 } };
    redisReply *r;
    int rc, taken;

    kv[1].len = (size_t)snprintf(initial, sizeof initial, "%ld", sm->initial);
    rc = dist__route_run(0, DIST__S_RSEM_ACQUIRE, 1, kv, 2, &r);
    if (rc != 0)
        return -(rc == ENOMEM ? ENOMEM : EIO);
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return -dist__err(EIO, "unexpected reply to rsem_acquire");
    }
    taken = r->integer == 1;
    freeReplyObject(r);
    return taken;
}

static uint64_t next_try(uint64_t deadline)
{
    uint64_t until = dist__now_ms() + dist__waiter_ms();

    return deadline && deadline < until ? deadline : until;
}

static void rs_put_cancelled(void *arg)
{
    dist__sub_put(arg);
}

/* rs_wait's loop, on ch. */
static int rs_loop(struct dist__sem *sm, struct dist__chan *ch,
                   const struct dist__deadline *dl, uint64_t deadline,
                   int intr)
{
    int rc, last = 0;

    dist__sub_wait_ready(ch, next_try(deadline));
    for (;;) {
        unsigned long gen = dist__sub_gen(ch);
        if ((rc = rs_try(sm)) != 0)
            return rc > 0 ? 0 : -rc;
        if (last)
            return dist__err(ETIMEDOUT, "semaphore '%s': timed out",
                             rs_name(sm));
        if (((intr & DIST__SUB_EINTR) && dist__eintr_take()) ||
            dist__sub_wait_intr(ch, gen, next_try(deadline), intr) == EINTR)
            return dist__err(EINTR,
                             "semaphore '%s': the wait was "
                             "interrupted by a signal handler",
                             rs_name(sm));
        if (dist__deadline_step(dl, &deadline))
            last = 1;
    }
}

/* Tries, then sleeps on the channel between tries, as the engine's wait
 * loop does (the permit count has no lease to bound the sleep: a missed
 * message is made up for at the next try, a waiter window later).  intr
 * as the engine's (dist__acquire_intr): a cancelled waiter gives its
 * channel back. */
static int rs_wait(struct dist__sem *sm, int try_only,
                   const struct dist__deadline *dl, int intr)
{
    struct dist__chan *ch;
    uint64_t deadline = 0;
    int rc;

    if ((rc = rs_try(sm)) != 0)
        return rc > 0 ? 0 : -rc;
    if (try_only)
        return dist__err(EAGAIN, "semaphore '%s' has no free permit",
                         rs_name(sm));
    if (dl && ((rc = dist__deadline_ms(dl, &deadline)) != 0))
        return rc;
    if (!(ch = dist__sub_get(&sm->keys[1])))
        return dist__err(ENOMEM, "out of memory");
    pthread_cleanup_push(rs_put_cancelled, ch);
    rc = rs_loop(sm, ch, dl, deadline, intr);
    pthread_cleanup_pop(0);
    dist__sub_put(ch);
    return rc;
}

/* rsem_count: 0 with *value, EOVERFLOW, EIO. */
static int rs_count(struct dist__sem *sm, const char *op, long n, long *value)
{
    char num[24], initial[24], max[24];
    struct dist__buf kv[7] = {
        sm->keys[0],
        sm->keys[1],
        dist__arg(op),
        { num, 0 },
        { initial, 0 },
        { max, 0 },
        dist__arg(dist__publish_cmd()),
    };
    redisReply *r;
    long long v;
    int rc;

    kv[3].len = (size_t)snprintf(num, sizeof num, "%ld", n);
    kv[4].len = (size_t)snprintf(initial, sizeof initial, "%ld", sm->initial);
    kv[5].len = (size_t)snprintf(max, sizeof max, "%ld", sm->max);
    rc = dist__route_run(0, DIST__S_RSEM_COUNT, 2, kv, 7, &r);
    if (rc != 0)
        return rc == ENOMEM ? ENOMEM : EIO;
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return dist__err(EIO, "unexpected reply to rsem_count");
    }
    v = r->integer;
    freeReplyObject(r);
    if (!dist__sem_count_possible(op, n, v))
        return dist__err(EIO,
                         "semaphore '%s': impossible reply to "
                         "rsem_count %s %ld: %lld",
                         rs_name(sm), op, n, v);
    if (v < 0)
        return dist__err(EOVERFLOW,
                         "semaphore '%s': %ld more permits would "
                         "pass its maximum of %ld",
                         rs_name(sm), n, sm->max);
    if (value)
        *value = (long)v;
    return 0;
}

/* ---- waiting and posting -------------------------------------------------------- */

/* try_only, or a wait (until dl, or NULL) whose sleeps end as intr says
 * (DIST__SUB_* of pubsub.h). */
static int sem_take(dist_sem_t *s, int try_only,
                    const struct dist__deadline *dl, int intr)
{
    struct dist__sem *sm;
    int rc;

    if ((rc = get_sem(s, &sm)) != 0)
        return rc;
    if (sm->mode == DIST_SEM_REDISSON) {
        dist__eintr_take(); /* a handler that ran before the call */
        do
            rc = rs_wait(sm, try_only, dl, intr);
        while (rc == EINTR && !dl && dist__handlers_restart());
        return rc;
    }
    if (!try_only) {
        do
            rc = dist__acquire_intr(sm->o, dl, intr);
        while (rc == EINTR && !dl && dist__handlers_restart());
        return rc;
    }
    rc = dist__acquire(sm->o, 0, 1, NULL);
    if (rc == EBUSY)
        return dist__err(EAGAIN, "semaphore '%s' has no free permit",
                         sm->o->st->names->name.p);
    return rc;
}

/* How the waits end early, as glibc's do: a signal handler ends them with
 * EINTR (an untimed wait goes on when every handler has SA_RESTART, as
 * glibc's restarted futex wait does), and, when the caller's cancellation
 * was enabled (cancel_was), they are cancellation points all through: a
 * request acts as they begin or while they sleep, never with a permit
 * taken. */
static int wait_intr(int cancel_was)
{
    return DIST__SUB_EINTR |
           (cancel_was == PTHREAD_CANCEL_ENABLE ? DIST__SUB_CANCEL : 0);
}

int dist_sem_wait(dist_sem_t *s)
{
    DIST__CANCEL_POINT; /* as POSIX has it: nothing changed yet */
    DIST__KEEP_ERRNO;
    return sem_take(s, 0, NULL, wait_intr(dist__cancel_saved));
}

int dist_sem_trywait(dist_sem_t *s)
{
    DIST__KEEP_ERRNO;
    return sem_take(s, 1, NULL, 0);
}

/* One body for the timed forms: dist_sem_timedwait must not call
 * dist_sem_clockwait, whose entry would see cancellation already off. */
static int sem_timed(dist_sem_t *s, clockid_t clockid,
                     const struct timespec *abstime, int cancel_was)
{
    struct dist__deadline dl;
    int rc;

    if ((rc = dist__deadline_set(&dl, clockid, abstime)) != 0)
        return rc;
    return sem_take(s, 0, &dl, wait_intr(cancel_was));
}

int dist_sem_timedwait(dist_sem_t *s, const struct timespec *abstime)
{
    DIST__CANCEL_POINT; /* as POSIX has it: nothing changed yet */
    DIST__KEEP_ERRNO;
    return sem_timed(s, CLOCK_REALTIME, abstime, dist__cancel_saved);
}

int dist_sem_clockwait(dist_sem_t *s, clockid_t clockid,
                       const struct timespec *abstime)
{
    DIST__CANCEL_POINT; /* as POSIX has it: nothing changed yet */
    DIST__KEEP_ERRNO;
    return sem_timed(s, clockid, abstime, dist__cancel_saved);
}

/* Leased: the caller's own permits go back one by one, then new ones are
 * added when unowned posts are allowed. */
static int leased_post(struct dist__sem *sm, unsigned n)
{
    unsigned i;
    int rc;

    for (i = 0; i < n; i++) {
        /* a permit found lost is let go of and reported now, before the
         * post says so, as an unlock does with a lost hold (left to the
         * renewal thread, the report could come long after the EPERM) */
        if (dist__hold_found_lost(sm->o) && !sm->unowned)
            return dist__err(EPERM,
                             "semaphore '%s': this thread's permit "
                             "was lost (its lease ran out or it was forced) "
                             "before this post",
                             sm->o->st->names->name.p);
        if (dist__held(sm->o, 0) == 0)
            break;
        if ((rc = dist__release(sm->o)) != 0)
            return rc;
    }
    if (i == n)
        return 0;
    if (!sm->unowned)
        return dist__err(EPERM,
                         "semaphore '%s': this thread holds no permit "
                         "(and the semaphore does not allow unowned posts)",
                         sm->o->st->names->name.p);
    return dist__sem_count(sm->o, "add", (long)(n - i), NULL, NULL);
}

int dist_sem_post_multiple(dist_sem_t *s, unsigned n)
{
    DIST__KEEP_ERRNO;
    struct dist__sem *sm;
    int rc;

    if ((rc = get_sem(s, &sm)) != 0)
        return rc;
    if (n == 0)
        return 0;
    if ((long)n > sm->max)
        return dist__err(EOVERFLOW,
                         "%u permits are more than the maximum "
                         "of %ld",
                         n, sm->max);
    if (sm->mode == DIST_SEM_REDISSON)
        return rs_count(sm, "add", (long)n, NULL);
    return leased_post(sm, n);
}

int dist_sem_post(dist_sem_t *s)
{
    DIST__KEEP_ERRNO;
    return dist_sem_post_multiple(s, 1);
}

/* A count op ("get" or "set") on either mode's semaphore: 0 with *value
 * (may be NULL), EOVERFLOW, EIO. */
static int count_op(struct dist__sem *sm, const char *op, long n, long *value)
{
    return sm->mode == DIST_SEM_REDISSON
               ? rs_count(sm, op, n, value)
               : dist__sem_count(sm->o, op, n, value, NULL);
}

int dist_sem_getvalue(dist_sem_t *s, int *value)
{
    DIST__KEEP_ERRNO;
    struct dist__sem *sm;
    long v = 0;
    int rc;

    if (!value)
        return dist__err(EINVAL, "value is NULL");
    if ((rc = get_sem(s, &sm)) != 0)
        return rc;
    if ((rc = count_op(sm, "get", 0, &v)) == 0)
        *value = (int)v;
    return rc;
}

int dist_sem_setvalue(dist_sem_t *s, unsigned value)
{
    DIST__KEEP_ERRNO;
    struct dist__sem *sm;
    int rc;

    if ((rc = get_sem(s, &sm)) != 0)
        return rc;
    if ((long)value > sm->max)
        return dist__err(EINVAL, "value %u is past the maximum of %ld", value,
                         sm->max);
    return count_op(sm, "set", (long)value, NULL);
}
