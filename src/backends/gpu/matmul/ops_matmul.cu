/* GPU matrix product with ggml semantics (dst[m][n] = sum_k a[n][k] b[m][k],
 * a's dims 2/3 broadcast over b's). Two paths:
 *  - M <= MV_MAX_M = 32 (decode, small batches; fewer rows for the formats
 *    below): the staged matrix-vector
 *    kernels of matvec.cuh, which read each weight byte once for all M rows
 *    (ggml blocks q4_0, q8_0, q4_K, q5_K, q6_K with int8 activations quantized the
 *    way the CPU backend does; f32/f16/bf16 rows with f32 activations), and
 *    a plain one-warp-per-row kernel here for float weights in unaligned or
 *    strided layouts and for f32 weights at M <= 2 (measured faster there).
 *  - q4_0 / q8_0 / q4_K / q5_K / q6_K weights at Q8_MIN_M = 9 <= M <=
 *    Q8_MAX_M = 64 (many streams' decode, CUDA on sm_80+): gemm_q8.cuh,
 *    int8 tensor-core tiles over the activations quantized as the
 *    matrix-vector kernels quantize them, weights read once per 64 rows.
 *  - float weights from M = 5 where cuBLAS is there: the GEMM (bench_gpu
 *    ops, H100, bf16 4096 x 11008: 41 us at M = 8 and 43 at 32, against 102
 *    and 190 for the matrix-vector kernel, whose f32 FMAs bound it); up to
 *    32 rows the activations go in as hi and lo 16-bit rows (k_split16) so
 *    the products keep f32-like precision; above, rounded to the weights'
 *    type, as in a prefill.
 *  - larger M (prefill): weights are dequantized to f16 (quantized) or used in
 *    place, activations converted to the same type, then one GEMM per batch
 *    slice: cuBLAS (cublasGemmEx, f32 accumulation, no TF32) on CUDA, the own
 *    tiled GEMM of gemm_tiled.cu on HIP (and on CUDA when a test asks:
 *    rb_gpu_tuning.tiled_gemm).
 * gpu_matmul_fused runs rb_matmul_fused through the direct decode kernels
 * (matvec_direct.cuh): the residual add as a block stores the product, the
 * gated output (glu_out) and the rope (normal mode) from pairs of rows a
 * group computes together, the store (KV-cache write) as rows are stored, and
 * for quantized weights (q4_0, q8_0, q4_K, q5_K, q6_K) the norm as it quantizes the
 * activations; a gate, or a norm before float weights, runs as its own kernel
 * first (folding them in made every block read the activations twice:
 * measured slower). Where the direct kernels do not apply it answers
 * RB_E_UNSUPPORTED before queueing anything and the front-end runs the
 * separate ops.
 */
#include "backends/gpu/matmul/gemm_q8.cuh"
#include "backends/gpu/matmul/gemm_q8_plain.cuh"
#include "backends/gpu/matmul/matvec.cuh"

#include <limits.h>
#include <stdio.h>
#include <string.h>

namespace RB_GPU_NS {

#define MV_MAX 8 /* activation rows per pass of the plain float kernel */
#define FLOAT_MV_MAX_M 4 /* float weights: the matrix-vector kernels up to this many rows where cuBLAS takes more */
#define MVF_THREADS 128

/* Eight weights from a 16-byte load of a float row (f32: two loads). */
__device__ __forceinline__ void load8(int dt, const char *p, float w[8]) {
    if (dt == RB_F32) {
        const float4 u = ((const float4 *)p)[0], v = ((const float4 *)p)[1];
        w[0] = u.x; w[1] = u.y; w[2] = u.z; w[3] = u.w;
        w[4] = v.x; w[5] = v.y; w[6] = v.z; w[7] = v.w;
        return;
    }
    const uint4 u = *(const uint4 *)p;
    const uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const uint16_t lo = (uint16_t)(q[t] & 0xffffu), hi = (uint16_t)(q[t] >> 16);
        w[2 * t] = dt == RB_F16 ? f16_bits_to_f32(lo) : bf16_to_f32(lo);
        w[2 * t + 1] = dt == RB_F16 ? f16_bits_to_f32(hi) : bf16_to_f32(hi);
    }
}

/* Float weights the staged kernel does not take (unaligned or strided rows;
 * f32 at M <= 2), one warp per row, M <= MV_MAX; vec: rows of a are 16-byte
 * aligned with K % 8 == 0. Rows of b are f32, contiguous, 16-byte aligned. */
