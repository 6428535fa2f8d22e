/* rb_matmul on the GPU against a double-precision reference computed from
 * the dequantized weights and the stored activations, and (quantized weights)
 * against the CPU backend, for weights in f32, f16, bf16, q4_0, q8_0, q4_K,
 * q5_K, q6_K, iq4_nl, iq4_xs, iq3_xxs, iq3_s, iq2_xxs, iq2_xs, iq2_s, iq1_s
 * and iq1_m (the iq formats in run_all only: decoded to f16 for the GEMM at
 * every M, within the matrix-vector bound below 33 rows).
 *  - run_all: M = 1, 3, 8, 19, 70 and 130 through every path (matrix-vector
 *    kernels; float weights from 5 rows and every type from 33: the GEMM;
 *    q4_0 / q8_0 / q4_K / q5_K / q6_K from 9 to 64 rows: gemm_q8.cuh); odd N and K; a's dims 2/3
 *    broadcast over b's; permuted/sliced activations of f32/f16/bf16; f32
 *    and f16 destinations in strided views. Run twice: with the default GEMM
 *    (cuBLAS on CUDA) and with the tuning's tiled_gemm (the own kernel HIP
 *    uses; the matrix-vector kernels up to 32 rows) and no_gemm_q8.
 *  - test_gemm_q8: gemm_q8.cuh at larger shapes (see there);
 *    test_gemm_q8_sweep: every format it takes x M from 1 to 256 (the
 *    tuning's gemm_q8_min_m / max_m) x odd N x K, against the reference and
 *    the CPU backend as the matrix-vector sweep below; test_gemm_q8_exact:
 *    q4_0 / q8_0 bit-identical to the first kernel (gemm_q8_plain.cuh).
 *  - test_matvec_sweep: every weight type x M in {1, 2, 3, 7, 8, 9, 16, 31,
 *    32} x N in {1, 33, 257} x K in {256, 4096, one K not a multiple of 256
 *    where the type allows it, else 2304}, outputs poisoned with NaN first;
 *    plus f16 activations in a permuted view (the strided quantizer and the
 *    f32 conversion). Covers the direct kernels (aligned rows, M <= 4; for
 *    quantized weights with the activations quantized in each block from
 *    contiguous f32 rows, or by the separate quantizer from the permuted f16
 *    view at N = 257; q6_K also with rows only 2-byte aligned in a padded
 *    view, N = 33), the staged ones (M > 4, unaligned rows, K % 256 != 0,
 *    q6_K rows whose 16-byte pieces pass the buffer's end) and the direct
 *    kernels launched ahead of their inputs (weights in a constant buffer).
 * Bounds (relative L2 error; in the sweep the denominator is floored at a
 * quarter of the expected output norm, sqrt(sum_i sum_k (w_ik x_k)^2), so a
 * lone output that happens to be near zero cannot fail on rounding alone):
 *  - float weights, M <= 32: 1e-5 per product (f32 activations and sums);
 *  - quantized weights, M <= 32: the activations are quantized to int8 the
 *    way the CPU backend does (q8_0 for q4_0/q8_0, q8_K for the k-quants), so
 *    against the f32-activation reference the error is the activation
 *    rounding, rms(d/sqrt(12))/rms(x) ~ 4.5e-3 for uniform data: bound 1e-2
 *    (sweep: over all M of one N, K, >= 100 outputs; one product alone is
 *    checked against 3e-2 of its expected norm). Against the CPU backend
 *    the integer sums are identical and only the f32 combination order
 *    differs: 2e-5 per product (1e-3 where the CPU runs its scalar
 *    quantizer, which rounds q8_0 ties and scales differently);
 *  - gemm_q8.cuh: the matrix-vector kernels' int8 activations: 1e-2;
 *  - GEMM in f32 1e-5, in f16 2e-3, in bf16 1e-2; an f16 destination adds
 *    1e-3, a bf16 one 8e-3.
 *  - test_matmul_fused: rb_matmul_fused (norm with and without weight, glu,
 *    accumulate, glu_out alone and after a norm: act(gate rows) * up rows
 *    against the double reference of both products, rope of a product's
 *    first heads at device positions, whole and partial, after a norm, with
 *    the rows past them stored into f16 cache slots) for every weight type
 *    of the direct kernels, M = 1, 3, 4, 5, K = 256 and 4096, against the
 *    double reference (bounds as above; k-quants 2e-2) and the CPU backend
 *    (float 1e-5; quantized 1e-3: the norm's scale is computed in another
 *    order, which can move an int8 activation by one), with the scratch
 *    poisoned: where the direct kernels surely apply (every type at M = 1,
 *    or M <= 4 at K = 256; not q6_K's K = 256 products over the whole
 *    257-row buffer) the add must not go through tmp_out, nor the norm
 *    before quantized weights through tmp_in, so a silent fall back to the
 *    separate ops fails.
 *  - test_matvec_rows: the q4_0/q8_0 direct kernels with several rows a
 *    group (N = 9002; K = 4096 and 2304, the latter ending each row in a
 *    partial span), plain and fused norm + glu_out, M = 1 and 3: against the
 *    CPU backend as above.
 *  - test_matvec_kquant: q4_K, q5_K and q6_K at M = 1-4 at model shapes, K =
 *    2048, 4096 and 11008 with N = 4501 (several rows a group) and 1031,
 *    rows 4 bytes off alignment (K = 2304) and K = 256, in buffers with a
 *    row to spare or ending with the last row (q6_K at K = 11008 then takes
 *    the staged kernel, at the other shapes the direct one from 2-byte
 *    aligned rows; q4_K/q5_K off alignment the staged one): plain (outputs
 *    poisoned), norm + glu_out and accumulate, against the CPU backend with
 *    the bounds of test_matvec_rows.
 *  - test_matvec_rope_split: a 7B-like qkv product (norm, rope of 64 heads of
 *    128 = 8192 rows, the 4096 rows after them one at a time, the k and v
 *    rows stored in a cache), so large that the direct kernel's groups get
 *    a share of pairs and of single rows: outputs and cache rows
 *    bit-identical to the all-pairs walk (the tuning's rope_pairs_only), and within
 *    the fused bound of the CPU backend.
 * Skips without a GPU. */
#include "gpu_pair.h"

#include "backends/gpu/gpu_tuning.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values of the view of side 0 (the CPU copy) as double; for quantized
 * weights, dequantized with the reference decoder. */
static double *values(const gp *x) {
    const rb_tensor *t = &x->c;
    if (!rb_dtype_info((int)t->dtype)->is_quant) return gp_read(x, 0);
    const int64_t n = rb_tensor_nelements(t), K = t->ne[0];
    double *v = malloc(sizeof(double) * (size_t)n);
    float *row = malloc(sizeof(float) * (size_t)K);
    assert_non_null(v);
    assert_non_null(row);
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                TU_OK(rb_dequantize_row(t->dtype, x->orig + t->offs + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3],
                                        row, K));
                for (int64_t i0 = 0; i0 < K; i0++) v[k++] = row[i0];
            }
    free(row);
    return v;
}

/* One product a x b -> d on the GPU against the double reference (bounds
 * in the header comment), and nothing outside d's view written. */
/* The bound of a product of M rows by the path ops_matmul.cu takes on CUDA
 * under tuning t (a HIP backend takes the matrix-vector kernels up to 32
 * rows and its tiled f32 GEMM above: errors within these bounds). */
