/* names.c: the Redis names of a lock: N itself and the names Redisson and
 * distlock derive from it (channels, token, fair queue, rwlock's keys, the
 * keys of conditions, semaphores and barriers).  Every prefix is spelled
 * here and nowhere else in the library or the tool. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "topo.h"

#define P(s)                                                                 \
    {                                                                        \
        s, sizeof s - 1                                                      \
    }

/* Redisson's rule: braces go around N unless N already has one, so that
 * every derived name hashes to N's cluster slot and stays byte-identical to
 * what a Java client computes. */
static const struct {
    const char *s;
    size_t len;
} prefix[DIST__N_COUNT] = {
    [DIST__N_CHAN] = P("redisson_lock__channel:"),
    [DIST__N_TOKEN] = P("redisson_lock_token:"),
    [DIST__N_QUEUE] = P("redisson_lock_queue:"),
    [DIST__N_TIMEOUT] = P("redisson_lock_timeout:"),
    [DIST__N_RWCHAN] = P("redisson_rwlock:"),
    [DIST__N_RSEM] = P("redisson_sc:"),
    [DIST__N_RW_WRITERS] = P("distlock_rwlock_writers:"),
    [DIST__N_RW_READERS] = P("distlock_rwlock_readers:"),
    [DIST__N_FAIR_WAITERS] = P("distlock_fair_waiters:"),
    [DIST__N_MUTEX_WAITERS] = P("distlock_mutex_waiters:"),
    [DIST__N_COND_WAITERS] = P("distlock_cond_waiters:"),
    [DIST__N_COND_QUEUE] = P("distlock_cond_queue:"),
    [DIST__N_COND_SIGNALLED] = P("distlock_cond_signalled:"),
    [DIST__N_COND_CHAN] = P("distlock_cond:"),
    [DIST__N_SEM] = P("distlock_sem:"),
    [DIST__N_SEM_HOLDS] = P("distlock_sem_holds:"),
    [DIST__N_SEM_LEASES] = P("distlock_sem_leases:"),
    [DIST__N_SEM_CHAN] = P("distlock_sem_channel:"),
    [DIST__N_BARRIER] = P("distlock_barrier:"),
    [DIST__N_BARRIER_MEMBERS] = P("distlock_barrier_members:"),
    [DIST__N_BARRIER_CHAN] = P("distlock_barrier_channel:"),
    [DIST__N_ROBUST] = P("distlock_robust:"),
};

/* What follows a read hold's owner in its timeout keys (Redisson's). */
static const char read_timeout[] = ":rwlock_timeout:";

/* The first and last names of conditions, semaphores and barriers. */
#define FIRST_OBJECT DIST__N_COND_WAITERS
#define LAST_OBJECT  DIST__N_BARRIER_CHAN

const char *dist__names_prefix(enum dist__nm which)
{
    return prefix[which].s;
}

const char *dist__names_own_glob(void)
{
    return "distlock_*";
}

static int starts(const char *k, size_t n, const char *p, size_t pl)
{
    return n >= pl && memcmp(k, p, pl) == 0;
}

int dist__names_is_object(const char *k, size_t n)
{
    int i;

    for (i = FIRST_OBJECT; i <= LAST_OBJECT; i++)
        if (starts(k, n, prefix[i].s, prefix[i].len))
            return 1;
    return 0;
}

int dist__names_is_derived(const char *k, size_t n)
{
    int i;

    for (i = 0; i < DIST__N_COUNT; i++)
        if (starts(k, n, prefix[i].s, prefix[i].len))
            return 1;
    return memmem(k, n, read_timeout, sizeof read_timeout - 1) != NULL;
}

/* Writes prefix and N (in braces when wanted) at p; returns the end. */
static char *key_at(char *p, const char *pre, size_t plen,
                    const struct dist__names *n)
{
    memcpy(p, pre, plen);
    p += plen;
    *p = '{';
    p += n->braces;
    memcpy(p, n->name.p, n->name.len);
    p += n->name.len;
    *p = '}';
    return p + n->braces;
}

/* Writes prefix, N (in braces when wanted), suffix and a NUL at p. */
static size_t derive_at(char *p, const char *pre, size_t plen,
                        const struct dist__names *n, const char *suffix,
                        size_t slen)
{
    char *s = key_at(p, pre, plen, n);

    memcpy(s, suffix, slen);
    s[slen] = 0;
    return (size_t)(s + slen - p);
}

/* The bytes of derived name which, its NUL included. */
static size_t derived_size(const struct dist__names *n, enum dist__nm which)
{
    return prefix[which].len + n->name.len + 2 * (size_t)n->braces + 1;
}

/* On a cluster a script's keys must share a slot.  They do, unless N has
 * a '{' that opens no tag ("a{b", "a{}b": N is hashed whole, the derived
 * names too but with a prefix), a '}' without a '{' ("a}b": the braces
 * put around N close early), or N is empty.  The usual names are told apart without
 * making a derived one. */
static int slot_of(const struct dist__names *n)
{
    const char *p = n->name.p, *open = memchr(p, '{', n->name.len), *close;
    int slot = dist__keyslot(p, n->name.len), i;
    size_t room = 0;
    char *buf;

    /* derived names hash all of N, as N does; but an empty N derives an
     * empty tag "{}", which hashes the whole derived name */
    if (n->name.len > 0 && !open && !memchr(p, '}', n->name.len))
        return slot;
    close = open ? memchr(open + 1, '}', n->name.len - (size_t)(open + 1 - p))
                 : NULL;
    if (open && close && close > open + 1)
        return slot; /* the same tag as N's */
    for (i = 0; i < DIST__N_COUNT; i++)
        if (derived_size(n, i) > room)
            room = derived_size(n, i);
    if (!(buf = malloc(room)))
        return -1; /* then the cluster's checks refuse it */
    for (i = 0; i < DIST__N_COUNT && slot >= 0; i++)
        if (dist__keyslot(buf, derive_at(buf, prefix[i].s, prefix[i].len, n,
                                         "", 0)) != slot)
            slot = -1;
    free(buf);
    return slot;
}

