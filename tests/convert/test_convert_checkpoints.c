/* Checkpoint layouts the tiny references do not store, made from them here
 * and checked through both the HF loader and `rbee convert`:
 *  - bf16 and f16 checkpoints of the newer architectures (as published
 *    gpt-oss, Qwen3 and Mixtral weights are): the folder's logits equal the
 *    converted f32 GGUF's (the same rounded values; measured <= 2e-7) and stay
 *    within measured bounds of transformers' f32-weight logits (only the
 *    weights' rounding differs);
 *  - transformers 5's stacked expert layout (mlp.experts.gate_up_proj
 *    [E, 2F, H] with gate rows first, mlp.experts.down_proj [E, H, F], module
 *    mlp for Mixtral too): the same logits as the per-expert checkpoint from
 *    the folder, and the same GGUF tensors byte for byte once converted. */
#include "convert_testutil.h"

#include "convert/convert.h"
#include "rbee/quant.h"
#include "rbee/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref {
    int32_t *tokens;
    size_t nt;
    float *logits; /* transformers, f32 weights */
    size_t nbytes;
} ref;

static ref load_ref(const char *dir) {
    char path[2048];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    rb_json_config *j = NULL;
    TU_OK(rb_json_config_load(path, &j, NULL));
    ref r;
    r.tokens = ct_ids(j, "tokens", &r.nt);
    rb_json_config_free(j);
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    r.logits = tu_read_file(path, &r.nbytes);
    return r;
}

static void convert_f32(const char *dir, const char *out) {
    rb_convert_opts o = {.type = RB_F32};
    rb_error err;
    rb_error_clear(&err);
    if (rb_convert_hf_to_gguf(dir, out, &o, NULL, &err) != RB_OK) fail_msg("convert %s: %s", dir, err.msg);
}

/* bounds: ~2x the worst measured (f16: 4.6e-3, qwen3_moe_nonorm; bf16: 1.24e-2, gpt_oss) */
static void test_half_precision(void **state) {
    (void)state;
    static const char *const names[] = {"qwen3", "qwen3_moe_nonorm", "mixtral_sw8", "gemma3_linear_softcap", "olmo2",
                                        "gpt_oss"};
    static const struct { rb_dtype dt; double bound; } kinds[] = {{RB_F16, 1e-2}, {RB_BF16, 2.5e-2}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[1024];
        ct_model_dir(src, sizeof src, names[i]);
        ref r = load_ref(src);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            char dir[1024], gguf[2048];
            ct_tmpdir(dir, sizeof dir);
            ct_copy_hf_as(src, dir, kinds[k].dt);
            int64_t V = 0;
            float *hf = ct_logits(dir, r.tokens, r.nt, &V);
            assert_int_equal(r.nbytes, sizeof(float) * r.nt * (size_t)V);
            char tmp[1024];
            ct_tmpdir(tmp, sizeof tmp);
            snprintf(gguf, sizeof gguf, "%s/model.gguf", tmp);
            convert_f32(dir, gguf);
            float *gg = ct_logits(gguf, r.tokens, r.nt, &V);
            const size_t n = r.nt * (size_t)V;
            const double e_conv = tu_rel_l2_f(hf, gg, n), e_tf = tu_rel_l2_f(hf, r.logits, n);
            print_message("%-22s %-4s folder vs its f32 GGUF %.2g, vs transformers on f32 weights %.3g (bound %.2g)\n",
                          names[i], rb_dtype_name(kinds[k].dt), e_conv, e_tf, kinds[k].bound);
            if (e_conv > 1e-6) fail_msg("%s %s: folder and converted GGUF differ: %.3g", names[i],
                                        rb_dtype_name(kinds[k].dt), e_conv);
            if (e_tf > kinds[k].bound) fail_msg("%s %s: %.3g from transformers", names[i], rb_dtype_name(kinds[k].dt), e_tf);
            free(hf);
            free(gg);
            ct_rmtree(tmp);
            ct_rmtree(dir);
        }
        free(r.tokens);
        free(r.logits);
    }
}

