/* The bundled default model (models/default): its tokenizer, logits, greedy
 * continuations and held-out perplexity against the references recorded by
 * transformers when it was trained (models/default/reference.json), from the
 * HF folder (float32, exact references) and from the bundled Q8_0 GGUF made
 * by `rbee convert` (recorded greedy continuation; perplexity below the value
 * stated in the model card). */
#include "testutil.h"

#include "rbee/generate.h"
#include "rbee/gguf.h"
#include "rbee/json_config.h"
#include "rbee/model.h"
#include "rbee/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODELS RBEE_TEST_DATA_DIR "/../../models/default"
#define HF_DIR MODELS "/hf"
#define GGUF_Q8 MODELS "/rbee-default-q8_0.gguf"

typedef struct loaded {
    rb_backend *be;
    rb_model *m;
    rb_tokenizer *tok;
    rb_json_config *ref;
} loaded;

static void load(loaded *L, const char *path) {
    rb_error err;
    rb_error_clear(&err);
    TU_OK(rb_backend_create("cpu", NULL, &L->be, NULL));
    if (rb_model_load(path, L->be, NULL, &L->m, &err) != RB_OK) fail_msg("%s", err.msg);
    const struct rb_gguf *g = rb_model_gguf(L->m);
    if (g) {
        if (rb_tokenizer_load_gguf(g, &L->tok, &err) != RB_OK) fail_msg("%s", err.msg);
    } else if (rb_tokenizer_load_hf(HF_DIR "/tokenizer.json", HF_DIR "/tokenizer_config.json", &L->tok, &err) != RB_OK) {
        fail_msg("%s", err.msg);
    }
    if (rb_json_config_load(MODELS "/reference.json", &L->ref, &err) != RB_OK) fail_msg("%s", err.msg);
}

static void unload(loaded *L) {
    rb_json_config_free(L->ref);
    rb_tokenizer_free(L->tok);
    rb_model_free(L->m);
    rb_backend_destroy(L->be);
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return (int32_t)a;
}

static int32_t *ref_ids(const rb_json_config *j, const char *key, size_t *n) {
    TU_OK(rb_json_config_arr_len(j, key, n));
    int32_t *ids = malloc(sizeof(int32_t) * (*n + 1));
    assert_non_null(ids);
    for (size_t i = 0; i < *n; i++) {
        int64_t v;
        TU_OK(rb_json_config_arr_int(j, key, i, &v));
        ids[i] = (int32_t)v;
    }
    return ids;
}

/* greedy continuation of prompt_ids, n new tokens, f32 KV cache */
static int32_t *greedy(loaded *L, const int32_t *prompt, size_t np, size_t n) {
    rb_error err;
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(L->m, (int64_t)(np + n), RB_F32, &kv, &err));
    const int64_t V = rb_model_get_config(L->m)->n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)V);
    int32_t *out = malloc(sizeof(int32_t) * n);
    assert_non_null(lg);
    assert_non_null(out);
    if (rb_model_forward(L->m, kv, prompt, (int64_t)np, false, lg, &err) != RB_OK) fail_msg("%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        out[i] = argmax(lg, V);
        if (i + 1 < n && rb_model_forward(L->m, kv, &out[i], 1, false, lg, &err) != RB_OK) fail_msg("%s", err.msg);
    }
    free(lg);
    rb_kv_cache_free(kv);
    return out;
}

/* Token stream of heldout.txt as the reference builds it: per chapter
 * (split on blank lines) [bos] + tokens + [eos]. */
static int32_t *heldout_stream(loaded *L, size_t *n_out) {
    size_t len = 0;
    char *text = tu_read_file(MODELS "/heldout.txt", &len);
    int32_t *stream = malloc(sizeof(int32_t) * (len + 16));
    assert_non_null(stream);
    size_t n = 0;
    rb_error err;
    char *p = text, *end = text + len;
    while (p < end) {
        char *sep = strstr(p, "\n\n");
        char *stop = sep ? sep : end;
        bool blank = true;
        for (char *q = p; q < stop; q++)
            if (*q != ' ' && *q != '\n' && *q != '\t' && *q != '\r') blank = false;
        if (!blank) {
            int32_t *ids = NULL;
            size_t ni = 0;
            if (rb_tokenizer_encode(L->tok, p, (size_t)(stop - p), 0, &ids, &ni, &err) != RB_OK) fail_msg("%s", err.msg);
            stream[n++] = 0;
            memcpy(stream + n, ids, ni * sizeof(int32_t));
            n += ni;
            stream[n++] = 1;
            free(ids);
        }
        p = sep ? sep + 2 : end;
    }
    free(text);
    *n_out = n;
    return stream;
}

