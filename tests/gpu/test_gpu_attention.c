/* rb_attention on the GPU against the CPU backend: prefill (causal, GQA) with
 * the model's layouts (q a strided f32 view, k/v f16 KV-cache views), single
 * token decode over 1000 keys (the split-key path), chunked prefill with a
 * sliding window and soft-capping at q_pos0 > 0, an additive f32 mask with
 * bf16 k/v and head dims that are not multiples of 8 (Dv != D), queries that
 * see no key (zeros), and refusal of head dims beyond the kernel's limit.
 * Bound: |gpu - cpu| <= 2e-6 + 2e-5 |cpu| (both accumulate in f32). */
#include "gpu_pair.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Swaps dims 1 and 2 of both views: a contiguous [D, H, T] parent seen as
 * [D, T, H], like a KV-cache slice. */
static void swap12(gp *x) {
    rb_tensor *ts[2] = {&x->c, &x->g};
    for (int i = 0; i < 2; i++) {
        int64_t ne = ts[i]->ne[1];
        size_t nb = ts[i]->nb[1];
        ts[i]->ne[1] = ts[i]->ne[2];
        ts[i]->nb[1] = ts[i]->nb[2];
        ts[i]->ne[2] = ne;
        ts[i]->nb[2] = nb;
    }
}

typedef struct acase {
    const char *name;
    int64_t D, Dv, Tq, Tk, Hq, Hkv, B;
    rb_dtype qt, kvt;
    bool causal, mask;
    int window;
    float softcap;
    int64_t q_pos0;
} acase;

static void run_case(rb_backend *c, rb_backend *g, tu_rng *rng, const acase *k) {
    /* q: [D, Hq, Tq] parent seen as [D, Tq, Hq] (the model's qr view) */
    const int64_t qne[4] = {k->D, k->Hq, k->Tq, k->B}, kne[4] = {k->D, k->Hkv, k->Tk, k->B},
                  vne[4] = {k->Dv, k->Hkv, k->Tk, k->B}, dne[4] = {k->Dv, k->Hq, k->Tq, k->B},
                  mne[4] = {k->Tk, k->Tq, 1, 1};
    gp q = gp_make(c, g, rng, k->qt, qne, GP_CONTIG, -1, 1);
    gp kk = gp_make(c, g, rng, k->kvt, kne, GP_SLICE, -1, 1);
    gp v = gp_make(c, g, rng, k->kvt, vne, GP_SLICE, -1, 1);
    gp d = gp_make(c, g, rng, RB_F32, dne, GP_SLICE, -5, 5);
    gp m = gp_make(c, g, rng, RB_F32, mne, GP_CONTIG, -3, 1);
    swap12(&q);
    swap12(&kk);
    swap12(&v);
    rb_attn_params pc = {.scale = 1.0f / sqrtf((float)k->D), .softcap = k->softcap, .causal = k->causal,
                         .window = k->window, .q_pos0 = k->q_pos0, .mask = k->mask ? &m.c : NULL};
    rb_attn_params pg = pc;
    pg.mask = k->mask ? &m.g : NULL;
    TU_OK(rb_attention(c, &d.c, &q.c, &kk.c, &v.c, &pc));
    TU_OK(rb_attention(g, &d.g, &q.g, &kk.g, &v.g, &pg));
    gp_expect_close(&d, 2e-5, 2e-6, k->name);
    print_message("attention %-28s ok\n", k->name);
    gp_free(&q);
    gp_free(&kk);
    gp_free(&v);
    gp_free(&d);
    gp_free(&m);
}

static void test_attention(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 900);
    const acase cases[] = {
        {"prefill causal gqa", 64, 64, 37, 37, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0},
        {"decode 1000 keys", 128, 128, 1, 1000, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 999},
        {"decode batch 2 no gqa", 64, 64, 1, 333, 4, 4, 2, RB_F16, RB_F16, true, false, 0, 0.0f, 332},
        {"chunk window softcap", 64, 64, 20, 300, 6, 3, 1, RB_F32, RB_F16, true, false, 64, 30.0f, 280},
        {"decode window split", 64, 64, 1, 900, 2, 1, 1, RB_F32, RB_F16, true, false, 400, 0.0f, 899},
        {"mask bf16 D40 Dv24", 40, 24, 13, 29, 4, 2, 2, RB_BF16, RB_BF16, false, true, 0, 0.0f, 0},
        {"f32 kv causal mask", 48, 48, 9, 50, 3, 1, 1, RB_F32, RB_F32, true, true, 0, 20.0f, 41},
        {"no visible key", 32, 32, 4, 30, 2, 1, 1, RB_F32, RB_F16, true, false, 10, 0.0f, 50},
        {"gemma-like D256", 256, 256, 5, 70, 4, 2, 1, RB_F32, RB_F16, true, false, 0, 50.0f, 65},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(c, g, &rng, &cases[i]);

    /* Dv beyond the kernel's limit: refused, nothing written */
    const int64_t qne[4] = {64, 5, 2, 1}, vne[4] = {512, 5, 2, 1}, dne[4] = {512, 2, 5, 1};
    gp q = gp_make(c, g, &rng, RB_F32, qne, GP_CONTIG, -1, 1);
    gp v = gp_make(c, g, &rng, RB_F16, vne, GP_CONTIG, -1, 1);
    gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, -1, 1);
    rb_attn_params p = {.scale = 0.1f, .causal = true};
    assert_int_equal(rb_attention(g, &d.g, &q.g, &q.g, &v.g, &p), RB_E_UNSUPPORTED);
    assert_true(gp_gpu_unchanged(&d));
    gp_free(&q);
    gp_free(&v);
    gp_free(&d);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_attention)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
