/* Chat-template API tests: tokenizer_config.json parsing (string and named
 * list templates, AddedToken special tokens), render options (generation
 * prompt, tools, extra variables, message arrays), random conversations
 * and random strings checked against naive reference formatters, hard
 * limits, and mutated hostile templates that must fail cleanly. */
#include "chat_testutil.h"
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_chat_template *from_config(const char *json, const char *name, rb_status want) {
    rb_chat_template *t = NULL;
    rb_error err = {0};
    rb_status st = rb_chat_template_from_tokenizer_config(json, strlen(json), name, &t, &err);
    if (st != want) fail_msg("config %s: status %s (%s), wanted %s", json, rb_status_str(st), err.msg, rb_status_str(want));
    if (st != RB_OK) {
        assert_null(t);
        assert_true(strlen(err.msg) > 0);
    }
    return t;
}

static char *apply(const rb_chat_template *t, const rb_chat_message *m, size_t n, const rb_chat_options *o) {
    char *out = NULL;
    size_t len = 0;
    rb_error err = {0};
    rb_status st = rb_chat_template_apply(t, m, n, o, &out, &len, &err);
    if (st != RB_OK) fail_msg("apply: %s", err.msg);
    assert_int_equal(strlen(out), len);
    return out;
}

static void test_tokenizer_config(void **state) {
    (void)state;
    static const char SHOW[] = "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token is defined }}|"
                               "{{ additional_special_tokens }}|{{ messages|length }}";
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"chat_template\": \"%s\", \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<B>\", "
             "\"lstrip\": false}, \"eos_token\": \"<E>\", \"pad_token\": null, \"unk_token\": null, "
             "\"additional_special_tokens\": [\"<x>\", {\"content\": \"<y>\"}], \"model_max_length\": "
             "1000000000000000019884624838656}",
             SHOW);
    rb_chat_template *t = from_config(cfg, NULL, RB_OK);
    rb_chat_message m[2] = {{"user", "a"}, {"assistant", "b"}};
    char *out = apply(t, m, 2, NULL);
    assert_string_equal(out, "<B>|<E>||False|['<x>', '<y>']|2");
    free(out);
    size_t len;
    assert_string_equal(rb_chat_template_source(t, &len), SHOW);
    assert_int_equal(len, strlen(SHOW));
    /* defaults can be replaced and removed */
    rb_error err = {0};
    TU_OK(rb_chat_template_set_str(t, "bos_token", "<s2>", &err));
    TU_OK(rb_chat_template_set_str(t, "eos_token", NULL, &err));
    TU_OK(rb_chat_template_set_json(t, "pad_token", "[1, 2.5, \"p\"]", &err));
    out = apply(t, m, 1, NULL);
    assert_string_equal(out, "<s2>||[1, 2.5, 'p']|False|['<x>', '<y>']|1");
    free(out);
    assert_int_equal(rb_chat_template_set_json(t, "x", "{bad", &err), RB_E_FORMAT);
    rb_chat_template_free(t);

    /* list form: default and named entries */
    const char *list = "{\"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ messages[0].content }}\"},"
                       " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}\"}], \"eos_token\": \"</s>\"}";
    t = from_config(list, NULL, RB_OK);
    out = apply(t, m, 1, NULL);
    assert_string_equal(out, "Da");
    free(out);
    rb_chat_template_free(t);
    t = from_config(list, "tool_use", RB_OK);
    rb_chat_options o = {.tools_json = "[{\"type\": \"function\"}, {}]"};
    out = apply(t, m, 1, &o);
    assert_string_equal(out, "T2");
    free(out);
    rb_chat_template_free(t);

    from_config(list, "rag", RB_E_NOT_FOUND);
    from_config("{\"eos_token\": \"x\"}", NULL, RB_E_NOT_FOUND);
    from_config("{\"chat_template\": \"x\"}", "other", RB_E_NOT_FOUND);
    from_config("{\"chat_template\": 5}", NULL, RB_E_FORMAT);
    from_config("{\"chat_template\": [{\"name\": 1}]}", NULL, RB_E_FORMAT);
    from_config("{\"chat_template\": \"{% if %}\"}", NULL, RB_E_FORMAT);
    from_config("[1, 2]", NULL, RB_E_FORMAT);
    from_config("{\"chat_template\": ", NULL, RB_E_FORMAT);
    t = NULL;
    assert_int_equal(rb_chat_template_load_tokenizer_config("/nonexistent/tokenizer_config.json", NULL, &t, &err),
                     RB_E_IO);
    assert_null(t);
}

