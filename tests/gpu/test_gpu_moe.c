/* The mixture-of-experts ops on the GPU against the CPU backend and naive
 * references written here:
 *  - rb_topk at routing widths (4..128 experts, k 1..8, 1..33 tokens) and
 *    beyond (1001-wide rows, k up to 300, a 5000-wide row sorted in device
 *    scratch), f32/f16/bf16 sources in contiguous, permuted and sliced
 *    views, values in the source dtype or f32; rb_argsort of 1..9000-wide
 *    rows of i32 and floats, both directions. Values on a coarse grid (many
 *    ties) with NaNs: indices and values must equal a stable insertion sort
 *    (NaN above every number, ties by index) and the CPU backend exactly.
 *  - rb_swiglu_clamp over strided views, values far past the limit, NaN and
 *    infinite inputs, in place: within 2e-6 relative (+1e-6) of a double
 *    reference, and of the CPU backend.
 *  - rb_matmul_id for f32, f16, bf16, q4_0, q8_0, q4_K, q5_K, q6_K and mxfp4
 *    experts: one shared row per token and one per slot, decode (T = 1) to
 *    1100 tokens, 3..300 experts, duplicate experts in a token, all tokens
 *    on two experts (groups of 64 rows), odd K and N, sliced and permuted
 *    weights, activations and destinations (GPU outputs poisoned with NaN
 *    first, bytes around the views checked). Bounds: rel L2 against the
 *    double product of the dequantized weights with the stored activations
 *    1e-5 for float weights, 1e-2 for q8_0-mode formats and 2e-2 for
 *    the k-quants (the activations are quantized to int8 as the CPU backend
 *    does: q8_0 per 32, q8_K per 256); against the CPU backend 1e-5 (float)
 *    and 2e-5 (quantized: the same integer sums, 1e-3 where the CPU runs
 *    its scalar quantizer, as test_gpu_matmul), on the matrix-vector
 *    kernels (forced through rb_gpu_tuning.moe_gemm). The expert GEMMs
 *    (moe_gemm.cuh, CUDA), forced: every expert dtype at T 64, 100 and 512,
 *    k 2 and 8, experts with zero rows, odd N, chunked experts, 128
 *    experts; bounds of the dense GEMM (f32 1e-5, f16 and decoded formats
 *    2e-3, bf16 1e-2 against the double reference; plus the CPU's own error
 *    against the CPU backend). Decode (T = 1..8) and few rows per expert
 *    take the matrix-vector kernels by default, 64 tokens on 8 experts the
 *    GEMMs (the backend's counters). A decode step whose unselected experts
 *    hold NaN must not read them, on either path; bad ids fail with
 *    RB_E_RANGE before anything is written; a captured graph replays with
 *    new ids, and reports a bad one at the synchronize.
 *  - mxfp4 decoding (rb_cast to f32 and f16, rb_get_rows) bit for bit equal
 *    to the CPU's, for every nibble and the extreme exponents (0, 1, 2, 254,
 *    255: subnormal scales, infinities).
 *  - the gpt-oss MXFP4 GGUF (tests/data/models/gpt_oss) run on the GPU:
 *    prefill logits and decode steps within 2e-3 rel L2 of the CPU backend
 *    (same int8 sums in the experts, the matrix-vector kernels forced; f32
 *    elsewhere) and within the CPU's measured bound (4.5e-2) of transformers
 *    on the dequantized experts; the prefill through the expert GEMMs within
 *    that bound of transformers too.
 * Skips without a GPU. */
#include "gpu_pair.h"

#include "backends/gpu/gpu_tuning.h"
#include "rbee/json_config.h"
#include "rbee/model.h"
#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct env {
    rb_backend *c, *g;
    tu_rng rng;
    double cpu_bound; /* quantized products against the CPU backend */
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->g = gp_gpu();
    e->c = e->g ? gp_cpu() : NULL;
    e->cpu_bound = 2e-5;
    if (e->c) {
        rb_device_info ci;
        if (rb_backend_device_info(e->c, &ci) == RB_OK && strstr(ci.name, "(scalar)")) e->cpu_bound = 1e-3;
    }
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    rb_backend_destroy(e->g);
    rb_backend_destroy(e->c);
    free(e);
    return 0;
}

#define PREP(seed)                                                                                             \
    env *e = *state;                                                                                           \
    GP_NEED_GPU(e->g);                                                                                         \
    tu_rng_seed(&e->rng, seed)

#define MK(dt, ne, lay, lo, hi) gp_make(e->c, e->g, &e->rng, dt, ne, lay, lo, hi)

/* ---- helpers ---- */

static void put(rb_dtype dt, unsigned char *p, double v) {
    switch (dt) {
    case RB_F32: { const float f = (float)v; memcpy(p, &f, 4); break; }
    case RB_F16: { const rb_f16 h = rb_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case RB_BF16: { const rb_bf16 h = rb_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case RB_I32: { const int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    default: fail_msg("put: dtype %s", rb_dtype_name(dt));
    }
}

/* byte offset of element (i0, i1, i2, i3) of view t */
static size_t at(const rb_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return t->offs + (size_t)(i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2] +
                              i3 * (int64_t)t->nb[3]);
}

/* Writes v (the view's elements in order) on both sides and into orig. */
static void gp_set(gp *x, const double *v) {
    const rb_tensor *t = &x->c;
    int64_t q = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) put(t->dtype, x->orig + at(t, i0, i1, i2, i3), v[q++]);
    TU_OK(rb_buffer_set(x->cb, 0, x->orig, x->size));
    TU_OK(rb_buffer_set(x->gb, 0, x->orig, x->size));
}

/* The GPU side of an f32 view set to NaN (orig keeps the bytes, so the
 * check around the view still holds). */
static void poison_gpu(gp *x) {
    unsigned char *p = malloc(x->size);
    assert_non_null(p);
    memcpy(p, x->orig, x->size);
    const rb_tensor *t = &x->g;
    const float nanv = NAN;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) memcpy(p + at(t, i0, i1, i2, i3), &nanv, 4);
    TU_OK(rb_buffer_set(x->gb, 0, p, x->size));
    free(p);
}

