/* Round-trip accuracy of every quantized format on seeded random data of
 * several distributions (relative RMS error bounds, no NaN/Inf), exact
 * structure checks of the activation formats q8_1 (s = d * sum(qs)) and q8_K
 * (scale, bsums), plain-type conversions, and rejection of bad arguments. */
#include "testutil.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_ROWS = 5, N_COLS = 7 * 256 }; /* odd counts of 32- and 256-blocks per row */

typedef enum dist {
    D_UNIFORM,   /* U(-1, 1) */
    D_NORMAL,    /* N(0, 0.02), typical weights */
    D_OUTLIERS,  /* N(0, 1) with 1% of values x40 */
    D_CONSTANT,  /* every row one value (positive or negative) */
    D_SPARSE,    /* N(0, 1), about half the values exactly zero */
    D_NEGATIVE,  /* U(-3, -0.5): negative only */
    D_SMALL,     /* N(0, 1e-3): k-quant sub-scales reach fp16 subnormals */
    D_COUNT
} dist;

static const char *const k_dist_names[D_COUNT] = {"uniform", "normal", "outliers", "constant", "sparse", "negative", "small"};

static void fill(tu_rng *r, dist d, float *x, size_t n, size_t row_len) {
    for (size_t i = 0; i < n; i++) {
        switch (d) {
        case D_UNIFORM: x[i] = tu_rng_range(r, -1.0f, 1.0f); break;
        case D_NORMAL: x[i] = 0.02f * tu_rng_normal(r); break;
        case D_OUTLIERS: x[i] = tu_rng_normal(r) * (tu_rng_uniform(r) < 0.01 ? 40.0f : 1.0f); break;
        case D_CONSTANT: x[i] = (i / row_len) % 2 ? -0.75f - (float)(i / row_len) : 1.25f + (float)(i / row_len); break;
        case D_SPARSE: x[i] = tu_rng_uniform(r) < 0.5 ? 0.0f : tu_rng_normal(r); break;
        case D_NEGATIVE: x[i] = tu_rng_range(r, -3.0f, -0.5f); break;
        case D_SMALL: x[i] = 1e-3f * tu_rng_normal(r); break;
        default: x[i] = 0; break;
        }
    }
}

typedef struct fmt_bound {
    rb_dtype t;
    double bound[D_COUNT]; /* max relative RMS error, ~1.5x the measured value */
} fmt_bound;

/* Measured relative RMS (seeds 1234 + 17 * dist, RBEE_QUANT_PRINT=1 prints
 * them) x 1.5, rounded up. Constant rows are reproduced exactly by the
 * formats whose scale is exact in fp16 here, else to within fp16 rounding.
 * (Data below ~1e-4 is not listed: k-quant super-scales then fall into fp16
 * subnormals or underflow to 0, in ggml exactly as here.) */
static const fmt_bound k_bounds[] = {
    /*          uniform normal  outliers constant sparse negative small */
    {RB_Q4_0, {9.8e-2, 1.3e-1, 1.7e-1, 0.0, 1.2e-1, 8.4e-2, 1.3e-1}},
    {RB_Q4_1, {9.1e-2, 1.2e-1, 1.8e-1, 0.0, 1.4e-1, 3.5e-2, 1.2e-1}},
    {RB_Q5_0, {4.7e-2, 6.5e-2, 1.2e-1, 0.0, 5.7e-2, 4.2e-2, 6.4e-2}},
    {RB_Q5_1, {4.5e-2, 5.8e-2, 8.2e-2, 0.0, 6.9e-2, 1.7e-2, 5.7e-2}},
    {RB_Q8_0, {5.7e-3, 8.0e-3, 1.8e-2, 3.3e-4, 7.1e-3, 5.3e-3, 8.1e-3}},
    {RB_Q8_1, {5.7e-3, 8.0e-3, 1.8e-2, 3.3e-4, 7.1e-3, 5.3e-3, 8.1e-3}},
    {RB_Q2_K, {3.5e-1, 4.5e-1, 3.8e-1, 3.2e-4, 5.8e-1, 1.4e-1, 4.5e-1}},
    {RB_Q3_K, {1.9e-1, 2.3e-1, 1.7e-1, 0.0, 2.0e-1, 1.4e-1, 2.3e-1}},
    {RB_Q4_K, {8.2e-2, 1.1e-1, 1.3e-1, 3.3e-4, 1.1e-1, 3.3e-2, 1.1e-1}},
    {RB_Q5_K, {4.2e-2, 5.6e-2, 7.9e-2, 3.5e-4, 5.6e-2, 1.7e-2, 5.5e-2}},
    {RB_Q6_K, {2.0e-2, 2.7e-2, 5.0e-2, 0.0, 2.3e-2, 1.8e-2, 3.0e-2}},
    {RB_Q8_K, {6.0e-3, 1.1e-2, 4.5e-2, 1.1e-7, 9.6e-3, 5.5e-3, 1.1e-2}},
};

