/* GGUF side of the tokenizer: loading llama.cpp's own tiny-f32.gguf vocab
 * (259-token SentencePiece byte vocabulary), the HF -> GGUF -> tokenizer
 * round trip for every real tokenizer (ids must equal HF's expected ids, so
 * identical to the tokenizer.json path), and malformed tokenizer metadata. */
#include "tokref.h"

#include "rbee/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void tmp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "%s/../tok_%s_%d.gguf", RBEE_TOKENIZERS_DIR, tag, (int)getpid());
}

static void test_tiny_fixture(void **state) {
    (void)state;
    char path[1024];
    rb_gguf *g;
    rb_error e;
    TU_OK(rb_gguf_open(tu_fixture(path, sizeof path, "llamacpp/tiny-f32.gguf"), &g, &e));
    rb_tokenizer *t;
    TU_OK(rb_tokenizer_load_gguf(g, &t, &e));
    assert_int_equal(rb_tokenizer_n_vocab(t), 259);
    assert_int_equal(rb_tokenizer_get_kind(t), RB_TOKENIZER_SPM);
    assert_int_equal(rb_tokenizer_bos(t), 1);
    assert_int_equal(rb_tokenizer_eos(t), 2);
    /* only byte tokens: every byte of "▁" + text (spaces -> ▁) is <0xNN> = id 3 + byte */
    tu_rng rng;
    tu_rng_seed(&rng, 77);
    for (int it = 0; it < 50; it++) {
        char text[64];
        size_t n = 1 + tu_rng_u64(&rng) % 40;
        for (size_t i = 0; i < n; i++) text[i] = (char)(' ' + tu_rng_u64(&rng) % 95);
        int32_t want[256];
        size_t nw = 0;
        want[nw++] = 1;
        const unsigned char meta[3] = {0xE2, 0x96, 0x81};
        for (int k = 0; k < 3; k++) want[nw++] = 3 + meta[k];
        for (size_t i = 0; i < n; i++) {
            if (text[i] == ' ')
                for (int k = 0; k < 3; k++) want[nw++] = 3 + meta[k];
            else
                want[nw++] = 3 + (unsigned char)text[i];
        }
        int32_t *ids;
        size_t ni;
        TU_OK(rb_tokenizer_encode(t, text, n, RB_TOK_ADD_SPECIAL | RB_TOK_PARSE_SPECIAL, &ids, &ni, &e));
        assert_true(tokref_ids_equal("tiny", "", ids, ni, want, nw));
        char *dec;
        size_t dl;
        TU_OK(rb_tokenizer_decode(t, ids + 1, ni - 1, 0, &dec, &dl, &e));
        /* HF order Replace(▁->' ') then ByteFallback: a ▁ spelled in byte
         * tokens stays ▁, so the prefix is not stripped either */
        char exp[256];
        size_t el = 0;
        memcpy(exp, meta, 3);
        el = 3;
        for (size_t i = 0; i < n; i++) {
            if (text[i] == ' ') { memcpy(exp + el, meta, 3); el += 3; }
            else exp[el++] = text[i];
        }
        assert_int_equal(dl, el);
        assert_memory_equal(dec, exp, el);
        free(dec);
        free(ids);
    }
    /* the fixture's logits prompt decodes to bytes 69,98,105,... */
    const int32_t prompt[] = {1, 72, 101, 108, 108, 111, 35, 119};
    char *dec;
    size_t dl;
    TU_OK(rb_tokenizer_decode(t, prompt, 8, RB_TOK_SKIP_SPECIAL, &dec, &dl, &e));
    assert_string_equal(dec, "Ebiil t"); /* 69 98 105 105 108 32 116 */
    free(dec);
    rb_tokenizer_free(t);
    rb_gguf_close(g);
}

