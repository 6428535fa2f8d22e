/* Implementation of bench_model.h: llama shapes by name, random weights,
 * GGUF output. To keep k-quant encoding (a slow reference search) cheap on
 * multi-gigabyte models, each matrix quantizes a pool of distinct random rows
 * once and fills its rows from the pool in a scrambled order; every row still
 * has its own address, so caches gain nothing from the repetition. Besides
 * one type for every matrix, the k-quant mixes llama-quantize writes by
 * default for a llama model: q4_k_m / q5_k_m are q4_K / q5_K with q6_K for
 * the output matrix and for attn_v and ffn_down in the layers its
 * use-more-bits rule picks (the first and last eighth, and every third one
 * between). */
#include "bench_model.h"

#include "rbee/gguf.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct bench_shape {
    const char *name;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_theta;
    bool tied;
} bench_shape;

static const bench_shape k_shapes[] = {
    {"tiny", 256, 2, 4, 2, 768, 512, 2048, 10000.0f, false},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false},
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, false}, /* untied, 1.5B params: the shape of the speed bar */
    {"llama-2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false},
};

static const rb_dtype k_types[] = {RB_F32, RB_F16, RB_BF16, RB_Q8_0, RB_Q4_0, RB_Q4_K, RB_Q5_K, RB_Q6_K};

/* The weight types of a model: base for every matrix, or (mix) the k-quant
 * mix of base. */
typedef struct bench_types {
    rb_dtype base;
    bool mix;
} bench_types;

static const struct {
    const char *name;
    rb_dtype base;
} k_mixes[] = {{"q4_k_m", RB_Q4_K}, {"q5_k_m", RB_Q5_K}};

#define POOL_ROWS 64

const char *rb_bench_shape_names(void) { return "tiny, tinyllama-1.1b, llama-3.2-1b, llama-2-7b"; }
const char *rb_bench_type_names(void) { return "f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m"; }

static const bench_shape *find_shape(const char *name) {
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (strcmp(k_shapes[i].name, name) == 0) return &k_shapes[i];
    return NULL;
}

static bool find_type(const char *name, bench_types *out) {
    for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
        if (strcasecmp(name, k_mixes[i].name) == 0) {
            *out = (bench_types){k_mixes[i].base, true};
            return true;
        }
    rb_dtype t;
    if (!rb_dtype_from_name(name, &t)) {
        /* accept upper-case spellings such as Q4_K */
        char low[16];
        size_t n = strlen(name);
        if (n >= sizeof low) return false;
        for (size_t i = 0; i <= n; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
        if (!rb_dtype_from_name(low, &t)) {
            /* and the ggml spelling q4_k for q4_K */
            for (size_t i = 0; i < n; i++)
                if (low[i] == 'k' && i > 0 && low[i - 1] == '_') low[i] = 'K';
            if (!rb_dtype_from_name(low, &t)) return false;
        }
    }
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i] == t) {
            *out = (bench_types){t, false};
            return true;
        }
    return false;
}

/* llama-quantize's rule for the layers of a mix that get more bits */
static bool more_bits(int64_t il, int64_t n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

/* The type of attn_v / ffn_down of layer il (more: those two) and of the
 * output matrix (il < 0). */
static rb_dtype type_of(const bench_types *t, int64_t il, int64_t n_layer, bool more) {
    if (!t->mix) return t->base;
    if (il < 0 || (more && more_bits(il, n_layer))) return RB_Q6_K;
    return t->base;
}

int64_t rb_bench_count_params(const rb_model_config *c) {
    const int64_t E = c->n_embd, D = c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
    const int64_t per_layer = E * (c->n_head * D) * 2 + E * (c->n_head_kv * D) * 2 + 3 * E * c->n_ff + 2 * E;
    return E * c->n_vocab * (c->tied_embeddings ? 1 : 2) + c->n_layer * per_layer + E;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_uniform(uint64_t *s) { return (float)(rng_next(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

/* A K x N matrix of type t: POOL_ROWS random rows of amplitude amp, repeated. */
static rb_status add_matrix(rb_gguf_writer *w, const char *name, rb_dtype t, int64_t K, int64_t N, float amp,
                            uint64_t *seed, rb_error *err) {
    const int64_t pool = N < POOL_ROWS ? N : POOL_ROWS;
    const size_t rs = rb_dtype_row_size(t, K);
    float *src = malloc(sizeof(float) * (size_t)(K * pool));
    char *q = malloc(rs * (size_t)pool);
    char *all = malloc(rs * (size_t)N);
    rb_status s = RB_OK;
    if (!src || !q || !all) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory for tensor %s (%zu bytes)", name, rs * (size_t)N);
        goto out;
    }
    for (int64_t i = 0; i < K * pool; i++) src[i] = amp * rng_uniform(seed);
    if ((s = rb_quantize_rows(t, src, q, pool, K)) != RB_OK) {
        rb_error_set(err, s, "cannot quantize %s to %s", name, rb_dtype_name(t));
        goto out;
    }
    for (int64_t r = 0; r < N; r++)
        memcpy(all + (size_t)r * rs, q + (size_t)((r * 37 + r / pool) % pool) * rs, rs);
    const int64_t ne[2] = {K, N};
    if ((s = rb_gguf_writer_add_tensor(w, name, t, 2, ne, all, rs * (size_t)N)) != RB_OK)
        rb_error_set(err, s, "cannot add tensor %s", name);
out:
    free(src);
    free(q);
    free(all);
    return s;
}

/* An f32 norm weight of n values near 1. */
static rb_status add_norm(rb_gguf_writer *w, const char *name, int64_t n, uint64_t *seed, rb_error *err) {
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) v[i] = 1.0f + 0.1f * rng_uniform(seed);
    const int64_t ne[1] = {n};
    rb_status s = rb_gguf_writer_add_tensor(w, name, RB_F32, 1, ne, v, sizeof(float) * (size_t)n);
    free(v);
    if (s != RB_OK) rb_error_set(err, s, "cannot add tensor %s", name);
    return s;
}

static rb_status set_metadata(rb_gguf_writer *w, const bench_shape *sh, const char *type_name) {
    char name[96];
    snprintf(name, sizeof name, "random %s %s", sh->name, type_name);
    rb_status s = RB_OK;
#define SET(call) \
    if (s == RB_OK) s = (call)
    SET(rb_gguf_writer_set_str(w, "general.architecture", "llama"));
    SET(rb_gguf_writer_set_str(w, "general.name", name));
    SET(rb_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)sh->n_embd));
    SET(rb_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)sh->n_layer));
    SET(rb_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)sh->n_ff));
    SET(rb_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)sh->n_head));
    SET(rb_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)sh->n_head_kv));
    SET(rb_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)sh->n_ctx));
    SET(rb_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)(sh->n_embd / sh->n_head)));
    SET(rb_gguf_writer_set_f32(w, "llama.rope.freq_base", sh->rope_theta));
    SET(rb_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
#undef SET
    return s;
}

