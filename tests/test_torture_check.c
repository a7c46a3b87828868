/*
 * test_torture_check: the torture run's checker (bench/torture_check.h) on
 * hand-made histories: each kind of violation is caught, a clean history
 * and a documented loss pass; for the semaphore (permits over-granted,
 * by the history and by the shared-memory count) and the condition
 * variable's queue (items lost or doubled, lost wake-ups) as for locks;
 * for the fence in front of the counter, its two figures (a stale write
 * accepted, a legitimate holder refused) and a lost update.  No Redis.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "torture_check.h"

#define MS 1000000ULL
#define T0 (1000 * MS) /* histories start at an arbitrary clock value */

/* Lock 0 is a mutex, lock 1 a rwlock; bounds as a run would set them. */
static struct tc_history hist(const struct tc_rec *rec, size_t n)
{
    struct tc_history h;

    memset(&h, 0, sizeof h);
    h.rec = rec;
    h.nrec = n;
    h.nlocks = 2;
    h.kind[0] = TC_LOCK_MUTEX;
    h.kind[1] = TC_LOCK_RW;
    h.end_ns = T0 + 60000 * MS;
    h.lease_ns = 1000 * MS;
    h.slack_ns = 500 * MS;
    h.hang_ns = 3000 * MS;
    return h;
}

/* A completed section [a, b] ms of lock `lock`; an exclusive one read the
 * counter and wrote it through the fence, both accepted (run() numbers
 * the values in the order of the sections, as a working fence has them,
 * where rval is left -1). */
static struct tc_rec sect(uint32_t proc, uint16_t lock, int mode, uint64_t a,
                          uint64_t b, uint64_t token)
{
    struct tc_rec r;

    memset(&r, 0, sizeof r);
    r.call_ns = T0 + a * MS - MS / 2;
    r.ret_ns = T0 + a * MS;
    r.end_ns = T0 + b * MS;
    r.token = token;
    r.proc = proc;
    r.lock = lock;
    r.mode = (uint8_t)mode;
    r.op = TC_OP_LOCK;
    r.unlock_rc = 0;
    r.token_rc = mode == TC_READ ? -1 : 0;
    r.flags = mode == TC_READ ? 0 : TC_F_COUNTED | TC_F_READ;
    r.rval = -1;
    if (mode != TC_READ)
        r.fence_ns = r.ret_ns + MS / 4;
    return r;
}

/* The records of lock l whose rval is -1, in the order of their sections:
 * each read the value the writes before it made. */
static void number_lock(struct tc_rec *rec, size_t n, unsigned l)
{
    int64_t next = 0;

    for (;;) {
        struct tc_rec *first = NULL;
        for (size_t i = 0; i < n; i++)
            if (rec[i].lock == l && rec[i].rval == -1 &&
                (!first || rec[i].ret_ns < first->ret_ns))
                first = &rec[i];
        if (!first)
            return;
        first->rval = next;
        next += !!(first->flags & TC_F_COUNTED);
    }
}

static struct tc_result run(struct tc_history *h)
{
    struct tc_result res;

    for (unsigned l = 0; h->rec && l < TC_MAX_LOCKS; l++)
        number_lock((struct tc_rec *)h->rec, h->nrec, l);
    assert_true(tc_check(h, stderr, 5, &res) >= 0);
    return res;
}

/* ---- the checks ------------------------------------------------------------------ */

/* A figure of the result that a check expects: its name, where it is. */
struct verdict {
    const char *what;
    size_t off;
    unsigned long want;
};
#define VIOL(k, n)                                                           \
    {                                                                        \
#k, offsetof(struct tc_result, violations[k]), n                     \
    }
#define FIG(f, n)                                                            \
    {                                                                        \
#f, offsetof(struct tc_result, f), n                                 \
    }

/* h checked: each figure of v (up to the one without a name) as it says. */
static void expect(struct tc_history *h, const struct verdict *v)
{
    struct tc_result res = run(h);

    for (; v->what; v++) {
        unsigned long got =
            *(const unsigned long *)((const char *)&res + v->off);

        if (got != v->want)
            fail_msg("%s = %lu, expected %lu", v->what, got, v->want);
    }
}
#define EXPECT(h, ...)                                                       \
    expect((h), (const struct verdict[]){ __VA_ARGS__, { NULL, 0, 0 } })

