/* Implementation of llm_embed.h. */
#include "worker_llm/llm_embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends one input's tokens; false (error recorded) on a bad input. */
static bool add_tokens(llm_embed_request *r, size_t *cap, const int32_t *ids, size_t n, size_t idx, int64_t ctx_size,
                       wk_errors *errs) {
    if (n == 0) {
        wk_errors_add(errs, "input", "non_empty", "input[%zu] is empty", idx);
        return false;
    }
    if ((int64_t)n > ctx_size) {
        wk_errors_add(errs, "input", "context", "input[%zu] has %zu tokens; the context holds %lld", idx, n,
                      (long long)ctx_size);
        return false;
    }
    const size_t have = r->offs[r->n_inputs];
    if (have + n > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < have + n) nc *= 2;
        int32_t *nt = realloc(r->tokens, sizeof(int32_t) * nc);
        if (!nt) {
            wk_errors_add(errs, "input", "memory", "out of memory");
            return false;
        }
        r->tokens = nt;
        *cap = nc;
    }
    memcpy(r->tokens + have, ids, sizeof(int32_t) * n);
    r->offs[++r->n_inputs] = have + n;
    return true;
}

static void add_text(const llm_embed_ctx *c, llm_embed_request *r, size_t *cap, json_t *s, size_t idx,
                     wk_errors *errs) {
    if (json_string_length(s) == 0) {
        wk_errors_add(errs, "input", "non_empty", "input[%zu] is an empty string", idx);
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rb_error err;
    rb_error_clear(&err);
    if (rb_tokenizer_encode(c->tok, json_string_value(s), json_string_length(s), RB_TOK_ADD_SPECIAL, &ids, &n, &err) !=
        RB_OK)
        wk_errors_add(errs, "input", "tokenize", "input[%zu] cannot be tokenized: %s", idx, err.msg);
    else
        add_tokens(r, cap, ids, n, idx, c->ctx_size, errs);
    free(ids);
}

/* An array of token ids. */
static void add_id_array(const llm_embed_ctx *c, llm_embed_request *r, size_t *cap, json_t *a, size_t idx,
                         wk_errors *errs) {
    const size_t n = json_array_size(a);
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ids) {
        wk_errors_add(errs, "input", "memory", "out of memory");
        return;
    }
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(a, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->n_vocab) {
            wk_errors_add(errs, "input", "token_id", "input[%zu][%zu] must be a token id from 0 to %lld", idx, k,
                          (long long)c->n_vocab - 1);
            free(ids);
            return;
        }
        ids[k] = (int32_t)json_integer_value(v);
    }
    add_tokens(r, cap, ids, n, idx, c->ctx_size, errs);
    free(ids);
}

void llm_embed_read(const llm_embed_ctx *c, json_t *body, llm_embed_request *req, const char **model, wk_errors *errs) {
    memset(req, 0, sizeof *req);
    *model = NULL;
    req->pooling = c->pooling;
    json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in)) {
        wk_errors_add(errs, "input", "required", "input is required");
    } else if (!json_is_string(in) && !json_is_array(in)) {
        wk_errors_add(errs, "input", "type", "input must be a string, an array of strings or token id arrays");
    } else {
        /* one input (a string, or one array of ids) or an array of them */
        const bool ids_one = json_is_array(in) && json_array_size(in) > 0 && json_is_integer(json_array_get(in, 0));
        const size_t n = json_is_string(in) || ids_one ? 1 : json_array_size(in);
        if (n == 0) wk_errors_add(errs, "input", "non_empty", "input is an empty array");
        else if (n > LLM_MAX_EMBED_INPUTS)
            wk_errors_add(errs, "input", "max_items:2048", "input may hold at most %d texts, got %zu",
                          LLM_MAX_EMBED_INPUTS, n);
        else if (!(req->offs = calloc(n + 1, sizeof *req->offs)))
            wk_errors_add(errs, "input", "memory", "out of memory");
        size_t cap = 0;
        for (size_t i = 0; req->offs && i < n && errs->n == 0; i++) {
            json_t *v = json_is_string(in) || ids_one ? in : json_array_get(in, i);
            if (json_is_string(v)) add_text(c, req, &cap, v, i, errs);
            else if (json_is_array(v)) add_id_array(c, req, &cap, v, i, errs);
            else wk_errors_add(errs, "input", "type", "input[%zu] must be a string or an array of token ids", i);
        }
    }
    json_t *f = json_object_get(body, "encoding_format");
    if (f && !json_is_null(f)) {
        if (json_is_string(f) && !strcmp(json_string_value(f), "base64")) req->base64 = true;
        else if (!json_is_string(f) || strcmp(json_string_value(f), "float") != 0)
            wk_errors_add(errs, "encoding_format", "value:float|base64", "encoding_format must be \"float\" or \"base64\"");
    }
    json_t *d = json_object_get(body, "dimensions");
    if (d && !json_is_null(d) && !(json_is_integer(d) && json_integer_value(d) == c->n_embd)) {
        char k[48];
        snprintf(k, sizeof k, "value:%lld", (long long)c->n_embd);
        wk_errors_add(errs, "dimensions", k, "this model's embeddings have %lld dimensions; they cannot be shortened",
                      (long long)c->n_embd);
    }
    json_t *m = json_object_get(body, "model");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) wk_errors_add(errs, "model", "type:string", "model must be a string");
        else *model = json_string_value(m);
    }
}
