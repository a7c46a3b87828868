/*
 * test_tls: the library over TLS (rediss://) against private redis-servers
 * with a TLS listener: locks of every kind, pub/sub wake-ups, renewal and a
 * hand-off between processes over TLS; mutual TLS; and each way a TLS
 * connection can be wrong, refused in words within the timeout.
 *
 * The certificates are made at start by the openssl command in a temp dir:
 * a CA, a server certificate for 127.0.0.1 and localhost, an expired one, a
 * client certificate, and a second, unrelated CA.  Each server also has its
 * plain port and unix socket, which the harness and the checks use.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "distlock.h"
#include "harness_proxy.h"
#include "harness_server.h"
#include "testhelp.h"
#include "fixture.h"

#define NAME(buf, tag)                                                       \
    test_lock_name(buf, sizeof buf, "test_tls", __func__, tag)
#define TIMEOUT_MS 3000UL /* the command (and connect) timeout here */

static char dir[256];          /* the certificates */
static tu_redis_t srv;         /* TLS, no client certificates asked */
static tu_redis_t srv_mtls;    /* TLS, client certificates required */
static tu_redis_t srv_expired; /* TLS with an expired certificate */

/* dir/name, in a static buffer of its own per slot (0..3). */
static const char *file(int slot, const char *name)
{
    static char buf[4][320];

    snprintf(buf[slot], sizeof buf[slot], "%s/%s", dir, name);
    return buf[slot];
}

/* ---- certificates and servers ------------------------------------------- */

/* The passphrase of cli-enc.key, the client key encrypted; WRONG_PASS is
 * not it, and neither may show in any message. */
#define KEY_PASS   "distlock-test-Pass"
#define WRONG_PASS "Xyzzy-not-the-pass"

/* The CA, an unrelated one, a server certificate (and an expired one) for
 * 127.0.0.1 and localhost, a client certificate.  0 or -1. */
static int make_certs(void)
{
    static const char *const steps[] = {
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > srv.ext",
        "printf 'extendedKeyUsage=clientAuth\\n' > cli.ext",
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        " -keyout ca.key -out ca.crt -days 2 -subj /CN=distlock-test-ca",
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        " -keyout ca2.key -out ca2.crt -days 2 -subj /CN=distlock-other-ca",
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        " -keyout srv.key -out srv.csr -subj /CN=localhost",
        "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key"
        " -CAcreateserial -days 2 -extfile srv.ext -out srv.crt",
        "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key"
        " -CAcreateserial -days -1 -extfile srv.ext -out expired.crt",
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        " -keyout cli.key -out cli.csr -subj /CN=distlock-test-client",
        "openssl x509 -req -in cli.csr -CA ca.crt -CAkey ca.key"
        " -CAcreateserial -days 2 -extfile cli.ext -out cli.crt",
        "openssl pkey -in cli.key -aes256 -passout pass:" KEY_PASS
        " -out cli-enc.key",
    };
    char cmd[600];
    size_t i;

    for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd '%s' && { %s; } >/dev/null 2>&1", dir,
                 steps[i]);
        if (system(cmd) != 0) {
            fprintf(stderr, "test_tls: failed: %s\n", steps[i]);
            return -1;
        }
    }
    return 0;
}

/* Server options o with a TLS listener on t: the certificate cert, the
 * server key and the test CA; auth: client certificates asked for.  t is
 * o's until the server started. */
static void tls_opts(tu_redis_opts *o, tu_tls_conf *t, const char *cert,
                     int auth)
{
    t->cert = file(0, cert);
    t->key = file(1, "srv.key");
    t->ca = file(2, "ca.crt");
    t->auth_clients = auth;
    memset(o, 0, sizeof *o);
    o->tls = t;
}

static int start_tls(tu_redis_t *r, const char *cert, int auth)
{
    tu_tls_conf t;
    tu_redis_opts o;

    tls_opts(&o, &t, cert, auth);
    return tu_redis_start_opts(r, &o);
}

