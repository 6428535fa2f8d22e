/* Prompt conditioning as diffusers' encode_prompt computes it, or with
 * AUTOMATIC1111's long-prompt chunks and emphasis (see rb_sd_prompt_mode):
 * the token rows of each text encoder, the encoder's chosen hidden state
 * (SD 1.x / 2.x: last_hidden_state, or final_layer_norm of hidden state
 * -(clip_skip + 1); SDXL: hidden state -(clip_skip + 2) of each encoder,
 * side by side on the channel axis), SDXL's pooled text embeddings (the
 * last encoder's projection) and the [uncond, cond] rows of classifier-free
 * guidance (zeros for SDXL's uncond row when there is no negative prompt
 * and the model forces zeros). */
#include "sd/sd_pipeline_internal.h"

#include <stdlib.h>
#include <string.h>

#define T77 RB_CLIP_CONTEXT

static bool is_xl(const rb_sd_model *m) { return m->arch == RB_SD_ARCH_SDXL || m->arch == RB_SD_ARCH_SDXL_REFINER; }

/* diffusers: encoder 2 takes prompt_2 / negative_prompt_2 when given; the
 * refiner's only encoder is the first of the list, so it takes prompt. */
static const char *slot_text(const rb_sd_params *p, int slot, bool negative) {
    if (!negative) return slot == 1 && p->prompt_2 ? p->prompt_2 : p->prompt;
    const char *n = slot == 1 && p->negative_prompt_2 ? p->negative_prompt_2 : p->negative_prompt;
    return n ? n : "";
}

/* Encodes B rows of 77 ids with text encoder slot: hidden (B x 77 x D) and,
 * when pooled is non-NULL, the projected pooled output (B x P). */
rb_status sd_run_text_encoder(rb_sd_model *m, int slot, const int32_t *ids, int64_t B, int clip_skip, float *hidden,
                              float *pooled, rb_error *err) {
    const sd_text_slot *t = &m->enc[slot];
    const int64_t D = t->cfg.hidden_size, P = t->cfg.projection_dim;
    rb_tensor h, pt;
    memset(&pt, 0, sizeof pt);
    const int64_t hne[3] = {D, T77, B}, pne[2] = {P, B};
    rb_status s = rb_tensor_alloc(m->be, RB_F32, 3, hne, &h);
    if (s != RB_OK) return rb_error_set(err, s, "text encoder %d: cannot allocate its output", slot + 1);
    if (pooled && (s = rb_tensor_alloc(m->be, RB_F32, 2, pne, &pt)) != RB_OK) {
        rb_tensor_free(&h);
        return rb_error_set(err, s, "text encoder %d: cannot allocate its pooled output", slot + 1);
    }
    rb_clip_text_outputs o;
    memset(&o, 0, sizeof o);
    if (is_xl(m) || m->arch == RB_SD_ARCH_SD3) { /* the penultimate layer (clip skip counted past it) */
        o.hidden = &h;
        o.hidden_index = -(clip_skip + 2);
    } else if (clip_skip == 0) {
        o.last_hidden = &h;
    } else {
        o.hidden = &h;
        o.hidden_index = -(clip_skip + 1);
        o.hidden_final_norm = true;
    }
    o.text_embeds = pooled ? &pt : NULL;
    s = rb_clip_text_encode(t->enc, ids, T77, B, &o, err);
    if (s == RB_OK && (s = rb_tensor_get(&h, hidden, sizeof(float) * (size_t)(D * T77 * B))) != RB_OK)
        rb_error_set(err, s, "text encoder %d: cannot read its output", slot + 1);
    if (s == RB_OK && pooled && (s = rb_tensor_get(&pt, pooled, sizeof(float) * (size_t)(P * B))) != RB_OK)
        rb_error_set(err, s, "text encoder %d: cannot read its pooled output", slot + 1);
    rb_tensor_free(&h);
    if (pooled) rb_tensor_free(&pt);
    return s;
}

/* Copies rows x 77 x D (one encoder's hidden states) into the context
 * (rows x tokens x dim) at token offset tok0 and channel offset c0. */