__global__ void __launch_bounds__(MVF_THREADS) k_mv_float(gt d, gt a, gt b, int64_t r2, int64_t r3, int vec) {
    const int lane = threadIdx.x % RB_WARP, nw = blockDim.x / RB_WARP;
    const int64_t N = a.ne[1], M = b.ne[1], K = a.ne[0];
    const int64_t i2 = blockIdx.y % d.ne[2], i3 = blockIdx.y / d.ne[2];
    const char *ab = a.p + (i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3];
    const char *bb = b.p + i2 * b.nb[2] + i3 * b.nb[3];
    for (int64_t n = (int64_t)blockIdx.x * nw + threadIdx.x / RB_WARP; n < N; n += (int64_t)gridDim.x * nw) {
        const char *arow = ab + n * a.nb[1];
        float acc[MV_MAX];
#pragma unroll
        for (int m = 0; m < MV_MAX; m++) acc[m] = 0.0f;
        if (vec) {
            for (int64_t k0 = (int64_t)lane * 8; k0 < K; k0 += 8 * RB_WARP) {
                float w[8];
                load8(a.dt, arow + k0 * a.nb[0], w);
#pragma unroll
                for (int m = 0; m < MV_MAX; m++) {
                    if (m >= M) break;
                    const float4 *x = (const float4 *)(bb + m * b.nb[1] + k0 * 4);
                    const float4 u = x[0], v = x[1];
                    acc[m] += w[0] * u.x + w[1] * u.y + w[2] * u.z + w[3] * u.w + w[4] * v.x + w[5] * v.y +
                              w[6] * v.z + w[7] * v.w;
                }
            }
        } else {
            for (int64_t k = lane; k < K; k += RB_WARP) {
                const float w = ldf(a.dt, arow + k * a.nb[0]);
#pragma unroll
                for (int m = 0; m < MV_MAX; m++) {
                    if (m >= M) break;
                    acc[m] += w * *(const float *)(bb + m * b.nb[1] + k * 4);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < MV_MAX; m++) {
            if (m >= M) break;
            const float s = warp_sum(acc[m]);
            if (lane == 0) stf(d.dt, d.p + n * d.nb[0] + m * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3], s);
        }
    }
}

/* Activations for a GEMM on 16-bit float weights at few rows, kept to
 * f32-like precision: row m of b (any f32/f16/bf16 view, one batch slice)
 * as two 16-bit rows of the weights' type, hi = round(x) at m and lo =
 * round(x - hi) at M + m, of a contiguous [K, 2M] buffer. A GEMM of 2M rows
 * reads the weights once, as one of M rows does, and the two halves of its
 * result add up to the product of the unrounded activations within about
 * 2^-16 (bf16) / 2^-22 (f16) of each term. */
__global__ void k_split16(gt b, uint16_t *out, int bf) {
    const int64_t K = b.ne[0], M = b.ne[1];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < K * M; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i % K, m = i / K;
        const float x = ldf(b.dt, b.p + k * b.nb[0] + m * b.nb[1]);
        const uint16_t hi = bf ? f32_to_bf16(x) : f32_to_f16_bits(x);
        const float hv = bf ? bf16_to_f32(hi) : f16_bits_to_f32(hi);
        out[m * K + k] = hi;
        out[(M + m) * K + k] = bf ? f32_to_bf16(x - hv) : f32_to_f16_bits(x - hv);
    }
}

/* d[m][n] = c[m][n] + c[M + m][n]: the two halves of a k_split16 GEMM (c
 * column-major [N, 2M], f32) into the destination view (one batch slice). */
__global__ void k_add_halves(gt d, const float *c) {
    const int64_t N = d.ne[0], M = d.ne[1];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * M; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = i % N, m = i / N;
        stf(d.dt, d.p + n * d.nb[0] + m * d.nb[1], c[m * N + n] + c[(M + m) * N + n]);
    }
}

static bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Scratch sub-allocation: 256-byte aligned pieces of one region. */
struct carve {
    char *base;
    size_t used;
    void *take(size_t n) {
        void *p = base + used;
        used += (n + 255) & ~(size_t)255;
        return p;
    }
};

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

#if !defined(RBEE_GPU_HIP)
static rb_status blas_fail(rb_backend *be, cublasStatus_t st) {
    return rb_backend_fail(be, RB_E_BACKEND, "rb_matmul: cuBLAS failed with status %d", (int)st);
}
#endif