static double rel_rms(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)got[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * (double)ref[i];
    }
    return sqrt(num / den);
}

static void test_roundtrip_error(void **state) {
    (void)state;
    const size_t n = (size_t)N_ROWS * N_COLS;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    assert_non_null(x);
    assert_non_null(back);
    const int print = getenv("RBEE_QUANT_PRINT") != NULL;
    for (size_t f = 0; f < sizeof k_bounds / sizeof k_bounds[0]; f++) {
        const rb_dtype t = k_bounds[f].t;
        const size_t row_bytes = rb_dtype_row_size(t, N_COLS);
        assert_true(row_bytes > 0);
        unsigned char *q = malloc(row_bytes * N_ROWS);
        assert_non_null(q);
        if (print) printf("%-5s", rb_dtype_name(t));
        for (int d = 0; d < D_COUNT; d++) {
            tu_rng rng;
            tu_rng_seed(&rng, 1234 + 17 * (uint64_t)d);
            fill(&rng, (dist)d, x, n, N_COLS);
            TU_OK(rb_quantize_rows(t, x, q, N_ROWS, N_COLS));
            for (int r = 0; r < N_ROWS; r++)
                TU_OK(rb_dequantize_row(t, q + (size_t)r * row_bytes, back + (size_t)r * N_COLS, N_COLS));
            for (size_t i = 0; i < n; i++) {
                if (!isfinite(back[i])) fail_msg("%s/%s: non-finite output at %zu", rb_dtype_name(t), k_dist_names[d], i);
                /* exact zeros must survive where the format has no offset */
                if (x[i] == 0.0f && (t == RB_Q4_0 || t == RB_Q5_0 || t == RB_Q8_0 || t == RB_Q8_1 || t == RB_Q8_K ||
                                     t == RB_Q6_K || t == RB_Q3_K))
                    assert_true(back[i] == 0.0f);
            }
            const double e = rel_rms(back, x, n);
            if (print) printf(" %s=%.3e", k_dist_names[d], e);
            if (!print && !(e <= k_bounds[f].bound[d]))
                fail_msg("%s/%s: relative RMS %.4e above bound %.4e", rb_dtype_name(t), k_dist_names[d], e,
                         k_bounds[f].bound[d]);
        }
        if (print) printf("\n");
        free(q);
    }
    free(x);
    free(back);
}

/* q8_1 carries d and s = d * sum(qs) with d the unrounded f32 scale (as ggml);
 * its d and qs equal q8_0's (fixture-verified) for the same input. */
