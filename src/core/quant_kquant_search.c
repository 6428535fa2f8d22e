/* Scale searches used by the k-quant encoders: for one group of 16 or 32
 * values, pick a scale (and for asymmetric formats a min) and the integer
 * levels that minimise a weighted squared / absolute error. The candidate
 * scales, the float expression order and the tie-breaking are those of ggml's
 * reference quantizer, so encoders built on these give ggml's exact bytes. */
#include "quant_internal.h"

#include <math.h>

/* the element of largest magnitude (first one wins on ties), or 0 */
static float signed_absmax(int n, const float *x, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

/* sums of w*x*l and w*l*l (w = x^2) for levels quantized with iscale; when
 * L is not NULL the offset levels are stored too */
static void qx_sums(int n, int nmax, const float *x, float iscale, int8_t *L, float *sumlx, float *suml2) {
    float slx = 0.0f, sl2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = rb_kq_clampi(rb_kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        if (L) L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        const float wx = w * x[i];
        slx += wx * (float)l;
        const float wl = w * (float)l;
        sl2 += wl * (float)l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

float rb_kq_make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(n, x, &amax);
    if (amax < RB_KQ_GROUP_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float sumlx, suml2;
    qx_sums(n, nmax, x, (float)-nmax / max, L, &sumlx, &suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    /* try scales 1% apart around nmax/max and keep the best weighted fit */
    for (int step = -9; step <= 9; step++) {
        if (step == 0) continue;
        const float span = (float)nmax + 0.1f * (float)step;
        const float iscale = -span / max;
        qx_sums(n, nmax, x, iscale, NULL, &sumlx, &suml2);
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            qx_sums(n, nmax, x, iscale, L, &sumlx, &suml2);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float rb_kq_make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(n, x, &amax);
    if (amax < RB_KQ_GROUP_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = rb_kq_clampi(rb_kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        const float wx = w * x[i];
        sumlx += wx * (float)l;
        const float wl = w * (float)l;
        suml2 += wl * (float)l;
    }
    /* coordinate descent: re-pick each level against the fit of the others */
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            const float wx = w * x[i];
            float slx = sumlx - wx * (float)L[i];
            if (!(slx > 0.0f)) continue;
            const float wl = w * (float)L[i];
            float sl2 = suml2 - wl * (float)L[i];
            const float target = x[i] * sl2;
            const int nl = rb_kq_clampi(rb_kq_nearest_int(target / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += wx * (float)nl;
            const float wn = w * (float)nl;
            sl2 += wn * (float)nl;
            const float lhs = slx * slx;
            const float rhs = sumlx * sumlx;
            if (sl2 > 0.0f && lhs * suml2 > rhs * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float rb_kq_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                             uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float wx = w[i] * x[i];
        sum_w += w[i];
        sum_x += wx;
    }
    if (min > 0.0f) min = 0.0f;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = rb_kq_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)rb_kq_clampi(l, 0, nmax);
        const float sl = scale * (float)L[i];
        float diff = sl + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += w[i] * diff;
    }
    if (nstep < 1) {
        *neg_min = -min;
        return scale;
    }
    for (int step = 0; step <= nstep; step++) {
        const float off = rdelta * (float)step;
        iscale = (rmin + off + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = rb_kq_clampi(rb_kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float wl = w[i] * (float)l;
            sum_l += wl;
            sum_l2 += wl * (float)l;
            sum_xl += wl * x[i];
        }
        const float a = sum_w * sum_l2;
        const float b = sum_l * sum_l;
        const float D = a - b;
        if (!(D > 0.0f)) continue;
        const float s1 = sum_w * sum_xl;
        const float s2 = sum_x * sum_l;
        const float m1 = sum_l2 * sum_x;
        const float m2 = sum_l * sum_xl;
        float this_scale = (s1 - s2) / D;
        float this_min = (m1 - m2) / D;
        if (this_min > 0.0f) {
            this_min = 0.0f;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            const float sl = this_scale * (float)Laux[i];
            float diff = sl + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            err += w[i] * diff;
        }
        if (err < best_err) {
            memcpy(L, Laux, (size_t)n);
            best_err = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}
