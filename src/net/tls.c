/* tls.c: TLS sessions for links (OpenSSL), and the one SSL_CTX that the
 * current options call for.  Failures are put in words that name the cause:
 * which check failed, or that one side was not speaking TLS. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls.h"

struct dist__tls {
    SSL *ssl;
    int has_cert;   /* a client certificate was configured */
    int cert_asked; /* the server asked for one we did not have */
    char err[200];
};

/* The SSL_CTX of the options last used, kept while they stay the same:
 * building one reads the CA store.  Sessions hold their own reference,
 * so replacing it under them is safe. */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *ctx_cur;
static struct dist__tls_opts ctx_opts;
static int ctx_index = -1; /* SSL ex_data slot of the dist__tls */
static atomic_int warned_insecure;

DIST__FORK_HOOK(tls_init, tls_fork, DIST__RANK_TLS)

static void tls_fork(int phase)
{
    if (phase == 0)
        pthread_mutex_lock(&ctx_mu);
    else
        pthread_mutex_unlock(&ctx_mu); /* the parent's, or the child's copy */
}

/* The first error in OpenSSL's queue as text (the queue is cleared).  A
 * system error (OpenSSL 3 packs errno into it and has no text for it:
 * "OpenSSL error 2147483650" was ENOENT) is given as strerror's. */
static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;

#ifdef ERR_SYSTEM_ERROR
    if (e && ERR_SYSTEM_ERROR(e) && ERR_GET_REASON(e) != 0)
        r = strerror(ERR_GET_REASON(e));
#endif
    if (r)
        snprintf(buf, len, "%s", r);
    else if (e)
        snprintf(buf, len, "OpenSSL error %lu", e);
    else
        snprintf(buf, len, "unknown TLS error");
    ERR_clear_error();
    return buf;
}

/* Called when the server asks for a client certificate and none is set. */
static int no_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    struct dist__tls *t = SSL_get_ex_data(ssl, ctx_index);

    DIST__UNUSED(x509);
    DIST__UNUSED(pkey);
    if (t)
        t->cert_asked = 1;
    return 0;
}

/* 1 with why when path (a file, or the CA directory) cannot be opened:
 * named, with the system's reason, before OpenSSL, whose own words for a
 * missing file were a bare error number. */
static int unreadable(const char *path, const char *what, char *why,
                      size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd >= 0) {
        close(fd);
        return 0;
    }
    snprintf(why, whylen, "TLS: cannot read %s %s: %s", what, path,
             strerror(errno));
    return 1;
}

static int load_ca(SSL_CTX *ctx, const char *ca)
{
    struct stat st;

    if (!ca[0])
        return SSL_CTX_set_default_verify_paths(ctx);
    if (stat(ca, &st) == 0 && S_ISDIR(st.st_mode))
        return SSL_CTX_load_verify_locations(ctx, NULL, ca);
    return SSL_CTX_load_verify_locations(ctx, ca, NULL);
}

/* The passphrase of an encrypted key, from the options (userdata), or
 * none: OpenSSL's own would prompt on the terminal, which a library must
 * not do; the key then fails to load and the error says so. */
static int key_pass(char *buf, int size, int rwflag, void *userdata)
{
    const char *pass = userdata;
    size_t n = pass ? strlen(pass) : 0;

    (void)rwflag;
    if (!n || n > (size_t)size)
        return 0;
    memcpy(buf, pass, n);
    return (int)n;
}

/* The client certificate and its key into ctx: 1, or 0 with OpenSSL's
 * error queue saying why (never the passphrase). */
static int use_cert(SSL_CTX *ctx, const struct dist__tls_opts *o,
                    const char *key)
{
    int ok;

    SSL_CTX_set_default_passwd_cb(ctx, key_pass);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)o->key_pass);
    ok = SSL_CTX_use_certificate_chain_file(ctx, o->cert) == 1 &&
         SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1 &&
         SSL_CTX_check_private_key(ctx) == 1;
    /* o is the caller's: nothing may point into it later */
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    return ok;
}

/* A new SSL_CTX for o: 0, or EIO with why (EPROTO: the options cannot
 * work, a file that cannot be used). */