/* Mean negative log-likelihood with the reference method: non-overlapping
 * windows of 512 from an empty cache; position i predicts the next token. */
static double heldout_nll(loaded *L, int64_t *n_scored) {
    size_t n = 0;
    rb_error err;
    int32_t *stream = heldout_stream(L, &n);
    const int64_t V = rb_model_get_config(L->m)->n_vocab;
    const int64_t W = 512;
    float *lg = malloc(sizeof(float) * (size_t)(W * V));
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(L->m, W, RB_F32, &kv, &err));
    double nll = 0;
    *n_scored = 0;
    for (int64_t s = 0; s < (int64_t)n - 1; s += W) {
        int64_t e = s + W < (int64_t)n - 1 ? s + W : (int64_t)n - 1;
        rb_kv_cache_truncate(kv, 0);
        if (rb_model_forward(L->m, kv, stream + s, e - s, true, lg, &err) != RB_OK) fail_msg("%s", err.msg);
        for (int64_t i = 0; i < e - s; i++) {
            const float *row = lg + i * V;
            double mx = row[0], z = 0;
            for (int64_t v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
            for (int64_t v = 0; v < V; v++) z += exp((double)row[v] - mx);
            nll -= (double)row[stream[s + i + 1]] - mx - log(z);
            (*n_scored)++;
        }
    }
    rb_kv_cache_free(kv);
    free(lg);
    free(stream);
    return nll / (double)*n_scored;
}

static void test_tokenizer(void **state) {
    (void)state;
    loaded L = {0};
    load(&L, HF_DIR);
    const char *s = "And God said, Let there be light: and there was light.";
    const int32_t want[] = {298, 388, 390, 13, 1506, 384, 297, 1050, 27, 269, 384, 372, 1050, 15};
    int32_t *ids = NULL;
    size_t n = 0;
    TU_OK(rb_tokenizer_encode(L.tok, s, strlen(s), 0, &ids, &n, NULL));
    assert_int_equal(n, sizeof want / sizeof want[0]);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    TU_OK(rb_tokenizer_encode(L.tok, s, strlen(s), RB_TOK_ADD_SPECIAL, &ids, &n, NULL));
    assert_int_equal(ids[0], 0); /* <|begin_of_text|> */
    free(ids);
    unload(&L);
}

static void test_hf_logits_and_greedy(void **state) {
    (void)state;
    loaded L = {0};
    load(&L, HF_DIR);
    size_t n = 0;
    int32_t *ids = ref_ids(L.ref, "logits_file.ids", &n);
    size_t nbytes = 0;
    float *want = tu_read_file(MODELS "/reference_logits.f32", &nbytes);
    const int64_t V = rb_model_get_config(L.m)->n_vocab;
    assert_int_equal(nbytes, sizeof(float) * n * (size_t)V);
    float *got = malloc(nbytes);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(L.m, 64, RB_F32, &kv, NULL));
    TU_OK(rb_model_forward(L.m, kv, ids, (int64_t)n, true, got, NULL));
    double e = tu_rel_l2_f(got, want, n * (size_t)V);
    print_message("default model (HF f32): logits rel L2 vs transformers %.2g\n", e);
    assert_true(e < 1e-4);
    rb_kv_cache_free(kv);
    free(got);
    free(want);
    free(ids);

    const json_t *results = json_object_get(json_object_get(rb_json_config_root(L.ref), "greedy"), "results");
    assert_true(json_is_array(results) && json_array_size(results) >= 1);
    for (size_t r = 0; r < json_array_size(results); r++) {
        const json_t *res = json_array_get(results, r), *pj = json_object_get(res, "prompt_ids"),
                     *nj = json_object_get(res, "new_ids");
        size_t np = json_array_size(pj), nn = json_array_size(nj);
        assert_true(np > 0 && nn > 0);
        int32_t *prompt = malloc(sizeof(int32_t) * np), *exp_ids = malloc(sizeof(int32_t) * nn);
        for (size_t i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pj, i));
        for (size_t i = 0; i < nn; i++) exp_ids[i] = (int32_t)json_integer_value(json_array_get(nj, i));
        int32_t *out = greedy(&L, prompt, np, nn);
        assert_memory_equal(out, exp_ids, nn * sizeof(int32_t));
        print_message("default model (HF f32): greedy continuation %zu (%zu tokens) identical\n", r, nn);
        free(out);
        free(prompt);
        free(exp_ids);
    }
    unload(&L);
}