/* Whether the 16-byte aligned pieces that hold a's rows (from the first
 * row's start rounded down to the last row's end rounded up) lie inside
 * a's buffer: the direct kernel reads q6_K rows, only 2-byte aligned, in
 * such pieces. Strides are non-negative (views). */
static bool pieces_inside(const rb_tensor *a) {
    size_t end = a->offs + rb_dtype_row_size(a->dtype, a->ne[0]);
    for (int i = 1; i < 4; i++) {
        if (a->ne[i] < 1) return false;
        end += (size_t)(a->ne[i] - 1) * a->nb[i];
    }
    const uintptr_t base = (uintptr_t)a->buf->impl;
    return base % 16 == 0 && ((end + 15) & ~(size_t)15) <= a->buf->size;
}

static bool f32_rows16(const rb_tensor *t) {
    return t->dtype == RB_F32 && t->nb[0] == 4 && t->ne[0] % 4 == 0 && t->nb[1] % 16 == 0 && t->nb[2] % 16 == 0 &&
           t->nb[3] % 16 == 0 && al16(gview(t).p);
}

rb_status gpu_matmul_fused(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                           const rb_matmul_fusion *f) {
    const int64_t M = b->ne[1];
    /* one slice of f32 rows, an f32 destination when accumulating */
    if (M < 1 || a->ne[0] < 1 || a->ne[1] < 1 || a->ne[2] != 1 || a->ne[3] != 1 ||
        b->ne[2] != 1 || b->ne[3] != 1 || !f32_rows16(b) || (f->accumulate && dst->dtype != RB_F32))
        return RB_E_UNSUPPORTED;
    const bool quant = rb_dtype_info((int)a->dtype)->is_quant;
    if (quant && !gpu_units_aligned(a->dtype, gview(a))) return RB_E_UNSUPPORTED;
    if (gpu_iq_dtype(a->dtype)) return RB_E_UNSUPPORTED; /* no matrix-vector kernels */
    const bool acc = f->accumulate, gluo = f->glu_out;
    /* rope on row pairs (2 i, 2 i + 1): normal mode, f32 destination rows */
    const bool rope = f->rope && f->rope->mode == RB_ROPE_NORMAL && a->ne[1] % 2 == 0 &&
                      f->rope_head_dim % 2 == 0 && f->rope_head_dim <= INT_MAX / 2 && a->ne[1] <= INT_MAX;
    /* the norm inside the product: quantized weights quantize the
     * activations in each block anyway (f32 contiguous norm weight) */
    const bool norm_in = f->norm &&
                         (a->dtype == RB_Q4_0 || a->dtype == RB_Q8_0 || a->dtype == RB_Q4_K || a->dtype == RB_Q5_K ||
                          a->dtype == RB_Q6_K) &&
                         (!f->norm_w || (f->norm_w->dtype == RB_F32 && f->norm_w->nb[0] == 4 &&
                                         al16(gview(f->norm_w).p)));
    const bool pre = f->norm || f->glu;
    const bool store = f->store_dst && f->store_dst->ne[2] == 1 && f->store_dst->ne[3] == 1;
    if (!acc && !norm_in && !gluo && !rope && !store) return RB_E_UNSUPPORTED; /* nothing to fuse */
    if ((f->accumulate && !acc) || (f->glu_out && !gluo) || (f->rope && !rope) || (f->store_dst && !store))
        return RB_E_UNSUPPORTED;
    mvd_args p = {};
    p.acc = acc;
    p.gluo = gluo;
    p.act = (int)f->act;
    if (store) { /* slots checked on the host now, or by the kernel while capturing */
        int *guard = gpu_ids_guard(be);
        if (!guard) {
            rb_status s = gpu_check_ids(be, f->store_ids, f->store_dst->ne[1], "rb_matmul_fused (store)");
            if (s != RB_OK) return s;
        }
        const gt sd = gview(f->store_dst);
        p.sp = sd.p;
        p.sdt = sd.dt;
        p.snb0 = sd.nb[0];
        p.snb1 = sd.nb[1];
        p.sslots = sd.ne[1];
        p.srow0 = f->store_row0;
        p.sids = gview(f->store_ids).p;
        p.sids_nb = (int64_t)f->store_ids->nb[0];
        p.sguard = guard;
    }
    if (rope) {
        p.rope = 1;
        p.rsplit = !gb(be)->tune.rope_pairs_only;
        p.rhd = (int)f->rope_head_dim;
        p.rrows = (int)(f->rope_heads * f->rope_head_dim);
        p.rnrot = f->rope->n_rot;
        p.rbase = (double)f->rope->freq_base;
        p.rfscale = (double)f->rope->freq_scale;
        p.rattn = (double)f->rope->attn_factor;
        for (int i = 0; i < MVD_ROPE_FREQS; i++) /* as gpu_rope's table */
            p.rfreq[i] = i < f->rope->n_rot / 2 ? rope_freq(p.rbase, p.rfscale, p.rnrot, i) : 0.0;
        p.rpos = gview(f->rope_pos).p;
        p.rpos_nb = (int64_t)f->rope_pos->nb[0];
        if (f->rope->freq_factors) {
            p.rff = gview(f->rope->freq_factors).p;
            p.rff_nb = (int64_t)f->rope->freq_factors->nb[0];
        }
    }
    p.eps = f->eps;
    const rb_tensor *in = b;
    if (norm_in) {
        p.pre = MVD_PRE_NORM;
        p.nw = f->norm_w ? (const float *)gview(f->norm_w).p : NULL;
        p.nwc = f->norm_w && f->norm_w->buf->constant;
    } else if (pre) { /* the norm or gate as its own kernel, then the product with its add */
        rb_status s = f->norm ? gpu_rms_norm(be, f->tmp_in, b, f->norm_w, f->eps)
                              : gpu_glu(be, f->tmp_in, b, f->up, f->act);
        if (s != RB_OK) return s;
        in = f->tmp_in;
    }
    bool done = false;
    if (!pre || norm_in || f32_rows16(in)) {
        rb_status s =
            gpu_matvec_fused(be, gview(dst), gview(a), gview(in), p, a->buf->constant, pieces_inside(a), &done);
        if (s != RB_OK || done) return s;
    }
    if (!pre || norm_in) return RB_E_UNSUPPORTED; /* nothing queued yet */
    /* the input op is queued: finish with the separate product and add, gate or rope */
    if (rope || store) {
        rb_status s = gpu_matmul(be, dst, a, in);
        if (s == RB_OK && rope) {
            rb_tensor rv = rb_fusion_rope_view(dst, f);
            s = gpu_rope(be, &rv, &rv, f->rope_pos, f->rope);
        }
        if (s == RB_OK && store) {
            rb_tensor sv = rb_fusion_store_view(dst, f);
            s = gpu_set_rows(be, f->store_dst, &sv, f->store_ids);
        }
        return s;
    }
    rb_status s = gpu_matmul(be, f->tmp_out, a, in);
    if (s != RB_OK) return s;
    if (gluo) {
        rb_tensor gate = *f->tmp_out, up = *f->tmp_out;
        gate.ne[0] = up.ne[0] = dst->ne[0];
        up.offs += (size_t)dst->ne[0] * up.nb[0];
        return gpu_glu(be, dst, &gate, &up, f->act);
    }
    return gpu_binary(be, RB_BINARY_ADD, dst, dst, f->tmp_out);
}

