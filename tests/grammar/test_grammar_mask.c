/* Token masking on the real Llama 3 tokenizer (128,256 ids, byte-level
 * pieces that split characters and span several grammar elements): the trie
 * walk's allowed set equals a naive check of every token on its own (a fresh
 * byte matcher fed the accepted text and the token's piece) at random states
 * of random walks; documents built from random allowed tokens parse as JSON
 * (jansson) and hold what the schema demands; end of generation is allowed
 * exactly when the grammar is complete. */
#include "gram_testutil.h"
#include "testutil.h"
#include "tokref.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_tokenizer *tok;
static rb_grammar_vocab *vocab;
static int32_t eog[2];
static int32_t n_vocab;

static int setup(void **state) {
    (void)state;
    tok = tokref_tokenizer("llama3");
    n_vocab = rb_tokenizer_n_vocab(tok);
    eog[0] = rb_tokenizer_token_id(tok, "<|end_of_text|>", 15);
    eog[1] = rb_tokenizer_token_id(tok, "<|eot_id|>", 10);
    rb_error err;
    double t0 = tokref_now();
    if (rb_grammar_vocab_create(tok, eog, 2, &vocab, &err) != RB_OK) {
        print_error("vocab: %s\n", err.msg);
        return -1;
    }
    print_message("vocabulary trie of %d tokens built in %.1f ms\n", (int)n_vocab, (tokref_now() - t0) * 1e3);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rb_grammar_vocab_free(vocab);
    rb_tokenizer_free(tok);
    return 0;
}

static bool bit(const uint32_t *b, int32_t i) { return b[i >> 5] >> (i & 31) & 1u; }

/* Naive allowed set: each token alone on a byte matcher replaying text. */
static void naive_allowed(const rb_grammar *g, const char *text, size_t len, bool complete, uint32_t *out) {
    memset(out, 0, ((size_t)n_vocab + 31) / 32 * 4);
    rb_grammar_matcher *m = NULL;
    assert_int_equal(rb_grammar_matcher_create(g, NULL, &m, NULL), RB_OK);
    for (int32_t id = 0; id < n_vocab; id++) {
        if (id == eog[0] || id == eog[1]) {
            if (complete) out[id >> 5] |= 1u << (id & 31);
            continue;
        }
        if (rb_tokenizer_is_special(tok, id)) continue;
        char *piece;
        size_t plen;
        if (rb_tokenizer_token_piece(tok, id, &piece, &plen, NULL) != RB_OK) continue;
        rb_grammar_matcher_reset(m);
        assert_int_equal(rb_grammar_matcher_accept_bytes(m, text, len, NULL), RB_OK);
        if (plen && rb_grammar_matcher_accept_bytes(m, piece, plen, NULL) == RB_OK) out[id >> 5] |= 1u << (id & 31);
        free(piece);
    }
    rb_grammar_matcher_free(m);
}

typedef struct walk_result {
    char *text;
    size_t len;
    bool ended;
    int steps;
    double mask_ms;
} walk_result;

/* Random walk over allowed tokens; at the steps in check_at (0-terminated
 * list of step numbers) compares with the naive set. Prefers EOG once
 * complete after min_steps (to end documents). */
