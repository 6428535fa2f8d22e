/* Rendering helper for the chat-template tests (see chat_testutil.h). */
#include "chat_testutil.h"
#include "testutil.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

ct_result ct_render(const char *tpl, const char *vars_json, const rb_chat_limits *limits) {
    ct_result r = {0};
    json_error_t je;
    json_t *vars = json_loads(vars_json, 0, &je);
    if (!vars) fail_msg("bad test vars JSON: %s", je.text);
    json_t *msgs = json_object_get(vars, "messages"), *empty = NULL;
    if (!msgs) msgs = empty = json_array();
    char *mj = json_dumps(msgs, JSON_ENCODE_ANY);
    json_decref(empty);
    rb_chat_options o = {0};
    o.add_generation_prompt = json_is_true(json_object_get(vars, "add_generation_prompt"));
    json_object_del(vars, "messages");
    json_object_del(vars, "add_generation_prompt");
    char *vj = json_dumps(vars, 0);
    o.extra_vars_json = vj;
    if (limits) o.limits = *limits;
    o.now = 1700000000;
    rb_chat_template *t = NULL;
    r.st = rb_chat_template_parse(tpl, strlen(tpl), &t, &r.err);
    if (r.st == RB_OK) {
        r.st = rb_chat_template_apply_json(t, mj, &o, &r.out, &r.len, &r.err);
        rb_chat_template_free(t);
    }
    free(mj);
    free(vj);
    json_decref(vars);
    return r;
}

void ct_result_free(ct_result *r) {
    free(r->out);
    r->out = NULL;
}
