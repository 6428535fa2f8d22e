/* Model loading from diffusers folders (rb_sd_model_load): what every
 * fixture pipeline is (arch, prediction, default size and sampler,
 * force_zeros, components), components left out (text only: conditioning
 * without generation; no VAE encoder: txt2img but not img2img; no VAE:
 * latents only), the fp16 weight variant, half-precision activations
 * reaching every network, an SDXL refiner-structured folder (second
 * encoder only, 5 time ids with the aesthetic scores) made from the sdxl
 * fixture, and the errors: no such path, not a model, a GGUF header, no
 * model_index.json, a missing component folder, an unsupported pipeline
 * class, a component of the wrong class, mismatched components. */
#include "sd_pipeline_ref.h"
#include "sd_nets_ref.h"

#include "sd/sd_pipeline_internal.h"

static void test_fixture_folders(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    static const struct {
        const char *pipe;
        rb_sd_arch arch;
        rb_sd_prediction pred;
        rb_sd_sampler_kind sampler;
        int n_enc;
        int64_t in_ch;
        bool zeros;
        float scaling;
    } k[] = {
        {"sd15", RB_SD_ARCH_SD1, RB_SD_PRED_EPSILON, RB_SD_SAMPLER_EULER, 1, 4, false, 0.18215f}, /* PNDM: euler */
        {"sd21v", RB_SD_ARCH_SD2, RB_SD_PRED_V, RB_SD_SAMPLER_DDIM, 1, 4, false, 0.18215f},
        {"sdxl", RB_SD_ARCH_SDXL, RB_SD_PRED_EPSILON, RB_SD_SAMPLER_EULER, 2, 4, true, 0.13025f},
        {"sd15-inpaint", RB_SD_ARCH_SD1, RB_SD_PRED_EPSILON, RB_SD_SAMPLER_EULER, 1, 9, false, 0.18215f},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char dir[256];
        pipeline_dir(dir, sizeof dir, k[i].pipe);
        rb_sd_model *m = load_model(be, dir, NULL);
        rb_sd_model_info info;
        rb_sd_model_get_info(m, &info);
        assert_int_equal(info.arch, k[i].arch);
        assert_string_equal(info.source, "diffusers");
        assert_int_equal(info.prediction, k[i].pred);
        assert_int_equal(info.default_sampler, k[i].sampler);
        assert_int_equal(info.n_text_encoders, k[i].n_enc);
        assert_int_equal(info.unet_in_channels, k[i].in_ch);
        assert_int_equal(info.force_zeros_for_empty_prompt, k[i].zeros);
        assert_true(info.vae_scaling_factor == k[i].scaling);
        assert_int_equal(info.default_width, 64); /* sample_size 8 x 8 */
        assert_int_equal(info.default_height, 64);
        assert_int_equal(info.components, RB_SD_LOAD_ALL);
        assert_true(info.weight_bytes > 0);
        for (int e = 0; e < k[i].n_enc; e++) assert_non_null(rb_sd_model_text_encoder(m, e));
        assert_null(rb_sd_model_text_encoder(m, k[i].n_enc));
        assert_non_null(rb_sd_model_unet(m));
        assert_non_null(rb_sd_model_vae(m));
        assert_ptr_equal(rb_sd_model_backend(m), be);
        assert_non_null(rb_sd_model_sched_config(m));
        printf("  %-14s %s, %d encoder(s), %.2f MiB\n", k[i].pipe, rb_sd_arch_name(info.arch), info.n_text_encoders,
               (double)info.weight_bytes / 1048576.0);
        rb_sd_model_free(m);
        tu_tmpdir_remove(dir);
    }
    rb_backend_destroy(be);
}