static double rel_l2(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* ---- sorting ---- */

static bool gtd(double a, double b) {
    if (isnan(a)) return !isnan(b);
    if (isnan(b)) return false;
    return a > b;
}

/* stable insertion sort of indices (NaN above every number) */
static void ref_sort(const double *x, int64_t n, bool desc, int32_t *idx) {
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i;
        while (j > 0 && (desc ? gtd(x[i], x[idx[j - 1]]) : gtd(x[idx[j - 1]], x[i]))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = (int32_t)i;
    }
}

static bool same(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* A source [n, r1, r2, 1] of dtype sdt: values on a grid of 1/grid in
 * [-4, 4) (ties), about one NaN in 50 for float dtypes. */
static gp sort_source(env *e, rb_dtype sdt, const int64_t ne[4], gp_layout lay, double grid) {
    gp s = MK(sdt, ne, lay, -4, 4);
    const int64_t n = rb_tensor_nelements(&s.c);
    double *v = malloc(sizeof(double) * (size_t)n);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = floor(tu_rng_range(&e->rng, -4, 4) * grid) / grid;
        if (sdt != RB_I32 && tu_rng_u64(&e->rng) % 50 == 0) v[i] = NAN;
    }
    gp_set(&s, v);
    free(v);
    return s;
}

static void topk_case(env *e, rb_dtype sdt, rb_dtype vdt, int64_t n, int k, int64_t r1, int64_t r2, gp_layout lay,
                      double grid) {
    const int64_t ne[4] = {n, r1, r2, 1}, one[4] = {k, r1, r2, 1};
    gp s = sort_source(e, sdt, ne, lay, grid);
    gp vals = MK(vdt, one, GP_SLICE, 0, 1), inds = MK(RB_I32, one, GP_SLICE, 0, 1);
    TU_OK(rb_topk(e->c, &vals.c, &inds.c, &s.c, k));
    TU_OK(rb_topk(e->g, &vals.g, &inds.g, &s.g, k));
    char what[128];
    snprintf(what, sizeof what, "topk %s->%s n %lld k %d rows %lldx%lld layout %d", rb_dtype_name(sdt),
             rb_dtype_name(vdt), (long long)n, k, (long long)r1, (long long)r2, (int)lay);
    gp_expect_close(&inds, 0, 0, what); /* GPU == CPU, bytes around the views untouched */
    gp_expect_close(&vals, 0, 0, what);
    double *sv = gp_read(&s, 0), *gi = gp_read(&inds, 1), *gv = gp_read(&vals, 1);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)n);
    assert_non_null(idx);
    for (int64_t r = 0; r < r1 * r2; r++) {
        ref_sort(sv + r * n, n, true, idx);
        for (int i = 0; i < k; i++) {
            const double want = sv[r * n + idx[i]];
            if (gi[r * k + i] != idx[i] || !same(gv[r * k + i], vdt == RB_F32 ? (double)(float)want : want))
                fail_msg("%s: row %lld place %d: gpu (%g, %g), reference (%d, %g)", what, (long long)r, i,
                         gi[r * k + i], gv[r * k + i], idx[i], want);
        }
    }
    print_message("%-60s ok\n", what);
    free(idx);
    free(sv);
    free(gi);
    free(gv);
    gp_free(&s);
    gp_free(&vals);
    gp_free(&inds);
}

static void test_topk(void **state) {
    PREP(4001);
    const int64_t widths[] = {4, 8, 32, 60, 128};
    const int ks[] = {1, 2, 4, 8};
    const rb_dtype sdts[] = {RB_F32, RB_BF16, RB_F16};
    const int64_t toks[] = {1, 7, 33};
    const gp_layout lays[] = {GP_CONTIG, GP_PERM, GP_SLICE};
    int c = 0;
    for (int wi = 0; wi < 5; wi++)
        for (int ki = 0; ki < 4; ki++) {
            if (ks[ki] > widths[wi]) continue;
            const rb_dtype sdt = sdts[c % 3];
            topk_case(e, sdt, c % 2 ? RB_F32 : sdt, widths[wi], ks[ki], toks[c % 3], 1 + c % 2, lays[c % 3], 4);
            c++;
        }
    /* wider rows: the warp path up to 32 elements a lane and k = 32, the block sort beyond */
    topk_case(e, RB_F32, RB_F32, 1001, 5, 3, 2, GP_CONTIG, 4);
    topk_case(e, RB_BF16, RB_BF16, 1001, 32, 3, 1, GP_PERM, 4);
    topk_case(e, RB_F16, RB_F32, 1001, 33, 2, 2, GP_SLICE, 4);
    topk_case(e, RB_F32, RB_F32, 300, 300, 4, 1, GP_CONTIG, 2);
    topk_case(e, RB_F32, RB_F32, 2048, 3, 2, 1, GP_CONTIG, 16);
    topk_case(e, RB_BF16, RB_F32, 5000, 40, 3, 1, GP_SLICE, 8); /* pairs in device scratch */
    topk_case(e, RB_F32, RB_F32, 1, 1, 5, 1, GP_CONTIG, 1);
}

static void test_argsort(void **state) {
    PREP(4002);
    const int64_t ns[] = {1, 2, 37, 128, 1000, 4096, 4097, 9000};
    const rb_dtype dts[] = {RB_I32, RB_F32, RB_F16, RB_BF16};
    const gp_layout lays[] = {GP_CONTIG, GP_PERM, GP_SLICE};
    for (int ni = 0; ni < 8; ni++)
        for (int desc = 0; desc < 2; desc++) {
            const rb_dtype sdt = dts[(ni + desc) % 4];
            const int64_t n = ns[ni], rows = n > 4000 ? 2 : 3, ne[4] = {n, rows, 1, 1};
            const gp_layout lay = lays[(ni + desc) % 3];
            gp s = sort_source(e, sdt, ne, lay, 2);
            gp d = MK(RB_I32, ne, lay == GP_PERM ? GP_SLICE : lay, 0, 1);
            TU_OK(rb_argsort(e->c, &d.c, &s.c, desc));
            TU_OK(rb_argsort(e->g, &d.g, &s.g, desc));
            char what[96];
            snprintf(what, sizeof what, "argsort %s n %lld %s", rb_dtype_name(sdt), (long long)n, desc ? "desc" : "asc");
            gp_expect_close(&d, 0, 0, what);
            double *sv = gp_read(&s, 0), *gi = gp_read(&d, 1);
            int32_t *idx = malloc(sizeof(int32_t) * (size_t)n);
            assert_non_null(idx);
            for (int64_t r = 0; r < rows; r++) {
                ref_sort(sv + r * n, n, desc, idx);
                for (int64_t i = 0; i < n; i++)
                    if (gi[r * n + i] != idx[i])
                        fail_msg("%s: row %lld place %lld: gpu %g, reference %d", what, (long long)r, (long long)i,
                                 gi[r * n + i], idx[i]);
            }
            print_message("%-60s ok\n", what);
            free(idx);
            free(sv);
            free(gi);
            gp_free(&s);
            gp_free(&d);
        }
}