static walk_result random_walk(const rb_grammar *g, uint64_t seed, int max_steps, const int *check_at) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    rb_grammar_matcher *m = NULL;
    rb_error err;
    assert_int_equal(rb_grammar_matcher_create(g, vocab, &m, &err), RB_OK);
    size_t words = ((size_t)n_vocab + 31) / 32;
    uint32_t *bits = malloc(words * 4), *ref = malloc(words * 4);
    int32_t *cand = malloc((size_t)n_vocab * sizeof *cand);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    assert_non_null(bits);
    assert_non_null(ref);
    assert_non_null(cand);
    assert_non_null(logits);
    walk_result r = {0};
    r.text = calloc(1, 1 << 16);
    for (int step = 0; step < max_steps; step++) {
        for (int32_t i = 0; i < n_vocab; i++) logits[i] = 0.0f;
        double t0 = tokref_now();
        rb_status st = rb_grammar_matcher_mask_logits(m, logits, (size_t)n_vocab, &err);
        r.mask_ms += (tokref_now() - t0) * 1e3;
        if (st != RB_OK) fail_msg("mask: %s", err.msg);
        assert_int_equal(rb_grammar_matcher_allowed(m, bits, &err), RB_OK);
        size_t n = 0;
        for (int32_t i = 0; i < n_vocab; i++) {
            assert_int_equal(bit(bits, i), logits[i] == 0.0f); /* mask_logits and the bit set agree */
            if (bit(bits, i)) cand[n++] = i;
        }
        assert_true(n > 0);
        bool complete = rb_grammar_matcher_is_complete(m);
        assert_int_equal(bit(bits, eog[0]), complete);
        assert_int_equal(bit(bits, eog[1]), complete);
        for (const int *c = check_at; *c; c++)
            if (*c == step + 1) {
                naive_allowed(g, r.text, r.len, complete, ref);
                for (int32_t i = 0; i < n_vocab; i++)
                    if (bit(bits, i) != bit(ref, i)) {
                        char *p = NULL;
                        rb_tokenizer_token_piece(tok, i, &p, NULL, NULL);
                        fail_msg("step %d after '%s': token %d '%s' trie %d naive %d", step, r.text, (int)i,
                                 p ? p : "?", bit(bits, i), bit(ref, i));
                    }
            }
        int32_t pick;
        if (complete && (step > 40 || tu_rng_uniform(&rng) < 0.3)) pick = eog[1];
        else {
            /* favour short tokens a little so walks explore many states */
            pick = cand[tu_rng_u64(&rng) % n];
        }
        assert_int_equal(rb_grammar_matcher_accept_token(m, pick, &err), RB_OK);
        r.steps++;
        if (pick == eog[0] || pick == eog[1]) {
            r.ended = true;
            assert_true(rb_grammar_matcher_is_finished(m));
            break;
        }
        char *piece;
        size_t plen;
        assert_int_equal(rb_tokenizer_token_piece(tok, pick, &piece, &plen, NULL), RB_OK);
        if (r.len + plen < (1 << 16) - 1) {
            memcpy(r.text + r.len, piece, plen);
            r.len += plen;
        }
        free(piece);
    }
    rb_grammar_matcher_free(m);
    free(bits);
    free(ref);
    free(cand);
    free(logits);
    return r;
}

static void test_naive_agrees_gbnf(void **state) {
    (void)state;
    /* character classes with non-ASCII ranges make split characters matter */
    rb_grammar *g = gt_parse("root ::= ( word \" \" )* word \".\"\n"
                             "word ::= [a-z\\u00e0-\\u00ff]+ | [\\u4e00-\\u9fff]{1,3} | \"\\\"\" [^\"]{0,4} \"\\\"\"\n");
    const int checks[] = {1, 2, 3, 5, 8, 0};
    for (uint64_t seed = 1; seed <= 3; seed++) {
        walk_result r = random_walk(g, seed, 10, checks);
        free(r.text);
    }
    rb_grammar_free(g);
}

static const char *const person_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",null]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"minItems\":1,\"maxItems\":3},"
    "\"born\":{\"type\":\"string\",\"format\":\"date\"}},"
    "\"required\":[\"name\",\"role\",\"tags\"],\"additionalProperties\":false}";

static void check_person(const char *text) {
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    if (!doc) fail_msg("not JSON (%s): %s", je.text, text);
    assert_true(json_is_object(doc));
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) {
        if (!strcmp(key, "name")) assert_true(json_is_string(v) && json_string_length(v) <= 36);
        else if (!strcmp(key, "age")) assert_true(json_is_integer(v));
        else if (!strcmp(key, "role"))
            assert_true(json_is_null(v) || !strcmp(json_string_value(v), "admin") || !strcmp(json_string_value(v), "user"));
        else if (!strcmp(key, "tags")) assert_true(json_is_array(v) && json_array_size(v) >= 1 && json_array_size(v) <= 3);
        else if (!strcmp(key, "born")) assert_true(json_is_string(v) && json_string_length(v) == 10);
        else fail_msg("unexpected key %s in %s", key, text);
    }
    assert_non_null(json_object_get(doc, "name"));
    assert_non_null(json_object_get(doc, "role"));
    assert_non_null(json_object_get(doc, "tags"));
    json_decref(doc);
}

