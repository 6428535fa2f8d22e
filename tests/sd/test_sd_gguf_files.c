/* SD GGUF files as other tools write them, and malformed ones:
 *  - ComfyUI-GGUF (city96) UNet-only files, built here by the rules of its
 *    tools/convert.py and llama.cpp patch from the sd15 single file (the
 *    UNet's LDM names without model.diffusion_model., general.architecture
 *    sd1, 1-D and small tensors f32, the rest f16, tensors whose last
 *    dimension is not a multiple of 256 flattened to rows of 256 with
 *    comfy.gguf.orig_shape.<name>, then q8_0 for everything but the input /
 *    output convolutions and the time embedding): they open with their
 *    structure read from the tensors, and with the sd15 folder's configs the
 *    f16 file gives exactly the folder's UNet loaded with f16 weights, the
 *    q8_0 file the diffusers output within the q8_0 bound; an old-style file
 *    in diffusers' names loads too, and as a model (rb_sd_model_load) is
 *    refused for its missing text encoder;
 *  - stable-diffusion.cpp files (no metadata at all; names as in the
 *    checkpoint, or with --convert-name its internal text-encoder names;
 *    its quantization rules, which also quantize norm weights) of the sdxl
 *    fixture: with the folder's configs they give the diffusers outputs;
 *  - an OpenCLIP encoder whose text_projection and in_proj are quantized;
 *  - malformed files: truncated anywhere, unknown architectures, missing or
 *    mis-shaped tensors, bad rbee.sd.* values, configs without tensors, bad
 *    comfy.gguf.orig_shape entries, no SD tensors at all: clean errors. */
#include "test_sd_gguf_util.h"

#include "rbee/sd_pipeline.h"

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_tmp, sizeof g_tmp, "rbee_sdg_");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_tmp);
}

static double rel_l2(const float *a, const float *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* ---- writing GGUF files tensor by tensor ---- */

/* One tensor on its way out: values in f32, written as dtype with shape ne. */
typedef struct wt {
    char name[400];
    rb_dtype dtype;
    int nd;
    int64_t ne[4];
    float *x;
    int64_t n;
} wt;

static void add_tensor(rb_gguf_writer *w, const wt *t) {
    const int64_t rows = t->n / t->ne[0];
    const size_t bytes = rb_dtype_row_size(t->dtype, t->ne[0]) * (size_t)rows;
    void *enc = malloc(bytes + 1);
    assert_non_null(enc);
    TU_OK(rb_quantize_rows(t->dtype, t->x, enc, rows, t->ne[0]));
    TU_OK(rb_gguf_writer_add_tensor(w, t->name, t->dtype, t->nd, t->ne, enc, bytes));
    free(enc);
}

static void write_out(rb_gguf_writer *w, const char *path) {
    rb_error err;
    rb_error_clear(&err);
    if (rb_gguf_writer_write(w, path, 0, &err) != RB_OK) fail_msg("%s", err.msg);
    rb_gguf_writer_free(w);
}

/* Rewrites the tensors of a GGUF file: keep_kv copies the metadata but the
 * keys starting with skip (NULL: none); edit may rename, retype, reshape or
 * drop (return false) each tensor; extra adds keys. */
typedef bool (*edit_fn)(wt *t, rb_gguf_writer *w, void *ud);

static void rewrite(const char *in, const char *out, bool keep_kv, const char *skip, edit_fn edit, void *ud,
                    void (*extra)(rb_gguf_writer *w)) {
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(in, &g, NULL));
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    if (keep_kv) TU_OK(rb_gguf_writer_copy_kv(w, g, skip));
    if (extra) extra(w);
    for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(g, i);
        wt t = {.dtype = ti->dtype, .nd = ti->n_dims};
        FMT(t.name, "%.*s", (int)ti->name.len, ti->name.ptr);
        memcpy(t.ne, ti->ne, sizeof t.ne);
        t.n = ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3];
        t.x = malloc(sizeof(float) * (size_t)t.n + 1);
        assert_non_null(t.x);
        TU_OK(rb_dequantize_row(ti->dtype, ti->data, t.x, t.n));
        if (!edit || edit(&t, w, ud)) add_tensor(w, &t);
        free(t.x);
    }
    rb_gguf_close(g);
    write_out(w, out);
}

