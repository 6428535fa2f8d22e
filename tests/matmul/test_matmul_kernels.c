/* Per-ISA CPU kernels against independent references: activation quantizers
 * byte-identical to rb_quantize_row (q8_K) or to ggml's x86 activation rule
 * written out below (q8_0, q8_1); every weight dtype's dot product against
 * a double-precision dot of the decoded weights and decoded activations (the
 * integer kernels must agree to float rounding); each SIMD table against the
 * scalar table; the blocked gemm tiles against the same ISA's dot product;
 * the matvec runs and packed prefill kernels (legacy and k-quant formats)
 * against double references; the float weights' matrix-vector runs against
 * their one-row kernel and their prefill kernel against an fmaf chain. */
#include "mm_testlib.h"

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/pack_pull.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bound on |kernel - reference| relative to sum |x_i y_i| when both operands
 * are the exact decoded values: float rounding of block scales and partial
 * sums (~1e-6). q4_1/q5_1 use q8_1's stored s = f16(d * sum(q)) for the min
 * term, which adds the f16 rounding of s (2^-11 relative) of that term. */
static double dot_tol(rb_dtype w) { return (w == RB_Q4_1 || w == RB_Q5_1) ? 1e-3 : 2e-6; }

static void test_isa_detect(void **state) {
    (void)state;
    rb_cpu_isa best = rb_cpu_isa_detect(), isa;
    assert_true(rb_cpu_isa_parse("scalar", &isa));
    assert_int_equal(isa, RB_CPU_ISA_SCALAR);
    assert_true(rb_cpu_isa_parse("auto", &isa));
    assert_int_equal(isa, best);
    assert_true(rb_cpu_isa_parse(NULL, &isa));
    assert_int_equal(isa, best);
    assert_false(rb_cpu_isa_parse("sse9", &isa));
    assert_true(rb_cpu_isa_parse("SCALAR", &isa));
    assert_int_equal(isa, RB_CPU_ISA_SCALAR);
    assert_string_equal(rb_cpu_isa_name(RB_CPU_ISA_AVX2), "avx2");
    assert_string_equal(rb_cpu_isa_name(RB_CPU_ISA_AVX512), "avx512");
    /* an ISA above the detected one is refused */
    if (best < RB_CPU_ISA_AVX512) assert_false(rb_cpu_isa_parse("avx512", &isa));
    if (best < RB_CPU_ISA_AVX2) assert_false(rb_cpu_isa_parse("avx2", &isa));
    for (int i = 0; i <= (int)best; i++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)i);
        assert_non_null(k);
        assert_int_equal(k->isa, i);
        assert_true(rb_cpu_isa_parse(rb_cpu_isa_name((rb_cpu_isa)i), &isa));
        assert_int_equal(isa, i);
    }
}

/* f32 rows with edge cases: exact .5 ties after scaling, a zero block, +/-
 * equal maxima, tiny and large magnitudes. */
static void act_row(tu_rng *r, float *x, int64_t n, int variant) {
    mm_fill(r, x, (size_t)n, variant == 3 ? 1e-4f : 1.0f);
    if (variant == 1) {
        /* amax 127 -> scale 1, values k + 0.5 tie under roundf and nearest-even */
        for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(tu_rng_u64(r) % 200) - 100) + 0.5f;
        for (int64_t i = 0; i < n; i += 32) x[i] = 127.0f;
    } else if (variant == 2) {
        for (int64_t i = 0; i < 32 && i < n; i++) x[i] = 0.0f;              /* zero legacy block */
        for (int64_t i = 256; i < 512 && i < n; i++) x[i] = 0.0f;           /* zero super-block */
        if (n > 600) { x[520] = 9.0f; x[530] = -9.0f; }                      /* equal |max|, + first */
        if (n > 800) { x[700] = -7.0f; x[760] = 7.0f; }                     /* equal |max|, - first */
    }
}