static void roundtrip(const char *name) {
    rb_tokenizer *hf = tokref_tokenizer(name);
    rb_gguf_writer *w;
    rb_error e;
    TU_OK(rb_gguf_writer_create(&w, &e));
    TU_OK(rb_tokenizer_write_gguf(hf, w, &e));
    char path[1024];
    tmp_path(path, sizeof path, name);
    TU_OK(rb_gguf_writer_write(w, path, 0, &e));
    rb_gguf_writer_free(w);
    rb_gguf *g;
    TU_OK(rb_gguf_open(path, &g, &e));
    rb_tokenizer *t;
    rb_status st = rb_tokenizer_load_gguf(g, &t, &e);
    if (st) fail_msg("%s: %s", name, e.msg);
    assert_int_equal(rb_tokenizer_n_vocab(t), rb_tokenizer_n_vocab(hf));
    assert_int_equal(rb_tokenizer_bos(t), rb_tokenizer_bos(hf));
    assert_int_equal(rb_tokenizer_eos(t), rb_tokenizer_eos(hf));
    assert_int_equal(rb_tokenizer_get_kind(t), rb_tokenizer_get_kind(hf));
    if (rb_tokenizer_chat_template(hf)) assert_string_equal(rb_tokenizer_chat_template(t), rb_tokenizer_chat_template(hf));
    tokref r;
    tokref_load(&r, name);
    int bad = 0;
    for (size_t i = 0; i < r.n; i++) {
        const tokref_case *c = &r.cases[i];
        int32_t *ids;
        size_t n;
        TU_OK(rb_tokenizer_encode(t, c->text, c->text_len, RB_TOK_ADD_SPECIAL | RB_TOK_PARSE_SPECIAL, &ids, &n, &e));
        bad += !tokref_ids_equal("gguf ids_special", c->text, ids, n, c->ids_special, c->n_special);
        free(ids);
        TU_OK(rb_tokenizer_encode(t, c->text, c->text_len, RB_TOK_PARSE_SPECIAL, &ids, &n, &e));
        bad += !tokref_ids_equal("gguf ids_plain", c->text, ids, n, c->ids_plain, c->n_plain);
        free(ids);
        char *txt;
        TU_OK(rb_tokenizer_decode(t, c->ids_special, c->n_special, 0, &txt, NULL, &e));
        if (strcmp(txt, c->decoded) != 0) {
            fprintf(stderr, "[%s] gguf decode mismatch: \"%s\" vs \"%s\"\n", name, txt, c->decoded);
            bad++;
        }
        free(txt);
    }
    fprintf(stderr, "[%s] GGUF round trip: %zu cases, %d mismatches\n", name, r.n, bad);
    tokref_free(&r);
    rb_tokenizer_free(t);
    rb_tokenizer_free(hf);
    rb_gguf_close(g);
    unlink(path);
    assert_int_equal(bad, 0);
}

static void test_rt_llama2(void **state) { (void)state; roundtrip("llama2"); }
static void test_rt_llama3(void **state) { (void)state; roundtrip("llama3"); }
static void test_rt_qwen3(void **state) { (void)state; roundtrip("qwen3"); }
static void test_rt_gemma3(void **state) { (void)state; roundtrip("gemma3"); }
static void test_rt_gptoss(void **state) { (void)state; roundtrip("gptoss"); }

/* Writes a small vocabulary with the given model / pre / merges and tries to load it. */
static rb_status load_meta(const char *model, const char *pre, const char *merge, bool with_tokens, rb_error *e) {
    rb_gguf_writer *w;
    TU_OK(rb_gguf_writer_create(&w, e));
    if (model) TU_OK(rb_gguf_writer_set_str(w, "tokenizer.ggml.model", model));
    if (pre) TU_OK(rb_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre));
    const char *toks[] = {"a", "b", "ab", "<s>"};
    if (with_tokens) TU_OK(rb_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4));
    if (merge) TU_OK(rb_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", &merge, 1));
    char path[1024];
    tmp_path(path, sizeof path, "bad");
    TU_OK(rb_gguf_writer_write(w, path, 0, e));
    rb_gguf_writer_free(w);
    rb_gguf *g;
    TU_OK(rb_gguf_open(path, &g, e));
    rb_tokenizer *t = NULL;
    rb_status st = rb_tokenizer_load_gguf(g, &t, e);
    if (st == RB_OK) {
        int32_t *ids;
        size_t n;
        TU_OK(rb_tokenizer_encode(t, "abab", 4, 0, &ids, &n, e));
        assert_int_equal(n, 2);
        assert_int_equal(ids[0], 2);
        assert_int_equal(ids[1], 2);
        free(ids);
    }
    rb_tokenizer_free(t);
    rb_gguf_close(g);
    unlink(path);
    return st;
}

static void test_bad_metadata(void **state) {
    (void)state;
    rb_error e;
    assert_int_equal(load_meta("gpt2", "gpt2", "a b", true, &e), RB_OK);
    assert_int_equal(load_meta("bert", NULL, NULL, true, &e), RB_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "bert"));
    assert_int_equal(load_meta(NULL, NULL, NULL, true, &e), RB_E_NOT_FOUND);
    assert_int_equal(load_meta("gpt2", "gpt2", NULL, false, &e), RB_E_FORMAT);
    assert_int_equal(load_meta("gpt2", "no-such-pre", "a b", true, &e), RB_E_UNSUPPORTED);
    assert_int_equal(load_meta("gpt2", "gpt2", "a zz", true, &e), RB_E_FORMAT);
    assert_int_equal(load_meta("gpt2", "gpt2", "ab", true, &e), RB_E_FORMAT);
    assert_int_equal(load_meta("gpt2", "gpt2", NULL, true, &e), RB_E_FORMAT); /* gpt2 needs merges */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_fixture), cmocka_unit_test(test_rt_llama2), cmocka_unit_test(test_rt_llama3),
        cmocka_unit_test(test_rt_qwen3),     cmocka_unit_test(test_rt_gemma3), cmocka_unit_test(test_rt_gptoss),
        cmocka_unit_test(test_bad_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