/* ---- ComfyUI-GGUF (city96) UNet files ---- */

/* The rules of ComfyUI-GGUF's convert.py (sd1: shape_fix) and, for q8_0,
 * its llama.cpp patch (image models keep the input and output convolutions
 * and the time / label embeddings as they are). */
static void write_city96(const char *out, bool q8) {
    char ck[1024];
    rb_st_set *s = NULL;
    TU_OK(rb_st_open(tu_fixture(ck, sizeof ck, "diffusers/single_file/sd15.safetensors"), &s, NULL));
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_set_str(w, "general.architecture", "sd1"));
    TU_OK(rb_gguf_writer_set_u32(w, "general.quantization_version", 2));
    TU_OK(rb_gguf_writer_set_u32(w, "general.file_type", q8 ? 7 : 1));
    static const char pfx[] = "model.diffusion_model.";
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *st = rb_st_tensor_at(s, i);
        if (!starts(st->name, pfx)) continue;
        wt t = {.nd = st->n_dims};
        FMT(t.name, "%s", st->name + sizeof pfx - 1);
        memcpy(t.ne, st->ne, sizeof t.ne);
        t.n = (int64_t)(st->nbytes / 4);
        t.x = malloc(st->nbytes + 1);
        memcpy(t.x, st->data, st->nbytes);
        t.dtype = t.nd == 1 || t.n <= 1024 ? RB_F32 : RB_F16;
        if (t.dtype == RB_F16)
            for (int64_t k = 0; k < t.n; k++) t.x[k] = rb_f16_to_f32(rb_f32_to_f16(t.x[k]));
        if (t.nd > 1 && t.n >= 512 && t.n % 256 == 0 && t.ne[0] % 256 != 0) {
            char key[512];
            FMT(key, "comfy.gguf.orig_shape.%s", t.name);
            int32_t torch[4];
            for (int d = 0; d < t.nd; d++) torch[d] = (int32_t)t.ne[t.nd - 1 - d];
            TU_OK(rb_gguf_writer_set_arr(w, key, RB_GGUF_INT32, torch, (uint64_t)t.nd));
            t.nd = 2;
            t.ne[0] = 256;
            t.ne[1] = t.n / 256;
            t.ne[2] = t.ne[3] = 1;
        }
        const bool keep = !strcmp(t.name, "input_blocks.0.0.weight") || !strcmp(t.name, "out.2.weight") ||
                          starts(t.name, "time_embed.");
        if (q8 && t.dtype == RB_F16 && !keep && t.ne[0] % 32 == 0) t.dtype = RB_Q8_0;
        add_tensor(w, &t);
        free(t.x);
    }
    rb_st_close(s);
    write_out(w, out);
}

