/* Graph capture of the decode step (include/rbee/backend.h graphs, the
 * position-independent decode of src/models/forward.c).
 *
 * CPU (always runs): the CPU has no graphs (RB_E_UNSUPPORTED, eager decode
 * unchanged), and the position-independent decode (KV rows written by
 * rb_set_rows at the device-side position, attention over the whole cache
 * with q_pos) gives exactly the bits of the per-step-shape decode, for tiny
 * models of tests/data/models (GQA, gemma2 window + soft-capping, mistral
 * window, qwen2 biases, phi3 fused qkv, MQA), f16 and f32 caches, batched
 * decode of sequences at different positions, and with the projections
 * fused at load (one in-place rope launch for q and k). A stand-in graph
 * implementation on the CPU backend checks the front-end rules (host copies
 * refused and the capture discarded, nested begin refused harmlessly) and
 * that a refused capture leaves the decode eager after one attempt, and
 * that caches of an eager model (rb_model_set_eager_decode, RBEE_NO_GRAPH=1
 * at load) never capture.
 *
 * GPU (skips without one): greedy decode of 24 tokens replayed from a graph
 * (one sequence, and batches of 3) gives the bits of the same decode run
 * eagerly, the same tokens as the per-step-shape decode (logits close, the
 * figures printed); an out-of-range token id during a
 * replay is caught on the device and reported as RB_E_RANGE, and the next
 * step is right; a capture that fails (scratch would have to grow) falls
 * back to eager decode with the same results; backend-level graphs: ids
 * checked on the device (get_rows clamps, set_rows skips the row), host
 * copies refused while capturing, a graph keeps working after the scratch
 * it captured has been replaced; a graph that fetches its inputs from
 * page-locked host memory (rb_buffer_set_queued) and results read back into
 * it by a kernel, with the ids check's report; a decode whose logits go to
 * one page-locked buffer has them written there by the output head (not
 * with gemma2's final soft-cap) with the bits of the read-back; a KV prefix
 * copied between pool members (rb_kv_cache_copy_prefix) holds the source's
 * bytes and decodes through the captured batched step. */
#include "testutil.h"
#include "tu_kmix.h"

#include "backends/gpu/gpu_tuning.h"
#include "core/backend_impl.h"
#include "models/kv_cache_internal.h"
#include "rbee/json_config.h"
#include "rbee/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 24
#define N_CTX 64

static const char *const MODELS[] = {"llama_gqa", "gemma2", "mistral_sw8", "qwen2", "phi3", "llama_mqa_f16"};
#define N_MODELS (sizeof MODELS / sizeof MODELS[0])

static rb_backend *gpu_backend(void) {
    const char *env = getenv("RBEE_TEST_GPU");
    const char *specs[3] = {env && *env ? env : "cuda:0", "rocm:0", NULL};
    for (int i = 0; specs[i]; i++) {
        rb_backend *be = NULL;
        if (rb_backend_create(specs[i], NULL, &be, NULL) == RB_OK) return be;
        if (env && *env) break;
    }
    return NULL;
}

#define NEED_GPU(be)                                                                                           \
    do {                                                                                                       \
        if (!(be)) {                                                                                           \
            print_message("no GPU backend available: skipping\n");                                           \
            skip();                                                                                            \
        }                                                                                                      \
    } while (0)

static void model_dir(char *buf, size_t n, const char *name) {
    char root[1024];
    tu_data(root, sizeof root, "models");
    snprintf(buf, n, "%s/%s", root, name);
}

/* The model's greedy prompt from its ref.json. */
static int32_t *read_prompt(const char *dir, size_t *n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    rb_json_config *ref = NULL;
    rb_error err;
    if (rb_json_config_load(path, &ref, &err) != RB_OK) fail_msg("%s: %s", path, err.msg);
    TU_OK(rb_json_config_arr_len(ref, "greedy_prompt", n));
    int32_t *ids = malloc(sizeof(int32_t) * (*n ? *n : 1));
    assert_non_null(ids);
    for (size_t i = 0; i < *n; i++) {
        int64_t v;
        TU_OK(rb_json_config_arr_int(ref, "greedy_prompt", i, &v));
        ids[i] = (int32_t)v;
    }
    rb_json_config_free(ref);
    return ids;
}

/* name: a model of tests/data/models, or (starting with '/') a GGUF file
 * whose greedy prompt is k_file_prompt. */
static const int32_t k_file_prompt[] = {1, 17, 230, 5, 99, 311, 42, 7};

static rb_model *load_opts(rb_backend *be, const char *name, const rb_model_load_opts *opts) {
    char dir[1200];
    if (name[0] == '/') snprintf(dir, sizeof dir, "%s", name);
    else model_dir(dir, sizeof dir, name);
    rb_model *m = NULL;
    rb_error err;
    if (rb_model_load(dir, be, opts, &m, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);
    return m;
}

static rb_model *load(rb_backend *be, const char *name) { return load_opts(be, name, NULL); }

static int32_t argmax(const float *x, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return (int32_t)a;
}

/* A greedy run: logits after the prompt and after each generated token. */
typedef struct run {
    float *logits; /* (N_GEN + 1) * V */
    int32_t tok[N_GEN];
    rb_graph_state state; /* the cache's graph state at the end */
    bool direct;          /* the output head wrote the caller's memory in place at the end (kv->out_wrap) */
    char gerr[RB_ERROR_MSG_MAX]; /* why its capture failed, if it did */
} run;

/* Prefills the prompt (one batch, or token by token when step_prompt), then
 * decodes N_GEN greedy tokens one at a time in the given decode mode; with
 * outs, step i's logits go to outs[i] where that is not NULL (a server's
 * buffer) and are copied into the run. */
static run greedy_out(rb_model *m, const char *name, rb_decode_mode mode, rb_dtype kvdt, bool step_prompt,
                      int64_t n_ctx, float *const *outs) {
    char dir[1200];
    size_t np = 0;
    int32_t *prompt;
    if (name[0] == '/') {
        np = sizeof k_file_prompt / sizeof k_file_prompt[0];
        prompt = malloc(sizeof k_file_prompt);
        assert_non_null(prompt);
        memcpy(prompt, k_file_prompt, sizeof k_file_prompt);
    } else {
        model_dir(dir, sizeof dir, name);
        prompt = read_prompt(dir, &np);
    }
    const int64_t V = rb_model_get_config(m)->n_vocab;
    run r = {.logits = malloc(sizeof(float) * (size_t)(V * (N_GEN + 1)))};
    assert_non_null(r.logits);
    rb_kv_cache *kv = NULL;
    rb_error err;
    TU_OK(rb_kv_cache_create(m, n_ctx, kvdt, &kv, &err));
    rb_kv_cache_set_decode_mode(kv, mode);
    if (step_prompt) {
        for (size_t i = 0; i < np; i++)
            if (rb_model_forward(m, kv, &prompt[i], 1, false, r.logits, &err) != RB_OK)
                fail_msg("%s prompt token %zu: %s", name, i, err.msg);
    } else if (rb_model_forward(m, kv, prompt, (int64_t)np, false, r.logits, &err) != RB_OK) {
        fail_msg("%s prefill: %s", name, err.msg);
    }
    for (int i = 0; i < N_GEN; i++) {
        r.tok[i] = argmax(r.logits + (size_t)(i * V), V);
        float *dst = r.logits + (size_t)((i + 1) * V), *out = outs ? outs[i] : NULL;
        if (rb_model_forward(m, kv, &r.tok[i], 1, false, out ? out : dst, &err) != RB_OK)
            fail_msg("%s step %d (mode %d): %s", name, i, (int)mode, err.msg);
        if (out) memcpy(dst, out, sizeof(float) * (size_t)V);
    }
    assert_int_equal(rb_kv_cache_used(kv), (int64_t)np + N_GEN);
    r.direct = outs && kv->out_wrap != NULL && kv->out_ptr == outs[N_GEN - 1];
    r.state = rb_kv_cache_graph_state(kv);
    snprintf(r.gerr, sizeof r.gerr, "%s", rb_kv_cache_graph_error(kv));
    rb_kv_cache_free(kv);
    free(prompt);
    return r;
}

static run greedy_ctx(rb_model *m, const char *name, rb_decode_mode mode, rb_dtype kvdt, bool step_prompt,
                      int64_t n_ctx) {
    return greedy_out(m, name, mode, kvdt, step_prompt, n_ctx, NULL);
}

static run greedy(rb_model *m, const char *name, rb_decode_mode mode, rb_dtype kvdt, bool step_prompt) {
    return greedy_ctx(m, name, mode, kvdt, step_prompt, N_CTX);
}

/* Largest |a - b| over max |b| (0 when both are all zeros). */
static double max_rel(const float *a, const float *b, size_t n) {
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (e > d || isnan(e)) d = isnan(e) ? INFINITY : e;
        if (fabs((double)b[i]) > mx) mx = fabs((double)b[i]);
    }
    return mx > 0 ? d / mx : d;
}

