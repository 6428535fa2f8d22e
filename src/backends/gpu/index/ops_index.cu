/* GPU gather/scatter of rows: get_rows (embedding lookup from a float or
 * q4_0/q8_0/q4_K/q6_K table) and set_rows (KV-cache style scatter with dtype
 * conversion). Indices are checked on the host first (one small copy), so an
 * out-of-range id fails with RB_E_RANGE before anything is written. While a
 * graph is being captured the host cannot read them: the kernels check each
 * id, never use a bad one (get_rows clamps it, set_rows skips the row) and
 * record the first into the backend's device flag, which the next
 * synchronize reports as RB_E_RANGE. */
#include "backends/gpu/gpu_quant.cuh"

namespace RB_GPU_NS {

/* dst [D, T, B]; ids [T, B]; table [D, V] */
__global__ void k_get_rows(gt d, gt tab, gt ids, bool quant, int64_t n, int *guard) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl: the ids come from the op before */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, d.ne, c);
        int32_t id = *(const int32_t *)(ids.p + c[1] * ids.nb[0] + c[2] * ids.nb[1]);
        if (id < 0 || id >= tab.ne[1]) { /* only in a graph: eager ids were checked on the host */
            if (c[0] == 0) ids_flag(guard, 0, id, tab.ne[1]);
            id = id < 0 ? 0 : (int32_t)(tab.ne[1] - 1);
        }
        const char *row = tab.p + (int64_t)id * tab.nb[1];
        const float v = quant ? dq_elem(tab.dt, row, c[0]) : ldf(tab.dt, row + c[0] * tab.nb[0]);
        stf(d.dt, d.p + c[0] * d.nb[0] + c[1] * d.nb[1] + c[2] * d.nb[2], v);
    }
}

/* src [D, n, A, B] -> dst [D, S, A, B] at rows ids[i] */
__global__ void k_set_rows(gt d, gt s, gt ids, int64_t n, int *guard) {
    rb_grid_dep_trigger();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[4];
        unravel(i, s.ne, c);
        const int32_t slot = *(const int32_t *)(ids.p + c[1] * ids.nb[0]);
        if (slot < 0 || slot >= d.ne[1]) { /* only in a graph: eager ids were checked on the host */
            if (c[0] == 0) ids_flag(guard, 1, slot, d.ne[1]);
            continue;
        }
        const float v = ldf(s.dt, s.p + c[0] * s.nb[0] + c[1] * s.nb[1] + c[2] * s.nb[2] + c[3] * s.nb[3]);
        stf(d.dt, d.p + c[0] * d.nb[0] + (int64_t)slot * d.nb[1] + c[2] * d.nb[2] + c[3] * d.nb[3], v);
    }
}

/* The same for rows of f32/f16/bf16 (rows4_ok source and destination): a
 * thread moves 4 elements of one source row, whose slot is read once; grid
 * (column blocks, row blocks). A decode step's k/v write took 3.8 us in the
 * per-element kernel (64-bit index division per element). */
__global__ void k_set_rows4(gt d, gt s, gt ids, int64_t nrows, int *guard) {
    rb_grid_dep_trigger();
    rb_grid_dep_wait(); /* launched with gpu_launch_pdl */
    const int q = (int)(s.ne[0] / 4);
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const int64_t c1 = r % s.ne[1], c2 = (r / s.ne[1]) % s.ne[2], c3 = r / (s.ne[1] * s.ne[2]);
        const int32_t slot = *(const int32_t *)(ids.p + c1 * ids.nb[0]);
        if (slot < 0 || slot >= d.ne[1]) { /* only in a graph: eager ids were checked on the host */
            if (blockIdx.x == 0 && threadIdx.x == 0) ids_flag(guard, 1, slot, d.ne[1]);
            continue;
        }
        const char *sr = s.p + c1 * s.nb[1] + c2 * s.nb[2] + c3 * s.nb[3];
        char *dr = d.p + (int64_t)slot * d.nb[1] + c2 * d.nb[2] + c3 * d.nb[3];
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < q; j += gridDim.x * blockDim.x) {
            float v[4];
            ld4(s.dt, sr + (int64_t)j * 4 * s.nb[0], v);
            st4(d.dt, dr + (int64_t)j * 4 * d.nb[0], v);
        }
    }
}

rb_status gpu_get_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids) {
    const bool quant = rb_dtype_info((int)table->dtype)->is_quant;
    if (quant ? !gpu_quant_ok(table->dtype)
              : !(table->dtype == RB_F32 || table->dtype == RB_F16 || table->dtype == RB_BF16))
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "rb_get_rows: table dtype %s is not supported on %s",
                               rb_dtype_name(table->dtype), be->name);
    const int64_t n = dst->ne[0] * dst->ne[1] * dst->ne[2];
    if (n == 0) return RB_OK;
    int *guard = gpu_ids_guard(be);
    if (!guard) {
        rb_status s = gpu_check_ids(be, ids, table->ne[1], "rb_get_rows");
        if (s != RB_OK) return s;
    }
    (void)gpu_launch_pdl(gb(be), true, k_get_rows, dim3(gpu_blocks(n, 256)), dim3(256), 0, gview(dst),
                         gview(table), gview(ids), quant, n, guard);
    return gpu_check_launch(be, "get_rows");
}

rb_status gpu_set_rows(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids) {
    const int64_t n = src->ne[0] * src->ne[1] * src->ne[2] * src->ne[3];
    if (n == 0) return RB_OK;
    int *guard = gpu_ids_guard(be);
    if (!guard) {
        rb_status s = gpu_check_ids(be, ids, dst->ne[1], "rb_set_rows");
        if (s != RB_OK) return s;
    }
    const gt d = gview(dst), sv = gview(src);
    if (rows4_ok(d) && rows4_ok(sv) && d.ne[0] == sv.ne[0] && d.ne[2] == sv.ne[2] && d.ne[3] == sv.ne[3]) {
        (void)gpu_launch_pdl(gb(be), true, k_set_rows4, rows_grid(sv, 256), dim3(256), 0, d, sv,
                             gview(ids), sv.ne[1] * sv.ne[2] * sv.ne[3], guard);
        return gpu_check_launch(be, "set_rows");
    }
    k_set_rows<<<gpu_blocks(n, 256), 256, 0, gb(be)->stream>>>(d, sv, gview(ids), n, guard);
    return gpu_check_launch(be, "set_rows");
}

} // namespace RB_GPU_NS
