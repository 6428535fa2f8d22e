/* The two parallel phases of rb_cpu_matmul (see matmul_plan.h): activation
 * conversion into scratch, then tiled dot products over the weight rows. */
#include "backends/cpu/matmul_plan.h"
#include "backends/cpu/ops_common.h"
#include "backends/cpu/pack_pull.h"

#include <stdint.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Weight rows per one-row-kernel call: long runs (up to max) so per-call
 * activation preparation is amortized, as long as every thread still gets
 * several runs. */
static int run_rows(const rb_mm_plan *p, int max) {
    const int64_t per_thread = p->N * p->B2 * p->B3 / (4 * p->nth);
    return per_thread >= max ? max : per_thread >= 64 ? 64 : per_thread >= 16 ? 16 : 8;
}

rb_status rb_mm_plan_init(rb_mm_plan *p, rb_cpu_backend *cb, const rb_tensor *dst, const rb_tensor *a,
                          const rb_tensor *b) {
    memset(p, 0, sizeof *p);
    p->k = cb->kern;
    p->dst = *dst;
    p->a = *a;
    p->b = *b;
    p->K = a->ne[0];
    p->N = a->ne[1];
    p->M = b->ne[1];
    p->B2 = b->ne[2];
    p->B3 = b->ne[3];
    p->r2 = b->ne[2] / a->ne[2];
    p->r3 = b->ne[3] / a->ne[3];
    p->vt = p->k->vec_dot_type[a->dtype];
    p->row_b = rb_dtype_row_size(p->vt, p->K);
    p->nth = cb->pool ? rb_threadpool_size(cb->pool) : 1;
    /* prefill: 4 x 4 tiles. decode: runs of up to RB_CPU_MATVEC_RUN weight rows */
    p->tile_c = 4;
    p->tile_r = p->M == 1 ? run_rows(p, RB_CPU_MATVEC_RUN) : 4;
    p->a_row = rb_dtype_row_size(a->dtype, p->K);
    const rb_dtype_traits *ta = rb_dtype_info((int)a->dtype);
    bool a_strided = a->nb[0] != ta->type_size;
    /* prefill with a packed kernel: 16-row groups packed once, then every
     * activation row streams past them 8 at a time */
    p->packed = p->M > 1 && !a_strided && p->k->pack_rows[a->dtype] != NULL && p->k->gemm_packed[a->dtype] != NULL;
    /* The weight types with packed kernels take each activation row alone,
     * through the one-row kernel, over runs of weight rows that stay in cache
     * while every row passes: for a few rows, where repacking every weight
     * group per call does not pay (2-4 decode streams run 1.2-4x faster this
     * way on AVX-512, docs/PERFORMANCE.md), and, batch-invariant, up to
     * RB_BATCH_INVARIANT_ROWS rows, since the packed kernels sum in another
     * order than the one-row kernel. */
    if (p->packed && (p->M <= RB_CPU_PACKED_MIN_ROWS || (cb->batch_invariant && p->M <= RB_BATCH_INVARIANT_ROWS))) {
        p->packed = false;
        p->tile_c = 1;
        p->tile_r = run_rows(p, 64);
    }
    /* float weights with a gemm_t kernel: activation rows in the lanes (with
     * the same batch-invariant limit as the packed kernels, since each output
     * is one FMA chain here and a 16-lane split in the one-row kernel) */
    p->tposed = !p->packed && !a_strided && p->vt == RB_F32 && p->k->gemm_t[a->dtype] != NULL &&
                p->M > RB_CPU_PACKED_MIN_ROWS && !(cb->batch_invariant && p->M <= RB_BATCH_INVARIANT_ROWS) &&
                (a->dtype != RB_F32 || (a->nb[1] % 4 == 0 && (uintptr_t)rb_cpu_data(a) % 4 == 0));
    if (p->tposed) {
        p->tile_r = RB_CPU_T_ROWS;
        p->tile_c = RB_CPU_T_COLS;
        p->mblk = (p->M + RB_CPU_T_COLS - 1) / RB_CPU_T_COLS;
    }
    if (p->packed) {
        p->tile_r = RB_CPU_PACK_ROWS;
        p->tile_c = RB_CPU_TILE_MAX;
        p->ld_aux = p->vt == RB_Q8_0 ? (size_t)(p->K / 32) : 0; /* only q8_0 activations use aux */
        p->pbuf_stride = align64((size_t)(p->K / ta->block_size) * p->k->pack_bytes[a->dtype]);
    }

    size_t n_act_rows = (size_t)(p->M * p->B2 * p->B3);
    if (p->row_b == 0 || p->a_row == 0 || n_act_rows > SIZE_MAX / p->row_b)
        return rb_backend_fail(&cb->base, RB_E_RANGE, "matmul: activation scratch too large");
    size_t act_bytes = align64(n_act_rows * p->row_b);
    if (p->tposed) {
        size_t blocks = (size_t)(p->mblk * p->B2 * p->B3), blk_bytes = (size_t)p->K * RB_CPU_T_COLS * sizeof(float);
        if (blocks > SIZE_MAX / blk_bytes)
            return rb_backend_fail(&cb->base, RB_E_RANGE, "matmul: activation scratch too large");
        act_bytes = align64(blocks * blk_bytes);
    }
    size_t fbuf_bytes = align64((size_t)p->K * sizeof(float));
    p->abuf_stride = a_strided ? align64((size_t)p->tile_r * p->a_row) : 0;
    size_t aux_bytes = p->packed ? align64(n_act_rows * p->ld_aux * sizeof(rb_act_aux)) : 0;
    size_t total = act_bytes + fbuf_bytes * (size_t)p->nth + p->abuf_stride * (size_t)p->nth + aux_bytes +
                   p->pbuf_stride * (size_t)p->nth;
    char *s = rb_cpu_scratch(cb, total);
    if (!s) return rb_backend_fail(&cb->base, RB_E_NOMEM, "matmul: cannot allocate %zu bytes of scratch", total);
    p->act = s;
    if (p->tposed) p->act_t = (float *)(void *)s;
    p->fbuf = (float *)(s + act_bytes);
    p->abuf = a_strided ? s + act_bytes + fbuf_bytes * (size_t)p->nth : NULL;
    char *tail = s + act_bytes + fbuf_bytes * (size_t)p->nth + p->abuf_stride * (size_t)p->nth;
    if (p->packed) {
        p->aux = (rb_act_aux *)(void *)tail;
        p->pbuf = tail + aux_bytes;
    }
    return RB_OK;
}

