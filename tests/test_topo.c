/*
 * test_topo: the HA topologies of the test harness (harness_cluster.h,
 * harness_sentinel.h) do what they claim, against real
 * redis-server processes.
 *
 *   group "cluster 3":   3 masters - layout, CLUSTER KEYSLOT against our own
 *                        CRC16, MOVED, a live slot move, ASK during a
 *                        migration;
 *   group "cluster 3+3": SIGKILL of a master, its replica takes over, the
 *                        old master restarted rejoins as a replica; the
 *                        same with SIGSTOP / SIGCONT; CLUSTER FAILOVER;
 *   group "sentinel":    1 master + 2 replicas + 3 sentinels - SENTINEL
 *                        FAILOVER twice, SIGKILL of the master, SIGSTOP of
 *                        the master and SIGCONT.
 *
 * Every group starts its own topology in its setup.  Start-up and failover
 * times are printed on stderr (one "test_topo: ..." line each), never
 * asserted: the bounds passed to the waits are generous (a loaded 2-core
 * machine), only the outcome is checked.  The whole program takes about
 * 40 s on a 2-core VM (cluster groups ~15 s, sentinel group ~25 s, mostly
 * spent waiting for Redis's own timers; the same under load).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness_server.h"
#include "harness_cluster.h"
#include "harness_sentinel.h"

#define WAIT_MS 30000 /* bound for every wait: generous on purpose */

static tu_cluster_t *cl;  /* the group's cluster */
static tu_nodes_t *cn;    /* its nodes */
static tu_sentinel_t *sn; /* the sentinel group's topology */
static tu_nodes_t *sd;    /* its data nodes */
static tu_nodes_t *ss;    /* its sentinels */

static void say_time(const char *what, double t0)
{
    fprintf(stderr, "test_topo: %s: %.2f s\n", what, tu_now() - t0);
}

