/* Host side of the decode-kernel trace (gpu_trace.h): the pinned ring the
 * kernels write, the record of what each launch was, and the text file it
 * becomes when the backend is destroyed. A diagnostic only: nothing here
 * fails an op; without RBEE_GPU_TRACE nothing is allocated. */
#include "backends/gpu/gpu_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace RB_GPU_NS {

void gpu_trace_init(gpu_backend *g) {
    const char *path = getenv("RBEE_GPU_TRACE");
    if (!path || !*path || strlen(path) >= sizeof g->trace->path) return;
    gpu_trace *t = (gpu_trace *)calloc(1, sizeof *t);
    if (!t) return;
    const size_t bytes = (size_t)GPU_TRACE_LAUNCHES * GPU_TRACE_BLOCKS * GPU_TRACE_MARKS * sizeof(unsigned long long);
    if (cudaMallocHost((void **)&t->ts, bytes) != cudaSuccess) { /* unified addressing: kernels write it directly */
        (void)cudaGetLastError();
        fprintf(stderr, "rbee: RBEE_GPU_TRACE: no pinned memory for the trace; not tracing\n");
        free(t);
        return;
    }
    memset(t->ts, 0, bytes);
    snprintf(t->path, sizeof t->path, "%s", path);
    g->trace = t;
}

unsigned long long *gpu_trace_slot(gpu_backend *g, int kind, int dt, int flags, int64_t n, int64_t k,
                                   unsigned blocks) {
    gpu_trace *t = g->trace;
    if (!t) return NULL;
    const unsigned i = t->next % GPU_TRACE_LAUNCHES;
    gpu_trace_launch *m = &t->meta[i];
    m->seq = t->next++;
    m->kind = kind;
    m->dt = dt;
    m->flags = flags;
    m->n = n;
    m->k = k;
    m->blocks = blocks;
    unsigned long long *slot = t->ts + (size_t)i * GPU_TRACE_BLOCKS * GPU_TRACE_MARKS;
    memset(slot, 0, (size_t)GPU_TRACE_BLOCKS * GPU_TRACE_MARKS * sizeof *slot); /* no kernel of it is queued yet */
    return slot;
}

void gpu_trace_finish(gpu_backend *g) {
    gpu_trace *t = g->trace;
    if (!t) return;
    FILE *f = fopen(t->path, "w");
    if (f) {
        const unsigned n = t->next < GPU_TRACE_LAUNCHES ? t->next : GPU_TRACE_LAUNCHES;
        for (unsigned j = 0; j < n; j++) {
            const unsigned i = (t->next - n + j) % GPU_TRACE_LAUNCHES;
            const gpu_trace_launch *m = &t->meta[i];
            fprintf(f, "launch %u kind %d dt %d flags %d n %lld k %lld blocks %u\n", m->seq, m->kind, m->dt, m->flags,
                    (long long)m->n, (long long)m->k, m->blocks);
            const unsigned nb = m->blocks < GPU_TRACE_BLOCKS ? m->blocks : GPU_TRACE_BLOCKS;
            for (unsigned b = 0; b < nb; b++) {
                const unsigned long long *r = t->ts + ((size_t)i * GPU_TRACE_BLOCKS + b) * GPU_TRACE_MARKS;
                for (int k = 0; k < GPU_TRACE_MARKS; k++) fprintf(f, k ? " %llu" : "%llu", r[k]);
                fputc('\n', f);
            }
        }
        if (fclose(f) != 0) fprintf(stderr, "rbee: RBEE_GPU_TRACE: writing %s failed\n", t->path);
    } else {
        fprintf(stderr, "rbee: RBEE_GPU_TRACE: cannot open %s\n", t->path);
    }
    (void)cudaFreeHost(t->ts);
    free(t);
    g->trace = NULL;
}

} // namespace RB_GPU_NS
