/* GPU elementwise ops: fill, affine, unary, binary (broadcasting), where,
 * the gated linear unit act(gate) * up (one pass over the fused projection
 * instead of two launches), and cast (plain dtypes with any strides, and
 * dequantizing the block formats of gpu_quant.cuh). One thread per
 * destination element in a grid-stride loop; dtypes are switched at run time
 * per element rather than instantiated as templates, which keeps compile
 * time small: these ops are memory-bound. Casts and glu over rows of
 * contiguous f32/f16/bf16 (every prefill matrix product casts its
 * activations) take a 4-wide rows kernel instead: on a 512-token 7B prefill
 * the generic cast ran 25 us per call, 4.8 ms of 21.5. */
#include "backends/gpu/gpu_quant.cuh"

namespace RB_GPU_NS {

#define EW_THREADS 256

__global__ void k_fill(gt d, float v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        char *p = d.p + c[0] * d.nb[0] + c[1] * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3];
        if (d.dt == RB_I32) *(int32_t *)p = (int32_t)v;
        else stf(d.dt, p, v);
    }
}

/* op < 0: affine (x * scale + bias) */
__global__ void k_unary(gt d, gt s, int op, float scale, float bias, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const float x = ldf(s.dt, s.p + boffs(s, c));
        const float y = op < 0 ? x * scale + bias : apply_unary(op, x);
        stf(d.dt, d.p + boffs(d, c), y);
    }
}

__device__ __forceinline__ float apply_binary(int op, float a, float b) {
    switch (op) {
    case RB_BINARY_ADD: return a + b;
    case RB_BINARY_SUB: return a - b;
    case RB_BINARY_MUL: return a * b;
    case RB_BINARY_DIV: return a / b;
    case RB_BINARY_MAX: return fmaxf(a, b);
    case RB_BINARY_MIN: return fminf(a, b);
    default: return a;
    }
}

__global__ void k_binary(gt d, gt a, gt b, int op, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const float x = ldf(a.dt, a.p + boffs(a, c)), y = ldf(b.dt, b.p + boffs(b, c));
        stf(d.dt, d.p + boffs(d, c), apply_binary(op, x, y));
    }
}

/* dst = act(gate) * up, all f32 of one shape with any strides. The two
 * roundings match the unfused unary + binary pair. */
__global__ void k_glu(gt d, gt g, gt u, int act, int64_t n) {
    rb_grid_dep_trigger();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const float a = apply_unary(act, ldf(g.dt, g.p + boffs(g, c)));
        stf(d.dt, d.p + boffs(d, c), a * ldf(u.dt, u.p + boffs(u, c)));
    }
}

__global__ void k_where(gt d, gt cd, gt a, gt b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const char *cp = cd.p + boffs(cd, c);
        const bool t = cd.dt == RB_I32 ? *(const int32_t *)cp != 0 : ldf(cd.dt, cp) != 0.0f;
        const float v = t ? ldf(a.dt, a.p + boffs(a, c)) : ldf(b.dt, b.p + boffs(b, c));
        stf(d.dt, d.p + boffs(d, c), v);
    }
}

/* Same dtype: copies the element's bytes (exact for every plain type). */
__global__ void k_copy(gt d, gt s, int esz, int64_t n) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl (gpu_copy_view, gpu_cast) */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const char *sp = s.p + boffs(s, c);
        char *dp = d.p + boffs(d, c);
        switch (esz) {
        case 1: *dp = *sp; break;
        case 2: *(uint16_t *)dp = *(const uint16_t *)sp; break;
        case 4: *(uint32_t *)dp = *(const uint32_t *)sp; break;
        default: *(unsigned long long *)dp = *(const unsigned long long *)sp; break;
        }
    }
}

/* Converting cast between plain dtypes; integer sources go through double
 * so i32 -> f64 stays exact, float sources through float. */