/* The holds reported lost in h, and the faults (NULL: none). */
static void told(struct tc_history *h, const struct tc_lost *lost, size_t n)
{
    h->lost = lost;
    h->nlost = n;
}

static void faulted(struct tc_history *h, const struct tc_fault *f)
{
    h->fault = f;
    h->nfault = f ? 1 : 0;
}

/* n mutex sections one after the other, [0, 10] ms, [11, 20], [21, 30]...,
 * of processes 1, 2, 3..., with tokens from token on; each read and wrote
 * the counter through the fence. */
static void in_turn(struct tc_rec *rec, size_t n, uint64_t token)
{
    for (size_t i = 0; i < n; i++)
        rec[i] = sect((uint32_t)i + 1, 0, TC_EXCL, i ? 10 * i + 1 : 0,
                      10 * (i + 1), token + i);
}

/* The history of n sections in turn (in_turn) and nothing else. */
static struct tc_history turns(struct tc_rec *rec, size_t n, uint64_t token)
{
    in_turn(rec, n, token);
    return hist(rec, n);
}

/* ---- one history, one check ------------------------------------------------------ */

/* A section as sect() makes it. */
struct sect_spec {
    uint32_t proc;
    uint16_t lock;
    int mode;
    uint64_t a, b, token;
};

/* A test's name, up to three sections, the counters at the end, what is changed in the
 * records after sect() (may be NULL), and the figures expected. */
struct one_check {
    const char *name;
    struct sect_spec s[3];
    size_t n;
    long long counter[2];
    void (*change)(struct tc_rec *rec);
    struct verdict v[4];
};

static void test_one_check(void **state)
{
    const struct one_check *c = *state;
    struct tc_rec rec[3];
    struct tc_history h;

    for (size_t i = 0; i < c->n; i++)
        rec[i] = sect(c->s[i].proc, c->s[i].lock, c->s[i].mode, c->s[i].a,
                      c->s[i].b, c->s[i].token);
    h = hist(rec, c->n);
    h.counter[0] = c->counter[0];
    h.counter[1] = c->counter[1];
    if (c->change)
        c->change(rec);
    expect(&h, c->v);
}

/* EPERM from unlock with no lost-handler call: a silent loss. */
static void unlock_eperm(struct tc_rec *rec)
{
    rec[0].unlock_rc = EPERM;
}

/* A token lower than the hold's before: the fence refuses its holder,
 * who was never told of a loss (a legitimate holder refused). */
static void refused_at_read(struct tc_rec *rec)
{
    rec[1].flags = TC_F_STALE;
}

/* Two holds with one token get through the fence together: the second
 * write replaced a value its read had not returned (SET ... GET said so).
 * The counter matches the writes it saw, but the update is lost: the
 * overlap (neither lost) and the lost update.  The equal tokens are not a
 * stale write: the fence lets an equal token through. */
static void clobbered(struct tc_rec *rec)
{
    rec[0].rval = rec[1].rval = 0;
    rec[1].flags |= TC_F_CLOBBER;
}

/* The fence answered an error other than STALE (its library missing, a
 * fence of the wrong type): an undocumented result. */
static void fence_failed(struct tc_rec *rec)
{
    rec[0].flags = TC_F_FENCE_ERR;
}

/* The checks of one history each, a row a check, read across: its test's
 * name, the sections and their count, the counters, the change, the
 * verdict. */
/* clang-format off */
static const struct one_check checks[] = {
    /* two mutex holds at once */
    { "test_overlap",
      { { 1, 0, TC_EXCL, 0, 10, 1 }, { 2, 0, TC_EXCL, 9, 20, 2 } }, 2,
      { 2, 0 }, NULL, { VIOL(TC_V_OVERLAP, 1) } },
    { "test_silent_loss", { { 1, 0, TC_EXCL, 0, 10, 1 } }, 1, { 1, 0 },
      unlock_eperm, { VIOL(TC_V_SILENT_LOSS, 1) } },
    /* a writer inside while a reader is */
    { "test_rw_overlap",
      { { 1, 1, TC_READ, 0, 10, 0 }, { 2, 1, TC_WRITE, 5, 20, 4 } }, 2,
      { 0, 1 }, NULL, { VIOL(TC_V_RW_OVERLAP, 1), FIG(total, 1) } },
    { "test_token_backwards",
      { { 1, 0, TC_EXCL, 0, 10, 5 }, { 2, 0, TC_EXCL, 11, 20, 4 },
        { 1, 0, TC_EXCL, 21, 30, 6 } }, 3, { 2, 0 }, refused_at_read,
      { VIOL(TC_V_TOKEN, 1), FIG(total, 1), FIG(legit_refused, 1) } },
    { "test_clobber",
      { { 1, 0, TC_EXCL, 0, 10, 4 }, { 2, 0, TC_EXCL, 5, 20, 4 } }, 2,
      { 1, 0 }, clobbered,
      { VIOL(TC_V_COUNTER, 2), VIOL(TC_V_STALE_WRITE, 0) } },
    { "test_fence_error", { { 1, 0, TC_EXCL, 0, 10, 1 } }, 1, { 0, 0 },
      fence_failed, { VIOL(TC_V_ERRNO, 1) } },
};
/* clang-format on */
#define NCHECKS (sizeof checks / sizeof checks[0])