static void test_city96_unet(void **state) {
    (void)state;
    char path[600], dir[512];
    make_pipeline(dir, sizeof dir, "sd15");
    sd_gguf_configs folder;
    TU_OK(sd_convert_folder_configs(dir, &folder, NULL));
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *ref = ref_open("sd15", "denoiser_call.safetensors");
    for (int q8 = 0; q8 < 2; q8++) {
        FMT(path, "%s/city96-%s.gguf", g_tmp, q8 ? "q8_0" : "f16");
        write_city96(path, q8);
        sd_gguf *f = NULL;
        rb_error err;
        rb_error_clear(&err);
        if (sd_gguf_open(path, &f, &err) != RB_OK) fail_msg("%s", err.msg);
        assert_true(f->unet_only);
        assert_string_equal(f->arch, "sd1");
        assert_int_equal(f->cfg.family, SD_FAMILY_SD1);
        assert_false(f->cfg.exact);
        assert_true(f->cfg.has_unet);
        assert_false(f->cfg.has_vae || f->cfg.has_text);
        /* the structure read from the tensors = the folder's */
        const rb_unet_config *d = &f->cfg.unet, *c = &folder.unet;
        assert_int_equal(d->n_levels, c->n_levels);
        for (int l = 0; l < c->n_levels; l++) {
            assert_int_equal(d->block_out_channels[l], c->block_out_channels[l]);
            assert_int_equal(d->layers_per_block[l], c->layers_per_block[l]);
            assert_int_equal(d->down_cross_attn[l], c->down_cross_attn[l]);
            assert_int_equal(d->up_cross_attn[l], c->up_cross_attn[l]);
            assert_int_equal(d->n_heads[l], c->n_heads[l]); /* SD 1.x: 8 heads, as the fixture */
            if (c->down_cross_attn[l]) assert_int_equal(d->transformer_layers[l], c->transformer_layers[l]);
        }
        assert_int_equal(d->in_channels, c->in_channels);
        assert_int_equal(d->out_channels, c->out_channels);
        assert_int_equal(d->cross_attention_dim, c->cross_attention_dim);
        assert_int_equal(d->use_linear_projection, c->use_linear_projection);
        assert_int_equal(d->time_embed_dim, c->time_embed_dim);
        assert_int_equal(d->mid_block, c->mid_block);
        assert_int_equal(d->add_text_time, c->add_text_time);
        assert_int_equal(d->norm_num_groups, 32); /* the published value; the fixture has 8 */
        /* a flattened tensor has its logical shape again */
        const rb_st_tensor *t = sd_name_map_find(&f->ldm.unet, "down_blocks.0.resnets.0.conv1.weight");
        assert_non_null(t);
        assert_int_equal(t->n_dims, 4);
        assert_int_equal(t->ne[0], 3);
        assert_int_equal(t->ne[3], 16);
        assert_int_equal(t->dtype, q8 ? RB_Q8_0 : RB_F16);
        /* the published configs do not fit the fixture's widths */
        sd_gguf_model m;
        assert_int_equal(sd_gguf_load_from(f, be, NULL, 0, &m, &err), RB_E_UNSUPPORTED);
        printf("  %s\n", err.msg);
        assert_non_null(strstr(err.msg, "norm_num_groups"));
        TU_OK(sd_gguf_use_configs(f, &folder, NULL));
        const rb_sd_load_opts o16 = {.weight_dtype = RB_F16};
        TU_OK(sd_gguf_load_from(f, be, q8 ? NULL : &o16, 0, &m, NULL));
        assert_non_null(m.unet);
        assert_null(m.vae);
        int64_t n;
        float *o = denoiser_call(m.unet, be, ref, 0, &n);
        if (!q8) { /* f16: exactly the folder's UNet with f16 weights */
            char p[700];
            FMT(p, "%s/unet", dir);
            rb_unet *u = NULL;
            TU_OK(rb_unet_load(p, be, &o16, &u, NULL));
            float *fo = denoiser_call(u, be, ref, 0, &n);
            expect_close(o, fo, n, 0.0, "city96 f16 UNet vs the folder's with f16 weights");
            free(fo);
            rb_unet_free(u);
        } else {
            const double e = rel_l2(o, ref_f32(ref, "call0.out", NULL), n);
            printf("  city96 q8_0 UNet: rel L2 error %.3g against diffusers (bound 1e-2)\n", e);
            assert_true(e <= 1e-2);
        }
        free(o);
        sd_gguf_model_free(&m);
        sd_gguf_unref(f);
    }
    rb_st_close(ref);
    /* an old-style file in diffusers' names */
    char src[1024];
    FMT(src, "%s/unet/diffusion_pytorch_model.safetensors", dir);
    rb_st_set *s = NULL;
    TU_OK(rb_st_open(src, &s, NULL));
    rb_gguf_writer *w = NULL;
    TU_OK(rb_gguf_writer_create(&w, NULL));
    TU_OK(rb_gguf_writer_set_str(w, "general.architecture", "sd1"));
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        TU_OK(rb_gguf_writer_add_tensor(w, t->name, RB_F32, t->n_dims, t->ne, t->data, t->nbytes));
    }
    rb_st_close(s);
    FMT(path, "%s/diffusers-names.gguf", g_tmp);
    write_out(w, path);
    sd_gguf *f = NULL;
    TU_OK(sd_gguf_open(path, &f, NULL));
    assert_true(f->unet_only);
    TU_OK(sd_gguf_use_configs(f, &folder, NULL));
    sd_gguf_model m;
    TU_OK(sd_gguf_load_from(f, be, NULL, SD_GGUF_UNET, &m, NULL));
    ref = ref_open("sd15", "denoiser_call.safetensors");
    int64_t n;
    float *o = denoiser_call(m.unet, be, ref, 2, &n);
    expect_close(o, ref_f32(ref, "call2.out", NULL), n, 1e-5, "UNet in diffusers' names");
    free(o);
    rb_st_close(ref);
    sd_gguf_model_free(&m);
    sd_gguf_unref(f);
    /* a UNet alone is no pipeline: rb_sd_model_load says what is missing */
    rb_sd_model *sm = (rb_sd_model *)1;
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(rb_sd_model_load(path, be, NULL, &sm, &err), RB_E_UNSUPPORTED);
    assert_null(sm);
    assert_non_null(strstr(err.msg, "the file has no text_encoder"));
    sd_gguf_configs_free(&folder);
    rb_backend_destroy(be);
    tu_tmpdir_remove(dir);
}

