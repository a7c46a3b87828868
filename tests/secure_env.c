/* secure_env: what the library takes from the environment, for
 * test_secure_env.sh.  "secure_env report" prints whether the process runs
 * in secure-execution mode and the settings the library read; without
 * arguments (as a test of its own) it checks that an ordinary process
 * does take DISTLOCK_URL and DISTLOCK_TIMEOUT_MS from its environment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "engine/internal.h"

int main(int argc, char **argv)
{
    struct dist__cfg c;

    if (argc > 1 && strcmp(argv[1], "report") == 0) {
        dist__cfg_get(&c);
        printf("secure=%lu host=%s port=%d timeout=%lu\n",
               getauxval(AT_SECURE), c.host, c.port, c.timeout_ms);
        fflush(stdout);
        /* no exit handlers: LeakSanitizer's cannot inspect a set-user-ID
         * process (it is not dumpable) and would fail it */
        _exit(0);
    }
    setenv("DISTLOCK_URL", "redis://192.0.2.7:4242", 1);
    setenv("DISTLOCK_TIMEOUT_MS", "1234", 1);
    dist__cfg_get(&c);
    if (strcmp(c.host, "192.0.2.7") != 0 || c.port != 4242 ||
        c.timeout_ms != 1234) {
        fprintf(stderr,
                "secure_env: the environment was not read (%s:%d, "
                "%lu ms)\n",
                c.host, c.port, c.timeout_ms);
        return 1;
    }
    return 0;
}
