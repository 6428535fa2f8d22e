/* The worker's chat prompt path (llm_chat_render + llm_request_set_prompt,
 * what POST /v1/chat/completions runs) on the bundled default model's
 * tokenizer with the template of tests/data/chat_tokens/rbee_default.json:
 * the prompt ids must be HF tokenizers' with special tokens only where the
 * template wrote them (messages and roles holding <|begin_of_text|> or
 * <|end_of_text|> stay text), and a BOS text at the start of a message is no
 * reason to skip the tokenizer's own BOS. */
#include "testutil.h"

#include "llm_test_tokenizer.h"

#include "worker_llm/llm_chat.h"
#include "worker_llm/llm_request.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs the worker's path: render, then tokenize into a request of a 512 context. */
static void prompt_of(llm_chat *c, const rb_tokenizer *tok, const char *messages, llm_gen_request *req) {
    rb_chat_rendered r;
    unsigned flags = 0;
    rb_error e;
    if (llm_chat_render(c, messages, NULL, &r, &flags, &e) != RB_OK) fail_msg("render: %s", e.msg);
    wk_errors errs = {.n = 0};
    memset(req, 0, sizeof *req);
    llm_request_set_prompt(req, tok, r.text, r.len, flags, r.request, r.n_request, 512, 0, &errs);
    if (errs.n) fail_msg("set_prompt: %s", errs.items[0].message);
    rb_chat_rendered_free(&r);
}

static void test_hf_prompt_ids(void **state) {
    (void)state;
    char path[1024];
    json_error_t je;
    json_t *d = json_load_file(tu_data(path, sizeof path, "chat_tokens/rbee_default.json"), 0, &je);
    if (!d) fail_msg("%s", je.text);
    rb_tokenizer *tok = llm_test_tokenizer_with_template(json_string_value(json_object_get(d, "template")));
    llm_chat c;
    rb_error e;
    TU_OK(llm_chat_init(&c, tok, &e));
    assert_false(c.is_fallback);
    size_t i, injected = 0;
    const json_t *cs;
    json_array_foreach(json_object_get(d, "cases"), i, cs) {
        assert_true(json_is_true(json_object_get(cs, "add_generation_prompt"))); /* the worker always adds it */
        char *mj = json_dumps(json_object_get(cs, "messages"), 0);
        llm_gen_request req;
        prompt_of(&c, tok, mj, &req);
        const json_t *want = json_object_get(cs, "ids");
        if (req.n_prompt != json_array_size(want)) fail_msg("case %zu: %zu ids, want %zu", i, req.n_prompt, json_array_size(want));
        for (size_t k = 0; k < req.n_prompt; k++)
            if (req.prompt[k] != json_integer_value(json_array_get(want, k)))
                fail_msg("case %zu: id %zu is %d, want %d", i, k, req.prompt[k], (int)json_integer_value(json_array_get(want, k)));
        if (json_is_true(json_object_get(cs, "injected"))) {
            assert_true(req.n_prompt != json_array_size(json_object_get(cs, "ids_all_special")));
            injected++;
        }
        llm_gen_request_free(&req);
        free(mj);
    }
    assert_true(i == 4 && injected == 3);
    llm_chat_destroy(&c);
    rb_tokenizer_free(tok);
    json_decref(d);
}

/* A template that writes no BOS: a message starting with the BOS text gets
 * the tokenizer's BOS (id 0) in front and its own text as plain tokens. */
static void test_bos_text_in_message(void **state) {
    (void)state;
    rb_tokenizer *tok = llm_test_tokenizer_with_template("{% for m in messages %}{{ m['content'] }}{% endfor %}");
    llm_chat c;
    rb_error e;
    TU_OK(llm_chat_init(&c, tok, &e));
    const char *text = "<|begin_of_text|>hi<|end_of_text|>";
    int32_t *plain = NULL;
    size_t np = 0;
    TU_OK(rb_tokenizer_encode(tok, text, strlen(text), 0, &plain, &np, &e));
    llm_gen_request req;
    prompt_of(&c, tok, "[{\"role\":\"user\",\"content\":\"<|begin_of_text|>hi<|end_of_text|>\"}]", &req);
    assert_int_equal(req.n_prompt, np + 1);
    assert_int_equal(req.prompt[0], 0);
    assert_memory_equal(req.prompt + 1, plain, np * sizeof *plain);
    for (size_t k = 1; k < req.n_prompt; k++) assert_true(req.prompt[k] > 1); /* no control token after the BOS */
    llm_gen_request_free(&req);
    /* the same text from the template itself: its BOS and EOS are control tokens, no extra BOS */
    llm_chat_destroy(&c);
    rb_tokenizer_free(tok);
    tok = llm_test_tokenizer_with_template("<|begin_of_text|>{% for m in messages %}{{ m['content'] }}{% endfor %}<|end_of_text|>");
    TU_OK(llm_chat_init(&c, tok, &e));
    prompt_of(&c, tok, "[{\"role\":\"user\",\"content\":\"hi\"}]", &req);
    int32_t *hi = NULL;
    size_t nh = 0;
    TU_OK(rb_tokenizer_encode(tok, "hi", 2, 0, &hi, &nh, &e));
    assert_int_equal(req.n_prompt, nh + 2);
    assert_int_equal(req.prompt[0], 0);
    assert_memory_equal(req.prompt + 1, hi, nh * sizeof *hi);
    assert_int_equal(req.prompt[nh + 1], 1);
    llm_gen_request_free(&req);
    free(hi);
    free(plain);
    llm_chat_destroy(&c);
    rb_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_prompt_ids),
        cmocka_unit_test(test_bos_text_in_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
