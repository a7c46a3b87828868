/*
 * torture_check: the checker of a torture run's history (torture_check.h).
 * Pure computation on arrays: no Redis, no distlock, no clock of its own.
 */
#include "torture_check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const vnames[TC_V_COUNT] = {
    "overlapping exclusive holds",
    "read hold during a write hold",
    "fencing token not increasing",
    "occupancy exceeded",
    "counter != accepted writes",
    "undocumented return value",
    "EPERM without lost handler",
    "late past deadline",
    "hang",
    "permits over-granted",
    "queue item lost or doubled",
    "lost wake-up",
    "stale write accepted",
    "legitimate holder refused"
};
static const char *const mnames[] = { "excl", "write", "read" };
static const char *const onames[TC_OP_COUNT] = {
    "lock", "try", "timed", "nested", "cwait-consumer", "cwait-producer"
};

const char *tc_violation_name(int v)
{
    return v >= 0 && v < TC_V_COUNT ? vnames[v] : "?";
}

/* Everything one check needs, so the helpers take one argument. */
struct ctx {
    const struct tc_history *h;
    FILE *out;
    unsigned max_print;
    struct tc_result *res;
    uint64_t base;          /* earliest call: times print relative to it */
    unsigned char *lost;    /* per record: its hold was lost, documented */
    unsigned char *excused; /* per record: lost, or overlapped a lost hold */
};

static int is_section(const struct tc_rec *r)
{
    return r->rc == 0 && r->op != TC_OP_NESTED && r->ret_ns && r->end_ns;
}

static double ms(const struct ctx *c, uint64_t ns)
{
    return ns ? (double)(int64_t)(ns - c->base) / 1e6 : -1.0;
}

static void print_rec(const struct ctx *c, const struct tc_rec *r)
{
    fprintf(c->out,
            "    #%zu proc %" PRIu32 " lock %u %s/%s rc %d: call %.3f"
            " ret %.3f end %.3f ms, deadline %.3f, token %" PRIu64
            " (rc %d), unlock rc %d, flags %#x, fence %.3f ms, read %" PRId64
            "\n",
            (size_t)(r - c->h->rec), r->proc, r->lock, mnames[r->mode % 3],
            onames[r->op % TC_OP_COUNT], r->rc, ms(c, r->call_ns),
            ms(c, r->ret_ns), ms(c, r->end_ns), ms(c, r->deadline_ns),
            r->token, r->token_rc, r->unlock_rc, r->flags, ms(c, r->fence_ns),
            r->rval);
}

/* Count violation v; print it (with up to two records) within the limit. */
static void report(struct ctx *c, int v, const struct tc_rec *a,
                   const struct tc_rec *b, const char *what)
{
    c->res->violations[v]++;
    c->res->total++;
    if (!c->out || c->res->violations[v] > c->max_print)
        return;
    fprintf(c->out, "VIOLATION %s: %s\n", vnames[v], what);
    if (a)
        print_rec(c, a);
    if (b)
        print_rec(c, b);
}

static int data_lost_during(const struct tc_history *h, uint64_t from,
                            uint64_t to)
{
    for (size_t i = 0; i < h->nfault; i++) {
        const struct tc_fault *f = &h->fault[i];
        if (f->loses_data && f->start_ns <= to &&
            f->end_ns + h->lease_ns >= from)
            return 1;
    }
    return 0;
}

/* The process itself was stopped (or killed) during [from, to]: its
 * clocks ran on while it could not. */
static int own_fault_during(const struct tc_history *h, uint32_t proc,
                            uint64_t from, uint64_t to)
{
    for (size_t i = 0; i < h->nfault; i++) {
        const struct tc_fault *f = &h->fault[i];
        if (f->proc == proc && f->start_ns <= to && f->end_ns >= from)
            return 1;
    }
    return 0;
}

static int handler_called(const struct tc_history *h, const struct tc_rec *r,
                          uint64_t from, uint64_t to)
{
    for (size_t i = 0; i < h->nlost; i++) {
        const struct tc_lost *l = &h->lost[i];
        if (l->proc == r->proc && l->lock == r->lock && l->ns >= from &&
            l->ns <= to)
            return 1;
    }
    return 0;
}