static void test_schema_walks(void **state) {
    (void)state;
    json_t *schema = json_loads(person_schema, 0, NULL);
    assert_non_null(schema);
    rb_grammar *g = NULL;
    rb_error err;
    if (rb_grammar_from_json_schema(schema, &g, &err) != RB_OK) fail_msg("%s", err.msg);
    const int checks[] = {1, 4, 9, 0};
    const int none[] = {0};
    double mask_ms = 0;
    int steps = 0, ended = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        walk_result r = random_walk(g, seed, 400, seed <= 2 ? checks : none);
        mask_ms += r.mask_ms;
        steps += r.steps;
        if (r.ended) {
            ended++;
            check_person(r.text);
        }
        free(r.text);
    }
    print_message("person schema: %d walks ended, %d steps, mean mask %.3f ms/step\n", ended, steps, mask_ms / steps);
    assert_true(ended >= 20);
    rb_grammar_free(g);
    json_decref(schema);
}

static void test_json_object_mode(void **state) {
    (void)state;
    rb_grammar *g = NULL;
    assert_int_equal(rb_grammar_json_object(&g, NULL), RB_OK);
    const int checks[] = {2, 0};
    int ended = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        walk_result r = random_walk(g, seed, 300, seed == 1 ? checks : (const int[]){0});
        if (r.ended) {
            ended++;
            json_t *doc = json_loads(r.text, 0, NULL);
            if (!doc || !json_is_object(doc)) fail_msg("not a JSON object: %s", r.text);
            json_decref(doc);
        }
        free(r.text);
    }
    assert_true(ended >= 5);
    rb_grammar_free(g);
}

/* Bad calls: out-of-range ids, EOG before completion, tokens after EOG. */
static void test_token_errors(void **state) {
    (void)state;
    rb_grammar *g = gt_parse("root ::= \"hi\"");
    rb_grammar_matcher *m = NULL;
    assert_int_equal(rb_grammar_matcher_create(g, vocab, &m, NULL), RB_OK);
    assert_int_equal(rb_grammar_matcher_accept_token(m, -1, NULL), RB_E_INVALID);
    assert_int_equal(rb_grammar_matcher_accept_token(m, n_vocab, NULL), RB_E_INVALID);
    assert_int_equal(rb_grammar_matcher_accept_token(m, eog[1], NULL), RB_E_INVALID);
    int32_t hi = rb_tokenizer_token_id(tok, "hi", 2);
    assert_true(hi >= 0);
    assert_int_equal(rb_grammar_matcher_accept_token(m, hi, NULL), RB_OK);
    assert_true(rb_grammar_matcher_is_finished(m));
    float *logits = calloc((size_t)n_vocab + 10, sizeof *logits);
    assert_int_equal(rb_grammar_matcher_mask_logits(m, logits, (size_t)n_vocab + 10, NULL), RB_OK);
    for (int32_t i = 0; i < n_vocab + 10; i++) assert_int_equal(isinf(logits[i]) != 0, i != eog[0] && i != eog[1]);
    assert_int_equal(rb_grammar_matcher_accept_token(m, eog[0], NULL), RB_OK);
    assert_int_equal(rb_grammar_matcher_accept_token(m, hi, NULL), RB_E_INVALID);
    assert_int_equal(rb_grammar_matcher_mask_logits(m, logits, (size_t)n_vocab, NULL), RB_E_INVALID);
    free(logits);
    rb_grammar_matcher_free(m);
    rb_grammar_free(g);
    /* an end-of-generation id out of range */
    rb_grammar_vocab *v = NULL;
    int32_t bad = n_vocab;
    assert_int_equal(rb_grammar_vocab_create(tok, &bad, 1, &v, NULL), RB_E_RANGE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_errors),
        cmocka_unit_test(test_naive_agrees_gbnf),
        cmocka_unit_test(test_schema_walks),
        cmocka_unit_test(test_json_object_mode),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
