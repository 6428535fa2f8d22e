/* Random-weight SD3 models (the `sd3m` / `sd35m` presets of
 * rb_sd_model_create_random, rb_sd_model_create_random_dir, what
 * `rbee bench-sd` builds):
 *  - the tensor lists they are made from (sd_enum_mmdit, sd_enum_t5 and the
 *    VAE / CLIP lists at SD3's configs) equal the tiny fixture pipelines'
 *    files (tests/data/sd3/pipelines/{sd3,sd35}), name for name and shape for
 *    shape, so the loaders bind them as they bind diffusers' files;
 *  - at the published configs they hold the published parameter counts
 *    (SD3-medium MMDiT 2,028,328,000 parameters besides its position
 *    table buffer; T5-XXL encoder 4,762,310,656; SD3 VAE
 *    83,819,683; CLIP-L with projection 123,650,304);
 *  - a tiny random model (the fixture's configs) generates: finite MMDiT
 *    output, a deterministic image for a seed, another for another seed;
 *  - its T5 without a tokenizer encodes any prompt exactly as the empty
 *    prompt through the real tokenizer;
 *  - bad input: unknown presets, non-SD3 folders, mismatched configs. */
#include "sd_pipeline_ref.h"

#include "sd/sd_pipeline_internal.h"

#include <math.h>

typedef struct enum_check {
    const rb_st_set *st;
    size_t count;
    int64_t params;
    const char *label;
} enum_check;

static rb_status check_one(void *ctx, const char *name, int nd, const int64_t *shape, rb_error *err) {
    (void)err;
    enum_check *c = ctx;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    c->params += n;
    c->count++;
    if (!c->st) return RB_OK;
    const rb_st_tensor *t = rb_st_find(c->st, name);
    if (!t) fail_msg("%s: %s is not in the file", c->label, name);
    if (t->n_dims != nd) fail_msg("%s: %s has %d dims, the file %d", c->label, name, nd, t->n_dims);
    for (int d = 0; d < nd; d++)
        if (t->ne[nd - 1 - d] != shape[d])
            fail_msg("%s: %s dim %d is %lld, the file %lld", c->label, name, d, (long long)shape[d],
                     (long long)t->ne[nd - 1 - d]);
    return RB_OK;
}

static const char *pipe_path(char *buf, size_t cap, const char *pipe, const char *rest) {
    char rel[256];
    snprintf(rel, sizeof rel, "sd3/pipelines/%s%s%s", pipe, rest[0] ? "/" : "", rest);
    return tu_data(buf, cap, rel);
}

static void enum_vs_file(const char *pipe, const char *comp) {
    char path[1024], label[128];
    snprintf(label, sizeof label, "%s/%s", pipe, comp);
    const bool text = strncmp(comp, "text_encoder", 12) == 0;
    snprintf(label, sizeof label, "%s/%s", comp, text ? "model.safetensors" : "diffusion_pytorch_model.safetensors");
    rb_st_set *st = NULL;
    TU_OK(rb_st_open(pipe_path(path, sizeof path, pipe, label), &st, NULL));
    snprintf(label, sizeof label, "%s/%s", pipe, comp);
    enum_check c = {.st = st, .label = label};
    char rest[128];
    snprintf(rest, sizeof rest, "%s/config.json", comp);
    pipe_path(path, sizeof path, pipe, rest);
    if (strcmp(comp, "transformer") == 0) {
        rb_mmdit_config cfg;
        TU_OK(rb_mmdit_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_mmdit(&cfg, check_one, &c, NULL));
    } else if (strcmp(comp, "text_encoder_3") == 0) {
        rb_t5_config cfg;
        TU_OK(rb_t5_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_t5(&cfg, check_one, &c, NULL));
    } else if (text) {
        rb_clip_text_config cfg;
        TU_OK(rb_clip_text_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_clip(&cfg, check_one, &c, NULL));
    } else {
        rb_vae_config cfg;
        TU_OK(rb_vae_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_vae(&cfg, check_one, &c, NULL));
    }
    /* every name found with its shape, and as many as the file has: the same set */
    assert_int_equal(c.count, (size_t)rb_st_n_tensors(st));
    printf("  %-24s %zu tensors, %lld parameters: the file's exactly\n", label, c.count, (long long)c.params);
    rb_st_close(st);
}

