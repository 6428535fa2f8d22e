/* Implementation of include/rbee/generate.h: prefill, then a decode loop of
 * forward -> sample -> stream-decode -> stop checks. */
#include "rbee/generate.h"
#include "runtime/stop_matcher.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *rb_stop_reason_name(rb_stop_reason r) {
    switch (r) {
    case RB_STOP_MAX_TOKENS: return "MAX_TOKENS";
    case RB_STOP_EOS: return "EOS";
    case RB_STOP_STRING: return "STOP_SEQUENCE";
    case RB_STOP_CANCELLED: return "CANCELLED";
    default: return "NONE";
    }
}

rb_gen_params rb_gen_default_params(void) {
    rb_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampling = rb_sampler_default_params();
    p.max_tokens = 128;
    return p;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool is_eos(const rb_model_config *c, const rb_tokenizer *tok, int32_t t) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == t) return true;
    return tok && rb_tokenizer_eos(tok) == t;
}

typedef struct gen_state {
    rb_stop_matcher sm;
    rb_gen_text_cb cb;
    void *user;
    bool stopped_by_string;
    bool cancelled;
} gen_state;

/* Feeds decoded text through the stop matcher and emits what is safe. */
static rb_status emit(gen_state *g, const char *text, size_t len, int32_t token) {
    size_t n = 0;
    bool hit = false;
    rb_status s = rb_stop_matcher_push(&g->sm, text, len, &n, &hit);
    if (s != RB_OK) return s;
    if (g->cb && (n > 0 || token >= 0) && !g->cb(g->user, g->sm.pending, n, token)) g->cancelled = true;
    rb_stop_matcher_consume(&g->sm, n);
    if (hit) g->stopped_by_string = true;
    return RB_OK;
}

