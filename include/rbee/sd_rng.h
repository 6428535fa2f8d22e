/* Seed-compatible Gaussian noise for Stable Diffusion: the numbers PyTorch's
 * torch.randn(shape, generator=g) gives for a generator seeded with
 * g.manual_seed(seed), so that a seed means the same picture here as in
 * diffusers, AUTOMATIC1111 and ComfyUI. A generator is a plain value owned by
 * the caller (no globals); consecutive rb_torch_randn calls continue the
 * stream exactly as consecutive torch.randn calls on one generator do. The
 * values depend on the element count of each call, not on the shape.
 *
 * RB_TORCH_RNG_CPU  torch.Generator('cpu'): std::mt19937 seeded with the LOW
 *   32 bits of the seed (2^32 behaves as 0). Calls with numel < 16 use
 *   double-precision Box-Muller on 53-bit uniforms, element = r*cos, and the
 *   pair's r*sin is kept in the generator for the next element (also across
 *   calls, as torch keeps it). Calls with numel >= 16 draw numel 24-bit float
 *   uniforms, transform them in blocks of 16 (u1 = 1 - d[j], u2 = d[j+8]) in
 *   float32 with the polynomial log / sincos and the fused multiply-adds of
 *   torch's AVX2 kernel, and, when numel % 16 != 0, recompute the last 16
 *   values from 16 fresh uniforms. Bit-exact with torch on x86-64 CPUs whose
 *   torch dispatch uses a vectorized kernel: AVX2 and AVX-512 machines both
 *   give these values (checked against torch 2.11 with AVX-512 dispatch; the
 *   common desktop case; ComfyUI and A1111 "CPU" noise there), on any host
 *   or compiler.
 * RB_TORCH_RNG_CPU_LIBM  the same generator as computed by torch builds
 *   without that kernel (no AVX2, ARM, ...): the blocks of 16
 *   use libm logf / sinf / cosf. Equal to the AVX2 variant for numel < 16 and
 *   within a few float32 ulps otherwise; bit-exact with torch only where this
 *   host's libm rounds like torch's (glibc on x86-64 is the intended case).
 * RB_TORCH_RNG_CUDA  torch.Generator('cuda') (AUTOMATIC1111's default "GPU"
 *   seed noise): element i of a call is curand's Box-Muller on
 *   Philox4x32-10(counter = (offset/4, 0, i, 0), key = seed as two 32-bit
 *   halves), sine branch, where offset grows by 4 per call. The GPU's
 *   __sincosf is modelled by its range reduction (a multiply by 1/(2 pi)
 *   rounded toward zero); what remains is the hardware's own approximation:
 *   within 2e-6 absolute of the GPU (1.2e-6 measured on the H100 fixtures),
 *   not bit-exact. That simple layout holds while numel <= 256 * grid, where
 *   grid = the blocks torch launches at most = multiprocessors x (max threads
 *   per multiprocessor / 256): 270,336 on an H100 SXM (132 x 2048), the
 *   default here, which covers any single SD latent draw up to 4 x 128 x 128
 *   x 16 images. Beyond it this follows torch's grid-stride kernel (each
 *   thread's curand_normal4 gives elements i, i + 256*grid, i + 2*256*grid,
 *   i + 3*256*grid from the sin/cos of both Box-Muller pairs, then its
 *   counter advances; the offset grows by 4 per such round), which depends on
 *   the GPU model: set it with rb_torch_rng_set_cuda_device (torch itself
 *   gives other numbers on another GPU model). That part is derived from
 *   torch's kernel source and checked against a GPU only by the reference
 *   file of tests/sd/gen_sampler_refs.py. numel above 2^31 - 1 (where torch
 *   splits the launch) is refused with RB_E_RANGE. */
#ifndef RBEE_SD_RNG_H
#define RBEE_SD_RNG_H

#include "rbee/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_torch_rng_kind {
    RB_TORCH_RNG_CPU = 0,
    RB_TORCH_RNG_CPU_LIBM,
    RB_TORCH_RNG_CUDA,
    RB_TORCH_RNG_KIND_COUNT_
} rb_torch_rng_kind;

#define RB_TORCH_MT_N 624

/* Generator state; treat as opaque (it is public so callers can keep it on
 * the stack or inside their own context). */
typedef struct rb_torch_rng {
    rb_torch_rng_kind kind;
    uint64_t seed;
    /* CPU: mt19937 words, next index, and the cached second Box-Muller value */
    uint32_t mt[RB_TORCH_MT_N];
    uint32_t mt_next;
    int has_cached_normal;
    double cached_normal;
    /* CUDA: Philox offset (advanced per call) and the launch bound */
    uint64_t philox_offset;
    uint64_t cuda_grid_max;
} rb_torch_rng;

/* Seeds g as torch.Generator(kind).manual_seed(seed) does. RB_E_INVALID for a
 * NULL g or an unknown kind. */
rb_status rb_torch_rng_init(rb_torch_rng *g, rb_torch_rng_kind kind, uint64_t seed);

/* Fills out[0..numel) with the next torch.randn values of g (numel 0: no
 * draw, nothing changes). RB_E_INVALID for NULL arguments, RB_E_RANGE for a
 * CUDA draw above 2^31 - 1 elements. */
rb_status rb_torch_randn(rb_torch_rng *g, float *out, size_t numel);

/* CUDA only: the GPU whose launch layout large draws follow (see above).
 * Defaults: 132 multiprocessors, 2048 threads each (H100 SXM). RB_E_INVALID
 * for a CPU generator or max_threads_per_sm < 256. */
rb_status rb_torch_rng_set_cuda_device(rb_torch_rng *g, uint32_t sm_count, uint32_t max_threads_per_sm);

/* Largest numel one CUDA draw can have and still use the simple layout
 * (256 * grid); 0 for CPU generators. */
size_t rb_torch_rng_cuda_simple_limit(const rb_torch_rng *g);

/* "cpu", "cpu-libm", "cuda" (alias "gpu") -> kind; RB_E_INVALID with the
 * valid names otherwise. */
rb_status rb_torch_rng_kind_parse(const char *name, rb_torch_rng_kind *out, rb_error *err);
const char *rb_torch_rng_kind_name(rb_torch_rng_kind kind);

/* Noise-callback adapter (the rb_sd_noise_fn shape of rbee/sd_sampler.h):
 * user is an rb_torch_rng*. */
rb_status rb_torch_rng_noise(void *user, float *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
