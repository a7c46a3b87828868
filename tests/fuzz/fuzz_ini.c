/* fuzz_ini.c: the preload configuration reader (src/preload/config.c and
 * value.c, through inih) on any file.  A refusal is fine; a crash, a leak
 * or a section with more qualifiers than it has room for is not. */
#define _GNU_SOURCE
#include <string.h>

#include "fuzz.h"
#include "preload/preload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pl_config cfg;
    size_t i;
    FILE *f;

    if (size == 0)
        return 0; /* fmemopen refuses an empty buffer */
    f = fmemopen((void *)data, size, "r");
    if (!f)
        return 0;
    pl_config_read(f, "fuzz.ini", &cfg);
    fclose(f);
    for (i = 0; i < cfg.nsec; i++)
        FUZZ_CHECK(cfg.sec[i].nqual >= 0 &&
                   cfg.sec[i].nqual <= (int)(sizeof cfg.sec[i].qual /
                                             sizeof cfg.sec[i].qual[0]));
    pl_config_free(&cfg);
    pl_msg_drop(); /* the messages of this input */
    return 0;
}