static void expect_same_bits(const run *a, const run *b, int64_t V, const char *what) {
    const size_t n = (size_t)(V * (N_GEN + 1));
    const double e = max_rel(a->logits, b->logits, n);
    if (memcmp(a->logits, b->logits, n * sizeof(float)) != 0)
        fail_msg("%s: logits differ (max rel %.3g)", what, e);
    for (int i = 0; i < N_GEN; i++)
        if (a->tok[i] != b->tok[i]) fail_msg("%s: token %d is %d vs %d", what, i, a->tok[i], b->tok[i]);
}

/* Batched decode (rb_model_forward_batch) of NB sequences with prompts of
 * different lengths (prefixes of the model's prompt), N_GEN greedy steps. */
#define NB 3
typedef struct brun {
    float *logits; /* N_GEN steps of NB rows of V */
    rb_graph_state state;
    bool direct; /* the first cache's steps wrote the logits in place at the end */
} brun;

/* (pin: every step's logits into that one NB x V buffer, then copied;
 * pooled: the caches are slots 3, 0, 5 of six made together, so the step
 * attends to them in one op a layer through kv_index) */
static brun greedy_batch_pool(rb_model *m, const char *name, rb_decode_mode mode, float *pin, bool pooled) {
    char dir[1200];
    size_t np = 0;
    int32_t *prompt;
    if (name[0] == '/') {
        np = sizeof k_file_prompt / sizeof k_file_prompt[0];
        prompt = malloc(sizeof k_file_prompt);
        assert_non_null(prompt);
        memcpy(prompt, k_file_prompt, sizeof k_file_prompt);
    } else {
        model_dir(dir, sizeof dir, name);
        prompt = read_prompt(dir, &np);
    }
    assert_true(np >= 3);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    brun r = {.logits = malloc(sizeof(float) * (size_t)(V * NB * N_GEN))};
    float *lg = malloc(sizeof(float) * (size_t)(V * NB));
    assert_non_null(r.logits);
    assert_non_null(lg);
    rb_kv_cache *kv[NB], *all[6];
    int32_t tok[NB];
    rb_error err;
    if (pooled) {
        TU_OK(rb_kv_cache_create_many(m, 6, N_CTX, RB_F16, all, &err));
        kv[0] = all[3];
        kv[1] = all[0];
        kv[2] = all[5];
    }
    for (int i = 0; i < NB; i++) {
        if (!pooled) TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &kv[i], &err));
        rb_kv_cache_set_decode_mode(kv[i], mode);
        const int64_t len = (int64_t)np - i; /* different positions per sequence */
        if (rb_model_forward(m, kv[i], prompt, len, false, lg, &err) != RB_OK) fail_msg("%s: %s", name, err.msg);
        tok[i] = argmax(lg, V);
    }
    for (int st = 0; st < N_GEN; st++) {
        float *out = r.logits + (size_t)(st * NB * V);
        if (rb_model_forward_batch(m, kv, tok, NB, pin ? pin : out, &err) != RB_OK)
            fail_msg("%s batch step %d (mode %d): %s", name, st, (int)mode, err.msg);
        if (pin) memcpy(out, pin, sizeof(float) * (size_t)(NB * V));
        for (int i = 0; i < NB; i++) tok[i] = argmax(out + (size_t)(i * V), V);
    }
    for (int i = 0; i < NB; i++) assert_int_equal(rb_kv_cache_used(kv[i]), (int64_t)np - i + N_GEN);
    r.state = rb_kv_cache_batch_graph_state(kv[0]);
    r.direct = pin && kv[0]->out_wrap && kv[0]->out_ptr == pin;
    for (int i = 0; i < (pooled ? 6 : NB); i++) rb_kv_cache_free(pooled ? all[i] : kv[i]);
    free(lg);
    free(prompt);
    return r;
}

static brun greedy_batch_to(rb_model *m, const char *name, rb_decode_mode mode, float *pin) {
    return greedy_batch_pool(m, name, mode, pin, false);
}

static brun greedy_batch(rb_model *m, const char *name, rb_decode_mode mode) {
    return greedy_batch_pool(m, name, mode, NULL, false);
}

/* ---- CPU ---- */

