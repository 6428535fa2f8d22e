/* Model loading, single files and random weights (folders:
 * test_sd_load_folders.c):
 *  - the tensor lists the random models are built from (sd_enum_*) equal,
 *    name for name and shape for shape, the diffusers files of every
 *    fixture component, and at the published configs they hold the
 *    published parameter counts (SD 1.5 UNet 859,520,964; SD 2.1 UNet
 *    865,910,724; SDXL UNet 2,567,463,684; VAE 83,653,863; CLIP ViT-L text
 *    123,060,480; OpenCLIP ViT-H text (23 layers) 340,387,840; bigG text with
 *    projection 694,659,840);
 *  - the single-file config inference reproduces the published UNet configs
 *    from the structure of real SD 1.5 / SD 2.1 / SDXL / refiner
 *    checkpoints (as sd_ldm reports it), including SDXL's
 *    addition_time_embed_dim 256 from the label_emb width;
 *  - the prediction rule of single files, the v_pred marker, and the
 *    --prediction override;
 *  - single files: without config_dir the tiny fixture cannot be inferred
 *    (clear error), a missing vocabulary is named. */
#include "sd_pipeline_ref.h"

#include "sd/sd_pipeline_internal.h"

/* ---- tensor enumeration against the fixture files ---- */

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
        if (t->ne[nd - 1 - d] != shape[d]) fail_msg("%s: %s dim %d is %lld, the file %lld", c->label, name, d,
                                                   (long long)shape[d], (long long)t->ne[nd - 1 - d]);
    return RB_OK;
}

static void enum_vs_file(const char *pipe, const char *comp) {
    char dir[256], path[1024], label[128];
    pipeline_dir(dir, sizeof dir, pipe);
    snprintf(label, sizeof label, "%s/%s", pipe, comp);
    const bool text = strncmp(comp, "text_encoder", 12) == 0;
    snprintf(path, sizeof path, "%s/%s/%s", dir, comp, text ? "model.safetensors" : "diffusion_pytorch_model.safetensors");
    rb_st_set *st = NULL;
    TU_OK(rb_st_open(path, &st, NULL));
    enum_check c = {.st = st, .label = label};
    snprintf(path, sizeof path, "%s/%s/config.json", dir, comp);
    if (text) {
        rb_clip_text_config cfg;
        TU_OK(rb_clip_text_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_clip(&cfg, check_one, &c, NULL));
    } else if (strcmp(comp, "vae") == 0) {
        rb_vae_config cfg;
        TU_OK(rb_vae_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_vae(&cfg, check_one, &c, NULL));
        /* decoder only: the encoder's tensors and quant_conv left out */
        enum_check d = {.label = label};
        cfg.decoder_only = true;
        TU_OK(sd_enum_vae(&cfg, check_one, &d, NULL));
        size_t n_enc = 0;
        for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
            const char *nm = rb_st_tensor_at(st, i)->name;
            n_enc += strncmp(nm, "encoder.", 8) == 0 || strncmp(nm, "quant_conv.", 11) == 0;
        }
        assert_int_equal(d.count, (size_t)rb_st_n_tensors(st) - n_enc);
    } else {
        rb_unet_config cfg;
        TU_OK(rb_unet_config_load(path, &cfg, NULL));
        TU_OK(sd_enum_unet(&cfg, check_one, &c, NULL));
    }
    /* every name found with its shape, and as many as the file has: the same set */
    assert_int_equal(c.count, (size_t)rb_st_n_tensors(st));
    printf("  %-28s %zu tensors, %lld parameters: the file's exactly\n", label, c.count, (long long)c.params);
    rb_st_close(st);
    tu_tmpdir_remove(dir);
}

static void test_enumeration_matches_files(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"sd15", "unet"},  {"sd15", "vae"},          {"sd15", "text_encoder"}, {"sd21v", "unet"},
        {"sd21v", "text_encoder"}, {"sdxl", "unet"}, {"sdxl", "text_encoder_2"}, {"sd15-inpaint", "unet"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) enum_vs_file(cases[i][0], cases[i][1]);
}

static int64_t count_unet(rb_sd_arch a) {
    rb_unet_config c;
    sd_default_unet(a, &c);
    enum_check e = {0};
    TU_OK(sd_enum_unet(&c, check_one, &e, NULL));
    return e.params;
}

