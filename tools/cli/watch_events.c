/* watch_events.c: what distlock watch prints: the differences between
 * two pictures of a lock, as events (acquired, released, expired, queued,
 * left queue, ...), one line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tool.h"

static const char *const mode_name[] = { NULL, "read", "write" };

struct ent {
    const char *o;
    size_t n;
    int mode;
    long long count;
};

static size_t entries(const struct snap *s, struct ent **out)
{
    size_t i, n = 0;

    *out = xrealloc(NULL, (2 * s->nh + 1) * sizeof **out);
    if (s->kind == KIND_UNKNOWN)
        return 0;
    for (i = 0; i < s->nh; i++) {
        const struct holder *h = &s->h[i];
        if (s->kind != KIND_RWLOCK) {
            (*out)[n++] =
                (struct ent){ h->owner, h->olen, M_MUTEX, h->holds };
            continue;
        }
        if (h->writes > 0)
            (*out)[n++] =
                (struct ent){ h->owner, h->olen, M_WRITE, h->writes };
        if (h->reads > 0)
            (*out)[n++] = (struct ent){ h->owner, h->olen, M_READ, h->reads };
    }
    return n;
}

static const struct ent *ent_find(const struct ent *e, size_t n,
                                  const struct ent *x)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (e[i].mode == x->mode && e[i].n == x->n &&
            memcmp(e[i].o, x->o, x->n) == 0)
            return &e[i];
    return NULL;
}

int waiter_in(const struct waiter *w, size_t n, const char *o, size_t on,
              size_t *pos)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (w[i].olen == on && memcmp(w[i].owner, o, on) == 0) {
            if (pos)
                *pos = i + 1;
            return 1;
        }
    return 0;
}

static int holds_any(const struct snap *s, const char *o, size_t on,
                     int write_only)
{
    size_t i;

    for (i = 0; i < s->nh; i++)
        if (s->h[i].olen == on && memcmp(s->h[i].owner, o, on) == 0)
            return !write_only || s->h[i].writes > 0;
    return 0;
}

/* Starts an event line: time, name, event. */
static void ev_start(struct sb *b, const struct snap *s, const char *event)
{
    struct timespec ts;
    struct tm tm;
    char buf[64];

    clock_gettime(CLOCK_REALTIME, &ts);
    if (opt.json) {
        gmtime_r(&ts.tv_sec, &tm);
        strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
        sb_printf(b, "{\"time\":\"%s.%03ldZ\",\"name\":", buf,
                  ts.tv_nsec / 1000000);
        sb_json(b, B(s->names->name), L(s->names->name));
        sb_adds(b, ",\"event\":");
        sb_jsonz(b, event);
    } else {
        localtime_r(&ts.tv_sec, &tm);
        strftime(buf, sizeof buf, "%H:%M:%S", &tm);
        sb_printf(b, "%s.%03ld  ", buf, ts.tv_nsec / 1000000);
        sb_human(b, B(s->names->name), L(s->names->name));
        sb_adds(b, "  ");
    }
}

/* Prints the event's line and frees b.  0, or -1 when stdout fails. */
static int ev_end(struct sb *b)
{
    if (opt.json)
        sb_adds(b, "}");
    sb_flush_line(b);
    sb_free(b);
    return fflush(stdout) == 0 ? 0 : -1;
}

/* The start of an event about one owner: its member in JSON, text and
 * the owner for a terminal. */
static void ev_start_owner(struct sb *b, const struct snap *s,
                           const char *event, const char *text,
                           const char *owner, size_t olen)
{
    ev_start(b, s, event);
    if (opt.json) {
        sb_adds(b, ",");
        json_owner(b, owner, olen);
    } else {
        sb_adds(b, text);
        sb_human(b, owner, olen);
    }
}