static void test_q8_1_sum_field(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 99);
    enum { NB = 37 };
    float x[NB * 32];
    for (int i = 0; i < NB * 32; i++) x[i] = tu_rng_normal(&rng) * (i % 64 < 32 ? 0.3f : 7.0f);
    for (int i = 0; i < 32; i++) x[5 * 32 + i] = -2.5f; /* one constant block */
    rb_block_q8_1 q1[NB];
    rb_block_q8_0 q0[NB];
    TU_OK(rb_quantize_row(RB_Q8_1, x, q1, NB * 32));
    TU_OK(rb_quantize_row(RB_Q8_0, x, q0, NB * 32));
    for (int b = 0; b < NB; b++) {
        assert_int_equal(q1[b].d, q0[b].d);
        assert_memory_equal(q1[b].qs, q0[b].qs, 32);
        double amax = 0;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmax(amax, fabs((double)x[b * 32 + j]));
            sum += q1[b].qs[j];
        }
        const float d = (float)amax / 127;
        assert_int_equal(q1[b].d, rb_f32_to_f16(d));
        assert_int_equal(q1[b].s, rb_f32_to_f16((float)sum * d));
        /* and s is really d * sum, within fp16 rounding */
        const double s_exact = amax / 127.0 * sum;
        assert_true(fabs(rb_f16_to_f32(q1[b].s) - s_exact) <= fabs(s_exact) * 1e-3 + 1e-6);
        for (int j = 0; j < 32; j++) { /* every level within half a step */
            const double err = fabs(x[b * 32 + j] - (double)q1[b].qs[j] * d);
            assert_true(err <= 0.5001 * d);
        }
    }
}

/* q8_K: d = max / -127 kept in f32, qs = round(x / d) clamped to 127, bsums
 * the exact sums of 16-value groups; dequantization error <= d/2. */
static void test_q8_K_fields(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    enum { NB = 5 };
    float x[NB * 256];
    for (int i = 0; i < NB * 256; i++) x[i] = tu_rng_normal(&rng) * (float)(1 + i / 256);
    x[3] = 50.0f;           /* block 0: positive max, so d < 0 */
    x[256 + 10] = -60.0f;   /* block 1: negative max, so d > 0 */
    for (int i = 0; i < 256; i++) x[4 * 256 + i] = 0.0f; /* block 4: all zero */
    rb_block_q8_K q[NB];
    memset(q, 0x5A, sizeof q);
    TU_OK(rb_quantize_row(RB_Q8_K, x, q, NB * 256));
    float back[NB * 256];
    TU_OK(rb_dequantize_row(RB_Q8_K, q, back, NB * 256));
    for (int b = 0; b < NB; b++) {
        const float *xb = x + 256 * b;
        float max = 0, amax = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
        if (b == 4) {
            assert_true(q[b].d == 0.0f);
            for (int j = 0; j < 256; j++) assert_int_equal(q[b].qs[j], 0);
            for (int g = 0; g < 16; g++) assert_int_equal(q[b].bsums[g], 0);
            continue;
        }
        assert_true(fabs(q[b].d - (double)max / -127.0) <= 1e-6 * fabs((double)max / 127.0));
        if (b == 0) assert_true(q[b].d < 0);
        if (b == 1) assert_true(q[b].d > 0);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q[b].qs[16 * g + l];
            assert_int_equal(q[b].bsums[g], s);
        }
        for (int j = 0; j < 256; j++) {
            assert_true(q[b].qs[j] >= -128 && q[b].qs[j] <= 127);
            const double err = fabs((double)back[256 * b + j] - xb[j]);
            assert_true(err <= 0.5 * fabs(q[b].d) * (1 + 1e-5));
        }
    }
}

static const rb_dtype k_quant_types[] = {RB_Q4_0, RB_Q4_1, RB_Q5_0, RB_Q5_1, RB_Q8_0, RB_Q8_1,
                                         RB_Q2_K, RB_Q3_K, RB_Q4_K, RB_Q5_K, RB_Q6_K, RB_Q8_K};
#define N_QUANT_TYPES (sizeof k_quant_types / sizeof k_quant_types[0])

/* rb_quantize_rows writes every byte and equals row-by-row rb_quantize_row;
 * non-finite values only affect the blocks that contain them. */
