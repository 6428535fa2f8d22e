/* Public entry points of the torch-compatible generators
 * (include/rbee/sd_rng.h): seeding, argument checks, dispatch by kind, kind
 * names, and the noise-callback adapter the samplers take. */
#include "rng_torch_internal.h"

#include <string.h>

#define DEFAULT_SM_COUNT 132u
#define DEFAULT_THREADS_PER_SM 2048u
#define CUDA_MAX_NUMEL 2147483647u

rb_status rb_torch_rng_init(rb_torch_rng *g, rb_torch_rng_kind kind, uint64_t seed) {
    if (!g || (int)kind < 0 || kind >= RB_TORCH_RNG_KIND_COUNT_) return RB_E_INVALID;
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->seed = seed;
    g->cuda_grid_max = (uint64_t)DEFAULT_SM_COUNT * (DEFAULT_THREADS_PER_SM / 256u);
    if (kind != RB_TORCH_RNG_CUDA) rb_mt19937_seed(g, (uint32_t)seed);
    return RB_OK;
}

rb_status rb_torch_randn(rb_torch_rng *g, float *out, size_t numel) {
    if (!g || (!out && numel > 0) || (int)g->kind < 0 || g->kind >= RB_TORCH_RNG_KIND_COUNT_) return RB_E_INVALID;
    if (numel == 0) return RB_OK;
    switch (g->kind) {
    case RB_TORCH_RNG_CPU: rb_torch_cpu_randn(g, out, numel, 0); break;
    case RB_TORCH_RNG_CPU_LIBM: rb_torch_cpu_randn(g, out, numel, 1); break;
    default:
        if (numel > CUDA_MAX_NUMEL) return RB_E_RANGE;
        rb_torch_cuda_randn(g, out, numel);
        break;
    }
    return RB_OK;
}

rb_status rb_torch_rng_set_cuda_device(rb_torch_rng *g, uint32_t sm_count, uint32_t max_threads_per_sm) {
    if (!g || g->kind != RB_TORCH_RNG_CUDA || sm_count == 0 || max_threads_per_sm < 256u) return RB_E_INVALID;
    g->cuda_grid_max = (uint64_t)sm_count * (max_threads_per_sm / 256u);
    return RB_OK;
}

size_t rb_torch_rng_cuda_simple_limit(const rb_torch_rng *g) {
    if (!g || g->kind != RB_TORCH_RNG_CUDA) return 0;
    return (size_t)(g->cuda_grid_max * 256u);
}

static const char *const KIND_NAMES[RB_TORCH_RNG_KIND_COUNT_] = {"cpu", "cpu-libm", "cuda"};

const char *rb_torch_rng_kind_name(rb_torch_rng_kind kind) {
    if ((int)kind < 0 || kind >= RB_TORCH_RNG_KIND_COUNT_) return "?";
    return KIND_NAMES[kind];
}

rb_status rb_torch_rng_kind_parse(const char *name, rb_torch_rng_kind *out, rb_error *err) {
    if (!name || !out) return rb_error_set(err, RB_E_INVALID, "noise generator: NULL name");
    for (int k = 0; k < RB_TORCH_RNG_KIND_COUNT_; k++) {
        if (strcmp(name, KIND_NAMES[k]) == 0) {
            *out = (rb_torch_rng_kind)k;
            return RB_OK;
        }
    }
    if (strcmp(name, "gpu") == 0) {
        *out = RB_TORCH_RNG_CUDA;
        return RB_OK;
    }
    return rb_error_set(err, RB_E_INVALID, "unknown noise generator '%s' (valid: cpu, cpu-libm, cuda, gpu)", name);
}

rb_status rb_torch_rng_noise(void *user, float *out, size_t n) {
    return rb_torch_randn((rb_torch_rng *)user, out, n);
}
