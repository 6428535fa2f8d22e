/* Implementation of include/rbee/sampler.h. Candidates are kept as (id,
 * logit, probability) triples; filters shrink the candidate set; the draw
 * uses a per-sampler xoshiro256** generator. Nothing sorts the whole
 * vocabulary (a qsort of 128k candidates cost ~14 ms a token): top-k selects
 * its k in linear time and sorts only them, min-p is a threshold, top-p
 * sorts the best candidates in growing chunks until their mass reaches p,
 * and a draw walks the kept set in whatever order it is in (the
 * distribution does not depend on the order). */
#include "rbee/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
    float prob;
} cand;

struct rb_sampler {
    rb_sampler_params p;
    int64_t n_vocab;
    uint64_t rng[4];
    cand *cands;
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
    s->counts = calloc((size_t)n_vocab, sizeof(uint16_t));
    if (!s->cands || !s->counts) {
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

/* The candidates' order: logit descending, then id ascending (a total order). */
static inline bool before(const cand *x, const cand *y) {
    return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

static int cmp_cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

static inline void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k first candidates in the order above to c[0..k), in any order
 * (quickselect, median-of-three pivots; linear on average). */
static void select_first(cand *c, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (before(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
        if (before(&c[hi], &c[mid])) swap_cand(&c[hi], &c[mid]);
        const cand pivot = c[mid]; /* median of three */
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (before(&c[i], &pivot)) i++;
            while (before(&pivot, &c[j])) j--;
            if (i <= j) swap_cand(&c[i++], &c[j--]);
        }
        /* c[lo..j] come before the pivot's place, c[i..hi] after */
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return;
    }
}

/* Sorts the first k candidates of c[0..n) into c[0..k). */
static void sort_first(cand *c, int64_t n, int64_t k) {
    if (k < n) select_first(c, n, k);
    qsort(c, (size_t)k, sizeof(cand), cmp_cand_desc);
}

/* Greedy: the first index of the largest logit that is not NaN (token 0 if
 * all are NaN). Per-lane maxima over blocks of 16 first (x > m ? x : m
 * keeps m where x is NaN; the compiler turns the block into vector max
 * instructions), then the first index holding the maximum: at a 128k
 * vocabulary ~2.5x faster than one compare-and-branch walk, and it runs for
 * every stream of every step a server decodes. */
static int32_t greedy_pick(const float *x, int64_t n) {
    enum { L = 16 };
    float m[L];
    for (int j = 0; j < L; j++) m[j] = -INFINITY;
    int64_t i = 0;
    for (; i + L <= n; i += L)
        for (int j = 0; j < L; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float mx = -INFINITY;
    for (int j = 0; j < L; j++) mx = m[j] > mx ? m[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int64_t k = 0; k < n; k++)
        if (x[k] == mx) return (int32_t)k; /* -inf too: the first logit that is not NaN */
    return 0; /* all NaN: no information */
}

int32_t rb_sampler_sample(rb_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    const rb_sampler_params *p = &s->p;
    const int64_t V = s->n_vocab;
    for (size_t i = 0; i < p->n_logit_bias; i++) logits[p->logit_bias[i].token] += p->logit_bias[i].bias;
    apply_penalties(s, logits, history, n_history);

    if (p->temperature <= 0.0f) return greedy_pick(logits, V); /* NaN never wins */
    /* Candidates keep the raw logits (same order as logits / T for T > 0);
     * the temperature divides differences to the maximum below, so a tiny
     * temperature cannot overflow a finite logit to +inf. */
    cand *c = s->cands;
    int64_t n = 0;
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        float l = logits[i];
        if (l == -INFINITY || isnan(l)) continue;
        c[n].id = (int32_t)i;
        c[n].logit = l;
        n++;
        if (l > mx) mx = l;
    }
    if (n == 0) return 0; /* every logit -inf or NaN */
    bool sorted = false; /* c[0..n) in the order above */
    if (p->top_k > 0 && n > p->top_k) {
        sort_first(c, n, p->top_k);
        n = p->top_k;
        sorted = true;
    }

    /* softmax over the remaining candidates; +inf logits share all the mass */
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const float l = c[i].logit;
        if (mx == INFINITY) c[i].prob = l == INFINITY ? 1.0f : 0.0f;
        else c[i].prob = expf((l - mx) / p->temperature);
        sum += c[i].prob;
    }
    float pmax = 0;
    for (int64_t i = 0; i < n; i++) {
        c[i].prob = (float)(c[i].prob / sum);
        if (c[i].prob > pmax) pmax = c[i].prob;
    }

    if (p->min_p > 0.0f) { /* drop tokens below min_p times the top probability (keeps a sorted prefix sorted) */
        const float thr = p->min_p * pmax;
        int64_t keep = 0;
        for (int64_t i = 0; i < n; i++)
            if (c[i].prob >= thr) c[keep++] = c[i];
        n = keep > 0 ? keep : 1;
    }
    if (p->top_p < 1.0f) { /* smallest prefix in the order above with mass >= top_p (keep at least one) */
        double cum = 0;
        int64_t keep = n;
        for (int64_t lo = 0, chunk = 256; lo < n && keep == n; chunk *= 2) {
            const int64_t k = n - lo < chunk ? n - lo : chunk;
            if (!sorted) sort_first(c + lo, n - lo, k);
            for (int64_t i = lo; i < lo + k; i++) {
                cum += c[i].prob;
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            lo += k;
        }
        n = keep;
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += c[i].prob;
    double r = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * total;
    double cum = 0;
    for (int64_t i = 0; i < n; i++) {
        cum += c[i].prob;
        if (r < cum) return c[i].id;
    }
    return c[n - 1].id;
}
