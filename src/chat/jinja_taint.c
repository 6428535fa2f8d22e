/* Request-data ranges of template strings and buffers: the bookkeeping that
 * lets a render report which bytes of its output came from the request
 * (messages, tools, extra variables) and which from the template itself, so
 * special-token text in a user's message is never tokenized as a control
 * token. Ranges follow bytes through copies, cuts and concatenation. */
#include "chat/jinja.h"

#include <stdlib.h>
#include <string.h>

static const jspan ALL_SPAN = {0, SIZE_MAX};
const jtaint jtaint_all = {1, &ALL_SPAN};

bool jtaint_hit(const jtaint *t, size_t b, size_t e) {
    if (!t || b >= e) return false;
    size_t lo = 0, hi = t->n; /* first range ending after b */
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (t->r[m].e <= b) lo = m + 1;
        else hi = m;
    }
    return lo < t->n && t->r[lo].b < e;
}

bool jtcur_hit(jtcur *c, size_t b, size_t e) {
    if (!c->t || b >= e) return false;
    while (c->k < c->t->n && c->t->r[c->k].e <= b) c->k++;
    return c->k < c->t->n && c->t->r[c->k].b < e;
}

bool jbuf_mark(jbuf *b, size_t from, size_t to) {
    if (b->failed) return false;
    if (from >= to) return true;
    /* merge with every earlier range that touches or overlaps [from, to) */
    while (b->tn > 0 && b->tr[b->tn - 1].e >= from) {
        jspan *l = &b->tr[b->tn - 1];
        if (l->b < from) from = l->b;
        if (l->e > to) to = l->e;
        b->tn--;
    }
    if (b->tn == b->tcap) {
        size_t max = (b->limit ? b->limit : SIZE_MAX) / sizeof(jspan);
        if (b->tn >= max) {
            b->failed = b->over_limit = true;
            return false;
        }
        size_t nc = b->tcap ? b->tcap * 2 : 8;
        if (nc > max) nc = max;
        jspan *p = realloc(b->tr, nc * sizeof(jspan));
        if (!p) {
            b->failed = true;
            return false;
        }
        b->tr = p;
        b->tcap = nc;
    }
    b->tr[b->tn].b = from;
    b->tr[b->tn].e = to;
    b->tn++;
    return true;
}

bool jbuf_put_t(jbuf *b, const char *s, size_t n, const jtaint *t) {
    size_t start = b->n;
    if (!jbuf_put(b, s, n)) return false;
    for (size_t i = 0; t && i < t->n; i++) {
        size_t rb = t->r[i].b, re = t->r[i].e < n ? t->r[i].e : n;
        if (rb >= n) break;
        if (!jbuf_mark(b, start + rb, start + re)) return false;
    }
    return true;
}

bool jbuf_put_sub(jbuf *b, jv s, size_t off, size_t len) {
    size_t start = b->n;
    if (!jbuf_put(b, s.u.s.p + off, len)) return false;
    const jtaint *t = s.u.s.t;
    if (!t || !len) return true;
    for (size_t i = 0; i < t->n; i++) {
        size_t rb = t->r[i].b, re = t->r[i].e;
        if (re <= off) continue;
        if (rb >= off + len) break;
        rb = rb > off ? rb - off : 0;
        re = re - off < len ? re - off : len;
        if (!jbuf_mark(b, start + rb, start + re)) return false;
    }
    return true;
}

bool jx_substr(jctx *cx, jv s, size_t off, size_t len, jv *out) {
    const jtaint *t = s.u.s.t;
    jv r = jv_str(s.u.s.p + off, len);
    if (!t || !len) {
        *out = r;
        return true;
    }
    size_t first = 0, cnt = 0;
    while (first < t->n && t->r[first].e <= off) first++;
    while (first + cnt < t->n && t->r[first + cnt].b < off + len) cnt++;
    if (cnt == 1 && t->r[first].b <= off && t->r[first].e >= off + len) {
        r.u.s.t = &jtaint_all;
    } else if (cnt > 0) {
        jtaint *nt = jmem_alloc(cx->mem, sizeof(jtaint));
        jspan *sp = jmem_alloc(cx->mem, cnt * sizeof(jspan));
        if (!nt || !sp) return jx_oom(cx);
        for (size_t i = 0; i < cnt; i++) {
            const jspan *o = &t->r[first + i];
            sp[i].b = o->b > off ? o->b - off : 0;
            sp[i].e = o->e - off < len ? o->e - off : len;
        }
        nt->n = cnt;
        nt->r = sp;
        r.u.s.t = nt;
    }
    *out = r;
    return true;
}
