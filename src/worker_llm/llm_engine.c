/* Implementation of llm_engine.h: the scheduler loop. Per step: admit
 * queued jobs into free slots (prefill, KV copies for further choices, the
 * first tokens; embedding jobs whole), drop cancelled sequences, then
 * decode one token for every active sequence in one batched forward pass.
 * A sequence samples from its logits row in place unless the raw values
 * are still needed (log probabilities, a prefill row shared by choices):
 * then it samples from a copy. A request with a grammar (structured output)
 * masks the tokens its grammar cannot take next out of that row before the
 * sampler's transforms, and ends when the grammar allows nothing more.
 * With cache_prompt, a slot remembers the tokens its cache holds (the
 * sequence's history up to the cache's used count while busy, that history
 * kept when it is freed); a job takes the free slot holding the most of its
 * prompt (llm_prefix.c), keeps those positions or copies a longer prefix
 * from another slot, and prefills only the rest. On a backend whose
 * products are row-exact under batch invariance (the CPU's), a row's value
 * still depends on whether its product had more than RB_BATCH_INVARIANT_ROWS
 * rows (a prefill) or not (a decode step, a short prefill): there only the
 * positions a long prefill computed are reused, and at least that many
 * prompt tokens run again, so a cached prefix gives a cold run's bits.
 *
 * Chunked prefill (prefill_chunk > 0): an admitted job's slots are
 * "prefilling" until its prompt has run; each step runs, in one
 * rb_model_forward_seqs pass, the decode token of every other active slot and
 * up to prefill_chunk prompt tokens taken from the prefilling jobs' first
 * slots in the order they were admitted (a prompt may span several steps,
 * and several short ones may share a step). When a job's last prompt token
 * has run, its row of that pass is its first token's logits, used as a whole
 * prefill's are. Between pieces a slot's cache holds the prompt up to its
 * used count (what slot_view claims), and a cancelled job leaves there. On a
 * batch-invariant backend a prompt's pieces do not depend on the load (each
 * the next prefill_chunk tokens, whole in one step). Under the exactness
 * above, a prompt of more than RB_BATCH_INVARIANT_ROWS tokens
 * to run goes in pieces of more than that many, so that each of its rows
 * takes a whole prefill's arithmetic (prefill_piece); there
 * rb_model_forward_seqs would run the sequences one at a time, so the
 * decode tokens run as a batched step (the same bits, the weights read once
 * for them) and the pieces after it. */
#include "worker_llm/llm_engine.h"
#include "runtime/stop_matcher.h"
#include "worker/wk_job_queue.h"
#include "worker/wk_util.h"
#include "worker_llm/llm_job.h"
#include "worker_llm/llm_logprobs.h"
#include "worker_llm/llm_prefix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct llm_seq {
    wk_job *job; /* NULL: free slot */
    int choice;  /* which of the job's choices this slot makes */
    rb_kv_cache *kv;
    rb_sampler *smp;
    rb_tokenizer_stream *ts;
    rb_stop_matcher sm;
    rb_grammar_matcher *gm; /* structured output (NULL: free text) */
    int32_t *hist;
    size_t n_hist, cap_hist;
    int32_t last;    /* token to feed at the next step */
    int64_t n_gen;   /* tokens sampled */
    int64_t n_text;  /* tokens sampled that were not end-of-sequence */
    double prefill_ms, t_decode0;
    double t_last_token; /* monotonic ms of the last sampled token (0: none yet) */
    /* what the cache holds while no history says it (slot_view): the
     * history of the slot's last sequence, kept when it was released */
    int32_t *held;
    size_t n_held;
    size_t n_exact;     /* exact engines: leading positions a prefill of more than RB_BATCH_INVARIANT_ROWS rows made */
    uint64_t last_used; /* engine clock at the last release */
    /* chunked prefill: the job's prompt has not all run yet (every slot of
     * the job); its first slot runs the pieces */
    bool prefill;
    uint64_t pf_order; /* first slot: admission order (first come, first served) */
    double pf_t0;      /* first slot: when the job started (its prefill time runs from there) */
} llm_seq;

struct llm_engine {
    rb_model *m;
    const rb_tokenizer *tok;
    llm_engine_opts o;
    wk_log *log;
    llm_metrics *metrics;
    int64_t n_vocab;

    pthread_t th;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wk_job_queue q;
    int n_active;    /* written by the thread under mu, read by stats */
    bool stop;
    bool accepting;

    llm_seq *slots;
    float *logits;
    float *scratch; /* n_vocab: a row sampled from while the raw one is kept */
    rb_grammar_vocab *gvocab; /* built at the first request with a grammar */
    rb_kv_cache **step_kvs;
    int32_t *step_tokens;  /* parallel + RB_MODEL_MAX_STEP_TOKENS: decode tokens, then prompt pieces */
    int64_t *step_counts;  /* tokens of each sequence of a step */
    int *step_slot;
    llm_prefix_view *views; /* one per slot, for the prefix choices */
    bool exact;             /* cached positions must give a cold run's bits (see the top) */
    bool invariant;         /* a batch-invariant backend: a prompt's pieces must not depend on the load */
    size_t chunk;           /* prompt tokens a step runs (prefill_chunk, as prefill_piece needs it) */
    size_t min_run;         /* prompt tokens that run at least when a prefix is reused */
    uint64_t clock;         /* counts releases (the slots' last_used) */
    uint64_t admitted;      /* counts chunked-prefill admissions (pf_order) */
};

static void finish_seq(llm_engine *e, llm_seq *q, rb_stop_reason why);