__global__ void k_convert(gt d, gt s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const char *sp = s.p + boffs(s, c);
        char *dp = d.p + boffs(d, c);
        if (d.dt == RB_F64 || d.dt == RB_I64 || d.dt == RB_I32) {
            double v;
            switch (s.dt) {
            case RB_I32: v = *(const int32_t *)sp; break;
            case RB_I64: v = (double)*(const long long *)sp; break;
            case RB_F64: v = *(const double *)sp; break;
            default: v = ldf(s.dt, sp); break;
            }
            if (d.dt == RB_F64) *(double *)dp = v;
            else if (d.dt == RB_I64) *(long long *)dp = (long long)v;
            else *(int32_t *)dp = (int32_t)v;
        } else {
            stf(d.dt, dp, ldf(s.dt, sp));
        }
    }
}

/* ---- rows fast path (prefill: activations cast for the GEMMs, glu) ----
 * f32/f16/bf16 views whose elements are contiguous within rows, ne[0] % 4 ==
 * 0 and rows aligned to 4 elements (rows4_ok); rows (dims 1..3) at any
 * stride. A thread takes 4 elements with one vector load per operand; the
 * row's coordinates are computed once per row, not per element (the generic
 * kernels spend most of their instructions on 64-bit index division). The
 * conversions are ldf/stf's, so results are bit-identical to theirs
 * (ld4/st4/row_at/rows4_ok: gpu_common.cuh). */
/* grid (column blocks, row blocks), rows strided by gridDim.y */
__global__ void k_convert_rows(gt d, gt s, int64_t nrows) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl (gpu_copy_view, gpu_cast) */
    const int q = (int)(d.ne[0] / 4);
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const char *sr = row_at(s, d.ne, r);
        char *dr = row_at(d, d.ne, r);
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < q; j += gridDim.x * blockDim.x) {
            float v[4];
            ld4(s.dt, sr + (int64_t)j * 4 * s.nb[0], v);
            st4(d.dt, dr + (int64_t)j * 4 * d.nb[0], v);
        }
    }
}

/* Same-dtype copy over rows (rows4_pair, one dtype): 4 elements a thread
 * as raw 8- or 16-byte moves, the bits unchanged (the UNet's concatenation
 * of the hidden state and a skip into channel slices). */
__global__ void k_copy_rows(gt d, gt s, int64_t nrows) {
    const int q = (int)(d.ne[0] / 4);
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const char *sr = row_at(s, d.ne, r);
        char *dr = row_at(d, d.ne, r);
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < q; j += gridDim.x * blockDim.x) {
            if (d.dt == RB_F32) *(uint4 *)(dr + (int64_t)j * 16) = *(const uint4 *)(sr + (int64_t)j * 16);
            else *(uint2 *)(dr + (int64_t)j * 8) = *(const uint2 *)(sr + (int64_t)j * 8);
        }
    }
}

/* A transposing copy (the diffusion networks' image <-> token layouts):
 * src contiguous along dim 1, dst along dim 0, float dtypes. 32 x 32 tiles
 * of dims 0 and 1 through shared memory, so both the loads and the stores
 * run along contiguous memory; blockIdx.z walks dims 2 and 3. */
#define TR_TILE 32
__global__ void k_transpose(gt d, gt s) {
    __shared__ float t[TR_TILE][TR_TILE + 1];
    const int64_t i0b = (int64_t)blockIdx.x * TR_TILE, i1b = (int64_t)blockIdx.y * TR_TILE, n23 = d.ne[2] * d.ne[3];
    for (int64_t z = blockIdx.z; z < n23; z += gridDim.z) {
        const int64_t i2 = z % d.ne[2], i3 = z / d.ne[2];
        const char *sp = s.p + i2 * s.nb[2] + i3 * s.nb[3];
        char *dp = d.p + i2 * d.nb[2] + i3 * d.nb[3];
        for (int r = threadIdx.y; r < TR_TILE; r += blockDim.y) { /* along dim 1: contiguous in src */
            const int64_t i0 = i0b + r, i1 = i1b + threadIdx.x;
            if (i0 < d.ne[0] && i1 < d.ne[1]) t[r][threadIdx.x] = ldf(s.dt, sp + i0 * s.nb[0] + i1 * s.nb[1]);
        }
        __syncthreads();
        for (int r = threadIdx.y; r < TR_TILE; r += blockDim.y) { /* along dim 0: contiguous in dst */
            const int64_t i0 = i0b + threadIdx.x, i1 = i1b + r;
            if (i0 < d.ne[0] && i1 < d.ne[1]) stf(d.dt, dp + i0 * d.nb[0] + i1 * d.nb[1], t[threadIdx.x][r]);
        }
        __syncthreads();
    }
}