static int group_setup(void **state)
{
    const char *tmp = getenv("TMPDIR");

    (void)state;
    snprintf(dir, sizeof dir, "%s/distlock-tls-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || make_certs() != 0)
        return -1;
    if (start_tls(&srv, "srv.crt", 0) != 0 ||
        start_tls(&srv_mtls, "srv.crt", 1) != 0 ||
        start_tls(&srv_expired, "expired.crt", 0) != 0)
        return -1;
    return dist_set_timeout_ms(TIMEOUT_MS) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    char cmd[300];

    (void)state;
    dist_shutdown();
    tu_redis_stop(&srv);
    tu_redis_stop(&srv_mtls);
    tu_redis_stop(&srv_expired);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* rediss://host:port of r's TLS port, then the query q (may be ""). */
static void tls_url(char *buf, size_t len, const char *host,
                    const tu_redis_t *r, const char *q)
{
    snprintf(buf, len, "rediss://%s:%d%s", host, r->tls_port, q);
}

/* The library on r's TLS port, trusting the test CA. */
static void use_tls(const tu_redis_t *r)
{
    char url[600];
    char q[400];

    snprintf(q, sizeof q, "?tls_ca=%s", file(3, "ca.crt"));
    tls_url(url, sizeof url, "127.0.0.1", r, q);
    assert_int_equal(dist_set_url(url), 0);
}

static long long exists(const char *key)
{
    return tu_cmd_int(&srv, "EXISTS", key, NULL);
}

/* The library on r's TLS port (use_tls), then a mutex of the test's own
 * (fixture.h) with the attributes attr. */
#define tls_mutex(r, tag, attr) (use_tls(r), fx_mutex(tag, attr))

/* EVAL and EVALSHA calls the server ran so far (testhelp.h). */
#define script_calls() script_calls_on(&srv)

/* The whole of a small file, malloc'd; NULL when it cannot be read. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 16384);

    if (f && text)
        (void)!fread(text, 1, 16383, f);
    if (f)
        fclose(f);
    if (!f) {
        free(text);
        return NULL;
    }
    return text;
}

/* ---- locks over TLS ------------------------------------------------------ */

/* m locks (its key is there) and unlocks (the key is gone). */
static void lock_shows(dist_mutex_t *m, const char *name)
{
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(exists(name), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(exists(name), 0);
}

static void test_mutex(void **state)
{
    dist_mutex_t *m = tls_mutex(&srv, "m", NULL);
    uint64_t token = 0;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(exists(fx_name(m)), 1);
    assert_int_equal(dist_mutex_token(m, &token), 0);
    assert_true(token > 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(exists(fx_name(m)), 0);
}

/* The options from the environment, and a host name checked against the
 * certificate's DNS name. */
static void test_env_and_host_name(void **state)
{
    char url[400];
    dist_mutex_t *m;

    (void)state;
    assert_int_equal(setenv("DISTLOCK_TLS_CA", file(0, "ca.crt"), 1), 0);
    tls_url(url, sizeof url, "localhost", &srv, "");
    assert_int_equal(dist_set_url(url), 0);
    unsetenv("DISTLOCK_TLS_CA");
    m = fx_mutex("m", NULL);
    lock_shows(m, fx_name(m));
}

/* A waiter sleeps on pub/sub over TLS, is woken by the release, and
 * does not poll meanwhile (as test_mutex's test_waiting_does_not_poll). */
static void test_pubsub_wakeup(void **state)
{
    dist_mutex_t *m = tls_mutex(&srv, "m", NULL),
                 *other = fx_mutex_on(fx_name(m), NULL);
    struct fx_locker la;
    long long before, after;
    double t0;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    before = script_calls();
    assert_true(before >= 0);
    t0 = tu_now();
    fx_locker_start(&la, other, 0);
    tu_sleep_ms(2000);
    assert_int_equal(atomic_load(&la.done), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    fx_locker_join(&la);
    after = script_calls();
    assert_int_equal(la.rc, 0);
    assert_dbl_range(la.t - t0, 1.9, 2.0 + slack(1.0));
    if (after - before > 12)
        fail_msg("waiting 2 s over TLS cost %lld script calls",
                 after - before);
    assert_int_equal(exists(fx_name(m)), 0);
}

/* The lease is renewed over TLS while held. */
static void test_renewal(void **state)
{
    dist_mutex_t *m = tls_mutex(&srv, "m", NULL);
    long long pttl, min_pttl = 1LL << 40;
    double t0;

    (void)state;
    assert_int_equal(dist_set_watchdog_ms(1000), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    t0 = tu_now();
    while (tu_now() - t0 < 3.0) {
        pttl = tu_cmd_int(&srv, "PTTL", fx_name(m), NULL);
        if (pttl < min_pttl)
            min_pttl = pttl;
        tu_sleep_ms(100);
    }
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(dist_set_watchdog_ms(30000), 0);
    if (min_pttl <= 0 || min_pttl > 1000)
        fail_msg("the lock's PTTL went to %lld while held", min_pttl);
}

/* A forked child waits for the parent's lock over its own TLS links and
 * gets it on release; the parent's links, inherited by the child and
 * dropped there, go on working in the parent. */
static void test_handoff_between_processes(void **state)
{
    dist_mutex_t *m = tls_mutex(&srv, "m", NULL);
    pid_t pid;
    int st, i;

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct timespec until = realtime_in(20);
        int rc = dist_mutex_timedlock(m, &until);
        if (rc == 0)
            rc = dist_mutex_unlock(m);
        _exit(rc == 0 ? 0 : 10 + rc);
    }
    tu_sleep_ms(1000);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!child_exit_ok(st, 0))
        fail_msg("the child's lock over TLS: status %d", st);
    for (i = 0; i < 3; i++) {
        assert_int_equal(dist_mutex_lock(m), 0);
        assert_int_equal(dist_mutex_unlock(m), 0);
    }
    assert_int_equal(exists(fx_name(m)), 0);
}

/* A server restart under idle TLS links: the next call finds them closed
 * and connects again, with a new handshake, on the same port. */
static void test_reconnect(void **state)
{
    dist_mutex_t *m = tls_mutex(&srv, "m", NULL);

    (void)state;
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_redis_restart(&srv), 0);
    lock_shows(m, fx_name(m));
}

static void test_fair(void **state)
{
    dist_mutexattr_t a;
    dist_mutex_t *m, *other;
    struct fx_locker la;

    (void)state;
    assert_int_equal(dist_mutexattr_init(&a), 0);
    assert_int_equal(dist_mutexattr_setfair(&a, 1), 0);
    m = tls_mutex(&srv, "f", &a);
    other = fx_mutex_on(fx_name(m), &a);
    dist_mutexattr_destroy(&a);
    assert_int_equal(dist_mutex_lock(m), 0);
    fx_locker_start(&la, other, 20);
    tu_sleep_ms(500);
    assert_int_equal(atomic_load(&la.done), 0);
    assert_int_equal(dist_mutex_unlock(m), 0);
    fx_locker_join(&la);
    assert_int_equal(la.rc, 0);
    assert_int_equal(exists(fx_name(m)), 0);
}

/* Takes the read side of rw and gives it back, on a thread of its own
 * (fx_thread): the first error, or 0. */
static int read_once(void *rw)
{
    int rc = dist_rwlock_rdlock(rw);

    return rc == 0 ? dist_rwlock_unlock(rw) : rc;
}

static void test_rwlock(void **state)
{
    dist_rwlock_t *w, *rw;
    struct fx_thread rd;

    (void)state;
    use_tls(&srv);
    w = fx_rwlock("rw", NULL);
    rw = fx_rwlock_on(fx_name(w), NULL);
    assert_int_equal(dist_rwlock_wrlock(w), 0);
    fx_thread_start(&rd, read_once, rw);
    tu_sleep_ms(500);
    assert_int_equal(atomic_load(&rd.rc), -1); /* still waiting */
    assert_int_equal(dist_rwlock_unlock(w), 0);
    assert_int_equal(fx_thread_join(&rd), 0);
    assert_int_equal(dist_rwlock_rdlock(w), 0);
    assert_int_equal(dist_rwlock_unlock(w), 0);
    assert_int_equal(exists(fx_name(w)), 0);
}

/* ---- a lost reply inside the TLS stream ------------------------------------ */

/* What another thread's trylock on o (an object of its own: destroying
 * it while this thread holds the name is refused) gives now (testhelp.h). */
#define other_trylock(o) trylock_in_thread(o)

/* A lock of m through p with the fault drop set up (p's fault number
 * fired when it has come): it returns 0 and holds the name exactly once
 * (o, another object on it, finds it busy), and its unlock frees it. */
static void lock_past_fault(tu_proxy_t *p, void (*drop)(tu_proxy_t *),
                            dist_mutex_t *m, dist_mutex_t *o,
                            unsigned long fired)
{
    drop(p);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired);
    assert_held_once(&srv, fx_name(m), NULL);
    assert_int_equal(other_trylock(o), EBUSY);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(exists(fx_name(m)), 0);
}

/* The fault proxy between the library and the TLS port, forwarding bytes
 * (TLS records it cannot read): an acquire whose reply is cut off, a
 * release whose reply is cut off, and an acquire that never reaches the
 * server.  Each time the outcome is settled on a new TLS connection: the
 * lock ends held exactly once (another thread gets EBUSY: no double hold)
 * and free after the unlock (no stuck hold). */
static void test_lost_reply_tls(void **state)
{
    char url[600];
    const char *name;
    unsigned long fired;
    dist_mutex_t *m, *o;
    tu_proxy_t *p;

    (void)state;
    p = tu_proxy_start_tcp(&srv, srv.tls_port);
    assert_non_null(p);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca=%s",
             tu_proxy_port(p), file(0, "ca.crt"));
    assert_int_equal(dist_set_url(url), 0);
    m = fx_mutex("lost", NULL);
    o = fx_mutex_on(fx_name(m), NULL);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0); /* connected, idle */
    assert_int_equal(dist_mutex_unlock(m), 0);
    fired = tu_proxy_faults_fired(p);

    /* acquire ran */
    lock_past_fault(p, tu_proxy_drop_next_reply, m, o, fired + 1);

    assert_int_equal(dist_mutex_lock(m), 0);
    tu_proxy_drop_next_reply(p); /* release ran */
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_proxy_faults_fired(p), fired + 2);
    assert_int_equal(exists(name), 0);
    assert_int_equal(dist_mutex_unlock(m), EPERM);
    assert_int_equal(other_trylock(o), 0);

    /* acquire never ran */
    lock_past_fault(p, tu_proxy_drop_next_request, m, o, fired + 3);
    use_tls(&srv); /* off the proxy before it goes */
    tu_proxy_stop(p);
}