/* ---- swiglu_clamp ---- */

static void test_swiglu_clamp(void **state) {
    PREP(4003);
    const int64_t ne[4] = {37, 5, 3, 2};
    const float alpha = 1.702f, limit = 7.0f;
    gp g = MK(RB_F32, ne, GP_PERM, -12, 12), u = MK(RB_F32, ne, GP_SLICE, -12, 12), d = MK(RB_F32, ne, GP_SLICE, 0, 1);
    const int64_t n = rb_tensor_nelements(&g.c);
    double *gv = gp_read(&g, 0), *uv = gp_read(&u, 0);
    /* NaN and infinities in a few places: a NaN gate takes the limit, a NaN up stays NaN */
    gv[3] = NAN;
    uv[10] = NAN;
    gv[20] = INFINITY;
    uv[21] = -INFINITY;
    gv[22] = -INFINITY;
    gp_set(&g, gv);
    gp_set(&u, uv);
    TU_OK(rb_swiglu_clamp(e->c, &d.c, &g.c, &u.c, alpha, limit));
    TU_OK(rb_swiglu_clamp(e->g, &d.g, &g.g, &u.g, alpha, limit));
    gp_expect_close(&d, 2e-6, 1e-6, "swiglu_clamp vs cpu");
    double *got = gp_read(&d, 1);
    int clamped = 0;
    for (int64_t i = 0; i < n; i++) {
        const float gf = (float)gv[i] < limit ? (float)gv[i] : limit;
        double uu = uv[i];
        clamped += gv[i] > limit || fabs(uu) > limit;
        uu = uu < -limit ? -limit : (uu > limit ? limit : uu);
        const double ref = (uu + 1.0) * (double)gf / (1.0 + exp(-(double)alpha * (double)gf));
        if (!(same(got[i], ref) || fabs(got[i] - ref) <= 1e-6 + 2e-6 * fabs(ref)))
            fail_msg("swiglu_clamp: element %lld (gate %g, up %g): gpu %.9g, reference %.9g", (long long)i, gv[i],
                     uv[i], got[i], ref);
    }
    assert_true(clamped > 50);
    assert_true(isnan(got[10]) && !isnan(got[3]));
    /* in place over gate, and over up */
    TU_OK(rb_swiglu_clamp(e->c, &g.c, &g.c, &u.c, alpha, limit));
    TU_OK(rb_swiglu_clamp(e->g, &g.g, &g.g, &u.g, alpha, limit));
    gp_expect_close(&g, 2e-6, 1e-6, "swiglu_clamp in place (gate)");
    gp u2 = MK(RB_F32, ne, GP_CONTIG, -9, 9), g2 = MK(RB_F32, ne, GP_CONTIG, -9, 9);
    TU_OK(rb_swiglu_clamp(e->c, &u2.c, &g2.c, &u2.c, alpha, limit));
    TU_OK(rb_swiglu_clamp(e->g, &u2.g, &g2.g, &u2.g, alpha, limit));
    gp_expect_close(&u2, 2e-6, 1e-6, "swiglu_clamp in place (up)");
    free(gv);
    free(uv);
    free(got);
    gp_free(&g);
    gp_free(&u);
    gp_free(&d);
    gp_free(&u2);
    gp_free(&g2);
}

/* ---- matmul_id ---- */

typedef struct mcase {
    rb_dtype wt, bt;
    int64_t K, N, E, k, T;
    bool shared;
    gp_layout la, lb, ld;
    int idmode; /* 0: k distinct experts a token; 1: repeats allowed; 2: every token on experts 1 and E - 1;
                 * 3: distinct, never an expert whose id is a multiple of 3 (experts with zero rows) */
    int chunk_mib; /* the expert GEMMs' chunk bound (rb_gpu_tuning.moe_gemm_chunk_mib; 0: default) */
} mcase;

static void make_ids(env *e, const mcase *m, int32_t *ids) {
    for (int64_t t = 0; t < m->T; t++)
        for (int64_t j = 0; j < m->k; j++) {
            int32_t x;
            if (m->idmode == 2) {
                x = (int32_t)(j % 2 ? m->E - 1 : 1);
            } else {
                bool dup;
                do {
                    x = (int32_t)(tu_rng_u64(&e->rng) % (uint64_t)m->E);
                    dup = m->idmode == 3 && x % 3 == 0;
                    for (int64_t i = 0; i < j && (m->idmode == 0 || m->idmode == 3); i++) dup |= ids[t * m->k + i] == x;
                } while (dup);
            }
            ids[t * m->k + j] = x;
        }
}

/* The dequantized weights of a [K, N, E] view (rows of quantized types are contiguous). */
static double *expert_weights(const gp *a) {
    const rb_tensor *t = &a->c;
    if (!rb_dtype_info((int)t->dtype)->is_quant) return gp_read(a, 0);
    const int64_t K = t->ne[0], rows = t->ne[1] * t->ne[2];
    double *w = malloc(sizeof(double) * (size_t)(K * rows));
    float *f = malloc(sizeof(float) * (size_t)K);
    assert_non_null(w);
    assert_non_null(f);
    for (int64_t r = 0; r < rows; r++) {
        TU_OK(rb_dequantize_row(t->dtype, a->orig + at(t, 0, r % t->ne[1], r / t->ne[1], 0), f, K));
        for (int64_t i = 0; i < K; i++) w[r * K + i] = f[i];
    }
    free(f);
    return w;
}

/* The bounds of rb_matmul_id's two GPU paths: the matrix-vector kernels
 * (int8 activations for quantized weights, as the CPU backend) and the
 * expert GEMMs (moe_gemm.cuh: 16-bit operands as rb_matmul's GEMM, whose
 * bounds test_gpu_matmul uses: f32 1e-5, f16 and the decoded formats 2e-3,
 * bf16 1e-2), against the double reference and against the CPU backend
 * (the GEMMs' bound plus the CPU's own: its int8 activations). */
static void id_bounds(const env *e, rb_dtype wt, bool gemm, double *b_ref, double *b_cpu) {
    const bool quant = rb_dtype_info((int)wt)->is_quant, kq = wt == RB_Q4_K || wt == RB_Q5_K || wt == RB_Q6_K;
    const double mv_ref = !quant ? 1e-5 : kq ? 2e-2 : 1e-2;
    if (!gemm) {
        *b_ref = mv_ref;
        *b_cpu = quant ? e->cpu_bound : 1e-5;
        return;
    }
    *b_ref = wt == RB_F32 ? 1e-5 : wt == RB_BF16 ? 1e-2 : 2e-3;
    *b_cpu = *b_ref + mv_ref;
}

