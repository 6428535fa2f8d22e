/* The MMDiT and the T5 encoder built from an SD3 single file
 * (tests/data/sd3/single_file, the tiny sd3 pipeline in the original layout)
 * through the weight-name layer (sd_sd3_build, sd_sd3_mmdit_create,
 * sd_sd3_t5_create), and from its GGUF conversions, against diffusers'
 * outputs in tests/data/sd3/refs. MMDiT: denoiser_call.safetensors (t = 1000
 * and 437.5, batch [uncond, cond]); the single file and the f16 GGUF hold
 * the folder's f16 values, so they must meet the folder tolerance (h31's
 * test_sd_mmdit: 1e-5 of the largest output; measured 3.2e-7); q8_0 weights
 * move the output by their rounding (measured 8.7e-3; bound 2e-2, and it
 * must move). SD3.5's layout too: its MMDiT written in the original layout
 * here (sd3_single_ref.h) matches refs/sd35 to 2.6e-7 with the heads taken
 * from the qk-norm, and as q8_0 GGUF to 8.7e-3. T5: the last hidden states
 * of three prompts in refs/sd3/text.safetensors, 5.8e-7 from the single
 * file, 2.1e-2 from q8_0 (bound 5e-2). CLIP-L / CLIP-G with projection: the
 * penultimate and last hidden states and text_embeds of those prompts from
 * the single file, within 1e-5 (measured 1.6e-6). And the pipeline
 * (rb_sd_model_load with a configs folder): the sd3 single file and the
 * sd35 MMDiT alone (encoders and VAE from its folder) generate bit for bit
 * what their folders generate, as does the sd3 file's f16 GGUF; the sd35
 * MMDiT's q8_0 GGUF draws within 0.2 of the folder's pixels (measured
 * 0.072). Runs on the backend in
 * RBEE_TEST_BACKEND (default cpu). */
#include "sd_nets_ref.h"

#include <math.h>

#include "rbee/sd_pipeline.h"
#include "sd/sd_convert.h"
#include "sd/sd_sd3_nets.h"
#include "sd3_single_ref.h"

#define REL_TOL 1e-5
#define REL_TOL_Q8 2e-2 /* measured 8.7e-3 on the CPU backend */
#define Q8_PIXEL_TOL 0.2 /* max |pixel| difference in [0, 1]; measured 0.072 on the CPU backend */
#define REL_TOL_Q8_T5 5e-2 /* measured 2.1e-2: T5's unscaled attention and wide activations */

static rb_backend *backend(void) {
    const char *spec = getenv("RBEE_TEST_BACKEND");
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(spec && *spec ? spec : "cpu", NULL, &be, &err) != RB_OK) fail_msg("backend: %s", err.msg);
    return be;
}

#define OK(expr, err)                                                                                                 \
    do {                                                                                                              \
        rb_status s_ = (expr);                                                                                        \
        if (s_ != RB_OK) fail_msg("%s -> %s: %s", #expr, rb_status_str(s_), (err).msg);                               \
    } while (0)

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_tmp, sizeof g_tmp, "rbee_sd3d_");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_tmp);
}

/* Both reference calls through m; returns the largest |got - ref| / max|ref|. */
static double run_calls(rb_mmdit *m, rb_backend *be, const char *pipe) {
    char p[1024], rel[128];
    rb_st_set *r = NULL;
    rb_error err = {0};
    snprintf(rel, sizeof rel, "sd3/refs/%s/denoiser_call.safetensors", pipe);
    OK(rb_st_open(tu_data(p, sizeof p, rel), &r, &err), err);
    int64_t nx, nc, np, nt, no;
    const float *x = ref_f32(r, "hidden_states", &nx), *ctx = ref_f32(r, "encoder_hidden_states", &nc);
    const float *pooled = ref_f32(r, "pooled_projections", &np);
    const rb_mmdit_config *c = rb_mmdit_get_config(m);
    assert_int_equal(nx, 2 * c->in_channels * 8 * 8);
    const int64_t T = nc / (2 * c->joint_attention_dim);
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "call%d.timestep", k);
        const float *t = ref_f32(r, name, &nt);
        snprintf(name, sizeof name, "call%d.out", k);
        const float *ref = ref_f32(r, name, &no);
        rb_tensor xs = dev_tensor(be, 8, 8, c->in_channels, 2, x), cs = dev_tensor(be, c->joint_attention_dim, T, 2, 1, ctx);
        rb_tensor ps = dev_tensor(be, c->pooled_projection_dim, 2, 1, 1, pooled);
        rb_tensor o = dev_tensor(be, 8, 8, c->out_channels, 2, NULL);
        rb_mmdit_inputs in = {.sample = &xs, .context = &cs, .pooled = &ps, .timesteps = t};
        OK(rb_mmdit_forward(m, &in, &o, &err), err);
        float *got = dev_read(&o);
        const double d = max_abs_diff(got, ref, no) / max_abs(ref, no);
        if (d > worst) worst = d;
        free(got);
        rb_tensor_free(&xs);
        rb_tensor_free(&cs);
        rb_tensor_free(&ps);
        rb_tensor_free(&o);
    }
    rb_st_close(r);
    return worst;
}

