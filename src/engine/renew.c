/* renew.c: the renewal thread, one per process.  It extends the lease of
 * every watchdog hold and the deadline of every live waiter in batched
 * script calls, reports holds it finds lost, and finishes releases whose
 * reply was lost on the way back.
 *
 * Beside it the watch thread, which makes no network call: it declares a
 * watchdog hold lost at its safe-until bound, the last acknowledged send
 * plus the lease less a margin, unless a newer renewal was acknowledged
 * by then, so that the holder hears of it before the server can have let
 * the hold go, however long the renewal thread's calls are held up.
 *
 * An "unknown" outcome on an entry means Redis may count one hold more
 * than the owner does (an acquire or release ran but its reply never came
 * back).  The thread settles it with the kind's conditional release, so no
 * hold stays behind unknown to its owner, whatever the kind. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>

#include "internal.h"
#include "base/stats.h"

#define BATCH         100  /* entries per renewal script call */
#define MAX_KEYS      1000 /* keys per renewal script call */
#define RETRY_MS      250  /* after a failed call */
#define TOPO_WATCH_MS 1000 /* see renew_main */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* wakes the thread */
    pthread_cond_t settled;  /* an unknown outcome was settled */
    pthread_cond_t reported; /* a lost handler's call returned */
    int cv_ready;
    int running, stop, kick;
    uint64_t wake_at; /* when the thread next looks, monotonic ms */
    uint64_t idle_at; /* when to read idle threads' replies; 0 */
    pthread_t th;
    struct dist__hold *head; /* registered or unsettled entries */
} R = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* The watch thread; under R.mu. */
static struct {
    pthread_cond_t cv; /* wakes it (made with R.cv) */
    int running, stop;
    uint64_t wake_at; /* when it next looks; 0: not planned */
    pthread_t th;
} W;

static pthread_once_t renew_once = PTHREAD_ONCE_INIT;

/* Before R.mu is first taken (every hold starts here): a fork must find
 * the hook registered; and a failover renews every hold at once. */
static void renew_register(void)
{
    dist__atfork_register(dist__renew_fork, DIST__RANK_RENEW);
    dist__topo_on_change(dist__renew_all_now);
}

struct dist__hold *dist__hold_new(const struct dist__renewal *k,
                                  struct dist__names *names,
                                  unsigned long lease_ms)
{
    struct dist__hold *h;

    pthread_once(&renew_once, renew_register);
    h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    dist__names_ref(names);
    h->kind = k;
    h->names = names;
    h->lease_ms = lease_ms;
    h->renew_script = k ? k->script : DIST__S_WAITER_RENEW;
    h->owner_no = dist__thread_no();
    atomic_init(&h->lost, 0);
    atomic_init(&h->let_go, 0);
    return h;
}

void dist__hold_free(struct dist__hold *h)
{
    if (!h)
        return;
    dist__names_unref(h->names);
    if (h->keys_owned)
        free((void *)h->keys);
    free(h);
}

/* The same field dist__owner makes for the thread (or cohort) whose number
 * owner_no is, with the process's client id cid. */
static size_t owner_of(const struct dist__hold *h, const char *cid,
                       char buf[DIST__OWNER_MAX])
{
    int n;

    if (h->owner_no & DIST__OWNER_BARRIER)
        n = snprintf(buf, DIST__OWNER_MAX, "%s:b%" PRIu64, cid,
                     h->owner_no & ~DIST__OWNER_BARRIER);
    else
        n = snprintf(buf, DIST__OWNER_MAX, "%s:%" PRIu64, cid, h->owner_no);
    return (size_t)n;
}

size_t dist__hold_owner(const struct dist__hold *h, char buf[DIST__OWNER_MAX])
{
    return owner_of(h, dist__client_id(), buf);
}

static int linked(const struct dist__hold *h)
{
    return h->rprev != NULL || R.head == h;
}

static void link_hold(struct dist__hold *h)
{
    if (linked(h))
        return;
    h->rprev = NULL;
    h->rnext = R.head;
    if (R.head)
        R.head->rprev = h;
    R.head = h;
}

static void unlink_hold(struct dist__hold *h)
{
    if (!linked(h))
        return;
    if (h->rprev)
        h->rprev->rnext = h->rnext;
    else
        R.head = h->rnext;
    if (h->rnext)
        h->rnext->rprev = h->rprev;
    h->rprev = h->rnext = NULL;
}

static void *renew_main(void *arg);
static void *watch_main(void *arg);

