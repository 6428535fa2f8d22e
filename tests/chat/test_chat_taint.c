/* Request ranges of chat renders (rb_chat_template_render*): for each
 * template operation the exact bytes of the output that came from the
 * request are checked, written in the expected strings between « and »
 * (request text) next to the template's own text. Also: default variables
 * count as the template's, extra variables and tools as the request's, the
 * array API marks roles and contents, and the range bookkeeping obeys the
 * output limit. */
#include "testutil.h"

#include "rbee/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rendered text with every request range wrapped in « ». */
static char *marked(const rb_chat_rendered *r) {
    size_t cap = r->len + 4 * r->n_request + 1, o = 0, k = 0;
    char *m = malloc(cap);
    assert_non_null(m);
    for (size_t i = 0; i <= r->len; i++) {
        if (k < r->n_request && r->request[k].end == i && i > r->request[k].begin) {
            memcpy(m + o, "\xc2\xbb", 2); /* » */
            o += 2;
            k++;
        }
        if (k < r->n_request && r->request[k].begin == i) {
            memcpy(m + o, "\xc2\xab", 2); /* « */
            o += 2;
        }
        if (i < r->len) m[o++] = r->text[i];
    }
    m[o] = '\0';
    return m;
}

/* Checks the ranges' own invariants: sorted, disjoint, not adjacent, in bounds. */
static void check_ranges(const rb_chat_rendered *r) {
    for (size_t i = 0; i < r->n_request; i++) {
        assert_true(r->request[i].begin < r->request[i].end);
        assert_true(r->request[i].end <= r->len);
        if (i) assert_true(r->request[i].begin > r->request[i - 1].end);
    }
    assert_true((r->request == NULL) == (r->n_request == 0));
}

/* Renders tpl over messages (+ extra variables and tools, may be NULL) and
 * compares the marked output with want. */
static void expect(const char *tpl, const char *messages, const char *extra, const char *tools, const char *want) {
    rb_chat_template *t = NULL;
    rb_error e;
    if (rb_chat_template_parse(tpl, strlen(tpl), &t, &e) != RB_OK) fail_msg("parse %s: %s", tpl, e.msg);
    TU_OK(rb_chat_template_set_str(t, "bos_token", "<s>", &e));
    rb_chat_options o = {0};
    o.extra_vars_json = extra;
    o.tools_json = tools;
    o.now = 1700000000;
    rb_chat_rendered r;
    if (rb_chat_template_render_json(t, messages, &o, &r, &e) != RB_OK) fail_msg("render %s: %s", tpl, e.msg);
    check_ranges(&r);
    char *m = marked(&r);
    if (strcmp(m, want) != 0) fail_msg("template %s\n  want [%s]\n  got  [%s]", tpl, want, m);
    /* the text is exactly what the plain API renders */
    char *plain = NULL;
    size_t plen = 0;
    TU_OK(rb_chat_template_apply_json(t, messages, &o, &plain, &plen, &e));
    assert_int_equal(plen, r.len);
    assert_memory_equal(plain, r.text, plen);
    free(plain);
    free(m);
    rb_chat_rendered_free(&r);
    assert_null(r.text);
    rb_chat_template_free(t);
}

static const char HI[] = "[{\"role\":\"user\",\"content\":\"hi\"}]";

static void test_output_and_concat(void **state) {
    (void)state;
    expect("{{ messages[0].content }}", HI, NULL, NULL, "«hi»");
    expect("<|a|>{{ messages[0].content }}<|b|>", HI, NULL, NULL, "<|a|>«hi»<|b|>");
    expect("{{ '<|a|>' + messages[0].content + '<|b|>' }}", HI, NULL, NULL, "<|a|>«hi»<|b|>");
    expect("{{ '<|a|>' ~ messages[0]['role'] ~ '\n' ~ messages[0].content }}", HI, NULL, NULL, "<|a|>«user»\n«hi»");
    expect("{{ bos_token + messages[0].content }}", HI, NULL, NULL, "<s>«hi»");
    /* adjacent request text merges into one range */
    expect("{% for m in messages %}{{ m.content }}{% endfor %}",
           "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]", NULL, NULL, "«ab»");
    expect("{{ messages[0].content * 2 }}|{{ messages[0].content + messages[0].content }}", HI, NULL, NULL,
           "«hihi»|«hihi»");
    expect("{{ messages|length }} {{ messages[0].content|length }}", HI, NULL, NULL, "1 2");
}

