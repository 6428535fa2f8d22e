/* Device helpers shared by the kernels: element load/store for every plain
 * dtype (math in f32), bf16 bit conversions (same rounding as the CPU's
 * rb_f32_to_bf16), strided offsets of a linear element index, and warp/block
 * reductions written against RB_WARP so they are right for 32- and 64-wide
 * warps. */
#ifndef RBEE_GPU_COMMON_CUH
#define RBEE_GPU_COMMON_CUH

#include "backends/gpu/gpu_internal.h"
#include "backends/gpu/gpu_pdl.h"

#include <math.h>

namespace RB_GPU_NS {

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }

/* Loads one element of a float or integer dtype as float. */
__device__ __forceinline__ float ldf(int dt, const char *p) {
    switch (dt) {
    case RB_F32: return *(const float *)p;
    case RB_F16: return f16_bits_to_f32(*(const uint16_t *)p);
    case RB_BF16: return bf16_to_f32(*(const uint16_t *)p);
    case RB_I32: return (float)*(const int32_t *)p;
    case RB_I8: return (float)*(const int8_t *)p;
    case RB_I16: return (float)*(const int16_t *)p;
    case RB_I64: return (float)*(const long long *)p;
    case RB_F64: return (float)*(const double *)p;
    default: return 0.0f;
    }
}

__device__ __forceinline__ void stf(int dt, char *p, float v) {
    switch (dt) {
    case RB_F32: *(float *)p = v; break;
    case RB_F16: *(uint16_t *)p = f32_to_f16_bits(v); break;
    case RB_BF16: *(uint16_t *)p = f32_to_bf16(v); break;
    case RB_I32: *(int32_t *)p = (int32_t)v; break;
    case RB_I8: *(int8_t *)p = (int8_t)v; break;
    case RB_I16: *(int16_t *)p = (int16_t)v; break;
    case RB_I64: *(long long *)p = (long long)v; break;
    case RB_F64: *(double *)p = (double)v; break;
    default: break;
    }
}

/* Splits a linear index over ne (ggml order) into coordinates. */
__device__ __forceinline__ void unravel(int64_t i, const int64_t ne[4], int64_t c[4]) {
    c[0] = i % ne[0];
    i /= ne[0];
    c[1] = i % ne[1];
    i /= ne[1];
    c[2] = i % ne[2];
    c[3] = i / ne[2];
}

/* Byte offset of coordinates c in view v; dims of extent 1 broadcast. */
__device__ __forceinline__ int64_t boffs(const gt &v, const int64_t c[4]) {
    int64_t o = 0;
#pragma unroll
    for (int d = 0; d < 4; d++) o += (v.ne[d] == 1 ? 0 : c[d]) * v.nb[d];
    return o;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int m = RB_WARP / 2; m > 0; m >>= 1) v += RB_SHFL_XOR(v, m);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int m = RB_WARP / 2; m > 0; m >>= 1) v = fmaxf(v, RB_SHFL_XOR(v, m));
    return v;
}

/* Block-wide sum/max for blockDim.x a multiple of RB_WARP (<= 1024); every
 * thread gets the result. sh needs 1024/32 floats. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x % RB_WARP, w = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous reduction */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *sh) {
    const int lane = threadIdx.x % RB_WARP, w = threadIdx.x / RB_WARP, nw = blockDim.x / RB_WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

} // namespace RB_GPU_NS

#endif