/* Loads element i of a strided plain-dtype row as f32. */
static float load_elem(rb_dtype t, const char *row, size_t nb0, int64_t i) {
    const char *e = row + (size_t)i * nb0;
    switch (t) {
    case RB_F32: { float v; memcpy(&v, e, 4); return v; }
    case RB_F16: { rb_f16 v; memcpy(&v, e, 2); return rb_f16_to_f32(v); }
    case RB_BF16: { rb_bf16 v; memcpy(&v, e, 2); return rb_bf16_to_f32(v); }
    default: return 0.0f;
    }
}

/* Activation row r ((i3 * B2 + i2) * M + m) as f32 into x. */
static void load_act_row(const rb_mm_plan *p, int64_t r, float *x) {
    const rb_tensor *b = &p->b;
    int64_t m = r % p->M, i2 = (r / p->M) % p->B2, i3 = r / (p->M * p->B2);
    const char *src = rb_cpu_data(b) + (size_t)m * b->nb[1] + (size_t)i2 * b->nb[2] + (size_t)i3 * b->nb[3];
    if (b->dtype == RB_F32 && b->nb[0] == 4) {
        memcpy(x, src, (size_t)p->K * 4);
    } else if (b->dtype == RB_F16 && b->nb[0] == 2) {
        p->k->f16_to_f32((const rb_f16 *)src, x, p->K);
    } else if (b->dtype == RB_BF16 && b->nb[0] == 2) {
        p->k->bf16_to_f32((const rb_bf16 *)src, x, p->K);
    } else {
        for (int64_t i = 0; i < p->K; i++) x[i] = load_elem(b->dtype, src, b->nb[0], i);
    }
}

/* tposed: block blk (batch * mblk + mb) of activation rows, k-major, unused
 * lanes zero */
