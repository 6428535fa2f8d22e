/* `rbee bench`: model throughput in the spirit of llama-bench. pp = prefill
 * tokens/s of p tokens in one batch on an empty KV cache; tg = decode
 * tokens/s of n single-token steps from an empty cache; with -d D both start
 * from a cache already holding D tokens (llama-bench's "@ dD": decode at a
 * real context length, where attention reads D keys a step). Each test runs once
 * to warm up, then r times; the median is reported (with every sample).
 * `--random SHAPE --type T` first synthesizes a random-weight llama model of a
 * named shape into a temporary GGUF (see bench_model.c), so no download is
 * needed; the file is unlinked as soon as the model has mapped it.
 * --compare-eager repeats the decode tests with graph capture off
 * (rb_model_set_eager_decode, which applies to KV caches created after it),
 * so one model load gives both figures. --deterministic creates the backend
 * batch-invariant (rb_backend_config.batch_invariant, the worker's
 * --deterministic on), to measure what that costs. --grammar / --json-schema
 * add a sampled decode test with and without the grammar's token mask
 * (bench_grammar.c; --tokenizer supplies the vocabulary of a random model). */
#include "bench_grammar.h"
#include "bench_model.h"
#include "cli_common.h"
#include "cli_grammar.h"
#include "commands.h"

#include "rbee/gguf.h"
#include "rbee/model.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_REPS 100

typedef struct bench_result {
    const char *kind; /* "pp", "tg", or "tgb" (batched decode of `parallel` sequences) */
    int64_t n_tokens;
    int64_t depth;    /* tokens in the cache before the test (-d) */
    int parallel;     /* sequences decoded together (tgb); 1 otherwise */
    bool eager;       /* decode graphs turned off (--compare-eager) */
    int reps;
    double samples[BENCH_MAX_REPS]; /* tokens/s */
    double median_ts, mean_ts, stddev_ts;
    double cpu_s; /* process CPU seconds over the timed reps */
    double wall_s;
} bench_result;

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summarize(bench_result *r) {
    double tmp[BENCH_MAX_REPS], sum = 0, sq = 0;
    memcpy(tmp, r->samples, sizeof(double) * (size_t)r->reps);
    qsort(tmp, (size_t)r->reps, sizeof *tmp, cmp_double);
    r->median_ts = r->reps % 2 ? tmp[r->reps / 2] : 0.5 * (tmp[r->reps / 2 - 1] + tmp[r->reps / 2]);
    for (int i = 0; i < r->reps; i++) sum += r->samples[i];
    r->mean_ts = sum / r->reps;
    for (int i = 0; i < r->reps; i++) sq += (r->samples[i] - r->mean_ts) * (r->samples[i] - r->mean_ts);
    r->stddev_ts = r->reps > 1 ? sqrt(sq / (r->reps - 1)) : 0.0;
}

/* Fills kv with the depth tokens the tests start from (once per cache). */
static rb_status fill_depth(rb_model *m, rb_kv_cache *kv, const int32_t *toks, int64_t depth, float *logits,
                            rb_error *err) {
    rb_kv_cache_truncate(kv, 0);
    return depth > 0 ? rb_model_forward(m, kv, toks, depth, false, logits, err) : RB_OK;
}

/* One timed pass from the cache's first `depth` tokens (fill_depth): pp = one
 * forward of n tokens; tg = n forwards of 1 token. */