static int64_t count_clip(void (*def)(rb_clip_text_config *)) {
    rb_clip_text_config c;
    def(&c);
    enum_check e = {0};
    TU_OK(sd_enum_clip(&c, check_one, &e, NULL));
    return e.params;
}

static void test_published_parameter_counts(void **state) {
    (void)state;
    assert_int_equal(count_unet(RB_SD_ARCH_SD1), 859520964);
    assert_int_equal(count_unet(RB_SD_ARCH_SD2), 865910724);
    assert_int_equal(count_unet(RB_SD_ARCH_SDXL), 2567463684);
    rb_vae_config v;
    sd_default_vae(RB_SD_ARCH_SD1, &v);
    enum_check e = {0};
    TU_OK(sd_enum_vae(&v, check_one, &e, NULL));
    assert_int_equal(e.params, 83653863);
    assert_int_equal(count_clip(sd_default_clip_l), 123060480);
    assert_int_equal(count_clip(sd_default_clip_h), 340387840);
    assert_int_equal(count_clip(sd_default_clip_g), 694659840);
    printf("  SDXL refiner UNet: %lld parameters\n", (long long)count_unet(RB_SD_ARCH_SDXL_REFINER));
}

/* ---- single-file config inference ---- */

static void shape_of(const rb_unet_config *c, int mid_depth, sd_ldm_unet_shape *s) {
    memset(s, 0, sizeof *s);
    s->n_levels = c->n_levels;
    s->layers_per_block = c->layers_per_block[0];
    for (int l = 0; l < c->n_levels; l++) {
        s->channels[l] = c->block_out_channels[l];
        s->attention[l] = c->down_cross_attn[l];
        s->depth[l] = c->down_cross_attn[l] ? c->transformer_layers[l] : 0;
    }
    s->mid_depth = mid_depth;
    s->linear_projection = c->use_linear_projection;
    s->in_channels = c->in_channels;
    s->out_channels = c->out_channels;
    s->context_dim = c->cross_attention_dim;
    s->adm_in_channels = c->add_text_time ? c->projection_class_embeddings_input_dim : 0;
}

static void test_unet_config_inference(void **state) {
    (void)state;
    static const struct { rb_sd_arch a; int mid; } k[] = {
        {RB_SD_ARCH_SD1, 1}, {RB_SD_ARCH_SD2, 1}, {RB_SD_ARCH_SDXL, 10}, {RB_SD_ARCH_SDXL_REFINER, 4}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        rb_unet_config pub, got;
        sd_default_unet(k[i].a, &pub);
        sd_ldm_unet_shape sh;
        shape_of(&pub, k[i].mid, &sh);
        /* what the tensors show is not all the config holds: start from something else */
        memset(&got, 0x5a, sizeof got);
        TU_OK(sd_unet_config_from_ldm(k[i].a, &sh, 1280, &got, NULL));
        assert_int_equal(got.n_levels, pub.n_levels);
        for (int l = 0; l < pub.n_levels; l++) {
            assert_int_equal(got.block_out_channels[l], pub.block_out_channels[l]);
            assert_int_equal(got.n_heads[l], pub.n_heads[l]);
            if (pub.down_cross_attn[l] || l == pub.n_levels - 1) /* attention levels and the middle block */
                assert_int_equal(got.transformer_layers[l], pub.transformer_layers[l]);
            assert_int_equal(got.down_cross_attn[l], pub.down_cross_attn[l]);
            assert_int_equal(got.up_cross_attn[l], pub.up_cross_attn[l]);
        }
        assert_int_equal(got.cross_attention_dim, pub.cross_attention_dim);
        assert_int_equal(got.use_linear_projection, pub.use_linear_projection);
        assert_int_equal(got.norm_num_groups, 32);
        assert_int_equal(got.time_embed_dim, pub.time_embed_dim);
        assert_int_equal(got.add_text_time, pub.add_text_time);
        assert_int_equal(got.addition_time_embed_dim, pub.addition_time_embed_dim);
        assert_int_equal(got.projection_class_embeddings_input_dim, pub.projection_class_embeddings_input_dim);
    }
    /* SDXL: 256 = (2816 - 1280) / 6; a width that is not pooled + 6 x n is refused */
    rb_unet_config pub, got;
    sd_default_unet(RB_SD_ARCH_SDXL, &pub);
    sd_ldm_unet_shape sh;
    shape_of(&pub, 10, &sh);
    TU_OK(sd_unet_config_from_ldm(RB_SD_ARCH_SDXL, &sh, 1280, &got, NULL));
    assert_int_equal(got.addition_time_embed_dim, 256);
    sh.adm_in_channels = 2817;
    rb_error err;
    assert_int_equal(sd_unet_config_from_ldm(RB_SD_ARCH_SDXL, &sh, 1280, &got, &err), RB_E_FORMAT);
    printf("  %s\n", err.msg);
    /* no label_emb in an SDXL checkpoint, or one in an SD 1.x */
    sh.adm_in_channels = 0;
    assert_int_equal(sd_unet_config_from_ldm(RB_SD_ARCH_SDXL, &sh, 1280, &got, &err), RB_E_FORMAT);
    sd_default_unet(RB_SD_ARCH_SD1, &pub);
    shape_of(&pub, 1, &sh);
    sh.adm_in_channels = 2816;
    assert_int_equal(sd_unet_config_from_ldm(RB_SD_ARCH_SD1, &sh, 1280, &got, &err), RB_E_FORMAT);
    /* a middle block deeper than the deepest attention level cannot be described */
    sd_default_unet(RB_SD_ARCH_SDXL, &pub);
    shape_of(&pub, 3, &sh);
    assert_int_equal(sd_unet_config_from_ldm(RB_SD_ARCH_SDXL, &sh, 1280, &got, &err), RB_E_UNSUPPORTED);
}

