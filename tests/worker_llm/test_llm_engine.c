/* The worker's continuous-batching scheduler against an independent
 * reference: every job run concurrently through llm_engine (jobs joining
 * and leaving mid-flight, batched forward passes) must produce exactly the
 * text, token count and stop reason that rb_generate gives for the same
 * request alone, greedy and seeded sampling alike. Several choices of one
 * prompt (one prefill, KV copies) must each equal rb_generate alone with the
 * choice's seed (seed + i); log probabilities must equal the log-softmax of
 * rb_model_forward's logits of the prompt and the chosen tokens, whatever
 * sampling transforms and logit biases chose them; logit biases steer the
 * choice; embedding jobs equal their hidden states pooled and normalized
 * here; special tokens a request keeps (tool-call markers) come out as text. Also: stop strings, cancellation latency, the bounded queue, and bad
 * arguments. With cache_prompt, jobs sharing long prompt prefixes (kept in
 * a slot, or copied from a busy one) still equal rb_generate alone on a
 * fresh cache, and the count of cached prompt tokens is the common prefix
 * with what the slot held, also after an embeddings job overwrote the slot,
 * a cancelled job and a failed one. With chunked prefill (prefill_chunk) the
 * same outputs, while a running stream keeps emitting tokens between a long
 * prompt's start and its first token (and emits none there without chunks);
 * several choices, a grammar, a prompt that fills the context, a job
 * cancelled halfway through its prompt (the next job reuses exactly what its
 * cache got), and, on a batch-invariant backend, log probabilities equal
 * bit for bit to an unchunked run's, and a failed piece failing its job
 * alone. Uses the bundled default model (KJV, byte-level BPE). */
#include "testutil.h"

#include "rbee/generate.h"
#include "worker/wk_util.h"
#include "worker_llm/llm_engine.h"
#include "worker_llm/llm_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    rb_backend *be;
    rb_model *m;
    rb_tokenizer *tok;
} fixture;

static int teardown(void **state);

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    *state = f; /* the teardown frees what a failed setup made */
    rb_error err;
    rb_error_clear(&err);
    rb_backend_config bc = {.n_threads = 0, .cpu_isa = NULL};
    if (rb_backend_create("cpu", &bc, &f->be, &err) != RB_OK) return -1;
    if (rb_model_load(RBEE_DEFAULT_MODEL_DIR "/hf", f->be, NULL, &f->m, &err) != RB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    if (rb_tokenizer_load_hf(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer.json", RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer_config.json",
                             &f->tok, &err) != RB_OK)
        return -1;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    if (!f) return 0;
    rb_tokenizer_free(f->tok);
    rb_model_free(f->m);
    rb_backend_destroy(f->be);
    free(f);
    return 0;
}

static const char *const k_words[] = {"And", "God", "said", "unto", "Moses", "the", "LORD", "of", "hosts",
                                      "In",  "beginning", "land", "Egypt", "children", "Israel", "king", "David"};

/* A prompt of n random KJV words. */
static void random_prompt(tu_rng *r, int n, char *buf, size_t len) {
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *w = k_words[tu_rng_u64(r) % (sizeof k_words / sizeof k_words[0])];
        strncat(buf, i ? " " : "", len - strlen(buf) - 1);
        strncat(buf, w, len - strlen(buf) - 1);
    }
}

static wk_job *make_job(fixture *f, const char *prompt, int64_t max_tokens, float temp, uint64_t seed,
                         const char *stop) {
    llm_gen_request req;
    memset(&req, 0, sizeof req);
    rb_error err;
    rb_error_clear(&err);
    TU_OK(rb_tokenizer_encode(f->tok, prompt, strlen(prompt), RB_TOK_ADD_SPECIAL, &req.prompt, &req.n_prompt, &err));
    req.sampling = rb_sampler_default_params();
    req.sampling.temperature = temp;
    req.sampling.seed = seed;
    req.max_tokens = max_tokens;
    if (stop) req.stop[req.n_stop++] = strdup(stop);
    wk_job *j = llm_job_new(LLM_API_RBEE, &req, "test", NULL);
    assert_non_null(j);
    return j;
}

typedef struct ref_out {
    char text[8192];
    size_t len;
    rb_gen_result res;
} ref_out;

static bool collect(void *user, const char *text, size_t len, int32_t token) {
    (void)token;
    ref_out *o = user;
    assert_true(o->len + len < sizeof o->text);
    memcpy(o->text + o->len, text, len);
    o->len += len;
    return true;
}

/* rb_generate alone on a fresh cache: the reference. */
static void reference(fixture *f, const wk_job *j, int64_t ctx, ref_out *o) {
    memset(o, 0, sizeof *o);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(f->m, ctx, RB_F16, &kv, NULL));
    rb_gen_params gp = rb_gen_default_params();
    gp.sampling = llm_job_task(j)->req.sampling;
    gp.max_tokens = llm_job_task(j)->req.max_tokens;
    gp.ignore_eos = llm_job_task(j)->req.ignore_eos;
    for (int i = 0; i < llm_job_task(j)->req.n_stop; i++) gp.stop[gp.n_stop++] = llm_job_task(j)->req.stop[i];
    TU_OK(rb_generate(f->m, f->tok, kv, llm_job_task(j)->req.prompt, llm_job_task(j)->req.n_prompt, &gp, collect, o, &o->res, NULL));
    rb_kv_cache_free(kv);
}

static void wait_done(wk_job *j, double timeout_ms) {
    double t0 = wk_now_ms();
    while (!wk_job_is_finished(j)) {
        if (wk_now_ms() - t0 > timeout_ms) fail_msg("job %s did not finish in %.0f ms", j->id, timeout_ms);
        pthread_mutex_lock(&j->mu);
        size_t n = j->n_events;
        pthread_mutex_unlock(&j->mu);
        wk_job_wait_events(j, n, 20);
    }
}

static void wait_events(wk_job *j) {
    pthread_mutex_lock(&j->mu);
    size_t n = j->n_events;
    pthread_mutex_unlock(&j->mu);
    wk_job_wait_events(j, n, 20);
}

static void job_text(wk_job *j, char *buf, size_t cap, size_t *len) {
    pthread_mutex_lock(&j->mu);
    *len = 0;
    for (size_t i = 0; i < j->n_events; i++) {
        if (strcmp(j->events[i].type, "token") != 0) continue;
        assert_true(*len + j->events[i].raw_len < cap);
        memcpy(buf + *len, j->events[i].raw, j->events[i].raw_len);
        *len += j->events[i].raw_len;
    }
    pthread_mutex_unlock(&j->mu);
}

/* n_jobs random jobs at once; with shared > 0 every prompt starts with the
 * same `shared` words and the engine reuses cached prompt prefixes. */
