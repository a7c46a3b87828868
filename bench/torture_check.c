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
    "overlapping exclusive holds", "read hold during a write hold",
    "fencing token not increasing", "occupancy exceeded",
    "counter != completed writes", "undocumented return value",
    "EPERM without lost handler", "late past deadline", "hang"
};
static const char *const mnames[] = { "excl", "write", "read" };
static const char *const onames[] = { "lock", "try", "timed", "nested" };

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
    fprintf(c->out, "    #%zu proc %" PRIu32 " lock %u %s/%s rc %d: call %.3f"
            " ret %.3f end %.3f ms, deadline %.3f, token %" PRIu64
            " (rc %d), unlock rc %d, flags %#x\n",
            (size_t)(r - c->h->rec), r->proc, r->lock, mnames[r->mode % 3],
            onames[r->op % 4], r->rc, ms(c, r->call_ns), ms(c, r->ret_ns),
            ms(c, r->end_ns), ms(c, r->deadline_ns), r->token, r->token_rc,
            r->unlock_rc, r->flags);
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
        if (f->loses_data && f->start_ns <= to
            && f->end_ns + h->lease_ns >= from)
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
        if (l->proc == r->proc && l->lock == r->lock && l->ns >= from
            && l->ns <= to)
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
        if (r->unlock_rc == EPERM
            || handler_called(h, r, r->ret_ns, r->end_ns + h->slack_ns)
            || data_lost_during(h, r->ret_ns, r->end_ns)) {
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

/* Sweep one lock's sections by start, keeping those still open: any open
 * one that conflicts with the next is an overlap, excused only when either
 * side is a documented loss.  Both sides of an excused overlap are marked,
 * for the counter check (a lost holder may overwrite the other's update). */
static int check_overlaps(struct ctx *c, unsigned lock)
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
        const struct tc_rec *s = &rec[v[k]];
        size_t keep = 0;
        for (size_t j = 0; j < nact; j++) {
            const struct tc_rec *a = &rec[act[j]];
            if (a->end_ns <= s->ret_ns)
                continue;
            act[keep++] = act[j];
            if (!conflicts(a, s))
                continue;
            if (c->lost[act[j]] || c->lost[v[k]]) {
                c->excused[act[j]] = c->excused[v[k]] = 1;
                continue;
            }
            report(c, a->mode == TC_READ || s->mode == TC_READ
                          ? TC_V_RW_OVERLAP : TC_V_OVERLAP, a, s,
                   "two holds at once, neither lost");
        }
        nact = keep;
        act[nact++] = v[k];
    }
    free(v);
    free(act);
    return 0;
}

static int has_token(const struct tc_rec *r)
{
    return r->rc == 0 && r->op != TC_OP_NESTED && r->ret_ns
           && r->mode != TC_READ && r->token_rc == 0;
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
        if (max && b->token <= max->token
            && !data_lost_during(c->h, max->call_ns, b->ret_ns))
            report(c, TC_V_TOKEN, max, b,
                   "granted later, token not greater");
    }
    free(r);
    free(s);
    return 0;
}

/* The Redis counter of a lock is bumped (GET, SET) once per write section.
 * Exact unless a SET's reply was lost (may count one more) or a hold was
 * lost (an overlapping pair may lose one update); a data loss voids it. */
static void check_counter(struct ctx *c, unsigned lock)
{
    const struct tc_history *h = c->h;
    long long counted = 0, unsure = 0, excused = 0, got = h->counter[lock];
    char what[160];

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != lock || r->rc != 0 || r->op == TC_OP_NESTED)
            continue;
        if (r->flags & TC_F_COUNTED) {
            counted++;
            excused += c->excused[i];
        }
        if (r->flags & TC_F_COUNT_UNSURE)
            unsure++;
    }
    if (data_lost_during(h, 0, UINT64_MAX))
        excused = counted;
    if (got >= counted - excused && got <= counted + unsure)
        return;
    snprintf(what, sizeof what, "lock %u: counter %lld, %lld acknowledged "
             "updates, %lld unsure, %lld by lost holds", lock, got, counted,
             unsure, excused);
    report(c, TC_V_COUNTER, NULL, NULL, what);
}

static int allowed(const struct tc_history *h, int op, int rc)
{
    if (rc == 0 || rc == EIO || (h->replicas && rc == ENOLINK))
        return 1;
    return (op == TC_OP_TRY && rc == EBUSY)
           || (op == TC_OP_TIMED && rc == ETIMEDOUT);
}