/* ---- stable-diffusion.cpp files ---- */

/* sd.cpp's quantization rule (ModelLoader::tensor_should_be_converted):
 * rows of whole blocks, not a bias, not time_embed / label_emb, no
 * "embedding" in the name (norm weights are quantized too). */
static bool sdcpp_q8(wt *t, rb_gguf_writer *w, void *ud) {
    (void)w;
    (void)ud;
    const size_t n = strlen(t->name);
    if (t->ne[0] % 32 == 0 && !(n > 5 && !strcmp(t->name + n - 5, ".bias")) && !strstr(t->name, "time_embed.") &&
        !strstr(t->name, "label_emb.") && !strstr(t->name, "embedding"))
        t->dtype = RB_Q8_0;
    return true;
}

/* --convert-name: the text encoders in sd.cpp's internal names. */
static bool sdcpp_names(wt *t, rb_gguf_writer *w, void *ud) {
    (void)w;
    (void)ud;
    char n[400];
    static const char l[] = "conditioner.embedders.0.transformer.", g[] = "conditioner.embedders.1.model.";
    if (starts(t->name, l)) {
        FMT(n, "cond_stage_model.transformer.%s", t->name + sizeof l - 1);
        memcpy(t->name, n, sizeof n);
        return true;
    }
    if (!starts(t->name, g)) return true;
    const char *r = t->name + sizeof g - 1;
    static const char hf[] = "cond_stage_model.1.transformer.text_model.";
    static const struct { const char *from, *to; } whole[] = {
        {"token_embedding.weight", "embeddings.token_embedding.weight"},
        {"positional_embedding", "embeddings.position_embedding.weight"},
        {"ln_final.weight", "final_layer_norm.weight"},
        {"ln_final.bias", "final_layer_norm.bias"},
        {"text_projection", "text_projection"},
    };
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (!strcmp(r, whole[i].from)) {
            FMT(n, "%s%s", hf, whole[i].to);
            memcpy(t->name, n, sizeof n);
            return true;
        }
    static const struct { const char *from, *to; } part[] = {
        {"attn.in_proj_weight", "self_attn.in_proj.weight"}, {"attn.in_proj_bias", "self_attn.in_proj.bias"},
        {"attn.out_proj.", "self_attn.out_proj."},           {"ln_1.", "layer_norm1."},
        {"ln_2.", "layer_norm2."},                           {"mlp.c_fc.", "mlp.fc1."},
        {"mlp.c_proj.", "mlp.fc2."},
    };
    if (!starts(r, "transformer.resblocks.")) fail_msg("unexpected %s", t->name);
    const char *k = r + 22, *dot = strchr(k, '.');
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
        if (starts(dot + 1, part[i].from)) {
            FMT(n, "%sencoder.layers.%.*s.%s%s", hf, (int)(dot - k), k, part[i].to, dot + 1 + strlen(part[i].from));
            memcpy(t->name, n, sizeof n);
            return true;
        }
    fail_msg("unexpected %s", t->name);
    return false;
}

