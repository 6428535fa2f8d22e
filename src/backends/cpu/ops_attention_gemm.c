/* CPU attention for long unmasked, non-causal sequences (image tokens and
 * cross-attention of the diffusion networks) as two tiled products: per work
 * item (batch, query head, block of AG_QB queries) the scores against every
 * key are one GEMM with the f32 tile kernel rb_matmul uses (key rows x query
 * rows, both D-contiguous), each score row gets an exact softmax (its max,
 * then exp and sum), and the output is a second GEMM of the exponentials
 * with the values transposed to Tk-contiguous rows, divided by the row's sum
 * at the end. Before the items run, k is copied with its rows zero-padded to
 * a multiple of 16 (head sizes such as 40 would otherwise leave a scalar
 * tail in every dot product) and v transposed, once per (batch, kv head).
 * The softmax loops get an AVX2 build chosen at run time (the exponential is
 * a vectorizable polynomial). Memory: AG_QB x Tk scores per thread plus the
 * padded k and transposed v: linear in Tk, no [Tq, Tk] matrix. Only f32 q/k/v with contiguous rows and
 * none of mask, causality, window, soft-cap or per-query positions come
 * here (rb_cpu_attention routes them); the flash-style loops of
 * ops_attention.c do everything else. */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/ops_common.h"

#include <math.h>

#define AG_QB 32 /* queries per work item */
#define AG_T 8   /* tile edge of the kernel calls */

typedef struct ag_ctx {
    rb_cpu_backend *cb;
    rb_tensor *dst;
    const rb_tensor *q, *k, *v;
    float scale;
    int64_t r, nqb, ldS, Dp;
    float *kp; /* [B][Hkv][Tk][Dp] */
    float *vt; /* [B][Hkv][Dv][Tk] */
    char *scratch;
    size_t stride;
} ag_ctx;

bool rb_cpu_attention_gemm_ok(const rb_cpu_backend *cb, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                              const rb_attn_params *p) {
    return q->dtype == RB_F32 && k->dtype == RB_F32 && v->dtype == RB_F32 && q->nb[0] == 4 && k->nb[0] == 4 &&
           !p->mask && !p->causal && p->window == 0 && p->softcap == 0.0f && !p->q_pos && !p->kv_index && k->ne[1] >= 32 &&
           q->ne[1] >= 8 && cb->kern->vec_dot[RB_F32] != NULL && cb->kern->vec_dot_type[RB_F32] == RB_F32;
}

/* max(a, b) as a bit select: a conditional expression on floats is not
 * vectorized by gcc under its default -ftrapping-math, a select is. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline float ag_max(float a, float b) {
    union { float f; int32_t i; } ua = {a}, ub = {b};
    const int32_t m = -(int32_t)(b > a);
    ua.i = (ua.i & ~m) | (ub.i & m);
    return ua.f;
}

/* exp(x) for the softmax's x <= 0, vectorizable (Cephes' expf: 2^k p(r),
 * within 2 ulp). The exponent comes from x clamped to [-87, 88] (NaN reads
 * as -87), so its conversion to int is always defined; a NaN x still gives
 * NaN through the (x - x) term. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline float ag_exp(float x) {
    const float xc = -ag_max(-88.0f, -ag_max(-87.0f, x));
    const float kf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    const float r = (xc - kf * 0.693359375f - kf * -2.12194440e-4f) + (x - x);
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    union { int32_t i; float f; } e;
    e.i = ((int32_t)kf + 127) << 23;
    return y * e.f;
}

/* s[j] = exp(scale s[j] - max); returns the sum (in double). Lane arrays
 * let the compiler vectorize the max and the sum. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline double softmax_body(float *s, int64_t n, float scale) {
    float mx[16];
    double sm[16];
    for (int l = 0; l < 16; l++) {
        mx[l] = -INFINITY;
        sm[l] = 0.0;
    }
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) {
            s[j + l] *= scale;
            mx[l] = ag_max(mx[l], s[j + l]);
        }
    for (; j < n; j++) {
        s[j] *= scale;
        mx[0] = ag_max(mx[0], s[j]);
    }
    float m = mx[0];
    for (int l = 1; l < 16; l++) m = mx[l] > m ? mx[l] : m;
    for (j = 0; j < n; j++) s[j] = ag_exp(s[j] - m);
    for (j = 0; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) sm[l] += s[j + l];
    for (; j < n; j++) sm[0] += s[j];
    double sum = 0.0;
    for (int l = 0; l < 16; l++) sum += sm[l];
    return sum;
}

static double softmax_row(float *s, int64_t n, float scale) { return softmax_body(s, n, scale); }

#if defined(__x86_64__) && defined(__GNUC__)
#define AG_HAVE_AVX2 1
__attribute__((target("avx2,fma"))) static double softmax_row_avx2(float *s, int64_t n, float scale) {
    return softmax_body(s, n, scale);
}
#endif

/* v transposed: vt rows are one (batch, kv head, channel) over all keys. */
static void transpose_task(void *arg, int ith, int nth) {
    ag_ctx *c = arg;
    const rb_tensor *v = c->v;
    const int64_t Dv = v->ne[0], Tk = v->ne[1], Hkv = v->ne[2], B = v->ne[3];
    int64_t lo, hi;
    rb_cpu_split(B * Hkv * Dv, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t d = it % Dv, g = (it / Dv) % Hkv, b = it / (Dv * Hkv);
        float *out = c->vt + it * Tk;
        const char *base = rb_cpu_data(v) + (size_t)d * v->nb[0] + (size_t)g * v->nb[2] + (size_t)b * v->nb[3];
        for (int64_t j = 0; j < Tk; j++) memcpy(&out[j], base + (size_t)j * v->nb[1], sizeof(float));
    }
}

