/* Implementation of llm_prompt.h. */
#include "worker_llm/llm_prompt.h"
#include "worker_llm/llm_tool_grammar.h"
#include "worker_llm/llm_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tool-call markers of the family that are special tokens of the
 * tokenizer: the output keeps them as text so the calls can be parsed. */
static void keep_markers(const rb_tokenizer *tok, rb_tool_family f, llm_gen_request *req) {
    static const char *const llama[] = {"<|python_tag|>", NULL};
    static const char *const hermes[] = {"<tool_call>", "</tool_call>", NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", NULL};
    const char *const *m = f == RB_TOOLS_LLAMA3 ? llama : f == RB_TOOLS_HERMES ? hermes
                         : f == RB_TOOLS_MISTRAL || f == RB_TOOLS_MISTRAL_ARGS ? mistral : NULL;
    for (; m && *m && req->n_keep < (int)(sizeof req->keep_ids / sizeof req->keep_ids[0]); m++) {
        const int32_t id = rb_tokenizer_token_id(tok, *m, strlen(*m));
        if (id >= 0 && rb_tokenizer_is_special(tok, id)) req->keep_ids[req->n_keep++] = id;
    }
}

/* tool_choice "required" or a named function: the output is constrained
 * to calls in the family's syntax (llm_tool_grammar.h). */
static void force_call(llm_gen_request *req, json_t *body, wk_errors *errs) {
    const bool legacy = json_object_get(body, "functions") != NULL && json_object_get(body, "tools") == NULL;
    if (req->grammar) {
        wk_errors_add(errs, legacy ? "function_call" : "tool_choice", "exclusive",
                      "a forced tool call and response_format / grammar cannot both constrain the output");
        return;
    }
    char *gbnf = NULL;
    int bad = -1;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = llm_tool_grammar_gbnf(&req->tools, &gbnf, &bad, &err);
    if (s == RB_OK) s = rb_grammar_parse(gbnf, strlen(gbnf), NULL, &req->grammar, &err);
    free(gbnf);
    if (s == RB_OK) return;
    char field[64];
    if (bad >= 0 && legacy) snprintf(field, sizeof field, "functions[%d].parameters", bad);
    else if (bad >= 0) snprintf(field, sizeof field, "tools[%d].function.parameters", bad);
    else snprintf(field, sizeof field, "%s", legacy ? "function_call" : "tool_choice");
    wk_errors_add(errs, field,
                  s == RB_E_UNSUPPORTED ? "unsupported_parameter" : s == RB_E_NOMEM ? "memory" : "invalid_json_schema",
                  "a forced tool call needs a grammar for the arguments: %s", err.msg);
}

/* The conversation of a chat body through the chat template. */
static void chat_prompt(const llm_prompt_ctx *pc, json_t *body, llm_gen_request *req, wk_errors *errs) {
    llm_tools_read(body, pc->chat->family, &req->tools, errs);
    if (errs->n > 0) return;
    if (req->tools.choice == LLM_TOOLS_REQUIRED || req->tools.choice == LLM_TOOLS_NAMED) force_call(req, body, errs);
    if (errs->n > 0) return;
    if (llm_tools_parsing(&req->tools)) keep_markers(pc->tok, req->tools.family, req);
    json_t *msgs = llm_request_read_chat(body, errs);
    if (!msgs) return;
    char *mj = json_dumps(msgs, JSON_COMPACT);
    json_decref(msgs);
    if (!mj) {
        wk_errors_add(errs, "messages", "memory", "out of memory");
        return;
    }
    rb_chat_rendered rd;
    unsigned flags = 0;
    rb_error err;
    rb_error_clear(&err);
    if (llm_chat_render(pc->chat, mj, req->tools.tools_json, &rd, &flags, &err) != RB_OK)
        wk_errors_add(errs, "messages", "chat_template", "the chat template failed on these messages: %s", err.msg);
    else if (errs->n == 0)
        llm_request_set_prompt(req, pc->tok, rd.text, rd.len, flags, rd.request, rd.n_request, pc->ctx_size, 0, errs);
    rb_chat_rendered_free(&rd);
    free(mj);
}

void llm_prompt_build(const llm_prompt_ctx *pc, json_t *body, llm_api api, llm_gen_request *req, wk_errors *errs) {
    const char *prompt = NULL;
    if (api == LLM_API_RBEE) llm_request_read_rbee(body, &prompt, errs);
    llm_request_read_params(body, api, &pc->lim, req, errs);
    llm_request_refuse_unsupported(body, api, errs);
    if (errs->n > 0) return;
    llm_grammar_read(body, api, req, errs);
    if (errs->n > 0) return;
    if (api == LLM_API_CHAT) {
        chat_prompt(pc, body, req, errs);
        return;
    }
    if (api == LLM_API_COMPLETION) llm_request_read_completion(body, &prompt, errs);
    if (errs->n > 0) return;
    const size_t len = strlen(prompt);
    for (size_t i = 0; i < len; i++) req->prompt_chars += ((unsigned char)prompt[i] & 0xC0) != 0x80; /* valid UTF-8 */
    llm_request_set_prompt(req, pc->tok, prompt, len, RB_TOK_ADD_SPECIAL, NULL, 0, pc->ctx_size, 0, errs);
}