static void test_cpu_no_graphs(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    assert_false(rb_backend_graphs_supported(be));
    assert_int_equal(rb_backend_capture_begin(be), RB_E_UNSUPPORTED);
    assert_non_null(strstr(rb_backend_last_error(be), "not supported"));
    rb_graph *g = (rb_graph *)(void *)&g;
    assert_int_equal(rb_backend_capture_end(be, &g), RB_E_INVALID); /* nothing under way */
    assert_null(g);
    assert_int_equal(rb_graph_launch(NULL), RB_E_INVALID);
    rb_graph_free(NULL);
    /* AUTO on the CPU keeps the per-step decode: no warm-up, no graph */
    rb_model *m = load(be, "llama_gqa");
    run r = greedy(m, "llama_gqa", RB_DECODE_AUTO, RB_F16, false);
    assert_int_equal(r.state, RB_GRAPH_NONE);
    free(r.logits);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* A stand-in graph implementation on the CPU backend (tests only): the
 * front-end rules and the decode's state machine without a GPU. */
static int mock_begins, mock_ends, mock_launches, mock_frees;
static rb_status mock_begin_status;
static rb_status mock_begin(rb_backend *be) {
    mock_begins++;
    return mock_begin_status ? rb_backend_fail(be, mock_begin_status, "mock: capture refused") : RB_OK;
}
static rb_status mock_end(rb_backend *be, rb_graph *g) {
    (void)be;
    mock_ends++;
    if (g) g->impl = &mock_ends;
    return RB_OK;
}
static rb_status mock_launch(rb_backend *be, rb_graph *g) {
    (void)be;
    assert_ptr_equal(g->impl, &mock_ends);
    mock_launches++;
    return RB_OK;
}
static void mock_free(rb_backend *be, rb_graph *g) {
    (void)be;
    assert_ptr_equal(g->impl, &mock_ends);
    mock_frees++;
}
static const rb_graph_vtable k_mock = {mock_begin, mock_end, mock_launch, mock_free};

static void test_cpu_graph_frontend(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    be->graph_vt = &k_mock;
    mock_begins = mock_ends = mock_launches = mock_frees = 0;
    mock_begin_status = RB_OK;
    assert_true(rb_backend_graphs_supported(be));
    /* a host copy during the capture: refused, and the capture is discarded */
    TU_OK(rb_backend_capture_begin(be));
    rb_buffer *buf = NULL;
    assert_int_equal(rb_buffer_alloc(be, 64, &buf), RB_E_INVALID);
    assert_int_equal(rb_backend_sync(be), RB_E_INVALID);
    rb_graph *g = NULL;
    assert_int_equal(rb_backend_capture_end(be, &g), RB_E_INVALID);
    assert_null(g);
    assert_non_null(strstr(rb_backend_last_error(be), "discarded"));
    assert_int_equal(mock_ends, 1);
    TU_OK(rb_backend_sync(be)); /* eager again */
    TU_OK(rb_buffer_alloc(be, 64, &buf));
    /* a refused nested begin does not spoil the capture under way */
    TU_OK(rb_backend_capture_begin(be));
    assert_int_equal(rb_backend_capture_begin(be), RB_E_INVALID);
    assert_int_equal(rb_buffer_set(buf, 0, "x", 1), RB_E_INVALID); /* ... but a refused copy does */
    assert_int_equal(rb_backend_capture_end(be, &g), RB_E_INVALID);
    TU_OK(rb_backend_capture_begin(be));
    assert_int_equal(rb_backend_capture_begin(be), RB_E_INVALID);
    TU_OK(rb_backend_capture_end(be, &g));
    assert_non_null(g);
    rb_graph_free(g);
    g = (rb_graph *)&g; /* must be cleared by the refused call below */
    assert_int_equal(rb_backend_capture_end(be, &g), RB_E_INVALID); /* nothing under way */
    assert_null(g);
    TU_OK(rb_backend_capture_begin(be));
    TU_OK(rb_backend_capture_end(be, &g));
    TU_OK(rb_graph_launch(g));
    TU_OK(rb_graph_launch(g));
    assert_int_equal(mock_launches, 2);
    rb_graph_free(g);
    assert_int_equal(mock_frees, 2);
    /* a failing begin leaves the backend eager */
    mock_begin_status = RB_E_BACKEND;
    assert_int_equal(rb_backend_capture_begin(be), RB_E_BACKEND);
    TU_OK(rb_buffer_set(buf, 0, "x", 1));
    mock_begin_status = RB_OK;
    rb_buffer_free(buf);
    be->graph_vt = NULL;
    rb_backend_destroy(be);
}

/* Decode on a backend whose captures fail: one eager warm-up, one capture
 * attempt, then eager for good, with the per-step decode's bits. */
/* A lead cache keeps the steps of a few batch sizes (a server's batch moves
 * between n and n - 1 as requests end and start): on the mock backend,
 * batches of 3 and 2 caches of one pool led by the same cache, alternating,
 * are each warmed up and captured once (with one slot, each change of size
 * dropped the other's warm-up: never a capture); a fifth size evicts the
 * least recently used one, which is then captured again. The CPU refuses
 * the queued input copy inside a capture, so the mock's captures fail and
 * the steps run eagerly: capture attempts are what is counted (a failed
 * capture is not retried while its slot keeps its key). */
static void test_cpu_graph_batch_sizes(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    be->graph_vt = &k_mock;
    mock_begins = mock_ends = mock_launches = mock_frees = 0;
    mock_begin_status = RB_OK;
    rb_model *m = load(be, MODELS[0]);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)(V * 8));
    assert_non_null(lg);
    rb_kv_cache *pool[8];
    rb_error err;
    TU_OK(rb_kv_cache_create_many(m, 8, N_CTX, RB_F16, pool, &err));
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 8; i++) TU_OK(rb_model_forward(m, pool[i], tok, 1, false, lg, &err));
    /* sizes 3, 2, 3, 2, ...: two warm-ups and two captures, then replays */
    for (int st = 0; st < 10; st++) {
        const int n = st % 2 ? 2 : 3;
        TU_OK(rb_model_forward_batch(m, pool, tok, n, lg, &err));
    }
    assert_int_equal(mock_begins, 2);
    /* sizes 4..7 after them: the fifth evicts the size 3 (least recently used), so 3 is captured again */
    for (int n = 4; n <= 7; n++)
        for (int r = 0; r < 3; r++) TU_OK(rb_model_forward_batch(m, pool, tok, n, lg, &err));
    const int begins = mock_begins;
    assert_int_equal(begins, 2 + 4);
    for (int r = 0; r < 3; r++) TU_OK(rb_model_forward_batch(m, pool, tok, 3, lg, &err));
    assert_int_equal(mock_begins, begins + 1);
    for (int i = 0; i < 8; i++) rb_kv_cache_free(pool[i]);
    free(lg);
    rb_model_free(m);
    be->graph_vt = NULL;
    rb_backend_destroy(be);
}

static void test_cpu_graph_capture_refused(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = load(be, "gemma2");
    const int64_t V = rb_model_get_config(m)->n_vocab;
    run a = greedy(m, "gemma2", RB_DECODE_LEGACY, RB_F16, false);
    be->graph_vt = &k_mock;
    mock_begins = mock_ends = mock_launches = mock_frees = 0;
    mock_begin_status = RB_E_BACKEND;
    run b = greedy(m, "gemma2", RB_DECODE_AUTO, RB_F16, false);
    mock_begin_status = RB_OK;
    be->graph_vt = NULL;
    print_message("cpu gemma2 with captures refused: state %d, %d capture attempts (%s)\n", (int)b.state, mock_begins,
                  b.gerr);
    assert_int_equal(b.state, RB_GRAPH_FAILED);
    assert_int_equal(mock_begins, 1);
    assert_int_equal(mock_launches, 0);
    assert_non_null(strstr(b.gerr, "mock"));
    expect_same_bits(&b, &a, V, "cpu gemma2 after a refused capture vs per-step");
    free(a.logits);
    free(b.logits);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* The eager setting (rb_model_set_eager_decode, or RBEE_NO_GRAPH=1 when the
 * model is loaded): caches created while it is on decode per step and never
 * capture (on a backend with graphs too); caches created before or after it
 * keep the default. */
static void test_cpu_eager_setting(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_model *m = load(be, "llama_gqa");
    rb_kv_cache *a = NULL, *b = NULL, *c = NULL;
    rb_error err;
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &a, &err));
    rb_model_set_eager_decode(m, true);
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &b, &err));
    rb_model_set_eager_decode(m, false);
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &c, &err));
    assert_int_equal(a->decode_mode, RB_DECODE_AUTO);
    assert_int_equal(b->decode_mode, RB_DECODE_LEGACY);
    assert_int_equal(c->decode_mode, RB_DECODE_AUTO);
    be->graph_vt = &k_mock;
    mock_begins = mock_ends = mock_launches = mock_frees = 0;
    mock_begin_status = RB_OK;
    float *lg = malloc(sizeof(float) * (size_t)rb_model_get_config(m)->n_vocab);
    assert_non_null(lg);
    for (int32_t t = 1; t <= 4; t++) TU_OK(rb_model_forward(m, b, &t, 1, false, lg, &err));
    assert_int_equal(mock_begins, 0);
    be->graph_vt = NULL;
    rb_kv_cache_free(a);
    rb_kv_cache_free(b);
    rb_kv_cache_free(c);
    rb_model_free(m);
    /* the environment variable, read at load */
    assert_int_equal(setenv("RBEE_NO_GRAPH", "1", 1), 0);
    m = load(be, "llama_gqa");
    assert_int_equal(unsetenv("RBEE_NO_GRAPH"), 0);
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &a, &err));
    assert_int_equal(a->decode_mode, RB_DECODE_LEGACY);
    rb_kv_cache_free(a);
    rb_model_free(m);
    free(lg);
    rb_backend_destroy(be);
}

