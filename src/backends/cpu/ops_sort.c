/* CPU argsort (stable merge sort of row indices, ascending or descending)
 * and topk (k largest in descending order, ties keep the lower index; small
 * k uses a bounded insertion list, large k the full sort). NaN orders above
 * every number. Rows are split across threads. */
#include "backends/cpu/ops_common.h"

#include <math.h>

/* a strictly before b in descending order (NaN largest). */
static inline bool gt(float a, float b) {
    if (isnan(a)) return !isnan(b);
    if (isnan(b)) return false;
    return a > b;
}

/* Stable merge sort of idx[0..n) by key; tmp has room for n. */
static void merge_sort(int32_t *idx, int32_t *tmp, int64_t n, const float *key, bool desc) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                float a = key[idx[i]], b = key[idx[j]];
                bool take_right = desc ? gt(b, a) : gt(a, b); /* strict: ties keep the left (lower) one */
                tmp[k++] = take_right ? idx[j++] : idx[i++];
            }
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

typedef struct sort_ctx {
    rb_cpu_backend *cb;
    const rb_tensor *src;
    rb_tensor *dst, *values;
    bool desc;
    int k;
    char *scratch;
    size_t stride;
} sort_ctx;

static void sort_task(void *p, int ith, int nth) {
    sort_ctx *c = p;
    const rb_tensor *s = c->src;
    const int64_t n = s->ne[0], nr = rb_tensor_nrows(s);
    char *base = c->scratch + (size_t)ith * c->stride;
    float *key = (float *)(void *)base;
    int32_t *idx = (int32_t *)(void *)(key + n), *tmp = idx + n;
    const bool topk = c->values != NULL;
    const int64_t k = topk ? c->k : n;
    int64_t lo, hi;
    rb_cpu_split(nr, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t i1 = r % s->ne[1], i2 = (r / s->ne[1]) % s->ne[2], i3 = r / (s->ne[1] * s->ne[2]);
        const char *srow = rb_cpu_row(s, i1, i2, i3);
        if (s->dtype == RB_I32)
            for (int64_t i = 0; i < n; i++) key[i] = rb_cpu_load_f(RB_I32, srow + (size_t)i * s->nb[0]);
        else
            rb_cpu_row_to_f32(c->cb, s->dtype, srow, s->nb[0], key, n);
        if (topk && k <= 64) {
            int64_t cnt = 0; /* idx[0..cnt) sorted descending */
            for (int64_t i = 0; i < n; i++) {
                if (cnt == k && !gt(key[i], key[idx[k - 1]])) continue;
                int64_t j = cnt < k ? cnt++ : k - 1;
                while (j > 0 && gt(key[i], key[idx[j - 1]])) {
                    idx[j] = idx[j - 1];
                    j--;
                }
                idx[j] = (int32_t)i;
            }
        } else {
            for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)i;
            merge_sort(idx, tmp, n, key, topk ? true : c->desc);
        }
        char *drow = rb_cpu_row(c->dst, i1, i2, i3);
        for (int64_t i = 0; i < k; i++) memcpy(drow + (size_t)i * c->dst->nb[0], &idx[i], 4);
        if (topk) {
            char *vrow = rb_cpu_row(c->values, i1, i2, i3);
            const size_t es = c->values->nb[0];
            for (int64_t i = 0; i < k; i++) {
                if (c->values->dtype == s->dtype) /* exact copy of the stored element */
                    memcpy(vrow + (size_t)i * es, srow + (size_t)idx[i] * s->nb[0],
                           rb_dtype_info((int)s->dtype)->type_size);
                else
                    rb_cpu_store_f(c->values->dtype, vrow + (size_t)i * es, key[idx[i]]);
            }
        }
    }
}

static rb_status sort_run(rb_backend *be, sort_ctx *c) {
    rb_cpu_backend *cb = rb_cpu(be);
    c->cb = cb;
    const int64_t n = c->src->ne[0];
    if (rb_tensor_nelements(c->src) == 0) return RB_OK;
    int nth = rb_cpu_threads_for(cb, rb_tensor_nelements(c->src) * 16);
    c->scratch = rb_cpu_scratch_threads(cb, nth, (size_t)n * (sizeof(float) + 2 * sizeof(int32_t)), &c->stride);
    if (!c->scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, sort_task, c);
    return RB_OK;
}

rb_status rb_cpu_argsort(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending) {
    sort_ctx c = {.src = src, .dst = dst, .desc = descending};
    return sort_run(be, &c);
}

rb_status rb_cpu_topk(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k) {
    sort_ctx c = {.src = src, .dst = indices, .values = values, .k = k, .desc = true};
    return sort_run(be, &c);
}
