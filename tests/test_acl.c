/*
 * test_acl: the library and the distlock tool as a Redis ACL user with
 * exactly the permissions the "Least privilege" section of
 * docs/deployment.md gives (its command is read from that file and run as
 * it stands, with the password and the name prefix of this test put in):
 * every lock kind, waits included (subscriptions, release messages,
 * renewals), then the tool's status and list.  After each test the
 * server's ACL LOG must be empty: nothing was refused, not even something
 * the library would have shrugged off (ROLE, INFO).  And a lock outside
 * the user's names is refused, which shows the user is the one in force;
 * and a user without INFO takes locks all the same, one INFO refused
 * (logged) and ROLE read instead.
 *
 * One private redis-server for the group (fixture.h); the library on its
 * TCP port as that user.  Bounds hold on a loaded 2-core machine.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

/* Short leases and waiter windows, so that renewals of both run. */
static const struct fx_settings settings = { 1500, 2000, 1500 };
static tu_redis_t r;

#define USER       "distlock_test"
#define PASSWORD   "acl-test-secret"
/* The prefix of every name the documented command allows, and this test's
 * (the group's names all start with it). */
#define DOC_PREFIX "app:"
#define PREFIX     "test_acl:"

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_acl", __func__, tag)

static char url[128];

/* ---- the user, from the documentation ---------------------------------- */

#define MAX_ARGS 200

/* The words of the documented ACL SETUSER command: the lines of the block
 * after the marker, joined at their backslashes, split at blanks, single
 * quotes taken off, the password and the prefix put in.  Returns the
 * number of words (from "ACL" on), or fails the test. */
static int doc_acl(char *words[MAX_ARGS])
{
    char path[4096], line[1024], *tok, *save;
    const char *src = getenv("srcdir");
    int n = 0, in = 0, more = 1;
    FILE *f;

    snprintf(path, sizeof path, "%s/docs/deployment.md", src ? src : ".");
    if (!(f = fopen(path, "r")))
        fail_msg("cannot read %s (srcdir=%s)", path, src ? src : "unset");
    while (more && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (!in) {
            in = strstr(line, "<!-- acl: tests/test_acl.c -->") != NULL;
            continue;
        }
        if (strncmp(line, "```", 3) == 0)
            continue;
        while (len && (line[len - 1] == '\n' || line[len - 1] == ' '))
            line[--len] = 0;
        more = len && line[len - 1] == '\\';
        if (more)
            line[--len] = 0;
        for (tok = strtok_r(line, " ", &save); tok;
             tok = strtok_r(NULL, " ", &save)) {
            char word[256], *p;
            size_t k = 0, pl = strlen(DOC_PREFIX);
            const char *s;

            if (strcmp(tok, "redis-cli") == 0)
                continue;
            for (s = tok; *s && k + sizeof PREFIX < sizeof word; s++) {
                if (*s == '\'')
                    continue;
                if (strncmp(s, DOC_PREFIX, pl) == 0) {
                    memcpy(word + k, PREFIX, strlen(PREFIX));
                    k += strlen(PREFIX);
                    s += pl - 1;
                    continue;
                }
                word[k++] = *s;
            }
            word[k] = 0;
            if (strcmp(word, ">PASSWORD") == 0)
                snprintf(word, sizeof word, ">%s", PASSWORD);
            else if (strcmp(word, "NAME") == 0)
                snprintf(word, sizeof word, "%s", USER);
            assert_true(n < MAX_ARGS - 1);
            p = strdup(word);
            assert_non_null(p);
            words[n++] = p;
        }
    }
    fclose(f);
    if (n < 4 || strcmp(words[0], "ACL") != 0 ||
        strcmp(words[1], "SETUSER") != 0)
        fail_msg("no ACL SETUSER command after the marker in %s", path);
    words[n] = NULL;
    return n;
}

/* Whether the documented user is granted "+cmd". */
static int granted(char *const *words, int n, const char *cmd)
{
    int i;

    for (i = 0; i < n; i++)
        if (words[i][0] == '+' && strcasecmp(words[i] + 1, cmd) == 0)
            return 1;
    return 0;
}

