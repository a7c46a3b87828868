/*
 * distlock-torture: many workers on a few locks while a nemesis injects
 * faults, every section recorded, the history judged by torture_check.
 *
 *   distlock-torture [--secs N] [--procs P] [--threads T] [--seed S]
 *                    [--no-restart] [--sabotage] [--verbose] [--proxy]
 *                    [--sentinel [--strict-failover]] [--strict-fence]
 *                    [--only WORD]
 *
 * --no-restart leaves out the server restarts; --sabotage makes 1% of the
 * plain mutex's sections skip the lock, which the checker must catch (exit
 * 1); --verbose lists the faults, the lost-handler calls and every unlock
 * that gave EPERM, with their times.  --proxy puts the fault proxy
 * (tests/harness_proxy.h) between the workers' locks and the server and
 * adds its faults to the nemesis: latency, a blackhole shorter than the
 * command timeout and one longer than the lease, and resets.
 * --sentinel runs the locks on a master + 1 replica + 3 sentinels with
 * replica sync on, and makes every other fault a SENTINEL FAILOVER (no
 * server restarts, no proxy); its window, until the old master is a
 * replica, counts as one where data may be lost, unless --strict-failover
 * (then the split-brain stretch shows up as violations, docs/testing.md).
 * --strict-fence makes a legitimate holder refused by the fence (below) a
 * violation; without it the run reports their number only.  --only WORD
 * leaves the nemesis only the faults whose label (the table's names:
 * "latency", "blackhole", "PAUSE ALL") contains WORD, to chase one fault's
 * violation in shorter runs.
 * At the end, before the workers stop, their threads (/proc/<pid>/task),
 * sockets (/proc/<pid>/fd) and clients (CLIENT LIST) must be within bounds.
 * TORTURE_SECS (default 60) sets the length when --secs is not given.  It
 * starts its own redis-server (tests/harness_server.h: loopback, private
 * dir, AOF with appendfsync always, DEBUG enabled) and stops it at the end.
 *
 * P worker processes (default 4) of T threads (default 4) take three locks,
 * a plain mutex, a fair mutex and a rwlock, with lock, trylock, clocklock
 * (short deadlines), recursive re-locks, rdlock and wrlock, hold them 0-3
 * ms, and inside each exclusive section bump a Redis counter on their own
 * hiredis connection: a GET at its start and a SET of the value read plus
 * one at its end, both through the fence (FCALL distlock_fenced with the
 * hold's token, fence/fence.lua) on a server of their own that no fault
 * touches, the counter server.  The checker rebuilds the fence's order
 * from the values written and counts two figures: stale writes accepted
 * (a call accepted with a token lower than one accepted before it: a
 * violation) and legitimate holders refused (a STALE to a holder whose
 * hold was never reported lost).  They also take permits of a leased
 * semaphore of two (wait, trywait, clockwait; a shared-memory count of
 * holders), and put items in and take them out of a bounded queue in
 * shared memory, guarded by a distributed mutex with a "not empty" and a
 * "not full" condition variable (even threads put, odd ones take; waits
 * untimed or with short deadlines).  Every attempt and section goes to
 * a shared-memory history.  The main process never calls distlock: it is
 * the nemesis (faults below, each logged with its window), reaps and
 * restarts killed workers, and at the end runs the checker and prints the
 * table.  Exit status: 0 clean, 1 violations, 2 could not run.
 *
 * Faults: SIGSTOP of a worker past its lease; SIGKILL of a worker that
 * holds; CLIENT KILL TYPE normal and TYPE pubsub; CLIENT PAUSE WRITE and
 * ALL shorter and longer than the command timeout; SCRIPT FLUSH; DEBUG
 * SLEEP past the command timeout; server restart from the AOF (nothing may
 * be lost); server restart with its data removed (every loss must reach
 * the lost handler).  All of them on the locks' server, none on the
 * counter server: the fence must hold whatever happens to the locks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "distlock.h"
#include "harness_proxy.h"
#include "harness_sentinel.h"
#include "harness_server.h"
#include "torture_check.h"

extern const char dist_fence_lib[]; /* made from fence/fence.lua */

/* The library's settings for the run: short, so that faults outlast them. */
#define WATCHDOG_MS 1000UL
#define TIMEOUT_MS  500UL
#define WAITER_MS   1000UL
#define MS          1000000ULL

#define NLOCKS      5
#define SEM_PERMITS 2 /* the semaphore's */
#define QCAP        4 /* the queue's room, in items */
#define MAXP        16
#define MAXT        16
#define CAP_LOST    100000UL

/* L_SEM: a leased semaphore of SEM_PERMITS; L_QUEUE: the mutex of a
 * bounded producer/consumer queue in shared memory, with two condition
 * variables ("not empty", "not full"). */
enum { L_MUTEX, L_FAIR, L_RW, L_SEM, L_QUEUE };
static const char *const lock_label[NLOCKS] = { "mutex", "fair", "rwlock",
                                                "sem", "queue" };

enum fault_kind {
    F_STOP,
    F_KILL,
    F_KILL_NORMAL,
    F_KILL_PUBSUB,
    F_PAUSE_W_SHORT,
    F_PAUSE_W_LONG,
    F_PAUSE_ALL_SHORT,
    F_PAUSE_ALL_LONG,
    F_SCRIPT_FLUSH,
    F_DEBUG_SLEEP,
    F_RESTART_AOF,
    F_RESTART_EMPTY,
    /* --proxy only: the workers' lock connections go through the fault
     * proxy (tests/harness_proxy.h) */
    F_LATENCY,
    F_HOLE_SHORT,
    F_HOLE_LONG,
    F_RESET,
    F_FAILOVER, /* --sentinel only */
    F_COUNT
};
static const char *const fault_label[F_COUNT] = {
    "SIGSTOP > lease",       "SIGKILL of a holder",
    "CLIENT KILL normal",    "CLIENT KILL pubsub",
    "PAUSE WRITE < timeout", "PAUSE WRITE > timeout",
    "PAUSE ALL < timeout",   "PAUSE ALL > timeout",
    "SCRIPT FLUSH",          "DEBUG SLEEP > timeout",
    "restart, AOF always",   "restart, data lost",
    "proxy latency",         "blackhole < timeout",
    "blackhole > lease",     "proxy resets connections",
    "Sentinel failover"
};

/* What a worker thread is in the middle of, for the parent to close its
 * record when the process is killed. */
struct slot {
    _Atomic long open; /* record index of its current attempt, -1 */
    _Atomic int occ;   /* 1 + lock*2 + (read ? 1 : 0) it counts in; 0 */
};

struct arena {
    atomic_int stop;
    atomic_ulong nrec, nlost;
    unsigned long cap;
    atomic_int occ_excl[NLOCKS], occ_read[NLOCKS];
    struct slot slot[MAXP][MAXT];
    atomic_int threads0[MAXP]; /* threads of worker p before it started any */
    /* the queue: items q_head..q_tail-1 are in it, their numbers in q_ring;
     * q_next numbers the next item put (tc_item in I) */
    atomic_ulong q_head, q_tail, q_next;
    atomic_ulong q_ring[QCAP];
    struct tc_lost lost[CAP_LOST];
    struct tc_rec rec[];
};

static struct {
    int secs, procs, threads, restarts, sabotage, verbose, proxy, sentinel;
    int strict_failover, strict_fence;
    const char *only; /* --only: the faults whose label contains it */
    unsigned long seed;
    /* a lock's counter (the data key) and the fence that guards it */
    char names[NLOCKS][64], ctr[NLOCKS][64], fence[NLOCKS][64];
    int cport; /* the counter server's port */
} opt = { 60, 4, 4, 1, 0, 0, 0, 0, 0, 0, NULL, 0, { "" }, { "" }, { "" }, 0 };

static struct arena *A;
static struct tc_item *I; /* the queue's items, shared like A */
static unsigned long icap;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------------ */
/* Workers                                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t my_proc; /* incarnation id of this worker process */
static dist_mutex_t locks_m[2];
static dist_rwlock_t lock_rw;
static dist_sem_t sem;
static dist_mutex_t q_mutex;
static dist_cond_t q_nonempty, q_nonfull;

static void on_lost(const char *name, void *arg)
{
    unsigned long i = atomic_fetch_add(&A->nlost, 1);
    (void)arg;
    if (i >= CAP_LOST)
        return;
    for (uint16_t l = 0; l < NLOCKS; l++)
        if (strcmp(name, opt.names[l]) == 0)
            A->lost[i].lock = l;
    A->lost[i].proc = my_proc;
    A->lost[i].ns = now_ns();
}

struct worker {
    int p, t;
    uint64_t rs;
    redisContext *c; /* this thread's connection for the counter */
};

static struct tc_rec *new_rec(struct worker *w, int lock, int mode, int op)
{
    unsigned long i = atomic_fetch_add(&A->nrec, 1);
    struct tc_rec *r;

    if (i >= A->cap)
        return NULL;
    r = &A->rec[i];
    r->proc = my_proc;
    r->lock = (uint16_t)lock;
    r->mode = (uint8_t)mode;
    r->op = (uint8_t)op;
    r->unlock_rc = r->token_rc = -1;
    r->call_ns = now_ns();
    atomic_store(&A->slot[w->p][w->t].open, (long)i);
    return r;
}

/* This thread's connection to the counter server, made again after an
 * error; -1: none now. */
static int counter_conn(struct worker *w)
{
    struct timeval tv = { 3, 0 };

    if (w->c && !w->c->err)
        return 0;
    if (w->c)
        redisFree(w->c);
    w->c = redisConnectWithTimeout("127.0.0.1", opt.cport, tv);
    if (!w->c || w->c->err)
        return -1;
    redisSetTimeout(w->c, tv);
    return 0;
}