/* Mutex sections one after the other, readers sharing, a writer alone:
 * no violation, and the counters match. */
static void test_clean(void **state)
{
    struct tc_rec rec[7];
    struct tc_history h = hist(rec, 7);

    (void)state;
    in_turn(rec, 3, 1);
    rec[2].proc = 1;
    rec[3] = sect(1, 1, TC_READ, 0, 10, 0);
    rec[4] = sect(2, 1, TC_READ, 5, 12, 0);
    rec[5] = sect(3, 1, TC_WRITE, 13, 20, 7);
    rec[6] = sect(1, 1, TC_READ, 21, 22, 0);
    h.counter[0] = 3;
    h.counter[1] = 1;
    EXPECT(&h, FIG(total, 0), FIG(sections, 7));
}

/* The same overlap, but the first hold was lost and its process was told:
 * documented, so excused.  Its write came after the second holder had
 * been through the fence, which refused it: the counter is exact, and
 * the refusal is of a hold reported lost.  An update lost instead is no
 * longer excused: the fence is there to refuse it. */
static void test_documented_loss(void **state)
{
    struct tc_rec rec[] = {
        sect(1, 0, TC_EXCL, 0, 10, 1),
        sect(2, 0, TC_EXCL, 9, 20, 2),
    };
    struct tc_lost lost = { T0 + 8 * MS, 1, 0 };
    struct tc_history h = hist(rec, 2);

    (void)state;
    rec[0].unlock_rc = EPERM;
    rec[0].flags = TC_F_READ | TC_F_STALE; /* read 0, refused at its write */
    rec[0].rval = 0;
    rec[1].rval = 0;
    told(&h, &lost, 1);
    h.counter[0] = 1;
    EXPECT(&h, FIG(total, 0), FIG(lost_sections, 1),
           FIG(told_late, 0), /* told at 8, before 9 */
           FIG(refused, 1), FIG(refused_lost, 1), FIG(legit_refused, 0),
           FIG(fenced_writes, 1));
    /* its write accepted after all, over the second's (SET ... GET gave
     * back 1, not the 0 it read), the counter one short: a lost update,
     * and a stale write accepted (token 1 after 2) */
    rec[0].flags = TC_F_READ | TC_F_COUNTED | TC_F_CLOBBER;
    EXPECT(&h, VIOL(TC_V_COUNTER, 2), FIG(stale_accepted, 1), FIG(total, 3));
}

/* Self-fencing: the same loss, but its holder was told at 12 ms, after
 * the second hold began at 9: excused as a loss, and counted as told
 * late; not counted when the holder's process was stopped meanwhile, or
 * the server lost its data. */
static void test_told_late(void **state)
{
    struct tc_rec rec[] = {
        sect(1, 0, TC_EXCL, 0, 10, 1),
        sect(2, 0, TC_EXCL, 9, 20, 2),
    };
    struct tc_lost lost = { T0 + 12 * MS, 1, 0 };
    struct tc_fault stop = { T0 + 2 * MS, T0 + 11 * MS, 1, 0, 0 };
    struct tc_history h = hist(rec, 2);

    (void)state;
    rec[0].unlock_rc = EPERM;
    rec[0].flags = TC_F_READ | TC_F_STALE; /* refused at its write */
    told(&h, &lost, 1);
    h.counter[0] = 1;
    EXPECT(&h, FIG(total, 0), FIG(told_late, 1), FIG(told_late_own, 0));

    faulted(&h, &stop); /* its process was stopped */
    EXPECT(&h, FIG(told_late, 0), FIG(told_late_own, 1));

    stop.proc = TC_ALL; /* a restart without its data */
    stop.loses_data = 1;
    EXPECT(&h, FIG(told_late, 0), FIG(told_late_own, 0));
}

