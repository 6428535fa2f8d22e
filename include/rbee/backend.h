/* The backend interface: one device of one kind (CPU, CUDA, ROCm) behind a
 * single vtable. Backends are created at run time by name ("cpu", "cuda:0",
 * "rocm:1"); a build without a backend reports that clearly. Memory lives in
 * rb_buffer objects owned by a backend; the operations that compute on
 * tensors are declared in ops.h. */
#ifndef RBEE_BACKEND_H
#define RBEE_BACKEND_H

#include "rbee/status.h"
#include "rbee/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rb_device_kind {
    RB_DEVICE_CPU = 0,
    RB_DEVICE_CUDA = 1,
    RB_DEVICE_ROCM = 2,
} rb_device_kind;

typedef struct rb_device_info {
    rb_device_kind kind;
    int index;             /* N in "cuda:N"; 0 for the CPU */
    char name[128];        /* e.g. "Intel(R) Xeon(R) ... (avx512)" or "NVIDIA H100 80GB HBM3" */
    char features[128];    /* e.g. "avx2 fma f16c avx512f" or "sm_90" */
    size_t mem_total;      /* bytes */
    size_t mem_free;       /* bytes, as reported now by the OS / driver */
    int compute_units;     /* CPU threads in use, or GPU multiprocessors */
} rb_device_info;

typedef struct rb_backend_config {
    int n_threads;       /* CPU: worker threads; <= 0 means all available cores */
    const char *cpu_isa; /* CPU: "auto" (NULL), "scalar", "avx2", "avx512" */
    /* CPU: reproduce llama.cpp's CPU arithmetic where it differs from ours,
     * to match its logits to f32 rounding: attention over f16 k/v as ggml's
     * flash attention does it (f16 query, f16 value accumulation, ~1e-3
     * relative from exact), ggml's float rope angles and rms_norm scale.
     * Off by default (the default paths are the accurate ones); other
     * backends ignore it. See docs/LLAMACPP_NUMERICS.md. */
    bool llamacpp_numerics;
    /* Batch-invariant matrix products: a product of up to
     * RB_BATCH_INVARIANT_ROWS activation rows computes each row with exactly
     * the arithmetic of a one-row product, so a sequence's decode step gives
     * the same bits alone as batched with other sequences (greedy decoding
     * and seeded sampling reproducible whatever the load). It costs
     * throughput of batched decode and of short prompts, where the batched
     * kernels would share work between rows. The CPU backend's products
     * honour it; on a GPU rb_model_forward_batch runs the sequences one at a
     * time instead (rb_backend_row_exact_products). docs/PERFORMANCE.md has
     * the cost of each. */
    bool batch_invariant;
} rb_backend_config;

#define RB_BATCH_INVARIANT_ROWS 16

/* Creates a backend from a spec: "cpu", "cuda", "cuda:N", "rocm", "rocm:N".
 * cfg may be NULL for defaults. The CPU backend is built in; a GPU kind is
 * a module (librbee-cuda.so, librbee-rocm.so) loaded at run time, the first
 * time a program asks for it, from RBEE_BACKEND_PATH, the installed lib/rbee
 * folder beside the program's bin/, or the build tree (docs/ENVIRONMENT.md).
 * RB_E_UNSUPPORTED says which when the module is not installed (with the
 * folders looked in) or cannot be loaded (with the loader's reason, e.g. a
 * missing GPU runtime library); a module of another build is RB_E_FORMAT. */
rb_status rb_backend_create(const char *spec, const rb_backend_config *cfg, rb_backend **out, rb_error *err);
void rb_backend_destroy(rb_backend *be);

/* Backend kinds this build made, e.g. "cpu" or "cpu,cuda,rocm" (the CPU
 * built in, the GPU kinds as modules beside the programs). */
