/* Implementation of llm_chat.h. */
#include "worker_llm/llm_chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char llm_chat_fallback_template[] =
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

static void set_token_var(rb_chat_template *t, const rb_tokenizer *tok, const char *name, int32_t id, char *copy,
                          size_t copy_len) {
    size_t len = 0;
    const char *s = id >= 0 ? rb_tokenizer_token_text(tok, id, &len) : NULL;
    if (!s || len == 0 || len >= 128) return;
    char buf[128];
    memcpy(buf, s, len);
    buf[len] = '\0';
    rb_chat_template_set_str(t, name, buf, NULL);
    if (copy) snprintf(copy, copy_len, "%s", buf);
}

rb_status llm_chat_init(llm_chat *c, const rb_tokenizer *tok, rb_error *err) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    const char *src = rb_tokenizer_chat_template(tok);
    rb_status s;
    if (src && *src) {
        s = rb_chat_template_parse(src, strlen(src), &c->tpl, err);
        if (s != RB_OK) {
            rb_error_prefix(err, "the model's chat template: ");
            return s;
        }
        c->family = rb_tool_family_detect(src, strlen(src));
    } else {
        c->is_fallback = true;
        s = rb_chat_template_parse(llm_chat_fallback_template, strlen(llm_chat_fallback_template), &c->tpl, err);
        if (s != RB_OK) return s;
        rb_chat_template_set_str(c->tpl, "bos_token", "", NULL);
    }
    set_token_var(c->tpl, tok, "bos_token", rb_tokenizer_bos(tok), c->bos_text, sizeof c->bos_text);
    set_token_var(c->tpl, tok, "eos_token", rb_tokenizer_eos(tok), NULL, 0);
    return RB_OK;
}

void llm_chat_destroy(llm_chat *c) {
    rb_chat_template_free(c->tpl);
    pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

rb_status llm_chat_render(llm_chat *c, const char *messages_json, const char *tools_json, rb_chat_rendered *out,
                          unsigned *flags, rb_error *err) {
    rb_chat_options o;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = true;
    o.tools_json = tools_json;
    o.limits.max_output_bytes = (size_t)4 << 20;
    o.limits.max_memory_bytes = (size_t)64 << 20;
    pthread_mutex_lock(&c->mu);
    rb_status s = rb_chat_template_render_json(c->tpl, messages_json, &o, out, err);
    pthread_mutex_unlock(&c->mu);
    if (s != RB_OK) return s;
    /* a BOS the template wrote itself; BOS text from a message is plain text */
    size_t bl = strlen(c->bos_text);
    bool has_bos = bl > 0 && out->len >= bl && memcmp(out->text, c->bos_text, bl) == 0 &&
                   !(out->n_request > 0 && out->request[0].begin < bl);
    *flags = RB_TOK_PARSE_SPECIAL | (has_bos ? 0u : (unsigned)RB_TOK_ADD_SPECIAL);
    return RB_OK;
}