static void run_jobs(fixture *f, llm_step_fn step, int parallel, int n_jobs, uint64_t seed, int shared, int chunk) {
    const int64_t ctx = 96 + 2 * shared;
    llm_engine_opts o = {.parallel = parallel, .ctx_size = ctx, .queue_depth = n_jobs, .step = step,
                         .cache_prompt = shared > 0, .prefill_chunk = chunk};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    tu_rng r;
    tu_rng_seed(&r, seed);
    wk_job **jobs = calloc((size_t)n_jobs, sizeof *jobs);
    char common[1024];
    random_prompt(&r, shared, common, sizeof common);
    for (int i = 0; i < n_jobs; i++) {
        char prompt[1536], tail[512];
        random_prompt(&r, 1 + (int)(tu_rng_u64(&r) % 9), tail, sizeof tail);
        snprintf(prompt, sizeof prompt, "%s%s%s", common, shared ? " " : "", tail);
        int64_t mt = 3 + (int64_t)(tu_rng_u64(&r) % 23);
        float temp = (i % 3 == 2) ? 0.8f : 0.0f; /* every third job samples with a seed */
        jobs[i] = make_job(f, prompt, mt, temp, 1000 + (uint64_t)i, NULL);
        TU_OK(llm_engine_submit(e, jobs[i]));
        if (i % 4 == 1) wk_sleep_ms(15); /* let some start before others join */
    }
    for (int i = 0; i < n_jobs; i++) wait_done(jobs[i], 120000);
    /* The model serves one thread at a time: references run after the engine is gone. */
    llm_engine_destroy(e);
    e = NULL;
    int64_t cached = 0;
    for (int i = 0; i < n_jobs; i++) {
        const llm_task *t = llm_job_task(jobs[i]);
        assert_true(t->cached_tokens >= 0 && t->cached_tokens < (int64_t)t->req.n_prompt);
        if (!shared) assert_int_equal(t->cached_tokens, 0);
        cached += t->cached_tokens;
    }
    if (shared) assert_true(cached >= (int64_t)shared * (n_jobs - parallel)); /* later jobs found the prefix */
    for (int i = 0; i < n_jobs; i++) {
        ref_out ref;
        reference(f, jobs[i], ctx, &ref);
        char got[8192];
        size_t glen = 0;
        job_text(jobs[i], got, sizeof got, &glen);
        assert_int_equal(jobs[i]->state, WK_JOB_DONE);
        if (glen != ref.len || memcmp(got, ref.text, glen) != 0)
            fail_msg("job %d: engine text '%.*s' != reference '%.*s'", i, (int)glen, got, (int)ref.len, ref.text);
        assert_int_equal(llm_job_task(jobs[i])->stop_reason, ref.res.stop_reason);
        int64_t ref_out_tokens = ref.res.n_generated - (ref.res.stop_reason == RB_STOP_EOS ? 1 : 0);
        assert_int_equal(llm_job_task(jobs[i])->tokens_out, ref_out_tokens);
        assert_true(glen > 0);
        wk_job_unref(jobs[i]);
    }
    free(jobs);
}

static void test_batched_matches_alone(void **state) {
    run_jobs(*state, llm_step_batched, 4, 11, 7, 0, 0);
}

static void test_sequential_step_matches_alone(void **state) {
    run_jobs(*state, llm_step_sequential, 3, 7, 8, 0, 0);
}

static void test_single_slot(void **state) {
    run_jobs(*state, NULL, 1, 4, 9, 0, 0);
}

/* Shared prefixes kept in free slots and copied from busy ones. */
static void test_cached_prompts_match_alone(void **state) {
    run_jobs(*state, NULL, 4, 12, 10, 30, 0);
    run_jobs(*state, NULL, 1, 5, 11, 30, 0);
}

/* The same with prompts run in pieces of 8 and 3 tokens inside the steps. */
static void test_chunked_match_alone(void **state) {
    run_jobs(*state, llm_step_batched, 4, 11, 7, 0, 8);
    run_jobs(*state, llm_step_sequential, 3, 7, 8, 0, 3);
    run_jobs(*state, NULL, 1, 4, 9, 0, 8);
    run_jobs(*state, NULL, 4, 12, 10, 30, 8);
    run_jobs(*state, NULL, 1, 5, 11, 30, 3);
}

static size_t lcp_of(const wk_job *a, const wk_job *b) {
    const llm_gen_request *x = &llm_job_task(a)->req, *y = &llm_job_task(b)->req;
    size_t i = 0;
    while (i < x->n_prompt && i < y->n_prompt && x->prompt[i] == y->prompt[i]) i++;
    return i;
}

static wk_job *make_embed_job(fixture *f, const char *const *texts, size_t n, llm_pooling pool);

/* Runs j alone on e (one slot) and checks its cached prompt tokens. */
static void run_cached(llm_engine *e, wk_job *j, int64_t want, const char *what) {
    TU_OK(llm_engine_submit(e, j));
    wait_done(j, 60000);
    assert_int_equal(j->state, WK_JOB_DONE);
    if (llm_job_task(j)->cached_tokens != want)
        fail_msg("%s: %lld cached tokens, want %lld", what, (long long)llm_job_task(j)->cached_tokens, (long long)want);
}

/* j's text against rb_generate alone (once the engine is gone). */
static void check_alone(fixture *f, wk_job *j, const char *what) {
    ref_out ref;
    reference(f, j, 256, &ref);
    char got[8192];
    size_t glen = 0;
    job_text(j, got, sizeof got, &glen);
    if (glen != ref.len || memcmp(got, ref.text, glen) != 0)
        fail_msg("%s: engine text '%.*s' != reference '%.*s'", what, (int)glen, got, (int)ref.len, ref.text);
}

/* The first k greedy tokens after prompt[0 .. n) (argmax of rb_model_forward's logits). */
static void greedy_tokens(fixture *f, const int32_t *prompt, size_t n, int32_t *out, int k) {
    const int64_t V = rb_model_get_config(f->m)->n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)V);
    rb_kv_cache *kv = NULL;
    assert_non_null(lg);
    TU_OK(rb_kv_cache_create(f->m, 256, RB_F16, &kv, NULL));
    TU_OK(rb_model_forward(f->m, kv, prompt, (int64_t)n, false, lg, NULL));
    for (int i = 0; i < k; i++) {
        int32_t best = 0;
        for (int64_t t = 1; t < V; t++)
            if (lg[t] > lg[best]) best = (int32_t)t;
        out[i] = best;
        if (i + 1 < k) TU_OK(rb_model_forward(f->m, kv, &best, 1, false, lg, NULL));
    }
    rb_kv_cache_free(kv);
    free(lg);
}

/* One slot through jobs that leave it in every state: what it is said to
 * hold must be what it holds. */