static double path_bound(rb_dtype wt, int64_t M, const rb_gpu_tuning *t) {
    const bool quant = rb_dtype_info((int)wt)->is_quant;
    const bool q8 = (wt == RB_Q4_0 || wt == RB_Q8_0 || wt == RB_Q4_K || wt == RB_Q5_K || wt == RB_Q6_K) &&
                    !t->no_gemm_q8;
    const int64_t q8_min = t->gemm_q8_min_m > 0 ? t->gemm_q8_min_m : 9;
    const int64_t q8_max = t->gemm_q8_max_m > 0 ? (t->gemm_q8_max_m < 256 ? t->gemm_q8_max_m : 256) : 64;
    int64_t mv = q8 ? q8_min - 1 : !quant && !t->tiled_gemm ? 4 : 32;
    if (t->mv_max_m > 0) mv = t->mv_max_m < 32 ? t->mv_max_m : 32;
    if (M <= mv) return quant ? 1e-2 : 1e-5; /* matrix-vector: int8 activations for quantized weights */
    if (q8 && M <= q8_max) return 1e-2;      /* gemm_q8.cuh: the same int8 activations */
    if (!quant && M <= 32) return wt == RB_BF16 ? 3e-5 : 1e-5; /* the GEMM on hi and lo 16-bit activations */
    const bool f32 = wt == RB_F32 || (t->tiled_gemm && wt == RB_BF16);
    return f32 ? 1e-5 : wt == RB_BF16 ? 1e-2 : 2e-3; /* GEMM on 16-bit operands */
}

static void one_product(rb_backend *c, rb_backend *g, tu_rng *rng, const char *tag, const rb_gpu_tuning *tune, rb_dtype wt,
                        int64_t K, int64_t N, int64_t M, int64_t A2, int64_t B2, rb_dtype bd, gp_layout al,
                        gp_layout bl, rb_dtype dd, gp_layout dl) {
    const bool quant = rb_dtype_info((int)wt)->is_quant;
    const int64_t B3 = 1;
    const int64_t ane[4] = {K, N, A2, 1}, bne[4] = {K, M, B2, B3}, dne[4] = {N, M, B2, B3};
    gp a = gp_make(c, g, rng, wt, ane, al, -1, 1);
    gp b = gp_make(c, g, rng, bd, bne, bl, -1, 1);
    gp d = gp_make(c, g, rng, dd, dne, dl, -9, 9);
    TU_OK(rb_matmul(g, &d.g, &a.g, &b.g));
    double *av = values(&a), *bv = gp_read(&b, 0), *got = gp_read(&d, 1);
    double *ref = malloc(sizeof(double) * (size_t)(N * M * B2 * B3));
    float *gotf = malloc(sizeof(float) * (size_t)(N * M * B2 * B3));
    assert_non_null(ref);
    assert_non_null(gotf);
    for (int64_t i2 = 0; i2 < B2; i2++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                const double *ar = av + ((i2 / (B2 / A2)) * N + n) * K, *br = bv + (i2 * M + m) * K;
                double sum = 0;
                for (int64_t k = 0; k < K; k++) sum += ar[k] * br[k];
                ref[(i2 * M + m) * N + n] = sum;
            }
    const int64_t n_out = N * M * B2 * B3;
    for (int64_t i = 0; i < n_out; i++) gotf[i] = (float)got[i];
    const double err = tu_rel_l2(gotf, ref, (size_t)n_out);
    (void)quant;
    double bound = path_bound(wt, M, tune);
    if (dd == RB_F16) bound += 1e-3;
    if (dd == RB_BF16) bound += 8e-3;
    print_message("%s a=%-5s b=%-4s d=%-4s M=%-3lld N=%-4lld K=%-4lld rel L2 %.2e (bound %.0e)\n", tag,
                  rb_dtype_name(wt), rb_dtype_name(bd), rb_dtype_name(dd), (long long)M, (long long)N, (long long)K,
                  err, bound);
    if (!(err <= bound))
        fail_msg("matmul %s x %s M=%lld N=%lld K=%lld: rel L2 %.3g > %.1g", rb_dtype_name(wt), rb_dtype_name(bd),
                 (long long)M, (long long)N, (long long)K, err, bound);
    /* nothing outside dst written: compare the GPU parent against its original */
    unsigned char *p = malloc(d.size);
    assert_non_null(p);
    TU_OK(rb_buffer_get(d.gb, 0, p, d.size));
    const size_t es = rb_dtype_info((int)dd)->type_size;
    for (int64_t i3 = 0; i3 < B3; i3++)
        for (int64_t i2 = 0; i2 < B2; i2++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    const size_t at = d.g.offs + n * d.g.nb[0] + m * d.g.nb[1] + i2 * d.g.nb[2] + i3 * d.g.nb[3];
                    memcpy(p + at, d.orig + at, es);
                }
    assert_memory_equal(p, d.orig, d.size);
    free(p);
    free(av);
    free(bv);
    free(got);
    free(ref);
    free(gotf);
    gp_free(&a);
    gp_free(&b);
    gp_free(&d);
}

static void run_all(bool tiled) {
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    /* tiled: the own GEMM, and q4_0 / q8_0 weights as before gemm_q8.cuh */
    const rb_gpu_tuning tune = {.tiled_gemm = tiled, .no_gemm_q8 = tiled};
    TU_OK(rb_gpu_backend_tune(g, &tune));
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, tiled ? 501 : 500);
    const rb_dtype ws[] = {RB_F32,  RB_F16,  RB_BF16,   RB_Q4_0,   RB_Q8_0,    RB_Q4_K,
                           RB_Q5_K, RB_Q6_K, RB_IQ4_NL, RB_IQ4_XS, RB_IQ3_XXS, RB_IQ3_S, RB_IQ2_XXS, RB_IQ2_XS,
                           RB_IQ2_S, RB_IQ1_S, RB_IQ1_M};
    const int64_t Ms[] = {1, 3, 8, 19, 70, 130};
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const bool quant = rb_dtype_info((int)ws[wi])->is_quant;
            const int64_t K = quant ? 512 : (mi % 2 ? 333 : 512), N = 37, M = Ms[mi];
            const rb_dtype bd = mi % 3 == 0 ? RB_F32 : mi % 3 == 1 ? RB_F16 : RB_BF16;
            const rb_dtype dd = (wi + mi) % 4 == 3 ? RB_F16 : RB_F32;
            one_product(c, g, &rng, tiled ? "tiled " : "default", &tune, ws[wi], K, N, M, 2, mi >= 4 ? 2 : 4, bd,
                        quant || mi % 2 ? GP_SLICE : GP_CONTIG, mi % 2 ? GP_PERM : GP_SLICE, dd,
                        mi % 2 ? GP_SLICE : GP_CONTIG);
        }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

/* gemm_q8.cuh (quantized weights, 9..64 rows) at larger shapes, every
 * format: N not a multiple of any tile width (M 9 x N 1031, 33 x 1031 and
 * 64 x 97: 64 weight rows a block; 40 x 8449, 64 x 16900: 128; 200 x 4097
 * takes the GEMM path, and gemm_q8.cuh in four activation tiles when the
 * tuning lets it take 256 rows), K with a partial step at the end (q4_0 /
 * q8_0: K % 256 = 32, 32, 0, 96, 192, 0; K-quants 2304 and 1280), rows at
 * 2-byte aligned offsets in a padded buffer (the last shape: contiguous, the
 * last row ending the buffer), f32 contiguous and permuted f16 activations, two
 * batch slices over one weight matrix, f32, f16 and bf16 destinations; the
 * default, K split in 3 (partial sums), the paths before gemm_q8.cuh
 * (no_gemm_q8) and the first kernel (gemm_q8_plain) within their bounds of
 * the same reference. */