rb_status llm_engine_create(rb_model *m, const rb_tokenizer *tok, const llm_engine_opts *o, wk_log *log,
                            llm_metrics *metrics, llm_engine **out, rb_error *err) {
    if (!m || !tok || !o || !out || o->parallel < 1 || o->ctx_size < 2 || o->queue_depth < 0)
        return rb_error_set(err, RB_E_INVALID, "llm_engine_create: bad arguments");
    if (o->prefill_chunk < 0 || o->prefill_chunk > LLM_MAX_PREFILL_CHUNK ||
        (o->prefill_chunk > 0 && o->parallel > LLM_MAX_PREFILL_CHUNK))
        return rb_error_set(err, RB_E_INVALID, "prefill chunk %d: 0..%d tokens, and at most %d slots with chunks",
                            o->prefill_chunk, LLM_MAX_PREFILL_CHUNK, LLM_MAX_PREFILL_CHUNK);
    *out = NULL;
    llm_engine *e = calloc(1, sizeof *e);
    if (!e) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    e->m = m;
    e->tok = tok;
    e->o = *o;
    if (!e->o.step) e->o.step = llm_step_default();
    if (!e->o.seqs) e->o.seqs = llm_seqs_forward;
    e->log = log;
    e->metrics = metrics;
    e->n_vocab = rb_model_get_config(m)->n_vocab;
    e->accepting = true;
    const rb_backend *be = rb_model_backend(m);
    e->exact = rb_backend_batch_invariant(be) && rb_backend_row_exact_products(be);
    e->min_run = e->exact ? RB_BATCH_INVARIANT_ROWS + 1 : 1;
    e->invariant = rb_backend_batch_invariant(be);
    if (o->prefill_chunk > 0) {
        /* at least 17 under exactness; room left in a step of RB_MODEL_MAX_STEP_TOKENS after the decode
         * tokens of the other slots and prefill_piece's overshoot (>= 240: parallel <= 256) */
        const size_t over = e->exact ? RB_BATCH_INVARIANT_ROWS : 0;
        const size_t room = RB_MODEL_MAX_STEP_TOKENS - over - (size_t)(o->parallel - 1);
        e->chunk = (size_t)o->prefill_chunk;
        if (e->exact && e->chunk <= RB_BATCH_INVARIANT_ROWS) e->chunk = RB_BATCH_INVARIANT_ROWS + 1;
        if (e->chunk > room) e->chunk = room;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    const int P = o->parallel;
    const rb_status qs = wk_job_queue_init(&e->q, o->queue_depth + o->parallel + 1);
    e->slots = calloc((size_t)P, sizeof *e->slots);
    /* read back every step: page-locked on a GPU (rb_backend_host_alloc) */
    e->logits = rb_backend_host_alloc(rb_model_backend(m), sizeof(float) * (size_t)P * (size_t)e->n_vocab);
    e->step_kvs = calloc((size_t)P, sizeof *e->step_kvs);
    e->step_tokens = calloc((size_t)P + RB_MODEL_MAX_STEP_TOKENS, sizeof *e->step_tokens);
    e->step_counts = calloc((size_t)P, sizeof *e->step_counts);
    e->step_slot = calloc((size_t)P, sizeof *e->step_slot);
    e->scratch = malloc(sizeof(float) * (size_t)e->n_vocab);
    e->views = calloc((size_t)P, sizeof *e->views);
    if (qs != RB_OK || !e->slots || !e->logits || !e->step_kvs || !e->step_tokens || !e->step_counts ||
        !e->step_slot || !e->scratch || !e->views) {
        llm_engine_destroy(e);
        return rb_error_set(err, RB_E_NOMEM, "out of memory for %d sequence slots", P);
    }
    /* the slots' caches made together: a batched step attends to all of them in one op a layer */
    rb_kv_cache **kvs = calloc((size_t)P, sizeof *kvs);
    rb_status s = kvs ? rb_kv_cache_create_many(m, P, o->ctx_size, RB_F16, kvs, err)
                      : rb_error_set(err, RB_E_NOMEM, "out of memory");
    if (s != RB_OK) {
        free(kvs);
        rb_error_prefix(err, "KV caches of %d slots: ", P);
        llm_engine_destroy(e);
        return s;
    }
    for (int i = 0; i < P; i++) e->slots[i].kv = kvs[i];
    free(kvs);
    *out = e;
    return RB_OK;
}

static bool is_eos(llm_engine *e, int32_t t) {
    const rb_model_config *c = rb_model_get_config(e->m);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == t) return true;
    return rb_tokenizer_eos(e->tok) == t;
}

/* Emits text through the stop matcher; returns true if a stop string hit. */
static bool emit_text(llm_engine *e, llm_seq *q, const char *text, size_t len, bool *oom) {
    size_t n = 0;
    bool hit = false;
    if (rb_stop_matcher_push(&q->sm, text, len, &n, &hit) != RB_OK) {
        *oom = true;
        return false;
    }
    if (n > 0 && !llm_job_push_piece(q->job, q->choice, q->sm.pending, n)) *oom = true;
    rb_stop_matcher_consume(&q->sm, n);
    (void)e;
    return hit;
}

/* What q's cache holds: its history while it has one (positions 0 .. used
 * hold hist[0 .. used): the last sampled token is not fed yet), else what
 * its last sequence left; never more than the cache's used count. */
static llm_prefix_view slot_view(const llm_engine *e, const llm_seq *q) {
    llm_prefix_view v = {.tok = q->hist ? q->hist : q->held, .n = q->hist ? q->n_hist : q->n_held,
                         .last_used = q->last_used, .free = q->job == NULL};
    const size_t used = (size_t)rb_kv_cache_used(q->kv);
    if (v.n > used) v.n = used;
    if (e->exact && v.n > q->n_exact) v.n = q->n_exact;
    return v;
}