/* Called with R.mu held. */
static void ensure_cvs(void)
{
    if (!R.cv_ready) {
        dist__cond_init_mono(&R.cv);
        dist__cond_init_mono(&R.settled);
        dist__cond_init_mono(&R.reported);
        dist__cond_init_mono(&W.cv);
        R.cv_ready = 1;
    }
}

/* Called with R.mu held: the thread th runs fn (started if it is not
 * running yet, said on stderr when it cannot be). */
static void ensure_running(int *running, int *stop, pthread_t *th,
                           void *(*fn)(void *), const char *what)
{
    if (*running)
        return;
    ensure_cvs();
    *stop = 0;
    if (dist__thread_start(th, fn, NULL) == 0)
        *running = 1;
    else
        fprintf(stderr, "distlock: cannot start the %s thread\n", what);
}

/* Called with R.mu held. */
static void ensure_thread(void)
{
    ensure_running(&R.running, &R.stop, &R.th, renew_main, "renewal");
}

/* Called with R.mu held.  Without the watch thread (it could not be
 * started) the renewal thread still finds a hold past its bound, when a
 * renewal of it ends. */
static void ensure_watch(void)
{
    ensure_running(&W.running, &W.stop, &W.th, watch_main, "watch");
}

static unsigned long period_of(const struct dist__hold *h)
{
    return h->period_ms ? h->period_ms : dist__watchdog_ms() / 3;
}

static unsigned long ms_of(const struct dist__hold *h)
{
    return h->renew_ms ? h->renew_ms : dist__watchdog_ms();
}

unsigned long dist__safe_margin_ms(unsigned long lease_ms)
{
    unsigned long m = lease_ms / 100 + dist__lease_margin_ms();

    return m < lease_ms / 3 ? m : lease_ms / 3;
}

/* h's lease runs at least until valid_until (0: unknown), so it is safe
 * until the margin before that.  R.mu held. */
static void set_bound(struct dist__hold *h, uint64_t valid_until)
{
    h->valid_until = valid_until;
    h->safe_until = h->kind && valid_until
                        ? valid_until - dist__safe_margin_ms(ms_of(h))
                        : 0;
}

/* Whether h is past its safe-until bound at now: the server may let it
 * go soon, so it counts as lost.  R.mu held. */
static int past_safe(const struct dist__hold *h, uint64_t now)
{
    return h->kind && h->safe_until && now >= h->safe_until;
}

/* The watch thread sleeps until the earliest bound; one that is sooner
 * than its plan wakes it.  R.mu held. */
static void watch_plan(const struct dist__hold *h)
{
    if (!h->safe_until)
        return;
    ensure_watch();
    if (W.running && (!W.wake_at || h->safe_until < W.wake_at))
        pthread_cond_signal(&W.cv);
}

void dist__renew_add(struct dist__hold *h, uint64_t valid_until)
{
    pthread_mutex_lock(&R.mu);
    h->registered = 1;
    set_bound(h, valid_until);
    h->due = dist__now_ms() + period_of(h); /* its lease was just set */
    link_hold(h);
    ensure_thread();
    watch_plan(h);
    /* a thread asleep past this entry's first renewal must plan again */
    if (R.wake_at > h->due) {
        R.kick = 1;
        pthread_cond_signal(&R.cv);
    }
    pthread_mutex_unlock(&R.mu);
}

void dist__renew_acked(struct dist__hold *h, uint64_t valid_until)
{
    pthread_mutex_lock(&R.mu);
    if (h->registered && !atomic_load(&h->lost) && h->valid_until &&
        valid_until > h->valid_until)
        set_bound(h, valid_until);
    pthread_mutex_unlock(&R.mu);
}

uint64_t dist__renew_safe_until(struct dist__hold *h)
{
    uint64_t until;

    pthread_mutex_lock(&R.mu);
    until =
        h->registered && !atomic_load(&h->lost) && !atomic_load(&h->let_go)
            ? h->safe_until
            : 0;
    pthread_mutex_unlock(&R.mu);
    return until;
}

struct dist__hold *dist__waiter_start(struct dist__names *names,
                                      const enum dist__nm *keys, int nkeys)
{
    struct dist__hold *w = dist__hold_new(NULL, names, 0);

    if (w && !(w->keys = dist__names_set(names, keys, nkeys))) {
        dist__hold_free(w);
        w = NULL;
    }
    if (w) {
        w->keys_owned = 1;
        w->nkeys = nkeys;
        w->renew_ms = dist__waiter_ms();
        w->period_ms = w->renew_ms / 3;
        dist__renew_add(w, 0);
    }
    return w;
}

void dist__waiter_stop(struct dist__hold *w)
{
    if (w && dist__renew_remove(w))
        dist__hold_free(w);
}

