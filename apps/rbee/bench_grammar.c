/* Implementation of bench_grammar.h. A grammar that completes is started
 * over (the matcher reset) so a pass always makes n_gen steps; an
 * end-of-sequence token sampled without a grammar is simply fed back. */
#include "bench_grammar.h"

#include "rbee/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One pass; *mask_s accumulates the time spent in the mask. */
static rb_status pass(rb_model *m, rb_kv_cache *kv, rb_grammar_matcher *gm, rb_sampler *smp, int64_t depth,
                      int32_t start, int64_t n, float *logits, double *mask_s, rb_error *err) {
    const int64_t V = rb_model_get_config(m)->n_vocab;
    rb_kv_cache_truncate(kv, depth);
    if (gm) rb_grammar_matcher_reset(gm);
    int32_t t = start;
    for (int64_t i = 0; i < n; i++) {
        rb_status s = rb_model_forward(m, kv, &t, 1, false, logits, err);
        if (s != RB_OK) return s;
        if (gm) {
            double t0 = now_s();
            if ((s = rb_grammar_matcher_mask_logits(gm, logits, (size_t)V, err)) != RB_OK) return s;
            *mask_s += now_s() - t0;
        }
        t = rb_sampler_sample(smp, logits, NULL, 0);
        if (gm) {
            double t0 = now_s();
            if ((s = rb_grammar_matcher_accept_token(gm, t, err)) != RB_OK) return s;
            if (rb_grammar_matcher_is_finished(gm)) rb_grammar_matcher_reset(gm);
            *mask_s += now_s() - t0;
        }
    }
    return RB_OK;
}

bool rb_bench_grammar_decode(rb_model *m, rb_kv_cache *kv, const rb_tokenizer *tok, const rb_grammar *g,
                             int64_t depth, int32_t start, int64_t n_gen, int reps, uint64_t seed, float *logits) {
    rb_error err;
    rb_error_clear(&err);
    const int64_t V = rb_model_get_config(m)->n_vocab;
    if (rb_tokenizer_n_vocab(tok) > V) {
        fprintf(stderr, "bench: the tokenizer has %d ids, the model %lld\n", (int)rb_tokenizer_n_vocab(tok), (long long)V);
        return false;
    }
    int32_t eog[2];
    size_t n_eog = 0;
    if (rb_tokenizer_eos(tok) >= 0) eog[n_eog++] = rb_tokenizer_eos(tok);
    int32_t eot = rb_tokenizer_token_id(tok, "<|eot_id|>", 10);
    if (eot >= 0) eog[n_eog++] = eot;
    rb_grammar_vocab *gv = NULL;
    rb_grammar_matcher *gm = NULL;
    rb_sampler *smp = NULL;
    double *ts_plain = malloc(sizeof(double) * (size_t)reps), *ts_gram = malloc(sizeof(double) * (size_t)reps);
    rb_sampler_params sp = rb_sampler_default_params();
    sp.temperature = 1.0f;
    sp.seed = seed;
    double mask_s = 0, t_vocab = now_s();
    bool ok = ts_plain && ts_gram && rb_grammar_vocab_create(tok, eog, n_eog, &gv, &err) == RB_OK &&
              rb_grammar_matcher_create(g, gv, &gm, &err) == RB_OK && rb_sampler_create(&sp, V, &smp, &err) == RB_OK;
    t_vocab = now_s() - t_vocab;
    if (ok) ok = pass(m, kv, NULL, smp, depth, start, n_gen, logits, &mask_s, &err) == RB_OK &&
                 pass(m, kv, gm, smp, depth, start, n_gen, logits, &mask_s, &err) == RB_OK; /* warm-up */
    mask_s = 0;
    for (int r = 0; ok && r < reps; r++) {
        rb_sampler_reseed(smp, seed + (uint64_t)r);
        double t0 = now_s();
        ok = pass(m, kv, NULL, smp, depth, start, n_gen, logits, &mask_s, &err) == RB_OK;
        double t1 = now_s();
        rb_sampler_reseed(smp, seed + (uint64_t)r);
        ok = ok && pass(m, kv, gm, smp, depth, start, n_gen, logits, &mask_s, &err) == RB_OK;
        double t2 = now_s();
        ts_plain[r] = (double)n_gen / (t1 - t0);
        ts_gram[r] = (double)n_gen / (t2 - t1);
    }
    if (ok) {
        qsort(ts_plain, (size_t)reps, sizeof *ts_plain, cmp_d);
        qsort(ts_gram, (size_t)reps, sizeof *ts_gram, cmp_d);
        const double a = ts_plain[reps / 2], b = ts_gram[reps / 2];
        printf("grammar decode (tg%lld, temperature 1, %d reps interleaved; vocabulary trie built in %.1f ms):\n",
               (long long)n_gen, reps, 1e3 * t_vocab);
        printf("  sampled:     %9.2f tokens/s (median)\n", a);
        printf("  constrained: %9.2f tokens/s (median), %.1f%% of sampled; mask+accept %.3f ms/token\n", b,
               100.0 * b / a, 1e3 * mask_s / ((double)n_gen * reps));
    } else {
        fprintf(stderr, "bench: grammar decode: %s\n", err.msg);
    }
    rb_sampler_free(smp);
    rb_grammar_matcher_free(gm);
    rb_grammar_vocab_free(gv);
    free(ts_plain);
    free(ts_gram);
    return ok;
}
