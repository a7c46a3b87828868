/* fuzz_reply.c: the reply handling of the lock scripts on any bytes.  A
 * fake Redis in this process (tests/harness_liar.h, loopback) answers one
 * EVALSHA of the library's lock or unlock scripts with the input and then
 * closes the connection, so that a reply cut short ends at once instead of
 * at the command timeout.  Every later EVALSHA is answered "released, 0
 * left, none woken", good for an unlock (the one that cleans up) and for
 * the renewal thread's settle of an outcome left unknown; other commands
 * get the liar's defaults.
 *
 * The first byte chooses the call: bits 0-1 the kind (mutex, fair mutex,
 * read, write), bit 2 whether the input answers the unlock (the lock is
 * answered "taken" first) rather than the lock, bit 3 a trylock rather
 * than a timed lock of a few milliseconds.  The rest is the answer.
 *
 * Besides not crashing, leaking or hanging: each call returns 0 or one of
 * its documented errors, and afterwards the thread believes it holds
 * nothing that it was not shown to hold: a failed lock leaves no token and
 * an unlock that refuses.  An unlock whose answer was refused may leave
 * the hold (an error reply changed nothing); one more unlock, answered
 * well, then gives it back. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <time.h>

#include "distlock.h"
#include "fuzz.h"
#include "harness_liar.h"

#define REPLY_TIMEOUT_MS 200 /* never reached: the liar closes */
#define WAIT_MS          5   /* a timed lock's patience */

/* A good answer to a lock script: taken, 1 hold, token 7. */
#define TAKEN    "*3\r\n:1\r\n:1\r\n:7\r\n"
/* To an unlock script: 0 holds left, nobody woken. */
#define RELEASED "*2\r\n:0\r\n:0\r\n"

enum kind { K_MUTEX, K_FAIR, K_READ, K_WRITE };

union lock {
    dist_mutex_t m;
    dist_rwlock_t rw;
};

static tu_liar_t *liar;

static void start(void)
{
    char url[64];

    if (liar)
        return;
    FUZZ_CHECK((liar = tu_liar_start()) != NULL);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_liar_port(liar));
    FUZZ_CHECK(dist_set_url(url) == 0);
    FUZZ_CHECK(dist_set_timeout_ms(REPLY_TIMEOUT_MS) == 0);
}

static int is_rw(enum kind k)
{
    return k == K_READ || k == K_WRITE;
}

static int lock_init(union lock *l, enum kind k, const char *name)
{
    dist_mutexattr_t a;
    int rc;

    if (is_rw(k))
        return dist_rwlock_init(&l->rw, name, NULL);
    dist_mutexattr_init(&a);
    dist_mutexattr_setfair(&a, k == K_FAIR);
    rc = dist_mutex_init(&l->m, name, &a);
    dist_mutexattr_destroy(&a);
    return rc;
}

static int lock_once(union lock *l, enum kind k, int try_only)
{
    struct timespec ts;

    if (try_only)
        return !is_rw(k)     ? dist_mutex_trylock(&l->m)
               : k == K_READ ? dist_rwlock_tryrdlock(&l->rw)
                             : dist_rwlock_trywrlock(&l->rw);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return !is_rw(k)     ? dist_mutex_timedlock(&l->m, &ts)
           : k == K_READ ? dist_rwlock_timedrdlock(&l->rw, &ts)
                         : dist_rwlock_timedwrlock(&l->rw, &ts);
}

static int unlock(union lock *l, enum kind k)
{
    return is_rw(k) ? dist_rwlock_unlock(&l->rw) : dist_mutex_unlock(&l->m);
}

static int token(union lock *l, enum kind k)
{
    uint64_t t;

    return is_rw(k) ? dist_rwlock_token(&l->rw, &t)
                    : dist_mutex_token(&l->m, &t);
}

static int destroy(union lock *l, enum kind k)
{
    return is_rw(k) ? dist_rwlock_destroy(&l->rw) : dist_mutex_destroy(&l->m);
}