static void test_components(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256];
    pipeline_dir(dir, sizeof dir, "sd15");
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.components = RB_SD_LOAD_TEXT;
    rb_sd_model *m = load_model(be, dir, &o);
    assert_null(rb_sd_model_unet(m));
    assert_null(rb_sd_model_vae(m));
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a cat";
    rb_sd_cond c;
    rb_error err;
    TU_OK(rb_sd_encode_prompt(m, &p, &c, &err)); /* the text encoders alone suffice for the conditioning */
    assert_int_equal(c.rows, 2);
    rb_sd_cond_free(&c);
    rb_sd_output out;
    assert_int_equal(rb_sd_generate(m, &p, NULL, &out, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "UNet"));
    rb_sd_model_free(m);
    /* without the VAE encoder: txt2img works, img2img is refused clearly */
    o.components = RB_SD_LOAD_TEXT | RB_SD_LOAD_UNET | RB_SD_LOAD_VAE_DECODER;
    m = load_model(be, dir, &o);
    p.width = p.height = 64;
    p.steps = 2;
    TU_OK(rb_sd_generate(m, &p, NULL, &out, &err));
    rb_sd_output_free(&out);
    rb_image img;
    TU_OK(rb_image_alloc(&img, 64, 64, 3, NULL));
    p.init_image = &img;
    p.width = p.height = 0;
    assert_int_equal(rb_sd_generate(m, &p, NULL, &out, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "encoder"));
    rb_image_free(&img);
    rb_sd_model_free(m);
    /* without the VAE: latents only */
    o.components = RB_SD_LOAD_TEXT | RB_SD_LOAD_UNET;
    m = load_model(be, dir, &o);
    p.init_image = NULL;
    p.width = p.height = 64;
    assert_int_equal(rb_sd_generate(m, &p, NULL, &out, &err), RB_E_INVALID);
    p.skip_decode = true;
    TU_OK(rb_sd_generate(m, &p, NULL, &out, &err));
    assert_null(out.pixels);
    assert_null(out.images);
    assert_non_null(out.latents);
    rb_sd_output_free(&out);
    rb_sd_model_free(m);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

/* The UNet stored only as the fp16 variant; "fp16" picks it first when both exist. */
static void test_fp16_variant(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256], path[1024], src[1024];
    pipeline_dir(dir, sizeof dir, "sd15");
    snprintf(path, sizeof path, "%s/unet/diffusion_pytorch_model.safetensors", dir);
    char *real = realpath(path, NULL);
    assert_non_null(real);
    snprintf(src, sizeof src, "%s", real);
    free(real);
    unlink(path);
    snprintf(path, sizeof path, "%s/unet/diffusion_pytorch_model.fp16.safetensors", dir);
    st_xform x = {.to = RB_F16};
    st_rewrite(src, path, &x);
    rb_sd_model *m = load_model(be, dir, NULL);
    rb_sd_model_info a;
    rb_sd_model_get_info(m, &a);
    rb_sd_model_free(m);
    /* both present: the default takes the f32 file, "fp16" the half one (same f32 bytes once loaded) */
    snprintf(path, sizeof path, "%s/unet/diffusion_pytorch_model.safetensors", dir);
    TU_OK(symlink(src, path) == 0 ? RB_OK : RB_E_IO);
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.variant = "fp16";
    m = load_model(be, dir, &o);
    rb_sd_model_info b;
    rb_sd_model_get_info(m, &b);
    assert_int_equal(a.weight_bytes, b.weight_bytes);
    /* generation works on the half-precision UNet and stays close to the f32 one */
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a photograph of an astronaut riding a horse, highly detailed";
    p.steps = 2;
    p.seed = 3;
    rb_sd_output o16, o32;
    rb_error err;
    TU_OK(rb_sd_generate(m, &p, NULL, &o16, &err));
    rb_sd_model *m32 = load_model(be, dir, NULL);
    TU_OK(rb_sd_generate(m32, &p, NULL, &o32, &err));
    const size_t n = (size_t)o32.width * (size_t)o32.height * 3;
    const double d = max_abs_d(o16.pixels, o32.pixels, n);
    printf("  fp16 UNet weights vs f32: image max |diff| %.3g\n", d);
    assert_true(d > 0.0 && d < 2e-2);
    rb_sd_output_free(&o16);
    rb_sd_output_free(&o32);
    rb_sd_model_free(m32);
    rb_sd_model_free(m);
    o.variant = "bf16";
    assert_int_equal(rb_sd_model_load(dir, be, &o, &m, &err), RB_E_UNSUPPORTED);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