/* ggml's x86 q8_0/q8_1 activation quantizer (llama.cpp on x86): per block
 * of 32, d = amax / 127, q = nearest-even(x * (127 / amax)), s = d * sum(q).
 * rb_quantize_row's reference rule (roundf(x * (1 / d))) differs at ties. */
static void act_ref_q8(rb_dtype t, const float *x, void *out, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int8_t q[32];
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)nearbyintf(x[b * 32 + j] * id);
            sum += q[j];
        }
        if (t == RB_Q8_0) {
            rb_block_q8_0 *y = (rb_block_q8_0 *)out + b;
            y->d = rb_f32_to_f16(d);
            memcpy(y->qs, q, 32);
        } else {
            rb_block_q8_1 *y = (rb_block_q8_1 *)out + b;
            y->d = rb_f32_to_f16(d);
            y->s = rb_f32_to_f16((float)sum * d);
            memcpy(y->qs, q, 32);
        }
    }
}

static void test_act_quant_identical(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 1234);
    const int64_t n = 256 * 5;
    float *x = malloc(sizeof(float) * n);
    assert_non_null(x);
    const rb_dtype vts[] = {RB_Q8_0, RB_Q8_1, RB_Q8_K};
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        for (int variant = 0; variant < 4; variant++) {
            act_row(&r, x, n, variant);
            for (int v = 0; v < 3; v++) {
                size_t rs = rb_dtype_row_size(vts[v], n);
                char *want = malloc(rs), *got = malloc(rs);
                assert_true(want && got);
                memset(got, 0xA5, rs);
                if (vts[v] == RB_Q8_K) TU_OK(rb_quantize_row(vts[v], x, want, n));
                else act_ref_q8(vts[v], x, want, n);
                assert_non_null(k->from_f32[vts[v]]);
                k->from_f32[vts[v]](x, got, n);
                if (memcmp(want, got, rs) != 0)
                    fail_msg("isa %s: %s quantizer differs from its reference (variant %d)",
                             rb_cpu_isa_name((rb_cpu_isa)isa), rb_dtype_name(vts[v]), variant);
                free(want);
                free(got);
            }
        }
    }
    free(x);
}

/* Ties round to even, as llama.cpp's x86 quantizer does (roundf would give
 * 63 and -63 for 62.5 and -62.5): with amax 127 the scale is exactly 1. */
static void test_act_quant_ties(void **state) {
    (void)state;
    float x[32] = {127.0f, 62.5f, -62.5f, 63.5f, 0.5f, -1.5f, 2.5f};
    const int8_t want[7] = {127, 62, -62, 64, 0, -2, 2};
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        rb_block_q8_0 b0;
        rb_block_q8_1 b1;
        k->from_f32[RB_Q8_0](x, &b0, 32);
        k->from_f32[RB_Q8_1](x, &b1, 32);
        assert_memory_equal(b0.qs, want, sizeof want);
        assert_memory_equal(b1.qs, want, sizeof want);
        assert_true(rb_f16_to_f32(b0.d) == 1.0f);
        assert_true(rb_f16_to_f32(b1.s) == 127.0f + 62 - 62 + 64 + 0 - 2 + 2);
    }
}

static void test_conversions(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 99);
    const int64_t n = 203;
    float x[203], y[203], z[203];
    rb_f16 h[203], h2[203];
    rb_bf16 bh[203];
    mm_fill(&r, x, n, 3.0f);
    rb_f32_to_f16_row(x, h, n);
    rb_f32_to_bf16_row(x, bh, n);
    rb_f16_to_f32_row(h, y, n);
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        k->f16_to_f32(h, z, n);
        assert_memory_equal(y, z, sizeof y);
        k->f32_to_f16(x, h2, n);
        assert_memory_equal(h, h2, sizeof h);
        k->bf16_to_f32(bh, z, n);
        for (int64_t i = 0; i < n; i++) assert_true(z[i] == rb_bf16_to_f32(bh[i]));
    }
}