static void test_enumeration_matches_files(void **state) {
    (void)state;
    static const char *const comps[] = {"transformer", "text_encoder_3", "vae", "text_encoder", "text_encoder_2"};
    for (size_t i = 0; i < sizeof comps / sizeof comps[0]; i++) enum_vs_file("sd3", comps[i]);
    enum_vs_file("sd35", "transformer"); /* qk-norm and dual attention */
}

/* Parameters (torch's parameters(): the pos_embed table is a buffer, not counted). */
static int64_t count_mmdit(bool sd35) {
    rb_mmdit_config c;
    sd_default_mmdit(sd35, &c);
    enum_check e = {0};
    TU_OK(sd_enum_mmdit(&c, check_one, &e, NULL));
    return e.params - c.pos_embed_max_size * c.pos_embed_max_size * c.heads * c.head_dim;
}

static void test_published_parameter_counts(void **state) {
    (void)state;
    assert_int_equal(count_mmdit(false), 2028328000);
    printf("  SD3.5-medium MMDiT: %lld parameters\n", (long long)count_mmdit(true));
    rb_t5_config t;
    sd_default_t5_xxl(&t);
    enum_check e = {0};
    TU_OK(sd_enum_t5(&t, check_one, &e, NULL));
    assert_int_equal(e.params, 4762310656);
    rb_vae_config v;
    sd_default_vae_sd3(&v);
    enum_check ev = {0};
    TU_OK(sd_enum_vae(&v, check_one, &ev, NULL));
    assert_int_equal(ev.params, 83819683);
    rb_clip_text_config l, g;
    sd_default_clip_sd3(&l, &g);
    enum_check el = {0}, eg = {0};
    TU_OK(sd_enum_clip(&l, check_one, &el, NULL));
    TU_OK(sd_enum_clip(&g, check_one, &eg, NULL));
    assert_int_equal(el.params, 123650304);
    assert_int_equal(eg.params, 694659840);
    /* the configs fit together as sd_sd3_finish requires */
    assert_int_equal(l.projection_dim + g.projection_dim, 2048);
    assert_int_equal(t.d_model, 4096);
    rb_sd_sched_config sc;
    TU_OK(sd_default_sched_sd3(&sc, NULL));
    assert_true(fabs(sc.shift - 3.0) < 1e-12);
}

/* ---- a tiny random model ---- */

static rb_backend *cpu(void) {
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    return be;
}

static rb_sd_model *tiny(rb_backend *be, uint64_t seed, rb_dtype act) {
    char dir[1024];
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.act_dtype = act;
    rb_sd_model *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_model_create_random_dir(pipe_path(dir, sizeof dir, "sd3", ""), be, &o, seed, &m, &err) != RB_OK)
        fail_msg("random tiny sd3: %s", err.msg);
    return m;
}

static uint8_t *draw(rb_sd_model *m, size_t *n) {
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a photo of a cat";
    p.width = p.height = 64;
    p.steps = 2;
    p.guidance_scale = 7.0f;
    p.max_sequence_length = 16;
    p.seed = 7;
    rb_sd_output out = {0};
    rb_error err;
    rb_error_clear(&err);
    if (rb_sd_generate(m, &p, NULL, &out, &err) != RB_OK) fail_msg("generate: %s", err.msg);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.sampler, RB_SD_SAMPLER_FLOW_EULER);
    assert_int_equal(out.latent_channels, 16);
    *n = (size_t)out.images[0].width * (size_t)out.images[0].height * 3;
    uint8_t *px = malloc(*n);
    assert_non_null(px);
    memcpy(px, out.images[0].data, *n);
    rb_sd_output_free(&out);
    return px;
}