/* Half-precision activations (rb_sd_model_opts.act_dtype) reach every network and stay close to f32. */
static void test_act_dtype(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256];
    pipeline_dir(dir, sizeof dir, "sd15");
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    rb_sd_model *m32 = load_model(be, dir, &o);
    o.act_dtype = RB_F16;
    rb_sd_model *m16 = load_model(be, dir, &o);
    assert_int_equal(rb_unet_act_dtype(rb_sd_model_unet(m16)), RB_F16);
    assert_int_equal(rb_vae_act_dtype(rb_sd_model_vae(m16)), RB_F16); /* SD 1.x pipelines ignore force_upcast */
    assert_int_equal(rb_clip_text_act_dtype(rb_sd_model_text_encoder(m16, 0)), RB_F16);
    assert_int_equal(rb_unet_act_dtype(rb_sd_model_unet(m32)), RB_F32);
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a photograph of an astronaut riding a horse, highly detailed";
    p.steps = 3;
    rb_sd_output a, b;
    rb_error err;
    TU_OK(rb_sd_generate(m32, &p, NULL, &a, &err));
    TU_OK(rb_sd_generate(m16, &p, NULL, &b, &err));
    const double d = max_abs_d(a.pixels, b.pixels, (size_t)64 * 64 * 3);
    printf("  f16 activations vs f32: image max |diff| %.3g\n", d);
    assert_true(d > 0.0 && d < 5e-2);
    rb_sd_output_free(&a);
    rb_sd_output_free(&b);
    rb_sd_model_free(m16);
    rb_sd_model_free(m32);
    o.act_dtype = RB_Q8_0;
    rb_sd_model *bad = NULL;
    assert_int_not_equal(rb_sd_model_load(dir, be, &o, &bad, &err), RB_OK);
    assert_null(bad);
    printf("  %s\n", err.msg);
    tu_tmpdir_remove(dir);
    /* SDXL: the force_upcast VAE runs in f32 under f16 (diffusers' SDXL
     * pipelines upcast it); bf16 is kept */
    pipeline_dir(dir, sizeof dir, "sdxl");
    o.act_dtype = RB_F16;
    rb_sd_model *x16 = load_model(be, dir, &o);
    assert_int_equal(rb_unet_act_dtype(rb_sd_model_unet(x16)), RB_F16);
    assert_int_equal(rb_vae_act_dtype(rb_sd_model_vae(x16)), RB_F32);
    rb_sd_model_free(x16);
    o.act_dtype = RB_BF16;
    x16 = load_model(be, dir, &o);
    assert_int_equal(rb_vae_act_dtype(rb_sd_model_vae(x16)), RB_BF16);
    rb_sd_model_free(x16);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

