/* cmd_status.c: distlock status, and printing a lock's state (which the
 * other commands share). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "tool.h"

void json_lease(struct sb *b, const char *key, long long pttl)
{
    sb_printf(b, ",\"%s\":", key);
    if (pttl >= 0)
        sb_printf(b, "%lld", pttl);
    else
        sb_adds(b, "null");
}

void json_waiters(struct sb *b, const char *key, const struct waiter *w,
                  size_t n)
{
    size_t i;

    sb_printf(b, ",\"%s\":[", key);
    for (i = 0; i < n; i++) {
        sb_adds(b, i ? ",{" : "{");
        json_owner(b, w[i].owner, w[i].olen);
        if (w[i].window_ms != LLONG_MIN)
            sb_printf(b, ",\"window_ms\":%lld", w[i].window_ms);
        else
            sb_adds(b, ",\"window_ms\":null");
        sb_adds(b, "}");
    }
    sb_adds(b, "]");
}

void json_holders(struct sb *b, const struct snap *s)
{
    size_t i;

    sb_adds(b, ",\"holders\":[");
    for (i = 0; i < s->nh; i++) {
        const struct holder *h = &s->h[i];
        sb_adds(b, i ? ",{" : "{");
        json_owner(b, h->owner, h->olen);
        if (s->kind == KIND_RWLOCK) {
            sb_printf(b, ",\"reads\":%lld,\"writes\":%lld", h->reads,
                      h->writes);
            if (h->lease_ms >= -1)
                json_lease(b, "read_lease_ms", h->lease_ms);
        } else {
            sb_printf(b, ",\"holds\":%lld", h->holds);
        }
        sb_adds(b, "}");
    }
    sb_adds(b, "]");
}

void json_head(struct sb *b, const struct snap *s)
{
    sb_adds(b, "\"name\":");
    sb_json(b, B(s->names->name), L(s->names->name));
    sb_adds(b, ",\"kind\":");
    sb_jsonz(b, kind_name[s->kind]);
    sb_adds(b, ",\"state\":");
    sb_jsonz(b, state_name[s->state]);
    if (s->kind == KIND_UNKNOWN) {
        sb_adds(b, ",\"type\":");
        sb_jsonz(b, s->type);
    }
}

void status_json(const struct snap *s)
{
    struct sb b = { 0 };

    sb_adds(&b, "{");
    json_head(&b, s);
    if (s->kind != KIND_UNKNOWN) {
        json_holders(&b, s);
        json_lease(&b, "lease_ms", s->state == ST_FREE ? -2 : s->pttl);
        if (s->state != ST_FREE && s->pttl == -1)
            sb_adds(&b, ",\"no_expiry\":true");
        json_waiters(&b, "queue", s->q, s->nq);
        json_waiters(&b, "waiting_writers", s->w, s->nw);
    }
    robust_json(&b, s);
    sb_adds(&b, ",\"token\":");
    if (s->has_token && is_digits(s->token, strlen(s->token)))
        sb_adds(&b, s->token);
    else
        sb_adds(&b, "null");
    sb_adds(&b, "}");
    sb_flush_line(&b);
    sb_free(&b);
}

static void human_window(struct sb *b, long long ms)
{
    if (ms == LLONG_MIN)
        sb_adds(b, "no deadline");
    else if (ms < 0)
        sb_adds(b, "window over (dropped at the next call)");
    else {
        sb_adds(b, "window ");
        sb_secs(b, ms);
    }
}

void human_lease(struct sb *b, long long pttl)
{
    if (pttl == -1)
        sb_adds(b, "none (the key has no expiry)");
    else {
        sb_secs(b, pttl);
        sb_adds(b, " left");
    }
}

/* "holder:   client X, thread 3, 2 holds" and so on, one line each. */
static void human_holders(struct sb *b, const struct snap *s)
{
    size_t i;

    for (i = 0; s->kind != KIND_UNKNOWN && i < s->nh; i++) {
        const struct holder *h = &s->h[i];
        if (s->kind != KIND_RWLOCK) {
            sb_adds(b, "holder:   ");
            human_owner(b, h->owner, h->olen);
            sb_printf(b, ", %lld hold%s", h->holds, h->holds == 1 ? "" : "s");
        } else {
            sb_adds(b, h->writes > 0 ? "writer:   " : "reader:   ");
            human_owner(b, h->owner, h->olen);
            if (h->writes > 0)
                sb_printf(b, ", %lld write hold%s", h->writes,
                          h->writes == 1 ? "" : "s");
            if (h->reads > 0)
                sb_printf(b, ", %lld read hold%s", h->reads,
                          h->reads == 1 ? "" : "s");
            if (h->lease_ms >= 0) {
                sb_adds(b, " (read lease ");
                sb_secs(b, h->lease_ms);
                sb_adds(b, ")");
            }
        }
        sb_flush_line(b);
    }
}