/* FCALL distlock_fenced 2 FENCE DATA TOKEN cmd arg...: cmd on the lock's
 * counter if the hold's token passes the fence.  NULL: no reply came. */
static redisReply *fenced(struct worker *w, const struct tc_rec *r, int argc,
                          const char *const *args)
{
    const char *argv[9] = { "FCALL", "distlock_fenced", "2",
                            opt.fence[r->lock], opt.ctr[r->lock] };
    char tok[24];

    snprintf(tok, sizeof tok, "%" PRIu64, r->token);
    argv[5] = tok;
    for (int k = 0; k < argc && k < 3; k++)
        argv[6 + k] = args[k];
    return redisCommandArgv(w->c, 6 + argc, argv, NULL);
}

/* An answer of the fence other than a value: STALE (the hold is refused,
 * nothing changed) or another error, recorded with its time.  Non-zero:
 * it was such an answer. */
static int refused(struct tc_rec *r, const redisReply *x)
{
    if (x->type == REDIS_REPLY_STRING || x->type == REDIS_REPLY_NIL)
        return 0;
    r->fence_ns = now_ns();
    if (x->type == REDIS_REPLY_ERROR && strncmp(x->str, "STALE", 5) == 0)
        r->flags |= TC_F_STALE;
    else
        r->flags |= TC_F_FENCE_ERR;
    return 1;
}

/* The counter read through the fence with the hold's token, at the
 * start of the section (the read records the token, so that an older
 * holder that read the same value is refused at its write).  No token, no
 * read (distlock-fence(7)).  Non-zero: nothing to write back. */
static int counter_read(struct worker *w, struct tc_rec *r)
{
    static const char *const get[] = { "GET" };
    redisReply *x;

    if (r->token_rc != 0 || counter_conn(w) != 0)
        return -1;
    if (!(x = fenced(w, r, 1, get)))
        return -1;
    if (refused(r, x)) {
        freeReplyObject(x);
        return -1;
    }
    r->rval = x->type == REDIS_REPLY_STRING ? strtoll(x->str, NULL, 10) : 0;
    r->flags |= TC_F_READ;
    freeReplyObject(x);
    return 0;
}

/* The value read plus one written back through the fence, at the end of
 * the section: a hold lost meanwhile (its holder stopped past its lease,
 * cut off) is refused here once its successor has been through.  SET ...
 * GET gives back the value replaced: another than the one read is a lost
 * update.  A write sent without its reply may have been applied: the
 * record says so until the reply comes. */
static void counter_write(struct worker *w, struct tc_rec *r)
{
    const char *set[3] = { "SET", NULL, "GET" };
    char buf[32];
    redisReply *x;

    if (counter_conn(w) != 0)
        return;
    snprintf(buf, sizeof buf, "%" PRId64, r->rval + 1);
    set[1] = buf;
    r->flags |= TC_F_COUNT_UNSURE;
    x = fenced(w, r, 3, set);
    if (!x)
        return;
    r->flags &= (uint16_t)~TC_F_COUNT_UNSURE;
    if (!refused(r, x)) {
        r->fence_ns = now_ns();
        r->flags |= TC_F_COUNTED;
        if ((x->type == REDIS_REPLY_STRING ? strtoll(x->str, NULL, 10) : 0) !=
            r->rval)
            r->flags |= TC_F_CLOBBER;
    }
    freeReplyObject(x);
}

/* Count this thread in the lock's occupancy and see whether the mode's
 * limit held: an exclusive holder alone (a semaphore's holders no more
 * than its permits), readers only without a writer. */
static void occ_enter(struct worker *w, struct tc_rec *r)
{
    int l = r->lock, rd = r->mode == TC_READ, bad;
    int limit = l == L_SEM ? SEM_PERMITS : 1;

    atomic_store(&A->slot[w->p][w->t].occ, 1 + l * 2 + rd);
    if (rd) {
        atomic_fetch_add(&A->occ_read[l], 1);
        bad = atomic_load(&A->occ_excl[l]) > 0;
    } else {
        bad = atomic_fetch_add(&A->occ_excl[l], 1) >= limit ||
              atomic_load(&A->occ_read[l]) > 0;
    }
    if (bad)
        r->flags |= TC_F_OCC_BAD;
}

static void occ_leave_code(int code)
{
    int l = (code - 1) / 2, rd = (code - 1) % 2;
    atomic_fetch_sub(rd ? &A->occ_read[l] : &A->occ_excl[l], 1);
}

static void occ_leave(struct worker *w)
{
    occ_leave_code(atomic_load(&A->slot[w->p][w->t].occ));
    atomic_store(&A->slot[w->p][w->t].occ, 0);
}

static int do_lock(int l, int mode, int op, uint64_t deadline)
{
    struct timespec ts = { (time_t)(deadline / 1000000000ULL),
                           (long)(deadline % 1000000000ULL) };

    if (l != L_RW) {
        dist_mutex_t *m = &locks_m[l];
        return op == TC_OP_TRY ? dist_mutex_trylock(m)
               : op == TC_OP_TIMED
                   ? dist_mutex_clocklock(m, CLOCK_MONOTONIC, &ts)
                   : dist_mutex_lock(m);
    }
    if (mode == TC_READ)
        return op == TC_OP_TRY ? dist_rwlock_tryrdlock(&lock_rw)
               : op == TC_OP_TIMED
                   ? dist_rwlock_clockrdlock(&lock_rw, CLOCK_MONOTONIC, &ts)
                   : dist_rwlock_rdlock(&lock_rw);
    return op == TC_OP_TRY ? dist_rwlock_trywrlock(&lock_rw)
           : op == TC_OP_TIMED
               ? dist_rwlock_clockwrlock(&lock_rw, CLOCK_MONOTONIC, &ts)
               : dist_rwlock_wrlock(&lock_rw);
}

static int do_unlock(int l)
{
    return l == L_RW ? dist_rwlock_unlock(&lock_rw)
                     : dist_mutex_unlock(&locks_m[l]);
}

static int do_token(int l, uint64_t *t)
{
    return l == L_RW ? dist_rwlock_token(&lock_rw, t)
                     : dist_mutex_token(&locks_m[l], t);
}

/* A recursive re-lock inside the section: its own record, not a section. */
static void nested(struct worker *w, struct tc_rec *outer)
{
    struct tc_rec *r = new_rec(w, outer->lock, outer->mode, TC_OP_NESTED);
    long idx = outer - A->rec;

    if (!r)
        return;
    r->rc = (int16_t)do_lock(outer->lock, outer->mode, TC_OP_LOCK, 0);
    r->ret_ns = now_ns();
    if (r->rc == 0) {
        r->end_ns = now_ns();
        r->unlock_rc = (int16_t)do_unlock(outer->lock);
    }
    atomic_store(&A->slot[w->p][w->t].open, idx);
}

/* An exclusive section reads the counter first and writes it back last,
 * so that a fault in between (a stop, a blackhole) falls inside the
 * read-modify-write the fence must protect. */
static void section(struct worker *w, struct tc_rec *r)
{
    int rd = -1;

    occ_enter(w, r);
    if (r->mode != TC_READ) {
        uint64_t t = 0;
        r->token_rc = (int16_t)do_token(r->lock, &t);
        r->token = t;
        rd = counter_read(w, r);
    }
    if (rnd(&w->rs) % 100 < 15)
        nested(w, r);
    sleep_us((long)(rnd(&w->rs) % 3000));
    if (rd == 0)
        counter_write(w, r);
    occ_leave(w);
    r->end_ns = now_ns();
    r->unlock_rc = (int16_t)do_unlock(r->lock);
}

/* --sabotage: a section that never took the lock, recorded as if it had,
 * to show that the checker catches what a broken lock would do. */
static void fake_section(struct worker *w, struct tc_rec *r)
{
    int rd;

    r->rc = 0;
    r->ret_ns = now_ns();
    occ_enter(w, r);
    r->token_rc = 0;
    r->token = 1;
    rd = counter_read(w, r);
    sleep_us((long)(rnd(&w->rs) % 3000));
    if (rd == 0)
        counter_write(w, r);
    occ_leave(w);
    r->end_ns = now_ns();
    r->unlock_rc = 0;
}

/* ---- the semaphore ---- */

/* A permit taken by wait, trywait or clockwait, held 0-3 ms while counted
 * in the occupancy, posted back. */
static void sem_op(struct worker *w, struct tc_rec *r)
{
    struct timespec ts = { (time_t)(r->deadline_ns / 1000000000ULL),
                           (long)(r->deadline_ns % 1000000000ULL) };
    int rc = r->op == TC_OP_TRY ? dist_sem_trywait(&sem)
             : r->op == TC_OP_TIMED
                 ? dist_sem_clockwait(&sem, CLOCK_MONOTONIC, &ts)
                 : dist_sem_wait(&sem);

    r->rc = (int16_t)rc;
    r->ret_ns = now_ns();
    if (rc != 0)
        return;
    occ_enter(w, r);
    sleep_us((long)(rnd(&w->rs) % 3000));
    occ_leave(w);
    r->end_ns = now_ns();
    r->unlock_rc = (int16_t)dist_sem_post(&sem);
}

/* ---- the queue ---- */

static int q_empty(void)
{
    return atomic_load(&A->q_tail) == atomic_load(&A->q_head);
}

static int q_full(void)
{
    return atomic_load(&A->q_tail) - atomic_load(&A->q_head) >= QCAP;
}

/* A hold of the queue's mutex begins (the first, or one after a condition
 * wait): counted in the occupancy, its fencing token read. */
