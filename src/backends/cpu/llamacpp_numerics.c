/* The CPU backend's llama.cpp numerics mode (see llamacpp_numerics.h).
 * llama.cpp computes with its default f16 KV cache through ggml's CPU
 * flash-attention kernel, whose arithmetic differs from exact attention by
 * ~1e-3 relative, far more than f32 rounding:
 *   - the query row is rounded to f16, and each score is the f16 x f16 dot
 *     product summed in ggml's x86 AVX-512 order (four 16-lane partial sums
 *     over 64-element steps, fused multiply-adds, then a fixed tree;
 *     elements past the last full step are added in double), times scale;
 *   - keys are visited one at a time with an online softmax, and the value
 *     accumulator is an f16 vector: rescaling on a new maximum and every
 *     acc + v * p (one fused multiply-add) is rounded back to f16;
 *   - the running sum is S = S * ms + p (fused), and the result is
 *     acc * (1 / S).
 * Rope, rms_norm and f32 matmuls differ only by f32 roundings, but those
 * decide f16 roundings of q, k and v, so they are reproduced too (angles
 * iterated in float, fused rotation; float mean and scale; tinyBLAS's and
 * ggml_vec_dot_f32's summation orders). Everything is portable C with
 * explicit fmaf, so the results do not depend on our ISA. Checked against the
 * ops of llama.cpp's own run of the fixture model: bit-identical. */
#include "backends/cpu/llamacpp_numerics.h"

#include <math.h>

#define GG_LANES 16 /* f32 lanes of one AVX-512 register */
#define GG_ARR 4    /* partial-sum registers; one step covers GG_ARR * GG_LANES elements */

typedef struct f16acc_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *q, *k, *v;
    const rb_attn_params *p;
    char *scratch;
    size_t stride;
} f16acc_ctx;

static inline float round_f16(float x) { return rb_f16_to_f32(rb_f32_to_f16(x)); }

/* Horizontal sum of 16 lanes in the order of _mm512_reduce_add_ps (GCC):
 * halves, quarters, then (0 + 2) + (1 + 3). */
static float reduce16(const float *a) {
    float t8[8], t4[4];
    for (int l = 0; l < 8; l++) t8[l] = a[l + 8] + a[l];
    for (int l = 0; l < 4; l++) t4[l] = t8[l + 4] + t8[l];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

/* ggml's SIMD dot product core (ggml_vec_dot_f32 / _f16 on AVX-512): four
 * 16-lane fused sums over the first np elements (np a multiple of 64),
 * combined as (0 + 2) + (1 + 3), then reduce16. */
static float dot_4x16(const float *x, const float *y, int64_t np) {
    float acc[GG_ARR][GG_LANES] = {{0}};
    for (int64_t i = 0; i < np; i += GG_ARR * GG_LANES)
        for (int j = 0; j < GG_ARR; j++)
            for (int l = 0; l < GG_LANES; l++) {
                const int64_t e = i + j * GG_LANES + l;
                acc[j][l] = fmaf(x[e], y[e], acc[j][l]);
            }
    for (int l = 0; l < GG_LANES; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < GG_LANES; l++) acc[0][l] += acc[1][l];
    return reduce16(acc[0]);
}

/* ggml_vec_dot_f16 for f16-representable rows: the tail past the last full
 * 64-element step is added in double. */
static float dot_f16_ggml(const float *x, const float *y, int64_t n) {
    const int64_t np = n - n % (GG_ARR * GG_LANES);
    double sum = (double)dot_4x16(x, y, np);
    for (int64_t e = np; e < n; e++) sum += (double)(x[e] * y[e]);
    return (float)sum;
}

/* ggml_vec_dot_f32: the tail is accumulated in float (fused). */
static float dot_f32_ggml(const float *x, const float *y, int64_t n) {
    const int64_t np = n - n % (GG_ARR * GG_LANES);
    float sum = dot_4x16(x, y, np);
    for (int64_t e = np; e < n; e++) sum = fmaf(x[e], y[e], sum);
    return sum;
}

/* llamafile's tinyBLAS f32 kernel (AVX-512): one 16-lane fused sum over the
 * whole row (n a multiple of 16), then reduce16. */
static float dot_tinyblas(const float *x, const float *y, int64_t n) {
    float acc[GG_LANES] = {0};
    for (int64_t i = 0; i < n; i += GG_LANES)
        for (int l = 0; l < GG_LANES; l++) acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
    return reduce16(acc);
}

/* One query row: query iq of head h in batch b. w holds D + D + 2 Dv floats. */
static void f16acc_row(const f16acc_ctx *c, float *w, int64_t iq, int64_t h, int64_t b) {
    const rb_tensor *q = c->q, *k = c->k, *v = c->v;
    const rb_attn_params *p = c->p;
    const rb_cpu_backend *cb = c->cb;
    const int64_t D = q->ne[0], Tk = k->ne[1], Dv = v->ne[0];
    const int64_t g = h / (q->ne[2] / k->ne[2]);
    float *qh = w, *kf = w + D, *vf = kf + D, *acc = vf + Dv;

    rb_cpu_row_to_f32(cb, q->dtype, rb_cpu_row(q, iq, h, b), q->nb[0], qh, D);
    for (int64_t d = 0; d < D; d++) qh[d] = round_f16(qh[d]);
    memset(acc, 0, (size_t)Dv * sizeof(float));

    float scale = p->scale;
    if (p->softcap > 0.0f) scale /= p->softcap;
    const int64_t pos = rb_cpu_att_pos(p, iq, b), kb = rb_cpu_att_kv_slice(p, k, b);
    int64_t kend = kb < 0 ? 0 : Tk, kbeg = 0;
    if (p->causal && pos + 1 < kend) kend = pos + 1 > 0 ? pos + 1 : 0;
    if (p->window > 0 && pos - p->window + 1 > kbeg) kbeg = pos - p->window + 1;

    float S = 0.0f, M = -INFINITY;
    for (int64_t j = kbeg; j < kend; j++) {
        float mv = 0.0f;
        if (p->mask) {
            const rb_tensor *mk = p->mask;
            mv = rb_cpu_load_f(mk->dtype, rb_cpu_data(mk) + j * mk->nb[0] + iq * mk->nb[1]);
            if (mv == -INFINITY) continue;
        }
        rb_cpu_row_to_f32(cb, k->dtype, rb_cpu_row(k, j, g, kb), k->nb[0], kf, D);
        float s = dot_f16_ggml(kf, qh, D) * scale;
        if (p->softcap > 0.0f) s = p->softcap * tanhf(s);
        s += mv;

        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float Mold = M;
            M = s;
            ms = expf(Mold - M);
            for (int64_t d = 0; d < Dv; d++) acc[d] = round_f16(acc[d] * ms);
        } else {
            vs = expf(s - M);
        }
        rb_cpu_row_to_f32(cb, v->dtype, rb_cpu_row(v, j, g, kb), v->nb[0], vf, Dv);
        for (int64_t d = 0; d < Dv; d++) acc[d] = round_f16(fmaf(vf[d], vs, acc[d]));
        S = fmaf(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t d = 0; d < Dv; d++) acc[d] *= inv;
    rb_cpu_row_from_f32(cb, c->dst->dtype, acc, rb_cpu_row(c->dst, h, iq, b), c->dst->nb[0], Dv);
}

static void f16acc_task(void *arg, int ith, int nth) {
    const f16acc_ctx *c = arg;
    float *w = (float *)(void *)(c->scratch + (size_t)ith * c->stride);
    const int64_t Tq = c->q->ne[1], Hq = c->q->ne[2], rows = Tq * Hq * c->q->ne[3];
    int64_t lo, hi;
    rb_cpu_split(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) f16acc_row(c, w, r % Tq, (r / Tq) % Hq, r / (Tq * Hq));
}

rb_status rb_cpu_attention_llamacpp(rb_cpu_backend *cb, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                                    const rb_tensor *v, const rb_attn_params *p) {
    const int64_t D = q->ne[0], Dv = v->ne[0], Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1];
    f16acc_ctx c = {.cb = cb, .dst = dst, .q = q, .k = k, .v = v, .p = p};
    int nth = rb_cpu_threads_for(cb, B * Hq * Tq * (Tk + 1) * (D + Dv));
    c.scratch = rb_cpu_scratch_threads(cb, nth, (size_t)(2 * D + 2 * Dv) * sizeof(float), &c.stride);
    if (!c.scratch) return RB_E_NOMEM;
    rb_cpu_parallel(cb, nth, f16acc_task, &c);
    return RB_OK;
}

