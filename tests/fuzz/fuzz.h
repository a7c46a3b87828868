/* fuzz.h: what every fuzz target shares.  A target defines
 * LLVMFuzzerTestOneInput; built with --enable-fuzzing, libFuzzer drives it
 * (scripts/test.sh, tests/fuzz/run.sh), otherwise replay.c feeds it each
 * file of its seed corpus and make check runs that. */
#ifndef DIST_FUZZ_H
#define DIST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: a crash that libFuzzer records with its input, and a
 * failure of the replay. */
#define FUZZ_CHECK(cond)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__,       \
                    __LINE__, #cond);                                        \
            abort();                                                         \
        }                                                                    \
    } while (0)

#endif