static rb_status add_tensors(rb_gguf_writer *w, const bench_shape *sh, const bench_types *ty, uint64_t *seed,
                             rb_error *err) {
    const int64_t E = sh->n_embd, D = E / sh->n_head, Q = sh->n_head * D, KV = sh->n_head_kv * D, F = sh->n_ff;
    const int64_t NL = sh->n_layer;
    const float amp = 0.05f;
    const rb_dtype t = ty->base, t_out = type_of(ty, -1, NL, false);
    rb_status s;
    /* a tied embedding is the output matrix too, and takes its type */
    if ((s = add_matrix(w, "token_embd.weight", sh->tied ? t_out : t, E, sh->n_vocab, 1.0f, seed, err)) != RB_OK)
        return s;
    if ((s = add_norm(w, "output_norm.weight", E, seed, err)) != RB_OK) return s;
    if (!sh->tied && (s = add_matrix(w, "output.weight", t_out, E, sh->n_vocab, amp, seed, err)) != RB_OK) return s;
    for (int64_t il = 0; il < NL; il++) {
        const rb_dtype t_more = type_of(ty, il, NL, true);
        char nm[96];
#define NM(sfx) (snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)il, (sfx)), nm)
        if ((s = add_norm(w, NM("attn_norm.weight"), E, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("attn_q.weight"), t, E, Q, amp, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("attn_k.weight"), t, E, KV, amp, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("attn_v.weight"), t_more, E, KV, amp, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("attn_output.weight"), t, Q, E, amp, seed, err)) != RB_OK) return s;
        if ((s = add_norm(w, NM("ffn_norm.weight"), E, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("ffn_gate.weight"), t, E, F, amp, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("ffn_up.weight"), t, E, F, amp, seed, err)) != RB_OK) return s;
        if ((s = add_matrix(w, NM("ffn_down.weight"), t_more, F, E, amp, seed, err)) != RB_OK) return s;
#undef NM
    }
    return RB_OK;
}

rb_status rb_bench_write_random_model(const char *shape, const char *type_name, uint64_t seed, char *path_out,
                                      size_t path_cap, int64_t *n_params, rb_error *err) {
    const bench_shape *sh = find_shape(shape);
    if (!sh) return rb_error_set(err, RB_E_INVALID, "unknown shape '%s' (one of: %s)", shape, rb_bench_shape_names());
    bench_types t;
    if (!find_type(type_name, &t))
        return rb_error_set(err, RB_E_INVALID, "unknown weight type '%s' (one of: %s)", type_name,
                            rb_bench_type_names());
    const char *dir = getenv("TMPDIR");
    if (!dir || !dir[0]) dir = "/tmp";
    int n = snprintf(path_out, path_cap, "%s/rbee-bench-XXXXXX.gguf", dir);
    if (n < 0 || (size_t)n >= path_cap) return rb_error_set(err, RB_E_RANGE, "temporary path too long");
    int fd = mkstemps(path_out, 5);
    if (fd < 0) return rb_error_set(err, RB_E_IO, "cannot create a temporary file in %s", dir);
    close(fd);

    rb_gguf_writer *w = NULL;
    rb_status s = rb_gguf_writer_create(&w, err);
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (st == 0) st = 1;
    if (s == RB_OK && (s = set_metadata(w, sh, type_name)) != RB_OK) rb_error_set(err, s, "cannot write metadata");
    if (s == RB_OK) s = add_tensors(w, sh, &t, &st, err);
    if (s == RB_OK) s = rb_gguf_writer_write(w, path_out, 0, err);
    rb_gguf_writer_free(w);
    if (s != RB_OK) {
        unlink(path_out);
        path_out[0] = '\0';
        return s;
    }
    rb_model_config c = {.n_embd = sh->n_embd, .n_head = sh->n_head, .n_head_kv = sh->n_head_kv,
                         .head_dim = sh->n_embd / sh->n_head, .n_ff = sh->n_ff, .n_vocab = sh->n_vocab,
                         .n_layer = sh->n_layer, .tied_embeddings = sh->tied};
    *n_params = rb_bench_count_params(&c);
    return RB_OK;
}
