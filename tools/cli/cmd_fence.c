/* cmd_fence.c: distlock fence load [URL] and distlock fence get FENCE: the
 * resource side of fencing tokens, a Redis function library (fence/fence.lua,
 * built into the tool as dist_fence_lib) that any client calls with FCALL. */
#include <stdio.h>
#include <string.h>

#include "tool.h"

#define MAX_MASTERS 128 /* as distlock list */

extern const char dist_fence_lib[]; /* fence_lib.c, made from fence.lua */

static void print_loaded(const struct dist__link *l, const char *lib)
{
    struct sb b = { 0 };

    if (opt.json) {
        sb_adds(&b, "{\"server\":");
        sb_jsonz(&b, dist__link_where(l));
        sb_adds(&b, ",\"library\":");
        sb_jsonz(&b, lib);
        sb_adds(
            &b,
            ",\"functions\":[\"distlock_fenced\",\"distlock_fence_get\"]}");
    } else {
        sb_printf(&b,
                  "%s: loaded function library '%s' "
                  "(distlock_fenced, distlock_fence_get)",
                  dist__link_where(l), lib);
    }
    sb_flush_line(&b);
    sb_free(&b);
}

/* FUNCTION LOAD REPLACE on one master: loading twice is harmless. */
static void load_on(const struct dist__addr *a)
{
    const char *argv[4] = { "FUNCTION", "LOAD", "REPLACE", dist_fence_lib };
    struct dist__link *l;
    redisReply *r;

    if (dist__route_open_master(&rcfg, a, rlimit, &l) != 0)
        die(EX_REDIS, "%s", redis_why());
    if (dist__link_cmd(l, rlimit, 4, argv, NULL, &r) != 0)
        die(EX_REDIS, "lost the connection to Redis at %s: %s",
            dist__link_where(l), dist__link_error(l));
    if (r->type == REDIS_REPLY_ERROR)
        die(EX_REDIS, "Redis at %s refused the function library: %s%s",
            dist__link_where(l), r->str,
            strstr(r->str, "unknown command") ? " (FUNCTION needs Redis 7)"
                                              : "");
    if (r->type != REDIS_REPLY_STRING)
        die(EX_REDIS, "Redis at %s: unexpected answer to FUNCTION LOAD",
            dist__link_where(l));
    print_loaded(l, r->str);
    freeReplyObject(r);
    dist__link_close(l);
}

static int fence_load(const char *url)
{
    struct dist__addr masters[MAX_MASTERS];
    int m, n;

    if (url)
        opt.url = url;
    redis_setup();
    /* one server, Sentinel's current master (its replicas copy the
     * library from it), or every master of a cluster */
    n = dist__route_masters(&rcfg, rlimit, masters, MAX_MASTERS);
    if (n < 0)
        die(EX_REDIS, "%s", redis_why());
    for (m = 0; m < n; m++)
        load_on(&masters[m]);
    return 0;
}

/* The highest token FENCE accepted, from the master of its slot. */
static int fence_get(const char *fence)
{
    struct dist__buf key = { fence, strlen(fence) };
    const char *argv[4] = { "FCALL_RO", "distlock_fence_get", "1", fence };
    struct dist__addr a;
    struct dist__link *l;
    redisReply *r;
    struct sb b = { 0 };

    redis_setup();
    if (dist__route(&rcfg, rlimit, &key, &a) != 0 ||
        dist__route_open_master(&rcfg, &a, rlimit, &l) != 0)
        die(EX_REDIS, "%s", redis_why());
    if (dist__link_cmd(l, rlimit, 4, argv, NULL, &r) != 0)
        die(EX_REDIS, "lost the connection to Redis at %s: %s",
            dist__link_where(l), dist__link_error(l));
    if (r->type == REDIS_REPLY_ERROR)
        die(EX_REDIS, "Redis at %s: %s%s", dist__link_where(l), r->str,
            strstr(r->str, "Function not found")
                ? " (load it first: distlock fence load)"
                : "");
    if (r->type != REDIS_REPLY_STRING || !is_digits(r->str, r->len))
        die(EX_REDIS, "Redis at %s: unexpected answer to distlock_fence_get",
            dist__link_where(l));
    if (opt.json) {
        sb_adds(&b, "{\"fence\":");
        sb_jsonz(&b, fence);
        sb_printf(&b, ",\"token\":%s}", r->str);
    } else {
        sb_printf(&b, "%s", r->str);
    }
    sb_flush_line(&b);
    sb_free(&b);
    freeReplyObject(r);
    dist__link_close(l);
    return 0;
}

int cmd_fence(int argc, char **argv)
{
    const char *ops[3] = { NULL, NULL, NULL };
    int i, n = 0;

    for (i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] && common_opt(argc, argv, &i))
            continue;
        if (argv[i][0] == '-' && argv[i][1])
            usage_error("unknown option '%s'", argv[i]);
        if (n == 2)
            usage_error("unexpected argument '%s'", argv[i]);
        ops[n++] = argv[i];
    }
    if (!ops[0])
        usage_error("fence needs a subcommand: load or get");
    if (strcmp(ops[0], "load") == 0)
        return fence_load(ops[1]);
    if (strcmp(ops[0], "get") == 0) {
        if (!ops[1])
            usage_error("fence get needs FENCE, the fence's key");
        return fence_get(ops[1]);
    }
    usage_error("no fence subcommand '%s' (load or get)", ops[0]);
}
