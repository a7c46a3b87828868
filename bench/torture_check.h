/*
 * torture_check: judges the history of a torture run (bench/distlock-torture.c)
 * after the fact, the way Jepsen's checkers judge a database's history.
 *
 * The history is what the workers saw, on CLOCK_MONOTONIC (one clock for all
 * processes of a host): every acquisition attempt with its result, the
 * critical section it opened, the lost-handler calls, the fault windows the
 * nemesis opened, and the final values of the Redis counters.  The checker
 * needs no knowledge of how the run was made; tests/test_torture_check.c
 * feeds it hand-made histories.
 *
 * Besides locks it judges a semaphore (a lock of kind TC_LOCK_SEM: no more
 * sections at once than its permits) and a producer/consumer queue guarded
 * by a mutex and two condition variables (struct tc_item: every item put
 * is taken once, and none waits long in the queue while a consumer sleeps
 * on the condition).
 *
 * Every interval it is given is the inside of the truth: a section runs
 * from the return of the call that took the lock to the call that gives it
 * back, so the real hold in Redis covers at least that.  Two recorded
 * sections that overlap therefore held at once for real.
 *
 * The resource: every exclusive section of a lock with a counter reads the
 * counter and writes it plus one, both through the fence (FCALL
 * distlock_fenced with the hold's token, fence/fence.lua), on a server of
 * its own that no fault touches.  The fence refuses a call whose token is
 * lower than one it accepted (STALE).  Since each write sets the value its
 * read returned plus one, and the fence refuses the older of two holders
 * that read the same value, the values written are 1, 2, 3 ... in the
 * order the fence accepted them: the checker rebuilds that order from
 * them and verifies the fence from it (no stale call accepted), and the
 * counter must equal the writes accepted, with no excuse for lost holds.
 */
#ifndef DISTLOCK_TORTURE_CHECK_H
#define DISTLOCK_TORTURE_CHECK_H

#include <stdint.h>
#include <stdio.h>

#define TC_MAX_LOCKS 8

/* What a hold excludes: a mutex hold or a write hold excludes everybody, a
 * read hold only writers. */
enum tc_mode { TC_EXCL, TC_WRITE, TC_READ };

/* How the lock was asked for.  TC_OP_NESTED is a recursive re-lock inside a
 * section of the same thread: a call, not a section of its own.  On the
 * queue's mutex, a condition wait gives the mutex up and takes it back: the
 * hold after it is a section of its own, opened by TC_OP_CWAIT_CONS (a
 * consumer waiting for an item) or TC_OP_CWAIT_PROD (a producer waiting
 * for room), whose call_ns/ret_ns are the wait's. */
enum tc_op {
    TC_OP_LOCK,
    TC_OP_TRY,
    TC_OP_TIMED,
    TC_OP_NESTED,
    TC_OP_CWAIT_CONS,
    TC_OP_CWAIT_PROD,
    TC_OP_COUNT
};

/* flags of a record */
#define TC_F_KILLED                                                          \
    1u /* its process died (SIGKILL) while it held:
                                end_ns is the death as the parent saw it */
#define TC_F_COUNTED                                                         \
    2u /* its fenced write of the counter was
                                accepted (the value written is rval + 1) */
#define TC_F_COUNT_UNSURE                                                    \
    4u /* a fenced write was sent, its reply never
                                came: it may or may not have been applied */
#define TC_F_OCC_BAD                                                         \
    8u /* the shared-memory occupancy seen on entry
                                exceeded what the mode allows (for a
                                semaphore: more holders than permits) */
#define TC_F_TIMED_OUT                                                       \
    16u /* a condition wait ended by its deadline
                                (rc is 0: the mutex is held again) */
#define TC_F_WAIT_EIO                                                        \
    32u /* a condition wait failed with EIO before it
                                gave the mutex up (rc is 0: still held; the
                                hold goes on, so no token of its own) */