static void q_enter(struct worker *w, struct tc_rec *r)
{
    uint64_t t = 0;

    occ_enter(w, r);
    r->token_rc = (int16_t)dist_mutex_token(&q_mutex, &t);
    r->token = t;
}

static void q_leave(struct worker *w, struct tc_rec *r)
{
    occ_leave(w);
    r->end_ns = now_ns();
}

/* A condition wait, untimed or with a deadline 20-300 ms away. */
static int q_cond_wait(struct worker *w, struct tc_rec *n, dist_cond_t *cv)
{
    struct timespec ts;

    if (rnd(&w->rs) % 2)
        return dist_cond_wait(cv, &q_mutex);
    n->deadline_ns = n->call_ns + (20 + rnd(&w->rs) % 280) * MS;
    ts.tv_sec = (time_t)(n->deadline_ns / 1000000000ULL);
    ts.tv_nsec = (long)(n->deadline_ns % 1000000000ULL);
    return dist_cond_clockwait(cv, &q_mutex, CLOCK_MONOTONIC, &ts);
}

/* Waits on cv: the hold r ends, and the one after the wait is a record of
 * its own (op), returned; NULL when the mutex is not held after it.  EPERM
 * means r's hold had been lost: that is r's unlock result.  After EIO the
 * mutex may still be held (the wait failed before giving it up). */
static struct tc_rec *q_wait(struct worker *w, struct tc_rec *r,
                             dist_cond_t *cv, int op)
{
    struct tc_rec *n;
    uint64_t t;
    int rc;

    q_leave(w, r);
    n = new_rec(w, L_QUEUE, TC_EXCL, op);
    if (!n) {
        atomic_store(&A->stop, 1);
        r->unlock_rc = (int16_t)dist_mutex_unlock(&q_mutex);
        return NULL;
    }
    rc = q_cond_wait(w, n, cv);
    n->ret_ns = now_ns();
    if (rc == EPERM)
        r->unlock_rc = EPERM;
    if (rc == ETIMEDOUT) {
        n->flags |= TC_F_TIMED_OUT;
        rc = 0;
    } else if (rc == EIO && dist_mutex_token(&q_mutex, &t) == 0) {
        n->flags |= TC_F_WAIT_EIO;
        rc = 0;
    }
    n->rc = (int16_t)rc;
    if (rc != 0)
        return NULL;
    q_enter(w, n);
    if (n->flags & TC_F_WAIT_EIO) {
        n->token_rc = -1; /* the same hold goes on: not a new grant */
        n->token = 0;
    }
    return n;
}

/* Under the mutex: a new item at the tail, then "not empty" signalled. */
static void q_put(void)
{
    unsigned long id = atomic_fetch_add(&A->q_next, 1);
    unsigned long tail = atomic_load(&A->q_tail);
    struct tc_item *it;

    if (id >= icap) {
        atomic_store(&A->stop, 1);
        return;
    }
    it = &I[id];
    it->put_proc = my_proc;
    it->put_ns = now_ns();
    atomic_store(&A->q_ring[tail % QCAP], id);
    atomic_store(&A->q_tail, tail + 1);
    if (dist_cond_signal(&q_nonempty) != 0)
        it->flags |= TC_I_NOSIGNAL;
}

/* Under the mutex: the head item out, then "not full" signalled. */
static void q_take(void)
{
    unsigned long head = atomic_load(&A->q_head);
    unsigned long id = atomic_load(&A->q_ring[head % QCAP]);
    struct tc_item *it = &I[id < icap ? id : 0];

    if (__atomic_fetch_add(&it->takes, 1, __ATOMIC_SEQ_CST) == 0) {
        it->take_proc = my_proc;
        it->take_ns = now_ns();
    }
    atomic_store(&A->q_head, head + 1);
    dist_cond_signal(&q_nonfull);
}

/* A producer (put) or consumer (take): the queue's mutex, condition waits
 * while the queue is full (empty), the item, the mutex given back.  The
 * run's end ends the waiting too (see q_goodbye). */
static void queue_op(struct worker *w, struct tc_rec *r, int put)
{
    r->rc = (int16_t)dist_mutex_lock(&q_mutex);
    r->ret_ns = now_ns();
    if (r->rc != 0)
        return;
    q_enter(w, r);
    while (r && (put ? q_full() : q_empty()) && !atomic_load(&A->stop))
        r = q_wait(w, r, put ? &q_nonfull : &q_nonempty,
                   put ? TC_OP_CWAIT_PROD : TC_OP_CWAIT_CONS);
    if (!r)
        return;
    if (put && !q_full())
        q_put();
    else if (!put && !q_empty())
        q_take();
    q_leave(w, r);
    r->unlock_rc = (int16_t)dist_mutex_unlock(&q_mutex);
}

/* At the end of a thread: every waiter on either condition is woken, by a
 * broadcast under the mutex, so that it reaches each one that checked the
 * stop flag before it was set. */
static void q_goodbye(void)
{
    if (dist_mutex_lock(&q_mutex) != 0)
        return;
    dist_cond_broadcast(&q_nonempty);
    dist_cond_broadcast(&q_nonfull);
    dist_mutex_unlock(&q_mutex);
}

/* Whether this thread puts or takes on the queue: every process with two
 * threads or more has both; -1: no queue ops (a lone worker thread would
 * wait for itself). */
static int queue_role(const struct worker *w)
{
    if (opt.threads > 1)
        return w->t % 2 == 0;
    return opt.procs > 1 ? w->p % 2 == 0 : -1;
}

static void one_op(struct worker *w)
{
    int l = (int)(rnd(&w->rs) % NLOCKS), p = (int)(rnd(&w->rs) % 100);
    int mode = l != L_RW ? TC_EXCL : p < 65 ? TC_READ : TC_WRITE;
    int q = (int)(rnd(&w->rs) % 100);
    int op = q < 35 || l == L_QUEUE ? TC_OP_LOCK
             : q < 60               ? TC_OP_TRY
                                    : TC_OP_TIMED;
    struct tc_rec *r;
    int rc;

    if (l == L_QUEUE && queue_role(w) < 0)
        l = L_MUTEX;
    if (!(r = new_rec(w, l, mode, op))) {
        atomic_store(&A->stop, 1);
        return;
    }
    if (op == TC_OP_TIMED)
        r->deadline_ns = r->call_ns + (1 + rnd(&w->rs) % 200) * MS;
    if (l == L_SEM) {
        sem_op(w, r);
    } else if (l == L_QUEUE) {
        queue_op(w, r, queue_role(w));
    } else if (opt.sabotage && l == L_MUTEX && rnd(&w->rs) % 100 == 0) {
        fake_section(w, r);
    } else {
        rc = do_lock(l, mode, op, r->deadline_ns);
        r->rc = (int16_t)rc;
        r->ret_ns = now_ns();
        if (rc == 0)
            section(w, r);
    }
    atomic_store(&A->slot[w->p][w->t].open, -1L);
    sleep_us((long)(rnd(&w->rs) % 1000));
}

static void *worker_thread(void *arg)
{
    struct worker *w = arg;

    while (!atomic_load(&A->stop))
        one_op(w);
    q_goodbye();
    if (w->c)
        redisFree(w->c);
    return NULL;
}

/* The semaphore (leased, the default) and the queue's mutex and
 * conditions, named in the mutex's hash slot. */
static int init_waits(void)
{
    char cn[96];
    int rc = dist_sem_init(&sem, opt.names[L_SEM], SEM_PERMITS, NULL);

    if (rc == 0)
        rc = dist_mutex_init(&q_mutex, opt.names[L_QUEUE], NULL);
    snprintf(cn, sizeof cn, "{%s}:nonempty", opt.names[L_QUEUE]);
    if (rc == 0)
        rc = dist_cond_init(&q_nonempty, cn, NULL);
    snprintf(cn, sizeof cn, "{%s}:nonfull", opt.names[L_QUEUE]);
    if (rc == 0)
        rc = dist_cond_init(&q_nonfull, cn, NULL);
    return rc;
}

static int init_locks(void)
{
    dist_mutexattr_t a;
    int rc;

    dist_mutexattr_init(&a);
    rc = dist_mutex_init(&locks_m[L_MUTEX], opt.names[L_MUTEX], &a);
    dist_mutexattr_setfair(&a, 1);
    if (rc == 0)
        rc = dist_mutex_init(&locks_m[L_FAIR], opt.names[L_FAIR], &a);
    dist_mutexattr_destroy(&a);
    if (rc == 0)
        rc = dist_rwlock_init(&lock_rw, opt.names[L_RW], NULL);
    return rc ? rc : init_waits();
}

static int count_dir(const char *dir, const char *prefix);

/* ThreadSanitizer's runtime starts a background thread of its own with a
 * process's first pthread_create, after threads0 was counted. */
#if defined(__SANITIZE_THREAD__)
#define SANITIZER_THREADS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SANITIZER_THREADS 1
#endif
#endif
#ifndef SANITIZER_THREADS
#define SANITIZER_THREADS 0
#endif