/* A hold is lost in a documented way when its unlock said EPERM, the lost
 * handler of its process was told, or the server lost its data meanwhile.
 * The lost log is short (losses are rare), hence the linear scans. */
static void mark_lost(struct ctx *c)
{
    const struct tc_history *h = c->h;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (!is_section(r))
            continue;
        c->res->sections++;
        if (r->flags & TC_F_KILLED)
            c->res->killed++;
        if (r->unlock_rc == EPERM ||
            handler_called(h, r, r->ret_ns, r->end_ns + h->slack_ns) ||
            data_lost_during(h, r->ret_ns, r->end_ns)) {
            c->lost[i] = c->excused[i] = 1;
            c->res->lost_sections++;
        }
    }
}

/* qsort has no context argument: the comparators index this table.  The
 * checker runs on one thread. */
static const struct tc_rec *sort_recs;

static int by_ret(const void *a, const void *b)
{
    uint64_t x = sort_recs[*(const size_t *)a].ret_ns;
    uint64_t y = sort_recs[*(const size_t *)b].ret_ns;
    return x < y ? -1 : x > y;
}

static int by_call(const void *a, const void *b)
{
    uint64_t x = sort_recs[*(const size_t *)a].call_ns;
    uint64_t y = sort_recs[*(const size_t *)b].call_ns;
    return x < y ? -1 : x > y;
}

/* Indices of the records of lock `lock` that pass `keep`, sorted by cmp. */
static size_t *select_recs(const struct tc_history *h, unsigned lock,
                           int (*keep)(const struct tc_rec *), size_t *n,
                           int (*cmp)(const void *, const void *))
{
    size_t *v = malloc((h->nrec + 1) * sizeof *v), k = 0;

    if (!v)
        return NULL;
    for (size_t i = 0; i < h->nrec; i++)
        if (h->rec[i].lock == lock && keep(&h->rec[i]))
            v[k++] = i;
    sort_recs = h->rec;
    qsort(v, k, sizeof *v, cmp);
    *n = k;
    return v;
}

static int conflicts(const struct tc_rec *a, const struct tc_rec *b)
{
    return a->mode != TC_READ || b->mode != TC_READ;
}

/* Self-fencing: a, lost, overlapped s.  Its holder should have been told
 * (lost handler) before s began, while the server could not yet have let
 * a go: then the two never ran at once as far as a's holder knew.  Told
 * later is counted (and shown), apart when a's process was itself stopped
 * or killed meanwhile; a data loss (or a failover window) takes holds
 * without warning and is not counted. */
static void check_told(struct ctx *c, const struct tc_rec *a,
                       const struct tc_rec *s)
{
    const struct tc_history *h = c->h;

    if (data_lost_during(h, a->ret_ns, s->ret_ns) ||
        handler_called(h, a, a->ret_ns, s->ret_ns))
        return;
    if (own_fault_during(h, a->proc, a->ret_ns, s->ret_ns)) {
        c->res->told_late_own++;
        return;
    }
    if (++c->res->told_late <= c->max_print && c->out) {
        fprintf(c->out, "TOLD LATE: the first hold was lost, its holder was "
                        "told after the second began\n");
        print_rec(c, a);
        print_rec(c, s);
    }
}

/* Sweeps lock's sections by start, keeping those still open: visit sees
 * each section (its index si) with the open ones it meets (act[0..nact))
 * before it joins them. */
static int sweep(struct ctx *c, unsigned lock,
                 void (*visit)(struct ctx *c, const size_t *act, size_t nact,
                               size_t si))
{
    size_t n = 0, nact = 0;
    size_t *v = select_recs(c->h, lock, is_section, &n, by_ret);
    size_t *act = malloc((c->h->nrec + 1) * sizeof *act);
    const struct tc_rec *rec = c->h->rec;

    if (!v || !act) {
        free(v);
        free(act);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        size_t keep = 0;
        for (size_t j = 0; j < nact; j++)
            if (rec[act[j]].end_ns > rec[v[k]].ret_ns)
                act[keep++] = act[j];
        nact = keep;
        visit(c, act, nact, v[k]);
        act[nact++] = v[k];
    }
    free(v);
    free(act);
    return 0;
}

