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

/* Every derived name of n (free() frees it); NULL out of memory. */
static struct dist__buf *all_names(const struct dist__names *n)
{
    enum dist__nm which[DIST__N_COUNT];
    int i;

    for (i = 0; i < DIST__N_COUNT; i++)
        which[i] = (enum dist__nm)i;
    return dist__names_set(n, which, DIST__N_COUNT);
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
        struct dist__buf *a = all_names(t), *b = all_names(n);
        int i;

        for (i = 0; a && b && i < DIST__N_COUNT; i++)
            FUZZ_CHECK(same(&a[i], &b[i]));
        free(a);
        free(b);
        dist__names_unref(t);
    }
    free(twin);
}

/* Every derived name hashes to the slot names_new found, made on a
 * call's stack or kept, byte for byte the same. */
static void check_all(const struct dist__names *n)
{
    enum dist__nm which[DIST__N_COUNT];
    struct dist__buf *set = all_names(n), out[DIST__N_COUNT];
    struct dist__room room = { 0 };
    int i;

    for (i = 0; i < DIST__N_COUNT; i++)
        which[i] = (enum dist__nm)i;
    if (set && dist__names_keys(n, which, DIST__N_COUNT, out, &room) == 0)
        for (i = 0; i < DIST__N_COUNT; i++) {
            FUZZ_CHECK(same(&out[i], &set[i]));
            if (n->slot >= 0)
                FUZZ_CHECK(dist__keyslot(set[i].p, set[i].len) == n->slot);
        }
    dist__room_done(&room);
    free(set);
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
    k = dist__names_waiter_chan(n, "owner:1", 7, &len);
    if (k) {
        FUZZ_CHECK(strlen(k) <= len); /* a NUL in the name cuts strlen */
        if (n->slot >= 0)
            FUZZ_CHECK(dist__keyslot(k, len) == n->slot);
        free(k);
    }
    check_all(n);
    check_twin(n);
    dist__names_unref(n);
    return 0;
}