/* ---- mutual TLS ------------------------------------------------------------ */

/* The URL of the mutual-TLS server's TLS port, trusting the test CA, with
 * the client certificate cert and key (files of dir), then the rest of
 * the query, more (may be ""). */
static void mtls_url(char *url, size_t len, const char *cert, const char *key,
                     const char *more)
{
    char q[1200];

    snprintf(q, sizeof q, "?tls_ca=%s&tls_cert=%s&tls_key=%s%s",
             file(0, "ca.crt"), file(1, cert), file(2, key), more);
    tls_url(url, len, "127.0.0.1", &srv_mtls, q);
}

static void test_mtls_with_cert(void **state)
{
    char url[1300];
    dist_mutex_t *m;

    (void)state;
    mtls_url(url, sizeof url, "cli.crt", "cli.key", "");
    assert_int_equal(dist_set_url(url), 0);
    m = fx_mutex("m", NULL);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_cmd_int(&srv_mtls, "EXISTS", fx_name(m), NULL), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
}

/* ---- refusals ---------------------------------------------------------------- */

/* A lock on url fails with EIO, a reason naming the server (host:port)
 * and containing what, within limit seconds. */
static void expect_refused_in(const char *url, int port, const char *what,
                              double limit)
{
    char name[200], addr[64];
    struct fx_call lk;
    dist_mutex_t m;

    NAME(name, "m");
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    assert_int_equal(dist_set_url(url), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    FX_CALL(&lk, dist_mutex_lock(&m));
    assert_int_equal(dist_mutex_destroy(&m), 0);
    if (lk.rc != EIO || !strstr(lk.err, what) || !strstr(lk.err, addr))
        fail_msg("lock on %s: %d '%s', expected EIO naming %s and '%s'", url,
                 lk.rc, lk.err, addr, what);
    assert_dbl_range(lk.el, 0.0, limit);
}

/* The same for a failure no retry can mend: the lock call says so at once
 * rather than trying again while its patience lasts (a timeout's worth,
 * TIMEOUT_MS, which would overrun this bound). */
static void expect_refused(const char *url, int port, const char *what)
{
    expect_refused_in(url, port, what, TIMEOUT_MS / 2000.0 + slack(1.0));
}

/* A lock on the mutual-TLS server with the encrypted client key and pass
 * (a URL query part, "" for none): rc, and the message in err. */
static int lock_with_key(const char *pass_q, char *err, size_t errlen)
{
    char name[200], url[1500];
    dist_mutex_t m;
    int rc;

    NAME(name, "m");
    mtls_url(url, sizeof url, "cli.crt", "cli-enc.key", pass_q);
    assert_int_equal(dist_set_url(url), 0);
    assert_int_equal(dist_mutex_init(&m, name, NULL), 0);
    rc = dist_mutex_lock(&m);
    snprintf(err, errlen, "%s", rc ? dist_last_error() : "");
    if (rc == 0) {
        assert_int_equal(tu_cmd_int(&srv_mtls, "EXISTS", name, NULL), 1);
        assert_int_equal(dist_mutex_unlock(&m), 0);
    }
    assert_int_equal(dist_mutex_destroy(&m), 0);
    return rc;
}

/* An encrypted client key: its passphrase from DISTLOCK_TLS_KEY_PASS or
 * tls_key_pass= opens it; without one, or with a wrong one, the refusal
 * says why, at once and never prompting, and no message shows a
 * passphrase (a misspelt option's value included). */
static void test_mtls_encrypted_key(void **state)
{
    char err[400], url[200];
    double t0;
    int rc;

    (void)state;
    assert_int_equal(setenv("DISTLOCK_TLS_KEY_PASS", KEY_PASS, 1), 0);
    rc = lock_with_key("", err, sizeof err);
    unsetenv("DISTLOCK_TLS_KEY_PASS");
    if (rc != 0)
        fail_msg("with DISTLOCK_TLS_KEY_PASS: %d %s", rc, err);
    if ((rc = lock_with_key("&tls_key_pass=" KEY_PASS, err, sizeof err)))
        fail_msg("with tls_key_pass=: %d %s", rc, err);

    t0 = tu_now();
    rc = lock_with_key("", err, sizeof err);
    if (rc != EIO || !strstr(err, "passphrase") ||
        !strstr(err, "cli-enc.key"))
        fail_msg("without a passphrase: %d %s", rc, err);
    assert_dbl_range(tu_now() - t0, 0.0, TIMEOUT_MS / 2000.0 + slack(1.0));
    assert_int_equal(
        lock_with_key("&tls_key_pass=" WRONG_PASS, err, sizeof err), EIO);
    assert_non_null(strstr(err, "wrong passphrase"));
    assert_null(strstr(err, WRONG_PASS));
    assert_null(strstr(err, KEY_PASS));

    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_key_pas=%s",
             srv_mtls.tls_port, WRONG_PASS);
    assert_int_equal(dist_set_url(url), EINVAL);
    assert_non_null(strstr(dist_last_error(), "tls_key_pas="));
    assert_null(strstr(dist_last_error(), WRONG_PASS));
}