static void test_gemm_q8(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 502);
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    const int64_t Ms[] = {9, 33, 64, 40, 200, 64}, Ns[] = {1031, 1031, 97, 8449, 4097, 16900};
    const int64_t Kq[] = {1056, 2080, 1024, 1120, 1216, 512};
    const rb_gpu_tuning tunes[] = {{0}, {.no_gemm_q8 = true}, {.gemm_q8_plain = true}, {.gemm_q8_split = 3},
                                   {.gemm_q8_max_m = 256}};
    const char *tags[] = {"default", "before q8", "first q8", "split 3", "q8 to 256"};
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
        const bool kq = ws[wi] == RB_Q4_K || ws[wi] == RB_Q5_K || ws[wi] == RB_Q6_K;
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int64_t N = Ns[mi], K = kq ? (mi >= 3 ? 1280 : 2304) : Kq[mi];
            const int64_t B2 = mi == 3 ? 2 : 1;
            const rb_dtype bd = mi % 2 ? RB_F16 : RB_F32;
            const rb_dtype dd = mi == 4 ? RB_BF16 : mi == 5 ? RB_F16 : RB_F32;
            for (int v = 0; v < 5; v++) {
                const bool run = v == 0 || (v == 1 && mi == 2) || (v == 2 && mi == 2 && !kq) ||
                                 (v == 3 && (mi == 1 || (mi == 3 && wi == 0))) ||
                                 (v == 4 && mi == 4 && (ws[wi] == RB_Q4_0 || ws[wi] == RB_Q4_K));
                if (!run) continue;
                TU_OK(rb_gpu_backend_tune(g, &tunes[v]));
                one_product(c, g, &rng, tags[v], &tunes[v], ws[wi], K, N, Ms[mi], 1, B2, bd,
                            mi == 5 ? GP_CONTIG : GP_SLICE, mi % 2 ? GP_PERM : GP_CONTIG, dd,
                            mi % 2 ? GP_SLICE : GP_CONTIG);
            }
        }
    }
    TU_OK(rb_gpu_backend_tune(g, &tunes[0]));
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

static void test_matmul_default(void **state) {
    (void)state;
    run_all(false);
}

static void test_matmul_tiled(void **state) {
    (void)state;
    run_all(true);
}

/* squared-error sums of one comparison: ||got - ref||^2, ||ref||^2 and the
 * expected ||ref||^2, sum_i sum_k (w_ik x_k)^2 */
typedef struct err_sums {
    double num, den, var;
} err_sums;

static void err_add(err_sums *e, const double *got, const double *ref, const double *var, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double d = got[i] - ref[i];
        e->num += d * d;
        e->den += ref[i] * ref[i];
        e->var += var[i];
    }
}

/* ||got - ref|| / max(||ref||, sqrt(expected) / 4) */
static double err_rel(const err_sums *e) {
    const double den = e->den > e->var / 16 ? e->den : e->var / 16;
    return den > 0 ? sqrt(e->num / den) : sqrt(e->num);
}

typedef struct sweep_acc {
    err_sums ref;  /* vs the reference, over the M values of one (N, K) */
    double cpu;    /* largest error vs the CPU backend */
    double cpu_bound;
    int failures;  /* reported one by one, the test fails at the end */
} sweep_acc;

/* One product: weights a (values av), activations of dtype bd in layout bl,
 * M rows; compared with the double reference and, for quantized weights,
 * the CPU backend. */
static void sweep_case(rb_backend *c, rb_backend *g, tu_rng *rng, const gp *a, const double *av, int64_t M,
                       rb_dtype bd, gp_layout bl, sweep_acc *acc) {
    const rb_dtype wt = a->c.dtype;
    const bool quant = rb_dtype_info((int)wt)->is_quant;
    const int64_t K = a->c.ne[0], N = a->c.ne[1];
    const int64_t bne[4] = {K, M, 1, 1}, dne[4] = {N, M, 1, 1};
    gp b = gp_make(c, g, rng, bd, bne, bl, -1, 1);
    gp d = gp_make(c, g, rng, RB_F32, dne, GP_CONTIG, 0, 1);
    memset(d.orig, 0xff, d.size); /* NaN: an unwritten output fails */
    TU_OK(rb_buffer_set(d.gb, 0, d.orig, d.size));
    TU_OK(rb_buffer_set(d.cb, 0, d.orig, d.size));
    TU_OK(rb_matmul(g, &d.g, &a->g, &b.g));
    double *bv = gp_read(&b, 0), *got = gp_read(&d, 1);
    const size_t n = (size_t)(N * M);
    double *ref = malloc(sizeof(double) * n), *var = malloc(sizeof(double) * n);
    assert_non_null(ref);
    assert_non_null(var);
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < N; i++) {
            double s = 0, v = 0;
            for (int64_t k = 0; k < K; k++) {
                const double p = av[i * K + k] * bv[m * K + k];
                s += p;
                v += p * p;
            }
            ref[m * N + i] = s;
            var[m * N + i] = v;
        }
    err_sums e = {0, 0, 0};
    err_add(&e, got, ref, var, n);
    err_add(&acc->ref, got, ref, var, n);
    /* per product: floats against their bound; quantized (whose activation
     * rounding over few outputs is a noisy estimate) only against gross
     * errors, ||got - ref|| <= 0.03 sqrt(expected); the 1e-2 bound applies
     * to the sum over all M (test_matvec_sweep) */
    const double e_case = quant ? sqrt(e.num / (e.var > 0 ? e.var : 1)) : err_rel(&e), b_case = quant ? 3e-2 : 1e-5;
    if (!(e_case <= b_case)) {
        print_error("matvec %s N=%lld K=%lld M=%lld b=%s: error vs reference %.3g > %.0e\n", rb_dtype_name(wt),
                    (long long)N, (long long)K, (long long)M, rb_dtype_name(bd), e_case, b_case);
        acc->failures++;
    }
    if (quant) {
        TU_OK(rb_matmul(c, &d.c, &a->c, &b.c));
        double *cpu = gp_read(&d, 0);
        err_sums ec = {0, 0, 0};
        err_add(&ec, got, cpu, var, n);
        const double e_cpu = err_rel(&ec);
        if (!(e_cpu <= acc->cpu_bound)) {
            print_error("matvec %s N=%lld K=%lld M=%lld b=%s: rel L2 vs CPU backend %.3g > %.0e\n", rb_dtype_name(wt),
                        (long long)N, (long long)K, (long long)M, rb_dtype_name(bd), e_cpu, acc->cpu_bound);
            acc->failures++;
        }
        if (e_cpu > acc->cpu) acc->cpu = e_cpu;
        free(cpu);
    }
    free(bv);
    free(got);
    free(ref);
    free(var);
    gp_free(&b);
    gp_free(&d);
}

