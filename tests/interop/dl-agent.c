/*
 * dl-agent: the distlock side of the Redisson interop suite.  Reads one
 * command a line on stdin, runs it on its main thread (distlock holds
 * belong to a thread) and answers one line on stdout:
 *
 *   <status> <start ns> <end ns> [value]
 *
 * status is ok, busy (a try that did not get the lock) or err; the times
 * are CLOCK_MONOTONIC at the start and the end of the call, which is the
 * clock Java's System.nanoTime reads on Linux, so the suite can measure a
 * wake-up across processes.  The commands (NAME is a lock name):
 *
 *   lock NAME | flock NAME          dist_mutex_lock (flock: a fair mutex)
 *   trylock NAME MS | ftrylock NAME MS   dist_mutex_timedlock, MS from now
 *   unlock NAME | funlock NAME      dist_mutex_unlock
 *   token NAME                      dist_mutex_token of the hold
 *   rlock NAME | wlock NAME         dist_rwlock_rdlock / wrlock
 *   tryrlock NAME MS | trywlock NAME MS
 *   rwunlock NAME                   dist_rwlock_unlock (write holds first)
 *   wtoken NAME                     dist_rwlock_token
 *   count NAME KEY N                N times: lock, GET KEY, SET KEY +1, unlock
 *   sacquire NAME MS                a Redisson-mode dist_sem_t (RSemaphore's
 *                                   layout): trywait (MS 0) or timedwait
 *   srelease NAME | svalue NAME     dist_sem_post / dist_sem_getvalue
 *   pid | sleep MS | quit
 *
 * INTEROP_RW_PREFER_WRITER=1 makes every rwlock writer-preferring.
 * The server is DISTLOCK_URL's; count's GET and SET go to the server of
 * INTEROP_REDIS (host:port), a single server.  The library reads every
 * other setting from its environment (DISTLOCK_WATCHDOG_MS, ...).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "distlock.h"
#include "../clockhelp.h"

#define MAX_LOCKS 64

enum kind { K_MUTEX, K_FAIR, K_RW };

struct lockent {
    enum kind kind;
    char *name;
    dist_mutex_t m;
    dist_rwlock_t rw;
};

static struct lockent locks[MAX_LOCKS];
static int nlocks;

struct sement {
    char *name;
    dist_sem_t s;
};

static struct sement sems[MAX_LOCKS];
static int nsems;

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The lock object of that name and kind, made at first use. */
static struct lockent *find(const char *name, enum kind kind)
{
    struct lockent *e;
    int i, rc;

    for (i = 0; i < nlocks; i++)
        if (locks[i].kind == kind && strcmp(locks[i].name, name) == 0)
            return &locks[i];
    if (nlocks == MAX_LOCKS)
        return NULL;
    e = &locks[nlocks];
    e->kind = kind;
    if (kind == K_RW) {
        dist_rwlockattr_t a;
        const char *pw = getenv("INTEROP_RW_PREFER_WRITER");
        dist_rwlockattr_init(&a);
        if (pw && *pw == '1')
            dist_rwlockattr_setkind(&a, DIST_RWLOCK_PREFER_WRITER);
        rc = dist_rwlock_init(&e->rw, name, &a);
        dist_rwlockattr_destroy(&a);
    } else {
        dist_mutexattr_t a;
        dist_mutexattr_init(&a);
        dist_mutexattr_setfair(&a, kind == K_FAIR);
        rc = dist_mutex_init(&e->m, name, &a);
        dist_mutexattr_destroy(&a);
    }
    if (rc != 0 || !(e->name = strdup(name)))
        return NULL;
    nlocks++;
    return e;
}

static redisContext *data_conn(void)
{
    static redisContext *c;
    const char *hp = getenv("INTEROP_REDIS");
    char host[64];
    const char *colon;

    if (c && !c->err)
        return c;
    if (c)
        redisFree(c);
    c = NULL;
    if (!hp || !(colon = strrchr(hp, ':')) ||
        (size_t)(colon - hp) >= sizeof host)
        return NULL;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = 0;
    c = redisConnect(host, atoi(colon + 1));
    return c;
}