/* Any open section that conflicts with the next is an overlap, excused
 * only when either side is a documented loss.  Both sides of an excused
 * overlap are marked, for the occupancy check (both counted themselves in
 * while they met). */
static void overlaps_of(struct ctx *c, const size_t *act, size_t nact,
                        size_t si)
{
    const struct tc_rec *rec = c->h->rec, *s = &rec[si];

    for (size_t j = 0; j < nact; j++) {
        const struct tc_rec *a = &rec[act[j]];
        if (!conflicts(a, s))
            continue;
        if (c->lost[act[j]] || c->lost[si]) {
            c->excused[act[j]] = c->excused[si] = 1;
            if (c->lost[act[j]])
                check_told(c, a, s);
            continue;
        }
        report(c,
               a->mode == TC_READ || s->mode == TC_READ ? TC_V_RW_OVERLAP
                                                        : TC_V_OVERLAP,
               a, s, "two holds at once, neither lost");
    }
}

static int check_overlaps(struct ctx *c, unsigned lock)
{
    return sweep(c, lock, overlaps_of);
}

/* A semaphore: as many open as it has permits when the next starts is an
 * over-grant, excused when any of them is a documented loss (all are then
 * marked, as both sides of an excused overlap are). */
static void overgrant_of(struct ctx *c, const size_t *act, size_t nact,
                         size_t si)
{
    const struct tc_rec *rec = c->h->rec;
    unsigned lock = rec[si].lock;
    unsigned permits = c->h->permits[lock] ? c->h->permits[lock] : 1;
    int lost = c->lost[si];

    for (size_t j = 0; j < nact; j++)
        lost |= c->lost[act[j]];
    if (nact >= permits && lost) {
        for (size_t j = 0; j < nact; j++)
            c->excused[act[j]] = 1;
        c->excused[si] = 1;
    } else if (nact >= permits) {
        report(c, TC_V_OVERGRANT, &rec[act[0]], &rec[si],
               "more sections at "
               "once than the semaphore has permits, none lost");
    }
}

static int check_overgrant(struct ctx *c, unsigned lock)
{
    return sweep(c, lock, overgrant_of);
}

static int has_token(const struct tc_rec *r)
{
    return r->rc == 0 && r->op != TC_OP_NESTED && r->ret_ns &&
           r->mode != TC_READ && r->token_rc == 0;
}

/* A hold whose call returned before another's call was made was granted
 * first, so its token must be smaller: walk the calls in order while the
 * returns that precede each are folded into a running maximum. */
static int check_tokens(struct ctx *c, unsigned lock)
{
    size_t n = 0, n2 = 0, *r = select_recs(c->h, lock, has_token, &n, by_ret);
    size_t *s = r ? select_recs(c->h, lock, has_token, &n2, by_call) : NULL;
    const struct tc_rec *rec = c->h->rec, *max = NULL;
    size_t i = 0;

    if (!r || !s) {
        free(r);
        free(s);
        return -1;
    }
    for (size_t k = 0; k < n2; k++) {
        const struct tc_rec *b = &rec[s[k]];
        for (; i < n && rec[r[i]].ret_ns < b->call_ns; i++)
            if (!max || rec[r[i]].token > max->token)
                max = &rec[r[i]];
        if (max && b->token <= max->token &&
            !data_lost_during(c->h, max->call_ns, b->ret_ns))
            report(c, TC_V_TOKEN, max, b, "granted later, token not greater");
    }
    free(r);
    free(s);
    return 0;
}

/* The counter of a lock: each accepted write added one, and a write whose
 * reply never came may have.  No excuse for lost holds or data losses: the
 * counter's server is not the locks' and no fault touches it, and the
 * fence refuses the write of a lost hold once a newer holder has been
 * there (a lost update is refused, not excused).  A write that replaced a
 * value other than the one its read returned is a lost update all the
 * same (two holds with one token get through the fence together). */
