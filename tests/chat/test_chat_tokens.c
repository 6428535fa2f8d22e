/* Chat prompts to token ids with real templates and tokenizers: the render's
 * request ranges encoded as plain text (rb_tokenizer_encode_plain).
 * 1. tests/data/chat_tokens/<name>.json (tools/ref/gen_chat_token_refs.py,
 *    HF tokenizers): Llama 3, Qwen 2.5 (Qwen's tokenizer.json), Gemma 3 and
 *    the bundled default model's tokenizer with a small template; messages,
 *    roles, system prompts and tool arguments carry special-token text. The
 *    ids must be HF's with special tokens only where the template wrote them,
 *    and encoding the whole text with special parsing must give HF's
 *    apply_chat_template ids (what the worker did before).
 * 2. Every transformers reference conversation of tests/data/chat/NAME.json on
 *    its family's tokenizer: where no message holds special-token text the
 *    ids are exactly those of encoding the whole prompt with special parsing
 *    (ordinary conversations tokenize as before); where one does, fewer
 *    special ids come out and the ids still decode to the prompt. */
#include "testutil.h"

#include "rbee/chat_template.h"
#include "rbee/tokenizer.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_tokenizer *load_tok(const char *spec) {
    char path[1024];
    if (strncmp(spec, "cache:", 6) == 0)
        snprintf(path, sizeof path, "%s/%s/tokenizer.json", RBEE_CHAT_TOKENIZERS_DIR, spec + 6);
    else if (strncmp(spec, "repo:", 5) == 0)
        snprintf(path, sizeof path, "%s/%s/tokenizer.json", RBEE_SOURCE_DIR, spec + 5);
    else
        fail_msg("bad tokenizer spec %s", spec);
    rb_tokenizer *t = NULL;
    rb_error e;
    if (rb_tokenizer_load_hf(path, NULL, &t, &e) != RB_OK) fail_msg("%s: %s", path, e.msg);
    return t;
}

static void ids_of(const json_t *a, int32_t **ids, size_t *n) {
    *n = json_array_size(a);
    *ids = malloc((*n + 1) * sizeof **ids);
    assert_non_null(*ids);
    for (size_t i = 0; i < *n; i++) (*ids)[i] = (int32_t)json_integer_value(json_array_get(a, i));
}

static void same_ids(const char *what, size_t idx, const int32_t *got, size_t n, const int32_t *want, size_t nw) {
    if (n == nw && memcmp(got, want, n * sizeof *got) == 0) return;
    size_t k = 0;
    while (k < n && k < nw && got[k] == want[k]) k++;
    fail_msg("%s case %zu: %zu ids, want %zu; first difference at %zu (%d vs %d)", what, idx, n, nw, k,
             k < n ? got[k] : -1, k < nw ? want[k] : -1);
}

static size_t n_special(const rb_tokenizer *t, const int32_t *ids, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += rb_tokenizer_is_special(t, ids[i]);
    return c;
}

/* Renders a case (messages, add_generation_prompt, extra) with t. */
static void render_case(const rb_chat_template *t, const json_t *c, rb_chat_rendered *r) {
    rb_chat_options o = {0};
    o.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
    const json_t *extra = json_object_get(c, "extra");
    char *ej = extra && json_object_size(extra) ? json_dumps(extra, 0) : NULL;
    char *mj = json_dumps(json_object_get(c, "messages"), 0);
    o.extra_vars_json = ej;
    rb_error e;
    if (rb_chat_template_render_json(t, mj, &o, r, &e) != RB_OK) fail_msg("render: %s", e.msg);
    free(mj);
    free(ej);
}

static void encode_both(const rb_tokenizer *tok, const rb_chat_rendered *r, int32_t **plain, size_t *np,
                        int32_t **all, size_t *na) {
    rb_error e;
    TU_OK(rb_tokenizer_encode_plain(tok, r->text, r->len, RB_TOK_PARSE_SPECIAL, r->request, r->n_request, plain, np,
                                    &e));
    TU_OK(rb_tokenizer_encode(tok, r->text, r->len, RB_TOK_PARSE_SPECIAL, all, na, &e));
}

static void run_hf_file(const char *path, size_t *n_cases, size_t *n_injected) {
    json_error_t je;
    json_t *d = json_load_file(path, 0, &je);
    if (!d) fail_msg("%s: %s", path, je.text);
    const char *name = json_string_value(json_object_get(d, "name"));
    rb_tokenizer *tok = load_tok(json_string_value(json_object_get(d, "tokenizer")));
    const json_t *tj = json_object_get(d, "template");
    rb_chat_template *t = NULL;
    rb_error e;
    TU_OK(rb_chat_template_parse(json_string_value(tj), json_string_length(tj), &t, &e));
    const char *bos = json_string_value(json_object_get(d, "bos_token"));
    const char *eos = json_string_value(json_object_get(d, "eos_token"));
    TU_OK(rb_chat_template_set_str(t, "bos_token", bos ? bos : "", &e));
    TU_OK(rb_chat_template_set_str(t, "eos_token", eos ? eos : "", &e));
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(d, "cases"), i, c) {
        rb_chat_rendered r;
        render_case(t, c, &r);
        const json_t *want_text = json_object_get(c, "rendered");
        if (r.len != json_string_length(want_text) || memcmp(r.text, json_string_value(want_text), r.len) != 0)
            fail_msg("%s case %zu: rendered text differs:\n[%s]\n[%s]", name, i, r.text, json_string_value(want_text));
        int32_t *plain, *all, *want, *want_all;
        size_t np, na, nw, nwa;
        encode_both(tok, &r, &plain, &np, &all, &na);
        ids_of(json_object_get(c, "ids"), &want, &nw);
        ids_of(json_object_get(c, "ids_all_special"), &want_all, &nwa);
        same_ids(name, i, plain, np, want, nw);
        same_ids(name, i, all, na, want_all, nwa);
        if (json_is_true(json_object_get(c, "injected"))) {
            assert_true(n_special(tok, plain, np) < n_special(tok, all, na));
            (*n_injected)++;
        }
        char *back = NULL;
        size_t blen = 0;
        TU_OK(rb_tokenizer_decode(tok, plain, np, 0, &back, &blen, &e));
        if (rb_tokenizer_get_kind(tok) == RB_TOKENIZER_BYTE_LEVEL) { /* byte-level decoding is exact */
            assert_int_equal(blen, r.len);
            assert_memory_equal(back, r.text, blen);
        }
        free(back);
        free(plain);
        free(all);
        free(want);
        free(want_all);
        rb_chat_rendered_free(&r);
        (*n_cases)++;
    }
    rb_chat_template_free(t);
    rb_tokenizer_free(tok);
    json_decref(d);
}

