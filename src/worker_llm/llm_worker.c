/* Implementation of llm_worker.h: the worker definition handed to the
 * worker layer (options, setup, load with warm-up, busy counts, drain and
 * stop, /v1/info fields, teardown) and the gauges it adds to /metrics. */
#include "worker_llm/llm_worker.h"
#include "worker/wk_util.h"
#include "worker/wk_web.h"

#include "rbee/data_path.h"
#include "rbee/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef RBEE_VERSION
#define RBEE_VERSION "0.0.0"
#endif
/* --prefill-chunk's default (docs/PERFORMANCE.md has the measurement behind it) */
#define LLM_DEFAULT_PREFILL_CHUNK 128
#define LLM_DEFAULT_PREFILL_CHUNK_TEXT "128"
/* the built-in chat page (src/worker_llm/web, embedded by the build) */
extern const rb_embedded_file llm_web_files[];
extern const int llm_web_n_files;

static bool exists(const char *p, bool dir) {
    struct stat st;
    return stat(p, &st) == 0 && (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

/* $RBEE_DEFAULT_MODEL, else the bundled model (rb_data_path: the installed
 * share/rbee of this executable's prefix, or the source tree):
 * rbee-default-q8_0.gguf when present, else its hf/ folder. */
static bool default_model(char *buf, size_t len) {
    const char *env = getenv("RBEE_DEFAULT_MODEL");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        if (exists(env, false) || exists(env, true)) return true;
        snprintf(buf, len, "RBEE_DEFAULT_MODEL=%s does not exist; pass --model", env);
        return false;
    }
    rb_error err = {0};
    if (rb_data_path("models/default/rbee-default-q8_0.gguf", buf, len, &err) == RB_OK && exists(buf, false))
        return true;
    if (rb_data_path("models/default/hf", buf, len, NULL) == RB_OK && exists(buf, true)) return true;
    snprintf(buf, len, "%s (or its hf/ folder); set RBEE_DEFAULT_MODEL or pass --model", err.msg);
    return false;
}

static rb_status submit(void *user, wk_job *j) {
    llm_worker *lw = user;
    pthread_rwlock_rdlock(&lw->engine_lock);
    rb_status s = lw->engine ? llm_engine_submit(lw->engine, j) : RB_E_UNSUPPORTED;
    pthread_rwlock_unlock(&lw->engine_lock);
    return s;
}

/* The jobs' cancel hook: wakes the engine so it notices a cancel at once. */
static void llm_worker_poke(void *user) {
    llm_worker *lw = user;
    pthread_rwlock_rdlock(&lw->engine_lock);
    if (lw->engine) llm_engine_poke(lw->engine);
    pthread_rwlock_unlock(&lw->engine_lock);
}

static void load_stats(void *user, int *queued, int *active) {
    llm_worker *lw = user;
    *queued = *active = 0;
    pthread_rwlock_rdlock(&lw->engine_lock);
    if (lw->engine) llm_engine_stats(lw->engine, queued, active);
    pthread_rwlock_unlock(&lw->engine_lock);
}

static bool memory(void *user, uint64_t *weight_bytes, rb_backend **be) {
    llm_worker *lw = user;
    *weight_bytes = lw->model ? rb_model_weight_bytes(lw->model) : 0;
    *be = lw->be;
    return lw->model != NULL;
}

/* ---- the LLM worker's own gauges ---- */

static double g_parallel(void *u) { return (double)((llm_worker *)u)->parallel; }
static double g_kv_bytes(void *u) {
    llm_worker *lw = u;
    pthread_rwlock_rdlock(&lw->engine_lock);
    double b = lw->engine ? (double)llm_engine_kv_bytes(lw->engine) : 0.0;
    pthread_rwlock_unlock(&lw->engine_lock);
    return b;
}

static rb_status setup(wk_worker *w, void *user, rb_error *err) {
    llm_worker *lw = user;
    lw->w = w;
    llm_metrics_init(&lw->metrics, &w->metrics);
    lw->metrics_ok = true;
    wk_metrics *m = &w->metrics;
    wk_metrics_gauge_fn(m, "llorch_parallel_slots", "Sequence slots (--parallel).", g_parallel, lw);
    wk_metrics_gauge_fn(m, "llorch_kv_cache_bytes", "Bytes of KV cache slots.", g_kv_bytes, lw);
    rb_status s;
    if (!lw->pooling_name || !strcmp(lw->pooling_name, "mean")) lw->pooling = LLM_POOL_MEAN;
    else if (!strcmp(lw->pooling_name, "last")) lw->pooling = LLM_POOL_LAST;
    else return rb_error_set(err, RB_E_INVALID, "--pooling must be mean or last, not '%s'", lw->pooling_name);
    const char *det = lw->deterministic_name ? lw->deterministic_name : "auto";
    if (strcmp(det, "auto") && strcmp(det, "on") && strcmp(det, "off"))
        return rb_error_set(err, RB_E_INVALID, "--deterministic must be auto, on or off, not '%s'", det);
    const char *cp = lw->cache_prompt_name ? lw->cache_prompt_name : "on";
    if (strcmp(cp, "on") && strcmp(cp, "off"))
        return rb_error_set(err, RB_E_INVALID, "--cache-prompt must be on or off, not '%s'", cp);
    lw->cache_prompt = !strcmp(cp, "on");
    if ((s = llm_routes_jobs_add(lw, err)) != RB_OK) return s;
    if (!w->cfg.no_webui && (s = wk_web_add(&w->router, llm_web_files, llm_web_n_files, err)) != RB_OK) return s;
    if ((s = llm_routes_embed_add(lw, err)) != RB_OK || (s = llm_routes_tokens_add(lw, err)) != RB_OK ||
        (s = llm_routes_props_add(lw, err)) != RB_OK)
        return s;
    return llm_routes_openai_add(lw, err);
}

llm_prompt_ctx llm_worker_prompt_ctx(llm_worker *lw) {
    int max_n = lw->parallel < LLM_MAX_CHOICES ? (int)lw->parallel : LLM_MAX_CHOICES;
    llm_prompt_ctx pc = {.tok = lw->tok, .chat = &lw->chat, .ctx_size = lw->ctx_size,
                         .lim = {.n_vocab = rb_model_get_config(lw->model)->n_vocab, .max_choices = max_n}};
    return pc;
}

static rb_status load_tokenizer(llm_worker *lw, rb_error *err) {
    const rb_gguf *g = rb_model_gguf(lw->model);
    if (g) return rb_tokenizer_load_gguf(g, &lw->tok, err);
    const char *dir = lw->w->model_path;
    char tj[4200], tc[4200];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    if (!exists(tj, false)) return rb_error_set(err, RB_E_NOT_FOUND, "%s has no tokenizer.json", dir);
    return rb_tokenizer_load_hf(tj, exists(tc, false) ? tc : NULL, &lw->tok, err);
}

static void warmup(llm_worker *lw) {
    rb_error err;
    rb_error_clear(&err);
    rb_kv_cache *kv = NULL;
    const rb_model_config *mc = rb_model_get_config(lw->model);
    float *logits = malloc(sizeof(float) * (size_t)mc->n_vocab);
    double t0 = wk_now_ms();
    int32_t toks[2] = {rb_tokenizer_bos(lw->tok) >= 0 ? rb_tokenizer_bos(lw->tok) : 0, 0};
    if (logits && rb_kv_cache_create(lw->model, 8, RB_F16, &kv, &err) == RB_OK &&
        rb_model_forward(lw->model, kv, toks, 2, false, logits, &err) == RB_OK)
        WK_INFO(&lw->w->log, "warmup", "warmup done in %.1f ms", wk_now_ms() - t0);
    else
        WK_WARN(&lw->w->log, "warmup_failed", "warmup failed: %s", err.msg);
    rb_kv_cache_free(kv);
    free(logits);
}

static rb_status load(wk_worker *w, void *user, rb_error *err) {
    llm_worker *lw = user;
    rb_status s;
    char spec[64];
    if (strcmp(w->cfg.backend, "cpu") == 0) snprintf(spec, sizeof spec, "cpu");
    else snprintf(spec, sizeof spec, "%s:%lld", w->cfg.backend, (long long)w->cfg.device);
    /* --deterministic auto: on for the CPU, where it costs little, off on a GPU */
    const char *det = lw->deterministic_name ? lw->deterministic_name : "auto";
    lw->deterministic = !strcmp(det, "on") || (!strcmp(det, "auto") && !strcmp(spec, "cpu"));
    rb_backend_config bc = {.n_threads = (int)w->cfg.threads, .cpu_isa = NULL, .batch_invariant = lw->deterministic};
    double t0 = wk_now_ms();
    WK_INFO(&w->log, "model_load", "loading %s on %s (deterministic batching %s)", w->model_path, spec,
            lw->deterministic ? "on" : "off");
    if ((s = rb_backend_create(spec, &bc, &lw->be, err)) != RB_OK) return s;
    WK_INFO(&w->log, "model_load", "backend %s ready; reading weights", rb_backend_name(lw->be));
    if ((s = rb_model_load(w->model_path, lw->be, NULL, &lw->model, err)) != RB_OK) return s;
    const rb_model_config *mc = rb_model_get_config(lw->model);
    wk_log_event(&w->log, WK_LOG_INFO, "model_load",
                 json_pack("{s:s,s:I,s:I,s:s}", "arch", rb_arch_name(mc->arch), "weight_bytes",
                           (json_int_t)rb_model_weight_bytes(lw->model), "n_layer", (json_int_t)mc->n_layer, "dtype",
                           rb_dtype_name(rb_model_weight_dtype(lw->model))),
                 "weights loaded in %.0f ms; loading the tokenizer", wk_now_ms() - t0);
    if ((s = load_tokenizer(lw, err)) != RB_OK) {
        rb_error_prefix(err, "tokenizer: ");
        return s;
    }
    if ((s = llm_chat_init(&lw->chat, lw->tok, err)) != RB_OK) return s;
    lw->chat_ok = true;
    int64_t ctx = lw->ctx_size;
    if (ctx <= 0) ctx = mc->n_ctx_train > 0 && mc->n_ctx_train < 4096 ? mc->n_ctx_train : 4096;
    lw->ctx_size = ctx;
    if (!w->cfg.no_warmup) warmup(lw);
    llm_engine_opts eo = {.parallel = (int)lw->parallel, .ctx_size = ctx, .queue_depth = (int)w->cfg.queue_depth,
                          .step = NULL, .cache_prompt = lw->cache_prompt, .prefill_chunk = (int)lw->prefill_chunk};
    llm_engine *e = NULL;
    if ((s = llm_engine_create(lw->model, lw->tok, &eo, &w->log, &lw->metrics, &e, err)) != RB_OK) return s;
    if ((s = llm_engine_start(e, err)) != RB_OK) {
        llm_engine_destroy(e);
        return s;
    }
    pthread_rwlock_wrlock(&lw->engine_lock);
    lw->engine = e;
    pthread_rwlock_unlock(&lw->engine_lock);
    WK_INFO(&w->log, "model_ready", "model %s ready in %.0f ms (context %lld x %lld sequences, queue %lld)",
            w->model_id, wk_now_ms() - t0, (long long)ctx, (long long)lw->parallel, (long long)w->cfg.queue_depth);
    return RB_OK;
}

static void stop_accepting(void *user) {
    llm_worker *lw = user;
    pthread_rwlock_rdlock(&lw->engine_lock);
    if (lw->engine) llm_engine_stop_accepting(lw->engine);
    pthread_rwlock_unlock(&lw->engine_lock);
}

static void stop(void *user) {
    llm_worker *lw = user;
    pthread_rwlock_wrlock(&lw->engine_lock);
    llm_engine *e = lw->engine;
    lw->engine = NULL;
    pthread_rwlock_unlock(&lw->engine_lock);
    llm_engine_destroy(e);
}

static void info(void *user, json_t *j, bool loaded) {
    llm_worker *lw = user;
    loaded = loaded && lw->model;
    json_object_set_new(j, "context_size", json_integer((json_int_t)lw->ctx_size));
    json_object_set_new(j, "parallel", json_integer((json_int_t)lw->parallel));
    if (lw->be) json_object_set_new(j, "backend", json_string(rb_backend_name(lw->be)));
    if (!loaded) {
        json_object_set_new(j, "memory", json_null());
        return;
    }
    rb_device_info di;
    memset(&di, 0, sizeof di);
    if (lw->be && rb_backend_device_info(lw->be, &di) != RB_OK) memset(&di, 0, sizeof di);
    json_object_set_new(j, "memory",
                        json_pack("{s:I,s:I,s:I,s:I,s:I}", "model_bytes", (json_int_t)rb_model_weight_bytes(lw->model),
                                  "kv_cache_bytes", (json_int_t)g_kv_bytes(lw), "process_rss_bytes",
                                  (json_int_t)wk_process_rss(), "device_total_bytes", (json_int_t)di.mem_total,
                                  "device_free_bytes", (json_int_t)di.mem_free));
    const rb_model_config *mc = rb_model_get_config(lw->model);
    json_object_set_new(j, "architecture", json_string(rb_arch_name(mc->arch)));
    json_object_set_new(j, "dtype", json_string(rb_dtype_name(rb_model_weight_dtype(lw->model))));
    json_object_set_new(j, "quantization", json_string(rb_dtype_name(rb_model_weight_dtype(lw->model))));
    json_object_set_new(j, "n_ctx_train", json_integer((json_int_t)mc->n_ctx_train));
    json_object_set_new(j, "n_vocab", json_integer((json_int_t)mc->n_vocab));
    json_object_set_new(j, "device_name", json_string(di.name));
    json_object_set_new(j, "chat_template", json_string(lw->chat.is_fallback ? "fallback" : "model"));
    json_object_set_new(j, "embedding", json_boolean(lw->embedding));
}

static void destroy(void *user) {
    llm_worker *lw = user;
    stop(lw);
    if (lw->chat_ok) llm_chat_destroy(&lw->chat);
    rb_tokenizer_free(lw->tok);
    rb_model_free(lw->model);
    if (lw->be) rb_backend_destroy(lw->be);
    if (lw->metrics_ok) llm_metrics_destroy(&lw->metrics);
    pthread_rwlock_destroy(&lw->engine_lock);
}

int llm_worker_options(llm_worker *lw, wk_opt *out, int max) {
    const wk_opt opts[] = {
        {"parallel", WK_OPT_INT, &lw->parallel, 1, 256, "N", "concurrent sequences (default 4)"},
        {"ctx-size", WK_OPT_INT, &lw->ctx_size, 8, 1 << 20, "N", "context per sequence (default min(model, 4096))"},
        {"embedding", WK_OPT_FLAG, &lw->embedding, 0, 0, NULL,
         "answer POST /v1/embeddings (unit-length pooled final hidden states; default off: 501)"},
        {"pooling", WK_OPT_STRING, &lw->pooling_name, 0, 0, "mean|last",
         "how --embedding pools a text's tokens (default mean)"},
        {"deterministic", WK_OPT_STRING, &lw->deterministic_name, 0, 0, "auto|on|off",
         "a request's tokens do not depend on what else runs beside it (greedy and seeded sampling reproduce "
         "under any load; batched decode runs each stream's products alone, docs/PERFORMANCE.md has the cost); "
         "auto (default): on for the CPU, off on a GPU"},
        {"cache-prompt", WK_OPT_STRING, &lw->cache_prompt_name, 0, 0, "on|off",
         "a prompt that starts with tokens a sequence slot's KV cache holds (a system prompt, the earlier turns "
         "of a chat) takes them from there and runs only the rest (default on; off: every prompt runs whole). "
         "With --deterministic on the CPU the logits are a cold run's, bit for bit; elsewhere equal to rounding "
         "(docs/OPENAI_API.md)"},
        {"prefill-chunk", WK_OPT_INT, &lw->prefill_chunk, 0, LLM_MAX_PREFILL_CHUNK, "N",
         "a new prompt runs in pieces of up to N tokens inside the decode steps of the running streams, which "
         "keep streaming meanwhile (default " LLM_DEFAULT_PREFILL_CHUNK_TEXT "; 0: each prompt whole when its "
         "request starts, the other streams waiting). With --deterministic the pieces do not depend on the "
         "load, and on the CPU hold at least 17 tokens (docs/OPENAI_API.md)"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    if (max < n) return 0;
    memcpy(out, opts, sizeof opts);
    return n;
}

int llm_worker_main(int argc, char **argv) {
    llm_worker lw;
    memset(&lw, 0, sizeof lw);
    lw.parallel = 4;
    lw.prefill_chunk = LLM_DEFAULT_PREFILL_CHUNK;
    pthread_rwlock_init(&lw.engine_lock, NULL);
    wk_opt opts[8];
    const int n_opts = llm_worker_options(&lw, opts, 8);
    const wk_worker_def def = {
        .name = "llm-worker-rbee",
        .version = RBEE_VERSION,
        .summary = "Serves a language model (GGUF file or Hugging Face folder) over HTTP: rbee jobs and the OpenAI API.",
        .opts = opts,
        .n_opts = n_opts,
        .env_help = "RBEE_DEFAULT_MODEL: the model served without --model (default: the bundled model).\n",
        .user = &lw,
        .default_model = default_model,
        .setup = setup,
        .load = load,
        .submit = submit,
        .poke = llm_worker_poke,
        .load_stats = load_stats,
        .queue_help = "Requests waiting for a sequence slot.",
        .active_metric = "llorch_active_sequences",
        .active_help = "Sequences being generated.",
        .memory = memory,
        .stop_accepting = stop_accepting,
        .stop = stop,
        .info = info,
        .destroy = destroy,
    };
    return wk_worker_main(&def, argc, argv);
}