struct dist__names *dist__names_new(const char *name, size_t len)
{
    struct dist__names *n = malloc(sizeof *n + len + 1);

    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    n->braces = memchr(name, '{', len) == NULL;
    memcpy(n->mem, name, len);
    n->mem[len] = 0;
    n->name.p = n->mem;
    n->name.len = len;
    n->slot = slot_of(n);
    return n;
}

/* Fills out[] with which[]'s names at p (room enough). */
static void keys_at(const struct dist__names *n, const enum dist__nm *which,
                    int count, struct dist__buf *out, char *p)
{
    int i;

    for (i = 0; i < count; i++) {
        char *end = key_at(p, prefix[which[i]].s, prefix[which[i]].len, n);

        *end = 0;
        out[i].p = p;
        out[i].len = (size_t)(end - p);
        p = end + 1;
    }
}

int dist__names_keys(const struct dist__names *n, const enum dist__nm *which,
                     int count, struct dist__buf *out,
                     struct dist__room *room)
{
    size_t total = 0;
    char *p = room->mem;
    int i;

    room->heap = NULL;
    for (i = 0; i < count; i++)
        total += derived_size(n, which[i]);
    if (total > sizeof room->mem && !(p = room->heap = malloc(total)))
        return ENOMEM; /* a name of hundreds of bytes only */
    keys_at(n, which, count, out, p);
    return 0;
}

struct dist__buf *dist__names_set(const struct dist__names *n,
                                  const enum dist__nm *which, int count)
{
    size_t total = (size_t)count * sizeof(struct dist__buf);
    struct dist__buf *set;
    int i;

    for (i = 0; i < count; i++)
        total += derived_size(n, which[i]);
    if (!(set = malloc(total)))
        return NULL;
    keys_at(n, which, count, set, (char *)(set + count));
    return set;
}

char *dist__names_derive(const struct dist__names *n, int which,
                         const char *suffix, size_t *len)
{
    const char *pre = which >= 0 ? prefix[which].s : "";
    size_t plen = which >= 0 ? prefix[which].len : 0, slen = strlen(suffix);
    char *p = malloc(plen + n->name.len + 2 + slen + 1);

    if (!p)
        return NULL;
    *len = derive_at(p, pre, plen, n, suffix, slen);
    return p;
}

int dist__names_derive_all(const struct dist__names *n,
                           const enum dist__nm *which, int count,
                           struct dist__buf *keys)
{
    int i;

    memset(keys, 0, sizeof *keys * (size_t)count);
    for (i = 0; i < count; i++)
        if (!(keys[i].p =
                  dist__names_derive(n, (int)which[i], "", &keys[i].len))) {
            dist__bufs_free(keys, i);
            return ENOMEM;
        }
    return 0;
}

/* "<which>{N}:<owner><tail>", malloc'd. */
static char *owned(const struct dist__names *n, int which, const char *owner,
                   size_t olen, const char *tail, size_t *len)
{
    size_t tl = strlen(tail);
    char *suffix = malloc(1 + olen + tl + 1), *p;

    if (!suffix)
        return NULL;
    suffix[0] = ':';
    memcpy(suffix + 1, owner, olen);
    memcpy(suffix + 1 + olen, tail, tl + 1);
    p = dist__names_derive(n, which, suffix, len);
    free(suffix);
    return p;
}

char *dist__names_waiter_chan(const struct dist__names *n, const char *owner,
                              size_t olen, size_t *len)
{
    return owned(n, DIST__N_CHAN, owner, olen, "", len);
}

char *dist__names_mutex_waiter_chan(const struct dist__names *n,
                                    const char *owner, size_t olen,
                                    size_t *len)
{
    return owned(n, DIST__N_MUTEX_WAITERS, owner, olen, "", len);
}

char *dist__names_read_prefix(const struct dist__names *n, const char *owner,
                              size_t olen, size_t *len)
{
    return owned(n, -1, owner, olen, read_timeout, len);
}

char *dist__names_twin(const char *name, size_t len, size_t *tlen)
{
    char *t;

    if (!memchr(name, '{', len)) {
        /* N derives "P{N}", which "{N}" derives as it stands */
        if (len == 0 || !(t = malloc(len + 3)))
            return NULL;
        t[0] = '{';
        memcpy(t + 1, name, len);
        t[len + 1] = '}';
        t[len + 2] = 0;
        *tlen = len + 2;
        return t;
    }
    /* "{X}" derives "P{X}", which X derives too if it has no '{' */
    if (len < 3 || name[0] != '{' || name[len - 1] != '}' ||
        memchr(name + 1, '{', len - 2) || !(t = malloc(len - 1)))
        return NULL;
    memcpy(t, name + 1, len - 2);
    t[len - 2] = 0;
    *tlen = len - 2;
    return t;
}

void dist__names_ref(struct dist__names *n)
{
    atomic_fetch_add(&n->refs, 1);
}

void dist__names_unref(struct dist__names *n)
{
    if (n && atomic_fetch_sub(&n->refs, 1) == 1)
        free(n);
}