/* The errors a lock call documents for a server that answers badly. */
static int lock_error_ok(int rc)
{
    return rc == EBUSY || rc == ETIMEDOUT || rc == EIO || rc == ENOMEM ||
           rc == EAGAIN || rc == DIST_ENOREPLICA;
}

/* Nothing believed held: no token (a read hold has none to show), and an
 * unlock refuses. */
static void check_nothing_held(union lock *l, enum kind k)
{
    FUZZ_CHECK(k == K_READ || token(l, k) == EPERM);
    FUZZ_CHECK(unlock(l, k) == EPERM);
}

/* After the unlock of the one hold: gone, or still held and given back
 * by one more unlock (answered RELEASED). */
static void check_released(union lock *l, enum kind k, int rc)
{
    FUZZ_CHECK(rc == 0 || rc == EIO || rc == EPERM || rc == ENOMEM);
    if (rc == 0 || rc == EPERM) {
        check_nothing_held(l, k);
        return;
    }
    rc = unlock(l, k);
    FUZZ_CHECK(rc == 0 || rc == EPERM);
    check_nothing_held(l, k);
}

/* The input's answer closes its connection.  Once it was given, the next
 * call waits until the liar has closed it: else whether that call finds
 * the link closed (and opens another) or sends on it and meets the reset
 * would depend on which thread runs first, and a reset is a lost reply,
 * not the good answer the checks count on.  Bounded: an answer never
 * given (a call that did not get that far) is not waited for. */
static long evals_at, closed_at; /* the liar's counts before the input */

static void await_close(int lie_at)
{
    int i;

    if (tu_liar_count(liar, "EVALSHA") < evals_at + lie_at)
        return;
    for (i = 0; i < 2000 && tu_liar_closed(liar) <= closed_at; i++)
        nanosleep(&(struct timespec){ 0, 1000000L }, NULL);
}

/* ans: the answer to the first EVALSHA (NULL when it is TAKEN). */
static void run(enum kind k, int on_unlock, int try_only, const char *ans)
{
    static unsigned long seq;
    union lock l;
    char name[48];
    int rc;

    snprintf(name, sizeof name, "fz:%lu", ++seq);
    FUZZ_CHECK(lock_init(&l, k, name) == 0);
    rc = lock_once(&l, k, try_only);
    await_close(1 + on_unlock);
    /* the lock answered TAKEN must be taken, or the unlock is not tried */
    FUZZ_CHECK(!on_unlock || rc == 0);
    if (rc != 0) {
        FUZZ_CHECK(lock_error_ok(rc));
        check_nothing_held(&l, k);
    } else {
        /* every grant is an array: nothing else may be taken for one */
        FUZZ_CHECK(!ans || ans[0] == '*');
        FUZZ_CHECK(k == K_READ || token(&l, k) == 0);
        rc = unlock(&l, k);
        await_close(1 + on_unlock);
        check_released(&l, k, rc);
    }
    FUZZ_CHECK(destroy(&l, k) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned sel;
    int on_unlock;

    if (size < 1)
        return 0;
    start();
    sel = data[0];
    on_unlock = (sel & 4) != 0;
    tu_liar_reset(liar);
    evals_at = tu_liar_count(liar, "EVALSHA");
    closed_at = tu_liar_closed(liar);
    if (on_unlock)
        tu_liar_add(liar, &(struct tu_lie){
                              .cmd = "EVALSHA", .bytes = TAKEN, .times = 1 });
    /* len 0 with bytes means strlen: an empty answer is given as "" */
    tu_liar_add(liar, &(struct tu_lie){
                          .cmd = "EVALSHA",
                          .bytes = size > 1 ? (const char *)data + 1 : "",
                          .len = size - 1,
                          .close = 1,
                          .times = 1 });
    tu_liar_add(liar,
                &(struct tu_lie){ .cmd = "EVALSHA", .bytes = RELEASED });
    run((enum kind)(sel & 3), on_unlock, (sel & 8) != 0,
        on_unlock  ? NULL
        : size > 1 ? (const char *)data + 1
                   : "");
    return 0;
}