static const llm_prefix_view *slot_views(llm_engine *e) {
    for (int s = 0; s < e->o.parallel; s++) e->views[s] = slot_view(e, &e->slots[s]);
    return e->views;
}

/* Frees q's sequence state; its history becomes what the slot holds. */
static void release_seq(llm_engine *e, llm_seq *q) {
    rb_sampler_free(q->smp);
    rb_tokenizer_stream_free(q->ts);
    rb_stop_matcher_free(&q->sm);
    rb_grammar_matcher_free(q->gm);
    wk_job_unref(q->job);
    rb_kv_cache *kv = q->kv;
    int32_t *held = q->held;
    size_t n_held = q->n_held, n_exact = q->n_exact;
    if (q->hist) {
        free(held);
        held = q->hist;
        n_held = q->n_hist;
    }
    memset(q, 0, sizeof *q);
    q->kv = kv;
    q->held = held;
    q->n_held = n_held;
    q->n_exact = n_exact;
    q->last_used = ++e->clock;
}

/* Fails q's job, which frees every slot of it (all its choices). */
static void fail_seq(llm_engine *e, llm_seq *q, const char *code, const char *msg) {
    wk_job *j = q->job;
    wk_job_fail(j, code, msg);
    if (e->metrics) llm_metrics_job_outcome(e->metrics, 0, 1);
    wk_log_event(e->log, WK_LOG_ERROR, "job_failed", json_pack("{s:s}", "job_id", j->id), "%s: %s", code, msg);
    const bool forget = !strcmp(code, "INFERENCE_FAILED"); /* the caches' contents are unknown */
    for (int s = 0; s < e->o.parallel; s++) {
        if (e->slots[s].job != j) continue;
        if (forget) rb_kv_cache_truncate(e->slots[s].kv, 0);
        if (&e->slots[s] != q) release_seq(e, &e->slots[s]);
    }
    release_seq(e, q); /* last: it may hold the last reference */
}

/* The grammar vocabulary: the tokenizer's pieces, the end-of-sequence ids
 * as is_eos knows them. */
static rb_status grammar_vocab(llm_engine *e, rb_error *err) {
    if (e->gvocab) return RB_OK;
    const rb_model_config *c = rb_model_get_config(e->m);
    int32_t ids[64];
    size_t n = 0;
    for (int i = 0; i < c->n_eos && n < 63; i++)
        if (c->eos_ids[i] >= 0 && c->eos_ids[i] < rb_tokenizer_n_vocab(e->tok)) ids[n++] = c->eos_ids[i];
    if (rb_tokenizer_eos(e->tok) >= 0) ids[n++] = rb_tokenizer_eos(e->tok);
    return rb_grammar_vocab_create(e->tok, ids, n, &e->gvocab, err);
}

/* Samples q's next token from raw (a logits row). keep: raw must stay as it
 * is (shared by several choices); it also does when log probabilities are
 * wanted. Else the sampler works on raw in place (no copy). Returns -1 (the
 * sequence failed) when the grammar leaves no token. */
static int32_t sample_row(llm_engine *e, llm_seq *q, float *raw, bool keep) {
    const llm_task *task = llm_job_task(q->job);
    float *work = raw;
    if (keep || task->req.logprobs) {
        memcpy(e->scratch, raw, sizeof(float) * (size_t)e->n_vocab);
        work = e->scratch;
    }
    if (q->gm) {
        rb_error err;
        rb_error_clear(&err);
        if (rb_grammar_matcher_mask_logits(q->gm, work, (size_t)e->n_vocab, &err) != RB_OK) {
            fail_seq(e, q, "GRAMMAR_FAILED", err.msg);
            return -1;
        }
    }
    return rb_sampler_sample(q->smp, work, q->hist, q->n_hist);
}

/* Whether t is a special token the request's output keeps as text. */
static bool is_kept(const llm_gen_request *r, int32_t t) {
    for (int i = 0; i < r->n_keep; i++)
        if (r->keep_ids[i] == t) return true;
    return false;
}

/* Handles a sampled token; raw is the row it was sampled from, before any
 * change (for the log probabilities; NULL when not asked for). Returns true
 * if the sequence finished. */
