/* Implementation of llm_request.h. */
#include "worker_llm/llm_request.h"
#include "worker/wk_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static void read_stop(json_t *o, llm_gen_request *req, wk_errors *errs) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > LLM_MAX_STOP) {
            char c[32];
            snprintf(c, sizeof c, "max_items:%d", LLM_MAX_STOP);
            wk_errors_add(errs, "stop", c, "at most %d stop strings are allowed, got %zu", LLM_MAX_STOP, n);
            return;
        }
        items = NULL;
    } else if (!json_is_string(v)) {
        wk_errors_add(errs, "stop", "type:string_or_array", "stop must be a string or an array of strings");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s)) {
            wk_errors_add(errs, "stop", "type:string", "stop[%zu] must be a string", i);
            continue;
        }
        size_t len = json_string_length(s);
        if (len == 0 || len > LLM_MAX_STOP_BYTES || memchr(json_string_value(s), '\0', len)) {
            wk_errors_add(errs, "stop", "length:1..100", "stop[%zu] must have 1 to %d bytes (no NUL), got %zu", i,
                           LLM_MAX_STOP_BYTES, len);
            continue;
        }
        char *d = dup_str(json_string_value(s), len);
        if (!d) {
            wk_errors_add(errs, "stop", "memory", "out of memory");
            return;
        }
        req->stop[req->n_stop++] = d;
    }
}

/* logit_bias: {"<token id>": bias, ...}, ids in the model's vocabulary,
 * biases in -100..100 (OpenAI's range). */
static void read_logit_bias(json_t *o, const llm_limits *lim, llm_gen_request *req, wk_errors *errs) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return;
    if (!json_is_object(v)) {
        wk_errors_add(errs, "logit_bias", "type:object", "logit_bias must be an object of token ids to biases");
        return;
    }
    const size_t n = json_object_size(v);
    if (n == 0) return;
    if (n > LLM_MAX_LOGIT_BIAS) {
        wk_errors_add(errs, "logit_bias", "max_items:1024", "logit_bias may hold at most %d tokens, got %zu",
                      LLM_MAX_LOGIT_BIAS, n);
        return;
    }
    rb_logit_bias *b = malloc(sizeof *b * n);
    if (!b) {
        wk_errors_add(errs, "logit_bias", "memory", "out of memory");
        return;
    }
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char shown[40];
        wk_utf8_sanitize(key, shown, sizeof shown);
        size_t kl = strlen(key);
        bool digits = kl > 0 && kl <= 10;
        for (size_t i = 0; i < kl && digits; i++) digits = key[i] >= '0' && key[i] <= '9';
        const long long id = digits ? strtoll(key, NULL, 10) : -1;
        if (!digits || id > INT32_MAX) {
            wk_errors_add(errs, "logit_bias", "key:token_id", "logit_bias key \"%s\" is not a token id (a decimal integer)",
                          shown);
            continue;
        }
        if (lim && lim->n_vocab > 0 && id >= lim->n_vocab) {
            wk_errors_add(errs, "logit_bias", "key:token_id", "logit_bias token %lld is outside the vocabulary (0..%lld)",
                          id, (long long)lim->n_vocab - 1);
            continue;
        }
        if (!json_is_number(val) || !(json_number_value(val) >= -100.0 && json_number_value(val) <= 100.0)) {
            wk_errors_add(errs, "logit_bias", "range:-100..100", "logit_bias[\"%s\"] must be a number from -100 to 100",
                          shown);
            continue;
        }
        b[k].token = (int32_t)id;
        b[k].bias = (float)json_number_value(val);
        k++;
    }
    if (k == 0) {
        free(b);
        return;
    }
    free(req->bias);
    req->bias = b;
    req->sampling.logit_bias = b;
    req->sampling.n_logit_bias = k;
}