static int ctx_build(const struct dist__tls_opts *o, SSL_CTX **out, char *why,
                     size_t whylen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    const char *key = o->key[0] ? o->key : o->cert;
    char r[160];

    if (!ctx)
        return snprintf(why, whylen, "TLS: %s", ssl_reason(r, sizeof r)), EIO;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* a record in one recv(2), not its header and then its body: a lock
     * call's replies are small, and the system calls are its cost */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_verify(ctx, o->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                       NULL);
    SSL_CTX_set_client_cert_cb(ctx, no_cert);
    if ((!o->insecure && o->ca[0] &&
         unreadable(o->ca, "the CA certificates", why, whylen)) ||
        (o->cert[0] &&
         unreadable(o->cert, "the client certificate", why, whylen)) ||
        (o->cert[0] && unreadable(key, "the client key", why, whylen))) {
        SSL_CTX_free(ctx);
        return EPROTO;
    }
    if (!o->insecure && load_ca(ctx, o->ca) != 1) {
        snprintf(why, whylen, "TLS: cannot load the CA certificates %s%s: %s",
                 o->ca[0] ? "of " : "(the system's)", o->ca,
                 ssl_reason(r, sizeof r));
        SSL_CTX_free(ctx);
        return EPROTO;
    }
    if (!o->cert[0] && o->key[0]) {
        snprintf(why, whylen,
                 "TLS: a client key without its certificate "
                 "(DISTLOCK_TLS_CERT or tls_cert=)");
        SSL_CTX_free(ctx);
        return EPROTO;
    }
    if (o->cert[0] && !use_cert(ctx, o, key)) {
        int dec = strstr(ssl_reason(r, sizeof r), "decrypt") != NULL;
        snprintf(why, whylen,
                 "TLS: cannot use the client certificate %s with "
                 "the key %s: %s%s",
                 o->cert, key, r,
                 !dec ? ""
                 : o->key_pass[0]
                     ? " (a wrong passphrase?)"
                     : " (an encrypted key: its passphrase goes in "
                       "DISTLOCK_TLS_KEY_PASS or tls_key_pass=)");
        SSL_CTX_free(ctx);
        return EPROTO;
    }
    *out = ctx;
    return 0;
}

/* A reference to the SSL_CTX for o (the caller frees it): 0, or EIO or
 * EPROTO (ctx_build). */
static int ctx_get(const struct dist__tls_opts *o, SSL_CTX **out, char *why,
                   size_t whylen)
{
    SSL_CTX *ctx = NULL;
    int rc = 0;

    tls_init();
    pthread_mutex_lock(&ctx_mu);
    if (ctx_index < 0)
        ctx_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    if (!ctx_cur || memcmp(&ctx_opts, o, sizeof *o) != 0) {
        if ((rc = ctx_build(o, &ctx, why, whylen)) == 0) {
            SSL_CTX_free(ctx_cur);
            ctx_cur = ctx;
            ctx_opts = *o;
        }
    }
    if (rc == 0 && SSL_CTX_up_ref(ctx_cur) == 1)
        *out = ctx_cur;
    else if (rc == 0)
        rc = EIO, snprintf(why, whylen, "TLS: out of memory");
    pthread_mutex_unlock(&ctx_mu);
    if (rc == 0 && o->insecure && atomic_exchange(&warned_insecure, 1) == 0)
        fprintf(stderr,
                "distlock: WARNING: TLS without certificate checks "
                "(DISTLOCK_TLS_INSECURE or tls_insecure=1): anyone on the "
                "path can pose as the Redis server\n");
    return rc;
}

/* Names the server to check the certificate against and, for a host name
 * (not an address), sends it as SNI. */
static int set_name(SSL *ssl, const char *name)
{
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    unsigned char ip[16];

    if (inet_pton(AF_INET, name, ip) == 1 ||
        inet_pton(AF_INET6, name, ip) == 1)
        return X509_VERIFY_PARAM_set1_ip_asc(vp, name) == 1 ? 0 : -1;
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_host(vp, name, 0) != 1 ||
        SSL_set_tlsext_host_name(ssl, name) != 1)
        return -1;
    return 0;
}

/* Why a handshake failed (SSL_get_error said err), in words: EPROTO when
 * trying again cannot help (a certificate refused, a server that does not
 * speak TLS), else EIO (a connection dropped, which a restart explains). */