/* Whether the documented user is granted the command a script calls at p
 * (just past its opening quote; q its closing one), cmd: "+cmd", or
 * "+cmd|sub" for the subcommand named next ('pubsub', 'numsub'). */
static int call_granted(char *const *words, int n, const char *cmd,
                        const char *q)
{
    char both[128];
    const char *sub = q + 1, *end;

    if (granted(words, n, cmd))
        return 1;
    if (strncmp(sub, ", '", 3) != 0 || !(end = strchr(sub + 3, '\'')))
        return 0;
    snprintf(both, sizeof both, "%s|%.*s", cmd, (int)(end - sub - 3),
             sub + 3);
    return granted(words, n, both);
}

/* Every Redis command a script of lua/ names, in redis.call('x', ...),
 * redis.pcall('x', ...) or pcall(redis.call, 'x', ...), is granted by the
 * documented ACL: a script that starts to use a new command fails here,
 * by name, rather than as an EIO in one of the cases above. */
static void test_scripts_commands_granted(void **state)
{
    static const char *const opens[] = { "redis.call('", "redis.pcall('",
                                         "pcall(redis.call, '" };
    char *words[MAX_ARGS], dir[4096], path[8192], line[1024];
    const char *src = getenv("srcdir");
    struct dirent *e;
    int n, i, files = 0, calls = 0, missing = 0;
    DIR *d;

    (void)state;
    n = doc_acl(words);
    snprintf(dir, sizeof dir, "%s/lua", src ? src : ".");
    d = opendir(dir);
    if (!d)
        fail_msg("cannot read %s: %s", dir, strerror(errno));
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        FILE *f;

        if (len < 5 || strcmp(e->d_name + len - 4, ".lua") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        assert_non_null(f = fopen(path, "r"));
        files++;
        while (fgets(line, sizeof line, f)) {
            char *p, *q;

            for (i = 0; i < (int)(sizeof opens / sizeof opens[0]); i++) {
                for (p = line; (p = strstr(p, opens[i])); p = q) {
                    char cmd[64];
                    size_t k;

                    p += strlen(opens[i]);
                    q = strchr(p, '\'');
                    if (!q)
                        break;
                    k = (size_t)(q - p);
                    if (k == 0 || k >= sizeof cmd)
                        continue;
                    memcpy(cmd, p, k);
                    cmd[k] = 0;
                    calls++;
                    if (!call_granted(words, n, cmd, q)) {
                        print_error("%s calls '%s', which the ACL in "
                                    "docs/deployment.md does not grant\n",
                                    e->d_name, cmd);
                        missing++;
                    }
                }
            }
        }
        fclose(f);
    }
    closedir(d);
    for (i = 0; i < n; i++)
        free(words[i]);
    assert_true(files > 10);
    assert_true(calls > 100);
    assert_int_equal(missing, 0);
}

static int group_setup(void **state)
{
    char *words[MAX_ARGS];
    redisReply *x;
    int n, i;

    if (fx_group_setup(state) != 0)
        return -1;
    n = doc_acl(words);
    for (i = 0; i < n; i++)
        print_message("%s%s", i ? " " : "", words[i]);
    print_message("\n");
    x = tu_cmdv(&r, n, (const char *const *)words, NULL);
    for (i = 0; i < n; i++)
        free(words[i]);
    if (!x || x->type == REDIS_REPLY_ERROR) {
        print_error("ACL SETUSER: %s\n", x ? x->str : "no reply");
        freeReplyObject(x);
        return -1;
    }
    freeReplyObject(x);
    snprintf(url, sizeof url, "redis://%s:%s@127.0.0.1:%d", USER, PASSWORD,
             r.port);
    return fx_apply(url, &settings);
}

static int setup(void **state)
{
    (void)state;
    freeReplyObject(tu_cmd(&r, "ACL", "LOG", "RESET", NULL));
    return 0;
}

/* Nothing was refused since setup: the ACL LOG is empty (each entry
 * printed otherwise). */