/* One weight row and one activation row of length n through every ISA. */
static void check_dot(tu_rng *r, rb_dtype w, int64_t n) {
    float *xw = malloc(sizeof(float) * n), *xa = malloc(sizeof(float) * n);
    assert_true(xw && xa);
    mm_fill(r, xw, (size_t)n, 0.5f);
    for (int64_t i = 0; i < n; i++) xw[i] += 0.05f; /* nonzero mean exercises the min terms */
    mm_fill(r, xa, (size_t)n, 1.0f);
    void *qw = mm_encode(w, xw, 1, n);
    float *dw = mm_decode(w, qw, 1, n);
    const struct rb_cpu_kernels *ks = rb_cpu_kernels_get(RB_CPU_ISA_SCALAR);
    rb_dtype vt = ks->vec_dot_type[w];
    void *qa = mm_encode(vt, xa, 1, n);
    float *da = mm_decode(vt, qa, 1, n);
    double abs_sum, ref = mm_dot_ref(dw, da, n, &abs_sum);
    float s_scalar = NAN;
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        assert_int_equal(k->vec_dot_type[w], vt);
        float s = NAN;
        k->vec_dot[w](n, &s, qw, qa);
        double err = fabs((double)s - ref);
        if (!(err <= dot_tol(w) * abs_sum + 1e-30))
            fail_msg("%s n=%lld isa %s: dot %.9g ref %.9g (err %.3g, bound %.3g)", rb_dtype_name(w), (long long)n,
                     rb_cpu_isa_name((rb_cpu_isa)isa), s, ref, err, dot_tol(w) * abs_sum);
        if (isa == 0) s_scalar = s;
        else if (!(fabs((double)s - s_scalar) <= 2e-6 * abs_sum))
            fail_msg("%s isa %s vs scalar: %.9g vs %.9g", rb_dtype_name(w), rb_cpu_isa_name((rb_cpu_isa)isa), s,
                     s_scalar);
    }
    free(xw); free(xa); free(qw); free(dw); free(qa); free(da);
}

static void test_vec_dot_all_dtypes(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 777);
    for (int i = 0; i < mm_n_weight_dtypes; i++) {
        rb_dtype w = mm_weight_dtypes[i];
        check_dot(&r, w, 256);
        check_dot(&r, w, 256 * 7);
        if (mm_small_block(w)) {
            check_dot(&r, w, 32);  /* a single block: odd block count for the paired kernels */
            check_dot(&r, w, 96);
            check_dot(&r, w, 32 * 37);
        }
        if (w == RB_F32 || w == RB_F16 || w == RB_BF16) check_dot(&r, w, 203); /* tails */
    }
}

/* gemm tiles equal the same ISA's dot product for every (row, column) */
static void test_gemm_tiles(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 4242);
    const int64_t n = 256 * 3;
    const int NR = 7, NC = 6;
    float *xw = malloc(sizeof(float) * n * NR), *xa = malloc(sizeof(float) * n * NC);
    assert_true(xw && xa);
    int tested = 0;
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        for (int i = 0; i < mm_n_weight_dtypes; i++) {
            rb_dtype w = mm_weight_dtypes[i];
            if (!k->gemm_tile[w]) continue;
            const int64_t lens[3] = {n, 32 * 5, 32};
            for (int li = 0; li < 3; li++) {
                const int64_t len = lens[li];
                if (len % rb_dtype_info((int)w)->block_size) continue;
                mm_fill(&r, xw, (size_t)(len * NR), 1.0f);
                mm_fill(&r, xa, (size_t)(len * NC), 1.0f);
                rb_dtype vt = k->vec_dot_type[w];
                char *qw = mm_encode(w, xw, NR, len), *qa = mm_encode(vt, xa, NC, len);
                size_t lda = rb_dtype_row_size(w, len), ldb = rb_dtype_row_size(vt, len);
                for (int nr = 1; nr <= NR; nr++) {
                    for (int nc = 1; nc <= NC; nc++) {
                        float tile[8 * 8];
                        for (int j = 0; j < 64; j++) tile[j] = NAN;
                        k->gemm_tile[w](len, nr, nc, qw, lda, qa, ldb, tile, 8);
                        for (int c = 0; c < nc; c++)
                            for (int rr = 0; rr < nr; rr++) {
                                float s;
                                k->vec_dot[w](len, &s, qw + rr * lda, qa + c * ldb);
                                float got = tile[c * 8 + rr];
                                if (!(fabsf(got - s) <= 1e-5f * (fabsf(s) + 1.0f)))
                                    fail_msg("%s isa %s tile %dx%d [%d,%d]: %.9g vs dot %.9g", rb_dtype_name(w),
                                             rb_cpu_isa_name((rb_cpu_isa)isa), nr, nc, rr, c, got, s);
                            }
                        tested++;
                    }
                }
                free(qw);
                free(qa);
            }
        }
    }
    free(xw);
    free(xa);
    /* the tile path must actually exist where the ISA provides it */
    if (rb_cpu_isa_detect() >= RB_CPU_ISA_AVX512) assert_true(tested > 0);
}