/* "acquired by X (write, 2 holds)" and the like, for a hold entry. */
static int ev_hold(const struct snap *s, const char *event, const char *text,
                   const struct ent *e, int with_count)
{
    struct sb b = { 0 };

    ev_start_owner(&b, s, event, text, e->o, e->n);
    if (opt.json) {
        if (e->mode != M_MUTEX)
            sb_printf(&b, ",\"mode\":\"%s\"", mode_name[e->mode]);
        if (with_count)
            sb_printf(&b, ",\"holds\":%lld", e->count);
        if (strcmp(event, "acquired") == 0 && s->pttl >= 0)
            sb_printf(&b, ",\"lease_ms\":%lld", s->pttl);
    } else if (e->mode != M_MUTEX || with_count) {
        sb_adds(&b, " (");
        if (e->mode != M_MUTEX)
            sb_printf(&b, "%s%s", mode_name[e->mode], with_count ? ", " : "");
        if (with_count)
            sb_printf(&b, "%lld hold%s", e->count, e->count == 1 ? "" : "s");
        sb_adds(&b, ")");
    }
    return ev_end(&b);
}

static int ev_waiter(const struct snap *s, const char *event,
                     const char *text, const struct waiter *w, size_t pos)
{
    struct sb b = { 0 };

    ev_start_owner(&b, s, event, text, w->owner, w->olen);
    if (pos)
        sb_printf(&b, opt.json ? ",\"position\":%zu" : " (position %zu)",
                  pos);
    return ev_end(&b);
}

/* The first line: the state when watching starts. */
int ev_state(const struct snap *s)
{
    struct sb b = { 0 };
    size_t i;

    ev_start(&b, s, "state");
    if (opt.json) {
        sb_adds(&b, ",\"kind\":");
        sb_jsonz(&b, kind_name[s->kind]);
        sb_adds(&b, ",\"state\":");
        sb_jsonz(&b, state_name[s->state]);
        json_holders(&b, s);
        json_lease(&b, "lease_ms", s->state == ST_FREE ? -2 : s->pttl);
        json_waiters(&b, "queue", s->q, s->nq);
        json_waiters(&b, "waiting_writers", s->w, s->nw);
    } else if (s->kind == KIND_UNKNOWN) {
        sb_printf(&b, "not a lock (a Redis %s)", s->type);
    } else {
        if (kind_name[s->kind])
            sb_printf(&b, "%s, ", kind_name[s->kind]);
        sb_adds(&b, state_name[s->state]);
        for (i = 0; i < s->nh; i++) {
            sb_adds(&b, i ? ", " : " by ");
            sb_human(&b, s->h[i].owner, s->h[i].olen);
        }
        if (s->state != ST_FREE) {
            sb_adds(&b, ", lease ");
            human_lease(&b, s->pttl);
        }
        if (s->nq)
            sb_printf(&b, ", %zu queued", s->nq);
        if (s->nw)
            sb_printf(&b, ", %zu writer%s waiting", s->nw,
                      s->nw == 1 ? "" : "s");
    }
    return ev_end(&b);
}

/* A line without an owner: "released" when a release came and went
 * between two looks. */
static int ev_plain(const struct snap *s, const char *event, const char *text)
{
    struct sb b = { 0 };

    ev_start(&b, s, event);
    if (!opt.json)
        sb_adds(&b, text);
    return ev_end(&b);
}

/* "not a lock any more" when the key became something else. */
static int ev_not_lock(const struct snap *a, const struct snap *b)
{
    struct sb s = { 0 };

    if (b->kind != KIND_UNKNOWN || a->kind == KIND_UNKNOWN)
        return 0;
    ev_start(&s, b, "not_a_lock");
    if (opt.json) {
        sb_adds(&s, ",\"type\":");
        sb_jsonz(&s, b->type);
    } else {
        sb_printf(&s, "not a lock any more (a Redis %s)", b->type);
    }
    return ev_end(&s);
}

/* Every acquisition of a free lock draws a fencing token: more tokens than
 * acquisitions seen means some came and went between two looks.  How many
 * went unseen. */
static long long missed_grants(const struct snap *a, const struct snap *b,
                               const struct ent *ea, size_t na,
                               const struct ent *eb, size_t nb)
{
    long long ta = 0, tb = 0, missed;
    size_t i;

    if (a->has_token)
        parse_ll(a->token, strlen(a->token), &ta);
    if (b->has_token)
        parse_ll(b->token, strlen(b->token), &tb);
    missed = tb > ta && a->has_token ? tb - ta : 0;
    for (i = 0; i < nb; i++)
        if (!ent_find(ea, na, &eb[i]) && eb[i].mode != M_READ && missed > 0)
            missed--;
    return missed;
}

