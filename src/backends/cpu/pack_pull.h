/* Internal: getting weight rows into the caches before a pack_rows kernel
 * reads them. A packer reads its 16 weight rows side by side, 16 streams at
 * once, which the hardware prefetchers do not follow, so a pack straight
 * from memory waits on every cache line.
 *  - rb_cpu_pull_rows reads the rows once in address order first (one line
 *    per 64 bytes, a stream the prefetchers do follow), so the packer then
 *    transposes from cache; the wait remains, at the streaming rate.
 *  - rb_pack_prefetch_lines issues prefetches for the rows the matmul packs
 *    next (rb_pack_prefetch, cpu_kernels.h); a packed kernel calls it a few
 *    lines at a time between its multiplications, so the memory traffic
 *    overlaps the arithmetic and the next pack finds its rows in cache. */
#ifndef RBEE_CPU_PACK_PULL_H
#define RBEE_CPU_PACK_PULL_H

#include "backends/cpu/cpu_kernels.h"

#include <stddef.h>
#include <stdint.h>

static inline void rb_cpu_pull_rows(const void *x, int nr, size_t lda, size_t row_bytes) {
    uint8_t acc = 0;
    for (int r = 0; r < nr; r++) {
        const volatile uint8_t *p = (const volatile uint8_t *)x + (size_t)r * lda;
        for (size_t off = 0; off < row_bytes; off += 64) acc ^= p[off];
        acc ^= p[row_bytes - 1];
    }
    __asm__ volatile("" ::"r"(acc));
}

/* Cache lines the rows of a request cover (0 for NULL). */
static inline size_t rb_pack_prefetch_total(const rb_pack_prefetch *pf) {
    if (!pf || !pf->p || pf->rows <= 0) return 0;
    return (size_t)pf->rows * ((pf->row_bytes + 63) / 64);
}

/* Lines per step when this call's share (pf->lines) is spread over `steps` steps. */
static inline size_t rb_pack_prefetch_per_step(const rb_pack_prefetch *pf, size_t steps) {
    if (!pf || !pf->p) return 0;
    return steps ? (pf->lines + steps - 1) / steps : pf->lines;
}

/* Prefetches the next n lines of the request, at most this call's remaining
 * share (no-op once it is issued). */
static inline void rb_pack_prefetch_lines(rb_pack_prefetch *pf, size_t n) {
    if (!pf || !pf->p) return;
    if (n > pf->lines) n = pf->lines;
    pf->lines -= n;
    for (; n > 0 && pf->row < pf->rows; n--) {
        __builtin_prefetch(pf->p + (size_t)pf->row * pf->lda + pf->off, 0, 3);
        pf->off += 64;
        if (pf->off >= pf->row_bytes) {
            pf->row++;
            pf->off = 0;
        }
    }
}

#endif
