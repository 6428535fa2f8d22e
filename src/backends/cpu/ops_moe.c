/* CPU mixture-of-experts ops. rb_matmul_id groups the (slot, token) rows of
 * b by the expert ids name, then runs one ordinary matrix product per used
 * expert (rb_cpu_matmul on a view of that expert's weights and the gathered
 * rows) and scatters the results: each used expert's weights stream through
 * once per call, in whatever format they are stored (the matmul's own
 * activation quantization and kernels apply), and unused experts are never
 * touched. rb_swiglu_clamp is gpt-oss's gated activation. */
#include "backends/cpu/ops_common.h"

#include <math.h>
#include <stdlib.h>

static int32_t load_id(const rb_tensor *ids, int64_t j, int64_t t) {
    int32_t v;
    memcpy(&v, rb_cpu_data(ids) + j * (int64_t)ids->nb[0] + t * (int64_t)ids->nb[1], sizeof v);
    return v;
}

/* A contiguous f32 tensor [ne0, ne1] over host memory p (a stack buffer struct). */
static rb_tensor host_f32(rb_buffer *buf, rb_backend *be, float *p, int64_t ne0, int64_t ne1) {
    memset(buf, 0, sizeof *buf);
    buf->backend = be;
    buf->host_ptr = p;
    buf->size = sizeof(float) * (size_t)(ne0 * ne1);
    rb_tensor t;
    rb_tensor_init4(&t, RB_F32, ne0, ne1, 1, 1, buf, 0);
    return t;
}

rb_status rb_cpu_matmul_id(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                           const rb_tensor *ids) {
    rb_cpu_backend *cb = rb_cpu(be);
    const int64_t K = a->ne[0], N = a->ne[1], E = a->ne[2], k = ids->ne[0], T = ids->ne[1], S = b->ne[1];
    const int64_t R = k * T; /* (slot, token) rows */
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = load_id(ids, j, t);
            if (e < 0 || e >= E)
                return rb_backend_fail(be, RB_E_RANGE, "rb_matmul_id: expert id %d at [%lld, %lld] is outside 0..%lld",
                                       e, (long long)j, (long long)t, (long long)E - 1);
        }
    if (R == 0 || N == 0) return RB_OK;
    /* rows of each expert, in (t, j) order: counting sort by expert */
    int64_t *start = calloc((size_t)E + 1, sizeof *start), *order = malloc(sizeof(int64_t) * (size_t)R);
    float *xin = malloc(sizeof(float) * (size_t)(K * R)), *yout = malloc(sizeof(float) * (size_t)(N * R));
    rb_status st = RB_OK;
    if (!start || !order || !xin || !yout) {
        st = rb_backend_fail(be, RB_E_NOMEM, "rb_matmul_id: out of memory for %lld rows", (long long)R);
        goto done;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) start[load_id(ids, j, t) + 1]++;
    for (int64_t e = 0; e < E; e++) start[e + 1] += start[e];
    {
        int64_t *fill = malloc(sizeof(int64_t) * (size_t)E);
        if (!fill) {
            st = rb_backend_fail(be, RB_E_NOMEM, "rb_matmul_id: out of memory");
            goto done;
        }
        memcpy(fill, start, sizeof(int64_t) * (size_t)E);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++) order[fill[load_id(ids, j, t)]++] = t * k + j;
        free(fill);
    }
    /* gather the activation rows, grouped by expert, as f32 */
    for (int64_t r = 0; r < R; r++) {
        const int64_t t = order[r] / k, j = order[r] % k;
        rb_cpu_row_to_f32(cb, b->dtype, rb_cpu_row(b, S == 1 ? 0 : j, t, 0), b->nb[0], xin + r * K, K);
    }
    for (int64_t e = 0; e < E && st == RB_OK; e++) {
        const int64_t n = start[e + 1] - start[e];
        if (n == 0) continue; /* nobody chose it: its weights stay unread */
        rb_buffer bx, by;
        rb_tensor x = host_f32(&bx, be, xin + start[e] * K, K, n), y = host_f32(&by, be, yout + start[e] * N, N, n);
        rb_tensor ae = *a;
        ae.offs = a->offs + (size_t)e * a->nb[2];
        ae.ne[2] = 1;
        ae.nb[3] = ae.nb[2];
        st = rb_cpu_matmul(be, &y, &ae, &x);
    }
    if (st != RB_OK) goto done;
    for (int64_t r = 0; r < R; r++) {
        const int64_t t = order[r] / k, j = order[r] % k;
        rb_cpu_row_from_f32(cb, RB_F32, yout + r * N, rb_cpu_row(dst, j, t, 0), dst->nb[0], N);
    }
done:
    free(start);
    free(order);
    free(xin);
    free(yout);
    return st;
}

rb_status rb_cpu_swiglu_clamp(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                              float limit) {
    (void)be;
    for (int64_t i3 = 0; i3 < dst->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < dst->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < dst->ne[1]; i1++) {
                const char *g = rb_cpu_row(gate, i1, i2, i3), *u = rb_cpu_row(up, i1, i2, i3);
                char *d = rb_cpu_row(dst, i1, i2, i3);
                for (int64_t i0 = 0; i0 < dst->ne[0]; i0++) {
                    float gv, uv;
                    memcpy(&gv, g + i0 * (int64_t)gate->nb[0], sizeof gv);
                    memcpy(&uv, u + i0 * (int64_t)up->nb[0], sizeof uv);
                    gv = gv < limit ? gv : limit;
                    uv = uv < -limit ? -limit : (uv > limit ? limit : uv);
                    const float out = (uv + 1.0f) * (gv / (1.0f + expf(-alpha * gv)));
                    memcpy(d + i0 * (int64_t)dst->nb[0], &out, sizeof out);
                }
            }
    return RB_OK;
}
