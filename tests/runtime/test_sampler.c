/* Sampler: greedy choice, seeded reproducibility, the empirical distribution
 * of temperature sampling against the exact softmax, top-k / top-p / min-p
 * support sets computed by hand, the penalty formulas, logit biases (the
 * empirical distribution against the softmax of the biased logits), and bad
 * parameters. */
#include "testutil.h"

#include "rbee/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V 8

static const float k_logits[V] = {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f, -3.0f, 0.0f};

static rb_sampler *make(rb_sampler_params p) {
    rb_sampler *s = NULL;
    TU_OK(rb_sampler_create(&p, V, &s, NULL));
    return s;
}

static int32_t draw(rb_sampler *s, const int32_t *hist, size_t nh) {
    float l[V];
    memcpy(l, k_logits, sizeof l);
    return rb_sampler_sample(s, l, hist, nh);
}

static void test_greedy(void **state) {
    (void)state;
    rb_sampler *s = make(rb_sampler_default_params());
    for (int i = 0; i < 5; i++) assert_int_equal(draw(s, NULL, 0), 1);
    /* ties resolve to the first index */
    float l[V] = {0, 5, 5, 0, 0, 0, 0, 0};
    assert_int_equal(rb_sampler_sample(s, l, NULL, 0), 1);
    rb_sampler_free(s);
}

/* Greedy over a real vocabulary's size (128,256: not a multiple of the
 * blocks the pick walks) against a plain first-maximum walk: random logits
 * with NaNs, the maximum at the start, in the middle, in the last partial
 * block and tied at two places (the first wins), all -inf but one NaN, and
 * every entry -inf (token 0: the first that is not NaN). */
static int32_t naive_greedy(const float *x, int64_t n) {
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = (int32_t)i;
    return best < 0 ? 0 : best;
}

static void test_greedy_large(void **state) {
    (void)state;
    enum { GV = 128256 };
    rb_sampler *s = NULL;
    rb_sampler_params gp = rb_sampler_default_params(); /* greedy */
    gp.temperature = 0.0f;
    TU_OK(rb_sampler_create(&gp, GV, &s, NULL));
    float *l = malloc(sizeof(float) * GV), *c = malloc(sizeof(float) * GV);
    assert_non_null(l);
    assert_non_null(c);
    tu_rng r;
    tu_rng_seed(&r, 99);
    const int64_t at[] = {0, 64127, GV - 3, GV - 1, 17};
    for (size_t t = 0; t < sizeof at / sizeof at[0] + 2; t++) {
        for (int64_t i = 0; i < GV; i++) l[i] = tu_rng_uniform(&r) * 20.0f - 10.0f;
        for (int k = 0; k < 300; k++) l[tu_rng_u64(&r) % GV] = NAN;
        if (t < sizeof at / sizeof at[0]) l[at[t]] = 11.0f;
        if (t == 1) l[GV - 2] = 11.0f; /* a tie after the first */
        if (t == sizeof at / sizeof at[0]) { /* all -inf but one NaN */
            for (int64_t i = 0; i < GV; i++) l[i] = -INFINITY;
            l[0] = NAN;
        }
        if (t == sizeof at / sizeof at[0] + 1)
            for (int64_t i = 0; i < GV; i++) l[i] = -INFINITY;
        memcpy(c, l, sizeof(float) * GV);
        const int32_t want = naive_greedy(c, GV);
        assert_int_equal(rb_sampler_sample(s, l, NULL, 0), want);
        if (t < sizeof at / sizeof at[0]) assert_int_equal(want, at[t]);
    }
    free(l);
    free(c);
    rb_sampler_free(s);
}

static void test_seeded_reproducible(void **state) {
    (void)state;
    rb_sampler_params p = rb_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 1234;
    rb_sampler *a = make(p), *b = make(p);
    int differs_from_greedy = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = draw(a, NULL, 0), y = draw(b, NULL, 0);
        assert_int_equal(x, y);
        differs_from_greedy += x != 1;
    }
    assert_true(differs_from_greedy > 50); /* really sampling */
    rb_sampler_reseed(a, 99);
    rb_sampler_reseed(b, 99);
    for (int i = 0; i < 50; i++) assert_int_equal(draw(a, NULL, 0), draw(b, NULL, 0));
    rb_sampler_free(a);
    rb_sampler_free(b);
}