/* A connection that cannot work: to srv's TLS port (its plain one with
 * plain_port), over TLS or not, trusting the CA file ca (NULL: no query)
 * with the rest of the query extra; the refusal says what. */
struct refusal {
    const tu_redis_t *srv;
    int plain_port, tls;
    const char *ca, *extra, *what;
};

static void test_refused(void **state)
{
    const struct refusal *c = *state;
    int port = c->plain_port ? c->srv->port : c->srv->tls_port;
    char url[600];

    snprintf(url, sizeof url, "%s://127.0.0.1:%d%s%s%s",
             c->tls ? "rediss" : "redis", port, c->ca ? "?tls_ca=" : "",
             c->ca ? file(0, c->ca) : "", c->extra);
    expect_refused(url, port, c->what);
}

static struct refusal mtls_without_cert = {
    &srv_mtls, 0, 1, "ca.crt", "", "the server asked for a client certificate"
};
static struct refusal wrong_ca = {
    &srv, 0, 1, "ca2.crt", "", "certificate verify failed"
};
static struct refusal expired = {
    &srv_expired, 0,  1,
    "ca.crt",     "", "certificate verify failed: certificate has expired"
};
static struct refusal host_name_mismatch = {
    &srv,
    0,
    1,
    "ca.crt",
    "&tls_server_name=elsewhere.example",
    "host name mismatch"
};
/* Plain text to the TLS port: the server resets the connection, and a
 * TLS handshake on a second one confirms why; said at once, not tried
 * again while the lock call's patience lasts. */
static struct refusal plain_to_tls_port = {
    &srv, 0, 0, NULL, "", "plain text sent to a TLS port"
};
/* TLS to the plain port: Redis does not answer a ClientHello (a NUL byte
 * comes before its first newline, and Redis's inline parser drops such a
 * line).  A handshake met with silence asks the port for a plain PING on
 * a second connection; it answers, so the call says at once that this is
 * a plain port, instead of waiting out the connect timeout (twice, with
 * the lock call's one more try, before this was asked). */
static struct refusal tls_to_plain_port = {
    &srv, 1, 1, "ca.crt", "", "TLS sent to a plain port"
};

/* A lock on url (a server's port) is refused at once, naming path, the
 * what that is not there, with the system's reason. */
static void expect_missing(const char *url, int port, const char *what,
                           const char *path)
{
    char want[400];

    snprintf(want, sizeof want,
             "cannot read the %s %s: No such file or directory", what, path);
    expect_refused(url, port, want);
}

/* Issue 27: a CA file that is not there was "OpenSSL error 2147483650"
 * (OpenSSL 3's code for ENOENT); the file is named with the system's
 * reason, and so is a missing client certificate or key. */
static void test_missing_files(void **state)
{
    char url[1500], q[400];

    (void)state;
    snprintf(q, sizeof q, "?tls_ca=%s", file(0, "no-such-ca.crt"));
    tls_url(url, sizeof url, "127.0.0.1", &srv, q);
    expect_missing(url, srv.tls_port, "CA certificates",
                   file(0, "no-such-ca.crt"));
    mtls_url(url, sizeof url, "no-such-cli.crt", "cli.key", "");
    expect_missing(url, srv_mtls.tls_port, "client certificate",
                   file(1, "no-such-cli.crt"));
    mtls_url(url, sizeof url, "cli.crt", "no-such.key", "");
    expect_missing(url, srv_mtls.tls_port, "client key",
                   file(2, "no-such.key"));
}

/* The insecure switch connects to a server the CA does not vouch for, and
 * says so on stderr once per process, however many connections. */