static void convert_block_t(const rb_mm_plan *p, int64_t blk, float *tmp) {
    const int64_t batch = blk / p->mblk, m0 = blk % p->mblk * RB_CPU_T_COLS;
    const int nc = (int)(p->M - m0 < RB_CPU_T_COLS ? p->M - m0 : RB_CPU_T_COLS);
    float *yt = p->act_t + (size_t)blk * (size_t)p->K * RB_CPU_T_COLS;
    for (int c = 0; c < RB_CPU_T_COLS; c++) {
        if (c < nc) {
            load_act_row(p, batch * p->M + m0 + c, tmp);
            for (int64_t k = 0; k < p->K; k++) yt[(size_t)k * RB_CPU_T_COLS + (size_t)c] = tmp[k];
        } else {
            for (int64_t k = 0; k < p->K; k++) yt[(size_t)k * RB_CPU_T_COLS + (size_t)c] = 0.0f;
        }
    }
}

void rb_mm_convert_task(void *ctx, int ith, int nth) {
    rb_mm_plan *p = ctx;
    size_t fstride = ((size_t)p->K * sizeof(float) + 63) & ~(size_t)63;
    float *tmp = (float *)((char *)p->fbuf + fstride * (size_t)ith);
    if (p->tposed) {
        const int64_t blocks = p->mblk * p->B2 * p->B3;
        for (int64_t blk = blocks * ith / nth; blk < blocks * (ith + 1) / nth; blk++) convert_block_t(p, blk, tmp);
        return;
    }
    int64_t rows = p->M * p->B2 * p->B3;
    int64_t lo = rows * ith / nth, hi = rows * (ith + 1) / nth;
    for (int64_t r = lo; r < hi; r++) {
        char *out = p->act + (size_t)r * p->row_b;
        float *x = p->vt == RB_F32 ? (float *)out : tmp;
        load_act_row(p, r, x);
        if (p->vt != RB_F32) p->k->from_f32[p->vt](x, out, p->K);
        if (p->packed && p->ld_aux) {
            const rb_block_q8_0 *yb = (const rb_block_q8_0 *)(const void *)out;
            rb_act_aux *ax = p->aux + (size_t)r * p->ld_aux;
            for (size_t bi = 0; bi < p->ld_aux; bi++) {
                int32_t sum = 0;
                for (int j = 0; j < 32; j++) sum += yb[bi].qs[j];
                ax[bi].d = rb_f16_to_f32(yb[bi].d);
                ax[bi].sum = sum;
            }
        }
    }
}

/* Writes an nr x nc tile through rb_linear's epilogue: bias, activation,
 * gate, residual, each as its own f32 step in the order (and with the
 * operand order) of the separate rb_binary / rb_unary calls, so an f32 dst
 * gets the same bits; rounded once into dst. */
static void store_tile_ep(const rb_mm_plan *p, const float *tile, int ldt, int nr, int nc, int64_t n0, int64_t m0,
                          int64_t i2, int64_t i3) {
    const rb_linear_epilogue *e = p->ep;
    const rb_tensor *d = &p->dst;
    float y[RB_CPU_MATVEC_RUN], v[RB_CPU_MATVEC_RUN];
    for (int c = 0; c < nc; c++) {
        const int64_t m = m0 + c;
        const float *t = tile + (size_t)c * (size_t)ldt;
        if (e->bias) {
            const char *bp = rb_cpu_data(e->bias) + (size_t)n0 * e->bias->nb[0];
            for (int r = 0; r < nr; r++) v[r] = rb_cpu_load_f(e->bias->dtype, bp + (size_t)r * e->bias->nb[0]);
            for (int r = 0; r < nr; r++) y[r] = t[r] + v[r];
        } else {
            memcpy(y, t, (size_t)nr * sizeof(float));
        }
        if (e->has_act) rb_cpu_unary_row(e->act, y, y, nr);
        if (e->gate) {
            const char *gp = rb_cpu_brow(e->gate, m, i2, i3) + (size_t)n0 * e->gate->nb[0];
            for (int r = 0; r < nr; r++) v[r] = rb_cpu_load_f(e->gate->dtype, gp + (size_t)r * e->gate->nb[0]);
            for (int r = 0; r < nr; r++) y[r] = y[r] * v[r];
        }
        if (e->res) { /* res may be dst's own view: each element is read before it is written */
            const char *rp = rb_cpu_row(e->res, m, i2, i3) + (size_t)n0 * e->res->nb[0];
            for (int r = 0; r < nr; r++) v[r] = rb_cpu_load_f(e->res->dtype, rp + (size_t)r * e->res->nb[0]);
            for (int r = 0; r < nr; r++) y[r] = v[r] + y[r];
        }
        char *row = rb_cpu_row(d, m, i2, i3) + (size_t)n0 * d->nb[0];
        for (int r = 0; r < nr; r++) rb_cpu_store_f(d->dtype, row + (size_t)r * d->nb[0], y[r]);
    }
}

