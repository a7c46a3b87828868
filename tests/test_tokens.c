/*
 * test_tokens: fencing tokens only rise, whatever happened to the counter
 * they are drawn from.  Against private redis-servers:
 *
 *   - a token is the server's clock in microseconds, or one more than the
 *     counter when that is ahead of the clock (as Redisson's RFencedLock,
 *     which INCRs the same counter, may leave it), and Java's INCR and
 *     distlock's draws make one rising sequence;
 *   - the token of a hold, the same for every kind that has one (one test
 *     a kind, test_token_rules): EPERM while not held, drawn by a new hold
 *     and written to the counter, kept by a re-entry and by the hold left
 *     after one unlock, gone with the last unlock, greater for the next
 *     new hold; an rwlock's read holds have none;
 *   - after a restart without data (the counter gone), after a restart from
 *     the append-only file, and after a failover to a replica that missed
 *     the last draws, while the old master still hands out tokens to
 *     another process: every token is above every token before it.
 *
 * The servers run on this host, so they share one clock, which is what the
 * scheme assumes of the hosts of a deployment (within the time a failover
 * takes).  TEST_TOKENS_FILTER=<glob> runs some tests only.
 */
#define GROUP_PROG "test_tokens"
#define GROUP_SETTINGS                                                       \
    {                                                                        \
        30000, 2000, 0                                                       \
    }
#include "grouphelp.h"

static long long real_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* One new hold of name, released: its token. */
static uint64_t take(const char *name)
{
    dist_mutex_t m;
    uint64_t t = 0;

    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    assert_int_equal(dist_mutex_lock(&m), 0);
    assert_int_equal(dist_mutex_token(&m, &t), 0);
    assert_int_equal(dist_mutex_unlock(&m), 0);
    assert_int_equal(dist_mutex_destroy(&m), 0);
    return t;
}

static void counter_key(char *key, size_t len, const char *name)
{
    snprintf(key, len, "redisson_lock_token:{%s}", name);
}

static void set_counter(tu_redis_t *srv, const char *name, const char *v)
{
    char key[300];
    redisReply *x;

    counter_key(key, sizeof key, name);
    x = tu_cmd(srv, "SET", key, v, NULL);
    assert_non_null(x);
    freeReplyObject(x);
}

static void test_token_is_the_clock(void **state)
{
    char name[200], key[300];
    long long before, after;
    uint64_t t1, t2, t3;

    (void)state;
    NAME(name, "m");
    before = real_us();
    t1 = take(name);
    t2 = take(name);
    after = real_us();
    /* the server runs on this host: its clock is ours */
    if ((long long)t1 < before - 1000000 || (long long)t2 > after + 1000000)
        fail_msg("tokens %llu, %llu outside the clock's %lld..%lld us",
                 (unsigned long long)t1, (unsigned long long)t2, before,
                 after);
    assert_true(t2 > t1);
    /* Redisson's RFencedLock draws with INCR on the same counter */
    counter_key(key, sizeof key, name);
    assert_int_equal(tu_cmd_int(&r, "INCR", key, NULL), (long long)t2 + 1);
    t3 = take(name);
    assert_true(t3 > t2 + 1);
}

/* A counter ahead of the clock is counted on by one, and Java's INCR and
 * distlock's draws alternate in one sequence. */
static void test_counter_ahead_counts_on(void **state)
{
    char name[200], key[300];
    uint64_t t;

    (void)state;
    NAME(name, "m");
    counter_key(key, sizeof key, name);
    set_counter(&r, name, "4000000000000000");
    t = take(name);
    assert_int_equal((long long)t, 4000000000000001LL);
    assert_int_equal(tu_cmd_int(&r, "INCR", key, NULL), 4000000000000002LL);
    t = take(name);
    assert_int_equal((long long)t, 4000000000000003LL);
}

/* A new hold draws its token with TIME and one SET that reads the counter
 * as it writes it (its GET option): no GET, one SET (it was GET, TIME and
 * SET: a command more on every new hold). */