void dist__renew_set_keys(struct dist__hold *h, const struct dist__buf *keys,
                          int nkeys)
{
    pthread_mutex_lock(&R.mu);
    while (h->inflight) {
        /* the thread is reading the old keys: let it finish */
        pthread_mutex_unlock(&R.mu);
        sched_yield();
        pthread_mutex_lock(&R.mu);
    }
    h->keys = keys;
    h->nkeys = nkeys;
    pthread_mutex_unlock(&R.mu);
}

int dist__renew_remove(struct dist__hold *h)
{
    int caller_frees = 1;

    pthread_mutex_lock(&R.mu);
    h->registered = 0;
    if (linked(h)) {
        if (h->inflight || h->unknown) {
            /* the thread finishes what is under way, then frees it */
            h->orphan = 1;
            caller_frees = 0;
        } else {
            unlink_hold(h);
        }
    }
    if (h->reporting) {
        /* its loss is still to be reported: the report frees it */
        h->orphan = 1;
        caller_frees = 0;
    }
    pthread_mutex_unlock(&R.mu);
    return caller_frees;
}

void dist__renew_unknown(struct dist__hold *h, const unsigned long n[2],
                         int mode)
{
    pthread_mutex_lock(&R.mu);
    h->unknown = 1;
    h->mode = mode;
    h->n[0] = n[0];
    h->n[1] = n[1];
    /* an owner that holds nothing any more is not renewed: a renewal
     * after the release was finished would report the hold lost */
    if (n[0] + n[1] == 0)
        h->registered = 0;
    link_hold(h);
    ensure_thread();
    R.kick = 1;
    pthread_cond_signal(&R.cv);
    pthread_mutex_unlock(&R.mu);
}

void dist__renew_all_now(void)
{
    struct dist__hold *h;

    pthread_mutex_lock(&R.mu);
    if (R.running) {
        for (h = R.head; h; h = h->rnext)
            if (h->registered)
                h->due = 0;
        R.kick = 1;
        pthread_cond_signal(&R.cv);
    }
    pthread_mutex_unlock(&R.mu);
}

int dist__renew_settle(struct dist__hold *h, uint64_t until_ms)
{
    struct timespec ts;
    int rc = 0;

    pthread_mutex_lock(&R.mu);
    if (h->unknown) {
        ensure_thread();
        R.kick = 1;
        pthread_cond_signal(&R.cv);
        dist__ms_to_ts(until_ms, &ts);
        while (h->unknown && R.running && dist__now_ms() < until_ms)
            pthread_cond_timedwait(&R.settled, &R.mu, &ts);
        if (h->unknown)
            rc = dist__err(EIO,
                           "an earlier call on lock '%s' lost its reply "
                           "and Redis has not answered since",
                           h->names->name.p);
    }
    pthread_mutex_unlock(&R.mu);
    return rc;
}

/* Lost holds are reported after R.mu is released, each with its name
 * (copied: the owner may free the hold meanwhile) and the hold, kept
 * alive until its report is finished (h->reporting): an owner that lets
 * go of it before the report is decided (dist__renew_let_go) cancels it,
 * and one that lets go while the handler is being called waits for that
 * call to return.  An idle thread's loss (dist__renew_note_lost) has no
 * hold. */
struct lost {
    char *name;
    struct dist__hold *h;
};

struct lostlist {
    struct lost *v;
    size_t n, cap;
};

static void note_lost_entry(struct lostlist *l, const char *name,
                            struct dist__hold *h)
{
    struct lost *nv;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return;
        l->v = nv;
        l->cap = cap;
    }
    if ((l->v[l->n].name = strdup(name)) == NULL)
        return;
    l->v[l->n++].h = h;
    if (h)
        h->reporting++;
}

/* R.mu held. */
static void note_lost(struct lostlist *l, struct dist__hold *h)
{
    note_lost_entry(l, h->names->name.p, h);
}

/* Holds an idle thread's owed reply said were lost (read by this thread:
 * dist__route_read_idle). */
static struct lostlist idle_lost;

void dist__renew_note_lost(const char *name)
{
    note_lost_entry(&idle_lost, name, NULL);
}

/* One report of h's fewer; frees h when its owner let go of it and
 * nothing else keeps it.  R.mu held; returns whether to free h after
 * R.mu is released. */
static int report_over(struct dist__hold *h)
{
    h->reporting--;
    return h->orphan && !h->reporting && !linked(h);
}

/* Whether h's pending report is still to be made (then its handler call
 * is under way until report_end).  Decided under R.mu, so that an
 * owner's let-go either comes first (no report) or finds the report
 * under way, and waits for it. */