static void test_distribution_matches_softmax(void **state) {
    (void)state;
    rb_sampler_params p = rb_sampler_default_params();
    p.temperature = 0.7f;
    p.seed = 7;
    rb_sampler *s = make(p);
    const int N = 200000;
    int counts[V] = {0};
    for (int i = 0; i < N; i++) counts[draw(s, NULL, 0)]++;
    double z = 0, pr[V];
    for (int i = 0; i < V; i++) z += exp(k_logits[i] / 0.7);
    for (int i = 0; i < V; i++) {
        pr[i] = exp(k_logits[i] / 0.7) / z;
        double sd = sqrt(N * pr[i] * (1 - pr[i]));
        assert_true(fabs(counts[i] - N * pr[i]) < 5 * sd + 1);
    }
    rb_sampler_free(s);
}

/* every draw lies in the expected support and every support member occurs */
static void check_support(rb_sampler_params p, const int *support, int n_support) {
    rb_sampler *s = make(p);
    int seen[V] = {0};
    for (int i = 0; i < 20000; i++) seen[draw(s, NULL, 0)]++;
    for (int t = 0; t < V; t++) {
        int in = 0;
        for (int j = 0; j < n_support; j++) in |= support[j] == t;
        if (in) assert_true(seen[t] > 0);
        else assert_int_equal(seen[t], 0);
    }
    rb_sampler_free(s);
}

static void test_filters(void **state) {
    (void)state;
    rb_sampler_params p = rb_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 3;
    const int topk[] = {1, 5, 2};
    check_support(p, topk, 3);

    /* top_p: probabilities at T=1 sorted: 3.0, 2.9, 2.5, 1.0, ... */
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(k_logits[i]);
    double p1 = exp(3.0) / z, p5 = exp(2.9) / z;
    p = rb_sampler_default_params();
    p.temperature = 1.0f;
    p.top_p = (float)(p1 + p5 * 0.5); /* needs tokens 1 and 5 */
    const int nucleus[] = {1, 5};
    check_support(p, nucleus, 2);

    /* min_p 0.5: keep tokens with p >= 0.5 p_max: exp(l - 3) >= 0.5 -> l >= 2.307 */
    p = rb_sampler_default_params();
    p.temperature = 1.0f;
    p.min_p = 0.5f;
    const int minp[] = {1, 5, 2};
    check_support(p, minp, 3);
}

static void test_penalties(void **state) {
    (void)state;
    rb_sampler_params p = rb_sampler_default_params();
    p.repetition_penalty = 2.0f;
    rb_sampler *s = make(p);
    float l[V];
    memcpy(l, k_logits, sizeof l);
    const int32_t hist[] = {1, 3, 1};
    rb_sampler_sample(s, l, hist, 3);
    assert_float_equal(l[1], 1.5f, 0);  /* positive: divided once, not twice */
    assert_float_equal(l[3], -2.0f, 0); /* negative: multiplied */
    assert_float_equal(l[5], 2.9f, 0);
    rb_sampler_free(s);

    p = rb_sampler_default_params();
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = 2; /* only the last two tokens: 3, 1 */
    s = make(p);
    memcpy(l, k_logits, sizeof l);
    const int32_t hist2[] = {5, 5, 3, 1};
    int32_t t = rb_sampler_sample(s, l, hist2, 4);
    assert_float_equal(l[1], 3.0f - 0.5f - 0.25f, 1e-6);
    assert_float_equal(l[3], -1.0f - 0.5f - 0.25f, 1e-6);
    assert_float_equal(l[5], 2.9f, 0); /* outside the window */
    assert_int_equal(t, 5);
    rb_sampler_free(s);
}

static void test_bad_params(void **state) {
    (void)state;
    rb_sampler *s = NULL;
    rb_error e;
    rb_sampler_params p = rb_sampler_default_params();
    p.top_p = 1.5f;
    assert_int_equal(rb_sampler_create(&p, V, &s, &e), RB_E_RANGE);
    assert_non_null(strstr(e.msg, "top_p"));
    p = rb_sampler_default_params();
    p.temperature = NAN;
    assert_int_equal(rb_sampler_create(&p, V, &s, &e), RB_E_RANGE);
    p = rb_sampler_default_params();
    p.repetition_penalty = 0.0f;
    assert_int_equal(rb_sampler_create(&p, V, &s, &e), RB_E_RANGE);
    p = rb_sampler_default_params();
    assert_int_equal(rb_sampler_create(&p, 0, &s, &e), RB_E_RANGE);
}

/* Logit biases are added before everything else: greedy follows them, a
 * repeated token's biases add up, sampling draws from the softmax of the
 * biased logits, and the sampler keeps its own copy of the list. */