/* Sets the expert-product path of the GPU backend: mode as
 * rb_gpu_tuning.moe_gemm (0 default, > 0 the GEMMs, < 0 the matrix-vector
 * kernels), chunk as moe_gemm_chunk_mib. */
static void id_path(env *e, int mode, int chunk) {
    const rb_gpu_tuning t = {.moe_gemm = mode, .moe_gemm_chunk_mib = chunk};
    TU_OK(rb_gpu_backend_tune(e->g, &t));
}

/* rb_matmul_id calls the GPU backend ran through the expert GEMMs so far */
static unsigned long long id_gemm_calls(env *e) {
    rb_gpu_conv_stats st;
    TU_OK(rb_gpu_backend_conv_stats(e->g, &st));
    return st.moe_gemm_calls;
}

static unsigned long long id_mv_calls(env *e) {
    rb_gpu_conv_stats st;
    TU_OK(rb_gpu_backend_conv_stats(e->g, &st));
    return st.moe_mv_calls;
}

/* One case on the path mode asks for (id_path); the GEMMs must run where
 * forced on CUDA and never where refused (HIP has no GEMM path). */
static void matmul_id_case(env *e, const mcase *m, int mode) {
    const int64_t K = m->K, N = m->N, E = m->E, k = m->k, T = m->T, S = m->shared ? 1 : k;
    const int64_t ane[4] = {K, N, E, 1}, bne[4] = {K, S, T, 1}, dne[4] = {N, k, T, 1};
    gp a = MK(m->wt, ane, m->la, -1, 1), b = MK(m->bt, bne, m->lb, -1, 1), d = MK(RB_F32, dne, m->ld, 5, 6);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(k * T));
    assert_non_null(ids);
    make_ids(e, m, ids);
    gp it = gp_ids(e->c, e->g, ids, k, T);
    poison_gpu(&d);
    id_path(e, mode, m->chunk_mib);
    const unsigned long long g0 = id_gemm_calls(e);
    TU_OK(rb_matmul_id(e->c, &d.c, &a.c, &b.c, &it.c));
    TU_OK(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &it.g));
    TU_OK(rb_backend_sync(e->g));
    const bool gemm = id_gemm_calls(e) > g0;
    id_path(e, 0, 0);
    char what[200];
    snprintf(what, sizeof what, "matmul_id %s x %s K%lld N%lld E%lld k%lld T%lld %s lay %d%d%d ids %d%s",
             rb_dtype_name(m->wt), rb_dtype_name(m->bt), (long long)K, (long long)N, (long long)E, (long long)k,
             (long long)T, m->shared ? "shared" : "per-slot", (int)m->la, (int)m->lb, (int)m->ld, m->idmode,
             gemm ? " gemm" : "");
    if (mode < 0 && gemm) fail_msg("%s: took the expert GEMMs where refused", what);
    if (mode > 0 && !gemm && rb_backend_kind(e->g) == RB_DEVICE_CUDA)
        fail_msg("%s: the expert GEMMs were forced but did not run", what);
    double *w = expert_weights(&a), *x = gp_read(&b, 0), *gc = gp_read(&d, 0), *gg = gp_read(&d, 1);
    double *ref = malloc(sizeof(double) * (size_t)(N * k * T));
    assert_non_null(ref);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t n = 0; n < N; n++) {
                const double *wr = w + ((int64_t)ids[t * k + j] * N + n) * K, *xr = x + ((m->shared ? 0 : j) + S * t) * K;
                double acc = 0;
                for (int64_t i = 0; i < K; i++) acc += wr[i] * xr[i];
                ref[(t * k + j) * N + n] = acc;
            }
    for (int64_t i = 0; i < N * k * T; i++)
        if (!isfinite(gg[i])) fail_msg("%s: output %lld is %g (unwritten?)", what, (long long)i, gg[i]);
    const double e_ref = rel_l2(gg, ref, N * k * T), e_cpu = rel_l2(gg, gc, N * k * T);
    double b_ref, b_cpu;
    id_bounds(e, m->wt, gemm, &b_ref, &b_cpu);
    print_message("%-86s vs ref %.2e (bound %.0e), vs cpu %.2e (bound %.0e)\n", what, e_ref, b_ref, e_cpu, b_cpu);
    if (!(e_ref <= b_ref)) fail_msg("%s: rel L2 %.3g against the double reference > %.0e", what, e_ref, b_ref);
    if (!(e_cpu <= b_cpu)) fail_msg("%s: rel L2 %.3g against the CPU backend > %.0e", what, e_cpu, b_cpu);
    gp_expect_close(&d, 1e300, 1e300, what); /* bytes around the view */
    free(w);
    free(x);
    free(gc);
    free(gg);
    free(ref);
    free(ids);
    gp_free(&a);
    gp_free(&b);
    gp_free(&d);
    gp_free(&it);
}