/* The decode and prefill fast paths against double references on decoded
 * data: matrix-vector runs (gemm_tile with nc == 1, 1-3 trailing blocks) and
 * the packed prefill kernels (pack_rows + gemm_packed, partial row groups and
 * column counts that are not multiples of the register tile). */
static void test_matvec_and_packed(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 5151);
    const int NR = 19, NC = 11;
    const int64_t lens[4] = {32 * 9, 32 * 10, 32 * 11, 32 * 64};
    int packed_tested = 0;
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        for (int i = 0; i < mm_n_weight_dtypes; i++) {
            const rb_dtype w = mm_weight_dtypes[i];
            if (!k->gemm_tile[w] || !mm_small_block(w) || rb_dtype_info((int)w)->block_size != 32) continue;
            for (int li = 0; li < 4; li++) {
                const int64_t n = lens[li];
                float *xw = malloc(sizeof(float) * (size_t)(n * NR)), *xa = malloc(sizeof(float) * (size_t)(n * NC));
                assert_true(xw && xa);
                mm_fill(&r, xw, (size_t)(n * NR), 1.0f);
                mm_fill(&r, xa, (size_t)(n * NC), 1.0f);
                const rb_dtype vt = k->vec_dot_type[w];
                char *qw = mm_encode(w, xw, NR, n), *qa = mm_encode(vt, xa, NC, n);
                float *dw = mm_decode(w, qw, NR, n), *da = mm_decode(vt, qa, NC, n);
                const size_t lda = rb_dtype_row_size(w, n), ldb = rb_dtype_row_size(vt, n);
                float out[NR * NC];
                /* matrix-vector: all NR rows against each activation row */
                for (int c = 0; c < NC; c++) {
                    for (int j = 0; j < NR; j++) out[j] = NAN;
                    k->gemm_tile[w](n, NR, 1, qw, lda, qa + (size_t)c * ldb, ldb, out, NR);
                    for (int rr = 0; rr < NR; rr++) {
                        double abs_sum, ref = mm_dot_ref(dw + rr * n, da + c * n, n, &abs_sum);
                        if (!(fabs(out[rr] - ref) <= dot_tol(w) * abs_sum))
                            fail_msg("%s isa %s matvec n=%lld row %d col %d: %.9g vs %.9g", rb_dtype_name(w),
                                     rb_cpu_isa_name((rb_cpu_isa)isa), (long long)n, rr, c, out[rr], ref);
                    }
                }
                if (k->pack_rows[w] && k->gemm_packed[w] && vt == RB_Q8_0) {
                    const int64_t nb = n / 32;
                    rb_act_aux *aux = malloc(sizeof(rb_act_aux) * (size_t)(nb * NC));
                    char *packed = aligned_alloc(64, (size_t)nb * RB_CPU_PACK_BLOCK_BYTES);
                    assert_true(aux && packed);
                    for (int c = 0; c < NC; c++)
                        for (int64_t b = 0; b < nb; b++) {
                            const rb_block_q8_0 *yb = (const rb_block_q8_0 *)(qa + (size_t)c * ldb) + b;
                            int32_t sum = 0;
                            for (int j = 0; j < 32; j++) sum += yb->qs[j];
                            aux[c * nb + b] = (rb_act_aux){rb_f16_to_f32(yb->d), sum};
                        }
                    for (int r0 = 0; r0 < NR; r0 += RB_CPU_PACK_ROWS) {
                        const int nr = NR - r0 < RB_CPU_PACK_ROWS ? NR - r0 : RB_CPU_PACK_ROWS;
                        k->pack_rows[w](n, nr, qw + (size_t)r0 * lda, lda, packed);
                        for (int j = 0; j < NR * NC; j++) out[j] = NAN;
                        k->gemm_packed[w](n, nr, NC, packed, qa, ldb, aux, (size_t)nb, out, NR, NULL);
                        for (int c = 0; c < NC; c++)
                            for (int rr = 0; rr < nr; rr++) {
                                double abs_sum, ref = mm_dot_ref(dw + (r0 + rr) * n, da + c * n, n, &abs_sum);
                                if (!(fabs(out[c * NR + rr] - ref) <= dot_tol(w) * abs_sum))
                                    fail_msg("%s isa %s packed n=%lld row %d col %d: %.9g vs %.9g",
                                             rb_dtype_name(w), rb_cpu_isa_name((rb_cpu_isa)isa), (long long)n,
                                             r0 + rr, c, out[c * NR + rr], ref);
                            }
                        for (int c = 0; c < NC; c++) /* nothing written past nr */
                            for (int rr = nr; rr < NR; rr++) assert_true(isnan(out[c * NR + rr]));
                    }
                    packed_tested++;
                    free(aux);
                    free(packed);
                }
                free(xw); free(xa); free(qw); free(qa); free(dw); free(da);
            }
        }
    }
    if (rb_cpu_isa_detect() >= RB_CPU_ISA_AVX512) assert_true(packed_tested >= 8); /* q4_0 and q8_0 */
}