/* Waiters of a that b no longer has: served (took and released the lock
 * between two looks, when tokens went unseen) or gone. */
static int ev_waiters_gone(const struct snap *a, const struct snap *b,
                           long long *missed)
{
    size_t i;
    int rc = 0;

    for (i = 0; i < a->nq; i++)
        if (!waiter_in(b->q, b->nq, a->q[i].owner, a->q[i].olen, NULL) &&
            !holds_any(b, a->q[i].owner, a->q[i].olen, 0)) {
            if (*missed > 0) {
                (*missed)--;
                rc |=
                    ev_waiter(b, "acquired_released",
                              "acquired and released (between two looks) by ",
                              &a->q[i], 0);
            } else {
                rc |= ev_waiter(b, "left_queue", "left queue ", &a->q[i], 0);
            }
        }
    for (i = 0; i < a->nw; i++)
        if (!waiter_in(b->w, b->nw, a->w[i].owner, a->w[i].olen, NULL) &&
            !holds_any(b, a->w[i].owner, a->w[i].olen, 1))
            rc |= ev_waiter(b, "writer_left", "writer stopped waiting ",
                            &a->w[i], 0);
    return rc;
}

/* Holds and waiters b has that a had not. */
static int ev_arrivals(const struct snap *a, const struct snap *b,
                       const struct ent *ea, size_t na, const struct ent *eb,
                       size_t nb)
{
    const struct ent *f;
    size_t i, pos;
    int rc = 0;

    for (i = 0; i < nb; i++) {
        f = ent_find(ea, na, &eb[i]);
        if (!f)
            rc |= ev_hold(b, "acquired", "acquired by ", &eb[i], 1);
        else if (f->count != eb[i].count)
            rc |= ev_hold(b, "holds", "hold count changed: ", &eb[i], 1);
    }
    for (i = 0; i < b->nq; i++)
        if (!waiter_in(a->q, a->nq, b->q[i].owner, b->q[i].olen, NULL) &&
            waiter_in(b->q, b->nq, b->q[i].owner, b->q[i].olen, &pos))
            rc |= ev_waiter(b, "queued", "queued ", &b->q[i], pos);
    for (i = 0; i < b->nw; i++)
        if (!waiter_in(a->w, a->nw, b->w[i].owner, b->w[i].olen, NULL))
            rc |= ev_waiter(b, "writer_waiting", "writer waiting ", &b->w[i],
                            0);
    return rc;
}

/* Prints what changed from a to b.  released: a release message came.
 * A lock that vanished expired only if no release message came and its
 * lease could have run out since a (a fair lock released with nobody
 * queued, or a read release with no message, publishes nothing). */
int ev_diff(const struct snap *a, const struct snap *b, int released)
{
    struct ent *ea, *eb;
    size_t na = entries(a, &ea), nb = entries(b, &eb), i;
    int vanished = strcmp(b->type, "none") == 0 && na > 0;
    int expired = vanished && !released && a->pttl >= 0 &&
                  (uint64_t)a->pttl <= b->taken_ms - a->taken_ms + 100;
    int rc, changed = 0;
    long long missed = missed_grants(a, b, ea, na, eb, nb);

    rc = ev_not_lock(a, b);
    for (i = 0; i < na; i++)
        if (!ent_find(eb, nb, &ea[i])) {
            changed = 1;
            if (expired)
                rc |=
                    ev_hold(b, "expired", "expired, was held by ", &ea[i], 0);
            else
                rc |= ev_hold(b, "released", "released by ", &ea[i], 0);
        }
    rc |= ev_waiters_gone(a, b, &missed);
    /* released and taken again between two looks: same holders, a message */
    if (!changed && released && na > 0 && na == nb) {
        for (i = 0; i < na; i++)
            if (ent_find(eb, nb, &ea[i]))
                rc |= ev_hold(b, "released", "released by ", &ea[i], 0);
        na = 0;
    } else if (!changed && (released || missed > 0) && na == 0 && nb == 0) {
        rc |= ev_plain(b, "acquired_released",
                       "acquired and released (between two looks)");
    }
    rc |= ev_arrivals(a, b, ea, na, eb, nb);
    free(ea);
    free(eb);
    return rc;
}