/* n, logprobs and top_logprobs (see llm_request_read_params). */
static void read_choices(json_t *o, llm_api api, const llm_limits *lim, llm_gen_request *req, wk_errors *errs) {
    const int max_n = api == LLM_API_RBEE || !lim || lim->max_choices < 1 ? 1 : lim->max_choices;
    json_t *n = json_object_get(o, "n");
    if (n && !json_is_null(n)) {
        if (!json_is_integer(n) || json_integer_value(n) < 1 || json_integer_value(n) > max_n) {
            char c[32];
            snprintf(c, sizeof c, "range:1..%d", max_n);
            if (api == LLM_API_RBEE)
                wk_errors_add(errs, "n", c, "the rbee job API makes one choice (n = 1); use the OpenAI APIs for more");
            else
                wk_errors_add(errs, "n", c,
                              "n must be an integer from 1 to %d (each choice takes one of the worker's sequence slots, "
                              "--parallel, at most %d)", max_n, LLM_MAX_CHOICES);
        } else {
            req->n_choices = (int)json_integer_value(n);
        }
    }
    json_t *lp = json_object_get(o, "logprobs"), *top = json_object_get(o, "top_logprobs");
    const bool has_lp = lp && !json_is_null(lp), has_top = top && !json_is_null(top);
    char range[32];
    snprintf(range, sizeof range, "range:0..%d", LLM_MAX_TOP_LOGPROBS);
    if (api == LLM_API_RBEE) {
        if (has_lp && !json_is_false(lp))
            wk_errors_add(errs, "logprobs", "unsupported_parameter",
                          "the rbee job stream carries no log probabilities; use /v1/completions or /v1/chat/completions");
        if (has_top)
            wk_errors_add(errs, "top_logprobs", "unsupported_parameter",
                          "the rbee job stream carries no log probabilities; use /v1/chat/completions");
    } else if (api == LLM_API_CHAT) {
        if (has_lp && !json_is_boolean(lp)) wk_errors_add(errs, "logprobs", "type:boolean", "logprobs must be true or false");
        else req->logprobs = has_lp && json_is_true(lp);
        if (has_top) {
            if (!json_is_integer(top) || json_integer_value(top) < 0 || json_integer_value(top) > LLM_MAX_TOP_LOGPROBS)
                wk_errors_add(errs, "top_logprobs", range, "top_logprobs must be an integer from 0 to %d",
                              LLM_MAX_TOP_LOGPROBS);
            else if (!req->logprobs)
                wk_errors_add(errs, "top_logprobs", "requires:logprobs", "top_logprobs requires logprobs: true");
            else
                req->top_logprobs = (int)json_integer_value(top);
        }
    } else { /* completions: logprobs is the number of top tokens */
        if (has_lp) {
            if (!json_is_integer(lp) || json_integer_value(lp) < 0 || json_integer_value(lp) > LLM_MAX_TOP_LOGPROBS) {
                wk_errors_add(errs, "logprobs", range,
                              "logprobs must be an integer from 0 to %d (the most likely tokens listed per position)",
                              LLM_MAX_TOP_LOGPROBS);
            } else {
                req->logprobs = true;
                req->top_logprobs = (int)json_integer_value(lp);
            }
        }
        if (has_top)
            wk_errors_add(errs, "top_logprobs", "unsupported_parameter",
                          "top_logprobs is a chat completions field; /v1/completions takes logprobs: N");
    }
}