static void nothing_refused(void)
{
    redisReply *x = tu_cmd(&r, "ACL", "LOG", NULL);
    size_t i, j;

    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    for (i = 0; i < x->elements; i++) {
        redisReply *e = x->element[i];
        print_error("refused:");
        for (j = 0; j + 1 < e->elements; j += 2)
            if (e->element[j + 1]->type == REDIS_REPLY_STRING)
                print_error(" %s=%s", e->element[j]->str,
                            e->element[j + 1]->str);
        print_error("\n");
    }
    if (x->elements)
        fail_msg("the server refused the user %zu time(s) (above)",
                 x->elements);
    freeReplyObject(x);
}

/* After a test: its objects destroyed (fx_own_teardown), then nothing
 * refused, the destroys included. */
static int teardown(void **state)
{
    int rc = fx_own_teardown(state);

    nothing_refused();
    return rc;
}

/* ---- the kinds ----------------------------------------------------------------- */

/* The wall clock in ms, as a Redisson client writes its deadlines. */
static double real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The waiters below (on a thread of their own, fx_thread) take what
 * another thread holds: a subscription, a release message, a waiter's
 * renewals.  Each blocks, then ends its hold. */

/* a hold taken, then given back by the thread that took it */
static int mx_lock(void *m)
{
    int rc = dist_mutex_lock(m);

    return rc ? rc : dist_mutex_unlock(m);
}

/* The cases run once for each kind (P in main). */
static const int plain_kind = 0, fair_kind = 1;
static const int leased_mode = DIST_SEM_LEASED,
                 redisson_mode = DIST_SEM_REDISSON;

static void mutex_kind(void **state)
{
    const int fair = param_int(state);
    dist_mutexattr_t a;
    dist_mutex_t *m, *m2;
    struct fx_thread w[2];
    const char *name;
    uint64_t token;
    int i;

    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setfair(&a, fair), 0);
    /* two objects on one name */
    m = fx_mutex(fair ? "fair" : "plain", &a);
    m2 = fx_mutex(fair ? "fair" : "plain", &a);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_token(m, &token), 0);
    /* held across renewals (every 0.5 s) while two threads wait (a fair
     * queue's deadlines move behind its head as the head is renewed) */
    for (i = 0; i < 2; i++)
        fx_thread_start(&w[i], mx_lock, m2);
    if (fair) {
        /* and a Redisson client queued behind them, whose deadline
         * theirs carry along */
        char q[256], t[256], dl[32];

        tu_sleep_ms(600);
        snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name);
        snprintf(t, sizeof t, "redisson_lock_timeout:{%s}", name);
        snprintf(dl, sizeof dl, "%.0f", real_ms() + 60000);
        tu_cmd_int(&r, "RPUSH", q, "redisson-client:1", NULL);
        tu_cmd_int(&r, "ZADD", t, dl, "redisson-client:1", NULL);
    }
    tu_sleep_ms(1200);
    for (i = 0; i < 2; i++)
        assert_int_equal(w[i].rc, -1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    for (i = 0; i < 2; i++) {
        assert_int_equal(fx_thread_join(&w[i]), 0);
    }
    if (fair) {
        char k[256];

        snprintf(k, sizeof k, "redisson_lock_queue:{%s}", name);
        tu_cmd_int(&r, "DEL", k, NULL);
        snprintf(k, sizeof k, "redisson_lock_timeout:{%s}", name);
        tu_cmd_int(&r, "DEL", k, NULL);
    }
}

static int rw_wr(void *l)
{
    int rc = dist_rwlock_wrlock(l);

    return rc ? rc : dist_rwlock_unlock(l);
}

static void test_rwlock(void **state)
{
    dist_rwlock_t *a = fx_rwlock("rw", NULL), *b = fx_rwlock("rw", NULL);
    struct fx_thread w;

    (void)state;
    assert_int_equal(dist_rwlock_rdlock(a), 0);
    assert_int_equal(dist_rwlock_rdlock(a), 0);
    fx_thread_start(&w, rw_wr, b);
    tu_sleep_ms(1200);
    assert_int_equal(w.rc, -1);
    assert_int_equal(dist_rwlock_unlock(a), 0);
    assert_int_equal(dist_rwlock_unlock(a), 0);
    assert_int_equal(fx_thread_join(&w), 0);
}

struct condpair {
    dist_mutex_t *m;
    dist_cond_t *c;
    int ready;
};