static void test_insecure_warns_once(void **state)
{
    char name[200], url[600], url2[700], q[400], log[320], *text;
    pid_t pid;
    int st, n = 0;

    (void)state;
    NAME(name, "m");
    snprintf(q, sizeof q, "?tls_ca=%s&tls_insecure=1", file(0, "ca2.crt"));
    tls_url(url, sizeof url, "127.0.0.1", &srv, q);
    snprintf(url2, sizeof url2, "%s&tls_server_name=localhost", url);
    snprintf(log, sizeof log, "%s", file(1, "insecure.log"));
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dist_mutex_t m;
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600), i, rc = 0;
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(20);
        for (i = 0; i < 2 && rc == 0; i++) {
            /* other options the second time: a new TLS context */
            rc = dist_set_url(i ? url2 : url) ||
                 dist_mutex_init(&m, name, NULL) || dist_mutex_lock(&m) ||
                 dist_mutex_unlock(&m) || dist_mutex_destroy(&m);
        }
        _exit(rc == 0 ? 0 : 21);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!child_exit_ok(st, 0))
        fail_msg("locking with tls_insecure=1: status %d", st);
    text = read_file(log);
    assert_non_null(text);
    for (const char *p = text; (p = strstr(p, "without certificate checks"));
         p++)
        n++;
    free(text);
    assert_int_equal(n, 1);
}

/* Whether yes(arg) comes true within secs (asked every 100 ms). */
static int within(double secs, int (*yes)(void *), void *arg)
{
    double end = tu_now() + secs;

    do {
        if (yes(arg))
            return 1;
        tu_sleep_ms(100);
    } while (tu_now() < end);
    return 0;
}

/* A sentinel and the port of the master it should name. */
struct named_master {
    tu_redis_t *sent;
    int port;
};

static int names_master(void *arg)
{
    const struct named_master *q = arg;
    redisReply *x =
        tu_cmd(q->sent, "SENTINEL", "get-master-addr-by-name", "tlsm", NULL);
    int ok = x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
             atoi(x->element[1]->str) == q->port;

    if (x)
        freeReplyObject(x);
    return ok;
}

/* Whether the sentinel sent names the master at port within secs. */
static int sentinel_names(tu_redis_t *sent, int port, double secs)
{
    struct named_master q = { sent, port };

    return within(secs, names_master, &q);
}

/* Whether the server r says it is a replica (a command failing because
 * its connection was killed counts as not yet). */
static int is_replica(void *r)
{
    char *info = tu_cmd_str(r, "INFO", "replication", NULL);
    int yes = info && strstr(info, "role:slave") != NULL;

    free(info);
    return yes;
}

/* Sentinel over TLS: the sentinel, the master and its replica all on TLS
 * ports (replication and the sentinel's own links too); a lock taken, the
 * master failed over to the replica under it, and the lock given back on
 * the new master. */
static void test_sentinel(void **state)
{
    static const char *const sent_args[] = { "--sentinel",
                                             "--tls-replication", "yes",
                                             NULL };
    tu_tls_conf t;
    tu_redis_t master, replica, sent;
    const char *rargs[6] = { "--tls-replication", "yes", "--replicaof",
                             "127.0.0.1",         NULL,  NULL };
    char port[16], conf[400], url[700];
    const char *name;
    tu_redis_opts o;
    dist_mutex_t *m;

    (void)state;
    tls_opts(&o, &t, "srv.crt", 0);
    assert_int_equal(tu_redis_start_opts(&master, &o), 0);
    snprintf(port, sizeof port, "%d", master.tls_port);
    rargs[4] = port;
    o.args = rargs;
    assert_int_equal(tu_redis_start_opts(&replica, &o), 0);
    snprintf(conf, sizeof conf,
             "sentinel resolve-hostnames no\n"
             "sentinel monitor tlsm 127.0.0.1 %d 1\n"
             "sentinel down-after-milliseconds tlsm 1000\n"
             "sentinel failover-timeout tlsm 5000\n",
             master.tls_port);
    o.args = sent_args;
    o.conf = conf;
    assert_int_equal(tu_redis_start_opts(&sent, &o), 0);
    /* the replica in sync and known to the sentinel before anything */
    assert_true(sentinel_names(&sent, master.tls_port, 10));
    for (int i = 0;
         i < 100 && tu_cmd_int(&master, "WAIT", "1", "100", NULL) < 1; i++)
        ;

    snprintf(url, sizeof url, "rediss-sentinel://127.0.0.1:%d/tlsm?tls_ca=%s",
             sent.tls_port, file(3, "ca.crt"));
    assert_int_equal(dist_set_url(url), 0);
    m = fx_mutex("m", NULL);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_cmd_int(&master, "EXISTS", name, NULL), 1);
    assert_int_equal(tu_cmd_int(&replica, "EXISTS", name, NULL), 1);

    redisReply *x = tu_cmd(&sent, "SENTINEL", "FAILOVER", "tlsm", NULL);
    assert_non_null(x);
    freeReplyObject(x);
    assert_true(sentinel_names(&sent, replica.tls_port, 20));
    /* the old master demoted, as the sentinel does right after: until
     * then it still takes writes, as it would without TLS */
    assert_true(within(20, is_replica, &master));
    /* the promotion ended with CLIENT KILL TYPE normal, the harness's
     * admin connection to the replica included: this one finds it gone,
     * and the harness opens another for the next command */
    x = tu_cmd(&replica, "PING", NULL);
    if (x)
        freeReplyObject(x);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_cmd_int(&replica, "EXISTS", name, NULL), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(tu_cmd_int(&replica, "EXISTS", name, NULL), 1);
    assert_int_equal(dist_mutex_unlock(m), 0);
    use_tls(&srv); /* off the sentinel's servers before they go */
    tu_redis_stop(&sent);
    tu_redis_stop(&replica);
    tu_redis_stop(&master);
}

/* Whether each of the 3 nodes n says cluster_state:ok and knows all of
 * them. */
static int cluster_ok(void *n)
{
    tu_redis_t *node = n;
    int i, ok;

    for (i = 0, ok = 1; i < 3 && ok; i++) {
        char *info = tu_cmd_str(&node[i], "CLUSTER", "INFO", NULL);
        ok = info && strstr(info, "cluster_state:ok") &&
             strstr(info, "cluster_known_nodes:3");
        free(info);
    }
    return ok;
}

