/* Test plumbing for the GPU op tests: a "pair" is the same tensor (dtype,
 * shape, strides, offset, parent bytes) on the CPU backend and on the GPU
 * backend, so an op can run on both and the results be compared element by
 * element, and every byte outside the destination view checked untouched.
 * The GPU backend comes from RBEE_TEST_GPU (default: cuda:0, then rocm:0);
 * with none available the tests skip. */
#ifndef RBEE_TESTS_GPU_PAIR_H
#define RBEE_TESTS_GPU_PAIR_H

#include "testutil.h"

#include "rbee/backend.h"
#include "rbee/ops.h"

#include <stdbool.h>

typedef enum gp_layout {
    GP_CONTIG, /* contiguous */
    GP_PERM,   /* dims 0 and 1 swapped in memory (strided rows) */
    GP_SLICE,  /* view inside a padded parent at a non-zero offset */
    GP_PAD,    /* padded rows and planes as GP_SLICE, at offset 0 (as aligned as the buffer) */
} gp_layout;

typedef struct gp {
    rb_tensor c, g;       /* CPU and GPU views */
    rb_buffer *cb, *gb;   /* parents */
    unsigned char *orig;  /* parent bytes as created */
    size_t size;
} gp;

/* The GPU backend under test, or NULL (then call skip()). */
rb_backend *gp_gpu(void);
rb_backend *gp_cpu(void);
/* Skips the current test when there is no GPU. */
#define GP_NEED_GPU(g)                                                                                         \
    do {                                                                                                       \
        if (!(g)) {                                                                                            \
            print_message("no GPU backend available: skipping\n");                                           \
            skip();                                                                                            \
        }                                                                                                      \
    } while (0)

/* New pair with values uniform in [lo, hi) (integers for i32, whole
 * quantized rows for block dtypes; padding bytes are random too). */
gp gp_make(rb_backend *cpu, rb_backend *gpu, tu_rng *rng, rb_dtype dt, const int64_t ne[4], gp_layout lay,
           float lo, float hi);
/* Pair holding the given i32 values (contiguous [n0, n1]). */
gp gp_ids(rb_backend *cpu, rb_backend *gpu, const int32_t *v, int64_t n0, int64_t n1);
void gp_free(gp *x);
/* Reads the view's elements (plain dtypes) from side 0 (CPU) or 1 (GPU). */
double *gp_read(const gp *x, int side);
/* Compares GPU vs CPU values of the view: |g - c| <= atol + rtol |c|, and
 * checks the GPU parent is unchanged outside the view. */
void gp_expect_close(const gp *x, double rtol, double atol, const char *what);
/* GPU parent bytes all equal to the original (nothing written). */
bool gp_gpu_unchanged(const gp *x);
/* Tolerance for an output of dtype dt after f32 math with relative error base. */
double gp_tol(rb_dtype dt, double base);

#endif