static void test_sdcpp_files(void **state) {
    (void)state;
    char f32[512], dir[512], path[600];
    convert_pipe(f32, sizeof f32, g_tmp, "sdxl", RB_F32);
    make_pipeline(dir, sizeof dir, "sdxl");
    sd_gguf_configs folder;
    TU_OK(sd_convert_folder_configs(dir, &folder, NULL));
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_st_set *dref = ref_open("sdxl", "denoiser_call.safetensors"), *tref = ref_open("sdxl", "text.safetensors");
    static const char *const kinds[3] = {"names as in the checkpoint", "--convert-name", "q8_0 by sd.cpp's rule"};
    for (int k = 0; k < 3; k++) {
        FMT(path, "%s/sdcpp-%d.gguf", g_tmp, k);
        rewrite(f32, path, false, NULL, k == 1 ? sdcpp_names : k == 2 ? sdcpp_q8 : NULL, NULL, NULL);
        sd_gguf *f = NULL;
        rb_error err;
        rb_error_clear(&err);
        if (sd_gguf_open(path, &f, &err) != RB_OK) fail_msg("%s", err.msg);
        assert_string_equal(f->arch, "");
        assert_int_equal(f->cfg.family, SD_FAMILY_SDXL);
        assert_false(f->cfg.exact);
        sd_gguf_model m;
        assert_int_equal(sd_gguf_load_from(f, be, NULL, 0, &m, &err), RB_E_UNSUPPORTED);
        printf("  %s: %s\n", kinds[k], err.msg);
        assert_non_null(strstr(err.msg, "needs its config"));
        TU_OK(sd_gguf_use_configs(f, &folder, NULL));
        TU_OK(sd_gguf_load_from(f, be, NULL, 0, &m, NULL));
        assert_non_null(m.text);
        assert_non_null(m.text_2);
        int64_t n;
        float *o = denoiser_call(m.unet, be, dref, 0, &n);
        char what[160];
        FMT(what, "sd.cpp file (%s): UNet call0", kinds[k]);
        if (k < 2) {
            expect_close(o, ref_f32(dref, "call0.out", NULL), n, 1e-5, what);
        } else {
            const double e = rel_l2(o, ref_f32(dref, "call0.out", NULL), n);
            printf("  %-58s rel L2 %.3g (bound 1e-2)\n", what, e);
            assert_true(e <= 1e-2);
        }
        free(o);
        float *pool = NULL;
        float *h = text_encode(m.text_2, be, tref, "tokenizer_2", -1, &pool);
        const int64_t per = 77 * rb_clip_text_get_config(m.text_2)->hidden_size;
        FMT(what, "sd.cpp file (%s): text_encoder_2 prompt", kinds[k]);
        if (k < 2) {
            expect_close(h + per, ref_f32(tref, "prompt.text_encoder_2.last_hidden_state", NULL), per, 1e-5, what);
            expect_close(pool + 20, ref_f32(tref, "prompt.text_encoder_2.text_embeds", NULL), 20, 1e-5, what);
        }
        free(h);
        free(pool);
        sd_gguf_model_free(&m);
        sd_gguf_unref(f);
    }
    /* the same in one call, with the configs' folder */
    FMT(path, "%s/sdcpp-0.gguf", g_tmp);
    sd_gguf_model m;
    TU_OK(sd_gguf_load(path, dir, be, NULL, SD_GGUF_UNET, &m, NULL));
    int64_t n;
    float *o = denoiser_call(m.unet, be, dref, 1, &n);
    expect_close(o, ref_f32(dref, "call1.out", NULL), n, 1e-5, "sd.cpp file loaded with config_dir: UNet call1");
    free(o);
    sd_gguf_model_free(&m);
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(sd_gguf_load(path, g_tmp, be, NULL, 0, &m, &err), RB_E_NOT_FOUND);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "config folder"));
    rb_st_close(dref);
    rb_st_close(tref);
    sd_gguf_configs_free(&folder);
    rb_backend_destroy(be);
    tu_tmpdir_remove(dir);
}

/* ---- an OpenCLIP encoder with quantized projections ---- */