const char *rb_backends_compiled(void);
/* Whether a kind can be used here: loads its module (RB_OK, its file in
 * path) or says why not, as rb_backend_create would; "(built in)" for the
 * CPU. Whether a device exists is rb_devices_list's answer. */
rb_status rb_backend_module_probe(rb_device_kind kind, char *path, size_t len, rb_error *err);
/* Enumerates devices of the CPU and of every GPU kind whose module loads;
 * writes up to max entries and the total count to *n. Kinds without a
 * module or without a device report nothing. */
rb_status rb_devices_list(rb_device_info *infos, int max, int *n, rb_error *err);

const char *rb_backend_name(const rb_backend *be); /* "cpu", "cuda:0", ... */
rb_device_kind rb_backend_kind(const rb_backend *be);
rb_status rb_backend_device_info(rb_backend *be, rb_device_info *info);
/* Message of the last failed call on this backend ("" if none). */
const char *rb_backend_last_error(const rb_backend *be);
/* Waits until all queued work has finished. */
rb_status rb_backend_sync(rb_backend *be);

/* Host memory that this backend's copies (rb_buffer_get / rb_tensor_get
 * into it, rb_buffer_set from it) reach fastest: page-locked on GPU
 * backends, where the device copies it directly at the bus's rate (an
 * H100 reads 513 KB of logits back in 17 us into it, 83 us into malloc'ed
 * memory, which the driver copies through its own staging); plain memory
 * on the CPU, while a graph is being captured, or where page-locked memory
 * is short. For buffers read or written every step, such as a decode
 * step's logits. 64-byte aligned; NULL when out of memory. Free it with
 * rb_backend_host_free on the same backend, before destroying that. */
void *rb_backend_host_alloc(rb_backend *be, size_t size);
void rb_backend_host_free(rb_backend *be, void *p); /* NULL is a no-op */

/* Buffers. */
rb_status rb_buffer_alloc(rb_backend *be, size_t size, rb_buffer **out);
/* Wraps caller-owned host memory (e.g. an mmap'ed model file) without copying
 * where the backend can address it (CPU); other backends copy it to device
 * memory. The memory must outlive the buffer. */
rb_status rb_buffer_from_host(rb_backend *be, void *ptr, size_t size, rb_buffer **out);
/* Wraps host memory of rb_backend_host_alloc (ptr .. ptr + size inside one
 * such block) as a buffer that ops write and read in place: the CPU's
 * memory, or page-locked memory a GPU addresses over the bus (a decode
 * step's logits written by the output head where the caller reads them,
 * with no copy after the step; reading such a buffer from a GPU kernel
 * crosses the bus, so it suits outputs). RB_E_UNSUPPORTED where the device
 * cannot address it. The memory must outlive the buffer. */
rb_status rb_buffer_wrap_host(rb_backend *be, void *ptr, size_t size, rb_buffer **out);
void rb_buffer_free(rb_buffer *buf);
size_t rb_buffer_size(const rb_buffer *buf);
rb_backend *rb_buffer_backend(const rb_buffer *buf);
/* Host-addressable pointer to the buffer's memory, or NULL for device memory. */
void *rb_buffer_host_ptr(const rb_buffer *buf);
rb_status rb_buffer_set(rb_buffer *buf, size_t offs, const void *src, size_t n);
rb_status rb_buffer_get(const rb_buffer *buf, size_t offs, void *dst, size_t n);
/* Queues a copy of n bytes from src, memory of rb_backend_host_alloc, into
 * buf that reads src when it runs, not when called; allowed while capturing
 * a graph, whose every replay then reads src again (a decode step's token id
 * and position written there before each replay: no separate upload before
 * the launch). src must not change until the queued work has run. GPU
 * backends read page-locked memory from a kernel; where rb_backend_host_alloc
 * had to give plain memory a capture refuses it (RB_E_UNSUPPORTED) and an
 * eager call copies at once. */
