/* Internal: the vtable every backend implements, and the structs behind the
 * opaque rb_backend / rb_buffer handles. The public front-ends (backend.c for
 * memory, ops.c for operations) validate arguments and then call these, so an
 * implementation may assume: every tensor's buffer belongs to this backend,
 * the view lies inside its buffer, and shapes/dtypes are consistent with the
 * contract in include/rbee/ops.h. Unsupported dtype combinations are still
 * the backend's to refuse with RB_E_UNSUPPORTED. */
#ifndef RBEE_BACKEND_IMPL_H
#define RBEE_BACKEND_IMPL_H

#include "rbee/backend.h"
#include "rbee/ops.h"

#include <stdarg.h>

typedef struct rb_backend_vtable {
    void (*destroy)(rb_backend *be);
    rb_status (*device_info)(rb_backend *be, rb_device_info *info);
    rb_status (*sync)(rb_backend *be);

    /* memory: buffer_alloc/from_host fill buf->impl / buf->host_ptr */
    rb_status (*buffer_alloc)(rb_backend *be, rb_buffer *buf, size_t size);
    rb_status (*buffer_from_host)(rb_backend *be, rb_buffer *buf, void *ptr, size_t size);
    void (*buffer_free)(rb_backend *be, rb_buffer *buf);
    rb_status (*buffer_set)(rb_backend *be, rb_buffer *buf, size_t offs, const void *src, size_t n);
    rb_status (*buffer_get)(rb_backend *be, const rb_buffer *buf, size_t offs, void *dst, size_t n);
    rb_status (*buffer_copy)(rb_backend *be, rb_buffer *dst, size_t dst_offs, const rb_buffer *src,
                             size_t src_offs, size_t n);

    /* operations: same meaning as the rb_* front-ends in ops.h */
    rb_status (*fill)(rb_backend *be, rb_tensor *dst, float value);
    rb_status (*affine)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, float scale, float bias);
    rb_status (*unary)(rb_backend *be, rb_unary_op op, rb_tensor *dst, const rb_tensor *src);
    rb_status (*binary)(rb_backend *be, rb_binary_op op, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
    rb_status (*where)(rb_backend *be, rb_tensor *dst, const rb_tensor *cond, const rb_tensor *a,
                       const rb_tensor *b);
    rb_status (*glu)(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, rb_unary_op act);
    rb_status (*cast)(rb_backend *be, rb_tensor *dst, const rb_tensor *src);
    rb_status (*reduce)(rb_backend *be, rb_reduce_op op, rb_tensor *dst, const rb_tensor *src);
    rb_status (*softmax)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *mask, float scale);
    rb_status (*rms_norm)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w, float eps);
    rb_status (*add_rms_norm)(rb_backend *be, rb_tensor *x, const rb_tensor *delta, const rb_tensor *w, float eps,
                              rb_tensor *h);
    rb_status (*layer_norm)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *w,
                            const rb_tensor *b, float eps);
    rb_status (*group_norm)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups,
                            const rb_tensor *w, const rb_tensor *b, float eps);
    rb_status (*get_rows)(rb_backend *be, rb_tensor *dst, const rb_tensor *table, const rb_tensor *ids);
    rb_status (*index_select)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids,
                              int dim);
    rb_status (*set_rows)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *ids);
    rb_status (*argsort)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, bool descending);
    rb_status (*topk)(rb_backend *be, rb_tensor *values, rb_tensor *indices, const rb_tensor *src, int k);
    rb_status (*matmul)(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b);
    rb_status (*rope)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *pos,
                      const rb_rope_params *p);
    rb_status (*attention)(rb_backend *be, rb_tensor *dst, const rb_tensor *q, const rb_tensor *k,
                           const rb_tensor *v, const rb_attn_params *p);
    rb_status (*conv1d)(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w,
                        const rb_tensor *bias, int stride, int pad, int dilation, int groups);
    rb_status (*conv2d)(rb_backend *be, rb_tensor *dst, const rb_tensor *x, const rb_tensor *w,
                        const rb_tensor *bias, const int stride[2], const int pad[2], const int dilation[2],
                        int groups);
    rb_status (*upsample)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, rb_upsample_mode mode);
    /* optional, last so that a backend without it may leave it out (NULL: rb_matmul_fused runs the separate ops). Answers
     * RB_E_UNSUPPORTED, without recording an error or queueing anything,
     * where it has no fused kernel for the case; the front-end then runs the
     * separate ops. */
    rb_status (*matmul_fused)(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                              const rb_matmul_fusion *f);
    /* optional: host memory the backend copies to and from fastest
     * (page-locked on GPUs), or NULL when there is none to give; freed by
     * host_free. NULL entries: rb_backend_host_alloc uses plain memory. */
    void *(*host_alloc)(rb_backend *be, size_t size);
    void (*host_free)(rb_backend *be, void *p);
    /* optional (NULL: buffer_set, refused while capturing): rb_buffer_set_queued */
    rb_status (*buffer_set_queued)(rb_backend *be, rb_buffer *buf, size_t offs, const void *src, size_t n);
    /* optional (NULL: RB_E_UNSUPPORTED): rb_buffer_wrap_host, filling buf
     * like buffer_from_host (buf->owned false) */
    rb_status (*buffer_wrap_host)(rb_backend *be, rb_buffer *buf, void *ptr, size_t size);
    /* optional (NULL: rb_group_norm_act runs group_norm, then unary on dst):
     * group norm and its activation in one pass */
    rb_status (*group_norm_act)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, int n_groups,
                                const rb_tensor *w, const rb_tensor *b, float eps, rb_unary_op act);
    /* mixture-of-experts ops (ops.h); NULL: RB_E_UNSUPPORTED */
    rb_status (*matmul_id)(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                           const rb_tensor *ids);
    rb_status (*swiglu_clamp)(rb_backend *be, rb_tensor *dst, const rb_tensor *gate, const rb_tensor *up, float alpha,
                              float limit);
    /* the diffusion networks' fused ops (ops.h); NULL: RB_E_UNSUPPORTED.
     * linear gets ep non-NULL (the front-end passes an empty one) */
    rb_status (*layer_norm_mod)(rb_backend *be, rb_tensor *dst, const rb_tensor *src, const rb_tensor *shift,
                                const rb_tensor *scale, float eps);
    rb_status (*linear)(rb_backend *be, rb_tensor *dst, const rb_tensor *a, const rb_tensor *b,
                        const rb_linear_epilogue *ep);
} rb_backend_vtable;