/* Position-independent decode == per-step decode, bit for bit, on the CPU. */
static void test_cpu_fixed_equals_legacy(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t i = 0; i < N_MODELS; i++) {
        rb_model *m = load(be, MODELS[i]);
        const int64_t V = rb_model_get_config(m)->n_vocab;
        const rb_dtype dts[2] = {RB_F16, RB_F32};
        for (int d = 0; d < 2; d++) {
            run a = greedy(m, MODELS[i], RB_DECODE_LEGACY, dts[d], false);
            run b = greedy(m, MODELS[i], RB_DECODE_FIXED, dts[d], false);
            char what[96];
            snprintf(what, sizeof what, "cpu %s %s cache: fixed vs per-step", MODELS[i], rb_dtype_name(dts[d]));
            expect_same_bits(&b, &a, V, what);
            print_message("%s: identical\n", what);
            assert_int_equal(b.state, RB_GRAPH_NONE); /* FIXED never captures */
            free(a.logits);
            free(b.logits);
        }
        rb_model_free(m);
    }
    /* batched decode, fixed vs per-step */
    for (size_t i = 0; i < 2; i++) {
        rb_model *mb = load(be, MODELS[i]);
        const int64_t Vb = rb_model_get_config(mb)->n_vocab;
        brun a = greedy_batch(mb, MODELS[i], RB_DECODE_LEGACY), b = greedy_batch(mb, MODELS[i], RB_DECODE_FIXED);
        if (memcmp(a.logits, b.logits, sizeof(float) * (size_t)(Vb * NB * N_GEN)) != 0)
            fail_msg("cpu %s batched: fixed vs per-step differ (max rel %.3g)", MODELS[i],
                     max_rel(b.logits, a.logits, (size_t)(Vb * NB * N_GEN)));
        print_message("cpu %s batched x%d: fixed vs per-step identical\n", MODELS[i], NB);
        assert_int_equal(b.state, RB_GRAPH_NONE);
        brun c = greedy_batch_pool(mb, MODELS[i], RB_DECODE_FIXED, NULL, true); /* one attention op a layer */
        if (memcmp(a.logits, c.logits, sizeof(float) * (size_t)(Vb * NB * N_GEN)) != 0)
            fail_msg("cpu %s batched: pooled vs per-step differ (max rel %.3g)", MODELS[i],
                     max_rel(c.logits, a.logits, (size_t)(Vb * NB * N_GEN)));
        print_message("cpu %s batched x%d: pooled caches vs per-step identical\n", MODELS[i], NB);
        free(c.logits);
        free(a.logits);
        free(b.logits);
        rb_model_free(mb);
    }
    /* longrope picks its factors by position: it keeps the per-step decode
     * even when asked for the fixed one */
    rb_model *m = load(be, "phi3_longrope");
    const int64_t V = rb_model_get_config(m)->n_vocab;
    run a = greedy(m, "phi3_longrope", RB_DECODE_LEGACY, RB_F32, false);
    run b = greedy(m, "phi3_longrope", RB_DECODE_FIXED, RB_F32, false);
    expect_same_bits(&b, &a, V, "cpu phi3_longrope");
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F32, &kv, NULL));
    rb_kv_cache_set_decode_mode(kv, RB_DECODE_FIXED);
    int32_t t = 1;
    assert_int_equal(rb_model_decode_token(m, kv, t, a.logits, NULL), RB_E_INVALID);
    rb_kv_cache_free(kv);
    free(a.logits);
    free(b.logits);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* Projections fused at load (fuse_proj RB_FUSE_PROJ_ON): q and k rotated in one
 * in-place launch; fixed == per-step bit for bit, and the same tokens as the
 * unfused model. */
static void test_cpu_fused_projections(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    const char *names[2] = {"llama_gqa", "gemma2"};
    for (int i = 0; i < 2; i++) {
        rb_model *plain = load(be, names[i]);
        const rb_model_load_opts on = {.fuse_proj = RB_FUSE_PROJ_ON};
        rb_model *fused = load_opts(be, names[i], &on);
        if (!rb_model_get_config(fused)->fused_qkv) fail_msg("%s: fuse_proj on did not fuse qkv", names[i]);
        assert_false(rb_model_get_config(plain)->fused_qkv);
        const int64_t V = rb_model_get_config(plain)->n_vocab;
        run a = greedy(plain, names[i], RB_DECODE_LEGACY, RB_F32, false);
        run b = greedy(fused, names[i], RB_DECODE_LEGACY, RB_F32, false);
        run c = greedy(fused, names[i], RB_DECODE_FIXED, RB_F32, false);
        char what[96];
        snprintf(what, sizeof what, "cpu %s fused: fixed vs per-step", names[i]);
        expect_same_bits(&c, &b, V, what);
        const double e = max_rel(b.logits, a.logits, (size_t)(V * (N_GEN + 1)));
        print_message("cpu %s fused vs unfused: max rel %.3g\n", names[i], e);
        assert_true(e <= 1e-5);
        for (int j = 0; j < N_GEN; j++) assert_int_equal(b.tok[j], a.tok[j]);
        free(a.logits);
        free(b.logits);
        free(c.logits);
        rb_model_free(plain);
        rb_model_free(fused);
    }
    rb_backend_destroy(be);
}

/* ---- GPU: decode ---- */

/* Graph replay == eager position-independent decode bit for bit, and the
 * per-step decode's tokens with close logits. */
static void test_gpu_graph_decode(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    assert_true(rb_backend_graphs_supported(be));
    int bad = 0;
    for (size_t i = 0; i < N_MODELS; i++) {
        rb_model *m = load(be, MODELS[i]);
        const int64_t V = rb_model_get_config(m)->n_vocab;
        run g = greedy(m, MODELS[i], RB_DECODE_AUTO, RB_F16, false);
        run f = greedy(m, MODELS[i], RB_DECODE_FIXED, RB_F16, false);
        run l = greedy(m, MODELS[i], RB_DECODE_LEGACY, RB_F16, false);
        /* the logits into one page-locked buffer: written there by the output
         * head (no read-back) once the same memory comes twice, except for a
         * final soft-cap (gemma2) */
        float *pin = rb_backend_host_alloc(be, sizeof(float) * (size_t)V);
        assert_non_null(pin);
        float *outs[N_GEN];
        for (int j = 0; j < N_GEN; j++) outs[j] = pin;
        run p = greedy_out(m, MODELS[i], RB_DECODE_AUTO, RB_F16, false, N_CTX, outs);
        /* the logits' memory changing under captured graphs: page-locked A,
         * the run's own (read back), A again, page-locked B, A every other
         * step: every step's logits still right */
        float *pin2 = rb_backend_host_alloc(be, sizeof(float) * (size_t)V);
        assert_non_null(pin2);
        for (int j = 0; j < N_GEN; j++)
            outs[j] = j < 6 ? pin : j < 9 ? NULL : j < 12 ? pin : j < 16 ? pin2 : (j & 1) ? pin : NULL;
        run q = greedy_out(m, MODELS[i], RB_DECODE_AUTO, RB_F16, false, N_CTX, outs);
        rb_backend_host_free(be, pin);
        rb_backend_host_free(be, pin2);
        const bool want_direct = rb_model_get_config(m)->final_softcap == 0;
        const size_t n = (size_t)(V * (N_GEN + 1));
        const double egf = max_rel(g.logits, f.logits, n), egl = max_rel(g.logits, l.logits, n);
        const double l2 = tu_rel_l2_f(g.logits, l.logits, n);
        int tok_diff = 0;
        for (int j = 0; j < N_GEN; j++) tok_diff += g.tok[j] != l.tok[j];
        const bool same_bits = memcmp(g.logits, f.logits, n * sizeof(float)) == 0;
        print_message("gpu %-14s graph state %d; graph vs eager: %s (max rel %.3g); graph vs per-step: max rel "
                      "%.3g, rel L2 %.3g, %d tokens differ\n",
                      MODELS[i], (int)g.state, same_bits ? "identical" : "DIFFERENT", egf, egl, l2, tok_diff);
        if (g.state != RB_GRAPH_READY || !same_bits || tok_diff || egl > 1e-4) bad++;
        const bool pin_bits = memcmp(g.logits, p.logits, n * sizeof(float)) == 0;
        print_message("gpu %-14s logits in place: %s, graph state %d, %s the graph's read-back\n", MODELS[i],
                      p.direct ? "yes" : "no", (int)p.state, pin_bits ? "identical to" : "DIFFERENT from");
        if (p.state != RB_GRAPH_READY || !pin_bits || p.direct != want_direct) bad++;
        if (memcmp(g.logits, q.logits, n * sizeof(float)) != 0) {
            print_message("gpu %-14s logits memory changing between steps: DIFFERENT logits\n", MODELS[i]);
            bad++;
        }
        free(q.logits);
        free(p.logits);
        free(g.logits);
        free(f.logits);
        free(l.logits);
        rb_model_free(m);
    }
    rb_backend_destroy(be);
    if (bad) fail_msg("%d models: graph decode differs (see above)", bad);
}