static void test_quantized_open_clip(void **state) {
    (void)state;
    const int64_t D = 64, F = 256, V = 100, P = 64;
    tu_rng r;
    tu_rng_seed(&r, 3);
    rb_gguf_writer *w[2];
    static const char pfx[] = "conditioner.embedders.0.model.";
    struct { const char *name; int nd; int64_t ne0, ne1; bool q; float scale, mean; } k[] = {
        {"token_embedding.weight", 2, D, V, true, 1.0f, 0.0f},
        {"positional_embedding", 2, D, 77, false, 0.1f, 0.0f},
        {"ln_final.weight", 1, D, 1, false, 0.1f, 1.0f},
        {"ln_final.bias", 1, D, 1, false, 0.1f, 0.0f},
        {"text_projection", 2, P, D, true, 0.125f, 0.0f},
        {"transformer.resblocks.0.ln_1.weight", 1, D, 1, false, 0.1f, 1.0f},
        {"transformer.resblocks.0.ln_1.bias", 1, D, 1, false, 0.1f, 0.0f},
        {"transformer.resblocks.0.attn.in_proj_weight", 2, D, 3 * D, true, 0.125f, 0.0f},
        {"transformer.resblocks.0.attn.in_proj_bias", 1, 3 * D, 1, false, 0.05f, 0.0f},
        {"transformer.resblocks.0.attn.out_proj.weight", 2, D, D, true, 0.125f, 0.0f},
        {"transformer.resblocks.0.attn.out_proj.bias", 1, D, 1, false, 0.05f, 0.0f},
        {"transformer.resblocks.0.ln_2.weight", 1, D, 1, false, 0.1f, 1.0f},
        {"transformer.resblocks.0.ln_2.bias", 1, D, 1, false, 0.1f, 0.0f},
        {"transformer.resblocks.0.mlp.c_fc.weight", 2, D, F, true, 0.125f, 0.0f},
        {"transformer.resblocks.0.mlp.c_fc.bias", 1, F, 1, false, 0.05f, 0.0f},
        {"transformer.resblocks.0.mlp.c_proj.weight", 2, F, D, true, 0.0625f, 0.0f},
        {"transformer.resblocks.0.mlp.c_proj.bias", 1, D, 1, false, 0.05f, 0.0f},
    };
    for (int v = 0; v < 2; v++) TU_OK(rb_gguf_writer_create(&w[v], NULL));
    float *proj = NULL;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        wt t = {.nd = k[i].nd, .ne = {k[i].ne0, k[i].ne1, 1, 1}, .n = k[i].ne0 * k[i].ne1};
        FMT(t.name, "%s%s", pfx, k[i].name);
        t.x = malloc(sizeof(float) * (size_t)t.n);
        for (int64_t j = 0; j < t.n; j++) t.x[j] = k[i].mean + k[i].scale * tu_rng_normal(&r);
        if (k[i].q) { /* the values q8_0 keeps, in both files */
            void *b = malloc(rb_dtype_row_size(RB_Q8_0, t.n));
            TU_OK(rb_quantize_row(RB_Q8_0, t.x, b, t.n));
            TU_OK(rb_dequantize_row(RB_Q8_0, b, t.x, t.n));
            free(b);
        }
        for (int v = 0; v < 2; v++) {
            t.dtype = v == 1 && k[i].q ? RB_Q8_0 : RB_F32;
            add_tensor(w[v], &t);
        }
        if (!strcmp(k[i].name, "text_projection")) proj = t.x;
        else free(t.x);
    }
    char path[2][600];
    for (int v = 0; v < 2; v++) {
        FMT(path[v], "%s/openclip-%d.gguf", g_tmp, v);
        write_out(w[v], path[v]);
    }
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    float *out[2];
    for (int v = 0; v < 2; v++) {
        sd_gguf *f = NULL;
        TU_OK(sd_gguf_open(path[v], &f, NULL));
        assert_int_equal(f->cfg.family, SD_FAMILY_SDXL_REFINER);
        const rb_clip_text_config *c = &f->cfg.text_2;
        assert_true(f->cfg.has_text_2);
        assert_false(f->cfg.has_text);
        assert_int_equal(c->hidden_size, D);
        assert_int_equal(c->n_heads, 1);
        assert_int_equal(c->n_layers, 1);
        assert_int_equal(c->vocab_size, V);
        assert_true(c->with_projection);
        assert_int_equal(c->projection_dim, P);
        assert_int_equal(c->act, RB_CLIP_ACT_GELU);
        /* the projection: dequantized, transposed to the linear layout */
        const rb_st_tensor *t = sd_name_map_find(&f->ldm.text2, "text_projection.weight");
        assert_non_null(t);
        assert_int_equal(t->dtype, RB_F32);
        const float *pw = t->data;
        for (int64_t d = 0; d < D; d++)
            for (int64_t p = 0; p < P; p++) assert_true(pw[p * D + d] == proj[d * P + p]);
        /* q, k, v: row views of the fused projection in its stored format */
        t = sd_name_map_find(&f->ldm.text2, "text_model.encoder.layers.0.self_attn.k_proj.weight");
        assert_non_null(t);
        assert_int_equal(t->dtype, v ? RB_Q8_0 : RB_F32);
        assert_int_equal(t->ne[1], D);
        sd_gguf_model m;
        TU_OK(sd_gguf_load_from(f, be, NULL, 0, &m, NULL));
        int32_t ids[2 * 77];
        for (int i = 0; i < 2 * 77; i++) ids[i] = i % 77 == 0 ? 1 : i % 77 > 10 ? 99 : (int32_t)(i % 50);
        rb_tensor h = dev_tensor(be, D, 77, 2, 1, NULL);
        rb_clip_text_outputs o = {.last_hidden = &h};
        TU_OK(rb_clip_text_encode(m.text_2, ids, 77, 2, &o, NULL));
        out[v] = dev_read(&h);
        rb_tensor_free(&h);
        sd_gguf_model_free(&m);
        sd_gguf_unref(f);
    }
    const double e = rel_l2(out[1], out[0], 2 * 77 * D);
    printf("  OpenCLIP with q8_0 projections vs the same values in f32: rel L2 %.3g (bound 1e-2)\n", e);
    assert_true(e <= 1e-2); /* only the activations' q8_0 rounding in the products */
    assert_true(e > 0.0);
    free(out[0]);
    free(out[1]);
    free(proj);
    rb_backend_destroy(be);
}