/* Return values, EPERM's lost-handler call, occupancy and deadlines: all
 * properties of one record at a time. */
static void check_calls(struct ctx *c)
{
    const struct tc_history *h = c->h;

    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (!r->ret_ns)
            continue;   /* never returned: the hang check's business */
        if (!allowed(h, r->op, r->rc))
            report(c, TC_V_ERRNO, r, NULL, "acquiring call");
        if (r->unlock_rc != -1 && r->unlock_rc != 0 && r->unlock_rc != EPERM
            && r->unlock_rc != EIO)
            report(c, TC_V_ERRNO, r, NULL, "unlock");
        if (r->token_rc != -1 && r->token_rc != 0 && r->token_rc != EPERM
            && r->token_rc != EIO)
            report(c, TC_V_ERRNO, r, NULL, "token call");
        if (r->unlock_rc == EPERM
            && !handler_called(h, r, r->ret_ns, r->end_ns + h->slack_ns)
            && !data_lost_during(h, r->ret_ns, r->end_ns))
            report(c, TC_V_SILENT_LOSS, r, NULL,
                   "unlock gave EPERM, the lost handler was not called");
        if ((r->flags & TC_F_OCC_BAD) && is_section(r) && !c->excused[i])
            report(c, TC_V_OCCUPANCY, r, NULL,
                   "more holders than allowed seen on entry");
        if (r->op == TC_OP_TIMED) {
            uint64_t from = r->deadline_ns > r->call_ns ? r->deadline_ns
                                                        : r->call_ns;
            if (r->ret_ns > from + h->slack_ns
                && !own_fault_during(h, r->proc, r->call_ns, r->ret_ns))
                report(c, TC_V_DEADLINE, r, NULL, "returned past deadline "
                       "+ slack");
        }
    }
}

/* Busy time of one lock for one kind of waiter: the conflicting holds (a
 * dead holder's, or one whose unlock failed, lasting a lease longer) and
 * every fault window with its recovery time.  Merged into sorted disjoint
 * intervals. */
struct ival { uint64_t a, b; };

static int by_a(const void *x, const void *y)
{
    uint64_t p = ((const struct ival *)x)->a, q = ((const struct ival *)y)->a;
    return p < q ? -1 : p > q;
}

static struct ival *busy_union(const struct tc_history *h, unsigned lock,
                               int reader, size_t *n)
{
    struct ival *v = malloc((h->nrec + h->nfault + 1) * sizeof *v);
    size_t k = 0, m = 0;

    if (!v)
        return NULL;
    for (size_t i = 0; i < h->nrec; i++) {
        const struct tc_rec *r = &h->rec[i];
        if (r->lock != lock || !is_section(r) || (reader && r->mode == TC_READ))
            continue;
        v[k].a = r->ret_ns;
        v[k].b = r->end_ns;
        if ((r->flags & TC_F_KILLED) || r->unlock_rc == EIO)
            v[k].b += h->lease_ns;
        k++;
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

    while (lo < hi) {   /* first interval ending after from */
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
        if (r->lock != lock || r->op == TC_OP_NESTED || r->op == TC_OP_TRY)
            continue;
        if (!r->ret_ns && (r->flags & TC_F_KILLED))
            continue;
        if (r->mode == TC_READ ? longest_free(rd, nr, r->call_ns, to) > h->hang_ns
                               : longest_free(wr, nw, r->call_ns, to) > h->hang_ns)
            report(c, TC_V_HANG, r, NULL, r->ret_ns
                   ? "waited on a free lock longer than the hang bound"
                   : "never returned");
    }
    free(rd);
    free(wr);
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
    c.lost = calloc(h->nrec + 1, 1);
    c.excused = calloc(h->nrec + 1, 1);
    if (!c.lost || !c.excused) {
        free(c.lost);
        free(c.excused);
        return -1;
    }
    mark_lost(&c);
    for (unsigned l = 0; l < h->nlocks && rc == 0; l++)
        rc = check_overlaps(&c, l);
    for (unsigned l = 0; l < h->nlocks && rc == 0; l++) {
        rc = check_tokens(&c, l);
        if (rc == 0)
            rc = check_hangs(&c, l);
        check_counter(&c, l);
    }
    check_calls(&c);
    free(c.lost);
    free(c.excused);
    return rc ? -1 : (long)res->total;
}
