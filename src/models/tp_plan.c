/* The tensor-parallel split of a model (include/rbee/tp.h): each rank's
 * heads, feed-forward columns and vocabulary rows, and cutting a rank's part
 * out of a weight tensor as the file stores it (whole rows for
 * column-parallel weights, block-aligned column ranges of every row for
 * row-parallel ones). Pure arithmetic on the config, so CI checks it without
 * devices. */
#include "rbee/tp.h"

#include <string.h>

/* Part r of n over units of size unit: the first (total % n) ranks get one
 * more unit. total must be a multiple of unit. */
static rb_tp_range split(int64_t total, int64_t unit, int r, int n) {
    const int64_t units = total / unit, base = units / n, extra = units % n;
    const int64_t first = (int64_t)r * base + (r < extra ? r : extra);
    return (rb_tp_range){first * unit, (base + (r < extra ? 1 : 0)) * unit};
}

rb_status rb_tp_plan_make(const rb_model_config *c, int n_rank, rb_tp_plan *plan, rb_error *err) {
    if (!c || !plan) return rb_error_set(err, RB_E_INVALID, "tensor parallel: NULL argument");
    memset(plan, 0, sizeof *plan);
    if (n_rank < 1 || n_rank > RB_TP_MAX_RANKS)
        return rb_error_set(err, RB_E_RANGE, "tensor parallel: %d devices (1 to %d)", n_rank, RB_TP_MAX_RANKS);
    const int64_t Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff, V = c->n_vocab;
    if (Hq < 1 || Hkv < 1 || Hq % Hkv || F < 1 || V < 1)
        return rb_error_set(err, RB_E_INVALID, "tensor parallel: bad config (%lld q heads, %lld kv heads, ff %lld)",
                            (long long)Hq, (long long)Hkv, (long long)F);
    if (n_rank > 1) {
        if (c->n_expert > 0)
            return rb_error_set(err, RB_E_UNSUPPORTED, "tensor parallel: models with experts are not split");
        if (Hq % n_rank)
            return rb_error_set(err, RB_E_UNSUPPORTED, "tensor parallel: %lld attention heads do not split over %d "
                                "devices", (long long)Hq, n_rank);
        if (Hkv % n_rank && n_rank % Hkv)
            return rb_error_set(err, RB_E_UNSUPPORTED, "tensor parallel: %lld kv heads neither split over nor divide "
                                "%d devices", (long long)Hkv, n_rank);
        if (F % RB_TP_FF_UNIT)
            return rb_error_set(err, RB_E_UNSUPPORTED, "tensor parallel: feed-forward width %lld is not a multiple of "
                                "%d", (long long)F, RB_TP_FF_UNIT);
    }
    plan->n_rank = n_rank;
    plan->kv_replicated = Hkv < n_rank;
    const int64_t hq = Hq / n_rank;
    for (int r = 0; r < n_rank; r++) {
        rb_tp_rank *k = &plan->rank[r];
        k->q_heads = (rb_tp_range){r * hq, hq};
        if (plan->kv_replicated) {
            /* the kv head its q heads use: q head h reads kv head h / (Hq / Hkv) */
            k->kv_heads = (rb_tp_range){k->q_heads.first / (Hq / Hkv), 1};
        } else {
            k->kv_heads = (rb_tp_range){r * (Hkv / n_rank), Hkv / n_rank};
        }
        k->ff = n_rank == 1 ? (rb_tp_range){0, F} : split(F, RB_TP_FF_UNIT, r, n_rank);
        k->vocab = split(V, 1, r, n_rank);
    }
    return RB_OK;
}

static rb_status check_matrix(rb_dtype t, int64_t ne0, int64_t ne1, size_t src_bytes, size_t *row_bytes,
                              int64_t *block, rb_error *err) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    if (!tr || tr->block_size < 1 || ne0 < 1 || ne1 < 1 || ne0 % tr->block_size)
        return rb_error_set(err, RB_E_INVALID, "tensor parallel: bad matrix (%lld x %lld of %s)", (long long)ne0,
                            (long long)ne1, tr ? tr->name : "an unknown type");
    *row_bytes = rb_dtype_row_size(t, ne0);
    *block = tr->block_size;
    if (src_bytes / *row_bytes < (size_t)ne1)
        return rb_error_set(err, RB_E_FORMAT, "tensor parallel: %zu bytes hold fewer than %lld rows", src_bytes,
                            (long long)ne1);
    return RB_OK;
}

rb_status rb_tp_slice_rows(rb_dtype t, int64_t ne0, int64_t ne1, const void *src, size_t src_bytes, int64_t r0,
                           int64_t nr, void *dst, size_t dst_cap, rb_error *err) {
    size_t rb = 0;
    int64_t block = 1;
    rb_status s = check_matrix(t, ne0, ne1, src_bytes, &rb, &block, err);
    if (s != RB_OK) return s;
    if (!src || !dst || r0 < 0 || nr < 1 || r0 > ne1 - nr)
        return rb_error_set(err, RB_E_RANGE, "tensor parallel: rows %lld..%lld of %lld", (long long)r0,
                            (long long)(r0 + nr), (long long)ne1);
    if (dst_cap < rb * (size_t)nr) return rb_error_set(err, RB_E_RANGE, "tensor parallel: destination too small");
    memcpy(dst, (const char *)src + rb * (size_t)r0, rb * (size_t)nr);
    return RB_OK;
}

rb_status rb_tp_slice_cols(rb_dtype t, int64_t ne0, int64_t ne1, const void *src, size_t src_bytes, int64_t c0,
                           int64_t nc, void *dst, size_t dst_cap, rb_error *err) {
    size_t rb = 0;
    int64_t block = 1;
    rb_status s = check_matrix(t, ne0, ne1, src_bytes, &rb, &block, err);
    if (s != RB_OK) return s;
    if (!src || !dst || c0 < 0 || nc < 1 || c0 > ne0 - nc)
        return rb_error_set(err, RB_E_RANGE, "tensor parallel: columns %lld..%lld of %lld", (long long)c0,
                            (long long)(c0 + nc), (long long)ne0);
    if (c0 % block || nc % block)
        return rb_error_set(err, RB_E_INVALID, "tensor parallel: columns %lld..%lld cut %s blocks of %lld",
                            (long long)c0, (long long)(c0 + nc), rb_dtype_name(t), (long long)block);
    const size_t off = rb_dtype_row_size(t, c0), part = rb_dtype_row_size(t, nc);
    if (dst_cap < part * (size_t)ne1) return rb_error_set(err, RB_E_RANGE, "tensor parallel: destination too small");
    for (int64_t r = 0; r < ne1; r++)
        memcpy((char *)dst + part * (size_t)r, (const char *)src + rb * (size_t)r + off, part);
    return RB_OK;
}