static bool take_token(llm_engine *e, llm_seq *q, int32_t t, const float *raw) {
    const llm_task *task = llm_job_task(q->job);
    q->hist[q->n_hist++] = t;
    q->n_gen++;
    if (e->metrics) {
        double now = wk_now_ms();
        if (q->t_last_token == 0) llm_metrics_first_token(e->metrics, task->route_label, now - q->job->created_ms);
        else llm_metrics_token_gap(e->metrics, task->route_label, now - q->t_last_token);
        q->t_last_token = now;
    }
    if (q->gm) {
        rb_error err;
        rb_error_clear(&err);
        if (rb_grammar_matcher_accept_token(q->gm, t, &err) != RB_OK) {
            fail_seq(e, q, "GRAMMAR_FAILED", err.msg);
            return true;
        }
    }
    if ((!task->req.ignore_eos || q->gm) && is_eos(e, t)) {
        finish_seq(e, q, RB_STOP_EOS);
        return true;
    }
    q->n_text++;
    if (task->req.logprobs && raw &&
        !llm_job_push_logprobs(q->job, q->choice, llm_logprob_entry(e->tok, raw, e->n_vocab, t, task->req.top_logprobs))) {
        fail_seq(e, q, "OUT_OF_MEMORY", "out of memory for the log probabilities");
        return true;
    }
    const char *piece = NULL;
    size_t plen = 0;
    rb_error err;
    rb_error_clear(&err);
    bool oom = false, hit = false;
    if (is_kept(&task->req, t)) { /* a tool-call marker: the text so far, then its own text */
        size_t tl = 0;
        const char *tt = rb_tokenizer_token_text(e->tok, t, &tl);
        if (rb_tokenizer_stream_flush(q->ts, &piece, &plen, &err) != RB_OK) {
            fail_seq(e, q, "DECODE_FAILED", err.msg);
            return true;
        }
        hit = emit_text(e, q, piece, plen, &oom);
        if (!hit && !oom && tt) hit = emit_text(e, q, tt, tl, &oom);
    } else if (rb_tokenizer_stream_push(q->ts, t, &piece, &plen, &err) != RB_OK) {
        fail_seq(e, q, "DECODE_FAILED", err.msg);
        return true;
    } else {
        hit = emit_text(e, q, piece, plen, &oom);
    }
    if (oom) {
        fail_seq(e, q, "OUT_OF_MEMORY", "out of memory while streaming text");
        return true;
    }
    if (hit) {
        finish_seq(e, q, RB_STOP_STRING);
        return true;
    }
    if (q->gm && rb_grammar_matcher_is_finished(q->gm)) { /* only end of sequence may follow */
        finish_seq(e, q, RB_STOP_EOS);
        return true;
    }
    if (wk_job_cancel_requested(q->job)) {
        finish_seq(e, q, RB_STOP_CANCELLED);
        return true;
    }
    if (q->n_gen >= task->req.max_tokens || rb_kv_cache_used(q->kv) >= rb_kv_cache_size(q->kv)) {
        finish_seq(e, q, RB_STOP_MAX_TOKENS);
        return true;
    }
    q->last = t;
    return false;
}

static void finish_seq(llm_engine *e, llm_seq *q, rb_stop_reason why) {
    if (why == RB_STOP_MAX_TOKENS || why == RB_STOP_EOS) {
        const char *piece = NULL;
        size_t plen = 0;
        bool oom = false;
        if (rb_tokenizer_stream_flush(q->ts, &piece, &plen, NULL) == RB_OK && emit_text(e, q, piece, plen, &oom))
            why = RB_STOP_STRING;
        else if (q->sm.len > 0 && !oom) { /* held back, never became a stop string */
            if (!llm_job_push_piece(q->job, q->choice, q->sm.pending, q->sm.len)) oom = true;
            rb_stop_matcher_consume(&q->sm, q->sm.len);
        }
        if (oom) {
            fail_seq(e, q, "OUT_OF_MEMORY", "out of memory while streaming text");
            return;
        }
    }
    double dms = q->t_decode0 > 0 ? wk_now_ms() - q->t_decode0 : 0.0;
    wk_job *j = q->job;
    llm_task *task = llm_job_task(j);
    if (!llm_job_choice_end(j, q->choice, why, q->n_text) && why != RB_STOP_CANCELLED) {
        fail_seq(e, q, "OUT_OF_MEMORY", "out of memory while ending a choice");
        return;
    }
    if (e->metrics) llm_metrics_tokens_out(e->metrics, (uint64_t)q->n_text);
    /* the job's reason: cancelled if any choice was, else the first choice's */
    if (q->choice == 0 || why == RB_STOP_CANCELLED) {
        if (task->why_sum != RB_STOP_CANCELLED) task->why_sum = why;
    }
    task->tokens_sum += q->n_text;
    const double prefill_ms = q->prefill_ms;
    wk_job_ref(j); /* the slot's reference may be the last one */
    release_seq(e, q);
    if (--task->choices_left == 0) {
        llm_job_finish(j, task->why_sum, task->tokens_sum, prefill_ms, dms);
        if (e->metrics) llm_metrics_job_outcome(e->metrics, task->why_sum == RB_STOP_CANCELLED, 0);
        wk_log_event(e->log, WK_LOG_DEBUG, "job_end",
                     json_pack("{s:s,s:I,s:s}", "job_id", j->id, "tokens_out", (json_int_t)task->tokens_sum,
                               "stop_reason", rb_stop_reason_name(task->why_sum)),
                     "job finished");
    }
    wk_job_unref(j);
}

/* An embeddings job, whole: every input's hidden states from a fresh cache,
 * pooled (mean or last token) and scaled to unit length. */