static void worker_main(int p, uint32_t proc)
{
    pthread_t th[MAXT];
    struct worker w[MAXT];

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* Drop what fork() copied from the parent: its admin connections and,
     * with --proxy, the proxy's sockets, whose copies here would keep a
     * connection the proxy closes open (and count as this worker's). */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    /* 1, or more where a sanitizer's runtime runs threads of its own */
    atomic_store(&A->threads0[p], count_dir("/proc/self/task", NULL));
    my_proc = proc;
    if (init_locks() != 0 || dist_set_lost_handler(on_lost, NULL) != 0)
        _exit(3);
    for (int t = 0; t < opt.threads; t++) {
        uint64_t s = opt.seed ^ (proc * 7919ULL + (uint64_t)t + 1) *
                                    0x9E3779B97F4A7C15ULL;
        w[t] = (struct worker){ p, t, s | 1, NULL };
        if (pthread_create(&th[t], NULL, worker_thread, &w[t]) != 0)
            _exit(3);
    }
    for (int t = 0; t < opt.threads; t++)
        pthread_join(th[t], NULL);
    dist_shutdown();
    _exit(0);
}

/* ------------------------------------------------------------------------ */
/* Parent: worker processes                                                 */
/* ------------------------------------------------------------------------ */

static tu_redis_t srv;    /* the locks' server, but on Sentinel */
static tu_redis_t csrv;   /* the counters and their fences, out of the
                                faults' way: the resource the locks guard */
static tu_proxy_t *proxy; /* --proxy: in front of srv for the locks */
/* --sentinel: the locks live on this topology's master (srv is not
 * started) */
static tu_sentinel_t *topo;
static int master; /* its data node index now */
static pid_t wpid[MAXP];
static uint32_t wproc[MAXP];
static uint32_t next_proc = 1;
static unsigned long restarts;

static struct tc_fault faults[4096];
static size_t nfault;

static int spawn(int p)
{
    uint32_t proc = next_proc++;
    pid_t pid = fork();

    if (pid < 0)
        return -1;
    if (pid == 0)
        worker_main(p, proc);
    wpid[p] = pid;
    wproc[p] = proc;
    return 0;
}

/* Close what a dead worker left open: a pending call stays "never
 * returned" but is marked killed, an open section ends now; its
 * occupancy is given back. */
static void bury(int p)
{
    uint64_t t = now_ns();

    for (int k = 0; k < opt.threads; k++) {
        struct slot *s = &A->slot[p][k];
        long i = atomic_exchange(&s->open, -1L);
        int code = atomic_exchange(&s->occ, 0);
        if (code)
            occ_leave_code(code);
        if (i < 0 || (unsigned long)i >= A->cap)
            continue;
        A->rec[i].flags |= TC_F_KILLED;
        if (A->rec[i].ret_ns && A->rec[i].rc == 0 && !A->rec[i].end_ns)
            A->rec[i].end_ns = t;
    }
}

/* Reap dead workers; restart them while the run goes on.  A worker that
 * exits with an error status before the end is a failure of the run. */
static int reap(int restart)
{
    int bad = 0;

    for (int p = 0; p < opt.procs; p++) {
        int st;
        if (!wpid[p] || waitpid(wpid[p], &st, WNOHANG) != wpid[p])
            continue;
        wpid[p] = 0;
        if (WIFSIGNALED(st)) {
            bury(p);
        } else if (WEXITSTATUS(st) != 0) {
            fprintf(stderr, "torture: worker %d exited with %d\n", p,
                    WEXITSTATUS(st));
            bad = 1;
        }
        if (restart && !atomic_load(&A->stop)) {
            restarts++;
            if (spawn(p) != 0)
                bad = 1;
        }
    }
    return bad;
}

/* ------------------------------------------------------------------------ */
/* Parent: the nemesis                                                      */
/* ------------------------------------------------------------------------ */

static struct tc_fault *log_fault(int kind, uint32_t proc)
{
    struct tc_fault *f = &faults[nfault < 4095 ? nfault++ : 4095];
    f->kind = (uint8_t)kind;
    f->proc = proc;
    f->loses_data = kind == F_RESTART_EMPTY;
    f->start_ns = f->end_ns = now_ns();
    return f;
}

/* A command to the server that holds the locks (the master on Sentinel). */
static redisReply *lock_cmd(const char *a0, const char *a1, const char *a2,
                            const char *a3)
{
    return topo ? tu_node_cmd(tu_sentinel_data(topo), master, a0, a1, a2, a3,
                              (char *)NULL)
                : tu_cmd(&srv, a0, a1, a2, a3, (char *)NULL);
}

/* A command to the server of the locks, its reply dropped. */
static void admin(const char *a0, const char *a1, const char *a2,
                  const char *a3)
{
    redisReply *x = lock_cmd(a0, a1, a2, a3);

    if (x)
        freeReplyObject(x);
}

/* Sleep ms while reaping, so that restarts are not delayed by a fault. */
static int wait_reaping(long ms)
{
    uint64_t until = now_ns() + (uint64_t)ms * MS;
    int bad = 0;

    while (now_ns() < until) {
        bad |= reap(1);
        sleep_us(5000);
    }
    return bad;
}

/* A worker that holds something, if any does (else any worker). */
static int pick_holder(uint64_t *rs)
{
    int start = (int)(rnd(rs) % (unsigned)opt.procs);

    for (int k = 0; k < opt.procs; k++) {
        int p = (start + k) % opt.procs;
        for (int t = 0; t < opt.threads; t++)
            if (wpid[p] && atomic_load(&A->slot[p][t].occ))
                return p;
    }
    return wpid[start] ? start : -1;
}

static int fault_signal(int kind, uint64_t *rs)
{
    int p = pick_holder(rs);
    struct tc_fault *f;
    int bad = 0;

    if (p < 0)
        return 0;
    f = log_fault(kind, wproc[p]);
    if (kind == F_KILL) {
        kill(wpid[p], SIGKILL);
        bad = wait_reaping(20);
    } else {
        kill(wpid[p], SIGSTOP);
        bad = wait_reaping((long)(WATCHDOG_MS * 3 / 2 + rnd(rs) % 500));
        kill(wpid[p], SIGCONT);
    }
    f->end_ns = now_ns();
    return bad;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Restart the server: from its AOF (SIGTERM, it writes and fsyncs), or
 * after a crash with the AOF removed, so everything is gone. */
static int fault_restart(int kind)
{
    struct tc_fault *f = log_fault(kind, TC_ALL);
    char dir[400];
    int rc;

    if (kind == F_RESTART_EMPTY) {
        tu_redis_kill(&srv);
        snprintf(dir, sizeof dir, "%s/appendonlydir", srv.dir);
        nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    }
    rc = tu_redis_restart(&srv);
    f->end_ns = now_ns();
    return rc != 0;
}

/* The proxy's faults on the workers' lock connections (the counter's
 * connections go straight to the server): latency of 20-300 ms each way
 * for 1-2 s (a round trip may pass the command timeout), a blackhole
 * shorter than the command timeout and one longer than the lease, and a
 * reset of every open connection. */
static int fault_proxy(int kind, uint64_t *rs)
{
    struct tc_fault *f = log_fault(kind, TC_ALL);
    long ms;
    int bad = 0;

    if (kind == F_RESET) {
        tu_proxy_reset_all(proxy);
    } else if (kind == F_LATENCY) {
        ms = 20 + (long)(rnd(rs) % 280);
        tu_proxy_set_delay(proxy, ms);
        bad = wait_reaping(1000 + (long)(rnd(rs) % 1000));
        tu_proxy_set_delay(proxy, 0);
        /* what was read just before still arrives ms late */
        f->end_ns = now_ns() + (uint64_t)ms * MS;
        return bad;
    } else {
        ms = kind == F_HOLE_SHORT ? (long)TIMEOUT_MS / 2
                                  : (long)(WATCHDOG_MS * 3 / 2);
        tu_proxy_blackhole(proxy, 1);
        bad = wait_reaping(ms + (long)(rnd(rs) % 100));
        tu_proxy_blackhole(proxy, 0);
    }
    f->end_ns = now_ns();
    return bad;
}

/* SENTINEL FAILOVER under load.  The old master stays a master until the
 * sentinels turn it into a replica of the new one (tests/harness_sentinel.h):
 * the window lasts until then, and counts as one that may lose data, since
 * writes acknowledged by the old master meanwhile are dropped when it
 * resyncs. */
static int fault_failover(void)
{
    struct tc_fault *f = log_fault(F_FAILOVER, TC_ALL);
    int old = master, now;

    f->loses_data = !opt.strict_failover;
    now = tu_sentinel_failover(topo, 30000);
    if (now < 0 ||
        tu_node_wait_role(tu_sentinel_data(topo), old, "slave", 30000) != 0) {
        fprintf(stderr, "torture: failover did not complete\n");
        f->end_ns = now_ns();
        return 1;
    }
    master = now;
    f->end_ns = now_ns();
    return 0;
}

static int fault(int kind, uint64_t *rs)
{
    struct tc_fault *f;
    /* shorter than the command timeout, and longer but within the lease */
    static const char *const pause_ms[] = { "200", "800", "200", "800" };

    if (kind == F_STOP || kind == F_KILL)
        return fault_signal(kind, rs);
    if (kind == F_RESTART_AOF || kind == F_RESTART_EMPTY)
        return fault_restart(kind);
    if (kind >= F_LATENCY && kind <= F_RESET)
        return fault_proxy(kind, rs);
    if (kind == F_FAILOVER)
        return fault_failover();
    f = log_fault(kind, TC_ALL);
    if (kind == F_KILL_NORMAL || kind == F_KILL_PUBSUB)
        admin("CLIENT", "KILL", "TYPE",
              kind == F_KILL_NORMAL ? "normal" : "pubsub");
    else if (kind == F_SCRIPT_FLUSH)
        admin("SCRIPT", "FLUSH", NULL, NULL);
    else if (kind == F_DEBUG_SLEEP)
        admin("DEBUG", "SLEEP", "0.7", NULL);
    else {
        int k = kind - F_PAUSE_W_SHORT;
        admin("CLIENT", "PAUSE", pause_ms[k], k < 2 ? "WRITE" : "ALL");
        f->end_ns = f->start_ns + (uint64_t)atol(pause_ms[k]) * MS;
        return wait_reaping(atol(pause_ms[k]));
    }
    f->end_ns = now_ns();
    return 0;
}

/* Whether the run's options let the nemesis inject this kind. */
static int fault_enabled(int kind)
{
    if (opt.only && !strstr(fault_label[kind], opt.only))
        return 0;
    if (kind == F_RESTART_AOF || kind == F_RESTART_EMPTY)
        return opt.restarts && !opt.sentinel;
    if (kind >= F_LATENCY && kind <= F_RESET)
        return opt.proxy;
    if (kind == F_FAILOVER)
        return opt.sentinel;
    return 1;
}

/* The run: faults at random intervals, every kind in turn order shuffled,
 * with quiet stretches between them for the latency comparison. */
static int nemesis(uint64_t until, uint64_t *rs)
{
    int bad = 0, kinds[F_COUNT], nkinds = 0;

    for (int k = 0; k < F_COUNT; k++)
        if (fault_enabled(k))
            kinds[nkinds++] = k;
    bad |= wait_reaping(2000);
    while (!bad && now_ns() + 3000 * MS < until) {
        int kind = kinds[rnd(rs) % (unsigned)nkinds];
        /* --sentinel: every other fault a failover, the point of the mode */
        if (opt.sentinel && (nfault % 2) == 0)
            kind = F_FAILOVER;
        bad |= fault(kind, rs);
        bad |= wait_reaping((long)(500 + rnd(rs) % 1500));
    }
    while (!bad && now_ns() < until)
        bad |= wait_reaping(100);
    return bad;
}

/* ------------------------------------------------------------------------ */
/* Parent: the end of the run                                               */
/* ------------------------------------------------------------------------ */

/* Leases of the semaphore that have not ended (server time): a hold whose
 * lease ended is given back by the semaphore's next call, by design (its
 * holder died, or its release was lost in a failover), so its keys are not
 * a leak; a live one with every worker gone is.  -1 unknown. */
static long live_sem_leases(const char *leases)
{
    redisReply *t = lock_cmd("TIME", NULL, NULL, NULL), *x;
    char from[32];
    long n = -1;

    if (!t || t->type != REDIS_REPLY_ARRAY || t->elements != 2) {
        if (t)
            freeReplyObject(t);
        return -1;
    }
    snprintf(from, sizeof from, "(%lld",
             atoll(t->element[0]->str) * 1000 +
                 atoll(t->element[1]->str) / 1000);
    freeReplyObject(t);
    x = lock_cmd("ZCOUNT", leases, from, "+inf");
    if (x && x->type == REDIS_REPLY_INTEGER)
        n = (long)x->integer;
    if (x)
        freeReplyObject(x);
    return n;
}

/* Threads and connections of the live workers at the end of the run,
 * before they are told to stop: a leak grows with every reconnect and
 * every fault, so a bound on them catches it. */
static struct {
    int workers, threads_max, socks_max, threads_ok, socks_ok;
    long clients; /* the workers' clients on the lock server */
    long clients_ok;
} census;

/* Entries of a /proc directory; with prefix, only links to targets that
 * start with it. */
static int count_dir(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], to[64];
        ssize_t k;
        if (e->d_name[0] == '.')
            continue;
        if (prefix) {
            snprintf(path, sizeof path, "%.40s/%.200s", dir, e->d_name);
            k = readlink(path, to, sizeof to - 1);
            if (k < 0 || (to[k] = '\0', strncmp(to, prefix, strlen(prefix))))
                continue;
        }
        n++;
    }
    closedir(d);
    return n;
}