void llm_request_read_params(json_t *o, llm_api api, const llm_limits *lim, llm_gen_request *req,
                             wk_errors *errs) {
    req->sampling = rb_sampler_default_params();
    req->sampling.temperature = 1.0f;
    req->sampling.top_p = 1.0f;
    req->max_tokens_field = "max_tokens";
    int64_t iv = 0;
    double dv = 0;
    if (wk_get_int(o, "max_tokens", 1, (int64_t)1 << 30, &iv, errs)) req->max_tokens = iv;
    if (api == LLM_API_CHAT && wk_get_int(o, "max_completion_tokens", 1, (int64_t)1 << 30, &iv, errs)) {
        req->max_tokens = iv; /* the newer field wins, as with OpenAI */
        req->max_tokens_field = "max_completion_tokens";
    }
    if (wk_get_number(o, "temperature", 0, 2, &dv, errs)) req->sampling.temperature = (float)dv;
    if (wk_get_number(o, "top_p", 0, 1, &dv, errs)) req->sampling.top_p = (float)dv;
    if (wk_get_int(o, "top_k", 0, 1 << 20, &iv, errs)) req->sampling.top_k = (int)iv;
    if (wk_get_number(o, "min_p", 0, 1, &dv, errs)) req->sampling.min_p = (float)dv;
    json_t *rp = json_object_get(o, "repetition_penalty");
    if (rp && !json_is_null(rp) && wk_get_number(o, "repetition_penalty", 0, 10, &dv, errs)) {
        if (dv <= 0) wk_errors_add(errs, "repetition_penalty", "range:>0..10", "repetition_penalty must be > 0");
        else req->sampling.repetition_penalty = (float)dv;
    }
    if (wk_get_number(o, "frequency_penalty", -2, 2, &dv, errs)) req->sampling.frequency_penalty = (float)dv;
    if (wk_get_number(o, "presence_penalty", -2, 2, &dv, errs)) req->sampling.presence_penalty = (float)dv;
    if (wk_get_int(o, "seed", INT64_MIN, INT64_MAX, &iv, errs)) req->sampling.seed = (uint64_t)iv;
    else wk_random_bytes(&req->sampling.seed, sizeof req->sampling.seed);
    read_stop(o, req, errs);
    json_t *st = json_object_get(o, "stream");
    if (st && !json_is_null(st)) {
        if (!json_is_boolean(st)) wk_errors_add(errs, "stream", "type:boolean", "stream must be true or false");
        else req->stream = json_is_true(st);
    }
    json_t *ie = json_object_get(o, "ignore_eos");
    if (ie && !json_is_null(ie)) {
        if (!json_is_boolean(ie)) wk_errors_add(errs, "ignore_eos", "type:boolean", "ignore_eos must be true or false");
        else req->ignore_eos = json_is_true(ie);
    }
    json_t *so = json_object_get(o, "stream_options");
    if (so && json_is_object(so) && json_is_true(json_object_get(so, "include_usage"))) req->include_usage = true;
    read_choices(o, api, lim, req, errs);
    read_logit_bias(o, lim, req, errs);
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) wk_errors_add(errs, "model", "type:string", "model must be a string");
        else req->model = dup_str(json_string_value(model), json_string_length(model));
    }
}

static const char *read_prompt_string(json_t *v, const char *field, wk_errors *errs) {
    if (!v || json_is_null(v)) {
        wk_errors_add(errs, field, "required", "%s is required", field);
        return NULL;
    }
    if (!json_is_string(v)) {
        wk_errors_add(errs, field, "type:string", "%s must be a string", field);
        return NULL;
    }
    if (json_string_length(v) == 0) {
        wk_errors_add(errs, field, "non_empty", "%s must not be empty", field);
        return NULL;
    }
    return json_string_value(v);
}

void llm_request_read_rbee(json_t *o, const char **prompt, wk_errors *errs) {
    json_t *op = json_object_get(o, "operation");
    if (op && !json_is_null(op) && !(json_is_string(op) && strcmp(json_string_value(op), "infer") == 0))
        wk_errors_add(errs, "operation", "value:infer", "operation must be \"infer\"");
    json_t *hive = json_object_get(o, "hive_id");
    if (hive && !json_is_null(hive) && !json_is_string(hive))
        wk_errors_add(errs, "hive_id", "type:string", "hive_id must be a string");
    *prompt = read_prompt_string(json_object_get(o, "prompt"), "prompt", errs);
}

void llm_request_read_completion(json_t *o, const char **prompt, wk_errors *errs) {
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p)) {
        if (json_array_size(p) != 1) {
            *prompt = NULL;
            wk_errors_add(errs, "prompt", "array_size:1", "prompt arrays must hold exactly one string");
            return;
        }
        p = json_array_get(p, 0);
    }
    *prompt = read_prompt_string(p, "prompt", errs);
}