static int report_begin(struct dist__hold *h)
{
    int due, gone = 0;

    pthread_mutex_lock(&R.mu);
    due = !atomic_load(&h->let_go);
    if (due)
        h->calling = 1;
    else
        gone = report_over(h);
    pthread_mutex_unlock(&R.mu);
    if (gone)
        dist__hold_free(h);
    return due;
}

/* h's handler call returned: an owner waiting to let go goes on. */
static void report_end(struct dist__hold *h)
{
    int gone;

    pthread_mutex_lock(&R.mu);
    h->calling = 0;
    gone = report_over(h);
    pthread_cond_broadcast(&R.reported);
    pthread_mutex_unlock(&R.mu);
    if (gone)
        dist__hold_free(h);
}

/* Calls the lost handler for each entry of l still due, and empties it.
 * R.mu not held: the handler is the user's. */
static void report_lost(struct lostlist *l)
{
    struct dist__hold *h;
    size_t i;

    for (i = 0; i < l->n; i++) {
        h = l->v[i].h;
        if (!h) {
            dist__call_lost_handler(l->v[i].name);
        } else if (report_begin(h)) {
            dist__call_lost_handler(l->v[i].name);
            report_end(h);
        }
        free(l->v[i].name);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* A report under way is waited for: a caller that said EPERM while the
 * reporting thread was held up between deciding the report and calling
 * the handler (a process stopped there, or short of CPU) said it before
 * the handler heard of the loss, maybe long before (the Sentinel torture
 * run: "EPERM without lost handler"). */
int dist__renew_let_go(struct dist__hold *h)
{
    int told;

    pthread_mutex_lock(&R.mu);
    atomic_store(&h->let_go, 1);
    h->registered = 0;
    while (h->calling)
        pthread_cond_wait(&R.reported, &R.mu);
    told = !atomic_load(&h->lost) ? 0 : h->reporting ? 1 : 2;
    pthread_mutex_unlock(&R.mu);
    return told;
}

/* The thread is done with h for this round: it leaves the registry when
 * nothing keeps it there, and is freed when its owner already let go.
 * Only here is a hold unlinked while the thread works, so a hold in flight
 * is never freed under it.  R.mu held. */
static void finish(struct dist__hold *h)
{
    h->inflight = 0;
    if (h->unknown)
        return;
    if (h->orphan) {
        unlink_hold(h);
        if (!h->reporting) /* else the report frees it */
            dist__hold_free(h);
    } else if (!h->registered) {
        unlink_hold(h);
    }
}

/* Settles one unknown outcome with the kind's conditional release.  R.mu
 * held on entry and exit, dropped for the call (the owner waits for the
 * settle before it touches h again).  Returns -1 when Redis did not
 * answer. */
static int settle_one(struct dist__hold *h, struct lostlist *lost)
{
    int gone = 0, rc;

    pthread_mutex_unlock(&R.mu);
    rc = h->kind->settle(h, &gone);
    pthread_mutex_lock(&R.mu);
    if (rc != 0)
        return -1;
    h->unknown = 0;
    if (gone && h->n[0] + h->n[1] > 0 && !h->orphan &&
        !atomic_load(&h->lost) && !atomic_load(&h->let_go)) {
        atomic_store(&h->lost, 1);
        h->registered = 0;
        note_lost(lost, h);
    }
    pthread_cond_broadcast(&R.settled);
    return 0;
}

static int nkeys_of(const struct dist__hold *h)
{
    return h->keys ? h->nkeys : 1;
}

/* After a renewal of h that was sent at sent: whether its hold is to be
 * reported lost.  Gone, it is.  Renewed, it is too when the answer came
 * back after h's safe-until bound: the owner was told, or is about to be
 * (the watch thread), that the hold may be gone, since nothing showed that
 * it still was (a slow network or server, or a starved renewal thread);
 * the owner then gets EPERM from its unlock, and what Redis still keeps of
 * the hold ends with its lease.  Otherwise the lease now runs from sent.
 * R.mu held. */
static int renewal_lost(struct dist__hold *h, int renewed, uint64_t sent,
                        unsigned long ms)
{
    if (!renewed)
        return 1;
    if (past_safe(h, dist__now_ms()))
        return 1;
    set_bound(h, sent + ms);
    return 0;
}

/* h passed its safe-until bound before any renewal was confirmed: Redis
 * may let the hold go (and give it to another) soon, while renewals went
 * unanswered or were answered with what no renewal script returns.  (The
 * watch thread has found it already, unless it could not be started.) */
static int lease_over(const struct dist__hold *h)
{
    return past_safe(h, dist__now_ms());
}

/* What one renewal call did to each of its n entries; r the reply, NULL
 * when none came.  Only 1 (renewed) and 0 (gone) are answers: anything
 * else (a reply of another shape, an impossible number) counts as no
 * answer, retried soon.  An entry is reported lost when it is gone, or
 * when no answer confirmed it before its lease ran out.  R.mu held.
 * Returns 0, or -1 when some entry got no answer. */
static int batch_results(struct dist__hold **hs, size_t n,
                         const redisReply *r, uint64_t sent, unsigned long ms,
                         struct lostlist *lost)
{
    uint64_t renewed = 0, failed = 0;
    size_t i, unanswered = 0;

    for (i = 0; i < n; i++) {
        struct dist__hold *h = hs[i];
        long long ok = 0;
        int got = r && r->type == REDIS_REPLY_ARRAY && r->elements == n &&
                  dist__reply_int(r, i, &ok) == 0 && (ok == 0 || ok == 1);
        /* A hold that is gone is lost.  A waiter (no kind) dropped from
         * its queue (purged while its process could not renew it, or by
         * hand) is not: it stays registered and renewed every period,
         * which works again once it has queued again at its next try (a
         * fair waiter's renewal script wakes it for that); a waiter
         * marked lost would no longer be renewed after queueing again,
         * and be purged again a window later. */
        if (!h->orphan && h->registered && h->kind &&
            (got ? renewal_lost(h, ok != 0, sent, ms) : lease_over(h))) {
            atomic_store(&h->lost, 1);
            h->registered = 0;
            note_lost(lost, h);
        }
        /* holds only: a queued waiter's refresh is not a renewal */
        renewed += h->kind && got && ok;
        failed += h->kind && !got;
        unanswered += !got;
    }
    dist__stat_add(DIST__ST_RENEWED, renewed);
    dist__stat_add(DIST__ST_RENEW_FAILED, failed);
    return unanswered ? -1 : 0;
}

/* Renews n entries of one kind and one ms value in one call.  R.mu held,
 * dropped for the call.  Returns 0, or -1 when Redis did not answer. */
static int renew_batch(struct dist__hold **hs, size_t n, unsigned long ms,
                       struct lostlist *lost)
{
    struct dist__buf *kv;
    char msbuf[24], (*counts)[12], (*owners)[DIST__OWNER_MAX], *copy, *p;
    const char *cid;
    redisReply *r = NULL;
    size_t i, nk = 0, k = 0, bytes = 0;
    int j, rc, script = hs[0]->renew_script;
    uint64_t sent;

    for (i = 0; i < n; i++) {
        nk += (size_t)nkeys_of(hs[i]);
        for (j = 0; hs[i]->keys && j < hs[i]->nkeys; j++)
            bytes += hs[i]->keys[j].len;
    }
    kv = malloc((nk + 1 + 2 * n) * sizeof *kv);
    counts = malloc(n * sizeof *counts);
    owners = malloc(n * sizeof *owners);
    copy = p = malloc(bytes + 1);
    if (!kv || !counts || !owners || !copy) {
        free(kv);
        free(counts);
        free(owners);
        free(copy);
        return -1;
    }
    cid = dist__client_id(); /* once: it takes a mutex */
    snprintf(msbuf, sizeof msbuf, "%lu", ms);
    for (i = 0; i < n; i++) {
        const struct dist__hold *h = hs[i];
        /* An entry's own keys belong to its owner, who may free them once
         * it let go of the entry, while this call still runs: copied.  The
         * names stay with the entry until the call is done. */
        for (j = 0; h->keys && j < h->nkeys; j++) {
            memcpy(p, h->keys[j].p, h->keys[j].len);
            kv[k++] = (struct dist__buf){ p, h->keys[j].len };
            p += h->keys[j].len;
        }
        if (!h->keys)
            kv[k++] = h->names->name;
    }
    kv[k++] = (struct dist__buf){ msbuf, strlen(msbuf) };
    for (i = 0; i < n; i++) {
        snprintf(counts[i], sizeof counts[i], "%d", nkeys_of(hs[i]));
        kv[k++] =
            (struct dist__buf){ owners[i], owner_of(hs[i], cid, owners[i]) };
        kv[k++] = (struct dist__buf){ counts[i], strlen(counts[i]) };
    }
    pthread_mutex_unlock(&R.mu);

    sent = dist__now_ms();
    rc = dist__route_run(0, script, (int)nk, kv, (int)k, &r); /* no limit */
    free(kv);
    free(counts);
    free(owners);
    free(copy);

    pthread_mutex_lock(&R.mu);
    rc = batch_results(hs, n, rc == 0 ? r : NULL, sent, ms, lost);
    freeReplyObject(r);
    return rc;
}

int dist__renew_one(const struct dist__renewal *k, struct dist__names *names,
                    const struct dist__buf *keys, int nkeys, unsigned long ms,
                    uint64_t limit)
{
    struct dist__buf *kv;
    char msbuf[24], nbuf[12];
    redisReply *r = NULL;
    long long ok = 0;
    size_t olen;
    const char *owner = dist__owner(&olen);
    int i, rc;

    if (!keys) {
        keys = &names->name;
        nkeys = 1;
    }
    if (!(kv = malloc(((size_t)nkeys + 3) * sizeof *kv)))
        return -1;
    for (i = 0; i < nkeys; i++)
        kv[i] = keys[i];
    snprintf(msbuf, sizeof msbuf, "%lu", ms);
    snprintf(nbuf, sizeof nbuf, "%d", nkeys);
    kv[i++] = (struct dist__buf){ msbuf, strlen(msbuf) };
    kv[i++] = (struct dist__buf){ owner, olen };
    kv[i++] = (struct dist__buf){ nbuf, strlen(nbuf) };
    rc = dist__route_run(limit, k->script, nkeys, kv, i, &r);
    free(kv);
    /* 1 or 0 are answers; anything else is no answer (batch_results) */
    if (rc == 0 && (dist__reply_int(r, 0, &ok) != 0 || (ok != 0 && ok != 1)))
        rc = -1;
    freeReplyObject(r);
    return rc == 0 ? ok != 0 : -1;
}

static int by_due(const void *a, const void *b)
{
    uint64_t x = (*(struct dist__hold *const *)a)->due,
             y = (*(struct dist__hold *const *)b)->due;

    return x < y ? -1 : x > y;
}

/* When h, renewed by a call that returned at now, is next due.  One taken
 * early to fill a batch keeps its place: a period after it was due, not
 * after it was sent.  Counted from the send, an entry taken early moved
 * earlier each time; in every round some were renewed up to a quarter
 * period early (a tenth of all renewals, counted per entry, with 10,000
 * locks), and the rounds ended in batches partly filled: 100,000 locks
 * cost 100.2 to 117.6 calls a second where 100 do.  It is never late for
 * that: taken at most a quarter period early, its next renewal is due at
 * most 1.25 periods after this one was sent, well inside the lease (three
 * periods). */
static uint64_t next_due(const struct dist__hold *h, uint64_t now)
{
    return (h->due > now ? h->due : now) + period_of(h);
}

/* One round over the registry: settles unknown outcomes, renews what is due, and
 * returns when the next entry falls due (monotonic ms).  R.mu held. */
static uint64_t tick(struct lostlist *lost)
{
    struct dist__hold *h, **all, **batch;
    uint64_t now = dist__now_ms(), next = now + 60000, back;
    size_t n, i, j, count = 0, nk;
    int failed = 0, cluster;

    /* Snapshot first: the list changes while the mutex is dropped, but
     * entries marked in flight are freed by nobody but finish().  An entry
     * a quarter period from due is taken too, to fill batches; the
     * snapshot is sorted by due time, so that batches go out soonest due
     * first and the last one of a kind, partly filled, holds the entries
     * that can wait longest. */
    for (h = R.head; h; h = h->rnext)
        count++;
    if (count == 0)
        return next;
    all = malloc(count * sizeof *all);
    batch = malloc(count * sizeof *batch);
    if (!all || !batch) {
        free(all);
        free(batch);
        return now + RETRY_MS;
    }
    for (h = R.head, i = 0; h; h = h->rnext) {
        int due = h->registered && !h->orphan && !atomic_load(&h->lost) &&
                  h->due <= now + period_of(h) / 4;
        if (!h->inflight && (due || h->unknown)) {
            h->inflight = 1 + due; /* 2: renew it this round */
            all[i++] = h;
        }
    }
    count = i;
    qsort(all, count, sizeof *all, by_due);

    for (i = 0; i < count; i++)
        if (all[i]->unknown && settle_one(all[i], lost) != 0)
            failed = 1;
    /* batches of one kind and one ms value (and on a cluster one slot: a
     * script's keys must share one) */
    cluster = dist__cfg_mode() == DIST__MODE_CLUSTER;
    for (i = 0; i < count; i++) {
        int bad;
        h = all[i];
        if (h->inflight != 2)
            continue;
        n = 0;
        nk = 0;
        for (j = i; j < count && n < BATCH; j++) {
            struct dist__hold *o = all[j];
            /* the first always goes in: one larger than MAX_KEYS goes alone */
            if (o->inflight == 2 && o->renew_script == h->renew_script &&
                ms_of(o) == ms_of(h) &&
                (!cluster || o->names->slot == h->names->slot) &&
                (n == 0 || nk + (size_t)nkeys_of(o) <= MAX_KEYS)) {
                o->inflight = 1;
                nk += (size_t)nkeys_of(o);
                batch[n++] = o;
            }
        }
        /* A batch not full of which nothing is due yet waits for a later
         * round (at the latest when its first entry falls due), where
         * more entries fill it: one call less per round. */
        if (n < BATCH && batch[0]->due > dist__now_ms())
            continue;
        bad = renew_batch(batch, n, ms_of(h), lost) != 0;
        failed |= bad;
        back = dist__now_ms();
        for (j = 0; j < n; j++)
            batch[j]->due = bad ? back + RETRY_MS : next_due(batch[j], back);
    }
    for (i = 0; i < count; i++)
        finish(all[i]);
    free(all);
    free(batch);

    for (h = R.head; h; h = h->rnext) {
        if (h->unknown && failed && now + RETRY_MS < next)
            next = now + RETRY_MS;
        /* an entry found gone waits for its owner, not for a renewal: its
         * old due time would make the thread spin */
        if (h->registered && !h->orphan && !atomic_load(&h->lost) &&
            h->due < next)
            next = h->due;
    }
    return next;
}

/* The idle threads' owed replies, when due; wake comes no later than the
 * next look.  R.mu held, dropped for the read. */
static void read_idle(uint64_t *wake)
{
    uint64_t next;

    if (R.idle_at && R.idle_at <= dist__now_ms()) {
        R.idle_at = 0;
        pthread_mutex_unlock(&R.mu);
        next = dist__route_read_idle();
        report_lost(&idle_lost);
        pthread_mutex_lock(&R.mu);
        if (next && (!R.idle_at || next < R.idle_at))
            R.idle_at = next;
    }
    if (R.idle_at && R.idle_at < *wake)
        *wake = R.idle_at;
}

void dist__renew_idle_watch(void)
{
    uint64_t at = dist__now_ms() + DIST__IDLE_READ_MS;

    pthread_once(&renew_once, renew_register);
    pthread_mutex_lock(&R.mu);
    ensure_thread();
    if (!R.idle_at || at < R.idle_at)
        R.idle_at = at;
    if (R.wake_at > R.idle_at) {
        R.kick = 1;
        pthread_cond_signal(&R.cv);
    }
    pthread_mutex_unlock(&R.mu);
}

static void *renew_main(void *arg)
{
    struct timespec ts;
    uint64_t wake, look = 0;
    int orphaned = 0;

    DIST__UNUSED(arg);
    pthread_mutex_lock(&R.mu);
    while (!R.stop) {
        struct lostlist lost = { 0 };

        R.kick = 0;
        wake = tick(&lost);
        if (lost.n) {
            pthread_mutex_unlock(&R.mu);
            report_lost(&lost);
            pthread_mutex_lock(&R.mu);
        }
        free(lost.v); /* report_lost emptied it, or never ran */
        read_idle(&wake);

        if (R.head && dist__cfg_mode() != DIST__MODE_SINGLE) {
            /* Holds on Sentinel or Cluster: look at the topology about
             * once a second (the lookup asks the network only when its own
             * period is due), so that a failover is seen, and every hold
             * renewed on the new master, within about a second of it
             * rather than at the next renewal. */
            struct dist__cfg cfg;
            struct dist__addr a;
            pthread_mutex_unlock(&R.mu);
            dist__cfg_get(&cfg);
            dist__route(&cfg, 0, NULL, &a);
            pthread_mutex_lock(&R.mu);
            if (!R.kick && wake > dist__now_ms() + TOPO_WATCH_MS)
                wake = dist__now_ms() + TOPO_WATCH_MS;
        }
        /* The program's threads are all gone (main called pthread_exit,
         * say): this one must not keep the process alive.  Its holds
         * end with their leases, as they would at exit.  Nobody joins
         * it; a call that needs the thread again starts another. */
        if (dist__threads_orphaned(&look)) {
            orphaned = 1;
            R.running = 0;
            pthread_detach(pthread_self());
            break;
        }
        if (wake > look)
            wake = look;
        R.wake_at = wake;
        dist__ms_to_ts(wake, &ts);
        while (!R.stop && !R.kick && dist__now_ms() < wake)
            if (pthread_cond_timedwait(&R.cv, &R.mu, &ts) == ETIMEDOUT)
                break;
    }
    R.wake_at = 0;
    dist__route_close_thread();
    pthread_mutex_unlock(&R.mu);
    if (orphaned)
        dist__thread_orphan_exit();
    return NULL;
}

/* Marks lost every watched hold past its safe-until bound, into lost;
 * returns the earliest bound still ahead (monotonic ms; 0: none).  A hold
 * in flight is marked too: batch_results then leaves it alone, as one that
 * is no longer registered.  R.mu held. */
static uint64_t watch_tick(struct lostlist *lost)
{
    uint64_t now = dist__now_ms(), next = 0;
    struct dist__hold *h;

    for (h = R.head; h; h = h->rnext) {
        if (!h->registered || h->orphan || !h->safe_until ||
            atomic_load(&h->lost) || atomic_load(&h->let_go))
            continue;
        if (past_safe(h, now)) {
            atomic_store(&h->lost, 1);
            h->registered = 0;
            note_lost(lost, h);
        } else if (!next || h->safe_until < next) {
            next = h->safe_until;
        }
    }
    return next;
}

/* The watch thread: no network call, no lock but R.mu, so that a renewal
 * held up by a silent server cannot hold up the news.  It is late only by
 * its own wake-up and by a lost handler still running for another hold. */
static void *watch_main(void *arg)
{
    struct timespec ts;
    uint64_t look = 0, wake;
    int orphaned = 0;

    DIST__UNUSED(arg);
    pthread_mutex_lock(&R.mu);
    while (!W.stop) {
        struct lostlist lost = { 0 };

        W.wake_at = watch_tick(&lost);
        if (lost.n) {
            pthread_mutex_unlock(&R.mu);
            report_lost(&lost);
            pthread_mutex_lock(&R.mu);
            continue; /* time passed in the handler: look again */
        }
        free(lost.v);
        /* The program's threads are all gone: this one must not keep the
         * process alive either (see renew_main). */
        if (dist__threads_orphaned(&look)) {
            orphaned = 1;
            W.running = 0;
            pthread_detach(pthread_self());
            break;
        }
        wake = W.wake_at && W.wake_at < look ? W.wake_at : look;
        dist__ms_to_ts(wake, &ts);
        if (!W.stop)
            pthread_cond_timedwait(&W.cv, &R.mu, &ts);
    }
    W.wake_at = 0;
    pthread_mutex_unlock(&R.mu);
    if (orphaned)
        dist__thread_orphan_exit();
    return NULL;
}

void dist__renew_shutdown(void)
{
    struct dist__hold *h, *next;
    pthread_t th, wth;
    int running, watching;

    pthread_once(&renew_once, renew_register);
    pthread_mutex_lock(&R.mu);
    running = R.running;
    th = R.th;
    R.stop = 1;
    watching = W.running;
    wth = W.th;
    W.stop = 1;
    if (R.cv_ready) {
        pthread_cond_signal(&R.cv);
        pthread_cond_signal(&W.cv);
    }
    pthread_mutex_unlock(&R.mu);
    if (running)
        pthread_join(th, NULL);
    if (watching)
        pthread_join(wth, NULL);

    pthread_mutex_lock(&R.mu);
    R.running = 0;
    W.running = 0;
    /* The lock objects still own their holds; only orphans are ours. */
    for (h = R.head; h; h = next) {
        next = h->rnext;
        h->rprev = h->rnext = NULL;
        h->registered = 0;
        h->unknown = 0;
        if (h->orphan)
            dist__hold_free(h);
    }
    R.head = NULL;
    if (R.cv_ready)
        pthread_cond_broadcast(&R.settled);
    pthread_mutex_unlock(&R.mu);
}

void dist__renew_fork(int phase)
{
    if (phase == 0) {
        pthread_mutex_lock(&R.mu);
    } else if (phase == 1) {
        pthread_mutex_unlock(&R.mu);
    } else {
        /* The thread and the parent's holds did not come along.  R.mu
         * is the forking thread's, which the child's one thread is. */
        if (R.cv_ready) {
            dist__cond_init_mono(&R.cv);
            dist__cond_init_mono(&R.settled);
            dist__cond_init_mono(&R.reported);
            dist__cond_init_mono(&W.cv);
        }
        R.running = 0;
        W.running = 0;
        W.stop = 0;
        W.wake_at = 0;
        R.stop = 0;
        R.kick = 0;
        R.idle_at = 0;
        R.head = NULL;
        pthread_mutex_unlock(&R.mu);
    }
}