static void run_embed(llm_engine *e, llm_seq *q) {
    wk_job *j = q->job;
    llm_task *task = llm_job_task(j);
    llm_embed_request *er = &task->emb;
    const int64_t E = rb_model_get_config(e->m)->n_embd;
    if (wk_job_cancel_requested(j)) {
        finish_seq(e, q, RB_STOP_CANCELLED);
        return;
    }
    size_t longest = 0;
    for (size_t i = 0; i < er->n_inputs; i++)
        if (er->offs[i + 1] - er->offs[i] > longest) longest = er->offs[i + 1] - er->offs[i];
    if ((int64_t)longest > rb_kv_cache_size(q->kv)) {
        fail_seq(e, q, "CONTEXT_OVERFLOW", "an input does not fit the context");
        return;
    }
    free(q->held); /* the inputs overwrite the cache: it holds nothing to reuse after them */
    q->held = NULL;
    q->n_held = 0;
    float *hidden = malloc(sizeof(float) * longest * (size_t)E);
    er->vectors = malloc(sizeof(float) * er->n_inputs * (size_t)E);
    if (!hidden || !er->vectors) {
        free(hidden);
        fail_seq(e, q, "OUT_OF_MEMORY", "out of memory for the embeddings");
        return;
    }
    er->n_embd = E;
    if (!wk_job_start(j, json_pack("{s:s,s:I}", "model", task->model_name, "prompt_tokens",
                                   (json_int_t)er->offs[er->n_inputs]))) {
        free(hidden);
        fail_seq(e, q, "OUT_OF_MEMORY", "out of memory starting the job");
        return;
    }
    const double t0 = wk_now_ms();
    rb_error err;
    rb_error_clear(&err);
    for (size_t i = 0; i < er->n_inputs; i++) {
        const size_t n = er->offs[i + 1] - er->offs[i];
        rb_kv_cache_truncate(q->kv, 0);
        if (rb_model_forward_hidden(e->m, q->kv, er->tokens + er->offs[i], (int64_t)n, hidden, &err) != RB_OK) {
            free(hidden);
            fail_seq(e, q, "INFERENCE_FAILED", err.msg);
            return;
        }
        float *v = er->vectors + i * (size_t)E;
        for (int64_t d = 0; d < E; d++) {
            double acc = 0;
            if (er->pooling == LLM_POOL_LAST) acc = hidden[(n - 1) * (size_t)E + (size_t)d];
            else {
                for (size_t t = 0; t < n; t++) acc += hidden[t * (size_t)E + (size_t)d];
                acc /= (double)n;
            }
            v[d] = (float)acc;
        }
        double norm = 0;
        for (int64_t d = 0; d < E; d++) norm += (double)v[d] * v[d];
        norm = sqrt(norm);
        for (int64_t d = 0; d < E; d++) v[d] = (float)(v[d] / (norm > 1e-12 ? norm : 1e-12));
        if (wk_job_cancel_requested(j)) break;
    }
    free(hidden);
    q->prefill_ms = wk_now_ms() - t0;
    if (e->metrics) llm_metrics_prefill(e->metrics, er->offs[er->n_inputs], 0, q->prefill_ms);
    finish_seq(e, q, wk_job_cancel_requested(j) ? RB_STOP_CANCELLED : RB_STOP_NONE);
}

/* The slot of job j that makes choice c (NULL: none, the job failed). */
static llm_seq *job_slot(llm_engine *e, const wk_job *j, int c) {
    for (int s = 0; s < e->o.parallel; s++)
        if (e->slots[s].job == j && e->slots[s].choice == c) return &e->slots[s];
    return NULL;
}

/* The end of the prefill of q0's job (q0: its first slot, whose cache now
 * holds the whole prompt; row: the logits of the prompt's last token): the
 * other choices' slots get copies of the cache, then every choice samples
 * its first token from row. */
static void prefill_done(llm_engine *e, llm_seq *q0, float *row) {
    wk_job *j = q0->job;
    const llm_task *task = llm_job_task(j);
    const llm_gen_request *r = &task->req;
    const int n = llm_gen_choices(r);
    rb_error err;
    rb_error_clear(&err);
    for (int c = 1; c < n; c++) {
        llm_seq *q = job_slot(e, j, c);
        if (!q) continue;
        if (rb_kv_cache_copy(q->kv, q0->kv, &err) != RB_OK) {
            fail_seq(e, q0, "INFERENCE_FAILED", err.msg);
            return;
        }
        q->n_exact = q0->n_exact;
    }
    const double t1 = wk_now_ms(), prefill_ms = t1 - q0->pf_t0;
    if (e->metrics) llm_metrics_prefill(e->metrics, r->n_prompt, (uint64_t)task->cached_tokens, prefill_ms);
    for (int c = 0; c < n; c++) {
        llm_seq *q = job_slot(e, j, c);
        if (!q) return; /* the job failed: every slot of it was freed */
        q->prefill = false;
        q->prefill_ms = prefill_ms;
        q->t_decode0 = t1;
        int32_t t = sample_row(e, q, row, n > 1);
        if (t >= 0) take_token(e, q, t, r->logprobs ? row : NULL);
    }
}

/* A newly admitted job in its n reserved slots: prefill once, copy the KV
 * cache to the other choices' slots, the first token of every choice. With
 * cache_prompt the first slot keeps the positions it shares with the prompt,
 * or takes a longer shared prefix from another slot (busy or free: the
 * engine's one thread runs steps, so a busy cache's first positions hold
 * still), and only the rest of the prompt runs. With chunked prefill the
 * rest runs in the next steps instead (its slots marked prefilling). */