rb_status rb_buffer_set_queued(rb_buffer *buf, size_t offs, const void *src, size_t n);
rb_status rb_buffer_copy(rb_buffer *dst, size_t dst_offs, const rb_buffer *src, size_t src_offs, size_t n);
/* Marks a buffer immutable (model weights, once uploaded): from then on ops
 * refuse outputs in it and rb_buffer_set / rb_buffer_copy refuse to write
 * it (RB_E_INVALID). In exchange a backend may read it ahead of the ops
 * queued before the op that uses it (the GPU matrix-vector kernels start
 * streaming weights while the previous kernel finishes). Irreversible. */
rb_status rb_buffer_set_constant(rb_buffer *buf);
bool rb_buffer_is_constant(const rb_buffer *buf);

/* Convenience: allocate a contiguous tensor with its own buffer (free with
 * rb_tensor_free), and copy whole contiguous tensors from/to host memory. */
rb_status rb_tensor_alloc(rb_backend *be, rb_dtype dtype, int ndim, const int64_t *ne, rb_tensor *out);
void rb_tensor_free(rb_tensor *t);
rb_status rb_tensor_set(rb_tensor *t, const void *src, size_t n); /* n must equal the contiguous size */
rb_status rb_tensor_get(const rb_tensor *t, void *dst, size_t n);

/* Graphs: record the ops queued on a backend once and replay them with one
 * launch (CUDA/HIP graphs), which removes the per-op launch cost of a small
 * step such as one decode token.
 *
 *   rb_backend_capture_begin(be);  ...ops on be...;  rb_backend_capture_end(be, &g);
 *   then per step: upload inputs (rb_tensor_set), rb_graph_launch(g), read outputs.
 *
 * A graph replays the same ops on the same memory: tensor addresses, shapes
 * and op parameters are fixed at capture, tensor contents are read at each
 * replay. Everything it touched must outlive it (free the graph first).
 * Between begin and end, buffer allocation, host copies (rb_buffer_set/get,
 * rb_tensor_set/get) and rb_backend_sync on that backend fail with
 * RB_E_INVALID, and ops that would have to synchronize or allocate device
 * memory fail instead (run the step once eagerly first so device scratch is
 * large enough). Index checks of rb_get_rows / rb_set_rows run on the device
 * in a graph: an out-of-range id is not used (get_rows clamps it, set_rows
 * skips the row) and the next rb_backend_sync or buffer read on the backend
 * reports RB_E_RANGE. After any failed op the capture must still be ended:
 * rb_backend_capture_end then discards it, returns the failure and the
 * backend stays usable eagerly.
 *
 * Backends without graphs (the CPU) answer RB_E_UNSUPPORTED; callers then
 * run their ops eagerly. */
typedef struct rb_graph rb_graph;
/* true where capture is implemented (CUDA, ROCm). */
bool rb_backend_graphs_supported(const rb_backend *be);

/* Whether the backend was created with rb_backend_config.batch_invariant. */
bool rb_backend_batch_invariant(const rb_backend *be);
/* Whether its matrix products honour batch_invariant by themselves (the CPU
 * backend: each row of a product of up to RB_BATCH_INVARIANT_ROWS rows goes
 * through the one-row kernels). Where they do not (the GPU backends),
 * rb_model_forward_batch keeps the promise by running the sequences of a
 * batch one at a time. */
bool rb_backend_row_exact_products(const rb_backend *be);
rb_status rb_backend_capture_begin(rb_backend *be);
/* Ends the capture begun on be. On success *out is a graph ready to launch;
 * on failure *out is NULL and the backend is back in eager mode. */
rb_status rb_backend_capture_end(rb_backend *be, rb_graph **out);
/* Queues one replay on the backend's stream (asynchronous like any op). */
rb_status rb_graph_launch(rb_graph *g);
/* Waits for queued work, then frees the graph (NULL is a no-op). */
void rb_graph_free(rb_graph *g);

#ifdef __cplusplus
}
#endif
#endif