/* The k-quant fast paths against double references on decoded data: the
 * matrix-vector runs (gemm_tile with nc == 1) and the packed prefill kernels
 * (pack_rows + gemm_packed on q8_K activations: a full and a partial group of
 * 16 rows, 11 activation rows = one register tile of 8 and one of 3; the
 * prefetch request issued in full), for 1, 3, 8 and 22 super-blocks. Weights
 * get a nonzero mean and a few rows of one sign so the mins / offsets carry
 * real weight; activations include a zero super-block. */
static void test_kquant_matvec_and_packed(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 6262);
    const int NR = 19, NC = 11;
    const int64_t lens[4] = {256, 256 * 3, 256 * 8, 256 * 22};
    const rb_dtype kq[5] = {RB_Q2_K, RB_Q3_K, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    int matvec_tested = 0, packed_tested = 0;
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        for (int i = 0; i < 5; i++) {
            const rb_dtype w = kq[i], vt = k->vec_dot_type[w];
            assert_int_equal(vt, RB_Q8_K);
            const bool packed = k->pack_rows[w] && k->gemm_packed[w];
            if (!k->gemm_tile[w] && !packed) continue;
            for (int li = 0; li < 4; li++) {
                const int64_t n = lens[li];
                float *xw = malloc(sizeof(float) * (size_t)(n * NR)), *xa = malloc(sizeof(float) * (size_t)(n * NC));
                assert_true(xw && xa);
                mm_fill(&r, xw, (size_t)(n * NR), 1.0f);
                for (int64_t j = 0; j < n * NR; j++) xw[j] += 0.3f;
                for (int64_t j = 0; j < n; j++) xw[2 * n + j] = fabsf(xw[2 * n + j]);    /* row 2: all >= 0 */
                for (int64_t j = 0; j < n; j++) xw[5 * n + j] = -fabsf(xw[5 * n + j]);   /* row 5: all <= 0 */
                mm_fill(&r, xa, (size_t)(n * NC), 1.0f);
                if (n >= 512) memset(xa + 3 * n + 256, 0, sizeof(float) * 256);       /* a zero super-block */
                char *qw = mm_encode(w, xw, NR, n), *qa = mm_encode(vt, xa, NC, n);
                float *dw = mm_decode(w, qw, NR, n), *da = mm_decode(vt, qa, NC, n);
                const size_t lda = rb_dtype_row_size(w, n), ldb = rb_dtype_row_size(vt, n);
                float out[NR * NC];
                if (k->gemm_tile[w]) {
                    for (int c = 0; c < NC; c++) {
                        for (int j = 0; j < NR; j++) out[j] = NAN;
                        k->gemm_tile[w](n, NR, 1, qw, lda, qa + (size_t)c * ldb, ldb, out, NR);
                        for (int rr = 0; rr < NR; rr++) {
                            double abs_sum, ref = mm_dot_ref(dw + rr * n, da + c * n, n, &abs_sum);
                            if (!(fabs(out[rr] - ref) <= dot_tol(w) * abs_sum))
                                fail_msg("%s isa %s matvec n=%lld row %d col %d: %.9g vs %.9g", rb_dtype_name(w),
                                         rb_cpu_isa_name((rb_cpu_isa)isa), (long long)n, rr, c, out[rr], ref);
                        }
                    }
                    matvec_tested++;
                }
                if (packed) {
                    const int64_t nblk = n / RB_QK_K;
                    assert_true(k->pack_bytes[w] > 0);
                    char *pk = aligned_alloc(64, (size_t)nblk * k->pack_bytes[w]);
                    assert_non_null(pk);
                    for (int r0 = 0; r0 < NR; r0 += RB_CPU_PACK_ROWS) {
                        const int nr = NR - r0 < RB_CPU_PACK_ROWS ? NR - r0 : RB_CPU_PACK_ROWS;
                        memset(pk, 0xA5, (size_t)nblk * k->pack_bytes[w]); /* no stale bytes help */
                        k->pack_rows[w](n, nr, qw + (size_t)r0 * lda, lda, pk);
                        for (int j = 0; j < NR * NC; j++) out[j] = NAN;
                        rb_pack_prefetch pf = {.p = qw, .lda = lda, .row_bytes = lda, .rows = NR};
                        pf.lines = rb_pack_prefetch_total(&pf);
                        k->gemm_packed[w](n, nr, NC, pk, qa, ldb, NULL, 0, out, NR, &pf);
                        assert_int_equal(pf.row, NR); /* every line requested */
                        for (int c = 0; c < NC; c++)
                            for (int rr = 0; rr < nr; rr++) {
                                double abs_sum, ref = mm_dot_ref(dw + (r0 + rr) * n, da + c * n, n, &abs_sum);
                                if (!(fabs(out[c * NR + rr] - ref) <= dot_tol(w) * abs_sum))
                                    fail_msg("%s isa %s packed n=%lld row %d col %d: %.9g vs %.9g",
                                             rb_dtype_name(w), rb_cpu_isa_name((rb_cpu_isa)isa), (long long)n,
                                             r0 + rr, c, out[c * NR + rr], ref);
                            }
                        for (int c = 0; c < NC; c++) /* nothing written past nr */
                            for (int rr = nr; rr < NR; rr++) assert_true(isnan(out[c * NR + rr]));
                    }
                    packed_tested++;
                    free(pk);
                }
                free(xw); free(xa); free(qw); free(qa); free(dw); free(da);
            }
        }
    }
    /* the fast paths must exist where the ISA provides them */
    if (rb_cpu_isa_detect() >= RB_CPU_ISA_AVX512) {
        assert_true(matvec_tested >= 12); /* q4_K, q5_K, q6_K */
        assert_true(packed_tested >= 20); /* q2_K..q6_K */
    }
}

