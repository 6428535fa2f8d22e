/* CPU scaled dot-product attention, flash style: keys are visited in blocks
 * with an online softmax (running max and sum per query row), so memory is
 * linear in Tk and no [Tq, Tk] matrix exists. A work item is one (batch, kv
 * head, tile of queries) and covers all query heads sharing that kv head
 * (grouped-query attention), so each key/value block is loaded once for the
 * whole group. Supports causal, sliding window, q_pos0 or per-query
 * positions (q_pos: keys past a query's position are never visited, so a
 * view over a whole KV cache costs what its filled part costs), per-item
 * cache slices (kv_index), additive mask,
 * soft-capping, attention sinks (a per-head logit added to each softmax
 * denominator), f32/f16/bf16 inputs with any strides. Key rows with
 * contiguous elements are dotted in place by the ISA kernel table. */
#include "backends/cpu/ops_common.h"

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/llamacpp_numerics.h"

#include <math.h>

#define ATT_KB 64 /* keys per block */
#define ATT_QT 4  /* queries per work item */

typedef struct att_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *q, *k, *v;
    const rb_attn_params *p;
    int64_t r;     /* query heads per kv head */
    int64_t ntile; /* query tiles */
    bool k_direct; /* dot key rows in place */
    char *scratch;
    size_t stride;
} att_ctx;

/* Per-thread scratch layout, in floats. */
typedef struct att_scr {
    float *qf;  /* [R][D] scaled queries */
    float *acc; /* [R][Dv] */
    float *m, *l;
    float *s;  /* [KB] scores */
    float *kf; /* [KB][D] converted keys (when not direct) */
    float *vf; /* [KB][Dv] converted values */
} att_scr;

static size_t att_scratch_floats(int64_t R, int64_t D, int64_t Dv) {
    return (size_t)(R * D + R * Dv + 2 * R + ATT_KB + ATT_KB * D + ATT_KB * Dv);
}

static att_scr att_layout(float *base, int64_t R, int64_t D, int64_t Dv) {
    att_scr s;
    s.qf = base;
    s.acc = s.qf + R * D;
    s.m = s.acc + R * Dv;
    s.l = s.m + R;
    s.s = s.l + R;
    s.kf = s.s + ATT_KB;
    s.vf = s.kf + ATT_KB * D;
    return s;
}

static void att_item(att_ctx *c, att_scr *w, int64_t item) {
    const rb_tensor *q = c->q, *k = c->k, *v = c->v;
    const rb_attn_params *p = c->p;
    const rb_cpu_backend *cb = c->cb;
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], Hkv = k->ne[2], Dv = v->ne[0], r = c->r;
    const int64_t tile = item % c->ntile, g = (item / c->ntile) % Hkv, b = item / (c->ntile * Hkv);
    const int64_t i0 = tile * ATT_QT, nq = Tq - i0 < ATT_QT ? Tq - i0 : ATT_QT, R = nq * r;
    /* rows: row = qi * r + hh  (query i0+qi, head g*r+hh) */
    for (int64_t qi = 0; qi < nq; qi++)
        for (int64_t hh = 0; hh < r; hh++) {
            float *qr = w->qf + (qi * r + hh) * D;
            rb_cpu_row_to_f32(cb, q->dtype, rb_cpu_row(q, i0 + qi, g * r + hh, b), q->nb[0], qr, D);
            for (int64_t d = 0; d < D; d++) qr[d] *= p->scale;
        }
    for (int64_t i = 0; i < R; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    memset(w->acc, 0, (size_t)(R * Dv) * sizeof(float));

    /* keys any query of the tile may see (none where kv_index names no slice) */
    const int64_t kb = rb_cpu_att_kv_slice(p, k, b);
    int64_t kbeg = 0, kend = kb < 0 ? 0 : Tk, pos_lo = rb_cpu_att_pos(p, i0, b), pos_hi = pos_lo;
    for (int64_t qi = 1; qi < nq; qi++) {
        const int64_t pq = rb_cpu_att_pos(p, i0 + qi, b);
        pos_lo = pq < pos_lo ? pq : pos_lo;
        pos_hi = pq > pos_hi ? pq : pos_hi;
    }
    if (p->causal && pos_hi + 1 < kend) kend = pos_hi + 1 > 0 ? pos_hi + 1 : 0;
    if (p->window > 0 && pos_lo - p->window + 1 > kbeg) kbeg = pos_lo - p->window + 1;

    const rb_vec_dot_fn dot_direct = cb->kern->vec_dot[k->dtype];
    const rb_vec_dot_fn dot_f32 = cb->kern->vec_dot[RB_F32];
    const char *krow[ATT_KB];
    for (int64_t j0 = kbeg; j0 < kend; j0 += ATT_KB) {
        const int64_t nk = kend - j0 < ATT_KB ? kend - j0 : ATT_KB;
        for (int64_t j = 0; j < nk; j++) {
            const char *kr = rb_cpu_row(k, j0 + j, g, kb);
            if (c->k_direct) {
                krow[j] = kr;
            } else {
                rb_cpu_row_to_f32(cb, k->dtype, kr, k->nb[0], w->kf + j * D, D);
                krow[j] = (const char *)(w->kf + j * D);
            }
            rb_cpu_row_to_f32(cb, v->dtype, rb_cpu_row(v, j0 + j, g, kb), v->nb[0], w->vf + j * Dv, Dv);
        }
        for (int64_t qi = 0; qi < nq; qi++) {
            const int64_t iq = i0 + qi, pos = rb_cpu_att_pos(p, iq, b);
            for (int64_t hh = 0; hh < r; hh++) {
                const int64_t row = qi * r + hh;
                const float *qr = w->qf + row * D;
                float bmax = -INFINITY;
                for (int64_t j = 0; j < nk; j++) {
                    const int64_t kj = j0 + j;
                    if ((p->causal && kj > pos) || (p->window > 0 && pos - kj >= p->window)) {
                        w->s[j] = -INFINITY;
                        continue;
                    }
                    float sc;
                    if (c->k_direct)
                        dot_direct(D, &sc, krow[j], qr);
                    else
                        dot_f32(D, &sc, krow[j], qr);
                    if (p->softcap > 0.0f) sc = p->softcap * tanhf(sc / p->softcap);
                    if (p->mask) {
                        const rb_tensor *mk = p->mask;
                        sc += rb_cpu_load_f(mk->dtype, rb_cpu_data(mk) + kj * mk->nb[0] + iq * mk->nb[1]);
                    }
                    w->s[j] = sc;
                    bmax = sc > bmax ? sc : bmax;
                }
                if (bmax == -INFINITY) continue; /* nothing visible in this block */
                float *acc = w->acc + row * Dv;
                const float mnew = bmax > w->m[row] ? bmax : w->m[row];
                if (mnew > w->m[row]) {
                    const float corr = expf(w->m[row] - mnew); /* 0 when m was -inf */
                    w->l[row] *= corr;
                    for (int64_t d = 0; d < Dv; d++) acc[d] *= corr;
                    w->m[row] = mnew;
                }
                float lsum = 0.0f;
                for (int64_t j = 0; j < nk; j++) {
                    if (w->s[j] == -INFINITY) continue;
                    const float pj = expf(w->s[j] - mnew);
                    lsum += pj;
                    const float *vr = w->vf + j * Dv;
                    for (int64_t d = 0; d < Dv; d++) acc[d] += pj * vr[d];
                }
                w->l[row] += lsum;
            }
        }
    }
    for (int64_t qi = 0; qi < nq; qi++)
        for (int64_t hh = 0; hh < r; hh++) {
            const int64_t row = qi * r + hh;
            float *acc = w->acc + row * Dv;
            if (p->sinks) { /* the head's sink logit joins the denominator, with no value */
                float sk;
                memcpy(&sk, rb_cpu_data(p->sinks) + (g * r + hh) * (int64_t)p->sinks->nb[0], sizeof sk);
                const float mnew = sk > w->m[row] ? sk : w->m[row];
                const float corr = expf(w->m[row] - mnew); /* 0 when nothing was visible */
                w->l[row] = w->l[row] * corr + expf(sk - mnew);
                for (int64_t d = 0; d < Dv; d++) acc[d] *= corr;
                w->m[row] = mnew;
            }
            const float inv = w->l[row] > 0.0f ? 1.0f / w->l[row] : 0.0f;
            for (int64_t d = 0; d < Dv; d++) acc[d] *= inv;
            rb_cpu_row_from_f32(cb, c->dst->dtype, acc, rb_cpu_row(c->dst, g * r + hh, i0 + qi, b), c->dst->nb[0], Dv);
        }
}