static rb_status run_pass(rb_model *m, rb_kv_cache *kv, const int32_t *toks, int64_t depth, int64_t n, bool pp,
                          float *logits, rb_error *err) {
    rb_kv_cache_truncate(kv, depth);
    if (pp) return rb_model_forward(m, kv, toks, n, false, logits, err);
    for (int64_t i = 0; i < n; i++) {
        rb_status s = rb_model_forward(m, kv, &toks[i], 1, false, logits, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

/* toks: the depth tokens, then the test's (kv holds the depth tokens) */
static bool run_test(rb_model *m, rb_kv_cache *kv, const int32_t *toks, float *logits, bench_result *r) {
    rb_error err;
    rb_error_clear(&err);
    const bool pp = strcmp(r->kind, "pp") == 0;
    const int32_t *tt = toks + r->depth;
    if (run_pass(m, kv, tt, r->depth, r->n_tokens, pp, logits, &err) != RB_OK) { /* warm-up */
        fprintf(stderr, "bench: %s%lld failed: %s\n", r->kind, (long long)r->n_tokens, err.msg);
        return false;
    }
    const double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
    for (int i = 0; i < r->reps; i++) {
        const double t0 = clock_s(CLOCK_MONOTONIC);
        if (run_pass(m, kv, tt, r->depth, r->n_tokens, pp, logits, &err) != RB_OK) {
            fprintf(stderr, "bench: %s%lld failed: %s\n", r->kind, (long long)r->n_tokens, err.msg);
            return false;
        }
        const double dt = clock_s(CLOCK_MONOTONIC) - t0;
        r->samples[i] = (double)r->n_tokens / (dt > 0 ? dt : 1e-9);
    }
    r->cpu_s = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    r->wall_s = clock_s(CLOCK_MONOTONIC) - w0;
    const int64_t nv = rb_model_get_config(m)->n_vocab;
    for (int64_t i = 0; i < nv; i++)
        if (!isfinite(logits[i])) {
            fprintf(stderr, "bench: the model produced a non-finite logit (index %lld)\n", (long long)i);
            return false;
        }
    summarize(r);
    return true;
}

/* Batched decode, as the worker's scheduler runs it: `parallel` sequences
 * (each with its own KV cache holding the depth tokens and one warm-up
 * token) advance n_tokens steps through rb_model_forward_batch; the rate
 * counts every sequence's tokens (aggregate tokens/s). toks: the depth
 * tokens, then n more. */
static bool run_batched(rb_model *m, const int32_t *toks, bench_result *r) {
    const int P = r->parallel;
    const int64_t V = rb_model_get_config(m)->n_vocab, n = r->n_tokens, depth = r->depth;
    rb_kv_cache **kvs = calloc((size_t)P, sizeof *kvs);
    int32_t *step = malloc(sizeof(int32_t) * (size_t)P);
    rb_backend *be = rb_model_backend(m);
    float *logits = rb_backend_host_alloc(be, sizeof(float) * (size_t)V * (size_t)P);
    rb_error err;
    rb_error_clear(&err);
    bool ok = kvs && step && logits;
    if (!ok) rb_error_set(&err, RB_E_NOMEM, "out of memory");
    /* made together, as the worker's slots are: one attention op a layer for the batch */
    ok = ok && rb_kv_cache_create_many(m, P, depth + n + 2, RB_F16, kvs, &err) == RB_OK;
    for (int i = 0; ok && i < P; i++) ok = fill_depth(m, kvs[i], toks, depth, logits, &err) == RB_OK;
    toks += depth;
    double c0 = 0, w0 = 0;
    for (int rep = -1; ok && rep < r->reps; rep++) { /* rep -1: warm-up */
        if (rep == 0) {
            c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
            w0 = clock_s(CLOCK_MONOTONIC);
        }
        for (int i = 0; ok && i < P; i++) {
            rb_kv_cache_truncate(kvs[i], depth);
            ok = rb_model_forward(m, kvs[i], &toks[i % n], 1, false, logits, &err) == RB_OK;
        }
        const double t0 = clock_s(CLOCK_MONOTONIC);
        for (int64_t t = 0; ok && t < n; t++) {
            for (int i = 0; i < P; i++) step[i] = toks[(t + (int64_t)i) % n];
            ok = rb_model_forward_batch(m, kvs, step, P, logits, &err) == RB_OK;
        }
        const double dt = clock_s(CLOCK_MONOTONIC) - t0;
        if (ok && rep >= 0) r->samples[rep] = (double)(n * P) / (dt > 0 ? dt : 1e-9);
    }
    r->cpu_s = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    r->wall_s = clock_s(CLOCK_MONOTONIC) - w0;
    if (!ok) fprintf(stderr, "bench: batched decode x%d failed: %s\n", P, err.msg);
    for (int i = 0; kvs && i < P; i++) rb_kv_cache_free(kvs[i]);
    free(kvs);
    free(step);
    rb_backend_host_free(be, logits);
    if (ok) summarize(r);
    return ok;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: rbee bench (-m MODEL.gguf|HF_DIR | --random SHAPE --type T) [options]\n\n"
            "  -p, --n-prompt N     prefill test: N tokens in one batch (default 512, 0 = skip)\n"
            "  -n, --n-gen N        decode test: N single-token steps (default 128, 0 = skip)\n"
            "  -d, --depth D        run the tests after D tokens already in the KV cache (default 0)\n"
            "  -r, --reps R         timed repetitions after one warm-up; the median is reported (default 5)\n"
            "  --backend SPEC       cpu (default), cuda:N, rocm:N\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --json               machine-readable output\n"
            "  --parallel LIST      also batched decode of n tokens for each count in LIST\n"
            "                       (e.g. 1,4,8,16; aggregate tokens/s, as the worker batches)\n"
            "  --random SHAPE       synthesize random weights of a named shape: %s\n"
            "  --type T             weight type for --random: %s\n"
            "  --seed S             seed for --random (default 1)\n"
            "  --compare-eager      repeat the decode tests with graph capture off (as RBEE_NO_GRAPH=1)\n"
            "  --deterministic      batch-invariant backend, as llm-worker-rbee --deterministic on (its cost)\n"
            "  --grammar FILE       also time sampled decode with and without this GBNF grammar's token mask\n"
            "  --json-schema FILE   the same with a JSON schema\n"
            "  --tokenizer PATH     tokenizer for the grammar test (tokenizer.json folder, HF folder or GGUF;\n"
            "                       default: the model's)\n",
            rb_bench_shape_names(), rb_bench_type_names());
}

/* s as a JSON string literal (quotes, backslashes and control bytes escaped). */
static void print_json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void print_json(const char *model, const char *backend, int threads, const rb_model *m, int64_t params,
                       const bench_result *res, int nres) {
    const rb_model_config *c = rb_model_get_config(m);
    printf("{\n  \"model\": ");
    print_json_str(model);
    printf(",\n  \"backend\": ");
    print_json_str(backend);
    printf(",\n  \"threads\": %d,\n", threads);
    printf("  \"weight_type\": \"%s\",\n  \"weight_bytes\": %zu,\n  \"n_params\": %lld,\n",
           rb_dtype_name(rb_model_weight_dtype(m)), rb_model_weight_bytes(m), (long long)params);
    printf("  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_head_kv\": %lld,\n"
           "  \"n_ff\": %lld,\n  \"n_vocab\": %lld,\n  \"results\": [",
           (long long)c->n_embd, (long long)c->n_layer, (long long)c->n_head, (long long)c->n_head_kv,
           (long long)c->n_ff, (long long)c->n_vocab);
    for (int i = 0; i < nres; i++) {
        const bench_result *r = &res[i];
        printf("%s\n    {\"test\": \"%s%lld\", \"kind\": \"%s\", \"parallel\": %d, \"eager\": %s, \"n_tokens\": %lld, "
               "\"depth\": %lld, \"reps\": %d, \"median_ts\": %.4f, \"mean_ts\": %.4f, \"stddev_ts\": %.4f, "
               "\"cpu_s\": %.4f, \"wall_s\": %.4f, \"samples_ts\": [",
               i ? "," : "", r->kind, (long long)r->n_tokens, r->kind, r->parallel, r->eager ? "true" : "false",
               (long long)r->n_tokens, (long long)r->depth, r->reps,
               r->median_ts,
               r->mean_ts, r->stddev_ts, r->cpu_s, r->wall_s);
        for (int j = 0; j < r->reps; j++) printf("%s%.4f", j ? ", " : "", r->samples[j]);
        printf("]}");
    }
    printf("\n  ]\n}\n");
}

static void print_human(const char *model, const char *backend, int threads, const rb_model *m,
                        const bench_result *res, int nres) {
    printf("model: %s (%s, %.2f GiB of weights), backend %s, %d threads\n", model,
           rb_dtype_name(rb_model_weight_dtype(m)), (double)rb_model_weight_bytes(m) / (1u << 30), backend, threads);
    printf("%-24s %6s %12s %10s %10s\n", "test", "reps", "t/s", "stddev", "cpu s");
    for (int i = 0; i < nres; i++) {
        char name[48];
        if (res[i].parallel > 1 || strcmp(res[i].kind, "tgb") == 0)
            snprintf(name, sizeof name, "tg%lld x%d", (long long)res[i].n_tokens, res[i].parallel);
        else
            snprintf(name, sizeof name, "%s%lld", res[i].kind, (long long)res[i].n_tokens);
        if (res[i].depth > 0) snprintf(name + strlen(name), sizeof name - strlen(name), " @ d%lld", (long long)res[i].depth);
        if (res[i].eager) snprintf(name + strlen(name), sizeof name - strlen(name), " eager");
        printf("%-24s %6d %12.2f %10.2f %10.2f\n", name, res[i].reps, res[i].median_ts, res[i].stddev_ts,
               res[i].cpu_s);
    }
}

enum { OPT_BACKEND = 1000, OPT_THREADS, OPT_JSON, OPT_RANDOM, OPT_TYPE, OPT_SEED, OPT_PARALLEL, OPT_EAGER, OPT_DET,
       OPT_GRAMMAR, OPT_SCHEMA, OPT_TOKENIZER };

#define BENCH_MAX_PARALLEL_RUNS 8

/* "1,4,8,16" -> counts (each 1..256); false on bad input */
static bool parse_parallel(const char *s, int *out, int *n) {
    *n = 0;
    while (*s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 256 || (*end && *end != ',') || *n == BENCH_MAX_PARALLEL_RUNS) return false;
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

int rb_cmd_bench(int argc, char **argv) {
    const char *model = NULL, *backend = "cpu", *shape = NULL, *type = NULL;
    const char *grammar_path = NULL, *schema_path = NULL, *tok_path = NULL;
    int64_t n_prompt = 512, n_gen = 128, depth = 0, reps = 5, threads = 0, seed = 1, iv;
    bool json = false, compare_eager = false, deterministic = false;
    int par[BENCH_MAX_PARALLEL_RUNS], n_par = 0;
    static const struct option opts[] = {
        {"parallel", required_argument, 0, OPT_PARALLEL},
        {"model", required_argument, 0, 'm'},     {"n-prompt", required_argument, 0, 'p'},
        {"n-gen", required_argument, 0, 'n'},     {"reps", required_argument, 0, 'r'},
        {"depth", required_argument, 0, 'd'},
        {"backend", required_argument, 0, OPT_BACKEND}, {"threads", required_argument, 0, OPT_THREADS},
        {"json", no_argument, 0, OPT_JSON},       {"random", required_argument, 0, OPT_RANDOM},
        {"type", required_argument, 0, OPT_TYPE}, {"seed", required_argument, 0, OPT_SEED},
        {"compare-eager", no_argument, 0, OPT_EAGER},
        {"deterministic", no_argument, 0, OPT_DET},
        {"grammar", required_argument, 0, OPT_GRAMMAR}, {"json-schema", required_argument, 0, OPT_SCHEMA},
        {"tokenizer", required_argument, 0, OPT_TOKENIZER},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:p:n:d:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': if (!cli_parse_int("-p", optarg, 0, 1 << 20, &n_prompt)) return 2; break;
        case 'n': if (!cli_parse_int("-n", optarg, 0, 1 << 20, &n_gen)) return 2; break;
        case 'd': if (!cli_parse_int("-d", optarg, 0, 1 << 20, &depth)) return 2; break;
        case 'r': if (!cli_parse_int("-r", optarg, 1, BENCH_MAX_REPS, &reps)) return 2; break;
        case OPT_BACKEND: backend = optarg; break;
        case OPT_THREADS: if (!cli_parse_int("--threads", optarg, 0, 4096, &threads)) return 2; break;
        case OPT_JSON: json = true; break;
        case OPT_EAGER: compare_eager = true; break;
        case OPT_DET: deterministic = true; break;
        case OPT_GRAMMAR: grammar_path = optarg; break;
        case OPT_SCHEMA: schema_path = optarg; break;
        case OPT_TOKENIZER: tok_path = optarg; break;
        case OPT_PARALLEL:
            if (!parse_parallel(optarg, par, &n_par)) {
                fprintf(stderr, "bench: --parallel expects up to %d comma-separated counts in 1..256\n",
                        BENCH_MAX_PARALLEL_RUNS);
                return 2;
            }
            break;
        case OPT_RANDOM: shape = optarg; break;
        case OPT_TYPE: type = optarg; break;
        case OPT_SEED: if (!cli_parse_int("--seed", optarg, 0, INT64_MAX, &iv)) return 2; seed = iv; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((model != NULL) == (shape != NULL)) {
        fprintf(stderr, "bench: give exactly one of -m MODEL or --random SHAPE\n");
        usage(stderr);
        return 2;
    }
    if (shape && !type) type = "q4_0";
    if (type && !shape) {
        fprintf(stderr, "bench: --type only applies to --random\n");
        return 2;
    }
    if (n_prompt == 0 && n_gen == 0) {
        fprintf(stderr, "bench: nothing to do (-p 0 and -n 0)\n");
        return 2;
    }

    rb_grammar *grammar = NULL;
    if (!cli_load_grammar(grammar_path, schema_path, &grammar)) return 2;
    if (grammar && n_gen == 0) {
        fprintf(stderr, "bench: the grammar test needs decode steps (-n > 0)\n");
        rb_grammar_free(grammar);
        return 2;
    }
    char tmp_path[4096] = "";
    int64_t n_params = 0;
    if (shape) {
        rb_error err;
        rb_error_clear(&err);
        if (rb_bench_write_random_model(shape, type, (uint64_t)seed, tmp_path, sizeof tmp_path, &n_params, &err) !=
            RB_OK) {
            fprintf(stderr, "bench: %s\n", err.msg);
            rb_grammar_free(grammar);
            return 2;
        }
        model = tmp_path;
        if (!json) fprintf(stderr, "bench: wrote random %s %s model to %s\n", shape, type, tmp_path);
    }
    cli_model cm;
    const rb_backend_config bcfg = {.n_threads = (int)threads, .batch_invariant = deterministic};
    const bool opened = cli_open_model_cfg(model, backend, &bcfg, false, &cm);
    if (tmp_path[0]) unlink(tmp_path); /* the mapping stays valid; nothing is left on disk */
    if (!opened) {
        rb_grammar_free(grammar);
        return 1;
    }

    const rb_model_config *cfg = rb_model_get_config(cm.model);
    if (!shape) n_params = rb_bench_count_params(cfg);
    rb_device_info info;
    int n_threads = (int)threads;
    if (rb_backend_device_info(cm.be, &info) == RB_OK && info.compute_units > 0) n_threads = info.compute_units;

    const int64_t n_ctx = depth + (n_prompt > n_gen ? n_prompt : n_gen) + 1;
    rb_kv_cache *kv = NULL;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_ctx));
    /* page-locked on a GPU, as llama.cpp's output buffer: each decode step
     * reads its logits back into it (1B: 513 KB, 17 us against 83 us into
     * malloc'ed memory on the H100) */
    float *logits = rb_backend_host_alloc(cm.be, sizeof(float) * (size_t)cfg->n_vocab);
    rb_error err;
    rb_error_clear(&err);
    int rc = 0;
    if (!toks || !logits) {
        fprintf(stderr, "bench: out of memory\n");
        rc = 1;
    } else if (rb_kv_cache_create(cm.model, n_ctx, RB_F16, &kv, &err) != RB_OK) {
        fprintf(stderr, "bench: %s\n", err.msg);
        rc = 1;
    }
    if (rc == 0) { /* random tokens: the depth's, then the tests' */
        uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)seed;
        for (int64_t i = 0; i < n_ctx; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            toks[i] = (int32_t)((s >> 33) % (uint64_t)cfg->n_vocab);
        }
        memset(logits, 0, sizeof(float) * (size_t)cfg->n_vocab);
        if (fill_depth(cm.model, kv, toks, depth, logits, &err) != RB_OK) {
            fprintf(stderr, "bench: filling %lld tokens of depth: %s\n", (long long)depth, err.msg);
            rc = 1;
        }
    }
    bench_result res[2 * (1 + BENCH_MAX_PARALLEL_RUNS) + 1];
    int nres = 0;
    if (rc == 0) {
        if (n_prompt > 0)
            res[nres++] =
                (bench_result){.kind = "pp", .n_tokens = n_prompt, .depth = depth, .parallel = 1, .reps = (int)reps};
        if (n_gen > 0)
            res[nres++] = (bench_result){.kind = "tg", .n_tokens = n_gen, .depth = depth, .parallel = 1, .reps = (int)reps};
        for (int i = 0; i < nres && rc == 0; i++)
            if (!run_test(cm.model, kv, toks, logits, &res[i])) rc = 1;
        for (int i = 0; i < n_par && rc == 0 && n_gen > 0; i++) {
            res[nres] =
                (bench_result){.kind = "tgb", .n_tokens = n_gen, .depth = depth, .parallel = par[i], .reps = (int)reps};
            if (!run_batched(cm.model, toks, &res[nres])) rc = 1;
            nres++;
        }
        if (compare_eager && rc == 0 && n_gen > 0) { /* the same decode tests, graphs off */
            rb_kv_cache *kv2 = NULL;
            rb_model_set_eager_decode(cm.model, true);
            if (rb_kv_cache_create(cm.model, n_ctx, RB_F16, &kv2, &err) != RB_OK ||
                fill_depth(cm.model, kv2, toks, depth, logits, &err) != RB_OK) {
                fprintf(stderr, "bench: eager comparison: %s\n", err.msg);
                rc = 1;
            }
            if (rc == 0) {
                res[nres] = (bench_result){.kind = "tg", .n_tokens = n_gen, .depth = depth, .parallel = 1,
                                           .reps = (int)reps, .eager = true};
                if (!run_test(cm.model, kv2, toks, logits, &res[nres])) rc = 1;
                nres++;
            }
            for (int i = 0; i < n_par && rc == 0; i++) {
                res[nres] = (bench_result){.kind = "tgb", .n_tokens = n_gen, .depth = depth, .parallel = par[i],
                                           .reps = (int)reps, .eager = true};
                if (!run_batched(cm.model, toks, &res[nres])) rc = 1;
                nres++;
            }
            rb_kv_cache_free(kv2);
            rb_model_set_eager_decode(cm.model, false);
        }
    }
    if (rc == 0) {
        char rname[160];
        const char *name = model;
        if (shape) {
            snprintf(rname, sizeof rname, "random:%.64s:%.16s", shape, type);
            name = rname;
        }
        char bname[64];
        snprintf(bname, sizeof bname, "%s%s", rb_backend_name(cm.be), deterministic ? " deterministic" : "");
        if (json) print_json(name, bname, n_threads, cm.model, n_params, res, nres);
        else print_human(name, bname, n_threads, cm.model, res, nres);
    }
    if (rc == 0 && grammar) {
        rb_tokenizer *own = NULL;
        const rb_tokenizer *tok = cm.tok;
        if (tok_path) {
            if (!cli_open_tokenizer(tok_path, &own)) rc = 1;
            tok = own;
        }
        if (rc == 0 && !tok) {
            fprintf(stderr, "bench: the model has no tokenizer: give --tokenizer\n");
            rc = 1;
        }
        if (rc == 0 && (fill_depth(cm.model, kv, toks, depth, logits, &err) != RB_OK ||
                        !rb_bench_grammar_decode(cm.model, kv, tok, grammar, depth, toks[depth] % rb_tokenizer_n_vocab(tok),
                                                 n_gen, (int)reps, (uint64_t)seed, logits)))
            rc = 1;
        rb_tokenizer_free(own);
    }
    rb_grammar_free(grammar);
    rb_kv_cache_free(kv);
    free(toks);
    rb_backend_host_free(cm.be, logits);
    cli_close_model(&cm);
    return rc;
}
