/* Shared by the op tests: building test tensors on a backend in several
 * memory layouts (contiguous, permuted, sliced out of a padded parent) with
 * a double-precision shadow of their values, reading results back, checking
 * that nothing outside a destination view was written, tolerant comparison,
 * and the naive double-precision reference implementations of the ops. */
#ifndef RBEE_TESTS_REF_OPS_H
#define RBEE_TESTS_REF_OPS_H

#include "testutil.h"

#include "rbee/backend.h"
#include "rbee/ops.h"

#include <stdbool.h>

/* ---- backends ---- */
/* Configurations every op test runs under. */
typedef struct tf_cfg {
    const char *isa; /* "scalar" or NULL (auto) */
    int n_threads;
} tf_cfg;
extern const tf_cfg tf_cfgs[];
extern const int tf_ncfgs;
rb_backend *tf_backend(const tf_cfg *cfg); /* fails the test on error */

/* ---- tensors ---- */
typedef enum tf_layout {
    TF_CONTIG,  /* plain contiguous */
    TF_PERM,    /* dims 0/1 and 2/3 swapped in memory: strided rows */
    TF_SLICE,   /* a view inside a padded parent, offset from its start */
} tf_layout;

typedef struct tt {
    rb_tensor t;     /* the view handed to ops */
    rb_buffer *buf;  /* owns the parent memory */
    double *v;       /* logical values (after dtype rounding), ggml order, contiguous */
    int64_t n;       /* elements */
    unsigned char *orig; /* parent bytes at creation (for untouched-padding checks) */
    unsigned char *mask; /* 1 where a byte belongs to an element of the view */
} tt;

/* New tensor of shape ne with values uniform in [lo, hi) (or ints in
 * [lo, hi) for i32), in the given layout; padding is filled with noise. */
tt tf_make(rb_backend *be, tu_rng *rng, rb_dtype dt, const int64_t ne[4], tf_layout lay, float lo, float hi);
/* Same but with given values (n = product of ne). */
tt tf_from(rb_backend *be, rb_dtype dt, const int64_t ne[4], tf_layout lay, const double *vals);
void tf_free(tt *x);
/* Reads the view's elements back (as double, ggml order); caller frees. */
double *tf_read(const tt *x);
/* True if every byte of the parent outside the view is unchanged. */
bool tf_pad_intact(const tt *x);
/* Whole parent unchanged (nothing written at all). */
bool tf_unchanged(const tt *x);

/* Index of element (i0..i3) in ggml-order contiguous arrays of shape ne. */
static inline int64_t tf_idx(const int64_t ne[4], int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return ((i3 * ne[2] + i2) * ne[1] + i1) * ne[0] + i0;
}

/* Fails the test if any |got - ref| > atol + rtol * |ref| (NaN must match NaN,
 * infinities must match exactly). what names the case in the message. */
void tf_expect_close(const double *got, const double *ref, int64_t n, double rtol, double atol, const char *what);
/* Relative tolerance for values stored in dtype dt after f32 math with
 * relative error base (f32: base; f16 adds 2^-11, bf16 2^-8). */
double tf_tol(rb_dtype dt, double base);

/* ---- references (double precision) ---- */
double ref_unary(rb_unary_op op, double x);
double ref_binary(rb_binary_op op, double a, double b);
/* softmax over n values of x*scale + mask (mask nullable); fully masked -> 0 */
void ref_softmax_row(const double *x, const double *mask, double scale, int64_t n, double *y);
void ref_rms_norm_row(const double *x, const double *w, double eps, int64_t n, double *y);
void ref_layer_norm_row(const double *x, const double *w, const double *b, double eps, int64_t n, double *y);
/* src [W,H,C,N] */
void ref_group_norm(const double *x, const int64_t ne[4], int groups, const double *w, const double *b, double eps,
                    double *y);
/* src [D,H,T,B], pos[T]; ff nullable [n_rot/2] */
void ref_rope(const double *x, const int64_t ne[4], const int32_t *pos, int n_rot, rb_rope_mode mode, double base,
              double freq_scale, double attn_factor, const double *ff, double *y);
/* q [D,Tq,Hq,B], k [D,Tk,Hkv,B], v [Dv,Tk,Hkv,B], mask nullable [Tk,Tq];
 * y [Dv,Hq,Tq,B]. Materialises the full score matrix (the naive way). */
void ref_attention(const double *q, const double *k, const double *v, const int64_t qne[4], const int64_t kne[4],
                   int64_t Dv, const double *mask, double scale, double softcap, bool causal, int window,
                   int64_t q_pos0, double *y);
/* x [L,Cin,N], w [K,Cin/g,Cout], bias nullable; y [Lout,Cout,N] */
void ref_conv1d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4], const double *bias,
                int stride, int pad, int dil, int groups, int64_t lout, double *y);
void ref_conv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4], const double *bias,
                const int stride[2], const int pad[2], const int dil[2], int groups, int64_t wo, int64_t ho, double *y);
void ref_upsample(const double *x, const int64_t ne[4], int64_t wo, int64_t ho, rb_upsample_mode mode, double *y);

#endif
