/* llm_prefix: the longest common prefix, the positions a prompt keeps (at
 * most all but its last token), the free slot a prompt takes (most kept,
 * ties to the least recently used, busy slots never) and the donor slot
 * (free or busy, other than the job's own, only when it keeps more), with
 * expected values written out by hand and a brute-force check over random
 * slot states (min_run 1 to 3). */
#include "testutil.h"

#include "worker_llm/llm_prefix.h"

#include <string.h>

static void test_lcp(void **state) {
    (void)state;
    const int32_t a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 3, 9}, c[] = {7};
    assert_int_equal(llm_prefix_lcp(a, 5, b, 4), 3);
    assert_int_equal(llm_prefix_lcp(b, 4, a, 5), 3);
    assert_int_equal(llm_prefix_lcp(a, 5, a, 5), 5);
    assert_int_equal(llm_prefix_lcp(a, 5, a, 2), 2); /* a strict prefix */
    assert_int_equal(llm_prefix_lcp(a, 5, c, 1), 0);
    assert_int_equal(llm_prefix_lcp(a, 0, a, 5), 0);
    assert_int_equal(llm_prefix_lcp(NULL, 3, a, 5), 0);
    assert_int_equal(llm_prefix_lcp(a, 5, NULL, 0), 0);
}

static void test_keep(void **state) {
    (void)state;
    const int32_t cached[] = {1, 2, 3, 4, 5, 6};
    const int32_t longer[] = {1, 2, 3, 4, 5, 6, 7, 8}, same[] = {1, 2, 3, 4, 5, 6}, shorter[] = {1, 2, 3},
                  other[] = {1, 2, 9, 4, 5, 6, 7}, none[] = {8, 1};
    assert_int_equal(llm_prefix_keep(cached, 6, longer, 8, 1), 6);  /* all of the cache */
    assert_int_equal(llm_prefix_keep(cached, 6, same, 6, 1), 5);    /* identical: the last token runs again */
    assert_int_equal(llm_prefix_keep(cached, 6, shorter, 3, 1), 2); /* a strict prefix of the cache */
    assert_int_equal(llm_prefix_keep(cached, 6, other, 7, 1), 2);
    assert_int_equal(llm_prefix_keep(cached, 6, none, 2, 1), 0);
    assert_int_equal(llm_prefix_keep(cached, 6, same, 1, 1), 0); /* one-token prompt: nothing kept */
    assert_int_equal(llm_prefix_keep(cached, 6, same, 0, 1), 0);
    assert_int_equal(llm_prefix_keep(NULL, 0, same, 6, 1), 0);
    /* at least min_run prompt tokens run; none kept from a prompt shorter than that */
    assert_int_equal(llm_prefix_keep(cached, 6, longer, 8, 3), 5);
    assert_int_equal(llm_prefix_keep(cached, 6, longer, 8, 2), 6);
    assert_int_equal(llm_prefix_keep(cached, 6, same, 6, 4), 2);
    assert_int_equal(llm_prefix_keep(cached, 6, shorter, 3, 3), 0);
    assert_int_equal(llm_prefix_keep(cached, 6, shorter, 3, 4), 0);
    assert_int_equal(llm_prefix_keep(cached, 6, same, 6, 0), 5); /* 0 counts as 1 */
}