static void test_matmul_id(void **state) {
    PREP(4004);
    const gp_layout C = GP_CONTIG, P = GP_PERM, L = GP_SLICE;
    const mcase cs[] = {
        /* float weights: 16-byte units (aligned rows) or one element a lane (any layout) */
        {RB_F32, RB_F32, 48, 40, 6, 2, 9, true, C, C, C, 0, 0},
        {RB_F32, RB_F32, 33, 17, 4, 3, 5, false, C, C, L, 0, 0},
        {RB_F32, RB_F32, 32, 16, 3, 2, 4, false, P, C, C, 1, 0},
        {RB_F32, RB_F16, 36, 23, 5, 2, 3, true, L, P, C, 0, 0},
        {RB_F16, RB_F16, 64, 24, 5, 2, 7, false, C, P, C, 0, 0},
        {RB_F16, RB_F32, 40, 9, 7, 3, 1, false, C, L, L, 0, 0},
        {RB_BF16, RB_F32, 128, 33, 8, 4, 1, true, C, C, C, 0, 0},
        {RB_BF16, RB_BF16, 24, 31, 4, 2, 11, true, L, C, C, 0, 0},
        /* quantized weights */
        {RB_Q4_0, RB_F32, 96, 37, 8, 2, 11, true, L, L, C, 0, 0},
        {RB_Q8_0, RB_F32, 64, 32, 8, 2, 11, true, C, C, L, 0, 0},
        {RB_Q8_0, RB_F16, 96, 16, 3, 3, 1, false, C, P, C, 0, 0},
        {RB_Q8_0, RB_F32, 64, 45, 9, 4, 6, false, C, C, C, 1, 0},
        {RB_Q8_0, RB_F32, 256, 64, 4, 2, 64, true, C, C, C, 2, 0},
        {RB_Q4_K, RB_F32, 256, 20, 4, 2, 6, true, C, C, C, 0, 0},
        {RB_Q4_K, RB_F16, 512, 33, 16, 4, 37, false, L, P, L, 0, 0},
        {RB_Q4_K, RB_F32, 256, 16, 128, 8, 5, true, C, C, C, 0, 0},
        {RB_Q5_K, RB_F32, 256, 19, 6, 2, 5, true, C, C, C, 0, 0},
        {RB_Q5_K, RB_F16, 512, 12, 4, 2, 3, false, L, P, C, 0, 0},
        {RB_Q6_K, RB_F32, 256, 17, 5, 3, 4, true, C, C, C, 0, 0},
        {RB_Q6_K, RB_BF16, 512, 8, 6, 2, 2, false, L, L, C, 1, 0},
        {RB_MXFP4, RB_F32, 64, 24, 4, 2, 8, false, C, C, C, 0, 0},
        {RB_MXFP4, RB_F32, 128, 8, 16, 4, 3, true, C, C, L, 0, 0},
        {RB_MXFP4, RB_F16, 96, 13, 32, 4, 1, true, L, P, C, 0, 0},
        {RB_MXFP4, RB_F32, 2880, 40, 32, 4, 2, true, C, C, C, 0, 0},
        {RB_MXFP4, RB_F32, 64, 8, 128, 8, 9, false, C, C, C, 0, 0},
        /* many experts (fewer routing segments) and many rows (several passes a segment) */
        {RB_F32, RB_F32, 32, 8, 300, 2, 40, true, C, C, C, 1, 0},
        {RB_F32, RB_F32, 32, 8, 32, 4, 1100, true, C, C, C, 0, 0},
        {RB_Q8_0, RB_F32, 32, 8, 60, 4, 300, false, C, C, C, 0, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) matmul_id_case(e, &cs[i], -1); /* the matrix-vector kernels */
}

/* The expert GEMMs (moe_gemm.cuh), forced: every expert dtype at T 64, 100
 * and 512 with k 2 and 8, odd N and K, experts with zero rows, repeated
 * experts in a token, shared and per-slot activations of each float type,
 * sliced and permuted views; experts chunked (one and several a chunk),
 * 128 experts (many GEMM sizes), all tokens on two experts. */
static void test_matmul_id_gemm(void **state) {
    PREP(4010);
    const gp_layout C = GP_CONTIG, P = GP_PERM, L = GP_SLICE;
    const rb_dtype wts[] = {RB_F32, RB_F16, RB_BF16, RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q5_K, RB_Q6_K, RB_MXFP4};
    const int64_t Ts[] = {64, 100, 512};
    const int ks[] = {2, 8};
    const gp_layout lays[] = {C, L, P};
    int c = 0;
    for (size_t wi = 0; wi < sizeof wts / sizeof wts[0]; wi++)
        for (int ti = 0; ti < 3; ti++)
            for (int ki = 0; ki < 2; ki++, c++) {
                const rb_dtype wt = wts[wi];
                const bool quant = rb_dtype_info((int)wt)->is_quant;
                const bool kq = wt == RB_Q4_K || wt == RB_Q5_K || wt == RB_Q6_K;
                mcase m = {0};
                m.wt = wt;
                m.bt = c % 4 == 3 ? RB_F16 : c % 7 == 5 ? RB_BF16 : RB_F32;
                m.K = kq ? (c % 2 ? 512 : 256) : quant ? (c % 2 ? 160 : 96) : (c % 2 ? 45 : 64);
                m.N = c % 3 == 0 ? 33 : c % 3 == 1 ? 37 : 64;
                m.k = ks[ki];
                m.E = m.k == 8 ? 16 : 6;
                m.T = Ts[ti];
                m.shared = c % 2 == 0;
                m.la = quant ? (c % 2 ? L : C) : lays[c % 3];
                m.lb = lays[(c + 1) % 3];
                m.ld = c % 3 == 2 ? L : C;
                m.idmode = c % 3 == 0 ? 3 : c % 3 == 1 ? 0 : 1;
                matmul_id_case(e, &m, 1);
            }
    const mcase more[] = {
        /* chunks of one expert (614 KB of f16 each), of three (307 KB), of one q4_K expert decoded */
        {RB_F16, RB_F32, 512, 600, 6, 2, 64, true, L, C, C, 3, 1},
        {RB_Q8_0, RB_F32, 512, 300, 8, 2, 100, false, C, C, C, 0, 1},
        {RB_Q4_K, RB_F32, 1024, 520, 4, 2, 40, true, C, C, C, 1, 1},
        {RB_BF16, RB_F32, 512, 300, 7, 2, 64, true, P, C, C, 0, 1},
        /* 128 experts, 8 a token (Qwen3-30B-A3B's routing): many GEMM sizes */
        {RB_Q4_K, RB_F32, 256, 24, 128, 8, 100, true, C, C, C, 0, 0},
        {RB_Q8_0, RB_F32, 64, 17, 128, 8, 512, false, C, C, C, 0, 0},
        /* every token on experts 1 and E - 1: two experts of 512 rows */
        {RB_Q6_K, RB_F32, 256, 31, 4, 2, 512, true, C, C, C, 2, 0},
        {RB_MXFP4, RB_F32, 2880, 40, 32, 4, 64, true, C, C, C, 0, 0},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) matmul_id_case(e, &more[i], 1);
}

/* Which path rb_matmul_id takes by default: decode and small batches
 * (T = 1..8, even with every row on one expert) and few rows per expert
 * the matrix-vector kernels; 64 tokens on 8 experts, 2 a token, the GEMMs
 * on CUDA (never on HIP). */
static void test_matmul_id_path(void **state) {
    PREP(4011);
    const bool cuda = rb_backend_kind(e->g) == RB_DEVICE_CUDA;
    id_path(e, 0, 0);
    const struct { int64_t k, T, E; int idmode; bool gemm; } cs[] = {
        {1, 1, 4, 2, false}, {1, 2, 4, 2, false}, {2, 4, 4, 2, false}, {1, 8, 4, 2, false}, {8, 8, 8, 1, false},
        {2, 8, 8, 2, false}, {1, 16, 64, 0, false}, {8, 64, 128, 0, false}, {2, 64, 8, 0, true}, {2, 100, 4, 2, true},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const mcase m = {RB_Q8_0, RB_F32, 64, 40, cs[i].E, cs[i].k, cs[i].T, true, GP_CONTIG, GP_CONTIG, GP_CONTIG,
                         cs[i].idmode, 0};
        const unsigned long long g0 = id_gemm_calls(e), v0 = id_mv_calls(e);
        matmul_id_case(e, &m, 0);
        const bool gemm = id_gemm_calls(e) > g0, mv = id_mv_calls(e) > v0;
        const bool want = cs[i].gemm && cuda;
        if (gemm != want || mv == want)
            fail_msg("matmul_id k %lld T %lld E %lld: took the %s path by default, expected the %s", (long long)cs[i].k,
                     (long long)cs[i].T, (long long)cs[i].E, gemm ? "GEMM" : "matrix-vector",
                     want ? "GEMM" : "matrix-vector");
    }
    print_message("matmul_id default paths: ok\n");
}

/* A decode step whose unselected experts hold NaN: they must not be read. */
static void test_matmul_id_selected_only(void **state) {
    PREP(4005);
    const int64_t K = 256, N = 40, E = 8;
    const rb_dtype dts[] = {RB_F32, RB_BF16, RB_Q8_0, RB_Q4_K, RB_MXFP4};
    for (int pi = 0; pi < 10; pi++) { /* the default path, then the expert GEMMs */
        const rb_dtype dt = dts[pi % 5];
        const int mode = pi < 5 ? 0 : 1;
        const int64_t ane[4] = {K, N, E, 1}, bne[4] = {K, 1, 1, 1}, dne[4] = {N, 2, 1, 1};
        gp a = MK(dt, ane, GP_CONTIG, -1, 1), b = MK(RB_F32, bne, GP_CONTIG, -1, 1), d = MK(RB_F32, dne, GP_CONTIG, 0, 1);
        const size_t ebytes = a.c.nb[2];
        for (int64_t x = 0; x < E; x++) {
            if (x == 5 || x == 2) continue;
            unsigned char *p = a.orig + x * ebytes;
            if (dt == RB_F32) {
                const float nanv = NAN;
                for (size_t i = 0; i < ebytes / 4; i++) memcpy(p + 4 * i, &nanv, 4);
            } else if (dt == RB_BF16) {
                const rb_bf16 h = 0x7fc0;
                for (size_t i = 0; i < ebytes / 2; i++) memcpy(p + 2 * i, &h, 2);
            } else if (dt == RB_Q8_0) {
                for (size_t i = 0; i < ebytes; i += sizeof(rb_block_q8_0)) {
                    const rb_f16 h = 0x7e00;
                    memcpy(p + i, &h, 2);
                }
            } else if (dt == RB_Q4_K) {
                for (size_t i = 0; i < ebytes; i += sizeof(rb_block_q4_K)) {
                    const rb_f16 h = 0x7e00;
                    memcpy(p + i, &h, 2);
                    memcpy(p + i + 2, &h, 2);
                }
            } else {
                memset(p, 0xff, ebytes); /* scale 2^127 times -12: -inf */
            }
        }
        TU_OK(rb_buffer_set(a.cb, 0, a.orig, a.size));
        TU_OK(rb_buffer_set(a.gb, 0, a.orig, a.size));
        const int32_t sel[2] = {5, 2};
        gp it = gp_ids(e->c, e->g, sel, 2, 1);
        poison_gpu(&d);
        TU_OK(rb_matmul_id(e->c, &d.c, &a.c, &b.c, &it.c));
        id_path(e, mode, 0);
        const unsigned long long g0 = id_gemm_calls(e);
        TU_OK(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &it.g));
        TU_OK(rb_backend_sync(e->g));
        const bool gemm = id_gemm_calls(e) > g0;
        id_path(e, 0, 0);
        double *got = gp_read(&d, 1), *cpu = gp_read(&d, 0);
        for (int64_t i = 0; i < N * 2; i++)
            if (!isfinite(got[i])) fail_msg("%s: output %lld is %g: an unselected expert was read", rb_dtype_name(dt),
                                            (long long)i, got[i]);
        double b_ref, bound;
        id_bounds(e, dt, gemm, &b_ref, &bound);
        const double err = rel_l2(got, cpu, N * 2);
        if (!(err <= bound)) fail_msg("%s: rel L2 %.3g against the CPU backend", rb_dtype_name(dt), err);
        print_message("matmul_id %s decode with NaN in the other experts%s: ok (vs cpu %.2e)\n", rb_dtype_name(dt),
                      gemm ? " (expert GEMMs)" : "", err);
        free(got);
        free(cpu);
        gp_free(&a);
        gp_free(&b);
        gp_free(&d);
        gp_free(&it);
    }
}