static void test_cached_prompt_records(void **state) {
    fixture *f = *state;
    llm_engine_opts o = {.parallel = 1, .ctx_size = 256, .queue_depth = 2, .step = NULL, .cache_prompt = true};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    const char *P = "And God said unto Moses the LORD of hosts in the land of Egypt and the children of Israel went "
                    "up unto the king David in the beginning and the LORD said";
    char pa[512], pb[512], pc[512];
    snprintf(pa, sizeof pa, "%s unto Moses", P);
    snprintf(pb, sizeof pb, "%s the king of Egypt", P);
    snprintf(pc, sizeof pc, "%s in the land", P);
    wk_job *a = make_job(f, pa, 8, 0.0f, 1, NULL), *a2 = make_job(f, pa, 8, 0.0f, 1, NULL);
    wk_job *b = make_job(f, pb, 8, 0.0f, 1, NULL), *c = make_job(f, pc, 400, 0.7f, 5, NULL);
    wk_job *d = make_job(f, pc, 8, 0.0f, 1, NULL), *d2 = make_job(f, pc, 6, 0.0f, 1, NULL);
    const size_t na = llm_job_task(a)->req.n_prompt, nc = llm_job_task(c)->req.n_prompt;
    assert_true(lcp_of(a, b) > 20 && lcp_of(a, b) < na);
    /* a chat's next turn: a's prompt, a's 8 greedy tokens, one more token */
    wk_job *turn = make_job(f, pa, 5, 0.0f, 1, NULL);
    llm_gen_request *tr = &llm_job_task(turn)->req;
    int32_t *tp = realloc(tr->prompt, sizeof(int32_t) * (na + 9));
    assert_non_null(tp);
    tr->prompt = tp;
    greedy_tokens(f, tp, na, tp + na, 8);
    tp[na + 8] = tp[1];
    tr->n_prompt = na + 9;
    run_cached(e, a, 0, "a, first");
    run_cached(e, a2, (int64_t)na - 1, "a again: all but the last token");
    /* the 8th token a2 sampled was never fed: it is not in the cache */
    run_cached(e, turn, (int64_t)na + 7, "the next turn of a2's chat");
    /* an embeddings job overwrites the slot's cache: nothing of it is reused after */
    const char *const texts[] = {"And God said, Let there be light", "In the beginning"};
    wk_job *emb = make_embed_job(f, texts, 2, LLM_POOL_MEAN);
    TU_OK(llm_engine_submit(e, emb));
    wait_done(emb, 60000);
    assert_int_equal(emb->state, WK_JOB_DONE);
    run_cached(e, b, 0, "b after the embeddings");
    /* cancelled while decoding: its prompt and the tokens it fed stay */
    TU_OK(llm_engine_submit(e, c));
    while (llm_job_task(c)->n_pieces < 3) wait_events(c);
    wk_job_cancel(c);
    llm_engine_poke(e);
    wait_done(c, 5000);
    assert_int_equal(llm_job_task(c)->stop_reason, RB_STOP_CANCELLED);
    assert_int_equal(llm_job_task(c)->cached_tokens, (int64_t)lcp_of(b, c));
    run_cached(e, d, (int64_t)nc - 1, "d, c's prompt after c was cancelled");
    /* a job that fails (its prompt does not fit) leaves the slot as it was */
    char longp[4096] = "";
    for (int i = 0; i < 60; i++) strncat(longp, "And God said unto Moses ", sizeof longp - strlen(longp) - 1);
    wk_job *big = make_job(f, longp, 4, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, big));
    wait_done(big, 5000);
    assert_string_equal(big->err_code, "CONTEXT_OVERFLOW");
    run_cached(e, d2, (int64_t)nc - 1, "d again after a failed job");
    llm_engine_destroy(e);
    wk_job *gen[] = {a, a2, turn, b, d, d2};
    const char *names[] = {"a", "a again", "the next turn", "b", "d", "d again"};
    for (int i = 0; i < 6; i++) check_alone(f, gen[i], names[i]);
    wk_job *all[] = {a, a2, turn, b, c, d, d2, emb, big};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wk_job_unref(all[i]);
}

static void test_stop_string(void **state) {
    fixture *f = *state;
    llm_engine_opts o = {.parallel = 2, .ctx_size = 128, .queue_depth = 4, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    /* Learn the greedy continuation, then stop on a word from its middle. */
    wk_job *probe = make_job(f, "And God said", 30, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, probe));
    wait_done(probe, 60000);
    char full[8192];
    size_t flen = 0;
    job_text(probe, full, sizeof full, &flen);
    assert_true(flen > 20);
    char stop[16];
    memcpy(stop, full + flen / 2, 5);
    stop[5] = '\0';
    const char *at = strstr(full, stop);
    assert_non_null(at);
    wk_job *j = make_job(f, "And God said", 30, 0.0f, 1, stop);
    TU_OK(llm_engine_submit(e, j));
    wait_done(j, 60000);
    char got[8192];
    size_t glen = 0;
    job_text(j, got, sizeof got, &glen);
    assert_int_equal(llm_job_task(j)->stop_reason, RB_STOP_STRING);
    assert_int_equal(glen, (size_t)(at - full));
    assert_memory_equal(got, full, glen);
    wk_job_unref(probe);
    wk_job_unref(j);
    llm_engine_destroy(e);
}

static void test_cancel_fast(void **state) {
    fixture *f = *state;
    llm_engine_opts o = {.parallel = 4, .ctx_size = 512, .queue_depth = 4, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *js[3];
    for (int i = 0; i < 3; i++) {
        js[i] = make_job(f, "In the beginning", 500, 0.7f, (uint64_t)i, NULL);
        TU_OK(llm_engine_submit(e, js[i]));
    }
    while (llm_job_task(js[0])->n_pieces < 3) wait_events(js[0]);
    double t0 = wk_now_ms();
    wk_job_cancel(js[0]);
    llm_engine_poke(e);
    wait_done(js[0], 5000);
    double dt = wk_now_ms() - t0;
    print_message("cancel latency: %.1f ms\n", dt);
    assert_true(dt < 100.0);
    assert_int_equal(llm_job_task(js[0])->stop_reason, RB_STOP_CANCELLED);
    assert_true(llm_job_task(js[0])->tokens_out < 500);
    assert_false(wk_job_is_finished(js[1])); /* others go on */
    llm_engine_destroy(e);                    /* cancels the rest */
    for (int i = 1; i < 3; i++) {
        assert_true(wk_job_is_finished(js[i]));
        assert_int_equal(llm_job_task(js[i])->stop_reason, RB_STOP_CANCELLED);
    }
    for (int i = 0; i < 3; i++) wk_job_unref(js[i]);
}

static void test_queue_bound(void **state) {
    fixture *f = *state;
    llm_engine_opts o = {.parallel = 1, .ctx_size = 512, .queue_depth = 1, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *js[3];
    for (int i = 0; i < 3; i++) js[i] = make_job(f, "And the LORD", 400, 0.5f, 3, NULL);
    TU_OK(llm_engine_submit(e, js[0]));
    TU_OK(llm_engine_submit(e, js[1]));
    assert_int_equal(llm_engine_submit(e, js[2]), RB_E_RANGE);
    int q = -1, a = -1;
    llm_engine_stats(e, &q, &a);
    assert_int_equal(q + a, 2);
    /* a queued job cancelled while waiting ends without running */
    wk_job_cancel(js[1]);
    llm_engine_poke(e);
    wait_done(js[1], 5000);
    assert_int_equal(llm_job_task(js[1])->stop_reason, RB_STOP_CANCELLED);
    assert_int_equal(llm_job_task(js[1])->tokens_out, 0);
    llm_engine_stop_accepting(e);
    assert_int_equal(llm_engine_submit(e, js[2]), RB_E_CANCELLED);
    llm_engine_destroy(e);
    for (int i = 0; i < 3; i++) wk_job_unref(js[i]);
}

static void test_bad_args(void **state) {
    fixture *f = *state;
    llm_engine *e = NULL;
    rb_error err;
    llm_engine_opts o = {.parallel = 0, .ctx_size = 64, .queue_depth = 1, .step = NULL};
    assert_int_equal(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, &err), RB_E_INVALID);
    o.parallel = 2;
    o.ctx_size = 1;
    assert_int_equal(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, &err), RB_E_INVALID);
    assert_null(e);
    /* prefill chunks: 0..LLM_MAX_PREFILL_CHUNK, and then at most that many slots */
    o.ctx_size = 64;
    o.prefill_chunk = -1;
    assert_int_equal(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, &err), RB_E_INVALID);
    o.prefill_chunk = LLM_MAX_PREFILL_CHUNK + 1;
    assert_int_equal(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, &err), RB_E_INVALID);
    o.prefill_chunk = 8;
    o.parallel = LLM_MAX_PREFILL_CHUNK + 1;
    assert_int_equal(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, &err), RB_E_INVALID);
    assert_null(e);
    o.parallel = 2;
    o.prefill_chunk = 4;
    /* A prompt that does not fit the slot fails the job, not the engine (nor does an empty one). */
    o.ctx_size = 8;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *j = make_job(f, "And God said unto Moses the LORD of hosts in the land", 4, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, j));
    wait_done(j, 5000);
    assert_int_equal(j->state, WK_JOB_FAILED);
    assert_string_equal(j->err_code, "CONTEXT_OVERFLOW");
    wk_job *empty = make_job(f, "And", 3, 0.0f, 1, NULL);
    llm_job_task(empty)->req.n_prompt = 0;
    TU_OK(llm_engine_submit(e, empty));
    wait_done(empty, 5000);
    assert_string_equal(empty->err_code, "INVALID_PARAMS");
    wk_job_unref(empty);
    wk_job *ok = make_job(f, "And", 3, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, ok));
    wait_done(ok, 5000);
    assert_int_equal(ok->state, WK_JOB_DONE);
    wk_job_unref(j);
    wk_job_unref(ok);
    llm_engine_destroy(e);
}

