/* Internal to the CPU matmul: the shared plan of one rb_cpu_matmul call
 * (shapes, scratch areas) and its two thread-pool tasks: converting the
 * activations into the dot product's input format, and computing the output
 * tiles. Split out of matmul.c so the driver stays short. */
#ifndef RBEE_CPU_MATMUL_PLAN_H
#define RBEE_CPU_MATMUL_PLAN_H

#include "backends/cpu/cpu_kernels.h"

typedef struct rb_mm_plan {
    const struct rb_cpu_kernels *k;
    rb_tensor dst, a, b;
    int64_t K, N, M, B2, B3;
    int64_t r2, r3;       /* broadcast ratios B2/A2, B3/A3 */
    rb_dtype vt;          /* activation format the dot product consumes */
    size_t row_b;         /* bytes of one converted activation row */
    char *act;            /* converted activations: row (i3*B2 + i2)*M + m */
    float *fbuf;          /* per-thread K floats for gathering b rows */
    char *abuf;           /* per-thread tile_r packed weight rows (strided a only) */
    size_t abuf_stride;   /* bytes per thread in abuf */
    size_t a_row;         /* bytes of one packed weight row */
    int tile_r, tile_c;   /* weight rows and activation rows per tile */
    bool packed;          /* prefill through pack_rows + gemm_packed */
    rb_act_aux *aux;      /* packed: per activation row, nb block scales and sums */
    size_t ld_aux;        /* packed: aux entries per activation row */
    char *pbuf;           /* packed: per-thread packed weight rows */
    size_t pbuf_stride;   /* packed: bytes per thread in pbuf */
    bool tposed;          /* prefill through gemm_t: activation blocks stored k-major */
    float *act_t;         /* tposed: blocks of RB_CPU_T_COLS rows, K x RB_CPU_T_COLS floats each */
    int64_t mblk;         /* tposed: blocks per batch, ceil(M / RB_CPU_T_COLS) */
    int nth;
    const rb_linear_epilogue *ep; /* rb_linear's epilogue applied as tiles are stored, or NULL */
} rb_mm_plan;

rb_status rb_mm_plan_init(rb_mm_plan *p, rb_cpu_backend *cb, const rb_tensor *dst, const rb_tensor *a,
                          const rb_tensor *b);
void rb_mm_convert_task(void *ctx, int ith, int nth);
void rb_mm_compute_task(void *ctx, int ith, int nth);

#endif
