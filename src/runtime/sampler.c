/* Implementation of include/rbee/sampler.h. Candidates are kept as (id,
 * logit) pairs; filters shrink the candidate set; the draw uses a per-sampler
 * xoshiro256** generator. */
#include "rbee/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct rb_sampler {
    rb_sampler_params p;
    int64_t n_vocab;
    uint64_t rng[4];
    cand *cands;
    float *probs;
    uint16_t *counts; /* per-token counts within the penalty window (saturating) */
    rb_logit_bias *bias; /* a copy of p.logit_bias */
};

rb_sampler_params rb_sampler_default_params(void) {
    rb_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    p.penalty_last_n = 64;
    return p;
}

rb_status rb_sampler_params_check(const rb_sampler_params *p, rb_error *err) {
    if (!p) return rb_error_set(err, RB_E_INVALID, "sampler: NULL parameters");
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f) && !(p->temperature < 0.0f))
        return rb_error_set(err, RB_E_RANGE, "temperature must be between 0 and 100");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) return rb_error_set(err, RB_E_RANGE, "top_p must be between 0 and 1");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return rb_error_set(err, RB_E_RANGE, "min_p must be between 0 and 1");
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return rb_error_set(err, RB_E_RANGE, "repetition_penalty must be positive");
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return rb_error_set(err, RB_E_RANGE, "frequency and presence penalties must be finite");
    if (p->n_logit_bias > 0 && !p->logit_bias) return rb_error_set(err, RB_E_INVALID, "sampler: NULL logit biases");
    for (size_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || !isfinite(p->logit_bias[i].bias))
            return rb_error_set(err, RB_E_RANGE, "logit bias %zu: token %d, bias %g (a token id >= 0 and a finite bias)",
                                i, (int)p->logit_bias[i].token, (double)p->logit_bias[i].bias);
    return RB_OK;
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t *s) {
    uint64_t r = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return r;
}

void rb_sampler_reseed(rb_sampler *s, uint64_t seed) {
    for (int i = 0; i < 4; i++) { /* splitmix64 expansion */
        seed += 0x9e3779b97f4a7c15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        s->rng[i] = z ^ (z >> 31);
    }
}

rb_status rb_sampler_create(const rb_sampler_params *p, int64_t n_vocab, rb_sampler **out, rb_error *err) {
    rb_status st = rb_sampler_params_check(p, err);
    if (st != RB_OK) return st;
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return rb_error_set(err, RB_E_RANGE, "sampler: bad vocabulary size");
    for (size_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token >= n_vocab)
            return rb_error_set(err, RB_E_RANGE, "logit bias on token %d: the vocabulary has %lld tokens",
                                (int)p->logit_bias[i].token, (long long)n_vocab);
    rb_sampler *s = calloc(1, sizeof *s);
    if (!s) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    s->p = *p;
    if (p->n_logit_bias > 0) {
        s->bias = malloc(sizeof(rb_logit_bias) * p->n_logit_bias);
        if (!s->bias) {
            free(s);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        memcpy(s->bias, p->logit_bias, sizeof(rb_logit_bias) * p->n_logit_bias);
    }
    s->p.logit_bias = s->bias;
    s->n_vocab = n_vocab;
    s->cands = malloc(sizeof(cand) * (size_t)n_vocab);
    s->probs = malloc(sizeof(float) * (size_t)n_vocab);
    s->counts = calloc((size_t)n_vocab, sizeof(uint16_t));
    if (!s->cands || !s->probs || !s->counts) {
        rb_sampler_free(s);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    rb_sampler_reseed(s, p->seed);
    *out = s;
    return RB_OK;
}

void rb_sampler_free(rb_sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->probs);
    free(s->counts);
    free(s->bias);
    free(s);
}

static void apply_penalties(rb_sampler *s, float *logits, const int32_t *hist, size_t n_hist) {
    const rb_sampler_params *p = &s->p;
    if (p->repetition_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f) return;
    size_t start = 0;
    if (p->penalty_last_n >= 0 && n_hist > (size_t)p->penalty_last_n) start = n_hist - (size_t)p->penalty_last_n;
    for (size_t i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t >= 0 && t < s->n_vocab && s->counts[t] < UINT16_MAX) s->counts[t]++;
    }
    for (size_t i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t < 0 || t >= s->n_vocab || s->counts[t] == 0) continue;
        float l = logits[t];
        if (p->repetition_penalty != 1.0f) l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= (float)s->counts[t] * p->frequency_penalty + p->presence_penalty;
        logits[t] = l;
        s->counts[t] = 0; /* each distinct token once; also resets the table */
    }
}

static int cmp_cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

int32_t rb_sampler_sample(rb_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    const rb_sampler_params *p = &s->p;
    const int64_t V = s->n_vocab;
    for (size_t i = 0; i < p->n_logit_bias; i++) logits[p->logit_bias[i].token] += p->logit_bias[i].bias;
    apply_penalties(s, logits, history, n_history);

    if (p->temperature <= 0.0f) { /* greedy: first index of the maximum; NaN never wins */
        int32_t best = -1;
        for (int64_t i = 0; i < V; i++)
            if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = (int32_t)i;
        return best < 0 ? 0 : best; /* all NaN: no information, token 0 */
    }
    /* Candidates keep the raw logits (same order as logits / T for T > 0);
     * the temperature divides differences to the maximum below, so a tiny
     * temperature cannot overflow a finite logit to +inf. */
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) {
        float l = logits[i];
        if (l == -INFINITY || isnan(l)) continue;
        s->cands[n].id = (int32_t)i;
        s->cands[n].logit = l;
        n++;
    }
    if (n == 0) return 0; /* every logit -inf or NaN */
    qsort(s->cands, (size_t)n, sizeof(cand), cmp_cand_desc);
    if (p->top_k > 0 && n > p->top_k) n = p->top_k;

    /* softmax over the remaining candidates; +inf logits share all the mass */
    const float mx = s->cands[0].logit;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const float l = s->cands[i].logit;
        if (mx == INFINITY) s->probs[i] = l == INFINITY ? 1.0f : 0.0f;
        else s->probs[i] = expf((l - mx) / p->temperature);
        sum += s->probs[i];
    }
    for (int64_t i = 0; i < n; i++) s->probs[i] = (float)(s->probs[i] / sum);

    if (p->top_p < 1.0f) { /* smallest prefix with cumulative probability >= top_p (keep at least one) */
        double cum = 0;
        int64_t keep = n;
        for (int64_t i = 0; i < n; i++) {
            cum += s->probs[i];
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) { /* drop tokens below min_p times the top probability */
        const float thr = p->min_p * s->probs[0];
        int64_t keep = 1;
        while (keep < n && s->probs[keep] >= thr) keep++;
        n = keep;
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += s->probs[i];
    double r = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * total;
    double cum = 0;
    for (int64_t i = 0; i < n; i++) {
        cum += s->probs[i];
        if (r < cum) return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}