static void start_job(llm_engine *e, wk_job *j, const int *slot_ids, int n) {
    llm_task *task = llm_job_task(j);
    const llm_gen_request *r = &task->req;
    task->choices_left = n;
    task->tokens_sum = 0;
    task->why_sum = RB_STOP_NONE;
    for (int i = 0; i < n; i++) { /* the queue's reference moves to the first slot */
        llm_seq *q = &e->slots[slot_ids[i]];
        q->job = i == 0 ? j : wk_job_ref(j);
        q->choice = i;
    }
    llm_seq *q0 = &e->slots[slot_ids[0]];
    if (task->api == LLM_API_EMBED) {
        run_embed(e, q0);
        return;
    }
    rb_error err;
    rb_error_clear(&err);
    for (int i = 0; i < n; i++) {
        llm_seq *q = &e->slots[slot_ids[i]];
        if (!e->o.cache_prompt) rb_kv_cache_truncate(q->kv, 0);
        rb_stop_matcher_init(&q->sm, (const char *const *)r->stop, r->n_stop);
    }
    if (wk_job_cancel_requested(j)) {
        for (int i = 0; i < n; i++) finish_seq(e, &e->slots[slot_ids[i]], RB_STOP_CANCELLED);
        return;
    }
    if (r->n_prompt == 0) {
        fail_seq(e, q0, "INVALID_PARAMS", "the prompt has no tokens");
        return;
    }
    if ((int64_t)r->n_prompt >= rb_kv_cache_size(q0->kv)) {
        fail_seq(e, q0, "CONTEXT_OVERFLOW", "the prompt does not fit the context");
        return;
    }
    for (int i = 0; i < n; i++) {
        llm_seq *q = &e->slots[slot_ids[i]];
        q->cap_hist = r->n_prompt + (size_t)r->max_tokens + 1;
        int32_t *hist = malloc(sizeof(int32_t) * q->cap_hist);
        if (!hist) {
            fail_seq(e, q, "OUT_OF_MEMORY", "out of memory for the token history");
            return;
        }
        /* from here on the history says what the cache holds: cut the cache to what they share */
        const llm_prefix_view v = slot_view(e, q);
        rb_kv_cache_truncate(q->kv, (int64_t)llm_prefix_keep(v.tok, v.n, r->prompt, r->n_prompt, e->min_run));
        q->hist = hist;
        memcpy(q->hist, r->prompt, sizeof(int32_t) * r->n_prompt);
        q->n_hist = r->n_prompt;
        rb_sampler_params sp = r->sampling;
        sp.seed += (uint64_t)i; /* choice i: the request's seed + i */
        if (rb_sampler_create(&sp, e->n_vocab, &q->smp, &err) != RB_OK ||
            rb_tokenizer_stream_create(e->tok, RB_TOK_SKIP_SPECIAL, &q->ts, &err) != RB_OK) {
            fail_seq(e, q, "INVALID_PARAMS", err.msg);
            return;
        }
        if (r->grammar && (grammar_vocab(e, &err) != RB_OK ||
                           rb_grammar_matcher_create(r->grammar, e->gvocab, &q->gm, &err) != RB_OK)) {
            fail_seq(e, q, "GRAMMAR_FAILED", err.msg);
            return;
        }
    }
    if (!wk_job_start(j, json_pack("{s:s,s:I}", "model", task->model_name, "prompt_tokens", (json_int_t)r->n_prompt))) {
        fail_seq(e, q0, "OUT_OF_MEMORY", "out of memory starting the job");
        return;
    }
    q0->pf_t0 = wk_now_ms();
    size_t cached = (size_t)rb_kv_cache_used(q0->kv), more = 0;
    const int donor = e->o.cache_prompt
                          ? llm_prefix_donor(slot_views(e), e->o.parallel, slot_ids[0], r->prompt, r->n_prompt,
                                             e->min_run, cached, &more)
                          : -1;
    if (donor >= 0) {
        if (rb_kv_cache_copy_prefix(q0->kv, e->slots[donor].kv, (int64_t)more, &err) != RB_OK) {
            fail_seq(e, q0, "INFERENCE_FAILED", err.msg);
            return;
        }
        cached = more;
        q0->n_exact = more;
    }
    task->cached_tokens = (int64_t)cached;
    if (e->o.prefill_chunk > 0) { /* the steps run the rest (schedule_prefill) */
        if (q0->n_exact > cached) q0->n_exact = cached;
        q0->pf_order = ++e->admitted;
        for (int i = 0; i < n; i++) e->slots[slot_ids[i]].prefill = true;
        return;
    }
    float *row = e->logits; /* rows are only in use during a step */
    if (rb_model_forward(e->m, q0->kv, r->prompt + cached, (int64_t)(r->n_prompt - cached), false, row, &err) !=
        RB_OK) {
        fail_seq(e, q0, "INFERENCE_FAILED", err.msg);
        return;
    }
    /* the rows this prefill made came from a product of as many rows as a cold prefill's, or not */
    q0->n_exact = r->n_prompt - cached > RB_BATCH_INVARIANT_ROWS ? r->n_prompt : cached;
    prefill_done(e, q0, row);
}

/* Prompt tokens a prefilling job runs this step out of the left ones,
 * budget being what the step's chunk has left. Without batch invariance, up
 * to budget. With it, the piece does not depend on what else runs (its
 * rows' bits may depend on the piece: a GPU's products): the next chunk of
 * the prompt, all of it in this step or (behind other pieces) none. Where
 * cached positions must give a cold run's bits and more than
 * RB_BATCH_INVARIANT_ROWS prompt tokens run in all (run), every piece is
 * longer than that, as a whole prefill's products are: the chunk is at
 * least RB_BATCH_INVARIANT_ROWS + 1 (e->chunk), and no shorter rest is left
 * (the last piece then takes up to RB_BATCH_INVARIANT_ROWS more than the
 * chunk, only as a step's first piece). */
static size_t prefill_piece(const llm_engine *e, size_t left, size_t run, size_t budget) {
    if (!e->invariant) return left < budget ? left : budget;
    size_t want = left < e->chunk ? left : e->chunk;
    const size_t least = RB_BATCH_INVARIANT_ROWS + 1;
    if (e->exact && run > RB_BATCH_INVARIANT_ROWS && left - want > 0 && left - want < least)
        want = left >= 2 * least ? left - least : left;
    return want <= budget || budget == e->chunk ? want : 0;
}

/* Appends to the step (after its n decode tokens) the pieces of prompts it
 * runs: the prefilling jobs' first slots in admission order, each the next
 * tokens of its prompt, e->chunk tokens in all (see prefill_piece). Returns
 * the sequences added. */