static void check_counter(struct ctx *c, unsigned lock)
{
    const struct tc_history *h = c->h;
    long long counted = 0, unsure = 0, got = h->counter[lock];
    char what[160];

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != lock || r->rc != 0 || r->op == TC_OP_NESTED)
            continue;
        if (r->flags & TC_F_COUNTED) {
            counted++;
            if (r->flags & TC_F_CLOBBER)
                report(c, TC_V_COUNTER, r, NULL,
                       "lost update: the write "
                       "replaced a value its read had not returned");
        }
        if (r->flags & TC_F_COUNT_UNSURE)
            unsure++;
    }
    c->res->fenced_writes += (unsigned long)counted;
    if (got >= counted && got <= counted + unsure)
        return;
    snprintf(what, sizeof what,
             "lock %u: counter %lld, %lld writes accepted "
             "by the fence, %lld unsure",
             lock, got, counted, unsure);
    report(c, TC_V_COUNTER, NULL, NULL, what);
}

/* ---- the fence --------------------------------------------------------------- */

/* A call the fence accepted, at its place in the fence's order: the write
 * of value v (rval + 1) after the reads of v - 1, the reads of v after the
 * write of v, a write that replaced another of its value after that one.
 * Calls of one key are in no known order among themselves. */
struct fcall {
    int64_t key;
    size_t rec;
};

static int by_key(const void *a, const void *b)
{
    int64_t x = ((const struct fcall *)a)->key;
    int64_t y = ((const struct fcall *)b)->key;
    return x < y ? -1 : x > y;
}

static size_t fence_calls(const struct tc_history *h, unsigned lock,
                          struct fcall *v)
{
    size_t k = 0;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != lock || r->rc != 0 || r->op == TC_OP_NESTED)
            continue;
        if (r->flags & TC_F_READ)
            v[k++] = (struct fcall){ 3 * r->rval + 1, i };
        if (r->flags & TC_F_COUNTED)
            v[k++] = (struct fcall){
                3 * (r->rval + 1) + ((r->flags & TC_F_CLOBBER) ? 2 : 0), i
            };
    }
    return k;
}

/* Walk the accepted calls in the fence's order with the highest token
 * accepted before each: a call with a lower token got through a fence
 * that must refuse it.  Verified, not assumed: this is what shows that the
 * fence holds (one count per section). */
static int check_stale_writes(struct ctx *c, unsigned lock)
{
    const struct tc_history *h = c->h;
    struct fcall *v = malloc((2 * h->nrec + 1) * sizeof *v);
    unsigned char *seen = calloc(h->nrec + 1, 1);
    const struct tc_rec *max = NULL;
    size_t n;

    if (!v || !seen) {
        free(v);
        free(seen);
        return -1;
    }
    n = fence_calls(h, lock, v);
    qsort(v, n, sizeof *v, by_key);
    for (size_t g = 0, e; g < n; g = e) {
        const struct tc_rec *gmax = max;
        for (e = g; e < n && v[e].key == v[g].key; e++) {
            const struct tc_rec *r = &h->rec[v[e].rec];
            if (max && r->token < max->token && !seen[v[e].rec]) {
                seen[v[e].rec] = 1;
                report(c, TC_V_STALE_WRITE, max, r,
                       "accepted after a "
                       "higher token (the first record) had been");
            }
            if (!gmax || r->token > gmax->token)
                gmax = r;
        }
        max = gmax;
    }
    free(v);
    free(seen);
    return 0;
}

/* The holder was told that this hold was lost: its unlock said EPERM, or
 * its unlock did not succeed (EIO, or none: killed) and its lost handler
 * ran while it held or within slack of the unlock.  An unlock that
 * succeeded found the hold in place: a handler call near it is about
 * another hold of the same process. */
static int told_lost(const struct tc_history *h, const struct tc_rec *r)
{
    return r->unlock_rc == EPERM ||
           (r->unlock_rc != 0 &&
            handler_called(h, r, r->ret_ns, r->end_ns + h->slack_ns));
}

/* The holders the fence refused: a refusal is right for a hold that was
 * lost (its holder hears of it, by the lost handler or its unlock's
 * EPERM), and wrong for one never told: a holder told it held the lock,
 * refused because an earlier hold carried a higher token.  A holder
 * killed before its unlock could tell is not judged. */