static void test_draw_reads_in_its_set(void **state)
{
    char name[200];
    long long g0, s0, t0;
    uint64_t t1, t2;

    (void)state;
    NAME(name, "m");
    t1 = take(name); /* the counter now exists, below the clock */
    g0 = command_calls_on(&r, "get");
    s0 = command_calls_on(&r, "set");
    t0 = command_calls_on(&r, "time");
    t2 = take(name);
    assert_true(t2 > t1);
    assert_int_equal(command_calls_on(&r, "get") - g0, 0);
    assert_int_equal(command_calls_on(&r, "set") - s0, 1);
    assert_int_equal(command_calls_on(&r, "time") - t0, 1);
}

/* A counter that holds no number, or one past 2^53, fails the new hold,
 * which takes nothing, and is left holding what it held (the SET that
 * read it puts it back). */
static void test_bad_counter_left_as_it_was(void **state)
{
    static const char *const bad[] = { "hello", "9007199254740993" };
    char key[300], *v;
    size_t i;

    (void)state;
    for (i = 0; i < 2; i++) {
        dist_mutex_t *m = fx_mutex(bad[i], NULL);
        const char *name = fx_name(m);

        counter_key(key, sizeof key, name);
        set_counter(&r, name, bad[i]);
        assert_int_not_equal(dist_mutex_lock(m), 0);
        assert_non_null(strstr(dist_last_error(), "fencing counter"));
        v = tu_cmd_str(&r, "GET", key, NULL);
        assert_non_null(v);
        assert_string_equal(v, bad[i]);
        free(v);
        assert_int_equal(tu_cmd_int(&r, "EXISTS", name, NULL), 0);
    }
}

/* The kinds that hold a token, one row each, for test_token_rules; a row
 * says what its kind adds to the rules every row keeps. */
enum kind_id { MUTEX, RWLOCK };

struct kind {
    const char *test; /* the name of its row's test */
    const char *what; /* the tag of its lock name */
    enum kind_id id;
    int fair;  /* made with the fair attribute: its own scripts draw */
    int reads; /* it has a read side, whose holds have no token */
};

static const struct kind kinds[] = {
    { "test_token_rules:mutex", "mutex", MUTEX, 0, 0 },
    /* fair_lock draws as lock does (its grant on a hand-off: test_fair) */
    { "test_token_rules:fair", "fair", MUTEX, 1, 0 },
    /* the write side draws; a read hold has no token, nor has the read a
     * writer took of its own once its writes are gone (a downgrade) */
    { "test_token_rules:rwlock", "rwlock", RWLOCK, 0, 1 },
};

/* Each hold step is one of a pair: a hold taken and let go. */
enum way { DO, UNDO };

/* Takes a hold of o (an rwlock's write side), or lets one go (UNDO). */
static int hold_step(const struct kind *k, void *o, enum way w)
{
    const int give = w == UNDO;

    if (k->id == RWLOCK)
        return give ? dist_rwlock_unlock(o) : dist_rwlock_wrlock(o);
    return give ? dist_mutex_unlock(o) : dist_mutex_lock(o);
}

static int token_of(const struct kind *k, void *o, uint64_t *t)
{
    return k->id == RWLOCK ? dist_rwlock_token(o, t) : dist_mutex_token(o, t);
}

/* The token of a hold, for every kind that has one: EPERM while not held;
 * a new hold draws one, at least 1, which the counter key then holds; a
 * re-entry keeps it, and so does the hold left after one unlock; the last
 * unlock ends it (EPERM, no key left), and the next new hold draws a
 * greater one; a NULL token is EINVAL. */