/* A k-quant mix (tu_kmix.h) on the GPU: the default load joins q/k/v in the
 * layers where the three share a type only, so a decode step switches
 * between the one-matrix form (norm, rope and the k/v store inside the
 * product) and three products layer by layer. Graph replay == eager bit for
 * bit, per-step within 1e-4 and the same tokens, and the same GPU's
 * unfused load (three products in every layer) within 1e-4 with the same
 * tokens. The CPU's figures are printed only: its q8_K activations differ
 * from the GPU's q8_1 ones, and 16 random layers amplify that. */
static void test_gpu_graph_kquant_mix(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    char path[64];
    tu_write_kquant_mix(path, sizeof path);
    rb_model *m = load(be, path);
    const rb_model_config *c = rb_model_get_config(m);
    int expect = 0;
    for (int il = 0; il < TU_KMIX_LAYERS; il++) expect += !tu_kmix_more_bits(il, TU_KMIX_LAYERS);
    assert_int_equal(c->n_layer_qkv_one, expect);
    const int64_t V = c->n_vocab;
    const size_t n = (size_t)(V * (N_GEN + 1));
    run g = greedy(m, path, RB_DECODE_AUTO, RB_F16, false);
    run f = greedy(m, path, RB_DECODE_FIXED, RB_F16, false);
    run l = greedy(m, path, RB_DECODE_LEGACY, RB_F16, false);
    const rb_model_load_opts off = {.fuse_proj = RB_FUSE_PROJ_OFF};
    rb_model *mu = load_opts(be, path, &off);
    assert_int_equal(rb_model_get_config(mu)->n_layer_qkv_one, 0);
    run u = greedy(mu, path, RB_DECODE_AUTO, RB_F16, false);
    rb_backend *cpu = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &cpu, NULL));
    rb_model *mc = load(cpu, path);
    run h = greedy(mc, path, RB_DECODE_LEGACY, RB_F32, false);
    const bool same_bits = memcmp(g.logits, f.logits, n * sizeof(float)) == 0;
    const double egl = max_rel(g.logits, l.logits, n), egu = max_rel(g.logits, u.logits, n);
    const double ecpu = tu_rel_l2_f(g.logits, h.logits, n), eucpu = tu_rel_l2_f(u.logits, h.logits, n);
    int tok_diff = 0, unf_diff = 0, cpu_diff = 0;
    for (int j = 0; j < N_GEN; j++) {
        tok_diff += g.tok[j] != l.tok[j];
        unf_diff += g.tok[j] != u.tok[j];
        cpu_diff += g.tok[j] != h.tok[j];
    }
    print_message("gpu k-quant mix (%d of %d layers one qkv matrix): graph state %d, graph vs eager %s, vs per-step "
                  "max rel %.3g (%d tokens differ), vs the unfused load max rel %.3g (%d tokens differ); CPU: rel "
                  "L2 %.3g (%d tokens differ), unfused GPU vs CPU %.3g\n",
                  c->n_layer_qkv_one, TU_KMIX_LAYERS, (int)g.state, same_bits ? "identical" : "DIFFERENT", egl,
                  tok_diff, egu, unf_diff, ecpu, cpu_diff, eucpu);
    assert_int_equal(g.state, RB_GRAPH_READY);
    assert_true(same_bits);
    assert_true(egl <= 1e-4);
    assert_int_equal(tok_diff, 0);
    assert_true(egu <= 1e-4);
    assert_int_equal(unf_diff, 0);
    free(g.logits);
    free(f.logits);
    free(l.logits);
    free(h.logits);
    free(u.logits);
    rb_model_free(mu);
    rb_model_free(mc);
    rb_backend_destroy(cpu);
    rb_model_free(m);
    rb_backend_destroy(be);
    unlink(path);
}

/* The batched step from a graph: the eager batch's bits, the per-step
 * batch's values. */
static void test_gpu_graph_batch(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    int bad = 0;
    for (size_t i = 0; i < 3; i++) {
        rb_model *m = load(be, MODELS[i]);
        const int64_t V = rb_model_get_config(m)->n_vocab;
        const size_t n = (size_t)(V * NB * N_GEN);
        brun g = greedy_batch(m, MODELS[i], RB_DECODE_AUTO), f = greedy_batch(m, MODELS[i], RB_DECODE_FIXED);
        brun l = greedy_batch(m, MODELS[i], RB_DECODE_LEGACY);
        float *pin = rb_backend_host_alloc(be, sizeof(float) * (size_t)(V * NB));
        assert_non_null(pin);
        brun p = greedy_batch_to(m, MODELS[i], RB_DECODE_AUTO, pin); /* logits in place: the same bits */
        rb_backend_host_free(be, pin);
        const bool pin_same = memcmp(g.logits, p.logits, n * sizeof(float)) == 0;
        print_message("gpu %-14s batch x%d logits in place: %s, %s the read-back\n", MODELS[i], NB,
                      p.direct ? "yes" : "no", pin_same ? "identical to" : "DIFFERENT from");
        if (p.direct != (rb_model_get_config(m)->final_softcap == 0) || !pin_same || p.state != RB_GRAPH_READY) bad++;
        free(p.logits);
        const bool same = memcmp(g.logits, f.logits, n * sizeof(float)) == 0;
        const double egl = max_rel(g.logits, l.logits, n);
        print_message("gpu %-14s batch x%d graph state %d; graph vs eager %s (max rel %.3g); vs per-step max rel "
                      "%.3g\n",
                      MODELS[i], NB, (int)g.state, same ? "identical" : "DIFFERENT",
                      max_rel(g.logits, f.logits, n), egl);
        if (g.state != RB_GRAPH_READY || !same || egl > 1e-4) bad++;
        /* caches of one pool: one attention op a layer, from a graph and eagerly */
        brun pg = greedy_batch_pool(m, MODELS[i], RB_DECODE_AUTO, NULL, true);
        brun pf = greedy_batch_pool(m, MODELS[i], RB_DECODE_FIXED, NULL, true);
        const bool psame = memcmp(pg.logits, pf.logits, n * sizeof(float)) == 0;
        const double epl = max_rel(pg.logits, l.logits, n);
        print_message("gpu %-14s pooled batch x%d graph state %d; graph vs eager %s; vs per-step max rel %.3g\n",
                      MODELS[i], NB, (int)pg.state, psame ? "identical" : "DIFFERENT", epl);
        if (pg.state != RB_GRAPH_READY || !psame || epl > 1e-4) bad++;
        free(pg.logits);
        free(pf.logits);
        free(g.logits);
        free(f.logits);
        free(l.logits);
        rb_model_free(m);
    }
    rb_backend_destroy(be);
    if (bad) fail_msg("%d models: batched graph decode differs (see above)", bad);
}

/* Caches of one pool: a batched step's graph serves another batch of the
 * same size led by the same cache (its ops read which caches from the
 * inputs), and every step's logits match each sequence decoded alone. */
