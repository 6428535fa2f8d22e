/* SD3's prompt conditioning, as StableDiffusion3Pipeline.encode_prompt
 * builds it: each CLIP encoder (CLIP-L, CLIP-G) takes its prompt
 * truncated to 77 tokens; their penultimate hidden states (clip skip k:
 * hidden state -(k + 2); the negative prompt always the penultimate) are
 * concatenated on the feature axis and zero-padded to the transformer's
 * joint_attention_dim; the T5 part follows on the token axis
 * (max_sequence_length tokens of T5's last hidden states for the same
 * prompt and negative prompt; zeros when the model has no T5 encoder);
 * the pooled conditioning is [CLIP-L text_embeds | CLIP-G text_embeds]. An
 * absent negative prompt is the empty prompt. Rows: [uncond, cond] with
 * guidance, [cond] without. Prompts are truncated in either prompt mode
 * (A1111's chunks and emphasis are not applied to SD3). */
#include "sd/sd_pipeline_internal.h"

#include <stdlib.h>
#include <string.h>

#define T77 RB_CLIP_CONTEXT
#define SD3_DEFAULT_T5_TOKENS 256

static const char *text_of(const rb_sd_params *p, int enc, bool negative) {
    if (!negative) return enc == 1 && p->prompt_2 ? p->prompt_2 : p->prompt;
    const char *n = enc == 1 && p->negative_prompt_2 ? p->negative_prompt_2 : p->negative_prompt;
    return n ? n : "";
}

rb_status sd_encode_cond_sd3(rb_sd_model *m, const rb_sd_params *p, const sd_run_plan *plan, rb_sd_cond *out,
                             rb_error *err) {
    const int rows = plan->cfg ? 2 : 1;
    const int64_t J = m->mmdit_cfg.joint_attention_dim, PD = m->mmdit_cfg.pooled_projection_dim;
    const int64_t t5 = p->max_sequence_length > 0 ? p->max_sequence_length : SD3_DEFAULT_T5_TOKENS;
    const int64_t tokens = T77 + t5;
    out->rows = rows;
    out->tokens = tokens;
    out->dim = J;
    out->pooled_dim = PD;
    out->context = calloc((size_t)rows * (size_t)tokens * (size_t)J, sizeof(float));
    out->pooled = calloc((size_t)rows * (size_t)PD, sizeof(float));
    if (!out->context || !out->pooled) {
        rb_sd_cond_free(out);
        return rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
    }
    rb_status s = RB_OK;
    int64_t c0 = 0, p0 = 0;
    for (int e = 0; e < 2 && s == RB_OK; e++) {
        const int64_t D = m->enc[e].cfg.hidden_size, P = m->enc[e].cfg.projection_dim;
        float *h = malloc(sizeof(float) * (size_t)(T77 * D)), *pool = malloc(sizeof(float) * (size_t)P);
        if (!h || !pool) s = rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
        for (int r = 0; r < rows && s == RB_OK; r++) {
            const bool negative = rows == 2 && r == 0;
            const char *text = text_of(p, e, negative);
            int32_t ids[T77];
            s = rb_clip_encode(m->enc[e].tok, text, strlen(text), 0, ids, NULL, err);
            if (s == RB_OK) s = sd_run_text_encoder(m, e, ids, 1, negative ? 0 : p->clip_skip, h, pool, err);
            if (s != RB_OK) break;
            for (int64_t t = 0; t < T77; t++)
                memcpy(out->context + ((size_t)r * (size_t)tokens + (size_t)t) * (size_t)J + (size_t)c0,
                       h + (size_t)t * (size_t)D, sizeof(float) * (size_t)D);
            memcpy(out->pooled + (size_t)r * (size_t)PD + (size_t)p0, pool, sizeof(float) * (size_t)P);
        }
        free(h);
        free(pool);
        c0 += D;
        p0 += P;
    }
    /* the T5 rows [77, tokens): its last hidden states, or zeros without T5 */
    if (s == RB_OK && m->t5.enc) {
        const int64_t dm = rb_t5_get_config(m->t5.enc)->d_model;
        const char *prompts[2];
        for (int r = 0; r < rows; r++) prompts[r] = text_of(p, 0, rows == 2 && r == 0);
        rb_tensor t;
        const int64_t ne[3] = {dm, t5, rows};
        s = rb_tensor_alloc(m->be, RB_F32, 3, ne, &t);
        if (s != RB_OK) rb_error_set(err, s, "cannot allocate the T5 output");
        else {
            float *h = malloc(sizeof(float) * (size_t)(dm * t5 * rows));
            if (!h) s = rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
            if (s == RB_OK) s = rb_t5_text_encode(&m->t5, prompts, rows, t5, &t, NULL, err);
            if (s == RB_OK && (s = rb_tensor_get(&t, h, sizeof(float) * (size_t)(dm * t5 * rows))) != RB_OK)
                rb_error_set(err, s, "cannot read the T5 output");
            for (int r = 0; s == RB_OK && r < rows; r++)
                for (int64_t k = 0; k < t5; k++)
                    memcpy(out->context + ((size_t)r * (size_t)tokens + (size_t)(T77 + k)) * (size_t)J,
                           h + ((size_t)r * (size_t)t5 + (size_t)k) * (size_t)dm, sizeof(float) * (size_t)dm);
            free(h);
            rb_tensor_free(&t);
        }
    }
    if (s != RB_OK) rb_sd_cond_free(out);
    return s;
}