static int explain(struct dist__tls *t, int err, int sys, const char *name,
                   char *why, size_t whylen)
{
    long v = SSL_get_verify_result(t->ssl);
    unsigned long e = ERR_peek_error();
    int reason = ERR_GET_REASON(e), rc = EPROTO;
    char r[160];

    if (err == SSL_ERROR_SSL && reason == SSL_R_CERTIFICATE_VERIFY_FAILED &&
        (v == X509_V_ERR_HOSTNAME_MISMATCH ||
         v == X509_V_ERR_IP_ADDRESS_MISMATCH))
        snprintf(
            why, whylen,
            "host name mismatch: the server's certificate "
            "is not for %s (DISTLOCK_TLS_SERVER_NAME or tls_server_name= "
            "names the one to check)",
            name);
    else if (err == SSL_ERROR_SSL &&
             reason == SSL_R_CERTIFICATE_VERIFY_FAILED)
        snprintf(why, whylen, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
    else if (t->cert_asked && !t->has_cert)
        snprintf(why, whylen,
                 "the server asked for a client certificate "
                 "(DISTLOCK_TLS_CERT and DISTLOCK_TLS_KEY, or tls_cert= and "
                 "tls_key=)");
    else if (err == SSL_ERROR_SSL &&
             (reason == SSL_R_WRONG_VERSION_NUMBER ||
              reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
              reason == SSL_R_UNKNOWN_PROTOCOL))
        snprintf(why, whylen,
                 "TLS sent to a plain port: the server's answer "
                 "is not TLS (is the URL's rediss:// meant to be redis://?)");
    else if (err == SSL_ERROR_SYSCALL && !e)
        rc = EIO, snprintf(why, whylen,
                           "the server closed the connection "
                           "during the TLS handshake%s%s",
                           sys ? ": " : "", sys ? strerror(sys) : "");
    else
        rc = EIO, snprintf(why, whylen, "TLS handshake failed: %s",
                           ssl_reason(r, sizeof r));
    ERR_clear_error();
    return rc;
}

/* When a silent server is asked whether it is a plain one: on loopback
 * and most networks a TLS server's first answer comes well within this. */
#define SILENT_MS 300

/* Whether the server, silent on our ClientHello since SILENT_MS, is a
 * plain Redis (plain(arg) answers that, once): Redis drops a ClientHello
 * as a bad inline command and says nothing, so without asking, a TLS
 * client would wait out its whole timeout.  EPROTO with why then, else
 * 0. */
static int silent_plain(struct dist__tls *t, uint64_t started, int *asked,
                        int (*plain)(void *), void *arg, char *why,
                        size_t whylen)
{
    if (*asked || !plain || dist__now_ms() < started + SILENT_MS ||
        BIO_number_read(SSL_get_rbio(t->ssl)) != 0)
        return 0;
    *asked = 1;
    if (!plain(arg))
        return 0;
    snprintf(why, whylen,
             "TLS sent to a plain port: the server answers "
             "plain text and not the TLS handshake (is the URL's rediss:// "
             "meant to be redis://?)");
    return EPROTO;
}

/* The handshake proper, waiting by poll(2) until until: 0, or EIO or
 * EPROTO (see explain and silent_plain). */
static int handshake(struct dist__tls *t, int fd, const char *name,
                     uint64_t until, const struct dist__tls_probe *pr,
                     char *why, size_t whylen)
{
    uint64_t started = dist__now_ms();
    int asked = 0;

    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        uint64_t now, wake;
        int rc, err;

        ERR_clear_error();
        errno = 0;
        if ((rc = SSL_connect(t->ssl)) == 1)
            return 0;
        err = SSL_get_error(t->ssl, rc);
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
            return explain(t, err, errno, name, why, whylen);
        p.events = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        do {
            if ((rc = silent_plain(t, started, &asked, pr->plain, pr->arg,
                                   why, whylen)) != 0)
                return rc;
            if ((now = dist__now_ms()) >= until) {
                snprintf(
                    why, whylen,
                    "no TLS handshake within the timeout: "
                    "the server did not answer in TLS (a plain port that "
                    "waits for more? then the URL wants redis://)");
                return EIO;
            }
            /* wake up to ask, while it stays silent */
            wake = !asked && pr->plain && started + SILENT_MS < until
                       ? started + SILENT_MS
                       : until;
            wake = wake > now ? wake : now;
            rc = poll(&p, 1,
                      wake - now > INT_MAX ? INT_MAX : (int)(wake - now));
        } while ((rc < 0 && errno == EINTR) || rc == 0);
        if (rc < 0)
            return snprintf(why, whylen, "%s", strerror(errno)), EIO;
    }
}

/* No stack of its own (unlike the calls below): its one caller,
 * dist__link_open, makes the whole connection on a stack with room. */
