/* Unit tests of the OpenAI features' pure parts: validation of n, logprobs /
 * top_logprobs, logit_bias, the stop-string bound and max_completion_tokens
 * per API (every bad value a field error naming the field); the embeddings
 * body; and the log-probability arithmetic against a naive double-precision
 * recomputation (log-softmax, the k largest in order with ties by id, NaN
 * and -inf entries), with the entry's token text and bytes taken from the
 * tokenizer's pieces. */
#include "testutil.h"

#include "worker/wk_request.h"
#include "worker_llm/llm_embed.h"
#include "worker_llm/llm_logprobs.h"
#include "worker_llm/llm_request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const char *s) {
    wk_errors e = {.n = 0};
    json_t *o = wk_parse_body(s, strlen(s), &e);
    assert_non_null(o);
    return o;
}

static bool has_error(const wk_errors *e, const char *field, const char *constraint) {
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->items[i].field, field) && !strncmp(e->items[i].constraint, constraint, strlen(constraint)))
            return true;
    return false;
}

/* Reads body for api with a 4096-token vocabulary and 4 choices at most. */
static void read(const char *body, llm_api api, llm_gen_request *r, wk_errors *e) {
    const llm_limits lim = {.n_vocab = 4096, .max_choices = 4};
    json_t *o = parse(body);
    memset(r, 0, sizeof *r);
    e->n = 0;
    llm_request_read_params(o, api, &lim, r, e);
    json_decref(o);
}

static void test_choices(void **state) {
    (void)state;
    llm_gen_request r;
    wk_errors e;
    read("{\"n\":3}", LLM_API_CHAT, &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_choices, 3);
    assert_int_equal(llm_gen_choices(&r), 3);
    llm_gen_request_free(&r);
    read("{}", LLM_API_COMPLETION, &r, &e);
    assert_int_equal(llm_gen_choices(&r), 1);
    llm_gen_request_free(&r);
    const char *bad[] = {"{\"n\":0}", "{\"n\":5}", "{\"n\":2.5}", "{\"n\":\"2\"}", "{\"n\":-1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        read(bad[i], LLM_API_COMPLETION, &r, &e);
        if (!has_error(&e, "n", "range:1..4")) fail_msg("%s: no n error", bad[i]);
        llm_gen_request_free(&r);
    }
    read("{\"n\":2}", LLM_API_RBEE, &r, &e);
    assert_true(has_error(&e, "n", "range:1..1"));
    llm_gen_request_free(&r);
    /* without limits (unknown worker): one choice */
    json_t *o = parse("{\"n\":2}");
    memset(&r, 0, sizeof r);
    e.n = 0;
    llm_request_read_params(o, LLM_API_CHAT, NULL, &r, &e);
    assert_true(has_error(&e, "n", "range:1..1"));
    llm_gen_request_free(&r);
    json_decref(o);
}

static void test_logprobs_fields(void **state) {
    (void)state;
    llm_gen_request r;
    wk_errors e;
    read("{\"logprobs\":true,\"top_logprobs\":20}", LLM_API_CHAT, &r, &e);
    assert_int_equal(e.n, 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 20);
    llm_gen_request_free(&r);
    read("{\"logprobs\":false,\"top_logprobs\":null}", LLM_API_CHAT, &r, &e);
    assert_int_equal(e.n, 0);
    assert_false(r.logprobs);
    llm_gen_request_free(&r);
    read("{\"logprobs\":true,\"top_logprobs\":21}", LLM_API_CHAT, &r, &e);
    assert_true(has_error(&e, "top_logprobs", "range:0..20"));
    llm_gen_request_free(&r);
    read("{\"logprobs\":true,\"top_logprobs\":-1}", LLM_API_CHAT, &r, &e);
    assert_true(has_error(&e, "top_logprobs", "range:0..20"));
    llm_gen_request_free(&r);
    read("{\"top_logprobs\":3}", LLM_API_CHAT, &r, &e); /* OpenAI: top_logprobs needs logprobs */
    assert_true(has_error(&e, "top_logprobs", "requires:logprobs"));
    llm_gen_request_free(&r);
    read("{\"logprobs\":2}", LLM_API_CHAT, &r, &e);
    assert_true(has_error(&e, "logprobs", "type:boolean"));
    llm_gen_request_free(&r);
    /* completions: the legacy integer */
    read("{\"logprobs\":5}", LLM_API_COMPLETION, &r, &e);
    assert_int_equal(e.n, 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 5);
    llm_gen_request_free(&r);
    read("{\"logprobs\":0}", LLM_API_COMPLETION, &r, &e); /* the chosen tokens only */
    assert_int_equal(e.n, 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 0);
    llm_gen_request_free(&r);
    const char *bad[] = {"{\"logprobs\":21}", "{\"logprobs\":true}", "{\"logprobs\":-2}", "{\"logprobs\":1.5}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        read(bad[i], LLM_API_COMPLETION, &r, &e);
        if (!has_error(&e, "logprobs", "range:0..20")) fail_msg("%s: no logprobs error", bad[i]);
        llm_gen_request_free(&r);
    }
    read("{\"logprobs\":1,\"top_logprobs\":1}", LLM_API_COMPLETION, &r, &e);
    assert_true(has_error(&e, "top_logprobs", "unsupported_parameter"));
    llm_gen_request_free(&r);
    /* the rbee job stream has no place for them */
    read("{\"logprobs\":true}", LLM_API_RBEE, &r, &e);
    assert_true(has_error(&e, "logprobs", "unsupported_parameter"));
    llm_gen_request_free(&r);
    read("{\"top_logprobs\":1}", LLM_API_RBEE, &r, &e);
    assert_true(has_error(&e, "top_logprobs", "unsupported_parameter"));
    llm_gen_request_free(&r);
}