static int schedule_prefill(llm_engine *e, int n, size_t *n_tok) {
    size_t budget = e->chunk; /* the step has room for it, and for prefill_piece's overshoot (llm_engine_create) */
    int added = 0;
    uint64_t after = 0;
    while (budget > 0) {
        int s0 = -1;
        for (int s = 0; s < e->o.parallel; s++) {
            const llm_seq *p = &e->slots[s];
            if (p->job && p->prefill && p->choice == 0 && p->pf_order > after &&
                (s0 < 0 || p->pf_order < e->slots[s0].pf_order))
                s0 = s;
        }
        if (s0 < 0) break;
        llm_seq *q = &e->slots[s0];
        after = q->pf_order;
        const llm_task *task = llm_job_task(q->job);
        const size_t done = (size_t)rb_kv_cache_used(q->kv), left = task->req.n_prompt - done;
        const size_t k = prefill_piece(e, left, task->req.n_prompt - (size_t)task->cached_tokens, budget);
        if (k == 0) break; /* first come, first served: no later job goes first */
        e->step_kvs[n + added] = q->kv;
        e->step_counts[n + added] = (int64_t)k;
        e->step_slot[n + added] = s0;
        memcpy(e->step_tokens + *n_tok, task->req.prompt + done, sizeof(int32_t) * k);
        *n_tok += k;
        added++;
        budget = k < budget ? budget - k : 0;
    }
    return added;
}

/* After a step ran a piece of q's prompt (q: the job's first slot; row: the
 * logits of the piece's last token): what its cache holds exactly, and at
 * the prompt's end its first tokens. */
static void prefill_piece_done(llm_engine *e, llm_seq *q, float *row) {
    const llm_task *task = llm_job_task(q->job);
    const size_t used = (size_t)rb_kv_cache_used(q->kv);
    if (task->req.n_prompt - (size_t)task->cached_tokens > RB_BATCH_INVARIANT_ROWS) q->n_exact = used;
    if (used < task->req.n_prompt) return;
    prefill_done(e, q, row);
}

/* Slots a job takes: one per choice (an embeddings job: one). */
static int job_slots(const wk_job *j) {
    const llm_task *t = llm_job_task(j);
    return t->api == LLM_API_EMBED ? 1 : llm_gen_choices(&t->req);
}

/* A free slot for job j (there is one): with cache_prompt, for its first
 * slot the one whose cache holds the most of its prompt, else the least
 * recently used (its cache is the one least likely to be asked for again);
 * without, the first free one. */
static int take_slot(llm_engine *e, const wk_job *j, bool first) {
    if (e->o.cache_prompt) {
        const llm_task *t = llm_job_task(j);
        const bool gen = first && t->api != LLM_API_EMBED;
        return llm_prefix_pick(slot_views(e), e->o.parallel, gen ? t->req.prompt : NULL, gen ? t->req.n_prompt : 0,
                               e->min_run, NULL);
    }
    int s = 0;
    while (e->slots[s].job) s++;
    return s;
}

