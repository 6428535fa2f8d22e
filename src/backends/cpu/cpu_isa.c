/* Run-time instruction-set detection and selection for the CPU backend, and
 * the lookup of the matching kernel table. The only place that asks the CPU
 * what it supports; everything else goes through rb_cpu_kernels_get. */
#include "backends/cpu/cpu_kernels.h"

#include <string.h>
#include <strings.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>

/* F16C (CPUID 1, ECX bit 29) and AVX512_VNNI (CPUID 7.0, ECX bit 11) are
 * read directly: clang 14's __builtin_cpu_supports knows neither name. The
 * OS-support checks of the AVX / AVX-512 register state come with
 * __builtin_cpu_supports("avx2") / ("avx512f"), which are always asked too. */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c >> 29) & 1u;
}

static bool has_avx512vnni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (c >> 11) & 1u;
}
#endif

rb_cpu_isa rb_cpu_isa_detect(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
#if defined(RBEE_CPU_HAVE_AVX512)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && has_avx512vnni() &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
        return RB_CPU_ISA_AVX512;
#endif
#if defined(RBEE_CPU_HAVE_AVX2)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
        return RB_CPU_ISA_AVX2;
#endif
#endif
    return RB_CPU_ISA_SCALAR;
}

const char *rb_cpu_isa_name(rb_cpu_isa isa) {
    switch (isa) {
    case RB_CPU_ISA_SCALAR: return "scalar";
    case RB_CPU_ISA_AVX2: return "avx2";
    case RB_CPU_ISA_AVX512: return "avx512";
    }
    return "?";
}

bool rb_cpu_isa_parse(const char *s, rb_cpu_isa *out) {
    rb_cpu_isa best = rb_cpu_isa_detect();
    rb_cpu_isa want;
    if (s == NULL || s[0] == '\0' || strcasecmp(s, "auto") == 0) {
        want = best;
    } else if (strcasecmp(s, "scalar") == 0) {
        want = RB_CPU_ISA_SCALAR;
    } else if (strcasecmp(s, "avx2") == 0) {
        want = RB_CPU_ISA_AVX2;
    } else if (strcasecmp(s, "avx512") == 0) {
        want = RB_CPU_ISA_AVX512;
    } else {
        return false;
    }
    if (want > best) return false; /* the CPU (or this build) lacks it */
    if (out) *out = want;
    return true;
}

const struct rb_cpu_kernels *rb_cpu_kernels_get(rb_cpu_isa isa) {
#if defined(RBEE_CPU_HAVE_AVX512)
    if (isa >= RB_CPU_ISA_AVX512) return &rb_cpu_kernels_avx512;
#endif
#if defined(RBEE_CPU_HAVE_AVX2)
    if (isa >= RB_CPU_ISA_AVX2) return &rb_cpu_kernels_avx2;
#endif
    (void)isa;
    return &rb_cpu_kernels_scalar;
}