/* k rows copied with zeros up to Dp. */
static void pad_task(void *arg, int ith, int nth) {
    ag_ctx *c = arg;
    const rb_tensor *k = c->k;
    const int64_t D = k->ne[0], Tk = k->ne[1], Hkv = k->ne[2], B = k->ne[3];
    int64_t lo, hi;
    rb_cpu_split(B * Hkv * Tk, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t j = it % Tk, g = (it / Tk) % Hkv, b = it / (Tk * Hkv);
        float *out = c->kp + it * c->Dp;
        memcpy(out, rb_cpu_row(k, j, g, b), (size_t)D * sizeof(float));
        memset(out + D, 0, (size_t)(c->Dp - D) * sizeof(float));
    }
}

/* dst[c * ldd + r] = dot(x row r, y row c) for r < nr, c < nc (any sizes). */
static void tiles(const struct rb_cpu_kernels *kern, int64_t n, int64_t nr, int64_t nc, const char *x, size_t lda,
                  const char *y, size_t ldb, float *dst, size_t ldd) {
    const rb_gemm_tile_fn gemm = kern->gemm_tile[RB_F32];
    for (int64_t c0 = 0; c0 < nc; c0 += AG_T) {
        const int cc = (int)(nc - c0 < AG_T ? nc - c0 : AG_T);
        for (int64_t r0 = 0; r0 < nr; r0 += AG_T) {
            const int rr = (int)(nr - r0 < AG_T ? nr - r0 : AG_T);
            const char *xr = x + (size_t)r0 * lda, *yc = y + (size_t)c0 * ldb;
            float *d = dst + (size_t)c0 * ldd + (size_t)r0;
            if (gemm) {
                gemm(n, rr, cc, xr, lda, yc, ldb, d, ldd);
            } else {
                for (int ci = 0; ci < cc; ci++)
                    for (int ri = 0; ri < rr; ri++)
                        kern->vec_dot[RB_F32](n, &d[(size_t)ci * ldd + (size_t)ri], xr + (size_t)ri * lda,
                                              yc + (size_t)ci * ldb);
            }
        }
    }
}