static void *engine_main(void *arg) {
    llm_engine *e = arg;
    const int P = e->o.parallel;
    wk_job **dropped = malloc(sizeof(wk_job *) * (size_t)e->q.cap);
    wk_job **admit = malloc(sizeof(wk_job *) * (size_t)P);
    int *admit_first = malloc(sizeof(int) * (size_t)(P + 1)); /* job i's slots: admit_slot[first[i] .. first[i+1]) */
    int *admit_slot = malloc(sizeof(int) * (size_t)P);
    if (!dropped || !admit || !admit_first || !admit_slot) {
        WK_ERROR(e->log, "engine_failed", "out of memory starting the inference thread");
        free(dropped);
        free(admit);
        free(admit_first);
        free(admit_slot);
        return NULL;
    }
    for (;;) {
        int n_admit = 0, n_taken = 0;
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->q.n == 0 && e->n_active == 0) pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        /* cancelled jobs leave the queue (all of them when stopping) */
        const int n_drop = wk_job_queue_take_cancelled(&e->q, stop, dropped, e->q.cap);
        int n_free = 0;
        for (int s = 0; s < P; s++) n_free += e->slots[s].job == NULL;
        /* first come, first served: the head waits until it has all its slots */
        while (e->q.n > 0 && !stop && job_slots(wk_job_queue_at(&e->q, 0)) <= n_free) {
            wk_job *j = wk_job_queue_pop(&e->q);
            const int need = job_slots(j);
            admit[n_admit] = j;
            admit_first[n_admit++] = n_taken;
            for (int got = 0; got < need; got++) {
                const int s = take_slot(e, j, got == 0);
                e->slots[s].job = j; /* reserve */
                admit_slot[n_taken++] = s;
            }
            n_free -= need;
            e->n_active += need;
        }
        admit_first[n_admit] = n_taken;
        pthread_mutex_unlock(&e->mu);

        for (int i = 0; i < n_drop; i++) {
            llm_job_finish(dropped[i], RB_STOP_CANCELLED, 0, 0, 0);
            if (e->metrics) llm_metrics_job_outcome(e->metrics, 1, 0);
            wk_job_unref(dropped[i]);
        }
        for (int i = 0; i < n_admit; i++)
            start_job(e, admit[i], admit_slot + admit_first[i], admit_first[i + 1] - admit_first[i]);
        /* Cancelled or stopping: leave now. */
        for (int s = 0; s < P; s++) {
            llm_seq *q = &e->slots[s];
            if (q->job && (stop || wk_job_cancel_requested(q->job))) finish_seq(e, q, RB_STOP_CANCELLED);
        }
        int n = 0;
        size_t n_tok = 0;
        for (int s = 0; s < P; s++) {
            llm_seq *q = &e->slots[s];
            if (!q->job || q->prefill) continue;
            e->step_kvs[n] = q->kv;
            e->step_tokens[n_tok++] = q->last;
            e->step_counts[n] = 1;
            e->step_slot[n++] = s;
        }
        const int n_dec = n;
        if (e->o.prefill_chunk > 0) n += schedule_prefill(e, n, &n_tok);
        if (n > 0) {
            /* the decode tokens' outcome and the pieces' (the same where one pass runs both) */
            rb_status st_dec = RB_OK, st_pf = RB_OK;
            rb_error err_dec, err_pf;
            rb_error_clear(&err_dec);
            rb_error_clear(&err_pf);
            const size_t V = (size_t)e->n_vocab;
            double t0 = wk_now_ms();
            if (n == n_dec) st_dec = e->o.step(e->m, e->step_kvs, e->step_tokens, n, e->logits, &err_dec);
            else if (!e->exact || n_dec == 0) {
                st_dec = st_pf = e->o.seqs(e->m, e->step_kvs, e->step_tokens, e->step_counts, n, e->logits, &err_pf);
                err_dec = err_pf;
            } else { /* one by one anyway: the decode tokens as a batched step, the pieces after */
                st_dec = e->o.step(e->m, e->step_kvs, e->step_tokens, n_dec, e->logits, &err_dec);
                st_pf = e->o.seqs(e->m, e->step_kvs + n_dec, e->step_tokens + n_dec, e->step_counts + n_dec,
                                  n - n_dec, e->logits + (size_t)n_dec * V, &err_pf);
            }
            double t1 = wk_now_ms();
            if (e->metrics && st_dec == RB_OK && n_dec > 0)
                llm_metrics_decode_step(e->metrics, (uint64_t)n_dec, t1 - t0, t1);
            for (int k = 0; k < n; k++) {
                llm_seq *q = &e->slots[e->step_slot[k]];
                if (!q->job) continue; /* freed with a failed sibling choice */
                if ((k < n_dec ? st_dec : st_pf) != RB_OK) {
                    fail_seq(e, q, "INFERENCE_FAILED", k < n_dec ? err_dec.msg : err_pf.msg);
                    continue;
                }
                float *row = e->logits + (size_t)k * V;
                if (q->prefill) {
                    prefill_piece_done(e, q, row);
                    continue;
                }
                const bool lp = llm_job_task(q->job)->req.logprobs;
                const int32_t t = sample_row(e, q, row, false);
                if (t >= 0) take_token(e, q, t, lp ? row : NULL);
            }
        }
        int active = 0;
        for (int s = 0; s < P; s++) active += e->slots[s].job != NULL;
        pthread_mutex_lock(&e->mu);
        e->n_active = active;
        bool done = e->stop && active == 0 && e->q.n == 0;
        pthread_mutex_unlock(&e->mu);
        if (done) break;
    }
    free(dropped);
    free(admit);
    free(admit_first);
    free(admit_slot);
    return NULL;
}

rb_status llm_engine_start(llm_engine *e, rb_error *err) {
    if (pthread_create(&e->th, NULL, engine_main, e) != 0)
        return rb_error_set(err, RB_E_NOMEM, "cannot start the inference thread");
    e->thread_started = true;
    return RB_OK;
}

void llm_engine_destroy(llm_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        e->accepting = false;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->th, NULL);
    }
    /* Jobs never taken by the thread (it was not started). */
    for (wk_job *j; (j = wk_job_queue_pop(&e->q));) {
        llm_job_finish(j, RB_STOP_CANCELLED, 0, 0, 0);
        wk_job_unref(j);
    }
    if (e->slots) {
        for (int i = 0; i < e->o.parallel; i++) {
            if (e->slots[i].job) release_seq(e, &e->slots[i]);
            free(e->slots[i].held);
            rb_kv_cache_free(e->slots[i].kv);
        }
    }
    free(e->slots);
    wk_job_queue_free(&e->q);
    rb_backend_host_free(rb_model_backend(e->m), e->logits);
    free(e->scratch);
    rb_grammar_vocab_free(e->gvocab);
    free(e->step_kvs);
    free(e->step_tokens);
    free(e->step_counts);
    free(e->step_slot);
    free(e->views);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

rb_status llm_engine_submit(llm_engine *e, wk_job *j) {
    pthread_mutex_lock(&e->mu);
    rb_status s = RB_OK;
    if (!e->accepting || e->stop) s = RB_E_CANCELLED;
    else if (job_slots(j) > e->o.parallel) s = RB_E_INVALID;
    else if ((s = wk_job_queue_push(&e->q, j, e->o.queue_depth, e->o.parallel - e->n_active)) == RB_OK)
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return s;
}

void llm_engine_stop_accepting(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    pthread_mutex_unlock(&e->mu);
}

void llm_engine_poke(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void llm_engine_stats(llm_engine *e, int *queued, int *active) {
    pthread_mutex_lock(&e->mu);
    if (queued) *queued = e->q.n;
    if (active) *active = e->n_active;
    pthread_mutex_unlock(&e->mu);
}

int llm_engine_parallel(const llm_engine *e) { return e->o.parallel; }
int64_t llm_engine_ctx_size(const llm_engine *e) { return e->o.ctx_size; }
int llm_engine_queue_capacity(const llm_engine *e) { return e->o.queue_depth; }

size_t llm_engine_kv_bytes(const llm_engine *e) {
    size_t b = 0;
    for (int i = 0; i < e->o.parallel; i++) b += rb_kv_cache_bytes(e->slots[i].kv);
    return b;
}