/* One increment of KEY with GET and SET: not atomic on its own. */
static int bump(const char *key)
{
    redisContext *c = data_conn();
    redisReply *r;
    long long v = 0;
    char buf[32];

    if (!c || c->err)
        return EIO;
    r = redisCommand(c, "GET %s", key);
    if (!r)
        return EIO;
    if (r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    freeReplyObject(r);
    snprintf(buf, sizeof buf, "%lld", v + 1);
    r = redisCommand(c, "SET %s %s", key, buf);
    if (!r)
        return EIO;
    freeReplyObject(r);
    return 0;
}

static int count(struct lockent *e, const char *key, long n)
{
    long i;
    int rc;

    for (i = 0; i < n; i++) {
        if ((rc = dist_mutex_lock(&e->m)) != 0)
            return rc;
        rc = bump(key);
        dist_mutex_unlock(&e->m);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Runs one mutex command; *val gets a token where one is asked for. */
static int run_mutex(const char *cmd, struct lockent *e, long ms,
                     const char *key, uint64_t *val)
{
    struct timespec ts;

    if (!strcmp(cmd, "lock") || !strcmp(cmd, "flock"))
        return dist_mutex_lock(&e->m);
    if (!strcmp(cmd, "trylock") || !strcmp(cmd, "ftrylock")) {
        if (ms <= 0)
            return dist_mutex_trylock(&e->m);
        ts = clock_in_ms(CLOCK_REALTIME, ms);
        return dist_mutex_timedlock(&e->m, &ts);
    }
    if (!strcmp(cmd, "unlock") || !strcmp(cmd, "funlock"))
        return dist_mutex_unlock(&e->m);
    if (!strcmp(cmd, "token"))
        return dist_mutex_token(&e->m, val);
    if (!strcmp(cmd, "count"))
        return count(e, key, ms);
    return EINVAL;
}

static int run_rw(const char *cmd, struct lockent *e, long ms, uint64_t *val)
{
    struct timespec ts = clock_in_ms(CLOCK_REALTIME, ms);

    if (!strcmp(cmd, "rlock"))
        return dist_rwlock_rdlock(&e->rw);
    if (!strcmp(cmd, "wlock"))
        return dist_rwlock_wrlock(&e->rw);
    if (!strcmp(cmd, "tryrlock"))
        return ms <= 0 ? dist_rwlock_tryrdlock(&e->rw)
                       : dist_rwlock_timedrdlock(&e->rw, &ts);
    if (!strcmp(cmd, "trywlock"))
        return ms <= 0 ? dist_rwlock_trywrlock(&e->rw)
                       : dist_rwlock_timedwrlock(&e->rw, &ts);
    if (!strcmp(cmd, "rwunlock"))
        return dist_rwlock_unlock(&e->rw);
    if (!strcmp(cmd, "wtoken"))
        return dist_rwlock_token(&e->rw, val);
    return EINVAL;
}

/* The Redisson-mode semaphore of that name, made at first use (0 permits
 * if it does not exist yet: the Java side sets them). */
static struct sement *find_sem(const char *name)
{
    dist_semattr_t a;
    int i, rc;

    for (i = 0; i < nsems; i++)
        if (strcmp(sems[i].name, name) == 0)
            return &sems[i];
    if (nsems == MAX_LOCKS)
        return NULL;
    dist_semattr_init(&a);
    dist_semattr_setmode(&a, DIST_SEM_REDISSON);
    rc = dist_sem_init(&sems[nsems].s, name, 0, &a);
    if (rc != 0 || !(sems[nsems].name = strdup(name)))
        return NULL;
    return &sems[nsems++];
}

static int run_sem(const char *cmd, struct sement *e, long ms, uint64_t *val)
{
    struct timespec ts = clock_in_ms(CLOCK_REALTIME, ms);
    int rc, v = 0;

    if (!strcmp(cmd, "sacquire"))
        return ms <= 0 ? dist_sem_trywait(&e->s)
                       : dist_sem_timedwait(&e->s, &ts);
    if (!strcmp(cmd, "srelease"))
        return dist_sem_post(&e->s);
    if (!strcmp(cmd, "svalue")) {
        rc = dist_sem_getvalue(&e->s, &v);
        *val = (uint64_t)v;
        return rc;
    }
    return EINVAL;
}

static enum kind kind_of(const char *cmd)
{
    if (cmd[0] == 'f')
        return K_FAIR;
    if (strstr(cmd, "rlock") || strstr(cmd, "wlock") ||
        !strcmp(cmd, "rwunlock") || !strcmp(cmd, "wtoken"))
        return K_RW;
    return K_MUTEX;
}

/* Runs one command line and prints its answer; 1 when told to quit. */
static int run_line(char *line)
{
    char *cmd = strtok(line, " \t\r\n");
    char *name = strtok(NULL, " \t\r\n");
    char *arg = strtok(NULL, " \t\r\n");
    char *arg2 = strtok(NULL, " \t\r\n");
    uint64_t t0 = mono_ns(), val = 0;
    struct lockent *e;
    int rc, has_val = 0;

    if (!cmd)
        return 0;
    if (!strcmp(cmd, "quit"))
        return 1;
    if (!strcmp(cmd, "pid") || !strcmp(cmd, "sleep")) {
        if (cmd[0] == 's' && name)
            usleep((useconds_t)atol(name) * 1000);
        printf("ok %llu %llu %ld\n", (unsigned long long)t0,
               (unsigned long long)mono_ns(), (long)getpid());
        return 0;
    }
    if (cmd[0] == 's' && name && strcmp(cmd, "sleep") != 0) {
        struct sement *se = find_sem(name);
        rc = se ? run_sem(cmd, se, arg ? atol(arg) : 0, &val) : EINVAL;
        has_val = !strcmp(cmd, "svalue");
        goto answer;
    }
    if (!name || !(e = find(name, kind_of(cmd)))) {
        printf("err %llu %llu EINVAL bad command or name\n",
               (unsigned long long)t0, (unsigned long long)mono_ns());
        return 0;
    }
    if (e->kind == K_RW)
        rc = run_rw(cmd, e, arg ? atol(arg) : 0, &val);
    else if (!strcmp(cmd, "count"))
        rc = run_mutex(cmd, e, arg2 ? atol(arg2) : 0, arg, &val);
    else
        rc = run_mutex(cmd, e, arg ? atol(arg) : 0, NULL, &val);
    has_val = strstr(cmd, "token") != NULL;
answer:
    if (rc == 0)
        printf(has_val ? "ok %llu %llu %llu\n" : "ok %llu %llu\n",
               (unsigned long long)t0, (unsigned long long)mono_ns(),
               (unsigned long long)val);
    else if (rc == EBUSY || rc == ETIMEDOUT || rc == EAGAIN)
        printf("busy %llu %llu\n", (unsigned long long)t0,
               (unsigned long long)mono_ns());
    else
        printf("err %llu %llu %d %s\n", (unsigned long long)t0,
               (unsigned long long)mono_ns(), rc, dist_last_error());
    return 0;
}

int main(void)
{
    char line[8192];

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %ld\n", (long)getpid());
    while (fgets(line, sizeof line, stdin))
        if (run_line(line))
            break;
    dist_shutdown();
    return 0;
}