int dist__tls_open(const struct dist__cfg *cfg, const struct dist__addr *a,
                   int fd, uint64_t until, const struct dist__tls_probe *pr,
                   struct dist__tls **out, char *why, size_t whylen)
{
    const char *name = cfg->tls.name[0] ? cfg->tls.name : a->host;
    struct dist__tls *t = calloc(1, sizeof *t);
    SSL_CTX *ctx = NULL;
    int rc;

    *out = NULL;
    if (!t)
        return snprintf(why, whylen, "out of memory"), ENOMEM;
    if ((rc = ctx_get(&cfg->tls, &ctx, why, whylen)) != 0) {
        free(t);
        return rc;
    }
    t->has_cert = cfg->tls.cert[0] != 0;
    t->ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the session holds its own reference */
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1 ||
        SSL_set_ex_data(t->ssl, ctx_index, t) != 1 ||
        set_name(t->ssl, name) != 0) {
        snprintf(why, whylen, "TLS: cannot set up a session for %s", name);
        dist__tls_free(t);
        return EIO;
    }
    if ((rc = handshake(t, fd, name, until, pr, why, whylen)) != 0) {
        dist__tls_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* One step of a handshake that checks nothing: 1 done, 0 to wait for *ev,
 * -1 failed.  A failure that is an alert from the server counts as done:
 * it answered in TLS all the same. */
static int probe_step(SSL *ssl, short *ev)
{
    int rc, err;

    ERR_clear_error();
    if ((rc = SSL_connect(ssl)) == 1)
        return 1;
    err = SSL_get_error(ssl, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        *ev = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    rc = err == SSL_ERROR_SSL &&
         ERR_GET_REASON(ERR_peek_error()) >= SSL_AD_REASON_OFFSET;
    ERR_clear_error();
    return rc ? 1 : -1;
}

static int tls_speaks(int fd, uint64_t until)
{
    SSL_CTX *ctx;
    SSL *ssl = NULL;
    int rc = -1;

    tls_init();
    if ((ctx = SSL_CTX_new(TLS_client_method())) != NULL)
        ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the session holds its own reference */
    if (ssl && SSL_set_fd(ssl, fd) == 1) {
        SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
        for (;;) {
            struct pollfd p = { fd, 0, 0 };
            uint64_t now = dist__now_ms();
            if ((rc = probe_step(ssl, &p.events)) != 0 || now >= until)
                break;
            if (poll(&p, 1,
                     until - now > INT_MAX ? INT_MAX : (int)(until - now)) <
                    0 &&
                errno != EINTR)
                break;
        }
    }
    SSL_free(ssl);
    ERR_clear_error();
    return rc == 1;
}

static void tls_free(struct dist__tls *t)
{
    SSL_free(t->ssl); /* no SSL_shutdown: nothing is sent */
    free(t);
}

/* After SSL_read or SSL_write returned rc <= 0: 0 with *ev, or -1 with
 * the reason in t->err. */
static ssize_t io_fail(struct dist__tls *t, int rc, short *ev)
{
    int err = SSL_get_error(t->ssl, rc), sys = errno;
    char r[160];

    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        *ev = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    if (t->cert_asked && !t->has_cert) /* an alert, or just a reset */
        snprintf(t->err, sizeof t->err,
                 "the server asked for a client "
                 "certificate (DISTLOCK_TLS_CERT and DISTLOCK_TLS_KEY, or "
                 "tls_cert= and tls_key=)");
    else if (err == SSL_ERROR_ZERO_RETURN ||
             (err == SSL_ERROR_SYSCALL && !ERR_peek_error() && !sys))
        snprintf(t->err, sizeof t->err, "Server closed the connection");
    else if (err == SSL_ERROR_SYSCALL && !ERR_peek_error())
        snprintf(t->err, sizeof t->err, "%s", strerror(sys));
    else
        snprintf(t->err, sizeof t->err, "TLS: %s", ssl_reason(r, sizeof r));
    ERR_clear_error();
    return -1;
}

static ssize_t tls_read(struct dist__tls *t, void *buf, size_t n, short *ev)
{
    int rc;

    ERR_clear_error();
    errno = 0;
    rc = SSL_read(t->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
    return rc > 0 ? rc : io_fail(t, rc, ev);
}

static ssize_t tls_write(struct dist__tls *t, const void *buf, size_t n,
                         short *ev)
{
    int rc;

    ERR_clear_error();
    errno = 0;
    rc = SSL_write(t->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
    return rc > 0 ? rc : io_fail(t, rc, ev);
}

/* With read-ahead, bytes of a record not yet decrypted count too
 * (SSL_has_pending): they were taken off the socket all the same. */
size_t dist__tls_pending(const struct dist__tls *t)
{
    int n = SSL_pending(t->ssl);

    return n > 0 ? (size_t)n : (size_t)SSL_has_pending(t->ssl);
}

static int tls_idle(struct dist__tls *t)
{
    char c;
    int rc;

    if (SSL_pending(t->ssl) > 0)
        return 0;
    ERR_clear_error();
    rc = SSL_peek(t->ssl, &c, 1);
    if (rc > 0)
        return 0;
    rc = SSL_get_error(t->ssl, rc) == SSL_ERROR_WANT_READ;
    ERR_clear_error();
    return rc;
}

int dist__tls_cert_asked(const struct dist__tls *t)
{
    return t->cert_asked && !t->has_cert;
}

const char *dist__tls_error(const struct dist__tls *t)
{
    return t->err;
}

/* ---- on a stack with room ---------------------------------------------- */

/* OpenSSL's calls run where DIST__DEEP_NEED bytes of stack are left
 * (dist__with_stack).  Measured with OpenSSL 3.0 (a painted stack, from
 * the entry of each call; TLS 1.3 and 1.2, P-256 and RSA-4096
 * certificates): SSL_connect 7.7 KiB, SSL_read 6.6 KiB, SSL_write 5.7 KiB,
 * loading a CA file 5.5 KiB.  A thread made with PTHREAD_STACK_MIN has
 * about 13 KiB in all, of which a call has used some 6 KiB by the time it
 * gets here: its TLS calls run on the stack the thread keeps for them. */
/* The text for a call that could not be given the stack it needs. */
#define NO_STACK                                                             \
    "no memory for a stack for TLS: this thread has less than "              \
    "the 32 KiB of stack left that OpenSSL's calls are given"

/* Each call below packs its arguments for dist__with_stack and its
 * result comes back in the same struct. */

struct speaks_op {
    int fd;
    uint64_t until;
    int yes;
};

static void speaks_deep(void *arg)
{
    struct speaks_op *o = arg;

    o->yes = tls_speaks(o->fd, o->until);
}

/* Without the stack it needs, it cannot tell: no. */
int dist__tls_speaks(int fd, uint64_t until)
{
    struct speaks_op o = { fd, until, 0 };

    return dist__with_stack(DIST__DEEP_NEED, speaks_deep, &o) == 0 ? o.yes
                                                                   : 0;
}

static void free_deep(void *arg)
{
    tls_free(arg);
}

/* SSL_free needs 1 KiB: without the stack asked for, it runs where it
 * is, rather than leak. */
void dist__tls_free(struct dist__tls *t)
{
    if (t && dist__with_stack(DIST__DEEP_NEED, free_deep, t) != 0)
        tls_free(t);
}

struct io_op {
    struct dist__tls *t;
    void *buf;
    size_t n;
    short *ev;
    int wr;
    ssize_t rc;
};

static void io_deep(void *arg)
{
    struct io_op *o = arg;

    o->rc = o->wr ? tls_write(o->t, o->buf, o->n, o->ev)
                  : tls_read(o->t, o->buf, o->n, o->ev);
}

static ssize_t io(struct io_op *o)
{
    if (dist__with_stack(DIST__DEEP_NEED, io_deep, o) == 0)
        return o->rc;
    snprintf(o->t->err, sizeof o->t->err, NO_STACK);
    return -1;
}

ssize_t dist__tls_read(struct dist__tls *t, void *buf, size_t n, short *ev)
{
    struct io_op o = { t, buf, n, ev, 0, -1 };

    return io(&o);
}

ssize_t dist__tls_write(struct dist__tls *t, const void *buf, size_t n,
                        short *ev)
{
    struct io_op o = { t, (void *)buf, n, ev, 1, -1 };

    return io(&o);
}

struct idle_op {
    struct dist__tls *t;
    int idle;
};

static void idle_deep(void *arg)
{
    struct idle_op *o = arg;

    o->idle = tls_idle(o->t);
}

/* Without the stack it needs: not idle (the link is then dropped). */
int dist__tls_idle(struct dist__tls *t)
{
    struct idle_op o = { t, 0 };

    return dist__with_stack(DIST__DEEP_NEED, idle_deep, &o) == 0 ? o.idle : 0;
}