static long leftover_clients_of(int skip_unix);

/* The library runs three threads of its own (renewal, pub/sub, and the
 * watch thread, which has no link) and each thread keeps one link per
 * server it talks to; the renewal and pub/sub threads one each too.  On one server a worker has at most T + 2 links
 * and T counter connections; on Sentinel, links to every data node and
 * sentinel are allowed. */
static void take_census(void)
{
    int servers = topo ? tu_nodes_count(tu_sentinel_data(topo)) +
                             tu_nodes_count(tu_sentinel_sentinels(topo))
                       : 1;
    char dir[64];

    census.threads_ok = opt.threads + 3 + SANITIZER_THREADS;
    census.socks_ok = (opt.threads + 2) * servers + opt.threads;
    for (int p = 0; p < opt.procs; p++) {
        int t, k;
        if (!wpid[p])
            continue;
        snprintf(dir, sizeof dir, "/proc/%d/task", (int)wpid[p]);
        t = count_dir(dir, NULL);
        snprintf(dir, sizeof dir, "/proc/%d/fd", (int)wpid[p]);
        k = count_dir(dir, "socket:");
        if (t < 0 || k < 0)
            continue;                      /* died just now */
        t -= atomic_load(&A->threads0[p]); /* main, sanitizer runtime */
        census.workers++;
        census.threads_max = t > census.threads_max ? t : census.threads_max;
        census.socks_max = k > census.socks_max ? k : census.socks_max;
    }
    /* the counters' connections go to the counter server */
    census.clients_ok = (long)census.workers * (opt.threads + 2);
    census.clients = leftover_clients_of(topo != NULL);
}

static int census_bad(void)
{
    return census.threads_max > census.threads_ok ||
           census.socks_max > census.socks_ok || census.clients < 0 ||
           census.clients > census.clients_ok;
}

static void print_census(void)
{
    printf("  %-40s %3d (allowed %d)\n", "threads added per worker, max",
           census.threads_max, census.threads_ok);
    printf("  %-40s %3d (allowed %d)\n", "sockets per worker at the end, max",
           census.socks_max, census.socks_ok);
    printf("  %-40s %3ld (allowed %ld, %d workers)\n",
           "worker clients on the lock server", census.clients,
           census.clients_ok, census.workers);
}

/* What print_digest adds at the end of a failed run. */
static char keys_left[512];
static char stacks[2048];

/* One line per thread of a gdb backtrace that is inside an API call or
 * waits for a mutex: "pid P: f0 < f1 < ...", appended to stacks. */
static void digest_stacks(FILE *f, pid_t pid)
{
    char line[1024], cur[400] = "";
    int lib = 0;

    for (int more = 1; more;) {
        more = fgets(line, sizeof line, f) != NULL;
        if (!more || strncmp(line, "Thread ", 7) == 0) {
            size_t used = strlen(stacks);
            if (lib && cur[0] && used + strlen(cur) + 32 < sizeof stacks)
                snprintf(stacks + used, sizeof stacks - used,
                         "    pid %d:%s\n", (int)pid, cur);
            cur[0] = '\0';
            lib = 0;
            continue;
        }
        if (line[0] != '#')
            continue;
        /* "#3  0x... in name (args) at file:line" or "#0  name (args)" */
        char *n = strstr(line, " in ");
        n = n ? n + 4 : strchr(line, ' ');
        while (n && *n == ' ')
            n++;
        if (!n)
            continue;
        size_t k = strcspn(n, " (");
        /* a call into the API, or the library's own threads stuck on a
         * mutex (their idle waits are not shown) */
        if ((strncmp(n, "dist_", 5) == 0 && n[5] != '_') ||
            strncmp(n, "__lll_lock_wait", 15) == 0)
            lib = 1;
        if ((n[0] == '_' && n[1] == '_' && strncmp(n, "__lll", 5) != 0) ||
            strncmp(n, "start_thread", 12) == 0 ||
            strncmp(n, "clone", 5) == 0)
            continue; /* glibc's own frames say little */
        size_t used = strlen(cur);
        if (used + k + 4 < sizeof cur)
            snprintf(cur + used, sizeof cur - used, "%s%.*s",
                     used ? " < " : " ", (int)k, n);
    }
}

/* The stacks of every thread of a worker that did not stop, on stderr,
 * when gdb is installed (a hang inside the library is found from them,
 * not guessed at); bounded to a minute in case gdb itself stalls. */
static void show_stacks(pid_t pid)
{
    char spid[16], line[1024];
    FILE *f = tmpfile();
    pid_t g;

    if (!f)
        return;
    snprintf(spid, sizeof spid, "%d", (int)pid);
    fflush(stderr);
    if ((g = fork()) == 0) {
        dup2(fileno(f), STDOUT_FILENO);
        dup2(fileno(f), STDERR_FILENO);
        execlp("timeout", "timeout", "60", "gdb", "-p", spid, "-batch", "-ex",
               "thread apply all bt", (char *)NULL);
        _exit(127);
    }
    if (g > 0)
        waitpid(g, NULL, 0);
    rewind(f);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    rewind(f);
    digest_stacks(f, pid);
    fclose(f);
}

/* Tell the workers to stop and wait for them as long as a blocked call may
 * legitimately take; whoever is still there then is hung: killed, and its
 * pending call left "never returned" for the checker. */
static int stop_workers(void)
{
    uint64_t until =
        now_ns() + (WATCHDOG_MS + WAITER_MS + TIMEOUT_MS) * 4 * MS;
    int live = 1, bad = 0;

    atomic_store(&A->stop, 1);
    while (live && now_ns() < until) {
        bad |= reap(0);
        live = 0;
        for (int p = 0; p < opt.procs; p++)
            live |= wpid[p] != 0;
        sleep_us(10000);
    }
    for (int p = 0; p < opt.procs; p++) {
        if (!wpid[p])
            continue;
        fprintf(stderr, "torture: worker %d (pid %d) did not stop\n", p,
                (int)wpid[p]);
        show_stacks(wpid[p]);
        kill(wpid[p], SIGKILL);
        waitpid(wpid[p], NULL, 0);
        wpid[p] = 0;
    }
    return bad;
}