/* dst and src (same shape) are a k_transpose pair */
static bool transpose_ok(const gt &d, const gt &s) {
    const int64_t ed = d.dt == RB_F32 ? 4 : 2, es = s.dt == RB_F32 ? 4 : 2;
    const bool fl = (d.dt == RB_F32 || d.dt == RB_F16 || d.dt == RB_BF16) &&
                    (s.dt == RB_F32 || s.dt == RB_F16 || s.dt == RB_BF16);
    return fl && d.nb[0] == ed && s.nb[1] == es && s.nb[0] != es && d.ne[1] > 1 && d.ne[0] > 1 &&
           (d.ne[0] + TR_TILE - 1) / TR_TILE <= 0x7fffffffLL && (d.ne[1] + TR_TILE - 1) / TR_TILE <= 65535;
}

static void transpose_launch(gpu_backend *g, const gt &d, const gt &s) {
    const int64_t n23 = d.ne[2] * d.ne[3];
    const dim3 grid((unsigned)((d.ne[0] + TR_TILE - 1) / TR_TILE), (unsigned)((d.ne[1] + TR_TILE - 1) / TR_TILE),
                    (unsigned)(n23 < 1 ? 1 : n23 > 65535 ? 65535 : n23));
    k_transpose<<<grid, dim3(TR_TILE, 8), 0, g->stream>>>(d, s);
}

/* binary over rows of dst (rows4_ok): each operand either has dst's rows
 * (vec: 4-wide loads) or one element per row (ne[0] == 1, repeated), its
 * broadcast dims with byte stride 0 (bin_operand) so row_at finds its row */
__global__ void k_binary_rows(gt d, gt a, gt b, int op, int avec, int bvec, int64_t nrows) {
    const int q = (int)(d.ne[0] / 4);
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const char *ar = row_at(a, d.ne, r), *br = row_at(b, d.ne, r);
        char *dr = row_at(d, d.ne, r);
        const float as = avec ? 0.0f : ldf(a.dt, ar), bs = bvec ? 0.0f : ldf(b.dt, br);
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < q; j += gridDim.x * blockDim.x) {
            float x[4], y[4];
            if (avec) ld4(a.dt, ar + (int64_t)j * 4 * a.nb[0], x);
            else x[0] = x[1] = x[2] = x[3] = as;
            if (bvec) ld4(b.dt, br + (int64_t)j * 4 * b.nb[0], y);
            else y[0] = y[1] = y[2] = y[3] = bs;
#pragma unroll
            for (int t = 0; t < 4; t++) x[t] = apply_binary(op, x[t], y[t]);
            st4(d.dt, dr + (int64_t)j * 4 * d.nb[0], x);
        }
    }
}

__global__ void k_glu_rows(gt d, gt g, gt u, int act, int64_t nrows) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    const int q = (int)(d.ne[0] / 4);
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const char *gr = row_at(g, d.ne, r), *ur = row_at(u, d.ne, r);
        char *dr = row_at(d, d.ne, r);
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < q; j += gridDim.x * blockDim.x) {
            float a[4], b[4];
            ld4(g.dt, gr + (int64_t)j * 4 * g.nb[0], a);
            ld4(u.dt, ur + (int64_t)j * 4 * u.nb[0], b);
#pragma unroll
            for (int t = 0; t < 4; t++) a[t] = apply_unary(act, a[t]) * b[t];
            st4(d.dt, dr + (int64_t)j * 4 * d.nb[0], a);
        }
    }
}