/* ---- choices, log probabilities, logit bias, embeddings ---- */

static wk_job *make_openai_job(fixture *f, const char *prompt, int64_t max_tokens, float temp, uint64_t seed, int n,
                               int top_logprobs, const rb_logit_bias *bias, size_t n_bias) {
    llm_gen_request req;
    memset(&req, 0, sizeof req);
    TU_OK(rb_tokenizer_encode(f->tok, prompt, strlen(prompt), RB_TOK_ADD_SPECIAL, &req.prompt, &req.n_prompt, NULL));
    req.sampling = rb_sampler_default_params();
    req.sampling.temperature = temp;
    req.sampling.seed = seed;
    req.max_tokens = max_tokens;
    req.n_choices = n;
    req.logprobs = top_logprobs >= 0;
    req.top_logprobs = top_logprobs > 0 ? top_logprobs : 0;
    if (n_bias) {
        req.bias = malloc(sizeof *bias * n_bias);
        assert_non_null(req.bias);
        memcpy(req.bias, bias, sizeof *bias * n_bias);
        req.sampling.logit_bias = req.bias;
        req.sampling.n_logit_bias = n_bias;
    }
    wk_job *j = llm_job_new(LLM_API_COMPLETION, &req, "test", NULL);
    assert_non_null(j);
    return j;
}

static int event_choice(const wk_event *e) {
    json_t *c = json_object_get(e->data, "choice");
    return json_is_integer(c) ? (int)json_integer_value(c) : 0;
}

/* Text of one choice. */
static size_t choice_text(wk_job *j, int choice, char *buf, size_t cap) {
    size_t len = 0;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n_events; i++) {
        const wk_event *e = &j->events[i];
        if (strcmp(e->type, "token") != 0 || event_choice(e) != choice) continue;
        assert_true(len + e->raw_len < cap);
        memcpy(buf + len, e->raw, e->raw_len);
        len += e->raw_len;
    }
    pthread_mutex_unlock(&j->mu);
    return len;
}

/* The log-probability entries of one choice, in order (a new array). */
static json_t *choice_entries(wk_job *j, int choice) {
    json_t *a = json_array();
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n_events; i++) {
        const wk_event *e = &j->events[i];
        if (!strcmp(e->type, "logprobs") && event_choice(e) == choice)
            json_array_append(a, json_object_get(e->data, "entry"));
    }
    pthread_mutex_unlock(&j->mu);
    return a;
}

static void choices_match_alone(void **state, int chunk) {
    fixture *f = *state;
    const int64_t ctx = 96;
    llm_engine_opts o = {.parallel = 4, .ctx_size = ctx, .queue_depth = 4, .step = NULL, .prefill_chunk = chunk};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *other = make_job(f, "In the beginning", 30, 0.0f, 1, NULL); /* shares the batch */
    wk_job *sampled = make_openai_job(f, "And the LORD spake", 24, 0.9f, 77, 3, -1, NULL, 0);
    wk_job *greedy = make_openai_job(f, "And God said", 16, 0.0f, 5, 3, -1, NULL, 0);
    wk_job *too_many = make_openai_job(f, "x", 2, 0.0f, 5, 5, -1, NULL, 0);
    assert_int_equal(llm_engine_submit(e, too_many), RB_E_INVALID); /* 5 choices, 4 slots */
    TU_OK(llm_engine_submit(e, other));
    TU_OK(llm_engine_submit(e, sampled));
    TU_OK(llm_engine_submit(e, greedy)); /* waits for three free slots */
    wait_done(other, 60000);
    wait_done(sampled, 60000);
    wait_done(greedy, 60000);
    llm_engine_destroy(e);
    char got[4][4096];
    size_t glen[4];
    int differ = 0;
    int64_t sum = 0;
    for (int c = 0; c < 3; c++) {
        glen[c] = choice_text(sampled, c, got[c], sizeof got[c]);
        /* alone, with the choice's own seed */
        wk_job *alone = make_openai_job(f, "And the LORD spake", 24, 0.9f, 77 + (uint64_t)c, 1, -1, NULL, 0);
        ref_out ref;
        reference(f, alone, ctx, &ref);
        if (glen[c] != ref.len || memcmp(got[c], ref.text, ref.len) != 0)
            fail_msg("choice %d: '%.*s' != alone with seed %d: '%.*s'", c, (int)glen[c], got[c], 77 + c, (int)ref.len,
                     ref.text);
        const llm_choice_out *co = &llm_job_task(sampled)->choices[c];
        assert_int_equal(co->stop_reason, ref.res.stop_reason);
        assert_int_equal(co->tokens_out, ref.res.n_generated - (ref.res.stop_reason == RB_STOP_EOS ? 1 : 0));
        sum += co->tokens_out;
        if (c > 0) differ += glen[c] != glen[0] || memcmp(got[c], got[0], glen[0]) != 0;
        wk_job_unref(alone);
    }
    assert_true(differ > 0); /* three seeds, three texts */
    assert_int_equal(llm_job_task(sampled)->tokens_out, sum);
    for (int c = 0; c < 3; c++) glen[c] = choice_text(greedy, c, got[c], sizeof got[c]);
    assert_true(glen[0] > 0);
    for (int c = 1; c < 3; c++) {
        assert_int_equal(glen[c], glen[0]);
        assert_memory_equal(got[c], got[0], glen[0]);
    }
    ref_out ref;
    reference(f, greedy, ctx, &ref);
    assert_int_equal(glen[0], ref.len);
    assert_memory_equal(got[0], ref.text, ref.len);
    /* the OpenAI jobs tell each choice's end */
    size_t ends = 0;
    for (size_t i = 0; i < sampled->n_events; i++) ends += !strcmp(sampled->events[i].type, "choice_end");
    assert_int_equal(ends, 3);
    wk_job_unref(other);
    wk_job_unref(sampled);
    wk_job_unref(greedy);
    wk_job_unref(too_many);
}

static void test_choices_match_alone(void **state) { choices_match_alone(state, 0); }
static void test_chunked_choices_match_alone(void **state) { choices_match_alone(state, 2); }

