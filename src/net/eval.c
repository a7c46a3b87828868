/* eval.c: a script on a link: EVALSHA, EVAL when the server lacks the
 * script, after ASKING when a cluster asked for it, and its counted form
 * (replica.c) when the link's replica count is due, whether the reply is
 * waited for or owed to a handler (dist__link_eval_defer).  The link
 * itself is link.c's (link_int.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link_int.h"
#include "scripts.h"

#define STACK_ARGS 24 /* a script's arguments kept on the stack */

/* One EVALSHA or EVAL, after ASKING when asking; one deadline for both. */
static int eval_pass(struct dist__link *l, uint64_t limit, int asking,
                     int argc, const char **argv, const size_t *lens,
                     redisReply **out)
{
    static const char *const ask[1] = { "ASKING" };
    uint64_t until = dist__link_deadline(l, limit);
    redisReply *r;
    int rc;

    if ((asking && dist__link_append(l, 1, (const char **)ask, NULL) != 0) ||
        dist__link_append(l, argc, argv, lens) != 0)
        return DIST__ECONN;
    if (asking) {
        if ((rc = dist__link_reply(l, until, &r)) != 0)
            return rc;
        freeReplyObject(r);
    }
    return dist__link_reply(l, until, out);
}

/* An EVALSHA's arguments: on the stack (sargv, slen) unless there are
 * more than STACK_ARGS.  0, or ENOMEM. */
static int eval_args(const struct dist__script *s, int nkeys,
                     const struct dist__buf *kv, int nkv, char nk[16],
                     const char ***argv, size_t **lens)
{
    int i, argc = 3 + nkv;

    if (argc > STACK_ARGS) {
        *argv = malloc(sizeof **argv * (size_t)argc);
        *lens = malloc(sizeof **lens * (size_t)argc);
        if (!*argv || !*lens) {
            free(*argv);
            free(*lens);
            return dist__err(ENOMEM, "out of memory");
        }
    }
    snprintf(nk, 16, "%d", nkeys);
    (*argv)[2] = nk;
    (*lens)[2] = strlen(nk);
    for (i = 0; i < nkv; i++) {
        (*argv)[3 + i] = kv[i].p;
        (*lens)[3 + i] = kv[i].len;
    }
    (*argv)[0] = "EVALSHA";
    (*lens)[0] = 7;
    (*argv)[1] = s->sha;
    (*lens)[1] = 40;
    return 0;
}

int dist__link_eval_defer(struct dist__link *l, uint64_t limit,
                          const struct dist__script *s, int nkeys,
                          const struct dist__buf *kv, int nkv,
                          dist__owed_fn fn, void *arg)
{
    const char *sargv[STACK_ARGS];
    size_t slen[STACK_ARGS];
    const char **argv = sargv;
    size_t *lens = slen;
    char nk[16];
    int rc;

    l->limit = limit;
    if (eval_args(s, nkeys, kv, nkv, nk, &argv, &lens) != 0)
        return ENOMEM;
    rc = dist__link_append(l, 3 + nkv, argv, lens);
    if (rc == 0)
        rc = dist__link_defer(l, dist__link_deadline(l, limit), fn, arg);
    if (argv != sargv) {
        free(argv);
        free(lens);
    }
    return rc == ENOMEM ? dist__err(ENOMEM, "out of memory"),
           DIST__ECONN  : rc;
}

int dist__link_eval(struct dist__link *l, uint64_t limit,
                    const struct dist__script *s, int asking, int nkeys,
                    const struct dist__buf *kv, int nkv, redisReply **out)
{
    const char *sargv[STACK_ARGS];
    size_t slen[STACK_ARGS];
    const char **argv = sargv;
    size_t *lens = slen;
    char nk[16];
    int argc = 3 + nkv, rc;
    uint64_t counted = s->counted ? dist__link_count_wanted(l, s) : 0;

    *out = NULL;
    l->limit = limit;
    if (counted)
        s = s->counted;
    if (eval_args(s, nkeys, kv, nkv, nk, &argv, &lens) != 0)
        return ENOMEM;
    rc = eval_pass(l, limit, asking, argc, argv, lens, out);
    if (rc == 0 && (*out)->type == REDIS_REPLY_ERROR &&
        strncmp((*out)->str, "NOSCRIPT", 8) == 0) {
        /* the server lacks the script: EVAL sends the body and caches it */
        freeReplyObject(*out);
        *out = NULL;
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = s->body;
        lens[1] = s->len;
        rc = eval_pass(l, limit, asking, argc, argv, lens, out);
    }
    if (argv != sargv) {
        free(argv);
        free(lens);
    }
    if (rc == 0 && counted)
        dist__link_counted_reply(l, counted, out);
    return rc;
}
