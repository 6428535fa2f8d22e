/* torch.randn on torch.Generator('cpu'), as torch's CPU normal kernel computes
 * it for float32 (see include/rbee/sd_rng.h): the double-precision path with
 * its cached second value below 16 elements, the float32 blocks of 16 (AVX2
 * kernel arithmetic, or libm for builds without it) from 16 elements on. */
#include "sched_fp_contract.h"

#include "rng_torch_internal.h"

#include <math.h>

#define TWO_PI_D 6.283185307179586 /* 2 * pi rounded to double */

/* normal_distribution<double>: one value, using or refilling the cache. */
static double normal_double(rb_torch_rng *g) {
    if (g->has_cached_normal) {
        g->has_cached_normal = 0;
        return g->cached_normal;
    }
    double u1 = rb_mt19937_uniform53(g), u2 = rb_mt19937_uniform53(g);
    double r = sqrt(-2.0 * log1p(-u2));
    double theta = TWO_PI_D * u1;
    g->cached_normal = r * sin(theta);
    g->has_cached_normal = 1;
    return r * cos(theta);
}

/* One block of 16 uniforms -> 16 normals, AVX2-kernel arithmetic. */
static void box_muller16_avx2(float *d) {
    const float two_pi = (float)TWO_PI_D;
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j], u2 = d[j + 8];
        float radius = sqrtf(-2.0f * rb_torch_avx_logf(u1));
        float s, c;
        rb_torch_avx_sincosf(two_pi * u2, &s, &c);
        d[j] = radius * c;
        d[j + 8] = radius * s;
    }
}

/* The portable kernel: libm in float, the angle formed in double. */
static void box_muller16_libm(float *d) {
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j], u2 = d[j + 8];
        float radius = sqrtf(-2.0f * logf(u1));
        float theta = (float)(TWO_PI_D * (double)u2);
        d[j] = radius * cosf(theta);
        d[j + 8] = radius * sinf(theta);
    }
}

void rb_torch_cpu_randn(rb_torch_rng *g, float *out, size_t numel, int libm_blocks) {
    if (numel < 16) {
        for (size_t i = 0; i < numel; i++) out[i] = (float)normal_double(g);
        return;
    }
    void (*block)(float *) = libm_blocks ? box_muller16_libm : box_muller16_avx2;
    for (size_t i = 0; i < numel; i++) out[i] = rb_mt19937_uniform24(g);
    for (size_t i = 0; i + 16 <= numel; i += 16) block(out + i);
    if (numel % 16 != 0) { /* the tail: the last 16 values again, from fresh uniforms */
        float *t = out + numel - 16;
        for (int i = 0; i < 16; i++) t[i] = rb_mt19937_uniform24(g);
        block(t);
    }
}