static void test_single_file(void **state) {
    (void)state;
    rb_backend *be = backend();
    char p[1024], cfg[1024];
    rb_st_set *st = NULL;
    rb_error err = {0};
    OK(rb_st_open(tu_data(p, sizeof p, "sd3/single_file/sd3.safetensors"), &st, &err), err);
    sd_tensor_list tl;
    OK(sd_tensor_list_st(st, &tl, &err), err);
    sd_sd3 s;
    OK(sd_sd3_build(&tl, &s, &err), err);
    sd_tensor_list_free(&tl);
    sd_sd3_meta meta;
    /* the tiny MMDiT is 32 wide without qk-norm: its heads come from the folder */
    assert_int_equal(sd_sd3_meta_make(&s, NULL, &meta, &err), RB_E_UNSUPPORTED);
    OK(sd_sd3_meta_make(&s, tu_data(cfg, sizeof cfg, "sd3/pipelines/sd3"), &meta, &err), err);
    sd_weights ws;
    OK(sd_weights_init(&ws, NULL, false, sd_sd3_lookup, (void *)sd_sd3_part_map(&s, SD_SD3_MMDIT), "sd3.safetensors",
                       be, NULL, &err),
       err);
    rb_mmdit *m = NULL;
    OK(sd_sd3_mmdit_create(&s, &meta, &ws, &m, &err), err);
    const double d = run_calls(m, be, "sd3");
    print_message("single file: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL);
    rb_mmdit_free(m);
    sd_sd3_free(&s);
    rb_st_close(st);
    /* without heads the config is refused */
    rb_mmdit_config c;
    OK(rb_st_open(p, &st, &err), err);
    OK(sd_tensor_list_st(st, &tl, &err), err);
    OK(sd_sd3_build(&tl, &s, &err), err);
    sd_tensor_list_free(&tl);
    assert_int_equal(sd_sd3_mmdit_config(&s, NULL, &c, &err), RB_E_UNSUPPORTED);
    sd_sd3_free(&s);
    rb_st_close(st);
    rb_backend_destroy(be);
}

static double gguf_call(rb_dtype type) {
    rb_backend *be = backend();
    char in[1024], cfg[1024], out[512];
    snprintf(out, sizeof out, "%s/sd3-%s.gguf", g_tmp, rb_dtype_name(type));
    rb_convert_opts o = {.type = type};
    rb_error err = {0};
    OK(sd_convert_to_gguf(tu_data(in, sizeof in, "sd3/single_file/sd3.safetensors"), out, &o,
                          tu_data(cfg, sizeof cfg, "sd3/pipelines/sd3"), NULL, &err),
       err);
    sd_sd3_gguf *f = NULL;
    OK(sd_sd3_gguf_open(out, &f, &err), err);
    sd_weights ws;
    OK(sd_sd3_gguf_weights(f, SD_SD3_MMDIT, be, NULL, &ws, &err), err);
    rb_mmdit *m = NULL;
    OK(sd_sd3_mmdit_create(&f->sd3, &f->meta, &ws, &m, &err), err);
    sd_sd3_gguf_unref(f); /* the network keeps what it needs */
    const double d = run_calls(m, be, "sd3");
    rb_mmdit_free(m);
    rb_backend_destroy(be);
    return d;
}

static void test_gguf_f16(void **state) {
    (void)state;
    const double d = gguf_call(RB_F16);
    print_message("f16 GGUF: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL);
}

static void test_gguf_q8_0(void **state) {
    (void)state;
    const double d = gguf_call(RB_Q8_0);
    print_message("q8_0 GGUF: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL_Q8);
    assert_true(d > REL_TOL); /* the weights did change: the quantized path ran */
}

/* T5: the three prompts' hidden states from the single file's encoder (with
 * the folder's relative_attention_max_distance, 16 in the tiny model) and
 * from its q8_0 GGUF (which stores that value) against refs/sd3/text */
static double t5_calls(rb_t5 *m, rb_backend *be) {
    char p[1024];
    rb_st_set *r = NULL;
    rb_error err = {0};
    OK(rb_st_open(tu_data(p, sizeof p, "sd3/refs/sd3/text.safetensors"), &r, &err), err);
    static const char *const prompts[] = {"prompt", "negative", "long_prompt"};
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s.text_encoder_3.input_ids", prompts[k]);
        int32_t ids[24];
        ref_ids(r, name, ids, 24);
        snprintf(name, sizeof name, "%s.text_encoder_3.last_hidden_state", prompts[k]);
        int64_t n = 0;
        const float *ref = ref_f32(r, name, &n);
        const int64_t D = rb_t5_get_config(m)->d_model;
        assert_int_equal(n, 24 * D);
        rb_tensor o = dev_tensor(be, D, 24, 1, 1, NULL);
        OK(rb_t5_encode(m, ids, 24, 1, &o, &err), err);
        float *got = dev_read(&o);
        const double d = max_abs_diff(got, ref, n) / max_abs(ref, n);
        if (d > worst) worst = d;
        free(got);
        rb_tensor_free(&o);
    }
    rb_st_close(r);
    return worst;
}

static void test_t5(void **state) {
    (void)state;
    rb_backend *be = backend();
    char p[1024], cfg[1024], out[512];
    rb_st_set *st = NULL;
    rb_error err = {0};
    OK(rb_st_open(tu_data(p, sizeof p, "sd3/single_file/sd3.safetensors"), &st, &err), err);
    sd_tensor_list tl;
    OK(sd_tensor_list_st(st, &tl, &err), err);
    sd_sd3 s;
    OK(sd_sd3_build(&tl, &s, &err), err);
    sd_tensor_list_free(&tl);
    sd_sd3_meta meta;
    OK(sd_sd3_meta_make(&s, tu_data(cfg, sizeof cfg, "sd3/pipelines/sd3"), &meta, &err), err);
    assert_int_equal(meta.t5_max_distance, 16);
    sd_weights ws;
    OK(sd_weights_init(&ws, NULL, false, sd_sd3_lookup, (void *)sd_sd3_part_map(&s, SD_SD3_T5), "sd3.safetensors", be,
                       NULL, &err),
       err);
    rb_t5 *m = NULL;
    OK(sd_sd3_t5_create(&s, &meta, &ws, &m, &err), err);
    double d = t5_calls(m, be);
    print_message("T5 single file: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL);
    rb_t5_free(m);
    sd_sd3_free(&s);
    rb_st_close(st);
    snprintf(out, sizeof out, "%s/sd3-t5-q8_0.gguf", g_tmp);
    rb_convert_opts o = {.type = RB_Q8_0};
    OK(sd_convert_to_gguf(p, out, &o, cfg, NULL, &err), err);
    sd_sd3_gguf *f = NULL;
    OK(sd_sd3_gguf_open(out, &f, &err), err);
    OK(sd_sd3_gguf_weights(f, SD_SD3_T5, be, NULL, &ws, &err), err);
    OK(sd_sd3_t5_create(&f->sd3, &f->meta, &ws, &m, &err), err);
    sd_sd3_gguf_unref(f);
    d = t5_calls(m, be);
    print_message("T5 q8_0 GGUF: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL_Q8_T5);
    assert_true(d > REL_TOL);
    rb_t5_free(m);
    rb_backend_destroy(be);
}

/* CLIP-L and CLIP-G (with projection) from the single file: the penultimate
 * hidden states SD3 uses, the last ones and the projected pooled outputs of
 * the three prompts against refs/sd3/text */
static void test_clip(void **state) {
    (void)state;
    rb_backend *be = backend();
    char p[1024], cfg[1024];
    rb_st_set *st = NULL, *r = NULL;
    rb_error err = {0};
    OK(rb_st_open(tu_data(p, sizeof p, "sd3/single_file/sd3.safetensors"), &st, &err), err);
    sd_tensor_list tl;
    OK(sd_tensor_list_st(st, &tl, &err), err);
    sd_sd3 s;
    OK(sd_sd3_build(&tl, &s, &err), err);
    sd_tensor_list_free(&tl);
    sd_sd3_meta meta;
    OK(sd_sd3_meta_make(&s, tu_data(cfg, sizeof cfg, "sd3/pipelines/sd3"), &meta, &err), err);
    OK(rb_st_open(tu_data(p, sizeof p, "sd3/refs/sd3/text.safetensors"), &r, &err), err);
    static const char *const prompts[] = {"prompt", "negative", "long_prompt"};
    double worst = 0;
    for (int e = 0; e < 2; e++) {
        const sd_sd3_part part = e ? SD_SD3_CLIP_G : SD_SD3_CLIP_L;
        rb_clip_text_config c;
        assert_int_equal(sd_sd3_clip_config(&s, NULL, part, &c, &err), RB_E_UNSUPPORTED); /* 8 / 12 wide */
        sd_weights ws;
        OK(sd_weights_init(&ws, NULL, false, sd_sd3_lookup, (void *)sd_sd3_part_map(&s, part), "sd3.safetensors", be,
                           NULL, &err),
           err);
        rb_clip_text *m = NULL;
        OK(sd_sd3_clip_create(&s, &meta, part, &ws, &m, &err), err);
        const rb_clip_text_config *mc = rb_clip_text_get_config(m);
        const int64_t D = mc->hidden_size, P = mc->projection_dim;
        for (int k = 0; k < 3; k++) {
            char name[128];
            const char *enc = e ? "text_encoder_2" : "text_encoder";
            snprintf(name, sizeof name, "%s.%s.input_ids", prompts[k], e ? "tokenizer_2" : "tokenizer");
            int32_t ids[77];
            ref_ids(r, name, ids, 77);
            rb_tensor hid = dev_tensor(be, D, 77, 1, 1, NULL), last = dev_tensor(be, D, 77, 1, 1, NULL);
            rb_tensor emb = dev_tensor(be, P, 1, 1, 1, NULL);
            rb_clip_text_outputs out = {.hidden = &hid, .hidden_index = -2, .last_hidden = &last, .text_embeds = &emb};
            OK(rb_clip_text_encode(m, ids, 77, 1, &out, &err), err);
            const rb_tensor *got_t[3] = {&hid, &last, &emb};
            static const char *const ref_names[3] = {"hidden_states.1", "last_hidden_state", "text_embeds"};
            for (int o = 0; o < 3; o++) {
                snprintf(name, sizeof name, "%s.%s.%s", prompts[k], enc, ref_names[o]);
                int64_t n = 0;
                const float *ref = ref_f32(r, name, &n);
                float *got = dev_read(got_t[o]);
                const double d = max_abs_diff(got, ref, n) / max_abs(ref, n);
                if (d > worst) worst = d;
                if (d > REL_TOL) fail_msg("%s: %.3g", name, d);
                free(got);
            }
            rb_tensor_free(&hid);
            rb_tensor_free(&last);
            rb_tensor_free(&emb);
        }
        rb_clip_text_free(m);
    }
    print_message("CLIP-L/G single file: max |diff| / max |ref| = %.3g\n", worst);
    rb_st_close(r);
    sd_sd3_free(&s);
    rb_st_close(st);
    rb_backend_destroy(be);
}

/* SD3.5 (qk-norm, dual attention): the sd35 MMDiT in the original layout,
 * its heads from the qk-norm's size, no config folder; then as q8_0 GGUF */
static void test_sd35(void **state) {
    (void)state;
    rb_backend *be = backend();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/sd35.safetensors", g_tmp);
    snprintf(out, sizeof out, "%s/sd35-q8_0.gguf", g_tmp);
    size_t n = 0;
    uint8_t *im = sd35_original("model.diffusion_model.", &n);
    FILE *fp = fopen(in, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(im, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    free(im);
    rb_st_set *st = NULL;
    rb_error err = {0};
    OK(rb_st_open(in, &st, &err), err);
    sd_tensor_list tl;
    OK(sd_tensor_list_st(st, &tl, &err), err);
    sd_sd3 s;
    OK(sd_sd3_build(&tl, &s, &err), err);
    sd_tensor_list_free(&tl);
    sd_sd3_meta meta;
    OK(sd_sd3_meta_make(&s, NULL, &meta, &err), err);
    sd_weights ws;
    OK(sd_weights_init(&ws, NULL, false, sd_sd3_lookup, (void *)sd_sd3_part_map(&s, SD_SD3_MMDIT), in, be, NULL, &err),
       err);
    rb_mmdit *m = NULL;
    OK(sd_sd3_mmdit_create(&s, &meta, &ws, &m, &err), err);
    double d = run_calls(m, be, "sd35");
    print_message("sd35 single file: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL);
    rb_mmdit_free(m);
    sd_sd3_free(&s);
    rb_st_close(st);
    rb_convert_opts o = {.type = RB_Q8_0};
    OK(sd_convert_to_gguf(in, out, &o, NULL, NULL, &err), err);
    sd_sd3_gguf *f = NULL;
    OK(sd_sd3_gguf_open(out, &f, &err), err);
    OK(sd_sd3_gguf_weights(f, SD_SD3_MMDIT, be, NULL, &ws, &err), err);
    OK(sd_sd3_mmdit_create(&f->sd3, &f->meta, &ws, &m, &err), err);
    sd_sd3_gguf_unref(f);
    d = run_calls(m, be, "sd35");
    print_message("sd35 q8_0 GGUF: max |diff| / max |ref| = %.3g\n", d);
    assert_true(d <= REL_TOL_Q8);
    assert_true(d > REL_TOL);
    rb_mmdit_free(m);
    rb_backend_destroy(be);
}

/* rb_sd_model_load on single files with a configs folder: the sd3 file
 * (every component in it) and the sd35 MMDiT alone (text encoders and VAE
 * from the sd35 folder) generate exactly what their folders generate */
static void generate(rb_sd_model *m, rb_sd_output *out) {
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a red apple on a wooden table, studio light";
    p.negative_prompt = "blurry";
    p.steps = 2;
    p.guidance_scale = 6.0f;
    p.width = p.height = 64;
    p.max_sequence_length = 24;
    p.seed = 7;
    rb_error err = {0};
    OK(rb_sd_generate(m, &p, NULL, out, &err), err);
}

/* equal: the outputs must be the same bytes; else they must differ */
static void compare_with_folder(const char *file, const char *pipe_rel, bool equal) {
    rb_backend *be = backend();
    char dir[1024];
    tu_data(dir, sizeof dir, pipe_rel);
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    rb_sd_model *mf = NULL, *ms = NULL;
    rb_error err = {0};
    OK(rb_sd_model_load(dir, be, NULL, &mf, &err), err);
    o.config_dir = dir;
    OK(rb_sd_model_load(file, be, &o, &ms, &err), err);
    rb_sd_output a, b;
    generate(mf, &a);
    generate(ms, &b);
    assert_int_equal(a.count, b.count);
    assert_int_equal(a.width, b.width);
    const size_t nl = (size_t)a.count * (size_t)a.latent_channels * (size_t)a.latent_h * (size_t)a.latent_w;
    assert_int_equal(memcmp(a.latents, b.latents, nl * sizeof(float)) == 0, equal);
    if (equal)
        assert_memory_equal(a.pixels, b.pixels, (size_t)a.count * (size_t)a.width * (size_t)a.height * 3 * sizeof(float));
    rb_sd_output_free(&a);
    rb_sd_output_free(&b);
    rb_sd_model_free(mf);
    rb_sd_model_free(ms);
    rb_backend_destroy(be);
}

static void test_pipeline_single_file(void **state) {
    (void)state;
    char file[1024], in[512];
    compare_with_folder(tu_data(file, sizeof file, "sd3/single_file/sd3.safetensors"), "sd3/pipelines/sd3", true);
    /* its f16 GGUF conversion: the same values, the same image */
    char gg[512], cfgd[1024];
    snprintf(gg, sizeof gg, "%s/sd3-pipe-f16.gguf", g_tmp);
    rb_convert_opts co = {.type = RB_F16};
    rb_error ce = {0};
    OK(sd_convert_to_gguf(file, gg, &co, tu_data(cfgd, sizeof cfgd, "sd3/pipelines/sd3"), NULL, &ce), ce);
    compare_with_folder(gg, "sd3/pipelines/sd3", true);
    snprintf(in, sizeof in, "%s/sd35-mmdit.safetensors", g_tmp);
    size_t n = 0;
    uint8_t *im = sd35_original("model.diffusion_model.", &n);
    FILE *fp = fopen(in, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(im, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    free(im);
    compare_with_folder(in, "sd3/pipelines/sd35", true);
    /* the file's weights are the ones used: one changed bias changes the result */
    char changed[512];
    snprintf(changed, sizeof changed, "%s/sd35-changed.safetensors", g_tmp);
    im = sd35_original("model.diffusion_model.", &n);
    rb_st_set *st = NULL;
    rb_error e0 = {0};
    OK(rb_st_open_memory(im, n, &st, &e0), e0);
    const rb_st_tensor *bias = rb_st_find(st, "model.diffusion_model.final_layer.linear.bias");
    assert_non_null(bias);
    uint8_t *w = im + ((const uint8_t *)bias->data - im);
    w[1] ^= 0x10; /* the first f16's exponent */
    rb_st_close(st);
    fp = fopen(changed, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(im, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    free(im);
    compare_with_folder(changed, "sd3/pipelines/sd35", false);
    /* q8_0 GGUF of the sd35 MMDiT: loads and draws close to the folder's
     * image (quantized weights: not the same bytes) */
    char q8[512];
    snprintf(q8, sizeof q8, "%s/sd35-pipe-q8_0.gguf", g_tmp);
    co.type = RB_Q8_0;
    OK(sd_convert_to_gguf(in, q8, &co, NULL, NULL, &ce), ce);
    {
        rb_backend *bq = backend();
        char d35[1024];
        rb_sd_model_opts oq;
        rb_sd_model_opts_init(&oq);
        rb_sd_model *mf = NULL, *mq = NULL;
        OK(rb_sd_model_load(tu_data(d35, sizeof d35, "sd3/pipelines/sd35"), bq, NULL, &mf, &ce), ce);
        oq.config_dir = d35;
        OK(rb_sd_model_load(q8, bq, &oq, &mq, &ce), ce);
        rb_sd_output a, b;
        generate(mf, &a);
        generate(mq, &b);
        const size_t np = (size_t)a.count * (size_t)a.width * (size_t)a.height * 3;
        double worst = 0;
        for (size_t i = 0; i < np; i++) worst = fmax(worst, fabs((double)a.pixels[i] - (double)b.pixels[i]));
        print_message("sd35 q8_0 GGUF pipeline: max |pixel diff| = %.3g\n", worst);
        assert_true(worst > 0);
        assert_true(worst < Q8_PIXEL_TOL);
        rb_sd_output_free(&a);
        rb_sd_output_free(&b);
        rb_sd_model_free(mf);
        rb_sd_model_free(mq);
        /* without the configs folder: what it needs, said */
        assert_int_equal(rb_sd_model_load(q8, bq, NULL, &mq, &ce), RB_E_UNSUPPORTED);
        assert_non_null(strstr(ce.msg, "give a diffusers SD3 folder"));
        rb_backend_destroy(bq);
    }
    /* a file whose MMDiT the configs folder does not describe */
    rb_backend *be = backend();
    rb_sd_model_opts o;
    rb_sd_model_opts_init(&o);
    char dir[1024];
    o.config_dir = tu_data(dir, sizeof dir, "sd3/pipelines/sd3");
    rb_sd_model *m = NULL;
    rb_error err = {0};
    assert_int_equal(rb_sd_model_load(in, be, &o, &m, &err), RB_E_FORMAT);
    assert_null(m);
    assert_non_null(strstr(err.msg, "is not the one the configs folder describes"));
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_gguf_f16),
        cmocka_unit_test(test_gguf_q8_0),
        cmocka_unit_test(test_sd35),
        cmocka_unit_test(test_t5),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_pipeline_single_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