/* Asserts that a reply (tu_cmd_str's copy, freed here) was OK. */
static void said_ok(char *reply)
{
    int ok = reply && strcmp(reply, "OK") == 0;

    free(reply);
    assert_true(ok);
}

/* Three masters with tls-cluster (the bus too on TLS), made by hand: a
 * third of the slots each, then MEET by their TLS ports. */
static void start_tls_cluster(tu_redis_t *n, char bus[][16])
{
    static const char *const ranges[3][2] = { { "0", "5460" },
                                              { "5461", "10922" },
                                              { "10923", "16383" } };
    tu_tls_conf t;
    const char *args[3][9];
    char port[16], epoch[8];
    tu_redis_opts o;
    int i;

    for (i = 0; i < 3; i++) {
        const char *a[9] = { "--cluster-enabled",
                             "yes",
                             "--cluster-port",
                             bus[i],
                             "--tls-cluster",
                             "yes",
                             "--tls-replication",
                             "yes",
                             NULL };
        snprintf(bus[i], 16, "%d", tu_free_port());
        memcpy(args[i], a, sizeof a);
        tls_opts(&o, &t, "srv.crt", 0);
        o.args = args[i];
        assert_int_equal(tu_redis_start_opts(&n[i], &o), 0);
        snprintf(epoch, sizeof epoch, "%d", i + 1);
        said_ok(
            tu_cmd_str(&n[i], "CLUSTER", "SET-CONFIG-EPOCH", epoch, NULL));
        said_ok(tu_cmd_str(&n[i], "CLUSTER", "ADDSLOTSRANGE", ranges[i][0],
                           ranges[i][1], NULL));
    }
    for (i = 1; i < 3; i++) {
        snprintf(port, sizeof port, "%d", n[i].tls_port);
        said_ok(tu_cmd_str(&n[0], "CLUSTER", "MEET", "127.0.0.1", port,
                           bus[i], NULL));
    }
    assert_true(within(30, cluster_ok, n));
}

/* Moves the empty slot from node `from` to node `to` as redis-cli's
 * resharding does (IMPORTING, MIGRATING, then NODE everywhere, the target
 * first so that it takes a new config epoch). */
static void move_slot(tu_redis_t *n, int from, int to, long long slot)
{
    char s[16], *id_from, *id_to;
    int i;

    snprintf(s, sizeof s, "%lld", slot);
    id_from = tu_cmd_str(&n[from], "CLUSTER", "MYID", NULL);
    id_to = tu_cmd_str(&n[to], "CLUSTER", "MYID", NULL);
    assert_non_null(id_from);
    assert_non_null(id_to);
    said_ok(tu_cmd_str(&n[to], "CLUSTER", "SETSLOT", s, "IMPORTING", id_from,
                       NULL));
    said_ok(tu_cmd_str(&n[from], "CLUSTER", "SETSLOT", s, "MIGRATING", id_to,
                       NULL));
    said_ok(tu_cmd_str(&n[to], "CLUSTER", "SETSLOT", s, "NODE", id_to, NULL));
    for (i = 0; i < 3; i++)
        if (i != to)
            said_ok(tu_cmd_str(&n[i], "CLUSTER", "SETSLOT", s, "NODE", id_to,
                               NULL));
    free(id_from);
    free(id_to);
}

/* The library's slot map is read at most every few seconds: a slot moved
 * right after a call is still mapped to its old node, whose MOVED answer
 * the next lock on it must follow, over TLS, to the new one. */
static void moved_followed(tu_redis_t *n, dist_mutex_t *fresh_map)
{
    char name[64];
    struct dist_stats before, after;
    long long slot = -1;
    dist_mutex_t *m;
    int k;

    for (k = 0; k < 1000 && (slot < 10923 || slot > 16383); k++) {
        snprintf(name, sizeof name, "test_tls:moved:%d:%ld", k,
                 (long)getpid());
        slot = tu_cmd_int(&n[0], "CLUSTER", "KEYSLOT", name, NULL);
    }
    assert_true(slot >= 10923 && slot <= 16383); /* node 2's */
    m = fx_mutex_on(name, NULL);
    /* a call now: a map due to be read again is read now, not after */
    assert_int_equal(dist_mutex_lock(fresh_map), 0);
    assert_int_equal(dist_mutex_unlock(fresh_map), 0);
    move_slot(n, 2, 0, slot);
    assert_int_equal(dist_stats_get(&before), 0);
    assert_int_equal(dist_mutex_lock(m), 0);
    assert_int_equal(dist_stats_get(&after), 0);
    assert_int_equal(tu_cmd_int(&n[0], "EXISTS", name, NULL), 1);
    if (after.redirects <= before.redirects)
        fail_msg("the lock reached node 0 without a MOVED followed "
                 "(redirects %llu -> %llu)",
                 (unsigned long long)before.redirects,
                 (unsigned long long)after.redirects);
    assert_int_equal(dist_mutex_unlock(m), 0);
    assert_int_equal(tu_cmd_int(&n[0], "EXISTS", name, NULL), 0);
}

/* Cluster over TLS: a lock on each of 3 masters from one seed (so two of
 * them are found by the slot map, over TLS), held at once, a waiter woken
 * by a release message, and a slot moved under the library's map: its
 * MOVED is followed over TLS (moved_followed). */