static void test_matmul_id_bad(void **state) {
    PREP(4006);
    const int64_t ane[4] = {64, 8, 3, 1}, bne[4] = {64, 1, 2, 1}, dne[4] = {8, 2, 2, 1};
    gp a = MK(RB_Q8_0, ane, GP_CONTIG, -1, 1), b = MK(RB_F32, bne, GP_CONTIG, -1, 1), d = MK(RB_F32, dne, GP_CONTIG, 3, 4);
    const int32_t bad[4] = {0, 1, 3, 0}, neg[4] = {0, -1, 1, 2};
    gp ib = gp_ids(e->c, e->g, bad, 2, 2), in = gp_ids(e->c, e->g, neg, 2, 2);
    assert_int_equal(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &ib.g), RB_E_RANGE);
    assert_non_null(strstr(rb_backend_last_error(e->g), "expert id 3"));
    assert_int_equal(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &in.g), RB_E_RANGE);
    assert_non_null(strstr(rb_backend_last_error(e->g), "expert id -1"));
    TU_OK(rb_backend_sync(e->g));
    assert_true(gp_gpu_unchanged(&d));
    /* experts of a format the GPU does not read: refused, nothing written */
    gp a5 = MK(RB_Q5_0, ane, GP_CONTIG, -1, 1);
    const int32_t ok[4] = {0, 1, 2, 0};
    gp io = gp_ids(e->c, e->g, ok, 2, 2);
    assert_int_equal(rb_matmul_id(e->g, &d.g, &a5.g, &b.g, &io.g), RB_E_UNSUPPORTED);
    TU_OK(rb_backend_sync(e->g));
    assert_true(gp_gpu_unchanged(&d));
    TU_OK(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &io.g)); /* the backend is still usable */
    TU_OK(rb_backend_sync(e->g));
    gp_free(&a);
    gp_free(&a5);
    gp_free(&b);
    gp_free(&d);
    gp_free(&ib);
    gp_free(&in);
    gp_free(&io);
}

