/* AUTOMATIC1111's long-prompt rows: the prompt (its emphasis segments, each
 * tokenized on its own) is laid into rows of 75 tokens; a full row whose last
 * comma is at most comma_backtrack tokens from its end moves the tokens after
 * that comma into the next row; BREAK closes a row; each row is padded with
 * EOS to 75, wrapped as BOS + 75 + EOS, and, where the pad id differs from
 * EOS, everything after the row's first EOS becomes the pad id. */
#include "tokenizer/clip_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const rb_clip_tokenizer *t;
    rb_clip_chunks *out;
    size_t cap;
    int32_t cur_ids[RB_CLIP_CHUNK_TOKENS];
    float cur_w[RB_CLIP_CHUNK_TOKENS];
    size_t cur_n;
    long last_comma;
} chunker;

/* Closes the current row (A1111's next_chunk). */
static rb_status next_chunk(chunker *c, bool is_last) {
    rb_clip_chunks *o = c->out;
    if (o->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 4;
        void *a = realloc(o->ids, nc * sizeof *o->ids);
        if (!a) return RB_E_NOMEM;
        o->ids = a;
        void *b = realloc(o->weights, nc * sizeof *o->weights);
        if (!b) return RB_E_NOMEM;
        o->weights = b;
        c->cap = nc;
    }
    o->token_count += is_last ? c->cur_n : RB_CLIP_CHUNK_TOKENS;
    int32_t *ids = o->ids[o->n];
    float *w = o->weights[o->n];
    int32_t eos = c->t->sp_id[CLIP_SP_EOS], pad = c->t->sp_id[CLIP_SP_PAD];
    ids[0] = c->t->sp_id[CLIP_SP_BOS];
    w[0] = 1.0f;
    for (size_t i = 0; i < RB_CLIP_CHUNK_TOKENS; i++) {
        ids[1 + i] = i < c->cur_n ? c->cur_ids[i] : eos;
        w[1 + i] = i < c->cur_n ? c->cur_w[i] : 1.0f;
    }
    ids[RB_CLIP_CONTEXT - 1] = eos;
    w[RB_CLIP_CONTEXT - 1] = 1.0f;
    if (pad != eos) { /* A1111's process_tokens: pad after the first EOS of the row */
        size_t k = 0;
        while (ids[k] != eos) k++;
        for (k++; k < RB_CLIP_CONTEXT; k++) ids[k] = pad;
    }
    o->n++;
    c->cur_n = 0;
    c->last_comma = -1;
    return RB_OK;
}

static rb_status add_tokens(chunker *c, const int32_t *tok, size_t n, float weight, int backtrack, int32_t comma) {
    for (size_t p = 0; p < n; p++) {
        rb_status st = RB_OK;
        long len = (long)c->cur_n;
        if (tok[p] == comma) {
            c->last_comma = len;
        } else if (backtrack != 0 && len == RB_CLIP_CHUNK_TOKENS && c->last_comma != -1 &&
                   len - c->last_comma <= backtrack) {
            size_t brk = (size_t)c->last_comma + 1, nrel = c->cur_n - brk;
            int32_t rel_ids[RB_CLIP_CHUNK_TOKENS];
            float rel_w[RB_CLIP_CHUNK_TOKENS];
            memcpy(rel_ids, c->cur_ids + brk, nrel * sizeof *rel_ids);
            memcpy(rel_w, c->cur_w + brk, nrel * sizeof *rel_w);
            c->cur_n = brk;
            st = next_chunk(c, false);
            if (st) return st;
            memcpy(c->cur_ids, rel_ids, nrel * sizeof *rel_ids);
            memcpy(c->cur_w, rel_w, nrel * sizeof *rel_w);
            c->cur_n = nrel;
        }
        if (c->cur_n == RB_CLIP_CHUNK_TOKENS && (st = next_chunk(c, false))) return st;
        c->cur_ids[c->cur_n] = tok[p];
        c->cur_w[c->cur_n++] = weight;
    }
    return RB_OK;
}

void rb_clip_chunk_opts_default(rb_clip_chunk_opts *o) {
    if (!o) return;
    o->comma_backtrack = 20;
    o->emphasis = true;
    o->flags = 0;
}

void rb_clip_chunks_free(rb_clip_chunks *c) {
    if (!c) return;
    free(c->ids);
    free(c->weights);
    memset(c, 0, sizeof *c);
}

rb_status rb_clip_chunk_prompt(const rb_clip_tokenizer *t, const char *text, size_t len,
                               const rb_clip_chunk_opts *opts, rb_clip_chunks *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    if (!t) return rb_error_set(err, RB_E_INVALID, "tokenizer is NULL");
    rb_clip_chunk_opts def;
    rb_clip_chunk_opts_default(&def);
    if (!opts) opts = &def;
    if (opts->comma_backtrack < 0 || opts->comma_backtrack > RB_CLIP_CHUNK_TOKENS)
        return rb_error_set(err, RB_E_RANGE, "comma_backtrack %d outside [0, %d]", opts->comma_backtrack,
                            RB_CLIP_CHUNK_TOKENS);
    rb_clip_segment *segs = NULL, whole;
    size_t n_segs = 0;
    rb_status st = RB_OK;
    if (opts->emphasis) {
        st = rb_clip_parse_emphasis(text, len, &segs, &n_segs, err);
        if (st) return st;
    } else {
        whole = (rb_clip_segment){(char *)(text ? text : ""), len, 1.0};
        n_segs = 1;
    }
    chunker c = {.t = t, .out = out, .last_comma = -1};
    int32_t comma = rb_clip_token_id(t, ",</w>", 5);
    for (size_t i = 0; i < n_segs && !st; i++) {
        const rb_clip_segment *s = segs ? &segs[i] : &whole;
        if (s->len == 5 && memcmp(s->text, "BREAK", 5) == 0 && s->weight == -1.0) {
            st = next_chunk(&c, false);
            if (st) st = rb_error_set(err, st, "out of memory");
            continue;
        }
        int32_t *tok = NULL;
        size_t n = 0;
        st = rb_clip_tokenize(t, s->text, s->len, opts->flags, &tok, &n, err);
        if (!st) {
            st = add_tokens(&c, tok, n, (float)s->weight, opts->comma_backtrack, comma < 0 ? INT32_MIN : comma);
            if (st) st = rb_error_set(err, st, "out of memory");
        }
        free(tok);
    }
    if (!st && (c.cur_n || out->n == 0)) {
        st = next_chunk(&c, true);
        if (st) st = rb_error_set(err, st, "out of memory");
    }
    rb_clip_segments_free(segs, n_segs);
    if (st) rb_clip_chunks_free(out);
    return st;
}