void rb_cpu_rope_angles_llamacpp(const rb_rope_params *p, int32_t pos, float *cs, float *sn, int half) {
    const float step = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        float t = theta;
        if (p->freq_factors)
            t /= rb_cpu_load_f(RB_F32, rb_cpu_data(p->freq_factors) + (size_t)i * p->freq_factors->nb[0]);
        t *= p->freq_scale;
        cs[i] = cosf(t) * p->attn_factor;
        sn[i] = sinf(t) * p->attn_factor;
        theta *= step;
    }
}

float rb_cpu_rms_scale_llamacpp(const float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

typedef struct mm_ctx {
    rb_tensor *dst;
    const rb_tensor *a, *b;
    bool tinyblas;
} mm_ctx;

static void mm_task(void *arg, int ith, int nth) {
    const mm_ctx *c = arg;
    const rb_tensor *a = c->a, *b = c->b;
    const int64_t K = a->ne[0], N = a->ne[1], M = b->ne[1], nmat = b->ne[2] * b->ne[3];
    int64_t lo, hi;
    rb_cpu_split(N * nmat, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const int64_t n = r % N, i2 = (r / N) % b->ne[2], i3 = r / (N * b->ne[2]);
        const float *w = (const float *)(const void *)rb_cpu_row(a, n, i2 / (b->ne[2] / a->ne[2]),
                                                                 i3 / (b->ne[3] / a->ne[3]));
        for (int64_t m = 0; m < M; m++) {
            const float *x = (const float *)(const void *)rb_cpu_row(b, m, i2, i3);
            const float s = c->tinyblas ? dot_tinyblas(w, x, K) : dot_f32_ggml(w, x, K);
            memcpy(rb_cpu_row(c->dst, m, i2, i3) + n * c->dst->nb[0], &s, sizeof s);
        }
    }
}

rb_status rb_cpu_matmul_f32_llamacpp(rb_cpu_backend *cb, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b) {
    const int64_t K = a->ne[0], N = a->ne[1], M = b->ne[1];
    /* llama.cpp takes tinyBLAS for batches (M >= 2) when K and N fit its tiles */
    mm_ctx c = {.dst = dst, .a = a, .b = b, .tinyblas = M >= 2 && K % GG_LANES == 0 && N % 4 == 0};
    rb_cpu_parallel(cb, rb_cpu_threads_for(cb, N * M * K * b->ne[2] * b->ne[3]), mm_task, &c);
    return RB_OK;
}