static void place(float *ctx, int64_t tokens, int64_t dim, const float *h, int64_t D, int64_t row, int64_t tok0,
                  int64_t c0) {
    for (int64_t t = 0; t < T77; t++)
        memcpy(ctx + ((size_t)row * (size_t)tokens + (size_t)(tok0 + t)) * (size_t)dim + (size_t)c0, h + (size_t)t * (size_t)D,
               sizeof(float) * (size_t)D);
}

/* A1111's "Original" emphasis on one chunk z (77 x D): scale each token by
 * its weight, then restore the chunk's mean. */
static void emphasis(float *z, int64_t D, const float *w) {
    bool all_one = true;
    for (int t = 0; t < T77; t++) all_one &= w[t] == 1.0f;
    if (all_one) return;
    const size_t n = (size_t)T77 * (size_t)D;
    double m0 = 0.0, m1 = 0.0;
    for (size_t i = 0; i < n; i++) m0 += z[i];
    m0 /= (double)n;
    for (int t = 0; t < T77; t++)
        for (int64_t d = 0; d < D; d++) z[(size_t)t * (size_t)D + (size_t)d] *= w[t];
    for (size_t i = 0; i < n; i++) m1 += z[i];
    m1 /= (double)n;
    if (m1 == 0.0) return;
    const float r = (float)(m0 / m1);
    for (size_t i = 0; i < n; i++) z[i] *= r;
}

static rb_status alloc_cond(rb_sd_cond *out, int rows, int64_t tokens, int64_t dim, int64_t pdim, rb_error *err) {
    out->rows = rows;
    out->tokens = tokens;
    out->dim = dim;
    out->pooled_dim = pdim;
    out->context = calloc((size_t)rows * (size_t)tokens * (size_t)dim, sizeof(float));
    out->pooled = pdim ? calloc((size_t)rows * (size_t)pdim, sizeof(float)) : NULL;
    if (!out->context || (pdim && !out->pooled)) return rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
    return RB_OK;
}

static rb_status encode_truncated(rb_sd_model *m, const rb_sd_params *p, int rows, rb_sd_cond *out, rb_error *err) {
    rb_status s = RB_OK;
    int32_t ids[2][T77];
    int64_t c0 = 0;
    for (int e = 0; e < m->n_enc && s == RB_OK; e++) {
        const int64_t D = m->enc[e].cfg.hidden_size;
        for (int r = 0; r < rows && s == RB_OK; r++) {
            const char *text = slot_text(p, e, rows == 2 && r == 0);
            s = rb_clip_encode(m->enc[e].tok, text, strlen(text), 0, ids[r], NULL, err);
        }
        if (s != RB_OK) break;
        float *h = malloc(sizeof(float) * (size_t)(rows * T77 * D));
        if (!h) return rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
        const bool pool = out->pooled && e == m->n_enc - 1;
        s = sd_run_text_encoder(m, e, &ids[0][0], rows, p->clip_skip, h, pool ? out->pooled : NULL, err);
        if (s == RB_OK)
            for (int r = 0; r < rows; r++) place(out->context, T77, out->dim, h + (size_t)r * T77 * (size_t)D, D, r, 0, c0);
        free(h);
        c0 += D;
    }
    return s;
}

/* A1111 chunks of every (encoder, row) and the common chunk count. */
typedef struct chunk_set {
    rb_clip_chunks c[SD_MAX_ENC][2];
    rb_clip_chunks empty[SD_MAX_ENC];
    size_t n;
} chunk_set;

static void chunk_set_free(chunk_set *cs) {
    for (int e = 0; e < SD_MAX_ENC; e++) {
        rb_clip_chunks_free(&cs->c[e][0]);
        rb_clip_chunks_free(&cs->c[e][1]);
        rb_clip_chunks_free(&cs->empty[e]);
    }
}