/* rb_matmul_id captured into a graph: replays read new ids (routing on the
 * device), and an out-of-range id is reported at the synchronize. */
static void test_matmul_id_graph(void **state) {
    PREP(4007);
    assert_true(rb_backend_graphs_supported(e->g));
    const int64_t K = 128, N = 48, E = 8, k = 2, T = 2;
    const int64_t ane[4] = {K, N, E, 1}, bne[4] = {K, 1, T, 1}, dne[4] = {N, k, T, 1};
    gp a = MK(RB_MXFP4, ane, GP_CONTIG, -1, 1), b = MK(RB_F32, bne, GP_CONTIG, -1, 1), d = MK(RB_F32, dne, GP_CONTIG, 0, 1);
    const int32_t sets[4][4] = {{0, 1, 2, 3}, {7, 7, 4, 0}, {5, 6, 6, 5}, {1, 2, 3, 4}};
    gp it = gp_ids(e->c, e->g, sets[0], k, T);
    TU_OK(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &it.g)); /* eager first: sizes the scratch */
    TU_OK(rb_backend_sync(e->g));
    TU_OK(rb_backend_capture_begin(e->g));
    TU_OK(rb_matmul_id(e->g, &d.g, &a.g, &b.g, &it.g));
    rb_graph *gr = NULL;
    TU_OK(rb_backend_capture_end(e->g, &gr));
    for (int si = 1; si < 5; si++) {
        const int32_t *ids = sets[si % 4];
        TU_OK(rb_buffer_set(it.cb, 0, ids, sizeof(int32_t) * (size_t)(k * T)));
        TU_OK(rb_buffer_set(it.gb, 0, ids, sizeof(int32_t) * (size_t)(k * T)));
        poison_gpu(&d);
        TU_OK(rb_graph_launch(gr));
        TU_OK(rb_backend_sync(e->g));
        TU_OK(rb_matmul_id(e->c, &d.c, &a.c, &b.c, &it.c));
        double *got = gp_read(&d, 1), *cpu = gp_read(&d, 0);
        const double err = rel_l2(got, cpu, N * k * T);
        for (int64_t i = 0; i < N * k * T; i++)
            if (!isfinite(got[i])) fail_msg("graph replay %d: output %lld is %g", si, (long long)i, got[i]);
        if (!(err <= e->cpu_bound)) fail_msg("graph replay %d: rel L2 %.3g against the CPU backend", si, err);
        free(got);
        free(cpu);
        if (si == 2) { /* a bad id: reported at the synchronize, then the flag is re-armed */
            const int32_t badset[4] = {0, 9, 1, 2};
            TU_OK(rb_buffer_set(it.gb, 0, badset, sizeof badset));
            TU_OK(rb_graph_launch(gr));
            assert_int_equal(rb_backend_sync(e->g), RB_E_RANGE);
            assert_non_null(strstr(rb_backend_last_error(e->g), "rb_matmul_id"));
            TU_OK(rb_backend_sync(e->g));
        }
    }
    print_message("matmul_id graph replays with new ids: ok\n");
    rb_graph_free(gr);
    gp_free(&a);
    gp_free(&b);
    gp_free(&d);
    gp_free(&it);
}

/* ---- mxfp4 decoding ---- */

static void test_mxfp4_decode(void **state) {
    PREP(4008);
    const int64_t K = 32 * 9, R = 8, ne[4] = {K, R, 1, 1};
    const uint8_t exps[] = {0, 1, 2, 3, 100, 125, 126, 127, 128, 129, 200, 253, 254, 255};
    for (int lay = 0; lay < 2; lay++) { /* contiguous rows (the unit kernel) and a slice at an odd offset */
        gp a = MK(RB_MXFP4, ne, lay ? GP_SLICE : GP_CONTIG, -1, 1);
        const rb_tensor *t = &a.c;
        for (int64_t r = 0; r < R; r++)
            for (int64_t bk = 0; bk < K / 32; bk++) {
                unsigned char *p = a.orig + at(t, 0, r, 0, 0) + (size_t)bk * 17;
                p[0] = exps[(r * 9 + bk) % sizeof exps];
                for (int j = 0; j < 16; j++) p[1 + j] = (uint8_t)((r * 9 + bk) * 16 + j * 17); /* every nibble */
            }
        TU_OK(rb_buffer_set(a.cb, 0, a.orig, a.size));
        TU_OK(rb_buffer_set(a.gb, 0, a.orig, a.size));
        float *want = malloc(sizeof(float) * (size_t)(K * R));
        assert_non_null(want);
        for (int64_t r = 0; r < R; r++) TU_OK(rb_dequantize_row(RB_MXFP4, a.orig + at(t, 0, r, 0, 0), want + r * K, K));
        for (int di = 0; di < 2; di++) {
            const rb_dtype ddt = di ? RB_F16 : RB_F32;
            gp d = MK(ddt, ne, GP_CONTIG, 0, 1);
            TU_OK(rb_cast(e->g, &d.g, &a.g));
            TU_OK(rb_backend_sync(e->g));
            unsigned char *got = malloc(d.size);
            assert_non_null(got);
            TU_OK(rb_buffer_get(d.gb, 0, got, d.size));
            for (int64_t i = 0; i < K * R; i++) {
                if (ddt == RB_F32) {
                    uint32_t wb, gb2;
                    memcpy(&wb, &want[i], 4);
                    memcpy(&gb2, got + 4 * i, 4);
                    if (wb != gb2) fail_msg("mxfp4 -> f32 element %lld: gpu bits %08x, cpu %08x", (long long)i, gb2, wb);
                } else {
                    const rb_f16 wh = rb_f32_to_f16(want[i]);
                    rb_f16 gh;
                    memcpy(&gh, got + 2 * i, 2);
                    if (wh != gh) fail_msg("mxfp4 -> f16 element %lld: gpu %04x, cpu %04x", (long long)i, gh, wh);
                }
            }
            free(got);
            gp_free(&d);
        }
        /* get_rows of an mxfp4 table */
        const int32_t rows[5] = {7, 0, 3, 3, 6};
        gp ids = gp_ids(e->c, e->g, rows, 5, 1);
        const int64_t gne[4] = {K, 5, 1, 1};
        gp d = MK(RB_F32, gne, GP_SLICE, 0, 1);
        TU_OK(rb_get_rows(e->g, &d.g, &a.g, &ids.g));
        double *got = gp_read(&d, 1);
        for (int64_t i = 0; i < 5; i++)
            for (int64_t j = 0; j < K; j++)
                if (!((float)got[i * K + j] == want[rows[i] * K + j]))
                    fail_msg("mxfp4 get_rows [%lld, %lld]: gpu %g, cpu %g", (long long)j, (long long)i, got[i * K + j],
                             (double)want[rows[i] * K + j]);
        free(got);
        gp_free(&d);
        gp_free(&ids);
        free(want);
        gp_free(&a);
    }
    print_message("mxfp4 decoding (cast to f32/f16, get_rows) bit-exact: ok\n");
}