/* Writes an nr x nc tile (tile[c * ldt + r]) to dst at (n0, m0) of batch (i2, i3). */
static void store_tile(const rb_mm_plan *p, const float *tile, int ldt, int nr, int nc, int64_t n0, int64_t m0,
                       int64_t i2, int64_t i3) {
    if (p->ep) {
        store_tile_ep(p, tile, ldt, nr, nc, n0, m0, i2, i3);
        return;
    }
    const rb_tensor *d = &p->dst;
    char *base = rb_cpu_data(d) + (size_t)i2 * d->nb[2] + (size_t)i3 * d->nb[3];
    for (int c = 0; c < nc; c++) {
        char *row = base + (size_t)(m0 + c) * d->nb[1] + (size_t)n0 * d->nb[0];
        const float *t = tile + (size_t)c * (size_t)ldt;
        if (d->dtype == RB_F32) {
            if (d->nb[0] == 4) {
                memcpy(row, t, (size_t)nr * 4);
            } else {
                for (int r = 0; r < nr; r++) memcpy(row + (size_t)r * d->nb[0], &t[r], 4);
            }
        } else if (d->dtype == RB_BF16) {
            for (int r = 0; r < nr; r++) {
                rb_bf16 h = rb_f32_to_bf16(t[r]);
                memcpy(row + (size_t)r * d->nb[0], &h, 2);
            }
        } else {
            for (int r = 0; r < nr; r++) {
                rb_f16 h = rb_f32_to_f16(t[r]);
                memcpy(row + (size_t)r * d->nb[0], &h, 2);
            }
        }
    }
}

/* Packs nr rows of a strided plain-dtype weight matrix into contiguous rows. */
static void pack_rows(const rb_mm_plan *p, const char *src, int nr, char *out) {
    size_t es = rb_dtype_row_size(p->a.dtype, 1);
    for (int r = 0; r < nr; r++) {
        const char *s = src + (size_t)r * p->a.nb[1];
        char *o = out + (size_t)r * p->a_row;
        for (int64_t i = 0; i < p->K; i++) memcpy(o + (size_t)i * es, s + (size_t)i * p->a.nb[0], es);
    }
}

/* The weight rows of work item it (a packed group): what the packed kernels
 * prefetch while they multiply the group before it. */
static void next_rows(const rb_mm_plan *p, int64_t it, rb_pack_prefetch *pf) {
    const int R = p->tile_r;
    const int64_t nblk = (p->N + R - 1) / R;
    const int64_t batch = it / nblk, n0 = it % nblk * R;
    const int64_t i2 = batch % p->B2, i3 = batch / p->B2;
    pf->p = rb_cpu_data(&p->a) + (size_t)(i2 / p->r2) * p->a.nb[2] + (size_t)(i3 / p->r3) * p->a.nb[3] +
            (size_t)n0 * p->a.nb[1];
    pf->lda = p->a.nb[1];
    pf->row_bytes = p->a_row;
    pf->rows = (int)(p->N - n0 < R ? p->N - n0 : R);
}

/* tposed: nr weight rows (the kernel converts them as it goes) times every
 * activation block of the batch. */
static void compute_t(const rb_mm_plan *p, const char *arow, size_t lda, int nr, int64_t n0, int64_t batch,
                      const rb_pack_prefetch *next) {
    float tile[RB_CPU_T_ROWS * RB_CPU_T_COLS];
    const int64_t i2 = batch % p->B2, i3 = batch / p->B2;
    for (int64_t mb = 0; mb < p->mblk; mb++) {
        const int64_t m0 = mb * RB_CPU_T_COLS;
        const int nc = (int)(p->M - m0 < RB_CPU_T_COLS ? p->M - m0 : RB_CPU_T_COLS);
        const float *yt = p->act_t + (size_t)(batch * p->mblk + mb) * (size_t)p->K * RB_CPU_T_COLS;
        /* this block's share of the next group's lines (contiguous rows only) */
        const bool contig = next->rows && next->lda == next->row_bytes;
        const size_t lines = contig ? next->row_bytes * (size_t)next->rows / 64 : 0;
        const size_t l0 = lines * (size_t)mb / (size_t)p->mblk, l1 = lines * (size_t)(mb + 1) / (size_t)p->mblk;
        const char *pf = lines ? next->p + l0 * 64 : NULL;
        p->k->gemm_t[p->a.dtype](p->K, nr, nc, arow, lda, yt, tile, RB_CPU_T_ROWS, pf, l1 - l0);
        store_tile(p, tile, RB_CPU_T_ROWS, nr, nc, n0, m0, i2, i3);
    }
}