json_t *llm_request_read_chat(json_t *o, wk_errors *errs) {
    json_t *msgs = json_object_get(o, "messages");
    if (!msgs || json_is_null(msgs)) {
        wk_errors_add(errs, "messages", "required", "messages is required");
        return NULL;
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        wk_errors_add(errs, "messages", "type:non_empty_array", "messages must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char field[64];
        snprintf(field, sizeof field, "messages[%zu]", i);
        json_t *role = json_object_get(m, "role");
        json_t *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role)) {
            wk_errors_add(errs, field, "type:message", "%s must be an object with a string role", field);
            continue;
        }
        json_t *text = NULL;
        if (json_is_string(content)) {
            text = json_incref(content);
        } else if (json_is_null(content) || !content) {
            text = json_string("");
        } else if (json_is_array(content)) {
            /* list of parts: concatenate the text parts */
            size_t total = 0, k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *t = json_object_get(part, "text");
                if (!json_is_string(t)) {
                    wk_errors_add(errs, field, "type:text_part", "%s.content[%zu] must be {type:\"text\", text}", field, k);
                    total = (size_t)-1;
                    break;
                }
                total += json_string_length(t);
            }
            if (total != (size_t)-1) {
                char *buf = malloc(total + 1);
                size_t w = 0;
                if (buf) {
                    json_array_foreach(content, k, part) {
                        json_t *t = json_object_get(part, "text");
                        memcpy(buf + w, json_string_value(t), json_string_length(t));
                        w += json_string_length(t);
                    }
                    text = json_stringn(buf, w);
                    free(buf);
                }
            }
        } else {
            wk_errors_add(errs, field, "type:string", "%s.content must be a string or an array of text parts", field);
        }
        if (!text) continue;
        json_t *msg = json_pack("{s:O,s:o}", "role", role, "content", text);
        if (!msg || json_array_append_new(out, msg) != 0) {
            wk_errors_add(errs, field, "memory", "out of memory");
            break;
        }
        /* tool calling: an assistant's calls, a tool result's call id and name */
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            json_t *tc = llm_tools_message_calls(calls, field, errs);
            if (tc) json_object_set_new(msg, "tool_calls", tc);
        }
        static const char *const keys[] = {"tool_call_id", "name"};
        for (size_t k = 0; k < 2; k++) {
            json_t *v = json_object_get(m, keys[k]);
            if (!v || json_is_null(v)) continue;
            if (!json_is_string(v)) wk_errors_add(errs, field, "type:string", "%s.%s must be a string", field, keys[k]);
            else json_object_set(msg, keys[k], v);
        }
    }
    if (errs->n > 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

void llm_request_set_prompt(llm_gen_request *req, const rb_tokenizer *tok, const char *text, size_t len,
                            unsigned encode_flags, const rb_text_range *plain, size_t n_plain, int64_t ctx_size,
                            int64_t default_max_tokens, wk_errors *errs) {
    rb_error err;
    rb_error_clear(&err);
    int32_t *ids = NULL;
    size_t n = 0;
    if (rb_tokenizer_encode_plain(tok, text, len, encode_flags, plain, n_plain, &ids, &n, &err) != RB_OK) {
        free(ids);
        wk_errors_add(errs, "prompt", "tokenize", "the prompt cannot be tokenized: %s", err.msg);
        return;
    }
    if (n == 0) {
        free(ids);
        wk_errors_add(errs, "prompt", "non_empty", "the prompt has no tokens");
        return;
    }
    if ((int64_t)n >= ctx_size) {
        free(ids);
        wk_errors_add(errs, "prompt", "context",
                       "the prompt has %zu tokens but the context holds %lld (prompt + at least 1 generated token)", n,
                       (long long)ctx_size);
        return;
    }
    const int64_t room = ctx_size - (int64_t)n;
    if (req->max_tokens == 0) req->max_tokens = default_max_tokens > 0 && default_max_tokens < room ? default_max_tokens : room;
    if (req->max_tokens > room) {
        char c[64];
        const char *field = req->max_tokens_field ? req->max_tokens_field : "max_tokens";
        snprintf(c, sizeof c, "range:1..%lld", (long long)room);
        wk_errors_add(errs, field, c, "%s is %lld but the prompt (%zu tokens) leaves room for %lld in the context of %lld",
                      field, (long long)req->max_tokens, n, (long long)room, (long long)ctx_size);
        free(ids);
        return;
    }
    req->prompt = ids;
    req->n_prompt = n;
}