static void test_tiny_random_model_runs(void **state) {
    (void)state;
    rb_backend *be = cpu();
    rb_sd_model *m = tiny(be, 1, RB_F32);
    rb_sd_model_info mi;
    rb_sd_model_get_info(m, &mi);
    assert_int_equal(mi.default_width, 64);
    rb_mmdit *dit = rb_sd_model_mmdit(m);
    assert_non_null(dit);
    assert_non_null(rb_sd_model_t5(m));
    const rb_mmdit_config *c = rb_mmdit_get_config(dit);
    /* one MMDiT step at batch 2: finite, not all zero */
    rb_tensor x, ctx, pooled, out;
    const int64_t xne[4] = {8, 8, c->in_channels, 2}, cne[3] = {c->joint_attention_dim, 77 + 16, 2},
                  pne[2] = {c->pooled_projection_dim, 2}, one[4] = {8, 8, c->out_channels, 2};
    TU_OK(rb_tensor_alloc(be, RB_F32, 4, xne, &x));
    TU_OK(rb_tensor_alloc(be, RB_F32, 3, cne, &ctx));
    TU_OK(rb_tensor_alloc(be, RB_F32, 2, pne, &pooled));
    TU_OK(rb_tensor_alloc(be, RB_F32, 4, one, &out));
    TU_OK(rb_fill(be, &x, 0.5f));
    TU_OK(rb_fill(be, &ctx, 0.1f));
    TU_OK(rb_fill(be, &pooled, -0.2f));
    const float ts[2] = {500.0f, 500.0f};
    rb_mmdit_inputs in = {.sample = &x, .context = &ctx, .pooled = &pooled, .timesteps = ts};
    TU_OK(rb_mmdit_forward(dit, &in, &out, NULL));
    const size_t n = (size_t)(8 * 8 * c->out_channels * 2);
    float *h = malloc(sizeof(float) * n);
    assert_non_null(h);
    TU_OK(rb_tensor_get(&out, h, sizeof(float) * n));
    double amax = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(h[i])) fail_msg("MMDiT output %zu is not finite", i);
        amax = fabs(h[i]) > amax ? fabs(h[i]) : amax;
    }
    assert_true(amax > 1e-3 && amax < 1e3);
    printf("  MMDiT step: max |v| %.3g\n", amax);
    free(h);
    rb_tensor_free(&x);
    rb_tensor_free(&ctx);
    rb_tensor_free(&pooled);
    rb_tensor_free(&out);
    /* images: the same for the same weights seed, another for another */
    size_t n1, n2, n3;
    uint8_t *a = draw(m, &n1);
    rb_sd_model *m2 = tiny(be, 1, RB_F32), *m3 = tiny(be, 2, RB_F32);
    uint8_t *b = draw(m2, &n2), *d = draw(m3, &n3);
    assert_int_equal(n1, n2);
    assert_int_equal(n1, n3);
    assert_memory_equal(a, b, n1);
    assert_memory_not_equal(a, d, n1);
    free(a);
    free(b);
    free(d);
    rb_sd_model_free(m2);
    rb_sd_model_free(m3);
    /* f16 activations, as bench-sd --act-dtype f16 */
    rb_sd_model *m4 = tiny(be, 1, RB_F16);
    uint8_t *e = draw(m4, &n1);
    free(e);
    rb_sd_model_free(m4);
    rb_sd_model_free(m);
    rb_backend_destroy(be);
}

static void test_t5_without_tokenizer_is_the_empty_prompt(void **state) {
    (void)state;
    rb_backend *be = cpu();
    rb_sd_model *m = tiny(be, 3, RB_F32);
    char dir[1024];
    rb_t5_text with = {.enc = rb_sd_model_t5(m)}, without = {.enc = rb_sd_model_t5(m)};
    TU_OK(rb_unigram_load_dir(pipe_path(dir, sizeof dir, "sd3", "tokenizer_3"), &with.tok, NULL));
    const int64_t L = 12, dm = rb_t5_get_config(with.enc)->d_model, n = dm * L;
    rb_tensor o;
    const int64_t ne[3] = {dm, L, 1};
    TU_OK(rb_tensor_alloc(be, RB_F32, 3, ne, &o));
    float *empty = malloc(sizeof(float) * (size_t)n), *none = malloc(sizeof(float) * (size_t)n),
          *cat = malloc(sizeof(float) * (size_t)n);
    assert_true(empty && none && cat);
    const char *pe[1] = {""}, *pc[1] = {"a photo of a cat"};
    int32_t ids[12];
    TU_OK(rb_t5_text_encode(&with, pe, 1, L, &o, ids, NULL));
    assert_int_equal(ids[0], 1); /* "</s>", then padding */
    for (int i = 1; i < 12; i++) assert_int_equal(ids[i], 0);
    TU_OK(rb_tensor_get(&o, empty, sizeof(float) * (size_t)n));
    TU_OK(rb_t5_text_encode(&without, pc, 1, L, &o, ids, NULL));
    assert_int_equal(ids[0], 1);
    TU_OK(rb_tensor_get(&o, none, sizeof(float) * (size_t)n));
    TU_OK(rb_t5_text_encode(&with, pc, 1, L, &o, NULL, NULL));
    TU_OK(rb_tensor_get(&o, cat, sizeof(float) * (size_t)n));
    assert_memory_equal(empty, none, sizeof(float) * (size_t)n);
    assert_memory_not_equal(empty, cat, sizeof(float) * (size_t)n);
    free(empty);
    free(none);
    free(cat);
    rb_tensor_free(&o);
    rb_unigram_free(with.tok);
    rb_sd_model_free(m);
    rb_backend_destroy(be);
}

