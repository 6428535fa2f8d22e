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

/* ---- 4-wide rows of f32/f16/bf16 (ops_elementwise.cu, ops_index.cu) ----
 * Views whose elements are contiguous within rows, ne[0] % 4 == 0 and rows
 * aligned to 4 elements (rows4_ok): a thread moves 4 elements with one vector
 * load or store; conversions as ldf/stf. */
__device__ __forceinline__ void ld4(int dt, const char *p, float v[4]) {
    if (dt == RB_F32) {
        const float4 f = *(const float4 *)p;
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
        const uint2 u = *(const uint2 *)p;
        const uint16_t h[4] = {(uint16_t)(u.x & 0xffffu), (uint16_t)(u.x >> 16), (uint16_t)(u.y & 0xffffu),
                               (uint16_t)(u.y >> 16)};
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = dt == RB_F16 ? f16_bits_to_f32(h[k]) : bf16_to_f32(h[k]);
    }
}

__device__ __forceinline__ void st4(int dt, char *p, const float v[4]) {
    if (dt == RB_F32) {
        *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        uint16_t h[4];
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = dt == RB_F16 ? f32_to_f16_bits(v[k]) : f32_to_bf16(v[k]);
        *(uint2 *)p = make_uint2((uint32_t)h[0] | ((uint32_t)h[1] << 16), (uint32_t)h[2] | ((uint32_t)h[3] << 16));
    }
}

/* start of row r (over dims 1..3 of ne) in view v */
__device__ __forceinline__ char *row_at(const gt &v, const int64_t ne[4], int64_t r) {
    const int64_t c1 = r % ne[1], c2 = (r / ne[1]) % ne[2], c3 = r / (ne[1] * ne[2]);
    return v.p + c1 * v.nb[1] + c2 * v.nb[2] + c3 * v.nb[3];
}

/* the rows fast path applies to v (see k_convert_rows) */
static inline bool rows4_ok(const gt &v) {
    const int64_t es = v.dt == RB_F32 ? 4 : (v.dt == RB_F16 || v.dt == RB_BF16) ? 2 : 0, al = 4 * es;
    return es && v.nb[0] == es && v.ne[0] % 4 == 0 && v.ne[0] / 4 <= 0x7fffffffLL && (uintptr_t)v.p % al == 0 &&
           v.nb[1] % al == 0 && v.nb[2] % al == 0 && v.nb[3] % al == 0;
}

/* grid of the rows kernels: column blocks x row blocks */
static inline dim3 rows_grid(const gt &d, int threads) {
    const int64_t q = d.ne[0] / 4, nrows = d.ne[1] * d.ne[2] * d.ne[3];
    const int64_t bx = (q + threads - 1) / threads;
    return dim3((unsigned)(bx < 1 ? 1 : bx > 1024 ? 1024 : bx),
                (unsigned)(nrows < 1 ? 1 : nrows > 65535 ? 65535 : nrows));
}

/* both views walk the same rows (the rows kernels index rows by d's extents) */
static inline bool rows4_pair(const gt &d, const gt &s) {
    return rows4_ok(d) && rows4_ok(s) && d.ne[0] == s.ne[0] && d.ne[1] == s.ne[1] && d.ne[2] == s.ne[2] &&
           d.ne[3] == s.ne[3];
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

/* First out-of-range id of a replay: {1, op, id, limit} (op 0 get, 1 set,
 * 2 matmul_id; gpu_ids_guard): get_rows, set_rows, the matrix-vector store
 * and the expert routing. */
__device__ __forceinline__ void ids_flag(int *guard, int op, int32_t id, int64_t limit) {
    if (!guard) return;
    if (atomicCAS(guard, 0, 1) == 0) {
        guard[1] = op;
        guard[2] = id;
        guard[3] = limit > 0x7fffffff ? 0x7fffffff : (int)limit;
    }
}

/* Unary functions of the elementwise kernels, and the gate activations the
 * matrix-vector kernels apply to a gated product (rb_matmul_fused glu_out). */
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

__device__ __forceinline__ float apply_unary(int op, float x) {
    switch (op) {
    case RB_UNARY_NEG: return -x;
    case RB_UNARY_ABS: return fabsf(x);
    case RB_UNARY_SQR: return x * x;
    case RB_UNARY_SQRT: return sqrtf(x);
    case RB_UNARY_RSQRT: return 1.0f / sqrtf(x);
    case RB_UNARY_EXP: return expf(x);
    case RB_UNARY_LOG: return logf(x);
    case RB_UNARY_SIN: return sinf(x);
    case RB_UNARY_COS: return cosf(x);
    case RB_UNARY_TANH: return tanhf(x);
    case RB_UNARY_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case RB_UNARY_RELU: return x > 0.0f ? x : 0.0f;
    case RB_UNARY_SILU: return x / (1.0f + expf(-x));
    case RB_UNARY_GELU: return gelu_erf(x);
    case RB_UNARY_GELU_TANH: {
        const float k = 0.7978845608028654f; /* sqrt(2/pi) */
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case RB_UNARY_RECIP: return 1.0f / x;
    default: return x;
    }
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
