/* Pieces of the torch-compatible generators (include/rbee/sd_rng.h) shared
 * between their source files: the mt19937 engine with torch's uniform
 * conversions, the float32 log / sincos of torch's AVX2 normal kernel, and
 * the per-kind normal fills. */
#ifndef RBEE_RNG_TORCH_INTERNAL_H
#define RBEE_RNG_TORCH_INTERNAL_H

#include "rbee/sd_rng.h"

#include <stddef.h>
#include <stdint.h>

void rb_mt19937_seed(rb_torch_rng *g, uint32_t seed);
uint32_t rb_mt19937_next32(rb_torch_rng *g);
/* torch's random64(): two consecutive words, the first one high. */
uint64_t rb_mt19937_next64(rb_torch_rng *g);
/* uniform_real_distribution<float>(0,1): (word & (2^24-1)) * 2^-24 */
float rb_mt19937_uniform24(rb_torch_rng *g);
/* uniform_real_distribution<double>(0,1): (random64() & (2^53-1)) * 2^-53 */
double rb_mt19937_uniform53(rb_torch_rng *g);

/* Natural log and sine/cosine of one float32 lane exactly as torch's AVX2
 * kernel computes them (Cephes polynomials, its fused multiply-adds). */
float rb_torch_avx_logf(float x);
void rb_torch_avx_sincosf(float x, float *s, float *c);

/* torch.randn on the CPU generator; libm_blocks picks the kernel variant. */
void rb_torch_cpu_randn(rb_torch_rng *g, float *out, size_t numel, int libm_blocks);
/* torch.randn on the CUDA generator (numel already checked). */
void rb_torch_cuda_randn(rb_torch_rng *g, float *out, size_t numel);

#endif
