/* fuzz_names.c: a lock's Redis names (src/route/names.c) and the cluster key
 * slot (src/route/topo.c) on any name.  Checks that every derived name of a name
 * that fits a cluster hashes to its slot, that twins ("q", "{q}") share
 * every derived name, and CRC16 against a bitwise reference. */
#include <string.h>

#include "fuzz.h"
#include "engine/internal.h"

/* CRC16/XMODEM, one bit at a time (Redis Cluster's key hash) */
static unsigned ref_crc16(const uint8_t *p, size_t n)
{
    unsigned crc = 0;
    size_t i;
    int b;

    for (i = 0; i < n; i++) {
        crc ^= (unsigned)p[i] << 8;
        for (b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff
                                 : (crc << 1) & 0xffff;
    }
    return crc;
}

static int same(const struct dist__buf *a, const struct dist__buf *b)
{
    return a->len == b->len && memcmp(a->p, b->p, a->len) == 0;
}

static void check_twin(const struct dist__names *n)
{
    struct dist__names *t;
    size_t tlen = 0;
    char *twin = dist__names_twin(n->name.p, n->name.len, &tlen);

    if (!twin)
        return;
    FUZZ_CHECK(tlen != n->name.len || memcmp(twin, n->name.p, tlen) != 0);
    t = dist__names_new(twin, tlen);
    if (t) {
        FUZZ_CHECK(same(&t->chan, &n->chan) && same(&t->token, &n->token) &&
                   same(&t->queue, &n->queue) &&
                   same(&t->timeout, &n->timeout) &&
                   same(&t->rwchan, &n->rwchan) &&
                   same(&t->writers, &n->writers) &&
                   same(&t->fairwait, &n->fairwait));
        dist__names_unref(t);
    }
    free(twin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *name = (const char *)data;
    struct dist__names *n;
    size_t len = 0;
    char *k;
    int slot;

    if (size > 4096)
        return 0;
    FUZZ_CHECK(dist__crc16(name, size) == ref_crc16(data, size));
    slot = dist__keyslot(name, size);
    FUZZ_CHECK(slot >= 0 && slot < 16384);
    n = dist__names_new(name, size);
    if (!n)
        return 0;
    FUZZ_CHECK(n->name.len == size && memcmp(n->name.p, data, size) == 0);
    FUZZ_CHECK(n->slot == -1 || n->slot == slot);
    k = dist__names_derive(n, "redisson_lock__channel:", ":owner:1", &len);
    if (k) {
        FUZZ_CHECK(strlen(k) <= len);   /* a NUL in the name cuts strlen */
        if (n->slot >= 0)
            FUZZ_CHECK(dist__keyslot(k, len) == n->slot);
        free(k);
    }
    check_twin(n);
    dist__names_unref(n);
    return 0;
}