static void test_bad_input(void **state) {
    (void)state;
    rb_backend *be = cpu();
    rb_sd_model *m = (rb_sd_model *)(uintptr_t)1;
    rb_error err;
    assert_int_equal(rb_sd_model_create_random("sd3", be, NULL, 1, &m, &err), RB_E_INVALID);
    assert_null(m);
    printf("  %s\n", err.msg);
    assert_int_equal(rb_sd_model_create_random_dir(NULL, be, NULL, 1, &m, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_model_create_random_dir("/nonexistent", be, NULL, 1, &m, &err), RB_E_UNSUPPORTED);
    printf("  %s\n", err.msg);
    /* a folder of another pipeline class */
    char tmp[256], p[512];
    assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "rbee_sd3r_"), 0);
    snprintf(p, sizeof p, "%s/model_index.json", tmp);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"_class_name\": \"StableDiffusionPipeline\"}", f);
    fclose(f);
    assert_int_equal(rb_sd_model_create_random_dir(tmp, be, NULL, 1, &m, &err), RB_E_UNSUPPORTED);
    assert_null(m);
    tu_tmpdir_remove(tmp);
    /* configs that do not fit together: a T5 narrower than the joint width, CLIP projections off the pooled width */
    sd3_random_cfg c;
    char dir[1024];
    TU_OK(rb_mmdit_config_load(pipe_path(dir, sizeof dir, "sd3", "transformer/config.json"), &c.mmdit, NULL));
    TU_OK(rb_t5_config_load(pipe_path(dir, sizeof dir, "sd3", "text_encoder_3/config.json"), &c.t5, NULL));
    TU_OK(rb_vae_config_load(pipe_path(dir, sizeof dir, "sd3", "vae/config.json"), &c.vae, NULL));
    TU_OK(rb_clip_text_config_load(pipe_path(dir, sizeof dir, "sd3", "text_encoder/config.json"), &c.clip[0], NULL));
    TU_OK(rb_clip_text_config_load(pipe_path(dir, sizeof dir, "sd3", "text_encoder_2/config.json"), &c.clip[1], NULL));
    sd3_random_cfg bad = c;
    bad.t5.d_model = c.mmdit.joint_attention_dim / 2;
    assert_int_equal(sd_random_sd3(&bad, "bad", be, NULL, pipe_path(dir, sizeof dir, "sd3", ""), 1, &m, &err),
                     RB_E_FORMAT);
    assert_null(m);
    printf("  %s\n", err.msg);
    bad = c;
    bad.clip[0].projection_dim += 1;
    assert_int_equal(sd_random_sd3(&bad, "bad", be, NULL, pipe_path(dir, sizeof dir, "sd3", ""), 1, &m, &err),
                     RB_E_FORMAT);
    printf("  %s\n", err.msg);
    bad = c;
    bad.mmdit.num_layers = 0; /* out of range: refused by the MMDiT itself */
    assert_int_equal(sd_random_sd3(&bad, "bad", be, NULL, pipe_path(dir, sizeof dir, "sd3", ""), 1, &m, &err),
                     RB_E_INVALID);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enumeration_matches_files),
        cmocka_unit_test(test_published_parameter_counts),
        cmocka_unit_test(test_tiny_random_model_runs),
        cmocka_unit_test(test_t5_without_tokenizer_is_the_empty_prompt),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