/* Every weight type x M x N x K of the decode kernels (matvec.cuh). */
static void test_matvec_sweep(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    /* the CPU's SIMD activation quantizers are the ones the GPU mirrors */
    rb_device_info ci;
    TU_OK(rb_backend_device_info(c, &ci));
    const double cpu_bound = strstr(ci.name, "(scalar)") ? 1e-3 : 2e-5;
    const rb_gpu_tuning mv = {.mv_max_m = 32}; /* the matrix-vector kernels at every M of the sweep */
    TU_OK(rb_gpu_backend_tune(g, &mv));
    tu_rng rng;
    tu_rng_seed(&rng, 700);
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q5_K, RB_Q6_K, RB_F32, RB_F16, RB_BF16};
    const int64_t Ms[] = {1, 2, 3, 7, 8, 9, 16, 31, 32}, Ns[] = {1, 33, 257};
    int failures = 0;
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
        const rb_dtype wt = ws[wi];
        const bool quant = rb_dtype_info((int)wt)->is_quant, kq = wt == RB_Q4_K || wt == RB_Q5_K || wt == RB_Q6_K;
        /* odd K: q4_0/q8_0 a multiple of 32, f16/bf16 of 8, f32 of 4 (the
         * staged kernels' granularity); k-quants a multiple of 256 */
        const int64_t Kodd = kq ? 2304 : quant ? 1056 : wt == RB_F32 ? 1036 : 1000;
        const int64_t Ks[] = {256, 4096, Kodd};
        double worst = 0, worst_cpu = 0;
        for (size_t ni = 0; ni < 3; ni++)
            for (size_t ki = 0; ki < 3; ki++) {
                const int64_t K = Ks[ki], N = Ns[ni];
                const int64_t ane[4] = {K, N, 1, 1};
                /* N = 33: quantized rows at 2-byte aligned offsets (the
                 * staged kernels' alignment phase); otherwise aligned rows
                 * (the direct kernels for q4_0/q8_0/float at M <= 4 when K
                 * allows). N = 257: the weights' buffer is constant, so the
                 * direct kernels launch ahead of the activation quantization
                 * (programmatic dependent launch on sm_90) */
                gp a = gp_make(c, g, &rng, wt, ane, quant && N == 33 ? GP_SLICE : GP_CONTIG, -1, 1);
                if (N == 257) TU_OK(rb_buffer_set_constant(a.gb));
                double *av = values(&a);
                sweep_acc acc = {{0, 0, 0}, 0, cpu_bound, 0};
                for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                    sweep_case(c, g, &rng, &a, av, Ms[mi], RB_F32, GP_CONTIG, &acc);
                if (N == 33) /* strided f16 activations */
                    for (int64_t M = 3; M <= 16; M += 13) sweep_case(c, g, &rng, &a, av, M, RB_F16, GP_PERM, &acc);
                if (N == 257) /* the direct kernels with separately quantized activations */
                    sweep_case(c, g, &rng, &a, av, 3, RB_F16, GP_PERM, &acc);
                const double e = err_rel(&acc.ref), bound = quant ? 1e-2 : 1e-5;
                if (!(e <= bound)) {
                    print_error("matvec %s N=%lld K=%lld, all M: rel L2 vs reference %.3g > %.0e\n", rb_dtype_name(wt),
                                (long long)N, (long long)K, e, bound);
                    acc.failures++;
                }
                if (e > worst) worst = e;
                if (acc.cpu > worst_cpu) worst_cpu = acc.cpu;
                failures += acc.failures;
                free(av);
                gp_free(&a);
            }
        print_message("matvec sweep %-5s: max rel L2 vs reference %.2e (bound %.0e)", rb_dtype_name(wt), worst,
                      quant ? 1e-2 : 1e-5);
        if (quant) print_message(", vs CPU backend %.2e (bound %.0e)", worst_cpu, cpu_bound);
        print_message("\n");
    }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("matvec sweep: %d comparisons out of bounds", failures);
}

/* gemm_q8.cuh for every format it takes x M in {1, 2, 5, 8} (the tuning
 * lets it take from one row) and {9, 13, 16, 31, 32, 33, 64, 65, 100, 128,
 * 200, 256} (and up to 256 rows: one to four activation tiles, each of 1..8
 * tiles of 8 rows) x N in {33 (rows at 2-byte aligned offsets), 257} x K in
 * {2304 (a multiple of 256 only), 256 (the K-quants: one step) or 1056
 * (q4_0 / q8_0: a partial last step)}, with the split rule's partial sums
 * (K = 2304: 4 splits, 1056: 2 on a GPU of more than a few multiprocessors)
 * and without (K = 256); outputs poisoned with NaN first; against the
 * double reference (the sweep's bounds) and the CPU backend, whose integer
 * sums are the same (2e-5; 1e-3 where it runs its scalar quantizer; 1e-2
 * above 32 rows where no int8 kernel exists: HIP, CUDA before sm_80). */
static void test_gemm_q8_sweep(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    rb_device_info ci;
    TU_OK(rb_backend_device_info(c, &ci));
    const double cpu_bound = strstr(ci.name, "(scalar)") ? 1e-3 : 2e-5;
    /* without the int8 kernel (HIP, CUDA before sm_80) products of more than 32
     * rows take the GEMM on 16-bit operands: the reference's bound vs the CPU */
    rb_device_info gi;
    int sm = 0;
    const bool int8_here = rb_backend_kind(g) == RB_DEVICE_CUDA && rb_backend_device_info(g, &gi) == RB_OK &&
                           sscanf(gi.features, "sm_%d", &sm) == 1 && sm >= 80;
    const rb_gpu_tuning all = {.gemm_q8_min_m = 1, .gemm_q8_max_m = 256};
    TU_OK(rb_gpu_backend_tune(g, &all));
    tu_rng rng;
    tu_rng_seed(&rng, 720);
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    const int64_t Ms[] = {1, 2, 5, 8, 9, 13, 16, 31, 32, 33, 64, 65, 100, 128, 200, 256}, Ns[] = {33, 257};
    int failures = 0;
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
        const rb_dtype wt = ws[wi];
        const bool kq = wt == RB_Q4_K || wt == RB_Q5_K || wt == RB_Q6_K;
        const int64_t Ks[] = {2304, kq ? 256 : 1056};
        double worst = 0, worst_cpu = 0;
        for (size_t ni = 0; ni < 2; ni++)
            for (size_t ki = 0; ki < 2; ki++) {
                const int64_t K = Ks[ki], N = Ns[ni], ane[4] = {K, N, 1, 1};
                gp a = gp_make(c, g, &rng, wt, ane, N == 33 ? GP_SLICE : GP_CONTIG, -1, 1);
                double *av = values(&a);
                sweep_acc acc = {{0, 0, 0}, 0, cpu_bound, 0};
                for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                    acc.cpu_bound = int8_here || Ms[mi] <= 32 ? cpu_bound : 1e-2;
                    sweep_case(c, g, &rng, &a, av, Ms[mi], RB_F32, GP_CONTIG, &acc);
                }
                acc.cpu_bound = int8_here ? cpu_bound : 1e-2;
                if (N == 33) /* strided f16 activations: the quantizer's general path */
                    sweep_case(c, g, &rng, &a, av, 40, RB_F16, GP_PERM, &acc);
                const double e = err_rel(&acc.ref);
                if (!(e <= 1e-2)) {
                    print_error("gemm_q8 %s N=%lld K=%lld, all M: rel L2 vs reference %.3g > 1e-2\n", rb_dtype_name(wt),
                                (long long)N, (long long)K, e);
                    acc.failures++;
                }
                if (e > worst) worst = e;
                if (acc.cpu > worst_cpu) worst_cpu = acc.cpu;
                failures += acc.failures;
                free(av);
                gp_free(&a);
            }
        print_message("gemm_q8 sweep %-5s: max rel L2 vs reference %.2e (bound 1e-2), vs CPU backend %.2e (bound %.0e)\n",
                      rb_dtype_name(wt), worst, worst_cpu, cpu_bound);
    }
    const rb_gpu_tuning dflt = {0};
    TU_OK(rb_gpu_backend_tune(g, &dflt));
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("gemm_q8 sweep: %d comparisons out of bounds", failures);
}

/* q4_0 / q8_0 through gemm_q8.cuh with K in one part: bit-identical to the
 * first kernel (gemm_q8_plain.cuh), whose sums it adds in the same order,
 * at M = 9, 33, 64, N = 1031, K = 1056 (a partial step; rows at 2-byte
 * aligned offsets) and 4096 (contiguous). */
static void test_gemm_q8_exact(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 730);
    const rb_gpu_tuning one = {.gemm_q8_split = 1}, first = {.gemm_q8_plain = true}, dflt = {0};
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0};
    const int64_t Ms[] = {9, 33, 64}, Ks[] = {1056, 4096}, N = 1031;
    int failures = 0;
    for (size_t wi = 0; wi < 2; wi++)
        for (size_t ki = 0; ki < 2; ki++) {
            const int64_t K = Ks[ki], ane[4] = {K, N, 1, 1};
            gp a = gp_make(c, g, &rng, ws[wi], ane, ki == 0 ? GP_SLICE : GP_CONTIG, -1, 1);
            for (size_t mi = 0; mi < 3; mi++) {
                const int64_t M = Ms[mi], bne[4] = {K, M, 1, 1}, dne[4] = {N, M, 1, 1};
                gp b = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, -1, 1);
                gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, 0, 1);
                double *got[2];
                for (int v = 0; v < 2; v++) {
                    TU_OK(rb_gpu_backend_tune(g, v ? &first : &one));
                    TU_OK(rb_matmul(g, &d.g, &a.g, &b.g));
                    got[v] = gp_read(&d, 1);
                }
                int64_t diff = 0;
                for (int64_t i = 0; i < N * M; i++) diff += got[0][i] != got[1][i];
                if (diff) {
                    print_error("gemm_q8 %s K=%lld M=%lld: %lld of %lld outputs differ from the first kernel's\n",
                                rb_dtype_name(ws[wi]), (long long)K, (long long)M, (long long)diff, (long long)(N * M));
                    failures++;
                }
                free(got[0]);
                free(got[1]);
                gp_free(&b);
                gp_free(&d);
            }
            gp_free(&a);
        }
    TU_OK(rb_gpu_backend_tune(g, &dflt));
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("gemm_q8: %d products not bit-identical to the first kernel", failures);
}