/* The fair queue and the waiting writers, one line each. */
static void human_waiters(struct sb *b, const struct snap *s)
{
    size_t i;

    for (i = 0; i < s->nq; i++) {
        sb_adds(b, i ? "          " : "queue:    ");
        sb_printf(b, "%zu. ", i + 1);
        human_owner(b, s->q[i].owner, s->q[i].olen);
        sb_adds(b, ", ");
        human_window(b, s->q[i].window_ms);
        sb_flush_line(b);
    }
    for (i = 0; i < s->nw; i++) {
        sb_adds(b, "waiting writer: ");
        human_owner(b, s->w[i].owner, s->w[i].olen);
        sb_adds(b, ", ");
        human_window(b, s->w[i].window_ms);
        sb_flush_line(b);
    }
}

void status_human(const struct snap *s)
{
    struct sb b = { 0 };

    sb_adds(&b, "name:     ");
    sb_human(&b, B(s->names->name), L(s->names->name));
    sb_flush_line(&b);
    if (s->kind == KIND_UNKNOWN) {
        sb_printf(&b, "kind:     unknown (not a lock: a Redis %s)", s->type);
        sb_flush_line(&b);
    } else {
        sb_printf(&b, "kind:     %s",
                  kind_name[s->kind] ? kind_name[s->kind]
                                     : "- (nothing in Redis)");
        sb_flush_line(&b);
        sb_printf(&b, "state:    %s", state_name[s->state]);
        sb_flush_line(&b);
    }
    human_holders(&b, s);
    if (s->kind != KIND_UNKNOWN && s->state != ST_FREE) {
        sb_adds(&b, "lease:    ");
        human_lease(&b, s->pttl);
        sb_flush_line(&b);
    }
    human_waiters(&b, s);
    robust_human(&b, s);
    if (s->has_token) {
        sb_adds(&b, "token:    ");
        sb_human(&b, s->token, strlen(s->token));
        sb_adds(&b, " (last fencing token issued)");
        sb_flush_line(&b);
    }
    sb_free(&b);
}

/* "robust": null, or what the record says: the state (held: a robust
 * hold; owner_dead: its last holder did not release it cleanly, and the
 * next robust lock, or the holder's, is told EOWNERDEAD; not_recoverable),
 * the holder, the owner that died holding it, and who made it not
 * recoverable. */
void robust_json(struct sb *b, const struct snap *s)
{
    /* a holder of a lock that is free now died holding it */
    const char *died = s->r_dead             ? s->r_dead
                       : s->state == ST_FREE ? s->r_held
                                             : NULL;
    const char *state = s->r_nr ? "not_recoverable"
                        : died  ? "owner_dead"
                                : "held";

    sb_adds(b, ",\"robust\":");
    if (!s->has_robust) {
        sb_adds(b, "null");
        return;
    }
    sb_adds(b, "{\"state\":");
    sb_jsonz(b, state);
    sb_adds(b, ",\"held_by\":");
    sb_jsonz(b, s->r_held);
    sb_adds(b, ",\"died_holding\":");
    sb_jsonz(b, died);
    sb_adds(b, ",\"made_unrecoverable_by\":");
    sb_jsonz(b, s->r_nr);
    sb_adds(b, "}");
}

