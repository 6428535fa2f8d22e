/* The SD3 pipeline's T5 prompt encoding (diffusers' _get_t5_prompt_embeds):
 * tokenizer_3 + text_encoder_3 as one object; each prompt padded/truncated
 * to max_sequence_length ids ("</s>" kept last, pad id 0), then one encoder
 * call over the batch. A model without a tokenizer (random weights) encodes
 * every prompt as the empty prompt. */
#include "rbee/sd_t5.h"
#include "sd/sd_arena.h"

#include <stdlib.h>
#include <string.h>

#define T5_EOS_ID 1 /* "</s>" in T5's SentencePiece vocabulary (pad is 0) */

rb_status rb_t5_text_load(const char *enc_dir, const char *tok_dir, rb_backend *be, const rb_sd_load_opts *opts,
                          rb_t5_text *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "t5 text: out is NULL");
    memset(out, 0, sizeof *out);
    if (!enc_dir || !tok_dir || !be) return rb_error_set(err, RB_E_INVALID, "t5 text: NULL argument");
    SD_TRY(rb_unigram_load_dir(tok_dir, &out->tok, err));
    rb_status s = rb_t5_load(enc_dir, be, opts, &out->enc, err);
    if (s == RB_OK && rb_unigram_n_vocab(out->tok) > rb_t5_get_config(out->enc)->vocab_size)
        s = rb_error_set(err, RB_E_FORMAT, "t5 text: tokenizer has %d pieces, encoder vocabulary %lld",
                         (int)rb_unigram_n_vocab(out->tok), (long long)rb_t5_get_config(out->enc)->vocab_size);
    if (s != RB_OK) rb_t5_text_free(out);
    return s;
}

void rb_t5_text_free(rb_t5_text *t) {
    if (!t) return;
    rb_t5_free(t->enc);
    rb_unigram_free(t->tok);
    memset(t, 0, sizeof *t);
}

rb_status rb_t5_text_encode(rb_t5_text *t, const char *const *prompts, int64_t B, int64_t max_len, rb_tensor *out,
                            int32_t *ids_out, rb_error *err) {
    if (!t || !t->enc || !prompts || !out) return rb_error_set(err, RB_E_INVALID, "t5 text: NULL argument");
    if (B < 1 || B > 4096 || max_len < 1 || max_len > 8192)
        return rb_error_set(err, RB_E_INVALID, "t5 text: %lld prompts of %lld tokens", (long long)B, (long long)max_len);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * max_len));
    if (!ids) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = RB_OK;
    for (int64_t b = 0; b < B && s == RB_OK; b++) {
        const char *p = prompts[b] ? prompts[b] : "";
        if (t->tok) {
            s = rb_unigram_encode_padded(t->tok, p, strlen(p), ids + b * max_len, (size_t)max_len, NULL, err);
        } else { /* no tokenizer (random-weight benchmark models): the empty prompt, "</s>" then padding */
            memset(ids + b * max_len, 0, sizeof(int32_t) * (size_t)max_len);
            ids[b * max_len] = T5_EOS_ID;
        }
    }
    if (s == RB_OK) s = rb_t5_encode(t->enc, ids, max_len, B, out, err);
    if (s == RB_OK && ids_out) memcpy(ids_out, ids, sizeof(int32_t) * (size_t)(B * max_len));
    free(ids);
    return s;
}
