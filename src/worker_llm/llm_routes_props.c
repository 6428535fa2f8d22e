/* GET /props, the main fields of llama-server's that apply here: the
 * default generation settings of the OpenAI routes (temperature 1, top_p 1,
 * no top-k / min-p / penalties, a random seed, max_tokens: the room left in
 * the context), the context per slot, total_slots (--parallel), the model
 * path, the chat template in use (the model's, or the plain fallback),
 * BOS/EOS text, build info, whether embeddings are on, deterministic
 * batching and prompt-prefix reuse (cache_prompt, as llama-server names
 * its request field), and prefill_chunk (--prefill-chunk, 0: off). */
#include "worker/wk_util.h"
#include "worker_llm/llm_worker.h"

#include <stdio.h>
#include <string.h>

#ifndef RBEE_VERSION
#define RBEE_VERSION "0.0.0"
#endif

static json_t *token_text(const rb_tokenizer *tok, int32_t id) {
    size_t len = 0;
    const char *s = id >= 0 ? rb_tokenizer_token_text(tok, id, &len) : NULL;
    return s ? wk_json_text(s, len) : json_null();
}

static bool route_props(wk_req *r, void *ctx) {
    llm_worker *lw = ctx;
    wk_worker *w = lw->w;
    if (wk_worker_state(w) != WK_STATE_READY) return wk_reply_not_ready(r, w);
    const llm_prompt_ctx pc = llm_worker_prompt_ctx(lw);
    const char *tpl = lw->chat.is_fallback ? llm_chat_fallback_template : rb_tokenizer_chat_template(lw->tok);
    json_t *params = json_pack("{s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:[],s:i,s:i,s:i,s:b}", "temperature", 1.0,
                               "top_k", 0, "top_p", 1.0, "min_p", 0.0, "repeat_penalty", 1.0, "frequency_penalty", 0.0,
                               "presence_penalty", 0.0, "n_predict", -1, "seed", -1, "stop", "n_probs", 0,
                               "max_stop", LLM_MAX_STOP, "max_n", pc.lim.max_choices, "ignore_eos", 0);
    char build[96];
    snprintf(build, sizeof build, "rbee-c %s (%s)", RBEE_VERSION, lw->be ? rb_backend_name(lw->be) : "?");
    json_t *o = json_pack("{s:{s:I,s:o},s:I,s:o,s:o,s:o,s:o,s:s,s:s,s:{s:b,s:b},s:b,s:s,s:b,s:b,s:I}", "default_generation_settings",
                          "n_ctx", (json_int_t)lw->ctx_size, "params", params, "total_slots", (json_int_t)lw->parallel,
                          "model_path", wk_json_text(w->model_path, strlen(w->model_path)), "chat_template",
                          tpl ? wk_json_text(tpl, strlen(tpl)) : json_string(""), "bos_token",
                          token_text(lw->tok, rb_tokenizer_bos(lw->tok)), "eos_token",
                          token_text(lw->tok, rb_tokenizer_eos(lw->tok)), "model_alias", w->model_id, "build_info",
                          build, "modalities", "vision", 0, "audio", 0, "embedding", lw->embedding, "pooling",
                          lw->pooling == LLM_POOL_LAST ? "last" : "mean", "deterministic", lw->deterministic,
                          "cache_prompt", lw->cache_prompt, "prefill_chunk", (json_int_t)lw->prefill_chunk);
    return wk_reply_json(r, 200, o);
}

rb_status llm_routes_props_add(llm_worker *lw, rb_error *err) {
    return wk_router_add(&lw->w->router, "GET", "/props", route_props, lw, NULL, 0, err);
}
