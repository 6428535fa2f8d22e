/* float32 natural log and sine/cosine as torch's AVX2 normal kernel evaluates
 * them for one lane: the Cephes single-precision polynomials (range
 * reduction to [sqrt(1/2), sqrt(2)) for log, to [-pi/4, pi/4] in three parts
 * for sincos) with the fused multiply-adds the compiled kernel uses. Each
 * fmaf below is a fused operation of that kernel; every other operation
 * rounds on its own (contraction is off for this file). Inputs here are the
 * kernel's: log of (0, 1], sincos of [0, 2*pi). */
#include "sched_fp_contract.h"

#include "rng_torch_internal.h"

#include <math.h>
#include <string.h>

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Cephes logf: log(1+x) ~ x - x^2/2 + x^3 * P(x) on the reduced mantissa. */
static const float LOG_P[9] = {
    7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f, 1.4249322787e-1f,
    -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f,
};
static const float LOG_Q1 = -2.12194440e-4f; /* log(2) = Q2 - Q1 split */
static const float LOG_Q2 = 0.693359375f;
static const float SQRT_HALF = 0.707106781186547524f;

float rb_torch_avx_logf(float x) {
    if (x < 0x1p-126f) x = 0x1p-126f; /* smallest normal: no denormal input */
    uint32_t bits = f2u(x);
    float e = (float)((int32_t)(bits >> 23) - 0x7f) + 1.0f;
    float m = u2f((bits & ~0x7f800000u) | f2u(0.5f)); /* mantissa in [0.5, 1) */
    float keep = 0.0f;
    if (m < SQRT_HALF) { /* fold [0.5, sqrt(1/2)) to [1, sqrt(2)) */
        keep = m;
        e = e - 1.0f;
    }
    m = m - 1.0f;
    m = m + keep;
    float z = m * m;
    float y = LOG_P[0];
    for (int i = 1; i < 9; i++) y = fmaf(y, m, LOG_P[i]);
    y = y * m;
    y = fmaf(y, z, e * LOG_Q1);
    y = fmaf(-z, 0.5f, y);
    m = m + y;
    return fmaf(e, LOG_Q2, m);
}

/* Cephes sinf/cosf: 4/pi range reduction, extended-precision pi/4 in three
 * parts, then the sine and cosine polynomials, swapped by octant. */
static const float FOUR_OVER_PI = 1.27323954473516f;
static const float DP1 = -0.78515625f, DP2 = -2.4187564849853515625e-4f, DP3 = -3.77489497744594108e-8f;
static const float SIN_P0 = -1.9515295891e-4f, SIN_P1 = 8.3321608736e-3f, SIN_P2 = -1.6666654611e-1f;
static const float COS_P0 = 2.443315711809948e-5f, COS_P1 = -1.388731625493765e-3f, COS_P2 = 4.166664568298827e-2f;

void rb_torch_avx_sincosf(float x, float *s, float *c) {
    uint32_t sign_sin = f2u(x) & 0x80000000u;
    x = fabsf(x);
    int32_t j = (int32_t)(x * FOUR_OVER_PI); /* truncation, x >= 0 */
    j = (j + 1) & ~1;
    float y = (float)j;
    sign_sin ^= ((uint32_t)j & 4u) << 29;
    int use_sin_poly = (j & 2) == 0;
    x = fmaf(y, DP1, x);
    x = fmaf(y, DP2, x);
    x = fmaf(y, DP3, x);
    uint32_t sign_cos = ((~(uint32_t)(j - 2)) & 4u) << 29;
    float z = x * x;
    float pc = fmaf(fmaf(COS_P0, z, COS_P1), z, COS_P2);
    pc = pc * z;
    pc = fmaf(pc, z, -(z * 0.5f));
    pc = pc + 1.0f;
    float ps = fmaf(fmaf(SIN_P0, z, SIN_P1), z, SIN_P2);
    ps = fmaf(ps * z, x, x);
    float rs = use_sin_poly ? ps : pc, rc = use_sin_poly ? pc : ps;
    *s = u2f(f2u(rs) ^ sign_sin);
    *c = u2f(f2u(rc) ^ sign_cos);
}
