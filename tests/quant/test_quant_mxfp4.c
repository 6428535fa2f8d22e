/* MXFP4 (ggml's block_mxfp4): the decoder on hand-made blocks (every
 * nibble, the E8M0 scale's subnormal and largest exponents), the encoder's
 * exponent choice and its ties (the first of two equally near table values
 * wins), zero and tiny blocks, bytes identical to the reference generator's
 * Python quantizer (tools/ref/mxfp4_gguf.py) on a fixed vector, round-trip
 * error within half a table step (saturating past the table's top), and bad sizes refused. */
#include "testutil.h"

#include "rbee/quant.h"

#include <math.h>
#include <string.h>

static void test_decode(void **state) {
    (void)state;
    assert_int_equal(rb_dtype_info(RB_MXFP4)->block_size, 32);
    assert_int_equal(rb_dtype_info(RB_MXFP4)->type_size, 17);
    assert_string_equal(rb_dtype_name(RB_MXFP4), "mxfp4");
    rb_block_mxfp4 b;
    b.e = 127; /* d = 2^-1 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    TU_OK(rb_dequantize_row(RB_MXFP4, &b, y, 32));
    static const float half_e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == half_e2m1[j]);
        assert_true(y[j + 16] == half_e2m1[15 - j]);
    }
    /* scales: 2^(e - 128), subnormal below e = 2 */
    assert_true(rb_e8m0_half_to_f32(128) == 1.0f);
    assert_true(rb_e8m0_half_to_f32(0) == ldexpf(1.0f, -128));
    assert_true(rb_e8m0_half_to_f32(1) == ldexpf(1.0f, -127));
    assert_true(rb_e8m0_half_to_f32(2) == ldexpf(1.0f, -126));
    assert_true(rb_e8m0_half_to_f32(255) == ldexpf(1.0f, 127));
    b.e = 0;
    memset(b.qs, 0x77, sizeof b.qs); /* value 12 everywhere */
    TU_OK(rb_dequantize_row(RB_MXFP4, &b, y, 32));
    for (int j = 0; j < 32; j++) assert_true(y[j] == 12.0f * ldexpf(1.0f, -128));
}

static void test_encode_rules(void **state) {
    (void)state;
    float x[32];
    rb_block_mxfp4 b;
    /* amax 6: floor(log2 6) = 2, e = 127, d = 0.5: the E2M1 values are exact */
    static const float v[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 32; j++) x[j] = (j & 8) ? -v[j % 8] : v[j % 8];
    TU_OK(rb_quantize_row(RB_MXFP4, x, &b, 32));
    assert_int_equal(b.e, 127);
    float y[32];
    TU_OK(rb_dequantize_row(RB_MXFP4, &b, y, 32));
    for (int j = 0; j < 32; j++) assert_true(y[j] == x[j]);
    /* -0 and +0 both take index 0 (the first zero) */
    assert_int_equal(b.qs[0] & 0x0F, 0);
    assert_int_equal(b.qs[8] & 0x0F, 0);
    /* ties: 1.25 lies between 1 (index 2) and 1.5 (index 3) -> 2; -1.25 -> index 10 (-1) */
    memset(x, 0, sizeof x);
    x[0] = 6.0f;
    x[1] = 1.25f;
    x[2] = -1.25f;
    x[17] = 5.0f; /* between 4 and 6 -> 4 (index 6), first of the two */
    TU_OK(rb_quantize_row(RB_MXFP4, x, &b, 32));
    assert_int_equal(b.qs[1] & 0x0F, 2);
    assert_int_equal(b.qs[2] & 0x0F, 10);
    assert_int_equal(b.qs[1] >> 4, 6);
    /* all zero: e = 0, every index 0 */
    memset(x, 0, sizeof x);
    TU_OK(rb_quantize_row(RB_MXFP4, x, &b, 32));
    assert_int_equal(b.e, 0);
    for (int j = 0; j < 16; j++) assert_int_equal(b.qs[j], 0);
    /* a tiny block (amax 2^-140, where ggml's cast is undefined): exponent clamped to 0 */
    x[3] = ldexpf(1.0f, -140);
    TU_OK(rb_quantize_row(RB_MXFP4, x, &b, 32));
    assert_int_equal(b.e, 0);
    /* bad sizes */
    assert_int_equal(rb_quantize_row(RB_MXFP4, x, &b, 31), RB_E_INVALID);
    assert_int_equal(rb_dequantize_row(RB_MXFP4, &b, y, 33), RB_E_INVALID);
    assert_int_equal(rb_dtype_row_size(RB_MXFP4, 64), 34u);
}

/* Bytes of tools/ref/mxfp4_gguf.py's quantize() for x[i] = (float)(sin(0.37 i) * s_block), x[40] = 0,
 * s = 1, 0.01, 300, 3e-6 for the four blocks. */
static const uint8_t k_py_blocks[68] = {
    124, 208, 5,   87,  119, 119, 119, 119, 118, 99,  59,  190, 239, 255, 255, 255, 255,
    118, 237, 220, 192, 4,   70,  102, 103, 118, 96,  101, 82,  42,  173, 222, 238, 239,
    133, 238, 238, 237, 219, 176, 4,   69,  86,  102, 102, 102, 100, 65,  26,  173, 222,
    106, 239, 255, 255, 255, 254, 236, 193, 21,  86,  103, 119, 119, 118, 101, 82,  43};

static void test_matches_generator(void **state) {
    (void)state;
    float x[128];
    static const double sc[4] = {1.0, 0.01, 300.0, 3e-6};
    for (int i = 0; i < 128; i++) x[i] = (float)(sin((double)i * 0.37) * sc[i / 32]);
    x[40] = 0.0f;
    uint8_t out[68];
    TU_OK(rb_quantize_row(RB_MXFP4, x, out, 128));
    assert_memory_equal(out, k_py_blocks, sizeof out);
}

static void test_round_trip(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 5);
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static rb_block_mxfp4 q[N / 32];
    for (int i = 0; i < N; i++) x[i] = (float)((tu_rng_uniform(&r) - 0.5) * pow(10.0, (double)(i / 32 % 7) - 3));
    TU_OK(rb_quantize_row(RB_MXFP4, x, q, N));
    TU_OK(rb_dequantize_row(RB_MXFP4, q, y, N));
    for (int b = 0; b < N / 32; b++) {
        const float d = rb_e8m0_half_to_f32(q[b].e);
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        /* d = 2^floor(log2 amax) / 8: amax in [8 d, 16 d); values past the table's top 12 d saturate, the
         * rest are within half a step (at most 2 d) */
        assert_true(amax < 16.0f * d && amax >= 8.0f * d);
        for (int j = 0; j < 32; j++) {
            const float v = x[b * 32 + j], err = fabsf(y[b * 32 + j] - v);
            assert_true(err <= (fabsf(v) > 12.0f * d ? fabsf(v) - 12.0f * d : 2.0f * d));
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_encode_rules),
        cmocka_unit_test(test_matches_generator),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
