/* The rotary angle math both GPU ropes use - the rope kernel (ops_rope.cu)
 * and the rope in the qkv projection's epilogue (matvec_direct.cuh, for
 * rb_matmul_fused) - so the fused rotation equals the kernel's by
 * construction: frequencies freq_scale base^(-2i/n_rot) in double (the host
 * fills a table with the same expression), the angle pos freq / factor and
 * its sincos in double, then times attn_factor. */
#ifndef RBEE_GPU_ROPE_MATH_CUH
#define RBEE_GPU_ROPE_MATH_CUH

#include "backends/gpu/gpu_internal.h"

#include <math.h>

namespace RB_GPU_NS {

/* frequency i of n_rot / 2 */
__host__ __device__ __forceinline__ double rope_freq(double base, double freq_scale, int n_rot, int64_t i) {
    return freq_scale * pow(base, -2.0 * (double)i / (double)n_rot);
}

/* cos and sin, times attn_factor, of position pos at frequency freq; ff: the
 * frequency's f32 factor or NULL */
__device__ __forceinline__ float2 rope_cs_of(int32_t pos, double freq, const char *ff, double attn_factor) {
    double theta = (double)pos * freq;
    if (ff) theta /= (double)*(const float *)ff;
    double sn, cs;
    sincos(theta, &sn, &cs);
    return make_float2((float)(cs * attn_factor), (float)(sn * attn_factor));
}

} // namespace RB_GPU_NS

#endif
