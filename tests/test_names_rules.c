/*
 * test_names_rules: the rules every kind keeps for its name and its end,
 * one table of kinds run against a private redis-server (one test a row):
 *
 *   - init refuses a NULL object, a NULL name, an empty name and a name
 *     one byte over DIST_NAME_MAX (EINVAL, with a reason that says so);
 *   - a name of exactly DIST_NAME_MAX bytes is taken and works, as a short
 *     one does;
 *   - destroy while the calling thread holds the object says EBUSY and
 *     leaves the hold as it was (it is let go with 0 afterwards); destroy
 *     once nothing is held says 0 and leaves no key under the name.
 *
 * A row says what differs for its kind: the holds destroy refuses (an
 * rwlock is held for reading and for writing in turn), how many fields the
 * hash under the name itself has while held, and for a kind without holds
 * the call that shows the object works.
 */
#define GROUP_PROG     "test_names_rules"
#define GROUP_SETTINGS FX_DEFAULTS(0)
#include "grouphelp.h"

enum kind_id { MUTEX, RWLOCK, COND, SEM, BARRIER };

/* The holds of the calling thread that destroy refuses. */
enum hold { NO_HOLD, HOLD_LOCK, HOLD_READ, HOLD_WRITE, HOLD_PERMIT };

struct kind {
    const char *what; /* the tag of its lock names */
    enum kind_id id;
    const char *noun; /* as init names a NULL object */
    /* the holds destroy refuses, each taken and let go in turn, with the
     * fields of the hash under the name itself while held (0: the kind
     * keeps its state under keys derived from the name) */
    struct {
        enum hold h;
        long long fields;
    } holds[2];
};

static const struct kind kinds[] = {
    { "mutex", MUTEX, "mutex", { { HOLD_LOCK, 1 } } },
    /* mode and the owner's field, on either side */
    { "rwlock", RWLOCK, "rwlock", { { HOLD_READ, 2 }, { HOLD_WRITE, 2 } } },
    /* destroy is EBUSY while a thread of this process is blocked on it,
     * not for a hold: test_cond's test_destroy_right_after_broadcast */
    { "cond", COND, "condition", { { NO_HOLD, 0 } } },
    /* a leased permit (the default mode) is a hold of the thread */
    { "sem", SEM, "semaphore", { { HOLD_PERMIT, 0 } } },
    /* destroy is EBUSY while a thread of this process waits on it, not
     * for a hold */
    { "barrier", BARRIER, "barrier", { { NO_HOLD, 0 } } },
};

/* Room for an object of any kind. */
union obj {
    dist_mutex_t m;
    dist_rwlock_t rw;
    dist_cond_t c;
    dist_sem_t s;
    dist_barrier_t b;
};

/* Each call of a test is one of a pair: a step and its undoing. */
enum way { DO, UNDO };

/* Makes o of kind k on name, with default attributes (a semaphore of one
 * free permit, a barrier of one party), or destroys it (UNDO). */
static int life_step(enum kind_id k, void *o, const char *name, enum way w)
{
    const int end = w == UNDO;

    switch (k) {
    case MUTEX:
        return end ? dist_mutex_destroy(o) : dist_mutex_init(o, name, NULL);
    case RWLOCK:
        return end ? dist_rwlock_destroy(o) : dist_rwlock_init(o, name, NULL);
    case COND:
        return end ? dist_cond_destroy(o) : dist_cond_init(o, name, NULL);
    case SEM:
        return end ? dist_sem_destroy(o) : dist_sem_init(o, name, 1, NULL);
    case BARRIER:
        return end ? dist_barrier_destroy(o) : dist_barrier_init(o, name, 1);
    }
    return -1;
}

/* Takes hold h of o, or lets it go (UNDO). */
static int hold_step(enum hold h, void *o, enum way w)
{
    const int give = w == UNDO;

    switch (h) {
    case NO_HOLD:
        break;
    case HOLD_LOCK:
        return give ? dist_mutex_unlock(o) : dist_mutex_lock(o);
    case HOLD_READ:
        return give ? dist_rwlock_unlock(o) : dist_rwlock_rdlock(o);
    case HOLD_WRITE:
        return give ? dist_rwlock_unlock(o) : dist_rwlock_wrlock(o);
    case HOLD_PERMIT:
        return give ? dist_sem_post(o) : dist_sem_trywait(o);
    }
    return -1;
}

/* A call of a kind without holds that reaches Redis under o's name: 0
 * when it did what it should. */
static int use_as(enum kind_id k, void *o)
{
    if (k == COND)
        return dist_cond_signal(o); /* no waiter: nothing to wake */
    /* a barrier of one party: its one waiter is the serial one */
    return dist_barrier_wait(o) == DIST_BARRIER_SERIAL_THREAD ? 0 : -1;
}

/* rc is EINVAL, and the reason says words. */
static void refused(int rc, const char *words)
{
    assert_int_equal(rc, EINVAL);
    if (!strstr(dist_last_error(), words))
        fail_msg("reason '%s' lacks '%s'", dist_last_error(), words);
}

/* An object of kind k on name from init to destroy: each hold makes
 * destroy EBUSY, and is let go after it; a kind without holds is used
 * once; destroy then says 0 and no key is left under the name. */
static void life(const struct kind *k, const char *name)
{
    union obj o;
    int i;

    assert_int_equal(life_step(k->id, &o, name, DO), 0);
    for (i = 0; i < 2 && k->holds[i].h != NO_HOLD; i++) {
        assert_int_equal(hold_step(k->holds[i].h, &o, DO), 0);
        if (k->holds[i].fields)
            assert_int_equal(tu_cmd_int(&r, "HLEN", name, NULL),
                             k->holds[i].fields);
        assert_int_equal(life_step(k->id, &o, NULL, UNDO), EBUSY);
        assert_int_equal(hold_step(k->holds[i].h, &o, UNDO), 0);
    }
    if (i == 0) /* no holds */
        assert_int_equal(use_as(k->id, &o), 0);
    assert_int_equal(life_step(k->id, &o, NULL, UNDO), 0);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", name, NULL), 0);
}

static void test_names_and_destroy(void **state)
{
    const struct kind *k = *state;
    char name[200], noun_null[64], too_long[64];
    char *big = fx_name_too_long();
    union obj o;

    NAME(name, k->what);
    life(k, name);

    snprintf(noun_null, sizeof noun_null, "%s is NULL", k->noun);
    snprintf(too_long, sizeof too_long, "longer than %d bytes",
             DIST_NAME_MAX);
    refused(life_step(k->id, NULL, name, DO), noun_null);
    refused(life_step(k->id, &o, NULL, DO), "lock name is NULL");
    refused(life_step(k->id, &o, "", DO), "lock name is empty");
    refused(life_step(k->id, &o, big, DO), too_long);

    /* exactly DIST_NAME_MAX bytes, beginning with the test's name */
    big[DIST_NAME_MAX] = 0;
    memcpy(big, name, strlen(name));
    life(k, big);
    free(big);
}

int main(void)
{
#define ROW(i)                                                               \
    {                                                                        \
        kinds[i].what, test_names_and_destroy, NULL, fx_restore_defaults,    \
            (void *)&kinds[i]                                                \
    }
    const struct CMUnitTest tests[] = { ROW(0), ROW(1), ROW(2), ROW(3),
                                        ROW(4) };
    return fx_run_group(tests, &r, &defaults, "TEST_NAMES_RULES_FILTER");
}
