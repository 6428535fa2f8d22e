/* torch.randn on torch.Generator('cuda'), evaluated on the host: Philox4x32-10
 * (Salmon et al. 2011) counters laid out as torch's grid-stride normal kernel
 * lays them out, and curand's Box-Muller transform of each 4-word output
 * (see include/rbee/sd_rng.h for the layout and its limits). */
#include "sched_fp_contract.h"

#include "rng_torch_internal.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define CUDA_BLOCK 256u
#define CURAND_CALLS 4u /* outputs per curand_normal4 and offset step per round */

static void philox4x32_10(const uint32_t ctr_in[4], uint32_t k0, uint32_t k1, uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The GPU's __sincosf: the angle is first turned into revolutions by a
 * multiply rounded toward zero (FMUL.RZ by 1/(2*pi)), then the hardware
 * evaluates sin/cos of 2*pi*revolutions. Modelling that multiply and
 * evaluating the rest exactly leaves only the hardware's own approximation
 * error (measured against the H100 fixtures: max 1.2e-6 absolute after the
 * radius, 2.1e-6 with plain sinf/cosf). */
static float revolutions_rz(float v) {
    const float inv_2pi = 0.159154936671257019f;
    double exact = (double)v * (double)inv_2pi; /* exact: 24 x 24 bits */
    float r = (float)exact;
    if (fabs((double)r) > fabs(exact)) r = nextafterf(r, 0.0f);
    return r;
}

/* curand's _curand_box_muller on one pair of words: which = 0 gives the sine
 * value (float2.x), 1 the cosine value (float2.y). */
static float box_muller(uint32_t a, uint32_t b, int which) {
    const float inv32 = 2.3283064e-10f;                  /* CURAND_2POW32_INV */
    const float inv32_2pi = 2.3283064e-10f * 6.2831855f; /* CURAND_2POW32_INV_2PI */
    const double two_pi = 6.283185307179586;
    float u = fmaf((float)a, inv32, inv32 / 2.0f);
    float v = fmaf((float)b, inv32_2pi, inv32_2pi / 2.0f);
    float s = sqrtf(-2.0f * logf(u));
    double angle = two_pi * (double)revolutions_rz(v);
    float trig = (float)(which ? cos(angle) : sin(angle));
    return trig * s;
}

void rb_torch_cuda_randn(rb_torch_rng *g, float *out, size_t numel) {
    if (numel == 0) return;
    uint64_t blocks = ((uint64_t)numel + CUDA_BLOCK - 1) / CUDA_BLOCK;
    if (blocks > g->cuda_grid_max) blocks = g->cuda_grid_max;
    uint64_t stride = CUDA_BLOCK * blocks;     /* threads launched */
    uint64_t round = stride * CURAND_CALLS;    /* elements per curand_normal4 round */
    uint64_t rounds = ((uint64_t)numel - 1) / round + 1;
    uint64_t base = g->philox_offset / 4;      /* offsets stay multiples of 4 */
    uint32_t k0 = (uint32_t)g->seed, k1 = (uint32_t)(g->seed >> 32);
    for (uint64_t e = 0; e < numel; e++) {
        uint64_t thread = e % stride, q = e / stride;
        uint64_t counter = base + q / CURAND_CALLS;
        uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), (uint32_t)thread, (uint32_t)(thread >> 32)};
        uint32_t w[4];
        philox4x32_10(ctr, k0, k1, w);
        unsigned comp = (unsigned)(q % CURAND_CALLS); /* .x .y .z .w of curand_normal4 */
        out[e] = comp < 2 ? box_muller(w[0], w[1], (int)comp) : box_muller(w[2], w[3], (int)comp - 2);
    }
    g->philox_offset += rounds * CURAND_CALLS;
}