#if !defined(RBEE_GPU_HIP)
/* q4_0 / q8_0 weights by the first int8 kernel (gemm_q8_plain.cuh), for the
 * benchmark's before / after: activations quantized by mv_quant_acts (bf:
 * bv as contiguous aligned f32 rows, or NULL), 9..64 rows. */
static rb_status gemm_q8_plain(rb_backend *be, const gt &dv, const gt &av, const gt &bv, const gt *bf, int64_t r2,
                               int64_t r3) {
    gpu_backend *g = gb(be);
    const int64_t K = av.ne[0], N = av.ne[1], M = bv.ne[1], slices = dv.ne[2] * dv.ne[3];
    const int8_t *xq = NULL;
    const int2 *xs = NULL;
    rb_status s = mv_quant_acts<false>(be, bv, bf, slices, M, K, &xq, &xs);
    if (s != RB_OK) return s;
    const int64_t mt = (M + Q8P_BM - 1) / Q8P_BM;
    const int bn = gemm_q8p_bn(N, mt, slices, g->n_sm);
    const int64_t nt = (N + bn - 1) / bn;
    if (nt > 0x7fffffffLL) return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_matmul: %lld rows", (long long)N);
    const dim3 grid((unsigned)nt, (unsigned)mt, (unsigned)slices);
    const bool q4 = av.dt == RB_Q4_0;
    if (bn == 64)
        (q4 ? k_gemm_q8_plain<64, RB_Q4_0> : k_gemm_q8_plain<64, RB_Q8_0>)<<<grid, Q8P_THREADS, 0, g->stream>>>(
            dv, av, xq, xs, M, r2, r3);
    else if (bn == 32)
        (q4 ? k_gemm_q8_plain<32, RB_Q4_0> : k_gemm_q8_plain<32, RB_Q8_0>)<<<grid, Q8P_THREADS, 0, g->stream>>>(
            dv, av, xq, xs, M, r2, r3);
    else
        (q4 ? k_gemm_q8_plain<16, RB_Q4_0> : k_gemm_q8_plain<16, RB_Q8_0>)<<<grid, Q8P_THREADS, 0, g->stream>>>(
            dv, av, xq, xs, M, r2, r3);
    return gpu_check_launch(be, "matmul (q4_0 / q8_0 weights, first int8 tensor-core kernel)");
}
#endif