/* Keys of the run's locks still in Redis once every holder is gone and
 * every lease and waiter entry has run out.  Not counted: the fencing
 * counters, which are never reset by design (tokens only grow,
 * PROTOCOL.md), and the semaphore's count.  (The run's own counters and
 * fences are on the counter server.) */
static long leftover_keys(char *prefix)
{
    redisReply *x;
    long n = 0, live;
    char pat[128], sem_key[128], holds[128], leases[128];

    /* the semaphore's free permits: the semaphore itself, kept as a
     * Redisson semaphore's count is */
    snprintf(sem_key, sizeof sem_key, "distlock_sem:{%s}", opt.names[L_SEM]);
    snprintf(holds, sizeof holds, "distlock_sem_holds:{%s}",
             opt.names[L_SEM]);
    snprintf(leases, sizeof leases, "distlock_sem_leases:{%s}",
             opt.names[L_SEM]);
    sleep_us((long)(WATCHDOG_MS + WAITER_MS + 500) * 1000);
    snprintf(pat, sizeof pat, "*%s*", prefix);
    x = lock_cmd("KEYS", pat, NULL, NULL);
    if (!x || x->type != REDIS_REPLY_ARRAY) {
        if (x)
            freeReplyObject(x);
        return -1;
    }
    live = live_sem_leases(leases);
    for (size_t i = 0; i < x->elements; i++)
        if (live == 0 && (strcmp(x->element[i]->str, holds) == 0 ||
                          strcmp(x->element[i]->str, leases) == 0))
            printf("  semaphore key of ended leases, for its next call to "
                   "reclaim: %s\n",
                   x->element[i]->str);
        else if (strncmp(x->element[i]->str, "redisson_lock_token:", 20) !=
                     0 &&
                 strcmp(x->element[i]->str, sem_key) != 0) {
            size_t used = strlen(keys_left);
            printf("  key left: %s\n", x->element[i]->str);
            snprintf(keys_left + used, sizeof keys_left - used, " %s",
                     x->element[i]->str);
            n++;
        }
    freeReplyObject(x);
    return n;
}

/* Clients in a CLIENT LIST text other than the one asking (cmd=client),
 * the harness's own on the unix socket (addr=/...), a replica's or
 * master's link (flags S, M) and the sentinels' (named sentinel-...):
 * the workers connect over TCP. */
static long count_clients(const char *list, int skip_unix)
{
    long n = 0;

    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        if (len && !strstr(line, " cmd=client") &&
            !(skip_unix && strstr(line, " addr=/")) &&
            !strstr(line, " flags=S") && !strstr(line, " flags=M") &&
            !strstr(line, " name=sentinel-")) {
            if (atomic_load(&A->stop) || opt.verbose)
                printf("  client: %s\n", line);
            n++;
        }
        p = e ? e + 1 : NULL;
    }
    return n;
}

/* Clients on the lock server (but the harness's own on its unix socket
 * when skip_unix: on Sentinel, where no proxy is in between). */
static long leftover_clients_of(int skip_unix)
{
    redisReply *x = lock_cmd("CLIENT", "LIST", NULL, NULL);
    long n = -1;

    if (x && x->type == REDIS_REPLY_STRING)
        n = count_clients(x->str, skip_unix);
    if (x)
        freeReplyObject(x);
    return n;
}

/* Clients left once the workers are gone: on the lock server and on the
 * counter server. */
static long leftover_clients(void)
{
    long n = leftover_clients_of(topo != NULL);
    char *s;

    if (n < 0)
        return n;
    s = tu_cmd_str(&csrv, "CLIENT", "LIST", (char *)NULL);
    if (!s)
        return -1;
    n += count_clients(s, 0);
    free(s);
    return n;
}

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The latest fault whose window (plus a lease of recovery) meets [a, b],
 * or -1. */
static int fault_at(uint64_t a, uint64_t b)
{
    int k = -1;

    for (size_t i = 0; i < nfault; i++)
        if (faults[i].start_ns <= b &&
            faults[i].end_ns + WATCHDOG_MS * MS >= a)
            k = faults[i].kind;
    return k;
}

static void print_pct(const char *what, uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, by_u64);
    if (n == 0)
        printf("  %-30s %8s\n", what, "-");
    else
        printf("  %-30s p50 %7.2f ms  p99 %8.2f ms  (%zu)\n", what,
               v[n / 2] / 1e6, v[n * 99 / 100] / 1e6, n);
}

/* Acquire latency of successful lock/timedlock calls, split by whether a
 * fault (or its recovery) overlapped the call, and the longest stall. */
static void print_latency(const struct tc_rec *rec, size_t n)
{
    uint64_t *in = malloc((n + 1) * sizeof *in);
    uint64_t *out = malloc((n + 1) * sizeof *out), stall = 0;
    size_t ni = 0, no = 0;

    if (!in || !out)
        goto done;
    for (size_t i = 0; i < n; i++) {
        const struct tc_rec *r = &rec[i];
        if (!r->ret_ns || r->op == TC_OP_NESTED)
            continue;
        if (r->ret_ns - r->call_ns > stall)
            stall = r->ret_ns - r->call_ns;
        if (r->rc != 0 || r->op == TC_OP_TRY)
            continue;
        if (fault_at(r->call_ns, r->ret_ns) >= 0)
            in[ni++] = r->ret_ns - r->call_ns;
        else
            out[no++] = r->ret_ns - r->call_ns;
    }
    print_pct("acquire, no fault near", out, no);
    print_pct("acquire, during a fault", in, ni);
    printf("  %-30s %.1f ms\n", "longest call (stall)", stall / 1e6);
done:
    free(in);
    free(out);
}

/* The table's row of a record: the mutexes' (both), the rwlock's write
 * and read sides, the semaphore's, the queue's. */
enum { ROW_MUTEX, ROW_WRITE, ROW_READ, ROW_SEM, ROW_QUEUE, NROWS };

static int op_row(const struct tc_rec *r)
{
    return r->lock == L_SEM      ? ROW_SEM
           : r->lock == L_QUEUE  ? ROW_QUEUE
           : r->mode == TC_READ  ? ROW_READ
           : r->mode == TC_WRITE ? ROW_WRITE
                                 : ROW_MUTEX;
}

static void print_ops(const struct tc_rec *rec, size_t n)
{
    static const char *const oname[TC_OP_COUNT] = {
        "lock",        "trylock",          "timedlock",
        "nested lock", "cond wait (take)", "cond wait (put)"
    };
    static const char *const sname[3] = { "wait", "trywait", "timedwait" };
    static const char *const rname[NROWS] = { "mutex", "write", "read", "sem",
                                              "queue" };
    unsigned long cnt[NROWS][TC_OP_COUNT][4] = { { { 0 } } };

    for (size_t i = 0; i < n; i++) {
        const struct tc_rec *r = &rec[i];
        int res = r->rc == EBUSY || r->rc == EAGAIN || r->rc == ETIMEDOUT ||
                          (r->flags & TC_F_TIMED_OUT)
                      ? 1
                  : r->rc == 0 ? 0
                  : r->ret_ns  ? 2
                               : 3;
        cnt[op_row(r)][r->op % TC_OP_COUNT][res]++;
    }
    printf("  %-26s %9s %9s %9s %9s\n", "operation", "ok", "busy/tmo",
           "EIO etc", "no return");
    for (int m = 0; m < NROWS; m++)
        for (int o = 0; o < TC_OP_COUNT; o++) {
            unsigned long *c = cnt[m][o];
            char label[48];
            if (!(c[0] | c[1] | c[2] | c[3]))
                continue;
            snprintf(label, sizeof label, "%s %s", rname[m],
                     m == ROW_SEM && o < 3 ? sname[o] : oname[o]);
            printf("  %-26s %9lu %9lu %9lu %9lu\n", label, c[0], c[1], c[2],
                   c[3]);
        }
}

/* The queue: items put, taken, left in it; the lost wake-ups and lost or
 * doubled items are among the violations. */
static void print_items(const struct tc_history *h)
{
    unsigned long taken = 0, queued = 0, nosignal = 0;
    uint64_t *stay = malloc((h->nitem + 1) * sizeof *stay);
    size_t ns = 0;

    for (size_t i = 0; i < h->nitem; i++) {
        const struct tc_item *it = &h->item[i];
        taken += it->takes > 0;
        queued += !!(it->flags & TC_I_QUEUED);
        nosignal += !!(it->flags & TC_I_NOSIGNAL);
        if (stay && it->put_ns && it->take_ns > it->put_ns)
            stay[ns++] = it->take_ns - it->put_ns;
    }
    printf("\n  queue: %zu items put, %lu taken, %lu left at the end, %lu "
           "signals failed\n",
           h->nitem, taken, queued, nosignal);
    if (stay)
        print_pct("time in the queue", stay, ns);
    free(stay);
}

/* Times as the checker prints them: ms since the first call of the run. */
static uint64_t t_base;

static double rel_ms(uint64_t ns)
{
    return (double)(int64_t)(ns - t_base) / 1e6;
}

static void print_rec_line(const char *tag, const struct tc_rec *r)
{
    printf("    %s proc %u mode %u op %u rc %d call %.3f ret %.3f end %.3f "
           "token %" PRIu64 " unlock %d flags %#x\n",
           tag, r->proc, r->mode, r->op, r->rc, rel_ms(r->call_ns),
           rel_ms(r->ret_ns), rel_ms(r->end_ns), r->token, r->unlock_rc,
           r->flags);
}

/* --verbose: what surrounds a hold that was lost, to tell a real loss
 * (someone else took the lock) from one the client only believed in:
 * the sections of the same lock that overlap it, and the same process's
 * previous section of it. */