/* gate (first = 0) or up (first = K) half of a [2K, M] pair */
static void half(const gp *p, int64_t first, int64_t K, rb_tensor *c, rb_tensor *g) {
    *c = p->c;
    *g = p->g;
    c->ne[0] = g->ne[0] = K;
    c->offs += (size_t)first * 4;
    g->offs += (size_t)first * 4;
}

static double ref_act(rb_unary_op act, double x) {
    if (act == RB_UNARY_SILU) return x / (1.0 + exp(-x));
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); /* gelu_tanh */
}

static void test_matmul_fused(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    const rb_gpu_tuning mv = {.mv_max_m = 32}; /* M = 5 falls back to the separate ops: their matrix-vector form */
    TU_OK(rb_gpu_backend_tune(g, &mv));
    tu_rng rng;
    tu_rng_seed(&rng, 710);
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0, RB_F32, RB_F16, RB_BF16, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    const int64_t Ks[] = {256, 4096}, Ms[] = {1, 3, 4, 5}, N = 257, NG = 256; /* NG: glu_out's gate | up rows */
    int failures = 0, fused = 0;
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
        for (size_t ki = 0; ki < 2; ki++) {
            const rb_dtype wt = ws[wi];
            const bool quant = rb_dtype_info((int)wt)->is_quant;
            const int64_t K = Ks[ki], ane[4] = {K, N, 1, 1}, wne[4] = {K, 1, 1, 1};
            gp a = gp_make(c, g, &rng, wt, ane, GP_CONTIG, -1, 1);
            if (ki == 1) TU_OK(rb_buffer_set_constant(a.gb)); /* launched ahead of its inputs (pdl) */
            gp w = gp_make(c, g, &rng, RB_F32, wne, GP_CONTIG, 0.5f, 1.5f);
            double *av = values(&a), *wv = gp_read(&w, 0);
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (int mode = 0; mode < 9; mode++) {
                    /* 0 norm+w, 1 norm+acc (no w), 2 glu silu+acc, 3 glu gelu_tanh, 4 acc,
                     * 5 norm+w then glu_out silu, 6 glu_out gelu_tanh (over a's first 256 rows),
                     * 7 rope (3 heads of 64 of a's first 256 rows), 8 norm+w then rope of 32 dims
                     * with freq_scale and attn_factor */
                    const bool gluo = mode == 5 || mode == 6, rope = mode >= 7;
                    const int64_t NO = gluo ? NG / 2 : rope ? NG : N; /* output rows */
                    const int64_t M = Ms[mi], bne[4] = {K, M, 1, 1}, pne[4] = {2 * K, M, 1, 1}, dne[4] = {NO, M, 1, 1},
                                  one[4] = {gluo ? NG : N, M, 1, 1};
                    const bool norm = mode <= 1 || mode == 5 || mode == 8, glu = mode == 2 || mode == 3,
                               acc = mode == 1 || mode == 2 || mode == 4;
                    const rb_unary_op act = mode == 3 || mode == 6 ? RB_UNARY_GELU_TANH : RB_UNARY_SILU;
                    gp p = gp_make(c, g, &rng, RB_F32, glu ? pne : bne, GP_CONTIG, -2, 2);
                    gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, -1, 1);
                    gp ti = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, 0, 1);
                    gp to = gp_make(c, g, &rng, RB_F32, one, GP_CONTIG, 0, 1);
                    rb_tensor wa_c = a.c, wa_g = a.g; /* the weights, or their first NG rows */
                    if (gluo || rope) wa_c.ne[1] = wa_g.ne[1] = NG;
                    int32_t posv[5];
                    for (int64_t m = 0; m < M; m++) posv[m] = (int32_t)((m * 1777 + 7 * (int64_t)mode) % 4096);
                    gp rpos = gp_ids(c, g, posv, M, 1);
                    const rb_rope_params rp = {.n_rot = mode == 8 ? 32 : 64, .mode = RB_ROPE_NORMAL, .freq_base = 10000.0f,
                                               .freq_scale = mode == 8 ? 0.25f : 1.0f,
                                               .attn_factor = mode == 8 ? 0.8f : 1.0f};
                    memset(ti.orig, 0xff, ti.size); /* NaN */
                    memset(to.orig, 0xff, to.size);
                    TU_OK(rb_buffer_set(ti.gb, 0, ti.orig, ti.size));
                    TU_OK(rb_buffer_set(to.gb, 0, to.orig, to.size));
                    rb_tensor bc = p.c, bg = p.g, uc = p.c, ug = p.g;
                    if (glu) {
                        half(&p, 0, K, &bc, &bg);
                        half(&p, K, K, &uc, &ug);
                    }
                    const bool nw = mode == 0 || mode == 5 || mode == 8;
                    /* rope modes also store rows 128.. (k and v) into slots of a f16 cache [128, 64] */
                    const int64_t cne[4] = {NG - 128, 64, 1, 1};
                    gp cache = gp_make(c, g, &rng, RB_F16, cne, GP_CONTIG, -1, 1);
                    int32_t slotv[5];
                    for (int64_t m = 0; m < M; m++) slotv[m] = (int32_t)((m * 13 + 5 + mode) % 64);
                    gp slots = gp_ids(c, g, slotv, M, 1);
                    rb_matmul_fusion fc = {.norm = norm, .norm_w = nw ? &w.c : NULL, .eps = 1e-5f, .glu = glu, .up = &uc,
                                           .act = act, .accumulate = acc, .glu_out = gluo, .rope = rope ? &rp : NULL,
                                           .rope_pos = &rpos.c, .rope_head_dim = 64, .rope_heads = 3,
                                           .store_dst = rope ? &cache.c : NULL, .store_ids = &slots.c,
                                           .store_row0 = 128, .tmp_in = &ti.c, .tmp_out = &to.c};
                    rb_matmul_fusion fg = fc;
                    fg.norm_w = nw ? &w.g : NULL;
                    fg.rope_pos = &rpos.g;
                    fg.store_dst = rope ? &cache.g : NULL;
                    fg.store_ids = &slots.g;
                    fg.up = &ug;
                    fg.tmp_in = &ti.g;
                    fg.tmp_out = &to.g;
                    double *pv = gp_read(&p, 0), *d0 = gp_read(&d, 0);
                    TU_OK(rb_matmul_fused(g, &d.g, &wa_g, &bg, &fg));
                    TU_OK(rb_matmul_fused(c, &d.c, &wa_c, &bc, &fc));
                    double *got = gp_read(&d, 1), *cpu = gp_read(&d, 0);
                    /* the direct kernels apply (quantized weights hold M
                     * rows of activations in shared memory: one row always
                     * fits, more at K = 256; on HIP the budget is 48 KiB);
                     * there the add never goes through tmp_out, and the norm
                     * before quantized weights never through tmp_in. q6_K
                     * rows of K = 256 (210 bytes) end the 257-row buffer off
                     * 16-byte alignment, so the products over all of it
                     * take the staged kernel and the separate ops; the
                     * first 256 rows (glu_out, rope) stay direct */
                    const bool rows_ok = wt != RB_Q6_K || K % 2048 == 0 || gluo || rope;
                    const bool direct = rows_ok && (M == 1 || (M <= 4 && K == 256));
                    const bool in_kept = direct && (mode == 4 || mode == 6 || mode == 7 || (norm && quant));
                    if ((in_kept && !gp_gpu_unchanged(&ti)) || (direct && !gp_gpu_unchanged(&to))) {
                        print_error("fused %s K=%lld M=%lld mode %d: the separate ops ran (scratch written)\n",
                                    rb_dtype_name(wt), (long long)K, (long long)M, mode);
                        failures++;
                    }
                    if (in_kept) fused++;
                    /* double reference */
                    const int64_t W = glu ? 2 * K : K;
                    double *in = malloc(sizeof(double) * (size_t)(K * M)), *ref = malloc(sizeof(double) * (size_t)(NO * M)),
                           *var = malloc(sizeof(double) * (size_t)(NO * M));
                    assert_non_null(in);
                    assert_non_null(ref);
                    assert_non_null(var);
                    for (int64_t m = 0; m < M; m++) {
                        const double *x = pv + m * W;
                        double ss = 0;
                        for (int64_t k = 0; k < K; k++) ss += x[k] * x[k];
                        const double r = 1.0 / sqrt(ss / (double)K + 1e-5);
                        for (int64_t k = 0; k < K; k++)
                            in[m * K + k] = norm ? x[k] * r * (nw ? wv[k] : 1.0)
                                            : glu ? ref_act(act, x[k]) * x[K + k] : x[k];
                        for (int64_t n = 0; n < NO; n++) {
                            double s = 0, v = 0, su = 0, vu = 0;
                            for (int64_t k = 0; k < K; k++) {
                                const double t = av[n * K + k] * in[m * K + k];
                                s += t;
                                v += t * t;
                                if (gluo) {
                                    const double tu = av[(NO + n) * K + k] * in[m * K + k];
                                    su += tu;
                                    vu += tu * tu;
                                }
                            }
                            if (gluo) { /* act(gate) * up; its spread to first order */
                                const double ga = ref_act(act, s);
                                ref[m * NO + n] = ga * su;
                                var[m * NO + n] = ga * ga * vu + 1.44 * su * su * v;
                                continue;
                            }
                            ref[m * NO + n] = s + (acc ? d0[m * NO + n] : 0.0);
                            var[m * NO + n] = v;
                        }
                        if (rope) /* rotate the pairs of the 3 heads' first n_rot dims (normal mode) */
                            for (int64_t n = 0; n < 3 * 64; n += 2) {
                                const int64_t dd = n % 64;
                                if (dd >= rp.n_rot) continue;
                                const double th = posv[m] * rp.freq_scale * pow(10000.0, -(double)dd / rp.n_rot);
                                const double cs = cos(th) * rp.attn_factor, sn = sin(th) * rp.attn_factor;
                                const double x0 = ref[m * NO + n], x1 = ref[m * NO + n + 1];
                                ref[m * NO + n] = x0 * cs - x1 * sn;
                                ref[m * NO + n + 1] = x0 * sn + x1 * cs;
                                const double v0 = var[m * NO + n], v1 = var[m * NO + n + 1];
                                var[m * NO + n] = var[m * NO + n + 1] = v0 + v1;
                            }
                    }
                    if (rope) { /* the cache against the CPU's, as the product (rel L2; f16 rounding) */
                        double *cg = gp_read(&cache, 1), *cc = gp_read(&cache, 0), num = 0.0, den = 0.0;
                        for (int64_t i = 0; i < (NG - 128) * 64; i++) {
                            num += (cg[i] - cc[i]) * (cg[i] - cc[i]);
                            den += cc[i] * cc[i];
                        }
                        const double ecache = sqrt(num / den), bcache = quant ? 1e-3 : 5e-4;
                        if (!(ecache <= bcache)) {
                            print_error("fused %s K=%lld M=%lld mode %d: cache rel L2 vs CPU %.3g (bound %.0e)\n",
                                        rb_dtype_name(wt), (long long)K, (long long)M, mode, ecache, bcache);
                            failures++;
                        }
                        for (int64_t m = 0; m < M; m++) /* and it holds this product's rows */
                            if (fabs(cg[slotv[m] * (NG - 128) + 5] - got[m * NO + 128 + 5]) >
                                2e-3 * fabs(got[m * NO + 128 + 5]) + 1e-4) {
                                print_error("fused %s mode %d: cache slot %d is not row %lld's\n", rb_dtype_name(wt),
                                            mode, slotv[m], (long long)m);
                                failures++;
                            }
                        free(cg);
                        free(cc);
                    }
                    /* errors of the product (the accumulated base is exact f32 addition) */
                    err_sums er = {0, 0, 0}, ec = {0, 0, 0};
                    err_add(&er, got, ref, var, (size_t)(NO * M));
                    err_add(&ec, got, cpu, var, (size_t)(NO * M));
                    const double e_ref = err_rel(&er), e_cpu = err_rel(&ec);
                    /* k-quants quantize the activations to q8_K, one scale per 256 (q8_0:
                     * per 32): a gated input's outliers coarsen the rest of its block,
                     * 1.03e-2 measured at K = 256 with q4_K (the CPU agrees to 1e-7, the
                     * tight check here) */
                    const bool kq = wt == RB_Q4_K || wt == RB_Q5_K || wt == RB_Q6_K;
                    const double b_ref = kq ? 2e-2 : quant ? 1e-2 : 1e-5, b_cpu = quant ? 1e-3 : 1e-5;
                    if (!(e_ref <= b_ref) || !(e_cpu <= b_cpu)) {
                        print_error("fused %s K=%lld M=%lld mode %d: rel L2 vs reference %.3g (bound %.0e), "
                                    "vs CPU %.3g (bound %.0e)\n",
                                    rb_dtype_name(wt), (long long)K, (long long)M, mode, e_ref, b_ref, e_cpu, b_cpu);
                        failures++;
                    }
                    free(in);
                    free(ref);
                    free(var);
                    free(pv);
                    free(d0);
                    free(got);
                    free(cpu);
                    gp_free(&p);
                    gp_free(&d);
                    gp_free(&ti);
                    gp_free(&to);
                    gp_free(&rpos);
                    gp_free(&cache);
                    gp_free(&slots);
                }
            free(av);
            free(wv);
            gp_free(&a);
            gp_free(&w);
        }
    print_message("matmul_fused: %d products wholly in one kernel\n", fused);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("matmul_fused: %d products out of bounds", failures);
}