static void ag_task(void *arg, int ith, int nth) {
    ag_ctx *c = arg;
    const rb_tensor *q = c->q, *k = c->k;
    rb_tensor *dst = c->dst;
    const struct rb_cpu_kernels *kern = c->cb->kern;
    const int64_t D = q->ne[0], Tq = q->ne[1], Hq = q->ne[2], Tk = k->ne[1], Hkv = k->ne[2], Dv = c->v->ne[0];
    float *S = (float *)(void *)(c->scratch + (size_t)ith * c->stride); /* [AG_QB][ldS] */
    float *O = S + AG_QB * c->ldS;                                     /* [AG_QB][Dv] */
    float *Qp = O + AG_QB * Dv;                                        /* [AG_QB][Dp] */
    double sums[AG_QB];
#if defined(AG_HAVE_AVX2)
    double (*const softmax)(float *, int64_t, float) = c->cb->isa >= RB_CPU_ISA_AVX2 ? softmax_row_avx2 : softmax_row;
#else
    double (*const softmax)(float *, int64_t, float) = softmax_row;
#endif
    int64_t lo, hi;
    rb_cpu_split(q->ne[3] * Hq * c->nqb, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t qb = it % c->nqb, h = (it / c->nqb) % Hq, b = it / (c->nqb * Hq), g = h / c->r;
        const int64_t q0 = qb * AG_QB, nq = Tq - q0 < AG_QB ? Tq - q0 : AG_QB;
        for (int64_t i = 0; i < nq; i++) {
            memcpy(Qp + i * c->Dp, rb_cpu_row(q, q0 + i, h, b), (size_t)D * sizeof(float));
            memset(Qp + i * c->Dp + D, 0, (size_t)(c->Dp - D) * sizeof(float));
        }
        const float *kp = c->kp + (b * Hkv + g) * Tk * c->Dp;
        const size_t ldp = (size_t)c->Dp * sizeof(float);
        tiles(kern, c->Dp, Tk, nq, (const char *)kp, ldp, (const char *)Qp, ldp, S, (size_t)c->ldS);
        for (int64_t i = 0; i < nq; i++) sums[i] = softmax(S + i * c->ldS, Tk, c->scale);
        const float *vt = c->vt + (b * Hkv + g) * Dv * Tk;
        tiles(kern, Tk, Dv, nq, (const char *)vt, (size_t)Tk * sizeof(float), (const char *)S,
              (size_t)c->ldS * sizeof(float), O, (size_t)Dv);
        for (int64_t i = 0; i < nq; i++) {
            const float inv = (float)(1.0 / sums[i]);
            float *o = O + i * Dv;
            for (int64_t e = 0; e < Dv; e++) o[e] *= inv;
            rb_cpu_row_from_f32(c->cb, dst->dtype, o, rb_cpu_row(dst, h, q0 + i, b), dst->nb[0], Dv);
        }
    }
}

rb_status rb_cpu_attention_gemm(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                                const rb_tensor *v, const rb_attn_params *p) {
    rb_cpu_backend *cb = rb_cpu(be);
    const int64_t Tq = q->ne[1], Hq = q->ne[2], B = q->ne[3], Tk = k->ne[1], Hkv = k->ne[2], Dv = v->ne[0];
    ag_ctx c = {.cb = cb, .dst = dst, .q = q, .k = k, .v = v, .scale = p->scale};
    c.r = Hq / Hkv;
    c.nqb = (Tq + AG_QB - 1) / AG_QB;
    c.ldS = (Tk + 15) & ~(int64_t)15;
    const int64_t items = B * Hq * c.nqb;
    int nth = rb_cpu_threads_for(cb, B * Hq * Tq * Tk * (q->ne[0] + Dv));
    if (items < 2) nth = 1;
    c.Dp = (q->ne[0] + 15) & ~(int64_t)15;
    const size_t vt_bytes = ((size_t)(B * Hkv * Dv * Tk) * sizeof(float) + 63) & ~(size_t)63;
    const size_t kp_bytes = ((size_t)(B * Hkv * Tk * c.Dp) * sizeof(float) + 63) & ~(size_t)63;
    const size_t per = (size_t)(AG_QB * c.ldS + AG_QB * Dv + AG_QB * c.Dp) * sizeof(float);
    /* one scratch block: the transposed v and padded k, then each thread's slice */
    const int shared = (int)((vt_bytes + kp_bytes + per - 1) / per);
    char *s = rb_cpu_scratch_threads(cb, nth + shared, per, &c.stride);
    if (!s) return RB_E_NOMEM;
    c.vt = (float *)(void *)s;
    c.kp = (float *)(void *)(s + vt_bytes);
    c.scratch = s + ((vt_bytes + kp_bytes + c.stride - 1) / c.stride) * c.stride;
    rb_cpu_parallel(cb, rb_cpu_threads_for(cb, B * Hkv * Dv * Tk), transpose_task, &c);
    rb_cpu_parallel(cb, rb_cpu_threads_for(cb, B * Hkv * Tk * c.Dp), pad_task, &c);
    rb_cpu_parallel(cb, nth, ag_task, &c);
    return RB_OK;
}