static void explain_loss(const struct tc_history *h, size_t k)
{
    const struct tc_rec *e = &h->rec[k], *prev = NULL;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (i == k || r->lock != e->lock || r->rc != 0 || !r->ret_ns)
            continue;
        if (r->proc == e->proc && r->call_ns < e->call_ns)
            prev = r;
        if (r->ret_ns < e->end_ns &&
            (r->end_ns ? r->end_ns : h->end_ns) > e->ret_ns)
            print_rec_line(r->proc == e->proc ? "same proc:" : "meets it:",
                           r);
    }
    if (prev)
        print_rec_line("previous:", prev);
}

/* --verbose: each holder the fence refused, with its token, the calls of
 * its process's lost handler for that lock while it held (or within the
 * slack after), its unlock's result, and the checker's verdict: told (its
 * unlock said EPERM, or failed and the handler ran), killed first, or
 * never told (a legitimate holder refused). */
static void print_refusals(const struct tc_history *h)
{
    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        int handler = 0;
        if (!(r->flags & TC_F_STALE) || r->op == TC_OP_NESTED)
            continue;
        printf("  STALE: proc %u lock %u token %" PRIu64
               " held %.3f-%.3f ms, "
               "refused at %.3f ms;",
               r->proc, r->lock, r->token, rel_ms(r->ret_ns),
               rel_ms(r->end_ns), rel_ms(r->fence_ns));
        for (size_t k = 0; k < h->nlost; k++)
            if (h->lost[k].proc == r->proc && h->lost[k].lock == r->lock &&
                h->lost[k].ns >= r->ret_ns &&
                h->lost[k].ns <= r->end_ns + h->slack_ns) {
                printf(" lost handler at %.3f ms;", rel_ms(h->lost[k].ns));
                handler = 1;
            }
        printf(" unlock rc %d: %s\n", r->unlock_rc,
               r->unlock_rc == EPERM || (r->unlock_rc != 0 && handler)
                   ? "told"
               : (r->flags & TC_F_KILLED) ? "killed first"
                                          : "never told");
    }
}

static void print_faults_losses(const struct tc_history *h,
                                const struct tc_result *res)
{
    unsigned long fk[F_COUNT] = { 0 }, src[F_COUNT + 1] = { 0 };
    unsigned long eperm = 0, killed = 0;

    for (size_t i = 0; i < nfault; i++) {
        fk[faults[i].kind]++;
        if (opt.verbose)
            printf("  fault %-26s %.3f-%.3f ms, proc %d\n",
                   fault_label[faults[i].kind], rel_ms(faults[i].start_ns),
                   rel_ms(faults[i].end_ns), (int)faults[i].proc);
    }
    for (size_t i = 0; opt.verbose && i < h->nlost; i++)
        printf("  lost handler: proc %u lock %u at %.3f ms\n",
               h->lost[i].proc, h->lost[i].lock, rel_ms(h->lost[i].ns));
    if (opt.verbose)
        print_refusals(h);
    printf("\n  %-30s %6s\n", "fault", "count");
    for (int k = 0; k < F_COUNT; k++)
        if (fault_enabled(k))
            printf("  %-30s %6lu\n", fault_label[k], fk[k]);
    printf("  %-30s %6lu\n", "worker restarts", restarts);
    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->op == TC_OP_NESTED || r->rc != 0 || !r->end_ns)
            continue;
        killed += !!(r->flags & TC_F_KILLED);
        if (r->unlock_rc == EPERM) {
            /* end_ns is when the unlock was called: it may have run
             * into a fault for up to a command timeout after that */
            int k = fault_at(r->ret_ns, r->end_ns + TIMEOUT_MS * MS);
            if (opt.verbose)
                printf("  EPERM: proc %u lock %u mode %u op %u call %.3f "
                       "ret %.3f end %.3f ms, flags %#x\n",
                       r->proc, r->lock, r->mode, r->op, rel_ms(r->call_ns),
                       rel_ms(r->ret_ns), rel_ms(r->end_ns), r->flags);
            if (opt.verbose)
                explain_loss(h, i);
            eperm++;
            src[k < 0 ? F_COUNT : k]++;
        }
    }
    printf("\n  losses: %lu lost-handler calls, %lu holds lost or inside a "
           "data-loss window, %lu unlocks gave EPERM, %lu holders killed\n",
           (unsigned long)h->nlost, res->lost_sections, eperm, killed);
    /* self-fencing: a lost holder is told before another can hold */
    printf("  lost holders told after the next hold began: %lu (goal 0), "
           "and %lu whose own process was stopped or killed\n",
           res->told_late, res->told_late_own);
    for (int k = 0; k <= F_COUNT; k++)
        if (src[k])
            printf("    EPERM after %-26s %6lu\n",
                   k < F_COUNT ? fault_label[k] : "no fault", src[k]);
}

/* The fence's figures: what it accepted and refused, and of the refused
 * holders those told of their loss, killed first, or never told. */
static void print_fence(const struct tc_result *res)
{
    printf("  %-40s %6lu\n", "fence: writes accepted", res->fenced_writes);
    printf("  %-40s %6lu\n", "fence: holders refused (STALE)", res->refused);
    printf("  %-40s %6lu\n", "fence:   of them, reported lost",
           res->refused_lost);
    printf("  %-40s %6lu\n", "fence:   of them, killed before unlock",
           res->refused_killed);
    printf("  %-40s %6lu\n", "fence: stale writes accepted",
           res->stale_accepted);
    printf("  %-40s %6lu%s\n", "fence: legitimate holders refused",
           res->legit_refused,
           opt.strict_fence ? ""
                            : "  (a figure; --strict-fence fails on it)");
}

/* The last lines of a failed run: why it failed, in a few lines, since a
 * log is often read from its end or shown cut to a window around the
 * failure (CI).  The first violation found, the keys left, the faults in
 * time order and, for a worker that did not stop, where its threads were
 * in the library (show_stacks). */
static void print_digest(const char *viol, size_t len)
{
    const char *p = viol ? memmem(viol, len, "VIOLATION", 9) : NULL;
    int lines = 0;

    printf("\nwhy the run failed, in short:\n");
    while (p && p < viol + len && lines < 5) {
        const char *e = memchr(p, '\n', (size_t)(viol + len - p));
        int n = e ? (int)(e - p) : (int)(viol + len - p);
        printf("  %.*s\n", n > 200 ? 200 : n, p);
        lines++;
        p = e ? e + 1 : NULL;
        if (p && lines > 1 && strncmp(p, "VIOLATION", 9) == 0)
            break; /* only the first one */
    }
    if (keys_left[0])
        printf("  keys left:%s\n", keys_left);
    printf("  faults (s):");
    for (size_t i = 0; i < nfault; i++)
        printf("%s %s %.1f-%.1f", i ? "," : "", fault_label[faults[i].kind],
               rel_ms(faults[i].start_ns) / 1000,
               rel_ms(faults[i].end_ns) / 1000);
    printf("\n");
    if (stacks[0])
        printf("  threads of workers that did not stop, in the library:\n%s",
               stacks);
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

/* --only must leave the nemesis at least one fault of the run's mode. */
static int only_some(void)
{
    for (int k = 0; k < F_COUNT; k++)
        if (fault_enabled(k))
            return 0;
    fprintf(stderr,
            "torture: --only %s: no fault of this mode has it in its "
            "label\n",
            opt.only);
    return -1;
}

static int parse(int argc, char **argv)
{
    const char *e = getenv("TORTURE_SECS");

    if (e && *e)
        opt.secs = atoi(e);
    opt.seed = (unsigned long)time(NULL) ^ (unsigned long)getpid();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-restart") == 0 || strcmp(a, "--sabotage") == 0 ||
            strcmp(a, "--verbose") == 0 || strcmp(a, "--proxy") == 0 ||
            strcmp(a, "--sentinel") == 0 ||
            strcmp(a, "--strict-failover") == 0 ||
            strcmp(a, "--strict-fence") == 0) {
            opt.restarts &= a[2] != 'n';
            opt.sabotage |= strcmp(a, "--sabotage") == 0;
            opt.verbose |= a[2] == 'v';
            opt.proxy |= a[2] == 'p';
            opt.sentinel |= strcmp(a, "--sentinel") == 0;
            opt.strict_failover |= strcmp(a, "--strict-failover") == 0;
            opt.strict_fence |= strcmp(a, "--strict-fence") == 0;
            continue;
        }
        if (!v)
            return -1;
        if (strcmp(a, "--secs") == 0)
            opt.secs = atoi(v);
        else if (strcmp(a, "--procs") == 0)
            opt.procs = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            opt.threads = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            opt.seed = strtoul(v, NULL, 10);
        else if (strcmp(a, "--only") == 0)
            opt.only = v;
        else
            return -1;
        i++;
    }
    if (opt.secs < 5 || opt.procs < 1 || opt.procs > MAXP ||
        opt.threads < 1 || opt.threads > MAXT)
        return -1;
    return opt.only ? only_some() : 0;
}

/* --sentinel: a master, one replica and three sentinels; the workers find
 * the master through the sentinels, and replica sync stays on with its
 * default wait (DISTLOCK_REPLICA_WAIT_MS unset). */
static int setup_sentinel(void)
{
    static const char *const args[] = { "--enable-debug-command", "yes",
                                        NULL };
    tu_sentinel_opts so = { .topo.node_args = args };

    topo = tu_sentinel_start(1, 3, &so);
    if (!topo)
        return -1;
    master = tu_sentinel_master(topo);
    if (master < 0)
        return -1;
    setenv("DISTLOCK_URL", tu_sentinel_url(topo), 1);
    unsetenv("DISTLOCK_REPLICA_WAIT_MS");
    return 0;
}