#define TC_F_READ                                                            \
    64u /* its fenced read of the counter was accepted
                                and returned rval */
#define TC_F_STALE                                                           \
    128u /* the fence refused its read or its write
                                (STALE, at fence_ns): nothing written */
#define TC_F_CLOBBER                                                         \
    256u /* its accepted write replaced a value other
                                than the one its read returned: an update
                                was lost (SET ... GET gave the old value) */
#define TC_F_FENCE_ERR                                                       \
    512u /* the fence answered an error other than
                                STALE (not loaded, wrong type...) */

/* One acquisition attempt, and the section it opened when rc == 0. */
struct tc_rec {
    uint64_t call_ns; /* the acquiring call was made */
    uint64_t ret_ns;  /* it returned; 0: it never did */
    uint64_t end_ns;  /* the section ended (unlock called); 0: no section */
    uint64_t deadline_ns; /* timed calls: their deadline; 0 otherwise */
    uint64_t token;       /* fencing token of an exclusive hold; 0: none */
    uint64_t fence_ns;    /* the fence's last answer came (the write's, or
                             the STALE); 0: none */
    int64_t rval;         /* the counter value its fenced read returned */
    uint32_t proc;        /* process incarnation (a restart is a new one) */
    uint16_t lock;        /* index into tc_history.kind */
    uint8_t mode;         /* enum tc_mode */
    uint8_t op;           /* enum tc_op */
    int16_t rc;           /* result of the acquiring call */
    int16_t unlock_rc;    /* result of the unlock; -1: not called */
    int16_t token_rc;     /* result of the token call; -1: not called */
    uint16_t flags;       /* TC_F_* */
};

/* A call of the lost handler: process proc heard that lock was lost. */
struct tc_lost {
    uint64_t ns;
    uint32_t proc;
    uint16_t lock;
};

/* A fault the nemesis caused.  proc is the process it targeted (SIGSTOP,
 * SIGKILL), or TC_ALL for the whole server.  loses_data: the server lost
 * its data (a restart without persistence), which excuses overlaps inside
 * [start_ns, end_ns + lease]. */
#define TC_ALL UINT32_MAX
struct tc_fault {
    uint64_t start_ns, end_ns;
    uint32_t proc;
    uint8_t kind; /* the runner's own numbering, not interpreted */
    uint8_t loses_data;
};

/* TC_LOCK_SEM: a semaphore; its sections are the permits held, at most
 * tc_history.permits at once.  Its try calls answer EAGAIN. */
enum tc_lock_kind { TC_LOCK_MUTEX, TC_LOCK_RW, TC_LOCK_SEM };

/* One item through the queue (tc_history.queue_lock): put under the
 * queue's mutex (then "not empty" signalled), taken under it. */
#define TC_I_QUEUED 1u /* still in the queue when the run ended */
#define TC_I_NOSIGNAL                                                        \
    2u /* the signal after the put failed (EIO): its
                              wake-up may be late, documented */
struct tc_item {
    uint64_t put_ns;  /* 0: the slot was never used */
    uint64_t take_ns; /* first taken out; 0: never */
    uint32_t put_proc, take_proc;
    uint16_t takes; /* how many times it was taken out */
    uint16_t flags; /* TC_I_* */
};

struct tc_history {
    const struct tc_rec *rec;
    size_t nrec;
    const struct tc_lost *lost;
    size_t nlost;
    const struct tc_fault *fault;
    size_t nfault;
    unsigned nlocks;
    uint8_t kind[TC_MAX_LOCKS];      /* enum tc_lock_kind */
    unsigned permits[TC_MAX_LOCKS];  /* TC_LOCK_SEM: its permits */
    long long counter[TC_MAX_LOCKS]; /* final Redis counter of each lock */
    uint64_t end_ns;                 /* the run ended (for calls that never
                                          returned) */
    /* Documented bounds */
    uint64_t lease_ns; /* longest a dead holder keeps a lock */
    uint64_t slack_ns; /* how late past its deadline a timed call may
                              return (command timeout + scheduling) */
    uint64_t hang_ns;  /* longest a blocked call may wait while the lock
                              is free and no fault is on */
    /* The locks' master has replicas and replica sync is on: an acquire
     * may also fail with DIST_ENOREPLICA (ENOLINK, distlock.h). */
    int replicas;
    /* The queue: its items (none: no queue checks) and the mutex that
     * guards it, whose condition waits are TC_OP_CWAIT_* sections. */
    const struct tc_item *item;
    size_t nitem;
    unsigned queue_lock;
    /* A STALE to a holder never reported lost is a violation
     * (TC_V_REFUSED), not only a figure of the result. */
    int refusal_fails;
};