/* A hold declared lost while its acquire's answer was on its way (the
 * answer came after the hold's safe-until: self-fencing told the holder
 * then): its unlock's EPERM is no silent loss; a report before the call
 * is no report of this hold. */
static void test_lost_during_acquire(void **state)
{
    struct tc_rec rec[1];
    struct tc_history h = turns(rec, 1, 1);
    struct tc_lost lost = { 0, 1, 0 };

    (void)state;
    rec[0].unlock_rc = EPERM;
    h.counter[0] = 1;
    told(&h, &lost, 1);
    lost.ns = rec[0].call_ns + (rec[0].ret_ns - rec[0].call_ns) / 2;
    EXPECT(&h, VIOL(TC_V_SILENT_LOSS, 0));
    lost.ns = rec[0].call_ns - MS;
    EXPECT(&h, VIOL(TC_V_SILENT_LOSS, 1));
}

/* Three accepted writes, the counter says two: an update was lost. */
static void test_lost_update(void **state)
{
    struct tc_rec rec[3];
    struct tc_history h = turns(rec, 3, 1);

    (void)state;
    rec[2].proc = 1;
    h.counter[0] = 2;
    EXPECT(&h, VIOL(TC_V_COUNTER, 1), FIG(total, 1));
    /* one SET whose reply never came may have counted: 4 is fine then */
    rec[1].flags |= TC_F_COUNT_UNSURE;
    h.counter[0] = 4;
    EXPECT(&h, FIG(total, 0));
}

/* A blocking lock called at 20 ms while the lock is free from 10 ms on,
 * returning 5 s later; and one that never returns. */
static void test_hang(void **state)
{
    struct tc_rec rec[] = {
        sect(1, 0, TC_EXCL, 0, 10, 1),
        sect(2, 0, TC_EXCL, 5020, 5030, 2),
        sect(3, 0, TC_EXCL, 0, 0, 0),
    };
    struct tc_fault f = { T0 + 15 * MS, T0 + 3000 * MS, TC_ALL, 0, 0 };
    struct tc_history h = hist(rec, 2);

    (void)state;
    rec[1].call_ns = T0 + 20 * MS;
    h.counter[0] = 2;
    EXPECT(&h, VIOL(TC_V_HANG, 1));
    /* the same wait inside a fault window (and its recovery) is fine */
    faulted(&h, &f);
    EXPECT(&h, FIG(total, 0));
    faulted(&h, NULL);
    rec[2].ret_ns = rec[2].end_ns = 0;
    rec[2].token_rc = rec[2].unlock_rc = -1;
    rec[2].flags = 0;
    h.nrec = 3;
    EXPECT(&h, VIOL(TC_V_HANG, 2), FIG(total, 2));
}

/* Undocumented results, a late timed call, occupancy exceeded. */
static void test_calls(void **state)
{
    struct tc_rec rec[3];
    struct tc_fault f = { T0 - 300 * MS, T0 - 100 * MS, 2, 0, 0 };
    struct tc_history h = turns(rec, 3, 1);

    (void)state;
    h.counter[0] = 2;
    rec[0].op = TC_OP_TRY;
    rec[0].rc = EAGAIN; /* not a section then, and not documented */
    rec[0].flags = 0;
    rec[1].op = TC_OP_TIMED;
    rec[1].deadline_ns = T0 + 5 * MS; /* returned 6 ms late: fine */
    rec[2].op = TC_OP_TIMED;
    rec[2].call_ns = T0 + 20 * MS;
    rec[2].deadline_ns = T0 - 600 * MS; /* 21 ms past it, but called later */
    rec[2].flags |= TC_F_OCC_BAD;
    EXPECT(&h, VIOL(TC_V_ERRNO, 1), VIOL(TC_V_DEADLINE, 0),
           VIOL(TC_V_OCCUPANCY, 1), FIG(total, 2),
           FIG(late_max_ns, 1 * MS)); /* the figure: rec[2] */
    rec[1].deadline_ns = T0 - 600 * MS;
    rec[1].call_ns = T0 - 700 * MS; /* returned 611 ms past it */
    EXPECT(&h, VIOL(TC_V_DEADLINE, 1), FIG(late_max_ns, 611 * MS));
    /* but not when its own process was stopped meanwhile, and left out of
     * the figure too: rec[2], 1 ms past its call */
    faulted(&h, &f);
    EXPECT(&h, VIOL(TC_V_DEADLINE, 0), FIG(late_max_ns, 1 * MS));
    f.proc = 3; /* another process's stop excuses nothing */
    EXPECT(&h, VIOL(TC_V_DEADLINE, 1));
}