static void test_render_options(void **state) {
    (void)state;
    const char *src = "{% for m in messages %}<{{ m.role }}:{{ m.content }}>{% endfor %}"
                      "{% if add_generation_prompt %}[gen]{% endif %}"
                      "|tools={{ tools }}/{{ tools is defined }}|docs={{ documents }}|x={{ x|default('-') }}"
                      "{% if tools %}{% for t in tools %} {{ t.function.name }}{{ t | tojson }}{% endfor %}{% endif %}";
    rb_chat_template *t = NULL;
    rb_error err = {0};
    TU_OK(rb_chat_template_parse(src, strlen(src), &t, &err));
    rb_chat_message m[3] = {{"system", "S"}, {"user", "héllo {{ not a tag }}"}, {"assistant", NULL}};
    char *out = apply(t, m, 3, NULL);
    assert_string_equal(out, "<system:S><user:héllo {{ not a tag }}><assistant:None>|tools=None/True|docs=None|x=-");
    free(out);
    rb_chat_options o = {.add_generation_prompt = true,
                         .tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"z\": 1, \"a\": [true, null]}}]",
                         .extra_vars_json = "{\"x\": 42, \"add_generation_prompt\": false}"};
    out = apply(t, m, 0, &o);
    /* extra variables come last, so they override add_generation_prompt */
    assert_string_equal(out, "|tools=[{'type': 'function', 'function': {'name': 'f', 'z': 1, 'a': [True, None]}}]/True"
                             "|docs=None|x=42 f{\"type\": \"function\", \"function\": {\"name\": \"f\", \"z\": 1, "
                             "\"a\": [true, null]}}");
    free(out);
    o.extra_vars_json = NULL;
    char *jout = NULL;
    TU_OK(rb_chat_template_apply_json(t, "[{\"role\": \"user\", \"content\": \"q\", \"extra\": {\"k\": 1}}]", &o, &jout,
                                      NULL, &err));
    assert_non_null(strstr(jout, "<user:q>[gen]|tools="));
    free(jout);
    /* bad arguments */
    char *bad = NULL;
    assert_int_equal(rb_chat_template_apply_json(t, "{\"role\": 1}", NULL, &bad, NULL, &err), RB_E_FORMAT);
    assert_int_equal(rb_chat_template_apply_json(t, "[", NULL, &bad, NULL, &err), RB_E_FORMAT);
    o.tools_json = "{}";
    assert_int_equal(rb_chat_template_apply(t, m, 1, &o, &bad, NULL, &err), RB_E_FORMAT);
    o.tools_json = NULL;
    o.extra_vars_json = "[1]";
    assert_int_equal(rb_chat_template_apply(t, m, 1, &o, &bad, NULL, &err), RB_E_FORMAT);
    rb_chat_message noro = {NULL, "x"};
    assert_int_equal(rb_chat_template_apply(t, &noro, 1, NULL, &bad, NULL, &err), RB_E_INVALID);
    assert_int_equal(rb_chat_template_apply(t, NULL, 2, NULL, &bad, NULL, &err), RB_E_INVALID);
    assert_null(bad);
    rb_chat_template_free(t);
    assert_int_equal(rb_chat_template_parse(NULL, 3, &t, &err), RB_E_INVALID);
    /* empty template renders to an empty string */
    TU_OK(rb_chat_template_parse("", 0, &t, &err));
    out = apply(t, m, 1, NULL);
    assert_string_equal(out, "");
    free(out);
    rb_chat_template_free(t);
}

