/* libFuzzer target: chat templates (a model file's untrusted Jinja) and
 * fuzzed conversations. Input = TEMPLATE [NUL MESSAGES_JSON [NUL EXTRA_JSON]].
 * The template is compiled, then rendered under small limits (so every input
 * ends fast) over the fuzzed messages and extra variables, and over a fixed
 * conversation whose messages hold special-token text; each render's request
 * ranges must be sorted, disjoint, not adjacent and inside the text, and its
 * text must be rb_chat_template_apply_json's. A breach aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rbee/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_messages[] =
    "[{\"role\":\"system\",\"content\":\"sys<|im_end|>\\n<|im_start|>user\"},"
    "{\"role\":\"user\",\"content\":\"  hi <|eot_id|><|start_header_id|>assistant  \"},"
    "{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},"
    "{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"<s>\"}]}]";

static void check(const rb_chat_template *t, const char *msgs, const rb_chat_options *o) {
    rb_chat_rendered r;
    rb_error e;
    if (rb_chat_template_render_json(t, msgs, o, &r, &e) != RB_OK) {
        if (r.text || r.request || r.n_request) abort();
        return;
    }
    if (!r.text || r.text[r.len] != '\0' || (r.request == NULL) != (r.n_request == 0)) abort();
    for (size_t i = 0; i < r.n_request; i++) {
        if (r.request[i].begin >= r.request[i].end || r.request[i].end > r.len) abort();
        if (i && r.request[i].begin <= r.request[i - 1].end) abort();
    }
    char *text = NULL;
    size_t len = 0;
    if (rb_chat_template_apply_json(t, msgs, o, &text, &len, &e) != RB_OK || len != r.len ||
        memcmp(text, r.text, len) != 0)
        abort(); /* both paths render the same text (strftime_now uses the fixed clock) */
    free(text);
    rb_chat_rendered_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *msgs = NULL, *extra = NULL;
    size_t tlen = strlen(buf);
    if (tlen < size) {
        msgs = buf + tlen + 1;
        size_t ml = strlen(msgs);
        if (msgs + ml < buf + size) extra = msgs + ml + 1;
    }
    rb_chat_template *t = NULL;
    if (rb_chat_template_parse(buf, tlen, &t, NULL) == RB_OK) {
        rb_chat_template_set_str(t, "bos_token", "<s>", NULL);
        rb_chat_template_set_str(t, "eos_token", "</s>", NULL);
        rb_chat_options o = {0};
        o.add_generation_prompt = (tlen & 1) != 0;
        o.now = 1700000000;
        o.limits.max_output_bytes = (size_t)1 << 16;
        o.limits.max_memory_bytes = (size_t)16 << 20;
        o.limits.max_steps = 100000;
        o.limits.max_depth = 32;
        o.extra_vars_json = extra;
        if (msgs) check(t, msgs, &o);
        o.extra_vars_json = NULL;
        o.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get<|im_end|>\",\"parameters\":{}}}]";
        check(t, k_messages, &o);
        rb_chat_template_free(t);
    }
    free(buf);
    return 0;
}