static void test_gpu_graph_pool_members(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    rb_model *m = load(be, MODELS[0]);
    char dir[1200];
    model_dir(dir, sizeof dir, MODELS[0]);
    size_t np = 0;
    int32_t *prompt = read_prompt(dir, &np);
    assert_true(np >= 4);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    float *got = malloc(sizeof(float) * (size_t)(V * 3)), *want = malloc(sizeof(float) * (size_t)V);
    assert_non_null(got);
    assert_non_null(want);
    rb_kv_cache *pool[4], *ref[4];
    rb_error err;
    TU_OK(rb_kv_cache_create_many(m, 4, N_CTX, RB_F16, pool, &err));
    for (int i = 0; i < 4; i++) {
        TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &ref[i], &err));
        rb_kv_cache_set_decode_mode(ref[i], RB_DECODE_LEGACY);
        TU_OK(rb_model_forward(m, pool[i], prompt, (int64_t)np - i, false, want, &err));
        TU_OK(rb_model_forward(m, ref[i], prompt, (int64_t)np - i, false, want, &err));
    }
    static const int members[3][3] = {{0, 1, 2}, {0, 3, 2}, {0, 1, 3}};
    const rb_graph *g0 = NULL;
    double worst = 0;
    for (int st = 0; st < 9; st++) {
        const int *mb = members[st / 3];
        rb_kv_cache *kvs[3] = {pool[mb[0]], pool[mb[1]], pool[mb[2]]};
        int32_t tok[3];
        for (int j = 0; j < 3; j++) tok[j] = (int32_t)((st * 31 + mb[j] * 7 + 1) % V);
        if (rb_model_forward_batch(m, kvs, tok, 3, got, &err) != RB_OK) fail_msg("pooled step %d: %s", st, err.msg);
        for (int j = 0; j < 3; j++) {
            TU_OK(rb_model_forward(m, ref[mb[j]], &tok[j], 1, false, want, &err));
            const double e = max_rel(got + (size_t)j * (size_t)V, want, (size_t)V);
            worst = e > worst ? e : worst;
            assert_int_equal(rb_kv_cache_used(pool[mb[j]]), rb_kv_cache_used(ref[mb[j]]));
        }
        if (st == 2) {
            assert_int_equal(rb_kv_cache_batch_graph_state(pool[0]), RB_GRAPH_READY);
            g0 = rb_kv_cache_batch_graph(pool[0]);
        }
        if (st > 2) assert_ptr_equal(rb_kv_cache_batch_graph(pool[0]), g0); /* other members: the same graph replayed */
    }
    print_message("gpu %s pooled batches of changing members: one graph, max rel vs alone %.3g\n", MODELS[0], worst);
    assert_true(worst < 1e-4);
    for (int i = 0; i < 4; i++) {
        rb_kv_cache_free(pool[i]);
        rb_kv_cache_free(ref[i]);
    }
    free(got);
    free(want);
    free(prompt);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* rb_kv_cache_copy_prefix on the device: a pool member takes another's first
 * k positions after the pool's batched step was captured; the copied rows
 * are the source's bytes, and the next batched step (the graph replayed)
 * gives the copy the logits of a cache that ran those k tokens itself. */
static void test_gpu_kv_copy_prefix(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    rb_model *m = load(be, MODELS[0]);
    char dir[1200];
    model_dir(dir, sizeof dir, MODELS[0]);
    size_t np = 0;
    int32_t *prompt = read_prompt(dir, &np);
    assert_true(np >= 4);
    const rb_model_config *c = rb_model_get_config(m);
    const int64_t V = c->n_vocab;
    float *got = malloc(sizeof(float) * (size_t)(V * 3)), *want = malloc(sizeof(float) * (size_t)V);
    assert_true(got && want);
    rb_kv_cache *pool[3], *ref = NULL;
    rb_error err;
    TU_OK(rb_kv_cache_create_many(m, 3, N_CTX, RB_F16, pool, &err));
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &ref, &err));
    rb_kv_cache_set_decode_mode(ref, RB_DECODE_LEGACY);
    for (int i = 0; i < 3; i++) TU_OK(rb_model_forward(m, pool[i], prompt + i, (int64_t)np - i, false, want, &err));
    int32_t tok[3];
    for (int st = 0; st < 3; st++) { /* warm-up, capture, replay */
        for (int j = 0; j < 3; j++) tok[j] = (int32_t)((st * 17 + j * 5 + 1) % V);
        TU_OK(rb_model_forward_batch(m, pool, tok, 3, got, &err));
    }
    assert_int_equal(rb_kv_cache_batch_graph_state(pool[0]), RB_GRAPH_READY);
    const rb_graph *g0 = rb_kv_cache_batch_graph(pool[0]);
    const int64_t k = (int64_t)np - 1;
    TU_OK(rb_kv_cache_copy_prefix(pool[2], pool[0], k, &err));
    assert_int_equal(rb_kv_cache_used(pool[2]), k);
    assert_int_equal(rb_kv_cache_used(pool[0]), (int64_t)np + 3);
    const size_t per = 2 * rb_dtype_row_size(RB_F16, c->head_dim * c->n_head_kv) * (size_t)k;
    unsigned char *a = malloc(per), *b = malloc(per);
    assert_true(a && b);
    for (int64_t il = 0; il < c->n_layer; il++) {
        TU_OK(rb_buffer_get(pool[0]->pool->buf, pool[0]->k[il].offs, a, per));
        TU_OK(rb_buffer_get(pool[2]->pool->buf, pool[2]->k[il].offs, b, per));
        if (memcmp(a, b, per) != 0) fail_msg("layer %lld: the copied rows differ from the source's", (long long)il);
    }
    TU_OK(rb_model_forward(m, ref, prompt, k, false, want, &err));
    TU_OK(rb_model_forward(m, ref, prompt + k, 1, false, want, &err));
    tok[0] = 3;
    tok[1] = 5;
    tok[2] = prompt[k];
    TU_OK(rb_model_forward_batch(m, pool, tok, 3, got, &err));
    assert_ptr_equal(rb_kv_cache_batch_graph(pool[0]), g0); /* the same graph replayed */
    const double e = max_rel(got + 2 * (size_t)V, want, (size_t)V);
    print_message("gpu %s copied prefix of %lld positions: max rel vs a cache that ran them %.3g\n", MODELS[0],
                  (long long)k, e);
    assert_true(e < 1e-4);
    assert_int_equal(rb_kv_cache_copy_prefix(pool[1], pool[2], k + 2, &err), RB_E_INVALID); /* more than it holds */
    free(a);
    free(b);
    for (int i = 0; i < 3; i++) rb_kv_cache_free(pool[i]);
    rb_kv_cache_free(ref);
    free(got);
    free(want);
    free(prompt);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* An out-of-range id reaching a replay (past the host check) is caught on
 * the device: RB_E_RANGE, the cache does not advance, the next step is
 * right. The host check still answers first through rb_model_forward. */