rb_status gpu_matmul(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    gpu_backend *g = gb(be);
    const rb_dtype_traits *at = rb_dtype_info((int)a->dtype);
    const bool quant = at->is_quant;
    if (quant && (!gpu_quant_ok(a->dtype) || a->dtype == RB_MXFP4)) /* mxfp4: experts only (rb_matmul_id) */
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_matmul: weights of dtype %s are not supported on %s (q4_0, q8_0, q4_K, q5_K, q6_K, "
                               "iq4_nl, iq4_xs, iq3_xxs, iq3_s, iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m, f32, f16, bf16 "
                               "are)",
                               rb_dtype_name(a->dtype), be->name);
    const int64_t K = a->ne[0], N = a->ne[1], M = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    if (N == 0 || M == 0 || B2 == 0 || B3 == 0) return RB_OK;
    if (K == 0) return gpu_fill(be, dst, 0.0f);
    if (B2 * B3 > 65535)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_matmul: %lld batch slices exceed the GPU grid",
                               (long long)(B2 * B3));
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];
    gt av = gview(a), bv = gview(b), dv = gview(dst);
    if (quant && !gpu_units_aligned(a->dtype, av))
        return rb_backend_fail(be, RB_E_UNSUPPORTED,
                               "rb_matmul: %s weights at a misaligned address or row stride are not supported on %s",
                               rb_dtype_name(a->dtype), be->name);

    bool tiled = g->tune.tiled_gemm;
#if defined(RBEE_GPU_HIP)
    tiled = true;
#endif
    /* how many rows the matrix-vector kernels take (see the header) */
    bool q8 = false;
    int64_t q8_min = 0;
#if !defined(RBEE_GPU_HIP)
    q8 = gq_takes(a->dtype, K) && !g->tune.no_gemm_q8 && gq_usable(be);
    q8_min = g->tune.gemm_q8_min_m > 0 ? g->tune.gemm_q8_min_m : Q8_MIN_M;
    int64_t q8_max =
        g->tune.gemm_q8_max_m > 0 ? (g->tune.gemm_q8_max_m < GQ_MAX_M ? g->tune.gemm_q8_max_m : GQ_MAX_M) : Q8_MAX_M;
    if (g->tune.gemm_q8_plain && (a->dtype == RB_Q4_0 || a->dtype == RB_Q8_0)) { /* the first kernel's rows */
        q8_min = Q8_MIN_M;
        q8_max = Q8_MAX_M;
    }
    if (q8_min > q8_max) q8 = false;