/* The direct kernels' walk over several rows a group: the sweep's N <= 257
 * gives every group one row at most, so here N = 9002 rows (q4_0 and q8_0:
 * more rows than the device's groups; K = 4096: two whole spans a row, K =
 * 2304: a whole and a partial one, so the next row's first span is loaded
 * while the last of this row is used), M = 1 and 3, plain and as the fused
 * norm (a constant weight, staged in shared memory) + glu_out, outputs
 * poisoned first; against the CPU backend with test_matmul_fused's bounds. */
static void test_matvec_rows(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 720);
    rb_device_info ci;
    TU_OK(rb_backend_device_info(c, &ci));
    const double plain_bound = strstr(ci.name, "(scalar)") ? 1e-3 : 2e-5; /* as test_matvec_sweep */
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0};
    const int64_t Ks[] = {4096, 2304}, Ms[] = {1, 3}, N = 9002;
    int failures = 0;
    for (size_t wi = 0; wi < 2; wi++)
        for (size_t ki = 0; ki < 2; ki++) {
            const rb_dtype wt = ws[wi];
            const int64_t K = Ks[ki], ane[4] = {K, N, 1, 1}, wne[4] = {K, 1, 1, 1};
            gp a = gp_make(c, g, &rng, wt, ane, GP_CONTIG, -1, 1);
            TU_OK(rb_buffer_set_constant(a.gb)); /* launched ahead of its inputs (pdl) */
            gp w = gp_make(c, g, &rng, RB_F32, wne, GP_CONTIG, 0.5f, 1.5f);
            TU_OK(rb_buffer_set_constant(w.gb));
            for (size_t mi = 0; mi < 2; mi++)
                for (int fused = 0; fused < 2; fused++) {
                    const int64_t M = Ms[mi], NO = fused ? N / 2 : N, bne[4] = {K, M, 1, 1}, dne[4] = {NO, M, 1, 1},
                                  tne[4] = {N, M, 1, 1};
                    gp b = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, -2, 2);
                    gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, 0, 1);
                    gp ti = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, 0, 1);
                    gp to = gp_make(c, g, &rng, RB_F32, tne, GP_CONTIG, 0, 1);
                    rb_matmul_fusion fc = {.norm = true, .norm_w = &w.c, .eps = 1e-5f, .act = RB_UNARY_SILU,
                                           .glu_out = true, .tmp_in = &ti.c, .tmp_out = &to.c};
                    rb_matmul_fusion fg = fc;
                    fg.norm_w = &w.g;
                    fg.tmp_in = &ti.g;
                    fg.tmp_out = &to.g;
                    memset(d.orig, 0xff, d.size); /* NaN: an unwritten output fails */
                    TU_OK(rb_buffer_set(d.gb, 0, d.orig, d.size));
                    if (fused) {
                        TU_OK(rb_matmul_fused(g, &d.g, &a.g, &b.g, &fg));
                        TU_OK(rb_matmul_fused(c, &d.c, &a.c, &b.c, &fc));
                    } else {
                        TU_OK(rb_matmul(g, &d.g, &a.g, &b.g));
                        TU_OK(rb_matmul(c, &d.c, &a.c, &b.c));
                    }
                    double *got = gp_read(&d, 1), *cpu = gp_read(&d, 0), num = 0, den = 0;
                    for (int64_t i = 0; i < NO * M; i++) {
                        num += (got[i] - cpu[i]) * (got[i] - cpu[i]);
                        den += cpu[i] * cpu[i];
                    }
                    const double e = sqrt(num / (den > 0 ? den : 1)), bound = fused ? 1e-3 : plain_bound;
                    if (!(e <= bound)) {
                        print_error("rows %s N=%lld K=%lld M=%lld %s: rel L2 vs CPU backend %.3g > %.0e\n",
                                    rb_dtype_name(wt), (long long)N, (long long)K, (long long)M,
                                    fused ? "fused" : "plain", e, bound);
                        failures++;
                    }
                    free(got);
                    free(cpu);
                    gp_free(&b);
                    gp_free(&d);
                    gp_free(&ti);
                    gp_free(&to);
                }
            gp_free(&a);
            gp_free(&w);
        }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("matvec rows: %d comparisons failed", failures);
}