/* log-softmax of one row in double */
static void log_softmax(const float *x, int64_t n, double *out) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    for (int64_t i = 0; i < n; i++) out[i] = (double)x[i] - mx - log(s);
}

/* Checks a job's entries against rb_model_forward's logits of the prompt and
 * the chosen tokens (an f16 cache, as the engine's). Returns the chosen ids. */
static void check_entries(fixture *f, wk_job *j, int choice, int top_k, int32_t *chosen, size_t *n_chosen) {
    const llm_gen_request *r = &llm_job_task(j)->req;
    json_t *ents = choice_entries(j, choice);
    const size_t n = json_array_size(ents);
    assert_true(n > 0);
    const int64_t V = rb_model_get_config(f->m)->n_vocab;
    int32_t *seq = malloc(sizeof(int32_t) * (r->n_prompt + n));
    float *lg = malloc(sizeof(float) * (size_t)V * (r->n_prompt + n));
    double *ls = malloc(sizeof(double) * (size_t)V);
    assert_true(seq && lg && ls);
    memcpy(seq, r->prompt, sizeof(int32_t) * r->n_prompt);
    for (size_t i = 0; i < n; i++) seq[r->n_prompt + i] = (int32_t)json_integer_value(json_object_get(json_array_get(ents, i), "id"));
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(f->m, 128, RB_F16, &kv, NULL));
    TU_OK(rb_model_forward(f->m, kv, seq, (int64_t)(r->n_prompt + n), true, lg, NULL));
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *en = json_array_get(ents, i);
        log_softmax(lg + (r->n_prompt - 1 + i) * (size_t)V, V, ls);
        const int32_t id = seq[r->n_prompt + i];
        const double d = fabs(json_real_value(json_object_get(en, "logprob")) - ls[id]);
        worst = d > worst ? d : worst;
        /* the k largest, in order */
        json_t *top = json_object_get(en, "top_logprobs");
        assert_int_equal((int)json_array_size(top), top_k);
        double prev = INFINITY;
        for (int k = 0; k < top_k; k++) {
            json_t *t = json_array_get(top, (size_t)k);
            const int32_t tid = (int32_t)json_integer_value(json_object_get(t, "id"));
            const double lp = json_real_value(json_object_get(t, "logprob"));
            assert_true(fabs(lp - ls[tid]) < 1e-4);
            assert_true(ls[tid] <= prev + 1e-9);
            prev = ls[tid];
            int above = 0; /* no other token is more likely than the k-th listed */
            for (int64_t v = 0; v < V; v++) above += ls[v] > ls[tid] + 1e-6;
            assert_true(above <= k);
        }
        /* token and bytes: the token's piece */
        char *piece = NULL;
        size_t pl = 0;
        TU_OK(rb_tokenizer_token_piece(f->tok, id, &piece, &pl, NULL));
        json_t *bytes = json_object_get(en, "bytes");
        assert_int_equal(json_array_size(bytes), pl);
        for (size_t b = 0; b < pl; b++) assert_int_equal(json_integer_value(json_array_get(bytes, b)), (unsigned char)piece[b]);
        free(piece);
        if (chosen) chosen[i] = id;
    }
    print_message("choice %d: %zu tokens, |logprob - log-softmax(logits)| <= %.2e\n", choice, n, worst);
    assert_true(worst < 1e-4);
    if (n_chosen) *n_chosen = n;
    rb_kv_cache_free(kv);
    free(seq);
    free(lg);
    free(ls);
    json_decref(ents);
}

static int32_t argmax_row(const float *x, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; i++) a = x[i] > x[a] ? i : a;
    return (int32_t)a;
}

static void test_logprobs_match_logits(void **state) {
    fixture *f = *state;
    const int64_t V = rb_model_get_config(f->m)->n_vocab;
    /* the greedy first token, to bias against */
    float *row = malloc(sizeof(float) * (size_t)V);
    assert_non_null(row);
    llm_gen_request tmp;
    memset(&tmp, 0, sizeof tmp);
    TU_OK(rb_tokenizer_encode(f->tok, "And God said", 12, RB_TOK_ADD_SPECIAL, &tmp.prompt, &tmp.n_prompt, NULL));
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(f->m, 32, RB_F16, &kv, NULL));
    TU_OK(rb_model_forward(f->m, kv, tmp.prompt, (int64_t)tmp.n_prompt, false, row, NULL));
    const int32_t first = argmax_row(row, V);
    rb_kv_cache_free(kv);
    llm_gen_request_free(&tmp);
    free(row);

    llm_engine_opts o = {.parallel = 4, .ctx_size = 96, .queue_depth = 4, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    const rb_logit_bias ban = {first, -100.0f};
    wk_job *greedy = make_openai_job(f, "And God said", 10, 0.0f, 1, 1, 5, NULL, 0);
    wk_job *sampled = make_openai_job(f, "In the beginning God", 10, 1.2f, 42, 2, 3, NULL, 0);
    wk_job *banned = make_openai_job(f, "And God said", 6, 0.0f, 1, 1, 2, &ban, 1);
    llm_job_task(sampled)->req.sampling.repetition_penalty = 1.3f; /* transforms that do not show in logprobs */
    llm_job_task(sampled)->req.sampling.top_k = 40;
    TU_OK(llm_engine_submit(e, greedy));
    TU_OK(llm_engine_submit(e, sampled));
    TU_OK(llm_engine_submit(e, banned));
    wait_done(greedy, 60000);
    wait_done(sampled, 60000);
    wait_done(banned, 60000);
    llm_engine_destroy(e);
    int32_t ids[64];
    size_t n = 0;
    check_entries(f, greedy, 0, 5, ids, &n);
    assert_int_equal(ids[0], first);
    assert_int_equal((int64_t)n, llm_job_task(greedy)->tokens_out);
    check_entries(f, sampled, 0, 3, NULL, NULL);
    check_entries(f, sampled, 1, 3, NULL, NULL);
    check_entries(f, banned, 0, 2, ids, &n);
    assert_true(ids[0] != first); /* -100 moved the pick; the values are the raw model's (checked above) */
    json_t *ents = choice_entries(banned, 0);
    json_t *top0 = json_array_get(json_object_get(json_array_get(ents, 0), "top_logprobs"), 0);
    assert_int_equal(json_integer_value(json_object_get(top0, "id")), first); /* still the likeliest */
    json_decref(ents);
    wk_job_unref(greedy);
    wk_job_unref(sampled);
    wk_job_unref(banned);
}