static rb_status encode_chunked(rb_sd_model *m, const rb_sd_params *p, int rows, rb_sd_cond *out, rb_error *err) {
    chunk_set cs;
    memset(&cs, 0, sizeof cs);
    rb_status s = RB_OK;
    cs.n = 1;
    for (int e = 0; e < m->n_enc && s == RB_OK; e++) {
        rb_clip_chunk_opts co;
        rb_clip_chunk_opts_default(&co);
        co.emphasis = p->emphasis;
        co.flags = m->enc[e].open_clip ? RB_CLIP_PAD_AS_TEXT : 0;
        for (int r = 0; r < rows && s == RB_OK; r++) {
            const char *text = slot_text(p, e, rows == 2 && r == 0);
            s = rb_clip_chunk_prompt(m->enc[e].tok, text, strlen(text), &co, &cs.c[e][r], err);
            if (s == RB_OK && cs.c[e][r].n > cs.n) cs.n = cs.c[e][r].n;
        }
        if (s == RB_OK) s = rb_clip_chunk_prompt(m->enc[e].tok, "", 0, &co, &cs.empty[e], err);
    }
    if (s == RB_OK && cs.n > 64) s = rb_error_set(err, RB_E_RANGE, "the prompt needs %zu chunks of 75 tokens (64 at most)", cs.n);
    if (s == RB_OK) s = alloc_cond(out, rows, (int64_t)cs.n * T77, out->dim, out->pooled_dim, err);
    const int64_t B = rows * (int64_t)cs.n;
    int32_t *ids = s == RB_OK ? malloc(sizeof(int32_t) * (size_t)(B * T77)) : NULL;
    if (s == RB_OK && !ids) s = rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
    int64_t c0 = 0;
    for (int e = 0; e < m->n_enc && s == RB_OK; e++) {
        const int64_t D = m->enc[e].cfg.hidden_size;
        for (int r = 0; r < rows; r++)
            for (size_t c = 0; c < cs.n; c++) {
                const rb_clip_chunks *ch = c < cs.c[e][r].n ? &cs.c[e][r] : &cs.empty[e];
                memcpy(ids + ((size_t)r * cs.n + c) * T77, ch->ids[c < cs.c[e][r].n ? c : 0], sizeof(int32_t) * T77);
            }
        const bool pool = out->pooled && e == m->n_enc - 1;
        float *h = malloc(sizeof(float) * (size_t)(B * T77 * D));
        float *pl = pool ? malloc(sizeof(float) * (size_t)(B * out->pooled_dim)) : NULL;
        if (!h || (pool && !pl)) {
            free(h);
            free(pl);
            s = rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
            break;
        }
        s = sd_run_text_encoder(m, e, ids, B, p->clip_skip, h, pl, err);
        for (int r = 0; r < rows && s == RB_OK; r++) {
            for (size_t c = 0; c < cs.n; c++) {
                float *z = h + ((size_t)r * cs.n + c) * T77 * (size_t)D;
                if (c < cs.c[e][r].n) emphasis(z, D, cs.c[e][r].weights[c]);
                place(out->context, out->tokens, out->dim, z, D, r, (int64_t)c * T77, c0);
            }
            if (pool) /* the first chunk's pooled output */
                memcpy(out->pooled + (size_t)r * (size_t)out->pooled_dim, pl + (size_t)r * cs.n * (size_t)out->pooled_dim,
                       sizeof(float) * (size_t)out->pooled_dim);
        }
        free(h);
        free(pl);
        c0 += D;
    }
    free(ids);
    chunk_set_free(&cs);
    return s;
}

static rb_status copy_cond(const rb_sd_model *m, const rb_sd_params *p, const sd_run_plan *plan, rb_sd_cond *out,
                           rb_error *err);