/* DIST_ENOREPLICA (ENOLINK) is documented only where replicas exist. */
static void test_enoreplica(void **state)
{
    struct tc_rec rec[2];
    struct tc_history h = turns(rec, 2, 1);

    (void)state;
    h.counter[0] = 1;
    rec[1].rc = ENOLINK;
    rec[1].flags = 0;
    EXPECT(&h, VIOL(TC_V_ERRNO, 1));
    h.replicas = 1;
    EXPECT(&h, VIOL(TC_V_ERRNO, 0), FIG(total, 0));
}

/* ---- the semaphore and the queue ---------------------------------------------- */

/* Lock 0 a mutex, lock 1 a semaphore of two permits, lock 2 the queue's
 * mutex, whose items are `items`. */
static struct tc_history hist_waits(const struct tc_rec *rec, size_t n,
                                    const struct tc_item *items, size_t ni)
{
    struct tc_history h = hist(rec, n);

    h.nlocks = 3;
    h.kind[1] = TC_LOCK_SEM;
    h.permits[1] = 2;
    h.kind[2] = TC_LOCK_MUTEX;
    h.queue_lock = 2;
    h.item = items;
    h.nitem = ni;
    return h;
}

/* A permit held [a, b] ms: a section without token or counter. */
static struct tc_rec permit(uint32_t proc, uint64_t a, uint64_t b)
{
    struct tc_rec r = sect(proc, 1, TC_EXCL, a, b, 0);

    r.token_rc = -1;
    r.flags = 0;
    return r;
}

/* Two permits held at once is the semaphore working; a third at the same
 * time is an over-grant, unless one of them is a documented loss. */
static void test_sem_overgrant(void **state)
{
    struct tc_rec rec[] = {
        permit(1, 0, 10),
        permit(2, 5, 20),
        permit(3, 21, 30),
    };
    struct tc_lost lost = { T0 + 9 * MS, 1, 1 };
    struct tc_history h = hist_waits(rec, 3, NULL, 0);

    (void)state;
    EXPECT(&h, FIG(total, 0), FIG(sections, 3));
    rec[2] = permit(3, 8, 30); /* three holders from 8 to 10 ms */
    EXPECT(&h, VIOL(TC_V_OVERGRANT, 1), FIG(total, 1));
    rec[0].unlock_rc = EPERM; /* the first one's lease ran out */
    told(&h, &lost, 1);
    EXPECT(&h, FIG(total, 0));
}

/* The shared-memory count of holders saw three; try answers EAGAIN on a
 * semaphore (documented) and EBUSY there is not. */
static void test_sem_occupancy_and_results(void **state)
{
    struct tc_rec rec[] = {
        permit(1, 0, 10),
        permit(2, 11, 20),
        permit(3, 21, 30),
        permit(4, 31, 40),
    };
    struct tc_history h = hist_waits(rec, 4, NULL, 0);

    (void)state;
    rec[0].flags |= TC_F_OCC_BAD;
    rec[1].op = rec[2].op = TC_OP_TRY;
    rec[1].rc = EAGAIN;
    rec[2].rc = EBUSY;
    EXPECT(&h, VIOL(TC_V_OCCUPANCY, 1), VIOL(TC_V_ERRNO, 1), FIG(total, 2));
}

/* A wait for a permit from 20 ms to 5 s while one of the two is free from
 * 10 ms on: a hang; with both held until then it is only waiting. */
static void test_sem_hang(void **state)
{
    struct tc_rec rec[] = {
        permit(1, 0, 10),
        permit(2, 0, 5010),
        permit(3, 5020, 5030),
    };
    struct tc_history h = hist_waits(rec, 3, NULL, 0);

    (void)state;
    rec[2].call_ns = T0 + 20 * MS;
    EXPECT(&h, VIOL(TC_V_HANG, 1));
    rec[0].end_ns = T0 + 5015 * MS;
    EXPECT(&h, FIG(total, 0));
}