static int cond_wait(void *p)
{
    struct condpair *cp = p;
    int rc = dist_mutex_lock(cp->m);

    while (rc == 0 && !cp->ready)
        rc = dist_cond_wait(cp->c, cp->m);
    if (rc == 0)
        rc = dist_mutex_unlock(cp->m);
    return rc;
}

static void test_cond(void **state)
{
    struct condpair cp = { fx_mutex("m", NULL), fx_cond("c", NULL), 0 };
    struct fx_thread w;

    (void)state;
    fx_thread_start(&w, cond_wait, &cp);
    tu_sleep_ms(1200); /* registered, renewed as a waiter */
    assert_int_equal(w.rc, -1);
    assert_int_equal(dist_mutex_lock(cp.m), 0);
    cp.ready = 1;
    assert_int_equal(dist_cond_signal(cp.c), 0);
    assert_int_equal(dist_cond_broadcast(cp.c), 0);
    assert_int_equal(dist_mutex_unlock(cp.m), 0);
    assert_int_equal(fx_thread_join(&w), 0);
}

/* a permit taken, then given back by the thread that holds it */
static int sem_take(void *s)
{
    int rc = dist_sem_wait(s);

    return rc ? rc : dist_sem_post(s);
}

static void sem_kind(void **state)
{
    const int mode = param_int(state);
    const char *tag = mode == DIST_SEM_REDISSON ? "redisson" : "leased";
    dist_semattr_t a;
    dist_sem_t *s, *s2;
    struct fx_thread w;
    int v;

    assert_int_equal(dist_semattr_init(&a), 0);
    assert_int_equal(dist_semattr_setmode(&a, mode), 0);
    /* two objects on one name */
    s = fx_sem(tag, 1, &a);
    s2 = fx_sem(tag, 1, &a);
    assert_int_equal(dist_sem_wait(s), 0);
    fx_thread_start(&w, sem_take, s2);
    tu_sleep_ms(1200); /* the permit renewed, the waiter too */
    assert_int_equal(w.rc, -1);
    assert_int_equal(dist_sem_getvalue(s, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(dist_sem_post(s), 0);
    assert_int_equal(fx_thread_join(&w), 0);
}

static int bar_wait(void *b)
{
    int rc = dist_barrier_wait(b);

    return rc == DIST_BARRIER_SERIAL_THREAD ? 0 : rc;
}

static void test_barrier(void **state)
{
    dist_barrier_t a, b;
    struct fx_thread w;
    char name[200];
    int rc;

    (void)state;
    NAME(name, "b");
    assert_int_equal(dist_barrier_init(&a, name, 2), 0);
    assert_int_equal(dist_barrier_init(&b, name, 2), 0);
    fx_thread_start(&w, bar_wait, &a);
    tu_sleep_ms(1200); /* arrived, its membership renewed */
    assert_int_equal(w.rc, -1);
    rc = dist_barrier_wait(&b);
    assert_true(rc == 0 || rc == DIST_BARRIER_SERIAL_THREAD);
    assert_int_equal(fx_thread_join(&w), 0);
    assert_int_equal(dist_barrier_destroy(&a), 0);
    assert_int_equal(dist_barrier_destroy(&b), 0);
}

/* Calls of cmd the group's server has run. */
static long calls_of(const char *cmd)
{
    long long n = command_calls_on(&r, cmd);

    assert_true(n >= 0);
    return (long)n;
}

/* WAIT commands the group's server has run. */
static long wait_calls(void)
{
    return calls_of("wait");
}

/* A master with a replica: each new hold waits for the replica's
 * acknowledgement, as it does for any user: ROLE counted it when the
 * connection was made, and a second later the acquire script itself
 * (INFO replication, which the user may run). */
static void test_with_replica(void **state)
{
    tu_redis_t rep;
    dist_mutex_t *m;
    long waits, roles;

    (void)state;
    start_replica(&r, &rep);
    /* connections made before the replica came count none: anew */
    dist_shutdown();
    assert_int_equal(fx_apply(url, &settings), 0);
    waits = wait_calls();
    m = fx_mutex("m", NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_cmd_int(&rep, "EXISTS", fx_name(m), NULL), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    if (wait_calls() <= waits)
        fail_msg("the hold was not made to wait for the replica (no WAIT)");
    tu_sleep_ms(1100); /* the count is over 1 s old */
    waits = wait_calls();
    roles = calls_of("role");
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    if (wait_calls() <= waits)
        fail_msg("the hold on a count its script read did not WAIT");
    assert_int_equal(calls_of("role"), roles);
    tu_redis_stop(&rep);
}

/* The user is the one in force: a lock outside its names is refused,
 * and says why. */
static void test_other_names_refused(void **state)
{
    dist_mutex_t m;
    int rc;

    (void)state;
    assert_int_equal(dist_mutex_init(&m, "not_acl:x", NULL), 0);
    rc = dist_mutex_trylock(&m);
    if (rc == 0)
        fail_msg("a lock outside the user's key patterns was taken");
    print_message("refused: %s\n", dist_last_error());
    assert_int_equal(rc, EIO);
    assert_non_null(strstr(dist_last_error(), "NOPERM"));
    assert_int_equal(dist_mutex_destroy(&m), 0);
}

/* Refusals in the server's ACL LOG now (an entry counts those like it
 * within a minute); *info those of INFO from within a script. */
static long long refusals(long long *info)
{
    redisReply *x = tu_cmd(&r, "ACL", "LOG", NULL);
    long long n = 0;
    size_t i, j;

    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    *info = 0;
    for (i = 0; i < x->elements; i++) {
        redisReply *e = x->element[i];
        long long times = 0;
        int lua = 0, obj = 0;
        for (j = 0; j + 1 < e->elements; j += 2) {
            const char *k = e->element[j]->str, *v = e->element[j + 1]->str;
            if (strcmp(k, "count") == 0 &&
                e->element[j + 1]->type == REDIS_REPLY_INTEGER)
                times = e->element[j + 1]->integer;
            if (e->element[j + 1]->type != REDIS_REPLY_STRING)
                continue;
            lua |= strcmp(k, "context") == 0 && strcmp(v, "lua") == 0;
            obj |= strcmp(k, "object") == 0 && strcmp(v, "info") == 0;
        }
        n += times;
        if (lua && obj)
            *info += times;
    }
    freeReplyObject(x);
    return n;
}

/* A user without INFO (the documented command before it had it): the
 * first acquire that reads the replica count in its script is refused
 * INFO and catches it; the lock is taken all the same, replica sync reads
 * ROLE instead, the refusal is logged once, and the process reads ROLE
 * after new holds from then on.  Last: the process sends no script that
 * reads the count after it. */
static void test_without_info(void **state)
{
    char *words[MAX_ARGS], other[128];
    long long info;
    long roles;
    dist_mutex_t *m;
    redisReply *x;
    int n, i, k;

    (void)state;
    n = doc_acl(words);
    for (i = k = 0; i < n; i++) {
        if (strcmp(words[i], "+info|replication") == 0) {
            free(words[i]);
            continue;
        }
        if (strcmp(words[i], USER) == 0) {
            free(words[i]);
            words[i] = strdup(USER "_noinfo");
            assert_non_null(words[i]);
        }
        words[k++] = words[i];
    }
    assert_int_equal(k, n - 1);
    x = tu_cmdv(&r, k, (const char *const *)words, NULL);
    for (i = 0; i < k; i++)
        free(words[i]);
    assert_non_null(x);
    assert_int_not_equal(x->type, REDIS_REPLY_ERROR);
    freeReplyObject(x);
    snprintf(other, sizeof other, "redis://%s:%s@127.0.0.1:%d",
             USER "_noinfo", PASSWORD, r.port);
    fx_dirty = 1;
    assert_int_equal(fx_apply(other, &settings), 0);

    m = fx_mutex("m", NULL);
    assert_int_equal(dist_mutex_lock(m), 0); /* connects: ROLE */
    assert_int_equal(dist_mutex_unlock(m), 0);
    for (i = 0; i < 2; i++) {
        tu_sleep_ms(1100); /* the count is over 1 s old */
        roles = calls_of("role");
        assert_int_equal(dist_mutex_lock(m), 0);
        assert_int_equal(dist_mutex_unlock(m), 0);
        /* the first: the script's INFO refused, then ROLE; the second:
         * the plain script, then ROLE */
        assert_int_equal(calls_of("role") - roles, 1);
        assert_int_equal(refusals(&info), 1);
        assert_int_equal(info, 1);
    }
    freeReplyObject(tu_cmd(&r, "ACL", "LOG", "RESET", NULL));
    freeReplyObject(tu_cmd(&r, "ACL", "DELUSER", USER "_noinfo", NULL));
    assert_int_equal(fx_apply(url, &settings), 0);
    fx_dirty = 0;
}

/* ---- the tool ---------------------------------------------------------------- */

/* Runs `distlock ARGS` (at most 5) as the user; its stdout in out (len
 * bytes), its wait status returned. */
static int tool(char *out, size_t len, const char *a0, const char *a1,
                const char *a2, const char *a3, const char *a4)
{
    const char *top = getenv("top_builddir");
    char path[4096];
    int fds[2], st;
    size_t got = 0;
    ssize_t n;
    pid_t pid;

    snprintf(path, sizeof path, "%s/tools/distlock", top ? top : ".");
    if (access(path, X_OK) != 0)
        fail_msg("%s is not there: build it first", path);
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    if ((pid = fork()) == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        setenv("DISTLOCK_URL", url, 1);
        execl(path, "distlock", a0, a1, a2, a3, a4, (char *)NULL);
        _exit(127);
    }
    assert_true(pid > 0);
    close(fds[1]);
    while (got + 1 < len && (n = read(fds[0], out + got, len - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = 0;
    close(fds[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    print_message("distlock %s %s: status %d\n%s", a0, a1 ? a1 : "", st, out);
    return st;
}

static void test_tool_status_and_list(void **state)
{
    char bname[200], pattern[256];
    char out[8192];
    dist_mutex_t *m = fx_mutex("m", NULL);
    dist_sem_t *s = fx_sem("s", 2, NULL);
    const char *mname = fx_name(m), *sname = fx_name(s);
    const char *cname = fx_name(fx_cond("c", NULL));
    dist_barrier_t b;
    int st;

    (void)state;
    NAME(bname, "b");
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_sem_wait(s), 0);
    assert_int_equal(dist_barrier_init(&b, bname, 2), 0);

    st = tool(out, sizeof out, "status", mname, NULL, NULL, NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_non_null(strstr(out, "held"));
    st = tool(out, sizeof out, "status", "--kind", "sem", sname, NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    st = tool(out, sizeof out, "status", "--kind", "cond", cname, NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    st = tool(out, sizeof out, "status", "--kind", "barrier", bname, NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    snprintf(pattern, sizeof pattern, "%s*", PREFIX);
    st = tool(out, sizeof out, "list", pattern, NULL, NULL, NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_non_null(strstr(out, mname));
    assert_non_null(strstr(out, sname));
    snprintf(pattern, sizeof pattern, "%s-tool", mname);
    st = tool(out, sizeof out, "lock", pattern, "--", "true", NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);

    assert_int_equal(dist_sem_post(s), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_barrier_destroy(&b), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define P(name, fn, arg)                                                     \
    {                                                                        \
#name, fn, setup, teardown, (void *)(arg)                            \
    }
    const struct CMUnitTest tests[] = {
        P(test_mutex, mutex_kind, &plain_kind),
        P(test_fair_mutex, mutex_kind, &fair_kind),
        T(test_rwlock),
        T(test_cond),
        P(test_sem_leased, sem_kind, &leased_mode),
        P(test_sem_redisson, sem_kind, &redisson_mode),
        T(test_barrier),
        T(test_tool_status_and_list),
        T(test_with_replica),
        /* refused on purpose: its log is not checked */
        cmocka_unit_test_setup_teardown(test_other_names_refused, setup,
                                        fx_own_teardown),
        cmocka_unit_test(test_scripts_commands_granted),
        T(test_without_info),
    };
#undef T
    fx_use(&r, &settings, "TEST_ACL_FILTER");
    return cmocka_run_group_tests(tests, group_setup, fx_group_teardown);
}