#endif
    int64_t mv_max = q8 ? q8_min - 1 : !quant && !tiled ? FLOAT_MV_MAX_M : MV_MAX_M;
    if (g->tune.mv_max_m > 0) mv_max = g->tune.mv_max_m < MV_MAX_M ? g->tune.mv_max_m : MV_MAX_M;
    /* the iq formats: no matrix-vector kernels yet; every M takes the GEMM
     * path below, which decodes the weights to f16 (gpu_copy_view) first */
    if (gpu_iq_dtype(a->dtype)) mv_max = 0;
    if (M <= mv_max) {
        /* decode and small batches: matvec.cuh, weights read once for all M
         * rows; f32 activations wanted as contiguous 16-byte aligned rows */
        const bool b_ok = b->dtype == RB_F32 && b->nb[0] == 4 && al16(bv.p) && b->nb[1] % 16 == 0 &&
                          b->nb[2] % 16 == 0 && b->nb[3] % 16 == 0;
        gt bf = bv;
        if (!b_ok && !quant) { /* quantized weights read any view when quantizing it */
            void *sp = NULL;
            rb_status s = gpu_scratch(be, (size_t)(K * M * B2 * B3) * 4, &sp);
            if (s != RB_OK) return s;
            bf = gpu_contig_view(sp, RB_F32, K, M, B2, B3);
            s = gpu_copy_view(be, bf, bv);
            if (s != RB_OK) return s;
        }
        bool done = false;
        rb_status s = gpu_matvec(be, dv, av, bv, (b_ok || !quant) ? &bf : NULL, r2, r3, a->buf->constant,
                                 quant && pieces_inside(a), &done);
        if (s != RB_OK || done) return s;
        if (quant)
            return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_matmul: %s rows of %lld elements are too long for %s",
                                   rb_dtype_name(a->dtype), (long long)K, be->name);
        /* other float cases: the plain kernel, MV_MAX rows a pass */
        const size_t es = at->type_size;
        const int vec = a->nb[0] == es && K % 8 == 0 && al16(av.p) && a->nb[1] % 16 == 0 && a->nb[2] % 16 == 0 &&
                        a->nb[3] % 16 == 0;
        const int nw = MVF_THREADS / g->warp;
        int64_t bx = (N + nw - 1) / nw;
        if (bx > 65535LL * 8) bx = 65535LL * 8;
        const dim3 grid((unsigned)bx, (unsigned)(B2 * B3));
        for (int64_t m0 = 0; m0 < M; m0 += MV_MAX) {
            gt bs = bf, ds = dv;
            bs.ne[1] = ds.ne[1] = M - m0 < MV_MAX ? M - m0 : MV_MAX;
            bs.p += m0 * bf.nb[1];
            ds.p += m0 * dv.nb[1];
            k_mv_float<<<grid, MVF_THREADS, 0, g->stream>>>(ds, av, bs, r2, r3, vec);
            s = gpu_check_launch(be, "matmul (matrix-vector)");
            if (s != RB_OK) return s;
        }
        return RB_OK;
    }

    /* ---- quantized weights, up to q8_max rows: gemm_q8.cuh (CUDA only: HIP's
     * clang-15 AMDGPU back end crashed on the first such kernel) ---- */
#if !defined(RBEE_GPU_HIP)
    if (q8 && M <= q8_max) {
        const bool b_ok = b->dtype == RB_F32 && b->nb[0] == 4 && al16(bv.p) && b->nb[1] % 16 == 0 &&
                          b->nb[2] % 16 == 0 && b->nb[3] % 16 == 0;
        if (g->tune.gemm_q8_plain && (a->dtype == RB_Q4_0 || a->dtype == RB_Q8_0))
            return gemm_q8_plain(be, dv, av, bv, b_ok ? &bv : NULL, r2, r3);
        bool done = false;
        rb_status s = gpu_gemm_q8(be, dv, av, bv, b_ok ? &bv : NULL, r2, r3, a->buf->constant, &done);
        if (s != RB_OK || done) return s;
        /* not done: tiles too large for this device's shared memory, the GEMM path */
    }
