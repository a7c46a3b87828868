/*
 * scripthelp.h: the library's Lua scripts run by a test program itself
 * (EVAL), as the build joins them, to set up what a race would leave or
 * to play another client's part (test_wake, test_fair).  Against the
 * program's server connection r, which it defines before including this.
 * Static: each program gets its own copy.
 */
#ifndef DISTLOCK_SCRIPTHELP_H
#define DISTLOCK_SCRIPTHELP_H

/* A script of the library, as the build joins it (lua2c.sh): its
 * '--#include NAME.lua' lines replaced by the preludes, read from the
 * source tree.  malloc'd. */
static char *script_text(const char *name)
{
    const char *src = getenv("srcdir");
    char path[4096], line[1024], *out = NULL;
    size_t len = 0;
    FILE *f, *inc;

    snprintf(path, sizeof path, "%s/lua/%s.lua", src ? src : ".", name);
    f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s (srcdir=%s)", path, src ? src : "unset");
    while (fgets(line, sizeof line, f)) {
        char part[1024];
        FILE *from = NULL;
        if (strncmp(line, "--#include ", 11) == 0) {
            line[strcspn(line, "\n")] = 0;
            snprintf(path, sizeof path, "%s/lua/%s", src ? src : ".",
                     line + 11);
            inc = fopen(path, "r");
            if (!inc)
                fail_msg("cannot read %s", path);
            from = inc;
        }
        do {
            const char *add = line;
            if (from) {
                if (!fgets(part, sizeof part, from))
                    break;
                add = part;
            }
            out = realloc(out, len + strlen(add) + 1);
            assert_non_null(out);
            memcpy(out + len, add, strlen(add) + 1);
            len += strlen(add);
        } while (from);
        if (from)
            fclose(from);
    }
    fclose(f);
    return out;
}

/* EVAL of the library's script name with the keys and args given (NULL
 * ended, keys first, nkeys of them). */
static redisReply *run_script(const char *name, int nkeys, ...)
{
    const char *argv[16];
    char nk[8];
    char *body = script_text(name);
    redisReply *x;
    va_list ap;
    int argc = 3;

    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVAL";
    argv[1] = body;
    argv[2] = nk;
    va_start(ap, nkeys);
    while (argc < 16 && (argv[argc] = va_arg(ap, const char *)) != NULL)
        argc++;
    va_end(ap);
    x = tu_cmdv(&r, argc, argv, NULL);
    free(body);
    assert_non_null(x);
    return x;
}

#endif
