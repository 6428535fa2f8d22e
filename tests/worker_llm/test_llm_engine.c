/* The worker's continuous-batching scheduler against an independent
 * reference: every job run concurrently through llm_engine (jobs joining
 * and leaving mid-flight, batched forward passes) must produce exactly the
 * text, token count and stop reason that rb_generate gives for the same
 * request alone, greedy and seeded sampling alike. Also: stop strings,
 * cancellation latency, the bounded queue, and bad arguments. Uses the
 * bundled default model (KJV, byte-level BPE). */
#include "testutil.h"

#include "rbee/generate.h"
#include "worker/wk_util.h"
#include "worker_llm/llm_engine.h"
#include "worker_llm/llm_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    rb_backend *be;
    rb_model *m;
    rb_tokenizer *tok;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
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
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
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

static void run_concurrent(fixture *f, llm_step_fn step, int parallel, int n_jobs, uint64_t seed) {
    const int64_t ctx = 96;
    llm_engine_opts o = {.parallel = parallel, .ctx_size = ctx, .queue_depth = n_jobs, .step = step};
    llm_engine *e = NULL;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    tu_rng r;
    tu_rng_seed(&r, seed);
    wk_job **jobs = calloc((size_t)n_jobs, sizeof *jobs);
    for (int i = 0; i < n_jobs; i++) {
        char prompt[512];
        random_prompt(&r, 1 + (int)(tu_rng_u64(&r) % 9), prompt, sizeof prompt);
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
    run_concurrent(*state, llm_step_batched, 4, 11, 7);
}

static void test_sequential_step_matches_alone(void **state) {
    run_concurrent(*state, llm_step_sequential, 3, 7, 8);
}

static void test_single_slot(void **state) {
    run_concurrent(*state, NULL, 1, 4, 9);
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
    /* A prompt that does not fit the slot fails the job, not the engine. */
    o.ctx_size = 8;
    TU_OK(llm_engine_create(f->m, f->tok, &o, NULL, NULL, &e, NULL));
    TU_OK(llm_engine_start(e, NULL));
    wk_job *j = make_job(f, "And God said unto Moses the LORD of hosts in the land", 4, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, j));
    wait_done(j, 5000);
    assert_int_equal(j->state, WK_JOB_FAILED);
    assert_string_equal(j->err_code, "CONTEXT_OVERFLOW");
    wk_job *ok = make_job(f, "And", 3, 0.0f, 1, NULL);
    TU_OK(llm_engine_submit(e, ok));
    wait_done(ok, 5000);
    assert_int_equal(ok->state, WK_JOB_DONE);
    wk_job_unref(j);
    wk_job_unref(ok);
    llm_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_matches_alone), cmocka_unit_test(test_sequential_step_matches_alone),
        cmocka_unit_test(test_single_slot),           cmocka_unit_test(test_stop_string),
        cmocka_unit_test(test_cancel_fast),           cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_bad_args),
    };
    if (getenv("LLM_TEST_FILTER")) cmocka_set_test_filter(getenv("LLM_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