static void test_logit_bias(void **state) {
    (void)state;
    llm_gen_request r;
    wk_errors e;
    read("{\"logit_bias\":{\"12\":5,\"4095\":-100,\"0\":100,\"007\":0.5}}", LLM_API_CHAT, &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.sampling.n_logit_bias, 4);
    assert_ptr_equal(r.sampling.logit_bias, r.bias);
    float want[4096] = {0};
    for (size_t i = 0; i < r.sampling.n_logit_bias; i++) want[r.bias[i].token] += r.bias[i].bias;
    assert_float_equal(want[12], 5.0f, 0);
    assert_float_equal(want[4095], -100.0f, 0);
    assert_float_equal(want[0], 100.0f, 0);
    assert_float_equal(want[7], 0.5f, 0);
    llm_gen_request_free(&r);
    read("{\"logit_bias\":{}}", LLM_API_RBEE, &r, &e); /* also on rbee jobs; empty asks nothing */
    assert_int_equal(e.n, 0);
    assert_int_equal(r.sampling.n_logit_bias, 0);
    llm_gen_request_free(&r);
    const char *bad[] = {
        "{\"logit_bias\":{\"abc\":1}}",   "{\"logit_bias\":{\"-3\":1}}",   "{\"logit_bias\":{\"1.5\":1}}",
        "{\"logit_bias\":{\"\":1}}",      "{\"logit_bias\":{\" 5\":1}}",   "{\"logit_bias\":{\"4096\":1}}",
        "{\"logit_bias\":{\"99999999999\":1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        read(bad[i], LLM_API_CHAT, &r, &e);
        if (!has_error(&e, "logit_bias", "key:token_id")) fail_msg("%s: no key error", bad[i]);
        llm_gen_request_free(&r);
    }
    const char *bad_val[] = {"{\"logit_bias\":{\"5\":101}}", "{\"logit_bias\":{\"5\":-100.5}}",
                             "{\"logit_bias\":{\"5\":\"1\"}}", "{\"logit_bias\":{\"5\":null}}"};
    for (size_t i = 0; i < sizeof bad_val / sizeof bad_val[0]; i++) {
        read(bad_val[i], LLM_API_CHAT, &r, &e);
        if (!has_error(&e, "logit_bias", "range:-100..100")) fail_msg("%s: no value error", bad_val[i]);
        llm_gen_request_free(&r);
    }
    read("{\"logit_bias\":[1,2]}", LLM_API_CHAT, &r, &e);
    assert_true(has_error(&e, "logit_bias", "type:object"));
    llm_gen_request_free(&r);
}