static void test_rows_and_nonfinite(void **state) {
    (void)state;
    enum { R = 3, C = 512 };
    float x[R * C];
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    fill(&rng, D_NORMAL, x, R * C, C);
    for (size_t f = 0; f < N_QUANT_TYPES; f++) {
        const rb_dtype t = k_quant_types[f];
        const size_t rb = rb_dtype_row_size(t, C);
        unsigned char a[R * 2 * 292], b[R * 2 * 292];
        assert_true(rb * R <= sizeof a);
        memset(a, 0x00, sizeof a);
        memset(b, 0xFF, sizeof b);
        TU_OK(rb_quantize_rows(t, x, a, R, C));
        for (int r = 0; r < R; r++) TU_OK(rb_quantize_row(t, x + r * C, b + r * rb, C));
        assert_memory_equal(a, b, rb * R);

        /* NaN / Inf in the second half of row 1: first half and other rows unchanged */
        float y[R * C];
        memcpy(y, x, sizeof y);
        y[C + 300] = NAN;
        y[C + 400] = INFINITY;
        y[C + 500] = -INFINITY;
        TU_OK(rb_quantize_rows(t, y, b, R, C));
        assert_memory_equal(a, b, rb + rb / 2);
        assert_memory_equal(a + 2 * rb, b + 2 * rb, rb);
    }
}

static void test_plain_types(void **state) {
    (void)state;
    const float src[6] = {1.0f, -2.5f, 65504.0f, 3.0e-8f, 0.1f, -0.0f};
    float out[6];
    /* f32 <-> f16 / bf16 / f64 through the generic entry points */
    rb_f16 h[6];
    TU_OK(rb_quantize_row(RB_F16, src, h, 6));
    assert_int_equal(h[0], 0x3C00);
    assert_int_equal(h[1], 0xC100);
    assert_int_equal(h[2], 0x7BFF);
    assert_int_equal(h[3], 0x0001); /* 3e-8 rounds to the smallest subnormal 2^-24 */
    assert_int_equal(h[4], 0x2E66);
    assert_int_equal(h[5], 0x8000);
    TU_OK(rb_dequantize_row(RB_F16, h, out, 6));
    assert_true(out[0] == 1.0f && out[1] == -2.5f && out[2] == 65504.0f && out[3] == 0x1p-24f);
    assert_true(out[4] == 0.0999755859375f && out[5] == 0.0f && signbit(out[5]));
    rb_bf16 bh[6];
    TU_OK(rb_quantize_row(RB_BF16, src, bh, 6));
    assert_int_equal(bh[0], 0x3F80);
    assert_int_equal(bh[1], 0xC020);
    assert_int_equal(bh[4], 0x3DCD); /* 0x3DCCCCCD rounds up */
    TU_OK(rb_dequantize_row(RB_BF16, bh, out, 6));
    assert_true(out[0] == 1.0f && out[1] == -2.5f && out[4] == 0.10009765625f);
    double dd[6];
    TU_OK(rb_quantize_row(RB_F64, src, dd, 6));
    for (int i = 0; i < 6; i++) assert_true(dd[i] == (double)src[i]);
    TU_OK(rb_dequantize_row(RB_F64, dd, out, 6));
    assert_memory_equal(out, src, sizeof src);
    float f32[6];
    TU_OK(rb_quantize_row(RB_F32, src, f32, 6));
    assert_memory_equal(f32, src, sizeof src);
    /* unaligned f32 source */
    unsigned char buf[6 * 4 + 1];
    memcpy(buf + 1, src, sizeof src);
    TU_OK(rb_dequantize_row(RB_F32, buf + 1, out, 6));
    assert_memory_equal(out, src, sizeof src);

    /* integers */
    const int8_t i8[4] = {-128, -1, 0, 127};
    const int16_t i16[4] = {-32768, -7, 300, 32767};
    const int32_t i32[4] = {-2147483647 - 1, 5, 16777217, 2147483647};
    const int64_t i64[4] = {-((int64_t)1 << 40), 3, 0, (int64_t)1 << 62};
    TU_OK(rb_dequantize_row(RB_I8, i8, out, 4));
    assert_true(out[0] == -128.0f && out[1] == -1.0f && out[2] == 0.0f && out[3] == 127.0f);
    TU_OK(rb_dequantize_row(RB_I16, i16, out, 4));
    assert_true(out[0] == -32768.0f && out[1] == -7.0f && out[2] == 300.0f && out[3] == 32767.0f);
    TU_OK(rb_dequantize_row(RB_I32, i32, out, 4));
    assert_true(out[0] == -2147483648.0f && out[1] == 5.0f && out[2] == 16777216.0f && out[3] == 2147483648.0f);
    TU_OK(rb_dequantize_row(RB_I64, i64, out, 4));
    assert_true(out[0] == -0x1p40f && out[1] == 3.0f && out[2] == 0.0f && out[3] == 0x1p62f);
}