/* A robust mutex's record in words, one or two lines. */
void robust_human(struct sb *b, const struct snap *s)
{
    if (!s->has_robust)
        return;
    sb_adds(b, "robust:   ");
    if (s->r_nr) {
        sb_adds(b, "NOT RECOVERABLE: ");
        if (s->r_dead) {
            human_owner(b, s->r_dead, strlen(s->r_dead));
            sb_adds(b, " died holding it, then ");
        }
        human_owner(b, s->r_nr, strlen(s->r_nr));
        sb_adds(b,
                " released it without dist_mutex_consistent; every lock "
                "gets ENOTRECOVERABLE until: distlock unlock --reset NAME");
    } else if (s->r_dead && s->r_held && s->state != ST_FREE) {
        sb_adds(b, "owner-dead: ");
        human_owner(b, s->r_dead, strlen(s->r_dead));
        sb_adds(b, " died holding it; the holder was told EOWNERDEAD and has "
                   "not marked it consistent");
    } else if (s->state == ST_FREE || !s->r_held) {
        const char *who = s->r_held ? s->r_held : s->r_dead;
        sb_adds(b, "owner-dead: ");
        human_owner(b, who, strlen(who));
        sb_adds(b, " did not release it cleanly (died, lease ran out, or "
                   "forced); the next robust lock gets EOWNERDEAD");
    } else {
        sb_adds(b, "a robust hold (a holder that dies leaves it owner-dead)");
    }
    sb_flush_line(b);
}

void holders_text(struct sb *b, const struct snap *s)
{
    size_t i;

    for (i = 0; i < s->nh; i++) {
        sb_adds(b, i ? "; " : "");
        human_owner(b, s->h[i].owner, s->h[i].olen);
    }
}

/* --kind K: "lock" (-1) or a kind of objs.c. */
static int kind_opt(int argc, char **argv, int *i, void *arg)
{
    const char *v = opt_value(argc, argv, i, "--kind");
    int *kind = arg;

    if (!v)
        return 0;
    if (strcmp(v, "lock") == 0)
        *kind = -1;
    else if ((*kind = obj_kind_of(v)) == OBJ_NONE)
        usage_error("--kind: '%s' is not lock, cond, sem, rsem or barrier",
                    v);
    return 1;
}

/* The kind to show when none was asked for: the only one with keys under
 * name; a lock when there is none (a free lock has no key); exit 2 when
 * several kinds have keys there. */
static int kind_found(const struct obj *o)
{
    int k, found = o->lock ? -1 : 0, n = o->lock;

    for (k = OBJ_COND; k <= OBJ_BARRIER; k++)
        if (o->present & (1 << k)) {
            found = k;
            n++;
        }
    if (n > 1)
        usage_error("several kinds exist under '%s' (%s%s%s%s%s): choose one "
                    "with --kind",
                    B(o->names->name), o->lock ? "lock " : "",
                    o->present & (1 << OBJ_COND) ? "cond " : "",
                    o->present & (1 << OBJ_SEM) ? "sem " : "",
                    o->present & (1 << OBJ_RSEM) ? "rsem " : "",
                    o->present & (1 << OBJ_BARRIER) ? "barrier" : "");
    return found ? found : -1;
}

/* The object of kind (OBJ_NONE: whichever exists) under name when there
 * is one to show: 1 (printed), else 0. */
static int status_obj(const char *name, int kind)
{
    struct obj o;

    obj_take(name, strlen(name), &o);
    if (kind == OBJ_NONE)
        kind = kind_found(&o);
    if (kind != -1) {
        if (opt.json)
            obj_json(&o, kind);
        else
            obj_human(&o, kind);
    }
    obj_free(&o);
    return kind != -1;
}

int cmd_status(int argc, char **argv)
{
    int kind = OBJ_NONE;
    const char *name = name_args(argc, argv, kind_opt, &kind);
    struct snap s;

    redis_setup();
    /* the whole command within the command timeout, however slowly a
     * server answers (reconnects and every read included) */
    rlimit = dist__now_ms() + rcfg.timeout_ms;
    if (kind > OBJ_NONE)
        return !status_obj(name, kind);
    /* the lock's own picture first: its reads are checked one by one, and
     * a server that answers them wrongly is named for what it got wrong */
    snap_take(name, strlen(name), &s);
    if (kind == OBJ_NONE && status_obj(name, OBJ_NONE)) {
        snap_free(&s);
        return 0;
    }
    warn_twin(name);
    if (opt.json)
        status_json(&s);
    else
        status_human(&s);
    snap_free(&s);
    return 0;
}
