/* Private interface of the quant module: the per-format block encoders and
 * decoders that quant.c dispatches to, and the k-quant scale-search helpers
 * shared by the k-quant encoders. Every routine works on whole blocks (nb =
 * number of blocks); callers validate sizes and dtypes first. */
#ifndef RBEE_QUANT_INTERNAL_H
#define RBEE_QUANT_INTERNAL_H

#include "rbee/quant.h"

#include <stdint.h>
#include <string.h>

/* Byte-identical output with ggml requires every multiply and add to round
 * separately: forbid fused multiply-add contraction in the quant sources. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- legacy 32-element blocks (quant_legacy.c) ---- */
void rb_q4_0_encode(const float *x, rb_block_q4_0 *y, int64_t nb);
void rb_q4_1_encode(const float *x, rb_block_q4_1 *y, int64_t nb);
void rb_q5_0_encode(const float *x, rb_block_q5_0 *y, int64_t nb);
void rb_q5_1_encode(const float *x, rb_block_q5_1 *y, int64_t nb);
void rb_q8_0_encode(const float *x, rb_block_q8_0 *y, int64_t nb);
void rb_q8_1_encode(const float *x, rb_block_q8_1 *y, int64_t nb);

void rb_q4_0_decode(const rb_block_q4_0 *x, float *y, int64_t nb);
void rb_q4_1_decode(const rb_block_q4_1 *x, float *y, int64_t nb);
void rb_q5_0_decode(const rb_block_q5_0 *x, float *y, int64_t nb);
void rb_q5_1_decode(const rb_block_q5_1 *x, float *y, int64_t nb);
void rb_q8_0_decode(const rb_block_q8_0 *x, float *y, int64_t nb);
void rb_q8_1_decode(const rb_block_q8_1 *x, float *y, int64_t nb);

/* ---- non-linear 4-bit iq4_nl / iq4_xs (quant_iq4.c; decode only) ---- */
void rb_iq4_nl_decode(const rb_block_iq4_nl *x, float *y, int64_t nb);
void rb_iq4_xs_decode(const rb_block_iq4_xs *x, float *y, int64_t nb);

/* ---- 3-bit lattice iq3_xxs / iq3_s (quant_iq3.c; decode only) ---- */
void rb_iq3_xxs_decode(const rb_block_iq3_xxs *x, float *y, int64_t nb);
void rb_iq3_s_decode(const rb_block_iq3_s *x, float *y, int64_t nb);

/* ---- 2-bit lattice iq2_xxs / iq2_xs / iq2_s (quant_iq2.c; decode only) ---- */
void rb_iq2_xxs_decode(const rb_block_iq2_xxs *x, float *y, int64_t nb);
void rb_iq2_xs_decode(const rb_block_iq2_xs *x, float *y, int64_t nb);
void rb_iq2_s_decode(const rb_block_iq2_s *x, float *y, int64_t nb);

/* ---- 1-bit lattice iq1_s / iq1_m (quant_iq1.c; decode only) ---- */
void rb_iq1_s_decode(const rb_block_iq1_s *x, float *y, int64_t nb);
void rb_iq1_m_decode(const rb_block_iq1_m *x, float *y, int64_t nb);

/* ---- microscaling fp4 (quant_mxfp4.c) ---- */
void rb_mxfp4_encode(const float *x, rb_block_mxfp4 *y, int64_t nb);
void rb_mxfp4_decode(const rb_block_mxfp4 *x, float *y, int64_t nb);

/* ---- 256-element k-quant super-blocks (quant_kquant_encode.c / _decode.c) ---- */
void rb_q2_K_encode(const float *x, rb_block_q2_K *y, int64_t nb);
void rb_q3_K_encode(const float *x, rb_block_q3_K *y, int64_t nb);
void rb_q4_K_encode(const float *x, rb_block_q4_K *y, int64_t nb);
void rb_q5_K_encode(const float *x, rb_block_q5_K *y, int64_t nb);
void rb_q6_K_encode(const float *x, rb_block_q6_K *y, int64_t nb);
void rb_q8_K_encode(const float *x, rb_block_q8_K *y, int64_t nb);

void rb_q2_K_decode(const rb_block_q2_K *x, float *y, int64_t nb);
void rb_q3_K_decode(const rb_block_q3_K *x, float *y, int64_t nb);
void rb_q4_K_decode(const rb_block_q4_K *x, float *y, int64_t nb);
void rb_q5_K_decode(const rb_block_q5_K *x, float *y, int64_t nb);
void rb_q6_K_decode(const rb_block_q6_K *x, float *y, int64_t nb);
void rb_q8_K_decode(const rb_block_q8_K *x, float *y, int64_t nb);

/* ---- k-quant scale search (quant_kquant_search.c) ---- */

/* Groups whose largest magnitude is below this are treated as all zero. */
#define RB_KQ_GROUP_EPS 1e-15f

/* Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the
 * mantissa bits (the exact trick ggml uses, so results match bit for bit).
 * Meaningful for |v| < 2^22; other inputs give a deterministic value without
 * undefined behaviour. */
static inline int rb_kq_nearest_int(float v) {
    float t = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    return (int)(bits & 0x007fffff) - 0x00400000;
}

static inline int rb_kq_clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* Symmetric search: quantizes n values to L[i] in [0, 2*nmax) (offset by nmax)
 * with weights x^2 and returns the scale (sign follows -max). Used by q6_K. */
float rb_kq_make_qx_quants(int n, int nmax, const float *x, int8_t *L);

/* Symmetric 3-bit search with coordinate-descent refinement (q3_K). L[i] in
 * [0, 2*nmax). */
float rb_kq_make_q3_quants(int n, int nmax, const float *x, int8_t *L);

/* Asymmetric (scale, min) search over nstep+1 candidate scales with weighted
 * least squares (q2_K, q4_K, q5_K). L[i] in [0, nmax]; *neg_min receives the
 * subtracted minimum as a non-negative number. Laux is scratch of n bytes. */
float rb_kq_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                             uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad);

/* 6-bit scale/min pair j (0..7) of q4_K / q5_K packed scales. */
static inline void rb_kq_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