/* Graph capture and replay (see backend.h). A backend without graphs leaves
 * rb_backend.graph_vt NULL and the front-ends answer RB_E_UNSUPPORTED. The
 * front-ends track capturing, so these are only called in a valid state;
 * capture_end is called exactly once after a successful capture_begin and
 * must leave the backend eager whatever happened: it fills g->impl on
 * success, and discards the capture when g is NULL (no host memory). */
typedef struct rb_graph_vtable {
    rb_status (*capture_begin)(rb_backend *be);
    rb_status (*capture_end)(rb_backend *be, rb_graph *g);
    rb_status (*launch)(rb_backend *be, rb_graph *g);
    void (*free)(rb_backend *be, rb_graph *g);
} rb_graph_vtable;

struct rb_graph {
    rb_backend *backend;
    void *impl; /* backend-private */
};

struct rb_backend {
    const rb_backend_vtable *vt;
    const rb_graph_vtable *graph_vt; /* NULL: eager only */
    bool capturing;                  /* between capture_begin and capture_end */
    rb_status capture_status;        /* first failure recorded during the capture */
    rb_device_kind kind;
    int index;
    bool batch_invariant; /* rb_backend_config.batch_invariant, as asked */
    bool row_exact;       /* its matrix products honour batch_invariant themselves (the CPU backend) */
    const struct rb_backend_module *module; /* the GPU module it came from (backend_module.h); NULL: built in */
    char name[32];                 /* "cpu", "cuda:0" */
    char last_error[RB_ERROR_MSG_MAX];
};

struct rb_buffer {
    rb_backend *backend;
    size_t size;
    void *host_ptr; /* host-addressable memory or NULL */
    void *impl;     /* backend-private (device pointer, ...) */
    bool owned;     /* false for rb_buffer_from_host wrappers on the CPU and rb_buffer_wrap_host */
    bool constant;  /* rb_buffer_set_constant: no op or copy writes it any more */
};

/* Records a message in be->last_error and returns code. */
rb_status rb_backend_fail(rb_backend *be, rb_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The views rb_matmul_fused's separate ops work on (ops.c), so a backend
 * that finishes a partly fused case uses the same: dst's first rope_heads
 * heads as [rope_head_dim, rope_heads, M] (rope), and dst's rows from
 * store_row0 on as [N - store_row0, M] (store). */
rb_tensor rb_fusion_rope_view(const rb_tensor *dst, const rb_matmul_fusion *f);
rb_tensor rb_fusion_store_view(const rb_tensor *dst, const rb_matmul_fusion *f);

/* Each backend kind's constructor; defined by the backend library, called by
 * the registry (src/backends/registry.c). */
rb_status rb_cpu_backend_create(const rb_backend_config *cfg, rb_backend **out, rb_error *err);
rb_status rb_cpu_devices_list(rb_device_info *infos, int max, int *n, rb_error *err);

#endif
