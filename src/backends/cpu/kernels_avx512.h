/* Internal: the AVX-512 VNNI quantized kernels (vec_dot_vnni_avx512.c) that the
 * AVX-512 table (kernels_avx512.c) refers to. */
#ifndef RBEE_CPU_KERNELS_AVX512_H
#define RBEE_CPU_KERNELS_AVX512_H

#include "backends/cpu/cpu_kernels.h"

void rb_vd_q4_0_avx512(int64_t n, float *s, const void *x, const void *y);
void rb_vd_q8_0_avx512(int64_t n, float *s, const void *x, const void *y);
void rb_vd_mxfp4_avx512(int64_t n, float *s, const void *x, const void *y);
void rb_vd_iq4_nl_avx512(int64_t n, float *s, const void *x, const void *y); /* vec_dot_iq4_avx512.c */
void rb_vd_iq4_xs_avx512(int64_t n, float *s, const void *x, const void *y);
void rb_gemm_q4_0_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);
void rb_gemm_q8_0_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);

/* Matrix-vector q4_0 / q8_0 x q8_0 (matvec_vnni_avx512.c): dst[r] = dot(row r
 * of x, y) for r < nr; n <= RB_MATVEC_MAX_K. */
#define RB_MATVEC_MAX_K 16384
void rb_matvec_q4_0_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst);
void rb_matvec_q8_0_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst);

/* Matrix-vector k-quant x q8_K (matvec_kquant_avx512.c), same contract; and
 * the table's gemm_tile entries that send nc == 1 there. */
void rb_matvec_q4_K_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst);
void rb_matvec_q5_K_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst);
void rb_matvec_q6_K_avx512(int64_t n, int nr, const void *x, size_t lda, const void *y, float *dst);
void rb_gemm_q4_K_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);
void rb_gemm_q5_K_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);
void rb_gemm_q6_K_avx512(int64_t n, int nr, int nc, const void *x, size_t lda, const void *y, size_t ldb, float *dst,
                         size_t ldd);

/* Packed prefill kernels (gemm_packed_vnni_avx512.c). */
void rb_pack_q4_0_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_pack_q8_0_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_gemm_packed_q4_0_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf);
void rb_gemm_packed_q8_0_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf);

/* Packed k-quant prefill kernels (gemm_kquant_vnni_avx512.c): kq32 for the
 * 32-element scale groups of q4_K / q5_K, kq16 for q2_K / q3_K / q6_K. */
void rb_pack_q2_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_pack_q3_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_pack_q4_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_pack_q5_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_pack_q6_K_avx512(int64_t n, int nr, const void *x, size_t lda, void *out);
void rb_gemm_packed_kq32_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf);
void rb_gemm_packed_kq16_avx512(int64_t n, int nr, int nc, const void *packed, const void *y, size_t ldb,
                                const rb_act_aux *aux, size_t ld_aux, float *dst, size_t ldd, rb_pack_prefetch *pf);

/* Float-weight prefill kernels (gemm_float_t_avx512.c), see rb_gemm_t_fn. */
void rb_gemm_t_f16_avx512(int64_t n, int nr, int nc, const void *w, size_t lda, const float *yt, float *dst,
                          size_t ldd, const void *pf, size_t pf_lines);
void rb_gemm_t_bf16_avx512(int64_t n, int nr, int nc, const void *w, size_t lda, const float *yt, float *dst,
                           size_t ldd, const void *pf, size_t pf_lines);

#endif