static void check_refusals(struct ctx *c, unsigned lock)
{
    const struct tc_history *h = c->h;
    unsigned long shown = 0;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != lock || !is_section(r) || !(r->flags & TC_F_STALE))
            continue;
        c->res->refused++;
        if (told_lost(h, r)) {
            c->res->refused_lost++;
        } else if (r->flags & TC_F_KILLED) {
            c->res->refused_killed++;
        } else {
            c->res->legit_refused++;
            if (h->refusal_fails)
                report(c, TC_V_REFUSED, r, NULL,
                       "STALE to a holder never "
                       "reported lost");
            else if (c->out && shown++ < c->max_print) {
                fprintf(c->out, "REFUSED, never reported lost (a figure, "
                                "not a violation here):\n");
                print_rec(c, r);
            }
        }
    }
}

/* A condition wait may also say EPERM: the hold it was to give up had been
 * lost, which the section before it records (its unlock_rc). */
static int allowed(const struct tc_history *h, const struct tc_rec *r)
{
    int op = r->op, rc = r->rc;

    if (rc == 0 || rc == EIO || (h->replicas && rc == ENOLINK))
        return 1;
    if (op == TC_OP_TRY)
        return rc == (h->kind[r->lock % TC_MAX_LOCKS] == TC_LOCK_SEM ? EAGAIN
                                                                     : EBUSY);
    return (op == TC_OP_TIMED && rc == ETIMEDOUT) ||
           ((op == TC_OP_CWAIT_CONS || op == TC_OP_CWAIT_PROD) &&
            rc == EPERM);
}

/* A timed call returns within slack of its deadline, unless its own
 * process was stopped meanwhile; the latest of them is the run's figure. */
static void check_deadline(struct ctx *c, const struct tc_rec *r)
{
    const struct tc_history *h = c->h;
    uint64_t from = r->deadline_ns > r->call_ns ? r->deadline_ns : r->call_ns;

    if (r->ret_ns <= from ||
        own_fault_during(h, r->proc, r->call_ns, r->ret_ns))
        return;
    if (r->ret_ns - from > c->res->late_max_ns)
        c->res->late_max_ns = r->ret_ns - from;
    if (r->ret_ns > from + h->slack_ns)
        report(c, TC_V_DEADLINE, r, NULL, "returned past deadline + slack");
}

/* Return values, EPERM's lost-handler call, occupancy and deadlines: all
 * properties of one record at a time. */
static void check_calls(struct ctx *c)
{
    const struct tc_history *h = c->h;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (!r->ret_ns)
            continue; /* never returned: the hang check's business */
        if (!allowed(h, r))
            report(c, TC_V_ERRNO, r, NULL, "acquiring call");
        if (r->unlock_rc != -1 && r->unlock_rc != 0 &&
            r->unlock_rc != EPERM && r->unlock_rc != EIO)
            report(c, TC_V_ERRNO, r, NULL, "unlock");
        if (r->token_rc != -1 && r->token_rc != 0 && r->token_rc != EPERM &&
            r->token_rc != EIO)
            report(c, TC_V_ERRNO, r, NULL, "token call");
        if (r->flags & TC_F_FENCE_ERR)
            report(c, TC_V_ERRNO, r, NULL,
                   "the fence answered an error "
                   "other than STALE");
        /* from the call on: self-fencing may declare the hold lost while
         * the acquire's answer is still on its way (a reply that came
         * after the hold's safe-until), and report it then */
        if (r->unlock_rc == EPERM &&
            !handler_called(h, r, r->call_ns, r->end_ns + h->slack_ns) &&
            !data_lost_during(h, r->ret_ns, r->end_ns))
            report(c, TC_V_SILENT_LOSS, r, NULL,
                   "unlock gave EPERM, the lost handler was not called");
        if ((r->flags & TC_F_OCC_BAD) && is_section(r) && !c->excused[i])
            report(c, TC_V_OCCUPANCY, r, NULL,
                   "more holders than allowed seen on entry");
        if (r->op == TC_OP_TIMED)
            check_deadline(c, r);
    }
}

/* Stretches of time [a, b). */
struct ival {
    uint64_t a, b;
};