/* ---- our own hash slot computation, to check CLUSTER KEYSLOT --------- */

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection;
 * the one Redis Cluster hashes keys with. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    size_t i;
    int bit;

    for (i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

/* The slot of key: the part between the first '{' and the next '}' if it
 * is not empty, else the whole key. */
static int local_slot(const char *key)
{
    const char *open = strchr(key, '{');
    size_t len = strlen(key);

    if (open != NULL) {
        const char *close = strchr(open + 1, '}');
        if (close != NULL && close > open + 1)
            return (int)(crc16(open + 1, (size_t)(close - open - 1)) & 16383);
    }
    return (int)(crc16(key, len) & 16383);
}

/* A key "<prefix>:<pid>:<n>" whose slot master k was created with. */
static void key_of_master(tu_cluster_t *c, int k, const char *prefix,
                          char *buf, size_t len)
{
    int lo, hi, n;

    assert_int_equal(tu_cluster_slot_range(c, k, &lo, &hi), 0);
    for (n = 0;; n++) {
        int s;

        snprintf(buf, len, "%s:%ld:%d", prefix, (long)getpid(), n);
        s = local_slot(buf);
        if (s >= lo && s <= hi)
            return;
    }
}

/* ---- reply checks -------------------------------------------------------- */

static void expect_ok(redisReply *x)
{
    assert_non_null(x);
    if (x->type != REDIS_REPLY_STATUS || strcmp(x->str, "OK") != 0)
        fail_msg("expected +OK, got type %d \"%s\"", x->type,
                 x->str ? x->str : "");
    freeReplyObject(x);
}

static void expect_str(redisReply *x, const char *want)
{
    assert_non_null(x);
    if (x->type != REDIS_REPLY_STRING)
        fail_msg("expected \"%s\", got type %d \"%s\"", want, x->type,
                 x->str ? x->str : "");
    assert_string_equal(x->str, want);
    freeReplyObject(x);
}

/* x must be "<kind> <slot> 127.0.0.1:<port of node want>". */
static void expect_redirect(tu_cluster_t *c, redisReply *x, const char *kind,
                            int slot, int want)
{
    int got_slot = -1, node;

    assert_non_null(x);
    node = tu_cluster_redirect(c, x, kind, &got_slot);
    if (node != want || got_slot != slot)
        fail_msg("expected %s %d to node %d (port %d), got \"%s\"", kind,
                 slot, want, tu_node_port(tu_cluster_nodes(c), want),
                 x->str ? x->str : "(not an error)");
    freeReplyObject(x);
}

/* The parent pid of a process (/proc/<pid>/stat, 4th field), or -1. */
static long parent_of(pid_t pid)
{
    char path[64], buf[512];
    const char *p;
    long ppid = -1;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (p != NULL && sscanf(p + 1, " %*c %ld", &ppid) != 1)
        ppid = -1;
    return ppid;
}

/* INFO server's process_id of a server. */
static long info_pid(tu_redis_t *r)
{
    char *info = tu_cmd_str(r, "INFO", "server", NULL);
    const char *p;
    long pid = -1;

    assert_non_null(info);
    p = strstr(info, "process_id:");
    if (p != NULL)
        pid = strtol(p + strlen("process_id:"), NULL, 10);
    free(info);
    return pid;
}

static long long info_num(tu_redis_t *r, const char *section,
                          const char *field)
{
    char *info = tu_cmd_str(r, "INFO", section, NULL);
    char pat[64];
    const char *p;
    long long v = -1;

    assert_non_null(info);
    snprintf(pat, sizeof(pat), "%s:", field);
    p = strstr(info, pat);
    if (p != NULL)
        v = strtoll(p + strlen(pat), NULL, 10);
    free(info);
    return v;
}

/* A field of CLUSTER INFO on node i, as a number. */
static long long cluster_info_num(tu_nodes_t *t, int i, const char *field)
{
    redisReply *x = tu_node_cmd(t, i, "CLUSTER", "INFO", NULL);
    char pat[64];
    const char *p;
    long long v = -1;

    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    snprintf(pat, sizeof(pat), "\n%s:", field);
    p = strstr(x->str, pat);
    if (p != NULL)
        v = strtoll(p + strlen(pat), NULL, 10);
    freeReplyObject(x);
    return v;
}

/* ======================================================================== */
/* Cluster, 3 masters                                                       */
/* ======================================================================== */

/* The end of a group setup: -1 when its topology did not start, else 0
 * and how long it took since t0. */
static int came_up(const void *topo, const char *what, double t0)
{
    if (topo == NULL)
        return -1;
    say_time(what, t0);
    return 0;
}

/* A cluster of 3 masters with replicas replicas each, for a group. */
static int cluster_up(int replicas, const char *what)
{
    double t0 = tu_now();

    cl = tu_cluster_start(3, replicas, NULL);
    cn = tu_cluster_nodes(cl);
    return came_up(cl, what, t0);
}

static int setup_cluster3(void **state)
{
    (void)state;
    return cluster_up(0, "cluster 3 masters up");
}

static int teardown_cluster(void **state)
{
    (void)state;
    tu_cluster_stop(cl);
    cl = NULL;
    cn = NULL;
    return 0;
}

static void test_cluster_layout(void **state)
{
    static const int lo[3] = { 0, 5461, 10923 },
                     hi[3] = { 5460, 10922, 16383 };
    char url[256];
    redisReply *x;
    size_t i;
    int k;

    (void)state;
    assert_int_equal(tu_nodes_count(cn), 3);
    assert_int_equal(tu_cluster_masters(cl), 3);
    snprintf(url, sizeof(url),
             "redis-cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             tu_node_port(cn, 0), tu_node_port(cn, 1), tu_node_port(cn, 2));
    assert_string_equal(tu_cluster_url(cl), url);

    for (k = 0; k < 3; k++) {
        int l, h;

        /* Really our child, on a port of its own. */
        assert_true(tu_node_pid(cn, k) > 0);
        assert_int_equal(info_pid(tu_node_server(cn, k)),
                         (long)tu_node_pid(cn, k));
        assert_int_equal(parent_of(tu_node_pid(cn, k)), (long)getpid());
        assert_int_equal(strlen(tu_cluster_node_id(cl, k)), 40);
        assert_string_equal(tu_node_role(cn, k), "master");
        assert_int_equal(tu_node_master_of(cn, k), -1);

        /* Every node sees all slots assigned and served, 3 masters. */
        assert_int_equal(cluster_info_num(cn, k, "cluster_slots_assigned"),
                         16384);
        assert_int_equal(cluster_info_num(cn, k, "cluster_slots_ok"), 16384);
        assert_int_equal(cluster_info_num(cn, k, "cluster_known_nodes"), 3);
        assert_int_equal(cluster_info_num(cn, k, "cluster_size"), 3);

        /* Even split, in order. */
        assert_int_equal(tu_cluster_slot_range(cl, k, &l, &h), 0);
        assert_int_equal(l, lo[k]);
        assert_int_equal(h, hi[k]);
        assert_int_equal(tu_cluster_slot_owner(cl, lo[k]), k);
        assert_int_equal(tu_cluster_slot_owner(cl, hi[k]), k);
    }
    assert_string_not_equal(tu_cluster_node_id(cl, 0),
                            tu_cluster_node_id(cl, 1));
    assert_true(tu_node_port(cn, 0) != tu_node_port(cn, 1));

    /* CLUSTER SLOTS from another node: the same three ranges. */
    x = tu_node_cmd(cn, 2, "CLUSTER", "SLOTS", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 3);
    for (i = 0; i < x->elements; i++) {
        redisReply *r = x->element[i];
        int from = (int)r->element[0]->integer;

        k = from == 0 ? 0 : from == 5461 ? 1 : from == 10923 ? 2 : -1;
        assert_true(k >= 0);
        assert_int_equal(r->element[1]->integer, hi[k]);
        assert_int_equal(r->element[2]->element[1]->integer,
                         tu_node_port(cn, k));
    }
    freeReplyObject(x);
}

static void test_cluster_keyslot(void **state)
{
    static const char *const keys[] = {
        "foo",
        "bar",
        "123456789",
        "{user1000}.following",
        "{user1000}.followers",
        "a{}b",
        "{}",
        "x{y}z{w}",
        "dist:lock:1",
        "{",
        "}{a}",
    };
    size_t i;

    (void)state;
    /* The algorithm itself: the CRC16 check value, and known slots. */
    assert_int_equal(crc16("123456789", 9), 0x31C3);
    assert_int_equal(tu_cluster_keyslot(cl, "123456789"), 12739);
    assert_int_equal(tu_cluster_keyslot(cl, "foo"), 12182);
    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        int s = tu_cluster_keyslot(cl, keys[i]);

        if (s != local_slot(keys[i]))
            fail_msg("key \"%s\": CLUSTER KEYSLOT %d, expected %d", keys[i],
                     s, local_slot(keys[i]));
    }
    assert_int_equal(tu_cluster_keyslot(cl, "{user1000}.following"),
                     tu_cluster_keyslot(cl, "user1000"));
}

static void test_cluster_moved(void **state)
{
    char key[64];
    int slot, owner, i;

    (void)state;
    key_of_master(cl, 1, "moved", key, sizeof(key));
    slot = tu_cluster_keyslot(cl, key);
    owner = tu_cluster_slot_owner(cl, slot);
    assert_int_equal(owner, 1);
    for (i = 0; i < 3; i++) {
        redisReply *x = tu_node_cmd(cn, i, "SET", key, "v", NULL);

        if (i == owner)
            expect_ok(x);
        else
            expect_redirect(cl, x, "MOVED", slot, owner);
    }
    expect_str(tu_node_cmd(cn, owner, "GET", key, NULL), "v");
}

static void test_cluster_move_slot(void **state)
{
    char key[64];
    int slot, from, to, i;
    double t0;

    (void)state;
    key_of_master(cl, 0, "move", key, sizeof(key));
    slot = tu_cluster_keyslot(cl, key);
    from = tu_cluster_slot_owner(cl, slot);
    assert_int_equal(from, 0);
    to = 2;
    expect_ok(tu_node_cmd(cn, from, "SET", key, "survives", NULL));

    t0 = tu_now();
    assert_int_equal(tu_cluster_move_slot(cl, slot, to), 0);
    say_time("cluster slot move (1 key)", t0);
    assert_int_equal(tu_cluster_slot_owner(cl, slot), to);
    for (i = 0; i < 3; i++) {
        redisReply *x = tu_node_cmd(cn, i, "GET", key, NULL);

        if (i == to)
            expect_str(x, "survives");
        else
            expect_redirect(cl, x, "MOVED", slot, to);
    }
    /* The key went with the slot. */
    {
        char s[16];

        snprintf(s, sizeof(s), "%d", slot);
        assert_int_equal(tu_cmd_int(tu_node_server(cn, from), "CLUSTER",
                                    "COUNTKEYSINSLOT", s, NULL),
                         0);
        assert_int_equal(tu_cmd_int(tu_node_server(cn, to), "CLUSTER",
                                    "COUNTKEYSINSLOT", s, NULL),
                         1);
    }
    /* Moving it where it is is a no-op. */
    assert_int_equal(tu_cluster_move_slot(cl, slot, to), 0);
}

static void test_cluster_ask(void **state)
{
    char a[80], b[80], c[80], base[64];
    int slot, from, to;

    (void)state;
    key_of_master(cl, 1, "ask", base, sizeof(base));
    snprintf(a, sizeof(a), "{%s}a", base);
    snprintf(b, sizeof(b), "{%s}b", base);
    snprintf(c, sizeof(c), "{%s}c", base);
    slot = tu_cluster_keyslot(cl, a);
    assert_int_equal(tu_cluster_keyslot(cl, b), slot);
    from = tu_cluster_slot_owner(cl, slot);
    assert_int_equal(from, 1);
    to = 0;
    expect_ok(tu_node_cmd(cn, from, "SET", a, "va", NULL));
    expect_ok(tu_node_cmd(cn, from, "SET", b, "vb", NULL));

    assert_int_equal(tu_cluster_migrate_begin(cl, slot, to), 0);
    assert_int_equal(tu_cluster_migrate_key(cl, a), 1);
    assert_int_equal(tu_cluster_migrate_key(cl, c), 0); /* absent */

    /* The source: ASK for the key it gave away (and for a new one), still
     * serves the key it has. */
    expect_redirect(cl, tu_node_cmd(cn, from, "GET", a, NULL), "ASK", slot,
                    to);
    expect_redirect(cl, tu_node_cmd(cn, from, "SET", c, "vc", NULL), "ASK",
                    slot, to);
    expect_str(tu_node_cmd(cn, from, "GET", b, NULL), "vb");
    /* The target: MOVED back to the source without ASKING, serves it with
     * ASKING. */
    expect_redirect(cl, tu_node_cmd(cn, to, "GET", a, NULL), "MOVED", slot,
                    from);
    expect_str(tu_cluster_cmd_asking(cl, to, "GET", a, NULL), "va");
    /* Still owned by the source for everyone. */
    assert_int_equal(tu_cluster_slot_owner(cl, slot), from);

    assert_int_equal(tu_cluster_migrate_finish(cl, slot, to), 0);
    assert_int_equal(tu_cluster_slot_owner(cl, slot), to);
    expect_str(tu_node_cmd(cn, to, "GET", a, NULL), "va");
    expect_str(tu_node_cmd(cn, to, "GET", b, NULL), "vb");
    expect_redirect(cl, tu_node_cmd(cn, from, "GET", b, NULL), "MOVED", slot,
                    to);
    expect_redirect(cl, tu_node_cmd(cn, 2, "GET", b, NULL), "MOVED", slot,
                    to);
}

/* ======================================================================== */
/* Cluster, 3 masters + 3 replicas                                          */
/* ======================================================================== */

static int setup_cluster33(void **state)
{
    (void)state;
    return cluster_up(1, "cluster 3+3 up");
}

static void test_cluster_replicas(void **state)
{
    int i;

    (void)state;
    assert_int_equal(tu_nodes_count(cn), 6);
    for (i = 3; i < 6; i++) {
        assert_string_equal(tu_node_role(cn, i), "slave");
        assert_int_equal(tu_node_master_of(cn, i), i - 3);
        assert_int_equal(info_pid(tu_node_server(cn, i)),
                         (long)tu_node_pid(cn, i));
        assert_int_equal(cluster_info_num(cn, i, "cluster_known_nodes"), 6);
    }
    /* A replica redirects writes to its master. */
    {
        char key[64];
        int slot;

        key_of_master(cl, 2, "rep", key, sizeof(key));
        slot = tu_cluster_keyslot(cl, key);
        expect_redirect(cl, tu_node_cmd(cn, 5, "SET", key, "v", NULL),
                        "MOVED", slot, 2);
    }
}

/* key = "before" on master m, a key of its own, and on its replica
 * (WAIT) before anything happens to it.  The key's slot. */
static int cluster_write_replicated(int m, const char *what, char *key,
                                    size_t len)
{
    redisReply *x;
    int slot;

    key_of_master(cl, m, what, key, len);
    slot = tu_cluster_keyslot(cl, key);
    assert_int_equal(tu_cluster_slot_owner(cl, slot), m);
    expect_ok(tu_node_cmd(cn, m, "SET", key, "before", NULL));
    x = tu_node_cmd(cn, m, "WAIT", "1", "5000", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    return slot;
}

/* After a fault of master old (what): its replica want is promoted, and
 * has key's "before". */
static void cluster_promoted(int old, int want, const char *key,
                             const char *what)
{
    double t0 = tu_now();
    int nm = tu_cluster_wait_promoted(cl, old, WAIT_MS);

    say_time(what, t0);
    assert_int_equal(nm, want);
    expect_str(tu_node_cmd(cn, nm, "GET", key, NULL), "before");
}

static void test_cluster_failover_kill(void **state)
{
    char key[64], key2[96];
    int slot, old = 0, nm = 3, other; /* 3: master 0's only replica */

    (void)state;
    slot = cluster_write_replicated(old, "kill", key, sizeof(key));
    snprintf(key2, sizeof(key2), "{%s}2", key);

    assert_int_equal(tu_node_kill(cn, old), 0);
    assert_int_equal(tu_node_pid(cn, old), 0);
    assert_null(tu_node_role(cn, old));
    cluster_promoted(old, nm, key,
                     "cluster failover after SIGKILL of a master");
    assert_string_equal(tu_node_role(cn, nm), "master");
    assert_int_equal(tu_cluster_slot_owner(cl, slot), nm);

    expect_ok(tu_node_cmd(cn, nm, "SET", key2, "after", NULL));
    other = 1;
    expect_redirect(cl, tu_node_cmd(cn, other, "GET", key2, NULL), "MOVED",
                    tu_cluster_keyslot(cl, key2), nm);
}

static void test_cluster_restart_old_master(void **state)
{
    double t0 = tu_now();

    (void)state;
    /* Node 0 was killed by the previous test; node 3 took its slots. */
    assert_int_equal(tu_node_pid(cn, 0), 0);
    assert_int_equal(tu_node_restart(cn, 0), 0);
    assert_true(tu_node_pid(cn, 0) > 0);
    assert_int_equal(tu_cluster_wait_ok(cl, WAIT_MS), 0);
    say_time("cluster: killed old master restarted, back as a replica", t0);
    assert_string_equal(tu_node_role(cn, 0), "slave");
    assert_int_equal(tu_node_master_of(cn, 0), 3);
    assert_int_equal(tu_cluster_slot_owner(cl, 0), 3);
}

static void test_cluster_stop_cont(void **state)
{
    char key[64];
    int nm = 4;
    double t0;

    (void)state;
    /* Master 1 paused: its replica (node 4) takes over; continued, it
     * learns of the newer configuration and becomes a replica. */
    cluster_write_replicated(1, "stop", key, sizeof(key));
    assert_int_equal(tu_node_signal(cn, 1, SIGSTOP), 0);
    assert_null(tu_node_role(cn, 1)); /* skipped: it is stopped */
    cluster_promoted(1, nm, key,
                     "cluster failover after SIGSTOP of a master");

    assert_int_equal(tu_node_signal(cn, 1, SIGCONT), 0);
    t0 = tu_now();
    assert_int_equal(tu_cluster_wait_ok(cl, WAIT_MS), 0);
    say_time("cluster: stopped old master continued, back as a replica", t0);
    assert_string_equal(tu_node_role(cn, 1), "slave");
    assert_int_equal(tu_node_master_of(cn, 1), nm);
}

static void test_cluster_manual_failover(void **state)
{
    double t0 = tu_now();

    (void)state;
    /* Replica 5 takes over from master 2, which stays up as its replica. */
    assert_int_equal(tu_cluster_failover(cl, 5, WAIT_MS), 0);
    say_time("cluster: CLUSTER FAILOVER", t0);
    assert_string_equal(tu_node_role(cn, 5), "master");
    assert_string_equal(tu_node_role(cn, 2), "slave");
    assert_int_equal(tu_node_master_of(cn, 2), 5);
    assert_int_equal(tu_cluster_slot_owner(cl, 16383), 5);
}

/* ======================================================================== */
/* Sentinel: 1 master + 2 replicas, 3 sentinels                             */
/* ======================================================================== */

static int setup_sentinel(void **state)
{
    double t0 = tu_now();

    (void)state;
    sn = tu_sentinel_start(2, 3, NULL);
    sd = tu_sentinel_data(sn);
    ss = tu_sentinel_sentinels(sn);
    return came_up(sn, "sentinel 1+2 data nodes, 3 sentinels up", t0);
}

static int teardown_sentinel(void **state)
{
    (void)state;
    tu_sentinel_stop(sn);
    sn = NULL;
    sd = ss = NULL;
    return 0;
}

/* SET key value on the master and wait until the replicas have it. */
static void write_replicated(int master, const char *key, const char *value)
{
    redisReply *x;

    expect_ok(tu_node_cmd(sd, master, "SET", key, value, NULL));
    x = tu_node_cmd(sd, master, "WAIT", "2", "5000", NULL);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    if (x->integer != 2)
        fail_msg("WAIT on node %d: %lld replicas acknowledged, not 2", master,
                 x->integer);
    freeReplyObject(x);
}

static void test_sentinel_layout(void **state)
{
    char url[512];
    int i, len;

    (void)state;
    assert_int_equal(tu_nodes_count(sd), 3);
    assert_int_equal(tu_nodes_count(ss), 3);
    assert_string_equal(tu_sentinel_name(sn), "distlock");
    len = snprintf(url, sizeof(url), "redis-sentinel://");
    for (i = 0; i < 3; i++)
        len += snprintf(url + len, sizeof(url) - (size_t)len,
                        "%s127.0.0.1:%d", i ? "," : "", tu_node_port(ss, i));
    snprintf(url + len, sizeof(url) - (size_t)len, "/distlock");
    assert_string_equal(tu_sentinel_url(sn), url);

    assert_int_equal(tu_sentinel_master(sn), 0);
    assert_string_equal(tu_node_role(sd, 0), "master");
    for (i = 0; i < 3; i++) {
        assert_int_equal(info_pid(tu_node_server(sd, i)),
                         (long)tu_node_pid(sd, i));
        assert_int_equal(parent_of(tu_node_pid(sd, i)), (long)getpid());
        assert_int_equal(info_pid(tu_node_server(ss, i)),
                         (long)tu_node_pid(ss, i));
        if (i > 0) {
            assert_string_equal(tu_node_role(sd, i), "slave");
            assert_int_equal(tu_node_master_of(sd, i), 0);
        }
        /* Each sentinel: 2 replicas, 2 other sentinels, our master. */
        {
            redisReply *x =
                tu_node_cmd(ss, i, "SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                            "distlock", NULL);
            assert_non_null(x);
            assert_int_equal(x->type, REDIS_REPLY_ARRAY);
            assert_int_equal(atoi(x->element[1]->str), tu_node_port(sd, 0));
            freeReplyObject(x);
        }
        assert_int_equal(
            info_num(tu_node_server(ss, i), "sentinel", "sentinel_masters"),
            1);
    }
    assert_int_equal(tu_sentinel_wait_ok(sn, WAIT_MS), 0);
}

/* SENTINEL FAILOVER away from master old (what): the node that is
 * master now. */
static int sentinel_failover(int old, const char *what)
{
    double t0 = tu_now();
    int m = tu_sentinel_failover(sn, WAIT_MS);

    say_time(what, t0);
    assert_true(m >= 0);
    assert_true(m != old);
    assert_string_equal(tu_node_role(sd, m), "master");
    return m;
}

static void test_sentinel_failover_cmd(void **state)
{
    char key[64];
    int m0, m1, m2;
    double t0;

    (void)state;
    snprintf(key, sizeof(key), "sfo:%ld", (long)getpid());
    m0 = tu_sentinel_master(sn);
    assert_true(m0 >= 0);
    write_replicated(m0, key, "v1");

    m1 = sentinel_failover(m0, "sentinel: SENTINEL FAILOVER");
    assert_int_equal(tu_sentinel_master(sn), m1);
    expect_str(tu_node_cmd(sd, m1, "GET", key, NULL), "v1");

    t0 = tu_now();
    assert_int_equal(tu_node_wait_role(sd, m0, "slave", WAIT_MS), 0);
    say_time("sentinel: old master (alive) turned into a replica", t0);
    assert_int_equal(tu_sentinel_wait_ok(sn, WAIT_MS), 0);
    write_replicated(m1, key, "v2");

    /* A second one right away. */
    m2 = sentinel_failover(m1, "sentinel: second SENTINEL FAILOVER");
    assert_int_equal(tu_sentinel_wait_ok(sn, WAIT_MS), 0);
    assert_int_equal(tu_sentinel_master(sn), m2);
    expect_str(tu_node_cmd(sd, m2, "GET", key, NULL), "v2");
}

/* A fault of the sentinel topology's master: a key written before it,
 * the master that was, the one that took over. */
struct fault {
    char key[64];
    int old, nm;
};

/* Once the topology is settled, f->key ("what:pid") = "before" on the
 * master and its replicas, then the master killed (sig SIGKILL: it is
 * gone) or stopped (SIGSTOP): another node becomes master and has the
 * key's "before". */
static void sentinel_fault(struct fault *f, int sig, const char *what)
{
    char msg[96];
    double t0;

    snprintf(f->key, sizeof(f->key), "%s:%ld", what, (long)getpid());
    assert_int_equal(tu_sentinel_wait_ok(sn, WAIT_MS), 0);
    f->old = tu_sentinel_master(sn);
    assert_true(f->old >= 0);
    write_replicated(f->old, f->key, "before");

    if (sig == SIGKILL) {
        assert_int_equal(tu_node_kill(sd, f->old), 0);
        assert_int_equal(tu_node_pid(sd, f->old), 0);
    } else {
        assert_int_equal(tu_node_signal(sd, f->old, sig), 0);
    }
    t0 = tu_now();
    f->nm = tu_sentinel_wait_new_master(sn, f->old, WAIT_MS);
    snprintf(msg, sizeof(msg), "sentinel: failover after %s of the master",
             sig == SIGKILL ? "SIGKILL" : "SIGSTOP");
    say_time(msg, t0);
    assert_true(f->nm >= 0);
    assert_true(f->nm != f->old);
    expect_str(tu_node_cmd(sd, f->nm, "GET", f->key, NULL), "before");
}

static void test_sentinel_kill(void **state)
{
    struct fault f;
    double t0;

    (void)state;
    sentinel_fault(&f, SIGKILL, "skill");
    expect_ok(tu_node_cmd(sd, f.nm, "SET", f.key, "after", NULL));

    /* Restarted (empty), the sentinels make it a replica of the new one. */
    t0 = tu_now();
    assert_int_equal(tu_node_restart(sd, f.old), 0);
    assert_int_equal(tu_node_wait_role(sd, f.old, "slave", WAIT_MS), 0);
    assert_int_equal(tu_sentinel_wait_ok(sn, WAIT_MS), 0);
    say_time("sentinel: killed old master restarted, back as a replica", t0);
    assert_int_equal(tu_node_master_of(sd, f.old), f.nm);
    expect_str(tu_node_cmd(sd, f.old, "GET", f.key, NULL), "after");
}

static void test_sentinel_stop_cont(void **state)
{
    struct fault f;
    double t0;

    (void)state;
    sentinel_fault(&f, SIGSTOP, "sstop");

    assert_int_equal(tu_node_signal(sd, f.old, SIGCONT), 0);
    t0 = tu_now();
    assert_int_equal(tu_node_wait_role(sd, f.old, "slave", WAIT_MS), 0);
    say_time("sentinel: old master continued (SIGCONT) until role slave", t0);
    assert_int_equal(tu_node_master_of(sd, f.old), f.nm);
    assert_int_equal(tu_sentinel_wait_ok(sn, WAIT_MS), 0);
    assert_int_equal(tu_sentinel_master(sn), f.nm);
}

int main(void)
{
    const struct CMUnitTest cluster3[] = {
        cmocka_unit_test(test_cluster_layout),
        cmocka_unit_test(test_cluster_keyslot),
        cmocka_unit_test(test_cluster_moved),
        cmocka_unit_test(test_cluster_move_slot),
        cmocka_unit_test(test_cluster_ask),
    };
    const struct CMUnitTest cluster33[] = {
        cmocka_unit_test(test_cluster_replicas),
        cmocka_unit_test(test_cluster_failover_kill),
        cmocka_unit_test(test_cluster_restart_old_master),
        cmocka_unit_test(test_cluster_stop_cont),
        cmocka_unit_test(test_cluster_manual_failover),
    };
    const struct CMUnitTest sentinel[] = {
        cmocka_unit_test(test_sentinel_layout),
        cmocka_unit_test(test_sentinel_failover_cmd),
        cmocka_unit_test(test_sentinel_kill),
        cmocka_unit_test(test_sentinel_stop_cont),
    };
    double t0 = tu_now();
    int failed = 0;

    failed += cmocka_run_group_tests_name("cluster 3", cluster3,
                                          setup_cluster3, teardown_cluster);
    failed += cmocka_run_group_tests_name("cluster 3+3", cluster33,
                                          setup_cluster33, teardown_cluster);
    failed += cmocka_run_group_tests_name("sentinel", sentinel,
                                          setup_sentinel, teardown_sentinel);
    say_time("total", t0);
    return failed != 0;
}