/* Dequantizing cast: src rows are contiguous blocks. */
__global__ void k_dequant(gt d, gt s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        const char *row = s.p + c[1] * s.nb[1] + c[2] * s.nb[2] + c[3] * s.nb[3];
        stf(d.dt, d.p + boffs(d, c), dq_elem(s.dt, row, c[0]));
    }
}

/* Dequantizing copy into rows with contiguous f16/f32 elements: one thread
 * per 32-element unit (block scales decoded once per unit). */
__global__ void k_dequant_units(gt d, gt s, int64_t n_units, int vec) {
    const int64_t upr = s.ne[0] / 32;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_units;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t u = i % upr, r = i / upr;
        const int64_t c1 = r % s.ne[1], c2 = (r / s.ne[1]) % s.ne[2], c3 = r / (s.ne[1] * s.ne[2]);
        float w[32];
        dq_unit(s.dt, s.p + c1 * s.nb[1] + c2 * s.nb[2] + c3 * s.nb[3], u, w);
        char *o = d.p + c1 * d.nb[1] + c2 * d.nb[2] + c3 * d.nb[3] + u * 32 * d.nb[0];
        if (d.dt == RB_F16 && vec) { /* four 16-byte stores */
            uint4 *h = (uint4 *)o;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t p[4];
#pragma unroll
                for (int t = 0; t < 4; t++)
                    p[t] = (uint32_t)f32_to_f16_bits(w[8 * k + 2 * t]) |
                           ((uint32_t)f32_to_f16_bits(w[8 * k + 2 * t + 1]) << 16);
                h[k] = make_uint4(p[0], p[1], p[2], p[3]);
            }
        } else if (d.dt == RB_F16) {
            uint16_t *h = (uint16_t *)o;
#pragma unroll
            for (int k = 0; k < 32; k++) h[k] = f32_to_f16_bits(w[k]);
        } else {
            float *f = (float *)o;
#pragma unroll
            for (int k = 0; k < 32; k++) f[k] = w[k];
        }
    }
}

bool gpu_units_aligned(rb_dtype dt, const gt &v) {
    const int64_t a = dt == RB_Q4_K || dt == RB_Q5_K ? 4 : 2; /* dq_unit reads their quants as words */
    return ((int64_t)(uintptr_t)v.p % a) == 0 && v.nb[1] % a == 0 && v.nb[2] % a == 0 && v.nb[3] % a == 0;
}