static struct tc_item item(uint32_t proc, uint64_t put, uint64_t take,
                           unsigned takes)
{
    struct tc_item it;

    memset(&it, 0, sizeof it);
    it.put_ns = T0 + put * MS;
    it.take_ns = take ? T0 + take * MS : 0;
    it.put_proc = proc;
    it.take_proc = take ? proc + 1 : 0;
    it.takes = (uint16_t)takes;
    return it;
}

/* Taken once, or still queued at the end: fine.  Never taken and not
 * queued (lost), taken twice, taken and still queued: each a violation,
 * unless the queue's mutex was lost meanwhile. */
static void test_items(void **state)
{
    struct tc_item items[] = {
        item(1, 0, 5, 1),   item(1, 10, 0, 0),  item(1, 20, 0, 0),
        item(1, 30, 35, 2), item(1, 40, 45, 1),
    };
    struct tc_lost lost = { T0 + 50 * MS, 7, 2 };
    struct tc_history h = hist_waits(NULL, 0, items, 5);

    (void)state;
    items[1].flags = TC_I_QUEUED;
    /* item 2 lost, item 3 doubled */
    EXPECT(&h, FIG(items, 5), FIG(total, 2), VIOL(TC_V_ITEM, 2));
    items[4].flags = TC_I_QUEUED; /* taken, yet still queued */
    EXPECT(&h, VIOL(TC_V_ITEM, 3));
    told(&h, &lost, 1); /* the queue's mutex was lost */
    EXPECT(&h, VIOL(TC_V_ITEM, 0));
    lost.lock = 0; /* another lock's loss: no excuse */
    EXPECT(&h, VIOL(TC_V_ITEM, 3));
}

/* A consumer waits on the condition from 0 to 20 s; an item put at 1 s
 * stays until 20 s: a lost wake-up.  Not when it is taken soon, when its
 * signal failed, or when a fault covers the stretch. */
static void test_lost_wakeup(void **state)
{
    struct tc_rec rec[] = { sect(5, 2, TC_EXCL, 20000, 20001, 1) };
    struct tc_item items[] = { item(1, 1000, 20000, 1) };
    struct tc_fault f = { T0 + 900 * MS, T0 + 17000 * MS, TC_ALL, 0, 0 };
    struct tc_history h = hist_waits(rec, 1, items, 1);

    (void)state;
    rec[0].op = TC_OP_CWAIT_CONS;
    rec[0].call_ns = T0;
    rec[0].flags = 0;
    EXPECT(&h, VIOL(TC_V_WAKEUP, 1), FIG(total, 1));
    items[0].flags = TC_I_NOSIGNAL;
    EXPECT(&h, FIG(total, 0));
    items[0].flags = 0;
    faulted(&h, &f);
    EXPECT(&h, FIG(total, 0));
    faulted(&h, NULL);
    items[0].take_ns = T0 + 1200 * MS;
    EXPECT(&h, FIG(total, 0));
    /* no consumer waiting: an item may sit in the queue */
    items[0].take_ns = T0 + 20000 * MS;
    rec[0].op = TC_OP_LOCK;
    rec[0].call_ns = T0 + 19999 * MS;
    EXPECT(&h, FIG(total, 0));
}

/* ---- the fence ---------------------------------------------------------------- */

/* The fence's order, from the values: token 5 wrote 1, token 7 wrote 2,
 * and then token 6 read 2 and wrote 3.  Accepting 6 after 7 is what a
 * fence must never do: one stale write accepted (one per section, though
 * both its read and its write got through), a violation.  In the order
 * of the sections the tokens rise: only the fence's order shows it. */
static void test_stale_write_accepted(void **state)
{
    struct tc_rec rec[3];
    struct tc_history h = turns(rec, 3, 5);

    (void)state;
    rec[0].rval = 0;
    rec[1].rval = 2;
    rec[2].rval = 1;
    h.counter[0] = 3;
    EXPECT(&h, VIOL(TC_V_STALE_WRITE, 1), FIG(stale_accepted, 1),
           FIG(total, 1), FIG(fenced_writes, 3));
    /* refused at its read instead: nothing accepted out of order */
    rec[1].flags = TC_F_STALE;
    h.counter[0] = 2;
    EXPECT(&h, FIG(stale_accepted, 0), FIG(total, 0));
    /* its read alone got through after token 7's write: caught as well */
    rec[1].flags = TC_F_READ | TC_F_STALE;
    EXPECT(&h, FIG(stale_accepted, 1));
}

