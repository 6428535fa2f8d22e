/* rb_cpu_matmul: the CPU backend's matrix product (contract in ops.h). It
 * converts/quantizes the activations b once into scratch (to the format the
 * weight dtype's dot product consumes), then splits the weight rows of a over
 * the thread pool. Each thread streams its share of the weights; for several
 * activation rows it computes tiles of (weight rows x activation rows) so a
 * weight row is loaded once per tile instead of once per activation row.
 * In the llama.cpp numerics mode f32 x f32 products are summed in llama.cpp's
 * order instead (llamacpp_numerics.c). rb_cpu_linear is the same product
 * with rb_linear's epilogue applied as each output tile is stored (always
 * the default summation order). */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/llamacpp_numerics.h"
#include "backends/cpu/matmul_plan.h"

#include <string.h>

static rb_status check_args(rb_cpu_backend *cb, const rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    rb_backend *be = &cb->base;
    const struct rb_cpu_kernels *k = cb->kern;
    if (!rb_dtype_valid((int)a->dtype) || k->vec_dot[a->dtype] == NULL)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "matmul: weight dtype %s not supported", rb_dtype_name(a->dtype));
    if (b->dtype != RB_F32 && b->dtype != RB_F16 && b->dtype != RB_BF16)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "matmul: activation dtype %s not supported (f32/f16/bf16)",
                               rb_dtype_name(b->dtype));
    if (dst->dtype != RB_F32 && dst->dtype != RB_F16 && dst->dtype != RB_BF16)
        return rb_backend_fail(be, RB_E_UNSUPPORTED, "matmul: dst dtype %s not supported (f32/f16/bf16)",
                               rb_dtype_name(dst->dtype));
    if (a->ne[0] != b->ne[0])
        return rb_backend_fail(be, RB_E_INVALID, "matmul: K mismatch (a %lld, b %lld)", (long long)a->ne[0],
                               (long long)b->ne[0]);
    if (dst->ne[0] != a->ne[1] || dst->ne[1] != b->ne[1] || dst->ne[2] != b->ne[2] || dst->ne[3] != b->ne[3])
        return rb_backend_fail(be, RB_E_INVALID, "matmul: dst shape must be [N, M, B2, B3]");
    for (int d = 2; d < 4; d++) {
        if (a->ne[d] <= 0 || b->ne[d] % a->ne[d] != 0)
            return rb_backend_fail(be, RB_E_INVALID, "matmul: b dim %d (%lld) is not a multiple of a's (%lld)", d,
                                   (long long)b->ne[d], (long long)a->ne[d]);
    }
    const rb_dtype_traits *ta = rb_dtype_info((int)a->dtype);
    if (a->ne[0] % ta->block_size != 0)
        return rb_backend_fail(be, RB_E_INVALID, "matmul: K %lld is not a multiple of %s's block size %lld",
                               (long long)a->ne[0], ta->name, (long long)ta->block_size);
    rb_dtype vt = k->vec_dot_type[a->dtype];
    const rb_dtype_traits *tv = rb_dtype_info((int)vt);
    if (a->ne[0] % tv->block_size != 0)
        return rb_backend_fail(be, RB_E_INVALID, "matmul: K %lld is not a multiple of %s's block size %lld",
                               (long long)a->ne[0], tv->name, (long long)tv->block_size);
    if (ta->is_quant && a->nb[0] != ta->type_size)
        return rb_backend_fail(be, RB_E_INVALID, "matmul: quantized weights need contiguous rows");
    return RB_OK;
}

rb_status rb_cpu_matmul(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    rb_cpu_backend *cb = rb_cpu(be);
    rb_status st = check_args(cb, dst, a, b);
    if (st != RB_OK) return st;
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    if (cb->llamacpp_numerics && a->dtype == RB_F32 && b->dtype == RB_F32 && dst->dtype == RB_F32 &&
        a->nb[0] == sizeof(float) && b->nb[0] == sizeof(float))
        return rb_cpu_matmul_f32_llamacpp(cb, dst, a, b);

    rb_mm_plan p;
    st = rb_mm_plan_init(&p, cb, dst, a, b);
    if (st != RB_OK) return st;
    rb_threadpool_run(cb->pool, rb_mm_convert_task, &p);
    rb_threadpool_run(cb->pool, rb_mm_compute_task, &p);
    return RB_OK;
}

rb_status rb_cpu_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                        const rb_linear_epilogue *ep) {
    if (!ep->bias && !ep->has_act && !ep->gate && !ep->res) return rb_cpu_matmul(be, dst, a, b);
    rb_cpu_backend *cb = rb_cpu(be);
    rb_status st = check_args(cb, dst, a, b);
    if (st != RB_OK) return st;
    if (rb_tensor_nelements(dst) == 0) return RB_OK;
    rb_mm_plan p;
    st = rb_mm_plan_init(&p, cb, dst, a, b);
    if (st != RB_OK) return st;
    p.ep = ep;
    rb_threadpool_run(cb->pool, rb_mm_convert_task, &p);
    rb_threadpool_run(cb->pool, rb_mm_compute_task, &p);
    return RB_OK;
}