static int by_a(const void *x, const void *y)
{
    uint64_t p = ((const struct ival *)x)->a, q = ((const struct ival *)y)->a;
    return p < q ? -1 : p > q;
}

/* The conflicting holds of a lock for one kind of waiter (a dead holder's,
 * or one whose unlock failed, lasting a lease longer), into v. */
static size_t hold_ivals(const struct tc_history *h, unsigned lock,
                         int reader, struct ival *v)
{
    size_t k = 0;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != lock || !is_section(r) ||
            (reader && r->mode == TC_READ))
            continue;
        v[k].a = r->ret_ns;
        v[k].b = r->end_ns;
        if ((r->flags & TC_F_KILLED) || r->unlock_rc == EIO)
            v[k].b += h->lease_ns;
        k++;
    }
    return k;
}

/* A semaphore is busy while every permit is held: the holds as above,
 * swept by their starts and ends (an end first where both fall at once),
 * into the stretches where as many are open as there are permits. */
struct edge {
    uint64_t t;
    int d;
};

static int by_edge(const void *x, const void *y)
{
    const struct edge *p = x, *q = y;
    return p->t < q->t ? -1 : p->t > q->t ? 1 : p->d - q->d;
}

static long sem_full_ivals(const struct tc_history *h, unsigned lock,
                           struct ival *v)
{
    struct ival *all = malloc((h->nrec + 1) * sizeof *all);
    struct edge *e = malloc((2 * h->nrec + 1) * sizeof *e);
    unsigned permits = h->permits[lock] ? h->permits[lock] : 1, open = 0;
    size_t n, k = 0;
    uint64_t from = 0;

    if (!all || !e) {
        free(all);
        free(e);
        return -1;
    }
    n = hold_ivals(h, lock, 0, all);
    for (size_t i = 0; i < n; i++) {
        e[2 * i] = (struct edge){ all[i].a, 1 };
        e[2 * i + 1] = (struct edge){ all[i].b, -1 };
    }
    qsort(e, 2 * n, sizeof *e, by_edge);
    for (size_t i = 0; i < 2 * n; i++) {
        if (e[i].d > 0 && ++open == permits)
            from = e[i].t;
        else if (e[i].d < 0 && open-- == permits)
            v[k++] = (struct ival){ from, e[i].t };
    }
    free(all);
    free(e);
    return (long)k;
}

/* Busy time of one lock for one kind of waiter: the holds that keep it out
 * and every fault window with its recovery time, merged into sorted
 * disjoint intervals. */
static struct ival *busy_union(const struct tc_history *h, unsigned lock,
                               int reader, size_t *n)
{
    struct ival *v = malloc((h->nrec + h->nfault + 1) * sizeof *v);
    size_t k = 0, m = 0;
    long sk;

    if (!v)
        return NULL;
    if (h->kind[lock] == TC_LOCK_SEM) {
        if ((sk = sem_full_ivals(h, lock, v)) < 0) {
            free(v);
            return NULL;
        }
        k = (size_t)sk;
    } else {
        k = hold_ivals(h, lock, reader, v);
    }
    for (size_t i = 0; i < h->nfault; i++) {
        v[k].a = h->fault[i].start_ns;
        v[k++].b = h->fault[i].end_ns + h->lease_ns + h->slack_ns;
    }
    qsort(v, k, sizeof *v, by_a);
    for (size_t i = 0; i < k; i++) {
        if (m && v[i].a <= v[m - 1].b) {
            if (v[i].b > v[m - 1].b)
                v[m - 1].b = v[i].b;
        } else {
            v[m++] = v[i];
        }
    }
    *n = m;
    return v;
}

/* Longest time inside [from, to] that no busy interval covers. */
static uint64_t longest_free(const struct ival *v, size_t n, uint64_t from,
                             uint64_t to)
{
    size_t lo = 0, hi = n;
    uint64_t at = from, best = 0;

    while (lo < hi) { /* first interval ending after from */
        size_t mid = (lo + hi) / 2;
        if (v[mid].b <= from)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < n && v[i].a < to && at < to; i++) {
        if (v[i].a > at && v[i].a - at > best)
            best = v[i].a - at;
        if (v[i].b > at)
            at = v[i].b;
    }
    if (at < to && to - at > best)
        best = to - at;
    return best;
}