static void expect_load_error(rb_backend *be, const char *path, rb_status want, const char *needle) {
    rb_sd_model *m = (rb_sd_model *)&m; /* must be reset to NULL */
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_sd_model_load(path, be, NULL, &m, &err);
    if (s != want) fail_msg("%s: status %s, expected %s (%s)", path, rb_status_str(s), rb_status_str(want), err.msg);
    assert_null(m);
    if (needle && !strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    printf("  %s\n", err.msg);
}

/* Replaces the first `from` of file path by `to`. */
static void edit_file(const char *path, const char *from, const char *to) {
    size_t n;
    char *t = tu_read_file(path, &n);
    char *at = strstr(t, from);
    if (!at) fail_msg("'%s' not in %s", from, path);
    unlink(path); /* a link to the fixture: write a new file */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(t, 1, (size_t)(at - t), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(t);
}

static void test_folder_errors(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256], p[1024], q[1024];
    expect_load_error(be, "/nonexistent/model", RB_E_NOT_FOUND, "no such");
    /* not a model: a text file, a GGUF header, a folder without model_index.json */
    assert_int_equal(tu_tmpdir_make(dir, sizeof dir, "rbee_sdl_"), 0);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    write_file(p, "hello", 5);
    expect_load_error(be, p, RB_E_UNSUPPORTED, "not a Stable Diffusion model");
    snprintf(p, sizeof p, "%s/m.gguf", dir);
    write_file(p, "GGUF\3\0\0\0garbage", 15);
    {
        rb_sd_model *m = NULL;
        rb_error err;
        assert_int_not_equal(rb_sd_model_load(p, be, NULL, &m, &err), RB_OK);
        assert_null(m);
        assert_true(err.msg[0] != '\0');
    }
    expect_load_error(be, dir, RB_E_NOT_FOUND, "model_index.json");
    tu_tmpdir_remove(dir);
    /* a component named by model_index.json but missing */
    pipeline_dir(dir, sizeof dir, "sd15");
    snprintf(p, sizeof p, "%s/vae", dir);
    snprintf(q, sizeof q, "%s/vae_gone", dir);
    assert_int_equal(rename(p, q), 0);
    expect_load_error(be, dir, RB_E_NOT_FOUND, "'vae'");
    assert_int_equal(rename(q, p), 0);
    /* pipeline and component classes this engine does not run */
    snprintf(p, sizeof p, "%s/model_index.json", dir);
    edit_file(p, "\"StableDiffusionPipeline\"", "\"StableDiffusion3Pipeline\"");
    expect_load_error(be, dir, RB_E_FORMAT, "no 'transformer' component"); /* an SD 1.x folder called SD3 */
    edit_file(p, "\"StableDiffusion3Pipeline\"", "\"StableDiffusionPipeline\"");
    edit_file(p, "\"UNet2DConditionModel\"", "\"SD3Transformer2DModel\"");
    expect_load_error(be, dir, RB_E_UNSUPPORTED, "SD3Transformer2DModel");
    edit_file(p, "\"SD3Transformer2DModel\"", "\"UNet2DConditionModel\"");
    tu_tmpdir_remove(dir);
    /* mismatched components: SD 2.x's text encoder (24 wide) with SD 1.x's UNet (16) */
    pipeline_dir(dir, sizeof dir, "sd15");
    char other[256];
    pipeline_dir(other, sizeof other, "sd21v");
    snprintf(p, sizeof p, "%s/text_encoder", dir);
    tu_tmpdir_remove(p);
    snprintf(q, sizeof q, "%s/text_encoder", other);
    assert_int_equal(rename(q, p), 0);
    expect_load_error(be, dir, RB_E_FORMAT, "mismatched components");
    tu_tmpdir_remove(other);
    tu_tmpdir_remove(dir);
    /* an SDXL pipeline whose second encoder is gone from model_index.json */
    pipeline_dir(dir, sizeof dir, "sdxl");
    snprintf(p, sizeof p, "%s/model_index.json", dir);
    edit_file(p, "\"CLIPTextModelWithProjection\"", "null");
    {
        rb_sd_model *m = NULL;
        rb_error err;
        assert_int_not_equal(rb_sd_model_load(dir, be, NULL, &m, &err), RB_OK);
        assert_null(m);
        printf("  %s\n", err.msg);
    }
    tu_tmpdir_remove(dir);
    /* NULL arguments */
    rb_sd_model *m = NULL;
    rb_error err;
    assert_int_equal(rb_sd_model_load(NULL, be, NULL, &m, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_model_load("x", NULL, NULL, &m, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_model_load("x", be, NULL, NULL, &err), RB_E_INVALID);
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    o.components = 0x100;
    assert_int_equal(rb_sd_model_load("x", be, &o, &m, &err), RB_E_INVALID);
    rb_sd_model_free(NULL);
    rb_backend_destroy(be);
}

/* Rewrites the safetensors file src to dst with the tensors whose names
 * hold one of subs[i] (and whose last torch dimension is from[i]) cut to
 * their first to[i] columns. */
static void write_sliced(const char *src, const char *dst, const char *const *subs, const int64_t *from,
                         const int64_t *to, int nrules) {
    size_t n;
    uint8_t *d = tu_read_file(src, &n);
    uint64_t hl = 0;
    memcpy(&hl, d, 8);
    json_error_t je;
    json_t *h = json_loadb((const char *)d + 8, (size_t)hl, 0, &je);
    assert_non_null(h);
    const uint8_t *data = d + 8 + hl;
    uint8_t *out = malloc(n);
    assert_non_null(out);
    size_t off = 0;
    const char *key;
    json_t *e;
    json_object_foreach(h, key, e) {
        if (strcmp(key, "__metadata__") == 0) continue;
        assert_string_equal(json_string_value(json_object_get(e, "dtype")), "F32");
        json_t *shape = json_object_get(e, "shape"), *offs = json_object_get(e, "data_offsets");
        const size_t a0 = (size_t)json_integer_value(json_array_get(offs, 0)),
                     a1 = (size_t)json_integer_value(json_array_get(offs, 1));
        const size_t nd = json_array_size(shape);
        const int64_t last = nd ? json_integer_value(json_array_get(shape, nd - 1)) : 1;
        int64_t keep = last;
        for (int r = 0; r < nrules; r++)
            if (strstr(key, subs[r]) && last == from[r]) keep = to[r];
        const size_t rows = (a1 - a0) / 4 / (size_t)last;
        for (size_t row = 0; row < rows; row++)
            memcpy(out + off + row * (size_t)keep * 4, data + a0 + row * (size_t)last * 4, (size_t)keep * 4);
        if (nd) json_array_set_new(shape, nd - 1, json_integer(keep));
        json_array_set_new(offs, 0, json_integer((json_int_t)off));
        off += rows * (size_t)keep * 4;
        json_array_set_new(offs, 1, json_integer((json_int_t)off));
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    size_t len = strlen(hs), padded = (len + 7) & ~(size_t)7;
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    uint64_t p8 = padded;
    fwrite(&p8, 8, 1, f);
    fwrite(hs, 1, len, f);
    for (size_t i = len; i < padded; i++) fputc(' ', f);
    fwrite(out, 1, off, f);
    fclose(f);
    free(hs);
    free(out);
    json_decref(h);
    free(d);
}

/* An SDXL refiner's structure from the sdxl fixture: the second encoder
 * only (its width 24 is the UNet's context), 5 time ids (the UNet's added
 * embedding takes 20 pooled + 5 x 8), an Img2Img pipeline class. */
static void test_refiner_folder(void **state) {
    (void)state;
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    char dir[256], p[1024], src[1024];
    pipeline_dir(dir, sizeof dir, "sdxl");
    snprintf(p, sizeof p, "%s/model_index.json", dir);
    unlink(p);
    static const char idx[] =
        "{\"_class_name\": \"StableDiffusionXLImg2ImgPipeline\", \"requires_aesthetics_score\": true,"
        " \"force_zeros_for_empty_prompt\": false, \"scheduler\": [\"diffusers\", \"EulerDiscreteScheduler\"],"
        " \"text_encoder\": [null, null], \"text_encoder_2\": [\"transformers\", \"CLIPTextModelWithProjection\"],"
        " \"tokenizer\": [null, null], \"tokenizer_2\": [\"transformers\", \"CLIPTokenizer\"],"
        " \"unet\": [\"diffusers\", \"UNet2DConditionModel\"], \"vae\": [\"diffusers\", \"AutoencoderKL\"]}";
    write_file(p, idx, strlen(idx));
    snprintf(p, sizeof p, "%s/unet/config.json", dir);
    edit_file(p, "\"cross_attention_dim\": 40", "\"cross_attention_dim\": 24");
    edit_file(p, "\"projection_class_embeddings_input_dim\": 68", "\"projection_class_embeddings_input_dim\": 60");
    snprintf(p, sizeof p, "%s/unet/diffusion_pytorch_model.safetensors", dir);
    char *real = realpath(p, NULL);
    assert_non_null(real);
    snprintf(src, sizeof src, "%s", real);
    free(real);
    unlink(p);
    static const char *const subs[3] = {"attn2.to_k.weight", "attn2.to_v.weight", "add_embedding.linear_1.weight"};
    static const int64_t from[3] = {40, 40, 68}, to[3] = {24, 24, 60};
    write_sliced(src, p, subs, from, to, 3);
    rb_sd_model *m = load_model(be, dir, NULL);
    rb_sd_model_info info;
    rb_sd_model_get_info(m, &info);
    assert_int_equal(info.arch, RB_SD_ARCH_SDXL_REFINER);
    assert_int_equal(info.n_text_encoders, 1);
    assert_false(info.force_zeros_for_empty_prompt);
    /* the conditioning: encoder 2's penultimate states and pooled output, 5 time ids */
    rb_st_set *text = open_refs("sdxl", "text.safetensors");
    rb_sd_params sp;
    rb_sd_params_init(&sp);
    sp.prompt = "a cinematic photo of a lighthouse on a cliff during a storm";
    sp.prompt_2 = "ignored by the refiner (its only encoder takes prompt)";
    sp.negative_prompt = "lowres, bad anatomy";
    sp.width = sp.height = 64;
    sp.aesthetic_score = 7.0f;
    rb_sd_cond c;
    rb_error err;
    TU_OK(rb_sd_encode_prompt(m, &sp, &c, &err));
    assert_int_equal(c.dim, 24);
    assert_int_equal(c.pooled_dim, 20);
    assert_int_equal(c.n_time_ids, 5);
    static const char *const tags[2] = {"negative", "prompt"};
    for (int r = 0; r < 2; r++) {
        char n1[96], n2[96];
        snprintf(n1, sizeof n1, "%s.text_encoder_2.hidden_states.2", tags[r]);
        snprintf(n2, sizeof n2, "%s.text_encoder_2.text_embeds", tags[r]);
        assert_true(max_abs_d(c.context + (size_t)r * 77 * 24, st_f32(text, n1, NULL), 77 * 24) <= 1e-5);
        assert_true(max_abs_d(c.pooled + r * 20, st_f32(text, n2, NULL), 20) <= 1e-5);
        const float want[5] = {64, 64, 0, 0, r == 0 ? 2.5f : 7.0f};
        for (int k = 0; k < 5; k++) assert_true(c.time_ids[r][k] == want[k]);
    }
    rb_sd_cond_free(&c);
    rb_st_close(text);
    /* img2img, as a refiner is used */
    rb_image img = decode_file(refs_path(p, sizeof p, "sdxl", "init_image.png"), 3);
    sp.init_image = &img;
    sp.width = sp.height = 0;
    sp.strength = 0.3;
    sp.steps = 10;
    rb_sd_output o;
    TU_OK(rb_sd_generate(m, &sp, NULL, &o, &err));
    assert_int_equal(o.n_evals, 3);
    for (size_t i = 0; i < (size_t)64 * 64 * 3; i++) assert_true(o.pixels[i] >= 0.0f && o.pixels[i] <= 1.0f);
    printf("  refiner-structured folder: %s, 5 time ids, img2img %d evaluations\n", rb_sd_arch_name(info.arch), o.n_evals);
    rb_sd_output_free(&o);
    rb_image_free(&img);
    rb_sd_model_free(m);
    tu_tmpdir_remove(dir);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_folders), cmocka_unit_test(test_components),
        cmocka_unit_test(test_fp16_variant),    cmocka_unit_test(test_act_dtype),
        cmocka_unit_test(test_folder_errors),   cmocka_unit_test(test_refiner_folder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