static void test_single_file_prediction_rule(void **state) {
    (void)state;
    /* SD 2.x single files default to v (diffusers' from_single_file: stable-diffusion-2-1) */
    assert_int_equal(sd_single_prediction(RB_SD_ARCH_SD2, false, RB_SD_PREDICT_AUTO, RB_SD_PRED_EPSILON), RB_SD_PRED_V);
    assert_int_equal(sd_single_prediction(RB_SD_ARCH_SD2, false, RB_SD_PREDICT_EPSILON, RB_SD_PRED_EPSILON),
                     RB_SD_PRED_EPSILON);
    assert_int_equal(sd_single_prediction(RB_SD_ARCH_SD1, false, RB_SD_PREDICT_AUTO, RB_SD_PRED_EPSILON),
                     RB_SD_PRED_EPSILON);
    assert_int_equal(sd_single_prediction(RB_SD_ARCH_SDXL, true, RB_SD_PREDICT_AUTO, RB_SD_PRED_EPSILON), RB_SD_PRED_V);
    assert_int_equal(sd_single_prediction(RB_SD_ARCH_SDXL, true, RB_SD_PREDICT_SAMPLE, RB_SD_PRED_EPSILON),
                     RB_SD_PRED_SAMPLE);
    assert_int_equal(sd_default_size(RB_SD_ARCH_SD2, RB_SD_PRED_V), 768);
    assert_int_equal(sd_default_size(RB_SD_ARCH_SD2, RB_SD_PRED_EPSILON), 512);
    assert_int_equal(sd_default_size(RB_SD_ARCH_SD1, RB_SD_PRED_EPSILON), 512);
    assert_int_equal(sd_default_size(RB_SD_ARCH_SDXL, RB_SD_PRED_EPSILON), 1024);
    rb_sd_predict_opt o;
    TU_OK(rb_sd_predict_parse("v", &o, NULL));
    assert_int_equal(o, RB_SD_PREDICT_V);
    TU_OK(rb_sd_predict_parse("epsilon", &o, NULL));
    assert_int_equal(o, RB_SD_PREDICT_EPSILON);
    rb_error err;
    assert_int_equal(rb_sd_predict_parse("x0", &o, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "epsilon"));
}

/* A copy of the single file with one more tensor named "v_pred". */
static void write_with_v_pred(const char *src, const char *dst) {
    size_t n;
    uint8_t *d = tu_read_file(src, &n);
    uint64_t hl = 0;
    memcpy(&hl, d, 8);
    json_error_t je;
    json_t *h = json_loadb((const char *)d + 8, (size_t)hl, 0, &je);
    assert_non_null(h);
    const size_t data_len = n - 8 - (size_t)hl;
    json_t *e = json_object(), *shape = json_array(), *off = json_array();
    json_array_append_new(shape, json_integer(1));
    json_array_append_new(off, json_integer((json_int_t)data_len));
    json_array_append_new(off, json_integer((json_int_t)data_len + 4));
    json_object_set_new(e, "dtype", json_string("F32"));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets", off);
    json_object_set_new(h, "v_pred", e);
    char *hs = json_dumps(h, JSON_COMPACT);
    size_t len = strlen(hs), padded = (len + 7) & ~(size_t)7;
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    uint64_t p8 = padded;
    fwrite(&p8, 8, 1, f);
    fwrite(hs, 1, len, f);
    for (size_t i = len; i < padded; i++) fputc(' ', f);
    fwrite(d + 8 + hl, 1, data_len, f);
    const float one = 1.0f;
    fwrite(&one, 4, 1, f);
    fclose(f);
    free(hs);
    json_decref(h);
    free(d);
}