/* Random UTF-8 text with the characters templates care about. */
static size_t random_text(tu_rng *r, char *buf, size_t max) {
    static const char *const pieces[] = {"a", "Z", " ", "\n", "\t", "{{", "}}", "{%", "%}", "\"", "'", "\\", "<|im_end|>",
                                         "\xc3\xa9", "\xe4\xbd\xa0", "\xf0\x9f\x98\x80", "\x01", "\x7f", "#", "-", "/"};
    size_t n = 0, want = (size_t)(tu_rng_u64(r) % 40);
    for (size_t i = 0; i < want; i++) {
        const char *p = pieces[tu_rng_u64(r) % (sizeof(pieces) / sizeof(pieces[0]))];
        size_t l = strlen(p);
        if (n + l >= max) break;
        memcpy(buf + n, p, l);
        n += l;
    }
    buf[n] = '\0';
    return n;
}

/* ChatML rendered by the interpreter vs. direct string building. */
static void test_random_chatml(void **state) {
    (void)state;
    static const char SRC[] =
        "{%- for message in messages %}\n"
        "    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    rb_chat_template *t = NULL;
    rb_error err = {0};
    TU_OK(rb_chat_template_parse(SRC, strlen(SRC), &t, &err));
    tu_rng r;
    tu_rng_seed(&r, 0xC4A7u);
    char contents[13][256];
    rb_chat_message m[13];
    for (int iter = 0; iter < 200; iter++) {
        size_t n = (size_t)(tu_rng_u64(&r) % 13);
        char want[13 * 300 + 64];
        size_t w = 0;
        want[0] = '\0';
        for (size_t i = 0; i < n; i++) {
            m[i].role = roles[tu_rng_u64(&r) % 4];
            random_text(&r, contents[i], sizeof(contents[i]));
            m[i].content = contents[i];
            w += (size_t)sprintf(want + w, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
        }
        rb_chat_options o = {.add_generation_prompt = (iter & 1) != 0};
        if (o.add_generation_prompt) w += (size_t)sprintf(want + w, "<|im_start|>assistant\n");
        char *out = apply(t, m, n, &o);
        assert_string_equal(out, want);
        free(out);
    }
    rb_chat_template_free(t);
}

/* Python json.dumps(s, ensure_ascii=False), written out naively. */
static size_t naive_json_string(const char *s, char *out) {
    size_t o = 0;
    out[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': o += (size_t)sprintf(out + o, "\\\""); break;
        case '\\': o += (size_t)sprintf(out + o, "\\\\"); break;
        case '\n': o += (size_t)sprintf(out + o, "\\n"); break;
        case '\t': o += (size_t)sprintf(out + o, "\\t"); break;
        default:
            if (*p < 0x20) o += (size_t)sprintf(out + o, "\\u%04x", *p);
            else out[o++] = (char)*p;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
    return o;
}

/* tojson, trim and length on random strings vs naive references. */
static void test_random_strings(void **state) {
    (void)state;
    static const char SRC[] = "{{ s|tojson }}|{{ s|trim }}|{{ s|length }}|{{ s.split('-')|length }}";
    rb_chat_template *t = NULL;
    rb_error err = {0};
    TU_OK(rb_chat_template_parse(SRC, strlen(SRC), &t, &err));
    tu_rng r;
    tu_rng_seed(&r, 77);
    for (int iter = 0; iter < 300; iter++) {
        char s[256], js[2048], want[4096];
        random_text(&r, s, sizeof(s));
        json_t *vars = json_object();
        json_object_set_new(vars, "s", json_string(s));
        char *vj = json_dumps(vars, 0);
        json_decref(vars);
        rb_chat_options o = {.extra_vars_json = vj};
        char *out = apply(t, NULL, 0, &o);
        free(vj);
        naive_json_string(s, js);
        /* trim: ASCII whitespace here (the random pieces hold no other) */
        const char *a = s, *b = s + strlen(s);
        while (a < b && strchr(" \t\n\r\v\f", *a)) a++;
        while (b > a && strchr(" \t\n\r\v\f", b[-1])) b--;
        size_t cps = 0, dashes = 0;
        for (const char *p = s; *p; p++) {
            cps += ((unsigned char)*p & 0xC0u) != 0x80u;
            dashes += *p == '-';
        }
        snprintf(want, sizeof(want), "%s|%.*s|%zu|%zu", js, (int)(b - a), a, cps, dashes + 1);
        assert_string_equal(out, want);
        free(out);
    }
    rb_chat_template_free(t);
}

static rb_status render_status(const char *src, const rb_chat_limits *lim, char *msg, size_t msglen) {
    ct_result r = ct_render(src, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", lim);
    snprintf(msg, msglen, "%s", r.err.msg);
    ct_result_free(&r);
    return r.st;
}

static void test_limits(void **state) {
    (void)state;
    char msg[RB_ERROR_MSG_MAX];
    rb_chat_limits lim = {.max_output_bytes = 1000};
    assert_int_equal(render_status("{% for i in range(1000) %}abcdef{% endfor %}", &lim, msg, sizeof(msg)), RB_E_RANGE);
    assert_non_null(strstr(msg, "output exceeds"));
    assert_int_equal(render_status("{% for i in range(100) %}abcdef{% endfor %}", &lim, msg, sizeof(msg)), RB_OK);
    rb_chat_limits steps = {.max_steps = 50000};
    assert_int_equal(render_status("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                                   &steps, msg, sizeof(msg)),
                     RB_E_RANGE);
    assert_non_null(strstr(msg, "step limit"));
    assert_int_equal(render_status("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", NULL, msg, sizeof(msg)),
                     RB_E_RANGE);
    assert_non_null(strstr(msg, "depth"));
    rb_chat_limits mem = {.max_memory_bytes = 1 << 20};
    rb_status st = render_status("{% set ns = namespace(s='xy') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                                 "{% endfor %}{{ ns.s|length }}",
                                 &mem, msg, sizeof(msg));
    assert_true(st == RB_E_RANGE || st == RB_E_NOMEM);
    assert_int_equal(render_status("{{ range(1000000)|length }}", NULL, msg, sizeof(msg)), RB_E_RANGE);
    assert_int_equal(render_status("{{ ('a' * 1000000000)|length }}", NULL, msg, sizeof(msg)), RB_E_RANGE);
    assert_int_equal(render_status("{{ [1] * 1000000000 }}", NULL, msg, sizeof(msg)), RB_E_RANGE);

    /* deep nesting is a syntax error, not a stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    assert_non_null(deep);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', n);
    strcpy(deep + 3 + n, "1 }}");
    assert_int_equal(render_status(deep, NULL, msg, sizeof(msg)), RB_E_FORMAT);
    size_t k = 0;
    for (size_t i = 0; i < 20000; i++) k += (size_t)sprintf(deep + k, "-");
    memcpy(deep, "{{", 2);
    strcpy(deep + k, "1 }}");
    assert_int_equal(render_status(deep, NULL, msg, sizeof(msg)), RB_E_FORMAT);
    free(deep);
    char *ifs = malloc(5000 * 24 + 16);
    assert_non_null(ifs);
    k = 0;
    for (int i = 0; i < 5000; i++) k += (size_t)sprintf(ifs + k, "{%% if true %%}");
    for (int i = 0; i < 5000; i++) k += (size_t)sprintf(ifs + k, "{%% endif %%}");
    assert_int_equal(render_status(ifs, NULL, msg, sizeof(msg)), RB_E_FORMAT);
    free(ifs);

    /* deeply nested JSON input is refused, not recursed into */
    rb_chat_template *t = NULL;
    rb_error err = {0};
    TU_OK(rb_chat_template_parse("{{ x }}", 7, &t, &err));
    char *js = malloc(2 * 3000 + 32);
    assert_non_null(js);
    k = (size_t)sprintf(js, "{\"x\": ");
    for (int i = 0; i < 3000; i++) js[k++] = '[';
    for (int i = 0; i < 3000; i++) js[k++] = ']';
    strcpy(js + k, "}");
    rb_chat_options o = {.extra_vars_json = js};
    char *out = NULL;
    assert_int_not_equal(rb_chat_template_apply(t, NULL, 0, &o, &out, NULL, &err), RB_OK);
    assert_null(out);
    free(js);
    rb_chat_template_free(t);
}

/* Mutations of a real template (Qwen3's) must parse-and-render or fail
 * with a message; never crash, hang or leak (run under ASan in CI). */
static void test_hostile_mutations(void **state) {
    (void)state;
    json_error_t je;
    json_t *d = json_load_file(RBEE_CHAT_DATA_DIR "/qwen3.json", 0, &je);
    if (!d) fail_msg("qwen3.json: %s", je.text);
    const char *src = json_string_value(json_object_get(d, "template"));
    assert_non_null(src);
    size_t n = strlen(src);
    char *buf = malloc(n + 64);
    assert_non_null(buf);
    static const char *const inserts[] = {"{%", "%}", "{{", "}}", "{#", "-", "(", ")", "[", "]", "'", "\"", "|", ".",
                                          "endfor", "if", "else", "loop", "ns", "~", "*", "\\", "\xff", ":", ","};
    const char *msgs = "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"},"
                       " {\"role\": \"assistant\", \"content\": \"<think>a</think>b\", \"tool_calls\": "
                       "[{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}, {\"role\": \"tool\", \"content\": \"t\"}]";
    rb_chat_options o = {.add_generation_prompt = true,
                         .tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]",
                         .limits = {.max_output_bytes = 1 << 16, .max_steps = 100000}};
    tu_rng r;
    tu_rng_seed(&r, 4242);
    size_t ok = 0, failed = 0;
    for (int iter = 0; iter < 1500; iter++) {
        memcpy(buf, src, n + 1);
        size_t len = n;
        int edits = 1 + (int)(tu_rng_u64(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(tu_rng_u64(&r) % (len + 1));
            switch (tu_rng_u64(&r) % 4) {
            case 0: /* delete a span */ {
                size_t del = (size_t)(tu_rng_u64(&r) % 8);
                if (at + del > len) del = len - at;
                memmove(buf + at, buf + at + del, len - at - del + 1);
                len -= del;
                break;
            }
            case 1: /* insert syntax */ {
                const char *ins = inserts[tu_rng_u64(&r) % (sizeof(inserts) / sizeof(inserts[0]))];
                size_t l = strlen(ins);
                if (len + l + 1 > n + 63) break;
                memmove(buf + at + l, buf + at, len - at + 1);
                memcpy(buf + at, ins, l);
                len += l;
                break;
            }
            case 2: /* flip a byte */
                if (at < len) buf[at] = (char)(tu_rng_u64(&r) & 0xFF);
                if (at < len && buf[at] == '\0') buf[at] = '{';
                break;
            default: /* truncate */
                len = at;
                buf[len] = '\0';
            }
        }
        rb_chat_template *t = NULL;
        rb_error err = {0};
        rb_status st = rb_chat_template_parse(buf, len, &t, &err);
        if (st == RB_OK) {
            char *out = NULL;
            size_t olen = 0;
            st = rb_chat_template_apply_json(t, msgs, &o, &out, &olen, &err);
            if (st == RB_OK) assert_true(olen <= (1u << 16));
            else assert_null(out);
            free(out);
            rb_chat_template_free(t);
        }
        if (st == RB_OK) {
            ok++;
        } else {
            failed++;
            assert_true(strlen(err.msg) > 0);
        }
    }
    printf("mutated templates: %zu rendered, %zu rejected with an error\n", ok, failed);
    assert_true(ok > 0 && failed > 0);
    free(buf);
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_config),
        cmocka_unit_test(test_render_options),
        cmocka_unit_test(test_random_chatml),
        cmocka_unit_test(test_random_strings),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_hostile_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