static void test_logit_bias(void **state) {
    (void)state;
    rb_logit_bias b[3] = {{6, 100.0f}, {1, -100.0f}, {6, 0.5f}};
    rb_sampler_params p = rb_sampler_default_params();
    p.logit_bias = b;
    p.n_logit_bias = 1;
    rb_sampler *s = make(p);
    float l[V];
    memcpy(l, k_logits, sizeof l);
    assert_int_equal(rb_sampler_sample(s, l, NULL, 0), 6); /* -3 + 100 */
    assert_true(fabsf(l[6] - 97.0f) < 1e-5f);              /* applied to the caller's logits */
    rb_sampler_free(s);
    p.logit_bias = b + 1; /* the greedy token banned: the runner-up (2.9 at 5) wins */
    p.n_logit_bias = 1;
    s = make(p);
    assert_int_equal(draw(s, NULL, 0), 5);
    rb_sampler_free(s);

    /* sampled: +3.4 on token 7 and -1.9 and +0.5 (summed) on 2; the list is copied */
    rb_logit_bias sb[3] = {{7, 3.4f}, {2, -1.9f}, {2, 0.5f}};
    p = rb_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 11;
    p.logit_bias = sb;
    p.n_logit_bias = 3;
    s = make(p);
    memset(sb, 0, sizeof sb);
    const int N = 100000;
    int counts[V] = {0};
    for (int i = 0; i < N; i++) counts[draw(s, NULL, 0)]++;
    double biased[V], z = 0;
    for (int i = 0; i < V; i++) biased[i] = k_logits[i] + (i == 7 ? 3.4 : i == 2 ? -1.4 : 0.0);
    for (int i = 0; i < V; i++) z += exp(biased[i]);
    for (int i = 0; i < V; i++) {
        double pr = exp(biased[i]) / z, sd = sqrt(N * pr * (1 - pr));
        assert_true(fabs(counts[i] - N * pr) < 5 * sd + 1);
    }
    assert_true(counts[7] > counts[1]); /* 3.4 made token 7 (0.0) the most likely */
    rb_sampler_free(s);

    /* bad biases */
    rb_error e;
    rb_sampler *bad = NULL;
    rb_logit_bias out_of_vocab = {V, 1.0f}, negative = {-1, 1.0f}, nan_bias = {0, NAN};
    p = rb_sampler_default_params();
    p.n_logit_bias = 1;
    p.logit_bias = &out_of_vocab;
    assert_int_equal(rb_sampler_create(&p, V, &bad, &e), RB_E_RANGE);
    assert_non_null(strstr(e.msg, "vocabulary"));
    p.logit_bias = &negative;
    assert_int_equal(rb_sampler_create(&p, V, &bad, &e), RB_E_RANGE);
    p.logit_bias = &nan_bias;
    assert_int_equal(rb_sampler_create(&p, V, &bad, &e), RB_E_RANGE);
    p.logit_bias = NULL;
    assert_int_equal(rb_sampler_create(&p, V, &bad, &e), RB_E_INVALID);
    assert_null(bad);
}

/* Non-finite logits: NaN never wins, all -inf or all NaN gives token 0, +inf
 * logits take all the probability, and a tiny temperature (where logit / T
 * overflows) behaves like greedy instead of drawing at random. */
static void test_non_finite_logits(void **state) {
    (void)state;
    rb_sampler *g = make(rb_sampler_default_params());
    float l[V] = {NAN, 1.0f, NAN, 4.0f, NAN, -2.0f, 3.5f, NAN};
    assert_int_equal(rb_sampler_sample(g, l, NULL, 0), 3);
    for (int i = 0; i < V; i++) l[i] = NAN;
    assert_int_equal(rb_sampler_sample(g, l, NULL, 0), 0);
    rb_sampler_free(g);

    rb_sampler_params p = rb_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 5;
    rb_sampler *s = make(p);
    for (int i = 0; i < V; i++) l[i] = -INFINITY;
    assert_int_equal(rb_sampler_sample(s, l, NULL, 0), 0);
    int seen[V] = {0};
    for (int r = 0; r < 2000; r++) {
        const float x[V] = {1.0f, INFINITY, 2.0f, NAN, INFINITY, 50.0f, -INFINITY, 0.0f};
        memcpy(l, x, sizeof l);
        seen[rb_sampler_sample(s, l, NULL, 0)]++;
    }
    assert_true(seen[1] > 800 && seen[4] > 800); /* about 1000 each */
    assert_int_equal(seen[1] + seen[4], 2000);
    rb_sampler_free(s);

    p.temperature = 1e-30f; /* 2.9 / 1e-30 overflows a float */
    s = make(p);
    for (int r = 0; r < 200; r++) assert_int_equal(draw(s, NULL, 0), 1);
    rb_sampler_free(s);
}

