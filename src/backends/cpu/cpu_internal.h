/* Internal to the CPU backend: its backend struct, the persistent thread
 * pool, ISA selection and helpers shared by the op implementations. */
#ifndef RBEE_CPU_INTERNAL_H
#define RBEE_CPU_INTERNAL_H

#include "core/backend_impl.h"

/* ---- thread pool (threadpool.c) ---- */
typedef struct rb_threadpool rb_threadpool;
/* A task body: called once per thread with ith in [0, nth). */
typedef void (*rb_task_fn)(void *ctx, int ith, int nth);
/* n_threads >= 1 (the calling thread counts as one of them). */
rb_status rb_threadpool_create(int n_threads, rb_threadpool **out);
void rb_threadpool_destroy(rb_threadpool *tp);
int rb_threadpool_size(const rb_threadpool *tp);
/* Runs fn on every thread of the pool (the caller is ith 0) and returns once
 * all have finished. Not re-entrant: one run at a time per pool. */
void rb_threadpool_run(rb_threadpool *tp, rb_task_fn fn, void *ctx);

/* ---- instruction-set selection (cpu_isa.c) ---- */
typedef enum rb_cpu_isa {
    RB_CPU_ISA_SCALAR = 0, /* portable C, always available */
    RB_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    RB_CPU_ISA_AVX512 = 2, /* AVX-512 F/BW/VL (+ VNNI when present) on top of AVX2 */
} rb_cpu_isa;
rb_cpu_isa rb_cpu_isa_detect(void);              /* best the running CPU supports */
const char *rb_cpu_isa_name(rb_cpu_isa isa);     /* "scalar", "avx2", "avx512" */
bool rb_cpu_isa_parse(const char *s, rb_cpu_isa *out); /* "auto" -> detect */

struct rb_cpu_kernels; /* SIMD kernel table, see cpu_kernels.h */

typedef struct rb_cpu_backend {
    rb_backend base; /* must be first */
    rb_threadpool *pool;
    int n_threads;
    rb_cpu_isa isa;
    const struct rb_cpu_kernels *kern;
    bool llamacpp_numerics; /* rb_backend_config.llamacpp_numerics (llamacpp_numerics.h) */
    bool batch_invariant;   /* rb_backend_config.batch_invariant (matmul_plan.c) */
    void *scratch; /* grows on demand; used by one op at a time */
    size_t scratch_cap;
} rb_cpu_backend;

static inline rb_cpu_backend *rb_cpu(rb_backend *be) { return (rb_cpu_backend *)be; }

/* Scratch memory of at least bytes (64-byte aligned), valid until the next call. */
void *rb_cpu_scratch(rb_cpu_backend *cb, size_t bytes);

/* Host address of a tensor's element 0. */
static inline char *rb_cpu_data(const rb_tensor *t) { return (char *)t->buf->host_ptr + t->offs; }

/* matmul (matmul.c) */
rb_status rb_cpu_matmul(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
/* rb_cpu_matmul with rb_linear's epilogue (ep non-NULL) fused into its tile stores */
rb_status rb_cpu_linear(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                        const rb_linear_epilogue *ep);

#endif
