/* The engine behind torch.Generator('cpu'): std::mt19937 seeded with a 32-bit
 * value (Matsumoto & Nishimura 1998, the standard initialisation and
 * tempering), plus torch's conversions of its words to float and double
 * uniforms in [0, 1). */
#include "sched_fp_contract.h"

#include "rng_torch_internal.h"

#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu

void rb_mt19937_seed(rb_torch_rng *g, uint32_t seed) {
    g->mt[0] = seed;
    for (uint32_t i = 1; i < RB_TORCH_MT_N; i++)
        g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + i;
    g->mt_next = RB_TORCH_MT_N; /* regenerate on the first draw */
}

static void mt_twist(rb_torch_rng *g) {
    uint32_t *mt = g->mt;
    for (int i = 0; i < RB_TORCH_MT_N; i++) {
        uint32_t y = (mt[i] & MT_UPPER) | (mt[(i + 1) % RB_TORCH_MT_N] & MT_LOWER);
        mt[i] = mt[(i + MT_M) % RB_TORCH_MT_N] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    g->mt_next = 0;
}

uint32_t rb_mt19937_next32(rb_torch_rng *g) {
    if (g->mt_next >= RB_TORCH_MT_N) mt_twist(g);
    uint32_t y = g->mt[g->mt_next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

uint64_t rb_mt19937_next64(rb_torch_rng *g) {
    uint64_t hi = rb_mt19937_next32(g);
    return (hi << 32) | rb_mt19937_next32(g);
}

float rb_mt19937_uniform24(rb_torch_rng *g) {
    return (float)(rb_mt19937_next32(g) & 0xffffffu) * 0x1p-24f;
}

double rb_mt19937_uniform53(rb_torch_rng *g) {
    return (double)(rb_mt19937_next64(g) & ((UINT64_C(1) << 53) - 1)) * 0x1p-53;
}