static void test_hf_perplexity(void **state) {
    (void)state;
    loaded L = {0};
    load(&L, HF_DIR);
    int64_t ns = 0;
    double nll = heldout_nll(&L, &ns);
    double want = 0;
    TU_OK(rb_json_config_num(L.ref, "perplexity.non_overlapping.mean_nll", &want));
    print_message("default model (HF f32): held-out mean NLL %.6f (transformers %.6f), ppl %.3f over %lld tokens\n",
                  nll, want, exp(nll), (long long)ns);
    assert_int_equal(ns, 12217);
    assert_true(fabs(nll - want) < 1e-4);
    unload(&L);
}

/* The Q8_0 GGUF bundled with the repository, made by
 * `rbee convert models/default/hf -o models/default/rbee-default-q8_0.gguf --type q8_0`. */
static void test_gguf_q8_0(void **state) {
    (void)state;
    loaded G = {0}, H = {0};
    load(&G, GGUF_Q8);
    load(&H, HF_DIR);
    assert_int_equal(rb_model_weight_dtype(G.m), RB_Q8_0);
    /* the tokenizer embedded in the GGUF tokenizes the whole held-out text like tokenizer.json */
    size_t ng = 0, nh = 0;
    int32_t *sg = heldout_stream(&G, &ng), *sh = heldout_stream(&H, &nh);
    assert_int_equal(ng, nh);
    assert_memory_equal(sg, sh, ng * sizeof(int32_t));
    free(sg);
    free(sh);
    /* recorded greedy continuation of the README's prompt (same as transformers' f32 one) */
    const int32_t prompt[] = {0, 298, 388, 390};
    const int32_t want[] = {323, 334, 13,  1323, 519, 346, 411, 424, 404, 1719, 13,  442, 360, 519,
                            411, 424, 404, 1719, 281, 298, 311, 390, 323, 334,  13,  1408, 13, 269,
                            411, 343, 369, 13,   269, 304, 394, 411, 343, 397,  27,  269};
    int32_t *out = greedy(&G, prompt, 4, 40);
    assert_memory_equal(out, want, sizeof want);
    free(out);
    /* perplexity below the value stated in MODEL_CARD.md for this file */
    int64_t ns = 0;
    double nll = heldout_nll(&G, &ns);
    print_message("default model (Q8_0 GGUF): held-out ppl %.3f (model card: below 25.40)\n", exp(nll));
    assert_true(exp(nll) < 25.40);
    unload(&G);
    unload(&H);
}

static bool below_259(void *user, const char *text, size_t len, int32_t token) {
    (void)text;
    (void)len;
    if (token >= 259) *(int *)user = 1;
    return true;
}

/* A model whose vocabulary is larger than its tokenizer's (padded embedding
 * tables): generation only ever samples ids the tokenizer can decode. Here
 * the 4096-id default model is paired with the 259-id tokenizer of the
 * llama.cpp fixture. */
static void test_padded_vocab(void **state) {
    (void)state;
    loaded L = {0};
    load(&L, HF_DIR);
    char path[1024];
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(tu_fixture(path, sizeof path, "llamacpp/tiny-f32.gguf"), &g, NULL));
    rb_tokenizer *small = NULL;
    TU_OK(rb_tokenizer_load_gguf(g, &small, NULL));
    assert_int_equal(rb_tokenizer_n_vocab(small), 259);
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(L.m, 256, RB_F16, &kv, NULL));
    rb_gen_params gp = rb_gen_default_params();
    gp.max_tokens = 64;
    gp.ignore_eos = true;
    gp.sampling.temperature = 1.5f;
    gp.sampling.seed = 7;
    const int32_t prompt[] = {0, 298, 388, 390};
    int bad = 0;
    rb_gen_result res;
    rb_error err;
    if (rb_generate(L.m, small, kv, prompt, 4, &gp, below_259, &bad, &res, &err) != RB_OK) fail_msg("%s", err.msg);
    assert_int_equal(res.n_generated, 64);
    assert_int_equal(bad, 0);
    rb_kv_cache_free(kv);
    rb_tokenizer_free(small);
    rb_gguf_close(g);
    unload(&L);
}

typedef struct text_acc {
    char buf[4096];
    size_t n;
} text_acc;

static bool collect(void *user, const char *text, size_t len, int32_t token) {
    (void)token;
    text_acc *a = user;
    if (a->n + len < sizeof a->buf) {
        memcpy(a->buf + a->n, text, len);
        a->n += len;
        a->buf[a->n] = '\0';
    }
    return true;
}