static void test_logit_bias_steers(void **state) {
    fixture *f = *state;
    llm_engine_opts o = {.parallel = 2, .ctx_size = 64, .queue_depth = 4, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    const int32_t forced = rb_tokenizer_token_id(f->tok, "\xC4\xA0" "Egypt", 7); /* " Egypt" (byte-level) */
    assert_true(forced > 0);
    const rb_logit_bias up = {forced, 100.0f};
    wk_job *j = make_openai_job(f, "And God said", 3, 0.0f, 1, 1, 0, &up, 1);
    TU_OK(llm_engine_submit(e, j));
    wait_done(j, 60000);
    llm_engine_destroy(e);
    json_t *ents = choice_entries(j, 0);
    assert_int_equal(json_array_size(ents), 3);
    for (size_t i = 0; i < 3; i++) /* +100 wins every greedy step */
        assert_int_equal(json_integer_value(json_object_get(json_array_get(ents, i), "id")), forced);
    char text[256];
    size_t len = choice_text(j, 0, text, sizeof text);
    assert_int_equal(len, 18);
    assert_memory_equal(text, " Egypt Egypt Egypt", 18);
    json_decref(ents);
    wk_job_unref(j);
}

/* A special token a request keeps (a tool-call marker such as Mistral's
 * [TOOL_CALLS]) comes out as its text between the text around it; without
 * keeping it is dropped like every special token. The bundled model's
 * <|begin_of_text|> (id 0, special, not end-of-sequence) plays the marker,
 * forced with logit_bias. */
static void test_kept_special_token(void **state) {
    fixture *f = *state;
    assert_true(rb_tokenizer_is_special(f->tok, 0));
    llm_engine_opts o = {.parallel = 2, .ctx_size = 64, .queue_depth = 4, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    const rb_logit_bias up = {0, 100.0f};
    wk_job *kept = make_openai_job(f, "And God said", 3, 0.0f, 1, 1, -1, &up, 1);
    llm_job_task(kept)->req.keep_ids[0] = 0;
    llm_job_task(kept)->req.n_keep = 1;
    wk_job *dropped = make_openai_job(f, "And God said", 3, 0.0f, 1, 1, -1, &up, 1);
    TU_OK(llm_engine_submit(e, kept));
    TU_OK(llm_engine_submit(e, dropped));
    wait_done(kept, 60000);
    wait_done(dropped, 60000);
    llm_engine_destroy(e);
    char text[256];
    size_t len = choice_text(kept, 0, text, sizeof text);
    assert_int_equal(len, 3 * 17);
    assert_memory_equal(text, "<|begin_of_text|><|begin_of_text|><|begin_of_text|>", 3 * 17);
    assert_int_equal(choice_text(dropped, 0, text, sizeof text), 0);
    wk_job_unref(kept);
    wk_job_unref(dropped);
}

static wk_job *make_embed_job(fixture *f, const char *const *texts, size_t n, llm_pooling pool) {
    llm_embed_request er;
    memset(&er, 0, sizeof er);
    er.offs = calloc(n + 1, sizeof *er.offs);
    er.tokens = malloc(sizeof(int32_t) * 512);
    assert_true(er.offs && er.tokens);
    for (size_t i = 0; i < n; i++) {
        int32_t *ids = NULL;
        size_t k = 0;
        TU_OK(rb_tokenizer_encode(f->tok, texts[i], strlen(texts[i]), RB_TOK_ADD_SPECIAL, &ids, &k, NULL));
        assert_true(er.offs[i] + k <= 512);
        memcpy(er.tokens + er.offs[i], ids, sizeof(int32_t) * k);
        er.offs[i + 1] = er.offs[i] + k;
        free(ids);
    }
    er.n_inputs = n;
    er.pooling = pool;
    wk_job *j = llm_job_new_embed(&er, "test", NULL);
    assert_non_null(j);
    return j;
}

static void test_embeddings(void **state) {
    fixture *f = *state;
    const char *const texts[] = {"And God said, Let there be light", "In the beginning", "Egypt"};
    llm_engine_opts o = {.parallel = 2, .ctx_size = 64, .queue_depth = 4, .step = NULL};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *gen = make_job(f, "And the LORD", 20, 0.0f, 1, NULL); /* decoding meanwhile */
    wk_job *mean = make_embed_job(f, texts, 3, LLM_POOL_MEAN), *last = make_embed_job(f, texts, 3, LLM_POOL_LAST);
    TU_OK(llm_engine_submit(e, gen));
    TU_OK(llm_engine_submit(e, mean));
    TU_OK(llm_engine_submit(e, last));
    wait_done(gen, 60000);
    wait_done(mean, 60000);
    wait_done(last, 60000);
    llm_engine_destroy(e);
    assert_int_equal(mean->state, WK_JOB_DONE);
    const int64_t E = rb_model_get_config(f->m)->n_embd;
    const llm_embed_request *em = &llm_job_task(mean)->emb, *el = &llm_job_task(last)->emb;
    assert_int_equal(em->n_embd, E);
    float *h = malloc(sizeof(float) * 64 * (size_t)E);
    assert_non_null(h);
    for (size_t i = 0; i < 3; i++) {
        const size_t n = em->offs[i + 1] - em->offs[i];
        rb_kv_cache *kv = NULL;
        TU_OK(rb_kv_cache_create(f->m, 64, RB_F16, &kv, NULL));
        TU_OK(rb_model_forward_hidden(f->m, kv, em->tokens + em->offs[i], (int64_t)n, h, NULL));
        rb_kv_cache_free(kv);
        double pm[512], pl[512], nm = 0, nl = 0, cos = 0;
        for (int64_t d = 0; d < E; d++) {
            pm[d] = 0;
            for (size_t t = 0; t < n; t++) pm[d] += h[t * (size_t)E + (size_t)d];
            pm[d] /= (double)n;
            pl[d] = h[(n - 1) * (size_t)E + (size_t)d];
            nm += pm[d] * pm[d];
            nl += pl[d] * pl[d];
        }
        double um = 0, ul = 0;
        for (int64_t d = 0; d < E; d++) {
            const float vm = em->vectors[i * (size_t)E + (size_t)d], vl = el->vectors[i * (size_t)E + (size_t)d];
            assert_true(fabs(vm - pm[d] / sqrt(nm)) < 1e-6);
            assert_true(fabs(vl - pl[d] / sqrt(nl)) < 1e-6);
            um += (double)vm * vm;
            ul += (double)vl * vl;
            cos += (double)vm * vl;
        }
        assert_true(fabs(um - 1) < 1e-5 && fabs(ul - 1) < 1e-5);
        if (n > 1) assert_true(cos < 0.999); /* mean and last pooling differ */
    }
    free(h);
    wk_job_unref(gen);
    wk_job_unref(mean);
    wk_job_unref(last);
}

/* ---- chunked prefill ---- */

/* A prompt of `reps` times "And God said unto Moses " and a tail word. */
static void long_prompt(char *buf, size_t cap, int reps, const char *tail) {
    buf[0] = '\0';
    for (int i = 0; i < reps; i++) strncat(buf, "And God said unto Moses ", cap - strlen(buf) - 1);
    strncat(buf, tail, cap - strlen(buf) - 1);
}

/* Time of j's first event of a type (-1: none). */
static double event_time(wk_job *j, const char *type) {
    double t = -1;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n_events && t < 0; i++)
        if (!strcmp(j->events[i].type, type)) t = j->events[i].t_ms;
    pthread_mutex_unlock(&j->mu);
    return t;
}

/* j's token events strictly between t0 and t1. */
static int tokens_between(wk_job *j, double t0, double t1) {
    int n = 0;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n_events; i++)
        n += !strcmp(j->events[i].type, "token") && j->events[i].t_ms > t0 && j->events[i].t_ms < t1;
    pthread_mutex_unlock(&j->mu);
    return n;
}

/* A stream decodes while a long prompt arrives: with chunks it emits tokens
 * between that job's start and its first token, without chunks none; both
 * outputs equal rb_generate alone either way. */
