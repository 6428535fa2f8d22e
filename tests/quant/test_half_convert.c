/* Half-precision conversions of src/core/dtype.c: rb_f32_to_f16 against the
 * F16C instruction (round to nearest even), rb_f16_to_f32 against F16C over
 * all 65536 halves, and rb_f32_to_bf16 against an independent nearest-even
 * reference computed in double, plus hand-picked ties. By default the f32
 * inputs are a boundary-complete sample (~18M patterns: every sign/exponent/
 * kept-mantissa prefix with all rounding-relevant tails, plus a uniform
 * stride); RBEE_HALF_EXHAUSTIVE=1 checks all 2^32 patterns instead (minutes in
 * a Debug build). This file is compiled with -mf16c; the hardware
 * comparisons are skipped on CPUs without F16C. */
#include "testutil.h"

#include "rbee/dtype.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK = 1 << 16 };

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* CPUID leaf 1: ECX bit 29 = F16C, bit 28 = AVX, bit 27 = OSXSAVE; the OS
 * must also save YMM state (XCR0 bits 1 and 2) */
static int have_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned need = (1u << 29) | (1u << 28) | (1u << 27);
    if ((c & need) != need) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u;
}

typedef void (*check_fn)(const float *x, uint16_t *got, uint16_t *want, size_t n);

/* tails below the f16 (13 bits) and bf16 (16 bits) kept mantissa: zero, ties,
 * just below/above ties, sticky bits, all ones */
static const uint32_t k_tail13[] = {0x0000, 0x0001, 0x0002, 0x07ff, 0x0800, 0x0fff, 0x1000,
                                    0x1001, 0x1002, 0x1800, 0x1ffe, 0x1fff, 0x0400, 0x0c00};
static const uint32_t k_tail16[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xfffe, 0xffff, 0x4000, 0x0100};

typedef struct sweep {
    float *buf;
    uint16_t *got, *want;
    size_t k;
    uint64_t count;
    check_fn check;
} sweep;

static void push(sweep *sw, uint32_t u) {
    sw->buf[sw->k++] = bits_f32(u);
    if (sw->k == CHUNK) {
        sw->check(sw->buf, sw->got, sw->want, sw->k);
        sw->count += sw->k;
        sw->k = 0;
    }
}

/* feeds f32 bit patterns to check in chunks; returns how many were checked */
static uint64_t run_sweep(check_fn check) {
    sweep sw = {malloc(CHUNK * sizeof(float)), malloc(CHUNK * 2), malloc(CHUNK * 2), 0, 0, check};
    assert_non_null(sw.buf);
    assert_non_null(sw.got);
    assert_non_null(sw.want);
    const char *env = getenv("RBEE_HALF_EXHAUSTIVE");
    if (env && atoi(env) == 1) {
        for (uint64_t u = 0; u < (1ull << 32); u++) push(&sw, (uint32_t)u);
    } else {
        tu_rng rng;
        tu_rng_seed(&rng, 2024);
        for (uint32_t hi = 0; hi < (1u << 19); hi++) {
            for (size_t t = 0; t < sizeof k_tail13 / sizeof k_tail13[0]; t++) push(&sw, (hi << 13) | k_tail13[t]);
            push(&sw, (hi << 13) | (uint32_t)(tu_rng_u64(&rng) & 0x1fff));
        }
        for (uint32_t hi = 0; hi < (1u << 16); hi++) {
            for (size_t t = 0; t < sizeof k_tail16 / sizeof k_tail16[0]; t++) push(&sw, (hi << 16) | k_tail16[t]);
            push(&sw, (hi << 16) | (uint32_t)(tu_rng_u64(&rng) & 0xffff));
        }
        for (uint64_t u = tu_rng_u64(&rng) % 509; u < (1ull << 32); u += 509) push(&sw, (uint32_t)u);
    }
    if (sw.k) check(sw.buf, sw.got, sw.want, sw.k);
    const uint64_t n = sw.count + sw.k;
    free(sw.buf);
    free(sw.got);
    free(sw.want);
    return n;
}

/* hardware conversion of 8 floats, round to nearest even */
static void hw_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
}

