/* fuzz_elf.c: the shim's ELF symbol-table reader (src/preload/elf.c) on
 * any bytes.  Every symbol it hands out must lie inside the input, with a
 * NUL-terminated name inside the string table.
 *
 * An input whose first line is "hex" is the file in hex digits (anything
 * else on the following lines is skipped), so that the seed corpus, small
 * object files, is text; any other input is the file's bytes. */
#define _GNU_SOURCE
#include <string.h>

#include "fuzz.h"
#include "preload/preload.h"

struct seen {
    const struct pl_elf *e;
    size_t n;
};

static int on_sym(void *arg, const Elf64_Sym *s, const char *name,
                  const char *file)
{
    struct seen *w = arg;
    const unsigned char *lo = w->e->map, *hi = lo + w->e->size;

    FUZZ_CHECK((const unsigned char *)s >= lo &&
               (const unsigned char *)(s + 1) <= hi);
    FUZZ_CHECK((const unsigned char *)name >= lo &&
               (const unsigned char *)name + strlen(name) < hi);
    if (file)
        FUZZ_CHECK((const unsigned char *)file + strlen(file) < hi);
    w->n++;
    return 0;
}

static int nibble(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The file to read, in a buffer of its own (the reader's structures want
 * the alignment a mapping has); its size in *n. */
static unsigned char *file_of(const uint8_t *data, size_t size, size_t *n)
{
    unsigned char *f = malloc(size ? size : 1);
    size_t i;
    int hi = -1, v;

    if (!f)
        return NULL;
    if (size < 4 || memcmp(data, "hex\n", 4) != 0) {
        memcpy(f, data, size);
        *n = size;
        return f;
    }
    *n = 0;
    for (i = 4; i < size; i++) {
        if ((v = nibble(data[i])) < 0)
            continue;
        if (hi < 0) {
            hi = v;
        } else {
            f[(*n)++] = (unsigned char)(hi << 4 | v);
            hi = -1;
        }
    }
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pl_elf e;
    struct seen w = { &e, 0 };
    char why[200];
    unsigned char *copy = file_of(data, size, &size);

    if (!copy)
        return 0;
    if (pl_elf_parse(&e, copy, size, why, sizeof why) == 0) {
        pl_elf_each(&e, on_sym, &w);
        FUZZ_CHECK(w.n <= e.nsym);
        pl_elf_close(&e);
    } else {
        FUZZ_CHECK(why[0]);
    }
    free(copy);
    return 0;
}