/* ---- malformed files ---- */

static void expect_open_fails(const char *path, rb_status code, const char *needle) {
    sd_gguf *f = NULL;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = sd_gguf_open(path, &f, &err);
    printf("  %s\n", err.msg);
    if (s != code || !strstr(err.msg, needle))
        fail_msg("expected %s with \"%s\", got %s: %s", rb_status_str(code), needle, rb_status_str(s), err.msg);
    assert_null(f);
}

static void expect_load_fails(const char *path, rb_status code, const char *needle) {
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    sd_gguf_model m;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = sd_gguf_load(path, NULL, be, NULL, 0, &m, &err);
    printf("  %s\n", err.msg);
    if (s != code || !strstr(err.msg, needle))
        fail_msg("expected %s with \"%s\", got %s: %s", rb_status_str(code), needle, rb_status_str(s), err.msg);
    assert_null(m.unet);
    assert_null(m.vae);
    rb_backend_destroy(be);
}

static const char *g_drop;
static bool drop(wt *t, rb_gguf_writer *w, void *ud) {
    (void)w;
    (void)ud;
    return !starts(t->name, g_drop);
}

static const char *g_key;
static void set_arch_flux(rb_gguf_writer *w) { TU_OK(rb_gguf_writer_set_str(w, "general.architecture", "flux")); }
static void set_arch_u32(rb_gguf_writer *w) { TU_OK(rb_gguf_writer_set_u32(w, "general.architecture", 1)); }
static void set_ctx(rb_gguf_writer *w) { TU_OK(rb_gguf_writer_set_i64(w, "rbee.sd.unet.cross_attention_dim", 24)); }
static void set_heads0(rb_gguf_writer *w) {
    const int64_t h[3] = {8, 0, 8};
    TU_OK(rb_gguf_writer_set_arr(w, "rbee.sd.unet.num_heads", RB_GGUF_INT64, h, 3));
}
static void set_family(rb_gguf_writer *w) { TU_OK(rb_gguf_writer_set_str(w, "rbee.sd.family", "sd9")); }
static void set_eps_str(rb_gguf_writer *w) { TU_OK(rb_gguf_writer_set_str(w, "rbee.sd.vae.norm_num_groups", "8")); }
static void set_shape_str(rb_gguf_writer *w) {
    const char *s[2] = {"a", "b"};
    TU_OK(rb_gguf_writer_set_arr_str(w, "comfy.gguf.orig_shape.model.diffusion_model.out.2.weight", s, 2));
}
static void set_shape_count(rb_gguf_writer *w) {
    const int32_t s[4] = {4, 16, 3, 2};
    TU_OK(rb_gguf_writer_set_arr(w, "comfy.gguf.orig_shape.model.diffusion_model.out.2.weight", RB_GGUF_INT32, s, 4));
}