static void test_stop_and_max(void **state) {
    (void)state;
    char body[1024];
    size_t k = (size_t)snprintf(body, sizeof body, "{\"stop\":[");
    for (int i = 0; i < LLM_MAX_STOP; i++) k += (size_t)snprintf(body + k, sizeof body - k, "%s\"s%d\"", i ? "," : "", i);
    snprintf(body + k, sizeof body - k, "]}");
    llm_gen_request r;
    wk_errors e;
    read(body, LLM_API_COMPLETION, &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_stop, LLM_MAX_STOP);
    assert_string_equal(r.stop[LLM_MAX_STOP - 1], "s15");
    llm_gen_request_free(&r);
    /* max_completion_tokens is chat's newer name; given both, it wins */
    read("{\"max_tokens\":7,\"max_completion_tokens\":3}", LLM_API_CHAT, &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.max_tokens, 3);
    assert_string_equal(r.max_tokens_field, "max_completion_tokens");
    llm_gen_request_free(&r);
    read("{\"max_completion_tokens\":0}", LLM_API_CHAT, &r, &e);
    assert_true(has_error(&e, "max_completion_tokens", "range"));
    llm_gen_request_free(&r);
    read("{\"max_tokens\":7}", LLM_API_CHAT, &r, &e);
    assert_int_equal(r.max_tokens, 7);
    assert_string_equal(r.max_tokens_field, "max_tokens");
    llm_gen_request_free(&r);
}

/* ---- embeddings bodies ---- */

static rb_tokenizer *g_tok;

static int setup_tok(void **state) {
    (void)state;
    rb_error err;
    rb_error_clear(&err);
    return rb_tokenizer_load_hf(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer.json", RBEE_DEFAULT_MODEL_DIR
                                "/hf/tokenizer_config.json", &g_tok, &err) == RB_OK ? 0 : -1;
}

static int teardown_tok(void **state) {
    (void)state;
    rb_tokenizer_free(g_tok);
    return 0;
}

static void embed(const char *body, llm_embed_request *r, wk_errors *e) {
    const llm_embed_ctx c = {.tok = g_tok, .ctx_size = 8, .n_vocab = 4096, .n_embd = 256, .pooling = LLM_POOL_LAST};
    json_t *o = parse(body);
    const char *model = NULL;
    e->n = 0;
    llm_embed_read(&c, o, r, &model, e);
    json_decref(o);
}

static void test_embed_body(void **state) {
    (void)state;
    llm_embed_request r;
    wk_errors e;
    int32_t *ids = NULL;
    size_t n = 0;
    TU_OK(rb_tokenizer_encode(g_tok, "And God", 7, RB_TOK_ADD_SPECIAL, &ids, &n, NULL));
    embed("{\"input\":\"And God\",\"encoding_format\":\"base64\",\"dimensions\":256}", &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_inputs, 1);
    assert_true(r.base64);
    assert_int_equal(r.pooling, LLM_POOL_LAST);
    assert_int_equal(r.offs[1], n); /* BOS + the text, as /v1/completions encodes a prompt */
    assert_memory_equal(r.tokens, ids, n * sizeof(int32_t));
    llm_embed_request_free(&r);
    embed("{\"input\":[\"And God\",\"x\"]}", &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_inputs, 2);
    assert_memory_equal(r.tokens, ids, n * sizeof(int32_t));
    llm_embed_request_free(&r);
    embed("{\"input\":[5,6,7]}", &r, &e); /* one token list */
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_inputs, 1);
    assert_int_equal(r.offs[1], 3);
    assert_int_equal(r.tokens[2], 7);
    llm_embed_request_free(&r);
    embed("{\"input\":[[5,6],[7]]}", &r, &e);
    assert_int_equal(e.n, 0);
    assert_int_equal(r.n_inputs, 2);
    assert_int_equal(r.offs[1], 2);
    assert_int_equal(r.offs[2], 3);
    llm_embed_request_free(&r);
    struct { const char *body, *field, *constraint; } bad[] = {
        {"{}", "input", "required"},
        {"{\"input\":\"\"}", "input", "non_empty"},
        {"{\"input\":[]}", "input", "non_empty"},
        {"{\"input\":[[]]}", "input", "non_empty"},
        {"{\"input\":7}", "input", "type"},
        {"{\"input\":[{\"a\":1}]}", "input", "type"},
        {"{\"input\":[1,4096]}", "input", "token_id"},
        {"{\"input\":[[1,-1]]}", "input", "token_id"},
        {"{\"input\":[1,2,3,4,5,6,7,8,9]}", "input", "context"},
        {"{\"input\":\"x\",\"encoding_format\":\"int8\"}", "encoding_format", "value"},
        {"{\"input\":\"x\",\"dimensions\":64}", "dimensions", "value:256"},
        {"{\"input\":\"x\",\"model\":3}", "model", "type:string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        embed(bad[i].body, &r, &e);
        if (!has_error(&e, bad[i].field, bad[i].constraint))
            fail_msg("%s: no %s %s error (%d errors)", bad[i].body, bad[i].field, bad[i].constraint, e.n);
        llm_embed_request_free(&r);
    }
    free(ids);
}

/* ---- log probabilities ---- */

static double naive_lse(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i])) s += exp((double)x[i]);
    return log(s);
}

