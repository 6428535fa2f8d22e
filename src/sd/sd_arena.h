/* Activation memory of the Stable Diffusion networks: one backend buffer per
 * network, laid out by running the forward pass twice. The first pass only
 * measures (every op is skipped, tensors are shape-only), the second runs on
 * a buffer of exactly the measured size. Inside the buffer:
 *
 *   [ slot 0 | slot 1 | ... | stack ............ ]
 *
 * Slots are fixed regions reused over and over (the hidden state ping-pongs
 * between them; each slot is as large as its largest use); the stack holds
 * everything else with mark/release discipline (a block's temporaries are
 * released when it returns; the UNet's skip connections stay on it). Both
 * passes run the same code, so the layout cannot drift from the forward.
 *
 * SD_OP wraps every op call: skipped while measuring, and a failure records
 * the op, the calling function and the backend's message in the run's error. */
#ifndef RBEE_SD_ARENA_H
#define RBEE_SD_ARENA_H

#include "rbee/backend.h"
#include "rbee/ops.h"

#define SD_SLOTS 4

/* A network's cached activation buffer (kept between calls), and the dtype
 * of its activations (RB_F32 = 0, RB_F16, RB_BF16: sd_stack and sd_slot). */
typedef struct sd_scratch {
    rb_buffer *buf;
    size_t size;
    rb_dtype act;
} sd_scratch;

typedef struct sd_run {
    rb_backend *be;
    rb_error *err;
    bool measure;
    rb_dtype act;   /* activation dtype (the scratch's) */
    rb_buffer *buf; /* NULL while measuring */
    size_t slot_off[SD_SLOTS], slot_size[SD_SLOTS];
    size_t base; /* stack start */
    size_t top, peak;
    rb_status st; /* first allocation failure (a slot outgrown in the real pass) */
} sd_run;

typedef rb_status (*sd_pass_fn)(sd_run *r, void *ctx);

/* Runs fn once measuring, sizes sc (reallocating when too small), then runs
 * it for real. Returns fn's status. */
rb_status sd_run_passes(rb_backend *be, sd_scratch *sc, sd_pass_fn fn, void *ctx, rb_error *err);
/* Bytes a pass of fn needs with sc's activation dtype (the measuring pass alone). */
rb_status sd_run_measure(rb_backend *be, const sd_scratch *sc, sd_pass_fn fn, void *ctx, size_t *bytes,
                         rb_error *err);
void sd_scratch_free(sd_scratch *sc);

/* A contiguous activation tensor (the run's act dtype) on the stack / in
 * slot k (ne2, ne3 may be 1). */
rb_tensor sd_stack(sd_run *r, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
rb_tensor sd_slot(sd_run *r, int k, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
/* An f32 tensor on the stack, whatever the act dtype (host uploads). */
rb_tensor sd_stack_f32(sd_run *r, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
/* An i32 tensor on the stack. */
rb_tensor sd_stack_i32(sd_run *r, int64_t ne0, int64_t ne1);
static inline size_t sd_mark(const sd_run *r) { return r->top; }
static inline void sd_release(sd_run *r, size_t mark) { r->top = mark; }

/* Uploads n bytes of host data into t (skipped while measuring). */
rb_status sd_upload(sd_run *r, rb_tensor *t, const void *data, size_t n);

/* Records a failed op: "<func>: <expr>: <backend message>". */
rb_status sd_op_fail(sd_run *r, rb_status s, const char *func, const char *expr);

#define SD_OP(r, expr)                                                                                         \
    do {                                                                                                       \
        if (!(r)->measure) {                                                                                   \
            rb_status sd_s_ = (expr);                                                                          \
            if (sd_s_ != RB_OK) return sd_op_fail((r), sd_s_, __func__, #expr);                                \
        }                                                                                                      \
    } while (0)

#define SD_TRY(expr)                                                                                           \
    do {                                                                                                       \
        rb_status sd_t_ = (expr);                                                                              \
        if (sd_t_ != RB_OK) return sd_t_;                                                                      \
    } while (0)

/* Views used everywhere: dims [a, b) of dim d (no checks: shapes are the
 * network's own), and a reshape of a contiguous tensor. */
rb_tensor sd_slice(const rb_tensor *t, int dim, int64_t start, int64_t len);
rb_tensor sd_reshape(const rb_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
rb_tensor sd_permute(const rb_tensor *t, int p0, int p1, int p2, int p3);

#endif
