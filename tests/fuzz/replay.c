/* replay.c: the main of a fuzz target in the ordinary build.  Feeds the
 * target each file of its seed corpus, tests/fuzz/corpus/NAME (under
 * $srcdir, as make check sets it), or the files and directories named on
 * the command line (to replay a crash libFuzzer saved).  Fails when there
 * was nothing to feed: a missing corpus must not pass. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int feed_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    do {
        if (len == cap) {
            unsigned char *b = realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!b) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = b;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

/* Every regular file of dir; their number, or -1. */
static int feed_dir(const char *dir)
{
    struct dirent **names;
    char path[4096];
    int n, i, fed = 0;

    n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (i = 0; i < n; i++) {
        struct stat st;

        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            feed_file(path) == 0)
            fed++;
        free(names[i]);
    }
    free(names);
    return fed;
}

static int feed(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode))
        return feed_dir(path);
    return feed_file(path) == 0 ? 1 : -1;
}

int main(int argc, char **argv)
{
    const char *srcdir = getenv("srcdir");
    char dir[4096];
    int i, n, total = 0;

    if (argc < 2) {
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s",
                 srcdir && *srcdir ? srcdir : ".", FUZZ_CORPUS);
        n = feed(dir);
        printf("%s: %d inputs replayed\n", dir, n);
        return n > 0 ? 0 : 1;
    }
    for (i = 1; i < argc; i++) {
        if ((n = feed(argv[i])) < 0)
            return 1;
        total += n;
    }
    printf("%d inputs replayed\n", total);
    return total > 0 ? 0 : 1;
}