static void test_logprob_math(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 3);
    enum { N = 300 };
    float x[N];
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < N; i++) x[i] = tu_rng_range(&rng, -8.0f, 8.0f);
        x[7] = x[123] = x[250] = 9.5f; /* a three-way tie at the top: lower ids first */
        x[11] = NAN;
        x[12] = -INFINITY;
        const double lse = llm_logsumexp(x, N);
        assert_true(fabs(lse - naive_lse(x, N)) < 1e-9);
        llm_top_logprob top[20];
        const int k = 1 + trial % 20;
        assert_int_equal(llm_top_logprobs(x, N, lse, k, top), k);
        assert_int_equal(top[0].id, 7);
        if (k > 1) assert_int_equal(top[1].id, 123);
        if (k > 2) assert_int_equal(top[2].id, 250);
        for (int i = 0; i < k; i++) {
            assert_true(fabs(top[i].logprob - ((double)x[top[i].id] - lse)) < 1e-12);
            if (i) assert_true(top[i].logprob <= top[i - 1].logprob);
            /* nothing outside the list beats its last member */
            for (int j = 0; j < N; j++) {
                bool listed = false;
                for (int m = 0; m < k; m++) listed = listed || top[m].id == j;
                if (!listed && !isnan(x[j])) assert_true(x[j] <= x[top[k - 1].id]);
            }
        }
    }
    /* degenerate rows */
    float inf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    assert_true(llm_logsumexp(inf, 4) == -INFINITY);
    float nans[3] = {NAN, NAN, 1.0f};
    llm_top_logprob t[3];
    assert_int_equal(llm_top_logprobs(nans, 3, llm_logsumexp(nans, 3), 3, t), 1);
    assert_int_equal(t[0].id, 2);
    assert_true(fabs(t[0].logprob) < 1e-12);
}

static void test_logprob_entry(void **state) {
    (void)state;
    enum { V = 4096 };
    float *x = malloc(sizeof(float) * V);
    assert_non_null(x);
    tu_rng rng;
    tu_rng_seed(&rng, 9);
    for (int i = 0; i < V; i++) x[i] = tu_rng_range(&rng, -5.0f, 5.0f);
    x[1166] = 12.0f; /* " world" */
    x[0] = -INFINITY; /* BOS never: reported at OpenAI's floor */
    json_t *e = llm_logprob_entry(g_tok, x, V, 1166, 3);
    assert_non_null(e);
    const double lse = naive_lse(x, V);
    assert_int_equal(json_integer_value(json_object_get(e, "id")), 1166);
    assert_string_equal(json_string_value(json_object_get(e, "token")), " world");
    assert_true(fabs(json_real_value(json_object_get(e, "logprob")) - (12.0 - lse)) < 1e-9);
    json_t *bytes = json_object_get(e, "bytes");
    assert_int_equal(json_array_size(bytes), 6);
    const char *w = " world";
    for (size_t i = 0; i < 6; i++) assert_int_equal(json_integer_value(json_array_get(bytes, i)), (unsigned char)w[i]);
    json_t *top = json_object_get(e, "top_logprobs");
    assert_int_equal(json_array_size(top), 3);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(top, 0), "id")), 1166);
    json_decref(e);
    e = llm_logprob_entry(g_tok, x, V, 0, 0);
    assert_non_null(e);
    assert_true(json_real_value(json_object_get(e, "logprob")) == LLM_LOGPROB_FLOOR);
    assert_string_equal(json_string_value(json_object_get(e, "token")), "<|begin_of_text|>");
    assert_int_equal(json_array_size(json_object_get(e, "top_logprobs")), 0);
    json_decref(e);
    /* an id past the tokenizer (a padded head) has an empty text; outside the row: nothing */
    float *big = calloc(V + 8, sizeof(float));
    assert_non_null(big);
    e = llm_logprob_entry(g_tok, big, V + 8, V + 3, 1);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "token")), "");
    json_decref(e);
    assert_null(llm_logprob_entry(g_tok, x, V, V, 1));
    assert_null(llm_logprob_entry(g_tok, x, V, -1, 1));
    free(big);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choices),       cmocka_unit_test(test_logprobs_fields),
        cmocka_unit_test(test_logit_bias),    cmocka_unit_test(test_stop_and_max),
        cmocka_unit_test(test_embed_body),    cmocka_unit_test(test_logprob_math),
        cmocka_unit_test(test_logprob_entry),
    };
    return cmocka_run_group_tests(tests, setup_tok, teardown_tok);
}
