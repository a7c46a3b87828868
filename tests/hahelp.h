/*
 * hahelp.h: what the Sentinel and Cluster tests share: a waiter in a forked
 * process that reports when it got the lock, a key's PTTL and existence on
 * one node, and a watch on a key's TTL that sees a renewal land.  Static:
 * each program gets its own copy.  Include after cmocka.h, testhelp.h,
 * harness_topo.h and distlock.h.
 */
#ifndef DISTLOCK_HAHELP_H
#define DISTLOCK_HAHELP_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "anylock.h"

enum {
    HA_MUTEX = LK_MUTEX,
    HA_FAIR = LK_FAIR,
    HA_WRITE = LK_WRITE,
    HA_READ = LK_READ
};

/* "<verb> <key>" to one node of a topology, for the caller to free (NULL
 * when the node does not answer). */
static redisReply *ha_node_cmd(tu_nodes_t *t, int node, const char *verb,
                               const char *key)
{
    return tu_node_cmd(t, node, verb, key, NULL);
}

/* The integer of reply x, or none when it is not one; frees x. */
static long long ha_reply_int(redisReply *x, long long none)
{
    long long v = x && x->type == REDIS_REPLY_INTEGER ? x->integer : none;

    freeReplyObject(x);
    return v;
}

/* PTTL of key on one node of nodes (a tu_nodes_t, given as void * to be
 * ha_renewed_since's pttl); -3 when the node fails or redirects. */
static long long node_pttl(void *nodes, int node, const char *key)
{
    return ha_reply_int(ha_node_cmd(nodes, node, "PTTL", key), -3);
}

/* EXISTS on one node: 1, 0, or -1 when the node redirects or fails. */
static int node_exists(tu_nodes_t *t, int node, const char *key)
{
    return (int)ha_reply_int(ha_node_cmd(t, node, "EXISTS", key), -1);
}

/* A process blocked on a lock.  It writes 'w' just before it calls lock,
 * then the monotonic time it got the lock (text), unlocks and exits 0. */
struct ha_waiter {
    pid_t pid;
    int fd;
};

static int ha_lock(union any_lock *l, int kind)
{
    return kind == HA_WRITE  ? dist_rwlock_wrlock(&l->rw)
           : kind == HA_READ ? dist_rwlock_rdlock(&l->rw)
                             : dist_mutex_lock(&l->m);
}

static void ha_unlock(union any_lock *l, int kind)
{
    if (lk_is_rw(kind))
        dist_rwlock_unlock(&l->rw);
    else
        dist_mutex_unlock(&l->m);
}

static void ha_child_lock(int fd, const char *url, const char *name, int kind,
                          unsigned long watchdog_ms)
{
    union any_lock l;
    char buf[64];
    int n;

    if (dist_set_url(url) != 0 || dist_set_watchdog_ms(watchdog_ms) != 0)
        _exit(3);
    if (write(fd, "w", 1) != 1)
        _exit(3);
    if (any_lock_init(&l, name, kind) != 0)
        _exit(3);
    if (ha_lock(&l, kind) != 0) {
        fprintf(stderr, "waiter: lock: %s\n", dist_last_error());
        _exit(4);
    }
    n = snprintf(buf, sizeof buf, "%.6f\n", tu_now());
    if (write(fd, buf, (size_t)n) != n)
        _exit(3);
    ha_unlock(&l, kind);
    dist_shutdown();
    _exit(0);
}

/* Starts the waiter and returns once it is about to call lock. */
static void ha_waiter_start(struct ha_waiter *w, const char *url,
                            const char *name, int kind,
                            unsigned long watchdog_ms)
{
    char c;

    w->pid = fork_piped(&w->fd);
    if (w->pid == 0)
        ha_child_lock(w->fd, url, name, kind, watchdog_ms);
    assert_int_equal(read(w->fd, &c, 1), 1);
    assert_int_equal(c, 'w');
}

/* When the waiter got the lock (monotonic s), or -1 if it did not within
 * timeout_s; reaps it either way. */
static double ha_waiter_result(struct ha_waiter *w, double timeout_s)
{
    char buf[64];
    size_t len = 0;
    double end = tu_now() + timeout_s, t = -1;
    int st;

    while (len < sizeof buf - 1 && tu_now() < end) {
        struct pollfd pf = { w->fd, POLLIN, 0 };
        ssize_t n;
        if (poll(&pf, 1, 50) <= 0)
            continue;
        n = read(w->fd, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(buf, '\n', len))
            break;
    }
    buf[len] = 0;
    if (memchr(buf, '\n', len))
        t = strtod(buf, NULL);
    else
        kill(w->pid, SIGKILL);
    close(w->fd);
    waitpid(w->pid, &st, 0);
    if (t >= 0 && !child_exit_ok(st, 0))
        fail_msg("waiter exited with status %d", st);
    return t;
}

/* When the last renewal of key (lease lease_ms) on one of the nodes (as
 * pttl(topo, node, key) reads it) happened, if that is after since (monotonic s): a renewal sets the TTL
 * to the lease, so now - (lease - PTTL) is when it ran.  Waits for one up
 * to timeout_s; -1 if none came.  A node that does not answer (dead,
 * stopped) is skipped. */
static double ha_renewed_since(long long (*pttl)(void *, int, const char *),
                               void *topo, const int *nodes, int n,
                               const char *key, long long lease_ms,
                               double since, double timeout_s)
{
    double end = tu_now() + timeout_s, at;
    long long v;
    int i;

    while (tu_now() < end) {
        for (i = 0; i < n; i++) {
            v = pttl(topo, nodes[i], key);
            at = tu_now() - (double)(lease_ms - v) / 1000.0;
            if (v > 0 && at > since + 0.002)
                return at;
        }
        tu_sleep_ms(10);
    }
    return -1;
}

#endif