/* A real vocabulary's size (the filters select and sort only part of it):
 * 20,000 random logits with ties; every draw lies in the support a full sort
 * gives (top-k's k largest, top-p's smallest prefix of mass >= p, min-p's
 * threshold, and their combinations), which a naive double computation here
 * determines; every top-k member occurs, and the draws' frequencies follow
 * the renormalized softmax. */
#define BIGV 20000
static const float *g_big;
static int cmp_idx(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_big[x] != g_big[y]) return g_big[x] > g_big[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

static void test_large_vocabulary(void **state) {
    (void)state;
    static float big[BIGV], work[BIGV];
    static int order[BIGV];
    tu_rng r;
    tu_rng_seed(&r, 3);
    for (int i = 0; i < BIGV; i++) big[i] = (float)((int)(tu_rng_normal(&r) * 40)) / 16.0f; /* ties */
    g_big = big;
    for (int i = 0; i < BIGV; i++) order[i] = i;
    qsort(order, BIGV, sizeof order[0], cmp_idx);
    const struct {
        int top_k;
        float top_p, min_p, temp;
    } cases[] = {{40, 1.0f, 0.0f, 1.0f}, {0, 0.9f, 0.0f, 1.0f}, {0, 1.0f, 0.05f, 0.7f},
                 {0, 0.5f, 0.02f, 1.3f}, {300, 0.95f, 0.0f, 1.0f}, {0, 0.999f, 0.0f, 2.0f}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        /* the support by a full sort, in double */
        int n = cases[ci].top_k > 0 ? cases[ci].top_k : BIGV;
        const double mx = big[order[0]];
        double z = 0;
        for (int i = 0; i < n; i++) z += exp((big[order[i]] - mx) / cases[ci].temp);
        int keep = n;
        double cum = 0;
        for (int i = 0; i < n && cases[ci].top_p < 1.0f; i++) {
            cum += exp((big[order[i]] - mx) / cases[ci].temp) / z;
            if (cum >= cases[ci].top_p) { keep = i + 1; break; }
        }
        if (cases[ci].min_p > 0) {
            int k = 0;
            const double thr = (double)cases[ci].min_p * (1.0 / z); /* the top token's probability is 1 / z */
            while (k < keep && exp((big[order[k]] - mx) / cases[ci].temp) / z >= thr) k++;
            keep = k > 0 ? k : 1;
        }
        static char in_support[BIGV];
        memset(in_support, 0, sizeof in_support);
        double zk = 0;
        for (int i = 0; i < keep; i++) {
            in_support[order[i]] = 1;
            zk += exp((big[order[i]] - mx) / cases[ci].temp);
        }
        rb_sampler_params p = rb_sampler_default_params();
        p.temperature = cases[ci].temp;
        p.top_k = cases[ci].top_k;
        p.top_p = cases[ci].top_p;
        p.min_p = cases[ci].min_p;
        p.seed = 100 + ci;
        rb_sampler *s = NULL;
        TU_OK(rb_sampler_create(&p, BIGV, &s, NULL));
        const int N = 1000;
        static int counts[BIGV];
        memset(counts, 0, sizeof counts);
        for (int t = 0; t < N; t++) {
            memcpy(work, big, sizeof work);
            const int32_t tok = rb_sampler_sample(s, work, NULL, 0);
            assert_true(tok >= 0 && tok < BIGV);
            if (!in_support[tok]) fail_msg("case %zu: token %d (logit %g) outside the support of %d", ci, tok, big[tok], keep);
            counts[tok]++;
        }
        /* the most likely token's frequency, and for top-k every member seen */
        const double p0 = exp((big[order[0]] - mx) / cases[ci].temp) / zk, sd = sqrt(N * p0 * (1 - p0));
        assert_true(fabs(counts[order[0]] - N * p0) < 5 * sd + 1);
        if (cases[ci].top_k == 40)
            for (int i = 0; i < 40; i++) assert_true(counts[order[i]] > 0);
        rb_sampler_free(s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_vocabulary),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_greedy_large),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_non_finite_logits),
        cmocka_unit_test(test_logit_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