static void test_cluster(void **state)
{
    tu_redis_t n[3];
    char bus[3][16], names[3][64], url[700], cand[64];
    dist_mutex_t *m[3], *other;
    struct fx_locker la;
    int i, k, found = 0;

    (void)state;
    memset(n, 0, sizeof n);
    start_tls_cluster(n, bus);
    memset(names, 0, sizeof names);
    for (k = 0; found < 3 && k < 1000; k++) {
        long long slot;
        snprintf(cand, sizeof cand, "test_tls:cluster:%d:%ld", k,
                 (long)getpid());
        slot = tu_cmd_int(&n[0], "CLUSTER", "KEYSLOT", cand, NULL);
        i = slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2;
        if (!names[i][0]) {
            snprintf(names[i], sizeof names[i], "%s", cand);
            found++;
        }
    }
    assert_int_equal(found, 3);
    snprintf(url, sizeof url, "rediss-cluster://127.0.0.1:%d?tls_ca=%s",
             n[0].tls_port, file(3, "ca.crt"));
    assert_int_equal(dist_set_url(url), 0);
    for (i = 0; i < 3; i++) {
        m[i] = fx_mutex_on(names[i], NULL);
        assert_int_equal(dist_mutex_lock(m[i]), 0);
    }
    for (i = 0; i < 3; i++)
        assert_int_equal(tu_cmd_int(&n[i], "EXISTS", names[i], NULL), 1);
    other = fx_mutex_on(names[2], NULL);
    fx_locker_start(&la, other, 20);
    tu_sleep_ms(500);
    assert_int_equal(atomic_load(&la.done), 0);
    for (i = 0; i < 3; i++)
        assert_int_equal(dist_mutex_unlock(m[i]), 0);
    fx_locker_join(&la);
    assert_int_equal(la.rc, 0);
    for (i = 0; i < 3; i++)
        assert_int_equal(tu_cmd_int(&n[i], "EXISTS", names[i], NULL), 0);
    moved_followed(n, other);
    use_tls(&srv); /* off the cluster before it goes */
    for (i = 0; i < 3; i++)
        tu_redis_stop(&n[i]);
}

/* Runs the shell command cmd, whose output goes to the file out: it must
 * exit with code and say want, and never say never (when not NULL);
 * what names the run when it fails. */
static void expect_tool(const char *cmd, const char *out, int code,
                        const char *want, const char *never, const char *what)
{
    int st = system(cmd);
    char *text = read_file(out);

    if (!WIFEXITED(st) || WEXITSTATUS(st) != code || !text ||
        !strstr(text, want) || (never && strstr(text, never)))
        fail_msg("%s: status %d, output '%s'", what, st, text ? text : "");
    free(text);
}

/* A file at path holding line and a newline. */
static void write_line(const char *path, const char *line)
{
    FILE *f;

    assert_non_null(f = fopen(path, "w"));
    fprintf(f, "%s\n", line);
    assert_int_equal(fclose(f), 0);
}

/* The distlock tool over TLS: the URL and the options from the
 * environment, as the library takes them; a refusal in words on stderr. */
static void test_tool(void **state)
{
    const char *top = getenv("top_builddir");
    char name[200], url[100], cmd[2000], out[320];

    (void)state;
    NAME(name, "tool");
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv.tls_port);
    snprintf(out, sizeof out, "%s", file(3, "tool.out"));
    snprintf(
        cmd, sizeof cmd,
        "DISTLOCK_URL='%s' DISTLOCK_TLS_CA='%s' "
        "'%s/tools/distlock' lock '%s' -- sh -c 'echo inside' > '%s' 2>&1",
        url, file(0, "ca.crt"), top && *top ? top : ".", name, out);
    expect_tool(cmd, out, 0, "inside", NULL, "distlock lock over TLS");
    snprintf(cmd, sizeof cmd,
             "DISTLOCK_URL='%s' DISTLOCK_TLS_CA='%s' "
             "'%s/tools/distlock' status '%s' > '%s' 2>&1",
             url, file(0, "ca2.crt"), top && *top ? top : ".", name, out);
    expect_tool(cmd, out, 3, "certificate verify failed", NULL,
                "distlock status with the wrong CA");
}

/* The tool's own flags: the URL from a file (a password stays out of
 * argv), --tls-ca in place of DISTLOCK_TLS_CA, which it overrides, and
 * not passed on to the command that `lock` runs. */
static void test_tool_flags(void **state)
{
    const char *top = getenv("top_builddir");
    char name[200], cmd[2000], out[320], urlf[320], url[100];

    (void)state;
    top = top && *top ? top : ".";
    NAME(name, "toolflags");
    snprintf(urlf, sizeof urlf, "%s", file(2, "url.txt"));
    snprintf(out, sizeof out, "%s", file(3, "tool.out"));
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv.tls_port);
    write_line(urlf, url);
    snprintf(cmd, sizeof cmd,
             "env -u DISTLOCK_URL -u DISTLOCK_TLS_CA "
             "'%s/tools/distlock' --url-file '%s' --tls-ca '%s' lock '%s' -- "
             "sh -c 'echo \"inside ca=${DISTLOCK_TLS_CA-none}\"' > '%s' 2>&1",
             top, urlf, file(0, "ca.crt"), name, out);
    expect_tool(cmd, out, 0, "inside ca=none", NULL,
                "distlock --url-file --tls-ca lock");
    snprintf(cmd, sizeof cmd,
             "DISTLOCK_TLS_CA='%s' '%s/tools/distlock' "
             "--url-file '%s' status --tls-ca '%s' '%s' > '%s' 2>&1",
             file(0, "ca.crt"), top, urlf, file(1, "ca2.crt"), name, out);
    expect_tool(cmd, out, 3, "certificate verify failed", NULL,
                "distlock --tls-ca with the wrong CA");
}

/* The tool with an encrypted client key: the passphrase from
 * --tls-key-pass-file opens it, is not passed on to the command `lock`
 * runs, and a wrong one is refused without being shown. */