static void test_bad_input(void **state) {
    (void)state;
    float x[512] = {0};
    for (int i = 0; i < 512; i++) x[i] = (float)(i % 13) - 6.0f;
    unsigned char q[2048];
    float out[512];
    for (size_t f = 0; f < N_QUANT_TYPES; f++) {
        const rb_dtype t = k_quant_types[f];
        const int64_t bs = rb_dtype_info((int)t)->block_size;
        assert_true(rb_quant_can_quantize(t));
        assert_int_equal(rb_quantize_row(t, x, q, bs + 1), RB_E_INVALID);
        assert_int_equal(rb_quantize_row(t, x, q, bs - 1), RB_E_INVALID);
        assert_int_equal(rb_quantize_row(t, x, q, -bs), RB_E_INVALID);
        assert_int_equal(rb_dequantize_row(t, q, out, bs + 16), RB_E_INVALID);
        assert_int_equal(rb_dequantize_row(t, q, out, -bs), RB_E_INVALID);
        assert_int_equal(rb_quantize_rows(t, x, q, 2, bs / 2 * 3), RB_E_INVALID);
        assert_int_equal(rb_quantize_rows(t, x, q, -1, bs), RB_E_INVALID);
        assert_int_equal(rb_quantize_row(t, NULL, q, bs), RB_E_INVALID);
        assert_int_equal(rb_dequantize_row(t, NULL, out, bs), RB_E_INVALID);
        TU_OK(rb_quantize_row(t, x, q, 0)); /* empty is fine */
        TU_OK(rb_quantize_row(t, x, q, bs));
        TU_OK(rb_dequantize_row(t, q, out, bs));
    }
    /* ids that are not types (16, 23 and 29 are iq formats now: test_quant_iq) */
    const int unknown[] = {-1, 4, 5, 31, 34, 35, RB_DTYPE_END_, 1000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_int_equal(rb_dequantize_row((rb_dtype)unknown[i], x, out, 32), RB_E_INVALID);
        assert_int_equal(rb_quantize_row((rb_dtype)unknown[i], x, q, 32), RB_E_INVALID);
        assert_int_equal(rb_quantize_rows((rb_dtype)unknown[i], x, q, 1, 32), RB_E_INVALID);
        assert_false(rb_quant_can_quantize((rb_dtype)unknown[i]));
    }
    /* integer targets are decodable but not quantization targets */
    const rb_dtype ints[] = {RB_I8, RB_I16, RB_I32, RB_I64};
    for (size_t i = 0; i < 4; i++) {
        assert_false(rb_quant_can_quantize(ints[i]));
        assert_int_equal(rb_quantize_row(ints[i], x, q, 8), RB_E_UNSUPPORTED);
    }
    const rb_dtype floats[] = {RB_F32, RB_F16, RB_BF16, RB_F64};
    for (size_t i = 0; i < 4; i++) assert_true(rb_quant_can_quantize(floats[i]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_q8_1_sum_field),
        cmocka_unit_test(test_q8_K_fields),
        cmocka_unit_test(test_rows_and_nonfinite),
        cmocka_unit_test(test_plain_types),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