static void test_pick(void **state) {
    (void)state;
    const int32_t p[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const int32_t s0[] = {1, 2, 3, 4, 5, 6, 7}, s1[] = {1, 2, 3}, s2[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
                  s3[] = {1, 2, 3, 99};
    llm_prefix_view v[4] = {{s0, 7, 10, true}, {s1, 3, 5, true}, {s2, 11, 1, false}, {s3, 4, 2, true}};
    size_t keep = 99;
    assert_int_equal(llm_prefix_pick(v, 4, p, 10, 1, &keep), 0); /* slot 2 keeps more but is busy */
    assert_int_equal(keep, 7);
    v[2].free = true; /* free now: it keeps 9 (all but the last prompt token) */
    assert_int_equal(llm_prefix_pick(v, 4, p, 10, 1, &keep), 2);
    assert_int_equal(keep, 9);
    v[2].free = false;
    v[0].free = false;
    /* slots 1 and 3 keep 3 each: the least recently used (3) wins */
    assert_int_equal(llm_prefix_pick(v, 4, p, 10, 1, &keep), 3);
    assert_int_equal(keep, 3);
    v[1].last_used = 1;
    assert_int_equal(llm_prefix_pick(v, 4, p, 10, 1, &keep), 1);
    /* no prompt (an embeddings job): the least recently used free slot */
    v[1].last_used = 5;
    assert_int_equal(llm_prefix_pick(v, 4, NULL, 0, 1, &keep), 3);
    assert_int_equal(keep, 0);
    /* nothing shared: the least recently used */
    const int32_t q[] = {50, 51};
    assert_int_equal(llm_prefix_pick(v, 4, q, 2, 1, NULL), 3);
    for (int i = 0; i < 4; i++) v[i].free = false;
    assert_int_equal(llm_prefix_pick(v, 4, p, 10, 1, &keep), -1);
}

static void test_donor(void **state) {
    (void)state;
    const int32_t p[] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int32_t s0[] = {1, 2}, s1[] = {1, 2, 3, 4, 5}, s2[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    llm_prefix_view v[3] = {{s0, 2, 0, true}, {s1, 5, 0, false}, {s2, 9, 0, false}};
    size_t keep = 0;
    assert_int_equal(llm_prefix_donor(v, 3, 0, p, 8, 1, 2, &keep), 2); /* busy slots give too */
    assert_int_equal(keep, 7);
    assert_int_equal(llm_prefix_donor(v, 3, 2, p, 8, 1, 7, &keep), -1); /* self excluded, nobody keeps more */
    assert_int_equal(keep, 7);
    assert_int_equal(llm_prefix_donor(v, 3, 2, p, 8, 1, 0, &keep), 1);
    assert_int_equal(keep, 5);
    v[2].n = 5; /* slots 1 and 2 keep 5: the lower one */
    assert_int_equal(llm_prefix_donor(v, 3, 0, p, 8, 1, 2, &keep), 1);
    assert_int_equal(llm_prefix_donor(v, 3, 0, p, 8, 1, 5, &keep), -1); /* not more than the slot's own */
    assert_int_equal(keep, 5);
}

/* Random slot states: pick and donor against a brute force written here. */
static void test_random(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 31);
    int32_t toks[6][12], prompt[12];
    llm_prefix_view v[6];
    for (int it = 0; it < 2000; it++) {
        const int n = 1 + (int)(tu_rng_u64(&r) % 6);
        const size_t np = 1 + tu_rng_u64(&r) % 12, min_run = 1 + tu_rng_u64(&r) % 3;
        for (size_t i = 0; i < np; i++) prompt[i] = (int32_t)(tu_rng_u64(&r) % 2);
        for (int s = 0; s < n; s++) {
            v[s].n = tu_rng_u64(&r) % 13;
            for (size_t i = 0; i < v[s].n; i++) toks[s][i] = (int32_t)(tu_rng_u64(&r) % 2);
            v[s].tok = toks[s];
            v[s].last_used = tu_rng_u64(&r) % 4;
            v[s].free = tu_rng_u64(&r) % 3 != 0;
        }
        size_t kept[6];
        int want = -1;
        for (int s = 0; s < n; s++) {
            size_t k = 0;
            while (k < v[s].n && k < np && toks[s][k] == prompt[k]) k++;
            kept[s] = np < min_run ? 0 : k < np - min_run ? k : np - min_run;
            if (!v[s].free) continue;
            if (want < 0 || kept[s] > kept[want] || (kept[s] == kept[want] && v[s].last_used < v[want].last_used))
                want = s;
        }
        size_t keep = 0;
        const int got = llm_prefix_pick(v, n, prompt, np, min_run, &keep);
        assert_int_equal(got, want);
        if (got < 0) continue;
        assert_int_equal(keep, kept[got]);
        int dwant = -1;
        for (int s = 0; s < n; s++)
            if (s != got && kept[s] > (dwant < 0 ? kept[got] : kept[dwant])) dwant = s;
        size_t dkeep = 0;
        assert_int_equal(llm_prefix_donor(v, n, got, prompt, np, min_run, kept[got], &dkeep), dwant);
        assert_int_equal(dkeep, dwant < 0 ? kept[got] : kept[dwant]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lcp),   cmocka_unit_test(test_keep),   cmocka_unit_test(test_pick),
        cmocka_unit_test(test_donor), cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