static void test_f16_to_f32_exhaustive(void **state) {
    (void)state;
    if (!have_f16c()) skip();
    for (uint32_t h = 0; h < 65536; h++) {
        const float want = _cvtsh_ss((unsigned short)h);
        const float got = rb_f16_to_f32((rb_f16)h);
        if (f32_bits(got) != f32_bits(want))
            fail_msg("f16 0x%04x: got 0x%08x want 0x%08x", h, f32_bits(got), f32_bits(want));
    }
    /* a few values by hand, independent of the hardware */
    assert_true(rb_f16_to_f32(0x3C00) == 1.0f);
    assert_true(rb_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(rb_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    assert_true(rb_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(isinf(rb_f16_to_f32(0xFC00)) && rb_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(rb_f16_to_f32(0x7E01)));
}

static void check_f16_chunk(const float *src, uint16_t *got, uint16_t *want, size_t n) {
    rb_f32_to_f16_row(src, got, (int64_t)n);
    size_t n8 = n & ~(size_t)7;
    hw_f32_to_f16(src, want, n8);
    for (size_t i = n8; i < n; i++) want[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (memcmp(got, want, n * sizeof *got) != 0) {
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i])
                fail_msg("f32 0x%08x: got f16 0x%04x want 0x%04x", f32_bits(src[i]), got[i], want[i]);
    }
    /* the scalar entry point agrees with the row one */
    for (size_t i = 0; i < n; i += 4099) assert_int_equal(rb_f32_to_f16(src[i]), got[i]);
}

static void test_f32_to_f16_vs_f16c(void **state) {
    (void)state;
    if (!have_f16c()) skip();
    const uint64_t n = run_sweep(check_f16_chunk);
    printf("f32->f16: %llu patterns match F16C\n", (unsigned long long)n);
    /* by hand: overflow threshold, smallest subnormal tie, NaN stays NaN */
    assert_int_equal(rb_f32_to_f16(65519.996f), 0x7BFF);
    assert_int_equal(rb_f32_to_f16(65520.0f), 0x7C00);
    assert_int_equal(rb_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(rb_f32_to_f16(0x1.000002p-25f), 0x0001);
    assert_int_equal(rb_f32_to_f16(-0x1.8p-24f), 0x8002);
    assert_true((rb_f32_to_f16(NAN) & 0x7FFF) > 0x7C00);
}

/* nearest-even bf16 of x by comparing distances to the two neighbours in double */
static uint16_t ref_bf16(uint32_t x) {
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0; /* NaN: handled by the caller */
    if (ax == 0x7f800000u) return (uint16_t)(x >> 16);
    const uint32_t lo = x & 0xffff0000u;
    const uint32_t hi = lo + 0x10000u;
    const double v = fabs((double)bits_f32(x));
    const double a = fabs((double)bits_f32(lo));
    /* hi may be the infinity pattern: its "value" for rounding is 2^128 */
    const double b = ((hi & 0x7fffffffu) == 0x7f800000u) ? ldexp(1.0, 128) : fabs((double)bits_f32(hi));
    const double da = v - a, db = b - v;
    if (da < db) return (uint16_t)(lo >> 16);
    if (db < da) return (uint16_t)(hi >> 16);
    return ((lo >> 16) & 1u) ? (uint16_t)(hi >> 16) : (uint16_t)(lo >> 16);
}

static void check_bf16_chunk(const float *src, uint16_t *got, uint16_t *want, size_t n) {
    (void)want;
    rb_f32_to_bf16_row(src, got, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        const uint32_t x = f32_bits(src[i]);
        if ((x & 0x7fffffffu) > 0x7f800000u) {
            /* NaN stays a quiet NaN with the same sign */
            if ((got[i] & 0x7f80u) != 0x7f80u || !(got[i] & 0x0040u) || ((got[i] ^ (x >> 16)) & 0x8000u))
                fail_msg("NaN 0x%08x -> 0x%04x", x, got[i]);
            continue;
        }
        const uint16_t r = ref_bf16(x);
        if (got[i] != r) fail_msg("f32 0x%08x: got bf16 0x%04x want 0x%04x", x, got[i], r);
    }
    for (size_t i = 0; i < n; i += 4099) assert_int_equal(rb_f32_to_bf16(src[i]), got[i]);
}

static void test_f32_to_bf16_rounding(void **state) {
    (void)state;
    const uint64_t n = run_sweep(check_bf16_chunk);
    printf("f32->bf16: %llu patterns match the reference\n", (unsigned long long)n);
    /* ties and boundaries by hand */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80); /* tie, even stays */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81); /* just above tie */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80); /* just below tie */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0xff7f8000u)), 0xff80); /* tie at the top, odd -> -inf */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x00018000u)), 0x0002); /* subnormal tie, odd rounds up */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x80008000u)), 0x8000); /* -subnormal tie to -0 */
    assert_int_equal(rb_f32_to_bf16(bits_f32(0x7fa00000u)), 0x7fe0); /* signalling NaN is quieted */
    /* bf16 -> f32 is exact: all 65536 values */
    for (uint32_t h = 0; h < 65536; h++) assert_int_equal(f32_bits(rb_bf16_to_f32((rb_bf16)h)), h << 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32_exhaustive),
        cmocka_unit_test(test_f32_to_f16_vs_f16c),
        cmocka_unit_test(test_f32_to_bf16_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