rb_status rb_generate(rb_model *m, const rb_tokenizer *tok, rb_kv_cache *kv, const int32_t *prompt,
                      size_t n_prompt, const rb_gen_params *gp, rb_gen_text_cb cb, void *user, rb_gen_result *res,
                      rb_error *err) {
    if (!m || !kv || !gp || !res || (!prompt && n_prompt)) return rb_error_set(err, RB_E_INVALID, "rb_generate: bad arguments");
    memset(res, 0, sizeof *res);
    if (n_prompt == 0) return rb_error_set(err, RB_E_INVALID, "the prompt is empty");
    if (gp->max_tokens < 1) return rb_error_set(err, RB_E_RANGE, "max_tokens must be at least 1");
    if (gp->n_stop < 0 || gp->n_stop > RB_GEN_MAX_STOP)
        return rb_error_set(err, RB_E_RANGE, "at most %d stop strings", RB_GEN_MAX_STOP);
    for (int i = 0; i < gp->n_stop; i++)
        if (!gp->stop[i] || !gp->stop[i][0]) return rb_error_set(err, RB_E_INVALID, "stop strings must not be empty");
    const int64_t room = rb_kv_cache_size(kv) - rb_kv_cache_used(kv);
    if ((int64_t)n_prompt >= room)
        return rb_error_set(err, RB_E_RANGE,
                            "the prompt has %zu tokens but the context has room for %lld (prompt plus at least one "
                            "generated token must fit)",
                            n_prompt, (long long)room - 1);
    const rb_model_config *c = rb_model_get_config(m);
    const int64_t V = c->n_vocab;
    rb_status s;
    if (gp->grammar && !tok) return rb_error_set(err, RB_E_INVALID, "rb_generate: a grammar needs a tokenizer");
    rb_sampler *smp = NULL;
    rb_grammar_vocab *gv = NULL;
    rb_grammar_matcher *gm = NULL;
    if ((s = rb_sampler_create(&gp->sampling, V, &smp, err)) != RB_OK) return s;
    rb_tokenizer_stream *ts = NULL;
    if (tok && (s = rb_tokenizer_stream_create(tok, RB_TOK_SKIP_SPECIAL, &ts, err)) != RB_OK) {
        rb_sampler_free(smp);
        return s;
    }
    rb_backend *be = rb_model_backend(m);
    float *logits = rb_backend_host_alloc(be, sizeof(float) * (size_t)V); /* read back every step */
    size_t hist_cap = n_prompt + (size_t)(gp->max_tokens < room ? gp->max_tokens : room) + 1;
    int32_t *hist = malloc(sizeof(int32_t) * hist_cap);
    gen_state g;
    rb_stop_matcher_init(&g.sm, gp->stop, gp->n_stop);
    g.cb = cb;
    g.user = user;
    g.stopped_by_string = false;
    g.cancelled = false;
    if (!logits || !hist) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto out;
    }
    memcpy(hist, prompt, sizeof(int32_t) * n_prompt);
    size_t n_hist = n_prompt;
    res->n_prompt = (int64_t)n_prompt;

    if (gp->grammar) {
        int32_t eog[sizeof c->eos_ids / sizeof c->eos_ids[0] + 1];
        size_t n_eog = 0;
        for (int i = 0; i < c->n_eos && i < (int)(sizeof c->eos_ids / sizeof c->eos_ids[0]); i++)
            if (c->eos_ids[i] >= 0 && c->eos_ids[i] < rb_tokenizer_n_vocab(tok)) eog[n_eog++] = c->eos_ids[i];
        if (rb_tokenizer_eos(tok) >= 0) eog[n_eog++] = rb_tokenizer_eos(tok);
        if ((s = rb_grammar_vocab_create(tok, eog, n_eog, &gv, err)) != RB_OK ||
            (s = rb_grammar_matcher_create(gp->grammar, gv, &gm, err)) != RB_OK)
            goto out;
    }
    double t0 = now_ms();
    if ((s = rb_model_forward(m, kv, prompt, (int64_t)n_prompt, false, logits, err)) != RB_OK) goto out;
    res->prefill_ms = now_ms() - t0;

    t0 = now_ms();
    rb_stop_reason why = RB_STOP_MAX_TOKENS;
    /* models whose embedding table is padded past the tokenizer's ids (e.g.
     * Qwen2) must never produce an id the tokenizer cannot decode */
    const int64_t n_tok = tok ? rb_tokenizer_n_vocab(tok) : V;
    for (int64_t i = 0;; i++) {
        for (int64_t v = n_tok; v < V; v++) logits[v] = -INFINITY;
        if (gm && (s = rb_grammar_matcher_mask_logits(gm, logits, (size_t)V, err)) != RB_OK) goto out;
        int32_t t = rb_sampler_sample(smp, logits, hist, n_hist);
        hist[n_hist++] = t;
        res->n_generated++;
        if (gm && (s = rb_grammar_matcher_accept_token(gm, t, err)) != RB_OK) goto out;
        if ((!gp->ignore_eos || gm) && is_eos(c, tok, t)) {
            why = RB_STOP_EOS;
            break;
        }
        if (ts) {
            const char *piece = NULL;
            size_t plen = 0;
            if ((s = rb_tokenizer_stream_push(ts, t, &piece, &plen, err)) != RB_OK) goto out;
            if ((s = emit(&g, piece, plen, t)) != RB_OK) {
                rb_error_set(err, s, "out of memory");
                goto out;
            }
        } else if (cb && !cb(user, "", 0, t)) {
            g.cancelled = true;
        }
        if (g.stopped_by_string) { why = RB_STOP_STRING; break; }
        if (g.cancelled) { why = RB_STOP_CANCELLED; break; }
        if (gm && rb_grammar_matcher_is_finished(gm)) { why = RB_STOP_EOS; break; }
        if (res->n_generated >= gp->max_tokens || rb_kv_cache_used(kv) >= rb_kv_cache_size(kv)) break;
        if ((s = rb_model_forward(m, kv, &t, 1, false, logits, err)) != RB_OK) goto out;
    }
    res->decode_ms = now_ms() - t0;
    if (ts && why != RB_STOP_STRING && why != RB_STOP_CANCELLED) {
        const char *piece = NULL;
        size_t plen = 0;
        if ((s = rb_tokenizer_stream_flush(ts, &piece, &plen, err)) != RB_OK) goto out;
        if ((s = emit(&g, piece, plen, -1)) != RB_OK) goto out;
        if (g.stopped_by_string) why = RB_STOP_STRING;
        else if (g.sm.len > 0 && cb) { /* held-back text that never became a stop string */
            cb(user, g.sm.pending, g.sm.len, -1);
            rb_stop_matcher_consume(&g.sm, g.sm.len);
        }
    }
    res->stop_reason = why;
    s = RB_OK;
out:
    rb_grammar_matcher_free(gm);
    rb_grammar_vocab_free(gv);
    rb_stop_matcher_free(&g.sm);
    rb_tokenizer_stream_free(ts);
    rb_sampler_free(smp);
    rb_backend_host_free(be, logits);
    free(hist);
    return s;
}