/* ---- the gpt-oss MXFP4 GGUF on the GPU ---- */

static float *run_model(rb_backend *be, const char *path, const int32_t *tok, size_t nt, int64_t V, size_t split,
                        float **steps) {
    rb_error err;
    rb_error_clear(&err);
    rb_model *m = NULL;
    if (rb_model_load(path, be, NULL, &m, &err) != RB_OK) fail_msg("%s on %s: %s", path, rb_backend_name(be), err.msg);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, 128, RB_F32, &kv, &err));
    float *all = malloc(sizeof(float) * nt * (size_t)V);
    assert_non_null(all);
    if (rb_model_forward(m, kv, tok, (int64_t)nt, true, all, &err) != RB_OK) fail_msg("%s", err.msg);
    /* again: the first split tokens as a prompt, then one at a time (graph replays on the GPU) */
    rb_kv_cache_truncate(kv, 0);
    *steps = malloc(sizeof(float) * nt * (size_t)V);
    assert_non_null(*steps);
    if (rb_model_forward(m, kv, tok, (int64_t)split, false, *steps, &err) != RB_OK) fail_msg("%s", err.msg);
    for (size_t i = split; i < nt; i++)
        if (rb_model_forward(m, kv, tok + i, 1, false, *steps + (i - split + 1) * (size_t)V, &err) != RB_OK)
            fail_msg("%s", err.msg);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    return all;
}

static double rel_l2_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_gpt_oss_mxfp4_gguf(void **state) {
    PREP(4009);
    char dir[1024], path[1200];
    tu_data(dir, sizeof dir, "models/gpt_oss");
    snprintf(path, sizeof path, "%s/ref.json", dir);
    rb_json_config *ref = NULL;
    TU_OK(rb_json_config_load(path, &ref, NULL));
    size_t nt = 0;
    TU_OK(rb_json_config_arr_len(ref, "tokens", &nt));
    int64_t V = 0;
    TU_OK(rb_json_config_int(ref, "vocab", &V));
    int32_t *tok = malloc(sizeof(int32_t) * nt);
    assert_non_null(tok);
    for (size_t i = 0; i < nt; i++) {
        int64_t v;
        TU_OK(rb_json_config_arr_int(ref, "tokens", i, &v));
        tok[i] = (int32_t)v;
    }
    snprintf(path, sizeof path, "%s/logits_mxfp4.f32", dir);
    size_t nb = 0;
    float *want = tu_read_file(path, &nb);
    assert_int_equal(nb, sizeof(float) * nt * (size_t)V);
    snprintf(path, sizeof path, "%s/model-mxfp4.gguf", dir);
    const size_t split = nt / 2;
    float *gs = NULL, *cs = NULL, *gs2 = NULL;
    /* the experts' matrix-vector kernels (the CPU's int8 sums) for the comparison with the CPU backend */
    id_path(e, -1, 0);
    float *ga = run_model(e->g, path, tok, nt, V, split, &gs), *ca = run_model(e->c, path, tok, nt, V, split, &cs);
    const double e_cpu = rel_l2_f(ga, ca, nt * (size_t)V), e_ref = rel_l2_f(ga, want, nt * (size_t)V);
    /* the decode run's logits: last of the prompt, then each step */
    const size_t ns = nt - split + 1;
    const double e_steps = rel_l2_f(gs, cs, ns * (size_t)V);
    print_message("gpt-oss MXFP4 GGUF on the GPU: vs CPU %.2e (prefill), %.2e (decode steps); vs transformers on the "
                  "dequantized experts %.3g\n", e_cpu, e_steps, e_ref);
    if (!(e_cpu <= 2e-3) || !(e_steps <= 2e-3)) fail_msg("gpt-oss MXFP4 on the GPU differs from the CPU backend");
    if (!(e_ref <= 4.5e-2)) fail_msg("gpt-oss MXFP4 on the GPU: %.3g from transformers' dequantized model", e_ref);
    /* the expert GEMMs (f16 activations, no int8 sums): within the CPU's bound of transformers */
    id_path(e, 1, 0);
    const unsigned long long g0 = id_gemm_calls(e);
    float *gg = run_model(e->g, path, tok, nt, V, split, &gs2);
    const bool gemm = id_gemm_calls(e) > g0;
    id_path(e, 0, 0);
    const double e_gref = rel_l2_f(gg, want, nt * (size_t)V);
    print_message("gpt-oss MXFP4 GGUF on the GPU, expert GEMMs%s: vs transformers %.3g\n", gemm ? "" : " (not taken)",
                  e_gref);
    if (!gemm && rb_backend_kind(e->g) == RB_DEVICE_CUDA) fail_msg("gpt-oss MXFP4: the expert GEMMs did not run");
    if (!(e_gref <= 4.5e-2)) fail_msg("gpt-oss MXFP4, expert GEMMs: %.3g from transformers' dequantized model", e_gref);
    free(gg);
    free(gs2);
    free(ga);
    free(ca);
    free(gs);
    free(cs);
    free(want);
    free(tok);
    rb_json_config_free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk),
        cmocka_unit_test(test_argsort),
        cmocka_unit_test(test_swiglu_clamp),
        cmocka_unit_test(test_matmul_id),
        cmocka_unit_test(test_matmul_id_gemm),
        cmocka_unit_test(test_matmul_id_path),
        cmocka_unit_test(test_matmul_id_selected_only),
        cmocka_unit_test(test_matmul_id_bad),
        cmocka_unit_test(test_matmul_id_graph),
        cmocka_unit_test(test_mxfp4_decode),
        cmocka_unit_test(test_gpt_oss_mxfp4_gguf),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