/* A blocking call may wait while others hold the lock, during faults and
 * for a while after them; waiting longer than hang_ns on a free lock is a
 * hang (a missed wake-up, a waiter nobody serves).  A call that never
 * returned waits until the end of the run. */
static int check_hangs(struct ctx *c, unsigned lock)
{
    const struct tc_history *h = c->h;
    size_t nr = 0, nw = 0;
    struct ival *rd = busy_union(h, lock, 1, &nr);
    struct ival *wr = rd ? busy_union(h, lock, 0, &nw) : NULL;

    if (!rd || !wr) {
        free(rd);
        free(wr);
        return -1;
    }
    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        uint64_t to = r->ret_ns ? r->ret_ns : h->end_ns;
        if (r->lock != lock || r->op == TC_OP_NESTED || r->op == TC_OP_TRY ||
            r->op == TC_OP_CWAIT_CONS || r->op == TC_OP_CWAIT_PROD)
            continue; /* a condition wait: check_items' business */
        if (!r->ret_ns && (r->flags & TC_F_KILLED))
            continue;
        if (r->mode == TC_READ
                ? longest_free(rd, nr, r->call_ns, to) > h->hang_ns
                : longest_free(wr, nw, r->call_ns, to) > h->hang_ns)
            report(c, TC_V_HANG, r, NULL,
                   r->ret_ns
                       ? "waited on a free lock longer than the hang bound"
                       : "never returned");
    }
    free(rd);
    free(wr);
    return 0;
}

/* ---- the queue --------------------------------------------------------------- */

/* A lost-handler call for the queue's mutex, in any process, in [from, to]:
 * two threads may have had the queue at once. */
static int queue_lost_during(const struct tc_history *h, uint64_t from,
                             uint64_t to)
{
    for (size_t i = 0; i < h->nlost; i++)
        if (h->lost[i].lock == h->queue_lock && h->lost[i].ns >= from &&
            h->lost[i].ns <= to)
            return 1;
    return 0;
}

/* Every item put is taken once, or is still in the queue at the end.  A
 * documented loss on the queue's mutex, a data loss, or a fault on the
 * process that put or took it (killed between its bookkeeping and the
 * queue's) excuses an item lost or taken twice. */
static void check_takes(struct ctx *c)
{
    const struct tc_history *h = c->h;
    char what[200];

    for (size_t i = 0; i < h->nitem; i++) {
        const struct tc_item *it = &h->item[i];
        int queued = !!(it->flags & TC_I_QUEUED);
        if (!it->put_ns)
            continue;
        c->res->items++;
        if (it->takes + queued == 1)
            continue;
        if (data_lost_during(h, it->put_ns, h->end_ns) ||
            queue_lost_during(h, it->put_ns, h->end_ns) ||
            own_fault_during(h, it->put_proc, it->put_ns, h->end_ns) ||
            (it->take_ns &&
             own_fault_during(h, it->take_proc, it->take_ns, h->end_ns)))
            continue;
        snprintf(what, sizeof what,
                 "item %zu put by proc %" PRIu32 " at "
                 "%.3f ms: taken %u times%s",
                 i, it->put_proc, ms(c, it->put_ns), (unsigned)it->takes,
                 queued ? ", and still queued at the end" : "");
        report(c, TC_V_ITEM, NULL, NULL, what);
    }
}

/* When some consumer was inside a condition wait on the queue: merged, and
 * gaps shorter than slack_ns bridged (a consumer holds the mutex between
 * two waits while it looks at the queue again).  A wait whose process died
 * in it is a dead waiter: the condition skips it (documented). */
static struct ival *consumer_waits(const struct tc_history *h, size_t *n)
{
    struct ival *v = malloc((h->nrec + 1) * sizeof *v);
    size_t k = 0, m = 0;