/* Quantized weights [K, N] at byte offset offs of a buffer that holds slack
 * more rows after them; the rows repeat a pool of 256 quantized random rows
 * in a scrambled order (k-quant encoding of whole 7B-sized matrices is
 * slow), the offs bytes before them are random. */
static gp pool_weights(rb_backend *c, rb_backend *g, tu_rng *rng, rb_dtype dt, int64_t K, int64_t N, size_t offs,
                       int64_t slack) {
    const int64_t P = 256;
    const size_t rs = rb_dtype_row_size(dt, K);
    float *f = malloc(sizeof(float) * (size_t)(K * P));
    unsigned char *pool = malloc(rs * (size_t)P);
    assert_non_null(f);
    assert_non_null(pool);
    tu_fill_uniform(rng, f, (size_t)(K * P), -1.0f, 1.0f);
    TU_OK(rb_quantize_rows(dt, f, pool, P, K));
    gp x;
    memset(&x, 0, sizeof x);
    x.size = offs + rs * (size_t)(N + slack);
    x.orig = malloc(x.size);
    assert_non_null(x.orig);
    for (size_t i = 0; i < offs; i++) x.orig[i] = (unsigned char)tu_rng_range(rng, 0.0f, 256.0f);
    for (int64_t r = 0; r < N + slack; r++)
        memcpy(x.orig + offs + (size_t)r * rs, pool + (size_t)((r * 37 + r / P) % P) * rs, rs);
    const int64_t ne[2] = {K, N};
    rb_tensor t;
    TU_OK(rb_tensor_init(&t, dt, 2, ne, NULL, offs));
    TU_OK(rb_buffer_alloc(c, x.size, &x.cb));
    TU_OK(rb_buffer_set(x.cb, 0, x.orig, x.size));
    TU_OK(rb_buffer_alloc(g, x.size, &x.gb));
    TU_OK(rb_buffer_set(x.gb, 0, x.orig, x.size));
    x.c = t;
    x.c.buf = x.cb;
    x.g = t;
    x.g.buf = x.gb;
    free(f);
    free(pool);
    return x;
}

/* rel L2 of the GPU's [n] outputs against the CPU's */
static double rel_cpu(const gp *d) {
    double *got = gp_read(d, 1), *cpu = gp_read(d, 0), num = 0, den = 0;
    const int64_t n = rb_tensor_nelements(&d->c);
    for (int64_t i = 0; i < n; i++) {
        num += (got[i] - cpu[i]) * (got[i] - cpu[i]);
        den += cpu[i] * cpu[i];
    }
    free(got);
    free(cpu);
    return sqrt(num / (den > 0 ? den : 1));
}

/* The k-quant decode products (q4_K, q5_K, q6_K; the file comment has the
 * shapes) at M = 1-4 against the CPU backend, plain and fused. */
static void test_matvec_kquant(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 740);
    rb_device_info ci;
    TU_OK(rb_backend_device_info(c, &ci));
    const double plain_bound = strstr(ci.name, "(scalar)") ? 1e-3 : 2e-5; /* as test_matvec_sweep */
    const rb_dtype ws[] = {RB_Q4_K, RB_Q5_K, RB_Q6_K};
    const struct {
        int64_t K, N;
        size_t offs;
        int64_t slack;
    } cs[] = {
        {2048, 4501, 0, 1},  /* more rows than the device's groups: several rows a group */
        {4096, 1031, 0, 0},  /* the buffer ends with the last row */
        {11008, 4501, 0, 1}, /* q6_K rows of 9030 bytes, every 2-byte phase */
        {11008, 1031, 0, 0}, /* q6_K: the last row's last 16-byte piece would pass the buffer's end */
        {2304, 257, 4, 1},   /* rows 4 bytes off 16-byte alignment (q6_K: direct, the others staged) */
        {256, 257, 4, 0},    /* one super-block a row, at the buffer's end */
    };
    int failures = 0;
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
        for (size_t ci2 = 0; ci2 < sizeof cs / sizeof cs[0]; ci2++) {
            const rb_dtype wt = ws[wi];
            const int64_t K = cs[ci2].K, N = cs[ci2].N, wne[4] = {K, 1, 1, 1};
            gp a = pool_weights(c, g, &rng, wt, K, N, cs[ci2].offs, cs[ci2].slack);
            if (ci2 % 2 == 0) TU_OK(rb_buffer_set_constant(a.gb)); /* launched ahead of its inputs (pdl) */
            gp w = gp_make(c, g, &rng, RB_F32, wne, GP_CONTIG, 0.5f, 1.5f);
            TU_OK(rb_buffer_set_constant(w.gb));
            for (int64_t M = 1; M <= 4; M++)
                for (int mode = 0; mode < 3; mode++) { /* plain, norm + glu_out, accumulate */
                    if (mode > 0 && M == 2) continue;
                    /* glu_out over the first N - 1 rows (gate | up) */
                    const int64_t NA = mode == 1 ? N - 1 : N, NO = mode == 1 ? NA / 2 : NA;
                    const int64_t bne[4] = {K, M, 1, 1}, dne[4] = {NO, M, 1, 1}, tne[4] = {NA, M, 1, 1};
                    gp b = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, -2, 2);
                    gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, -1, 1);
                    gp ti = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, 0, 1);
                    gp to = gp_make(c, g, &rng, RB_F32, tne, GP_CONTIG, 0, 1);
                    rb_tensor ac = a.c, ag = a.g;
                    ac.ne[1] = ag.ne[1] = NA;
                    rb_matmul_fusion fc = {.tmp_in = &ti.c, .tmp_out = &to.c};
                    if (mode == 1) {
                        fc.norm = true;
                        fc.norm_w = &w.c;
                        fc.eps = 1e-5f;
                        fc.glu_out = true;
                        fc.act = RB_UNARY_SILU;
                    } else {
                        fc.accumulate = true;
                    }
                    rb_matmul_fusion fg = fc;
                    fg.norm_w = &w.g;
                    fg.tmp_in = &ti.g;
                    fg.tmp_out = &to.g;
                    if (mode == 0) { /* NaN: an unwritten output fails */
                        memset(d.orig, 0xff, d.size);
                        TU_OK(rb_buffer_set(d.gb, 0, d.orig, d.size));
                        TU_OK(rb_matmul(g, &d.g, &ag, &b.g));
                        TU_OK(rb_matmul(c, &d.c, &ac, &b.c));
                    } else {
                        TU_OK(rb_matmul_fused(g, &d.g, &ag, &b.g, &fg));
                        TU_OK(rb_matmul_fused(c, &d.c, &ac, &b.c, &fc));
                    }
                    const double e = rel_cpu(&d), bound = mode == 1 ? 1e-3 : plain_bound;
                    if (!(e <= bound)) {
                        print_error("kquant %s K=%lld N=%lld offs %zu M=%lld mode %d: rel L2 vs CPU %.3g > %.0e\n",
                                    rb_dtype_name(wt), (long long)K, (long long)NA, cs[ci2].offs, (long long)M, mode,
                                    e, bound);
                        failures++;
                    }
                    gp_free(&b);
                    gp_free(&d);
                    gp_free(&ti);
                    gp_free(&to);
                }
            gp_free(&a);
            gp_free(&w);
        }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("matvec kquant: %d comparisons failed", failures);
}