static int64_t nel(const rb_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

bool gpu_plain_ok(rb_dtype t) {
    return t == RB_F32 || t == RB_F16 || t == RB_BF16 || t == RB_I32 || t == RB_I8 || t == RB_I16 || t == RB_I64 ||
           t == RB_F64;
}
bool gpu_quant_ok(rb_dtype t) {
    return t == RB_Q4_0 || t == RB_Q8_0 || t == RB_Q4_K || t == RB_Q5_K || t == RB_Q6_K || t == RB_MXFP4 ||
           gpu_iq_dtype(t);
}

rb_status gpu_fill(rb_backend *be, rb_tensor *dst, float value) {
    const int64_t n = nel(dst);
    if (n == 0) return RB_OK;
    k_fill<<<gpu_blocks(n, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(gview(dst), value, n);
    return gpu_check_launch(be, "fill");
}

rb_status gpu_affine(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias) {
    const int64_t n = nel(dst);
    if (n == 0) return RB_OK;
    k_unary<<<gpu_blocks(n, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), -1, scale, bias, n);
    return gpu_check_launch(be, "affine");
}

rb_status gpu_unary(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src) {
    const int64_t n = nel(dst);
    if (n == 0) return RB_OK;
    k_unary<<<gpu_blocks(n, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(src), (int)op, 1.0f, 0.0f,
                                                                          n);
    return gpu_check_launch(be, "unary");
}

/* An operand of k_binary_rows: its broadcast dims 1..3 get byte stride 0;
 * *vec = rows of dst's width read 4 at a time (aligned, contiguous f32 /
 * f16 / bf16), else one element per row (ne[0] == 1). false: neither. */
static bool bin_operand(const gt &d, gt *x, int *vec) {
    if (x->dt != RB_F32 && x->dt != RB_F16 && x->dt != RB_BF16) return false;
    for (int k = 1; k < 4; k++)
        if (x->ne[k] == 1 && d.ne[k] != 1) x->nb[k] = 0;
    if (x->ne[0] == 1 && d.ne[0] != 1) {
        *vec = 0;
        return true;
    }
    const int64_t es = x->dt == RB_F32 ? 4 : 2, al = 4 * es;
    *vec = 1;
    return x->ne[0] == d.ne[0] && x->nb[0] == es && (uintptr_t)x->p % al == 0 && x->nb[1] % al == 0 &&
           x->nb[2] % al == 0 && x->nb[3] % al == 0;
}

rb_status gpu_binary(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    const int64_t n = nel(dst);
    if (n == 0) return RB_OK;
    const gt d = gview(dst);
    gt av = gview(a), bv = gview(b);
    int avec = 0, bvec = 0;
    if (rows4_ok(d) && bin_operand(d, &av, &avec) && bin_operand(d, &bv, &bvec)) {
        k_binary_rows<<<rows_grid(d, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(d, av, bv, (int)op, avec, bvec,
                                                                                   d.ne[1] * d.ne[2] * d.ne[3]);
        return gpu_check_launch(be, "binary");
    }
    k_binary<<<gpu_blocks(n, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(a), gview(b), (int)op, n);
    return gpu_check_launch(be, "binary");
}

rb_status gpu_glu(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act) {
    const int64_t n = nel(dst);
    if (n == 0) return RB_OK;
    const gt d = gview(dst), g = gview(gate), u = gview(up);
    if (rows4_pair(d, g) && rows4_pair(d, u)) {
        (void)gpu_launch_pdl(gb(be), true, k_glu_rows, rows_grid(d, EW_THREADS), dim3(EW_THREADS), 0, d, g,
                             u, (int)act, d.ne[1] * d.ne[2] * d.ne[3]);
        return gpu_check_launch(be, "glu");
    }
    k_glu<<<gpu_blocks(n, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(gate), gview(up), (int)act,
                                                                       n);
    return gpu_check_launch(be, "glu");
}

rb_status gpu_where(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a, const rb_tensor *b) {
    const int64_t n = nel(dst);
    if (n == 0) return RB_OK;
    k_where<<<gpu_blocks(n, EW_THREADS), EW_THREADS, 0, gb(be)->stream>>>(gview(dst), gview(cond), gview(a), gview(b),
                                                                         n);
    return gpu_check_launch(be, "where");
}

gt gpu_contig_view(void *p, rb_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    gt v;
    v.p = (char *)p;
    v.dt = (int)dt;
    v.host = 0;
    v.ne[0] = ne0;
    v.ne[1] = ne1;
    v.ne[2] = ne2;
    v.ne[3] = ne3;
    const rb_dtype_traits *tr = rb_dtype_info((int)dt);
    v.nb[0] = (int64_t)tr->type_size;
    v.nb[1] = v.nb[0] * (ne0 / tr->block_size);
    v.nb[2] = v.nb[1] * ne1;
    v.nb[3] = v.nb[2] * ne2;
    return v;
}

rb_status gpu_copy_view(rb_backend *be, const gt &dst, const gt &src) {
    const int64_t n = dst.ne[0] * dst.ne[1] * dst.ne[2] * dst.ne[3];
    if (n == 0) return RB_OK;
    cudaStream_t st = gb(be)->stream;
    const unsigned nb = gpu_blocks(n, EW_THREADS);
    const bool rows = (dst.dt == RB_F16 && dst.nb[0] == 2) || (dst.dt == RB_F32 && dst.nb[0] == 4);
    if (gpu_quant_ok((rb_dtype)src.dt) && rows && gpu_units_aligned((rb_dtype)src.dt, src)) {
        const int64_t nu = n / 32;
        const int vec = ((uintptr_t)dst.p % 16) == 0 && dst.nb[1] % 16 == 0 && dst.nb[2] % 16 == 0 &&
                        dst.nb[3] % 16 == 0;
        k_dequant_units<<<gpu_blocks(nu, EW_THREADS), EW_THREADS, 0, st>>>(dst, src, nu, vec);
    } else if (gpu_quant_ok((rb_dtype)src.dt))
        k_dequant<<<nb, EW_THREADS, 0, st>>>(dst, src, n);
    else if (rows4_pair(dst, src))
        (void)gpu_launch_pdl(gb(be), true, k_convert_rows, rows_grid(dst, EW_THREADS), dim3(EW_THREADS), 0,
                             dst, src, dst.ne[1] * dst.ne[2] * dst.ne[3]);
    else if (transpose_ok(dst, src))
        transpose_launch(gb(be), dst, src);
    else if (src.dt == dst.dt)
        (void)gpu_launch_pdl(gb(be), true, k_copy, dim3(nb), dim3(EW_THREADS), 0, dst, src,
                             (int)rb_dtype_info(src.dt)->type_size, n);
    else
        k_convert<<<nb, EW_THREADS, 0, st>>>(dst, src, n);
    return gpu_check_launch(be, "convert");
}

rb_status gpu_cast(rb_backend *be, rb_tensor *dst, const rb_tensor *src) {
    const int64_t n = nel(dst);
    if (rb_dtype_info((int)dst->dtype)->is_quant)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_cast: quantizing to %s is not implemented on %s",
                               rb_dtype_name(dst->dtype), be->name);
    if (!gpu_plain_ok(dst->dtype) || (!gpu_plain_ok(src->dtype) && !gpu_quant_ok(src->dtype)))
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_cast: %s -> %s is not implemented on %s",
                               rb_dtype_name(src->dtype), rb_dtype_name(dst->dtype), be->name);
    if (n == 0) return RB_OK;
    cudaStream_t st = gb(be)->stream;
    const unsigned nb = gpu_blocks(n, EW_THREADS);
    if (gpu_quant_ok(src->dtype)) {
        k_dequant<<<nb, EW_THREADS, 0, st>>>(gview(dst), gview(src), n);
    } else if (transpose_ok(gview(dst), gview(src))) {
        transpose_launch(gb(be), gview(dst), gview(src));
    } else if (src->dtype == dst->dtype) {
        const int esz = (int)rb_dtype_info((int)src->dtype)->type_size;
        if (rb_tensor_is_contiguous(src) && rb_tensor_is_contiguous(dst)) {
            cudaError_t e = cudaMemcpyAsync(gview(dst).p, gview(src).p, (size_t)n * (size_t)esz,
                                            cudaMemcpyDeviceToDevice, st);
            return e == cudaSuccess ? RB_OK : gpu_fail(be, e, "cast copy");
        }
        if (rows4_pair(gview(dst), gview(src))) {
            k_copy_rows<<<rows_grid(gview(dst), EW_THREADS), EW_THREADS, 0, st>>>(gview(dst), gview(src),
                                                                                 dst->ne[1] * dst->ne[2] * dst->ne[3]);
            return gpu_check_launch(be, "cast copy");
        }
        (void)gpu_launch_pdl(gb(be), true, k_copy, dim3(nb), dim3(EW_THREADS), 0, gview(dst), gview(src),
                             esz, n);
    } else if (rows4_pair(gview(dst), gview(src))) {
        (void)gpu_launch_pdl(gb(be), true, k_convert_rows, rows_grid(gview(dst), EW_THREADS),
                             dim3(EW_THREADS), 0, gview(dst), gview(src), dst->ne[1] * dst->ne[2] * dst->ne[3]);
    } else {
        k_convert<<<nb, EW_THREADS, 0, st>>>(gview(dst), gview(src), n);
    }
    return gpu_check_launch(be, "cast");
}

} // namespace RB_GPU_NS