/* rb_generate with a grammar (sampling at temperature 1.2 on the KJV model):
 * the text matches a POSIX regular expression written for the same
 * language, or, for a JSON schema, parses (jansson) with the members it
 * demands; it ends with EOS (the grammar finished), not max_tokens. */
static void test_grammar_generate(void **state) {
    (void)state;
    loaded L = {0};
    load(&L, HF_DIR);
    const char *gbnf = "root ::= (\"And \" | \"But \") [A-Z] [a-z]{1,6} (\", \" [a-z]{1,6}){1,3} \".\"";
    rb_grammar *g = NULL;
    TU_OK(rb_grammar_parse(gbnf, strlen(gbnf), NULL, &g, NULL));
    regex_t re;
    assert_int_equal(regcomp(&re, "^(And|But) [A-Z][a-z]{1,6}(, [a-z]{1,6}){1,3}\\.$", REG_EXTENDED | REG_NOSUB), 0);
    const int32_t prompt[] = {0, 298, 388, 390};
    for (uint64_t seed = 1; seed <= 6; seed++) {
        rb_kv_cache *kv = NULL;
        TU_OK(rb_kv_cache_create(L.m, 256, RB_F16, &kv, NULL));
        rb_gen_params gp = rb_gen_default_params();
        gp.max_tokens = 100;
        gp.sampling.temperature = 1.2f;
        gp.sampling.seed = seed;
        gp.grammar = g;
        text_acc a = {.n = 0};
        rb_gen_result res;
        rb_error err;
        if (rb_generate(L.m, L.tok, kv, prompt, 4, &gp, collect, &a, &res, &err) != RB_OK) fail_msg("%s", err.msg);
        if (regexec(&re, a.buf, 0, NULL, 0) != 0) fail_msg("seed %d: '%s' does not match", (int)seed, a.buf);
        assert_int_equal(res.stop_reason, RB_STOP_EOS);
        rb_kv_cache_free(kv);
    }
    regfree(&re);
    rb_grammar_free(g);

    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"who\":{\"enum\":[\"God\",\"Moses\"]},"
                                "\"n\":{\"type\":\"integer\"},\"w\":{\"type\":\"string\",\"maxLength\":5}},"
                                "\"required\":[\"who\",\"n\"],\"additionalProperties\":false}",
                                0, NULL);
    assert_non_null(schema);
    TU_OK(rb_grammar_from_json_schema(schema, &g, NULL));
    for (uint64_t seed = 1; seed <= 6; seed++) {
        rb_kv_cache *kv = NULL;
        TU_OK(rb_kv_cache_create(L.m, 256, RB_F16, &kv, NULL));
        rb_gen_params gp = rb_gen_default_params();
        gp.max_tokens = 200;
        gp.sampling.temperature = 1.2f;
        gp.sampling.seed = seed;
        gp.grammar = g;
        text_acc a = {.n = 0};
        rb_gen_result res;
        rb_error err;
        if (rb_generate(L.m, L.tok, kv, prompt, 4, &gp, collect, &a, &res, &err) != RB_OK) fail_msg("%s", err.msg);
        json_t *doc = json_loads(a.buf, 0, NULL);
        if (!doc) fail_msg("seed %d: not JSON: %s", (int)seed, a.buf);
        const char *who = json_string_value(json_object_get(doc, "who"));
        assert_true(who && (!strcmp(who, "God") || !strcmp(who, "Moses")));
        assert_true(json_is_integer(json_object_get(doc, "n")));
        assert_true(json_object_size(doc) <= 3);
        assert_int_equal(res.stop_reason, RB_STOP_EOS);
        json_decref(doc);
        rb_kv_cache_free(kv);
    }
    rb_grammar_free(g);
    json_decref(schema);
    /* a grammar needs a tokenizer */
    rb_kv_cache *kv = NULL;
    TU_OK(rb_kv_cache_create(L.m, 64, RB_F16, &kv, NULL));
    rb_gen_params gp = rb_gen_default_params();
    TU_OK(rb_grammar_json_object(&g, NULL));
    gp.grammar = g;
    rb_gen_result res;
    assert_int_equal(rb_generate(L.m, NULL, kv, prompt, 4, &gp, NULL, NULL, &res, NULL), RB_E_INVALID);
    rb_grammar_free(g);
    rb_kv_cache_free(kv);
    unload(&L);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_hf_logits_and_greedy),
        cmocka_unit_test(test_hf_perplexity),
        cmocka_unit_test(test_gguf_q8_0),
        cmocka_unit_test(test_padded_vocab),
        cmocka_unit_test(test_grammar_generate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