static void test_hf_references(void **state) {
    (void)state;
    const char *names[] = {"llama3", "qwen2_5", "gemma3", "rbee_default"};
    size_t n = 0, inj = 0;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/chat_tokens/%s.json", RBEE_TEST_DATA_DIR, names[k]);
        run_hf_file(path, &n, &inj);
    }
    printf("chat tokens: %zu conversations equal to HF tokenizers, %zu with special-token text in the request\n", n,
           inj);
    assert_true(n >= 27);
    assert_true(inj >= 18);
}

/* True if any string of j (keys included) holds the text of a special token of tok. */
static bool has_special_text(const rb_tokenizer *tok, const json_t *j) {
    if (json_is_string(j)) {
        const char *s = json_string_value(j);
        for (int32_t id = 0; id < rb_tokenizer_n_vocab(tok); id++) {
            if (!rb_tokenizer_is_special(tok, id)) continue;
            size_t len = 0;
            const char *txt = rb_tokenizer_token_text(tok, id, &len);
            if (txt && len && memmem(s, json_string_length(j), txt, len)) return true;
        }
        return false;
    }
    const char *k;
    const json_t *v;
    size_t i;
    if (json_is_object(j)) {
        json_object_foreach((json_t *)j, k, v) {
            json_t *ks = json_string(k);
            bool hit = has_special_text(tok, ks) || has_special_text(tok, v);
            json_decref(ks);
            if (hit) return true;
        }
    }
    if (json_is_array(j))
        json_array_foreach(j, i, v) if (has_special_text(tok, v)) return true;
    return false;
}

static void test_reference_conversations(void **state) {
    (void)state;
    static const char *const map[][2] = {
        {"llama3", "llama3"}, {"llama3_1", "llama3_1"}, {"qwen3", "qwen3"},  {"qwen2_5", "qwen3"},
        {"gemma3", "gemma3"}, {"gemma2", "gemma3"},     {"phi3_5", "llama2"}, {"mistral_nemo", "llama2"},
    };
    size_t same = 0, differ = 0;
    for (size_t k = 0; k < sizeof map / sizeof *map; k++) {
        char path[1024], spec[64];
        snprintf(path, sizeof path, "%s/chat/%s.json", RBEE_TEST_DATA_DIR, map[k][0]);
        snprintf(spec, sizeof spec, "cache:%s", map[k][1]);
        json_error_t je;
        json_t *d = json_load_file(path, 0, &je);
        if (!d) fail_msg("%s: %s", path, je.text);
        rb_tokenizer *tok = load_tok(spec);
        const json_t *tj = json_object_get(d, "template");
        rb_chat_template *t = NULL;
        rb_error e;
        TU_OK(rb_chat_template_parse(json_string_value(tj), json_string_length(tj), &t, &e));
        const char *bos = json_string_value(json_object_get(d, "bos_token"));
        const char *eos = json_string_value(json_object_get(d, "eos_token"));
        if (bos) TU_OK(rb_chat_template_set_str(t, "bos_token", bos, &e));
        if (eos) TU_OK(rb_chat_template_set_str(t, "eos_token", eos, &e));
        size_t i;
        const json_t *c;
        json_array_foreach(json_object_get(d, "cases"), i, c) {
            if (!json_is_string(json_object_get(c, "rendered"))) continue; /* transformers raised */
            rb_chat_rendered r;
            render_case(t, c, &r);
            int32_t *plain, *all;
            size_t np, na;
            encode_both(tok, &r, &plain, &np, &all, &na);
            bool injected = has_special_text(tok, json_object_get(c, "messages")) ||
                            has_special_text(tok, json_object_get(c, "extra"));
            if (!injected) {
                same_ids(map[k][0], i, plain, np, all, na);
                same++;
            } else {
                if (!(n_special(tok, plain, np) < n_special(tok, all, na)))
                    fail_msg("%s case %zu: special-token text in a message still gave control tokens", map[k][0], i);
                differ++;
            }
            free(plain);
            free(all);
            rb_chat_rendered_free(&r);
        }
        rb_chat_template_free(t);
        rb_tokenizer_free(tok);
        json_decref(d);
    }
    printf("chat tokens: %zu reference conversations tokenize as before, %zu carry special-token text\n", same,
           differ);
    assert_true(same >= 100);
    assert_true(differ >= 8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_references),
        cmocka_unit_test(test_reference_conversations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
