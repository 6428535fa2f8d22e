/* Internal: the first step of every pack_rows kernel. A packer reads its 16
 * weight rows side by side, 16 streams at once, which the hardware
 * prefetchers do not follow, so a pack straight from memory waits on every
 * cache line. Reading the rows once in address order first (one line per 64
 * bytes, a stream the prefetchers do follow) brings them into the caches at
 * the memory's streaming rate; the packer then transposes from cache. */
#ifndef RBEE_CPU_PACK_PULL_H
#define RBEE_CPU_PACK_PULL_H

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

#endif