static void test_malformed(void **state) {
    (void)state;
    char good[512], bad[600];
    convert_pipe(good, sizeof good, g_tmp, "sd15", RB_F16);
    FMT(bad, "%s/bad.gguf", g_tmp);
    /* truncated anywhere: header, metadata, tensor infos, data */
    size_t size;
    uint8_t *img = tu_read_file(good, &size);
    int n_cut = 0;
    for (size_t cut = 0; cut < size; cut += cut < 4096 ? 97 : size / 23) {
        sd_gguf *f = NULL;
        rb_error err;
        rb_error_clear(&err);
        rb_status s = sd_gguf_open_memory(img, cut, &f, &err);
        if (s != RB_E_FORMAT) fail_msg("cut at %zu of %zu: %s (%s)", cut, size, rb_status_str(s), err.msg);
        /* also without an error record (the GGUF reader once took a NULL one for success) */
        if (sd_gguf_open_memory(img, cut, &f, NULL) != RB_E_FORMAT || f) fail_msg("cut at %zu accepted", cut);
        n_cut++;
    }
    printf("  %d truncations rejected\n", n_cut);
    write_file(bad, img, size / 2);
    assert_false(sd_convert_is_sd_gguf(bad));
    expect_open_fails(bad, RB_E_FORMAT, "outside the data section");
    free(img);
    /* architectures */
    rewrite(good, bad, true, "general.architecture", NULL, NULL, set_arch_flux);
    expect_open_fails(bad, RB_E_UNSUPPORTED, "general.architecture 'flux'");
    rewrite(good, bad, true, "general.architecture", NULL, NULL, set_arch_u32);
    expect_open_fails(bad, RB_E_FORMAT, "not a string");
    /* no SD tensors */
    g_drop = "";
    rewrite(good, bad, true, "rbee.", drop, NULL, NULL);
    expect_open_fails(bad, RB_E_FORMAT, "no Stable Diffusion tensors");
    /* a tensor missing, a component's tensors missing while its config is there */
    g_drop = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight";
    rewrite(good, bad, true, NULL, drop, NULL, NULL);
    expect_load_fails(bad, RB_E_FORMAT,
                      "missing tensor 'down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight'");
    g_drop = "first_stage_model.";
    rewrite(good, bad, true, NULL, drop, NULL, NULL);
    expect_open_fails(bad, RB_E_FORMAT, "rbee.sd.vae.* config present but no tensors");
    /* configs that do not match the tensors, or are out of range */
    g_key = NULL;
    rewrite(good, bad, true, "rbee.sd.unet.cross_attention_dim", NULL, NULL, set_ctx);
    expect_load_fails(bad, RB_E_FORMAT, "expected [16, 24]");
    rewrite(good, bad, true, "rbee.sd.unet.num_heads", NULL, NULL, set_heads0);
    expect_open_fails(bad, RB_E_FORMAT, "rbee.sd.unet.num_heads");
    rewrite(good, bad, true, "rbee.sd.family", NULL, NULL, set_family);
    expect_open_fails(bad, RB_E_FORMAT, "rbee.sd.family");
    rewrite(good, bad, true, "rbee.sd.vae.norm_num_groups", NULL, NULL, set_eps_str);
    expect_open_fails(bad, RB_E_FORMAT, "rbee.sd.vae.norm_num_groups must be an integer");
    rewrite(good, bad, true, "rbee.sd.unet.norm_eps", NULL, NULL, NULL);
    expect_open_fails(bad, RB_E_FORMAT, "rbee.sd.unet.norm_eps is missing");
    /* ComfyUI-GGUF shapes that do not fit */
    rewrite(good, bad, true, NULL, NULL, NULL, set_shape_str);
    expect_open_fails(bad, RB_E_FORMAT, "must be an array of 1 to 4 integers");
    rewrite(good, bad, true, NULL, NULL, NULL, set_shape_count);
    expect_open_fails(bad, RB_E_FORMAT, "has 384 elements, the stored tensor 576");
    /* not a GGUF file at all */
    char st[1024];
    expect_open_fails(tu_fixture(st, sizeof st, "diffusers/single_file/sd15.safetensors"), RB_E_FORMAT, "bad magic");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_city96_unet),
        cmocka_unit_test(test_sdcpp_files),
        cmocka_unit_test(test_quantized_open_clip),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
