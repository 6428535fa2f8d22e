/* Byte-exact comparison with transformers: every case of
 * tests/data/chat/<name>.json (rendered by tokenizer.apply_chat_template(
 * ..., tokenize=False) from transformers on the same tokenizer_config.json)
 * is rendered from the real tokenizer_config.json fetched by the
 * chat_fetch fixture (or the official template written by the
 * chat_templates_fetch fixture), and must reproduce the text exactly, or fail where
 * transformers raised. strftime_now() reads the file's fixed clock ("now"). */
#include "chat_testutil.h"
#include "testutil.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_stats { size_t files, rendered, errors; } ref_stats;

static void run_case(const rb_chat_template *t, const char *name, size_t idx, const json_t *c, int64_t now,
                     ref_stats *s) {
    rb_chat_options o = {0};
    o.now = now; /* the generator's fixed clock for strftime_now() (0: none recorded) */
    o.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
    const json_t *extra = json_object_get(c, "extra");
    char *ej = extra ? json_dumps(extra, 0) : NULL;
    char *mj = json_dumps(json_object_get(c, "messages"), 0);
    assert_non_null(mj);
    o.extra_vars_json = ej;
    char *out = NULL;
    size_t len = 0;
    rb_error err = {0};
    rb_status st = rb_chat_template_apply_json(t, mj, &o, &out, &len, &err);
    const json_t *want = json_object_get(c, "rendered");
    if (json_is_string(want)) {
        if (st != RB_OK) fail_msg("%s case %zu: %s", name, idx, err.msg);
        if (len != json_string_length(want) || memcmp(out, json_string_value(want), len) != 0)
            fail_msg("%s case %zu differs from transformers:\n  want [%s]\n  got  [%s]", name, idx,
                     json_string_value(want), out);
        s->rendered++;
    } else {
        const char *e = json_string_value(json_object_get(c, "error"));
        assert_non_null(e);
        if (st == RB_OK) fail_msg("%s case %zu: transformers raised '%s' but we rendered [%s]", name, idx, e, out);
        const char *msg = strstr(e, ": ");
        if (strncmp(e, "TemplateError", 13) == 0 && msg && !strstr(err.msg, msg + 2))
            fail_msg("%s case %zu: error '%s' does not carry '%s'", name, idx, err.msg, msg + 2);
        s->errors++;
    }
    free(out);
    free(mj);
    free(ej);
}

static void run_file(const char *path, ref_stats *s) {
    json_error_t je;
    json_t *d = json_load_file(path, 0, &je);
    if (!d) fail_msg("%s: %s", path, je.text);
    const char *name = json_string_value(json_object_get(d, "name"));
    assert_non_null(name);
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "%s/%s/tokenizer_config.json", RBEE_CHAT_TOKENIZERS_DIR, name);

    /* 1: the template and special tokens straight from tokenizer_config.json */
    rb_chat_template *t = NULL;
    rb_error err = {0};
    rb_status st = rb_chat_template_load_tokenizer_config(cfg, NULL, &t, &err);
    if (st != RB_OK) fail_msg("%s", err.msg);
    size_t slen;
    const char *src = rb_chat_template_source(t, &slen);
    const json_t *tj = json_object_get(d, "template");
    assert_int_equal(slen, json_string_length(tj));
    assert_memory_equal(src, json_string_value(tj), slen);
    const json_t *cases = json_object_get(d, "cases");
    assert_true(json_array_size(cases) >= 10);
    size_t i;
    const json_t *c;
    const int64_t now = json_integer_value(json_object_get(d, "now"));
    json_array_foreach(cases, i, c) run_case(t, name, i, c, now, s);
    rb_chat_template_free(t);

    /* 2: the template text of the reference file with bos/eos set by hand,
     * as a GGUF loader would do it */
    TU_OK(rb_chat_template_parse(json_string_value(tj), json_string_length(tj), &t, &err));
    const char *bos = json_string_value(json_object_get(d, "bos_token"));
    const char *eos = json_string_value(json_object_get(d, "eos_token"));
    if (bos) TU_OK(rb_chat_template_set_str(t, "bos_token", bos, &err));
    if (eos) TU_OK(rb_chat_template_set_str(t, "eos_token", eos, &err));
    ref_stats ignore = {0};
    json_array_foreach(cases, i, c) run_case(t, name, i, c, now, &ignore);
    rb_chat_template_free(t);
    s->files++;
    json_decref(d);
}

static void test_reference_renders(void **state) {
    (void)state;
    DIR *dir = opendir(RBEE_CHAT_DATA_DIR);
    assert_non_null(dir);
    ref_stats s = {0};
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0) continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", RBEE_CHAT_DATA_DIR, e->d_name);
        run_file(path, &s);
    }
    closedir(dir);
    printf("chat reference: %zu templates, %zu renders byte-exact, %zu expected errors\n", s.files, s.rendered,
           s.errors);
    /* llama3, llama3_1, qwen3, gemma3 (npm tokenizer configs) and qwen2_5,
     * gemma2, phi3_5, mistral_nemo, gpt_oss, mixtral (official templates,
     * fetch-chat-templates.sh) */
    assert_true(s.files >= 10);
    assert_true(s.rendered >= 100);
}

/* Llama 2's tokenizer_config.json (this npm release) carries no template. */
static void test_config_without_template(void **state) {
    (void)state;
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "%s/llama2/tokenizer_config.json", RBEE_CHAT_TOKENIZERS_DIR);
    rb_chat_template *t = NULL;
    rb_error err = {0};
    assert_int_equal(rb_chat_template_load_tokenizer_config(cfg, NULL, &t, &err), RB_E_NOT_FOUND);
    assert_null(t);
    assert_non_null(strstr(err.msg, "no chat_template"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_renders),
        cmocka_unit_test(test_config_without_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