enum tc_violation {
    TC_V_OVERLAP,     /* two exclusive holds at once */
    TC_V_RW_OVERLAP,  /* a read hold during a write hold */
    TC_V_TOKEN,       /* token not above an earlier hold's */
    TC_V_OCCUPANCY,   /* shared-memory count exceeded, no loss to explain */
    TC_V_COUNTER,     /* Redis counter differs from the accepted writes,
                          or a write replaced a value it had not read */
    TC_V_ERRNO,       /* a call returned an undocumented value */
    TC_V_SILENT_LOSS, /* unlock said EPERM but no lost-handler call came */
    TC_V_DEADLINE,    /* a timed call returned too long after its deadline */
    TC_V_HANG,        /* a blocked call waited on a free lock too long */
    TC_V_OVERGRANT,   /* more semaphore sections at once than permits */
    TC_V_ITEM,        /* a queue item lost, or taken more than once */
    TC_V_WAKEUP,      /* an item waited in the queue while a consumer
                          slept on the condition, longer than hang_ns */
    TC_V_STALE_WRITE, /* the fence accepted a call whose token is lower
                          than one it had accepted before */
    TC_V_REFUSED,     /* the fence refused a holder never reported lost
                          (only with tc_history.refusal_fails) */
    TC_V_COUNT
};

struct tc_result {
    unsigned long violations[TC_V_COUNT];
    unsigned long total;
    unsigned long sections;      /* completed sections checked */
    unsigned long lost_sections; /* of them, excused by a documented loss */
    unsigned long killed;        /* sections ended by their process's death */
    /* Self-fencing: overlapping pairs whose earlier hold was lost (no data
     * loss meanwhile) and whose holder was told only after the other hold
     * began; the goal is 0.  Of them, those whose holder's process was
     * itself stopped or killed meanwhile, which no library can see. */
    unsigned long told_late;
    unsigned long told_late_own;
    unsigned long items; /* queue items checked */
    /* The timed call that returned furthest past its deadline, its process
     * not stopped meanwhile (ns; 0: none): how close the run came to
     * slack_ns */
    uint64_t late_max_ns;
    /* The fence (the two figures of the run: stale_accepted, the same as
     * violations[TC_V_STALE_WRITE], must be 0; legit_refused is today a
     * figure, a violation with refusal_fails) */
    unsigned long fenced_writes;  /* writes the fence accepted */
    unsigned long stale_accepted; /* of its accepted calls, with a token
                                      lower than one accepted before */
    unsigned long refused;        /* sections the fence refused (STALE) */
    unsigned long refused_lost;   /* of them, holds reported lost */
    unsigned long refused_killed; /* of them, killed before their unlock
                                      could tell: not judged */
    unsigned long legit_refused;  /* of them, never reported lost */
};

/* Name of a violation kind, for the table. */
const char *tc_violation_name(int v);

/* Check h.  Prints each violation (with the records involved) on out, at
 * most `max_print` of each kind (out may be NULL: count only).  Fills *res
 * and returns res->total.  -1 on out of memory. */
long tc_check(const struct tc_history *h, FILE *out, unsigned max_print,
              struct tc_result *res);

#endif /* DISTLOCK_TORTURE_CHECK_H */