    if (!v)
        return NULL;
    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != h->queue_lock || r->op != TC_OP_CWAIT_CONS ||
            (!r->ret_ns && (r->flags & TC_F_KILLED)))
            continue;
        v[k].a = r->call_ns;
        v[k++].b = r->ret_ns ? r->ret_ns : h->end_ns;
    }
    qsort(v, k, sizeof *v, by_a);
    for (size_t i = 0; i < k; i++) {
        if (m && v[i].a <= v[m - 1].b + h->slack_ns) {
            if (v[i].b > v[m - 1].b)
                v[m - 1].b = v[i].b;
        } else {
            v[m++] = v[i];
        }
    }
    *n = m;
    return v;
}

/* An item in the queue while a consumer sleeps on "not empty": the signal
 * after the put should have woken one.  Longer than hang_ns of that, with
 * no fault, no busy mutex and a signal that was sent, is a lost wake-up. */
static void item_wakeup(struct ctx *c, const struct tc_item *it,
                        const struct ival *w, size_t nw,
                        const struct ival *busy, size_t nb)
{
    uint64_t a = it->put_ns, b = it->take_ns ? it->take_ns : c->h->end_ns;
    size_t lo = 0, hi = nw;
    char what[200];

    if (b <= a || b - a <= c->h->hang_ns || (it->flags & TC_I_NOSIGNAL))
        return;
    while (lo < hi) { /* first wait ending after the put */
        size_t mid = (lo + hi) / 2;
        if (w[mid].b <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < nw && w[i].a < b; i++) {
        uint64_t x = w[i].a > a ? w[i].a : a, y = w[i].b < b ? w[i].b : b;
        if (y <= x || longest_free(busy, nb, x, y) <= c->h->hang_ns)
            continue;
        snprintf(what, sizeof what,
                 "item %zu put at %.3f ms, taken at "
                 "%.3f ms, while a consumer waited from %.3f to %.3f ms",
                 (size_t)(it - c->h->item), ms(c, it->put_ns),
                 ms(c, it->take_ns), ms(c, w[i].a), ms(c, w[i].b));
        report(c, TC_V_WAKEUP, NULL, NULL, what);
        return;
    }
}

static int check_items(struct ctx *c)
{
    const struct tc_history *h = c->h;
    size_t nw = 0, nb = 0;
    struct ival *w, *busy;

    if (h->nitem == 0)
        return 0;
    check_takes(c);
    w = consumer_waits(h, &nw);
    busy = w ? busy_union(h, h->queue_lock, 0, &nb) : NULL;
    if (!w || !busy) {
        free(w);
        free(busy);
        return -1;
    }
    for (size_t i = 0; i < h->nitem; i++)
        if (h->item[i].put_ns)
            item_wakeup(c, &h->item[i], w, nw, busy, nb);
    free(w);
    free(busy);
    return 0;
}

long tc_check(const struct tc_history *h, FILE *out, unsigned max_print,
              struct tc_result *res)
{
    struct ctx c = { h, out, max_print, res, UINT64_MAX, NULL, NULL };
    int rc = 0;

    memset(res, 0, sizeof *res);
    for (size_t i = 0; i < h->nrec; i++)
        if (h->rec[i].call_ns < c.base)
            c.base = h->rec[i].call_ns;
    for (size_t i = 0; i < h->nitem; i++)
        if (h->item[i].put_ns && h->item[i].put_ns < c.base)
            c.base = h->item[i].put_ns;
    c.lost = calloc(h->nrec + 1, 1);
    c.excused = calloc(h->nrec + 1, 1);
    if (!c.lost || !c.excused) {
        free(c.lost);
        free(c.excused);
        return -1;
    }
    mark_lost(&c);
    for (unsigned l = 0; l < h->nlocks && rc == 0; l++)
        rc = h->kind[l] == TC_LOCK_SEM ? check_overgrant(&c, l)
                                       : check_overlaps(&c, l);
    for (unsigned l = 0; l < h->nlocks && rc == 0; l++) {
        rc = check_tokens(&c, l);
        if (rc == 0)
            rc = check_hangs(&c, l);
        if (rc == 0)
            rc = check_stale_writes(&c, l);
        check_counter(&c, l);
        check_refusals(&c, l);
    }
    res->stale_accepted = res->violations[TC_V_STALE_WRITE];
    check_calls(&c);
    if (rc == 0)
        rc = check_items(&c);
    free(c.lost);
    free(c.excused);
    return rc ? -1 : (long)res->total;
}
