/* cmd_sem.c: distlock sem-set NAME N: sets a semaphore's free permits
 * through the library's own call (dist_sem_setvalue), so that the tool and
 * the library change the count with one script and one rule. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tool.h"

struct sem_set_opt {
    int redisson;
};

static int sem_opt(int argc, char **argv, int *i, void *arg)
{
    struct sem_set_opt *so = arg;

    (void)argc;
    if (strcmp(argv[*i], "--redisson") == 0) {
        so->redisson = 1;
        return 1;
    }
    return 0;
}

/* The permits N: digits only, within what dist_sem_setvalue takes. */
static unsigned permits_arg(const char *v)
{
    long long n;

    if (!is_digits(v, strlen(v)) || parse_ll(v, strlen(v), &n) != 0 ||
        n > DIST_SEM_VALUE_MAX)
        usage_error("N must be a whole number from 0 to %ld, not '%s'",
                    (long)DIST_SEM_VALUE_MAX, v);
    return (unsigned)n;
}

static void sem_set_print(const char *name, int redisson, int value)
{
    struct sb b = { 0 };

    if (opt.json) {
        sb_json_name(&b, name);
        sb_printf(&b, ",\"kind\":\"%s\",\"free\":%d}",
                  redisson ? "rsem" : "sem", value);
    } else {
        sb_adds(&b, "semaphore ");
        sb_human(&b, name, strlen(name));
        sb_printf(&b, ": %d free permit%s", value, value == 1 ? "" : "s");
    }
    sb_flush_line(&b);
    sb_free(&b);
}

int cmd_sem_set(int argc, char **argv)
{
    struct sem_set_opt so = { 0 };
    const char *ops[2] = { NULL, NULL };
    dist_semattr_t attr;
    dist_sem_t s;
    int i, rc, value = -1;
    unsigned n;

    for (i = 0; i < argc; i++) {
        if (sem_opt(argc, argv, &i, &so) ||
            (argv[i][0] == '-' && argv[i][1] && common_opt(argc, argv, &i)))
            continue;
        if (argv[i][0] == '-' && argv[i][1])
            usage_error("unknown option '%s'", argv[i]);
        if (ops[1])
            usage_error("unexpected argument '%s'", argv[i]);
        ops[ops[0] ? 1 : 0] = argv[i];
    }
    if (!ops[1])
        usage_error("sem-set needs NAME and N");
    check_name(ops[0]);
    n = permits_arg(ops[1]);
    redis_setup();
    dist_semattr_init(&attr);
    dist_semattr_setmode(&attr,
                         so.redisson ? DIST_SEM_REDISSON : DIST_SEM_LEASED);
    if ((rc = dist_sem_init(&s, ops[0], n, &attr)) != 0)
        die(EX_USAGE, "%s", dist_last_error());
    rc = dist_sem_setvalue(&s, n);
    if (rc == 0)
        rc = dist_sem_getvalue(&s, &value);
    if (rc != 0)
        die(rc == EINVAL ? EX_USAGE : EX_REDIS, "cannot set '%s': %s", ops[0],
            dist_last_error());
    dist_sem_destroy(&s);
    dist_semattr_destroy(&attr);
    sem_set_print(ops[0], so.redisson, value);
    return 0;
}