static void test_cuts(void **state) {
    (void)state;
    const char *m = "[{\"role\":\"user\",\"content\":\"  a,b<|x|>  \"}]";
    expect("[{{ messages[0].content|trim }}]", m, NULL, NULL, "[«a,b<|x|>»]");
    expect("[{{ messages[0].content.strip() }}][{{ messages[0].content.lstrip() }}]", m, NULL, NULL,
           "[«a,b<|x|>»][«a,b<|x|>  »]");
    expect("{{ messages[0].content[2:5] }}|{{ messages[0].content[2] }}|{{ messages[0].content[::-1][2:5] }}", m,
           NULL, NULL, "«a,b»|«a»|«>|x»");
    expect("{{ ('<|t|>' + messages[0].content)[1:8] }}", m, NULL, NULL, "|t|>«  a»");
    expect("{% for p in messages[0].content.strip().split(',') %}<{{ p }}>{% endfor %}", m, NULL, NULL,
           "<«a»><«b<|x|>»>");
    expect("{{ messages[0].content.strip().split(',')|join('|') }}", m, NULL, NULL, "«a»|«b<|x|>»");
    expect("{{ '-'.join(messages[0].content.strip().split(',')) }}", m, NULL, NULL, "«a»-«b<|x|>»");
    expect("{{ messages[0].content.rsplit(',', 1)[0] }}", m, NULL, NULL, "«  a»");
    expect("{% for c in 'ab' + messages[0].content[2:4] %}{{ c }}.{% endfor %}", m, NULL, NULL, "a.b.«a».«,».");
    expect("{{ messages[0].content|reverse }}", "[{\"content\":\"ab\"}]", NULL, NULL, "«ba»");
    expect("{% for l in messages[0].content.splitlines() %}[{{ l }}]{% endfor %}", "[{\"content\":\"a\\nb\"}]",
           NULL, NULL, "[«a»][«b»]");
}

static void test_derived_text(void **state) {
    (void)state;
    expect("{{ ('x<|' + messages[0].content)|upper }}", HI, NULL, NULL, "X<|«HI»");
    expect("{{ (messages[0].content + 'z')|capitalize }}|{{ ('a ' + messages[0].content).title() }}", HI, NULL,
           NULL, "«Hi»z|A «Hi»");
    expect("{{ ('<' + messages[0].content)|e }}", "[{\"content\":\"<b>\"}]", NULL, NULL, "&lt;«&lt;b&gt;»");
    expect("{{ messages[0].content|replace('b', '') }}", "[{\"content\":\"<|eob_id|>\"}]", NULL, NULL,
           "«<|eo_id|>»");
    expect("{{ ('<|im_X' + messages[0].content)|replace('X', '') }}", "[{\"content\":\"end|>\"}]", NULL, NULL,
           "<|im_«end|>»");
    expect("{{ 'aXb'|replace('X', messages[0].content) }}", HI, NULL, NULL, "a«hi»b");
    expect("{{ messages[0].content|indent(2) }}", "[{\"content\":\"a\\nb\"}]", NULL, NULL, "«a\n»  «b»");
    expect("{{ messages[0]|tojson }}", HI, NULL, NULL, "{«\"role\"»: «\"user\"», «\"content\"»: «\"hi\"»}");
    expect("{{ {'k': messages[0].content}|tojson }}", HI, NULL, NULL, "{\"k\": «\"hi\"»}");
    expect("{{ messages[0].content }}", "[{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]", NULL, NULL,
           "[{«'type'»: «'text'», «'text'»: «'hi'»}]");
    expect("{{ messages[0].n }} {{ messages[0].n + 1 }} {{ messages[0].f }} {{ messages[0].z }} {{ messages[0].b }}",
           "[{\"n\":5,\"f\":0.5,\"z\":null,\"b\":true}]", NULL, NULL, "«5» 6 «0.5» «None» «True»");
    expect("{{ messages[0].content|int }} {{ messages[0].content|float }}", "[{\"content\":\"7\"}]", NULL, NULL,
           "«7» «7.0»");
    expect("{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}", HI, NULL, NULL,
           "«role»=«user»;«content»=«hi»;");
    expect("{{ strftime_now('%Y') }}", HI, NULL, NULL, "2023");
}