static void interleave(fixture *f, int chunk, int *between) {
    llm_engine_opts o = {.parallel = 2, .ctx_size = 512, .queue_depth = 2, .step = NULL, .prefill_chunk = chunk};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *a = make_job(f, "In the beginning", 150, 0.0f, 1, NULL);
    llm_job_task(a)->req.ignore_eos = true;
    char lp[4096];
    long_prompt(lp, sizeof lp, 40, "and the LORD");
    wk_job *b = make_job(f, lp, 6, 0.0f, 1, NULL);
    assert_true(llm_job_task(b)->req.n_prompt > 200);
    TU_OK(llm_engine_submit(e, a));
    while (llm_job_task(a)->n_pieces < 3) wait_events(a);
    TU_OK(llm_engine_submit(e, b));
    wait_done(b, 60000);
    wait_done(a, 60000);
    llm_engine_destroy(e);
    assert_int_equal(a->state, WK_JOB_DONE);
    assert_int_equal(b->state, WK_JOB_DONE);
    const double t0 = event_time(b, "started"), t1 = event_time(b, "token");
    assert_true(t0 > 0 && t1 >= t0);
    *between = tokens_between(a, t0, t1);
    print_message("prefill chunk %d: %d tokens of the running stream during a %zu-token prefill (%.1f ms)\n", chunk,
                  *between, llm_job_task(b)->req.n_prompt, t1 - t0);
    check_alone(f, a, "the running stream");
    check_alone(f, b, "the long prompt");
    wk_job_unref(a);
    wk_job_unref(b);
}

static void test_chunked_interleaves(void **state) {
    int with = 0, without = -1;
    interleave(*state, 8, &with);
    interleave(*state, 0, &without);
    assert_int_equal(without, 0);
    assert_true(with >= 10); /* over 200 prompt tokens in pieces of 8: 25 steps, one token of the stream each */
}

/* A grammar's output, a prompt that fills the context (one token of room
 * left) and one that does not fit, all with chunks, beside a decoding
 * stream: the grammar job's text equals the unchunked engine's, the others
 * rb_generate alone's (a context of the same size). */
static void test_chunked_grammar_and_context(void **state) {
    fixture *f = *state;
    const char *gbnf = "root ::= (\" God\" | \" Moses\" | \" the LORD\")+ \".\"";
    char lp[4096];
    long_prompt(lp, sizeof lp, 12, "and");
    int32_t *ids = NULL;
    size_t n_lp = 0;
    TU_OK(rb_tokenizer_encode(f->tok, lp, strlen(lp), RB_TOK_ADD_SPECIAL, &ids, &n_lp, NULL));
    free(ids);
    const int64_t ctx = (int64_t)n_lp + 1;
    char text[2][4096];
    size_t len[2];
    for (int pass = 0; pass < 2; pass++) {
        llm_engine_opts o = {.parallel = 3, .ctx_size = ctx, .queue_depth = 3, .step = NULL, .prefill_chunk = pass ? 5 : 0};
        llm_engine *e = NULL;
        TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
        TU_OK(llm_engine_start(e, NULL));
        wk_job *run = make_job(f, "In the beginning", 40, 0.0f, 1, NULL);
        wk_job *g = make_job(f, "And God said unto Moses and the LORD spake unto", 12, 0.0f, 1, NULL);
        TU_OK(rb_grammar_parse(gbnf, strlen(gbnf), "root", &llm_job_task(g)->req.grammar, NULL));
        wk_job *full = make_job(f, lp, 20, 0.0f, 1, NULL);
        char over[4200];
        snprintf(over, sizeof over, "%s the", lp);
        wk_job *big = make_job(f, over, 4, 0.0f, 1, NULL);
        TU_OK(llm_engine_submit(e, run));
        TU_OK(llm_engine_submit(e, g));
        TU_OK(llm_engine_submit(e, full));
        TU_OK(llm_engine_submit(e, big));
        wait_done(run, 60000);
        wait_done(g, 60000);
        wait_done(full, 60000);
        wait_done(big, 60000);
        llm_engine_destroy(e);
        assert_int_equal(g->state, WK_JOB_DONE);
        job_text(g, text[pass], sizeof text[pass], &len[pass]);
        assert_true(len[pass] > 0);
        assert_string_equal(big->err_code, "CONTEXT_OVERFLOW");
        assert_int_equal(full->state, WK_JOB_DONE);
        assert_int_equal(llm_job_task(full)->tokens_out, 2); /* the prompt's logits', then the last position's */
        assert_int_equal(llm_job_task(full)->stop_reason, RB_STOP_MAX_TOKENS);
        ref_out ref;
        reference(f, full, ctx, &ref);
        char got[8192];
        size_t glen = 0;
        job_text(full, got, sizeof got, &glen);
        assert_int_equal(glen, ref.len);
        assert_memory_equal(got, ref.text, glen);
        check_alone(f, run, "the running stream");
        wk_job *all[] = {run, g, full, big};
        for (int i = 0; i < 4; i++) wk_job_unref(all[i]);
    }
    assert_int_equal(len[0], len[1]);
    assert_memory_equal(text[0], text[1], len[0]);
    assert_true(text[0][len[0] - 1] == '.');
}

/* A mixed step slowed down, so that a test can act between two of them. */
static rb_status slow_seqs(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts, int n,
                           float *logits, rb_error *err) {
    wk_sleep_ms(3);
    return llm_seqs_forward(m, kvs, tokens, counts, n, logits, err);
}

/* A job cancelled halfway through its prompt ends without tokens, the
 * stream beside it goes on, and with cache_prompt the next job with that
 * prompt takes exactly the positions the cancelled one had run (and still
 * equals rb_generate alone). */
static void test_chunked_cancel_midway(void **state) {
    fixture *f = *state;
    llm_engine_opts o = {.parallel = 2, .ctx_size = 512, .queue_depth = 2, .step = NULL, .seqs = slow_seqs,
                         .cache_prompt = true, .prefill_chunk = 8};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *a = make_job(f, "In the beginning", 200, 0.0f, 1, NULL);
    llm_job_task(a)->req.ignore_eos = true;
    char lp[4096];
    long_prompt(lp, sizeof lp, 40, "and the LORD");
    wk_job *b = make_job(f, lp, 6, 0.0f, 1, NULL), *b2 = make_job(f, lp, 6, 0.0f, 1, NULL);
    const size_t nb = llm_job_task(b)->req.n_prompt;
    TU_OK(llm_engine_submit(e, a));
    while (llm_job_task(a)->n_pieces < 2) wait_events(a);
    TU_OK(llm_engine_submit(e, b));
    while (event_time(b, "started") < 0) wait_events(b);
    const int before = (int)llm_job_task(a)->n_pieces;
    while ((int)llm_job_task(a)->n_pieces < before + 4) wait_events(a); /* a few pieces of b ran */
    wk_job_cancel(b);
    llm_engine_poke(e);
    wait_done(b, 5000);
    assert_int_equal(llm_job_task(b)->stop_reason, RB_STOP_CANCELLED);
    assert_int_equal(llm_job_task(b)->tokens_out, 0);
    assert_true(event_time(b, "token") < 0);
    assert_false(wk_job_is_finished(a)); /* the stream goes on */
    TU_OK(llm_engine_submit(e, b2));
    wait_done(b2, 60000);
    wait_done(a, 60000);
    llm_engine_destroy(e);
    const int64_t got = llm_job_task(b2)->cached_tokens;
    print_message("cancelled after %lld of %zu prompt tokens\n", (long long)got, nb);
    const int64_t ran = got - llm_job_task(b)->cached_tokens; /* b may have copied the BOS position from a */
    assert_true(ran >= 8 && got < (int64_t)nb - 8 && ran % 8 == 0); /* whole pieces of 8, not all of them */
    check_alone(f, b2, "the prompt after the cancelled one");
    check_alone(f, a, "the running stream");
    wk_job_unref(a);
    wk_job_unref(b);
    wk_job_unref(b2);
}