/* Float weights (f32, f16, bf16): the matrix-vector runs (gemm_tile with
 * nc == 1, the decode path) give each row the one-row kernel's bits, at row
 * counts around the 4-row groups and lengths with 16- and 1-element tails;
 * both within float rounding of a double reference on the decoded weights. */
static void test_float_matvec_runs(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 515);
    const rb_dtype ws[] = {RB_F32, RB_F16, RB_BF16};
    const int64_t lens[] = {1, 7, 16, 17, 33, 48, 300, 1000};
    const int nrs[] = {1, 3, 4, 5, 8, 9};
    enum { NR = 9 };
    int tested = 0;
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
            const rb_dtype w = ws[wi];
            if (!k->gemm_tile[w]) continue;
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const int64_t n = lens[li];
                float *xw = malloc(sizeof(float) * (size_t)(n * NR)), *y = malloc(sizeof(float) * (size_t)n);
                assert_true(xw && y);
                mm_fill(&r, xw, (size_t)(n * NR), 1.0f);
                mm_fill(&r, y, (size_t)n, 1.0f);
                char *qw = mm_encode(w, xw, NR, n);
                float *dw = mm_decode(w, qw, NR, n);
                const size_t lda = rb_dtype_row_size(w, n);
                for (size_t ri = 0; ri < sizeof nrs / sizeof nrs[0]; ri++) {
                    float out[NR];
                    k->gemm_tile[w](n, nrs[ri], 1, qw, lda, y, 0, out, 1);
                    for (int rr = 0; rr < nrs[ri]; rr++) {
                        float one;
                        k->vec_dot[w](n, &one, qw + (size_t)rr * lda, y);
                        if (memcmp(&one, &out[rr], sizeof one) != 0)
                            fail_msg("%s isa %s n=%lld run of %d, row %d: %.9g vs one-row %.9g", rb_dtype_name(w),
                                     rb_cpu_isa_name((rb_cpu_isa)isa), (long long)n, nrs[ri], rr, out[rr], one);
                        double abs_sum, ref = mm_dot_ref(dw + (size_t)rr * (size_t)n, y, n, &abs_sum);
                        assert_true(fabs(out[rr] - ref) <= 2e-6 * abs_sum + 1e-30);
                    }
                    tested++;
                }
                free(qw);
                free(dw);
                free(xw);
                free(y);
            }
        }
    }
    assert_true(tested > 0);
}