static void att_task(void *arg, int ith, int nth) {
    att_ctx *c = arg;
    const int64_t R = ATT_QT * c->r;
    att_scr w = att_layout((float *)(void *)(c->scratch + (size_t)ith * c->stride), R, c->q->ne[0], c->v->ne[0]);
    const int64_t items = c->ntile * c->k->ne[2] * c->q->ne[3];
    int64_t lo, hi;
    rb_cpu_split(items, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) att_item(c, &w, it);
}

rb_status rb_cpu_attention(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                           const rb_attn_params *p) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    if (cb->llamacpp_numerics && k->dtype == RB_F16 && v->dtype == RB_F16 && !p->sinks)
        return rb_cpu_attention_llamacpp(cb, dst, q, k, v, p);
    if (!p->sinks && rb_cpu_attention_gemm_ok(cb, q, k, v, p)) /* long unmasked sequences: ops_attention_gemm.c */
        return rb_cpu_attention_gemm(be, dst, q, k, v, p);
    const int64_t D = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1], Hkv = k->ne[2];
    const int64_t Dv = v->ne[0];
    att_ctx c = {.cb = cb, .dst = dst, .q = q, .k = k, .v = v, .p = p};
    c.r = Hq / Hkv;
    c.ntile = (Tq + ATT_QT - 1) / ATT_QT;
    const size_t esz = rb_dtype_info((int)k->dtype)->type_size;
    c.k_direct = (k->nb[0] == esz || D == 1) && cb->kern->vec_dot[k->dtype] != NULL &&
                 cb->kern->vec_dot_type[k->dtype] == RB_F32;
    const int64_t items = c.ntile * Hkv * B;
    int64_t Tk_used = Tk; /* with q_pos, keys past the last position are never visited */
    if (p->q_pos) {
        Tk_used = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t pq = rb_cpu_att_pos(p, i, b) + 1;
                Tk_used = pq > Tk_used ? (pq < Tk ? pq : Tk) : Tk_used;
            }
    }
    int nth = rb_cpu_threads_for(cb, B * Hq * Tq * (Tk_used + 1) * (D + Dv));
    if (items < 2) nth = 1; /* one work item: waking the pool buys nothing */
    c.scratch = rb_cpu_scratch_threads(cb, nth, att_scratch_floats(ATT_QT * c.r, D, Dv) * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, att_task, &c);
    return RB_OK;
}