/* A mixed step that fails when a sequence brings 20 tokens or more (a long
 * prompt's piece), and runs otherwise. */
static rb_status failing_seqs(rb_model *m, rb_kv_cache *const *kvs, const int32_t *tokens, const int64_t *counts,
                              int n, float *logits, rb_error *err) {
    for (int i = 0; i < n; i++)
        if (counts[i] >= 20) return rb_error_set(err, RB_E_BACKEND, "injected failure");
    return llm_seqs_forward(m, kvs, tokens, counts, n, logits, err);
}

/* Where the pieces run apart from the decode tokens (a batch-invariant
 * backend), a failed piece fails its job alone: the stream beside it goes
 * on and still equals rb_generate alone on that backend. */
static void test_chunked_failure_fails_one_job(void **state) {
    fixture *f = *state;
    rb_backend_config bc = {.n_threads = 0, .cpu_isa = NULL, .batch_invariant = true};
    rb_backend *be = NULL;
    rb_model *m = NULL;
    TU_OK(rb_backend_create("cpu", &bc, &be, NULL));
    TU_OK(rb_model_load(RBEE_DEFAULT_MODEL_DIR "/rbee-default-q8_0.gguf", be, NULL, &m, NULL));
    llm_engine_opts o = {.parallel = 2, .ctx_size = 256, .queue_depth = 2, .step = NULL, .seqs = failing_seqs,
                         .prefill_chunk = 32};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *run = make_job(f, "In the beginning", 40, 0.0f, 1, NULL); /* a prompt of a few tokens: one piece */
    llm_job_task(run)->req.ignore_eos = true;
    char lp[4096];
    long_prompt(lp, sizeof lp, 10, "and");
    wk_job *bad = make_job(f, lp, 4, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, run));
    while (llm_job_task(run)->n_pieces < 2) wait_events(run);
    TU_OK(llm_engine_submit(e, bad));
    wait_done(bad, 60000);
    assert_false(wk_job_is_finished(run));
    wait_done(run, 60000);
    llm_engine_destroy(e);
    assert_string_equal(bad->err_code, "INFERENCE_FAILED");
    assert_int_equal(run->state, WK_JOB_DONE);
    assert_int_equal(llm_job_task(run)->tokens_out, 40);
    rb_model *fm = f->m;
    f->m = m; /* the reference on the batch-invariant backend */
    check_alone(f, run, "the stream beside a failed prefill");
    f->m = fm;
    wk_job_unref(run);
    wk_job_unref(bad);
    rb_model_free(m);
    rb_backend_destroy(be);
}

/* One job's log probabilities (the JSON text of its entries). */
static char *entries_text(wk_job *j) {
    json_t *a = choice_entries(j, 0);
    char *t = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(a);
    assert_non_null(t);
    return t;
}

/* On a batch-invariant CPU backend (--deterministic), with the q8_0 weights
 * the worker serves by default, a prompt run in pieces
 * beside other streams and prefills gives the log probabilities, bit for
 * bit, of the same prompt run whole and alone; with cache_prompt a second
 * copy (its prefix taken from the cache) too. */
static void test_chunked_exact_logprobs(void **state) {
    fixture *f = *state;
    rb_backend_config bc = {.n_threads = 0, .cpu_isa = NULL, .batch_invariant = true};
    rb_backend *be = NULL;
    rb_model *m = NULL;
    TU_OK(rb_backend_create("cpu", &bc, &be, NULL));
    /* q8_0 weights: their products of more than RB_BATCH_INVARIANT_ROWS rows take the packed kernels */
    TU_OK(rb_model_load(RBEE_DEFAULT_MODEL_DIR "/rbee-default-q8_0.gguf", be, NULL, &m, NULL));
    char lp[4096], lp2[4096];
    long_prompt(lp, sizeof lp, 14, "and the LORD");
    long_prompt(lp2, sizeof lp2, 11, "in the land of Egypt");
    char *want = NULL;
    for (int pass = 0; pass < 3; pass++) {
        const int chunk = pass == 0 ? 0 : pass == 1 ? 8 : 40;
        llm_engine_opts o = {.parallel = 4, .ctx_size = 256, .queue_depth = 4, .step = NULL, .cache_prompt = true,
                             .prefill_chunk = chunk};
        llm_engine *e = NULL;
        TU_OK(llm_engine_create(m, f->tok, &o, NULL, NULL, &e, NULL));
        TU_OK(llm_engine_start(e, NULL));
        wk_job *run = NULL, *other = NULL;
        if (pass > 0) { /* company: a stream and another prefill */
            run = make_job(f, "In the beginning", 60, 0.0f, 1, NULL);
            other = make_job(f, lp2, 10, 0.0f, 1, NULL);
            TU_OK(llm_engine_submit(e, run));
            while (llm_job_task(run)->n_pieces < 2) wait_events(run);
            TU_OK(llm_engine_submit(e, other));
        }
        wk_job *j = make_openai_job(f, lp, 12, 0.0f, 1, 1, 3, NULL, 0);
        wk_job *again = make_openai_job(f, lp, 12, 0.0f, 1, 1, 3, NULL, 0);
        TU_OK(llm_engine_submit(e, j));
        wait_done(j, 60000);
        TU_OK(llm_engine_submit(e, again));
        wait_done(again, 60000);
        if (run) wait_done(run, 60000);
        if (other) wait_done(other, 60000);
        llm_engine_destroy(e);
        assert_true(llm_job_task(again)->cached_tokens > 0);
        char *got = entries_text(j), *got2 = entries_text(again);
        if (!want) want = strdup(got);
        if (strcmp(got, want) != 0) fail_msg("chunk %d: log probabilities differ from an unchunked run", chunk);
        if (strcmp(got2, want) != 0) fail_msg("chunk %d, cached prefix: log probabilities differ", chunk);
        free(got);
        free(got2);
        wk_job_unref(j);
        wk_job_unref(again);
        if (run) wk_job_unref(run);
        if (other) wk_job_unref(other);
    }
    free(want);
    rb_model_free(m);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_matches_alone), cmocka_unit_test(test_sequential_step_matches_alone),
        cmocka_unit_test(test_single_slot),           cmocka_unit_test(test_stop_string),
        cmocka_unit_test(test_cancel_fast),           cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_bad_args),              cmocka_unit_test(test_choices_match_alone),
        cmocka_unit_test(test_logprobs_match_logits), cmocka_unit_test(test_logit_bias_steers),
        cmocka_unit_test(test_kept_special_token),
        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_cached_prompts_match_alone), cmocka_unit_test(test_cached_prompt_records),
        cmocka_unit_test(test_chunked_match_alone),        cmocka_unit_test(test_chunked_choices_match_alone),
        cmocka_unit_test(test_chunked_interleaves),        cmocka_unit_test(test_chunked_grammar_and_context),
        cmocka_unit_test(test_chunked_cancel_midway),      cmocka_unit_test(test_chunked_exact_logprobs),
        cmocka_unit_test(test_chunked_failure_fails_one_job),
    };
    if (getenv("LLM_TEST_FILTER")) cmocka_set_test_filter(getenv("LLM_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