static void test_single_file(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256], path[1024], tmp[256], vp[512];
    pipeline_dir(dir, sizeof dir, "sd15");
    tu_fixture(path, sizeof path, "diffusers/single_file/sd15.safetensors");
    rb_sd_model *m = NULL;
    rb_error err;
    /* the tiny fixture's widths and groups are not the published ones: no rule can infer them */
    assert_int_not_equal(rb_sd_model_load(path, be, NULL, &m, &err), RB_OK);
    assert_null(m);
    printf("  without config_dir: %s\n", err.msg);
    /* a vocabulary that does not exist is named */
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.vocab_path = "/nonexistent/bpe_simple_vocab_16e6.txt.gz";
    assert_int_equal(rb_sd_model_load(path, be, &o, &m, &err), RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/bpe_simple_vocab_16e6.txt.gz"));
    /* config_dir of another family */
    char xl[256];
    pipeline_dir(xl, sizeof xl, "sdxl");
    rb_sd_model_opts_init(&o);
    o.config_dir = xl;
    assert_int_equal(rb_sd_model_load(path, be, &o, &m, &err), RB_E_FORMAT);
    printf("  %s\n", err.msg);
    tu_tmpdir_remove(xl);
    /* the prediction override, and the v_pred marker */
    o.config_dir = dir;
    o.prediction = RB_SD_PREDICT_V;
    m = load_model(be, path, &o);
    rb_sd_model_info info;
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.prediction, RB_SD_PRED_V);
    rb_sd_model_free(m);
    o.prediction = RB_SD_PREDICT_AUTO;
    m = load_model(be, path, &o);
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.prediction, RB_SD_PRED_EPSILON);
    rb_sd_model_free(m);
    assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "rbee_sdl_"), 0);
    snprintf(vp, sizeof vp, "%s/marked.safetensors", tmp);
    write_with_v_pred(path, vp);
    m = load_model(be, vp, &o);
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.prediction, RB_SD_PRED_V);
    assert_string_equal(info.name, "marked");
    rb_sd_model_free(m);
    /* the VAE encoder left out */
    o.components = RB_SD_LOAD_TEXT | RB_SD_LOAD_UNET | RB_SD_LOAD_VAE_DECODER;
    m = load_model(be, path, &o);
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.components, o.components);
    rb_sd_model_free(m);
    tu_tmpdir_remove(tmp);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

/* The random SD 1.5 text encoder at its real size loads and encodes (the
 * UNet and VAE at real size are exercised by rbee bench-sd). */
static void test_random_model(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.components = RB_SD_LOAD_TEXT;
    o.weight_dtype = RB_F16;
    rb_sd_model *m = NULL;
    rb_error err;
    TU_OK(rb_sd_model_create_random("sd15", be, &o, 7, &m, &err));
    rb_sd_model_info info;
    rb_sd_model_get_info(m, &info);
    assert_string_equal(info.source, "random");
    assert_int_equal(info.arch, RB_SD_ARCH_SD1);
    assert_int_equal(info.default_width, 512);
    assert_int_equal(info.cross_attention_dim, 768);
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a photograph of an astronaut riding a horse";
    rb_sd_cond c;
    TU_OK(rb_sd_encode_prompt(m, &p, &c, &err));
    assert_int_equal(c.dim, 768);
    for (int64_t i = 0; i < c.rows * c.tokens * c.dim; i++) assert_true(isfinite(c.context[i]));
    rb_sd_cond_free(&c);
    rb_sd_model_free(m);
    assert_int_equal(rb_sd_model_create_random("sd3", be, &o, 7, &m, &err), RB_E_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.msg, "sd15"));
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enumeration_matches_files), cmocka_unit_test(test_published_parameter_counts),
        cmocka_unit_test(test_unet_config_inference),     cmocka_unit_test(test_single_file_prediction_rule),
        cmocka_unit_test(test_single_file),               cmocka_unit_test(test_random_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