static void test_token_rules(void **state)
{
    const struct kind *k = *state;
    dist_mutexattr_t fair;
    char key[300];
    uint64_t t1 = 0, t2 = 0, t = 0;
    void *o;

    dist_mutexattr_init(&fair);
    dist_mutexattr_setfair(&fair, 1);
    o = k->id == RWLOCK ? (void *)fx_rwlock(k->what, NULL)
                        : (void *)fx_mutex(k->what, k->fair ? &fair : NULL);
    dist_mutexattr_destroy(&fair);
    counter_key(key, sizeof key, fx_name(o));

    assert_int_equal(token_of(k, o, &t), EPERM);
    if (k->reads) { /* a read hold draws none */
        assert_int_equal(dist_rwlock_rdlock(o), 0);
        assert_int_equal(token_of(k, o, &t), EPERM);
        assert_int_equal(dist_rwlock_unlock(o), 0);
    }
    assert_int_equal(hold_step(k, o, DO), 0);
    assert_int_equal(token_of(k, o, &t1), 0);
    assert_true(t1 >= 1);
    assert_int_equal(tu_cmd_int(&r, "GET", key, NULL), (long long)t1);
    assert_int_equal(hold_step(k, o, DO), 0); /* a re-entry */
    if (k->reads) /* and a read of the writer's own */
        assert_int_equal(dist_rwlock_rdlock(o), 0);
    assert_int_equal(token_of(k, o, &t), 0);
    assert_int_equal(t, t1);
    assert_int_equal(hold_step(k, o, UNDO), 0);
    assert_int_equal(token_of(k, o, &t), 0); /* held once still */
    assert_int_equal(t, t1);
    assert_int_equal(hold_step(k, o, UNDO), 0);
    if (k->reads) { /* the writes are gone, the read is left */
        assert_int_equal(token_of(k, o, &t), EPERM);
        assert_int_equal(dist_rwlock_unlock(o), 0);
    }
    assert_int_equal(token_of(k, o, &t), EPERM);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", fx_name(o), NULL), 0);

    assert_int_equal(hold_step(k, o, DO), 0);
    assert_int_equal(token_of(k, o, &t2), 0);
    assert_true(t2 > t1);
    assert_int_equal(hold_step(k, o, UNDO), 0);
    assert_int_equal(token_of(k, o, &t), EPERM);
    assert_int_equal(token_of(k, o, NULL), EINVAL);
}

/* The write side of the rwlock and the fair mutex draw the same way. */
static void test_every_kind_rises(void **state)
{
    dist_rwlock_t *rw = fx_rwlock("x", NULL);
    const char *name = fx_name(rw);
    dist_mutex_t *fm;
    dist_mutexattr_t fa;
    uint64_t t0, t1, t2;

    (void)state;
    t0 = take(name);
    set_counter(&r, name, "7"); /* the counter went back */
    assert_int_equal(dist_rwlock_wrlock(rw), 0);
    assert_int_equal(dist_rwlock_token(rw, &t1), 0);
    assert_int_equal(dist_rwlock_unlock(rw), 0);
    assert_true(t1 > t0);
    set_counter(&r, name, "7");
    dist_mutexattr_init(&fa);
    dist_mutexattr_setfair(&fa, 1);
    fm = fx_mutex_on(fx_name(rw), &fa);
    dist_mutexattr_destroy(&fa);
    assert_int_equal(dist_mutex_lock(fm), 0);
    assert_int_equal(dist_mutex_token(fm, &t2), 0);
    assert_int_equal(dist_mutex_unlock(fm), 0);
    assert_true(t2 > t1);
}

/* A restart without data: the counter is gone, tokens go on rising. */
static void test_restart_without_data(void **state)
{
    char name[200], key[300];
    uint64_t t1, t2;

    (void)state;
    NAME(name, "m");
    t1 = take(name);
    assert_int_equal(tu_redis_kill(&r), 0);
    assert_int_equal(tu_redis_restart(&r), 0);
    counter_key(key, sizeof key, name);
    assert_int_equal(tu_cmd_int(&r, "EXISTS", key, NULL), 0);
    t2 = take(name);
    assert_true(t2 > t1);
}

/* A restart from the append-only file: the counter comes back. */
static void test_restart_from_aof(void **state)
{
    static const char *const aof[] = { "--appendonly", "yes", "--appendfsync",
                                       "always", NULL };
    const tu_redis_opts o = { NULL, aof, NULL, NULL };
    tu_redis_t s;
    char name[200];
    uint64_t t1, t2;

    (void)state;
    NAME(name, "m");
    assert_int_equal(tu_redis_start_opts(&s, &o), 0);
    assert_int_equal(fx_apply(s.url_unix, &defaults), 0);
    t1 = take(name);
    set_counter(&s, name, "5000000000000000"); /* ahead: kept by the AOF */
    assert_int_equal(tu_redis_kill(&s), 0);
    assert_int_equal(tu_redis_restart(&s), 0);
    t2 = take(name);
    assert_true(t2 > t1);
    assert_int_equal((long long)t2, 5000000000000001LL);
    assert_int_equal(fx_apply(r.url_unix, &defaults), 0);
    tu_redis_stop(&s);
}