static void test_gpu_graph_bad_token(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    rb_model *m = load(be, "llama_gqa");
    const int64_t V = rb_model_get_config(m)->n_vocab;
    run f = greedy(m, "llama_gqa", RB_DECODE_FIXED, RB_F16, false);
    char dir[1200];
    model_dir(dir, sizeof dir, "llama_gqa");
    size_t np = 0;
    int32_t *prompt = read_prompt(dir, &np);
    float *lg = malloc(sizeof(float) * (size_t)V);
    assert_non_null(lg);
    rb_kv_cache *kv = NULL;
    rb_error err;
    TU_OK(rb_kv_cache_create(m, N_CTX, RB_F16, &kv, &err));
    TU_OK(rb_model_forward(m, kv, prompt, (int64_t)np, false, lg, &err));
    for (int i = 0; i < N_GEN; i++) {
        if (i == 6 || i == 11) { /* the graph is ready from the second step on */
            assert_int_equal(rb_kv_cache_graph_state(kv), RB_GRAPH_READY);
            const int64_t used = rb_kv_cache_used(kv);
            int32_t badt = i == 6 ? (int32_t)V + 3 : -2;
            assert_int_equal(rb_model_forward(m, kv, &badt, 1, false, lg, &err), RB_E_RANGE);
            rb_status s = rb_model_decode_token(m, kv, badt, lg, &err);
            print_message("replay with token %d: %s: %s\n", badt, rb_status_str(s), err.msg);
            assert_int_equal(s, RB_E_RANGE);
            assert_non_null(strstr(err.msg, "rb_get_rows"));
            assert_non_null(strstr(err.msg, "graph"));
            assert_int_equal(rb_kv_cache_used(kv), used);
            TU_OK(rb_backend_sync(be)); /* reported once */
        }
        TU_OK(rb_model_forward(m, kv, &f.tok[i], 1, false, lg, &err));
        if (memcmp(lg, f.logits + (size_t)((i + 1) * V), sizeof(float) * (size_t)V) != 0)
            fail_msg("step %d after a bad replay: logits differ (max rel %.3g)", i,
                     max_rel(lg, f.logits + (size_t)((i + 1) * V), (size_t)V));
    }
    assert_int_equal(rb_kv_cache_graph_state(kv), RB_GRAPH_READY);
    rb_kv_cache_free(kv);
    free(lg);
    free(prompt);
    free(f.logits);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* A fresh backend has no scratch yet: capturing the very first step (no
 * warm-up) needs it to grow, which a capture refuses. The step then runs
 * eagerly, every result is right, and the cache stays eager. The cache is
 * made long (512) so that decode attention splits its keys and needs scratch
 * for the partial results. */
static void test_gpu_graph_capture_fails(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    rb_model *m = load(be, "gemma2");
    const int64_t V = rb_model_get_config(m)->n_vocab;
    run a = greedy_ctx(m, "gemma2", RB_DECODE_GRAPH_NOWARM, RB_F16, true, 512);
    run b = greedy_ctx(m, "gemma2", RB_DECODE_FIXED, RB_F16, true, 512);
    print_message("capture without warm-up: state %d: %s\n", (int)a.state, a.gerr);
    assert_int_equal(a.state, RB_GRAPH_FAILED);
    assert_non_null(strstr(a.gerr, "scratch"));
    expect_same_bits(&a, &b, V, "gemma2 after a failed capture vs eager");
    /* the backend is fine: a warmed-up capture works on it now */
    run c = greedy_ctx(m, "gemma2", RB_DECODE_AUTO, RB_F16, true, 512);
    assert_int_equal(c.state, RB_GRAPH_READY);
    expect_same_bits(&c, &b, V, "gemma2 graph after a failed capture vs eager");
    free(a.logits);
    free(b.logits);
    free(c.logits);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* ---- GPU: backend-level graphs ---- */

static rb_tensor tensor3(rb_backend *be, rb_dtype dt, int64_t n0, int64_t n1, int64_t n2) {
    const int64_t ne[3] = {n0, n1, n2};
    rb_tensor t;
    TU_OK(rb_tensor_alloc(be, dt, 3, ne, &t));
    return t;
}

static rb_tensor tensor(rb_backend *be, rb_dtype dt, int64_t n0, int64_t n1) { return tensor3(be, dt, n0, n1, 1); }

/* get_rows + set_rows in a graph: ids read at each replay, bad ids caught
 * on the device (get_rows clamps and set_rows skips), reported once. */
static void test_gpu_graph_ids(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    enum { D = 8, V = 10, T = 3, S = 6 };
    float tab[V * D], rows[T * D], cache[S * D];
    for (int i = 0; i < V * D; i++) tab[i] = (float)(i / D) + 0.01f * (float)(i % D);
    rb_tensor ttab = tensor(be, RB_F32, D, V), tids = tensor(be, RB_I32, T, 1), trows = tensor(be, RB_F32, D, T);
    rb_tensor tslot = tensor(be, RB_I32, T, 1), tcache = tensor(be, RB_F16, D, S);
    TU_OK(rb_tensor_set(&ttab, tab, sizeof tab));
    TU_OK(rb_fill(be, &tcache, -1.0f));
    int32_t ids[T] = {1, 2, 3}, slots[T] = {0, 1, 2};
    TU_OK(rb_tensor_set(&tids, ids, sizeof ids));
    TU_OK(rb_tensor_set(&tslot, slots, sizeof slots));
    TU_OK(rb_get_rows(be, &trows, &ttab, &tids)); /* eager first */
    TU_OK(rb_backend_capture_begin(be));
    assert_int_equal(rb_backend_capture_begin(be), RB_E_INVALID); /* no nesting */
    TU_OK(rb_get_rows(be, &trows, &ttab, &tids));
    TU_OK(rb_set_rows(be, &tcache, &trows, &tslot));
    rb_graph *g = NULL;
    TU_OK(rb_backend_capture_end(be, &g));
    assert_non_null(g);
    const int32_t idv[3][T] = {{4, 0, 9}, {7, V, 5}, {-1, 8, 6}};
    const int32_t slv[3][T] = {{3, 4, 5}, {0, 1, 2}, {5, S + 2, 0}};
    for (int step = 0; step < 3; step++) {
        TU_OK(rb_tensor_set(&tids, idv[step], sizeof idv[step]));
        TU_OK(rb_tensor_set(&tslot, slv[step], sizeof slv[step]));
        TU_OK(rb_graph_launch(g));
        rb_status s = rb_backend_sync(be);
        print_message("replay %d: %s %s\n", step, rb_status_str(s), s ? rb_backend_last_error(be) : "");
        if (step == 0) TU_OK(s);
        if (step == 1) {
            assert_int_equal(s, RB_E_RANGE);
            assert_non_null(strstr(rb_backend_last_error(be), "rb_get_rows"));
            assert_non_null(strstr(rb_backend_last_error(be), "10"));
        }
        if (step == 2) {
            assert_int_equal(s, RB_E_RANGE); /* the first bad id: get_rows or set_rows */
            TU_OK(rb_backend_sync(be));      /* reported once */
        }
        TU_OK(rb_tensor_get(&trows, rows, sizeof rows));
        for (int t = 0; t < T; t++) {
            int32_t id = idv[step][t];
            id = id < 0 ? 0 : id >= V ? V - 1 : id; /* clamped */
            for (int e = 0; e < D; e++) assert_true(rows[t * D + e] == tab[id * D + e]);
        }
    }
    /* the cache: each slot holds the row of the last replay that wrote it
     * (bad slot S + 2 skipped: nothing else changed) */
    rb_tensor tc32 = tensor(be, RB_F32, D, S);
    TU_OK(rb_cast(be, &tc32, &tcache));
    TU_OK(rb_tensor_get(&tc32, cache, sizeof cache));
    for (int sl = 0; sl < S; sl++) {
        int32_t id = -100;
        for (int step = 0; step < 3; step++)
            for (int t = 0; t < T; t++)
                if (slv[step][t] == sl) {
                    int32_t v = idv[step][t];
                    id = v < 0 ? 0 : v >= V ? V - 1 : v;
                }
        for (int e = 0; e < D; e++) {
            const float want = id == -100 ? -1.0f : tab[id * D + e];
            if (fabsf(cache[sl * D + e] - want) > 1e-3f * (1 + fabsf(want)))
                fail_msg("cache slot %d elem %d: %g, want %g", sl, e, (double)cache[sl * D + e], (double)want);
        }
    }
    rb_graph_free(g);
    rb_tensor_free(&tc32);
    rb_tensor_free(&ttab);
    rb_tensor_free(&tids);
    rb_tensor_free(&trows);
    rb_tensor_free(&tslot);
    rb_tensor_free(&tcache);
    rb_backend_destroy(be);
}

/* A graph that fetches its own inputs: rb_buffer_set_queued from
 * page-locked host memory (a kernel reads it, or with the tuning's
 * upload_dma the copy engine) captured with get_rows reads the ids written there before
 * each replay; results read back into page-locked memory (a kernel writes
 * them, with the ids check's flag: a bad id reports RB_E_RANGE from that
 * read); a queued copy from plain memory is refused while capturing. */
static void queued_replays(rb_backend *be) {
    enum { D = 8, V = 10, T = 4 };
    float tab[V * D];
    for (int i = 0; i < V * D; i++) tab[i] = (float)(i / D) + 0.01f * (float)(i % D);
    rb_tensor ttab = tensor(be, RB_F32, D, V), tids = tensor(be, RB_I32, T, 1), trows = tensor(be, RB_F32, D, T);
    TU_OK(rb_tensor_set(&ttab, tab, sizeof tab));
    int32_t *hin = rb_backend_host_alloc(be, sizeof(int32_t) * T);
    float *hout = rb_backend_host_alloc(be, sizeof(float) * T * D);
    assert_non_null(hin);
    assert_non_null(hout);
    for (int t = 0; t < T; t++) hin[t] = t;
    TU_OK(rb_buffer_set_queued(tids.buf, tids.offs, hin, sizeof(int32_t) * T)); /* eager first */
    TU_OK(rb_get_rows(be, &trows, &ttab, &tids));
    TU_OK(rb_backend_capture_begin(be));
    TU_OK(rb_buffer_set_queued(tids.buf, tids.offs, hin, sizeof(int32_t) * T));
    TU_OK(rb_get_rows(be, &trows, &ttab, &tids));
    rb_graph *g = NULL;
    TU_OK(rb_backend_capture_end(be, &g));
    const int32_t idv[4][T] = {{9, 0, 4, 4}, {1, 2, 3, 5}, {7, V + 3, 2, 0}, {8, 8, 1, 6}};
    for (int step = 0; step < 4; step++) {
        memcpy(hin, idv[step], sizeof idv[step]);
        TU_OK(rb_graph_launch(g));
        memset(hout, 0, sizeof(float) * T * D);
        rb_status s = rb_tensor_get(&trows, hout, sizeof(float) * T * D);
        if (step == 2) { /* the replay's bad id, reported by the read-back */
            assert_int_equal(s, RB_E_RANGE);
            assert_non_null(strstr(rb_backend_last_error(be), "rb_get_rows"));
        } else {
            TU_OK(s);
        }
        for (int t = 0; t < T; t++) {
            int32_t id = idv[step][t];
            id = id < 0 ? 0 : id >= V ? V - 1 : id; /* clamped */
            for (int e = 0; e < D; e++)
                if (hout[t * D + e] != tab[id * D + e])
                    fail_msg("replay %d row %d elem %d: %g, want %g", step, t, e, (double)hout[t * D + e],
                             (double)tab[id * D + e]);
        }
    }
    TU_OK(rb_backend_sync(be)); /* the flag was reported once */
    /* plain memory cannot be read by a replay: refused, capture discarded */
    int32_t plain[T] = {0, 1, 2, 3};
    TU_OK(rb_backend_capture_begin(be));
    assert_int_equal(rb_buffer_set_queued(tids.buf, tids.offs, plain, sizeof plain), RB_E_UNSUPPORTED);
    rb_graph *g2 = NULL;
    assert_int_not_equal(rb_backend_capture_end(be, &g2), RB_OK);
    assert_null(g2);
    TU_OK(rb_buffer_set_queued(tids.buf, tids.offs, plain, sizeof plain)); /* eager: copied at once */
    TU_OK(rb_get_rows(be, &trows, &ttab, &tids));
    TU_OK(rb_tensor_get(&trows, hout, sizeof(float) * T * D));
    for (int i = 0; i < T * D; i++) assert_true(hout[i] == tab[i]);
    rb_graph_free(g);
    rb_backend_host_free(be, hin);
    rb_backend_host_free(be, hout);
    rb_tensor_free(&ttab);
    rb_tensor_free(&tids);
    rb_tensor_free(&trows);
}

static void test_gpu_graph_queued(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    queued_replays(be);
    rb_backend_destroy(be);
    be = gpu_backend();
    assert_non_null(be);
    const rb_gpu_tuning dma = {.upload_dma = true}; /* the copy-engine form of the queued copy */
    assert_int_equal(rb_gpu_backend_tune(be, &dma), RB_OK);
    queued_replays(be);
    rb_backend_destroy(be);
}

/* Host copies are refused while capturing, the capture is discarded, the
 * backend works eagerly afterwards; a graph keeps working after the scratch
 * it captured was replaced by a larger one. */
static void test_gpu_graph_rules(void **state) {
    (void)state;
    rb_backend *be = gpu_backend();
    NEED_GPU(be);
    enum { D = 64, H = 2, T = 5 };
    rb_tensor x = tensor3(be, RB_F32, D, H, T), y = tensor3(be, RB_F32, D, H, T), pos = tensor(be, RB_I32, T, 1);
    float xv[D * H * T], y0[D * H * T], y1[D * H * T];
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    tu_fill_uniform(&rng, xv, D * H * T, -1, 1);
    int32_t pv[T] = {3, 0, 17, 9, 40};
    TU_OK(rb_tensor_set(&x, xv, sizeof xv));
    TU_OK(rb_tensor_set(&pos, pv, sizeof pv));
    rb_rope_params rp = {.n_rot = D, .mode = RB_ROPE_NEOX, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1};
    TU_OK(rb_rope(be, &y, &x, &pos, &rp)); /* eager: sizes the scratch */
    TU_OK(rb_tensor_get(&y, y0, sizeof y0));

    /* a host read inside a capture: refused, capture discarded */
    TU_OK(rb_backend_capture_begin(be));
    TU_OK(rb_rope(be, &y, &x, &pos, &rp));
    assert_int_equal(rb_tensor_get(&y, y1, sizeof y1), RB_E_INVALID);
    assert_non_null(strstr(rb_backend_last_error(be), "captured"));
    rb_buffer *nb = NULL;
    assert_int_equal(rb_buffer_alloc(be, 64, &nb), RB_E_INVALID);
    rb_graph *g = (rb_graph *)(void *)&g;
    assert_int_equal(rb_backend_capture_end(be, &g), RB_E_INVALID);
    assert_null(g);
    print_message("discarded capture: %s\n", rb_backend_last_error(be));
    TU_OK(rb_fill(be, &y, 0.0f));
    TU_OK(rb_rope(be, &y, &x, &pos, &rp)); /* eager again */
    TU_OK(rb_tensor_get(&y, y1, sizeof y1));
    assert_memory_equal(y0, y1, sizeof y0);

    /* capture the rope; then grow the scratch with a large eager rope */
    TU_OK(rb_backend_capture_begin(be));
    TU_OK(rb_rope(be, &y, &x, &pos, &rp));
    TU_OK(rb_backend_capture_end(be, &g));
    enum { TB = 1 << 15 };
    rb_tensor bx = tensor3(be, RB_F32, D, 1, TB), bp = tensor(be, RB_I32, TB, 1);
    int32_t *zeros = calloc(TB, sizeof(int32_t));
    assert_non_null(zeros);
    TU_OK(rb_tensor_set(&bp, zeros, TB * sizeof(int32_t)));
    free(zeros);
    TU_OK(rb_fill(be, &bx, 0.5f));
    TU_OK(rb_rope(be, &bx, &bx, &bp, &rp)); /* table of TB * D/2 float pairs: 8 MiB of scratch */
    for (int rep = 0; rep < 2; rep++) {
        TU_OK(rb_fill(be, &y, 0.0f));
        pv[0] = 5 + rep; /* positions are read at each replay */
        TU_OK(rb_tensor_set(&pos, pv, sizeof pv));
        TU_OK(rb_graph_launch(g));
        TU_OK(rb_tensor_get(&y, y1, sizeof y1));
        rb_tensor ye = tensor3(be, RB_F32, D, H, T);
        TU_OK(rb_rope(be, &ye, &x, &pos, &rp));
        TU_OK(rb_tensor_get(&ye, y0, sizeof y0));
        assert_memory_equal(y0, y1, sizeof y0);
        rb_tensor_free(&ye);
    }
    rb_graph_free(g);
    rb_tensor_free(&bx);
    rb_tensor_free(&bp);
    rb_tensor_free(&x);
    rb_tensor_free(&y);
    rb_tensor_free(&pos);
    rb_backend_destroy(be);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_gpu_graph_*" under compute-sanitizer */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_no_graphs),
        cmocka_unit_test(test_cpu_fixed_equals_legacy),
        cmocka_unit_test(test_cpu_fused_projections),
        cmocka_unit_test(test_cpu_graph_frontend),
        cmocka_unit_test(test_cpu_graph_batch_sizes),
        cmocka_unit_test(test_cpu_graph_capture_refused),
        cmocka_unit_test(test_cpu_eager_setting),
        cmocka_unit_test(test_gpu_graph_ids),
        cmocka_unit_test(test_gpu_graph_queued),
        cmocka_unit_test(test_gpu_graph_rules),
        cmocka_unit_test(test_gpu_graph_decode),
        cmocka_unit_test(test_gpu_graph_kquant_mix),
        cmocka_unit_test(test_gpu_graph_batch),
        cmocka_unit_test(test_gpu_graph_pool_members),
        cmocka_unit_test(test_gpu_kv_copy_prefix),
        cmocka_unit_test(test_gpu_graph_bad_token),
        cmocka_unit_test(test_gpu_graph_capture_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
