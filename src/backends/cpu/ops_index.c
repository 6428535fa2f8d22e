/* CPU gather/scatter ops: get_rows (embedding lookup from tables of any
 * dtype, quantized rows decoded with rb_dequantize_row), index_select along
 * any dim, and set_rows (KV-cache writes with dtype conversion). Index values
 * were range-checked by the front-end before anything here runs. */
#include "backends/cpu/ops_common.h"

#include "rbee/quant.h"

static int32_t id_at(const rb_tensor *ids, int64_t i0, int64_t i1) {
    int32_t v;
    memcpy(&v, rb_cpu_data(ids) + i0 * ids->nb[0] + i1 * ids->nb[1], sizeof v);
    return v;
}

typedef struct idx_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *src, *ids;
    int dim;
    char *scratch;
    size_t stride;
} idx_ctx;

static bool plain_float(rb_dtype t) { return t == RB_F32 || t == RB_F16 || t == RB_BF16; }

/* ---- get_rows ---- */

static void get_rows_task(void *p, int ith, int nth) {
    idx_ctx *c = p;
    const rb_tensor *tb = c->src, *ids = c->ids;
    rb_tensor *d = c->dst;
    const int64_t D = d->ne[0], T = ids->ne[0], nr = T * ids->ne[1];
    const size_t tsz = rb_dtype_info((int)tb->dtype)->type_size;
    float *tmp = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t t = r % T, bi = r / T;
        const char *srow = rb_cpu_data(tb) + (size_t)id_at(ids, t, bi) * tb->nb[1];
        char *drow = rb_cpu_row(d, t, bi, 0);
        if (tb->dtype == d->dtype && tb->nb[0] == tsz && d->nb[0] == tsz) {
            memcpy(drow, srow, (size_t)D * tsz);
            continue;
        }
        if (plain_float(tb->dtype))
            rb_cpu_row_to_f32(c->cb, tb->dtype, srow, tb->nb[0], tmp, D);
        else if (tb->nb[0] == tsz || rb_dtype_info((int)tb->dtype)->is_quant)
            (void)rb_dequantize_row(tb->dtype, srow, tmp, D); /* valid dtype and length: cannot fail */
        else
            for (int64_t i = 0; i < D; i++) (void)rb_dequantize_row(tb->dtype, srow + (size_t)i * tb->nb[0], tmp + i, 1);
        rb_cpu_row_from_f32(c->cb, d->dtype, tmp, drow, d->nb[0], D);
    }
}

rb_status rb_cpu_get_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    idx_ctx c = {.cb = cb, .dst = dst, .src = table, .ids = ids};
    int nth = rb_cpu_threads_for(cb, rb_tensor_nelements(dst) * (rb_dtype_info((int)table->dtype)->is_quant ? 4 : 1));
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)dst->ne[0] * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, get_rows_task, &c);
    return RB_OK;
}

/* ---- index_select ---- */

static void index_select_task(void *p, int ith, int nth) {
    idx_ctx *c = p;
    const rb_tensor *s = c->src;
    rb_tensor *d = c->dst;
    const int64_t n = d->ne[0], nr = rb_tensor_nrows(d);
    const size_t esz = rb_dtype_info((int)s->dtype)->type_size;
    const bool same = s->dtype == d->dtype;
    float *tmp = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t i[4] = {0, r % d->ne[1], (r / d->ne[1]) % d->ne[2], r / (d->ne[1] * d->ne[2])};
        char *drow = rb_cpu_row(d, i[1], i[2], i[3]);
        if (c->dim != 0) i[c->dim] = id_at(c->ids, i[c->dim], 0);
        const char *srow = rb_cpu_row(s, i[1], i[2], i[3]);
        if (c->dim == 0) {
            for (int64_t k = 0; k < n; k++) {
                const char *se = srow + (size_t)id_at(c->ids, k, 0) * s->nb[0];
                char *de = drow + (size_t)k * d->nb[0];
                if (same)
                    memcpy(de, se, esz);
                else
                    rb_cpu_store_f(d->dtype, de, rb_cpu_load_f(s->dtype, se));
            }
        } else if (same) {
            if (s->nb[0] == esz && d->nb[0] == esz)
                memcpy(drow, srow, (size_t)n * esz);
            else
                for (int64_t k = 0; k < n; k++) memcpy(drow + (size_t)k * d->nb[0], srow + (size_t)k * s->nb[0], esz);
        } else {
            rb_cpu_row_to_f32(c->cb, s->dtype, srow, s->nb[0], tmp, n);
            rb_cpu_row_from_f32(c->cb, d->dtype, tmp, drow, d->nb[0], n);
        }
    }
}

rb_status rb_cpu_index_select(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids, int dim) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    idx_ctx c = {.cb = cb, .dst = dst, .src = src, .ids = ids, .dim = dim};
    int nth = rb_cpu_threads_for(cb, rb_tensor_nelements(dst));
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)dst->ne[0] * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, index_select_task, &c);
    return RB_OK;
}

/* ---- set_rows: threads split dims 2/3 so duplicate ids resolve in order ---- */

static void set_rows_task(void *p, int ith, int nth) {
    idx_ctx *c = p;
    const rb_tensor *s = c->src;
    rb_tensor *d = c->dst;
    const int64_t D = s->ne[0], n = s->ne[1], A = s->ne[2], B = s->ne[3];
    float *tmp = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    int64_t lo, hi;
    rb_cpu_split(A * B, ith, nth, &lo, &hi);
    for (int64_t ab = lo; ab < hi; ab++) {
        const int64_t a = ab % A, b = ab / A;
        for (int64_t i = 0; i < n; i++) {
            const char *srow = rb_cpu_row(s, i, a, b);
            char *drow = rb_cpu_row(d, id_at(c->ids, i, 0), a, b);
            rb_cpu_row_to_f32(c->cb, s->dtype, srow, s->nb[0], tmp, D);
            rb_cpu_row_from_f32(c->cb, d->dtype, tmp, drow, d->nb[0], D);
        }
    }
}

rb_status rb_cpu_set_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids) {
    rb_cpu_backend *cb = rb_cpu(be);
    if (rb_tensor_nelements(src) == 0) return RB_OK;
    idx_ctx c = {.cb = cb, .dst = dst, .src = src, .ids = ids};
    int nth = src->ne[2] * src->ne[3] > 1 ? rb_cpu_threads_for(cb, rb_tensor_nelements(src)) : 1;
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)src->ne[0] * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, set_rows_task, &c);
    return RB_OK;
}