/* In a forked child: one new hold of name on url, its token written to fd. */
static void child_take(const char *url, const char *name, int fd)
{
    pid_t pid = fork();
    int st;

    assert_true(pid >= 0);
    if (pid == 0) {
        uint64_t t = 0;
        dist_mutex_t m;
        int ok = fx_apply(url, &defaults) == 0 &&
                 dist_mutex_init(&m, name, NULL) == 0 &&
                 dist_mutex_lock(&m) == 0 && dist_mutex_token(&m, &t) == 0 &&
                 dist_mutex_unlock(&m) == 0;
        ok = ok && write(fd, &t, sizeof t) == (ssize_t)sizeof t;
        _exit(ok ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static uint64_t read_token(int fd)
{
    uint64_t t = 0;

    assert_int_equal(read(fd, &t, sizeof t), (ssize_t)sizeof t);
    return t;
}

/* A failover to a replica that missed the last draws, while the old
 * master, not yet demoted, still hands out tokens to a process that has
 * not heard of the failover: the tokens of both, in the order they were
 * handed out, rise. */
static void test_failover_replica_behind(void **state)
{
    tu_redis_t old, rep;
    char name[200], port[16];
    uint64_t seq[6];
    int p[2], i;
    redisReply *x;

    (void)state;
    NAME(name, "m");
    assert_int_equal(tu_redis_start(&old), 0);
    assert_int_equal(tu_redis_start(&rep), 0);
    snprintf(port, sizeof port, "%d", old.port);
    /* a full sync without the 5 s wait for more replicas */
    x = tu_cmd(&old, "CONFIG", "SET", "repl-diskless-sync-delay", "0", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    x = tu_cmd(&rep, "REPLICAOF", "127.0.0.1", port, NULL);
    assert_non_null(x);
    freeReplyObject(x);
    assert_int_equal(fx_apply(old.url_unix, &defaults), 0);
    seq[0] = take(name);
    /* the replica has it, then is cut off and misses the next draws */
    for (i = 0; i < 200; i++) {
        char key[300];
        counter_key(key, sizeof key, name);
        if (tu_cmd_int(&rep, "EXISTS", key, NULL) == 1)
            break;
        usleep(50000);
    }
    assert_true(i < 200);
    x = tu_cmd(&rep, "REPLICAOF", "NO", "ONE", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    seq[1] = take(name); /* on the old master only */
    /* the failover: this process now uses the promoted replica, whose
     * counter is behind; another process still uses the old master */
    assert_int_equal(pipe(p), 0);
    assert_int_equal(fx_apply(rep.url_unix, &defaults), 0);
    seq[2] = take(name);
    child_take(old.url_unix, name, p[1]);
    seq[3] = read_token(p[0]);
    seq[4] = take(name);
    child_take(old.url_unix, name, p[1]);
    seq[5] = read_token(p[0]);
    close(p[0]);
    close(p[1]);
    for (i = 1; i < 6; i++)
        if (seq[i] <= seq[i - 1])
            fail_msg("token %d (%llu) is not above token %d (%llu)", i,
                     (unsigned long long)seq[i], i - 1,
                     (unsigned long long)seq[i - 1]);
    assert_int_equal(fx_apply(r.url_unix, &defaults), 0);
    tu_redis_stop(&old);
    tu_redis_stop(&rep);
}

int main(void)
{
/* a row of kinds[] as a test of its own, named after its kind */
#define ROW(i)                                                               \
    {                                                                        \
        kinds[i].test, test_token_rules, NULL, fx_restore_defaults,          \
            (void *)&kinds[i]                                                \
    }
    const struct CMUnitTest tests[] = {
        FX_TEST(test_token_is_the_clock),
        FX_TEST(test_counter_ahead_counts_on),
        FX_TEST(test_draw_reads_in_its_set),
        FX_TEST(test_bad_counter_left_as_it_was),
        ROW(0),
        ROW(1),
        ROW(2),
        FX_TEST(test_every_kind_rises),
        FX_TEST(test_restart_without_data),
        FX_TEST(test_restart_from_aof),
        FX_TEST(test_failover_replica_behind),
    };
    return fx_run_group(tests, &r, &defaults, "TEST_TOKENS_FILTER");
}
