/* names.c: the Redis names of a lock: N itself and the names Redisson and
 * distlock derive from it (channels, token, fair queue, rwlock's keys). */
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "route.h"

/* Redisson's rule: braces go around N unless N already has one, so that
 * every derived name hashes to N's cluster slot and stays byte-identical to
 * what a Java client computes. */
static const char *const derived_prefix[] = {
    "redisson_lock__channel:", "redisson_lock_token:", "redisson_lock_queue:",
    "redisson_lock_timeout:", "redisson_rwlock:", "distlock_rwlock_writers:",
    "distlock_fair_waiters:",
};
#define NDERIVED (sizeof derived_prefix / sizeof derived_prefix[0])

/* Writes prefix, N (in braces when wanted), suffix and a NUL at p. */
static size_t derive_at(char *p, const char *prefix, size_t plen,
                        const struct dist__buf *name, int braces,
                        const char *suffix, size_t slen)
{
    char *s = p;

    memcpy(s, prefix, plen);
    s += plen;
    if (braces)
        *s++ = '{';
    memcpy(s, name->p, name->len);
    s += name->len;
    if (braces)
        *s++ = '}';
    memcpy(s, suffix, slen);
    s += slen;
    *s = 0;
    return (size_t)(s - p);
}

/* Redisson's rule: braces go around N unless N already has one, so that
 * every derived name hashes to N's cluster slot and stays byte-identical to
 * what a Java client computes. */
struct dist__names *dist__names_new(const char *name, size_t len)
{
    struct dist__buf *field[NDERIVED];
    struct dist__names *n;
    size_t i, total = len + 1;
    int braces = memchr(name, '{', len) == NULL;
    char *p;

    for (i = 0; i < NDERIVED; i++)
        total += strlen(derived_prefix[i]) + len + (braces ? 2 : 0) + 1;
    n = malloc(sizeof *n + total);
    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    n->braces = braces;
    p = n->mem;
    memcpy(p, name, len);
    p[len] = 0;
    n->name.p = p;
    n->name.len = len;
    p += len + 1;

    field[0] = &n->chan;
    field[1] = &n->token;
    field[2] = &n->queue;
    field[3] = &n->timeout;
    field[4] = &n->rwchan;
    field[5] = &n->writers;
    field[6] = &n->fairwait;
    for (i = 0; i < NDERIVED; i++) {
        size_t l = derive_at(p, derived_prefix[i], strlen(derived_prefix[i]),
                             &n->name, braces, "", 0);
        field[i]->p = p;
        field[i]->len = l;
        p += l + 1;
    }
    n->fairkeys[0] = n->timeout;
    n->fairkeys[1] = n->queue;
    n->fairkeys[2] = n->fairwait;
    n->fairkeys[3] = n->chan;
    /* On a cluster a script's keys must share a slot.  They do, unless N
     * has a '{' that opens no tag ("a{b", "a{}b": N is hashed whole, the
     * derived names too but with a prefix) or a '}' without a '{' ("a}b":
     * the braces put around N close early). */
    n->slot = dist__keyslot(n->name.p, n->name.len);
    for (i = 0; i < NDERIVED; i++)
        if (dist__keyslot(field[i]->p, field[i]->len) != n->slot)
            n->slot = -1;
    return n;
}

char *dist__names_derive(const struct dist__names *n, const char *prefix,
                         const char *suffix, size_t *len)
{
    size_t plen = strlen(prefix), slen = strlen(suffix);
    char *p = malloc(plen + n->name.len + 2 + slen + 1);

    if (!p)
        return NULL;
    *len = derive_at(p, prefix, plen, &n->name, n->braces, suffix, slen);
    return p;
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