/* The counter server: a plain one (no AOF, no fault), with the fence
 * library loaded (fence/fence.lua, built in as dist_fence_lib). */
static int setup_counters(void)
{
    redisReply *x;
    int ok;

    if (tu_redis_start(&csrv) != 0)
        return -1;
    opt.cport = csrv.port;
    x = tu_cmd(&csrv, "FUNCTION", "LOAD", "REPLACE", dist_fence_lib,
               (char *)NULL);
    ok = x && x->type == REDIS_REPLY_STRING;
    if (!ok)
        fprintf(stderr,
                "torture: the counter server refused the fence "
                "library: %s\n",
                x && x->type == REDIS_REPLY_ERROR ? x->str : "no answer");
    if (x)
        freeReplyObject(x);
    return ok ? 0 : -1;
}

/* The shared history, sized for the run: far more than workers of one
 * host manage per second, mapped lazily (MAP_NORESERVE). */
static int setup(void)
{
    static const char *const args[] = { "--enable-debug-command",
                                        "yes",
                                        "--appendonly",
                                        "yes",
                                        "--appendfsync",
                                        "always",
                                        NULL };
    tu_redis_opts o = { .args = args };
    unsigned long cap = (unsigned long)opt.secs * 50000UL + 100000UL;
    char num[32], url[64];

    A = mmap(NULL, sizeof *A + cap * sizeof(struct tc_rec),
             PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (A == MAP_FAILED)
        return -1;
    A->cap = cap;
    icap = (unsigned long)opt.secs * 20000UL + 10000UL;
    I = mmap(NULL, icap * sizeof *I, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (I == MAP_FAILED)
        return -1;
    for (int p = 0; p < MAXP; p++)
        for (int t = 0; t < MAXT; t++)
            atomic_store(&A->slot[p][t].open, -1L);
    if (setup_counters() != 0 ||
        (!opt.sentinel && tu_redis_start_opts(&srv, &o) != 0))
        return -1;
    /* a counter and its fence share a hash tag, as on a cluster they must */
    for (int l = 0; l < NLOCKS; l++) {
        snprintf(opt.names[l], sizeof opt.names[l], "torture:%d:%s",
                 (int)getpid(), lock_label[l]);
        snprintf(opt.ctr[l], sizeof opt.ctr[l], "{torture:%d:%d}:ctr",
                 (int)getpid(), l);
        snprintf(opt.fence[l], sizeof opt.fence[l], "{torture:%d:%d}:fence",
                 (int)getpid(), l);
    }
    snprintf(num, sizeof num, "%lu", WATCHDOG_MS);
    setenv("DISTLOCK_WATCHDOG_MS", num, 1);
    snprintf(num, sizeof num, "%lu", TIMEOUT_MS);
    setenv("DISTLOCK_TIMEOUT_MS", num, 1);
    snprintf(num, sizeof num, "%lu", WAITER_MS);
    setenv("DISTLOCK_WAITER_MS", num, 1);
    if (opt.sentinel)
        return setup_sentinel();
    if (opt.proxy) {
        /* started before any worker is forked (tests/harness_proxy.h) */
        proxy = tu_proxy_start(&srv);
        if (!proxy)
            return -1;
        snprintf(num, sizeof num, "%d", tu_proxy_port(proxy));
        snprintf(url, sizeof url, "redis://127.0.0.1:%s", num);
        setenv("DISTLOCK_URL", url, 1);
    } else {
        setenv("DISTLOCK_URL", srv.url_tcp, 1);
    }
    unsetenv("DISTLOCK_REPLICA_WAIT_MS");
    return 0;
}

static void fill_history(struct tc_history *h)
{
    memset(h, 0, sizeof *h);
    h->rec = A->rec;
    h->nrec = atomic_load(&A->nrec);
    if (h->nrec > A->cap)
        h->nrec = A->cap;
    h->lost = A->lost;
    h->nlost = atomic_load(&A->nlost);
    if (h->nlost > CAP_LOST)
        h->nlost = CAP_LOST;
    h->fault = faults;
    h->nfault = nfault;
    h->nlocks = NLOCKS;
    h->kind[L_MUTEX] = h->kind[L_FAIR] = TC_LOCK_MUTEX;
    h->kind[L_RW] = TC_LOCK_RW;
    h->kind[L_SEM] = TC_LOCK_SEM;
    h->permits[L_SEM] = SEM_PERMITS;
    h->kind[L_QUEUE] = TC_LOCK_MUTEX;
    h->queue_lock = L_QUEUE;
    h->item = I;
    h->nitem = atomic_load(&A->q_next);
    if (h->nitem > icap)
        h->nitem = icap;
    /* what is left in the queue (no worker runs any more) */
    for (unsigned long k = atomic_load(&A->q_head), n = 0;
         k < atomic_load(&A->q_tail) && n < QCAP; k++, n++) {
        unsigned long id = atomic_load(&A->q_ring[k % QCAP]);
        if (id < icap)
            I[id].flags |= TC_I_QUEUED;
    }
    for (int l = 0; l < NLOCKS; l++) {
        long long v = 0;
        if (tu_cmd_int_ex(&csrv, &v, "GET", opt.ctr[l], (char *)NULL) < 0)
            v = -1;
        h->counter[l] = v;
    }
    h->end_ns = now_ns();
    /* a dead holder's lease; a fair lock's queue also keeps a dead
     * waiter's place for the waiter window */
    h->lease_ns = (WATCHDOG_MS + WAITER_MS) * MS;
    /* a timed call may be inside one command when its deadline passes */
    h->slack_ns = (2 * TIMEOUT_MS + 250) * MS;
    h->hang_ns = (WATCHDOG_MS + WAITER_MS + 2 * TIMEOUT_MS + 1000) * MS;
    h->replicas = topo != NULL;
    h->refusal_fails = opt.strict_fence;
}

static int judge(void)
{
    struct tc_history h;
    struct tc_result res;
    char prefix[32], *dbuf = NULL;
    size_t dlen = 0;
    FILE *detail;
    long keys, clients, v;

    fill_history(&h);
    t_base = UINT64_MAX;
    for (size_t i = 0; i < h.nrec; i++)
        if (h.rec[i].call_ns < t_base)
            t_base = h.rec[i].call_ns;
    detail = open_memstream(&dbuf, &dlen);
    v = tc_check(&h, detail ? detail : stdout, 10, &res);
    if (detail)
        fclose(detail);
    if (dlen)
        fwrite(dbuf, 1, dlen, stdout);
    snprintf(prefix, sizeof prefix, "torture:%d:", (int)getpid());
    keys = leftover_keys(prefix);
    clients = leftover_clients();
    printf(
        "\ndistlock torture: %d s, %d processes x %d threads, seed %lu\n\n",
        opt.secs, opt.procs, opt.threads, opt.seed);
    print_ops(h.rec, h.nrec);
    print_faults_losses(&h, &res);
    printf("\n");
    print_latency(h.rec, h.nrec);
    /* how close the run came to the late-past-deadline violation */
    printf("  %-30s %.1f ms (slack %.0f ms)\n",
           "timed call, most past deadline", res.late_max_ns / 1e6,
           h.slack_ns / 1e6);
    print_items(&h);
    printf("\n  %-30s %6lu\n", "sections checked", res.sections);
    for (int k = 0; k < TC_V_COUNT; k++)
        if (k != TC_V_REFUSED || h.refusal_fails)
            printf("  violations: %-28s %6lu\n", tc_violation_name(k),
                   res.violations[k]);
    print_fence(&res);
    printf("  %-40s %6ld\n", "lock keys left after the run", keys);
    printf("  %-40s %6ld\n", "clients left after the run", clients);
    print_census();
    printf("  %-40s %6lld %lld %lld\n", "counters (mutex fair rwlock)",
           h.counter[0], h.counter[1], h.counter[2]);
    /* one line to find in a CI log (scripts/test.sh quotes it) */
    printf("\nfence figures: stale writes accepted %lu, legitimate holders "
           "refused %lu (%s)\n",
           res.stale_accepted, res.legit_refused,
           h.refusal_fails ? "both fail the run" : "the first fails the run");
    if (v != 0 || keys != 0 || clients != 0 || census_bad())
        print_digest(dbuf, dlen);
    free(dbuf);
    if (v < 0 || keys != 0 || clients != 0 || census_bad())
        return 2 - (v == 0);
    return v > 0;
}

int main(int argc, char **argv)
{
    uint64_t rs;
    int bad = 0, rc;

    if (parse(argc, argv) != 0) {
        fprintf(stderr,
                "usage: distlock-torture [--secs N>=5] [--procs 1-16] "
                "[--threads 1-16] [--seed S] [--no-restart] [--sabotage] "
                "[--verbose] [--proxy] [--sentinel [--strict-failover]] "
                "[--strict-fence] [--only WORD]\n");
        return 2;
    }
    if (setup() != 0) {
        fprintf(stderr,
                "torture: could not set up (memory or redis-server)\n");
        return 2;
    }
    rs = opt.seed | 1;
    for (int p = 0; p < opt.procs && !bad; p++)
        bad = spawn(p) != 0;
    if (!bad)
        bad = nemesis(now_ns() + (uint64_t)opt.secs * 1000 * MS, &rs);
    take_census();
    bad |= stop_workers();
    rc = judge();
    tu_proxy_stop(proxy);
    tu_sentinel_stop(topo);
    tu_redis_stop(&srv);
    tu_redis_stop(&csrv);
    if (bad)
        fprintf(stderr, "torture: the run itself failed (see above)\n");
    return bad ? 2 : rc;
}
