/* A Unigram tokenizer from GGUF metadata in llama.cpp's layout for T5
 * ("ugm" tokenizers: tokenizer.ggml.model "t5"): tokenizer.ggml.tokens,
 * .scores, .token_type, .precompiled_charsmap (uint8 array),
 * .add_space_prefix, .remove_extra_whitespaces and the unknown / eos /
 * padding ids. Encoding then follows sentencepiece, as llama.cpp's does. */
#include "rbee/gguf.h"
#include "tokenizer/unigram_internal.h"

#include <string.h>

#define BAD(...) rb_error_set(err, RB_E_FORMAT, "gguf tokenizer: " __VA_ARGS__)

static int64_t opt_id(const rb_gguf *g, const char *key, int64_t def) {
    int64_t v;
    return rb_gguf_get_i64(g, key, &v) == RB_OK ? v : def;
}

rb_status rb_unigram_from_gguf(const rb_gguf *g, rb_unigram **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unigram: out is NULL");
    *out = NULL;
    if (!g) return rb_error_set(err, RB_E_INVALID, "unigram: NULL file");
    const rb_gguf_kv *model = rb_gguf_find_kv(g, "tokenizer.ggml.model");
    if (!model || model->type != RB_GGUF_STRING) return BAD("tokenizer.ggml.model missing");
    rb_gguf_str ms;
    memcpy(&ms, model->data, sizeof ms);
    if (!(ms.len == 2 && !memcmp(ms.ptr, "t5", 2)))
        return rb_error_set(err, RB_E_UNSUPPORTED, "gguf tokenizer: model '%.*s' is not t5 (unigram)",
                            (int)(ms.len > 64 ? 64 : ms.len), ms.ptr);
    const rb_gguf_kv *tok = rb_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const rb_gguf_kv *sc = rb_gguf_find_kv(g, "tokenizer.ggml.scores");
    const rb_gguf_kv *ty = rb_gguf_find_kv(g, "tokenizer.ggml.token_type");
    const rb_gguf_kv *cm = rb_gguf_find_kv(g, "tokenizer.ggml.precompiled_charsmap");
    if (!tok || tok->type != RB_GGUF_ARRAY || tok->arr_type != RB_GGUF_STRING) return BAD("tokens missing");
    const uint64_t n = tok->arr_len;
    if (n == 0 || n > (1u << 24)) return BAD("%llu tokens", (unsigned long long)n);
    if (!sc || sc->type != RB_GGUF_ARRAY || sc->arr_len != n || (sc->arr_type != RB_GGUF_FLOAT32 && sc->arr_type != RB_GGUF_FLOAT64))
        return BAD("scores missing or not %llu numbers", (unsigned long long)n);
    if (ty && (ty->type != RB_GGUF_ARRAY || ty->arr_len != n || ty->arr_type == RB_GGUF_STRING ||
               ty->arr_type == RB_GGUF_ARRAY || ty->arr_type == RB_GGUF_FLOAT32 || ty->arr_type == RB_GGUF_FLOAT64))
        return BAD("token_type is not %llu integers", (unsigned long long)n);
    if (cm && (cm->type != RB_GGUF_ARRAY || (cm->arr_type != RB_GGUF_UINT8 && cm->arr_type != RB_GGUF_INT8)))
        return BAD("precompiled_charsmap is not a byte array");
    rb_unigram *t;
    rb_status st = ug_new((int32_t)n, &t, err);
    if (st != RB_OK) return st;
    t->spm = true;
    for (uint64_t i = 0; i < n && st == RB_OK; i++) {
        const rb_gguf_str s = rb_gguf_arr_str(tok, i);
        if (s.len == 0) st = BAD("token %llu is empty", (unsigned long long)i);
        else if (tok_vocab_set(&t->v, (int32_t)i, s.ptr, (size_t)s.len) != RB_OK)
            st = rb_error_set(err, RB_E_NOMEM, "out of memory");
        t->v.scores[i] = (float)rb_gguf_arr_float(sc, i);
        const int64_t k = ty ? rb_gguf_arr_int(ty, i) : TOK_TYPE_NORMAL;
        if (k < TOK_TYPE_NORMAL || k > TOK_TYPE_BYTE) st = BAD("token %llu has type %lld", (unsigned long long)i, (long long)k);
        t->v.types[i] = (int32_t)k;
    }
    if (st == RB_OK && cm && cm->arr_len) {
        st = ug_charsmap_parse(cm->data, (size_t)cm->arr_len, &t->cm, err);
        t->has_cm = st == RB_OK;
    }
    bool b;
    if (rb_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == RB_OK) t->add_dummy_prefix = b;
    if (rb_gguf_get_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &b) == RB_OK) t->remove_extra_ws = b;
    const int64_t unk = opt_id(g, "tokenizer.ggml.unknown_token_id", 2), eos = opt_id(g, "tokenizer.ggml.eos_token_id", 1);
    const int64_t pad = opt_id(g, "tokenizer.ggml.padding_token_id", 0);
    if (st == RB_OK && (unk < 0 || unk >= (int64_t)n || eos >= (int64_t)n || pad >= (int64_t)n))
        st = BAD("unknown/eos/padding id outside the %llu tokens", (unsigned long long)n);
    if (st != RB_OK) {
        rb_unigram_free(t);
        return st;
    }
    t->unk_id = (int32_t)unk;
    t->eos_id = eos >= 0 ? (int32_t)eos : -1;
    t->pad_id = pad >= 0 ? (int32_t)pad : 0;
    ug_finish(t);
    *out = t;
    return RB_OK;
}