/* The direct kernel's walk of a qkv product with more rope pairs than the
 * device has groups (see the file comment). */
static void test_matvec_rope_split(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 730);
    const rb_dtype ws[] = {RB_Q4_0, RB_Q8_0};
    const int64_t K = 256, N = 12288, HD = 128, HR = 64, R0 = 4096, M = 1; /* q 4096 | k 4096 | v 4096 rows */
    int failures = 0;
    for (size_t wi = 0; wi < 2; wi++) {
        const int64_t ane[4] = {K, N, 1, 1}, wne[4] = {K, 1, 1, 1}, bne[4] = {K, M, 1, 1}, dne[4] = {N, M, 1, 1},
                      cne[4] = {N - R0, 40, 1, 1};
        gp a = gp_make(c, g, &rng, ws[wi], ane, GP_CONTIG, -1, 1);
        TU_OK(rb_buffer_set_constant(a.gb));
        gp w = gp_make(c, g, &rng, RB_F32, wne, GP_CONTIG, 0.5f, 1.5f);
        TU_OK(rb_buffer_set_constant(w.gb));
        gp b = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, -2, 2);
        gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, 0, 1);
        gp cache = gp_make(c, g, &rng, RB_F16, cne, GP_CONTIG, -1, 1);
        gp ti = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, 0, 1);
        gp to = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, 0, 1);
        const int32_t posv = 1234, slotv = 17;
        gp rpos = gp_ids(c, g, &posv, 1, 1), slots = gp_ids(c, g, &slotv, 1, 1);
        const rb_rope_params rp = {.n_rot = (int)HD, .mode = RB_ROPE_NORMAL, .freq_base = 10000.0f,
                                   .freq_scale = 1.0f, .attn_factor = 1.0f};
        rb_matmul_fusion fc = {.norm = true, .norm_w = &w.c, .eps = 1e-5f, .rope = &rp, .rope_pos = &rpos.c,
                               .rope_head_dim = HD, .rope_heads = HR, .store_dst = &cache.c, .store_ids = &slots.c,
                               .store_row0 = R0, .tmp_in = &ti.c, .tmp_out = &to.c};
        rb_matmul_fusion fg = fc;
        fg.norm_w = &w.g;
        fg.rope_pos = &rpos.g;
        fg.store_dst = &cache.g;
        fg.store_ids = &slots.g;
        fg.tmp_in = &ti.g;
        fg.tmp_out = &to.g;
        double *out[2], *kv[2];
        for (int split = 1; split >= 0; split--) {
            const rb_gpu_tuning tune = {.rope_pairs_only = !split};
            TU_OK(rb_gpu_backend_tune(g, &tune));
            memset(d.orig, 0xff, d.size); /* NaN: an unwritten output fails */
            TU_OK(rb_buffer_set(d.gb, 0, d.orig, d.size));
            TU_OK(rb_buffer_set(cache.gb, 0, cache.orig, cache.size));
            TU_OK(rb_matmul_fused(g, &d.g, &a.g, &b.g, &fg));
            out[split] = gp_read(&d, 1);
            kv[split] = gp_read(&cache, 1);
        }
        const rb_gpu_tuning dflt = {0};
        TU_OK(rb_gpu_backend_tune(g, &dflt));
        for (int64_t i = 0; i < N; i++)
            if (!(out[1][i] == out[0][i])) {
                print_error("rope split %s: row %lld = %.9g, %.9g in pairs\n", rb_dtype_name(ws[wi]), (long long)i,
                            out[1][i], out[0][i]);
                failures++;
                break;
            }
        for (int64_t i = 0; i < (N - R0) * 40; i++)
            if (!(kv[1][i] == kv[0][i])) {
                print_error("rope split %s: cache element %lld = %.9g, %.9g in pairs\n", rb_dtype_name(ws[wi]),
                            (long long)i, kv[1][i], kv[0][i]);
                failures++;
                break;
            }
        /* the stored slot holds the k and v rows of the output */
        for (int64_t r = R0; r < N; r++) {
            const double want = (double)(float)out[1][r], got = kv[1][slotv * (N - R0) + (r - R0)];
            if (!(fabs(got - want) <= 1e-3 * fabs(want) + 1e-3)) {
                print_error("rope split %s: cache row %lld = %.6g, output %.6g\n", rb_dtype_name(ws[wi]), (long long)r,
                            got, want);
                failures++;
                break;
            }
        }
        TU_OK(rb_matmul_fused(c, &d.c, &a.c, &b.c, &fc));
        double *cpu = gp_read(&d, 0), num = 0, den = 0;
        for (int64_t i = 0; i < N; i++) {
            num += (out[1][i] - cpu[i]) * (out[1][i] - cpu[i]);
            den += cpu[i] * cpu[i];
        }
        const double e = sqrt(num / (den > 0 ? den : 1));
        if (!(e <= 1e-3)) {
            print_error("rope split %s: rel L2 vs CPU backend %.3g > 1e-3\n", rb_dtype_name(ws[wi]), e);
            failures++;
        }
        free(cpu);
        for (int i = 0; i < 2; i++) {
            free(out[i]);
            free(kv[i]);
        }
        gp_free(&a);
        gp_free(&w);
        gp_free(&b);
        gp_free(&d);
        gp_free(&cache);
        gp_free(&ti);
        gp_free(&to);
        gp_free(&rpos);
        gp_free(&slots);
    }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
    if (failures) fail_msg("matvec rope split: %d comparisons failed", failures);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. test_matvec_sweep under compute-sanitizer */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_default),
        cmocka_unit_test(test_matmul_tiled),
        cmocka_unit_test(test_gemm_q8),
        cmocka_unit_test(test_gemm_q8_sweep),
        cmocka_unit_test(test_gemm_q8_exact),
        cmocka_unit_test(test_matvec_sweep),
        cmocka_unit_test(test_matmul_fused),
        cmocka_unit_test(test_matvec_rows),
        cmocka_unit_test(test_matvec_kquant),
        cmocka_unit_test(test_matvec_rope_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