static void test_structure(void **state) {
    (void)state;
    expect("{% macro f(x) %}[{{ x }}]{% endmacro %}{{ f(messages[0].content) }}{{ f('t') }}", HI, NULL, NULL,
           "[«hi»][t]");
    expect("{% set s %}<{{ messages[0].content }}>{% endset %}{{ s|upper }}", HI, NULL, NULL, "<«HI»>");
    expect("{% filter upper %}a{{ messages[0].content }}{% endfilter %}", HI, NULL, NULL, "A«HI»");
    expect("{% set ns = namespace(v='<') %}{% for m in messages %}{% set ns.v = ns.v + m.content %}{% endfor %}"
           "{{ ns.v }}>",
           "[{\"content\":\"a\"},{\"content\":\"b\"}]", NULL, NULL, "<«ab»>");
    expect("{% if messages[0].content == 'hi' %}yes{% endif %}", HI, NULL, NULL, "yes");
    expect("{{ messages[0].missing|default('d') }}|{{ messages[0].content|default('d') }}", HI, NULL, NULL,
           "d|«hi»");
    /* extra variables and tools are the request's, bos_token the template's */
    expect("{{ bos_token }}{{ who }}{{ tools[0].name }}", "[]", "{\"who\":\"me\"}", "[{\"name\":\"t1\"}]",
           "<s>«met1»");
    expect("{% for t in tools %}{{ t|tojson }}{% endfor %}", "[]", NULL, "[{\"a\":1}]", "{«\"a\"»: «1»}");
    expect("plain", "[]", NULL, NULL, "plain");
}

/* The array API marks roles and contents; a NULL content prints None. */
static void test_array_api(void **state) {
    (void)state;
    const char *src = "{% for m in messages %}<{{ m.role }}|{{ m.content }}>{% endfor %}";
    rb_chat_template *t = NULL;
    rb_error e;
    TU_OK(rb_chat_template_parse(src, strlen(src), &t, &e));
    rb_chat_message msgs[] = {{"user", "hi"}, {"assistant", NULL}};
    rb_chat_rendered r;
    TU_OK(rb_chat_template_render(t, msgs, 2, NULL, &r, &e));
    char *m = marked(&r);
    assert_string_equal(m, "<«user»|«hi»><«assistant»|«None»>");
    free(m);
    rb_chat_rendered_free(&r);
    /* errors leave the result empty */
    assert_int_equal(rb_chat_template_render(t, NULL, 1, NULL, &r, &e), RB_E_INVALID);
    assert_null(r.text);
    assert_null(r.request);
    assert_int_equal(rb_chat_template_render_json(t, "{", NULL, &r, &e), RB_E_FORMAT);
    assert_null(r.text);
    rb_chat_template_free(t);
    rb_chat_rendered_free(NULL);
}

/* Alternating template and request bytes: the range list is bounded by the
 * output limit and a breach is an error, not a crash or a silent cut. */
static void test_range_limit(void **state) {
    (void)state;
    const char *src = "{% for c in messages[0].content %}{{ c }}.{% endfor %}";
    rb_chat_template *t = NULL;
    rb_error e;
    TU_OK(rb_chat_template_parse(src, strlen(src), &t, &e));
    size_t n = 3000;
    char *mj = malloc(n + 64);
    assert_non_null(mj);
    int o = snprintf(mj, 64, "[{\"content\":\"");
    memset(mj + o, 'x', n);
    strcpy(mj + o + n, "\"}]");
    rb_chat_options opt = {0};
    rb_chat_rendered r;
    TU_OK(rb_chat_template_render_json(t, mj, &opt, &r, &e));
    assert_int_equal(r.len, 2 * n);
    assert_int_equal(r.n_request, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r.request[i].begin, 2 * i);
        assert_int_equal(r.request[i].end, 2 * i + 1);
    }
    rb_chat_rendered_free(&r);
    /* 3000 ranges of 16 bytes do not fit in a 16 KiB output limit, 6000 bytes of text would */
    opt.limits.max_output_bytes = 16384;
    assert_int_equal(rb_chat_template_render_json(t, mj, &opt, &r, &e), RB_E_RANGE);
    assert_null(r.text);
    free(mj);
    rb_chat_template_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_and_concat), cmocka_unit_test(test_cuts),
        cmocka_unit_test(test_derived_text),      cmocka_unit_test(test_structure),
        cmocka_unit_test(test_array_api),         cmocka_unit_test(test_range_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