static void test_tool_key_pass_file(void **state)
{
    const char *top = getenv("top_builddir");
    char name[200], cmd[2600], out[320], passf[320], wrongf[320], tls[1200];

    (void)state;
    top = top && *top ? top : ".";
    NAME(name, "toolpass");
    snprintf(passf, sizeof passf, "%s", file(0, "pass.txt"));
    snprintf(wrongf, sizeof wrongf, "%s", file(1, "wrong.txt"));
    snprintf(out, sizeof out, "%s", file(2, "tool.out"));
    write_line(passf, KEY_PASS);
    write_line(wrongf, WRONG_PASS);
    snprintf(tls, sizeof tls,
             "--url rediss://127.0.0.1:%d --tls-ca '%s' "
             "--tls-cert '%s' --tls-key '%s'",
             srv_mtls.tls_port, file(0, "ca.crt"), file(1, "cli.crt"),
             file(2, "cli-enc.key"));
    snprintf(cmd, sizeof cmd,
             "env -u DISTLOCK_TLS_KEY_PASS '%s/tools/distlock' "
             "%s --tls-key-pass-file '%s' lock '%s' -- sh -c 'echo \"inside "
             "pass=${DISTLOCK_TLS_KEY_PASS-none}\"' > '%s' 2>&1",
             top, tls, passf, name, out);
    expect_tool(cmd, out, 0, "inside pass=none", NULL,
                "distlock --tls-key-pass-file lock");
    snprintf(cmd, sizeof cmd,
             "'%s/tools/distlock' %s --tls-key-pass-file "
             "'%s' status '%s' > '%s' 2>&1",
             top, tls, wrongf, name, out);
    expect_tool(cmd, out, 3, "wrong passphrase", WRONG_PASS,
                "distlock with a wrong passphrase");
}

/* ---- the LD_PRELOAD shim --------------------------------------------------- */

/* Whether this build has the shim and distlock-run (configure
 * --disable-preload leaves them out, as the ThreadSanitizer build does). */
static int shim_built(void)
{
    const char *top = getenv("top_builddir");
    char path[512];

    snprintf(path, sizeof path, "%s/tools/distlock-run",
             top && *top ? top : ".");
    return access(path, X_OK) == 0;
}

/* preload_target (a program that knows nothing of distlock) under
 * distlock-run with a configuration whose URL is TLS: "try global" on
 * its g_global_lock; what it printed, malloc'd, and the exit status. */
static char *shim_try(const char *name, int *st)
{
    const char *top = getenv("top_builddir");
    char cfg[320], out[320], cmd[3000];

    top = top && *top ? top : ".";
    snprintf(cfg, sizeof cfg, "%s", file(0, "shim.ini"));
    snprintf(out, sizeof out, "%s", file(1, "shim.out"));
    snprintf(cmd, sizeof cmd,
             "printf '[redis]\\nurl = rediss://127.0.0.1:%d?tls_ca=%s\\n"
             "[mutex %s]\\nmatch = symbol g_global_lock\\n' > '%s' && "
             /* a sanitizer build's shim needs its runtime loaded first */
             "a=$(ldd '%s/.libs/libdistlock_preload.so' | awk "
             "'/libasan/{print $3}'); "
             "if [ -n \"$a\" ]; then export LD_PRELOAD=$a "
             "ASAN_OPTIONS=detect_leaks=0; fi; "
             "DISTLOCK_PRELOAD_LIB='%s/.libs/libdistlock_preload.so' "
             "'%s/tools/distlock-run' --config '%s' -- "
             "'%s/tests/preload_target' try global > '%s' 2>&1",
             srv.tls_port, file(2, "ca.crt"), name, cfg, top, top, top, cfg,
             top, out);
    *st = system(cmd);
    return read_file(out);
}

/* The program's try under the shim (shim_try) on name ran and printed
 * want; state says how name is held, for the message. */
static void shim_says(const char *name, const char *want, const char *state)
{
    int st;
    char *text = shim_try(name, &st);

    if (st != 0 || !text || !strstr(text, want))
        fail_msg("trylock under the shim of a %s mutex: status %d, '%s'",
                 state, st, text ? text : "");
    free(text);
}

/* The shim over TLS: a mutex the test holds is busy for the program, and
 * free once let go, so the program's trylock went to Redis over TLS. */
static void test_preload_shim(void **state)
{
    const char *name;
    dist_mutex_t *m;

    (void)state;
    if (!shim_built()) {
        print_message("  skipped: built without the LD_PRELOAD shim "
                      "(--disable-preload)\n");
        skip();
    }
    m = tls_mutex(&srv, "shim", NULL);
    name = fx_name(m);
    assert_int_equal(dist_mutex_lock(m), 0);
    shim_says(name, "rc 16", "held");
    assert_int_equal(dist_mutex_unlock(m), 0);
    shim_says(name, "rc 0", "free");
    assert_int_equal(exists(name), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define REFUSED(c) { "test_" #c, test_refused, NULL, NULL, &c }
        FX_OWN_TEST(test_mutex),
        FX_OWN_TEST(test_env_and_host_name),
        FX_OWN_TEST(test_pubsub_wakeup),
        FX_OWN_TEST(test_renewal),
        FX_OWN_TEST(test_handoff_between_processes),
        FX_OWN_TEST(test_reconnect),
        FX_OWN_TEST(test_fair),
        FX_OWN_TEST(test_rwlock),
        FX_OWN_TEST(test_lost_reply_tls),
        FX_OWN_TEST(test_mtls_with_cert),
        FX_OWN_TEST(test_mtls_encrypted_key),
        FX_OWN_TEST(test_tool_key_pass_file),
        REFUSED(mtls_without_cert),
        REFUSED(wrong_ca),
        FX_OWN_TEST(test_missing_files),
        REFUSED(expired),
        REFUSED(host_name_mismatch),
        REFUSED(plain_to_tls_port),
        REFUSED(tls_to_plain_port),
        FX_OWN_TEST(test_insecure_warns_once),
        FX_OWN_TEST(test_tool),
        FX_OWN_TEST(test_tool_flags),
        FX_OWN_TEST(test_preload_shim),
        FX_OWN_TEST(test_sentinel),
        FX_OWN_TEST(test_cluster),
    };
    const char *filter = getenv("TEST_TLS_FILTER");

    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