/* Two holders read the same value, the older (token 5) first: the newer
 * read recorded 6, and the older one's write is refused.  Reads of one
 * value are in no known order, so the two reads compare with neither:
 * no stale write.  The refused one was reported lost (EPERM and the
 * handler): not a legitimate holder refused. */
static void test_fence_same_value(void **state)
{
    struct tc_rec rec[] = {
        sect(1, 0, TC_EXCL, 0, 10, 5),
        sect(2, 0, TC_EXCL, 5, 20, 6),
    };
    struct tc_lost lost = { T0 + 9 * MS, 1, 0 };
    struct tc_history h = hist(rec, 2);

    (void)state;
    rec[0].flags = TC_F_READ | TC_F_STALE;
    rec[0].rval = rec[1].rval = 0;
    rec[0].unlock_rc = EPERM;
    told(&h, &lost, 1);
    h.counter[0] = 1;
    EXPECT(&h, FIG(total, 0), FIG(stale_accepted, 0), FIG(refused, 1),
           FIG(refused_lost, 1), FIG(legit_refused, 0));
}

/* The server of the locks lost its data after token 9, and tokens began
 * again from 1: the fence refuses the holders after it.  A STALE to a
 * holder its lost handler told (unlock gave EIO) or whose unlock gave
 * EPERM is right; to one never told, a legitimate holder refused: a
 * figure, or a violation with refusal_fails; to one killed before its
 * unlock, not judged.  Another process's handler call tells this holder
 * nothing, nor does the data loss itself, nor its own process's handler
 * when its unlock succeeded (the hold was there). */
static void test_refusals(void **state)
{
    struct tc_rec rec[5];
    struct tc_lost lost[] = { { T0 + 15 * MS, 2, 0 },
                              { T0 + 25 * MS, 9, 0 } };
    struct tc_fault f = { T0 + 10 * MS + MS / 2, T0 + 10 * MS + MS / 2,
                          TC_ALL, 0, 1 };
    struct tc_history h = turns(rec, 5, 2);

    (void)state;
    rec[0].token = 9;
    faulted(&h, &f);
    for (int i = 1; i < 5; i++)
        rec[i].flags = TC_F_STALE;
    rec[1].unlock_rc = EIO;   /* told by its handler at 15 ms */
    rec[2].unlock_rc = 0;     /* a handler call, but proc 9's */
    rec[3].unlock_rc = EPERM; /* told by its unlock */
    rec[3].flags |= TC_F_KILLED;
    rec[4].unlock_rc = -1; /* killed before its unlock */
    rec[4].flags |= TC_F_KILLED;
    told(&h, lost, 2);
    h.counter[0] = 1;
    EXPECT(&h, FIG(refused, 4), FIG(refused_lost, 2), FIG(refused_killed, 1),
           FIG(legit_refused, 1), FIG(total, 0));
    h.refusal_fails = 1;
    EXPECT(&h, VIOL(TC_V_REFUSED, 1), FIG(total, 1));
    /* its own process's handler, but its unlock succeeded */
    lost[1].proc = 3;
    EXPECT(&h, FIG(legit_refused, 1));
    /* its unlock failed: told after all, no longer legitimate */
    rec[2].unlock_rc = EIO;
    EXPECT(&h, FIG(legit_refused, 0), FIG(refused_lost, 3), FIG(total, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean),
        cmocka_unit_test(test_documented_loss),
        cmocka_unit_test(test_told_late),
        cmocka_unit_test(test_lost_during_acquire),
        cmocka_unit_test(test_lost_update),
        cmocka_unit_test(test_hang),
        cmocka_unit_test(test_calls),
        cmocka_unit_test(test_enoreplica),
        cmocka_unit_test(test_sem_overgrant),
        cmocka_unit_test(test_sem_occupancy_and_results),
        cmocka_unit_test(test_sem_hang),
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_lost_wakeup),
        cmocka_unit_test(test_stale_write_accepted),
        cmocka_unit_test(test_fence_same_value),
        cmocka_unit_test(test_refusals),
    };
    struct CMUnitTest one[NCHECKS];
    int failed;

    for (size_t i = 0; i < NCHECKS; i++)
        one[i] = (struct CMUnitTest){ checks[i].name, test_one_check, NULL,
                                      NULL, (void *)&checks[i] };
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed + cmocka_run_group_tests_name("one history, one check", one,
                                                NULL, NULL);
}