/* The float-weight prefill kernels (gemm_t, f16 and bf16 rows): every output
 * bit-identical to one f32 FMA chain in k order (fmaf) of the exactly
 * converted weights (rb_f16_to_f32 / rb_bf16_to_f32), within float rounding of
 * a double reference, for 1..RB_CPU_T_ROWS weight rows, 1/3/16/17/32
 * activation rows (unused lanes hold garbage that must not leak) and lengths
 * around the kernels' 16-value chunks. Rows are 2-byte aligned, lda apart,
 * the last one ends where its allocation ends (a read past it is an ASan
 * error), and some weights are f16 subnormals; the prefetch hint changes
 * nothing. */
static void test_float_gemm_t(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 616);
    const int64_t lens[] = {1, 7, 16, 17, 33, 300};
    const int ncs[] = {1, 3, 16, 17, 32};
    const rb_dtype wts[] = {RB_F16, RB_BF16};
    int tested = 0;
    for (int isa = 0; isa <= (int)rb_cpu_isa_detect(); isa++) {
        const struct rb_cpu_kernels *k = rb_cpu_kernels_get((rb_cpu_isa)isa);
        for (size_t ti = 0; ti < sizeof wts / sizeof wts[0]; ti++) {
            const rb_dtype wt = wts[ti];
            if (!k->gemm_t[wt]) continue;
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const int64_t n = lens[li];
                const size_t lda = (size_t)n * 2 + 6; /* rows not packed, 2-byte aligned */
                const size_t wbytes = lda * (RB_CPU_T_ROWS - 1) + (size_t)n * 2;
                uint16_t *w = malloc(wbytes);
                float *wf = malloc(sizeof(float) * (size_t)n * RB_CPU_T_ROWS); /* the weights as f32 */
                float *yt = malloc(sizeof(float) * (size_t)n * RB_CPU_T_COLS);
                assert_true(w && wf && yt);
                memset(w, 0xff, wbytes); /* padding: NaN in both dtypes, never read */
                for (int rr = 0; rr < RB_CPU_T_ROWS; rr++)
                    for (int64_t kk = 0; kk < n; kk++) {
                        float v = (float)tu_rng_normal(&r);
                        if (tu_rng_u64(&r) % 8 == 0) v *= 1e-6f; /* f16 subnormal range */
                        uint16_t h;
                        if (wt == RB_F16) {
                            rb_f16 x = rb_f32_to_f16(v);
                            memcpy(&h, &x, 2);
                            wf[rr * n + kk] = rb_f16_to_f32(x);
                        } else {
                            rb_bf16 x = rb_f32_to_bf16(v);
                            memcpy(&h, &x, 2);
                            wf[rr * n + kk] = rb_bf16_to_f32(x);
                        }
                        memcpy((char *)w + (size_t)rr * lda + (size_t)kk * 2, &h, 2);
                    }
                for (size_t ci = 0; ci < sizeof ncs / sizeof ncs[0]; ci++) {
                    const int nc = ncs[ci];
                    for (int64_t kk = 0; kk < n; kk++)
                        for (int c = 0; c < RB_CPU_T_COLS; c++)
                            yt[kk * RB_CPU_T_COLS + c] = c < nc ? (float)tu_rng_normal(&r) : NAN;
                    for (int nr = 1; nr <= RB_CPU_T_ROWS; nr++) {
                        float dst[RB_CPU_T_COLS * RB_CPU_T_ROWS];
                        for (size_t j = 0; j < sizeof dst / sizeof dst[0]; j++) dst[j] = -7.0f;
                        const int pf = nr % 2; /* with and without prefetches (of the weights themselves) */
                        k->gemm_t[wt](n, nr, nc, w, lda, yt, dst, RB_CPU_T_ROWS, pf ? (const void *)w : NULL,
                                      pf ? wbytes / 64 : 0);
                        for (int c = 0; c < RB_CPU_T_COLS; c++)
                            for (int rr = 0; rr < RB_CPU_T_ROWS; rr++) {
                                const float got = dst[c * RB_CPU_T_ROWS + rr];
                                if (c >= nc || rr >= nr) {
                                    assert_true(got == -7.0f); /* outside the tile: untouched */
                                    continue;
                                }
                                float chain = 0.0f;
                                double ref = 0.0, abs_sum = 0.0;
                                for (int64_t kk = 0; kk < n; kk++) {
                                    const float a = wf[rr * n + kk], b = yt[kk * RB_CPU_T_COLS + c];
                                    chain = fmaf(a, b, chain);
                                    ref += (double)a * b;
                                    abs_sum += fabs((double)a * b);
                                }
                                if (memcmp(&chain, &got, sizeof got) != 0)
                                    fail_msg("gemm_t %s isa %s n=%lld %dx%d [%d,%d]: %.9g vs fma chain %.9g",
                                             rb_dtype_name(wt), rb_cpu_isa_name((rb_cpu_isa)isa), (long long)n, nr,
                                             nc, rr, c, got, chain);
                                assert_true(fabs(got - ref) <= 2e-6 * abs_sum + 1e-30);
                            }
                        tested++;
                    }
                }
                free(w);
                free(wf);
                free(yt);
            }
        }
    }
    if (rb_cpu_isa_detect() >= RB_CPU_ISA_AVX512) assert_true(tested > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_detect),
        cmocka_unit_test(test_matvec_and_packed),
        cmocka_unit_test(test_kquant_matvec_and_packed),
        cmocka_unit_test(test_act_quant_identical),
        cmocka_unit_test(test_act_quant_ties),
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_vec_dot_all_dtypes),
        cmocka_unit_test(test_gemm_tiles),
        cmocka_unit_test(test_float_matvec_runs),
        cmocka_unit_test(test_float_gemm_t),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