void rb_mm_compute_task(void *ctx, int ith, int nth) {
    rb_mm_plan *p = ctx;
    const struct rb_cpu_kernels *k = p->k;
    rb_vec_dot_fn dot = k->vec_dot[p->a.dtype];
    rb_gemm_tile_fn gemm = k->gemm_tile[p->a.dtype];
    const int R = p->tile_r, C = p->tile_c;
    int64_t nblk = (p->N + R - 1) / R;
    int64_t items = nblk * p->B2 * p->B3;
    int64_t lo = items * ith / nth, hi = items * (ith + 1) / nth;
    float tile[RB_CPU_MATVEC_RUN]; /* tile_r * tile_c <= this */
    _Static_assert(RB_CPU_PACK_ROWS * RB_CPU_TILE_MAX <= RB_CPU_MATVEC_RUN, "packed tile fits");
    const char *abase = rb_cpu_data(&p->a);

    for (int64_t it = lo; it < hi; it++) {
        int64_t batch = it / nblk, blk = it % nblk;
        int64_t i2 = batch % p->B2, i3 = batch / p->B2;
        int64_t n0 = blk * R;
        int nr = (int)(p->N - n0 < R ? p->N - n0 : R);
        const char *arow = abase + (size_t)(i2 / p->r2) * p->a.nb[2] + (size_t)(i3 / p->r3) * p->a.nb[3] +
                           (size_t)n0 * p->a.nb[1];
        size_t lda = p->a.nb[1];
        if (p->abuf) {
            char *packed = p->abuf + p->abuf_stride * (size_t)ith;
            pack_rows(p, arow, nr, packed);
            arow = packed;
            lda = p->a_row;
        }
        if (p->tposed) {
            rb_pack_prefetch pf = {0};
            if (it + 1 < hi) next_rows(p, it + 1, &pf);
            compute_t(p, arow, lda, nr, n0, batch, &pf);
            continue;
        }
        const char *acts = p->act + (size_t)(batch * p->M) * p->row_b;
        if (p->packed) {
            char *packed = p->pbuf + p->pbuf_stride * (size_t)ith;
            k->pack_rows[p->a.dtype](p->K, nr, arow, lda, packed);
            const rb_act_aux *aux = p->aux + (size_t)(batch * p->M) * p->ld_aux;
            rb_pack_prefetch pf = {0};
            if (it + 1 < hi) next_rows(p, it + 1, &pf);
            const size_t pf_total = rb_pack_prefetch_total(&pf);
            const int64_t ncalls = (p->M + C - 1) / C;
            for (int64_t m0 = 0; m0 < p->M; m0 += C) {
                int nc = (int)(p->M - m0 < C ? p->M - m0 : C);
                const int64_t call = m0 / C; /* this call's share of the next group's lines */
                pf.lines = (size_t)(((int64_t)pf_total * (call + 1)) / ncalls - ((int64_t)pf_total * call) / ncalls);
                k->gemm_packed[p->a.dtype](p->K, nr, nc, packed, acts + (size_t)m0 * p->row_b, p->row_b,
                                           aux + (size_t)m0 * p->ld_aux, p->ld_aux, tile, (size_t)R, &pf);
                store_tile(p, tile, R, nr, nc, n0, m0, i2, i3);
            }
            continue;
        }
        for (int64_t m0 = 0; m0 < p->M; m0 += C) {
            int nc = (int)(p->M - m0 < C ? p->M - m0 : C);
            const char *y = acts + (size_t)m0 * p->row_b;
            if (gemm) {
                gemm(p->K, nr, nc, arow, lda, y, p->row_b, tile, (size_t)R);
            } else {
                for (int c = 0; c < nc; c++)
                    for (int r = 0; r < nr; r++)
                        dot(p->K, &tile[c * R + r], arow + (size_t)r * lda, y + (size_t)c * p->row_b);
            }
            store_tile(p, tile, R, nr, nc, n0, m0, i2, i3);
        }
    }
}