rb_status sd_encode_cond(rb_sd_model *m, const rb_sd_params *p, const sd_run_plan *plan, rb_sd_cond *out,
                         rb_error *err) {
    memset(out, 0, sizeof *out);
    if (p->cond) return copy_cond(m, p, plan, out, err);
    if (m->arch == RB_SD_ARCH_SD3) return sd_encode_cond_sd3(m, p, plan, out, err);
    const int rows = plan->cfg ? 2 : 1;
    int64_t dim = 0;
    for (int e = 0; e < m->n_enc; e++) dim += m->enc[e].cfg.hidden_size;
    const int64_t pdim = is_xl(m) ? m->enc[m->n_enc - 1].cfg.projection_dim : 0;
    rb_status s;
    if (p->prompt_mode == RB_SD_PROMPT_A1111) {
        out->dim = dim;
        out->pooled_dim = pdim;
        s = encode_chunked(m, p, rows, out, err);
    } else {
        s = alloc_cond(out, rows, T77, dim, pdim, err);
        if (s == RB_OK) s = encode_truncated(m, p, rows, out, err);
    }
    if (s != RB_OK) {
        rb_sd_cond_free(out);
        return s;
    }
    if (rows == 2 && !p->negative_prompt && m->force_zeros) {
        memset(out->context, 0, sizeof(float) * (size_t)(out->tokens * out->dim));
        if (out->pooled) memset(out->pooled, 0, sizeof(float) * (size_t)out->pooled_dim);
    }
    out->n_time_ids = plan->n_time_ids;
    for (int r = 0; r < rows; r++)
        memcpy(out->time_ids[r], plan->time_ids[rows == 2 ? r : 1], sizeof out->time_ids[r]);
    return RB_OK;
}

/* The caller's conditioning (p->cond), checked against the model and copied. */
static rb_status copy_cond(const rb_sd_model *m, const rb_sd_params *p, const sd_run_plan *plan, rb_sd_cond *out,
                           rb_error *err) {
    const rb_sd_cond *c = p->cond;
    const int rows = plan->cfg ? 2 : 1;
    int64_t dim = 0, pdim = 0;
    if (m->arch == RB_SD_ARCH_SD3) {
        dim = m->mmdit_cfg.joint_attention_dim;
        pdim = m->mmdit_cfg.pooled_projection_dim;
    } else {
        for (int e = 0; e < m->n_enc; e++) dim += m->enc[e].cfg.hidden_size;
        pdim = is_xl(m) ? m->enc[m->n_enc - 1].cfg.projection_dim : 0;
    }
    if (c->rows != rows || c->dim != dim || c->pooled_dim != pdim || c->tokens < 1 || c->tokens > 4096 || !c->context ||
        (pdim && !c->pooled))
        return rb_error_set(err, RB_E_INVALID, "the given conditioning is %d rows x %lld tokens x %lld (pooled %lld); "
                            "the model takes %d rows x tokens x %lld (pooled %lld)", c->rows, (long long)c->tokens,
                            (long long)c->dim, (long long)c->pooled_dim, rows, (long long)dim, (long long)pdim);
    const size_t n = (size_t)rows * (size_t)c->tokens * (size_t)dim;
    out->rows = rows;
    out->tokens = c->tokens;
    out->dim = dim;
    out->pooled_dim = pdim;
    out->context = malloc(sizeof(float) * n);
    out->pooled = pdim ? malloc(sizeof(float) * (size_t)(rows * pdim)) : NULL;
    if (!out->context || (pdim && !out->pooled)) {
        rb_sd_cond_free(out);
        return rb_error_set(err, RB_E_NOMEM, "out of memory for the prompt");
    }
    memcpy(out->context, c->context, sizeof(float) * n);
    if (pdim) memcpy(out->pooled, c->pooled, sizeof(float) * (size_t)(rows * pdim));
    out->n_time_ids = plan->n_time_ids;
    for (int r = 0; r < rows; r++)
        memcpy(out->time_ids[r], plan->time_ids[rows == 2 ? r : 1], sizeof out->time_ids[r]);
    return RB_OK;
}

rb_status rb_sd_encode_prompt(rb_sd_model *m, const rb_sd_params *p, rb_sd_cond *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd: out is NULL");
    memset(out, 0, sizeof *out);
    sd_run_plan plan;
    rb_status s = sd_plan(m, p, false, &plan, err);
    if (s != RB_OK) return s;
    return sd_encode_cond(m, p, &plan, out, err);
}

void rb_sd_cond_free(rb_sd_cond *c) {
    if (!c) return;
    free(c->context);
    free(c->pooled);
    memset(c, 0, sizeof *c);
}
