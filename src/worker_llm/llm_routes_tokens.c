/* llama-server's tokenizer routes on the loaded model's tokenizer.
 * POST /tokenize {content, add_special (default false), parse_special
 * (default true), with_pieces (default false)} -> {tokens: [ids]} or
 * {tokens: [{id, piece}]}, piece a string when the token's bytes are
 * complete UTF-8, else the array of its bytes. add_special is Hugging
 * Face's add_special_tokens (the post-processor's BOS/EOS); parse_special
 * matches special-token text such as <|eot_id|> as those tokens (false:
 * ordinary text). POST /detokenize {tokens: [ids]} -> {content}, special
 * tokens written as their text. */
#include "worker/wk_util.h"
#include "worker_llm/llm_worker.h"

#include <stdlib.h>
#include <string.h>

static bool read_bool(json_t *body, const char *key, bool dflt, wk_errors *errs) {
    bool v = dflt;
    wk_get_bool(body, key, &v, errs);
    return v;
}

static json_t *piece_json(const rb_tokenizer *tok, int32_t id) {
    char *p = NULL;
    size_t len = 0;
    if (rb_tokenizer_token_piece(tok, id, &p, &len, NULL) != RB_OK) return NULL;
    json_t *v;
    if (wk_utf8_valid(p, len, NULL)) {
        v = json_stringn(p, len);
    } else {
        v = json_array();
        for (size_t i = 0; v && i < len; i++) json_array_append_new(v, json_integer((unsigned char)p[i]));
    }
    free(p);
    return v;
}

static bool route_tokenize(wk_req *r, void *ctx) {
    llm_worker *lw = ctx;
    if (wk_worker_state(lw->w) != WK_STATE_READY) return wk_reply_not_ready(r, lw->w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *bt = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(bt, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    json_t *content = json_object_get(body, "content");
    if (!json_is_string(content)) wk_errors_add(&errs, "content", "type:string", "content must be a string");
    const bool add = read_bool(body, "add_special", false, &errs);
    const bool parse = read_bool(body, "parse_special", true, &errs);
    const bool pieces = read_bool(body, "with_pieces", false, &errs);
    if (errs.n > 0) {
        json_decref(body);
        return wk_reply_invalid(r, &errs);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rb_error err;
    rb_error_clear(&err);
    const unsigned flags = (add ? (unsigned)RB_TOK_ADD_SPECIAL : 0u) | (parse ? (unsigned)RB_TOK_PARSE_SPECIAL : 0u);
    rb_status s = rb_tokenizer_encode(lw->tok, json_string_value(content), json_string_length(content), flags, &ids, &n,
                                      &err);
    json_decref(body);
    if (s != RB_OK) {
        free(ids);
        wk_errors_add(&errs, "content", "tokenize", "content cannot be tokenized: %s", err.msg);
        return wk_reply_invalid(r, &errs);
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *v = pieces ? json_pack("{s:i,s:o}", "id", (int)ids[i], "piece", piece_json(lw->tok, ids[i]))
                           : json_integer(ids[i]);
        if (!v || json_array_append_new(arr, v) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    free(ids);
    return wk_reply_json(r, arr ? 200 : 500, arr ? json_pack("{s:o}", "tokens", arr) : NULL);
}

static bool route_detokenize(wk_req *r, void *ctx) {
    llm_worker *lw = ctx;
    if (wk_worker_state(lw->w) != WK_STATE_READY) return wk_reply_not_ready(r, lw->w);
    wk_errors errs = {.n = 0};
    size_t blen = 0;
    const char *bt = wk_req_body(r, &blen);
    json_t *body = wk_parse_body(bt, blen, &errs);
    if (!body) return wk_reply_invalid(r, &errs);
    json_t *a = json_object_get(body, "tokens");
    const size_t n = json_array_size(a);
    const int32_t V = rb_tokenizer_n_vocab(lw->tok);
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!json_is_array(a)) wk_errors_add(&errs, "tokens", "type:array", "tokens must be an array of token ids");
    for (size_t i = 0; ids && i < n && errs.n == 0; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V)
            wk_errors_add(&errs, "tokens", "token_id", "tokens[%zu] must be a token id from 0 to %d", i, (int)V - 1);
        else ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(body);
    if (!ids || errs.n > 0) {
        free(ids);
        if (errs.n == 0) return wk_reply_json(r, 500, NULL);
        return wk_reply_invalid(r, &errs);
    }
    char *text = NULL;
    size_t len = 0;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_tokenizer_decode(lw->tok, ids, n, 0, &text, &len, &err);
    free(ids);
    if (s != RB_OK) {
        free(text);
        wk_errors_add(&errs, "tokens", "decode", "the tokens cannot be decoded: %s", err.msg);
        return wk_reply_invalid(r, &errs);
    }
    json_t *o = json_pack("{s:o}", "content", wk_json_text(text, len));
    free(text);
    return wk_reply_json(r, 200, o);
}

rb_status llm_routes_tokens_add(llm_worker *lw, rb_error *err) {
    wk_router *rt = &lw->w->router;
    rb_status s;
    if ((s = wk_router_add(rt, "POST", "/tokenize", route_tokenize, lw, NULL, WK_ROUTE_OPENAI, err)) != RB_OK ||
        (s = wk_router_add(rt, "POST", "/detokenize", route_detokenize, lw, NULL, WK_ROUTE_OPENAI, err)) != RB_OK)
        return s;
    return RB_OK;
}