#endif

    /* ---- GEMM path ---- */
    /* compute type of both operands: f16 for quantized/f16 weights, f32 for
     * f32 weights, bf16 (cuBLAS) or f32 (tiled) for bf16 weights */
    rb_dtype ct = RB_F16;
    if (a->dtype == RB_F32) ct = RB_F32;
    if (a->dtype == RB_BF16) ct = tiled ? RB_F32 : RB_BF16;
    const size_t ces = ct == RB_F32 ? 4 : 2;
    /* 16-bit float weights at up to MV_MAX_M rows (batched decode, short
     * prompts): the activations split into hi and lo rows (k_split16), so
     * the products keep the f32-like precision of the matrix-vector kernels */
    const bool split = !quant && ct != RB_F32 && M <= MV_MAX_M;
    const int64_t Mb = split ? 2 * M : M; /* rows of the GEMM */
    const bool a_direct = a->dtype == ct && a->nb[0] == ces && a->nb[1] % ces == 0;
    const bool b_direct = !split && b->dtype == ct && b->nb[0] == ces && b->nb[1] % ces == 0;
    /* cuBLAS also writes 16-bit results of 16-bit operands (f32 accumulation) */
    const bool c_half =
        !split && !tiled && ct != RB_F32 && dst->dtype == ct && dst->nb[0] == 2 && dst->nb[1] % 2 == 0;
    const bool c_direct = !split && ((dst->dtype == RB_F32 && dst->nb[0] == 4 && dst->nb[1] % 4 == 0) || c_half);
    size_t need = 0;
    if (!a_direct) need += up256((size_t)(N * K) * ces);
    if (!b_direct) need += up256((size_t)(Mb * K) * ces);
    if (!c_direct) need += up256((size_t)(N * Mb) * 4);
    carve cv = {NULL, 0};
    if (need) {
        void *sp = NULL;
        rb_status s = gpu_scratch(be, need, &sp);
        if (s != RB_OK) return s;
        cv.base = (char *)sp;
    }
    void *a_buf = a_direct ? NULL : cv.take((size_t)(N * K) * ces);
    void *b_buf = b_direct ? NULL : cv.take((size_t)(Mb * K) * ces);
    float *c_buf = c_direct ? NULL : (float *)cv.take((size_t)(N * Mb) * 4);
    int64_t last_a2 = -1, last_a3 = -1;
    for (int64_t i3 = 0; i3 < B3; i3++)
        for (int64_t i2 = 0; i2 < B2; i2++) {
            const int64_t a2 = i2 / r2, a3 = i3 / r3;
            gt as = av, bs = bv, ds = dv;
            as.p += a2 * av.nb[2] + a3 * av.nb[3];
            bs.p += i2 * bv.nb[2] + i3 * bv.nb[3];
            ds.p += i2 * dv.nb[2] + i3 * dv.nb[3];
            as.ne[2] = as.ne[3] = bs.ne[2] = bs.ne[3] = ds.ne[2] = ds.ne[3] = 1;
            const void *A = as.p, *Bp = bs.p;
            int64_t lda = a_direct ? (int64_t)(a->nb[1] / ces) : K, ldb = b_direct ? (int64_t)(b->nb[1] / ces) : K;
            rb_status s = RB_OK;
            if (!a_direct) {
                if (a2 != last_a2 || a3 != last_a3) s = gpu_copy_view(be, gpu_contig_view(a_buf, ct, K, N, 1, 1), as);
                last_a2 = a2;
                last_a3 = a3;
                A = a_buf;
            }
            if (s == RB_OK && split) {
                k_split16<<<gpu_blocks(K * M, 256), 256, 0, g->stream>>>(bs, (uint16_t *)b_buf, ct == RB_BF16);
                s = gpu_check_launch(be, "matmul (split activations)");
                Bp = b_buf;
            } else if (s == RB_OK && !b_direct) {
                s = gpu_copy_view(be, gpu_contig_view(b_buf, ct, K, M, 1, 1), bs);
                Bp = b_buf;
            }
            if (s != RB_OK) return s;
            float *C = c_direct ? (float *)ds.p : c_buf;
            const int64_t ldc = c_direct ? (int64_t)(dst->nb[1] / (c_half ? 2 : 4)) : N;
            if (tiled) {
                s = gpu_gemm_tiled(be, A, lda, Bp, ldb, ct == RB_F16, C, N, Mb, K, ldc);
            } else {
#if !defined(RBEE_GPU_HIP)
                const float alpha = 1.0f, beta = 0.0f;
                const cudaDataType_t dt = ct == RB_F32 ? CUDA_R_32F : ct == RB_F16 ? CUDA_R_16F : CUDA_R_16BF;
                cublasStatus_t bst = cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)Mb, (int)K, &alpha, A,
                                                  dt, (int)lda, Bp, dt, (int)ldb, &beta, C,
                                                  c_half ? dt : CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                                                  CUBLAS_GEMM_DEFAULT);
                if (bst != CUBLAS_STATUS_SUCCESS) return blas_fail(be, bst);
#endif
            }
            if (s != RB_OK) return s;
            if (split) {
                k_add_halves<<<gpu_blocks(N * M, 256), 256, 0, g->stream>>>(ds, c_buf);
                s = gpu_check_launch(be, "matmul (split halves)");
                if (s != RB_OK) return s;
            } else if (!c_direct) {
                s = gpu_copy_view(be, ds, gpu_contig_view(c_buf, RB_F32, N, M, 1, 1));
                if (s != RB_OK) return s;
            }
        }
    return RB_OK;
}

} // namespace RB_GPU_NS