/* f32 values of an HF tensor */
static float *values(const rb_st_tensor *t, int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    TU_OK(rb_dequantize_row(t->dtype, t->data, x, n));
    return x;
}

/* Rewrites the per-expert checkpoint src as transformers 5's stacked layout in dst. */
static void write_stacked(const char *src, const char *dst, const char *mod, const char *g, const char *u,
                          const char *d) {
    char path[2048];
    size_t clen = 0;
    snprintf(path, sizeof path, "%s/config.json", src);
    char *cfg = tu_read_file(path, &clen);
    snprintf(path, sizeof path, "%s/config.json", dst);
    ct_write_text(path, cfg);
    free(cfg);
    rb_st_set *st = NULL;
    TU_OK(rb_st_open(src, &st, NULL));
    const int64_t nt = rb_st_n_tensors(st);
    ct_st_entry *e = calloc((size_t)nt, sizeof *e);
    char (*names)[160] = calloc((size_t)nt, sizeof *names);
    float **bufs = calloc((size_t)nt, sizeof *bufs);
    assert_true(e && names && bufs);
    size_t k = 0;
    char pfx[128];
    for (int il = 0;; il++) {
        snprintf(pfx, sizeof pfx, "model.layers.%d.", il);
        bool any = false;
        for (int64_t i = 0; i < nt && !any; i++) any = strncmp(rb_st_tensor_at(st, i)->name, pfx, strlen(pfx)) == 0;
        if (!any) break;
        char n0[192];
        snprintf(n0, sizeof n0, "model.layers.%d.%s.experts.0.%s.weight", il, mod, g);
        const rb_st_tensor *t0 = rb_st_find(st, n0);
        if (!t0) continue; /* a dense layer */
        const int64_t H = t0->ne[0], F = t0->ne[1];
        int64_t E = 0;
        for (;; E++) {
            snprintf(n0, sizeof n0, "model.layers.%d.%s.experts.%lld.%s.weight", il, mod, (long long)E, g);
            if (!rb_st_find(st, n0)) break;
        }
        float *gu = malloc(sizeof(float) * (size_t)(E * 2 * F * H)), *dn = malloc(sizeof(float) * (size_t)(E * H * F));
        assert_true(gu && dn);
        for (int64_t x = 0; x < E; x++) {
            const char *parts[3] = {g, u, d};
            for (int p = 0; p < 3; p++) {
                snprintf(n0, sizeof n0, "model.layers.%d.%s.experts.%lld.%s.weight", il, mod, (long long)x, parts[p]);
                const rb_st_tensor *t = rb_st_find(st, n0);
                assert_non_null(t);
                float *v = values(t, F * H);
                memcpy(p == 2 ? dn + x * H * F : gu + (x * 2 + p) * F * H, v, sizeof(float) * (size_t)(F * H));
                free(v);
            }
        }
        ct_st_entry *a = &e[k];
        snprintf(names[k], sizeof names[k], "model.layers.%d.mlp.experts.gate_up_proj", il);
        *a = (ct_st_entry){names[k], "F32", 3, {E, 2 * F, H}, gu, sizeof(float) * (size_t)(E * 2 * F * H)};
        bufs[k++] = gu;
        a = &e[k];
        snprintf(names[k], sizeof names[k], "model.layers.%d.mlp.experts.down_proj", il);
        *a = (ct_st_entry){names[k], "F32", 3, {E, H, F}, dn, sizeof(float) * (size_t)(E * H * F)};
        bufs[k++] = dn;
    }
    for (int64_t i = 0; i < nt; i++) { /* everything else, the router renamed into mlp */
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        if (strstr(t->name, ".experts.")) continue;
        const char *r = strstr(t->name, mod);
        if (r && strcmp(mod, "mlp") != 0)
            snprintf(names[k], sizeof names[k], "%.*smlp%s", (int)(r - t->name), t->name, r + strlen(mod));
        else snprintf(names[k], sizeof names[k], "%s", t->name);
        ct_st_entry *a = &e[k++];
        a->name = names[k - 1];
        a->dtype = "F32";
        assert_int_equal(t->dtype, RB_F32);
        a->n_dims = t->n_dims;
        for (int dd = 0; dd < t->n_dims; dd++) a->shape[dd] = t->ne[t->n_dims - 1 - dd];
        a->data = t->data;
        a->nbytes = t->nbytes;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    ct_write_safetensors(path, e, k);
    for (size_t i = 0; i < k; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(e);
    rb_st_close(st);
}

static void test_stacked_experts(void **state) {
    (void)state;
    static const struct { const char *name, *mod, *g, *u, *d; } cases[] = {
        {"qwen3_moe", "mlp", "gate_proj", "up_proj", "down_proj"},
        {"qwen3_moe_nonorm", "mlp", "gate_proj", "up_proj", "down_proj"}, /* a dense layer among them */
        {"mixtral", "block_sparse_moe", "w1", "w3", "w2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[1024], dir[1024], tmp[1024], a[2048], b[2048];
        ct_model_dir(src, sizeof src, cases[i].name);
        ct_tmpdir(dir, sizeof dir);
        ct_tmpdir(tmp, sizeof tmp);
        write_stacked(src, dir, cases[i].mod, cases[i].g, cases[i].u, cases[i].d);
        rb_st_set *st = NULL;
        TU_OK(rb_st_open(dir, &st, NULL));
        assert_non_null(rb_st_find(st, "model.layers.0.mlp.experts.gate_up_proj"));
        assert_null(rb_st_find(st, "model.layers.0.mlp.experts.0.gate_proj.weight"));
        rb_st_close(st);
        ref r = load_ref(src);
        int64_t V = 0;
        float *want = ct_logits(src, r.tokens, r.nt, &V), *got = ct_logits(dir, r.tokens, r.nt, &V);
        const double e = tu_rel_l2_f(got, want, r.nt * (size_t)V);
        /* converted: the same stacks as from the per-expert files */
        snprintf(a, sizeof a, "%s/per_expert.gguf", tmp);
        snprintf(b, sizeof b, "%s/stacked.gguf", tmp);
        convert_f32(src, a);
        convert_f32(dir, b);
        rb_gguf *ga = ct_gguf_open(a), *gb = ct_gguf_open(b);
        assert_int_equal(rb_gguf_n_tensors(ga), rb_gguf_n_tensors(gb));
        for (int64_t t = 0; t < rb_gguf_n_tensors(ga); t++) {
            const rb_gguf_tensor_info *x = rb_gguf_tensor_at(ga, t), *y = rb_gguf_tensor_at(gb, t);
            assert_int_equal(x->name.len, y->name.len);
            assert_memory_equal(x->name.ptr, y->name.ptr, x->name.len);
            assert_int_equal(x->nbytes, y->nbytes);
            if (memcmp(x->data, y->data, x->nbytes) != 0)
                fail_msg("%s: %.*s differs between the layouts", cases[i].name, (int)x->name.len, x->name.ptr);
        }
        print_message("%-18s stacked layout: folder logits vs per-expert %.2g, %lld GGUF tensors identical\n",
                      cases[i].name, e, (long long)rb_gguf_n_tensors(ga));
        if (e > 1e-6) fail_msg("%s: stacked experts change the logits: %.3g", cases[i].name, e);
        rb_gguf_close(ga);
        rb_gguf_close(gb);
        free(want);
        free(got);
        free(r.tokens);
        free(r.logits);
        ct_rmtree(tmp);
        ct_rmtree(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_precision),
        cmocka_unit_test(test_stacked_experts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
